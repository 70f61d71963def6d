/* "gpt2_block": one GPT2Block of Hugging Face (pre-LN), [B, T, E] -> [B, T, E].
 *
 *   H1  = ln_1(x)
 *   QKV = H1 Wa + ba                      Conv1D [E, 3E]: Q | K | V side by side
 *   P   = softmax(Q K^T / sqrt(hd) + causal and padding masks)   [B, nh, T, T]
 *   C   = dropout_a(P) V                  (heads merged back into E)
 *   X1  = x + dropout_r(C Wp + bp)        Conv1D [E, E]
 *   H2  = ln_2(X1)
 *   U   = H2 Wf;  G = gelu_new(U + bf)    Conv1D [E, I]
 *   y   = X1 + dropout_r(G Wq + bq)       Conv1D [I, E]
 *
 * Conv1D is GPT-2's linear layer with the weight stored [in, out] (y = x W +
 * b), the transpose of nn.Linear's; the GEMMs below take it as it is, so
 * Hugging Face checkpoints load without transposing.
 *
 * Heads are read in place: head h of Q (K, V) is the column block h*hd of
 * QKV's first (second, third) E columns, leading dimension 3E, and the
 * attention GEMMs run one strided-batched call per head over a chunk's
 * sequences, so QKV is never split or copied (HF's split + view +
 * transpose). On the cpu a chunk is a few sequences, so that their
 * probabilities stay in the cores' caches from the scores to the context
 * (ds_attn_chunk_rows, modules.h); the bits are those of the whole batch at
 * once.
 *
 * Attention is causal (position t sees positions <= t) and also skips padded
 * keys when the batch has an "attention_mask" (what GPT2Model does when it is
 * given one). Padded query positions still attend to the real keys before
 * them; their outputs are computed (as HF's are) and the loss ignores them.
 * A query that sees no real key at all (left padding: a padded position
 * before the first real token) gets a zero attention output, where HF's
 * additive mask makes it a uniform average over all T keys; such a position
 * is padding either way (no loss counts it, no other query sees it), so
 * losses and gradients agree and only its own logits differ.
 *
 * Dropout sites draw from one stream (ctx->seed) at disjoint offsets:
 * attention probs [0, B nh T T), attention output [+N E), MLP output [+N E),
 * so a recomputation (activation checkpointing) reproduces every mask.
 *
 * saved (floats): mean/rstd of both layer norms [N]; H1, C, X1, H2 [N, E];
 *                 QKV [N, 3E]; P [B, nh, T, T]; U, G [N, I]      (N = B T)
 *       (bits):   the keep masks of the three dropouts where their probability
 *                 is > 0 (nn.h: 1 bit per element, rows padded to 32), written
 *                 in forward and read in backward instead of running Philox
 *                 again (bench/RESULTS.md, "the dropout keep mask in bits")
 * scratch: forward  max(N E, B nh T T) (a GEMM output before the fused bias
 *          + dropout + residual; the dropped-out P: never live together);
 *          backward 2 N E + max(N I, 2 B nh T T + 3 N E). */
#include <math.h>

#include "models/modules.h"

enum {
    P_LN1_W = 0, P_LN1_B, P_ATTN_W, P_ATTN_B, P_APROJ_W, P_APROJ_B,
    P_LN2_W, P_LN2_B, P_FC_W, P_FC_B, P_MPROJ_W, P_MPROJ_B,
    P_COUNT
};

static const char *const k_param_names[P_COUNT] = {
    "ln_1.weight",        "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",
    "mlp.c_proj.weight",  "mlp.c_proj.bias",
};

typedef struct blk_impl {
    ds_gpt2_block_desc d;
    int hd; /* head width E / nh */
} blk_impl;

typedef struct blk_dims {
    int B, T, E, I, nh, hd;
    size_t N;  /* B T */
    size_t PP; /* B nh T T */
    bool keep_a, keep_r; /* keep masks saved: attention / residual dropout > 0 */
} blk_dims;

static blk_dims blk_dims_of(const blk_impl *L, int B, int T) {
    blk_dims z = {.B = B, .T = T, .E = L->d.n_embd, .I = L->d.n_inner, .nh = L->d.n_head,
                  .hd = L->hd};
    z.N = (size_t)B * T;
    z.PP = (size_t)B * z.nh * T * T;
    z.keep_a = L->d.attn_pdrop > 0.0f;
    z.keep_r = L->d.resid_pdrop > 0.0f;
    return z;
}

