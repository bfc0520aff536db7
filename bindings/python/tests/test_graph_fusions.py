"""Graph fusions of the optimizer, checked end to end through sessions.

- Level 1 (basic) folds an inference BatchNormalization into the Conv before it (core/optimizer/fuse_conv_batchnorm.cc).
- Level 2 (extended) fuses Conv [+ Add/Sum of a same-shape residual] [+ Relu/Clip/Sigmoid/Tanh/LeakyRelu/HardSigmoid]
  into FusedConv of the optimizer's domain (TESS_FUSED_OPS_DOMAIN, onnxruntime's com.microsoft FusedConv signature;
  core/optimizer/fuse_conv_activation.cc), run by the CPU provider's Conv kernel with its epilogue
  (plugins/cpu/kernels/conv.cc), but only where the provider that runs the fused node would have run every node it
  replaces.
- Level 3 (and 99) is everything and the default; level 0 rewrites nothing; other levels fail at session creation.

Every model is built here with seeded random float32 weights, run at level 0 and at the optimized levels on the same
input; the results must agree (and level 0 must agree with onnxruntime where it is installed), and the optimized
partition plan must hold exactly the expected operators.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from typing import Callable

import numpy as np
import onnx
import pytest
from model_factory import FLOAT, tensor
from onnx import TensorProto, helper, numpy_helper

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
    "conv3d_relu": Case(shaped([1, 2, 5, 6, 4], 3, (3, 3, 3), pads=[1, 1, 1, 1, 1, 1]), ops("Conv", "Relu"),
                        ops(F)),
}


def materialize(case: Case):
    b = case.build()
    return b.model(), b.feeds


@pytest.mark.parametrize("name", list(CASES))
def test_fusion_preserves_results_and_fuses(name):
    case = CASES[name]
    model, feeds = materialize(case)
    reference, ops0 = run_at(model, feeds, 0)
    assert ops0 == original_ops(model), "level 0 must not rewrite the graph"
    if case.onnxruntime:
        theirs = onnxruntime_outputs(model, feeds)
        if theirs is not None:
            assert_same(reference, theirs, f"{name}: level 0 against onnxruntime")
    for level, expected in ((1, case.basic), (2, case.extended), (3, case.extended), (99, case.extended)):
        outputs, got = run_at(model, feeds, level)
        assert got == expected, f"{name}: operators at level {level}"
        assert_same(outputs, reference, f"{name}: level {level} against level 0")


def test_default_level_is_all():
    model, feeds = materialize(CASES["conv_bn_relu"])
    session = tessera.InferenceSession(model)
    assert ops_of(session) == [FUSED]
    assert_same(session.run(None, feeds), run_at(model, feeds, 0)[0], "default level")


def test_level_1_folds_batchnorm_but_makes_no_fused_conv():
    model, feeds = materialize(CASES["resnet_basic_block"])
    outputs, got = run_at(model, feeds, 1)
    assert "BatchNormalization" not in got and FUSED not in got
    assert got.count("Conv") == 2
    assert_same(outputs, run_at(model, feeds, 0)[0], "level 1")


def test_level_0_changes_nothing():
    """(Every case above also checks its level-0 plan.)  Constant nodes, BatchNormalization, Clip bounds: all kept."""
    for name in ("conv_bn_relu", "mobilenet_inverted_residual", "conv_clip_constant_node_bounds"):
        model, feeds = materialize(CASES[name])
        session = tessera.InferenceSession(model, optimization_level=0)
        assert ops_of(session) == original_ops(model), name
        assert FUSED not in ops_of(session)
        session.run(None, feeds)


@pytest.mark.parametrize("level", [-1, 4, 5, 98, 100])
def test_invalid_level_is_a_clear_error(level):
    model, _ = materialize(CASES["conv_relu"])
    with pytest.raises(tessera.InvalidArgument, match=rf"optimization level .*got {level}\b"):
        tessera.InferenceSession(model, optimization_level=level)


def test_fused_node_keeps_the_graph_outputs_and_inputs():
    """The fused plan reads the same graph inputs and produces the same outputs, with the original output names."""
    model, feeds = materialize(CASES["batch2_resnet_basic_block"])
    session = tessera.InferenceSession(model, optimization_level=3)
    assert [o.name for o in session.get_outputs()] == [o.name for o in model.graph.output]
    assert [i.name for i in session.get_inputs()] == ["x"]
    (y,) = session.run([model.graph.output[0].name], feeds)
    assert y.shape == (2, 8, 10, 10) and (y >= 0).all()


def test_repeated_runs_and_other_inputs_stay_correct():
    """The fused kernel reads its residual input on every run (nothing cached from the first)."""
    model, _ = materialize(CASES["packed_small_image_many_filters_add_relu"])
    fused = tessera.InferenceSession(model, optimization_level=3)
    plain = tessera.InferenceSession(model, optimization_level=0)
    assert ops_of(fused) == [FUSED]
    rng = np.random.default_rng(5)
    for _ in range(3):
        feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in fused.get_inputs()}
        assert_same(fused.run(None, feeds), plain.run(None, feeds), "repeated run")


# ---- Negative cases: must not fuse, must still be right ----------------------------------------------------------


def _conv_read_twice():
    b = Builder(61)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(b.node("Relu", [c]))
    b.output(b.node("Sigmoid", [c]))
    return b


def _conv_is_graph_output():
    b = Builder(62)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(c)
    b.output(b.node("Relu", [c]))
    return b


def _add_broadcasts(z_shape, z_is_input):
    def build():
        b = Builder(63)
        c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
        z = (b.input("z", z_shape) if z_is_input
             else b.const("z", b.rng.standard_normal(z_shape).astype(np.float32)))
        b.output(b.node("Relu", [b.node("Add", [c, z])]))
        return b
    return build


def _add_grows_the_shape():
    """Z [2, 4, 8, 8] against a [1, 4, 8, 8] Conv output: the sum is bigger than the Conv."""
    b = Builder(64)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(b.node("Relu", [b.node("Add", [c, b.input("z", [2, 4, 8, 8])])]))
    return b


def _add_same_value_twice():
    b = Builder(65)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(b.node("Relu", [b.node("Add", [c, c])]))
    return b


def _clip_bound_is_graph_input(which):
    def build():
        b = Builder(66)
        c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
        bound = b.input("bound", [], np.array(0.1 if which == "min" else 0.3, np.float32))
        inputs = [c, bound, b.scalar("hi", 6.0)] if which == "min" else [c, b.scalar("lo", -0.2), bound]
        b.output(b.node("Clip", inputs))
        return b
    return build


def _bn_training_mode():
    b = Builder(67, opset=15)
    c = b.conv(b.input("x", [2, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(b.bn(c, 4, training_mode=1))
    return b


def _bn_weights_not_constant():
    b = Builder(68)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1], weight_input=True)
    b.output(b.node("Relu", [b.bn(c, 4)]))
    return b


def _bn_conv_output_read_twice():
    b = Builder(69)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(b.bn(c, 4))
    b.output(b.node("Relu", [c]))
    return b


def _bn_param_is_graph_input():
    b = Builder(70)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    y = b.node("BatchNormalization", [c, b.input("gamma", [4], np.linspace(0.5, 1.5, 4).astype(np.float32)),
                                      b.const("beta", np.zeros(4, np.float32)),
                                      b.const("mean", np.full(4, 0.1, np.float32)),
                                      b.const("var", np.ones(4, np.float32))])
    b.output(y)
    return b


def _double_conv_relu():
    b = Builder(71)
    x = b.input("x", [1, 3, 8, 8], elem=TensorProto.DOUBLE)
    b.outputs.append(tensor("y", TensorProto.DOUBLE, None))
    c = b.conv(x, 3, 4, dtype=np.float64, pads=[1, 1, 1, 1])
    b.nodes.append(helper.make_node("Relu", [c], ["y"]))
    return b


def _sum_read_twice():
    """Conv + Add fuse; the sum is read by two activations, so neither joins."""
    b = Builder(72)
    x = b.input("x", [1, 4, 8, 8])
    s = b.node("Add", [b.conv(x, 4, 4, pads=[1, 1, 1, 1]), b.node("Sigmoid", [x])])
    b.output(b.node("Relu", [s]))
    b.output(b.node("Tanh", [s]))
    return b


def _sum_of_three():
    b = Builder(76)
    x = b.input("x", [1, 4, 6, 6])
    s3 = b.node("Sum", [b.conv(x, 4, 4, pads=[1, 1, 1, 1]), b.node("Relu", [x]), b.node("Sigmoid", [x])])
    b.output(b.node("Relu", [s3]))
    return b


def _unsupported_activation():
    b = Builder(73)
    c = b.conv(b.input("x", [1, 3, 8, 8]), 3, 4, pads=[1, 1, 1, 1])
    b.output(b.node("Elu", [c]))
    return b


NEGATIVE: dict[str, Case] = {
    "conv_output_read_by_two_nodes": Case(_conv_read_twice, ops("Conv", "Relu", "Sigmoid"),
                                          ops("Conv", "Relu", "Sigmoid")),
    "conv_output_is_graph_output": Case(_conv_is_graph_output, ops("Conv", "Relu"), ops("Conv", "Relu")),
    # A per-channel constant is no FusedConv sum (Z would broadcast), but it folds into the Conv's bias (level 1),
    # after which the Relu fuses.
    "add_broadcasts_channel_constant": Case(_add_broadcasts([1, 4, 1, 1], False), ops("Conv", "Relu"), [FUSED]),
    "add_broadcasts_channel_input": Case(_add_broadcasts([1, 4, 1, 1], True), ops("Conv", "Add", "Relu"),
                                         ops("Conv", "Add", "Relu")),
    "add_broadcasts_row_input": Case(_add_broadcasts([8], True), ops("Conv", "Add", "Relu"),
                                     ops("Conv", "Add", "Relu")),
    "add_broadcasts_to_a_bigger_shape": Case(_add_grows_the_shape, ops("Conv", "Add", "Relu"),
                                             ops("Conv", "Add", "Relu")),
    "add_reads_the_conv_twice": Case(_add_same_value_twice, ops("Conv", "Add", "Relu"), ops("Conv", "Add", "Relu")),
    "clip_min_is_graph_input": Case(_clip_bound_is_graph_input("min"), ops("Conv", "Clip"), ops("Conv", "Clip")),
    "clip_max_is_graph_input": Case(_clip_bound_is_graph_input("max"), ops("Conv", "Clip"), ops("Conv", "Clip")),
    "bn_weights_not_constant": Case(_bn_weights_not_constant, ops("Conv", "BatchNormalization", "Relu"),
                                    ops("Conv", "BatchNormalization", "Relu")),
    "bn_conv_output_read_twice": Case(_bn_conv_output_read_twice, ops("Conv", "BatchNormalization", "Relu"),
                                      ops("Conv", "BatchNormalization", "Relu")),
    "bn_scale_is_graph_input": Case(_bn_param_is_graph_input, ops("Conv", "BatchNormalization"),
                                    ops("Conv", "BatchNormalization")),
    "double_conv_relu": Case(_double_conv_relu, ops("Conv", "Relu"), ops("Conv", "Relu"), onnxruntime=False),
    "sum_read_by_two_activations": Case(_sum_read_twice, ops("Sigmoid", "Conv", "Add", "Relu", "Tanh"),
                                        ops("Sigmoid", F, "Relu", "Tanh")),
    "sum_of_three_inputs": Case(_sum_of_three, ops("Relu", "Sigmoid", "Conv", "Sum", "Relu"),
                                ops("Relu", "Sigmoid", "Conv", "Sum", "Relu")),
    "activation_fused_conv_does_not_define": Case(_unsupported_activation, ops("Conv", "Elu"), ops("Conv", "Elu")),
}


@pytest.mark.parametrize("name", list(NEGATIVE))
def test_no_fusion_where_it_would_be_wrong(name):
    case = NEGATIVE[name]
    model, feeds = materialize(case)
    reference, ops0 = run_at(model, feeds, 0)
    assert ops0 == original_ops(model)
    theirs = onnxruntime_outputs(model, feeds) if case.onnxruntime else None
    if theirs is not None:
        assert_same(reference, theirs, f"{name}: level 0 against onnxruntime")
    for level, expected in ((1, case.basic), (2, case.extended), (3, case.extended)):
        outputs, got = run_at(model, feeds, level)
        assert got == expected, f"{name}: operators at level {level}"
        assert_same(outputs, reference, f"{name}: level {level} against level 0")


def test_batchnorm_in_training_mode_is_not_folded():
    model, feeds = materialize(Case(_bn_training_mode, [], []))
    try:
        reference, ops0 = run_at(model, feeds, 0)
    except (tessera.NotImplemented, tessera.InvalidModel) as error:  # pragma: no cover - depends on the CPU provider
        pytest.skip(f"the CPU provider does not run BatchNormalization in training mode: {error}")
    assert ops0 == ["BatchNormalization", "Conv"]
    # Training mode normalizes with the batch's own statistics: check that against numpy, so that the comparison
    # below cannot pass on two equally wrong results.
    session0 = tessera.InferenceSession(model, optimization_level=0)
    assert ops_of(session0) == ["BatchNormalization", "Conv"]
    for level in (1, 2, 3):
        outputs, got = run_at(model, feeds, level)
        assert got == ["BatchNormalization", "Conv"], f"level {level}"
        assert_same(outputs, reference, f"training-mode BN at level {level}")
    (y,) = reference
    per_channel_mean = y.mean(axis=(0, 2, 3))
    gamma, beta = (numpy_helper.to_array(t) for t in model.graph.initializer[2:4])
    np.testing.assert_allclose(per_channel_mean, beta, rtol=1e-3, atol=1e-4)  # batch mean is removed, beta added
    np.testing.assert_allclose(y.std(axis=(0, 2, 3)), gamma, rtol=1e-2)


def test_overridable_initializer_is_not_folded():
    """A Conv weight that is also a graph input may be fed at run time: BN folding must not bake it in."""
    b = Builder(74)
    x = b.input("x", [1, 3, 6, 6])
    c = b.conv(x, 3, 4, pads=[1, 1, 1, 1])
    b.output(b.node("Relu", [b.bn(c, 4)]))
    model = b.model()
    w = model.graph.node[0].input[1]
    w_init = next(t for t in model.graph.initializer if t.name == w)
    model.graph.input.append(helper.make_tensor_value_info(w, FLOAT, list(w_init.dims)))
    feeds = dict(b.feeds)
    overridden = dict(feeds, **{w: np.random.default_rng(3).standard_normal(list(w_init.dims)).astype(np.float32)})
    plain = tessera.InferenceSession(model, optimization_level=0)
    for level in (1, 3):
        session = tessera.InferenceSession(model, optimization_level=level)
        assert "BatchNormalization" in ops_of(session), f"level {level}"
        assert_same(session.run(None, feeds), plain.run(None, feeds), f"level {level}, initializer value")
        assert_same(session.run(None, overridden), plain.run(None, overridden), f"level {level}, fed weight")


def test_unread_initializer_that_is_a_graph_input_stays_feedable():
    """Dead-node removal drops unread initializers, but not one the caller may feed."""
    b = Builder(75)
    b.output(b.node("Relu", [b.input("x", [2, 3])]))
    model = b.model()
    model.graph.initializer.append(numpy_helper.from_array(np.ones(3, np.float32), "unused"))
    model.graph.input.append(helper.make_tensor_value_info("unused", FLOAT, [3]))
    for level in (0, 3):
        session = tessera.InferenceSession(model, optimization_level=level)
        assert "unused" in [i.name for i in session.get_overridable_initializers()]
        (y,) = session.run(None, {"x": b.feeds["x"], "unused": np.zeros(3, np.float32)})
        np.testing.assert_array_equal(y, np.maximum(b.feeds["x"], 0))


# ---- Placement: the fused node stays where the Conv would have run -----------------------------------------------

CONV_ONLY_PROVIDER = r"""
/* Claims every float32 Conv (and nothing else, FusedConv included), then refuses to compile: the session falls back
 * to the next provider.  It makes the provider that would run a Conv different from the one that runs FusedConv. */
