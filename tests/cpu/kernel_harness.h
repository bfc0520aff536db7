// Test harness for CPU kernels: builds a TessNodeView with attributes, creates the kernel through a KernelRegistry
// and runs it on a mock KernelContext, without the core.
//
// Values live in HarnessValue objects; the harness's host table (harness_host()) implements the TessHostApi value
// functions on them, so TessValue pointers handed to kernels (Tensor::value, input_value, constants in the node
// view, values built with host()) are HarnessValue pointers in disguise.  Never mix them with core values.
// create_kernel/run_kernel install that table as the provider's host() (set_host), which is process-global.
//
// Typical use:
//
//     KernelRegistry registry;
//     register_conv_kernels(registry);
//     NodeBuilder node("Conv", 13);
//     node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_FLOAT32).output().attr_ints("pads", {1, 1, 1, 1});
//     auto outputs = run_node(registry, node, {tensor<float>({1, 1, 5, 5}, x), tensor<float>({1, 1, 3, 3}, w)});
//     std::vector<float> y = values_of<float>(*outputs[0]);
//
// Output buffers are filled with 0xFF bytes before a kernel sees them (NaN for floats), so a kernel that forgets
// to write part of its output fails the comparison instead of passing on zero-initialized memory.
#pragma once

#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "runtime/kernel.h"
#include "runtime/thread_pool.h"

namespace tessera::cpu::testing {

// ---- Values ------------------------------------------------------------------------------------------------

struct HarnessValue {
    int32_t kind = TESS_VALUE_TENSOR;
    int32_t element_type = TESS_ELEMENT_UNDEFINED;
    Shape dims;
    std::vector<std::byte> bytes;                      // tensor data (not strings)
    std::vector<std::string> strings;                  // string tensors
    std::vector<std::unique_ptr<HarnessValue>> items;  // sequence items; optional content (0 or 1 item)
    bool has_value = false;                            // optionals

    int64_t element_count() const { return shape_size(dims); }
};

using ValueHandle = std::shared_ptr<HarnessValue>;

inline TessValue* as_tess(HarnessValue* v) { return reinterpret_cast<TessValue*>(v); }
inline const TessValue* as_tess(const HarnessValue* v) { return reinterpret_cast<const TessValue*>(v); }
inline HarnessValue* as_harness(TessValue* v) { return reinterpret_cast<HarnessValue*>(v); }
inline const HarnessValue* as_harness(const TessValue* v) { return reinterpret_cast<const HarnessValue*>(v); }

// Bytes per element for the fixed-size types the harness stores (0 for strings and packed types).
inline size_t harness_element_size(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_BOOL:
        case TESS_ELEMENT_INT8:
        case TESS_ELEMENT_UINT8:
        case TESS_ELEMENT_FLOAT8E4M3FN:
        case TESS_ELEMENT_FLOAT8E4M3FNUZ:
        case TESS_ELEMENT_FLOAT8E5M2:
        case TESS_ELEMENT_FLOAT8E5M2FNUZ:
        case TESS_ELEMENT_FLOAT8E8M0:
            return 1;
        case TESS_ELEMENT_INT16:
        case TESS_ELEMENT_UINT16:
        case TESS_ELEMENT_FLOAT16:
        case TESS_ELEMENT_BFLOAT16:
            return 2;
        case TESS_ELEMENT_INT32:
        case TESS_ELEMENT_UINT32:
        case TESS_ELEMENT_FLOAT32:
            return 4;
        case TESS_ELEMENT_INT64:
        case TESS_ELEMENT_UINT64:
        case TESS_ELEMENT_FLOAT64:
        case TESS_ELEMENT_COMPLEX64:
            return 8;
        case TESS_ELEMENT_COMPLEX128:
            return 16;
        default:
            return 0;
    }
}