/* ---- Conv1D: W [in, out], y[N, out] = x[N, in] W (+ b elsewhere) ---- */

/* y = x W (c_attn, whose bias joins the sums, calls gemm_bias itself) */
static ds_status conv1d_fwd(ds_backend *be, float *y, const float *x, const float *W, int N,
                            int in, int out) {
    return be->ops->gemm(be, false, false, N, out, in, 1.0f, x, in, 0, W, out, 0, 0.0f, y, out,
                         0, 1);
}

/* dW[in, out] += x^T dy */
static ds_status conv1d_bwd_w(ds_backend *be, float *dW, const float *dy, const float *x, int N,
                              int in, int out) {
    return be->ops->gemm(be, true, false, in, out, N, 1.0f, x, in, 0, dy, out, 0, 1.0f, dW, out,
                         0, 1);
}

/* dx[N, in] = dy W^T */
static ds_status conv1d_bwd_x(ds_backend *be, float *dx, const float *dy, const float *W, int N,
                              int in, int out) {
    return be->ops->gemm(be, false, true, N, in, out, 1.0f, dy, out, 0, W, out, 0, 0.0f, dx, in,
                         0, 1);
}

/* ---- workspace layouts ---- */

typedef struct blk_saved {
    float *mean1, *rstd1, *h1, *qkv, *p, *c, *x1, *mean2, *rstd2, *h2, *u, *g;
    uint32_t *keep_p, *keep_a, *keep_m; /* dropout masks of P, C Wp + bp, G Wq + bq */
} blk_saved;

static size_t blk_saved_layout(const blk_dims *z, void *base, blk_saved *s) {
    size_t E = (size_t)z->E, I = (size_t)z->I;
    ds_carve c = ds_carve_begin(base);
    s->mean1 = ds_carve_f32(&c, z->N);
    s->rstd1 = ds_carve_f32(&c, z->N);
    s->h1 = ds_carve_f32(&c, z->N * E);
    s->qkv = ds_carve_f32(&c, z->N * 3 * E);
    s->p = ds_carve_f32(&c, z->PP);
    s->c = ds_carve_f32(&c, z->N * E);
    s->x1 = ds_carve_f32(&c, z->N * E);
    s->mean2 = ds_carve_f32(&c, z->N);
    s->rstd2 = ds_carve_f32(&c, z->N);
    s->h2 = ds_carve_f32(&c, z->N * E);
    s->u = ds_carve_f32(&c, z->N * I);
    s->g = ds_carve_f32(&c, z->N * I);
    size_t kp = ds_dropout_mask_bytes((int64_t)z->B * z->nh * z->T, z->T);
    size_t kr = ds_dropout_mask_bytes((int64_t)z->N, z->E);
    s->keep_p = z->keep_a ? ds_carve_bytes(&c, kp) : NULL;
    s->keep_a = z->keep_r ? ds_carve_bytes(&c, kr) : NULL;
    s->keep_m = z->keep_r ? ds_carve_bytes(&c, kr) : NULL;
    return c.off;
}

/* Forward scratch: `t` (a projection's output before the fused bias +
 * dropout + residual) and `pd` (dropout(P)) are never live together. */
typedef struct blk_fwd_scratch {
    float *t, *pd;
} blk_fwd_scratch;

static size_t blk_fwd_layout(const blk_dims *z, void *base, blk_fwd_scratch *s) {
    size_t NE = z->N * (size_t)z->E;
    ds_carve c = ds_carve_begin(base);
    float *r = ds_carve_f32(&c, NE > z->PP ? NE : z->PP);
    s->t = r;
    s->pd = r;
    return c.off;
}

/* Backward scratch: d1, d2 [N, E] through the whole call; then either dg
 * [N, I] (the MLP) or dp, pd [B nh T T] + dqkv [N, 3E] (the attention), never
 * live together. */
typedef struct blk_bwd_scratch {
    float *d1, *d2, *dg, *dp, *pd, *dqkv;
} blk_bwd_scratch;

