/* The modules of the conv regressor (conv_model.h) and the model built from
 * them. Everything runs through the backend's tables (ctx->be->ops: GEMM,
 * copies, fill, scale, axpy, sumsq; ctx->be->nn: bias + activation, mean
 * pooling), so the same code trains on the cpu and the cuda backend: a module
 * never loops over device memory itself.
 *
 * The rules of engine/core/module.h, as they show up here:
 *   1. sizes from (B, T) and the descriptor only; saved and scratch areas are
 *      laid out by one ds_carve function per module, used by the size
 *      callbacks, forward and backward alike;
 *   2. parameter gradients accumulate (beta = 1 GEMMs, bias_act_bwd's +=),
 *      the input gradient is written in full (memset, or beta = 0);
 *   3, 4. forward writes y and `saved` only, from (params, x, batch);
 *   5. the loss writes y[0] = mean loss, y[1] = rows, and starts backward
 *      from ctx->loss_scale;
 *   6. the third conv uses the second's weight through ds_module_tie;
 *   7. errors are ds_status values with DS_ERR messages naming the module. */
#include "conv_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <engine/backend/backend.h>
#include <engine/backend/nn.h>

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

/* ====================================================================== conv1d
 *
 * Weight layout. PyTorch's Conv1d stores [C_out, C_in, k]; here tap j's
 * matrix W_j [C_out, C_in] must be a plain row-major block for the GEMM, so
 * the weight is [k, C_out, C_in], declared as the 2-D [k * C_out, C_in]
 * (ds_module_param and ds_module_tie take at most two dimensions).
 *
 * One GEMM per tap. With s = j - pad, output row t reads input row t + s;
 * only the rows t in [t0, t1) with 0 <= t + s < L exist (the others would
 * read the zero padding, which contributes nothing). For a batch b those rows
 * are contiguous in both x and y, so a strided-batched GEMM over b does the
 * whole tap:
 *
 *   pre_b[t0:t1, :] (+)= x_b[t0+s : t1+s, :] W_j^T
 *     A = x + (t0 + s) C_in, lda = C_in, strideA = L C_in
 *     C = pre + t0 C_out,    ldc = C_out, strideC = L_out C_out
 *
 * The centre tap (s = 0) covers every output row in both paddings, so it goes
 * first with beta = 0 and writes all of `pre`; the other taps add (beta = 1).
 *
 * Backward, with dpre = dy * relu'(pre + bias):
 *   dx_b[t0+s : t1+s, :] += dpre_b[t0:t1, :] W_j          (dx zeroed first)
 *   dW_j += sum_b dpre_b[t0:t1, :]^T x_b[t0+s : t1+s, :]
 * The sum over b cannot be one batched GEMM writing one C: batches of C must
 * not overlap (the cpu backend runs them on parallel threads, cuBLAS makes no
 * promise either). So each (b, j) product goes to its own block of `parts`
 * [B, k, C_out, C_in], and the column sums of parts viewed as
 * [B, k C_out C_in] (nn's bcast_add_bwd, a bias gradient's kernel) add them
 * into dW.
 *
 * saved:   pre, x W^T without the bias, [B, L_out, C_out]
 * scratch: dpre [B, L_out, C_out], parts [B, k, C_out, C_in] */

typedef struct conv_impl {
    int L, L_out, c_in, c_out, k, pad;
    char input[DS_MAX_INPUT_NAME]; /* "" : read ctx->x */
    bool tied;                     /* the weight is ctx->tied[0] */
} conv_impl;

typedef struct conv_scratch {
    float *dpre, *parts;
} conv_scratch;

static size_t conv_saved_layout(const conv_impl *c, int B, void *base, float **pre) {
    ds_carve cv = ds_carve_begin(base);
    *pre = ds_carve_f32(&cv, (size_t)B * c->L_out * c->c_out);
    return cv.off;
}

static size_t conv_scratch_layout(const conv_impl *c, int B, void *base, conv_scratch *s) {
    ds_carve cv = ds_carve_begin(base);
    s->dpre = ds_carve_f32(&cv, (size_t)B * c->L_out * c->c_out);
    s->parts = ds_carve_f32(&cv, (size_t)B * c->k * c->c_out * c->c_in);
    return cv.off;
}

static size_t conv_out_elems(const ds_module *m, int B, int T) {
    (void)T; /* no DS_DIM_SEQ input: T is 1 */
    const conv_impl *c = m->impl;
    return (size_t)B * c->L_out * c->c_out;
}

