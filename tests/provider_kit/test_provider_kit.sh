#!/usr/bin/env bash
# `tessera provider-test` on every in-tree plugin, and on broken ones that it must fail without failing itself.
# Usage: test_provider_kit.sh TESSERA PLUGIN_DIR SAMPLE_DIR TEST_PLUGIN_DIR MISBEHAVING_DIR BACKEND_DATA KNOWN_FAILURES
#                             SIZED_PROVIDER
set -uo pipefail
tessera=$1; plugins=$2; samples=$3; test_plugins=$4; misbehaving=$5; data=$6; known=$7; sized=$8
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"
failures=0; passed=0
check() {  # check NAME COMMAND... : the command must succeed
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failures=$((failures + 1)); echo "FAIL $name"; fi
}
kit() {  # kit NAME EXPECTED_STATUS ARGS... : runs the kit, keeps its report in $work/NAME.txt
  local name=$1 expected=$2; shift 2
  "$tessera" provider-test "$@" > "$work/$name.txt" 2>&1
  local status=$?
  if [ $status -ne "$expected" ]; then echo "--- $name (exit $status, expected $expected):"; cat "$work/$name.txt"; fi
  test $status -eq "$expected"
}

node="$data/node"
if [ -d "$node" ]; then
  # The CPU provider on every node case (the conformance suite's known failures are the only ones allowed).
  check "cpu: every node case" kit cpu 0 "$plugins/libtessera_cpu.so" --cases "$node" --known-failures "$known"
  check "cpu: all 6 entry checks pass" grep -q "entry 6/6 checks passed" "$work/cpu.txt"
  # Every operator but ImageDecoder, which the image provider runs.
  check "cpu: only ImageDecoder is left unclaimed" grep -q "0 failed, 1 not claimed" "$work/cpu.txt"
  check "  ... with the reason" grep -Eq '^  ImageDecoder +cpu: no CPU kernel for ImageDecoder' "$work/cpu.txt"
  # The sample provider: its operators run, the rest is reported as not claimed with its reason.
  check "sample: every node case it claims" kit sample 0 "$samples/libtessera_sample.so" --cases "$node"
  check "sample: its operators pass" grep -Eq '^  Relu +[1-9]' "$work/sample.txt"
  check "sample: declined operators carry the reason" \
    grep -Eq '^  Conv +sample: sample runs float32' "$work/sample.txt"
  # The image provider: ImageDecoder, which no other provider runs, held to the cases' expected outputs.
  check "image: its ImageDecoder cases" kit image 0 "$plugins/libtessera_image.so" --cases "$node"
  check "  ... all 9 pass" grep -Eq '^  ImageDecoder +9 +0 +0' "$work/image.txt"
  # The CUDA provider where this machine has a GPU (its plugin reports itself unavailable otherwise).
  if [ -f "$plugins/libtessera_cuda.so" ] &&
     "$tessera" plugins 2>/dev/null | grep -Eq '^  loaded +tessera-cuda'; then
    check "cuda: every node case it claims" kit cuda 0 "$plugins/libtessera_cuda.so" --cases "$node"
  else
    echo "skip cuda: no usable GPU here (the CUDA provider reports itself unavailable)"
  fi
  # A provider right only at the case's own shapes: the expected outputs pass, the batch-size check catches it.
  check "a provider sized for one shape fails" kit sized 1 "$sized" --cases "$node" --ops Relu
  check "  ... test_relu fails at another batch size" grep -Eq "test_relu\b.*another batch size" "$work/sized.txt"
  check "  ... but not on its expected outputs" sh -c "! grep -E 'test_relu\b.*expected outputs' '$work/sized.txt'"
  # The JSON report.
  check "json report" kit sample_json 0 "$samples/libtessera_sample.so" --cases "$node" --ops Relu --json
  check "json report parses" python3 -c "
import json, sys
r = json.load(open('$work/sample_json.txt'))
sys.exit(0 if r['passed'] and r['operators']['Relu']['passed'] >= 1 and len(r['entry']) == 6 else 1)"
fi

# Custom-operator libraries, on cases of their own operators.
python3 "$here/make_custom_op_cases.py" "$work/custom_cases"
check "custom-op cases generated" test -f "$work/custom_cases/test_scaled_add/model.onnx"
check "example ops" kit example 0 "$plugins/libtessera_example_ops.so" --cases "$work/custom_cases"
check "example ops: ScaledAdd ran" grep -Eq '^  tessera.example:ScaledAdd +1 +0' "$work/example.txt"
# onnxruntime's com.microsoft operators are CPU-provider kernels: the same kind of cases, run on the provider.
check "com.microsoft cases on the cpu provider" kit contrib 0 "$plugins/libtessera_cpu.so" --cases "$work/custom_cases"
check "  ... Gelu ran" grep -Eq '^  com.microsoft:Gelu +1 +0' "$work/contrib.txt"
check "  ... BiasGelu ran" grep -Eq '^  com.microsoft:BiasGelu +1 +0' "$work/contrib.txt"

# Broken plugins: the kit fails them, names what is wrong, and finishes its report.
check "a plugin of a future ABI fails" kit future 1 "$test_plugins/libtest_abi_future.so"
check "  ... the acceptance check says it refused" grep -q "FAIL  entry: this core's ABI range is accepted" "$work/future.txt"
check "a plugin that crashes in its entry fails" kit crash 1 "$misbehaving/libtest_crash_entry.so"
check "  ... the report names the crash" grep -q "crashed with SIG" "$work/crash.txt"
check "  ... and still ends with a summary" grep -q "^Summary:" "$work/crash.txt"
check "a missing file is an error" kit missing 1 "$work/no-such-plugin.so"

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
