// Fuses scaled dot-product attention as exporters write it out (BERT-style encoders from PyTorch and TensorFlow):
//
//   Q' = Transpose(Reshape(q, [B, S, H, D]), perm=[0,2,1,3])           (and K', V' alike from k and v)
//   K' = Transpose(Reshape(k, ...), perm=[0,2,3,1])                     (or [0,2,1,3] followed by [0,1,3,2])
//   P  = Softmax(MatMul(Q', K') / c  [or * c]  [+ mask], axis=-1)
//   y  = Reshape(Transpose(MatMul(P, V'), perm=[0,2,1,3]), [B, S, H * D])
//
// into one Attention of the optimizer's domain (TESS_FUSED_OPS_DOMAIN: ONNX's Attention, opset 23, for models of
// any opset) on the 3-D q, k and v, with q_num_heads = kv_num_heads = H and scale 1/c (or c): the heads are read
// where the projections wrote them, so the four transposes, the scores tensor and its three elementwise passes are
// never made.  Kept only where the provider that would run every replaced node runs the fused one.  One difference:
// a query row whose mask is -inf for every key gets zero weights from the operator where the written-out Softmax
// gives NaN (exporters' masks are finite: -10000 or the type's lowest value).
#include <algorithm>
#include <cmath>

#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

bool is_default(const Node& node, const char* op, size_t inputs) {
    return node.domain.empty() && node.op_type == op && node.inputs.size() == inputs && node.outputs.size() == 1;
}

bool has_perm(const Node& transpose, std::initializer_list<int64_t> perm) {
    const onnx::AttributeProto* a = transpose.attribute("perm");
    if (a == nullptr || a->ints_size() != static_cast<int>(perm.size())) return false;
    int i = 0;
    for (int64_t p : perm)
        if (a->ints(i++) != p) return false;
    return true;
}

// The known dims of a value ("has_shape" with -1 for unknown ones), or nullopt.
std::optional<std::vector<int64_t>> dims_of(const Graph& graph, const std::string& value) {
    auto it = graph.types.find(value);
    if (it == graph.types.end() || !it->second.has_shape) return std::nullopt;
    return it->second.dims;
}

// A dimension: its size when known, else the symbolic name it has ("" when none).
struct Dim {
    int64_t size = -1;
    std::string name;
    bool same_as(const Dim& other) const {
        return size > 0 ? size == other.size : !name.empty() && other.size < 0 && name == other.name;
    }
};

Dim dim_of(const Graph& graph, const std::string& value, size_t axis) {
    auto it = graph.types.find(value);
    if (it == graph.types.end() || !it->second.has_shape || axis >= it->second.dims.size()) return {};
    const TypeInfo& t = it->second;
    return {t.dims[axis], axis < t.dim_params.size() ? t.dim_params[axis] : std::string()};
}

struct AttentionMatch {
    std::vector<size_t> nodes;  // the last one produces y
    std::string q, k, v, mask, y;
    int64_t heads = 0;
    float scale = 1.0f;
};

class FuseAttention : public GraphPass {
public:
    const char* name() const override { return "fuse-attention"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement) return false;
        std::vector<fusion::Candidate> candidates;
        for (const AttentionMatch& m : find(graph)) candidates.push_back({m.nodes, make_attention(m)});
        return fusion::apply_where_placed(graph, context, candidates);
    }

