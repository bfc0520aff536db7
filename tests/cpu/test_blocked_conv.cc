// The blocked channel layout (plugins/cpu/util/blocked_conv.h): the reorders, the pools, Winograd, and the
// convolution on every pair of input and output layouts against a plain double convolution over strides, padding,
// dilation, filter counts that leave panels partly empty, several images, and each kind of epilogue.  Graphs that
// choose the layout are checked through the C API in tests/core/test_blocked_layout.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "kernel_harness.h"
#include "runtime/thread_pool.h"
#include "util/blocked_conv.h"

namespace tessera::cpu {
namespace {

using testing::random_floats;

TEST(BlockedLayout, ReordersRoundTrip) {
    ThreadPool pool(2);
    std::mt19937 rng(1);
    const int64_t N = 2, C = 32, P = 7 * 5;
    const std::vector<float> x = random_floats(N * C * P, rng);
    std::vector<float> blocked(x.size()), back(x.size());
    to_blocked(pool, x.data(), N, C, P, blocked.data());
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t p = 0; p < P; ++p)
                ASSERT_EQ(blocked[((n * (C / 16) + c / 16) * P + p) * 16 + c % 16], x[(n * C + c) * P + p]);
    from_blocked(pool, blocked.data(), N, C, P, back.data());
    EXPECT_EQ(back, x);
}

// A 2-D window over H x W with square kernel k, equal strides, pads and dilations (pads_end may differ).
WindowGeometry window(int64_t H, int64_t W, int64_t k, int64_t stride, int64_t pad_begin, int64_t pad_end,
                      int64_t dilation) {
    WindowGeometry g;
    g.input = {H, W};
    g.kernel = {k, k};
    g.strides = {stride, stride};
    g.dilations = {dilation, dilation};
    g.pads_begin = {pad_begin, pad_begin};
    g.pads_end = {pad_end, pad_end};
    const int64_t reach = (k - 1) * dilation + 1;
    g.output = {(H + pad_begin + pad_end - reach) / stride + 1, (W + pad_begin + pad_end - reach) / stride + 1};
    return g;
}

// Runs a kernel that reads X [N, C, HW] and Z [N, M, P] blocked and writes Y [N, M, P] blocked on NCHW data x and
// z, and returns Y in NCHW (its buffer starts as NaN, so positions it forgets fail the comparisons).
template <typename Kernel>
std::vector<float> through_blocked(ThreadPool& pool, const std::vector<float>& x, const std::vector<float>& z, int64_t N,
                                   int64_t C, int64_t HW, int64_t M, int64_t P, const Kernel& kernel) {
    std::vector<float> xb(x.size()), zb(z.size()), y(N * M * P, std::nanf("")), got(y.size());
    to_blocked(pool, x.data(), N, C, HW, xb.data());
    to_blocked(pool, z.data(), N, M, P, zb.data());
    kernel(xb.data(), zb.data(), y.data());
    from_blocked(pool, y.data(), N, M, P, got.data());
    return got;
}

// Each kind of epilogue: none, a sum with a vector activation (applied in registers), and a transcendental
// activation (applied afterwards).
std::array<ConvEpilogue, 3> epilogue_kinds() {
    std::array<ConvEpilogue, 3> kinds;
    kinds[1].activation = ConvEpilogue::Activation::Relu;
    kinds[1].has_sum = true;
    kinds[2].activation = ConvEpilogue::Activation::Sigmoid;
    return kinds;
}

struct Case {
    int64_t N, C, H, W, M, K, stride, pad, dilation;
};

// Y = act(conv(X, W) + B + Z), NCHW, in double.
std::vector<double> reference(const Case& c, const WindowGeometry& g, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& b, const std::vector<float>* z,
                              const ConvEpilogue& e) {
    const int64_t OH = g.output[0], OW = g.output[1];
    std::vector<double> y(c.N * c.M * OH * OW);
    for (int64_t n = 0; n < c.N; ++n)
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    double s = b[m];
                    for (int64_t ic = 0; ic < c.C; ++ic)
                        for (int64_t i = 0; i < c.K; ++i)
                            for (int64_t j = 0; j < c.K; ++j) {
                                const int64_t ih = oh * c.stride - c.pad + i * c.dilation;
                                const int64_t iw = ow * c.stride - c.pad + j * c.dilation;
                                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                                s += double(w[((m * c.C + ic) * c.K + i) * c.K + j]) *
                                     x[((n * c.C + ic) * c.H + ih) * c.W + iw];
                            }
                    const int64_t at = ((n * c.M + m) * OH + oh) * OW + ow;
                    if (z != nullptr) s += (*z)[at];
                    float f = static_cast<float>(s);
                    e.apply(&f, static_cast<const float*>(nullptr), 1);
                    y[at] = f;
                }
    return y;
}

