/* ZeRO stage 0: plain data parallelism.
 *
 * Every rank holds the whole model state: the replicas of parameters and
 * gradients (zero/replica.h), the optimizer state over the full flat space,
 * and fp32 master weights under mixed precision. During the backward of the
 * last micro-batch of a step the gradients are all-reduced in place, bucket
 * by bucket of reduce_bucket_size elements as the modules finish, on the
 * communication thread with overlap_comm (zero/grad_reduce.h); at the
 * boundary every rank waits for the last bucket and applies the identical
 * update to the whole model.
 *
 * With OneBitAdam / ZeroOneAdam (zero/onebit.h) the optimizer decides per
 * step whether backward all-reduces the gradients; when it does not, the
 * gradients stay this rank's and the optimizer communicates, compressed. */
#include <stdlib.h>
#include <string.h>

#include "zero/grad_reduce.h"
#include "zero/onebit.h"
#include "zero/optim.h"
#include "zero/replica.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

typedef struct stage0 {
    ds_replica rep; /* first: the shared replica slots reach it through impl */
    ds_comm *comm;
    bool mixed;             /* fp32 master weights exist */
    float *master;          /* [padded] fp32, mixed only */
    float *state0, *state1; /* optimizer moments [padded] */
    ds_grad_reduce *gr;     /* the all-reduce buckets */
    ds_onebit *ob;          /* OneBitAdam / ZeroOneAdam, else NULL */
} stage0;

static stage0 *S(ds_zero *z) { return (stage0 *)z->impl; }
static float *weights(stage0 *s) { return s->mixed ? s->master : (float *)s->rep.params; }

/* Whether this step's gradients are all-reduced during backward. */
static bool reduces(const stage0 *s) { return !s->ob || ds_onebit_reduces_grads(s->ob); }

static ds_status grad_done(ds_zero *z, int m, int64_t lo, int64_t hi) {
    return ds_grad_reduce_grad_done(S(z)->gr, &S(z)->rep, z->final_backward && reduces(S(z)), m,
                                    lo, hi);
}

/* Local gradients (onebit.h): the norm and the overflow agreed over ranks.
 * The engine takes sqrt(sumsq) / world as the norm of the mean gradient;
 * world * (sum of the local squares) makes that the ranks' root mean square
 * local norm. */
static ds_status local_norm(stage0 *s, double *sumsq, int *overflow) {
    ds_replica *r = &s->rep;
    DS_TRY(r->be->ops->sumsq(r->be, r->grads, r->gt, (size_t)r->flat->used, sumsq, overflow));
    double v[2] = {*sumsq, *overflow ? 1.0 : 0.0};
    ds_comm_set_context(s->comm, "the local gradients' norm");
    ds_status st = ds_comm_host_all_reduce(s->comm, v, 2, DS_F64, DS_REDUCE_SUM);
    ds_comm_set_context(s->comm, NULL);
    DS_TRY(st);
    *sumsq = v[0] * (double)s->comm->world;
    *overflow = v[1] > 0.0;
    return DS_OK;
}

static ds_status reduce_grads(ds_zero *z, double *sumsq, int *overflow) {
    stage0 *s = S(z);
    ds_replica *r = &s->rep;
    if (!reduces(s)) {
        DS_TRY(local_norm(s, sumsq, overflow));
        return DS_OK;
    }
    DS_TRY(ds_grad_reduce_finish(s->gr));
    /* Every rank now holds the same summed gradient, so the local norm and
     * overflow flag are already global. */
    DS_TRY(r->be->ops->sumsq(r->be, r->grads, r->gt, (size_t)r->flat->used, sumsq, overflow));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) { return ds_grad_reduce_zero_grad(S(z)->gr, &S(z)->rep); }

static ds_status apply(ds_zero *z, float grad_mult, const ds_optim_step *step) {
    stage0 *s = S(z);
    ds_replica *r = &s->rep;
    if (s->ob) {
        DS_TRY(ds_onebit_apply(s->ob, r->be, step, grad_mult, weights(s), r->grads, r->gt,
                               s->state0, s->state1, s->mixed ? r->params : NULL, r->pt));
        return DS_OK;
    }
    DS_TRY(ds_optim_update(r->be, step, weights(s), r->grads, r->gt, grad_mult, s->state0,
                           s->state1, (size_t)r->flat->used, s->mixed ? r->params : NULL, r->pt));
    return DS_OK;
}

static ds_status get_param(ds_zero *z, int i, float *host) {
    stage0 *s = S(z);
    const ds_flat_param *p = &s->rep.flat->params[i];
    DS_TRY(s->rep.be->ops->memcpy(s->rep.be, host, weights(s) + p->offset,
                                  (size_t)p->numel * sizeof(float), DS_COPY_D2H, NULL));
    return DS_OK;
}

