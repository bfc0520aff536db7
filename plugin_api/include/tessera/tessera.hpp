// Tessera C++ API: a header-only C++17 layer over the C consumer API in tessera.h.
//
// Everything here is a thin owner or view of a C handle; no behaviour is added.  Errors become tessera::Error
// exceptions, handles are released by destructors, strings and arrays are copied into std::string/std::vector so
// that they outlive the object they came from.
//
//     tessera::Env env;                                         // discovers plugins
//     tessera::Session session(env, "model.onnx");
//     auto x = tessera::Value::tensor(TESS_ELEMENT_FLOAT32, {1, 3, 224, 224});
//     std::fill_n(x.data<float>(), x.element_count(), 0.5f);
//     std::vector<tessera::Value> y = session.run({{session.inputs()[0].name, x}});
//
// Lifetimes follow the C API: an Env outlives its Sessions; values returned by Session::run are owned by the caller.
#ifndef TESSERA_TESSERA_HPP_
#define TESSERA_TESSERA_HPP_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {

using ElementType = TessElementType;
using ValueKind = TessValueKind;
using StatusCode = TessStatusCode;

// ---- Errors ------------------------------------------------------------------------------------------------------

// Name of a status code ("INVALID_ARGUMENT", ...).
inline const char* status_code_name(StatusCode code) noexcept {
    switch (code) {
        case TESS_STATUS_OK: return "OK";
        case TESS_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case TESS_STATUS_NOT_FOUND: return "NOT_FOUND";
        case TESS_STATUS_INVALID_MODEL: return "INVALID_MODEL";
        case TESS_STATUS_NOT_IMPLEMENTED: return "NOT_IMPLEMENTED";
        case TESS_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
        case TESS_STATUS_RUNTIME_ERROR: return "RUNTIME_ERROR";
        case TESS_STATUS_UNAVAILABLE: return "UNAVAILABLE";
        case TESS_STATUS_ABI_MISMATCH: return "ABI_MISMATCH";
        case TESS_STATUS_INTERNAL: return "INTERNAL";
        case TESS_STATUS_CANCELLED: return "CANCELLED";
    }
    return "UNKNOWN";
}

// A failed Tessera call: the status code and its message (what() is the message alone).
class Error : public std::runtime_error {
public:
    Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    StatusCode code() const noexcept { return code_; }
    const char* code_name() const noexcept { return status_code_name(code_); }

private:
    StatusCode code_;
};

// Throws an Error for a non-NULL status, releasing the status first; does nothing for NULL (success).
inline void check(TessStatus* status) {
    if (status == nullptr) return;
    const StatusCode code = tess_status_code(status);
    std::string message = tess_status_message(status);
    tess_status_release(status);
    throw Error(code, message);
}

// ---- Small helpers -----------------------------------------------------------------------------------------------

inline std::string version() { return tess_version(); }

// ONNX name of an element type ("float", "int64", ...).
inline std::string element_type_name(ElementType type) { return tess_element_type_name(type); }

// Bytes of one element; 0 for strings and packed sub-byte types.
inline size_t element_size(ElementType type) { return tess_element_size(type); }

inline const char* value_kind_name(ValueKind kind) noexcept {
    switch (kind) {
        case TESS_VALUE_TENSOR: return "tensor";
        case TESS_VALUE_SEQUENCE: return "sequence";
        case TESS_VALUE_OPTIONAL: return "optional";
        case TESS_VALUE_MAP: return "map";
        case TESS_VALUE_UNKNOWN: break;
    }
    return "unknown";
}

