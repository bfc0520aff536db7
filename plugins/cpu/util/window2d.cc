// Direct 2-D window kernels.  Depthwise convolution: every output row is computed 16 columns at a time in registers,
// each tap one masked load (two and a lane shuffle for stride 2) and one FMA, straight from the input plane.  Masked lanes read nothing
// (AVX-512 masked loads do not fault), so the zero padding needs no padded copy of the plane, and the output is
// written once, with the bias, the sum and the activation applied on the way out.  Depthwise layers are memory-bound;
// this reads each input row KH times from L1 and writes each output element once.
#include "util/window2d.h"

#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps/_mm512_min_ps as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace tessera::cpu {

namespace {

bool avx512_allowed() {
    static const bool allowed = [] {
        const char* cap = std::getenv("TESSERA_CPU_MAX_ISA");
        const std::string max_isa = cap != nullptr ? cap : "";
        return max_isa != "avx2" && max_isa != "none" && __builtin_cpu_supports("avx512f");
    }();
    return allowed;
}

// Lanes l in [0, 16) with lo <= start + l < hi.
__attribute__((target("avx512f"))) inline __mmask16 lanes_inside(int64_t start, int64_t lo, int64_t hi) {
    const int64_t first = std::clamp<int64_t>(lo - start, 0, 16), last = std::clamp<int64_t>(hi - start, 0, 16);
    if (first >= last) return 0;
    const uint32_t upto_last = last >= 16 ? 0xFFFFu : (1u << last) - 1u;
    const uint32_t from_first = ~((1u << first) - 1u);
    return static_cast<__mmask16>(upto_last & from_first);
}

// Input columns iw0, iw0 + kStride, ... (16 of them) of one row of width W: one load for stride 1, two and a lane
// shuffle for stride 2.  Columns outside the row read as `fill` (masked lanes load nothing, so nothing faults);
// `interior` says every column is inside.
template <int kStride>
__attribute__((target("avx512f"))) inline __m512 window_columns(const float* row, int64_t iw0, int64_t W,
                                                                 bool interior, __m512 fill) {
    if constexpr (kStride == 1) {
        return interior ? _mm512_loadu_ps(row + iw0) : _mm512_mask_loadu_ps(fill, lanes_inside(iw0, 0, W), row + iw0);
    } else {
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512 lo = interior ? _mm512_loadu_ps(row + iw0)
                                   : _mm512_mask_loadu_ps(fill, lanes_inside(iw0, 0, W), row + iw0);
        const __m512 hi = interior ? _mm512_loadu_ps(row + iw0 + 16)
                                   : _mm512_mask_loadu_ps(fill, lanes_inside(iw0 + 16, 0, W), row + iw0 + 16);
        return _mm512_permutex2var_ps(lo, even, hi);
    }
}

__attribute__((target("avx512f"))) inline __m512 activate(__m512 v, const ConvEpilogue& e) {
    switch (e.activation) {
        case ConvEpilogue::Activation::None: return v;
        case ConvEpilogue::Activation::Relu: return _mm512_max_ps(v, _mm512_setzero_ps());
        case ConvEpilogue::Activation::Clip:
            return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(e.alpha)), _mm512_set1_ps(e.beta));
        case ConvEpilogue::Activation::LeakyRelu: {
            const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
            return _mm512_mask_mul_ps(v, negative, v, _mm512_set1_ps(e.alpha));
        }
        case ConvEpilogue::Activation::HardSigmoid: {
            const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(e.alpha), _mm512_set1_ps(e.beta));
            return _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
        }
        default: return v;  // transcendental activations: applied afterwards by the scalar epilogue
    }
}

bool vector_activation(const ConvEpilogue& e) {
    using A = ConvEpilogue::Activation;
    return e.activation == A::None || e.activation == A::Relu || e.activation == A::Clip ||
           e.activation == A::LeakyRelu || e.activation == A::HardSigmoid;
}

