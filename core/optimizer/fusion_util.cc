#include "optimizer/fusion_util.h"

#include <cmath>

#include <cstring>
#include <limits>
#include <unordered_set>

#include "common/log.h"
#include "tessera/provider.h"

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

std::optional<std::vector<int64_t>> constant_int64s(const Graph& graph, const std::string& name) {
    if (!constant_dims(graph, name)) return std::nullopt;
    const TessValue& value = *graph.initializers.at(name);
    if (value.element_type != TESS_ELEMENT_INT64) return std::nullopt;
    const size_t n = value.element_count();
    if (value.byte_size < n * sizeof(int64_t)) return std::nullopt;
    std::vector<int64_t> out(n);
    if (n > 0) std::memcpy(out.data(), value.data, n * sizeof(int64_t));
    return out;
}

void set_constant(Graph& graph, const std::string& name, SharedValue value) {
    TypeInfo type;
    type.kind = TESS_VALUE_TENSOR;
    type.element_type = value->element_type;
    type.has_shape = true;
    type.dims = value->dims;
    type.dim_params.assign(type.dims.size(), "");
    graph.types[name] = std::move(type);
    graph.initializers[name] = std::move(value);
}

std::string add_constant(Graph& graph, const std::string& base, ValuePtr value) {
    std::string name = base;
    for (int suffix = 1; graph.initializers.count(name) || graph.types.count(name); ++suffix)
        name = base + "_" + std::to_string(suffix);
    set_constant(graph, name, SharedValue(value.release(), ValueDeleter{}));
    return name;
}

std::string add_float_constant(Graph& graph, const std::string& base, std::vector<int64_t> dims,
                               const std::vector<float>& values) {
    ValuePtr value = make_host_tensor(TESS_ELEMENT_FLOAT32, std::move(dims));
    if (!values.empty()) std::memcpy(value->data, values.data(), values.size() * sizeof(float));
    return add_constant(graph, base, std::move(value));
}

int32_t element_type(const Graph& graph, const std::string& value) {
    if (auto it = graph.initializers.find(value); it != graph.initializers.end() && graph.is_constant(value))
        return it->second->element_type;
    if (auto it = graph.types.find(value); it != graph.types.end()) return it->second.element_type;
    return TESS_ELEMENT_UNDEFINED;
}

int64_t constant_elements(const Graph& graph, const std::string& name) {
    const auto dims = constant_dims(graph, name);
    if (!dims) return -1;
    int64_t n = 1;
    for (int64_t d : *dims) n *= d;
    return n;
}

bool fusable_activation(const Graph& graph, const Node& node, std::string& name, std::vector<float>& params) {
    if (!node.domain.empty() || node.outputs.size() != 1 || node.inputs.empty()) return false;
    const std::string& op = node.op_type;
    params.clear();
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh") {
        name = op;
        return true;
    }
    if (op == "LeakyRelu") {
        name = op;
        params = {fusion::float_attribute(node, "alpha", 0.01f)};
        return true;
    }
    if (op == "HardSigmoid") {
        name = op;
        params = {fusion::float_attribute(node, "alpha", 0.2f), fusion::float_attribute(node, "beta", 0.5f)};
        return true;
    }
    if (op == "Clip") {
        float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
        if (graph.opset_of("") < 11) {
            lo = fusion::float_attribute(node, "min", lo);
            hi = fusion::float_attribute(node, "max", hi);
        } else {
            for (size_t i = 1; i < node.inputs.size() && i < 3; ++i) {
                if (node.inputs[i].empty()) continue;
                auto bound = fusion::constant_floats(graph, node.inputs[i], 1);
                if (!bound) return false;  // bounds computed at run time, or not float32
                (i == 1 ? lo : hi) = (*bound)[0];
            }
        }
        name = op;
        params = {lo, hi};
        return true;
    }
    return false;
}

