// CPU provider: MaxPool (with Indices), AveragePool, LpPool and their Global* forms.  Windowed pools support up to
// three spatial dimensions; lower ranks run through the 3-D loops with leading dimensions of size 1.
#include <algorithm>
#include <numeric>
#include <optional>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/all_kernels.h"
#include "util/blocked_conv.h"
#include "util/window2d.h"
#include "util/im2col.h"

namespace tessera::cpu {

namespace {

enum class PoolKind { Max, Average, Lp };

// An INT or FLOAT attribute as a number (LpPool's p is a float in opset 1 and an int afterwards).
double number_attr(const NodeInfo& info, std::string_view name, double fallback) {
    const TessAttributeView* a = info.find(name);
    if (a == nullptr) return fallback;
    if (a->type == TESS_ATTR_INT) return static_cast<double>(a->i);
    if (a->type == TESS_ATTR_FLOAT) return a->f;
    throw KernelError(std::string(info.op_type()) + ": attribute " + std::string(name) + " must be a number");
}

double read_p(const NodeInfo& info) {
    const double p = number_attr(info, "p", 2.0);
    if (!(p > 0)) throw KernelError(std::string(info.op_type()) + ": p must be positive");
    return p;
}

// Pool geometry padded to exactly three spatial dimensions.
struct Pool3 {
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
    int64_t in_plane, out_plane, window;

    explicit Pool3(const WindowGeometry& g) {
        const size_t lead = 3 - g.rank();
        for (size_t i = 0; i < 3; ++i) {
            const bool real = i >= lead;
            const size_t j = real ? i - lead : 0;
            in[i] = real ? g.input[j] : 1;
            out[i] = real ? g.output[j] : 1;
            k[i] = real ? g.kernel[j] : 1;
            s[i] = real ? g.strides[j] : 1;
            d[i] = real ? g.dilations[j] : 1;
            pb[i] = real ? g.pads_begin[j] : 0;
            pe[i] = real ? g.pads_end[j] : 0;
        }
        in_plane = in[0] * in[1] * in[2];
        out_plane = out[0] * out[1] * out[2];
        window = k[0] * k[1] * k[2];
    }
};

struct PoolOptions {
    PoolKind kind;
    bool count_include_pad;
    bool column_major_indices;
    double p;
};

// Per-dimension window facts shared by every plane: for each output position, the taps inside the input and the
// number of taps inside the padded input; for the innermost dimension also, per tap, its offset and the output
// positions it reaches inside the input.
struct PoolTables {
    std::vector<TapRange> valid[3];
    std::vector<int64_t> padded_count[3];
    std::vector<int64_t> inner_offset;
    std::vector<TapRange> inner_positions;
    // Innermost dimension: 1 / (taps inside the input) and 1 / (taps inside the padded input), 0 for none.
    std::vector<double> inner_inverse_valid, inner_inverse_padded;
    bool any_empty = false;  // some window lies entirely in the padding

