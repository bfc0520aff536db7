// CUDA provider operators: pooling -- MaxPool, AveragePool (sliding windows, window.h), GlobalAveragePool and
// GlobalMaxPool.
#include <cstring>

#include "ops/op_table.h"
#include "ops/window.h"

namespace tessera::cuda::ops {
namespace {

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

}  // namespace

void register_pooling_ops(OpTable& t) {
    for (const char* name : {"MaxPool", "AveragePool"}) {
        const bool max = std::strcmp(name, "MaxPool") == 0;
        t.add(name, 1, 0, float_x(), {
            [max](const Node& n) -> std::string {
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
            }});
    }
    for (const char* name : {"GlobalAveragePool", "GlobalMaxPool"}) {
        const bool max = std::strcmp(name, "GlobalMaxPool") == 0;
        t.add(name, 1, 0, float_x(), {
            [](const Node& n) { return check_unary(n); },
            [max](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
                auto s = std::make_unique<GlobalPoolStep>();
                wire(ctx, *s, n);
                s->max = max;
                return s;
            }});
    }
}

}  // namespace tessera::cuda::ops
