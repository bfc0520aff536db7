"""The optimizer's quantized-model fusions (core/optimizer/fuse_qdq.cc, fuse_dynamic_quantization.cc), end to end
through sessions.

A QDQ model (what onnxruntime's quantize_static writes by default) wraps float operators in DequantizeLinear and
QuantizeLinear.  From level 2 (extended) on, Tessera runs such groups as integer operators, as onnxruntime does:
Conv -> QLinearConv, MatMul -> QLinearMatMul (or com.microsoft MatMulIntegerToFloat with a float output), Gemm ->
com.microsoft QGemm, GlobalAveragePool -> com.microsoft QLinearGlobalAveragePool, with the weights kept in 8 bits.
Checked here on small seeded models: which operators the session runs at each level, and that the fused results
equal onnxruntime's (which fuses the same groups) exactly; the unfused level 0 is onnxruntime's unoptimized run.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(7)


class QdqBuilder:
    def __init__(self, opset=17):
        self.nodes, self.inits, self.opset, self.count = [], [], opset, 0

    def const(self, array, name=None):
        self.count += 1
        name = name or f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, **attrs):
        self.count += 1
        out = f"v{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def q(self, x, scale, zero):
        return self.node("QuantizeLinear", [x, self.const(np.float32(scale)), self.const(zero)])

    def dq(self, x, scale, zero, **attrs):
        return self.node("DequantizeLinear", [x, self.const(scale), self.const(zero)], **attrs)

    def qdq(self, x, scale, zero):
        """x (float) quantized and dequantized again: an activation in a QDQ model."""
        return self.dq(self.q(x, scale, zero), np.float32(scale), zero)

    def weight(self, shape, axis=None, signed=True):
        """A constant int8 weight with per-tensor (axis None) or per-channel scales, dequantized; its scales are
        kept in self.weight_scales (for the bias)."""
        data = RNG.integers(-127, 128, shape).astype(np.int8) if signed else \
            RNG.integers(0, 256, shape).astype(np.uint8)
        zero_type = np.int8 if signed else np.uint8
        if axis is None:
            self.weight_scales = np.float32(0.02)
            return self.dq(self.const(data), self.weight_scales, zero_type(0 if signed else 128))
        channels = shape[axis]
        self.weight_scales = RNG.uniform(0.005, 0.03, channels).astype(np.float32)
        zeros = np.zeros(channels, zero_type) if signed else np.full(channels, 128, zero_type)
        return self.dq(self.const(data), self.weight_scales, zeros, axis=axis)

    def bias(self, n, x_scale, scale=None):
        """An int32 bias in the product's scale (x_scale times the weight's scales), as quantizers write it."""
        scale = (np.float32(x_scale) * self.weight_scales).astype(np.float32) if scale is None else np.float32(scale)
        values = self.const(RNG.integers(-500, 500, n).astype(np.int32))
        if np.ndim(scale) == 0:
            return self.dq(values, scale, np.int32(0))
        return self.dq(values, scale, np.zeros(n, np.int32), axis=0)

    def model(self, inputs, output):
        graph = helper.make_graph(self.nodes, "qdq", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT,
                                                                                            None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 9
        return model


def conv_model(group=1, per_channel=True, bias=True, float_bias=False, bias_scale=None):
    b = QdqBuilder()
    x = b.qdq("x", 0.05, np.uint8(120))
    cin, cout = 8, 8 if group > 1 else 16
    w = b.weight((cout, cin // group, 3, 3), axis=0 if per_channel else None)
    inputs = [x, w]
    if bias:
        inputs.append(b.const(RNG.standard_normal(cout).astype(np.float32)) if float_bias
                      else b.bias(cout, 0.05, bias_scale))
    y = b.node("Conv", inputs, pads=[1, 1, 1, 1], group=group)
    out = b.dq(b.q(y, 0.1, np.uint8(128)), np.float32(0.1), np.uint8(128))
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 9, 11])], out), \
        {"x": RNG.standard_normal((1, cin, 9, 11)).astype(np.float32)}


def matmul_model(quantized_output=True, per_column=False):
    b = QdqBuilder()
    a = b.qdq("a", 0.04, np.uint8(128))
    y = b.node("MatMul", [a, b.weight((24, 12), axis=1 if per_column else None)])
    if quantized_output:
        y = b.dq(b.q(y, 0.08, np.uint8(100)), np.float32(0.08), np.uint8(100))
    return b.model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 5, 24])], y), \
        {"a": RNG.standard_normal((3, 5, 24)).astype(np.float32)}


def gemm_model(quantized_output):
    b = QdqBuilder()
    a = b.qdq("a", 0.04, np.uint8(128))
    y = b.node("Gemm", [a, b.weight((10, 20), axis=None), b.bias(10, 0.04)], transB=1)
    if quantized_output:
        y = b.dq(b.q(y, 0.08, np.uint8(100)), np.float32(0.08), np.uint8(100))
    return b.model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 20])], y), \
        {"a": RNG.standard_normal((4, 20)).astype(np.float32)}


def pool_model():
    b = QdqBuilder()
    x = b.qdq("x", 0.05, np.uint8(120))
    y = b.node("GlobalAveragePool", [x])
    y = b.dq(b.q(y, 0.01, np.uint8(128)), np.float32(0.01), np.uint8(128))
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 5, 7])], y), \
        {"x": RNG.standard_normal((2, 6, 5, 7)).astype(np.float32)}


# (model, the integer operator the group becomes, or None where it must stay as it is)
CASES = {
    "conv-per-channel-bias": (lambda: conv_model(), "QLinearConv"),
    "conv-per-tensor-no-bias": (lambda: conv_model(per_channel=False, bias=False), "QLinearConv"),
    "conv-float-bias": (lambda: conv_model(float_bias=True), None),  # QLinearConv takes only an int32 bias
    "conv-bias-in-another-scale": (lambda: conv_model(bias_scale=0.001), None),  # its int32 values would change
    "conv-depthwise": (lambda: conv_model(group=8), None),  # the float depthwise kernel is faster (fuse_qdq.cc)
    "conv-grouped": (lambda: conv_model(group=2), "QLinearConv"),
    "matmul": (lambda: matmul_model(), "QLinearMatMul"),
    "matmul-per-column": (lambda: matmul_model(per_column=True), "QLinearMatMul"),
    "matmul-float-output": (lambda: matmul_model(quantized_output=False), "com.microsoft:MatMulIntegerToFloat"),
    "gemm-float-output": (lambda: gemm_model(False), "com.microsoft:QGemm"),
    "gemm-quantized-output": (lambda: gemm_model(True), "com.microsoft:QGemm"),
    "global-average-pool": (pool_model, "com.microsoft:QLinearGlobalAveragePool"),
}


def session_ops(session):
    return sorted(op for p in session.get_partitions() for op in p["ops"])


def onnxruntime_run(model, feeds, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", list(CASES))
def test_qdq_group_runs_as_integer_operator(name):
    build, fused_op = CASES[name]
    model, feeds = build()
    plain = tessera.InferenceSession(model, optimization_level=0)
    assert "DequantizeLinear" in session_ops(plain)
    np.testing.assert_allclose(plain.run(None, feeds)[0],
                               onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0],
                               rtol=1e-5, atol=1e-5)
    for level in (2, 3):
        session = tessera.InferenceSession(model, optimization_level=level)
        ops = session_ops(session)
        if fused_op is None:
            assert not any(op.startswith("QLinear") or op.startswith("com.microsoft:") for op in ops), ops
            continue
        assert fused_op in ops, f"level {level}: {ops}"
        # The weight's DequantizeLinear is gone (its 8-bit values feed the integer operator).
        assert ops.count("DequantizeLinear") <= 2, ops
        ours = session.run(None, feeds)[0]
        theirs = onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)[0]
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{name} at level {level} against onnxruntime")


def test_blocked_dequantization_is_not_fused():
    """A DequantizeLinear with block_size (opset 21) has no integer-operator equivalent here."""
    b = QdqBuilder(opset=21)
    a = b.qdq("a", 0.04, np.uint8(128))
    w = b.dq(b.const(RNG.integers(-127, 128, (8, 4)).astype(np.int8)),
             RNG.uniform(0.01, 0.02, (2, 4)).astype(np.float32), np.zeros((2, 4), np.int8), axis=0, block_size=4)
    y = b.dq(b.q(b.node("MatMul", [a, w]), 0.08, np.uint8(100)), np.float32(0.08), np.uint8(100))
    model = b.model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 8])], y)
    session = tessera.InferenceSession(model, optimization_level=3)
    assert "QLinearMatMul" not in session_ops(session)
    session.run(None, {"a": RNG.standard_normal((3, 8)).astype(np.float32)})


@pytest.mark.parametrize("bias,per_column", [(True, False), (False, True)])
def test_dynamic_quantization_tail_becomes_matmul_integer_to_float(bias, per_column):
    """quantize_dynamic's MatMul: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(Mul(a_scale, b_scale))
    [-> Add bias] runs as one MatMulIntegerToFloat from level 2 on, with exactly the chain's results."""
    b = QdqBuilder()
    a_q, a_scale, a_zero = "a_q", "a_scale", "a_zero"
    b.nodes.append(helper.make_node("DynamicQuantizeLinear", ["a"], [a_q, a_scale, a_zero]))
    weights = b.const(RNG.integers(-127, 128, (16, 10)).astype(np.int8))
    b_scale = b.const(RNG.uniform(0.01, 0.02, 10 if per_column else ()).astype(np.float32))
    b_zero = b.const(np.zeros(10 if per_column else (), np.int8))
    y = b.node("MatMulInteger", [a_q, weights, a_zero, b_zero])
    y = b.node("Cast", [y], to=TensorProto.FLOAT)
    y = b.node("Mul", [y, b.node("Mul", [a_scale, b_scale])])
    if bias:
        y = b.node("Add", [y, b.const(RNG.standard_normal(10).astype(np.float32))])
    model = b.model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 7, 16])], y)
    feeds = {"a": RNG.standard_normal((2, 7, 16)).astype(np.float32)}
    reference = tessera.InferenceSession(model, optimization_level=0).run(None, feeds)[0]
    session = tessera.InferenceSession(model, optimization_level=3)
    ops = session_ops(session)
    assert "com.microsoft:MatMulIntegerToFloat" in ops and "MatMulInteger" not in ops and "Cast" not in ops, ops
    np.testing.assert_array_equal(session.run(None, feeds)[0], reference)


