/* Optimizer shard: allocation and the partition update, on the device or,
 * offloaded, through offload/host_optim.h. */
#include "zero/shard.h"

#include "zero/optim.h"
#include "zero/zero_util.h"

static ds_status init_offload(ds_shard *sh, const ds_zero_desc *d) {
    const ds_config *c = d->cfg;
    ds_host_optim_desc hd = {.dev = d->be, .n = sh->part, .n_moments = ds_optim_state_count(c),
                             .grad_t = d->grad_t, .param_t = d->param_t,
                             .pin_memory = c->offload_optimizer.pin_memory,
                             .num_threads = c->num_threads};
    DS_TRY(ds_host_optim_create(&hd, &sh->off));
    /* The host backend's counter-based RNG draws the same values the
     * device draws for these elements in every other stage. */
    DS_TRY(ds_zero_init_partition(ds_host_optim_backend(sh->off), d->flat, d->comm->rank, d->seed,
                                  ds_host_optim_master(sh->off)));
    return DS_OK;
}

ds_status ds_shard_init(ds_shard *sh, const ds_zero_desc *d) {
    ds_backend *be = d->be;
    sh->be = be;
    sh->part = d->flat->part;
    sh->lo = (int64_t)d->comm->rank * d->flat->part;
    sh->mixed = d->param_t != DS_F32;
    if (d->cfg->offload_optimizer.device == DS_OFFLOAD_CPU) {
        DS_TRY(init_offload(sh, d));
        return DS_OK;
    }
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
    ds_host_optim_destroy(sh->off);
    sh->off = NULL;
    ds_backend_free(sh->be, DS_MEM_MASTER, DS_PLACE_DEVICE, sh->master, bytes);
    ds_backend_free(sh->be, DS_MEM_OPTIM, DS_PLACE_DEVICE, sh->state0, bytes);
    ds_backend_free(sh->be, DS_MEM_OPTIM, DS_PLACE_DEVICE, sh->state1, bytes);
    sh->be = NULL;
}

ds_status ds_shard_update(ds_shard *sh, const ds_optim_step *step, float *fp32_weights,
                          const void *grads, ds_dtype gt, float grad_mult, void *lp_out,
                          ds_dtype lp_t) {
    if (sh->off) {
        ds_host_update u = {.type = step->type, .adam = step->adam, .sgd = step->sgd,
                            .grad_mult = grad_mult};
        DS_TRY(ds_host_optim_step(sh->off, &u, grads, sh->mixed ? lp_out : (void *)fp32_weights));
        return DS_OK;
    }
    float *w = sh->mixed ? sh->master : fp32_weights;
    DS_TRY(ds_optim_update(sh->be, step, w, grads, gt, grad_mult, sh->state0, sh->state1,
                           (size_t)sh->part, sh->mixed ? lp_out : NULL, lp_t));
    return DS_OK;
}

ds_status ds_shard_state_io(ds_shard *sh, float *fp32_weights, ds_zero_state which, int64_t lo,
                            int64_t hi, float *host, bool write) {
    if (sh->off) {
        /* host memory on both sides: the host backend's copies are memcpy */
        float *base = which == DS_STATE_WEIGHTS ? ds_host_optim_master(sh->off)
                      : ds_host_optim_moment(sh->off, which == DS_STATE_MOMENT0 ? 0 : 1);
        DS_TRY(ds_zero_state_copy(ds_host_optim_backend(sh->off), base, sh->lo, sh->lo + sh->part,
                                  lo, hi, host, write));
        return DS_OK;
    }
    float *base = which == DS_STATE_WEIGHTS ? (sh->mixed ? sh->master : fp32_weights)
                  : which == DS_STATE_MOMENT0 ? sh->state0 : sh->state1;
    DS_TRY(ds_zero_state_copy(sh->be, base, sh->lo, sh->lo + sh->part, lo, hi, host, write));
    return DS_OK;
}

ds_status ds_shard_get_weights(ds_shard *sh, ds_comm *comm, const ds_flat *f, int i, float *host) {
    if (sh->off)
        DS_TRY(ds_zero_part_to_host(ds_host_optim_backend(sh->off), comm, f, i,
                                    ds_host_optim_master(sh->off), DS_F32, host));
    else
        DS_TRY(ds_zero_part_to_host(sh->be, comm, f, i, sh->master, DS_F32, host));
    return DS_OK;
}

ds_status ds_shard_set_weights(ds_shard *sh, const ds_flat *f, int rank, int i, const float *host) {
    if (sh->off)
        DS_TRY(ds_zero_part_from_host(ds_host_optim_backend(sh->off), f, rank, i,
                                      ds_host_optim_master(sh->off), DS_F32, host));
    else if (sh->mixed)
        DS_TRY(ds_zero_part_from_host(sh->be, f, rank, i, sh->master, DS_F32, host));
    return DS_OK;
}

ds_status ds_shard_sync_working(ds_shard *sh, void *working, ds_dtype pt) {
    if (sh->off)
        DS_TRY(ds_host_optim_push(sh->off, working));
    else if (sh->mixed)
        DS_TRY(sh->be->ops->cast(sh->be, working, pt, sh->master, DS_F32, (size_t)sh->part));
    return DS_OK;
}

ds_status ds_shard_init_working(ds_shard *sh, const ds_zero_desc *d, void *working, ds_dtype pt) {
    if (sh->off) { /* the host master was drawn by ds_shard_init */
        DS_TRY(ds_host_optim_push(sh->off, working));
        return DS_OK;
    }
    float *w = sh->mixed ? sh->master : (float *)working;
    DS_TRY(ds_zero_init_partition(sh->be, d->flat, d->comm->rank, d->seed, w));
    if (sh->mixed) DS_TRY(sh->be->ops->cast(sh->be, working, pt, sh->master, DS_F32,
                                            (size_t)sh->part));
    return DS_OK;
}
