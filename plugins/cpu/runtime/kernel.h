// CPU provider: the kernel interface.  Every operator family lives in kernels/<family>.cc and registers its kernels
// in one function listed in kernels/all_kernels.h.  A kernel object is created once per node when a partition is
// compiled (that is where attributes are parsed and constant weights prepacked) and its compute() runs for every
// inference, possibly from several threads at once, so compute() must not mutate the kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/provider.h"
#include "tessera/support/status.hpp"
#include "runtime/thread_pool.h"

namespace tessera::cpu {

using Shape = std::vector<int64_t>;

int64_t shape_size(const Shape& shape);
// The byte size of a tensor of `type` and `shape`; throws KernelError (naming `what`) for a negative dimension or a
// size that 64 bits cannot count, which shape_size would wrap (output shapes come from the model's data).
size_t checked_byte_size(int32_t type, const Shape& shape, std::string_view what);
std::string shape_string(const Shape& shape);

// Thrown by kernels and NodeInfo for a model the kernel cannot accept (bad attribute, shape mismatch).  The
// provider turns it into a TessStatus at the ABI boundary; nothing escapes the plugin.
struct KernelError : support::Error {
    explicit KernelError(const std::string& message) : support::Error(TESS_STATUS_RUNTIME_ERROR, message) {}
};

// Thrown when the run was terminated or passed its deadline (TessHostApi::compute_should_stop); becomes a
// TESS_STATUS_CANCELLED status.  Not a KernelError, so that no kernel wraps or swallows it.
struct RunStopped : support::Error {
    RunStopped() : support::Error(TESS_STATUS_CANCELLED, "the run was stopped: terminated, or past its deadline") {}
};

// A tensor as kernels see it: a non-owning view.  String tensors (TESS_ELEMENT_STRING) have no data pointer; they
// are read and written through `value` with the string helpers in the context.
struct Tensor {
    int32_t type = TESS_ELEMENT_UNDEFINED;
    Shape shape;
    void* data = nullptr;
    TessValue* value = nullptr;  // the backing TessValue when there is one (strings, partition inputs/outputs)

    int64_t size() const { return shape_size(shape); }
    size_t rank() const { return shape.size(); }
    template <typename T> T* ptr() { return static_cast<T*>(data); }
    template <typename T> const T* ptr() const { return static_cast<const T*>(data); }
    size_t byte_size() const;
};

struct KernelSource;

// Static facts about one node, available when the kernel is created.
class NodeInfo {
public:
    explicit NodeInfo(const TessNodeView& node, const KernelSource* source = nullptr,
                      std::vector<size_t>* released = nullptr)
        : node_(node), source_(source), released_(released) {}

    // The kernel keeps its own copy (a prepacked form) of constant input i and will never read the input again:
    // the compiled graph stops binding it, and the core frees the constant once no one else reads it.
    void release_constant(size_t i) const {
        if (released_ != nullptr && input_constant(i) != nullptr) released_->push_back(i);
    }

    // Where this node's kernel came from; control-flow kernels compile their bodies with it.
    const KernelSource* source() const { return source_; }

    std::string_view op_type() const { return node_.op_type; }
    std::string_view domain() const { return node_.domain; }
    std::string_view name() const { return node_.name; }
    int64_t opset() const { return node_.opset; }
    size_t input_count() const { return node_.input_count; }
    size_t output_count() const { return node_.output_count; }
    bool has_input(size_t i) const { return i < node_.input_count && node_.inputs[i] != nullptr; }
    bool has_output(size_t i) const { return i < node_.output_count && node_.outputs[i] != nullptr; }
    // Declared element type of an input/output (TESS_ELEMENT_UNDEFINED when unknown).
    int32_t input_type(size_t i) const;
    int32_t output_type(size_t i) const;
    // Declared shape when the model states a full one.
    std::optional<Shape> input_shape(size_t i) const;
    // The constant (initializer) bound to input i, if any.  Valid only while the kernel is being created: copy it.
    const TessValue* input_constant(size_t i) const;
    std::optional<Tensor> constant_tensor(size_t i) const;