TEST(BlockedLayout, ConvolutionMatchesPlainConvolutionInEveryLayout) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the blocked layout needs AVX-512F (or TESSERA_CPU_MAX_ISA caps it)";
    ThreadPool pool(2);
    std::mt19937 rng(7);
    const Case cases[] = {
        {1, 16, 7, 7, 64, 3, 1, 1, 1},    // one 64-filter panel, padded
        {2, 32, 9, 6, 48, 3, 2, 1, 1},    // stride 2, a 32-wide panel half used, two images
        {1, 64, 14, 14, 96, 1, 1, 0, 1},  // pointwise, in place
        {1, 16, 8, 8, 128, 3, 1, 2, 2},   // dilated
        {1, 48, 11, 11, 208, 1, 2, 0, 1}, // strided 1x1, a last panel of 16 filters
        {2, 32, 10, 9, 64, 1, 2, 0, 1},   // ... two images of even and odd sides (its input gathered when blocked)
        {1, 3, 15, 15, 32, 7, 2, 3, 1},   // three input channels: NCHW input only
        {1, 32, 5, 5, 40, 3, 1, 1, 1},    // 40 filters: NCHW output only
        {1, 24, 10, 10, 144, 1, 1, 0, 1}, // 48-filter panels from an NCHW input of 24 channels
        {1, 32, 9, 9, 16, 1, 1, 0, 1},    // one 16-filter panel
        {1, 16, 6, 6, 208, 3, 1, 1, 1},   // 64-filter panels, the last with 16
        {1, 512, 5, 5, 64, 3, 1, 1, 1},   // 1.2 MB panels, in slices of the depth
        {1, 1024, 4, 3, 48, 3, 2, 1, 1},  // ... 48 filters wide, strided
        {1, 4096, 3, 3, 80, 1, 1, 0, 1},  // ... pointwise, 64 and 16 filters wide
    };
    for (const Case& c : cases) {
        const WindowGeometry g = window(c.H, c.W, c.K, c.stride, c.pad, c.pad, c.dilation);
        const int64_t P = g.output[0] * g.output[1], HW = c.H * c.W;
        const std::vector<float> x = random_floats(c.N * c.C * HW, rng);
        const std::vector<float> w = random_floats(c.M * c.C * c.K * c.K, rng);
        const std::vector<float> b = random_floats(c.M, rng);
        const std::vector<float> z = random_floats(c.N * c.M * P, rng);
        const int64_t depth = c.C * c.K * c.K;
        // The lane kernels' panel width, and the one chosen for blocked outputs.
        const LanePackedFilters lane_filters(w.data(), c.M, depth, depth);
        const LanePackedFilters blocked_filters(w.data(), c.M, depth, depth, blocked_panel_width(c.M));

        for (const ConvEpilogue& epilogue : epilogue_kinds()) {
            const ConvEpilogue* e = &epilogue;
            const std::vector<double> want = reference(c, g, x, w, b, e->has_sum ? &z : nullptr, *e);
            for (int variant = 0; variant < 8; ++variant) {
                const int layouts = variant % 4;
                const LanePackedFilters& filters = variant < 4 ? lane_filters : blocked_filters;
                const BlockedConvLayout layout{(layouts & 1) != 0, (layouts & 2) != 0};
                if (layout.x_blocked && c.C % 16 != 0) continue;
                if (layout.y_blocked && c.M % 16 != 0) continue;
                std::vector<float> xin = x, zin = z;
                if (layout.x_blocked) to_blocked(pool, x.data(), c.N, c.C, HW, xin.data());
                if (layout.y_blocked) to_blocked(pool, z.data(), c.N, c.M, P, zin.data());
                std::vector<float> y(c.N * c.M * P, std::nanf("")), got(y.size());
                blocked_conv2d(pool, g, filters, layout, xin.data(), c.N, c.C, b.data(), e,
                               e->has_sum ? zin.data() : nullptr, y.data());
                if (layout.y_blocked) from_blocked(pool, y.data(), c.N, c.M, P, got.data());
                else got = y;
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::abs(want[i])))
                        << "C " << c.C << " M " << c.M << " width " << filters.panel_width() << " K " << c.K << " stride " << c.stride << " layout x "
                        << layout.x_blocked << " y " << layout.y_blocked << " at " << i;
                }
                // A blocked output may be written over its sum (Kernel::in_place_input): the same results.
                if (!layout.y_blocked || !e->has_sum) continue;
                std::vector<float> shared = zin;
                blocked_conv2d(pool, g, filters, layout, xin.data(), c.N, c.C, b.data(), e, shared.data(),
                               shared.data());
                from_blocked(pool, shared.data(), c.N, c.M, P, got.data());
                for (size_t i = 0; i < got.size(); ++i)
                    ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::abs(want[i]))) << "in place, C " << c.C << " at " << i;
            }
        }
    }
}

