// Turns DequantizeLinear -> [float operators that map each element on its own, per channel] -> QuantizeLinear into
// one table lookup (TESS_FUSED_OPS_DOMAIN QuantizedLookup):
//
//   DQ(x 8-bit) -> BatchNormalization / Relu / Clip / Sigmoid / Mul by a per-channel constant / ... -> Q   => lookup
//
// quantize_static writes this group wherever a float operator it does not quantize sits between two quantized ones
// (a BatchNormalization left unfolded behind a Conv, an activation): onnxruntime runs it as three float passes.
// With per-tensor quantization on both ends and operators whose output element depends only on the same input
// element and its channel, the group maps each of the 256 input values of a channel to one output value, so it is
// a [C, 256] table.  The table is computed when the session is created by evaluating the group's own nodes (the
// provider's kernels) on every 8-bit value, so that the lookup gives exactly what the three passes gave.
//
// Then, on what quantize_static leaves around its integer operators (each fused node computing exactly what the
// nodes it replaces compute, and kept only where their provider runs it):
//   - the lookup joins the QLinearConv or per-tensor QuantizeLinear making its input (fold_into_producers);
//   - a pointwise QLinearConv's DequantizeLinear read by convolutions joins it as QLinearConvToFloat
//     (fold_dequantization);
//   - DQ(a) + DQ(b) [-> Relu] -> Q, a residual addition, becomes QuantizedAdd (fold_additions).
#include <fmt/format.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

constexpr int64_t kEntries = 256;

using fusion::constant_elements;
using fusion::element_type;
using fusion::is_8bit;

// A DequantizeLinear (`op`) or QuantizeLinear with one constant scale and zero point and 8-bit quantized values.
bool per_tensor_8bit(const Graph& graph, const Node& node, const char* op) {
    if (!node.domain.empty() || node.op_type != op || node.inputs.size() != 3 || node.outputs.size() != 1 ||
        node.inputs[2].empty())
        return false;
    if (fusion::int_attribute(node, "block_size", 0) != 0) return false;
    if (constant_elements(graph, node.inputs[1]) != 1 || constant_elements(graph, node.inputs[2]) != 1) return false;
    const auto zero = graph.initializers.find(node.inputs[2]);
    return zero != graph.initializers.end() && is_8bit(zero->second->element_type);
}

// How an operator of the chain maps its data input `data` (rank `rank`, `channels` on axis 1): element by element
// alike everywhere, per channel, or not in a way a table can hold.
enum class Mapping { Elementwise, PerChannel, None };

// A constant operand of an elementwise binary operator that broadcasts per channel at most: every dimension 1 but
// the one that lines up with the data's axis 1, which may be the channel count.
Mapping constant_operand(const Graph& graph, const std::string& name, size_t rank, int64_t channels) {
    const auto dims = fusion::constant_dims(graph, name);
    if (!dims || dims->size() > rank) return Mapping::None;
    Mapping mapping = Mapping::Elementwise;
    const size_t offset = rank - dims->size();
    for (size_t i = 0; i < dims->size(); ++i) {
        if ((*dims)[i] == 1) continue;
        if (offset + i != 1 || (*dims)[i] != channels) return Mapping::None;
        mapping = Mapping::PerChannel;
    }
    return mapping;
}

Mapping chain_mapping(const Graph& graph, const Node& node, const std::string& data, size_t rank, int64_t channels) {
    if (!node.domain.empty() || node.outputs.size() != 1 || node.inputs.empty() || !node.subgraphs.empty())
        return Mapping::None;
    static const std::unordered_set<std::string> kUnary = {
        "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Celu", "Softplus",
        "Softsign", "Neg", "Abs", "Identity", "Erf", "Exp", "Floor", "Ceil", "Round", "ThresholdedRelu", "Shrink"};
    const std::string& op = node.op_type;
    if (kUnary.count(op)) return node.inputs.size() == 1 && node.inputs[0] == data ? Mapping::Elementwise : Mapping::None;
    if (op == "Clip") {
        if (node.inputs[0] != data) return Mapping::None;
        for (size_t i = 1; i < node.inputs.size(); ++i)
            if (!node.inputs[i].empty() && constant_elements(graph, node.inputs[i]) != 1) return Mapping::None;
        return Mapping::Elementwise;
    }
    if (op == "BatchNormalization") {
        if (node.inputs.size() != 5 || node.inputs[0] != data || rank < 2 || channels < 1) return Mapping::None;
        if (fusion::int_attribute(node, "training_mode", 0) != 0 || fusion::int_attribute(node, "spatial", 1) != 1)
            return Mapping::None;
        for (size_t i = 1; i < 5; ++i)
            if (constant_elements(graph, node.inputs[i]) != channels) return Mapping::None;
        return Mapping::PerChannel;
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "PRelu") {
        if (node.inputs.size() != 2 || node.inputs[0] == node.inputs[1]) return Mapping::None;
        const int at = node.inputs[0] == data ? 0 : node.inputs[1] == data ? 1 : -1;
        if (at < 0 || (op == "PRelu" && at != 0)) return Mapping::None;
        return constant_operand(graph, node.inputs[1 - at], rank, channels);
    }
    return Mapping::None;
}