namespace detail {

inline std::vector<std::string> copy_strings(const char* const* strings, size_t count) {
    std::vector<std::string> out;
    out.reserve(count);
    for (size_t i = 0; i < count; ++i) out.emplace_back(strings != nullptr && strings[i] != nullptr ? strings[i] : "");
    return out;
}

inline std::vector<std::string> split_commas(const char* text) {
    std::vector<std::string> out;
    if (text == nullptr) return out;
    std::string_view rest(text);
    while (!rest.empty()) {
        const size_t comma = rest.find(',');
        std::string_view item = rest.substr(0, comma);
        if (!item.empty()) out.emplace_back(item);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return out;
}

}  // namespace detail

// ---- Values ------------------------------------------------------------------------------------------------------

// A non-owning, read-only view of a value: what a sequence item or an optional's content is.  Valid while the value
// it points into is alive.  A Value converts to a ValueView implicitly.
class ValueView {
public:
    ValueView() = default;
    explicit ValueView(const TessValue* value) noexcept : ptr_(value) {}

    const TessValue* get() const noexcept { return ptr_; }
    explicit operator bool() const noexcept { return ptr_ != nullptr; }

    ValueKind kind() const { return static_cast<ValueKind>(tess_value_kind(ptr_)); }
    // Type of the tensor, or of the tensors inside a sequence/optional.
    ElementType element_type() const { return static_cast<ElementType>(tess_value_element_type(ptr_)); }
    bool is_tensor() const { return kind() == TESS_VALUE_TENSOR; }

    // Tensor shape; empty for a scalar (and for values that are not tensors).
    std::vector<int64_t> dims() const {
        const int64_t* d = tess_tensor_dims(ptr_);
        const size_t rank = tess_tensor_rank(ptr_);
        return d != nullptr ? std::vector<int64_t>(d, d + rank) : std::vector<int64_t>{};
    }
    size_t rank() const { return tess_tensor_rank(ptr_); }
    size_t element_count() const { return tess_tensor_element_count(ptr_); }
    size_t byte_size() const { return tess_tensor_byte_size(ptr_); }  // 0 for strings

    // The tensor's bytes; NULL for strings and non-tensors.
    const void* raw_data() const { return tess_tensor_const_data(ptr_); }
    // Typed element pointer.  T must have the element size of the tensor's type (uint16_t for float16/bfloat16,
    // uint8_t for bool and float8; packed sub-byte types are read through raw_data).
    template <typename T>
    const T* data() const {
        check_element_size(sizeof(T));
        return static_cast<const T*>(raw_data());
    }

    // String elements of a TESS_ELEMENT_STRING tensor.  The view is valid until the element changes.
    std::string_view string_at(size_t index) const {
        const char* bytes = nullptr;
        size_t length = 0;
        check(tess_tensor_get_string(ptr_, index, &bytes, &length));
        return std::string_view(bytes, length);
    }
    std::vector<std::string> strings() const {
        std::vector<std::string> out;
        const size_t n = element_count();
        out.reserve(n);
        for (size_t i = 0; i < n; ++i) out.emplace_back(string_at(i));
        return out;
    }

    // Sequence items (owned by the sequence).
    size_t sequence_length() const { return tess_sequence_length(ptr_); }
    ValueView item(size_t index) const {
        const TessValue* v = tess_sequence_at(ptr_, index);
        if (v == nullptr) throw Error(TESS_STATUS_INVALID_ARGUMENT, "sequence index out of range");
        return ValueView(v);
    }
    std::vector<ValueView> items() const {
        std::vector<ValueView> out;
        const size_t n = sequence_length();
        out.reserve(n);
        for (size_t i = 0; i < n; ++i) out.push_back(item(i));
        return out;
    }

    // Optional content: has_value() is false for an empty optional, whose value() is an empty view.
    bool has_value() const { return tess_optional_has_value(ptr_) != 0; }
    ValueView value() const { return ValueView(tess_optional_value(ptr_)); }

protected:
    void check_element_size(size_t size) const {
        const size_t expected = tess_element_size(element_type());
        if (!is_tensor() || expected != size)
            throw Error(TESS_STATUS_INVALID_ARGUMENT,
                        "element access of size " + std::to_string(size) + " on a " + value_kind_name(kind()) +
                            " of " + element_type_name(element_type()));
    }

