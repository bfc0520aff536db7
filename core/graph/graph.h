// The core's graph IR: what the loader produces, the optimizer rewrites and the partitioner splits.
// Values are named edges (ONNX's SSA names); "" is an omitted optional input or output.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <onnx/onnx_pb.h>

#include "common/value.h"

namespace tessera {

struct TypeInfo {
    int32_t kind = TESS_VALUE_UNKNOWN;
    int32_t element_type = TESS_ELEMENT_UNDEFINED;
    bool has_shape = false;
    std::vector<int64_t> dims;              // -1 for unknown dims
    std::vector<std::string> dim_params;    // "" where the dim has no symbolic name
};

struct Graph;

struct Node {
    std::string name;
    std::string op_type;
    std::string domain;
    std::vector<std::string> inputs;
    std::vector<std::string> outputs;
    std::vector<onnx::AttributeProto> attributes;
    // Bodies of GRAPH/GRAPHS attributes (If, Loop, Scan, ...), in attribute order; a GRAPHS attribute appears once
    // per graph under the same name.
    std::vector<std::pair<std::string, std::shared_ptr<Graph>>> subgraphs;
    // Values of enclosing scopes that the bodies read: real dependencies of this node.
    std::vector<std::string> implicit_inputs;

    // Every value the node depends on: its inputs (without omitted ones) and implicit inputs.
    std::vector<std::string> reads() const;
    const onnx::AttributeProto* attribute(const std::string& attr_name) const;
    std::string label() const;  // "name (op_type)" for messages
};

struct Graph {
    std::string name;
    int64_t ir_version = 0;
    std::vector<Node> nodes;
    std::vector<std::string> inputs;   // graph inputs the caller may feed (overridable initializers included)
    std::vector<std::string> outputs;
    std::unordered_map<std::string, TypeInfo> types;
    // Initializers and folded constants (host memory).  Those also listed in `inputs` are defaults the caller may
    // override, so they are not treated as constants.
    std::unordered_map<std::string, SharedValue> initializers;
    std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
    // For subgraphs: names defined by enclosing graphs, which this graph may read.
    std::unordered_set<std::string> outer_scope;

    bool is_constant(const std::string& value) const;
    bool is_graph_input(const std::string& value) const;
    bool is_graph_output(const std::string& value) const;
    int64_t opset_of(const std::string& domain) const;  // 0 when not imported

    // Sorts `nodes` topologically (stable for already ordered graphs).  Throws naming a node on a cycle or an
    // input nobody produces.
    void sort_topologically();
    // Index of the node producing each value.
    std::unordered_map<std::string, size_t> producers() const;
    // Values read by the nodes (implicit inputs included) that this graph does not define itself.
    std::vector<std::string> free_values() const;
    // How many times each value is read by nodes (graph outputs count once more).
    std::unordered_map<std::string, size_t> use_counts() const;
};

}  // namespace tessera
