"""onnxruntime's com.microsoft operators of its transformer optimizer and converters, kernels of the CPU provider
(plugins/cpu/kernels/contrib/: Gelu family, BiasAdd, BiasSplitGelu, Skip(Simplified)LayerNormalization, BiasSoftmax,
FusedMatMul, FusedGemm, GemmFastGelu, FusedConv).

Every operator runs in small models built here, on Tessera's CPU provider (strict) and, where onnxruntime's CPU
provider implements the operator and type, on onnxruntime as the reference;
elsewhere (BiasAdd, BiasSoftmax, 16-bit and double variants, the optional statistics outputs) against numpy
references written here.  Also: the checks decline what they should with a reason, shape inference fills output
shapes, and no plugin beyond the CPU provider is needed.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
CPU_PROVIDER = os.path.join(os.path.dirname(tessera.library_path), "tessera", "plugins", "libtessera_cpu.so")

try:
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is in requirements-dev.txt
    BFLOAT16 = None

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(np.float64): TensorProto.DOUBLE}
if BFLOAT16 is not None:
    ELEM[BFLOAT16] = TensorProto.BFLOAT16

RNG = np.random.default_rng(20240611)


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


# ---- Model building and running -------------------------------------------------------------------------------


def contrib_model(op, inputs, n_outputs=1, constants=(), output_names=None, output_dtypes=None, **attrs):
    """One `op` node in domain com.microsoft.  `inputs`: list of (name, array) with None for an omitted optional
    input; names in `constants` become initializers, the others graph inputs (with their full shapes)."""
    names, graph_inputs, inits = [], [], []
    for name, value in inputs:
        if value is None:
            names.append("")
            continue
        names.append(name)
        if name in constants:
            inits.append(onnx.numpy_helper.from_array(value, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, ELEM[value.dtype], list(value.shape)))
    outs = output_names or [f"out{i}" for i in range(n_outputs)]
    first = next(v for _, v in inputs if v is not None)
    dtypes = output_dtypes or [first.dtype] * len(outs)
    node = helper.make_node(op, names, outs, domain=MS, name=f"{op.lower()}_node", **attrs)
    graph = helper.make_graph([node], "contrib", graph_inputs,
                              [helper.make_tensor_value_info(o, ELEM[np.dtype(d)], None)
                               for o, d in zip(outs, dtypes) if o],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=9)


def feeds_of(model, inputs):
    graph_inputs = {i.name for i in model.graph.input}
    return {name: value for name, value in inputs if value is not None and name in graph_inputs}


def run_tessera(model, inputs):
    session = tessera.InferenceSession(model, providers=["cpu"], strict=True)
    (partition,) = session.get_partitions()
    assert partition["provider"] == "cpu"
    assert partition["ops"] == [f"{MS}:{model.graph.node[0].op_type}"]
    return session.run(None, feeds_of(model, inputs))


def run_onnxruntime(model, inputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds_of(model, inputs))


def tolerance(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return dict(rtol=1e-10, atol=1e-12)
    if dtype == np.float16:
        return dict(rtol=2e-3, atol=2e-3)
    if BFLOAT16 is not None and dtype == BFLOAT16:
        return dict(rtol=1.6e-2, atol=1.6e-2)
    return dict(rtol=1e-5, atol=1e-5)


def assert_close(actual, expected, dtype=np.float32, **override):
    tol = tolerance(dtype)
    tol.update(override)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(np.asarray(actual, np.float64), np.asarray(expected, np.float64), **tol)


def check_against_onnxruntime(op, inputs, n_outputs=1, constants=(), output_names=None, tol=None, **attrs):
    model = contrib_model(op, inputs, n_outputs, constants, output_names, **attrs)
    ours = run_tessera(model, inputs)
    theirs = run_onnxruntime(model, inputs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        assert_close(a, b, a.dtype, **(tol or {}))
    return ours


# ---- numpy references (for what onnxruntime's CPU provider does not run) --------------------------------------

_erf = np.vectorize(math.erf)


def gelu_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def fast_gelu_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def quick_gelu_ref(x, alpha=float(np.float32(1.702))):  # the attribute is a float32
    x = x.astype(np.float64)
    return x / (1.0 + np.exp(-alpha * x))


def skip_layer_norm_ref(x, skip, gamma, beta=None, bias=None, eps=1e-12, simplified=False):
    v = x.astype(np.float64) + skip.astype(np.float64)
    if bias is not None:
        v = v + bias.astype(np.float64)
    mean = v.mean(-1, keepdims=True)
    if simplified:
        denom = np.sqrt((v * v).mean(-1, keepdims=True) + eps)
        out = v / denom * gamma
    else:
        denom = np.sqrt(v.var(-1, keepdims=True) + eps)
        out = (v - mean) / denom * gamma
        if beta is not None:
            out = out + beta
    return out, mean, 1.0 / denom, v


def softmax_ref(x, axis):
    shape = x.shape
    flat = x.astype(np.float64).reshape(int(np.prod(shape[:axis], dtype=np.int64)), -1)
    e = np.exp(flat - flat.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(shape)


def conv_ref(x, w, b=None, z=None, strides=None, pads=None, dilations=None, group=1):
    """Direct N-d convolution in float64 (explicit pads)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    s = x.ndim - 2
    strides = strides or [1] * s
    dilations = dilations or [1] * s
    pads = pads or [0] * (2 * s)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + s]) for i in range(s)])
    n, c = x.shape[:2]
    m = w.shape[0]
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - (dilations[i] * (k[i] - 1) + 1)) // strides[i] + 1 for i in range(s)]
    y = np.zeros((n, m, *out))
    cg, mg = c // group, m // group
    for g in range(group):
        for kidx in np.ndindex(*k):
            sl = tuple(slice(kidx[i] * dilations[i], kidx[i] * dilations[i] + strides[i] * (out[i] - 1) + 1,
                             strides[i]) for i in range(s))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]  # n, cg, out...
            wk = w[(slice(g * mg, (g + 1) * mg), slice(None)) + kidx]  # mg, cg
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", patch, wk)
    if b is not None:
        y += b.astype(np.float64).reshape((1, m) + (1,) * s)
    if z is not None:
        y += z.astype(np.float64)
    return y


