"""The onnxruntime-shaped API: environments, plugin report, sessions, metadata, partition plan, runs."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from model_factory import add_model, make_model, tensor, unary_model
from onnx import TensorProto, helper

import tessera


def test_version_and_library():
    assert tessera.__version__ == "0.1.0"
    assert tessera.library_version()
    assert os.path.exists(tessera.library_path)


def test_plugin_report_lists_the_cpu_provider():
    report = tessera.plugins()
    cpu = [p for p in report if "cpu" in p["providers"]]
    assert cpu and cpu[0]["state"] == "loaded" and cpu[0]["reason"] == ""
    assert set(cpu[0]) == {"path", "name", "version", "state", "reason", "abi_version", "providers"}
    assert cpu[0]["abi_version"] >= 1
    assert "CPUExecutionProvider" in tessera.get_available_providers()
    assert tessera.get_default_environment() is tessera.get_default_environment()


def test_environment_without_default_dirs_has_no_providers(tmp_path):
    env = tessera.Environment(plugin_path=[str(tmp_path)], no_default_plugin_dirs=True)
    assert env.providers() == []
    assert env.plugins() == []
    not_a_plugin = tmp_path / "libfake.so"
    not_a_plugin.write_text("not a shared library")
    with pytest.raises(tessera.TesseraError):
        env.load_plugin(not_a_plugin)
    (entry,) = env.plugins()
    assert entry["state"] == "skipped" and entry["reason"]


def test_environment_with_plugin_path_finds_the_cpu_plugin():
    plugin_dir = os.path.join(os.path.dirname(tessera.library_path), "tessera", "plugins")
    env = tessera.Environment(plugin_path=plugin_dir, no_default_plugin_dirs=True)
    assert "cpu" in env.providers()
    session = tessera.InferenceSession(unary_model("Relu", shape=[2]), environment=env)
    assert session.environment is env
    (y,) = session.run(None, {"x": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(y, [0.0, 2.0])


def test_log_callback_receives_warnings():
    messages = []
    env = tessera.Environment(log_callback=lambda level, text: messages.append((level, text)))
    session = tessera.InferenceSession(unary_model("Relu", shape=[2]), providers=["no_such_provider", "cpu"],
                                       environment=env)
    assert any(level == tessera.LogLevel.WARNING and "no_such_provider" in text for level, text in messages)
    assert session.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.parametrize("source", ["path", "bytes", "proto"])
def test_session_sources(tmp_path, source):
    model = add_model()
    if source == "path":
        path = tmp_path / "add.onnx"
        path.write_bytes(model.SerializeToString())
        arg = str(path)
    else:
        arg = model.SerializeToString() if source == "bytes" else model
    session = tessera.InferenceSession(arg)
    z, w = session.run(None, {"x": np.array([[1, -2, 3]], np.float32)})
    np.testing.assert_array_equal(z, [[2, -1, 4]])
    np.testing.assert_array_equal(w, [[1, 0, 3]])


def test_inputs_and_outputs_describe_the_graph():
    session = tessera.InferenceSession(add_model())
    # y has an initializer: onnxruntime lists it among the overridable initializers, not the inputs.
    (x,) = session.get_inputs()
    (y,) = session.get_overridable_initializers()
    assert (x.name, x.type, x.shape) == ("x", "tensor(float)", ["N", 3])
    assert (y.name, y.shape) == ("y", [1, 3])
    z, w = session.get_outputs()
    assert z.name == "z" and z.type == "tensor(float)"
    assert w.shape == ["N", 3]
    assert "NodeArg(name='x'" in repr(x)


def test_unknown_dims_and_rank():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    session = tessera.InferenceSession(model)
    assert session.get_inputs()[0].shape == [None, 4]
    assert session.get_outputs()[0].type == "tensor(float)"


def test_initializer_inputs_may_be_overridden():
    session = tessera.InferenceSession(add_model())
    x = np.zeros((2, 3), np.float32)
    (z,) = session.run(["z"], {"x": x, "y": np.full((1, 3), 5, np.float32)})
    np.testing.assert_array_equal(z, np.full((2, 3), 5))


def test_output_names_select_and_order():
    session = tessera.InferenceSession(add_model())
    x = np.array([[-1, 0, 1]], np.float32)
    w, z = session.run(["w", "z"], {"x": x})
    np.testing.assert_array_equal(w, [[0, 0, 1]])
    np.testing.assert_array_equal(z, [[0, 1, 2]])
    assert len(session.run([], {"x": x})) == 2


def test_provider_stats_count_sessions_and_return_to_zero():
    plugin_dir = os.path.join(os.path.dirname(tessera.library_path), "tessera", "plugins")
    env = tessera.Environment(plugin_path=plugin_dir, no_default_plugin_dirs=True)
    session = tessera.InferenceSession(unary_model("Relu", shape=[2]), environment=env)
    during = env.provider_stats("cpu")
    assert during["live_instances"] == 1 and during["live_compiled"] >= 1
    session.run(None, {"x": np.array([-1.0, 2.0], np.float32)})
    assert env.provider_stats("cpu")["total_allocations"] > during["total_allocations"]
    del session
    after = env.provider_stats("cpu")
    assert after["live_instances"] == 0 and after["live_compiled"] == 0 and after["live_allocations"] == 0
    with pytest.raises(tessera.TesseraError):
        env.provider_stats("no-such-provider")


def test_partition_plan():
    session = tessera.InferenceSession(add_model(), providers=["cpu"], strict=True)
    plan = session.get_partitions()
    assert plan and all(p["provider"] == "cpu" for p in plan)
    assert set(plan[0]) == {"provider", "nodes", "ops", "inputs", "outputs", "copy_count"}
    nodes = [n for p in plan for n in p["nodes"]]
    ops = [o for p in plan for o in p["ops"]]
    assert sorted(nodes) == ["add", "relu"] and sorted(ops) == ["Add", "Relu"]
    assert {"z", "w"} <= {o for p in plan for o in p["outputs"]}
    assert "x" in {i for p in plan for i in p["inputs"]}
    assert all(p["copy_count"] == 0 for p in plan)
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_optimization_level_controls_identity_removal():
    model = make_model([helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                       [tensor("x", shape=[2])], [tensor("y", shape=[2])])
    ops = lambda s: [o for p in s.get_partitions() for o in p["ops"]]  # noqa: E731
    assert ops(tessera.InferenceSession(model, optimization_level=1)) == ["Relu"]
    assert sorted(ops(tessera.InferenceSession(model, optimization_level=0))) == ["Identity", "Relu"]


def test_onnxruntime_provider_names_and_threads():
    session = tessera.InferenceSession(unary_model("Relu", shape=[3]), providers=["CPUExecutionProvider"],
                                       intra_op_threads=1)
    assert session.get_providers() == ["CPUExecutionProvider"]
    (y,) = session.run(None, {"x": np.array([-1, 0, 1], np.float32)})
    np.testing.assert_array_equal(y, [0, 0, 1])


def test_python_scalars_and_lists_take_the_declared_type():
    session = tessera.InferenceSession(unary_model("Neg", shape=[3]))
    (y,) = session.run(None, {"x": [1, 2, 3]})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [-1, -2, -3])


def test_non_contiguous_input_is_accepted():
    session = tessera.InferenceSession(unary_model("Neg", shape=[2, 3]))
    x = np.arange(6, dtype=np.float32).reshape(3, 2).T  # a transposed (Fortran-ordered) view
    assert not x.flags.c_contiguous
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, -x)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8, np.bool_])
def test_dtypes_round_trip(dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    session = tessera.InferenceSession(unary_model("Identity", elem, [2, 2]), optimization_level=0)
    x = (np.arange(4) % 2).astype(dtype).reshape(2, 2)
    (y,) = session.run(None, {"x": x})
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, x)


def test_the_version_is_written_once():
    # CMake's project() version feeds tessera/version.h, tess_version() and tessera.__version__, and the package's
    # metadata reads it from there (pyproject.toml states none of its own).
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[3]
    cmake = re.search(r"project\(Tessera VERSION (\S+)", (root / "CMakeLists.txt").read_text()).group(1)
    pyproject = (root / "bindings/python/pyproject.toml").read_text()
    assert re.search(r'^version\s*=', pyproject, re.M) is None
    assert 'dynamic = ["version"]' in pyproject and 'input = "../../CMakeLists.txt"' in pyproject
    pattern = re.search(r"^regex = '(.*)'$", pyproject, re.M).group(1)
    assert re.search(pattern, (root / "CMakeLists.txt").read_text()).group("value") == cmake
    assert tessera.__version__ == tessera.library_version() == cmake


def _image_decoder_model():
    graph = helper.make_graph([helper.make_node("ImageDecoder", ["stream"], ["image"], pixel_format="RGB")], "decode",
                              [helper.make_tensor_value_info("stream", TensorProto.UINT8, [None])],
                              [helper.make_tensor_value_info("image", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


def _ppm(width, height):
    """A binary PPM (decoded by the image provider's own parser) and its pixels."""
    pixels = np.random.default_rng(3).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return np.frombuffer(f"P6\n{width} {height}\n255\n".encode() + pixels.tobytes(), np.uint8), pixels


def test_image_provider_opens_its_decoders_on_the_first_decode(tmp_path):
    """The image plugin runs ImageDecoder through image/libtessera_image_codecs.so, opened on its first decode; a
    plugin copied without that folder loads, and a decode then fails naming what is missing."""
    plugin_dir = os.path.join(os.path.dirname(tessera.library_path), "tessera", "plugins")
    plugin = os.path.join(plugin_dir, "libtessera_image.so")
    if not os.path.exists(plugin):
        pytest.skip("built without the image provider (-DTESSERA_IMAGE_PROVIDER=OFF)")
    stream, pixels = _ppm(5, 3)
    session = tessera.InferenceSession(_image_decoder_model())
    (image,) = session.run(None, {"stream": stream})
    np.testing.assert_array_equal(image, pixels)

    shutil.copy(plugin, tmp_path / "libtessera_image.so")  # no image/ folder beside it
    env = tessera.Environment(plugin_path=[str(tmp_path)], no_default_plugin_dirs=True)
    assert "image" in env.providers()
    lonely = tessera.InferenceSession(_image_decoder_model(), environment=env)
    with pytest.raises(tessera.TesseraError, match="image decoders"):
        lonely.run(None, {"stream": stream})
