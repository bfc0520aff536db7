// Tests of the broadcasting and axis helpers (util/broadcast.h, util/axes.h), the vectorized float math
// (util/vec_math.h) and the elementwise, activation, softmax and reduction kernels, against plain reference loops
// written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_harness.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/broadcast.h"
#include "util/element_convert.h"  // element_type_of<fp::Half>
#include "util/float_formats.h"
#include "util/vec_math.h"

namespace tessera::cpu {
namespace {

using testing::NodeBuilder;
using testing::run_node;
using testing::tensor;
using testing::ValueHandle;
using testing::values_of;

const KernelRegistry& registry() {
    return testing::registry_with<register_elementwise_kernels, register_activation_kernels, register_softmax_kernels,
                                  register_reduce_kernels>();
}

// These tests draw from [-3, 3] unless told otherwise.
template <typename T>
std::vector<T> random_values(int64_t count, uint32_t seed, double lo = -3.0, double hi = 3.0) {
    return testing::random_values<T>(count, seed, lo, hi);
}

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& shape) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    return strides;
}

// The element of `in_shape` that output index `out_index` reads under numpy broadcasting.
int64_t broadcast_source(const Shape& out_shape, const Shape& in_shape, int64_t out_index) {
    const auto out_strides = strides_of(out_shape);
    const auto in_strides = strides_of(in_shape);
    const size_t offset = out_shape.size() - in_shape.size();
    int64_t source = 0;
    for (size_t d = 0; d < out_shape.size(); ++d) {
        const int64_t coordinate = (out_index / out_strides[d]) % out_shape[d];
        if (d >= offset && in_shape[d - offset] != 1) source += coordinate * in_strides[d - offset];
    }
    return source;
}

Shape random_shape(std::mt19937& gen, size_t max_rank, int64_t max_dim) {
    std::uniform_int_distribution<size_t> rank_dist(0, max_rank);
    std::uniform_int_distribution<int64_t> dim_dist(1, max_dim);
    Shape s(rank_dist(gen));
    for (auto& d : s) d = dim_dist(gen);
    return s;
}

// A shape that broadcasts with `full`: a suffix of it with some dimensions replaced by 1.
Shape broadcastable_shape(std::mt19937& gen, const Shape& full) {
    std::uniform_int_distribution<size_t> rank_dist(0, full.size());
    const size_t rank = rank_dist(gen);
    Shape s(full.end() - static_cast<std::ptrdiff_t>(rank), full.end());
    for (auto& d : s) {
        if (gen() % 3 == 0) d = 1;
    }
    return s;
}

template <typename T> void expect_close(const std::vector<T>& got, const std::vector<T>& want, double tol = 1e-5) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(want[i])) {
                EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
            } else if (std::isinf(want[i])) {
                EXPECT_EQ(got[i], want[i]) << "at " << i;
            } else {
                EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(static_cast<double>(want[i])))) << "at " << i;
            }
        } else {
            EXPECT_EQ(got[i], want[i]) << "at " << i;
        }
    }
}

// ---- Broadcast helper ----------------------------------------------------------------------------------------

TEST(Broadcast, ShapesFollowNumpy) {
    EXPECT_EQ(broadcast_shapes("t", Shape{2, 3, 4}, Shape{4}), (Shape{2, 3, 4}));
    EXPECT_EQ(broadcast_shapes("t", Shape{2, 1, 4}, Shape{3, 1}), (Shape{2, 3, 4}));
    EXPECT_EQ(broadcast_shapes("t", Shape{}, Shape{5}), (Shape{5}));
    EXPECT_EQ(broadcast_shapes("t", Shape{0, 1}, Shape{1, 3}), (Shape{0, 3}));
    EXPECT_THROW(broadcast_shapes("t", Shape{2, 3}, Shape{4}), KernelError);
    EXPECT_THROW(broadcast_shapes("t", Shape{2, 0}, Shape{2, 3}), KernelError);
}

TEST(Broadcast, PlanCollapsesDimensions) {
    // Per-channel bias: [N, C, H, W] op [C, 1, 1] -> runs of H*W with the bias repeated.
    const Shape x{2, 3, 4, 5}, bias{3, 1, 1};
    const BroadcastPlan plan("t", {&x, &bias});
    EXPECT_EQ(plan.collapsed_dims(), (std::vector<int64_t>{2, 3, 20}));
    EXPECT_EQ(plan.inner_size(), 20);
    EXPECT_TRUE(plan.inner_contiguous(0));
    EXPECT_FALSE(plan.inner_contiguous(1));
    EXPECT_EQ(plan.collapsed_strides(1), (std::vector<int64_t>{0, 1, 0}));
    EXPECT_TRUE(plan.is_full(0));
    EXPECT_FALSE(plan.is_full(1));

    // Equal shapes: one run.
    const BroadcastPlan same("t", {&x, &x});
    EXPECT_EQ(same.collapsed_dims(), (std::vector<int64_t>{120}));
    EXPECT_TRUE(same.is_full(1));

    // Scalar operand.
    const Shape scalar{};
    const BroadcastPlan with_scalar("t", {&x, &scalar});
    EXPECT_EQ(with_scalar.collapsed_dims(), (std::vector<int64_t>{120}));
    EXPECT_TRUE(with_scalar.is_scalar(1));
    EXPECT_FALSE(with_scalar.inner_contiguous(1));

    // Scalar output.
    const BroadcastPlan scalars("t", {&scalar, &scalar});
    EXPECT_EQ(scalars.output_size(), 1);
    EXPECT_EQ(scalars.inner_size(), 1);
}

TEST(Broadcast, UnidirectionalPlanChecksTarget) {
    const Shape slope{3, 1}, x{2, 3, 4}, bad{4, 1};
    const Shape* ok[] = {&x, &slope};
    EXPECT_EQ(BroadcastPlan("t", ok, x).output_shape(), x);
    const Shape* wrong[] = {&x, &bad};
    EXPECT_THROW(BroadcastPlan("t", wrong, x), KernelError);
    const Shape bigger{2, 2, 3, 4};
    const Shape* too_big[] = {&bigger};
    EXPECT_THROW(BroadcastPlan("t", too_big, x), KernelError);
}

