// CPU provider, com.microsoft Attention (and QAttention, its quantize_dynamic form): the BERT/GPT-2 attention block
// that onnxruntime's transformer optimizer fuses, projection included; and MultiHeadAttention.
//
//   inputs   input (B, S, input_hidden), weights (input_hidden, q + k + v hidden), bias? (q + k + v),
//            mask_index? (int32), past? (2, B, H, P, head), attention_bias? (B or 1, H or 1, S, P + S),
//            past_sequence_length? (not used: past and present never share a buffer here)
//   outputs  output (B, S, v_hidden), present? (2, B, H, P + S, head)
//   attrs    num_heads, unidirectional (0), qkv_hidden_sizes, mask_filter_value (-10000), scale (1/sqrt(head))
//
// As in onnxruntime, masking adds mask_filter_value (not -inf) to the scores of the keys a query may not see:
//   mask_index (B): the first end[b] keys are valid;  (2B): keys [start[b], end[b]);
//   (B, P + S): 1 keeps a key, 0 masks it;  (B, S, P + S): the same per query row;  (B, 1, M, M): rows P..P+S-1 of
//   a max-length mask;  unidirectional: key j of query row i is masked when j > P + i.
// The projection runs on the packed float GEMM (the weights packed once); the attention itself on the fused core
// shared with ONNX's Attention (kernels/transformer/attention_core.h), one block of query rows per task.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "kernels/quantization/integer_matmul.h"
#include "kernels/transformer/attention_core.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

using namespace attention_core;

// What is added to every score: mask_filter_value where the mask input (mask_input) or unidirectional hides a key, 0
// elsewhere, plus the attention_bias input (bias_input); [B, S, total] or, with attention_bias, [B, heads, S,
// total], in the calling thread's scratch.  Null when nothing is added.
struct MaskSpec {
    std::string op;
    size_t mask_input, bias_input;
    int64_t heads;
    bool unidirectional;
    float mask_filter_value;
};

