#!/usr/bin/env bash
# Runs every test: installs what is missing, builds, then ctest (unit tests and the conformance suites).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
build_dir=${TESSERA_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