TEST(Broadcast, LegacyOperandShape) {
    const Shape a{2, 3, 4, 5};
    EXPECT_EQ(legacy_broadcast_shape("t", a, Shape{5}, true, std::nullopt), (Shape{1, 1, 1, 5}));
    EXPECT_EQ(legacy_broadcast_shape("t", a, Shape{3, 4}, true, 1), (Shape{1, 3, 4, 1}));
    EXPECT_EQ(legacy_broadcast_shape("t", a, Shape{2}, true, 0), (Shape{2, 1, 1, 1}));
    EXPECT_EQ(legacy_broadcast_shape("t", a, Shape{}, true, std::nullopt), (Shape{1, 1, 1, 1}));
    EXPECT_THROW(legacy_broadcast_shape("t", a, Shape{4}, true, 0), KernelError);
    EXPECT_THROW(legacy_broadcast_shape("t", a, Shape{5}, false, std::nullopt), KernelError);
    EXPECT_EQ(legacy_broadcast_shape("t", a, a, false, std::nullopt), a);
}

// Every output element gets exactly the input elements numpy broadcasting says, for random shapes, with and
// without threads, for 2 and 3 operands.
TEST(Broadcast, RunsVisitTheRightElements) {
    std::mt19937 gen(7);
    for (int iteration = 0; iteration < 300; ++iteration) {
        const Shape full = random_shape(gen, 5, 4);
        const Shape a = broadcastable_shape(gen, full), b = broadcastable_shape(gen, full),
                    c = broadcastable_shape(gen, full);
        const BroadcastPlan plan("t", {&a, &b, &c});
        const Shape& out = plan.output_shape();
        std::vector<int> visits(static_cast<size_t>(plan.output_size()), 0);
        std::vector<std::array<int64_t, 3>> sources(visits.size());
        const bool threaded = iteration % 2 == 0;
        for_each_broadcast_run<3>(
            plan, threaded ? &testing::test_pool() : nullptr,
            [&](int64_t o, const std::array<int64_t, 3>& in, int64_t count) {
                for (int64_t k = 0; k < count; ++k) {
                    ++visits[static_cast<size_t>(o + k)];
                    for (size_t i = 0; i < 3; ++i) {
                        sources[static_cast<size_t>(o + k)][i] = in[i] + (plan.inner_contiguous(i) ? k : 0);
                    }
                }
            },
            /*grain=*/3);
        const Shape* shapes[] = {&a, &b, &c};
        for (int64_t o = 0; o < plan.output_size(); ++o) {
            ASSERT_EQ(visits[static_cast<size_t>(o)], 1) << shape_string(out) << " at " << o;
            for (size_t i = 0; i < 3; ++i) {
                ASSERT_EQ(sources[static_cast<size_t>(o)][i], broadcast_source(out, *shapes[i], o))
                    << shape_string(*shapes[i]) << " -> " << shape_string(out) << " at " << o;
            }
        }
    }
}

TEST(Broadcast, BinaryMatchesReference) {
    std::mt19937 gen(11);
    for (int iteration = 0; iteration < 200; ++iteration) {
        const Shape full = random_shape(gen, 4, 5);
        const Shape a = broadcastable_shape(gen, full), b = broadcastable_shape(gen, full);
        const BroadcastPlan plan("t", {&a, &b});
        const auto va = random_values<float>(shape_size(a), 1u + iteration);
        const auto vb = random_values<float>(shape_size(b), 1000u + iteration);
        std::vector<float> out(static_cast<size_t>(plan.output_size()));
        broadcast_binary(plan, va.data(), vb.data(), out.data(), [](float x, float y) { return x * 2 - y; },
                         &testing::test_pool(), /*grain=*/4);
        for (int64_t o = 0; o < plan.output_size(); ++o) {
            const float want = va[broadcast_source(plan.output_shape(), a, o)] * 2 -
                               vb[broadcast_source(plan.output_shape(), b, o)];
            ASSERT_EQ(out[static_cast<size_t>(o)], want);
        }
    }
}

// ---- Axis helpers --------------------------------------------------------------------------------------------

TEST(Axes, Normalize) {
    EXPECT_EQ(normalize_axis("t", -1, 3), 2u);
    EXPECT_EQ(normalize_axis("t", 0, 3), 0u);
    EXPECT_THROW(normalize_axis("t", 3, 3), KernelError);
    EXPECT_THROW(normalize_axis("t", -4, 3), KernelError);
    const std::vector<int64_t> axes{2, -3};
    EXPECT_EQ(normalize_axes("t", axes, 3), (std::vector<size_t>{0, 2}));
    const std::vector<int64_t> duplicate{1, -2};
    EXPECT_THROW(normalize_axes("t", duplicate, 3), KernelError);
}

TEST(Axes, ResolveReduction) {
    const Shape shape{2, 3, 4};
    const std::vector<int64_t> middle{1};
    auto r = resolve_reduction_axes("t", shape, middle, true, false);
    EXPECT_EQ(r.output_shape, (Shape{2, 1, 4}));
    EXPECT_EQ(r.reduced_count, 3);
    r = resolve_reduction_axes("t", shape, middle, false, false);
    EXPECT_EQ(r.output_shape, (Shape{2, 4}));
    r = resolve_reduction_axes("t", shape, {}, false, false);
    EXPECT_EQ(r.output_shape, (Shape{}));
    EXPECT_EQ(r.reduced_count, 24);
    r = resolve_reduction_axes("t", shape, {}, true, true);
    EXPECT_TRUE(r.noop);
    EXPECT_EQ(r.output_shape, shape);
}