static size_t conv_saved_bytes(const ds_module *m, int B, int T) {
    (void)T;
    float *pre;
    return conv_saved_layout(m->impl, B, NULL, &pre);
}

static size_t conv_scratch_bytes(const ds_module *m, int B, int T) {
    (void)T;
    conv_scratch s;
    return conv_scratch_layout(m->impl, B, NULL, &s);
}

/* The output rows [t0, t1) that tap j produces from real input rows. */
static void conv_tap_rows(const conv_impl *c, int j, int *t0, int *t1) {
    int s = j - c->pad;
    *t0 = imax(0, -s);
    *t1 = imin(c->L_out, c->L - s);
}

/* The input: the batch tensor for the first module, else the previous output. */
static ds_status conv_input(ds_module *m, const ds_module_ctx *ctx, const float **x) {
    const conv_impl *c = m->impl;
    if (c->input[0]) return ds_module_input_f32(m, ctx, c->input, x);
    if (!ctx->x) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no input activation", m->name);
    *x = ctx->x;
    return DS_OK;
}

static ds_status conv_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, false));
    const conv_impl *c = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    const float *x;
    DS_TRY(conv_input(m, ctx, &x));
    const float *W = c->tied ? ctx->tied[0] : ctx->params[0];
    const float *bias = ctx->params[c->tied ? 0 : 1];
    float *pre;
    conv_saved_layout(c, B, ctx->saved, &pre);
    for (int n = 0; n < c->k; n++) {
        int j = (c->pad + n) % c->k; /* the centre tap (j = pad) first */
        int s = j - c->pad, t0, t1;
        conv_tap_rows(c, j, &t0, &t1);
        DS_TRY(be->ops->gemm(be, false, true, t1 - t0, c->c_out, c->c_in, 1.0f,
                             x + (size_t)(t0 + s) * c->c_in, c->c_in, (int64_t)c->L * c->c_in,
                             W + (size_t)j * c->c_out * c->c_in, c->c_in, 0, n == 0 ? 0.0f : 1.0f,
                             pre + (size_t)t0 * c->c_out, c->c_out, (int64_t)c->L_out * c->c_out,
                             B));
    }
    DS_TRY(be->nn->bias_act_fwd(be, ctx->y, pre, bias, B * c->L_out, c->c_out, DS_ACT_RELU));
    return DS_OK;
}

static ds_status conv_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, true));
    const conv_impl *c = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    if (!ctx->dy) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output gradient", m->name);
    const float *x;
    DS_TRY(conv_input(m, ctx, &x));
    const float *W = c->tied ? ctx->tied[0] : ctx->params[0];
    const float *bias = ctx->params[c->tied ? 0 : 1];
    float *dW = c->tied ? ctx->tied_grads[0] : ctx->grads[0];
    float *dbias = ctx->grads[c->tied ? 0 : 1];
    float *pre;
    conv_saved_layout(c, B, ctx->saved, &pre);
    conv_scratch s;
    conv_scratch_layout(c, B, ctx->scratch, &s);

    /* dpre = dy * relu'(pre + bias) (written); dbias += its column sums */
    DS_TRY(be->nn->bias_act_bwd(be, s.dpre, dbias, ctx->dy, pre, bias, B * c->L_out, c->c_out,
                                DS_ACT_RELU));
    /* parts[b, j] = dpre_b[t0:t1]^T x_b[t0+s : t1+s]: every block written once (beta 0) */
    const int64_t wsize = (int64_t)c->k * c->c_out * c->c_in;
    for (int j = 0; j < c->k; j++) {
        int sh = j - c->pad, t0, t1;
        conv_tap_rows(c, j, &t0, &t1);
        DS_TRY(be->ops->gemm(be, true, false, c->c_out, c->c_in, t1 - t0, 1.0f,
                             s.dpre + (size_t)t0 * c->c_out, c->c_out,
                             (int64_t)c->L_out * c->c_out, x + (size_t)(t0 + sh) * c->c_in,
                             c->c_in, (int64_t)c->L * c->c_in, 0.0f,
                             s.parts + (size_t)j * c->c_out * c->c_in, c->c_in, wsize, B));
    }
    /* dW += sum over b of parts[b]: the batch's sum, accumulated (rule 2) */
    DS_TRY(be->nn->bcast_add_bwd(be, dW, s.parts, B, (int)wsize));
    if (!ctx->dx) return DS_OK; /* the first module: nothing before it */
    /* dx: zeroed, then every tap adds its shifted rows (written in full, rule 2) */
    DS_TRY(be->ops->memset(be, ctx->dx, 0, sizeof(float) * (size_t)B * c->L * c->c_in, NULL));
    for (int j = 0; j < c->k; j++) {
        int sh = j - c->pad, t0, t1;
        conv_tap_rows(c, j, &t0, &t1);
        DS_TRY(be->ops->gemm(be, false, false, t1 - t0, c->c_in, c->c_out, 1.0f,
                             s.dpre + (size_t)t0 * c->c_out, c->c_out,
                             (int64_t)c->L_out * c->c_out, W + (size_t)j * c->c_out * c->c_in,
                             c->c_in, 0, 1.0f, ctx->dx + (size_t)(t0 + sh) * c->c_in, c->c_in,
                             (int64_t)c->L * c->c_in, B));
    }
    return DS_OK;
}

