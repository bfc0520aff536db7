// Compares the optimized Gemm / MatMul / Conv / ConvTranspose / pooling / normalization kernels against naive
// reference implementations written here, on random inputs and many attribute combinations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "tessera/provider.h"
#include "util/gemm.h"

namespace tessera::cpu {
namespace {

using testing::NodeBuilder;
using testing::run_node;
using testing::tensor;
using testing::ValueHandle;
using testing::values_of;

// ---- helpers -------------------------------------------------------------------------------------------------

// As the provider does at load: OpenBLAS single-threaded, the pool being the only source of threads.
class BlasEnvironment : public ::testing::Environment {
public:
    void SetUp() override { init_blas_single_threaded(); }
};
[[maybe_unused]] ::testing::Environment* const blas_environment =
    ::testing::AddGlobalTestEnvironment(new BlasEnvironment);

const KernelRegistry& registry() {
    static const KernelRegistry r = [] {
        KernelRegistry reg;
        register_gemm_kernels(reg);
        register_conv_kernels(reg);
        register_pool_kernels(reg);
        register_normalization_kernels(reg);
        return reg;
    }();
    return r;
}

template <typename T>
std::vector<T> random_values(int64_t count, uint32_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937 gen(seed);
    std::vector<T> v(static_cast<size_t>(count));
    if constexpr (std::is_floating_point_v<T>) {
        std::uniform_real_distribution<double> dist(lo, hi);
        for (auto& x : v) x = static_cast<T>(dist(gen));
    } else {
        std::uniform_int_distribution<int> dist(static_cast<int>(lo), static_cast<int>(hi));
        for (auto& x : v) x = static_cast<T>(dist(gen));
    }
    return v;
}

template <typename T>
void expect_near_all(const std::vector<T>& actual, const std::vector<double>& expected, double tolerance,
                     const std::string& what) {
    ASSERT_EQ(actual.size(), expected.size()) << what;
    for (size_t i = 0; i < actual.size(); ++i) {
        const double a = static_cast<double>(actual[i]), e = expected[i];
        ASSERT_TRUE(std::abs(a - e) <= tolerance * (1.0 + std::abs(e)))
            << what << ": element " << i << " is " << a << ", expected " << e;
    }
}

Shape dims_of(const ValueHandle& v) { return v->dims; }

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
    std::vector<int64_t> index(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    return flat;
}

Shape concat(Shape a, const Shape& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// ---- reference implementations --------------------------------------------------------------------------------

template <typename T>
std::vector<double> reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                                   const std::vector<T>& A, const std::vector<T>& B, double beta,
                                   const std::function<double(int64_t, int64_t)>& c) {
    std::vector<double> y(static_cast<size_t>(M * N));
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double a = ta ? A[k * M + m] : A[m * K + k];
                const double b = tb ? B[n * K + k] : B[k * N + n];
                sum += a * b;
            }
            y[m * N + n] = alpha * sum + (c ? beta * c(m, n) : 0.0);
        }
    }
    return y;
}

// numpy.matmul on explicit shapes.
template <typename T>
std::vector<double> reference_matmul(const Shape& a_shape, const std::vector<T>& A, const Shape& b_shape,
                                     const std::vector<T>& B, Shape& out_shape) {
    Shape as = a_shape.size() == 1 ? Shape{1, a_shape[0]} : a_shape;
    Shape bs = b_shape.size() == 1 ? Shape{b_shape[0], 1} : b_shape;
    const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
    const size_t rank = std::max(as.size(), bs.size()) - 2;
    Shape batch(rank);
    auto dim = [&](const Shape& s, size_t i) { return i + s.size() - 2 < rank ? 1 : s[i + s.size() - 2 - rank]; };
    for (size_t i = 0; i < rank; ++i) batch[i] = std::max(dim(as, i), dim(bs, i));
    out_shape = batch;
    if (a_shape.size() > 1) out_shape.push_back(M);
    if (b_shape.size() > 1) out_shape.push_back(N);
    const int64_t batches = shape_size(batch);
    std::vector<double> y(static_cast<size_t>(batches * M * N));
    for (int64_t p = 0; p < batches; ++p) {
        const auto idx = unravel(p, batch);
        int64_t a_off = 0, b_off = 0;
        for (size_t i = 0; i < rank; ++i) {
            a_off = a_off * dim(as, i) + (dim(as, i) == 1 ? 0 : idx[i]);
            b_off = b_off * dim(bs, i) + (dim(bs, i) == 1 ? 0 : idx[i]);
        }
        for (int64_t m = 0; m < M; ++m) {
            for (int64_t n = 0; n < N; ++n) {
                double sum = 0;
                for (int64_t k = 0; k < K; ++k) {
                    sum += static_cast<double>(A[a_off * M * K + m * K + k]) * B[b_off * K * N + k * N + n];
                }
                y[(p * M + m) * N + n] = sum;
            }
        }
    }
    return y;
}

struct ConvCase {
    Shape x{};  // [N, C, spatial...]
    int64_t out_channels = 0;
    Shape kernel{};
    int64_t group = 1;
    Shape strides{}, dilations{}, pads{};  // empty: defaults
    std::string auto_pad{};                // "" = attribute absent
    bool bias = true;
    bool constant_weights = false;
    bool declare_x_shape = false;  // X's shape known when the kernel is created (it may pick a kernel family then)
};

// Resolved geometry, computed independently of the kernel's helpers.
struct RefGeometry {
    Shape out, pads_begin, strides, dilations;
};

RefGeometry conv_geometry(const ConvCase& c) {
    const size_t rank = c.kernel.size();
    RefGeometry g;
    g.strides = c.strides;
    g.dilations = c.dilations;
    if (g.strides.empty()) g.strides.assign(rank, 1);
    if (g.dilations.empty()) g.dilations.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t in = c.x[d + 2], s = g.strides[d], span = (c.kernel[d] - 1) * g.dilations[d] + 1;
        if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
            const int64_t out = (in + s - 1) / s;
            const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in);
            g.out.push_back(out);
            g.pads_begin.push_back(c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2);
        } else if (c.auto_pad == "VALID") {
            g.out.push_back((in - span) / s + 1);
            g.pads_begin.push_back(0);
        } else {
            const int64_t pb = c.pads.empty() ? 0 : c.pads[d], pe = c.pads.empty() ? 0 : c.pads[d + rank];
            g.out.push_back((in + pb + pe - span) / s + 1);
            g.pads_begin.push_back(pb);
        }
    }
    return g;
}

std::vector<double> reference_conv(const ConvCase& c, const RefGeometry& g, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& b) {
    const int64_t N = c.x[0], C = c.x[1], M = c.out_channels, Cg = C / c.group, Mg = M / c.group;
    const Shape in(c.x.begin() + 2, c.x.end());
    const int64_t out_size = shape_size(g.out), k_size = shape_size(c.kernel);
    std::vector<double> y(static_cast<size_t>(N * M * out_size));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t m = 0; m < M; ++m) {
            const int64_t grp = m / Mg;
            for (int64_t o = 0; o < out_size; ++o) {
                const auto op = unravel(o, g.out);
                double sum = b.empty() ? 0.0 : b[m];
                for (int64_t ci = 0; ci < Cg; ++ci) {
                    for (int64_t k = 0; k < k_size; ++k) {
                        const auto kp = unravel(k, c.kernel);
                        std::vector<int64_t> ip(in.size());
                        bool inside = true;
                        for (size_t d = 0; d < in.size(); ++d) {
                            ip[d] = op[d] * g.strides[d] - g.pads_begin[d] + kp[d] * g.dilations[d];
                            inside = inside && ip[d] >= 0 && ip[d] < in[d];
                        }
                        if (!inside) continue;
                        sum +=
                            x[(n * C + grp * Cg + ci) * shape_size(in) + ravel(ip, in)] * w[(m * Cg + ci) * k_size + k];
                    }
                }
                y[(n * M + m) * out_size + o] = sum;
            }
        }
    }
    return y;
}

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
    return {v.begin(), v.end()};
}

template <typename T>
void run_conv_case(const ConvCase& c, uint32_t seed) {
    const int64_t C = c.x[1], M = c.out_channels;
    const Shape w_shape = concat({M, C / c.group}, c.kernel);
    const auto x = random_values<T>(shape_size(c.x), seed);
    const auto w = random_values<T>(shape_size(w_shape), seed + 1);
    const auto b = c.bias ? random_values<T>(M, seed + 2) : std::vector<T>();
    const RefGeometry g = conv_geometry(c);

    constexpr int32_t type = element_type_of<T>();
    NodeBuilder node("Conv", 11);
    node.input(type);
    ValueHandle w_value = tensor<T>(w_shape, w);
    if (c.constant_weights) {
        node.constant_input(w_value);
    } else {
        node.input(type);
    }
    if (c.bias) node.input(type);
    node.output(type).attr_int("group", c.group).attr_ints("kernel_shape", c.kernel);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);

    std::vector<ValueHandle> inputs{tensor<T>(c.x, x), c.constant_weights ? nullptr : w_value};
    if (c.bias) inputs.push_back(tensor<T>({M}, b));
    const auto outputs = run_node(registry(), node, inputs);
    EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], M}, g.out));
    const auto expected = reference_conv(c, g, widen(x), widen(w), widen(b));
    expect_near_all(values_of<T>(*outputs[0]), expected, std::is_same_v<T, float> ? 2e-5 : 1e-12, "Conv");
}

struct ConvTransposeCase {
    Shape x{};
    int64_t out_channels = 0;  // total
    Shape kernel{};
    int64_t group = 1;
    Shape strides{}, dilations{}, pads{}, output_padding{}, output_shape{};
    std::string auto_pad{};
    bool bias = true;
    int64_t opset = 11;
};

