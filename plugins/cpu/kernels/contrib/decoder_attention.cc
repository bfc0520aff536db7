// CPU provider, com.microsoft operators of LLM decoders (what onnxruntime-genai's builder and the transformer
// optimizer write for Llama/Mistral/Phi-style models):
//
//   RotaryEmbedding (input, position_ids, cos_cache, sin_cache): rotary position embedding of (B, S, hidden) or
//       (B, heads, S, head) tensors; position_ids (B, S), or one start position.
//   GroupQueryAttention (query, key?, value?, past_key?, past_value?, seqlens_k, total_sequence_length, cos_cache?,
//       sin_cache?, position_ids?): causal attention of num_heads query heads over kv_num_heads key/value heads,
//       with a key/value cache (B, kv_heads, length, head) that the new tokens are appended to per batch entry,
//       optional rotary embedding of Q and K, a sliding window (local_window_size) and softcap.  query alone holds
//       Q, K and V packed when key and value are omitted.
//
// Per batch entry b, seqlens_k[b] + 1 keys are valid; the new tokens sit right after the cached ones, at positions
// seqlens_k[b] + 1 - S onwards, except in the first prompt (S == total_sequence_length), where they start at 0
// and shorter entries are padded at the end.  The attention runs on the fused core of
// kernels/transformer/attention_core.h with the queries' absolute positions as its causal frontier.
//
// Rotation follows onnxruntime's x86 arithmetic (kernels/contrib/rotary_tables.h).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "kernels/contrib/decoder_tokens.h"
#include "kernels/contrib/rotary_tables.h"
#include "kernels/transformer/attention_core.h"
#include "util/compute_cast.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

namespace {

using namespace attention_core;

// ---- RotaryEmbedding -------------------------------------------------------------------------------------------

class RotaryEmbeddingKernel final : public Kernel {
public:
    explicit RotaryEmbeddingKernel(const NodeInfo& info)
        : interleaved_(info.attr_int("interleaved", 0) != 0),
          heads_(info.attr_int("num_heads", 0)),
          rotary_dim_(info.attr_int("rotary_embedding_dim", 0)) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "RotaryEmbedding";
        const Tensor& input = ctx.input(0);
        const Tensor& position_ids = ctx.input(1);
        ThreadPool& pool = ctx.pool();
        const RotaryTables tables(op, ctx.input(2), ctx.input(3), pool);
        if (input.rank() != 3 && input.rank() != 4)
            throw KernelError(op + ": input " + shape_string(input.shape) + " must be 3-D or 4-D");
        if (position_ids.type != TESS_ELEMENT_INT64) throw_unsupported_type(op + " position_ids", position_ids.type);
        const int64_t B = input.shape[0];
        const bool bnsh = input.rank() == 4;
        const int64_t S = bnsh ? input.shape[2] : input.shape[1];
        const int64_t rotary_dim = rotary_dim_ > 0 ? rotary_dim_ : 2 * tables.half;
        if (rotary_dim != 2 * tables.half)
            throw KernelError(op + ": rotary_embedding_dim " + std::to_string(rotary_dim) +
                              " does not match the caches' " + std::to_string(2 * tables.half));
        int64_t heads = bnsh ? input.shape[1] : heads_, head = bnsh ? input.shape[3] : 0;
        if (!bnsh) {
            if (heads == 0) heads = input.shape[2] / rotary_dim;
            if (heads <= 0 || input.shape[2] % heads != 0)
                throw KernelError(op + ": hidden size " + std::to_string(input.shape[2]) + " is not a whole number of " +
                                  std::to_string(heads) + " heads");
            head = input.shape[2] / heads;
        }
        if (rotary_dim > head) throw KernelError(op + ": rotary_embedding_dim exceeds the head size");
        if (position_ids.size() != 1 && position_ids.shape != Shape{B, S})
            throw KernelError(op + ": position_ids " + shape_string(position_ids.shape) + " must be (1) or (B, S)");
        const int64_t* ids = position_ids.ptr<int64_t>();
        auto position = [&](int64_t b, int64_t s) { return position_ids.size() == 1 ? ids[0] + s : ids[b * S + s]; };
        for (int64_t b = 0; b < B; ++b)
            for (int64_t s = 0; s < S; ++s) tables.check_position(op, position(b, s));
        const ConvertedInput<float> x(input, pool);
        ConvertedOutput<float> y(ctx.output(0, input.type, input.shape));
        std::copy_n(x.data(), input.size(), y.data());
        pool.parallel_for(B * S, 1, [&](int64_t first, int64_t last) {
            for (int64_t bs = first; bs < last; ++bs) {
                const int64_t b = bs / S, s = bs % S;
                const int64_t pos = position(b, s);
                for (int64_t h = 0; h < heads; ++h) {
                    const int64_t at = bnsh ? ((b * heads + h) * S + s) * head : (b * S + s) * heads * head + h * head;
                    tables.rotate(y.data() + at, pos, interleaved_);
                }
            }
        });
        y.finish(pool);
    }

private:
    bool interleaved_;
    int64_t heads_, rotary_dim_;
};

