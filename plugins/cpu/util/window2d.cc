// Direct 2-D window kernels.  Depthwise convolution: every output row is computed 16 columns at a time in registers,
// each tap one masked load (two and a lane shuffle for stride 2) and one FMA, straight from the input plane.  Masked lanes read nothing
// (AVX-512 masked loads do not fault), so the zero padding needs no padded copy of the plane, and the output is
// written once, with the bias, the sum and the activation applied on the way out.  Depthwise layers are memory-bound;
// this reads each input row KH times from L1 and writes each output element once.
#include "util/window2d.h"

#include "util/conv_epilogue_avx512.h"

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

// Masked loads of one column vector's taps: for each kw, the lanes inside the row (two masks for stride 2, one per
// loaded half).  They depend on the column only, so a plane computes them once per column vector, not per row.
constexpr int64_t kMaxTapColumns = 16;

template <int kStride>
struct ColumnTaps {
    bool interior = false;  // every tap of every lane inside the row: unmasked loads
    int64_t base = 0;       // input column of lane 0, tap 0
    __mmask16 lo[kMaxTapColumns] = {}, hi[kMaxTapColumns] = {};
};

template <int kStride>
__attribute__((target("avx512f"))) inline __m512 tap_columns(const float* row, const ColumnTaps<kStride>& c,
                                                             int64_t kw, int64_t DW, __m512 fill) {
    const float* at = row + c.base + kw * DW;
    if constexpr (kStride == 1) {
        return c.interior ? _mm512_loadu_ps(at) : _mm512_mask_loadu_ps(fill, c.lo[kw], at);
    } else {
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512 lo = c.interior ? _mm512_loadu_ps(at) : _mm512_mask_loadu_ps(fill, c.lo[kw], at);
        const __m512 hi = c.interior ? _mm512_loadu_ps(at + 16) : _mm512_mask_loadu_ps(fill, c.hi[kw], at + 16);
        return _mm512_permutex2var_ps(lo, even, hi);
    }
}

// The masks of one column vector's taps (16 output columns from ow0).
template <int kStride>
__attribute__((target("avx512f"))) inline ColumnTaps<kStride> column_taps(const WindowGeometry& g, int64_t ow0) {
    const int64_t W = g.input[1], KW = g.kernel[1], DW = g.dilations[1];
    ColumnTaps<kStride> c;
    c.base = ow0 * kStride - g.pads_begin[1];
    c.interior = c.base >= 0 && c.base + (KW - 1) * DW + 16 * kStride <= W && ow0 + 16 <= g.output[1];
    if (!c.interior) {
        for (int64_t kw = 0; kw < KW; ++kw) {
            c.lo[kw] = lanes_inside(c.base + kw * DW, 0, W);
            c.hi[kw] = lanes_inside(c.base + kw * DW + 16, 0, W);
        }
    }
    return c;
}

// A row of zeros that stands for the rows of the padding, so that every output row runs every tap (no per-row tap
// ranges, no dependency chains in edge rows).  Rows up to kZeroRowWidth - 64 wide use it.
constexpr int64_t kZeroRowWidth = 4096;
alignas(64) const float kZeroRow[kZeroRowWidth] = {};

// Rows oh .. oh + kRows - 1 of one column vector.  kRows independent accumulators keep the FMA pipes busy: one
// accumulator per vector would wait out the FMA latency at every tap.
template <int kStride, int kRows>
__attribute__((target("avx512f"))) void window_rows(const WindowGeometry& g, const float* x, const __m512* weights,
                                                    const float* w, bool hoisted, __m512 bias,
                                                    const ColumnTaps<kStride>& c, int64_t oh, int64_t ow0, float* y,
                                                    const ConvEpilogue& e, const float* z, bool vector_act) {
    const int64_t H = g.input[0], W = g.input[1], OW = g.output[1], KH = g.kernel[0], KW = g.kernel[1];
    const int64_t SH = g.strides[0], DH = g.dilations[0], DW = g.dilations[1], top = g.pads_begin[0];
    __m512 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = bias;
    for (int64_t kh = 0; kh < KH; ++kh) {
        const float* rows[kRows];
        for (int r = 0; r < kRows; ++r) {
            const int64_t ih = (oh + r) * SH - top + kh * DH;
            rows[r] = ih >= 0 && ih < H ? x + ih * W : kZeroRow;
        }
        for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t t = kh * KW + kw;
            const __m512 wt = hoisted ? weights[t] : _mm512_set1_ps(w[t]);
            for (int r = 0; r < kRows; ++r) acc[r] = _mm512_fmadd_ps(wt, tap_columns<kStride>(rows[r], c, kw, DW, _mm512_setzero_ps()), acc[r]);
        }
    }
    const __mmask16 out_mask = lanes_inside(ow0, 0, OW);
    for (int r = 0; r < kRows; ++r) {
        const int64_t at = (oh + r) * OW + ow0;
        if (z != nullptr) acc[r] = _mm512_add_ps(acc[r], _mm512_maskz_loadu_ps(out_mask, z + at));
        if (vector_act) acc[r] = activate(acc[r], e);
        _mm512_mask_storeu_ps(y + at, out_mask, acc[r]);
    }
}

