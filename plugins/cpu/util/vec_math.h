// CPU provider: vectorized float math for the hot elementwise paths (exp, sigmoid, tanh, erf, GELU, softmax
// rows), written once on GCC/Clang vector extensions and compiled for AVX-512, AVX2 or the baseline ISA, chosen
// at run time.
//
// Why not plain loops: with the default -ftrapping-math the compiler refuses to if-convert floating-point
// selects (x > 0 ? x : a*x) for SSE/AVX2, and it never vectorizes libm calls, so activations and softmax would
// run one element at a time.  Vector-extension code has no such restriction.
//
// Accuracy (float32, checked against double references): exp within 2 ulp; tanh within 4e-7 relative; erfc
// within 2e-6 relative for arguments below 6, so erf and GELU within 3e-7.  Inputs of ±inf and NaN give the IEEE
// results (GELU: the limits).
//
// Pitfalls met with GCC 12 (check the AVX-512 disassembly for per-lane scalar code after changes):
//  - x != x (NaN tests) and selects that mix integer-compare masks with float-compare masks are split into one
//    scalar operation per lane; the functions here let NaN flow through their arithmetic instead of testing it.
//  - A function that takes or returns Vf and is not inlined gets an ABI warning (-Wpsabi, an error under
//    -Werror) and is slow; mark every such function, including functors' call operators, always_inline.
//
// Use:
//     struct Sigmoid { [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::sigmoid(x); } };
//     vec::run_best_isa([&] { vec::map(in, out, n, Sigmoid{}); });
// run_best_isa inlines its body into an AVX-512 / AVX2 / baseline copy of itself, so everything the body calls
// must be inline (the functions here are).  Off x86 (TESSERA_CPU_X86 0) only the baseline copy exists.
#pragma once

#include <cstdint>
#include <cstring>

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// Vectors are passed by value between always-inlined functions only; the ABI note GCC emits for such
// signatures in baseline-ISA code does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tessera::cpu::vec {

inline constexpr int kLanes = 16;
using Vf = float __attribute__((vector_size(kLanes * sizeof(float))));
using Vi = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

// ---- ISA dispatch --------------------------------------------------------------------------------------------

enum class Isa { Baseline, Avx2, Avx512 };

// The level util/cpu_isa.h allows (TESSERA_CPU_MAX_ISA included).
inline Isa best_isa() {
    if (cpu_allows(CpuIsa::Avx512)) return Isa::Avx512;
    if (cpu_allows(CpuIsa::Avx2)) return Isa::Avx2;
    return Isa::Baseline;
}

template <typename Body> [[gnu::flatten]] inline void run_baseline(const Body& body) { body(); }

#if TESSERA_CPU_X86
template <typename Body>
[[gnu::target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"), gnu::flatten]] inline void run_avx512(const Body& body) {
    body();
}
template <typename Body> [[gnu::target("avx2,fma"), gnu::flatten]] inline void run_avx2(const Body& body) { body(); }

// Runs body() compiled for the best instruction set of this machine.
template <typename Body> void run_best_isa(const Body& body) {
    switch (best_isa()) {
        case Isa::Avx512: run_avx512(body); break;
        case Isa::Avx2: run_avx2(body); break;
        default: run_baseline(body); break;
    }
}
#else
// No other instruction sets are compiled here: best_isa() is Baseline.
template <typename Body> void run_best_isa(const Body& body) { run_baseline(body); }
#endif

// ---- Basics --------------------------------------------------------------------------------------------------

[[gnu::always_inline]] inline Vf splat(float v) { return Vf{} + v; }
[[gnu::always_inline]] inline Vf select(Vi mask, Vf a, Vf b) { return mask ? a : b; }
[[gnu::always_inline]] inline Vf max(Vf a, Vf b) { return a > b ? a : b; }
[[gnu::always_inline]] inline Vf min(Vf a, Vf b) { return a < b ? a : b; }
// x limited to [lo, hi]; NaN stays NaN (both comparisons are false for it).
[[gnu::always_inline]] inline Vf clamp(Vf x, float lo, float hi) {
    const Vf y = x < lo ? splat(lo) : x;
    return y > hi ? splat(hi) : y;
}
[[gnu::always_inline]] inline Vf abs(Vf x) { return reinterpret_cast<Vf>(reinterpret_cast<Vi>(x) & 0x7fffffff); }

[[gnu::always_inline]] inline Vf load(const float* p) {
    Vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
[[gnu::always_inline]] inline void store(float* p, Vf v) { std::memcpy(p, &v, sizeof v); }
// The first n (< kLanes) lanes from p, the rest `fill`.
[[gnu::always_inline]] inline Vf load_partial(const float* p, int64_t n, float fill) {
    Vf v = splat(fill);
    std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
    return v;
}
[[gnu::always_inline]] inline void store_partial(float* p, Vf v, int64_t n) {
    std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float));
}

