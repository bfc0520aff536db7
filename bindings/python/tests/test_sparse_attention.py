"""com.microsoft SparseAttention (plugins/cpu/kernels/contrib/sparse_attention.cc) as a one-node model, against
onnxruntime's CPU provider.

onnxruntime's CPU kernel only runs with past_key/past_value sharing their buffers with present_key/present_value,
so it runs here through IO binding with one OrtValue bound as both; Tessera returns present as a new tensor, which
must equal what onnxruntime left in the shared buffer (the new tokens written in, every other position untouched).

Covered on seeded random values: the prompt (S == total_sequence_length), token generation (S == 1) and a multi-token
step after a cache, batch entries with different key_total_sequence_lengths, grouped heads (num_heads a multiple of
kv_num_heads), packed QKV, rotary embedding off / half / interleaved / partial, one, two and four layouts mixing
sparse, fully causal and dense block rows, a block row listing nothing, an explicit scale, and float16.

Tolerances: float32 within 1e-5 (both sides compute the same products and softmax in float; only the summation
order of the GEMMs and the exp approximation differ, ~1e-7 here); float16 within 2e-3 (one float16 ulp near 1).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(np.int32): TensorProto.INT32}


def block_layouts(rng, count, max_blocks, kinds):
    """CSR block_row_indices (count, max_blocks + 1) and block_col_indices (count, max_nnz) of lower-triangular
    layouts: 'random' (the diagonal and about half the earlier blocks), 'local' (diagonal, its neighbour and every
    third block, as Phi-3-small's vertical stride), 'dense' (all of them), 'holes' (random, some rows empty)."""
    masks = []
    for layout in range(count):
        kind = kinds[layout % len(kinds)]
        mask = np.zeros((max_blocks, max_blocks), bool)
        for r in range(max_blocks):
            for c in range(r + 1):
                if kind == "dense":
                    mask[r, c] = True
                elif kind == "local":
                    mask[r, c] = r - c <= 1 or c % 3 == 0
                else:
                    mask[r, c] = c == r or rng.random() < 0.5
            if kind == "holes" and r % 3 == 1:
                mask[r, :] = False
        masks.append(mask)
    max_nnz = max(int(m.sum()) for m in masks)
    rows = np.zeros((count, max_blocks + 1), np.int32)
    cols = np.zeros((count, max_nnz), np.int32)
    for layout, mask in enumerate(masks):
        rows[layout, 1:] = np.cumsum(mask.sum(axis=1))
        picked = np.nonzero(mask)[1]
        cols[layout, : len(picked)] = picked
    return rows, cols


def make_case(rng, *, batch, seq, lengths, heads, kv_heads, head, block, max_blocks, layouts, kinds,
              cache=None, packed=False, rotary=None, dtype=np.float32, scale=None):
    """The node's inputs and attributes.  lengths: key_total_sequence_lengths (total_sequence_length is their
    maximum); rotary: None, or (rotary_dim, interleaved)."""
    total = max(lengths)
    cache = cache or max_blocks * block
    rand = lambda *shape: rng.standard_normal(shape).astype(dtype)
    rows, cols = block_layouts(rng, layouts, max_blocks, kinds)
    inputs = {}
    if packed:
        inputs["query"] = rand(batch, seq, (heads + 2 * kv_heads) * head)
    else:
        inputs["query"] = rand(batch, seq, heads * head)
        inputs["key"] = rand(batch, seq, kv_heads * head)
        inputs["value"] = rand(batch, seq, kv_heads * head)
    inputs["past_key"] = rand(batch, kv_heads, cache, head)
    inputs["past_value"] = rand(batch, kv_heads, cache, head)
    inputs["block_row_indices"] = rows
    inputs["block_col_indices"] = cols
    inputs["total_sequence_length"] = np.array([total], np.int32)
    inputs["key_total_sequence_lengths"] = np.array(lengths, np.int32)
    attrs = dict(num_heads=heads, kv_num_heads=kv_heads, sparse_block_size=block)
    if scale is not None:
        attrs["scale"] = scale
    if rotary is not None:
        rotary_dim, interleaved = rotary
        angles = np.arange(cache)[:, None] * (10000.0 ** (-np.arange(rotary_dim // 2) * 2.0 / rotary_dim))[None]
        inputs["cos_cache"] = np.cos(angles).astype(dtype)
        inputs["sin_cache"] = np.sin(angles).astype(dtype)
        attrs.update(do_rotary=1, rotary_interleaved=int(interleaved))
    return inputs, attrs


ORDER = ["query", "key", "value", "past_key", "past_value", "block_row_indices", "block_col_indices",
         "total_sequence_length", "key_total_sequence_lengths", "cos_cache", "sin_cache"]


def model_of(inputs, attrs):
    names = [n if n in inputs else "" for n in ORDER]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("SparseAttention", names, ["output", "present_key", "present_value"], domain=MS, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, ELEM[inputs[n].dtype], list(inputs[n].shape)) for n in names if n]
    dtype = ELEM[inputs["query"].dtype]
    outputs = [helper.make_tensor_value_info(n, dtype, None) for n in ("output", "present_key", "present_value")]
    graph = helper.make_graph([node], "sparse_attention", graph_inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=9)


def run_onnxruntime(model, inputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    shared, buffers = {}, {}  # the OrtValues point into the numpy buffers, which must outlive the run
    for name, value in inputs.items():
        if name in ("past_key", "past_value"):
            buffers[name] = value.copy()
            shared[name] = ort.OrtValue.ortvalue_from_numpy(buffers[name])
            binding.bind_ortvalue_input(name, shared[name])
        else:
            binding.bind_cpu_input(name, value)
    binding.bind_output("output")
    binding.bind_ortvalue_output("present_key", shared["past_key"])
    binding.bind_ortvalue_output("present_value", shared["past_value"])
    session.run_with_iobinding(binding)
    return [binding.get_outputs()[0].numpy(), buffers["past_key"], buffers["past_value"]]


def run_tessera(model, inputs):
    session = tessera.InferenceSession(model, providers=["cpu"], strict=True)
    (partition,) = session.get_partitions()
    assert partition["ops"] == [f"{MS}:SparseAttention"]
    return session.run(None, inputs)


def onnxruntime_reference(attrs, inputs):
    """onnxruntime's outputs, per batch entry where key_total_sequence_lengths differ from total_sequence_length:
    its CPU kernel writes each head's probabilities at a stride of total_sequence_length but reads them back at
    the entry's own length, so only entries whose length is the total come out right in a mixed batch.  Each entry
    alone, with the total set to its length, is the operator's meaning for it."""
    lengths, total = inputs["key_total_sequence_lengths"], int(inputs["total_sequence_length"][0])
    if inputs["query"].shape[1] == total or all(lengths == total):
        return run_onnxruntime(model_of(inputs, attrs), inputs)
    per_entry = []
    for b, length in enumerate(lengths):
        entry = {name: (value[b : b + 1] if name in BATCHED else value) for name, value in inputs.items()}
        entry["total_sequence_length"] = np.array([length], np.int32)
        per_entry.append(run_onnxruntime(model_of(entry, attrs), entry))
    return [np.concatenate(parts) for parts in zip(*per_entry)]


BATCHED = {"query", "key", "value", "past_key", "past_value", "key_total_sequence_lengths"}


def check(inputs, attrs):
    model = model_of(inputs, attrs)
    ours, theirs = run_tessera(model, inputs), onnxruntime_reference(attrs, inputs)
    dtype = inputs["query"].dtype
    tol = 2e-3 if dtype == np.float16 else 1e-5
    for name, a, b in zip(("output", "present_key", "present_value"), ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol, err_msg=name)
    return ours


CASES = {
    # name: make_case arguments beyond the generator
    "prompt": dict(batch=2, seq=24, lengths=[24, 24], heads=4, kv_heads=2, head=16, block=8, max_blocks=5,
                   layouts=2, kinds=["random", "local"]),
    "prompt_one_layout_mha": dict(batch=1, seq=40, lengths=[40], heads=2, kv_heads=2, head=8, block=4, max_blocks=12,
                                  layouts=1, kinds=["random"]),
    "prompt_rotary": dict(batch=2, seq=33, lengths=[33, 33], heads=4, kv_heads=1, head=32, block=16, max_blocks=3,
                          layouts=2, kinds=["local", "random"], rotary=(32, False)),
    "prompt_rotary_interleaved_partial": dict(batch=1, seq=17, lengths=[17], heads=6, kv_heads=3, head=32, block=4,
                                              max_blocks=6, layouts=2, kinds=["random", "dense"],
                                              rotary=(16, True)),
    "prompt_packed": dict(batch=2, seq=20, lengths=[20, 20], heads=4, kv_heads=2, head=16, block=4, max_blocks=6,
                          layouts=2, kinds=["random", "holes"], packed=True),
    "prompt_packed_rotary": dict(batch=1, seq=12, lengths=[12], heads=2, kv_heads=1, head=16, block=4, max_blocks=4,
                                 layouts=2, kinds=["local", "random"], packed=True, rotary=(16, True)),
    "decode": dict(batch=2, seq=1, lengths=[30, 19], heads=4, kv_heads=2, head=16, block=8, max_blocks=4,
                   layouts=2, kinds=["random", "local"], cache=40),
    "decode_rotary": dict(batch=2, seq=1, lengths=[9, 27], heads=8, kv_heads=2, head=16, block=4, max_blocks=8,
                          layouts=4, kinds=["random", "local", "dense", "holes"], rotary=(16, False)),
    "decode_packed_rotary_interleaved": dict(batch=2, seq=1, lengths=[16, 5], heads=4, kv_heads=4, head=32, block=8,
                                             max_blocks=3, layouts=2, kinds=["local", "random"], packed=True,
                                             rotary=(32, True)),
    "continuation": dict(batch=2, seq=3, lengths=[21, 14], heads=4, kv_heads=2, head=16, block=4, max_blocks=6,
                         layouts=2, kinds=["random", "holes"], rotary=(16, False)),
    "scale": dict(batch=1, seq=1, lengths=[13], heads=2, kv_heads=1, head=8, block=2, max_blocks=8, layouts=2,
                  kinds=["random", "local"], scale=0.3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sparse_attention_float32(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    inputs, attrs = make_case(rng, **CASES[name])
    check(inputs, attrs)


@pytest.mark.parametrize("name", ["prompt", "decode_rotary", "prompt_packed_rotary", "continuation"])
def test_sparse_attention_float16(name):
    rng = np.random.default_rng(7 + sum(map(ord, name)))
    inputs, attrs = make_case(rng, dtype=np.float16, **CASES[name])
    check(inputs, attrs)


def test_sparse_attention_decode_after_prompt_matches_one_longer_prompt():
    """The cache a prompt leaves, then one decode step, gives the last row of a prompt one token longer."""
    rng = np.random.default_rng(11)
    spec = dict(batch=1, heads=4, kv_heads=2, head=16, block=4, max_blocks=5, layouts=2, kinds=["random", "local"],
                rotary=(16, False))
    full, attrs = make_case(rng, seq=13, lengths=[13], **spec)
    longer = run_tessera(model_of(full, attrs), full)
    step = {k: v for k, v in full.items()}
    for name in ("query", "key", "value"):
        step[name] = full[name][:, :12]
    step["total_sequence_length"] = np.array([12], np.int32)
    step["key_total_sequence_lengths"] = np.array([12], np.int32)
    _, past_key, past_value = run_tessera(model_of(step, attrs), step)
    step = dict(step, past_key=past_key, past_value=past_value)
    for name in ("query", "key", "value"):
        step[name] = full[name][:, 12:]
    step["total_sequence_length"] = np.array([13], np.int32)
    step["key_total_sequence_lengths"] = np.array([13], np.int32)
    out, present_key, _ = run_tessera(model_of(step, attrs), step)
    np.testing.assert_allclose(out[0, 0], longer[0][0, 12], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(present_key[:, :, :13], longer[1][:, :, :13], rtol=1e-6, atol=1e-6)


def test_sparse_attention_declines_bad_layouts():
    rng = np.random.default_rng(3)
    inputs, attrs = make_case(rng, **CASES["decode"])
    inputs["block_col_indices"] = inputs["block_col_indices"] + 7  # blocks past max_blocks
    session = tessera.InferenceSession(model_of(inputs, attrs), providers=["cpu"], strict=True)
    with pytest.raises(Exception, match="SparseAttention: block_col_indices"):
        session.run(None, inputs)


def test_sparse_attention_output_shape_is_inferred():
    """Tessera's contrib schema types the output: a FastGelu after it whose bias is one too long is declined at
    session creation, naming the inferred hidden size (num_heads * head_size of a packed query)."""
    rng = np.random.default_rng(5)
    inputs, attrs = make_case(rng, **CASES["prompt_packed"])
    model = model_of(inputs, attrs)
    model.graph.node.append(helper.make_node("FastGelu", ["output", "bias"], ["y"], domain=MS))
    model.graph.output.remove(model.graph.output[0])  # "output" only feeds FastGelu: its shape is the inferred one
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    model.graph.input.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [4 * 16 + 1]))
    with pytest.raises(tessera.TesseraError) as info:
        tessera.InferenceSession(model, providers=["cpu"], strict=True)
    assert "the input's last dimension 64" in info.value.message
