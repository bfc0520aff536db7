#include "util/winograd.h"

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside the permute intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <vector>

#include "util/conv_epilogue_avx512.h"
#include "util/thread_scratch.h"
#include "util/winograd_transforms.h"

namespace tessera::cpu {

bool winograd_applies(const WindowGeometry& g, int64_t filters, int64_t group) {
    return g.rank() == 2 && group == 1 && g.kernel[0] == 3 && g.kernel[1] == 3 && g.strides[0] == 1 &&
           g.strides[1] == 1 && g.dilations[0] == 1 && g.dilations[1] == 1 && lane_gemm_supported() &&
           lanes_fill(filters);
}

bool winograd_pays_off(const WindowGeometry& g, int64_t filters) {
    // Below 14x14 outputs (7x7: 16 tiles for 49 outputs) the transforms and the short products lose to the direct
    // lane kernels; at 14x14 only with many filters to share each transformed input.
    const int64_t outputs = g.output[0] * g.output[1];
    return g.output[1] >= 12 && (filters >= 64 || outputs >= 400);
}

WinogradFilters::WinogradFilters(const float* w, int64_t filters, int64_t channels)
    : filters_(filters), channels_(channels) {
    // U = G g G^T with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], computed in double and written straight into
    // the 16 points' panels (each written in order: filters of a panel innermost).
    static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    for (auto& point : points_) point = LanePackedFilters::zeros(filters, channels);
    const int64_t width = points_[0].panel_width();
    for (int64_t p = 0; p < points_[0].panels(); ++p) {
        float* panels[16];
        for (int i = 0; i < 16; ++i) panels[i] = points_[static_cast<size_t>(i)].mutable_panel(p);
        for (int64_t c = 0; c < channels; ++c) {
            for (int64_t k = p * width; k < std::min(filters, (p + 1) * width); ++k) {
                const float* g = w + (k * channels + c) * 9;
                double gg[4][3];
                for (int i = 0; i < 4; ++i)
                    for (int j = 0; j < 3; ++j) gg[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
                const int64_t at = c * width + k % width;
                for (int i = 0; i < 4; ++i)
                    for (int j = 0; j < 4; ++j)
                        panels[i * 4 + j][at] =
                            static_cast<float>(gg[i][0] * G[j][0] + gg[i][1] * G[j][1] + gg[i][2] * G[j][2]);
            }
        }
    }
}

#if TESSERA_CPU_X86  // the AVX-512 transforms and the entry point that runs them
namespace {

// Transformed inputs and products of one tile block together stay within about this many floats (128 KB): they are
// written and read back at once (measured on ResNet-50's and DenseNet-121's layers, 32K-1M floats).
constexpr int64_t kBlockFloats = int64_t{1} << 15;

// Lanes l in [0, 16) with 0 <= start + l < extent.
__attribute__((target("avx512f"))) inline __mmask16 lanes_within(int64_t start, int64_t extent) {
    const int64_t first = std::clamp<int64_t>(-start, 0, 16), last = std::clamp<int64_t>(extent - start, 0, 16);
    if (first >= last) return 0;
    const uint32_t upto_last = last >= 16 ? 0xFFFFu : (1u << last) - 1u;
    return static_cast<__mmask16>(upto_last & ~((1u << first) - 1u));
}

// row[iw0 + 2l] for l < 16, zero outside [0, W).
__attribute__((target("avx512f"))) inline __m512 load_every_other(const float* row, int64_t iw0, int64_t W) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512 lo = _mm512_maskz_loadu_ps(lanes_within(iw0, W), row + iw0);
    const __m512 hi = _mm512_maskz_loadu_ps(lanes_within(iw0 + 16, W), row + iw0 + 16);
    return _mm512_permutex2var_ps(lo, even, hi);
}

struct Block {
    int64_t th0 = 0, rows = 0;  // tile rows [th0, th0 + rows)
    int64_t tiles = 0;          // rows * TW
    int64_t stride = 0;         // floats between channels (filters) in the V (M) buffers, >= tiles + 16
};

// V for channels [c0, c1) of one block: v[p * C * stride + c * stride + t] = point p of tile t.
__attribute__((target("avx512f"))) void transform_inputs(const WindowGeometry& g, const float* x, const Block& b,
                                                         int64_t channels, int64_t c0, int64_t c1, float* v) {
    const int64_t H = g.input[0], W = g.input[1], TW = (g.output[1] + 1) / 2;
    const int64_t top = g.pads_begin[0], left = g.pads_begin[1];
    const int64_t point_stride = channels * b.stride;
    for (int64_t c = c0; c < c1; ++c) {
        const float* plane = x + c * H * W;
        for (int64_t th = b.th0; th < b.th0 + b.rows; ++th) {
            for (int64_t tw0 = 0; tw0 < TW; tw0 += 16) {
                __m512 d[4][4];
                for (int r = 0; r < 4; ++r) {
                    const int64_t ih = 2 * th - top + r;
                    for (int s = 0; s < 4; ++s) {
                        d[r][s] = ih >= 0 && ih < H ? load_every_other(plane + ih * W, 2 * tw0 - left + s, W)
                                                    : _mm512_setzero_ps();
                    }
                }
                __m512 u[16];
                winograd_input_transform(d, u);
                const __mmask16 live = lanes_within(tw0, TW);
                float* out = v + c * b.stride + (th - b.th0) * TW + tw0;
                for (int p = 0; p < 16; ++p) _mm512_mask_storeu_ps(out + p * point_stride, live, u[p]);
            }
        }
    }
}

// Y = A^T M A for filters [k0, k1) of one block, with the bias, the sum and the activation, into y [K, OH, OW].
__attribute__((target("avx512f"))) void transform_outputs(const WindowGeometry& g, const float* m, const Block& b,
                                                          int64_t filters, int64_t k0, int64_t k1, const float* bias,
                                                          const ConvEpilogue& e, const float* z, float* y) {
    const int64_t OH = g.output[0], OW = g.output[1], TW = (OW + 1) / 2;
    const int64_t point_stride = filters * b.stride;
    const bool vector_act = vector_activation(e);
    // Interleaves two 16-lane vectors (even and odd output columns) into 32 consecutive columns.
    const __m512i low = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i high = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (int64_t k = k0; k < k1; ++k) {
        const __m512 b_k = _mm512_set1_ps(bias != nullptr ? bias[k] : 0.0f);
        float* plane = y + k * OH * OW;
        const float* sum = z != nullptr ? z + k * OH * OW : nullptr;
        for (int64_t th = b.th0; th < b.th0 + b.rows; ++th) {
            for (int64_t tw0 = 0; tw0 < TW; tw0 += 16) {
                const float* in = m + k * b.stride + (th - b.th0) * TW + tw0;
                __m512 p[4][4];
                for (int r = 0; r < 4; ++r)
                    for (int s = 0; s < 4; ++s) p[r][s] = _mm512_loadu_ps(in + (r * 4 + s) * point_stride);
                __m512 outputs[2][2];
                winograd_output_transform(p, b_k, outputs);
                for (int i = 0; i < 2; ++i) {
                    const int64_t oh = 2 * th + i;
                    if (oh >= OH) break;
                    const __m512 even = outputs[i][0], odd = outputs[i][1];
                    const __m512 halves[2] = {_mm512_permutex2var_ps(even, low, odd),
                                              _mm512_permutex2var_ps(even, high, odd)};
                    for (int h = 0; h < 2; ++h) {
                        const int64_t ow0 = 2 * tw0 + 16 * h;
                        const __mmask16 live = lanes_within(ow0, OW);
                        if (live == 0) continue;
                        __m512 out = halves[h];
                        const int64_t at = oh * OW + ow0;
                        if (sum != nullptr) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(live, sum + at));
                        if (vector_act) out = activate(out, e);
                        _mm512_mask_storeu_ps(plane + at, live, out);
                    }
                }
            }
        }
        if (!vector_act) {
            const int64_t first = 2 * b.th0 * OW, last = std::min(OH, 2 * (b.th0 + b.rows)) * OW;
            e.apply(plane + first, static_cast<const float*>(nullptr), last - first);
        }
    }
}

}  // namespace

