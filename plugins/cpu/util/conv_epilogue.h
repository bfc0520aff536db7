// CPU provider: what a convolution or matrix product applies to its output blocks after the products (the
// optimizer's FusedConv and FusedMatMulBias).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernel.h"

namespace tessera::cpu {

// The optimizer's FusedConv tail (provider.h), Y = activation(Conv(X, W, B) + Z), applied to each block of Y right
// after the product wrote it (still in cache) instead of in separate passes over memory.  Plain Conv has none.
struct ConvEpilogue {
    enum class Activation { None, Relu, Clip, LeakyRelu, HardSigmoid, Sigmoid, Tanh, Silu, Gelu, GeluTanh };
    Activation activation = Activation::None;
    float alpha = 0.0f, beta = 0.0f;
    bool has_sum = false;  // Z given

    static ConvEpilogue parse(const NodeInfo& info) {
        ConvEpilogue e;
        const bool matmul = info.op_type() == "FusedMatMulBias";
        if (info.op_type() != "FusedConv" && !matmul) return e;
        const std::string op(info.op_type());
        const std::string name = info.attr_string("activation", "");
        const std::vector<float> params = info.attr_floats("activation_params");
        auto want = [&](size_t count) {
            if (params.size() != count)
                throw KernelError(op + ": activation " + name + " takes " + std::to_string(count) +
                                  " activation_params, got " + std::to_string(params.size()));
        };
        if (name.empty() || name == "Identity") e.activation = Activation::None;
        else if (name == "Relu") e.activation = Activation::Relu;
        else if (name == "Sigmoid") e.activation = Activation::Sigmoid;
        else if (name == "Tanh") e.activation = Activation::Tanh;
        else if (name == "Silu") e.activation = Activation::Silu;
        else if (name == "LeakyRelu") {
            want(1);
            e.activation = Activation::LeakyRelu;
            e.alpha = params[0];
        } else if (name == "Clip") {
            want(2);
            e.activation = Activation::Clip;
            e.alpha = params[0];
            e.beta = params[1];
        } else if (name == "HardSigmoid") {
            want(2);
            e.activation = Activation::HardSigmoid;
            e.alpha = params[0];
            e.beta = params[1];
        } else if (name == "Gelu" && matmul) {
            const std::string approximate = info.attr_string("approximate", "none");
            if (approximate != "none" && approximate != "tanh")
                throw KernelError(op + ": approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
            e.activation = approximate == "tanh" ? Activation::GeluTanh : Activation::Gelu;
        } else {
            throw KernelError(op + ": activation '" + name + "' is not supported");
        }
        e.has_sum = !matmul && info.has_input(3);
        return e;
    }

    bool active() const { return activation != Activation::None || has_sum; }

    // y[i] = act(y[i] + z[i]) for i < n; z is NULL without a sum.
    template <typename T>
    void apply(T* y, const T* z, int64_t n) const {
        if (z != nullptr)
            for (int64_t i = 0; i < n; ++i) y[i] += z[i];
        const T a = static_cast<T>(alpha), b = static_cast<T>(beta);
        switch (activation) {
            case Activation::None: return;
            case Activation::Relu:
                for (int64_t i = 0; i < n; ++i) y[i] = y[i] > T(0) ? y[i] : T(0);
                return;
            case Activation::Clip:
                for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(y[i], a), b);
                return;
            case Activation::LeakyRelu:
                for (int64_t i = 0; i < n; ++i) y[i] = y[i] >= T(0) ? y[i] : a * y[i];
                return;
            case Activation::HardSigmoid:
                for (int64_t i = 0; i < n; ++i) y[i] = std::max(T(0), std::min(T(1), a * y[i] + b));
                return;
            case Activation::Sigmoid:
                for (int64_t i = 0; i < n; ++i) y[i] = T(1) / (T(1) + std::exp(-y[i]));
                return;
            case Activation::Tanh:
                for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(y[i]);
                return;
            case Activation::Silu:
                for (int64_t i = 0; i < n; ++i) y[i] = y[i] / (T(1) + std::exp(-y[i]));
                return;
            case Activation::Gelu:
                for (int64_t i = 0; i < n; ++i) {
                    const T x = y[i], z = x * T(0.70710678118654752);
                    y[i] = x < T(0) ? T(0.5) * x * std::erfc(-z) : T(0.5) * x * (T(1) + std::erf(z));
                }
                return;
            case Activation::GeluTanh:
                for (int64_t i = 0; i < n; ++i) {
                    const T x = y[i], u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
                    y[i] = x / (T(1) + std::exp(T(-2) * u));
                }
                return;
        }
    }
};

}  // namespace tessera::cpu