#include <stdlib.h>
#include <string.h>
#include "tessera/provider.h"

static const TessHostApi* g_host;
static const TessMemoryKind g_memory = {sizeof(TessMemoryKind), "cpu", 0, 0};
struct TessProviderInstance { int unused; };

static TessStatus* create_instance(void* d, const TessProviderOptions* o, TessProviderInstance** out) {
    (void)d; (void)o; *out = (TessProviderInstance*)calloc(1, sizeof(TessProviderInstance)); return NULL;
}
static void release_instance(TessProviderInstance* i) { free(i); }
static TessStatus* get_capability(TessProviderInstance* i, const TessGraphView* g, TessCapabilityContext* ctx) {
    (void)i;
    for (size_t n = 0; n < g->node_count; ++n) {
        const TessNodeView* node = g->nodes[n];
        if (node->domain[0] == '\0' && strcmp(node->op_type, "Conv") == 0) g_host->capability_claim(ctx, node->index);
        else g_host->capability_decline(ctx, node->index, "convonly claims only Conv");
    }
    return NULL;
}
static TessStatus* compile(TessProviderInstance* i, const TessGraphView* g, TessCompiled** out) {
    (void)i; (void)g; *out = NULL;
    return g_host->status_create(TESS_STATUS_NOT_IMPLEMENTED, "convonly compiles nothing");
}
static void release_compiled(TessCompiled* c) { (void)c; }
static TessStatus* compute(TessCompiled* c, TessComputeContext* ctx) {
    (void)c; (void)ctx; return g_host->status_create(TESS_STATUS_NOT_IMPLEMENTED, "convonly computes nothing");
}
static const TessMemoryKind* memory_kind(TessProviderInstance* i) { (void)i; return &g_memory; }
static TessStatus* allocate(TessProviderInstance* i, size_t bytes, size_t alignment, void** out) {
    (void)i; if (posix_memalign(out, alignment, bytes) != 0) *out = NULL;
    return *out ? NULL : g_host->status_create(TESS_STATUS_OUT_OF_MEMORY, "convonly: out of memory");
}
static void free_memory(TessProviderInstance* i, void* p) { (void)i; free(p); }
static TessStatus* copy_any(TessProviderInstance* i, void* dst, const void* src, size_t n) {
    (void)i; memcpy(dst, src, n); return NULL;
}