const float* additive_mask(KernelContext& ctx, const MaskSpec& spec, int64_t B, int64_t S, int64_t past,
                           int64_t total) {
    const std::string& op = spec.op;
    const int64_t heads = spec.heads;
    const bool has_mask = ctx.has_input(spec.mask_input), has_bias = ctx.has_input(spec.bias_input);
    if (!has_mask && !has_bias && !spec.unidirectional) return nullptr;
    const int64_t H = has_bias ? heads : 1;
    float* out = thread_scratch_buffer<float, 28>(B * H * S * total);
    float* base = out;  // [B, S, total] for head 0; copied to the other heads below
    std::fill_n(base, B * S * total, 0.0f);
    auto hide = [&](int64_t b, int64_t i, int64_t j) { base[(b * S + i) * total + j] = spec.mask_filter_value; };
    if (has_mask) {
        const Tensor& m = ctx.input(spec.mask_input);
        if (m.type != TESS_ELEMENT_INT32) throw_unsupported_type(op + " mask", m.type);
        const int32_t* mi = m.ptr<int32_t>();
        if (m.rank() == 1 && (m.shape[0] == B || m.shape[0] == 2 * B)) {
            for (int64_t b = 0; b < B; ++b) {
                const int64_t end = std::clamp<int64_t>(mi[b], 0, total);
                const int64_t start = m.shape[0] == 2 * B ? std::clamp<int64_t>(mi[B + b], 0, total) : 0;
                for (int64_t i = 0; i < S; ++i)
                    for (int64_t j = 0; j < total; ++j)
                        if (j < start || j >= end) hide(b, i, j);
            }
        } else if (m.rank() == 2 && m.shape[0] == B && m.shape[1] == total) {
            for (int64_t b = 0; b < B; ++b)
                for (int64_t i = 0; i < S; ++i)
                    for (int64_t j = 0; j < total; ++j)
                        if (mi[b * total + j] <= 0) hide(b, i, j);
        } else if (m.rank() == 3 && m.shape[0] == B && m.shape[1] == S && m.shape[2] == total) {
            for (int64_t b = 0; b < B; ++b)
                for (int64_t i = 0; i < S; ++i)
                    for (int64_t j = 0; j < total; ++j)
                        if (mi[(b * S + i) * total + j] <= 0) hide(b, i, j);
        } else if (m.rank() == 4 && m.shape[0] == B && m.shape[1] == 1 && m.shape[2] >= total &&
                   m.shape[3] >= total) {
            const int64_t max_len = m.shape[3];
            for (int64_t b = 0; b < B; ++b)
                for (int64_t i = 0; i < S; ++i)
                    for (int64_t j = 0; j < total; ++j)
                        if (mi[(b * m.shape[2] + past + i) * max_len + j] <= 0) hide(b, i, j);
        } else {
            throw KernelError(op + ": mask " + shape_string(m.shape) + " is none of (B), (2B), (B, " +
                              "total), (B, S, total), (B, 1, max, max) for B " + std::to_string(B) + ", S " +
                              std::to_string(S) + ", total " + std::to_string(total));
        }
    }
    if (spec.unidirectional)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < S; ++i)
                for (int64_t j = past + i + 1; j < total; ++j) hide(b, i, j);
    if (!has_bias) return out;
    // Spread over the heads (from the back, so that head 0's rows are read before being overwritten) and add
    // attention_bias, broadcast over batch and heads.
    const Tensor& bias_in = ctx.input(spec.bias_input);
    if (bias_in.rank() != 4 || (bias_in.shape[0] != 1 && bias_in.shape[0] != B) ||
        (bias_in.shape[1] != 1 && bias_in.shape[1] != heads) || bias_in.shape[2] != S || bias_in.shape[3] != total)
        throw KernelError(op + ": attention_bias " + shape_string(bias_in.shape) + " must be (B or 1, heads or 1, " +
                          std::to_string(S) + ", " + std::to_string(total) + ")");
    const ConvertedInput<float> bias(bias_in, ctx.pool());
    const int64_t plane = S * total;
    for (int64_t b = B - 1; b >= 0; --b)
        for (int64_t h = heads - 1; h >= 0; --h) {
            float* dst = out + (b * heads + h) * plane;
            const float* src = base + b * plane;
            const float* add = bias.data() + ((bias_in.shape[0] == 1 ? 0 : b) * bias_in.shape[1] +
                                              (bias_in.shape[1] == 1 ? 0 : h)) * plane;
            for (int64_t e = plane - 1; e >= 0; --e) dst[e] = src[e] + add[e];
        }
    return out;
}

struct Shapes {
    int64_t batch, q_len, past, total, head, v_head;  // total: keys in the cache, past ones included
};

// The attention once Q and the whole key/value cache are in place: output 0 (B, S, heads * v_head) = softmax(scale *
// Q K^T + additive_mask(spec)) V on the fused core (scale_attribute 0: 1 / sqrt(head)).
void attend(KernelContext& ctx, const MaskSpec& spec, const Shapes& shapes, float scale_attribute, int32_t out_type,
            const Heads<const float>& q, const Heads<const float>& k, const Heads<const float>& v) {
    const int64_t B = shapes.batch, S = shapes.q_len, heads = spec.heads, total = shapes.total;
    AttentionDims d;
    d.batch = B;
    d.q_heads = d.kv_heads = heads;
    d.q_len = S;
    d.kv_len = total;
    d.head_size = shapes.head;
    d.v_head_size = shapes.v_head;
    ScoreEpilogue<float> epilogue;
    epilogue.bias.q_len = S;
    if (const float* mask = additive_mask(ctx, spec, B, S, shapes.past, total)) {
        const bool per_head = ctx.has_input(spec.bias_input);  // attention_bias made the mask per head
        epilogue.bias.mask = mask;
        epilogue.bias.mask_strides[0] = (per_head ? heads : 1) * S * total;
        epilogue.bias.mask_strides[1] = per_head ? S * total : 0;
        epilogue.bias.mask_strides[2] = total;
        epilogue.bias.mask_columns = total;
    }
    ConvertedOutput<float> y(ctx.output(0, out_type, {B, S, heads * shapes.v_head}));
    const float scale = scale_attribute != 0.0f ? scale_attribute : 1.0f / std::sqrt(static_cast<float>(shapes.head));
    run_fused_attention<float>(ctx.pool(), d, scale, q, k, v,
                               Heads<float>{y.data(), HeadLayout::bshd(heads, S, shapes.v_head)}, epilogue);
    y.finish(ctx.pool());
}

