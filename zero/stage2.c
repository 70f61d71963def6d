/* ZeRO stage 2: optimizer state and gradients sharded.
 *
 * Working parameters stay replicated (zero/replica.h, without its gradient
 * replica). A module's gradients are computed in an fp32 staging area of one
 * module's size and handed to the gradient buckets (zero/grad_buckets.h),
 * which reduce-scatter them during backward into this rank's gradient
 * partition: no full-size gradient buffer exists. At the boundary each rank
 * updates its partition (zero/shard.h) and the working parameters are
 * all-gathered: Psi(N-1)/N + Psi(N-1)/N elements sent per rank and step, as
 * stage 0. */
#include <stdlib.h>

#include "zero/grad_buckets.h"
#include "zero/replica.h"
#include "zero/shard.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

typedef struct stage2 {
    ds_replica rep;
    ds_shard sh;
    ds_comm *comm;
    ds_comm_worker *worker;
    ds_grad_buckets *buckets;
    void *grads; /* [part] gt: this rank's gradient partition */
} stage2;

static stage2 *S(ds_zero *z) { return (stage2 *)z->impl; }

static ds_status fetch(ds_zero *z, int m, float ***out) {
    DS_TRY(ds_replica_fetch(&S(z)->rep, m, out));
    return DS_OK;
}

static ds_status release(ds_zero *z, int m) {
    (void)z;
    (void)m;
    return DS_OK;
}

static ds_status grad_slots(ds_zero *z, int m, float ***out) {
    DS_TRY(ds_replica_grad_slots(&S(z)->rep, m, out));
    return DS_OK;
}

static ds_status grad_done(ds_zero *z, int m) {
    stage2 *s = S(z);
    const ds_flat_module *fm = &s->rep.flat->modules[m];
    DS_TRY(ds_grad_buckets_add(s->buckets, fm->begin, fm->end, s->rep.gstage));
    return DS_OK;
}

static ds_status reduce_grads(ds_zero *z, double *sumsq, int *overflow) {
    stage2 *s = S(z);
    DS_TRY(ds_grad_buckets_finish(s->buckets));
    DS_TRY(ds_zero_part_sumsq(s->rep.be, s->comm, s->grads, s->rep.gt, (size_t)s->sh.part, sumsq,
                              overflow));
    return DS_OK;
}

static ds_status apply(ds_zero *z, float grad_mult, const ds_optim_step *step) {
    stage2 *s = S(z);
    ds_replica *r = &s->rep;
    void *lp = ds_at(r->params, r->pt, s->sh.lo);
    DS_TRY(ds_shard_update(&s->sh, step, lp, s->grads, r->gt, grad_mult, lp, r->pt));
    DS_TRY(ds_comm_all_gather(s->comm, lp, r->params, (size_t)s->sh.part, r->pt));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) {
    stage2 *s = S(z);
    DS_TRY(s->rep.be->ops->memset(s->rep.be, s->grads, 0,
                                  (size_t)s->sh.part * ds_dtype_size(s->rep.gt), NULL));
    return DS_OK;
}

static ds_status get_param(ds_zero *z, int i, float *host) {
    stage2 *s = S(z);
    DS_TRY(ds_replica_get_weights(&s->rep, s->comm, s->sh.master, i, host));
    return DS_OK;
}

static ds_status set_param(ds_zero *z, int i, const float *host) {
    stage2 *s = S(z);
    DS_TRY(ds_replica_set_weights(&s->rep, s->comm, s->sh.master, i, host));
    return DS_OK;
}

static ds_status get_grad(ds_zero *z, int i, float *host) {
    stage2 *s = S(z);
    DS_TRY(ds_grad_buckets_finish(s->buckets)); /* the partition holds the sums */
    DS_TRY(ds_zero_part_to_host(s->rep.be, s->comm, s->rep.flat, i, s->grads, s->rep.gt, host));
    return DS_OK;
}

static ds_status state_io(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi, float *host,
                          bool write) {
    stage2 *s = S(z);
    DS_TRY(ds_shard_state_io(&s->sh, (float *)s->rep.params + s->sh.lo, which, lo, hi, host,
                             write));
    return DS_OK;
}

static ds_status sync_params(ds_zero *z) {
    stage2 *s = S(z);
    ds_replica *r = &s->rep;
    void *lp = ds_at(r->params, r->pt, s->sh.lo);
    if (s->sh.mixed)
        DS_TRY(r->be->ops->cast(r->be, lp, r->pt, s->sh.master, DS_F32, (size_t)s->sh.part));
    DS_TRY(ds_comm_all_gather(s->comm, lp, r->params, (size_t)s->sh.part, r->pt));
    return DS_OK;
}

static void destroy(ds_zero *z) {
    stage2 *s = S(z);
    if (s) {
        ds_comm_worker_destroy(s->worker);
        ds_grad_buckets_destroy(s->buckets);
        ds_backend_free(z->d.be, DS_MEM_GRADS, DS_PLACE_DEVICE, s->grads,
                        (size_t)z->d.flat->part * ds_dtype_size(z->d.grad_t));
        ds_shard_free(&s->sh);
        ds_replica_free(&s->rep);
        free(s);
    }
    free(z);
}

static const ds_zero_ops k_stage2_ops = {
    .name = "stage2", .fetch = fetch, .release = release, .grad_slots = grad_slots,
    .grad_done = grad_done, .reduce_grads = reduce_grads, .apply = apply,
    .zero_grad = zero_grad, .get_param = get_param, .set_param = set_param,
    .get_grad = get_grad, .state_io = state_io, .sync_params = sync_params, .destroy = destroy,
};

ds_status ds_zero_stage2_create(const ds_zero_desc *d, ds_zero **out) {
    *out = NULL;
    ds_zero *z = calloc(1, sizeof *z);
    stage2 *s = calloc(1, sizeof *s);
    if (!z || !s) {
        free(z);
        free(s);
        return DS_ERR(DS_ERR_OOM, "stage 2: out of host memory");
    }
    *z = (ds_zero){.ops = &k_stage2_ops, .d = *d, .stage = 2, .impl = s};
    s->comm = d->comm;
    ds_status st;
    DS_TRY_GOTO(st, ds_replica_init(&s->rep, d, false), fail);
    DS_TRY_GOTO(st, ds_shard_init(&s->sh, d), fail);
    DS_TRY_GOTO(st, ds_backend_alloc(d->be, DS_MEM_GRADS, DS_PLACE_DEVICE,
                                     (size_t)d->flat->part * ds_dtype_size(d->grad_t), &s->grads),
                fail);
    DS_TRY_GOTO(st, ds_comm_worker_create(d->comm, d->cfg->overlap_comm, &s->worker), fail);
    DS_TRY_GOTO(st, ds_grad_buckets_create(d->be, s->worker, d->flat, d->comm->rank, d->grad_t,
                                           s->grads, d->cfg->reduce_bucket_size,
                                           !d->cfg->contiguous_gradients, &s->buckets), fail);
    DS_TRY_GOTO(st, ds_replica_init_values(&s->rep, d->seed, s->sh.master, s->sh.lo, s->sh.part),
                fail);
    *out = z;
    return DS_OK;
fail:
    destroy(z);
    return st;
}