    const TessValue* ptr_ = nullptr;
};

// An owned value (move-only).  Releasing happens in the destructor unless release() handed the handle away.
class Value : public ValueView {
public:
    Value() = default;
    // Takes ownership of `value`.
    explicit Value(TessValue* value) noexcept : ValueView(value) {}
    Value(Value&& other) noexcept : ValueView(other.release()) {}
    Value& operator=(Value&& other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    Value(const Value&) = delete;
    Value& operator=(const Value&) = delete;
    ~Value() { reset(); }

    // A zero-filled host tensor (strings: empty strings).
    static Value tensor(ElementType type, const std::vector<int64_t>& dims) {
        TessValue* out = nullptr;
        check(tess_value_create_tensor(type, dims.data(), dims.size(), &out));
        return Value(out);
    }
    // A tensor over caller memory, nothing copied: `data` must stay alive and unchanged while the value exists.
    static Value tensor_over(ElementType type, const std::vector<int64_t>& dims, void* data, size_t byte_size) {
        TessValue* out = nullptr;
        check(tess_value_create_tensor_over(type, dims.data(), dims.size(), data, byte_size, nullptr, nullptr, &out));
        return Value(out);
    }
    // A string tensor holding `strings` (row-major).
    static Value string_tensor(const std::vector<int64_t>& dims, const std::vector<std::string>& strings) {
        Value v = tensor(TESS_ELEMENT_STRING, dims);
        if (strings.size() != v.element_count())
            throw Error(TESS_STATUS_INVALID_ARGUMENT, "string_tensor: " + std::to_string(strings.size()) +
                                                          " strings for " + std::to_string(v.element_count()) +
                                                          " elements");
        for (size_t i = 0; i < strings.size(); ++i) v.set_string(i, strings[i]);
        return v;
    }
    // A sequence taking ownership of `items` (also when it throws); `type` types the sequence even when empty.
    static Value sequence(ElementType type, std::vector<Value> items) {
        // Ownership passes to the C call even when it fails, so the items are released from their owners first.
        std::vector<TessValue*> handles;
        handles.reserve(items.size());
        for (Value& item : items) handles.push_back(item.release());
        TessValue* out = nullptr;
        check(tess_value_create_sequence(type, handles.data(), handles.size(), &out));
        return Value(out);
    }
    // An optional taking ownership of `inner` (also when it throws); an empty `inner` makes an empty optional of a
    // `type` tensor.
    static Value optional(ElementType type, Value inner = Value()) {
        TessValue* out = nullptr;
        check(tess_value_create_optional(type, inner.release(), &out));  // owns `inner` even when it fails
        return Value(out);
    }

    TessValue* get() noexcept { return mutable_handle(); }
    const TessValue* get() const noexcept { return ptr_; }
    // Gives up ownership and returns the handle.
    TessValue* release() noexcept {
        TessValue* v = mutable_handle();
        ptr_ = nullptr;
        return v;
    }
    void reset(TessValue* value = nullptr) noexcept {
        tess_value_release(mutable_handle());
        ptr_ = value;
    }

    using ValueView::data;
    using ValueView::raw_data;
    void* raw_data() { return tess_tensor_data(mutable_handle()); }
    template <typename T>
    T* data() {
        check_element_size(sizeof(T));
        return static_cast<T*>(raw_data());
    }
    void set_string(size_t index, std::string_view text) {
        check(tess_tensor_set_string(mutable_handle(), index, text.data(), text.size()));
    }

private:
    // The C API hands out mutable handles for owned values; the base class stores it as const.
    TessValue* mutable_handle() const noexcept { return const_cast<TessValue*>(ptr_); }
};

// ---- Environment -------------------------------------------------------------------------------------------------

using LogFunction = std::function<void(TessLogLevel level, const char* message)>;

struct EnvOptions {
    TessLogLevel log_level = TESS_LOG_WARNING;
    LogFunction log;                       // empty: warnings and errors go to stderr
    std::string plugin_path;               // colon-separated extra plugin directories
    bool no_default_plugin_dirs = false;   // only plugin_path and explicit loads
    TessPluginProbe plugin_probe = TESS_PLUGIN_PROBE_AUTO;  // probe plugin files in a child process first
    int64_t plugin_probe_timeout_ms = 0;   // 0: TESSERA_PLUGIN_PROBE_TIMEOUT_MS or 10 s
};

// One entry of the plugin report.
struct PluginInfo {
    std::string path;
    std::string name;     // "" when unknown
    std::string version;  // "" when unknown
    TessPluginState state = TESS_PLUGIN_SKIPPED;
    std::string reason;   // "" for loaded plugins
    uint32_t abi_version = 0;
    std::vector<std::string> providers;
    std::vector<std::string> custom_ops;  // "domain:name" of the custom operators it contributed