// Attention and QAttention.  QAttention is Attention whose projection is an integer product: input (8-bit, with
// input_scale and input_zero_point) x weight (8-bit, weight_scale and weight_zero_point per tensor or per column),
// scaled back to float and the bias added (a multiply, then an add, as onnxruntime's output processor does); its
// inputs are input, weight, bias, input_scale, weight_scale, mask_index?, input_zero_point?, weight_zero_point?,
// past?.
class MicrosoftAttentionKernel final : public Kernel {
public:
    MicrosoftAttentionKernel(const NodeInfo& info, bool quantized)
        : quantized_(quantized),
          op_(quantized ? "QAttention" : "Attention"),
          mask_input_(quantized ? 5 : 3),
          past_input_(quantized ? 8 : 4),
          attention_bias_input_(quantized ? kAbsent : 5),
          quantized_weights_(info, 1),
          heads_(info.attr_int("num_heads")),
          unidirectional_(info.attr_int("unidirectional", 0) != 0),
          hidden_sizes_(info.attr_ints("qkv_hidden_sizes")),
          mask_filter_value_(info.attr_float("mask_filter_value", -10000.0f)),
          scale_(info.attr_float("scale", 0.0f)) {
        if (heads_ <= 0) throw KernelError("Attention: num_heads must be positive");
        if (info.attr_int("do_rotary", 0) != 0) throw KernelError("Attention: do_rotary is not supported");
        if (!hidden_sizes_.empty() && hidden_sizes_.size() != 3)
            throw KernelError("Attention: qkv_hidden_sizes must hold three values");
        if (!hidden_sizes_.empty() && hidden_sizes_[1] != hidden_sizes_[0])
            throw KernelError("Attention: qkv_hidden_sizes must give Q and K the same size");
        if (const std::optional<Tensor> w = quantized ? std::nullopt : info.constant_tensor(1);
            w && w->type == TESS_ELEMENT_FLOAT32 && w->rank() == 2 && packed_gemm_supported()) {
            packed_weights_ = PackedColumns(w->ptr<float>(), false, w->shape[0], w->shape[1], w->shape[1]);
        }
    }

