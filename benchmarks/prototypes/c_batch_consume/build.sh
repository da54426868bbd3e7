#!/usr/bin/env bash
# Builds libscb.so (the C prototype of issue 18, design B); not part of `make install`.
#
#   benchmarks/prototypes/c_batch_consume/build.sh           # against confluent-kafka's bundled librdkafka
#   RDKAFKA=debian benchmarks/prototypes/c_batch_consume/build.sh   # against Debian's librdkafka1 (2.0.2)
#
# Headers: Debian's librdkafka-dev (apt-get install -y librdkafka-dev) in both cases.
# RDKAFKA=wheel links the .so to the librdkafka the venv's confluent-kafka wheel carries
# (confluent_kafka.libs/librdkafka-<hash>.so.1, the very library the Python path uses), by
# its path, with an rpath to that folder: one librdkafka in the process, same version on
# both sides of the benchmark. The headers are older (2.0.2) than that library (2.16):
# fine for the calls made here (all in librdkafka's stable C ABI since 1.x), but see README.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
mode="${RDKAFKA:-wheel}"
test -f /usr/include/librdkafka/rdkafka.h || { echo "no librdkafka headers: apt-get install -y librdkafka-dev" >&2; exit 1; }
cflags=(-O2 -g -fPIC -shared -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unused-parameter)
case "$mode" in
  wheel)
    libdir="$("$py" -c 'import confluent_kafka, pathlib; print(pathlib.Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs")')"
    lib="$(ls "$libdir"/librdkafka-*.so.1 | head -1)"
    cc "${cflags[@]}" -o "$here/libscb.so" "$here/scb.c" "$lib" -Wl,-rpath,"$libdir"
    ;;
  debian)
    cc "${cflags[@]}" -o "$here/libscb-debian.so" "$here/scb.c" -lrdkafka
    ;;
  *) echo "RDKAFKA is wheel or debian" >&2; exit 2 ;;
esac
echo "built ($mode):"; ls -l "$here"/libscb*.so
