/* Private: the CUDA model kernels (engine/backend/cuda/nn_*.cu), gathered
 * into the `ds_nn_cuda` table by nn_table.cu. Semantics of each function:
 * the slot of the same name in engine/backend/nn.h; the element arithmetic
 * is nn_math.h's, as on cpu. Every launch goes to the backend's default
 * stream (cuda_common.cuh), so the kernels are ordered with GEMM and the
 * backend's own slots. */
#ifndef DS_BACKEND_CUDA_NN_CUDA_CUH
#define DS_BACKEND_CUDA_NN_CUDA_CUH

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/nn.h"

/* Warp-per-row kernels: 8 warps per block, a grid-stride loop over rows
 * (row = global warp index, stride = all warps of the grid). */
#define DS_NN_ROWS_PER_BLOCK 8

static inline unsigned ds_nn_row_blocks(int64_t rows) {
    int64_t b = (rows + DS_NN_ROWS_PER_BLOCK - 1) / DS_NN_ROWS_PER_BLOCK;
    return (unsigned)(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

#define DS_NN_WARP_ROWS(r, rows)                                                                 \
    for (int64_t r = (int64_t)blockIdx.x * DS_NN_ROWS_PER_BLOCK + threadIdx.x / 32;              \
         r < (int64_t)(rows); r += (int64_t)gridDim.x * DS_NN_ROWS_PER_BLOCK)

__device__ __forceinline__ float ds_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float ds_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The first of v[0..n) outside [0, hi) (other than `skip`, when has_skip),
 * found before anything is written, so a slot that refuses bad ids or labels
 * leaves its outputs as they were: *pos its position, *val its value, or
 * *pos = -1. One small kernel and a synchronous copy of the answer. */
ds_status ds_nn_cuda_first_bad_index(ds_backend *be, const int32_t *v, int n, int hi,
                                     bool has_skip, int skip, int *pos, int32_t *val);

/* dst[c] += sum_r src[r, c] (deterministic: fixed partition and order). */
ds_status ds_nn_cuda_colsum(ds_backend *be, float *dst, const float *src, int rows, int width);

ds_status ds_nn_cuda_embedding_fwd(ds_backend *be, float *out, const float *table,
                                   const int32_t *ids, int n, int h, int vocab, bool accumulate);
ds_status ds_nn_cuda_embedding_bwd(ds_backend *be, float *dtable, const float *dout,
                                   const int32_t *ids, int n, int h, int padding_idx);
ds_status ds_nn_cuda_bcast_add_fwd(ds_backend *be, float *out, const float *x, int rows,
                                   int width, bool accumulate);
ds_status ds_nn_cuda_bcast_add_bwd(ds_backend *be, float *dx, const float *dout, int rows,
                                   int width);
ds_status ds_nn_cuda_mean_pool_fwd(ds_backend *be, float *out, const float *x, const float *mask,
                                   int B, int T, int H);
ds_status ds_nn_cuda_mean_pool_bwd(ds_backend *be, float *dx, const float *dout,
                                   const float *mask, int B, int T, int H);
ds_status ds_nn_cuda_copy_rows(ds_backend *be, float *dst, int dst_ld, const float *src,
                               int src_ld, int rows, int width, bool accumulate);

ds_status ds_nn_cuda_bias_act_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                  int rows, int width, ds_act act);
ds_status ds_nn_cuda_bias_act_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                  const float *x, const float *bias, int rows, int width,
                                  ds_act act);
ds_status ds_nn_cuda_dropout_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                 const float *res, int rows, int width, float p, uint64_t seed,
                                 uint64_t offset, uint32_t *keep);
ds_status ds_nn_cuda_dropout_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                 int rows, int width, float p, uint64_t seed, uint64_t offset,
                                 const uint32_t *keep);
ds_status ds_nn_cuda_dropout_ln_fwd(ds_backend *be, float *y, float *z, float *mean, float *rstd,
                                    const float *x, const float *bias, const float *res,
                                    const float *gamma, const float *beta, int rows, int width,
                                    float p, uint64_t seed, uint64_t offset, uint32_t *keep,
                                    float eps);

ds_status ds_nn_cuda_layernorm_fwd(ds_backend *be, float *y, float *mean, float *rstd,
                                   const float *x, const float *gamma, const float *beta, int n,
                                   int h, float eps);
ds_status ds_nn_cuda_layernorm_bwd(ds_backend *be, float *dx, float *dgamma, float *dbeta,
                                   const float *dy, const float *x, const float *mean,
                                   const float *rstd, const float *gamma, int n, int h,
                                   bool accumulate_dx);

ds_status ds_nn_cuda_attn_softmax_fwd(ds_backend *be, float *p, float *pd, const float *s,
                                      const float *mask, bool causal, int B, int nh, int Tq, int T,
                                      float scale, float drop_p, uint64_t seed, uint64_t offset,
                                      uint32_t *keep);
ds_status ds_nn_cuda_attn_softmax_bwd(ds_backend *be, float *ds, float *pd, const float *dpd,
                                      const float *p, int B, int nh, int Tq, int T, float scale,
                                      float drop_p, uint64_t seed, uint64_t offset,
                                      const uint32_t *keep);

ds_status ds_nn_cuda_shift_labels(ds_backend *be, int32_t *dst, const int32_t *src, int B, int T,
                                int32_t fill);
ds_status ds_nn_cuda_xent_fwd(ds_backend *be, float *loss, float *wsum, float *probs, float *row_loss,
                             const float *logits, const int32_t *labels, const float *weights,
                             int R, int C, int ignore_index);
ds_status ds_nn_cuda_xent_bwd(ds_backend *be, float *dlogits, const float *probs,
                             const float *wsum, const int32_t *labels, const float *weights, int R,
                             int C, int ignore_index, float scale);

#endif /* DS_BACKEND_CUDA_NN_CUDA_CUH */
