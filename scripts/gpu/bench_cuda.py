#!/usr/bin/env python3
"""Tessera's CUDA provider against ONNX Runtime's CUDA execution provider, on the GPU machine.

Models: the ONNX light/ models, models/default.onnx and the small BERT-style encoder of benchmarks/models.py (generated
by scripts/gpu/prepare_device_bundle.sh, since the GPU machine may lack the onnx package).  For each model and
runtime: session creation time, then warm-up runs, then the median latency of --runs runs (inputs and outputs in
host memory, as a caller sees them).  Tessera runs with providers [cuda, cpu]; the partition plan says how many nodes
ran on CUDA.  Outputs are compared with ONNX Runtime's (or with Tessera on the CPU when ONNX Runtime has no CUDA):
TF32 is allowed on both sides unless TESSERA_CUDA_USE_TF32=0, so agreement is checked at rtol 1e-2, atol 1e-3.

    python3 scripts/gpu/bench_cuda.py --bundle DIR [--runs 50] [--markdown FILE] [--with-cpu]
"""
import argparse
import glob
import os
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def light_feeds(inputs):
    """The light-model rule: float inputs, unknown dims 1, arange(n).reshape(shape) / n."""
    feeds = {}
    for arg in inputs:
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in (arg.shape or [])]
        n = int(np.prod(dims)) if dims else 1
        feeds[arg.name] = (np.arange(n, dtype=np.float64).reshape(dims) / n).astype(np.float32)
    return feeds


def timed(run, runs, warmup=5):
    out = run()
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return out, statistics.median(times), min(times)


def bench_tessera(tessera, path, feeds, providers, runs):
    t0 = time.perf_counter()
    session = tessera.InferenceSession(str(path), providers=providers)
    create = time.perf_counter() - t0
    placement = {}
    for p in session.get_partitions():
        placement[p["provider"]] = placement.get(p["provider"], 0) + len(p["nodes"])
    out, median, best = timed(lambda: session.run(None, feeds), runs)
    return dict(create=create, median=median, best=best, out=out[0], placement=placement)


def bench_ort(ort, path, feeds, runs):
    t0 = time.perf_counter()
    session = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    create = time.perf_counter() - t0
    out, median, best = timed(lambda: session.run(None, feeds), runs)
    return dict(create=create, median=median, best=best, out=out[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", default=os.environ.get("TESSERA_BUNDLE", str(ROOT / ".device" / "bundle")))
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--with-cpu", action="store_true", help="also time Tessera on the CPU alone")
    args = parser.parse_args()
    bundle = pathlib.Path(args.bundle)

    os.environ.setdefault("TESSERA_LIBRARY", str(bundle / "lib" / "libtessera.so"))
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    import tessera  # noqa: E402

    try:
        import onnxruntime as ort
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            print(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider; comparing with Tessera on the CPU")
            ort = None
    except ImportError:
        print("onnxruntime is not installed; comparing with Tessera on the CPU")
        ort = None

    print("plugins:", [(p["name"], p["state"], p["reason"]) for p in tessera.plugins() if p["name"]])
    if "cuda" not in tessera.get_available_providers():
        print("the cuda provider is not available here; nothing to benchmark")
        return 1

    cases = [(pathlib.Path(p).stem.replace("light_", ""), pathlib.Path(p), None)
             for p in sorted(glob.glob(str(bundle / "data" / "light" / "light_*.onnx")))]
    cases.append(("default", ROOT / "models" / "default.onnx", None))
    encoder = bundle / "models" / "encoder.onnx"
    if encoder.exists():
        cases.append(("encoder-4x256 seq128", encoder, dict(np.load(bundle / "models" / "encoder_feeds.npz"))))

    rows = []
    for name, path, feeds in cases:
        probe = tessera.InferenceSession(str(path), providers=["cpu"])
        if feeds is None:
            feeds = light_feeds(probe.get_inputs())
        del probe
        t = bench_tessera(tessera, path, feeds, ["cuda", "cpu"], args.runs)
        c = bench_tessera(tessera, path, feeds, ["cpu"], max(3, args.runs // 10)) if args.with_cpu or ort is None else None
        o = bench_ort(ort, path, feeds, args.runs) if ort is not None else None
        ref = o["out"] if o is not None else c["out"]
        diff = float(np.max(np.abs(t["out"].astype(np.float64) - ref))) if t["out"].shape == ref.shape else float("inf")
        agree = t["out"].shape == ref.shape and np.allclose(t["out"], ref, rtol=1e-2, atol=1e-3)
        rows.append((name, t, c, o, diff, agree))
        line = (f"{name:24s} tessera-cuda {t['median']*1e3:8.3f} ms  placement {t['placement']}  "
                f"max|diff| {diff:.2e} {'ok' if agree else 'OUTPUTS DIFFER'}")
        if o is not None:
            line += f"  ort-cuda {o['median']*1e3:8.3f} ms  ratio {t['median']/o['median']:5.2f}"
        if c is not None:
            line += f"  tessera-cpu {c['median']*1e3:8.2f} ms"
        print(line, flush=True)

    ort_name = f"ORT {ort.__version__} CUDA EP" if ort is not None else "(no ORT CUDA)"
    lines = [f"Runs: {args.runs} (median), inputs and outputs in host memory; ratio = Tessera / {ort_name}.", "",
             "| model | Tessera cuda ms | nodes cuda/cpu | ORT cuda ms | ratio | session ms (T/ORT) | Tessera cpu ms | outputs |",
             "|---|---|---|---|---|---|---|---|"]
    for name, t, c, o, diff, agree in rows:
        pl = f"{t['placement'].get('cuda', 0)}/{t['placement'].get('cpu', 0)}"
        lines.append(f"| {name} | {t['median']*1e3:.3f} | {pl} | {o['median']*1e3 if o else float('nan'):.3f} | "
                     f"{t['median']/o['median'] if o else float('nan'):.2f} | "
                     f"{t['create']*1e3:.0f}/{o['create']*1e3 if o else float('nan'):.0f} | "
                     f"{c['median']*1e3 if c else float('nan'):.2f} | {'agree' if agree else 'DIFFER'} ({diff:.1e}) |")
    ratios = [t["median"] / o["median"] for _, t, _, o, _, _ in rows if o is not None]
    if ratios:
        lines += ["", f"Geometric mean latency ratio: {float(np.exp(np.mean(np.log(ratios)))):.2f}"]
    print("\n".join(lines))
    if args.markdown:
        pathlib.Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0 if all(agree for *_, agree in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
