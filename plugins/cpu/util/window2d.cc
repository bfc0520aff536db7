// Direct 2-D window kernels.  Depthwise convolution: every output row is computed 16 columns at a time in registers,
// each tap one masked load (two and a lane shuffle for stride 2) and one FMA, straight from the input plane.  Masked lanes read nothing
// (AVX-512 masked loads do not fault), so the zero padding needs no padded copy of the plane, and the output is
// written once, with the bias, the sum and the activation applied on the way out.  Depthwise layers are memory-bound;
// this reads each input row KH times from L1 and writes each output element once.
#include "util/window2d.h"

#include "util/conv_epilogue_avx512.h"
#include "util/cpu_isa.h"
#include "util/lane_gemm.h"
#include "util/thread_scratch.h"
#include "util/transpose_avx512.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps/_mm512_min_ps as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

namespace tessera::cpu {

#if TESSERA_CPU_X86  // every kernel here is AVX-512
namespace {

// The AVX-512 kernels' gate, shared with the lane kernels (TESSERA_CPU_MAX_ISA=avx2|none turns them off).
bool avx512_allowed() { return lane_gemm_supported(); }

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

// Interior columns get all-ones masks: the loads are masked either way, because a branch per load between masked
// and plain loads cost more than the masks (and made the compiler spill the accumulators' pointers).
template <int kStride>
struct ColumnTaps {
    int64_t base = 0;  // input column of lane 0, tap 0
    __mmask16 lo[kMaxTapColumns] = {}, hi[kMaxTapColumns] = {};
};

template <int kStride>
__attribute__((target("avx512f"))) inline __m512 tap_columns(const float* row, const ColumnTaps<kStride>& c,
                                                             int64_t kw, int64_t DW, __m512 fill) {
    const float* at = row + c.base + kw * DW;
    if constexpr (kStride == 1) {
        return _mm512_mask_loadu_ps(fill, c.lo[kw], at);
    } else {
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512 lo = _mm512_mask_loadu_ps(fill, c.lo[kw], at);
        const __m512 hi = _mm512_mask_loadu_ps(fill, c.hi[kw], at + 16);
        return _mm512_permutex2var_ps(lo, even, hi);
    }
}

// The masks of one column vector's taps (16 output columns from ow0).
template <int kStride>
__attribute__((target("avx512f"))) inline ColumnTaps<kStride> column_taps(const WindowGeometry& g, int64_t ow0) {
    const int64_t W = g.input[1], KW = g.kernel[1], DW = g.dilations[1];
    ColumnTaps<kStride> c;
    c.base = ow0 * kStride - g.pads_begin[1];
    for (int64_t kw = 0; kw < KW; ++kw) {
        c.lo[kw] = lanes_inside(c.base + kw * DW, 0, W);
        c.hi[kw] = lanes_inside(c.base + kw * DW + 16, 0, W);
    }
    return c;
}

// A row of zeros that stands for the rows of the padding, so that every output row runs every tap (no per-row tap
// ranges, no dependency chains in edge rows).  Rows up to kZeroRowWidth - 64 wide use it.
constexpr int64_t kZeroRowWidth = 4096;
alignas(64) const float kZeroRow[kZeroRowWidth] = {};

// Rows oh .. oh + kRows - 1 of kCols column vectors (16 output columns each, from ow0).  kRows x kCols independent
// accumulators (8) keep both FMA pipes busy: fewer would wait out the FMA latency at every tap.
template <int kStride, int kRows, int kCols>
__attribute__((target("avx512f"))) void window_tile(const WindowGeometry& g, const float* x, const __m512* weights,
                                                    const float* w, bool hoisted, const __m512& bias,
                                                    const ColumnTaps<kStride>* c, int64_t oh, int64_t ow0, float* y,
                                                    const ConvEpilogue& e, const float* z, bool vector_act) {
    const int64_t H = g.input[0], W = g.input[1], OW = g.output[1];
    const int64_t KH = g.kernel[0], KW = g.kernel[1];
    const int64_t SH = g.strides[0], DH = g.dilations[0], DW = g.dilations[1], top = g.pads_begin[0];
    __m512 acc[kRows][kCols];
    for (int r = 0; r < kRows; ++r)
        for (int j = 0; j < kCols; ++j) acc[r][j] = bias;
    for (int64_t kh = 0; kh < KH; ++kh) {
        const float* rows[kRows];
        for (int r = 0; r < kRows; ++r) {
            const int64_t ih = (oh + r) * SH - top + kh * DH;
            rows[r] = ih >= 0 && ih < H ? x + ih * W : kZeroRow;
        }
        for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t t = kh * KW + kw;
            const __m512 wt = hoisted ? weights[t] : _mm512_set1_ps(w[t]);
            for (int r = 0; r < kRows; ++r)
                for (int j = 0; j < kCols; ++j)
                    acc[r][j] = _mm512_fmadd_ps(wt, tap_columns<kStride>(rows[r], c[j], kw, DW, _mm512_setzero_ps()),
                                                acc[r][j]);
        }
    }
    for (int j = 0; j < kCols; ++j) {
        const __mmask16 out_mask = lanes_inside(ow0 + 16 * j, 0, OW);
        for (int r = 0; r < kRows; ++r) {
            const int64_t at = (oh + r) * OW + ow0 + 16 * j;
            if (z != nullptr) acc[r][j] = _mm512_add_ps(acc[r][j], _mm512_maskz_loadu_ps(out_mask, z + at));
            if (vector_act) acc[r][j] = activate(acc[r][j], e);
            _mm512_mask_storeu_ps(y + at, out_mask, acc[r][j]);
        }
    }
}

// A row of the lowest float standing for the padding rows of a max pool (see kZeroRow).
const float* lowest_row() {
    static const std::vector<float> row(static_cast<size_t>(kZeroRowWidth), std::numeric_limits<float>::lowest());
    return row.data();
}

// 3x3 windows with equal row and column strides (1 or 2) and no dilation (MobileNet's depthwise layers, SqueezeNet's
// max pools): rows oh .. oh + kRows - 1 of kCols column vectors.  Each input row's taps are loaded once and serve
// every output row of the tile that reads them (up to three), which halves the loads of window_tile; everything is
// unrolled, so the nine weights, the accumulators and the masks stay in registers.  kMax: a max pool (start and
// padding are the lowest float, no weights, no epilogue) instead of a multiply-add from the bias.
template <int kStride, int kRows, int kCols, bool kMax = false>
__attribute__((target("avx512f"))) void window3x3_tile(const WindowGeometry& g, const float* x, const __m512* weights,
                                                       const __m512& start, const ColumnTaps<kStride>* c, int64_t oh,
                                                       int64_t ow0, float* y, const ConvEpilogue* e, const float* z,
                                                       bool vector_act) {
    constexpr int kInputRows = (kRows - 1) * kStride + 3;
    const int64_t H = g.input[0], W = g.input[1], OW = g.output[1], top = g.pads_begin[0];
    const __m512 fill = kMax ? _mm512_set1_ps(std::numeric_limits<float>::lowest()) : _mm512_setzero_ps();
    const float* padding_row = kMax ? lowest_row() : kZeroRow;
    __m512 acc[kRows][kCols];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
        for (int j = 0; j < kCols; ++j) acc[r][j] = start;
    // GCC does not unroll these nests by itself, and then keeps the accumulators in memory.
#pragma GCC unroll 16
    for (int i = 0; i < kInputRows; ++i) {
        const int64_t ih = oh * kStride - top + i;
        const float* row = ih >= 0 && ih < H ? x + ih * W : padding_row;
#pragma GCC unroll 2
        for (int j = 0; j < kCols; ++j) {
#pragma GCC unroll 3
            for (int kw = 0; kw < 3; ++kw) {
                const __m512 v = tap_columns<kStride>(row, c[j], kw, 1, fill);
#pragma GCC unroll 8
                for (int r = 0; r < kRows; ++r) {
                    const int kh = i - r * kStride;
                    if (kh < 0 || kh >= 3) continue;
                    if constexpr (kMax) acc[r][j] = _mm512_max_ps(acc[r][j], v);
                    else acc[r][j] = _mm512_fmadd_ps(weights[kh * 3 + kw], v, acc[r][j]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int j = 0; j < kCols; ++j) {
        const __mmask16 out_mask = lanes_inside(ow0 + 16 * j, 0, OW);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
            const int64_t at = (oh + r) * OW + ow0 + 16 * j;
            if constexpr (!kMax) {
                if (z != nullptr) acc[r][j] = _mm512_add_ps(acc[r][j], _mm512_maskz_loadu_ps(out_mask, z + at));
                if (vector_act) acc[r][j] = activate(acc[r][j], *e);
            }
            _mm512_mask_storeu_ps(y + at, out_mask, acc[r][j]);
        }
    }
}

// Calls tile(std::integral_constant<int, R>(), oh) over rows [oh, oh_end): kMain rows at a time, then 4, then the
// rest, so that every tile has a compile-time height.  The tiles take their vectors by reference: the lambdas that
// call them are not compiled for AVX-512, and passing an __m512 by value there would change the calling convention
// (clang refuses it).
template <int kMain, typename Tile>
inline void row_tiles(int64_t oh, int64_t oh_end, Tile&& tile) {
    for (; oh + kMain <= oh_end; oh += kMain) tile(std::integral_constant<int, kMain>(), oh);
    if constexpr (kMain > 4) {
        if (oh + 4 <= oh_end) {
            tile(std::integral_constant<int, 4>(), oh);
            oh += 4;
        }
    }
    switch (oh_end - oh) {
        case 3: tile(std::integral_constant<int, 3>(), oh); break;
        case 2: tile(std::integral_constant<int, 2>(), oh); break;
        case 1: tile(std::integral_constant<int, 1>(), oh); break;
        default: break;
    }
}

// Rows [oh, oh_end) of kCols column vectors: 8 accumulators per tile (4 rows x 2 vectors, or 8 rows x 1).  kKW = 3
// takes the 3x3 tiles (plane() checks that they apply).
template <int kStride, int kCols, int kKW>
void column_rows(const WindowGeometry& g, const float* x, const __m512* weights, const float* w, bool hoisted,
                 const __m512& bias, const ColumnTaps<kStride>* c, int64_t oh, int64_t oh_end, int64_t ow0, float* y,
                 const ConvEpilogue& e, const float* z, bool vector_act) {
    row_tiles<8 / kCols>(oh, oh_end, [&](auto rows, int64_t at) {
        if constexpr (kKW == 3)
            window3x3_tile<kStride, rows(), kCols>(g, x, weights, bias, c, at, ow0, y, &e, z, vector_act);
        else
            window_tile<kStride, rows(), kCols>(g, x, weights, w, hoisted, bias, c, at, ow0, y, e, z, vector_act);
    });
}

// One output plane, two column vectors at a time while two are left.  kStride is the
// column stride (1 or 2); rows may have any stride and dilation.
template <int kStride, int kKW>
__attribute__((target("avx512f"))) void plane_rows(const WindowGeometry& g, const float* x, const float* w, float bias,
                                                   float* y, const ConvEpilogue& e, const float* z, bool vector_act) {
    const int64_t OH = g.output[0], OW = g.output[1], KH = g.kernel[0], KW = g.kernel[1];
    constexpr int64_t kMaxHoisted = 25;  // up to 5x5 windows keep their weights in registers
    __m512 weights[kMaxHoisted];
    const bool hoisted = KH * KW <= kMaxHoisted;
    if (hoisted)
        for (int64_t t = 0; t < KH * KW; ++t) weights[t] = _mm512_set1_ps(w[t]);
    const __m512 bias_v = _mm512_set1_ps(bias);
    ColumnTaps<kStride> c[2];
    for (int64_t ow0 = 0; ow0 < OW;) {
        c[0] = column_taps<kStride>(g, ow0);
        if (ow0 + 16 < OW) {
            c[1] = column_taps<kStride>(g, ow0 + 16);
            column_rows<kStride, 2, kKW>(g, x, weights, w, hoisted, bias_v, c, 0, OH, ow0, y, e, z,
                                         vector_act);
            ow0 += 32;
        } else {
            column_rows<kStride, 1, kKW>(g, x, weights, w, hoisted, bias_v, c, 0, OH, ow0, y, e, z,
                                         vector_act);
            ow0 += 16;
        }
    }
    if (!vector_act) e.apply(y, static_cast<const float*>(nullptr), OH * OW);
}

template <int kStride>
void plane(const WindowGeometry& g, const float* x, const float* w, float bias, float* y, const ConvEpilogue& e, const float* z, bool vector_act) {
    const bool unit_dilation = g.dilations[0] == 1 && g.dilations[1] == 1;
    if (g.kernel[0] == 3 && g.kernel[1] == 3 && g.strides[0] == kStride && unit_dilation)
        plane_rows<kStride, 3>(g, x, w, bias, y, e, z, vector_act);
    else
        plane_rows<kStride, 0>(g, x, w, bias, y, e, z, vector_act);
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

// One max-pool output plane: 3x3 windows on the tiles above, others 16 columns and four rows at a time.
template <int kStride>
__attribute__((target("avx512f"))) void max_plane(const WindowGeometry& g, const float* x, float* y) {
    const int64_t OH = g.output[0];
    const int64_t OW = g.output[1];
    const float* lowest = lowest_row();
    if (g.kernel[0] == 3 && g.kernel[1] == 3 && g.strides[0] == kStride && g.dilations[0] == 1 &&
        g.dilations[1] == 1) {
        const __m512 start = _mm512_set1_ps(std::numeric_limits<float>::lowest());
        ColumnTaps<kStride> c[2];
        for (int64_t ow0 = 0; ow0 < OW;) {
            c[0] = column_taps<kStride>(g, ow0);
            if (ow0 + 16 < OW) {
                c[1] = column_taps<kStride>(g, ow0 + 16);
                row_tiles<4>(0, OH, [&](auto rows, int64_t at) {
                    window3x3_tile<kStride, rows(), 2, true>(g, x, nullptr, start, c, at, ow0, y, nullptr, nullptr,
                                                             false);
                });
                ow0 += 32;
            } else {
                row_tiles<8>(0, OH, [&](auto rows, int64_t at) {
                    window3x3_tile<kStride, rows(), 1, true>(g, x, nullptr, start, c, at, ow0, y, nullptr, nullptr,
                                                             false);
                });
                ow0 += 16;
            }
        }
        return;
    }
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
        const ColumnTaps<kStride> c = column_taps<kStride>(g, ow0);
        row_tiles<4>(0, OH,
                     [&](auto rows, int64_t at) { max_rows<kStride, rows()>(g, x, lowest, c, at, ow0, y); });
    }
}

// ---- Depthwise convolution on channel blocks (planes with short rows) ----------------------------------------
// With rows of half a vector or less (MobileNet's 7x7 layers) plane() leaves most lanes idle and spends more on
// each plane's setup than on its multiply-adds.  Here 16 channels go in the lanes: their input planes are transposed
// into a zero-padded [Hp][Wp][16] tile, every output position is KH*KW multiply-adds of whole vectors (four
// positions at a time), and the [OH][OW][16] results are transposed back into the 16 output planes, with the bias,
// the sum and the activation applied on the way.

constexpr int64_t kMaxBlockedTaps = 25;

__attribute__((target("avx512f"))) inline __mmask16 first_lanes(int64_t count) {
    return count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(count, 0)) - 1);
}

// Output positions ow .. ow + kCount - 1 of row oh, from the tile, into out[position][16].
template <int kCount>
__attribute__((target("avx512f"))) inline void blocked_positions(const WindowGeometry& g, const float* tile,
                                                                 int64_t Wp, const __m512* weights, __m512 bias,
                                                                 int64_t oh, int64_t ow, float* out) {
    const int64_t KH = g.kernel[0], KW = g.kernel[1], SH = g.strides[0], SW = g.strides[1];
    const int64_t DH = g.dilations[0], DW = g.dilations[1], OW = g.output[1];
    __m512 acc[kCount];
    for (int i = 0; i < kCount; ++i) acc[i] = bias;
    for (int64_t kh = 0; kh < KH; ++kh) {
        const float* row = tile + (oh * SH + kh * DH) * Wp * 16;
        for (int64_t kw = 0; kw < KW; ++kw) {
            const __m512 wt = weights[kh * KW + kw];
            for (int i = 0; i < kCount; ++i)
                acc[i] = _mm512_fmadd_ps(wt, _mm512_loadu_ps(row + ((ow + i) * SW + kw * DW) * 16), acc[i]);
        }
    }
    for (int i = 0; i < kCount; ++i) _mm512_storeu_ps(out + (oh * OW + ow + i) * 16, acc[i]);
}

// Channels [c0, c0 + live) of image n (live <= 16).
__attribute__((target("avx512f"))) void depthwise_block(const WindowGeometry& g, const float* x, const float* w,
                                                        const float* bias, int64_t channels, int64_t n, int64_t c0,
                                                        int64_t live, float* y, const ConvEpilogue& e,
                                                        const float* z, bool vector_act, float* tile) {
    const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
    const int64_t KH = g.kernel[0], KW = g.kernel[1], taps = KH * KW;
    const int64_t top = g.pads_begin[0], left = g.pads_begin[1];
    const int64_t Hp = (OH - 1) * g.strides[0] + (KH - 1) * g.dilations[0] + 1;
    const int64_t Wp = (OW - 1) * g.strides[1] + (KW - 1) * g.dilations[1] + 1;
    float* out = tile + Hp * Wp * 16;
    std::fill(tile, tile + Hp * Wp * 16, 0.0f);
    // The input planes, transposed 16 columns at a time into the tile's positions.
    for (int64_t ih = 0; ih < H; ++ih) {
        const int64_t ph = ih + top;
        if (ph < 0 || ph >= Hp) continue;
        for (int64_t iw0 = 0; iw0 < W; iw0 += 16) {
            const int64_t cols = std::min<int64_t>(16, W - iw0);
            __m512 r[16];
            for (int c = 0; c < 16; ++c) {
                r[c] = c < live ? _mm512_maskz_loadu_ps(first_lanes(cols), x + ((n * channels + c0 + c) * H + ih) * W + iw0)
                                : _mm512_setzero_ps();
            }
            transpose16x16(r);
            for (int64_t j = 0; j < cols; ++j) {
                const int64_t pw = iw0 + j + left;
                if (pw >= 0 && pw < Wp) _mm512_storeu_ps(tile + (ph * Wp + pw) * 16, r[j]);
            }
        }
    }
    alignas(64) float lanes[16];
    __m512 weights[kMaxBlockedTaps];
    for (int64_t t = 0; t < taps; ++t) {
        for (int c = 0; c < 16; ++c) lanes[c] = c < live ? w[(c0 + c) * taps + t] : 0.0f;
        weights[t] = _mm512_load_ps(lanes);
    }
    for (int c = 0; c < 16; ++c) lanes[c] = c < live && bias != nullptr ? bias[c0 + c] : 0.0f;
    const __m512 bias_v = _mm512_load_ps(lanes);
    for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t ow = 0;
        for (; ow + 4 <= OW; ow += 4) blocked_positions<4>(g, tile, Wp, weights, bias_v, oh, ow, out);
        for (; ow < OW; ++ow) blocked_positions<1>(g, tile, Wp, weights, bias_v, oh, ow, out);
    }
    // Back to the planes, one output row (<= 16 positions) at a time.
    const __mmask16 row_mask = first_lanes(OW);
    for (int64_t oh = 0; oh < OH; ++oh) {
        __m512 r[16];
        for (int j = 0; j < 16; ++j) r[j] = j < OW ? _mm512_loadu_ps(out + (oh * OW + j) * 16) : _mm512_setzero_ps();
        transpose16x16(r);
        for (int64_t c = 0; c < live; ++c) {
            const int64_t at = ((n * channels + c0 + c) * OH + oh) * OW;
            __m512 v = r[c];
            if (z != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(row_mask, z + at));
            if (vector_act) v = activate(v, e);
            _mm512_mask_storeu_ps(y + at, row_mask, v);
        }
    }
    if (!vector_act) {
        for (int64_t c = 0; c < live; ++c)
            e.apply(y + (n * channels + c0 + c) * OH * OW, static_cast<const float*>(nullptr), OH * OW);
    }
}

bool depthwise_blocked_applies(const WindowGeometry& g, int64_t multiplier) {
    // Measured on MobileNetV2's layers: 7x7 outputs gain 1.6x; at 14x14 the transposes cost what the lanes save.
    return multiplier == 1 && g.output[1] <= 8 && g.kernel[0] * g.kernel[1] <= kMaxBlockedTaps;
}

void depthwise_conv2d_blocked(ThreadPool& pool, const WindowGeometry& g, const float* x, const float* w,
                              const float* bias, int64_t batch, int64_t channels, float* y, const ConvEpilogue& epilogue,
                              const float* z) {
    const int64_t groups = (channels + 15) / 16;
    const int64_t Hp = (g.output[0] - 1) * g.strides[0] + (g.kernel[0] - 1) * g.dilations[0] + 1;
    const int64_t Wp = (g.output[1] - 1) * g.strides[1] + (g.kernel[1] - 1) * g.dilations[1] + 1;
    const bool vector_act = vector_activation(epilogue);
    pool.parallel_for(batch * groups, 1, [&](int64_t first, int64_t last) {
        float* tile = thread_scratch_buffer<float, 10>((Hp * Wp + g.output[0] * g.output[1]) * 16);
        for (int64_t t = first; t < last; ++t) {
            const int64_t n = t / groups, c0 = (t % groups) * 16;
            depthwise_block(g, x, w, bias, channels, n, c0, std::min<int64_t>(16, channels - c0), y, epilogue, z,
                            vector_act, tile);
        }
    });
}

// ---- Depthwise convolution on flattened small planes ------------------------------------------------------------
// With stride 1 and as many output columns as input columns (MobileNet's 7x7 layers), output position p = oh * W + ow
// reads input position p + (kh * DH - top) * W + (kw * DW - left): a fixed shift per tap.  So a whole plane of up to
// 64 positions is up to four vectors, each tap one masked load per vector (the mask drops the lanes whose tap falls
// in the padding), with no transposes and no lanes idle past the end of a short row.  Two planes at a time give
// eight independent accumulators.

constexpr int64_t kMaxFlatVecs = 4;
constexpr int64_t kMaxFlatTaps = 25;

struct FlatTaps {
    int64_t taps = 0;
    int64_t shift[kMaxFlatTaps] = {};
    __mmask16 mask[kMaxFlatVecs][kMaxFlatTaps] = {};
};

FlatTaps flat_taps(const WindowGeometry& g) {
    const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], KH = g.kernel[0], KW = g.kernel[1];
    FlatTaps f;
    f.taps = KH * KW;
    for (int64_t kh = 0; kh < KH; ++kh) {
        for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t t = kh * KW + kw, dh = kh * g.dilations[0] - g.pads_begin[0];
            const int64_t dw = kw * g.dilations[1] - g.pads_begin[1];
            f.shift[t] = dh * W + dw;
            for (int64_t p = 0; p < kMaxFlatVecs * 16; ++p) {
                const int64_t oh = p / W, ow = p % W;
                const bool inside = oh < OH && oh + dh >= 0 && oh + dh < H && ow + dw >= 0 && ow + dw < W;
                if (inside) f.mask[p / 16][t] = static_cast<__mmask16>(f.mask[p / 16][t] | (1u << (p % 16)));
            }
        }
    }
    return f;
}