@pytest.mark.parametrize("group,batch_norm_after,activation", [(1, True, "Clip"), (16, True, "Relu"),
                                                                (1, False, None), (16, False, "Clip")],
                         ids=["pointwise-bn-clip", "depthwise-bn-relu", "pointwise", "depthwise-clip"])
def test_dynamically_quantized_convolution_becomes_conv_integer_to_float(group, batch_norm_after, activation):
    """quantize_dynamic's convolution: DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul(Mul(x_scale, w_scale))
    [-> BatchNormalization] [-> Clip | Relu] runs as one ConvIntegerToFloat from level 2 on, with exactly the
    chain's results (which are onnxruntime's)."""
    b = QdqBuilder()
    channels, shape = 16, (1, 16, 13, 11)
    x_q, x_scale, x_zero = "x_q", "x_scale", "x_zero"
    b.nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], [x_q, x_scale, x_zero]))
    k = 1 if group == 1 else 3
    weights = b.const(RNG.integers(-127, 128, (channels, channels // group, k, k)).astype(np.int8))
    w_scale = b.const(np.float32(0.013))
    y = b.node("ConvInteger", [x_q, weights, x_zero, b.const(np.int8(0))], group=group, pads=[k // 2] * 4)
    y = b.node("Cast", [y], to=TensorProto.FLOAT)
    y = b.node("Mul", [y, b.node("Mul", [x_scale, w_scale])])
    if batch_norm_after:
        y = batch_norm(b, y, channels)
    if activation == "Relu":
        y = b.node("Relu", [y])
    elif activation == "Clip":
        y = b.node("Clip", [y, b.const(np.float32(-1)), b.const(np.float32(3))])
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    feeds = {"x": (2 * RNG.standard_normal(shape)).astype(np.float32)}
    reference = tessera.InferenceSession(model, optimization_level=0).run(None, feeds)[0]
    session = tessera.InferenceSession(model, optimization_level=3)
    ops = session_ops(session)
    assert "ai.tessera:ConvIntegerToFloat" in ops and "ConvInteger" not in ops and "Cast" not in ops, ops
    assert ("BatchNormalization" in ops) is False and not any(op in ops for op in ("Clip", "Relu")), ops
    np.testing.assert_array_equal(session.run(None, feeds)[0], reference)
    np.testing.assert_array_equal(reference, onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0])


def dynamic_conv(b, x, filters, channels, group=1, stride=1, clip=True):
    """quantize_dynamic's convolution of x: DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul(Mul(x_scale,
    w_scale)) -> BatchNormalization [-> Clip(0, 6)], 3x3 padded for a depthwise one, 1x1 otherwise."""
    x_q, x_scale, x_zero = f"{x}_q", f"{x}_scale", f"{x}_zero"
    b.nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [x_q, x_scale, x_zero]))
    k = 3 if group > 1 else 1
    weights = b.const(RNG.integers(-127, 128, (filters, channels // group, k, k)).astype(np.int8))
    y = b.node("ConvInteger", [x_q, weights, x_zero, b.const(np.int8(0))], group=group, pads=[k // 2] * 4,
               strides=[stride, stride])
    y = b.node("Cast", [y], to=TensorProto.FLOAT)
    y = batch_norm(b, b.node("Mul", [y, b.node("Mul", [x_scale, b.const(np.float32(0.004))])]), filters)
    return b.node("Clip", [y, b.const(np.float32(0)), b.const(np.float32(6))]) if clip else y


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("channels,height,width,stride", [(32, 13, 11, 1), (32, 20, 37, 2), (24, 9, 17, 1)],
                         ids=["narrow-rows", "stride-2", "partial-block"])
@pytest.mark.parametrize("bytes_read", [False, True], ids=["", "bytes-read"])
def test_dynamically_quantized_block_quantizes_in_its_convolutions(monkeypatch, threads, channels, height, width,
                                                                   stride, bytes_read):
    """An inverted residual block as quantize_dynamic leaves it (expansion, depthwise, projection, each a
    DynamicQuantizeLinear and a ConvIntegerToFloat): each DynamicQuantizeLinear but the input's joins the
    convolution making its floats (which gathers their range as it writes them), and the depthwise convolution
    quantizes the rows it reads itself, so that its bytes are never made unless another node reads them.  The
    results are the unfused chain's bit for bit (which are onnxruntime's), in the blocked layout and without it."""
    b = QdqBuilder()
    shape = (1, 16, height, width)
    expanded = dynamic_conv(b, "x", channels, 16)
    depthwise = dynamic_conv(b, expanded, channels, channels, group=channels, stride=stride)
    y = dynamic_conv(b, depthwise, 8, channels, clip=False)
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    if bytes_read:  # the depthwise convolution's input bytes as an output too
        model.graph.output.append(helper.make_tensor_value_info(f"{expanded}_q", TensorProto.UINT8, None))
    feeds = {"x": (2 * RNG.standard_normal(shape)).astype(np.float32)}
    reference = tessera.InferenceSession(model, optimization_level=0).run(None, feeds)
    session = tessera.InferenceSession(model, intra_op_threads=threads)
    ops = session_ops(session)
    assert ops.count("DynamicQuantizeLinear") == 1 and "ConvInteger" not in ops, ops
    ours = session.run(None, feeds)
    for got, expected in zip(ours, reference):
        np.testing.assert_array_equal(got, expected)
    monkeypatch.setenv("TESSERA_CPU_BLOCKED_LAYOUT", "0")
    nchw = tessera.InferenceSession(model, intra_op_threads=threads).run(None, feeds)
    for got, expected in zip(nchw, reference):
        np.testing.assert_array_equal(got, expected)
    theirs = onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for got, expected in zip(ours, theirs):
        np.testing.assert_array_equal(got, expected)


def test_dynamically_quantized_block_with_infinities_matches_the_chain():
    """An infinite input makes the first quantization's scale infinite and the convolutions' floats NaN: the range
    DynamicQuantizeLinear finds over NaNs depends on its own order of visiting them, so the fused convolutions find
    it by the node's own pass then, and the results (NaNs included) are still the chain's bit for bit."""
    b = QdqBuilder()
    shape = (1, 16, 12, 10)
    y = dynamic_conv(b, dynamic_conv(b, dynamic_conv(b, "x", 32, 16), 32, 32, group=32), 8, 32, clip=False)
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    for special in (np.inf, np.nan):
        x = RNG.standard_normal(shape).astype(np.float32)
        x[0, 3, 4, 5] = special
        reference = tessera.InferenceSession(model, optimization_level=0).run(None, {"x": x})[0]
        session = tessera.InferenceSession(model)
        assert session_ops(session).count("DynamicQuantizeLinear") == 1, str(session_ops(session))
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], reference)


def lookup_model(chain, shape=(2, 6, 5, 7), signed=False, channel_axis_dq=False, out_signed=None):
    """x -> Q -> DQ -> chain(b, value) -> Q -> DQ: an activation quantized around float operators (what
    quantize_static leaves around a BatchNormalization it does not fold, or an activation)."""
    b = QdqBuilder()
    zero = np.int8(-3) if signed else np.uint8(120)
    q = b.q("x", 0.05, zero)
    if channel_axis_dq:
        y = b.dq(q, np.full(shape[1], 0.05, np.float32), np.full(shape[1], zero, type(zero)), axis=1)
    else:
        y = b.dq(q, np.float32(0.05), zero)
    y = chain(b, y, shape[1])
    out_zero = np.int8(5) if (signed if out_signed is None else out_signed) else np.uint8(128)
    out = b.dq(b.q(y, 0.03, out_zero), np.float32(0.03), out_zero)
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], out), \
        {"x": (2 * RNG.standard_normal(shape)).astype(np.float32)}


def batch_norm(b, x, channels):
    return b.node("BatchNormalization", [x, b.const(RNG.uniform(0.5, 2, channels).astype(np.float32)),
                                         b.const(RNG.standard_normal(channels).astype(np.float32)),
                                         b.const(RNG.standard_normal(channels).astype(np.float32)),
                                         b.const(RNG.uniform(0.5, 2, channels).astype(np.float32))])


def per_channel(channels, rank=4):
    return RNG.uniform(-2, 2, (channels,) + (1,) * (rank - 2)).astype(np.float32)


# (model, whether the group becomes one QuantizedLookup)
LOOKUP_CASES = {
    "batchnorm": (lambda: lookup_model(batch_norm), True),
    "batchnorm-relu-int8": (lambda: lookup_model(lambda b, x, c: b.node("Relu", [batch_norm(b, x, c)]), signed=True),
                            True),
    "batchnorm-int8-to-uint8": (lambda: lookup_model(batch_norm, signed=True, out_signed=False), True),
    "clip-sigmoid-shared-table": (lambda: lookup_model(
        lambda b, x, c: b.node("Sigmoid", [b.node("Clip", [x, b.const(np.float32(-1)), b.const(np.float32(2))])])),
        True),
    "mul-add-per-channel": (lambda: lookup_model(
        lambda b, x, c: b.node("Add", [b.const(per_channel(c)), b.node("Mul", [x, b.const(per_channel(c))])])), True),
    "rank-2-leaky-relu": (lambda: lookup_model(
        lambda b, x, c: b.node("LeakyRelu", [b.node("Mul", [x, b.const(per_channel(c, 2))])], alpha=0.1),
        shape=(9, 5)), True),
    # Not a table: the second operand varies per element, or the input's scale varies per channel.
    "add-of-activations": (lambda: lookup_model(lambda b, x, c: b.node("Add", [x, b.node("Relu", [x])])), False),
    "per-channel-dequantization": (lambda: lookup_model(batch_norm, channel_axis_dq=True), False),
    "softmax": (lambda: lookup_model(lambda b, x, c: b.node("Softmax", [x], axis=1)), False),
}


@pytest.mark.parametrize("name", list(LOOKUP_CASES))
def test_quantized_float_group_becomes_a_table_lookup(name):
    """DequantizeLinear -> per-channel float operators -> QuantizeLinear runs as one table lookup
    (core/optimizer/fuse_quantized_lookup.cc) whose table the group's own kernels computed: the fused session
    gives exactly the unfused one's values, which agree with onnxruntime's float run."""
    build, fused = LOOKUP_CASES[name]
    model, feeds = build()
    plain = tessera.InferenceSession(model, optimization_level=0)
    expected = plain.run(None, feeds)[0]
    theirs = onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)[0]
    # Within one output quantization step of onnxruntime (float kernels may round a value across a .5).
    np.testing.assert_allclose(expected, theirs, rtol=0, atol=0.03 + 1e-6)
    session = tessera.InferenceSession(model, optimization_level=3)
    ops = session_ops(session)
    # The lookup joins the QuantizeLinear that makes its input (the model's first), as its table input.
    assert ("ai.tessera:QuantizeLinear" in ops) == fused, ops
    assert "ai.tessera:QuantizedLookup" not in ops, ops
    if fused:
        assert ops.count("DequantizeLinear") == 1 and len(ops) == 2, ops  # the model's ends only
    np.testing.assert_array_equal(session.run(None, feeds)[0], expected)


def test_lookup_from_a_dequantization_with_other_readers():
    """GELU as quantize_static leaves it: x dequantized once, read by its Erf branch (Div -> Erf -> Q) and by the
    final product.  The branch becomes a lookup of x's bytes and the DequantizeLinear stays for the product; the
    results are the unfused session's bit for bit, within one output step of onnxruntime's float run."""
    b = QdqBuilder()
    shape = (2, 8, 33)
    x = b.dq(b.q("x", 0.03, np.uint8(100)), np.float32(0.03), np.uint8(100))
    erf = b.node("Erf", [b.node("Div", [x, b.const(np.float32(1.4142135))])])
    erf = b.dq(b.q(erf, 0.008, np.uint8(128)), np.float32(0.008), np.uint8(128))
    one = b.dq(b.q(b.node("Add", [erf, b.const(np.float32(1))]), 0.008, np.uint8(0)), np.float32(0.008),
               np.uint8(0))
    y = b.dq(b.q(b.node("Mul", [x, one]), 0.02, np.uint8(60)), np.float32(0.02), np.uint8(60))
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    feeds = {"x": (2 * RNG.standard_normal(shape)).astype(np.float32)}
    expected = tessera.InferenceSession(model, optimization_level=0).run(None, feeds)[0]
    theirs = onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0]
    np.testing.assert_allclose(expected, theirs, rtol=0, atol=0.02 + 1e-6)
    session = tessera.InferenceSession(model, optimization_level=3)
    ops = session_ops(session)
    assert "Erf" not in ops and "Div" not in ops and "ai.tessera:QuantizedLookup" in ops, str(ops)
    assert "DequantizeLinear" in ops, str(ops)  # x's, for the product
    np.testing.assert_array_equal(session.run(None, feeds)[0], expected)