// A tensor whose bytes are `fill` repeated (0 by default).
inline std::unique_ptr<HarnessValue> make_tensor_value(int32_t type, const Shape& dims, std::byte fill = std::byte{0}) {
    auto v = std::make_unique<HarnessValue>();
    v->element_type = type;
    v->dims = dims;
    const size_t count = static_cast<size_t>(shape_size(dims));
    if (type == TESS_ELEMENT_STRING) {
        v->strings.assign(count, std::string());
    } else {
        v->bytes.assign(element_bytes(type, count), fill);  // packed sub-byte types included
    }
    return v;
}

inline std::unique_ptr<HarnessValue> clone_value(const HarnessValue& source) {
    auto v = std::make_unique<HarnessValue>();
    v->kind = source.kind;
    v->element_type = source.element_type;
    v->dims = source.dims;
    v->bytes = source.bytes;
    v->strings = source.strings;
    v->has_value = source.has_value;
    for (const auto& item : source.items) v->items.push_back(clone_value(*item));
    return v;
}

template <typename T>
ValueHandle tensor(const Shape& shape, const std::vector<T>& values) {
    if (static_cast<int64_t>(values.size()) != shape_size(shape)) {
        throw std::invalid_argument("tensor(): " + std::to_string(values.size()) + " values for shape " +
                                    shape_string(shape));
    }
    ValueHandle v = make_tensor_value(element_type_of<T>(), shape);
    for (size_t i = 0; i < values.size(); ++i) {
        const T value = values[i];  // also unpacks std::vector<bool> proxies
        std::memcpy(v->bytes.data() + i * sizeof(T), &value, sizeof(T));
    }
    return v;
}

template <typename T>
ValueHandle scalar(T value) {
    return tensor<T>({}, std::vector<T>{value});
}

inline ValueHandle string_tensor(const Shape& shape, std::vector<std::string> values) {
    if (static_cast<int64_t>(values.size()) != shape_size(shape)) {
        throw std::invalid_argument("string_tensor(): value count does not match shape " + shape_string(shape));
    }
    ValueHandle v = make_tensor_value(TESS_ELEMENT_STRING, shape);
    v->strings = std::move(values);
    return v;
}

inline ValueHandle sequence(int32_t element_type, const std::vector<ValueHandle>& items) {
    auto v = std::make_shared<HarnessValue>();
    v->kind = TESS_VALUE_SEQUENCE;
    v->element_type = element_type;
    for (const auto& item : items) v->items.push_back(clone_value(*item));
    return v;
}

// An optional holding a copy of `inner`, or an empty optional when inner is null.
inline ValueHandle optional_value(int32_t element_type, const ValueHandle& inner) {
    auto v = std::make_shared<HarnessValue>();
    v->kind = TESS_VALUE_OPTIONAL;
    v->element_type = element_type;
    v->has_value = inner != nullptr;
    if (inner) v->items.push_back(clone_value(*inner));
    return v;
}

template <typename T>
std::vector<T> values_of(const HarnessValue& v) {
    if (v.kind != TESS_VALUE_TENSOR || v.element_type != element_type_of<T>()) {
        throw std::invalid_argument("values_of(): the value is not a tensor of the requested type");
    }
    std::vector<T> out(static_cast<size_t>(v.element_count()));
    for (size_t i = 0; i < out.size(); ++i) {
        T value;
        std::memcpy(&value, v.bytes.data() + i * sizeof(T), sizeof(T));
        out[i] = value;
    }
    return out;
}

// ---- Host table -------------------------------------------------------------------------------------------

