#!/usr/bin/env bash
# Writes the node conformance suite of the onnx release pinned in onnx-node-suite-requirements.txt into OUT
# (OUT/node/...), for tessera_conformance.  onnx no longer ships the suite as data, so it is generated from the
# package's own case definitions.  The venv (OUT/venv) and the cases are kept: a second run with the same pins does
# nothing.  The first run needs PyPI.
#
# usage: onnx_node_suite.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
requirements="$here/onnx-node-suite-requirements.txt"
venv="$out/venv"
mkdir -p "$out"

# The venv is rebuilt when the pins change.
if ! cmp -s "$requirements" "$venv/requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"; then
    echo "onnx_node_suite.sh: could not install $(grep '^onnx==' "$requirements") from PyPI into $venv" >&2
    rm -rf "$venv"
    exit 1
  fi
  cp "$requirements" "$venv/requirements.txt"
fi
exec "$venv/bin/python" "$here/generate_node_cases.py" "$out"
