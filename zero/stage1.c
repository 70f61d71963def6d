/* ZeRO stage 1: optimizer state sharded.
 *
 * Working parameters and gradients stay replicated (zero/replica.h), but the
 * fp32 master weights and the optimizer moments exist only for the rank's own
 * partition (zero/shard.h). During the backward of the last micro-batch of
 * a step the gradients are reduce-scattered in place, bucket by bucket as
 * the modules finish (zero/grad_reduce.h, on the communication thread with
 * overlap_comm), so each rank holds the summed gradient of its partition at
 * its place in the replica; at the boundary each rank updates its partition
 * and the working parameters are all-gathered: Psi(N-1)/N + Psi(N-1)/N
 * elements sent per rank, the same as stage 0's all-reduce. The gather goes
 * in chunks behind the next forward, and a rows_read_by table by the rows
 * the next micro-batch reads (zero/param_gather.h, zero/param_rows.h). */
#include <stdlib.h>

#include "zero/grad_reduce.h"
#include "zero/replica.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

typedef struct stage1 {
    ds_replica_shard rs; /* first: the shared replica slots reach it through impl */
    ds_grad_reduce *gr;  /* the reduce-scatter buckets */
} stage1;

static stage1 *S(ds_zero *z) { return (stage1 *)z->impl; }

/* The partition's slice of the gradient replica, reduced over ranks. */
static void *my_grads(stage1 *s) { return ds_at(s->rs.rep.grads, s->rs.rep.gt, s->rs.sh.lo); }

static ds_status grad_done(ds_zero *z, int m, int64_t lo, int64_t hi) {
    return ds_grad_reduce_grad_done(S(z)->gr, &S(z)->rs.rep, z->final_backward, m, lo, hi);
}

static ds_status reduce_grads(ds_zero *z, double *sumsq, int *overflow) {
    stage1 *s = S(z);
    ds_replica *r = &s->rs.rep;
    DS_TRY(ds_grad_reduce_finish(s->gr));
    DS_TRY(ds_zero_part_sumsq(r->be, s->rs.comm, my_grads(s), r->gt, (size_t)s->rs.sh.part, sumsq,
                              overflow));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) {
    return ds_grad_reduce_zero_grad(S(z)->gr, &S(z)->rs.rep);
}

static ds_status apply(ds_zero *z, float grad_mult, const ds_optim_step *step) {
    stage1 *s = S(z);
    DS_TRY(ds_replica_shard_update(&s->rs, step, my_grads(s), grad_mult));
    return DS_OK;
}

static ds_status get_grad(ds_zero *z, int i, float *host) {
    stage1 *s = S(z);
    if (ds_grad_reduce_started(s->gr)) { /* each partition holds its sums */
        DS_TRY(ds_grad_reduce_finish(s->gr));
        DS_TRY(ds_zero_part_to_host(s->rs.rep.be, s->rs.comm, s->rs.rep.flat, i, my_grads(s),
                                    s->rs.rep.gt, host));
        return DS_OK;
    }
    DS_TRY(ds_replica_grad_to_host(&s->rs.rep, i, host));
    DS_TRY(ds_comm_host_all_reduce(s->rs.comm, host, (size_t)s->rs.rep.flat->params[i].numel,
                                   DS_F32, DS_REDUCE_SUM));
    return DS_OK;
}

static void destroy(ds_zero *z) {
    if (S(z)) {
        ds_grad_reduce_destroy(S(z)->gr); /* joins the communication thread */
        ds_replica_shard_free(&S(z)->rs);
    }
    free(z->impl);
    free(z);
}

static const ds_zero_ops k_stage1_ops = {
    .name = "stage1",
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

ds_status ds_zero_stage1_create(const ds_zero_desc *d, ds_zero **out) {
    ds_zero *z;
    DS_TRY(ds_zero_alloc(d, &k_stage1_ops, 1, sizeof(stage1), &z));
    stage1 *s = S(z);
    ds_status st = ds_replica_shard_init(&s->rs, d, true, NULL);
    if (st == DS_OK)
        st = ds_grad_reduce_create(d->be, d->comm, d->flat, s->rs.rep.gt, s->rs.rep.grads,
                                   DS_GRAD_REDUCE_SCATTER, d->cfg->reduce_bucket_size,
                                   !d->cfg->contiguous_gradients, d->cfg->overlap_comm, &s->gr);
    if (st == DS_OK) st = ds_replica_shard_gather_on(&s->rs, d, ds_grad_reduce_worker(s->gr));
    char why[256]; /* where it does not apply the engine warned (ds_grad_sparse_applies) */
    if (st == DS_OK && ds_grad_sparse_applies(d->cfg, why,
                                              sizeof why))
        st = ds_grad_reduce_sparse(s->gr);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        destroy(z);
        return st;
    }
    *out = z;
    return DS_OK;
}
