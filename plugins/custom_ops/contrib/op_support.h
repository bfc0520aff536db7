// The com.microsoft contrib-op library: what every operator shares.
//
// Operators are described by an OpSpec (parameters, attributes, and C++ callbacks for check, shape inference and
// kernel creation); make_op turns a spec into a TessCustomOpApi whose C callbacks catch everything, so nothing
// thrown here ever crosses the ABI.  Inside the library, fail() throws a support::Error; at the boundary it becomes
// a TessStatus (for check: the reason the node is declined).
//
// Element types: float32 and double compute in their own type; float16 and bfloat16 are stored as raw 16-bit
// patterns (Half, BFloat16) and compute in float32, rounding to nearest-even on the way out.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/custom_op.h"
#include "tessera/plugin_support.hpp"

namespace tessera::contrib {

extern const TessHostApi* g_host;

inline constexpr const char* kDomain = "com.microsoft";

// ---- Errors ---------------------------------------------------------------------------------------------------

[[noreturn]] inline void fail(const std::string& message, int32_t code = TESS_STATUS_INVALID_ARGUMENT) {
    throw support::Error(code, message);
}

std::string shape_string(std::span<const int64_t> dims);
using support::element_type_name;

// ---- 16-bit floating-point storage (the SDK's support layer) ----------------------------------------------------

using support::BFloat16;
using support::bfloat16_to_float;
using support::float_to_bfloat16;
using support::float_to_half;
using support::Half;
using support::half_to_float;

// The type a storage type computes in, and the conversions.
template <typename T>
struct ComputeOf {
    using type = T;
};
template <>
struct ComputeOf<Half> {
    using type = float;
};
template <>
struct ComputeOf<BFloat16> {
    using type = float;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;

template <typename T>
inline compute_t<T> load(T v) {
    if constexpr (std::is_same_v<T, Half>) {
        return half_to_float(v.bits);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
        return bfloat16_to_float(v.bits);
    } else {
        return v;
    }
}

template <typename T>
inline T store(compute_t<T> v) {
    if constexpr (std::is_same_v<T, Half>) {
        return Half{float_to_half(v)};
    } else if constexpr (std::is_same_v<T, BFloat16>) {
        return BFloat16{float_to_bfloat16(v)};
    } else {
        return v;
    }
}

template <typename T>
constexpr int32_t element_type_of() {
    if constexpr (std::is_same_v<T, float>) return TESS_ELEMENT_FLOAT32;
    if constexpr (std::is_same_v<T, double>) return TESS_ELEMENT_FLOAT64;
    if constexpr (std::is_same_v<T, Half>) return TESS_ELEMENT_FLOAT16;
    if constexpr (std::is_same_v<T, BFloat16>) return TESS_ELEMENT_BFLOAT16;
    return TESS_ELEMENT_UNDEFINED;
}

// Converts n elements of storage type T to its compute type (a plain copy for float and double).
template <typename T>
void convert_in(const T* src, compute_t<T>* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}
template <typename T>
void convert_out(const compute_t<T>* src, T* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}

// Calls f(T{}) with the storage type named by `type` (one of the floating-point types).
template <typename F>
decltype(auto) dispatch_float(int32_t type, F&& f) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return f(float{});
        case TESS_ELEMENT_FLOAT64: return f(double{});
        case TESS_ELEMENT_FLOAT16: return f(Half{});
        case TESS_ELEMENT_BFLOAT16: return f(BFloat16{});
        default: fail(std::string("element type ") + element_type_name(type) + " is not supported");
    }
}

inline constexpr int32_t kFloat = TESS_ELEMENT_FLOAT32;
inline constexpr int32_t kDouble = TESS_ELEMENT_FLOAT64;
inline constexpr int32_t kHalf = TESS_ELEMENT_FLOAT16;
inline constexpr int32_t kBFloat16 = TESS_ELEMENT_BFLOAT16;

// ---- The node a callback receives ---------------------------------------------------------------------------

class Node {
public:
    explicit Node(const TessNodeView* view) : view_(view) {}
    const TessNodeView& view() const { return *view_; }
    std::string label() const;  // "com.microsoft:Op 'name'"

    // Attributes.  The typed getters fail (with the attribute's name) when the attribute has another type.
    const TessAttributeView* attribute(const char* name) const;
    bool has(const char* name) const { return attribute(name) != nullptr; }
    float get_float(const char* name, float fallback) const;
    int64_t get_int(const char* name, int64_t fallback) const;
    std::string get_string(const char* name, const std::string& fallback) const;
    std::vector<int64_t> get_ints(const char* name) const;   // empty when absent
    std::vector<float> get_floats(const char* name) const;   // empty when absent

