// FusedConv(X, W [, B [, Z]]; auto_pad, dilations, group, kernel_shape, pads, strides, activation,
//           activation_params)
//
//   Y = activation(Conv(X, W) + B + Z), Conv as ONNX defines it (any number of spatial dims), Z of Y's exact shape
//   (onnxruntime's Conv/Sum fusion).  Activations: activation.h.  auto_pad SAME_UPPER / SAME_LOWER need unit
//   dilations (onnxruntime refuses others); their padding follows onnxruntime's ComputePad.
//
// Per image and group: im2col into a [C/group * kernel size, output size] buffer (skipped for pointwise kernels with
// unit strides and no padding), one BLAS product with the group's weights (accumulating onto Z when given), then
// bias and activation per output channel.  Weights are the node's initializer, used in place for float and double
// and converted once for float16.
#include <algorithm>

#include "activation.h"
#include "gemm.h"
#include "op_support.h"

namespace tessera::contrib {
namespace {

enum class AutoPad { NotSet, Valid, SameUpper, SameLower };

struct ConvAttrs {
    AutoPad auto_pad = AutoPad::NotSet;
    int64_t group = 1;
    std::vector<int64_t> kernel_shape, pads, strides, dilations;  // as given (may be empty)
    Activation activation;

    explicit ConvAttrs(const Node& node) {
        std::string pad = node.get_string("auto_pad", "NOTSET");
        if (pad == "NOTSET" || pad.empty()) {
            auto_pad = AutoPad::NotSet;
        } else if (pad == "VALID") {
            auto_pad = AutoPad::Valid;
        } else if (pad == "SAME_UPPER") {
            auto_pad = AutoPad::SameUpper;
        } else if (pad == "SAME_LOWER") {
            auto_pad = AutoPad::SameLower;
        } else {
            fail("auto_pad '" + pad + "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
        }
        group = node.get_int("group", 1);
        if (group < 1) fail("group must be positive");
        kernel_shape = node.get_ints("kernel_shape");
        pads = node.get_ints("pads");
        strides = node.get_ints("strides");
        dilations = node.get_ints("dilations");
        for (int64_t s : strides)
            if (s < 1) fail("strides must be positive");
        for (int64_t d : dilations)
            if (d < 1) fail("dilations must be positive");
        for (int64_t p : pads)
            if (p < 0) fail("pads must not be negative");
        for (int64_t k : kernel_shape)
            if (k < 1) fail("kernel_shape entries must be positive");
        if (!pads.empty() && pads.size() % 2 != 0) fail("pads must hold a begin and an end per spatial dim");
        if (auto_pad == AutoPad::SameUpper || auto_pad == AutoPad::SameLower)
            for (int64_t d : dilations)
                if (d != 1) fail("auto_pad SAME_UPPER / SAME_LOWER with dilations other than 1 is not supported");
        activation = Activation::for_conv(node);
    }

    // Checks the attribute lengths against the number of spatial dims.
    void check_rank(size_t spatial) const {
        auto len = [&](const std::vector<int64_t>& v, size_t want, const char* name) {
            if (!v.empty() && v.size() != want)
                fail(std::string(name) + " has " + std::to_string(v.size()) + " entries, expected " + std::to_string(want));
        };
        len(kernel_shape, spatial, "kernel_shape");
        len(strides, spatial, "strides");
        len(dilations, spatial, "dilations");
        len(pads, 2 * spatial, "pads");
    }
};

// Geometry of one convolution, from the input and weight shapes.
struct ConvGeometry {
    int64_t N = 0, C = 0, M = 0, group = 1;
    std::vector<int64_t> in, kernel, out, stride, dilation, pad_head, pad_tail;

    size_t spatial() const { return in.size(); }