// Output dims and leading pads as the spec defines them (floor halves for the derived padding).
RefGeometry conv_transpose_geometry(const ConvTransposeCase& c) {
    const size_t rank = c.kernel.size();
    RefGeometry g;
    g.strides = c.strides;
    g.dilations = c.dilations;
    if (g.strides.empty()) g.strides.assign(rank, 1);
    if (g.dilations.empty()) g.dilations.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t in = c.x[d + 2], s = g.strides[d];
        const int64_t adj = c.output_padding.empty() ? 0 : c.output_padding[d];
        const int64_t full = s * (in - 1) + adj + (c.kernel[d] - 1) * g.dilations[d] + 1;
        const bool same = c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER";
        if (!c.output_shape.empty() || same) {
            const int64_t out = c.output_shape.empty() ? in * s : c.output_shape[d];
            const int64_t total = full - out;
            const int64_t half = static_cast<int64_t>(std::floor(total / 2.0));
            const bool upper = c.auto_pad == "SAME_UPPER";
            const bool odd_at_end = c.opset >= 11 ? upper : !upper;
            g.out.push_back(out);
            g.pads_begin.push_back(odd_at_end ? half : total - half);
        } else {
            const int64_t pb = c.pads.empty() ? 0 : c.pads[d], pe = c.pads.empty() ? 0 : c.pads[d + rank];
            g.out.push_back(full - pb - pe);
            g.pads_begin.push_back(pb);
        }
    }
    return g;
}

std::vector<double> reference_conv_transpose(const ConvTransposeCase& c, const RefGeometry& g,
                                             const std::vector<double>& x, const std::vector<double>& w,
                                             const std::vector<double>& b) {
    const int64_t N = c.x[0], C = c.x[1], M = c.out_channels, Cg = C / c.group, Mg = M / c.group;
    const Shape in(c.x.begin() + 2, c.x.end());
    const int64_t in_size = shape_size(in), out_size = shape_size(g.out), k_size = shape_size(c.kernel);
    std::vector<double> y(static_cast<size_t>(N * M * out_size), 0.0);
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t m = 0; m < M; ++m) {
            for (int64_t o = 0; o < out_size; ++o) y[(n * M + m) * out_size + o] = b.empty() ? 0.0 : b[m];
        }
        for (int64_t ci = 0; ci < C; ++ci) {
            const int64_t grp = ci / Cg;
            for (int64_t i = 0; i < in_size; ++i) {
                const auto ip = unravel(i, in);
                const double xv = x[(n * C + ci) * in_size + i];
                for (int64_t mg = 0; mg < Mg; ++mg) {
                    for (int64_t k = 0; k < k_size; ++k) {
                        const auto kp = unravel(k, c.kernel);
                        std::vector<int64_t> op(in.size());
                        bool inside = true;
                        for (size_t d = 0; d < in.size(); ++d) {
                            op[d] = ip[d] * g.strides[d] - g.pads_begin[d] + kp[d] * g.dilations[d];
                            inside = inside && op[d] >= 0 && op[d] < g.out[d];
                        }
                        if (!inside) continue;
                        const int64_t m = grp * Mg + mg;
                        y[(n * M + m) * out_size + ravel(op, g.out)] += xv * w[(ci * Mg + mg) * k_size + k];
                    }
                }
            }
        }
    }
    return y;
}

void run_conv_transpose_case(const ConvTransposeCase& c, uint32_t seed) {
    const int64_t C = c.x[1], M = c.out_channels;
    const Shape w_shape = concat({C, M / c.group}, c.kernel);
    const auto x = random_values<float>(shape_size(c.x), seed);
    const auto w = random_values<float>(shape_size(w_shape), seed + 1);
    const auto b = c.bias ? random_values<float>(M, seed + 2) : std::vector<float>();
    const RefGeometry g = conv_transpose_geometry(c);

    NodeBuilder node("ConvTranspose", c.opset);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32);
    if (c.bias) node.input(TESS_ELEMENT_FLOAT32);
    node.output(TESS_ELEMENT_FLOAT32).attr_int("group", c.group);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (!c.output_padding.empty()) node.attr_ints("output_padding", c.output_padding);
    if (!c.output_shape.empty()) node.attr_ints("output_shape", c.output_shape);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);
    std::vector<ValueHandle> inputs{tensor<float>(c.x, x), tensor<float>(w_shape, w)};
    if (c.bias) inputs.push_back(tensor<float>({M}, b));
    const auto outputs = run_node(registry(), node, inputs);
    EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], M}, g.out));
    expect_near_all(values_of<float>(*outputs[0]), reference_conv_transpose(c, g, widen(x), widen(w), widen(b)), 2e-5,
                    "ConvTranspose");
}

// ---- gemm utility ---------------------------------------------------------------------------------------------

template <typename T>
void check_gemm_util(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, double beta, uint32_t seed) {
    const auto A = random_values<T>(M * K, seed, -3, 3);
    const auto B = random_values<T>(K * N, seed + 1, -3, 3);
    auto C = random_values<T>(M * N, seed + 2, -3, 3);
    const auto c0 = C;
    gemm<T>(testing::test_pool(), ta, tb, M, N, K, static_cast<T>(alpha), A.data(), ta ? M : K, B.data(), tb ? K : N,
            static_cast<T>(beta), C.data(), N);
    const auto expected = reference_gemm<T>(ta, tb, M, N, K, alpha, A, B, beta,
                                            [&](int64_t m, int64_t n) { return static_cast<double>(c0[m * N + n]); });
    // Float error grows with the number of products summed (inputs in [-3, 3]).
    expect_near_all(C, expected, std::is_same_v<T, float> ? 1e-6 * 9 * double(K + 1) : 1e-12,
                    "gemm M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                        " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
}

TEST(GemmUtil, MatchesReferenceAcrossShapesAndTransposes) {
    const int64_t shapes[][3] = {{1, 1, 1},     {1, 37, 19},  {23, 1, 17},  {5, 7, 3},       {64, 300, 27},
                                 {300, 64, 27}, {2, 5000, 9}, {700, 3, 40}, {128, 128, 128}, {17, 33, 0}};
    uint32_t seed = 1;
    for (const auto& s : shapes) {
        for (int t = 0; t < 4; ++t) {
            check_gemm_util<float>(t & 1, t & 2, s[0], s[1], s[2], 1.0, 0.0, seed++);
            check_gemm_util<float>(t & 1, t & 2, s[0], s[1], s[2], 0.5, 1.5, seed++);
            check_gemm_util<double>(t & 1, t & 2, s[0], s[1], s[2], -2.0, 0.25, seed++);
        }
    }
}

TEST(GemmUtil, IntegerLoop) {
    for (int t = 0; t < 4; ++t) {
        check_gemm_util<int32_t>(t & 1, t & 2, 13, 200, 31, 1.0, 0.0, 7 + t);
        check_gemm_util<int64_t>(t & 1, t & 2, 300, 9, 5, 2.0, 1.0, 17 + t);
    }
}

TEST(GemmUtil, EpilogueSeesEveryBlockOnce) {
    const int64_t M = 200, N = 3000, K = 16;
    const auto A = random_values<float>(M * K, 3), B = random_values<float>(K * N, 4);
    std::vector<float> C(M * N);
    std::vector<int> visits(M * N, 0);
    gemm<float>(testing::test_pool(), false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N,
                [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                    for (int64_t r = r0; r < r1; ++r)
                        for (int64_t c = c0; c < c1; ++c) ++visits[r * N + c];
                });
    EXPECT_TRUE(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }));
}

// ---- Gemm op --------------------------------------------------------------------------------------------------

struct GemmOpCase {
    bool ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    std::optional<Shape> c_shape;  // nullopt: no C
    int64_t opset = 13;
    bool constant_b = false;  // B an initializer: packed once (lane panels or packed columns)
};

void run_gemm_case(const GemmOpCase& c, uint32_t seed) {
    const Shape a_shape = c.ta ? Shape{c.K, c.M} : Shape{c.M, c.K};
    const Shape b_shape = c.tb ? Shape{c.N, c.K} : Shape{c.K, c.N};
    const auto A = random_values<float>(shape_size(a_shape), seed);
    const auto B = random_values<float>(shape_size(b_shape), seed + 1);
    NodeBuilder node("Gemm", c.opset);
    ValueHandle b_value = tensor<float>(b_shape, B);
    node.input(TESS_ELEMENT_FLOAT32);
    if (c.constant_b) node.constant_input(b_value);
    else node.input(TESS_ELEMENT_FLOAT32);
    std::vector<ValueHandle> inputs{tensor<float>(a_shape, A), c.constant_b ? nullptr : b_value};
    std::vector<float> Cv;
    if (c.c_shape) {
        Cv = random_values<float>(shape_size(*c.c_shape), seed + 2);
        node.input(TESS_ELEMENT_FLOAT32);
        inputs.push_back(tensor<float>(*c.c_shape, Cv));
    }
    node.output()
        .attr_int("transA", c.ta)
        .attr_int("transB", c.tb)
        .attr_float("alpha", c.alpha)
        .attr_float("beta", c.beta);
    if (c.opset < 7) node.attr_int("broadcast", 1);
    const auto outputs = run_node(registry(), node, inputs);
    std::function<double(int64_t, int64_t)> c_at;
    if (c.c_shape) {
        const Shape cs = *c.c_shape;
        c_at = [&, cs](int64_t m, int64_t n) {
            const int64_t rows = cs.size() == 2 ? cs[0] : 1, cols = cs.empty() ? 1 : cs.back();
            return static_cast<double>(Cv[(rows == 1 ? 0 : m) * cols + (cols == 1 ? 0 : n)]);
        };
    }
    EXPECT_EQ(dims_of(outputs[0]), (Shape{c.M, c.N}));
    expect_near_all(values_of<float>(*outputs[0]),
                    reference_gemm<float>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, B, c.beta, c_at), 1e-5, "Gemm");
}