TEST(BlockedLayout, DepthwiseMatchesPlainDepthwiseConvolution) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the blocked layout needs AVX-512F (or TESSERA_CPU_MAX_ISA caps it)";
    ThreadPool pool(2);
    std::mt19937 rng(5);
    struct DwCase {
        int64_t N, C, H, W, K, stride, pad, dilation;
    };
    const DwCase cases[] = {
        {1, 32, 14, 14, 3, 1, 1, 1},   // interior runs of 8 and edges
        {2, 16, 15, 9, 3, 2, 1, 1},    // stride 2, odd sizes, two images
        {1, 48, 7, 7, 5, 1, 2, 1},     // 5x5, most positions at an edge
        {1, 16, 11, 20, 3, 1, 2, 2},   // dilated
        {1, 16, 4, 3, 3, 1, 0, 1},     // no padding, two output columns
        {1, 16, 2, 2, 3, 1, 1, 1},     // every window crosses the edge
        // 3x3, stride 1, padding 1 (the rows that load each input once for every tap): rows of one partial
        // run with both edges (7), a full run and one more (9), a single column (1)
        {1, 16, 7, 7, 3, 1, 1, 1},
        {2, 32, 5, 9, 3, 1, 1, 1},
        {1, 16, 3, 1, 3, 1, 1, 1},
        // ... at stride 2: runs of 6 and one more with the last column inside the image (14), two full runs and
        // two more (28); the odd width above reads one column past the image as zeros
        {1, 32, 14, 14, 3, 2, 1, 1},
        {1, 16, 28, 28, 3, 2, 1, 1},
        // 1x1: a per-channel scale and shift (a BatchNormalization rewritten as a convolution)
        {2, 32, 6, 7, 1, 1, 0, 1},
        {1, 16, 5, 6, 1, 1, 1, 1},  // ... padded: rows and columns of bias alone around it
    };
    for (const DwCase& c : cases) {
        const WindowGeometry g = window(c.H, c.W, c.K, c.stride, c.pad, c.pad, c.dilation);
        const int64_t OH = g.output[0], OW = g.output[1], P = OH * OW, HW = c.H * c.W, taps = c.K * c.K;
        const std::vector<float> x = random_floats(c.N * c.C * HW, rng);
        const std::vector<float> w = random_floats(c.C * taps, rng);
        const std::vector<float> b = random_floats(c.C, rng);
        const std::vector<float> z = random_floats(c.N * c.C * P, rng);
        const std::vector<float> packed = pack_blocked_depthwise(w.data(), c.C, taps);
        // The plain reference with the depthwise filters spread over a dense [C, C, K, K] (zero off the diagonal).
        std::vector<float> dense(c.C * c.C * taps, 0.0f);
        for (int64_t ch = 0; ch < c.C; ++ch)
            std::copy(w.begin() + ch * taps, w.begin() + (ch + 1) * taps, dense.begin() + (ch * c.C + ch) * taps);
        const Case as_dense{c.N, c.C, c.H, c.W, c.C, c.K, c.stride, c.pad, c.dilation};
        ConvEpilogue none, relu, clip, clip_sum, silu;
        relu.activation = ConvEpilogue::Activation::Relu;
        clip.activation = ConvEpilogue::Activation::Clip;
        clip.alpha = -0.25f;
        clip.beta = 0.5f;
        clip_sum = clip;
        clip_sum.has_sum = true;
        silu.activation = ConvEpilogue::Activation::Silu;
        for (const ConvEpilogue* e : {&none, &relu, &clip, &clip_sum, &silu}) {
            const std::vector<double> want = reference(as_dense, g, x, dense, b, e->has_sum ? &z : nullptr, *e);
            const std::vector<float> got =
                through_blocked(pool, x, z, c.N, c.C, HW, c.C, P, [&](const float* xb, const float* zb, float* y) {
                    blocked_depthwise2d(pool, g, packed.data(), c.N, c.C, xb, b.data(), e, e->has_sum ? zb : nullptr, y);
                });
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::abs(want[i])))
                    << "C " << c.C << " K " << c.K << " stride " << c.stride << " pad " << c.pad << " at " << i;
        }
    }
}