# ---- Gelu family ---------------------------------------------------------------------------------------------

SHAPES = [(7,), (3, 16), (2, 5, 33)]


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_matches_onnxruntime(shape):
    x = rand(*shape, scale=3.0)
    check_against_onnxruntime("Gelu", [("x", x)])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu_matches_onnxruntime(shape, with_bias):
    x = rand(*shape, scale=3.0)
    bias = rand(shape[-1]) if with_bias else None
    check_against_onnxruntime("FastGelu", [("x", x), ("bias", bias)])


@pytest.mark.parametrize("shape", SHAPES)
def test_bias_gelu_matches_onnxruntime(shape):
    check_against_onnxruntime("BiasGelu", [("a", rand(*shape, scale=3.0)), ("b", rand(shape[-1]))],
                              constants=("b",))


@pytest.mark.parametrize("alpha", [None, 1.0, -0.5, 2.5])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_quick_gelu_matches_onnxruntime(shape, alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    check_against_onnxruntime("QuickGelu", [("x", rand(*shape, scale=4.0))], **attrs)


@pytest.mark.parametrize("dtype", [np.float16, np.float64] + ([BFLOAT16] if BFLOAT16 is not None else []),
                         ids=lambda d: np.dtype(d).name)
def test_gelu_family_other_types(dtype):
    x = rand(4, 24, scale=3.0).astype(dtype)
    bias = rand(24).astype(dtype)
    cases = [("Gelu", [("x", x)], gelu_ref(x)),
             ("FastGelu", [("x", x)], fast_gelu_ref(x)),
             ("FastGelu", [("x", x), ("bias", bias)], fast_gelu_ref(x.astype(np.float64) + bias.astype(np.float64))),
             ("BiasGelu", [("x", x), ("bias", bias)], gelu_ref(x.astype(np.float64) + bias.astype(np.float64))),
             ("QuickGelu", [("x", x)], quick_gelu_ref(x))]
    for op, inputs, expected in cases:
        (y,) = run_tessera(contrib_model(op, inputs), inputs)
        assert y.dtype == np.dtype(dtype), op
        assert_close(y, expected, dtype)


def test_fast_gelu_reuses_the_bias_per_row():
    x = np.zeros((3, 4), np.float32)
    bias = np.array([1.0, -1.0, 2.0, 0.0], np.float32)
    (y,) = run_tessera(contrib_model("FastGelu", [("x", x), ("bias", bias)]), [("x", x), ("bias", bias)])
    assert_close(y, np.broadcast_to(fast_gelu_ref(bias), (3, 4)))


# ---- BiasAdd ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1, 4, 32), (2, 9, 40)])
def test_bias_add(shape, dtype):
    x, bias, skip = rand(*shape).astype(dtype), rand(shape[-1]).astype(dtype), rand(*shape).astype(dtype)
    inputs = [("x", x), ("bias", bias), ("skip", skip)]
    (y,) = run_tessera(contrib_model("BiasAdd", inputs, constants=("bias",)), inputs)
    assert_close(y, x.astype(np.float64) + bias + skip.astype(np.float64), dtype)


# ---- BiasSplitGelu, GemmFastGelu (onnxruntime runs them on GPUs only) ---------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1, 3, 8), (2, 5, 64)])
def test_bias_split_gelu(shape, dtype):
    x, bias = rand(*shape, scale=2.0).astype(dtype), rand(shape[-1]).astype(dtype)
    inputs = [("x", x), ("bias", bias)]
    (y,) = run_tessera(contrib_model("BiasSplitGelu", inputs, constants=("bias",)), inputs)
    v = x.astype(np.float64) + bias.astype(np.float64)
    half = shape[-1] // 2
    assert_close(y, v[..., :half] * gelu_ref(v[..., half:]), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("x_shape,w_shape,with_bias", [
    ((4, 8), (8, 16), True), ((2, 3, 8), (8, 5), True), ((2, 3, 8), (8, 5), False), ((2, 3, 8), (2, 8, 6), True),
])
def test_gemm_fast_gelu(x_shape, w_shape, with_bias, dtype):
    x, w = rand(*x_shape).astype(dtype), rand(*w_shape, scale=0.5).astype(dtype)
    bias = rand(w_shape[-1]).astype(dtype) if with_bias else None
    inputs = [("x", x), ("w", w), ("bias", bias)]
    (y,) = run_tessera(contrib_model("GemmFastGelu", inputs, constants=("w",)), inputs)
    v = x.astype(np.float64) @ w.astype(np.float64) + (0 if bias is None else bias.astype(np.float64))
    tol = {"rtol": 5e-3, "atol": 5e-3} if dtype == np.float16 else {}
    assert_close(y, fast_gelu_ref(v), dtype, **tol)


# ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization -----------------------------------------------------

SKIP_CASES = [  # input shape, skip shape
    ((2, 3, 16), (2, 3, 16)),
    ((2, 3, 16), (1, 3, 16)),
    ((2, 3, 16), (3, 16)),
    ((5, 24), (5, 24)),
    ((1, 7, 768), (1, 7, 768)),
]


@pytest.mark.parametrize("x_shape,skip_shape", SKIP_CASES)
@pytest.mark.parametrize("beta,bias", [(False, False), (True, False), (False, True), (True, True)])
def test_skip_layer_norm_matches_onnxruntime(x_shape, skip_shape, beta, bias):
    h = x_shape[-1]
    inputs = [("x", rand(*x_shape, scale=2.0)), ("skip", rand(*skip_shape)), ("gamma", rand(h)),
              ("beta", rand(h) if beta else None), ("bias", rand(h) if bias else None)]
    check_against_onnxruntime("SkipLayerNormalization", inputs, constants=("gamma", "beta"),
                              output_names=["out", "", "", "sum"], epsilon=1e-5)


@pytest.mark.parametrize("epsilon", [None, 1e-3])
def test_skip_layer_norm_epsilon_and_single_output(epsilon):
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    inputs = [("x", rand(2, 4, 8, scale=0.01)), ("skip", rand(2, 4, 8, scale=0.01)), ("gamma", rand(8))]
    check_against_onnxruntime("SkipLayerNormalization", inputs, **attrs)


def test_skip_layer_norm_float16_matches_onnxruntime():
    inputs = [("x", rand(2, 5, 32).astype(np.float16)), ("skip", rand(2, 5, 32).astype(np.float16)),
              ("gamma", rand(32).astype(np.float16)), ("beta", rand(32).astype(np.float16)),
              ("bias", rand(32).astype(np.float16))]
    check_against_onnxruntime("SkipLayerNormalization", inputs, constants=("gamma",),
                              output_names=["out", "", "", "sum"], epsilon=1e-6)


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_layer_norm_double(op):
    """onnxruntime's schemas stop at float (its CPU kernels would take double); compare with numpy."""
    x, skip, gamma, beta, bias = rand(2, 5, 32), rand(5, 32), rand(32), rand(32), rand(32)
    simplified = op.startswith("SkipSimplified")
    inputs = [("x", x), ("skip", skip), ("gamma", gamma)] + ([] if simplified else [("beta", beta)]) + [("bias", bias)]
    inputs = [(n, v.astype(np.float64)) for n, v in inputs]
    model = contrib_model(op, inputs, constants=("gamma",), output_names=["out", "", "", "sum"], epsilon=1e-6)
    out, total = run_tessera(model, inputs)
    ref_out, _, _, ref_sum = skip_layer_norm_ref(x, skip, gamma, None if simplified else beta, bias, eps=1e-6,
                                                 simplified=simplified)
    assert_close(out, ref_out, np.float64, rtol=1e-9, atol=1e-9)
    assert_close(total, ref_sum, np.float64)


def test_skip_layer_norm_statistics_outputs():
    x, skip, gamma, beta, bias = rand(2, 3, 16), rand(3, 16), rand(16), rand(16), rand(16)
    inputs = [("x", x), ("skip", skip), ("gamma", gamma), ("beta", beta), ("bias", bias)]
    model = contrib_model("SkipLayerNormalization", inputs, 4, output_dtypes=[np.float32] * 4, epsilon=1e-5)
    out, mean, inv_std, total = run_tessera(model, inputs)
    assert mean.dtype == inv_std.dtype == np.float32
    ref_out, ref_mean, ref_inv_std, ref_sum = skip_layer_norm_ref(x, skip, gamma, beta, bias, eps=1e-5)
    assert_close(out, ref_out)
    assert_close(mean, ref_mean)
    assert_close(inv_std, ref_inv_std)
    assert_close(total, ref_sum)


@pytest.mark.parametrize("x_shape,skip_shape", SKIP_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_skip_simplified_layer_norm_matches_onnxruntime(x_shape, skip_shape, bias):
    h = x_shape[-1]
    inputs = [("x", rand(*x_shape, scale=2.0)), ("skip", rand(*skip_shape)), ("gamma", rand(h)),
              ("bias", rand(h) if bias else None)]
    check_against_onnxruntime("SkipSimplifiedLayerNormalization", inputs, constants=("gamma", "bias"),
                              output_names=["out", "", "", "sum"], epsilon=1e-6)


def test_skip_simplified_layer_norm_float16_and_bfloat16():
    for dtype in [np.float16] + ([BFLOAT16] if BFLOAT16 is not None else []):
        x, skip, gamma, bias = (rand(*s).astype(dtype) for s in [(3, 2, 64), (3, 2, 64), (64,), (64,)])
        inputs = [("x", x), ("skip", skip), ("gamma", gamma), ("bias", bias)]
        model = contrib_model("SkipSimplifiedLayerNormalization", inputs, output_names=["out", "", "", "sum"],
                              epsilon=1e-6)
        out, total = run_tessera(model, inputs)
        ref_out, _, _, ref_sum = skip_layer_norm_ref(x.astype(np.float32), skip.astype(np.float32),
                                                     gamma.astype(np.float32), bias=bias.astype(np.float32),
                                                     eps=1e-6, simplified=True)
        assert_close(out, ref_out, dtype)
        assert_close(total, ref_sum, dtype)


# ---- BiasSoftmax ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("case", [
    # data shape, bias shape, axis, is_inner_broadcast
    ((2, 4, 5, 5), (2, 1, 1, 5), 3, 1),   # attention mask per batch, repeated over heads and rows
    ((2, 4, 5, 5), (1, 4, 5, 5), 3, 0),   # relative-position bias repeated over the batch
    ((2, 4, 5, 5), (2, 1, 5, 5), 2, 1),   # softmax over the last two dims (flattened)
    ((3, 6), (1, 6), 1, 0),
    ((3, 6), (3, 6), -1, 1),
])
def test_bias_softmax(case, dtype):
    shape, bias_shape, axis, inner = case
    x, bias = rand(*shape, scale=2.0).astype(dtype), rand(*bias_shape, scale=2.0).astype(dtype)
    inputs = [("x", x), ("bias", bias)]
    (y,) = run_tessera(contrib_model("BiasSoftmax", inputs, axis=axis, is_inner_broadcast=inner), inputs)
    expected = softmax_ref(x.astype(np.float64) + bias.astype(np.float64), axis % len(shape))
    assert_close(y, expected, dtype)


# ---- FusedMatMul, TransposeMatMul --------------------------------------------------------------------------------

MATMUL_CASES = [  # A shape, B shape, attributes
    ((4, 5), (5, 3), {}),
    ((4, 5), (3, 5), {"transB": 1}),
    ((5, 4), (5, 3), {"transA": 1, "alpha": 0.5}),
    ((5, 4), (3, 5), {"transA": 1, "transB": 1, "alpha": -2.0}),
    ((2, 3, 4, 5), (5, 6), {"alpha": 0.125}),
    ((2, 3, 4, 5), (1, 1, 5, 6), {}),
    ((4, 5), (2, 5, 6), {}),
    ((2, 1, 4, 5), (1, 3, 6, 5), {"transB": 1}),
    ((3, 5, 4), (3, 5, 6), {"transA": 1}),
    ((5,), (5, 3), {"transA": 1, "transB": 0}),
    ((2, 4, 5), (5,), {}),
    ((5,), (5,), {}),
    ((4, 2, 5), (2, 5, 3), {"transBatchA": 1}),
    ((2, 4, 5), (5, 2, 3), {"transBatchB": 1}),
    ((2, 4, 5), (3, 2, 5), {"transBatchB": 1, "transB": 1}),
    ((5, 2, 4), (2, 5, 3), {"transBatchA": 1, "transA": 1}),
    ((4, 2, 3, 5), (2, 3, 5, 6), {"transBatchA": 1, "alpha": 0.5}),
    ((5, 2, 3, 4), (6, 2, 3, 5), {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1}),
    ((3, 0, 4), (4, 2), {}),
    ((3, 4, 0), (0, 2), {}),
]


@pytest.mark.parametrize("a_shape,b_shape,attrs", MATMUL_CASES)
def test_fused_matmul_matches_onnxruntime(a_shape, b_shape, attrs):
    inputs = [("a", rand(*a_shape)), ("b", rand(*b_shape))]
    check_against_onnxruntime("FusedMatMul", inputs, tol={"rtol": 1e-5, "atol": 2e-5}, **attrs)


def test_fused_matmul_with_constant_weights_and_transpose_matmul():
    inputs = [("a", rand(2, 7, 16)), ("w", rand(24, 16))]
    check_against_onnxruntime("FusedMatMul", inputs, constants=("w",), transB=1, alpha=0.25)
    check_against_onnxruntime("TransposeMatMul", inputs, constants=("w",), transB=1, alpha=0.25)


def matmul_ref(a, b, transA=0, transB=0, transBatchA=0, transBatchB=0, alpha=1.0):
    a, b = a.astype(np.float64), b.astype(np.float64)
    if transBatchA:
        a = np.moveaxis(a, 0, -2)
    if transBatchB:
        b = np.moveaxis(b, 0, -2)
    if transA and a.ndim > 1:
        a = np.swapaxes(a, -1, -2)
    if transB and b.ndim > 1:
        b = np.swapaxes(b, -1, -2)
    return alpha * np.matmul(a, b)


@pytest.mark.parametrize("dtype", [np.float16, np.float64] + ([BFLOAT16] if BFLOAT16 is not None else []),
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("constant_b", [False, True])
def test_fused_matmul_other_types(dtype, constant_b):
    for a_shape, b_shape, attrs in MATMUL_CASES[:18]:
        a, b = rand(*a_shape).astype(dtype), rand(*b_shape).astype(dtype)
        inputs = [("a", a), ("b", b)]
        model = contrib_model("FusedMatMul", inputs, constants=("b",) if constant_b else (), **attrs)
        (y,) = run_tessera(model, inputs)
        expected = matmul_ref(a, b, **attrs)
        tol = tolerance(dtype)
        if np.dtype(dtype) != np.float64:  # one rounding of a sum of K products
            tol = {"rtol": tol["rtol"], "atol": tol["atol"] * 4}
        assert_close(y, expected, dtype, **tol)


# ---- FusedGemm --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation,params", [
    (None, {}), ("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Softsign", {}), ("Softplus", {}),
    ("LeakyRelu", {"activation_alpha": 0.2}), ("Elu", {"activation_alpha": 0.7}),
    ("ThresholdedRelu", {"activation_alpha": 0.3}), ("Celu", {"activation_alpha": 1.5}),
    ("HardSigmoid", {"activation_alpha": 0.2, "activation_beta": 0.5}),
    ("ScaledTanh", {"activation_alpha": 0.5, "activation_beta": 2.0}),
    ("ParametricSoftplus", {"activation_alpha": 0.5, "activation_beta": 2.0}),
    ("Selu", {"activation_alpha": 1.67, "activation_gamma": 1.05}),
])
def test_fused_gemm_activations_match_onnxruntime(activation, params):
    inputs = [("a", rand(6, 8)), ("b", rand(8, 5)), ("c", rand(5))]
    attrs = dict(params, alpha=0.5, beta=2.0)
    if activation is None:
        # onnxruntime's FusedGemm insists on an activation; compare with numpy.
        (y,) = run_tessera(contrib_model("FusedGemm", inputs, **attrs), inputs)
        a, b, c = (v for _, v in inputs)
        assert_close(y, 0.5 * a.astype(np.float64) @ b + 2.0 * c)
        return
    check_against_onnxruntime("FusedGemm", inputs, activation=activation, **attrs)


