// CPU provider: the activation com.microsoft's FusedGemm applies after its product, named as onnxruntime's
// ElementWiseRangedTransform names them, with their parameters in activation_alpha / activation_beta /
// activation_gamma (each required where the activation has it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/kernel.h"

namespace tessera::cpu {

struct GemmActivation {
    enum class Kind {
        Identity, Relu, Tanh, Sigmoid, Softsign, Softplus, LeakyRelu, Elu, ThresholdedRelu, Celu, HardSigmoid,
        ScaledTanh, ParametricSoftplus, Selu
    };
    Kind kind = Kind::Identity;
    float alpha = 0, beta = 0, gamma = 0;

    bool active() const { return kind != Kind::Identity; }

    static GemmActivation parse(const NodeInfo& info) {
        GemmActivation act;
        if (!info.has_attr("activation")) return act;
        const std::string name = info.attr_string("activation", "");
        struct Entry {
            const char* name;
            Kind kind;
            bool alpha, beta, gamma;
        };
        static const Entry kEntries[] = {
            {"Relu", Kind::Relu, false, false, false},          {"Tanh", Kind::Tanh, false, false, false},
            {"Sigmoid", Kind::Sigmoid, false, false, false},    {"Softsign", Kind::Softsign, false, false, false},
            {"Softplus", Kind::Softplus, false, false, false},  {"LeakyRelu", Kind::LeakyRelu, true, false, false},
            {"Elu", Kind::Elu, true, false, false},             {"ThresholdedRelu", Kind::ThresholdedRelu, true, false, false},
            {"Celu", Kind::Celu, true, false, false},           {"HardSigmoid", Kind::HardSigmoid, true, true, false},
            {"ScaledTanh", Kind::ScaledTanh, true, true, false}, {"ParametricSoftplus", Kind::ParametricSoftplus, true, true, false},
            {"Selu", Kind::Selu, true, false, true},
        };
        for (const Entry& e : kEntries) {
            if (name != e.name) continue;
            act.kind = e.kind;
            auto param = [&](bool needed, const char* attr, float& out) {
                if (!needed) return;
                if (!info.has_attr(attr))
                    throw KernelError("FusedGemm: activation " + name + " needs the attribute '" + attr + "'");
                out = info.attr_float(attr, 0.0f);
            };
            param(e.alpha, "activation_alpha", act.alpha);
            param(e.beta, "activation_beta", act.beta);
            param(e.gamma, "activation_gamma", act.gamma);
            if (act.kind == Kind::Celu && act.alpha == 0.0f)
                throw KernelError("FusedGemm: activation Celu needs a non-zero activation_alpha");
            return act;
        }
        throw KernelError("FusedGemm: activation '" + name + "' is not supported");
    }

    // x[i] = activation(x[i]); integer products (Gemm's) take none.
    template <typename C> void apply(C* x, int64_t n) const {
        if constexpr (!std::is_floating_point_v<C>) {
            (void)x;
            (void)n;
            return;
        } else {
            apply_floating(x, n);
        }
    }

private:
    template <typename C> void apply_floating(C* x, int64_t n) const {
        const C a = static_cast<C>(alpha), b = static_cast<C>(beta), g = static_cast<C>(gamma);
        auto softplus = [](C v) { return v > C(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); };
        for (int64_t i = 0; i < n; ++i) {
            const C v = x[i];
            switch (kind) {
                case Kind::Identity: return;
                case Kind::Relu: x[i] = v > C(0) ? v : C(0); break;
                case Kind::Tanh: x[i] = std::tanh(v); break;
                case Kind::Sigmoid: x[i] = C(1) / (C(1) + std::exp(-v)); break;
                case Kind::Softsign: x[i] = v / (C(1) + std::abs(v)); break;
                case Kind::Softplus: x[i] = softplus(v); break;
                case Kind::LeakyRelu: x[i] = v >= C(0) ? v : a * v; break;
                case Kind::Elu: x[i] = v >= C(0) ? v : a * (std::exp(v) - C(1)); break;
                case Kind::ThresholdedRelu: x[i] = v > a ? v : C(0); break;
                case Kind::Celu: x[i] = std::max(C(0), v) + std::min(C(0), a * (std::exp(v / a) - C(1))); break;
                case Kind::HardSigmoid: x[i] = std::max(C(0), std::min(C(1), a * v + b)); break;
                case Kind::ScaledTanh: x[i] = a * std::tanh(b * v); break;
                case Kind::ParametricSoftplus: x[i] = a * softplus(b * v); break;
                case Kind::Selu: x[i] = v > C(0) ? g * v : g * (a * std::exp(v) - a); break;
            }
        }
    }
};

}  // namespace tessera::cpu
