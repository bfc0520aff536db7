"""Arrays cross the boundary without copies where the layout allows, and output memory lives as long as its arrays."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from model_factory import add_model, unary_model

import tessera
from tessera import _capi, _types
from tessera._values import OutputValue, to_value


def _input_address(array: np.ndarray) -> tuple[int, list]:
    """The data address of the TessValue the bindings make for `array`, and the arrays it keeps alive."""
    keep: list = []
    handle = to_value(array, _types.KIND_TENSOR, _types.FLOAT, keep, "x")
    try:
        return _capi.lib.tess_tensor_data(handle), keep
    finally:
        _capi.lib.tess_value_release(handle)


def test_contiguous_input_is_wrapped_not_copied():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    address, keep = _input_address(x)
    assert address == x.ctypes.data
    assert keep and keep[0] is x  # held for as long as the value exists


def test_strided_input_is_copied_once():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    address, keep = _input_address(x)
    assert address != x.ctypes.data
    assert keep[0].flags.c_contiguous and np.array_equal(keep[0], x)


def test_byte_swapped_input_is_converted():
    session = tessera.InferenceSession(unary_model("Neg", shape=[3]))
    (y,) = session.run(None, {"x": np.array([1, 2, 3], dtype=">f4")})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [-1, -2, -3])


def test_inputs_are_not_modified_and_may_be_read_only():
    session = tessera.InferenceSession(unary_model("Relu", shape=[4]))
    x = np.array([-2, -1, 1, 2], np.float32)
    x.setflags(write=False)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(x, [-2, -1, 1, 2])
    np.testing.assert_array_equal(y, [0, 0, 1, 2])


def test_output_is_a_view_of_the_value_memory():
    session = tessera.InferenceSession(add_model())
    gc.collect()  # outputs of earlier tests waiting for collection must not count
    before = tessera.live_output_values()
    z, w = session.run(None, {"x": np.ones((2, 3), np.float32)})
    assert tessera.live_output_values() == before + 2
    owner = z.base.owner
    assert isinstance(owner, OutputValue)
    assert not z.flags.owndata
    assert z.ctypes.data == _capi.lib.tess_tensor_data(owner.handle)
    assert z.flags.writeable and z.flags.c_contiguous and z.ctypes.data % 16 == 0
    assert w.base.owner is not owner  # one TessValue per output
    del z, w, owner
    gc.collect()
    assert tessera.live_output_values() == before


def test_views_keep_the_value_alive():
    session = tessera.InferenceSession(add_model())
    gc.collect()  # outputs of earlier tests waiting for collection must not count
    before = tessera.live_output_values()
    (z,) = session.run(["z"], {"x": np.zeros((4, 3), np.float32)})
    tail = z[2:]
    del z
    gc.collect()
    assert tessera.live_output_values() == before + 1
    np.testing.assert_array_equal(tail, np.ones((2, 3)))
    del tail
    gc.collect()
    assert tessera.live_output_values() == before


def test_outputs_keep_the_session_alive():
    session = tessera.InferenceSession(add_model(), environment=tessera.Environment())
    (z,) = session.run(["z"], {"x": np.full((1, 3), 2, np.float32)})
    del session
    gc.collect()
    # The value's memory came from the session's provider; the array still reads it safely.
    np.testing.assert_array_equal(z, [[3, 3, 3]])
    assert z.base.owner.session is not None


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3)])
def test_empty_tensors(shape):
    session = tessera.InferenceSession(unary_model("Neg", shape=list(shape)))
    (y,) = session.run(None, {"x": np.zeros(shape, np.float32)})
    assert y.shape == shape and y.dtype == np.float32
