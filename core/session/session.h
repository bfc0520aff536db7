// Environment and session: the objects behind TessEnv and TessSession.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/log.h"
#include "exec/executor.h"
#include "model/loader.h"
#include "plugins/plugins.h"

struct TessEnv {
    tessera::LogSink sink;
    tessera::PluginManager plugins;
    // Report strings handed out through TessPluginInfo live here.
    mutable std::mutex report_mutex;
    mutable std::vector<tessera::PluginRecord> report_cache;
    mutable std::vector<std::string> provider_names;

    ~TessEnv() { tessera::remove_log_sink(&sink); }
};

struct TessSessionOptions {
    std::vector<std::string> providers;
    int32_t intra_op_threads = 0;
    bool strict = false;
    int32_t optimization_level = 3;  // TESS_OPTIMIZATION_ALL
};

namespace tessera {

struct IoInfo {
    std::string name;
    TypeInfo type;
    std::vector<const char*> dim_param_ptrs;
};

class Session {
public:
    Session(TessEnv& env, LoadedModel model, const TessSessionOptions& options);
    ~Session();

    std::vector<ValuePtr> run(const std::vector<std::string>& input_names, const std::vector<const TessValue*>& inputs,
                              const std::vector<std::string>& output_names) const;

    const std::vector<IoInfo>& inputs() const { return inputs_; }
    const std::vector<IoInfo>& outputs() const { return outputs_; }
    const std::vector<CompiledPartition>& partitions() const { return executor_->partitions(); }

private:
    void choose_providers(TessEnv& env, const TessSessionOptions& options);
    std::vector<ValuePtr> evaluate_constant_node(const Graph& graph, size_t node_index);
    std::vector<int> place_nodes(const Graph& graph, const std::vector<size_t>& nodes);
    void compile(const TessSessionOptions& options);
    void check_input(const IoInfo& info, const TessValue& value) const;
    void infer_custom_op_types();

    Graph graph_;
    std::vector<std::shared_ptr<const CustomOp>> custom_ops_;  // keeps the libraries loaded
    std::vector<const TessCustomOpApi*> custom_op_apis_;
    std::vector<InstanceRef> instances_;  // priority order
    std::unique_ptr<Executor> executor_;
    std::vector<IoInfo> inputs_, outputs_;
};

}  // namespace tessera

struct TessSession {
    std::unique_ptr<tessera::Session> impl;
};
