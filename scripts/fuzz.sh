#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan into build-fuzz/ (or
# $TESSERA_FUZZ_BUILD_DIR), seeds their corpora from the conformance data, runs each harness for a time budget, and
# prints executions and corpus size per harness.  Exits non-zero when any harness found a crash, a leak, a timeout
# or an out-of-memory (libFuzzer leaves the input that did it in $build/fuzz-artifacts/HARNESS/).
#
#   scripts/fuzz.sh [SECONDS_PER_HARNESS]     (default 60)
#
# Environment: TESSERA_FUZZ_HARNESSES (default "model tensor plugin_report"), TESSERA_FUZZ_WORKERS (processes per
# harness, default 1; more use libFuzzer's -fork mode), TESSERA_BUILD_JOBS (default: all cores),
# TESSERA_BACKEND_DATA_DIR (default ../shared/onnx-backend-data).  The corpora are kept between runs and grow.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
build_dir=${TESSERA_FUZZ_BUILD_DIR:-build-fuzz}
harnesses=(${TESSERA_FUZZ_HARNESSES:-model tensor plugin_report})
workers=${TESSERA_FUZZ_WORKERS:-1}
jobs=${TESSERA_BUILD_JOBS:-$(nproc)}
data_dir=${TESSERA_BACKEND_DATA_DIR:-$PWD/../shared/onnx-backend-data}

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ is needed (libFuzzer); scripts/install_deps.sh installs it" >&2
  exit 1
fi

# ---- Build ---------------------------------------------------------------------------------------------------------
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTESSERA_SANITIZE=address,undefined -DTESSERA_FUZZ=ON -DTESSERA_WITH_CUDA=OFF >/dev/null
fi
cmake --build "$build_dir" -j "$jobs" --target tessera_fuzzers

# ---- Corpora -------------------------------------------------------------------------------------------------------
corpus_root=$build_dir/fuzz-corpus
python3 tests/fuzz/make_corpora.py "$data_dir" "$corpus_root"

# ---- Runs ----------------------------------------------------------------------------------------------------------
# Limits: a unit taking over 10 s is a hang; 2 GiB of RSS or one allocation of 2 GiB is an out-of-memory.  The
# harnesses also cap single allocations (max_allocation_size_mb in their __asan_default_options) so that a model
# asking for a huge tensor gets an error from the runtime instead of taking the machine's memory.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-}
artifacts_root=$build_dir/fuzz-artifacts
declare -A executions exit_codes
status=0
for h in "${harnesses[@]}"; do
  corpus=$corpus_root/$h
  artifacts=$artifacts_root/$h
  log=$build_dir/fuzz-$h.log
  mkdir -p "$corpus" "$artifacts"
  parallel=(); [ "$workers" -gt 1 ] && parallel=(-fork="$workers")
  echo "fuzz.sh: $h for ${seconds}s ($(ls "$corpus" | wc -l) corpus files), log $log"
  set +e
  "$build_dir/bin/fuzz_$h" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -dict=tests/fuzz/tessera.dict -artifact_prefix="$artifacts/" -print_final_stats=1 \
    "${parallel[@]}" >"$log" 2>&1
  rc=$?
  set -e
  exit_codes[$h]=$rc
  # -print_final_stats: "stat::number_of_executed_units: N"; fork mode reports "#N ... DONE" lines instead.
  n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  [ "$n" -eq 0 ] && n=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  executions[$h]=${n:-0}
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
    status=1
    echo "fuzz.sh: $h FAILED (exit $rc); artifacts in $artifacts:" >&2
    ls -l "$artifacts" >&2
    tail -n 60 "$log" >&2
  fi
done

echo
printf '%-16s %14s %14s %14s %6s\n' harness executions corpus_files corpus_bytes exit
for h in "${harnesses[@]}"; do
  corpus=$corpus_root/$h
  printf '%-16s %14s %14s %14s %6s\n' "$h" "${executions[$h]}" "$(ls "$corpus" | wc -l)" \
    "$(du -sb "$corpus" | cut -f1)" "${exit_codes[$h]}"
done
exit $status
