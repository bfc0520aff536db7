// CUDA provider: which nodes it runs (check_node) and the steps that run them (build_step).
//
// Claimed: float32 and float16 nodes of
//   Conv (cuDNN; a following BatchNormalization is folded into the weights, bias and a following Relu run in one
//   epilogue kernel), MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LRN, BatchNormalization (inference),
//   Gemm, MatMul (cuBLAS, batched with broadcasting), Add, Sub, Mul, Div, Pow, PRelu (broadcasting), Sum, Max, Min
//   (variadic), Relu, LeakyRelu, Sigmoid, Tanh, Gelu, Erf, Exp, Log, Sqrt, Neg, Abs, Reciprocal, Clip, Elu, Selu,
//   HardSigmoid, HardSwish, Softplus, Softsign, Floor, Ceil, Sin, Cos, Softmax, LogSoftmax (both opset semantics),
//   LayerNormalization, Transpose, Concat, and Reshape, Flatten, Squeeze, Unsqueeze, Identity (no copy: aliases).
// Everything else is declined with the reason.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include "graph.h"

namespace tessera::cuda {
namespace {

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

std::string float_input(const Node& n, size_t k) {
    const TessValueView* x = n.in(k);
    const std::string what = "input " + std::to_string(k);
    if (x == nullptr) return what + " is missing";
    if (x->kind != TESS_VALUE_TENSOR && x->kind != TESS_VALUE_UNKNOWN) return what + " is not a tensor";
    if (!is_float_type(x->element_type))
        return what + " is " + type_name(x->element_type) + "; the CUDA provider runs float and float16";
    return "";
}

// Input 0 is float or float16, and each present input of `others` has the same type.
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

// Merges runs of dimensions with the same broadcast pattern, so most ops index with one or two dimensions.
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

// ---- Elementwise steps -------------------------------------------------------------------------------------------

struct UnaryStep final : Step {
    UnaryOp op = UnaryOp::Relu;
    float alpha = 0.0f, beta = 0.0f;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_unary(op, dtype_of(x.type), x.data, y.data, x.count(), alpha, beta, r.stream()), *this);
    }
};

struct BinaryStep final : Step {
    BinaryOp op = BinaryOp::Add;
    void run(Run& r) override {
        const Tensor& a = r.required(*this, 0);
        const Tensor& b = r.required(*this, 1);
        const Shape out = op == BinaryOp::PRelu ? a.dims : broadcast_shapes(a.dims, b.dims, *this);
        if (op == BinaryOp::PRelu && broadcast_shapes(a.dims, b.dims, *this) != a.dims)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": slope " + shape_string(b.dims) + " does not broadcast to " +
                                                   shape_string(a.dims));
        Tensor& y = r.output(*this, 0, a.type, out);
        check_launch(launch_binary(op, dtype_of(a.type), a.data, b.data, y.data, broadcast_plan(a.dims, b.dims, out),
                                   r.stream()),
                     *this);
    }
};

// Sum, Max, Min of one or more inputs with broadcasting: folded pairwise into the output.
struct VariadicStep final : Step {
    BinaryOp op = BinaryOp::Add;
    void run(Run& r) override {
        std::vector<const Tensor*> xs;
        for (size_t k = 0; k < in.size(); ++k) xs.push_back(&r.required(*this, k));
        Shape out = xs[0]->dims;
        for (size_t k = 1; k < xs.size(); ++k) out = broadcast_shapes(out, xs[k]->dims, *this);
        const int32_t type = xs[0]->type;
        Tensor& y = r.output(*this, 0, type, out);
        const DType t = dtype_of(type);
        if (xs.size() == 1) {
            if (y.bytes() > 0)
                check_cuda(cudaMemcpyAsync(y.data, xs[0]->data, y.bytes(), cudaMemcpyDeviceToDevice, r.stream()),
                           label.c_str());
            return;
        }
        check_launch(launch_binary(op, t, xs[0]->data, xs[1]->data, y.data,
                                   broadcast_plan(xs[0]->dims, xs[1]->dims, out), r.stream()),
                     *this);
        for (size_t k = 2; k < xs.size(); ++k)
            check_launch(launch_binary(op, t, y.data, xs[k]->data, y.data, broadcast_plan(out, xs[k]->dims, out),
                                       r.stream()),
                         *this);
    }
};

// Inference BatchNormalization: y = x * a[c] + b[c] (+ Relu when one follows), a and b folded at compile time.
struct ChannelAffineStep final : Step {
    Tensor scale, shift;  // float [C]
    int64_t channels = 0;
    bool relu = false;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        if (x.rank() < 2 || x.dims[1] != channels)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input " + shape_string(x.dims) + " does not have " +
                                                   std::to_string(channels) + " channels");
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_channel_affine(dtype_of(x.type), x.data, y.data, static_cast<const float*>(scale.data),
                                           static_cast<const float*>(shift.data), x.dims[0], channels,
                                           product(x.dims, 2, x.dims.size()), relu, r.stream()),
                     *this);
    }
};

// ---- Normalization -----------------------------------------------------------------------------------------------

struct SoftmaxStep final : Step {
    int64_t axis = -1;
    bool legacy = false;  // opset < 13: the input is coerced to 2-D at axis
    bool log = false;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const int64_t rank = x.rank();
        const int64_t a = normalize_axis(axis, rank, "axis");
        const int64_t outer = product(x.dims, 0, a);
        const int64_t dim = legacy ? product(x.dims, a, rank) : x.dims[a];
        const int64_t inner = legacy ? 1 : product(x.dims, a + 1, rank);
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_softmax(dtype_of(x.type), x.data, y.data, outer, dim, inner, log, r.stream()), *this);
    }
};

struct LayerNormStep final : Step {
    int64_t axis = -1;
    float epsilon = 1e-5f;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const Tensor& scale = r.required(*this, 1);
        const Tensor* bias = r.input(*this, 2);
        const int64_t rank = x.rank();
        const int64_t a = normalize_axis(axis, rank, "axis");
        const int64_t rows = product(x.dims, 0, a), cols = product(x.dims, a, rank);
        if (scale.count() != cols || (bias != nullptr && bias->count() != cols))
            fail(TESS_STATUS_NOT_IMPLEMENTED, label + ": scale and bias must have the normalized shape's " +
                                                  std::to_string(cols) + " elements (broadcasting them is not supported)");
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        Shape stat_dims(x.dims.begin(), x.dims.begin() + a);
        stat_dims.resize(static_cast<size_t>(rank), 1);
        float* mean = nullptr;
        float* inv_std = nullptr;
        if (r.has_output(*this, 1)) mean = static_cast<float*>(r.output(*this, 1, TESS_ELEMENT_FLOAT32, stat_dims).data);
        if (r.has_output(*this, 2))
            inv_std = static_cast<float*>(r.output(*this, 2, TESS_ELEMENT_FLOAT32, stat_dims).data);
        check_launch(launch_layer_norm(dtype_of(x.type), x.data, scale.data, bias != nullptr ? bias->data : nullptr,
                                       y.data, mean, inv_std, rows, cols, epsilon, r.stream()),
                     *this);
    }
};

struct LrnStep final : Step {
    int64_t size = 1;
    float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        if (x.rank() < 2) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": the input must have N and C dimensions");
        Tensor& y = r.output(*this, 0, x.type, x.dims);
        check_launch(launch_lrn(dtype_of(x.type), x.data, y.data, x.dims[0], x.dims[1], product(x.dims, 2, x.dims.size()),
                                size, alpha, beta, bias, r.stream()),
                     *this);
    }
};

