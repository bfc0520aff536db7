// The pooling and normalization kernels against naive references written here, on random inputs and many attribute
// combinations.
#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

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

// Inference rounds its per-channel coefficients in float, one operation at a time, and applies them as a multiply
// and an add, as onnxruntime does: a DynamicQuantizeLinear after a BatchNormalization turns any one-ulp difference
// into other integers, so dynamically quantized CNNs need the same bits, not merely close values.
TEST(NormalizationOps, BatchNormInferenceRoundsLikeOnnxruntime) {
    const Shape shape{1, 32, 7, 9};
    const auto x = random_values<float>(shape_size(shape), 41, -4.0, 4.0);
    const auto scale = random_values<float>(32, 42, 0.5, 2.0), bias = random_values<float>(32, 43);
    const auto mean = random_values<float>(32, 44), var = random_values<float>(32, 45, 0.1, 3.0);
    const float epsilon = 1e-5f;
    NodeBuilder node("BatchNormalization", 15);
    for (int i = 0; i < 5; ++i) node.input(TESS_ELEMENT_FLOAT32);
    node.output().attr_float("epsilon", epsilon);
    const auto outputs = run_node(registry(), node,
                                  {tensor<float>(shape, x), tensor<float>({32}, scale), tensor<float>({32}, bias),
                                   tensor<float>({32}, mean), tensor<float>({32}, var)});
    const std::vector<float> y = values_of<float>(*outputs[0]);
    size_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const size_t c = i / 63;
        // volatile: each step rounds to float on its own, never contracted into an FMA.
        volatile float inv_std = 1.0f / std::sqrt(var[c] + epsilon);
        volatile float a = inv_std * scale[c];
        volatile float mean_a = mean[c] * a;
        volatile float b = bias[c] - mean_a;
        volatile float xa = x[i] * a;
        const float expected = xa + b;
        if (y[i] != expected) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0u) << "of " << x.size() << " outputs";
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