static size_t blk_bwd_layout(const blk_dims *z, void *base, blk_bwd_scratch *s) {
    size_t NE = z->N * (size_t)z->E;
    ds_carve c = ds_carve_begin(base);
    s->d1 = ds_carve_f32(&c, NE);
    s->d2 = ds_carve_f32(&c, NE);
    size_t shared_at = c.off;
    s->dg = ds_carve_f32(&c, z->N * (size_t)z->I);
    size_t after_mlp = c.off;
    c.off = shared_at;
    s->dp = ds_carve_f32(&c, z->PP);
    s->pd = ds_carve_f32(&c, z->PP);
    s->dqkv = ds_carve_f32(&c, 3 * NE);
    if (after_mlp > c.off) c.off = after_mlp;
    return c.off;
}

static size_t blk_out_elems(const ds_module *m, int B, int T) {
    return (size_t)B * T * ((const blk_impl *)m->impl)->d.n_embd;
}

static size_t blk_saved_bytes(const ds_module *m, int B, int T) {
    blk_dims z = blk_dims_of(m->impl, B, T);
    blk_saved s;
    return blk_saved_layout(&z, NULL, &s);
}

static size_t blk_scratch_bytes(const ds_module *m, int B, int T) {
    blk_dims z = blk_dims_of(m->impl, B, T);
    blk_fwd_scratch f;
    blk_bwd_scratch b;
    size_t fb = blk_fwd_layout(&z, NULL, &f);
    size_t bb = blk_bwd_layout(&z, NULL, &b);
    return fb > bb ? fb : bb;
}

/* The dropout probabilities of this call (0 outside training). */
static void blk_drops(const blk_impl *L, const ds_module_ctx *ctx, float *pa, float *pr) {
    *pa = ctx->training ? L->d.attn_pdrop : 0.0f;
    *pr = ctx->training ? L->d.resid_pdrop : 0.0f;
}

/* The optional padding mask: absent is all real; present, it must be fp32. */
static ds_status blk_mask(const ds_module *m, const ds_module_ctx *ctx, const float **mask) {
    *mask = NULL;
    if (!ds_batch_get(ctx->batch, "attention_mask")) return DS_OK;
    return ds_module_input_f32(m, ctx, "attention_mask", mask);
}

static ds_status blk_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const blk_impl *L = m->impl;
    ds_backend *be = ctx->be;
    const blk_dims z = blk_dims_of(L, ctx->batch->B, ctx->batch->T);
    const int B = z.B, T = z.T, E = z.E, I = z.I, nh = z.nh, hd = z.hd, N = (int)z.N;
    const int E3 = 3 * E;
    const int64_t TT = (int64_t)T * T, sE3 = (int64_t)T * E3, sE = (int64_t)T * E;
    float pa, pr;
    blk_drops(L, ctx, &pa, &pr);
    const float *mask;
    DS_TRY(blk_mask(m, ctx, &mask));
    float *const *P = ctx->params;
    blk_saved s;
    blk_saved_layout(&z, ctx->saved, &s);
    blk_fwd_scratch w;
    blk_fwd_layout(&z, ctx->scratch, &w);
    const float *x = ctx->x;
    const float *q = s.qkv, *k = s.qkv + E, *v = s.qkv + 2 * E;

    /* H1 = ln_1(x); QKV = H1 Wa + ba */
    DS_TRY(be->nn->layernorm_fwd(be, s.h1, s.mean1, s.rstd1, x, P[P_LN1_W], P[P_LN1_B], N, E,
                                 L->d.ln_eps));
    /* the bias joins the product's sums (as in ds_linear_bias_fwd, modules.h) */
    DS_TRY(be->ops->gemm_bias(be, false, false, N, E3, E, s.h1, E, P[P_ATTN_W], E3,
                              P[P_ATTN_B], s.qkv));

    /* in chunks of the batch on the cpu (modules.h) */
    const float scale = 1.0f / sqrtf((float)hd);
    const int rows = ds_attn_chunk_rows(be, B, nh, T, T);
    for (int b0 = 0; b0 < B; b0 += rows) { /* samples b0 .. b0 + nb - 1 */
        const int nb = B - b0 < rows ? B - b0 : rows;
        const size_t o = (size_t)b0 * nh * TT, oq = (size_t)b0 * sE3;
        float *p = s.p + o, *pd = pa > 0.0f ? w.pd + o : NULL;
        /* scores: for head h, sample b: S[b, h] = Q[b, :, h] K[b, :, h]^T */
        for (int h = 0; h < nh; h++)
            DS_TRY(be->ops->gemm(be, false, true, T, T, hd, 1.0f, q + oq + h * hd, E3, sE3,
                                 k + oq + h * hd, E3, sE3, 0.0f, p + h * TT, T, nh * TT, nb));
        DS_TRY(be->nn->attn_softmax_fwd(be, p, pd, p, mask ? mask + (size_t)b0 * T : NULL, true,
                                        nb, nh, T, T, scale, pa, ctx->seed, o,
                                        ds_attn_keep_rows(s.keep_p, nh, T, T, b0)));
        const float *pv = pd ? pd : p;
        /* context: C[b, :, h] = P[b, h] V[b, :, h] */
        for (int h = 0; h < nh; h++)
            DS_TRY(be->ops->gemm(be, false, false, T, hd, T, 1.0f, pv + h * TT, T, nh * TT,
                                 v + oq + h * hd, E3, sE3, 0.0f, s.c + b0 * sE + h * hd, E, sE,
                                 nb));
    }

    /* X1 = x + dropout(C Wp + bp); H2 = ln_2(X1) */
    DS_TRY(conv1d_fwd(be, w.t, s.c, P[P_APROJ_W], N, E, E));
    DS_TRY(be->nn->dropout_ln_fwd(be, s.x1, s.h2, s.mean2, s.rstd2, w.t, P[P_APROJ_B], x,
                                  P[P_LN2_W], P[P_LN2_B], N, E, pr, ctx->seed, (uint64_t)z.PP,
                                  s.keep_a, L->d.ln_eps));

    /* G = gelu_new(H2 Wf + bf); y = X1 + dropout(G Wq + bq) */
    DS_TRY(conv1d_fwd(be, s.u, s.h2, P[P_FC_W], N, E, I));
    DS_TRY(be->nn->bias_act_fwd(be, s.g, s.u, P[P_FC_B], N, I, DS_ACT_GELU_TANH));
    DS_TRY(conv1d_fwd(be, w.t, s.g, P[P_MPROJ_W], N, I, E));
    return be->nn->dropout_fwd(be, ctx->y, w.t, P[P_MPROJ_B], s.x1, N, E, pr, ctx->seed,
                               (uint64_t)z.PP + z.N * (size_t)E, s.keep_m);
}

