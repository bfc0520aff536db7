#include "session/compile_graph.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"
#include "graph/graph_view.h"
#include "partition/partitioner.h"
#include "plugins/contexts.h"

namespace tessera {

namespace {

// How many (node, input) reads each freeable constant has; constants read by subgraph bodies, returned as graph
// outputs or overridable as graph inputs are left out (never freed).
std::unordered_map<std::string, size_t> count_constant_readers(const Graph& graph) {
    std::unordered_map<std::string, size_t> readers;
    std::set<std::string> pinned(graph.outputs.begin(), graph.outputs.end());
    for (const Node& node : graph.nodes) {
        for (const auto& name : node.inputs)
            if (!name.empty() && graph.initializers.count(name)) ++readers[name];
        pinned.insert(node.implicit_inputs.begin(), node.implicit_inputs.end());
    }
    for (auto it = readers.begin(); it != readers.end();) {
        if (pinned.count(it->first) || graph.is_graph_input(it->first)) it = readers.erase(it);
        else ++it;
    }
    return readers;
}

// Frees the constants every reader has copied (prepacked) for itself, so that weights are held once.  A constant
// read by a subgraph body, or returned as a graph output, stays.  `freed`: bytes already freed while compiling.
void free_released_constants(Graph& graph, const std::set<std::pair<size_t, size_t>>& released, size_t freed) {
    std::unordered_map<std::string, bool> all_released;
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        const Node& node = graph.nodes[n];
        for (size_t i = 0; i < node.inputs.size(); ++i) {
            const std::string& name = node.inputs[i];
            if (name.empty() || !graph.initializers.count(name)) continue;
            auto [it, inserted] = all_released.emplace(name, true);
            if (!released.count({n, i})) it->second = false;
        }
        for (const auto& name : node.implicit_inputs) all_released[name] = false;
    }
    for (const auto& out : graph.outputs) all_released[out] = false;
    for (const auto& [name, releasable] : all_released) {
        if (!releasable || graph.is_graph_input(name)) continue;
        auto it = graph.initializers.find(name);
        if (it == graph.initializers.end()) continue;
        freed += it->second->byte_size;
        graph.initializers.erase(it);
    }
    if (freed > 0)
        log_message(TESS_LOG_DEBUG, "session", fmt::format("freed {} bytes of constants the providers prepacked", freed));
}

// The names the executor and the profiler show, and the tensors each partition has copied in from another memory
// kind (caller inputs live on the host): a tensor crosses into a memory kind once per run, counted at the first
// partition there that reads it.
void describe_partitions(const Graph& graph, std::vector<CompiledPartition>& compiled) {
    for (auto& part : compiled) {
        for (size_t n : part.nodes) {
            const Node& node = graph.nodes[n];
            part.node_names.push_back(node.name.empty() ? fmt::format("{}#{}", node.op_type, n) : node.name);
            part.node_ops.push_back(node.domain.empty() ? node.op_type : node.domain + ":" + node.op_type);
        }
        for (auto& s : part.node_names) part.node_name_ptrs.push_back(s.c_str());
        for (auto& s : part.node_ops) part.node_op_ptrs.push_back(s.c_str());
        for (auto& s : part.inputs) part.input_ptrs.push_back(s.c_str());
        for (auto& s : part.outputs) part.output_ptrs.push_back(s.c_str());
    }
    auto memory_name = [](const ProviderInstance* instance) -> std::string {
        return instance == nullptr || instance->is_host_memory() ? TESS_HOST_MEMORY_NAME : instance->memory_kind()->name;
    };
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
}

// Whether a provider other than the one a group went to would claim any of its nodes: only then can a failed compile
// be retried elsewhere.  (Providers asked before the owner declined its nodes; later ones are asked here.)
bool has_alternatives(const PartitionRequest& request, const PartitionResult& plan) {
    const Graph& graph = *request.graph;
    for (size_t p = 0; p < request.providers.size(); ++p) {
        if (request.skipped.count(p)) continue;
        std::vector<size_t> others;  // nodes the plan gives to other providers
        for (const auto& group : plan.groups)
            if (group.provider != p) others.insert(others.end(), group.nodes.begin(), group.nodes.end());
        if (others.empty()) continue;
        std::sort(others.begin(), others.end());
        const std::vector<ProviderInstance*> one{request.providers[p]};
        for (int owner : place_nodes(one, graph, others))
            if (owner >= 0) return true;
    }
    return false;
}

}  // namespace

