// The 8-bit integer products (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv), DynamicQuantizeLinear and
// the int8_gemm utility against plain references: exact int64 sums for the integer results, and for the requantized
// ones the kernels' documented arithmetic (requantize.h: float multiplier, float product, round half to even,
// saturate) reproduced exactly, plus a dequantize-in-double reference they must match within one quantum.
// Shapes cover M, N, K of 1, odd, and not multiples of 4 / 16 / 32 / 64, so every int8_gemm path (AMX, VNNI tiles
// and their tails, the floating-point fallback) is exercised at each TESSERA_CPU_MAX_ISA level.
#include <algorithm>
#include <atomic>
#include <cfenv>

#include "kernels/quantization/requantize.h"
#include "op_test_reference.h"
#include "util/int8_gemm.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

const KernelRegistry& quant_registry() {
    return testing::registry_with<register_quantize_kernels, register_quantized_product_kernels,
                                  register_integer_conv_kernels, register_quantized_lookup_kernels,
                                  register_quantized_add_kernels>();
}

template <typename T> std::vector<T> random_bytes(int64_t count, uint32_t seed) {
    return random_values<T>(count, seed, std::is_signed_v<T> ? -128 : 0, std::is_signed_v<T> ? 127 : 255);
}

// Round half to even and saturate, in double (the ONNX requantization).
template <typename Out> int64_t saturate_round(double v) {
    const double r = std::nearbyint(v);
    return static_cast<int64_t>(std::clamp(r, double(std::numeric_limits<Out>::min()),
                                           double(std::numeric_limits<Out>::max())));
}

// The kernels' requantization of an exact int32 sum (see requantize_run): float(sum) * multiplier in float, then
// round half to even, add the zero point, saturate.
template <typename Out> int64_t kernel_requantize(int64_t sum, float multiplier, int64_t zero_point) {
    const float product = static_cast<float>(static_cast<int32_t>(sum)) * multiplier;
    return saturate_round<Out>(std::nearbyint(double(product)) + double(zero_point));
}

// ---- MatMulInteger / QLinearMatMul -----------------------------------------------------------------------------

struct MatMulCase {
    int64_t batch, M, K, N;
    bool batched_b;  // B [batch, K, N] instead of a shared [K, N]
};

const MatMulCase kMatMulCases[] = {{1, 1, 1, 1, false},   {1, 1, 7, 5, false},    {1, 3, 4, 17, false},
                                   {1, 5, 63, 33, false},  {1, 17, 130, 65, false}, {1, 64, 256, 64, false},
                                   {1, 33, 5, 100, false}, {1, 70, 515, 37, false}, {3, 7, 9, 11, false},
                                   {2, 6, 31, 45, true},   {1, 2, 3, 1, false}};

// sums[p, m, n] = sum_k (A - za[m]) * (B - zb[n]), exact.
template <typename TA, typename TB>
std::vector<int64_t> reference_integer_matmul(const MatMulCase& c, const std::vector<TA>& A, const std::vector<TB>& B,
                                              const std::vector<int64_t>& za, const std::vector<int64_t>& zb) {
    std::vector<int64_t> y(static_cast<size_t>(c.batch * c.M * c.N));
    for (int64_t p = 0; p < c.batch; ++p) {
        const int64_t b_off = c.batched_b ? p * c.K * c.N : 0;
        for (int64_t m = 0; m < c.M; ++m) {
            for (int64_t n = 0; n < c.N; ++n) {
                int64_t sum = 0;
                for (int64_t k = 0; k < c.K; ++k) {
                    sum += (int64_t(A[(p * c.M + m) * c.K + k]) - za[za.size() == 1 ? 0 : m]) *
                           (int64_t(B[b_off + k * c.N + n]) - zb[zb.size() == 1 ? 0 : n]);
                }
                y[(p * c.M + m) * c.N + n] = sum;
            }
        }
    }
    return y;
}

Shape a_shape_of(const MatMulCase& c) { return c.batch == 1 ? Shape{c.M, c.K} : Shape{c.batch, c.M, c.K}; }
Shape b_shape_of(const MatMulCase& c) { return c.batched_b ? Shape{c.batch, c.K, c.N} : Shape{c.K, c.N}; }

// zero_mode: 0 none, 1 scalars, 2 per-row A and per-column B.
template <typename TA, typename TB> void check_matmul_integer(const MatMulCase& c, int zero_mode, bool constant_b,
                                                               uint32_t seed) {
    const auto A = random_bytes<TA>(c.batch * c.M * c.K, seed);
    const auto B = random_bytes<TB>(shape_size(b_shape_of(c)), seed + 1);
    const auto za = random_bytes<TA>(zero_mode == 2 ? c.M : 1, seed + 2);
    const auto zb = random_bytes<TB>(zero_mode == 2 ? c.N : 1, seed + 3);
    NodeBuilder node("MatMulInteger", 10);
    node.input(element_type_of<TA>());
    const ValueHandle b_value = tensor<TB>(b_shape_of(c), B);
    if (constant_b) node.constant_input(b_value);
    else node.input(element_type_of<TB>());
    std::vector<ValueHandle> inputs{tensor<TA>(a_shape_of(c), A), constant_b ? nullptr : b_value};
    if (zero_mode != 0) {
        node.input(element_type_of<TA>()).input(element_type_of<TB>());
        inputs.push_back(zero_mode == 2 ? tensor<TA>({c.M}, za) : testing::scalar<TA>(za[0]));
        inputs.push_back(zero_mode == 2 ? tensor<TB>({c.N}, zb) : testing::scalar<TB>(zb[0]));
    }
    node.output(TESS_ELEMENT_INT32);
    const auto out = run_node(quant_registry(), node, inputs);
    const std::vector<int64_t> no_zero{0};
    const auto expected = reference_integer_matmul(c, A, B, zero_mode ? std::vector<int64_t>(za.begin(), za.end()) : no_zero,
                                                   zero_mode ? std::vector<int64_t>(zb.begin(), zb.end()) : no_zero);
    const auto got = values_of<int32_t>(*out[0]);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(int64_t(got[i]), expected[i]) << "MatMulInteger batch=" << c.batch << " M=" << c.M << " K=" << c.K
                                                << " N=" << c.N << " zero_mode=" << zero_mode << " element " << i;
    }
}

