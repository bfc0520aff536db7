"""One measurement in a fresh process: one runtime, one model, one thread count (run by compare.py).

    python child.py RUNTIME MODEL FEEDS.npz THREADS RUNS WARMUP BUDGET_S [OUTPUTS.npz]

A fresh process per measurement keeps runtimes from sharing thread pools, allocator caches or memory peaks.
It loads the model (timed: session creation), runs once (those outputs are saved for the agreement check when
OUTPUTS.npz is given), warms up, then times up to RUNS runs or until BUDGET_S seconds have passed (at least 3
runs), and prints one JSON line.  RUNS 0 means: only create the session, run once and save the outputs.
"""
import json
import os
import math
import resource
import statistics
import sys
import time

import numpy as np


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def tessera_session(path, threads):
    import tessera
    session = tessera.InferenceSession(path, providers=["cpu"], intra_op_threads=threads)
    return (lambda feeds: session.run(None, feeds)), tessera.library_version()


def onnxruntime_session(path, threads):
    import onnxruntime as ort
    options = ort.SessionOptions()
    # compare.py's agreement check of quantized models also asks for the unoptimized run (its noise floor).
    unoptimized = os.environ.get("TESSERA_BENCH_ORT_UNOPTIMIZED") == "1"
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if unoptimized
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return (lambda feeds: session.run(None, feeds)), ort.__version__


def openvino_session(path, threads):
    import openvino as ov
    core = ov.Core()
    # f32 so that no runtime gets to compute in bf16/f16; LATENCY = one stream, the whole pool on one request.
    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    compiled = core.compile_model(path, "CPU", config)  # read + compile: both count as session creation
    request = compiled.create_infer_request()
    count = len(compiled.outputs)

    def run(feeds):
        request.infer(feeds)
        return [request.get_output_tensor(i).data.copy() for i in range(count)]
    return run, ov.get_version().split("-")[0]


SESSIONS = {"tessera": tessera_session, "onnxruntime": onnxruntime_session, "openvino": openvino_session}


def main(argv):
    runtime, model, feeds_path, threads, runs, warmup, budget = argv[:7]
    threads, runs, warmup, budget = int(threads), int(runs), int(warmup), float(budget)
    outputs_path = argv[7] if len(argv) > 7 else None
    feeds = dict(np.load(feeds_path))
    __import__({"tessera": "tessera", "onnxruntime": "onnxruntime", "openvino": "openvino"}[runtime])

    # Memory: the peak over the whole process (imports included), and the growth from here, after the imports.
    # VmHWM, not getrusage's ru_maxrss: Linux carries the parent's peak RSS over fork/exec into ru_maxrss, so
    # every child would report at least compare.py's own footprint.  VmHWM belongs to this address space alone.
    import_peak_kb = status_kb("VmHWM")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (the peak) to the current RSS
    except OSError:
        pass
    baseline_kb = status_kb("VmRSS")

    t0 = time.perf_counter()
    run, version = SESSIONS[runtime](model, threads)
    create_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    outputs = run(feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    if outputs_path:
        np.savez(outputs_path, *[np.asarray(o) for o in outputs])

    times = []
    if runs > 0:
        for _ in range(warmup):
            run(feeds)
        start = time.perf_counter()
        while len(times) < runs and (len(times) < 3 or time.perf_counter() - start < budget):
            t = time.perf_counter()
            run(feeds)
            times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    peak_kb = max(import_peak_kb, status_kb("VmHWM"))
    result = {"runtime": runtime, "version": version, "threads": threads, "create_ms": create_ms,
              "first_run_ms": first_ms, "runs": len(times), "times_ms": times,
              "median_ms": statistics.median(times) if times else None,
              "p90_ms": times[math.ceil(0.9 * len(times)) - 1] if times else None,  # nearest rank
              "peak_rss_mb": peak_kb / 1024, "rss_growth_mb": (status_kb("VmHWM") - baseline_kb) / 1024,
              "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