TEST(BlockedLayout, PoolsAndScaleShiftMatchPlainLoops) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the blocked layout needs AVX-512F (or TESSERA_CPU_MAX_ISA caps it)";
    ThreadPool pool(2);
    std::mt19937 rng(9);
    const int64_t N = 2, C = 32, H = 13, W = 11;
    const std::vector<float> x = random_floats(N * C * H * W, rng);
    std::vector<float> xb(x.size());
    to_blocked(pool, x.data(), N, C, H * W, xb.data());
    // SqueezeNet's 3x3 stride-2 windows whose last one passes the image (ceil_mode), and a padded dilated one.
    struct PoolCase {
        int64_t k, stride, pad_begin, pad_end, dilation;
    };
    for (const PoolCase& c : {PoolCase{3, 2, 0, 1, 1}, PoolCase{3, 1, 1, 1, 2}, PoolCase{2, 2, 0, 0, 1}}) {
        const WindowGeometry g = window(H, W, c.k, c.stride, c.pad_begin, c.pad_end, c.dilation);
        const int64_t OH = g.output[0], OW = g.output[1];
        std::vector<float> y(N * C * OH * OW, std::nanf("")), got(y.size());
        blocked_max_pool2d(pool, g, N, C, xb.data(), y.data());
        from_blocked(pool, y.data(), N, C, OH * OW, got.data());
        for (int64_t plane = 0; plane < N * C; ++plane)
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    float want = -INFINITY;
                    for (int64_t i = 0; i < c.k; ++i)
                        for (int64_t j = 0; j < c.k; ++j) {
                            const int64_t ih = oh * c.stride - c.pad_begin + i * c.dilation;
                            const int64_t iw = ow * c.stride - c.pad_begin + j * c.dilation;
                            if (ih >= 0 && ih < H && iw >= 0 && iw < W) want = std::max(want, x[(plane * H + ih) * W + iw]);
                        }
                    ASSERT_EQ(got[(plane * OH + oh) * OW + ow], want) << "k " << c.k << " at " << plane << ", " << oh << ", " << ow;
                }
    }
    {
        std::vector<float> a = random_floats(C, rng), b = random_floats(C, rng), y(x.size()), got(x.size());
        blocked_scale_shift(pool, N, C, H * W, xb.data(), a.data(), b.data(), y.data());
        from_blocked(pool, y.data(), N, C, H * W, got.data());
        for (int64_t plane = 0; plane < N * C; ++plane)
            for (int64_t p = 0; p < H * W; ++p) {
                const float want = x[plane * H * W + p] * a[plane % C] + b[plane % C];
                ASSERT_NEAR(got[plane * H * W + p], want, 1e-6f * (1.0f + std::abs(want)));
            }
    }
    for (const bool max : {false, true}) {
        std::vector<float> y(N * C, std::nanf(""));
        blocked_plane_reduce(pool, N, C, H * W, xb.data(), max, y.data());
        for (int64_t plane = 0; plane < N * C; ++plane) {
            double sum = 0;
            float largest = -INFINITY;
            for (int64_t p = 0; p < H * W; ++p) {
                sum += x[plane * H * W + p];
                largest = std::max(largest, x[plane * H * W + p]);
            }
            if (max) ASSERT_EQ(y[plane], largest);
            else ASSERT_NEAR(y[plane], sum / double(H * W), 1e-5);
        }
    }
}

