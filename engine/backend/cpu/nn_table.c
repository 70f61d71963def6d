/* The cpu model-kernel table (engine/backend/nn.h) of one instruction-set
 * variant: this file is compiled once per variant like the kernels it lists,
 * so `ds_nn_cpu` and every name below carry the variant's suffix (nn_cpu.h). */
#include "engine/backend/cpu/nn_cpu.h"

const ds_nn_ops ds_nn_cpu = {
    .embedding_fwd = ds_nn_cpu_embedding_fwd,
    .embedding_bwd = ds_nn_cpu_embedding_bwd,
    .bcast_add_fwd = ds_nn_cpu_bcast_add_fwd,
    .bcast_add_bwd = ds_nn_cpu_bcast_add_bwd,
    .mean_pool_fwd = ds_nn_cpu_mean_pool_fwd,
    .mean_pool_bwd = ds_nn_cpu_mean_pool_bwd,
    .bias_act_fwd = ds_nn_cpu_bias_act_fwd,
    .bias_act_bwd = ds_nn_cpu_bias_act_bwd,
    .layernorm_fwd = ds_nn_cpu_layernorm_fwd,
    .layernorm_bwd = ds_nn_cpu_layernorm_bwd,
    .attn_softmax_fwd = ds_nn_cpu_attn_softmax_fwd,
    .attn_softmax_bwd = ds_nn_cpu_attn_softmax_bwd,
    .dropout_fwd = ds_nn_cpu_dropout_fwd,
    .dropout_bwd = ds_nn_cpu_dropout_bwd,
    .xent_fwd = ds_nn_cpu_xent_fwd,
    .xent_bwd = ds_nn_cpu_xent_bwd,
    .copy_rows = ds_nn_cpu_copy_rows,
    .shift_labels = ds_nn_cpu_shift_labels,
    .dropout_ln_fwd = ds_nn_cpu_dropout_ln_fwd,
};