    const char* state_name() const noexcept {
        switch (state) {
            case TESS_PLUGIN_LOADED: return "loaded";
            case TESS_PLUGIN_UNAVAILABLE: return "unavailable";
            case TESS_PLUGIN_SKIPPED: return "skipped";
        }
        return "unknown";
    }
};

class Env {
public:
    explicit Env(const EnvOptions& options = {}) {
        TessEnvOptions c{};
        c.struct_size = sizeof(c);
        c.log_level = options.log_level;
        if (options.log) {
            log_ = std::make_unique<LogFunction>(options.log);
            c.log_callback = &Env::forward_log;
            c.log_user_data = log_.get();
        }
        c.plugin_path = options.plugin_path.empty() ? nullptr : options.plugin_path.c_str();
        c.no_default_plugin_dirs = options.no_default_plugin_dirs ? 1 : 0;
        c.plugin_probe = options.plugin_probe;
        c.plugin_probe_timeout_ms = options.plugin_probe_timeout_ms;
        check(tess_env_create(&c, &env_));
    }
    Env(Env&& other) noexcept : env_(std::exchange(other.env_, nullptr)), log_(std::move(other.log_)) {}
    Env& operator=(Env&& other) noexcept {
        if (this != &other) {
            tess_env_release(env_);
            env_ = std::exchange(other.env_, nullptr);
            log_ = std::move(other.log_);
        }
        return *this;
    }
    Env(const Env&) = delete;
    Env& operator=(const Env&) = delete;
    ~Env() { tess_env_release(env_); }

    TessEnv* get() const noexcept { return env_; }

    // Loads one plugin file; throws with the reason when it was skipped (the report records it either way).
    void load_plugin(const std::string& path) { check(tess_env_load_plugin(env_, path.c_str())); }

    std::vector<PluginInfo> plugins() const {
        std::vector<PluginInfo> out;
        const size_t n = tess_env_plugin_count(env_);
        for (size_t i = 0; i < n; ++i) {
            TessPluginInfo c{};
            c.struct_size = sizeof(c);
            check(tess_env_plugin_info(env_, i, &c));
            PluginInfo info;
            info.path = c.path != nullptr ? c.path : "";
            info.name = c.name != nullptr ? c.name : "";
            info.version = c.version != nullptr ? c.version : "";
            info.state = static_cast<TessPluginState>(c.state);
            info.reason = c.reason != nullptr ? c.reason : "";
            info.abi_version = c.abi_version;
            info.providers = detail::split_commas(c.providers);
            info.custom_ops = detail::split_commas(c.custom_ops);
            out.push_back(std::move(info));
        }
        return out;
    }

    // Usable execution providers, default priority order (CPU last).
    std::vector<std::string> providers() const {
        std::vector<std::string> out;
        const size_t n = tess_env_provider_count(env_);
        for (size_t i = 0; i < n; ++i) {
            const char* name = tess_env_provider_name(env_, i);
            out.emplace_back(name != nullptr ? name : "");
        }
        return out;
    }

private:
    // Exceptions must not cross the C boundary, so a throwing log function is silenced.
    static void forward_log(void* user_data, int32_t level, const char* message) {
        try {
            const LogFunction& log = *static_cast<LogFunction*>(user_data);
            log(static_cast<TessLogLevel>(level), message != nullptr ? message : "");
        } catch (...) {
        }
    }

