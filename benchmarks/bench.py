#!/usr/bin/env python3
"""Tessera against ONNX Runtime, side by side, on the same models, inputs and thread count.

For each model both runtimes load the same file, get the same input, warm up, then run a fixed number of times;
the median latency and the growth of peak resident memory in a fresh process (session creation and runs, after
the runtime is imported) are compared.  Ratios are
Tessera / ONNX Runtime: below 1 means Tessera is faster or smaller.

    python3 benchmarks/bench.py [--models light,default,encoder] [--runs 20] [--threads 2] [--markdown FILE]

Outputs are checked to agree (rtol 1e-3) before anything is timed, so a fast wrong answer never counts.
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = pathlib.Path(os.environ.get("TESSERA_BACKEND_DATA", ROOT.parent / "shared" / "onnx-backend-data"))


def light_inputs(model_path):
    """The light-model rule: float inputs, unknown dims 1, arange(n).reshape(shape) / n."""
    model = onnx.load(str(model_path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                for d in inp.type.tensor_type.shape.dim]
        n = int(np.prod(dims)) if dims else 1
        feeds[inp.name] = (np.arange(n, dtype=np.float32).reshape(dims) / n).astype(np.float32)
    return feeds


def make_encoder(path, layers=4, hidden=256, heads=4, seq=128, batch=1):
    """A BERT-style encoder with random weights: attention + feed-forward blocks with LayerNormalization."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    head_dim = hidden // heads
    x = "x"
    const("split_heads", [batch, seq, heads, head_dim])
    const("merge_heads", [batch, seq, hidden])
    inits.append(numpy_helper.from_array(np.array(1.0 / np.sqrt(head_dim), np.float32), "scale"))
    for l in range(layers):
        p = f"l{l}."
        proj = {}
        for name in ("q", "k", "v"):
            nodes.append(helper.make_node("MatMul", [x, w(p + name + ".w", hidden, hidden)], [p + name + ".mm"]))
            nodes.append(helper.make_node("Add", [p + name + ".mm", w(p + name + ".b", hidden)], [p + name]))
            nodes.append(helper.make_node("Reshape", [p + name, "split_heads"], [p + name + ".r"]))
            perm = [0, 2, 3, 1] if name == "k" else [0, 2, 1, 3]
            nodes.append(helper.make_node("Transpose", [p + name + ".r"], [p + name + ".t"], perm=perm))
            proj[name] = p + name + ".t"
        nodes.append(helper.make_node("MatMul", [proj["q"], proj["k"]], [p + "scores"]))
        nodes.append(helper.make_node("Mul", [p + "scores", "scale"], [p + "scaled"]))
        nodes.append(helper.make_node("Softmax", [p + "scaled"], [p + "probs"], axis=-1))
        nodes.append(helper.make_node("MatMul", [p + "probs", proj["v"]], [p + "ctx"]))
        nodes.append(helper.make_node("Transpose", [p + "ctx"], [p + "ctx.t"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [p + "ctx.t", "merge_heads"], [p + "ctx.m"]))
        nodes.append(helper.make_node("MatMul", [p + "ctx.m", w(p + "o.w", hidden, hidden)], [p + "o.mm"]))
        nodes.append(helper.make_node("Add", [p + "o.mm", w(p + "o.b", hidden)], [p + "o"]))
        nodes.append(helper.make_node("Add", [p + "o", x], [p + "res1"]))
        nodes.append(helper.make_node("LayerNormalization", [p + "res1", w(p + "ln1.g", hidden), w(p + "ln1.b", hidden)],
                                      [p + "ln1"], axis=-1, epsilon=1e-5))
        nodes.append(helper.make_node("MatMul", [p + "ln1", w(p + "ff1.w", hidden, 4 * hidden)], [p + "ff1.mm"]))
        nodes.append(helper.make_node("Add", [p + "ff1.mm", w(p + "ff1.b", 4 * hidden)], [p + "ff1"]))
        nodes.append(helper.make_node("Gelu", [p + "ff1"], [p + "gelu"]))
        nodes.append(helper.make_node("MatMul", [p + "gelu", w(p + "ff2.w", 4 * hidden, hidden)], [p + "ff2.mm"]))
        nodes.append(helper.make_node("Add", [p + "ff2.mm", w(p + "ff2.b", hidden)], [p + "ff2"]))
        nodes.append(helper.make_node("Add", [p + "ff2", p + "ln1"], [p + "res2"]))
        nodes.append(helper.make_node("LayerNormalization", [p + "res2", w(p + "ln2.g", hidden), w(p + "ln2.b", hidden)],
                                      [p + "out"], axis=-1, epsilon=1e-5))
        x = p + "out"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(nodes, "encoder",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return {"x": (rng.standard_normal((batch, seq, hidden)) * 0.5).astype(np.float32)}


def measure(runtime, model_path, feeds_path, runs, threads):
    """Runs in a fresh process so that peak memory belongs to one runtime and one model."""
    code = f"""
import json, resource, statistics, time, numpy as np
feeds = dict(np.load({str(feeds_path)!r}))
if {runtime!r} == "tessera":
    import tessera
else:
    import onnxruntime as ort
def status_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")  # restart the peak (VmHWM) after the imports
baseline = status_kb("VmRSS")
t0 = time.perf_counter()
if {runtime!r} == "tessera":
    session = tessera.InferenceSession({str(model_path)!r}, intra_op_threads={threads})
else:
    options = ort.SessionOptions()
    options.intra_op_num_threads = {threads}
    options.inter_op_num_threads = 1
    session = ort.InferenceSession({str(model_path)!r}, options, providers=["CPUExecutionProvider"])
create = time.perf_counter() - t0
out = session.run(None, feeds)
for _ in range(3):
    session.run(None, feeds)
times = []
for _ in range({runs}):
    t = time.perf_counter()
    session.run(None, feeds)
    times.append(time.perf_counter() - t)
np.save({str(feeds_path) + "." + runtime + ".npy"!r}, out[0])
print(json.dumps(dict(create=create, median=statistics.median(times), best=min(times),
                      rss_mb=max(status_kb("VmHWM") - baseline, 1) / 1024)))
"""
    env = dict(os.environ)
    env.setdefault("TESSERA_LIBRARY", str(ROOT / "build" / "lib" / "libtessera.so"))
    env["PYTHONPATH"] = str(ROOT / "bindings" / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = str(threads)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{runtime} on {model_path.name}: {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="light,default,encoder")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="tessera-bench-"))
    cases = []
    wanted = set(args.models.split(","))
    if "light" in wanted:
        for path in sorted((DATA / "light").glob("light_*.onnx")):
            cases.append((path.stem.replace("light_", ""), path, light_inputs(path)))
    if "default" in wanted:
        path = ROOT / "models" / "default.onnx"
        cases.append(("default", path, light_inputs(path)))
    if "encoder" in wanted:
        path = work / "encoder.onnx"
        cases.append(("encoder-4x256 seq128", path, make_encoder(path)))

    rows = []
    for name, path, feeds in cases:
        feeds_path = work / f"{name.replace(' ', '_')}.npz"
        np.savez(feeds_path, **feeds)
        t = measure("tessera", path, feeds_path, args.runs, args.threads)
        o = measure("onnxruntime", path, feeds_path, args.runs, args.threads)
        a = np.load(str(feeds_path) + ".tessera.npy")
        b = np.load(str(feeds_path) + ".onnxruntime.npy")
        agree = a.shape == b.shape and np.allclose(a, b, rtol=1e-3, atol=1e-5)
        rows.append((name, t, o, agree))
        print(f"{name:24s} tessera {t['median']*1e3:8.2f} ms  ort {o['median']*1e3:8.2f} ms  "
              f"ratio {t['median']/o['median']:5.2f}  rss {t['rss_mb']:7.1f}/{o['rss_mb']:7.1f} MB  "
              f"{'ok' if agree else 'OUTPUTS DIFFER'}", flush=True)

    lines = [f"Threads: {args.threads}; runs: {args.runs} (median); ratios are Tessera / ONNX Runtime "
             f"{__import__('onnxruntime').__version__}.", "",
             "| model | Tessera ms | ORT ms | latency ratio | session ms (T/ORT) | peak RSS growth MB (T/ORT) | RSS ratio | outputs |",
             "|---|---|---|---|---|---|---|---|"]
    for name, t, o, agree in rows:
        lines.append(f"| {name} | {t['median']*1e3:.2f} | {o['median']*1e3:.2f} | {t['median']/o['median']:.2f} | "
                     f"{t['create']*1e3:.0f}/{o['create']*1e3:.0f} | {t['rss_mb']:.0f}/{o['rss_mb']:.0f} | "
                     f"{t['rss_mb']/o['rss_mb']:.2f} | {'agree' if agree else 'DIFFER'} |")
    ratios = [t["median"] / o["median"] for _, t, o, _ in rows]
    if ratios:
        geo = float(np.exp(np.mean(np.log(ratios))))
        lines += ["", f"Geometric mean latency ratio: {geo:.2f}"]
    print("\n".join(lines))
    if args.markdown:
        pathlib.Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0 if all(agree for *_, agree in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
