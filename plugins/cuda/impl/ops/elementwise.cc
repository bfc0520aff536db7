// CUDA provider operators: elementwise -- unary activations, Clip, the broadcasting binary operators (Add, Sub, Mul,
// Div, Pow, PRelu) and the variadic ones (Sum, Max, Min).
#include <cfloat>
#include <cstring>

#include "ops/op_table.h"

namespace tessera::cuda::ops {
namespace {

struct UnaryStep final : Step {
    UnaryOp op = UnaryOp::Relu;
    float alpha = 0.0f, beta = 0.0f;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_unary(op, dtype_of(x.type), x.data, y.data, x.count(), alpha, beta, r.stream()), *this);
    }
};

struct BinaryStep final : Step {
    BinaryOp op = BinaryOp::Add;
    void run(Run& r) override {
        const Tensor& a = r.required(*this, 0);
        const Tensor& b = r.required(*this, 1);
        const Shape out = op == BinaryOp::PRelu ? a.dims : broadcast_shapes(a.dims, b.dims, *this);
        if (op == BinaryOp::PRelu && broadcast_shapes(a.dims, b.dims, *this) != a.dims)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": slope " + shape_string(b.dims) + " does not broadcast to " +
                                                   shape_string(a.dims));
        Tensor& y = r.output(*this, 0, a.type, out);
        check_launch(launch_binary(op, dtype_of(a.type), a.data, b.data, y.data, broadcast_plan(a.dims, b.dims, out),
                                   r.stream()),
                     *this);
    }
};

// Sum, Max, Min of one or more inputs with broadcasting: folded pairwise into the output.
struct VariadicStep final : Step {
    BinaryOp op = BinaryOp::Add;
    void run(Run& r) override {
        std::vector<const Tensor*> xs;
        for (size_t k = 0; k < in.size(); ++k) xs.push_back(&r.required(*this, k));
        Shape out = xs[0]->dims;
        for (size_t k = 1; k < xs.size(); ++k) out = broadcast_shapes(out, xs[k]->dims, *this);
        const int32_t type = xs[0]->type;
        Tensor& y = r.output(*this, 0, type, out);
        const DType t = dtype_of(type);
        if (xs.size() == 1) {
            if (y.bytes() > 0)
                check_cuda(cudaMemcpyAsync(y.data, xs[0]->data, y.bytes(), cudaMemcpyDeviceToDevice, r.stream()),
                           label.c_str());
            return;
        }
        check_launch(launch_binary(op, t, xs[0]->data, xs[1]->data, y.data,
                                   broadcast_plan(xs[0]->dims, xs[1]->dims, out), r.stream()),
                     *this);
        for (size_t k = 2; k < xs.size(); ++k)
            check_launch(launch_binary(op, t, y.data, xs[k]->data, y.data, broadcast_plan(out, xs[k]->dims, out),
                                       r.stream()),
                         *this);
    }
};

}  // namespace

