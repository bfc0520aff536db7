"""Scaled dot-product attention written out as exporters write it (head split by Reshape + Transpose, MatMul, scale,
additive mask, Softmax, MatMul, heads merged) becomes one ai.tessera:Attention at the extended level
(core/optimizer/fuse_attention.cc), giving what the separate nodes give, and onnxruntime's outputs; patterns that do
not mean the same stay as they are.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusion_support import Builder, assert_same, onnxruntime_outputs, original_ops, run_at

ATTENTION = "ai.tessera:Attention"


def attention_model(batch=2, seq=7, kv_seq=None, heads=3, dim=8, v_dim=None, scale="div", mask="row",
                    key_form="0231", merge=(0, 0, -1), split_q=(0, 0), opset=17, seed=101, dynamic=False):
    """x [batch, seq, heads * dim] projected to q, k, v (MatMul + bias) and the attention between them, written out.

    scale: "div" (scores / sqrt(dim)), "mul" (sqrt(dim)^-1 * scores) or "none" (no scale on the scores: a pattern
    that is not fused).  mask: None, "row" ([batch, 1, 1, kv]), "full" ([batch, heads, seq, kv]) or "wide" (a mask
    that broadcasts the scores up: [2 * batch, heads, seq, kv]; not fused).  key_form: "0231" (one
    Transpose) or "two" ([0,2,1,3] then [0,1,3,2]).  kv_seq: cross attention (k and v from a second input).
    """
    kv_seq = kv_seq or seq
    v_dim = v_dim or dim
    b = Builder(seed, opset=opset)
    hidden = heads * dim
    x_shape = ["B", "S", hidden] if dynamic else [batch, seq, hidden]
    b.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape))
    b.feeds["x"] = b.rng.standard_normal((batch, seq, hidden)).astype(np.float32)
    x = b.node("Relu", ["x"])  # so that q, k and v are made inside the graph
    if kv_seq != seq:
        m = b.input("memory", [batch, kv_seq, hidden])
    else:
        m = x

    def project(src, width):
        w = b.const("w", (b.rng.standard_normal((hidden, width)) / np.sqrt(hidden)).astype(np.float32))
        bias = b.const("bias", (b.rng.standard_normal(width) * 0.1).astype(np.float32))
        return b.node("Add", [b.node("MatMul", [src, w]), bias])

    def split(value, d, leading):
        shape = b.const("split", np.array([*leading, heads, d], np.int64))
        return b.node("Reshape", [value, shape])

    q = b.node("Transpose", [split(project(x, hidden), dim, split_q)], perm=[0, 2, 1, 3])
    k_split = split(project(m, hidden), dim, (0, 0))
    if key_form == "two":
        k = b.node("Transpose", [b.node("Transpose", [k_split], perm=[0, 2, 1, 3])], perm=[0, 1, 3, 2])
    else:
        k = b.node("Transpose", [k_split], perm=[0, 2, 3, 1])
    v = b.node("Transpose", [split(project(m, heads * v_dim), v_dim, (0, 0))], perm=[0, 2, 1, 3])
    scores = b.node("MatMul", [q, k])
    if scale != "none":
        if scale == "div":
            scores = b.node("Div", [scores, b.scalar("root", float(np.sqrt(dim)))])
        else:
            scores = b.node("Mul", [b.scalar("inverse_root", float(1 / np.sqrt(dim))), scores])
    if mask is not None:
        shape = {"row": [batch, 1, 1, kv_seq], "full": [batch, heads, seq, kv_seq],
                 "wide": [2 * batch, heads, seq, kv_seq]}[mask]
        keep = b.rng.random(shape) > 0.3
        b.feeds["mask"] = np.where(keep, 0.0, -10000.0).astype(np.float32)
        declared = ["B", 1, 1, "S"] if dynamic and mask == "row" else shape
        b.inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, declared))
        mask_name = "mask"
        scores = b.node("Add", [scores, mask_name] if mask != "full" else [mask_name, scores])
    probs = b.node("Softmax", [scores], axis=-1)
    context = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [context, b.const("merge", np.array(merge, np.int64))])
    b.output(b.node("Relu", [merged]))
    return b


def check(b, fused: bool):
    model = b.model()
    reference, ops0 = run_at(model, b.feeds, 0)
    theirs = onnxruntime_outputs(model, b.feeds)
    if theirs is not None:
        assert_same(reference, theirs, "level 0 against onnxruntime")
    outputs, ops3 = run_at(model, b.feeds, 3)
    assert (ATTENTION in ops3) == fused, ops3
    if fused:
        assert "Softmax" not in ops3 and "Transpose" not in ops3, ops3
        scales = lambda ops: ops.count("Div") + ops.count("Mul")  # noqa: E731
        assert scales(ops3) == scales(ops0) - 1, (ops0, ops3)  # the scores' scale went into the operator
    assert_same(outputs, reference, "level 3 against level 0")
    return ops3


@pytest.mark.parametrize("case", [
    dict(),
    dict(scale="mul"),
    dict(mask=None),
    dict(mask="full"),
    dict(key_form="two"),
    dict(merge=(0, -1, 24)),
    dict(split_q=(2, 7), merge=(2, 7, 24)),
    dict(kv_seq=5),
    dict(v_dim=4, merge=(0, 0, 12)),
    dict(batch=1, seq=33, heads=4, dim=16),
    dict(dynamic=True),
])
def test_written_out_attention_becomes_one_node(case):
    ops3 = check(attention_model(**case), fused=True)
    assert ops3.count(ATTENTION) == 1


@pytest.mark.parametrize("case", [
    dict(scale="none"),            # no scale on the scores
    dict(batch=1, mask="wide"),    # the mask broadcasts the scores up (a batch of 2 from 1)
    dict(key_form="0213"),         # K not transposed for the product: a different operation
])
def test_patterns_that_differ_stay_apart(case):
    if case.get("key_form") == "0213":
        # Q K'^T with K' = Transpose([0,2,1,3]) of K is shape-incompatible in general; with dim == seq it runs.
        b = attention_model(seq=8, dim=8, heads=2, key_form="0231")
        model = b.model()
        for node in model.graph.node:
            if node.op_type == "Transpose" and list(node.attribute[0].ints) == [0, 2, 3, 1]:
                node.attribute[0].ints[:] = [0, 2, 1, 3]
        b.model = lambda model=model: model
        check(b, fused=False)
        return
    check(attention_model(**case), fused=False)


def test_a_mask_computed_by_a_mul_is_told_from_the_scaled_scores():
    # The mask [batch, 1, 1, kv] = (1 - keep) * -10000 is a Mul too, as BERT exporters write it.
    b = attention_model(mask=None)
    model = b.model()
    keep = b.rng.random((2, 1, 1, 7)) > 0.3
    b.feeds["keep"] = keep.astype(np.float32)
    model.graph.input.append(helper.make_tensor_value_info("keep", TensorProto.FLOAT, [2, 1, 1, 7]))
    nodes = list(model.graph.node)
    softmax = next(i for i, n in enumerate(nodes) if n.op_type == "Softmax")
    scaled = nodes[softmax].input[0]
    model.graph.initializer.extend([numpy_helper.from_array(np.array(1.0, np.float32), "one_"),
                                    numpy_helper.from_array(np.array(-10000.0, np.float32), "big_")])
    extra = [helper.make_node("Sub", ["one_", "keep"], ["inverse_keep"]),
             helper.make_node("Mul", ["inverse_keep", "big_"], ["mask_"]),
             helper.make_node("Add", [scaled, "mask_"], ["masked_"])]
    nodes[softmax].input[0] = "masked_"
    del model.graph.node[:]
    model.graph.node.extend(nodes[:softmax] + extra + nodes[softmax:])
    b.model = lambda model=model: model
    check(b, fused=True)


def test_keys_of_another_batch_keep_the_nodes():
    # Keys and values of batch 1 against queries of batch 2: the written-out products broadcast them.
    b = attention_model(kv_seq=5)
    b.feeds["memory"] = b.feeds["memory"][:1]
    model = b.model()
    for value in model.graph.input:
        if value.name == "memory":
            value.type.tensor_type.shape.dim[0].dim_value = 1
    b.model = lambda model=model: model
    check(b, fused=False)


def test_an_intermediate_read_elsewhere_keeps_the_nodes():
    b = attention_model()
    model = b.model()
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    model.graph.output.append(helper.make_tensor_value_info(softmax.output[0], TensorProto.FLOAT, None))
    b.model = lambda model=model: model
    ops3 = check(b, fused=False)
    assert sorted(original_ops(model)).count("Softmax") == ops3.count("Softmax")