def _lookup_after(producer, table_per_channel, keep_producer_output=False, depthwise_after=False,
                  shape=(2, 32, 10, 12)):
    """x -> Q -> DQ -> producer -> Q -> DQ -> BatchNormalization -> Relu (or Relu alone: one table for every
    channel) -> Q -> DQ: the lookup the BN group becomes has a QLinearConv (a 1x1 or 3x3 convolution quantize_static
    quantizes) or, after a float depthwise convolution, a QuantizeLinear reading the blocked layout as its producer.
    keep_producer_output: the producer's quantized output is a graph output too, so the lookup cannot join it.
    depthwise_after: the last DequantizeLinear feeds a float depthwise convolution quantized again (which, its
    output read by a QuantizeLinear, reads and writes the blocked layout)."""
    b = QdqBuilder()
    channels = shape[1]
    x = b.qdq("x", 0.05, np.int8(3))
    if producer == "depthwise":
        w = b.const((RNG.standard_normal((channels, 1, 3, 3)) * 0.5).astype(np.float32))
        y = b.node("Conv", [x, w], group=channels, pads=[1, 1, 1, 1])
    else:
        k = 1 if producer == "pointwise" else 3
        w = b.weight((channels, channels, k, k), axis=0)
        y = b.node("Conv", [x, w, b.bias(channels, 0.05)], pads=[k // 2] * 4)
    quantized = b.q(y, 0.08, np.int8(-2))
    y = b.dq(quantized, np.float32(0.08), np.int8(-2))
    y = b.node("Relu", [batch_norm(b, y, channels) if table_per_channel else y])
    out = b.dq(b.q(y, 0.04, np.int8(-128)), np.float32(0.04), np.int8(-128))
    if depthwise_after:
        w = b.const((RNG.standard_normal((channels, 1, 3, 3)) * 0.5).astype(np.float32))
        out = b.qdq(b.node("Conv", [out, w], group=channels, pads=[1, 1, 1, 1]), 0.1, np.int8(0))
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], out)
    if keep_producer_output:
        model.graph.output.append(helper.make_tensor_value_info(quantized, TensorProto.INT8, None))
    return model