void register_elementwise_ops(OpTable& t) {
    // Unary activations.
    // `since`: the operator's first ai.onnx opset.  Later versions only widened the types (declined by the checks)
    // or dropped legacy attributes (consumed_inputs), so every entry is open-ended.
    struct UnarySpec { const char* name; UnaryOp op; int since; };
    const UnarySpec unary[] = {
        {"Relu", UnaryOp::Relu, 1}, {"Sigmoid", UnaryOp::Sigmoid, 1}, {"Tanh", UnaryOp::Tanh, 1},
        {"Erf", UnaryOp::Erf, 9}, {"Exp", UnaryOp::Exp, 1}, {"Log", UnaryOp::Log, 1}, {"Sqrt", UnaryOp::Sqrt, 1},
        {"Neg", UnaryOp::Neg, 1}, {"Abs", UnaryOp::Abs, 1}, {"Reciprocal", UnaryOp::Reciprocal, 1},
        {"Softplus", UnaryOp::Softplus, 1}, {"Softsign", UnaryOp::Softsign, 1}, {"Floor", UnaryOp::Floor, 1},
        {"Ceil", UnaryOp::Ceil, 1}, {"HardSwish", UnaryOp::HardSwish, 14}, {"Sin", UnaryOp::Sin, 7},
        {"Cos", UnaryOp::Cos, 7}, {"LeakyRelu", UnaryOp::LeakyRelu, 1}, {"Elu", UnaryOp::Elu, 1},
        {"Selu", UnaryOp::Selu, 1}, {"HardSigmoid", UnaryOp::HardSigmoid, 1}, {"Gelu", UnaryOp::GeluErf, 20},
    };
    for (const UnarySpec& spec : unary) {
        const UnaryOp op = spec.op;
        t.add(spec.name, spec.since, 0, float_x(), {
            [op](const Node& n) -> std::string {
                if (op == UnaryOp::GeluErf) {
                    const std::string approx = n.s("approximate", "none");
                    if (approx != "none" && approx != "tanh") return "approximate '" + approx + "' is not valid";
                }
                return check_unary(n);
            },
            [op](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                auto s = std::make_unique<UnaryStep>();
                wire(ctx, *s, n);
                s->op = op;
                switch (op) {
                    case UnaryOp::LeakyRelu: s->alpha = n.f("alpha", 0.01f); break;
                    case UnaryOp::Elu: s->alpha = n.f("alpha", 1.0f); break;
                    case UnaryOp::Selu:
                        s->alpha = n.f("alpha", 1.67326319217681884765625f);
                        s->beta = n.f("gamma", 1.05070102214813232421875f);
                        break;
                    case UnaryOp::HardSigmoid:
                        s->alpha = n.f("alpha", 0.2f);
                        s->beta = n.f("beta", 0.5f);
                        break;
                    case UnaryOp::GeluErf:
                        if (n.s("approximate", "none") == "tanh") s->op = UnaryOp::GeluTanh;
                        break;
                    default: break;
                }
                return s;
            }});
    }

    t.add("Clip", 1, 0, float_x(), {
        [](const Node& n) -> std::string {
            if (std::string why = same_float(n, {1, 2}); !why.empty()) return why;
            for (size_t k = 1; k <= 2; ++k)
                if (n.in(k) != nullptr && !is_constant(n.in(k))) return "min and max must be constants";
            return "";
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<UnaryStep>();
            wire(ctx, *s, n);
            s->op = UnaryOp::Clip;
            s->alpha = -FLT_MAX;
            s->beta = FLT_MAX;
            if (n.opset() < 11) {
                s->alpha = n.f("min", -FLT_MAX);
                s->beta = n.f("max", FLT_MAX);
            } else {
                if (n.in(1) != nullptr) {
                    const std::vector<float> v = constant_floats(n.in(1)->constant);
                    if (!v.empty()) s->alpha = v[0];
                }
                if (n.in(2) != nullptr) {
                    const std::vector<float> v = constant_floats(n.in(2)->constant);
                    if (!v.empty()) s->beta = v[0];
                }
                s->in.resize(1);  // the bounds are attributes of the step now
                s->host_only.resize(1);
            }
            return s;
        }});

    // Broadcasting binary operators.
    struct BinarySpec { const char* name; BinaryOp op; };
    const BinarySpec binary[] = {{"Add", BinaryOp::Add}, {"Sub", BinaryOp::Sub}, {"Mul", BinaryOp::Mul},
                                 {"Div", BinaryOp::Div}, {"Pow", BinaryOp::Pow}, {"PRelu", BinaryOp::PRelu}};
    for (const BinarySpec& spec : binary) {
        const BinaryOp op = spec.op;
        t.add(spec.name, 1, 0, float_x(), {
            [](const Node& n) -> std::string {
                if (n.inputs() != 2 || n.in(1) == nullptr) return "two inputs expected";
                if (n.opset() < 7 && n.i("broadcast", 0) != 0) return "legacy broadcasting (opset < 7)";
                return same_float(n, {1});
            },
            [op](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                auto s = std::make_unique<BinaryStep>();
                wire(ctx, *s, n);
                s->op = op;
                return s;
            }});
    }
    struct VariadicSpec { const char* name; BinaryOp op; };
    const VariadicSpec variadic[] = {{"Sum", BinaryOp::Add}, {"Max", BinaryOp::Max}, {"Min", BinaryOp::Min}};
    for (const VariadicSpec& spec : variadic) {
        const BinaryOp op = spec.op;
        t.add(spec.name, 1, 0, float_x(),
              {[](const Node& n) { return all_same_float(n); },
               [op](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                   auto s = std::make_unique<VariadicStep>();
                   wire(ctx, *s, n);
                   s->op = op;
                   return s;
               }});
    }
}

}  // namespace tessera::cuda::ops