TEST(QuantizedOps, MatMulIntegerExact) {
    uint32_t seed = 100;
    for (const MatMulCase& c : kMatMulCases) {
        for (int zero_mode = 0; zero_mode < 3; ++zero_mode) {
            const bool constant_b = (seed & 1) != 0;
            check_matmul_integer<uint8_t, int8_t>(c, zero_mode, constant_b, seed += 7);
            check_matmul_integer<uint8_t, uint8_t>(c, zero_mode, !constant_b, seed += 7);
            check_matmul_integer<int8_t, int8_t>(c, zero_mode, constant_b, seed += 7);
            check_matmul_integer<int8_t, uint8_t>(c, zero_mode, !constant_b, seed += 7);
        }
    }
}

// per_channel: a_scale per row of A and b_scale / b_zero_point per column of B.
template <typename TA, typename TB, typename TY> void check_qlinear_matmul(const MatMulCase& c, bool per_channel,
                                                                           uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> scale_dist(0.002f, 0.05f);
    const auto A = random_bytes<TA>(c.batch * c.M * c.K, seed + 1);
    const auto B = random_bytes<TB>(shape_size(b_shape_of(c)), seed + 2);
    const int64_t a_params = per_channel ? c.M : 1, b_params = per_channel ? c.N : 1;
    const auto za = random_bytes<TA>(a_params, seed + 3);
    const auto zb = random_bytes<TB>(b_params, seed + 4);
    std::vector<float> as(a_params), bs(b_params);
    for (float& s : as) s = scale_dist(rng);
    for (float& s : bs) s = scale_dist(rng);
    // y_scale so that outputs spread over the 8-bit range (the sums' spread is about 1e4 * sqrt(K)), some
    // saturating.
    const float ys = as[0] * bs[0] * std::sqrt(float(c.K)) * std::uniform_real_distribution<float>(60, 400)(rng);
    const TY zy = random_bytes<TY>(1, seed + 5)[0];

    NodeBuilder node("QLinearMatMul", 21);
    const int32_t ta = element_type_of<TA>(), tb = element_type_of<TB>();
    node.input(ta).input(TESS_ELEMENT_FLOAT32).input(ta).input(tb).input(TESS_ELEMENT_FLOAT32).input(tb);
    node.input(TESS_ELEMENT_FLOAT32).input(element_type_of<TY>()).output(element_type_of<TY>());
    auto vec_or_scalar = [](auto v, int64_t n) {
        using T = typename decltype(v)::value_type;
        return n == 1 ? testing::scalar<T>(v[0]) : tensor<T>({n}, v);
    };
    const auto out = run_node(quant_registry(), node,
                              {tensor<TA>(a_shape_of(c), A), vec_or_scalar(as, a_params), vec_or_scalar(za, a_params),
                               tensor<TB>(b_shape_of(c), B), vec_or_scalar(bs, b_params), vec_or_scalar(zb, b_params),
                               testing::scalar<float>(ys), testing::scalar<TY>(zy)});
    const auto sums = reference_integer_matmul(c, A, B, std::vector<int64_t>(za.begin(), za.end()),
                                               std::vector<int64_t>(zb.begin(), zb.end()));
    const auto got = values_of<TY>(*out[0]);
    ASSERT_EQ(got.size(), sums.size());
    for (size_t i = 0; i < got.size(); ++i) {
        const int64_t m = int64_t(i) / c.N % c.M, n = int64_t(i) % c.N;
        const float a_s = as[per_channel ? m : 0], b_s = bs[per_channel ? n : 0];
        // The kernel's arithmetic: multiplier (a_scale * b_scale) / y_scale in float.
        const float multiplier = (a_s * b_s) / ys;
        const int64_t exact = kernel_requantize<TY>(sums[i], multiplier, zy);
        // The plain definition: dequantize, multiply in double, requantize.
        const int64_t plain = saturate_round<TY>(double(sums[i]) * a_s * b_s / ys + zy);
        const std::string where = "QLinearMatMul M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                                  " N=" + std::to_string(c.N) + " element " + std::to_string(i);
        ASSERT_EQ(int64_t(got[i]), exact) << where;
        ASSERT_LE(std::abs(int64_t(got[i]) - plain), 1) << where;
    }
}

TEST(QuantizedOps, QLinearMatMulMatchesRequantizedReference) {
    uint32_t seed = 500;
    for (const MatMulCase& c : kMatMulCases) {
        for (bool per_channel : {false, true}) {
            check_qlinear_matmul<uint8_t, int8_t, uint8_t>(c, per_channel, seed += 11);
            check_qlinear_matmul<uint8_t, uint8_t, uint8_t>(c, per_channel, seed += 11);
            check_qlinear_matmul<int8_t, int8_t, int8_t>(c, per_channel, seed += 11);
            check_qlinear_matmul<uint8_t, int8_t, int8_t>(c, per_channel, seed += 11);
        }
    }
}

// ---- ConvInteger / QLinearConv ---------------------------------------------------------------------------------

