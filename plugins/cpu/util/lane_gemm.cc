#include "util/cpu_isa.h"
#include "util/lane_gemm.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside the unpack and shuffle intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "util/conv_epilogue_avx512.h"
#include "util/thread_scratch.h"
#include "util/transpose_avx512.h"

namespace tessera::cpu {

bool lane_gemm_supported() {
    return cpu_allows(CpuIsa::Avx512);
}

void LanePackedFilters::Free::operator()(float* p) const { std::free(p); }

#if TESSERA_CPU_X86
namespace {
// dst[i * ldd + j] = src[j * lds + i] for a 16 x 16 block.
__attribute__((target("avx512f"))) void transpose_block(const float* src, int64_t lds, float* dst, int64_t ldd) {
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(src + j * lds);
    transpose16x16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
}  // namespace
#endif

LanePackedFilters::LanePackedFilters(const float* A, int64_t rows, int64_t depth, int64_t lda, int64_t width) {
    if (A == nullptr) {
        reserve(rows, depth, width);
        std::fill(data_.get(), data_.get() + capacity_, 0.0f);
        return;
    }
    assign(A, rows, depth, lda, width);
}

void LanePackedFilters::reserve(int64_t rows, int64_t depth, int64_t width) {
    rows_ = rows;
    depth_ = depth;
    width_ = width > 0 ? width : lane_panel_width_for(rows);
    const size_t count = static_cast<size_t>(std::max<int64_t>(1, panels() * depth * width_));
    if (data_ != nullptr && count <= capacity_) return;
    const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    float* data = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (data == nullptr) throw std::bad_alloc();
    data_.reset(data);
    capacity_ = count;
}

void LanePackedFilters::assign(const float* A, int64_t rows, int64_t depth, int64_t lda, int64_t width) {
    reserve(rows, depth, width);
    float* data = data_.get();
    // A slice of 16 steps of a panel at a time ([16][width], a few KB that stay in L1): each filter's 16 steps are
    // read in one run and written across the slice, the lanes past `rows` zeroed.  Writing each filter's whole
    // depth down its lane touched a new cache line per value, which made packing a large share of session creation.
    constexpr int64_t kSlice = 16;
    for (int64_t p = 0; p < panels(); ++p) {
        const int64_t m0 = p * width_, live = std::min(width_, rows - m0);
        float* panel = data + p * depth * width_;
        for (int64_t k0 = 0; k0 < depth; k0 += kSlice) {
            const int64_t steps = std::min(kSlice, depth - k0);
            float* slice = panel + k0 * width_;
            int64_t m = 0;
#if TESSERA_CPU_X86
            // Whole 16 x 16 blocks transposed in registers (most of a network's filters).
            if (steps == kSlice && lane_gemm_supported())
                for (; m + 16 <= live; m += 16) transpose_block(A + (m0 + m) * lda + k0, lda, slice + m, width_);
#endif
            for (; m < live; ++m) {
                const float* src = A + (m0 + m) * lda + k0;
                for (int64_t i = 0; i < steps; ++i) slice[i * width_ + m] = src[i];
            }
            for (int64_t i = 0; i < steps && live < width_; ++i)
                std::fill(slice + i * width_ + live, slice + (i + 1) * width_, 0.0f);
        }
    }
}

LanePackedFilters LanePackedFilters::from_depth_major(const float* B, int64_t rows, int64_t depth, int64_t ldb) {
    LanePackedFilters packed;
    packed.assign_depth_major(B, rows, depth, ldb);
    return packed;
}

void LanePackedFilters::assign_depth_major(const float* B, int64_t rows, int64_t depth, int64_t ldb) {
    reserve(rows, depth, 0);
    float* data = data_.get();
    const int64_t width = width_;
    for (int64_t k = 0; k < depth; ++k) {
        const float* src = B + k * ldb;
        for (int64_t p = 0; p < panels(); ++p) {
            const int64_t m0 = p * width, count = std::min(width, rows - m0);
            float* dst = data + (p * depth + k) * width;
            std::copy(src + m0, src + m0 + count, dst);
            std::fill(dst + count, dst + width, 0.0f);
        }
    }
}

#if TESSERA_CPU_X86
namespace {
// out[k * block + r] = A[r * lda + k] for k in [k0, k0 + 16), r < rows (<= 16), r in [rows, block) zero: the rows'
// 16 steps transposed in registers and stored a step (block floats) at a time.
__attribute__((target("avx512f"))) void pack_rows_16_steps(const float* A, int64_t rows, int64_t lda, int64_t k0,
                                                           int64_t block, float* out) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_ps(A + i * lda + k0) : _mm512_setzero_ps();
    transpose16x16(r);
    const __mmask16 lanes = static_cast<__mmask16>((1u << block) - 1);
    for (int i = 0; i < 16; ++i) _mm512_mask_storeu_ps(out + (k0 + i) * block, lanes, r[i]);
}
}  // namespace
#endif

void pack_lane_rows(const float* A, int64_t M, int64_t K, int64_t lda, int64_t block, float* dst) {
    for (int64_t m0 = 0; m0 < M; m0 += block) {
        float* out = dst + m0 * K;  // block m0 / block starts at (m0 / block) * K * block
        const int64_t rows = std::min(block, M - m0);
#if TESSERA_CPU_X86
        // Activations are packed on every call (a transformer's every product): 16 steps at a time in registers
        // where the block fits a vector, not a strided store per value.
        if (block <= 16 && lane_gemm_supported()) {
            int64_t k = 0;
            for (; k + 16 <= K; k += 16) pack_rows_16_steps(A + m0 * lda, rows, lda, k, block, out);
            for (; k < K; ++k)
                for (int64_t r = 0; r < block; ++r) out[k * block + r] = r < rows ? A[(m0 + r) * lda + k] : 0.0f;
            continue;
        }
#endif
        for (int64_t r = 0; r < rows; ++r) {
            const float* src = A + (m0 + r) * lda;
            for (int64_t k = 0; k < K; ++k) out[k * block + r] = src[k];
        }
        for (int64_t r = rows; r < block; ++r)
            for (int64_t k = 0; k < K; ++k) out[k * block + r] = 0.0f;
    }
}

bool lanes_fill(int64_t filters) {
    const int64_t width = lane_panel_width_for(filters), padded = (filters + width - 1) / width * width;
    return filters > 0 && padded * 7 <= filters * 8;
}

#if TESSERA_CPU_X86  // the AVX-512 lane kernels and the entry points that run them
namespace {

// Positions per call of the tile loop (a multiple of both tile heights): their results are transposed into y
// together.
constexpr int64_t kPositionChunk = 84;

// How many depth steps ahead the tiles prefetch their weights (16 and 48 measured alike on BERT-base; none was 3%
// slower there, and 4-8% on ResNet-50).
constexpr int64_t kWeightPrefetchSteps = 16;

// kRows positions x kVecs * 16 filters over `depth` steps.  w is a panel [depth][kVecs * 16]; position r of step k
// is x[row_offsets[k] + r] (kTable) or x[k * x_stride + r].  The accumulators start from init (kVecs * 16 values,
// NULL for zeros) or, when `accumulate`, from out; the results go to out[r * ldo + filter], filters < cols (masked).
// kRows * kVecs accumulators and kVecs filter vectors fill the 32 registers (the broadcast is an operand taken from
// memory).
//
// next_weights (NULL for none): each step also asks for next_weights[k * next_bytes_per_step] in L2, a slice of the
// weight panel the thread computes next.  Weights too large for the caches (BERT-base's 340 MB, ResNet-50's 100 MB)
// otherwise arrive at memory speed while the first tile of each panel waits on them (BERT-base 1 thread 168 ->
// 147 ms).
//
// prefetch (floats, 0 for none): each step also asks for x[row offset + prefetch] in L2, the same rows of the next
// chunk.  A convolution reads one short run of every input channel per chunk, hundreds of streams no hardware
// prefetcher follows; on ResNet-50's 56x56 1x1 layers, whose inputs outgrow L2, the tiles otherwise wait on L3.
template <int kVecs, int kRows, bool kTable>
__attribute__((target("avx512f"))) void lane_tile(int64_t depth, const float* w, const float* x,
                                                  const int64_t* row_offsets, int64_t x_stride, const float* init,
                                                  float* out, int64_t ldo, int64_t cols, bool accumulate,
                                                  int64_t prefetch, const char* next_weights,
                                                  int64_t next_bytes_per_step) {
    __mmask16 masks[kVecs];
    for (int v = 0; v < kVecs; ++v) {
        const int64_t live = std::clamp<int64_t>(cols - 16 * v, 0, 16);
        masks[v] = live >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << live) - 1);
    }
    __m512 acc[kRows][kVecs];
    for (int v = 0; v < kVecs; ++v) {
        const __m512 start = init != nullptr ? _mm512_loadu_ps(init + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r)
            acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(masks[v], out + r * ldo + 16 * v) : start;
    }
    for (int64_t k = 0; k < depth; ++k) {
        const float* xk = kTable ? x + row_offsets[k] : x + k * x_stride;
        if (prefetch != 0) _mm_prefetch(reinterpret_cast<const char*>(xk + prefetch), _MM_HINT_T1);
        const float* wk = w + k * kVecs * 16;
        // The first tile of a panel streams its weights from memory (BERT-base holds 340 MB, ResNet-50's late
        // layers 9 MB each): ask for them a few steps early.
        for (int v = 0; v < kVecs; ++v)
            _mm_prefetch(reinterpret_cast<const char*>(wk + kWeightPrefetchSteps * kVecs * 16 + 16 * v), _MM_HINT_T0);
        if (next_weights != nullptr) _mm_prefetch(next_weights + k * next_bytes_per_step, _MM_HINT_T1);
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
        for (int v = 0; v < kVecs; ++v) _mm512_mask_storeu_ps(out + r * ldo + 16 * v, masks[v], acc[r][v]);
    }
}

