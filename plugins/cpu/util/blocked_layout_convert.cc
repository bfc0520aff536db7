// CPU provider: conversions between the blocked channel layout (util/blocked_conv.h) and NCHW, plain or with a
// quantization on the way (DequantizeLinear into the layout, QuantizeLinear out of it, the uint8 quantization
// centered on its zero point that dynamically quantized depthwise convolutions read).
#include "util/blocked_conv.h"

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside the min/max intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <type_traits>

#include "util/transpose_avx512.h"

namespace tessera::cpu {

namespace {

// Moves each block of 16 channels between [16][positions] (NCHW) and [positions][16] (blocked).
void reorder_blocks(ThreadPool& pool, const float* src, int64_t N, int64_t C, int64_t positions, float* dst,
                    bool to_blocked_layout) {
    const int64_t channel_step = to_blocked_layout ? positions : 1, position_step = to_blocked_layout ? 1 : kChannelBlock;
    pool.parallel_for(N * (C / kChannelBlock), 1, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b) {
            const float* in = src + b * kChannelBlock * positions;
            float* out = dst + b * kChannelBlock * positions;
            // out in order: blocked destinations position-major, NCHW ones channel-major.
            for (int64_t i = 0; i < kChannelBlock * positions; ++i) {
                const int64_t p = to_blocked_layout ? i / kChannelBlock : i % positions;
                const int64_t c = to_blocked_layout ? i % kChannelBlock : i / positions;
                out[i] = in[c * channel_step + p * position_step];
            }
        }
    });
}

}  // namespace

void to_blocked(ThreadPool& pool, const float* src, int64_t N, int64_t C, int64_t positions, float* dst) {
    reorder_blocks(pool, src, N, C, positions, dst, true);
}

void from_blocked(ThreadPool& pool, const float* src, int64_t N, int64_t C, int64_t positions, float* dst) {
    reorder_blocks(pool, src, N, C, positions, dst, false);
}

#if TESSERA_CPU_X86  // the AVX-512 kernels and the entry points that run them
namespace {

// The 16 channels of one position as 8-bit integers widened to int32.
template <typename In>
__attribute__((target("avx512f"))) inline __m512i widen_bytes(const In* at) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
    return std::is_same_v<In, uint8_t> ? _mm512_cvtepu8_epi32(bytes) : _mm512_cvtepi8_epi32(bytes);
}

// quant::saturate_round's steps (kernels/quantization/quantize_support.h), one lane or sixteen: max(a, b) and
// min(a, b) as a > b ? a : b and a < b ? a : b (NaN ends at low), the rounding by adding and taking 1.5 * 2^23.
constexpr float kRoundMagic = 12582912.0f;
inline float saturate_round_scalar(float v, float zero, float low, float high) {
    auto max = [](float a, float b) { return a > b ? a : b; };
    auto min = [](float a, float b) { return a < b ? a : b; };
    v = min(max(v, (low - 1.0f) - zero), (high + 1.0f) - zero);
    v = ((v + kRoundMagic) - kRoundMagic) + zero;
    return min(max(v, low), high);
}

}  // namespace

namespace {

template <typename In>
__attribute__((target("avx512f"))) void dequantize_to_blocked_avx512(const In* x, int64_t positions, int64_t count,
                                                                     float scale, float zero, float* dst) {
    const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zero);
    int64_t p = 0;
    for (; p + kChannelBlock <= count; p += kChannelBlock) {
        __m512 r[kChannelBlock];
        for (int64_t c = 0; c < kChannelBlock; ++c)
            r[c] = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(widen_bytes(x + c * positions + p)), z), s);
        transpose16x16(r);
        for (int64_t i = 0; i < kChannelBlock; ++i) _mm512_storeu_ps(dst + (p + i) * kChannelBlock, r[i]);
    }
    for (; p < count; ++p)
        for (int64_t c = 0; c < kChannelBlock; ++c)
            dst[p * kChannelBlock + c] = (static_cast<float>(x[c * positions + p]) - zero) * scale;
}

template <typename Out>
__attribute__((target("avx512f"))) void quantize_from_blocked_avx512(const float* src, int64_t count, float scale,
                                                                     float zero, int64_t positions, Out* y) {
    const float low = std::is_same_v<Out, uint8_t> ? 0.0f : -128.0f;
    const float high = std::is_same_v<Out, uint8_t> ? 255.0f : 127.0f;
    const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zero), magic = _mm512_set1_ps(kRoundMagic);
    const __m512 lo = _mm512_set1_ps(low), hi = _mm512_set1_ps(high);
    const __m512 lo1 = _mm512_set1_ps((low - 1.0f) - zero), hi1 = _mm512_set1_ps((high + 1.0f) - zero);
    int64_t p = 0;
    for (; p + kChannelBlock <= count; p += kChannelBlock) {
        __m512 r[kChannelBlock];
        for (int64_t i = 0; i < kChannelBlock; ++i) r[i] = _mm512_loadu_ps(src + (p + i) * kChannelBlock);
        transpose16x16(r);
        for (int64_t c = 0; c < kChannelBlock; ++c) {
            __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(r[c], s), lo1), hi1);
            v = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(v, magic), magic), z);
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(y + c * positions + p),
                             _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
        }
    }
    for (; p < count; ++p)
        for (int64_t c = 0; c < kChannelBlock; ++c)
            y[c * positions + p] =
                static_cast<Out>(static_cast<int32_t>(saturate_round_scalar(src[p * kChannelBlock + c] / scale, zero,
                                                                            low, high)));
}

