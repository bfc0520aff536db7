"""float6e2m3 / float6e3m2 (ONNX IR 14, opset 28) through the bindings: packing, inputs and outputs as ml_dtypes
arrays, initializers in raw_data and int32_data, and Cast against ml_dtypes (what ONNX's reference casts with).

The pinned onnx predates these types, so models are built from raw type numbers; the comparison with onnx's
ReferenceEvaluator runs only when the installed onnx knows them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from model_factory import make_model, tensor
from onnx import TensorProto, helper

import tessera
from tessera import _types

ml_dtypes = pytest.importorskip("ml_dtypes")
if not hasattr(ml_dtypes, "float6_e2m3fn"):
    pytest.skip("ml_dtypes has no float6 types", allow_module_level=True)

FLOAT6 = [(_types.FLOAT6E2M3, ml_dtypes.float6_e2m3fn), (_types.FLOAT6E3M2, ml_dtypes.float6_e3m2fn)]
NAMES = {_types.FLOAT6E2M3: "float6e2m3", _types.FLOAT6E3M2: "float6e3m2"}
IDS = list(NAMES.values())
CODES = np.array([0x3F, 0x2A, 0x15, 0x33, 0x0C], np.uint8)
PACKED = [0xBF, 0x5A, 0xCD, 0x0C]  # onnx.proto's 4-in-3-bytes layout of CODES


def model_28(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    model = make_model(nodes, inputs, outputs, initializers, opset=28)
    model.ir_version = 14
    return model


def float6_initializer(name: str, elem: int, codes: np.ndarray, raw: bool) -> onnx.TensorProto:
    t = TensorProto(name=name, data_type=elem, dims=[codes.size])
    if raw:
        t.raw_data = _types.pack(codes, elem).tobytes()
    else:
        t.int32_data.extend(int(c) for c in codes)
    return t


def test_pack_and_unpack_six_bit():
    assert _types.pack(CODES, _types.FLOAT6E2M3).tolist() == PACKED
    for n in range(1, 10):
        codes = (np.arange(n, dtype=np.uint8) * 23 + 45) & 63
        packed = _types.pack(codes, _types.FLOAT6E3M2)
        assert packed.size == -(-6 * n // 8)
        assert _types.unpack(packed, _types.FLOAT6E3M2, (n,)).view(np.uint8).tolist() == codes.tolist()


def float_inputs(dtype) -> np.ndarray:
    """Every value of the format, the midpoints between neighbours and just off them, out of range values,
    infinities, NaN and random numbers over the whole range."""
    values = np.arange(64, dtype=np.uint8).view(dtype).astype(np.float32)
    ordered = np.unique(values[np.isfinite(values)])
    mids = (ordered[:-1] + ordered[1:]) / 2
    top = float(ml_dtypes.finfo(dtype).max)
    specials = np.array([np.inf, -np.inf, np.nan, -np.nan, top * 1.01, -top * 9, 1e30, 1e-30, -0.0], np.float32)
    rng = np.random.default_rng(6)
    random = (rng.standard_normal(4000) * rng.choice([0.01, 0.3, 3, 30], 4000)).astype(np.float32)
    return np.concatenate([values, mids, np.nextafter(mids, 0), np.nextafter(mids, 100), specials, random])


@pytest.mark.parametrize("elem,dtype", FLOAT6, ids=IDS)
def test_cast_matches_ml_dtypes(elem, dtype):
    x = float_inputs(dtype)
    n = x.size
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=elem), helper.make_node("Cast", ["q"], ["back"], to=1),
             helper.make_node("Identity", ["q"], ["same"])]
    session = tessera.InferenceSession(
        model_28(nodes, [tensor("x", TensorProto.FLOAT, [n])],
                 [tensor("q", elem, [n]), tensor("back", TensorProto.FLOAT, [n]), tensor("same", elem, [n])]),
        optimization_level=0)
    assert session.get_outputs()[0].type == f"tensor({NAMES[elem]})"
    q, back, same = session.run(None, {"x": x})
    expected = x.astype(dtype)
    assert q.dtype == dtype and q.shape == (n,)
    np.testing.assert_array_equal(q.view(np.uint8), expected.view(np.uint8))
    np.testing.assert_array_equal(back.view(np.uint32), expected.astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(same.view(np.uint8), q.view(np.uint8))


@pytest.mark.parametrize("elem,dtype", FLOAT6, ids=IDS)
def test_float6_inputs_and_initializers(elem, dtype):
    n = CODES.size
    nodes = [helper.make_node("Concat", ["x", "raw", "typed"], ["all"], axis=0),
             helper.make_node("Cast", ["all"], ["y"], to=1)]
    outputs = [tensor("all", elem, [3 * n]), tensor("y", TensorProto.FLOAT, [3 * n])]
    initializers = [float6_initializer("raw", elem, CODES, raw=True),
                    float6_initializer("typed", elem, CODES, raw=False)]
    model = model_28(nodes, [tensor("x", elem, [n])], outputs, initializers)
    session = tessera.InferenceSession(model.SerializeToString())
    x = CODES[::-1].copy().view(dtype)
    for feed in (x, x.view(np.uint8)):  # the ml_dtypes array or its uint8 carrier
        everything, y = session.run(None, {"x": feed})
        codes = np.concatenate([CODES[::-1], CODES, CODES])
        assert everything.dtype == dtype
        np.testing.assert_array_equal(everything.view(np.uint8), codes)
        np.testing.assert_array_equal(y, codes.view(dtype).astype(np.float32))


needs_onnx_float6 = pytest.mark.skipif(not hasattr(TensorProto, "FLOAT6E2M3"),
                                       reason=f"onnx {onnx.__version__} has no float6 types")


def run_both(model: onnx.ModelProto, feeds: dict) -> tuple[list, list]:
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = tessera.InferenceSession(model.SerializeToString()).run(None, feeds)
    return actual, expected


@needs_onnx_float6
@pytest.mark.parametrize("elem,dtype", FLOAT6, ids=IDS)
def test_matches_the_onnx_reference(elem, dtype):
    x = float_inputs(dtype)
    n = x.size
    zero_point = helper.make_tensor("zp", elem, [], [0.5])
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=elem),
             helper.make_node("Cast", ["c"], ["c_back"], to=TensorProto.FLOAT16),
             helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["dq"])]
    model = model_28(nodes, [tensor("x", TensorProto.FLOAT, [n]), tensor("scale", TensorProto.FLOAT, [])],
                     [tensor("c", elem, [n]), tensor("c_back", TensorProto.FLOAT16, [n]), tensor("q", elem, [n]),
                      tensor("dq", TensorProto.FLOAT, [n])], [zero_point])
    actual, expected = run_both(model, {"x": x, "scale": np.array(0.75, np.float32)})
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@needs_onnx_float6
@pytest.mark.parametrize("elem,dtype", FLOAT6, ids=IDS)
def test_block_quantization_matches_the_onnx_reference(elem, dtype):
    # MX style: blocks of 4 along the last axis share a float8e8m0 power-of-two scale.
    rng = np.random.default_rng(28)
    x = (rng.standard_normal((3, 10)) * 4).astype(np.float32)
    scale = (2.0 ** rng.integers(-3, 3, (3, 3))).astype(ml_dtypes.float8_e8m0fnu)
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale"], ["q"], axis=1, block_size=4, output_dtype=elem),
             helper.make_node("DequantizeLinear", ["q", "scale"], ["dq"], axis=1, block_size=4,
                              output_dtype=TensorProto.FLOAT)]
    model = model_28(nodes, [tensor("x", TensorProto.FLOAT, [3, 10]), tensor("scale", TensorProto.FLOAT8E8M0, [3, 3])],
                     [tensor("q", elem, [3, 10]), tensor("dq", TensorProto.FLOAT, [3, 10])])
    actual, expected = run_both(model, {"x": x, "scale": scale})
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
