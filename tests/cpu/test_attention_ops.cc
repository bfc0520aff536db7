// The ONNX Attention operator (opset 23) against plain softmax(Q K^T * scale + mask) V in double: 4-D and 3-D
// (packed heads) inputs, grouped-query heads, a head size of V differing from Q's, additive float masks (2-D and
// 4-D, with -inf entries), boolean masks, is_causal, the scale attribute, and a past key/value cache (with the
// present outputs checked to be the concatenation).  Sequence lengths cover 1, odd sizes and sizes around the
// kernel's row blocks.  (The com.microsoft Attention is covered by the Python tests.)
#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;

enum class Mask { None, Float2d, Float4d, Bool2d };

struct AttentionCase {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_size, v_head_size;
    bool packed = false;  // 3-D inputs [batch, seq, heads * size]
    Mask mask = Mask::None;
    bool causal = false;  // only with q_len == kv_len and no past, where every definition agrees
    int64_t past = 0;
    float scale = 0;  // 0: attribute absent (1 / sqrt(head_size))
};

void run_attention_case(const AttentionCase& c, uint32_t seed) {
    const int64_t B = c.batch, Hq = c.q_heads, Hkv = c.kv_heads, Sq = c.q_len, Skv = c.kv_len, D = c.head_size,
                  Dv = c.v_head_size, P = c.past, total = P + Skv;
    const auto q = random_values<float>(B * Hq * Sq * D, seed, -2, 2);
    const auto k = random_values<float>(B * Hkv * Skv * D, seed + 1, -2, 2);
    const auto v = random_values<float>(B * Hkv * Skv * Dv, seed + 2);
    const auto past_k = random_values<float>(B * Hkv * P * D, seed + 3, -2, 2);
    const auto past_v = random_values<float>(B * Hkv * P * Dv, seed + 4);

    // The mask: [q_len, total] or [batch, 1, q_len, total] (broadcast over heads).  Key 0 is never masked, so no
    // row is fully masked.
    const Shape mask_shape = c.mask == Mask::Float4d ? Shape{B, 1, Sq, total} : Shape{Sq, total};
    std::vector<float> mask_values = random_values<float>(shape_size(mask_shape), seed + 5, -2, 2);
    std::vector<bool> keep(mask_values.size(), true);
    std::mt19937 rng(seed + 6);
    for (size_t i = 0; i < mask_values.size(); ++i) {
        if (i % size_t(total) != 0 && rng() % 4 == 0) {
            keep[i] = false;
            mask_values[i] = -std::numeric_limits<float>::infinity();
        }
    }
    auto mask_at = [&](int64_t b, int64_t i, int64_t j) -> double {
        const size_t index = size_t(c.mask == Mask::Float4d ? (b * Sq + i) * total + j : i * total + j);
        if (c.mask == Mask::Bool2d) return keep[index] ? 0.0 : -std::numeric_limits<double>::infinity();
        return mask_values[index];
    };

    // Element accessors over the two layouts: 4-D [b, h, s, d] or 3-D [b, s, h * size + d].
    auto at = [&](const std::vector<float>& t, int64_t heads, int64_t len, int64_t size, int64_t b, int64_t h,
                  int64_t s, int64_t d) {
        return double(c.packed ? t[size_t(((b * len + s) * heads + h) * size + d)]
                               : t[size_t(((b * heads + h) * len + s) * size + d)]);
    };
    // Key/value j of the cache: the past first, then the new entries.
    auto key = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
        return j < P ? double(past_k[size_t(((b * Hkv + h) * P + j) * D + d)]) : at(k, Hkv, Skv, D, b, h, j - P, d);
    };
    auto value = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
        return j < P ? double(past_v[size_t(((b * Hkv + h) * P + j) * Dv + d)])
                     : at(v, Hkv, Skv, Dv, b, h, j - P, d);
    };

    const double scale = c.scale != 0 ? double(c.scale) : 1.0 / std::sqrt(double(D));
    const Shape y_shape = c.packed ? Shape{B, Sq, Hq * Dv} : Shape{B, Hq, Sq, Dv};
    std::vector<double> expected(size_t(shape_size(y_shape)));
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t hk = h / (Hq / Hkv);  // each KV head serves Hq / Hkv consecutive query heads
            for (int64_t i = 0; i < Sq; ++i) {
                std::vector<double> s(static_cast<size_t>(total));
                double top = -std::numeric_limits<double>::infinity();
                for (int64_t j = 0; j < total; ++j) {
                    double dot = 0;
                    for (int64_t d = 0; d < D; ++d) dot += at(q, Hq, Sq, D, b, h, i, d) * key(b, hk, j, d);
                    s[j] = dot * scale;
                    if (c.mask != Mask::None) s[j] += mask_at(b, i, j);
                    if (c.causal && j > i) s[j] = -std::numeric_limits<double>::infinity();
                    top = std::max(top, s[j]);
                }
                double sum = 0;
                for (double& e : s) sum += (e = std::exp(e - top));
                for (int64_t d = 0; d < Dv; ++d) {
                    double y = 0;
                    for (int64_t j = 0; j < total; ++j) y += s[j] / sum * value(b, hk, j, d);
                    expected[size_t(c.packed ? ((b * Sq + i) * Hq + h) * Dv + d : ((b * Hq + h) * Sq + i) * Dv + d)] = y;
                }
            }
        }
    }

    NodeBuilder node("Attention", 23);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32);
    std::vector<ValueHandle> inputs;
    if (c.packed) {
        node.attr_int("q_num_heads", Hq).attr_int("kv_num_heads", Hkv);
        inputs = {tensor<float>({B, Sq, Hq * D}, q), tensor<float>({B, Skv, Hkv * D}, k),
                  tensor<float>({B, Skv, Hkv * Dv}, v)};
    } else {
        inputs = {tensor<float>({B, Hq, Sq, D}, q), tensor<float>({B, Hkv, Skv, D}, k),
                  tensor<float>({B, Hkv, Skv, Dv}, v)};
    }
    if (c.causal) node.attr_int("is_causal", 1);
    if (c.scale != 0) node.attr_float("scale", c.scale);
    if (c.mask == Mask::None) {
        node.omitted_input();
        inputs.push_back(nullptr);
    } else if (c.mask == Mask::Bool2d) {
        node.input(TESS_ELEMENT_BOOL);
        inputs.push_back(tensor<bool>(mask_shape, keep));
    } else {
        node.input(TESS_ELEMENT_FLOAT32);
        inputs.push_back(tensor<float>(mask_shape, mask_values));
    }
    if (P > 0) {
        node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32);
        inputs.push_back(tensor<float>({B, Hkv, P, D}, past_k));
        inputs.push_back(tensor<float>({B, Hkv, P, Dv}, past_v));
        node.output(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_FLOAT32).output(TESS_ELEMENT_FLOAT32);
    } else {
        node.output(TESS_ELEMENT_FLOAT32);
    }
    const auto out = run_node(testing::registry_with<register_attention_kernels>(), node, inputs);
    const std::string what = "Attention B=" + std::to_string(B) + " Hq=" + std::to_string(Hq) +
                             " Hkv=" + std::to_string(Hkv) + " Sq=" + std::to_string(Sq) + " Skv=" + std::to_string(Skv) +
                             " D=" + std::to_string(D) + " Dv=" + std::to_string(Dv) + " past=" + std::to_string(P) +
                             " packed=" + std::to_string(c.packed) + " mask=" + std::to_string(int(c.mask)) +
                             " causal=" + std::to_string(c.causal);
    ASSERT_EQ(dims_of(out[0]), y_shape) << what;
    expect_near_all(values_of<float>(*out[0]), expected, 1e-5, what);
    if (P > 0) {  // present = concat(past, new) along the sequence, exactly
        std::vector<double> present_k, present_v;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hkv; ++h)
                for (int64_t j = 0; j < total; ++j) {
                    for (int64_t d = 0; d < D; ++d) present_k.push_back(key(b, h, j, d));
                    for (int64_t d = 0; d < Dv; ++d) present_v.push_back(value(b, h, j, d));
                }
        expect_near_all(values_of<float>(*out[1]), present_k, 0.0, what + " present_key");
        expect_near_all(values_of<float>(*out[2]), present_v, 0.0, what + " present_value");
    }
}

