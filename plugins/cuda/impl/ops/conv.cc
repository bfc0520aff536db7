// CUDA provider operators: Conv on cuDNN (1-D to 3-D, groups, dilations), with a BatchNormalization folded into the
// weights and a Relu into the bias epilogue when only the Conv feeds them.
#include <algorithm>
#include <climits>
#include <cstring>
#include <map>

#include "ops/op_table.h"
#include "ops/window.h"

namespace tessera::cuda::ops {
namespace {

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

}  // namespace

void register_conv_ops(OpTable& t) {
    t.add("Conv", 1, 0, float_x(), {
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
        }});
}

}  // namespace tessera::cuda::ops
