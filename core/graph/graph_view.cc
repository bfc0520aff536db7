#include "graph/graph_view.h"

#include <unordered_set>

#include "common/status.h"
#include "model/tensor_proto.h"

namespace tessera {

template <typename T> const T* GraphViewBuilder::keep(std::vector<T> items) {
    auto stored = std::make_shared<std::vector<T>>(std::move(items));
    arrays_.push_back(stored);
    return stored->data();
}

const TypeInfo* GraphViewBuilder::find_type(const std::string& name) const {
    auto it = graph_.types.find(name);
    if (it != graph_.types.end()) return &it->second;
    return parent_ != nullptr ? parent_->find_type(name) : nullptr;
}

const TessValueView* GraphViewBuilder::value(const std::string& name) {
    if (name.empty()) return nullptr;
    auto it = values_.find(name);
    if (it != values_.end()) return it->second;
    TessValueView view{};
    view.struct_size = sizeof(TessValueView);
    view.name = strings_.emplace_back(name).c_str();
    view.rank = -1;
    if (const TypeInfo* type = find_type(name)) {
        view.kind = type->kind;
        view.element_type = type->element_type;
        if (type->has_shape) {
            view.rank = static_cast<int64_t>(type->dims.size());
            view.dims = keep(type->dims);
        }
    }
    if (graph_.is_constant(name)) {
        const TessValue& constant = *graph_.initializers.at(name);
        view.constant = &constant;
        view.kind = constant.kind;
        view.element_type = constant.element_type;
        view.rank = static_cast<int64_t>(constant.dims.size());
        // A copy: a constant every reader has released (compile_release_constant) is freed during the compile,
        // while the view, its dims included, must stay valid until the compile returns.
        view.dims = keep(constant.dims);
    }
    const TessValueView* stored = &value_store_.emplace_back(view);
    values_[name] = stored;
    return stored;
}

const TessAttributeView* GraphViewBuilder::attribute(const onnx::AttributeProto& attr, const Node& node) {
    TessAttributeView view{};
    view.struct_size = sizeof(TessAttributeView);
    view.name = strings_.emplace_back(attr.name()).c_str();
    view.type = attr.type();
    auto what = [&] { return fmt::format("attribute '{}' of node {}", attr.name(), node.label()); };
    switch (attr.type()) {
        case onnx::AttributeProto::FLOAT: view.f = attr.f(); break;
        case onnx::AttributeProto::INT: view.i = attr.i(); break;
        case onnx::AttributeProto::STRING:
            view.s = strings_.emplace_back(attr.s()).data();
            view.s_len = attr.s().size();
            break;
        case onnx::AttributeProto::FLOATS:
            view.count = static_cast<size_t>(attr.floats_size());
            view.floats = keep(std::vector<float>(attr.floats().begin(), attr.floats().end()));
            break;
        case onnx::AttributeProto::INTS:
            view.count = static_cast<size_t>(attr.ints_size());
            view.ints = keep(std::vector<int64_t>(attr.ints().begin(), attr.ints().end()));
            break;
        case onnx::AttributeProto::STRINGS: {
            std::vector<const char*> ptrs;
            std::vector<size_t> lens;
            for (const auto& s : attr.strings()) {
                ptrs.push_back(strings_.emplace_back(s).data());
                lens.push_back(s.size());
            }
            view.count = ptrs.size();
            view.strings = keep(std::move(ptrs));
            view.string_lens = keep(std::move(lens));
            break;
        }
        case onnx::AttributeProto::TENSOR:
            tensors_.push_back(tensor_from_proto(attr.t(), ExternalDataPolicy{}, what()));
            view.tensor = tensors_.back().get();
            break;
        case onnx::AttributeProto::TENSORS: {
            std::vector<const TessValue*> ptrs;
            for (const auto& t : attr.tensors()) {
                tensors_.push_back(tensor_from_proto(t, ExternalDataPolicy{}, what()));
                ptrs.push_back(tensors_.back().get());
            }
            view.count = ptrs.size();
            view.tensors = keep(std::move(ptrs));
            break;
        }
        case onnx::AttributeProto::GRAPH:
        case onnx::AttributeProto::GRAPHS: {
            std::vector<const TessGraphView*> bodies;
            for (const auto& [attr_name, body] : node.subgraphs)
                if (attr_name == attr.name()) bodies.push_back(children_.emplace_back(*body, this).build_body());
            if (attr.type() == onnx::AttributeProto::GRAPH) {
                view.graph = bodies.empty() ? nullptr : bodies[0];
            } else {
                view.count = bodies.size();
                view.graphs = keep(std::move(bodies));
            }
            break;
        }
        default:
            break;
    }
    return &attribute_store_.emplace_back(view);
}

const TessGraphView* GraphViewBuilder::build_body() {
    std::vector<size_t> all(graph_.nodes.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<std::string> outputs = graph_.outputs;
    const TessGraphView* view = build(all, &outputs);
    // A body's inputs are its formal parameters, in order, whether or not a node reads them.
    std::vector<const TessValueView*> formal;
    for (const auto& name : graph_.inputs) formal.push_back(value(name));
    TessGraphView body = *view;
    body.input_count = formal.size();
    body.inputs = keep(std::move(formal));
    input_names_ = graph_.inputs;
    return &graph_store_.emplace_back(body);
}

const TessGraphView* GraphViewBuilder::build(const std::vector<size_t>& node_indices,
                                             const std::vector<std::string>* outputs) {
    std::unordered_set<std::string> produced;
    std::unordered_set<size_t> members(node_indices.begin(), node_indices.end());
    for (size_t i : node_indices)
        for (const auto& out : graph_.nodes[i].outputs)
            if (!out.empty()) produced.insert(out);

    input_names_.clear();
    output_names_.clear();
    std::unordered_set<std::string> seen_inputs;
    std::vector<const TessNodeView*> nodes;
    for (size_t i : node_indices) {
        const Node& node = graph_.nodes[i];
        TessNodeView view{};
        view.struct_size = sizeof(TessNodeView);
        view.index = i;
        view.name = strings_.emplace_back(node.name).c_str();
        view.op_type = strings_.emplace_back(node.op_type).c_str();
        view.domain = strings_.emplace_back(node.domain).c_str();
        view.opset = graph_.opset_of(node.domain);
        std::vector<const TessValueView*> ins, outs;
        for (const auto& in : node.inputs) ins.push_back(value(in));
        for (const auto& in : node.reads())
            if (!produced.count(in) && !graph_.is_constant(in) && seen_inputs.insert(in).second)
                input_names_.push_back(in);
        std::vector<const TessValueView*> implicit;
        for (const auto& in : node.implicit_inputs) implicit.push_back(value(in));
        view.implicit_input_count = implicit.size();
        view.implicit_inputs = keep(std::move(implicit));
        for (const auto& out : node.outputs) outs.push_back(value(out));
        std::vector<const TessAttributeView*> attrs;
        for (const auto& attr : node.attributes) attrs.push_back(attribute(attr, node));
        view.input_count = ins.size();
        view.inputs = keep(std::move(ins));
        view.output_count = outs.size();
        view.outputs = keep(std::move(outs));
        view.attribute_count = attrs.size();
        view.attributes = keep(std::move(attrs));
        nodes.push_back(&node_store_.emplace_back(view));
    }

    if (outputs != nullptr) {
        output_names_ = *outputs;
    } else {
        std::unordered_set<std::string> used_outside;
        for (size_t i = 0; i < graph_.nodes.size(); ++i) {
            if (members.count(i)) continue;
            for (const auto& in : graph_.nodes[i].reads()) used_outside.insert(in);
        }
        for (size_t i : node_indices)
            for (const auto& out : graph_.nodes[i].outputs)
                if (!out.empty() && (used_outside.count(out) || graph_.is_graph_output(out)))
                    output_names_.push_back(out);
    }

    std::vector<const TessValueView*> ins, outs;
    for (const auto& name : input_names_) ins.push_back(value(name));
    for (const auto& name : output_names_) outs.push_back(value(name));
    std::vector<const char*> domains;
    std::vector<int64_t> versions;
    for (const auto& [domain, version] : graph_.opsets) {
        domains.push_back(strings_.emplace_back(domain).c_str());
        versions.push_back(version);
    }

    TessGraphView view{};
    view.struct_size = sizeof(TessGraphView);
    view.name = strings_.emplace_back(graph_.name).c_str();
    view.node_count = nodes.size();
    view.nodes = keep(std::move(nodes));
    view.input_count = ins.size();
    view.inputs = keep(std::move(ins));
    view.output_count = outs.size();
    view.outputs = keep(std::move(outs));
    view.opset_count = domains.size();
    view.opset_domains = keep(std::move(domains));
    view.opset_versions = keep(std::move(versions));
    return &graph_store_.emplace_back(view);
}

}  // namespace tessera
