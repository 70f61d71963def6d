/* Model kernels: the second backend table, reached through `be->nn`.
 *
 * Everything the modules in models/ compute besides GEMM (which is in the core
 * table, backend.h). The engine itself never calls these; only models/ does.
 *
 * Conventions (as backend.h): row-major, device pointers, fp32 compute,
 * ordered on the backend's default stream. Each slot returns DS_OK or a
 * status with a message naming the slot and the offending value.
 *
 *   - Parameter gradients (dtable, dbias, dgamma, dbeta) are ACCUMULATED
 *     (+=), so gradient accumulation and shared weights need no extra pass.
 *   - Gradients with respect to activations are WRITTEN (dx = ...) unless the
 *     slot has an `accumulate` flag.
 *   - "may alias" lists the only in-place uses a slot supports.
 *
 * The arithmetic of each element is a DS_HD static inline function in
 * engine/backend/nn_math.h, called by the cpu loops (engine/backend/cpu/nn_*.c)
 * and the CUDA kernels (engine/backend/cuda/nn_*.cu) alike; the random numbers
 * of dropout are the counter-based Philox of engine/backend/math.h.
 *
 * Typical use (a linear layer with GELU, as models/ does it):
 *
 *     be->ops->gemm(be, false, true, N, out, in, 1, x, in, 0, W, in, 0, 0, u, out, 0, 1);
 *     be->nn->bias_act_fwd(be, y, u, b, N, out, DS_ACT_GELU);          // y = gelu(u + b)
 *     ...
 *     be->nn->bias_act_bwd(be, du, db, dy, u, b, N, out, DS_ACT_GELU); // du, db += */
#ifndef DS_BACKEND_NN_H
#define DS_BACKEND_NN_H