// ---- Sliding windows ---------------------------------------------------------------------------------------------

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

struct Window {
    std::string auto_pad = "NOTSET";
    Shape kernel_shape, strides, dilations, pads;
    bool ceil_mode = false;

    static Window parse(const Node& n) {
        Window w;
        w.auto_pad = n.s("auto_pad", "NOTSET");
        if (w.auto_pad.empty()) w.auto_pad = "NOTSET";
        w.kernel_shape = n.ints("kernel_shape");
        w.strides = n.ints("strides");
        w.dilations = n.ints("dilations");
        w.pads = n.ints("pads");
        w.ceil_mode = n.i("ceil_mode", 0) != 0;
        return w;
    }

    std::string check(size_t spatial) const {
        if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
            return "auto_pad '" + auto_pad + "' is not valid";
        auto bad = [&](const Shape& v, size_t size, bool positive) {
            if (v.empty()) return false;
            if (v.size() != size) return true;
            for (int64_t x : v)
                if (positive ? x <= 0 : x < 0) return true;
            return false;
        };
        if (bad(kernel_shape, spatial, true)) return "kernel_shape " + shape_string(kernel_shape) + " is not valid";
        if (bad(strides, spatial, true)) return "strides " + shape_string(strides) + " are not valid";
        if (bad(dilations, spatial, true)) return "dilations " + shape_string(dilations) + " are not valid";
        if (bad(pads, 2 * spatial, false)) return "pads " + shape_string(pads) + " are not valid";
        return "";
    }

    struct Geometry {
        Shape out, pad_begin, pad_end, stride, dilation;
    };

    // The geometry for input spatial dims `in` and kernel `k` (the CPU provider's rule, shared with ONNX).
    Geometry resolve(const Shape& in, const Shape& k, const std::string& label) const {
        const size_t rank = in.size();
        Geometry g;
        g.stride = strides.empty() ? Shape(rank, 1) : strides;
        g.dilation = dilations.empty() ? Shape(rank, 1) : dilations;
        g.pad_begin.assign(rank, 0);
        g.pad_end.assign(rank, 0);
        g.out.assign(rank, 0);
        if (g.stride.size() != rank || g.dilation.size() != rank || (!pads.empty() && pads.size() != 2 * rank))
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": attributes do not match " + std::to_string(rank) +
                                                   " spatial dimensions");
        for (size_t d = 0; d < rank; ++d) {
            const int64_t span = (k[d] - 1) * g.dilation[d] + 1, s = g.stride[d];
            int64_t out = 0;
            if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
                out = ceil_div(in[d], s);
                const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in[d]);
                const int64_t smaller = total / 2, larger = total - smaller;
                g.pad_begin[d] = auto_pad == "SAME_UPPER" ? smaller : larger;
                g.pad_end[d] = auto_pad == "SAME_UPPER" ? larger : smaller;
            } else if (auto_pad == "VALID") {
                out = floor_div(in[d] - span, s) + 1;
            } else {
                if (!pads.empty()) {
                    g.pad_begin[d] = pads[d];
                    g.pad_end[d] = pads[d + rank];
                }
                const int64_t room = in[d] + g.pad_begin[d] + g.pad_end[d] - span;
                if (ceil_mode) {
                    out = ceil_div(room, s) + 1;
                    if (out > 0 && (out - 1) * s >= in[d] + g.pad_begin[d]) --out;
                } else {
                    out = floor_div(room, s) + 1;
                }
            }
            if (out <= 0)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input spatial shape " + shape_string(in) +
                                                       " is too small for kernel " + shape_string(k));
            g.out[d] = out;
        }
        return g;
    }
};

struct PoolStep final : Step {
    Window window;
    bool max = true;
    bool count_include_pad = false;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const size_t spatial = window.kernel_shape.size();
        if (x.rank() != static_cast<int64_t>(spatial) + 2)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input " + shape_string(x.dims) + " does not match kernel " +
                                                   shape_string(window.kernel_shape));
        const Shape in(x.dims.begin() + 2, x.dims.end());
        const Window::Geometry g = window.resolve(in, window.kernel_shape, label);
        Shape out_dims = {x.dims[0], x.dims[1]};
        out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
        Tensor& y = r.output(*this, 0, x.type, out_dims);
        PoolPlan p;
        p.planes = x.dims[0] * x.dims[1];
        const size_t offset = 3 - spatial;
        for (size_t d = 0; d < spatial; ++d) {
            p.in[offset + d] = in[d];
            p.out[offset + d] = g.out[d];
            p.kernel[offset + d] = window.kernel_shape[d];
            p.stride[offset + d] = g.stride[d];
            p.dilation[offset + d] = g.dilation[d];
            p.pad_begin[offset + d] = g.pad_begin[d];
            p.pad_end[offset + d] = g.pad_end[d];
        }
        p.max = max;
        p.count_include_pad = count_include_pad;
        check_launch(launch_pool(dtype_of(x.type), x.data, y.data, p, r.stream()), *this);
    }
};

struct GlobalPoolStep final : Step {
    bool max = false;
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        if (x.rank() < 2) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": the input must have N and C dimensions");
        Shape out_dims = x.dims;
        for (size_t d = 2; d < out_dims.size(); ++d) out_dims[d] = 1;
        Tensor& y = r.output(*this, 0, x.type, out_dims);
        check_launch(launch_global_pool(dtype_of(x.type), x.data, y.data, x.dims[0] * x.dims[1],
                                        product(x.dims, 2, x.dims.size()), max, r.stream()),
                     *this);
    }
};

// ---- Convolution (cuDNN) -----------------------------------------------------------------------------------------

cudnnDataType_t cudnn_type(DType t) { return t == DType::F32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_HALF; }

struct ConvStep final : Step {
    Window window;
    int64_t group = 1;
    bool relu = false;
    Tensor weights;  // prepacked constant weights (BatchNormalization folded in); empty: input 1 at run time
    Tensor bias;     // float [M]; empty: none

    struct Plan {
        cudnnTensorDescriptor_t x = nullptr, y = nullptr;
        cudnnFilterDescriptor_t w = nullptr;
        cudnnConvolutionDescriptor_t conv = nullptr;
        cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
        size_t workspace = 0;
        ~Plan() {
            if (x != nullptr) cudnnDestroyTensorDescriptor(x);
            if (y != nullptr) cudnnDestroyTensorDescriptor(y);
            if (w != nullptr) cudnnDestroyFilterDescriptor(w);
            if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
        }
    };
    std::map<Shape, std::unique_ptr<Plan>> plans;  // by input and weight shape (runs of one instance are serialized)

    static std::vector<int> packed_strides(const std::vector<int>& dims) {
        std::vector<int> s(dims.size(), 1);
        for (size_t i = dims.size() - 1; i-- > 0;) s[i] = s[i + 1] * dims[i + 1];
        return s;
    }