// Planes c and c + 1 (kPlanes of them) of image n, kVecs vectors each.
template <int kVecs, int kPlanes>
__attribute__((target("avx512f"))) void flat_planes(const FlatTaps& f, const float* x, const float* w,
                                                    const float* bias, int64_t in_plane, int64_t plane, int64_t c,
                                                    float* y,
                                                    const ConvEpilogue& e, const float* z, bool vector_act) {
    __m512 acc[kPlanes][kVecs];
#pragma GCC unroll 2
    for (int q = 0; q < kPlanes; ++q) {
        const __m512 start = _mm512_set1_ps(bias != nullptr ? bias[c + q] : 0.0f);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) acc[q][v] = start;
    }
    for (int64_t t = 0; t < f.taps; ++t) {
#pragma GCC unroll 2
        for (int q = 0; q < kPlanes; ++q) {
            const __m512 wt = _mm512_set1_ps(w[(c + q) * f.taps + t]);
            const float* src = x + q * in_plane + f.shift[t];
#pragma GCC unroll 4
            for (int v = 0; v < kVecs; ++v)
                acc[q][v] = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(f.mask[v][t], src + 16 * v), acc[q][v]);
        }
    }
#pragma GCC unroll 2
    for (int q = 0; q < kPlanes; ++q) {
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) {
            const int64_t live = std::min<int64_t>(16, plane - 16 * v);
            const __mmask16 out_mask = static_cast<__mmask16>(live >= 16 ? 0xFFFFu : (1u << live) - 1u);
            const int64_t at = q * plane + 16 * v;
            if (z != nullptr) acc[q][v] = _mm512_add_ps(acc[q][v], _mm512_maskz_loadu_ps(out_mask, z + at));
            if (vector_act) acc[q][v] = activate(acc[q][v], e);
            _mm512_mask_storeu_ps(y + at, out_mask, acc[q][v]);
        }
    }
}

