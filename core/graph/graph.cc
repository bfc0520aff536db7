#include "graph/graph.h"

#include <algorithm>
#include <queue>

#include <fmt/format.h>

#include "common/status.h"

namespace tessera {

const onnx::AttributeProto* Node::attribute(const std::string& attr_name) const {
    for (const auto& a : attributes)
        if (a.name() == attr_name) return &a;
    return nullptr;
}

std::vector<std::string> Node::reads() const {
    std::vector<std::string> result;
    for (const auto& in : inputs)
        if (!in.empty()) result.push_back(in);
    result.insert(result.end(), implicit_inputs.begin(), implicit_inputs.end());
    return result;
}

std::string Node::label() const {
    std::string op = domain.empty() ? op_type : domain + ":" + op_type;
    return name.empty() ? fmt::format("<unnamed> ({})", op) : fmt::format("'{}' ({})", name, op);
}

bool Graph::is_constant(const std::string& value) const {
    return initializers.count(value) != 0 && !is_graph_input(value);
}

bool Graph::is_graph_input(const std::string& value) const {
    return std::find(inputs.begin(), inputs.end(), value) != inputs.end();
}

bool Graph::is_graph_output(const std::string& value) const {
    return std::find(outputs.begin(), outputs.end(), value) != outputs.end();
}

int64_t Graph::opset_of(const std::string& domain) const {
    auto it = opsets.find(domain);
    if (it == opsets.end() && domain == "ai.onnx") it = opsets.find("");
    return it == opsets.end() ? 0 : it->second;
}

std::unordered_map<std::string, size_t> Graph::producers() const {
    std::unordered_map<std::string, size_t> result;
    for (size_t i = 0; i < nodes.size(); ++i)
        for (const auto& out : nodes[i].outputs)
            if (!out.empty()) result[out] = i;
    return result;
}

std::vector<std::string> Graph::free_values() const {
    std::unordered_set<std::string> defined(inputs.begin(), inputs.end());
    for (const auto& [name, _] : initializers) defined.insert(name);
    for (const auto& node : nodes)
        for (const auto& out : node.outputs) defined.insert(out);
    std::vector<std::string> result;
    std::unordered_set<std::string> seen;
    for (const auto& node : nodes)
        for (const auto& in : node.reads())
            if (!defined.count(in) && seen.insert(in).second) result.push_back(in);
    return result;
}

std::unordered_map<std::string, size_t> Graph::use_counts() const {
    std::unordered_map<std::string, size_t> counts;
    for (const auto& node : nodes)
        for (const auto& in : node.reads()) ++counts[in];
    for (const auto& out : outputs) ++counts[out];
    return counts;
}

void Graph::sort_topologically() {
    auto producer = producers();
    std::vector<size_t> pending(nodes.size(), 0);
    std::vector<std::vector<size_t>> consumers(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        std::unordered_set<size_t> seen;
        for (const auto& in : nodes[i].reads()) {
            auto it = producer.find(in);
            if (it == producer.end()) {
                if (initializers.count(in) == 0 && !is_graph_input(in) && !outer_scope.count(in))
                    fail(TESS_STATUS_INVALID_MODEL, "node {} reads '{}', which no node, input or initializer provides",
                         nodes[i].label(), in);
                continue;
            }
            if (seen.insert(it->second).second) {
                ++pending[i];
                consumers[it->second].push_back(i);
            }
        }
    }
    // Kahn's algorithm with a min-heap on the original index keeps already sorted graphs unchanged.
    std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (pending[i] == 0) ready.push(i);
    std::vector<size_t> order;
    order.reserve(nodes.size());
    while (!ready.empty()) {
        size_t n = ready.top();
        ready.pop();
        order.push_back(n);
        for (size_t c : consumers[n])
            if (--pending[c] == 0) ready.push(c);
    }
    if (order.size() != nodes.size()) {
        for (size_t i = 0; i < nodes.size(); ++i)
            if (pending[i] != 0) fail(TESS_STATUS_INVALID_MODEL, "the graph has a cycle through node {}", nodes[i].label());
    }
    std::vector<Node> sorted;
    sorted.reserve(nodes.size());
    for (size_t i : order) sorted.push_back(std::move(nodes[i]));
    nodes = std::move(sorted);
}

}  // namespace tessera
