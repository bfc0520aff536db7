// Fuses GELU written out with Erf, as exporters of models older than ONNX's Gelu (opset 20) write it:
//   y = (x * (Erf(x / sqrt(2)) + 1)) * 0.5     or     y = (x * 0.5) * (Erf(x / sqrt(2)) + 1)
// (x / sqrt(2) also as x * (1 / sqrt(2)); every Add and Mul in either operand order) into one Gelu of the
// optimizer's domain (TESS_FUSED_OPS_DOMAIN): one pass over the activations instead of five.  Kept only where the
// provider that would run every replaced node runs the fused one.
#include <cmath>

#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

bool is_scalar_constant(const Graph& graph, const std::string& name, double value) {
    auto v = fusion::constant_floats(graph, name, 1);
    return v && std::abs(double((*v)[0]) - value) <= 1e-6 * std::max(1.0, std::abs(value));
}

// The input other than `known` of a two-input default-domain `op` node, or "" when the node is not one.
std::string other_input(const Node& node, const char* op, const std::string& known) {
    if (!node.domain.empty() || node.op_type != op || node.inputs.size() != 2 || node.outputs.size() != 1) return {};
    if (node.inputs[0] == known && node.inputs[1] != known) return node.inputs[1];
    if (node.inputs[1] == known && node.inputs[0] != known) return node.inputs[0];
    return {};
}

struct GeluMatch {
    std::vector<size_t> nodes;  // in graph order of discovery; the last one produces y
    std::string x, y;
};

class FuseGelu : public GraphPass {
public:
    const char* name() const override { return "fuse-gelu"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement) return false;
        std::vector<fusion::Candidate> candidates;
        for (const GeluMatch& m : find(graph)) candidates.push_back({m.nodes, make_gelu(m)});
        return fusion::apply_where_placed(graph, context, candidates);
    }

private:
    static Node make_gelu(const GeluMatch& m) {
        Node gelu;
        gelu.name = m.y + "_gelu";
        gelu.op_type = "Gelu";
        gelu.domain = TESS_FUSED_OPS_DOMAIN;
        gelu.inputs = {m.x};
        gelu.outputs = {m.y};
        gelu.attributes.push_back(fusion::make_attribute("approximate", std::string("none")));
        return gelu;
    }

    static std::vector<GeluMatch> find(const Graph& graph) {
        std::vector<GeluMatch> matches;
        auto readers = fusion::consumers(graph);
        auto producers = graph.producers();
        std::vector<bool> taken(graph.nodes.size(), false);
        auto sole_reader = [&](const std::string& value, size_t& reader) {
            auto it = readers.find(value);
            if (it == readers.end() || it->second.size() != 1) return false;
            reader = it->second[0];
            return !taken[reader] && fusion::only_feeds(graph, readers, value, reader);
        };
        for (size_t e = 0; e < graph.nodes.size(); ++e) {
            const Node& erf = graph.nodes[e];
            if (!erf.domain.empty() || erf.op_type != "Erf" || erf.inputs.size() != 1 || erf.outputs.size() != 1)
                continue;
            // x / sqrt(2) or x * (1 / sqrt(2)), read only by the Erf.
            auto scaled = producers.find(erf.inputs[0]);
            if (scaled == producers.end() || taken[scaled->second]) continue;
            const Node& scale = graph.nodes[scaled->second];
            size_t reader = 0;
            if (!sole_reader(erf.inputs[0], reader) || reader != e) continue;
            std::string x;
            if (scale.domain.empty() && scale.op_type == "Div" && scale.inputs.size() == 2 &&
                is_scalar_constant(graph, scale.inputs[1], std::sqrt(2.0))) {
                x = scale.inputs[0];
            } else if (scale.domain.empty() && scale.op_type == "Mul" && scale.inputs.size() == 2) {
                if (is_scalar_constant(graph, scale.inputs[1], std::sqrt(0.5))) x = scale.inputs[0];
                else if (is_scalar_constant(graph, scale.inputs[0], std::sqrt(0.5))) x = scale.inputs[1];
            }
            if (x.empty() || graph.is_constant(x)) continue;
            // Erf(.) + 1
            size_t add = 0;
            if (!sole_reader(erf.outputs[0], add)) continue;
            const std::string one = other_input(graph.nodes[add], "Add", erf.outputs[0]);
            if (one.empty() || !is_scalar_constant(graph, one, 1.0)) continue;
            const std::string& a = graph.nodes[add].outputs[0];
            GeluMatch m;
            m.x = x;
            m.nodes = {scaled->second, e, add};
            size_t mul = 0;
            if (!sole_reader(a, mul)) continue;
            const std::string partner = other_input(graph.nodes[mul], "Mul", a);
            if (partner == x) {
                // (x * a) * 0.5
                size_t half = 0;
                if (!sole_reader(graph.nodes[mul].outputs[0], half)) continue;
                const std::string c = other_input(graph.nodes[half], "Mul", graph.nodes[mul].outputs[0]);
                if (c.empty() || !is_scalar_constant(graph, c, 0.5)) continue;
                m.nodes.push_back(mul);
                m.nodes.push_back(half);
                m.y = graph.nodes[half].outputs[0];
            } else {
                // (x * 0.5) * a: the partner is x * 0.5, read only here.
                auto halved = producers.find(partner);
                if (halved == producers.end() || taken[halved->second]) continue;
                const std::string c = other_input(graph.nodes[halved->second], "Mul", x);
                if (c.empty() || !is_scalar_constant(graph, c, 0.5)) continue;
                size_t partner_reader = 0;
                if (!sole_reader(partner, partner_reader) || partner_reader != mul) continue;
                m.nodes.push_back(halved->second);
                m.nodes.push_back(mul);
                m.y = graph.nodes[mul].outputs[0];
            }
            auto x_type = graph.types.find(x);
            if (x_type == graph.types.end() || x_type->second.element_type != TESS_ELEMENT_FLOAT32) continue;
            for (size_t n : m.nodes) taken[n] = true;
            matches.push_back(std::move(m));
        }
        return matches;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_gelu_pass() { return std::make_unique<FuseGelu>(); }

}  // namespace tessera
