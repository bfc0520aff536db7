"""Backend-test cases (model.onnx + test_data_set_0/) for operators outside the onnx node cases: the example custom-op
library's and two com.microsoft ones of the CPU provider, so that `tessera provider-test` runs them the way it runs
the onnx node cases.  Expected outputs come from numpy
references of the operators' documented formulas.

Usage: make_custom_op_cases.py OUT_DIR
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_case(root, name, node, inputs, outputs, opsets):
    case = os.path.join(root, name)
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    onnx.save(model, os.path.join(case, "model.onnx"))
    for kind, values in (("input", inputs), ("output", outputs)):
        for k, (key, value) in enumerate(values.items()):
            with open(os.path.join(case, "test_data_set_0", f"{kind}_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(value, key).SerializeToString())


def main(root):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    # tessera.example:ScaledAdd (plugins/custom_ops/example): C = A + alpha * B.
    write_case(root, "test_scaled_add",
               helper.make_node("ScaledAdd", ["A", "B"], ["C"], domain="tessera.example", alpha=0.5),
               {"A": a, "B": b}, {"C": a + np.float32(0.5) * b}, [("", 17), ("tessera.example", 1)])
    # com.microsoft Gelu and BiasGelu (plugins/cpu/kernels/contrib): 0.5 x (1 + erf(x / sqrt 2)).
    erf = np.vectorize(math.erf)
    gelu = lambda x: (0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))).astype(np.float32)
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    bias = rng.standard_normal((8,)).astype(np.float32)
    write_case(root, "test_com_microsoft_gelu", helper.make_node("Gelu", ["X"], ["Y"], domain="com.microsoft"),
               {"X": x}, {"Y": gelu(x)}, [("", 17), ("com.microsoft", 1)])
    write_case(root, "test_com_microsoft_bias_gelu",
               helper.make_node("BiasGelu", ["A", "B"], ["C"], domain="com.microsoft"),
               {"A": x, "B": bias}, {"C": gelu(x + bias)}, [("", 17), ("com.microsoft", 1)])


if __name__ == "__main__":
    main(sys.argv[1])
