#include "util/blocked_conv.h"

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

// GCC 12 reports the _mm512_undefined_ps() inside the min/max intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "util/conv_epilogue_avx512.h"
#include "util/thread_scratch.h"
#include "util/transpose_avx512.h"

namespace tessera::cpu {

bool blocked_layout_enabled() {
    const char* env = std::getenv("TESSERA_CPU_BLOCKED_LAYOUT");
    return lane_gemm_supported() && (env == nullptr || env[0] != '0');
}

bool blocked_input_declared(const NodeInfo& info) {
    const std::optional<Shape> x = info.input_shape(0);
    return blocked_layout_enabled() && x && x->size() == 4 && (*x)[1] > 0 && (*x)[1] % kChannelBlock == 0;
}

int64_t blocked_panel_width(int64_t filters) {
    for (int64_t width : {int64_t(64), int64_t(48), int64_t(32)})
        if (filters % width == 0) return width;
    return filters >= 128 ? 64 : kChannelBlock;
}

std::vector<float> pack_blocked_depthwise(const float* w, int64_t C, int64_t taps) {
    std::vector<float> packed(C * taps);
    for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < taps; ++t)
            packed[((c / kChannelBlock) * taps + t) * kChannelBlock + c % kChannelBlock] = w[c * taps + t];
    return packed;
}

#if TESSERA_CPU_X86  // the AVX-512 kernels and the entry points that run them
namespace {

// Output positions per chunk: the NCHW output's transposes take the chunk's results together.
constexpr int64_t kChunk = 96;

// How many depth steps ahead the tiles ask for their weights (as the lane kernels do).
constexpr int64_t kWeightPrefetchSteps = 16;

// Filter panels from this size up go through their tiles a slice of the depth at a time, each slice (this size)
// reused from L1 by every tile of a chunk of positions.  Below it a panel stays in L2 for all its tiles; from it
// up the panel and the next one, asked for ahead, do not both fit (2 MB here).  ResNet-50's 3x3 layers of 512
// filters (1.2 MB panels) measured 8-13% faster sliced, its 256-filter ones (0.6 MB) 12-16% slower.
constexpr int64_t kSlicedPanelBytes = int64_t(1) << 20;
constexpr int64_t kWeightSliceBytes = int64_t(32) << 10;

// Where the tile's results go: per position, its output (and sum) address; vector v of a position is vec_stride
// further.  The epilogue's vector activation (NULL: none) is applied as they are stored.
struct TileOutput {
    float* const* out;
    const float* const* sum;  // NULL without a sum
    int64_t vec_stride;
    int vecs;  // vectors of filters that exist (the last panel of a blocked output may be narrower)
    const ConvEpilogue* activation;
    // Part of the weight panel the thread computes next, asked for in L2 a slice per step (NULL: none), so that
    // it streams in from memory while this panel's tiles run instead of stalling its own first tile (ResNet-50's
    // 100 MB of weights come from memory on every run: 1 thread 58 -> 54 ms).
    const char* next_weights;
    int64_t next_bytes_per_step;
    // The accumulators start from what `out` holds (a later slice of the depth, see blocked_conv2d) instead of init.
    bool accumulate = false;
};

// kRows positions x kVecs * 16 filters over `depth` steps: position r of step k reads x[r][offsets[k]], w is the
// panel [depth][kVecs * 16], and the accumulators start from init (kVecs * 16 values).  Unlike the lane kernels'
// tile, every position has its own input address, so one tile may span output rows and strides cost nothing.
// kStride > 0: the positions follow each other kStride floats apart from xs[0] (a 1x1 stride-1 unpadded layer, 16
// or 1 for a blocked or NCHW input), so that one address serves them all and the eight addresses the general tile
// keeps no longer crowd the general registers (GCC spilled them to vector registers at eight positions).
template <int kVecs, int kRows, int kStride>
__attribute__((target("avx512f"))) void position_tile(int64_t depth, const float* w, const float* const* xs,
                                                      const int64_t* offsets, const float* init,
                                                      const TileOutput& to) {
    const float* x[kRows];
    if constexpr (kStride == 0)
        for (int r = 0; r < kRows; ++r) x[r] = xs[r];
    const float* const x0 = xs[0];
    __m512 acc[kRows][kVecs];
    for (int v = 0; v < kVecs; ++v) {
        const __m512 start = _mm512_loadu_ps(init + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) acc[r][v] = start;
    }
    if (to.accumulate) {
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r)
            for (int v = 0; v < kVecs && v < to.vecs; ++v) acc[r][v] = _mm512_loadu_ps(to.out[r] + v * to.vec_stride);
    }
    for (int64_t k = 0; k < depth; ++k) {
        const int64_t off = offsets[k];
        const float* wk = w + k * kVecs * 16;
        for (int v = 0; v < kVecs; ++v)
            _mm_prefetch(reinterpret_cast<const char*>(wk + kWeightPrefetchSteps * kVecs * 16 + 16 * v), _MM_HINT_T0);
        if (to.next_weights != nullptr) _mm_prefetch(to.next_weights + k * to.next_bytes_per_step, _MM_HINT_T1);
        __m512 wv[kVecs];
        for (int v = 0; v < kVecs; ++v) wv[v] = _mm512_load_ps(wk + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
            const __m512 xv = _mm512_set1_ps(kStride == 0 ? x[r][off] : x0[off + r * kStride]);
            for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_fmadd_ps(xv, wv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < kVecs; ++v) {
            if (v >= to.vecs) break;
            __m512 value = acc[r][v];
            if (to.sum != nullptr) value = _mm512_add_ps(value, _mm512_loadu_ps(to.sum[r] + v * to.vec_stride));
            if (to.activation != nullptr) value = activate(value, *to.activation);
            _mm512_storeu_ps(to.out[r] + v * to.vec_stride, value);
        }
    }
}

using PositionTileFn = void (*)(int64_t, const float*, const float* const*, const int64_t*, const float*,
                                const TileOutput&);

template <int kVecs, int kStride, int... kRows>
constexpr std::array<PositionTileFn, sizeof...(kRows)> position_tiles(std::integer_sequence<int, kRows...>) {
    return {position_tile<kVecs, kRows + 1, kStride>...};
}
// Six positions for 64-filter panels (the lane kernels' measured best: 24 accumulators), eight for narrower ones:
// each position keeps an address in a general register, and more would not fit.
constexpr int kMaxTileRows = 8;
template <int kStride>
struct TileTables {
    static constexpr auto w16 = position_tiles<1, kStride>(std::make_integer_sequence<int, 8>());
    static constexpr auto w32 = position_tiles<2, kStride>(std::make_integer_sequence<int, 8>());
    static constexpr auto w48 = position_tiles<3, kStride>(std::make_integer_sequence<int, 8>());
    static constexpr auto w64 = position_tiles<4, kStride>(std::make_integer_sequence<int, 6>());
    static std::pair<const PositionTileFn*, int64_t> of_width(int64_t width) {
        switch (width) {
            case 16: return {w16.data(), int64_t(w16.size())};
            case 32: return {w32.data(), int64_t(w32.size())};
            case 48: return {w48.data(), int64_t(w48.size())};
            default: return {w64.data(), int64_t(w64.size())};
        }
    }
};

// The tiles for a panel width, and how many positions the tallest takes; `stride` as the tiles' kStride (0, 1 or
// 16).
std::pair<const PositionTileFn*, int64_t> tiles_for(int64_t width, int64_t stride = 0) {
    switch (stride) {
        case 1: return TileTables<1>::of_width(width);
        case kChannelBlock: return TileTables<kChannelBlock>::of_width(width);
        default: return TileTables<0>::of_width(width);
    }
}

float* align_up(float* p) {
    const auto address = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<float*>((address + 63) & ~uintptr_t(63));
}

struct Geometry {
    int64_t C, H, W, Hp, Wp, OH, OW, KH, KW, SH, SW, DH, DW, PT, PL;
    bool padded;
    // The depthwise loops read image row ih at x + row_slot(ih) * W * 16: row ih itself, or for a band of rows held
    // in a ring of ring_rows rows (blocked_conv_window2d), slot ih % ring_rows.
    int64_t ring_rows;
    int64_t row_slot(int64_t ih) const { return ring_rows > 0 ? ih % ring_rows : ih; }
    // The depthwise loops store output row oh at y + (oh - out_row0) * OW * 16: a band of rows starting at
    // out_row0 (blocked_conv_window2d's consumer), else the whole plane.
    int64_t out_row0;
};

Geometry geometry_of(const WindowGeometry& g, int64_t C) {
    Geometry q{};
    q.C = C;
    q.H = g.input[0], q.W = g.input[1], q.OH = g.output[0], q.OW = g.output[1];
    q.KH = g.kernel[0], q.KW = g.kernel[1], q.SH = g.strides[0], q.SW = g.strides[1];
    q.DH = g.dilations[0], q.DW = g.dilations[1], q.PT = g.pads_begin[0], q.PL = g.pads_begin[1];
    q.padded = q.PT != 0 || q.PL != 0 || g.pads_end[0] != 0 || g.pads_end[1] != 0;
    q.Hp = q.H + q.PT + g.pads_end[0];
    q.Wp = q.W + q.PL + g.pads_end[1];
    return q;
}

// One image's input with its zero padding made explicit, in its own layout (e = 16 floats a position when
// blocked, else 1): [C/16][Hp][Wp][16] or [C][Hp][Wp].
void pad_image(ThreadPool& pool, const Geometry& q, const float* src, bool blocked, float* dst) {
    const int64_t e = blocked ? kChannelBlock : 1, planes = blocked ? q.C / kChannelBlock : q.C;
    const int64_t plane_in = q.H * q.W * e, plane_out = q.Hp * q.Wp * e, row = q.W * e;
    pool.parallel_for(planes, std::max<int64_t>(1, 16384 / plane_out), [&](int64_t first, int64_t last) {
        for (int64_t c = first; c < last; ++c) {
            const float* in = src + c * plane_in;
            float* out = dst + c * plane_out;
            std::fill(out, out + q.PT * q.Wp * e, 0.0f);
            for (int64_t h = 0; h < q.H; ++h) {
                float* o = out + ((q.PT + h) * q.Wp) * e;
                std::fill(o, o + q.PL * e, 0.0f);
                std::copy(in + h * row, in + h * row + row, o + q.PL * e);
                std::fill(o + q.PL * e + row, o + q.Wp * e, 0.0f);
            }
            std::fill(out + (q.PT + q.H) * q.Wp * e, out + plane_out, 0.0f);
        }
    });
}

}  // namespace