void winograd_conv2d(ThreadPool& pool, const WindowGeometry& g, const float* x, const WinogradFilters& filters,
                     const float* bias, const ConvEpilogue& epilogue, const float* z, float* y) {
    const int64_t C = filters.channels(), K = filters.filters();
    const int64_t TH = (g.output[0] + 1) / 2, TW = (g.output[1] + 1) / 2;
    // Blocks of whole tile rows: small enough to stay in cache, long enough (>= 28 tiles) to feed the products.
    const int64_t rows_per_block =
        std::clamp<int64_t>(std::max(kBlockFloats / (16 * (C + K) * TW), (28 + TW - 1) / TW), 1, TH);
    const int64_t blocks = (TH + rows_per_block - 1) / rows_per_block;
    const int64_t stride = (rows_per_block * TW + 16 + 15) / 16 * 16;
    const int64_t panels = filters.point(0).panels(), width = filters.point(0).panel_width();
    auto block_at = [&](int64_t index) {
        Block b;
        b.th0 = index * rows_per_block;
        b.rows = std::min(rows_per_block, TH - b.th0);
        b.tiles = b.rows * TW;
        b.stride = stride;
        return b;
    };
    // Each thread's buffers: V [16][C][stride], M [16][K][stride] and the row offsets of V's channels.
    struct Buffers {
        float* v;
        float* m;
        const int64_t* offsets;
    };
    auto buffers = [&] {
        int64_t* offsets = thread_scratch_buffer<int64_t, 8>(C);
        for (int64_t c = 0; c < C; ++c) offsets[c] = c * stride;
        return Buffers{thread_scratch_buffer<float, 8>(16 * C * stride), thread_scratch_buffer<float, 9>(16 * K * stride),
                       offsets};
    };
    auto products = [&](const Buffers& buf, const Block& b, int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t point = t / panels, p = t % panels;
            lane_gemm_positions(filters.point(static_cast<int>(point)), p, buf.v + point * C * stride, buf.offsets,
                                b.tiles, nullptr, buf.m + point * K * stride + p * width * stride, stride);
        }
    };
    if (blocks >= pool.size()) {
        // Enough blocks: each thread takes whole blocks, in its own buffers, with no synchronization inside.
        pool.parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
            const Buffers buf = buffers();
            for (int64_t index = first; index < last; ++index) {
                const Block b = block_at(index);
                transform_inputs(g, x, b, C, 0, C, buf.v);
                products(buf, b, 0, 16 * panels);
                transform_outputs(g, buf.m, b, K, 0, K, bias, epilogue, z, y);
            }
        });
        return;
    }
    // Fewer blocks than threads: every stage of a block split across the pool, in the calling thread's buffers.
    const Buffers buf = buffers();
    for (int64_t index = 0; index < blocks; ++index) {
        const Block b = block_at(index);
        pool.parallel_for(C, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, b.tiles)),
                          [&](int64_t first, int64_t last) { transform_inputs(g, x, b, C, first, last, buf.v); });
        pool.parallel_for(16 * panels, 1, [&](int64_t first, int64_t last) { products(buf, b, first, last); });
        pool.parallel_for(K, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, b.tiles)), [&](int64_t first, int64_t last) {
            transform_outputs(g, buf.m, b, K, first, last, bias, epilogue, z, y);
        });
    }
}
#else  // never called: reached only where winograd_applies(), which needs lane_gemm_supported()
void winograd_conv2d(ThreadPool&, const WindowGeometry&, const float*, const WinogradFilters&, const float*,
                     const ConvEpilogue&, const float*, float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
