// CPU provider, com.microsoft SparseAttention (Phi-3-small style block-sparse causal attention):
//
//   (query, key?, value?, past_key, past_value, block_row_indices, block_col_indices, total_sequence_length,
//    key_total_sequence_lengths, cos_cache?, sin_cache?) -> (output, present_key, present_value)
//
// num_heads query heads attend over kv_num_heads key/value heads (grouped); query alone holds Q, K and V packed when
// key and value are omitted.  past_key/past_value are a fixed-capacity cache (B, kv_heads, max_cache, head) that
// onnxruntime shares with present_key/present_value: present is past with the new tokens' K (rotated) and V written
// in, every other position of the cache left as it was.
//
// Positions: when S == total_sequence_length (the prompt) the new tokens sit at 0 .. S-1 of every batch entry;
// otherwise entry b has key_total_sequence_lengths[b] keys, the last S of them new.  Query at absolute position p
// attends keys 0 .. p (causal) and, for head h, only the key blocks of sparse_block_size positions that layout
// h % num_layout lists for p's block row (CSR: block_row_indices (num_layout, max_blocks + 1), block_col_indices
// (num_layout, max_nnz)).  As in onnxruntime, a layout whose CSR holds at least the whole lower triangle's count of
// blocks counts as dense, a block row listing exactly row + 1 blocks counts as fully causal, and masked scores
// become the type's lowest value rather than -inf (a row with nothing listed averages its causal keys).
// In the prompt, key_total_sequence_lengths does not shorten the rows: onnxruntime's rows past an entry's length
// read other rows' scores, so only rows within the length are defined; this kernel gives those the causal result.
//
// float16 follows onnxruntime's roundings: rotated Q and K, the scores and the probabilities are rounded to it.
#include <algorithm>
#include <cmath>
#include <limits>
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

const std::string kOp = "SparseAttention";

// The block layouts of block_row_indices / block_col_indices, checked once so that the masking cannot index out of
// range.
struct BlockLayouts {
    const int32_t* rows = nullptr;
    const int32_t* cols = nullptr;
    int64_t count = 0, max_blocks = 0, max_nnz = 0;
    std::vector<char> dense;  // per layout: treated as plain causal attention

    BlockLayouts(const Tensor& row_indices, const Tensor& col_indices, int64_t heads) {
        if (row_indices.type != TESS_ELEMENT_INT32 || col_indices.type != TESS_ELEMENT_INT32)
            throw KernelError(kOp + ": block_row_indices and block_col_indices must be int32");
        if (row_indices.rank() != 2 || row_indices.shape[0] < 1 || row_indices.shape[1] < 2 ||
            heads % row_indices.shape[0] != 0)
            throw KernelError(kOp + ": block_row_indices " + shape_string(row_indices.shape) +
                              " must be (num_layout, max_blocks + 1) with num_heads a multiple of num_layout");
        if (col_indices.rank() != 2 || col_indices.shape[0] != row_indices.shape[0])
            throw KernelError(kOp + ": block_col_indices " + shape_string(col_indices.shape) +
                              " must be (num_layout, max_nnz)");
        rows = row_indices.ptr<int32_t>();
        cols = col_indices.ptr<int32_t>();
        count = row_indices.shape[0];
        max_blocks = row_indices.shape[1] - 1;
        max_nnz = col_indices.shape[1];
        dense.resize(static_cast<size_t>(count));
        for (int64_t l = 0; l < count; ++l) {
            const int32_t* r = row_of(l);
            for (int64_t i = 0; i < max_blocks; ++i)
                if (r[0] < 0 || r[i] > r[i + 1] || r[max_blocks] > max_nnz)
                    throw KernelError(kOp + ": block_row_indices of layout " + std::to_string(l) +
                                      " is not a CSR row index within max_nnz " + std::to_string(max_nnz));
            for (int64_t j = r[0]; j < r[max_blocks]; ++j)
                if (col_of(l)[j] < 0 || col_of(l)[j] >= max_blocks)
                    throw KernelError(kOp + ": block_col_indices of layout " + std::to_string(l) + " holds block " +
                                      std::to_string(col_of(l)[j]) + " outside 0 .. " +
                                      std::to_string(max_blocks - 1));
            dense[l] = r[max_blocks] >= max_blocks * (max_blocks + 1) / 2;
        }
    }

    const int32_t* row_of(int64_t layout) const { return rows + layout * (max_blocks + 1); }
    const int32_t* col_of(int64_t layout) const { return cols + layout * max_nnz; }

    // Marks in `visible` (max_blocks entries) the key blocks block row `row` of `layout` lists.  Returns false when
    // the row is fully causal (no key inside the causal frontier is masked).
    bool mark_row(int64_t layout, int64_t row, char* visible) const {
        if (dense[layout]) return false;
        const int32_t* r = row_of(layout);
        if (r[row + 1] - r[row] == row + 1) return false;
        std::fill_n(visible, max_blocks, 0);
        for (int32_t j = r[row]; j < r[row + 1]; ++j) visible[col_of(layout)[j]] = 1;
        return true;
    }
};

