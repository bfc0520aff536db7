#include "session/session.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/status.h"
#include "graph/graph_view.h"
#include "model/save.h"
#include "optimizer/optimizer.h"
#include "partition/partitioner.h"
#include "plugins/contexts.h"
#include "session/compile_graph.h"
#include "session/constant_evaluation.h"
#include "session/provider_selection.h"

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
    instances_ = start_providers(env, options, custom_op_apis_);
    profile_phase("providers", providers_start, fmt::format("{{\"instances\":{}}}", instances_.size()));
    const int64_t optimize_start = Profiler::now_ns();
    PassContext context;
    context.evaluate = [this](const Graph& graph, size_t node) {
        return evaluate_constant_node(instances_, graph, node);
    };
    context.placement = [this](const Graph& graph, const std::vector<size_t>& nodes) {
        std::vector<ProviderInstance*> providers;
        for (const auto& instance : instances_) providers.push_back(instance.get());
        return place_nodes(providers, graph, nodes);
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
    CompiledGraph compiled = compile_graph(graph_, instances_, options.strict, profiler_.get());
    executor_ = std::move(compiled.executor);
    partition_end_ns_ = compiled.partition_end_ns;
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