// `count` floats drawn uniformly from [-1, 1): test data for the kernels' reference comparisons.
// `count` values uniform in [lo, hi] from a generator seeded with `seed` (integers drawn as int, or int64_t for
// 64-bit types).
template <typename T>
std::vector<T> random_values(int64_t count, uint32_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937 gen(seed);
    std::vector<T> v(static_cast<size_t>(count));
    if constexpr (std::is_floating_point_v<T>) {
        std::uniform_real_distribution<double> dist(lo, hi);
        for (auto& x : v) x = static_cast<T>(dist(gen));
    } else {
        using Draw = std::conditional_t<(sizeof(T) > 4), int64_t, int>;
        std::uniform_int_distribution<Draw> dist(static_cast<Draw>(lo), static_cast<Draw>(hi));
        for (auto& x : v) x = static_cast<T>(dist(gen));
    }
    return v;
}

inline std::vector<float> random_floats(size_t count, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (float& f : v) f = dist(rng);
    return v;
}

struct HarnessStatus {
    int32_t code;
    std::string message;
};

namespace host_impl {

inline TessStatus* status_create(int32_t code, const char* message) {
    return reinterpret_cast<TessStatus*>(new HarnessStatus{code, message != nullptr ? message : ""});
}
inline int32_t status_code(const TessStatus* s) {
    return s == nullptr ? TESS_STATUS_OK : reinterpret_cast<const HarnessStatus*>(s)->code;
}
inline const char* status_message(const TessStatus* s) {
    return s == nullptr ? "" : reinterpret_cast<const HarnessStatus*>(s)->message.c_str();
}
inline void status_release(TessStatus* s) { delete reinterpret_cast<HarnessStatus*>(s); }
inline void log(int32_t, const char*, const char*) {}

inline int32_t value_kind(const TessValue* v) { return as_harness(v)->kind; }
inline int32_t value_element_type(const TessValue* v) { return as_harness(v)->element_type; }
inline size_t tensor_rank(const TessValue* v) { return as_harness(v)->dims.size(); }
inline const int64_t* tensor_dims(const TessValue* v) { return as_harness(v)->dims.data(); }
inline size_t tensor_element_count(const TessValue* v) { return static_cast<size_t>(as_harness(v)->element_count()); }
inline size_t tensor_byte_size(const TessValue* v) { return as_harness(v)->bytes.size(); }
inline void* tensor_data(TessValue* v) {
    HarnessValue* h = as_harness(v);
    return h->element_type == TESS_ELEMENT_STRING ? nullptr : h->bytes.data();
}
inline const void* tensor_const_data(const TessValue* v) {
    const HarnessValue* h = as_harness(v);
    return h->element_type == TESS_ELEMENT_STRING ? nullptr : h->bytes.data();
}
inline TessStatus* tensor_get_string(const TessValue* v, size_t index, const char** data, size_t* len) {
    const HarnessValue* h = as_harness(v);
    if (h->element_type != TESS_ELEMENT_STRING || index >= h->strings.size()) {
        return status_create(TESS_STATUS_INVALID_ARGUMENT, "tensor_get_string: not a string element");
    }
    *data = h->strings[index].data();
    *len = h->strings[index].size();
    return nullptr;
}
inline TessStatus* tensor_set_string(TessValue* v, size_t index, const char* data, size_t len) {
    HarnessValue* h = as_harness(v);
    if (h->element_type != TESS_ELEMENT_STRING || index >= h->strings.size()) {
        return status_create(TESS_STATUS_INVALID_ARGUMENT, "tensor_set_string: not a string element");
    }
    h->strings[index].assign(data, len);
    return nullptr;
}
inline size_t sequence_length(const TessValue* v) { return as_harness(v)->items.size(); }
inline const TessValue* sequence_at(const TessValue* v, size_t index) {
    const HarnessValue* h = as_harness(v);
    return index < h->items.size() ? as_tess(h->items[index].get()) : nullptr;
}
inline int32_t optional_has_value(const TessValue* v) { return as_harness(v)->has_value ? 1 : 0; }
inline const TessValue* optional_value(const TessValue* v) {
    const HarnessValue* h = as_harness(v);
    return h->has_value && !h->items.empty() ? as_tess(h->items[0].get()) : nullptr;
}
inline TessStatus* value_create_tensor(int32_t type, const int64_t* dims, size_t rank, TessValue** out) {
    *out = as_tess(make_tensor_value(type, Shape(dims, dims + rank)).release());
    return nullptr;
}
// Takes ownership of the items, like the core does.
inline TessStatus* value_create_sequence(int32_t type, TessValue* const* items, size_t count, TessValue** out) {
    auto v = std::make_unique<HarnessValue>();
    v->kind = TESS_VALUE_SEQUENCE;
    v->element_type = type;
    for (size_t i = 0; i < count; ++i) v->items.emplace_back(as_harness(items[i]));
    *out = as_tess(v.release());
    return nullptr;
}
inline TessStatus* value_create_optional(int32_t type, TessValue* inner, TessValue** out) {
    auto v = std::make_unique<HarnessValue>();
    v->kind = TESS_VALUE_OPTIONAL;
    v->element_type = type;
    v->has_value = inner != nullptr;
    if (inner != nullptr) v->items.emplace_back(as_harness(inner));
    *out = as_tess(v.release());
    return nullptr;
}
inline void value_release(TessValue* v) { delete as_harness(v); }

}  // namespace host_impl