void blocked_conv2d(ThreadPool& pool, const WindowGeometry& g, const LanePackedFilters& filters,
                    BlockedConvLayout layout, const float* x, int64_t N, int64_t C, const float* bias,
                    const ConvEpilogue* epilogue, const float* z, float* y) {
    if (epilogue != nullptr && !epilogue->active()) epilogue = nullptr;
    const Geometry q = geometry_of(g, C);
    // A strided 1x1 layer with blocked input (ResNet's downsampling shortcuts): the positions it reads, gathered
    // once into a contiguous image, make it a 1x1 stride-1 layer, whose tiles read their positions one after
    // another from one address instead of one address each.
    if (q.KH == 1 && q.KW == 1 && (q.SH > 1 || q.SW > 1) && !q.padded && layout.x_blocked) {
        const int64_t blocks = C / kChannelBlock, P = q.OH * q.OW;
        float* gathered = thread_scratch_buffer<float, 41>(N * C * P);
        pool.parallel_for(N * blocks, 1, [&](int64_t first, int64_t last) {
            for (int64_t b = first; b < last; ++b) {
                const float* in = x + b * q.H * q.W * kChannelBlock;
                float* out = gathered + b * P * kChannelBlock;
                for (int64_t oh = 0; oh < q.OH; ++oh)
                    for (int64_t ow = 0; ow < q.OW; ++ow)
                        std::memcpy(out + (oh * q.OW + ow) * kChannelBlock,
                                    in + (oh * q.SH * q.W + ow * q.SW) * kChannelBlock,
                                    kChannelBlock * sizeof(float));
            }
        });
        WindowGeometry unit = g;
        unit.input = g.output;
        unit.strides = {1, 1};
        blocked_conv2d(pool, unit, filters, layout, gathered, N, C, bias, epilogue, z, y);
        return;
    }
    const int64_t M = filters.rows(), P = q.OH * q.OW, depth = C * q.KH * q.KW;
    const int64_t e = layout.x_blocked ? kChannelBlock : 1;
    const int64_t width = filters.panel_width(), panels = filters.panels();
    // Not a structured binding: clang 14 does not let the lambdas below capture one.
    // A 1x1 stride-1 unpadded layer reads its positions one after another: the tiles with one input address.
    const bool contiguous = q.KH == 1 && q.KW == 1 && q.SH == 1 && q.SW == 1 && !q.padded;
    const std::pair<const PositionTileFn*, int64_t> tiles_of_width = tiles_for(width, contiguous ? e : 0);
    const PositionTileFn* tile_fns = tiles_of_width.first;
    const int64_t tile_height = tiles_of_width.second;
    const bool vector_act = epilogue == nullptr || vector_activation(*epilogue);

    // Step k = (c, kh, kw) of the filters reads its input at a fixed offset from each position's address.
    int64_t* offsets = thread_scratch_buffer<int64_t, 11>(depth);
    for (int64_t c = 0, k = 0; c < C; ++c) {
        const int64_t channel = layout.x_blocked ? (c / kChannelBlock) * q.Hp * q.Wp * kChannelBlock + c % kChannelBlock
                                                 : c * q.Hp * q.Wp;
        for (int64_t i = 0; i < q.KH; ++i)
            for (int64_t j = 0; j < q.KW; ++j) offsets[k++] = channel + (i * q.DH * q.Wp + j * q.DW) * e;
    }
    float* padded = q.padded ? thread_scratch_buffer<float, 11>(C * q.Hp * q.Wp) : nullptr;

    // Tasks are (filter panel, band of positions), as the lane kernels split theirs: bands first when panels are
    // few, so that a thread keeps the positions the previous layer left in its cache.
    const int64_t threads = pool.size();
    const int64_t wanted = (4 * threads + panels - 1) / panels;
    const int64_t tiles = (P + tile_height - 1) / tile_height;
    // Few positions and panels enough for every thread: split by panels alone, so that each panel's weights are
    // read by one thread and reused by all the positions (ResNet-50's 7x7 layers at 2 threads).
    const bool panels_only = tiles <= 16 && panels >= 2 * threads && panels % threads == 0;
    const int64_t bands = panels_only ? 1 : std::min(tiles, (wanted + threads - 1) / threads * threads);
    const bool bands_outer = panels <= 2 * threads;
    const size_t panel_bytes = static_cast<size_t>(depth * width) * sizeof(float);
    // Steps per slice of a deep panel (see the tiles' loop): a slice of the weights that fits L1 beside the inputs.
    const int64_t slice_steps = std::max<int64_t>(16, kWeightSliceBytes / (width * static_cast<int64_t>(sizeof(float))));
    const int64_t depth_step =
        static_cast<int64_t>(panel_bytes) < kSlicedPanelBytes || depth <= 2 * slice_steps ? depth : slice_steps;
    for (int64_t n = 0; n < N; ++n) {
        const float* image = x + n * C * q.H * q.W;
        if (padded != nullptr) {
            pad_image(pool, q, image, layout.x_blocked, padded);
            image = padded;
        }
        const float* z_image = z != nullptr ? z + n * M * P : nullptr;
        float* y_image = y + n * M * P;
        pool.parallel_for(panels * bands, 1, [&](int64_t first, int64_t last) {
            alignas(64) float results[kChunk * kLanePanelWidth];
            alignas(64) float panel_bias[kLanePanelWidth] = {};
            const float* xs[kMaxTileRows];
            float* outs[kMaxTileRows];
            const float* sums[kMaxTileRows];
            for (int64_t t = first; t < last; ++t) {
                const int64_t p = bands_outer ? t % panels : t / bands;
                const int64_t band = bands_outer ? t / panels : t % bands;
                const int64_t j_begin = band_begin(tiles, bands, band) * tile_height;
                const int64_t j_end = std::min(P, band_begin(tiles, bands, band + 1) * tile_height);
                const int64_t m0 = p * width, live = std::min(width, M - m0);
                std::fill(panel_bias, panel_bias + kLanePanelWidth, 0.0f);
                if (bias != nullptr) std::copy(bias + m0, bias + m0 + live, panel_bias);
                // The next task's panel, when it is another: its bytes spread over every step of this task's tiles.
                const int64_t next = t + 1 < last ? (bands_outer ? (t + 1) % panels : (t + 1) / bands) : p;
                const int64_t task_tiles = (j_end - j_begin + tile_height - 1) / tile_height;
                const int64_t next_step_bytes =
                    (static_cast<int64_t>(panel_bytes) + task_tiles * depth - 1) / std::max<int64_t>(1, task_tiles * depth);
                const char* next_panel =
                    next != p ? reinterpret_cast<const char*>(filters.panel(next)) : nullptr;
                int64_t next_offset = 0;  // where the next tile's share of the next panel starts
                // The output row and column of position j, stepped along instead of divided out per position.
                int64_t oh = j_begin / q.OW, ow = j_begin % q.OW;
                for (int64_t j0 = j_begin; j0 < j_end; j0 += kChunk) {
                    const int64_t chunk = std::min(kChunk, j_end - j0);
                    const int64_t chunk_oh = oh, chunk_ow = ow;
                    // A deep panel goes through the chunk's tiles a slice of steps at a time, each slice staying in
                    // L1 for all of them: the results are stored after each slice and read back by the next, and
                    // the sum is added after the first, the activation after the last.
                    for (int64_t k0 = 0; k0 < depth; k0 += depth_step) {
                        const int64_t steps = std::min(depth_step, depth - k0);
                        const bool first_slice = k0 == 0, last_slice = k0 + steps == depth;
                        oh = chunk_oh, ow = chunk_ow;
                        for (int64_t r0 = 0; r0 < chunk; r0 += tile_height) {
                            const int64_t rows = std::min(tile_height, chunk - r0);
                            for (int64_t r = 0; r < rows; ++r, ++ow) {
                                if (ow == q.OW) ow = 0, ++oh;
                                const int64_t j = j0 + r0 + r;
                                xs[r] = image + (oh * q.SH * q.Wp + ow * q.SW) * e;
                                if (layout.y_blocked) {
                                    const int64_t at = (m0 / kChannelBlock * P + j) * kChannelBlock;
                                    outs[r] = y_image + at;
                                    sums[r] = z_image != nullptr ? z_image + at : nullptr;
                                } else {
                                    outs[r] = results + (r0 + r) * kLanePanelWidth;
                                }
                            }
                            // A blocked output takes its epilogue in the tile; an NCHW one in the transposed store.
                            const char* next_part = next_panel != nullptr ? next_panel + next_offset : nullptr;
                            next_offset += steps * next_step_bytes;
                            const bool sum_here = z_image != nullptr && first_slice;
                            const TileOutput to =
                                layout.y_blocked
                                    ? TileOutput{outs, sum_here ? sums : nullptr, P * kChannelBlock,
                                                 int(live / kChannelBlock),
                                                 vector_act && last_slice ? epilogue : nullptr, next_part,
                                                 next_step_bytes, !first_slice}
                                    : TileOutput{outs, nullptr, kChannelBlock, int(width / kChannelBlock), nullptr,
                                                 next_part, next_step_bytes, !first_slice};
                            tile_fns[rows - 1](steps, filters.panel(p) + k0 * width, xs, offsets + k0, panel_bias, to);
                            if (layout.y_blocked && !vector_act && last_slice) {
                                for (int64_t r = 0; r < rows; ++r)
                                    for (int64_t v = 0; v < live / kChannelBlock; ++v)
                                        epilogue->apply(outs[r] + v * P * kChannelBlock,
                                                        static_cast<const float*>(nullptr), kChannelBlock);
                            }
                        }
                    }
                    if (!layout.y_blocked) {
                        float* out = y_image + m0 * P + j0;
                        lane_store_transposed(results, live, chunk, out, P, epilogue,
                                              z_image != nullptr ? z_image + m0 * P + j0 : nullptr);
                        if (epilogue != nullptr && !vector_act)
                            for (int64_t m = 0; m < live; ++m)
                                epilogue->apply(out + m * P, static_cast<const float*>(nullptr), chunk);
                    }
                }
            }
        });
    }
}

