#include "session/session.h"

#include <algorithm>

#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/status.h"
#include "graph/graph_view.h"
#include "model/save.h"
#include "optimizer/optimizer.h"
#include "partition/partitioner.h"
#include "plugins/contexts.h"

namespace tessera {

namespace {

IoInfo make_io_info(const Graph& graph, const std::string& name) {
    IoInfo info;
    info.name = name;
    auto it = graph.types.find(name);
    if (it != graph.types.end()) info.type = it->second;
    if (info.type.has_shape && info.type.dim_params.size() != info.type.dims.size())
        info.type.dim_params.resize(info.type.dims.size());
    for (const auto& p : info.type.dim_params) info.dim_param_ptrs.push_back(p.c_str());
    return info;
}

}  // namespace

Session::Session(TessEnv& env, LoadedModel model, const TessSessionOptions& options, int64_t load_start_ns)
    : graph_(std::move(model.graph)), metadata_(std::move(model.metadata)) {
    for (const auto& [key, value] : metadata_.custom) {
        metadata_keys_.push_back(key.c_str());
        metadata_values_.push_back(value.c_str());
    }
    start_profiling(options, load_start_ns);
    const int64_t providers_start = Profiler::now_ns();
    custom_ops_ = env.plugins.custom_ops();
    for (const auto& op : custom_ops_) custom_op_apis_.push_back(op->api);
    infer_custom_op_types();  // before the I/O descriptions, which show the inferred types
    for (const auto& in : graph_.inputs) inputs_.push_back(make_io_info(graph_, in));
    for (const auto& out : graph_.outputs) outputs_.push_back(make_io_info(graph_, out));
    choose_providers(env, options);
    profile_phase("providers", providers_start, fmt::format("{{\"instances\":{}}}", instances_.size()));
    const int64_t optimize_start = Profiler::now_ns();
    PassContext context;
    context.evaluate = [this](const Graph& graph, size_t node) { return evaluate_constant_node(graph, node); };
    context.placement = [this](const Graph& graph, const std::vector<size_t>& nodes) {
        return place_nodes(graph, nodes);
    };
    const size_t nodes_before = graph_.nodes.size();
    optimize(graph_, context, optimization_level_from_int(options.optimization_level));
    log_message(TESS_LOG_INFO, "session",
                fmt::format("graph optimization (level {}): {} nodes -> {} in {:.1f} ms", options.optimization_level,
                            nodes_before, graph_.nodes.size(), (Profiler::now_ns() - optimize_start) / 1e6));
    profile_phase("optimize", optimize_start,
                  fmt::format("{{\"level\":{},\"nodes\":{}}}", options.optimization_level, graph_.nodes.size()));
    if (!options.optimized_model_path.empty()) {  // the optimized graph, before partitioning (tessera.h)
        const int64_t save_start = Profiler::now_ns();
        save_model_file(graph_, options.optimized_model_path);
        profile_phase("save", save_start, fmt::format("{{\"initializers\":{}}}", graph_.initializers.size()));
    }
    compile(options);
    profile_phase("compile", partition_end_ns_, fmt::format("{{\"partitions\":{}}}", executor_->partitions().size()));
    std::string plan;
    for (const auto& part : executor_->partitions())
        plan += fmt::format("{}{} ({} nodes)", plan.empty() ? "" : ", ", part.instance->provider().name,
                            part.nodes.size());
    log_message(TESS_LOG_INFO, "session",
                fmt::format("{} partition{}: {}; compiled in {:.1f} ms", executor_->partitions().size(),
                            executor_->partitions().size() == 1 ? "" : "s", plan,
                            (Profiler::now_ns() - partition_end_ns_) / 1e6));
}

// Profiling (exec/profiler.h): the profiler starts with session creation, its origin when loading began.
void Session::start_profiling(const TessSessionOptions& options, int64_t load_start_ns) {
    if (options.profile_path.empty()) return;
    const int64_t now = Profiler::now_ns();
    profiler_ = std::make_unique<Profiler>(options.profile_path, load_start_ns > 0 ? load_start_ns : now);
    if (load_start_ns > 0)
        profiler_->session_phase("load", load_start_ns, now, fmt::format("{{\"nodes\":{}}}", graph_.nodes.size()));
}

// Records a phase of session creation from `start_ns` to now (when profiling); returns now.
int64_t Session::profile_phase(const char* name, int64_t start_ns, const std::string& args_json) {
    const int64_t now = Profiler::now_ns();
    if (profiler_) profiler_->session_phase(name, start_ns, now, args_json);
    return now;
}

Session::~Session() {
    executor_.reset();  // compiled partitions go before the instances that made them
}

void Session::choose_providers(TessEnv& env, const TessSessionOptions& options) {
    std::vector<std::shared_ptr<const Provider>> chosen;
    auto add = [&](std::shared_ptr<const Provider> p) {
        for (const auto& c : chosen)
            if (c->name == p->name) return;
        chosen.push_back(std::move(p));
    };
    if (options.providers.empty()) {
        for (auto& p : env.plugins.providers()) add(p);
    } else {
        for (const auto& name : options.providers) {
            auto provider = env.plugins.find(name);
            std::string problem;
            if (!provider) problem = fmt::format("provider '{}' is not loaded", name);
            else if (!provider->available)
                problem = fmt::format("provider '{}' is unavailable: {}", name, provider->unavailable_reason);
            if (problem.empty()) {
                add(provider);
                continue;
            }
            if (options.strict) fail(TESS_STATUS_UNAVAILABLE, "{} (strict mode)", problem);
            log_message(TESS_LOG_WARNING, "session", problem + "; falling back");
        }
        if (!options.strict) {
            // The general-purpose fallbacks run whatever the listed providers leave.
            for (auto& p : env.plugins.providers())
                if (TESS_HAS_FIELD(p->api, TessProviderApi, is_fallback) && p->api->is_fallback) add(p);
        }
    }
    if (chosen.empty()) fail(TESS_STATUS_UNAVAILABLE, "no execution provider is available (is the plugin directory "
                                                     "next to libtessera, or TESSERA_PLUGIN_PATH set?)");
    TessProviderOptions provider_options{};
    provider_options.struct_size = sizeof(provider_options);
    int threads = options.intra_op_threads;
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    provider_options.intra_op_threads = threads;
    provider_options.custom_op_count = custom_op_apis_.size();
    provider_options.custom_ops = custom_op_apis_.data();
    provider_options.memory_limit_bytes = options.memory_limit_bytes;
    for (auto& provider : chosen) {
        try {
            instances_.emplace_back(ProviderInstance::create(provider, provider_options));
        } catch (const Error& e) {
            if (options.strict) throw;
            log_message(TESS_LOG_WARNING, "session", e.what());
        }
    }
    if (instances_.empty()) fail(TESS_STATUS_UNAVAILABLE, "no execution provider could be started");
}

// Custom operators state their output types, so that providers (and the partition plan) see typed values.
void Session::infer_custom_op_types() {
    if (custom_ops_.empty()) return;
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
        const Node& node = graph_.nodes[n];
        if (node.domain.empty()) continue;
        int64_t opset = graph_.opset_of(node.domain);
        for (const auto& op : custom_ops_) {
            const TessCustomOpApi& api = *op->api;
            if (api.infer_shapes == nullptr || node.domain != api.domain || node.op_type != api.name) continue;
            if (opset < api.since_version || (api.end_version != 0 && opset > api.end_version)) continue;
            GraphViewBuilder builder(graph_);
            const TessGraphView* view = builder.build({n});
            TessShapeContext ctx;
            ctx.outputs.resize(node.outputs.size());
            throw_if_error(api.infer_shapes(api.op_data, view->nodes[0], &ctx),
                           fmt::format("shape inference of {}", node.label()));
            for (size_t o = 0; o < node.outputs.size(); ++o) {
                if (node.outputs[o].empty() || !ctx.outputs[o].set) continue;
                TypeInfo type;
                type.kind = TESS_VALUE_TENSOR;
                type.element_type = ctx.outputs[o].element_type;
                type.has_shape = ctx.outputs[o].rank >= 0;
                if (type.has_shape) {
                    type.dims = ctx.outputs[o].dims;
                    type.dims.resize(static_cast<size_t>(ctx.outputs[o].rank), -1);
                    type.dim_params.assign(type.dims.size(), "");
                }
                graph_.types[node.outputs[o]] = type;
            }
            break;
        }
    }
}