    explicit PoolTables(const Pool3& g) {
        for (int d = 0; d < 3; ++d) {
            for (int64_t o = 0; o < g.out[d]; ++o) {
                const int64_t start = o * g.s[d] - g.pb[d];
                valid[d].push_back(taps_inside(start, g.k[d], g.d[d], g.in[d]));
                const TapRange padded = taps_inside(start + g.pb[d], g.k[d], g.d[d], g.in[d] + g.pb[d] + g.pe[d]);
                padded_count[d].push_back(padded.last - padded.first);
                any_empty = any_empty || valid[d].back().first == valid[d].back().last;
            }
        }
        for (int64_t o = 0; o < g.out[2]; ++o) {
            const int64_t valid_count = valid[2][o].last - valid[2][o].first;
            inner_inverse_valid.push_back(valid_count > 0 ? 1.0 / double(valid_count) : 0.0);
            inner_inverse_padded.push_back(padded_count[2][o] > 0 ? 1.0 / double(padded_count[2][o]) : 0.0);
        }
        for (int64_t t = 0; t < g.k[2]; ++t) {
            inner_offset.push_back(t * g.d[2] - g.pb[2]);
            inner_positions.push_back(taps_inside(inner_offset.back(), g.out[2], g.s[2], g.in[2]));
        }
    }
};

template <typename Acc>
Acc lp_term(Acc v, double p) {
    if (p == 1.0) return std::abs(v);
    if (p == 2.0) return v * v;
    return static_cast<Acc>(std::pow(std::abs(static_cast<double>(v)), p));
}

template <typename Acc>
Acc lp_root(Acc sum, double p) {
    if (p == 1.0) return sum;
    if (p == 2.0) return std::sqrt(sum);
    return static_cast<Acc>(std::pow(static_cast<double>(sum), 1.0 / p));
}

// One plane (one n, c), computed an output row at a time: every tap of the window is applied to the whole row at
// once (a strided, vectorizable sweep), then the row is finalized.  Windows entirely in padding give 0.
template <PoolKind kind, typename T>
void pool_plane_rows(const Pool3& g, const PoolTables& tables, const PoolOptions& o, const T* x, T* y) {
    const int64_t out_row = g.out[2], stride = g.s[2];
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        const TapRange r0 = tables.valid[0][o0];
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
            const TapRange r1 = tables.valid[1][o1];
            T* yrow = y + (o0 * g.out[1] + o1) * out_row;
            std::fill(yrow, yrow + out_row, kind == PoolKind::Max ? std::numeric_limits<T>::lowest() : T(0));
            for (int64_t t0 = r0.first; t0 < r0.last; ++t0) {
                const int64_t x0 = o0 * g.s[0] - g.pb[0] + t0 * g.d[0];
                for (int64_t t1 = r1.first; t1 < r1.last; ++t1) {
                    const int64_t x1 = o1 * g.s[1] - g.pb[1] + t1 * g.d[1];
                    const T* xrow = x + (x0 * g.in[1] + x1) * g.in[2];
                    for (int64_t t2 = 0; t2 < g.k[2]; ++t2) {
                        const int64_t offset = tables.inner_offset[t2];
                        const TapRange r = tables.inner_positions[t2];
                        if constexpr (kind == PoolKind::Max) {
                            if (stride == 1) {
                                for (int64_t i = r.first; i < r.last; ++i)
                                    yrow[i] = std::max(yrow[i], xrow[i + offset]);
                            } else {
                                for (int64_t i = r.first; i < r.last; ++i) {
                                    yrow[i] = std::max(yrow[i], xrow[i * stride + offset]);
                                }
                            }
                        } else if constexpr (kind == PoolKind::Average) {
                            if (stride == 1) {
                                for (int64_t i = r.first; i < r.last; ++i) yrow[i] += xrow[i + offset];
                            } else {
                                for (int64_t i = r.first; i < r.last; ++i) yrow[i] += xrow[i * stride + offset];
                            }
                        } else {
                            for (int64_t i = r.first; i < r.last; ++i)
                                yrow[i] += lp_term(xrow[i * stride + offset], o.p);
                        }
                    }
                }
            }
            // Finalize: averages (a product of per-dimension tap counts, since the taps inside form a box), Lp
            // roots, and 0 for windows entirely in padding.
            const int64_t outer_valid = (r0.last - r0.first) * (r1.last - r1.first);
            if constexpr (kind == PoolKind::Average) {
                if (o.count_include_pad) {
                    const double outer = 1.0 / double(tables.padded_count[0][o0] * tables.padded_count[1][o1]);
                    for (int64_t i = 0; i < out_row; ++i) {
                        yrow[i] = static_cast<T>(yrow[i] * (outer * tables.inner_inverse_padded[i]));
                    }
                    if (outer_valid == 0 || tables.any_empty) {
                        for (int64_t i = 0; i < out_row; ++i) {
                            if (outer_valid * (tables.valid[2][i].last - tables.valid[2][i].first) == 0) yrow[i] = T(0);
                        }
                    }
                } else {
                    const double outer = outer_valid > 0 ? 1.0 / double(outer_valid) : 0.0;
                    for (int64_t i = 0; i < out_row; ++i) {
                        yrow[i] = static_cast<T>(yrow[i] * (outer * tables.inner_inverse_valid[i]));
                    }
                }
            } else if (outer_valid == 0 || tables.any_empty || kind == PoolKind::Lp) {
                for (int64_t i = 0; i < out_row; ++i) {
                    if (outer_valid * (tables.valid[2][i].last - tables.valid[2][i].first) == 0) {
                        yrow[i] = T(0);
                    } else if constexpr (kind == PoolKind::Lp) {
                        yrow[i] = lp_root(yrow[i], o.p);
                    }
                }
            }
        }
    }
}

