#!/usr/bin/env bash
# Configures and builds Tessera (Release) into build/ (or $TESSERA_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TESSERA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
