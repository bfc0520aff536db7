#include "model_state.h"

#include <sys/stat.h>

#include <algorithm>

#include "triton_support.h"

namespace tessera_triton {

namespace {

// Tessera's log lines go to Triton's log at the matching level.
void forward_tessera_log(TessLogLevel level, const char* message) {
    switch (level) {
        case TESS_LOG_ERROR: log_error(std::string("tessera: ") + message); break;
        case TESS_LOG_WARNING: log_warning(std::string("tessera: ") + message); break;
        case TESS_LOG_INFO: log_info(std::string("tessera: ") + message); break;
        default: log_verbose(std::string("tessera: ") + message); break;
    }
}

bool is_regular_file(const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

// ---- BackendState -------------------------------------------------------------------------------------------------

BackendState::BackendState(const nlohmann::json& backend_config) {
    auto cmdline = backend_config.find("cmdline");
    if (cmdline == backend_config.end() || !cmdline->is_object()) return;
    if (auto mbs = cmdline->find("default-max-batch-size"); mbs != cmdline->end() && mbs->is_string()) {
        try {
            default_max_batch_size_ = std::stoll(mbs->get<std::string>());
        } catch (const std::exception&) {
            throw invalid_arg("backend setting default-max-batch-size must be an integer, not '" +
                              mbs->get<std::string>() + "'");
        }
    }
    parse_tessera_parameters(*cmdline, default_options_);
}

std::shared_ptr<tessera::Env> BackendState::environment(const std::string& plugin_dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto existing = environments_[plugin_dir].lock()) return existing;
    tessera::EnvOptions options;
    options.log_level = TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE) ? TESS_LOG_INFO : TESS_LOG_WARNING;
    options.log = forward_tessera_log;
    options.plugin_path = plugin_dir;
    auto env = std::make_shared<tessera::Env>(options);
    // Every plugin file Tessera considered, so that a missing or skipped provider is explained in the server log.
    for (const tessera::PluginInfo& plugin : env->plugins()) {
        std::string line = "tessera plugin " + plugin.path + ": " + plugin.state_name();
        if (!plugin.name.empty())
            line += " (" + plugin.name + (plugin.version.empty() ? "" : " " + plugin.version) + ")";
        if (!plugin.reason.empty()) line += ": " + plugin.reason;
        plugin.state == TESS_PLUGIN_LOADED ? log_info(line) : log_warning(line);
    }
    environments_[plugin_dir] = env;
    return env;
}

// ---- ModelState ---------------------------------------------------------------------------------------------------

nlohmann::json ModelState::read_config() const {
    MessageHandle message;
    check_triton(TRITONBACKEND_ModelConfig(triton_model_, 1, message.out()), "reading the model configuration");
    const std::string text = message.json();
    nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) throw internal_error("the model configuration Triton gave is not valid JSON");
    return config;
}

// The kind the load-time session is compiled for: that of some instance group, so that an instance of it will take
// the session (GPU first, the costliest to compile again).  Triton's normalized configuration has at least one
// group, each of count 1 or more, and KIND_AUTO already resolved to KIND_GPU or KIND_CPU.
TRITONSERVER_InstanceGroupKind ModelState::load_kind(const nlohmann::json& config) const {
    bool cpu = false, model = false;
    if (auto groups = config.find("instance_group"); groups != config.end() && groups->is_array()) {
        for (const auto& group : *groups) {
            const std::string kind = group.is_object() ? group.value("kind", "") : "";
            if (kind == "KIND_GPU") return TRITONSERVER_INSTANCEGROUPKIND_GPU;
            cpu = cpu || kind == "KIND_CPU";
            model = model || kind == "KIND_MODEL";
        }
    }
    return model && !cpu ? TRITONSERVER_INSTANCEGROUPKIND_MODEL : TRITONSERVER_INSTANCEGROUPKIND_CPU;
}