    Plan& plan(Run& r, const Tensor& x, const Tensor& w, const Tensor& y, const Window::Geometry& g) {
        Shape key = x.dims;
        key.push_back(-1);
        key.insert(key.end(), w.dims.begin(), w.dims.end());
        auto found = plans.find(key);
        if (found != plans.end()) return *found->second;

        if (x.count() > INT_MAX || y.count() > INT_MAX || w.count() > INT_MAX)
            fail(TESS_STATUS_NOT_IMPLEMENTED, label + ": tensors above 2^31 elements are not supported by cuDNN");
        const DType t = dtype_of(x.type);
        const size_t spatial = x.dims.size() - 2;
        // cuDNN wants at least 2 spatial dimensions: a 1-D convolution runs as [N, C, 1, L].
        const bool expand = spatial == 1;
        std::vector<int> xd, wd, yd, pad, stride, dilation;
        for (int64_t d : x.dims) xd.push_back(to_int(d, *this, "dimension"));
        for (int64_t d : w.dims) wd.push_back(to_int(d, *this, "dimension"));
        for (int64_t d : y.dims) yd.push_back(to_int(d, *this, "dimension"));
        for (size_t d = 0; d < spatial; ++d) {
            pad.push_back(to_int(g.pad_begin[d], *this, "pad"));
            stride.push_back(to_int(g.stride[d], *this, "stride"));
            dilation.push_back(to_int(g.dilation[d], *this, "dilation"));
        }
        if (expand) {
            xd.insert(xd.begin() + 2, 1);
            wd.insert(wd.begin() + 2, 1);
            yd.insert(yd.begin() + 2, 1);
            pad.insert(pad.begin(), 0);
            stride.insert(stride.begin(), 1);
            dilation.insert(dilation.begin(), 1);
        }
        const int nd = static_cast<int>(xd.size());

        auto p = std::make_unique<Plan>();
        check_cudnn(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor");
        check_cudnn(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor");
        check_cudnn(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
        check_cudnn(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor");
        check_cudnn(cudnnSetTensorNdDescriptor(p->x, cudnn_type(t), nd, xd.data(), packed_strides(xd).data()),
                    "cudnnSetTensorNdDescriptor (input)");
        check_cudnn(cudnnSetTensorNdDescriptor(p->y, cudnn_type(t), nd, yd.data(), packed_strides(yd).data()),
                    "cudnnSetTensorNdDescriptor (output)");
        check_cudnn(cudnnSetFilterNdDescriptor(p->w, cudnn_type(t), CUDNN_TENSOR_NCHW, nd, wd.data()),
                    "cudnnSetFilterNdDescriptor");
        check_cudnn(cudnnSetConvolutionNdDescriptor(p->conv, nd - 2, pad.data(), stride.data(), dilation.data(),
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                    "cudnnSetConvolutionNdDescriptor");
        check_cudnn(cudnnSetConvolutionGroupCount(p->conv, to_int(group, *this, "group")),
                    "cudnnSetConvolutionGroupCount");
        // float32: TF32 tensor cores only when allowed (CUDNN_DEFAULT_MATH permits them); float16: tensor cores.
        const bool fma_only = t == DType::F32 && !r.dev.config.tf32;
        const cudnnMathType_t math =
            t == DType::F16 ? CUDNN_TENSOR_OP_MATH : (fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH);
        check_cudnn(cudnnSetConvolutionMathType(p->conv, math), "cudnnSetConvolutionMathType");

        std::vector<int> check(nd);
        check_cudnn(cudnnGetConvolutionNdForwardOutputDim(p->conv, p->x, p->w, nd, check.data()),
                    "cudnnGetConvolutionNdForwardOutputDim");
        if (check != yd)
            fail(TESS_STATUS_INTERNAL, label + ": cuDNN computes another output shape than ONNX for input " +
                                           shape_string(x.dims));

        // The largest workspace an algorithm may use: 1 GiB, or a quarter of the memory limit.
        size_t budget = size_t{1} << 30;
        if (r.dev.config.memory_limit != 0) budget = std::min(budget, r.dev.config.memory_limit / 4);

        constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
        cudnnConvolutionFwdAlgoPerf_t perf[kCount];
        int returned = 0;
        if (r.dev.config.exhaustive_conv_search) {
            // Benchmarks the algorithms on the real buffers (y is overwritten by the real run afterwards).  The search
            // workspace comes straight from the driver and goes back at once, so the arena does not keep it.
            struct Scratch {
                void* p = nullptr;
                ~Scratch() {
                    if (p != nullptr) cudaFree(p);
                }
            } workspace;
            size_t size = budget;
            while (size > 0 && cudaMalloc(&workspace.p, size) != cudaSuccess) {
                cudaGetLastError();
                workspace.p = nullptr;
                size = size > (size_t{16} << 20) ? size / 4 : 0;
            }
            check_cudnn(cudnnFindConvolutionForwardAlgorithmEx(r.dev.cudnn, p->x, x.data, p->w, w.data, p->conv, p->y,
                                                               y.data, kCount, &returned, perf, workspace.p, size),
                        "cudnnFindConvolutionForwardAlgorithmEx");
            budget = size;
        } else {
            check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(r.dev.cudnn, p->x, p->w, p->conv, p->y, kCount, &returned,
                                                               perf),
                        "cudnnGetConvolutionForwardAlgorithm_v7");
        }
        bool chosen = false;
        for (int i = 0; i < returned && !chosen; ++i) {
            if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > budget) continue;
            if (fma_only && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH) continue;
            p->algo = perf[i].algo;
            p->workspace = perf[i].memory;
            if (!fma_only)
                check_cudnn(cudnnSetConvolutionMathType(p->conv, perf[i].mathType), "cudnnSetConvolutionMathType");
            chosen = true;
        }
        if (!chosen) {
            // Implicit GEMM needs no workspace and supports every configuration.
            p->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
            check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(r.dev.cudnn, p->x, p->w, p->conv, p->y, p->algo,
                                                                &p->workspace),
                        "cudnnGetConvolutionForwardWorkspaceSize");
        }
        return *plans.emplace(std::move(key), std::move(p)).first->second;
    }

    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const Tensor& w = weights.data != nullptr ? weights : r.required(*this, 1);
        if (w.dims.size() < 3 || x.rank() != static_cast<int64_t>(w.dims.size()))
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input " + shape_string(x.dims) + " and weights " +
                                                   shape_string(w.dims) + " differ in rank");
        if (x.dims[1] != w.dims[1] * group)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input has " + std::to_string(x.dims[1]) + " channels, weights " +
                                                   shape_string(w.dims) + " with group " + std::to_string(group) +
                                                   " expect " + std::to_string(w.dims[1] * group));
        const Shape in(x.dims.begin() + 2, x.dims.end());
        const Shape k(w.dims.begin() + 2, w.dims.end());
        if (!window.kernel_shape.empty() && window.kernel_shape != k)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": kernel_shape " + shape_string(window.kernel_shape) +
                                                   " does not match weights " + shape_string(w.dims));
        const Window::Geometry g = window.resolve(in, k, label);
        if (g.pad_begin != g.pad_end)
            fail(TESS_STATUS_NOT_IMPLEMENTED, label + ": asymmetric padding " + shape_string(g.pad_begin) + " / " +
                                                  shape_string(g.pad_end) + " is not supported by cuDNN");
        Shape out_dims = {x.dims[0], w.dims[0]};
        out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
        Tensor& y = r.output(*this, 0, x.type, out_dims);
        if (y.count() == 0) return;
        if (x.count() == 0) {
            check_cuda(cudaMemsetAsync(y.data, 0, y.bytes(), r.stream()), label.c_str());
        } else {
            Plan& p = plan(r, x, w, y, g);
            std::shared_ptr<void> workspace = p.workspace > 0 ? r.dev.allocate_shared(p.workspace) : nullptr;
            const float one = 1.0f, zero = 0.0f;
            check_cudnn(cudnnConvolutionForward(r.dev.cudnn, &one, p.x, x.data, p.w, w.data, p.conv, p.algo,
                                                workspace.get(), p.workspace, &zero, p.y, y.data),
                        label.c_str());
        }
        if (bias.data != nullptr || relu)
            check_launch(launch_channel_affine(dtype_of(x.type), y.data, y.data, nullptr,
                                               static_cast<const float*>(bias.data), out_dims[0], out_dims[1],
                                               product(out_dims, 2, out_dims.size()), relu, r.stream()),
                         *this);
    }
};