/* The GEMMs above, declared so that the engine can size the workspace of
 * bf16 GEMM inputs before the first step (engine/core/module.h,
 * plan_gemms; optional, but without it the first bf16 step grows the
 * workspace). Per tap the same three products; the centre tap has the most
 * rows, so it stands for all of them. */
static void conv_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    (void)T;
    const conv_impl *c = m->impl;
    int t0, t1;
    conv_tap_rows(c, c->pad, &t0, &t1);
    const int rows = t1 - t0;
    const int64_t sx = (int64_t)c->L * c->c_in, sy = (int64_t)c->L_out * c->c_out;
    ds_gemm_plan_add(plan, false, true, rows, c->c_out, c->c_in, sx, 0, B);   /* forward */
    ds_gemm_plan_add(plan, true, false, c->c_out, c->c_in, rows, sy, sx, B);  /* parts */
    ds_gemm_plan_add(plan, false, false, rows, c->c_in, c->c_out, sy, 0, B);  /* dx */
}

static const ds_module_ops k_conv_ops = {
    .type = "cr_conv1d",
    .out_elems = conv_out_elems,
    .saved_bytes = conv_saved_bytes,
    .scratch_bytes = conv_scratch_bytes,
    .forward = conv_forward,
    .backward = conv_backward,
    .destroy = ds_module_free, /* impl owns nothing else */
    .plan_gemms = conv_plan_gemms,
};

ds_status cr_conv1d_create(const char *name, const cr_conv1d_desc *d, ds_module **out) {
    *out = NULL;
    if (!name || !d) return DS_ERR(DS_ERR_INVALID_ARG, "cr_conv1d_create: name or desc is NULL");
    if (d->seq_len < 1 || d->in_channels < 1 || d->out_channels < 1 || d->kernel < 1)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "conv %s: seq_len=%d in_channels=%d out_channels=%d kernel=%d must be >= 1",
                      name, d->seq_len, d->in_channels, d->out_channels, d->kernel);
    if (d->kernel > d->seq_len)
        return DS_ERR(DS_ERR_INVALID_ARG, "conv %s: kernel %d is longer than the sequence (%d)",
                      name, d->kernel, d->seq_len);
    if (d->padding != CR_PAD_VALID && d->padding != CR_PAD_SAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "conv %s: unknown padding %d", name, (int)d->padding);
    if (d->padding == CR_PAD_SAME && d->kernel % 2 == 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "conv %s: 'same' padding needs an odd kernel, got %d",
                      name, d->kernel);
    if (d->input && strlen(d->input) >= DS_MAX_INPUT_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "conv %s: input name \"%s\" is longer than %d", name,
                      d->input, DS_MAX_INPUT_NAME - 1);
    ds_module *m;
    DS_TRY(ds_module_create(&k_conv_ops, name, d->tie_weight ? 1 : 2, sizeof(conv_impl), &m));
    /* Activation checkpointing may drop `pre` after forward and recompute it
     * before backward: forward is pure (rule 4). The other modules keep
     * nothing, so recomputing them would save no memory. */
    m->checkpointable = true;
    conv_impl *c = m->impl;
    c->L = d->seq_len;
    c->c_in = d->in_channels;
    c->c_out = d->out_channels;
    c->k = d->kernel;
    c->pad = d->padding == CR_PAD_SAME ? (d->kernel - 1) / 2 : 0;
    c->L_out = d->padding == CR_PAD_SAME ? d->seq_len : d->seq_len - d->kernel + 1;
    c->tied = d->tie_weight != NULL;
    if (d->input) snprintf(c->input, sizeof c->input, "%s", d->input);
    /* PyTorch's Conv1d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = k C_in */
    float bound = 1.0f / sqrtf((float)(d->kernel * d->in_channels));
    ds_status st;
    char alias[DS_MAX_NAME];
    if (c->tied) {
        /* the alias "<name>.weight" lets ds_get_param find this use by its own name */
        int len = snprintf(alias, sizeof alias, "%s.weight", name);
        st = len < 0 || len >= (int)sizeof alias
                 ? DS_ERR(DS_ERR_INVALID_ARG, "conv %s: name too long", name)
                 : ds_module_tie(m, alias, d->tie_weight, (int64_t)d->kernel * d->out_channels,
                                 d->in_channels);
        if (st == DS_OK)
            st = ds_module_param(m, 0, NULL, "bias", d->out_channels, 0, DS_INIT_UNIFORM, -bound,
                                 bound);
    } else {
        st = ds_module_param(m, 0, NULL, "weight", (int64_t)d->kernel * d->out_channels,
                             d->in_channels, DS_INIT_UNIFORM, -bound, bound);
        if (st == DS_OK)
            st = ds_module_param(m, 1, NULL, "bias", d->out_channels, 0, DS_INIT_UNIFORM, -bound,
                                 bound);
    }
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = m;
    return DS_OK;
}