const std::vector<ConvCase>& integer_conv_cases() {
    static const std::vector<ConvCase> cases{
        {.x = {1, 3, 7, 7}, .out_channels = 5, .kernel = {3, 3}, .pads = {1, 1, 1, 1}},
        {.x = {2, 3, 9, 11}, .out_channels = 4, .kernel = {3, 3}, .strides = {2, 2}, .pads = {1, 0, 2, 1}},
        {.x = {1, 4, 10, 9}, .out_channels = 6, .kernel = {3, 2}, .group = 2, .strides = {1, 2}, .dilations = {2, 1},
         .pads = {2, 0, 1, 3}},
        {.x = {2, 6, 8, 7}, .out_channels = 6, .kernel = {3, 3}, .group = 6, .pads = {1, 1, 1, 1}},  // depthwise
        {.x = {1, 5, 9, 8}, .out_channels = 5, .kernel = {5, 3}, .group = 5, .strides = {2, 3}, .dilations = {1, 2},
         .pads = {2, 1, 0, 2}},  // depthwise, strided and dilated
        {.x = {1, 4, 6, 6}, .out_channels = 8, .kernel = {3, 3}, .group = 4, .pads = {1, 1, 1, 1}},  // multiplier 2
        {.x = {1, 17, 5, 7}, .out_channels = 33, .kernel = {1, 1}},                                 // pointwise
        {.x = {1, 3, 6, 6}, .out_channels = 4, .kernel = {1, 1}, .strides = {2, 2}},                // strided 1x1
        {.x = {1, 2, 9, 10}, .out_channels = 3, .kernel = {3, 3}, .strides = {2, 2}, .auto_pad = "SAME_UPPER"},
        {.x = {1, 1, 1, 1}, .out_channels = 1, .kernel = {1, 1}},
        {.x = {2, 3, 13}, .out_channels = 7, .kernel = {4}, .strides = {2}, .pads = {1, 2}},  // 1-D
        {.x = {1, 2, 4, 5, 3}, .out_channels = 3, .kernel = {2, 3, 2}, .pads = {0, 1, 1, 1, 0, 0}},  // 3-D
        {.x = {1, 19, 12, 12}, .out_channels = 70, .kernel = {3, 3}, .pads = {1, 1, 1, 1}},  // depth 171, M 70
        {.x = {2, 40, 9, 10}, .out_channels = 67, .kernel = {1, 1}},  // 3 row blocks, a partial panel, 2 images
        {.x = {1, 70, 6, 6}, .out_channels = 40, .kernel = {3, 3}, .group = 2, .pads = {1, 1, 1, 1}},  // groups of 20
        {.x = {1, 2, 20, 19}, .out_channels = 2, .kernel = {17, 16}, .group = 2, .pads = {2, 1, 0, 3}},  // 272 taps
        {.x = {2, 16, 13, 11}, .out_channels = 16, .kernel = {3, 3}, .group = 16, .strides = {2, 2},
         .pads = {1, 1, 1, 1}},  // depthwise, stride 2
        {.x = {2, 8, 6, 6}, .out_channels = 12, .kernel = {3, 3}, .group = 2, .pads = {1, 1, 1, 1}},  // groups, 2 images
    };
    return cases;
}

// Exact sums of the convolution of (x - x_zero) with (w - w_zero[m]), laid out as Y.
template <typename TX, typename TW>
std::vector<int64_t> reference_integer_conv(const ConvCase& c, const RefGeometry& g, const std::vector<TX>& x,
                                            int64_t x_zero, const std::vector<TW>& w,
                                            const std::vector<int64_t>& w_zero) {
    std::vector<double> xs(x.size()), ws(w.size());
    for (size_t i = 0; i < x.size(); ++i) xs[i] = double(x[i]) - double(x_zero);
    const size_t per_filter = w.size() / size_t(c.out_channels);
    for (size_t i = 0; i < w.size(); ++i) ws[i] = double(w[i]) - double(w_zero[w_zero.size() == 1 ? 0 : i / per_filter]);
    // Integers far below 2^53: the double sums are exact.
    const auto sums = reference_conv(c, g, xs, ws, {});
    return {sums.begin(), sums.end()};
}

void add_window_attributes(NodeBuilder& node, const ConvCase& c) {
    node.attr_int("group", c.group).attr_ints("kernel_shape", c.kernel);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);
}

// constant_w: the filters are an initializer, which the kernel packs when it is created.
template <typename TX, typename TW>
void check_conv_integer(const ConvCase& c, bool per_channel, bool constant_w, uint32_t seed) {
    const int64_t M = c.out_channels;
    const Shape w_shape = concat({M, c.x[1] / c.group}, c.kernel);
    const auto x = random_bytes<TX>(shape_size(c.x), seed);
    const auto w = random_bytes<TW>(shape_size(w_shape), seed + 1);
    const TX zx = random_bytes<TX>(1, seed + 2)[0];
    const auto zw = random_bytes<TW>(per_channel ? M : 1, seed + 3);
    NodeBuilder node("ConvInteger", 10);
    const ValueHandle w_value = tensor<TW>(w_shape, w);
    node.input(element_type_of<TX>());
    if (constant_w) node.constant_input(w_value);
    else node.input(element_type_of<TW>());
    node.input(element_type_of<TX>()).input(element_type_of<TW>()).output(TESS_ELEMENT_INT32);
    add_window_attributes(node, c);
    const auto out = run_node(quant_registry(), node,
                              {tensor<TX>(c.x, x), constant_w ? nullptr : w_value, testing::scalar<TX>(zx),
                               per_channel ? tensor<TW>({M}, zw) : testing::scalar<TW>(zw[0])});
    const RefGeometry g = conv_geometry(c);
    ASSERT_EQ(dims_of(out[0]), concat({c.x[0], M}, g.out));
    const auto expected = reference_integer_conv(c, g, x, zx, w, std::vector<int64_t>(zw.begin(), zw.end()));
    const auto got = values_of<int32_t>(*out[0]);
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(int64_t(got[i]), expected[i]) << "ConvInteger x=" << shape_string(c.x) << " M=" << M
                                                << " group=" << c.group << " element " << i;
    }
}