TEST(BlockedLayout, WinogradMatchesPlainConvolution) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the blocked layout needs AVX-512F (or TESSERA_CPU_MAX_ISA caps it)";
    ThreadPool pool(2);
    std::mt19937 rng(13);
    const Case cases[] = {
        {1, 32, 20, 20, 64, 3, 1, 1, 1},  // even outputs, one 64-filter panel
        {2, 48, 9, 13, 80, 3, 1, 1, 1},   // odd outputs (the last tiles cut), 80 filters, two images
        {1, 16, 6, 30, 16, 3, 1, 0, 1},   // no padding, a 16-filter panel
        {1, 64, 27, 27, 128, 3, 1, 1, 1}, // SqueezeNet's 27x27 layers: several tile blocks
        // Filters outweighing the tiles' buffers (as on ResNet-50's 14x14 layers): every tile transformed first,
        // then each (point, panel) product over all of them.
        {1, 64, 8, 8, 64, 3, 1, 1, 1},   // 16 tiles in groups of 6, the last one partial
        {2, 48, 7, 9, 96, 3, 1, 1, 1},   // odd outputs, 32-filter panels, two images
    };
    for (const Case& c : cases) {
        const WindowGeometry g = window(c.H, c.W, c.K, c.stride, c.pad, c.pad, c.dilation);
        ASSERT_TRUE(blocked_winograd_applies(g, c.C, c.M));
        const int64_t P = g.output[0] * g.output[1], HW = c.H * c.W;
        const std::vector<float> x = random_floats(c.N * c.C * HW, rng);
        const std::vector<float> w = random_floats(c.M * c.C * 9, rng);
        const std::vector<float> b = random_floats(c.M, rng);
        const std::vector<float> z = random_floats(c.N * c.M * P, rng);
        const WinogradFilters filters(w.data(), c.M, c.C);
        for (const ConvEpilogue& epilogue : epilogue_kinds()) {
            const ConvEpilogue* e = &epilogue;
            const std::vector<double> want = reference(c, g, x, w, b, e->has_sum ? &z : nullptr, *e);
            const std::vector<float> got =
                through_blocked(pool, x, z, c.N, c.C, HW, c.M, P, [&](const float* xb, const float* zb, float* y) {
                    blocked_winograd_conv2d(pool, g, filters, c.N, xb, b.data(), e, e->has_sum ? zb : nullptr, y);
                });
            // Winograd rounds differently from the direct sum, by a few float ulps of the largest terms: the
            // tolerance of the NCHW Winograd cases in test_conv_ops.cc.
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::abs(want[i])))
                    << "C " << c.C << " M " << c.M << " " << c.H << "x" << c.W << " at " << i;
        }
    }
}

}  // namespace
// QuantizeLinear out of the blocked layout against the NCHW semantics computed lane by lane: y =
// saturate(round_half_even(x / scale) + zero).  The values include exact halves of the scale and their float
// neighbours (where a product by the reciprocal would round differently), NaN, infinities and values far out of
// range, beside random ones; the count covers whole 16-position blocks and a tail.
template <typename Out> void check_quantize_from_blocked(float scale, float zero, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t positions = 64 * 3 + 21, count = positions;
    std::vector<float> src(static_cast<size_t>(count * 16));
    std::uniform_real_distribution<float> wide(-300.0f, 300.0f);
    std::uniform_int_distribution<int> pick(0, 9), halves(-200, 200);
    for (float& v : src) {
        const float half = (static_cast<float>(halves(rng)) + 0.5f) * scale;
        switch (pick(rng)) {
            case 0: v = half; break;
            case 1: v = std::nextafter(half, 1e30f); break;
            case 2: v = std::nextafter(half, -1e30f); break;
            case 3: v = static_cast<float>(halves(rng)) * scale; break;
            default: v = wide(rng) * scale * 0.7f; break;
        }
    }
    src[5] = std::nanf("");
    src[17] = INFINITY;
    src[40] = -INFINITY;
    src[77] = 1e30f;
    src[78] = -1e30f;
    std::vector<Out> y(static_cast<size_t>(16 * positions));
    quantize_from_blocked(src.data(), count, scale, zero, positions, y.data());
    const double low = std::is_same_v<Out, uint8_t> ? 0 : -128, high = std::is_same_v<Out, uint8_t> ? 255 : 127;
    for (int64_t p = 0; p < count; ++p) {
        for (int64_t c = 0; c < 16; ++c) {
            const float x = src[p * 16 + c];
            const float quotient = x / scale;
            const double rounded = std::isnan(quotient) ? low : std::nearbyint(double(quotient)) + zero;
            const auto expected = static_cast<Out>(std::clamp(rounded, low, high));
            ASSERT_EQ(int(y[c * positions + p]), int(expected))
                << "x " << x << " scale " << scale << " zero " << zero << " position " << p << " channel " << c;
        }
    }
}

TEST(BlockedLayout, QuantizeMatchesPlainQuantization) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the blocked layout needs AVX-512F (or TESSERA_CPU_MAX_ISA caps it)";
    uint32_t seed = 50;
    for (float scale : {0.037f, 0.1f, 1.0f / 3.0f, 2.5f, 1e-3f}) {
        check_quantize_from_blocked<uint8_t>(scale, 128.0f, ++seed);
        check_quantize_from_blocked<uint8_t>(scale, 3.0f, ++seed);
        check_quantize_from_blocked<int8_t>(scale, -5.0f, ++seed);
        check_quantize_from_blocked<int8_t>(scale, 0.0f, ++seed);
    }
}

}  // namespace tessera::cpu
