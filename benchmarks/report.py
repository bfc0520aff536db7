"""The Markdown report of compare.py: machine, versions, method, the table, geometric means, scaling, efficiency."""
import math

RUNTIMES = ("tessera", "onnxruntime", "openvino")
SHORT = {"tessera": "T", "onnxruntime": "ORT", "openvino": "OV"}
LABEL = {"tessera": "Tessera", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


def _ms(result):
    return result.get("median_ms") if result and not result.get("error") else None


def _fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def _ratio(a, b):
    return a / b if a is not None and b else None


def _agrees(row, runtime):
    return row["agreement"].get(runtime, {}).get("ok", False)


def agreement_cell(row):
    """'yes' with each runtime's max |diff| against ONNX Runtime, or what disagreed and by how much."""
    parts, all_ok = [], True
    for runtime in ("tessera", "openvino"):
        a = row["agreement"].get(runtime, {})
        if a.get("error"):
            parts.append(f"{SHORT[runtime]} failed")
            all_ok = False
        elif "max_abs_diff" not in a:
            parts.append(f"{SHORT[runtime]} not checked")
            all_ok = False
        elif a["ok"]:
            parts.append(f"{SHORT[runtime]} {a['max_abs_diff']:.1e}")
        else:
            parts.append(f"**{SHORT[runtime]} DIFFERS: max abs diff {a['max_abs_diff']:.3g} "
                         f"(max abs ref {a['ref_max_abs']:.3g})**")
            all_ok = False
    return ("yes (" if all_ok else "NO (") + ", ".join(parts) + ")"


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def table(rows):
    lines = ["| model | threads | Tessera ms | ORT ms | OpenVINO ms | Tessera/ORT | Tessera/OV | "
             "session create ms T/ORT/OV | peak RSS MB T/ORT/OV | RSS growth MB T/ORT/OV | outputs agree |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r = row["results"]
        t, o, v = (_ms(r.get(k)) for k in RUNTIMES)
        triple = lambda key: "/".join(_fmt((r.get(k) or {}).get(key), ".0f") for k in RUNTIMES)  # noqa: E731
        lines.append(f"| {row['model']} | {row['threads']} | {_fmt(t, '.2f')} | {_fmt(o, '.2f')} | "
                     f"{_fmt(v, '.2f')} | {_fmt(_ratio(t, o), '.2f')} | {_fmt(_ratio(t, v), '.2f')} | "
                     f"{triple('create_ms')} | {triple('peak_rss_mb')} | {triple('rss_growth_mb')} | "
                     f"{agreement_cell(row)} |")
    return lines


def summary(rows, threads):
    """Geometric means of the latency ratios (rows whose outputs agree) and the multi-thread speed-ups."""
    lines = []
    valid = [r for r in rows if _agrees(r, "tessera")]
    for label, runtime in (("ONNX Runtime", "onnxruntime"), ("OpenVINO", "openvino")):
        per = []
        for n in threads:
            ratios = [_ratio(_ms(r["results"].get("tessera")), _ms(r["results"].get(runtime)))
                      for r in valid if r["threads"] == n and (runtime == "onnxruntime" or _agrees(r, runtime))]
            g = geomean(ratios)
            if g:
                count = len([x for x in ratios if x])
                per.append(f"{g:.2f} at {n} thread{'s' if n > 1 else ''} ({count} model{'s' if count > 1 else ''})")
        if per:
            lines.append(f"- Tessera / {label}, geometric mean of latency ratios: " + "; ".join(per) + ".")
    skipped = sorted({r["model"] for r in rows if not _agrees(r, "tessera")})
    if skipped:
        lines.append(f"- Left out of the geometric means because Tessera's outputs did not agree or it failed: "
                     f"{', '.join(skipped)}.")
    if 1 in threads and len(threads) > 1:
        lines += ["", "Multi-thread speed-up (1-thread ms / N-thread ms; 2.00 would be perfect on 2 threads):", ""]
        for model in dict.fromkeys(r["model"] for r in rows):
            by_threads = {r["threads"]: r for r in rows if r["model"] == model}
            for n in [n for n in threads if n != 1]:
                if 1 not in by_threads or n not in by_threads:
                    continue
                parts = []
                for runtime in RUNTIMES:
                    one = _ms(by_threads[1]["results"].get(runtime))
                    many = _ms(by_threads[n]["results"].get(runtime))
                    parts.append(f"{LABEL[runtime]} {_fmt(_ratio(one, many), '.2f')}x")
                lines.append(f"- {model}, {n} threads speed-up: " + ", ".join(parts))
    return lines


def efficiency(rows, peak, conv_models):
    """Achieved GFLOP/s (2 x multiply-adds of Conv/Gemm/MatMul / latency) and its share of peak x threads."""
    if not peak:
        return ["(No C compiler was found, so the FMA peak and the efficiency table are missing.)"]
    lines = ["| model | threads | GFLOP per run | Tessera GFLOP/s (% peak) | ORT GFLOP/s (% peak) | "
             "OpenVINO GFLOP/s (% peak) |", "|---|---|---|---|---|---|"]
    for row in rows:
        if row["model"] not in conv_models:
            continue
        flops = 2 * row["macs"]
        cells = []
        for runtime in RUNTIMES:
            ms = _ms(row["results"].get(runtime))
            if ms is None:
                cells.append("n/a")
                continue
            rate = flops / (ms * 1e-3) / 1e9
            cells.append(f"{rate:.1f} ({100 * rate / (peak['gflops'] * row['threads']):.0f}%)")
        lines.append(f"| {row['model']} | {row['threads']} | {flops / 1e9:.2f} | " + " | ".join(cells) + " |")
    return lines


def render(info, rows, settings, conv_models):
    cpu, peak = info["cpu"], info["fma_peak"]
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in cpu["flags"].items())
    v = info["versions"]
    peak_text = (f"{peak['gflops']:.1f} GFLOP/s ({peak['isa']}, {peak['chains']} independent FMA chains, "
                 f"measured by a C loop compiled at run time)" if peak else "not measured (no C compiler)")
    threads = settings["threads"]
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{settings['command']}` on {info['date']}; regenerate it with the same command "
        "(`python3 benchmarks/compare.py` for every model). Do not edit by hand.",
        "",
        "## Machine and software",
        "",
        f"- CPU: {cpu['model']}, {cpu['cores']} logical cores, {cpu['memory_gb']} GiB memory; {flags}.",
        f"- Single-core FP32 FMA peak: {peak_text}.",
        f"- 1-minute load average at the start and end of the run: "
        f"{' and '.join(f'{x:.2f}' for x in info['load_average'])} (other work on the machine makes timings noisy).",
        f"- Tessera {v.get('tessera', '?')} (commit {info['tessera_commit']}, build type "
        f"{info['tessera_build_type'] or 'unknown'}, `{info['tessera_library']}`), CPU provider only.",
        f"- ONNX Runtime {v.get('onnxruntime', '?')}: CPUExecutionProvider, all graph optimizations, "
        "intra-op threads N, inter-op threads 1.",
        f"- OpenVINO {v.get('openvino', '?')}: CPU device, INFERENCE_PRECISION_HINT f32, PERFORMANCE_HINT "
        "LATENCY, INFERENCE_NUM_THREADS N.",
        f"- Python {info['python']}, numpy {v.get('numpy')}, onnx {v.get('onnx')} (pinned in "
        "`benchmarks/requirements.txt`, installed into `benchmarks/.venv`).",
        "",
        "## Models",
        "",
        "Every weight is a real-size initializer of seeded random values; no weight is produced at run time "
        "(ConstantOfShape), which runtimes would fold to a constant. ResNet-50, DenseNet-121 and SqueezeNet take "
        "their architecture from the ONNX backend data's `light_*.onnx` (each ConstantOfShape weight becomes an "
        "initializer: Conv weights He-normal, Gemm weights std sqrt(1/fan_in), biases 0.01 N(0,1), "
        "BatchNormalization scale 1 + 0.1 N(0,1) and bias 0.1 N(0,1); the few small weights those files already "
        "store as initializers keep their values); MobileNetV2 (opset 13, Conv + "
        "BatchNormalization + Clip) and BERT-base (opset 17, 12 layers, hidden 768, sequence 128, Erf GELU, "
        "LayerNormalization, weights std 0.02) are built as the PyTorch exporter writes them. BatchNormalization "
        "means and variances are calibrated to the statistics of a seeded calibration input (not the benchmark "
        "input), as in a trained network, so activations stay O(1) at every depth and no output saturates. "
        "Models are built by `benchmarks/models.py` and cached in `build/bench-models/`.",
        "",
        "## Method",
        "",
        f"For each model and thread count N in {', '.join(map(str, threads))}, every runtime gets the same "
        "seeded input (BERT: random token ids, the last 10 positions masked). First each runtime's outputs are "
        "compared with ONNX Runtime's (rtol 1e-3, atol 1e-4 x the largest absolute reference value; the "
        "largest absolute difference is reported). Then each measurement runs in a fresh process: it loads the "
        f"model (session creation, timed), runs once, warms up {settings['warmup']} runs, and times "
        f"up to {settings['runs']} runs (stopping early, after at least 3, once {settings['budget']:.0f} s are spent). "
        "Latency is the "
        f"median; the runtimes' order rotates between measurements, and the table keeps the best (lowest median) "
        f"of {settings['rounds']} round{'s' if settings['rounds'] > 1 else ''}, with the lowest session creation "
        "time and the highest memory of those rounds. Peak RSS is the measuring process's peak resident memory "
        "(VmHWM: Python, numpy and the runtime's import included; getrusage's ru_maxrss is not used because "
        "Linux carries the parent process's peak into it across fork and exec); RSS growth is the peak after the "
        "import minus the resident memory just before the session was created. Ratios are Tessera / other: "
        "below 1 means Tessera is faster. `OMP_NUM_THREADS` is N for every process.",
        "",
        "## Results",
        "",
        *table(rows),
        "",
        *summary(rows, threads),
        "",
        "## Arithmetic efficiency (convolutional models)",
        "",
        "Achieved GFLOP/s counts 2 x the multiply-adds of Conv, Gemm and MatMul (from the inferred shapes) per "
        "median run, as a share of the measured single-core FMA peak x N threads.",
        "",
        *efficiency(rows, peak, conv_models),
        "",
    ]
    if info.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in info["notes"]] + [""]
    return "\n".join(lines)
