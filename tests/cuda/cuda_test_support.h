// Helpers of the CUDA provider tests: the plugin's availability, models built in memory, random inputs, and runs of
// one model on providers {cuda} (strict: every node must really run on CUDA) and {cpu} to compare.
//
// Without a usable GPU the plugin still loads and reports itself unavailable; every test that needs the device then
// skips with that reason (REQUIRE_CUDA), so CI without a GPU stays green and says why.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/tessera.hpp"
#include "test_support.h"  // tests/core: ModelBuilder

namespace tessera::cuda_test {

using test::ModelBuilder;

// The plugin that offers provider "cuda" in the default plugin directories (next to libtessera), or nullptr.
inline std::optional<PluginInfo> cuda_plugin(const Env& env) {
    for (const PluginInfo& p : env.plugins())
        for (const std::string& name : p.providers)
            if (name == "cuda") return p;
    return std::nullopt;
}

// Empty when provider "cuda" is usable here, else why not (the plugin's own reason).
inline const std::string& cuda_unavailable_reason() {
    static const std::string reason = [] {
        EnvOptions options;
        options.log_level = TESS_LOG_ERROR;
        Env env(options);
        const auto plugin = cuda_plugin(env);
        if (!plugin) return std::string("the cuda plugin was not found next to libtessera");
        if (plugin->state == TESS_PLUGIN_LOADED) return std::string();
        return std::string("CUDA provider unavailable: ") + (plugin->reason.empty() ? "(no reason given)" : plugin->reason);
    }();
    return reason;
}

#define REQUIRE_CUDA()                                                                              \
    do {                                                                                            \
        const std::string& why_ = ::tessera::cuda_test::cuda_unavailable_reason();                 \
        if (!why_.empty()) GTEST_SKIP() << why_;                                                    \
    } while (0)

inline Env& shared_env() {
    static Env env([] {
        EnvOptions options;
        options.log_level = TESS_LOG_ERROR;
        return options;
    }());
    return env;
}

// ---- Inputs ------------------------------------------------------------------------------------------------------

inline uint16_t to_half(float f) {
    // Round to nearest even, with subnormals, infinities and NaN.
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
    if (x < 0x38800000u) {                                                // subnormal or zero
        const float a = std::fabs(f) * 16777216.0f;                       // units of 2^-24
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
    }
    const uint32_t mant = x & 0x7fffffu;
    uint32_t h = ((x >> 23) - 112) << 10 | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

inline float from_half(uint16_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = std::ldexp(static_cast<float>(mant), -24);
        return sign ? -f : f;
    }
    uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
    std::memcpy(&f, &bits, 4);
    return f;
}

struct Input {
    std::string name;
    std::vector<int64_t> dims;
    std::vector<float> values;  // float16 inputs are made from these (rounded)
};

inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

inline int64_t count_of(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

inline Input random_input(const std::string& name, std::vector<int64_t> dims, uint32_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
    const size_t n = static_cast<size_t>(count_of(dims));
    return Input{name, std::move(dims), random_values(n, seed, lo, hi)};
}

inline Value make_value(const Input& in, ElementType type) {
    Value v = Value::tensor(type, in.dims);
    if (type == TESS_ELEMENT_FLOAT16) {
        uint16_t* p = v.data<uint16_t>();
        for (size_t i = 0; i < in.values.size(); ++i) p[i] = to_half(in.values[i]);
    } else {
        float* p = v.data<float>();
        for (size_t i = 0; i < in.values.size(); ++i) p[i] = in.values[i];
    }
    return v;
}

inline std::vector<float> floats(ValueView v) {
    std::vector<float> out(v.element_count());
    if (v.element_type() == TESS_ELEMENT_FLOAT16) {
        const uint16_t* p = v.data<uint16_t>();
        for (size_t i = 0; i < out.size(); ++i) out[i] = from_half(p[i]);
    } else {
        const float* p = v.data<float>();
        for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
    }
    return out;
}

// ---- Runs --------------------------------------------------------------------------------------------------------

struct RunResult {
    std::vector<Value> outputs;
    std::vector<PartitionInfo> partitions;
};

inline RunResult run_model(const std::string& model_bytes, const std::vector<Input>& inputs, ElementType type,
                           const std::vector<std::string>& providers, bool strict) {
    SessionOptions options;
    options.providers(providers).strict(strict);
    Session session = Session::from_bytes(shared_env(), model_bytes.data(), model_bytes.size(), "", &options);
    std::vector<std::string> names;
    std::vector<Value> values;
    for (const Input& in : inputs) {
        names.push_back(in.name);
        values.push_back(make_value(in, type));
    }
    RunResult r;
    r.partitions = session.partitions();
    r.outputs = session.run(names, values);
    return r;
}

struct Tolerance {
    double rtol = 1e-5;
    double atol = 1e-6;
};

// Expects equal shapes and |actual - expected| <= atol + rtol * |expected| everywhere (NaN matches NaN).
inline void expect_close(ValueView actual, ValueView expected, const Tolerance& tol, const std::string& what) {
    ASSERT_EQ(actual.dims(), expected.dims()) << what << ": shapes differ";
    const std::vector<float> a = floats(actual), e = floats(expected);
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) && std::isnan(e[i])) continue;
        const double diff = std::fabs(static_cast<double>(a[i]) - e[i]);
        if (!(diff <= tol.atol + tol.rtol * std::fabs(static_cast<double>(e[i])))) {
            if (bad++ == 0) first = i;
            worst = std::max(worst, diff);
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << a.size() << " elements differ; first at " << first
                       << ": cuda " << (bad ? a[first] : 0.0f) << " vs cpu " << (bad ? e[first] : 0.0f)
                       << ", largest difference " << worst;
}

// Runs `model` on {cuda} in strict mode (so every node is claimed and run by CUDA) and on {cpu}, and compares every
// output.  `type` is the element type of the inputs.  For float16 the reference runs `reference_model` (the same graph
// in float32, fed the same rounded values) on the CPU.
inline void expect_cuda_matches_cpu(const ModelBuilder& model, const std::vector<Input>& inputs,
                                    const Tolerance& tol = {}, ElementType type = TESS_ELEMENT_FLOAT32,
                                    const ModelBuilder* reference_model = nullptr) {
    const std::string bytes = model.bytes();
    RunResult cuda;
    try {
        cuda = run_model(bytes, inputs, type, {"cuda"}, true);
    } catch (const Error& e) {
        FAIL() << "cuda (strict): " << e.what();
    }
    for (const PartitionInfo& p : cuda.partitions) EXPECT_EQ(p.provider, "cuda");
    std::vector<Input> ref_inputs = inputs;
    if (type == TESS_ELEMENT_FLOAT16)
        for (Input& in : ref_inputs)
            for (float& v : in.values) v = from_half(to_half(v));
    const std::string ref_bytes = reference_model != nullptr ? reference_model->bytes() : bytes;
    RunResult cpu;
    try {
        cpu = run_model(ref_bytes, ref_inputs, reference_model != nullptr ? TESS_ELEMENT_FLOAT32 : type, {"cpu"}, true);
    } catch (const Error& e) {
        FAIL() << "cpu: " << e.what();
    }
    ASSERT_EQ(cuda.outputs.size(), cpu.outputs.size());
    for (size_t i = 0; i < cuda.outputs.size(); ++i)
        expect_close(cuda.outputs[i], cpu.outputs[i], tol, "output " + std::to_string(i));
}

}  // namespace tessera::cuda_test