// dst[p * 16 + c] = q - zero for q = saturate(round_half_even(x / scale) + zero) in [0, 255]: the byte a uint8
// QuantizeLinear (or DynamicQuantizeLinear) makes of x, centered on its zero point; every step exact in float but
// the division, which is the quantization's own.
__attribute__((target("avx512f"))) void quantize_centered_to_blocked_avx512(const float* x, int64_t positions,
                                                                            int64_t count, float scale, float zero,
                                                                            float* dst) {
    const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zero), magic = _mm512_set1_ps(kRoundMagic);
    const __m512 lo = _mm512_set1_ps(0.0f), hi = _mm512_set1_ps(255.0f);
    const __m512 lo1 = _mm512_set1_ps(-1.0f - zero), hi1 = _mm512_set1_ps(256.0f - zero);
    int64_t p = 0;
    for (; p + kChannelBlock <= count; p += kChannelBlock) {
        __m512 r[kChannelBlock];
        for (int64_t c = 0; c < kChannelBlock; ++c) {
            __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(_mm512_loadu_ps(x + c * positions + p), s), lo1), hi1);
            v = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(v, magic), magic), z);
            r[c] = _mm512_sub_ps(_mm512_min_ps(_mm512_max_ps(v, lo), hi), z);
        }
        transpose16x16(r);
        for (int64_t i = 0; i < kChannelBlock; ++i) _mm512_storeu_ps(dst + (p + i) * kChannelBlock, r[i]);
    }
    if (p < count) {  // the last positions the same way, through masked loads (their other lanes unused)
        const int64_t rest = count - p;
        const __mmask16 mask = static_cast<__mmask16>((1u << rest) - 1);
        __m512 r[kChannelBlock];
        for (int64_t c = 0; c < kChannelBlock; ++c) {
            const __m512 loaded = _mm512_maskz_loadu_ps(mask, x + c * positions + p);
            __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(loaded, s), lo1), hi1);
            v = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(v, magic), magic), z);
            r[c] = _mm512_sub_ps(_mm512_min_ps(_mm512_max_ps(v, lo), hi), z);
        }
        transpose16x16(r);
        for (int64_t i = 0; i < rest; ++i) _mm512_storeu_ps(dst + (p + i) * kChannelBlock, r[i]);
    }
}

__attribute__((target("avx512f"))) void blocked_to_planes_avx512(const float* src, int64_t count, int64_t positions,
                                                                  float* y) {
    int64_t p = 0;
    for (; p + kChannelBlock <= count; p += kChannelBlock) {
        __m512 r[kChannelBlock];
        for (int64_t i = 0; i < kChannelBlock; ++i) r[i] = _mm512_loadu_ps(src + (p + i) * kChannelBlock);
        transpose16x16(r);
        for (int64_t c = 0; c < kChannelBlock; ++c) _mm512_storeu_ps(y + c * positions + p, r[c]);
    }
    for (; p < count; ++p)
        for (int64_t c = 0; c < kChannelBlock; ++c) y[c * positions + p] = src[p * kChannelBlock + c];
}

}  // namespace

template <typename In>
void dequantize_to_blocked(const In* x, int64_t positions, int64_t count, float scale, float zero, float* dst) {
    dequantize_to_blocked_avx512(x, positions, count, scale, zero, dst);
}
template <typename Out>
void quantize_from_blocked(const float* src, int64_t count, float scale, float zero, int64_t positions, Out* y) {
    quantize_from_blocked_avx512(src, count, scale, zero, positions, y);
}
template void dequantize_to_blocked<uint8_t>(const uint8_t*, int64_t, int64_t, float, float, float*);
template void dequantize_to_blocked<int8_t>(const int8_t*, int64_t, int64_t, float, float, float*);
template void quantize_from_blocked<uint8_t>(const float*, int64_t, float, float, int64_t, uint8_t*);
template void quantize_from_blocked<int8_t>(const float*, int64_t, float, float, int64_t, int8_t*);
void blocked_to_planes(const float* src, int64_t count, int64_t positions, float* y) {
    blocked_to_planes_avx512(src, count, positions, y);
}
void quantize_centered_to_blocked(const float* x, int64_t positions, int64_t count, float scale, float zero,
                                  float* dst) {
    quantize_centered_to_blocked_avx512(x, positions, count, scale, zero, dst);
}

#else  // never called: the blocked layout and its kernels need lane_gemm_supported() (blocked_layout_enabled())
template <typename In>
void dequantize_to_blocked(const In*, int64_t, int64_t, float, float, float*) {
    x86_kernel_unavailable(__func__);
}
template <typename Out>
void quantize_from_blocked(const float*, int64_t, float, float, int64_t, Out*) {
    x86_kernel_unavailable(__func__);
}
template void dequantize_to_blocked<uint8_t>(const uint8_t*, int64_t, int64_t, float, float, float*);
template void dequantize_to_blocked<int8_t>(const int8_t*, int64_t, int64_t, float, float, float*);
template void quantize_from_blocked<uint8_t>(const float*, int64_t, float, float, int64_t, uint8_t*);
template void quantize_from_blocked<int8_t>(const float*, int64_t, float, float, int64_t, int8_t*);
void blocked_to_planes(const float*, int64_t, int64_t, float*) { x86_kernel_unavailable(__func__); }
void quantize_centered_to_blocked(const float*, int64_t, int64_t, float, float, float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