// BatchNormalization parameters as per-channel scale and shift: a = s / sqrt(var + eps), b = bias - mean * a.
void batch_norm_affine(const Node& bn, std::vector<float>& a, std::vector<float>& b) {
    const std::vector<float> scale = constant_floats(bn.in(1)->constant);
    const std::vector<float> shift = constant_floats(bn.in(2)->constant);
    const std::vector<float> mean = constant_floats(bn.in(3)->constant);
    const std::vector<float> var = constant_floats(bn.in(4)->constant);
    const size_t c = scale.size();
    if (shift.size() != c || mean.size() != c || var.size() != c)
        fail(TESS_STATUS_INVALID_ARGUMENT, bn.label() + ": scale, B, mean and var differ in size");
    const double epsilon = bn.f("epsilon", 1e-5f);
    a.resize(c);
    b.resize(c);
    for (size_t i = 0; i < c; ++i) {
        const double ai = static_cast<double>(scale[i]) / std::sqrt(static_cast<double>(var[i]) + epsilon);
        a[i] = static_cast<float>(ai);
        b[i] = static_cast<float>(static_cast<double>(shift[i]) - static_cast<double>(mean[i]) * ai);
    }
}

Tensor upload_as(Instance& instance, const std::vector<float>& values, int32_t type, const Shape& dims) {
    Tensor t;
    if (type == TESS_ELEMENT_FLOAT32) {
        t = upload_floats(instance, values);
    } else {
        std::vector<uint16_t> half(values.size());
        for (size_t i = 0; i < values.size(); ++i) half[i] = float_to_half_bits(values[i]);
        t.type = TESS_ELEMENT_FLOAT16;
        t.hold = instance.allocate_shared(std::max<size_t>(half.size() * 2, 1));
        t.data = t.hold.get();
        instance.copy_from_host(t.data, half.data(), half.size() * 2);
    }
    t.dims = dims;
    return t;
}

// ---- Matrix products (cuBLAS) ------------------------------------------------------------------------------------

// Column-major C[m x n] = alpha * op(A) op(B) + beta * C, `batch` times with the given strides (elements).
void gemm(Run& r, const Step& step, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta,
          void* c, int64_t ldc, int64_t stride_c, int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    const cudaDataType_t dt = t == DType::F32 ? CUDA_R_32F : CUDA_R_16F;
    const cublasComputeType_t compute =
        t == DType::F32 && r.dev.config.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int im = to_int(m, step, "matrix dimension"), in = to_int(n, step, "matrix dimension"),
              ik = to_int(k, step, "matrix dimension");
    const int ilda = to_int(std::max<int64_t>(lda, 1), step, "leading dimension"),
              ildb = to_int(std::max<int64_t>(ldb, 1), step, "leading dimension"),
              ildc = to_int(std::max<int64_t>(ldc, 1), step, "leading dimension");
    if (batch == 1) {
        check_cublas(cublasGemmEx(r.dev.cublas, oa, ob, im, in, ik, &alpha, a, dt, ilda, b, dt, ildb, &beta, c, dt, ildc,
                                  compute, CUBLAS_GEMM_DEFAULT),
                     step.label.c_str());
    } else {
        check_cublas(cublasGemmStridedBatchedEx(r.dev.cublas, oa, ob, im, in, ik, &alpha, a, dt, ilda, stride_a, b, dt,
                                                ildb, stride_b, &beta, c, dt, ildc, stride_c,
                                                to_int(batch, step, "batch count"), compute, CUBLAS_GEMM_DEFAULT),
                     step.label.c_str());
    }
}

struct GemmStep final : Step {
    bool trans_a = false, trans_b = false;
    float alpha = 1.0f, beta = 1.0f;
    void run(Run& r) override {
        const Tensor& a = r.required(*this, 0);
        const Tensor& b = r.required(*this, 1);
        const Tensor* c = r.input(*this, 2);
        if (a.rank() != 2 || b.rank() != 2)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": A " + shape_string(a.dims) + " and B " + shape_string(b.dims) +
                                                   " must be matrices");
        const int64_t m = trans_a ? a.dims[1] : a.dims[0], k = trans_a ? a.dims[0] : a.dims[1];
        const int64_t kb = trans_b ? b.dims[1] : b.dims[0], n = trans_b ? b.dims[0] : b.dims[1];
        if (k != kb)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": A " + shape_string(a.dims) + " and B " + shape_string(b.dims) +
                                                   " do not multiply");
        const Shape out = {m, n};
        Tensor& y = r.output(*this, 0, a.type, out);
        const DType t = dtype_of(a.type);
        float beta_used = 0.0f;
        if (c != nullptr && beta != 0.0f && c->count() > 0) {
            if (broadcast_shapes(c->dims, out, *this) != out)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": C " + shape_string(c->dims) + " does not broadcast to " +
                                                       shape_string(out));
            check_launch(launch_binary(BinaryOp::First, t, c->data, c->data, y.data, broadcast_plan(c->dims, c->dims, out),
                                       r.stream()),
                         *this);
            beta_used = beta;
        }
        // Row-major Y = A B is column-major Y^T = B^T A^T.
        gemm(r, *this, t, trans_b, trans_a, n, m, k, alpha, b.data, trans_b ? k : n, 0, a.data, trans_a ? m : k, 0,
             beta_used, y.data, n, 0, 1);
    }
};

struct MatMulStep final : Step {
    void run(Run& r) override {
        const Tensor& a = r.required(*this, 0);
        const Tensor& b = r.required(*this, 1);
        if (a.rank() == 0 || b.rank() == 0)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": MatMul inputs must have at least one dimension");
        Shape ad = a.dims, bd = b.dims;
        const bool drop_m = ad.size() == 1, drop_n = bd.size() == 1;
        if (drop_m) ad.insert(ad.begin(), 1);
        if (drop_n) bd.push_back(1);
        const int64_t m = ad[ad.size() - 2], k = ad.back(), kb = bd[bd.size() - 2], n = bd.back();
        if (k != kb)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": " + shape_string(a.dims) + " and " + shape_string(b.dims) +
                                                   " do not multiply");
        const Shape batch_a(ad.begin(), ad.end() - 2), batch_b(bd.begin(), bd.end() - 2);
        const Shape batch = broadcast_shapes(batch_a, batch_b, *this);
        Shape out = batch;
        if (!drop_m) out.push_back(m);
        if (!drop_n) out.push_back(n);
        Tensor& y = r.output(*this, 0, a.type, out);
        const DType t = dtype_of(a.type);
        const int64_t count = element_count(batch), count_a = element_count(batch_a), count_b = element_count(batch_b);
        if (y.count() == 0) return;
        if (k == 0) {
            check_cuda(cudaMemsetAsync(y.data, 0, y.bytes(), r.stream()), label.c_str());
            return;
        }
        // Column-major Y_i^T = B_i^T A_i^T for each batch entry.
        if (count_b == 1) {
            // B is shared: all of A's rows form one matrix.
            gemm(r, *this, t, false, false, n, count * m, k, 1.0f, b.data, n, 0, a.data, k, 0, 0.0f, y.data, n, 0, 1);
            return;
        }
        auto padded = [&](const Shape& s) {
            Shape p(batch.size() - s.size(), 1);
            p.insert(p.end(), s.begin(), s.end());
            return p;
        };
        if ((count_a == count && padded(batch_a) == batch) || count_a == 1) {
            if (count_b == count && padded(batch_b) == batch) {
                gemm(r, *this, t, false, false, n, m, k, 1.0f, b.data, n, k * n, a.data, k, count_a == 1 ? 0 : m * k,
                     0.0f, y.data, n, m * n, count);
                return;
            }
        }
        // General broadcasting: one product per output batch entry.
        const BroadcastPlan p = broadcast_plan(batch_a, batch_b, batch);
        const size_t es = element_size(a.type);
        for (int64_t i = 0; i < count; ++i) {
            int64_t rest = i, ao = 0, bo = 0;
            for (int d = p.rank - 1; d >= 0; --d) {
                const int64_t c = rest % p.dims[d];
                rest /= p.dims[d];
                ao += c * p.a_strides[d];
                bo += c * p.b_strides[d];
            }
            gemm(r, *this, t, false, false, n, m, k, 1.0f, static_cast<const char*>(b.data) + bo * k * n * es, n, 0,
                 static_cast<const char*>(a.data) + ao * m * k * es, k, 0, 0.0f,
                 static_cast<char*>(y.data) + i * m * n * es, n, 0, 1);
        }
    }
};

