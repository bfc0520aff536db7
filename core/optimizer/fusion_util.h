// What the fusion passes share: reading constant tensors, making new ones, and finding single-consumer chains.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "optimizer/optimizer.h"

namespace tessera::fusion {

// The float32 elements of a constant tensor, or nullopt when `name` is not a float32 constant with `count`
// elements (count < 0: any).
std::optional<std::vector<float>> constant_floats(const Graph& graph, const std::string& name, int64_t count = -1);
// The int64 elements of a constant tensor, or nullopt when `name` is not an int64 constant (a Reshape's shape).
std::optional<std::vector<int64_t>> constant_int64s(const Graph& graph, const std::string& name);
// The constant's dims, or nullopt when it is not a constant tensor.
std::optional<std::vector<int64_t>> constant_dims(const Graph& graph, const std::string& name);

// Makes `name` a constant of the graph holding `value`, its type recorded from the value.
void set_constant(Graph& graph, const std::string& name, SharedValue value);
// Adds `value` as a constant under a fresh name derived from `base` (no value of the graph has it); returns the name.
std::string add_constant(Graph& graph, const std::string& base, ValuePtr value);

// The element type of a value: from its constant, else from the types the loader inferred (UNDEFINED if unknown).
int32_t element_type(const Graph& graph, const std::string& value);
// The element count of a constant tensor, or -1 when `name` is not one.
int64_t constant_elements(const Graph& graph, const std::string& name);
inline bool is_8bit(int32_t type) { return type == TESS_ELEMENT_UINT8 || type == TESS_ELEMENT_INT8; }

// Adds a float32 initializer under a fresh name derived from `base`; returns the name.
std::string add_float_constant(Graph& graph, const std::string& base, std::vector<int64_t> dims,
                               const std::vector<float>& values);

// The FusedConv activation (name and parameters: Relu, Sigmoid, Tanh, LeakyRelu [alpha], HardSigmoid [alpha, beta],
// Clip [min, max] with constant bounds) that `node` computes, if it is one.
bool fusable_activation(const Graph& graph, const Node& node, std::string& name, std::vector<float>& params);

// An inference BatchNormalization as y = x * a + b per channel: a = gamma / sqrt(var + epsilon) and
// b = beta - mean * a, rounded in float step by step as the CPU provider's normalization and onnxruntime round them
// (computed in double they would move outputs by an ulp, which a DynamicQuantizeLinear downstream turns into other
// integers).
void batchnorm_scale_shift(const std::vector<float>& gamma, const std::vector<float>& beta,
                           const std::vector<float>& mean, const std::vector<float>& var, float epsilon,
                           std::vector<float>& a, std::vector<float>& b);

// Node indices reading each value (graph outputs are not counted here).
std::unordered_map<std::string, std::vector<size_t>> consumers(const Graph& graph);

// True when `value` is read by exactly one node, which is `consumer`, and is neither a graph output nor read by a
// subgraph body: it can disappear into a fused node.
bool only_feeds(const Graph& graph, const std::unordered_map<std::string, std::vector<size_t>>& readers,
                const std::string& value, size_t consumer);

// The static shape of a value when every dimension is known.
std::optional<std::vector<int64_t>> static_shape(const Graph& graph, const std::string& value);

// What a fusion that follows chains of single readers tracks while it walks the graph: who reads each value, and
// the nodes a chain already took.
struct ChainWalk {
    explicit ChainWalk(const Graph& g) : graph(g), readers(consumers(g)), taken(g.nodes.size(), false) {}
    // The only reader of `value`, when that reader can absorb the value (only_feeds) and no chain took it yet.
    bool single_reader(const std::string& value, size_t& reader) const {
        auto it = readers.find(value);
        if (it == readers.end() || it->second.size() != 1) return false;
        reader = it->second[0];
        return only_feeds(graph, readers, value, reader) && !taken[reader];
    }

    const Graph& graph;
    std::unordered_map<std::string, std::vector<size_t>> readers;
    std::vector<bool> taken;
};

// A fusion found in the graph: the nodes it replaces (the last one produces the fused node's output, and its
// position receives the fused node) and the fused node.
struct Candidate {
    std::vector<size_t> nodes;
    Node fused;
};

// Replaces each candidate's nodes by its fused node (its domain imported as opset 1 when new) where the
// provider that would run every replaced node claims the fused node (PassContext::placement), so that fusing never
// moves work to another provider nor leaves a node nobody runs; the others stay as they are.  Keeps the graph
// topologically sorted.  Returns true when it changed the graph.
bool apply_where_placed(Graph& graph, const PassContext& context, const std::vector<Candidate>& candidates);

// Removes the constants among `names` that no node reads (those a fusion made for candidates placement refused), so
// that a pass which changed nothing leaves nothing behind.
void erase_unread_constants(Graph& graph, const std::vector<std::string>& names);

// Removes the nodes marked in `removed` (indexed like graph.nodes), keeping the others in order.
void erase_nodes(Graph& graph, const std::vector<bool>& removed);

// Attribute helpers for nodes built by a fusion.
onnx::AttributeProto make_attribute(const std::string& name, const std::string& value);
onnx::AttributeProto make_attribute(const std::string& name, int64_t value);
onnx::AttributeProto make_attribute(const std::string& name, float value);
onnx::AttributeProto make_attribute(const std::string& name, const std::vector<float>& values);
onnx::AttributeProto make_attribute(const std::string& name, const std::vector<int64_t>& values);
float float_attribute(const Node& node, const std::string& name, float fallback);
int64_t int_attribute(const Node& node, const std::string& name, int64_t fallback);

}  // namespace tessera::fusion