TEST(GemmOp, AttributesAndBiasShapes) {
    const std::vector<std::optional<Shape>> c_shapes{std::nullopt, Shape{},     Shape{1},   Shape{9},
                                                     Shape{1, 9},  Shape{7, 1}, Shape{7, 9}};
    uint32_t seed = 100;
    for (const auto& cs : c_shapes) {
        for (int t = 0; t < 4; ++t) {
            run_gemm_case({bool(t & 1), bool(t & 2), 7, 9, 5, 0.5f, 2.0f, cs}, seed++);
            run_gemm_case({bool(t & 1), bool(t & 2), 7, 9, 5, 1.0f, 1.0f, cs, 6}, seed++);
        }
    }
    // Big enough to split across the pool, with a row bias.
    run_gemm_case({false, true, 1, 4096, 1024, 1.0f, 1.0f, Shape{4096}}, 7);
    run_gemm_case({false, true, 300, 500, 64, 1.0f, 1.0f, Shape{500}}, 8);
}

TEST(GemmOp, ConstantWeights) {
    // Lane panels (64 and 1000 columns, transB either way, alpha folded into the packed B), packed columns (9
    // columns, or transA).
    uint32_t seed = 700;
    for (const int64_t N : {64, 1000, 9}) {
        for (int t = 0; t < 4; ++t) {
            run_gemm_case({bool(t & 1), bool(t & 2), 3, N, 37, 0.5f, 2.0f, Shape{N}, 13, true}, seed++);
            run_gemm_case({bool(t & 1), bool(t & 2), 1, N, 70, 1.0f, 1.0f, std::nullopt, 13, true}, seed++);
        }
    }
}

TEST(GemmOp, RejectsMismatchedShapes) {
    NodeBuilder node("Gemm", 13);
    node.input().input().input().output();
    EXPECT_THROW(
        run_node(registry(), node,
                 {tensor<float>({2, 3}, std::vector<float>(6)), tensor<float>({4, 5}, std::vector<float>(20))}),
        KernelError);
    NodeBuilder strict("Gemm", 6);
    strict.input().input().input().output();
    EXPECT_THROW(run_node(registry(), strict,
                          {tensor<float>({2, 3}, std::vector<float>(6)), tensor<float>({3, 4}, std::vector<float>(12)),
                           tensor<float>({4}, std::vector<float>(4))}),
                 KernelError);
}

// ---- MatMul op ------------------------------------------------------------------------------------------------

// constant_b: B is an initializer, which the kernel packs once (lane panels or packed columns, by B's width).
template <typename T>
void run_matmul_case(const Shape& a_shape, const Shape& b_shape, uint32_t seed, bool constant_b = false) {
    const auto A = random_values<T>(shape_size(a_shape), seed, -4, 4);
    const auto B = random_values<T>(shape_size(b_shape), seed + 1, -4, 4);
    NodeBuilder node("MatMul", 13);
    node.input(element_type_of<T>());
    ValueHandle b_value = tensor<T>(b_shape, B);
    if (constant_b) node.constant_input(b_value);
    else node.input(element_type_of<T>());
    node.output();
    const auto outputs = run_node(registry(), node, {tensor<T>(a_shape, A), constant_b ? nullptr : b_value});
    Shape expected_shape;
    const auto expected = reference_matmul(a_shape, A, b_shape, B, expected_shape);
    EXPECT_EQ(dims_of(outputs[0]), expected_shape);
    const int64_t K = a_shape.back();
    expect_near_all(values_of<T>(*outputs[0]), expected, std::is_floating_point_v<T> ? 1e-6 * 16 * double(K + 1) : 0.0,
                    "MatMul " + shape_string(a_shape) + " x " + shape_string(b_shape));
}

TEST(MatMulOp, PromotionAndBroadcasting) {
    const std::pair<Shape, Shape> cases[] = {{{4}, {4}},
                                             {{3}, {2, 3, 5}},
                                             {{2, 3, 4, 5}, {5}},
                                             {{3, 4}, {4, 6}},
                                             {{2, 3, 4}, {4, 6}},
                                             {{3, 4}, {2, 4, 6}},
                                             {{2, 1, 3, 4}, {5, 4, 6}},
                                             {{1, 3, 4}, {2, 1, 4, 2}},
                                             {{64, 32, 48}, {64, 48, 40}},
                                             {{256, 512}, {512, 130}},
                                             {{2, 0, 4}, {4, 3}},
                                             {{3, 0}, {0, 2}}};
    uint32_t seed = 300;
    for (const auto& [a, b] : cases) {
        run_matmul_case<float>(a, b, seed++);
        run_matmul_case<double>(a, b, seed++);
        run_matmul_case<int32_t>(a, b, seed++);
        run_matmul_case<int64_t>(a, b, seed++);
    }
}

TEST(MatMulOp, ConstantWeightsOfEveryWidth) {
    // Widths that fill lane panels (64, 96 in 32-wide panels, 1000 with a part-empty last panel) and widths that go
    // to the packed columns (5, 40); depths across the lane kernels' depth block; rows across their row blocks.
    const std::pair<Shape, Shape> cases[] = {{{3, 7}, {7, 64}},          {{2, 9, 33}, {33, 96}},
                                             {{128, 70}, {70, 1000}},    {{1, 1030}, {1030, 64}},
                                             {{15, 1100}, {1100, 32}},   {{4, 6}, {6, 5}},
                                             {{2, 3, 20}, {20, 40}},     {{5, 0}, {0, 64}},
                                             {{0, 8}, {8, 128}}};
    uint32_t seed = 900;
    for (const auto& [a, b] : cases) {
        SCOPED_TRACE(shape_string(a) + " x constant " + shape_string(b));
        run_matmul_case<float>(a, b, seed++, true);
    }
}

TEST(MatMulOp, RejectsBadShapes) {
    NodeBuilder node("MatMul", 13);
    node.input().input().output();
    EXPECT_THROW(
        run_node(registry(), node,
                 {tensor<float>({2, 3}, std::vector<float>(6)), tensor<float>({4, 5}, std::vector<float>(20))}),
        KernelError);
    EXPECT_THROW(
        run_node(registry(), node,
                 {tensor<float>({2, 2, 3}, std::vector<float>(12)), tensor<float>({3, 3, 5}, std::vector<float>(45))}),
        KernelError);
}

// ---- Conv -----------------------------------------------------------------------------------------------------

TEST(ConvOp, TwoDimensionalAttributeCombinations) {
    std::vector<ConvCase> cases{
        {.x = {1, 3, 9, 11}, .out_channels = 4, .kernel = {3, 3}},
        {.x = {2, 3, 9, 11}, .out_channels = 4, .kernel = {3, 3}, .group = 1, .strides = {2, 2}, .pads = {1, 1, 1, 1}},
        {.x = {1, 4, 10, 9},
         .out_channels = 6,
         .kernel = {3, 2},
         .group = 2,
         .strides = {1, 2},
         .dilations = {2, 1},
         .pads = {2, 0, 1, 3}},
        {.x = {1, 6, 8, 8},
         .out_channels = 6,
         .kernel = {3, 3},
         .group = 6,
         .strides = {1, 1},
         .pads = {1, 1, 1, 1}},  // depthwise
        {.x = {2, 4, 9, 7},
         .out_channels = 8,
         .kernel = {3, 3},
         .group = 4,
         .strides = {2, 1},
         .dilations = {2, 2},
         .pads = {0, 1, 2, 1}},                                    // depthwise, multiplier 2, dilated
        {.x = {1, 5, 7, 7}, .out_channels = 8, .kernel = {1, 1}},  // pointwise
        {.x = {2, 8, 5, 6},
         .out_channels = 4,
         .kernel = {1, 1},
         .group = 2,
         .bias = false},  // grouped pointwise, no bias
        {.x = {1, 3, 6, 6}, .out_channels = 4, .kernel = {1, 1}, .group = 1, .strides = {2, 2}},  // strided 1x1
        {.x = {1, 2, 9, 10},
         .out_channels = 3,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .auto_pad = "SAME_UPPER"},
        {.x = {1, 2, 9, 10},
         .out_channels = 3,
         .kernel = {4, 3},
         .group = 1,
         .strides = {2, 3},
         .auto_pad = "SAME_LOWER"},
        {.x = {1, 2, 9, 10},
         .out_channels = 3,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .dilations = {2, 1},
         .auto_pad = "VALID"},
        {.x = {1, 3, 56, 56},
         .out_channels = 64,
         .kernel = {3, 3},
         .group = 1,
         .strides = {1, 1},
         .pads = {1, 1, 1, 1}},  // parallel paths
        {.x = {1, 64, 14, 14},
         .out_channels = 128,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .pads = {1, 1, 1, 1}},
        {.x = {1, 32, 7, 7},
         .out_channels = 16,
         .kernel = {5, 5},
         .group = 1,
         .pads = {2, 2, 2, 2},
         .bias = true,
         .constant_weights = true},  // constant weights
        {.x = {2, 3, 12, 13},
         .out_channels = 10,
         .kernel = {3, 2},
         .dilations = {2, 3},
         .pads = {2, 0, 1, 3}},                                                          // unit strides, dilated
        {.x = {1, 2, 5, 5}, .out_channels = 3, .kernel = {2, 2}, .pads = {3, 3, 3, 3}},  // windows fully in padding
        {.x = {1, 6, 9, 9},
         .out_channels = 9,
         .kernel = {3, 3},
         .group = 3,
         .pads = {1, 1, 1, 1},
         .constant_weights = true},
    };
    uint32_t seed = 1000;
    for (const auto& c : cases) {
        SCOPED_TRACE("x " + shape_string(c.x) + " kernel " + shape_string(c.kernel) + " group " +
                     std::to_string(c.group));
        run_conv_case<float>(c, seed);
        seed += 10;
    }
}