TEST(Axes, CollapseReduction) {
    auto groups = collapse_reduction(Shape{2, 3, 1, 4, 5}, {false, true, true, true, false});
    ASSERT_EQ(groups.size(), 3u);
    EXPECT_EQ(groups[0].size, 2);
    EXPECT_EQ(groups[1].size, 12);
    EXPECT_TRUE(groups[1].reduced);
    EXPECT_EQ(groups[2].size, 5);
    groups = collapse_reduction(Shape{1, 1}, {true, false});
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_FALSE(groups[0].reduced);
    groups = collapse_reduction(Shape{2, 0, 4}, {false, true, false});
    ASSERT_EQ(groups.size(), 3u);
    EXPECT_EQ(groups[1].size, 0);
}

// ---- Vector math ---------------------------------------------------------------------------------------------

// Applies a vec:: function object to xs through vec::map in the best ISA.  The function objects are always
// inlined: 16-lane vectors must not cross a real call (see util/vec_math.h).
template <typename Fn> std::vector<float> apply_vec(const std::vector<float>& xs, Fn fn) {
    std::vector<float> out(xs.size());
    vec::run_best_isa([&] { vec::map(xs.data(), out.data(), static_cast<int64_t>(xs.size()), fn); });
    return out;
}

struct VecExp {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::exp(v); }
};
struct VecTanh {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::tanh(v); }
};
struct VecSigmoid {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::sigmoid(v); }
};
struct VecErf {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::erf(v); }
};
struct VecGelu {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::gelu(v); }
};
struct VecGeluTanh {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return vec::gelu_tanh(v); }
};

std::vector<float> math_test_inputs() {
    std::vector<float> xs;
    for (double x = -110; x <= 110; x += 0.0137) xs.push_back(static_cast<float>(x));
    for (double m = 1e-30; m < 10; m *= 1.7) {
        xs.push_back(static_cast<float>(m));
        xs.push_back(static_cast<float>(-m));
    }
    for (float special : {0.0f, -0.0f, 88.5f, 88.72f, -87.5f, -104.0f}) xs.push_back(special);
    return xs;
}

template <typename Fn> void check_vec_function(const char* name, Fn fn, double (*reference)(double), double rel_tol) {
    const std::vector<float> xs = math_test_inputs();
    const std::vector<float> got = apply_vec(xs, fn);
    for (size_t i = 0; i < xs.size(); ++i) {
        const double want = reference(xs[i]);
        const double want_f = static_cast<float>(want);
        if (std::isinf(want_f)) {
            EXPECT_EQ(got[i], want_f) << name << "(" << xs[i] << ")";
        } else if (std::abs(want) < 1e-30) {
            EXPECT_NEAR(got[i], want, 1e-30) << name << "(" << xs[i] << ")";
        } else {
            EXPECT_NEAR(got[i], want, rel_tol * std::abs(want)) << name << "(" << xs[i] << ")";
        }
    }
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> specials{inf, -inf, std::numeric_limits<float>::quiet_NaN()};
    const std::vector<float> got_specials = apply_vec(specials, fn);
    for (size_t i = 0; i < specials.size(); ++i) {
        const double want = reference(specials[i]);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got_specials[i])) << name << "(" << specials[i] << ")";
        else if (std::isinf(want)) EXPECT_EQ(got_specials[i], want) << name << "(" << specials[i] << ")";
        else EXPECT_NEAR(got_specials[i], want, rel_tol * std::abs(want)) << name << "(" << specials[i] << ")";
    }
}

double gelu_reference(double x) {
    if (std::isinf(x)) return x > 0 ? x : 0.0;
    return x < 0 ? 0.5 * x * std::erfc(-x / std::sqrt(2.0)) : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double gelu_tanh_reference(double x) {
    if (std::isinf(x)) return x > 0 ? x : 0.0;
    const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1 + std::exp(-2 * u));
}

TEST(VecMath, Exp) {
    check_vec_function("exp", VecExp{}, [](double x) { return std::exp(x); }, 2.5e-7);
}
TEST(VecMath, Tanh) {
    check_vec_function("tanh", VecTanh{}, [](double x) { return std::tanh(x); }, 1e-6);
}
TEST(VecMath, Sigmoid) {
    check_vec_function("sigmoid", VecSigmoid{}, [](double x) { return 1 / (1 + std::exp(-x)); }, 5e-7);
}
TEST(VecMath, Erf) {
    check_vec_function("erf", VecErf{}, [](double x) { return std::erf(x); }, 1e-6);
}
TEST(VecMath, Gelu) {
    // Relative error grows to ~1e-5 only where the result is below 1e-30 in magnitude (checked absolutely).
    check_vec_function("gelu", VecGelu{}, gelu_reference, 3e-5);
    check_vec_function("gelu_tanh", VecGeluTanh{}, gelu_tanh_reference, 3e-5);
}
TEST(VecMath, SoftmaxRowHelpers) {
    for (int64_t n : {1, 5, 16, 17, 100}) {
        const auto xs = random_values<float>(n, 3u + static_cast<uint32_t>(n), -20, 20);
        float max = 0, sum = 0;
        std::vector<float> out(static_cast<size_t>(n));
        vec::run_best_isa([&] {
            max = vec::reduce_max(xs.data(), n);
            sum = vec::exp_shifted_sum(xs.data(), out.data(), n, max);
        });
        EXPECT_EQ(max, *std::max_element(xs.begin(), xs.end()));
        double want_sum = 0;
        for (int64_t k = 0; k < n; ++k) {
            const double e = std::exp(static_cast<double>(xs[k] - max));  // the shift is a float subtraction
            want_sum += e;
            EXPECT_NEAR(out[k], e, 1e-6 * e);
        }
        EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
    }
}

// ---- Binary kernels ------------------------------------------------------------------------------------------

