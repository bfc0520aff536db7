"""The benchmark models, built deterministically with real-size random weights, and their inputs.

Every weight is an initializer holding seeded random numbers of the real size.  Weights produced at run time by
ConstantOfShape (as in the ONNX "light" test models) are never benchmarked: runtimes fold them into constants of one
value, and an earlier table timed exactly that.

* resnet50, densenet121, squeezenet: the architectures of ``light/light_*.onnx`` from the ONNX backend data
  (``TESSERA_BACKEND_DATA``, default ``../shared/onnx-backend-data``), each ConstantOfShape weight replaced by an
  initializer of its shape, initialized by the role of its consumer (Conv weight, BatchNormalization mean, ...).
* mobilenetv2: built here, shaped as torchvision's model exports at opset 13 (Conv + BatchNormalization + Clip).
* bert: a BERT-base encoder built here, shaped as torch.onnx exports HF BertModel at opset 17.

Models are cached under ``<cache>/v<VERSION>/``; bump VERSION whenever a builder changes what it writes.
"""
import json
import os
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import quantized_models

VERSION = 1
ROOT = pathlib.Path(__file__).resolve().parent.parent
BACKEND_DATA = pathlib.Path(os.environ.get("TESSERA_BACKEND_DATA", ROOT.parent / "shared" / "onnx-backend-data"))
ALL = ("resnet50", "mobilenetv2", "bert", "densenet121", "squeezenet")
CONV_MODELS = ("resnet50", "mobilenetv2", "densenet121", "squeezenet")
SEEDS = {"resnet50": 50, "mobilenetv2": 2, "bert": 12, "densenet121": 121, "squeezenet": 11}


# ---- Weight initialization by role ---------------------------------------------------------------------------------

def init_weight(rng, role, shape, dtype=np.float32):
    """Random values for one weight; the scales keep activations finite and non-degenerate through deep nets."""
    shape = tuple(int(d) for d in shape)
    normal = lambda: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    if role == "conv_w":  # He-normal: keeps the ReLU activations' second moment roughly constant layer to layer
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        values = normal() * np.sqrt(2.0 / fan_in)
    elif role == "bias":
        values = 0.01 * normal()
    elif role in ("bn_scale", "scale"):
        values = 1.0 + 0.1 * normal()
    elif role in ("bn_bias", "bn_mean", "shift"):
        values = 0.1 * normal()
    elif role == "bn_var":
        values = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    else:
        raise ValueError(f"no initialization rule for role {role!r}")
    return values.astype(dtype)


def init_fc(rng, shape, fan_in, dtype=np.float32):
    """Gemm/MatMul weight: std sqrt(1/fan_in) (no ReLU gain: the output is logits)."""
    return (rng.standard_normal(tuple(shape), dtype=np.float32) * np.sqrt(1.0 / fan_in)).astype(dtype)


# ---- Light models: ConstantOfShape weights -> initializers -------------------------------------------------------

def _consumers(graph):
    found = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            found.setdefault(name, []).append((node, index))
    return found


def _role(name, consumers):
    """(role, layout) of a weight from the node that reads it; Unsqueeze (DenseNet's affine) is followed.

    layout is only set for Gemm/MatMul weights: 'transB' ([out, in]) or 'plain' ([in, out]), for the fan-in."""
    uses = consumers.get(name, [])
    if not uses:
        return None, None
    node, index = uses[0]
    if node.op_type == "Unsqueeze":  # DenseNet: bn_w / bn_b go through Unsqueeze into a channel Mul / Add
        return _role(node.output[0], consumers)[0], None
    table = {("Conv", 1): "conv_w", ("Conv", 2): "bias", ("Gemm", 2): "bias",
             ("BatchNormalization", 1): "bn_scale", ("BatchNormalization", 2): "bn_bias",
             ("BatchNormalization", 3): "bn_mean", ("BatchNormalization", 4): "bn_var",
             ("Mul", 1): "scale", ("Mul", 0): "scale", ("Add", 1): "shift", ("Add", 0): "shift"}
    if (node.op_type, index) in table:
        return table[(node.op_type, index)], None
    if node.op_type in ("Gemm", "MatMul") and index == 1:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        return "fc_w", ("transB" if trans_b else "plain")
    raise ValueError(f"{name}: no initialization rule for input {index} of {node.op_type}")