// n <= kLanes elements (any other lanes 0): a full vector when n == kLanes.
[[gnu::always_inline]] inline Vf load_n(const float* p, int64_t n) {
    return n == kLanes ? load(p) : load_partial(p, n, 0.0f);
}
[[gnu::always_inline]] inline void store_n(float* p, int64_t n, Vf v) {
    if (n == kLanes) store(p, v);
    else store_partial(p, v, n);
}

[[gnu::always_inline]] inline float horizontal_sum(Vf v) {
    float s = 0;
    for (int i = 0; i < kLanes; ++i) s += v[i];
    return s;
}
[[gnu::always_inline]] inline float horizontal_max(Vf v) {
    float m = v[0];
    for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
    return m;
}

#if TESSERA_CPU_X86
// IEEE square root with SSE's sqrtps (part of every x86-64), since sqrt calls are not vectorized while errno
// handling is on.
[[gnu::always_inline]] inline Vf sqrt(Vf x) {
    Vf result;
    for (int i = 0; i < kLanes; i += 4) {
        __m128 part;
        std::memcpy(&part, reinterpret_cast<const float*>(&x) + i, sizeof part);
        part = _mm_sqrt_ps(part);
        std::memcpy(reinterpret_cast<float*>(&result) + i, &part, sizeof part);
    }
    return result;
}
#else
// IEEE square root lane by lane (the same correctly rounded result as sqrtps).
[[gnu::always_inline]] inline Vf sqrt(Vf x) {
    Vf result;
    for (int i = 0; i < kLanes; ++i) result[i] = __builtin_sqrtf(x[i]);
    return result;
}
#endif

// ---- Transcendentals -----------------------------------------------------------------------------------------

// e^x: Cody-Waite range reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial (Cephes expf coefficients),
// and the scale 2^n applied as two halves so that results down to the subnormal range and up to FLT_MAX come
// out right.
[[gnu::always_inline]] inline Vf exp(Vf x) {
    constexpr float kMin = -103.972077f;       // below ln(smallest subnormal / 2): the result rounds to 0
    constexpr float kMax = 88.7228394f;        // ln(FLT_MAX)
    constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding it rounds to an integer in the low bits
    const Vf xc = clamp(x, kMin, kMax);
    const Vf t = xc * 1.44269504088896341f + kRound;
    const Vf n = t - kRound;
    const Vf r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    Vf p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const Vi n_int = reinterpret_cast<Vi>(t) - reinterpret_cast<Vi>(splat(kRound));  // in [-150, 128]
    const Vi half = n_int >> 1;
    const Vf scale_a = reinterpret_cast<Vf>((half + 127) << 23);
    const Vf scale_b = reinterpret_cast<Vf>((n_int - half + 127) << 23);
    const Vf result = select(x < kMin, Vf{}, p * scale_a * scale_b);
    return select(x > kMax, splat(__builtin_inff()), result);
}

// 1 / (1 + e^-x); saturates cleanly to 0 and 1.
[[gnu::always_inline]] inline Vf sigmoid(Vf x) { return 1.0f / (1.0f + exp(-x)); }

// tanh as a 13/6 rational approximation on [-7.9, 7.9] (beyond it tanh rounds to ±1 in float); near 0 it is
// x * (1 - 1.3e-7).
[[gnu::always_inline]] inline Vf tanh(Vf x) {
    constexpr float kClamp = 7.90531110763549805f;
    const Vf xc = clamp(x, -kClamp, kClamp);
    const Vf x2 = xc * xc;
    Vf p = splat(-2.76076847742355e-16f);
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * xc;
    Vf q = splat(1.19825839466702e-06f);
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return p / q;
}

