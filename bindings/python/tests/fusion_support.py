"""What the graph-fusion tests (test_graph_fusions.py, test_graph_fusions_paths.py) share: a model builder with seeded
random weights, running a model at an optimization level, comparisons, and the fusion cases with the plans each level
must produce.  See test_graph_fusions.py for what the fusions are.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np
import onnx
from model_factory import FLOAT, tensor
from onnx import helper, numpy_helper

import tessera

# The fused operator's domain is the optimizer's own (TESS_FUSED_OPS_DOMAIN); plans are compared without it, and
# test_fused_operator_domain checks it separately.
FUSED = "FusedConv"
FUSED_DOMAINS = ("ai.tessera", "com.microsoft")
RTOL, ATOL = 1e-4, 1e-5
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CLI = os.environ.get("TESSERA_CLI", os.path.join(os.path.dirname(os.path.dirname(tessera.library_path)), "bin",
                                                 "tessera"))


# ---- Model building ----------------------------------------------------------------------------------------------


class Builder:
    """Accumulates nodes, seeded random initializers, graph inputs (with seeded feeds) and outputs."""

    def __init__(self, seed: int, opset: int = 13):
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.outputs: list = []
        self.feeds: dict[str, np.ndarray] = {}
        self._count = 0

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{base}{self._count}"

    def input(self, name: str, shape, value: np.ndarray | None = None, elem=FLOAT) -> str:
        self.inputs.append(tensor(name, elem, list(shape)))
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        self.feeds[name] = value if value is not None else self.rng.standard_normal(shape).astype(dtype)
        return name

    def const(self, base: str, array: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs, n_outputs: int = 1, **attrs):
        outs = [self.fresh(op.lower() + "_") for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.fresh(op + "_node"), **attrs))
        return outs[0] if n_outputs == 1 else outs

    def conv(self, x: str, cin: int, cout: int, kernel=(3, 3), group: int = 1, bias: bool = True,
             dtype=np.float32, weight_input: bool = False, **attrs) -> str:
        shape = (cout, cin // group, *kernel)
        scale = 1.0 / np.sqrt(np.prod(shape[1:]))
        w_value = (self.rng.standard_normal(shape) * scale).astype(dtype)
        if weight_input:  # a graph input without initializer: not a constant
            w = self.input(self.fresh("w_in"), shape, w_value, elem=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        else:
            w = self.const("w", w_value)
        inputs = [x, w]
        if bias:
            inputs.append(self.const("b", (self.rng.standard_normal(cout) * 0.5).astype(dtype)))
        return self.node("Conv", inputs, group=group, **attrs)

    def bn(self, x: str, channels: int, **attrs) -> str:
        gamma = self.rng.uniform(0.5, 1.5, channels).astype(np.float32)
        beta = (self.rng.standard_normal(channels) * 0.3).astype(np.float32)
        mean = (self.rng.standard_normal(channels) * 0.3).astype(np.float32)
        var = self.rng.uniform(0.5, 2.0, channels).astype(np.float32)
        return self.node("BatchNormalization",
                         [x, self.const("gamma", gamma), self.const("beta", beta), self.const("mean", mean),
                          self.const("var", var)], **attrs)

    def scalar(self, base: str, value: float) -> str:
        return self.const(base, np.array(value, np.float32))

    def output(self, name: str) -> None:
        self.outputs.append(tensor(name, FLOAT, None))

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "fusion_test", self.inputs, self.outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8  # readable by the onnxruntime used as a reference
        return model


def original_ops(model: onnx.ModelProto) -> list[str]:
    return sorted(n.op_type if not n.domain else f"{n.domain}:{n.op_type}" for n in model.graph.node)


def strip_fused_domain(op: str) -> str:
    domain, _, name = op.rpartition(":")
    return name if name == FUSED and domain in FUSED_DOMAINS else op


def ops_of(session: tessera.InferenceSession) -> list[str]:
    return sorted(strip_fused_domain(op) for p in session.get_partitions() for op in p["ops"])


def run_at(model: onnx.ModelProto, feeds: dict, level: int, **kwargs):
    session = tessera.InferenceSession(model, optimization_level=level, **kwargs)
    return session.run(None, feeds), ops_of(session)


def assert_same(actual, expected, what: str) -> None:
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f"{what}: output {i} shape {a.shape} != {e.shape}"
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL, err_msg=f"{what}: output {i}")


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# ---- Cases ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """A model and the sorted operator lists expected at level 1 (basic) and level 2 (extended; also 3 and 99)."""

    build: Callable[[], Builder]
    basic: list[str]
    extended: list[str]
    onnxruntime: bool = True  # level 0 is also compared with onnxruntime


def ops(*names: str) -> list[str]:
    return sorted(names)


def conv_act(op: str, opset: int = 13, **attrs):
    def build():
        b = Builder(sum(map(ord, op)) + 7, opset)
        x = b.input("x", [1, 3, 10, 9])
        b.output(b.node(op, [b.conv(x, 3, 8, pads=[1, 1, 1, 1])], **attrs))
        return b
    return build


def conv_bn(bias: bool, act: str | None = None, seed: int = 1, opset: int = 13, **bn_attrs):
    def build():
        b = Builder(seed, opset)
        x = b.input("x", [1, 4, 9, 11])
        y = b.bn(b.conv(x, 4, 6, bias=bias, pads=[1, 1, 1, 1]), 6, epsilon=1e-3, **bn_attrs)
        b.output(b.node(act, [y]) if act else y)
        return b
    return build


def conv_clip(kind: str):
    """Clip(0, 6) after a Conv with the bounds given as initializers, Constant nodes, only one of them, or (opset 9)
    attributes."""
    def build():
        b = Builder(11, opset=9 if kind.startswith("attributes") else 13)
        x = b.input("x", [1, 3, 8, 8], b.rng.standard_normal((1, 3, 8, 8)).astype(np.float32) * 4)
        c = b.conv(x, 3, 5, pads=[1, 1, 1, 1])
        if kind == "initializers":
            y = b.node("Clip", [c, b.scalar("lo", 0.0), b.scalar("hi", 6.0)])
        elif kind == "constant_nodes":
            lo = b.node("Constant", [], value=numpy_helper.from_array(np.array(0.0, np.float32)))
            hi = b.node("Constant", [], value_float=6.0)
            y = b.node("Clip", [c, lo, hi])
        elif kind == "max_only":
            y = b.node("Clip", [c, "", b.scalar("hi", 0.5)])
        elif kind == "min_only":
            y = b.node("Clip", [c, b.scalar("lo", -0.25)])
        elif kind == "attributes":
            y = b.node("Clip", [c], min=0.0, max=6.0)
        elif kind == "attributes_max_only":
            y = b.node("Clip", [c], max=0.5)
        else:
            raise AssertionError(kind)
        b.output(y)
        return b
    return build


def residual(kind: str, relu: bool = True, bias: bool = True, batch: int = 1):
    """Conv(x) + a same-shape value from another branch (Relu(x), or a second Conv), optionally followed by Relu."""
    def build():
        b = Builder(21 + batch)
        x = b.input("x", [batch, 4, 8, 7])
        branch = b.node("Relu", [x]) if kind != "two_convs" else b.conv(x, 4, 4, kernel=(1, 1))
        c = b.conv(x, 4, 4, bias=bias, pads=[1, 1, 1, 1])
        if kind == "sum":
            s = b.node("Sum", [c, branch])
        elif kind == "conv_second":
            s = b.node("Add", [branch, c])
        else:
            s = b.node("Add", [c, branch])
        b.output(b.node("Relu", [s]) if relu else s)
        return b
    return build


def resnet_block(batch: int):
    """Conv+BN+Relu, Conv+BN, + identity, Relu: what ResNet's basic block exports to."""
    def build():
        b = Builder(31 + batch)
        x = b.input("x", [batch, 8, 10, 10])
        h = b.node("Relu", [b.bn(b.conv(x, 8, 8, bias=False, pads=[1, 1, 1, 1]), 8)])
        h = b.bn(b.conv(h, 8, 8, bias=False, pads=[1, 1, 1, 1]), 8)
        b.output(b.node("Relu", [b.node("Add", [h, x])]))
        return b
    return build


