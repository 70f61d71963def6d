/* Full parameter and gradient replicas (stages 0 and 1). */
#include "zero/replica.h"

#include <stdlib.h>

#include "engine/io/fault.h"
#include "zero/zero_util.h"

/* Tied parameters: under fp32 a use points straight into the replica at the
 * owner's offset; under fp16/bf16 into an fp32 copy widened at each fetch
 * (the owner's module widens its span into pstage, which the next module
 * reuses). */
static ds_status init_tied(ds_replica *r) {
    const ds_flat *f = r->flat;
    if (f->n_ties == 0) return DS_OK;
    r->tptrs = calloc((size_t)f->n_modules, sizeof *r->tptrs);
    if (!r->tptrs) return DS_ERR(DS_ERR_OOM, "tied parameter tables: out of host memory");
    if (r->pt != DS_F32) {
        r->tstage = calloc((size_t)f->n_tied_params, sizeof *r->tstage);
        if (!r->tstage) return DS_ERR(DS_ERR_OOM, "tied parameter tables: out of host memory");
        for (int j = 0; j < f->n_tied_params; j++)
            DS_TRY(ds_backend_alloc(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE,
                                    (size_t)f->params[f->tied_params[j]].numel * 4,
                                    (void **)&r->tstage[j]));
    }
    for (int m = 0; m < f->n_modules; m++) {
        const ds_flat_module *fm = &f->modules[m];
        if (fm->n_ties == 0) continue;
        r->tptrs[m] = calloc((size_t)fm->n_ties, sizeof(float *));
        if (!r->tptrs[m]) return DS_ERR(DS_ERR_OOM, "tied parameter tables: out of host memory");
        for (int k = 0; k < fm->n_ties; k++) {
            const ds_flat_tie *t = &f->ties[fm->first_tie + k];
            r->tptrs[m][k] = r->pt == DS_F32 ? (float *)r->params + f->params[t->param].offset
                                             : r->tstage[t->target];
        }
    }
    return DS_OK;
}

ds_status ds_replica_init(ds_replica *r, const ds_zero_desc *d, bool full_grads, void *grads_at) {
    const ds_flat *f = d->flat;
    r->be = d->be;
    r->flat = f;
    r->pt = d->param_t;
    r->gt = d->grad_t;
    for (int m = 0; m < f->n_modules; m++) {
        int64_t span = f->modules[m].end - f->modules[m].begin;
        if (span > r->max_span) r->max_span = span;
    }
    size_t padded = (size_t)f->padded;
    ds_backend *be = r->be;
    DS_TRY(ds_backend_alloc(be, DS_MEM_PARAMS, DS_PLACE_DEVICE, padded * ds_dtype_size(r->pt),
                            &r->params));
    if (full_grads)
        DS_TRY(ds_backend_alloc(be, DS_MEM_GRADS, DS_PLACE_DEVICE, padded * ds_dtype_size(r->gt),
                                &r->grads));
    else if (grads_at)
        r->grads = grads_at, r->grads_lent = true;
    if (r->pt != DS_F32)
        DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, (size_t)r->max_span * 4,
                                (void **)&r->pstage));
    if (r->gt != DS_F32 || !r->grads)
        DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, (size_t)r->max_span * 4,
                                (void **)&r->gstage));
    r->ptrs = calloc((size_t)f->n_modules, sizeof *r->ptrs);
    r->gptrs = calloc((size_t)f->n_modules, sizeof *r->gptrs);
    if (!r->ptrs || !r->gptrs) return DS_ERR(DS_ERR_OOM, "parameter tables: out of host memory");
    for (int m = 0; m < f->n_modules; m++) {
        const ds_flat_module *fm = &f->modules[m];
        int np = fm->n_params > 0 ? fm->n_params : 1;
        r->ptrs[m] = calloc((size_t)np, sizeof(float *));
        r->gptrs[m] = calloc((size_t)np, sizeof(float *));
        if (!r->ptrs[m] || !r->gptrs[m])
            return DS_ERR(DS_ERR_OOM, "parameter tables: out of host memory");
        for (int k = 0; k < fm->n_params; k++) {
            const ds_flat_param *p = &f->params[fm->first_param + k];
            int64_t rel = p->offset - fm->begin;
            r->ptrs[m][k] = r->pt == DS_F32 ? (float *)r->params + p->offset : r->pstage + rel;
            r->gptrs[m][k] = r->gstage ? r->gstage + rel : (float *)r->grads + p->offset;
        }
    }
    DS_TRY(init_tied(r));
    return DS_OK;
}

