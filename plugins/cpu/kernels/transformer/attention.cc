// CPU provider: scaled dot-product attention.
//   Attention (opset 23, 24, 25), FlexAttention (ai.onnx.preview 1).
//
// Attention computes in float (double when the inputs or softmax_precision are double).  For float16 and bfloat16
// inputs it rounds where the operator's function body does (Q and K scaled in the input type, scores, bias sum and
// probabilities stored in it), so the fused kernel and the expanded graph agree.
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

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "runtime/subgraph_body.h"
#include "util/axes.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"
#include "kernels/transformer/attention_core.h"

namespace tessera::cpu {

namespace {

using namespace attention_core;

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

// ---- Attention ---------------------------------------------------------------------------------------------------

class AttentionKernel final : public Kernel {
public:
    explicit AttentionKernel(const NodeInfo& info)
        : opset_(info.domain() == TESS_FUSED_OPS_DOMAIN ? 23 : info.opset()),
          q_num_heads_(info.attr_int("q_num_heads", 0)),
          kv_num_heads_(info.attr_int("kv_num_heads", 0)),
          is_causal_(info.attr_int("is_causal", 0) != 0),
          softcap_(info.attr_float("softcap", 0.0f)),
          qk_mode_(info.attr_int("qk_matmul_output_mode", 0)),
          softmax_precision_(parse_precision(info, "softmax_precision")),
          left_window_(info.attr_int("left_window_size", -1)),
          right_window_(info.attr_int("right_window_size", -1)) {
        if (info.has_attr("scale")) scale_ = info.attr_float("scale", 0.0f);
        if (left_window_ < -1 || right_window_ < -1)
            throw KernelError("Attention: left_window_size and right_window_size must be -1 or at least 0, got " +
                              std::to_string(left_window_) + " and " + std::to_string(right_window_));
        if (qk_mode_ < 0 || qk_mode_ > 3)
            throw KernelError("Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got " + std::to_string(qk_mode_));
        if (q_num_heads_ < 0 || kv_num_heads_ < 0) throw KernelError("Attention: head counts must be positive");
    }

    void compute(KernelContext& ctx) const override {
        const bool use_double =
            ctx.input(0).type == TESS_ELEMENT_FLOAT64 || softmax_precision_ == TESS_ELEMENT_FLOAT64;
        with_float_or_double(use_double, [&]<typename C>() { run<C>(ctx); });
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
            if (g.past > 0 || ctx.output_wanted(1) || ctx.output_wanted(2))
                throw KernelError("Attention: nonpad_kv_seqlen describes an external cache and cannot be combined "
                                  "with past_key/past_value or present_key/present_value");
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
        epilogue.bias.q_len = d.q_len;
        epilogue.bias.left_window = left_window_;
        epilogue.bias.right_window = right_window_;
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
        C scale = scale_ ? static_cast<C>(*scale_) : C(1) / std::sqrt(static_cast<C>(d.head_size));
        // 16-bit inputs: the function body computes in the input type T up to the softmax, which runs in
        // softmax_precision (T when absent); its probabilities are cast back to T.
        std::vector<C> q_scaled, k_scaled;
        if (is_16bit_float(q_in.type)) {
            const float root = round_to_type(q_in.type, static_cast<float>(std::sqrt(static_cast<double>(scale))));
            prescale_16bit(q_in.type, root, q_heads, q_in.size(), q_scaled);
            prescale_16bit(q_in.type, root, k_heads, d.batch * d.kv_heads * total * d.head_size, k_scaled);
            scale = C(1);
            epilogue.score_type = q_in.type;
            epilogue.prob_type = q_in.type;
        }
        epilogue.softmax_type = softmax_precision_ != 0 ? softmax_precision_ : epilogue.score_type;
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
    int64_t left_window_, right_window_;
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
        with_float_or_double(precision == TESS_ELEMENT_FLOAT64, [&]<typename C>() { run<C>(ctx, precision); });
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
        // The definition computes Q K^T in the inputs' type (see prescale_16bit).
        std::vector<C> q_scaled, k_scaled;
        if (is_16bit_float(q_in.type)) {
            const float root = round_to_type(q_in.type, std::sqrt(given_scale));
            prescale_16bit(q_in.type, root, qh, q_in.size(), q_scaled);
            prescale_16bit(q_in.type, root, kh, k_in.size(), k_scaled);
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

}  // namespace

void register_attention_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> floats = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<std::pair<size_t, std::vector<int32_t>>> qkv{{0, floats}, {1, floats}, {2, floats}};
    // attn_mask is bool or any number (converted to the compute type); the caches have Q's types.
    auto attention_inputs = qkv;
    attention_inputs.insert(attention_inputs.end(),
                            {{3, element_types_where(convert::is_value_type)}, {4, floats}, {5, floats}});
    registry.add({"", "Attention", 23, 23, attention_inputs, KernelMemory::Normal, make_factory<AttentionKernel>()});
    registry.add({"", "Attention", 24, 24, attention_inputs, KernelMemory::Normal, make_factory<AttentionKernel>()});
    // Opset 25 adds the sliding window (left_window_size, right_window_size).
    registry.add({"", "Attention", 25, 0, attention_inputs, KernelMemory::Normal, make_factory<AttentionKernel>()});
    // The optimizer's fused attention (provider.h): opset 23's operator for models of any opset.
    registry.add({TESS_FUSED_OPS_DOMAIN, "Attention", 1, 0, attention_inputs, KernelMemory::Normal,
                  make_factory<AttentionKernel>()});
    registry.add({"ai.onnx.preview", "FlexAttention", 1, 0, qkv, KernelMemory::Normal,
                  make_factory<FlexAttentionKernel>()});
}

}  // namespace tessera::cpu