// The table of a group: its nodes evaluated one by one on a tensor holding every 8-bit value in each channel.
// Returns the [rows, 256] table (indexed by the input byte's bits) or null when a node could not be evaluated.
ValuePtr evaluate_table(const Graph& graph, const PassContext& context, const std::vector<size_t>& group,
                        size_t rank, int64_t rows) {
    const Node& dq = graph.nodes[group.front()];
    const int32_t in_type = element_type(graph, dq.inputs[0]);
    Graph trial;
    trial.ir_version = graph.ir_version;
    trial.opsets = graph.opsets;
    // The 256 byte patterns along axis 2 (axis 0 for rank 2), each channel along axis 1.
    std::vector<int64_t> dims(rank, 1);
    dims[1] = rows;
    dims[rank == 2 ? 0 : 2] = kEntries;
    ValuePtr bytes = make_host_tensor(in_type, dims);
    auto* data = static_cast<uint8_t*>(bytes->data);
    for (int64_t c = 0; c < rows; ++c) {
        for (int64_t i = 0; i < kEntries; ++i)
            data[rank == 2 ? i * rows + c : c * kEntries + i] = static_cast<uint8_t>(i);
    }
    const std::string input = fusion::add_constant(trial, dq.inputs[0] + ".lookup_values", std::move(bytes));
    for (size_t k : group) {
        Node node = graph.nodes[k];
        if (k == group.front()) node.inputs[0] = input;
        for (const auto& in : node.inputs)
            if (!in.empty() && graph.is_constant(in)) fusion::set_constant(trial, in, graph.initializers.at(in));
        trial.nodes.push_back(node);
        std::vector<ValuePtr> values = context.evaluate(trial, trial.nodes.size() - 1);
        if (values.size() != 1 || !values[0] || values[0]->kind != TESS_VALUE_TENSOR) return nullptr;
        fusion::set_constant(trial, node.outputs[0], SharedValue(values[0].release(), ValueDeleter{}));
    }
    const TessValue& out = *trial.initializers.at(graph.nodes[group.back()].outputs[0]);
    if (!is_8bit(out.element_type) || out.element_count() != static_cast<size_t>(rows * kEntries)) return nullptr;
    ValuePtr table = make_host_tensor(out.element_type, {rows, kEntries});
    const auto* from = static_cast<const uint8_t*>(out.data);
    auto* to = static_cast<uint8_t*>(table->data);
    for (int64_t c = 0; c < rows; ++c) {
        for (int64_t i = 0; i < kEntries; ++i) to[c * kEntries + i] = from[rank == 2 ? i * rows + c : c * kEntries + i];
    }
    return table;
}

class FuseQuantizedLookup : public GraphPass {
public:
    const char* name() const override { return "fuse-quantized-lookup"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.evaluate || !context.placement) return false;
        std::vector<fusion::Candidate> found;
        std::vector<std::string> tables;
        fusion::ChainWalk walk(graph);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& dq = graph.nodes[n];
            if (walk.taken[n] || !per_tensor_8bit(graph, dq, "DequantizeLinear")) continue;
            if (!is_8bit(element_type(graph, dq.inputs[0]))) continue;
            const auto shape = graph.types.find(dq.inputs[0]);
            if (shape == graph.types.end() || !shape->second.has_shape || shape->second.dims.size() < 2) continue;
            const size_t rank = shape->second.dims.size();
            const int64_t channels = shape->second.dims[1];