#include "engine/backend/backend.h"
#include "engine/backend/nn_math.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ds_nn_ops {
    /* ---- embeddings ---- */

    /* out[i, :] (+)= table[ids[i], :] for i < n; row width h. accumulate=false
     * overwrites out. An id outside [0, vocab) is DS_ERR_INVALID_ARG naming
     * the id and its position i, found before anything is written (cuda: by
     * a kernel of its own and one synchronous copy of its answer).
     *
     * Every slot of this table refuses bad arguments before it writes: a
     * negative size, a stride under the row width, attention's Tq > T, a
     * dropout counter range that wraps, a missing output (nn_math.h's
     * ds_check_*, the same messages on both backends). */
    ds_status (*embedding_fwd)(ds_backend *be, float *out, const float *table, const int32_t *ids,
                               int n, int h, int vocab, bool accumulate);
    /* dtable[ids[i], :] += dout[i, :] for i < n, skipping ids equal to
     * padding_idx (-1: none), as torch.nn.Embedding(padding_idx=...) does.
     * Ids must have passed embedding_fwd (not checked again on cuda; the
     * cpu refuses a negative one, cheaply, on host memory). */
    ds_status (*embedding_bwd)(ds_backend *be, float *dtable, const float *dout,
                               const int32_t *ids, int n, int h, int padding_idx);

    /* out[r, :] (+)= x[:] for r < rows (position embeddings, a single
     * token-type row). */
    ds_status (*bcast_add_fwd)(ds_backend *be, float *out, const float *x, int rows, int width,
                               bool accumulate);
    /* dx[:] += sum_r dout[r, :] (column sums; the gradient of bcast_add and of
     * a bias). */
    ds_status (*bcast_add_bwd)(ds_backend *be, float *dx, const float *dout, int rows, int width);

    /* Masked mean over the sequence:
     * out[b, :] = sum_t mask[b,t] x[b,t,:] / max(1, sum_t mask[b,t]).
     * x [B, T, H], mask [B, T] of 0/1 (NULL: every token counts), out [B, H]. */
    ds_status (*mean_pool_fwd)(ds_backend *be, float *out, const float *x, const float *mask,
                               int B, int T, int H);
    /* dx[b, t, :] = mask[b,t] dout[b, :] / max(1, sum_t mask[b,t]) (written). */
    ds_status (*mean_pool_bwd)(ds_backend *be, float *dx, const float *dout, const float *mask,
                               int B, int T, int H);

    /* ---- bias + activation ---- */

    /* y[r, c] = act(x[r, c] + bias[c]); bias may be NULL (no bias). y may
     * alias x. act is DS_ACT_NONE / RELU / GELU (erf form) / TANH /
     * GELU_TANH (the tanh approximation, GPT-2's "gelu_new"); another value
     * is DS_ERR_INVALID_ARG. */
    ds_status (*bias_act_fwd)(ds_backend *be, float *y, const float *x, const float *bias,
                              int rows, int width, ds_act act);
    /* dx[r, c] = dy[r, c] * act'(x[r, c] + bias[c]) (written; dx may alias dy;
     * dx may be NULL for DS_ACT_NONE when only dbias is wanted);
     * dbias[c] += sum_r dx[r, c] when dbias != NULL. x, bias are the inputs of
     * the forward call (bias may be NULL). */
    ds_status (*bias_act_bwd)(ds_backend *be, float *dx, float *dbias, const float *dy,
                              const float *x, const float *bias, int rows, int width, ds_act act);

    /* ---- layer norm over the last dimension h of n rows ---- */

    /* y = (x - mean) * rstd * gamma + beta with the biased variance (as
     * torch.nn.LayerNorm); mean, rstd [n] are written for backward. y may
     * alias x only if x is not needed later. */
    ds_status (*layernorm_fwd)(ds_backend *be, float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, int n, int h, float eps);
    /* dx (=, or += when accumulate_dx) the input gradient; dgamma, dbeta +=.
     * dx may alias dy when accumulate_dx is false. */
    ds_status (*layernorm_bwd)(ds_backend *be, float *dx, float *dgamma, float *dbeta,
                               const float *dy, const float *x, const float *mean,
                               const float *rstd, const float *gamma, int n, int h,
                               bool accumulate_dx);

    /* ---- attention probabilities ----
     * s, p, pd: [B, nh, Tq, T] (Tq query rows per head: T for a full layer,
     * 1 when only the [CLS] row is needed); mask [B, T] of 0/1 over the keys,
     * or NULL. For each (b, head, query i): p[.., i, j] = softmax_j(scale *
     * s[.., i, j]) over the keys with mask[b, j] = 1 and, when `causal`,
     * j < ds_causal_keys(i, Tq, T) (nn_math.h: query i is position
     * i + (T - Tq), the last Tq of T, and sees itself and earlier positions:
     * a decoder's self-attention); masked keys get probability exactly 0 (as
     * Hugging Face's large negative bias does in fp32). A row with no visible
     * key gets all zeros (no NaN). Then the attention dropout: pd = dropout(p)
     * with probability drop_p and the stream (seed, offset), element index =
     * flat index in [B, nh, Tq, T]. keep: the dropout's keep mask over the
     * B nh Tq rows of T keys (below, "dropout"), or NULL. */

    /* Writes p (may alias s) and, when pd != NULL, pd. pd may be NULL only
     * when drop_p == 0 (then the caller uses p). When drop_p > 0 and keep !=
     * NULL, also writes the keep bits of every key (causal or padding ones
     * too, which the backward reads). */
    ds_status (*attn_softmax_fwd)(ds_backend *be, float *p, float *pd, const float *s,
                                  const float *mask, bool causal, int B, int nh, int Tq, int T,
                                  float scale, float drop_p, uint64_t seed, uint64_t offset,
                                  uint32_t *keep);
    /* From dpd = d(loss)/d(pd): dp = dropout_bwd(dpd); ds = scale * p * (dp -
     * sum_j dp p) (ds may alias dpd). When pd != NULL it also regenerates pd
     * = dropout(p), the operand of dV = pd^T dC, in the same pass. It needs
     * neither the mask nor `causal`: a masked key's p is exactly 0, so its
     * ds, its term of the sum and its pd are exactly 0 too. keep: the mask
     * the forward wrote with the same arguments, read instead of
     * regenerating the stream, or NULL. */
    ds_status (*attn_softmax_bwd)(ds_backend *be, float *ds, float *pd, const float *dpd,
                                  const float *p, int B, int nh, int Tq, int T, float scale,
                                  float drop_p, uint64_t seed, uint64_t offset,
                                  const uint32_t *keep);

    /* ---- dropout (inverted, counter-based) ----
     * keep(i) = ds_rng_uniform_at(seed, offset + i) >= p (engine/backend/math.h:
     * the backend's uniform Philox stream), i the flat index r * width + c; a
     * kept element is scaled by 1 / (1 - p). p = 0 is the identity (no random
     * numbers drawn); p must be in [0, 1).
     *
     * The mask: with keep == NULL the backward regenerates it from (seed,
     * offset), so dropout costs no activation memory. A caller that can keep
     * rows * ds_dropout_mask_ld(width) words (ds_dropout_mask_bytes,
     * nn_math.h: 1 bit per element, 1/32 of the activation) passes them as
     * `keep`: when p > 0 the forward writes the keep bits there and the
     * backward reads them instead of running Philox again (on the cpu the
     * regeneration was 1.2% of the BERT-mini step: bench/RESULTS.md, "the
     * dropout keep mask in bits"). The bits are the stream's, so both ways
     * give the same results, and a recomputed forward rewrites the same
     * mask. With p == 0 keep is not touched. */

    /* y[r, c] = res[r, c] + dropout(x[r, c] + bias[c]); bias and res may be
     * NULL. y may alias x or res. */
    ds_status (*dropout_fwd)(ds_backend *be, float *y, const float *x, const float *bias,
                             const float *res, int rows, int width, float p, uint64_t seed,
                             uint64_t offset, uint32_t *keep);
    /* dx = dropout mask (scaled) applied to dy (written; may alias dy);
     * dbias[c] += sum_r dx[r, c] when dbias != NULL. keep: what dropout_fwd
     * wrote with the same (rows, width, p, seed, offset), or NULL. */
    ds_status (*dropout_bwd)(ds_backend *be, float *dx, float *dbias, const float *dy, int rows,
                             int width, float p, uint64_t seed, uint64_t offset,
                             const uint32_t *keep);

    /* ---- softmax cross-entropy over C classes for R rows ----
     * weights [R] (one per row) or NULL (all 1). Rows whose label is
     * ignore_index count with weight 0 (a language model's padding and
     * prompt positions). As torch.nn.CrossEntropyLoss(reduction="mean",
     * ignore_index) with per-row weights (class weights: w_r = class_w[y_r]):
     * loss = sum_r w_r * (-log softmax(logits_r)[y_r]) / sum_r w_r over the
     * counted rows; 0 when nothing counts (PyTorch gives 0/0 = NaN; the
     * engine then normalises over all ranks, where others may count).
     * Any other label outside [0, C) is DS_ERR_INVALID_ARG naming the row and
     * label. */

    /* Writes loss[0], wsum[0] = sum_r w_r (device), probs [R, C] =
     * softmax(logits) (rows of ignored labels too) and row_loss [R] (the
     * unweighted -log p of each counted row, 0 for ignored ones). The sum
     * runs in double in row order, so it does not depend on the thread
     * count. */
    ds_status (*xent_fwd)(ds_backend *be, float *loss, float *wsum, float *probs, float *row_loss,
                          const float *logits, const int32_t *labels, const float *weights, int R,
                          int C, int ignore_index);
    /* dlogits[r, :] = scale * w_r / wsum * (probs[r, :] - onehot(y_r)), 0 for
     * ignored rows and when wsum is 0 (written; may alias probs). */
    ds_status (*xent_bwd)(ds_backend *be, float *dlogits, const float *probs, const float *wsum,
                          const int32_t *labels, const float *weights, int R, int C,
                          int ignore_index, float scale);

    /* ---- rows ----
     * Copy `rows` rows of `width` floats from src (row stride src_ld) to dst
     * (row stride dst_ld); accumulate adds instead of overwriting. */
    ds_status (*copy_rows)(ds_backend *be, float *dst, int dst_ld, const float *src, int src_ld,
                           int rows, int width, bool accumulate);
    /* Causal language modelling targets: dst[b, t] = src[b, t + 1] for
     * t < T - 1 and dst[b, T - 1] = fill, for B rows of T (position t
     * predicts the next token, the last has nothing to predict). */
    ds_status (*shift_labels)(ds_backend *be, int32_t *dst, const int32_t *src, int B, int T,
                              int32_t fill);

    /* ---- fused ----
     * dropout_fwd, then layernorm_fwd of its output (a residual branch into a
     * layer norm: BERT's A = x + dropout(t + b), H = LN(A); GPT-2's x1 and
     * ln_2): y[r, c] = res[r, c] + dropout(x[r, c] + bias[c]) exactly as
     * dropout_fwd (bias, res may be NULL; keep as there; y may alias x or
     * res), then z = layer norm of y's rows with gamma, beta, eps, and mean,
     * rstd [rows] written, exactly as layernorm_fwd. The same bits as the two
     * calls; y is still written (layer norm's backward reads it). z may alias
     * x or res (each of their rows is read before z's is written), not y. The
     * cpu normalises each row of y while it is in L1, so layer norm does not
     * read y back from memory (about 0.2% of the BERT-mini step:
     * bench/RESULTS.md, "Dropout + residual + layer norm in one pass"); the
     * cuda backend runs its two kernels. */
    ds_status (*dropout_ln_fwd)(ds_backend *be, float *y, float *z, float *mean, float *rstd,
                                const float *x, const float *bias, const float *res,
                                const float *gamma, const float *beta, int rows, int width,
                                float p, uint64_t seed, uint64_t offset, uint32_t *keep,
                                float eps);
};

/* The cpu tables are one per instruction set (engine/backend/cpu/cpu_isa.h);
 * a cpu backend's be->nn is the one it chose. */
#ifdef DS_HAVE_CUDA
extern const ds_nn_ops ds_nn_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_NN_H */
