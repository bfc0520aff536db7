// Winograd F(2x2, 3x3) (util/winograd.h) between blocked tensors (util/blocked_conv.h).  In the blocked layout a
// vector is 16 channels of one position, so the input and output transforms are vector adds with no transposes,
// and the 16 channel sums are matrix products with the tiles as rows (util/lane_gemm.h's lane_matmul): transformed
// inputs [tiles, C] x transformed filters [C, K] = products [tiles, K], whose 16-filter vectors the output transform
// reads directly.  Tiles go in blocks whose buffers stay in L2, each block on one thread; where the transformed
// filters are larger than all the tiles' buffers (small images, many channels), all tiles are transformed first and
// each filter panel is then read once for all of them.
#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside the min/max intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "util/blocked_conv.h"
#include "util/conv_epilogue_avx512.h"
#include "util/thread_scratch.h"
#include "util/winograd_transforms.h"

namespace tessera::cpu {

bool blocked_winograd_applies(const WindowGeometry& g, int64_t channels, int64_t filters) {
    return g.rank() == 2 && g.kernel[0] == 3 && g.kernel[1] == 3 && g.strides[0] == 1 && g.strides[1] == 1 &&
           g.dilations[0] == 1 && g.dilations[1] == 1 && g.pads_begin[0] <= 2 && g.pads_begin[1] <= 2 &&
           channels % kChannelBlock == 0 && filters % kChannelBlock == 0 && lane_gemm_supported();
}

#if TESSERA_CPU_X86  // the AVX-512 transforms and the entry point that runs them
namespace {

// The transformed inputs, their packed copy and the products of one tile block together stay within about this many
// floats (1 MB of a 2 MB L2).
constexpr int64_t kBlockFloats = int64_t{1} << 18;

struct TileGeometry {
    int64_t H, W, OH, OW, TH, TW, top, left;
};

// V for tiles [t0, t0 + count) of one image, written straight in the layout lane_matmul reads its rows from
// (pack_lane_rows: groups of `group` tiles, each [C][group]): point p of tile t0 + t, channel c at
// v[p * point_stride + ((t / group) * C + c) * group + t % group].  Each transformed vector (16 channels of one
// tile) is scattered `group` floats apart.
__attribute__((target("avx512f"))) void transform_inputs(const TileGeometry& q, const float* x, int64_t C,
                                                         int64_t t0, int64_t count, int64_t group,
                                                         int64_t point_stride, float* v) {
    const int64_t blocks = C / kChannelBlock, plane = q.H * q.W * kChannelBlock;
    const __m512i apart = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                             _mm512_set1_epi32(static_cast<int>(group)));
    for (int64_t t = 0; t < count; ++t) {
        const int64_t th = (t0 + t) / q.TW, tw = (t0 + t) % q.TW;
        const int64_t ih0 = 2 * th - q.top, iw0 = 2 * tw - q.left;
        for (int64_t cb = 0; cb < blocks; ++cb) {
            const float* image = x + cb * plane;
            __m512 d[4][4];
            for (int r = 0; r < 4; ++r) {
                const int64_t ih = ih0 + r;
                for (int s = 0; s < 4; ++s) {
                    const int64_t iw = iw0 + s;
                    d[r][s] = ih >= 0 && ih < q.H && iw >= 0 && iw < q.W
                                  ? _mm512_loadu_ps(image + (ih * q.W + iw) * kChannelBlock)
                                  : _mm512_setzero_ps();
                }
            }
            __m512 u[16];
            winograd_input_transform(d, u);
            float* out = v + ((t / group) * C + cb * kChannelBlock) * group + t % group;
            for (int p = 0; p < 16; ++p) _mm512_i32scatter_ps(out + p * point_stride, apart, u[p], 4);
        }
    }
}

// Y for tiles [t0, t0 + count) from m[p * point_stride + t * K + k]: A^T m A with A^T = [1 1 1 0; 0 1 -1 -1], then
// the bias, the sum and the activation, stored blocked; outputs past the image's edge (odd sizes) are dropped.
__attribute__((target("avx512f"))) void transform_outputs(const TileGeometry& q, const float* m, int64_t K,
                                                          int64_t point_stride, int64_t t0, int64_t count,
                                                          const float* bias, const ConvEpilogue* epilogue,
                                                          bool vector_act, const float* z, float* y) {
    const int64_t blocks = K / kChannelBlock, plane = q.OH * q.OW * kChannelBlock;
    for (int64_t t = 0; t < count; ++t) {
        const int64_t th = (t0 + t) / q.TW, tw = (t0 + t) % q.TW;
        for (int64_t kb = 0; kb < blocks; ++kb) {
            const float* in = m + t * K + kb * kChannelBlock;
            __m512 a[4][4];
            for (int p = 0; p < 16; ++p) a[p / 4][p % 4] = _mm512_loadu_ps(in + p * point_stride);
            const __m512 b = bias != nullptr ? _mm512_loadu_ps(bias + kb * kChannelBlock) : _mm512_setzero_ps();
            __m512 outputs[2][2];
            winograd_output_transform(a, b, outputs);
            for (int i = 0; i < 2; ++i) {
                const int64_t oh = 2 * th + i;
                if (oh >= q.OH) break;
                const __m512* out = outputs[i];
                for (int j = 0; j < 2; ++j) {
                    const int64_t ow = 2 * tw + j;
                    if (ow >= q.OW) break;
                    const int64_t at = kb * plane + (oh * q.OW + ow) * kChannelBlock;
                    __m512 value = out[j];
                    if (z != nullptr) value = _mm512_add_ps(value, _mm512_loadu_ps(z + at));
                    if (epilogue != nullptr && vector_act) value = activate(value, *epilogue);
                    _mm512_storeu_ps(y + at, value);
                    if (epilogue != nullptr && !vector_act)
                        epilogue->apply(y + at, static_cast<const float*>(nullptr), kChannelBlock);
                }
            }
        }
    }
}

}  // namespace

