#!/usr/bin/env python3
"""Tessera, ONNX Runtime and OpenVINO side by side on the CPU: same models, inputs and thread counts.

    python3 benchmarks/compare.py [--suite float|quantized] [--models resnet50,mobilenetv2,...] [--threads 1,2]
                                  [--runs 10] [--rounds 2] [--markdown FILE | --no-markdown] [--json FILE]

Writes docs/benchmarks.md (the float suite) or docs/benchmarks-quantized.md (the quantized suite: onnxruntime's
quantize_dynamic / quantize_static / MatMulNBitsQuantizer applied to the benchmark models, see quantized_models.py)
unless --no-markdown, and prints the same report.  The pinned onnxruntime and openvino
(benchmarks/requirements.txt) are installed into benchmarks/.venv on first use, and the script re-executes itself
there, so the system Python's packages (pinned for the tests) are never touched.  Tessera is loaded from
build/lib/libtessera.so, or TESSERA_LIBRARY.  Models are built once into build/bench-models/ (see models.py).

Outputs are checked against ONNX Runtime before anything is timed, so a fast wrong answer never counts: a runtime
whose outputs disagree is flagged in the table and left out of the geometric means.  Progress goes to stderr.
"""
import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv"
REQUIREMENTS = HERE / "requirements.txt"
RUNTIMES = ("tessera", "onnxruntime", "openvino")
ALL_MODELS = ("resnet50", "mobilenetv2", "bert", "densenet121", "squeezenet")  # = models.ALL (needs numpy)
# = quantized_models.NAMES: what onnxruntime's quantization tools make of them, and a 4-bit decoder
QUANTIZED_MODELS = tuple(f"{m}-int8-{kind}" for m in ("resnet50", "mobilenetv2", "bert")
                         for kind in ("dynamic", "static")) + ("decoder-4bit",)
SUITES = {"float": (ALL_MODELS, ROOT / "docs" / "benchmarks.md"),
          "quantized": (QUANTIZED_MODELS, ROOT / "docs" / "benchmarks-quantized.md")}


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=sorted(SUITES), default="float",
                        help="float: the float32 models (docs/benchmarks.md); quantized: onnxruntime's quantization "
                             "tools' int8 and 4-bit models (docs/benchmarks-quantized.md)")
    parser.add_argument("--models", help="comma-separated, from: " + ", ".join(ALL_MODELS + QUANTIZED_MODELS) +
                                         " (default: the suite's)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per measurement (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; the best median is kept (default 2)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs after the first (default 3)")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds of timed runs per measurement before stopping early (default 60)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--markdown", help="the report to write (default: the suite's)")
    out.add_argument("--no-markdown", action="store_true", help="print the report only")
    parser.add_argument("--json", help="also write every measurement to this file")
    parser.add_argument("--cache-dir", default=str(ROOT / "build" / "bench-models"),
                        help="where built models are kept (default build/bench-models)")
    args = parser.parse_args(argv)
    suite_models, suite_report = SUITES[args.suite]
    args.models = [m.strip() for m in (args.models or ",".join(suite_models)).split(",") if m.strip()]
    args.markdown = args.markdown or str(suite_report)
    known = ALL_MODELS + QUANTIZED_MODELS
    unknown = [m for m in args.models if m not in known]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    try:
        args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        parser.error("--threads takes comma-separated integers")
    if not args.threads or min(args.threads) < 1 or args.runs < 1 or args.rounds < 1:
        parser.error("--threads, --runs and --rounds must be positive")
    return args


# ---- Environment ---------------------------------------------------------------------------------------------

def ensure_venv():
    """Re-executes this script in benchmarks/.venv, creating or updating it from requirements.txt first."""
    if pathlib.Path(sys.prefix).resolve() == VENV.resolve():
        return
    python = VENV / "bin" / "python"
    stamp = VENV / ".requirements.sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not python.exists() or not stamp.exists() or stamp.read_text().strip() != wanted:
        log(f"Installing benchmarks/requirements.txt into {VENV} (once; about 450 MB) ...")
        try:
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r",
                            str(REQUIREMENTS)], check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"compare.py: could not set up {VENV}: {e}\n"
                     "It needs Python's venv module (Debian: apt-get install python3-venv) and access to PyPI.")
        stamp.write_text(wanted + "\n")
    os.execv(str(python), [str(python), str(pathlib.Path(__file__).resolve()), *sys.argv[1:]])