void ds_replica_free(ds_replica *r) {
    if (!r->be) return;
    ds_backend *be = r->be;
    size_t padded = (size_t)r->flat->padded;
    ds_backend_free(be, DS_MEM_PARAMS, DS_PLACE_DEVICE, r->params, padded * ds_dtype_size(r->pt));
    if (r->grads && !r->grads_lent)
        ds_backend_free(be, DS_MEM_GRADS, DS_PLACE_DEVICE, r->grads, padded * ds_dtype_size(r->gt));
    ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, r->pstage, (size_t)r->max_span * 4);
    ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, r->gstage, (size_t)r->max_span * 4);
    for (int m = 0; r->ptrs && m < r->flat->n_modules; m++) free(r->ptrs[m]);
    for (int m = 0; r->gptrs && m < r->flat->n_modules; m++) free(r->gptrs[m]);
    for (int m = 0; r->tptrs && m < r->flat->n_modules; m++) free(r->tptrs[m]);
    for (int j = 0; r->tstage && j < r->flat->n_tied_params; j++)
        ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, r->tstage[j],
                        (size_t)r->flat->params[r->flat->tied_params[j]].numel * 4);
    free(r->ptrs);
    free(r->gptrs);
    free(r->tptrs);
    free(r->tstage);
    r->be = NULL;
}

ds_status ds_replica_fetch(ds_replica *r, int m, float ***out, float ***tied) {
    const ds_flat *f = r->flat;
    const ds_flat_module *fm = &f->modules[m];
    if (r->pt != DS_F32) { /* widen the module's working parameters */
        DS_TRY(r->be->ops->cast(r->be, r->pstage, DS_F32, ds_at(r->params, r->pt, fm->begin),
                                r->pt, (size_t)(fm->end - fm->begin)));
        for (int k = 0; k < fm->n_ties; k++) {
            const ds_flat_tie *t = &f->ties[fm->first_tie + k];
            const ds_flat_param *p = &f->params[t->param];
            DS_TRY(r->be->ops->cast(r->be, r->tstage[t->target], DS_F32,
                                    ds_at(r->params, r->pt, p->offset), r->pt, (size_t)p->numel));
        }
    }
    *out = r->ptrs[m];
    *tied = r->tptrs ? r->tptrs[m] : NULL;
    return DS_OK;
}

ds_status ds_replica_grad_slots(ds_replica *r, int m, float ***out) {
    if (r->gstage) {
        const ds_flat_module *fm = &r->flat->modules[m];
        DS_TRY(r->be->ops->memset(r->be, r->gstage, 0,
                                  (size_t)(fm->end - fm->begin) * sizeof(float), NULL));
    }
    *out = r->gptrs[m];
    return DS_OK;
}

ds_status ds_replica_grad_done(ds_replica *r, int m, int64_t lo, int64_t hi) {
    if (!r->gstage || !r->grads) return DS_OK; /* accumulated in place, or the stage's job */
    const ds_flat_module *fm = &r->flat->modules[m];
    DS_TRY(r->be->ops->axpy(r->be, ds_at(r->grads, r->gt, lo), r->gt, 1.0f,
                            r->gstage + (lo - fm->begin), DS_F32, (size_t)(hi - lo)));
    return DS_OK;
}

ds_status ds_replica_zero_grad(ds_replica *r) {
    DS_TRY(r->be->ops->memset(r->be, r->grads, 0,
                              (size_t)r->flat->padded * ds_dtype_size(r->gt), NULL));
    return DS_OK;
}

