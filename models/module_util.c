/* Helpers shared by the modules of models/: allocation, parameter naming,
 * context checks and the three GEMMs of a linear layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/modules.h"

ds_status ds_module_alloc(const ds_module_ops *ops, const char *name, int n_params,
                          size_t impl_bytes, ds_module **out) {
    *out = NULL;
    if (strlen(name) >= DS_MAX_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "module name \"%s\" is longer than %d characters", name,
                      DS_MAX_NAME - 1);
    ds_module *m = calloc(1, sizeof *m);
    if (!m) return DS_ERR(DS_ERR_OOM, "module %s: out of host memory", name);
    m->ops = ops;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->n_params = n_params;
    if (n_params > 0) m->params = calloc((size_t)n_params, sizeof *m->params);
    if (impl_bytes > 0) m->impl = calloc(1, impl_bytes);
    if ((n_params > 0 && !m->params) || (impl_bytes > 0 && !m->impl)) {
        ds_module_free_basic(m);
        return DS_ERR(DS_ERR_OOM, "module %s: out of host memory", name);
    }
    *out = m;
    return DS_OK;
}

void ds_module_free_basic(ds_module *m) {
    if (!m) return;
    free(m->params);
    free(m->impl);
    free(m);
}

ds_status ds_module_param(ds_module *m, int i, const char *prefix, const char *suffix, int64_t d0,
                          int64_t d1, ds_init_kind init, float a, float b) {
    DS_ASSERT(i >= 0 && i < m->n_params);
    ds_param_desc *p = &m->params[i];
    if (!prefix) prefix = m->name;
    int len = snprintf(p->name, sizeof p->name, "%s.%s", prefix, suffix);
    if (len < 0 || len >= (int)sizeof p->name)
        return DS_ERR(DS_ERR_INVALID_ARG, "parameter name \"%s.%s\" is longer than %d characters",
                      prefix, suffix, DS_MAX_NAME - 1);
    if (d0 <= 0) return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s: size %lld", p->name, (long long)d0);
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1 > 0 ? d1 : 0;
    p->init = init;
    p->init_a = a;
    p->init_b = b;
    return DS_OK;
}

ds_status ds_module_check_ctx(const ds_module *m, const ds_module_ctx *ctx, bool need_x,
                              bool backward) {
    if (!ctx || !ctx->be || !ctx->be->nn)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no context or backend", m->name);
    const ds_batch *b = ctx->batch;
    if (!b || b->B <= 0 || b->T <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: batch missing or empty (B=%d, T=%d)",
                      m->name, b ? b->B : 0, b ? b->T : 0);
    if (need_x && !ctx->x)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no input activation", m->name);
    if (m->n_params > 0 && !ctx->params)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no parameter pointers", m->name);
    if (!backward && !ctx->y)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output buffer", m->name);
    if (backward && m->n_params > 0 && !ctx->grads)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no gradient slots", m->name);
    return DS_OK;
}

ds_status ds_linear_fwd(ds_backend *be, float *y, const float *x, int ldx, const float *W, int N,
                        int in, int out, float beta) {
    return be->ops->gemm(be, false, true, N, out, in, 1.0f, x, ldx, 0, W, in, 0, beta, y, out, 0,
                         1);
}

ds_status ds_linear_bwd_w(ds_backend *be, float *dW, const float *dy, const float *x, int ldx,
                          int N, int in, int out) {
    return be->ops->gemm(be, true, false, out, in, N, 1.0f, dy, out, 0, x, ldx, 0, 1.0f, dW, in, 0,
                         1);
}

ds_status ds_linear_bwd_x(ds_backend *be, float *dx, int lddx, const float *dy, const float *W,
                          int N, int in, int out, float beta) {
    return be->ops->gemm(be, false, false, N, in, out, 1.0f, dy, out, 0, W, in, 0, beta, dx, lddx,
                         0, 1);
}
