// CPU provider: the scaled dot-product attention core that ONNX's Attention and FlexAttention (attention.cc) and
// onnxruntime's com.microsoft attention operators (kernels/contrib/attention.cc) share: Y = softmax(bias(scale *
// Q K^T)) V over heads laid out in place, one block of query rows of one head per task, the scores never
// materialized for the whole tensor.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernel.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/lane_gemm.h"
#include "util/thread_scratch.h"
#include "util/vec_math.h"

namespace tessera::cpu::attention_core {

template <typename C> constexpr C kNegInf = -std::numeric_limits<C>::infinity();

// ---- Scaled dot-product attention core -------------------------------------------------------------------------

// Where element (b, h, s, d) of a [batch, heads, seq, dim] operand lives: 4-D tensors are laid out that way, the
// packed 3-D form as [batch, seq, heads * dim].
struct HeadLayout {
    int64_t batch_stride = 0, head_stride = 0, row_stride = 0;

    static HeadLayout bhsd(int64_t heads, int64_t seq, int64_t dim) { return {heads * seq * dim, seq * dim, dim}; }
    static HeadLayout bshd(int64_t heads, int64_t seq, int64_t dim) { return {seq * heads * dim, dim, heads * dim}; }
    static HeadLayout of(bool packed, int64_t heads, int64_t seq, int64_t dim) {
        return packed ? bshd(heads, seq, dim) : bhsd(heads, seq, dim);
    }
};

template <typename P> struct Heads {
    P* data = nullptr;
    HeadLayout layout;
    P* at(int64_t b, int64_t h) const { return data + b * layout.batch_stride + h * layout.head_stride; }
};

struct AttentionDims {
    int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_size = 0, v_head_size = 0;
    // Query head h reads key/value head h / group() (grouped-query attention repeats each KV head in place).
    int64_t group() const { return q_heads / kv_heads; }
};

inline constexpr int64_t kRowBlock = 32;          // query rows per task: their scores stay in cache
inline constexpr int64_t kWholeHeadRows = 512;     // or a whole head per task (run_fused_attention), up to this many
inline constexpr int64_t kWholeHeadScores = 1 << 16;  // rows and this many scores (256 KB)
inline constexpr int64_t kTaskWork = 1 << 16;     // multiply-adds worth a parallel task

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The keys (or values) a thread packed last for the lane kernels (util/lane_gemm.h), kept with their memory: a head
// is packed once per task, and a block of a head's rows repacks into the same memory, allocating nothing.
inline LanePackedFilters& packed_operand(int which) {
    thread_local LanePackedFilters operands[2];
    return operands[which];
}

// scores[rows, keys] = scale * Q[b, h, i0:i0+rows] @ K[b, h / group, :keys]^T.  On the lane kernels for float (the
// keys packed as filters, the query rows broadcast): BERT-base's 128 x 128 x 64 heads ran at half their speed
// through the general product.
template <typename C>
void score_block(const AttentionDims& d, C scale, const Heads<const C>& q, const Heads<const C>& k, int64_t b,
                 int64_t h, int64_t i0, int64_t rows, int64_t keys, C* scores) {
    if constexpr (std::is_same_v<C, float>) {
        if (lane_gemm_supported()) {
            LanePackedFilters& packed = packed_operand(0);
            packed.assign(k.at(b, h / d.group()), keys, d.head_size, k.layout.row_stride);
            lane_matmul_serial(q.at(b, h) + i0 * q.layout.row_stride, rows, q.layout.row_stride, packed, scores, keys);
            if (scale != 1.0f)
                for (int64_t i = 0; i < rows * keys; ++i) scores[i] *= scale;
            return;
        }
    }
    gemm_serial<C>(false, true, rows, keys, d.head_size, scale, q.at(b, h) + i0 * q.layout.row_stride,
                   q.layout.row_stride, k.at(b, h / d.group()), k.layout.row_stride, C(0), scores, keys);
}

// Y[b, h, i0:i0+rows] = probs[rows, keys] @ V[b, h / group, :keys]; on the lane kernels for float (the values
// packed as depth-major filters).
template <typename C>
void value_block(const AttentionDims& d, const Heads<const C>& v, const Heads<C>& y, int64_t b, int64_t h, int64_t i0,
                 int64_t rows, int64_t keys, const C* probs) {
    if constexpr (std::is_same_v<C, float>) {
        if (lane_gemm_supported()) {
            LanePackedFilters& packed = packed_operand(1);
            packed.assign_depth_major(v.at(b, h / d.group()), d.v_head_size, keys, v.layout.row_stride);
            lane_matmul_serial(probs, rows, keys, packed, y.at(b, h) + i0 * y.layout.row_stride, y.layout.row_stride);
            return;
        }
    }
    gemm_serial<C>(false, false, rows, d.v_head_size, keys, C(1), probs, keys, v.at(b, h / d.group()),
                   v.layout.row_stride, C(0), y.at(b, h) + i0 * y.layout.row_stride, y.layout.row_stride);
}

// Softmax of `rows` contiguous rows of n >= 1 elements, in place.  A row of only -inf gives NaN, as in the
// reference.
template <typename C> void softmax_rows(C* x, int64_t rows, int64_t n) {
    if constexpr (std::is_same_v<C, float>) {
        vec::run_best_isa([&] {
            for (int64_t r = 0; r < rows; ++r) {
                float* row = x + r * n;
                const float max = vec::reduce_max(row, n);
                const float scale = 1.0f / vec::exp_shifted_sum(row, row, n, max);
                for (int64_t k = 0; k < n; ++k) row[k] *= scale;
            }
        });
    } else {
        for (int64_t r = 0; r < rows; ++r) {
            C* row = x + r * n;
            C max = row[0];
            for (int64_t k = 1; k < n; ++k) max = row[k] > max ? row[k] : max;
            C sum = 0;
            for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - max));
            for (int64_t k = 0; k < n; ++k) row[k] /= sum;
        }
    }
}

