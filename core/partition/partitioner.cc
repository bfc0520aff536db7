#include "partition/partitioner.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>

#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"
#include "graph/graph_view.h"
#include "plugins/contexts.h"

namespace tessera {

namespace {

std::string describe_node(const Graph& graph, const Node& node) {
    std::vector<std::string> types;
    for (const auto& in : node.inputs) {
        if (in.empty()) {
            types.push_back("-");
            continue;
        }
        auto it = graph.types.find(in);
        types.push_back(it == graph.types.end() ? "?" : element_type_name(it->second.element_type));
    }
    return fmt::format("{} opset {} inputs ({})", node.label(), graph.opset_of(node.domain), fmt::join(types, ", "));
}

// Does group `from` depend (transitively) on group `to`?
bool depends_on(const std::vector<std::unordered_set<size_t>>& deps, size_t from, size_t to) {
    std::vector<size_t> stack{from};
    std::unordered_set<size_t> seen{from};
    while (!stack.empty()) {
        size_t g = stack.back();
        stack.pop_back();
        for (size_t d : deps[g]) {
            if (d == to) return true;
            if (seen.insert(d).second) stack.push_back(d);
        }
    }
    return false;
}

}  // namespace

std::vector<PartitionGroup> group_nodes(const Graph& graph, const std::vector<size_t>& assignment) {
    auto producer = graph.producers();
    std::vector<size_t> group_of(graph.nodes.size(), SIZE_MAX);
    std::vector<PartitionGroup> groups;
    std::vector<std::unordered_set<size_t>> deps;  // group -> groups it reads from

    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        std::vector<size_t> pred_groups;
        for (const auto& in : graph.nodes[n].reads()) {
            auto it = producer.find(in);
            if (it == producer.end()) continue;
            size_t g = group_of[it->second];
            if (std::find(pred_groups.begin(), pred_groups.end(), g) == pred_groups.end()) pred_groups.push_back(g);
        }
        size_t chosen = SIZE_MAX;
        for (size_t g : pred_groups) {
            if (groups[g].provider != assignment[n]) continue;
            // Joining g is safe unless another predecessor group already depends on g: that path would leave g and
            // come back into it, a cycle between partitions.
            bool safe = std::none_of(pred_groups.begin(), pred_groups.end(),
                                     [&](size_t h) { return h != g && depends_on(deps, h, g); });
            if (safe) {
                chosen = g;
                break;
            }
        }
        if (chosen == SIZE_MAX) {
            chosen = groups.size();
            groups.push_back(PartitionGroup{assignment[n], {}});
            deps.emplace_back();
        }
        groups[chosen].nodes.push_back(n);
        group_of[n] = chosen;
        for (size_t h : pred_groups)
            if (h != chosen) deps[chosen].insert(h);
    }

    // Execution order: topological over group dependencies, earliest-created first.
    std::vector<size_t> pending(groups.size(), 0);
    std::vector<std::vector<size_t>> dependents(groups.size());
    for (size_t g = 0; g < groups.size(); ++g)
        for (size_t d : deps[g]) {
            ++pending[g];
            dependents[d].push_back(g);
        }
    std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
    for (size_t g = 0; g < groups.size(); ++g)
        if (pending[g] == 0) ready.push(g);
    std::vector<PartitionGroup> ordered;
    while (!ready.empty()) {
        size_t g = ready.top();
        ready.pop();
        ordered.push_back(std::move(groups[g]));
        for (size_t d : dependents[g])
            if (--pending[d] == 0) ready.push(d);
    }
    if (ordered.size() != groups.size()) fail(TESS_STATUS_INTERNAL, "partitioning produced a cycle between groups");
    return ordered;
}

