/* ZeRO stage 1: optimizer state sharded.
 *
 * Working parameters and gradients stay replicated (zero/replica.h), but the
 * fp32 master weights and the optimizer moments exist only for the rank's own
 * partition (zero/shard.h). At the boundary the gradients are
 * reduce-scattered so each rank receives the summed gradient of its
 * partition, each rank updates its partition, and the working parameters are
 * all-gathered: Psi(N-1)/N + Psi(N-1)/N elements sent per rank, the same as
 * stage 0's all-reduce. */
#include <stdlib.h>

#include "zero/replica.h"
#include "zero/shard.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

typedef struct stage1 {
    ds_replica rep;
    ds_shard sh;
    ds_comm *comm;
} stage1;

static stage1 *S(ds_zero *z) { return (stage1 *)z->impl; }

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
    DS_TRY(ds_replica_grad_done(&S(z)->rep, m));
    return DS_OK;
}

static ds_status reduce_grads(ds_zero *z, double *sumsq, int *overflow) {
    stage1 *s = S(z);
    ds_replica *r = &s->rep;
    void *mine = ds_at(r->grads, r->gt, s->sh.lo);
    DS_TRY(ds_comm_reduce_scatter(s->comm, r->grads, mine, (size_t)s->sh.part, r->gt,
                                  DS_REDUCE_SUM));
    DS_TRY(ds_zero_part_sumsq(r->be, s->comm, mine, r->gt, (size_t)s->sh.part, sumsq, overflow));
    return DS_OK;
}

static ds_status apply(ds_zero *z, float grad_mult, const ds_optim_step *step) {
    stage1 *s = S(z);
    ds_replica *r = &s->rep;
    void *lp = ds_at(r->params, r->pt, s->sh.lo);
    DS_TRY(ds_shard_update(&s->sh, step, lp, ds_at(r->grads, r->gt, s->sh.lo), r->gt, grad_mult,
                           lp, r->pt));
    DS_TRY(ds_comm_all_gather(s->comm, lp, r->params, (size_t)s->sh.part, r->pt));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) {
    DS_TRY(ds_replica_zero_grad(&S(z)->rep));
    return DS_OK;
}

static ds_status get_param(ds_zero *z, int i, float *host) {
    stage1 *s = S(z);
    DS_TRY(ds_replica_get_weights(&s->rep, s->comm, s->sh.master, i, host));
    return DS_OK;
}

static ds_status set_param(ds_zero *z, int i, const float *host) {
    stage1 *s = S(z);
    DS_TRY(ds_replica_set_weights(&s->rep, s->comm, s->sh.master, i, host));
    return DS_OK;
}

static ds_status get_grad(ds_zero *z, int i, float *host) {
    stage1 *s = S(z);
    DS_TRY(ds_replica_grad_to_host(&s->rep, i, host));
    DS_TRY(ds_comm_host_all_reduce(s->comm, host, (size_t)s->rep.flat->params[i].numel, DS_F32,
                                   DS_REDUCE_SUM));
    return DS_OK;
}

static ds_status state_io(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi, float *host,
                          bool write) {
    stage1 *s = S(z);
    DS_TRY(ds_shard_state_io(&s->sh, (float *)s->rep.params + s->sh.lo, which, lo, hi, host,
                             write));
    return DS_OK;
}

static ds_status sync_params(ds_zero *z) {
    stage1 *s = S(z);
    ds_replica *r = &s->rep;
    void *lp = ds_at(r->params, r->pt, s->sh.lo);
    if (s->sh.mixed)
        DS_TRY(r->be->ops->cast(r->be, lp, r->pt, s->sh.master, DS_F32, (size_t)s->sh.part));
    DS_TRY(ds_comm_all_gather(s->comm, lp, r->params, (size_t)s->sh.part, r->pt));
    return DS_OK;
}

static void destroy(ds_zero *z) {
    stage1 *s = S(z);
    if (s) {
        ds_shard_free(&s->sh);
        ds_replica_free(&s->rep);
        free(s);
    }
    free(z);
}

static const ds_zero_ops k_stage1_ops = {
    .name = "stage1", .fetch = fetch, .release = release, .grad_slots = grad_slots,
    .grad_done = grad_done, .reduce_grads = reduce_grads, .apply = apply,
    .zero_grad = zero_grad, .get_param = get_param, .set_param = set_param,
    .get_grad = get_grad, .state_io = state_io, .sync_params = sync_params, .destroy = destroy,
};

ds_status ds_zero_stage1_create(const ds_zero_desc *d, ds_zero **out) {
    *out = NULL;
    ds_zero *z = calloc(1, sizeof *z);
    stage1 *s = calloc(1, sizeof *s);
    if (!z || !s) {
        free(z);
        free(s);
        return DS_ERR(DS_ERR_OOM, "stage 1: out of host memory");
    }
    *z = (ds_zero){.ops = &k_stage1_ops, .d = *d, .stage = 1, .impl = s};
    s->comm = d->comm;
    ds_status st;
    DS_TRY_GOTO(st, ds_replica_init(&s->rep, d, true), fail);
    DS_TRY_GOTO(st, ds_shard_init(&s->sh, d), fail);
    /* Every rank draws the whole replica locally (no collective during
     * construction, so a rank that failed to allocate cannot strand the
     * others) and keeps its slice as the master partition. */
    DS_TRY_GOTO(st, ds_replica_init_values(&s->rep, d->seed, s->sh.master, s->sh.lo, s->sh.part),
                fail);
    *out = z;
    return DS_OK;
fail:
    destroy(z);
    return st;
}
