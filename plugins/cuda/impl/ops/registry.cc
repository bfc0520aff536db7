// CUDA provider: which nodes it runs (check_node) and the steps that run them (build_step), from the operator table
// (op_table.h) that every family under ops/ fills.
//
// Claimed: float32 and float16 nodes of
//   Conv (cuDNN; a following BatchNormalization is folded into the weights, bias and a following Relu run in one
//   epilogue kernel), MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LRN, BatchNormalization (inference),
//   Gemm, MatMul (cuBLAS, batched with broadcasting), Add, Sub, Mul, Div, Pow, PRelu (broadcasting), Sum, Max, Min
//   (variadic), Relu, LeakyRelu, Sigmoid, Tanh, Gelu, Erf, Exp, Log, Sqrt, Neg, Abs, Reciprocal, Clip, Elu, Selu,
//   HardSigmoid, HardSwish, Softplus, Softsign, Floor, Ceil, Sin, Cos, Softmax, LogSoftmax (both opset semantics),
//   LayerNormalization, Transpose, Concat, and Reshape, Flatten, Squeeze, Unsqueeze, Identity (no copy: aliases).
// A node is looked up by (domain, op_type, opset, input types) first; everything without an entry, or that the
// entry's check turns down, is declined with the reason.
#include <exception>

#include "ops/op_table.h"

namespace tessera::cuda {

namespace ops {

const OpTable& op_table() {
    static const OpTable table = [] {
        OpTable t;
        register_elementwise_ops(t);
        register_normalization_ops(t);
        register_pooling_ops(t);
        register_conv_ops(t);
        register_matmul_ops(t);
        register_data_movement_ops(t);
        return t;
    }();
    return table;
}

}  // namespace ops

std::string check_node(const TessNodeView& view) {
    std::string why;
    const ops::OpEntry* entry = ops::op_table().find(view, &why);
    if (entry == nullptr) return "cuda: " + why;
    const ops::Node n(view);
    try {
        why = entry->check(n);
    } catch (const std::exception& e) {
        why = e.what();
    }
    return why.empty() ? "" : std::string("cuda: ") + view.op_type + ": " + why;
}

std::unique_ptr<Step> build_step(BuildContext& ctx, const TessNodeView& node, std::vector<const TessNodeView*>& fused) {
    std::string why;
    const ops::OpEntry* entry = ops::op_table().find(node, &why);
    if (entry == nullptr) fail(TESS_STATUS_INTERNAL, "cuda: " + why);
    const ops::Node n(node);
    return entry->build(ctx, n, fused);
}

}  // namespace tessera::cuda
