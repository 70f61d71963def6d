/* Optimizer dispatch onto the backend's fused element-wise updates. */
#include "zero/optim.h"

#include <stdlib.h>

static ds_status update_run(ds_backend *be, const ds_optim_step *s, float *param,
                            const void *grad, ds_dtype grad_t, float grad_mult, float *state0,
                            float *state1, size_t n, void *param_lp, ds_dtype lp_t);

ds_status ds_optim_update(ds_backend *be, const ds_optim_step *s, float *param, const void *grad,
                          ds_dtype grad_t, float grad_mult, float *state0, float *state1,
                          size_t n, void *param_lp, ds_dtype lp_t) {
    const ds_no_decay *nd = s->no_decay;
    if (n == 0) return DS_OK;
    if (!nd || nd->n == 0)
        return update_run(be, s, param, grad, grad_t, grad_mult, state0, state1, n, param_lp,
                          lp_t);
    ds_optim_step off = *s;
    off.adam.weight_decay = 0.0f;
    off.sgd.weight_decay = 0.0f;
    size_t gsz = ds_dtype_size(grad_t), lsz = param_lp ? ds_dtype_size(lp_t) : 0;
    int64_t lo = s->flat_lo, hi = lo + (int64_t)n, at = lo;
    /* the first skipped range that ends after lo */
    int a = 0, b = nd->n;
    while (a < b) {
        int mid = a + (b - a) / 2;
        if (nd->hi[mid] <= lo) a = mid + 1;
        else b = mid;
    }
    for (int r = a; at < hi; r++) {
        int64_t skip_lo = r < nd->n && nd->lo[r] < hi ? (nd->lo[r] > at ? nd->lo[r] : at) : hi;
        int64_t skip_hi = r < nd->n && nd->lo[r] < hi ? (nd->hi[r] < hi ? nd->hi[r] : hi) : hi;
        for (int pass = 0; pass < 2; pass++) { /* [at, skip_lo) decays, [skip_lo, skip_hi) not */
            int64_t x = pass ? skip_lo : at, y = pass ? skip_hi : skip_lo;
            if (y <= x) continue;
            size_t k = (size_t)(x - lo);
            DS_TRY(update_run(be, pass ? &off : s, param + k, (const char *)grad + k * gsz,
                              grad_t, grad_mult, state0 ? state0 + k : NULL,
                              state1 ? state1 + k : NULL, (size_t)(y - x),
                              param_lp ? (char *)param_lp + k * lsz : NULL, lp_t));
        }
        at = skip_hi;
    }
    return DS_OK;
}

static ds_status update_run(ds_backend *be, const ds_optim_step *s, float *param,
                            const void *grad, ds_dtype grad_t, float grad_mult, float *state0,
                            float *state1, size_t n, void *param_lp, ds_dtype lp_t) {
    if (s->type == DS_OPTIM_SGD)
        DS_TRY(be->ops->sgd(be, param, grad, grad_t, grad_mult, state0, n, &s->sgd, param_lp,
                            lp_t));
    else
        DS_TRY(be->ops->adam(be, param, grad, grad_t, grad_mult, state0, state1, n, &s->adam,
                             param_lp, lp_t));
    return DS_OK;
}

int ds_optim_state_count(const ds_config *cfg) {
    if (cfg->optimizer == DS_OPTIM_SGD) return cfg->momentum != 0.0 ? 1 : 0;
    return 2;
}

ds_status ds_no_decay_create(const ds_flat *flat, ds_no_decay **out) {
    *out = NULL;
    ds_no_decay *nd = calloc(1, sizeof *nd);
    int cap = flat->n_params > 0 ? flat->n_params : 1;
    if (nd) {
        nd->lo = malloc((size_t)cap * sizeof *nd->lo);
        nd->hi = malloc((size_t)cap * sizeof *nd->hi);
    }
    if (!nd || !nd->lo || !nd->hi) {
        ds_no_decay_destroy(nd);
        return DS_ERR(DS_ERR_OOM, "the no-decay ranges of %d parameters: out of host memory",
                      flat->n_params);
    }
    for (int i = 0; i < flat->n_params; i++) { /* in flat order */
        const ds_flat_param *p = &flat->params[i];
        if (ds_param_decays(p->desc) || p->numel == 0) continue;
        nd->n_params++;
        nd->elems += p->numel;
        if (nd->n > 0 && nd->hi[nd->n - 1] == p->offset) { /* adjacent: one range */
            nd->hi[nd->n - 1] += p->numel;
            continue;
        }
        nd->lo[nd->n] = p->offset;
        nd->hi[nd->n] = p->offset + p->numel;
        nd->n++;
    }
    *out = nd;
    return DS_OK;
}

void ds_no_decay_destroy(ds_no_decay *nd) {
    if (!nd) return;
    free(nd->lo);
    free(nd->hi);
    free(nd);
}
