"""onnxruntime's documented Python API on Tessera: code written for onnxruntime runs unchanged with
``import tessera as onnxruntime`` (or ``sys.modules["onnxruntime"] = tessera``)."""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import numpy as np
import pytest
from model_factory import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import tessera
import tessera as ort


def mlp_model():
    """y = softmax(relu(x @ w1 + b1) @ w2), x [N, 8], with metadata as exporters write it."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    model = make_model(nodes, [tensor("x", shape=["batch", 8])], [tensor("probs", shape=["batch", 4])],
                       initializers=inits)
    model.ir_version = 9  # what the reference onnxruntime reads
    model.producer_name = "compat-test"
    model.domain = "ai.tessera.test"
    model.model_version = 7
    model.doc_string = "a small classifier"
    model.graph.name = "mlp"
    helper.set_model_props(model, {"character": "abc", "labels": "cat,dog,bird,fish"})
    return model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("compat") / "mlp.onnx"
    path.write_bytes(mlp_model().SerializeToString())
    return str(path)


def reference_outputs(path, feed):
    onnxruntime = pytest.importorskip("onnxruntime")
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)


def test_session_options_and_positional_arguments_as_onnxruntime_takes_them(model_path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = False
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    session = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_session_options() is so
    [x] = session.get_inputs()
    assert (x.name, x.type, x.shape) == ("x", "tensor(float)", ["batch", 8])
    assert [o.name for o in session.get_outputs()] == ["probs"]
    feed = {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}
    (probs,) = session.run(None, feed)
    np.testing.assert_allclose(probs, reference_outputs(model_path, feed)[0], rtol=1e-5, atol=1e-6)
    (same,) = session.run(["probs"], feed, ort.RunOptions())
    np.testing.assert_array_equal(same, probs)


@pytest.mark.parametrize("level", list(ort.GraphOptimizationLevel))
def test_every_optimization_level_gives_the_same_result(model_path, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    feed = {"x": np.ones((2, 8), np.float32)}
    (probs,) = ort.InferenceSession(model_path, sess_options=so).run(None, feed)
    np.testing.assert_allclose(probs, reference_outputs(model_path, feed)[0], rtol=1e-5, atol=1e-6)


def test_provider_lists_with_options(model_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = ort.InferenceSession(model_path, providers=[("CPUExecutionProvider", {"arena_extend_strategy":
                                                                                        "kSameAsRequested"})])
    assert any("arena_extend_strategy" in str(w.message) for w in caught)
    assert session.get_provider_options()["CPUExecutionProvider"] == {"arena_extend_strategy": "kSameAsRequested"}
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"], provider_options=[{}])
    assert session.get_providers() == ["CPUExecutionProvider"]
    # A GPU first, then the CPU, the way applications write it: without a usable CUDA provider the CPU runs all.
    session = ort.InferenceSession(model_path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert "CPUExecutionProvider" in session.get_providers()
    with pytest.raises(ort.InvalidArgument, match="TensorrtExecutionProvider.*no Tessera counterpart.*CPUExecution"):
        ort.InferenceSession(model_path, providers=["TensorrtExecutionProvider"])


def test_module_functions():
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert ort.get_device() in ("CPU", "GPU")
    assert isinstance(ort.__version__, str) and ort.__version__
    ort.set_default_logger_severity(3)
    ort.set_default_logger_verbosity(0)
    with pytest.raises(ort.InvalidArgument):
        ort.set_default_logger_severity(7)
    ort.set_default_logger_severity(2)


def test_model_metadata(model_path):
    meta = ort.InferenceSession(model_path).get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.version) == (
        "compat-test", "mlp", "ai.tessera.test", "a small classifier", 7)
    assert meta.custom_metadata_map == {"character": "abc", "labels": "cat,dog,bird,fish"}


def test_ort_values(model_path):
    session = ort.InferenceSession(model_path)
    x = np.ones((2, 8), np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(x)
    assert value.is_tensor() and value.shape() == [2, 8] and value.data_type() == "tensor(float)"
    assert value.device_name() == "cpu"
    (out,) = session.run_with_ort_values(["probs"], {"x": value})
    assert isinstance(out, ort.OrtValue) and out.shape() == [2, 4]
    np.testing.assert_array_equal(out.numpy(), session.run(None, {"x": x})[0])
    with pytest.raises(ort.InvalidArgument):
        ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)


def test_profiling_through_session_options(model_path, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "run_profile_")
    session = ort.InferenceSession(model_path, so)
    session.run(None, {"x": np.ones((1, 8), np.float32)})
    path = session.end_profiling()
    assert os.path.basename(path).startswith("run_profile_") and os.path.exists(path)


def test_code_written_for_onnxruntime_runs_unchanged(model_path, monkeypatch):
    """What an application does, line for line, with tessera standing in for the onnxruntime module."""
    monkeypatch.setitem(sys.modules, "onnxruntime", tessera)
    onnxruntime = importlib.import_module("onnxruntime")
    onnxruntime.set_default_logger_severity(3)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = os.cpu_count() or 1
    providers = ["CPUExecutionProvider"]
    if onnxruntime.get_device() == "GPU" and "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": 0}))
    session = onnxruntime.InferenceSession(model_path, sess_options=options, providers=providers)
    labels = session.get_modelmeta().custom_metadata_map["labels"].split(",")
    input_name = session.get_inputs()[0].name
    output_names = [o.name for o in session.get_outputs()]
    batch = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    probs = session.run(output_names, {input_name: batch})[0]
    predicted = [labels[i] for i in probs.argmax(axis=1)]
    expected = reference_outputs(model_path, {input_name: batch})[0]
    assert predicted == [labels[i] for i in expected.argmax(axis=1)]
    onnxruntime.set_default_logger_severity(2)


def test_sessions_with_metadata_free_models():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", shape=[2])],
                       [tensor("y", shape=[2])])
    meta = ort.InferenceSession(model.SerializeToString()).get_modelmeta()
    assert meta.custom_metadata_map == {} and meta.version == 0


def test_module_functions_applications_call_at_import():
    ort.disable_telemetry_events()
    ort.enable_telemetry_events()
    assert "CPUExecutionProvider" in ort.get_all_providers()
    assert ort.get_version_string() == ort.__version__


def test_onnxruntime_exception_classes_catch_tessera_errors(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", tessera)
    for name in [n for n in sys.modules if n.startswith("onnxruntime.")]:
        monkeypatch.delitem(sys.modules, name)
    state = importlib.import_module("onnxruntime.capi.onnxruntime_pybind11_state")
    with pytest.raises(state.NoSuchFile):
        tessera.InferenceSession("/nonexistent/model.onnx")
    with pytest.raises(state.InvalidProtobuf):
        tessera.InferenceSession(b"not a model")
    with pytest.raises(state.Fail):
        tessera.InferenceSession(b"not a model")
    session = tessera.InferenceSession(make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", shape=[2])],
                                                  [tensor("y", shape=[2])]))
    with pytest.raises(state.InvalidArgument):
        session.run(None, {"x": np.zeros(3, np.float32)})


def test_io_binding_on_the_cpu(model_path):
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    expected = session.run(None, {"x": x})[0]
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("probs")
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], expected)
    # A raw pointer, as applications that manage their own buffers bind it.
    binding.clear_binding_inputs()
    binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    session.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    np.testing.assert_array_equal(out.numpy(), expected)
    with pytest.raises(ort.InvalidArgument):
        binding.bind_output("probs", "cuda", 0)
