// Graphs whose convolution chains the CPU provider holds in the blocked channel layout (plugins/cpu/runtime/
// blocked_layout.cc) give what the same graphs give in NCHW (TESSERA_CPU_BLOCKED_LAYOUT=0), whose kernels are
// checked against plain references in the kernel tests: chains through fused sums and activations, elementwise
// operators, a channel Concat, strided and padded convolutions, MaxPool, AveragePool, GlobalAveragePool and
// BatchNormalization, a residual sum whose buffer the convolution writes over, and values that must stay NCHW (a
// graph output, a filter count that is not a multiple of 16, a reader without blocked support).
//
// A depthwise convolution that takes over the pointwise one before it, a pointwise projection that takes over the
// depthwise convolution before it (and its expansion), and a MaxPool that takes over a network's first convolution
// (plugins/cpu/runtime/producer_fusion.cc, blocked_conv_window2d), give what they give as separate steps
// (TESSERA_CPU_FUSE_PRODUCERS=0).
//
// Concats whose inputs are written in place (plugins/cpu/runtime/concat_in_place.cc) give what copying Concats give
// (TESSERA_CPU_CONCAT_IN_PLACE=0), in either layout: a dense block whose Concats nest, a fire module, an input read
// again after its Concat, and the inputs that must be copied (a graph input, an input claimed by an earlier Concat
// or listed twice, a slot that would start off a 64-byte boundary, an axis with more than one row before it, a
// Concat that is a graph output).
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
          int64_t k, int64_t stride, int64_t pad, bool with_bias = true) {
    const std::string w = y + "_w", bias = y + "_b";
    b.initializer(w, {M, C, k, k}, random_floats(M * C * k * k, rng, std::sqrt(2.0f / float(C * k * k))));
    if (with_bias) b.initializer(bias, {M}, random_floats(M, rng, 0.1f));
    auto& n = with_bias ? b.node("Conv", {x, w, bias}, {y}) : b.node("Conv", {x, w}, {y});
    set_ints(n, "kernel_shape", {k, k});
    set_ints(n, "strides", {stride, stride});
    set_ints(n, "pads", {pad, pad, pad, pad});
}

// A 3x3 depthwise convolution of C channels (padded by its dilation) with a bias.
void depthwise_conv(ModelBuilder& b, std::mt19937& rng, const std::string& x, const std::string& y, int64_t C,
                    int64_t stride, int64_t dilation, bool with_bias = true) {
    b.initializer(y + "_w", {C, 1, 3, 3}, random_floats(C * 9, rng, 0.4f));
    if (with_bias) b.initializer(y + "_b", {C}, random_floats(C, rng, 0.1f));
    auto& n = with_bias ? b.node("Conv", {x, y + "_w", y + "_b"}, {y}) : b.node("Conv", {x, y + "_w"}, {y});
    set_ints(n, "kernel_shape", {3, 3});
    set_ints(n, "strides", {stride, stride});
    set_ints(n, "dilations", {dilation, dilation});
    set_ints(n, "pads", {dilation, dilation, dilation, dilation});
    auto* group = n.add_attribute();
    group->set_name("group");
    group->set_type(onnx::AttributeProto::INT);
    group->set_i(C);
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
    // A residual sum whose other operand dies there: the fused convolution writes over it (in_place_input).
    conv(b, rng, "r", "shortcut", 32, 32, 1, 1, 0);
    conv(b, rng, "r", "main", 32, 32, 3, 1, 1);
    b.node("Add", {"main", "shortcut"}, {"joined"});
    b.node("Relu", {"joined"}, {"joined_r"});
    conv(b, rng, "joined_r", "y6", 32, 16, 1, 1, 0);
    b.output("y1", {2, 40, 6, 6}).output("y2", {2, 16, 2, 2}).output("y3", {2, 16, 12, 12});
    b.output("y4", {2, 32, 1, 1});
    b.output("y5", {2, 16, 12, 12});
    b.output("y6", {2, 16, 12, 12});
    return b;
}

ModelBuilder& concat(ModelBuilder& b, std::vector<std::string> inputs, const std::string& y, int64_t axis = 1) {
    auto& n = b.node("Concat", std::move(inputs), {y});
    auto* attr = n.add_attribute();
    attr->set_name("axis");
    attr->set_type(onnx::AttributeProto::INT);
    attr->set_i(axis);
    return b;
}

void batch_norm(ModelBuilder& b, std::mt19937& rng, const std::string& x, const std::string& y, int64_t C) {
    b.initializer(y + "_scale", {C}, random_floats(C, rng, 1.0f));
    b.initializer(y + "_bias", {C}, random_floats(C, rng, 0.5f));
    b.initializer(y + "_mean", {C}, random_floats(C, rng, 0.5f));
    std::vector<float> variance = random_floats(C, rng, 1.0f);
    for (float& v : variance) v = v * v + 0.1f;
    b.initializer(y + "_var", {C}, variance);
    b.node("BatchNormalization", {x, y + "_scale", y + "_bias", y + "_mean", y + "_var"}, {y});
}

