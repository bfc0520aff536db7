"""Error paths: every failure is a TesseraError subclass carrying the C status code and message."""

from __future__ import annotations

import numpy as np
import pytest
from model_factory import make_model, tensor, unary_model
from onnx import helper

import tessera
from tessera import StatusCode


@pytest.fixture(scope="module")
def relu():
    return tessera.InferenceSession(unary_model("Relu", shape=[2]))


def raises(cls, code, match=None):
    """pytest.raises for a TesseraError subclass that also checks `.code`."""

    class _Check:
        def __enter__(self):
            self._ctx = pytest.raises(cls, match=match)
            self.info = self._ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self._ctx.__exit__(*exc)
            err = self.info.value
            assert err.code == code and isinstance(err.code, StatusCode)
            assert err.message and err.message in str(err)
            return handled

    return _Check()


def test_missing_model_file():
    with raises(tessera.NotFound, StatusCode.NOT_FOUND, "not found"):
        tessera.InferenceSession("/nonexistent/model.onnx")


def test_garbage_bytes_are_an_invalid_model():
    with raises(tessera.InvalidModel, StatusCode.INVALID_MODEL):
        tessera.InferenceSession(b"this is not a protobuf")


def test_unimported_domain_is_an_invalid_model():
    model = make_model([helper.make_node("Foo", ["x"], ["y"], domain="com.example")], [tensor("x", shape=[2])],
                       [tensor("y", shape=[2])])
    with raises(tessera.InvalidModel, StatusCode.INVALID_MODEL, "com.example"):
        tessera.InferenceSession(model)


def test_operator_without_kernel_is_not_implemented():
    model = make_model([helper.make_node("Foo", ["x"], ["y"], domain="com.example")], [tensor("x", shape=[2])],
                       [tensor("y", shape=[2])], extra_opsets=[("com.example", 1)])
    with raises(tessera.NotImplemented, StatusCode.NOT_IMPLEMENTED, "Foo"):
        tessera.InferenceSession(model)
    with pytest.raises(NotImplementedError):  # the built-in base class works too
        tessera.InferenceSession(model)


def test_strict_mode_rejects_a_missing_provider():
    with raises(tessera.Unavailable, StatusCode.UNAVAILABLE, "no_such_provider"):
        tessera.InferenceSession(unary_model("Relu", shape=[2]), providers=["no_such_provider"], strict=True)


def test_wrong_input_name(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "no input named 'nope'"):
        relu.run(None, {"nope": np.zeros(2, np.float32)})


def test_missing_input(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "missing"):
        relu.run(None, {})


def test_wrong_output_name(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "no output named"):
        relu.run(["nope"], {"x": np.zeros(2, np.float32)})


def test_wrong_dtype(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "element type float but got double"):
        relu.run(None, {"x": np.zeros(2, np.float64)})
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        relu.run(None, {"x": np.zeros(2, np.int32)})


def test_wrong_shape(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "shape"):
        relu.run(None, {"x": np.zeros(3, np.float32)})


def test_dtype_without_element_type(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "datetime64"):
        relu.run(None, {"x": np.zeros(2, "datetime64[s]")})


def test_none_for_a_tensor_input(relu):
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT, "None"):
        relu.run(None, {"x": None})


def test_bad_arguments_from_python():
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT):
        tessera.InferenceSession(12345)
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT):
        tessera.InferenceSession(unary_model("Relu", shape=[2]), providers=["TensorrtExecutionProvider"])
    with raises(tessera.InvalidArgument, StatusCode.INVALID_ARGUMENT):
        tessera.InferenceSession(unary_model("Relu", shape=[2]), providers=[("cpu", "not a dict")])


def test_session_survives_errors(relu):
    """Failed runs leave the session usable (and release their statuses and input values)."""
    for _ in range(200):
        with pytest.raises(tessera.InvalidArgument):
            relu.run(None, {"x": np.zeros(5, np.float32)})
    (y,) = relu.run(None, {"x": np.array([-1, 1], np.float32)})
    np.testing.assert_array_equal(y, [0, 1])
    assert tessera.live_output_values() >= 0


def test_error_classes():
    err = tessera.errors.error_for(StatusCode.RUNTIME_ERROR, "kernel failed")
    assert isinstance(err, tessera.RuntimeException) and isinstance(err, RuntimeError)
    assert str(err) == "[RUNTIME_ERROR] kernel failed"
    unknown = tessera.errors.error_for(42, "future code")
    assert type(unknown) is tessera.TesseraError and unknown.code == 42