// Host functions over HarnessValue.  Capability and compute-context functions are absent (NULL): kernels never
// call them.
inline const TessHostApi& harness_host() {
    static const TessHostApi host = [] {
        TessHostApi h{};
        h.struct_size = sizeof(TessHostApi);
        h.abi_version_min = TESS_PLUGIN_ABI_VERSION_MIN;
        h.abi_version_max = TESS_PLUGIN_ABI_VERSION_MAX;
        h.status_create = host_impl::status_create;
        h.status_code = host_impl::status_code;
        h.status_message = host_impl::status_message;
        h.status_release = host_impl::status_release;
        h.log = host_impl::log;
        h.value_kind = host_impl::value_kind;
        h.value_element_type = host_impl::value_element_type;
        h.tensor_rank = host_impl::tensor_rank;
        h.tensor_dims = host_impl::tensor_dims;
        h.tensor_element_count = host_impl::tensor_element_count;
        h.tensor_byte_size = host_impl::tensor_byte_size;
        h.tensor_data = host_impl::tensor_data;
        h.tensor_const_data = host_impl::tensor_const_data;
        h.tensor_get_string = host_impl::tensor_get_string;
        h.tensor_set_string = host_impl::tensor_set_string;
        h.sequence_length = host_impl::sequence_length;
        h.sequence_at = host_impl::sequence_at;
        h.optional_has_value = host_impl::optional_has_value;
        h.optional_value = host_impl::optional_value;
        h.value_create_tensor = host_impl::value_create_tensor;
        h.value_create_sequence = host_impl::value_create_sequence;
        h.value_create_optional = host_impl::value_create_optional;
        h.value_release = host_impl::value_release;
        return h;
    }();
    return host;
}

// ---- Node views ---------------------------------------------------------------------------------------------

// Builds a TessNodeView.  Every pointer in the view stays valid as long as the builder lives.
class NodeBuilder {
public:
    explicit NodeBuilder(std::string op_type, int64_t opset = 21, std::string domain = "")
        : op_type_(std::move(op_type)), domain_(std::move(domain)), opset_(opset) {}
    NodeBuilder(const NodeBuilder&) = delete;
    NodeBuilder& operator=(const NodeBuilder&) = delete;