    void compute(KernelContext& ctx) const override {
        const std::string& op = op_;
        const Tensor& input = ctx.input(0);
        const Tensor& weights = quantized_ ? quantized_weights_.tensor(ctx) : ctx.input(1);
        if (input.rank() != 3) throw KernelError(op + ": input " + shape_string(input.shape) + " must be (B, S, hidden)");
        if (weights.rank() != 2 || weights.shape[0] != input.shape[2])
            throw KernelError(op + ": weights " + shape_string(weights.shape) + " must be (" +
                              std::to_string(input.shape[2]) + ", q + k + v hidden)");
        const int64_t B = input.shape[0], S = input.shape[1], in_hidden = input.shape[2], width = weights.shape[1];
        const int64_t q_hidden = hidden_sizes_.empty() ? width / 3 : hidden_sizes_[0];
        const int64_t v_hidden = hidden_sizes_.empty() ? width / 3 : hidden_sizes_[2];
        if (2 * q_hidden + v_hidden != width || q_hidden % heads_ != 0 || v_hidden % heads_ != 0)
            throw KernelError(op + ": the weights' " + std::to_string(width) +
                              " columns do not split into Q, K and V of whole heads (num_heads " +
                              std::to_string(heads_) + ")");
        const int64_t head = q_hidden / heads_, v_head = v_hidden / heads_;
        ThreadPool& pool = ctx.pool();

        // Q, K and V side by side: [B * S, width] = input x weights + bias.
        float* qkv = thread_scratch_buffer<float, 26>(B * S * width);
        if (quantized_) {
            project_quantized(ctx, input, weights, width, qkv);
        } else if (const ConvertedInput<float> x(input, pool);
                   !packed_weights_.empty() && weights.type == TESS_ELEMENT_FLOAT32 &&
                   packed_weights_.depth() == in_hidden && packed_weights_.cols() == width) {
            gemm_prepacked(pool, false, B * S, in_hidden, 1.0f, x.data(), in_hidden, packed_weights_, 0.0f, qkv, width);
        } else {
            const ConvertedInput<float> w(weights, pool);
            gemm<float>(pool, false, false, B * S, width, in_hidden, 1.0f, x.data(), in_hidden, w.data(), width, 0.0f,
                        qkv, width);
        }
        if (!quantized_ && ctx.has_input(2)) {
            const Tensor& bias_in = ctx.input(2);
            if (bias_in.size() != width) throw KernelError(op + ": bias must hold " + std::to_string(width) + " values");
            const ConvertedInput<float> bias(bias_in, pool);
            pool.parallel_for(B * S, std::max<int64_t>(1, 8192 / width), [&](int64_t first, int64_t last) {
                for (int64_t r = first; r < last; ++r)
                    for (int64_t c = 0; c < width; ++c) qkv[r * width + c] += bias.data()[c];
            });
        }
        const HeadLayout packed{S * width, head, width};
        Heads<const float> q{qkv, packed};
        Heads<const float> k{qkv + q_hidden, packed};
        Heads<const float> v{qkv + 2 * q_hidden, HeadLayout{S * width, v_head, width}};

        // The cache: past followed by the new keys and values, in present when it is wanted.
        int64_t past = 0;
        std::optional<ConvertedInput<float>> past_in;
        if (ctx.has_input(past_input_)) {
            const Tensor& p = ctx.input(past_input_);
            if (p.rank() != 5 || p.shape[0] != 2 || p.shape[1] != B || p.shape[2] != heads_ || p.shape[4] != head ||
                head != v_head)
                throw KernelError(op + ": past " + shape_string(p.shape) + " must be (2, " + std::to_string(B) + ", " +
                                  std::to_string(heads_) + ", past, " + std::to_string(head) + ")");
            past = p.shape[3];
            past_in.emplace(p, pool);
        }
        const int64_t total = past + S;
        const int32_t out_type = quantized_ ? TESS_ELEMENT_FLOAT32 : input.type;
        ConvertedOutput<float> present;
        if (ctx.output_count() > 1 && ctx.output_wanted(1)) {
            if (head != v_head) throw KernelError(op + ": present needs Q, K and V heads of one size");
            present = ConvertedOutput<float>(ctx.output(1, out_type, {2, B, heads_, total, head}));
        }
        if (past > 0 || present) {
            float* cache = present ? present.data() : thread_scratch_buffer<float, 27>(2 * B * heads_ * total * head);
            const float* past_data = past_in ? past_in->data() : nullptr;
            const int64_t half = B * heads_ * total * head, past_half = B * heads_ * past * head;
            concat_cache(pool, B, heads_, past, past_data, S, k, head, cache);
            concat_cache(pool, B, heads_, past, past_data ? past_data + past_half : nullptr, S, v, head, cache + half);
            k = Heads<const float>{cache, HeadLayout::bhsd(heads_, total, head)};
            v = Heads<const float>{cache + half, HeadLayout::bhsd(heads_, total, head)};
        }

        attend(ctx, MaskSpec{op, mask_input_, attention_bias_input_, heads_, unidirectional_, mask_filter_value_},
               Shapes{B, S, past, total, head, v_head}, scale_, out_type, q, k, v);
        present.finish(pool);
    }

private:
    // qkv = float((input - input_zero) x (weight - weight_zero)) * (input_scale * weight_scale) + bias.
    void project_quantized(KernelContext& ctx, const Tensor& input, const Tensor& weights, int64_t width,
                           float* qkv) const {
        using namespace quant;
        const std::string& op = op_;
        check_8bit(op, "input", input);
        check_8bit(op, "weight", weights);
        const Tensor& bias = ctx.input(2);
        const Tensor& input_scale = ctx.input(3);
        const Tensor& weight_scale = ctx.input(4);
        if (bias.type != TESS_ELEMENT_FLOAT32 || bias.size() != width)
            throw KernelError(op + ": bias must be float of " + std::to_string(width) + " values");
        if (input_scale.type != TESS_ELEMENT_FLOAT32 || input_scale.size() != 1 ||
            weight_scale.type != TESS_ELEMENT_FLOAT32 || (weight_scale.size() != 1 && weight_scale.size() != width))
            throw KernelError(op + ": input_scale must be a float scalar and weight_scale a scalar or per column");
        const MatMulPlan plan = plan_matmul(input.shape, weights.shape, op);
        ZeroPoints a_zero = ZeroPoints::load(op, ctx.has_input(6) ? &ctx.input(6) : nullptr, input);
        ZeroPoints b_zero = ZeroPoints::load(op, ctx.has_input(7) ? &ctx.input(7) : nullptr, weights);
        if (a_zero.values.size() != 1) throw KernelError(op + ": input_zero_point must be a scalar");
        if (ctx.has_input(7))
            b_zero.index = matrix_param_index(op, "weight_zero_point", ctx.input(7).shape, weights.shape,
                                              MatrixSide::B);
        auto* sums = reinterpret_cast<int32_t*>(qkv);
        integer_matmul(ctx.pool(), plan, input, a_zero, weights, b_zero, quantized_weights_.get(), sums);
        const float is = input_scale.ptr<float>()[0];
        const float* ws = weight_scale.ptr<float>();
        const bool per_column = weight_scale.size() != 1;
        const float* b = bias.ptr<float>();
        const int64_t rows = plan.batch * plan.M;
        ctx.pool().parallel_for(rows, std::max<int64_t>(1, 8192 / width), [&](int64_t first, int64_t last) {
            for (int64_t r = first; r < last; ++r)
                for (int64_t c = 0; c < width; ++c) {
                    const float product = static_cast<float>(sums[r * width + c]) * (is * ws[per_column ? c : 0]);
                    qkv[r * width + c] = product + b[c];  // a multiply, then an add: this file is built without FMA
                }
        });
    }