namespace {

// Partial sums kept apart for a position at the image's edge (one per window row, up to this many).
constexpr int64_t kMaxWindowRows = 4;

// Positions [ow0, ow0 + kPos) of output row oh of one channel block, every tap of which lies inside the image
// along the width (rows kh0..kh1 lie inside along the height).  Accumulators start from the bias.
// kMax: the maximum over the window instead (MaxPool; w unused, `bias` is -infinity).
template <bool kMax, int kPos>
__attribute__((target("avx512f"))) inline void depthwise_positions(const Geometry& q, const float* x, const float* w,
                                                                   const __m512& bias, int64_t oh, int64_t ow0,
                                                                   int64_t kh0, int64_t kh1, __m512* acc) {
    for (int p = 0; p < kPos; ++p) acc[p] = bias;
    for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* row = x + q.row_slot(oh * q.SH - q.PT + kh * q.DH) * q.W * kChannelBlock;
        for (int64_t kw = 0; kw < q.KW; ++kw) {
            const __m512 wv = kMax ? bias : _mm512_loadu_ps(w + (kh * q.KW + kw) * kChannelBlock);
            const float* at = row + (ow0 * q.SW - q.PL + kw * q.DW) * kChannelBlock;
#pragma GCC unroll 8
            for (int p = 0; p < kPos; ++p) {
                const __m512 xv = _mm512_loadu_ps(at + p * q.SW * kChannelBlock);
                acc[p] = kMax ? _mm512_max_ps(acc[p], xv) : _mm512_fmadd_ps(xv, wv, acc[p]);
            }
        }
    }
}

// One output position of a depthwise block: the sum, then the activation, as it is stored.
__attribute__((target("avx512f"))) inline void store_position(const Geometry& q, int64_t oh, int64_t ow,
                                                              const __m512& value, const ConvEpilogue* epilogue,
                                                              bool vector_act, const float* z, float* y) {
    const int64_t at = ((oh - q.out_row0) * q.OW + ow) * kChannelBlock;
    __m512 v = value;
    if (z != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(z + at));
    if (epilogue != nullptr && vector_act) v = activate(v, *epilogue);
    _mm512_storeu_ps(y + at, v);
    if (epilogue != nullptr && !vector_act) epilogue->apply(y + at, static_cast<const float*>(nullptr), kChannelBlock);
}