static ds_status blk_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    if (!ctx->dy || !ctx->dx)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: backward needs dy and dx", m->name);
    const blk_impl *L = m->impl;
    ds_backend *be = ctx->be;
    const blk_dims z = blk_dims_of(L, ctx->batch->B, ctx->batch->T);
    const int B = z.B, T = z.T, E = z.E, I = z.I, nh = z.nh, hd = z.hd, N = (int)z.N;
    const int E3 = 3 * E;
    const int64_t TT = (int64_t)T * T, sE3 = (int64_t)T * E3, sE = (int64_t)T * E;
    float pa, pr;
    blk_drops(L, ctx, &pa, &pr);
    float *const *P = ctx->params;
    float *const *G = ctx->grads;
    blk_saved s;
    blk_saved_layout(&z, ctx->saved, &s);
    blk_bwd_scratch w;
    blk_bwd_layout(&z, ctx->scratch, &w);
    const float *x = ctx->x, *dy = ctx->dy;
    float *dx = ctx->dx;
    const float *q = s.qkv, *k = s.qkv + E, *v = s.qkv + 2 * E;
    const uint64_t off_attn = (uint64_t)z.PP, off_mlp = (uint64_t)z.PP + z.N * (size_t)E;

    /* ---- MLP: y = X1 + dropout(gelu_new(ln_2(X1) Wf + bf) Wq + bq) ---- */
    /* d1 = d(G Wq + bq) through the dropout; dbq += */
    DS_TRY(be->nn->dropout_bwd(be, w.d1, G[P_MPROJ_B], dy, N, E, pr, ctx->seed, off_mlp,
                               s.keep_m));
    DS_TRY(conv1d_bwd_w(be, G[P_MPROJ_W], w.d1, s.g, N, I, E));
    DS_TRY(conv1d_bwd_x(be, w.dg, w.d1, P[P_MPROJ_W], N, I, E));
    DS_TRY(be->nn->bias_act_bwd(be, w.dg, G[P_FC_B], w.dg, s.u, P[P_FC_B], N, I,
                                DS_ACT_GELU_TANH));
    DS_TRY(conv1d_bwd_w(be, G[P_FC_W], w.dg, s.h2, N, E, I));
    /* the MLP's gradients, two thirds of the block's parameters, are final:
     * their reduction can overlap the rest of the backward */
    DS_TRY(ds_module_grads_final(m, ctx, P_FC_W));
    DS_TRY(conv1d_bwd_x(be, w.d2, w.dg, P[P_FC_W], N, E, I)); /* dH2 */
    /* dX1 = dy (residual) + ln_2'(dH2), built in dx */
    DS_TRY(be->ops->memcpy(be, dx, dy, z.N * (size_t)E * sizeof(float), DS_COPY_D2D, NULL));
    DS_TRY(be->nn->layernorm_bwd(be, dx, G[P_LN2_W], G[P_LN2_B], w.d2, s.x1, s.mean2, s.rstd2,
                                 P[P_LN2_W], N, E, true));

    /* ---- attention: X1 = x + dropout(C Wp + bp) ---- */
    DS_TRY(be->nn->dropout_bwd(be, w.d1, G[P_APROJ_B], dx, N, E, pr, ctx->seed, off_attn,
                               s.keep_a));
    DS_TRY(conv1d_bwd_w(be, G[P_APROJ_W], w.d1, s.c, N, E, E));
    DS_TRY(ds_module_grads_final(m, ctx, P_APROJ_W)); /* and ln_2's */
    float *dc = w.d2; /* dH2 is consumed */
    DS_TRY(conv1d_bwd_x(be, dc, w.d1, P[P_APROJ_W], N, E, E));

    const float scale = 1.0f / sqrtf((float)hd);
    const int rows = ds_attn_chunk_rows(be, B, nh, T, T);
    for (int b0 = 0; b0 < B; b0 += rows) { /* the forward's chunks */
        const int nb = B - b0 < rows ? B - b0 : rows;
        const size_t o = (size_t)b0 * nh * TT, oq = (size_t)b0 * sE3, oc = (size_t)b0 * sE;
        const float *p = s.p + o;
        float *dp = w.dp + o, *pd = pa > 0.0f ? w.pd + o : NULL;
        float *dq = w.dqkv + oq, *dk = w.dqkv + oq + E, *dv = w.dqkv + oq + 2 * E;
        /* d(dropout(P)) = dC V^T per head */
        for (int h = 0; h < nh; h++)
            DS_TRY(be->ops->gemm(be, false, true, T, T, hd, 1.0f, dc + oc + h * hd, E, sE,
                                 v + oq + h * hd, E3, sE3, 0.0f, dp + h * TT, T, nh * TT, nb));
        /* dS (in place of dp; exactly 0 at masked keys, whose P is 0), and
         * dropout(P) regenerated for dV */
        DS_TRY(be->nn->attn_softmax_bwd(be, dp, pd, dp, p, nb, nh, T, T, scale, pa,
                                        ctx->seed, o, ds_attn_keep_rows(s.keep_p, nh, T, T, b0)));
        const float *pv = pd ? pd : p;
        for (int h = 0; h < nh; h++) {
            /* dV = dropout(P)^T dC;  dQ = dS K;  dK = dS^T Q (into dQKV's column blocks) */
            DS_TRY(be->ops->gemm(be, true, false, T, hd, T, 1.0f, pv + h * TT, T, nh * TT,
                                 dc + oc + h * hd, E, sE, 0.0f, dv + h * hd, E3, sE3, nb));
            DS_TRY(be->ops->gemm(be, false, false, T, hd, T, 1.0f, dp + h * TT, T, nh * TT,
                                 k + oq + h * hd, E3, sE3, 0.0f, dq + h * hd, E3, sE3, nb));
            DS_TRY(be->ops->gemm(be, true, false, T, hd, T, 1.0f, dp + h * TT, T, nh * TT,
                                 q + oq + h * hd, E3, sE3, 0.0f, dk + h * hd, E3, sE3, nb));
        }
    }
    /* QKV = H1 Wa + ba: dWa, dba +=; dH1 = dQKV Wa^T (into d1: dA is consumed) */
    DS_TRY(conv1d_bwd_w(be, G[P_ATTN_W], w.dqkv, s.h1, N, E, E3));
    DS_TRY(be->nn->bcast_add_bwd(be, G[P_ATTN_B], w.dqkv, N, E3));
    DS_TRY(ds_module_grads_final(m, ctx, P_ATTN_W));
    DS_TRY(conv1d_bwd_x(be, w.d1, w.dqkv, P[P_ATTN_W], N, E, E3));
    /* dx = dX1 (residual, already in dx) + ln_1'(dH1) */
    return be->nn->layernorm_bwd(be, dx, G[P_LN1_W], G[P_LN1_B], w.d1, x, s.mean1, s.rstd1,
                                 P[P_LN1_W], N, E, true);
}

