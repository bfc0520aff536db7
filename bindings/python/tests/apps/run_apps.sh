#!/usr/bin/env bash
# Runs the applications of apps.py on onnxruntime and on Tessera (tessera standing in for the onnxruntime module)
# and checks that they find the same things.  The applications and their pinned dependencies go into a venv in the
# build tree, reused while requirements.txt is unchanged; the first run needs PyPI.
# Usage: run_apps.sh VENV_DIR LIBTESSERA
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv=$1; library=$2
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi
export PYTHONPATH="$here/../..${PYTHONPATH:+:$PYTHONPATH}"
export TESSERA_LIBRARY="$library"
reference=$("$venv/bin/python" -W ignore "$here/apps.py" onnxruntime)
ours=$("$venv/bin/python" -W ignore "$here/apps.py" tessera)
echo "onnxruntime: $reference"
echo "tessera:     $ours"
"$venv/bin/python" - "$reference" "$ours" <<'PY'
import json, sys
ref, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = True
for app in ref:
    if [r[0] for r in ref[app]] != [g[0] for g in got[app]]:
        print(f"{app}: found {[g[0] for g in got[app]]}, onnxruntime {[r[0] for r in ref[app]]}"); ok = False
    for r, g in zip(ref[app], got[app]):
        if abs(r[1] - g[1]) > 2e-3:
            print(f"{app}: {g[0]!r} scored {g[1]}, onnxruntime {r[1]}"); ok = False
if not ref["ocr"] or not ref["magika"]:
    print("the applications found nothing: the check would prove nothing"); ok = False
print("same results" if ok else "results differ")
sys.exit(0 if ok else 1)
PY
