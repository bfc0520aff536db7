#!/usr/bin/env bash
# docs/plugins.md against docs/snippets/: the quoted blocks equal the files, the snippet plugins load, the provider
# runs Abs and the custom-op library runs Swish with the right values.
# Usage: test_docs.sh SOURCE_DIR TESSERA_BINARY CONSUMER_BINARY SNIPPET_PLUGIN_DIR
set -uo pipefail
src=$1; tessera=$2; consumer=$3; plugins=$4
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failures=0; passed=0
check() {  # check NAME COMMAND... : the command must succeed
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failures=$((failures + 1)); echo "FAIL $name"; fi
}

check "docs/plugins.md quotes docs/snippets exactly" \
  python3 "$src/tests/docs/check_snippets.py" "$src/docs/plugins.md" "$src/docs/snippets"

"$tessera" plugins --json --no-default-plugins --plugin-path "$plugins" > "$work/plugins.json" 2>&1
check "the snippet plugins load" python3 -c "
import json, sys
r = {p['name']: p for p in json.load(open('$work/plugins.json'))['plugins']}
ok = r.get('docs-abs', {}).get('state') == 'loaded' and r['docs-abs']['providers'] == ['docs_abs']
ok = ok and r.get('docs-swish', {}).get('state') == 'loaded'
sys.exit(0 if ok else 1)"

# Two small models: Abs(Abs(x)) for the provider, Swish(x; beta=2) for the custom operator, with input files.
python3 - "$work" <<'PY'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
work = sys.argv[1]
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
abs_graph = helper.make_graph([helper.make_node("Abs", ["x"], ["t"]), helper.make_node("Abs", ["t"], ["y"])],
                              "abs", [x], [y])
# IR 8: the core's libonnx infers the types of intermediate values (t) only up to IR 8.
onnx.save(helper.make_model(abs_graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), f"{work}/abs.onnx")
swish = helper.make_node("Swish", ["x"], ["y"], domain="docs.example", beta=2.0)
swish_graph = helper.make_graph([swish], "swish", [x], [y])
model = helper.make_model(swish_graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("docs.example", 1)],
                          ir_version=8)
onnx.save(model, f"{work}/swish.onnx")
import os
os.makedirs(f"{work}/in", exist_ok=True)
data = np.array([[-2.0, -0.5, 0.0], [0.25, 1.0, 3.0]], np.float32)
open(f"{work}/in/input_0.pb", "wb").write(numpy_helper.from_array(data, "x").SerializeToString())
PY

"$consumer" "$work/abs.onnx" docs_abs "$plugins" > "$work/consumer.txt" 2>&1
check "the consumer snippet runs Abs on docs_abs" \
  sh -c "grep -q '^partition: docs_abs, 2 nodes, 0 input copies per run' '$work/consumer.txt' &&
         grep -q '^output: 6 values, first 1\$' '$work/consumer.txt'"

"$tessera" run "$work/swish.onnx" --inputs "$work/in" --outputs "$work/out" --plugin-path "$plugins" \
  > "$work/swish.txt" 2>&1
check "the custom-op snippet computes Swish" python3 -c "
import numpy as np, onnx, sys
from onnx import numpy_helper
x = numpy_helper.to_array(onnx.load_tensor('$work/in/input_0.pb'))
y = numpy_helper.to_array(onnx.load_tensor('$work/out/output_0.pb'))
sys.exit(0 if np.allclose(y, x / (1 + np.exp(-2 * x)), rtol=1e-6, atol=1e-7) else 1)"

"$tessera" inspect "$work/swish.onnx" --providers docs_abs --strict --no-default-plugins --plugin-path "$plugins" \
  > "$work/declined.txt" 2>&1
check "a declined node shows the snippet's reason" grep -q "docs_abs: docs_abs runs Abs only" "$work/declined.txt"

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