// One output plane, 16 output columns at a time, four rows at a time.  kStride is the column stride (1 or 2); rows
// may have any stride and dilation.
template <int kStride>
__attribute__((target("avx512f"))) void plane(const WindowGeometry& g, const float* x, const float* w, float bias,
                                              float* y, const ConvEpilogue& e, const float* z, bool vector_act) {
    const int64_t OH = g.output[0], OW = g.output[1], KH = g.kernel[0], KW = g.kernel[1];
    constexpr int64_t kMaxHoisted = 25;  // up to 5x5 windows keep their weights in registers
    __m512 weights[kMaxHoisted];
    const bool hoisted = KH * KW <= kMaxHoisted;
    if (hoisted)
        for (int64_t t = 0; t < KH * KW; ++t) weights[t] = _mm512_set1_ps(w[t]);
    const __m512 bias_v = _mm512_set1_ps(bias);
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        const ColumnTaps<kStride> c = column_taps<kStride>(g, ow0);
        int64_t oh = 0;
        for (; oh + 4 <= OH; oh += 4)
            window_rows<kStride, 4>(g, x, weights, w, hoisted, bias_v, c, oh, ow0, y, e, z, vector_act);
        switch (OH - oh) {
            case 3: window_rows<kStride, 3>(g, x, weights, w, hoisted, bias_v, c, oh, ow0, y, e, z, vector_act); break;
            case 2: window_rows<kStride, 2>(g, x, weights, w, hoisted, bias_v, c, oh, ow0, y, e, z, vector_act); break;
            case 1: window_rows<kStride, 1>(g, x, weights, w, hoisted, bias_v, c, oh, ow0, y, e, z, vector_act); break;
            default: break;
        }
    }
    if (!vector_act) e.apply(y, static_cast<const float*>(nullptr), OH * OW);
}

// A row of the lowest float standing for the padding rows of a max pool (see kZeroRow).
const float* lowest_row() {
    static const std::vector<float> row(static_cast<size_t>(kZeroRowWidth), std::numeric_limits<float>::lowest());
    return row.data();
}

// Max-pool rows oh .. oh + kRows - 1 of one column vector, as window_rows with max for multiply-add; padding (rows
// and masked lanes) reads as the lowest float, which never wins.
template <int kStride, int kRows>
__attribute__((target("avx512f"))) void max_rows(const WindowGeometry& g, const float* x, const float* lowest,
                                                 const ColumnTaps<kStride>& c, int64_t oh, int64_t ow0, float* y) {
    const int64_t H = g.input[0], W = g.input[1], OW = g.output[1], KH = g.kernel[0], KW = g.kernel[1];
    const int64_t SH = g.strides[0], DH = g.dilations[0], DW = g.dilations[1], top = g.pads_begin[0];
    const __m512 fill = _mm512_set1_ps(std::numeric_limits<float>::lowest());
    __m512 acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = fill;
    for (int64_t kh = 0; kh < KH; ++kh) {
        const float* rows[kRows];
        for (int r = 0; r < kRows; ++r) {
            const int64_t ih = (oh + r) * SH - top + kh * DH;
            rows[r] = ih >= 0 && ih < H ? x + ih * W : lowest;
        }
        for (int64_t kw = 0; kw < KW; ++kw)
            for (int r = 0; r < kRows; ++r) acc[r] = _mm512_max_ps(acc[r], tap_columns<kStride>(rows[r], c, kw, DW, fill));
    }
    const __mmask16 out_mask = lanes_inside(ow0, 0, OW);
    for (int r = 0; r < kRows; ++r) _mm512_mask_storeu_ps(y + (oh + r) * OW + ow0, out_mask, acc[r]);
}

// One max-pool output plane, 16 columns and four rows at a time.
template <int kStride>
__attribute__((target("avx512f"))) void max_plane(const WindowGeometry& g, const float* x, float* y) {
    const int64_t OH = g.output[0], OW = g.output[1];
    const float* lowest = lowest_row();
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        const ColumnTaps<kStride> c = column_taps<kStride>(g, ow0);
        int64_t oh = 0;
        for (; oh + 4 <= OH; oh += 4) max_rows<kStride, 4>(g, x, lowest, c, oh, ow0, y);
        switch (OH - oh) {
            case 3: max_rows<kStride, 3>(g, x, lowest, c, oh, ow0, y); break;
            case 2: max_rows<kStride, 2>(g, x, lowest, c, oh, ow0, y); break;
            case 1: max_rows<kStride, 1>(g, x, lowest, c, oh, ow0, y); break;
            default: break;
        }
    }
}

}  // namespace

bool max_pool2d_direct_supported(const WindowGeometry& g) {
    return avx512_allowed() && g.rank() == 2 && (g.strides[1] == 1 || g.strides[1] == 2) &&
           g.kernel[1] <= kMaxTapColumns && g.input[1] + (g.kernel[1] - 1) * g.dilations[1] + 32 <= kZeroRowWidth;
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
    return avx512_allowed() && g.rank() == 2 && (g.strides[1] == 1 || g.strides[1] == 2) &&
           g.kernel[1] <= kMaxTapColumns && g.input[1] + (g.kernel[1] - 1) * g.dilations[1] + 32 <= kZeroRowWidth;
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