def from_light(name, seed):
    """The light model's architecture with every ConstantOfShape-produced weight as a seeded random initializer."""
    source = BACKEND_DATA / "light" / f"light_{name}.onnx"
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: set TESSERA_BACKEND_DATA to the onnx-backend-data folder")
    model = onnx.load(str(source))
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: i for i in graph.initializer}
    consumers = _consumers(graph)
    # Shapes come from the ConstantOfShape's shape input, or from shape inference when that is not a constant.
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    keep_nodes, new_inits = [], []
    for node in graph.node:
        if node.op_type != "ConstantOfShape":
            keep_nodes.append(node)
            continue
        out = node.output[0]
        if node.input[0] in inits:
            shape = numpy_helper.to_array(inits[node.input[0]]).tolist()
        else:
            shape = [d.dim_value for d in inferred[out].type.tensor_type.shape.dim]
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        dtype = helper.tensor_dtype_to_np_dtype(value.data_type) if value is not None else np.float32
        role, layout = _role(out, consumers)
        if role == "fc_w":
            fan_in = shape[1] if layout == "transB" else shape[0]
            values = init_fc(rng, shape, fan_in, dtype)
        else:
            values = init_weight(rng, role, shape, dtype)
        new_inits.append(numpy_helper.from_array(values, out))
    del graph.node[:]
    graph.node.extend(keep_nodes)
    still_used = {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in still_used]  # also drops ResNet's unused blob
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    # IR 3 requires every initializer to be a graph input, and a runtime must then treat it as overridable (no
    # constant folding or BatchNormalization fusion).  IR 7 (still opset 9) lets them be plain constants.
    init_names = {i.name for i in graph.initializer}
    real_inputs = [i for i in graph.input if i.name not in init_names and i.name in still_used]
    del graph.input[:]
    graph.input.extend(real_inputs)
    model.ir_version = 7
    return model


# ---- MobileNetV2 ---------------------------------------------------------------------------------------------------

