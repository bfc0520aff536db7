// Differential tests of every operator the CUDA provider claims: the same model and random inputs on {cuda} (strict,
// so the nodes really run on CUDA) and on {cpu}.  Skipped, with the plugin's reason, where no GPU is usable.
#include <functional>

#include "cuda_test_support.h"

namespace tessera::cuda_test {
namespace {

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;

void attr(NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
}
void attr(NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::FLOAT);
    a->set_f(v);
}
void attr(NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::STRING);
    a->set_s(v);
}
void attr(NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
}

void int64_initializer(ModelBuilder& m, const std::string& name, const std::vector<int64_t>& values) {
    auto* t = m.graph->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
}

void float_initializer(ModelBuilder& m, const std::string& name, const std::vector<int64_t>& dims, uint32_t seed,
                       float lo = -1.0f, float hi = 1.0f) {
    m.initializer(name, dims, random_values(static_cast<size_t>(count_of(dims)), seed, lo, hi));
}

const Tolerance kExact{1e-5, 1e-6};
const Tolerance kReduction{2e-4, 2e-4};  // sums in another order (GEMM, convolution, pooling averages)

// ---- Unary -------------------------------------------------------------------------------------------------------

struct UnaryCase {
    const char* op;
    float lo, hi;  // input range
};

class CudaUnary : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(CudaUnary, MatchesCpu) {
    REQUIRE_CUDA();
    const UnaryCase c = GetParam();
    ModelBuilder m(14);  // HardSwish exists from opset 14
    m.input("x", {4, 37, 29}).output("y", {4, 37, 29});
    NodeProto& n = m.node(c.op, {"x"}, {"y"});
    if (std::string(c.op) == "LeakyRelu") attr(n, "alpha", 0.1f);
    if (std::string(c.op) == "Elu") attr(n, "alpha", 0.7f);
    expect_cuda_matches_cpu(m, {random_input("x", {4, 37, 29}, 1, c.lo, c.hi)}, Tolerance{2e-5, 2e-6});
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CudaUnary,
    ::testing::Values(UnaryCase{"Relu", -2, 2}, UnaryCase{"LeakyRelu", -2, 2}, UnaryCase{"Sigmoid", -8, 8},
                      UnaryCase{"Tanh", -4, 4}, UnaryCase{"Erf", -3, 3}, UnaryCase{"Exp", -5, 5},
                      UnaryCase{"Log", 0.01f, 10}, UnaryCase{"Sqrt", 0, 10}, UnaryCase{"Neg", -2, 2},
                      UnaryCase{"Abs", -2, 2}, UnaryCase{"Reciprocal", 0.1f, 4}, UnaryCase{"Elu", -3, 3},
                      UnaryCase{"Selu", -3, 3}, UnaryCase{"HardSigmoid", -5, 5}, UnaryCase{"HardSwish", -5, 5},
                      UnaryCase{"Softplus", -10, 30}, UnaryCase{"Softsign", -4, 4}, UnaryCase{"Floor", -5, 5},
                      UnaryCase{"Ceil", -5, 5}, UnaryCase{"Sin", -4, 4}, UnaryCase{"Cos", -4, 4}),
    [](const ::testing::TestParamInfo<UnaryCase>& info) { return std::string(info.param.op); });

TEST(CudaOps, GeluBothApproximations) {
    REQUIRE_CUDA();
    for (const char* approx : {"none", "tanh"}) {
        ModelBuilder m(20, 9);
        m.input("x", {8, 100}).output("y", {8, 100});
        attr(m.node("Gelu", {"x"}, {"y"}), "approximate", std::string(approx));
        SCOPED_TRACE(approx);
        expect_cuda_matches_cpu(m, {random_input("x", {8, 100}, 2, -4, 4)}, Tolerance{2e-5, 2e-6});
    }
}

TEST(CudaOps, ClipWithConstantBounds) {
    REQUIRE_CUDA();
    ModelBuilder m;
    m.input("x", {3, 50}).output("y", {3, 50});
    m.initializer("lo", {}, {-0.25f});
    m.initializer("hi", {}, {0.5f});
    m.node("Clip", {"x", "lo", "hi"}, {"y"});
    expect_cuda_matches_cpu(m, {random_input("x", {3, 50}, 3)}, kExact);
}

// ---- Binary and variadic -----------------------------------------------------------------------------------------

struct BinaryCase {
    const char* op;
    std::vector<int64_t> a, b;
};