// ---- GroupQueryAttention -----------------------------------------------------------------------------------------

class GroupQueryAttentionKernel final : public Kernel {
public:
    explicit GroupQueryAttentionKernel(const NodeInfo& info)
        : heads_(info.attr_int("num_heads")),
          kv_heads_(info.attr_int("kv_num_heads")),
          scale_(info.attr_float("scale", 0.0f)),
          softcap_(info.attr_float("softcap", 0.0f)),
          rotary_(info.attr_int("do_rotary", 0) != 0),
          interleaved_(info.attr_int("rotary_interleaved", 0) != 0),
          window_(info.attr_int("local_window_size", -1)) {
        if (heads_ <= 0 || kv_heads_ <= 0 || heads_ % kv_heads_ != 0)
            throw KernelError("GroupQueryAttention: num_heads must be a positive multiple of kv_num_heads");
        if (info.attr_int("smooth_softmax", 0) != 0 || info.has_input(11))
            throw KernelError("GroupQueryAttention: smooth_softmax and head_sink are not supported");
        if (info.has_input(10)) throw KernelError("GroupQueryAttention: attention_bias is not supported");
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "GroupQueryAttention";
        ThreadPool& pool = ctx.pool();
        const Tensor& query = ctx.input(0);
        const DecoderTokens tokens(op, ctx, heads_, kv_heads_);
        const int64_t B = tokens.batch(), S = tokens.length(), head = tokens.head_size(), q_hidden = tokens.q_hidden();

        // Per batch entry: how many keys are valid and where the new tokens start.
        const Tensor& seqlens = ctx.input(5);
        const Tensor& total_in = ctx.input(6);
        if (seqlens.type != TESS_ELEMENT_INT32 || seqlens.size() != B)
            throw KernelError(op + ": seqlens_k must be int32 (" + std::to_string(B) + ")");
        if (total_in.type != TESS_ELEMENT_INT32 || total_in.size() != 1)
            throw KernelError(op + ": total_sequence_length must be an int32 scalar");
        const int64_t total = total_in.ptr<int32_t>()[0];
        const bool first_prompt = S == total;
        int64_t past_capacity = 0;
        if (ctx.has_input(3)) {
            const Tensor& pk = ctx.input(3);
            if (pk.rank() != 4 || pk.shape[0] != B || pk.shape[1] != kv_heads_ || pk.shape[3] != head ||
                ctx.input(4).shape != pk.shape)
                throw KernelError(op + ": past_key/past_value " + shape_string(pk.shape) + " must be (" +
                                  std::to_string(B) + ", " + std::to_string(kv_heads_) + ", length, " +
                                  std::to_string(head) + ")");
            past_capacity = pk.shape[2];
        }
        const int64_t present_len = std::max(total, past_capacity);
        int64_t* valid = thread_scratch_buffer<int64_t, 29>(2 * B);
        int64_t* starts = valid + B;
        for (int64_t b = 0; b < B; ++b) {
            valid[b] = static_cast<int64_t>(seqlens.ptr<int32_t>()[b]) + 1;
            starts[b] = first_prompt ? 0 : valid[b] - S;
            if (valid[b] < 1 || valid[b] > present_len || starts[b] < 0 || starts[b] > past_capacity)
                throw KernelError(op + ": seqlens_k[" + std::to_string(b) + "] = " + std::to_string(valid[b] - 1) +
                                  " does not fit " + std::to_string(S) + " new tokens after a cache of " +
                                  std::to_string(past_capacity));
        }

        // Q (rotated) in scratch; the new K (rotated) and V appended to each entry's cache in present.
        const std::optional<RotaryTables> tables = rotary_tables_of(op, ctx, rotary_, 7, head);
        const int64_t* position_ids = nullptr;
        if (ctx.has_input(9)) {
            const Tensor& p = ctx.input(9);
            if (p.type != TESS_ELEMENT_INT64 || p.shape != Shape{B, S})
                throw KernelError(op + ": position_ids must be int64 (B, S)");
            position_ids = p.ptr<int64_t>();
        }
        auto position = [&](int64_t b, int64_t s) { return position_ids ? position_ids[b * S + s] : starts[b] + s; };
        if (tables)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t s = 0; s < S; ++s) tables->check_position(op, position(b, s));