template <int kVecs>
void flat_range(const FlatTaps& f, const WindowGeometry& g, const float* x, const float* w, const float* bias,
                int64_t channels, int64_t first, int64_t last, float* y, const ConvEpilogue& e, const float* z,
                bool vector_act) {
    const int64_t in_plane = g.input[0] * g.input[1], plane = g.output[0] * g.output[1];
    for (int64_t p = first; p < last;) {
        const int64_t c = p % channels;
        const float* zp = z != nullptr ? z + p * plane : nullptr;
        // Pairs stay within one image (the bias and weights are per channel).
        const int64_t count = p + 1 < last && c + 1 < channels ? 2 : 1;
        const float* xp = x + p * in_plane;
        if (count == 2) flat_planes<kVecs, 2>(f, xp, w, bias, in_plane, plane, c, y + p * plane, e, zp, vector_act);
        else flat_planes<kVecs, 1>(f, xp, w, bias, in_plane, plane, c, y + p * plane, e, zp, vector_act);
        if (!vector_act) e.apply(y + p * plane, static_cast<const float*>(nullptr), count * plane);
        p += count;
    }
}

bool depthwise_flat_applies(const WindowGeometry& g, int64_t multiplier) {
    return multiplier == 1 && g.strides[0] == 1 && g.strides[1] == 1 && g.output[1] == g.input[1] &&
           g.output[0] * g.output[1] <= kMaxFlatVecs * 16 && g.kernel[0] * g.kernel[1] <= kMaxFlatTaps;
}