@pytest.mark.parametrize("producer,fused_op", [("pointwise", "ai.tessera:QLinearConv"),
                                               ("3x3", "ai.tessera:QLinearConv"),
                                               ("depthwise", "ai.tessera:QuantizeLinear")])
@pytest.mark.parametrize("table_per_channel", [True, False], ids=["per-channel", "shared"])
@pytest.mark.parametrize("blocked", ["1", "0"], ids=["blocked", "nchw"])
@pytest.mark.parametrize("depthwise_after", [False, True], ids=["", "then-depthwise"])
def test_lookup_joins_the_operator_making_its_input(monkeypatch, producer, fused_op, table_per_channel, blocked,
                                                    depthwise_after):
    """The lookup's table goes into the QLinearConv or QuantizeLinear that makes its input, applied to each tile or
    chunk while it is in cache, and where a pointwise convolution's output is dequantized for a convolution, the
    DequantizeLinear joins too (QLinearConvToFloat, which writes the floats NCHW or in the blocked layout a
    depthwise convolution reading them takes): the results are bit for bit those of the same model with nothing
    joined (the producer's output also a graph output), and
    onnxruntime's within one output step: its optimized run for the convolutions (which it runs as QLinearConv too),
    its unoptimized one for the float depthwise convolution (its optimized run makes that a QLinearConv and differs
    from its unoptimized one by up to five steps here)."""
    monkeypatch.setenv("TESSERA_CPU_BLOCKED_LAYOUT", blocked)
    state = RNG.bit_generator.state
    model = _lookup_after(producer, table_per_channel, depthwise_after=depthwise_after)
    RNG.bit_generator.state = state  # the same weights again
    apart = _lookup_after(producer, table_per_channel, keep_producer_output=True, depthwise_after=depthwise_after)
    feeds = {"x": (2 * RNG.standard_normal((2, 32, 10, 12))).astype(np.float32)}
    session = tessera.InferenceSession(model, optimization_level=3)
    ops = session_ops(session)
    if producer == "pointwise" and depthwise_after:
        fused_op = "ai.tessera:QLinearConvToFloat"
    assert fused_op in ops and "ai.tessera:QuantizedLookup" not in ops, ops
    reference = tessera.InferenceSession(apart, optimization_level=3)
    assert "ai.tessera:QuantizedLookup" in session_ops(reference)
    ours = session.run(None, feeds)[0]
    np.testing.assert_array_equal(ours, reference.run(None, feeds)[0])
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL if producer == "depthwise" else \
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not depthwise_after:  # (a float convolution after the last step would scale its difference)
        np.testing.assert_allclose(ours, onnxruntime_run(model, feeds, level)[0], rtol=0, atol=0.04 + 1e-6)