// Not inlined: GCC 12 at -O3 reports a false -Wrestrict in the harness's string building when it is.
template <typename T>
[[gnu::noinline]] std::vector<T> run_binary(const std::string& op, int opset, const Shape& sa,
                                            const std::vector<T>& a, const Shape& sb, const std::vector<T>& b) {
    NodeBuilder node(op, opset);
    node.input().input().output();
    auto outputs = run_node(registry(), node, {tensor<T>(sa, a), tensor<T>(sb, b)});
    return values_of<T>(*outputs[0]);
}

template <typename T, typename Ref>
void check_binary_random(const std::string& op, Ref ref, uint32_t seed, double lo = -3, double hi = 3) {
    std::mt19937 gen(seed);
    for (int iteration = 0; iteration < 40; ++iteration) {
        const Shape full = random_shape(gen, 4, 6);
        const Shape sa = broadcastable_shape(gen, full), sb = broadcastable_shape(gen, full);
        const Shape out = broadcast_shapes("t", sa, sb);
        const auto a = random_values<T>(shape_size(sa), seed + iteration, lo, hi);
        auto b = random_values<T>(shape_size(sb), seed + 500 + iteration, lo, hi);
        const auto got = run_binary<T>(op, 14, sa, a, sb, b);
        std::vector<T> want(static_cast<size_t>(shape_size(out)));
        for (int64_t o = 0; o < shape_size(out); ++o) {
            want[o] = ref(a[broadcast_source(out, sa, o)], b[broadcast_source(out, sb, o)]);
        }
        expect_close(got, want);
    }
}

TEST(Elementwise, ArithmeticBroadcastsLikeNumpy) {
    check_binary_random<float>("Add", [](float x, float y) { return x + y; }, 1);
    check_binary_random<float>("Sub", [](float x, float y) { return x - y; }, 2);
    check_binary_random<float>("Mul", [](float x, float y) { return x * y; }, 3);
    check_binary_random<double>("Div", [](double x, double y) { return x / y; }, 4, 0.5, 3);
    check_binary_random<int32_t>("Add", [](int32_t x, int32_t y) { return x + y; }, 5, -100, 100);
    check_binary_random<int64_t>("Mul", [](int64_t x, int64_t y) { return x * y; }, 6, -100, 100);
    check_binary_random<uint8_t>("Sub", [](uint8_t x, uint8_t y) { return uint8_t(x - y); }, 7, 0, 255);
}

TEST(Elementwise, LargeSameShapeAddUsesThreadsCorrectly) {
    const Shape s{3, 70001};
    const auto a = random_values<float>(shape_size(s), 1), b = random_values<float>(shape_size(s), 2);
    const auto got = run_binary<float>("Add", 14, s, a, s, b);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], a[i] + b[i]);
    const Shape bias{70001};
    const auto c = random_values<float>(70001, 3);
    const auto got_bias = run_binary<float>("Mul", 14, s, a, bias, c);
    for (size_t i = 0; i < got_bias.size(); ++i) ASSERT_EQ(got_bias[i], a[i] * c[i % 70001]);
}

TEST(Elementwise, IntegerDivisionEdgeCases) {
    const int32_t min = std::numeric_limits<int32_t>::min();
    const auto got = run_binary<int32_t>("Div", 14, {5}, {7, -7, 5, min, 9}, {5}, {2, 2, 0, -1, -3});
    EXPECT_EQ(got, (std::vector<int32_t>{3, -3, 0, min, -3}));
}

TEST(Elementwise, ModSignRules) {
    // fmod = 0: sign of the divisor; fmod = 1: sign of the dividend.
    NodeBuilder python_mod("Mod", 13);
    python_mod.input().input().output();
    auto out = run_node(registry(), python_mod,
                        {tensor<int32_t>({4}, {-4, 7, 5, -3}), tensor<int32_t>({4}, {3, -3, 0, 2})});
    EXPECT_EQ(values_of<int32_t>(*out[0]), (std::vector<int32_t>{2, -2, 0, 1}));
    NodeBuilder c_mod("Mod", 13);
    c_mod.input().input().output().attr_int("fmod", 1);
    out = run_node(registry(), c_mod,
                   {tensor<float>({3}, {-4.5f, 7.0f, 5.5f}), tensor<float>({3}, {2.0f, -3.0f, 2.0f})});
    EXPECT_EQ(values_of<float>(*out[0]), (std::vector<float>{-0.5f, 1.0f, 1.5f}));
}

TEST(Elementwise, LegacyBroadcastAttributes) {
    NodeBuilder node("Add", 6);
    node.input().input().output().attr_int("broadcast", 1).attr_int("axis", 1);
    const auto a = random_values<float>(24, 5);
    auto out = run_node(registry(), node, {tensor<float>({2, 3, 4}, a), tensor<float>({3}, {10, 20, 30})});
    const auto got = values_of<float>(*out[0]);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(got[i], a[i] + 10.0f * (1 + (i / 4) % 3));

    NodeBuilder strict("Add", 6);
    strict.input().input().output();
    EXPECT_THROW(run_node(registry(), strict,
                          {tensor<float>({2, 3}, std::vector<float>(6)), tensor<float>({3}, {1, 2, 3})}),
                 KernelError);
}

TEST(Elementwise, IncompatibleShapesThrow) {
    NodeBuilder node("Add", 14);
    node.input().input().output();
    EXPECT_THROW(run_node(registry(), node, {tensor<float>({2, 3}, std::vector<float>(6)),
                                             tensor<float>({2}, std::vector<float>(2))}),
                 KernelError);
    EXPECT_THROW(run_node(registry(), node, {tensor<float>({2}, std::vector<float>(2)),
                                             tensor<int32_t>({2}, std::vector<int32_t>(2))}),
                 KernelError);
}

