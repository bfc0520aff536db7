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
};

struct PartitionRequest {
    const Graph* graph = nullptr;
    std::vector<ProviderInstance*> providers;  // priority order
    // Nodes a provider must not take (it failed to compile them earlier): provider index -> node indices.
    std::map<size_t, std::set<size_t>> excluded;
};

// Throws Error(NOT_IMPLEMENTED) naming every node nobody claimed, with op, opset, input types and why each provider
// declined.
PartitionResult partition_graph(const PartitionRequest& request);

// Groups nodes (already assigned to providers) into fused, cycle-free, connected groups; exposed for tests.
std::vector<PartitionGroup> group_nodes(const Graph& graph, const std::vector<size_t>& assignment);

}  // namespace tessera
