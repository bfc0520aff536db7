#!/usr/bin/env bash
# End-to-end checks of the `tessera` command: plugin report with broken plugins present, runs that still work, bench
# reports, and bad input reported as one error line with a non-zero exit status.
# Usage: test_cli.sh TESSERA_BINARY TEST_PLUGIN_DIR BACKEND_DATA_DIR [SAMPLE_PLUGIN_DIR [MISBEHAVING_PLUGIN_DIR]]
set -uo pipefail
tessera=$1; test_plugins=$2; data=$3; sample_plugins=${4:-$(dirname "$tessera")/../lib/tessera/samples}
misbehaving=${5:-}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"  # plugin probe verdicts: this run's own cache, never the user's
unset TESSERA_PLUGIN_PROBE TESSERA_PLUGIN_PROBE_TIMEOUT_MS
failures=0; passed=0
check() {  # check NAME COMMAND... : the command must succeed
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failures=$((failures + 1)); echo "FAIL $name"; fi
}

# A plugin directory with a file that is not a library and a library without the entry symbol.
mkdir -p "$work/plugins"
echo "not a library" > "$work/plugins/broken.so"
cp "$test_plugins/libtest_no_entry.so" "$work/plugins/"
export TESSERA_PLUGIN_PATH="$work/plugins"

"$tessera" plugins > "$work/report.txt" 2>&1; status=$?
check "plugins exits 0 with skipped plugins" test $status -eq 0
check "report names the non-library" grep -q "not a shared library" "$work/report.txt"
check "report names the missing entry symbol" grep -q "no entry symbol" "$work/report.txt"
"$tessera" plugins --json > "$work/report.json" 2>&1
check "json report parses" python3 -c "import json,sys; r=json.load(open('$work/report.json')); sys.exit(0 if any(p['state']=='skipped' for p in r['plugins']) else 1)"
# Custom-operator libraries list their operators by domain (the example library's).
check "report lists custom operators" grep -Eq "operators: tessera.example \([0-9]+\): .*ScaledAdd" "$work/report.txt"
check "json report lists custom operators" python3 -c "import json,sys; r=json.load(open('$work/report.json')); sys.exit(0 if any('tessera.example:ScaledAdd' in p['custom_ops'] for p in r['plugins']) else 1)"

check "run of the embedded model" "$tessera" run

case_dir="$data/simple/test_single_relu_model"
check "run with --inputs/--outputs" "$tessera" run "$case_dir/model.onnx" --inputs "$case_dir/test_data_set_0" --outputs "$work/out"
check "outputs written" test -s "$work/out/output_0.pb"