using LaneTileFn = void (*)(int64_t, const float*, const float*, const int64_t*, int64_t, const float*, float*, int64_t,
                            int64_t, bool, int64_t, const char*, int64_t);

// Tiles of 1..6 positions for 64-filter panels and 1..14 for 32-filter panels, reading x through a table of row
// offsets (convolutions) or with a fixed stride (packed rows of a matrix).
// Six rows, not seven: 7 x 4 accumulators, 4 filter vectors and the broadcast need 33 registers, and the spilled
// accumulator's store and reload cost ~3% on Intel cores with two FMA pipes (BERT-base 1 thread 162 -> 157 ms).
template <int kVecs, bool kTable, int... kRows>
constexpr std::array<LaneTileFn, sizeof...(kRows)> tiles(std::integer_sequence<int, kRows...>) {
    return {lane_tile<kVecs, kRows + 1, kTable>...};
}
constexpr auto kTableTiles64 = tiles<4, true>(std::make_integer_sequence<int, 6>());
constexpr auto kTableTiles32 = tiles<2, true>(std::make_integer_sequence<int, 14>());
constexpr auto kStrideTiles64 = tiles<4, false>(std::make_integer_sequence<int, 6>());
constexpr auto kStrideTiles32 = tiles<2, false>(std::make_integer_sequence<int, 14>());

