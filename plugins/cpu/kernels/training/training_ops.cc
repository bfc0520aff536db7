// CPU provider: the optimizers of the ai.onnx.preview.training domain: Adagrad, Momentum (standard and Nesterov)
// and Adam.  Each takes the learning rate R and the step count T, then n tensors per list (X..., G..., and the
// optimizer's state lists) and returns the updated X and state lists, n tensors each.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/data_movement.h"

namespace tessera::cpu {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

// r / (1 + t * decay_factor) steps along G / sqrt(accumulated G^2).
struct AdagradRule {
    static constexpr const char* kName = "Adagrad";
    static constexpr int kInputLists = 3;   // X, G, H
    static constexpr int kOutputLists = 2;  // X_new, H_new
    double decay, epsilon, norm;

    explicit AdagradRule(const NodeInfo& info)
        : decay(info.attr_float("decay_factor", 0.0f)),
          epsilon(info.attr_float("epsilon", 0.0f)),
          norm(info.attr_float("norm_coefficient", 0.0f)) {}

    template <typename T>
    void step(double r, int64_t t, int64_t begin, int64_t end, const T* const* in, T* const* out) const {
        const T rate = T(r / (1.0 + double(t) * decay));
        const T* x = in[0];
        const T* g = in[1];
        const T* h = in[2];
        for (int64_t i = begin; i < end; ++i) {
            const T gradient = T(norm) * x[i] + g[i];
            const T h_new = h[i] + gradient * gradient;
            out[0][i] = x[i] - rate * gradient / (std::sqrt(h_new) + T(epsilon));
            out[1][i] = h_new;
        }
    }
};

// v = alpha * v + beta * G (beta = 1 at the first step); X steps along v, or along G + alpha * v (Nesterov).
struct MomentumRule {
    static constexpr const char* kName = "Momentum";
    static constexpr int kInputLists = 3;   // X, G, V
    static constexpr int kOutputLists = 2;  // X_new, V_new
    double alpha, beta, norm;
    bool nesterov;

    explicit MomentumRule(const NodeInfo& info)
        : alpha(info.attr_float("alpha", 0.0f)),
          beta(info.attr_float("beta", 0.0f)),
          norm(info.attr_float("norm_coefficient", 0.0f)) {
        for (const char* required : {"alpha", "beta", "mode", "norm_coefficient"})
            if (!info.has_attr(required))
                throw KernelError(std::string("Momentum: attribute '") + required + "' is required");
        const std::string mode = info.attr_string("mode", "");
        if (mode != "standard" && mode != "nesterov")
            throw KernelError("Momentum: mode must be 'standard' or 'nesterov', got '" + mode + "'");
        nesterov = mode == "nesterov";
    }

    template <typename T>
    void step(double r, int64_t t, int64_t begin, int64_t end, const T* const* in, T* const* out) const {
        const T rate = T(r), a = T(alpha), b = T(t > 0 ? beta : 1.0);
        const T* x = in[0];
        const T* g = in[1];
        const T* v = in[2];
        for (int64_t i = begin; i < end; ++i) {
            const T gradient = T(norm) * x[i] + g[i];
            const T v_new = a * v[i] + b * gradient;
            out[0][i] = x[i] - rate * (nesterov ? gradient + a * v_new : v_new);
            out[1][i] = v_new;
        }
    }
};

// First and second moment estimates with bias correction folded into the rate; optional decay of X afterwards.
struct AdamRule {
    static constexpr const char* kName = "Adam";
    static constexpr int kInputLists = 4;   // X, G, V, H
    static constexpr int kOutputLists = 3;  // X_new, V_new, H_new
    double alpha, beta, epsilon, norm, norm_post;

    explicit AdamRule(const NodeInfo& info)
        : alpha(info.attr_float("alpha", 0.9f)),
          beta(info.attr_float("beta", 0.999f)),
          epsilon(info.attr_float("epsilon", 0.0f)),
          norm(info.attr_float("norm_coefficient", 0.0f)),
          norm_post(info.attr_float("norm_coefficient_post", 0.0f)) {}

