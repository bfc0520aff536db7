#include "optimizer/fusion_util.h"

#include <cstring>

namespace tessera::fusion {

std::optional<std::vector<int64_t>> constant_dims(const Graph& graph, const std::string& name) {
    if (name.empty() || !graph.is_constant(name)) return std::nullopt;
    auto it = graph.initializers.find(name);
    if (it == graph.initializers.end() || it->second->kind != TESS_VALUE_TENSOR || !it->second->is_host())
        return std::nullopt;
    return it->second->dims;
}

std::optional<std::vector<float>> constant_floats(const Graph& graph, const std::string& name, int64_t count) {
    if (!constant_dims(graph, name)) return std::nullopt;
    const TessValue& value = *graph.initializers.at(name);
    if (value.element_type != TESS_ELEMENT_FLOAT32) return std::nullopt;
    const size_t n = value.element_count();
    if (count >= 0 && n != static_cast<size_t>(count)) return std::nullopt;
    if (value.byte_size < n * sizeof(float)) return std::nullopt;
    std::vector<float> out(n);
    if (n > 0) std::memcpy(out.data(), value.data, n * sizeof(float));
    return out;
}

std::string add_float_constant(Graph& graph, const std::string& base, std::vector<int64_t> dims,
                               const std::vector<float>& values) {
    std::string name = base;
    for (int suffix = 1; graph.initializers.count(name) || graph.types.count(name); ++suffix)
        name = base + "_" + std::to_string(suffix);
    ValuePtr value = make_host_tensor(TESS_ELEMENT_FLOAT32, dims);
    if (!values.empty()) std::memcpy(value->data, values.data(), values.size() * sizeof(float));
    TypeInfo type;
    type.kind = TESS_VALUE_TENSOR;
    type.element_type = TESS_ELEMENT_FLOAT32;
    type.has_shape = true;
    type.dims = std::move(dims);
    type.dim_params.assign(type.dims.size(), "");
    graph.types[name] = std::move(type);
    graph.initializers[name] = SharedValue(value.release(), ValueDeleter{});
    return name;
}

std::unordered_map<std::string, std::vector<size_t>> consumers(const Graph& graph) {
    std::unordered_map<std::string, std::vector<size_t>> readers;
    for (size_t n = 0; n < graph.nodes.size(); ++n)
        for (const auto& value : graph.nodes[n].reads()) readers[value].push_back(n);
    return readers;
}

bool only_feeds(const Graph& graph, const std::unordered_map<std::string, std::vector<size_t>>& readers,
                const std::string& value, size_t consumer) {
    if (value.empty() || graph.is_graph_output(value)) return false;
    auto it = readers.find(value);
    if (it == readers.end() || it->second.size() != 1 || it->second[0] != consumer) return false;
    // A node that reads the value twice (Add(x, x)) lists it once per read in reads(): size 1 means once.
    const Node& node = graph.nodes[consumer];
    for (const auto& implicit : node.implicit_inputs)
        if (implicit == value) return false;
    return true;
}

std::optional<std::vector<int64_t>> static_shape(const Graph& graph, const std::string& value) {
    auto it = graph.types.find(value);
    if (it == graph.types.end() || !it->second.has_shape) return std::nullopt;
    for (int64_t d : it->second.dims)
        if (d < 0) return std::nullopt;
    return it->second.dims;
}

void erase_nodes(Graph& graph, const std::vector<bool>& removed) {
    std::vector<Node> kept;
    kept.reserve(graph.nodes.size());
    for (size_t n = 0; n < graph.nodes.size(); ++n)
        if (n >= removed.size() || !removed[n]) kept.push_back(std::move(graph.nodes[n]));
    graph.nodes = std::move(kept);
}

onnx::AttributeProto make_attribute(const std::string& name, const std::string& value) {
    onnx::AttributeProto attr;
    attr.set_name(name);
    attr.set_type(onnx::AttributeProto::STRING);
    attr.set_s(value);
    return attr;
}

onnx::AttributeProto make_attribute(const std::string& name, const std::vector<float>& values) {
    onnx::AttributeProto attr;
    attr.set_name(name);
    attr.set_type(onnx::AttributeProto::FLOATS);
    for (float v : values) attr.add_floats(v);
    return attr;
}

float float_attribute(const Node& node, const std::string& name, float fallback) {
    const onnx::AttributeProto* attr = node.attribute(name);
    return attr != nullptr && attr->type() == onnx::AttributeProto::FLOAT ? attr->f() : fallback;
}

int64_t int_attribute(const Node& node, const std::string& name, int64_t fallback) {
    const onnx::AttributeProto* attr = node.attribute(name);
    return attr != nullptr && attr->type() == onnx::AttributeProto::INT ? attr->i() : fallback;
}

}  // namespace tessera::fusion