// Depth per pass of lane_matmul: a [kLaneDepthBlock x 64] block of B (256 KB) and the packed rows of A over the same
// depth stay in L2 while the row blocks sweep the panel.
constexpr int64_t kLaneDepthBlock = 1024;

}  // namespace

int64_t lane_row_block(const LanePackedFilters& B) {
    return B.panel_width() == kLanePanelWidth ? int64_t(kStrideTiles64.size()) : int64_t(kStrideTiles32.size());
}

void lane_matmul(const LanePackedFilters& B, int64_t panel_begin, int64_t panel_end, const float* packed_a, int64_t M,
                 float* C, int64_t ldc, const float* bias, int64_t next_panel) {
    const int64_t width = B.panel_width(), K = B.depth(), block = lane_row_block(B);
    const LaneTileFn* tile_fns = width == kLanePanelWidth ? kStrideTiles64.data() : kStrideTiles32.data();
    // The next panel's bytes spread over every step of this call's tiles (see lane_tile).
    const int64_t steps = (panel_end - panel_begin) * ((M + block - 1) / block) * std::max<int64_t>(K, 1);
    const int64_t panel_bytes = K * width * static_cast<int64_t>(sizeof(float));
    const int64_t next_step_bytes = (panel_bytes + steps - 1) / std::max<int64_t>(steps, 1);
    const char* next =
        next_panel >= 0 && next_panel < B.panels() ? reinterpret_cast<const char*>(B.panel(next_panel)) : nullptr;
    int64_t step = 0;
    for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1); k0 += kLaneDepthBlock) {
        const int64_t kc = std::min(kLaneDepthBlock, K - k0);
        for (int64_t p = panel_begin; p < panel_end; ++p) {
            const int64_t n0 = p * width, cols = std::min(width, B.rows() - n0);
            const float* w = B.panel(p) + k0 * width;
            for (int64_t m0 = 0; m0 < M; m0 += block) {
                const int64_t rows = std::min(block, M - m0);
                tile_fns[rows - 1](kc, w, packed_a + m0 * K + k0 * block, nullptr, block,
                                   bias != nullptr ? bias + n0 : nullptr, C + m0 * ldc + n0, ldc, cols, k0 > 0, 0,
                                   next != nullptr ? next + step * next_step_bytes : nullptr, next_step_bytes);
                step += kc;
            }
        }
    }
}

