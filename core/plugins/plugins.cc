#include "plugins/plugins.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <boost/dll/runtime_symbol_info.hpp>
#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"
#include "exec/profiler.h"
#include "exec/run_control.h"
#include "plugins/contexts.h"

namespace fs = std::filesystem;

namespace tessera {

// ---- Host functions ------------------------------------------------------------------------------------------

namespace {

TessStatus* host_status_create(int32_t code, const char* message) {
    try {
        return make_status(static_cast<TessStatusCode>(code), message != nullptr ? message : "");
    } catch (...) {  // copying the message failed
        return make_status(TESS_STATUS_OUT_OF_MEMORY, {});
    }
}
// A plugin may hand these a status it got from another plugin, or one it made itself: checked, never trusted.
int32_t host_status_code(const TessStatus* s) {
    try {
        return checked_status_code(s);
    } catch (...) {
        return TESS_STATUS_INTERNAL;
    }
}
const char* host_status_message(const TessStatus* s) {
    try {
        return checked_status_message(s);
    } catch (...) {
        return "";
    }
}
void host_status_release(TessStatus* s) {
    try {
        release_status(s);
    } catch (...) {
    }
}

void host_log(int32_t level, const char* source, const char* message) {
    try {
        log_message(level, source != nullptr ? source : "plugin", message != nullptr ? message : "");
    } catch (...) {
    }
}

void host_capability_claim(TessCapabilityContext* ctx, size_t node_index) {
    try {
        if (ctx != nullptr && node_index < ctx->offered.size() && ctx->offered[node_index])
            ctx->claimed.push_back(node_index);
    } catch (...) {
    }
}

void host_capability_decline(TessCapabilityContext* ctx, size_t node_index, const char* reason) {
    try {
        if (ctx != nullptr && node_index < ctx->offered.size())
            ctx->declined[node_index] = reason != nullptr ? reason : "";
    } catch (...) {
    }
}

size_t host_compute_input_count(const TessComputeContext* ctx) { return ctx ? ctx->input_count : 0; }
const TessValue* host_compute_input(const TessComputeContext* ctx, size_t i) {
    return ctx && i < ctx->input_count ? ctx->inputs[i] : nullptr;
}
size_t host_compute_output_count(const TessComputeContext* ctx) { return ctx ? ctx->outputs->size() : 0; }

TessStatus* host_compute_allocate_output(TessComputeContext* ctx, size_t index, int32_t element_type,
                                         const int64_t* dims, size_t rank, TessValue** out) {
    return guarded([&] {
        if (ctx == nullptr || out == nullptr || (rank > 0 && dims == nullptr))
            fail(TESS_STATUS_INVALID_ARGUMENT, "allocate_output: NULL argument");
        if (index >= ctx->outputs->size())
            fail(TESS_STATUS_INVALID_ARGUMENT, "allocate_output: output {} of {}", index, ctx->outputs->size());
        std::vector<int64_t> shape(dims, dims + rank);
        ValuePtr value = element_type == TESS_ELEMENT_STRING ? make_host_tensor(element_type, shape)
                                                             : ctx->instance->allocate_tensor(element_type, shape);
        *out = value.get();
        (*ctx->outputs)[index] = std::move(value);
    });
}

TessStatus* host_value_create_tensor_view(int32_t element_type, const int64_t* dims, size_t rank, void* data,
                                         size_t byte_size, TessValue** out) {
    return guarded([&] {
        if (out == nullptr || (rank > 0 && dims == nullptr)) fail(TESS_STATUS_INVALID_ARGUMENT, "NULL argument");
        if (!is_valid_element_type(element_type) || element_type == TESS_ELEMENT_STRING)
            fail(TESS_STATUS_INVALID_ARGUMENT, "element type {} cannot view memory", element_type);
        std::vector<int64_t> shape(dims, dims + rank);
        size_t needed = storage_bytes(element_type, checked_element_count(shape.data(), shape.size()));
        if (byte_size < needed) fail(TESS_STATUS_INVALID_ARGUMENT, "{} bytes for a view that needs {}", byte_size, needed);
        *out = make_borrowed_tensor(element_type, std::move(shape), data, needed).release();
    });
}

void host_compile_release_constant(const TessGraphView* graph, size_t node_index, size_t input_index) {
    try {
        tessera::CompileReleases* active = tessera::active_compile_releases();
        if (active == nullptr || graph == nullptr || graph != active->view) return;  // not the compile in progress
        active->released.emplace_back(node_index, input_index);
        if (active->on_release) active->on_release(node_index, input_index);
    } catch (...) {
    }
}

void host_shape_set_output(TessShapeContext* ctx, size_t index, int32_t element_type, const int64_t* dims,
                           int64_t rank) {
    try {
        if (ctx == nullptr || index >= ctx->outputs.size()) return;
        auto& out = ctx->outputs[index];
        out.set = true;
        out.element_type = element_type;
        out.rank = rank;
        if (rank > 0 && dims != nullptr) out.dims.assign(dims, dims + rank);
    } catch (...) {
    }
}

TessStatus* host_compute_set_output(TessComputeContext* ctx, size_t index, TessValue* value) {
    ValuePtr owned(value);  // ownership passes even on error
    return guarded([&] {
        if (ctx == nullptr || value == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "set_output: NULL argument");
        if (index >= ctx->outputs->size())
            fail(TESS_STATUS_INVALID_ARGUMENT, "set_output: output {} of {}", index, ctx->outputs->size());
        (*ctx->outputs)[index] = std::move(owned);
    });
}

// Profiling (exec/profiler.h): the compute context of a profiled run carries its profiler.
int32_t host_compute_profiling(const TessComputeContext* ctx) {
    return ctx != nullptr && ctx->profile != nullptr && ctx->profile->profiler->active() ? 1 : 0;
}

void host_compute_profile_node(TessComputeContext* ctx, const char* node_name, const char* op_type,
                               const char* input_shapes, int64_t start_ns, int64_t end_ns) {
    try {
        if (ctx == nullptr || ctx->profile == nullptr) return;
        const ComputeProfile& p = *ctx->profile;
        p.profiler->node(p.run, p.partition, *p.provider, node_name, op_type, input_shapes, start_ns, end_ns);
    } catch (...) {
    }
}

int32_t host_compute_should_stop(const TessComputeContext* ctx) {
    try {
        return ctx != nullptr && ctx->control != nullptr && ctx->control->should_stop() ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

}  // namespace

}  // namespace tessera

// The value functions of the consumer API serve plugins as well (defined in api/c_api_values.cc).
extern "C" {
int32_t tess_value_kind(const TessValue*);
int32_t tess_value_element_type(const TessValue*);
size_t tess_tensor_rank(const TessValue*);
const int64_t* tess_tensor_dims(const TessValue*);
size_t tess_tensor_element_count(const TessValue*);
size_t tess_tensor_byte_size(const TessValue*);
void* tess_tensor_data(TessValue*);
const void* tess_tensor_const_data(const TessValue*);
TessStatus* tess_tensor_get_string(const TessValue*, size_t, const char**, size_t*);
TessStatus* tess_tensor_set_string(TessValue*, size_t, const char*, size_t);
size_t tess_sequence_length(const TessValue*);
const TessValue* tess_sequence_at(const TessValue*, size_t);
int32_t tess_optional_has_value(const TessValue*);
const TessValue* tess_optional_value(const TessValue*);
TessStatus* tess_value_create_tensor(int32_t, const int64_t*, size_t, TessValue**);
TessStatus* tess_value_create_sequence(int32_t, TessValue* const*, size_t, TessValue**);
TessStatus* tess_value_create_optional(int32_t, TessValue*, TessValue**);
void tess_value_release(TessValue*);
}

namespace tessera {

CompileReleases*& active_compile_releases() {
    thread_local CompileReleases* active = nullptr;
    return active;
}

const TessHostApi& host_api() {
    static const TessHostApi api = [] {
        TessHostApi a{};
        a.struct_size = sizeof(TessHostApi);
        a.abi_version_min = TESS_PLUGIN_ABI_VERSION_MIN;
        a.abi_version_max = TESS_PLUGIN_ABI_VERSION_MAX;
        a.status_create = host_status_create;
        a.status_code = host_status_code;
        a.status_message = host_status_message;
        a.status_release = host_status_release;
        a.log = host_log;
        a.value_kind = tess_value_kind;
        a.value_element_type = tess_value_element_type;
        a.tensor_rank = tess_tensor_rank;
        a.tensor_dims = tess_tensor_dims;
        a.tensor_element_count = tess_tensor_element_count;
        a.tensor_byte_size = tess_tensor_byte_size;
        a.tensor_data = tess_tensor_data;
        a.tensor_const_data = tess_tensor_const_data;
        a.tensor_get_string = tess_tensor_get_string;
        a.tensor_set_string = tess_tensor_set_string;
        a.sequence_length = tess_sequence_length;
        a.sequence_at = tess_sequence_at;
        a.optional_has_value = tess_optional_has_value;
        a.optional_value = tess_optional_value;
        a.value_create_tensor = tess_value_create_tensor;
        a.value_create_sequence = tess_value_create_sequence;
        a.value_create_optional = tess_value_create_optional;
        a.value_release = tess_value_release;
        a.capability_claim = host_capability_claim;
        a.capability_decline = host_capability_decline;
        a.compute_input_count = host_compute_input_count;
        a.compute_input = host_compute_input;
        a.compute_output_count = host_compute_output_count;
        a.compute_allocate_output = host_compute_allocate_output;
        a.compute_set_output = host_compute_set_output;
        a.value_create_tensor_view = host_value_create_tensor_view;
        a.shape_set_output = host_shape_set_output;
        a.compile_release_constant = host_compile_release_constant;
        a.compute_profiling = host_compute_profiling;
        a.compute_profile_node = host_compute_profile_node;
        a.compute_should_stop = host_compute_should_stop;
        return a;
    }();
    return api;
}

std::string CustomOp::label() const { return std::string(api->domain) + ":" + api->name; }

// ---- Provider instances ----------------------------------------------------------------------------------------

ProviderInstance* ProviderInstance::create(std::shared_ptr<const Provider> provider,
                                           const TessProviderOptions& options) {
    auto* instance = new ProviderInstance;
    instance->provider_ = std::move(provider);
    TessStatus* status = instance->api().create_instance(instance->api().provider_data, &options, &instance->handle_);
    if (status != nullptr) {
        std::string name = instance->provider_->name;
        instance->handle_ = nullptr;
        delete instance;
        throw_if_error(status, fmt::format("provider '{}' could not start", name));
    }
    instance->memory_ = instance->api().memory_kind ? instance->api().memory_kind(instance->handle_) : nullptr;
    instance->provider_->usage.live_instances.fetch_add(1, std::memory_order_relaxed);
    return instance;
}

ProviderInstance::~ProviderInstance() {
    if (handle_ == nullptr) return;
    if (api().release_instance != nullptr) api().release_instance(handle_);
    provider_->usage.live_instances.fetch_sub(1, std::memory_order_relaxed);
}

TessStatus* ProviderInstance::compile(const TessGraphView* view, TessCompiled** out) {
    TessStatus* status = api().compile(handle_, view, out);
    if (status == nullptr && *out != nullptr) provider_->usage.live_compiled.fetch_add(1, std::memory_order_relaxed);
    return status;
}

void ProviderInstance::release_compiled(TessCompiled* compiled) {
    if (compiled == nullptr) return;
    api().release_compiled(compiled);
    provider_->usage.live_compiled.fetch_sub(1, std::memory_order_relaxed);
}

void ProviderInstance::release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

bool ProviderInstance::is_host_memory() const {
    return memory_ == nullptr || std::strcmp(memory_->name, TESS_HOST_MEMORY_NAME) == 0;
}

void ProviderInstance::free_tensor(void* instance, void* data) {
    auto* self = static_cast<ProviderInstance*>(instance);
    self->api().free(self->handle_, data);
    self->provider_->usage.live_allocations.fetch_sub(1, std::memory_order_relaxed);
    self->release();
}

ValuePtr ProviderInstance::allocate_tensor(int32_t element_type, std::vector<int64_t> dims) {
    if (element_type == TESS_ELEMENT_STRING) fail(TESS_STATUS_INVALID_ARGUMENT, "string tensors live in host memory");
    if (!is_valid_element_type(element_type))
        fail(TESS_STATUS_INVALID_ARGUMENT, "unknown element type {}", element_type);
    size_t bytes = storage_bytes(element_type, checked_element_count(dims.data(), dims.size()));
    void* data = nullptr;
    throw_if_error(api().allocate(handle_, bytes == 0 ? 1 : bytes, 64, &data),
                   fmt::format("provider '{}' could not allocate {} bytes", provider_->name, bytes));
    if (data == nullptr) fail(TESS_STATUS_OUT_OF_MEMORY, "provider '{}' returned no memory", provider_->name);
    provider_->usage.live_allocations.fetch_add(1, std::memory_order_relaxed);
    provider_->usage.total_allocations.fetch_add(1, std::memory_order_relaxed);
    ValuePtr value = make_borrowed_tensor(element_type, std::move(dims), data, bytes);
    retain();
    value->deleter = free_tensor;
    value->deleter_data = this;
    value->memory = memory_;
    return value;
}

ValuePtr ProviderInstance::copy_from_host(const TessValue& host_value) {
    ValuePtr value = allocate_tensor(host_value.element_type, host_value.dims);
    provider_->usage.copies_from_host.fetch_add(1, std::memory_order_relaxed);
    provider_->usage.bytes_from_host.fetch_add(value->byte_size, std::memory_order_relaxed);
    if (value->byte_size == 0) return value;
    if (api().copy_from_host == nullptr) {
        std::memcpy(value->data, host_value.data, value->byte_size);
    } else {
        throw_if_error(api().copy_from_host(handle_, value->data, host_value.data, value->byte_size),
                       fmt::format("copy to provider '{}'", provider_->name));
    }
    return value;
}

ValuePtr ProviderInstance::copy_to_host(const TessValue& value) {
    ValuePtr host = make_host_tensor(value.element_type, value.dims);
    provider_->usage.copies_to_host.fetch_add(1, std::memory_order_relaxed);
    provider_->usage.bytes_to_host.fetch_add(value.byte_size, std::memory_order_relaxed);
    if (value.byte_size == 0) return host;
    if (api().copy_to_host == nullptr) {
        std::memcpy(host->data, value.data, value.byte_size);
    } else {
        throw_if_error(api().copy_to_host(handle_, host->data, value.data, value.byte_size),
                       fmt::format("copy from provider '{}'", provider_->name));
    }
    return host;
}

// ---- Discovery ---------------------------------------------------------------------------------------------

fs::path PluginManager::default_plugin_dir() {
    boost::system::error_code ec;
    boost::dll::fs::path self = boost::dll::this_line_location(ec);
    if (ec) return {};
    return fs::path(self.parent_path().string()) / "tessera" / "plugins";
}

void PluginManager::set_probe_settings(const ProbeSettings& settings) {
    std::lock_guard lock(mutex_);
    probe_ = settings;
}

void PluginManager::discover(bool default_dirs, const std::string& extra_path) {
    std::vector<fs::path> dirs;
    auto add_list = [&](const std::string& list) {
        size_t start = 0;
        while (start <= list.size()) {
            size_t end = list.find(':', start);
            if (end == std::string::npos) end = list.size();
            if (end > start) dirs.emplace_back(list.substr(start, end - start));
            start = end + 1;
        }
    };
    if (default_dirs) {
        fs::path own = default_plugin_dir();
        if (!own.empty()) dirs.push_back(own);
        if (const char* env = std::getenv("TESSERA_PLUGIN_PATH")) add_list(env);
    }
    add_list(extra_path);
    std::vector<fs::path> candidates;
    for (const auto& dir : dirs) list_directory(dir, candidates);
    load_files(candidates, false);
}

namespace {

bool looks_like_library_name(const std::string& name) {
    return (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) || name.find(".so.") != std::string::npos;
}

// Why a candidate cannot be a plugin, without loading it ("" when it may be one).  Never opens anything but a
// regular file, so a FIFO or a device in a plugin directory cannot block discovery.
std::string file_problem(const fs::path& path) {
    std::error_code ec;
    fs::file_status link = fs::symlink_status(path, ec);
    if (ec || !fs::exists(link)) return "file not found";
    fs::file_status target = fs::status(path, ec);
    if (fs::is_symlink(link) && (ec || !fs::exists(target))) {
        fs::path to = fs::read_symlink(path, ec);
        return fmt::format("a dangling symbolic link (to '{}')", to.string());
    }
    if (ec) return fmt::format("cannot be examined: {}", ec.message());
    if (fs::is_directory(target)) return "a directory, not a plugin file";
    if (!fs::is_regular_file(target)) return "not a regular file (a FIFO, socket or device)";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fmt::format("cannot be read: {}", std::strerror(errno));
    unsigned char magic[4] = {};
    ssize_t n = ::read(fd, magic, sizeof magic);
    ::close(fd);
    if (n != 4 || magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F')
        return "not a shared library (no ELF header)";
    return {};
}

}  // namespace

// Every entry of a plugin directory is a candidate the report lists, except hidden files (editor and package
// manager leftovers) and directories not named like a library (a plugin's own data, such as the CUDA provider's
// plugins/cuda/).
void PluginManager::list_directory(const fs::path& dir, std::vector<fs::path>& out) const {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        log_message(TESS_LOG_DEBUG, "plugins", fmt::format("plugin directory '{}' does not exist", dir.string()));
        return;
    }
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::string name = entry.path().filename().string();
        if (name.empty() || name[0] == '.') continue;
        std::error_code entry_ec;
        if (entry.is_directory(entry_ec) && !looks_like_library_name(name)) continue;
        entries.push_back(entry.path());
    }
    std::sort(entries.begin(), entries.end());  // deterministic load order
    out.insert(out.end(), entries.begin(), entries.end());
}

PluginRecord PluginManager::load(const fs::path& path) {
    std::vector<PluginRecord> records = load_files({path}, true);
    return records.empty() ? PluginRecord{} : records.front();
}

// Examines every file, probes those that may be plugins (all at once: probes run in parallel), then loads the ones
// whose probe went well, in order.  Files loaded before are left out of the report (a directory listed twice),
// except when `explicit_load` asks for one, which answers "already loaded".
std::vector<PluginRecord> PluginManager::load_files(const std::vector<fs::path>& paths, bool explicit_load) {
    struct Candidate {
        PluginRecord record;
        std::string problem;
        size_t probe = SIZE_MAX;  // index into the probed files
    };
    std::vector<Candidate> candidates;
    std::vector<fs::path> to_probe;
    std::vector<PluginRecord> results;
    for (const fs::path& path : paths) {
        Candidate c;
        std::error_code ec;
        fs::path absolute = fs::absolute(path, ec);
        if (ec) absolute = path;
        c.problem = file_problem(absolute);
        // What resolves is reported (and probed, and cached) as the file it resolves to; a dangling link under its
        // own name.
        fs::path canonical = fs::exists(absolute, ec) ? fs::weakly_canonical(absolute, ec) : absolute;
        c.record.path = (ec ? absolute : canonical).string();
        bool seen = std::any_of(candidates.begin(), candidates.end(),
                                [&](const Candidate& other) { return other.record.path == c.record.path; });
        {
            std::lock_guard lock(mutex_);
            seen = seen || std::find(loaded_paths_.begin(), loaded_paths_.end(), c.record.path) != loaded_paths_.end();
        }
        if (seen) {
            if (explicit_load) {
                c.record.reason = "already loaded";
                results.push_back(std::move(c.record));
            }
            continue;
        }
        if (c.problem.empty()) {
            c.probe = to_probe.size();
            to_probe.push_back(c.record.path);
        }
        candidates.push_back(std::move(c));
    }

    ProbeSettings settings;
    {
        std::lock_guard lock(mutex_);
        settings = probe_;
    }
    std::vector<ProbeVerdict> verdicts = probe_plugins(to_probe, settings);
    for (Candidate& c : candidates) {
        if (!c.problem.empty()) {
            results.push_back(record(std::move(c.record), TESS_PLUGIN_SKIPPED, c.problem));
        } else if (verdicts[c.probe].skip) {
            // A fresh fault is news worth a warning; a cached one was reported when it was found.
            results.push_back(record(std::move(c.record), TESS_PLUGIN_SKIPPED, verdicts[c.probe].reason,
                                     verdicts[c.probe].cached ? TESS_LOG_INFO : TESS_LOG_WARNING));
        } else {
            results.push_back(load_in_process(std::move(c.record)));
        }
    }
    return results;
}

PluginRecord PluginManager::record(PluginRecord record, int32_t state, std::string reason, int32_t log_level) {
    record.state = state;
    record.reason = std::move(reason);
    if (state == TESS_PLUGIN_SKIPPED)
        log_message(log_level, "plugins", fmt::format("skipped '{}': {}", record.path, record.reason));
    std::lock_guard lock(mutex_);
    records_.push_back(record);
    return record;
}

PluginRecord PluginManager::load_in_process(PluginRecord record) {
    auto finish = [&](int32_t state, std::string reason) { return this->record(record, state, std::move(reason)); };

    // When the last provider, custom op or value of this plugin lets go, its shutdown hook runs before the unload.
    auto shutdown = std::make_shared<void (*)(void)>(nullptr);
    std::shared_ptr<boost::dll::shared_library> library(new boost::dll::shared_library,
                                                        [shutdown](boost::dll::shared_library* lib) {
                                                            if (*shutdown != nullptr) {
                                                                try {
                                                                    (*shutdown)();
                                                                } catch (...) {
                                                                }
                                                            }
                                                            delete lib;
                                                        });
    try {
        library->load(boost::dll::fs::path(record.path),
                      boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
        return finish(TESS_PLUGIN_SKIPPED, fmt::format("not a loadable shared library: {}", e.what()));
    }
    if (!library->has(TESS_PLUGIN_ENTRY_NAME))
        return finish(TESS_PLUGIN_SKIPPED, fmt::format("no entry symbol '{}'", TESS_PLUGIN_ENTRY_NAME));

    auto entry = library->get<TessStatus*(const TessHostApi*, TessPluginExports*)>(TESS_PLUGIN_ENTRY_NAME);
    TessPluginExports exports{};
    exports.struct_size = sizeof(exports);
    TessStatus* status = nullptr;
    try {
        // Entry calls are serialized process-wide (provider.h): environments load plugins independently, and a
        // plugin initializes its global state in its first entry call, which must not overlap a second one.
        static std::mutex entry_mutex;
        std::lock_guard entry_lock(entry_mutex);
        status = entry(&host_api(), &exports);
    } catch (...) {
        return finish(TESS_PLUGIN_SKIPPED, "the entry function threw an exception");
    }
    if (TESS_HAS_FIELD(&exports, TessPluginExports, shutdown)) *shutdown = exports.shutdown;
    if (exports.name != nullptr) record.name = exports.name;
    if (exports.version != nullptr) record.version = exports.version;
    if (status != nullptr) {
        status = adopt_plugin_status(status, "its entry function");
        std::string reason = status->message;
        bool abi = status->code == TESS_STATUS_ABI_MISMATCH;
        release_status(status);
        record.abi_mismatch = abi;
        return finish(TESS_PLUGIN_SKIPPED, abi ? "ABI version out of range: " + reason : "init failed: " + reason);
    }
    if (exports.abi_version < TESS_PLUGIN_ABI_VERSION_MIN || exports.abi_version > TESS_PLUGIN_ABI_VERSION_MAX) {
        record.abi_mismatch = true;
        return finish(TESS_PLUGIN_SKIPPED,
                      fmt::format("ABI version out of range: the plugin chose {}, the core speaks {} to {}",
                                  exports.abi_version, TESS_PLUGIN_ABI_VERSION_MIN, TESS_PLUGIN_ABI_VERSION_MAX));
    }
    record.abi_version = exports.abi_version;
    if (exports.provider_count > 0 && exports.providers == nullptr)
        return finish(TESS_PLUGIN_SKIPPED, "init failed: provider table missing");

    std::vector<std::shared_ptr<const Provider>> offered;
    std::vector<std::string> names;
    std::string unavailable;
    for (size_t i = 0; i < exports.provider_count; ++i) {
        const TessProviderApi* api = exports.providers[i];
        if (api == nullptr || api->struct_size < offsetof(TessProviderApi, copy_from_host) + sizeof(void*) ||
            api->name == nullptr || api->create_instance == nullptr || api->get_capability == nullptr ||
            api->compile == nullptr || api->release_compiled == nullptr || api->compute == nullptr ||
            api->allocate == nullptr || api->free == nullptr)
            return finish(TESS_PLUGIN_SKIPPED, fmt::format("init failed: provider table {} is incomplete", i));
        auto provider = std::make_shared<Provider>();
        provider->name = api->name;
        provider->api = api;
        provider->library = library;
        provider->available = true;
        if (api->check_available != nullptr) {
            TessStatus* why = adopt_plugin_status(api->check_available(api->provider_data),
                                                  fmt::format("provider '{}' check_available", provider->name));
            if (why != nullptr) {
                provider->available = false;
                provider->unavailable_reason = why->message;
                release_status(why);
                unavailable += (unavailable.empty() ? "" : "; ") + provider->name + ": " + provider->unavailable_reason;
            }
        }
        if (find(provider->name) != nullptr)
            return finish(TESS_PLUGIN_SKIPPED, fmt::format("provider '{}' is already loaded", provider->name));
        names.push_back(provider->name);
        offered.push_back(std::move(provider));
    }
    record.providers = fmt::format("{}", fmt::join(names, ","));
    record.provider_count = names.size();

    std::vector<std::shared_ptr<const CustomOp>> ops;
    std::vector<std::string> op_names;
    size_t op_count = TESS_HAS_FIELD(&exports, TessPluginExports, custom_ops) ? exports.custom_op_count : 0;
    if (op_count > 0 && exports.custom_ops == nullptr)
        return finish(TESS_PLUGIN_SKIPPED, "init failed: custom-op table missing");
    for (size_t i = 0; i < op_count; ++i) {
        const TessCustomOpApi* api = exports.custom_ops[i];
        if (api == nullptr || api->struct_size < offsetof(TessCustomOpApi, compute) + sizeof(void*) ||
            api->domain == nullptr || api->name == nullptr || api->compute == nullptr || api->domain[0] == '\0' ||
            (api->input_count > 0 && api->inputs == nullptr) || (api->output_count > 0 && api->outputs == nullptr))
            return finish(TESS_PLUGIN_SKIPPED, fmt::format("init failed: custom-op table {} is incomplete", i));
        auto op = std::make_shared<CustomOp>(CustomOp{api, library});
        for (const auto& existing : custom_ops()) {
            bool same = std::strcmp(existing->api->domain, api->domain) == 0 && std::strcmp(existing->api->name, api->name) == 0;
            bool overlap = (existing->api->end_version == 0 || api->since_version <= existing->api->end_version) &&
                           (api->end_version == 0 || existing->api->since_version <= api->end_version);
            if (same && overlap)
                return finish(TESS_PLUGIN_SKIPPED, fmt::format("custom op {} is already provided", op->label()));
        }
        op_names.push_back(op->label());
        ops.push_back(std::move(op));
    }
    record.custom_ops = fmt::format("{}", fmt::join(op_names, ","));
    record.custom_op_count = op_names.size();
    if (offered.empty() && ops.empty()) return finish(TESS_PLUGIN_SKIPPED, "the plugin offers no provider and no operator");

    bool any_available = std::any_of(offered.begin(), offered.end(), [](const auto& p) { return p->available; });
    {
        std::lock_guard lock(mutex_);
        loaded_paths_.push_back(record.path);
        for (auto& p : offered) providers_.push_back(p);
        for (auto& op : ops) custom_ops_.push_back(op);
    }
    if (!offered.empty() && !any_available) return finish(TESS_PLUGIN_UNAVAILABLE, unavailable);
    return finish(TESS_PLUGIN_LOADED, unavailable);
}

std::vector<PluginRecord> PluginManager::report() const {
    std::lock_guard lock(mutex_);
    return records_;
}

std::vector<std::shared_ptr<const Provider>> PluginManager::providers() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<const Provider>> result;
    // Specialised providers first, general-purpose fallbacks last (stable within each group).
    auto fallback = [](const Provider& p) { return TESS_HAS_FIELD(p.api, TessProviderApi, is_fallback) && p.api->is_fallback; };
    for (const auto& p : providers_)
        if (p->available && !fallback(*p)) result.push_back(p);
    for (const auto& p : providers_)
        if (p->available && fallback(*p)) result.push_back(p);
    return result;
}

std::vector<std::shared_ptr<const CustomOp>> PluginManager::custom_ops() const {
    std::lock_guard lock(mutex_);
    return custom_ops_;
}

std::shared_ptr<const Provider> PluginManager::find(const std::string& name) const {
    std::lock_guard lock(mutex_);
    for (const auto& p : providers_)
        if (p->name == name) return p;
    return nullptr;
}

}  // namespace tessera
