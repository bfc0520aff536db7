// CUDA provider operators: normalization -- Softmax, LogSoftmax, LayerNormalization, BatchNormalization (inference,
// as a per-channel affine step) and LRN.
#include <cmath>
#include <cstring>

#include "ops/op_table.h"

namespace tessera::cuda::ops {
namespace {

// Inference BatchNormalization: y = x * a[c] + b[c] (+ Relu when one follows), a and b folded at compile time.
struct ChannelAffineStep final : Step {
    Tensor scale, shift;  // float [C]
    int64_t channels = 0;
    bool relu = false;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        if (x.rank() < 2 || x.dims[1] != channels)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input " + shape_string(x.dims) + " does not have " +
                                                   std::to_string(channels) + " channels");
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_channel_affine(dtype_of(x.type), x.data, y.data, static_cast<const float*>(scale.data),
                                           static_cast<const float*>(shift.data), x.dims[0], channels,
                                           product(x.dims, 2, x.dims.size()), relu, r.stream()),
                     *this);
    }
};

struct SoftmaxStep final : Step {
    int64_t axis = -1;
    bool legacy = false;  // opset < 13: the input is coerced to 2-D at axis
    bool log = false;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const int64_t rank = x.rank();
        const int64_t a = normalize_axis(axis, rank, "axis");
        const int64_t outer = product(x.dims, 0, a);
        const int64_t dim = legacy ? product(x.dims, a, rank) : x.dims[a];
        const int64_t inner = legacy ? 1 : product(x.dims, a + 1, rank);
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_softmax(dtype_of(x.type), x.data, y.data, outer, dim, inner, log, r.stream()), *this);
    }
};

struct LayerNormStep final : Step {
    int64_t axis = -1;
    float epsilon = 1e-5f;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const Tensor& scale = r.required(*this, 1);
        const Tensor* bias = r.input(*this, 2);
        const int64_t rank = x.rank();
        const int64_t a = normalize_axis(axis, rank, "axis");
        const int64_t rows = product(x.dims, 0, a), cols = product(x.dims, a, rank);
        if (scale.count() != cols || (bias != nullptr && bias->count() != cols))
            fail(TESS_STATUS_NOT_IMPLEMENTED, label + ": scale and bias must have the normalized shape's " +
                                                  std::to_string(cols) + " elements (broadcasting them is not supported)");
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        Shape stat_dims(x.dims.begin(), x.dims.begin() + a);
        stat_dims.resize(static_cast<size_t>(rank), 1);
        float* mean = nullptr;
        float* inv_std = nullptr;
        if (r.has_output(*this, 1)) mean = static_cast<float*>(r.output(*this, 1, TESS_ELEMENT_FLOAT32, stat_dims).data);
        if (r.has_output(*this, 2))
            inv_std = static_cast<float*>(r.output(*this, 2, TESS_ELEMENT_FLOAT32, stat_dims).data);
        check_launch(launch_layer_norm(dtype_of(x.type), x.data, scale.data, bias != nullptr ? bias->data : nullptr,
                                       y.data, mean, inv_std, rows, cols, epsilon, r.stream()),
                     *this);
    }
};

struct LrnStep final : Step {
    int64_t size = 1;
    float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        if (x.rank() < 2) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": the input must have N and C dimensions");
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_lrn(dtype_of(x.type), x.data, y.data, x.dims[0], x.dims[1], product(x.dims, 2, x.dims.size()),
                                size, alpha, beta, bias, r.stream()),
                     *this);
    }
};

std::string check_batch_norm(const Node& n) {
    if (std::string why = float_input(n, 0); !why.empty()) return why;
    for (size_t k = 1; k <= 4; ++k) {
        if (!is_constant(n.in(k))) return "scale, B, mean and var must be constants";
        if (!is_float_type(n.in(k)->element_type) && n.in(k)->element_type != TESS_ELEMENT_FLOAT64)
            return "parameters of type " + std::string(type_name(n.in(k)->element_type));
    }
    if (n.i("training_mode", 0) != 0) return "training mode is not supported";
    if (n.opset() < 9 && n.i("spatial", 1) == 0) return "spatial=0 is not supported";
    return no_outputs_beyond(n, 1, "a training output");
}


}  // namespace