    static ConvGeometry make(const ConvAttrs& attrs, std::span<const int64_t> x, std::span<const int64_t> w) {
        if (x.size() < 3) fail("X must have a batch, a channel and at least one spatial dim, it is " + shape_string(x));
        if (w.size() != x.size()) fail("W " + shape_string(w) + " must have the rank of X " + shape_string(x));
        const size_t s = x.size() - 2;
        attrs.check_rank(s);
        ConvGeometry g;
        g.N = x[0];
        g.C = x[1];
        g.M = w[0];
        g.group = attrs.group;
        if (g.C != w[1] * g.group)
            fail("X has " + std::to_string(g.C) + " channels, W " + shape_string(w) + " with group " +
                 std::to_string(g.group) + " expects " + std::to_string(w[1] * g.group));
        if (g.M % g.group != 0)
            fail("W's " + std::to_string(g.M) + " output channels are not divisible by group " + std::to_string(g.group));
        g.in.assign(x.begin() + 2, x.end());
        g.kernel.assign(w.begin() + 2, w.end());
        if (!attrs.kernel_shape.empty() && attrs.kernel_shape != g.kernel)
            fail("kernel_shape " + shape_string(attrs.kernel_shape) + " differs from W's spatial dims " +
                 shape_string(g.kernel));
        g.stride = attrs.strides.empty() ? std::vector<int64_t>(s, 1) : attrs.strides;
        g.dilation = attrs.dilations.empty() ? std::vector<int64_t>(s, 1) : attrs.dilations;
        g.pad_head.assign(s, 0);
        g.pad_tail.assign(s, 0);
        if (!attrs.pads.empty()) {
            std::copy(attrs.pads.begin(), attrs.pads.begin() + s, g.pad_head.begin());
            std::copy(attrs.pads.begin() + s, attrs.pads.end(), g.pad_tail.begin());
        }
        g.out.assign(s, 0);
        for (size_t i = 0; i < s; ++i) {
            const int64_t k = g.kernel[i], st = g.stride[i], d = g.dilation[i];
            switch (attrs.auto_pad) {
                case AutoPad::NotSet: break;
                case AutoPad::Valid: g.pad_head[i] = g.pad_tail[i] = 0; break;
                case AutoPad::SameUpper:
                case AutoPad::SameLower: {
                    const int64_t target = (g.in[i] + st - 1) / st;
                    int64_t needed = (target - 1) * st + k - g.in[i];
                    if (output_size(g.in[i], k, st, 1, needed, needed) < target) needed += 1;
                    g.pad_head[i] = attrs.auto_pad == AutoPad::SameLower ? (needed + 1) / 2 : needed / 2;
                    g.pad_tail[i] = needed - g.pad_head[i];
                    break;
                }
            }
            g.out[i] = output_size(g.in[i], k, st, d, g.pad_head[i], g.pad_tail[i]);
            if (g.out[i] < 0) g.out[i] = 0;
        }
        return g;
    }

    // floor((in + pads - dilated kernel) / stride) + 1, computed as onnxruntime does (a truncating conversion).
    static int64_t output_size(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t head, int64_t tail) {
        const int64_t dk = dilation * (k - 1) + 1;
        return static_cast<int64_t>(static_cast<double>(in + head + tail - dk) / static_cast<double>(stride) + 1);
    }

    std::vector<int64_t> output_shape() const {
        std::vector<int64_t> shape{N, M};
        shape.insert(shape.end(), out.begin(), out.end());
        return shape;
    }