static ds_status set_param(ds_zero *z, int i, const float *host) {
    stage0 *s = S(z);
    ds_replica *r = &s->rep;
    const ds_flat_param *p = &r->flat->params[i];
    float *dst = weights(s) + p->offset;
    DS_TRY(r->be->ops->memcpy(r->be, dst, host, (size_t)p->numel * sizeof(float), DS_COPY_H2D,
                              NULL));
    if (s->mixed)
        DS_TRY(r->be->ops->cast(r->be, (char *)r->params + (size_t)p->offset * ds_dtype_size(r->pt),
                                r->pt, dst, DS_F32, (size_t)p->numel));
    return DS_OK;
}

static ds_status get_grad(ds_zero *z, int i, float *host) {
    stage0 *s = S(z);
    if (ds_grad_reduce_started(s->gr)) { /* the last backward reduced the replica */
        DS_TRY(ds_grad_reduce_finish(s->gr));
        DS_TRY(ds_replica_grad_to_host(&s->rep, i, host));
        return DS_OK;
    }
    DS_TRY(ds_replica_grad_to_host(&s->rep, i, host));
    DS_TRY(ds_comm_host_all_reduce(s->comm, host, (size_t)s->rep.flat->params[i].numel, DS_F32,
                                   DS_REDUCE_SUM));
    return DS_OK;
}

static ds_status state_io(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi, float *host,
                          bool write) {
    stage0 *s = S(z);
    float *base = which == DS_STATE_WEIGHTS ? weights(s)
                  : which == DS_STATE_MOMENT0 ? s->state0 : s->state1;
    /* 0/1 Adam between synchronisations: each rank's weights are its own
     * (its rank state keeps them for a resume at the same world size); the
     * flat section gets the last synchronisation's, the same on every rank,
     * so a resume at another world size starts from one consistent model
     * (with u reset to 0, just after that synchronisation) instead of a
     * patchwork of the ranks' pieces. */
    const float *synced = s->ob && !write ? ds_onebit_sync_weights(s->ob) : NULL;
    if (which == DS_STATE_WEIGHTS && synced) {
        /* the synchronised copy covers the used elements only; the padding
         * after them is the weights' own (zeros) */
        int64_t used = s->rep.flat->used, mid = hi < used ? hi : used;
        if (lo < mid)
            DS_TRY(ds_zero_state_copy(s->rep.be, (float *)synced, 0, used, lo, mid, host, false));
        if (hi > mid) {
            int64_t from = lo > mid ? lo : mid;
            DS_TRY(ds_zero_state_copy(s->rep.be, base, 0, s->rep.flat->padded, from, hi,
                                      host + (from - lo), false));
        }
        return DS_OK;
    }
    DS_TRY(ds_zero_state_copy(s->rep.be, base, 0, s->rep.flat->padded, lo, hi, host, write));
    return DS_OK;
}

static ds_status sync_params(ds_zero *z) {
    stage0 *s = S(z);
    if (s->mixed)
        DS_TRY(s->rep.be->ops->cast(s->rep.be, s->rep.params, s->rep.pt, s->master, DS_F32,
                                    (size_t)s->rep.flat->padded));
    return DS_OK;
}

/* The rank's own state: the optimizer's, then under 0/1 Adam this rank's
 * weights and momentum (its local steps make them differ from the other
 * ranks'; the flat-space sections hold each part as one rank had it). */
static size_t rank_state_len(ds_zero *z) {
    stage0 *s = S(z);
    if (!s->ob) return 0;
    size_t n = ds_onebit_state_len(s->ob);
    return ds_onebit_rank_weights(s->ob) ? n + 2 * (size_t)s->rep.flat->used : n;
}

static ds_status rank_state_io(ds_zero *z, float *host, bool write) {
    stage0 *s = S(z);
    if (!s->ob) return DS_OK;
    DS_TRY(ds_onebit_state_io(s->ob, host, write));
    if (!ds_onebit_rank_weights(s->ob)) return DS_OK;
    size_t n = (size_t)s->rep.flat->used;
    float *own = host + ds_onebit_state_len(s->ob), *mine[2] = {weights(s), s->state0};
    ds_backend *be = s->rep.be;
    for (int k = 0; k < 2; k++) { /* the backend's memory to or from host */
        if (write)
            DS_TRY(be->ops->memcpy(be, mine[k], own + (size_t)k * n, n * sizeof(float),
                                   DS_COPY_H2D, NULL));
        else
            DS_TRY(be->ops->memcpy(be, own + (size_t)k * n, mine[k], n * sizeof(float),
                                   DS_COPY_D2H, NULL));
    }
    return DS_OK;
}