TEST(ConvOp, OneAndThreeDimensionalAndDouble) {
    std::vector<ConvCase> cases{
        {.x = {2, 3, 17}, .out_channels = 5, .kernel = {3}},
        {.x = {1, 4, 20},
         .out_channels = 6,
         .kernel = {4},
         .group = 2,
         .strides = {3},
         .dilations = {2},
         .pads = {1, 2}},
        {.x = {1, 2, 6, 7, 5},
         .out_channels = 3,
         .kernel = {3, 2, 2},
         .group = 1,
         .strides = {1, 2, 1},
         .dilations = {1, 1, 2},
         .pads = {1, 0, 1, 1, 1, 0}},
        {.x = {1, 4, 5, 5, 5}, .out_channels = 4, .kernel = {3, 3, 3}, .group = 4, .pads = {1, 1, 1, 1, 1, 1}},
        {.x = {1, 2, 5, 6, 4},
         .out_channels = 2,
         .kernel = {2, 2, 2},
         .group = 1,
         .strides = {2, 2, 2},
         .auto_pad = "SAME_UPPER"},
    };
    uint32_t seed = 2000;
    for (const auto& c : cases) {
        SCOPED_TRACE("x " + shape_string(c.x) + " kernel " + shape_string(c.kernel));
        run_conv_case<float>(c, seed);
        run_conv_case<double>(c, seed + 5);
        seed += 10;
    }
    run_conv_case<double>(
        {.x = {1, 4, 9, 8}, .out_channels = 4, .kernel = {3, 3}, .group = 4, .strides = {2, 1}, .pads = {1, 1, 1, 1}},
        77);
}

TEST(ConvOp, RejectsInconsistentShapes) {
    NodeBuilder node("Conv", 11);
    node.input().input().output().attr_int("group", 2);
    // 3 input channels do not split into 2 groups.
    EXPECT_THROW(run_node(registry(), node,
                          {tensor<float>({1, 3, 4, 4}, std::vector<float>(48)),
                           tensor<float>({2, 1, 3, 3}, std::vector<float>(18))}),
                 KernelError);
    NodeBuilder small("Conv", 11);
    small.input().input().output();
    EXPECT_THROW(run_node(registry(), small,
                          {tensor<float>({1, 1, 2, 2}, std::vector<float>(4)),
                           tensor<float>({1, 1, 3, 3}, std::vector<float>(9))}),
                 KernelError);
}

// ---- FusedConv (the optimizer's Conv + residual sum + activation) ---------------------------------------------
//
// The CPU provider's Conv kernel registered for FusedConv applies Y = act(Conv(X, W, B) + Z) in each of its code
// paths (depthwise, direct with and without a cropped grid, packed im2col for small images, tiled im2col for wide
// ones and other ranks, 1x1).  Each case runs every activation with and without Z against the double reference
// convolution above, followed by a sum and an activation written here.  The paths depend on the CPU: run the binary
// with TESSERA_CPU_MAX_ISA=avx2 or =none as well to reach the AVX2 tiles and the OpenBLAS fallback.

#ifdef TESS_FUSED_OPS_DOMAIN
constexpr const char* kFusedConvDomain = TESS_FUSED_OPS_DOMAIN;
#else
constexpr const char* kFusedConvDomain = "com.microsoft";
#endif

struct FusedActivation {
    std::string name;  // "" = no activation attribute
    std::vector<float> params{};
};

double reference_activation(const FusedActivation& a, double v) {
    if (a.name.empty()) return v;
    if (a.name == "Relu") return std::max(v, 0.0);
    if (a.name == "Sigmoid") return 1.0 / (1.0 + std::exp(-v));
    if (a.name == "Tanh") return std::tanh(v);
    if (a.name == "LeakyRelu") return v >= 0 ? v : double(a.params[0]) * v;
    if (a.name == "Clip") return std::min(std::max(v, double(a.params[0])), double(a.params[1]));
    if (a.name == "HardSigmoid") return std::max(0.0, std::min(1.0, double(a.params[0]) * v + double(a.params[1])));
    ADD_FAILURE() << "no reference for activation " << a.name;
    return v;
}

const std::vector<FusedActivation>& fused_activations() {
    static const std::vector<FusedActivation> all{
        {""},
        {"Relu"},
        {"Sigmoid"},
        {"Tanh"},
        {"LeakyRelu", {0.15f}},
        {"Clip", {-0.3f, 0.4f}},
        {"Clip", {0.0f, 6.0f}},
        {"HardSigmoid", {0.3f, 0.45f}},
    };
    return all;
}

// A FusedConv node for `c` (inputs X, W [, B] [, Z]); the weights are a constant when c.constant_weights.
void build_fused_conv_node(NodeBuilder& node, const ConvCase& c, const ValueHandle& w_value,
                           const FusedActivation& act, bool with_z) {
    node.input(TESS_ELEMENT_FLOAT32, c.declare_x_shape ? std::optional<Shape>(c.x) : std::nullopt);
    if (c.constant_weights) {
        node.constant_input(w_value);
    } else {
        node.input(TESS_ELEMENT_FLOAT32);
    }
    if (c.bias) {
        node.input(TESS_ELEMENT_FLOAT32);
    } else if (with_z) {
        node.omitted_input();
    }
    if (with_z) node.input(TESS_ELEMENT_FLOAT32);
    node.output(TESS_ELEMENT_FLOAT32).attr_int("group", c.group).attr_ints("kernel_shape", c.kernel);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);
    if (!act.name.empty()) node.attr_string("activation", act.name);
    if (!act.params.empty()) node.attr_floats("activation_params", act.params);
}