/* The three GEMMs of one Conv1D (conv1d_fwd / _bwd_w / _bwd_x) for N rows. */
static void conv1d_plan(ds_gemm_plan *plan, int N, int in, int out) {
    ds_gemm_plan_add(plan, false, false, N, out, in, 0, 0, 1);
    ds_gemm_plan_add(plan, true, false, in, out, N, 0, 0, 1);
    ds_gemm_plan_add(plan, false, true, N, in, out, 0, 0, 1);
}

/* c_attn, attention (every position queried), c_proj, mlp c_fc and c_proj,
 * as blk_forward / blk_backward make them. */
static void blk_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    const blk_dims z = blk_dims_of(m->impl, B, T);
    const int N = (int)z.N;
    conv1d_plan(plan, N, z.E, 3 * z.E);
    ds_attn_plan_gemms(plan, z.B, z.T, z.T, z.hd);
    conv1d_plan(plan, N, z.E, z.E);
    conv1d_plan(plan, N, z.E, z.I);
    conv1d_plan(plan, N, z.I, z.E);
}

static const ds_module_ops k_gpt2_block_ops = {
    .type = "gpt2_block",
    .out_elems = blk_out_elems,
    .saved_bytes = blk_saved_bytes,
    .scratch_bytes = blk_scratch_bytes,
    .forward = blk_forward,
    .backward = blk_backward,
    .destroy = ds_module_free,
    .plan_gemms = blk_plan_gemms,
};