TEST(QuantizedOps, ConvIntegerExact) {
    uint32_t seed = 900;
    for (const ConvCase& c : integer_conv_cases()) {
        check_conv_integer<uint8_t, uint8_t>(c, false, false, seed += 5);
        check_conv_integer<uint8_t, int8_t>(c, true, true, seed += 5);
        check_conv_integer<int8_t, int8_t>(c, true, false, seed += 5);
        check_conv_integer<int8_t, uint8_t>(c, false, true, seed += 5);
    }
}

// The fused ConvIntegerToFloat (ConvInteger -> Cast -> Mul -> [BatchNormalization] -> [Clip]) against the chain's
// arithmetic on the exact sums: y = clamp((float(sum) * (x_scale * w_scale)) * a[m] + b[m]), a multiply then an
// add, clamped as Clip clamps.
template <typename TX, typename TW>
void check_conv_integer_to_float(const ConvCase& c, bool per_channel_zero, bool affine, bool clip, uint32_t seed) {
    const int64_t M = c.out_channels;
    const Shape w_shape = concat({M, c.x[1] / c.group}, c.kernel);
    const auto x = random_bytes<TX>(shape_size(c.x), seed);
    const auto w = random_bytes<TW>(shape_size(w_shape), seed + 1);
    const TX zx = random_bytes<TX>(1, seed + 2)[0];
    const auto zw = random_bytes<TW>(per_channel_zero ? M : 1, seed + 3);
    const float x_scale = 0.0371f, w_scale = 0.0123f;
    const auto a = random_values<float>(M, seed + 4, -2.0f, 2.0f), b = random_values<float>(M, seed + 5, -3.0f, 3.0f);
    NodeBuilder node("ConvIntegerToFloat", 1, TESS_FUSED_OPS_DOMAIN);
    node.input(element_type_of<TX>()).constant_input(tensor<TW>(w_shape, w));
    node.input(element_type_of<TX>()).constant_input(per_channel_zero ? tensor<TW>({M}, zw) : testing::scalar<TW>(zw[0]));
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32);
    if (affine) node.constant_input(tensor<float>({M}, a)).constant_input(tensor<float>({M}, b));
    node.output(TESS_ELEMENT_FLOAT32);
    add_window_attributes(node, c);
    if (clip) node.attr_string("activation", "Clip").attr_floats("activation_params", {-1.5f, 2.5f});
    std::vector<ValueHandle> inputs{tensor<TX>(c.x, x), nullptr, testing::scalar<TX>(zx), nullptr,
                                    testing::scalar<float>(x_scale), testing::scalar<float>(w_scale)};
    if (affine) inputs.insert(inputs.end(), {nullptr, nullptr});
    const auto out = run_node(quant_registry(), node, inputs);
    const RefGeometry g = conv_geometry(c);
    ASSERT_EQ(dims_of(out[0]), concat({c.x[0], M}, g.out));
    const auto sums = reference_integer_conv(c, g, x, zx, w, std::vector<int64_t>(zw.begin(), zw.end()));
    const auto got = values_of<float>(*out[0]);
    const int64_t positions = shape_size(g.out);
    const float scale = x_scale * w_scale;
    for (size_t i = 0; i < got.size(); ++i) {
        const int64_t m = int64_t(i) / positions % M;
        volatile float v = static_cast<float>(static_cast<int32_t>(sums[i])) * scale;  // volatile: no FMA
        if (affine) {
            volatile float product = v * a[m];
            v = product + b[m];
        }
        float expected = v;
        if (clip) expected = std::min(std::max(expected, -1.5f), 2.5f);
        ASSERT_EQ(got[i], expected) << "ConvIntegerToFloat x=" << shape_string(c.x) << " M=" << M << " group="
                                    << c.group << " element " << i;
    }
}

TEST(QuantizedOps, ConvIntegerToFloatMatchesTheChain) {
    uint32_t seed = 2300;
    for (const ConvCase& c : integer_conv_cases()) {
        check_conv_integer_to_float<uint8_t, int8_t>(c, false, true, true, seed += 7);
        check_conv_integer_to_float<uint8_t, uint8_t>(c, true, false, false, seed += 7);
        check_conv_integer_to_float<uint8_t, int8_t>(c, false, true, false, seed += 7);
        check_conv_integer_to_float<int8_t, int8_t>(c, true, false, true, seed += 7);
    }
}

