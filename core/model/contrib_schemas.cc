#include "model/contrib_schemas.h"

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include <onnx/defs/shape_inference.h>

namespace tessera {

namespace {

using Dims = std::vector<int64_t>;  // -1: unknown

constexpr const char* kDomain = "com.microsoft";

// Input n's dims, or false when its rank is unknown.
bool input_dims(onnx::InferenceContext& ctx, size_t n, Dims& dims) {
    if (n >= ctx.getNumInputs() || !onnx::hasInputShape(ctx, n)) return false;
    dims.clear();
    for (const auto& d : onnx::getInputShape(ctx, n).dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    return true;
}

void set_output(onnx::InferenceContext& ctx, size_t n, const Dims& dims) {
    if (n >= ctx.getNumOutputs()) return;
    onnx::TensorShapeProto shape;
    for (int64_t d : dims) {
        auto* dim = shape.add_dim();
        if (d >= 0) dim->set_dim_value(d);
    }
    onnx::updateOutputShape(ctx, n, shape);
}

bool has_output(onnx::InferenceContext& ctx, size_t n) { return n < ctx.getNumOutputs(); }

void like_input0(onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
}

// d1 * d2 broadcast as numpy does, -1 when unknown.
int64_t broadcast_dim(int64_t a, int64_t b) {
    if (a == 1) return b;
    if (b == 1) return a;
    return a == b ? a : -1;
}

// FusedMatMul's product shape: numpy.matmul with optional transposes of the last two dims and transBatch moves of
// dim 0 (see plugins/cpu/kernels/contrib/fused_products.cc).
void infer_product(onnx::InferenceContext& ctx, bool with_attributes) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    Dims a, b;
    if (!input_dims(ctx, 0, a) || !input_dims(ctx, 1, b) || a.empty() || b.empty()) return;
    auto attr = [&](const char* name) { return with_attributes && onnx::getAttribute(ctx, name, 0) != 0; };
    auto matrix = [](Dims dims, bool trans_batch, bool trans, bool left, Dims& batch) -> std::pair<int64_t, int64_t> {
        using Matrix = std::pair<int64_t, int64_t>;
        if (dims.size() == 1) return left ? Matrix{1, dims[0]} : Matrix{dims[0], 1};
        if (trans_batch && dims.size() >= 3) std::rotate(dims.begin(), dims.begin() + 1, dims.end() - 1);
        batch.assign(dims.begin(), dims.end() - 2);
        int64_t rows = dims[dims.size() - 2], cols = dims.back();
        if (trans) std::swap(rows, cols);
        return {rows, cols};
    };
    Dims batch_a, batch_b;
    const auto [m, k] = matrix(a, attr("transBatchA"), attr("transA"), true, batch_a);
    const auto [kb, n] = matrix(b, attr("transBatchB"), attr("transB"), false, batch_b);
    (void)k;
    (void)kb;
    const size_t rank = std::max(batch_a.size(), batch_b.size());
    Dims out(rank, 1);
    for (size_t i = 0; i < rank; ++i) {
        const int64_t da = i + batch_a.size() >= rank ? batch_a[i + batch_a.size() - rank] : 1;
        const int64_t db = i + batch_b.size() >= rank ? batch_b[i + batch_b.size() - rank] : 1;
        out[i] = broadcast_dim(da, db);
    }
    if (a.size() != 1) out.push_back(m);
    if (b.size() != 1) out.push_back(n);
    set_output(ctx, 0, out);
}

void infer_gemm(onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    Dims a, b;
    if (!input_dims(ctx, 0, a) || !input_dims(ctx, 1, b) || a.size() != 2 || b.size() != 2) return;
    const bool ta = onnx::getAttribute(ctx, "transA", 0) != 0, tb = onnx::getAttribute(ctx, "transB", 0) != 0;
    set_output(ctx, 0, {ta ? a[1] : a[0], tb ? b[0] : b[1]});
}

// Conv's output shape, with kernel_shape, strides, dilations, pads and auto_pad as ONNX defines them.
void infer_conv(onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    Dims x, w;
    if (!input_dims(ctx, 0, x) || !input_dims(ctx, 1, w) || x.size() < 3 || w.size() != x.size()) return;
    const size_t spatial = x.size() - 2;
    auto ints = [&](const char* name, int64_t fallback, size_t count) {
        Dims values(count, fallback);
        if (const auto* attribute = ctx.getAttribute(name); attribute != nullptr) {
            if (static_cast<size_t>(attribute->ints_size()) != count) return Dims{};
            values.assign(attribute->ints().begin(), attribute->ints().end());
        }
        return values;
    };
    Dims kernel(w.begin() + 2, w.end());
    if (ctx.getAttribute("kernel_shape") != nullptr) kernel = ints("kernel_shape", 1, spatial);
    const Dims strides = ints("strides", 1, spatial), dilations = ints("dilations", 1, spatial);
    const Dims pads = ints("pads", 0, 2 * spatial);
    if (kernel.size() != spatial || strides.size() != spatial || dilations.size() != spatial ||
        pads.size() != 2 * spatial)
        return;
    const auto* auto_pad_attribute = ctx.getAttribute("auto_pad");
    const std::string auto_pad = auto_pad_attribute != nullptr ? auto_pad_attribute->s() : "NOTSET";
    Dims out{x[0], w[0]};
    for (size_t i = 0; i < spatial; ++i) {
        const int64_t in = x[2 + i], s = strides[i], extent = dilations[i] * (kernel[i] - 1) + 1;
        if (in < 0 || s < 1 || kernel[i] < 1 || extent < 1) {
            out.push_back(-1);
        } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
            out.push_back((in + s - 1) / s);
        } else {
            const int64_t padded = auto_pad == "VALID" ? in : in + pads[i] + pads[i + spatial];
            out.push_back(padded < extent ? -1 : (padded - extent) / s + 1);
        }
    }
    set_output(ctx, 0, out);
}

void infer_skip_layer_norm(onnx::InferenceContext& ctx) {
    like_input0(ctx);
    Dims x;
    const bool known = input_dims(ctx, 0, x) && !x.empty();
    Dims stats = x;
    if (known) stats.back() = 1;
    for (size_t n : {size_t{1}, size_t{2}}) {
        if (!has_output(ctx, n)) continue;
        onnx::updateOutputElemType(ctx, n, onnx::TensorProto::FLOAT);
        if (known) set_output(ctx, n, stats);
    }
    if (has_output(ctx, 3)) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 3);
        if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 3);
    }
}