// How many (node, input) reads each freeable constant has; constants read by subgraph bodies, returned as graph
// outputs or overridable as graph inputs are left out (never freed).
std::unordered_map<std::string, size_t> Session::count_constant_readers() const {
    std::unordered_map<std::string, size_t> readers;
    std::set<std::string> pinned(graph_.outputs.begin(), graph_.outputs.end());
    for (const Node& node : graph_.nodes) {
        for (const auto& name : node.inputs)
            if (!name.empty() && graph_.initializers.count(name)) ++readers[name];
        pinned.insert(node.implicit_inputs.begin(), node.implicit_inputs.end());
    }
    for (auto it = readers.begin(); it != readers.end();) {
        if (pinned.count(it->first) || graph_.is_graph_input(it->first)) it = readers.erase(it);
        else ++it;
    }
    return readers;
}

// Frees the constants every reader has copied (prepacked) for itself, so that weights are held once.  A constant
// read by a subgraph body, or returned as a graph output, stays.
void Session::free_released_constants(const std::set<std::pair<size_t, size_t>>& released, size_t freed) {
    std::unordered_map<std::string, bool> all_released;
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
        const Node& node = graph_.nodes[n];
        for (size_t i = 0; i < node.inputs.size(); ++i) {
            const std::string& name = node.inputs[i];
            if (name.empty() || !graph_.initializers.count(name)) continue;
            auto [it, inserted] = all_released.emplace(name, true);
            if (!released.count({n, i})) it->second = false;
        }
        for (const auto& name : node.implicit_inputs) all_released[name] = false;
    }
    for (const auto& out : graph_.outputs) all_released[out] = false;
    for (const auto& [name, releasable] : all_released) {
        if (!releasable || graph_.is_graph_input(name)) continue;
        auto it = graph_.initializers.find(name);
        if (it == graph_.initializers.end()) continue;
        freed += it->second->byte_size;
        graph_.initializers.erase(it);
    }
    if (freed > 0)
        log_message(TESS_LOG_DEBUG, "session", fmt::format("freed {} bytes of constants the providers prepacked", freed));
}

