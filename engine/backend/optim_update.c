/* Optimizer dispatch onto the backend's fused element-wise updates
 * (engine/backend/optim_update.h). */
#include "engine/backend/optim_update.h"

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
