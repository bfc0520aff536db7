#include "util/lane_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

namespace tessera::cpu {

namespace {

// Positions per call of the tile loop (a multiple of both tile heights): their results are transposed into y
// together.
constexpr int64_t kPositionChunk = 56;

// kRows positions x kVecs * 16 filters over the whole depth.  w is a panel [depth][kVecs * 16]; position r of step
// k is x[row_offsets[k] + r].  The results go to out[r * kLanePanelWidth + filter].  kRows * kVecs accumulators and
// kVecs filter vectors fill the 32 registers (the broadcast is an operand taken from memory).
template <int kVecs, int kRows>
__attribute__((target("avx512f"))) void lane_tile(int64_t depth, const float* w, const float* x,
                                                  const int64_t* row_offsets, const float* bias, float* out) {
    __m512 acc[kRows][kVecs];
    for (int v = 0; v < kVecs; ++v) {
        const __m512 init = _mm512_load_ps(bias + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) acc[r][v] = init;
    }
    for (int64_t k = 0; k < depth; ++k) {
        const float* xk = x + row_offsets[k];
        const float* wk = w + k * kVecs * 16;
        __m512 wv[kVecs];
        for (int v = 0; v < kVecs; ++v) wv[v] = _mm512_load_ps(wk + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
            const __m512 xv = _mm512_set1_ps(xk[r]);
            for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_fmadd_ps(xv, wv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < kVecs; ++v) _mm512_store_ps(out + r * kLanePanelWidth + 16 * v, acc[r][v]);
    }
}

using LaneTileFn = void (*)(int64_t, const float*, const float*, const int64_t*, const float*, float*);

// Tiles of 1..7 positions for 64-filter panels and 1..14 for 32-filter panels.
template <int kVecs, int... kRows>
constexpr std::array<LaneTileFn, sizeof...(kRows)> tiles(std::integer_sequence<int, kRows...>) {
    return {lane_tile<kVecs, kRows + 1>...};
}
constexpr auto kTiles64 = tiles<4>(std::make_integer_sequence<int, 7>());
constexpr auto kTiles32 = tiles<2>(std::make_integer_sequence<int, 14>());

bool detect_support() {
    const char* cap = std::getenv("TESSERA_CPU_MAX_ISA");
    const std::string max_isa = cap != nullptr ? cap : "";
    return max_isa != "avx2" && max_isa != "none" && __builtin_cpu_supports("avx512f");
}

}  // namespace

bool lane_gemm_supported() {
    static const bool supported = detect_support();
    return supported;
}

void LanePackedFilters::Free::operator()(float* p) const { std::free(p); }

LanePackedFilters::LanePackedFilters(const float* A, int64_t rows, int64_t depth, int64_t lda)
    : rows_(rows), depth_(depth), width_(lane_panel_width_for(rows)) {
    const size_t count = static_cast<size_t>(std::max<int64_t>(1, panels() * depth * width_));
    const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    float* data = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (data == nullptr) throw std::bad_alloc();
    data_.reset(data);
    std::fill(data, data + count, 0.0f);
    for (int64_t m = 0; m < rows; ++m) {
        float* dst = data + (m / width_) * depth * width_ + m % width_;
        const float* src = A + m * lda;
        for (int64_t k = 0; k < depth; ++k) dst[k * width_] = src[k];
    }
}

void lane_gemm_positions(const LanePackedFilters& A, int64_t panel, const float* x, const int64_t* row_offsets,
                         int64_t count, const float* bias, float* y, int64_t ldy) {
    const int64_t width = A.panel_width(), m0 = panel * width;
    const int64_t filters = std::min(width, A.rows() - m0);
    const LaneTileFn* tile_fns = width == kLanePanelWidth ? kTiles64.data() : kTiles32.data();
    const int64_t tile_height = width == kLanePanelWidth ? int64_t(kTiles64.size()) : int64_t(kTiles32.size());
    alignas(64) float panel_bias[kLanePanelWidth] = {};
    if (bias != nullptr) std::copy(bias + m0, bias + m0 + filters, panel_bias);
    alignas(64) float results[kPositionChunk * kLanePanelWidth];
    for (int64_t j0 = 0; j0 < count; j0 += kPositionChunk) {
        const int64_t chunk = std::min(kPositionChunk, count - j0);
        for (int64_t r = 0; r < chunk; r += tile_height) {
            const int64_t rows = std::min(tile_height, chunk - r);
            tile_fns[rows - 1](A.depth(), A.panel(panel), x + j0 + r, row_offsets, panel_bias,
                               results + r * kLanePanelWidth);
        }
        // [position][filter] -> y's rows, one filter at a time (contiguous writes).
        for (int64_t m = 0; m < filters; ++m) {
            float* dst = y + m * ldy + j0;
            for (int64_t j = 0; j < chunk; ++j) dst[j] = results[j * kLanePanelWidth + m];
        }
    }
}

}  // namespace tessera::cpu