// Every activation, with and without Z, on one geometry.
void run_fused_conv_case(const ConvCase& c, uint32_t seed) {
    const int64_t C = c.x[1], M = c.out_channels;
    const Shape w_shape = concat({M, C / c.group}, c.kernel);
    const auto x = random_values<float>(shape_size(c.x), seed);
    const auto w = random_values<float>(shape_size(w_shape), seed + 1);
    const auto b = c.bias ? random_values<float>(M, seed + 2) : std::vector<float>();
    const RefGeometry g = conv_geometry(c);
    const Shape y_shape = concat({c.x[0], M}, g.out);
    const auto z = random_values<float>(shape_size(y_shape), seed + 3);
    const std::vector<double> conv = reference_conv(c, g, widen(x), widen(w), widen(b));

    for (const bool with_z : {false, true}) {
        for (const FusedActivation& act : fused_activations()) {
            SCOPED_TRACE("activation '" + act.name + "'" + (with_z ? " with Z" : " without Z"));
            ValueHandle w_value = tensor<float>(w_shape, w);
            NodeBuilder node("FusedConv", 1, kFusedConvDomain);
            build_fused_conv_node(node, c, w_value, act, with_z);
            std::vector<ValueHandle> inputs{tensor<float>(c.x, x), c.constant_weights ? nullptr : w_value};
            if (c.bias) {
                inputs.push_back(tensor<float>({M}, b));
            } else if (with_z) {
                inputs.push_back(nullptr);
            }
            if (with_z) inputs.push_back(tensor<float>(y_shape, z));
            const auto outputs = run_node(registry(), node, inputs);
            ASSERT_EQ(dims_of(outputs[0]), y_shape);
            std::vector<double> expected(conv.size());
            for (size_t i = 0; i < conv.size(); ++i)
                expected[i] = reference_activation(act, conv[i] + (with_z ? double(z[i]) : 0.0));
            expect_near_all(values_of<float>(*outputs[0]), expected, 2e-5, "FusedConv");
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

// The geometries that reach each code path of the Conv kernel (see plugins/cpu/kernels/conv.cc).
std::vector<std::pair<std::string, ConvCase>> fused_conv_cases() {
    return {
        {"depthwise 3x3 stride 1",
         {.x = {1, 6, 8, 8}, .out_channels = 6, .kernel = {3, 3}, .group = 6, .pads = {1, 1, 1, 1}}},
        {"depthwise 3x3 stride 2, batch 2",
         {.x = {2, 8, 9, 10},
          .out_channels = 8,
          .kernel = {3, 3},
          .group = 8,
          .strides = {2, 2},
          .pads = {1, 1, 1, 1},
          .constant_weights = true}},
        {"depthwise 3x3 on rows wider than 8 (plane by plane)",
         {.x = {1, 6, 20, 21}, .out_channels = 6, .kernel = {3, 3}, .group = 6, .pads = {1, 1, 1, 1}}},
        // The 3x3 tiles (rows x two column vectors, then one), each thread a band of rows of every plane.
        {"depthwise 3x3 on two column vectors and one, split into row bands",
         {.x = {1, 16, 19, 40}, .out_channels = 16, .kernel = {3, 3}, .group = 16, .pads = {1, 1, 1, 1}}},
        {"depthwise 3x3 stride 2 on wide rows, split into row bands",
         {.x = {1, 16, 37, 70},
          .out_channels = 16,
          .kernel = {3, 3},
          .group = 16,
          .strides = {2, 2},
          .pads = {1, 1, 1, 1},
          .constant_weights = true}},
        // Small planes flattened (stride 1, as many output columns as input columns, <= 64 positions).
        {"depthwise 3x3 on flattened 7x7 planes, odd channel count, batch 2",
         {.x = {2, 5, 7, 7}, .out_channels = 5, .kernel = {3, 3}, .group = 5, .pads = {1, 1, 1, 1},
          .constant_weights = true}},
        {"depthwise 5x3 dilated on flattened 6x5 planes, fewer output rows than input rows",
         {.x = {1, 6, 6, 5}, .out_channels = 6, .kernel = {5, 3}, .group = 6, .dilations = {1, 2},
          .pads = {1, 2, 0, 2}}},
        {"depthwise 3x3 on flattened 3x3 planes, many channels across the pool",
         {.x = {1, 600, 3, 3}, .out_channels = 600, .kernel = {3, 3}, .group = 600, .pads = {1, 1, 1, 1}}},
        {"depthwise 3x3, row stride 1 and column stride 2, no top padding (general tiles)",
         {.x = {1, 8, 13, 40}, .out_channels = 8, .kernel = {3, 3}, .group = 8, .strides = {1, 2},
          .pads = {0, 1, 1, 0}}},
        {"depthwise 3x3 dilated on wide rows (general tiles)",
         {.x = {1, 8, 12, 36}, .out_channels = 8, .kernel = {3, 3}, .group = 8, .dilations = {2, 2},
          .pads = {2, 2, 2, 2}}},
        {"depthwise on channel blocks: 40 channels, 5x3 strided and dilated, asymmetric pads",
         {.x = {1, 40, 11, 9},
          .out_channels = 40,
          .kernel = {5, 3},
          .group = 40,
          .strides = {2, 1},
          .dilations = {1, 2},
          .pads = {2, 1, 1, 0},
          .constant_weights = true}},
        {"depthwise multiplier 2, no bias",
         {.x = {1, 4, 7, 7}, .out_channels = 8, .kernel = {3, 3}, .group = 4, .pads = {1, 1, 1, 1}, .bias = false}},
        {"direct 3x3, cropped grid",
         {.x = {1, 16, 20, 20}, .out_channels = 24, .kernel = {3, 3}, .pads = {1, 1, 1, 1}}},
        {"direct 3x3 stride 2, cropped grid, constant weights, batch 2",
         {.x = {2, 16, 15, 15},
          .out_channels = 20,
          .kernel = {3, 3},
          .strides = {2, 2},
          .pads = {1, 1, 1, 1},
          .constant_weights = true}},
        {"direct 3x3 stride 3, grid without cropping",
         {.x = {1, 5, 12, 12}, .out_channels = 7, .kernel = {3, 3}, .strides = {3, 3}}},
        {"direct 3x3 stride 3, grid without cropping, split across the pool",
         {.x = {1, 32, 30, 30}, .out_channels = 44, .kernel = {3, 3}, .strides = {3, 3}}},
        {"1x1", {.x = {1, 16, 7, 7}, .out_channels = 24, .kernel = {1, 1}, .constant_weights = true}},
        {"1x1 split across the pool",
         {.x = {1, 64, 28, 28}, .out_channels = 100, .kernel = {1, 1}, .constant_weights = true}},
        {"1x1 no bias, batch 2", {.x = {2, 8, 5, 6}, .out_channels = 12, .kernel = {1, 1}, .bias = false}},
        {"packed im2col: small image, many filters",
         {.x = {1, 32, 7, 7}, .out_channels = 64, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .constant_weights = true}},
        {"packed im2col: small image, many filters, runtime weights, no bias",
         {.x = {1, 16, 6, 6}, .out_channels = 40, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .bias = false}},
        {"5x5 dilated: tiled im2col",
         {.x = {1, 4, 15, 14}, .out_channels = 6, .kernel = {5, 5}, .dilations = {2, 2}, .pads = {4, 4, 4, 4}}},
        {"grouped 3x3",
         {.x = {1, 8, 9, 9},
          .out_channels = 12,
          .kernel = {3, 3},
          .group = 4,
          .pads = {1, 1, 1, 1},
          .constant_weights = true}},
        {"1-D, tiled", {.x = {2, 3, 50}, .out_channels = 4, .kernel = {3}, .pads = {1, 1}}},
        {"3-D", {.x = {1, 2, 5, 6, 4}, .out_channels = 3, .kernel = {3, 3, 3}, .pads = {1, 1, 1, 1, 1, 1}}},
        {"SAME_UPPER stride 2", {.x = {1, 3, 9, 10}, .out_channels = 5, .kernel = {3, 3}, .strides = {2, 2},
                                 .auto_pad = "SAME_UPPER"}},
        // Short output rows with 32/64-filter panels go to the lane kernels (util/lane_gemm.h) where the CPU has
        // AVX-512; elsewhere these take the paths above.
        {"lanes: 3x3 on 7x7, one 64-filter panel",
         {.x = {1, 32, 7, 7}, .out_channels = 64, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .constant_weights = true,
          .declare_x_shape = true}},
        {"lanes: 1x1 stride 2, 32-filter panels, batch 2",
         {.x = {2, 48, 14, 14}, .out_channels = 96, .kernel = {1, 1}, .strides = {2, 2}, .constant_weights = true,
          .declare_x_shape = true}},
        {"lanes: 120 filters (last panel part empty), dilated, no bias",
         {.x = {1, 16, 11, 12}, .out_channels = 120, .kernel = {3, 2}, .dilations = {2, 1}, .pads = {2, 0, 1, 3},
          .bias = false, .constant_weights = true, .declare_x_shape = true}},
        {"lanes: deep dilated 3x3 with rows wider than a position chunk",
         {.x = {1, 24, 5, 61}, .out_channels = 64, .kernel = {3, 3}, .dilations = {1, 2}, .pads = {1, 2, 1, 2},
          .constant_weights = true, .declare_x_shape = true}},
        // 3x3 stride-1 layers with enough outputs go to Winograd F(2x2, 3x3) (util/winograd.h) on the same CPUs.
        {"winograd: 14x14, 64 filters",
         {.x = {1, 32, 14, 14}, .out_channels = 64, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .constant_weights = true,
          .declare_x_shape = true}},
        {"winograd: odd output sizes, asymmetric pads, 32 filters",
         {.x = {1, 16, 23, 25}, .out_channels = 32, .kernel = {3, 3}, .pads = {1, 0, 0, 2}, .constant_weights = true,
          .declare_x_shape = true}},
        {"winograd: batch 2, tile rows wider than a vector, many blocks",
         {.x = {2, 40, 30, 40}, .out_channels = 64, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .constant_weights = true,
          .declare_x_shape = true}},
        {"winograd: one block split across the pool, no bias",
         {.x = {1, 32, 6, 24}, .out_channels = 64, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .bias = false,
          .constant_weights = true, .declare_x_shape = true}},
        // Shallow 1x1 layers of 28x28 and up run on the pointwise kernel (util/pointwise_conv.h) on the same CPUs.
        {"pointwise: 96 filters, 28x28",
         {.x = {1, 16, 28, 28}, .out_channels = 96, .kernel = {1, 1}, .constant_weights = true,
          .declare_x_shape = true}},
        {"pointwise: batch 2, 20 filters (a part block), whole panels",
         {.x = {2, 24, 16, 40}, .out_channels = 20, .kernel = {1, 1}, .constant_weights = true,
          .declare_x_shape = true}},
        {"pointwise: a part panel at the end, no bias",
         {.x = {1, 128, 30, 30}, .out_channels = 64, .kernel = {1, 1}, .bias = false, .constant_weights = true,
          .declare_x_shape = true}},
        {"winograd: no padding",
         {.x = {1, 8, 16, 18}, .out_channels = 96, .kernel = {3, 3}, .constant_weights = true,
          .declare_x_shape = true}},
        {"lanes: 192 filters split across the pool by rows",
         {.x = {1, 40, 9, 9}, .out_channels = 192, .kernel = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1},
          .constant_weights = true, .declare_x_shape = true}},
    };
}

TEST(FusedConvOp, EveryActivationWithAndWithoutSumAcrossCodePaths) {
    uint32_t seed = 5000;
    for (const auto& [label, c] : fused_conv_cases()) {
        SCOPED_TRACE(label + ": x " + shape_string(c.x) + " kernel " + shape_string(c.kernel) + " group " +
                     std::to_string(c.group));
        run_fused_conv_case(c, seed);
        if (HasFatalFailure()) return;
        seed += 10;
    }
}

TEST(FusedConvOp, MatchesPlainConvFollowedByTheActivation) {
    // The same inputs through Conv and through FusedConv without activation or Z: identical results.
    const ConvCase c{.x = {1, 16, 20, 20}, .out_channels = 24, .kernel = {3, 3}, .pads = {1, 1, 1, 1}};
    const Shape w_shape{24, 16, 3, 3};
    const auto x = random_values<float>(shape_size(c.x), 11), w = random_values<float>(shape_size(w_shape), 12);
    const auto b = random_values<float>(24, 13);
    NodeBuilder conv("Conv", 11);
    conv.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).output();
    conv.attr_ints("pads", c.pads);
    NodeBuilder fused("FusedConv", 1, kFusedConvDomain);
    build_fused_conv_node(fused, c, tensor<float>(w_shape, w), {}, false);
    const std::vector<ValueHandle> inputs{tensor<float>(c.x, x), tensor<float>(w_shape, w), tensor<float>({24}, b)};
    const auto plain = values_of<float>(*run_node(registry(), conv, inputs)[0]);
    const auto fused_y = values_of<float>(*run_node(registry(), fused, inputs)[0]);
    EXPECT_EQ(plain, fused_y);
}

TEST(FusedConvOp, RunsAgainWithOtherInputs) {
    // One kernel, two runs: the sum is read from each run's Z (nothing kept from the first run).
    const ConvCase c{.x = {1, 32, 7, 7},
                     .out_channels = 64,
                     .kernel = {3, 3},
                     .pads = {1, 1, 1, 1},
                     .constant_weights = true};
    const Shape w_shape{64, 32, 3, 3}, y_shape{1, 64, 7, 7};
    const auto w = random_values<float>(shape_size(w_shape), 21);
    const auto b = random_values<float>(64, 22);
    const FusedActivation relu{"Relu"};
    NodeBuilder node("FusedConv", 1, kFusedConvDomain);
    build_fused_conv_node(node, c, tensor<float>(w_shape, w), relu, true);
    auto kernel = testing::create_kernel(registry(), node);
    const RefGeometry g = conv_geometry(c);
    for (uint32_t run = 0; run < 2; ++run) {
        SCOPED_TRACE("run " + std::to_string(run));
        const auto x = random_values<float>(shape_size(c.x), 30 + run);
        const auto z = random_values<float>(shape_size(y_shape), 40 + run, -3.0, 3.0);
        const auto outputs =
            testing::run_kernel(*kernel, node, {tensor<float>(c.x, x), nullptr, tensor<float>({64}, b),
                                                tensor<float>(y_shape, z)});
        const auto conv = reference_conv(c, g, widen(x), widen(w), widen(b));
        std::vector<double> expected(conv.size());
        for (size_t i = 0; i < conv.size(); ++i) expected[i] = std::max(0.0, conv[i] + z[i]);
        expect_near_all(values_of<float>(*outputs[0]), expected, 2e-5, "FusedConv rerun");
    }
}

TEST(FusedConvOp, LaneKernelsRunAnInputOtherThanTheDeclaredOne) {
    // Created for a declared 7x7 input (the lane kernels, with row offsets made for it), run on 9x9 and 7x7.
    const ConvCase declared{.x = {1, 32, 7, 7},
                            .out_channels = 64,
                            .kernel = {3, 3},
                            .pads = {1, 1, 1, 1},
                            .constant_weights = true,
                            .declare_x_shape = true};
    const Shape w_shape{64, 32, 3, 3};
    const auto w = random_values<float>(shape_size(w_shape), 23);
    const auto b = random_values<float>(64, 24);
    NodeBuilder node("FusedConv", 1, kFusedConvDomain);
    build_fused_conv_node(node, declared, tensor<float>(w_shape, w), FusedActivation{}, false);
    auto kernel = testing::create_kernel(registry(), node);
    for (const int64_t size : {9, 7}) {
        SCOPED_TRACE("input " + std::to_string(size) + "x" + std::to_string(size));
        ConvCase c = declared;
        c.x = {1, 32, size, size};
        const auto x = random_values<float>(shape_size(c.x), 50 + static_cast<uint32_t>(size));
        const auto outputs = testing::run_kernel(*kernel, node, {tensor<float>(c.x, x), nullptr, tensor<float>({64}, b)});
        const auto expected = reference_conv(c, conv_geometry(c), widen(x), widen(w), widen(b));
        expect_near_all(values_of<float>(*outputs[0]), expected, 2e-5, "FusedConv on another input size");
    }
}

// Runs `fn` and checks that it throws `E` whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error_naming(Fn&& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "no exception";
    } catch (const E& e) {
        const std::string message = e.what();
        for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "unexpected exception type: " << e.what();
    }
}