void lane_matmul_serial(const float* A, int64_t M, int64_t lda, const LanePackedFilters& B, float* C, int64_t ldc) {
    const int64_t K = B.depth(), block = lane_row_block(B), blocks = (M + block - 1) / block;
    if (M <= 0) return;
    float* packed = thread_scratch_buffer<float, 39>(blocks * block * K);
    pack_lane_rows(A, M, K, lda, block, packed);
    lane_matmul(B, 0, B.panels(), packed, M, C, ldc);
}

void lane_matmul(ThreadPool& pool, const float* A, int64_t M, int64_t lda, const LanePackedFilters& B, float* C,
                 int64_t ldc, const float* bias, const GemmEpilogue* epilogue) {
    const int64_t K = B.depth(), block = lane_row_block(B), blocks = (M + block - 1) / block;
    if (M <= 0) return;
    float* packed = thread_scratch_buffer<float, 7>(blocks * block * K);
    pool.parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, block * K)),
                      [&](int64_t first, int64_t last) {
                          const int64_t m0 = first * block, m1 = std::min(M, last * block);
                          pack_lane_rows(A + m0 * lda, m1 - m0, K, lda, block, packed + m0 * K);
                      });
    // Whole panels per task when there are enough of them; otherwise each panel's rows in a few parts.
    const int64_t panels = B.panels();
    const int64_t row_parts = std::min(blocks, (4 * pool.size() + panels - 1) / panels);
    const int64_t blocks_per_part = (blocks + row_parts - 1) / row_parts;
    pool.parallel_for(panels * row_parts, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t p = t / row_parts, b0 = (t % row_parts) * blocks_per_part;
            const int64_t m0 = b0 * block, m1 = std::min(M, (b0 + blocks_per_part) * block);
            if (m0 >= m1) continue;
            // The panel of this thread's next task streams in while this one is computed.
            const int64_t next_p = t + 1 < last ? (t + 1) / row_parts : -1;
            lane_matmul(B, p, p + 1, packed + m0 * K, m1 - m0, C + m0 * ldc, ldc, bias, next_p != p ? next_p : -1);
            if (epilogue != nullptr && *epilogue)
                (*epilogue)(m0, m1, p * B.panel_width(), std::min(B.rows(), (p + 1) * B.panel_width()));
        }
    });
}

__attribute__((target("avx512f"))) void lane_store_transposed(const float* results, int64_t filters, int64_t count,
                                                              float* y, int64_t ldy, const ConvEpilogue* epilogue,
                                                              const float* z) {
    const bool vector_act = epilogue != nullptr && vector_activation(*epilogue);
    for (int64_t f0 = 0; f0 < filters; f0 += 16) {
        for (int64_t j0 = 0; j0 < count; j0 += 16) {
            const int64_t rows = std::min<int64_t>(16, count - j0);
            __m512 r[16];
            for (int i = 0; i < 16; ++i)
                r[i] = i < rows ? _mm512_load_ps(results + (j0 + i) * kLanePanelWidth + f0) : _mm512_setzero_ps();
            transpose16x16(r);
            const __mmask16 mask = rows >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
            const int64_t columns = std::min<int64_t>(16, filters - f0);
            for (int m = 0; m < columns; ++m) {
                const int64_t at = (f0 + m) * ldy + j0;
                __m512 v_out = r[m];
                if (z != nullptr) v_out = _mm512_add_ps(v_out, _mm512_maskz_loadu_ps(mask, z + at));
                if (vector_act) v_out = activate(v_out, *epilogue);
                _mm512_mask_storeu_ps(y + at, mask, v_out);
            }
        }
    }
}

