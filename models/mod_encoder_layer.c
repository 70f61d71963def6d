/* "encoder_layer": one BertLayer of Hugging Face (post-LN), [B, T, H] -> [B, T, H].
 *
 *   Q, K, V = xq Wq^T + bq, x Wk^T + bk, x Wv^T + bv       (heads side by side in H)
 *   P       = softmax(Q K^T / sqrt(hd) + padding mask)      [B, nh, Tq, T]
 *   C       = dropout_a(P) V                                 (heads merged back into H)
 *   A1      = xq + dropout_h(C Wo^T + bo);     H1 = LN1(A1)
 *   U       = H1 Wi^T;   G = gelu(U + bi)
 *   A2      = H1 + dropout_h(G Wo2^T + bo2);   y  = LN2(A2)
 *
 * xq are the query positions: all T of them (Tq = T, xq = x), or only
 * position 0 (Tq = 1, desc.cls_only: xq = x[:, 0, :], and y is zero outside
 * row 0). Keys and values always come from all T positions. Every tensor
 * after the queries has Nq = B Tq rows.
 *
 * The attention GEMMs read the heads in place from the [B, Tq or T, H]
 * layouts (head h of row b is the column block h*hd of every row, leading
 * dimension H), one strided-batched call per head over the B rows, so no
 * split/merge copies are needed.
 *
 * On the cpu the attention runs a few samples of the batch at a time
 * (scores, softmax + dropout, context; backward likewise), so a chunk's
 * probabilities are still in the core's cache when the next step reads them
 * (ds_attn_chunk_rows, modules.h); every product, softmax row and dropout
 * element is the same call on the same data as over the whole batch, so the
 * bits are too.
 *
 * Dropout sites draw from one stream (ctx->seed) at disjoint offsets:
 * attention probs [0, B nh Tq T), attention output [+Nq H), FFN output [+Nq H).
 *
 * saved (floats): K, V [N, H]; Q, C, A1, H1, A2 [Nq, H]; P [B, nh, Tq, T];
 *                 U, G [Nq, I]; mean/rstd of both layer norms [Nq]  (N = B T);
 *       (bits):   the keep masks of the three dropouts, where their
 *                 probability is > 0 (nn.h: 1 bit per element, rows padded to
 *                 32), written in forward and read in backward instead of
 *                 running Philox again (bench/RESULTS.md, "the dropout keep
 *                 mask in bits")
 * scratch: forward  max(Nq H, B nh Tq T) (the GEMM output before the fused
 *          bias + dropout + residual, then y's rows; the dropped-out P),
 *          + xq [Nq H] when Tq = 1;
 *          backward 2 Nq H (+ 2 Nq H when Tq = 1: dy's rows, dA1)
 *          + max(Nq I, 2 B nh Tq T + Nq H + 2 N H). */
#include <math.h>

#include "models/modules.h"

enum {
    P_Q_W = 0, P_Q_B, P_K_W, P_K_B, P_V_W, P_V_B,
    P_AO_W, P_AO_B, P_LN1_W, P_LN1_B,
    P_I_W, P_I_B, P_O_W, P_O_B, P_LN2_W, P_LN2_B,
    P_COUNT
};

static const char *const k_param_names[P_COUNT] = {
    "attention.self.query.weight",     "attention.self.query.bias",
    "attention.self.key.weight",       "attention.self.key.bias",
    "attention.self.value.weight",     "attention.self.value.bias",
    "attention.output.dense.weight",   "attention.output.dense.bias",
    "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
    "intermediate.dense.weight",       "intermediate.dense.bias",
    "output.dense.weight",             "output.dense.bias",
    "output.LayerNorm.weight",         "output.LayerNorm.bias",
};

typedef struct enc_impl {
    ds_encoder_desc d;
    int hd; /* head width H / nh */
} enc_impl;

