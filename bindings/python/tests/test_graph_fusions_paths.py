"""Graph fusions through the other ways in: the command line, the CPU provider's other instruction-set levels, weights
held once after prepacking, per-channel affine folds, GELU written out with Erf, and linear layers (MatMul + bias
[+ activation]).  The cases and helpers are in fusion_support.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from model_factory import FLOAT
from onnx import TensorProto, helper, numpy_helper

import tessera
from fusion_support import (
    ATOL,
    Builder,
    CASES,
    CLI,
    FUSED,
    RTOL,
    assert_same,
    conv_bn,
    materialize,
    mobilenet_block,
    onnxruntime_outputs,
    ops,
    original_ops,
    run_at,
    strip_fused_domain,
)


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
    import fusion_support as t
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


_PEAK_SCRIPT = textwrap.dedent("""
    import sys
    import tessera

    def peak_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

    env = tessera.Environment()  # every default plugin: cpu and the image provider (two host providers)
    before = peak_kib()
    session = tessera.InferenceSession(sys.argv[1], environment=env, intra_op_threads=1)
    print(peak_kib() - before, ",".join(sorted({p["provider"] for p in session.get_partitions()})),
          ",".join(env.providers()))
""")


def test_weights_are_freed_while_compiling_beside_other_providers(tmp_path):
    """Eight 16 MiB MatMul weights, packed at session creation: each original is freed as soon as it is packed, so the
    peak holds the packed copies and about one original, not both sets, also when another provider (the image
    provider, which claims none of these nodes) takes part in the session."""
    rng = np.random.default_rng(5)
    n, layers = 2048, 8
    nodes, inits, h = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((n, n)) / n).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"h{i}"]))
        h = f"h{i}"
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, n])], initializer=inits)
    path = tmp_path / "stack.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(tessera.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(path)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    growth_kib, used, loaded = done.stdout.split()
    if "image" not in loaded.split(","):
        pytest.skip("the image provider is not built: only one provider takes part")
    assert used == "cpu"
    weights_kib = layers * n * n * 4 // 1024
    # Held once: the packed copies, one original in flight, the file's bytes while it parses.  Held twice would be
    # at least 2x the weights.
    assert int(growth_kib) < 1.6 * weights_kib, (growth_kib, weights_kib)