static TessProviderApi g_provider;
static const TessProviderApi* g_providers[1];

TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    g_host = host;
    if (host->abi_version_min > 1 || host->abi_version_max < 1)
        return host->status_create(TESS_STATUS_ABI_MISMATCH, "convonly speaks ABI 1");
    memset(&g_provider, 0, sizeof g_provider);
    g_provider.struct_size = sizeof g_provider;
    g_provider.name = "convonly";
    g_provider.create_instance = create_instance;
    g_provider.release_instance = release_instance;
    g_provider.get_capability = get_capability;
    g_provider.compile = compile;
    g_provider.release_compiled = release_compiled;
    g_provider.compute = compute;
    g_provider.memory_kind = memory_kind;
    g_provider.allocate = allocate;
    g_provider.free = free_memory;
    g_provider.copy_to_host = copy_any;
    g_provider.copy_from_host = copy_any;
    g_providers[0] = &g_provider;
    exports->abi_version = 1;
    exports->name = "test-convonly";
    exports->version = "1.0";
    exports->provider_count = 1;
    exports->providers = g_providers;
    return NULL;
}
"""


@pytest.fixture(scope="module")
def conv_only_plugin_dir(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    include = os.path.join(REPO, "plugin_api", "include")
    if compiler is None or not os.path.isdir(include):
        pytest.skip("no C compiler or no plugin_api headers to build the test provider")
    directory = tmp_path_factory.mktemp("convonly")
    source = directory / "convonly.c"
    source.write_text(CONV_ONLY_PROVIDER)
    subprocess.run([compiler, "-std=c11", "-shared", "-fPIC", "-I", include, "-o",
                    str(directory / "libtest_convonly.so"), str(source)], check=True)
    return str(directory)


def test_no_fusion_when_the_conv_provider_does_not_run_fused_conv(conv_only_plugin_dir):
    env = tessera.Environment(plugin_path=[conv_only_plugin_dir])
    assert "convonly" in env.providers()
    model, feeds = materialize(CASES["conv_bn_relu"])
    reference, _ = run_at(model, feeds, 0)
    # convonly would run the Conv and does not claim FusedConv: the Conv and the Relu stay apart (the BN still folds,
    # it is a default-domain rewrite); convonly then fails to compile and the CPU provider runs both, unfused.
    session = tessera.InferenceSession(model, providers=["convonly", "cpu"], optimization_level=3, environment=env)
    assert ops_of(session) == ["Conv", "Relu"]
    assert {p["provider"] for p in session.get_partitions()} == {"cpu"}
    assert_same(session.run(None, feeds), reference, "convonly first")
    # With the CPU provider first it fuses as usual.
    session = tessera.InferenceSession(model, providers=["cpu", "convonly"], optimization_level=3, environment=env)
    assert ops_of(session) == [FUSED]
    assert_same(session.run(None, feeds), reference, "cpu first")


@pytest.mark.parametrize("name", ["conv_add_relu", "conv_relu"])
def test_no_fusion_that_would_move_the_activation_to_another_provider(name):
    """providers=[sample, cpu]: sample runs Add and Relu but not Conv, so the Conv runs on the CPU provider and the
    Add/Relu on sample.  Fusing would move the Add and Relu to the CPU provider: the plan must stay as at level 0."""
    samples = os.path.join(os.path.dirname(tessera.library_path), "tessera", "samples")
    if not os.path.isdir(samples):
        pytest.skip(f"no sample provider in {samples}")
    env = tessera.Environment(plugin_path=[samples])
    model, feeds = materialize(CASES[name])
    reference, _ = run_at(model, feeds, 0)

    def placement(session):
        return sorted((p["provider"], strip_fused_domain(op)) for p in session.get_partitions() for op in p["ops"])

    plain = tessera.InferenceSession(model, providers=["sample", "cpu"], optimization_level=0, environment=env)
    assert ("sample", "Relu") in placement(plain) and ("cpu", "Conv") in placement(plain)
    session = tessera.InferenceSession(model, providers=["sample", "cpu"], optimization_level=3, environment=env)
    assert placement(session) == placement(plain)
    assert_same(session.run(None, feeds), reference, "sample + cpu")
    # The CPU provider first runs everything, fused.
    session = tessera.InferenceSession(model, providers=["cpu", "sample"], optimization_level=3, environment=env)
    assert ops_of(session) == CASES[name].extended
    assert_same(session.run(None, feeds), reference, "cpu + sample")


def test_fused_operator_domain():
    """The fused node is in the optimizer's own domain, not in a domain models use (com.microsoft's FusedConv in a
    model is the contrib library's, checked as onnxruntime does)."""
    model, _ = materialize(CASES["conv_relu"])
    (op,) = [op for p in tessera.InferenceSession(model).get_partitions() for op in p["ops"]]
    assert op == "ai.tessera:FusedConv"