void depthwise_conv2d_flat(ThreadPool& pool, const WindowGeometry& g, const float* x, const float* w,
                           const float* bias, int64_t batch, int64_t channels, float* y, const ConvEpilogue& epilogue,
                           const float* z) {
    const FlatTaps f = flat_taps(g);
    const int64_t plane = g.output[0] * g.output[1], vecs = (plane + 15) / 16;
    const bool vector_act = vector_activation(epilogue);
    const int64_t grain = std::max<int64_t>(2, 16384 / std::max<int64_t>(1, plane * f.taps));
    pool.parallel_for(batch * channels, grain, [&](int64_t first, int64_t last) {
        switch (vecs) {
            case 1: flat_range<1>(f, g, x, w, bias, channels, first, last, y, epilogue, z, vector_act); break;
            case 2: flat_range<2>(f, g, x, w, bias, channels, first, last, y, epilogue, z, vector_act); break;
            case 3: flat_range<3>(f, g, x, w, bias, channels, first, last, y, epilogue, z, vector_act); break;
            default: flat_range<4>(f, g, x, w, bias, channels, first, last, y, epilogue, z, vector_act); break;
        }
    });
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
    if (depthwise_flat_applies(g, multiplier)) {
        depthwise_conv2d_flat(pool, g, x, w, bias, batch, out_channels, y, epilogue, z);
        return;
    }
    if (depthwise_blocked_applies(g, multiplier)) {
        depthwise_conv2d_blocked(pool, g, x, w, bias, batch, out_channels, y, epilogue, z);
        return;
    }
    const bool vector_act = vector_activation(epilogue);
    // Whole planes per task: splitting planes into row bands (so that each thread would write the rows the next
    // layer's row band reads) was measured slower on 2 threads (MobileNetV2 3.9 -> 4.4 ms), each plane's setup then
    // paid twice.
    const int64_t planes = batch * out_channels;
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_plane * taps));
    pool.parallel_for(planes, grain, [&](int64_t first, int64_t last) {
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
#else  // no direct window kernels: the callers take their portable loops
bool max_pool2d_direct_supported(const WindowGeometry&) { return false; }
void max_pool2d_direct(ThreadPool&, const WindowGeometry&, const float*, int64_t, float*) {
    x86_kernel_unavailable(__func__);
}
bool depthwise_direct_supported(const WindowGeometry&) { return false; }
void depthwise_conv2d_direct(ThreadPool&, const WindowGeometry&, const float*, const float*, const float*, int64_t,
                             int64_t, int64_t, float*, const ConvEpilogue&, const float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