// Rounds n values to a 16-bit float type (no-op for other types).
template <typename C> void round_scores(int32_t type, C* x, int64_t n) {
    if (type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16)
        for (int64_t k = 0; k < n; ++k) x[k] = static_cast<C>(round_to_type(type, static_cast<float>(x[k])));
}

inline bool is_16bit_float(int32_t type) { return type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16; }

// Softmax computed in a 16-bit `type`, as the definition does when softmax_precision is absent: the shifted scores,
// their exponentials, the denominator and the quotients are rounded to `type`.  The denominator follows the
// reference's arithmetic: float16 sums accumulate in float and round once, bfloat16 sums round every partial sum
// (numpy's float16 reductions use float accumulators, its bfloat16 ones add in bfloat16).  A row of only -inf gives
// zeros.  Summing in bfloat16 loses the small terms of long rows: models that care set softmax_precision to float,
// which the definition offers for exactly this and which takes the float32 path.
template <typename C> void softmax_rows_in(int32_t type, C* x, int64_t rows, int64_t n) {
    auto r = [type](float v) { return round_to_type(type, v); };
    for (int64_t row = 0; row < rows; ++row) {
        C* values = x + row * n;
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < n; ++k) max = std::max(max, static_cast<float>(values[k]));
        if (max == -std::numeric_limits<float>::infinity()) max = 0;
        float sum = 0;
        for (int64_t k = 0; k < n; ++k) {
            const float e = r(std::exp(r(static_cast<float>(values[k]) - max)));
            values[k] = static_cast<C>(e);
            sum = type == TESS_ELEMENT_BFLOAT16 ? r(sum + e) : sum + e;
        }
        sum = r(sum);
        if (sum == 0) sum = 1;
        for (int64_t k = 0; k < n; ++k) values[k] = static_cast<C>(r(static_cast<float>(values[k]) / sum));
    }
}