def mobilenet_block():
    """Inverted residual: 1x1 expand + BN + Clip(0, 6), depthwise 3x3 + BN + Clip, 1x1 project + BN, + input."""
    def build():
        b = Builder(41)
        x = b.input("x", [1, 8, 10, 10])
        h = b.node("Clip", [b.bn(b.conv(x, 8, 24, kernel=(1, 1), bias=False), 24), b.scalar("lo", 0.0),
                            b.scalar("hi", 6.0)])
        h = b.node("Clip", [b.bn(b.conv(h, 24, 24, group=24, bias=False, pads=[1, 1, 1, 1]), 24),
                            b.scalar("lo", 0.0), b.scalar("hi", 6.0)])
        h = b.bn(b.conv(h, 24, 8, kernel=(1, 1), bias=False), 8)
        b.output(b.node("Add", [x, h]))
        return b
    return build


def shaped(x_shape, cout, kernel, act="Relu", group=1, bn=False, with_residual=False, seed=51, **attrs):
    """One Conv of the given geometry (+ BN) (+ residual) + activation: reaches the kernel's code paths."""
    def build():
        b = Builder(seed)
        x = b.input("x", x_shape)
        y = b.conv(x, x_shape[1], cout, kernel=kernel, group=group, **attrs)
        if bn:
            y = b.bn(y, cout)
        if with_residual:
            shape = conv_output_shape(x_shape, cout, kernel, attrs)
            z = b.input("z", shape)
            y = b.node("Add", [y, z])
        if act == "Clip6":
            y = b.node("Clip", [y, b.scalar("lo", 0.0), b.scalar("hi", 6.0)])
        elif act:
            y = b.node(act, [y])
        b.output(y)
        return b
    return build