// With tables (TT: the table's type), the fused-domain QLinearConv the optimizer makes of a QLinearConv and the
// QuantizedLookup after it: every requantized byte then maps through table[m] (per_channel_table) or table[0].
template <typename TX, typename TW, typename TT = TX>
void check_qlinear_conv(const ConvCase& c, bool per_channel, bool bias, bool constant_w, uint32_t seed,
                        bool with_table = false, bool per_channel_table = false) {
    const int64_t M = c.out_channels;
    const Shape w_shape = concat({M, c.x[1] / c.group}, c.kernel);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> scale_dist(0.002f, 0.05f);
    const auto x = random_bytes<TX>(shape_size(c.x), seed + 1);
    const auto w = random_bytes<TW>(shape_size(w_shape), seed + 2);
    const TX zx = random_bytes<TX>(1, seed + 3)[0];
    const auto zw = random_bytes<TW>(per_channel ? M : 1, seed + 4);
    const TX zy = random_bytes<TX>(1, seed + 5)[0];  // y has x's type
    const float xs = scale_dist(rng);
    std::vector<float> ws(per_channel ? M : 1);
    for (float& s : ws) s = scale_dist(rng);
    const double depth = double(shape_size(w_shape) / M);
    const float ys = xs * ws[0] * float(std::sqrt(depth)) * std::uniform_real_distribution<float>(60, 400)(rng);
    const auto b = random_values<int32_t>(M, seed + 6, -20000, 20000);

    const int64_t table_rows = per_channel_table ? M : 1;
    const auto table = random_bytes<TT>(table_rows * 256, seed + 7);
    NodeBuilder node("QLinearConv", with_table ? 1 : 10, with_table ? TESS_FUSED_OPS_DOMAIN : "");
    const int32_t tx = element_type_of<TX>(), tw = element_type_of<TW>();
    const ValueHandle w_value = tensor<TW>(w_shape, w);
    node.input(tx).input(TESS_ELEMENT_FLOAT32).input(tx);
    if (constant_w) node.constant_input(w_value);
    else node.input(tw);
    node.input(TESS_ELEMENT_FLOAT32).input(tw).input(TESS_ELEMENT_FLOAT32).input(tx);
    if (bias) node.input(TESS_ELEMENT_INT32);
    else if (with_table) node.omitted_input();
    if (with_table) node.constant_input(tensor<TT>({table_rows, 256}, table));
    node.output(with_table ? element_type_of<TT>() : tx);
    add_window_attributes(node, c);
    std::vector<ValueHandle> inputs{tensor<TX>(c.x, x),
                                    testing::scalar<float>(xs),
                                    testing::scalar<TX>(zx),
                                    constant_w ? nullptr : w_value,
                                    per_channel ? tensor<float>({M}, ws) : testing::scalar<float>(ws[0]),
                                    per_channel ? tensor<TW>({M}, zw) : testing::scalar<TW>(zw[0]),
                                    testing::scalar<float>(ys),
                                    testing::scalar<TX>(zy)};
    if (bias) inputs.push_back(tensor<int32_t>({M}, b));
    else if (with_table) inputs.push_back(nullptr);
    if (with_table) inputs.push_back(nullptr);
    const auto out = run_node(quant_registry(), node, inputs);
    const RefGeometry g = conv_geometry(c);
    ASSERT_EQ(dims_of(out[0]), concat({c.x[0], M}, g.out));
    const auto sums = reference_integer_conv(c, g, x, zx, w, std::vector<int64_t>(zw.begin(), zw.end()));
    if (with_table) {
        const auto got = values_of<TT>(*out[0]);
        const int64_t positions = shape_size(g.out);
        for (size_t i = 0; i < got.size(); ++i) {
            const int64_t m = int64_t(i) / positions % M;
            const int64_t sum = sums[i] + (bias ? b[m] : 0);
            const auto byte = static_cast<uint8_t>(static_cast<TX>(kernel_requantize<TX>(sum, (xs * ws[per_channel ? m : 0]) / ys, zy)));
            ASSERT_EQ(got[i], table[(per_channel_table ? m : 0) * 256 + byte])
                << "QLinearConv + table x=" << shape_string(c.x) << " M=" << M << " group=" << c.group << " element " << i;
        }
        return;
    }
    const auto got = values_of<TX>(*out[0]);
    const int64_t positions = shape_size(g.out);
    for (size_t i = 0; i < got.size(); ++i) {
        const int64_t m = int64_t(i) / positions % M;
        const int64_t sum = sums[i] + (bias ? b[m] : 0);
        const float w_s = ws[per_channel ? m : 0];
        const int64_t exact = kernel_requantize<TX>(sum, (xs * w_s) / ys, zy);
        const int64_t plain = saturate_round<TX>(double(sum) * xs * w_s / ys + zy);
        const std::string where = "QLinearConv x=" + shape_string(c.x) + " M=" + std::to_string(M) +
                                  " group=" + std::to_string(c.group) + " element " + std::to_string(i);
        ASSERT_EQ(int64_t(got[i]), exact) << where;
        ASSERT_LE(std::abs(int64_t(got[i]) - plain), 1) << where;
    }
}

TEST(QuantizedOps, QLinearConvMatchesRequantizedReference) {
    uint32_t seed = 1300;
    for (const ConvCase& c : integer_conv_cases()) {
        check_qlinear_conv<uint8_t, int8_t>(c, false, true, false, seed += 7);
        check_qlinear_conv<uint8_t, int8_t>(c, true, true, true, seed += 7);
        check_qlinear_conv<uint8_t, uint8_t>(c, true, false, true, seed += 7);
        check_qlinear_conv<int8_t, int8_t>(c, true, true, false, seed += 7);
        check_qlinear_conv<int8_t, int8_t>(c, false, false, true, seed += 7);
    }
}

TEST(QuantizedOps, QLinearConvWithLookupTableMatchesReference) {
    uint32_t seed = 1500;
    for (const ConvCase& c : integer_conv_cases()) {
        check_qlinear_conv<uint8_t, int8_t, uint8_t>(c, true, true, true, seed += 7, true, true);
        check_qlinear_conv<int8_t, int8_t, int8_t>(c, false, false, true, seed += 7, true, true);
        check_qlinear_conv<int8_t, int8_t, uint8_t>(c, true, true, false, seed += 7, true, false);
        check_qlinear_conv<uint8_t, uint8_t, int8_t>(c, false, true, true, seed += 7, true, false);
    }
}

// ---- QuantizedLookup (ai.tessera) ------------------------------------------------------------------------------

// y[n, c, ...] = table[c or 0][x's byte], against a plain loop, on the byte-permute path where the CPU has it (and
// the plain one under the lower ISA levels).
template <typename TX, typename TY> void check_lookup(const Shape& x_shape, bool shared_table, uint32_t seed) {
    const int64_t channels = x_shape[1], rows = shared_table ? 1 : channels;
    const auto x = random_bytes<TX>(shape_size(x_shape), seed);
    const auto table = random_bytes<TY>(rows * 256, seed + 1);
    NodeBuilder node("QuantizedLookup", 1, TESS_FUSED_OPS_DOMAIN);
    node.input(element_type_of<TX>()).constant_input(tensor<TY>({rows, 256}, table)).output(element_type_of<TY>());
    const auto out = run_node(quant_registry(), node, {tensor<TX>(x_shape, x), nullptr});
    ASSERT_EQ(dims_of(out[0]), x_shape);
    const auto got = values_of<TY>(*out[0]);
    const int64_t plane = shape_size(x_shape) / (x_shape[0] * channels);
    for (size_t i = 0; i < got.size(); ++i) {
        const int64_t row = shared_table ? 0 : int64_t(i) / plane % channels;
        const auto byte = static_cast<uint8_t>(x[i]);
        ASSERT_EQ(got[i], table[row * 256 + byte]) << "x=" << shape_string(x_shape) << " element " << i;
    }
}