TEST(Elementwise, PowMixedTypes) {
    NodeBuilder node("Pow", 15);
    node.input().input().output();
    auto out = run_node(registry(), node,
                        {tensor<int32_t>({4}, {2, -3, 5, 2}), tensor<float>({4}, {3.0f, 2.0f, 0.5f, -1.0f})});
    EXPECT_EQ(values_of<int32_t>(*out[0]), (std::vector<int32_t>{8, 9, 2, 0}));
    out = run_node(registry(), node, {tensor<float>({3}, {1.5f, -2.0f, 4.0f}), tensor<int64_t>({3}, {2, 3, -1})});
    EXPECT_EQ(values_of<float>(*out[0]), (std::vector<float>{2.25f, -8.0f, 0.25f}));
    out = run_node(registry(), node, {tensor<int64_t>({3}, {3, -2, 7}), tensor<int64_t>({3}, {4, 3, -2})});
    EXPECT_EQ(values_of<int64_t>(*out[0]), (std::vector<int64_t>{81, -8, 0}));
    // Scalar exponent 2 takes the multiply path.
    const auto x = random_values<float>(1000, 9);
    out = run_node(registry(), node, {tensor<float>({1000}, x), testing::scalar<float>(2.0f)});
    const auto squared = values_of<float>(*out[0]);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(squared[i], x[i] * x[i]);
}

TEST(Elementwise, ComparisonAndLogic) {
    NodeBuilder less("Less", 13);
    less.input().input().output();
    auto out = run_node(registry(), less, {tensor<int64_t>({2, 2}, {1, 5, 3, 3}), tensor<int64_t>({2}, {3, 4})});
    EXPECT_EQ(values_of<bool>(*out[0]), (std::vector<bool>{true, false, false, true}));
    NodeBuilder equal("Equal", 19);
    equal.input().input().output();
    out = run_node(registry(), equal,
                   {testing::string_tensor({3}, {"a", "bb", "c"}), testing::string_tensor({1}, {"bb"})});
    EXPECT_EQ(values_of<bool>(*out[0]), (std::vector<bool>{false, true, false}));
    NodeBuilder xor_node("Xor", 7);
    xor_node.input().input().output();
    out = run_node(registry(), xor_node,
                   {tensor<bool>({4}, {true, true, false, false}), tensor<bool>({4}, {true, false, true, false})});
    EXPECT_EQ(values_of<bool>(*out[0]), (std::vector<bool>{false, true, true, false}));
    NodeBuilder shift("BitShift", 11);
    shift.input().input().output().attr_string("direction", "LEFT");
    auto shifted = run_node(registry(), shift, {tensor<uint8_t>({3}, {1, 3, 255}), tensor<uint8_t>({3}, {7, 2, 8})});
    EXPECT_EQ(values_of<uint8_t>(*shifted[0]), (std::vector<uint8_t>{128, 12, 0}));
}

TEST(Elementwise, VariadicBroadcasts) {
    const auto a = random_values<float>(6, 1), b = random_values<float>(3, 2), c = random_values<float>(2, 3);
    for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
        NodeBuilder node(op, 13);
        node.input().input().input().output();
        auto out =
            run_node(registry(), node, {tensor<float>({2, 3}, a), tensor<float>({3}, b), tensor<float>({2, 1}, c)});
        const auto got = values_of<float>(*out[0]);
        ASSERT_EQ(got.size(), 6u);
        for (int i = 0; i < 6; ++i) {
            const float x = a[i], y = b[i % 3], z = c[i / 3];
            float want = 0;
            if (std::string(op) == "Sum") want = x + y + z;
            if (std::string(op) == "Mean") want = (x + y + z) / 3;
            if (std::string(op) == "Max") want = std::max({x, y, z});
            if (std::string(op) == "Min") want = std::min({x, y, z});
            EXPECT_NEAR(got[i], want, 1e-6) << op;
        }
    }
}

TEST(Elementwise, WhereBroadcastsAllThree) {
    NodeBuilder node("Where", 16);
    node.input().input().input().output();
    const std::vector<bool> cond{true, false, true};
    const auto x = random_values<int64_t>(6, 1, -50, 50);
    auto out = run_node(registry(), node,
                        {tensor<bool>({3}, cond), tensor<int64_t>({2, 3}, x), testing::scalar<int64_t>(-1)});
    const auto got = values_of<int64_t>(*out[0]);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(got[i], cond[i % 3] ? x[i] : -1);
}

TEST(Elementwise, Float16ComputesInFloat) {
    auto half = [](std::vector<float> v) {
        std::vector<fp::Half> h;
        for (float f : v) h.push_back({fp::float_to_half(f)});
        return h;
    };
    NodeBuilder node("Max", 13);
    node.input().input().output();
    auto out = run_node(registry(), node,
                        {tensor<fp::Half>({3}, half({1.5f, -2.0f, 3.0f})),
                         tensor<fp::Half>({3}, half({0.5f, 4.0f, 3.0f}))});
    const auto got = values_of<fp::Half>(*out[0]);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(fp::half_to_float(got[0].bits), 1.5f);
    EXPECT_EQ(fp::half_to_float(got[1].bits), 4.0f);
    EXPECT_EQ(fp::half_to_float(got[2].bits), 3.0f);
}

// ---- Unary kernels -------------------------------------------------------------------------------------------

template <typename T>
std::vector<T> run_unary(NodeBuilder& node, const Shape& shape, const std::vector<T>& x) {
    auto out = run_node(registry(), node, {tensor<T>(shape, x)});
    return values_of<T>(*out[0]);
}

void check_unary_float(const std::string& op, int opset, const std::function<double(double)>& ref,
                       const std::function<void(NodeBuilder&)>& attrs = {}, double tol = 2e-6) {
    // Sizes around the 16-lane blocks, plus one large enough to be split across threads.
    for (int64_t n : {1, 15, 16, 33, 100003}) {
        NodeBuilder node(op, opset);
        node.input().output();
        if (attrs) attrs(node);
        const auto x = random_values<float>(n, static_cast<uint32_t>(n), -6, 6);
        const auto got = run_unary<float>(node, {n}, x);
        std::vector<float> want(x.size());
        for (size_t i = 0; i < x.size(); ++i) want[i] = static_cast<float>(ref(x[i]));
        expect_close(got, want, tol);
        // Double runs the scalar code.
        NodeBuilder node_d(op, opset);
        node_d.input().output();
        if (attrs) attrs(node_d);
        std::vector<double> xd(x.begin(), x.end());
        const auto got_d = run_unary<double>(node_d, {n}, xd);
        std::vector<double> want_d(xd.size());
        for (size_t i = 0; i < xd.size(); ++i) want_d[i] = ref(xd[i]);
        expect_close(got_d, want_d, 1e-12);
        if (::testing::Test::HasFailure()) FAIL() << op << " opset " << opset << " n " << n;
    }
}