/* =================================================================== mean pool
 * saved and scratch: nothing (backward needs only the shape). */

typedef struct pool_impl {
    int L, C;
} pool_impl;

static size_t pool_out_elems(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * ((const pool_impl *)m->impl)->C;
}

static size_t zero_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

static ds_status pool_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const pool_impl *p = m->impl;
    /* mask NULL: every time step counts, out = sum_t x[b, t, :] / L */
    return ctx->be->nn->mean_pool_fwd(ctx->be, ctx->y, ctx->x, NULL, ctx->batch->B, p->L, p->C);
}

static ds_status pool_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const pool_impl *p = m->impl;
    if (!ctx->dy || !ctx->dx)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: needs dy and dx (it cannot come first)",
                      m->name);
    /* dx[b, t, :] = dy[b, :] / L, written */
    return ctx->be->nn->mean_pool_bwd(ctx->be, ctx->dx, ctx->dy, NULL, ctx->batch->B, p->L, p->C);
}

static const ds_module_ops k_pool_ops = {
    .type = "cr_mean_pool",
    .out_elems = pool_out_elems,
    .saved_bytes = zero_bytes,
    .scratch_bytes = zero_bytes,
    .forward = pool_forward,
    .backward = pool_backward,
    .destroy = ds_module_free,
};

ds_status cr_mean_pool_create(const char *name, int seq_len, int channels, ds_module **out) {
    *out = NULL;
    if (seq_len < 1 || channels < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "mean pool %s: seq_len=%d channels=%d must be >= 1",
                      name ? name : "(null)", seq_len, channels);
    ds_module *m;
    DS_TRY(ds_module_create(&k_pool_ops, name, 0, sizeof(pool_impl), &m));
    pool_impl *p = m->impl;
    p->L = seq_len;
    p->C = channels;
    *out = m;
    return DS_OK;
}

/* ======================================================================= dense
 * y = x W^T + b. saved and scratch: nothing (x stays available: it is the
 * previous module's output). */

typedef struct dense_impl {
    int in, out;
} dense_impl;

static size_t dense_out_elems(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * ((const dense_impl *)m->impl)->out;
}

static ds_status dense_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const dense_impl *D = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    /* y = x W^T + b: the bias joins the GEMM's sums (no pass over y after it) */
    DS_TRY(be->ops->gemm_bias(be, false, true, B, D->out, D->in, ctx->x, D->in, ctx->params[0],
                              D->in, ctx->params[1], ctx->y));
    return DS_OK;
}

