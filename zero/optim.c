/* Optimizer dispatch onto the backend's fused element-wise updates. */
#include "zero/optim.h"

ds_status ds_optim_update(ds_backend *be, const ds_optim_step *s, float *param, const void *grad,
                          ds_dtype grad_t, float grad_mult, float *state0, float *state1,
                          size_t n, void *param_lp, ds_dtype lp_t) {
    if (n == 0) return DS_OK;
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