TEST(Activation, FloatFunctionsMatchReference) {
    check_unary_float("Relu", 14, [](double x) { return x < 0 ? 0 : x; });
    check_unary_float("Sigmoid", 13, [](double x) { return 1 / (1 + std::exp(-x)); });
    check_unary_float("Tanh", 13, [](double x) { return std::tanh(x); });
    check_unary_float("Exp", 13, [](double x) { return std::exp(x); });
    check_unary_float("Erf", 13, [](double x) { return std::erf(x); });
    check_unary_float("Sqrt", 13, [](double x) { return std::sqrt(x); });
    check_unary_float("Abs", 13, [](double x) { return std::abs(x); });
    check_unary_float("Neg", 13, [](double x) { return -x; });
    check_unary_float("Softsign", 22, [](double x) { return x / (1 + std::abs(x)); });
    check_unary_float("Softplus", 22, [](double x) { return std::log1p(std::exp(x)); });
    check_unary_float("Gelu", 20, gelu_reference);
    check_unary_float("Gelu", 20, gelu_tanh_reference, [](NodeBuilder& n) { n.attr_string("approximate", "tanh"); });
    check_unary_float("LeakyRelu", 16, [](double x) { return x < 0 ? 0.25 * x : x; },
                      [](NodeBuilder& n) { n.attr_float("alpha", 0.25f); });
    // Attributes are floats: alpha is float(0.2), not 0.2.
    check_unary_float("HardSigmoid", 22, [](double x) { return std::clamp(double(0.2f) * x + 0.5, 0.0, 1.0); });
    check_unary_float("HardSwish", 22, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); });
    check_unary_float("Elu", 22, [](double x) { return x < 0 ? 2.0 * (std::exp(x) - 1) : x; },
                      [](NodeBuilder& n) { n.attr_float("alpha", 2.0f); });
    check_unary_float("Celu", 12,
                      [](double x) { return std::max(0.0, x) + std::min(0.0, 1.5 * (std::exp(x / 1.5) - 1)); },
                      [](NodeBuilder& n) { n.attr_float("alpha", 1.5f); });
    check_unary_float("Mish", 22, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); });
    check_unary_float("ThresholdedRelu", 22, [](double x) { return x > 1 ? x : 0; });
    check_unary_float("Shrink", 9, [](double x) { return x < -1.5 ? x + 0.5 : (x > 1.5 ? x - 0.5 : 0); },
                      [](NodeBuilder& n) { n.attr_float("lambd", 1.5f).attr_float("bias", 0.5f); });
}

TEST(Activation, RoundHalfToEvenAndSign) {
    NodeBuilder round("Round", 22);
    round.input().output();
    EXPECT_EQ(run_unary<float>(round, {6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.6f}),
              (std::vector<float>{0.0f, 2.0f, 2.0f, -0.0f, -2.0f, 3.0f}));
    NodeBuilder sign("Sign", 13);
    sign.input().output();
    EXPECT_EQ(run_unary<int32_t>(sign, {3}, {-7, 0, 9}), (std::vector<int32_t>{-1, 0, 1}));
}

TEST(Activation, IsInfDetectsSelectedSigns) {
    const float inf = std::numeric_limits<float>::infinity();
    NodeBuilder node("IsInf", 20);
    node.input().output().attr_int("detect_negative", 0);
    auto out = run_node(registry(), node, {tensor<float>({4}, {inf, -inf, 1.0f, std::nanf("")})});
    EXPECT_EQ(values_of<bool>(*out[0]), (std::vector<bool>{true, false, false, false}));
}

TEST(Activation, ClipAllVersions) {
    const auto x = random_values<float>(1000, 4, -10, 10);
    auto clipped = [&](float lo, float hi) {
        std::vector<float> want(x.size());
        for (size_t i = 0; i < x.size(); ++i) want[i] = std::min(std::max(x[i], lo), hi);
        return want;
    };
    NodeBuilder v6("Clip", 6);
    v6.input().output().attr_float("min", -1.0f).attr_float("max", 2.0f);
    EXPECT_EQ(run_unary<float>(v6, {1000}, x), clipped(-1, 2));

    NodeBuilder v13("Clip", 13);
    v13.input().omitted_input().input().output();
    auto out = run_node(registry(), v13, {tensor<float>({1000}, x), nullptr, testing::scalar<float>(0.5f)});
    EXPECT_EQ(values_of<float>(*out[0]), clipped(std::numeric_limits<float>::lowest(), 0.5f));

    // min > max: everything becomes max.
    NodeBuilder swapped("Clip", 13);
    swapped.input().input().input().output();
    out = run_node(registry(), swapped,
                   {tensor<float>({1000}, x), testing::scalar<float>(3.0f), testing::scalar<float>(1.0f)});
    EXPECT_EQ(values_of<float>(*out[0]), std::vector<float>(1000, 1.0f));

    NodeBuilder ints("Clip", 13);
    ints.input().input().output();
    out = run_node(registry(), ints, {tensor<int8_t>({4}, {-128, -3, 0, 127}), testing::scalar<int8_t>(-2)});
    EXPECT_EQ(values_of<int8_t>(*out[0]), (std::vector<int8_t>{-2, -2, 0, 127}));
}

