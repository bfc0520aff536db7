// Capability-based partitioning: providers, in priority order, claim still-unassigned nodes; each provider's claimed
// nodes are fused into connected groups that never form a cycle between groups.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "plugins/plugins.h"

namespace tessera {

struct PartitionGroup {
    size_t provider = 0;        // index into the provider list
    std::vector<size_t> nodes;  // node indices in topological order
};

struct PartitionResult {
    std::vector<PartitionGroup> groups;  // in a valid execution order
    // Providers (indices) whose capability query failed and that were therefore given no node (not strict).
    std::set<size_t> failed_queries;
};

struct PartitionRequest {
    const Graph* graph = nullptr;
    std::vector<ProviderInstance*> providers;  // priority order
    // Nodes a provider must not take (it failed to compile them earlier): provider index -> node indices.
    std::map<size_t, std::set<size_t>> excluded;
    // Why: provider index -> the message of its last failed compile, for the report of nodes nobody can run.
    std::map<size_t, std::string> compile_errors;
    // Providers not asked at all (their capability query failed in an earlier attempt of this session).
    std::set<size_t> skipped;
    // Strict mode: a capability query that fails is an error.  Otherwise that provider is skipped with a warning and
    // the nodes go to the next provider.
    bool strict = false;
};

// Throws Error(NOT_IMPLEMENTED) naming every node nobody claimed, with op, opset, input types and why each provider
// declined.
PartitionResult partition_graph(const PartitionRequest& request);

// For the optimizer's placement questions: the index of the first provider (priority order) that claims each of
// `nodes`, asked as partition_graph asks them, or -1 where none does (a provider whose query fails claims nothing).
std::vector<int> place_nodes(const std::vector<ProviderInstance*>& providers, const Graph& graph,
                             const std::vector<size_t>& nodes);

// Groups nodes (already assigned to providers) into fused, cycle-free, connected groups; exposed for tests.
std::vector<PartitionGroup> group_nodes(const Graph& graph, const std::vector<size_t>& assignment);

}  // namespace tessera