def tessera_library():
    """The libtessera the children will load, or exit with how to build it."""
    path = pathlib.Path(os.environ.get("TESSERA_LIBRARY") or ROOT / "build" / "lib" / "libtessera.so")
    if not path.is_file():
        sys.exit(f"compare.py: libtessera not found at {path}.\n"
                 "Build Tessera first (Release), from the repository root:\n"
                 "    scripts/setup.sh\n"
                 "or: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j\n"
                 "or point TESSERA_LIBRARY at an existing libtessera.so.")
    return path.absolute()


def child_env(library, threads):
    env = dict(os.environ)
    env["TESSERA_LIBRARY"] = str(library)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "bindings" / "python"), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = str(threads)  # OpenBLAS (Tessera's GEMM) and any OpenMP pool: N threads too
    return env


# ---- Measurements --------------------------------------------------------------------------------------------

def run_child(runtime, model_path, feeds_path, threads, runs, warmup, budget, library, outputs_path=None):
    """One fresh process (child.py); its JSON result, or {'error': ...} when it failed."""
    cmd = [sys.executable, str(HERE / "child.py"), runtime, str(model_path), str(feeds_path), str(threads),
           str(runs), str(warmup), str(budget)] + ([str(outputs_path)] if outputs_path else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(library, threads))
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


# Quantized models agree within a few quanta: wherever float arithmetic precedes a quantization, another summation
# order moves some values across a rounding boundary, and onnxruntime's own optimized and unoptimized runs of these
# models differ by up to ~5% of the largest output (bindings/python/tests/test_onnxruntime_tools.py), more where
# the output is small probabilities.  So a quantized model's outputs agree within QUANTIZED_ATOL x the largest
# |reference| plus the difference between onnxruntime's own optimized and unoptimized runs.  A wrong kernel is off
# by far more.
QUANTIZED_ATOL = 0.1


def compare_outputs(np, reference, outputs, quantized=False, noise=0.0):
    """rtol 1e-3, atol 1e-4 x the largest |reference| (so it scales with the output's magnitude); quantized models:
    atol QUANTIZED_ATOL x the largest |reference| + noise (onnxruntime's level-to-level difference)."""
    if len(reference) != len(outputs):
        return {"ok": False, "max_abs_diff": float("inf"), "ref_max_abs": 0.0,
                "detail": f"{len(outputs)} outputs, expected {len(reference)}"}
    ok, worst, ref_max = True, 0.0, 0.0
    for ref, out in zip(reference, outputs):
        ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
        if ref.shape != out.shape:
            return {"ok": False, "max_abs_diff": float("inf"), "ref_max_abs": 0.0,
                    "detail": f"shape {out.shape}, expected {ref.shape}"}
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        diff = float(np.abs(out - ref).max()) if ref.size else 0.0
        rtol, atol = (0.0, QUANTIZED_ATOL * scale + noise) if quantized else (1e-3, 1e-4 * scale)
        ok = ok and bool(np.allclose(out, ref, rtol=rtol, atol=atol)) and np.all(np.isfinite(out))
        worst, ref_max = max(worst, diff), max(ref_max, scale)
    return {"ok": ok, "max_abs_diff": worst, "ref_max_abs": ref_max}


