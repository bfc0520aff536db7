// The Gemm and MatMul kernels and the gemm utility against naive references (op_test_reference.h), on random
// inputs and many attribute combinations.
#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

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

}  // namespace
}  // namespace tessera::cpu