TEST(FusedConvOp, RejectsZOfAnotherShapeOrType) {
    const ConvCase c{.x = {1, 3, 6, 6}, .out_channels = 4, .kernel = {3, 3}, .pads = {1, 1, 1, 1}};
    const Shape w_shape{4, 3, 3, 3};
    const auto x = random_values<float>(shape_size(c.x), 1), w = random_values<float>(shape_size(w_shape), 2);
    const auto b = random_values<float>(4, 3);
    for (const Shape& z_shape : std::vector<Shape>{{1, 4, 6, 7}, {1, 4, 1, 1}, {4, 6, 6}, {1, 24, 6}, {2, 4, 6, 6}}) {
        SCOPED_TRACE("Z " + shape_string(z_shape));
        NodeBuilder node("FusedConv", 1, kFusedConvDomain);
        build_fused_conv_node(node, c, tensor<float>(w_shape, w), {"Relu"}, true);
        const std::vector<ValueHandle> inputs{tensor<float>(c.x, x), tensor<float>(w_shape, w), tensor<float>({4}, b),
                                              tensor<float>(z_shape, std::vector<float>(shape_size(z_shape)))};
        expect_error_naming<KernelError>([&] { run_node(registry(), node, inputs); },
                                         {"FusedConv", "Z " + shape_string(z_shape), shape_string({1, 4, 6, 6})});
    }
    // A double Z for a float convolution (the node's types left undeclared so that the kernel sees it).
    NodeBuilder node("FusedConv", 1, kFusedConvDomain);
    node.input().input().input().input().output().attr_ints("pads", c.pads);
    expect_error_naming<KernelError>(
        [&] {
            run_node(registry(), node,
                     {tensor<float>(c.x, x), tensor<float>(w_shape, w), tensor<float>({4}, b),
                      tensor<double>({1, 4, 6, 6}, std::vector<double>(144))});
        },
        {"FusedConv", "Z"});
}

TEST(FusedConvOp, RejectsUnknownActivationsAndParameterCountsAtCreation) {
    const std::vector<std::pair<FusedActivation, std::vector<std::string>>> bad{
        {{"Gelu"}, {"FusedConv", "Gelu"}},
        {{"relu"}, {"FusedConv", "relu"}},
        {{"Softplus", {1.0f}}, {"FusedConv", "Softplus"}},
        {{"LeakyRelu"}, {"FusedConv", "LeakyRelu", "1", "got 0"}},
        {{"Clip", {0.0f}}, {"FusedConv", "Clip", "2", "got 1"}},
        {{"HardSigmoid", {0.2f, 0.5f, 1.0f}}, {"FusedConv", "HardSigmoid", "2", "got 3"}},
    };
    const ConvCase c{.x = {1, 2, 5, 5}, .out_channels = 3, .kernel = {3, 3}};
    for (const auto& [act, parts] : bad) {
        SCOPED_TRACE("activation " + act.name + " with " + std::to_string(act.params.size()) + " params");
        NodeBuilder node("FusedConv", 1, kFusedConvDomain);
        build_fused_conv_node(node, c, tensor<float>({3, 2, 3, 3}, std::vector<float>(54)), act, false);
        // At kernel creation, before any run.
        expect_error_naming<KernelError>([&] { testing::create_kernel(registry(), node); }, parts);
    }
}

TEST(FusedConvOp, IsFloat32Only) {
    // The registration accepts float32 only: a double FusedConv finds no kernel (the fusion never makes one).
    NodeBuilder node("FusedConv", 1, kFusedConvDomain);
    node.input(TESS_ELEMENT_FLOAT64).input(TESS_ELEMENT_FLOAT64).output(TESS_ELEMENT_FLOAT64);
    EXPECT_THROW(testing::create_kernel(registry(), node), std::runtime_error);
    NodeBuilder f32("FusedConv", 1, kFusedConvDomain);
    f32.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_FLOAT32);
    EXPECT_NO_THROW(testing::create_kernel(registry(), f32));
}

// ---- ConvTranspose --------------------------------------------------------------------------------------------

TEST(ConvTransposeOp, AttributeCombinations) {
    std::vector<ConvTransposeCase> cases{
        {.x = {1, 2, 3, 3}, .out_channels = 3, .kernel = {3, 3}},
        {.x = {2, 2, 4, 3}, .out_channels = 4, .kernel = {3, 2}, .group = 1, .strides = {3, 2}, .pads = {1, 0, 1, 1}},
        {.x = {1, 4, 3, 4},
         .out_channels = 6,
         .kernel = {2, 3},
         .group = 2,
         .strides = {2, 2},
         .dilations = {2, 1},
         .output_padding = {1, 1}},
        {.x = {1, 2, 3, 3},
         .out_channels = 2,
         .kernel = {3, 3},
         .group = 1,
         .strides = {3, 2},
         .output_shape = {10, 8}},  // output_shape larger than full
        {.x = {1, 2, 5, 5},
         .out_channels = 2,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .output_shape = {8, 9}},  // output_shape smaller: derived pads
        {.x = {1, 2, 3, 4},
         .out_channels = 2,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .auto_pad = "SAME_UPPER"},
        {.x = {1, 2, 3, 4},
         .out_channels = 2,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .auto_pad = "SAME_LOWER"},
        {.x = {1, 2, 3, 4},
         .out_channels = 2,
         .kernel = {3, 3},
         .group = 1,
         .strides = {2, 2},
         .auto_pad = "SAME_UPPER",
         .bias = true,
         .opset = 1},  // opset-1 split
        {.x = {1, 3, 7},
         .out_channels = 2,
         .kernel = {3},
         .group = 1,
         .strides = {2},
         .dilations = {2},
         .pads = {1, 0}},
        {.x = {1, 2, 3, 4, 2},
         .out_channels = 2,
         .kernel = {2, 3, 2},
         .group = 2,
         .strides = {2, 1, 2},
         .pads = {0, 1, 0, 0, 1, 1}},
        {.x = {1, 16, 14, 14},
         .out_channels = 8,
         .kernel = {4, 4},
         .group = 1,
         .strides = {2, 2},
         .pads = {1, 1, 1, 1},
         .bias = false},
    };
    uint32_t seed = 3000;
    for (const auto& c : cases) {
        SCOPED_TRACE("x " + shape_string(c.x) + " kernel " + shape_string(c.kernel));
        run_conv_transpose_case(c, seed);
        seed += 10;
    }
}

// ---- Pools ----------------------------------------------------------------------------------------------------

struct PoolCase {
    Shape x{};
    Shape kernel{};
    Shape strides{}, dilations{}, pads{};
    bool ceil_mode = false;
    bool count_include_pad = false;
    std::string auto_pad{};
};

struct PoolGeometry {
    Shape out, pads_begin, pads_end, strides, dilations;
};

PoolGeometry pool_geometry(const PoolCase& c) {
    const size_t rank = c.kernel.size();
    PoolGeometry g;
    g.strides = c.strides;
    g.dilations = c.dilations;
    if (g.strides.empty()) g.strides.assign(rank, 1);
    if (g.dilations.empty()) g.dilations.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t in = c.x[d + 2], s = g.strides[d], span = (c.kernel[d] - 1) * g.dilations[d] + 1;
        if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
            const int64_t out = (in + s - 1) / s;
            const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in);
            const int64_t pb = c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
            g.out.push_back(out);
            g.pads_begin.push_back(pb);
            g.pads_end.push_back(total - pb);
            continue;
        }
        const int64_t pb = c.pads.empty() ? 0 : c.pads[d], pe = c.pads.empty() ? 0 : c.pads[d + rank];
        const double exact = static_cast<double>(in + pb + pe - span) / s + 1;
        int64_t out = static_cast<int64_t>(c.ceil_mode ? std::ceil(exact) : std::floor(exact));
        if (c.ceil_mode && (out - 1) * s >= in + pb) --out;
        g.out.push_back(out);
        g.pads_begin.push_back(pb);
        g.pads_end.push_back(pe);
    }
    return g;
}