// The first provider (priority order) claiming each node, as the partitioner would ask them.
std::vector<int> Session::place_nodes(const Graph& graph, const std::vector<size_t>& nodes) {
    std::vector<int> placement(nodes.size(), -1);
    for (size_t p = 0; p < instances_.size(); ++p) {
        std::vector<size_t> open;
        for (size_t i = 0; i < nodes.size(); ++i)
            if (placement[i] < 0) open.push_back(nodes[i]);
        if (open.empty()) break;
        GraphViewBuilder builder(graph);
        const TessGraphView* view = builder.build(open);
        TessCapabilityContext capability;
        capability.offered.assign(graph.nodes.size(), false);
        for (size_t n : open) capability.offered[n] = true;
        TessStatus* status = instances_[p]->api().get_capability(instances_[p]->handle(), view, &capability);
        if (status != nullptr) {  // a provider that cannot answer claims nothing here; compile() reports it later
            release_status(adopt_plugin_status(status, "a capability query"));
            continue;
        }
        for (size_t claimed : capability.claimed)
            for (size_t i = 0; i < nodes.size(); ++i)
                if (nodes[i] == claimed && placement[i] < 0) placement[i] = static_cast<int>(p);
    }
    return placement;
}

std::vector<ValuePtr> Session::evaluate_constant_node(const Graph& graph, size_t node_index) {
    for (auto& instance : instances_) {
        if (!instance->is_host_memory()) continue;
        try {
            GraphViewBuilder builder(graph);
            std::vector<std::string> outputs;
            for (const auto& out : graph.nodes[node_index].outputs) outputs.push_back(out);
            const TessGraphView* view = builder.build({node_index}, &outputs);
            TessCapabilityContext capability;
            capability.offered.assign(graph.nodes.size(), false);
            capability.offered[node_index] = true;
            TessStatus* status = instance->api().get_capability(instance->handle(), view, &capability);
            if (status != nullptr) {  // this provider cannot answer; another host provider may
                release_status(adopt_plugin_status(status, "a capability query"));
                continue;
            }
            if (capability.claimed.empty()) continue;
            CompiledPartition part;
            part.instance = instance.get();
            throw_if_error(instance->compile(view, &part.compiled));
            std::vector<ValuePtr> results(outputs.size());
            TessComputeContext ctx;
            ctx.outputs = &results;
            ctx.instance = instance.get();
            throw_if_error(instance->api().compute(part.compiled, &ctx));
            for (size_t i = 0; i < outputs.size(); ++i)
                if (!outputs[i].empty() && !results[i]) return {};
            return results;
        } catch (const Error& e) {
            log_message(TESS_LOG_DEBUG, "optimizer",
                        fmt::format("not folding {}: {}", graph.nodes[node_index].label(), e.what()));
            return {};
        }
    }
    return {};
}