ds_status ds_replica_grad_to_host(ds_replica *r, int i, float *host) {
    const ds_flat_param *p = &r->flat->params[i];
    if (r->gt == DS_F32) {
        DS_TRY(r->be->ops->memcpy(r->be, host, (const float *)r->grads + p->offset,
                                  (size_t)p->numel * sizeof(float), DS_COPY_D2H, NULL));
        return DS_OK;
    }
    for (int64_t b = 0; b < p->numel; b += r->max_span) { /* via the fp32 staging area */
        int64_t len = p->numel - b < r->max_span ? p->numel - b : r->max_span;
        DS_TRY(r->be->ops->cast(r->be, r->gstage, DS_F32, ds_at(r->grads, r->gt, p->offset + b),
                                r->gt, (size_t)len));
        DS_TRY(r->be->ops->memcpy(r->be, host + b, r->gstage, (size_t)len * sizeof(float),
                                  DS_COPY_D2H, NULL));
    }
    return DS_OK;
}

ds_status ds_replica_init_values(ds_replica *r, uint64_t seed, float *master, int64_t lo,
                                 int64_t n) {
    const ds_flat *f = r->flat;
    ds_backend *be = r->be;
    for (int m = 0; m < f->n_modules; m++) {
        const ds_flat_module *fm = &f->modules[m];
        float *base = r->pt == DS_F32 ? (float *)r->params + fm->begin : r->pstage;
        for (int k = 0; k < fm->n_params; k++) {
            int i = fm->first_param + k;
            const ds_flat_param *p = &f->params[i];
            DS_TRY(ds_zero_init_range(be, p, i, seed, 0, p->numel, base + (p->offset - fm->begin)));
        }
        if (r->pt == DS_F32) continue;
        size_t span = (size_t)(fm->end - fm->begin);
        /* padding between tensors inside the span stays zero in the staging area */
        DS_TRY(be->ops->cast(be, ds_at(r->params, r->pt, fm->begin), r->pt, r->pstage, DS_F32,
                             span));
        int64_t b = fm->begin > lo ? fm->begin : lo;
        int64_t e = fm->end < lo + n ? fm->end : lo + n;
        if (master && b < e)
            DS_TRY(be->ops->memcpy(be, master + (b - lo), r->pstage + (b - fm->begin),
                                   (size_t)(e - b) * sizeof(float), DS_COPY_D2D, NULL));
        DS_TRY(be->ops->memset(be, r->pstage, 0, span * sizeof(float), NULL));
    }
    return DS_OK;
}

ds_status ds_replica_get_weights(ds_replica *r, ds_comm *comm, const float *master, int i,
                                 float *host) {
    if (master) {
        DS_TRY(ds_zero_part_to_host(r->be, comm, r->flat, i, master, DS_F32, host));
        return DS_OK;
    }
    const ds_flat_param *p = &r->flat->params[i];
    DS_TRY(r->be->ops->memcpy(r->be, host, (float *)r->params + p->offset,
                              (size_t)p->numel * sizeof(float), DS_COPY_D2H, NULL));
    return DS_OK;
}

ds_status ds_replica_set_weights(ds_replica *r, ds_comm *comm, float *master, int i,
                                 const float *host) {
    const ds_flat_param *p = &r->flat->params[i];
    size_t bytes = (size_t)p->numel * sizeof(float);
    if (r->pt == DS_F32) {
        DS_TRY(r->be->ops->memcpy(r->be, (float *)r->params + p->offset, host, bytes, DS_COPY_H2D,
                                  NULL));
        return DS_OK;
    }
    if (master) DS_TRY(ds_zero_part_from_host(r->be, r->flat, comm->rank, i, master, DS_F32, host));
    /* the low-precision replica, through the fp32 staging area */
    DS_TRY(r->be->ops->memcpy(r->be, r->pstage, host, bytes, DS_COPY_H2D, NULL));
    DS_TRY(r->be->ops->cast(r->be, ds_at(r->params, r->pt, p->offset), r->pt, r->pstage, DS_F32,
                            (size_t)p->numel));
    return DS_OK;
}

/* ---- strategy slots shared by the replica stages ---- */

static ds_replica *R(ds_zero *z) { return (ds_replica *)z->impl; }

/* The replica's local part of a fetch (the widening cast), behind the
 * fault site replica:fetch (engine/io/fault.h: error:replica:fetch[:rank=R]
 * [:nth=N] fails it on that rank, as a failed cast would). */