    // Inputs and outputs (nullptr / false for omitted optional ones).
    size_t input_count() const { return view_->input_count; }
    const TessValueView* input(size_t i) const { return i < view_->input_count ? view_->inputs[i] : nullptr; }
    bool has_input(size_t i) const { return input(i) != nullptr; }
    bool has_output(size_t i) const { return i < view_->output_count && view_->outputs[i] != nullptr; }
    int32_t input_type(size_t i) const {
        const TessValueView* v = input(i);
        return v == nullptr ? TESS_ELEMENT_UNDEFINED : v->element_type;
    }
    // The input's rank, or -1 when absent or unknown.
    int64_t input_rank(size_t i) const {
        const TessValueView* v = input(i);
        return v == nullptr ? -1 : v->rank;
    }
    // The input's dims (-1 entries for unknown dims), or nullopt when the rank is unknown.
    std::optional<std::vector<int64_t>> input_dims(size_t i) const;
    // Host data of a constant input (an initializer or folded constant), valid for this call; nullptr otherwise.
    const TessValue* constant(size_t i) const {
        const TessValueView* v = input(i);
        return v == nullptr ? nullptr : v->constant;
    }

private:
    const TessNodeView* view_;
};

// Type constraint "T" shared by several inputs: every present input of `indices` with a known element type has
// the element type of the first such input.
void require_same_type(const Node& node, std::initializer_list<size_t> indices);

// Shape inference results.  Nothing is stated for an output whose element type is not known (the model's own
// declaration stays).
class ShapeOut {
public:
    explicit ShapeOut(TessShapeContext* context) : context_(context) {}
    void set(size_t index, int32_t type, const std::vector<int64_t>& dims) const {
        if (type == TESS_ELEMENT_UNDEFINED) return;
        g_host->shape_set_output(context_, index, type, dims.data(), static_cast<int64_t>(dims.size()));
    }
    void set(size_t index, int32_t type, const std::optional<std::vector<int64_t>>& dims) const {
        if (dims) {
            set(index, type, *dims);
        } else {
            set_type(index, type);
        }
    }
    void set_type(size_t index, int32_t type) const {
        if (type != TESS_ELEMENT_UNDEFINED) g_host->shape_set_output(context_, index, type, nullptr, -1);
    }

private:
    TessShapeContext* context_;
};

// ---- Runtime tensors ------------------------------------------------------------------------------------------

struct Tensor {
    const TessValue* value = nullptr;
    int32_t type = TESS_ELEMENT_UNDEFINED;
    std::span<const int64_t> dims;
    size_t count = 0;
    const void* data = nullptr;

    static Tensor of(const TessValue* value);
    size_t rank() const { return dims.size(); }
    int64_t dim(size_t i) const { return dims[i]; }
    std::vector<int64_t> shape() const { return {dims.begin(), dims.end()}; }
    template <typename T>
    const T* as() const {
        return static_cast<const T*>(data);
    }
};

class Context {
public:
    Context(const TessKernelContextApi* api, TessKernelContext* context) : api_(api), context_(context) {}
    bool has_input(size_t i) const { return i < api_->input_count(context_) && api_->input(context_, i) != nullptr; }
    // A present input (fails when it is missing or not a tensor).
    Tensor input(size_t i, const char* name) const;
    std::optional<Tensor> optional_input(size_t i) const {
        if (!has_input(i)) return std::nullopt;
        return Tensor::of(api_->input(context_, i));
    }
    void* output(size_t i, int32_t type, std::span<const int64_t> dims) const;
    template <typename T>
    T* output(size_t i, std::span<const int64_t> dims) const {
        return static_cast<T*>(output(i, element_type_of<T>(), dims));
    }

private:
    const TessKernelContextApi* api_;
    TessKernelContext* context_;
};

// Per-node state, created once when a session compiles the node.  compute runs concurrently: it must not modify
// the kernel.
struct Kernel {
    virtual ~Kernel() = default;
    virtual void compute(const Context& context) const = 0;
};

// ---- Operator descriptions ------------------------------------------------------------------------------------

struct ParamSpec {
    const char* name;
    std::vector<int32_t> types;  // empty: any
    bool optional = false;
};

struct OpSpec {
    const char* name = nullptr;
    std::vector<ParamSpec> inputs;
    std::vector<ParamSpec> outputs;
    std::vector<const char*> attributes;
    void (*check)(const Node&) = nullptr;                      // fail(reason) declines the node
    void (*infer)(const Node&, const ShapeOut&) = nullptr;     // may leave outputs unset
    std::unique_ptr<Kernel> (*create)(const Node&) = nullptr;  // required
};

const TessCustomOpApi* make_op(OpSpec spec);

// The operator families (one file each).
void add_activation_ops(std::vector<OpSpec>& ops);
void add_normalization_ops(std::vector<OpSpec>& ops);
void add_matmul_ops(std::vector<OpSpec>& ops);
void add_conv_ops(std::vector<OpSpec>& ops);

// ---- Small helpers shared by several operators ----------------------------------------------------------------

inline int64_t product(std::span<const int64_t> dims, size_t begin = 0, size_t end = SIZE_MAX) {
    int64_t p = 1;
    for (size_t i = begin; i < dims.size() && i < end; ++i) p *= dims[i];
    return p;
}

// A copy of a constant input converted to the compute type of T (for prepacked weights); empty when the input
// is not constant.
template <typename T>
std::vector<compute_t<T>> constant_as_compute(const Node& node, size_t i) {
    const TessValue* c = node.constant(i);
    if (c == nullptr) return {};
    size_t n = g_host->tensor_element_count(c);
    std::vector<compute_t<T>> out(n);
    convert_in(static_cast<const T*>(g_host->tensor_const_data(c)), out.data(), n);
    return out;
}

}  // namespace tessera::contrib
