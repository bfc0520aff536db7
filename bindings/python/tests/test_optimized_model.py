"""Saving the optimized graph: ``InferenceSession(..., optimized_model_filepath=...)``, as onnxruntime's
``SessionOptions.optimized_model_filepath`` (``tess_session_options_set_optimized_model_path``).

The session writes the graph the optimizer produced, before partitioning, as an ONNX model: it must load with onnx
(and pass its checker where no custom domain is involved), hold what the optimizer made of the model (a Conv with a
folded BatchNormalization and a fused Relu becomes one ``ai.tessera:FusedConv``; folded constants become
initializers), and compute what the original computes when Tessera runs it.  At level 0 it holds the original
operators; a path that cannot be written fails session creation naming the path.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from model_factory import FLOAT, tensor
from onnx import helper, numpy_helper

import tessera

RTOL, ATOL = 1e-5, 1e-5


def conv_bn_relu_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """y = Relu(BatchNormalization(Conv(x, w, b))): BN folds into the Conv (level 1), the Relu fuses (level 2)."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(4) * 0.5).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    beta = (rng.standard_normal(4) * 0.3).astype(np.float32)
    mean = (rng.standard_normal(4) * 0.3).astype(np.float32)
    var = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w, "w"), (b, "b"), (gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var"))]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "conv_bn_relu", [tensor("x", FLOAT, [1, 3, 8, 8])],
                              [tensor("y", FLOAT, [1, 4, 8, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    return model, feeds


def matmul_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """y = Identity(MatMul(x, Transpose(wt))) + b: the Transpose of a constant folds into an initializer and the
    Identity goes, so the saved graph holds MatMul and Add only."""
    rng = np.random.default_rng(11)
    wt = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["wt"], ["w"], name="transpose"),
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Identity", ["m"], ["i"], name="identity"),
        helper.make_node("Add", ["i", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "matmul", [tensor("x", FLOAT, ["batch", 8])], [tensor("y", FLOAT, ["batch", 16])],
                              initializer=[numpy_helper.from_array(wt, "wt"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    return model, feeds


def ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(n.domain, n.op_type) for n in model.graph.node]


def assert_same(actual, expected) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL)


def test_fused_conv_model_is_saved_and_runs(tmp_path):
    model, feeds = conv_bn_relu_model()
    path = tmp_path / "conv_opt.onnx"
    session = tessera.InferenceSession(model, optimized_model_filepath=str(path))
    expected = session.run(None, feeds)
    assert path.is_file()

    saved = onnx.load(str(path))
    assert ops(saved) == [("ai.tessera", "FusedConv")]
    assert not any(n.op_type == "BatchNormalization" for n in saved.graph.node)
    fused = saved.graph.node[0]
    assert helper.get_attribute_value(next(a for a in fused.attribute if a.name == "activation")) == b"Relu"
    assert {o.domain: o.version for o in saved.opset_import} == {"": 13, "ai.tessera": 1}
    assert saved.producer_name == "tessera" and saved.producer_version == tessera.__version__
    assert saved.ir_version >= 7
    assert [i.name for i in saved.graph.input] == ["x"]
    assert [o.name for o in saved.graph.output] == ["y"]
    # The folded weights: no BatchNormalization parameters remain, the Conv's weight and bias are rewritten.
    initializers = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    assert set(fused.input) <= set(initializers) | {"x"}
    assert not {"gamma", "beta", "mean", "var"} & set(initializers)
    assert all(t.HasField("raw_data") for t in saved.graph.initializer)

    # Tessera runs the saved model (ai.tessera ops natively), optimized again or not, with the same results.
    for level in (0, 3):
        rerun = tessera.InferenceSession(str(path), optimization_level=level)
        assert_same(rerun.run(None, feeds), expected)
    # And the original, unoptimized, agrees.
    assert_same(tessera.InferenceSession(model, optimization_level=0).run(None, feeds), expected)


def test_matmul_model_is_saved_valid_onnx(tmp_path):
    model, feeds = matmul_model()
    path = tmp_path / "matmul_opt.onnx"
    # The basic level folds and removes but fuses nothing, so the saved graph is plain ONNX.
    session = tessera.InferenceSession(model.SerializeToString(), optimized_model_filepath=path,  # a PathLike
                                       optimization_level=1)
    expected = session.run(None, feeds)

    saved = onnx.load(str(path))
    onnx.checker.check_model(saved, full_check=True)
    assert ops(saved) == [("", "MatMul"), ("", "Add")]
    initializers = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    weight = saved.graph.node[0].input[1]
    np.testing.assert_array_equal(initializers[weight], numpy_helper.to_array(model.graph.initializer[0]).T)
    # The symbolic batch dimension survives on the inputs and outputs.
    assert saved.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert saved.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"

    assert_same(tessera.InferenceSession(str(path)).run(None, feeds), expected)
    assert_same(tessera.InferenceSession(model, optimization_level=0).run(None, feeds), expected)

    # The default level makes a linear layer of MatMul and Add: saved in the optimizer's domain, it runs again.
    fused_path = tmp_path / "matmul_fused.onnx"
    fused = tessera.InferenceSession(model.SerializeToString(), optimized_model_filepath=fused_path)
    assert ops(onnx.load(str(fused_path))) == [("ai.tessera", "FusedMatMulBias")]
    assert_same(fused.run(None, feeds), expected)
    assert_same(tessera.InferenceSession(str(fused_path)).run(None, feeds), expected)


@pytest.mark.parametrize("make", [conv_bn_relu_model, matmul_model])
def test_level_zero_saves_the_original_operators(tmp_path, make):
    model, feeds = make()
    path = tmp_path / "level0.onnx"
    session = tessera.InferenceSession(model, optimization_level=0, optimized_model_filepath=str(path))
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved, full_check=True)
    assert ops(saved) == ops(model)
    assert [n.name for n in saved.graph.node] == [n.name for n in model.graph.node]
    assert sorted(t.name for t in saved.graph.initializer) == sorted(t.name for t in model.graph.initializer)
    assert_same(tessera.InferenceSession(str(path), optimization_level=0).run(None, feeds),
                session.run(None, feeds))


def test_unwritable_path_is_a_clear_error(tmp_path):
    model, _ = matmul_model()
    path = os.path.join(str(tmp_path), "no_such_dir", "out.onnx")
    with pytest.raises(tessera.TesseraError) as info:
        tessera.InferenceSession(model, optimized_model_filepath=path)
    assert info.value.code == tessera.StatusCode.RUNTIME_ERROR
    assert path in str(info.value) and "optimized model" in str(info.value)
    assert not os.path.exists(path)


def test_no_path_saves_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, feeds = matmul_model()
    for off in (None, ""):
        tessera.InferenceSession(model, optimized_model_filepath=off).run(None, feeds)
    assert os.listdir(tmp_path) == []