TEST(QuantizedOps, LookupMatchesPlainTable) {
    uint32_t seed = 1700;
    for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{1, 4, 130}, Shape{3, 70}, Shape{1, 2, 64, 64}}) {
        check_lookup<uint8_t, uint8_t>(shape, false, seed += 3);
        check_lookup<int8_t, int8_t>(shape, false, seed += 3);
        check_lookup<uint8_t, int8_t>(shape, true, seed += 3);
        check_lookup<int8_t, uint8_t>(shape, true, seed += 3);
    }
}

// The fused-domain QuantizeLinear the optimizer makes of a per-tensor 8-bit QuantizeLinear and the QuantizedLookup
// after it: y = table[c or 0][saturate(round(x / scale) + zero_point)].
template <typename TQ, typename TT> void check_quantize_with_table(const Shape& shape, bool per_channel_table,
                                                                   uint32_t seed) {
    const int64_t channels = shape[1], rows = per_channel_table ? channels : 1;
    const auto x = random_values<float>(shape_size(shape), seed, -8.0f, 8.0f);
    const auto table = random_bytes<TT>(rows * 256, seed + 1);
    const float scale = 0.037f;
    const TQ zero = std::is_signed_v<TQ> ? TQ(-5) : TQ(131);
    NodeBuilder node("QuantizeLinear", 1, TESS_FUSED_OPS_DOMAIN);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).input(element_type_of<TQ>());
    node.constant_input(tensor<TT>({rows, 256}, table)).output(element_type_of<TT>());
    const auto out = run_node(quant_registry(), node,
                              {tensor<float>(shape, x), testing::scalar<float>(scale), testing::scalar<TQ>(zero), nullptr});
    ASSERT_EQ(dims_of(out[0]), shape);
    const auto got = values_of<TT>(*out[0]);
    const int64_t plane = shape_size(shape) / (shape[0] * channels);
    for (size_t i = 0; i < got.size(); ++i) {
        const auto q = static_cast<TQ>(saturate_round<TQ>(std::nearbyint(double(x[i] / scale)) + double(zero)));
        const int64_t row = per_channel_table ? int64_t(i) / plane % channels : 0;
        ASSERT_EQ(got[i], table[row * 256 + static_cast<uint8_t>(q)]) << shape_string(shape) << " element " << i;
    }
}

TEST(QuantizedOps, QuantizeLinearWithLookupTableMatchesReference) {
    uint32_t seed = 1900;
    for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{1, 16, 9, 9}, Shape{3, 70}}) {
        check_quantize_with_table<uint8_t, uint8_t>(shape, true, seed += 3);
        check_quantize_with_table<int8_t, int8_t>(shape, true, seed += 3);
        check_quantize_with_table<int8_t, uint8_t>(shape, false, seed += 3);
    }
}

// The fused-domain QuantizedAdd (DQ(a) + DQ(b) -> Q) against the three nodes' arithmetic lane by lane: the
// differences exact, two products, their sum, the quotient, round half to even, saturate.
template <typename TA, typename TB, typename TY>
void check_quantized_add(const Shape& shape, uint32_t seed, bool relu = false) {
    const auto a = random_bytes<TA>(shape_size(shape), seed);
    const auto b = random_bytes<TB>(shape_size(shape), seed + 1);
    const float sa = 0.021f, sb = 0.037f, sy = 0.043f;
    const TA za = std::is_signed_v<TA> ? TA(-3) : TA(121);
    const TB zb = std::is_signed_v<TB> ? TB(5) : TB(130);
    const TY zy = std::is_signed_v<TY> ? TY(-1) : TY(127);
    NodeBuilder node("QuantizedAdd", 1, TESS_FUSED_OPS_DOMAIN);
    node.input(element_type_of<TA>()).input(TESS_ELEMENT_FLOAT32).input(element_type_of<TA>());
    node.input(element_type_of<TB>()).input(TESS_ELEMENT_FLOAT32).input(element_type_of<TB>());
    node.input(TESS_ELEMENT_FLOAT32).input(element_type_of<TY>()).output(element_type_of<TY>());
    if (relu) node.attr_string("activation", "Relu");
    const auto out = run_node(quant_registry(), node,
                              {tensor<TA>(shape, a), testing::scalar<float>(sa), testing::scalar<TA>(za),
                               tensor<TB>(shape, b), testing::scalar<float>(sb), testing::scalar<TB>(zb),
                               testing::scalar<float>(sy), testing::scalar<TY>(zy)});
    ASSERT_EQ(dims_of(out[0]), shape);
    const auto got = values_of<TY>(*out[0]);
    for (size_t i = 0; i < got.size(); ++i) {
        volatile float va = (static_cast<float>(a[i]) - static_cast<float>(za)) * sa;
        volatile float vb = (static_cast<float>(b[i]) - static_cast<float>(zb)) * sb;
        volatile float sum = va + vb;
        if (relu && sum < 0.0f) sum = 0.0f;  // the Relu kernel's x < 0 ? 0 : x
        const float quotient = sum / sy;
        const int64_t expected = saturate_round<TY>(std::nearbyint(double(quotient)) + double(zy));
        ASSERT_EQ(int64_t(got[i]), expected) << shape_string(shape) << " element " << i;
    }
}