// The activations that are a clamp, min(max(v, lo), hi) (none, Relu, Clip), as two vectors, so that the 3x3 rows
// below store their results without a branch per position; nullopt for the others (and for a sum to add).
struct Clamp {
    __m512 lo, hi;
};
// min(max(v, lo), hi) with a NaN in v kept (max_ps and min_ps return their second operand when either is NaN).
__attribute__((target("avx512f"))) inline __m512 clamped(__m512 v, const Clamp& clamp) {
    return _mm512_min_ps(clamp.hi, _mm512_max_ps(clamp.lo, v));
}
// What the 3x3 rows keep in registers besides the filters: the bias and the clamp.
struct Depthwise3Constants {
    __m512 bias;
    Clamp clamp;
};
__attribute__((target("avx512f"))) inline std::optional<Clamp> clamp_of(const ConvEpilogue* epilogue, const float* z) {
    using A = ConvEpilogue::Activation;
    const float inf = std::numeric_limits<float>::infinity();
    if (z != nullptr) return std::nullopt;
    if (epilogue == nullptr || epilogue->activation == A::None)
        return Clamp{_mm512_set1_ps(-inf), _mm512_set1_ps(inf)};
    if (epilogue->activation == A::Relu) return Clamp{_mm512_setzero_ps(), _mm512_set1_ps(inf)};
    if (epilogue->activation == A::Clip) return Clamp{_mm512_set1_ps(epilogue->alpha), _mm512_set1_ps(epilogue->beta)};
    return std::nullopt;
}

// kPos positions [ow0, ow0 + kPos) of one output row of a 3x3 depthwise convolution of one channel block, stride
// kStride (1 or 2) and padding 1 along the width, from the input rows `rows[kh]` for window rows [kh0, kh1): the
// (kPos - 1) * kStride + 3 input vectors a row needs are loaded once and serve every tap that reads them (the general
// loop loads one per tap), and the columns just outside the image count as zeros.  Results are clamped and stored
// at `out`.
template <int kPos, int kStride>
__attribute__((target("avx512f"))) inline void depthwise3_positions(const float* const* rows, int64_t kh0,
                                                                    int64_t kh1, int64_t W, int64_t ow0,
                                                                    const float* w,
                                                                    const Depthwise3Constants& constants,
                                                                    float* out) {
    constexpr int kColumns = (kPos - 1) * kStride + 3;
    __m512 acc[kPos];
    for (int p = 0; p < kPos; ++p) acc[p] = constants.bias;
    const int64_t first_column = ow0 * kStride - 1;
    const bool left_inside = first_column >= 0, right_inside = first_column + kColumns - 1 < W;
    for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* at = rows[kh] + first_column * kChannelBlock;
        __m512 xv[kColumns];
        xv[0] = left_inside ? _mm512_loadu_ps(at) : _mm512_setzero_ps();
#pragma GCC unroll 32
        for (int i = 1; i < kColumns - 1; ++i) xv[i] = _mm512_loadu_ps(at + i * kChannelBlock);
        xv[kColumns - 1] = right_inside ? _mm512_loadu_ps(at + (kColumns - 1) * kChannelBlock) : _mm512_setzero_ps();
#pragma GCC unroll 3
        for (int kw = 0; kw < 3; ++kw) {
            const __m512 wv = _mm512_loadu_ps(w + (kh * 3 + kw) * kChannelBlock);
#pragma GCC unroll 16
            for (int p = 0; p < kPos; ++p) acc[p] = _mm512_fmadd_ps(xv[p * kStride + kw], wv, acc[p]);
        }
    }
#pragma GCC unroll 16
    for (int p = 0; p < kPos; ++p)
        _mm512_storeu_ps(out + p * kChannelBlock, clamped(acc[p], constants.clamp));
}

using Depthwise3Fn = void (*)(const float* const*, int64_t, int64_t, int64_t, int64_t, const float*,
                              const Depthwise3Constants&, float*);
// Positions a call takes: eight at stride 1 (10 input vectors and 8 accumulators), six at stride 2 (13 and 6).
template <int kStride>
constexpr int kDepthwise3Positions = kStride == 1 ? 8 : 6;
template <int kStride, int... kCounts>
constexpr std::array<Depthwise3Fn, sizeof...(kCounts)> depthwise3_table(std::integer_sequence<int, kCounts...>) {
    return {depthwise3_positions<kCounts + 1, kStride>...};
}
template <int kStride>
constexpr auto kDepthwise3 =
    depthwise3_table<kStride>(std::make_integer_sequence<int, kDepthwise3Positions<kStride>>());

// The 3x3 rows take 3x3 taps, unit dilations, a stride of 1 or 2 along the width and one column of padding before
// the image, and at most one after it that any window reaches.
bool depthwise3_applies(const Geometry& q) {
    return q.KH == 3 && q.KW == 3 && (q.SW == 1 || q.SW == 2) && q.DW == 1 && q.DH == 1 && q.PL == 1 &&
           (q.OW - 1) * q.SW + 1 <= q.W;
}

// Output rows [oh0, oh1) of one channel block by the 3x3 rows (depthwise3_applies), at the geometry's stride.
template <int kStride>
__attribute__((target("avx512f"))) void depthwise3_rows(const Geometry& q, const float* x, const float* w,
                                                        const Depthwise3Constants& constants, float* y, int64_t oh0,
                                                        int64_t oh1) {
    constexpr int64_t kPositions = kDepthwise3Positions<kStride>;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
        int64_t kh0 = 0, kh1 = 3;
        while (kh0 < 3 && oh * q.SH - q.PT + kh0 < 0) ++kh0;
        while (kh1 > kh0 && oh * q.SH - q.PT + kh1 - 1 >= q.H) --kh1;
        const float* rows[3] = {};
        for (int64_t kh = kh0; kh < kh1; ++kh) rows[kh] = x + q.row_slot(oh * q.SH - q.PT + kh) * q.W * kChannelBlock;
        float* out = y + (oh - q.out_row0) * q.OW * kChannelBlock;
        for (int64_t ow = 0; ow < q.OW; ow += kPositions) {
            const int64_t count = std::min(kPositions, q.OW - ow);
            kDepthwise3<kStride>[count - 1](rows, kh0, kh1, q.W, ow, w, constants, out + ow * kChannelBlock);
        }
    }
}

// A 1x1 depthwise convolution without padding: a per-channel scale and shift (a BatchNormalization as a
// convolution, optimizer/batchnorm_to_conv.cc), then the clamp.  A product and a sum, not a fused multiply-add, so
// that the results are the normalization's own to the bit (scale_shift_block below rounds the same way).
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void scale_shift_rows(
    const Geometry& q, const float* x, const float* w, __m512 shift, const Clamp& clamp, float* y, int64_t oh0,
    int64_t oh1) {
    const __m512 scale = _mm512_loadu_ps(w);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
        const float* in = x + q.row_slot(oh * q.SH - q.PT) * q.W * kChannelBlock;
        float* out = y + (oh - q.out_row0) * q.OW * kChannelBlock;
        for (int64_t ow = 0; ow < q.OW; ++ow) {
            const __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(in + ow * kChannelBlock), scale), shift);
            _mm512_storeu_ps(out + ow * kChannelBlock, clamped(v, clamp));
        }
    }
}