void batchnorm_scale_shift(const std::vector<float>& gamma, const std::vector<float>& beta,
                           const std::vector<float>& mean, const std::vector<float>& var, float epsilon,
                           std::vector<float>& a, std::vector<float>& b) {
    a.resize(gamma.size());
    b.resize(gamma.size());
    for (size_t c = 0; c < gamma.size(); ++c) {
        const float inv_std = 1.0f / std::sqrt(var[c] + epsilon);
        a[c] = inv_std * gamma[c];
        b[c] = beta[c] - mean[c] * a[c];
    }
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

bool apply_where_placed(Graph& graph, const PassContext& context, const std::vector<Candidate>& candidates) {
    if (!context.placement || candidates.empty()) return false;
    // Ask the providers about the fused nodes in a trial copy of the graph, and about the nodes they replace.
    // The fused nodes' domains are imported (version 1) where the model does not import them yet.
    auto import_domains = [&](Graph& g) {
        g.opsets.emplace(TESS_FUSED_OPS_DOMAIN, 1);
        for (const auto& c : candidates)
            if (!c.fused.domain.empty()) g.opsets.emplace(c.fused.domain, 1);
    };
    Graph trial = graph;
    import_domains(trial);
    std::vector<size_t> fused_indices, originals;
    for (const auto& c : candidates) {
        fused_indices.push_back(trial.nodes.size());
        trial.nodes.push_back(c.fused);
        originals.insert(originals.end(), c.nodes.begin(), c.nodes.end());
    }
    const std::vector<int> fused = context.placement(trial, fused_indices);
    const std::vector<int> original = context.placement(graph, originals);

    std::vector<bool> removed(graph.nodes.size(), false);
    std::vector<const Node*> replacement(graph.nodes.size(), nullptr);
    bool changed = false;
    for (size_t c = 0, i = 0; c < candidates.size(); ++c) {
        bool placed = c < fused.size() && fused[c] >= 0;
        for (size_t k = 0; k < candidates[c].nodes.size(); ++k, ++i)
            placed = placed && i < original.size() && original[i] == fused[c];
        if (!placed) {
            log_message(TESS_LOG_DEBUG, "optimizer",
                        candidates[c].fused.label() + " not fused: the provider that would run it does not run all "
                                                      "of the nodes it replaces");
            continue;
        }
        for (size_t n : candidates[c].nodes) removed[n] = true;
        replacement[candidates[c].nodes.back()] = &candidates[c].fused;
        changed = true;
    }
    if (!changed) return false;
    import_domains(graph);
    std::vector<Node> kept;
    kept.reserve(graph.nodes.size());
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        if (replacement[n] != nullptr) kept.push_back(*replacement[n]);
        else if (!removed[n]) kept.push_back(std::move(graph.nodes[n]));
    }
    graph.nodes = std::move(kept);
    graph.sort_topologically();  // a fused node's inputs may be produced between the nodes it replaced
    return true;
}

void erase_nodes(Graph& graph, const std::vector<bool>& removed) {
    std::vector<Node> kept;
    kept.reserve(graph.nodes.size());
    for (size_t n = 0; n < graph.nodes.size(); ++n)
        if (n >= removed.size() || !removed[n]) kept.push_back(std::move(graph.nodes[n]));
    graph.nodes = std::move(kept);
}

void erase_unread_constants(Graph& graph, const std::vector<std::string>& names) {
    std::unordered_set<std::string> read;
    for (const auto& node : graph.nodes)
        for (const auto& in : node.inputs) read.insert(in);
    for (const auto& name : names) {
        if (read.count(name)) continue;
        graph.initializers.erase(name);
        graph.types.erase(name);
    }
}

namespace {

onnx::AttributeProto named_attribute(const std::string& name, onnx::AttributeProto::AttributeType type) {
    onnx::AttributeProto attr;
    attr.set_name(name);
    attr.set_type(type);
    return attr;
}

}  // namespace

onnx::AttributeProto make_attribute(const std::string& name, const std::string& value) {
    onnx::AttributeProto attr = named_attribute(name, onnx::AttributeProto::STRING);
    attr.set_s(value);
    return attr;
}

onnx::AttributeProto make_attribute(const std::string& name, int64_t value) {
    onnx::AttributeProto attr = named_attribute(name, onnx::AttributeProto::INT);
    attr.set_i(value);
    return attr;
}

onnx::AttributeProto make_attribute(const std::string& name, float value) {
    onnx::AttributeProto attr = named_attribute(name, onnx::AttributeProto::FLOAT);
    attr.set_f(value);
    return attr;
}

onnx::AttributeProto make_attribute(const std::string& name, const std::vector<float>& values) {
    onnx::AttributeProto attr = named_attribute(name, onnx::AttributeProto::FLOATS);
    for (float v : values) attr.add_floats(v);
    return attr;
}

onnx::AttributeProto make_attribute(const std::string& name, const std::vector<int64_t>& values) {
    onnx::AttributeProto attr = named_attribute(name, onnx::AttributeProto::INTS);
    for (int64_t v : values) attr.add_ints(v);
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