// x = cap * tanh(x / cap); in a 16-bit `type` each of the three steps rounds, as the definition computes in it.
template <typename C> void apply_softcap(C* x, int64_t n, C cap, int32_t type) {
    if (is_16bit_float(type)) {
        for (int64_t k = 0; k < n; ++k) {
            const float capped = round_to_type(type, std::tanh(round_to_type(type, static_cast<float>(x[k] / cap))));
            x[k] = static_cast<C>(round_to_type(type, static_cast<float>(cap) * capped));
        }
    } else if constexpr (std::is_same_v<C, float>) {
        const float inverse = 1.0f / cap;
        vec::run_best_isa([&] {
            for (int64_t i = 0; i < n; i += vec::kLanes) {
                const int64_t lanes = std::min<int64_t>(vec::kLanes, n - i);
                vec::store_n(x + i, lanes, vec::tanh(vec::load_n(x + i, lanes) * inverse) * cap);
            }
        });
    } else {
        for (int64_t k = 0; k < n; ++k) x[k] = cap * std::tanh(x[k] / cap);
    }
}

// The additive bias of Attention's scores: attn_mask (broadcast; a short last dimension is padded with -inf), the
// causal frontier, the sliding window and the nonpad_kv_seqlen padding.  Causal and window bounds are aligned to
// the bottom right: query row i sits at absolute position offset + i, where offset counts the valid keys before the
// query block (the internal cache's past length, or nonpad_kv_seqlen - q_len for an external cache).
template <typename C> struct ScoreBias {
    const C* mask = nullptr;            // the mask as C values (a bool mask as 0 / -inf); null when absent
    int64_t mask_strides[3] = {};       // batch, head, query row; 0 where the mask broadcasts
    int64_t mask_columns = 0;           // key positions the mask covers; the rest are masked out
    int64_t column_stride = 1;          // 0 when a single column broadcasts over every key
    bool causal = false;
    int64_t past = 0;                   // keys of the internal cache before the new ones
    const int64_t* valid_keys = nullptr;  // per batch entry: keys at or beyond it are padding (external cache)
    const int64_t* positions = nullptr;   // per batch entry: the absolute position of query row 0, when given
    int64_t q_len = 0;
    int64_t left_window = -1, right_window = -1;  // keys p - left .. p + right around position p; -1 = unbounded

    bool empty() const {
        return mask == nullptr && !causal && valid_keys == nullptr && left_window < 0 && right_window < 0;
    }

    int64_t offset(int64_t b) const {
        if (positions != nullptr) return positions[b];
        return valid_keys != nullptr ? valid_keys[b] - q_len : past;
    }

    // Keys [first, end) of n that query row i of batch entry b may attend, before the mask's own values.
    struct Range {
        int64_t first, end;
    };
    Range keys_of_row(int64_t b, int64_t i, int64_t n) const {
        int64_t first = 0, end = n;
        if (mask != nullptr && column_stride == 1) end = std::min(end, mask_columns);
        if (valid_keys != nullptr) end = std::min(end, valid_keys[b]);
        const int64_t position = offset(b) + i;
        if (causal) end = std::min(end, position + 1);
        if (right_window >= 0) end = std::min(end, position + right_window + 1);
        if (left_window >= 0) first = std::max(first, position - left_window);
        return {first, std::max(first, end)};
    }

    // How many leading keys the query rows up to `last_row` can see at all: the keys after them are -inf for every
    // such row, so their softmax weights are exactly 0 and they need not be computed.
    int64_t visible_keys(int64_t b, int64_t last_row, int64_t n) const {
        return std::clamp<int64_t>(keys_of_row(b, last_row, n).end, 0, n);
    }

    // Adds row i's bias to its n scores.  Returns false when the row may attend no key at all: the definition then
    // gives the row zero weights (its softmax would be NaN).  The decision is made on the bias, not on the scores,
    // so a NaN or infinite score cannot unmask a row.
    bool apply(int64_t b, int64_t h, int64_t i, int64_t n, C* row) const {
        const Range keys = keys_of_row(b, i, n);
        const int64_t first = std::min(keys.first, n), end = std::min(keys.end, n);
        for (int64_t j = 0; j < first; ++j) row[j] += kNegInf<C>;
        for (int64_t j = end; j < n; ++j) row[j] += kNegInf<C>;
        if (mask == nullptr) return first < end;
        const C* m = mask + b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2];
        if (column_stride == 0) {  // one column for every key
            for (int64_t j = first; j < end; ++j) row[j] += m[0];
            return first < end && m[0] != kNegInf<C>;
        }
        // Separate loops, so that each vectorizes (one strided loop with the test in it did not).
        int attends = 0;
        for (int64_t j = first; j < end; ++j) row[j] += m[j];
        for (int64_t j = first; j < end; ++j) attends |= m[j] != kNegInf<C>;
        return attends != 0;
    }
};

