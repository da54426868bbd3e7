"""Build the wheel users install: ``python -m sluicegate.devtools.wheel [--out DIR]``.

One script for every place a wheel is made (``make wheel``, CI's installed-wheel test,
docker/Dockerfile's build stage):

1. the JVM read path's jar (``jvm_build``; a JDK is required here, not on a user's machine);
2. ``maturin build --release`` with the native Kafka reader, its shared libraries that are
   not part of manylinux (OpenSSL) copied in (``--auditwheel repair``, patchelf), tagged
   manylinux_2_34 (the glibc symbols it uses);
3. a check that the wheel holds the native module, the jar and its classpath, and one line
   with the wheel's name and size.

``--target aarch64`` cross-builds the linux aarch64 wheel on an x86_64 Debian machine with
Debian's cross compiler and arm64 OpenSSL (``CROSS_SETUP`` names the packages; docs/packaging.md
has how it was tested, under qemu).

Prints the wheel's path last; exits 1 naming what is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from sluicegate.devtools.jvm_build import JvmBuildError, build
from sluicegate.spark.jvm_classpath import CLASSPATH_FILE, JAR

ROOT = Path(__file__).resolve().parents[3]
COMPATIBILITY = "manylinux_2_34"
NATIVE_TARGET = Path.home() / ".cache" / "sluicegate" / "native-target"
"""Cargo's target dir, shared with ``make install``'s editable build (the crates are built
once). ``--auditwheel repair`` patches the linked library in place, and cargo's own copy
is the same file (a hard link): a later build that links nothing would ship, or install,
a library naming copies of OpenSSL that are not there. So the linked library is removed
before and after a wheel build: each build links it afresh (seconds)."""
MUST_HOLD = (
    "sluicegate/_native.abi3.so",
    f"sluicegate/spark/jvm/{JAR.name}",
    f"sluicegate/spark/jvm/{CLASSPATH_FILE.name}",
)


class WheelBuildError(RuntimeError):
    """The wheel could not be built, or lacks a part users need."""


CROSS_SETUP = (
    "dpkg --add-architecture arm64 && apt-get update && apt-get install -y gcc-aarch64-linux-gnu "
    "g++-aarch64-linux-gnu libssl-dev:arm64 zlib1g-dev:arm64 pkg-config"
)
AARCH64 = "aarch64-unknown-linux-gnu"


def cross_env(target: str) -> dict[str, str]:
    """What cargo, the cc crate and librdkafka's own configure need to build for ``target``:
    rdkafka-sys runs librdkafka's ./configure with the plain CC/CXX/AR, so those are the
    cross tools, and the build scripts' host compiles are named apart."""
    if target != AARCH64:
        raise WheelBuildError(f"no cross build for {target}: {AARCH64} only")
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        raise WheelBuildError(f"no aarch64 cross compiler; as root: {CROSS_SETUP}")
    gnu = "aarch64-linux-gnu"
    return {
        "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER": f"{gnu}-gcc",
        "CC_aarch64_unknown_linux_gnu": f"{gnu}-gcc",
        "CXX_aarch64_unknown_linux_gnu": f"{gnu}-g++",
        "AR_aarch64_unknown_linux_gnu": f"{gnu}-ar",
        "CC": f"{gnu}-gcc",
        "CXX": f"{gnu}-g++",
        "AR": f"{gnu}-ar",
        "RANLIB": f"{gnu}-ranlib",
        "CC_x86_64_unknown_linux_gnu": "gcc",
        "CXX_x86_64_unknown_linux_gnu": "g++",
        "AR_x86_64_unknown_linux_gnu": "ar",
        "HOST_CC": "gcc",
        "HOST_CXX": "g++",
        "PKG_CONFIG_ALLOW_CROSS": "1",
        "PKG_CONFIG_LIBDIR": f"/usr/lib/{gnu}/pkgconfig:/usr/share/pkgconfig",
        "PKG_CONFIG_PATH": "",
        "OPENSSL_LIB_DIR": f"/usr/lib/{gnu}",
        "OPENSSL_INCLUDE_DIR": "/usr/include",
    }


def build_wheel(out: Path, target: str | None = None) -> Path:
    if not (ROOT / "native" / "Cargo.toml").is_file():
        raise WheelBuildError(f"{ROOT} is not a sluicegate checkout: a wheel is built from one (editable install)")
    try:
        classpath, _ = build()
    except JvmBuildError as exc:
        raise WheelBuildError(f"the JVM read path's jar: {exc}") from None
    print(f"wheel: JVM read path jar {classpath.jar}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CARGO_BUILD_JOBS": os.environ.get("CARGO_BUILD_JOBS", "2")}
    cargo_target = Path(env.setdefault("CARGO_TARGET_DIR", str(NATIVE_TARGET)))
    if target is not None:
        env.update(cross_env(target))
    # patchelf (a dev dependency) sits beside this interpreter, maybe not on PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = [
        sys.executable, "-m", "maturin", "build", "--release", "--compatibility", COMPATIBILITY,
        "--auditwheel", "repair", "--out", str(out), *(["--target", target] if target else []),
    ]  # fmt: skip
    print(f"wheel: {' '.join(command[2:])} (cargo: minutes the first time on this machine)", flush=True)
    _unlink_linked(cargo_target)
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    finally:
        _unlink_linked(cargo_target)
    if done.returncode != 0:
        raise WheelBuildError(f"maturin failed:\n{(done.stderr or done.stdout).strip()[-3000:]}")
    made = sorted(out.glob("sluicegate-*.whl"), key=os.path.getmtime)  # maturin's is the newest
    if not made:
        raise WheelBuildError(f"maturin wrote no wheel into {out}")
    wheel = made[-1]
    check_wheel(wheel)
    return wheel


def _unlink_linked(target: Path) -> None:
    for linked in target.glob("**/libsluicegate_native*.so"):
        linked.unlink()


def check_wheel(wheel: Path) -> None:
    """The wheel holds every fast path (the native module, the jar and its classpath)."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = [name for name in MUST_HOLD if name not in names]
    if missing:
        raise WheelBuildError(f"{wheel.name} lacks {', '.join(missing)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the wheel goes (default: dist/)")
    parser.add_argument("--target", choices=["aarch64"], help="cross-build for linux aarch64 (default: this machine)")
    args = parser.parse_args()
    try:
        wheel = build_wheel(args.out, AARCH64 if args.target == "aarch64" else None)
    except WheelBuildError as exc:
        print(f"wheel: not built: {exc}", file=sys.stderr)
        return 1
    print(f"wheel: {wheel.name}, {wheel.stat().st_size / 1e6:.1f} MB, with the native reader and the jar")
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