TEST(QuantizedOps, QuantizedAddMatchesDequantizeAddQuantize) {
    uint32_t seed = 2600;
    for (const Shape& shape : {Shape{1, 24, 56, 56}, Shape{2, 3, 5, 7}, Shape{17}}) {
        check_quantized_add<uint8_t, uint8_t, uint8_t>(shape, seed += 3);
        check_quantized_add<int8_t, int8_t, int8_t>(shape, seed += 3);
        check_quantized_add<int8_t, uint8_t, uint8_t>(shape, seed += 3);
        check_quantized_add<uint8_t, int8_t, int8_t>(shape, seed += 3);
        check_quantized_add<uint8_t, uint8_t, uint8_t>(shape, seed += 3, true);
        check_quantized_add<int8_t, int8_t, int8_t>(shape, seed += 3, true);
    }
}

// ---- DynamicQuantizeLinear ---------------------------------------------------------------------------------------

// The ONNX definition, in float as the spec's reference computes it: the range widened to include 0,
// scale = (max - min) / 255, zero_point = saturate(round(-min / scale)), y = saturate(round(x / scale) + zero_point).
void check_dynamic_quantize(const Shape& shape, const std::vector<float>& x) {
    NodeBuilder node("DynamicQuantizeLinear", 11);
    node.input(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_UINT8).output(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_UINT8);
    const auto out = run_node(quant_registry(), node, {tensor<float>(shape, x)});
    float lo = 0.0f, hi = 0.0f;
    for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;  // a zero range: the kernel's documented 1/255
    const float zero = std::nearbyint(std::clamp(-lo / scale, 0.0f, 255.0f));
    ASSERT_EQ(values_of<float>(*out[1])[0], scale) << shape_string(shape);
    ASSERT_EQ(int(values_of<uint8_t>(*out[2])[0]), int(zero)) << shape_string(shape);
    const auto y = values_of<uint8_t>(*out[0]);
    ASSERT_EQ(dims_of(out[0]), shape);
    for (size_t i = 0; i < x.size(); ++i) {
        const float q = std::nearbyint(x[i] / scale) + zero;
        ASSERT_EQ(int(y[i]), int(std::clamp(q, 0.0f, 255.0f))) << shape_string(shape) << " element " << i;
    }
}

TEST(QuantizedOps, DynamicQuantizeLinearExact) {
    ASSERT_EQ(std::fegetround(), FE_TONEAREST);
    const Shape shapes[] = {{1}, {7}, {3, 17}, {2, 5, 33}, {20001}, {4, 9000}};
    uint32_t seed = 40;
    for (const Shape& s : shapes) {
        const int64_t n = shape_size(s);
        check_dynamic_quantize(s, random_values<float>(n, ++seed, -3.0, 5.0));
        check_dynamic_quantize(s, random_values<float>(n, ++seed, 0.5, 2.0));      // positive: min widened to 0
        check_dynamic_quantize(s, random_values<float>(n, ++seed, -7.0, -0.25));   // negative: max widened to 0
        check_dynamic_quantize(s, std::vector<float>(size_t(n), 0.0f));            // zero range
    }
    // Values on exact half quanta: x = (k + 0.5) * scale for a range that makes scale exactly 1.
    std::vector<float> halves{0.0f, 255.0f, 0.5f, 1.5f, 2.5f, 100.5f, 253.5f};
    check_dynamic_quantize({int64_t(halves.size())}, halves);
}

// float_rows gathers the range of what it writes as DynamicQuantizeLinear finds it (from 0), and says when a NaN
// was written (the caller then takes the node's own pass); rows of every length, for the vector tails.
TEST(QuantizedOps, FloatRowsGatherTheRangeOfTheirOutput) {
    for (int64_t n : {int64_t(1), int64_t(15), int64_t(16), int64_t(37)}) {
        for (bool with_nan : {false, true}) {
            const int64_t rows = 3;
            auto sums = random_values<int32_t>(rows * n, 4000 + uint32_t(n), -1000, 1000);
            const std::vector<float> a{0.5f, -2.0f, 1.25f}, b{0.1f, 3.0f, -7.5f};
            quant::FloatRange range;
            quant::FloatEpilogue e;
            e.scale = 0.013f;
            e.channel_scale = a.data();
            e.channel_shift = b.data();
            e.range = &range;
            std::vector<float> y(size_t(rows * n));
            if (with_nan) {  // every value NaN
                e.channel_scale = e.channel_shift = nullptr;
                e.scale = std::nanf("");
            }
            quant::float_rows(sums.data(), n, rows, n, 0, e, y.data(), n);
            float lo = 0.0f, hi = 0.0f;
            for (float v : y) lo = std::min(lo, v), hi = std::max(hi, v);
            EXPECT_EQ(range.unordered.load(), with_nan) << "n=" << n;
            if (with_nan) continue;
            EXPECT_EQ(range.low.load(), lo) << "n=" << n;
            EXPECT_EQ(range.high.load(), hi) << "n=" << n;
        }
    }
}

// ---- int8_gemm ---------------------------------------------------------------------------------------------------