// What Attention does to a block of scores between the two products.  The types say where a definition that
// computes in a 16-bit type rounds: float32/float64 there means no rounding.
template <typename C> struct ScoreEpilogue {
    int32_t score_type = TESS_ELEMENT_FLOAT32;    // scores, softcap and the bias sum are rounded to it
    int32_t softmax_type = TESS_ELEMENT_FLOAT32;  // softmax's input and output are rounded to it
    int32_t prob_type = TESS_ELEMENT_FLOAT32;     // then the probabilities, before they multiply V
    C softcap = 0;            // applied when > 0
    ScoreBias<C> bias;
    C* qk_output = nullptr;   // [batch, q_heads, q_len, kv_len] copy of the scores at stage `qk_stage`
    int qk_stage = 0;         // 0 after QK^T, 1 after softcap, 2 after the bias, 3 after softmax
};

// Y = softmax(epilogue(scale * Q K^T)) V, one block of query rows of one head per task.
template <typename C>
void run_fused_attention(ThreadPool& pool, const AttentionDims& d, C scale, const Heads<const C>& q,
                         const Heads<const C>& k, const Heads<const C>& v, const Heads<C>& y,
                         const ScoreEpilogue<C>& epilogue) {
    if (d.batch * d.q_heads * d.q_len == 0 || d.v_head_size == 0) return;
    auto zero_rows = [&](int64_t b, int64_t h, int64_t i0, int64_t rows) {
        for (int64_t i = i0; i < i0 + rows; ++i) std::fill_n(y.at(b, h) + i * y.layout.row_stride, d.v_head_size, C(0));
    };
    if (d.kv_len == 0) {
        // Nothing to attend to: an empty weighted sum.
        for (int64_t b = 0; b < d.batch; ++b)
            for (int64_t h = 0; h < d.q_heads; ++h) zero_rows(b, h, 0, d.q_len);
        return;
    }
    // Blocks of kRowBlock query rows; a whole head per task when the heads alone give every thread two or more
    // and its scores stay small (BERT-base's 128 x 128): each block's products pack K and V again, so that four
    // blocks per head cost more than the products (1.0 ms a layer against 0.6).
    const bool whole_heads = d.batch * d.q_heads >= 2 * pool.size() && d.q_len <= kWholeHeadRows &&
                             d.q_len * d.kv_len <= kWholeHeadScores;
    const int64_t row_block = whole_heads ? std::max<int64_t>(d.q_len, 1) : kRowBlock;
    check_gemm_dimensions(row_block, d.kv_len, d.head_size);
    check_gemm_dimensions(row_block, d.v_head_size, d.kv_len);
    const int64_t blocks = ceil_div(d.q_len, row_block);
    const int64_t rows_per_block = std::min(d.q_len, row_block);
    const int64_t work = rows_per_block * d.kv_len * (d.head_size + d.v_head_size + 8);
    pool.parallel_for(d.batch * d.q_heads * blocks, std::max<int64_t>(1, kTaskWork / work), [&](int64_t begin,
                                                                                                    int64_t end) {
        C* scores = thread_scratch_buffer<C>(rows_per_block * d.kv_len);
        uint8_t* attends = thread_scratch_buffer<uint8_t, 1>(rows_per_block);
        for (int64_t task = begin; task < end; ++task) {
            const int64_t block = task % blocks, h = (task / blocks) % d.q_heads, b = task / blocks / d.q_heads;
            const int64_t i0 = block * row_block, rows = std::min(row_block, d.q_len - i0);
            // Keys no row of the block can see (causal future, padding) are skipped unless the scores are output.
            int64_t keys = d.kv_len;
            if (epilogue.qk_output == nullptr && !epilogue.bias.empty()) {
                keys = epilogue.bias.visible_keys(b, i0 + rows - 1, d.kv_len);
                if (keys == 0) {
                    zero_rows(b, h, i0, rows);  // every row is fully masked
                    continue;
                }
            }
            const int64_t n = rows * keys;
            auto capture = [&](int stage) {
                if (epilogue.qk_output != nullptr && epilogue.qk_stage == stage)
                    std::copy_n(scores, n, epilogue.qk_output + ((b * d.q_heads + h) * d.q_len + i0) * d.kv_len);
            };
            score_block(d, scale, q, k, b, h, i0, rows, keys, scores);
            round_scores(epilogue.score_type, scores, n);
            capture(0);
            if (epilogue.softcap > 0) apply_softcap(scores, n, epilogue.softcap, epilogue.score_type);
            capture(1);
            std::fill_n(attends, rows, true);
            if (!epilogue.bias.empty()) {
                for (int64_t r = 0; r < rows; ++r)
                    attends[r] = epilogue.bias.apply(b, h, i0 + r, keys, scores + r * keys);
                round_scores(epilogue.score_type, scores, n);
            }
            capture(2);
            if (is_16bit_float(epilogue.softmax_type)) {
                round_scores(epilogue.softmax_type, scores, n);
                softmax_rows_in(epilogue.softmax_type, scores, rows, keys);
            } else {
                softmax_rows(scores, rows, keys);
            }
            round_scores(epilogue.prob_type, scores, n);
            for (int64_t r = 0; r < rows; ++r)
                if (!attends[r]) std::fill_n(scores + r * keys, keys, C(0));
            capture(3);
            value_block(d, v, y, b, h, i0, rows, keys, scores);
        }
    });
}