static bool rank_state_fits(ds_zero *z, const float *host, int64_t applied) {
    return !S(z)->ob || ds_onebit_state_fits(S(z)->ob, host, applied);
}

static ds_status rank_state_restart(ds_zero *z, int64_t applied, bool have_state) {
    return S(z)->ob ? ds_onebit_restart(S(z)->ob, applied, have_state, weights(S(z))) : DS_OK;
}

static ds_status set_exp_avg_mask(ds_zero *z, int param, const float *host) {
    stage0 *s = S(z);
    const ds_flat_param *p = &s->rep.flat->params[param];
    if (!s->ob)
        return DS_ERR(DS_ERR_INVALID_ARG, "exp_avg_mask (parameter %s): only OneBitAdam and "
                      "ZeroOneAdam take one", p->desc->name);
    DS_TRY(ds_onebit_set_mask(s->ob, p->offset, host, (size_t)p->numel));
    return DS_OK;
}

static void destroy(ds_zero *z) {
    stage0 *s = S(z);
    if (s) {
        ds_backend *be = s->rep.be ? s->rep.be : z->d.be;
        size_t padded = (size_t)z->d.flat->padded;
        ds_grad_reduce_destroy(s->gr); /* joins the communication thread */
        ds_onebit_destroy(s->ob);
        ds_backend_free(be, DS_MEM_MASTER, DS_PLACE_DEVICE, s->master, padded * 4);
        ds_backend_free(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, s->state0, padded * 4);
        ds_backend_free(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, s->state1, padded * 4);
        ds_replica_free(&s->rep);
        free(s);
    }
    free(z);
}

static const ds_zero_ops k_stage0_ops = {
    .name = "stage0", .fetch = ds_replica_op_fetch, .release = ds_replica_op_release,
    .grad_slots = ds_replica_op_grad_slots, .grad_done = grad_done,
    .reduce_grads = reduce_grads, .apply = apply, .zero_grad = zero_grad,
    .get_param = get_param, .set_param = set_param,
    .get_grad = get_grad, .state_io = state_io, .sync_params = sync_params, .destroy = destroy,
    .rank_state_len = rank_state_len, .rank_state_io = rank_state_io,
    .rank_state_fits = rank_state_fits,
    .rank_state_restart = rank_state_restart, .set_exp_avg_mask = set_exp_avg_mask,
};

static ds_status build(stage0 *s, const ds_zero_desc *d) {
    ds_backend *be = d->be;
    size_t padded = (size_t)d->flat->padded;
    int nstate = ds_optim_state_count(d->cfg);
    DS_TRY(ds_replica_init(&s->rep, d, true, NULL));
    if (s->mixed)
        DS_TRY(ds_backend_alloc(be, DS_MEM_MASTER, DS_PLACE_DEVICE, padded * 4,
                                (void **)&s->master));
    if (nstate >= 1)
        DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, padded * 4,
                                (void **)&s->state0));
    if (nstate >= 2)
        DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, padded * 4,
                                (void **)&s->state1));
    DS_TRY(ds_replica_init_values(&s->rep, d->seed, s->master, 0, d->flat->padded));
    if (d->cfg->onebit != DS_ONEBIT_NONE) /* its state and codec on the backend */
        DS_TRY(ds_onebit_create(d->cfg, be, d->comm, d->flat, &s->ob));
    DS_TRY(ds_grad_reduce_create(be, d->comm, d->flat, s->rep.gt, s->rep.grads, DS_GRAD_ALL_REDUCE,
                                 d->cfg->reduce_bucket_size, !d->cfg->contiguous_gradients,
                                 d->cfg->overlap_comm, &s->gr));
    char why[256]; /* where it does not apply the engine warned (ds_grad_sparse_applies) */
    if (ds_grad_sparse_applies(d->cfg, why, sizeof why))
        DS_TRY(ds_grad_reduce_sparse(s->gr));
    return DS_OK;
}

ds_status ds_zero_stage0_create(const ds_zero_desc *d, ds_zero **out) {
    ds_zero *z;
    DS_TRY(ds_zero_alloc(d, &k_stage0_ops, 0, sizeof(stage0), &z));
    stage0 *s = S(z);
    s->comm = d->comm;
    s->mixed = d->param_t != DS_F32;
    ds_status st = build(s, d);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        destroy(z);
        return st;
    }
    *out = z;
    return DS_OK;
}