class CudaBinary : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(CudaBinary, MatchesCpu) {
    REQUIRE_CUDA();
    const BinaryCase c = GetParam();
    ModelBuilder m;
    m.input("a", c.a).input("b", c.b).output("y", {-1});
    m.graph->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    m.node(c.op, {"a", "b"}, {"y"});
    const bool pow = std::string(c.op) == "Pow";
    const bool div = std::string(c.op) == "Div";
    expect_cuda_matches_cpu(m, {random_input("a", c.a, 4, pow ? 0.1f : -2.0f, 2.0f),
                                random_input("b", c.b, 5, div ? 0.5f : -2.0f, 2.0f)},
                            Tolerance{2e-5, 1e-6});
}

std::vector<BinaryCase> binary_cases() {
    std::vector<BinaryCase> cases;
    const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
        {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{1}, {5, 2}}, {{}, {3, 7}},
        {{2, 3, 1, 5}, {1, 3, 4, 1}}, {{64, 1000}, {1000}}};
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"})
        for (const auto& [a, b] : shapes) cases.push_back({op, a, b});
    cases.push_back({"PRelu", {2, 3, 4, 5}, {3, 1, 1}});
    cases.push_back({"PRelu", {2, 3, 4}, {4}});
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaBinary, ::testing::ValuesIn(binary_cases()),
                         [](const ::testing::TestParamInfo<BinaryCase>& info) {
                             return std::string(info.param.op) + "_" + std::to_string(info.index);
                         });

TEST(CudaOps, VariadicSumMaxMin) {
    REQUIRE_CUDA();
    for (const char* op : {"Sum", "Max", "Min"}) {
        ModelBuilder m;
        m.input("a", {2, 3, 4}).input("b", {4}).input("c", {3, 1}).output("y", {2, 3, 4});
        m.node(op, {"a", "b", "c"}, {"y"});
        SCOPED_TRACE(op);
        expect_cuda_matches_cpu(m, {random_input("a", {2, 3, 4}, 6), random_input("b", {4}, 7),
                                    random_input("c", {3, 1}, 8)},
                                kExact);
    }
}

// ---- Softmax, normalization ----------------------------------------------------------------------------------------

TEST(CudaOps, SoftmaxAndLogSoftmaxOnEveryAxis) {
    REQUIRE_CUDA();
    for (int64_t opset : {11, 13}) {
        for (const char* op : {"Softmax", "LogSoftmax"}) {
            for (int64_t axis : {-1, 0, 1, 2}) {
                ModelBuilder m(opset);
                m.input("x", {3, 40, 1100}).output("y", {3, 40, 1100});
                attr(m.node(op, {"x"}, {"y"}), "axis", axis);
                SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " axis " + std::to_string(axis));
                expect_cuda_matches_cpu(m, {random_input("x", {3, 40, 1100}, 9, -5, 5)}, Tolerance{1e-4, 1e-6});
            }
        }
    }
}

TEST(CudaOps, LayerNormalization) {
    REQUIRE_CUDA();
    for (int64_t axis : {-1, 1}) {
        for (bool bias : {true, false}) {
            ModelBuilder m(17);
            m.input("x", {4, 6, 384}).output("y", {4, 6, 384});
            const std::vector<int64_t> norm = axis == -1 ? std::vector<int64_t>{384} : std::vector<int64_t>{6, 384};
            float_initializer(m, "scale", norm, 10);
            float_initializer(m, "bias", norm, 11);
            std::vector<std::string> inputs = {"x", "scale"};
            if (bias) inputs.push_back("bias");
            NodeProto& n = m.node("LayerNormalization", inputs, {"y"});
            attr(n, "axis", axis);
            attr(n, "epsilon", 1e-5f);
            SCOPED_TRACE("axis " + std::to_string(axis) + (bias ? " with bias" : ""));
            expect_cuda_matches_cpu(m, {random_input("x", {4, 6, 384}, 12, -3, 3)}, Tolerance{1e-4, 1e-5});
        }
    }
}