# ---- The command line --------------------------------------------------------------------------------------------


def _inspect(path, *args):
    return subprocess.run([CLI, "inspect", str(path), "--json", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not os.path.exists(CLI), reason=f"no tessera command at {CLI}")
def test_cli_inspect_shows_the_fused_plan(tmp_path):
    model, _ = materialize(CASES["mobilenet_inverted_residual"])
    path = tmp_path / "mobilenet_block.onnx"
    onnx.save(model, str(path))

    def ops_in(report):
        return sorted(strip_fused_domain(node["op"]) for p in report["partitions"] for node in p["nodes"])

    result = _inspect(path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert ops_in(report) == [FUSED] * 3
    for level, expected in (("0", original_ops(model)), ("1", ops("Conv", "Clip", "Conv", "Clip", "Conv", "Add")),
                            ("2", [FUSED] * 3), ("3", [FUSED] * 3), ("99", [FUSED] * 3)):
        result = _inspect(path, "--optimization", level)
        assert result.returncode == 0, result.stderr
        assert ops_in(json.loads(result.stdout)) == expected, f"--optimization {level}"

    result = _inspect(path, "--optimization", "5")
    assert result.returncode != 0
    assert "optimization level" in (result.stderr + result.stdout) and "5" in (result.stderr + result.stdout)


# ---- Other CPU code paths ----------------------------------------------------------------------------------------

ISA_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tessera
    sys.path.insert(0, {tests!r})
    import test_graph_fusions as t
    report = {{}}
    for name in {names!r}:
        case = t.CASES[name]
        model, feeds = t.materialize(case)
        reference, _ = t.run_at(model, feeds, 0)
        outputs, got = t.run_at(model, feeds, 3)
        error = max(float(np.max(np.abs(a - e) - (t.ATOL + t.RTOL * np.abs(e)))) for a, e in zip(outputs, reference))
        report[name] = {{"ops": got, "expected": case.extended, "excess": error}}
    print(json.dumps(report))
""")


@pytest.mark.parametrize("isa", ["avx2", "none"])
def test_fused_conv_under_other_instruction_sets(isa):
    """TESSERA_CPU_MAX_ISA caps the CPU provider's GEMM kernels: 'avx2' takes the AVX2 tiles, 'none' the OpenBLAS
    fallback whose epilogue runs after the product.  Read once per process, so each cap runs in a child."""
    names = [n for n in CASES if n not in ("conv_bn", "conv_nobias_bn")]
    script = ISA_SCRIPT.format(tests=os.path.dirname(__file__), names=names)
    env = dict(os.environ, TESSERA_CPU_MAX_ISA=isa)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    problems = {name: r for name, r in report.items() if r["ops"] != r["expected"] or r["excess"] > 0}
    assert not problems, problems


# ---- Prepacked weights are held once ------------------------------------------------------------------------------


def prepacked_model():
    """A Conv whose weights are also read by a second Conv (shared), a MatMul with constant B, and a Conv whose
    weights are a graph output: only the constants every reader copied may be freed."""
    b = Builder(77)
    x = b.input("x", [1, 4, 6, 6])
    w = b.const("shared_w", (b.rng.standard_normal((4, 4, 3, 3)) / 6).astype(np.float32))
    h = b.node("Conv", [x, w], pads=[1, 1, 1, 1])
    h = b.node("Conv", [h, w], pads=[1, 1, 1, 1])
    m = b.const("matmul_b", b.rng.standard_normal((6, 5)).astype(np.float32))
    b.output(b.node("MatMul", [h, m]))
    b.outputs.append(helper.make_tensor_value_info(w, TensorProto.FLOAT, [4, 4, 3, 3]))
    return b, w


def test_prepacked_constants_are_freed_and_results_stay_right(tmp_path):
    b, shared = prepacked_model()
    model = b.model()
    path = tmp_path / "prepacked.onnx"
    onnx.save(model, str(path))
    reference = onnxruntime_outputs(model, b.feeds)
    session = tessera.InferenceSession(str(path), intra_op_threads=2)
    for _ in range(3):  # later runs must not read freed memory
        outputs = session.run(None, b.feeds)
        if reference is not None:
            assert_same(outputs, reference, "prepacked model against onnxruntime")
        np.testing.assert_array_equal(outputs[1], numpy_helper.to_array(
            next(i for i in model.graph.initializer if i.name == shared)))
    if not os.path.exists(CLI):
        pytest.skip(f"no CLI at {CLI}")
    log = subprocess.run([CLI, "run", str(path), "--log-level", "debug"], capture_output=True, text=True)
    assert log.returncode == 0, log.stderr
    # matmul_b (6 x 5 floats) is freed; shared_w, a graph output, stays.
    assert "freed 120 bytes of constants the providers prepacked" in log.stderr


# ---- Per-channel Mul/Add folded into Conv and BatchNormalization ---------------------------------------------------


def channel_affine_model(channel_shape):
    """DenseNet's Caffe-converted shape: Conv -> BN -> Mul(c) -> Add(c) -> Relu, and BN -> Mul -> Add -> Relu."""
    b = Builder(91)
    x = b.input("x", [1, 6, 8, 8])
    h = b.conv(x, 6, 6, pads=[1, 1, 1, 1])
    scale = b.const("scale", b.rng.uniform(0.5, 1.5, channel_shape).astype(np.float32))
    shift = b.const("shift", b.rng.standard_normal(channel_shape).astype(np.float32))
    h = b.node("Relu", [b.node("Add", [shift, b.node("Mul", [h, scale])])])
    h = b.bn(h, 6)
    h = b.node("Add", [b.node("Mul", [scale, h]), shift])
    b.output(b.node("Relu", [h]))
    return b


@pytest.mark.parametrize("channel_shape", [(6, 1, 1), (1, 6, 1, 1), (1,)])
def test_channel_affine_folds_into_conv_and_batchnorm(channel_shape):
    b = channel_affine_model(channel_shape)
    model = b.model()
    reference, _ = run_at(model, b.feeds, 0)
    outputs, basic = run_at(model, b.feeds, 1)
    assert basic == sorted(["Conv", "Relu", "BatchNormalization", "Relu"]), basic
    assert_same(outputs, reference, "level 1 against level 0")
    outputs, extended = run_at(model, b.feeds, 3)
    assert extended == sorted([FUSED, "BatchNormalization", "Relu"]), extended
    assert_same(outputs, reference, "level 3 against level 0")


def test_broadcasting_mul_is_not_folded():
    b = Builder(92)
    x = b.input("x", [1, 6, 4, 4])
    h = b.conv(x, 6, 6, kernel=(1, 1))
    # [6, 4, 1] varies along the height too: not one value per channel.
    b.output(b.node("Mul", [h, b.const("s", b.rng.standard_normal((6, 4, 1)).astype(np.float32))]))
    model = b.model()
    reference, _ = run_at(model, b.feeds, 0)
    outputs, ops_1 = run_at(model, b.feeds, 1)
    assert ops_1 == sorted(["Conv", "Mul"])
    assert_same(outputs, reference, "level 1 against level 0")


# ---- GELU written out with Erf ------------------------------------------------------------------------------------


def erf_gelu_model(variant: str):
    """The Erf GELU as exporters write it; `variant` picks the operand orders and the scale's form."""
    b = Builder(93, opset=17)
    x = b.node("Relu", [b.input("x", [2, 5, 12])])  # x must not be a graph input for the pattern to matter
    if variant == "mul_inverse_sqrt2":
        scaled = b.node("Mul", [b.scalar("inv_sqrt2", float(np.sqrt(0.5))), x])
    elif variant == "not_sqrt2":
        scaled = b.node("Div", [x, b.scalar("almost_sqrt2", 1.4)])
    else:
        scaled = b.node("Div", [x, b.scalar("sqrt2", float(np.sqrt(2.0)))])
    a = b.node("Add", [b.scalar("one", 1.0), b.node("Erf", [scaled])])
    if variant == "half_first":
        y = b.node("Mul", [a, b.node("Mul", [b.scalar("half", 0.5), x])])
    else:
        y = b.node("Mul", [b.node("Mul", [x, a]), b.scalar("half", 0.5)])
    b.output(y)
    return b


@pytest.mark.parametrize("variant", ["div_sqrt2", "mul_inverse_sqrt2", "half_first", "not_sqrt2"])
def test_erf_gelu_fuses_into_one_node(variant):
    b = erf_gelu_model(variant)
    model = b.model()
    reference, ops0 = run_at(model, b.feeds, 0)
    theirs = onnxruntime_outputs(model, b.feeds)
    if theirs is not None:
        assert_same(reference, theirs, "level 0 against onnxruntime")
    _, basic = run_at(model, b.feeds, 1)
    assert basic == ops0, "GELU fusion is an extended-level rewrite"
    outputs, extended = run_at(model, b.feeds, 3)
    if variant == "not_sqrt2":
        assert extended == ops0
    else:
        assert extended == sorted(["Relu", "ai.tessera:Gelu"]), extended
    assert_same(outputs, reference, f"{variant}: level 3 against level 0")


def test_a_weight_shared_by_two_convolutions_is_freed_after_both_copied_it(tmp_path):
    b = Builder(78)
    x = b.input("x", [1, 4, 6, 6])
    w = b.const("shared_w", (b.rng.standard_normal((4, 4, 3, 3)) / 6).astype(np.float32))
    h = b.node("Conv", [b.node("Conv", [x, w], pads=[1, 1, 1, 1]), w], pads=[1, 1, 1, 1])
    b.output(h)
    model = b.model()
    path = tmp_path / "shared.onnx"
    onnx.save(model, str(path))
    reference = onnxruntime_outputs(model, b.feeds)
    session = tessera.InferenceSession(str(path), intra_op_threads=2)
    for _ in range(3):
        outputs = session.run(None, b.feeds)
        if reference is not None:
            assert_same(outputs, reference, "shared weights against onnxruntime")
    if not os.path.exists(CLI):
        pytest.skip(f"no CLI at {CLI}")
    log = subprocess.run([CLI, "run", str(path), "--log-level", "debug"], capture_output=True, text=True)
    assert log.returncode == 0, log.stderr
    assert "freed 576 bytes of constants the providers prepacked" in log.stderr  # 4 x 4 x 3 x 3 floats, once


# ---- Linear layers: MatMul + bias [+ activation] -------------------------------------------------------------------

LINEAR = "ai.tessera:FusedMatMulBias"


def linear_model(width: int, act: str | None, bias_shape=None, opset: int = 17, rows=(2, 9), depth: int = 48,
                 constant_weights: bool = True, bias_first: bool = False):
    """MatMul by a [depth, width] weight, Add of a bias (default [width]) and an optional activation; `act` "ErfGelu"
    writes GELU out with Erf as pre-20 exporters do.  A Relu in front keeps A from being a graph input."""
    b = Builder(width * 7 + depth + len(act or ""), opset)
    x = b.node("Relu", [b.input("x", [*rows, depth])])
    w_value = (b.rng.standard_normal((depth, width)) / np.sqrt(depth)).astype(np.float32)
    w = b.const("w", w_value) if constant_weights else b.input("w_in", [depth, width], w_value)
    bias = b.const("bias", (b.rng.standard_normal(bias_shape or [width]) * 0.5).astype(np.float32))
    product = b.node("MatMul", [x, w])
    y = b.node("Add", [bias, product] if bias_first else [product, bias])
    if act == "ErfGelu":
        e = b.node("Erf", [b.node("Div", [y, b.scalar("sqrt2", float(np.sqrt(2.0)))])])
        y = b.node("Mul", [b.node("Mul", [y, b.node("Add", [e, b.scalar("one", 1.0)])]), b.scalar("half", 0.5)])
    elif act == "GeluTanh":
        y = b.node("Gelu", [y], approximate="tanh")
    elif act == "Clip":
        y = b.node("Clip", [y, b.scalar("lo", -0.2), b.scalar("hi", 0.3)])
    elif act is not None:
        y = b.node(act, [y])
    b.output(y)
    return b


LINEAR_CASES = {
    # name: (builder arguments, expected operators at level 3 besides the leading Relu)
    "bias_only_lane_width": (dict(width=64, act=None), [LINEAR]),
    "bias_first_operand": (dict(width=64, act=None, bias_first=True), [LINEAR]),
    "relu": (dict(width=96, act="Relu"), [LINEAR]),
    "erf_gelu_bert_shape": (dict(width=192, act="ErfGelu", rows=(1, 20)), [LINEAR]),
    "onnx_gelu_tanh": (dict(width=128, act="GeluTanh", opset=20), [LINEAR]),
    "sigmoid_packed_columns_width": (dict(width=40, act="Sigmoid"), [LINEAR]),
    "tanh_1000_wide": (dict(width=1000, act="Tanh", rows=(1, 3), depth=33), [LINEAR]),
    "clip": (dict(width=64, act="Clip"), [LINEAR]),
    "bias_with_leading_ones": (dict(width=64, act="Relu", bias_shape=[1, 1, 64]), [LINEAR]),
    "deep_product": (dict(width=64, act=None, depth=1100, rows=(1, 5)), [LINEAR]),
    # Not fused: a bias that broadcasts over rows, weights that are not constant.
    "full_bias_not_fused": (dict(width=64, act=None, bias_shape=[9, 64]), ["Add", "MatMul"]),
    "runtime_weights_not_fused": (dict(width=64, act="Relu", constant_weights=False), ["Add", "MatMul", "Relu"]),
}


@pytest.mark.parametrize("name", list(LINEAR_CASES))
def test_linear_layer_fuses_and_keeps_results(name):
    arguments, expected = LINEAR_CASES[name]
    b = linear_model(**arguments)
    model = b.model()
    reference, ops0 = run_at(model, b.feeds, 0)
    assert ops0 == original_ops(model)
    theirs = onnxruntime_outputs(model, b.feeds)
    if theirs is not None:
        assert_same(reference, theirs, f"{name}: level 0 against onnxruntime")
    _, basic = run_at(model, b.feeds, 1)
    assert basic == ops0, "the linear-layer fusion is an extended-level rewrite"
    for level in (2, 3):
        outputs, got = run_at(model, b.feeds, level)
        assert got == sorted(["Relu", *expected]), f"{name}: operators at level {level}"
        assert_same(outputs, reference, f"{name}: level {level} against level 0")


def test_linear_layer_under_other_instruction_sets():
    """The fused node on the packed-column (AVX2) and OpenBLAS paths agrees with the unfused graph."""
    b = linear_model(width=64, act="ErfGelu")
    path = os.path.join(os.path.dirname(__file__), "_linear_isa.onnx")
    onnx.save(b.model(), path)
    np.save(path + ".x.npy", b.feeds["x"])
    script = textwrap.dedent(f"""
        import numpy as np, tessera
        x = np.load({path + '.x.npy'!r})
        fused = tessera.InferenceSession({path!r}, optimization_level=3)
        assert any('FusedMatMulBias' in op for p in fused.get_partitions() for op in p['ops'])
        plain = tessera.InferenceSession({path!r}, optimization_level=0)
        np.testing.assert_allclose(fused.run(None, {{'x': x}})[0], plain.run(None, {{'x': x}})[0], rtol={RTOL},
                                   atol={ATOL})
    """)
    try:
        for isa in ("avx2", "none"):
            env = dict(os.environ, TESSERA_CPU_MAX_ISA=isa)
            env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), env.get("PYTHONPATH", "")])
            result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                    timeout=300)
            assert result.returncode == 0, f"{isa}: {result.stderr}"
    finally:
        for p in (path, path + ".x.npy"):
            if os.path.exists(p):
                os.remove(p)
