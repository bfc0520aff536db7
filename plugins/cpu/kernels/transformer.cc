// CPU provider: transformer building blocks.
//   Attention (opset 23, 24), FlexAttention (ai.onnx.preview 1), RotaryEmbedding (23), RMSNormalization (23),
//   LinearAttention (27), CausalConvWithState (27).
//
// Every op computes in one precision: double when the inputs (or a requested precision) are double, float for
// float, float16 and bfloat16 (converted on the way in and rounded on the way out, as the ONNX definitions do for
// their softmax and recurrences).  Where a definition computes in the 16-bit input type itself (RotaryEmbedding,
// FlexAttention's Q K^T), its roundings are reproduced.  Inputs already in the compute type are read in place.
//
// Attention never materializes the whole [batch, heads, q_len, kv_len] score tensor: each task takes a block of
// query rows of one head, computes its scores with one BLAS product, applies softcap, mask and softmax in cache and
// multiplies by V.  Only FlexAttention with modifier subgraphs (which see the whole tensor) works stage by stage.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/subgraph_body.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

// Calls fn.template operator()<C>() with the compute type: double or float.
template <typename Fn> void with_compute_type(bool use_double, Fn&& fn) {
    if (use_double)
        fn.template operator()<double>();
    else
        fn.template operator()<float>();
}

template <typename C> constexpr C kNegInf = -std::numeric_limits<C>::infinity();

// Rounds a float the way storing it into a tensor of `type` would (the reference rounds some intermediates).
inline float round_to_type(int32_t type, float v) {
    if (type == TESS_ELEMENT_FLOAT16) return fp::half_to_float(fp::float_to_half(v));
    if (type == TESS_ELEMENT_BFLOAT16) return fp::bfloat16_to_float(fp::float_to_bfloat16(v));
    return v;
}

// Reads an optional floating-point precision attribute (softmax_precision): 0 when absent.
int32_t parse_precision(const NodeInfo& info, std::string_view name) {
    const int64_t p = info.attr_int(name, 0);
    switch (p) {
        case 0:
        case TESS_ELEMENT_FLOAT32:
        case TESS_ELEMENT_FLOAT16:
        case TESS_ELEMENT_BFLOAT16:
        case TESS_ELEMENT_FLOAT64: return static_cast<int32_t>(p);
        default:
            throw KernelError(std::string(info.op_type()) + ": " + std::string(name) + " " + std::to_string(p) +
                              " is not a floating-point type");
    }
}

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

constexpr int64_t kRowBlock = 32;          // query rows per task: their scores stay in cache
constexpr int64_t kTaskWork = 1 << 16;     // multiply-adds worth a parallel task

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// scores[rows, keys] = scale * Q[b, h, i0:i0+rows] @ K[b, h / group, :keys]^T
template <typename C>
void score_block(const AttentionDims& d, C scale, const Heads<const C>& q, const Heads<const C>& k, int64_t b,
                 int64_t h, int64_t i0, int64_t rows, int64_t keys, C* scores) {
    gemm_serial<C>(false, true, rows, keys, d.head_size, scale, q.at(b, h) + i0 * q.layout.row_stride,
                   q.layout.row_stride, k.at(b, h / d.group()), k.layout.row_stride, C(0), scores, keys);
}