// BatchNormalization parameters as per-channel scale and shift: a = s / sqrt(var + eps), b = bias - mean * a.
void batch_norm_affine(const Node& bn, std::vector<float>& a, std::vector<float>& b) {
    const std::vector<float> scale = constant_floats(bn.in(1)->constant);
    const std::vector<float> shift = constant_floats(bn.in(2)->constant);
    const std::vector<float> mean = constant_floats(bn.in(3)->constant);
    const std::vector<float> var = constant_floats(bn.in(4)->constant);
    const size_t c = scale.size();
    if (shift.size() != c || mean.size() != c || var.size() != c)
        fail(TESS_STATUS_INVALID_ARGUMENT, bn.label() + ": scale, B, mean and var differ in size");
    const double epsilon = bn.f("epsilon", 1e-5f);
    a.resize(c);
    b.resize(c);
    for (size_t i = 0; i < c; ++i) {
        const double ai = static_cast<double>(scale[i]) / std::sqrt(static_cast<double>(var[i]) + epsilon);
        a[i] = static_cast<float>(ai);
        b[i] = static_cast<float>(static_cast<double>(shift[i]) - static_cast<double>(mean[i]) * ai);
    }
}

void register_normalization_ops(OpTable& t) {
    // Softmax and LogSoftmax 1-12 coerce the input to 2-D at axis (default 1); 13+ normalize along one axis (default
    // -1).  The step implements both and picks by the node's opset.
    for (const char* name : {"Softmax", "LogSoftmax"}) {
        const bool log = std::strcmp(name, "LogSoftmax") == 0;
        t.add(name, 1, 0, float_x(), {
            [](const Node& n) { return check_unary(n); },
            [log](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                auto s = std::make_unique<SoftmaxStep>();
                wire(ctx, *s, n);
                s->log = log;
                s->legacy = n.opset() < 13;
                s->axis = n.i("axis", s->legacy ? 1 : -1);
                return s;
            }});
    }

    t.add("LayerNormalization", 17, 0, float_x(), {
        [](const Node& n) -> std::string {
            if (n.in(1) == nullptr) return "Scale is missing";
            if (std::string why = same_float(n, {1, 2}); !why.empty()) return why;
            if (n.i("stash_type", 1) != 1) return "stash_type other than float";
            for (size_t k = 1; k <= 2; ++k)
                if (n.out(k) != nullptr && n.out(k)->element_type != TESS_ELEMENT_FLOAT32)
                    return "Mean and InvStdDev must be float";
            return "";
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<LayerNormStep>();
            wire(ctx, *s, n);
            s->axis = n.i("axis", -1);
            s->epsilon = n.f("epsilon", 1e-5f);
            return s;
        }});

    // Inference only: check_batch_norm declines spatial=0 (before opset 9) and training_mode (14+).
    t.add("BatchNormalization", 1, 0, float_x(), {
        check_batch_norm,
        [](BuildContext& ctx, const Node& n, Fused& fused) -> std::unique_ptr<Step> {
            auto s = std::make_unique<ChannelAffineStep>();
            wire(ctx, *s, n);
            std::vector<float> a, b;
            batch_norm_affine(n, a, b);
            s->channels = static_cast<int64_t>(a.size());
            s->scale = upload_floats(ctx.instance(), a);
            s->shift = upload_floats(ctx.instance(), b);
            for (size_t k = 1; k < s->host_only.size(); ++k) s->host_only[k] = true;
            if (const TessNodeView* next = ctx.sole_consumer(n.out(0)->name);
                next != nullptr && std::strcmp(next->op_type, "Relu") == 0 && next->output_count >= 1 &&
                next->outputs[0] != nullptr) {
                s->relu = true;
                s->out[0] = ctx.id(next->outputs[0]);
                fused.push_back(next);
            }
            return s;
        }});

    t.add("LRN", 1, 0, float_x(), {
        [](const Node& n) -> std::string {
            if (n.i("size", 0) <= 0) return "size must be positive";
            return check_unary(n);
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<LrnStep>();
            wire(ctx, *s, n);
            s->size = n.i("size", 1);
            s->alpha = n.f("alpha", 1e-4f);
            s->beta = n.f("beta", 0.75f);
            s->bias = n.f("bias", 1.0f);
            return s;
        }});
}

}  // namespace tessera::cuda::ops
