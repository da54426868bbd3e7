#!/usr/bin/env bash
# The install steps of the sluicegate image: docker/Dockerfile's second stage is this
# script, and CI's installed-wheel tests make their venvs with it
# (tests/support/wheel_install.py), so the two cannot drift. In order:
#
#   --system      (image) Java 17's runtime and procps with apt-get; as root only
#   --user NAME   (image) a user of its own (uid 10001) to run as, with a home; as root
#                 only: otherwise skipped, saying so (CI runs as whoever it is)
#   --data DIR    (image) a directory that user owns (volumes: outputs, checkpoints)
#   a venv at --prefix DIR with the wheel and its extras (--extras, default spark: the
#   image runs the coordinator, the readers and Spark), from PyPI
#   --fetch       (image) the JVM read path's Kafka jars fetched into the user's cache now
#                 (sluicegate doctor --fetch), so a container needs no Maven Central
#   `sluicegate doctor`, as that user: the install fails if its fast paths are not all in
#
# docker/install-image.sh --wheel dist/sluicegate-*.whl --prefix /opt/sluicegate \
#     [--extras spark] [--python python3] [--system] [--user sluicegate] [--data /data] [--fetch]
set -euo pipefail

wheel="" prefix="" extras="spark" python="python3" user="" data="" system=0 fetch=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wheel) wheel="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --extras) extras="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --user) user="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --system) system=1; shift ;;
    --fetch) fetch=1; shift ;;
    *) echo "install-image: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$wheel" || -z "$prefix" ]]; then
  echo "install-image: --wheel and --prefix are required" >&2
  exit 2
fi
if [[ ! -f "$wheel" ]]; then
  echo "install-image: no wheel at $wheel" >&2
  exit 2
fi
root=0
[[ "$(id -u)" == 0 ]] && root=1

if [[ $system == 1 ]]; then
  if [[ $root == 1 ]]; then
    apt-get update
    apt-get install -y --no-install-recommends openjdk-17-jre-headless procps
    rm -rf /var/lib/apt/lists/*
  else
    echo "install-image: not root: Java's runtime not installed with apt-get (the java on PATH is used)"
  fi
fi

as_user=()
if [[ -n "$user" ]]; then
  if [[ $root == 1 ]]; then
    id -u "$user" >/dev/null 2>&1 || useradd --create-home --uid 10001 "$user"
    as_user=(runuser -u "$user" --)
  else
    echo "install-image: not root: no user $user made; it runs as $(id -un)"
  fi
fi
if [[ -n "$data" ]]; then
  mkdir -p "$data"
  [[ ${#as_user[@]} -gt 0 ]] && chown "$user" "$data"
fi

requirement="$wheel"
[[ -n "$extras" ]] && requirement="$wheel[$extras]"
"$python" -m venv "$prefix"
"$prefix/bin/python" -m pip install --quiet --disable-pip-version-check "$requirement"
echo "install-image: $(basename "$wheel")${extras:+ [$extras]} in $prefix"

if [[ $fetch == 1 ]]; then
  "${as_user[@]}" "$prefix/bin/sluicegate" doctor --fetch
else
  "${as_user[@]}" "$prefix/bin/sluicegate" doctor
fi
