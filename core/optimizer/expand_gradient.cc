// Expands ai.onnx.preview.training Gradient nodes into ordinary ONNX nodes by reverse-mode differentiation of the
// graph, so any provider can run them.  The differentiable set is the elementwise arithmetic the preview operator is
// used with (Add, Sub, Mul, Div, Neg, Identity) on operands of equal shape; anything else is a clear error.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/status.h"
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

class GradientBuilder {
public:
    GradientBuilder(Graph& graph, const Node& gradient, size_t id) : graph_(graph), gradient_(gradient), id_(id) {
        // The names the expansion must not reuse: a generated value named like one of the model's would give that
        // value two producers.
        for (const auto& node : graph_.nodes) {
            taken_.insert(node.inputs.begin(), node.inputs.end());
            taken_.insert(node.outputs.begin(), node.outputs.end());
        }
        taken_.insert(graph_.inputs.begin(), graph_.inputs.end());
        taken_.insert(graph_.outputs.begin(), graph_.outputs.end());
        for (const auto& [name, value] : graph_.initializers) taken_.insert(name);
        for (const auto& [name, type] : graph_.types) taken_.insert(name);
    }

    std::vector<Node> build() {
        const onnx::AttributeProto* xs_attr = gradient_.attribute("xs");
        const onnx::AttributeProto* y_attr = gradient_.attribute("y");
        if (xs_attr == nullptr || y_attr == nullptr)
            fail(TESS_STATUS_INVALID_MODEL, "Gradient node {} needs attributes 'xs' and 'y'", gradient_.label());
        std::vector<std::string> xs(xs_attr->strings().begin(), xs_attr->strings().end());
        if (xs.size() != gradient_.outputs.size())
            fail(TESS_STATUS_INVALID_MODEL, "Gradient node {} has {} outputs for {} xs", gradient_.label(),
                 gradient_.outputs.size(), xs.size());
        const std::string& y = y_attr->s();
        auto type = graph_.types.find(y);
        if (type == graph_.types.end() || type->second.element_type == TESS_ELEMENT_UNDEFINED)
            fail(TESS_STATUS_NOT_IMPLEMENTED, "Gradient node {}: the element type of '{}' is unknown", gradient_.label(), y);

        // dy/dy = ones shaped like y.
        std::string shape = add("Shape", {y});
        Node& seed = emit("ConstantOfShape", {shape});
        onnx::AttributeProto value;
        value.set_name("value");
        value.set_type(onnx::AttributeProto::TENSOR);
        value.mutable_t()->set_data_type(type->second.element_type);
        value.mutable_t()->add_dims(1);
        std::string one_bytes = one_of(type->second.element_type);
        value.mutable_t()->set_raw_data(one_bytes);
        seed.attributes.push_back(value);
        grads_[y] = seed.outputs[0];

        auto producer = graph_.producers();
        for (size_t k = graph_.nodes.size(); k-- > 0;) {
            const Node& node = graph_.nodes[k];
            if (node.domain == kTrainingDomain) continue;
            if (node.outputs.size() != 1 || !grads_.count(node.outputs[0])) continue;
            backward(node, grads_.at(node.outputs[0]));
        }
        for (size_t i = 0; i < xs.size(); ++i) {
            auto it = grads_.find(xs[i]);
            // An x that y does not depend on has a zero gradient.
            std::string grad = it != grads_.end() ? it->second : add("Sub", {xs[i], xs[i]});
            emit("Identity", {grad}, gradient_.outputs[i]);
        }
        return std::move(nodes_);
    }

private:
    static std::string one_of(int32_t type) {
        switch (type) {
            case TESS_ELEMENT_FLOAT32: { float v = 1; return std::string(reinterpret_cast<char*>(&v), sizeof v); }
            case TESS_ELEMENT_FLOAT64: { double v = 1; return std::string(reinterpret_cast<char*>(&v), sizeof v); }
            default: fail(TESS_STATUS_NOT_IMPLEMENTED, "Gradient supports float and double, not {}", element_type_name(type));
        }
    }

    void same_shape(const Node& node) {
        const auto& out = graph_.types[node.outputs[0]];
        for (const auto& in : node.inputs) {
            auto t = graph_.types.find(in);
            if (t != graph_.types.end() && t->second.has_shape && out.has_shape && t->second.dims != out.dims)
                fail(TESS_STATUS_NOT_IMPLEMENTED, "Gradient through broadcasting {} is not supported", node.label());
        }
    }