/* Sizes of one call: B rows of T positions, Tq of them queried. */
typedef struct enc_dims {
    int B, T, Tq, H, I, nh, hd;
    size_t N, Nq;  /* B T, B Tq */
    size_t PP;     /* B nh Tq T: attention probabilities */
    bool keep_a, keep_h; /* keep masks saved: attention / hidden dropout > 0 */
} enc_dims;

static enc_dims enc_dims_of(const enc_impl *L, int B, int T) {
    enc_dims z = {.B = B, .T = T, .Tq = L->d.cls_only ? 1 : T, .H = L->d.hidden,
                  .I = L->d.intermediate, .nh = L->d.heads, .hd = L->hd};
    z.N = (size_t)B * T;
    z.Nq = (size_t)B * z.Tq;
    z.PP = (size_t)B * z.nh * z.Tq * T;
    z.keep_a = L->d.attn_dropout > 0.0f;
    z.keep_h = L->d.hidden_dropout > 0.0f;
    return z;
}

typedef struct enc_saved {
    float *q, *k, *v, *p, *c, *a1, *mean1, *rstd1, *h1, *u, *g, *a2, *mean2, *rstd2;
    uint32_t *keep_p, *keep_ao, *keep_o; /* dropout masks of P, C Wo^T + bo, G Wo2^T + bo2 */
} enc_saved;

static size_t enc_saved_layout(const enc_dims *z, void *base, enc_saved *s) {
    size_t H = (size_t)z->H, I = (size_t)z->I;
    ds_carve c = ds_carve_begin(base);
    s->q = ds_carve_f32(&c, z->Nq * H);
    s->k = ds_carve_f32(&c, z->N * H);
    s->v = ds_carve_f32(&c, z->N * H);
    s->p = ds_carve_f32(&c, z->PP);
    s->c = ds_carve_f32(&c, z->Nq * H);
    s->a1 = ds_carve_f32(&c, z->Nq * H);
    s->mean1 = ds_carve_f32(&c, z->Nq);
    s->rstd1 = ds_carve_f32(&c, z->Nq);
    s->h1 = ds_carve_f32(&c, z->Nq * H);
    s->u = ds_carve_f32(&c, z->Nq * I);
    s->g = ds_carve_f32(&c, z->Nq * I);
    s->a2 = ds_carve_f32(&c, z->Nq * H);
    s->mean2 = ds_carve_f32(&c, z->Nq);
    s->rstd2 = ds_carve_f32(&c, z->Nq);
    size_t kp = ds_dropout_mask_bytes((int64_t)z->B * z->nh * z->Tq, z->T);
    size_t kh = ds_dropout_mask_bytes((int64_t)z->Nq, z->H);
    s->keep_p = z->keep_a ? ds_carve_bytes(&c, kp) : NULL;
    s->keep_ao = z->keep_h ? ds_carve_bytes(&c, kh) : NULL;
    s->keep_o = z->keep_h ? ds_carve_bytes(&c, kh) : NULL;
    return c.off;
}

/* Forward scratch: `t` (a GEMM output of [Nq, H], later y's rows before they
 * are scattered) and `pd` (dropout(P)) are never live together, so they share
 * one region; `xq` (Tq = 1: the rows of x at position 0) lives throughout. */
typedef struct enc_fwd_scratch {
    float *t, *pd, *xq;
} enc_fwd_scratch;

static size_t enc_fwd_layout(const enc_dims *z, void *base, enc_fwd_scratch *s) {
    size_t NqH = z->Nq * (size_t)z->H;
    ds_carve c = ds_carve_begin(base);
    float *r = ds_carve_f32(&c, NqH > z->PP ? NqH : z->PP);
    s->t = r;
    s->pd = r;
    s->xq = z->Tq < z->T ? ds_carve_f32(&c, NqH) : NULL;
    return c.off;
}

/* Backward scratch: d1, d2 [Nq, H] through the whole call (and, when Tq = 1,
 * dyq: dy's rows at position 0, and da1 = dA1, which the full layer keeps in
 * dx); then either dg [Nq, I] (the FFN) or dp, pd [B nh Tq T] + dq [Nq, H] +
 * dk, dv [N, H] (the attention), which are never live together. */