    bool has_attr(std::string_view name) const { return find(name) != nullptr; }
    const TessAttributeView* find(std::string_view name) const;
    int64_t attr_int(std::string_view name, int64_t fallback) const;
    int64_t attr_int(std::string_view name) const;  // throws KernelError when missing
    float attr_float(std::string_view name, float fallback) const;
    std::string attr_string(std::string_view name, std::string_view fallback) const;
    std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const;
    std::vector<float> attr_floats(std::string_view name, std::vector<float> fallback = {}) const;
    std::vector<std::string> attr_strings(std::string_view name) const;
    const TessValue* attr_tensor(std::string_view name) const;

    const TessNodeView& view() const { return node_; }

private:
    const TessNodeView& node_;
    const KernelSource* source_;
    std::vector<size_t>* released_;  // where release_constant records (NULL: releasing is not offered)
};

// What a kernel sees while it runs.  Implemented by the executor.
class KernelContext {
public:
    virtual ~KernelContext() = default;

    virtual size_t input_count() const = 0;
    // False for an omitted optional input (and for index >= input_count()).
    virtual bool has_input(size_t i) const = 0;
    virtual const Tensor& input(size_t i) const = 0;
    // The raw value of an input (sequences, optionals); NULL for omitted inputs.
    virtual const TessValue* input_value(size_t i) const = 0;

    virtual size_t output_count() const = 0;
    // False when the node's output i is omitted (optional outputs nobody reads); kernels may skip computing it.
    virtual bool output_wanted(size_t i) const = 0;
    // The output tensor with the given type and shape; its memory is uninitialized.  Called once per output.
    virtual Tensor& output(size_t i, int32_t type, const Shape& shape) = 0;
    // Makes output i a view of input `input_index` with another shape (same bytes).  Used by Reshape-like ops;
    // the executor copies instead when aliasing is impossible.
    virtual void alias_output(size_t i, size_t input_index, const Shape& shape) = 0;
    // Hands over a complete non-tensor value (sequence or optional) built with host() functions.
    virtual void set_output_value(size_t i, TessValue* value) = 0;

    virtual ThreadPool& pool() const = 0;
    virtual const TessHostApi& host() const = 0;
};

class Kernel {
public:
    virtual ~Kernel() = default;
    virtual void compute(KernelContext& ctx) const = 0;
    // An input whose buffer output 0 may take over when nothing reads it after this step and it has output 0's
    // size, or -1 (KernelMemory::InPlaceInput0 says the same of input 0 for every kernel of a definition).  The
    // kernel must read each element of that input before it writes the same element of output 0, and read nothing
    // else of it.  Asked after the layouts are chosen.
    virtual int in_place_input() const { return -1; }
};

// A kernel that can read or write the blocked channel layout (util/blocked_conv.h) besides NCHW.  When a graph is
// compiled it asks each such kernel which of its tensors may be blocked, chooses the layout of every value, and
// then calls set_layout once on each of them, also when nothing is blocked; until then every tensor is NCHW.
class BlockedLayoutKernel {
public:
    virtual ~BlockedLayoutKernel() = default;
    // Whether input i, or output 0, may be held blocked.  Input i and output 0 then have one layout when
    // same_layout_as_output(i) (a fused sum added to the output element by element).
    virtual bool reads_blocked(size_t input) const = 0;
    virtual bool writes_blocked() const = 0;
    virtual bool same_layout_as_output(size_t /*input*/) const { return false; }
    // blocked_inputs[i]: whether input i is blocked (inputs past its end are not).  Called before any run, on the
    // compiling thread.
    virtual void set_layout(const std::vector<bool>& blocked_inputs, bool blocked_output) = 0;
};

// A kernel that can do the work of the step producing one of its inputs as part of its own, so that the value
// between them never goes through memory (a depthwise convolution computing the pointwise one before it a few rows
// at a time).  The compiled graph offers it each producer whose one output only this kernel reads, after the
// layouts are chosen (producer_fusion.cc).
class ProducerFusingKernel {
public:
    virtual ~ProducerFusingKernel() = default;
    // Whether it can take over `producer`, the step making its input `input`.
    virtual bool can_absorb(size_t input, const Kernel& producer) const = 0;
    // Takes it over.  From then on compute() finds no input `input` but the producer's inputs, in order, from
    // index `first_producer_input` on.  Called before any run, on the compiling thread.
    virtual void absorb(size_t input, std::unique_ptr<Kernel> producer, size_t first_producer_input) = 0;
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const NodeInfo&)>;

// How a kernel may share memory with its inputs (used by the memory planner).
enum class KernelMemory {
    Normal,          // outputs get their own buffers
    InPlaceInput0,   // output 0 may reuse input 0's buffer when input 0 dies here and has the same byte size;
                     // the kernel must read element k before writing element k
    ConcatInPlace,   // Concat: the producers of the inputs may write them straight to their places in output 0
                     // (the planner's choice, concat_in_place.cc); the kernel copies only the inputs not already there
};

struct KernelDef {
    std::string domain;       // "" for ai.onnx
    std::string op_type;
    int since_version = 1;    // first opset this kernel implements
    int end_version = 0;      // last opset it implements; 0 = open-ended (the op's latest version)
    // Allowed element types per type-constrained input index: empty vector = any type.  Checked at capability
    // time against the declared input types (unknown types pass).
    std::vector<std::pair<size_t, std::vector<int32_t>>> input_types;
    KernelMemory memory = KernelMemory::Normal;
    KernelFactory factory;
    // Optional: why this node cannot run ("" when it can), judged from its attributes and declared shapes.  Asked at
    // capability time, so that a node the kernel would refuse is declined with the reason at session creation
    // instead of failing at its first run; it may throw KernelError, whose message is the reason.
    std::function<std::string(const NodeInfo&)> check = {};
};

class KernelRegistry {
public:
    void add(KernelDef def);
    // The kernel for this node, or nullptr with `why` filled (names op, opset and types).
    const KernelDef* find(const TessNodeView& node, std::string* why) const;
    size_t size() const { return defs_.size(); }

private:
    static std::string key(std::string_view domain, std::string_view op_type);