// MaxPool with the Indices output: one window at a time, remembering where the maximum came from (the first
// occurrence in row-major window order).  Indices count from the start of the whole tensor; storage_order=1 numbers
// the spatial elements column-major.
template <typename T>
void max_pool_plane_indexed(const Pool3& g, const PoolTables& tables, bool column_major, const T* x, T* y,
                            int64_t* indices, int64_t index_base) {
    int64_t out_index = 0;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        const TapRange r0 = tables.valid[0][o0];
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
            const TapRange r1 = tables.valid[1][o1];
            for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++out_index) {
                const TapRange r2 = tables.valid[2][o2];
                T best = T(0);
                int64_t best_at = -1;  // a window entirely in padding yields 0 and index -1
                for (int64_t t0 = r0.first; t0 < r0.last; ++t0) {
                    const int64_t x0 = o0 * g.s[0] - g.pb[0] + t0 * g.d[0];
                    for (int64_t t1 = r1.first; t1 < r1.last; ++t1) {
                        const int64_t x1 = o1 * g.s[1] - g.pb[1] + t1 * g.d[1];
                        for (int64_t t2 = r2.first; t2 < r2.last; ++t2) {
                            const int64_t x2 = o2 * g.s[2] - g.pb[2] + t2 * g.d[2];
                            const T v = x[(x0 * g.in[1] + x1) * g.in[2] + x2];
                            if (best_at < 0 || v > best) {
                                best = v;
                                best_at = column_major ? x0 + x1 * g.in[0] + x2 * g.in[0] * g.in[1]
                                                       : (x0 * g.in[1] + x1) * g.in[2] + x2;
                            }
                        }
                    }
                }
                y[out_index] = best;
                indices[out_index] = best_at < 0 ? -1 : index_base + best_at;
            }
        }
    }
}

// One value from a whole plane: its max, mean or Lp norm.  Sixteen partial sums (or maxima) in turn, so that the
// compiler vectorizes the loop: a single running float sum is a chain of dependent adds it may not reorder
// (ResNet-50's final 7x7 average pool took 238 us that way).
template <typename T>
T reduce_plane(PoolKind kind, double p, const T* x, int64_t count) {
    if (count == 0) return T(0);
    constexpr int kLanes = 16;
    T part[kLanes];
    std::fill(part, part + kLanes, kind == PoolKind::Max ? x[0] : T(0));
    int64_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
            const T v = x[i + l];
            part[l] = kind == PoolKind::Max ? std::max(part[l], v) : kind == PoolKind::Average ? part[l] + v
                                                                                               : part[l] + lp_term(v, p);
        }
    }
    for (int l = 0; i < count; ++i, ++l) {
        const T v = x[i];
        part[l] = kind == PoolKind::Max ? std::max(part[l], v) : kind == PoolKind::Average ? part[l] + v
                                                                                           : part[l] + lp_term(v, p);
    }
    if (kind == PoolKind::Max) return *std::max_element(part, part + kLanes);
    const T sum = std::accumulate(part, part + kLanes, T(0));
    return kind == PoolKind::Average ? sum / static_cast<T>(count) : lp_root(sum, p);
}

// A window that is the whole unpadded input (ResNet's final AveragePool) reduces each plane to one value.
bool window_is_whole_plane(const WindowGeometry& g) {
    for (size_t d = 0; d < g.rank(); ++d) {
        if (g.kernel[d] != g.input[d] || g.dilations[d] != 1 || g.pads_begin[d] != 0 || g.pads_end[d] != 0 ||
            g.output[d] != 1)
            return false;
    }
    return true;
}

// How a pool handles the blocked channel layout (util/blocked_conv.h), decided from the declared input shape.
enum class PoolLayout {
    NchwOnly,
    WholePlane,  // reads X blocked when told; Y ([N, C, 1, ...]) is the same bytes in either layout: NCHW
    Windowed,    // MaxPool, or AveragePool whose windows all lie inside the image: blocked X gives blocked Y
};

// Whether every window of g lies inside the input (no padding, and no partial window from ceil_mode).
bool windows_inside(const WindowGeometry& g) {
    for (size_t d = 0; d < g.rank(); ++d) {
        if (g.pads_begin[d] != 0 || g.pads_end[d] != 0) return false;
        if ((g.output[d] - 1) * g.strides[d] + (g.kernel[d] - 1) * g.dilations[d] + 1 > g.input[d]) return false;
    }
    return true;
}