static ds_status dense_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const dense_impl *D = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    if (!ctx->dy) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output gradient", m->name);
    /* db += column sums of dy; dW += dy^T x; dx = dy W */
    DS_TRY(be->nn->bcast_add_bwd(be, ctx->grads[1], ctx->dy, B, D->out));
    DS_TRY(be->ops->gemm(be, true, false, D->out, D->in, B, 1.0f, ctx->dy, D->out, 0, ctx->x,
                         D->in, 0, 1.0f, ctx->grads[0], D->in, 0, 1));
    if (ctx->dx)
        DS_TRY(be->ops->gemm(be, false, false, B, D->in, D->out, 1.0f, ctx->dy, D->out, 0,
                             ctx->params[0], D->in, 0, 0.0f, ctx->dx, D->in, 0, 1));
    return DS_OK;
}

/* Its three GEMMs (see conv_plan_gemms). */
static void dense_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    (void)T;
    const dense_impl *D = m->impl;
    ds_gemm_plan_add(plan, false, true, B, D->out, D->in, 0, 0, 1);
    ds_gemm_plan_add(plan, true, false, D->out, D->in, B, 0, 0, 1);
    ds_gemm_plan_add(plan, false, false, B, D->in, D->out, 0, 0, 1);
}

static const ds_module_ops k_dense_ops = {
    .type = "cr_dense",
    .out_elems = dense_out_elems,
    .saved_bytes = zero_bytes,
    .scratch_bytes = zero_bytes,
    .forward = dense_forward,
    .backward = dense_backward,
    .destroy = ds_module_free,
    .plan_gemms = dense_plan_gemms,
};

ds_status cr_dense_create(const char *name, int in, int out, ds_module **out_m) {
    *out_m = NULL;
    if (in < 1 || out < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "dense %s: in=%d out=%d must be >= 1",
                      name ? name : "(null)", in, out);
    ds_module *m;
    DS_TRY(ds_module_create(&k_dense_ops, name, 2, sizeof(dense_impl), &m));
    dense_impl *D = m->impl;
    D->in = in;
    D->out = out;
    float bound = 1.0f / sqrtf((float)in); /* PyTorch's Linear default */
    ds_status st = ds_module_param(m, 0, NULL, "weight", out, in, DS_INIT_UNIFORM, -bound, bound);
    if (st == DS_OK)
        st = ds_module_param(m, 1, NULL, "bias", out, 0, DS_INIT_UNIFORM, -bound, bound);
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}

/* ========================================================================= mse
 * Mean squared error with the backend's core slots only.
 *
 *   forward:  diff = x - target            memcpy + axpy
 *             sum diff^2                   sumsq (synchronises; the sum comes to
 *                                          the host in double)
 *             y[0] = sum / B, y[1] = B     fill (device writes, no host buffer
 *                                          whose lifetime a copy would outlive)
 *   backward: dx = 2 loss_scale / B * diff memcpy + scale
 *
 * saved: diff [B]. scratch: nothing. */

typedef struct mse_impl {
    char target[DS_MAX_INPUT_NAME];
} mse_impl;

static size_t mse_out_elems(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 2; /* the loss and its weight (rule 5) */
}

static size_t mse_saved_layout(int B, void *base, float **diff) {
    ds_carve c = ds_carve_begin(base);
    *diff = ds_carve_f32(&c, (size_t)B);
    return c.off;
}

static size_t mse_saved_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)T;
    float *diff;
    return mse_saved_layout(B, NULL, &diff);
}

static ds_status mse_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const mse_impl *E = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    const float *target;
    DS_TRY(ds_module_input_f32(m, ctx, E->target, &target));
    float *diff;
    mse_saved_layout(B, ctx->saved, &diff);
    DS_TRY(be->ops->memcpy(be, diff, ctx->x, sizeof(float) * (size_t)B, DS_COPY_D2D, NULL));
    DS_TRY(be->ops->axpy(be, diff, DS_F32, -1.0f, target, DS_F32, (size_t)B));
    double sum = 0.0;
    int nonfinite = 0;
    DS_TRY(be->ops->sumsq(be, diff, DS_F32, (size_t)B, &sum, &nonfinite));
    /* A NaN or inf prediction gives a NaN or inf loss, reported as it is. */
    DS_TRY(be->ops->fill(be, ctx->y, 1, (float)(sum / B)));
    DS_TRY(be->ops->fill(be, ctx->y + 1, 1, (float)B));
    return DS_OK;
}