    std::vector<KernelDef> defs_;
    std::unordered_map<std::string, std::vector<size_t>> by_op_;  // key(domain, op_type) -> indices into defs_
};

// Convenience for registrations: a factory that constructs K from a NodeInfo.
template <typename K> KernelFactory make_factory() {
    return [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info); };
}

// Type lists used in registrations.
namespace types {
inline const std::vector<int32_t> kFloat{TESS_ELEMENT_FLOAT32};
inline const std::vector<int32_t> kFloats{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64};
inline const std::vector<int32_t> kNumeric{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT8,
                                           TESS_ELEMENT_INT16,  TESS_ELEMENT_INT32,   TESS_ELEMENT_INT64,
                                           TESS_ELEMENT_UINT8,  TESS_ELEMENT_UINT16,  TESS_ELEMENT_UINT32,
                                           TESS_ELEMENT_UINT64};
}  // namespace types

// Calls fn.template operator()<T>() with T the C++ type of `type`, for the listed element types.
// Usage:  dispatch<float, double, int64_t>(t.type, [&]<typename T>() { ... });
template <typename T> constexpr int32_t element_type_of();
template <> constexpr int32_t element_type_of<float>() { return TESS_ELEMENT_FLOAT32; }
template <> constexpr int32_t element_type_of<double>() { return TESS_ELEMENT_FLOAT64; }
template <> constexpr int32_t element_type_of<int8_t>() { return TESS_ELEMENT_INT8; }
template <> constexpr int32_t element_type_of<int16_t>() { return TESS_ELEMENT_INT16; }
template <> constexpr int32_t element_type_of<int32_t>() { return TESS_ELEMENT_INT32; }
template <> constexpr int32_t element_type_of<int64_t>() { return TESS_ELEMENT_INT64; }
template <> constexpr int32_t element_type_of<uint8_t>() { return TESS_ELEMENT_UINT8; }
template <> constexpr int32_t element_type_of<uint16_t>() { return TESS_ELEMENT_UINT16; }
template <> constexpr int32_t element_type_of<uint32_t>() { return TESS_ELEMENT_UINT32; }
template <> constexpr int32_t element_type_of<uint64_t>() { return TESS_ELEMENT_UINT64; }
template <> constexpr int32_t element_type_of<bool>() { return TESS_ELEMENT_BOOL; }

[[noreturn]] void throw_unsupported_type(std::string_view what, int32_t type);

template <typename... Ts, typename Fn> void dispatch(int32_t type, Fn&& fn) {
    bool done = false;
    ((!done && type == element_type_of<Ts>() ? (fn.template operator()<Ts>(), done = true) : false), ...);
    if (!done) throw_unsupported_type("dispatch", type);
}

}  // namespace tessera::cpu
