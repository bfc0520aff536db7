// The lane micro-kernels (plugins/cpu/util/lane_gemm.h) against a plain double product, over panel widths, tile
// remainders, position chunks and tabulated row offsets, and the FusedMatMulBias kernel on every path it takes
// (lane panels, packed columns, runtime weights; constant or runtime bias) against a plain reference.  Convolutions
// that reach the lane kernels through the Conv kernel are checked in test_conv_ops.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "tessera/provider.h"
#include "util/lane_gemm.h"

namespace tessera::cpu {
namespace {

using namespace testing;

TEST(LaneGemm, PanelWidthFollowsTheFilterCount) {
    EXPECT_EQ(lane_panel_width_for(64), 64);
    EXPECT_EQ(lane_panel_width_for(2048), 64);
    EXPECT_EQ(lane_panel_width_for(1000), 64);
    EXPECT_EQ(lane_panel_width_for(32), 32);
    EXPECT_EQ(lane_panel_width_for(96), 32);
    EXPECT_EQ(lane_panel_width_for(120), 32);
    EXPECT_EQ(lane_panel_width_for(160), 32);
    EXPECT_EQ(lane_panel_width_for(200), 64);
}

TEST(LaneGemm, MatchesPlainProductOverShapes) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the lane kernels need AVX-512F (or TESSERA_CPU_MAX_ISA caps them)";
    std::mt19937 rng(42);
    const int64_t filter_counts[] = {16, 32, 64, 96, 120, 128, 160, 192, 1000};
    const int64_t position_counts[] = {1, 5, 7, 13, 14, 15, 56, 57, 130};
    const int64_t depths[] = {1, 3, 70};
    for (const int64_t rows : filter_counts) {
        for (const int64_t depth : depths) {
            const std::vector<float> A = random_floats(size_t(rows * (depth + 3)), rng);  // row stride depth + 3
            const LanePackedFilters packed(A.data(), rows, depth, depth + 3);
            ASSERT_EQ(packed.panel_width(), lane_panel_width_for(rows));
            const std::vector<float> bias = random_floats(size_t(rows), rng);
            for (const int64_t count : position_counts) {
                // Row k of the column matrix starts at x + offsets[k]: shuffled, overlapping rows of one buffer.
                const int64_t span = 3 * count + 50;
                const std::vector<float> x = random_floats(size_t(span), rng);
                std::vector<int64_t> offsets(static_cast<size_t>(depth));
                std::uniform_int_distribution<int64_t> at(0, span - count);
                for (int64_t& o : offsets) o = at(rng);
                for (const bool with_bias : {false, true}) {
                    SCOPED_TRACE("filters " + std::to_string(rows) + " depth " + std::to_string(depth) +
                                 " positions " + std::to_string(count) + (with_bias ? " bias" : ""));
                    const int64_t ldy = count + 2;
                    for (int64_t p = 0; p < packed.panels(); ++p) {
                        const int64_t m0 = p * packed.panel_width();
                        const int64_t filters = std::min(packed.panel_width(), rows - m0);
                        std::vector<float> y(size_t(filters * ldy), -7.0f);
                        lane_gemm_positions(packed, p, x.data(), offsets.data(), count,
                                            with_bias ? bias.data() : nullptr, y.data(), ldy);
                        for (int64_t m = 0; m < filters; ++m) {
                            for (int64_t j = 0; j < ldy; ++j) {
                                const float got = y[size_t(m * ldy + j)];
                                if (j >= count) {
                                    ASSERT_EQ(got, -7.0f) << "wrote past the row at filter " << m0 + m;
                                    continue;
                                }
                                double expected = with_bias ? bias[size_t(m0 + m)] : 0.0;
                                for (int64_t k = 0; k < depth; ++k)
                                    expected += double(A[size_t((m0 + m) * (depth + 3) + k)]) *
                                                double(x[size_t(offsets[size_t(k)] + j)]);
                                ASSERT_NEAR(got, expected, 1e-5 * (1.0 + std::abs(expected)) * std::sqrt(double(depth)))
                                    << "filter " << m0 + m << " position " << j;
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST(LaneGemm, MatmulMatchesPlainProduct) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the lane kernels need AVX-512F (or TESSERA_CPU_MAX_ISA caps them)";
    std::mt19937 rng(7);
    ThreadPool pool(2);
    const int64_t row_counts[] = {1, 6, 7, 8, 15, 29};
    const int64_t column_counts[] = {16, 32, 64, 100, 200};
    const int64_t depths[] = {0, 1, 40, 1030};
    for (const int64_t N : column_counts) {
        for (const int64_t K : depths) {
            const int64_t ldb = N + 5;
            const std::vector<float> B = random_floats(size_t(std::max<int64_t>(K, 1) * ldb), rng);
            const LanePackedFilters packed = LanePackedFilters::from_depth_major(B.data(), N, K, ldb);
            for (const int64_t M : row_counts) {
                SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(K) + " N " + std::to_string(N));
                const int64_t lda = K + 3, ldc = N + 2;
                const std::vector<float> A = random_floats(size_t(M * lda), rng);
                std::vector<float> C(size_t(M * ldc), -7.0f);
                lane_matmul(pool, A.data(), M, lda, packed, C.data(), ldc);
                for (int64_t m = 0; m < M; ++m) {
                    for (int64_t n = 0; n < ldc; ++n) {
                        const float got = C[size_t(m * ldc + n)];
                        if (n >= N) {
                            ASSERT_EQ(got, -7.0f) << "wrote past row " << m;
                            continue;
                        }
                        double expected = 0.0;
                        for (int64_t k = 0; k < K; ++k)
                            expected += double(A[size_t(m * lda + k)]) * double(B[size_t(k * ldb + n)]);
                        ASSERT_NEAR(got, expected, 1e-5 * (1.0 + std::abs(expected)) * std::sqrt(double(K + 1)))
                            << "row " << m << " column " << n;
                    }
                }
            }
        }
    }
}

// One LanePackedFilters re-packed for operands of several shapes (growing, shrinking, growing again), as attention
// packs each head's keys and values into the same memory: every product against a plain one.
TEST(LaneGemm, RepackedFiltersMatchPlainProducts) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the lane kernels need AVX-512F (or TESSERA_CPU_MAX_ISA caps them)";
    std::mt19937 rng(11);
    struct Shape3 {
        int64_t M, K, N;
    };
    const Shape3 shapes[] = {{7, 24, 40}, {128, 64, 128}, {5, 3, 17}, {33, 130, 64}, {1, 16, 200}};
    LanePackedFilters as_filters, as_depth_major;
    for (const Shape3& s : shapes) {
        SCOPED_TRACE("M " + std::to_string(s.M) + " K " + std::to_string(s.K) + " N " + std::to_string(s.N));
        const int64_t lda = s.K + 3, ldw = s.K + 1, ldb = s.N + 2, ldc = s.N + 4;
        const std::vector<float> A = random_floats(size_t(s.M * lda), rng);
        const std::vector<float> W = random_floats(size_t(s.N * ldw), rng);  // [N, K]: filters
        const std::vector<float> B = random_floats(size_t(s.K * ldb), rng);  // [K, N]: depth-major
        as_filters.assign(W.data(), s.N, s.K, ldw);
        as_depth_major.assign_depth_major(B.data(), s.N, s.K, ldb);
        for (int pass = 0; pass < 2; ++pass) {
            const LanePackedFilters& packed = pass == 0 ? as_filters : as_depth_major;
            std::vector<float> C(size_t(s.M * ldc), -7.0f);
            lane_matmul_serial(A.data(), s.M, lda, packed, C.data(), ldc);
            for (int64_t m = 0; m < s.M; ++m) {
                for (int64_t n = 0; n < ldc; ++n) {
                    const float got = C[size_t(m * ldc + n)];
                    if (n >= s.N) {
                        ASSERT_EQ(got, -7.0f) << "wrote past row " << m;
                        continue;
                    }
                    double expected = 0.0;
                    for (int64_t k = 0; k < s.K; ++k) {
                        const float w = pass == 0 ? W[size_t(n * ldw + k)] : B[size_t(k * ldb + n)];
                        expected += double(A[size_t(m * lda + k)]) * double(w);
                    }
                    ASSERT_NEAR(got, expected, 1e-5 * (1.0 + std::abs(expected)) * std::sqrt(double(s.K + 1)))
                        << (pass == 0 ? "filters" : "depth-major") << " row " << m << " column " << n;
                }
            }
        }
    }
}

double reference_activation(const std::string& name, double v) {
    if (name.empty()) return v;
    if (name == "Relu") return v > 0 ? v : 0;
    if (name == "Sigmoid") return 1 / (1 + std::exp(-v));
    if (name == "Tanh") return std::tanh(v);
    if (name == "Gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    if (name == "GeluTanh") return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    if (name == "Clip") return std::min(std::max(v, -0.2), 0.3);
    if (name == "LeakyRelu") return v >= 0 ? v : 0.1 * v;
    ADD_FAILURE() << "no reference for " << name;
    return v;
}

TEST(FusedMatMulBiasOp, EveryActivationOnEveryPath) {
    static const KernelRegistry reg = [] {
        KernelRegistry r;
        register_gemm_kernels(r);
        return r;
    }();
    std::mt19937 rng(11);
    struct Shape3 {
        Shape a;
        int64_t N;
    };
    // Lane panels (64, 96), packed columns (40), 1000 wide; batched and 2-D A.
    const Shape3 shapes[] = {{{2, 5, 33}, 64}, {{7, 20}, 96}, {{3, 17}, 40}, {{2, 70}, 1000}};
    const std::string activations[] = {"", "Relu", "Sigmoid", "Tanh", "Gelu", "GeluTanh", "Clip", "LeakyRelu"};
    for (const auto& [a_shape, N] : shapes) {
        const int64_t K = a_shape.back(), rows = shape_size(a_shape) / K;
        const std::vector<float> A = random_floats(size_t(shape_size(a_shape)), rng);
        const std::vector<float> B = random_floats(size_t(K * N), rng);
        const std::vector<float> bias = random_floats(size_t(N), rng);
        for (const std::string& act : activations) {
            for (const int constness : {0, 1, 2}) {  // 0: runtime B and bias; 1: constant B; 2: both constant
                SCOPED_TRACE("A " + shape_string(a_shape) + " N " + std::to_string(N) + " activation '" + act +
                             "' constness " + std::to_string(constness));
                NodeBuilder node("FusedMatMulBias", 1, TESS_FUSED_OPS_DOMAIN);
                ValueHandle b_value = tensor<float>({K, N}, B), bias_value = tensor<float>({N}, bias);
                node.input(TESS_ELEMENT_FLOAT32);
                if (constness >= 1) node.constant_input(b_value);
                else node.input(TESS_ELEMENT_FLOAT32);
                if (constness == 2) node.constant_input(bias_value);
                else node.input(TESS_ELEMENT_FLOAT32);
                node.output(TESS_ELEMENT_FLOAT32);
                if (act == "GeluTanh") {
                    node.attr_string("activation", "Gelu").attr_string("approximate", "tanh");
                } else if (!act.empty()) {
                    node.attr_string("activation", act);
                    if (act == "Clip") node.attr_floats("activation_params", {-0.2f, 0.3f});
                    if (act == "LeakyRelu") node.attr_floats("activation_params", {0.1f});
                }
                const auto outputs =
                    run_node(reg, node, {tensor<float>(a_shape, A), constness >= 1 ? nullptr : b_value,
                                         constness == 2 ? nullptr : bias_value});
                Shape y_shape = a_shape;
                y_shape.back() = N;
                ASSERT_EQ(outputs[0]->dims, y_shape);
                const std::vector<float> y = values_of<float>(*outputs[0]);
                for (int64_t r = 0; r < rows; ++r) {
                    for (int64_t n = 0; n < N; ++n) {
                        double v = bias[size_t(n)];
                        for (int64_t k = 0; k < K; ++k) v += double(A[size_t(r * K + k)]) * double(B[size_t(k * N + n)]);
                        const double expected = reference_activation(act, v);
                        ASSERT_NEAR(y[size_t(r * N + n)], expected, 2e-5 * (1 + std::abs(expected)) * std::sqrt(double(K)))
                            << "row " << r << " column " << n;
                    }
                }
            }
        }
    }
}

TEST(FusedMatMulBiasOp, RejectsABiasThatIsNotTheLastAxis) {
    static const KernelRegistry reg = [] {
        KernelRegistry r;
        register_gemm_kernels(r);
        return r;
    }();
    NodeBuilder node("FusedMatMulBias", 1, TESS_FUSED_OPS_DOMAIN);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_FLOAT32);
    EXPECT_THROW(run_node(reg, node,
                          {tensor<float>({2, 3}, std::vector<float>(6)), tensor<float>({3, 4}, std::vector<float>(12)),
                           tensor<float>({2, 1}, std::vector<float>(2))}),
                 KernelError);
}

}  // namespace
}  // namespace tessera::cpu
