#!/usr/bin/env bash
# Runs the Triton backend tests (tests/triton) against a real tritonserver.
#
# The server (nvidia-pytriton's tritonserver 2.51.0 binary) and the clients come from PyPI, pinned in
# requirements.txt, into a venv in the build tree that is reused while requirements.txt is unchanged.  When the venv
# cannot be made (no PyPI) or the server cannot run here, the tests are skipped with the reason: exit status 77,
# which ctest reports as skipped.
#
# Usage: run_tests.sh VENV_DIR BUILD_DIR BACKEND_DIR TESSERA_CLI LIBTESSERA BACKEND_DATA_DIR RESULTS_JSON [pytest args]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv=$1 build_dir=$2 backend_dir=$3 cli=$4 library=$5 data_dir=$6 results=$7
shift 7
skip() { echo "SKIPPED: Triton backend tests: $*"; exit 77; }

if [ ! -f "$backend_dir/tessera/libtriton_tessera.so" ]; then
  echo "error: the backend is not built: no $backend_dir/tessera/libtriton_tessera.so"
  exit 1
fi
[ -d "$data_dir/light" ] || skip "no light models in $data_dir/light"

if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv" || skip "python3 -m venv failed"
  # Without PyPI, each request pip makes fails after 3 tries of 20 s (pip's default: 6 tries of 15 s), so the skip
  # comes sooner.
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 20 --retries 2 \
       -r "$here/requirements.txt"; then
    rm -rf "$venv"
    skip "pip could not install $here/requirements.txt" \
         "(nvidia-pytriton==0.7.0 carries the tritonserver binary; is PyPI reachable?)"
  fi
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi

server=$("$venv/bin/python" -c 'import os, pytriton
print(os.path.join(os.path.dirname(pytriton.__file__), "tritonserver", "bin", "tritonserver"))')
[ -x "$server" ] || skip "nvidia-pytriton has no tritonserver binary at $server"
# The binary needs glibc 2.35 and its bundled libraries: --help (which exits with 1) shows whether it runs at all.
help=$("$server" --help 2>&1 || true)
grep -q -- "--model-repository" <<<"$help" || skip "tritonserver does not run on this machine: $(head -3 <<<"$help")"

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-triton.XXXXXX")
trap 'rm -rf "$work"' EXIT
export TRITONSERVER="$server" TRITON_TEST_BACKEND_DIR="$backend_dir" TESSERA_CLI="$cli" TESSERA_LIBRARY="$library"
export TESSERA_BACKEND_DATA="$data_dir" TRITON_TEST_RESULTS="$results" TRITON_TEST_WORK="$work"
export TRITON_TEST_BUILD_DIR="$build_dir"
export PYTHONPATH="$here/../../bindings/python${PYTHONPATH:+:$PYTHONPATH}"
# One BLAS thread in the test process: its numpy must not compete with the server for the cores it measures.  The
# server and `tessera run` are to run as they would anywhere, so harness.child_env() gives them back the caller's
# values (TRITON_TEST_OUTER_*; unset when the caller had none).
export TRITON_TEST_PROCESS_ONLY="OPENBLAS_NUM_THREADS OMP_NUM_THREADS"
for var in $TRITON_TEST_PROCESS_ONLY; do
  if [ -n "${!var+set}" ]; then export "TRITON_TEST_OUTER_$var=${!var}"; else unset "TRITON_TEST_OUTER_$var"; fi
done
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
rm -f "$results"
cd "$here"
status=0
"$venv/bin/python" -m pytest -q -s -p no:cacheprovider -o console_output_style=classic "$@" || status=$?
if [ "$status" -ne 0 ]; then
  for log in "$work"/*.log; do
    [ -f "$log" ] && { echo "==== last lines of $log"; tail -40 "$log"; }
  done
fi
exit "$status"