static ds_status mse_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    if (!ctx->dx) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no input gradient slot", m->name);
    float *diff;
    mse_saved_layout(B, ctx->saved, &diff);
    /* d(y[0]) = loss_scale, y[0] = sum diff^2 / B, so dx = loss_scale * 2 diff / B;
     * dy is not read (rule 5) */
    DS_TRY(be->ops->memcpy(be, ctx->dx, diff, sizeof(float) * (size_t)B, DS_COPY_D2D, NULL));
    DS_TRY(be->ops->scale(be, ctx->dx, DS_F32, (size_t)B, 2.0f * ctx->loss_scale / (float)B));
    return DS_OK;
}

static const ds_module_ops k_mse_ops = {
    .type = "cr_mse",
    .out_elems = mse_out_elems,
    .saved_bytes = mse_saved_bytes,
    .scratch_bytes = zero_bytes,
    .forward = mse_forward,
    .backward = mse_backward,
    .destroy = ds_module_free,
};

ds_status cr_mse_create(const char *name, const char *target, ds_module **out) {
    *out = NULL;
    if (!target || !target[0] || strlen(target) >= DS_MAX_INPUT_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "mse %s: the target name must have 1..%d characters",
                      name ? name : "(null)", DS_MAX_INPUT_NAME - 1);
    ds_module *m;
    DS_TRY(ds_module_create(&k_mse_ops, name, 0, sizeof(mse_impl), &m));
    snprintf(((mse_impl *)m->impl)->target, DS_MAX_INPUT_NAME, "%s", target);
    *out = m;
    return DS_OK;
}

/* ======================================================================= model */

ds_status cr_model_create(const cr_model_desc *d, ds_model **out) {
    *out = NULL;
    if (!d) return DS_ERR(DS_ERR_INVALID_ARG, "cr_model_create: desc is NULL");
    if (d->kernel2 >= d->seq_len)
        return DS_ERR(DS_ERR_INVALID_ARG, "conv regressor: kernel2 %d leaves no output of the "
                      "valid conv over %d steps", d->kernel2, d->seq_len);
    ds_model *model;
    DS_TRY(ds_model_create("conv_regressor", &model));
    ds_status st;
    const int64_t sig[2] = {d->seq_len, d->in_channels}; /* fixed: no DS_DIM_SEQ */
    DS_TRY_GOTO(st, ds_model_add_input(model, "signal", DS_F32, 2, sig, 0), fail);
    DS_TRY_GOTO(st, ds_model_add_input(model, "target", DS_F32, 0, NULL, DS_INPUT_TARGET), fail);

    ds_module *m;
    cr_conv1d_desc c0 = {.seq_len = d->seq_len, .in_channels = d->in_channels,
                         .out_channels = d->channels, .kernel = d->kernel1,
                         .padding = CR_PAD_SAME, .input = "signal"};
    DS_TRY_GOTO(st, cr_conv1d_create("conv.0", &c0, &m), fail);
    DS_TRY_GOTO(st, ds_model_add_module(model, m), fail); /* the model owns m, even on failure */
    cr_conv1d_desc c1 = {.seq_len = d->seq_len, .in_channels = d->channels,
                         .out_channels = d->channels, .kernel = d->kernel2,
                         .padding = CR_PAD_SAME};
    DS_TRY_GOTO(st, cr_conv1d_create("conv.1", &c1, &m), fail);
    DS_TRY_GOTO(st, ds_model_add_module(model, m), fail);
    /* conv.2 applies conv.1's filters again, without padding, with its own bias */
    cr_conv1d_desc c2 = c1;
    c2.padding = CR_PAD_VALID;
    c2.tie_weight = "conv.1.weight";
    DS_TRY_GOTO(st, cr_conv1d_create("conv.2", &c2, &m), fail);
    DS_TRY_GOTO(st, ds_model_add_module(model, m), fail);
    DS_TRY_GOTO(st, cr_mean_pool_create("pool", d->seq_len - d->kernel2 + 1, d->channels, &m),
                fail);
    DS_TRY_GOTO(st, ds_model_add_module(model, m), fail);
    DS_TRY_GOTO(st, cr_dense_create("head", d->channels, 1, &m), fail);
    DS_TRY_GOTO(st, ds_model_add_module(model, m), fail);
    DS_TRY_GOTO(st, cr_mse_create("loss", "target", &m), fail);
    DS_TRY_GOTO(st, ds_model_add_module(model, m), fail);
    model->hidden_size = d->channels; /* sizes DeepSpeed's "auto" buckets */
    *out = model;
    return DS_OK;
fail:
    ds_model_destroy(model);
    return st;
}