static ds_status replica_fetch(ds_zero *z, ds_replica *r, int m, float ***out, float ***tied) {
    DS_TRY(ds_fault_error("replica:fetch", z->d.comm->rank));
    DS_TRY(ds_replica_fetch(r, m, out, tied));
    return DS_OK;
}

ds_status ds_replica_op_fetch(ds_zero *z, int m, float ***out, float ***tied) {
    ds_status st = replica_fetch(z, R(z), m, out, tied);
    z->fetch_local = st != DS_OK; /* no collective in it: a failure is this rank's */
    return st;
}

ds_status ds_replica_op_release(ds_zero *z, int m) {
    (void)z;
    (void)m;
    return DS_OK;
}

ds_status ds_replica_op_grad_slots(ds_zero *z, int m, float ***out) {
    DS_TRY(ds_replica_grad_slots(R(z), m, out));
    return DS_OK;
}

ds_status ds_replica_op_zero_grad(ds_zero *z) {
    DS_TRY(ds_replica_zero_grad(R(z)));
    return DS_OK;
}

static ds_replica_shard *RS(ds_zero *z) { return (ds_replica_shard *)z->impl; }

ds_status ds_replica_shard_init(ds_replica_shard *rs, const ds_zero_desc *d, bool full_grads,
                                void *grads_at) {
    rs->comm = d->comm;
    DS_TRY(ds_replica_init(&rs->rep, d, full_grads, grads_at));
    DS_TRY(ds_shard_init(&rs->sh, d));
    /* Every rank draws the whole replica locally (no collective during
     * construction, so a rank that failed to allocate cannot strand the
     * others) and keeps its slice as the master partition. */
    DS_TRY(ds_replica_init_values(&rs->rep, d->seed, rs->sh.master, rs->sh.lo, rs->sh.part));
    return DS_OK;
}

void ds_replica_shard_free(ds_replica_shard *rs) {
    ds_param_gather_destroy(rs->pg);
    ds_param_rows_destroy(rs->rows);
    rs->pg = NULL;
    rs->rows = NULL;
    ds_shard_free(&rs->sh);
    ds_replica_free(&rs->rep);
}

ds_status ds_replica_shard_gather_on(ds_replica_shard *rs, const ds_zero_desc *d,
                                     ds_comm_worker *w) {
    ds_replica *r = &rs->rep;
    if (d->cfg->gather_rows)
        DS_TRY(ds_param_rows_create(r->be, rs->comm, w, r->flat, r->params, r->pt, &rs->rows));
    int n_skip = ds_param_rows_ranges(rs->rows, NULL, 0);
    int64_t(*skip)[2] = n_skip ? malloc((size_t)n_skip * sizeof *skip) : NULL;
    if (n_skip && !skip) return DS_ERR(DS_ERR_OOM, "parameter gather: out of host memory");
    ds_param_rows_ranges(rs->rows, skip, n_skip);
    ds_status st = ds_param_gather_create(r->be, rs->comm, w, r->flat, r->params, r->pt,
                                          d->cfg->allgather_bucket_size,
                                          (const int64_t(*)[2])skip, n_skip, &rs->pg);
    free(skip);
    DS_TRY(st);
    return DS_OK;
}

/* The last update's gathers landed: the dense chunks, and the row exchange
 * as far as it was asked for. */
static ds_status settle(ds_replica_shard *rs) {
    if (rs->rows) DS_TRY(ds_param_rows_wait(rs->rows));
    DS_TRY(ds_param_gather_wait(rs->pg, rs->rep.flat->padded));
    return DS_OK;
}

/* The working parameters are whole: the row tables too. */
static ds_status params_whole(ds_replica_shard *rs) {
    if (rs->rows) DS_TRY(ds_param_rows_post(rs->rows, NULL, NULL, 0));
    DS_TRY(settle(rs));
    return DS_OK;
}