ModelState::ModelState(TRITONBACKEND_Model* triton_model, BackendState& backend) : triton_model_(triton_model) {
    const char* model_name = nullptr;
    check_triton(TRITONBACKEND_ModelName(triton_model, &model_name), "reading the model name");
    name_ = model_name;
    check_triton(TRITONBACKEND_ModelVersion(triton_model, &version_), "reading the model version");

    TRITONBACKEND_ArtifactType artifact_type{};
    const char* location = nullptr;
    check_triton(TRITONBACKEND_ModelRepository(triton_model, &artifact_type, &location), "reading the repository");
    if (artifact_type != TRITONBACKEND_ARTIFACT_FILESYSTEM)
        throw BackendError(TRITONSERVER_ERROR_UNSUPPORTED,
                           "model '" + name_ + "': the tessera backend reads models from a filesystem repository only");

    nlohmann::json config_json = read_config();
    config_ = parse_model_config(config_json, backend.default_options());

    model_path_ = std::string(location) + "/" + std::to_string(version_) + "/" + config_.model_filename;
    if (!is_regular_file(model_path_))
        throw BackendError(TRITONSERVER_ERROR_NOT_FOUND, "model '" + name_ + "' version " + std::to_string(version_) +
                                                             ": no model file at " + model_path_);
    environment_ = backend.environment(config_.options.plugin_dir);

    // A session made now tells the model's inputs and outputs (auto-complete and validation) and catches a broken
    // model file at load time, where Triton reports it through the repository API.
    load_session_providers_ = providers_for(load_kind(config_json));
    try {
        load_session_ = create_session(load_session_providers_);
    } catch (const tessera::Error& e) {
        throw BackendError(triton_code_for(e.code()),
                           "model '" + name_ + "': tessera cannot load " + model_path_ + ": " + e.what());
    }

    bool auto_complete = false;
    check_triton(TRITONBACKEND_ModelAutoCompleteConfig(triton_model, &auto_complete), "reading the auto-complete flag");
    if (auto_complete && auto_complete_config(config_json, *load_session_, backend.default_max_batch_size(), name_)) {
        const std::string text = config_json.dump();
        MessageHandle message;
        check_triton(TRITONSERVER_MessageNewFromSerializedJson(message.out(), text.data(), text.size()),
                     "making the auto-completed configuration");
        check_triton(TRITONBACKEND_ModelSetConfig(triton_model, 1, message.get()),
                     "setting the auto-completed configuration");
        // Triton may add fields of its own: read the configuration back, as the API asks.
        config_json = read_config();
        config_ = parse_model_config(config_json, backend.default_options());
        log_verbose("model '" + name_ + "': configuration after auto-complete: " + config_json.dump());
    }
    try {
        validate_config_against_model(config_, *load_session_);
    } catch (const BackendError& e) {
        throw BackendError(e.code(), "model '" + name_ + "': " + e.what());
    }
    for (const TensorConfig& input : config_.inputs)
        if (input.allow_ragged_batch)
            log_warning("model '" + name_ + "': input '" + input.name +
                        "' allows ragged batches; Tessera runs rectangular batches, so a request whose dimensions "
                        "differ from the rest of its batch gets an error");
    for (tessera::ValueInfo& info : load_session_->inputs()) model_inputs_.emplace(info.name, std::move(info));
    log_info("model '" + name_ + "' version " + std::to_string(version_) + ": loaded " + model_path_ +
             " (max_batch_size " + std::to_string(config_.max_batch_size) +
             (config_.dynamic_batching ? ", dynamic batching" : "") + ", " +
             (config_.options.share_session ? "one session shared by its instances" : "one session per instance") +
             ")");
}

const tessera::ValueInfo& ModelState::model_input(const std::string& input_name) const {
    auto found = model_inputs_.find(input_name);
    if (found == model_inputs_.end()) throw internal_error("model '" + name_ + "' has no input '" + input_name + "'");
    return found->second;
}

// The provider list: the `providers` parameter when given, else by instance kind: KIND_CPU runs on Tessera's CPU
// provider, KIND_GPU on its CUDA provider first (CPU for what CUDA does not claim), anything else in Tessera's
// default order.
std::vector<std::string> ModelState::providers_for(TRITONSERVER_InstanceGroupKind kind) const {
    if (config_.options.providers) return *config_.options.providers;
    switch (kind) {
        case TRITONSERVER_INSTANCEGROUPKIND_CPU: return {"cpu"};
        case TRITONSERVER_INSTANCEGROUPKIND_GPU: return {"cuda", "cpu"};
        default: return {};
    }
}

std::shared_ptr<tessera::Session> ModelState::create_session(const std::vector<std::string>& providers) const {
    tessera::SessionOptions options;
    options.providers(providers)
        .intra_op_threads(config_.options.intra_op_threads)
        .strict(config_.options.strict)
        .optimization_level(config_.options.optimization_level);
    auto session = std::make_shared<tessera::Session>(*environment_, model_path_, &options);
    std::vector<std::string> plan;
    for (const tessera::PartitionInfo& partition : session->partitions())
        plan.push_back(partition.provider + " (" + std::to_string(partition.node_names.size()) + " nodes)");
    log_verbose("model '" + name_ + "': tessera session with providers " + join(providers, "(default order)") +
                ", partitions: " + join(plan, "none"));
    return session;
}

std::shared_ptr<tessera::Session> ModelState::compile_for_instance(const std::vector<std::string>& providers,
                                                                   const std::string& instance_name) const {
    try {
        return create_session(providers);
    } catch (const tessera::Error& e) {
        throw BackendError(triton_code_for(e.code()), "model '" + name_ + "' instance '" + instance_name +
                                                          "': tessera session with providers " +
                                                          join(providers, "(default order)") + ": " + e.what());
    }
}

// Sessions are compiled outside sessions_mutex_, which guards only the bookkeeping, so that Triton's parallel
// instance loading compiles them in parallel.
std::shared_ptr<tessera::Session> ModelState::session_for_instance(TRITONSERVER_InstanceGroupKind kind,
                                                                   const std::string& instance_name) {
    const std::vector<std::string> providers = providers_for(kind);
    std::unique_lock<std::mutex> lock(sessions_mutex_);
    // Shared: the first instance with these providers makes the session and the others wait for it, so that it is
    // compiled once.  A failed compile fails the model's load, and this state with it.
    const bool shared = config_.options.share_session;
    if (shared) {
        if (auto found = shared_sessions_.find(providers); found != shared_sessions_.end()) {
            std::shared_future<std::shared_ptr<tessera::Session>> future = found->second;
            lock.unlock();
            return future.get();  // rethrows the first instance's compile error
        }
    }
    // The load-time session goes to the first instance with its providers.  An instance of another kind leaves it
    // there: load_kind chose a kind that has instances, so one will come for it.
    std::shared_ptr<tessera::Session> session;
    if (load_session_ && load_session_providers_ == providers) session = std::move(load_session_);
    std::promise<std::shared_ptr<tessera::Session>> promise;
    if (shared) shared_sessions_.emplace(providers, promise.get_future().share());
    lock.unlock();
    try {
        if (!session) session = compile_for_instance(providers, instance_name);
    } catch (...) {
        if (shared) promise.set_exception(std::current_exception());
        throw;
    }
    if (shared) promise.set_value(session);
    return session;
}

}  // namespace tessera_triton