class SparseAttentionKernel final : public Kernel {
public:
    explicit SparseAttentionKernel(const NodeInfo& info)
        : heads_(info.attr_int("num_heads", 0)),
          kv_heads_(info.attr_int("kv_num_heads", 0)),
          block_(info.attr_int("sparse_block_size", 0)),
          scale_(info.attr_float("scale", 0.0f)),
          rotary_(info.attr_int("do_rotary", 0) != 0),
          interleaved_(info.attr_int("rotary_interleaved", 0) != 0) {
        if (heads_ <= 0 || kv_heads_ <= 0 || heads_ % kv_heads_ != 0)
            throw KernelError(kOp + ": num_heads must be a positive multiple of kv_num_heads");
        if (block_ <= 0) throw KernelError(kOp + ": sparse_block_size must be positive");
    }

    void compute(KernelContext& ctx) const override {
        ThreadPool& pool = ctx.pool();
        const Tensor& query = ctx.input(0);
        const DecoderTokens tokens(kOp, ctx, heads_, kv_heads_);
        const int64_t B = tokens.batch(), S = tokens.length(), head = tokens.head_size(), q_hidden = tokens.q_hidden();

        const Tensor& past_key = ctx.input(3);
        const Tensor& past_value = ctx.input(4);
        if (past_key.rank() != 4 || past_key.shape[0] != B || past_key.shape[1] != kv_heads_ ||
            past_key.shape[3] != head || past_value.shape != past_key.shape)
            throw KernelError(kOp + ": past_key/past_value " + shape_string(past_key.shape) + " must be (" +
                              std::to_string(B) + ", " + std::to_string(kv_heads_) + ", max_cache, " +
                              std::to_string(head) + ")");
        const int64_t capacity = past_key.shape[2];
        const BlockLayouts layouts(ctx.input(5), ctx.input(6), heads_);

        const Tensor& total_in = ctx.input(7);
        const Tensor& lengths_in = ctx.input(8);
        if (total_in.type != TESS_ELEMENT_INT32 || total_in.size() != 1)
            throw KernelError(kOp + ": total_sequence_length must be an int32 scalar");
        if (lengths_in.type != TESS_ELEMENT_INT32 || lengths_in.shape != Shape{B})
            throw KernelError(kOp + ": key_total_sequence_lengths must be int32 (" + std::to_string(B) + ")");
        const int64_t total = total_in.ptr<int32_t>()[0];
        if (total > capacity || total > layouts.max_blocks * block_)
            throw KernelError(kOp + ": total_sequence_length " + std::to_string(total) + " exceeds the cache's " +
                              std::to_string(capacity) + " positions or the layouts' " +
                              std::to_string(layouts.max_blocks * block_));
        const bool prompt = S == total;
        // Per batch entry: the absolute position of the first new token.
        int64_t* starts = thread_scratch_buffer<int64_t, 35>(B);
        for (int64_t b = 0; b < B; ++b) {
            const int64_t keys = lengths_in.ptr<int32_t>()[b];
            starts[b] = prompt ? 0 : keys - S;
            if (!prompt && (starts[b] < 0 || keys > total))
                throw KernelError(kOp + ": key_total_sequence_lengths[" + std::to_string(b) + "] = " +
                                  std::to_string(keys) + " must lie in " + std::to_string(S) + " .. " +
                                  std::to_string(total));
        }

        const std::optional<RotaryTables> tables = rotary_tables_of(kOp, ctx, rotary_, 9, head);
        if (tables)
            for (int64_t b = 0; b < B; ++b) tables->check_position(kOp, starts[b] + S - 1);

        const int32_t type = query.type;
        // Rotation as onnxruntime does it, then the rounding to the input type that its rotated copy has.
        auto rotate = [&](float* x, int64_t pos) {
            if (!tables) return;
            tables->rotate(x, pos, interleaved_);
            round_scores(type, x, head);
        };

        // The caches: present is past with the new tokens written in (onnxruntime updates past in place).
        const int64_t cache_size = B * kv_heads_ * capacity * head;
        const bool want_k = ctx.output_count() > 1 && ctx.output_wanted(1);
        const bool want_v = ctx.output_count() > 2 && ctx.output_wanted(2);
        ConvertedOutput<float> present_k, present_v;
        if (want_k) present_k = ConvertedOutput<float>(ctx.output(1, past_key.type, past_key.shape));
        if (want_v) present_v = ConvertedOutput<float>(ctx.output(2, past_value.type, past_value.shape));
        float* k_cache = want_k ? present_k.data() : thread_scratch_buffer<float, 36>(cache_size);
        float* v_cache = want_v ? present_v.data() : thread_scratch_buffer<float, 37>(cache_size);
        {
            const ConvertedInput<float> past_k(past_key, pool), past_v(past_value, pool);
            std::copy_n(past_k.data(), cache_size, k_cache);
            std::copy_n(past_v.data(), cache_size, v_cache);
        }
        pool.parallel_for(B * kv_heads_, 1, [&](int64_t first, int64_t last) {
            for (int64_t bh = first; bh < last; ++bh) {
                const int64_t b = bh / kv_heads_, h = bh % kv_heads_;
                float* kc = k_cache + (bh * capacity + starts[b]) * head;
                float* vc = v_cache + (bh * capacity + starts[b]) * head;
                for (int64_t s = 0; s < S; ++s) {
                    std::copy_n(tokens.k(b, s) + h * head, head, kc + s * head);
                    std::copy_n(tokens.v(b, s) + h * head, head, vc + s * head);
                    rotate(kc + s * head, starts[b] + s);
                }
            }
        });
        float* q = thread_scratch_buffer<float, 38>(B * S * q_hidden);
        pool.parallel_for(B * S, 1, [&](int64_t first, int64_t last) {
            for (int64_t bs = first; bs < last; ++bs) {
                const int64_t b = bs / S, s = bs % S;
                float* dst = q + bs * q_hidden;
                std::copy_n(tokens.q(b, s), q_hidden, dst);
                for (int64_t h = 0; h < heads_; ++h) rotate(dst + h * head, starts[b] + s);
            }
        });

        ConvertedOutput<float> y(ctx.output(0, query.type, {B, S, q_hidden}));
        AttentionDims d;
        d.batch = B;
        d.q_heads = heads_;
        d.kv_heads = kv_heads_;
        d.q_len = S;
        d.kv_len = capacity;
        d.head_size = d.v_head_size = head;
        const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(head));
        attend(pool, d, scale, layouts, starts, type, Heads<const float>{q, HeadLayout::bshd(heads_, S, head)},
               Heads<const float>{k_cache, HeadLayout::bhsd(kv_heads_, capacity, head)},
               Heads<const float>{v_cache, HeadLayout::bhsd(kv_heads_, capacity, head)},
               Heads<float>{y.data(), HeadLayout::bshd(heads_, S, head)});
        y.finish(pool);
        present_k.finish(pool);
        present_v.finish(pool);
    }

