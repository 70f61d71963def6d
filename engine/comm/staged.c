/* The MPI communicator over a backend's memory it cannot read: each data-path
 * call copies the buffers it reads into pinned host memory, runs the MPI
 * collective there and copies what it wrote back (ds_comm_desc.stage).
 *
 * Where it is used: the cuda backend with zero_engine.comm "mpi" (ranks that
 * share a GPU, which NCCL refuses).
 * It is the slow way: every byte crosses PCIe twice and each call ends with
 * a wait for the device, which is why the engine takes NCCL by default.
 *
 * The wrapper swaps the communicator's ops for its own and keeps MPI's table
 * to call; c->impl stays MPI's (comm.c reaches the MPI base through it), and
 * the staging state hangs off c->stage. Copies go through the backend's
 * memcpy slot with DS_COPY_DEFAULT (the runtime tells device from host by the
 * address), on the backend's default stream (cuda: the legacy stream its own
 * work is queued on, whichever thread calls), and each call waits for them:
 * so a buffer written by earlier work is read after it,
 * and a result is in place when the call returns, as the comm contract says.
 * At one rank nothing goes through the host: an out-of-place call is one copy
 * on the device. The backend must outlive the communicator (its scratch is
 * the backend's pinned memory). */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm_internal.h"

struct ds_comm_stage {
    const ds_comm_ops *inner; /* MPI's table */
    ds_backend *be;
    void *buf[2];  /* pinned host scratch, grown to the largest call */
    size_t cap[2];
};

/* scratch k with room for `bytes`, grown (never shrunk) */
static ds_status scratch(ds_comm_stage *s, int k, size_t bytes, unsigned char **out) {
    if (bytes > s->cap[k]) {
        size_t cap = s->cap[k] ? s->cap[k] : 4096;
        while (cap < bytes) cap *= 2;
        void *p = NULL;
        DS_TRY(ds_backend_alloc(s->be, DS_MEM_BUFFERS, DS_PLACE_HOST, cap, &p));
        if (s->buf[k]) ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_HOST, s->buf[k], s->cap[k]);
        s->buf[k] = p;
        s->cap[k] = cap;
    }
    *out = s->buf[k];
    return DS_OK;
}

static ds_status copy(ds_comm_stage *s, void *dst, const void *src, size_t bytes) {
    if (!bytes) return DS_OK;
    DS_TRY(s->be->ops->memcpy(s->be, dst, src, bytes, DS_COPY_DEFAULT, NULL));
    return DS_OK;
}

/* the copies issued so far are done (and the work before them on the stream) */
static ds_status settle(ds_comm_stage *s) {
    if (s->be->ops->stream_sync) DS_TRY(s->be->ops->stream_sync(s->be, NULL));
    return DS_OK;
}

/* a copy the caller needs done before it goes on: the host side of a
 * collective reads it next, or the device side (and the scratch is reused
 * by the next call) */
static ds_status move(ds_comm_stage *s, void *dst, const void *src, size_t bytes) {
    DS_TRY(copy(s, dst, src, bytes));
    DS_TRY(settle(s));
    return DS_OK;
}

/* One rank: nothing crosses, and nothing needs the host. The call is the
 * copy of an out-of-place one, on the device, counted as MPI counts it. */
static ds_status alone(ds_comm *c, ds_coll which, void *dst, const void *src, size_t bytes) {
    c->stats.calls[which]++;
    if (dst != src) DS_TRY(move(c->stage, dst, src, bytes));
    return DS_OK;
}

static size_t total(const ds_comm *c, const size_t *counts, size_t *before) {
    size_t n = 0;
    for (int r = 0; r < c->world; r++) {
        if (r == c->rank && before) *before = n;
        n += counts[r];
    }
    return n;
}

static ds_status st_all_reduce(ds_comm *c, void *buf, size_t n, ds_dtype t, ds_reduce_op op) {
    if (c->world == 1) return alone(c, DS_COLL_ALL_REDUCE, buf, buf, 0);
    ds_comm_stage *s = c->stage;
    size_t b = n * ds_dtype_size(t);
    unsigned char *h;
    DS_TRY(scratch(s, 0, b, &h));
    DS_TRY(move(s, h, buf, b));
    DS_TRY(s->inner->all_reduce(c, h, n, t, op));
    DS_TRY(move(s, buf, h, b));
    return DS_OK;
}

/* in place on the scratch: the rank's block of send is its result */
static ds_status st_reduce_scatter(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t,
                                   ds_reduce_op op) {
    if (c->world == 1) return alone(c, DS_COLL_REDUCE_SCATTER, recv, send, n * ds_dtype_size(t));
    ds_comm_stage *s = c->stage;
    size_t b = n * ds_dtype_size(t), mine = b * (size_t)c->rank;
    unsigned char *h;
    DS_TRY(scratch(s, 0, b * (size_t)c->world, &h));
    DS_TRY(move(s, h, send, b * (size_t)c->world));
    DS_TRY(s->inner->reduce_scatter(c, h, h + mine, n, t, op));
    DS_TRY(move(s, recv, h + mine, b));
    return DS_OK;
}

static ds_status st_all_gather(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t) {
    if (c->world == 1) return alone(c, DS_COLL_ALL_GATHER, recv, send, n * ds_dtype_size(t));
    ds_comm_stage *s = c->stage;
    size_t b = n * ds_dtype_size(t), mine = b * (size_t)c->rank;
    unsigned char *h;
    DS_TRY(scratch(s, 0, b * (size_t)c->world, &h));
    DS_TRY(move(s, h + mine, send, b));
    DS_TRY(s->inner->all_gather(c, h + mine, h, n, t));
    DS_TRY(move(s, recv, h, b * (size_t)c->world));
    return DS_OK;
}