template <bool kMax>
__attribute__((target("avx512f"))) void depthwise_rows(const Geometry& q, const float* x, const float* w,
                                                       const float* bias, const ConvEpilogue* epilogue,
                                                       bool vector_act, const float* z, float* y, int64_t oh0,
                                                       int64_t oh1) {
    const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512 b = kMax ? lowest : bias != nullptr ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 identity = kMax ? lowest : _mm512_setzero_ps();
    if constexpr (!kMax) {
        const std::optional<Clamp> clamp = vector_act ? clamp_of(epilogue, z) : std::nullopt;
        if (clamp && depthwise3_applies(q)) {
            const Depthwise3Constants constants{b, *clamp};
            if (q.SW == 1) depthwise3_rows<1>(q, x, w, constants, y, oh0, oh1);
            else depthwise3_rows<2>(q, x, w, constants, y, oh0, oh1);
            return;
        }
        if (clamp && q.KH == 1 && q.KW == 1 && q.SW == 1 && !q.padded) {
            scale_shift_rows(q, x, w, b, *clamp, y, oh0, oh1);
            return;
        }
    }
    // Output columns whose whole window lies inside the image along the width: [lo, hi).
    auto inside = [&](int64_t ow) { return ow * q.SW - q.PL >= 0 && ow * q.SW - q.PL + (q.KW - 1) * q.DW < q.W; };
    int64_t lo = 0;
    while (lo < q.OW && !inside(lo)) ++lo;
    int64_t hi = lo;
    while (hi < q.OW && inside(hi)) ++hi;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
        int64_t kh0 = 0, kh1 = q.KH;
        while (kh0 < q.KH && oh * q.SH - q.PT + kh0 * q.DH < 0) ++kh0;
        while (kh1 > kh0 && oh * q.SH - q.PT + (kh1 - 1) * q.DH >= q.H) --kh1;
        // Edge columns: only the taps inside the image.
        for (int64_t ow = 0; ow < q.OW; ++ow) {
            if (ow == lo) ow = std::max(hi, lo);
            if (ow >= q.OW) break;
            // One chain per window row: a single chain of dependent multiply-adds would wait on each one.
            __m512 acc[kMaxWindowRows];
            for (int64_t kh = kh0; kh < kh1; ++kh) {
                __m512& a = acc[(kh - kh0) % kMaxWindowRows];
                if (kh - kh0 < kMaxWindowRows) a = kh == kh0 ? b : identity;
                const float* row = x + q.row_slot(oh * q.SH - q.PT + kh * q.DH) * q.W * kChannelBlock;
                for (int64_t kw = 0; kw < q.KW; ++kw) {
                    const int64_t iw = ow * q.SW - q.PL + kw * q.DW;
                    if (iw < 0 || iw >= q.W) continue;
                    const __m512 xv = _mm512_loadu_ps(row + iw * kChannelBlock);
                    a = kMax ? _mm512_max_ps(a, xv)
                             : _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + (kh * q.KW + kw) * kChannelBlock), a);
                }
            }
            __m512 total = kh1 > kh0 ? acc[0] : b;
            for (int64_t i = 1; i < std::min<int64_t>(kh1 - kh0, kMaxWindowRows); ++i)
                total = kMax ? _mm512_max_ps(total, acc[i]) : _mm512_add_ps(total, acc[i]);
            store_position(q, oh, ow, total, epilogue, vector_act, z, y);
        }
        int64_t ow = lo;
        for (; ow + 8 <= hi; ow += 8) {
            __m512 acc[8];
            depthwise_positions<kMax, 8>(q, x, w, b, oh, ow, kh0, kh1, acc);
            for (int p = 0; p < 8; ++p) store_position(q, oh, ow + p, acc[p], epilogue, vector_act, z, y);
        }
        if (ow < hi) {
            __m512 acc[8];
            const int64_t left = hi - ow;
            switch (left) {
                case 1: depthwise_positions<kMax, 1>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
                case 2: depthwise_positions<kMax, 2>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
                case 3: depthwise_positions<kMax, 3>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
                case 4: depthwise_positions<kMax, 4>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
                case 5: depthwise_positions<kMax, 5>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
                case 6: depthwise_positions<kMax, 6>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
                default: depthwise_positions<kMax, 7>(q, x, w, b, oh, ow, kh0, kh1, acc); break;
            }
            for (int64_t p = 0; p < left; ++p) store_position(q, oh, ow + p, acc[p], epilogue, vector_act, z, y);
        }
    }
}

// How many bands of output rows the per-block kernels split a plane into (see blocked_depthwise2d).
int64_t plane_bands(const ThreadPool& pool, const Geometry& q, int64_t blocks) {
    const int64_t threads = pool.size();
    return q.OH >= 8 * threads ? 4 * threads : std::min(q.OH, (4 * threads + blocks - 1) / blocks);
}

}  // namespace

// Output rows handed to a band sink at a time: a few rows of one channel block, in L1 (112 x 16 floats a row).
constexpr int64_t kSinkRows = 4;

void blocked_depthwise2d(ThreadPool& pool, const WindowGeometry& g, const float* packed_w, int64_t N, int64_t C,
                         const float* x, const float* bias, const ConvEpilogue* epilogue, const float* z, float* y,
                         const BlockedBandSink* sink) {
    if (epilogue != nullptr && !epilogue->active()) epilogue = nullptr;
    const Geometry q = geometry_of(g, C);
    const bool vector_act = epilogue == nullptr || vector_activation(*epilogue);
    const int64_t blocks = C / kChannelBlock, taps = q.KH * q.KW;
    const int64_t in_block = q.H * q.W * kChannelBlock, out_block = q.OH * q.OW * kChannelBlock;
    // Bands of rows with every channel block of a band on one thread, so that a thread reads the positions its
    // neighbouring layers (split by positions too) leave in, and take from, its cache; on small planes, with many
    // blocks, fewer bands (7x7 rows do not split evenly) and the blocks split instead.
    const int64_t bands = plane_bands(pool, q, blocks);
    pool.parallel_for(N * bands * blocks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t n = t / (bands * blocks), band = t / blocks % bands, cb = t % blocks;
            const int64_t oh0 = band_begin(q.OH, bands, band), oh1 = band_begin(q.OH, bands, band + 1);
            const int64_t image_block = n * blocks + cb;
            const float* w = packed_w + cb * taps * kChannelBlock;
            const float* b = bias != nullptr ? bias + cb * kChannelBlock : nullptr;
            if (sink == nullptr) {
                depthwise_rows<false>(q, x + image_block * in_block, w, b, epilogue, vector_act,
                                      z != nullptr ? z + image_block * out_block : nullptr, y + image_block * out_block,
                                      oh0, oh1);
                continue;
            }
            // A few rows at a time into this thread's buffer, each handed over while it is in cache.
            float* rows = align_up(thread_scratch_buffer<float, 42>(kSinkRows * q.OW * kChannelBlock + kChannelBlock));
            for (int64_t r0 = oh0; r0 < oh1; r0 += kSinkRows) {
                const int64_t r1 = std::min(oh1, r0 + kSinkRows);
                Geometry at = q;
                at.out_row0 = r0;
                depthwise_rows<false>(at, x + image_block * in_block, w, b, epilogue, vector_act, nullptr, rows, r0,
                                      r1);
                sink->take(n, cb, r0, r1, rows);
            }
        }
    });
}

void blocked_max_pool2d(ThreadPool& pool, const WindowGeometry& g, int64_t N, int64_t C, const float* x, float* y) {
    const Geometry q = geometry_of(g, C);
    const int64_t blocks = C / kChannelBlock;
    const int64_t in_block = q.H * q.W * kChannelBlock, out_block = q.OH * q.OW * kChannelBlock;
    const int64_t bands = plane_bands(pool, q, blocks);
    pool.parallel_for(N * bands * blocks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t n = t / (bands * blocks), band = t / blocks % bands, cb = t % blocks;
            const int64_t image_block = n * blocks + cb;
            depthwise_rows<true>(q, x + image_block * in_block, nullptr, nullptr, nullptr, true, nullptr,
                                 y + image_block * out_block, band_begin(q.OH, bands, band),
                                 band_begin(q.OH, bands, band + 1));
        }
    });
}

// The ring's size: MobileNetV2's fused layers measured 15-20% slower with 64 or 128 KB (fewer output rows a step)
// and no faster with 512 KB.
constexpr int64_t kProducerRingBytes = int64_t(256) << 10;

