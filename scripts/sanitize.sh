#!/usr/bin/env bash
# Runs the tests under sanitizers, building only what they need (clang when installed, else the default compiler).
#
#   scripts/sanitize.sh address   ASan + UBSan into build-asan/: core_tests, cpu_kernel_tests, and the conformance
#                                 runner over the node suite
#   scripts/sanitize.sh thread    TSan into build-tsan/: core_tests, the concurrency stress tests included
#
# Every report is written to $build/sanitizer-reports/ (log_path), so that a report in a forked conformance case or
# in a test that still passes is not lost; the script fails when any report exists or any test fails.
# Environment: TESSERA_SANITIZE_BUILD_DIR (another build directory, e.g. build-fuzz, whose ASan+UBSan build
# scripts/fuzz.sh made: coverage instrumentation changes nothing here and the build is shared), TESSERA_BUILD_JOBS
# (default: all cores), TESSERA_STRESS_RUNS (TSan: runs per thread of the stress test, default 1000).
#
# The Python binding tests are not run: libtessera built with clang's ASan needs its runtime preloaded into the
# python interpreter (LD_PRELOAD), and then every leak of CPython and numpy is reported too; the C API they wrap is
# what core_tests and the conformance runner exercise here.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-address}
jobs=${TESSERA_BUILD_JOBS:-$(nproc)}
case "$mode" in
  address)
    build_dir=${TESSERA_SANITIZE_BUILD_DIR:-build-asan}
    sanitizers=address,undefined
    targets=(core_tests cpu_kernel_tests tessera_conformance)
    ;;
  thread)
    build_dir=${TESSERA_SANITIZE_BUILD_DIR:-build-tsan}
    sanitizers=thread
    targets=(core_tests)
    ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread" >&2
    exit 2
    ;;
esac

# ---- Build ---------------------------------------------------------------------------------------------------------
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  compilers=(); command -v clang++ >/dev/null && compilers=(CC=clang CXX=clang++)
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  env "${compilers[@]}" cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTESSERA_SANITIZE="$sanitizers" -DTESSERA_WITH_CUDA=OFF >/dev/null
fi
configured=$(sed -n 's/^TESSERA_SANITIZE:STRING=//p' "$build_dir/CMakeCache.txt")
if [ "$configured" != "$sanitizers" ]; then
  echo "sanitize.sh: $build_dir is configured with TESSERA_SANITIZE='$configured', not '$sanitizers'" >&2
  exit 2
fi
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"

# ---- Runtime options -----------------------------------------------------------------------------------------------
reports=$PWD/$build_dir/sanitizer-reports/$mode
rm -rf "$reports"
mkdir -p "$reports"
supp=$PWD/tests/sanitizers
common="log_path=$reports/report:print_stacktrace=1"
export ASAN_OPTIONS="$common:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="$common:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="$common:halt_on_error=0:second_deadlock_stack=1:suppressions=$supp/tsan.supp"

failed=()
run() {  # run NAME COMMAND...: records a failure instead of stopping, so that every report is collected
  local name=$1; shift
  echo "==== $name"
  local start=$SECONDS
  if "$@"; then echo "==== $name passed ($((SECONDS - start)) s)"; else failed+=("$name"); echo "==== $name FAILED"; fi
}

bin=$build_dir/bin
if [ "$mode" = address ]; then
  run core_tests "$bin/core_tests" --gtest_brief=1
  run cpu_kernel_tests "$bin/cpu_kernel_tests" --gtest_brief=1
  # One case at a time: the runner forks a child per case, and each child has ASan's shadow memory.
  run conformance_node "$bin/tessera_conformance" --suite node --jobs 1 --timeout 300
else
  export TESSERA_STRESS_RUNS=${TESSERA_STRESS_RUNS:-1000}  # about 8 s under TSan; lower it on a slow machine
  run core_tests "$bin/core_tests" --gtest_brief=1
fi

# ---- Verdict -------------------------------------------------------------------------------------------------------
# The plugin isolation tests load plugins that crash on purpose (tests/plugins/misbehaving.c) in the probe process,
# which the sanitizer reports like any crash: those reports are the test working, not findings.
for f in "$reports"/*; do
  [ -e "$f" ] || continue
  if grep -q "SUMMARY: .*tests/plugins/misbehaving.c" "$f" && grep -q "tessera-plugin-scanner" "$f"; then rm -f "$f"; fi
done
if [ -n "$(ls -A "$reports")" ]; then
  echo "sanitize.sh: sanitizer reports in $reports:" >&2
  for f in "$reports"/*; do
    echo "---- $f" >&2
    head -n 80 "$f" >&2
  done
  failed+=("sanitizer reports")
fi
if ((${#failed[@]})); then
  echo "sanitize.sh ($mode): FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize.sh ($mode): clean"
