#!/usr/bin/env bash
# The Python package as a user gets it: `pip install ./bindings/python` and the wheel of scripts/build_wheel.sh,
# each into a fresh venv, then, from another directory and with no TESSERA_* variable set, `import tessera` runs a
# model, finds its plugins, and the `tessera` command is on the venv's PATH.
#   tests/packaging/install_test.sh WORKDIR
# WORKDIR keeps CMake's build tree (shared by both builds, so the second one is incremental) and the venvs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mkdir -p "$1" && cd "$1" && pwd)
unset TESSERA_LIBRARY TESSERA_PLUGIN_PATH PYTHONPATH
export TESSERA_WHEEL_BUILD_DIR=$work/cmake-build
rm -rf "$work/dist" "$work/venv-wheel" "$work/venv-source" "$work/elsewhere"
mkdir -p "$work/elsewhere"

check() {  # check VENV: the installed package works from an unrelated directory
  local venv=$1
  (
    cd "$work/elsewhere"
    "$venv/bin/python" - "$repo/models/default.onnx" <<'PY'
import os, sys
import numpy as np
import tessera
assert not os.environ.get("TESSERA_LIBRARY")
package = os.path.dirname(tessera.__file__)
assert tessera.library_path.startswith(os.path.join(package, "lib")), tessera.library_path
session = tessera.InferenceSession(sys.argv[1])
image = session.get_inputs()[0]
shape = [d if isinstance(d, int) else 1 for d in image.shape]
(probabilities,) = session.run(None, {image.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)})
assert np.isclose(probabilities.sum(), 1.0, atol=1e-4), probabilities.sum()
assert "CPUExecutionProvider" in tessera.get_available_providers()
print("python ok:", tessera.__version__, tessera.library_path)
PY
    "$venv/bin/tessera" plugins | grep -q cpu
    "$venv/bin/tessera" run > /dev/null
    echo "command ok: $venv/bin/tessera"
  )
}

# 1. The wheel, into a fresh venv.
"$repo/scripts/build_wheel.sh" "$work/dist"
python3 -m venv "$work/venv-wheel"
"$work/venv-wheel/bin/pip" install -q "$work"/dist/tessera_runtime-*.whl
check "$work/venv-wheel"
# The wheel carries its own run paths: nothing outside the package is searched for Tessera's libraries.
readelf -d "$work/venv-wheel"/lib/python*/site-packages/tessera/bin/tessera | grep -q 'RUNPATH.*\$ORIGIN/../lib'

# 2. Straight from the source tree, as the README says.
python3 -m venv "$work/venv-source"
"$work/venv-source/bin/pip" install -q "$repo/bindings/python" -Cbuild-dir="$TESSERA_WHEEL_BUILD_DIR"
check "$work/venv-source"
echo "install_test: both installs work"