@pytest.mark.parametrize("a_shape,b_shape,c_shape,attrs", [
    ((3, 4), (4, 5), None, {}),
    ((4, 3), (4, 5), (3, 5), {"transA": 1}),
    ((3, 4), (5, 4), (3, 1), {"transB": 1}),
    ((4, 3), (5, 4), (1, 5), {"transA": 1, "transB": 1, "beta": 0.5}),
    ((3, 4), (4, 5), (1,), {"alpha": 3.0}),
    ((3, 4), (4, 5), (3, 5), {"beta": 0.0}),
])
def test_fused_gemm_shapes_match_onnxruntime(a_shape, b_shape, c_shape, attrs):
    inputs = [("a", rand(*a_shape)), ("b", rand(*b_shape)), ("c", rand(*c_shape) if c_shape else None)]
    check_against_onnxruntime("FusedGemm", inputs, constants=("b",), activation="Relu", **attrs)


# ---- FusedConv ----------------------------------------------------------------------------------------------------

CONV_ACTIVATIONS = [
    (None, None), ("Relu", None), ("Tanh", None), ("Sigmoid", None), ("LeakyRelu", [0.1]),
    ("Clip", [-0.5, 0.75]), ("HardSigmoid", [0.2, 0.5]),
]

CONV_CASES = [  # X shape, W shape, attributes
    ((1, 3, 8, 8), (4, 3, 3, 3), {}),
    ((2, 4, 9, 7), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 3, 10, 11), (5, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ((1, 2, 9, 9), (4, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 1, 2, 1]}),
    ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 7, 8), (4, 3, 4, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [1, 2]}),
    ((2, 8, 6, 6), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),   # depthwise
    ((2, 8, 5, 6), (12, 8, 1, 1), {}),                                     # pointwise
    ((1, 4, 6, 6), (6, 4, 1, 1), {"strides": [2, 2]}),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((2, 3, 15), (4, 3, 3), {"pads": [1, 2], "strides": [2]}),            # 1-D
    ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 1]}),  # 3-D
    ((1, 4, 5, 6, 4), (4, 2, 1, 3, 3), {"group": 2, "dilations": [1, 2, 1]}),  # 3-D grouped, dilated
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_conv_geometry_matches_onnxruntime(x_shape, w_shape, attrs, with_bias):
    inputs = [("x", rand(*x_shape)), ("w", rand(*w_shape)), ("b", rand(w_shape[0]) if with_bias else None)]
    check_against_onnxruntime("FusedConv", inputs, constants=("w", "b"), activation="Relu", **attrs)