// One output plane.  kStride is the column stride (1 or 2); rows may have any stride and dilation.  Vectors whose
// taps all fall inside the row (all but the first and last of a row, for the usual small pads) take unmasked loads;
// the others compute their lane masks.
template <int kStride>
__attribute__((target("avx512f"))) void plane(const WindowGeometry& g, const float* x, const float* w, float bias,
                                              float* y, const ConvEpilogue& e, const float* z, bool vector_act) {
    const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
    const int64_t KH = g.kernel[0], KW = g.kernel[1], SH = g.strides[0], DH = g.dilations[0], DW = g.dilations[1];
    const int64_t top = g.pads_begin[0], left = g.pads_begin[1];
    const __m512 zero = _mm512_setzero_ps();
    constexpr int64_t kMaxHoisted = 25;  // up to 5x5 windows keep their weights in registers
    __m512 weights[kMaxHoisted];
    const bool hoisted = KH * KW <= kMaxHoisted;
    if (hoisted)
        for (int64_t t = 0; t < KH * KW; ++t) weights[t] = _mm512_set1_ps(w[t]);
    const __m512 bias_v = _mm512_set1_ps(bias);
    const int64_t reach = (KW - 1) * DW + 16 * kStride;  // input columns one vector's taps span

    for (int64_t oh = 0; oh < OH; ++oh) {
        float* yrow = y + oh * OW;
        const float* zrow = z != nullptr ? z + oh * OW : nullptr;
        const auto [kh_first, kh_last] = taps_inside(oh * SH - top, KH, DH, H);
        for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
            const int64_t base = ow0 * kStride - left;  // input column of lane 0, tap 0
            const bool interior = base >= 0 && base + reach <= W && ow0 + 16 <= OW;
            const __mmask16 out_mask = lanes_inside(ow0, 0, OW);
            __m512 acc = bias_v;
            for (int64_t kh = kh_first; kh < kh_last; ++kh) {
                const float* row = x + (oh * SH - top + kh * DH) * W;
                for (int64_t kw = 0; kw < KW; ++kw) {
                    const __m512 v = window_columns<kStride>(row, base + kw * DW, W, interior, zero);
                    const int64_t t = kh * KW + kw;
                    acc = _mm512_fmadd_ps(hoisted ? weights[t] : _mm512_set1_ps(w[t]), v, acc);
                }
            }
            if (zrow != nullptr) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(out_mask, zrow + ow0));
            if (vector_act) acc = activate(acc, e);
            _mm512_mask_storeu_ps(yrow + ow0, out_mask, acc);
        }
        if (!vector_act) e.apply(yrow, static_cast<const float*>(nullptr), OW);
    }
}

// One max-pool output plane, as plane<> above with max instead of multiply-add; lanes in padding load as the lowest
// float so that they never win.
template <int kStride>
__attribute__((target("avx512f"))) void max_plane(const WindowGeometry& g, const float* x, float* y) {
    const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
    const int64_t KH = g.kernel[0], KW = g.kernel[1], SH = g.strides[0], DH = g.dilations[0], DW = g.dilations[1];
    const int64_t top = g.pads_begin[0], left = g.pads_begin[1];
    const __m512 lowest = _mm512_set1_ps(std::numeric_limits<float>::lowest());
    const int64_t reach = (KW - 1) * DW + 16 * kStride;
    for (int64_t oh = 0; oh < OH; ++oh) {
        const auto [kh_first, kh_last] = taps_inside(oh * SH - top, KH, DH, H);
        for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
            const int64_t base = ow0 * kStride - left;
            const bool interior = base >= 0 && base + reach <= W;
            __m512 acc = lowest;
            for (int64_t kh = kh_first; kh < kh_last; ++kh) {
                const float* row = x + (oh * SH - top + kh * DH) * W;
                for (int64_t kw = 0; kw < KW; ++kw) {
                    const __m512 v = window_columns<kStride>(row, base + kw * DW, W, interior, lowest);
                    acc = _mm512_max_ps(acc, v);
                }
            }
            _mm512_mask_storeu_ps(y + oh * OW + ow0, lanes_inside(ow0, 0, OW), acc);
        }
    }
}

}  // namespace

bool max_pool2d_direct_supported(const WindowGeometry& g) {
    return avx512_allowed() && g.rank() == 2 && (g.strides[1] == 1 || g.strides[1] == 2);
}

void max_pool2d_direct(ThreadPool& pool, const WindowGeometry& g, const float* x, int64_t planes, float* y) {
    const int64_t in_plane = g.input[0] * g.input[1], out_plane = g.output[0] * g.output[1];
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_plane * g.kernel[0] * g.kernel[1]));
    pool.parallel_for(planes, grain, [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) {
            if (g.strides[1] == 1) max_plane<1>(g, x + p * in_plane, y + p * out_plane);
            else max_plane<2>(g, x + p * in_plane, y + p * out_plane);
        }
    });
}

bool depthwise_direct_supported(const WindowGeometry& g) {
    return avx512_allowed() && g.rank() == 2 && (g.strides[1] == 1 || g.strides[1] == 2);
}

void depthwise_conv2d_direct(ThreadPool& pool, const WindowGeometry& g, const float* x, const float* w,
                             const float* bias, int64_t batch, int64_t in_channels, int64_t out_channels, float* y,
                             const ConvEpilogue& epilogue, const float* z) {
    const int64_t in_plane = g.input[0] * g.input[1], out_plane = g.output[0] * g.output[1];
    const int64_t taps = g.kernel[0] * g.kernel[1], multiplier = out_channels / in_channels;
    const bool vector_act = vector_activation(epilogue);
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_plane * taps));
    pool.parallel_for(batch * out_channels, grain, [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) {
            const int64_t n = p / out_channels, oc = p % out_channels;
            const float* xp = x + (n * in_channels + oc / multiplier) * in_plane;
            float* yp = y + p * out_plane;
            const float* zp = z != nullptr ? z + p * out_plane : nullptr;
            const float b = bias != nullptr ? bias[oc] : 0.0f;
            if (g.strides[1] == 1) plane<1>(g, xp, w + oc * taps, b, yp, epilogue, zp, vector_act);
            else plane<2>(g, xp, w + oc * taps, b, yp, epilogue, zp, vector_act);
        }
    });
}

}  // namespace tessera::cpu