// (batch, q_heads, kv_heads, q_len, kv_len, head_size, v_head_size)
const int64_t kShapes[][7] = {{1, 1, 1, 1, 1, 1, 1},    {2, 3, 3, 5, 7, 8, 8},     {1, 4, 2, 17, 17, 16, 16},
                              {2, 8, 1, 9, 33, 64, 32}, {1, 2, 2, 65, 65, 24, 40}, {3, 6, 3, 1, 70, 32, 32},
                              {1, 5, 5, 130, 31, 7, 9}};

TEST(AttentionOps, MatchesSoftmaxReference) {
    uint32_t seed = 10;
    for (const auto& s : kShapes) {
        for (bool packed : {false, true}) {
            for (Mask mask : {Mask::None, Mask::Float2d, Mask::Float4d, Mask::Bool2d}) {
                AttentionCase c{s[0], s[1], s[2], s[3], s[4], s[5], s[6]};
                c.packed = packed;
                c.mask = mask;
                run_attention_case(c, seed += 7);
                if (HasFatalFailure()) return;
            }
        }
    }
}

TEST(AttentionOps, CausalMatchesReference) {
    uint32_t seed = 500;
    for (const auto& s : kShapes) {
        for (Mask mask : {Mask::None, Mask::Float2d, Mask::Bool2d}) {
            AttentionCase c{s[0], s[1], s[2], s[3], s[3], s[5], s[6]};  // square: kv_len = q_len
            c.packed = mask == Mask::Float2d;
            c.mask = mask;
            c.causal = true;
            run_attention_case(c, seed += 7);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(AttentionOps, ScaleAttributeAndPastCache) {
    uint32_t seed = 900;
    for (const auto& s : kShapes) {
        for (int64_t past : {0, 1, 6}) {
            AttentionCase c{s[0], s[1], s[2], s[3], s[4], s[5], s[6]};
            c.past = past;
            c.scale = 0.3f;
            c.mask = past == 1 ? Mask::Float4d : Mask::None;
            run_attention_case(c, seed += 7);
            if (HasFatalFailure()) return;
        }
    }
}

}  // namespace
}  // namespace tessera::cpu
