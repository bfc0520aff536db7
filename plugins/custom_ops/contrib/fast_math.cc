// The Gelu-family loops over fast_math.h's exp and erfc, one copy per ISA level (x86-64 with GCC or Clang: the
// loader picks AVX-512, AVX2 + FMA or the baseline copy once; elsewhere the one portable copy).
#include "fast_math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TESSERA_CONTRIB_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSERA_CONTRIB_MULTIVERSION
#endif

namespace tessera::contrib::fast {

TESSERA_CONTRIB_MULTIVERSION void gelu(float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float c = erfc_nonnegative(std::abs(v) * 0.70710678118654752f);  // erfc(|v| / sqrt 2)
        // 1 + erf(v / sqrt 2) = 2 - c for v >= 0, c for v < 0.
        const float one_plus_erf = v >= 0.0f ? 2.0f - c : c;
        x[i] = 0.5f * v * one_plus_erf;
    }
}

TESSERA_CONTRIB_MULTIVERSION void fast_gelu(float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float u = v * (0.035677408136300125f * v * v + 0.7978845608028654f);
        // 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)): no cancellation where tanh u is near -1.
        x[i] = v / (1.0f + exp(-2.0f * u));
    }
}

TESSERA_CONTRIB_MULTIVERSION void quick_gelu(float* x, size_t n, float alpha) {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + exp(-alpha * x[i]));
}

}  // namespace tessera::contrib::fast