void blocked_winograd_conv2d(ThreadPool& pool, const WindowGeometry& g, const WinogradFilters& filters, int64_t N,
                             const float* x, const float* bias, const ConvEpilogue* epilogue, const float* z,
                             float* y) {
    if (epilogue != nullptr && !epilogue->active()) epilogue = nullptr;
    const bool vector_act = epilogue == nullptr || vector_activation(*epilogue);
    const int64_t C = filters.channels(), K = filters.filters();
    TileGeometry q{g.input[0], g.input[1], g.output[0], g.output[1], (g.output[0] + 1) / 2, (g.output[1] + 1) / 2,
                   g.pads_begin[0], g.pads_begin[1]};
    const int64_t tiles = q.TH * q.TW;
    const int64_t row_block = lane_row_block(filters.point(0));
    // Tiles per block: a multiple of the products' row block, the buffers (V, M) within L2.
    // As many blocks as fit, rounded up to a multiple of the threads so that every thread gets as many.
    const int64_t fit = std::max<int64_t>(row_block, kBlockFloats / (16 * (C + K)) / row_block * row_block);
    const int64_t threads = pool.size();
    const int64_t wanted = ((tiles + fit - 1) / fit + threads - 1) / threads * threads;
    const int64_t per_block = std::max<int64_t>(row_block, ((tiles + wanted - 1) / wanted + row_block - 1) / row_block * row_block);
    const int64_t blocks = (tiles + per_block - 1) / per_block;
    const int64_t panels = filters.point(0).panels();
    // Filters larger than every tile's transformed inputs and products together (ResNet-50's 14x14 layers: 4 MB of
    // filters, 1.6 MB of tiles) would be read from memory once per block: then all tiles are transformed first,
    // each (point, panel) product is one task over all of them, so that each filter is read once per image and the
    // threads share the filters instead of each reading them all, and the outputs are transformed last.  With
    // several threads also when all the tiles' buffers fit in L2 and the filters are at least half their size
    // (SqueezeNet's 13x13 layers, 2 threads: the model 2% faster), where splitting the tiles would have every thread
    // read every filter for a few tiles each; with smaller filters (its 27x27 layers) each thread keeps its own tiles
    // rather than hand their transforms and products to the other core (the model 3% faster at 2 threads).
    const int64_t padded_tiles = (tiles + row_block - 1) / row_block * row_block;
    const bool filters_outweigh = C * K > padded_tiles * (C + K);
    const bool tiles_fit = threads > 1 && 16 * padded_tiles * (C + K) <= 2 * kBlockFloats &&
                           2 * C * K >= padded_tiles * (C + K);
    if (blocks > 1 && (filters_outweigh || tiles_fit)) {
        float* v = thread_scratch_buffer<float, 17>(16 * padded_tiles * C);
        float* m = thread_scratch_buffer<float, 18>(16 * padded_tiles * K);
        const int64_t groups = padded_tiles / row_block;
        for (int64_t n = 0; n < N; ++n) {
            const float* image = x + n * C * q.H * q.W;
            pool.parallel_for(groups, 1, [&](int64_t first, int64_t last) {
                const int64_t t0 = first * row_block, count = std::min(tiles, last * row_block) - t0;
                if (count > 0) transform_inputs(q, image, C, t0, count, row_block, padded_tiles * C, v + t0 * C);
            });
            pool.parallel_for(16 * panels, 1, [&](int64_t first, int64_t last) {
                for (int64_t task = first; task < last; ++task) {
                    const int p = static_cast<int>(task / panels);
                    const int64_t panel = task % panels;
                    const int64_t next = task + 1 < last && panel + 1 < panels ? panel + 1 : -1;
                    lane_matmul(filters.point(p), panel, panel + 1, v + p * padded_tiles * C, tiles,
                                m + p * padded_tiles * K, K, nullptr, next);
                }
            });
            float* out = y + n * K * q.OH * q.OW;
            const float* sum = z != nullptr ? z + n * K * q.OH * q.OW : nullptr;
            pool.parallel_for(tiles, 1, [&](int64_t first, int64_t last) {
                transform_outputs(q, m + first * K, K, padded_tiles * K, first, last - first, bias, epilogue,
                                  vector_act, sum, out);
            });
        }
        return;
    }
    for (int64_t n = 0; n < N; ++n) {
        const float* image = x + n * C * q.H * q.W;
        float* out = y + n * K * q.OH * q.OW;
        const float* sum = z != nullptr ? z + n * K * q.OH * q.OW : nullptr;
        pool.parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
            float* v = thread_scratch_buffer<float, 13>(16 * per_block * C);
            float* m = thread_scratch_buffer<float, 15>(16 * per_block * K);
            for (int64_t b = first; b < last; ++b) {
                const int64_t t0 = b * per_block, count = std::min(per_block, tiles - t0);
                transform_inputs(q, image, C, t0, count, row_block, per_block * C, v);
                for (int p = 0; p < 16; ++p)
                    lane_matmul(filters.point(p), 0, panels, v + p * per_block * C, count, m + p * count * K, K);
                transform_outputs(q, m, K, count * K, t0, count, bias, epilogue, vector_act, sum, out);
            }
        });
    }
}
#else  // never called: reached only where blocked_winograd_applies(), which needs lane_gemm_supported()
void blocked_winograd_conv2d(ThreadPool&, const WindowGeometry&, const WinogradFilters&, int64_t, const float*,
                             const float*, const ConvEpilogue*, const float*, float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