class PoolKernel final : public Kernel, public BlockedLayoutKernel, public ProducerFusingKernel {
public:
    PoolKernel(const NodeInfo& info, PoolKind kind) : op_(info.op_type()), attrs_(WindowAttributes::parse(info)) {
        options_.kind = kind;
        options_.count_include_pad = info.attr_int("count_include_pad", 0) != 0;
        options_.column_major_indices = info.attr_int("storage_order", 0) != 0;
        options_.p = kind == PoolKind::Lp ? read_p(info) : 2.0;
        if (attrs_.kernel_shape.empty()) throw KernelError(op_ + ": the kernel_shape attribute is required");
        const std::optional<Shape> x = info.input_shape(0);
        if (kind == PoolKind::Lp || !blocked_input_declared(info) || info.has_output(1) ||
            attrs_.kernel_shape.size() != 2)
            return;
        try {
            const WindowGeometry g = resolve_window(op_, attrs_, Shape(x->begin() + 2, x->end()), attrs_.kernel_shape);
            if (window_is_whole_plane(g)) {
                layout_ = PoolLayout::WholePlane;
            } else if (kind == PoolKind::Max && !PoolTables(Pool3(g)).any_empty) {
                layout_ = PoolLayout::Windowed;
            } else if (kind == PoolKind::Average && windows_inside(g)) {
                // A depthwise convolution whose weights are all 1 / window size (no window is ever cut short).
                layout_ = PoolLayout::Windowed;
                const int64_t taps = g.kernel[0] * g.kernel[1];
                average_weights_.assign((*x)[1] * taps, 1.0f / static_cast<float>(taps));
            }
        } catch (const KernelError&) {
            // compute() reports the problem with the shapes it is given
        }
    }

    bool reads_blocked(size_t input) const override { return input == 0 && layout_ != PoolLayout::NchwOnly; }
    bool writes_blocked() const override { return layout_ == PoolLayout::Windowed; }
    bool same_layout_as_output(size_t input) const override {
        return input == 0 && layout_ == PoolLayout::Windowed;
    }
    void set_layout(const std::vector<bool>& blocked_inputs, bool /*blocked_output*/) override {
        x_blocked_ = !blocked_inputs.empty() && blocked_inputs[0];
    }

    // A blocked MaxPool takes over the blocked convolution feeding it when that convolution's output is large
    // (blocked_conv_window2d): SqueezeNet's and ResNet-50's first layers, whose 3 MB outputs then never reach memory.
    bool can_absorb(size_t input, const Kernel& producer) const override {
        const auto* source = dynamic_cast<const BlockedConvSource*>(&producer);
        if (input != 0 || source == nullptr || options_.kind != PoolKind::Max || layout_ != PoolLayout::Windowed ||
            !x_blocked_)
            return false;
        const std::optional<WindowGeometry> g = source->blocked_source_geometry();
        return g && g->output_size() * source->blocked_source_filters() * int64_t(sizeof(float)) >= kTakenOverMinBytes;
    }
    void absorb(size_t, std::unique_ptr<Kernel> producer, size_t first_producer_input) override {
        absorbed_ = std::move(producer);
        absorbed_inputs_ = first_producer_input;
    }

