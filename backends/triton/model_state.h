// Backend-wide and per-model state of the Tessera backend.
//
// BackendState: the backend's command-line settings (`--backend-config=tessera,KEY=VALUE`) and the Tessera
// environments, one per plugin path, shared by the models that use it and released with the last of them.
//
// ModelState: one loaded model version: its configuration (auto-completed from the ONNX model when allowed),
// the model file, and the sessions its instances run.  By default every instance gets a session of its own; with
// the parameter share_session the instances of one kind share one session (tess_session_run is thread-safe).
#pragma once

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_config.h"
#include "tessera/tessera.hpp"
#include "triton/core/tritonbackend.h"

namespace tessera_triton {

class BackendState {
public:
    explicit BackendState(const nlohmann::json& backend_config);

    // The environment searching Tessera's own plugin directories and then `plugin_dir` (colon-separated), created
    // on first use and kept while a model holds it.
    std::shared_ptr<tessera::Env> environment(const std::string& plugin_dir);

    int64_t default_max_batch_size() const noexcept { return default_max_batch_size_; }
    // Tessera options every model starts from before its own `parameters` apply.
    const TesseraOptions& default_options() const noexcept { return default_options_; }

private:
    int64_t default_max_batch_size_ = 4;  // Triton's own default, passed to every backend as default-max-batch-size
    TesseraOptions default_options_;
    std::mutex mutex_;
    std::map<std::string, std::weak_ptr<tessera::Env>> environments_;
};

class ModelState {
public:
    ModelState(TRITONBACKEND_Model* triton_model, BackendState& backend);

    const std::string& name() const noexcept { return name_; }
    uint64_t version() const noexcept { return version_; }
    const ModelConfig& config() const noexcept { return config_; }
    // The model's description of an input (its fixed dimensions are checked per request).
    const tessera::ValueInfo& model_input(const std::string& input_name) const;

    // The session an instance of `kind` runs: a new one, or with share_session the one its kind shares.
    std::shared_ptr<tessera::Session> session_for_instance(TRITONSERVER_InstanceGroupKind kind,
                                                           const std::string& instance_name);

private:
    std::vector<std::string> providers_for(TRITONSERVER_InstanceGroupKind kind) const;
    std::shared_ptr<tessera::Session> create_session(const std::vector<std::string>& providers) const;
    // create_session for an instance, its errors naming the instance.
    std::shared_ptr<tessera::Session> compile_for_instance(const std::vector<std::string>& providers,
                                                           const std::string& instance_name) const;
    nlohmann::json read_config() const;
    TRITONSERVER_InstanceGroupKind load_kind(const nlohmann::json& config) const;

    TRITONBACKEND_Model* triton_model_;
    std::string name_;
    uint64_t version_ = 0;
    std::string model_path_;
    ModelConfig config_;
    std::shared_ptr<tessera::Env> environment_;
    std::map<std::string, tessera::ValueInfo> model_inputs_;

    // Triton may initialize instances in parallel: this guards the three members below, never a compile.
    std::mutex sessions_mutex_;
    // The session made while loading (to read the model's inputs and outputs), kept for the first instance that
    // runs with the same providers so that no session is compiled twice.
    std::shared_ptr<tessera::Session> load_session_;
    std::vector<std::string> load_session_providers_;
    // With share_session: the session of each provider list, ready once its first instance has compiled it.
    std::map<std::vector<std::string>, std::shared_future<std::shared_ptr<tessera::Session>>> shared_sessions_;
};

}  // namespace tessera_triton