    NodeBuilder& name(std::string n) {
        name_ = std::move(n);
        return *this;
    }
    // A runtime input with an optional declared type and shape.
    NodeBuilder& input(int32_t type = TESS_ELEMENT_UNDEFINED, std::optional<Shape> shape = std::nullopt) {
        input_views_.push_back(&add_value(type, shape, nullptr));
        input_constants_.push_back(nullptr);
        return *this;
    }
    // An input bound to a constant (initializer): NodeInfo::input_constant sees it, and run_node passes it at run
    // time unless the caller gives another value.
    NodeBuilder& constant_input(const ValueHandle& value) {
        input_views_.push_back(&add_value(value->element_type, value->dims, value.get()));
        input_constants_.push_back(value);
        return *this;
    }
    NodeBuilder& omitted_input() {
        input_views_.push_back(nullptr);
        input_constants_.push_back(nullptr);
        return *this;
    }
    NodeBuilder& output(int32_t type = TESS_ELEMENT_UNDEFINED, std::optional<Shape> shape = std::nullopt) {
        output_views_.push_back(&add_value(type, shape, nullptr));
        return *this;
    }
    NodeBuilder& omitted_output() {
        output_views_.push_back(nullptr);
        return *this;
    }

    NodeBuilder& attr_int(const std::string& n, int64_t v) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_INT);
        a.i = v;
        return *this;
    }
    NodeBuilder& attr_float(const std::string& n, float v) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_FLOAT);
        a.f = v;
        return *this;
    }
    NodeBuilder& attr_string(const std::string& n, const std::string& v) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_STRING);
        const std::string& s = strings_.emplace_back(v);
        a.s = s.data();
        a.s_len = s.size();
        return *this;
    }
    NodeBuilder& attr_ints(const std::string& n, std::vector<int64_t> v) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_INTS);
        const auto& stored = int_lists_.emplace_back(std::move(v));
        a.ints = stored.data();
        a.count = stored.size();
        return *this;
    }
    NodeBuilder& attr_floats(const std::string& n, std::vector<float> v) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_FLOATS);
        const auto& stored = float_lists_.emplace_back(std::move(v));
        a.floats = stored.data();
        a.count = stored.size();
        return *this;
    }
    NodeBuilder& attr_strings(const std::string& n, const std::vector<std::string>& v) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_STRINGS);
        auto& pointers = string_pointer_lists_.emplace_back();
        auto& lengths = string_length_lists_.emplace_back();
        for (const std::string& s : v) {
            const std::string& stored = strings_.emplace_back(s);
            pointers.push_back(stored.data());
            lengths.push_back(stored.size());
        }
        a.strings = pointers.data();
        a.string_lens = lengths.data();
        a.count = v.size();
        return *this;
    }
    NodeBuilder& attr_tensor(const std::string& n, const ValueHandle& value) {
        TessAttributeView& a = add_attr(n, TESS_ATTR_TENSOR);
        kept_values_.push_back(value);
        a.tensor = as_tess(value.get());
        return *this;
    }

    const TessNodeView& view() {
        attr_pointers_.clear();
        for (const TessAttributeView& a : attrs_) attr_pointers_.push_back(&a);
        node_ = TessNodeView{};
        node_.struct_size = sizeof(TessNodeView);
        node_.index = 0;
        node_.name = name_.c_str();
        node_.op_type = op_type_.c_str();
        node_.domain = domain_.c_str();
        node_.opset = opset_;
        node_.input_count = input_views_.size();
        node_.inputs = input_views_.data();
        node_.output_count = output_views_.size();
        node_.outputs = output_views_.data();
        node_.attribute_count = attr_pointers_.size();
        node_.attributes = attr_pointers_.data();
        return node_;
    }

    size_t input_count() const { return input_views_.size(); }
    size_t output_count() const { return output_views_.size(); }
    bool output_present(size_t i) const { return output_views_[i] != nullptr; }
    const ValueHandle& input_constant(size_t i) const { return input_constants_[i]; }