void Session::compile(const TessSessionOptions& options) {
    PartitionRequest request;
    request.graph = &graph_;
    request.strict = options.strict;
    for (auto& instance : instances_) request.providers.push_back(instance.get());

    // A provider that fails to compile a group gives those nodes up to the next provider (unless strict).
    // With one provider no partition is ever compiled twice (its failure ends session creation), so a constant is
    // freed the moment its last reader has copied it: a model's weights are not held twice while they are packed.
    // With several providers a failed compile re-partitions and compiles again, so frees wait for the last attempt.
    std::unordered_map<std::string, size_t> readers_left;
    std::function<void(size_t, size_t)> free_at_release;
    size_t freed_early = 0;
    if (instances_.size() == 1) {
        readers_left = count_constant_readers();
        free_at_release = [this, &readers_left, &freed_early](size_t node, size_t input) {
            if (node >= graph_.nodes.size() || input >= graph_.nodes[node].inputs.size()) return;
            auto it = readers_left.find(graph_.nodes[node].inputs[input]);
            if (it == readers_left.end() || it->second == 0 || --it->second > 0) return;
            auto constant = graph_.initializers.find(it->first);
            if (constant == graph_.initializers.end()) return;
            freed_early += constant->second->byte_size;
            graph_.initializers.erase(constant);
        };
    }
    for (size_t attempt = 0;; ++attempt) {
        std::set<std::pair<size_t, size_t>> released_reads;  // constants the compiled partitions copied
        const int64_t partition_start = Profiler::now_ns();
        PartitionResult plan = partition_graph(request);
        request.skipped.insert(plan.failed_queries.begin(), plan.failed_queries.end());  // asked once per session
        partition_end_ns_ = profile_phase("partition", partition_start,
                                          fmt::format("{{\"groups\":{},\"attempt\":{}}}", plan.groups.size(), attempt));
        std::vector<CompiledPartition> compiled;
        bool retry = false;
        for (const auto& group : plan.groups) {
            CompiledPartition part;
            part.instance = request.providers[group.provider];
            part.nodes = group.nodes;
            GraphViewBuilder builder(graph_);
            const TessGraphView* view = builder.build(group.nodes);
            part.inputs = builder.input_names();
            part.outputs = builder.output_names();
            CompileReleases releases;
            releases.view = view;
            if (free_at_release) releases.on_release = free_at_release;
            active_compile_releases() = &releases;
            TessStatus* status = adopt_plugin_status(
                part.instance->compile(view, &part.compiled),
                fmt::format("provider '{}' compile", part.instance->provider().name));
            active_compile_releases() = nullptr;
            for (const auto& read : releases.released) released_reads.insert(read);
            if (status != nullptr) {
                std::string provider = part.instance->provider().name;
                if (options.strict || attempt > instances_.size() * 4)
                    throw_if_error(status, fmt::format("provider '{}' failed to compile a partition", provider));
                log_message(TESS_LOG_WARNING, "session",
                            fmt::format("provider '{}' failed to compile {} node(s), falling back: {}", provider,
                                        group.nodes.size(), status->message));
                release_status(status);
                request.excluded[group.provider].insert(group.nodes.begin(), group.nodes.end());
                retry = true;
                break;
            }
            compiled.push_back(std::move(part));
        }
        if (retry) continue;

        for (auto& part : compiled) {
            for (size_t n : part.nodes) {
                const Node& node = graph_.nodes[n];
                part.node_names.push_back(node.name.empty() ? fmt::format("{}#{}", node.op_type, n) : node.name);
                part.node_ops.push_back(node.domain.empty() ? node.op_type : node.domain + ":" + node.op_type);
            }
            for (auto& s : part.node_names) part.node_name_ptrs.push_back(s.c_str());
            for (auto& s : part.node_ops) part.node_op_ptrs.push_back(s.c_str());
            for (auto& s : part.inputs) part.input_ptrs.push_back(s.c_str());
            for (auto& s : part.outputs) part.output_ptrs.push_back(s.c_str());
        }
        // Count the boundary copies: inputs produced in another memory kind (caller inputs live on the host).
        auto memory_name = [](const ProviderInstance* instance) -> std::string {
            return instance == nullptr || instance->is_host_memory() ? TESS_HOST_MEMORY_NAME
                                                                     : instance->memory_kind()->name;
        };
        // A tensor crosses into a memory kind once per run: the first partition there that reads it counts it.
        std::unordered_map<std::string, const ProviderInstance*> producer;
        for (const auto& part : compiled)
            for (const auto& out : part.outputs) producer[out] = part.instance;
        std::set<std::pair<std::string, std::string>> crossed;  // (value, memory kind)
        for (auto& part : compiled) {
            part.memory_kind = memory_name(part.instance);
            for (const auto& in : part.inputs) {
                auto it = producer.find(in);
                bool copied = memory_name(it == producer.end() ? nullptr : it->second) != part.memory_kind;
                part.input_copied.push_back(copied ? 1 : 0);
                if (copied && crossed.emplace(in, part.memory_kind).second) ++part.copy_count;
            }
        }
        executor_ = std::make_unique<Executor>(graph_, std::move(compiled));
        free_released_constants(released_reads, freed_early);
        break;
    }
}