@pytest.mark.parametrize("activation,params", CONV_ACTIVATIONS)
def test_fused_conv_activations_match_onnxruntime(activation, params):
    attrs = {} if activation is None else {"activation": activation}
    if params is not None:
        attrs["activation_params"] = params
    inputs = [("x", rand(2, 3, 7, 7)), ("w", rand(5, 3, 3, 3)), ("b", rand(5))]
    check_against_onnxruntime("FusedConv", inputs, constants=("w",), pads=[1, 1, 1, 1], **attrs)


@pytest.mark.parametrize("activation,params", [("Relu", None), ("LeakyRelu", [0.3]), (None, None)])
def test_fused_conv_sum_input_matches_onnxruntime(activation, params):
    attrs = {} if activation is None else {"activation": activation}
    if params is not None:
        attrs["activation_params"] = params
    inputs = [("x", rand(2, 4, 6, 6)), ("w", rand(6, 2, 3, 3)), ("b", rand(6)), ("z", rand(2, 6, 6, 6))]
    check_against_onnxruntime("FusedConv", inputs, constants=("w", "b"), group=2, pads=[1, 1, 1, 1], **attrs)


def test_fused_conv_silu_and_other_types():
    x, w, b, z = rand(1, 4, 6, 7), rand(6, 2, 3, 3), rand(6), rand(1, 6, 4, 5)
    conv = conv_ref(x, w, b, z, group=2)
    inputs = [("x", x), ("w", w), ("b", b), ("z", z)]
    (y,) = run_tessera(contrib_model("FusedConv", inputs, constants=("w",), group=2, activation="Silu"), inputs)
    assert_close(y, conv / (1.0 + np.exp(-conv)))
    for dtype in (np.float16, np.float64):
        for constants in [(), ("w", "b")]:
            cast = [(n, v.astype(dtype)) for n, v in inputs]
            model = contrib_model("FusedConv", cast, constants=constants, group=2, activation="LeakyRelu",
                                  activation_params=[0.25])
            (y,) = run_tessera(model, cast)
            ref = conv_ref(*(v for _, v in cast), group=2)
            assert y.dtype == np.dtype(dtype)
            assert_close(y, np.where(ref >= 0, ref, 0.25 * ref), dtype,
                         **({"rtol": 5e-3, "atol": 1e-2} if dtype == np.float16 else {}))