typedef struct enc_bwd_scratch {
    float *d1, *d2, *dyq, *da1, *dg, *dp, *pd, *dq, *dk, *dv;
} enc_bwd_scratch;

static size_t enc_bwd_layout(const enc_dims *z, void *base, enc_bwd_scratch *s) {
    size_t NqH = z->Nq * (size_t)z->H, NH = z->N * (size_t)z->H;
    bool part = z->Tq < z->T;
    ds_carve c = ds_carve_begin(base);
    s->d1 = ds_carve_f32(&c, NqH);
    s->d2 = ds_carve_f32(&c, NqH);
    s->dyq = part ? ds_carve_f32(&c, NqH) : NULL;
    s->da1 = part ? ds_carve_f32(&c, NqH) : NULL;
    size_t shared_at = c.off;
    s->dg = ds_carve_f32(&c, z->Nq * (size_t)z->I);
    size_t after_ffn = c.off;
    c.off = shared_at;
    s->dp = ds_carve_f32(&c, z->PP);
    s->pd = ds_carve_f32(&c, z->PP);
    s->dq = ds_carve_f32(&c, NqH);
    s->dk = ds_carve_f32(&c, NH);
    s->dv = ds_carve_f32(&c, NH);
    if (after_ffn > c.off) c.off = after_ffn;
    return c.off;
}

static size_t enc_out_elems(const ds_module *m, int B, int T) {
    return (size_t)B * T * ((const enc_impl *)m->impl)->d.hidden;
}

static size_t enc_saved_bytes(const ds_module *m, int B, int T) {
    enc_dims z = enc_dims_of(m->impl, B, T);
    enc_saved s;
    return enc_saved_layout(&z, NULL, &s);
}

static size_t enc_scratch_bytes(const ds_module *m, int B, int T) {
    enc_dims z = enc_dims_of(m->impl, B, T);
    enc_fwd_scratch f;
    enc_bwd_scratch b;
    size_t fb = enc_fwd_layout(&z, NULL, &f);
    size_t bb = enc_bwd_layout(&z, NULL, &b);
    return fb > bb ? fb : bb;
}

/* The dropout probabilities of this call (0 outside training). */
static void enc_drops(const enc_impl *L, const ds_module_ctx *ctx, float *pa, float *ph) {
    *pa = ctx->training ? L->d.attn_dropout : 0.0f;
    *ph = ctx->training ? L->d.hidden_dropout : 0.0f;
}

