#!/usr/bin/env bash
# Builds the Python package as a wheel (tessera_runtime-VERSION-py3-none-PLATFORM.whl) into dist/ (or $1): the
# native library, its plugins and the `tessera` command inside the package, found through $ORIGIN run paths, so the
# wheel installs into any environment of this platform and runs with no environment variable.  The libraries it
# links (protobuf, onnx, boost, fmt, OpenBLAS, the image codecs) come from the system, as scripts/install_deps.sh
# installs them.  TESSERA_WHEEL_BUILD_DIR keeps CMake's build tree between runs (default: a temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
args=()
if [ -n "${TESSERA_WHEEL_BUILD_DIR:-}" ]; then
  args+=("-Cbuild-dir=$TESSERA_WHEEL_BUILD_DIR")
fi
python3 -m pip wheel ./bindings/python --no-deps -w "$out" "${args[@]}"
ls "$out"/tessera_runtime-*.whl