    static constexpr size_t kAbsent = 1000;  // an input index no node has

    bool quantized_;
    std::string op_;
    size_t mask_input_, past_input_, attention_bias_input_;
    quant::PrepackedB quantized_weights_;  // QAttention's constant int8 weight, packed once
    int64_t heads_;
    bool unidirectional_;
    std::vector<int64_t> hidden_sizes_;
    float mask_filter_value_;
    float scale_;
    PackedColumns packed_weights_;
};

// com.microsoft MultiHeadAttention: attention over already projected Q, K and V (the optimizer's form for
// cross-attention and for decoders with a cache).
//   query (B, S, D), or Q, K and V packed (B, S, N, 3, H) when key and value are omitted;
//   key/value (B, L, D) / (B, L, Dv), or (B, N, L, H) used as the whole key/value (no bias, no past);
//   bias? (D + D + Dv) added to the 3-D Q, K, V;  key_padding_mask? (B) lengths, (B, T), (B, S, T);
//   attention_bias? (B or 1, N or 1, S, T);  past_key/past_value? (B, N, P, H) before the new keys.
//   outputs: output (B, S, Dv), present_key/present_value? (B, N, P + L, H).
class MultiHeadAttentionKernel final : public Kernel {
public:
    explicit MultiHeadAttentionKernel(const NodeInfo& info)
        : heads_(info.attr_int("num_heads")),
          unidirectional_(info.attr_int("unidirectional", 0) != 0),
          mask_filter_value_(info.attr_float("mask_filter_value", -10000.0f)),
          scale_(info.attr_float("scale", 0.0f)) {
        if (heads_ <= 0) throw KernelError("MultiHeadAttention: num_heads must be positive");
        if (info.has_input(9)) throw KernelError("MultiHeadAttention: cache_indirection (beam search) is not supported");
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "MultiHeadAttention";
        ThreadPool& pool = ctx.pool();
        const Tensor& query = ctx.input(0);
        const int64_t B = query.shape.empty() ? 0 : query.shape[0], S = query.rank() > 1 ? query.shape[1] : 0;
        const ConvertedInput<float> q_in(query, pool);
        std::optional<ConvertedInput<float>> k_in, v_in;
        int64_t head = 0, v_head = 0, L = 0;
        Heads<const float> q, k, v;
        const float* bias = nullptr;
        std::optional<ConvertedInput<float>> bias_in;
        if (ctx.has_input(3)) {
            bias_in.emplace(ctx.input(3), pool);
            bias = bias_in->data();
        }
        if (!ctx.has_input(1)) {  // packed (B, S, N, 3, H)
            if (query.rank() != 5 || query.shape[2] != heads_ || query.shape[3] != 3)
                throw KernelError(op + ": a query without key must be packed (B, S, " + std::to_string(heads_) +
                                  ", 3, H)");
            head = v_head = query.shape[4];
            L = S;
            const int64_t row = heads_ * 3 * head;
            float* qkv = thread_scratch_buffer<float, 26>(B * S * row);
            std::copy_n(q_in.data(), B * S * row, qkv);
            if (bias != nullptr)  // bias is laid out as [Q | K | V], each [N, H]
                for (int64_t t = 0; t < B * S; ++t)
                    for (int64_t n = 0; n < heads_; ++n)
                        for (int64_t part = 0; part < 3; ++part)
                            for (int64_t h = 0; h < head; ++h)
                                qkv[t * row + (n * 3 + part) * head + h] += bias[part * heads_ * head + n * head + h];
            const HeadLayout layout{S * row, 3 * head, row};
            q = {qkv, layout};
            k = {qkv + head, layout};
            v = {qkv + 2 * head, layout};
        } else {
            if (query.rank() != 3 || query.shape[2] % heads_ != 0)
                throw KernelError(op + ": query " + shape_string(query.shape) + " must be (B, S, num_heads * H)");
            head = query.shape[2] / heads_;
            const Tensor& key = ctx.input(1);
            const Tensor& value = ctx.input(2);
            k_in.emplace(key, pool);
            v_in.emplace(value, pool);
            const float* qd = q_in.data();
            if (bias != nullptr) qd = with_bias<30>(q_in.data(), B * S, heads_ * head, bias);
            q = {qd, HeadLayout::bshd(heads_, S, head)};
            if (key.rank() == 4) {  // (B, N, L, H): the whole key and value
                if (key.shape[0] != B || key.shape[1] != heads_ || key.shape[3] != head || value.rank() != 4 ||
                    value.shape[0] != B || value.shape[1] != heads_ || value.shape[2] != key.shape[2])
                    throw KernelError(op + ": key " + shape_string(key.shape) + " and value " +
                                      shape_string(value.shape) + " must be (B, num_heads, L, H)");
                L = key.shape[2];
                v_head = value.shape[3];
                k = {k_in->data(), HeadLayout::bhsd(heads_, L, head)};
                v = {v_in->data(), HeadLayout::bhsd(heads_, L, v_head)};
            } else {
                if (key.rank() != 3 || key.shape[0] != B || key.shape[2] != heads_ * head || value.rank() != 3 ||
                    value.shape[0] != B || value.shape[1] != key.shape[1] || value.shape[2] % heads_ != 0)
                    throw KernelError(op + ": key " + shape_string(key.shape) + " and value " +
                                      shape_string(value.shape) + " must be (B, L, num_heads * H)");
                L = key.shape[1];
                v_head = value.shape[2] / heads_;
                const float* kd = k_in->data();
                const float* vd = v_in->data();
                if (bias != nullptr) {
                    kd = with_bias<31>(kd, B * L, heads_ * head, bias + heads_ * head);
                    vd = with_bias<32>(vd, B * L, heads_ * v_head, bias + 2 * heads_ * head);
                }
                k = {kd, HeadLayout::bshd(heads_, L, head)};
                v = {vd, HeadLayout::bshd(heads_, L, v_head)};
            }
        }

        // The cache: past followed by the new keys and values.
        int64_t past = 0;
        std::optional<ConvertedInput<float>> past_k, past_v;
        if (ctx.has_input(6) && ctx.has_input(7)) {
            const Tensor& pk = ctx.input(6);
            if (pk.rank() != 4 || pk.shape[0] != B || pk.shape[1] != heads_ || pk.shape[3] != head ||
                ctx.input(7).rank() != 4 || ctx.input(7).shape[2] != pk.shape[2] || ctx.input(7).shape[3] != v_head)
                throw KernelError(op + ": past_key/past_value must be (B, num_heads, P, H)");
            past = pk.shape[2];
            past_k.emplace(pk, pool);
            past_v.emplace(ctx.input(7), pool);
        }
        const int64_t total = past + L;
        ConvertedOutput<float> present_k, present_v;
        const bool want_k = ctx.output_count() > 1 && ctx.output_wanted(1);
        const bool want_v = ctx.output_count() > 2 && ctx.output_wanted(2);
        if (want_k) present_k = ConvertedOutput<float>(ctx.output(1, query.type, {B, heads_, total, head}));
        if (want_v) present_v = ConvertedOutput<float>(ctx.output(2, query.type, {B, heads_, total, v_head}));
        if (past > 0 || want_k || want_v) {
            float* kc = want_k ? present_k.data() : thread_scratch_buffer<float, 33>(B * heads_ * total * head);
            float* vc = want_v ? present_v.data() : thread_scratch_buffer<float, 34>(B * heads_ * total * v_head);
            concat_cache(pool, B, heads_, past, past_k ? past_k->data() : nullptr, L, k, head, kc);
            concat_cache(pool, B, heads_, past, past_v ? past_v->data() : nullptr, L, v, v_head, vc);
            k = {kc, HeadLayout::bhsd(heads_, total, head)};
            v = {vc, HeadLayout::bhsd(heads_, total, v_head)};
        }

        attend(ctx, MaskSpec{op, 4, 5, heads_, unidirectional_, mask_filter_value_},
               Shapes{B, S, past, total, head, v_head}, scale_, query.type, q, k, v);
        present_k.finish(pool);
        present_v.finish(pool);
    }

private:
    // rows x width values plus a bias of `width`, in this thread's scratch slot `Slot`.
    template <int Slot>
    static const float* with_bias(const float* x, int64_t rows, int64_t width, const float* bias) {
        float* out = thread_scratch_buffer<float, Slot>(rows * width);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < width; ++c) out[r * width + c] = x[r * width + c] + bias[c];
        return out;
    }

    int64_t heads_;
    bool unidirectional_;
    float mask_filter_value_;
    float scale_;
};

}  // namespace

void register_contrib_attention_kernels(KernelRegistry& registry) {
    using namespace contrib;
    add(registry, "Attention", {{0, kFloat32Or16}, {1, kFloat32Or16}}, factory_with<MicrosoftAttentionKernel>(false));
    add(registry, "QAttention", {{0, k8bit}, {1, k8bit}}, factory_with<MicrosoftAttentionKernel>(true));
    add(registry, "MultiHeadAttention", {{0, kFloat32Or16}}, make_factory<MultiHeadAttentionKernel>());
}

}  // namespace tessera::cpu