// Runs the model twice on `x` (the second run uses the memory plan the first recorded) with the given settings of
// TESSERA_CPU_BLOCKED_LAYOUT and TESSERA_CPU_CONCAT_IN_PLACE, and returns the second run's outputs.
std::vector<std::vector<float>> run_model(const ModelBuilder& b, const std::vector<int64_t>& x_dims,
                                          const std::vector<float>& x, size_t output_count, bool blocked,
                                          bool concat_in_place = true, bool fuse_producers = true) {
    if (!blocked) setenv("TESSERA_CPU_BLOCKED_LAYOUT", "0", 1);
    if (!concat_in_place) setenv("TESSERA_CPU_CONCAT_IN_PLACE", "0", 1);
    if (!fuse_producers) setenv("TESSERA_CPU_FUSE_PRODUCERS", "0", 1);
    EnvPtr env = make_env(plugin_dir().string());
    auto bytes = b.bytes();
    TessSession* raw = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &raw));
    unsetenv("TESSERA_CPU_BLOCKED_LAYOUT");
    unsetenv("TESSERA_CPU_CONCAT_IN_PLACE");
    unsetenv("TESSERA_CPU_FUSE_PRODUCERS");
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    SessionPtr session(raw);
    std::vector<std::vector<float>> outputs;
    if (!session) return outputs;
    ValuePtr input = make_float_tensor(x_dims, x);
    const char* name = "x";
    const TessValue* inputs[] = {input.get()};
    for (int run = 0; run < 2; ++run) {
        std::vector<TessValue*> out(output_count, nullptr);
        StatusPtr s(tess_session_run(session.get(), &name, inputs, 1, nullptr, output_count, out.data()));
        EXPECT_EQ(s, nullptr) << tess_status_message(s.get());
        outputs.clear();
        for (TessValue* v : out) {
            ValuePtr owner(v);
            if (v != nullptr) outputs.push_back(floats_of(v));
        }
    }
    return outputs;
}

void expect_same_outputs(const std::vector<std::vector<float>>& expected,
                         const std::vector<std::vector<float>>& actual, size_t output_count) {
    ASSERT_EQ(expected.size(), output_count);
    ASSERT_EQ(actual.size(), output_count);
    for (size_t o = 0; o < expected.size(); ++o) {
        ASSERT_EQ(expected[o].size(), actual[o].size());
        double largest = 0;
        for (float v : expected[o]) largest = std::max(largest, double(std::abs(v)));
        EXPECT_GT(largest, 0.1) << "output " << o << " is degenerate";
        for (size_t i = 0; i < expected[o].size(); ++i)
            ASSERT_NEAR(actual[o][i], expected[o][i], 1e-4 * (1.0 + largest)) << "output " << o << " element " << i;
    }
}

// One image, so that a channel Concat's inputs are contiguous stretches of its output.
ModelBuilder concat_model() {
    std::mt19937 rng(5);
    ModelBuilder b;
    b.input("x", {1, 16, 10, 10});
    conv(b, rng, "x", "cat0", 16, 32, 3, 1, 1);
    // A dense block: each layer reads everything so far and its Concat extends the previous one.
    for (int k = 1; k <= 3; ++k) {
        const std::string previous = "cat" + std::to_string(k - 1), layer = std::to_string(k);
        const int64_t channels = 32 + 16 * (k - 1);
        batch_norm(b, rng, previous, "bn" + layer, channels);
        b.node("Relu", {"bn" + layer}, {"act" + layer});
        conv(b, rng, "act" + layer, "grow" + layer, channels, 16, 3, 1, 1);
        concat(b, {previous, "grow" + layer}, "cat" + layer);
    }
    // A fire module on the block's output.
    conv(b, rng, "cat3", "squeeze", 80, 16, 1, 1, 0);
    b.node("Relu", {"squeeze"}, {"s"});
    conv(b, rng, "s", "e1", 16, 32, 1, 1, 0);
    b.node("Relu", {"e1"}, {"e1r"});
    conv(b, rng, "s", "e3", 16, 32, 3, 1, 1);
    b.node("Relu", {"e3"}, {"e3r"});
    concat(b, {"e1r", "e3r"}, "fire");
    conv(b, rng, "fire", "y0", 64, 40, 1, 1, 0);
    conv(b, rng, "grow1", "y1", 16, 16, 1, 1, 0);  // a Concat input read again after every Concat
    // NCHW Concats: 8 + 24 channels (slots on 64-byte boundaries), 3 + 5 (the second slot would start at 1200 bytes).
    conv(b, rng, "cat0", "p", 32, 8, 1, 1, 0);
    conv(b, rng, "p", "q", 8, 24, 1, 1, 0);
    concat(b, {"p", "q"}, "pq");
    b.node("Softmax", {"pq"}, {"y2"});
    conv(b, rng, "p", "u", 8, 3, 1, 1, 0);
    conv(b, rng, "p", "v", 8, 5, 1, 1, 0);
    concat(b, {"u", "v"}, "uv");
    b.node("Relu", {"uv"}, {"y3"});
    concat(b, {"p", "p"}, "pp");  // listed twice
    b.node("Relu", {"pp"}, {"y4"});
    conv(b, rng, "q", "w", 24, 8, 1, 1, 0);
    concat(b, {"w", "p"}, "wp", 2);  // eight rows before the axis
    b.node("Relu", {"wp"}, {"y5"});
    concat(b, {"x", "cat0"}, "xc");  // a graph input
    b.node("Relu", {"xc"}, {"y6"});
    concat(b, {"q", "v"}, "y7");  // a graph output, of inputs already placed elsewhere
    b.output("y0", {1, 40, 10, 10}).output("y1", {1, 16, 10, 10}).output("y2", {1, 32, 10, 10});
    b.output("y3", {1, 8, 10, 10}).output("y4", {1, 16, 10, 10}).output("y5", {1, 8, 20, 10});
    b.output("y6", {1, 48, 10, 10}).output("y7", {1, 29, 10, 10});
    return b;
}

