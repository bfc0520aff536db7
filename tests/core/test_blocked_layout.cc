// Graphs whose convolution chains the CPU provider holds in the blocked channel layout (plugins/cpu/
// blocked_layout.cc) give what the same graphs give in NCHW (TESSERA_CPU_BLOCKED_LAYOUT=0), whose kernels are
// checked against plain references in the kernel tests: chains through fused sums and activations, elementwise
// operators, a channel Concat, strided and padded convolutions, MaxPool, AveragePool, GlobalAveragePool and
// BatchNormalization, and values that must stay NCHW (a graph output, a filter count that is not a multiple of
// 16, a reader without blocked support).
#include <cmath>
#include <cstdlib>
#include <random>

#include "test_support.h"

using namespace tessera::test;

namespace {

std::vector<float> random_floats(size_t count, std::mt19937& rng, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(count);
    for (float& f : v) f = dist(rng);
    return v;
}

void set_ints(onnx::NodeProto& node, const std::string& name, std::vector<int64_t> values) {
    auto* attr = node.add_attribute();
    attr->set_name(name);
    attr->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) attr->add_ints(v);
}

void conv(ModelBuilder& b, std::mt19937& rng, const std::string& x, const std::string& y, int64_t C, int64_t M,
          int64_t k, int64_t stride, int64_t pad) {
    const std::string w = y + "_w", bias = y + "_b";
    b.initializer(w, {M, C, k, k}, random_floats(M * C * k * k, rng, std::sqrt(2.0f / float(C * k * k))));
    b.initializer(bias, {M}, random_floats(M, rng, 0.1f));
    auto& n = b.node("Conv", {x, w, bias}, {y});
    set_ints(n, "kernel_shape", {k, k});
    set_ints(n, "strides", {stride, stride});
    set_ints(n, "pads", {pad, pad, pad, pad});
}

ModelBuilder chain_model() {
    std::mt19937 rng(3);
    ModelBuilder b;
    b.input("x", {2, 16, 12, 12});
    conv(b, rng, "x", "c1", 16, 32, 3, 1, 1);
    b.node("Relu", {"c1"}, {"a"});
    conv(b, rng, "a", "c2", 32, 32, 1, 1, 0);
    b.node("Add", {"c2", "a"}, {"s"});  // fused into c2 as its sum
    b.node("Relu", {"s"}, {"r"});
    conv(b, rng, "r", "d", 32, 16, 3, 2, 1);
    conv(b, rng, "r", "e", 32, 16, 1, 2, 0);
    auto& cat = b.node("Concat", {"d", "e"}, {"f"});
    auto* axis = cat.add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(1);
    b.node("Sigmoid", {"f"}, {"g"});
    b.node("Mul", {"g", "f"}, {"h"});
    conv(b, rng, "h", "k", 32, 48, 3, 1, 1);
    conv(b, rng, "k", "y1", 48, 40, 1, 1, 0);  // 40 filters: written NCHW
    auto& pool = b.node("MaxPool", {"k"}, {"m"});
    set_ints(pool, "kernel_shape", {3, 3});
    set_ints(pool, "strides", {2, 2});
    set_ints(pool, "pads", {1, 1, 1, 1});
    b.initializer("bn_scale", {48}, random_floats(48, rng, 1.0f));
    b.initializer("bn_bias", {48}, random_floats(48, rng, 0.5f));
    b.initializer("bn_mean", {48}, random_floats(48, rng, 0.5f));
    std::vector<float> variance = random_floats(48, rng, 1.0f);
    for (float& v : variance) v = v * v + 0.1f;
    b.initializer("bn_var", {48}, variance);
    b.node("BatchNormalization", {"m", "bn_scale", "bn_bias", "bn_mean", "bn_var"}, {"bn"});
    b.node("Relu", {"bn"}, {"bnr"});
    set_ints(b.node("AveragePool", {"bnr"}, {"avg"}), "kernel_shape", {2, 2});
    conv(b, rng, "avg", "y2", 48, 16, 1, 1, 0);
    conv(b, rng, "r", "y3", 32, 16, 1, 1, 0);  // r's other readers: a graph output of whole blocks,
    b.node("GlobalAveragePool", {"r"}, {"y4"});  // and a pool whose output is NCHW
    conv(b, rng, "r", "t", 32, 16, 1, 1, 0);
    b.node("Softmax", {"t"}, {"y5"});  // a reader without blocked support: t stays NCHW
    b.output("y1", {2, 40, 6, 6}).output("y2", {2, 16, 2, 2}).output("y3", {2, 16, 12, 12});
    b.output("y4", {2, 32, 1, 1});
    b.output("y5", {2, 16, 12, 12});
    return b;
}

std::vector<std::vector<float>> run_model(const ModelBuilder& b, const std::vector<float>& x, bool blocked) {
    if (blocked) unsetenv("TESSERA_CPU_BLOCKED_LAYOUT");
    else setenv("TESSERA_CPU_BLOCKED_LAYOUT", "0", 1);
    EnvPtr env = make_env(plugin_dir().string());
    auto bytes = b.bytes();
    TessSession* raw = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &raw));
    unsetenv("TESSERA_CPU_BLOCKED_LAYOUT");
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    SessionPtr session(raw);
    std::vector<std::vector<float>> outputs;
    if (!session) return outputs;
    ValuePtr input = make_float_tensor({2, 16, 12, 12}, x);
    const char* name = "x";
    const TessValue* inputs[] = {input.get()};
    // Twice: the second run uses the memory plan the first recorded.
    for (int run = 0; run < 2; ++run) {
        TessValue* out[5] = {};
        StatusPtr s(tess_session_run(session.get(), &name, inputs, 1, nullptr, 5, out));
        EXPECT_EQ(s, nullptr) << tess_status_message(s.get());
        outputs.clear();
        for (TessValue* v : out) {
            ValuePtr owner(v);
            if (v != nullptr) outputs.push_back(floats_of(v));
        }
    }
    return outputs;
}

}  // namespace

TEST(BlockedLayout, ConvolutionChainsGiveTheNchwResults) {
    const ModelBuilder b = chain_model();
    std::mt19937 rng(11);
    const std::vector<float> x = random_floats(2 * 16 * 12 * 12, rng, 1.0f);
    const auto nchw = run_model(b, x, false);
    const auto blocked = run_model(b, x, true);
    ASSERT_EQ(nchw.size(), 5u);
    ASSERT_EQ(blocked.size(), 5u);
    for (size_t o = 0; o < nchw.size(); ++o) {
        ASSERT_EQ(nchw[o].size(), blocked[o].size());
        double largest = 0;
        for (float v : nchw[o]) largest = std::max(largest, double(std::abs(v)));
        EXPECT_GT(largest, 0.1) << "output " << o << " is degenerate";
        for (size_t i = 0; i < nchw[o].size(); ++i)
            ASSERT_NEAR(blocked[o][i], nchw[o][i], 1e-4 * (1.0 + largest)) << "output " << o << " element " << i;
    }
}