def test_fused_weights_are_never_dequantized_to_float():
    """Once Conv's group is a QLinearConv, its weight's DequantizeLinear has no reader: constant folding must leave it
    to the dead-node pass instead of making a float copy of every weight (ResNet-50 int8 peaked 100 MB higher)."""
    model, feeds = conv_model()

    def folded(level):
        messages = []
        env = tessera.Environment(log_level=tessera.LogLevel.DEBUG,
                                  log_callback=lambda _, text: messages.append(text))
        session = tessera.InferenceSession(model, optimization_level=level, environment=env)
        session.run(None, feeds)
        return session_ops(session), [text for text in messages if "folded" in text and "DequantizeLinear" in text]

    ops, dequantized = folded(1)  # basic: no fusion, the weight and bias are folded into float constants
    assert not any("QLinearConv" in op for op in ops) and len(dequantized) == 2, dequantized
    ops, dequantized = folded(3)
    assert "QLinearConv" in ops and not dequantized, dequantized


def _depthwise_island(zero_type, residual):
    """A QDQ depthwise convolution that stays float between its DequantizeLinear and QuantizeLinear (fuse_qdq.cc
    leaves depthwise ones float), on 32 channels of 10 x 12 (positions not a multiple of 16), optionally with a
    residual Add of two dequantized tensors, and the result dequantized again."""
    b = QdqBuilder()
    zero = zero_type(3 if zero_type is np.int8 else 131)
    x = b.q("x", 0.05, zero)
    y = b.dq(x, np.float32(0.05), zero)
    w = b.const((RNG.standard_normal((32, 1, 3, 3)) * 0.5).astype(np.float32))
    bias = b.const((RNG.standard_normal(32) * 0.1).astype(np.float32))
    conv = b.node("Conv", [y, w, bias], group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    q = b.q(conv, 0.04, zero)
    out = b.dq(q, np.float32(0.04), zero)
    if residual:
        out = b.node("Add", [out, b.dq(x, np.float32(0.05), zero)])
        out = b.dq(b.q(out, 0.06, zero), np.float32(0.06), zero)
    graph = helper.make_graph(b.nodes, "island", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32, 10, 12])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("zero_type", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
def test_float_depthwise_island_in_the_blocked_layout_matches_nchw(monkeypatch, tmp_path, zero_type, residual):
    """The CPU provider holds the island blocked (DequantizeLinear writes the layout, QuantizeLinear reads it, and
    takes the depthwise convolution over: its rows are quantized as they are made) where it can; the results are
    those of the NCHW run bit for bit, and unoptimized onnxruntime's (float convolution, summed in another order)
    within one step of the output's quantization."""
    model = _depthwise_island(zero_type, residual)
    x = (RNG.standard_normal((2, 32, 10, 12)) * 4).astype(np.float32)  # saturates at both ends too
    outputs, steps = _profiled_run(model, {"x": x}, tmp_path / "trace.json")
    blocked = outputs[0]
    assert ("Conv+QuantizeLinear" in steps) == _blocked_layout_available(), steps
    monkeypatch.setenv("TESSERA_CPU_BLOCKED_LAYOUT", "0")
    nchw = tessera.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(blocked, nchw)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(blocked, theirs, atol=0.061, rtol=0)


def _cpu_path_available(flag, isa_caps):
    """Whether the CPU provider takes a path needing the CPU flag `flag` (from /proc/cpuinfo) here: the flag is
    present, TESSERA_CPU_MAX_ISA is one of `isa_caps` (or unset) and TESSERA_CPU_BLOCKED_LAYOUT=0 does not turn the
    blocked layout off."""
    if os.environ.get("TESSERA_CPU_MAX_ISA", "") not in ("",) + isa_caps or \
            os.environ.get("TESSERA_CPU_BLOCKED_LAYOUT") == "0":
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f" {flag}" in f.read()
    except OSError:
        return False


def _blocked_layout_available():
    """The blocked layout: AVX-512F."""
    return _cpu_path_available("avx512f", ("avx512", "amx"))


def _int8_blocked_available():
    """int8 products (AMX or AVX-512 VNNI) into the blocked layout (util/int8_gemm.h)."""
    return _cpu_path_available("avx512_vnni", ("avx512", "amx")) or _cpu_path_available("amx_int8", ("amx",))


def _profiled_run(model, feeds, trace, **options):
    """The session's outputs and the op types of the steps its profile shows (fused steps as "A+B")."""
    session = tessera.InferenceSession(model, profile_file=str(trace), **options)
    outputs = session.run(None, feeds)
    session.end_profiling()
    with open(trace, encoding="utf-8") as f:
        steps = {e["args"].get("op_type") for e in json.load(f)["traceEvents"] if e["cat"] == "node"}
    return outputs, steps


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("zero_type", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_depthwise_convolution_takes_over_the_int8_expansion(monkeypatch, tmp_path, threads, zero_type):
    """An inverted residual block as quantize_static leaves it: an int8 1x1 expansion (QLinearConv with its lookup
    and its DequantizeLinear: QLinearConvToFloat) feeding a float depthwise convolution.  Where the expansion's
    floats would leave the cache (here 32 x 96 x 96, 1.2 MB), the depthwise convolution makes them itself a few rows
    at a time, and the QuantizeLinear after it quantizes its rows as they are made (the profile shows one step for
    the three), with exactly the results of the steps apart."""
    b = QdqBuilder()
    shape, channels = (1, 16, 96, 96), 32
    x = b.qdq("x", 0.05, zero_type(3))
    y = b.node("Conv", [x, b.weight((channels, 16, 1, 1), axis=0), b.bias(channels, 0.05)])
    y = b.qdq(y, 0.08, zero_type(1))
    y = b.node("Clip", [batch_norm(b, y, channels), b.const(np.float32(0)), b.const(np.float32(6))])
    y = b.dq(b.q(y, 0.03, zero_type(0)), np.float32(0.03), zero_type(0))
    w = b.const((RNG.standard_normal((channels, 1, 3, 3)) * 0.5).astype(np.float32))
    y = b.qdq(b.node("Conv", [y, w], group=channels, pads=[1, 1, 1, 1], strides=[2, 2]), 0.1, zero_type(2))
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    feeds = {"x": (2 * RNG.standard_normal(shape)).astype(np.float32)}
    outputs, steps = _profiled_run(model, feeds, tmp_path / "trace.json", intra_op_threads=threads)
    ours = outputs[0]
    # The blocked floats come from the AMX or VNNI products only (elsewhere the steps stay apart, NCHW); the
    # QuantizeLinear after the depthwise convolution takes that one over in turn and quantizes its rows as they are
    # made.
    assert ("QLinearConvToFloat+Conv+QuantizeLinear" in steps) == _int8_blocked_available(), steps
    monkeypatch.setenv("TESSERA_CPU_FUSE_PRODUCERS", "0")
    apart = tessera.InferenceSession(model, intra_op_threads=threads).run(None, feeds)[0]
    np.testing.assert_array_equal(ours, apart)
    theirs = onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0]
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=0.1 + 1e-6)  # one output step