static ds_status enc_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const enc_impl *L = m->impl;
    ds_backend *be = ctx->be;
    const ds_batch *bt = ctx->batch;
    const enc_dims z = enc_dims_of(L, bt->B, bt->T);
    const int B = z.B, T = z.T, Tq = z.Tq, H = z.H, I = z.I, nh = z.nh, hd = z.hd;
    const int N = (int)z.N, Nq = (int)z.Nq;
    const bool part = Tq < T;
    int64_t TT = (int64_t)Tq * T;
    float pa, ph;
    enc_drops(L, ctx, &pa, &ph);
    float *const *P = ctx->params;
    enc_saved s;
    enc_saved_layout(&z, ctx->saved, &s);
    enc_fwd_scratch w;
    enc_fwd_layout(&z, ctx->scratch, &w);
    const float *x = ctx->x;
    const float *xq = x;
    if (part) { /* position 0 of every row, contiguous for the residual */
        DS_TRY(be->nn->copy_rows(be, w.xq, H, x, T * H, B, H, false));
        xq = w.xq;
    }

    DS_TRY(ds_linear_bias_fwd(be, s.q, xq, H, P[P_Q_W], P[P_Q_B], Nq, H, H));
    DS_TRY(ds_linear_bias_fwd(be, s.k, x, H, P[P_K_W], P[P_K_B], N, H, H));
    DS_TRY(ds_linear_bias_fwd(be, s.v, x, H, P[P_V_W], P[P_V_B], N, H, H));

    float scale = 1.0f / sqrtf((float)hd);
    const float *mask = ds_batch_f32(bt, "attention_mask");
    const int rows = ds_attn_chunk_rows(be, B, nh, Tq, T);
    const int64_t sqH = (int64_t)Tq * H, sH = (int64_t)T * H;
    for (int b0 = 0; b0 < B; b0 += rows) { /* samples b0 .. b0 + nb - 1 (modules.h) */
        const int nb = B - b0 < rows ? B - b0 : rows;
        const size_t o = (size_t)b0 * nh * TT; /* its first sample's probabilities */
        const float *q = s.q + b0 * sqH, *k = s.k + b0 * sH, *v = s.v + b0 * sH;
        float *p = s.p + o, *c = s.c + b0 * sqH;
        /* scores: for head h, sample b: S[b, h] = Q[b, :, h] K[b, :, h]^T */
        for (int h = 0; h < nh; h++)
            DS_TRY(be->ops->gemm(be, false, true, Tq, T, hd, 1.0f, q + h * hd, H, sqH,
                                 k + h * hd, H, sH, 0.0f, p + h * TT, T, nh * TT, nb));
        float *pd = pa > 0.0f ? w.pd + o : NULL;
        DS_TRY(be->nn->attn_softmax_fwd(be, p, pd, p, mask ? mask + (size_t)b0 * T : NULL,
                                        false, nb, nh, Tq, T, scale, pa, ctx->seed, o,
                                        ds_attn_keep_rows(s.keep_p, nh, Tq, T, b0)));
        const float *pv = pd ? pd : p;
        /* context: C[b, :, h] = P[b, h] V[b, :, h] */
        for (int h = 0; h < nh; h++)
            DS_TRY(be->ops->gemm(be, false, false, Tq, hd, T, 1.0f, pv + h * TT, T, nh * TT,
                                 v + h * hd, H, sH, 0.0f, c + h * hd, H, sqH, nb));
    }

    /* attention output: A1 = xq + dropout(C Wo^T + bo); H1 = LN1(A1) */
    DS_TRY(ds_linear_fwd(be, w.t, s.c, H, P[P_AO_W], Nq, H, H, 0.0f));
    DS_TRY(be->nn->dropout_ln_fwd(be, s.a1, s.h1, s.mean1, s.rstd1, w.t, P[P_AO_B], xq,
                                  P[P_LN1_W], P[P_LN1_B], Nq, H, ph, ctx->seed, (uint64_t)z.PP,
                                  s.keep_ao, L->d.ln_eps));

    /* feed-forward: G = gelu(H1 Wi^T + bi); A2 = H1 + dropout(G Wo2^T + bo2) */
    DS_TRY(ds_linear_fwd(be, s.u, s.h1, H, P[P_I_W], Nq, H, I, 0.0f));
    DS_TRY(be->nn->bias_act_fwd(be, s.g, s.u, P[P_I_B], Nq, I, DS_ACT_GELU));
    DS_TRY(ds_linear_fwd(be, w.t, s.g, I, P[P_O_W], Nq, I, H, 0.0f));
    /* y = LN2(A2); with Tq = 1, LN2's rows go to w.t (over the GEMM output,
     * each row read before it is written), then y is zeros and those rows */
    DS_TRY(be->nn->dropout_ln_fwd(be, s.a2, part ? w.t : ctx->y, s.mean2, s.rstd2, w.t,
                                  P[P_O_B], s.h1, P[P_LN2_W], P[P_LN2_B], Nq, H, ph, ctx->seed,
                                  (uint64_t)z.PP + z.Nq * (size_t)H, s.keep_o, L->d.ln_eps));
    if (!part) return DS_OK;
    DS_TRY(be->ops->memset(be, ctx->y, 0, z.N * (size_t)H * sizeof(float), NULL));
    return be->nn->copy_rows(be, ctx->y, T * H, w.t, H, B, H, false);
}