        float* q = thread_scratch_buffer<float, 30>(B * S * q_hidden);
        ConvertedOutput<float> present_k, present_v;
        const Shape present_shape{B, kv_heads_, present_len, head};
        const bool want_k = ctx.output_count() > 1 && ctx.output_wanted(1);
        const bool want_v = ctx.output_count() > 2 && ctx.output_wanted(2);
        if (want_k) present_k = ConvertedOutput<float>(ctx.output(1, query.type, present_shape));
        if (want_v) present_v = ConvertedOutput<float>(ctx.output(2, query.type, present_shape));
        const int64_t cache_size = B * kv_heads_ * present_len * head;
        float* k_cache = want_k ? present_k.data() : thread_scratch_buffer<float, 31>(cache_size);
        float* v_cache = want_v ? present_v.data() : thread_scratch_buffer<float, 32>(cache_size);
        std::optional<ConvertedInput<float>> past_k, past_v;
        if (past_capacity > 0) {
            past_k.emplace(ctx.input(3), pool);
            past_v.emplace(ctx.input(4), pool);
        }
        pool.parallel_for(B * kv_heads_, 1, [&](int64_t first, int64_t last) {
            for (int64_t bh = first; bh < last; ++bh) {
                const int64_t b = bh / kv_heads_, h = bh % kv_heads_;
                float* kc = k_cache + bh * present_len * head;
                float* vc = v_cache + bh * present_len * head;
                const int64_t keep = starts[b];
                if (keep > 0) {
                    std::copy_n(past_k->data() + bh * past_capacity * head, keep * head, kc);
                    std::copy_n(past_v->data() + bh * past_capacity * head, keep * head, vc);
                }
                for (int64_t s = 0; s < S; ++s) {
                    std::copy_n(tokens.k(b, s) + h * head, head, kc + (keep + s) * head);
                    std::copy_n(tokens.v(b, s) + h * head, head, vc + (keep + s) * head);
                    if (tables) tables->rotate(kc + (keep + s) * head, position(b, s), interleaved_);
                }
                std::fill(kc + (keep + S) * head, kc + present_len * head, 0.0f);
                std::fill(vc + (keep + S) * head, vc + present_len * head, 0.0f);
            }
        });
        pool.parallel_for(B * S, 1, [&](int64_t first, int64_t last) {
            for (int64_t bs = first; bs < last; ++bs) {
                const int64_t b = bs / S, s = bs % S;
                float* dst = q + bs * q_hidden;
                std::copy_n(tokens.q(b, s), q_hidden, dst);
                if (tables)
                    for (int64_t h = 0; h < heads_; ++h) tables->rotate(dst + h * head, position(b, s), interleaved_);
            }
        });

        AttentionDims d;
        d.batch = B;
        d.q_heads = heads_;
        d.kv_heads = kv_heads_;
        d.q_len = S;
        d.kv_len = present_len;
        d.head_size = d.v_head_size = head;
        ScoreEpilogue<float> epilogue;
        epilogue.softcap = softcap_;
        epilogue.bias.causal = true;
        epilogue.bias.valid_keys = valid;
        epilogue.bias.positions = starts;
        epilogue.bias.q_len = S;
        if (window_ > 0) epilogue.bias.left_window = window_ - 1;
        ConvertedOutput<float> y(ctx.output(0, query.type, {B, S, q_hidden}));
        const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(head));
        run_fused_attention<float>(pool, d, scale, Heads<const float>{q, HeadLayout::bshd(heads_, S, head)},
                                   Heads<const float>{k_cache, HeadLayout::bhsd(kv_heads_, present_len, head)},
                                   Heads<const float>{v_cache, HeadLayout::bhsd(kv_heads_, present_len, head)},
                                   Heads<float>{y.data(), HeadLayout::bshd(heads_, S, head)}, epilogue);
        y.finish(pool);
        present_k.finish(pool);
        present_v.finish(pool);
    }

private:
    int64_t heads_, kv_heads_;
    float scale_, softcap_;
    bool rotary_, interleaved_;
    int64_t window_;
};

}  // namespace

void register_contrib_decoder_attention_kernels(KernelRegistry& registry) {
    using namespace contrib;
    add(registry, "RotaryEmbedding", {{0, kFloat32Or16}}, make_factory<RotaryEmbeddingKernel>());
    add(registry, "GroupQueryAttention", {{0, kFloat32Or16}}, make_factory<GroupQueryAttentionKernel>());
}

}  // namespace tessera::cpu
