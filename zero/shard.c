/* Optimizer shard: allocation and the partition update, on the device or,
 * offloaded, through offload/host_optim.h. */
#include "zero/shard.h"

#include <string.h>

#include "zero/optim.h"
#include "zero/zero_util.h"

typedef struct init_ctx {
    ds_backend *be;
    const ds_zero_desc *d;
} init_ctx;

/* The host backend's counter-based RNG draws the same values the device
 * draws for these elements in every other stage. */
static ds_status draw_master(void *ctx, int64_t b, int64_t e, float *dst) {
    const init_ctx *c = ctx;
    DS_TRY(ds_zero_init_partition_range(c->be, c->d->flat, c->d->comm->rank, c->d->seed, b, e,
                                        dst));
    return DS_OK;
}

static ds_status init_offload(ds_shard *sh, const ds_zero_desc *d) {
    const ds_config *c = d->cfg;
    bool nvme = c->offload_optimizer.device == DS_OFFLOAD_NVME;
    ds_host_optim_desc hd = {.dev = d->be, .n = sh->part, .n_moments = ds_optim_state_count(c),
                             .grad_t = d->grad_t, .param_t = d->param_t,
                             .pin_memory = c->offload_optimizer.pin_memory,
                             .num_threads = c->num_threads,
                             .nvme = nvme ? &c->offload_optimizer : NULL, .aio = &c->aio,
                             .sub_group_size = c->sub_group_size, .rank = d->comm->rank};
    DS_TRY(ds_host_optim_create(&hd, &sh->off));
    init_ctx ic = {.be = ds_host_optim_backend(sh->off), .d = d};
    DS_TRY(ds_host_optim_fill_master(sh->off, draw_master, &ic));
    return DS_OK;
}

/* Elements per piece of the device update's output on its way to the
 * param store: 4 Mi (16 MiB of fp32), as the host update's pieces. */
#define SCRATCH ((int64_t)1 << 22)

static ds_status to_store(void *ctx, int64_t b, int64_t e, const void *src) {
    DS_TRY(ds_param_store_write(ctx, b, e, src, true));
    return DS_OK;
}

void ds_shard_attach_store(ds_shard *sh, ds_param_store *ps) {
    sh->ps = ps;
    if (sh->off) ds_host_optim_set_sink(sh->off, ps ? to_store : NULL, ps);
}

/* The device master into the store, a scratch piece at a time. */
static ds_status master_to_store(ds_shard *sh) {
    for (int64_t b = 0; b < sh->part; b += sh->scratch_n) {
        int64_t e = sh->part - b < sh->scratch_n ? sh->part : b + sh->scratch_n;
        DS_TRY(sh->be->ops->cast(sh->be, sh->scratch, sh->pt, sh->master + b, DS_F32,
                                 (size_t)(e - b)));
        DS_TRY(ds_param_store_write(sh->ps, b, e, sh->scratch, false));
    }
    return DS_OK;
}

ds_status ds_shard_init(ds_shard *sh, const ds_zero_desc *d) {
    ds_backend *be = d->be;
    sh->be = be;
    sh->part = d->flat->part;
    sh->lo = (int64_t)d->comm->rank * d->flat->part;
    sh->mixed = d->param_t != DS_F32;
    sh->pt = d->param_t;
    if (d->cfg->offload_optimizer.device != DS_OFFLOAD_NONE) {
        DS_TRY(init_offload(sh, d));
        return DS_OK;
    }
    size_t bytes = (size_t)sh->part * sizeof(float);
    int nstate = ds_optim_state_count(d->cfg);
    bool param_off = d->cfg->zero_stage == 3 && d->cfg->offload_param.device != DS_OFFLOAD_NONE;
    if (sh->mixed || param_off)
        DS_TRY(ds_backend_alloc(be, DS_MEM_MASTER, DS_PLACE_DEVICE, bytes, (void **)&sh->master));
    if (param_off) {
        sh->scratch_n = sh->part < SCRATCH ? sh->part : SCRATCH;
        DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE,
                                (size_t)sh->scratch_n * ds_dtype_size(sh->pt), &sh->scratch));
    }
    if (nstate >= 1)
        DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, bytes, (void **)&sh->state0));
    if (nstate >= 2)
        DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, bytes, (void **)&sh->state1));
    return DS_OK;
}

