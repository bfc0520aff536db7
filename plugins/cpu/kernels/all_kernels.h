// CPU provider: one registration function per operator family (kernels/<family>.cc).  A new family adds its
// function here and to register_all_kernels in registry.cc.
#pragma once

#include "kernel.h"

namespace tessera::cpu {

void register_elementwise_kernels(KernelRegistry& registry);    // kernels/elementwise.cc: arithmetic, comparison, logic
void register_activation_kernels(KernelRegistry& registry);     // kernels/activation.cc: unary math and activations
void register_softmax_kernels(KernelRegistry& registry);        // kernels/softmax.cc
void register_reduce_kernels(KernelRegistry& registry);         // kernels/reduce.cc
void register_conv_kernels(KernelRegistry& registry);           // kernels/conv.cc: Conv, FusedConv
void register_conv_transpose_kernels(KernelRegistry& registry);  // kernels/conv_transpose.cc
void register_pool_kernels(KernelRegistry& registry);           // kernels/pool.cc
void register_normalization_kernels(KernelRegistry& registry);  // kernels/normalization.cc
void register_gemm_kernels(KernelRegistry& registry);           // kernels/gemm.cc: Gemm, MatMul
void register_shape_kernels(KernelRegistry& registry);          // kernels/shape_ops.cc: Reshape, Flatten, ...
void register_tensor_kernels(KernelRegistry& registry);         // kernels/tensor_ops.cc: Concat, Slice, Gather, ...
void register_tensor_value_kernels(KernelRegistry& registry);   // kernels/tensor_values.cc: Cast, TopK, CumSum, ...
void register_sequence_kernels(KernelRegistry& registry);       // kernels/sequence.cc
void register_string_kernels(KernelRegistry& registry);         // kernels/string_ops.cc
void register_attention_kernels(KernelRegistry& registry);      // kernels/attention.cc: Attention, FlexAttention
void register_transformer_kernels(KernelRegistry& registry);    // kernels/transformer.cc: RoPE, RMSNorm, ...

void register_control_flow_kernels(KernelRegistry& registry);  // kernels/control_flow.cc: If, Loop, Scan, SequenceMap
void register_rnn_kernels(KernelRegistry& registry);           // kernels/rnn.cc: RNN, GRU, LSTM
void register_signal_kernels(KernelRegistry& registry);        // kernels/signal.cc: DFT, STFT, windows, MelWeightMatrix
void register_resize_kernels(KernelRegistry& registry);        // kernels/resize.cc: Resize, Upsample
void register_image_kernels(KernelRegistry& registry);         // kernels/image.cc: GridSample, RoiAlign, NMS, ...
void register_image_decoder_kernels(KernelRegistry& registry); // kernels/image_decoder.cc: ImageDecoder
void register_loss_kernels(KernelRegistry& registry);           // kernels/loss.cc: NLL and softmax cross-entropy
void register_quantize_kernels(KernelRegistry& registry);      // kernels/quantize.cc: (De)QuantizeLinear, DynamicQuantizeLinear
void register_quantized_product_kernels(KernelRegistry& registry);  // kernels/quantized_products.cc: MatMulInteger, QLinearConv, ...
void register_math_kernels(KernelRegistry& registry);          // kernels/math_ops.cc: Einsum, Det, CumProd, LpNormalization, Swish, SwiGLU
void register_misc_kernels(KernelRegistry& registry);          // kernels/misc_ops.cc: Unique, Compress, TfIdfVectorizer, random, ...
void register_ml_kernels(KernelRegistry& registry);            // kernels/ml_ops.cc: ai.onnx.ml (LabelEncoder, TreeEnsemble, ...)
void register_training_kernels(KernelRegistry& registry);      // kernels/training_ops.cc: ai.onnx.preview.training optimizers

void register_all_kernels(KernelRegistry& registry);

}  // namespace tessera::cpu
