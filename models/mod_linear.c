/* "linear": y = act(x W^T + b) over the rows of a [B, in] input (the MLP's
 * hidden layers, the classifier head).
 *
 * saved:   the pre-activation x W^T [B, out] (without the bias; backward adds
 *          it again) when act != NONE; nothing otherwise
 * scratch: d(pre-activation) [B, out] when act != NONE */
#include <math.h>
#include <stdio.h>

#include "models/modules.h"

typedef struct linear_impl {
    int in, out;
    ds_act act;
} linear_impl;

static size_t lin_out_elems(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * ((const linear_impl *)m->impl)->out;
}

static size_t lin_saved_bytes(const ds_module *m, int B, int T) {
    (void)T;
    const linear_impl *L = m->impl;
    ds_carve c = ds_carve_begin(NULL);
    if (L->act != DS_ACT_NONE) ds_carve_f32(&c, (size_t)B * L->out);
    return c.off;
}

static size_t lin_scratch_bytes(const ds_module *m, int B, int T) {
    return lin_saved_bytes(m, B, T);
}

static ds_status lin_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const linear_impl *L = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    const float *W = ctx->params[0], *b = ctx->params[1];
    if (L->act == DS_ACT_NONE) {
        return ds_linear_bias_fwd(be, ctx->y, ctx->x, L->in, W, b, B, L->in, L->out);
    }
    ds_carve c = ds_carve_begin(ctx->saved);
    float *pre = ds_carve_f32(&c, (size_t)B * L->out);
    DS_TRY(ds_linear_fwd(be, pre, ctx->x, L->in, W, B, L->in, L->out, 0.0f));
    DS_TRY(be->nn->bias_act_fwd(be, ctx->y, pre, b, B, L->out, L->act));
    return DS_OK;
}

static ds_status lin_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const linear_impl *L = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    const float *W = ctx->params[0], *b = ctx->params[1];
    float *dW = ctx->grads[0], *db = ctx->grads[1];
    if (!ctx->dy) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output gradient", m->name);
    const float *dpre = ctx->dy;
    if (L->act == DS_ACT_NONE) {
        DS_TRY(be->nn->bcast_add_bwd(be, db, ctx->dy, B, L->out));
    } else {
        ds_carve sv = ds_carve_begin(ctx->saved), sc = ds_carve_begin(ctx->scratch);
        const float *pre = ds_carve_f32(&sv, (size_t)B * L->out);
        float *d = ds_carve_f32(&sc, (size_t)B * L->out);
        DS_TRY(be->nn->bias_act_bwd(be, d, db, ctx->dy, pre, b, B, L->out, L->act));
        dpre = d;
    }
    DS_TRY(ds_linear_bwd_w(be, dW, dpre, ctx->x, L->in, B, L->in, L->out));
    if (ctx->dx) DS_TRY(ds_linear_bwd_x(be, ctx->dx, L->in, dpre, W, B, L->in, L->out, 0.0f));
    return DS_OK;
}

static void lin_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    (void)T;
    const linear_impl *L = m->impl;
    ds_linear_plan_gemms(plan, B, L->in, L->out);
}

static const ds_module_ops k_linear_ops = {
    .type = "linear",
    .out_elems = lin_out_elems,
    .saved_bytes = lin_saved_bytes,
    .scratch_bytes = lin_scratch_bytes,
    .forward = lin_forward,
    .backward = lin_backward,
    .destroy = ds_module_free,
    .plan_gemms = lin_plan_gemms,
};

ds_status ds_mod_linear_create(const char *name, const char *param_prefix, int in, int out,
                               ds_act act, ds_linear_init init, float std, ds_module **out_m) {
    *out_m = NULL;
    if (in <= 0 || out <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "linear %s: sizes in=%d out=%d must be > 0", name, in,
                      out);
    if ((int)act < DS_ACT_NONE || act >= DS_ACT_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "linear %s: unknown activation %d", name, (int)act);
    ds_module *m;
    DS_TRY(ds_module_create(&k_linear_ops, name, 2, sizeof(linear_impl), &m));
    linear_impl *L = m->impl;
    L->in = in;
    L->out = out;
    L->act = act;
    /* Parameter names use param_prefix, which may differ from the module
     * name. */
    ds_status st;
    if (init == DS_LINEAR_INIT_TORCH) {
        float bound = 1.0f / sqrtf((float)in);
        st = ds_module_param(m, 0, param_prefix, "weight", out, in, DS_INIT_UNIFORM, -bound,
                             bound);
        if (st == DS_OK)
            st = ds_module_param(m, 1, param_prefix, "bias", out, 0, DS_INIT_UNIFORM, -bound,
                                 bound);
    } else {
        st = ds_module_param(m, 0, param_prefix, "weight", out, in, DS_INIT_NORMAL, 0.0f, std);
        if (st == DS_OK)
            st = ds_module_param(m, 1, param_prefix, "bias", out, 0, DS_INIT_ZEROS, 0.0f, 0.0f);
    }
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
