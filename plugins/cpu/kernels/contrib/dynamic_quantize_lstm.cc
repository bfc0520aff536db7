// CPU provider, com.microsoft: DynamicQuantizeLSTM, the LSTM that onnxruntime's quantize_dynamic makes of ONNX's,
// with 8-bit weights and the activations quantized as they go, as onnxruntime computes it.
//
//   DynamicQuantizeLSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale, W_zero_point, R_scale,
//                       R_zero_point) -> Y?, Y_h?, Y_c?
//     X [seq, batch, input] float; W [dirs, input, 4H] and R [dirs, H, 4H] int8 or uint8 (the transpose of ONNX's
//     layout: ready as GEMM right-hand sides), gate columns in ONNX's order i, o, f, c; scales and zero points per
//     direction ([dirs]) or per column ([dirs, 4H]); B [dirs, 8H], P [dirs, 3H] float.
//
// onnxruntime's arithmetic, so that a quantized model computes onnxruntime's numbers: every product quantizes its
// float operand to uint8 with the range including 0 (scale (max - min) / 255, zero point rounded half to even), and
// scales the exact int32 sums by a_scale * w_scale[column] into float, the recurrent ones added onto the input ones.
//  - The product with W quantizes X's first max(sequence_lens) steps at once.
//  - Each step's product with R quantizes the previous hidden states of a group of batch rows: onnxruntime splits the
//    batch into ceil(batch / threads) rows per thread when the batch is over 4, or 2 or more with hidden_size <= 256,
//    and quantizes each group on its own; this kernel groups the rows the same way for the session's thread count.
//  - A row whose sequence ended feeds zeros to the next step's product when the node has a Y output (onnxruntime
//    reads the previous step's Y, zero there), its last hidden state otherwise.
// Then the gates as ONNX's LSTM defines them with the default activations (sigmoid, tanh, tanh), peepholes, clip and
// input_forget, in onnxruntime's order of additions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "kernels/quantization/quantize_support.h"
#include "util/int8_gemm.h"