namespace {

// Positions [j_begin, j_end) of a consumer convolution (BlockedConsumerConv) over its `channels` input channels, all
// filter panels: position j's channel c is band[(j - j_origin) * 16 + offsets[c]] (a band of blocked rows).  Y and
// Z are the image's [M, P] NCHW or blocked tensors.  On the calling thread.
void consume_band(const BlockedConsumerConv& consumer, const int64_t* offsets, int64_t channels, const float* band,
                  int64_t j_origin, int64_t j_begin, int64_t j_end, int64_t P, const float* z, float* y) {
    const LanePackedFilters& filters = *consumer.filters;
    const int64_t M = filters.rows(), width = filters.panel_width();
    const std::pair<const PositionTileFn*, int64_t> tiles_of_width = tiles_for(width, kChannelBlock);
    const PositionTileFn* tile_fns = tiles_of_width.first;
    const int64_t tile_height = tiles_of_width.second;
    const ConvEpilogue* epilogue = consumer.epilogue;
    const bool vector_act = epilogue == nullptr || vector_activation(*epilogue);
    alignas(64) float results[kChunk * kLanePanelWidth];
    alignas(64) float panel_bias[kLanePanelWidth];
    const float* xs[kMaxTileRows];
    float* outs[kMaxTileRows];
    const float* sums[kMaxTileRows];
    for (int64_t p = 0; p < filters.panels(); ++p) {
        const int64_t m0 = p * width, live = std::min(width, M - m0);
        std::fill(panel_bias, panel_bias + kLanePanelWidth, 0.0f);
        if (consumer.bias != nullptr) std::copy(consumer.bias + m0, consumer.bias + m0 + live, panel_bias);
        for (int64_t j0 = j_begin; j0 < j_end; j0 += kChunk) {
            const int64_t chunk = std::min(kChunk, j_end - j0);
            for (int64_t r0 = 0; r0 < chunk; r0 += tile_height) {
                const int64_t rows = std::min(tile_height, chunk - r0);
                xs[0] = band + (j0 + r0 - j_origin) * kChannelBlock;
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t j = j0 + r0 + r;
                    if (consumer.y_blocked) {
                        const int64_t at = (m0 / kChannelBlock * P + j) * kChannelBlock;
                        outs[r] = y + at;
                        sums[r] = z != nullptr ? z + at : nullptr;
                    } else {
                        outs[r] = results + (r0 + r) * kLanePanelWidth;
                    }
                }
                const TileOutput to =
                    consumer.y_blocked
                        ? TileOutput{outs, z != nullptr ? sums : nullptr, P * kChannelBlock, int(live / kChannelBlock),
                                     vector_act ? epilogue : nullptr, nullptr, 0}
                        : TileOutput{outs, nullptr, kChannelBlock, int(width / kChannelBlock), nullptr, nullptr, 0};
                tile_fns[rows - 1](channels, filters.panel(p), xs, offsets, panel_bias, to);
                if (consumer.y_blocked && !vector_act) {
                    for (int64_t r = 0; r < rows; ++r)
                        for (int64_t v = 0; v < live / kChannelBlock; ++v)
                            epilogue->apply(outs[r] + v * P * kChannelBlock, static_cast<const float*>(nullptr),
                                            kChannelBlock);
                }
            }
            if (!consumer.y_blocked) {
                float* out = y + m0 * P + j0;
                lane_store_transposed(results, live, chunk, out, P, epilogue, z != nullptr ? z + m0 * P + j0 : nullptr);
                if (epilogue != nullptr && !vector_act)
                    for (int64_t m = 0; m < live; ++m)
                        epilogue->apply(out + m * P, static_cast<const float*>(nullptr), chunk);
            }
        }
    }
}

}  // namespace

namespace {

// The ring and window part of blocked_conv_window2d and blocked_rows_window2d: each thread takes a run of output
// rows and walks it a few at a time; make_rows(n, row_begin, row_end, rows, block_floats, ring) makes the
// producer's image rows [row_begin, row_end) of image n (M channels) into the ring `rows` (channel block b of row
// r at rows + b * block_floats + ring.row_slot(r) * W * 16), on the calling worker; the window operation's rows
// follow from there.  begin_image(n) runs before each image's parallel region (a padded copy, say).
template <typename BeginImage, typename MakeRows>
void window_over_made_rows(ThreadPool& pool, int64_t M, const WindowGeometry& g, const float* packed_w,
                           const float* bias, const ConvEpilogue* epilogue, int64_t N, float* y,
                           const BlockedConsumerConv* consumer, const BlockedBandSink* sink,
                           const BeginImage& begin_image, const MakeRows& make_rows) {
    if (epilogue != nullptr && !epilogue->active()) epilogue = nullptr;
    BlockedConsumerConv consumer_conv{};
    if (consumer != nullptr) {
        consumer_conv = *consumer;
        if (consumer_conv.epilogue != nullptr && !consumer_conv.epilogue->active()) consumer_conv.epilogue = nullptr;
    }
    const bool max = packed_w == nullptr;
    const Geometry q = geometry_of(g, M);
    const bool vector_act = epilogue == nullptr || vector_activation(*epilogue);
    const int64_t blocks = M / kChannelBlock, taps = q.KH * q.KW;

    // Each thread takes a run of output rows and walks it a few at a time, keeping the producer's rows they read
    // in a ring (rows shared with the previous step stay; new ones replace those no longer read) small enough to
    // stay in L2 beside the filters.
    const int64_t row_bytes = blocks * q.W * kChannelBlock * static_cast<int64_t>(sizeof(float));
    auto rows_in = [&](int64_t out_rows) { return (out_rows - 1) * q.SH + (q.KH - 1) * q.DH + 1; };
    int64_t step_rows = 1;
    while (step_rows < q.OH && rows_in(step_rows + 1) * row_bytes <= kProducerRingBytes) ++step_rows;
    Geometry ring = q;
    ring.ring_rows = rows_in(step_rows);
    const int64_t block_floats = ring.ring_rows * q.W * kChannelBlock;  // one channel block's ring
    const int64_t parts = std::min<int64_t>(q.OH, pool.size());
    // With a consumer, the window's rows of a step go to a band of step_rows rows per channel block, and the
    // consumer's step k = channel c reads them at a fixed offset from each position's address.
    const int64_t band_floats = step_rows * q.OW * kChannelBlock, P = q.OH * q.OW;
    int64_t* consumer_offsets = nullptr;
    if (consumer != nullptr) {
        consumer_offsets = thread_scratch_buffer<int64_t, 19>(M);
        for (int64_t c = 0; c < M; ++c)
            consumer_offsets[c] = (c / kChannelBlock) * band_floats + c % kChannelBlock;
    }
    const int64_t M_out = consumer != nullptr ? consumer->filters->rows() : M;

    for (int64_t n = 0; n < N; ++n) {
        begin_image(n);
        float* y_image = y + n * M_out * P;
        const float* z_image = consumer_conv.z != nullptr ? consumer_conv.z + n * M_out * P : nullptr;
        pool.parallel_for(parts, 1, [&](int64_t first, int64_t last) {
            // Whole cache lines per position: a store split across two lines costs two.
            float* rows = align_up(thread_scratch_buffer<float, 16>(blocks * block_floats + kChannelBlock));
            float* band = consumer != nullptr || sink != nullptr
                              ? align_up(thread_scratch_buffer<float, 20>(blocks * band_floats + kChannelBlock))
                              : nullptr;
            for (int64_t part = first; part < last; ++part) {
                int64_t made_end = 0;  // producer rows before this one are made (or not needed again)
                for (int64_t o0 = band_begin(q.OH, parts, part), o_end = band_begin(q.OH, parts, part + 1);
                     o0 < o_end; o0 += step_rows) {
                    const int64_t o1 = std::min(o_end, o0 + step_rows);
                    const int64_t need_begin = std::clamp<int64_t>(o0 * q.SH - q.PT, 0, q.H);
                    const int64_t need_end = std::clamp<int64_t>(o0 * q.SH - q.PT + rows_in(o1 - o0), need_begin, q.H);
                    // The producer's rows not yet made.
                    const int64_t row_begin = std::max(need_begin, made_end);
                    if (need_end > row_begin) make_rows(n, row_begin, need_end, rows, block_floats, ring);
                    made_end = std::max(made_end, need_end);
                    // The window operation on output rows [o0, o1) from them, into Y or the band.
                    Geometry window = ring;
                    if (band != nullptr) window.out_row0 = o0;
                    for (int64_t b = 0; b < blocks; ++b) {
                        float* y_block = band != nullptr ? band + b * band_floats : y_image + b * P * kChannelBlock;
                        if (max) {
                            depthwise_rows<true>(window, rows + b * block_floats, nullptr, nullptr, nullptr, true,
                                                 nullptr, y_block, o0, o1);
                        } else {
                            depthwise_rows<false>(window, rows + b * block_floats, packed_w + b * taps * kChannelBlock,
                                                  bias != nullptr ? bias + b * kChannelBlock : nullptr, epilogue,
                                                  vector_act, nullptr, y_block, o0, o1);
                        }
                    }
                    // The consumer's positions of those rows, or the sink's rows, from the band.
                    if (sink != nullptr) {
                        for (int64_t b = 0; b < blocks; ++b) sink->take(n, b, o0, o1, band + b * band_floats);
                    } else if (band != nullptr) {
                        consume_band(consumer_conv, consumer_offsets, M, band, o0 * q.OW, o0 * q.OW, o1 * q.OW, P,
                                     z_image, y_image);
                    }
                }
            }
        });
    }
}

}  // namespace

