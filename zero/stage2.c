/* ZeRO stage 2: optimizer state and gradients sharded.
 *
 * Working parameters stay replicated (zero/replica.h, without its gradient
 * replica). A module's gradients are computed in an fp32 staging area of one
 * module's size and handed to the gradient buckets (zero/grad_buckets.h),
 * which reduce-scatter them during backward into this rank's gradient
 * partition: no full-size gradient buffer exists. At the boundary each rank
 * updates its partition (zero/shard.h) and the working parameters are
 * all-gathered: Psi(N-1)/N + Psi(N-1)/N elements sent per rank and step, as
 * stage 0; in chunks behind the next forward, and a rows_read_by table by
 * the rows the next micro-batch reads (zero/param_gather.h,
 * zero/param_rows.h).
 *
 * One rank: the partition is the whole flat gradient, so the modules
 * accumulate into it as into stage 0's replica (zero/replica.h grads_at): no
 * fp32 staging under fp32, no buckets, no copies, no jobs, the same
 * arithmetic as stage 0. The buckets there only zeroed, copied and added
 * each gradient once more (BERT-mini at 1 rank x 2 threads: 1.057x the
 * samples/s without them, bench/RESULTS.md) and held two model-sized
 * buffers. */
#include <stdlib.h>

#include "zero/grad_buckets.h"
#include "zero/grad_sparse.h"
#include "zero/replica.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

typedef struct stage2 {
    ds_replica_shard rs; /* first: the shared replica slots reach it through impl */
    ds_comm_worker *worker;
    ds_grad_buckets *buckets; /* NULL at one rank */
    void *grads; /* [part] gt: this rank's gradient partition */
} stage2;

static stage2 *S(ds_zero *z) { return (stage2 *)z->impl; }

static ds_status grad_done(ds_zero *z, int m, int64_t lo, int64_t hi) {
    stage2 *s = S(z);
    if (!s->buckets) return ds_replica_grad_done(&s->rs.rep, m, lo, hi); /* one rank: in place */
    const ds_flat_module *fm = &s->rs.rep.flat->modules[m];
    DS_TRY(ds_grad_buckets_add(s->buckets, lo, hi, s->rs.rep.gstage + (lo - fm->begin),
                               lo == fm->begin));
    return DS_OK;
}

static ds_status reduce_grads(ds_zero *z, double *sumsq, int *overflow) {
    stage2 *s = S(z);
    if (s->buckets) DS_TRY(ds_grad_buckets_finish(s->buckets));
    DS_TRY(ds_zero_part_sumsq(s->rs.rep.be, s->rs.comm, s->grads, s->rs.rep.gt,
                              (size_t)s->rs.sh.part, sumsq, overflow));
    return DS_OK;
}

static ds_status apply(ds_zero *z, float grad_mult, const ds_optim_step *step) {
    stage2 *s = S(z);
    DS_TRY(ds_replica_shard_update(&s->rs, step, s->grads, grad_mult));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) {
    stage2 *s = S(z);
    if (s->buckets) DS_TRY(ds_grad_buckets_reset(s->buckets)); /* an open bucket too */
    DS_TRY(s->rs.rep.be->ops->memset(s->rs.rep.be, s->grads, 0,
                                     (size_t)s->rs.sh.part * ds_dtype_size(s->rs.rep.gt), NULL));
    return DS_OK;
}

static ds_status get_grad(ds_zero *z, int i, float *host) {
    stage2 *s = S(z);
    if (s->buckets) DS_TRY(ds_grad_buckets_finish(s->buckets)); /* the partition: the sums */
    DS_TRY(ds_zero_part_to_host(s->rs.rep.be, s->rs.comm, s->rs.rep.flat, i, s->grads,
                                s->rs.rep.gt, host));
    return DS_OK;
}

static void destroy(ds_zero *z) {
    stage2 *s = S(z);
    if (s) {
        ds_comm_worker_destroy(s->worker);
        ds_grad_buckets_destroy(s->buckets);
        ds_backend_free(z->d.be, DS_MEM_GRADS, DS_PLACE_DEVICE, s->grads,
                        (size_t)z->d.flat->part * ds_dtype_size(z->d.grad_t));
        ds_replica_shard_free(&s->rs);
    }
    free(s);
    free(z);
}

static const ds_zero_ops k_stage2_ops = {
    .name = "stage2",
    .fetch = ds_replica_shard_op_fetch,
    .begin_forward = ds_replica_shard_op_begin_forward,
    .release = ds_replica_op_release,
    .grad_slots = ds_replica_op_grad_slots,
    .grad_done = grad_done,
    .reduce_grads = reduce_grads,
    .apply = apply,
    .zero_grad = zero_grad,
    .get_param = ds_replica_shard_op_get_param,
    .set_param = ds_replica_shard_op_set_param,
    .get_grad = get_grad,
    .state_io = ds_replica_shard_op_state_io,
    .sync_params = ds_replica_shard_op_sync_params,
    .revive = ds_replica_shard_op_revive,
    .destroy = destroy,
};

static ds_status build(stage2 *s, const ds_zero_desc *d) {
    bool one = d->comm->world == 1; /* then part == padded */
    DS_TRY(ds_backend_alloc(d->be, DS_MEM_GRADS, DS_PLACE_DEVICE,
                            (size_t)d->flat->part * ds_dtype_size(d->grad_t), &s->grads));
    DS_TRY(ds_replica_shard_init(&s->rs, d, false, one ? s->grads : NULL));
    DS_TRY(ds_comm_worker_create(d->comm, d->cfg->overlap_comm, &s->worker));
    if (!one)
        DS_TRY(ds_grad_buckets_create(d->be, s->worker, d->flat, d->comm->rank, d->grad_t,
                                      s->grads, d->cfg->reduce_bucket_size,
                                      !d->cfg->contiguous_gradients, &s->buckets));
    DS_TRY(ds_replica_shard_gather_on(&s->rs, d, s->worker));
    char why[256]; /* where it does not apply the engine warned (ds_grad_sparse_applies) */
    if (s->buckets &&
        ds_grad_sparse_applies(d->cfg, why, sizeof why))
        DS_TRY(ds_grad_buckets_sparse(s->buckets, d->comm));
    return DS_OK;
}

ds_status ds_zero_stage2_create(const ds_zero_desc *d, ds_zero **out) {
    ds_zero *z;
    DS_TRY(ds_zero_alloc(d, &k_stage2_ops, 2, sizeof(stage2), &z));
    ds_status st = build(S(z), d);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        destroy(z);
        return st;
    }
    *out = z;
    return DS_OK;
}
