"""The CPU provider's com.microsoft kernels (plugins/cpu/kernels/contrib) and the default-domain
SimplifiedLayerNormalization, each as a one-node model, against onnxruntime's CPU provider.

Checked: MatMulIntegerToFloat, DynamicQuantizeMatMul and QGemm (every u8/s8 mix onnxruntime's CPU kernel registers,
per-tensor and per-column B parameters, optional zero points and bias, transA/transB/alpha and an int32 C),
QLinearAdd/Mul (numpy broadcasting with scalar operands), QLinearSigmoid/LeakyRelu (every byte value),
QLinear(Global)AveragePool (NCHW and channels_last, pads, strides, ceil_mode, count_include_pad), QLinearConcat and
QLinearWhere (inputs whose parameters equal and differ from the output's), QLinearSoftmax (opset 12 and 13 axis
rules), MatMulNBits (2/4/8 bits, block sizes 16-128, K not a multiple of the block, no/packed/float zero points,
bias, M = 1, M > 1, a 3-D A, float16 A) and SimplifiedLayerNormalization (float32, float16, inv_std_var), on
seeded random shapes and values.

Quantized outputs must equal onnxruntime's exactly: Tessera runs models onnxruntime's tools quantized, and a
one-quantum difference in an early layer changes what every later layer sees, so the kernels follow onnxruntime's
rounding order step by step.  The float outputs of MatMulIntegerToFloat, DynamicQuantizeMatMul and QGemm are exact
too (an exact int32 sum, then the same float roundings); MatMulNBits and SimplifiedLayerNormalization accumulate in
another order, so they agree within 1e-5 of the output's largest magnitude (float16: within its resolution).

Left out because onnxruntime 1.31.1 rejects them: omitted zero points of QLinearAdd/Mul and QLinearAveragePool and
an omitted y_zero_point of QLinearSoftmax or of a quantized QGemm (its type inference), and MatMulNBits with 8 bits
and float zero points.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from onnx import helper

import tessera

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
U8, S8, F32, F16 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32), np.dtype(np.float16)


@pytest.fixture
def rng(request):
    """A generator seeded by the test's id: each case draws the same values whatever runs before it."""
    return np.random.default_rng([20250611, zlib.crc32(request.node.name.encode())])


# ---- Models, runs and comparisons -------------------------------------------------------------------------------