    void compute(KernelContext& ctx) const override {
        if (absorbed_) {
            compute_with_convolution(ctx);
            return;
        }
        const Tensor& X = ctx.input(0);
        if (X.rank() < 3 || X.rank() > 5) {
            throw KernelError(op_ + ": X " + shape_string(X.shape) +
                              " must be [N, C, D1, ...] with 1 to 3 spatial dimensions");
        }
        const WindowGeometry g =
            resolve_window(op_, attrs_, Shape(X.shape.begin() + 2, X.shape.end()), attrs_.kernel_shape);
        Shape y_shape{X.shape[0], X.shape[1]};
        y_shape.insert(y_shape.end(), g.output.begin(), g.output.end());
        if (x_blocked_) {
            // The graph holds X blocked only with the declared shape, which the input then has.
            if (X.type != TESS_ELEMENT_FLOAT32 || X.rank() != 4 || X.shape[1] % kChannelBlock != 0)
                throw KernelError(op_ + ": a blocked X " + shape_string(X.shape) + " that is not float [N, 16k, H, W]");
            Tensor& Y = ctx.output(0, X.type, y_shape);
            if (layout_ == PoolLayout::WholePlane) {
                if (!window_is_whole_plane(g)) throw KernelError(op_ + ": a blocked X of another shape");
                blocked_plane_reduce(ctx.pool(), X.shape[0], X.shape[1], X.shape[2] * X.shape[3], X.ptr<float>(),
                                     options_.kind == PoolKind::Max, Y.ptr<float>());
            } else if (options_.kind == PoolKind::Max) {
                blocked_max_pool2d(ctx.pool(), g, X.shape[0], X.shape[1], X.ptr<float>(), Y.ptr<float>());
            } else {
                if (!windows_inside(g) || static_cast<int64_t>(average_weights_.size()) != X.shape[1] * g.kernel_size())
                    throw KernelError(op_ + ": a blocked X of another shape");
                blocked_depthwise2d(ctx.pool(), g, average_weights_.data(), X.shape[0], X.shape[1], X.ptr<float>(),
                                    nullptr, nullptr, nullptr, Y.ptr<float>());
            }
            return;
        }
        const bool want_indices = options_.kind == PoolKind::Max && ctx.output_count() > 1 && ctx.output_wanted(1);
        // Validate the type before allocating anything.
        if (options_.kind == PoolKind::Max) {
            dispatch<float, double, int8_t, uint8_t>(X.type, []<typename T>() {});
        } else {
            dispatch<float, double>(X.type, []<typename T>() {});
        }
        Tensor& Y = ctx.output(0, X.type, y_shape);
        int64_t* indices = want_indices ? ctx.output(1, TESS_ELEMENT_INT64, y_shape).ptr<int64_t>() : nullptr;
        if (Y.size() == 0) return;
        const Pool3 geometry(g);
        const PoolTables tables(geometry);
        const int64_t planes = X.shape[0] * X.shape[1];
        const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, geometry.out_plane * geometry.window));
        if (options_.kind == PoolKind::Max && indices == nullptr && X.type == TESS_ELEMENT_FLOAT32 &&
            max_pool2d_direct_supported(g) && !tables.any_empty) {
            max_pool2d_direct(ctx.pool(), g, X.ptr<float>(), planes, Y.ptr<float>());
            return;
        }
        auto run = [&]<typename T>() {
            const T* x = X.ptr<T>();
            T* y = Y.ptr<T>();
            if (indices == nullptr && options_.kind != PoolKind::Lp && window_is_whole_plane(g)) {
                ctx.pool().parallel_for(planes, grain, [&](int64_t first, int64_t last) {
                    for (int64_t p = first; p < last; ++p)
                        y[p] = reduce_plane(options_.kind, options_.p, x + p * geometry.in_plane, geometry.in_plane);
                });
                return;
            }
            ctx.pool().parallel_for(planes, grain, [&](int64_t first, int64_t last) {
                for (int64_t p = first; p < last; ++p) {
                    const T* xp = x + p * geometry.in_plane;
                    T* yp = y + p * geometry.out_plane;
                    if (indices != nullptr) {
                        max_pool_plane_indexed(geometry, tables, options_.column_major_indices, xp, yp,
                                               indices + p * geometry.out_plane, p * geometry.in_plane);
                    } else if (options_.kind == PoolKind::Max) {
                        pool_plane_rows<PoolKind::Max>(geometry, tables, options_, xp, yp);
                    } else if constexpr (std::is_floating_point_v<T>) {
                        if (options_.kind == PoolKind::Average) {
                            pool_plane_rows<PoolKind::Average>(geometry, tables, options_, xp, yp);
                        } else {
                            pool_plane_rows<PoolKind::Lp>(geometry, tables, options_, xp, yp);
                        }
                    }
                }
            });
        };
        if (options_.kind == PoolKind::Max) {
            dispatch<float, double, int8_t, uint8_t>(X.type, run);
        } else {
            dispatch<float, double>(X.type, run);
        }
    }

private:
    std::string op_;
    WindowAttributes attrs_;
    PoolOptions options_{};
    // The MaxPool of the convolution it took over (absorb): X is that convolution's input.
    void compute_with_convolution(KernelContext& ctx) const {
        const BlockedProducerConv producer =
            dynamic_cast<const BlockedConvSource&>(*absorbed_).blocked_source(ctx, absorbed_inputs_);
        const Tensor& X = ctx.input(absorbed_inputs_);
        if (producer.g.rank() != 2) throw KernelError(op_ + ": the convolution before it is not 2-D");
        const WindowGeometry g = resolve_window(op_, attrs_, producer.g.output, attrs_.kernel_shape);
        const int64_t N = X.shape[0], M = producer.filters->rows();
        if (PoolTables(Pool3(g)).any_empty) throw KernelError(op_ + ": a window with no element of its input");
        Tensor& Y = ctx.output(0, X.type, Shape{N, M, g.output[0], g.output[1]});
        if (Y.size() == 0) return;
        blocked_conv_window2d(ctx.pool(), producer, g, nullptr, nullptr, nullptr, N, X.ptr<float>(), Y.ptr<float>());
    }

    PoolLayout layout_ = PoolLayout::NchwOnly;
    std::vector<float> average_weights_;  // AveragePool in the blocked layout: C x window of 1 / window size
    bool x_blocked_ = false;              // set_layout
    std::unique_ptr<Kernel> absorbed_;    // the convolution this MaxPool took over
    size_t absorbed_inputs_ = 0;          // where its inputs start among this step's
};

// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: one value per (n, c) plane.
class GlobalPoolKernel final : public Kernel, public BlockedLayoutKernel {
public:
    GlobalPoolKernel(const NodeInfo& info, PoolKind kind)
        : op_(info.op_type()),
          kind_(kind),
          p_(kind == PoolKind::Lp ? read_p(info) : 2.0),
          blocked_capable_(kind != PoolKind::Lp && blocked_input_declared(info)) {}

    // Y [N, C, 1, 1] is the same bytes in either layout: a blocked X gives an NCHW Y.
    bool reads_blocked(size_t input) const override { return input == 0 && blocked_capable_; }
    bool writes_blocked() const override { return false; }
    void set_layout(const std::vector<bool>& blocked_inputs, bool /*blocked_output*/) override {
        x_blocked_ = !blocked_inputs.empty() && blocked_inputs[0];
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        if (X.rank() < 2) throw KernelError(op_ + ": X " + shape_string(X.shape) + " must be [N, C, ...]");
        dispatch<float, double>(X.type, []<typename T>() {});
        Shape y_shape = X.shape;
        std::fill(y_shape.begin() + 2, y_shape.end(), 1);
        Tensor& Y = ctx.output(0, X.type, y_shape);
        const int64_t planes = X.shape[0] * X.shape[1];
        const int64_t plane = planes == 0 ? 0 : X.size() / planes;
        if (planes == 0) return;
        if (x_blocked_) {
            if (X.type != TESS_ELEMENT_FLOAT32 || X.rank() != 4 || X.shape[1] % kChannelBlock != 0)
                throw KernelError(op_ + ": a blocked X " + shape_string(X.shape) + " that is not float [N, 16k, H, W]");
            blocked_plane_reduce(ctx.pool(), X.shape[0], X.shape[1], plane, X.ptr<float>(), kind_ == PoolKind::Max,
                                 Y.ptr<float>());
            return;
        }
        dispatch<float, double>(X.type, [&]<typename T>() {
            const T* x = X.ptr<T>();
            T* y = Y.ptr<T>();
            ctx.pool().parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, plane)),
                                    [&](int64_t first, int64_t last) {
                                        for (int64_t p = first; p < last; ++p)
                                            y[p] = reduce_plane(kind_, p_, x + p * plane, plane);
                                    });
        });
    }

private:
    std::string op_;
    PoolKind kind_;
    double p_;
    bool blocked_capable_;
    bool x_blocked_ = false;  // set_layout
};

template <PoolKind kind>
KernelFactory pool_factory() {
    return [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(info, kind); };
}

template <PoolKind kind>
KernelFactory global_pool_factory() {
    return
        [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<GlobalPoolKernel>(info, kind); };
}

}  // namespace

void register_pool_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> max_pool_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT8,
                                              TESS_ELEMENT_UINT8};
    registry.add({"", "MaxPool", 1, 11, {{0, types::kFloats}}, KernelMemory::Normal, pool_factory<PoolKind::Max>()});
    registry.add({"", "MaxPool", 12, 0, {{0, max_pool_types}}, KernelMemory::Normal, pool_factory<PoolKind::Max>()});
    registry.add(
        {"", "AveragePool", 1, 0, {{0, types::kFloats}}, KernelMemory::Normal, pool_factory<PoolKind::Average>()});
    registry.add({"", "LpPool", 1, 0, {{0, types::kFloats}}, KernelMemory::Normal, pool_factory<PoolKind::Lp>()});
    registry.add(
        {"", "GlobalMaxPool", 1, 0, {{0, types::kFloats}}, KernelMemory::Normal, global_pool_factory<PoolKind::Max>()});
    registry.add({"",
                  "GlobalAveragePool",
                  1,
                  0,
                  {{0, types::kFloats}},
                  KernelMemory::Normal,
                  global_pool_factory<PoolKind::Average>()});
    registry.add(
        {"", "GlobalLpPool", 1, 0, {{0, types::kFloats}}, KernelMemory::Normal, global_pool_factory<PoolKind::Lp>()});
}

}  // namespace tessera::cpu