# ---- Checks, shape inference, discovery ----------------------------------------------------------------------------


@pytest.mark.parametrize("op,inputs,attrs,reason", [
    ("FusedConv", [("x", rand(1, 2, 5, 5)), ("w", rand(3, 2, 3, 3))], {"activation": "Gelu"},
     "activation 'Gelu' is not supported"),
    ("FusedConv", [("x", rand(1, 2, 5, 5)), ("w", rand(3, 2, 3, 3))],
     {"activation": "LeakyRelu", "activation_params": [0.1, 0.2]}, "takes 1 activation_params"),
    ("FusedConv", [("x", rand(1, 4, 5, 5)), ("w", rand(3, 2, 3, 3))], {"group": 2},
     "not divisible by group"),
    ("FusedMatMul", [("a", rand(3, 4)), ("b", rand(4, 5))], {"transBatchA": 1}, "rank >= 3"),
    ("SkipLayerNormalization", [("x", rand(1, 2, 3, 8)), ("skip", rand(1, 2, 3, 8)), ("gamma", rand(8))], {},
     "input must be 3-D"),
    ("SkipLayerNormalization", [("x", rand(2, 3, 8)), ("skip", rand(2, 3, 8)), ("gamma", rand(6))], {},
     "the hidden size is 8"),
    ("BiasSoftmax", [("x", rand(2, 3)), ("bias", rand(2, 3))], {}, "'is_inner_broadcast' is required"),
    ("FusedGemm", [("a", rand(2, 3)), ("b", rand(3, 4))], {"activation": "LeakyRelu"},
     "needs the attribute 'activation_alpha'"),
    ("FastGelu", [("x", rand(2, 3)), ("bias", rand(4))], {}, "differs from the input's last dimension"),
    ("Gelu", [("x", rand(2, 3).astype(np.float64).astype(np.float32))], {}, None),
])
def test_checks_decline_with_a_reason(op, inputs, attrs, reason):
    model = contrib_model(op, inputs, **attrs)
    if reason is None:
        run_tessera(model, inputs)
        return
    with pytest.raises(tessera.TesseraError) as info:
        tessera.InferenceSession(model, providers=["cpu"], strict=True)
    assert reason in info.value.message
    assert f"{MS}:{op}" in info.value.message