def one_node_model(op, inputs, outputs, constants=(), domain=MS, **attrs):
    """`inputs`: (name, array or None for an omitted optional input); names in `constants` become initializers.
    `outputs`: (name, dtype)."""
    graph_inputs, inits = [], []
    for name, value in inputs:
        if value is None:
            continue
        tensor_type = helper.np_dtype_to_tensor_dtype(value.dtype)
        if name in constants:
            inits.append(onnx.numpy_helper.from_array(value, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, tensor_type, list(value.shape)))
    node = helper.make_node(op, [name if value is not None else "" for name, value in inputs],
                            [name for name, _ in outputs], domain=domain, **attrs)
    graph = helper.make_graph([node], op, graph_inputs,
                              [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
                               for n, d in outputs], initializer=inits)
    return helper.make_model(graph, ir_version=10,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def run_both(op, inputs, outputs, constants=(), domain=MS, **attrs):
    model = one_node_model(op, inputs, outputs, constants, domain, **attrs)
    feeds = {name: value for name, value in inputs if value is not None and name not in constants}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    theirs = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"]).run(None, feeds)
    session = tessera.InferenceSession(model.SerializeToString(), providers=["cpu"], strict=True)
    (partition,) = session.get_partitions()
    assert partition["provider"] == "cpu" and partition["ops"][0].endswith(op)
    ours = session.run(None, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    return ours, theirs


def assert_exact(ours, theirs):
    for a, b in zip(ours, theirs):
        if not np.array_equal(a, b):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            first = np.unravel_index(np.argmax(diff != 0), diff.shape)
            pytest.fail(f"{np.count_nonzero(diff)} of {diff.size} outputs differ (max {diff.max():g}); first at "
                        f"{first}: tessera {a[first]!r}, onnxruntime {b[first]!r}")


def assert_near(ours, theirs, rtol=1e-5):
    for a, b in zip(ours, theirs):
        a, b = a.astype(np.float64), b.astype(np.float64)
        bound = rtol * max(np.abs(b).max(), 1e-30)
        assert np.abs(a - b).max() <= bound, f"max difference {np.abs(a - b).max():g} > {bound:g}"


def check(op, inputs, outputs, constants=(), domain=MS, exact=True, rtol=1e-5, **attrs):
    ours, theirs = run_both(op, inputs, outputs, constants, domain, **attrs)
    if exact:
        assert_exact(ours, theirs)
    else:
        assert_near(ours, theirs, rtol)


# ---- Random operands --------------------------------------------------------------------------------------------


def q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def zp(rng, dtype, shape=(), spread=None):
    """Zero points; `spread` keeps them near the middle of the type's range."""
    info = np.iinfo(dtype)
    mid = (int(info.min) + int(info.max) + 1) // 2
    half = spread if spread is not None else (int(info.max) - int(info.min)) // 2
    return rng.integers(mid - half, mid + half, size=shape, endpoint=True).astype(dtype)


def fscale(rng, lo=0.002, hi=0.05, shape=()):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def f32(v):
    return np.array(v, dtype=np.float32)


def ids(cases):
    return [",".join(f"{k}={v}" for k, v in case.items()) for case in cases]


# ---- MatMulIntegerToFloat, DynamicQuantizeMatMul ----------------------------------------------------------------

MATMUL_TYPES = [(U8, U8), (U8, S8), (S8, S8)]
MATMUL_CASES = [  # zps: which zero points are given; const: B (and its parameters) as initializers
    dict(a=(5, 37), n=19, per_column=False, zps="both", bias=True, const=True),
    dict(a=(2, 3, 64), n=24, per_column=True, zps="both", bias=False, const=False),
    dict(a=(1, 17), n=33, per_column=True, zps="b", bias=True, const=True),
    dict(a=(7, 8), n=1, per_column=False, zps="a", bias=False, const=False),
    dict(a=(3, 100), n=40, per_column=True, zps="none", bias=True, const=False),
]
B_PARAMS = ("B", "b_scale", "b_zero_point")


def b_operands(rng, b_type, k, case):
    n = case["n"]
    shape = (n,) if case["per_column"] else ()
    b_zero = zp(rng, b_type, shape) if case["zps"] in ("both", "b") else None
    bias = rng.standard_normal(n).astype(np.float32) if case["bias"] else None
    return q(rng, b_type, (k, n)), fscale(rng, shape=shape), b_zero, bias


@pytest.mark.parametrize("case", MATMUL_CASES, ids=ids(MATMUL_CASES))
@pytest.mark.parametrize("a_type,b_type", MATMUL_TYPES, ids=lambda t: t.name)
def test_matmul_integer_to_float(rng, a_type, b_type, case):
    A = q(rng, a_type, case["a"])
    B, b_scale, b_zero, bias = b_operands(rng, b_type, case["a"][-1], case)
    a_zero = zp(rng, a_type) if case["zps"] in ("both", "a") else None
    inputs = [("A", A), ("B", B), ("a_scale", fscale(rng)), ("b_scale", b_scale), ("a_zero_point", a_zero),
              ("b_zero_point", b_zero), ("bias", bias)]
    check("MatMulIntegerToFloat", inputs, [("Y", F32)], constants=B_PARAMS if case["const"] else ())


@pytest.mark.parametrize("case", MATMUL_CASES, ids=ids(MATMUL_CASES))
@pytest.mark.parametrize("b_type", [U8, S8], ids=lambda t: t.name)
def test_dynamic_quantize_matmul(rng, b_type, case):
    A = rng.standard_normal(case["a"]).astype(np.float32)
    if case["n"] == 1:  # all positive: the zero point is 0 and the range starts at 0
        A = np.abs(A)
    B, b_scale, b_zero, bias = b_operands(rng, b_type, case["a"][-1], case)
    inputs = [("A", A), ("B", B), ("b_scale", b_scale), ("b_zero_point", b_zero), ("bias", bias)]
    check("DynamicQuantizeMatMul", inputs, [("Y", F32)], constants=B_PARAMS if case["const"] else ())


# ---- QGemm ------------------------------------------------------------------------------------------------------

QGEMM_TYPES = [(U8, U8, F32), (U8, S8, F32), (U8, U8, U8), (U8, S8, U8), (S8, S8, F32), (S8, S8, S8)]
QGEMM_CASES = [
    dict(m=6, k=29, n=17, transA=0, transB=0, alpha=1.0, c=None, per_column=False, const=True),
    dict(m=9, k=64, n=20, transA=1, transB=0, alpha=0.75, c="N", per_column=True, const=False),
    dict(m=1, k=40, n=33, transA=0, transB=1, alpha=1.0, c="MN", per_column=False, const=True),
    dict(m=13, k=15, n=8, transA=1, transB=1, alpha=2.5, c="MN", per_column=True, const=True),
    dict(m=4, k=100, n=3, transA=0, transB=1, alpha=0.3, c="N", per_column=False, const=False),
]


@pytest.mark.parametrize("case", QGEMM_CASES, ids=ids(QGEMM_CASES))
@pytest.mark.parametrize("a_type,b_type,y_type", QGEMM_TYPES, ids=lambda t: t.name)
def test_qgemm(rng, a_type, b_type, y_type, case):
    m, k, n = case["m"], case["k"], case["n"]
    A = q(rng, a_type, (k, m) if case["transA"] else (m, k))
    B = q(rng, b_type, (n, k) if case["transB"] else (k, n))
    column = (n,) if case["per_column"] else ()
    a_scale, a_zero = fscale(rng), zp(rng, a_type, spread=40)
    b_scale, b_zero = fscale(rng, shape=column), zp(rng, b_type, column, spread=40)
    c_shape = {None: None, "N": (n,), "MN": (m, n)}[case["c"]]
    C = None if c_shape is None else rng.integers(-(1 << 16), 1 << 16, size=c_shape).astype(np.int32)
    inputs = [("A", A), ("a_scale", a_scale), ("a_zero_point", a_zero), ("B", B), ("b_scale", b_scale),
              ("b_zero_point", b_zero), ("C", C)]
    if y_type != F32:
        # A y_scale that spreads the outputs over the type's range, a few saturating.
        a = (A.T if case["transA"] else A).astype(np.int64) - int(a_zero)
        b = (B.T if case["transB"] else B).astype(np.int64) - b_zero.astype(np.int64)
        y = (a @ b + (0 if C is None else C)) * (case["alpha"] * a_scale * b_scale)
        inputs += [("y_scale", f32(y.std() / 45)), ("y_zero_point", zp(rng, y_type, spread=30))]
    check("QGemm", inputs, [("Y", y_type)], constants=("B", "b_scale", "b_zero_point") if case["const"] else (),
          alpha=case["alpha"], transA=case["transA"], transB=case["transB"])


# ---- QLinearAdd, QLinearMul -------------------------------------------------------------------------------------

BROADCASTS = [((4, 5, 33), (4, 5, 33)), ((3, 64, 67), (3, 64, 67)), ((3, 1, 17), (1, 6, 17)), ((2, 3, 40), (40,)),
              ((), (3, 19)), ((), (33, 129)), ((3, 19), ()), ((1,), (2, 37)), ((5, 1), (1, 7)), ((2, 3, 1, 21), (4, 1))]
# "ties": power-of-two scales (A, B, C) whose ratios put many results exactly halfway between integers.
TIES = {"QLinearAdd": (0.125, 0.25, 0.5), "QLinearMul": (0.125, 0.125, 1.0)}


@pytest.mark.parametrize("scales", ["random", "ties"])
@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS, ids=[f"{a}x{b}" for a, b in BROADCASTS])
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_add_mul(rng, op, dtype, a_shape, b_shape, scales):
    if scales == "random":
        a_scale, b_scale = fscale(rng, 0.01, 0.1), fscale(rng, 0.01, 0.1)
        c_scale = fscale(rng, 0.02, 0.2) if op == "QLinearAdd" else f32(a_scale * b_scale * rng.uniform(60, 150))
    else:
        a_scale, b_scale, c_scale = (f32(s) for s in TIES[op])
    # onnxruntime's type inference requires all three zero points.
    inputs = [("A", q(rng, dtype, a_shape)), ("A_scale", a_scale), ("A_zero_point", zp(rng, dtype, spread=60)),
              ("B", q(rng, dtype, b_shape)), ("B_scale", b_scale), ("B_zero_point", zp(rng, dtype, spread=60)),
              ("C_scale", c_scale), ("C_zero_point", zp(rng, dtype, spread=60))]
    check(op, inputs, [("C", dtype)], constants=("A_scale", "B_scale", "C_scale") if len(a_shape) > 2 else ())


@pytest.mark.parametrize("scalar_a", [False, True])
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_add_mul_every_pair(rng, op, dtype, scalar_a):
    """All 65,536 (a, b) byte pairs, as two full tensors or as a column of A broadcast along rows of B (A then
    scalar within each run, which swaps onnxruntime's operand roles in QLinearAdd)."""
    values = np.arange(256, dtype=np.uint8).view(dtype)
    A = values[:, None] if scalar_a else np.repeat(values, 256).reshape(256, 256)
    B = np.tile(values, (256, 1))
    a_scale, b_scale = fscale(rng, 0.01, 0.1), fscale(rng, 0.01, 0.1)
    c_scale = fscale(rng, 0.02, 0.2) if op == "QLinearAdd" else f32(a_scale * b_scale * rng.uniform(60, 150))
    inputs = [("A", A), ("A_scale", a_scale), ("A_zero_point", zp(rng, dtype, spread=60)),
              ("B", B), ("B_scale", b_scale), ("B_zero_point", zp(rng, dtype, spread=60)),
              ("C_scale", c_scale), ("C_zero_point", zp(rng, dtype, spread=60))]
    check(op, inputs, [("C", dtype)])


# ---- QLinearSigmoid, QLinearLeakyRelu ---------------------------------------------------------------------------

TABLE_CASES = [
    dict(op="QLinearSigmoid", zps=True, const=True, attrs={}),
    dict(op="QLinearSigmoid", zps=False, const=False, attrs={}),
    dict(op="QLinearLeakyRelu", zps=True, const=False, attrs={}),
    dict(op="QLinearLeakyRelu", zps=True, const=True, attrs={"alpha": 0.2}),
    dict(op="QLinearLeakyRelu", zps=False, const=True, attrs={"alpha": -0.7}),
]


@pytest.mark.parametrize("case", TABLE_CASES, ids=ids(TABLE_CASES))
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
def test_qlinear_table_ops(rng, dtype, case):
    # Every byte value (each table entry), then random ones.
    X = np.concatenate([rng.permutation(256).astype(np.uint8).view(dtype), q(rng, dtype, 131)]).reshape(3, 129)
    x_scale = fscale(rng, 0.01, 0.1)
    sigmoid = case["op"] == "QLinearSigmoid"
    y_scale = f32(1 / 256) if sigmoid else f32(x_scale * rng.uniform(0.5, 1.5))
    x_zero = zp(rng, dtype, spread=60) if case["zps"] else None
    y_zero = zp(rng, dtype, spread=60) if case["zps"] else None
    if case["zps"] and sigmoid:  # sigmoid's outputs are in [0, 1]: a zero point near the low end
        y_zero = np.array(np.iinfo(dtype).min + rng.integers(0, 8), dtype)
    inputs = [("X", X), ("X_scale", x_scale), ("X_zero_point", x_zero), ("Y_scale", y_scale),
              ("Y_zero_point", y_zero)]
    check(case["op"], inputs, [("Y", dtype)],
          constants=("X_scale", "X_zero_point", "Y_scale", "Y_zero_point") if case["const"] else (),
          **case["attrs"])


# ---- QLinearGlobalAveragePool, QLinearAveragePool ---------------------------------------------------------------


def pool_inputs(rng, dtype, shape):
    """Both zero points: QLinearGlobalAveragePool requires them, and onnxruntime's type inference for
    QLinearAveragePool does too."""
    x_scale = fscale(rng, 0.01, 0.1)
    return [("X", q(rng, dtype, shape)), ("x_scale", x_scale), ("x_zero_point", zp(rng, dtype, spread=50)),
            ("y_scale", f32(x_scale * rng.uniform(0.3, 1.2))), ("y_zero_point", zp(rng, dtype, spread=50))]


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 16, 9, 9), (2, 5, 11), (1, 1, 4, 6), (3, 2, 2, 3, 4)])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
def test_qlinear_global_average_pool(rng, dtype, channels_last, shape):
    check("QLinearGlobalAveragePool", pool_inputs(rng, dtype, shape), [("Y", dtype)],
          constants=("x_scale", "y_scale"), channels_last=channels_last)


