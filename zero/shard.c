/* Optimizer shard: allocation and the partition update. */
#include "zero/shard.h"

#include "zero/optim.h"
#include "zero/zero_util.h"

ds_status ds_shard_init(ds_shard *sh, const ds_zero_desc *d) {
    ds_backend *be = d->be;
    sh->be = be;
    sh->part = d->flat->part;
    sh->lo = (int64_t)d->comm->rank * d->flat->part;
    sh->mixed = d->param_t != DS_F32;
    size_t bytes = (size_t)sh->part * sizeof(float);
    int nstate = ds_optim_state_count(d->cfg);
    if (sh->mixed)
        DS_TRY(ds_backend_alloc(be, DS_MEM_MASTER, DS_PLACE_DEVICE, bytes, (void **)&sh->master));
    if (nstate >= 1)
        DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, bytes, (void **)&sh->state0));
    if (nstate >= 2)
        DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, bytes, (void **)&sh->state1));
    return DS_OK;
}

void ds_shard_free(ds_shard *sh) {
    if (!sh->be) return;
    size_t bytes = (size_t)sh->part * sizeof(float);
    ds_backend_free(sh->be, DS_MEM_MASTER, DS_PLACE_DEVICE, sh->master, bytes);
    ds_backend_free(sh->be, DS_MEM_OPTIM, DS_PLACE_DEVICE, sh->state0, bytes);
    ds_backend_free(sh->be, DS_MEM_OPTIM, DS_PLACE_DEVICE, sh->state1, bytes);
    sh->be = NULL;
}

ds_status ds_shard_update(ds_shard *sh, const ds_optim_step *step, float *fp32_weights,
                          const void *grads, ds_dtype gt, float grad_mult, void *lp_out,
                          ds_dtype lp_t) {
    float *w = sh->mixed ? sh->master : fp32_weights;
    DS_TRY(ds_optim_update(sh->be, step, w, grads, gt, grad_mult, sh->state0, sh->state1,
                           (size_t)sh->part, sh->mixed ? lp_out : NULL, lp_t));
    return DS_OK;
}

ds_status ds_shard_state_io(ds_shard *sh, float *fp32_weights, ds_zero_state which, int64_t lo,
                            int64_t hi, float *host, bool write) {
    float *base = which == DS_STATE_WEIGHTS ? (sh->mixed ? sh->master : fp32_weights)
                  : which == DS_STATE_MOMENT0 ? sh->state0 : sh->state1;
    DS_TRY(ds_zero_state_copy(sh->be, base, sh->lo, sh->lo + sh->part, lo, hi, host, write));
    return DS_OK;
}