TEST(Activation, PReluPerChannelSlope) {
    NodeBuilder node("PRelu", 16);
    node.input().input().output();
    const auto x = random_values<float>(2 * 3 * 40, 8);
    const std::vector<float> slope{0.1f, 0.2f, 0.3f};
    auto out = run_node(registry(), node, {tensor<float>({2, 3, 4, 10}, x), tensor<float>({3, 1, 1}, slope)});
    const auto got = values_of<float>(*out[0]);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] < 0 ? x[i] * slope[(i / 40) % 3] : x[i]);

    // Opset 6: a 1-D slope of the channel count applies along axis 1.
    NodeBuilder legacy("PRelu", 6);
    legacy.input().input().output();
    out = run_node(registry(), legacy, {tensor<float>({2, 3, 40}, x), tensor<float>({3}, slope)});
    EXPECT_EQ(values_of<float>(*out[0]), got);
}

// ---- Softmax -------------------------------------------------------------------------------------------------

// Reference over lines of `length` elements `inner` apart.
std::vector<double> softmax_reference(const std::vector<double>& x, int64_t outer, int64_t length, int64_t inner,
                                      const std::string& op) {
    std::vector<double> y(x.size());
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
            auto at = [&](int64_t k) { return static_cast<size_t>((o * length + k) * inner + i); };
            double max = -INFINITY, sum = 0;
            int64_t arg = 0;
            for (int64_t k = 0; k < length; ++k) {
                if (x[at(k)] > max) arg = k;
                max = std::max(max, x[at(k)]);
            }
            for (int64_t k = 0; k < length; ++k) sum += std::exp(x[at(k)] - max);
            for (int64_t k = 0; k < length; ++k) {
                if (op == "Softmax") y[at(k)] = std::exp(x[at(k)] - max) / sum;
                else if (op == "LogSoftmax") y[at(k)] = x[at(k)] - max - std::log(sum);
                else y[at(k)] = k == arg ? 1 : 0;
            }
        }
    }
    return y;
}

TEST(Softmax, AxisSemanticsPerOpset) {
    const Shape shape{3, 5, 19};
    const auto x = random_values<float>(shape_size(shape), 12, -10, 10);
    const std::vector<double> xd(x.begin(), x.end());
    struct Case {
        int opset;
        int64_t axis;
        int64_t outer, length, inner;
    };
    // Opset < 13 flattens at axis into 2-D; opset 13 normalizes along one axis (here also a middle one).
    const std::vector<Case> cases{{11, 1, 3, 95, 1}, {11, 2, 15, 19, 1}, {11, 0, 1, 285, 1},
                                  {13, -1, 15, 19, 1}, {13, 1, 3, 5, 19}, {13, 0, 1, 3, 95}};
    for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
        for (const Case& c : cases) {
            NodeBuilder node(op, c.opset);
            node.input().output().attr_int("axis", c.axis);
            auto out = run_node(registry(), node, {tensor<float>(shape, x)});
            const auto got = values_of<float>(*out[0]);
            const auto want = softmax_reference(xd, c.outer, c.length, c.inner, op);
            for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_NEAR(got[i], want[i], 2e-6 * std::max(1.0, std::abs(want[i])))
                    << op << " opset " << c.opset << " axis " << c.axis << " at " << i;
            }
        }
    }
}

TEST(Softmax, DefaultAxisAndLargeValues) {
    NodeBuilder old("Softmax", 11);  // default axis 1: rows of 4*5
    old.input().output();
    std::vector<float> x(40);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 1000.0f + static_cast<float>(i);
    auto out = run_node(registry(), old, {tensor<float>({2, 4, 5}, x)});
    auto got = values_of<float>(*out[0]);
    const auto want = softmax_reference(std::vector<double>(x.begin(), x.end()), 2, 20, 1, "Softmax");
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6);

    NodeBuilder modern("Softmax", 13);  // default axis -1
    modern.input().output();
    out = run_node(registry(), modern, {tensor<double>({2, 4, 5}, std::vector<double>(x.begin(), x.end()))});
    const auto got_d = values_of<double>(*out[0]);
    const auto want_d = softmax_reference(std::vector<double>(x.begin(), x.end()), 8, 5, 1, "Softmax");
    for (size_t i = 0; i < got_d.size(); ++i) EXPECT_NEAR(got_d[i], want_d[i], 1e-12);
}

// ---- Reductions ----------------------------------------------------------------------------------------------

double reduce_reference(const std::string& op, const std::vector<double>& values) {
    double acc = 0;
    if (op == "ReduceProd") acc = 1;
    if (op == "ReduceMax") acc = -INFINITY;
    if (op == "ReduceMin") acc = INFINITY;
    double max = -INFINITY;
    for (double v : values) max = std::max(max, v);
    for (double v : values) {
        if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceLogSum") acc += v;
        else if (op == "ReduceSumSquare" || op == "ReduceL2") acc += v * v;
        else if (op == "ReduceL1") acc += std::abs(v);
        else if (op == "ReduceProd") acc *= v;
        else if (op == "ReduceMax") acc = std::max(acc, v);
        else if (op == "ReduceMin") acc = std::min(acc, v);
        else if (op == "ReduceLogSumExp") acc += std::exp(v - max);
    }
    if (op == "ReduceMean") return acc / static_cast<double>(values.size());
    if (op == "ReduceL2") return std::sqrt(acc);
    if (op == "ReduceLogSum") return std::log(acc);
    if (op == "ReduceLogSumExp") return values.empty() ? -INFINITY : max + std::log(acc);
    return acc;
}