private:
    TessValueView& add_value(int32_t type, const std::optional<Shape>& shape, const HarnessValue* constant) {
        TessValueView& v = values_.emplace_back();
        v.struct_size = sizeof(TessValueView);
        const std::string& n = strings_.emplace_back("v" + std::to_string(values_.size()));
        v.name = n.c_str();
        v.kind = TESS_VALUE_TENSOR;
        v.element_type = type;
        if (shape) {
            const auto& dims = int_lists_.emplace_back(*shape);
            v.rank = static_cast<int64_t>(dims.size());
            v.dims = dims.data();
        } else {
            v.rank = -1;
            v.dims = nullptr;
        }
        v.constant = constant != nullptr ? as_tess(constant) : nullptr;
        return v;
    }

    TessAttributeView& add_attr(const std::string& n, int32_t type) {
        TessAttributeView& a = attrs_.emplace_back();
        a.struct_size = sizeof(TessAttributeView);
        a.name = strings_.emplace_back(n).c_str();
        a.type = type;
        return a;
    }

    std::string op_type_;
    std::string domain_;
    std::string name_;
    int64_t opset_;
    // Deques: growing them never moves existing elements, so the view's pointers stay valid.
    std::deque<std::string> strings_;
    std::deque<std::vector<int64_t>> int_lists_;
    std::deque<std::vector<float>> float_lists_;
    std::deque<std::vector<const char*>> string_pointer_lists_;
    std::deque<std::vector<size_t>> string_length_lists_;
    std::deque<TessValueView> values_;
    std::deque<TessAttributeView> attrs_;
    std::vector<const TessValueView*> input_views_;
    std::vector<const TessValueView*> output_views_;
    std::vector<const TessAttributeView*> attr_pointers_;
    std::vector<ValueHandle> input_constants_;
    std::vector<ValueHandle> kept_values_;
    TessNodeView node_{};
};

// ---- Kernel context -----------------------------------------------------------------------------------------

class MockContext final : public KernelContext {
public:
    // inputs: one per node input, null for omitted ones.  wanted: which outputs the node uses (all when empty).
    MockContext(ThreadPool& pool, std::vector<ValueHandle> inputs, size_t output_count, std::vector<bool> wanted = {})
        : pool_(pool), inputs_(std::move(inputs)), outputs_(output_count), wanted_(std::move(wanted)) {
        if (wanted_.empty()) wanted_.assign(output_count, true);
        for (const ValueHandle& v : inputs_) {
            Tensor t;
            if (v) {
                t.type = v->element_type;
                t.shape = v->dims;
                t.data =
                    v->kind == TESS_VALUE_TENSOR && v->element_type != TESS_ELEMENT_STRING ? v->bytes.data() : nullptr;
                t.value = as_tess(v.get());
            }
            input_tensors_.push_back(std::move(t));
        }
        output_tensors_.resize(output_count);
    }

    size_t input_count() const override { return inputs_.size(); }
    bool has_input(size_t i) const override { return i < inputs_.size() && inputs_[i] != nullptr; }
    const Tensor& input(size_t i) const override {
        if (!has_input(i)) throw std::logic_error("kernel read missing input " + std::to_string(i));
        return input_tensors_[i];
    }
    const TessValue* input_value(size_t i) const override { return has_input(i) ? as_tess(inputs_[i].get()) : nullptr; }

    size_t output_count() const override { return outputs_.size(); }
    bool output_wanted(size_t i) const override { return i < wanted_.size() && wanted_[i]; }
    Tensor& output(size_t i, int32_t type, const Shape& shape) override {
        check_output_index(i);
        outputs_[i] = make_tensor_value(type, shape, std::byte{0xFF});
        Tensor& t = output_tensors_[i];
        t.type = type;
        t.shape = shape;
        t.data = type == TESS_ELEMENT_STRING ? nullptr : outputs_[i]->bytes.data();
        t.value = as_tess(outputs_[i].get());
        return t;
    }
    // The harness always copies (the executor may alias instead; the result is the same).
    void alias_output(size_t i, size_t input_index, const Shape& shape) override {
        check_output_index(i);
        const HarnessValue& source = *inputs_.at(input_index);
        if (shape_size(shape) != source.element_count()) {
            throw std::logic_error("alias_output: shape " + shape_string(shape) + " has another element count");
        }
        auto copy = clone_value(source);
        copy->dims = shape;
        outputs_[i] = std::move(copy);
        Tensor& t = output_tensors_[i];
        t.type = outputs_[i]->element_type;
        t.shape = shape;
        t.data = t.type == TESS_ELEMENT_STRING ? nullptr : outputs_[i]->bytes.data();
        t.value = as_tess(outputs_[i].get());
    }
    void set_output_value(size_t i, TessValue* value) override {
        check_output_index(i);
        outputs_[i].reset(as_harness(value));
    }