void Session::check_input(const IoInfo& info, const TessValue& value) const {
    const TypeInfo& declared = info.type;
    if (declared.kind != TESS_VALUE_UNKNOWN && value.kind != declared.kind)
        fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' expects a {} but got {}", info.name,
             declared.kind == TESS_VALUE_TENSOR ? "tensor" : declared.kind == TESS_VALUE_SEQUENCE ? "sequence" : "optional",
             describe_type(value));
    if (value.kind != TESS_VALUE_TENSOR) return;
    if (declared.element_type != TESS_ELEMENT_UNDEFINED && value.element_type != declared.element_type)
        fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' expects element type {} but got {}", info.name,
             element_type_name(declared.element_type), element_type_name(value.element_type));
    if (!declared.has_shape) return;
    if (value.dims.size() != declared.dims.size())
        fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' expects rank {} but got shape [{}]", info.name,
             declared.dims.size(), fmt::join(value.dims, ","));
    for (size_t d = 0; d < value.dims.size(); ++d)
        if (declared.dims[d] >= 0 && value.dims[d] != declared.dims[d])
            fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' expects shape [{}] but got [{}] (dimension {})", info.name,
                 fmt::join(declared.dims, ","), fmt::join(value.dims, ","), d);
    if (!value.is_host()) fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' must be in host memory", info.name);
    if (value.element_type != TESS_ELEMENT_STRING &&
        value.byte_size < storage_bytes(value.element_type, value.element_count()))
        fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' has {} bytes but its shape needs {}", info.name,
             value.byte_size, storage_bytes(value.element_type, value.element_count()));
}

