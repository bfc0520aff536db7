// CPU provider: transformer building blocks besides attention (kernels/transformer/attention.cc).
//   RotaryEmbedding (23), RMSNormalization (23) and onnxruntime's SimplifiedLayerNormalization, LinearAttention
//   (27), CausalConvWithState (27).
//
// Every op computes in one precision: double when the inputs are double, float for float, float16 and bfloat16
// (converted on the way in and rounded on the way out, as the ONNX definitions do for their recurrences).  Where a
// definition computes in the 16-bit input type itself (RotaryEmbedding), its roundings are reproduced.  Inputs
// already in the compute type are read in place.
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

namespace tessera::cpu {

namespace {

constexpr int64_t kTaskWork = 1 << 16;  // multiply-adds worth a parallel task

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
        with_float_or_double(use_double, [&]<typename C>() { run<C>(ctx, axis, first); });
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
        // SimplifiedLayerNormalization's optional inv_std_var: X's shape with the normalized dimensions set to 1.
        float* inverse_rms_out = nullptr;
        if (ctx.output_count() > 1 && ctx.output_wanted(1)) {
            Shape stats_shape = x.shape;
            std::fill(stats_shape.begin() + static_cast<std::ptrdiff_t>(axis), stats_shape.end(), 1);
            inverse_rms_out = ctx.output(1, TESS_ELEMENT_FLOAT32, stats_shape).template ptr<float>();
        }
        pool.parallel_for(rows, std::max<int64_t>(1, kTaskWork / row_size), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const C* xr = in + r * row_size;
                C* yr = out + r * row_size;
                const double sum = sum_of_squares(xr, row_size);
                const C inverse_rms = C(1) / std::sqrt(static_cast<C>(sum / double(row_size)) + epsilon);
                if (inverse_rms_out != nullptr) inverse_rms_out[r] = static_cast<float>(inverse_rms);
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
    registry.add({"", "RotaryEmbedding", 23, 0, {{0, float32_and_16bit}, {1, float32_and_16bit}},
                  KernelMemory::Normal, make_factory<RotaryEmbeddingKernel>()});
    registry.add({"", "RMSNormalization", 23, 0, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<RmsNormalizationKernel>()});
    // onnxruntime's contrib schema in the default domain (its exporters write it for RMS norms): RMSNormalization
    // with an optional second output, inv_std_var.
    registry.add({"", "SimplifiedLayerNormalization", 1, 0, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<RmsNormalizationKernel>()});
    registry.add({"", "LinearAttention", 27, 0, {{0, float32_and_16bit}, {1, float32_and_16bit}, {2, float32_and_16bit}},
                  KernelMemory::Normal, make_factory<LinearAttentionKernel>()});
    registry.add({"", "CausalConvWithState", 27, 0, {{0, float32_and_16bit}, {1, float32_and_16bit}},
                  KernelMemory::Normal, make_factory<CausalConvWithStateKernel>()});
}

}  // namespace tessera::cpu
