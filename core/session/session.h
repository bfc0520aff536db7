// Environment and session: the objects behind TessEnv and TessSession.
#pragma once

#include <deque>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "exec/executor.h"
#include "exec/run_control.h"
#include "exec/profiler.h"
#include "model/loader.h"
#include "plugins/plugins.h"

struct TessEnv {
    tessera::LogSink sink;
    tessera::PluginManager plugins;
    // The strings tess_env_plugin_info and tess_env_provider_name hand out live here until the env is released, as
    // tessera.h promises: the report only grows (new entries are appended, none replaced; a deque never moves its
    // elements), and provider names are interned once.
    mutable std::mutex report_mutex;
    mutable std::deque<tessera::PluginRecord> report_cache;
    mutable std::set<std::string> name_pool;
    mutable std::vector<const char*> provider_names;  // current default priority order, into name_pool

    ~TessEnv() { tessera::remove_log_sink(&sink); }
};

struct TessSessionOptions {
    std::vector<std::string> providers;
    int32_t intra_op_threads = 0;
    bool strict = false;
    int32_t optimization_level = 3;  // TESS_OPTIMIZATION_ALL
    std::string profile_path;        // the trace file; "" when profiling is off (exec/profiler.h)
    std::string optimized_model_path;  // where the optimized graph is saved (model/save.h); "" when not saved
    uint64_t memory_limit_bytes = 0;   // per provider instance (TessProviderOptions::memory_limit_bytes); 0: none
};

namespace tessera {

struct IoInfo {
    std::string name;
    TypeInfo type;
    std::vector<const char*> dim_param_ptrs;
};

class Session {
public:
    // `load_start_ns` (Profiler::now_ns): when loading `model` began, for the profile's "load" phase; 0: unknown.
    Session(TessEnv& env, LoadedModel model, const TessSessionOptions& options, int64_t load_start_ns = 0);
    const ModelMetadata& metadata() const { return metadata_; }
    ~Session();

    // `control` (may be NULL): what the caller's run options ask; it can stop the run early with a CANCELLED error,
    // tag the messages logged meanwhile, and profile this run into a trace of its own.
    std::vector<ValuePtr> run(const std::vector<std::string>& input_names, const std::vector<const TessValue*>& inputs,
                              const std::vector<std::string>& output_names,
                              const RunControl* control = nullptr) const;

    const std::vector<IoInfo>& inputs() const { return inputs_; }
    // Whether graph input `name` has an initializer: a default the caller may override or leave out.
    bool input_has_default(const std::string& name) const { return graph_.initializers.count(name) != 0; }
    const std::vector<IoInfo>& outputs() const { return outputs_; }
    const std::vector<CompiledPartition>& partitions() const { return executor_->partitions(); }
    // The session's profiler (TessSessionOptions::profile_path); NULL when profiling is off.
    Profiler* profiler() const { return profiler_.get(); }

private:
    // The run itself, recorded into `profiler` (may be NULL).
    std::vector<ValuePtr> run_graph(const std::vector<std::string>& input_names,
                                    const std::vector<const TessValue*>& inputs,
                                    const std::vector<std::string>& output_names, const RunControl* control,
                                    Profiler* profiler) const;
    void check_input(const IoInfo& info, const TessValue& value) const;
    void check_output(const IoInfo& info, const TessValue& value) const;
    void infer_custom_op_types();
    void start_profiling(const TessSessionOptions& options, int64_t load_start_ns);
    int64_t profile_phase(const char* name, int64_t start_ns, const std::string& args_json);

    Graph graph_;
    std::vector<std::shared_ptr<const CustomOp>> custom_ops_;  // keeps the libraries loaded
    std::vector<const TessCustomOpApi*> custom_op_apis_;
    std::vector<InstanceRef> instances_;  // priority order
    std::unique_ptr<Executor> executor_;
    std::vector<IoInfo> inputs_, outputs_;
    ModelMetadata metadata_;
    std::vector<const char*> metadata_keys_, metadata_values_;  // behind TessModelMetadata

public:
    // The pointers of TessModelMetadata, valid for the session's lifetime.
    const std::vector<const char*>& metadata_keys() const { return metadata_keys_; }
    const std::vector<const char*>& metadata_values() const { return metadata_values_; }

private:

    // Profiling: NULL when off.  It refers to nothing else here; destroyed first, it writes the trace if end() has not.
    std::unique_ptr<Profiler> profiler_;
    int64_t partition_end_ns_ = 0;  // when the last partitioning ended: the start of the "compile" phase
};

}  // namespace tessera

struct TessSession {
    std::unique_ptr<tessera::Session> impl;
    // Texts handed out by tess_session_profiling_summary, valid until the session is released.
    std::mutex summaries_mutex;
    std::deque<std::string> summaries;
};
