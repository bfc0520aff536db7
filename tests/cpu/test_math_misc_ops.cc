// Tests of kernels/math/math_ops.cc, misc_ops.cc and ml_ops.cc beyond what the ONNX conformance cases cover: Einsum
// against a naive sum over every label assignment, Unique on strings and along an axis, TensorScatter's circular
// mode, seeded random generators, LabelEncoder NaN keys and TreeEnsemble validation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernel_harness.h"
#include "kernels/all_kernels.h"

namespace tessera::cpu {
namespace {

using testing::NodeBuilder;
using testing::run_node;
using testing::string_tensor;
using testing::tensor;
using testing::ValueHandle;
using testing::values_of;

const KernelRegistry& registry() {
    static const KernelRegistry r = [] {
        KernelRegistry reg;
        register_math_kernels(reg);
        register_misc_kernels(reg);
        register_ml_kernels(reg);
        return reg;
    }();
    return r;
}

std::vector<float> random_floats(int64_t count, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = dist(gen);
    return v;
}

// einsum for letters-only equations with an explicit output, by visiting every assignment of every label.
std::vector<double> naive_einsum(const std::vector<std::string>& terms, const std::string& output,
                                 const std::vector<Shape>& shapes, const std::vector<std::vector<float>>& data,
                                 std::map<char, int64_t>& sizes) {
    for (size_t i = 0; i < terms.size(); ++i)
        for (size_t d = 0; d < terms[i].size(); ++d) sizes[terms[i][d]] = shapes[i][d];
    std::vector<char> labels;
    for (const auto& [label, size] : sizes) labels.push_back(label);
    int64_t out_count = 1;
    for (char c : output) out_count *= sizes[c];
    std::vector<double> result(static_cast<size_t>(out_count), 0.0);
    std::map<char, int64_t> at;
    for (char c : labels) at[c] = 0;
    const auto offset = [&](const std::string& term, const Shape& shape) {
        int64_t o = 0;
        for (size_t d = 0; d < term.size(); ++d) o = o * shape[d] + at[term[d]];
        return o;
    };
    while (true) {
        double product = 1.0;
        for (size_t i = 0; i < terms.size(); ++i) product *= data[i][size_t(offset(terms[i], shapes[i]))];
        int64_t o = 0;
        for (char c : output) o = o * sizes[c] + at[c];
        result[size_t(o)] += product;
        size_t k = labels.size();
        while (k > 0 && ++at[labels[k - 1]] == sizes[labels[k - 1]]) at[labels[--k]] = 0;
        if (k == 0) break;
    }
    return result;
}

std::vector<ValueHandle> run_einsum(const std::string& equation, const std::vector<Shape>& shapes,
                                    const std::vector<std::vector<float>>& data) {
    NodeBuilder node("Einsum", 12);
    std::vector<ValueHandle> inputs;
    for (size_t i = 0; i < shapes.size(); ++i) {
        node.input(TESS_ELEMENT_FLOAT32);
        inputs.push_back(tensor<float>(shapes[i], data[i]));
    }
    node.output().attr_string("equation", equation);
    return run_node(registry(), node, inputs);
}

TEST(Einsum, MatchesNaiveSum) {
    struct Case {
        std::vector<std::string> terms;
        std::string output;
        std::vector<Shape> shapes;
    };
    const std::vector<Case> cases = {
        {{"ij", "jk"}, "ik", {{3, 4}, {4, 5}}},
        {{"bij", "bkj"}, "bik", {{2, 3, 4}, {2, 5, 4}}},
        {{"ii"}, "i", {{4, 4}}},
        {{"iij"}, "ji", {{3, 3, 2}}},
        {{"iji"}, "j", {{3, 4, 3}}},
        {{"abc", "cd", "de"}, "abe", {{2, 3, 4}, {4, 5}, {5, 6}}},
        {{"i", "j"}, "ij", {{3}, {4}}},
        {{"ij", "ij"}, "ij", {{3, 4}, {3, 4}}},
        {{"ijk", "ikl"}, "jl", {{2, 3, 4}, {2, 4, 5}}},
        {{"ab", "cd"}, "", {{2, 3}, {4, 5}}},
        {{"i", "i", "i"}, "", {{5}, {5}, {5}}},
        {{"bhqd", "bhkd"}, "bhqk", {{2, 3, 4, 8}, {2, 3, 5, 8}}},
        {{"ijkl"}, "ljki", {{2, 3, 4, 5}}},
        {{"aBc", "Bd"}, "dca", {{2, 3, 4}, {3, 5}}},
    };
    uint32_t seed = 1;
    for (const Case& c : cases) {
        std::vector<std::vector<float>> data;
        for (const Shape& shape : c.shapes) data.push_back(random_floats(shape_size(shape), seed++));
        std::string equation;
        for (size_t i = 0; i < c.terms.size(); ++i) equation += (i ? "," : "") + c.terms[i];
        equation += "->" + c.output;
        std::map<char, int64_t> sizes;
        const std::vector<double> expected = naive_einsum(c.terms, c.output, c.shapes, data, sizes);
        const auto outputs = run_einsum(equation, c.shapes, data);
        Shape expected_shape;
        for (char label : c.output) expected_shape.push_back(sizes[label]);
        ASSERT_EQ(outputs[0]->dims, expected_shape) << equation;
        const std::vector<float> got = values_of<float>(*outputs[0]);
        for (size_t k = 0; k < expected.size(); ++k)
            ASSERT_NEAR(got[k], expected[k], 1e-4 * (1 + std::abs(expected[k]))) << equation << " at " << k;
    }
}

TEST(Einsum, ImplicitOutputAndEllipsisBroadcast) {
    const std::vector<float> m = random_floats(12, 7);
    // Implicit output: labels seen once, in alphabetical order ("ba" is a transpose).
    auto outputs = run_einsum("ba", {{3, 4}}, {m});
    EXPECT_EQ(outputs[0]->dims, (Shape{4, 3}));
    EXPECT_FLOAT_EQ(values_of<float>(*outputs[0])[1], m[4]);  // out[0][1] = in[1][0]

    // "...ij,...jk->...ik" with batch dims (2,1) and (3) broadcasting to (2,3).
    const std::vector<float> a = random_floats(2 * 1 * 2 * 3, 8), b = random_floats(3 * 3 * 2, 9);
    outputs = run_einsum("...ij,...jk->...ik", {{2, 1, 2, 3}, {3, 3, 2}}, {a, b});
    ASSERT_EQ(outputs[0]->dims, (Shape{2, 3, 2, 2}));
    std::map<char, int64_t> sizes;
    const std::vector<double> expected = naive_einsum({"aij", "bjk"}, "abik", {{2, 2, 3}, {3, 3, 2}}, {a, b}, sizes);
    const std::vector<float> got = values_of<float>(*outputs[0]);
    for (size_t k = 0; k < expected.size(); ++k) EXPECT_NEAR(got[k], expected[k], 1e-4);
}

TEST(Unique, StringsUnsortedKeepFirstOccurrenceOrder) {
    NodeBuilder node("Unique", 11);
    node.input(TESS_ELEMENT_STRING).output().output().output().output().attr_int("sorted", 0);
    const auto out = run_node(registry(), node, {string_tensor({6}, {"b", "a", "b", "c", "a", "b"})});
    EXPECT_EQ(out[0]->strings, (std::vector<std::string>{"b", "a", "c"}));
    EXPECT_EQ(values_of<int64_t>(*out[1]), (std::vector<int64_t>{0, 1, 3}));
    EXPECT_EQ(values_of<int64_t>(*out[2]), (std::vector<int64_t>{0, 1, 0, 2, 1, 0}));
    EXPECT_EQ(values_of<int64_t>(*out[3]), (std::vector<int64_t>{3, 2, 1}));
}

TEST(Unique, SortedSlicesAlongAxis) {
    // Columns of [[2,1,2],[0,5,0]]: (2,0), (1,5), (2,0) -> sorted unique (1,5), (2,0).
    NodeBuilder node("Unique", 11);
    node.input(TESS_ELEMENT_INT32).output().output().output().output().attr_int("axis", 1);
    const auto out = run_node(registry(), node, {tensor<int32_t>({2, 3}, {2, 1, 2, 0, 5, 0})});
    EXPECT_EQ(out[0]->dims, (Shape{2, 2}));
    EXPECT_EQ(values_of<int32_t>(*out[0]), (std::vector<int32_t>{1, 2, 5, 0}));
    EXPECT_EQ(values_of<int64_t>(*out[1]), (std::vector<int64_t>{1, 0}));
    EXPECT_EQ(values_of<int64_t>(*out[2]), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(values_of<int64_t>(*out[3]), (std::vector<int64_t>{1, 2}));
}

TEST(TensorScatter, CircularWrapsAroundTheCache) {
    NodeBuilder node("TensorScatter", 24);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_INT64).output();
    node.attr_string("mode", "circular").attr_int("axis", 1);
    const auto out =
        run_node(registry(), node,
                 {tensor<float>({1, 4}, {0, 0, 0, 0}), tensor<float>({1, 3}, {1, 2, 3}), tensor<int64_t>({1}, {3})});
    EXPECT_EQ(values_of<float>(*out[0]), (std::vector<float>{2, 3, 0, 1}));
}

TEST(Random, SeedMakesRunsRepeatable) {
    const auto draw = [](bool seeded) {
        NodeBuilder node("RandomNormal", 22);
        node.output().attr_ints("shape", {64});
        if (seeded) node.attr_float("seed", 7.0f);
        return values_of<float>(*run_node(registry(), node, {})[0]);
    };
    EXPECT_EQ(draw(true), draw(true));
    EXPECT_NE(draw(false), draw(false));
}

TEST(LabelEncoder, NanKeysMatchAnyNan) {
    NodeBuilder node("LabelEncoder", 4, "ai.onnx.ml");
    node.input(TESS_ELEMENT_FLOAT32).output();
    node.attr_floats("keys_floats", {1.0f, std::nanf("")}).attr_ints("values_int64s", {10, 20});
    const auto out = run_node(registry(), node, {tensor<float>({3}, {-std::nanf("1"), 1.0f, 2.0f})});
    EXPECT_EQ(values_of<int64_t>(*out[0]), (std::vector<int64_t>{20, 10, -1}));
}

TEST(TreeEnsemble, RejectsCycles) {
    NodeBuilder node("TreeEnsemble", 5, "ai.onnx.ml");
    node.input(TESS_ELEMENT_FLOAT32).output();
    node.attr_ints("nodes_featureids", {0, 0})
        .attr_ints("nodes_truenodeids", {1, 0})
        .attr_ints("nodes_falsenodeids", {0, 0});
    node.attr_ints("nodes_trueleafs", {0, 0}).attr_ints("nodes_falseleafs", {1, 1}).attr_ints("tree_roots", {0});
    node.attr_tensor("nodes_modes", tensor<uint8_t>({2}, {0, 0}));
    node.attr_tensor("nodes_splits", tensor<float>({2}, {1, 2}));
    node.attr_ints("leaf_targetids", {0}).attr_tensor("leaf_weights", tensor<float>({1}, {1}));
    EXPECT_THROW(testing::create_kernel(registry(), node), KernelError);
}

}  // namespace
}  // namespace tessera::cpu
