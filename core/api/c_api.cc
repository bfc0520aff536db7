// The consumer API: status, environment, options, sessions.  Every body catches everything.
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "common/status.h"
#include "session/session.h"
#include "tessera/tessera.h"
#include "tessera/version.h"

using namespace tessera;

namespace {

template <typename T> void require(const T* p, const char* what) {
    if (p == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "{} is NULL", what);
}

void fill_value_info(const IoInfo& io, TessValueInfo* out) {
    if (out->struct_size < sizeof(size_t)) fail(TESS_STATUS_INVALID_ARGUMENT, "TessValueInfo.struct_size is not set");
    TessValueInfo info{};
    info.struct_size = std::min(out->struct_size, sizeof(TessValueInfo));
    info.name = io.name.c_str();
    info.kind = io.type.kind;
    info.element_type = io.type.element_type;
    info.rank = io.type.has_shape ? static_cast<int64_t>(io.type.dims.size()) : -1;
    info.dims = io.type.dims.data();
    info.dim_params = io.dim_param_ptrs.data();
    std::memcpy(out, &info, info.struct_size);
}

// A profiling file in a directory that does not exist fails session creation, not the end of profiling.
void check_profile_path(const TessSessionOptions* options) {
    if (options == nullptr || options->profile_path.empty()) return;
    const std::filesystem::path parent = std::filesystem::path(options->profile_path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
        fail(TESS_STATUS_INVALID_ARGUMENT, "profiling file '{}': directory '{}' does not exist",
             options->profile_path, parent.string());
}

}  // namespace

extern "C" {

TESS_EXPORT const char* tess_version(void) { return TESS_VERSION_STRING; }

// A pointer that is not a live status of ours (released twice, or made by someone else) is never dereferenced.
TESS_EXPORT TessStatusCode tess_status_code(const TessStatus* status) {
    try {
        return checked_status_code(status);
    } catch (...) {
        return TESS_STATUS_INTERNAL;
    }
}
TESS_EXPORT const char* tess_status_message(const TessStatus* status) {
    try {
        return checked_status_message(status);
    } catch (...) {
        return "";
    }
}
TESS_EXPORT void tess_status_release(TessStatus* status) {
    try {
        release_status(status);
    } catch (...) {
    }
}

// ---- Environment ----

TESS_EXPORT TessStatus* tess_env_create(const TessEnvOptions* options, TessEnv** out_env) {
    return guarded([&] {
        require(out_env, "out_env");
        auto env = std::make_unique<TessEnv>();
        std::string extra;
        bool default_dirs = true;
        int32_t probe = TESS_PLUGIN_PROBE_AUTO;
        int64_t probe_timeout_ms = 0;
        if (options != nullptr) {
            if (TESS_HAS_FIELD(options, TessEnvOptions, log_level)) env->sink.level = options->log_level;
            if (TESS_HAS_FIELD(options, TessEnvOptions, log_callback)) env->sink.callback = options->log_callback;
            if (TESS_HAS_FIELD(options, TessEnvOptions, log_user_data)) env->sink.user_data = options->log_user_data;
            if (TESS_HAS_FIELD(options, TessEnvOptions, plugin_path) && options->plugin_path)
                extra = options->plugin_path;
            if (TESS_HAS_FIELD(options, TessEnvOptions, no_default_plugin_dirs))
                default_dirs = options->no_default_plugin_dirs == 0;
            if (TESS_HAS_FIELD(options, TessEnvOptions, plugin_probe_timeout_ms))
                probe_timeout_ms = options->plugin_probe_timeout_ms;
            if (TESS_HAS_FIELD(options, TessEnvOptions, plugin_probe)) probe = options->plugin_probe;
        }
        add_log_sink(&env->sink);
        env->plugins.set_probe_settings(ProbeSettings::resolve(probe, probe_timeout_ms));
        env->plugins.discover(default_dirs, extra);
        *out_env = env.release();
    });
}

TESS_EXPORT void tess_env_release(TessEnv* env) {
    try {
        delete env;
    } catch (...) {
    }
}

TESS_EXPORT TessStatus* tess_env_load_plugin(TessEnv* env, const char* path) {
    return guarded([&] {
        require(env, "env");
        require(path, "path");
        PluginRecord record = env->plugins.load(path);
        if (record.state == TESS_PLUGIN_SKIPPED)
            fail(record.abi_mismatch ? TESS_STATUS_ABI_MISMATCH : TESS_STATUS_INVALID_ARGUMENT,
                 "plugin '{}' skipped: {}", record.path, record.reason);
    });
}

namespace {

// Appends the report entries the cache does not have yet; entries already handed out are never replaced, so their
// strings stay valid while the env lives.  Call with report_mutex held.
void sync_report(const TessEnv* env) {
    std::vector<tessera::PluginRecord> report = env->plugins.report();
    for (size_t i = env->report_cache.size(); i < report.size(); ++i) env->report_cache.push_back(std::move(report[i]));
}

}  // namespace

TESS_EXPORT size_t tess_env_plugin_count(const TessEnv* env) {
    try {
        if (env == nullptr) return 0;
        std::lock_guard lock(env->report_mutex);
        sync_report(env);
        return env->report_cache.size();
    } catch (...) {
        return 0;
    }
}

TESS_EXPORT TessStatus* tess_env_plugin_info(const TessEnv* env, size_t index, TessPluginInfo* out) {
    return guarded([&] {
        require(env, "env");
        require(out, "out");
        std::lock_guard lock(env->report_mutex);
        sync_report(env);
        if (index >= env->report_cache.size())
            fail(TESS_STATUS_INVALID_ARGUMENT, "plugin index {} out of range ({})", index, env->report_cache.size());
        const PluginRecord& r = env->report_cache[index];
        TessPluginInfo info{};
        info.struct_size = std::min(out->struct_size, sizeof(TessPluginInfo));
        info.path = r.path.c_str();
        info.name = r.name.c_str();
        info.version = r.version.c_str();
        info.state = r.state;
        info.reason = r.reason.c_str();
        info.abi_version = r.abi_version;
        info.provider_count = r.provider_count;
        info.providers = r.providers.c_str();
        info.custom_op_count = r.custom_op_count;
        info.custom_ops = r.custom_ops.c_str();
        if (info.struct_size < sizeof(size_t)) fail(TESS_STATUS_INVALID_ARGUMENT, "TessPluginInfo.struct_size is not set");
        std::memcpy(out, &info, info.struct_size);
    });
}

TESS_EXPORT size_t tess_env_provider_count(const TessEnv* env) {
    try {
        if (env == nullptr) return 0;
        std::lock_guard lock(env->report_mutex);
        // The order may change as plugins load (CPU stays last); the names themselves are interned for good.
        env->provider_names.clear();
        for (const auto& p : env->plugins.providers())
            env->provider_names.push_back(env->name_pool.insert(p->name).first->c_str());
        return env->provider_names.size();
    } catch (...) {
        return 0;
    }
}

TESS_EXPORT const char* tess_env_provider_name(const TessEnv* env, size_t index) {
    if (env == nullptr) return nullptr;
    std::lock_guard lock(env->report_mutex);
    return index < env->provider_names.size() ? env->provider_names[index] : nullptr;
}

TESS_EXPORT TessStatus* tess_env_provider_stats(const TessEnv* env, const char* provider, TessProviderStats* out) {
    return guarded([&] {
        require(env, "env");
        require(provider, "provider");
        require(out, "out");
        if (out->struct_size < sizeof(size_t))
            fail(TESS_STATUS_INVALID_ARGUMENT, "TessProviderStats.struct_size is not set");
        const std::shared_ptr<const Provider> p = env->plugins.find(provider);
        if (p == nullptr) fail(TESS_STATUS_NOT_FOUND, "no usable provider '{}' in this environment", provider);
        const ProviderUsage& u = p->usage;
        TessProviderStats stats{};
        stats.struct_size = std::min(out->struct_size, sizeof(TessProviderStats));
        stats.live_instances = u.live_instances.load();
        stats.live_compiled = u.live_compiled.load();
        stats.live_allocations = u.live_allocations.load();
        stats.total_allocations = u.total_allocations.load();
        stats.copies_to_host = u.copies_to_host.load();
        stats.copies_from_host = u.copies_from_host.load();
        stats.bytes_to_host = u.bytes_to_host.load();
        stats.bytes_from_host = u.bytes_from_host.load();
        std::memcpy(out, &stats, stats.struct_size);
    });
}

// ---- Session options ----

TESS_EXPORT TessStatus* tess_session_options_create(TessSessionOptions** out) {
    return guarded([&] {
        require(out, "out");
        *out = new TessSessionOptions();
    });
}

TESS_EXPORT void tess_session_options_release(TessSessionOptions* options) { delete options; }

TESS_EXPORT TessStatus* tess_session_options_set_providers(TessSessionOptions* options, const char* const* names,
                                                           size_t count) {
    return guarded([&] {
        require(options, "options");
        if (count > 0) require(names, "names");
        std::vector<std::string> list;
        for (size_t i = 0; i < count; ++i) {
            require(names[i], "provider name");
            list.emplace_back(names[i]);
        }
        options->providers = std::move(list);
    });
}

TESS_EXPORT TessStatus* tess_session_options_set_intra_op_threads(TessSessionOptions* options, int32_t threads) {
    return guarded([&] {
        require(options, "options");
        if (threads < 0) fail(TESS_STATUS_INVALID_ARGUMENT, "thread count {} is negative", threads);
        // Far beyond any useful count; a typo (or 100000) must not start thousands of threads on a shared machine.
        constexpr int32_t kMaxThreads = 1024;
        if (threads > kMaxThreads)
            fail(TESS_STATUS_INVALID_ARGUMENT, "{} intra-op threads requested; at most {} are allowed (this machine has {})",
                 threads, kMaxThreads, std::thread::hardware_concurrency());
        options->intra_op_threads = threads;
    });
}

TESS_EXPORT TessStatus* tess_session_options_set_strict(TessSessionOptions* options, int32_t strict) {
    return guarded([&] {
        require(options, "options");
        options->strict = strict != 0;
    });
}

TESS_EXPORT TessStatus* tess_session_options_set_optimization_level(TessSessionOptions* options, int32_t level) {
    return guarded([&] {
        require(options, "options");
        options->optimization_level = level;
    });
}

TESS_EXPORT TessStatus* tess_session_options_set_profiling(TessSessionOptions* options, const char* file_path) {
    return guarded([&] {
        require(options, "options");
        options->profile_path = file_path != nullptr ? file_path : "";
    });
}

TESS_EXPORT TessStatus* tess_session_options_set_optimized_model_path(TessSessionOptions* options,
                                                                      const char* file_path) {
    return guarded([&] {
        require(options, "options");
        options->optimized_model_path = file_path != nullptr ? file_path : "";
    });
}

TESS_EXPORT TessStatus* tess_session_options_set_memory_limit(TessSessionOptions* options, uint64_t bytes) {
    return guarded([&] {
        require(options, "options");
        options->memory_limit_bytes = bytes;
    });
}

// ---- Sessions ----

TESS_EXPORT TessStatus* tess_session_create(TessEnv* env, const char* model_path, const TessSessionOptions* options,
                                            TessSession** out_session) {
    return guarded([&] {
        require(env, "env");
        require(model_path, "model_path");
        require(out_session, "out_session");
        TessSessionOptions defaults;
        check_profile_path(options);
        auto session = std::make_unique<TessSession>();
        const int64_t load_start = Profiler::now_ns();
        LoadedModel model = load_model_file(model_path);
        session->impl = std::make_unique<Session>(*env, std::move(model), options ? *options : defaults, load_start);
        *out_session = session.release();
    });
}

TESS_EXPORT TessStatus* tess_session_create_from_bytes(TessEnv* env, const void* data, size_t size,
                                                       const char* base_dir, const TessSessionOptions* options,
                                                       TessSession** out_session) {
    return guarded([&] {
        require(env, "env");
        require(out_session, "out_session");
        TessSessionOptions defaults;
        std::optional<std::filesystem::path> dir;
        if (base_dir != nullptr) dir = base_dir;
        check_profile_path(options);
        auto session = std::make_unique<TessSession>();
        const int64_t load_start = Profiler::now_ns();
        LoadedModel model = load_model_bytes(data, size, dir);
        session->impl = std::make_unique<Session>(*env, std::move(model), options ? *options : defaults, load_start);
        *out_session = session.release();
    });
}

TESS_EXPORT void tess_session_release(TessSession* session) {
    try {
        delete session;
    } catch (...) {
    }
}

TESS_EXPORT TessStatus* tess_session_end_profiling(TessSession* session, const char** path_out) {
    return guarded([&] {
        require(session, "session");
        require(path_out, "path_out");
        Profiler* profiler = session->impl->profiler();
        *path_out = profiler != nullptr ? profiler->end().c_str() : "";
    });
}

TESS_EXPORT TessStatus* tess_session_profiling_summary(TessSession* session, size_t max_rows, const char** text_out) {
    return guarded([&] {
        require(session, "session");
        require(text_out, "text_out");
        const Profiler* profiler = session->impl->profiler();
        if (profiler == nullptr) {
            *text_out = "";
            return;
        }
        std::string text = profiler->summary(max_rows);
        std::lock_guard lock(session->summaries_mutex);
        *text_out = session->summaries.emplace_back(std::move(text)).c_str();
    });
}

TESS_EXPORT size_t tess_session_input_count(const TessSession* s) { return s ? s->impl->inputs().size() : 0; }
TESS_EXPORT size_t tess_session_output_count(const TessSession* s) { return s ? s->impl->outputs().size() : 0; }

TESS_EXPORT TessStatus* tess_session_input_info(const TessSession* s, size_t index, TessValueInfo* out) {
    return guarded([&] {
        require(s, "session");
        require(out, "out");
        if (index >= s->impl->inputs().size()) fail(TESS_STATUS_INVALID_ARGUMENT, "input index {} out of range", index);
        fill_value_info(s->impl->inputs()[index], out);
    });
}

TESS_EXPORT int32_t tess_session_input_has_default(const TessSession* s, size_t index) {
    try {
        return s != nullptr && index < s->impl->inputs().size() &&
                       s->impl->input_has_default(s->impl->inputs()[index].name)
                   ? 1
                   : 0;
    } catch (...) {
        return 0;
    }
}

TESS_EXPORT TessStatus* tess_session_output_info(const TessSession* s, size_t index, TessValueInfo* out) {
    return guarded([&] {
        require(s, "session");
        require(out, "out");
        if (index >= s->impl->outputs().size()) fail(TESS_STATUS_INVALID_ARGUMENT, "output index {} out of range", index);
        fill_value_info(s->impl->outputs()[index], out);
    });
}

TESS_EXPORT size_t tess_session_partition_count(const TessSession* s) { return s ? s->impl->partitions().size() : 0; }

TESS_EXPORT TessStatus* tess_session_partition_info(const TessSession* s, size_t index, TessPartitionInfo* out) {
    return guarded([&] {
        require(s, "session");
        require(out, "out");
        const auto& parts = s->impl->partitions();
        if (index >= parts.size()) fail(TESS_STATUS_INVALID_ARGUMENT, "partition index {} out of range", index);
        const CompiledPartition& p = parts[index];
        TessPartitionInfo info{};
        info.struct_size = std::min(out->struct_size, sizeof(TessPartitionInfo));
        if (info.struct_size < sizeof(size_t)) fail(TESS_STATUS_INVALID_ARGUMENT, "TessPartitionInfo.struct_size is not set");
        info.provider = p.instance->provider().name.c_str();
        info.node_count = p.nodes.size();
        info.node_names = p.node_name_ptrs.data();
        info.node_ops = p.node_op_ptrs.data();
        info.input_count = p.inputs.size();
        info.inputs = p.input_ptrs.data();
        info.output_count = p.outputs.size();
        info.outputs = p.output_ptrs.data();
        info.copy_count = p.copy_count;
        info.memory_kind = p.memory_kind.c_str();
        info.input_copied = p.input_copied.data();
        std::memcpy(out, &info, info.struct_size);
    });
}

TESS_EXPORT TessStatus* tess_session_model_metadata(const TessSession* session, TessModelMetadata* out) {
    return guarded([&] {
        require(session, "session");
        require(out, "out");
        if (out->struct_size < sizeof(size_t))
            fail(TESS_STATUS_INVALID_ARGUMENT, "TessModelMetadata.struct_size is not set");
        const Session& s = *session->impl;
        const ModelMetadata& m = s.metadata();
        TessModelMetadata info{};
        info.struct_size = std::min(out->struct_size, sizeof(TessModelMetadata));
        info.producer_name = m.producer_name.c_str();
        info.producer_version = m.producer_version.c_str();
        info.domain = m.domain.c_str();
        info.description = m.description.c_str();
        info.graph_name = m.graph_name.c_str();
        info.graph_description = m.graph_description.c_str();
        info.model_version = m.model_version;
        info.custom_count = m.custom.size();
        info.custom_keys = s.metadata_keys().data();
        info.custom_values = s.metadata_values().data();
        std::memcpy(out, &info, info.struct_size);
    });
}

struct TessRunOptions {
    std::atomic<bool> terminate{false};
    int64_t timeout_ms = 0;
    std::string log_tag;       // API 0.2
    std::string profile_path;  // API 0.2
};

TESS_EXPORT TessStatus* tess_run_options_create(TessRunOptions** out) {
    return guarded([&] {
        require(out, "out");
        *out = new TessRunOptions;
    });
}

TESS_EXPORT void tess_run_options_release(TessRunOptions* options) { delete options; }

TESS_EXPORT TessStatus* tess_run_options_set_terminate(TessRunOptions* options, int32_t terminate) {
    return guarded([&] {
        require(options, "run options");
        options->terminate.store(terminate != 0);
    });
}

TESS_EXPORT int32_t tess_run_options_get_terminate(const TessRunOptions* options) {
    return options != nullptr && options->terminate.load() ? 1 : 0;
}

TESS_EXPORT TessStatus* tess_run_options_set_timeout_ms(TessRunOptions* options, int64_t timeout_ms) {
    return guarded([&] {
        require(options, "run options");
        if (timeout_ms < 0) fail(TESS_STATUS_INVALID_ARGUMENT, "timeout {} ms is negative", timeout_ms);
        options->timeout_ms = timeout_ms;
    });
}

TESS_EXPORT TessStatus* tess_run_options_set_log_tag(TessRunOptions* options, const char* tag) {
    return guarded([&] {
        require(options, "run options");
        options->log_tag = tag != nullptr ? tag : "";
    });
}

TESS_EXPORT const char* tess_run_options_get_log_tag(const TessRunOptions* options) {
    return options != nullptr ? options->log_tag.c_str() : "";
}

TESS_EXPORT TessStatus* tess_run_options_set_profile_path(TessRunOptions* options, const char* path) {
    return guarded([&] {
        require(options, "run options");
        options->profile_path = path != nullptr ? path : "";
    });
}

TESS_EXPORT TessStatus* tess_session_run(TessSession* session, const char* const* input_names,
                                         const TessValue* const* inputs, size_t input_count,
                                         const char* const* output_names, size_t output_count, TessValue** outputs) {
    return tess_session_run_with_options(session, nullptr, input_names, inputs, input_count, output_names,
                                         output_count, outputs);
}

TESS_EXPORT TessStatus* tess_session_run_with_options(TessSession* session, const TessRunOptions* run_options,
                                                      const char* const* input_names, const TessValue* const* inputs,
                                                      size_t input_count, const char* const* output_names,
                                                      size_t output_count, TessValue** outputs) {
    return guarded([&] {
        require(session, "session");
        if (input_count > 0) {
            require(input_names, "input_names");
            require(inputs, "inputs");
        }
        if (output_count > 0) require(outputs, "outputs");
        std::vector<std::string> in_names, out_names;
        std::vector<const TessValue*> in_values;
        for (size_t i = 0; i < input_count; ++i) {
            require(input_names[i], "input name");
            in_names.emplace_back(input_names[i]);
            in_values.push_back(inputs[i]);
        }
        if (output_names != nullptr) {
            for (size_t i = 0; i < output_count; ++i) {
                require(output_names[i], "output name");
                out_names.emplace_back(output_names[i]);
            }
        } else if (output_count != session->impl->outputs().size()) {
            fail(TESS_STATUS_INVALID_ARGUMENT, "output_names is NULL, so output_count must be {} (all outputs)",
                 session->impl->outputs().size());
        }
        RunControl control;
        if (run_options != nullptr) {
            control.terminate = &run_options->terminate;
            control.timeout_ms = run_options->timeout_ms;
            control.log_tag = &run_options->log_tag;
            control.profile_path = &run_options->profile_path;
            if (run_options->timeout_ms > 0)
                control.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_options->timeout_ms);
            control.check();
        }
        auto results = session->impl->run(in_names, in_values, out_names, run_options ? &control : nullptr);
        for (size_t i = 0; i < results.size() && i < output_count; ++i) outputs[i] = results[i].release();
    });
}

}  // extern "C"