// C = (A - a_zero[m]) x (B - b_zero[n]) through the utility directly, B packed from a row-major or a transposed
// source, with padded leading dimensions.
template <typename TA, typename TB> void check_int8_gemm(int64_t M, int64_t N, int64_t K, bool transposed_b,
                                                         bool zeros, uint32_t seed) {
    const int64_t lda = K + 3, ldc = N + 5, ldb = (transposed_b ? K : N) + 2;
    const auto A = random_bytes<TA>(M * lda, seed);
    const auto Bsrc = random_bytes<TB>((transposed_b ? N : K) * ldb, seed + 1);
    auto za = random_values<int32_t>(M, seed + 2, std::is_signed_v<TA> ? -128 : 0, std::is_signed_v<TA> ? 127 : 255);
    auto zb = random_values<int32_t>(N, seed + 3, std::is_signed_v<TB> ? -128 : 0, std::is_signed_v<TB> ? 127 : 255);
    const Int8PackedB packed(Bsrc.data(), std::is_signed_v<TB>, K, N, transposed_b ? 1 : ldb, transposed_b ? ldb : 1,
                             &testing::test_pool());
    std::vector<int32_t> C(size_t(M * ldc), 0x5a5a5a5a);
    int8_gemm(testing::test_pool(), M, A.data(), std::is_signed_v<TA>, lda, packed, zeros ? za.data() : nullptr,
              zeros ? zb.data() : nullptr, C.data(), ldc);
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            int64_t sum = 0;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t b = transposed_b ? Bsrc[n * ldb + k] : Bsrc[k * ldb + n];
                sum += (int64_t(A[m * lda + k]) - (zeros ? za[m] : 0)) * (b - (zeros ? zb[n] : 0));
            }
            ASSERT_EQ(C[m * ldc + n], int32_t(sum)) << "int8_gemm M=" << M << " N=" << N << " K=" << K
                                                    << " transposed=" << transposed_b << " at " << m << "," << n;
        }
        for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], 0x5a5a5a5a) << "wrote past N";
    }
}

TEST(QuantizedOps, Int8GemmExact) {
    const int64_t shapes[][3] = {{1, 1, 1},    {1, 1, 3},    {2, 31, 5},    {6, 32, 4},    {7, 33, 17},
                                 {13, 64, 63}, {32, 16, 65}, {33, 97, 130}, {65, 100, 515}, {3, 200, 1},
                                 {100, 3, 1027}};
    uint32_t seed = 2000;
    for (const auto& s : shapes) {
        for (int variant = 0; variant < 2; ++variant) {
            check_int8_gemm<uint8_t, int8_t>(s[0], s[1], s[2], variant, variant == 0, seed += 4);
            check_int8_gemm<uint8_t, uint8_t>(s[0], s[1], s[2], !variant, true, seed += 4);
            check_int8_gemm<int8_t, int8_t>(s[0], s[1], s[2], variant, true, seed += 4);
            check_int8_gemm<int8_t, uint8_t>(s[0], s[1], s[2], !variant, variant == 1, seed += 4);
        }
    }
}

// The streaming form (B read as it is, each task packing its panels) delivers exact sums to its sink, and with
// whole_rows every row block starts at a multiple of it and holds a multiple of it but the last (the blocked
// outputs' whole blocks of 16 channels), on every path (AMX, VNNI tiles, the float fallback).
TEST(QuantizedOps, Int8GemmStreamingDeliversWholeRowBlocks) {
    class Recorder final : public Int8GemmSink {
    public:
        Recorder(int32_t* c, int64_t ldc, int64_t M, int64_t whole) : c_(c), ldc_(ldc), M_(M), whole_(whole) {}
        void write(int64_t m0, int64_t rows, int64_t n0, int64_t columns, const int32_t* sums,
                   int64_t ld) const override {
            if (m0 % whole_ != 0 || (m0 + rows < M_ && rows % whole_ != 0)) split_.store(true);
            for (int64_t r = 0; r < rows; ++r)
                std::copy(sums + r * ld, sums + r * ld + columns, c_ + (m0 + r) * ldc_ + n0);
        }
        bool split() const { return split_.load(); }

    private:
        int32_t* c_;
        int64_t ldc_, M_, whole_;
        mutable std::atomic<bool> split_{false};
    };
    const int64_t shapes[][3] = {{16, 37, 20}, {48, 300, 96}, {96, 13, 16}, {37, 129, 33}, {144, 196, 24}};
    uint32_t seed = 3000;
    for (const auto& s : shapes) {
        for (int64_t whole : {int64_t(1), int64_t(16), int64_t(32)}) {
            const int64_t M = s[0], N = s[1], K = s[2], ldb = N + 3;
            const auto A = random_bytes<int8_t>(M * K, seed += 3);
            const auto B = random_bytes<uint8_t>(K * ldb, seed + 1);
            const auto za = random_values<int32_t>(M, seed + 2, -128, 127);
            const int32_t zb = 131;
            const Int8PackedA packed(A.data(), true, M, K, K, &testing::test_pool());
            std::vector<int32_t> C(size_t(M * N), 0x5a5a5a5a);
            const Recorder sink(C.data(), N, M, whole);
            int8_gemm_streaming(testing::test_pool(), packed, B.data(), false, ldb, N, za.data(), zb, sink, whole);
            if (int8_gemm_uses_vnni()) EXPECT_FALSE(sink.split()) << "M=" << M << " whole_rows=" << whole;
            for (int64_t m = 0; m < M; ++m) {
                for (int64_t n = 0; n < N; ++n) {
                    int64_t sum = 0;
                    for (int64_t k = 0; k < K; ++k) sum += (int64_t(A[m * K + k]) - za[m]) * (int64_t(B[k * ldb + n]) - zb);
                    ASSERT_EQ(C[m * N + n], int32_t(sum)) << "M=" << M << " N=" << N << " K=" << K << " whole_rows="
                                                          << whole << " at " << m << "," << n;
                }
            }
        }
    }
}

// Sums beyond 2^31 wrap to 32 bits (the header's contract, as ONNX allows): 70000 products of 255 * 255.
TEST(QuantizedOps, Int8GemmWrapsTo32Bits) {
    const int64_t M = 2, N = 3, K = 70000;
    const std::vector<uint8_t> A(size_t(M * K), 255), B(size_t(K * N), 255);
    const Int8PackedB packed(B.data(), false, K, N, N, 1, &testing::test_pool());
    std::vector<int32_t> C(size_t(M * N));
    int8_gemm(testing::test_pool(), M, A.data(), false, K, packed, nullptr, nullptr, C.data(), N);
    const int64_t exact = int64_t(K) * 255 * 255;
    for (int32_t c : C) EXPECT_EQ(c, int32_t(uint32_t(uint64_t(exact))));
}

}  // namespace
}  // namespace tessera::cpu