__attribute__((target("avx512f"))) void gather_even_columns(const float* src, int64_t count, float* dst) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    int64_t j = 0;
    for (; j + 16 <= count; j += 16) {
        // The last vector's second load may read one element past src[2 * count - 2]: mask it off.
        const int64_t left = 2 * count - 1 - (2 * j + 16);
        const __mmask16 hi_mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(left, 0)) - 1);
        const __m512 lo = _mm512_loadu_ps(src + 2 * j);
        const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, src + 2 * j + 16);
        _mm512_storeu_ps(dst + j, _mm512_permutex2var_ps(lo, even, hi));
    }
    for (; j < count; ++j) dst[j] = src[2 * j];
}

void lane_gemm_positions(const LanePackedFilters& A, int64_t panel, const float* x, const int64_t* row_offsets,
                         int64_t count, const float* bias, float* y, int64_t ldy, const ConvEpilogue* epilogue,
                         const float* z) {
    if (epilogue != nullptr && !epilogue->active()) epilogue = nullptr;
    const int64_t width = A.panel_width(), m0 = panel * width;
    const int64_t filters = std::min(width, A.rows() - m0);
    const LaneTileFn* tile_fns = width == kLanePanelWidth ? kTableTiles64.data() : kTableTiles32.data();
    const int64_t tile_height = lane_row_block(A);
    alignas(64) float panel_bias[kLanePanelWidth] = {};
    if (bias != nullptr) std::copy(bias + m0, bias + m0 + filters, panel_bias);
    alignas(64) float results[kPositionChunk * kLanePanelWidth];
    for (int64_t j0 = 0; j0 < count; j0 += kPositionChunk) {
        const int64_t chunk = std::min(kPositionChunk, count - j0);
        // Each tile fetches its counterpart in the next chunk, so together they cover the next chunk's runs; past
        // the last chunk, the positions that follow, which the thread's next task (the next block of rows) reads.
        const int64_t prefetch = kPositionChunk;
        for (int64_t r = 0; r < chunk; r += tile_height) {
            const int64_t rows = std::min(tile_height, chunk - r);
            tile_fns[rows - 1](A.depth(), A.panel(panel), x + j0 + r, row_offsets, 0, panel_bias,
                               results + r * kLanePanelWidth, kLanePanelWidth, kLanePanelWidth, false, prefetch,
                               nullptr, 0);
        }
        lane_store_transposed(results, filters, chunk, y + j0, ldy, epilogue, z != nullptr ? z + j0 : nullptr);
        if (epilogue != nullptr && !vector_activation(*epilogue)) {
            for (int64_t m = 0; m < filters; ++m) epilogue->apply(y + m * ldy + j0, static_cast<const float*>(nullptr), chunk);
        }
    }
}
#else  // never called: each is reached only where lane_gemm_supported()
int64_t lane_row_block(const LanePackedFilters&) { x86_kernel_unavailable(__func__); }
void lane_matmul(const LanePackedFilters&, int64_t, int64_t, const float*, int64_t, float*, int64_t, const float*,
                 int64_t) {
    x86_kernel_unavailable(__func__);
}
void lane_matmul_serial(const float*, int64_t, int64_t, const LanePackedFilters&, float*, int64_t) {
    x86_kernel_unavailable(__func__);
}
void lane_matmul(ThreadPool&, const float*, int64_t, int64_t, const LanePackedFilters&, float*, int64_t, const float*,
                 const GemmEpilogue*) {
    x86_kernel_unavailable(__func__);
}
void lane_store_transposed(const float*, int64_t, int64_t, float*, int64_t, const ConvEpilogue*, const float*) {
    x86_kernel_unavailable(__func__);
}
void gather_even_columns(const float*, int64_t, float*) { x86_kernel_unavailable(__func__); }
void lane_gemm_positions(const LanePackedFilters&, int64_t, const float*, const int64_t*, int64_t, const float*, float*,
                         int64_t, const ConvEpilogue*, const float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