    void backward(const Node& node, const std::string& g) {
        const std::string& op = node.op_type;
        if (!node.domain.empty())
            fail(TESS_STATUS_NOT_IMPLEMENTED, "Gradient cannot differentiate {}", node.label());
        same_shape(node);
        const auto& in = node.inputs;
        // The nodes were only checked to be well formed graph-wise: one with the wrong number of inputs for its
        // operator (or an omitted one) is reported here, before in[0] or in[1] is read.
        const bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div";
        const bool unary = op == "Neg" || op == "Identity";
        const size_t needed = binary ? 2 : 1;
        const bool omitted = std::any_of(in.begin(), in.end(), [](const std::string& n) { return n.empty(); });
        if ((binary || unary) && (in.size() != needed || omitted))
            fail(TESS_STATUS_INVALID_MODEL, "Gradient: {} needs {} input(s), it has {}", node.label(), needed,
                 in.size());
        if (op == "Add") {
            accumulate(in[0], g);
            accumulate(in[1], g);
        } else if (op == "Sub") {
            accumulate(in[0], g);
            accumulate(in[1], add("Neg", {g}));
        } else if (op == "Mul") {
            accumulate(in[0], add("Mul", {g, in[1]}));
            accumulate(in[1], add("Mul", {g, in[0]}));
        } else if (op == "Div") {
            accumulate(in[0], add("Div", {g, in[1]}));
            // d(a/b)/db = -a / b^2
            accumulate(in[1], add("Neg", {add("Div", {add("Mul", {g, in[0]}), add("Mul", {in[1], in[1]})})}));
        } else if (op == "Neg") {
            accumulate(in[0], add("Neg", {g}));
        } else if (op == "Identity") {
            accumulate(in[0], g);
        } else {
            fail(TESS_STATUS_NOT_IMPLEMENTED, "Gradient cannot differentiate {}", node.label());
        }
    }

    void accumulate(const std::string& value, const std::string& g) {
        auto it = grads_.find(value);
        if (it == grads_.end()) grads_[value] = g;
        else it->second = add("Add", {it->second, g});
    }

    Node& emit(const std::string& op, std::vector<std::string> inputs, std::string output = {}) {
        Node node;
        node.op_type = op;
        node.name = fmt::format("{}/grad{}/{}{}", gradient_.name, id_, op, nodes_.size());
        node.inputs = std::move(inputs);
        if (output.empty()) {
            const std::string base = fmt::format("{}/grad{}/v{}", gradient_.name, id_, nodes_.size());
            output = base;
            for (int suffix = 1; taken_.count(output); ++suffix) output = fmt::format("{}_{}", base, suffix);
            taken_.insert(output);
        }
        node.outputs = {output};
        nodes_.push_back(std::move(node));
        return nodes_.back();
    }

    std::string add(const std::string& op, std::vector<std::string> inputs) {
        return emit(op, std::move(inputs)).outputs[0];
    }

    Graph& graph_;
    const Node& gradient_;
    size_t id_;
    std::vector<Node> nodes_;
    std::unordered_map<std::string, std::string> grads_;
    std::unordered_set<std::string> taken_;
};

class ExpandGradient : public GraphPass {
public:
    const char* name() const override { return "expand-gradient"; }
    bool required() const override { return true; }

    bool run(Graph& graph, const PassContext&) const override {
        bool changed = false;
        for (size_t k = 0; k < graph.nodes.size(); ++k) {
            if (graph.nodes[k].domain != kTrainingDomain || graph.nodes[k].op_type != "Gradient") continue;
            Node gradient = graph.nodes[k];
            std::vector<Node> expansion = GradientBuilder(graph, gradient, k).build();
            graph.nodes.erase(graph.nodes.begin() + static_cast<long>(k));
            graph.nodes.insert(graph.nodes.end(), expansion.begin(), expansion.end());
            changed = true;
            --k;
        }
        if (changed) graph.sort_topologically();
        return changed;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_expand_gradient_pass() { return std::make_unique<ExpandGradient>(); }

}  // namespace tessera
