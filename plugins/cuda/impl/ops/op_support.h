// CUDA provider operators: what every operator family shares -- node access, the checks that decline a node,
// wiring a step to its values, and numpy broadcasting.
#pragma once

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "graph.h"

namespace tessera::cuda::ops {

// ---- Node access -------------------------------------------------------------------------------------------------

struct Node {
    const TessNodeView& v;
    explicit Node(const TessNodeView& view) : v(view) {}

    std::string op() const { return v.op_type; }
    int64_t opset() const { return v.opset; }
    std::string label() const {
        std::string s = v.op_type;
        if (v.name != nullptr && v.name[0] != '\0') s += std::string(" '") + v.name + "'";
        return s;
    }
    const TessAttributeView* attr(const char* name) const {
        for (size_t i = 0; i < v.attribute_count; ++i)
            if (std::strcmp(v.attributes[i]->name, name) == 0) return v.attributes[i];
        return nullptr;
    }
    int64_t i(const char* name, int64_t fallback) const {
        const TessAttributeView* a = attr(name);
        return a != nullptr && a->type == TESS_ATTR_INT ? a->i : fallback;
    }
    float f(const char* name, float fallback) const {
        const TessAttributeView* a = attr(name);
        return a != nullptr && a->type == TESS_ATTR_FLOAT ? a->f : fallback;
    }
    std::string s(const char* name, const std::string& fallback) const {
        const TessAttributeView* a = attr(name);
        return a != nullptr && a->type == TESS_ATTR_STRING ? std::string(a->s, a->s_len) : fallback;
    }
    Shape ints(const char* name) const {
        const TessAttributeView* a = attr(name);
        if (a == nullptr || a->type != TESS_ATTR_INTS || a->count == 0) return {};
        return Shape(a->ints, a->ints + a->count);
    }
    size_t inputs() const { return v.input_count; }
    size_t outputs() const { return v.output_count; }
    const TessValueView* in(size_t k) const { return k < v.input_count ? v.inputs[k] : nullptr; }
    const TessValueView* out(size_t k) const { return k < v.output_count ? v.outputs[k] : nullptr; }
};

// ---- Checks (empty when fine, else why the node is declined) ----------------------------------------------------

std::string float_input(const Node& n, size_t k);
// Input 0 is float or float16, and each present input of `others` has the same type.
std::string same_float(const Node& n, std::initializer_list<size_t> others);
std::string all_same_float(const Node& n);
bool is_constant(const TessValueView* v);
std::string no_outputs_beyond(const Node& n, size_t count, const char* what);
// One float or float16 input (the check of most unary operators).
std::string check_unary(const Node& n);

// ---- Steps -------------------------------------------------------------------------------------------------------

// Labels the step and numbers its inputs and outputs.
void wire(BuildContext& ctx, Step& s, const Node& n);
void check_launch(cudaError_t status, const Step& step);
int to_int(int64_t v, const Step& step, const char* what);

// ---- Broadcasting ------------------------------------------------------------------------------------------------

Shape broadcast_shapes(const Shape& a, const Shape& b, const Step& step);
// Merges runs of dimensions with the same broadcast pattern, so most ops index with one or two dimensions.
BroadcastPlan broadcast_plan(const Shape& a, const Shape& b, const Shape& out);

// ---- Shared between families -------------------------------------------------------------------------------------

// BatchNormalization parameters as per-channel scale and shift (normalization.cc; Conv folds them too).
void batch_norm_affine(const Node& bn, std::vector<float>& a, std::vector<float>& b);

}  // namespace tessera::cuda::ops