// Reference: groups the input elements by their output index.
std::vector<double> reduce_reference_all(const std::string& op, const Shape& shape, const std::vector<double>& x,
                                         const std::vector<bool>& reduced) {
    Shape out_shape;
    for (size_t d = 0; d < shape.size(); ++d) out_shape.push_back(reduced[d] ? 1 : shape[d]);
    std::vector<std::vector<double>> groups(static_cast<size_t>(shape_size(out_shape)));
    const auto strides = strides_of(shape);
    const auto out_strides = strides_of(out_shape);
    for (int64_t i = 0; i < shape_size(shape); ++i) {
        int64_t o = 0;
        for (size_t d = 0; d < shape.size(); ++d) {
            if (!reduced[d]) o += ((i / strides[d]) % shape[d]) * out_strides[d];
        }
        groups[static_cast<size_t>(o)].push_back(x[static_cast<size_t>(i)]);
    }
    std::vector<double> out;
    for (const auto& g : groups) out.push_back(reduce_reference(op, g));
    return out;
}

TEST(Reduce, AllOpsAllAxisPatterns) {
    const Shape shape{3, 4, 5, 6};
    const auto x = random_values<float>(shape_size(shape), 21, 0.1, 2.0);
    const std::vector<double> xd(x.begin(), x.end());
    const std::vector<std::string> ops{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                       "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
    // Every subset of axes: trailing (rows), middle (columns) and alternating ones (general path).
    for (int mask = 0; mask < 16; ++mask) {
        std::vector<int64_t> axes;
        std::vector<bool> reduced(4, mask == 0);
        for (int d = 0; d < 4; ++d) {
            if (mask & (1 << d)) {
                axes.push_back(d - (d % 2) * 4);  // some axes negative
                reduced[d] = true;
            }
        }
        for (const std::string& op : ops) {
            for (bool keepdims : {true, false}) {
                NodeBuilder node(op, 18);
                node.input().input().output().attr_int("keepdims", keepdims ? 1 : 0);
                const Shape axes_shape{static_cast<int64_t>(axes.size())};
                auto out = run_node(registry(), node, {tensor<float>(shape, x), tensor<int64_t>(axes_shape, axes)});
                Shape want_shape;
                for (size_t d = 0; d < 4; ++d) {
                    if (!reduced[d]) want_shape.push_back(shape[d]);
                    else if (keepdims) want_shape.push_back(1);
                }
                ASSERT_EQ(out[0]->dims, want_shape) << op << " mask " << mask;
                const auto got = values_of<float>(*out[0]);
                const auto want = reduce_reference_all(op, shape, xd, reduced);
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_NEAR(got[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i]))) << op << " mask " << mask;
                }
            }
        }
    }
}

TEST(Reduce, AxesAttributeBeforeOpset18AndIntegers) {
    NodeBuilder node("ReduceMax", 13);
    node.input().output().attr_ints("axes", {0}).attr_int("keepdims", 0);
    auto out = run_node(registry(), node, {tensor<int32_t>({2, 3}, {1, 9, -4, 7, 2, -1})});
    EXPECT_EQ(values_of<int32_t>(*out[0]), (std::vector<int32_t>{7, 9, -1}));
    NodeBuilder sum("ReduceSum", 11);
    sum.input().output();
    out = run_node(registry(), sum, {tensor<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6})});
    EXPECT_EQ(values_of<int64_t>(*out[0]), (std::vector<int64_t>{21}));
    EXPECT_EQ(out[0]->dims, (Shape{1, 1}));
}

TEST(Reduce, EmptyAxesAndEmptySets) {
    const std::vector<float> x{1, 2, 3, 4, 5, 6};
    NodeBuilder noop("ReduceSum", 13);
    noop.input().input().output().attr_int("noop_with_empty_axes", 1);
    auto out = run_node(registry(), noop, {tensor<float>({2, 3}, x), tensor<int64_t>({0}, {})});
    EXPECT_EQ(values_of<float>(*out[0]), x);
    EXPECT_EQ(out[0]->dims, (Shape{2, 3}));

    NodeBuilder all("ReduceMean", 18);
    all.input().input().output().attr_int("keepdims", 0);
    out = run_node(registry(), all, {tensor<float>({2, 3}, x), tensor<int64_t>({0}, {})});
    EXPECT_EQ(values_of<float>(*out[0]), (std::vector<float>{3.5f}));

    NodeBuilder empty("ReduceProd", 18);
    empty.input().input().output();
    out = run_node(registry(), empty, {tensor<float>({2, 0, 3}, {}), tensor<int64_t>({1}, {1})});
    EXPECT_EQ(values_of<float>(*out[0]), std::vector<float>(6, 1.0f));
    NodeBuilder empty_max("ReduceMax", 20);
    empty_max.input().input().output();
    out = run_node(registry(), empty_max, {tensor<float>({2, 0}, {}), tensor<int64_t>({1}, {1})});
    EXPECT_EQ(values_of<float>(*out[0]), std::vector<float>(2, -std::numeric_limits<float>::infinity()));
}

TEST(Reduce, ArgMaxArgMin) {
    const std::vector<float> x{1, 5, 5, 2, 0, 0, 7, 3, 7, 1, 2, 1};  // [2, 2, 3]
    NodeBuilder first("ArgMax", 13);
    first.input().output().attr_int("axis", -1);
    auto out = run_node(registry(), first, {tensor<float>({2, 2, 3}, x)});
    EXPECT_EQ(values_of<int64_t>(*out[0]), (std::vector<int64_t>{1, 0, 0, 1}));
    EXPECT_EQ(out[0]->dims, (Shape{2, 2, 1}));
    NodeBuilder last("ArgMax", 13);
    last.input().output().attr_int("axis", 2).attr_int("select_last_index", 1).attr_int("keepdims", 0);
    out = run_node(registry(), last, {tensor<float>({2, 2, 3}, x)});
    EXPECT_EQ(values_of<int64_t>(*out[0]), (std::vector<int64_t>{2, 0, 2, 1}));
    NodeBuilder argmin("ArgMin", 13);
    argmin.input().output().attr_int("axis", 0);
    out = run_node(registry(), argmin, {tensor<float>({2, 2, 3}, x)});
    EXPECT_EQ(values_of<int64_t>(*out[0]), (std::vector<int64_t>{0, 1, 0, 1, 0, 0}));
}

}  // namespace
}  // namespace tessera::cpu