TEST(CudaOps, BatchNormalizationAloneAndWithRelu) {
    REQUIRE_CUDA();
    for (bool relu : {false, true}) {
        ModelBuilder m(15);
        m.input("x", {2, 8, 5, 7}).output("y", {2, 8, 5, 7});
        float_initializer(m, "s", {8}, 13);
        float_initializer(m, "b", {8}, 14);
        float_initializer(m, "mean", {8}, 15);
        float_initializer(m, "var", {8}, 16, 0.5f, 2.0f);
        attr(m.node("BatchNormalization", {"x", "s", "b", "mean", "var"}, {relu ? "bn" : "y"}), "epsilon", 1e-3f);
        if (relu) m.node("Relu", {"bn"}, {"y"});
        SCOPED_TRACE(relu ? "with Relu" : "alone");
        expect_cuda_matches_cpu(m, {random_input("x", {2, 8, 5, 7}, 17)}, Tolerance{1e-5, 1e-5});
    }
}

TEST(CudaOps, Lrn) {
    REQUIRE_CUDA();
    for (int64_t size : {3, 4, 5}) {
        ModelBuilder m;
        m.input("x", {2, 10, 6, 6}).output("y", {2, 10, 6, 6});
        NodeProto& n = m.node("LRN", {"x"}, {"y"});
        attr(n, "size", size);
        attr(n, "alpha", 1e-3f);
        attr(n, "beta", 0.75f);
        attr(n, "bias", 2.0f);
        SCOPED_TRACE("size " + std::to_string(size));
        expect_cuda_matches_cpu(m, {random_input("x", {2, 10, 6, 6}, 18, -4, 4)}, Tolerance{1e-5, 1e-6});
    }
}

// ---- Convolution ---------------------------------------------------------------------------------------------------

struct ConvCase {
    std::string name;
    std::vector<int64_t> x, w;
    int64_t group;
    std::vector<int64_t> strides, pads, dilations;
    std::string auto_pad;
    bool bias;
};

class CudaConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CudaConv, MatchesCpu) {
    REQUIRE_CUDA();
    const ConvCase c = GetParam();
    ModelBuilder m;
    m.input("x", c.x).output("y", {-1});
    m.graph->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    float_initializer(m, "w", c.w, 20, -0.5f, 0.5f);
    std::vector<std::string> inputs = {"x", "w"};
    if (c.bias) {
        float_initializer(m, "b", {c.w[0]}, 21);
        inputs.push_back("b");
    }
    NodeProto& n = m.node("Conv", inputs, {"y"});
    if (c.group != 1) attr(n, "group", c.group);
    if (!c.strides.empty()) attr(n, "strides", c.strides);
    if (!c.pads.empty()) attr(n, "pads", c.pads);
    if (!c.dilations.empty()) attr(n, "dilations", c.dilations);
    if (!c.auto_pad.empty()) attr(n, "auto_pad", c.auto_pad);
    expect_cuda_matches_cpu(m, {random_input("x", c.x, 22)}, kReduction);
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CudaConv,
    ::testing::Values(
        ConvCase{"plain3x3", {1, 3, 16, 16}, {8, 3, 3, 3}, 1, {}, {}, {}, "", false},
        ConvCase{"padded_strided_bias", {2, 4, 17, 15}, {6, 4, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {}, "", true},
        ConvCase{"grouped", {1, 8, 12, 12}, {8, 2, 3, 3}, 4, {}, {1, 1, 1, 1}, {}, "", true},
        ConvCase{"depthwise", {1, 16, 10, 10}, {16, 1, 3, 3}, 16, {1, 1}, {1, 1, 1, 1}, {}, "", true},
        ConvCase{"dilated", {1, 3, 20, 20}, {4, 3, 3, 3}, 1, {}, {2, 2, 2, 2}, {2, 2}, "", false},
        ConvCase{"pointwise", {2, 64, 7, 7}, {32, 64, 1, 1}, 1, {}, {}, {}, "", true},
        ConvCase{"same_upper", {1, 3, 15, 15}, {5, 3, 3, 3}, 1, {}, {}, {}, "SAME_UPPER", true},
        ConvCase{"conv1d", {2, 5, 30}, {7, 5, 5}, 1, {2}, {2, 2}, {}, "", true},
        ConvCase{"conv3d", {1, 2, 6, 7, 8}, {3, 2, 3, 3, 3}, 1, {}, {1, 1, 1, 1, 1, 1}, {}, "", true}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

TEST(CudaOps, ConvBatchNormReluIsFusedAndMatches) {
    REQUIRE_CUDA();
    ModelBuilder m;
    m.input("x", {2, 3, 14, 14}).output("y", {2, 8, 14, 14});
    float_initializer(m, "w", {8, 3, 3, 3}, 23, -0.5f, 0.5f);
    float_initializer(m, "b", {8}, 24);
    float_initializer(m, "s", {8}, 25);
    float_initializer(m, "beta", {8}, 26);
    float_initializer(m, "mean", {8}, 27);
    float_initializer(m, "var", {8}, 28, 0.5f, 2.0f);
    attr(m.node("Conv", {"x", "w", "b"}, {"c"}), "pads", std::vector<int64_t>{1, 1, 1, 1});
    m.node("BatchNormalization", {"c", "s", "beta", "mean", "var"}, {"bn"});
    m.node("Relu", {"bn"}, {"y"});
    expect_cuda_matches_cpu(m, {random_input("x", {2, 3, 14, 14}, 29)}, kReduction);
}

// ---- Pooling -------------------------------------------------------------------------------------------------------

struct PoolCase {
    std::string name, op;
    std::vector<int64_t> x, kernel, strides, pads, dilations;
    int64_t ceil_mode, count_include_pad;
    std::string auto_pad;
};

class CudaPool : public ::testing::TestWithParam<PoolCase> {};

TEST_P(CudaPool, MatchesCpu) {
    REQUIRE_CUDA();
    const PoolCase c = GetParam();
    ModelBuilder m(19);
    m.input("x", c.x).output("y", {-1});
    m.graph->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    NodeProto& n = m.node(c.op, {"x"}, {"y"});
    attr(n, "kernel_shape", c.kernel);
    if (!c.strides.empty()) attr(n, "strides", c.strides);
    if (!c.pads.empty()) attr(n, "pads", c.pads);
    if (!c.dilations.empty()) attr(n, "dilations", c.dilations);
    if (c.ceil_mode) attr(n, "ceil_mode", c.ceil_mode);
    if (c.count_include_pad) attr(n, "count_include_pad", c.count_include_pad);
    if (!c.auto_pad.empty()) attr(n, "auto_pad", c.auto_pad);
    expect_cuda_matches_cpu(m, {random_input("x", c.x, 30)}, Tolerance{1e-5, 1e-6});
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CudaPool,
    ::testing::Values(
        PoolCase{"max3x3s2", "MaxPool", {2, 4, 17, 17}, {3, 3}, {2, 2}, {}, {}, 0, 0, ""},
        PoolCase{"max_padded_ceil", "MaxPool", {1, 3, 16, 15}, {3, 3}, {2, 2}, {1, 0, 1, 1}, {}, 1, 0, ""},
        PoolCase{"max_dilated", "MaxPool", {1, 2, 12, 12}, {2, 2}, {1, 1}, {}, {2, 2}, 0, 0, ""},
        PoolCase{"max1d_same", "MaxPool", {2, 3, 21}, {4}, {3}, {}, {}, 0, 0, "SAME_UPPER"},
        PoolCase{"avg2x2", "AveragePool", {2, 4, 16, 16}, {2, 2}, {2, 2}, {}, {}, 0, 0, ""},
        PoolCase{"avg_pad_exclude", "AveragePool", {1, 3, 11, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 0, 0, ""},
        PoolCase{"avg_pad_include_ceil", "AveragePool", {1, 3, 11, 10}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 1, 1, ""},
        PoolCase{"avg3d", "AveragePool", {1, 2, 6, 6, 6}, {2, 2, 2}, {2, 2, 2}, {}, {}, 0, 0, ""},
        PoolCase{"avg_same_lower", "AveragePool", {1, 2, 9, 9}, {3, 3}, {2, 2}, {}, {}, 0, 0, "SAME_LOWER"}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

TEST(CudaOps, GlobalPools) {
    REQUIRE_CUDA();
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
        ModelBuilder m;
        m.input("x", {2, 16, 13, 11}).output("y", {2, 16, 1, 1});
        m.node(op, {"x"}, {"y"});
        SCOPED_TRACE(op);
        expect_cuda_matches_cpu(m, {random_input("x", {2, 16, 13, 11}, 31)}, Tolerance{1e-5, 1e-6});
    }
}

// ---- Matrix products -----------------------------------------------------------------------------------------------

TEST(CudaOps, GemmTransposesAndBias) {
    REQUIRE_CUDA();
    const int64_t M = 33, K = 70, N = 45;
    const std::vector<std::vector<int64_t>> biases = {{}, {N}, {M, 1}, {1}, {M, N}};
    for (int ta = 0; ta < 2; ++ta) {
        for (int tb = 0; tb < 2; ++tb) {
            for (const auto& c : biases) {
                ModelBuilder m;
                const std::vector<int64_t> a = ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K};
                const std::vector<int64_t> b = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
                m.input("a", a).output("y", {M, N});
                float_initializer(m, "b", b, 32);
                std::vector<std::string> inputs = {"a", "b"};
                if (!c.empty()) {
                    float_initializer(m, "c", c, 33);
                    inputs.push_back("c");
                }
                NodeProto& n = m.node("Gemm", inputs, {"y"});
                attr(n, "transA", int64_t{ta});
                attr(n, "transB", int64_t{tb});
                attr(n, "alpha", 0.75f);
                attr(n, "beta", 1.5f);
                SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C rank " +
                             std::to_string(c.size()));
                expect_cuda_matches_cpu(m, {random_input("a", a, 34)}, kReduction);
            }
        }
    }
}

struct MatMulCase {
    std::string name;
    std::vector<int64_t> a, b;
};

class CudaMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(CudaMatMul, MatchesCpu) {
    REQUIRE_CUDA();
    const MatMulCase c = GetParam();
    ModelBuilder m;
    m.input("a", c.a).input("b", c.b).output("y", {-1});
    m.graph->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
    m.node("MatMul", {"a", "b"}, {"y"});
    expect_cuda_matches_cpu(m, {random_input("a", c.a, 35), random_input("b", c.b, 36)}, kReduction);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaMatMul,
                         ::testing::Values(MatMulCase{"matrix", {31, 64}, {64, 17}},
                                           MatMulCase{"batched_shared_b", {3, 31, 64}, {64, 17}},
                                           MatMulCase{"batched", {3, 31, 64}, {3, 64, 17}},
                                           MatMulCase{"shared_a", {1, 31, 64}, {4, 64, 17}},
                                           MatMulCase{"broadcast_batches", {2, 1, 5, 8}, {1, 3, 8, 6}},
                                           MatMulCase{"vector_matrix", {64}, {64, 17}},
                                           MatMulCase{"batched_matrix_vector", {3, 31, 64}, {64}},
                                           MatMulCase{"vector_vector", {64}, {64}},
                                           MatMulCase{"attention_like", {2, 4, 16, 32}, {2, 4, 32, 16}}),
                         [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// ---- Data movement and aliases ---------------------------------------------------------------------------------------

TEST(CudaOps, Transpose) {
    REQUIRE_CUDA();
    const std::vector<std::vector<int64_t>> perms = {{}, {0, 2, 1, 3}, {3, 1, 2, 0}, {0, 2, 3, 1}, {1, 0, 2, 3}};
    for (const auto& perm : perms) {
        ModelBuilder m;
        m.input("x", {2, 3, 5, 7}).output("y", {-1, -1, -1, -1});
        NodeProto& n = m.node("Transpose", {"x"}, {"y"});
        if (!perm.empty()) attr(n, "perm", perm);
        SCOPED_TRACE("perm " + ::testing::PrintToString(perm));
        expect_cuda_matches_cpu(m, {random_input("x", {2, 3, 5, 7}, 37)}, kExact);
    }
}

TEST(CudaOps, ConcatOnEveryAxis) {
    REQUIRE_CUDA();
    for (int64_t axis : {0, 1, 2, -1}) {
        ModelBuilder m;
        std::vector<int64_t> a = {2, 3, 4}, b = {2, 3, 4}, c = {2, 3, 4};
        const int64_t ax = axis < 0 ? axis + 3 : axis;
        b[ax] = 5;
        c[ax] = 1;
        m.input("a", a).input("b", b).input("c", c).output("y", {-1, -1, -1});
        attr(m.node("Concat", {"a", "b", "c"}, {"y"}), "axis", axis);
        SCOPED_TRACE("axis " + std::to_string(axis));
        expect_cuda_matches_cpu(m, {random_input("a", a, 38), random_input("b", b, 39), random_input("c", c, 40)},
                                kExact);
    }
}

// Reshape, Flatten, Squeeze, Unsqueeze and Identity alias their input: inside a chain and as partition outputs.
TEST(CudaOps, AliasChain) {
    REQUIRE_CUDA();
    ModelBuilder m;
    m.input("x", {2, 3, 4, 5}).output("flat", {-1, -1}).output("y", {-1, -1, -1, -1});
    int64_initializer(m, "shape", {0, -1, 5});
    int64_initializer(m, "axes0", {0});
    int64_initializer(m, "axes1", {1, 3});
    m.node("Relu", {"x"}, {"r"});
    m.node("Reshape", {"r", "shape"}, {"reshaped"});   // [2, 12, 5]
    m.node("Unsqueeze", {"reshaped", "axes1"}, {"u"});  // [2, 1, 12, 1, 5]
    m.node("Squeeze", {"u", "axes1"}, {"s"});           // [2, 12, 5]
    m.node("Identity", {"s"}, {"i"});
    attr(m.node("Flatten", {"i"}, {"flat"}), "axis", int64_t{2});  // [24, 5], a partition output
    m.node("Unsqueeze", {"i", "axes0"}, {"u0"});                    // [1, 2, 12, 5]
    m.node("Sigmoid", {"u0"}, {"y"});
    expect_cuda_matches_cpu(m, {random_input("x", {2, 3, 4, 5}, 41)}, kExact);
}

// ---- float16 ---------------------------------------------------------------------------------------------------------

// The float16 model on CUDA against the float32 model on the CPU, fed the same (rounded) values.
void expect_half_matches(int64_t opset, const std::function<void(ModelBuilder&, int32_t)>& build,
                         const std::vector<Input>& inputs, const Tolerance& tol) {
    ModelBuilder half(opset), full(opset);
    build(half, TensorProto::FLOAT16);
    build(full, TensorProto::FLOAT);
    expect_cuda_matches_cpu(half, inputs, tol, TESS_ELEMENT_FLOAT16, &full);
}

void half_initializer(ModelBuilder& m, int32_t type, const std::string& name, const std::vector<int64_t>& dims,
                      uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v = random_values(static_cast<size_t>(count_of(dims)), seed, lo, hi);
    auto* t = m.graph->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) {
        if (type == TensorProto::FLOAT16) t->add_int32_data(to_half(x));
        else t->add_float_data(from_half(to_half(x)));  // the same values as the float16 model
    }
}

TEST(CudaFloat16, ElementwiseSoftmaxLayerNorm) {
    REQUIRE_CUDA();
    expect_half_matches(
        17,
        [](ModelBuilder& m, int32_t t) {
            m.input("a", {4, 256}, t).input("b", {256}, t).output("y", {4, 256}, t).output("z", {4, 256}, t);
            half_initializer(m, t, "g", {256}, 42);
            m.node("Add", {"a", "b"}, {"s"});
            m.node("Relu", {"s"}, {"r"});
            m.node("Softmax", {"r"}, {"y"});
            m.node("LayerNormalization", {"s", "g"}, {"z"});
        },
        {random_input("a", {4, 256}, 43), random_input("b", {256}, 44)}, Tolerance{1e-2, 2e-3});
}

TEST(CudaFloat16, MatMulGemmConvPool) {
    REQUIRE_CUDA();
    expect_half_matches(
        13,
        [](ModelBuilder& m, int32_t t) {
            m.input("x", {2, 8, 12, 12}, t).input("a", {3, 16, 32}, t).output("p", {-1, -1, -1, -1}, t)
                .output("mm", {3, 16, 24}, t).output("g", {48, 24}, t);
            half_initializer(m, t, "w", {16, 8, 3, 3}, 45, -0.3f, 0.3f);
            half_initializer(m, t, "bias", {16}, 46);
            half_initializer(m, t, "mw", {32, 24}, 47, -0.3f, 0.3f);
            half_initializer(m, t, "gb", {24}, 48);
            attr(m.node("Conv", {"x", "w", "bias"}, {"c"}), "pads", std::vector<int64_t>{1, 1, 1, 1});
            m.node("Relu", {"c"}, {"cr"});
            NodeProto& pool = m.node("MaxPool", {"cr"}, {"p"});
            attr(pool, "kernel_shape", std::vector<int64_t>{2, 2});
            attr(pool, "strides", std::vector<int64_t>{2, 2});
            m.node("MatMul", {"a", "mw"}, {"mm"});
            m.node("Flatten", {"a"}, {"af"});  // [3, 512]
            int64_initializer(m, "s2", {48, 32});
            m.node("Reshape", {"af", "s2"}, {"a2"});  // [48, 32]
            m.node("Gemm", {"a2", "mw", "gb"}, {"g"});
        },
        {random_input("x", {2, 8, 12, 12}, 49), random_input("a", {3, 16, 32}, 50)}, Tolerance{2e-2, 5e-3});
}

}  // namespace
}  // namespace tessera::cuda_test
