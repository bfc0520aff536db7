// Which nodes the sample provider runs.  One parser serves the capability query and compile, so a compile never meets
// a node the query would have declined.
#include <cmath>
#include <cstring>
#include <limits>

#include "sample.h"

namespace sample {
namespace {

const TessAttributeView* find_attribute(const TessNodeView* node, const char* name) {
    for (size_t i = 0; i < node->attribute_count; ++i)
        if (std::strcmp(node->attributes[i]->name, name) == 0) return node->attributes[i];
    return nullptr;
}

// A float attribute, `fallback` when absent; false when present with another type.
bool float_attribute(const TessNodeView* node, const char* name, float fallback, float& out) {
    const TessAttributeView* a = find_attribute(node, name);
    out = fallback;
    if (a == nullptr) return true;
    if (a->type != TESS_ATTR_FLOAT) return false;
    out = a->f;
    return true;
}

bool int_attribute(const TessNodeView* node, const char* name, int64_t fallback, int64_t& out) {
    const TessAttributeView* a = find_attribute(node, name);
    out = fallback;
    if (a == nullptr) return true;
    if (a->type != TESS_ATTR_INT) return false;
    out = a->i;
    return true;
}

bool present(const TessValueView* value) { return value != nullptr && value->name != nullptr && value->name[0] != 0; }

// "" when the value is a float32 tensor (as far as the model tells), else the problem.
std::string check_float_tensor(const TessValueView* value, const char* role) {
    if (value->kind != TESS_VALUE_TENSOR && value->kind != TESS_VALUE_UNKNOWN)
        return std::string(role) + " '" + value->name + "' is not a tensor";
    if (value->element_type == TESS_ELEMENT_UNDEFINED)
        return std::string(role) + " '" + value->name + "' has an unknown element type";
    if (value->element_type != TESS_ELEMENT_FLOAT32)
        return std::string(role) + " '" + value->name + "' is not float32 (sample runs float32 only)";
    return "";
}

// Clip's min or max (opset 11+): absent, or a constant float32 scalar read now.
std::string clip_bound(const TessNodeView* node, size_t index, float fallback, float& out) {
    out = fallback;
    if (index >= node->input_count || !present(node->inputs[index])) return "";
    const TessValueView* v = node->inputs[index];
    if (v->constant == nullptr) return "Clip bound '" + std::string(v->name) + "' is not a constant";
    if (g_host->tensor_element_count(v->constant) != 1 ||
        g_host->value_element_type(v->constant) != TESS_ELEMENT_FLOAT32)
        return "Clip bound '" + std::string(v->name) + "' is not a float32 scalar";
    out = *static_cast<const float*>(g_host->tensor_const_data(v->constant));
    return "";
}

}  // namespace

std::string parse_node(const TessNodeView* node, Step& step) {
    const std::string op = node->op_type;
    step.label = op + (node->name[0] != 0 ? " '" + std::string(node->name) + "'" : "");
    if (node->domain[0] != 0 && std::strcmp(node->domain, "ai.onnx") != 0)
        return "domain '" + std::string(node->domain) + "' is not served";

    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
        step.kind = OpKind::Binary;
        step.binary = op == "Add" ? Binary::Add : op == "Sub" ? Binary::Sub : op == "Mul" ? Binary::Mul : Binary::Div;
        if (find_attribute(node, "broadcast") != nullptr)
            return "the legacy 'broadcast' attribute (opset < 7) is not supported";
    } else if (op == "Sum") {
        step.kind = OpKind::Sum;
        if (node->input_count == 0) return "Sum without inputs";
    } else if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "LeakyRelu" || op == "Clip") {
        step.kind = OpKind::Unary;
        step.unary = op == "Relu" ? Unary::Relu : op == "Sigmoid" ? Unary::Sigmoid : op == "Tanh" ? Unary::Tanh
                   : op == "LeakyRelu" ? Unary::LeakyRelu : Unary::Clip;
        if (step.unary == Unary::LeakyRelu && !float_attribute(node, "alpha", 0.01f, step.unary_params.alpha))
            return "LeakyRelu alpha is not a float";
        if (step.unary == Unary::Clip) {
            if (node->opset < 11) {  // bounds are attributes, defaulting to the float range
                if (!float_attribute(node, "min", std::numeric_limits<float>::lowest(), step.unary_params.min) ||
                    !float_attribute(node, "max", std::numeric_limits<float>::max(), step.unary_params.max))
                    return "Clip min/max attributes are not floats";
            } else {
                const float inf = std::numeric_limits<float>::infinity();
                std::string problem = clip_bound(node, 1, -inf, step.unary_params.min);
                if (problem.empty()) problem = clip_bound(node, 2, inf, step.unary_params.max);
                if (!problem.empty()) return problem;
            }
        }
    } else if (op == "MatMul") {
        step.kind = OpKind::MatMul;
    } else if (op == "Gemm") {
        step.kind = OpKind::Gemm;
        int64_t trans_a = 0, trans_b = 0;
        if (!float_attribute(node, "alpha", 1.0f, step.gemm_params.alpha) ||
            !float_attribute(node, "beta", 1.0f, step.gemm_params.beta) ||
            !int_attribute(node, "transA", 0, trans_a) || !int_attribute(node, "transB", 0, trans_b))
            return "Gemm attributes of unexpected types";
        step.gemm_params.trans_a = trans_a != 0;
        step.gemm_params.trans_b = trans_b != 0;
        if (node->input_count < 2) return "Gemm needs A and B";
    } else {
        return "sample runs float32 Add, Sub, Mul, Div, Sum, Relu, Sigmoid, Tanh, LeakyRelu, Clip, MatMul and Gemm "
               "only";
    }

    const size_t inputs = runtime_input_count(node, step);
    for (size_t i = 0; i < inputs; ++i) {
        if (i >= node->input_count || !present(node->inputs[i])) {
            if (step.kind == OpKind::Gemm && i == 2) continue;  // C is optional
            return "input " + std::to_string(i) + " is missing";
        }
        std::string problem = check_float_tensor(node->inputs[i], "input");
        if (!problem.empty()) return problem;
    }
    if (node->output_count < 1 || !present(node->outputs[0])) return "no output";
    for (size_t o = 1; o < node->output_count; ++o)
        if (present(node->outputs[o])) return "more than one output";
    std::string problem = check_float_tensor(node->outputs[0], "output");
    if (!problem.empty() && node->outputs[0]->element_type != TESS_ELEMENT_UNDEFINED) return problem;
    if (node->implicit_input_count != 0) return "nodes with subgraphs are not supported";
    return "";
}

size_t runtime_input_count(const TessNodeView* node, const Step& step) {
    switch (step.kind) {
        case OpKind::Binary:
        case OpKind::MatMul: return 2;
        case OpKind::Unary: return 1;
        case OpKind::Gemm: return node->input_count < 3 ? node->input_count : 3;
        case OpKind::Sum: return node->input_count;
    }
    return node->input_count;
}

}  // namespace sample
