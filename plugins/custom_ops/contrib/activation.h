// The activations FusedConv and FusedGemm apply to their results, parsed once per node.
//
//  - FusedConv names its parameters in `activation_params` (onnxruntime's GetFusedActivationAttr): Relu, Tanh,
//    Sigmoid, Silu (no parameters), LeakyRelu [alpha], Clip [min, max], HardSigmoid [alpha, beta]; the count must
//    match exactly.
//  - FusedGemm names them `activation_alpha` / `activation_beta` / `activation_gamma` (onnxruntime's
//    ElementWiseRangedTransform): Relu, Tanh, Sigmoid, Softsign, Softplus (none), LeakyRelu, Elu, ThresholdedRelu,
//    Celu (alpha), HardSigmoid, ScaledTanh, ParametricSoftplus (alpha, beta), Selu (alpha, gamma); all required.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "op_support.h"

namespace tessera::contrib {

struct Activation {
    enum class Kind {
        Identity,
        Relu,
        Tanh,
        Sigmoid,
        Silu,
        LeakyRelu,
        Clip,
        HardSigmoid,
        Elu,
        Selu,
        Celu,
        Softplus,
        Softsign,
        ThresholdedRelu,
        ScaledTanh,
        ParametricSoftplus
    };
    Kind kind = Kind::Identity;
    float alpha = 0.0f, beta = 0.0f, gamma = 0.0f;

    static Activation for_conv(const Node& node);
    static Activation for_gemm(const Node& node);

    template <typename C>
    void apply(C* x, size_t n) const {
        const C a = static_cast<C>(alpha), b = static_cast<C>(beta), g = static_cast<C>(gamma);
        switch (kind) {
            case Kind::Identity: return;
            case Kind::Relu:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] > C(0) ? x[i] : C(0);
                return;
            case Kind::Tanh:
                for (size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
                return;
            case Kind::Sigmoid:
                for (size_t i = 0; i < n; ++i) x[i] = C(1) / (C(1) + std::exp(-x[i]));
                return;
            case Kind::Silu:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] / (C(1) + std::exp(-x[i]));
                return;
            case Kind::LeakyRelu:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] >= C(0) ? x[i] : a * x[i];
                return;
            case Kind::Clip:
                for (size_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], a), b);
                return;
            case Kind::HardSigmoid:
                for (size_t i = 0; i < n; ++i) x[i] = std::max(C(0), std::min(C(1), a * x[i] + b));
                return;
            case Kind::Elu:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] >= C(0) ? x[i] : a * (std::exp(x[i]) - C(1));
                return;
            case Kind::Selu:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] > C(0) ? g * x[i] : g * (a * std::exp(x[i]) - a);
                return;
            case Kind::Celu:
                for (size_t i = 0; i < n; ++i)
                    x[i] = std::max(C(0), x[i]) + std::min(C(0), a * (std::exp(x[i] / a) - C(1)));
                return;
            case Kind::Softplus:
                for (size_t i = 0; i < n; ++i)
                    x[i] = x[i] > C(0) ? x[i] + std::log1p(std::exp(-x[i])) : std::log1p(std::exp(x[i]));
                return;
            case Kind::Softsign:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] / (C(1) + std::abs(x[i]));
                return;
            case Kind::ThresholdedRelu:
                for (size_t i = 0; i < n; ++i) x[i] = x[i] > a ? x[i] : C(0);
                return;
            case Kind::ScaledTanh:
                for (size_t i = 0; i < n; ++i) x[i] = a * std::tanh(b * x[i]);
                return;
            case Kind::ParametricSoftplus:
                for (size_t i = 0; i < n; ++i) {
                    C v = b * x[i];
                    x[i] = a * (v > C(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)));
                }
                return;
        }
    }
};

inline Activation Activation::for_conv(const Node& node) {
    Activation act;
    if (!node.has("activation")) return act;
    const std::string name = node.get_string("activation", "");
    size_t params = 0;
    if (name == "Relu") {
        act.kind = Kind::Relu;
    } else if (name == "Tanh") {
        act.kind = Kind::Tanh;
    } else if (name == "Sigmoid") {
        act.kind = Kind::Sigmoid;
    } else if (name == "Silu") {
        act.kind = Kind::Silu;
    } else if (name == "LeakyRelu") {
        act.kind = Kind::LeakyRelu;
        params = 1;
    } else if (name == "Clip") {
        act.kind = Kind::Clip;
        params = 2;
    } else if (name == "HardSigmoid") {
        act.kind = Kind::HardSigmoid;
        params = 2;
    } else {
        fail("activation '" + name + "' is not supported (Relu, Tanh, Sigmoid, Silu, LeakyRelu, Clip, HardSigmoid are)");
    }
    if (params > 0) {
        std::vector<float> values = node.get_floats("activation_params");
        if (values.size() != params)
            fail("activation " + name + " takes " + std::to_string(params) + " activation_params, the node has " +
                 std::to_string(values.size()));
        act.alpha = values[0];
        if (params > 1) act.beta = values[1];
    }
    return act;
}

inline Activation Activation::for_gemm(const Node& node) {
    Activation act;
    if (!node.has("activation")) return act;
    const std::string name = node.get_string("activation", "");
    struct Entry {
        const char* name;
        Kind kind;
        bool alpha, beta, gamma;
    };
    static const Entry kEntries[] = {
        {"Relu", Kind::Relu, false, false, false},
        {"Tanh", Kind::Tanh, false, false, false},
        {"Sigmoid", Kind::Sigmoid, false, false, false},
        {"Softsign", Kind::Softsign, false, false, false},
        {"Softplus", Kind::Softplus, false, false, false},
        {"LeakyRelu", Kind::LeakyRelu, true, false, false},
        {"Elu", Kind::Elu, true, false, false},
        {"ThresholdedRelu", Kind::ThresholdedRelu, true, false, false},
        {"Celu", Kind::Celu, true, false, false},
        {"HardSigmoid", Kind::HardSigmoid, true, true, false},
        {"ScaledTanh", Kind::ScaledTanh, true, true, false},
        {"ParametricSoftplus", Kind::ParametricSoftplus, true, true, false},
        {"Selu", Kind::Selu, true, false, true},
    };
    for (const Entry& e : kEntries) {
        if (name != e.name) continue;
        act.kind = e.kind;
        auto param = [&](bool needed, const char* attr, float& out) {
            if (!needed) return;
            if (!node.has(attr)) fail("activation " + name + " needs the attribute '" + attr + "'");
            out = node.get_float(attr, 0.0f);
        };
        param(e.alpha, "activation_alpha", act.alpha);
        param(e.beta, "activation_beta", act.beta);
        param(e.gamma, "activation_gamma", act.gamma);
        if (act.kind == Kind::Celu && act.alpha == 0.0f) fail("activation Celu needs a non-zero activation_alpha");
        return act;
    }
    fail("activation '" + name + "' is not supported");
}

}  // namespace tessera::contrib
