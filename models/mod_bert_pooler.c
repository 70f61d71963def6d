/* "bert_pooler": BertPooler plus the dropout BertForSequenceClassification
 * applies to its output:
 *   y = dropout(tanh(x[:, 0, :] Wp^T + bp))      [B, H]
 * The [CLS] rows are read in place (row stride T*H), not copied.
 *
 * saved:   the pre-activation x0 Wp^T [B, H] (bias excluded)
 * scratch: backward: d(pre-activation) [B, H] */
#include "models/modules.h"

typedef struct pooler_impl {
    int H;
    float dropout;
} pooler_impl;

static size_t pl_out_elems(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * ((const pooler_impl *)m->impl)->H;
}

static size_t pl_bytes(const ds_module *m, int B, int T) {
    (void)T;
    ds_carve c = ds_carve_begin(NULL);
    ds_carve_f32(&c, (size_t)B * ((const pooler_impl *)m->impl)->H);
    return c.off;
}

static ds_status pl_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const pooler_impl *Pl = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B, T = ctx->batch->T, H = Pl->H;
    ds_carve c = ds_carve_begin(ctx->saved);
    float *pre = ds_carve_f32(&c, (size_t)B * H);
    DS_TRY(ds_linear_fwd(be, pre, ctx->x, T * H, ctx->params[0], B, H, H, 0.0f));
    DS_TRY(be->nn->bias_act_fwd(be, ctx->y, pre, ctx->params[1], B, H, DS_ACT_TANH));
    float p = ctx->training ? Pl->dropout : 0.0f;
    if (p > 0.0f)
        DS_TRY(be->nn->dropout_fwd(be, ctx->y, ctx->y, NULL, NULL, B, H, p, ctx->seed, 0, NULL));
    return DS_OK;
}

static ds_status pl_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    if (!ctx->dy || !ctx->dx)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: backward needs dy and dx", m->name);
    const pooler_impl *Pl = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B, T = ctx->batch->T, H = Pl->H;
    ds_carve sv = ds_carve_begin(ctx->saved), sc = ds_carve_begin(ctx->scratch);
    const float *pre = ds_carve_f32(&sv, (size_t)B * H);
    float *d = ds_carve_f32(&sc, (size_t)B * H);
    float p = ctx->training ? Pl->dropout : 0.0f;
    DS_TRY(be->nn->dropout_bwd(be, d, NULL, ctx->dy, B, H, p, ctx->seed, 0, NULL));
    DS_TRY(be->nn->bias_act_bwd(be, d, ctx->grads[1], d, pre, ctx->params[1], B, H, DS_ACT_TANH));
    DS_TRY(ds_linear_bwd_w(be, ctx->grads[0], d, ctx->x, T * H, B, H, H));
    /* Only the [CLS] rows of dx are non-zero. */
    DS_TRY(be->ops->memset(be, ctx->dx, 0, (size_t)B * T * H * sizeof(float), NULL));
    DS_TRY(ds_linear_bwd_x(be, ctx->dx, T * H, d, ctx->params[0], B, H, H, 0.0f));
    return DS_OK;
}

static void pl_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    (void)T;
    const int H = ((const pooler_impl *)m->impl)->H;
    ds_linear_plan_gemms(plan, B, H, H);
}

static const ds_module_ops k_pooler_ops = {
    .type = "bert_pooler",
    .out_elems = pl_out_elems,
    .saved_bytes = pl_bytes,
    .scratch_bytes = pl_bytes,
    .forward = pl_forward,
    .backward = pl_backward,
    .destroy = ds_module_free,
    .plan_gemms = pl_plan_gemms,
};

ds_status ds_mod_bert_pooler_create(const char *name, int hidden, float dropout, float init_std,
                                    ds_module **out_m) {
    *out_m = NULL;
    if (hidden <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "pooler %s: hidden size %d must be > 0", name, hidden);
    if (!(dropout >= 0.0f && dropout < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "pooler %s: dropout %g must be in [0, 1)", name,
                      (double)dropout);
    ds_module *m;
    DS_TRY(ds_module_create(&k_pooler_ops, name, 2, sizeof(pooler_impl), &m));
    pooler_impl *Pl = m->impl;
    Pl->H = hidden;
    Pl->dropout = dropout;
    ds_status st = ds_module_param(m, 0, NULL, "dense.weight", hidden, hidden, DS_INIT_NORMAL,
                                   0.0f, init_std);
    if (st == DS_OK)
        st = ds_module_param(m, 1, NULL, "dense.bias", hidden, 0, DS_INIT_ZEROS, 0.0f, 0.0f);
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