void infer_bias_split_gelu(onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    Dims x;
    if (!input_dims(ctx, 0, x) || x.size() != 3) return;
    if (x[2] >= 0) x[2] /= 2;
    set_output(ctx, 0, x);
}

// DynamicQuantizeLSTM: Y [seq, directions, batch, hidden], Y_h and Y_c [directions, batch, hidden], all float.
void infer_lstm(onnx::InferenceContext& ctx) {
    const auto* direction = ctx.getAttribute("direction");
    const int64_t directions = direction != nullptr && direction->s() == "bidirectional" ? 2 : 1;
    const int64_t hidden = onnx::getAttribute(ctx, "hidden_size", int64_t{-1});
    Dims x;
    const bool known = input_dims(ctx, 0, x) && x.size() == 3;
    for (size_t n = 0; n < 3 && n < ctx.getNumOutputs(); ++n) {
        onnx::updateOutputElemType(ctx, n, onnx::TensorProto::FLOAT);
        if (!known) continue;
        if (n == 0) set_output(ctx, 0, {x[0], directions, x[1], hidden});
        else set_output(ctx, n, {directions, x[1], hidden});
    }
}

// SparseAttention: output (B, S, num_heads * head) like query (whose hidden size holds num_heads + 2 * kv_num_heads
// heads when key and value are omitted); present_key/present_value share past_key's shape and type.
void infer_sparse_attention(onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    for (size_t n = 1; n < 3 && n < ctx.getNumOutputs(); ++n) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 3, n);
        if (onnx::hasInputShape(ctx, 3)) onnx::propagateShapeFromInputToOutput(ctx, 3, n);
    }
    Dims q;
    if (!input_dims(ctx, 0, q) || q.size() != 3) return;
    const bool packed = ctx.getNumInputs() < 2 || ctx.getInputType(1) == nullptr;  // key omitted
    if (packed && q[2] >= 0) {
        const int64_t heads = onnx::getAttribute(ctx, "num_heads", int64_t{0});
        const int64_t kv_heads = onnx::getAttribute(ctx, "kv_num_heads", int64_t{0});
        const int64_t all = heads + 2 * kv_heads;
        q[2] = all > 0 && q[2] % all == 0 ? q[2] / all * heads : -1;
    }
    set_output(ctx, 0, q);
}

struct Param {
    const char* name;
    bool optional = false;
    const char* type = "T";
};

