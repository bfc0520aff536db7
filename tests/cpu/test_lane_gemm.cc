// The lane micro-kernels (plugins/cpu/util/lane_gemm.h) against a plain double product, over panel widths, tile
// remainders, position chunks and tabulated row offsets.  Convolutions that reach them through the Conv kernel are
// checked in test_conv_gemm.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "util/lane_gemm.h"

namespace tessera::cpu {
namespace {

std::vector<float> random_floats(size_t count, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (float& f : v) f = dist(rng);
    return v;
}

TEST(LaneGemm, PanelWidthFollowsTheFilterCount) {
    EXPECT_EQ(lane_panel_width_for(64), 64);
    EXPECT_EQ(lane_panel_width_for(2048), 64);
    EXPECT_EQ(lane_panel_width_for(1000), 64);
    EXPECT_EQ(lane_panel_width_for(32), 32);
    EXPECT_EQ(lane_panel_width_for(96), 32);
    EXPECT_EQ(lane_panel_width_for(120), 32);
}

TEST(LaneGemm, MatchesPlainProductOverShapes) {
    if (!lane_gemm_supported()) GTEST_SKIP() << "the lane kernels need AVX-512F (or TESSERA_CPU_MAX_ISA caps them)";
    std::mt19937 rng(42);
    const int64_t filter_counts[] = {16, 32, 64, 96, 120, 128, 192, 1000};
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

}  // namespace
}  // namespace tessera::cpu
