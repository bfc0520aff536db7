"""Sequences, optionals, strings and the types numpy lacks, in and out."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from model_factory import make_model, optional_model, sequence_model, tensor, unary_model
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.runner import Runner

import tessera
from tessera import _types

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_sequence_in_and_out():
    session = tessera.InferenceSession(sequence_model())
    assert session.get_inputs()[0].type == "seq(tensor(float))"
    items = [np.array([1, 2], np.float32), np.array([[3]], np.float32)]
    n, first, seq = session.run(None, {"seq": items, "x": np.array([9], np.float32)})
    assert n == 2 and n.dtype == np.int64
    np.testing.assert_array_equal(first, items[0])
    assert isinstance(seq, list) and len(seq) == 3
    for got, want in zip(seq, items + [np.array([9], np.float32)]):
        np.testing.assert_array_equal(got, want)
    assert isinstance(seq[0].base.owner, tessera._values.OutputValue)  # sequence items are views too


def test_empty_sequence():
    session = tessera.InferenceSession(sequence_model())
    with pytest.raises(tessera.TesseraError):  # SequenceAt(seq, 0) on an empty sequence fails in the kernel
        session.run(None, {"seq": [], "x": np.array([1], np.float32)})
    with pytest.raises(tessera.InvalidArgument, match="sequence"):
        session.run(None, {"seq": np.zeros(2, np.float32), "x": np.array([1], np.float32)})


def test_optional_in_and_out():
    session = tessera.InferenceSession(optional_model())
    assert session.get_inputs()[0].type == "optional(tensor(float))"
    has, same = session.run(None, {"opt": np.array([1.5, 2.5], np.float32)})
    assert bool(has) is True
    np.testing.assert_array_equal(same, [1.5, 2.5])
    has, same = session.run(None, {"opt": None})
    assert bool(has) is False and same is None


def test_strings_round_trip():
    session = tessera.InferenceSession(unary_model("Identity", TensorProto.STRING, [2, 2]), optimization_level=0)
    assert session.get_inputs()[0].type == "tensor(string)"
    for x in (np.array([["a", "bé"], ["", "long " * 20]]), np.array([["p", "q"], ["r", "s"]], dtype=object)):
        (y,) = session.run(None, {"x": x})
        assert y.dtype == object and y.shape == (2, 2) and y.tolist() == x.tolist()
    (y,) = session.run(None, {"x": np.array([[b"x", b"y"], [b"z", b"\xff"]], dtype=object)})
    assert y.tolist() == [["x", "y"], ["z", b"\xff"]]  # UTF-8 comes back as str, anything else as bytes


def test_string_operator():
    model = make_model([helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER")],
                       [tensor("x", TensorProto.STRING, [3])], [tensor("y", TensorProto.STRING, None)], opset=10)
    (y,) = tessera.InferenceSession(model).run(None, {"x": np.array(["monday", "Tuesday", "x"], dtype=object)})
    assert y.tolist() == ["MONDAY", "TUESDAY", "X"]


@pytest.mark.parametrize("elem", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
def test_extended_float_types(elem):
    session = tessera.InferenceSession(unary_model("Identity", elem, [4], opset=21), optimization_level=0)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = np.array([1.0, -2.0, 0.5, 4.0], dtype=dtype)
    (y,) = session.run(None, {"x": x})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32))
    # The raw carrier works as input for the declared type.
    carrier = x.view(np.uint16 if dtype.itemsize == 2 else np.uint8)
    (y2,) = session.run(None, {"x": carrier})
    assert y2.dtype == dtype and np.array_equal(y2.view(carrier.dtype), carrier)


@pytest.mark.parametrize("elem,values", [(TensorProto.INT4, [-8, -1, 0, 7, 3]), (TensorProto.UINT4, [0, 15, 7, 1, 2]),
                                          (TensorProto.FLOAT4E2M1, [0.5, -6.0, 1.5, 0.0, 3.0])])
def test_packed_sub_byte_types(elem, values):
    session = tessera.InferenceSession(unary_model("Identity", elem, [5], opset=23), optimization_level=0)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = np.array(values, dtype=dtype)
    (y,) = session.run(None, {"x": x})
    assert y.dtype == dtype and y.shape == (5,)
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32))


def test_pack_and_unpack_helpers():
    codes = np.array([1, 2, 3, 4, 5], np.uint8)
    packed = _types.pack(codes, _types.UINT4)
    assert packed.tolist() == [0x21, 0x43, 0x05]
    assert _types.unpack(packed, _types.UINT4, (5,)).astype(np.uint8).tolist() == [1, 2, 3, 4, 5]
    two_bit = _types.pack(np.array([1, 2, 3, 0, 1], np.uint8), _types.UINT2)
    assert two_bit.tolist() == [0b00111001, 0b01]
    signed = _types.unpack(_types.pack(np.array([-1, -8, 7], np.int8), _types.INT4), _types.INT4, (3,))
    assert signed.astype(np.int8).tolist() == [-1, -8, 7]


def _load(path: str, type_proto: onnx.TypeProto) -> list:
    out: list = []
    Runner._load_proto(None, path, out, type_proto)  # onnx's own reader (tensor, sequence or optional)
    return out[0]


SIMPLE_CASES = [f"test_sequence_model{i}" for i in range(1, 9)] + ["test_strnorm_model_monday_casesensintive_upper"]


@pytest.mark.parametrize("case", SIMPLE_CASES)
def test_simple_models_round_trip(backend_data, case):
    """onnx's small sequence/string models, inputs fed from their protobuf files and outputs compared."""
    directory = os.path.join(backend_data, "simple", case)
    model = onnx.load(os.path.join(directory, "model.onnx"))
    session = tessera.InferenceSession(os.path.join(directory, "model.onnx"))
    for data_set in sorted(glob.glob(os.path.join(directory, "test_data_set_*"))):
        feed = {}
        for i in range(len(glob.glob(os.path.join(data_set, "input_*.pb")))):
            feed[model.graph.input[i].name] = _load(os.path.join(data_set, f"input_{i}.pb"), model.graph.input[i].type)
        expected = [_load(os.path.join(data_set, f"output_{i}.pb"), model.graph.output[i].type)
                    for i in range(len(glob.glob(os.path.join(data_set, "output_*.pb"))))]
        Runner.assert_similar_outputs(expected, session.run(None, feed), rtol=1e-3, atol=1e-7)


def test_sequence_outputs_match_numpy_helper(backend_data):
    directory = os.path.join(backend_data, "node", "test_sequence_insert_at_back")
    if not os.path.isdir(directory):
        pytest.skip("case not present")
    model = onnx.load(os.path.join(directory, "model.onnx"))
    session = tessera.InferenceSession(model)
    data_set = os.path.join(directory, "test_data_set_0")
    seq = onnx.SequenceProto()
    with open(os.path.join(data_set, "input_0.pb"), "rb") as f:
        seq.ParseFromString(f.read())
    items = numpy_helper.to_list(seq)
    inputs = [items] + [_load(os.path.join(data_set, f"input_{i}.pb"), model.graph.input[i].type)
                        for i in range(1, len(model.graph.input))]
    (out,) = session.run(None, dict(zip([i.name for i in model.graph.input], inputs)))
    assert isinstance(out, list) and len(out) == len(items) + 1