private:
    // Block-sparse causal attention on the core's score/value products: one block of query rows of one head per
    // task, each block computing only the keys up to its last row's causal frontier.
    void attend(ThreadPool& pool, const AttentionDims& d, float scale, const BlockLayouts& layouts,
                const int64_t* starts, int32_t type, const Heads<const float>& q, const Heads<const float>& k,
                const Heads<const float>& v, const Heads<float>& y) const {
        if (d.batch * d.q_len == 0) return;
        const int64_t blocks = ceil_div(d.q_len, kRowBlock);
        const int64_t rows_per_block = std::min(d.q_len, kRowBlock);
        const int64_t most_keys = d.kv_len;
        check_gemm_dimensions(kRowBlock, most_keys, d.head_size);
        const float masked = is_16bit_float(type) ? -65504.0f : std::numeric_limits<float>::lowest();
        const int64_t work = rows_per_block * most_keys * 2 * d.head_size;
        pool.parallel_for(d.batch * d.q_heads * blocks, std::max<int64_t>(1, kTaskWork / work), [&](int64_t begin,
                                                                                                     int64_t end) {
            float* scores = thread_scratch_buffer<float>(rows_per_block * most_keys);
            char* visible = thread_scratch_buffer<char, 1>(layouts.max_blocks);
            for (int64_t task = begin; task < end; ++task) {
                const int64_t block = task % blocks, h = (task / blocks) % d.q_heads, b = task / blocks / d.q_heads;
                const int64_t i0 = block * kRowBlock, rows = std::min(kRowBlock, d.q_len - i0);
                const int64_t layout = h % layouts.count;
                const int64_t keys = starts[b] + i0 + rows;  // the last row's causal frontier
                score_block(d, scale, q, k, b, h, i0, rows, keys, scores);
                round_scores(type, scores, rows * keys);
                int64_t marked_row = -1;
                bool sparse_row = false;
                for (int64_t r = 0; r < rows; ++r) {
                    float* row = scores + r * keys;
                    const int64_t position = starts[b] + i0 + r;
                    if (position / block_ != marked_row) {
                        marked_row = position / block_;
                        sparse_row = layouts.mark_row(layout, marked_row, visible);
                    }
                    if (sparse_row)
                        for (int64_t j = 0; j <= position; ++j)
                            if (!visible[j / block_]) row[j] = masked;
                    std::fill(row + position + 1, row + keys, kNegInf<float>);
                }
                softmax_rows(scores, rows, keys);
                round_scores(type, scores, rows * keys);
                value_block(d, v, y, b, h, i0, rows, keys, scores);
            }
        });
    }

    int64_t heads_, kv_heads_, block_;
    float scale_;
    bool rotary_, interleaved_;
};

}  // namespace

void register_contrib_sparse_attention_kernels(KernelRegistry& registry) {
    contrib::add(registry, "SparseAttention", {{0, contrib::kFloat32Or16}}, make_factory<SparseAttentionKernel>());
}

}  // namespace tessera::cpu