@pytest.mark.parametrize("case", ["float-projection", "one-channel", "quantize-precision"])
def test_joined_operators_in_unusual_neighbourhoods(monkeypatch, case):
    """Shapes the fusions must leave correct where their fast paths do not apply, with the results of the unfused
    steps bit for bit: an int8 expansion whose depthwise convolution feeds a float 1x1 projection (which may take the
    depthwise one over only without its int8 producer), a one-channel pointwise QLinearConvToFloat, and a
    QuantizeLinear whose `precision` attribute (opset 23) rounds its quotient to float16, which no fused form (they
    divide in float) may take over."""
    b = QdqBuilder(opset=23 if case == "quantize-precision" else 17)
    if case == "float-projection":
        shape, channels = (1, 16, 96, 96), 32
        x = b.qdq("x", 0.05, np.int8(3))
        y = b.node("Conv", [x, b.weight((channels, 16, 1, 1), axis=0), b.bias(channels, 0.05)])
        y = b.qdq(y, 0.08, np.int8(1))
        w = b.const((RNG.standard_normal((channels, 1, 3, 3)) * 0.5).astype(np.float32))
        y = b.node("Conv", [y, w], group=channels, pads=[1, 1, 1, 1])
        y = b.node("Conv", [y, b.const((RNG.standard_normal((24, channels, 1, 1)) * 0.2).astype(np.float32))])
    elif case == "one-channel":
        shape = (1, 1, 9, 7)
        x = b.qdq("x", 0.05, np.uint8(120))
        y = b.node("Conv", [x, b.weight((1, 1, 1, 1), axis=0), b.bias(1, 0.05)])
        quantized = b.q(y, 0.08, np.uint8(128))
        y = b.dq(quantized, np.float32(0.08), np.uint8(128))
        y = b.node("Conv", [y, b.const(np.full((1, 1, 3, 3), 0.3, np.float32))], pads=[1, 1, 1, 1])
    else:
        shape = (2, 8, 5, 7)
        q = b.node("QuantizeLinear", ["x", b.const(np.float32(0.05)), b.const(np.int8(3))],
                   precision=TensorProto.FLOAT16)
        y = b.node("Relu", [b.dq(q, np.float32(0.05), np.int8(3))])
        y = b.dq(b.q(y, 0.03, np.int8(0)), np.float32(0.03), np.int8(0))
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    feeds = {"x": (2 * RNG.standard_normal(shape)).astype(np.float32)}
    session = tessera.InferenceSession(model, optimization_level=3)
    ours = session.run(None, feeds)[0]
    if case == "quantize-precision":
        ops = session_ops(session)
        assert "QuantizeLinear" in ops and "ai.tessera:QuantizeLinear" not in ops, ops
        np.testing.assert_array_equal(ours, tessera.InferenceSession(model, optimization_level=0).run(None, feeds)[0])
        return
    if case == "one-channel":
        assert "ai.tessera:QLinearConvToFloat" in session_ops(session)
        # Against the same model with the QLinearConv's bytes also an output (its DequantizeLinear then stays).
        model.graph.output.append(helper.make_tensor_value_info(quantized, TensorProto.UINT8, None))
        apart = tessera.InferenceSession(model, optimization_level=3)
        assert "ai.tessera:QLinearConvToFloat" not in session_ops(apart)
        np.testing.assert_array_equal(ours, apart.run(None, feeds)[0])
        return
    monkeypatch.setenv("TESSERA_CPU_FUSE_PRODUCERS", "0")
    apart = tessera.InferenceSession(model, optimization_level=3).run(None, feeds)[0]
    np.testing.assert_array_equal(ours, apart)
    monkeypatch.delenv("TESSERA_CPU_FUSE_PRODUCERS")
    # Against float convolutions of the dequantized values: the int8 product may differ by one step (0.08) where
    # a value rounds across a half, which the projection scales by at most the sum of its weights' magnitudes.
    reference = tessera.InferenceSession(model, optimization_level=1).run(None, feeds)[0]
    np.testing.assert_allclose(ours, reference, rtol=0, atol=0.5)