/* Backward of y = x W^T + b given dy: dW, db +=; dx = dy W + beta dx. x has
 * leading dimension ldx (strided rows: position 0 of every row), dx H. */
static ds_status proj_bwd(ds_backend *be, float *dx, float *dW, float *db, const float *dy,
                          const float *x, int ldx, const float *W, int N, int H, float beta) {
    DS_TRY(ds_linear_bwd_w(be, dW, dy, x, ldx, N, H, H));
    DS_TRY(be->nn->bcast_add_bwd(be, db, dy, N, H));
    DS_TRY(ds_linear_bwd_x(be, dx, H, dy, W, N, H, H, beta));
    return DS_OK;
}

static ds_status enc_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    if (!ctx->dy || !ctx->dx)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: backward needs dy and dx", m->name);
    const enc_impl *L = m->impl;
    ds_backend *be = ctx->be;
    const ds_batch *bt = ctx->batch;
    const enc_dims z = enc_dims_of(L, bt->B, bt->T);
    const int B = z.B, T = z.T, Tq = z.Tq, H = z.H, I = z.I, nh = z.nh, hd = z.hd;
    const int N = (int)z.N, Nq = (int)z.Nq;
    const bool part = Tq < T;
    int64_t TT = (int64_t)Tq * T;
    float pa, ph;
    enc_drops(L, ctx, &pa, &ph);
    float *const *P = ctx->params;
    float *const *G = ctx->grads;
    enc_saved s;
    enc_saved_layout(&z, ctx->saved, &s);
    enc_bwd_scratch w;
    enc_bwd_layout(&z, ctx->scratch, &w);
    const float *x = ctx->x;
    float *dx = ctx->dx;
    uint64_t off_ao = (uint64_t)z.PP, off_o = (uint64_t)z.PP + z.Nq * (size_t)H;
    const float *dy = ctx->dy;
    if (part) { /* only position 0 of y was computed; the other rows' dy is ignored */
        DS_TRY(be->nn->copy_rows(be, w.dyq, H, dy, T * H, B, H, false));
        dy = w.dyq;
    }
    /* dA1, the residual path: the full layer builds it in dx, which the
     * attention then adds to; with Tq = 1 it is apart and joins dx last */
    float *da1 = part ? w.da1 : dx;

    /* d1 = dA2 = LN2'(dy) */
    DS_TRY(be->nn->layernorm_bwd(be, w.d1, G[P_LN2_W], G[P_LN2_B], dy, s.a2, s.mean2, s.rstd2,
                                 P[P_LN2_W], Nq, H, false));
    /* d2 = d(G Wo2^T + bo2) through the dropout; dbo2 += */
    DS_TRY(be->nn->dropout_bwd(be, w.d2, G[P_O_B], w.d1, Nq, H, ph, ctx->seed, off_o,
                               s.keep_o));
    DS_TRY(ds_linear_bwd_w(be, G[P_O_W], w.d2, s.g, I, Nq, I, H));
    DS_TRY(ds_linear_bwd_x(be, w.dg, I, w.d2, P[P_O_W], Nq, I, H, 0.0f));
    DS_TRY(be->nn->bias_act_bwd(be, w.dg, G[P_I_B], w.dg, s.u, P[P_I_B], Nq, I, DS_ACT_GELU));
    DS_TRY(ds_linear_bwd_w(be, G[P_I_W], w.dg, s.h1, H, Nq, H, I));
    /* the feed-forward's gradients (and LN2's), two thirds of the layer's
     * parameters, are final: their reduction can overlap the rest */
    DS_TRY(ds_module_grads_final(m, ctx, P_I_W));
    /* d1 = dH1 = dA2 (residual) + dU Wi */
    DS_TRY(ds_linear_bwd_x(be, w.d1, H, w.dg, P[P_I_W], Nq, H, I, 1.0f));

    /* dA1 = LN1'(dH1) */
    DS_TRY(be->nn->layernorm_bwd(be, da1, G[P_LN1_W], G[P_LN1_B], w.d1, s.a1, s.mean1, s.rstd1,
                                 P[P_LN1_W], Nq, H, false));
    DS_TRY(be->nn->dropout_bwd(be, w.d2, G[P_AO_B], da1, Nq, H, ph, ctx->seed, off_ao,
                               s.keep_ao));
    DS_TRY(ds_linear_bwd_w(be, G[P_AO_W], w.d2, s.c, H, Nq, H, H));
    DS_TRY(ds_module_grads_final(m, ctx, P_AO_W)); /* and LN1's */
    float *dc = w.d1; /* dH1 is consumed */
    DS_TRY(ds_linear_bwd_x(be, dc, H, w.d2, P[P_AO_W], Nq, H, H, 0.0f));

    float scale = 1.0f / sqrtf((float)hd);
    int64_t sH = (int64_t)T * H, sqH = (int64_t)Tq * H;
    const int rows = ds_attn_chunk_rows(be, B, nh, Tq, T);
    for (int b0 = 0; b0 < B; b0 += rows) { /* the forward's chunks */
        const int nb = B - b0 < rows ? B - b0 : rows;
        const size_t o = (size_t)b0 * nh * TT, oq = (size_t)b0 * sqH, ok = (size_t)b0 * sH;
        const float *p = s.p + o, *dcb = dc + oq;
        float *dp = w.dp + o;
        /* d(dropout(P)) = dC V^T per head */
        for (int h = 0; h < nh; h++)
            DS_TRY(be->ops->gemm(be, false, true, Tq, T, hd, 1.0f, dcb + h * hd, H, sqH,
                                 s.v + ok + h * hd, H, sH, 0.0f, dp + h * TT, T, nh * TT, nb));
        float *pd = pa > 0.0f ? w.pd + o : NULL;
        /* dS (in place of dp), and dropout(P) regenerated for dV */
        DS_TRY(be->nn->attn_softmax_bwd(be, dp, pd, dp, p, nb, nh, Tq, T, scale, pa,
                                        ctx->seed, o, ds_attn_keep_rows(s.keep_p, nh, Tq, T, b0)));
        const float *pv = pd ? pd : p;
        for (int h = 0; h < nh; h++) {
            /* dV = dropout(P)^T dC */
            DS_TRY(be->ops->gemm(be, true, false, T, hd, Tq, 1.0f, pv + h * TT, T, nh * TT,
                                 dcb + h * hd, H, sqH, 0.0f, w.dv + ok + h * hd, H, sH, nb));
            /* dQ = dS K;  dK = dS^T Q */
            DS_TRY(be->ops->gemm(be, false, false, Tq, hd, T, 1.0f, dp + h * TT, T, nh * TT,
                                 s.k + ok + h * hd, H, sH, 0.0f, w.dq + oq + h * hd, H, sqH,
                                 nb));
            DS_TRY(be->ops->gemm(be, true, false, T, hd, Tq, 1.0f, dp + h * TT, T, nh * TT,
                                 s.q + oq + h * hd, H, sqH, 0.0f, w.dk + ok + h * hd, H, sH,
                                 nb));
        }
    }
    if (!part) {
        DS_TRY(proj_bwd(be, dx, G[P_Q_W], G[P_Q_B], w.dq, x, H, P[P_Q_W], N, H, 1.0f));
        DS_TRY(proj_bwd(be, dx, G[P_K_W], G[P_K_B], w.dk, x, H, P[P_K_W], N, H, 1.0f));
        DS_TRY(proj_bwd(be, dx, G[P_V_W], G[P_V_B], w.dv, x, H, P[P_V_W], N, H, 1.0f));
        return DS_OK;
    }
    /* Tq = 1: every position gets dK Wk + dV Wv; position 0 also dA1 + dQ Wq
     * (its queries read x's rows at position 0, leading dimension T H) */
    DS_TRY(proj_bwd(be, dx, G[P_K_W], G[P_K_B], w.dk, x, H, P[P_K_W], N, H, 0.0f));
    DS_TRY(proj_bwd(be, dx, G[P_V_W], G[P_V_B], w.dv, x, H, P[P_V_W], N, H, 1.0f));
    DS_TRY(proj_bwd(be, da1, G[P_Q_W], G[P_Q_B], w.dq, x, T * H, P[P_Q_W], Nq, H, 1.0f));
    return be->nn->copy_rows(be, dx, T * H, da1, H, B, H, true);
}