def test_fused_conv_same_padding_with_dilations_follows_onnx():
    """onnxruntime refuses auto_pad SAME_* with dilations; the CPU provider's convolution computes it as ONNX's Conv
    defines it: the total padding is the dilated kernel's overhang, the odd one at the end (SAME_UPPER)."""
    inputs = [("x", rand(1, 2, 6, 5)), ("w", rand(3, 2, 3, 3))]
    model = contrib_model("FusedConv", inputs, auto_pad="SAME_UPPER", dilations=[2, 2], activation="Relu")
    (y,) = run_tessera(model, inputs)
    # Output 6x5 as the input; dilated kernel 5: padding 4 per axis, 2 at each end.
    assert_close(y, np.maximum(conv_ref(inputs[0][1], inputs[1][1], pads=[2, 2, 2, 2], dilations=[2, 2]), 0.0))


def test_type_constraints_are_checked():
    inputs = [("a", rand(2, 3)), ("b", rand(3, 4).astype(np.float64))]
    with pytest.raises(tessera.TesseraError) as info:
        tessera.InferenceSession(contrib_model("FusedMatMul", inputs), providers=["cpu"], strict=True)
    assert "same element type" in info.value.message


@pytest.mark.parametrize("first,first_inputs,first_attrs,hidden", [
    ("FusedConv", [("x", rand(2, 3, 9, 8)), ("w", rand(4, 3, 3, 3))], {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 4),
    ("FusedMatMul", [("x", rand(4, 2, 5)), ("w", rand(2, 5, 3))], {"transBatchA": 1}, 3),
    ("FusedGemm", [("x", rand(4, 3)), ("w", rand(4, 5))], {"transA": 1}, 5),
    ("BiasGelu", [("x", rand(2, 3, 8)), ("w", rand(8))], {}, 8),
])
def test_shape_inference_reaches_the_next_node(first, first_inputs, first_attrs, hidden):
    """The first node's inferred output shape is what the second node's check sees: a FastGelu whose bias length
    differs from it is declined at session creation, naming the inferred last dimension."""
    nodes = [helper.make_node(first, [n for n, _ in first_inputs], ["h"], domain=MS, **first_attrs),
             helper.make_node("FastGelu", ["h", "bias"], ["y"], domain=MS)]
    bias = rand(hidden + 1)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in first_inputs]
    graph = helper.make_graph(nodes, "chain", inputs + [helper.make_tensor_value_info("bias", TensorProto.FLOAT,
                                                                                       [hidden + 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                              ir_version=9)
    with pytest.raises(tessera.TesseraError) as info:
        tessera.InferenceSession(model, providers=["cpu"], strict=True)
    assert f"the input's last dimension {hidden}" in info.value.message
    # With a bias of the right length the chain runs, and the output has the inferred shape.
    feeds = {n: v for n, v in first_inputs}
    feeds["bias"] = rand(hidden)
    model.graph.input[-1].type.tensor_type.shape.dim[0].dim_value = hidden
    session = tessera.InferenceSession(model, providers=["cpu"], strict=True)
    (y,) = session.run(None, feeds)
    assert y.shape[-1] == hidden


def test_contrib_ops_fuse_with_builtin_ops_in_one_partition():
    """A transformer block's tail as the optimizer writes it: FusedMatMul -> BiasGelu -> MatMul -> SkipLayerNorm,
    with ONNX nodes in between; one CPU partition runs all of it."""
    x = rand(2, 5, 16)
    w1, b1, w2 = rand(16, 32, scale=0.2), rand(32), rand(32, 16, scale=0.2)
    gamma, beta = rand(16), rand(16)
    nodes = [
        helper.make_node("FusedMatMul", ["x", "w1"], ["h"], domain=MS, alpha=0.5),
        helper.make_node("BiasGelu", ["h", "b1"], ["g"], domain=MS),
        helper.make_node("MatMul", ["g", "w2"], ["m"]),
        helper.make_node("SkipLayerNormalization", ["m", "x", "gamma", "beta"], ["y"], domain=MS, epsilon=1e-5),
        helper.make_node("Relu", ["y"], ["out"]),
    ]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in
             [("w1", w1), ("b1", b1), ("w2", w2), ("gamma", gamma), ("beta", beta)]]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                              ir_version=9)
    session = tessera.InferenceSession(model, providers=["cpu"], strict=True)
    (partition,) = session.get_partitions()
    assert len(partition["ops"]) == 5
    (ours,) = session.run(None, {"x": x})
    (theirs,) = run_onnxruntime(model, [("x", x)])
    assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_runtime_shape_errors_name_the_problem():
    """Shapes unknown at session creation are checked when the node runs."""
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS)
    graph = helper.make_graph([node], "dyn", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", "k"]),
                                              helper.make_tensor_value_info("b", TensorProto.FLOAT, ["k2", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                              ir_version=9)
    session = tessera.InferenceSession(model, providers=["cpu"], strict=True)
    (y,) = session.run(None, {"a": rand(2, 3), "b": rand(3, 4)})
    assert y.shape == (2, 4)
    with pytest.raises(tessera.TesseraError) as info:
        session.run(None, {"a": rand(2, 3), "b": rand(5, 4)})
    assert "inner dimensions differ" in info.value.message


def test_concurrent_runs_share_the_kernels():
    from concurrent.futures import ThreadPoolExecutor

    x, w, b = rand(1, 8, 12, 12), rand(16, 8, 3, 3), rand(16)
    inputs = [("x", x), ("w", w), ("b", b)]
    model = contrib_model("FusedConv", inputs, constants=("w", "b"), pads=[1, 1, 1, 1], activation="Relu")
    session = tessera.InferenceSession(model, providers=["cpu"], strict=True, intra_op_threads=2)
    batches = [rand(1, 8, 12, 12) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda v: session.run(None, {"x": v})[0], batches * 4))
    for v, y in zip(batches * 4, results):
        assert_close(y, np.maximum(conv_ref(v, w, b, pads=[1, 1, 1, 1]), 0.0))


_DISCOVERY_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import onnx
    from onnx import helper, TensorProto
    import tessera

    env = tessera.Environment()  # default directories: <libdir>/tessera/plugins and TESSERA_PLUGIN_PATH
    report = [{k: p[k] for k in ("name", "state", "path")} for p in env.plugins()]
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 4) / 10
    node = helper.make_node("SkipLayerNormalization", ["x", "x", "gamma"], ["y"], domain="com.microsoft",
                            epsilon=1e-5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[onnx.numpy_helper.from_array(np.ones(4, np.float32), "gamma")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=9)
    result = {"report": report}
    try:
        session = tessera.InferenceSession(model, providers=["cpu"], strict=True, environment=env)
        (y,) = session.run(None, {"x": x})
        result["y"] = y.tolist()
    except tessera.TesseraError as e:
        result["error"] = e.message
    print(json.dumps(result))
""")


def _run_discovery(tmp_path, plugin_path):
    """Runs the discovery script in a fresh process over a private copy of the library whose own plugin directory
    holds only the CPU provider."""
    lib_dir = tmp_path / "lib"
    own_plugins = lib_dir / "tessera" / "plugins"
    own_plugins.mkdir(parents=True, exist_ok=True)
    library = lib_dir / "libtessera.so"
    if not library.exists():
        shutil.copy2(os.path.realpath(tessera.library_path), library)
        shutil.copy2(CPU_PROVIDER, own_plugins / "libtessera_cpu.so")
    env = dict(os.environ, TESSERA_LIBRARY=str(library),
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(tessera.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    env.pop("TESSERA_PLUGIN_PATH", None)
    if plugin_path is not None:
        env["TESSERA_PLUGIN_PATH"] = plugin_path
    done = subprocess.run([sys.executable, "-c", _DISCOVERY_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    import json
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cpu_provider_alone_runs_them(tmp_path):
    """No plugin beyond the CPU provider is needed: in a fresh process whose only plugin is libtessera_cpu.so (no
    TESSERA_PLUGIN_PATH), SkipLayerNormalization runs and agrees with the reference."""
    found = _run_discovery(tmp_path, None)
    assert [p["name"] for p in found["report"] if p["state"] == "loaded"] == ["tessera-cpu"], found["report"]
    assert "error" not in found, found.get("error")
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 4) / 10
    expected, _, _, _ = skip_layer_norm_ref(x, x, np.ones(4, np.float32), eps=1e-5)
    assert_close(np.array(found["y"], np.float32), expected)
