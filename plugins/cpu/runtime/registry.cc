#include "kernels/all_kernels.h"

namespace tessera::cpu {

void register_all_kernels(KernelRegistry& registry) {
    register_elementwise_kernels(registry);
    register_activation_kernels(registry);
    register_softmax_kernels(registry);
    register_reduce_kernels(registry);
    register_conv_kernels(registry);
    register_conv_transpose_kernels(registry);
    register_pool_kernels(registry);
    register_normalization_kernels(registry);
    register_gemm_kernels(registry);
    register_shape_kernels(registry);
    register_tensor_kernels(registry);
    register_tensor_value_kernels(registry);
    register_sequence_kernels(registry);
    register_string_kernels(registry);
    register_attention_kernels(registry);
    register_transformer_kernels(registry);
    register_control_flow_kernels(registry);
    register_rnn_kernels(registry);
    register_signal_kernels(registry);
    register_resize_kernels(registry);
    register_image_kernels(registry);
    register_loss_kernels(registry);
    register_quantize_kernels(registry);
    register_quantized_product_kernels(registry);
    register_integer_conv_kernels(registry);
    register_quantized_add_kernels(registry);
    register_quantized_lookup_kernels(registry);
    register_math_kernels(registry);
    register_misc_kernels(registry);
    register_ml_kernels(registry);
    register_training_kernels(registry);
    register_contrib_quantized_matmul_kernels(registry);
    register_contrib_quantized_elementwise_kernels(registry);
    register_contrib_matmul_nbits_kernels(registry);
    register_contrib_attention_kernels(registry);
    register_contrib_embedding_kernels(registry);
    register_contrib_gather_block_quantized_kernels(registry);
    register_contrib_decoder_attention_kernels(registry);
    register_contrib_sparse_attention_kernels(registry);
    register_contrib_bias_activation_kernels(registry);
    register_contrib_skip_normalization_kernels(registry);
    register_contrib_fused_product_kernels(registry);
    register_contrib_dynamic_quantize_lstm_kernels(registry);
}

}  // namespace tessera::cpu