enum class RefPool { Max, Average, Lp };

// Returns values and (for Max) flat indices.
std::pair<std::vector<double>, std::vector<int64_t>> reference_pool(const PoolCase& c, const PoolGeometry& g,
                                                                    const std::vector<double>& x, RefPool kind,
                                                                    double p, bool column_major) {
    const Shape in(c.x.begin() + 2, c.x.end());
    const int64_t planes = c.x[0] * c.x[1], in_size = shape_size(in), out_size = shape_size(g.out);
    const int64_t k_size = shape_size(c.kernel);
    std::vector<double> y;
    std::vector<int64_t> idx;
    for (int64_t pl = 0; pl < planes; ++pl) {
        for (int64_t o = 0; o < out_size; ++o) {
            const auto op = unravel(o, g.out);
            double best = -std::numeric_limits<double>::infinity(), sum = 0;
            int64_t best_at = -1, valid = 0, padded = 0;
            for (int64_t k = 0; k < k_size; ++k) {
                const auto kp = unravel(k, c.kernel);
                std::vector<int64_t> ip(in.size());
                bool inside = true, in_padded = true;
                for (size_t d = 0; d < in.size(); ++d) {
                    ip[d] = op[d] * g.strides[d] - g.pads_begin[d] + kp[d] * g.dilations[d];
                    inside = inside && ip[d] >= 0 && ip[d] < in[d];
                    in_padded = in_padded && ip[d] >= -g.pads_begin[d] && ip[d] < in[d] + g.pads_end[d];
                }
                if (in_padded) ++padded;
                if (!inside) continue;
                ++valid;
                const double v = x[pl * in_size + ravel(ip, in)];
                sum += kind == RefPool::Lp ? std::pow(std::abs(v), p) : v;
                if (v > best) {
                    best = v;
                    int64_t local = 0;
                    if (column_major) {
                        int64_t mult = 1;
                        for (size_t d = 0; d < in.size(); ++d) {
                            local += ip[d] * mult;
                            mult *= in[d];
                        }
                    } else {
                        local = ravel(ip, in);
                    }
                    best_at = pl * in_size + local;
                }
            }
            if (kind == RefPool::Max) {
                y.push_back(best);
                idx.push_back(best_at);
            } else if (kind == RefPool::Average) {
                y.push_back(sum / static_cast<double>(c.count_include_pad ? padded : valid));
            } else {
                y.push_back(std::pow(sum, 1.0 / p));
            }
        }
    }
    return {y, idx};
}

void add_pool_attributes(NodeBuilder& node, const PoolCase& c) {
    node.attr_ints("kernel_shape", c.kernel);
    if (!c.strides.empty()) node.attr_ints("strides", c.strides);
    if (!c.dilations.empty()) node.attr_ints("dilations", c.dilations);
    if (!c.pads.empty()) node.attr_ints("pads", c.pads);
    if (c.ceil_mode) node.attr_int("ceil_mode", 1);
    if (c.count_include_pad) node.attr_int("count_include_pad", 1);
    if (!c.auto_pad.empty()) node.attr_string("auto_pad", c.auto_pad);
}

const std::vector<PoolCase>& pool_cases() {
    static const std::vector<PoolCase> cases{
        {.x = {1, 2, 7, 8}, .kernel = {3, 3}},
        {.x = {2, 3, 9, 9}, .kernel = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1}},
        {.x = {1, 2, 10, 7}, .kernel = {3, 2}, .strides = {2, 3}, .pads = {0, 1, 2, 0}, .ceil_mode = true},
        {.x = {1, 1, 9, 9},
         .kernel = {3, 3},
         .strides = {3, 3},
         .pads = {1, 1, 1, 1},
         .ceil_mode = true,
         .count_include_pad = true},
        {.x = {1, 2, 9, 11},
         .kernel = {2, 3},
         .strides = {1, 2},
         .dilations = {2, 2},
         .pads = {1, 1, 0, 1},
         .ceil_mode = true},
        {.x = {1, 2, 7, 8}, .kernel = {2, 2}, .ceil_mode = false, .count_include_pad = false, .auto_pad = "SAME_UPPER"},
        {.x = {1, 2, 7, 8},
         .kernel = {3, 2},
         .strides = {2, 3},
         .ceil_mode = false,
         .count_include_pad = true,
         .auto_pad = "SAME_LOWER"},
        {.x = {2, 3, 13}, .kernel = {4}, .strides = {3}, .dilations = {2}, .pads = {1, 2}, .ceil_mode = true},
        {.x = {1, 2, 7, 6, 8},
         .kernel = {3, 2, 3},
         .strides = {2, 1, 2},
         .dilations = {1, 2, 2},
         .pads = {1, 0, 1, 1, 1, 0},
         .ceil_mode = true,
         .count_include_pad = true},
        {.x = {1, 64, 112, 112}, .kernel = {3, 3}, .strides = {2, 2}, .pads = {1, 1, 1, 1}},
        // Windows that are the whole plane (ResNet's final 7x7 average pool) reduce each plane directly.
        {.x = {1, 40, 7, 7}, .kernel = {7, 7}},
        {.x = {2, 3, 37}, .kernel = {37}, .strides = {2}},
    };
    return cases;
}

TEST(PoolOps, MaxPoolWithIndices) {
    uint32_t seed = 4000;
    for (const auto& c : pool_cases()) {
        for (int order = 0; order < 2; ++order) {
            SCOPED_TRACE("x " + shape_string(c.x) + " kernel " + shape_string(c.kernel));
            const auto x = random_values<float>(shape_size(c.x), seed++);
            NodeBuilder node("MaxPool", 12);
            node.input(TESS_ELEMENT_FLOAT32).output().output(TESS_ELEMENT_INT64).attr_int("storage_order", order);
            add_pool_attributes(node, c);
            const auto outputs = run_node(registry(), node, {tensor<float>(c.x, x)});
            const PoolGeometry g = pool_geometry(c);
            const auto [expected, indices] = reference_pool(c, g, widen(x), RefPool::Max, 0, order == 1);
            EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], c.x[1]}, g.out));
            expect_near_all(values_of<float>(*outputs[0]), expected, 0.0, "MaxPool");
            EXPECT_EQ(values_of<int64_t>(*outputs[1]), indices);
        }
    }
}

// Without the Indices output, float 2-D MaxPool with column stride 1 or 2 runs on the direct AVX-512 kernel
// (util/window2d.h); every case is checked against the plain reference, whichever path it takes.
TEST(PoolOps, MaxPoolFloatWithoutIndices) {
    uint32_t seed = 4500;
    std::vector<PoolCase> cases = pool_cases();
    cases.push_back({.x = {1, 3, 55, 55}, .kernel = {3, 3}, .strides = {2, 2}, .ceil_mode = true});
    cases.push_back({.x = {2, 5, 40, 37}, .kernel = {3, 3}, .strides = {1, 1}, .pads = {1, 1, 1, 1}});
    cases.push_back({.x = {1, 2, 33, 70}, .kernel = {2, 5}, .strides = {2, 2}, .pads = {0, 2, 1, 2}});
    // SqueezeNet's pools on the 3x3 tiles: one column vector in 8-row tiles, and two pairs of vectors.
    cases.push_back({.x = {1, 40, 27, 27}, .kernel = {3, 3}, .strides = {2, 2}, .ceil_mode = true});
    cases.push_back({.x = {1, 6, 111, 111}, .kernel = {3, 3}, .strides = {2, 2}, .ceil_mode = true});
    for (const auto& c : cases) {
        SCOPED_TRACE("x " + shape_string(c.x) + " kernel " + shape_string(c.kernel));
        const auto x = random_values<float>(shape_size(c.x), seed++);
        NodeBuilder node("MaxPool", 12);
        node.input(TESS_ELEMENT_FLOAT32).output();
        add_pool_attributes(node, c);
        const auto outputs = run_node(registry(), node, {tensor<float>(c.x, x)});
        const PoolGeometry g = pool_geometry(c);
        const auto expected = reference_pool(c, g, widen(x), RefPool::Max, 0, false).first;
        EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], c.x[1]}, g.out));
        expect_near_all(values_of<float>(*outputs[0]), expected, 0.0, "MaxPool");
    }
}

TEST(PoolOps, MaxPoolUint8WithoutIndices) {
    const PoolCase c{.x = {1, 3, 9, 9}, .kernel = {5, 5}, .pads = {2, 2, 2, 2}};
    const auto x = random_values<uint8_t>(shape_size(c.x), 5, 0, 255);
    NodeBuilder node("MaxPool", 12);
    node.input(TESS_ELEMENT_UINT8).output();
    add_pool_attributes(node, c);
    const auto outputs = run_node(registry(), node, {tensor<uint8_t>(c.x, x)});
    const auto expected = reference_pool(c, pool_geometry(c), widen(x), RefPool::Max, 0, false).first;
    expect_near_all(values_of<uint8_t>(*outputs[0]), expected, 0.0, "MaxPool uint8");
}

