/* The CUDA model-kernel table (engine/backend/nn.h), in slot order. */
#include "engine/backend/cuda/nn_cuda.cuh"

extern "C" const ds_nn_ops ds_nn_cuda = {
    /* .embedding_fwd = */ ds_nn_cuda_embedding_fwd,
    /* .embedding_bwd = */ ds_nn_cuda_embedding_bwd,
    /* .bcast_add_fwd = */ ds_nn_cuda_bcast_add_fwd,
    /* .bcast_add_bwd = */ ds_nn_cuda_bcast_add_bwd,
    /* .mean_pool_fwd = */ ds_nn_cuda_mean_pool_fwd,
    /* .mean_pool_bwd = */ ds_nn_cuda_mean_pool_bwd,
    /* .bias_act_fwd = */ ds_nn_cuda_bias_act_fwd,
    /* .bias_act_bwd = */ ds_nn_cuda_bias_act_bwd,
    /* .layernorm_fwd = */ ds_nn_cuda_layernorm_fwd,
    /* .layernorm_bwd = */ ds_nn_cuda_layernorm_bwd,
    /* .attn_softmax_fwd = */ ds_nn_cuda_attn_softmax_fwd,
    /* .attn_softmax_bwd = */ ds_nn_cuda_attn_softmax_bwd,
    /* .dropout_fwd = */ ds_nn_cuda_dropout_fwd,
    /* .dropout_bwd = */ ds_nn_cuda_dropout_bwd,
    /* .xent_fwd = */ ds_nn_cuda_xent_fwd,
    /* .xent_bwd = */ ds_nn_cuda_xent_bwd,
    /* .copy_rows = */ ds_nn_cuda_copy_rows,
    /* .shift_labels = */ ds_nn_cuda_shift_labels,
    /* .dropout_ln_fwd = */ ds_nn_cuda_dropout_ln_fwd,
};
