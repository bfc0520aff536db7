#!/usr/bin/env bash
# Runs every test: installs what is missing, builds, then ctest (unit tests and the conformance suites).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
build_dir=${TESSERA_BUILD_DIR:-build}
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
status=0
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@" | tee "$summary" || status=$?

# ctest lists the tests it skipped (exit status 77: a missing tool, no network) but not why, and a skipped test
# looks like a pass at a glance.  Each says why in its output, which LastTest.log keeps: its SKIPPED lines (or its
# last lines) are printed here, after ctest's own output, which is left as it is.
log="$build_dir/Testing/Temporary/LastTest.log"
sed -n 's/^[[:space:]]*[0-9]\{1,\} - \(.*\) (Skipped)$/\1/p' "$summary" | while IFS= read -r name; do
  output=$(awk -v name="$name" '
    !found && match($0, /^[0-9]+\/[0-9]+ Testing: /) && substr($0, RLENGTH + 1) == name { found = 1; next }
    found && !in_output && $0 == "Output:" { in_output = 1; getline; next }
    in_output && $0 == "<end of output>" { exit }
    in_output { print }' "$log" 2>/dev/null || true)
  reason=$(grep 'SKIPPED' <<<"$output" || tail -n 3 <<<"$output")
  reason=${reason//$'\n'/ | }
  echo "skipped: $name: ${reason:-(no output in $log)}"
done
exit "$status"