@pytest.mark.parametrize("zero_type", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("addition,relu", [("Add", False), ("Sum", True), ("Add", True)],
                         ids=["add", "sum-relu", "add-relu"])
def test_residual_addition_becomes_quantized_add(zero_type, addition, relu):
    """A QDQ model's residual addition, DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear (the
    addition an Add or a Sum of two, ResNet's blocks ending in a Relu), runs as one ai.tessera:QuantizedAdd (the
    DequantizeLinear another node still reads stays for it), with exactly the nodes' results."""
    b = QdqBuilder()
    shape = (1, 24, 20, 18)
    x = b.q("x", 0.05, zero_type(3))
    left = b.dq(x, np.float32(0.05), zero_type(3))
    right = b.qdq(b.node("Relu", [left]), 0.04, zero_type(7))
    y = b.node(addition, [left, right])
    if relu:
        y = b.node("Relu", [y])
    y = b.dq(b.q(y, 0.07, zero_type(1)), np.float32(0.07), zero_type(1))
    y = b.node("Add", [y, left])  # a float reader of `left` as well: its DequantizeLinear stays
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    feeds = {"x": (3 * RNG.standard_normal(shape)).astype(np.float32)}
    session = tessera.InferenceSession(model, optimization_level=3)
    ops = session_ops(session)
    # (The Relu of `right` is a QuantizedLookup of the bytes `left` dequantizes, which stays for its other readers.)
    assert "ai.tessera:QuantizedAdd" in ops and "ai.tessera:QuantizedLookup" in ops, str(ops)
    assert "Sum" not in ops and "Relu" not in ops, str(ops)
    expected = tessera.InferenceSession(model, optimization_level=0).run(None, feeds)[0]
    np.testing.assert_array_equal(session.run(None, feeds)[0], expected)
    np.testing.assert_array_equal(expected, onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0])


