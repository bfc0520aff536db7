// The Conv, FusedConv and ConvTranspose kernels against the naive ONNX definitions (op_test_reference.h), on random
// inputs and many attribute combinations, through every kernel family the CPU provider chooses.
#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

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
            // Reserved up front: GCC 12 reports the reallocation of a vector grown from an initializer list of
            // shared_ptrs as out of bounds (-Warray-bounds, a false positive).
            std::vector<ValueHandle> inputs;
            inputs.reserve(4);
            inputs.push_back(tensor<float>(c.x, x));
            inputs.push_back(c.constant_weights ? nullptr : w_value);
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

}  // namespace
}  // namespace tessera::cpu
