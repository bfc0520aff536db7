// CPU provider: one registration function per operator family (kernels/<group>/<family>.cc, the groups: math, nn,
// tensor, control_flow, quantization, transformer, rnn, image, signal, ml, text, training, contrib).  A new family adds its
// function here and to register_all_kernels in registry.cc.
#pragma once

#include "runtime/kernel.h"

namespace tessera::cpu {

void register_elementwise_kernels(KernelRegistry& registry);    // kernels/math/elementwise.cc: arithmetic, comparison, logic
void register_activation_kernels(KernelRegistry& registry);     // kernels/math/activation.cc: unary math and activations
void register_softmax_kernels(KernelRegistry& registry);        // kernels/math/softmax.cc
void register_reduce_kernels(KernelRegistry& registry);         // kernels/math/reduce.cc
void register_conv_kernels(KernelRegistry& registry);           // kernels/nn/conv.cc: Conv, FusedConv
void register_conv_transpose_kernels(KernelRegistry& registry);  // kernels/nn/conv_transpose.cc
void register_pool_kernels(KernelRegistry& registry);           // kernels/nn/pool.cc
void register_normalization_kernels(KernelRegistry& registry);  // kernels/nn/normalization.cc
void register_gemm_kernels(KernelRegistry& registry);           // kernels/nn/gemm.cc: Gemm, MatMul
void register_shape_kernels(KernelRegistry& registry);          // kernels/tensor/shape_ops.cc: Reshape, Flatten, ...
void register_tensor_kernels(KernelRegistry& registry);         // kernels/tensor/tensor_ops.cc: Concat, Slice, Gather, ...
void register_tensor_value_kernels(KernelRegistry& registry);   // kernels/tensor/tensor_values.cc: Cast, TopK, CumSum, ...
void register_sequence_kernels(KernelRegistry& registry);       // kernels/control_flow/sequence.cc
void register_string_kernels(KernelRegistry& registry);         // kernels/text/string_ops.cc
void register_attention_kernels(KernelRegistry& registry);      // kernels/transformer/attention.cc: Attention, FlexAttention
void register_transformer_kernels(KernelRegistry& registry);    // kernels/transformer/transformer.cc: RoPE, RMSNorm, ...

void register_control_flow_kernels(KernelRegistry& registry);  // kernels/control_flow/control_flow.cc: If, Loop, Scan, SequenceMap
void register_rnn_kernels(KernelRegistry& registry);           // kernels/rnn/rnn.cc: RNN, GRU, LSTM
void register_signal_kernels(KernelRegistry& registry);        // kernels/signal/signal.cc: DFT, STFT, windows, MelWeightMatrix
void register_resize_kernels(KernelRegistry& registry);        // kernels/image/resize.cc: Resize, Upsample
void register_image_kernels(KernelRegistry& registry);         // kernels/image/image.cc: GridSample, RoiAlign, NMS, ...
void register_loss_kernels(KernelRegistry& registry);           // kernels/nn/loss.cc: NLL and softmax cross-entropy
void register_quantize_kernels(KernelRegistry& registry);      // kernels/quantization/quantize.cc: (De)QuantizeLinear, DynamicQuantizeLinear
void register_quantized_lookup_kernels(KernelRegistry& registry);  // kernels/quantization/lookup.cc: QuantizedLookup
void register_quantized_product_kernels(KernelRegistry& registry);  // kernels/quantization/quantized_products.cc: MatMulInteger, QLinearMatMul
void register_integer_conv_kernels(KernelRegistry& registry);  // kernels/quantization/integer_conv.cc: ConvInteger, QLinearConv, ...
void register_quantized_add_kernels(KernelRegistry& registry);  // kernels/quantization/quantized_add.cc: ai.tessera QuantizedAdd
void register_math_kernels(KernelRegistry& registry);          // kernels/math/math_ops.cc: Einsum, Det, CumProd, LpNormalization, Swish, SwiGLU
void register_misc_kernels(KernelRegistry& registry);          // kernels/tensor/misc_ops.cc: Unique, Compress, TfIdfVectorizer, random, ...
void register_ml_kernels(KernelRegistry& registry);            // kernels/ml/ml_ops.cc: ai.onnx.ml (LabelEncoder, TreeEnsemble, ...)
void register_training_kernels(KernelRegistry& registry);      // kernels/training/training_ops.cc: ai.onnx.preview.training optimizers
// com.microsoft: the operators onnxruntime's quantization and transformer tools and its optimizer write.
void register_contrib_quantized_matmul_kernels(KernelRegistry& registry);  // kernels/contrib/quantized_matmul.cc: MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm
void register_contrib_quantized_elementwise_kernels(KernelRegistry& registry);  // kernels/contrib/quantized_elementwise.cc: QLinearAdd, QLinearMul, ...
void register_contrib_matmul_nbits_kernels(KernelRegistry& registry);  // kernels/contrib/matmul_nbits.cc: MatMulNBits
void register_contrib_attention_kernels(KernelRegistry& registry);  // kernels/contrib/attention.cc: Attention, MultiHeadAttention
void register_contrib_embedding_kernels(KernelRegistry& registry);  // kernels/contrib/embed_layer_norm.cc: EmbedLayerNormalization
void register_contrib_gather_block_quantized_kernels(KernelRegistry& registry);  // kernels/contrib/gather_block_quantized.cc
void register_contrib_bias_activation_kernels(KernelRegistry& registry);  // kernels/contrib/bias_activations.cc: Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd, BiasSplitGelu
void register_contrib_skip_normalization_kernels(KernelRegistry& registry);  // kernels/contrib/skip_normalization.cc: SkipLayerNormalization, SkipSimplifiedLayerNormalization, BiasSoftmax
void register_contrib_fused_product_kernels(KernelRegistry& registry);  // kernels/contrib/fused_products.cc: FusedMatMul, TransposeMatMul, FusedGemm, GemmFastGelu
void register_contrib_dynamic_quantize_lstm_kernels(KernelRegistry& registry);  // kernels/contrib/dynamic_quantize_lstm.cc
void register_contrib_decoder_attention_kernels(KernelRegistry& registry);  // kernels/contrib/decoder_attention.cc: GroupQueryAttention, RotaryEmbedding
void register_contrib_sparse_attention_kernels(KernelRegistry& registry);  // kernels/contrib/sparse_attention.cc: SparseAttention

void register_all_kernels(KernelRegistry& registry);

}  // namespace tessera::cpu