static ds_status st_broadcast(ds_comm *c, void *buf, size_t n, ds_dtype t, int root) {
    if (c->world == 1) return alone(c, DS_COLL_BROADCAST, buf, buf, 0);
    ds_comm_stage *s = c->stage;
    size_t b = n * ds_dtype_size(t);
    unsigned char *h;
    DS_TRY(scratch(s, 0, b, &h));
    if (c->rank == root) DS_TRY(move(s, h, buf, b));
    DS_TRY(s->inner->broadcast(c, h, n, t, root));
    if (c->rank != root) DS_TRY(move(s, buf, h, b));
    return DS_OK;
}

static ds_status st_barrier(ds_comm *c) {
    DS_TRY(c->stage->inner->barrier(c));
    return DS_OK;
}

static ds_status st_reduce_scatterv(ds_comm *c, const void *send, void *recv,
                                    const size_t *counts, ds_dtype t, ds_reduce_op op) {
    size_t es = ds_dtype_size(t), before = 0, n = total(c, counts, &before);
    if (c->world == 1) return alone(c, DS_COLL_REDUCE_SCATTER, recv, send, n * es);
    ds_comm_stage *s = c->stage;
    unsigned char *h;
    DS_TRY(scratch(s, 0, n * es, &h));
    DS_TRY(move(s, h, send, n * es));
    DS_TRY(s->inner->reduce_scatterv(c, h, h + before * es, counts, t, op));
    DS_TRY(move(s, recv, h + before * es, counts[c->rank] * es));
    return DS_OK;
}

static ds_status st_all_gatherv(ds_comm *c, void *buf, const size_t *counts, ds_dtype t) {
    if (c->world == 1) return alone(c, DS_COLL_ALL_GATHER, buf, buf, 0);
    ds_comm_stage *s = c->stage;
    size_t es = ds_dtype_size(t), before = 0, n = total(c, counts, &before);
    unsigned char *h;
    DS_TRY(scratch(s, 0, n * es, &h));
    DS_TRY(move(s, h + before * es, (const unsigned char *)buf + before * es,
              counts[c->rank] * es));
    DS_TRY(s->inner->all_gatherv(c, h, counts, t));
    DS_TRY(move(s, buf, h, n * es));
    return DS_OK;
}

/* all_to_all (counts NULL, blocks of n) and all_to_allv: send and recv apart */
static ds_status personal(ds_comm *c, const void *send, void *recv, const size_t *counts,
                          size_t n, ds_dtype t) {
    ds_comm_stage *s = c->stage;
    size_t es = ds_dtype_size(t);
    size_t sb = (counts ? total(c, counts, NULL) : n * (size_t)c->world) * es;
    size_t rb = (counts ? counts[c->rank] : n) * (size_t)c->world * es;
    if (c->world == 1) return alone(c, DS_COLL_ALL_TO_ALL, recv, send, rb);
    unsigned char *hs, *hr;
    DS_TRY(scratch(s, 0, sb, &hs));
    DS_TRY(scratch(s, 1, rb, &hr));
    DS_TRY(move(s, hs, send, sb));
    DS_TRY(counts ? s->inner->all_to_allv(c, hs, hr, counts, t)
                  : s->inner->all_to_all(c, hs, hr, n, t));
    DS_TRY(move(s, recv, hr, rb));
    return DS_OK;
}

static ds_status st_all_to_all(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t) {
    DS_TRY(personal(c, send, recv, NULL, n, t));
    return DS_OK;
}

static ds_status st_all_to_allv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                                ds_dtype t) {
    DS_TRY(personal(c, send, recv, counts, 0, t));
    return DS_OK;
}

static ds_status st_split(ds_comm *c, int color, int key, ds_comm **out_comm) {
    ds_comm_stage *s = c->stage;
    DS_TRY(s->inner->split(c, color, key, out_comm));
    ds_status st = ds_comm_stage_wrap(*out_comm, s->be);
    if (st != DS_OK) {
        ds_comm_destroy(*out_comm);
        *out_comm = NULL;
        ds_error_trace(__FILE__, __LINE__);
    }
    return st;
}

static void st_destroy(ds_comm *c) {
    ds_comm_stage *s = c->stage;
    for (int k = 0; k < 2; k++)
        if (s->buf[k]) ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_HOST, s->buf[k], s->cap[k]);
    c->ops = s->inner;
    c->stage = NULL;
    free(s);
    if (c->ops->destroy) c->ops->destroy(c);
}

static const ds_comm_ops k_staged_ops = {
    .name = "mpi",
    .all_reduce = st_all_reduce,
    .reduce_scatter = st_reduce_scatter,
    .all_gather = st_all_gather,
    .broadcast = st_broadcast,
    .barrier = st_barrier,
    .reduce_scatterv = st_reduce_scatterv,
    .all_gatherv = st_all_gatherv,
    .all_to_all = st_all_to_all,
    .all_to_allv = st_all_to_allv,
    .split = st_split,
    .destroy = st_destroy,
};

ds_status ds_comm_stage_wrap(ds_comm *c, ds_backend *be) {
    if (!c || !be)
        return DS_ERR(DS_ERR_INVALID_ARG, "comm staging: %s is NULL", c ? "the backend" : "comm");
    if (c->stage) return DS_ERR(DS_ERR_INVALID_ARG, "comm staging: already staged");
    ds_comm_stage *s = calloc(1, sizeof *s);
    if (!s) return DS_ERR(DS_ERR_OOM, "comm staging: out of host memory");
    s->inner = c->ops;
    s->be = be;
    c->stage = s;
    c->ops = &k_staged_ops;
    return DS_OK;
}

bool ds_comm_staged(const ds_comm *c) { return c && c->stage; }