// ---- Data movement -----------------------------------------------------------------------------------------------

struct TransposeStep final : Step {
    Shape perm;  // empty: reverse
    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const size_t rank = x.dims.size();
        Shape p = perm;
        if (p.empty())
            for (size_t i = 0; i < rank; ++i) p.push_back(static_cast<int64_t>(rank - 1 - i));
        if (p.size() != rank)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": perm " + shape_string(p) + " does not match rank " +
                                                   std::to_string(rank));
        std::vector<bool> seen(rank, false);
        for (int64_t& v : p) {
            v = normalize_axis(v, static_cast<int64_t>(rank), "perm entry");
            if (seen[v]) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": perm repeats an axis");
            seen[v] = true;
        }
        Shape in_strides(rank, 1), out(rank);
        for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * x.dims[i];
        for (size_t i = 0; i < rank; ++i) out[i] = x.dims[p[i]];
        Tensor& y = r.output(*this, 0, x.type, out);
        // Merge output dimensions that stay contiguous in the source, drop size-1 dimensions.
        std::vector<int64_t> dims, strides;
        for (size_t i = 0; i < rank; ++i) {
            if (out[i] == 1) continue;
            const int64_t s = in_strides[p[i]];
            if (!dims.empty() && strides.back() == s * out[i]) {
                dims.back() *= out[i];
                strides.back() = s;
            } else {
                dims.push_back(out[i]);
                strides.push_back(s);
            }
        }
        if (y.bytes() == 0) return;
        if (dims.empty() || (dims.size() == 1 && strides[0] == 1)) {
            check_cuda(cudaMemcpyAsync(y.data, x.data, y.bytes(), cudaMemcpyDeviceToDevice, r.stream()), label.c_str());
            return;
        }
        if (dims.size() > static_cast<size_t>(kMaxDims))
            fail(TESS_STATUS_NOT_IMPLEMENTED, label + ": transposes of more than 8 dimensions are not supported");
        TransposePlan plan;
        plan.rank = static_cast<int>(dims.size());
        plan.n = y.count();
        for (size_t i = 0; i < dims.size(); ++i) {
            plan.out_dims[i] = dims[i];
            plan.src_strides[i] = strides[i];
        }
        check_launch(launch_transpose(element_size(x.type), x.data, y.data, plan, r.stream()), *this);
    }
};

struct ConcatStep final : Step {
    int64_t axis = 0;
    void run(Run& r) override {
        std::vector<const Tensor*> xs;
        for (size_t k = 0; k < in.size(); ++k) xs.push_back(&r.required(*this, k));
        const Tensor& first = *xs[0];
        const int64_t rank = first.rank();
        const int64_t a = normalize_axis(axis, rank, "axis");
        Shape out = first.dims;
        out[a] = 0;
        for (const Tensor* x : xs) {
            bool ok = x->rank() == rank && x->type == first.type;
            for (int64_t d = 0; ok && d < rank; ++d) ok = d == a || x->dims[d] == first.dims[d];
            if (!ok)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": inputs " + shape_string(first.dims) + " and " +
                                                       shape_string(x->dims) + " cannot be concatenated on axis " +
                                                       std::to_string(a));
            out[a] += x->dims[a];
        }
        Tensor& y = r.output(*this, 0, first.type, out);
        const size_t es = element_size(first.type);
        const int64_t outer = product(out, 0, a);
        const size_t out_row = static_cast<size_t>(product(out, a, rank)) * es;
        size_t offset = 0;
        for (const Tensor* x : xs) {
            const size_t row = static_cast<size_t>(product(x->dims, a, rank)) * es;
            if (row > 0 && outer > 0) {
                char* dst = static_cast<char*>(y.data) + offset;
                if (outer == 1)
                    check_cuda(cudaMemcpyAsync(dst, x->data, row, cudaMemcpyDeviceToDevice, r.stream()), label.c_str());
                else
                    check_cuda(cudaMemcpy2DAsync(dst, out_row, x->data, row, row, static_cast<size_t>(outer),
                                                 cudaMemcpyDeviceToDevice, r.stream()),
                               label.c_str());
            }
            offset += row;
        }
    }
};

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's memory with another shape.
struct AliasStep final : Step {
    enum class Kind { Reshape, Flatten, Squeeze, Unsqueeze, Identity } kind = Kind::Identity;
    bool from_input = false;  // the shape / axes come from input 1 (else from `ints`)
    Shape ints;               // Reshape shape or Squeeze/Unsqueeze axes from attributes
    bool allow_zero = false;
    int64_t axis = 1;         // Flatten