// Copies the [kv_len, dim] matrices of `source` after the [past, dim] ones of `past` into a contiguous
// [batch, kv_heads, past + kv_len, dim] tensor (the present key/value cache).
template <typename C>
void concat_cache(ThreadPool& pool, int64_t batch, int64_t heads, int64_t past, const C* past_data, int64_t kv_len,
                  const Heads<const C>& source, int64_t dim, C* out) {
    const int64_t total = past + kv_len;
    pool.parallel_for(batch * heads, std::max<int64_t>(1, kTaskWork / std::max<int64_t>(1, total * dim)),
                      [&](int64_t begin, int64_t end) {
                          for (int64_t bh = begin; bh < end; ++bh) {
                              C* dst = out + bh * total * dim;
                              if (past > 0) std::copy_n(past_data + bh * past * dim, past * dim, dst);
                              const C* src = source.at(bh / heads, bh % heads);
                              for (int64_t s = 0; s < kv_len; ++s)
                                  std::copy_n(src + s * source.layout.row_stride, dim, dst + (past + s) * dim);
                          }
                      });
}

// The definitions scale Q and K by sqrt(scale) in the inputs' type before multiplying them.  For 16-bit inputs each
// of those products rounds; this reproduces them (float holds the product of two 16-bit values exactly) into
// `storage` and points `heads` at it.  `count` is the number of elements behind `heads`.
template <typename C>
void prescale_16bit(int32_t type, float root, Heads<const C>& heads, int64_t count, std::vector<C>& storage) {
    storage.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
        storage[i] = static_cast<C>(round_to_type(type, static_cast<float>(heads.data[i]) * root));
    heads.data = storage.data();
}

}  // namespace tessera::cpu::attention_core