    bool pointwise() const {
        for (size_t i = 0; i < spatial(); ++i)
            if (kernel[i] != 1 || stride[i] != 1 || pad_head[i] != 0 || pad_tail[i] != 0) return false;
        return true;
    }
};

// Writes one row of the im2col matrix for a 1-D / 2-D convolution (2-D with H = 1 for 1-D): for kernel offset
// (kh, kw) of channel plane `x` (H x W), the values read by every output position, zeros outside the input.
template <typename C>
void im2col_2d(const C* x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t kh, int64_t kw, int64_t sh,
               int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw, C* row) {
    const int64_t off_w = kw * dw - pw;
    // Output columns whose input column lies inside [0, W): ow * sw + off_w in range.
    int64_t lo = off_w >= 0 ? 0 : (-off_w + sw - 1) / sw;
    int64_t hi = W - 1 - off_w < 0 ? -1 : (W - 1 - off_w) / sw;  // inclusive
    lo = std::min(lo, OW);
    hi = std::min(hi, OW - 1);
    for (int64_t oh = 0; oh < OH; ++oh) {
        C* out = row + oh * OW;
        const int64_t ih = oh * sh + kh * dh - ph;
        if (ih < 0 || ih >= H || hi < lo) {
            std::fill(out, out + OW, C(0));
            continue;
        }
        const C* in = x + ih * W + off_w;
        std::fill(out, out + lo, C(0));
        if (sw == 1) {
            std::copy(in + lo, in + hi + 1, out + lo);
        } else {
            for (int64_t ow = lo; ow <= hi; ++ow) out[ow] = in[ow * sw];
        }
        std::fill(out + hi + 1, out + OW, C(0));
    }
}

// The general N-d im2col (3-D and more): one row per (channel, kernel offset), one column per output position.
template <typename C>
void im2col_nd(const C* x, int64_t channels, const ConvGeometry& g, C* col) {
    const size_t s = g.spatial();
    const int64_t in_size = product(g.in), out_size = product(g.out), k_size = product(g.kernel);
    std::vector<int64_t> k_index(s), o_index(s);
    for (int64_t c = 0; c < channels; ++c) {
        const C* plane = x + c * in_size;
        for (int64_t k = 0; k < k_size; ++k) {
            int64_t rem = k;
            for (size_t i = s; i-- > 0;) {
                k_index[i] = rem % g.kernel[i];
                rem /= g.kernel[i];
            }
            C* row = col + (c * k_size + k) * out_size;
            std::fill(o_index.begin(), o_index.end(), 0);
            for (int64_t o = 0; o < out_size; ++o) {
                int64_t offset = 0;
                bool inside = true;
                for (size_t i = 0; i < s; ++i) {
                    const int64_t pos = o_index[i] * g.stride[i] + k_index[i] * g.dilation[i] - g.pad_head[i];
                    if (pos < 0 || pos >= g.in[i]) {
                        inside = false;
                        break;
                    }
                    offset = offset * g.in[i] + pos;
                }
                row[o] = inside ? plane[offset] : C(0);
                for (size_t i = s; i-- > 0;) {
                    if (++o_index[i] < g.out[i]) break;
                    o_index[i] = 0;
                }
            }
        }
    }
}

template <typename C>
void im2col(const C* x, int64_t channels, const ConvGeometry& g, C* col) {
    const size_t s = g.spatial();
    if (s > 2) return im2col_nd(x, channels, g, col);
    const bool one = s == 1;
    const int64_t H = one ? 1 : g.in[0], W = g.in[s - 1];
    const int64_t OH = one ? 1 : g.out[0], OW = g.out[s - 1];
    const int64_t KH = one ? 1 : g.kernel[0], KW = g.kernel[s - 1];
    const int64_t sh = one ? 1 : g.stride[0], sw = g.stride[s - 1];
    const int64_t dh = one ? 1 : g.dilation[0], dw = g.dilation[s - 1];
    const int64_t ph = one ? 0 : g.pad_head[0], pw = g.pad_head[s - 1];
    const int64_t out_size = OH * OW;
    for (int64_t c = 0; c < channels; ++c)
        for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw)
                im2col_2d(x + c * H * W, H, W, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw,
                          col + ((c * KH + kh) * KW + kw) * out_size);
}

template <typename C>
void run_conv(const ConvGeometry& g, const Activation& act, const C* X, const C* Wt, const C* B, const C* Z, C* Y) {
    const int64_t Cg = g.C / g.group, Mg = g.M / g.group;
    const int64_t in_size = product(g.in), out_size = product(g.out), k_size = product(g.kernel);
    const int64_t kdim = Cg * k_size;
    const bool pointwise = g.pointwise();
    std::vector<C> col(pointwise ? 0 : static_cast<size_t>(kdim * out_size));
    if (Z != nullptr) std::copy(Z, Z + g.N * g.M * out_size, Y);
    for (int64_t n = 0; n < g.N; ++n) {
        const C* xn = X + n * g.C * in_size;
        C* yn = Y + n * g.M * out_size;
        for (int64_t grp = 0; grp < g.group; ++grp) {
            const C* xg = xn + grp * Cg * in_size;
            const C* src = xg;
            if (!pointwise) {
                im2col(xg, Cg, g, col.data());
                src = col.data();
            }
            gemm<C>(false, false, Mg, out_size, kdim, C(1), Wt + grp * Mg * kdim, std::max<int64_t>(kdim, 1), src,
                    std::max<int64_t>(out_size, 1), Z != nullptr ? C(1) : C(0), yn + grp * Mg * out_size,
                    std::max<int64_t>(out_size, 1));
        }
        for (int64_t m = 0; m < g.M; ++m) {
            C* row = yn + m * out_size;
            if (B != nullptr) {
                const C b = B[m];
                for (int64_t i = 0; i < out_size; ++i) row[i] += b;
            }
            act.apply(row, static_cast<size_t>(out_size));
        }
    }
}

// ---- Callbacks ------------------------------------------------------------------------------------------------

void check_conv(const Node& node) {
    require_same_type(node, {0, 1, 2, 3});
    ConvAttrs attrs(node);
    auto x = node.input_dims(0), w = node.input_dims(1);
    if (x && x->size() < 3)
        fail("X must have a batch, a channel and at least one spatial dim, it has rank " + std::to_string(x->size()));
    if (x && w && w->size() != x->size())
        fail("W has rank " + std::to_string(w->size()) + ", X has rank " + std::to_string(x->size()));
    if (w && w->size() >= 3) {
        attrs.check_rank(w->size() - 2);
        if ((*w)[0] >= 0 && (*w)[0] % attrs.group != 0)
            fail("W's " + std::to_string((*w)[0]) + " output channels are not divisible by group " +
                 std::to_string(attrs.group));
        if (x && x->size() == w->size() && (*x)[1] >= 0 && (*w)[1] >= 0 && (*x)[1] != (*w)[1] * attrs.group)
            fail("X has " + std::to_string((*x)[1]) + " channels, W with group " + std::to_string(attrs.group) +
                 " expects " + std::to_string((*w)[1] * attrs.group));
    }
    if (auto b = node.input_dims(2); b && b->size() != 1) fail("B must be 1-D, it has rank " + std::to_string(b->size()));
}

void infer_conv(const Node& node, const ShapeOut& out) {
    int32_t type = node.input_type(0);
    auto x = node.input_dims(0), w = node.input_dims(1);
    if (!x || !w || x->size() < 3 || w->size() != x->size()) return out.set_type(0, type);
    std::vector<int64_t> shape(x->size(), -1);
    shape[0] = (*x)[0];
    shape[1] = (*w)[0];
    bool known = std::all_of(x->begin() + 1, x->end(), [](int64_t d) { return d >= 0; }) &&
                 std::all_of(w->begin(), w->end(), [](int64_t d) { return d >= 0; });
    if (known) {
        std::vector<int64_t> xd = *x;
        xd[0] = 1;
        ConvGeometry g = ConvGeometry::make(ConvAttrs(node), xd, *w);
        std::copy(g.out.begin(), g.out.end(), shape.begin() + 2);
    }
    out.set(0, type, shape);
}

class ConvKernel final : public Kernel {
public:
    explicit ConvKernel(const Node& node) : attrs_(node) {
        if (node.input_type(1) == kHalf) {
            if (node.constant(1) != nullptr) packed_w_ = constant_as_compute<Half>(node, 1);
            if (node.constant(2) != nullptr) packed_b_ = constant_as_compute<Half>(node, 2);
            has_packed_w_ = node.constant(1) != nullptr;
            has_packed_b_ = node.constant(2) != nullptr;
        }
    }

    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "X");
        Tensor w = ctx.input(1, "W");
        std::optional<Tensor> b = ctx.optional_input(2);
        std::optional<Tensor> z = ctx.optional_input(3);
        if (w.type != x.type || (b && b->type != x.type) || (z && z->type != x.type))
            fail("X, W, B and Z must have one element type");
        ConvGeometry g = ConvGeometry::make(attrs_, x.dims, w.dims);
        if (b && (b->rank() != 1 || b->dim(0) != g.M))
            fail("B " + shape_string(b->dims) + " must be 1-D with " + std::to_string(g.M) + " entries");
        std::vector<int64_t> y_shape = g.output_shape();
        if (z && z->shape() != y_shape)
            fail("Z " + shape_string(z->dims) + " must have the output's shape " + shape_string(y_shape));
        void* y = ctx.output(0, x.type, y_shape);
        const int64_t y_count = product(y_shape);
        if (y_count == 0) return;
        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            if constexpr (std::is_same_v<T, BFloat16>) {
                fail("bfloat16 is not supported");
            } else if constexpr (std::is_same_v<T, C>) {
                run_conv<C>(g, attrs_.activation, x.as<C>(), w.as<C>(), b ? b->as<C>() : nullptr,
                            z ? z->as<C>() : nullptr, static_cast<C*>(y));
            } else {
                auto convert = [](const Tensor& t) {
                    std::vector<float> v(t.count);
                    convert_in(t.as<T>(), v.data(), t.count);
                    return v;
                };
                std::vector<float> fx = convert(x), fw, fb, fz, fy(static_cast<size_t>(y_count));
                const float* pw = has_packed_w_ && packed_w_.size() == w.count ? packed_w_.data()
                                                                              : (fw = convert(w)).data();
                const float* pb = nullptr;
                if (b) pb = has_packed_b_ && packed_b_.size() == b->count ? packed_b_.data() : (fb = convert(*b)).data();
                if (z) fz = convert(*z);
                run_conv<float>(g, attrs_.activation, fx.data(), pw, pb, z ? fz.data() : nullptr, fy.data());
                convert_out(fy.data(), static_cast<T*>(y), fy.size());
            }
        });
    }

private:
    ConvAttrs attrs_;
    bool has_packed_w_ = false, has_packed_b_ = false;
    std::vector<float> packed_w_, packed_b_;
};

const std::vector<int32_t> kConvTypes = {kFloat, kHalf, kDouble};

}  // namespace

void add_conv_ops(std::vector<OpSpec>& ops) {
    OpSpec conv;
    conv.name = "FusedConv";
    conv.inputs = {{"X", kConvTypes}, {"W", kConvTypes}, {"B", kConvTypes, true}, {"Z", kConvTypes, true}};
    conv.outputs = {{"Y", kConvTypes}};
    conv.attributes = {"activation", "activation_params", "auto_pad", "dilations", "group",
                       "kernel_shape", "pads", "strides"};
    conv.check = check_conv;
    conv.infer = infer_conv;
    conv.create = [](const Node& node) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(node); };
    ops.push_back(conv);
}

}  // namespace tessera::contrib
