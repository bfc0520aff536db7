// Plugin discovery and loading (Boost.DLL), ABI negotiation, and the core-side handles of providers.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/dll/shared_library.hpp>

#include "common/value.h"
#include "plugins/probe.h"
#include "tessera/custom_op.h"
#include "tessera/provider.h"
#include "tessera/tessera.h"

namespace tessera {

// The core's table of host functions handed to every plugin.
const TessHostApi& host_api();

// What the core has asked of a provider through its table (tess_env_provider_stats): counted at the core's call
// sites, over every session of the environment.
struct ProviderUsage {
    std::atomic<uint64_t> live_instances{0}, live_compiled{0}, live_allocations{0}, total_allocations{0};
    std::atomic<uint64_t> copies_to_host{0}, copies_from_host{0}, bytes_to_host{0}, bytes_from_host{0};
};

// A provider offered by a loaded plugin.
struct Provider {
    std::string name;
    mutable ProviderUsage usage;
    const TessProviderApi* api = nullptr;
    std::shared_ptr<boost::dll::shared_library> library;  // keeps the code mapped while the provider is in use
    bool available = false;
    std::string unavailable_reason;
};

// A custom operator offered by a loaded library.
struct CustomOp {
    const TessCustomOpApi* api = nullptr;
    std::shared_ptr<boost::dll::shared_library> library;
    std::string label() const;  // "domain:name"
};

// One provider instance, owned jointly by a session and by every value allocated with its allocator (values may
// outlive the session that produced them).
class ProviderInstance {
public:
    static ProviderInstance* create(std::shared_ptr<const Provider> provider, const TessProviderOptions& options);
    void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
    void release();

    const Provider& provider() const { return *provider_; }
    const TessProviderApi& api() const { return *provider_->api; }
    TessProviderInstance* handle() const { return handle_; }
    const TessMemoryKind* memory_kind() const { return memory_; }
    bool is_host_memory() const;

    // A tensor in this provider's memory, allocated with its allocator; the value keeps the instance alive.
    ValuePtr allocate_tensor(int32_t element_type, std::vector<int64_t> dims);
    // Copies a host tensor into this provider's memory and back.
    ValuePtr copy_from_host(const TessValue& host_value);
    ValuePtr copy_to_host(const TessValue& value);
    // The provider's compile and release_compiled, counted in the provider's usage.
    TessStatus* compile(const TessGraphView* view, TessCompiled** out);
    void release_compiled(TessCompiled* compiled);

private:
    ProviderInstance() = default;
    ~ProviderInstance();
    static void free_tensor(void* instance, void* data);

    std::shared_ptr<const Provider> provider_;
    TessProviderInstance* handle_ = nullptr;
    const TessMemoryKind* memory_ = nullptr;
    std::atomic<int> refs_{1};
};

struct InstanceRef {
    ProviderInstance* ptr = nullptr;
    InstanceRef() = default;
    explicit InstanceRef(ProviderInstance* p) : ptr(p) {}
    InstanceRef(InstanceRef&& o) noexcept : ptr(o.ptr) { o.ptr = nullptr; }
    InstanceRef& operator=(InstanceRef&& o) noexcept { std::swap(ptr, o.ptr); return *this; }
    InstanceRef(const InstanceRef&) = delete;
    ~InstanceRef() { if (ptr) ptr->release(); }
    ProviderInstance* operator->() const { return ptr; }
    ProviderInstance* get() const { return ptr; }
};

struct PluginRecord {
    std::string path;
    std::string name;
    std::string version;
    int32_t state = TESS_PLUGIN_SKIPPED;
    std::string reason;
    uint32_t abi_version = 0;
    std::string providers;   // comma-separated
    std::string custom_ops;  // "domain:name", comma-separated
    size_t provider_count = 0;
    size_t custom_op_count = 0;
    bool abi_mismatch = false;  // skipped because the plugin's ABI range and the core's do not meet
};

// The plugins of one environment.
class PluginManager {
public:
    // How files are probed before they are loaded (probe.h); the default probes.  Set before discover().
    void set_probe_settings(const ProbeSettings& settings);
    // Discovery: <libdir>/tessera/plugins, then TESSERA_PLUGIN_PATH, then `extra_path` (colon-separated).
    void discover(bool default_dirs, const std::string& extra_path);
    // Loads one file (probed first); returns the record (also stored in the report).
    PluginRecord load(const std::filesystem::path& path);

    std::vector<PluginRecord> report() const;
    // Usable providers in default priority order: discovery order, with "cpu" last.
    std::vector<std::shared_ptr<const Provider>> providers() const;
    std::shared_ptr<const Provider> find(const std::string& name) const;  // NULL when not loaded
    std::vector<std::shared_ptr<const CustomOp>> custom_ops() const;

    static std::filesystem::path default_plugin_dir();  // <dir of libtessera>/tessera/plugins

private:
    // Appends the candidates of one plugin directory, sorted, to `out`.
    void list_directory(const std::filesystem::path& dir, std::vector<std::filesystem::path>& out) const;
    std::vector<PluginRecord> load_files(const std::vector<std::filesystem::path>& paths, bool explicit_load);
    // Loads a file whose probe went well (or that was not probed) into this process.
    PluginRecord load_in_process(PluginRecord record);
    // Completes a record, adds it to the report and logs a skipped file at `log_level`.
    PluginRecord record(PluginRecord record, int32_t state, std::string reason, int32_t log_level = TESS_LOG_INFO);

    mutable std::mutex mutex_;
    ProbeSettings probe_;
    std::vector<PluginRecord> records_;
    std::vector<std::shared_ptr<const Provider>> providers_;
    std::vector<std::shared_ptr<const CustomOp>> custom_ops_;
    std::vector<std::string> loaded_paths_;
};

}  // namespace tessera