    template <typename T>
    void step(double r, int64_t t, int64_t begin, int64_t end, const T* const* in, T* const* out) const {
        const double corrected =
            t > 0 ? r * std::sqrt(1.0 - std::pow(beta, double(t))) / (1.0 - std::pow(alpha, double(t))) : r;
        const T rate = T(corrected), a = T(alpha), b = T(beta), keep = T(1.0 - norm_post);
        const T* x = in[0];
        const T* g = in[1];
        const T* v = in[2];
        const T* h = in[3];
        for (int64_t i = begin; i < end; ++i) {
            const T gradient = T(norm) * x[i] + g[i];
            const T v_new = a * v[i] + (T(1) - a) * gradient;
            const T h_new = b * h[i] + (T(1) - b) * gradient * gradient;
            out[0][i] = keep * (x[i] - rate * v_new / (std::sqrt(h_new) + T(epsilon)));
            out[1][i] = v_new;
            out[2][i] = h_new;
        }
    }
};

template <typename Rule>
class OptimizerKernel final : public Kernel {
public:
    explicit OptimizerKernel(const NodeInfo& info) : rule_(info) {
        const size_t lists = info.input_count() < 2 ? 0 : info.input_count() - 2;
        if (lists == 0 || lists % Rule::kInputLists != 0 ||
            info.output_count() != lists / Rule::kInputLists * Rule::kOutputLists)
            throw KernelError(std::string(Rule::kName) + ": expected R, T, " + std::to_string(Rule::kInputLists) +
                              " lists of n inputs and " + std::to_string(Rule::kOutputLists) + " lists of n outputs");
    }

    void compute(KernelContext& ctx) const override {
        const std::string name = Rule::kName;
        const Tensor& r_tensor = ctx.input(0);
        const Tensor& t_tensor = ctx.input(1);
        if (r_tensor.size() != 1 || t_tensor.size() != 1 || t_tensor.type != TESS_ELEMENT_INT64)
            throw KernelError(name + ": R must be a scalar and T an int64 scalar");
        double r = 0;
        dispatch<float, double>(r_tensor.type, [&]<typename T>() { r = double(*r_tensor.ptr<T>()); });
        const int64_t t = *t_tensor.ptr<int64_t>();
        const size_t n = (ctx.input_count() - 2) / Rule::kInputLists;
        for (size_t k = 0; k < n; ++k) {
            const Tensor& x = ctx.input(2 + k);
            const Tensor* in[Rule::kInputLists];
            for (size_t list = 0; list < size_t(Rule::kInputLists); ++list) {
                in[list] = &ctx.input(2 + list * n + k);
                if (in[list]->type != x.type || in[list]->shape != x.shape)
                    throw KernelError(name + ": the tensors of group " + std::to_string(k) +
                                      " must share X's type and shape " + shape_string(x.shape));
            }
            dispatch<float, double>(x.type, [&]<typename T>() {
                const T* in_data[Rule::kInputLists];
                T* out_data[Rule::kOutputLists];
                for (size_t list = 0; list < size_t(Rule::kInputLists); ++list)
                    in_data[list] = in[list]->template ptr<T>();
                for (size_t list = 0; list < size_t(Rule::kOutputLists); ++list)
                    out_data[list] = ctx.output(list * n + k, x.type, x.shape).template ptr<T>();
                movement::parallel_range(ctx.pool(), x.size(), 64, [&](int64_t begin, int64_t end) {
                    rule_.step(r, t, begin, end, in_data, out_data);
                });
            });
        }
    }

private:
    Rule rule_;
};

}  // namespace

void register_training_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> floats{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64};
    const auto add = [&](const char* op, KernelFactory factory) {
        registry.add({kTrainingDomain,
                      op,
                      1,
                      0,
                      {{0, floats}, {1, {TESS_ELEMENT_INT64}}, {2, floats}},
                      KernelMemory::Normal,
                      std::move(factory)});
    };
    add("Adagrad", make_factory<OptimizerKernel<AdagradRule>>());
    add("Momentum", make_factory<OptimizerKernel<MomentumRule>>());
    add("Adam", make_factory<OptimizerKernel<AdamRule>>());
}

}  // namespace tessera::cpu
