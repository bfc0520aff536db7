#!/usr/bin/env python3
"""Writes models/default.onnx: the small image classifier that `tessera run` executes when given no model.

A 32x32 RGB input goes through two convolution blocks, global pooling and a classifier; weights are random with a
fixed seed, so the file is reproducible.  Run it only to regenerate the committed model.
"""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main() -> None:
    rng = np.random.default_rng(2026)

    def weight(name, *shape):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        data = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        return numpy_helper.from_array(data, name)

    initializers = [
        weight("conv1.w", 8, 3, 3, 3), weight("conv1.b", 8),
        weight("conv2.w", 16, 8, 3, 3), weight("conv2.b", 16),
        weight("fc.w", 10, 16), weight("fc.b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "tessera-default",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tessera")
    model.ir_version = 8
    onnx.checker.check_model(model)
    out = pathlib.Path(__file__).resolve().parent.parent / "models" / "default.onnx"
    onnx.save(model, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