private:
    static Node make_attention(const AttentionMatch& m) {
        Node attention;
        attention.name = m.y + "_attention";
        attention.op_type = "Attention";
        attention.domain = TESS_FUSED_OPS_DOMAIN;
        attention.inputs = {m.q, m.k, m.v};
        if (!m.mask.empty()) attention.inputs.push_back(m.mask);
        attention.outputs = {m.y};
        attention.attributes = {fusion::make_attribute("q_num_heads", m.heads),
                                fusion::make_attribute("kv_num_heads", m.heads),
                                fusion::make_attribute("scale", m.scale)};
        return attention;
    }

    // `head` = Transpose(perm)(Reshape(x, [_, _, H, D])), read only by `reader` and each value of the chain only by
    // the next node: x (3-D float32, its last dim H * D), the chain's nodes (Reshape first), H and D.  K' (`key`)
    // is transposed for the product: perm [0,2,3,1], or [0,2,1,3] then [0,1,3,2].
    struct SplitHeads {
        std::string x;
        std::vector<size_t> nodes;
        int64_t heads = 0, dim = 0;
    };
    static std::optional<SplitHeads> split_heads(const fusion::ChainWalk& walk,
                                                 const std::unordered_map<std::string, size_t>& producers,
                                                 const std::string& head, size_t reader, bool key) {
        const Graph& graph = walk.graph;
        size_t only = 0;
        if (!walk.single_reader(head, only) || only != reader) return std::nullopt;
        auto t = producers.find(head);
        if (t == producers.end() || walk.taken[t->second]) return std::nullopt;
        const Node& transpose = graph.nodes[t->second];
        if (!is_default(transpose, "Transpose", 1)) return std::nullopt;
        SplitHeads s;
        std::string reshaped = transpose.inputs[0];
        if (key && has_perm(transpose, {0, 1, 3, 2})) {
            // K' as [0,2,1,3] then [0,1,3,2].
            auto first = producers.find(reshaped);
            if (first == producers.end() || walk.taken[first->second] || !walk.single_reader(reshaped, only) ||
                only != t->second)
                return std::nullopt;
            const Node& inner = graph.nodes[first->second];
            if (!is_default(inner, "Transpose", 1) || !has_perm(inner, {0, 2, 1, 3})) return std::nullopt;
            s.nodes.push_back(first->second);
            reshaped = inner.inputs[0];
            only = first->second;
        } else if (!has_perm(transpose, key ? std::initializer_list<int64_t>{0, 2, 3, 1}
                                            : std::initializer_list<int64_t>{0, 2, 1, 3})) {
            return std::nullopt;
        } else {
            only = t->second;
        }
        const size_t transpose_reader = only;
        auto r = producers.find(reshaped);
        if (r == producers.end() || walk.taken[r->second] || !walk.single_reader(reshaped, only) ||
            only != transpose_reader)
            return std::nullopt;
        const Node& reshape = graph.nodes[r->second];
        if (!is_default(reshape, "Reshape", 2) || fusion::int_attribute(reshape, "allowzero", 0) != 0)
            return std::nullopt;
        const auto target = fusion::constant_int64s(graph, reshape.inputs[1]);
        const auto x_dims = dims_of(graph, reshape.inputs[0]);
        if (!target || target->size() != 4 || !x_dims || x_dims->size() != 3) return std::nullopt;
        s.heads = (*target)[2];
        s.dim = (*target)[3];
        // [B, S, H * D] -> [B, S, H, D]: the leading two kept (0 copies, -1 infers, or the dims themselves).
        if (s.heads <= 0 || s.dim <= 0 || (*x_dims)[2] != s.heads * s.dim) return std::nullopt;
        for (int i = 0; i < 2; ++i) {
            const int64_t want = (*target)[static_cast<size_t>(i)];
            if (want != 0 && want != -1 && want != (*x_dims)[static_cast<size_t>(i)]) return std::nullopt;
        }
        if ((*target)[0] == -1 && (*target)[1] == -1) return std::nullopt;
        if (fusion::element_type(graph, reshape.inputs[0]) != TESS_ELEMENT_FLOAT32) return std::nullopt;
        s.x = reshape.inputs[0];
        s.nodes.insert(s.nodes.begin(), r->second);
        s.nodes.push_back(t->second);
        return s;
    }

    static std::vector<AttentionMatch> find(const Graph& graph) {
        std::vector<AttentionMatch> matches;
        fusion::ChainWalk walk(graph);
        const auto producers = graph.producers();
        auto producer_of = [&](const std::string& value, size_t reader) -> std::optional<size_t> {
            auto p = producers.find(value);
            size_t only = 0;
            if (p == producers.end() || walk.taken[p->second] || !walk.single_reader(value, only) || only != reader)
                return std::nullopt;
            return p->second;
        };
        for (size_t s = 0; s < graph.nodes.size(); ++s) {
            const Node& softmax = graph.nodes[s];
            if (!is_default(softmax, "Softmax", 1) || walk.taken[s]) continue;
            const int64_t axis = fusion::int_attribute(softmax, "axis", graph.opset_of("") >= 13 ? -1 : 1);
            if (axis != -1 && axis != 3) continue;
            AttentionMatch m;
            std::vector<size_t> score_nodes;
            // [+ mask]
            std::string scores = softmax.inputs[0];
            auto node_of = producer_of(scores, s);
            if (!node_of) continue;
            size_t at = *node_of;
            if (is_default(graph.nodes[at], "Add", 2)) {
                const Node& add = graph.nodes[at];
                // The scaled scores are the operand a Div or Mul of this chain makes; the mask is the other one.
                // (A mask may be a Mul of its own: the scaled scores are the Div or Mul of a MatMul's product.)
                int scored = -1;
                for (int i = 0; i < 2 && scored < 0; ++i) {
                    auto p = producer_of(add.inputs[static_cast<size_t>(i)], at);
                    if (!p || !(is_default(graph.nodes[*p], "Div", 2) || is_default(graph.nodes[*p], "Mul", 2)))
                        continue;
                    for (const std::string& operand : graph.nodes[*p].inputs) {
                        auto product = producers.find(operand);
                        if (product != producers.end() && is_default(graph.nodes[product->second], "MatMul", 2))
                            scored = i;
                    }
                }
                if (scored < 0) continue;
                m.mask = add.inputs[static_cast<size_t>(1 - scored)];
                if (fusion::element_type(graph, m.mask) != TESS_ELEMENT_FLOAT32) continue;
                score_nodes.push_back(at);
                scores = add.inputs[static_cast<size_t>(scored)];
                node_of = producer_of(scores, at);
                if (!node_of) continue;
                at = *node_of;
            }
            // / c or * c, c a constant scalar.
            const Node& scaling = graph.nodes[at];
            if (!is_default(scaling, "Div", 2) && !is_default(scaling, "Mul", 2)) continue;
            const bool divide = scaling.op_type == "Div";
            int product_operand = 0;
            auto c = fusion::constant_floats(graph, scaling.inputs[1], 1);
            if (!c && !divide) {
                c = fusion::constant_floats(graph, scaling.inputs[0], 1);
                product_operand = 1;
            }
            if (!c || (*c)[0] == 0.0f || !std::isfinite((*c)[0])) continue;
            m.scale = divide ? 1.0f / (*c)[0] : (*c)[0];
            score_nodes.push_back(at);
            const std::string product = scaling.inputs[static_cast<size_t>(product_operand)];
            node_of = producer_of(product, at);
            if (!node_of || !is_default(graph.nodes[*node_of], "MatMul", 2)) continue;
            const size_t qk = *node_of;
            score_nodes.push_back(qk);
            // P V, then the heads merged.
            size_t pv = 0;
            if (!walk.single_reader(softmax.outputs[0], pv) || !is_default(graph.nodes[pv], "MatMul", 2) ||
                graph.nodes[pv].inputs[0] != softmax.outputs[0])
                continue;
            size_t merge_t = 0, merge_r = 0;
            if (!walk.single_reader(graph.nodes[pv].outputs[0], merge_t) ||
                !is_default(graph.nodes[merge_t], "Transpose", 1) || !has_perm(graph.nodes[merge_t], {0, 2, 1, 3}) ||
                !walk.single_reader(graph.nodes[merge_t].outputs[0], merge_r) ||
                !is_default(graph.nodes[merge_r], "Reshape", 2) ||
                fusion::int_attribute(graph.nodes[merge_r], "allowzero", 0) != 0)
                continue;
            const auto q = split_heads(walk, producers, graph.nodes[qk].inputs[0], qk, false);
            const auto k = split_heads(walk, producers, graph.nodes[qk].inputs[1], qk, true);
            const auto v = split_heads(walk, producers, graph.nodes[pv].inputs[1], pv, false);
            if (!q || !k || !v || q->heads != k->heads || k->heads != v->heads || q->dim != k->dim) continue;
            // The merge gives [B, S, H * Dv]: q's leading dims kept (0 copies one, -1 infers one), the heads joined.
            const auto merged = fusion::constant_int64s(graph, graph.nodes[merge_r].inputs[1]);
            const auto q_dims = dims_of(graph, q->x);
            const auto k_dims = dims_of(graph, k->x);
            if (!merged || merged->size() != 3 || !q_dims || !k_dims) continue;
            // One batch for Q, K and V (the written-out products would broadcast a batch of 1; the operator does
            // not), and one key count for K and V.
            if (!dim_of(graph, q->x, 0).same_as(dim_of(graph, k->x, 0)) ||
                !dim_of(graph, q->x, 0).same_as(dim_of(graph, v->x, 0)) ||
                !dim_of(graph, k->x, 1).same_as(dim_of(graph, v->x, 1)))
                continue;
            if (std::count(merged->begin(), merged->end(), -1) > 1) continue;
            if ((*merged)[2] != v->heads * v->dim && (*merged)[2] != -1) continue;
            bool leading_kept = true;
            for (size_t i = 0; i < 2; ++i) {
                const int64_t want = (*merged)[i];
                leading_kept = leading_kept && (want == 0 || want == -1 || (want > 0 && want == (*q_dims)[i]));
            }
            if (!leading_kept) continue;
            // The mask must broadcast to the scores [B, H, S, T] (the fused operator broadcasts it that way; an Add
            // that broadcast the scores up instead would not be the same): each of its dims 1 or the known one.
            if (!m.mask.empty()) {
                const Dim scores_dims[4] = {dim_of(graph, q->x, 0), {q->heads, ""}, dim_of(graph, q->x, 1),
                                            dim_of(graph, k->x, 1)};
                const auto mask_dims = dims_of(graph, m.mask);
                bool broadcasts = mask_dims && mask_dims->size() <= 4;
                for (size_t i = 0; broadcasts && i < mask_dims->size(); ++i) {
                    const Dim dim = dim_of(graph, m.mask, mask_dims->size() - 1 - i);
                    broadcasts = dim.size == 1 || dim.same_as(scores_dims[3 - i]);
                }
                if (!broadcasts) continue;
            }
            m.q = q->x;
            m.k = k->x;
            m.v = v->x;
            m.heads = q->heads;
            m.y = graph.nodes[merge_r].outputs[0];
            for (const SplitHeads* part : {&*q, &*k, &*v}) m.nodes.insert(m.nodes.end(), part->nodes.begin(), part->nodes.end());
            m.nodes.insert(m.nodes.end(), score_nodes.rbegin(), score_nodes.rend());
            m.nodes.insert(m.nodes.end(), {s, pv, merge_t, merge_r});
            for (size_t n : m.nodes) walk.taken[n] = true;
            matches.push_back(std::move(m));
        }
        return matches;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_attention_pass() { return std::make_unique<FuseAttention>(); }

}  // namespace tessera