def conv_output_shape(x_shape, cout, kernel, attrs):
    """The Conv output shape from explicit pads/strides/dilations (the cases here use no auto_pad)."""
    rank = len(kernel)
    pads = attrs.get("pads", [0] * 2 * rank)
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    out = [x_shape[0], cout]
    for d in range(rank):
        span = (kernel[d] - 1) * dilations[d] + 1
        out.append((x_shape[2 + d] + pads[d] + pads[d + rank] - span) // strides[d] + 1)
    return out


def two_resnet_blocks():
    """Two basic blocks in a row: the second block's residual is the first block's fused output."""
    def build():
        b = Builder(35)
        h = b.input("x", [1, 8, 9, 9])
        for _ in range(2):
            t = b.node("Relu", [b.bn(b.conv(h, 8, 8, bias=False, pads=[1, 1, 1, 1]), 8)])
            t = b.bn(b.conv(t, 8, 8, bias=False, pads=[1, 1, 1, 1]), 8)
            h = b.node("Relu", [b.node("Add", [t, h])])
        b.output(h)
        return b
    return build


def conv_add_constant():
    """The residual is a constant of the Conv's shape."""
    def build():
        b = Builder(36)
        c = b.conv(b.input("x", [1, 3, 6, 6]), 3, 4, pads=[1, 1, 1, 1])
        z = b.const("z", b.rng.standard_normal((1, 4, 6, 6)).astype(np.float32))
        b.output(b.node("Relu", [b.node("Add", [c, z])]))
        return b
    return build


def dynamic_batch(with_add: bool):
    """x is [N, 4, 6, 6]: the activation fuses; the Add does not (FusedConv needs Z's shape to be the Conv's)."""
    def build():
        b = Builder(37)
        x = b.input("x", ["N", 4, 6, 6], b.rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
        c = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
        b.output(b.node("Relu", [b.node("Add", [c, b.node("Sigmoid", [x])]) if with_add else c]))
        return b
    return build


def shared_weights(both_bn: bool):
    """Two Convs read one weight initializer; both followed by BN, or only the first (the second must keep the
    original weights)."""
    def build():
        b = Builder(38)
        x = b.input("x", [1, 4, 7, 7])
        c1 = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
        w = b.nodes[-1].input[1]
        c2 = b.node("Conv", [b.node("Tanh", [x]), w], pads=[1, 1, 1, 1])
        b.output(b.bn(c1, 4))
        b.output(b.bn(c2, 4) if both_bn else c2)
        return b
    return build


def activation_read_twice():
    """Conv -> Relu, the Relu's output read by a Sigmoid and returned: the Conv and Relu still fuse."""
    def build():
        b = Builder(39)
        r = b.node("Relu", [b.conv(b.input("x", [1, 3, 6, 6]), 3, 4, pads=[1, 1, 1, 1])])
        b.output(r)
        b.output(b.node("Sigmoid", [r]))
        return b
    return build


F = FUSED
def normalized_input(act: str | None, readers: int = 1, channels: int = 6, size: int = 8, cout: int = 4,
                     kernel=(3, 3), conv_act: str | None = None, concat: bool = False, seed: int = 81):
    """BatchNormalization [-> act] read by `readers` convolutions [each -> conv_act]: DenseNet's layer, whose
    normalization no convolution before it can absorb (core/optimizer/batchnorm_to_conv.cc).  It normalizes a graph
    input, or with `concat` (as DenseNet does) the concatenation of a 1x1 convolution of one and a 1x1 convolution of
    that (a chain the CPU provider holds blocked)."""
    def build():
        b = Builder(seed)
        if concat:
            first = b.conv(b.input("x", [1, 16, size, size]), 16, channels // 2, kernel=(1, 1))
            second = b.conv(first, channels // 2, channels - channels // 2, kernel=(1, 1))
            source = b.node("Concat", [first, second], axis=1)
        else:
            source = b.input("x", [1, channels, size, size])
        y = b.bn(source, channels)
        if act == "Clip6":
            y = b.node("Clip", [y, b.scalar("lo", 0.0), b.scalar("hi", 6.0)])
        elif act is not None:
            y = b.node(act, [y])
        pads = [k // 2 for k in kernel] * 2
        for _ in range(readers):
            c = b.conv(y, channels, cout, kernel=kernel, pads=pads)
            b.output(b.node(conv_act, [c]) if conv_act else c)
        return b
    return build


def normalized_input_of_unknown_size():
    """The normalization of an input [1, 4, h, w]: the rewrite needs the channel count alone."""
    def build():
        b = Builder(91)
        b.inputs.append(tensor("x", FLOAT, [1, 4, "h", "w"]))
        b.feeds["x"] = b.rng.standard_normal((1, 4, 9, 7)).astype(np.float32)
        b.output(b.conv(b.node("Relu", [b.bn("x", 4)]), 4, 4, pads=[1, 1, 1, 1]))
        return b
    return build


def normalized_pool(pool: str, conv_first: bool = False):
    """BN -> Relu -> pool, or (DenseNet's transition) BN -> Relu -> 1x1 Conv -> 2x2 average: the pool moves before
    the convolution (pool_before_pointwise_conv.cc) and the normalization still becomes a convolution."""
    def build():
        b = Builder(100)
        y = b.node("Relu", [b.bn(b.input("x", [1, 32, 8, 8]), 32)])
        if conv_first:
            y = b.conv(y, 32, 16, kernel=(1, 1))
        b.output(b.node(pool, [y], kernel_shape=[2, 2], strides=[2, 2]))
        return b
    return build


def scaled_conv_bn_relu_conv():
    """Conv, a per-channel Mul by a constant, BN, Relu, Conv: once the Mul folds into the first Conv, the BN folds
    there too (level 1) rather than becoming a convolution of its own."""
    def build():
        b = Builder(92)
        c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
        scaled = b.node("Mul", [c, b.const("s", np.linspace(0.5, 2.0, 4, dtype=np.float32).reshape(1, 4, 1, 1))])
        b.output(b.conv(b.node("Relu", [b.bn(scaled, 4)]), 4, 4, pads=[1, 1, 1, 1]))
        return b
    return build


CASES: dict[str, Case] = {
    # BatchNormalization folding (basic): no FusedConv without an activation or a sum.
    "conv_bn": Case(conv_bn(True), ops("Conv"), ops("Conv")),
    "conv_nobias_bn": Case(conv_bn(False, seed=2), ops("Conv"), ops("Conv")),
    "conv_bn_relu": Case(conv_bn(True, "Relu", seed=3), ops("Conv", "Relu"), ops(F)),
    "conv_bn_opset9": Case(conv_bn(True, seed=5, opset=9), ops("Conv"), ops("Conv")),
    "conv_bn_opset15_training_mode_0": Case(conv_bn(True, "Tanh", seed=6, opset=15, training_mode=0),
                                            ops("Conv", "Tanh"), ops(F)),
    "conv_nobias_bn_sigmoid": Case(conv_bn(False, "Sigmoid", seed=4), ops("Conv", "Sigmoid"), ops(F)),
    # Activations.
    "conv_relu": Case(conv_act("Relu"), ops("Conv", "Relu"), ops(F)),
    "conv_sigmoid": Case(conv_act("Sigmoid"), ops("Conv", "Sigmoid"), ops(F)),
    "conv_tanh": Case(conv_act("Tanh"), ops("Conv", "Tanh"), ops(F)),
    "conv_leakyrelu": Case(conv_act("LeakyRelu", alpha=0.2), ops("Conv", "LeakyRelu"), ops(F)),
    "conv_leakyrelu_default_alpha": Case(conv_act("LeakyRelu"), ops("Conv", "LeakyRelu"), ops(F)),
    "conv_hardsigmoid": Case(conv_act("HardSigmoid", alpha=0.3, beta=0.4), ops("Conv", "HardSigmoid"), ops(F)),
    "conv_hardsigmoid_defaults": Case(conv_act("HardSigmoid"), ops("Conv", "HardSigmoid"), ops(F)),
    "conv_clip_initializer_bounds": Case(conv_clip("initializers"), ops("Conv", "Clip"), ops(F)),
    "conv_clip_constant_node_bounds": Case(conv_clip("constant_nodes"), ops("Conv", "Clip"), ops(F)),
    "conv_clip_max_only": Case(conv_clip("max_only"), ops("Conv", "Clip"), ops(F)),
    "conv_clip_min_only": Case(conv_clip("min_only"), ops("Conv", "Clip"), ops(F)),
    "conv_clip_opset9_attributes": Case(conv_clip("attributes"), ops("Conv", "Clip"), ops(F)),
    "conv_clip_opset9_max_attribute_only": Case(conv_clip("attributes_max_only"), ops("Conv", "Clip"), ops(F)),
    # Residual sums.
    "conv_add_relu": Case(residual("add"), ops("Relu", "Conv", "Add", "Relu"), ops("Relu", F)),
    "conv_add_relu_conv_is_second_operand": Case(residual("conv_second"), ops("Relu", "Conv", "Add", "Relu"),
                                                 ops("Relu", F)),
    "conv_sum_relu": Case(residual("sum"), ops("Relu", "Conv", "Sum", "Relu"), ops("Relu", F)),
    "conv_add_without_activation": Case(residual("add", relu=False), ops("Relu", "Conv", "Add"), ops("Relu", F)),
    "conv_nobias_add_relu": Case(residual("add", bias=False), ops("Relu", "Conv", "Add", "Relu"), ops("Relu", F)),
    "two_convs_add_relu": Case(residual("two_convs"), ops("Conv", "Conv", "Add", "Relu"), ops("Conv", F)),
    "batch2_conv_add_relu": Case(residual("add", batch=2), ops("Relu", "Conv", "Add", "Relu"), ops("Relu", F)),
    "resnet_basic_block": Case(resnet_block(1), ops("Conv", "Relu", "Conv", "Add", "Relu"), ops(F, F)),
    "batch2_resnet_basic_block": Case(resnet_block(2), ops("Conv", "Relu", "Conv", "Add", "Relu"), ops(F, F)),
    "mobilenet_inverted_residual": Case(mobilenet_block(), ops("Conv", "Clip", "Conv", "Clip", "Conv", "Add"),
                                        ops(F, F, F)),
    "two_resnet_blocks": Case(two_resnet_blocks(), ops(*["Conv", "Relu", "Conv", "Add", "Relu"] * 2), ops(F, F, F, F)),
    "conv_add_constant_relu": Case(conv_add_constant(), ops("Conv", "Add", "Relu"), ops(F)),
    "dynamic_batch_conv_relu": Case(dynamic_batch(False), ops("Conv", "Relu"), ops(F)),
    "dynamic_batch_conv_add_relu_fuses_no_add": Case(dynamic_batch(True), ops("Sigmoid", "Conv", "Add", "Relu"),
                                                     ops("Sigmoid", "Conv", "Add", "Relu")),
    "shared_weights_both_folded": Case(shared_weights(True), ops("Conv", "Tanh", "Conv"), ops("Conv", "Tanh", "Conv")),
    "shared_weights_one_folded": Case(shared_weights(False), ops("Conv", "Tanh", "Conv"),
                                      ops("Conv", "Tanh", "Conv")),
    "activation_output_read_twice": Case(activation_read_twice(), ops("Conv", "Relu", "Sigmoid"), ops(F, "Sigmoid")),
    # Geometries (the CPU kernel's code paths: depthwise, direct, packed/im2col, pointwise, N-d).
    "depthwise_bn_clip": Case(shaped([1, 6, 9, 9], 6, (3, 3), act="Clip6", group=6, bn=True, pads=[1, 1, 1, 1]),
                              ops("Conv", "Clip"), ops(F)),
    "depthwise_bn_only": Case(shaped([1, 6, 9, 9], 6, (3, 3), act=None, group=6, bn=True, pads=[1, 1, 1, 1]),
                              ops("Conv"), ops("Conv")),
    "conv_clip_without_bounds": Case(shaped([1, 3, 6, 6], 4, (3, 3), act="Clip"), ops("Conv", "Clip"), ops(F)),
    "depthwise_stride2_bn_relu": Case(shaped([2, 6, 9, 10], 6, (3, 3), group=6, bn=True, strides=[2, 2],
                                             pads=[1, 1, 1, 1]), ops("Conv", "Relu"), ops(F)),
    "depthwise_multiplier2_add_tanh": Case(shaped([1, 4, 8, 8], 8, (3, 3), act="Tanh", group=4, with_residual=True,
                                                  pads=[1, 1, 1, 1]), ops("Conv", "Add", "Tanh"), ops(F)),
    "strided_3x3_padded_relu": Case(shaped([1, 5, 11, 13], 7, (3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
                                    ops("Conv", "Relu"), ops(F)),
    "grouped_conv_relu": Case(shaped([1, 8, 9, 9], 12, (3, 3), group=4, pads=[1, 1, 1, 1]), ops("Conv", "Relu"),
                              ops(F)),
    "grouped_conv_add_leakyrelu": Case(shaped([1, 6, 7, 9], 9, (3, 3), act="LeakyRelu", group=3, with_residual=True,
                                              pads=[1, 1, 1, 1]), ops("Conv", "Add", "LeakyRelu"), ops(F)),
    "pointwise_1x1_relu": Case(shaped([1, 16, 7, 7], 24, (1, 1)), ops("Conv", "Relu"), ops(F)),
    "pointwise_1x1_add_relu": Case(shaped([2, 16, 6, 5], 8, (1, 1), with_residual=True),
                                   ops("Conv", "Add", "Relu"), ops(F)),
    "packed_small_image_many_filters_add_relu": Case(shaped([1, 32, 7, 7], 64, (3, 3), with_residual=True,
                                                            pads=[1, 1, 1, 1]), ops("Conv", "Add", "Relu"), ops(F)),
    "direct_cropped_grid_wide_image_bn_relu": Case(shaped([1, 8, 40, 36], 16, (3, 3), bn=True, pads=[1, 1, 1, 1]),
                                                   ops("Conv", "Relu"), ops(F)),
    "dilated_5x5_sigmoid": Case(shaped([1, 4, 15, 14], 6, (5, 5), act="Sigmoid", dilations=[2, 2],
                                       pads=[4, 4, 4, 4]), ops("Conv", "Sigmoid"), ops(F)),
    "tiled_im2col_add_hardsigmoid": Case(shaped([1, 8, 12, 12], 16, (3, 3), act="HardSigmoid", with_residual=True),
                                         ops("Conv", "Add", "HardSigmoid"), ops(F)),
    "same_upper_stride2_relu": Case(shaped([1, 3, 9, 10], 5, (3, 3), strides=[2, 2], auto_pad="SAME_UPPER"),
                                    ops("Conv", "Relu"), ops(F)),
    "conv1d_add_relu": Case(shaped([2, 4, 20], 6, (3,), with_residual=True, pads=[1, 1]),
                            ops("Conv", "Add", "Relu"), ops(F)),
    # A normalization no convolution before it absorbs, and its activation, become one per-channel convolution.
    "bn_relu_conv": Case(normalized_input("Relu"), ops("BatchNormalization", "Relu", "Conv"), ops(F, "Conv")),
    "bn_conv_relu": Case(normalized_input(None, conv_act="Relu", seed=82), ops("BatchNormalization", "Conv", "Relu"),
                         ops(F, F)),
    "bn_clip_two_convs": Case(normalized_input("Clip6", readers=2, seed=83),
                              ops("BatchNormalization", "Clip", "Conv", "Conv"), ops(F, "Conv", "Conv")),
    "bn_relu_conv_of_unknown_size": Case(normalized_input_of_unknown_size(),
                                         ops("BatchNormalization", "Relu", "Conv"), ops(F, "Conv")),
    "conv_mul_bn_relu_conv": Case(scaled_conv_bn_relu_conv(), ops("Conv", "Relu", "Conv"), ops(F, "Conv")),
    "bn_relu_averagepool": Case(normalized_pool("AveragePool"), ops("BatchNormalization", "Relu", "AveragePool"),
                                ops(F, "AveragePool")),
    "densenet_transition": Case(normalized_pool("AveragePool", conv_first=True),
                                ops("BatchNormalization", "Relu", "Conv", "AveragePool"), ops(F, "AveragePool", "Conv")),
    "bn_sigmoid_pointwise_conv": Case(normalized_input("Sigmoid", kernel=(1, 1), seed=84),
                                      ops("BatchNormalization", "Sigmoid", "Conv"),
                                      ops("BatchNormalization", "Sigmoid", "Conv")),  # Relu and Clip only
    # 64 channels of 64 x 64 (1 MB): the CPU provider's blocked 1x1 convolution runs the per-channel one over its
    # rows as it makes them (blocked_depthwise_pointwise2d); 32 channels of 16 x 16 run it on its own, blocked.
    "densenet_layer_taken_over": Case(normalized_input("Relu", channels=64, size=64, cout=32, kernel=(1, 1),
                                                       conv_act="Relu", concat=True, seed=85),
                                      ops("Conv", "Conv", "Concat", "BatchNormalization", "Relu", "Conv", "Relu"),
                                      ops("Conv", "Conv", "Concat", F, F)),
    "densenet_layer_blocked": Case(normalized_input("Relu", channels=32, size=16, cout=16, kernel=(1, 1),
                                                    conv_act="Relu", concat=True, seed=86),
                                   ops("Conv", "Conv", "Concat", "BatchNormalization", "Relu", "Conv", "Relu"),
                                   ops("Conv", "Conv", "Concat", F, F)),
    "conv3d_relu": Case(shaped([1, 2, 5, 6, 4], 3, (3, 3, 3), pads=[1, 1, 1, 1, 1, 1]), ops("Conv", "Relu"),
                        ops(F)),
}


def materialize(case: Case):
    b = case.build()
    return b.model(), b.feeds