    ThreadPool& pool() const override { return pool_; }
    const TessHostApi& host() const override { return harness_host(); }

    // The value the kernel produced for output i (null when it produced none).
    ValueHandle take_output(size_t i) { return ValueHandle(std::move(outputs_.at(i))); }

private:
    void check_output_index(size_t i) const {
        if (i >= outputs_.size())
            throw std::logic_error("kernel wrote output " + std::to_string(i) + " of " +
                                   std::to_string(outputs_.size()));
    }

    ThreadPool& pool_;
    std::vector<ValueHandle> inputs_;
    std::vector<Tensor> input_tensors_;
    std::vector<std::unique_ptr<HarnessValue>> outputs_;
    std::vector<Tensor> output_tensors_;
    std::vector<bool> wanted_;
};

// ---- Running a node -----------------------------------------------------------------------------------------

// A pool shared by the tests of one binary (creating threads per test would dominate small tests).
inline ThreadPool& test_pool(int threads = 4) {
    static ThreadPool pool(threads);
    return pool;
}

// Creates the node's kernel from the registry (throws std::runtime_error with the registry's reason when no kernel
// matches; KernelError from the kernel's constructor passes through).
inline std::unique_ptr<Kernel> create_kernel(const KernelRegistry& registry, NodeBuilder& node) {
    set_host(&harness_host());
    const TessNodeView& view = node.view();
    std::string why;
    const KernelDef* def = registry.find(view, &why);
    if (def == nullptr) throw std::runtime_error("no kernel: " + why);
    NodeInfo info(view);
    return def->factory(info);
}

// Runs an existing kernel once.  inputs[i] null (or missing) means the node's constant for input i, or an
// omitted input when there is none.
inline std::vector<ValueHandle> run_kernel(const Kernel& kernel, const NodeBuilder& node,
                                           const std::vector<ValueHandle>& inputs, ThreadPool& pool = test_pool()) {
    set_host(&harness_host());
    std::vector<ValueHandle> bound(node.input_count());
    for (size_t i = 0; i < bound.size(); ++i) {
        bound[i] = i < inputs.size() && inputs[i] ? inputs[i] : node.input_constant(i);
    }
    std::vector<bool> wanted(node.output_count());
    for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = node.output_present(i);
    MockContext ctx(pool, std::move(bound), node.output_count(), wanted);
    kernel.compute(ctx);
    std::vector<ValueHandle> outputs;
    for (size_t i = 0; i < node.output_count(); ++i) outputs.push_back(ctx.take_output(i));
    return outputs;
}

// create_kernel + run_kernel.
inline std::vector<ValueHandle> run_node(const KernelRegistry& registry, NodeBuilder& node,
                                         const std::vector<ValueHandle>& inputs, ThreadPool& pool = test_pool()) {
    std::unique_ptr<Kernel> kernel = create_kernel(registry, node);
    return run_kernel(*kernel, node, inputs, pool);
}

// A registry holding the kernel families a test needs, built once per list:
//     run_node(registry_with<register_tensor_kernels, register_quantize_kernels>(), node, inputs)
template <auto... Register> const KernelRegistry& registry_with() {
    static const KernelRegistry registry = [] {
        KernelRegistry r;
        (Register(r), ...);
        return r;
    }();
    return registry;
}

}  // namespace tessera::cpu::testing