ds_status ds_mod_gpt2_block_create(const char *name, const ds_gpt2_block_desc *d,
                                   ds_module **out_m) {
    *out_m = NULL;
    if (d->n_embd <= 0 || d->n_head <= 0 || d->n_inner <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2 block %s: n_embd=%d n_head=%d n_inner=%d must "
                      "be > 0", name, d->n_embd, d->n_head, d->n_inner);
    if (d->n_embd % d->n_head != 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "gpt2 block %s: n_embd %d is not a multiple of the %d heads", name,
                      d->n_embd, d->n_head);
    if (!(d->resid_pdrop >= 0.0f && d->resid_pdrop < 1.0f) ||
        !(d->attn_pdrop >= 0.0f && d->attn_pdrop < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "gpt2 block %s: dropouts (resid %g, attention %g) must be in [0, 1)", name,
                      (double)d->resid_pdrop, (double)d->attn_pdrop);
    ds_module *m;
    DS_TRY(ds_module_create(&k_gpt2_block_ops, name, P_COUNT, sizeof(blk_impl), &m));
    m->checkpointable = true;
    blk_impl *L = m->impl;
    L->d = *d;
    L->hd = d->n_embd / d->n_head;
    const int64_t E = d->n_embd, I = d->n_inner;
    /* [in, out] (Conv1D) per weight; vectors [out] */
    const int64_t shape[P_COUNT][2] = {
        {E, 0}, {E, 0}, {E, 3 * E}, {3 * E, 0}, {E, E}, {E, 0},
        {E, 0}, {E, 0}, {E, I},     {I, 0},     {I, E}, {E, 0},
    };
    ds_status st = DS_OK;
    for (int i = 0; i < P_COUNT && st == DS_OK; i++) {
        ds_init_kind init = DS_INIT_ZEROS; /* biases, layer norm biases */
        float sd = 0.0f;
        if (i == P_LN1_W || i == P_LN2_W) {
            init = DS_INIT_ONES;
        } else if (shape[i][1] > 0) { /* Conv1D weights; HF scales the residual projections */
            init = DS_INIT_NORMAL;
            sd = (i == P_APROJ_W || i == P_MPROJ_W) ? d->proj_std : d->init_std;
        }
        st = ds_module_param(m, i, NULL, k_param_names[i], shape[i][0], shape[i][1], init, 0.0f,
                             sd);
    }
    /* nn.LayerNorm's weights: HF's Trainer leaves them out of weight decay
     * by module type (their names say nothing) */
    if (st == DS_OK) m->params[P_LN1_W].no_decay = m->params[P_LN2_W].no_decay = true;
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