/* The projections (Q over the Nq queried rows, K and V over all N), the
 * attention products at the largest chunk (the whole batch) and the output
 * and feed-forward layers over Nq rows, as enc_forward / enc_backward make
 * them. */
static void enc_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    const enc_dims z = enc_dims_of(m->impl, B, T);
    ds_linear_plan_gemms(plan, (int)z.Nq, z.H, z.H);
    ds_linear_plan_gemms(plan, (int)z.N, z.H, z.H);
    ds_attn_plan_gemms(plan, z.B, z.Tq, z.T, z.hd);
    ds_linear_plan_gemms(plan, (int)z.Nq, z.H, z.I);
    ds_linear_plan_gemms(plan, (int)z.Nq, z.I, z.H);
}

static const ds_module_ops k_encoder_ops = {
    .type = "encoder_layer",
    .out_elems = enc_out_elems,
    .saved_bytes = enc_saved_bytes,
    .scratch_bytes = enc_scratch_bytes,
    .forward = enc_forward,
    .backward = enc_backward,
    .destroy = ds_module_free,
    .plan_gemms = enc_plan_gemms,
};

ds_status ds_mod_encoder_layer_create(const char *name, const ds_encoder_desc *d,
                                      ds_module **out_m) {
    *out_m = NULL;
    if (d->hidden <= 0 || d->heads <= 0 || d->intermediate <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "encoder layer %s: hidden=%d heads=%d intermediate=%d must be > 0", name,
                      d->hidden, d->heads, d->intermediate);
    if (d->hidden % d->heads != 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "encoder layer %s: hidden size %d is not a multiple of the %d heads", name,
                      d->hidden, d->heads);
    if (!(d->hidden_dropout >= 0.0f && d->hidden_dropout < 1.0f) ||
        !(d->attn_dropout >= 0.0f && d->attn_dropout < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "encoder layer %s: dropouts (hidden %g, attention %g) must be in [0, 1)",
                      name, (double)d->hidden_dropout, (double)d->attn_dropout);
    ds_module *m;
    DS_TRY(ds_module_create(&k_encoder_ops, name, P_COUNT, sizeof(enc_impl), &m));
    m->checkpointable = true;
    enc_impl *L = m->impl;
    L->d = *d;
    L->hd = d->hidden / d->heads;
    int H = d->hidden, I = d->intermediate;
    ds_status st = DS_OK;
    for (int i = 0; i < P_COUNT && st == DS_OK; i++) {
        int64_t d0 = H, d1 = 0; /* biases and LayerNorm vectors: [H] */
        ds_init_kind init = DS_INIT_ZEROS;
        float a = 0.0f, b = 0.0f;
        bool weight = (i % 2) == 0;
        if (i == P_LN1_W || i == P_LN2_W) {
            init = DS_INIT_ONES;
        } else if (i == P_LN1_B || i == P_LN2_B) {
            init = DS_INIT_ZEROS;
        } else if (weight) {
            init = DS_INIT_NORMAL;
            b = d->init_std;
            d1 = H;
            if (i == P_I_W) d0 = I;      /* intermediate.dense [I, H] */
            if (i == P_O_W) d1 = I;      /* output.dense [H, I] */
        } else if (i == P_I_B) {
            d0 = I;
        }
        st = ds_module_param(m, i, NULL, k_param_names[i], d0, d1, init, a, b);
    }
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