    TessEnv* env_ = nullptr;
    std::unique_ptr<LogFunction> log_;  // heap-held so its address survives moves of the Env
};

// ---- Session options ---------------------------------------------------------------------------------------------

// Setters return *this so that options read as one expression:
//     tessera::SessionOptions().providers({"cuda", "cpu"}).strict(true)
class SessionOptions {
public:
    SessionOptions() { check(tess_session_options_create(&options_)); }
    SessionOptions(SessionOptions&& other) noexcept : options_(std::exchange(other.options_, nullptr)) {}
    SessionOptions& operator=(SessionOptions&& other) noexcept {
        if (this != &other) {
            tess_session_options_release(options_);
            options_ = std::exchange(other.options_, nullptr);
        }
        return *this;
    }
    SessionOptions(const SessionOptions&) = delete;
    SessionOptions& operator=(const SessionOptions&) = delete;
    ~SessionOptions() { tess_session_options_release(options_); }

    const TessSessionOptions* get() const noexcept { return options_; }

    // Provider priority list, most preferred first; empty: every usable provider, CPU last.
    SessionOptions& providers(const std::vector<std::string>& names) {
        std::vector<const char*> c;
        c.reserve(names.size());
        for (const std::string& n : names) c.push_back(n.c_str());
        check(tess_session_options_set_providers(options_, c.data(), c.size()));
        return *this;
    }
    // Intra-op threads; 0 means one per core.
    SessionOptions& intra_op_threads(int threads) {
        check(tess_session_options_set_intra_op_threads(options_, threads));
        return *this;
    }
    // Unclaimed nodes and unusable listed providers become errors instead of fallbacks.
    SessionOptions& strict(bool on) {
        check(tess_session_options_set_strict(options_, on ? 1 : 0));
        return *this;
    }
    // 0 disables the graph optimizer, 1 (default) runs every pass.
    SessionOptions& optimization_level(int level) {
        check(tess_session_options_set_optimization_level(options_, level));
        return *this;
    }
    // Profiling into a Chrome trace file (Perfetto opens it), written by Session::end_profiling or when the session
    // is released; empty: off.
    SessionOptions& profiling(const std::string& file_path) {
        check(tess_session_options_set_profiling(options_, file_path.c_str()));
        return *this;
    }
    // Saves the graph the optimizer produced (before partitioning) to this ONNX file at session creation, as
    // onnxruntime's optimized_model_filepath; empty: off.  A file that cannot be written fails session creation.
    SessionOptions& optimized_model_path(const std::string& file_path) {
        check(tess_session_options_set_optimized_model_path(options_, file_path.c_str()));
        return *this;
    }

private:
    TessSessionOptions* options_ = nullptr;
};

// ---- Sessions ----------------------------------------------------------------------------------------------------

// A graph input or output.
struct ValueInfo {
    std::string name;
    ValueKind kind = TESS_VALUE_UNKNOWN;
    ElementType element_type = TESS_ELEMENT_UNDEFINED;  // of the tensor, or of the tensors inside
    bool has_shape = false;                 // false when the rank is unknown
    std::vector<int64_t> dims;              // -1 for a dimension that is not fixed
    std::vector<std::string> dim_params;    // symbolic dimension names, "" where none
};

// One compiled partition of the plan, in execution order.
struct PartitionInfo {
    std::string provider;
    std::vector<std::string> node_names;  // "op_type#index" for unnamed nodes
    std::vector<std::string> node_ops;    // "domain:op_type" or "op_type"
    std::vector<std::string> inputs;      // values read from other partitions or the caller
    std::vector<std::string> outputs;     // values that leave the partition
    size_t copy_count = 0;                // tensors copied in from another memory kind for it on every run
    std::string memory_kind;              // where its provider computes ("cpu": host memory)
    std::vector<bool> input_copied;       // per input: reaches the partition through a copy
};

// Stops runs early (tess_run_options_*): set_terminate(true) from any thread stops the runs using these options with a
// CANCELLED error; a timeout stops a run that takes longer.  Must outlive the runs that use it.
class RunOptions {
public:
    RunOptions() { check(tess_run_options_create(&options_)); }
    RunOptions(const RunOptions&) = delete;
    RunOptions& operator=(const RunOptions&) = delete;
    ~RunOptions() { tess_run_options_release(options_); }