// Inverted residual blocks whose expansions are large enough (1 MB and up) for the depthwise convolution to take
// them over: from an NCHW input with Relu6 on both, strided; from a blocked input with Relu on the expansion only,
// a dilated depthwise and a residual sum after it; and one too small to be taken over.
ModelBuilder expansion_model() {
    std::mt19937 rng(7);
    ModelBuilder b;
    b.input("x", {1, 16, 58, 58});
    b.initializer("lo", {}, {0.0f});
    b.initializer("hi", {}, {6.0f});
    auto depthwise = [&](const std::string& x, const std::string& y, int64_t C, int64_t stride, int64_t dilation) {
        depthwise_conv(b, rng, x, y, C, stride, dilation);
    };
    conv(b, rng, "x", "e1", 16, 96, 1, 1, 0);  // 96 x 58 x 58 floats: 1.3 MB
    b.node("Clip", {"e1", "lo", "hi"}, {"e1r"});
    depthwise("e1r", "d1", 96, 2, 1);
    b.node("Clip", {"d1", "lo", "hi"}, {"d1r"});
    conv(b, rng, "d1r", "p1", 96, 32, 1, 1, 0);  // [1, 32, 29, 29], blocked
    conv(b, rng, "p1", "e2", 32, 320, 1, 1, 0);  // 320 x 29 x 29 floats: 1.1 MB
    b.node("Relu", {"e2"}, {"e2r"});
    depthwise("e2r", "d2", 320, 1, 2);
    conv(b, rng, "d2", "p2", 320, 32, 1, 1, 0);
    b.node("Add", {"p2", "p1"}, {"s2"});
    conv(b, rng, "s2", "e3", 32, 64, 1, 1, 0);  // 64 x 29 x 29 floats: 215 KB, left apart
    b.node("Clip", {"e3", "lo", "hi"}, {"e3r"});
    depthwise("e3r", "d3", 64, 1, 1);
    conv(b, rng, "d3", "y", 64, 24, 1, 1, 0);
    b.output("y", {1, 24, 29, 29});
    return b;
}

// Inverted residual blocks whose projections take over their depthwise convolutions (whose outputs are 1 MB and
// up): one without an expansion and an NCHW projection (24 filters), neither with a bias; one whose depthwise
// convolution (without a bias) took over its expansion, with a residual sum in NCHW; one strided, its projection a
// graph output.
ModelBuilder projection_model() {
    std::mt19937 rng(23);
    ModelBuilder b;
    b.input("x", {1, 64, 64, 64});
    b.initializer("lo", {}, {0.0f});
    b.initializer("hi", {}, {6.0f});
    auto depthwise = [&](const std::string& x, const std::string& y, int64_t C, int64_t stride, bool bias = true) {
        depthwise_conv(b, rng, x, y, C, stride, 1, bias);
        b.node("Clip", {y, "lo", "hi"}, {y + "r"});
    };
    // The first block's convolutions without B, so that neither reads another node's input as its bias.
    depthwise("x", "dA", 64, 1, false);  // 64 x 64 x 64 floats: 1 MB
    conv(b, rng, "dAr", "pA", 64, 24, 1, 1, 0, false);
    conv(b, rng, "pA", "eB", 24, 96, 1, 1, 0);  // 1.5 MB: taken over by its depthwise convolution
    b.node("Clip", {"eB", "lo", "hi"}, {"eBr"});
    depthwise("eBr", "dB", 96, 1, false);
    conv(b, rng, "dBr", "pB", 96, 24, 1, 1, 0);
    b.node("Add", {"pB", "pA"}, {"yB"});
    conv(b, rng, "yB", "eC", 24, 256, 1, 1, 0);
    b.node("Clip", {"eC", "lo", "hi"}, {"eCr"});
    depthwise("eCr", "dC", 256, 2);  // 256 x 32 x 32 floats: 1 MB
    conv(b, rng, "dCr", "yC", 256, 32, 1, 1, 0);
    b.output("yB", {1, 24, 64, 64}).output("yC", {1, 32, 32, 32});
    return b;
}

