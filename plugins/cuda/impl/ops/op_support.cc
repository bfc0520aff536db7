// CUDA provider operators: node access, checks, wiring and broadcasting (op_support.h).
#include "ops/op_support.h"

#include <algorithm>
#include <climits>

namespace tessera::cuda::ops {

std::string float_input(const Node& n, size_t k) {
    const TessValueView* x = n.in(k);
    const std::string what = "input " + std::to_string(k);
    if (x == nullptr) return what + " is missing";
    if (x->kind != TESS_VALUE_TENSOR && x->kind != TESS_VALUE_UNKNOWN) return what + " is not a tensor";
    if (!is_float_type(x->element_type))
        return what + " is " + type_name(x->element_type) + "; the CUDA provider runs float and float16";
    return "";
}

std::string same_float(const Node& n, std::initializer_list<size_t> others) {
    if (std::string why = float_input(n, 0); !why.empty()) return why;
    for (size_t k : others) {
        const TessValueView* v = n.in(k);
        if (v == nullptr) continue;
        if (v->element_type != n.in(0)->element_type)
            return "input " + std::to_string(k) + " is " + type_name(v->element_type) + " but input 0 is " +
                   type_name(n.in(0)->element_type);
    }
    return "";
}

std::string all_same_float(const Node& n) {
    if (n.inputs() == 0) return "no inputs";
    for (size_t k = 0; k < n.inputs(); ++k)
        if (n.in(k) == nullptr) return "input " + std::to_string(k) + " is missing";
    if (std::string why = float_input(n, 0); !why.empty()) return why;
    for (size_t k = 1; k < n.inputs(); ++k)
        if (n.in(k)->element_type != n.in(0)->element_type)
            return "input " + std::to_string(k) + " is " + type_name(n.in(k)->element_type) + " but input 0 is " +
                   type_name(n.in(0)->element_type);
    return "";
}

bool is_constant(const TessValueView* v) { return v != nullptr && v->constant != nullptr; }

std::string no_outputs_beyond(const Node& n, size_t count, const char* what) {
    for (size_t k = count; k < n.outputs(); ++k)
        if (n.out(k) != nullptr) return std::string(what) + " (output " + std::to_string(k) + ") is not supported";
    return "";
}

void wire(BuildContext& ctx, Step& s, const Node& n) {
    s.label = n.label();
    for (size_t k = 0; k < n.inputs(); ++k) s.in.push_back(n.in(k) != nullptr ? ctx.id(n.in(k)) : -1);
    for (size_t k = 0; k < n.outputs(); ++k) s.out.push_back(n.out(k) != nullptr ? ctx.id(n.out(k)) : -1);
    s.host_only.assign(s.in.size(), false);
}

void check_launch(cudaError_t status, const Step& step) { check_cuda(status, step.label.c_str()); }

int to_int(int64_t v, const Step& step, const char* what) {
    if (v < 0 || v > INT_MAX)
        fail(TESS_STATUS_NOT_IMPLEMENTED, step.label + ": " + what + " " + std::to_string(v) + " exceeds the 32-bit range");
    return static_cast<int>(v);
}

// ---- Broadcasting ------------------------------------------------------------------------------------------------

Shape broadcast_shapes(const Shape& a, const Shape& b, const Step& step) {
    const size_t r = std::max(a.size(), b.size());
    Shape out(r);
    for (size_t i = 0; i < r; ++i) {
        const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
        const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
        if (da == db || db == 1) out[i] = da;
        else if (da == 1) out[i] = db;
        else
            fail(TESS_STATUS_INVALID_ARGUMENT,
                 step.label + ": shapes " + shape_string(a) + " and " + shape_string(b) + " do not broadcast");
    }
    return out;
}

BroadcastPlan broadcast_plan(const Shape& a, const Shape& b, const Shape& out) {
    const size_t r = out.size();
    std::vector<int64_t> dims;
    std::vector<bool> a_bc, b_bc;
    for (size_t i = 0; i < r; ++i) {
        if (out[i] == 1) continue;
        const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
        const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
        const bool ab = da == 1, bb = db == 1;
        if (!dims.empty() && a_bc.back() == ab && b_bc.back() == bb) {
            dims.back() *= out[i];
        } else {
            dims.push_back(out[i]);
            a_bc.push_back(ab);
            b_bc.push_back(bb);
        }
    }
    if (dims.size() > static_cast<size_t>(kMaxDims))
        fail(TESS_STATUS_NOT_IMPLEMENTED, "cuda: broadcast of " + shape_string(a) + " and " + shape_string(b) +
                                              " needs more than 8 dimensions");
    BroadcastPlan p;
    p.rank = static_cast<int>(dims.size());
    p.n = element_count(out);
    int64_t sa = 1, sb = 1;
    for (int i = p.rank - 1; i >= 0; --i) {
        p.dims[i] = dims[i];
        p.a_strides[i] = a_bc[i] ? 0 : sa;
        p.b_strides[i] = b_bc[i] ? 0 : sb;
        if (!a_bc[i]) sa *= dims[i];
        if (!b_bc[i]) sb *= dims[i];
    }
    return p;
}

std::string check_unary(const Node& n) {
    if (n.inputs() < 1) return "no input";
    return same_float(n, {});
}

}  // namespace tessera::cuda::ops