            // From each reader of the DQ, follow single readers until a QuantizeLinear ends the chain.  A DQ read
            // by that chain alone joins it; one with other readers (GELU's x, read by its Erf branch and by the
            // product) stays for them, and each chain becomes a lookup of its bytes.
            const auto dq_readers = walk.readers.find(dq.outputs[0]);
            if (dq_readers == walk.readers.end() || graph.is_graph_output(dq.outputs[0])) continue;
            const std::vector<size_t> firsts = dq_readers->second;
            for (size_t first : firsts) {
                if (walk.taken[first]) continue;
                std::vector<size_t> group{n};
                bool per_channel = false, ended = false;
                std::string value = dq.outputs[0];
                size_t reader = first;
                for (bool more = true; more; more = walk.single_reader(value, reader)) {
                    const Node& node = graph.nodes[reader];
                    if (per_tensor_8bit(graph, node, "QuantizeLinear") && node.inputs[0] == value) {
                        group.push_back(reader);
                        ended = group.size() > 2;
                        break;
                    }
                    const Mapping mapping = chain_mapping(graph, node, value, rank, channels);
                    if (mapping == Mapping::None) break;
                    per_channel = per_channel || mapping == Mapping::PerChannel;
                    group.push_back(reader);
                    value = node.outputs[0];
                }
                if (!ended || (per_channel && channels < 1)) continue;

                const int64_t rows = per_channel ? channels : 1;
                ValuePtr table = evaluate_table(graph, context, group, rank, rows);
                if (!table) {
                    log_message(TESS_LOG_DEBUG, "optimizer",
                                fmt::format("{}: no lookup table (a node of the group could not be evaluated)",
                                            graph.nodes[group.back()].label()));
                    continue;
                }
                const Node& q = graph.nodes[group.back()];
                const std::string table_name =
                    fusion::add_constant(graph, q.outputs[0] + ".lookup_table", std::move(table));
                tables.push_back(table_name);

                fusion::Candidate c;
                const bool shared = firsts.size() > 1;  // the DQ stays for its other readers
                c.nodes.assign(group.begin() + (shared ? 1 : 0), group.end());
                c.fused.name = (q.name.empty() ? q.outputs[0] : q.name) + "_lookup";
                c.fused.op_type = "QuantizedLookup";
                c.fused.domain = TESS_FUSED_OPS_DOMAIN;
                c.fused.inputs = {dq.inputs[0], table_name};
                c.fused.outputs = {q.outputs[0]};
                for (size_t k : c.nodes) walk.taken[k] = true;
                found.push_back(std::move(c));
            }
        }
        bool changed = fusion::apply_where_placed(graph, context, found);
        // Tables of groups left as they were (their provider does not run the lookup) go again.
        fusion::erase_unread_constants(graph, tables);
        changed = fold_into_producers(graph, context) || changed;
        return changed;
    }