CompiledGraph compile_graph(Graph& graph, const std::vector<InstanceRef>& instances, bool strict, Profiler* profiler) {
    PartitionRequest request;
    request.graph = &graph;
    request.strict = strict;
    for (const auto& instance : instances) request.providers.push_back(instance.get());

    // When no node of the plan could go to another provider, no partition is ever compiled twice (a failed compile
    // ends session creation), so a constant is freed the moment its last reader has copied it: a model's weights
    // are not held twice while they are packed.  Otherwise a failed compile re-partitions and compiles again, so
    // frees wait for the last attempt.
    std::unordered_map<std::string, size_t> readers_left;
    std::function<void(size_t, size_t)> free_at_release;
    size_t freed_early = 0;
    auto free_early = [&] {
        readers_left = count_constant_readers(graph);
        free_at_release = [&graph, &readers_left, &freed_early](size_t node, size_t input) {
            if (node >= graph.nodes.size() || input >= graph.nodes[node].inputs.size()) return;
            auto it = readers_left.find(graph.nodes[node].inputs[input]);
            if (it == readers_left.end() || it->second == 0 || --it->second > 0) return;
            auto constant = graph.initializers.find(it->first);
            if (constant == graph.initializers.end()) return;
            freed_early += constant->second->byte_size;
            graph.initializers.erase(constant);
        };
    };
    CompiledGraph result;
    for (size_t attempt = 0;; ++attempt) {
        std::set<std::pair<size_t, size_t>> released_reads;  // constants the compiled partitions copied
        const int64_t partition_start = Profiler::now_ns();
        PartitionResult plan = partition_graph(request);  // throws once a node is left to no provider
        request.skipped.insert(plan.failed_queries.begin(), plan.failed_queries.end());  // asked once per session
        if (attempt == 0 && !has_alternatives(request, plan)) free_early();
        result.partition_end_ns = Profiler::now_ns();
        if (profiler != nullptr)
            profiler->session_phase("partition", partition_start, result.partition_end_ns,
                                    fmt::format("{{\"groups\":{},\"attempt\":{}}}", plan.groups.size(), attempt));
        std::vector<CompiledPartition> compiled;
        bool retry = false;
        for (const auto& group : plan.groups) {
            CompiledPartition part;
            part.instance = request.providers[group.provider];
            part.nodes = group.nodes;
            GraphViewBuilder builder(graph);
            const TessGraphView* view = builder.build(group.nodes);
            part.inputs = builder.input_names();
            part.outputs = builder.output_names();
            CompileReleases releases;
            releases.view = view;
            if (free_at_release) releases.on_release = free_at_release;
            active_compile_releases() = &releases;
            const std::string& provider = part.instance->provider().name;
            TessStatus* status = adopt_plugin_status(part.instance->compile(view, &part.compiled),
                                                     fmt::format("provider '{}' compile", provider));
            active_compile_releases() = nullptr;
            for (const auto& read : releases.released) released_reads.insert(read);
            if (status != nullptr) {
                if (strict) throw_if_error(status, fmt::format("provider '{}' failed to compile a partition", provider));
                log_message(TESS_LOG_WARNING, "session",
                            fmt::format("provider '{}' failed to compile {} node(s), falling back: {}", provider,
                                        group.nodes.size(), status->message));
                request.compile_errors[group.provider] = status->message;
                release_status(status);
                // The partitioner offers a provider none of its excluded nodes, so this set grows on every retry.
                request.excluded[group.provider].insert(group.nodes.begin(), group.nodes.end());
                retry = true;
                break;
            }
            compiled.push_back(std::move(part));
        }
        if (retry) continue;
        describe_partitions(graph, compiled);
        result.executor = std::make_unique<Executor>(graph, std::move(compiled));
        free_released_constants(graph, released_reads, freed_early);
        return result;
    }
}

}  // namespace tessera