// erfc(z) for z >= 0 (Numerical Recipes' erfcc Chebyshev fit: relative error ~1e-7 in exact arithmetic).
[[gnu::always_inline]] inline Vf erfc_nonnegative(Vf z) {
    const Vf t = 1.0f / (1.0f + 0.5f * z);
    Vf p = splat(0.17087277f);
    p = p * t + -0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t + -1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t + -0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t + -1.26551223f;
    return t * exp(p - z * z);
}

// erf: odd Taylor series below 0.5 (where 1 - erfc would cancel), 1 - erfc above.
[[gnu::always_inline]] inline Vf erf(Vf x) {
    const Vf a = abs(x);
    const Vf a2 = a * a;
    Vf s = splat(1.2055332981789664e-4f);
    s = s * a2 + -8.548327023450852e-4f;
    s = s * a2 + 5.223977625442188e-3f;
    s = s * a2 + -2.6866170645131252e-2f;
    s = s * a2 + 1.1283791670955126e-1f;
    s = s * a2 + -3.7612638903183754e-1f;
    s = s * a2 + 1.1283791670955126f;
    s = s * a;
    const Vf far = 1.0f - erfc_nonnegative(a);
    const Vf magnitude = select(a < 0.5f, s, far);
    const Vi sign = reinterpret_cast<Vi>(x) & static_cast<int32_t>(0x80000000u);
    return reinterpret_cast<Vf>(reinterpret_cast<Vi>(magnitude) | sign);
}

// GELU with the exact erf form: x/2 * (1 + erf(x/sqrt2)), using erfc directly for x < 0 so that the small
// negative tail keeps its relative accuracy.
[[gnu::always_inline]] inline Vf gelu(Vf x) {
    const Vf c = erfc_nonnegative(abs(x) * 0.70710678118654752f);
    // Clamping keeps -inf * 0 from turning the limit 0 into NaN.
    return select(x < 0.0f, 0.5f * c * max(x, splat(-3.4028234e38f)), x * (1.0f - 0.5f * c));
}

// GELU with the tanh approximation; 1 + tanh(u) = 2 * sigmoid(2u) avoids cancellation for x < 0.
[[gnu::always_inline]] inline Vf gelu_tanh(Vf x) {
    const Vf u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return max(x, splat(-3.4028234e38f)) * sigmoid(2.0f * u);  // -inf * 0 would give NaN instead of the limit 0
}

// ---- Loops ---------------------------------------------------------------------------------------------------

// out[k] = fn(in[k]) for k < n, kLanes at a time; fn takes and returns Vf.  out may equal in.
template <typename Fn> [[gnu::always_inline]] inline void map(const float* in, float* out, int64_t n, const Fn& fn) {
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) store(out + k, fn(load(in + k)));
    if (k < n) store_partial(out + k, fn(load_partial(in + k, n - k, 0.0f)), n - k);
}

// out[k] = fn(a[k], b[k]) for k < n, kLanes at a time; fn takes two Vf and returns one.  out may equal a or b.
template <typename Fn>
[[gnu::always_inline]] inline void map2(const float* a, const float* b, float* out, int64_t n, const Fn& fn) {
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) store(out + k, fn(load(a + k), load(b + k)));
    if (k < n) store_partial(out + k, fn(load_partial(a + k, n - k, 0.0f), load_partial(b + k, n - k, 0.0f)), n - k);
}

// Largest element of x[0..n), n >= 1 (NaN-propagation is not guaranteed).
[[gnu::always_inline]] inline float reduce_max(const float* x, int64_t n) {
    Vf m = splat(-__builtin_inff());
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) m = max(m, load(x + k));
    if (k < n) m = max(m, load_partial(x + k, n - k, -__builtin_inff()));
    return horizontal_max(m);
}

// out[k] = exp(in[k] - shift) for k < n; returns the sum of the outputs.  out may equal in.
[[gnu::always_inline]] inline float exp_shifted_sum(const float* in, float* out, int64_t n, float shift) {
    Vf sum{};
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) {
        const Vf e = exp(load(in + k) - shift);
        store(out + k, e);
        sum += e;
    }
    if (k < n) {
        const Vf e = exp(load_partial(in + k, n - k, -__builtin_inff()) - shift);
        store_partial(out + k, e, n - k);
        sum += e;
    }
    return horizontal_sum(sum);
}

}  // namespace tessera::cpu::vec