    void set_terminate(bool terminate) { check(tess_run_options_set_terminate(options_, terminate ? 1 : 0)); }
    bool terminate() const { return tess_run_options_get_terminate(options_) != 0; }
    void set_timeout_ms(int64_t timeout_ms) { check(tess_run_options_set_timeout_ms(options_, timeout_ms)); }
    const TessRunOptions* get() const noexcept { return options_; }

private:
    TessRunOptions* options_ = nullptr;
};

class Session {
public:
    // Loads, optimizes, partitions and compiles a model file.  `env` must outlive the session.
    Session(Env& env, const std::string& model_path, const SessionOptions* options = nullptr) {
        check(tess_session_create(env.get(), model_path.c_str(), options != nullptr ? options->get() : nullptr,
                                  &session_));
    }
    // From serialized ModelProto bytes (copied); external data resolves against `base_dir` (empty: forbidden).
    static Session from_bytes(Env& env, const void* data, size_t size, const std::string& base_dir = "",
                              const SessionOptions* options = nullptr) {
        TessSession* s = nullptr;
        check(tess_session_create_from_bytes(env.get(), data, size, base_dir.empty() ? nullptr : base_dir.c_str(),
                                             options != nullptr ? options->get() : nullptr, &s));
        return Session(s);
    }
    Session(Session&& other) noexcept : session_(std::exchange(other.session_, nullptr)) {}
    Session& operator=(Session&& other) noexcept {
        if (this != &other) {
            tess_session_release(session_);
            session_ = std::exchange(other.session_, nullptr);
        }
        return *this;
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    ~Session() { tess_session_release(session_); }

    TessSession* get() const noexcept { return session_; }

    // Graph inputs the caller feeds, and graph outputs, in model order.
    std::vector<ValueInfo> inputs() const {
        return describe(tess_session_input_count(session_), tess_session_input_info);
    }
    std::vector<ValueInfo> outputs() const {
        return describe(tess_session_output_count(session_), tess_session_output_info);
    }

    std::vector<PartitionInfo> partitions() const {
        std::vector<PartitionInfo> out;
        const size_t n = tess_session_partition_count(session_);
        for (size_t i = 0; i < n; ++i) {
            TessPartitionInfo c{};
            c.struct_size = sizeof(c);
            check(tess_session_partition_info(session_, i, &c));
            PartitionInfo p;
            p.provider = c.provider != nullptr ? c.provider : "";
            p.node_names = detail::copy_strings(c.node_names, c.node_count);
            p.node_ops = detail::copy_strings(c.node_ops, c.node_count);
            p.inputs = detail::copy_strings(c.inputs, c.input_count);
            p.outputs = detail::copy_strings(c.outputs, c.output_count);
            p.copy_count = c.copy_count;
            if (TESS_HAS_FIELD(&c, TessPartitionInfo, input_copied) && c.input_copied != nullptr) {
                p.memory_kind = c.memory_kind != nullptr ? c.memory_kind : "";
                p.input_copied.assign(c.input_copied, c.input_copied + c.input_count);
            }
            out.push_back(std::move(p));
        }
        return out;
    }

    // Runs with inputs matched by name.  `output_names` empty: every graph output, in model order.
    std::vector<Value> run(const std::vector<std::string>& input_names, const std::vector<ValueView>& inputs,
                           const std::vector<std::string>& output_names = {}) const {
        if (input_names.size() != inputs.size())
            throw Error(TESS_STATUS_INVALID_ARGUMENT, "run: " + std::to_string(input_names.size()) + " names for " +
                                                          std::to_string(inputs.size()) + " inputs");
        std::vector<const TessValue*> handles;
        handles.reserve(inputs.size());
        for (const ValueView& v : inputs) handles.push_back(v.get());
        return run_handles(input_names, handles, output_names);
    }
    // The same for a vector of owned values.  A template only so that a braced list (`run({"x"}, {x})`) picks the
    // overload above instead of being ambiguous: braced lists never deduce a template argument.
    template <typename V, typename = std::enable_if_t<std::is_same_v<V, Value>>>
    std::vector<Value> run(const std::vector<std::string>& input_names, const std::vector<V>& inputs,
                           const std::vector<std::string>& output_names = {}) const {
        return run(input_names, std::vector<ValueView>(inputs.begin(), inputs.end()), output_names);
    }
    std::vector<Value> run(const std::map<std::string, ValueView>& inputs,
                           const std::vector<std::string>& output_names = {}) const {
        std::vector<std::string> names;
        std::vector<const TessValue*> handles;
        for (const auto& [name, value] : inputs) {
            names.push_back(name);
            handles.push_back(value.get());
        }
        return run_handles(names, handles, output_names);
    }
    // As run(inputs, output_names), stopped early as `options` say.
    std::vector<Value> run_with(const RunOptions& options, const std::map<std::string, ValueView>& inputs,
                                const std::vector<std::string>& output_names = {}) const {
        std::vector<std::string> names;
        std::vector<const TessValue*> handles;
        for (const auto& [name, value] : inputs) {
            names.push_back(name);
            handles.push_back(value.get());
        }
        return run_handles(names, handles, output_names, options.get());
    }

    // Ends profiling and writes the trace; returns its path ("" when the session is not profiled).  Later calls
    // return the same path.
    std::string end_profiling() {
        const char* path = nullptr;
        check(tess_session_end_profiling(session_, &path));
        return path != nullptr ? path : "";
    }
    // Node time by operator type so far (at most `max_rows` op types); "" when the session is not profiled.
    std::string profiling_summary(size_t max_rows = 15) const {
        const char* text = nullptr;
        check(tess_session_profiling_summary(session_, max_rows, &text));
        return text != nullptr ? text : "";
    }

private:
    explicit Session(TessSession* session) noexcept : session_(session) {}

    using InfoFn = TessStatus* (*)(const TessSession*, size_t, TessValueInfo*);
    std::vector<ValueInfo> describe(size_t count, InfoFn info_fn) const {
        std::vector<ValueInfo> out;
        for (size_t i = 0; i < count; ++i) {
            TessValueInfo c{};
            c.struct_size = sizeof(c);
            check(info_fn(session_, i, &c));
            ValueInfo info;
            info.name = c.name != nullptr ? c.name : "";
            info.kind = static_cast<ValueKind>(c.kind);
            info.element_type = static_cast<ElementType>(c.element_type);
            info.has_shape = c.rank >= 0;
            if (info.has_shape && c.dims != nullptr) info.dims.assign(c.dims, c.dims + c.rank);
            if (info.has_shape) info.dim_params = detail::copy_strings(c.dim_params, static_cast<size_t>(c.rank));
            out.push_back(std::move(info));
        }
        return out;
    }

    std::vector<Value> run_handles(const std::vector<std::string>& input_names,
                                   const std::vector<const TessValue*>& inputs,
                                   const std::vector<std::string>& output_names,
                                   const TessRunOptions* options = nullptr) const {
        std::vector<std::string> all_outputs;
        const std::vector<std::string>* wanted = &output_names;
        if (output_names.empty()) {
            for (ValueInfo& info : outputs()) all_outputs.push_back(std::move(info.name));
            wanted = &all_outputs;
        }
        std::vector<const char*> in_names, out_names;
        for (const std::string& n : input_names) in_names.push_back(n.c_str());
        for (const std::string& n : *wanted) out_names.push_back(n.c_str());
        std::vector<TessValue*> results(out_names.size(), nullptr);
        check(tess_session_run_with_options(session_, options, in_names.data(), inputs.data(), inputs.size(),
                                            out_names.data(), out_names.size(), results.data()));
        std::vector<Value> out;
        out.reserve(results.size());
        for (TessValue* v : results) out.emplace_back(v);
        return out;
    }

    TessSession* session_ = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_TESSERA_HPP_