TEST(PoolOps, AverageAndLpPool) {
    uint32_t seed = 5000;
    for (const auto& c : pool_cases()) {
        SCOPED_TRACE("x " + shape_string(c.x) + " kernel " + shape_string(c.kernel));
        const auto x = random_values<float>(shape_size(c.x), seed++);
        const PoolGeometry g = pool_geometry(c);
        NodeBuilder avg("AveragePool", 19);
        avg.input(TESS_ELEMENT_FLOAT32).output();
        add_pool_attributes(avg, c);
        auto outputs = run_node(registry(), avg, {tensor<float>(c.x, x)});
        EXPECT_EQ(dims_of(outputs[0]), concat({c.x[0], c.x[1]}, g.out));
        expect_near_all(values_of<float>(*outputs[0]), reference_pool(c, g, widen(x), RefPool::Average, 0, false).first,
                        1e-5, "AveragePool");

        if (c.count_include_pad) continue;  // LpPool has no count_include_pad
        for (int64_t p : {1, 2, 3}) {
            NodeBuilder lp("LpPool", 18);
            lp.input(TESS_ELEMENT_FLOAT32).output().attr_int("p", p);
            add_pool_attributes(lp, c);
            outputs = run_node(registry(), lp, {tensor<float>(c.x, x)});
            expect_near_all(values_of<float>(*outputs[0]), reference_pool(c, g, widen(x), RefPool::Lp, p, false).first,
                            1e-5, "LpPool p=" + std::to_string(p));
        }
    }
}

TEST(PoolOps, GlobalPools) {
    const Shape shape{2, 3, 5, 4};
    const auto x = random_values<float>(shape_size(shape), 11);
    const int64_t plane = 20;
    std::vector<double> mean, max, l2;
    for (int64_t p = 0; p < 6; ++p) {
        double s = 0, m = -1e30, q = 0;
        for (int64_t i = 0; i < plane; ++i) {
            s += x[p * plane + i];
            m = std::max<double>(m, x[p * plane + i]);
            q += double(x[p * plane + i]) * x[p * plane + i];
        }
        mean.push_back(s / plane);
        max.push_back(m);
        l2.push_back(std::sqrt(q));
    }
    const std::pair<const char*, const std::vector<double>*> ops[] = {
        {"GlobalAveragePool", &mean}, {"GlobalMaxPool", &max}, {"GlobalLpPool", &l2}};
    for (const auto& [op, expected] : ops) {
        NodeBuilder node(op, 13);
        node.input(TESS_ELEMENT_FLOAT32).output();
        const auto outputs = run_node(registry(), node, {tensor<float>(shape, x)});
        EXPECT_EQ(dims_of(outputs[0]), (Shape{2, 3, 1, 1}));
        expect_near_all(values_of<float>(*outputs[0]), *expected, 1e-5, op);
    }
}

// ---- Normalization --------------------------------------------------------------------------------------------

TEST(NormalizationOps, BatchNormInferenceAndTraining) {
    const Shape shape{2, 3, 4, 5};
    const auto x = random_values<float>(shape_size(shape), 21);
    const auto scale = random_values<float>(3, 22), bias = random_values<float>(3, 23);
    const auto mean = random_values<float>(3, 24), var = random_values<float>(3, 25, 0.5, 2.0);
    const float epsilon = 1e-3f, momentum = 0.8f;
    std::vector<ValueHandle> inputs{tensor<float>(shape, x), tensor<float>({3}, scale), tensor<float>({3}, bias),
                                    tensor<float>({3}, mean), tensor<float>({3}, var)};
    NodeBuilder inference("BatchNormalization", 15);
    for (int i = 0; i < 5; ++i) inference.input(TESS_ELEMENT_FLOAT32);
    inference.output().attr_float("epsilon", epsilon);
    auto outputs = run_node(registry(), inference, inputs);
    std::vector<double> expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const size_t c = (i / 20) % 3;
        expected[i] = (x[i] - mean[c]) / std::sqrt(double(var[c]) + epsilon) * scale[c] + bias[c];
    }
    expect_near_all(values_of<float>(*outputs[0]), expected, 1e-5, "BatchNormalization");

    NodeBuilder training("BatchNormalization", 15);
    for (int i = 0; i < 5; ++i) training.input(TESS_ELEMENT_FLOAT32);
    training.output()
        .output()
        .output()
        .attr_float("epsilon", epsilon)
        .attr_float("momentum", momentum)
        .attr_int("training_mode", 1);
    outputs = run_node(registry(), training, inputs);
    std::vector<double> batch_mean(3, 0), batch_var(3, 0);
    for (size_t i = 0; i < x.size(); ++i) batch_mean[(i / 20) % 3] += x[i] / 40.0;
    for (size_t i = 0; i < x.size(); ++i) {
        const size_t c = (i / 20) % 3;
        batch_var[c] += (x[i] - batch_mean[c]) * (x[i] - batch_mean[c]) / 40.0;
    }
    for (size_t i = 0; i < x.size(); ++i) {
        const size_t c = (i / 20) % 3;
        expected[i] = (x[i] - batch_mean[c]) / std::sqrt(batch_var[c] + epsilon) * scale[c] + bias[c];
    }
    expect_near_all(values_of<float>(*outputs[0]), expected, 1e-5, "BatchNormalization training Y");
    std::vector<double> running_mean(3), running_var(3);
    for (size_t c = 0; c < 3; ++c) {
        running_mean[c] = mean[c] * momentum + batch_mean[c] * (1 - momentum);
        running_var[c] = var[c] * momentum + batch_var[c] * (1 - momentum);
    }
    expect_near_all(values_of<float>(*outputs[1]), running_mean, 1e-5, "running_mean");
    expect_near_all(values_of<float>(*outputs[2]), running_var, 1e-5, "running_var");
}

TEST(NormalizationOps, InstanceAndGroupNorm) {
    const Shape shape{2, 4, 3, 5};
    const auto x = random_values<float>(shape_size(shape), 31);
    const auto scale = random_values<float>(4, 32), bias = random_values<float>(4, 33);
    const float epsilon = 1e-2f;
    for (int64_t groups : {4, 2, 1}) {
        const bool instance = groups == 4;
        NodeBuilder node(instance ? "InstanceNormalization" : "GroupNormalization", 21);
        node.input(TESS_ELEMENT_FLOAT32)
            .input(TESS_ELEMENT_FLOAT32)
            .input(TESS_ELEMENT_FLOAT32)
            .output()
            .attr_float("epsilon", epsilon);
        if (!instance) node.attr_int("num_groups", groups);
        const auto outputs =
            run_node(registry(), node, {tensor<float>(shape, x), tensor<float>({4}, scale), tensor<float>({4}, bias)});
        const int64_t block = 60 / groups;
        std::vector<double> expected(x.size());
        for (int64_t b = 0; b < 2 * groups; ++b) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < block; ++i) m += x[b * block + i] / double(block);
            for (int64_t i = 0; i < block; ++i) v += (x[b * block + i] - m) * (x[b * block + i] - m) / double(block);
            for (int64_t i = 0; i < block; ++i) {
                const int64_t flat = b * block + i, c = (flat / 15) % 4;
                expected[flat] = (x[flat] - m) / std::sqrt(v + epsilon) * scale[c] + bias[c];
            }
        }
        expect_near_all(values_of<float>(*outputs[0]), expected, 1e-5, node.view().op_type);
    }
}

TEST(NormalizationOps, LayerNormAxesAndStatistics) {
    const Shape shape{2, 3, 4};
    const auto x = random_values<float>(24, 41);
    for (int64_t axis : {-1, 1, 0}) {
        const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
        const Shape trailing(shape.begin() + a, shape.end());
        const int64_t cols = shape_size(trailing), rows = 24 / cols;
        const auto scale = random_values<float>(cols, 42), bias = random_values<float>(cols, 43);
        NodeBuilder node("LayerNormalization", 17);
        node.input(TESS_ELEMENT_FLOAT32)
            .input(TESS_ELEMENT_FLOAT32)
            .input(TESS_ELEMENT_FLOAT32)
            .output()
            .output(TESS_ELEMENT_FLOAT32)
            .output(TESS_ELEMENT_FLOAT32)
            .attr_int("axis", axis);
        const auto outputs = run_node(
            registry(), node, {tensor<float>(shape, x), tensor<float>(trailing, scale), tensor<float>(trailing, bias)});
        std::vector<double> expected(24), means, inv_stds;
        for (int64_t r = 0; r < rows; ++r) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < cols; ++i) m += x[r * cols + i] / double(cols);
            for (int64_t i = 0; i < cols; ++i) v += (x[r * cols + i] - m) * (x[r * cols + i] - m) / double(cols);
            const double inv = 1.0 / std::sqrt(v + 1e-5);
            for (int64_t i = 0; i < cols; ++i)
                expected[r * cols + i] = (x[r * cols + i] - m) * inv * scale[i] + bias[i];
            means.push_back(m);
            inv_stds.push_back(inv);
        }
        expect_near_all(values_of<float>(*outputs[0]), expected, 1e-5, "LayerNormalization");
        expect_near_all(values_of<float>(*outputs[1]), means, 1e-5, "LayerNormalization mean");
        expect_near_all(values_of<float>(*outputs[2]), inv_stds, 1e-5, "LayerNormalization inv_std");
    }
}

TEST(NormalizationOps, Lrn) {
    const Shape shape{1, 7, 3, 3};
    const auto x = random_values<float>(63, 51);
    const int64_t size = 4;
    const double alpha = 2e-4, beta = 0.75, bias = 1.5;
    NodeBuilder node("LRN", 13);
    node.input(TESS_ELEMENT_FLOAT32)
        .output()
        .attr_int("size", size)
        .attr_float("alpha", alpha)
        .attr_float("beta", beta)
        .attr_float("bias", bias);
    const auto outputs = run_node(registry(), node, {tensor<float>(shape, x)});
    std::vector<double> expected(63);
    for (int64_t c = 0; c < 7; ++c) {
        for (int64_t i = 0; i < 9; ++i) {
            double sq = 0;
            for (int64_t k = std::max<int64_t>(0, c - 1); k <= std::min<int64_t>(6, c + 2); ++k) {
                sq += double(x[k * 9 + i]) * x[k * 9 + i];
            }
            expected[c * 9 + i] = x[c * 9 + i] / std::pow(bias + alpha / size * sq, beta);
        }
    }
    expect_near_all(values_of<float>(*outputs[0]), expected, 1e-5, "LRN");
}

}  // namespace
}  // namespace tessera::cpu
