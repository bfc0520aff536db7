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

import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from model_factory import FLOAT, tensor
from onnx import TensorProto, helper, numpy_helper

import tessera
from fusion_support import (
    Builder,
    CASES,
    Case,
    F,
    FUSED,
    REPO,
    assert_same,
    materialize,
    onnxruntime_outputs,
    ops,
    ops_of,
    original_ops,
    residual,
    run_at,
    strip_fused_domain,
)


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


def _bn_relu_pool(op, **attrs):
    def build():
        b = Builder(87)
        y = b.node("Relu", [b.bn(b.input("x", [1, 4, 8, 8]), 4)])
        b.output(b.node(op, [y], **attrs))
        return b
    return build


def _bn_relu_conv_and_output():
    b = Builder(88)
    y = b.node("Relu", [b.bn(b.input("x", [1, 4, 8, 8]), 4)])
    b.output(b.conv(y, 4, 4, pads=[1, 1, 1, 1]))
    b.output(y)
    return b


def _bn_read_by_conv_and_relu():
    b = Builder(89)
    y = b.bn(b.input("x", [1, 4, 8, 8]), 4)
    b.output(b.conv(y, 4, 4, pads=[1, 1, 1, 1]))
    b.output(b.node("Relu", [y]))
    return b


def _bn_relu_conv_unknown_channels():
    b = Builder(90)
    b.inputs.append(tensor("x", FLOAT, [1, "c", 8, 8]))
    b.feeds["x"] = b.rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    b.output(b.conv(b.node("Relu", [b.bn("x", 4)]), 4, 4, pads=[1, 1, 1, 1]))
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
    # A normalization stays one unless convolutions alone read what it (and its activation) make, and its input's
    # channel count is known.
    "bn_relu_read_by_global_pool": Case(_bn_relu_pool("GlobalAveragePool"),
                                        ops("BatchNormalization", "Relu", "GlobalAveragePool"),
                                        ops("BatchNormalization", "Relu", "GlobalAveragePool")),
    "bn_relu_read_by_max_pool": Case(_bn_relu_pool("MaxPool", kernel_shape=[2, 2]),
                                     ops("BatchNormalization", "Relu", "MaxPool"),
                                     ops("BatchNormalization", "Relu", "MaxPool")),
    "bn_relu_read_by_conv_and_graph_output": Case(_bn_relu_conv_and_output, ops("BatchNormalization", "Relu", "Conv"),
                                                  ops("BatchNormalization", "Relu", "Conv")),
    "bn_read_by_conv_and_relu": Case(_bn_read_by_conv_and_relu, ops("BatchNormalization", "Conv", "Relu"),
                                     ops("BatchNormalization", "Conv", "Relu")),
    "bn_relu_conv_of_unknown_channels": Case(_bn_relu_conv_unknown_channels,
                                             ops("BatchNormalization", "Relu", "Conv"),
                                             ops("BatchNormalization", "Relu", "Conv")),
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


def _pointwise_conv_then_pool(kernel=(1, 1), pool_attrs=None, read_twice=False, group=1, seed=93):
    """x [1, 8, 12, 12] -> Conv (8 -> 4 filters, `kernel`) -> AveragePool (2x2 stride 2 unless `pool_attrs`)."""
    b = Builder(seed)
    pads = [k // 2 for k in kernel] * 2
    c = b.conv(b.input("x", [1, 8, 12, 12]), 8, 4, kernel=kernel, group=group, pads=pads)
    attrs = pool_attrs if pool_attrs is not None else {"kernel_shape": [2, 2], "strides": [2, 2]}
    b.output(b.node("AveragePool", [c], **attrs))
    if read_twice:
        b.output(c)
    return b


POOL_SWAPS = {
    # (builder, whether the pool moves before the convolution)
    "pointwise": (lambda: _pointwise_conv_then_pool(), True),
    "pointwise_grouped": (lambda: _pointwise_conv_then_pool(group=2, seed=94), True),
    "pointwise_3x3_pool_stride_1": (lambda: _pointwise_conv_then_pool(pool_attrs={"kernel_shape": [3, 3]}, seed=95),
                                    True),
    "3x3_conv": (lambda: _pointwise_conv_then_pool(kernel=(3, 3), seed=96), False),
    "padded_pool": (lambda: _pointwise_conv_then_pool(pool_attrs={"kernel_shape": [2, 2], "strides": [2, 2],
                                                                  "pads": [1, 1, 1, 1]}, seed=97), False),
    "ceil_mode_pool": (lambda: _pointwise_conv_then_pool(pool_attrs={"kernel_shape": [2, 2], "strides": [2, 2],
                                                                     "ceil_mode": 1}, seed=98), False),
    "conv_output_read_twice": (lambda: _pointwise_conv_then_pool(read_twice=True, seed=99), False),
}


@pytest.mark.parametrize("name", list(POOL_SWAPS))
def test_average_pool_moves_before_a_pointwise_convolution(tmp_path, name):
    """AveragePool(Conv 1x1(x)) = Conv 1x1(AveragePool(x)) where the pool averages whole windows
    (core/optimizer/pool_before_pointwise_conv.cc): the saved optimized graph pools first exactly where that holds,
    and the results agree with level 0 and with onnxruntime."""
    build, moves = POOL_SWAPS[name]
    model, feeds = materialize(Case(build, [], []))
    reference, _ = run_at(model, feeds, 0)
    theirs = onnxruntime_outputs(model, feeds)
    if theirs is not None:
        assert_same(reference, theirs, f"{name}: level 0 against onnxruntime")
    path = tmp_path / "optimized.onnx"
    outputs = tessera.InferenceSession(model, optimized_model_filepath=str(path)).run(None, feeds)
    assert_same(outputs, reference, f"{name}: optimized against level 0")
    order = [n.op_type for n in onnx.load(str(path)).graph.node if n.op_type in ("AveragePool", "Conv")]
    assert order == (["AveragePool", "Conv"] if moves else ["Conv", "AveragePool"]), order


@pytest.mark.parametrize("name", ["densenet_layer_blocked", "densenet_layer_taken_over"])
def test_normalization_as_convolution_rounds_as_the_normalization(name):
    """Where the CPU provider runs the rewritten normalization blocked (its 1x1 depthwise rows, alone or under the
    convolution that takes them over), the results are those of the BatchNormalization kernel bit for bit: one ulp
    more or less would move the integers of a DynamicQuantizeLinear downstream."""
    model, feeds = materialize(CASES[name])
    kept, ops1 = run_at(model, feeds, 1)
    rewritten, ops3 = run_at(model, feeds, 3)
    assert "BatchNormalization" in ops1 and "BatchNormalization" not in ops3
    for a, b in zip(kept, rewritten):
        np.testing.assert_array_equal(a, b)
