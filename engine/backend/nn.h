/* Model kernels: the second backend table, reached through `be->nn`.
 *
 * Everything the modules in models/ compute besides GEMM (which is in the core
 * table, backend.h). Same conventions as backend.h: row-major, device
 * pointers, fp32 compute, ordered on the default stream. Backward kernels
 * ACCUMULATE into parameter gradients (dW += ...) so gradient accumulation and
 * shared weights need no extra pass; gradients w.r.t. inputs are written
 * (dx = ...) unless the slot says otherwise.
 *
 * The arithmetic of each element is a DS_HD static inline function in
 * engine/backend/math.h, called by the cpu loops (engine/backend/cpu/nn_*.c)
 * and the CUDA kernels (engine/backend/cuda/nn_*.cu) alike. */
#ifndef DS_BACKEND_NN_H
#define DS_BACKEND_NN_H

#include "engine/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ds_nn_ops {
    /* out[i, :] (+)= table[ids[i], :] for i < n; width h. accumulate=false
     * overwrites out. Ids outside [0, vocab) are an error (DS_ERR_INVALID_ARG
     * naming the id and its position) -- checked on cpu, clamped+flagged on cuda. */
    ds_status (*embedding_fwd)(ds_backend *be, float *out, const float *table, const int32_t *ids,
                               int n, int h, int vocab, bool accumulate);
    /* dtable[ids[i], :] += dout[i, :] */
    ds_status (*embedding_bwd)(ds_backend *be, float *dtable, const float *dout,
                               const int32_t *ids, int n, int h);

    /* out[r, :] (+)= x[:] for r < rows (bias add, position embeddings). */
    ds_status (*bcast_add_fwd)(ds_backend *be, float *out, const float *x, int rows, int width,
                               bool accumulate);
    /* dx[:] += sum_r dout[r, :] */
    ds_status (*bcast_add_bwd)(ds_backend *be, float *dx, const float *dout, int rows, int width);

    /* out[b, :] = sum_t mask[b,t] * x[b,t,:] / max(1, sum_t mask[b,t]) */
    ds_status (*mean_pool_fwd)(ds_backend *be, float *out, const float *x, const float *mask,
                               int B, int T, int H);
    ds_status (*mean_pool_bwd)(ds_backend *be, float *dx, const float *dout, const float *mask,
                               int B, int T, int H);

    /* Activations, element-wise over n: y = f(x); dx = dy * f'(x). */
    ds_status (*gelu_fwd)(ds_backend *be, float *y, const float *x, size_t n); /* erf form */
    ds_status (*gelu_bwd)(ds_backend *be, float *dx, const float *dy, const float *x, size_t n);
    ds_status (*relu_fwd)(ds_backend *be, float *y, const float *x, size_t n);
    ds_status (*relu_bwd)(ds_backend *be, float *dx, const float *dy, const float *x, size_t n);
    ds_status (*tanh_fwd)(ds_backend *be, float *y, const float *x, size_t n);
    /* uses the output y: dx = dy * (1 - y^2) */
    ds_status (*tanh_bwd)(ds_backend *be, float *dx, const float *dy, const float *y, size_t n);

    /* Layer norm over the last dimension h of n rows. mean/rstd [n] saved for
     * backward. Backward writes dx and accumulates dgamma, dbeta. */
    ds_status (*layernorm_fwd)(ds_backend *be, float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, int n, int h, float eps);
    ds_status (*layernorm_bwd)(ds_backend *be, float *dx, float *dgamma, float *dbeta,
                               const float *dy, const float *x, const float *mean,
                               const float *rstd, const float *gamma, int n, int h);

    /* Attention probabilities: for each (b, head, query row i) over keys j:
     * p = softmax_j(scale * s[b,h,i,j] + (mask[b,j] ? 0 : -inf)); in place
     * allowed. s, p: [B, nh, T, T]; mask [B, T] of 0/1. */
    ds_status (*softmax_fwd)(ds_backend *be, float *p, const float *s, const float *mask, int B,
                             int nh, int T, float scale);
    /* ds = scale * p * (dp - sum_j dp * p) */
    ds_status (*softmax_bwd)(ds_backend *be, float *ds, const float *dp, const float *p, int B,
                             int nh, int T, float scale);

    /* [B, T, nh, hd] <-> [B, nh, T, hd] (heads out of / into the hidden dim). */
    ds_status (*split_heads)(ds_backend *be, float *dst, const float *src, int B, int T, int nh,
                             int hd);
    ds_status (*merge_heads)(ds_backend *be, float *dst, const float *src, int B, int T, int nh,
                             int hd);

    /* Inverted dropout with the counter-based RNG: keep[i] = u(seed, offset+i)
     * >= p; y = keep ? x / (1-p) : 0. The keep mask is not stored: backward
     * regenerates it from (seed, offset), so dropout costs no activation
     * memory and recomputation reproduces it exactly. */
    ds_status (*dropout_fwd)(ds_backend *be, float *y, const float *x, size_t n, float p,
                             uint64_t seed, uint64_t offset);
    ds_status (*dropout_bwd)(ds_backend *be, float *dx, const float *dy, size_t n, float p,
                             uint64_t seed, uint64_t offset);

    /* Softmax cross-entropy over C classes for B rows. weights[C] or NULL.
     * loss_out (device, [B]) gets each row's weighted loss; the mean loss is
     * sum(loss) / sum(weight[label]) as PyTorch's CrossEntropyLoss(weight=...).
     * probs [B, C] saved for backward. */
    ds_status (*xent_fwd)(ds_backend *be, float *loss_out, float *probs, const float *logits,
                          const int32_t *labels, const float *weights, int B, int C);
    /* dlogits = scale * w[label] * (probs - onehot(label)) */
    ds_status (*xent_bwd)(ds_backend *be, float *dlogits, const float *probs,
                          const int32_t *labels, const float *weights, int B, int C, float scale);

    /* Copy `rows` rows of `width` floats from src (row stride src_ld) to dst
     * (row stride dst_ld); accumulate adds instead of overwriting. Selects
     * [CLS] rows and scatters their gradient back. */
    ds_status (*copy_rows)(ds_backend *be, float *dst, int dst_ld, const float *src, int src_ld,
                           int rows, int width, bool accumulate);
};

extern const ds_nn_ops ds_nn_cpu;
#ifdef DS_HAVE_CUDA
extern const ds_nn_ops ds_nn_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_NN_H */