@pytest.mark.parametrize("opset", [17, 19, 21])
def test_fusions_needing_shapes_apply_at_newer_opsets(opset):
    """The residual addition's fusion needs both operands' inferred shapes.  libonnx (1.12) knows opset 17; a model
    importing a newer one is still inferred where the older definitions hold (core/model/guarded_inference.cc), so
    the same model at opset 19 or 21 becomes the same QuantizedAdd, with the nodes' results."""
    b = QdqBuilder(opset=opset)
    shape = (1, 16, 9, 13)
    left = b.dq(b.q("x", 0.05, np.uint8(3)), np.float32(0.05), np.uint8(3))
    right = b.dq(b.q(b.node("Sigmoid", [left]), 0.01, np.uint8(0)), np.float32(0.01), np.uint8(0))
    y = b.dq(b.q(b.node("Add", [left, right]), 0.07, np.uint8(1)), np.float32(0.07), np.uint8(1))
    model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], y)
    feeds = {"x": (3 * RNG.standard_normal(shape)).astype(np.float32)}
    session = tessera.InferenceSession(model)
    assert "ai.tessera:QuantizedAdd" in session_ops(session), str(session_ops(session))
    expected = tessera.InferenceSession(model, optimization_level=0).run(None, feeds)[0]
    np.testing.assert_array_equal(session.run(None, feeds)[0], expected)
    np.testing.assert_array_equal(expected, onnxruntime_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)[0])