def mobilenetv2(seed):
    """torchvision's MobileNetV2 (width 1.0) as exported at opset 13: Conv (no bias) + BatchNormalization + Clip."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "clip_min"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "clip_max"))
    counter = [0]

    def conv_bn(x, cin, cout, kernel, stride, groups=1, relu6=True):
        i = counter[0] = counter[0] + 1
        p = f"features.{i}"
        w = init_weight(rng, "conv_w", (cout, cin // groups, kernel, kernel))
        inits.append(numpy_helper.from_array(w, p + ".conv.weight"))
        nodes.append(helper.make_node("Conv", [x, p + ".conv.weight"], [p + ".conv"], group=groups,
                                      kernel_shape=[kernel, kernel], strides=[stride, stride],
                                      pads=[kernel // 2] * 4, dilations=[1, 1]))
        for role, suffix in (("bn_scale", "weight"), ("bn_bias", "bias"), ("bn_mean", "running_mean"),
                             ("bn_var", "running_var")):
            inits.append(numpy_helper.from_array(init_weight(rng, role, (cout,)), f"{p}.bn.{suffix}"))
        nodes.append(helper.make_node("BatchNormalization", [p + ".conv"] + [f"{p}.bn.{s}" for s in
                                      ("weight", "bias", "running_mean", "running_var")], [p + ".bn"],
                                      epsilon=1e-5, momentum=0.9))
        if not relu6:
            return p + ".bn"
        nodes.append(helper.make_node("Clip", [p + ".bn", "clip_min", "clip_max"], [p + ".relu6"]))
        return p + ".relu6"

    x = conv_bn("input", 3, 32, 3, 2)
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = conv_bn(x, cin, hidden, 1, 1) if t != 1 else x  # 1x1 expand
            y = conv_bn(y, hidden, hidden, 3, stride, groups=hidden)  # 3x3 depthwise
            y = conv_bn(y, hidden, c, 1, 1, relu6=False)  # 1x1 linear projection
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, y], [y + ".residual"]))
                y = y + ".residual"
            x, cin = y, c
    x = conv_bn(x, cin, 1280, 1, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    inits.append(numpy_helper.from_array(init_fc(rng, (1000, 1280), 1280), "classifier.1.weight"))
    inits.append(numpy_helper.from_array(init_weight(rng, "bias", (1000,)), "classifier.1.bias"))
    nodes.append(helper.make_node("Gemm", ["flat", "classifier.1.weight", "classifier.1.bias"], ["output"],
                                  alpha=1.0, beta=1.0, transB=1))
    graph = helper.make_graph(nodes, "mobilenetv2",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="pytorch")
    model.ir_version = 7
    return model


# ---- BERT-base encoder ---------------------------------------------------------------------------------------------

def bert(seed, layers=12, hidden=768, heads=12, ffn=3072, seq=128, vocab=30522):
    """BERT-base as torch.onnx exports HF BertModel (opset 17): Gather embeddings, LayerNormalization, Erf GELU."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    head_dim = hidden // heads

    def weight(name, *shape, std=0.02, mean=0.0):
        inits.append(numpy_helper.from_array((mean + std * rng.standard_normal(shape, dtype=np.float32))
                                             .astype(np.float32), name))
        return name

    def const(name, value, dtype):
        inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    def linear(x, name, cin, cout):
        mm = node("MatMul", [x, weight(name + ".weight", cin, cout)], name + ".matmul")
        return node("Add", [weight(name + ".bias", cout), mm], name + ".add")

    def layer_norm(x, name):
        return node("LayerNormalization", [x, weight(name + ".weight", hidden, std=0.02, mean=1.0),
                                           weight(name + ".bias", hidden)], name + ".out", axis=-1, epsilon=1e-12)

    # Embeddings; position and token-type ids are constants of the exported graph (no token_type_ids input).
    const("position_ids", np.arange(seq)[None, :], np.int64)
    const("token_type_ids", np.zeros((1, seq)), np.int64)
    words = node("Gather", [weight("embeddings.word_embeddings.weight", vocab, hidden), "input_ids"], "emb.words")
    types = node("Gather", [weight("embeddings.token_type_embeddings.weight", 2, hidden), "token_type_ids"],
                 "emb.types")
    pos = node("Gather", [weight("embeddings.position_embeddings.weight", 512, hidden), "position_ids"], "emb.pos")
    x = node("Add", [words, types], "emb.add1")
    x = node("Add", [x, pos], "emb.add2")
    x = layer_norm(x, "embeddings.LayerNorm")

    # Extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = node("Unsqueeze", ["attention_mask", const("axes1", [1], np.int64)], "mask.u1")
    m = node("Unsqueeze", [m, const("axes2", [2], np.int64)], "mask.u2")
    m = node("Cast", [m], "mask.cast", to=TensorProto.FLOAT)
    m = node("Sub", [const("one", 1.0, np.float32), m], "mask.sub")
    mask = node("Mul", [m, const("neg", -10000.0, np.float32)], "mask.ext")
    const("split_heads", [1, seq, heads, head_dim], np.int64)
    const("merge_heads", [1, seq, hidden], np.int64)
    const("sqrt_head_dim", np.sqrt(head_dim), np.float32)
    const("sqrt2", np.sqrt(2.0), np.float32)
    const("half", 0.5, np.float32)

    for i in range(layers):
        p = f"encoder.layer.{i}"
        heads_of = {}
        for name, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
            y = linear(x, f"{p}.attention.self.{name}", hidden, hidden)
            y = node("Reshape", [y, "split_heads"], y + ".reshape")
            heads_of[name] = node("Transpose", [y], y + ".transpose", perm=perm)
        s = node("MatMul", [heads_of["query"], heads_of["key"]], p + ".scores")
        s = node("Div", [s, "sqrt_head_dim"], p + ".scores.div")
        s = node("Add", [s, mask], p + ".scores.mask")
        s = node("Softmax", [s], p + ".probs", axis=-1)
        ctx = node("MatMul", [s, heads_of["value"]], p + ".context")
        ctx = node("Transpose", [ctx], p + ".context.transpose", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "merge_heads"], p + ".context.reshape")
        y = linear(ctx, f"{p}.attention.output.dense", hidden, hidden)
        y = node("Add", [y, x], p + ".attention.residual")
        x = layer_norm(y, f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense", hidden, ffn)
        g = node("Div", [h, "sqrt2"], p + ".gelu.div")
        g = node("Erf", [g], p + ".gelu.erf")
        g = node("Add", [g, "one"], p + ".gelu.add")
        g = node("Mul", [h, g], p + ".gelu.mul")
        g = node("Mul", [g, "half"], p + ".gelu.out")
        y = linear(g, f"{p}.output.dense", ffn, hidden)
        y = node("Add", [y, x], p + ".output.residual")
        x = layer_norm(y, f"{p}.output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    graph = helper.make_graph(
        nodes, "bert-base",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    return model


# ---- BatchNormalization calibration ------------------------------------------------------------------------------

def calibrate_batchnorm(model, feeds):
    """Sets every BatchNormalization's mean and variance to the statistics its input really has.

    With random means and variances a BatchNormalization does not normalize, and the error compounds: ResNet-50's
    activations grow ~1.5x per block, its logits reach 1e4 and the softmax is one-hot, which would make the
    agreement check meaningless.  Calibrated as in a trained network, activations stay O(1) at every depth.

    The means and variances become inputs of a probe model that outputs every BatchNormalization's input.  A
    BatchNormalization's input depends only on those upstream of it, so pass k calibrates the ones with k-1
    BatchNormalizations upstream on the longest path (their inputs are final once the earlier levels are).
    """
    import onnxruntime as ort
    graph = model.graph
    level, bn_level = {}, []
    for n in graph.node:  # ONNX nodes are topologically sorted
        depth = max((level.get(i, 0) for i in n.input), default=0) + (n.op_type == "BatchNormalization")
        for o in n.output:
            level[o] = depth
        if n.op_type == "BatchNormalization":
            bn_level.append((n, depth))
    if not bn_level:
        return 0
    inits = {i.name: i for i in graph.initializer}
    stat_names = [name for n, _ in bn_level for name in (n.input[3], n.input[4])]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    kept = [i for i in probe.graph.initializer if i.name not in set(stat_names)]
    del probe.graph.initializer[:]
    probe.graph.initializer.extend(kept)
    for name in stat_names:
        probe.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(inits[name].dims)))
    del probe.graph.output[:]
    for n, _ in bn_level:
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    stats = {name: numpy_helper.to_array(inits[name]).astype(np.float32) for name in stat_names}
    depth = max(d for _, d in bn_level)
    for k in range(1, depth + 1):
        acts = session.run(None, {**feeds, **stats})
        for (n, d), x in zip(bn_level, acts):
            if d != k:
                continue
            axes = (0,) + tuple(range(2, x.ndim))
            mean, var = x.mean(axis=axes, dtype=np.float64), x.var(axis=axes, dtype=np.float64)
            var = var + 1e-2 * var.mean() + 1e-6  # a floor: a channel that is zero here must not explode elsewhere
            stats[n.input[3]], stats[n.input[4]] = mean.astype(np.float32), var.astype(np.float32)
    for name in stat_names:
        inits[name].CopyFrom(numpy_helper.from_array(stats[name], name))
    return depth