void ds_shard_free(ds_shard *sh) {
    if (!sh->be) return;
    size_t bytes = (size_t)sh->part * sizeof(float);
    ds_backend_free(sh->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, sh->scratch,
                    (size_t)sh->scratch_n * ds_dtype_size(sh->pt));
    sh->scratch = NULL;
    ds_host_optim_destroy(sh->off);
    sh->off = NULL;
    ds_backend_free(sh->be, DS_MEM_MASTER, DS_PLACE_DEVICE, sh->master, bytes);
    ds_backend_free(sh->be, DS_MEM_OPTIM, DS_PLACE_DEVICE, sh->state0, bytes);
    ds_backend_free(sh->be, DS_MEM_OPTIM, DS_PLACE_DEVICE, sh->state1, bytes);
    sh->be = NULL;
}

ds_status ds_shard_agree(const ds_shard *sh, ds_comm *c, ds_status st) {
    if ((!sh->off && !sh->ps) || c->world == 1 || st == DS_ERR_COMM || st == DS_ERR_TIMEOUT)
        return st; /* nothing local to fail, nobody to tell, or no way to tell them */
    ds_status worst = st;
    DS_TRY(ds_comm_agree(c, st, &worst));
    return worst;
}

ds_status ds_shard_revive(ds_shard *sh) {
    if (sh->off) DS_TRY(ds_host_optim_revive(sh->off));
    if (sh->ps) DS_TRY(ds_param_store_revive(sh->ps));
    return DS_OK;
}

ds_status ds_shard_update(ds_shard *sh, const ds_optim_step *step, float *fp32_weights,
                          const void *grads, ds_dtype gt, float grad_mult, void *lp_out,
                          ds_dtype lp_t) {
    if (sh->off) {
        ds_host_update u = {.type = step->type, .adam = step->adam, .sgd = step->sgd,
                            .grad_mult = grad_mult, .no_decay = step->no_decay,
                            .flat_lo = sh->lo};
        void *dst = sh->ps ? NULL : sh->mixed ? lp_out : (void *)fp32_weights; /* ps: the sink */
        DS_TRY(ds_host_optim_step(sh->off, &u, grads, dst));
        return DS_OK;
    }
    ds_optim_step at = *step; /* this partition's place in the flat space */
    at.flat_lo = sh->lo;
    if (sh->ps) { /* the update is element-wise: piece by piece is the same arithmetic */
        size_t gsz = ds_dtype_size(gt);
        for (int64_t b = 0; b < sh->part; b += sh->scratch_n) {
            int64_t e = sh->part - b < sh->scratch_n ? sh->part : b + sh->scratch_n;
            at.flat_lo = sh->lo + b;
            DS_TRY(ds_optim_update(sh->be, &at, sh->master + b,
                                   (const char *)grads + (size_t)b * gsz, gt, grad_mult,
                                   sh->state0 ? sh->state0 + b : NULL,
                                   sh->state1 ? sh->state1 + b : NULL, (size_t)(e - b),
                                   sh->scratch, lp_t));
            DS_TRY(ds_param_store_write(sh->ps, b, e, sh->scratch, false));
        }
        return DS_OK;
    }
    float *w = sh->mixed ? sh->master : fp32_weights;
    DS_TRY(ds_optim_update(sh->be, &at, w, grads, gt, grad_mult, sh->state0, sh->state1,
                           (size_t)sh->part, sh->mixed ? lp_out : NULL, lp_t));
    return DS_OK;
}