PartitionResult partition_graph(const PartitionRequest& request) {
    const Graph& graph = *request.graph;
    constexpr size_t kUnassigned = SIZE_MAX;
    std::vector<size_t> assignment(graph.nodes.size(), kUnassigned);
    // node -> (provider name, reason) for the error report
    std::vector<std::vector<std::pair<std::string, std::string>>> declines(graph.nodes.size());

    PartitionResult result;
    for (size_t p = 0; p < request.providers.size(); ++p) {
        ProviderInstance* instance = request.providers[p];
        if (request.skipped.count(p)) continue;
        std::vector<size_t> candidates;
        auto excluded = request.excluded.find(p);
        bool any_unassigned = false;
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            if (assignment[n] != kUnassigned) continue;
            any_unassigned = true;
            if (excluded != request.excluded.end() && excluded->second.count(n)) {
                auto error = request.compile_errors.find(p);
                declines[n].emplace_back(instance->provider().name,
                                         error == request.compile_errors.end()
                                             ? std::string("failed to compile it")
                                             : "failed to compile it: " + error->second);
                continue;
            }
            candidates.push_back(n);
        }
        if (!any_unassigned) break;
        if (candidates.empty()) continue;  // all it could take, it failed to compile: the next providers are asked
        GraphViewBuilder builder(graph);
        const TessGraphView* view = builder.build(candidates);
        TessCapabilityContext ctx;
        ctx.offered.assign(graph.nodes.size(), false);
        for (size_t n : candidates) ctx.offered[n] = true;
        TessStatus* status = instance->api().get_capability(instance->handle(), view, &ctx);
        const std::string& name = instance->provider().name;
        if (status != nullptr && request.strict)
            throw_if_error(status, fmt::format("provider '{}' capability query", name));
        if (status != nullptr) {
            // One provider that cannot answer must not fail every session: the next providers take its nodes.
            status = adopt_plugin_status(status, fmt::format("provider '{}' capability query", name));
            std::string message = status->message;
            release_status(status);
            log_message(TESS_LOG_WARNING, "session",
                        fmt::format("provider '{}' is skipped for this session: its capability query failed: {}",
                                    name, message));
            for (size_t n : candidates) declines[n].emplace_back(name, "its capability query failed: " + message);
            result.failed_queries.insert(p);
            continue;
        }
        for (size_t n : ctx.claimed)
            if (assignment[n] == kUnassigned) assignment[n] = p;
        for (size_t n : candidates) {
            if (assignment[n] != kUnassigned) continue;
            auto why = ctx.declined.find(n);
            declines[n].emplace_back(instance->provider().name,
                                     why != ctx.declined.end() ? why->second : "not supported");
        }
    }

    std::vector<std::string> problems;
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        if (assignment[n] != kUnassigned) continue;
        std::vector<std::string> reasons;
        for (const auto& [provider, reason] : declines[n]) reasons.push_back(fmt::format("{}: {}", provider, reason));
        if (reasons.empty()) reasons.push_back("no provider was asked");
        problems.push_back(fmt::format("{} — {}", describe_node(graph, graph.nodes[n]), fmt::join(reasons, "; ")));
    }
    if (!problems.empty())
        fail(TESS_STATUS_NOT_IMPLEMENTED, "no provider can run {} node(s): {}", problems.size(),
             fmt::join(problems, " | "));

    result.groups = group_nodes(graph, assignment);
    return result;
}

std::vector<int> place_nodes(const std::vector<ProviderInstance*>& providers, const Graph& graph,
                             const std::vector<size_t>& nodes) {
    std::vector<int> placement(nodes.size(), -1);
    for (size_t p = 0; p < providers.size(); ++p) {
        std::vector<size_t> open;
        for (size_t i = 0; i < nodes.size(); ++i)
            if (placement[i] < 0) open.push_back(nodes[i]);
        if (open.empty()) break;
        GraphViewBuilder builder(graph);
        const TessGraphView* view = builder.build(open);
        TessCapabilityContext capability;
        capability.offered.assign(graph.nodes.size(), false);
        for (size_t n : open) capability.offered[n] = true;
        TessStatus* status = providers[p]->api().get_capability(providers[p]->handle(), view, &capability);
        if (status != nullptr) {  // the session's partitioning reports it
            release_status(adopt_plugin_status(status, "a capability query"));
            continue;
        }
        for (size_t claimed : capability.claimed)
            for (size_t i = 0; i < nodes.size(); ++i)
                if (nodes[i] == claimed && placement[i] < 0) placement[i] = static_cast<int>(p);
    }
    return placement;
}

}  // namespace tessera