ds_status ds_replica_shard_update(ds_replica_shard *rs, const ds_optim_step *step,
                                  const void *grads, float grad_mult) {
    ds_replica *r = &rs->rep;
    void *lp = ds_at(r->params, r->pt, rs->sh.lo);
    DS_TRY(settle(rs)); /* no chunk still sends from the block the update writes */
    DS_TRY(ds_shard_agree(&rs->sh, rs->comm,
                          ds_shard_update(&rs->sh, step, lp, grads, r->gt, grad_mult, lp, r->pt)));
    /* the row exchange ahead of the dense chunks: the forward needs it first */
    if (rs->rows) DS_TRY(ds_param_rows_start(rs->rows));
    DS_TRY(ds_param_gather_start(rs->pg));
    return DS_OK;
}

ds_status ds_replica_shard_op_fetch(ds_zero *z, int m, float ***out, float ***tied) {
    ds_replica_shard *rs = RS(z);
    /* the chunks up to the module's end; its tied parameters are an earlier
     * module's, below it */
    z->fetch_local = false; /* a wait's failure: the communication thread's */
    if (rs->rows && ds_param_rows_in_module(rs->rows, m)) DS_TRY(ds_param_rows_wait(rs->rows));
    DS_TRY(ds_param_gather_wait(rs->pg, rs->rep.flat->modules[m].end));
    ds_status st = replica_fetch(z, &rs->rep, m, out, tied);
    z->fetch_local = st != DS_OK; /* the gathers went; only the local cast failed */
    return st;
}

ds_status ds_replica_shard_op_begin_forward(ds_zero *z, const ds_batch *host,
                                            const ds_tensor_desc *inputs, int n_inputs) {
    ds_replica_shard *rs = RS(z);
    if (rs->rows) DS_TRY(ds_param_rows_post(rs->rows, host, inputs, n_inputs));
    return DS_OK;
}

ds_status ds_replica_shard_op_get_param(ds_zero *z, int i, float *host) {
    ds_replica_shard *rs = RS(z);
    DS_TRY(params_whole(rs));
    if (ds_shard_offloaded(&rs->sh)) /* the fp32 master lives on the host */
        DS_TRY(ds_shard_get_weights(&rs->sh, rs->comm, rs->rep.flat, i, host));
    else
        DS_TRY(ds_replica_get_weights(&rs->rep, rs->comm, rs->sh.master, i, host));
    return DS_OK;
}

ds_status ds_replica_shard_op_set_param(ds_zero *z, int i, const float *host) {
    ds_replica_shard *rs = RS(z);
    DS_TRY(params_whole(rs));
    DS_TRY(ds_replica_set_weights(&rs->rep, rs->comm, rs->sh.master, i, host));
    if (ds_shard_offloaded(&rs->sh)) /* the host master (sh.master is NULL) */
        DS_TRY(ds_shard_set_weights(&rs->sh, rs->rep.flat, rs->comm->rank, i, host));
    return DS_OK;
}

ds_status ds_replica_shard_op_revive(ds_zero *z) {
    DS_TRY(ds_shard_revive(&RS(z)->sh));
    return DS_OK;
}

ds_status ds_replica_shard_op_state_io(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi,
                                       float *host, bool write) {
    ds_replica_shard *rs = RS(z);
    /* local (zero.h): this rank's partition only, which the row exchange never
     * writes and the dense chunks send from. Reading it beside them needs no
     * wait (which would open the row exchange queued ahead: a collective in a
     * local call); writing it (a load) waits for the chunks. */
    if (write) DS_TRY(ds_param_gather_wait(rs->pg, rs->rep.flat->padded));
    DS_TRY(ds_shard_state_io(&rs->sh, (float *)rs->rep.params + rs->sh.lo, which, lo, hi, host,
                             write));
    return DS_OK;
}

ds_status ds_replica_shard_op_sync_params(ds_zero *z) {
    ds_replica_shard *rs = RS(z);
    ds_replica *r = &rs->rep;
    DS_TRY(params_whole(rs));
    void *lp = ds_at(r->params, r->pt, rs->sh.lo);
    DS_TRY(ds_shard_sync_working(&rs->sh, lp, r->pt));
    DS_TRY(ds_comm_all_gather(rs->comm, lp, r->params, (size_t)rs->sh.part, r->pt));
    return DS_OK;
}