// Y[b, h, i0:i0+rows] = probs[rows, keys] @ V[b, h / group, :keys]
template <typename C>
void value_block(const AttentionDims& d, const Heads<const C>& v, const Heads<C>& y, int64_t b, int64_t h, int64_t i0,
                 int64_t rows, int64_t keys, const C* probs) {
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

// x = cap * tanh(x / cap)
template <typename C> void apply_softcap(C* x, int64_t n, C cap) {
    if constexpr (std::is_same_v<C, float>) {
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
// causal mask and the nonpad_kv_seqlen padding mask.
template <typename C> struct ScoreBias {
    const C* mask = nullptr;            // the mask as C values (a bool mask as 0 / -inf); null when absent
    int64_t mask_strides[3] = {};       // batch, head, query row; 0 where the mask broadcasts
    int64_t mask_columns = 0;           // key positions the mask covers; the rest are masked out
    int64_t column_stride = 1;          // 0 when a single column broadcasts over every key
    bool causal = false;
    int64_t past = 0;                   // causal: key j is masked for query row i when j > i + past
    const int64_t* valid_keys = nullptr;  // per batch entry: keys at or beyond it are padding

    bool empty() const { return mask == nullptr && !causal && valid_keys == nullptr; }

    // How many leading keys query rows up to `last_row` of batch entry b can see at all: the keys after them are
    // -inf for every such row, so their softmax weights are exactly 0 and they need not be computed.  (A row that
    // sees no key is NaN in the definition: the caller then computes everything.)
    int64_t visible_keys(int64_t b, int64_t last_row, int64_t n) const {
        if (mask != nullptr && column_stride == 1) n = std::min(n, mask_columns);
        if (causal) n = std::min(n, last_row + past + 1);
        if (valid_keys != nullptr) n = std::min(n, valid_keys[b]);
        return n;
    }

    void apply(int64_t b, int64_t h, int64_t i, int64_t n, C* row) const {
        if (mask != nullptr) {
            const C* m = mask + b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2];
            const int64_t covered = std::min(n, mask_columns);
            if (column_stride == 1) {
                for (int64_t j = 0; j < covered; ++j) row[j] += m[j];
            } else {
                for (int64_t j = 0; j < covered; ++j) row[j] += m[0];
            }
            for (int64_t j = covered; j < n; ++j) row[j] += kNegInf<C>;
        }
        if (causal)
            for (int64_t j = std::max<int64_t>(0, i + past + 1); j < n; ++j) row[j] += kNegInf<C>;
        if (valid_keys != nullptr)
            for (int64_t j = std::max<int64_t>(0, valid_keys[b]); j < n; ++j) row[j] += kNegInf<C>;
    }
};

// Rounds n values to a 16-bit float type (no-op for other types).
template <typename C> void round_scores(int32_t type, C* x, int64_t n) {
    if (type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16)
        for (int64_t k = 0; k < n; ++k) x[k] = static_cast<C>(round_to_type(type, static_cast<float>(x[k])));
}

// What Attention does to a block of scores between the two products.
template <typename C> struct ScoreEpilogue {
    int32_t score_type = TESS_ELEMENT_FLOAT32;  // a 16-bit type rounds the scores to it (FlexAttention)
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
    if (d.kv_len == 0) {
        // Nothing to attend to: an empty weighted sum.
        for (int64_t b = 0; b < d.batch; ++b)
            for (int64_t h = 0; h < d.q_heads; ++h)
                for (int64_t i = 0; i < d.q_len; ++i)
                    std::fill_n(y.at(b, h) + i * y.layout.row_stride, d.v_head_size, C(0));
        return;
    }
    check_gemm_dimensions(kRowBlock, d.kv_len, d.head_size);
    check_gemm_dimensions(kRowBlock, d.v_head_size, d.kv_len);
    const int64_t blocks = ceil_div(d.q_len, kRowBlock);
    const int64_t rows_per_block = std::min(d.q_len, kRowBlock);
    const int64_t work = rows_per_block * d.kv_len * (d.head_size + d.v_head_size + 8);
    pool.parallel_for(d.batch * d.q_heads * blocks, std::max<int64_t>(1, kTaskWork / work), [&](int64_t begin,
                                                                                                    int64_t end) {
        C* scores = thread_scratch_buffer<C>(rows_per_block * d.kv_len);
        for (int64_t task = begin; task < end; ++task) {
            const int64_t block = task % blocks, h = (task / blocks) % d.q_heads, b = task / blocks / d.q_heads;
            const int64_t i0 = block * kRowBlock, rows = std::min(kRowBlock, d.q_len - i0);
            // Keys no row of the block can see (causal future, padding) are skipped unless the scores are output.
            int64_t keys = d.kv_len;
            if (epilogue.qk_output == nullptr) {
                keys = epilogue.bias.visible_keys(b, i0 + rows - 1, d.kv_len);
                if (keys <= 0) keys = d.kv_len;
            }
            const int64_t n = rows * keys;
            auto capture = [&](int stage) {
                if (epilogue.qk_output != nullptr && epilogue.qk_stage == stage)
                    std::copy_n(scores, n, epilogue.qk_output + ((b * d.q_heads + h) * d.q_len + i0) * d.kv_len);
            };
            score_block(d, scale, q, k, b, h, i0, rows, keys, scores);
            round_scores(epilogue.score_type, scores, n);
            capture(0);
            if (epilogue.softcap > 0) apply_softcap(scores, n, epilogue.softcap);
            capture(1);
            if (!epilogue.bias.empty())
                for (int64_t r = 0; r < rows; ++r) epilogue.bias.apply(b, h, i0 + r, keys, scores + r * keys);
            capture(2);
            softmax_rows(scores, rows, keys);
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

// ---- Attention ---------------------------------------------------------------------------------------------------

class AttentionKernel final : public Kernel {
public:
    explicit AttentionKernel(const NodeInfo& info)
        : opset_(info.opset()),
          q_num_heads_(info.attr_int("q_num_heads", 0)),
          kv_num_heads_(info.attr_int("kv_num_heads", 0)),
          is_causal_(info.attr_int("is_causal", 0) != 0),
          softcap_(info.attr_float("softcap", 0.0f)),
          qk_mode_(info.attr_int("qk_matmul_output_mode", 0)),
          softmax_precision_(parse_precision(info, "softmax_precision")) {
        if (info.has_attr("scale")) scale_ = info.attr_float("scale", 0.0f);
        if (qk_mode_ < 0 || qk_mode_ > 3)
            throw KernelError("Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got " + std::to_string(qk_mode_));
        if (q_num_heads_ < 0 || kv_num_heads_ < 0) throw KernelError("Attention: head counts must be positive");
    }

    void compute(KernelContext& ctx) const override {
        const bool use_double =
            ctx.input(0).type == TESS_ELEMENT_FLOAT64 || softmax_precision_ == TESS_ELEMENT_FLOAT64;
        with_compute_type(use_double, [&]<typename C>() { run<C>(ctx); });
    }

private:
    struct Geometry {
        AttentionDims dims;
        bool packed = false;  // 3-D inputs
        int64_t past = 0;
    };

    Geometry geometry(const KernelContext& ctx) const {
        const Tensor& q = ctx.input(0);
        const Tensor& k = ctx.input(1);
        const Tensor& v = ctx.input(2);
        if (q.rank() != 3 && q.rank() != 4)
            throw KernelError("Attention: Q must be 3-D or 4-D, got shape " + shape_string(q.shape));
        if (k.rank() != q.rank() || v.rank() != q.rank())
            throw KernelError("Attention: Q, K and V must have the same rank, got " + shape_string(q.shape) + ", " +
                              shape_string(k.shape) + ", " + shape_string(v.shape));
        Geometry g;
        AttentionDims& d = g.dims;
        d.batch = q.shape[0];
        bool consistent = k.shape[0] == d.batch && v.shape[0] == d.batch;
        if (q.rank() == 4) {
            d.q_heads = q.shape[1];
            d.q_len = q.shape[2];
            d.head_size = q.shape[3];
            d.kv_heads = k.shape[1];
            d.kv_len = k.shape[2];
            d.v_head_size = v.shape[3];
            consistent = consistent && k.shape[3] == d.head_size && v.shape[1] == d.kv_heads && v.shape[2] == d.kv_len;
        } else {
            g.packed = true;
            if (q_num_heads_ <= 0 || kv_num_heads_ <= 0)
                throw KernelError("Attention: 3-D inputs need the q_num_heads and kv_num_heads attributes");
            d.q_heads = q_num_heads_;
            d.kv_heads = kv_num_heads_;
            d.q_len = q.shape[1];
            d.kv_len = k.shape[1];
            if (q.shape[2] % d.q_heads != 0 || v.shape[2] % d.kv_heads != 0)
                throw KernelError("Attention: hidden sizes of Q " + shape_string(q.shape) + " and V " +
                                  shape_string(v.shape) + " are not multiples of the head counts");
            d.head_size = q.shape[2] / d.q_heads;
            d.v_head_size = v.shape[2] / d.kv_heads;
            consistent = consistent && k.shape[2] == d.kv_heads * d.head_size && v.shape[1] == d.kv_len;
        }
        if (!consistent)
            throw KernelError("Attention: shapes of Q " + shape_string(q.shape) + ", K " + shape_string(k.shape) +
                              " and V " + shape_string(v.shape) + " do not agree");
        if (d.kv_heads <= 0 || d.q_heads % d.kv_heads != 0)
            throw KernelError("Attention: q_num_heads (" + std::to_string(d.q_heads) +
                              ") must be a multiple of kv_num_heads (" + std::to_string(d.kv_heads) + ")");

        if (ctx.has_input(4) != ctx.has_input(5))
            throw KernelError("Attention: past_key and past_value must be given together");
        if (ctx.has_input(4)) {
            const Shape& pk = ctx.input(4).shape;
            const Shape& pv = ctx.input(5).shape;
            if (pk.size() != 4 || pv.size() != 4 || pk[0] != d.batch || pk[1] != d.kv_heads || pk[3] != d.head_size ||
                pv[0] != d.batch || pv[1] != d.kv_heads || pv[2] != pk[2] || pv[3] != d.v_head_size)
                throw KernelError("Attention: past_key " + shape_string(pk) + " and past_value " + shape_string(pv) +
                                  " do not match K and V");
            g.past = pk[2];
        }
        return g;
    }

    // Fills `bias.mask*` from attn_mask (input 3); `values` keeps the converted mask alive.
    template <typename C>
    void read_mask(KernelContext& ctx, const AttentionDims& d, int64_t total, ScoreBias<C>& bias,
                   std::vector<C>& values) const {
        const Tensor& m = ctx.input(3);
        if (m.rank() > 4) throw KernelError("Attention: attn_mask has more than 4 dimensions: " + shape_string(m.shape));
        Shape shape(4 - m.rank(), 1);
        shape.insert(shape.end(), m.shape.begin(), m.shape.end());
        const int64_t wanted[3] = {d.batch, d.q_heads, d.q_len};
        int64_t stride = shape[3];
        for (int axis = 2; axis >= 0; --axis) {
            if (shape[axis] != 1 && shape[axis] != wanted[axis])
                throw KernelError("Attention: attn_mask " + shape_string(m.shape) + " does not broadcast to [" +
                                  std::to_string(d.batch) + ", " + std::to_string(d.q_heads) + ", " +
                                  std::to_string(d.q_len) + ", " + std::to_string(total) + "]");
            bias.mask_strides[axis] = shape[axis] == 1 ? 0 : stride;
            stride *= shape[axis];
        }
        // Opset 24 pads a short last dimension with -inf (even a single column); opset 23 broadcasts one column.
        const int64_t columns = shape[3];
        if (columns == 1 && total > 1 && opset_ < 24) {
            bias.column_stride = 0;
            bias.mask_columns = total;
        } else if (columns <= total) {
            bias.mask_columns = columns;
        } else {
            throw KernelError("Attention: attn_mask's last dimension " + std::to_string(columns) +
                              " exceeds the total sequence length " + std::to_string(total));
        }
        values.resize(static_cast<size_t>(m.size()));
        if (m.type == TESS_ELEMENT_BOOL) {
            const uint8_t* keep = m.ptr<uint8_t>();
            for (size_t i = 0; i < values.size(); ++i) values[i] = keep[i] ? C(0) : kNegInf<C>;
        } else {
            if (!convert::is_value_type(m.type)) throw_unsupported_type("Attention attn_mask", m.type);
            convert_elements(ctx.pool(), m.type, m.data, element_type_of<C>(), values.data(), m.size());
        }
        bias.mask = values.data();
    }

    template <typename C> void run(KernelContext& ctx) const {
        const Geometry g = geometry(ctx);
        const AttentionDims& in = g.dims;
        const int64_t total = g.past + in.kv_len;
        ThreadPool& pool = ctx.pool();
        const Tensor& q_in = ctx.input(0);
        const Tensor& k_in = ctx.input(1);
        const Tensor& v_in = ctx.input(2);

        const int64_t* valid_keys = nullptr;
        if (opset_ >= 24 && ctx.has_input(6)) {
            const Tensor& lengths = ctx.input(6);
            if (lengths.type != TESS_ELEMENT_INT64 || lengths.shape != Shape{in.batch})
                throw KernelError("Attention: nonpad_kv_seqlen must be int64 of shape [" + std::to_string(in.batch) +
                                  "], got " + shape_string(lengths.shape));
            valid_keys = lengths.ptr<int64_t>();
        }

        const ConvertedInput<C> q(q_in, pool), k(k_in, pool), v(v_in, pool);
        Heads<const C> q_heads{q.data(), HeadLayout::of(g.packed, in.q_heads, in.q_len, in.head_size)};
        Heads<const C> k_heads{k.data(), HeadLayout::of(g.packed, in.kv_heads, in.kv_len, in.head_size)};
        Heads<const C> v_heads{v.data(), HeadLayout::of(g.packed, in.kv_heads, in.kv_len, in.v_head_size)};

        // The key/value cache: past followed by the new entries, written into present_key/present_value (and read
        // from there) when they are wanted.
        ConvertedOutput<C> present_k, present_v;
        if (ctx.output_wanted(1))
            present_k = ConvertedOutput<C>(ctx.output(1, k_in.type, {in.batch, in.kv_heads, total, in.head_size}));
        if (ctx.output_wanted(2))
            present_v = ConvertedOutput<C>(ctx.output(2, v_in.type, {in.batch, in.kv_heads, total, in.v_head_size}));
        std::vector<C> k_cache, v_cache;
        auto build_cache = [&](ConvertedOutput<C>& present, std::vector<C>& scratch, size_t past_input, int64_t dim,
                               Heads<const C>& source) {
            if (g.past == 0 && !present) return;
            C* out = present.data();
            if (!present) {
                scratch.resize(static_cast<size_t>(in.batch * in.kv_heads * total * dim));
                out = scratch.data();
            }
            std::optional<ConvertedInput<C>> past;
            if (g.past > 0) past.emplace(ctx.input(past_input), pool);
            concat_cache(pool, in.batch, in.kv_heads, g.past, past ? past->data() : nullptr, in.kv_len, source, dim,
                         out);
            source = Heads<const C>{out, HeadLayout::bhsd(in.kv_heads, total, dim)};
        };
        build_cache(present_k, k_cache, 4, in.head_size, k_heads);
        build_cache(present_v, v_cache, 5, in.v_head_size, v_heads);

        AttentionDims d = in;
        d.kv_len = total;
        ScoreEpilogue<C> epilogue;
        epilogue.softcap = static_cast<C>(softcap_);
        epilogue.qk_stage = static_cast<int>(qk_mode_);
        epilogue.bias.causal = is_causal_;
        epilogue.bias.past = g.past;
        epilogue.bias.valid_keys = valid_keys;
        std::vector<C> mask_values;
        if (ctx.has_input(3)) read_mask(ctx, d, total, epilogue.bias, mask_values);

        const Shape y_shape = g.packed ? Shape{d.batch, d.q_len, d.q_heads * d.v_head_size}
                                       : Shape{d.batch, d.q_heads, d.q_len, d.v_head_size};
        ConvertedOutput<C> y(ctx.output(0, q_in.type, y_shape));
        ConvertedOutput<C> qk;
        if (ctx.output_wanted(3)) {
            qk = ConvertedOutput<C>(ctx.output(3, q_in.type, {d.batch, d.q_heads, d.q_len, total}));
            epilogue.qk_output = qk.data();
        }
        const C scale = scale_ ? static_cast<C>(*scale_) : C(1) / std::sqrt(static_cast<C>(d.head_size));
        run_fused_attention<C>(pool, d, scale, q_heads, k_heads, v_heads,
                               Heads<C>{y.data(), HeadLayout::of(g.packed, d.q_heads, d.q_len, d.v_head_size)},
                               epilogue);
        y.finish(pool);
        present_k.finish(pool);
        present_v.finish(pool);
        qk.finish(pool);
    }

    int64_t opset_;
    int64_t q_num_heads_, kv_num_heads_;
    bool is_causal_;
    float softcap_;
    int64_t qk_mode_;
    int32_t softmax_precision_;  // 0 = the inputs' precision
    std::optional<float> scale_;
};

// ---- FlexAttention (ai.onnx.preview) -------------------------------------------------------------------------

class FlexAttentionKernel final : public Kernel {
public:
    explicit FlexAttentionKernel(const NodeInfo& info) : softmax_precision_(parse_precision(info, "softmax_precision")) {
        if (info.has_attr("scale")) scale_ = info.attr_float("scale", 0.0f);
        if (info.has_attr("score_mod")) score_mod_.emplace(info, "score_mod");
        if (info.has_attr("prob_mod")) prob_mod_.emplace(info, "prob_mod");
        for (const auto* body : {score_mod_ ? &*score_mod_ : nullptr, prob_mod_ ? &*prob_mod_ : nullptr})
            if (body != nullptr && (body->graph().input_count() != 1 || body->graph().output_count() != 1))
                throw KernelError("FlexAttention: score_mod and prob_mod take one input and produce one output");
    }

    void compute(KernelContext& ctx) const override {
        const int32_t input_type = ctx.input(0).type;
        // Scores and probabilities are in softmax_precision: float32 unless the inputs are double.
        const int32_t precision = softmax_precision_ != 0
                                      ? softmax_precision_
                                      : (input_type == TESS_ELEMENT_FLOAT64 ? TESS_ELEMENT_FLOAT64 : TESS_ELEMENT_FLOAT32);
        with_compute_type(precision == TESS_ELEMENT_FLOAT64, [&]<typename C>() { run<C>(ctx, precision); });
    }

private:
    template <typename C> void run(KernelContext& ctx, int32_t precision) const {
        const Tensor& q_in = ctx.input(0);
        const Tensor& k_in = ctx.input(1);
        const Tensor& v_in = ctx.input(2);
        if (q_in.rank() != 4 || k_in.rank() != 4 || v_in.rank() != 4)
            throw KernelError("FlexAttention: Q, K and V must be 4-D, got " + shape_string(q_in.shape) + ", " +
                              shape_string(k_in.shape) + ", " + shape_string(v_in.shape));
        AttentionDims d{q_in.shape[0], q_in.shape[1], k_in.shape[1], q_in.shape[2],
                        k_in.shape[2], q_in.shape[3], v_in.shape[3]};
        if (k_in.shape[0] != d.batch || v_in.shape[0] != d.batch || k_in.shape[3] != d.head_size ||
            v_in.shape[1] != d.kv_heads || v_in.shape[2] != d.kv_len)
            throw KernelError("FlexAttention: shapes of Q " + shape_string(q_in.shape) + ", K " +
                              shape_string(k_in.shape) + " and V " + shape_string(v_in.shape) + " do not agree");
        if (d.kv_heads <= 0 || d.q_heads % d.kv_heads != 0)
            throw KernelError("FlexAttention: Q heads (" + std::to_string(d.q_heads) +
                              ") must be a multiple of K/V heads (" + std::to_string(d.kv_heads) + ")");
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<C> q(q_in, pool), k(k_in, pool), v(v_in, pool);
        Heads<const C> qh{q.data(), HeadLayout::bhsd(d.q_heads, d.q_len, d.head_size)};
        Heads<const C> kh{k.data(), HeadLayout::bhsd(d.kv_heads, d.kv_len, d.head_size)};
        const Heads<const C> vh{v.data(), HeadLayout::bhsd(d.kv_heads, d.kv_len, d.v_head_size)};
        ConvertedOutput<C> y(ctx.output(0, q_in.type, {d.batch, d.q_heads, d.q_len, d.v_head_size}));
        const Heads<C> yh{y.data(), HeadLayout::bhsd(d.q_heads, d.q_len, d.v_head_size)};
        const float given_scale = scale_ ? *scale_ : 1.0f / std::sqrt(static_cast<float>(d.head_size));
        C scale = static_cast<C>(scale_ ? *scale_ : 1.0 / std::sqrt(static_cast<double>(d.head_size)));
        ScoreEpilogue<C> epilogue;
        // The definition scales Q and K by sqrt(scale) and multiplies them in the inputs' type; for 16-bit inputs
        // every one of those steps rounds, which is reproduced here (float holds their products exactly).
        std::vector<C> q_scaled, k_scaled;
        if (q_in.type == TESS_ELEMENT_FLOAT16 || q_in.type == TESS_ELEMENT_BFLOAT16) {
            const float root = round_to_type(q_in.type, std::sqrt(given_scale));
            auto prescale = [&](const C* src, int64_t count, std::vector<C>& dst) {
                dst.resize(static_cast<size_t>(count));
                for (int64_t i = 0; i < count; ++i)
                    dst[i] = static_cast<C>(round_to_type(q_in.type, static_cast<float>(src[i]) * root));
                return dst.data();
            };
            qh.data = prescale(q.data(), q_in.size(), q_scaled);
            kh.data = prescale(k.data(), k_in.size(), k_scaled);
            scale = C(1);
            epilogue.score_type = q_in.type;
        }

        if ((!score_mod_ && !prob_mod_) || d.kv_len == 0 || d.batch * d.q_heads * d.q_len == 0) {
            run_fused_attention<C>(pool, d, scale, qh, kh, vh, yh, epilogue);
            y.finish(pool);
            return;
        }

        // The modifiers see the whole [batch, q_heads, q_len, kv_len] tensor, so this path works stage by stage.
        check_gemm_dimensions(kRowBlock, d.kv_len, d.head_size);
        check_gemm_dimensions(kRowBlock, d.v_head_size, d.kv_len);
        const Shape scores_shape{d.batch, d.q_heads, d.q_len, d.kv_len};
        std::vector<C> scores(static_cast<size_t>(shape_size(scores_shape)));
        const int64_t blocks = ceil_div(d.q_len, kRowBlock);
        const int64_t work = std::min(d.q_len, kRowBlock) * d.kv_len * (d.head_size + d.v_head_size);
        auto for_each_block = [&](auto&& fn) {
            pool.parallel_for(d.batch * d.q_heads * blocks, std::max<int64_t>(1, kTaskWork / work),
                              [&](int64_t begin, int64_t end) {
                                  for (int64_t task = begin; task < end; ++task) {
                                      const int64_t block = task % blocks, bh = task / blocks;
                                      const int64_t i0 = block * kRowBlock, rows = std::min(kRowBlock, d.q_len - i0);
                                      fn(bh / d.q_heads, bh % d.q_heads, i0, rows,
                                         scores.data() + (bh * d.q_len + i0) * d.kv_len);
                                  }
                              });
        };
        for_each_block([&](int64_t b, int64_t h, int64_t i0, int64_t rows, C* block) {
            score_block(d, scale, qh, kh, b, h, i0, rows, d.kv_len, block);
            round_scores(epilogue.score_type, block, rows * d.kv_len);
        });
        if (score_mod_) apply_modifier(ctx, *score_mod_, "score_mod", scores, scores_shape, precision);
        for_each_block([&](int64_t, int64_t, int64_t, int64_t rows, C* block) { softmax_rows(block, rows, d.kv_len); });
        if (prob_mod_) apply_modifier(ctx, *prob_mod_, "prob_mod", scores, scores_shape, precision);
        for_each_block([&](int64_t b, int64_t h, int64_t i0, int64_t rows, C* block) {
            value_block(d, vh, yh, b, h, i0, rows, d.kv_len, block);
        });
        y.finish(pool);
    }

    // values = body(values), exchanged with the body as tensors of the `precision` element type.
    template <typename C>
    void apply_modifier(KernelContext& ctx, const SubgraphBody& body, const char* what, std::vector<C>& values,
                        const Shape& shape, int32_t precision) const {
        ThreadPool& pool = ctx.pool();
        const int64_t count = shape_size(shape);
        Tensor argument{precision, shape, values.data(), nullptr};
        std::vector<std::byte> exchange;
        if (precision != element_type_of<C>()) {
            exchange.resize(element_bytes(precision, static_cast<size_t>(count)));
            convert_elements(pool, element_type_of<C>(), values.data(), precision, exchange.data(), count);
            argument.data = exchange.data();
        }
        OwnedOutputs outputs(1);
        body.run(ctx, {SubgraphBody::tensor_binding(argument)}, outputs);
        const Binding& result = outputs[0];
        if (!result.present || result.tensor.shape != shape || !convert::is_value_type(result.tensor.type) ||
            result.tensor.type == TESS_ELEMENT_BOOL)
            throw KernelError(std::string("FlexAttention: ") + what + " must return a floating-point tensor of shape " +
                              shape_string(shape));
        convert_elements(pool, result.tensor.type, result.tensor.data, element_type_of<C>(), values.data(), count);
    }

    int32_t softmax_precision_;
    std::optional<float> scale_;
    std::optional<SubgraphBody> score_mod_, prob_mod_;
};

// ---- RotaryEmbedding -----------------------------------------------------------------------------------------

// Rotates the first 2 * half elements of one head: pairs (x1, x2) are halves or neighbours (interleaved).
// kRound emulates arithmetic in a 16-bit input type: the definition computes in the input type, so each product
// and sum is rounded to it (float holds the products of two 16-bit values exactly, so this matches bit for bit).
template <bool kRound>
void rotate_head(int32_t type, bool interleaved, int64_t half, const float* __restrict x, const float* __restrict c,
                 const float* __restrict s, float* __restrict y) {
    auto r = [type](float v) {
        if constexpr (kRound)
            return round_to_type(type, v);
        else
            return v;
    };
    if (interleaved) {
        for (int64_t i = 0; i < half; ++i) {
            const float x1 = x[2 * i], x2 = x[2 * i + 1];
            y[2 * i] = r(r(c[i] * x1) - r(s[i] * x2));
            y[2 * i + 1] = r(r(s[i] * x1) + r(c[i] * x2));
        }
    } else {
        for (int64_t i = 0; i < half; ++i) {
            const float x1 = x[i], x2 = x[i + half];
            y[i] = r(r(c[i] * x1) - r(s[i] * x2));
            y[i + half] = r(r(s[i] * x1) + r(c[i] * x2));
        }
    }
}

class RotaryEmbeddingKernel final : public Kernel {
public:
    explicit RotaryEmbeddingKernel(const NodeInfo& info)
        : interleaved_(info.attr_int("interleaved", 0) != 0),
          rotary_dim_(info.attr_int("rotary_embedding_dim", 0)),
          num_heads_(info.attr_int("num_heads", 0)) {
        if (rotary_dim_ < 0 || num_heads_ < 0)
            throw KernelError("RotaryEmbedding: rotary_embedding_dim and num_heads must not be negative");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& cos = ctx.input(1);
        const Tensor& sin = ctx.input(2);
        // Tokens are (b, s); element (b, s, h, d) of the input sits at b*batch + s*seq + h*head + d.
        int64_t batch, seq_len, heads, head_size, batch_stride, seq_stride, head_stride;
        if (x.rank() == 4) {
            batch = x.shape[0], heads = x.shape[1], seq_len = x.shape[2], head_size = x.shape[3];
            batch_stride = heads * seq_len * head_size, head_stride = seq_len * head_size, seq_stride = head_size;
        } else if (x.rank() == 3) {
            if (num_heads_ == 0) throw KernelError("RotaryEmbedding: a 3-D input needs the num_heads attribute");
            if (x.shape[2] % num_heads_ != 0)
                throw KernelError("RotaryEmbedding: hidden size " + std::to_string(x.shape[2]) +
                                  " is not a multiple of num_heads " + std::to_string(num_heads_));
            batch = x.shape[0], seq_len = x.shape[1], heads = num_heads_, head_size = x.shape[2] / num_heads_;
            batch_stride = seq_len * x.shape[2], seq_stride = x.shape[2], head_stride = head_size;
        } else {
            throw KernelError("RotaryEmbedding: input must be 3-D or 4-D, got " + shape_string(x.shape));
        }
        const int64_t rotary_dim = rotary_dim_ != 0 ? rotary_dim_ : head_size;
        if (rotary_dim % 2 != 0 || rotary_dim > head_size)
            throw KernelError("RotaryEmbedding: rotary dimension " + std::to_string(rotary_dim) +
                              " must be even and at most the head size " + std::to_string(head_size));
        const int64_t half = rotary_dim / 2;

        // Row of the caches for each token.
        const bool has_positions = ctx.has_input(3);
        if (cos.shape != sin.shape || cos.type != sin.type)
            throw KernelError("RotaryEmbedding: cos_cache " + shape_string(cos.shape) + " and sin_cache " +
                              shape_string(sin.shape) + " differ in shape or type");
        std::vector<int64_t> cache_row(static_cast<size_t>(batch * seq_len));
        if (has_positions) {
            const Tensor& positions = ctx.input(3);
            if (positions.shape != Shape{batch, seq_len} || positions.type != TESS_ELEMENT_INT64)
                throw KernelError("RotaryEmbedding: position_ids must be int64 [batch, sequence], got " +
                                  shape_string(positions.shape));
            if (cos.rank() != 2 || cos.shape[1] != half)
                throw KernelError("RotaryEmbedding: with position_ids the caches must be [max_position, " +
                                  std::to_string(half) + "], got " + shape_string(cos.shape));
            const int64_t* ids = positions.ptr<int64_t>();
            for (size_t t = 0; t < cache_row.size(); ++t) {
                if (ids[t] < 0 || ids[t] >= cos.shape[0])
                    throw KernelError("RotaryEmbedding: position id " + std::to_string(ids[t]) +
                                      " is outside the caches' " + std::to_string(cos.shape[0]) + " rows");
                cache_row[t] = ids[t];
            }
        } else {
            if (cos.shape != Shape{batch, seq_len, half})
                throw KernelError("RotaryEmbedding: without position_ids the caches must be [" +
                                  std::to_string(batch) + ", " + std::to_string(seq_len) + ", " +
                                  std::to_string(half) + "], got " + shape_string(cos.shape));
            for (size_t t = 0; t < cache_row.size(); ++t) cache_row[t] = static_cast<int64_t>(t);
        }

        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> xs(x, pool);
        ConvertedOutput<float> y(ctx.output(0, x.type, x.shape));
        const float* in = xs.data();
        float* out = y.data();
        const int32_t type = x.type;
        const bool round = type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16;
        // Float caches are read in place; others row by row (a long cache is mostly rows nobody asks for).
        const size_t cache_row_bytes = element_bytes(cos.type, static_cast<size_t>(half));
        auto cache_values = [&](const Tensor& cache, int64_t row, float* scratch) -> const float* {
            if (cache.type == TESS_ELEMENT_FLOAT32) return cache.ptr<float>() + row * half;
            convert::convert_block(cache.type, static_cast<const std::byte*>(cache.data) + row * cache_row_bytes,
                                   TESS_ELEMENT_FLOAT32, scratch, 0, half, convert::CastOptions{});
            return scratch;
        };
        if (!convert::is_value_type(cos.type)) throw_unsupported_type("RotaryEmbedding cache", cos.type);
        const int64_t work = heads * head_size * 4;
        pool.parallel_for(batch * seq_len, std::max<int64_t>(1, kTaskWork / std::max<int64_t>(1, work)),
                          [&](int64_t begin, int64_t end) {
            float* scratch = thread_scratch_buffer<float>(2 * half);
            for (int64_t token = begin; token < end; ++token) {
                const float* c = cache_values(cos, cache_row[token], scratch);
                const float* s = cache_values(sin, cache_row[token], scratch + half);
                const int64_t base = (token / seq_len) * batch_stride + (token % seq_len) * seq_stride;
                for (int64_t h = 0; h < heads; ++h) {
                    const float* xi = in + base + h * head_stride;
                    float* yo = out + base + h * head_stride;
                    if (round)
                        rotate_head<true>(type, interleaved_, half, xi, c, s, yo);
                    else
                        rotate_head<false>(type, interleaved_, half, xi, c, s, yo);
                    std::copy(xi + rotary_dim, xi + head_size, yo + rotary_dim);
                }
            }
        });
        y.finish(pool);
    }

private:
    bool interleaved_;
    int64_t rotary_dim_;
    int64_t num_heads_;
};

// ---- RMSNormalization ----------------------------------------------------------------------------------------

// Sum of x[i]^2.  Float rows are summed in vector lanes (a reduction the compiler may not reorder itself), which
// is also more accurate than one running sum.
template <typename C> double sum_of_squares(const C* x, int64_t n) {
    if constexpr (std::is_same_v<C, float>) {
        double total = 0;
        vec::run_best_isa([&] {
            vec::Vf a{}, b{};
            int64_t i = 0;
            for (; i + 2 * vec::kLanes <= n; i += 2 * vec::kLanes) {
                const vec::Vf u = vec::load(x + i), v = vec::load(x + i + vec::kLanes);
                a += u * u;
                b += v * v;
            }
            for (; i < n; i += vec::kLanes) {
                const vec::Vf u = vec::load_n(x + i, std::min<int64_t>(vec::kLanes, n - i));
                a += u * u;
            }
            const vec::Vf sum = a + b;
            for (int lane = 0; lane < vec::kLanes; ++lane) total += sum[lane];
        });
        return total;
    } else {
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
        return sum;
    }
}

class RmsNormalizationKernel final : public Kernel {
public:
    explicit RmsNormalizationKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", -1)),
          epsilon_(info.attr_float("epsilon", 1e-5f)),
          stash_type_(info.attr_int("stash_type", TESS_ELEMENT_FLOAT32)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        const size_t axis = normalize_axis("RMSNormalization", axis_, x.rank());
        // Scale broadcasts (unidirectionally) to X; its values repeat every `period` elements of X.
        if (scale.rank() > x.rank())
            throw KernelError("RMSNormalization: scale " + shape_string(scale.shape) + " does not broadcast to X " +
                              shape_string(x.shape));
        const size_t first = x.rank() - scale.rank();
        for (size_t i = 0; i < scale.rank(); ++i)
            if (scale.shape[i] != 1 && scale.shape[i] != x.shape[first + i])
                throw KernelError("RMSNormalization: scale " + shape_string(scale.shape) +
                                  " does not broadcast to X " + shape_string(x.shape));
        const bool use_double = x.type == TESS_ELEMENT_FLOAT64 || scale.type == TESS_ELEMENT_FLOAT64 ||
                                stash_type_ == TESS_ELEMENT_FLOAT64;
        with_compute_type(use_double, [&]<typename C>() { run<C>(ctx, axis, first); });
    }

private:
    template <typename C> void run(KernelContext& ctx, size_t axis, size_t first) const {
        const Tensor& x = ctx.input(0);
        const Tensor& scale_in = ctx.input(1);
        ThreadPool& pool = ctx.pool();
        Tensor& y_out = ctx.output(0, scale_in.type, x.shape);
        if (x.size() == 0) return;
        int64_t rows = 1, row_size = 1, period = 1;
        for (size_t i = 0; i < x.rank(); ++i) {
            (i < axis ? rows : row_size) *= x.shape[i];
            if (i >= first) period *= x.shape[i];
        }
        const ConvertedInput<C> xs(x, pool), given_scale(scale_in, pool);
        // The scale laid out over X's last dimensions (a copy only when it actually broadcasts).
        std::vector<C> expanded;
        const C* scale = given_scale.data();
        if (scale_in.size() != period) {
            expanded.resize(static_cast<size_t>(period));
            const Shape dims(x.shape.begin() + static_cast<std::ptrdiff_t>(first), x.shape.end());
            std::vector<int64_t> strides(dims.size()), index(dims.size(), 0);
            for (int64_t i = static_cast<int64_t>(dims.size()) - 1, s = 1; i >= 0; --i) {
                strides[i] = scale_in.shape[i] == 1 ? 0 : s;
                s *= scale_in.shape[i];
            }
            int64_t source = 0;
            for (int64_t e = 0; e < period; ++e) {
                expanded[e] = scale[source];
                for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
                    source += strides[i];
                    if (++index[i] < dims[i]) break;
                    source -= strides[i] * dims[i];
                    index[i] = 0;
                }
            }
            scale = expanded.data();
        }
        ConvertedOutput<C> y(y_out);
        const C* in = xs.data();
        C* out = y.data();
        const C epsilon = static_cast<C>(epsilon_);
        pool.parallel_for(rows, std::max<int64_t>(1, kTaskWork / row_size), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const C* xr = in + r * row_size;
                C* yr = out + r * row_size;
                const double sum = sum_of_squares(xr, row_size);
                const C inverse_rms = C(1) / std::sqrt(static_cast<C>(sum / double(row_size)) + epsilon);
                // period and row_size are both products of trailing dimensions: one divides the other.
                if (period >= row_size) {
                    const C* sr = scale + (r * row_size) % period;
                    for (int64_t i = 0; i < row_size; ++i) yr[i] = xr[i] * inverse_rms * sr[i];
                } else {
                    for (int64_t start = 0; start < row_size; start += period)
                        for (int64_t i = 0; i < period; ++i)
                            yr[start + i] = xr[start + i] * inverse_rms * scale[i];
                }
            }
        });
        y.finish(pool);
    }

    int64_t axis_;
    float epsilon_;
    int64_t stash_type_;
};

// ---- LinearAttention -----------------------------------------------------------------------------------------

class LinearAttentionKernel final : public Kernel {
public:
    explicit LinearAttentionKernel(const NodeInfo& info)
        : q_heads_(info.attr_int("q_num_heads")),
          kv_heads_(info.attr_int("kv_num_heads")),
          scale_(info.attr_float("scale", 0.0f)) {
        const std::string rule = info.attr_string("update_rule", "gated_delta");
        if (rule == "linear") {
        } else if (rule == "gated") {
            gated_ = true;
        } else if (rule == "delta") {
            delta_ = true;
        } else if (rule == "gated_delta") {
            gated_ = delta_ = true;
        } else {
            throw KernelError("LinearAttention: unknown update_rule '" + rule + "'");
        }
        if (q_heads_ <= 0 || kv_heads_ <= 0 || q_heads_ % kv_heads_ != 0)
            throw KernelError("LinearAttention: q_num_heads (" + std::to_string(q_heads_) +
                              ") must be a positive multiple of kv_num_heads (" + std::to_string(kv_heads_) + ")");
    }

    // Per key/value head, the state S [d_k, d_v] evolves token by token:
    //   gated:  S *= exp(g_t) (per key row, or one factor per head)
    //   delta:  u_t = beta_t * (v_t - S^T k_t), else u_t = v_t
    //   S += k_t u_t^T;  o_t = scale * S^T q_t for each query head sharing the KV head
    void compute(KernelContext& ctx) const override {
        const Tensor& query = ctx.input(0);
        const Tensor& key = ctx.input(1);
        const Tensor& value = ctx.input(2);
        if (query.rank() != 3 || key.rank() != 3 || value.rank() != 3)
            throw KernelError("LinearAttention: query, key and value must be 3-D (B, T, H*D)");
        const int64_t batch = query.shape[0], steps = query.shape[1];
        if (query.shape[2] % q_heads_ != 0 || value.shape[2] % kv_heads_ != 0)
            throw KernelError("LinearAttention: packed sizes are not multiples of the head counts");
        const int64_t dk = query.shape[2] / q_heads_, dv = value.shape[2] / kv_heads_;
        if (key.shape != Shape{batch, steps, kv_heads_ * dk} || value.shape[0] != batch || value.shape[1] != steps)
            throw KernelError("LinearAttention: query " + shape_string(query.shape) + ", key " +
                              shape_string(key.shape) + " and value " + shape_string(value.shape) + " do not agree");
        const Shape state_shape{batch, kv_heads_, dk, dv};
        if (ctx.has_input(3) && ctx.input(3).shape != state_shape)
            throw KernelError("LinearAttention: past_state must be " + shape_string(state_shape) + ", got " +
                              shape_string(ctx.input(3).shape));
        int64_t decay_width = 0, beta_width = 0;  // per token: decay values (H_kv*d_k or H_kv), beta values (H_kv or 1)
        if (gated_) {
            if (!ctx.has_input(4)) throw KernelError("LinearAttention: the gated update rules need the decay input");
            const Shape& s = ctx.input(4).shape;
            decay_width = s.size() == 3 ? s[2] : -1;
            if (s.size() != 3 || s[0] != batch || s[1] != steps ||
                (decay_width != kv_heads_ * dk && decay_width != kv_heads_))
                throw KernelError("LinearAttention: decay must be [B, T, H_kv*d_k] or [B, T, H_kv], got " +
                                  shape_string(s));
        }
        if (delta_) {
            if (!ctx.has_input(5)) throw KernelError("LinearAttention: the delta update rules need the beta input");
            const Shape& s = ctx.input(5).shape;
            beta_width = s.size() == 3 ? s[2] : -1;
            if (s.size() != 3 || s[0] != batch || s[1] != steps || (beta_width != kv_heads_ && beta_width != 1))
                throw KernelError("LinearAttention: beta must be [B, T, H_kv] or [B, T, 1], got " + shape_string(s));
        }

        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> q(query, pool), k(key, pool), v(value, pool);
        const ConvertedInput<float> past = ctx.has_input(3) ? ConvertedInput<float>(ctx.input(3), pool)
                                                            : ConvertedInput<float>();
        const ConvertedInput<float> decay = gated_ ? ConvertedInput<float>(ctx.input(4), pool) : ConvertedInput<float>();
        const ConvertedInput<float> beta = delta_ ? ConvertedInput<float>(ctx.input(5), pool) : ConvertedInput<float>();
        ConvertedOutput<float> out(ctx.output(0, query.type, {batch, steps, q_heads_ * dv}));
        const int32_t state_type = ctx.has_input(3) ? ctx.input(3).type : query.type;
        // The state lives in present_state (or scratch when nobody reads it).
        std::vector<float> state_scratch;
        ConvertedOutput<float> present;
        float* states;
        if (ctx.output_wanted(1)) {
            present = ConvertedOutput<float>(ctx.output(1, state_type, state_shape));
            states = present.data();
        } else {
            state_scratch.resize(static_cast<size_t>(shape_size(state_shape)));
            states = state_scratch.data();
        }
        const int64_t group = q_heads_ / kv_heads_;
        const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(dk));
        const int64_t work = steps * dk * dv * (group + 3);
        pool.parallel_for(batch * kv_heads_, std::max<int64_t>(1, kTaskWork / std::max<int64_t>(1, work)),
                          [&](int64_t begin, int64_t end) {
            float* update = thread_scratch_buffer<float>(dv);
            for (int64_t bh = begin; bh < end; ++bh) {
                const int64_t b = bh / kv_heads_, h = bh % kv_heads_;
                float* S = states + bh * dk * dv;
                if (past.data() != nullptr)
                    std::copy_n(past.data() + bh * dk * dv, dk * dv, S);
                else
                    std::fill_n(S, dk * dv, 0.0f);
                for (int64_t t = 0; t < steps; ++t) {
                    const int64_t token = b * steps + t;
                    const float* kt = k.data() + token * kv_heads_ * dk + h * dk;
                    const float* vt = v.data() + token * kv_heads_ * dv + h * dv;
                    if (gated_) {
                        const float* g = decay.data() + token * decay_width;
                        for (int64_t i = 0; i < dk; ++i) {
                            const float factor = std::exp(decay_width == kv_heads_ * dk ? g[h * dk + i] : g[h]);
                            for (int64_t m = 0; m < dv; ++m) S[i * dv + m] *= factor;
                        }
                    }
                    if (delta_) {
                        const float rate = beta.data()[token * beta_width + (beta_width == 1 ? 0 : h)];
                        std::copy_n(vt, dv, update);
                        for (int64_t i = 0; i < dk; ++i)
                            for (int64_t m = 0; m < dv; ++m) update[m] -= S[i * dv + m] * kt[i];
                        for (int64_t m = 0; m < dv; ++m) update[m] *= rate;
                    } else {
                        std::copy_n(vt, dv, update);
                    }
                    for (int64_t i = 0; i < dk; ++i)
                        for (int64_t m = 0; m < dv; ++m) S[i * dv + m] += kt[i] * update[m];
                    for (int64_t r = 0; r < group; ++r) {
                        const int64_t hq = h * group + r;
                        const float* qt = q.data() + token * q_heads_ * dk + hq * dk;
                        float* o = out.data() + token * q_heads_ * dv + hq * dv;
                        std::fill_n(o, dv, 0.0f);
                        for (int64_t i = 0; i < dk; ++i)
                            for (int64_t m = 0; m < dv; ++m) o[m] += qt[i] * S[i * dv + m];
                        for (int64_t m = 0; m < dv; ++m) o[m] *= scale;
                    }
                }
            }
        });
        out.finish(pool);
        present.finish(pool);
    }

private:
    int64_t q_heads_, kv_heads_;
    float scale_;
    bool gated_ = false, delta_ = false;
};

// ---- CausalConvWithState -------------------------------------------------------------------------------------

class CausalConvWithStateKernel final : public Kernel {
public:
    explicit CausalConvWithStateKernel(const NodeInfo& info) {
        const std::string activation = info.attr_string("activation", "none");
        if (activation == "silu" || activation == "swish")
            silu_ = true;
        else if (activation != "none")
            throw KernelError("CausalConvWithState: unknown activation '" + activation + "'");
    }

    // Depthwise causal convolution over [past_state (or zeros), input] per (batch, channel):
    //   out[t] = bias + sum_j w[j] * padded[t + j];  present_state = the last k - 1 padded values.
    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        if (x.rank() != 3) throw KernelError("CausalConvWithState: input must be 3-D, got " + shape_string(x.shape));
        const int64_t batch = x.shape[0], channels = x.shape[1], length = x.shape[2];
        if (w.rank() != 3 || w.shape[0] != channels || w.shape[1] != 1 || w.shape[2] < 1)
            throw KernelError("CausalConvWithState: weight must be [" + std::to_string(channels) + ", 1, k], got " +
                              shape_string(w.shape));
        const int64_t taps = w.shape[2], carry = taps - 1;
        const Shape state_shape{batch, channels, carry};
        if (ctx.has_input(2) && ctx.input(2).shape != Shape{channels})
            throw KernelError("CausalConvWithState: bias must be [" + std::to_string(channels) + "], got " +
                              shape_string(ctx.input(2).shape));
        if (ctx.has_input(3) && ctx.input(3).shape != state_shape)
            throw KernelError("CausalConvWithState: past_state must be " + shape_string(state_shape) + ", got " +
                              shape_string(ctx.input(3).shape));

        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> in(x, pool), weights(w, pool);
        const ConvertedInput<float> bias = ctx.has_input(2) ? ConvertedInput<float>(ctx.input(2), pool)
                                                            : ConvertedInput<float>();
        const ConvertedInput<float> past = ctx.has_input(3) ? ConvertedInput<float>(ctx.input(3), pool)
                                                            : ConvertedInput<float>();
        ConvertedOutput<float> out(ctx.output(0, x.type, x.shape));
        ConvertedOutput<float> present;
        if (ctx.output_wanted(1)) present = ConvertedOutput<float>(ctx.output(1, x.type, state_shape));
        const int32_t out_type = x.type;
        pool.parallel_for(batch * channels, std::max<int64_t>(1, kTaskWork / std::max<int64_t>(1, length * taps)),
                          [&](int64_t begin, int64_t end) {
            float* padded = thread_scratch_buffer<float>(carry + length);
            for (int64_t bc = begin; bc < end; ++bc) {
                const int64_t c = bc % channels;
                if (past.data() != nullptr)
                    std::copy_n(past.data() + bc * carry, carry, padded);
                else
                    std::fill_n(padded, carry, 0.0f);
                std::copy_n(in.data() + bc * length, length, padded + carry);
                const float* wc = weights.data() + c * taps;
                const float b = bias.data() != nullptr ? bias.data()[c] : 0.0f;
                float* o = out.data() + bc * length;
                for (int64_t t = 0; t < length; ++t) {
                    float sum = b;
                    for (int64_t j = 0; j < taps; ++j) sum += wc[j] * padded[t + j];
                    if (silu_) {
                        // The reference rounds the convolution to the output type before the activation.
                        sum = round_to_type(out_type, sum);
                        sum = sum / (1.0f + std::exp(-sum));
                    }
                    o[t] = sum;
                }
                if (present.data() != nullptr) std::copy_n(padded + length, carry, present.data() + bc * carry);
            }
        });
        out.finish(pool);
        present.finish(pool);
    }

private:
    bool silu_ = false;
};

}  // namespace