def check_agreement(np, case, threads, library, work):
    """Each runtime creates a session and runs once; Tessera's and OpenVINO's outputs against ORT's."""
    outputs, agreement = {}, {}
    for runtime in RUNTIMES:
        path = work / f"{case['name']}.t{threads}.{runtime}.npz"
        result = run_child(runtime, case["path"], case["feeds"], threads, 0, 0, 0, library, path)
        if "error" in result:
            agreement[runtime] = {"ok": False, "error": result["error"]}
            log(f"  check {case['name']} t={threads} {runtime}: FAILED {result['error']}")
            continue
        with np.load(path) as data:
            outputs[runtime] = [data[f"arr_{i}"] for i in range(len(data.files))]
    if "onnxruntime" not in outputs:
        return agreement
    agreement["onnxruntime"] = {"ok": True, "reference": True}
    quantized, noise = case["name"] in QUANTIZED_MODELS, 0.0
    if quantized:
        path = work / f"{case['name']}.t{threads}.onnxruntime-unoptimized.npz"
        os.environ["TESSERA_BENCH_ORT_UNOPTIMIZED"] = "1"
        try:
            result = run_child("onnxruntime", case["path"], case["feeds"], threads, 0, 0, 0, library, path)
        finally:
            del os.environ["TESSERA_BENCH_ORT_UNOPTIMIZED"]
        if "error" not in result:
            with np.load(path) as data:
                unoptimized = [data[f"arr_{i}"] for i in range(len(data.files))]
            noise = max(float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))
                        for a, b in zip(outputs["onnxruntime"], unoptimized))
            agreement["onnxruntime"]["level_noise"] = noise
            log(f"  check {case['name']} t={threads}: onnxruntime optimized vs unoptimized differ by {noise:.3g}")
    for runtime in ("tessera", "openvino"):
        if runtime in outputs:
            agreement[runtime] = compare_outputs(np, outputs["onnxruntime"], outputs[runtime], quantized, noise)
            a = agreement[runtime]
            log(f"  check {case['name']} t={threads} {runtime} vs onnxruntime: max abs diff "
                f"{a['max_abs_diff']:.3g} (max abs ref {a['ref_max_abs']:.3g}) -> "
                f"{'agree' if a['ok'] else 'DIFFER ' + a.get('detail', '')}")
    return agreement


def best_of(rounds):
    """Latency from the round with the lowest median; the lowest creation time; the highest memory."""
    good = [r for r in rounds if "error" not in r]
    if not good:
        return rounds[-1] if rounds else {"error": "not measured"}
    best = dict(min(good, key=lambda r: r["median_ms"]))
    best["create_ms"] = min(r["create_ms"] for r in good)
    best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in good)
    best["rss_growth_mb"] = max(r["rss_growth_mb"] for r in good)
    best["rounds"] = [{k: r.get(k) for k in ("median_ms", "p90_ms", "create_ms", "error")} for r in rounds]
    return best


