// Branch-free float32 exp / erfc / tanh for the Gelu family, written as plain loops over arrays so that the
// compiler vectorizes them (the library is built with -fno-trapping-math and -fno-math-errno, which lets it turn the
// selects into vector min/max/blend; results are unchanged by those flags).  libm's scalar calls are 10x slower
// here and never vectorize.
//
// Accuracy (float32): exp within 2 ulp over [-87, 88] (Cody-Waite reduction, degree-6 polynomial); erfc with a
// relative error below 3e-7 (the classic Chebyshev fit with fractional error 1.2e-7, times exp).  GELU's 1 + erf
// and 1 + tanh are formed from erfc and from 2 / (1 + exp(-2u)), so the negative tails keep their relative
// accuracy.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cmath>
#include <cstdint>

namespace tessera::contrib::fast {

inline float exp(float x) {
    x = std::min(std::max(x, -87.0f), 88.0f);
    // n = round(x / ln 2) through the 1.5 * 2^23 trick (valid for |x / ln 2| < 2^22).
    const float shifted = x * 1.44269504088896341f + 12582912.0f;
    const float n = shifted - 12582912.0f;
    const int32_t ni = std::bit_cast<int32_t>(shifted) - 0x4B400000;
    // r = x - n ln 2, with ln 2 split so that n * kLn2Hi is exact.
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * std::bit_cast<float>((ni + 127) << 23);
}

// erfc(z) for z >= 0.
inline float erfc_nonnegative(float z) {
    const float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * exp(p - z * z);
}

// The loops (fast_math.cc, compiled for AVX-512, AVX2+FMA and the baseline ISA, chosen at load time), in place:
//   gelu:       0.5 x (1 + erf(x / sqrt 2))
//   fast_gelu:  0.5 x (1 + tanh(x (0.035677408136300125 x^2 + 0.7978845608028654)))
//   quick_gelu: x sigmoid(alpha x)
void gelu(float* x, size_t n);
void fast_gelu(float* x, size_t n);
void quick_gelu(float* x, size_t n, float alpha);

}  // namespace tessera::contrib::fast