void register_transformer_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> floats = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<int32_t> float32_and_16bit = type_ids_with_16bit_floats(TypeList<float>{});
    const std::vector<std::pair<size_t, std::vector<int32_t>>> qkv{{0, floats}, {1, floats}, {2, floats}};
    // attn_mask is bool or any number (converted to the compute type); the caches have Q's types.
    auto attention_inputs = qkv;
    attention_inputs.insert(attention_inputs.end(),
                            {{3, element_types_where(convert::is_value_type)}, {4, floats}, {5, floats}});
    registry.add({"", "Attention", 23, 23, attention_inputs, KernelMemory::Normal, make_factory<AttentionKernel>()});
    registry.add({"", "Attention", 24, 0, attention_inputs, KernelMemory::Normal, make_factory<AttentionKernel>()});
    registry.add({"ai.onnx.preview", "FlexAttention", 1, 0, qkv, KernelMemory::Normal,
                  make_factory<FlexAttentionKernel>()});
    registry.add({"", "RotaryEmbedding", 23, 0, {{0, float32_and_16bit}, {1, float32_and_16bit}},
                  KernelMemory::Normal, make_factory<RotaryEmbeddingKernel>()});
    registry.add({"", "RMSNormalization", 23, 0, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<RmsNormalizationKernel>()});
    registry.add({"", "LinearAttention", 27, 0, {{0, float32_and_16bit}, {1, float32_and_16bit}, {2, float32_and_16bit}},
                  KernelMemory::Normal, make_factory<LinearAttentionKernel>()});
    registry.add({"", "CausalConvWithState", 27, 0, {{0, float32_and_16bit}, {1, float32_and_16bit}},
                  KernelMemory::Normal, make_factory<CausalConvWithStateKernel>()});
}

}  // namespace tessera::cpu