private:
    // A lookup whose input a QLinearConv or a per-tensor 8-bit QuantizeLinear makes for it alone joins that node
    // (the fused domain's QLinearConv with the table as input 9, QuantizeLinear with it as input 3): the provider
    // maps each byte it has just made while it is in cache instead of reading the whole tensor again.
    static bool fold_into_producers(Graph& graph, const PassContext& context) {
        const auto readers = fusion::consumers(graph);
        std::unordered_map<std::string, size_t> producers;
        for (size_t n = 0; n < graph.nodes.size(); ++n)
            for (const auto& out : graph.nodes[n].outputs) producers[out] = n;
        std::vector<fusion::Candidate> found;
        std::vector<bool> taken(graph.nodes.size(), false);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& lookup = graph.nodes[n];
            if (lookup.domain != TESS_FUSED_OPS_DOMAIN || lookup.op_type != "QuantizedLookup" ||
                lookup.inputs.size() != 2 || lookup.outputs.size() != 1)
                continue;
            const auto at = producers.find(lookup.inputs[0]);
            if (at == producers.end() || taken[at->second]) continue;
            const size_t p = at->second;
            const Node& producer = graph.nodes[p];
            if (!producer.domain.empty() || producer.outputs.size() != 1 ||
                !fusion::only_feeds(graph, readers, lookup.inputs[0], n))
                continue;
            size_t arity = 0;
            if (producer.op_type == "QLinearConv") {
                arity = 9;
            } else if (producer.op_type == "QuantizeLinear" && per_tensor_8bit(graph, producer, "QuantizeLinear") &&
                       element_type(graph, producer.inputs[0]) == TESS_ELEMENT_FLOAT32 &&
                       element_type(graph, producer.inputs[1]) == TESS_ELEMENT_FLOAT32 &&
                       fusion::int_attribute(producer, "precision", 0) == 0) {  // (the fused kernel divides in float)
                arity = 3;
            } else {
                continue;
            }
            if (producer.inputs.size() > arity) continue;
            fusion::Candidate c;
            c.nodes = {p, n};
            c.fused = producer;
            c.fused.domain = TESS_FUSED_OPS_DOMAIN;
            c.fused.name = (producer.name.empty() ? producer.outputs[0] : producer.name) + "_lookup";
            c.fused.inputs.resize(arity);  // absent optional inputs as empty names
            c.fused.inputs.push_back(lookup.inputs[1]);
            c.fused.outputs = {lookup.outputs[0]};
            taken[p] = taken[n] = true;
            found.push_back(std::move(c));
        }
        const bool changed = fusion::apply_where_placed(graph, context, found);
        const bool dequantized = fold_dequantization(graph, context);
        return fold_additions(graph, context) || dequantized || changed;
    }

    // DQ(a) + DQ(b) [-> Relu] -> Q of per-tensor 8-bit quantizations and one shape (a QDQ model's residual
    // additions; the addition an Add or a Sum of two): TESS_FUSED_OPS_DOMAIN QuantizedAdd(a, a_scale, a_zero, b,
    // b_scale, b_zero, y_scale, y_zero) [activation = "Relu"], which computes the nodes' arithmetic in one pass.
    // The DequantizeLinears stay while something else reads them.
    static bool fold_additions(Graph& graph, const PassContext& context) {
        const auto readers = fusion::consumers(graph);
        std::unordered_map<std::string, size_t> producers;
        for (size_t n = 0; n < graph.nodes.size(); ++n)
            for (const auto& out : graph.nodes[n].outputs) producers[out] = n;
        auto dequantize = [&](const std::string& value) -> const Node* {
            const auto at = producers.find(value);
            if (at == producers.end()) return nullptr;
            const Node& dq = graph.nodes[at->second];
            return per_tensor_8bit(graph, dq, "DequantizeLinear") &&
                           element_type(graph, dq.inputs[1]) == TESS_ELEMENT_FLOAT32
                       ? &dq
                       : nullptr;
        };
        std::vector<fusion::Candidate> found;
        std::vector<bool> taken(graph.nodes.size(), false);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& add = graph.nodes[n];
            if (!add.domain.empty() || (add.op_type != "Add" && add.op_type != "Sum") || add.inputs.size() != 2 ||
                add.outputs.size() != 1 || taken[n])
                continue;
            const Node* a = dequantize(add.inputs[0]);
            const Node* b = dequantize(add.inputs[1]);
            const auto shape_a = fusion::static_shape(graph, add.inputs[0]);
            const auto shape_b = fusion::static_shape(graph, add.inputs[1]);
            if (a == nullptr || b == nullptr || !shape_a || shape_a != shape_b) continue;
            // The one node reading a value (and nothing else: not a graph output), or none.
            auto sole_reader = [&](const std::string& value) -> std::optional<size_t> {
                const auto at = readers.find(value);
                if (at == readers.end() || at->second.size() != 1 ||
                    !fusion::only_feeds(graph, readers, value, at->second[0]))
                    return std::nullopt;
                return at->second[0];
            };
            std::optional<size_t> next = sole_reader(add.outputs[0]);
            if (!next) continue;
            std::optional<size_t> relu;
            std::string quantized = add.outputs[0];
            if (const Node& r = graph.nodes[*next]; r.domain.empty() && r.op_type == "Relu" && !taken[*next]) {
                relu = next;
                quantized = r.outputs[0];
                next = sole_reader(quantized);
                if (!next) continue;
            }
            const size_t q_index = *next;
            const Node& q = graph.nodes[q_index];
            if (!per_tensor_8bit(graph, q, "QuantizeLinear") || q.inputs[0] != quantized || taken[q_index] ||
                element_type(graph, q.inputs[1]) != TESS_ELEMENT_FLOAT32 ||
                fusion::int_attribute(q, "precision", 0) != 0)
                continue;
            fusion::Candidate c;
            c.nodes = {n};
            if (relu) c.nodes.push_back(*relu);
            c.nodes.push_back(q_index);
            c.fused.name = (add.name.empty() ? add.outputs[0] : add.name) + "_quantized";
            c.fused.op_type = "QuantizedAdd";
            c.fused.domain = TESS_FUSED_OPS_DOMAIN;
            c.fused.inputs = {a->inputs[0], a->inputs[1], a->inputs[2], b->inputs[0], b->inputs[1], b->inputs[2],
                              q.inputs[1],  q.inputs[2]};
            c.fused.outputs = {q.outputs[0]};
            if (relu) c.fused.attributes.push_back(fusion::make_attribute("activation", std::string("Relu")));
            for (size_t k : c.nodes) taken[k] = true;
            found.push_back(std::move(c));
        }
        return fusion::apply_where_placed(graph, context, found);
    }

    // Whether `conv` is a 1x1 stride-1 unpadded QLinearConv (its weight a constant [M, C, 1, 1]) and only
    // convolutions read `dq`'s floats: the expansions of inverted residual blocks, whose depthwise convolution
    // computes them a few rows at a time in the CPU provider (the floats never go through memory whole).  Elsewhere
    // the fused conversion measured no faster than DequantizeLinear's own pass, so those stay as they are.
    static bool pointwise_reading_into_convolutions(const Graph& graph,
                                                    const std::unordered_map<std::string, std::vector<size_t>>& readers,
                                                    const Node& conv, const Node& dq) {
        const auto dims = fusion::constant_dims(graph, conv.inputs.size() > 3 ? conv.inputs[3] : std::string());
        if (!dims || dims->size() != 4 || (*dims)[2] != 1 || (*dims)[3] != 1) return false;
        for (const char* name : {"strides", "dilations"}) {
            for (const auto& a : conv.attributes)
                if (a.name() == name)
                    for (int64_t v : a.ints())
                        if (v != 1) return false;
        }
        for (const auto& a : conv.attributes) {
            if (a.name() == "pads")
                for (int64_t v : a.ints())
                    if (v != 0) return false;
            if (a.name() == "auto_pad" && a.s() != "NOTSET" && a.s() != "VALID") return false;
        }
        const auto at = readers.find(dq.outputs[0]);
        if (at == readers.end() || at->second.empty()) return false;
        for (size_t k : at->second) {
            const Node& reader = graph.nodes[k];
            if (!reader.domain.empty() || reader.op_type != "Conv") return false;
        }
        return true;
    }

    // A per-tensor DequantizeLinear to float32 whose input a one-group QLinearConv (with its lookup or not) makes
    // for it alone joins that node too, as the fused domain's QLinearConvToFloat (inputs 0-8 the QLinearConv's, 9
    // the lookup table or none, 10 and 11 the DequantizeLinear's scale and zero point): the convolution then writes
    // floats, in the layout their reader wants, instead of bytes another pass converts (quantize_static leaves the
    // depthwise convolution after each expanding one float).
    static bool fold_dequantization(Graph& graph, const PassContext& context) {
        const auto readers = fusion::consumers(graph);
        std::unordered_map<std::string, size_t> producers;
        for (size_t n = 0; n < graph.nodes.size(); ++n)
            for (const auto& out : graph.nodes[n].outputs) producers[out] = n;
        std::vector<fusion::Candidate> found;
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& dq = graph.nodes[n];
            if (!per_tensor_8bit(graph, dq, "DequantizeLinear") ||
                element_type(graph, dq.outputs[0]) != TESS_ELEMENT_FLOAT32 ||
                element_type(graph, dq.inputs[1]) != TESS_ELEMENT_FLOAT32)
                continue;
            const auto at = producers.find(dq.inputs[0]);
            if (at == producers.end()) continue;
            const Node& conv = graph.nodes[at->second];
            const bool plain = conv.domain.empty(), fused = conv.domain == TESS_FUSED_OPS_DOMAIN;
            if (conv.op_type != "QLinearConv" || !(plain || fused) || conv.outputs.size() != 1 ||
                fusion::int_attribute(conv, "group", 1) != 1 || conv.inputs.size() > (plain ? 9u : 10u) ||
                !fusion::only_feeds(graph, readers, dq.inputs[0], n))
                continue;
            if (!pointwise_reading_into_convolutions(graph, readers, conv, dq)) continue;
            fusion::Candidate c;
            c.nodes = {at->second, n};
            c.fused = conv;
            c.fused.domain = TESS_FUSED_OPS_DOMAIN;
            c.fused.op_type = "QLinearConvToFloat";
            c.fused.name = (conv.name.empty() ? conv.outputs[0] : conv.name) + "_dequantized";
            c.fused.inputs.resize(10);  // absent optional inputs (the bias, the table) as empty names
            c.fused.inputs.push_back(dq.inputs[1]);
            c.fused.inputs.push_back(dq.inputs[2]);
            c.fused.outputs = {dq.outputs[0]};
            found.push_back(std::move(c));
        }
        return fusion::apply_where_placed(graph, context, found);
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_quantized_lookup_pass() { return std::make_unique<FuseQuantizedLookup>(); }

}  // namespace tessera
