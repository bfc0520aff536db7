// CPU provider: ConvTranspose (float, double; float16 and bfloat16 computed in float), N-d spatial, grouped: gemm
// (W^T x image) + col2im.
#include <algorithm>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/nn/conv_support.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/im2col.h"
#include "util/type_list.h"

namespace tessera::cpu {

namespace {

using namespace conv_support;

// ConvTranspose.  Output size and padding follow the spec of the registered opset: with output_shape (or
// SAME_* auto_pad) the total padding is derived and split between the two sides, the odd element going to the
// start for opsets 1-10 under SAME_UPPER and to the end from opset 11.
class ConvTransposeKernel final : public ConvKernelBase {
public:
    explicit ConvTransposeKernel(const NodeInfo& info)
        : ConvKernelBase(info),
          output_padding_(info.attr_ints("output_padding")),
          output_shape_(info.attr_ints("output_shape")),
          legacy_padding_split_(info.opset() < 11) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        const Tensor& W = weights(ctx);
        const Tensor* B = bias(ctx);
        const int64_t Mg = W.rank() > 1 ? W.shape[1] : 0;
        const Shape kernel = check_inputs(X, W, B, Mg * group_);
        const int64_t N = X.shape[0], C = X.shape[1], M = Mg * group_;
        if (C % group_ != 0 || W.shape[0] != C) {
            throw KernelError("ConvTranspose: X " + shape_string(X.shape) + " and W " + shape_string(W.shape) +
                              " do not fit group=" + std::to_string(group_));
        }
        const WindowGeometry g = geometry(Shape(X.shape.begin() + 2, X.shape.end()), kernel);
        Shape y_shape{N, M};
        y_shape.insert(y_shape.end(), g.input.begin(), g.input.end());
        Tensor& Y = ctx.output(0, X.type, y_shape);
        if (Y.size() == 0) return;
        ThreadPool& pool = ctx.pool();
        dispatch<float, double>(compute_type_of(X.type), [&]<typename T>() {
            const ConvertedInput<T> x(X, pool), w(W, pool);
            const ConvertedInput<T> b = B != nullptr ? ConvertedInput<T>(*B, pool) : ConvertedInput<T>();
            ConvertedOutput<T> y(Y);
            run<T>(pool, g, x.data(), w.data(), b.data(), N, C, M, y.data());
            y.finish(pool);
        });
    }

private:
    // The forward-convolution geometry whose input is ConvTranspose's output: col2im scatters into it.
    WindowGeometry geometry(const Shape& in, const Shape& kernel) const {
        const size_t rank = in.size();
        auto check_length = [&](const std::vector<int64_t>& v, size_t expected, const char* name) {
            if (!v.empty() && v.size() != expected) {
                throw KernelError("ConvTranspose: " + std::string(name) + " " + dims_string(v) + " does not match " +
                                  std::to_string(rank) + " spatial dimensions");
            }
        };
        check_length(attrs_.strides, rank, "strides");
        check_length(attrs_.dilations, rank, "dilations");
        check_length(attrs_.pads, 2 * rank, "pads");
        check_length(output_padding_, rank, "output_padding");
        // output_shape may also list N and C; only the spatial part counts.
        if (!output_shape_.empty() && output_shape_.size() != rank && output_shape_.size() != rank + 2) {
            check_length(output_shape_, rank, "output_shape");
        }
        WindowGeometry g;
        g.output = in;
        g.kernel = kernel;
        g.strides = attrs_.strides.empty() ? Shape(rank, 1) : attrs_.strides;
        g.dilations = attrs_.dilations.empty() ? Shape(rank, 1) : attrs_.dilations;
        g.input.assign(rank, 0);
        g.pads_begin.assign(rank, 0);
        g.pads_end.assign(rank, 0);
        const bool same = attrs_.auto_pad == AutoPad::SameUpper || attrs_.auto_pad == AutoPad::SameLower;
        for (size_t d = 0; d < rank; ++d) {
            const int64_t stride = g.strides[d];
            const int64_t adjustment = output_padding_.empty() ? 0 : output_padding_[d];
            const int64_t full = stride * (in[d] - 1) + adjustment + (kernel[d] - 1) * g.dilations[d] + 1;
            int64_t out = 0;
            if (!output_shape_.empty() || same) {
                out = !output_shape_.empty() ? output_shape_[output_shape_.size() - rank + d] : in[d] * stride;
                const int64_t total = full - out;
                // Python-style floor halves: a negative total (output larger than the full result) grows the end.
                const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
                const bool upper = attrs_.auto_pad == AutoPad::SameUpper;
                const bool odd_at_end = legacy_padding_split_ ? !upper : upper;
                g.pads_begin[d] = odd_at_end ? half : total - half;
                g.pads_end[d] = total - g.pads_begin[d];
            } else {
                if (attrs_.auto_pad != AutoPad::Valid && !attrs_.pads.empty()) {
                    g.pads_begin[d] = attrs_.pads[d];
                    g.pads_end[d] = attrs_.pads[d + rank];
                }
                out = full - g.pads_begin[d] - g.pads_end[d];
            }
            if (out <= 0) {
                throw KernelError("ConvTranspose: output dimension " + std::to_string(out) + " for input " +
                                  shape_string(in) + " is not positive");
            }
            g.input[d] = out;
        }
        return g;
    }

    template <typename T>
    void run(ThreadPool& pool, const WindowGeometry& g, const T* x, const T* w, const T* bias, int64_t N, int64_t C,
             int64_t M, T* y) const {
        const int64_t Cg = C / group_, Mg = M / group_;
        const int64_t in_size = g.output_size(), out_size = g.input_size();
        const int64_t rows = Mg * g.kernel_size();
        T* col = call_buffer<T, 3>(rows * in_size);
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_size * g.kernel_size()));
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                const T* image = x + (n * C + grp * Cg) * in_size;
                T* out = y + (n * M + grp * Mg) * out_size;
                // col[Mg * kernel, in_size] = W_g^T [Mg * kernel, Cg] x image [Cg, in_size]
                gemm<T>(pool, true, false, rows, in_size, Cg, T(1), w + grp * Cg * rows, rows, image, in_size, T(0),
                        col, in_size);
                pool.parallel_for(Mg, grain, [&](int64_t first, int64_t last) {
                    for (int64_t c = first; c < last; ++c) {
                        const T b = bias != nullptr ? bias[grp * Mg + c] : T(0);
                        std::fill(out + c * out_size, out + (c + 1) * out_size, b);
                    }
                    col2im_channels(g, col, first, last, out);
                });
            }
        }
    }

    std::vector<int64_t> output_padding_;
    std::vector<int64_t> output_shape_;
    bool legacy_padding_split_;
};

}  // namespace

void register_conv_transpose_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> types = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<std::pair<size_t, std::vector<int32_t>>> float_inputs{{0, types}, {1, types}, {2, types}};
    registry.add({"", "ConvTranspose", 1, 10, float_inputs, KernelMemory::Normal, make_factory<ConvTransposeKernel>()});
    registry.add({"", "ConvTranspose", 11, 0, float_inputs, KernelMemory::Normal, make_factory<ConvTransposeKernel>()});
}

}  // namespace tessera::cpu
