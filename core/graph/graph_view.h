// Builds the read-only C views (TessGraphView) of a Graph or of a subset of its nodes, for capability queries and
// compile calls.  The builder owns every struct it hands out; views live as long as the builder.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "tessera/provider.h"

namespace tessera {

class GraphViewBuilder {
public:
    explicit GraphViewBuilder(const Graph& graph, const GraphViewBuilder* parent = nullptr)
        : graph_(graph), parent_(parent) {}
    GraphViewBuilder(const GraphViewBuilder&) = delete;
    GraphViewBuilder& operator=(const GraphViewBuilder&) = delete;

    // A view of the given nodes (indices into graph.nodes, kept in that order).  Its inputs are the non-constant
    // values the nodes read but do not produce; its outputs are the values they produce that are read outside the
    // set or are graph outputs, unless `outputs` lists them explicitly.
    const TessGraphView* build(const std::vector<size_t>& node_indices,
                               const std::vector<std::string>* outputs = nullptr);

    // The whole graph as a subgraph body: formal inputs and outputs in declaration order.
    const TessGraphView* build_body();

    // The inputs and outputs of the last build, by name, in view order.
    const std::vector<std::string>& input_names() const { return input_names_; }
    const std::vector<std::string>& output_names() const { return output_names_; }

private:
    const TessValueView* value(const std::string& name);
    const TypeInfo* find_type(const std::string& name) const;  // this graph, then enclosing ones
    const TessAttributeView* attribute(const onnx::AttributeProto& attr, const Node& node);
    template <typename T> const T* keep(std::vector<T> items);

    const Graph& graph_;
    const GraphViewBuilder* parent_;
    std::deque<GraphViewBuilder> children_;  // builders of subgraph views
    std::unordered_map<std::string, const TessValueView*> values_;
    std::deque<TessValueView> value_store_;
    std::deque<TessAttributeView> attribute_store_;
    std::deque<TessNodeView> node_store_;
    std::deque<TessGraphView> graph_store_;
    std::deque<std::string> strings_;
    std::vector<std::shared_ptr<void>> arrays_;
    std::vector<ValuePtr> tensors_;
    std::vector<std::string> input_names_, output_names_;
};

}  // namespace tessera