namespace tessera::cpu {

namespace {

// One direction's quantized weights (W or R), packed for int8_gemm once, with their per-column scales and zero points.
struct QuantizedWeights {
    Int8PackedB packed;
    std::vector<float> scales;      // per column (a per-direction scalar repeated)
    std::vector<int32_t> zeros;     // per column
};

// Direction d of a [dirs, K, N] int8/uint8 weight with its [dirs] or [dirs, N] scale and zero point.
QuantizedWeights quantized_weights(const std::string& name, const Tensor& w, const Tensor& scale, const Tensor* zero,
                                   int64_t d, int64_t K, int64_t N) {
    if (w.type != TESS_ELEMENT_INT8 && w.type != TESS_ELEMENT_UINT8) throw_unsupported_type("DynamicQuantizeLSTM " + name, w.type);
    if (scale.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type("DynamicQuantizeLSTM " + name + "_scale", scale.type);
    const int64_t dirs = w.shape[0];
    const bool per_column = scale.size() == dirs * N;
    if (!per_column && scale.size() != dirs)
        throw KernelError("DynamicQuantizeLSTM: " + name + "_scale " + shape_string(scale.shape) + " must be [" +
                          std::to_string(dirs) + "] or [" + std::to_string(dirs) + ", " + std::to_string(N) + "]");
    QuantizedWeights q;
    q.packed = Int8PackedB(static_cast<const uint8_t*>(w.data) + d * K * N, w.type == TESS_ELEMENT_INT8, K, N, N, 1);
    q.scales.resize(static_cast<size_t>(N));
    q.zeros.assign(static_cast<size_t>(N), 0);
    for (int64_t n = 0; n < N; ++n) q.scales[n] = scale.ptr<float>()[per_column ? d * N + n : d];
    if (zero != nullptr) {
        if (zero->type != w.type || zero->size() != scale.size())
            throw KernelError("DynamicQuantizeLSTM: " + name + "_zero_point must have " + name + "'s type and " +
                              name + "_scale's shape");
        for (int64_t n = 0; n < N; ++n) {
            const int64_t at = per_column ? d * N + n : d;
            q.zeros[n] = w.type == TESS_ELEMENT_INT8 ? zero->ptr<int8_t>()[at] : zero->ptr<uint8_t>()[at];
        }
    }
    return q;
}

// Every direction of a weight, packed.
std::vector<QuantizedWeights> quantized_directions(const std::string& name, const Tensor& w, const Tensor& scale,
                                                   const Tensor* zero, int64_t K, int64_t N) {
    std::vector<QuantizedWeights> all;
    for (int64_t d = 0; d < w.shape[0]; ++d) all.push_back(quantized_weights(name, w, scale, zero, d, K, N));
    return all;
}

// The buffers of one run's products, reused from step to step.
struct ProductScratch {
    std::vector<uint8_t> quantized;
    std::vector<int32_t> sums, a_zero;
    std::vector<float> multiplier;
};

// out[m, n] (+)= float(sum) * (a_scale * w_scale[n]) for the rows of A quantized here; `accumulate` adds onto out.
void quantized_product(ThreadPool& pool, const float* a, int64_t M, int64_t K, const QuantizedWeights& w, float* out,
                       bool accumulate, ProductScratch& scratch) {
    const int64_t N = w.packed.columns();
    scratch.quantized.resize(static_cast<size_t>(M * K));
    scratch.sums.resize(static_cast<size_t>(M * N));
    scratch.multiplier.resize(static_cast<size_t>(N));
    Tensor source{TESS_ELEMENT_FLOAT32, Shape{M, K}, const_cast<float*>(a), nullptr};
    Tensor target{TESS_ELEMENT_UINT8, Shape{M, K}, scratch.quantized.data(), nullptr};
    const quant::DynamicQuantization q = quant::dynamic_quantize_uint8(pool, source, target);
    scratch.a_zero.assign(static_cast<size_t>(M), q.zero_point);
    int32_t* sums = scratch.sums.data();
    int8_gemm(pool, M, scratch.quantized.data(), false, K, w.packed, scratch.a_zero.data(), w.zeros.data(), sums, N);
    float* multiplier = scratch.multiplier.data();
    for (int64_t n = 0; n < N; ++n) multiplier[n] = q.scale * w.scales[n];
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const float v = static_cast<float>(sums[m * N + n]) * multiplier[n];
            out[m * N + n] = accumulate ? out[m * N + n] + v : v;
        }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

class DynamicQuantizeLstmKernel final : public Kernel {
public:
    explicit DynamicQuantizeLstmKernel(const NodeInfo& info)
        : hidden_(info.attr_int("hidden_size")),
          declares_y_(info.has_output(0)),
          clip_(info.attr_float("clip", std::numeric_limits<float>::infinity())),
          input_forget_(info.attr_int("input_forget", 0) != 0) {
        const std::string direction = info.attr_string("direction", "forward");
        if (direction == "bidirectional") directions_ = 2;
        else if (direction == "reverse") reverse_ = true;
        else if (direction != "forward")
            throw KernelError("DynamicQuantizeLSTM: direction must be forward, reverse or bidirectional");
        if (hidden_ < 1) throw KernelError("DynamicQuantizeLSTM: hidden_size must be positive");
        // Constant weights (what quantize_dynamic writes) are packed once; the model's copies are then released.
        prepack(info, 1, 8, 9, "W", packed_w_, w_shape_);
        prepack(info, 2, 10, 11, "R", packed_r_, r_shape_);
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        const Shape& w_shape = packed_w_.empty() ? ctx.input(1).shape : w_shape_;
        const Shape& r_shape = packed_r_.empty() ? ctx.input(2).shape : r_shape_;
        if (X.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type("DynamicQuantizeLSTM X", X.type);
        const int64_t H = hidden_, G = 4 * H, D = directions_;
        if (X.rank() != 3) throw KernelError("DynamicQuantizeLSTM: X must be [seq, batch, input], got " + shape_string(X.shape));
        const int64_t steps = X.shape[0], batch = X.shape[1], input = X.shape[2];
        if (w_shape != Shape{D, input, G})
            throw KernelError("DynamicQuantizeLSTM: W " + shape_string(w_shape) + " must be " + shape_string({D, input, G}));
        if (r_shape != Shape{D, H, G})
            throw KernelError("DynamicQuantizeLSTM: R " + shape_string(r_shape) + " must be " + shape_string({D, H, G}));
        auto optional_float = [&](size_t i, const Shape& shape, const char* name) -> const float* {
            if (!ctx.has_input(i)) return nullptr;
            const Tensor& t = ctx.input(i);
            if (t.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(std::string("DynamicQuantizeLSTM ") + name, t.type);
            if (t.shape != shape)
                throw KernelError(std::string("DynamicQuantizeLSTM: ") + name + " " + shape_string(t.shape) +
                                  " must be " + shape_string(shape));
            return t.ptr<float>();
        };
        const float* bias = optional_float(3, {D, 2 * G}, "B");
        const float* initial_h = optional_float(5, {D, batch, H}, "initial_h");
        const float* initial_c = optional_float(6, {D, batch, H}, "initial_c");
        const float* peephole = optional_float(7, {D, 3 * H}, "P");
        std::vector<int64_t> lengths(static_cast<size_t>(batch), steps);
        if (ctx.has_input(4)) {
            const Tensor& l = ctx.input(4);
            if (l.type != TESS_ELEMENT_INT32 || l.shape != Shape{batch})
                throw KernelError("DynamicQuantizeLSTM: sequence_lens must be int32 [" + std::to_string(batch) + "]");
            for (int64_t b = 0; b < batch; ++b) {
                lengths[b] = l.ptr<int32_t>()[b];
                if (lengths[b] < 0 || lengths[b] > steps)
                    throw KernelError("DynamicQuantizeLSTM: sequence_lens entries must lie in [0, " + std::to_string(steps) + "]");
            }
        }
        const Tensor* w_zero = ctx.has_input(9) ? &ctx.input(9) : nullptr;
        const Tensor* r_zero = ctx.has_input(11) ? &ctx.input(11) : nullptr;

        float* Y = ctx.output_wanted(0) ? ctx.output(0, TESS_ELEMENT_FLOAT32, {steps, D, batch, H}).ptr<float>() : nullptr;
        float* Y_h = ctx.output_wanted(1) ? ctx.output(1, TESS_ELEMENT_FLOAT32, {D, batch, H}).ptr<float>() : nullptr;
        float* Y_c = ctx.output_wanted(2) ? ctx.output(2, TESS_ELEMENT_FLOAT32, {D, batch, H}).ptr<float>() : nullptr;
        if (Y != nullptr) std::fill(Y, Y + steps * D * batch * H, 0.0f);
        ThreadPool& pool = ctx.pool();

        const int64_t max_length = batch > 0 ? *std::max_element(lengths.begin(), lengths.end()) : 0;
        // onnxruntime's partition of the batch for the recurrent products (see the file comment).
        const int64_t threads = std::max<int64_t>(1, pool.size());
        const bool split = batch > 4 || (batch >= 2 && H <= 256);
        const int64_t group = split ? (batch + threads - 1) / threads : std::max<int64_t>(batch, 1);
        std::vector<QuantizedWeights> w_here, r_here;  // weights that are not constants, packed for this run
        if (packed_w_.empty()) w_here = quantized_directions("W", ctx.input(1), ctx.input(8), w_zero, input, G);
        if (packed_r_.empty()) r_here = quantized_directions("R", ctx.input(2), ctx.input(10), r_zero, H, G);
        const std::vector<QuantizedWeights>& w_all = packed_w_.empty() ? w_here : packed_w_;
        const std::vector<QuantizedWeights>& r_all = packed_r_.empty() ? r_here : packed_r_;
        ProductScratch scratch;
        for (int64_t d = 0; d < D; ++d) {
            const bool backward = reverse_ || d == 1;
            const QuantizedWeights& w = w_all[d];
            const QuantizedWeights& r = r_all[d];
            // The product with W for the first max_length steps at once (a backward row reads them in reverse).
            std::vector<float> x_gates(static_cast<size_t>(max_length * batch * G), 0.0f);
            if (max_length * batch > 0 && input > 0)
                quantized_product(pool, X.ptr<float>(), max_length * batch, input, w, x_gates.data(), false, scratch);
            std::vector<float> h(static_cast<size_t>(batch * H), 0.0f), c(static_cast<size_t>(batch * H), 0.0f);
            if (initial_h != nullptr) std::copy_n(initial_h + d * batch * H, batch * H, h.begin());
            if (initial_c != nullptr) std::copy_n(initial_c + d * batch * H, batch * H, c.begin());
            std::vector<float> gates(static_cast<size_t>(batch * G)), fed(static_cast<size_t>(batch * H));
            const float* wb = bias != nullptr ? bias + d * 2 * G : nullptr;
            const float* p = peephole != nullptr ? peephole + d * 3 * H : nullptr;
            for (int64_t s = 0; s < max_length; ++s) {
                // Row b reads X at time t = s forward, lengths[b] - 1 - s backward.
                for (int64_t b = 0; b < batch; ++b) {
                    const int64_t t = backward ? lengths[b] - 1 - s : s;
                    if (s < lengths[b]) std::copy_n(&x_gates[(t * batch + b) * G], G, &gates[b * G]);
                    else std::fill_n(&gates[b * G], G, 0.0f);
                    const bool zeroed = declares_y_ && s > 0 && s - 1 >= lengths[b];
                    if (zeroed) std::fill_n(&fed[b * H], H, 0.0f);
                    else std::copy_n(&h[b * H], H, &fed[b * H]);
                }
                for (int64_t first = 0; first < batch && H > 0; first += group) {
                    const int64_t rows = std::min(group, batch - first);
                    quantized_product(pool, &fed[first * H], rows, H, r, &gates[first * G], true, scratch);
                }
                for (int64_t b = 0; b < batch; ++b) {
                    if (s >= lengths[b]) continue;
                    step_row(&gates[b * G], wb, p, &h[b * H], &c[b * H]);
                    const int64_t t = backward ? lengths[b] - 1 - s : s;
                    if (Y != nullptr) std::copy_n(&h[b * H], H, Y + ((t * D + d) * batch + b) * H);
                }
            }
            for (int64_t b = 0; b < batch; ++b) {
                if (lengths[b] > 0) continue;  // no step: onnxruntime reports zeros, not the initial state
                std::fill_n(&h[b * H], H, 0.0f);
                std::fill_n(&c[b * H], H, 0.0f);
            }
            if (Y_h != nullptr) std::copy(h.begin(), h.end(), Y_h + d * batch * H);
            if (Y_c != nullptr) std::copy(c.begin(), c.end(), Y_c + d * batch * H);
        }
    }

private:
    // Packs weight input `index` (with its scale and zero point inputs) when all three are constants, and releases it.
    static void prepack(const NodeInfo& info, size_t index, size_t scale, size_t zero, const char* name,
                        std::vector<QuantizedWeights>& packed, Shape& shape) {
        const std::optional<Tensor> w = info.constant_tensor(index), s = info.constant_tensor(scale);
        const std::optional<Tensor> z = info.has_input(zero) ? info.constant_tensor(zero) : std::nullopt;
        if (!w || !s || (info.has_input(zero) && !z) || w->rank() != 3) return;
        packed = quantized_directions(name, *w, *s, z ? &*z : nullptr, w->shape[1], w->shape[2]);
        shape = w->shape;
        info.release_constant(index);
    }

    // One batch row's gates (i, o, f, c pre-activations, products summed) to its new h and c.
    void step_row(float* g, const float* bias, const float* p, float* h, float* c) const {
        const int64_t H = hidden_;
        float* gi = g;
        float* go = g + H;
        float* gf = g + 2 * H;
        float* gc = g + 3 * H;
        auto clip = [this](float v) { return std::isinf(clip_) ? v : std::clamp(v, -clip_, clip_); };
        for (int64_t k = 0; k < H; ++k) {
            const float c_prev = c[k];
            // onnxruntime's order: the peephole product onto the gate, then the fused bias Wb + Rb, then the clip.
            auto gate = [&](float v, int index, const float* peep) {
                if (peep != nullptr) v += c_prev * peep[k];
                if (bias != nullptr) v += bias[index * H + k] + bias[(4 + index) * H + k];
                return clip(v);
            };
            const float input_gate = sigmoid(gate(gi[k], 0, p));
            const float forget_gate =
                input_forget_ ? 1.0f - input_gate : sigmoid(gate(gf[k], 2, p != nullptr ? p + 2 * H : nullptr));
            const float c_new = c_prev * forget_gate + input_gate * std::tanh(gate(gc[k], 3, nullptr));
            // The output gate's peephole reads the new cell state.
            float o = go[k];
            if (p != nullptr) o += c_new * p[H + k];
            if (bias != nullptr) o += bias[H + k] + bias[5 * H + k];
            const float output_gate = sigmoid(clip(o));
            c[k] = c_new;
            h[k] = output_gate * std::tanh(clip(c_new));
        }
    }

    int64_t hidden_;
    bool declares_y_;  // the node has a Y output (what a finished row feeds the next step depends on it)
    int64_t directions_ = 1;
    bool reverse_ = false;
    std::vector<QuantizedWeights> packed_w_, packed_r_;  // per direction, when W / R are constants
    Shape w_shape_, r_shape_;
    float clip_;
    bool input_forget_;
};

// The default activations only: onnxruntime's quantize_dynamic writes none other.
std::string check_dynamic_quantize_lstm(const NodeInfo& info) {
    if (!info.has_attr("hidden_size")) return "the attribute hidden_size is required";
    const std::vector<std::string> activations = info.attr_strings("activations");
    const std::vector<std::string> defaults{"Sigmoid", "Tanh", "Tanh"};
    for (size_t i = 0; i < activations.size(); ++i)
        if (activations[i] != defaults[i % 3])
            return "only the default activations (Sigmoid, Tanh, Tanh) are supported, the node has " + activations[i];
    if (info.has_input(0) && info.input_type(0) != TESS_ELEMENT_UNDEFINED && info.input_type(0) != TESS_ELEMENT_FLOAT32)
        return "X must be float";
    return "";
}

}  // namespace

void register_contrib_dynamic_quantize_lstm_kernels(KernelRegistry& registry) {
    contrib::add(registry, "DynamicQuantizeLSTM", {{0, {TESS_ELEMENT_FLOAT32}}, {1, contrib::k8bit}, {2, contrib::k8bit}},
                 make_factory<DynamicQuantizeLstmKernel>(), check_dynamic_quantize_lstm);
}

}  // namespace tessera::cpu
