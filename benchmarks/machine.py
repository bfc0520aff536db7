"""What the numbers were measured on: CPU, vector extensions, a measured FP32 FMA peak, and Tessera's revision."""
import os
import pathlib
import platform
import re
import shutil
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Independent FMA chains, each in its own register, so the loop is bound by FMA throughput, not latency
# (latency 4 x 2 pipes needs >= 8 chains).  AVX-512 has 32 registers: 16 chains; AVX2 has 16: 12 chains.
FMA_SOURCE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef __AVX512F__
typedef __m512 V;
#define FMA _mm512_fmadd_ps
#define SET1 _mm512_set1_ps
#define LANES 16
#define CHAINS 16
#else
typedef __m256 V;
#define FMA _mm256_fmadd_ps
#define SET1 _mm256_set1_ps
#define LANES 8
#define CHAINS 12
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000000;
    /* acc = acc * a + b converges to b / (1 - a): no overflow, no denormals */
    V a = SET1(0.999f), b = SET1(0.001f);
    V c0 = SET1(0), c1 = SET1(1), c2 = SET1(2), c3 = SET1(3), c4 = SET1(4), c5 = SET1(5), c6 = SET1(6), c7 = SET1(7);
    V c8 = SET1(8), c9 = SET1(9), c10 = SET1(10), c11 = SET1(11);
#if CHAINS == 16
    V c12 = SET1(12), c13 = SET1(13), c14 = SET1(14), c15 = SET1(15);
#endif
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        double t0 = now();
        for (long i = 0; i < iters; ++i) {
            c0 = FMA(c0, a, b); c1 = FMA(c1, a, b); c2 = FMA(c2, a, b); c3 = FMA(c3, a, b);
            c4 = FMA(c4, a, b); c5 = FMA(c5, a, b); c6 = FMA(c6, a, b); c7 = FMA(c7, a, b);
            c8 = FMA(c8, a, b); c9 = FMA(c9, a, b); c10 = FMA(c10, a, b); c11 = FMA(c11, a, b);
#if CHAINS == 16
            c12 = FMA(c12, a, b); c13 = FMA(c13, a, b); c14 = FMA(c14, a, b); c15 = FMA(c15, a, b);
#endif
            __asm__ volatile("" ::: "memory");
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    V s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
#if CHAINS == 16
    s = s + c12 + c13 + c14 + c15;
#endif
    float out[LANES];
    __builtin_memcpy(out, &s, sizeof out);
    printf("%.3f %s %d %g\n", 2.0 * LANES * CHAINS * iters / best * 1e-9, LANES == 16 ? "AVX-512" : "AVX2",
           CHAINS, out[0]);
    return 0;
}
"""


def cpu_info():
    """Model name, logical cores and the vector extensions that matter for FP32/INT8 inference."""
    text = pathlib.Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = set((re.search(r"^flags\s*:\s*(.*)$", text, re.M) or [None, ""])[1].split())
    wanted = {"avx2": "AVX2", "fma": "FMA", "avx512f": "AVX-512F", "avx512_vnni": "AVX-512 VNNI",
              "avx512_bf16": "AVX-512 BF16", "avx_vnni": "AVX-VNNI", "amx_tile": "AMX"}
    mem = re.search(r"^MemTotal:\s*(\d+)", pathlib.Path("/proc/meminfo").read_text(), re.M) \
        if os.path.exists("/proc/meminfo") else None
    return {"model": model.group(1).strip() if model else platform.processor() or "unknown",
            "cores": os.cpu_count(), "flags": {label: flag in flags for flag, label in wanted.items()},
            "memory_gb": round(int(mem.group(1)) / 2**20, 1) if mem else None}


def fma_peak(avx512):
    """Measured single-core FP32 FMA peak in GFLOP/s (compiled now with cc), or None when no compiler works."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = pathlib.Path(tmp, "fma.c"), pathlib.Path(tmp, "fma")
        src.write_text(FMA_SOURCE)
        for flags in ([["-mavx512f", "-mfma"]] if avx512 else []) + [["-mavx2", "-mfma"]]:
            if subprocess.run([cc, "-O2", *flags, str(src), "-o", str(exe)], capture_output=True).returncode == 0:
                break
        else:
            return None
        # Size the loop to ~0.2 s per repetition from a short probe run.
        probe = subprocess.run([str(exe), "1000000"], capture_output=True, text=True)
        if probe.returncode != 0:
            return None
        gflops = float(probe.stdout.split()[0])
        per_iter_flops = 2 * (16 * 16 if "AVX-512" in probe.stdout else 8 * 12)
        iters = max(1_000_000, int(0.2 * gflops * 1e9 / per_iter_flops))
        out = subprocess.run([str(exe), str(iters)], capture_output=True, text=True).stdout.split()
        return {"gflops": float(out[0]), "isa": out[1], "chains": int(out[2])}


def git_revision():
    """Tessera's commit, marked when the source tree it was built from has uncommitted changes."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "core", "plugins",
                                "plugin_api", "CMakeLists.txt", "cmake"], capture_output=True, text=True).stdout
        return commit + (" + uncommitted changes in core/plugins" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build_type(library):
    """CMAKE_BUILD_TYPE of the build tree the library came from, when it came from one."""
    for parent in pathlib.Path(library).resolve().parents:
        cache = parent / "CMakeCache.txt"
        if cache.is_file():
            found = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", cache.read_text(errors="replace"), re.M)
            return found.group(1) or "(none)" if found else None
    return None
