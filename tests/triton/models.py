"""ONNX models the Triton tests make: small, deterministic, with a batch dimension where they should batch."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _save(graph: onnx.GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tessera-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def dense_weights(in_dim: int, hidden: int, out_dim: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((in_dim, hidden)) / np.sqrt(in_dim)).astype(np.float32),
        "b1": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((hidden, out_dim)) / np.sqrt(hidden)).astype(np.float32),
        "b2": (rng.standard_normal(out_dim) * 0.1).astype(np.float32),
    }


def dense_model(in_dim: int = 16, hidden: int = 32, out_dim: int = 8, seed: int = 7) -> bytes:
    """x[N, in_dim] float -> y = relu(x w1 + b1) w2 + b2 [N, out_dim], label = argmax(y) [N] int64."""
    weights = dense_weights(in_dim, hidden, out_dim, seed)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["y"]),
        helper.make_node("ArgMax", ["y"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", in_dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out_dim]),
         helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return _save(graph)


def dense_reference(x: np.ndarray, in_dim: int = 16, hidden: int = 32, out_dim: int = 8, seed: int = 7) -> np.ndarray:
    w = dense_weights(in_dim, hidden, out_dim, seed)
    return np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]


def row_sum_model() -> bytes:
    """x[N, L] float (L variable) -> y = sum over L [N, 1]: a model whose requests may disagree after the batch."""
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "row_sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])], [axes])
    return _save(graph)


def string_echo_model() -> bytes:
    """text[N] string -> same [N] string (Identity): BYTES tensors both ways."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["echo"])], "string_echo",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["batch"])],
        [helper.make_tensor_value_info("echo", TensorProto.STRING, ["batch"])])
    return _save(graph)