void blocked_conv_window2d(ThreadPool& pool, const BlockedProducerConv& producer, const WindowGeometry& g,
                           const float* packed_w, const float* bias, const ConvEpilogue* epilogue, int64_t N,
                           const float* x, float* y, const BlockedConsumerConv* consumer, const BlockedBandSink* sink) {
    const ConvEpilogue* conv_epilogue =
        producer.epilogue != nullptr && producer.epilogue->active() ? producer.epilogue : nullptr;
    const LanePackedFilters& filters = *producer.filters;
    const int64_t M = filters.rows(), C = producer.channels, width = filters.panel_width();
    const Geometry qc = geometry_of(producer.g, C);  // the convolution's; its output is the window's input
    const int64_t depth = C * qc.KH * qc.KW;
    const int64_t e = producer.x_blocked ? kChannelBlock : 1;
    // A 1x1 stride-1 unpadded convolution reads its positions one after another (one-address tiles).
    const bool contiguous = qc.KH == 1 && qc.KW == 1 && qc.SH == 1 && qc.SW == 1 && !qc.padded;
    const std::pair<const PositionTileFn*, int64_t> tiles_of_width = tiles_for(width, contiguous ? e : 0);
    const PositionTileFn* tile_fns = tiles_of_width.first;
    const int64_t tile_height = tiles_of_width.second;

    // Step k = (c, kh, kw) of the filters reads its input at a fixed offset from each position's address.
    int64_t* offsets = thread_scratch_buffer<int64_t, 11>(depth);
    for (int64_t c = 0, k = 0; c < C; ++c) {
        const int64_t channel = producer.x_blocked
                                    ? (c / kChannelBlock) * qc.Hp * qc.Wp * kChannelBlock + c % kChannelBlock
                                    : c * qc.Hp * qc.Wp;
        for (int64_t i = 0; i < qc.KH; ++i)
            for (int64_t j = 0; j < qc.KW; ++j) offsets[k++] = channel + (i * qc.DH * qc.Wp + j * qc.DW) * e;
    }
    float* padded = qc.padded ? thread_scratch_buffer<float, 11>(C * qc.Hp * qc.Wp) : nullptr;
    const float* image = nullptr;
    auto begin_image = [&](int64_t n) {
        image = x + n * C * qc.H * qc.W;
        if (padded != nullptr) {
            pad_image(pool, qc, image, producer.x_blocked, padded);
            image = padded;
        }
    };
    // The convolution of rows [row_begin, row_end), every filter panel.
    auto make_rows = [&](int64_t, int64_t row_begin, int64_t row_end, float* rows, int64_t block_floats,
                         const Geometry& ring_geometry) {
        // Local copies: the stores below go through float pointers the compiler cannot tell from these.
        const Geometry ring = ring_geometry, conv = qc;
        const float* const x_image = image;
        alignas(64) float panel_bias[kLanePanelWidth];
        const float* xs[kMaxTileRows];
        float* outs[kMaxTileRows];
        const int64_t W = ring.W, j_begin = row_begin * W, j_end = row_end * W;
        for (int64_t p = 0; p < filters.panels(); ++p) {
            const int64_t m0 = p * width, live = std::min(width, M - m0);
            std::fill(panel_bias, panel_bias + kLanePanelWidth, 0.0f);
            if (producer.bias != nullptr) std::copy(producer.bias + m0, producer.bias + m0 + live, panel_bias);
            float* panel_rows = rows + (m0 / kChannelBlock) * block_floats;
            // Position j's row and column, and its place in the ring, stepped along (no division per position).
            int64_t ih = row_begin, iw = 0;
            float* row_out = panel_rows + ring.row_slot(ih) * W * kChannelBlock;
            for (int64_t j0 = j_begin; j0 < j_end; j0 += tile_height) {
                const int64_t count = std::min(tile_height, j_end - j0);
                xs[0] = x_image + j0 * e;
                for (int64_t r = 0; r < count; ++r, ++iw) {
                    if (iw == W) {
                        iw = 0;
                        row_out = panel_rows + ring.row_slot(++ih) * W * kChannelBlock;
                    }
                    if (!contiguous) xs[r] = x_image + (ih * conv.SH * conv.Wp + iw * conv.SW) * e;
                    outs[r] = row_out + iw * kChannelBlock;
                }
                const TileOutput to{outs, nullptr, block_floats, int(live / kChannelBlock), conv_epilogue, nullptr, 0};
                tile_fns[count - 1](depth, filters.panel(p), xs, offsets, panel_bias, to);
            }
        }
    };
    window_over_made_rows(pool, M, g, packed_w, bias, epilogue, N, y, consumer, sink, begin_image, make_rows);
}

void blocked_rows_window2d(ThreadPool& pool, const BlockedRowMaker& maker, int64_t M, const WindowGeometry& g,
                           const float* packed_w, const float* bias, const ConvEpilogue* epilogue, int64_t N,
                           float* y, const BlockedBandSink* sink) {
    const int64_t W = g.input[1];
    window_over_made_rows(pool, M, g, packed_w, bias, epilogue, N, y, nullptr, sink, [](int64_t) {},
                          [&](int64_t n, int64_t row_begin, int64_t row_end, float* rows, int64_t block_floats,
                              const Geometry& ring) {
                              maker.make_rows(n, row_begin, row_end,
                                              BlockedRing{rows, block_floats, W, ring.ring_rows});
                          });
}

// The band a step of blocked_depthwise_pointwise2d makes at most (rows of every channel block), so that it stays in
// L2 beside the consumer's filters.
constexpr int64_t kDepthwiseBandBytes = int64_t(128) << 10;

