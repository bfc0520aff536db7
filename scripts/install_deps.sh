#!/usr/bin/env bash
# Installs what Tessera needs to build and test, idempotently: Debian packages, then the pinned Python tools.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang, libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) and ninja-build serve scripts/fuzz.sh and
# scripts/sanitize.sh, which .ci/run runs after the tests.  nlohmann-json3-dev: the Triton backend reads and writes
# model configurations as JSON (backends/triton).  python3-venv: the Triton test (tests/triton/run_tests.sh) and
# benchmarks/compare.py make venvs, and Debian's python3 cannot without it (the Triton test would be skipped).
# g++-aarch64-linux-gnu and the arm64 OpenBLAS (multiarch): tests/portability/generic_build.sh builds the CPU
# provider for aarch64.
packages=(build-essential cmake pkg-config libprotobuf-dev protobuf-compiler libonnx-dev libboost-dev
          libboost-filesystem-dev libfmt-dev libopenblas-dev libopenblas0-serial libgtest-dev graphviz python3-pip
          libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev libzip-dev
          clang libclang-rt-14-dev ninja-build nlohmann-json3-dev python3-venv g++-aarch64-linux-gnu)
arm64_packages=(libopenblas-pthread-dev:arm64)
missing=() missing_arm64=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
for p in "${arm64_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_arm64+=("$p")
done
if ((${#missing[@]} + ${#missing_arm64[@]})); then
  echo "installing: ${missing[*]} ${missing_arm64[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  ((${#missing_arm64[@]})) && ! dpkg --print-foreign-architectures | grep -qx arm64 &&
    $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  ((${#missing[@]})) && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  # Best effort: without them only the aarch64 build test is skipped.
  ((${#missing_arm64[@]})) && { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_arm64[@]}" \
    >/dev/null || echo "warning: ${missing_arm64[*]} not installed: the test cpu_generic_build will be skipped"; }
fi

if ! python3 - <<'PY' 2>/dev/null
import importlib.metadata as md, sys
want = {}
for line in open("requirements-dev.txt"):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        want[name] = version
sys.exit(0 if all(md.version(n) == v for n, v in want.items()) else 1)
PY
then
  python3 -m pip install -q --disable-pip-version-check -r requirements-dev.txt
fi