ds_status ds_shard_state_io(ds_shard *sh, float *fp32_weights, ds_zero_state which, int64_t lo,
                            int64_t hi, float *host, bool write) {
    if (sh->off) {
        if (lo < sh->lo || hi > sh->lo + sh->part || lo > hi)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "optimizer state range [%lld, %lld) outside this rank's [%lld, %lld)",
                          (long long)lo, (long long)hi, (long long)sh->lo,
                          (long long)(sh->lo + sh->part));
        DS_TRY(ds_host_optim_state_io(sh->off, (int)which, lo - sh->lo, hi - sh->lo, host,
                                      write));
        return DS_OK;
    }
    float *base = which == DS_STATE_WEIGHTS ? (sh->master ? sh->master : fp32_weights)
                  : which == DS_STATE_MOMENT0 ? sh->state0 : sh->state1;
    DS_TRY(ds_zero_state_copy(sh->be, base, sh->lo, sh->lo + sh->part, lo, hi, host, write));
    return DS_OK;
}

/* Offloaded, the master is reached by ranges (it may live on NVMe):
 * this rank's piece of parameter i, at its place in `host`. */
static ds_status off_piece(ds_shard *sh, const ds_flat *f, int rank, int i, float *host,
                           bool write) {
    const ds_flat_param *p = &f->params[i];
    int64_t b, e;
    if (!ds_flat_clip(f, rank, p->offset, p->offset + p->numel, &b, &e)) return DS_OK;
    DS_TRY(ds_host_optim_state_io(sh->off, 0, b - sh->lo, e - sh->lo, host + (b - p->offset),
                                  write));
    return DS_OK;
}

ds_status ds_shard_get_weights(ds_shard *sh, ds_comm *comm, const ds_flat *f, int i, float *host) {
    if (sh->off) { /* every rank its piece, zeros elsewhere, a sum assembles it (exact) */
        size_t numel = (size_t)f->params[i].numel;
        memset(host, 0, numel * sizeof(float));
        DS_TRY(off_piece(sh, f, comm->rank, i, host, false));
        DS_TRY(ds_comm_host_all_reduce(comm, host, numel, DS_F32, DS_REDUCE_SUM));
    } else {
        DS_TRY(ds_zero_part_to_host(sh->be, comm, f, i, sh->master, DS_F32, host));
    }
    return DS_OK;
}

ds_status ds_shard_set_weights(ds_shard *sh, const ds_flat *f, int rank, int i, const float *host) {
    if (sh->off)
        DS_TRY(off_piece(sh, f, rank, i, (float *)host, true)); /* write: host is only read */
    else if (sh->master)
        DS_TRY(ds_zero_part_from_host(sh->be, f, rank, i, sh->master, DS_F32, host));
    return DS_OK;
}

ds_status ds_shard_sync_working(ds_shard *sh, void *working, ds_dtype pt) {
    if (sh->off)
        DS_TRY(ds_host_optim_push(sh->off, sh->ps ? NULL : working)); /* ps: the sink */
    else if (sh->ps)
        DS_TRY(master_to_store(sh));
    else if (sh->mixed)
        DS_TRY(sh->be->ops->cast(sh->be, working, pt, sh->master, DS_F32, (size_t)sh->part));
    return DS_OK;
}

ds_status ds_shard_init_working(ds_shard *sh, const ds_zero_desc *d, void *working, ds_dtype pt) {
    if (sh->off) { /* the host master was drawn by ds_shard_init */
        DS_TRY(ds_host_optim_push(sh->off, sh->ps ? NULL : working));
        return DS_OK;
    }
    float *w = sh->master ? sh->master : (float *)working;
    DS_TRY(ds_zero_init_partition(sh->be, d->flat, d->comm->rank, d->seed, w));
    if (sh->ps) DS_TRY(master_to_store(sh));
    else if (sh->mixed) DS_TRY(sh->be->ops->cast(sh->be, working, pt, sh->master, DS_F32,
                                                 (size_t)sh->part));
    return DS_OK;
}
