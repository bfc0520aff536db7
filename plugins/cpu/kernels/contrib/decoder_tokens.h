// CPU provider: the new tokens of the decoder attention operators (GroupQueryAttention in decoder_attention.cc,
// SparseAttention in sparse_attention.cc), which take them alike: query (B, S, num_heads * head) with key and value
// (B, S, kv_num_heads * head), or all three packed in query (B, S, (num_heads + 2 * kv_num_heads) * head) when key
// and value are absent.  Converted to float once; q/k/v(b, s) point at token s of batch entry b (its heads one after
// the other).
#pragma once

#include <optional>
#include <string>

#include "runtime/kernel.h"
#include "util/compute_cast.h"

namespace tessera::cpu {

class DecoderTokens {
public:
    // Inputs 0, 1 and 2 of ctx; throws KernelError (prefixed with `op`) for shapes that do not fit.
    DecoderTokens(const std::string& op, KernelContext& ctx, int64_t heads, int64_t kv_heads) {
        const Tensor& query = ctx.input(0);
        if (query.rank() != 3) throw KernelError(op + ": query " + shape_string(query.shape) + " must be (B, S, hidden)");
        batch_ = query.shape[0];
        length_ = query.shape[1];
        stride_ = query.shape[2];
        packed_ = !ctx.has_input(1);
        if (packed_ == ctx.has_input(2))
            throw KernelError(op + ": key and value must be both present or both absent (packed QKV)");
        const int64_t heads_in_query = packed_ ? heads + 2 * kv_heads : heads;
        head_ = stride_ / heads_in_query;
        if (head_ <= 0 || heads_in_query * head_ != stride_)
            throw KernelError(op + ": query's hidden size " + std::to_string(stride_) +
                              " is not a whole number of heads");
        q_hidden_ = heads * head_;
        kv_hidden_ = kv_heads * head_;
        q_.emplace(query, ctx.pool());
        if (packed_) return;
        const Shape expected{batch_, length_, kv_hidden_};
        if (ctx.input(1).shape != expected || ctx.input(2).shape != expected)
            throw KernelError(op + ": key and value must be " + shape_string(expected));
        k_.emplace(ctx.input(1), ctx.pool());
        v_.emplace(ctx.input(2), ctx.pool());
    }

    int64_t batch() const { return batch_; }
    int64_t length() const { return length_; }  // S, the new tokens per entry
    int64_t head_size() const { return head_; }
    int64_t q_hidden() const { return q_hidden_; }
    int64_t kv_hidden() const { return kv_hidden_; }

    const float* q(int64_t b, int64_t s) const { return q_->data() + (b * length_ + s) * stride_; }
    const float* k(int64_t b, int64_t s) const {
        return packed_ ? q(b, s) + q_hidden_ : k_->data() + (b * length_ + s) * kv_hidden_;
    }
    const float* v(int64_t b, int64_t s) const {
        return packed_ ? q(b, s) + q_hidden_ + kv_hidden_ : v_->data() + (b * length_ + s) * kv_hidden_;
    }

private:
    int64_t batch_ = 0, length_ = 0, stride_ = 0, head_ = 0, q_hidden_ = 0, kv_hidden_ = 0;
    bool packed_ = false;
    std::optional<ConvertedInput<float>> q_, k_, v_;
};

}  // namespace tessera::cpu