# ---- Inputs, multiply-add count, cache ---------------------------------------------------------------------------

def make_inputs(name, model, seed_offset=0):
    """The seeded input all runtimes get.  BERT: random token ids, the last 10 positions masked out as padding."""
    rng = np.random.default_rng(1000 + SEEDS[name] + seed_offset)
    if name == "bert":
        ids = rng.integers(0, 30522, (1, 128), dtype=np.int64)
        mask = np.ones((1, 128), np.int64)
        mask[:, -10:] = 0
        return {"input_ids": ids, "attention_mask": mask}
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name not in inits:
            dims = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
            feeds[inp.name] = rng.standard_normal(dims, dtype=np.float32)
    return feeds


def count_macs(model):
    """Multiply-adds of Conv, Gemm and MatMul from the inferred shapes (other operators are not counted)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        shapes[v.name] = [d.dim_value for d in v.type.tensor_type.shape.dim]
    for i in model.graph.initializer:
        shapes[i.name] = list(i.dims)
    macs = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            out, w = shapes[n.output[0]], shapes[n.input[1]]
            macs += int(np.prod(out)) * int(np.prod(w[1:]))  # each output: (Cin/group)*kh*kw multiply-adds
        elif n.op_type == "Gemm":
            a, b = shapes[n.input[0]], shapes[n.input[1]]
            trans_a = any(x.name == "transA" and x.i for x in n.attribute)
            trans_b = any(x.name == "transB" and x.i for x in n.attribute)
            m, k = (a[1], a[0]) if trans_a else (a[0], a[1])
            macs += m * k * (b[0] if trans_b else b[1])
        elif n.op_type == "MatMul":
            a, out = shapes[n.input[0]], shapes[n.output[0]]
            macs += int(np.prod(out)) * a[-1]
    return macs


def check_output(name, model_path, feeds):
    """Runs the model once in onnxruntime: outputs must be finite with a nonzero spread (weights not degenerate)."""
    import onnxruntime as ort
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    stats = []
    for out in session.run(None, feeds):
        out = np.asarray(out, np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError(f"{name}: the built model's output has NaN or inf")
        if out.std() <= 1e-6 * max(1.0, np.abs(out).max()):
            raise ValueError(f"{name}: the built model's output is constant (std {out.std():g})")
        stats.append({"min": float(out.min()), "max": float(out.max()), "std": float(out.std())})
    return stats


def build(name, cache_dir):
    """The path of the cached model (built on first use), its inputs and its metadata."""
    if name in quantized_models.NAMES:
        return build_quantized(name, cache_dir)
    directory = pathlib.Path(cache_dir) / f"v{VERSION}"
    directory.mkdir(parents=True, exist_ok=True)
    path, meta_path = directory / f"{name}.onnx", directory / f"{name}.json"
    if not (path.is_file() and meta_path.is_file()):
        seed = SEEDS[name]
        model = {"mobilenetv2": mobilenetv2, "bert": bert}.get(name, lambda s: from_light(name, s))(seed)
        # Calibrated on an input other than the benchmark's (seed + 1), so nothing is tuned to the measured input.
        calibration = make_inputs(name, model, seed_offset=1)
        passes = calibrate_batchnorm(model, calibration)
        tmp = path.with_suffix(".onnx.tmp")
        onnx.save(model, str(tmp))  # weights inside the file: every model here is under 2 GB
        onnx.checker.check_model(str(tmp), full_check=True)  # full: shape inference too
        feeds = make_inputs(name, model)
        macs, params = count_macs(model), int(sum(np.prod(i.dims) for i in model.graph.initializer))
        del model  # BERT is ~440 MB of weights
        meta = {"name": name, "version": VERSION, "seed": seed, "macs": macs, "params": params,
                "batchnorm_calibration_passes": passes,
                "output_stats": check_output(name, tmp, feeds)}
        os.replace(tmp, path)
        meta_path.write_text(json.dumps(meta, indent=1))
    meta = json.loads(meta_path.read_text())
    model = None if name == "bert" else onnx.load(str(path))  # BERT's inputs need no model
    return path, make_inputs(name, model), meta


def build_quantized(name, cache_dir):
    """A model of quantized_models.py, made from its float32 source (built first) by onnxruntime's tools."""
    directory = pathlib.Path(cache_dir) / f"v{VERSION}"
    directory.mkdir(parents=True, exist_ok=True)
    path, meta_path = directory / f"{name}.onnx", directory / f"{name}.json"
    source = name.split("-int8-")[0] if "-int8-" in name else None
    if source is not None:
        source_path, _, source_meta = build(source, cache_dir)
        source_model = None if source == "bert" else onnx.load(str(source_path))
        inputs = lambda offset=0: make_inputs(source, source_model, seed_offset=offset)  # noqa: E731
    else:
        inputs = quantized_models.decoder_inputs
    if not (path.is_file() and meta_path.is_file()):
        tmp = path.with_suffix(".onnx.tmp")
        if source is not None:
            quantized_models.build(name, source_path, inputs, tmp)
            macs = source_meta["macs"]
        else:
            quantized_models.build_decoder(tmp)
            macs = sum(next(a.i for a in n.attribute if a.name == "K") * next(a.i for a in n.attribute if a.name == "N")
                       for n in onnx.load(str(tmp)).graph.node if n.op_type == "MatMulNBits")
        meta = {"name": name, "version": VERSION, "source": source or "llm_decoder", "macs": macs,
                "output_stats": check_output(name, tmp, inputs())}
        os.replace(tmp, path)
        meta_path.write_text(json.dumps(meta, indent=1))
    return path, inputs(), json.loads(meta_path.read_text())
