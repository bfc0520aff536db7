#include "util/pointwise_conv.h"

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps/_mm512_min_ps as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <array>
#include <utility>

#include "util/conv_epilogue_avx512.h"
#include "util/lane_gemm.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kPanel = 64;  // positions per register tile

}  // namespace

// The same CPUs (and the same TESSERA_CPU_MAX_ISA cap) as the lane kernels.
bool pointwise_conv_supported() { return lane_gemm_supported(); }

bool pointwise_conv_pays_off(int64_t channels, int64_t positions) {
    const int64_t covered = (positions + kPanel - 1) / kPanel * kPanel;
    return channels <= 128 && positions > 0 && covered * 7 <= positions * 8;
}

PointwiseFilters::PointwiseFilters(const float* w, int64_t filters, int64_t channels)
    : filters_(filters), channels_(channels) {
    const int64_t blocks = (filters + kBlock - 1) / kBlock;
    data_.assign(static_cast<size_t>(std::max<int64_t>(1, blocks * channels * kBlock)), 0.0f);
    for (int64_t k = 0; k < filters; ++k) {
        float* dst = data_.data() + (k / kBlock) * channels * kBlock + k % kBlock;
        for (int64_t c = 0; c < channels; ++c) dst[c * kBlock] = w[k * channels + c];
    }
}

#if TESSERA_CPU_X86  // the AVX-512 tiles and the entry point that runs them
namespace {

// kRows filters x up to 64 positions over all channels.  x: the positions' first channel, rows ldx apart; w: a
// packed block [channels][kBlock]; y and z: the tile's first filter row, rows ldy apart.  kFull: all 64 positions
// are there (no masks).
template <int kRows, bool kFull>
__attribute__((target("avx512f"))) void row_tile(int64_t channels, const float* x, int64_t ldx, const float* w,
                                                 const float* bias, float* y, const float* z, int64_t ldy,
                                                 int64_t cols, const ConvEpilogue* e, bool vector_act) {
    __mmask16 masks[4];
    for (int v = 0; v < 4; ++v) {
        const int64_t live = std::clamp<int64_t>(cols - 16 * v, 0, 16);
        masks[v] = live >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << live) - 1);
    }
    __m512 acc[kRows][4];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
        const __m512 start = _mm512_set1_ps(bias != nullptr ? bias[r] : 0.0f);
        for (int v = 0; v < 4; ++v) acc[r][v] = start;
    }
    for (int64_t c = 0; c < channels; ++c) {
        const float* xc = x + c * ldx;
        __m512 xv[4];
        for (int v = 0; v < 4; ++v) xv[v] = kFull ? _mm512_loadu_ps(xc + 16 * v) : _mm512_maskz_loadu_ps(masks[v], xc + 16 * v);
        const float* wc = w + c * PointwiseFilters::kBlock;
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
            const __m512 wv = _mm512_set1_ps(wc[r]);
            for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(wv, xv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < 4; ++v) {
            const int64_t at = r * ldy + 16 * v;
            __m512 out = acc[r][v];
            if (z != nullptr) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(masks[v], z + at));
            if (vector_act) out = activate(out, *e);
            _mm512_mask_storeu_ps(y + at, masks[v], out);
        }
    }
}

using RowTileFn = void (*)(int64_t, const float*, int64_t, const float*, const float*, float*, const float*, int64_t,
                           int64_t, const ConvEpilogue*, bool);

template <bool kFull, int... kRows>
constexpr std::array<RowTileFn, sizeof...(kRows)> row_tiles(std::integer_sequence<int, kRows...>) {
    return {row_tile<kRows + 1, kFull>...};
}
constexpr auto kFullTiles = row_tiles<true>(std::make_integer_sequence<int, PointwiseFilters::kBlock>());
constexpr auto kEdgeTiles = row_tiles<false>(std::make_integer_sequence<int, PointwiseFilters::kBlock>());


}  // namespace

void pointwise_conv(ThreadPool& pool, const PointwiseFilters& w, const float* x, int64_t positions, const float* bias,
                    const ConvEpilogue& epilogue, const float* z, float* y) {
    const int64_t K = w.filters(), C = w.channels(), P = positions;
    const int64_t panels = (P + kPanel - 1) / kPanel, blocks = (K + PointwiseFilters::kBlock - 1) / PointwiseFilters::kBlock;
    const ConvEpilogue* e = epilogue.active() ? &epilogue : nullptr;
    const bool vector_act = e != nullptr && vector_activation(*e);
    // Tasks are (position panel, group of filter blocks); filter groups split only when panels are too few.
    const int64_t groups = std::min(blocks, std::max<int64_t>(1, (4 * pool.size() + panels - 1) / panels));
    const int64_t blocks_per_group = (blocks + groups - 1) / groups;
    pool.parallel_for(panels * groups, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t panel = t / groups, group = t % groups;
            const int64_t p0 = panel * kPanel, cols = std::min(kPanel, P - p0);
            const int64_t b1 = std::min(blocks, (group + 1) * blocks_per_group);
            for (int64_t b = group * blocks_per_group; b < b1; ++b) {
                const int64_t k0 = b * PointwiseFilters::kBlock, rows = std::min(PointwiseFilters::kBlock, K - k0);
                const RowTileFn fn = cols == kPanel ? kFullTiles[rows - 1] : kEdgeTiles[rows - 1];
                fn(C, x + p0, P, w.block(b), bias != nullptr ? bias + k0 : nullptr, y + k0 * P + p0,
                   z != nullptr ? z + k0 * P + p0 : nullptr, P, cols, e, vector_act);
                if (e != nullptr && !vector_act) {
                    for (int64_t r = 0; r < rows; ++r)
                        e->apply(y + (k0 + r) * P + p0, static_cast<const float*>(nullptr), cols);
                }
            }
        }
    });
}
#else  // never called: reached only where pointwise_conv_supported()
void pointwise_conv(ThreadPool&, const PointwiseFilters&, const float*, int64_t, const float*, const ConvEpilogue&,
                    const float*, float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