void blocked_depthwise_pointwise2d(ThreadPool& pool, const WindowGeometry& g, const float* packed_w, const float* bias,
                                   const ConvEpilogue* epilogue, int64_t N, int64_t C, const float* x,
                                   const BlockedConsumerConv& consumer, float* y) {
    if (epilogue != nullptr && !epilogue->active()) epilogue = nullptr;
    BlockedConsumerConv consumer_conv = consumer;
    if (consumer_conv.epilogue != nullptr && !consumer_conv.epilogue->active()) consumer_conv.epilogue = nullptr;
    const Geometry q = geometry_of(g, C);
    const bool vector_act = epilogue == nullptr || vector_activation(*epilogue);
    const int64_t blocks = C / kChannelBlock, taps = q.KH * q.KW, P = q.OH * q.OW;
    const int64_t in_block = q.H * q.W * kChannelBlock, M_out = consumer.filters->rows();
    const int64_t row_bytes = blocks * q.OW * kChannelBlock * static_cast<int64_t>(sizeof(float));
    const int64_t step_rows = std::clamp<int64_t>(kDepthwiseBandBytes / row_bytes, 1, q.OH);
    const int64_t band_floats = step_rows * q.OW * kChannelBlock;
    int64_t* offsets = thread_scratch_buffer<int64_t, 19>(C);
    for (int64_t c = 0; c < C; ++c) offsets[c] = (c / kChannelBlock) * band_floats + c % kChannelBlock;
    const int64_t parts = std::min<int64_t>(q.OH, pool.size());
    for (int64_t n = 0; n < N; ++n) {
        const float* image = x + n * C * q.H * q.W;
        float* y_image = y + n * M_out * P;
        const float* z_image = consumer_conv.z != nullptr ? consumer_conv.z + n * M_out * P : nullptr;
        pool.parallel_for(parts, 1, [&](int64_t first, int64_t last) {
            float* band = align_up(thread_scratch_buffer<float, 20>(blocks * band_floats + kChannelBlock));
            for (int64_t part = first; part < last; ++part) {
                for (int64_t o0 = band_begin(q.OH, parts, part), o_end = band_begin(q.OH, parts, part + 1);
                     o0 < o_end; o0 += step_rows) {
                    const int64_t o1 = std::min(o_end, o0 + step_rows);
                    Geometry window = q;
                    window.out_row0 = o0;
                    for (int64_t b = 0; b < blocks; ++b)
                        depthwise_rows<false>(window, image + b * in_block, packed_w + b * taps * kChannelBlock,
                                              bias != nullptr ? bias + b * kChannelBlock : nullptr, epilogue,
                                              vector_act, nullptr, band + b * band_floats, o0, o1);
                    consume_band(consumer_conv, offsets, C, band, o0 * q.OW, o0 * q.OW, o1 * q.OW, P, z_image,
                                 y_image);
                }
            }
        });
    }
}

namespace {

// The average or maximum of `positions` blocked positions: 16 channels' results.
__attribute__((target("avx512f"))) void reduce_block(const float* x, int64_t positions, bool max, float* out) {
    __m512 acc[4];
    for (__m512& a : acc) a = max ? _mm512_set1_ps(-std::numeric_limits<float>::infinity()) : _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 4 <= positions; p += 4)
        for (int i = 0; i < 4; ++i) {
            const __m512 v = _mm512_loadu_ps(x + (p + i) * kChannelBlock);
            acc[i] = max ? _mm512_max_ps(acc[i], v) : _mm512_add_ps(acc[i], v);
        }
    for (; p < positions; ++p) {
        const __m512 v = _mm512_loadu_ps(x + p * kChannelBlock);
        acc[0] = max ? _mm512_max_ps(acc[0], v) : _mm512_add_ps(acc[0], v);
    }
    __m512 total = acc[0];
    for (int i = 1; i < 4; ++i) total = max ? _mm512_max_ps(total, acc[i]) : _mm512_add_ps(total, acc[i]);
    if (!max) total = _mm512_mul_ps(total, _mm512_set1_ps(1.0f / static_cast<float>(positions)));
    _mm512_storeu_ps(out, total);
}

}  // namespace

void blocked_plane_reduce(ThreadPool& pool, int64_t N, int64_t C, int64_t positions, const float* x, bool max,
                          float* y) {
    const int64_t blocks = N * (C / kChannelBlock);
    pool.parallel_for(blocks, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, positions)),
                      [&](int64_t first, int64_t last) {
                          for (int64_t b = first; b < last; ++b)
                              reduce_block(x + b * positions * kChannelBlock, positions, max, y + b * kChannelBlock);
                      });
}

namespace {

// A multiply, then an add, rounding twice like the NCHW path (normalization.cc): blocked or not, a
// BatchNormalization gives the same bits.  fp-contract=off keeps GCC from fusing the two back into an FMA.
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void scale_shift_block(const float* x, int64_t positions, const float* a,
                                                          const float* b, float* y) {
    const __m512 av = _mm512_loadu_ps(a), bv = _mm512_loadu_ps(b);
    for (int64_t p = 0; p < positions; ++p)
        _mm512_storeu_ps(y + p * kChannelBlock,
                         _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + p * kChannelBlock), av), bv));
}

}  // namespace

void blocked_scale_shift(ThreadPool& pool, int64_t N, int64_t C, int64_t positions, const float* x, const float* a,
                         const float* b, float* y) {
    const int64_t blocks = C / kChannelBlock;
    pool.parallel_for(N * blocks, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, positions)),
                      [&](int64_t first, int64_t last) {
                          for (int64_t t = first; t < last; ++t) {
                              const int64_t cb = t % blocks, at = t * positions * kChannelBlock;
                              scale_shift_block(x + at, positions, a + cb * kChannelBlock, b + cb * kChannelBlock,
                                                y + at);
                          }
                      });
}
#else  // never called: the blocked layout and its kernels need lane_gemm_supported() (blocked_layout_enabled())
void blocked_conv2d(ThreadPool&, const WindowGeometry&, const LanePackedFilters&, BlockedConvLayout, const float*,
                    int64_t, int64_t, const float*, const ConvEpilogue*, const float*, float*) {
    x86_kernel_unavailable(__func__);
}
void blocked_depthwise2d(ThreadPool&, const WindowGeometry&, const float*, int64_t, int64_t, const float*,
                         const float*, const ConvEpilogue*, const float*, float*, const BlockedBandSink*) {
    x86_kernel_unavailable(__func__);
}
void blocked_conv_window2d(ThreadPool&, const BlockedProducerConv&, const WindowGeometry&, const float*, const float*,
                           const ConvEpilogue*, int64_t, const float*, float*, const BlockedConsumerConv*,
                           const BlockedBandSink*) {
    x86_kernel_unavailable(__func__);
}
void blocked_depthwise_pointwise2d(ThreadPool&, const WindowGeometry&, const float*, const float*, const ConvEpilogue*,
                                   int64_t, int64_t, const float*, const BlockedConsumerConv&, float*) {
    x86_kernel_unavailable(__func__);
}
void blocked_rows_window2d(ThreadPool&, const BlockedRowMaker&, int64_t, const WindowGeometry&, const float*,
                           const float*, const ConvEpilogue*, int64_t, float*, const BlockedBandSink*) {
    x86_kernel_unavailable(__func__);
}
void blocked_max_pool2d(ThreadPool&, const WindowGeometry&, int64_t, int64_t, const float*, float*) {
    x86_kernel_unavailable(__func__);
}
void blocked_plane_reduce(ThreadPool&, int64_t, int64_t, int64_t, const float*, bool, float*) {
    x86_kernel_unavailable(__func__);
}
void blocked_scale_shift(ThreadPool&, int64_t, int64_t, int64_t, const float*, const float*, const float*, float*) {
    x86_kernel_unavailable(__func__);
}
#endif  // TESSERA_CPU_X86

}  // namespace tessera::cpu