    Shape reshape(const Shape& in, const Shape& shape) const {
        Shape out(shape.size());
        int infer = -1;
        int64_t known = 1;
        for (size_t i = 0; i < shape.size(); ++i) {
            int64_t d = shape[i];
            if (d == 0 && !allow_zero) {
                if (i >= in.size())
                    fail(TESS_STATUS_INVALID_ARGUMENT, label + ": shape " + shape_string(shape) + " copies dimension " +
                                                           std::to_string(i) + " of " + shape_string(in));
                d = in[i];
            }
            if (d == -1) {
                if (infer >= 0) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": shape " + shape_string(shape) + " has two -1");
                infer = static_cast<int>(i);
                continue;
            }
            if (d < 0) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": shape " + shape_string(shape) + " is not valid");
            out[i] = d;
            known *= d;
        }
        const int64_t total = element_count(in);
        if (infer >= 0) {
            if (known == 0 || total % known != 0)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": cannot reshape " + shape_string(in) + " to " + shape_string(shape));
            out[infer] = total / known;
        }
        if (element_count(out) != total)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": cannot reshape " + shape_string(in) + " to " + shape_string(shape));
        return out;
    }

    void run(Run& r) override {
        const Tensor& x = r.required(*this, 0);
        const int64_t rank = x.rank();
        Shape out;
        switch (kind) {
            case Kind::Identity: out = x.dims; break;
            case Kind::Reshape: out = reshape(x.dims, from_input ? r.read_ints(*this, 1) : ints); break;
            case Kind::Flatten: {
                const int64_t a = normalize_axis(axis, rank, "axis", true);
                out = {product(x.dims, 0, a), product(x.dims, a, rank)};
                break;
            }
            case Kind::Squeeze: {
                Shape axes = ints;
                if (from_input && in.size() > 1 && in[1] >= 0) axes = r.read_ints(*this, 1);
                std::vector<bool> drop(rank, false);
                if (axes.empty()) {
                    for (int64_t d = 0; d < rank; ++d) drop[d] = x.dims[d] == 1;
                } else {
                    for (int64_t v : axes) {
                        const int64_t a = normalize_axis(v, rank, "axis");
                        if (x.dims[a] != 1)
                            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": dimension " + std::to_string(a) + " of " +
                                                                   shape_string(x.dims) + " is not 1");
                        drop[a] = true;
                    }
                }
                for (int64_t d = 0; d < rank; ++d)
                    if (!drop[d]) out.push_back(x.dims[d]);
                break;
            }
            case Kind::Unsqueeze: {
                const Shape axes = from_input ? r.read_ints(*this, 1) : ints;
                const int64_t out_rank = rank + static_cast<int64_t>(axes.size());
                std::vector<bool> inserted(out_rank, false);
                for (int64_t v : axes) {
                    const int64_t a = normalize_axis(v, out_rank, "axis");
                    if (inserted[a]) fail(TESS_STATUS_INVALID_ARGUMENT, label + ": axes repeat " + std::to_string(a));
                    inserted[a] = true;
                }
                size_t next = 0;
                for (int64_t d = 0; d < out_rank; ++d) out.push_back(inserted[d] ? 1 : x.dims[next++]);
                break;
            }
        }
        r.alias(*this, 0, x, out);
    }
};

// ---- The operator table ------------------------------------------------------------------------------------------

using Fused = std::vector<const TessNodeView*>;
struct OpEntry {
    std::function<std::string(const Node&)> check;
    std::function<std::unique_ptr<Step>(BuildContext&, const Node&, Fused&)> build;
};

std::string check_unary(const Node& n) {
    if (n.inputs() < 1) return "no input";
    return same_float(n, {});
}

std::string check_window(const Node& n, bool pool) {
    if (std::string why = float_input(n, 0); !why.empty()) return why;
    const Window w = Window::parse(n);
    const TessValueView* x = n.in(0);
    size_t spatial = w.kernel_shape.size();
    if (!pool) {
        const TessValueView* weight = n.in(1);
        if (weight == nullptr) return "W is missing";
        if (weight->element_type != x->element_type) return "W and X differ in type";
        if (weight->rank < 0) return "the rank of W is unknown";
        spatial = static_cast<size_t>(std::max<int64_t>(weight->rank - 2, 0));
        if (n.in(2) != nullptr && !is_constant(n.in(2))) return "the bias B must be a constant";
        if (n.in(2) != nullptr && n.in(2)->element_type != x->element_type) return "B and X differ in type";
    } else if (spatial == 0) {
        return "kernel_shape is missing";
    }
    if (spatial < 1 || spatial > 3) return std::to_string(spatial) + " spatial dimensions (1 to 3 are supported)";
    if (x->rank >= 0 && x->rank != static_cast<int64_t>(spatial) + 2)
        return "the input rank " + std::to_string(x->rank) + " does not match the kernel";
    if (std::string why = w.check(spatial); !why.empty()) return why;
    if (!pool) {
        // cuDNN pads symmetrically.
        if (w.auto_pad == "NOTSET" && !w.pads.empty()) {
            for (size_t d = 0; d < spatial; ++d)
                if (w.pads[d] != w.pads[d + spatial]) return "asymmetric pads " + shape_string(w.pads) + " (cuDNN pads symmetrically)";
        }
        if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
            const TessValueView* weight = n.in(1);
            if (x->rank < 0 || weight->dims == nullptr) return "auto_pad SAME with unknown shapes";
            for (size_t d = 0; d < spatial; ++d) {
                const int64_t in = x->dims[2 + d], k = weight->dims[2 + d];
                if (in < 0 || k < 0) return "auto_pad SAME with dynamic spatial dimensions";
                const int64_t s = w.strides.empty() ? 1 : w.strides[d], dil = w.dilations.empty() ? 1 : w.dilations[d];
                const int64_t out = (in + s - 1) / s;
                const int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * dil + 1 - in);
                if (total % 2 != 0) return "auto_pad SAME needs asymmetric padding here (cuDNN pads symmetrically)";
            }
        }
        const int64_t group = n.i("group", 1);
        if (group < 1) return "group must be positive";
    }
    return "";
}

std::string check_batch_norm(const Node& n) {
    if (std::string why = float_input(n, 0); !why.empty()) return why;
    for (size_t k = 1; k <= 4; ++k) {
        if (!is_constant(n.in(k))) return "scale, B, mean and var must be constants";
        if (!is_float_type(n.in(k)->element_type) && n.in(k)->element_type != TESS_ELEMENT_FLOAT64)
            return "parameters of type " + std::string(type_name(n.in(k)->element_type));
    }
    if (n.i("training_mode", 0) != 0) return "training mode is not supported";
    if (n.opset() < 9 && n.i("spatial", 1) == 0) return "spatial=0 is not supported";
    return no_outputs_beyond(n, 1, "a training output");
}