def main(argv):
    args = parse_args(argv)
    library = tessera_library()  # before the (possibly long) first venv setup
    ensure_venv()
    # Imported only now: they come from benchmarks/.venv.
    import numpy as np
    import onnx
    import models
    import machine
    import report

    info = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "cpu": machine.cpu_info(),
            "python": platform.python_version(), "tessera_commit": machine.git_revision(),
            "tessera_library": os.path.relpath(library, ROOT) if library.is_relative_to(ROOT) else str(library),
            "tessera_build_type": machine.build_type(library), "load_average": [os.getloadavg()[0]],
            "versions": {"numpy": np.__version__, "onnx": onnx.__version__}, "notes": []}
    log("Measuring the single-core FP32 FMA peak ...")
    avx512 = info["cpu"]["flags"].get("AVX-512F", False)
    info["fma_peak"] = machine.fma_peak(avx512)
    if info["fma_peak"]:
        log(f"  {info['fma_peak']['gflops']:.1f} GFLOP/s ({info['fma_peak']['isa']})")

    if any(name in QUANTIZED_MODELS for name in args.models):
        info["notes"].append(
            "Quantized models are what onnxruntime's own tools make of the float32 models (benchmarks/"
            "quantized_models.py: quantize_dynamic, quantize_static in the QDQ format, and MatMulNBitsQuantizer on a "
            "Llama-style decoder timed on one decoding step after a 128-token cache); their outputs agree when "
            f"within {QUANTIZED_ATOL:g} x the largest absolute reference value (a few quanta) plus the difference "
            "between ONNX Runtime's own optimized and unoptimized runs, not the float tolerance below.")
    cases = []
    for name in args.models:
        log(f"Model {name}: building or loading from {args.cache_dir} ...")
        path, feeds, meta = models.build(name, args.cache_dir)
        cases.append({"name": name, "path": path, "feeds_dict": feeds, "meta": meta})

    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-compare-") as tmp:
        work = pathlib.Path(tmp)
        for case in cases:
            case["feeds"] = work / f"{case['name']}.inputs.npz"
            np.savez(case["feeds"], **case["feeds_dict"])
            for threads in args.threads:
                log(f"Checking outputs: {case['name']}, {threads} thread(s)")
                rows.append({"model": case["name"], "threads": threads, "macs": case["meta"]["macs"],
                             "agreement": check_agreement(np, case, threads, library, work),
                             "rounds": {rt: [] for rt in RUNTIMES}})
        # Timing: rounds outermost, so that a burst of background load hits every runtime alike; within a
        # measurement group the runtimes' order rotates.
        by_key = {(r["model"], r["threads"]): r for r in rows}
        turn = 0
        for rnd in range(args.rounds):
            for case in cases:
                for threads in args.threads:
                    row = by_key[(case["name"], threads)]
                    order = RUNTIMES[turn % 3:] + RUNTIMES[:turn % 3]
                    turn += 1
                    for runtime in order:
                        r = run_child(runtime, case["path"], case["feeds"], threads, args.runs, args.warmup,
                                      args.budget, library)
                        row["rounds"][runtime].append(r)
                        if "error" in r:
                            log(f"[round {rnd + 1}/{args.rounds}] {case['name']} t={threads} {runtime}: "
                                f"FAILED {r['error']}")
                            continue
                        info["versions"][runtime] = r["version"]
                        log(f"[round {rnd + 1}/{args.rounds}] {case['name']} t={threads} {runtime:11s} median "
                            f"{r['median_ms']:8.2f} ms  p90 {r['p90_ms']:8.2f} ms ({r['runs']} runs)  create "
                            f"{r['create_ms']:6.0f} ms  peak RSS {r['peak_rss_mb']:6.0f} MB "
                            f"(+{r['rss_growth_mb']:.0f})")
    # The peak again at the end: the higher of the two is the less disturbed by other load on the machine.
    again = machine.fma_peak(avx512) if info["fma_peak"] else None
    if again and again["gflops"] > info["fma_peak"]["gflops"]:
        info["fma_peak"] = again
    info["load_average"].append(os.getloadavg()[0])
    for row in rows:
        row["results"] = {rt: best_of(row["rounds"][rt]) for rt in RUNTIMES}
        del row["rounds"]
        for runtime in RUNTIMES:
            err = row["results"][runtime].get("error") or row["agreement"].get(runtime, {}).get("error")
            if err:
                info["notes"].append(f"{runtime} on {row['model']} ({row['threads']} threads) failed: {err}")

    # The report names the command that regenerates it: where the JSON copy went is not part of that.
    shown = [a for i, a in enumerate(argv) if a != "--json" and not (i > 0 and argv[i - 1] == "--json")
             and not a.startswith("--json=")]
    command = "python3 benchmarks/compare.py " + " ".join(shown) if shown else "python3 benchmarks/compare.py"
    settings = {"threads": args.threads, "runs": args.runs, "rounds": args.rounds, "warmup": args.warmup,
                "budget": args.budget, "command": command.strip()}
    text = report.render(info, rows, settings, models.CONV_MODELS)
    print(text)
    if not args.no_markdown:
        pathlib.Path(args.markdown).write_text(text)
        log(f"Wrote {args.markdown}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"info": info, "settings": settings, "rows": rows,
                                                       "models": {c["name"]: c["meta"] for c in cases}},
                                                      indent=1, default=str))
        log(f"Wrote {args.json}")
    disagree = [r for r in rows if not all(r["agreement"].get(rt, {}).get("ok") for rt in RUNTIMES)]
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