# Plugins that crash, abort, exit or hang while loading, and entries that are no plugin at all: each is reported as
# skipped with what happened, and runs still work.  The probe timeout is short so that the hanging one costs 1 s.
if [ -n "$misbehaving" ] && [ -d "$misbehaving" ]; then
  mkdir -p "$work/misbehaving"
  cp "$misbehaving"/*.so "$work/misbehaving/"
  mkdir "$work/misbehaving/libx.so"
  ln -s libnowhere.so "$work/misbehaving/libdangling.so"
  probe_env=(env TESSERA_PLUGIN_PATH="$work/plugins:$work/misbehaving" TESSERA_PLUGIN_PROBE_TIMEOUT_MS=1000)
  "${probe_env[@]}" "$tessera" plugins > "$work/isolation.txt" 2>&1; status=$?
  check "plugins exits 0 with misbehaving plugins" test $status -eq 0
  check "report: a crash in the entry" grep -q "crashed while being loaded in its probe process (SIGSEGV" "$work/isolation.txt"
  check "report: an abort" grep -q "aborted while being loaded in its probe process (SIGABRT)" "$work/isolation.txt"
  check "report: exit(0)" grep -q "ended the process (exit status 0) while being loaded" "$work/isolation.txt"
  check "report: a hang" grep -q "hung while being loaded in its probe process: no answer within 1 s" "$work/isolation.txt"
  check "report: a crash at unload" grep -q "crashed while being unloaded" "$work/isolation.txt"
  check "report: a foreign status" grep -q "returned a status the host did not create" "$work/isolation.txt"
  check "report: a directory named libx.so" grep -q "a directory, not a plugin file" "$work/isolation.txt"
  check "report: a dangling link" grep -q "a dangling symbolic link (to 'libnowhere.so')" "$work/isolation.txt"
  check "report: the cpu provider still loaded" grep -q "^providers (priority order): .*cpu" "$work/isolation.txt"
  "${probe_env[@]}" "$tessera" plugins --json > "$work/isolation.json" 2> /dev/null
  check "json report lists every candidate with a reason" python3 -c "
import json, sys
plugins = {p['path'].rsplit('/', 1)[-1]: p for p in json.load(open('$work/isolation.json'))['plugins']}
names = ['libtest_crash_entry.so', 'libtest_crash_constructor.so', 'libtest_abort_entry.so', 'libtest_exit_entry.so',
         'libtest_hang_entry.so', 'libtest_crash_unload.so', 'libtest_foreign_status.so', 'libx.so', 'libdangling.so']
bad = [n for n in names if n not in plugins or plugins[n]['state'] != 'skipped' or not plugins[n]['reason']]
print('not reported as skipped:', bad) if bad else None
sys.exit(1 if bad else 0)"
  check "second report reuses the cached verdicts" grep -q "(cached verdict)" "$work/isolation.json"
  "${probe_env[@]}" "$tessera" run "$case_dir/model.onnx" --inputs "$case_dir/test_data_set_0" \
    --outputs "$work/isolation_out" > /dev/null 2> "$work/isolation_run.err"; status=$?
  check "run works with misbehaving plugins present" test $status -eq 0 -a -s "$work/isolation_out/output_0.pb"
  check "run warns about the provider whose capability query fails" \
    grep -q "provider 'flaky' is skipped for this session" "$work/isolation_run.err"
  "${probe_env[@]}" "$tessera" plugins --rescan > "$work/rescan.txt" 2>&1
  check "plugins --rescan probes again" sh -c "grep -q 'crashed while being loaded' '$work/rescan.txt' &&
    ! grep -q '(cached verdict)' '$work/rescan.txt'"
fi

# Bad input: one line on stderr, exit status 1.  $bad_prefix (e.g. "timeout 20") wraps the command.
bad() {  # bad NAME ARGS... : must exit non-zero ($want_status when set) with exactly one 'tessera: error:' line
  local name=$1; shift
  ${bad_prefix:-} "$tessera" "$@" > /dev/null 2> "$work/err.txt"; local status=$?
  local lines; lines=$(grep -c "^tessera: error:" "$work/err.txt")
  if [ $status -ne 0 ] && [ $status -eq "${want_status:-$status}" ] && [ "$lines" -eq 1 ] &&
     [ "$(wc -l < "$work/err.txt")" -eq 1 ]; then
    passed=$((passed + 1)); echo "ok   $name: $(cat "$work/err.txt")"
  else
    failures=$((failures + 1)); echo "FAIL $name (status $status):"; cat "$work/err.txt"
  fi
}
bad "missing model file" run "$work/absent.onnx"
# Files that are not regular: a directory, a FIFO (must not block), a device that never ends.
bad "model is a directory" run "$work"
check "directory named as such" grep -q "is a directory" "$work/err.txt"
bad "inspect of a directory" inspect "$work"
check "inspect names the directory" grep -q "is a directory" "$work/err.txt"
mkfifo "$work/model.fifo"
bad_prefix="timeout 20" bad "model is a FIFO" run "$work/model.fifo"
check "FIFO named as not regular" grep -q "is not a regular file" "$work/err.txt"
bad_prefix="timeout 20" bad "model is /dev/zero" run /dev/zero
mkdir -p "$work/endless"
ln -s /dev/zero "$work/endless/input_0.pb"
bad_prefix="timeout 20" bad "input linked to /dev/zero" run "$case_dir/model.onnx" --inputs "$work/endless"
check "endless input named as not regular" grep -q "is not a regular file" "$work/err.txt"
mkdir -p "$work/empty"
bad "missing input file" run "$case_dir/model.onnx" --inputs "$work/empty"
mkdir -p "$work/wrong_type"
python3 -c "
import numpy as np, onnx
from onnx import numpy_helper
open('$work/wrong_type/input_0.pb','wb').write(numpy_helper.from_array(np.zeros((3,4,5), np.int64)).SerializeToString())"
bad "wrong input type" run "$case_dir/model.onnx" --inputs "$work/wrong_type"
mkdir -p "$work/wrong_shape"
python3 -c "
import numpy as np
from onnx import numpy_helper
open('$work/wrong_shape/input_0.pb','wb').write(numpy_helper.from_array(np.zeros((2,2), np.float32)).SerializeToString())"
bad "wrong input shape" run "$case_dir/model.onnx" --inputs "$work/wrong_shape"
mkdir -p "$work/too_many"
cp "$case_dir/test_data_set_0/input_0.pb" "$work/too_many/input_0.pb"
cp "$case_dir/test_data_set_0/input_0.pb" "$work/too_many/input_1.pb"
bad "wrong input count" run "$case_dir/model.onnx" --inputs "$work/too_many"

# bench: every figure in the JSON report, a time budget, and the exit statuses of the other commands.
default_model="$(dirname "$0")/../../models/default.onnx"
"$tessera" bench --runs 5 --json > "$work/bench.json" 2> "$work/bench.err"; status=$?
check "bench of the embedded model exits 0" test $status -eq 0
check "bench json parses and holds every figure" python3 -c "
import json, sys
r = json.load(open('$work/bench.json'))
l = r['latency_ms']
figures = [r[k] for k in ('session_create_ms', 'first_run_ms', 'total_ms', 'runs_per_s', 'rss_after_session_mib',
                          'peak_rss_mib')] + [l[k] for k in ('mean', 'min', 'p50', 'p90', 'p99', 'max')]
ordered = l['min'] <= l['p50'] <= l['p90'] <= l['p99'] <= l['max'] and l['min'] <= l['mean'] <= l['max']
sys.exit(0 if r['runs'] == 5 and r['providers'] and r['threads'] >= 1 and min(figures) > 0 and ordered else 1)"
"$tessera" bench "$default_model" --time 0.2 --json > "$work/bench_time.json" 2> "$work/bench.err"; status=$?
check "bench --time 0.2 runs for the budget" python3 -c "
import json, sys
r = json.load(open('$work/bench_time.json'))
sys.exit(0 if $status == 0 and r['runs'] >= 1 and r['total_ms'] >= 200 else 1)"
"$tessera" bench "$default_model" --runs 2 --dim batch=2 > "$work/bench.txt" 2>&1
check "bench text report with --dim" sh -c "grep -q '^latency (ms): mean .* p50 ' '$work/bench.txt' &&
  grep -q 'image: tensor(float) \[2, 3, 32, 32\]' '$work/bench.txt'"
want_status=2 bad "bench with an unknown option exits 2" bench --bogus
want_status=2 bad "bench with --runs and --time exits 2" bench --runs 3 --time 1
want_status=1 bad "bench of a missing model exits 1" bench "$work/absent.onnx"

# --profile: a Chrome trace that parses as JSON, and the time by operator type after the results.
"$tessera" run "$default_model" --profile "$work/run_profile.json" > "$work/run_profile.txt" 2>&1; status=$?
check "run --profile writes a JSON trace of every phase" python3 -c "
import json, sys
events = json.load(open('$work/run_profile.json'))['traceEvents']
cats = {e['cat'] for e in events}
runs = [e for e in events if e['cat'] == 'run']
sys.exit(0 if $status == 0 and {'session', 'run', 'partition', 'node'} <= cats and len(runs) == 1 else 1)"
check "run --profile prints the summary after the results" \
  sh -c "grep -A100 '^outputs:' '$work/run_profile.txt' | grep -q '^  op type ' &&
         grep -q '^profile written to $work/run_profile.json' '$work/run_profile.txt'"
"$tessera" bench "$default_model" --runs 3 --warmup 0 --profile "$work/bench_profile.json" > "$work/bench_profile.txt" 2>&1
status=$?
check "bench --profile records every run" python3 -c "
import json, sys
events = json.load(open('$work/bench_profile.json'))['traceEvents']
sys.exit(0 if $status == 0 and sum(e['cat'] == 'run' for e in events) == 3 else 1)"
check "bench --profile prints the summary" grep -q '^profile: 3 runs' "$work/bench_profile.txt"
"$tessera" bench --runs 2 --json --profile "$work/bench_json_profile.json" > "$work/bench_profile.json.out" 2> /dev/null
check "bench --json --profile keeps stdout one JSON object" python3 -c "
import json
json.load(open('$work/bench_profile.json.out')); json.load(open('$work/bench_json_profile.json'))"
want_status=2 bad "inspect --profile exits 2" inspect "$default_model" --profile "$work/inspect_profile.json"

# --optimized-model-out: the graph the optimizer produced, saved as an ONNX model that onnx reads.
"$tessera" run "$default_model" --optimized-model-out "$work/optimized.onnx" > /dev/null 2>&1; status=$?
check "run --optimized-model-out writes a model onnx loads" python3 -c "
import onnx, sys
m = onnx.load('$work/optimized.onnx')
sys.exit(0 if $status == 0 and m.producer_name == 'tessera' and len(m.graph.node) > 0 else 1)"

# inspect: the partition plan of a real model split between the sample provider and cpu.
resnet="$data/light/light_resnet50.onnx"
if [ -f "$resnet" ]; then
  inspect=("$tessera" inspect "$resnet" --providers sample,cpu --plugin-path "$sample_plugins")
  "${inspect[@]}" > "$work/inspect.txt" 2>&1; status=$?
  check "inspect exits 0" test $status -eq 0
  check "inspect text shows sample and cpu partitions" \
    sh -c "grep -Eq '^  \[[0-9]+\] sample ' '$work/inspect.txt' && grep -Eq '^  \[[0-9]+\] cpu ' '$work/inspect.txt'"
  "${inspect[@]}" --json > "$work/inspect.json" 2>&1
  check "inspect json parses and names two providers" python3 -c "
import json, sys
r = json.load(open('$work/inspect.json'))
providers = {p['provider'] for p in r['partitions']}
copies = sum(p['copy_count'] for p in r['partitions'])
sys.exit(0 if r['ok'] and len(providers) >= 2 and copies == r['copy_count'] > 0 else 1)"
  "${inspect[@]}" --dot "$work/plan.dot" --svg "$work/plan.svg" > /dev/null 2>&1
  check "inspect --dot draws copies as dashed red edges" grep -q 'style=dashed, color=red' "$work/plan.dot"
  check "inspect --svg writes an svg file" sh -c "test -s '$work/plan.svg' && grep -q '<svg' '$work/plan.svg'"
  "$tessera" inspect "$resnet" --providers sample --strict --plugin-path "$sample_plugins" > "$work/declined.txt" 2>&1
  status=$?
  check "inspect reports why sample declines, exit 1" \
    sh -c "test $status -eq 1 && grep -q 'sample: sample runs float32' '$work/declined.txt'"
fi
bad "inspect without a model" inspect

# Real inputs and reference checks: .npy/.npz inputs, --shape for a dynamic model, --output-dir, --check.
python3 -c "
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
nodes = [helper.make_node('Mul', ['x', 'two'], ['t']), helper.make_node('Add', ['t', 'b'], ['y'])]
g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('x', T.FLOAT, ['N', 3]),
                                   helper.make_tensor_value_info('b', T.FLOAT, [3])],
                      [helper.make_tensor_value_info('y', T.FLOAT, ['N', 3])],
                      initializer=[numpy_helper.from_array(np.array([2], np.float32), 'two')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), '$work/dyn.onnx')
x = np.arange(12, dtype=np.float32).reshape(4, 3); b = np.array([1, 2, 3], np.float32)
np.save('$work/x.npy', x); np.save('$work/b.npy', b); np.save('$work/x_wrong.npy', np.zeros((2, 4), np.float32))
np.savez('$work/in.npz', x=x, b=b); np.savez('$work/ref.npz', y=x * 2 + b); np.savez('$work/bad.npz', y=x * 2 + b + 0.5)"
"$tessera" run "$work/dyn.onnx" --shape x=5x3 > "$work/shape.txt" 2>&1
check "--shape fixes a dynamic dimension" grep -q "x: tensor(float) \[5, 3\] (generated)" "$work/shape.txt"
check "--input .npy and --check .npz pass" "$tessera" run "$work/dyn.onnx" --input x="$work/x.npy" \
  --input b="$work/b.npy" --check "$work/ref.npz" --output-dir "$work/npy_out"
check "--output-dir writes NAME.npy" python3 -c "
import numpy as np, sys
sys.exit(0 if np.array_equal(np.load('$work/npy_out/y.npy'), np.load('$work/ref.npz')['y']) else 1)"
"$tessera" run "$work/dyn.onnx" --inputs "$work/in.npz" --check "$work/bad.npz" > "$work/check.txt" 2>&1; status=$?
check "--check against a wrong reference exits 1" test $status -eq 1
check "--check prints the largest error" grep -q "y: MISMATCH (largest error 0.5" "$work/check.txt"
check "--check passes on a conformance case" "$tessera" run "$case_dir/model.onnx" \
  --inputs "$case_dir/test_data_set_0" --check "$case_dir/test_data_set_0"
bad "--input of an unknown name" run "$work/dyn.onnx" --input z="$work/x.npy"
bad "--input of the wrong shape" run "$work/dyn.onnx" --input x="$work/x_wrong.npy"
check "wrong shape names expected and given" grep -q "expected shape \[N, 3\], got \[2, 4\]" "$work/err.txt"

# inspect --json answers with JSON even when the model does not parse.
"$tessera" inspect --json "$work/x.npy" > "$work/inspect.json" 2> /dev/null; status=$?
check "inspect --json of a broken model exits 1" test $status -eq 1
check "inspect --json of a broken model is JSON with the error" python3 -c "
import json, sys
r = json.load(open('$work/inspect.json'))
sys.exit(0 if r['ok'] is False and r['error']['code'] == 'INVALID_MODEL' else 1)"

"$tessera" run --log-level info > /dev/null 2> "$work/info.txt"
check "--log-level info reports the optimizer and the partitions" grep -q "partition: cpu" "$work/info.txt"

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