// The run as its caller observes it: a tag on the messages logged meanwhile and, when asked, a trace of its own.
std::vector<ValuePtr> Session::run(const std::vector<std::string>& input_names,
                                   const std::vector<const TessValue*>& inputs,
                                   const std::vector<std::string>& output_names, const RunControl* control) const {
    std::unique_ptr<Profiler> run_profiler;  // written when the run ends or fails
    if (control != nullptr && control->profile_path != nullptr && !control->profile_path->empty())
        run_profiler = std::make_unique<Profiler>(*control->profile_path, Profiler::now_ns());
    Profiler* profiler = run_profiler ? run_profiler.get() : profiler_ && profiler_->active() ? profiler_.get() : nullptr;
    const ScopedRunLogTag tag(control != nullptr ? control->log_tag : nullptr);
    const bool tagged = control != nullptr && control->log_tag != nullptr && !control->log_tag->empty();
    if (!tagged) return run_graph(input_names, inputs, output_names, control, profiler);
    const int64_t start_ns = Profiler::now_ns();
    log_message(TESS_LOG_DEBUG, "session", "run started");
    try {
        auto results = run_graph(input_names, inputs, output_names, control, profiler);
        log_message(TESS_LOG_DEBUG, "session",
                    fmt::format("run finished in {:.3f} ms", (Profiler::now_ns() - start_ns) / 1e6));
        return results;
    } catch (const std::exception& e) {
        log_message(TESS_LOG_DEBUG, "session", fmt::format("run failed: {}", e.what()));
        throw;
    }
}

std::vector<ValuePtr> Session::run_graph(const std::vector<std::string>& input_names,
                                         const std::vector<const TessValue*>& inputs,
                                         const std::vector<std::string>& output_names, const RunControl* control,
                                         Profiler* profiler) const {
    std::vector<std::pair<size_t, const TessValue*>> feeds;
    std::vector<bool> fed(inputs_.size(), false);
    for (size_t i = 0; i < input_names.size(); ++i) {
        size_t k = 0;
        while (k < inputs_.size() && inputs_[k].name != input_names[i]) ++k;
        if (k == inputs_.size()) {
            std::vector<std::string> names;
            for (const auto& info : inputs_) names.push_back(info.name);
            fail(TESS_STATUS_INVALID_ARGUMENT, "the model has no input named '{}' (inputs: {})", input_names[i],
                 fmt::join(names, ", "));
        }
        if (fed[k]) fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' is given twice", input_names[i]);
        if (inputs[i] == nullptr) fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' is NULL", input_names[i]);
        check_input(inputs_[k], *inputs[i]);
        fed[k] = true;
        size_t id = executor_->value_id(input_names[i]);
        if (id != SIZE_MAX) feeds.emplace_back(id, inputs[i]);
    }
    for (size_t k = 0; k < inputs_.size(); ++k)
        if (!fed[k] && !graph_.initializers.count(inputs_[k].name))
            fail(TESS_STATUS_INVALID_ARGUMENT, "input '{}' is missing", inputs_[k].name);

    std::vector<size_t> output_ids;
    std::vector<const IoInfo*> output_infos;
    const auto& wanted = output_names.empty() ? graph_.outputs : output_names;
    for (const auto& name : wanted) {
        if (!graph_.is_graph_output(name))
            fail(TESS_STATUS_INVALID_ARGUMENT, "the model has no output named '{}'", name);
        output_ids.push_back(executor_->value_id(name));
        output_infos.push_back(&*std::find_if(outputs_.begin(), outputs_.end(),
                                              [&](const IoInfo& info) { return info.name == name; }));
    }
    auto results = executor_->run(feeds, output_ids, profiler, control);
    for (size_t i = 0; i < results.size(); ++i)
        if (results[i]) check_output(*output_infos[i], *results[i]);
    return results;
}

// A value that contradicts the model's declared output type is a fault in the model (an If whose branches disagree,
// a custom operator that lies about its types): report it rather than hand the caller a mislabelled value.  Shapes
// are not checked, as exporters often declare static shapes that the model does not keep.
void Session::check_output(const IoInfo& info, const TessValue& value) const {
    const TypeInfo& declared = info.type;
    if (declared.kind != TESS_VALUE_UNKNOWN && value.kind != declared.kind)
        fail(TESS_STATUS_RUNTIME_ERROR, "output '{}' is declared a {} but the model produced {}", info.name,
             declared.kind == TESS_VALUE_TENSOR ? "tensor" : declared.kind == TESS_VALUE_SEQUENCE ? "sequence" : "optional",
             describe_type(value));
    if (value.kind == TESS_VALUE_TENSOR && declared.element_type != TESS_ELEMENT_UNDEFINED &&
        value.element_type != declared.element_type)
        fail(TESS_STATUS_RUNTIME_ERROR, "output '{}' is declared {} but the model produced {}", info.name,
             element_type_name(declared.element_type), element_type_name(value.element_type));
}

}  // namespace tessera
