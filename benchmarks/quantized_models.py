"""The quantized benchmark models: what onnxruntime's own tools make of the float32 benchmark models, and a 4-bit
Llama-style decoder (``compare.py --suite quantized``).

* ``<model>-int8-dynamic``: ``onnxruntime.quantization.quantize_dynamic`` (uint8 activations quantized at run time,
  int8 weights) of resnet50, mobilenetv2 and bert.
* ``<model>-int8-static``: ``quantize_static`` in the QDQ format (its default), calibrated on two seeded inputs
  other than the measured one.
* ``decoder-4bit``: ``llm_decoder`` below (the shape of a small Llama) through ``MatMulNBitsQuantizer`` (4 bits,
  blocks of 32), timed on one decoding step after a 128-token cache.

The float32 sources come from models.py (real-size seeded weights); the tools run in benchmarks/.venv with the
pinned onnxruntime.
"""
import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SOURCES = {"resnet50": 50, "mobilenetv2": 2, "bert": 12}
NAMES = tuple(f"{m}-int8-{kind}" for m in SOURCES for kind in ("dynamic", "static")) + ("decoder-4bit",)

DECODER_SHAPE = dict(layers=4, hidden=1024, heads=16, kv_heads=4, ffn=2816, vocab=32000, max_positions=512)
DECODER_PAST = 128


def llm_decoder(seed, layers, hidden, heads, kv_heads, ffn, vocab, max_positions):
    """A Llama-style decoder as onnxruntime-genai's builder writes one: RMS norms (SimplifiedLayerNormalization,
    SkipSimplifiedLayerNormalization), GroupQueryAttention with rotary embedding and a past/present key-value cache
    per layer, a SiLU-gated MLP, MatMul projections (which MatMulNBitsQuantizer turns into MatMulNBits)."""
    rng = np.random.default_rng(seed)
    head = hidden // heads
    nodes, inits = [], []

    def weight(name, shape, scale=None):
        values = rng.standard_normal(shape, dtype=np.float32) * (scale or 1.0 / np.sqrt(shape[0]))
        inits.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def norm_weight(name):
        inits.append(numpy_helper.from_array((1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32), name))
        return name

    inverse_frequency = 1.0 / (10000.0 ** (np.arange(0, head, 2, dtype=np.float64) / head))
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inverse_frequency)
    inits.append(numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_cache"))
    inits.append(numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_cache"))
    nodes.append(helper.make_node("Gather", [weight("embed", (vocab, hidden), 1.0), "input_ids"], ["x0"]))
    graph_inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
                    helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
                    helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    graph_outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", vocab])]
    x = "x0"
    for i in range(layers):
        p = f"layers.{i}."
        cache = ["batch", kv_heads, "past", head]
        present = ["batch", kv_heads, "total", head]
        for kind in ("key", "value"):
            graph_inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, cache))
            graph_outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, present))
        nodes.append(helper.make_node("SimplifiedLayerNormalization", [x, norm_weight(p + "input_norm")],
                                      [p + "h"], axis=-1, epsilon=1e-6))
        for name, width in (("q", hidden), ("k", kv_heads * head), ("v", kv_heads * head)):
            nodes.append(helper.make_node("MatMul", [p + "h", weight(p + name + "_proj", (hidden, width))],
                                          [p + name]))
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            [p + "q", p + "k", p + "v", f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k",
             "total_sequence_length", "cos_cache", "sin_cache"],
            [p + "attn", f"present.{i}.key", f"present.{i}.value"],
            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, do_rotary=1))
        nodes.append(helper.make_node("MatMul", [p + "attn", weight(p + "o_proj", (hidden, hidden))], [p + "o"]))
        nodes.append(helper.make_node("SkipSimplifiedLayerNormalization",
                                      [p + "o", x, norm_weight(p + "post_attention_norm")],
                                      [p + "h2", "", "", p + "residual"], domain="com.microsoft", epsilon=1e-6))
        nodes.append(helper.make_node("MatMul", [p + "h2", weight(p + "gate_proj", (hidden, ffn))], [p + "gate"]))
        nodes.append(helper.make_node("MatMul", [p + "h2", weight(p + "up_proj", (hidden, ffn))], [p + "up"]))
        nodes.append(helper.make_node("Sigmoid", [p + "gate"], [p + "gate_sigmoid"]))
        nodes.append(helper.make_node("Mul", [p + "gate", p + "gate_sigmoid"], [p + "silu"]))
        nodes.append(helper.make_node("Mul", [p + "silu", p + "up"], [p + "act"]))
        nodes.append(helper.make_node("MatMul", [p + "act", weight(p + "down_proj", (ffn, hidden))], [p + "down"]))
        nodes.append(helper.make_node("Add", [p + "residual", p + "down"], [p + "out"]))
        x = p + "out"
    nodes.append(helper.make_node("SimplifiedLayerNormalization", [x, norm_weight("final_norm")], ["final"],
                                  axis=-1, epsilon=1e-6))
    nodes.append(helper.make_node("MatMul", ["final", weight("lm_head", (hidden, vocab))], ["logits"]))
    graph = helper.make_graph(nodes, "decoder", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model


def decoder_feeds(rng, shape, batch, past, sequence):
    """One step: `sequence` new tokens after a cache of `past` (random values: any cache is a valid state)."""
    head = shape["hidden"] // shape["heads"]
    feeds = {"input_ids": rng.integers(0, shape["vocab"], (batch, sequence), dtype=np.int64),
             "seqlens_k": np.full(batch, past + sequence - 1, np.int32),
             "total_sequence_length": np.array(past + sequence, np.int32)}
    for i in range(shape["layers"]):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (batch, shape["kv_heads"], past, head), dtype=np.float32)
    return feeds


class _Calibration:
    """quantize_static's data reader over a list of feeds."""

    def __new__(cls, feeds):
        from onnxruntime.quantization import CalibrationDataReader

        class Reader(CalibrationDataReader):
            def __init__(self):
                self._feeds = iter(feeds)

            def get_next(self):
                return next(self._feeds, None)
        return Reader()


def build(name, source_path, source_inputs, target):
    """Writes quantized model `name` to `target`.  source_inputs(seed_offset) gives the source model's inputs."""
    from onnxruntime import quantization
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    if name.endswith("-int8-dynamic"):
        quantization.quantize_dynamic(str(source_path), str(target))
    elif name.endswith("-int8-static"):
        calibration = [source_inputs(1), source_inputs(2)]
        quantization.quantize_static(str(source_path), str(target), _Calibration(calibration),
                                     quant_format=quantization.QuantFormat.QDQ)
    else:
        raise ValueError(f"unknown quantized model {name}")


def build_decoder(target, seed=7):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(llm_decoder(seed, **DECODER_SHAPE), bits=4, block_size=32, is_symmetric=False)
    quantizer.process()
    quantizer.model.save_model_to_file(str(target))


def decoder_inputs(seed_offset=0):
    return decoder_feeds(np.random.default_rng(1007 + seed_offset), DECODER_SHAPE, 1, DECODER_PAST, 1)