const std::unordered_map<std::string, OpEntry>& registry() {
    static const std::unordered_map<std::string, OpEntry> table = [] {
        std::unordered_map<std::string, OpEntry> t;

        // Unary activations.
        struct UnarySpec { const char* name; UnaryOp op; };
        const UnarySpec unary[] = {
            {"Relu", UnaryOp::Relu}, {"Sigmoid", UnaryOp::Sigmoid}, {"Tanh", UnaryOp::Tanh}, {"Erf", UnaryOp::Erf},
            {"Exp", UnaryOp::Exp}, {"Log", UnaryOp::Log}, {"Sqrt", UnaryOp::Sqrt}, {"Neg", UnaryOp::Neg},
            {"Abs", UnaryOp::Abs}, {"Reciprocal", UnaryOp::Reciprocal}, {"Softplus", UnaryOp::Softplus},
            {"Softsign", UnaryOp::Softsign}, {"Floor", UnaryOp::Floor}, {"Ceil", UnaryOp::Ceil},
            {"HardSwish", UnaryOp::HardSwish}, {"Sin", UnaryOp::Sin}, {"Cos", UnaryOp::Cos},
            {"LeakyRelu", UnaryOp::LeakyRelu}, {"Elu", UnaryOp::Elu}, {"Selu", UnaryOp::Selu},
            {"HardSigmoid", UnaryOp::HardSigmoid}, {"Gelu", UnaryOp::GeluErf},
        };
        for (const UnarySpec& spec : unary) {
            const UnaryOp op = spec.op;
            t[spec.name] = {
                [op](const Node& n) -> std::string {
                    if (op == UnaryOp::GeluErf) {
                        const std::string approx = n.s("approximate", "none");
                        if (approx != "none" && approx != "tanh") return "approximate '" + approx + "' is not valid";
                    }
                    return check_unary(n);
                },
                [op](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                    auto s = std::make_unique<UnaryStep>();
                    wire(ctx, *s, n);
                    s->op = op;
                    switch (op) {
                        case UnaryOp::LeakyRelu: s->alpha = n.f("alpha", 0.01f); break;
                        case UnaryOp::Elu: s->alpha = n.f("alpha", 1.0f); break;
                        case UnaryOp::Selu:
                            s->alpha = n.f("alpha", 1.67326319217681884765625f);
                            s->beta = n.f("gamma", 1.05070102214813232421875f);
                            break;
                        case UnaryOp::HardSigmoid:
                            s->alpha = n.f("alpha", 0.2f);
                            s->beta = n.f("beta", 0.5f);
                            break;
                        case UnaryOp::GeluErf:
                            if (n.s("approximate", "none") == "tanh") s->op = UnaryOp::GeluTanh;
                            break;
                        default: break;
                    }
                    return s;
                }};
        }

        t["Clip"] = {
            [](const Node& n) -> std::string {
                if (std::string why = same_float(n, {1, 2}); !why.empty()) return why;
                for (size_t k = 1; k <= 2; ++k)
                    if (n.in(k) != nullptr && !is_constant(n.in(k))) return "min and max must be constants";
                return "";
            },
            [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                auto s = std::make_unique<UnaryStep>();
                wire(ctx, *s, n);
                s->op = UnaryOp::Clip;
                s->alpha = -FLT_MAX;
                s->beta = FLT_MAX;
                if (n.opset() < 11) {
                    s->alpha = n.f("min", -FLT_MAX);
                    s->beta = n.f("max", FLT_MAX);
                } else {
                    if (n.in(1) != nullptr) {
                        const std::vector<float> v = constant_floats(n.in(1)->constant);
                        if (!v.empty()) s->alpha = v[0];
                    }
                    if (n.in(2) != nullptr) {
                        const std::vector<float> v = constant_floats(n.in(2)->constant);
                        if (!v.empty()) s->beta = v[0];
                    }
                    s->in.resize(1);  // the bounds are attributes of the step now
                    s->host_only.resize(1);
                }
                return s;
            }};

        // Broadcasting binary operators.
        struct BinarySpec { const char* name; BinaryOp op; };
        const BinarySpec binary[] = {{"Add", BinaryOp::Add}, {"Sub", BinaryOp::Sub}, {"Mul", BinaryOp::Mul},
                                     {"Div", BinaryOp::Div}, {"Pow", BinaryOp::Pow}, {"PRelu", BinaryOp::PRelu}};
        for (const BinarySpec& spec : binary) {
            const BinaryOp op = spec.op;
            t[spec.name] = {
                [](const Node& n) -> std::string {
                    if (n.inputs() != 2 || n.in(1) == nullptr) return "two inputs expected";
                    if (n.opset() < 7 && n.i("broadcast", 0) != 0) return "legacy broadcasting (opset < 7)";
                    return same_float(n, {1});
                },
                [op](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                    auto s = std::make_unique<BinaryStep>();
                    wire(ctx, *s, n);
                    s->op = op;
                    return s;
                }};
        }
        struct VariadicSpec { const char* name; BinaryOp op; };
        const VariadicSpec variadic[] = {{"Sum", BinaryOp::Add}, {"Max", BinaryOp::Max}, {"Min", BinaryOp::Min}};
        for (const VariadicSpec& spec : variadic) {
            const BinaryOp op = spec.op;
            t[spec.name] = {[](const Node& n) { return all_same_float(n); },
                            [op](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                                auto s = std::make_unique<VariadicStep>();
                                wire(ctx, *s, n);
                                s->op = op;
                                return s;
                            }};
        }

        for (const char* name : {"Softmax", "LogSoftmax"}) {
            const bool log = std::strcmp(name, "LogSoftmax") == 0;
            t[name] = {[](const Node& n) { return check_unary(n); },
                       [log](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                           auto s = std::make_unique<SoftmaxStep>();
                           wire(ctx, *s, n);
                           s->log = log;
                           s->legacy = n.opset() < 13;
                           s->axis = n.i("axis", s->legacy ? 1 : -1);
                           return s;
                       }};
        }

        t["LayerNormalization"] = {
            [](const Node& n) -> std::string {
                if (n.in(1) == nullptr) return "Scale is missing";
                if (std::string why = same_float(n, {1, 2}); !why.empty()) return why;
                if (n.i("stash_type", 1) != 1) return "stash_type other than float";
                for (size_t k = 1; k <= 2; ++k)
                    if (n.out(k) != nullptr && n.out(k)->element_type != TESS_ELEMENT_FLOAT32)
                        return "Mean and InvStdDev must be float";
                return "";
            },
            [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                auto s = std::make_unique<LayerNormStep>();
                wire(ctx, *s, n);
                s->axis = n.i("axis", -1);
                s->epsilon = n.f("epsilon", 1e-5f);
                return s;
            }};

        t["BatchNormalization"] = {
            check_batch_norm,
            [](BuildContext& ctx, const Node& n, Fused& fused) -> std::unique_ptr<Step> {
                auto s = std::make_unique<ChannelAffineStep>();
                wire(ctx, *s, n);
                std::vector<float> a, b;
                batch_norm_affine(n, a, b);
                s->channels = static_cast<int64_t>(a.size());
                s->scale = upload_floats(ctx.instance(), a);
                s->shift = upload_floats(ctx.instance(), b);
                for (size_t k = 1; k < s->host_only.size(); ++k) s->host_only[k] = true;
                if (const TessNodeView* next = ctx.sole_consumer(n.out(0)->name);
                    next != nullptr && std::strcmp(next->op_type, "Relu") == 0 && next->output_count >= 1 &&
                    next->outputs[0] != nullptr) {
                    s->relu = true;
                    s->out[0] = ctx.id(next->outputs[0]);
                    fused.push_back(next);
                }
                return s;
            }};

        t["Conv"] = {
            [](const Node& n) { return check_window(n, false); },
            [](BuildContext& ctx, const Node& n, Fused& fused) -> std::unique_ptr<Step> {
                auto s = std::make_unique<ConvStep>();
                wire(ctx, *s, n);
                s->window = Window::parse(n);
                s->group = n.i("group", 1);
                const int32_t type = n.in(0)->element_type;
                const TessValueView* w = n.in(1);
                std::vector<float> bias;
                if (n.in(2) != nullptr) bias = constant_floats(n.in(2)->constant);
                if (s->host_only.size() > 2 && n.in(2) != nullptr) s->host_only[2] = true;  // prepacked as float
                if (is_constant(w)) {
                    // Fold a BatchNormalization that only this Conv feeds into the weights and bias.
                    std::vector<float> weights = constant_floats(w->constant);
                    const Shape w_dims = value_dims(w->constant);
                    const char* last = n.out(0)->name;
                    const TessNodeView* next = ctx.sole_consumer(last);
                    if (next != nullptr && std::strcmp(next->op_type, "BatchNormalization") == 0 &&
                        check_node(*next).empty() && w_dims.size() >= 1) {
                        const Node bn(*next);
                        std::vector<float> a, b;
                        batch_norm_affine(bn, a, b);
                        const int64_t m = w_dims[0];
                        if (static_cast<int64_t>(a.size()) == m) {
                            const size_t per = weights.size() / static_cast<size_t>(std::max<int64_t>(m, 1));
                            for (int64_t o = 0; o < m; ++o)
                                for (size_t j = 0; j < per; ++j) weights[o * per + j] *= a[o];
                            if (bias.empty()) bias.assign(static_cast<size_t>(m), 0.0f);
                            for (int64_t o = 0; o < m; ++o) bias[o] = bias[o] * a[o] + b[o];
                            fused.push_back(next);
                            last = next->outputs[0]->name;
                            s->out[0] = ctx.id(next->outputs[0]);
                        }
                    }
                    s->weights = upload_as(ctx.instance(), weights, type, w_dims);
                    s->host_only[1] = true;
                    if (const TessNodeView* relu = ctx.sole_consumer(last);
                        relu != nullptr && std::strcmp(relu->op_type, "Relu") == 0 && relu->output_count >= 1 &&
                        relu->outputs[0] != nullptr) {
                        s->relu = true;
                        s->out[0] = ctx.id(relu->outputs[0]);
                        fused.push_back(relu);
                    }
                }
                if (!bias.empty()) s->bias = upload_floats(ctx.instance(), bias);
                return s;
            }};

        for (const char* name : {"MaxPool", "AveragePool"}) {
            const bool max = std::strcmp(name, "MaxPool") == 0;
            t[name] = {[max](const Node& n) -> std::string {
                           if (std::string why = check_window(n, true); !why.empty()) return why;
                           if (max && n.out(1) != nullptr) return "the Indices output is not supported";
                           return "";
                       },
                       [max](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                           auto s = std::make_unique<PoolStep>();
                           wire(ctx, *s, n);
                           s->window = Window::parse(n);
                           s->max = max;
                           s->count_include_pad = n.i("count_include_pad", 0) != 0;
                           return s;
                       }};
        }
        for (const char* name : {"GlobalAveragePool", "GlobalMaxPool"}) {
            const bool max = std::strcmp(name, "GlobalMaxPool") == 0;
            t[name] = {[](const Node& n) { return check_unary(n); },
                       [max](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                           auto s = std::make_unique<GlobalPoolStep>();
                           wire(ctx, *s, n);
                           s->max = max;
                           return s;
                       }};
        }
        t["LRN"] = {[](const Node& n) -> std::string {
                        if (n.i("size", 0) <= 0) return "size must be positive";
                        return check_unary(n);
                    },
                    [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                        auto s = std::make_unique<LrnStep>();
                        wire(ctx, *s, n);
                        s->size = n.i("size", 1);
                        s->alpha = n.f("alpha", 1e-4f);
                        s->beta = n.f("beta", 0.75f);
                        s->bias = n.f("bias", 1.0f);
                        return s;
                    }};

        t["Gemm"] = {[](const Node& n) -> std::string {
                         if (n.in(1) == nullptr) return "B is missing";
                         return same_float(n, {1, 2});
                     },
                     [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                         auto s = std::make_unique<GemmStep>();
                         wire(ctx, *s, n);
                         s->trans_a = n.i("transA", 0) != 0;
                         s->trans_b = n.i("transB", 0) != 0;
                         s->alpha = n.f("alpha", 1.0f);
                         s->beta = n.f("beta", 1.0f);
                         return s;
                     }};
        t["MatMul"] = {[](const Node& n) -> std::string {
                           if (n.in(1) == nullptr) return "B is missing";
                           return same_float(n, {1});
                       },
                       [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                           auto s = std::make_unique<MatMulStep>();
                           wire(ctx, *s, n);
                           return s;
                       }};

        t["Transpose"] = {[](const Node& n) { return check_unary(n); },
                          [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                              auto s = std::make_unique<TransposeStep>();
                              wire(ctx, *s, n);
                              s->perm = n.ints("perm");
                              return s;
                          }};
        t["Concat"] = {[](const Node& n) -> std::string {
                           if (n.attr("axis") == nullptr && n.opset() >= 4) return "axis is missing";
                           return all_same_float(n);
                       },
                       [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                           auto s = std::make_unique<ConcatStep>();
                           wire(ctx, *s, n);
                           s->axis = n.i("axis", 1);
                           return s;
                       }};

        // Aliases.
        auto int64_input = [](const Node& n, size_t k, bool required) -> std::string {
            const TessValueView* v = n.in(k);
            if (v == nullptr) return required ? "input " + std::to_string(k) + " is missing" : "";
            if (v->element_type != TESS_ELEMENT_INT64) return "input " + std::to_string(k) + " must be int64";
            return "";
        };
        t["Reshape"] = {[int64_input](const Node& n) -> std::string {
                            if (std::string why = check_unary(n); !why.empty()) return why;
                            return n.opset() >= 5 ? int64_input(n, 1, true) : "";
                        },
                        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                            auto s = std::make_unique<AliasStep>();
                            wire(ctx, *s, n);
                            s->kind = AliasStep::Kind::Reshape;
                            s->allow_zero = n.i("allowzero", 0) != 0;
                            if (n.opset() >= 5) {
                                s->from_input = true;
                                s->host_only[1] = true;
                            } else {
                                s->ints = n.ints("shape");
                            }
                            return s;
                        }};
        t["Flatten"] = {[](const Node& n) { return check_unary(n); },
                        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                            auto s = std::make_unique<AliasStep>();
                            wire(ctx, *s, n);
                            s->kind = AliasStep::Kind::Flatten;
                            s->axis = n.i("axis", 1);
                            return s;
                        }};
        t["Squeeze"] = {[int64_input](const Node& n) -> std::string {
                            if (std::string why = check_unary(n); !why.empty()) return why;
                            return n.opset() >= 13 ? int64_input(n, 1, false) : "";
                        },
                        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                            auto s = std::make_unique<AliasStep>();
                            wire(ctx, *s, n);
                            s->kind = AliasStep::Kind::Squeeze;
                            if (n.opset() >= 13) {
                                s->from_input = true;
                                if (s->host_only.size() > 1) s->host_only[1] = true;
                            } else {
                                s->ints = n.ints("axes");
                            }
                            return s;
                        }};
        t["Unsqueeze"] = {[int64_input](const Node& n) -> std::string {
                              if (std::string why = check_unary(n); !why.empty()) return why;
                              return n.opset() >= 13 ? int64_input(n, 1, true) : "";
                          },
                          [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                              auto s = std::make_unique<AliasStep>();
                              wire(ctx, *s, n);
                              s->kind = AliasStep::Kind::Unsqueeze;
                              if (n.opset() >= 13) {
                                  s->from_input = true;
                                  s->host_only[1] = true;
                              } else {
                                  s->ints = n.ints("axes");
                              }
                              return s;
                          }};
        t["Identity"] = {[](const Node& n) { return check_unary(n); },
                         [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                             auto s = std::make_unique<AliasStep>();
                             wire(ctx, *s, n);
                             s->kind = AliasStep::Kind::Identity;
                             return s;
                         }};
        return t;
    }();
    return table;
}

}  // namespace

std::string check_node(const TessNodeView& view) {
    const Node n(view);
    if (view.domain != nullptr && view.domain[0] != '\0' && std::strcmp(view.domain, "ai.onnx") != 0)
        return std::string("cuda: no CUDA kernels for domain '") + view.domain + "'";
    const auto& table = registry();
    auto it = table.find(view.op_type);
    if (it == table.end()) return std::string("cuda: no CUDA kernel for ") + view.op_type;
    std::string why;
    try {
        why = it->second.check(n);
    } catch (const std::exception& e) {
        why = e.what();
    }
    return why.empty() ? "" : std::string("cuda: ") + view.op_type + ": " + why;
}

std::unique_ptr<Step> build_step(BuildContext& ctx, const TessNodeView& node, std::vector<const TessNodeView*>& fused) {
    const Node n(node);
    return registry().at(node.op_type).build(ctx, n, fused);
}

}  // namespace tessera::cuda