onnx::OpSchema make(const char* op, std::vector<Param> inputs, std::vector<Param> outputs,
                    onnx::InferenceFunction infer) {
    onnx::OpSchema schema(op, __FILE__, __LINE__);
    schema.SetName(op).SetDomain(kDomain).SinceVersion(1).AllowUncheckedAttributes();
    for (size_t i = 0; i < inputs.size(); ++i)
        schema.Input(static_cast<int>(i), inputs[i].name, "", inputs[i].type,
                     inputs[i].optional ? onnx::OpSchema::Optional : onnx::OpSchema::Single);
    for (size_t i = 0; i < outputs.size(); ++i)
        schema.Output(static_cast<int>(i), outputs[i].name, "", outputs[i].type,
                      outputs[i].optional ? onnx::OpSchema::Optional : onnx::OpSchema::Single);
    schema.TypeConstraint("T", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"}, "");
    auto uses = [&](const char* type) {
        for (const auto* list : {&inputs, &outputs})
            for (const Param& p : *list)
                if (std::string(p.type) == type) return true;
        return false;
    };
    if (uses("U")) schema.TypeConstraint("U", {"tensor(float)"}, "");
    if (uses("Q")) schema.TypeConstraint("Q", {"tensor(int8)", "tensor(uint8)"}, "");
    if (uses("I")) schema.TypeConstraint("I", {"tensor(int32)"}, "");
    schema.TypeAndShapeInferenceFunction(std::move(infer));
    schema.Finalize();
    return schema;
}

const std::map<std::string, onnx::OpSchema>& schemas() {
    static const std::map<std::string, onnx::OpSchema> table = [] {
        std::map<std::string, onnx::OpSchema> t;
        auto add = [&](const char* op, std::vector<Param> in, std::vector<Param> out, onnx::InferenceFunction f) {
            t.emplace(op, make(op, std::move(in), std::move(out), std::move(f)));
        };
        add("Gelu", {{"X"}}, {{"Y"}}, like_input0);
        add("QuickGelu", {{"X"}}, {{"Y"}}, like_input0);
        add("BiasGelu", {{"A"}, {"B"}}, {{"C"}}, like_input0);
        add("FastGelu", {{"X"}, {"bias", true}}, {{"Y"}}, like_input0);
        add("BiasAdd", {{"X"}, {"bias"}, {"skip"}}, {{"Y"}}, like_input0);
        add("BiasSplitGelu", {{"X"}, {"bias"}}, {{"Y"}}, infer_bias_split_gelu);
        add("BiasSoftmax", {{"data"}, {"bias"}}, {{"output"}}, like_input0);
        const std::vector<Param> statistics{{"output"}, {"mean", true, "U"}, {"inv_std_var", true, "U"},
                                            {"input_skip_bias_sum", true}};
        add("SkipLayerNormalization", {{"input"}, {"skip"}, {"gamma"}, {"beta", true}, {"bias", true}}, statistics,
            infer_skip_layer_norm);
        add("SkipSimplifiedLayerNormalization", {{"input"}, {"skip"}, {"gamma"}, {"bias", true}}, statistics,
            infer_skip_layer_norm);
        add("FusedMatMul", {{"A"}, {"B"}}, {{"Y"}}, [](onnx::InferenceContext& ctx) { infer_product(ctx, true); });
        add("TransposeMatMul", {{"A"}, {"B"}}, {{"Y"}}, [](onnx::InferenceContext& ctx) { infer_product(ctx, true); });
        add("GemmFastGelu", {{"X"}, {"W"}, {"bias", true}}, {{"Y"}},
            [](onnx::InferenceContext& ctx) { infer_product(ctx, false); });
        add("FusedGemm", {{"A"}, {"B"}, {"C", true}}, {{"Y"}}, infer_gemm);
        add("FusedConv", {{"X"}, {"W"}, {"B", true}, {"Z", true}}, {{"Y"}}, infer_conv);
        add("DynamicQuantizeLSTM",
            {{"X"}, {"W", false, "Q"}, {"R", false, "Q"}, {"B", true}, {"sequence_lens", true, "I"},
             {"initial_h", true}, {"initial_c", true}, {"P", true}, {"W_scale"}, {"W_zero_point", false, "Q"}, {"R_scale"},
             {"R_zero_point", false, "Q"}},
            {{"Y", true}, {"Y_h", true}, {"Y_c", true}}, infer_lstm);
        add("SparseAttention",
            {{"query"}, {"key", true}, {"value", true}, {"past_key"}, {"past_value"}, {"block_row_indices", false, "I"},
             {"block_col_indices", false, "I"}, {"total_sequence_length", false, "I"},
             {"key_total_sequence_lengths", false, "I"}, {"cos_cache", true}, {"sin_cache", true}},
            {{"output"}, {"present_key"}, {"present_value"}}, infer_sparse_attention);
        return t;
    }();
    return table;
}

}  // namespace

const onnx::OpSchema* contrib_schema(const std::string& op, int version) {
    if (version < 1) return nullptr;
    const auto& table = schemas();
    auto it = table.find(op);
    return it == table.end() ? nullptr : &it->second;
}

}  // namespace tessera
