#!/usr/bin/env bash
# One command on a fresh machine: install what is missing, build, and run the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
build_dir=${TESSERA_BUILD_DIR:-build}
"$build_dir/bin/tessera" plugins
"$build_dir/bin/tessera" run