POOL_CASES = [  # N, C, spatial... shapes (channels moved last for channels_last)
    dict(x=(2, 3, 9, 11), kernel_shape=[3, 3]),
    dict(x=(1, 4, 10, 9), kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]),
    dict(x=(2, 2, 8, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(x=(1, 3, 7, 10), kernel_shape=[2, 3], strides=[2, 3], ceil_mode=1),
    dict(x=(1, 3, 7, 10), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(x=(1, 5, 8, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
    dict(x=(2, 6, 5, 4), kernel_shape=[5, 4]),  # the whole image: onnxruntime's global-average path
    dict(x=(2, 3, 13), kernel_shape=[4], strides=[3], pads=[2, 1], ceil_mode=1),
    dict(x=(1, 2, 5, 6, 7), kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 1, 0, 0, 1, 1]),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=ids(POOL_CASES))
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
def test_qlinear_average_pool(rng, dtype, channels_last, case):
    attrs = {k: v for k, v in case.items() if k != "x"}
    n, c, *spatial = case["x"]
    shape = (n, *spatial, c) if channels_last else case["x"]
    check("QLinearAveragePool", pool_inputs(rng, dtype, shape), [("Y", dtype)],
          constants=("x_scale", "x_zero_point") if case.get("ceil_mode") else (), channels_last=channels_last,
          **attrs)


# ---- QLinearConcat, QLinearWhere --------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
def test_qlinear_concat(rng, dtype, axis):
    base = [3, 4, 5]
    y_scale, y_zero = fscale(rng, 0.02, 0.1), zp(rng, dtype, spread=40)
    params = [(y_scale, y_zero),  # equal to Y's: copied
              (fscale(rng, 0.02, 0.1), zp(rng, dtype, spread=40)),  # requantized
              (y_scale, zp(rng, dtype, spread=40)),  # Y's scale, another zero point
              (f32(y_scale * 1.5), y_zero)]  # Y's zero point, another scale
    inputs = [("Y_scale", y_scale), ("Y_zero_point", y_zero)]
    for i, (scale, zero) in enumerate(params):
        shape = list(base)
        shape[axis] = int(rng.integers(1, 6))
        inputs += [(f"X{i}", q(rng, dtype, shape)), (f"X{i}_scale", scale), (f"X{i}_zero_point", zero)]
    check("QLinearConcat", inputs, [("Y", dtype)], constants=("X1_scale", "X1_zero_point"), axis=axis)


WHERE_SHAPES = [((3, 4, 5), (3, 4, 5), (3, 4, 5)), ((4, 1), (1, 6), (4, 6)), ((2, 3, 7), (), (7,)),
                ((5, 6), (5, 6), ()), ((), (2, 3), (2, 3)), ((1, 5), (3, 1), (1,))]


@pytest.mark.parametrize("same", ["none", "x", "both"])
@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=["x".join(map(str, s)) for s in WHERE_SHAPES])
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
def test_qlinear_where(rng, dtype, shapes, same):
    """`same`: which of X and Y have Z's scale and zero point (copied rather than requantized)."""
    z_scale, z_zero = fscale(rng, 0.02, 0.1), zp(rng, dtype, spread=40)
    x_params = (z_scale, z_zero) if same in ("x", "both") else (fscale(rng, 0.02, 0.1), zp(rng, dtype, spread=40))
    y_params = (z_scale, z_zero) if same == "both" else (fscale(rng, 0.02, 0.1), zp(rng, dtype, spread=40))
    inputs = [("condition", np.asarray(rng.random(shapes[0]) < 0.5)),
              ("X", q(rng, dtype, shapes[1])), ("x_scale", x_params[0]), ("x_zero_point", x_params[1]),
              ("Y", q(rng, dtype, shapes[2])), ("y_scale", y_params[0]), ("y_zero_point", y_params[1]),
              ("z_scale", z_scale), ("z_zero_point", z_zero)]
    check("QLinearWhere", inputs, [("Z", dtype)], constants=("x_scale", "x_zero_point"))


# ---- QLinearSoftmax ---------------------------------------------------------------------------------------------

SOFTMAX_CASES = [
    dict(shape=(4, 37), opset=12, axis=None),  # the schema's default -1 applies
    dict(shape=(2, 3, 6), opset=12, axis=1),  # coerced to 2-D: rows of 18
    dict(shape=(3, 300), opset=12, axis=-1),
    dict(shape=(2, 5, 7), opset=13, axis=-1),
    dict(shape=(2, 5, 7), opset=13, axis=1),  # the middle dimension alone
    dict(shape=(6, 2, 3), opset=13, axis=0),
]


@pytest.mark.parametrize("y_scale", ["1/256", "1/200"])
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=ids(SOFTMAX_CASES))
@pytest.mark.parametrize("dtype", [U8, S8], ids=lambda t: t.name)
def test_qlinear_softmax(rng, dtype, case, y_scale):
    scale = f32(1 / 256 if y_scale == "1/256" else 1 / 200)  # 1/200: floor(1/scale) is 199
    y_zero = np.array(0 if dtype == U8 else -128, dtype)
    if y_scale == "1/200":
        y_zero = np.array(3 if dtype == U8 else -120, dtype)
    attrs = {"opset": case["opset"]} if case["axis"] is None else {"opset": case["opset"], "axis": case["axis"]}
    inputs = [("X", q(rng, dtype, case["shape"])), ("X_scale", fscale(rng, 0.02, 0.2)),
              ("x_zero_point", zp(rng, dtype, spread=50) if case["opset"] == 13 else None),
              ("y_scale", scale), ("y_zero_point", y_zero)]
    check("QLinearSoftmax", inputs, [("Y", dtype)], constants=("y_scale", "y_zero_point"), **attrs)


# Rows whose results lie within a float rounding of .5, found by searching random rows (x_scale as a float's hex
# digits): one ulp anywhere in the table (onnxruntime's shift is log() of the float FLT_MAX / D, taken in float),
# the sum or the division changes an output by one.
SOFTMAX_NEAR_TIES = [(U8, "0x1.01e8c0p-2", [199, 222, 239]), (U8, "0x1.06c154p-3", [194, 165, 196]),
                     (U8, "0x1.1b7788p-6", [1, 120, 89, 35, 86]), (S8, "0x1.50356ep-3", [81, 73, 91]),
                     (S8, "0x1.dce888p-4", [70, 75, 4, -127, 114, 84])]


@pytest.mark.parametrize("const", [False, True])
@pytest.mark.parametrize("dtype,x_scale,row", SOFTMAX_NEAR_TIES,
                         ids=[f"{d.name}-{r}" for d, _, r in SOFTMAX_NEAR_TIES])
def test_qlinear_softmax_near_ties(dtype, x_scale, row, const):
    inputs = [("X", np.array([row], dtype)), ("X_scale", f32(float.fromhex(x_scale))), ("x_zero_point", None),
              ("y_scale", f32(1 / 256)), ("y_zero_point", np.array(0 if dtype == U8 else -128, dtype))]
    check("QLinearSoftmax", inputs, [("Y", dtype)], constants=("X_scale",) if const else (), opset=13)


# ---- MatMulNBits ------------------------------------------------------------------------------------------------

NBITS_CASES = [  # a: A's leading dimensions (M = their product); zero: none, packed (uint8) or float
    dict(bits=4, block=32, k=64, n=24, a=(1,), zero="none", bias=False, const=True),
    dict(bits=4, block=16, k=50, n=17, a=(5,), zero="packed", bias=True, const=True),
    dict(bits=4, block=128, k=200, n=9, a=(2, 3), zero="float", bias=False, const=True),
    dict(bits=4, block=32, k=96, n=40, a=(3,), zero="float", bias=True, const=False),
    dict(bits=4, block=16, k=33, n=5, a=(1,), zero="packed", bias=False, const=False),
    dict(bits=8, block=16, k=40, n=13, a=(1,), zero="packed", bias=False, const=True),
    dict(bits=8, block=32, k=70, n=20, a=(4,), zero="none", bias=True, const=True),
    dict(bits=8, block=128, k=130, n=8, a=(2, 2), zero="packed", bias=True, const=False),
    dict(bits=2, block=16, k=45, n=11, a=(3,), zero="packed", bias=False, const=True),
    dict(bits=2, block=32, k=64, n=16, a=(1,), zero="none", bias=True, const=True),
    dict(bits=2, block=128, k=150, n=7, a=(2, 5), zero="float", bias=False, const=True),
    dict(bits=4, block=32, k=100, n=12, a=(3,), zero="packed", bias=True, const=True, dtype=F16),
    dict(bits=8, block=16, k=48, n=10, a=(1,), zero="none", bias=False, const=False, dtype=F16),
]


@pytest.mark.parametrize("case", NBITS_CASES, ids=ids(NBITS_CASES))
def test_matmul_nbits(rng, case):
    bits, block, k, n = case["bits"], case["block"], case["k"], case["n"]
    dtype = case.get("dtype", F32)
    blocks = -(-k // block)
    # Random bytes everywhere, the bits past K and the zero points' row padding included (they must be ignored).
    B = rng.integers(0, 256, size=(n, blocks, block * bits // 8), dtype=np.uint8)
    scales = fscale(rng, 0.005, 0.05, (n, blocks)).astype(dtype)
    # Float zero points have A's type; onnxruntime runs them for 2 and 4 bits only.
    zero = {"none": None,
            "packed": rng.integers(0, 256, size=(n, -(-blocks * bits // 8)), dtype=np.uint8),
            "float": rng.uniform(0, 2**bits - 1, size=(n, blocks)).astype(dtype)}[case["zero"]]
    inputs = [("A", rng.standard_normal(case["a"] + (k,)).astype(dtype)), ("B", B), ("scales", scales),
              ("zero_points", zero), ("g_idx", None),
              ("bias", rng.standard_normal(n).astype(dtype) if case["bias"] else None)]
    check("MatMulNBits", inputs, [("Y", dtype)], constants=("B", "scales", "zero_points") if case["const"] else (),
          exact=False, rtol=1e-5 if dtype == F32 else 2**-10, K=k, N=n, bits=bits, block_size=block)


@pytest.mark.parametrize("bits,block,zero,m", [(4, 32, "packed", 1), (4, 128, "none", 6), (8, 32, "packed", 3),
                                              (4, 16, "packed", 2)])
def test_matmul_nbits_int8_compute(rng, bits, block, zero, m):
    """accuracy_level 4: A is quantized to int8 per block before the products, as onnxruntime's CompInt8 path does
    (a different result from the float products by ~1e-3 relative; the same as onnxruntime's within float order)."""
    k, n = 200, 24
    blocks = -(-k // block)
    inputs = [("A", rng.standard_normal((m, k)).astype(F32)),
              ("B", rng.integers(0, 256, size=(n, blocks, block * bits // 8), dtype=np.uint8)),
              ("scales", fscale(rng, 0.005, 0.05, (n, blocks)).astype(F32)),
              ("zero_points", rng.integers(0, 256, size=(n, -(-blocks * bits // 8)), dtype=np.uint8)
               if zero == "packed" else None)]
    check("MatMulNBits", inputs, [("Y", F32)], constants=("B", "scales", "zero_points"), exact=False, rtol=1e-5,
          K=k, N=n, bits=bits, block_size=block, accuracy_level=4)


# ---- SimplifiedLayerNormalization -------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [None, 1e-6])
@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 16), (4, 37), (2, 3, 100)])
@pytest.mark.parametrize("dtype", [F32, F16], ids=lambda t: t.name)
def test_simplified_layer_normalization(rng, dtype, shape, epsilon):
    X = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    scale = rng.uniform(0.5, 1.5, size=shape[-1]).astype(dtype)
    attrs = {"axis": -1} if epsilon is None else {"axis": -1, "epsilon": epsilon}
    ours, theirs = run_both("SimplifiedLayerNormalization", [("X", X), ("scale", scale)],
                            [("Y", dtype), ("inv_std_var", F32)], constants=("scale",) if epsilon else (),
                            domain="", **attrs)
    assert_near(ours[:1], theirs[:1], rtol=1e-5 if dtype == F32 else 2**-10)
    assert_near(ours[1:], theirs[1:], rtol=1e-5)


# ---- Attention family and embeddings (float; summation orders differ, so within rtol) ---------------------------


@pytest.mark.parametrize("segments,mask,positions", [(True, True, False), (False, False, True), (True, False, True)])
def test_embed_layer_normalization(rng, segments, mask, positions):
    B, S, H, V = 2, 7, 32, 50
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    m = np.ones((B, S), np.int32)
    m[1, 5:] = 0
    inputs = [("input_ids", ids),
              ("segment_ids", rng.integers(0, 2, (B, S)).astype(np.int32) if segments else None),
              ("word", rng.standard_normal((V, H)).astype(np.float32)),
              ("position", rng.standard_normal((16, H)).astype(np.float32)),
              ("segment", rng.standard_normal((2, H)).astype(np.float32) if segments else None),
              ("gamma", rng.uniform(0.5, 1.5, H).astype(np.float32)),
              ("beta", rng.standard_normal(H).astype(np.float32)),
              ("mask", m if mask else None),
              ("position_ids", rng.integers(0, 16, (B, S)).astype(np.int32) if positions else None)]
    outputs = [("out", F32), ("mask_index", np.int32), ("embedding_sum", F32)]
    ours, theirs = run_both("EmbedLayerNormalization", inputs, outputs, constants={"word", "position", "segment"},
                            epsilon=1e-12)
    assert_near(ours[:1], theirs[:1], rtol=1e-5)
    assert_exact(ours[1:2], theirs[1:2])
    assert_near(ours[2:], theirs[2:], rtol=1e-6)


# onnxruntime's CPU kernel refuses packed QKV (B, S, N, 3, H), which Tessera also takes; not compared here.
@pytest.mark.parametrize("form", ["separate", "bias-mask", "lengths", "past-present", "bnsh-key", "causal-bias"])
def test_multi_head_attention(rng, form):
    B, S, L, N, H = 2, 5, 6, 3, 8
    D = N * H
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    inputs = [("query", r(B, S, D)), ("key", r(B, L, D)), ("value", r(B, L, D)), ("bias", None),
              ("key_padding_mask", None), ("attention_bias", None), ("past_key", None), ("past_value", None)]
    outputs = [("out", F32)]
    attrs = {}
    if form == "bias-mask":
        inputs[3] = ("bias", r(3 * D))
        mask = np.ones((B, L), np.int32)
        mask[0, 4:] = 0
        inputs[4] = ("key_padding_mask", mask)
    elif form == "lengths":
        inputs[4] = ("key_padding_mask", np.array([6, 3], np.int32))
    elif form == "past-present":
        inputs[6] = ("past_key", r(B, N, 4, H))
        inputs[7] = ("past_value", r(B, N, 4, H))
        outputs += [("present_key", F32), ("present_value", F32)]
    elif form == "bnsh-key":
        inputs[1] = ("key", r(B, N, L, H))
        inputs[2] = ("value", r(B, N, L, H))
    elif form == "causal-bias":
        inputs[1] = ("key", r(B, S, D))
        inputs[2] = ("value", r(B, S, D))
        inputs[5] = ("attention_bias", r(1, N, S, S))
        attrs["unidirectional"] = 1
    ours, theirs = run_both("MultiHeadAttention", inputs, outputs, num_heads=N, **attrs)
    assert_near(ours, theirs, rtol=1e-5)


def test_multi_head_attention_packed_qkv_equals_separate(rng):
    """Packed Q, K, V (B, S, N, 3, H), which onnxruntime's CPU kernel refuses, against the same values given apart."""
    B, S, N, H = 2, 5, 3, 8
    packed = rng.standard_normal((B, S, N, 3, H)).astype(np.float32)
    parts = [np.ascontiguousarray(packed[:, :, :, i, :]).reshape(B, S, N * H) for i in range(3)]
    run = lambda inputs: tessera.InferenceSession(  # noqa: E731
        one_node_model("MultiHeadAttention", inputs, [("out", F32)], num_heads=N).SerializeToString(),
        providers=["cpu"], strict=True).run(None, {n: v for n, v in inputs})[0]
    together = run([("query", packed)])
    apart = run([("query", parts[0]), ("key", parts[1]), ("value", parts[2])])
    np.testing.assert_allclose(together, apart, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weight_type,per_column,mask", [(S8, False, True), (U8, True, False), (S8, True, True)])
def test_qattention(rng, weight_type, per_column, mask):
    """quantize_dynamic's form of Attention: the projection is an integer product, the rest float."""
    B, S, N, H = 2, 6, 2, 8
    D = N * H
    scales = np.asarray(fscale(rng, 0.01, 0.03, (3 * D,) if per_column else ()), F32)
    zero = np.full(scales.shape, 128 if weight_type == U8 else 0, weight_type)
    lengths = np.array([6, 4], np.int32)
    inputs = [("input", q(rng, U8, (B, S, D))), ("weight", q(rng, weight_type, (D, 3 * D))),
              ("bias", rng.standard_normal(3 * D).astype(F32)), ("input_scale", np.array(0.02, F32)),
              ("weight_scale", scales), ("mask_index", lengths if mask else None),
              ("input_zero_point", np.array(127, U8)), ("weight_zero_point", zero)]
    check("QAttention", inputs, [("out", F32)], constants=("weight", "weight_scale", "weight_zero_point"),
          exact=False, rtol=1e-5, num_heads=N)


@pytest.mark.parametrize("bits,block,zero,rows_shape", [(4, 32, True, (40, 64)), (4, 16, False, (20, 48)),
                                                      (8, 32, True, (30, 96)), (8, 64, False, (12, 2, 64))])
def test_gather_block_quantized(rng, bits, block, zero, rows_shape):
    """LLM exporters' quantized embeddings: uint8 data holding 4-bit (two a byte) or 8-bit values along the last
    axis, per-block scales and zero points, gathered along the first axis."""
    *lead, columns = rows_shape
    stored = columns // 2 if bits == 4 else columns
    blocks = -(-columns // block)
    data = rng.integers(0, 256, size=(*lead, stored), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.05, size=(*lead, blocks)).astype(F32)
    zero_points = rng.integers(0, 256, size=(*lead, -(-blocks * bits // 8)), dtype=np.uint8) if zero else None
    indices = rng.integers(0, lead[0], size=(3, 5)).astype(np.int64)
    check("GatherBlockQuantized", [("data", data), ("indices", indices), ("scales", scales),
                                   ("zero_points", zero_points)], [("Y", F32)], constants=("data", "scales", "zero_points"),
          exact=True, bits=bits, block_size=block, quantize_axis=len(rows_shape) - 1)


@pytest.mark.parametrize("segments,mask", [(True, True), (False, False)])
def test_qembed_layer_normalization(rng, segments, mask):
    """quantize_dynamic's EmbedLayerNormalization: uint8 tables, gamma and beta, each with its scale and zero
    point, dequantized as they are read."""
    B, S, H, V = 2, 6, 32, 40
    m = np.ones((B, S), np.int32)
    m[0, 4:] = 0
    table = lambda *shape: q(rng, U8, shape)  # noqa: E731
    scale = lambda: np.array(rng.uniform(0.01, 0.05), F32)  # noqa: E731
    zero = lambda: np.array(rng.integers(100, 150), U8)  # noqa: E731
    inputs = [("input_ids", rng.integers(0, V, (B, S)).astype(np.int32)),
              ("segment_ids", rng.integers(0, 2, (B, S)).astype(np.int32) if segments else None),
              ("word", table(V, H)), ("position", table(16, H)), ("segment", table(2, H) if segments else None),
              ("gamma", table(H)), ("beta", table(H)), ("mask", m if mask else None),
              ("word_scale", scale()), ("position_scale", scale()), ("segment_scale", scale() if segments else None),
              ("gamma_scale", scale()), ("beta_scale", scale()),
              ("word_zero", zero()), ("position_zero", zero()), ("segment_zero", zero() if segments else None),
              ("gamma_zero", zero()), ("beta_zero", zero())]
    ours, theirs = run_both("QEmbedLayerNormalization", inputs, [("out", F32), ("mask_index", np.int32)],
                            constants={"word", "position", "segment"}, epsilon=1e-12)
    assert_near(ours[:1], theirs[:1], rtol=1e-5)
    assert_exact(ours[1:], theirs[1:])


def test_embed_layer_normalization_float16_tables(rng):
    """float16 tables (onnxruntime's CPU kernel takes float only): the float32 result of the same values, rounded."""
    B, S, H, V = 2, 5, 16, 30
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    word, pos = rng.standard_normal((V, H)).astype(F16), rng.standard_normal((8, H)).astype(F16)
    gamma, beta = rng.uniform(0.5, 1.5, H).astype(F16), rng.standard_normal(H).astype(F16)

    def run(dtype):
        inputs = [("input_ids", ids), ("segment_ids", None), ("word", word.astype(dtype)),
                  ("position", pos.astype(dtype)), ("segment", None), ("gamma", gamma.astype(dtype)),
                  ("beta", beta.astype(dtype))]
        model = one_node_model("EmbedLayerNormalization", inputs, [("out", dtype)], constants={"word", "position"})
        return tessera.InferenceSession(model.SerializeToString(), providers=["cpu"], strict=True).run(
            None, {"input_ids": ids, "gamma": gamma.astype(dtype), "beta": beta.astype(dtype)})[0]

    half, single = run(F16), run(F32)
    assert half.dtype == F16
    np.testing.assert_allclose(half.astype(F32), single, rtol=2e-3, atol=2e-3)


# ---- DynamicQuantizeLSTM (onnxruntime's quantized LSTM: its activation quantization follows its thread count) -----

LSTM_CASES = [
    # (direction, batch, lengths, hidden, extras)
    ("forward", 1, None, 16, ()),
    ("reverse", 3, [5, 2, 4], 24, ("initial",)),
    ("bidirectional", 2, [5, 3], 16, ("peephole", "per_column")),
    ("bidirectional", 6, [5, 1, 4, 5, 2, 3], 20, ("initial", "uint8", "no_y")),
    ("forward", 5, [5, 5, 5, 5, 5], 300, ("per_column",)),  # a batch over 4 is split whatever the hidden size
    ("forward", 3, [5, 4, 5], 300, ()),  # 2-4 rows with hidden over 256: one group for every thread count
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", LSTM_CASES, ids=[f"{c[0]}-b{c[1]}-h{c[3]}-{'-'.join(c[4]) or 'plain'}"
                                                   for c in LSTM_CASES])
def test_dynamic_quantize_lstm(rng, case, threads):
    direction, batch, lengths, hidden, extras = case
    dirs = 2 if direction == "bidirectional" else 1
    steps, features = 5, 12
    wtype = U8 if "uint8" in extras else S8
    per_column = (dirs, 4 * hidden) if "per_column" in extras else (dirs,)
    inputs = [
        ("X", rng.standard_normal((steps, batch, features)).astype(np.float32)),
        ("W", q(rng, wtype, (dirs, features, 4 * hidden))),
        ("R", q(rng, wtype, (dirs, hidden, 4 * hidden))),
        ("B", (rng.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32)),
        ("sequence_lens", np.array(lengths, np.int32) if lengths else None),
        ("initial_h", rng.standard_normal((dirs, batch, hidden)).astype(np.float32) if "initial" in extras else None),
        ("initial_c", rng.standard_normal((dirs, batch, hidden)).astype(np.float32) if "initial" in extras else None),
        ("P", (rng.standard_normal((dirs, 3 * hidden)) * 0.1).astype(np.float32) if "peephole" in extras else None),
        ("W_scale", fscale(rng, 0.001, 0.01, per_column)),
        # onnxruntime takes per-column zero points only when they are 0.
        ("W_zero_point", zp(rng, wtype, per_column, spread=0 if len(per_column) == 2 else 3)),
        ("R_scale", fscale(rng, 0.001, 0.01, per_column)),
        ("R_zero_point", zp(rng, wtype, per_column, spread=0 if len(per_column) == 2 else 3)),
    ]
    outputs = [("Y_h", np.float32), ("Y_c", np.float32)] if "no_y" in extras else \
        [("Y", np.float32), ("Y_h", np.float32), ("Y_c", np.float32)]
    if "no_y" in extras:
        outputs = [("", np.float32)] + outputs
    model = one_node_model("DynamicQuantizeLSTM", inputs, [o for o in outputs if o[0]],
                           constants=("W", "R", "W_scale", "W_zero_point", "R_scale", "R_zero_point"),
                           direction=direction, hidden_size=hidden)
    if "no_y" in extras:  # the node has no Y: a finished row then feeds its last state to the next product
        node = model.graph.node[0]
        node.output[:] = [""] + list(node.output)
    feeds = {name: value for name, value in inputs
             if value is not None and name not in ("W", "R", "W_scale", "W_zero_point", "R_scale", "R_zero_point")}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    theirs = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"]).run(None, feeds)
    session = tessera.InferenceSession(model.SerializeToString(), providers=["cpu"], strict=True,
                                       intra_op_threads=threads)
    ours = session.run(None, feeds)
    # Same quantizations, so the same integers: what differs is the last bits of exp and tanh.
    assert_near(ours, theirs, rtol=2e-5)