// Network stems whose first convolution's output (1 MB and up) the MaxPool after it takes over: ResNet's 7x7
// stride-2 padded one and SqueezeNet's unpadded 3x3 stride-2 one, each with a padded or an unpadded pool.
ModelBuilder stem_model() {
    std::mt19937 rng(9);
    ModelBuilder b;
    b.input("x", {1, 3, 132, 132});
    auto max_pool = [&](const std::string& x, const std::string& y, int64_t pad) {
        auto& n = b.node("MaxPool", {x}, {y});
        set_ints(n, "kernel_shape", {3, 3});
        set_ints(n, "strides", {2, 2});
        set_ints(n, "pads", {pad, pad, pad, pad});
    };
    conv(b, rng, "x", "c7", 3, 64, 7, 2, 3);  // [1, 64, 66, 66]: 1.1 MB
    b.node("Relu", {"c7"}, {"c7r"});
    max_pool("c7r", "p7", 1);
    conv(b, rng, "p7", "y0", 64, 16, 1, 1, 0);
    conv(b, rng, "x", "c3", 3, 64, 3, 2, 0);  // [1, 64, 65, 65]
    b.node("Relu", {"c3"}, {"c3r"});
    max_pool("c3r", "p3", 0);
    conv(b, rng, "p3", "y1", 64, 16, 1, 1, 0);
    b.output("y0", {1, 16, 33, 33}).output("y1", {1, 16, 32, 32});
    return b;
}

}  // namespace

TEST(BlockedLayout, ConvolutionChainsGiveTheNchwResults) {
    const ModelBuilder b = chain_model();
    std::mt19937 rng(11);
    const std::vector<float> x = random_floats(2 * 16 * 12 * 12, rng, 1.0f);
    const std::vector<int64_t> dims{2, 16, 12, 12};
    expect_same_outputs(run_model(b, dims, x, 6, false), run_model(b, dims, x, 6, true), 6);
}

TEST(ConcatInPlace, GivesWhatCopyingGivesInEitherLayout) {
    const ModelBuilder b = concat_model();
    std::mt19937 rng(13);
    const std::vector<int64_t> dims{1, 16, 10, 10};
    const std::vector<float> x = random_floats(16 * 10 * 10, rng, 1.0f);
    const auto copied = run_model(b, dims, x, 8, false, false);
    expect_same_outputs(copied, run_model(b, dims, x, 8, false), 8);
    expect_same_outputs(copied, run_model(b, dims, x, 8, true), 8);
}

TEST(ProducerFusion, ExpansionsTakenOverGiveWhatSeparateStepsGive) {
    const ModelBuilder b = expansion_model();
    std::mt19937 rng(17);
    const std::vector<int64_t> dims{1, 16, 58, 58};
    const std::vector<float> x = random_floats(16 * 58 * 58, rng, 1.0f);
    expect_same_outputs(run_model(b, dims, x, 1, true, true, false), run_model(b, dims, x, 1, true), 1);
}

TEST(ProducerFusion, DepthwiseConvolutionsTakenOverByTheirProjectionsGiveWhatSeparateStepsGive) {
    const ModelBuilder b = projection_model();
    std::mt19937 rng(29);
    const std::vector<int64_t> dims{1, 64, 64, 64};
    const std::vector<float> x = random_floats(64 * 64 * 64, rng, 1.0f);
    expect_same_outputs(run_model(b, dims, x, 2, true, true, false), run_model(b, dims, x, 2, true), 2);
}

TEST(ProducerFusion, StemConvolutionsTakenOverByTheirMaxPoolGiveWhatSeparateStepsGive) {
    const ModelBuilder b = stem_model();
    std::mt19937 rng(19);
    const std::vector<int64_t> dims{1, 3, 132, 132};
    const std::vector<float> x = random_floats(3 * 132 * 132, rng, 1.0f);
    expect_same_outputs(run_model(b, dims, x, 2, true, true, false), run_model(b, dims, x, 2, true), 2);
}
