/* The NCCL communicator: device-buffer collectives, bootstrapped over MPI.
 * Compiled only with DS_CUDA (CMake adds this file then).
 *
 * Bootstrap: rank 0 makes the ncclUniqueId and broadcasts it over the MPI
 * communicator (ds_comm_host_broadcast, under the deadline); every rank binds
 * its device (desc->backend->device when a backend is given, else the local
 * rank) and joins with ncclCommInitRankConfig in NON-BLOCKING mode, so that
 * a peer that never joins is a DS_ERR_TIMEOUT, not a hang.
 *
 * Streams: the backend's streams are opaque here, so collectives run on
 * cudaStreamPerThread of the calling thread, and each call returns only when
 * its work is complete (the stream is polled under the deadline, watching
 * ncclCommGetAsyncError). Hence:
 *   - the device buffers must be ready when called: the work that produced
 *     them complete (ds_backend_sync, or an event the caller waited on) or
 *     issued on this thread's per-thread default stream;
 *   - results are visible to every stream when the call returns.
 * Overlap of communication with compute comes from calling from the engine's
 * communication thread (whose per-thread stream is its own), not from
 * returning early.
 *
 * Barriers, ds_comm_agree and the host helpers use the MPI communicator kept
 * in the ds_comm_mpi_base. Traffic counters report what a ring moves for the
 * same call (ds_comm_ring_all_reduce_elems), since NCCL does not say which
 * algorithm it picked. After a timeout the NCCL communicator is aborted and
 * the data path refuses further calls. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm_internal.h"

typedef struct nccl_impl {
    ds_comm_mpi_base base; /* first: comm.c reaches it through c->impl */
    ncclComm_t nc;
    cudaStream_t stream;
    int device;
    bool aborted; /* ncclCommAbort freed nc */
} nccl_impl;

static ds_status nccl_error(ds_comm *c, const char *what, ncclResult_t r) {
    nccl_impl *m = c->impl;
    return DS_ERR(DS_ERR_COMM, "%s failed on rank %d (device %d): %s: %s", what, c->rank,
                  m->device, ncclGetErrorString(r), ncclGetLastError(m->nc));
}

static ds_status cuda_error(ds_comm *c, const char *what, cudaError_t e) {
    nccl_impl *m = c->impl;
    return DS_ERR(DS_ERR_BACKEND, "%s failed on rank %d (device %d): %s: %s", what, c->rank,
                  m->device, cudaGetErrorName(e), cudaGetErrorString(e));
}

static void abort_comm(nccl_impl *m) {
    if (m->nc && !m->aborted) ncclCommAbort(m->nc);
    m->aborted = true;
    m->base.broken = true;
}

/* After a failure recorded by DS_ERR: abort NCCL and keep the message as the
 * communicator's first failure (the process then ends the job at exit with
 * MPI_Abort, comm.h). */
static ds_status fail_comm(ds_comm *c, ds_status st) {
    abort_comm(c->impl);
    ds_comm_note_broken(c, false, st);
    return st;
}

static ds_status timeout_error(ds_comm *c, const char *what, double waited) {
    char op[512];
    ds_comm_op_name(what, op, sizeof op);
    return fail_comm(c, DS_ERR(DS_ERR_TIMEOUT,
                               "%s: rank %d waited %.1f s for the other ranks (NCCL does not say "
                               "which; the NCCL communicator was aborted)",
                               op, c->rank, waited));
}

/* Non-blocking mode: wait until the communicator leaves ncclInProgress. */
static ds_status settle(ds_comm *c, const char *what) {
    nccl_impl *m = c->impl;
    double start = ds_comm_now();
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(m->nc, &state);
        if (r != ncclSuccess) return nccl_error(c, what, r);
        if (state == ncclSuccess) return DS_OK;
        if (state != ncclInProgress) {
            return fail_comm(c, nccl_error(c, what, state));
        }
        double waited = ds_comm_now() - start;
        if (waited > c->timeout_s) return timeout_error(c, what, waited);
        sched_yield();
    }
}

/* Issue-then-complete: `r` is what the enqueue call returned. */
static ds_status complete(ds_comm *c, const char *what, ncclResult_t r) {
    nccl_impl *m = c->impl;
    if (r == ncclInProgress) DS_TRY(settle(c, what));
    else if (r != ncclSuccess) return nccl_error(c, what, r);
    double start = ds_comm_now();
    for (;;) {
        cudaError_t e = cudaStreamQuery(m->stream);
        if (e == cudaSuccess) return DS_OK;
        if (e != cudaErrorNotReady) return cuda_error(c, what, e);
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(m->nc, &state);
        if (state != ncclSuccess && state != ncclInProgress) {
            return fail_comm(c, nccl_error(c, what, state));
        }
        double waited = ds_comm_now() - start;
        if (waited > c->timeout_s) return timeout_error(c, what, waited);
        sched_yield();
    }
}

static ds_status nccl_type(ds_dtype t, ncclDataType_t *out) {
    *out = ncclFloat32; /* set on every path: -O3 otherwise warns the callers may read it unset */
    switch (t) {
    case DS_F32: *out = ncclFloat32; return DS_OK;
    case DS_F16: *out = ncclFloat16; return DS_OK;
    case DS_BF16: *out = ncclBfloat16; return DS_OK;
    case DS_F64: *out = ncclFloat64; return DS_OK;
    case DS_I32: *out = ncclInt32; return DS_OK;
    case DS_I64: *out = ncclInt64; return DS_OK;
    case DS_U8: *out = ncclUint8; return DS_OK;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "nccl: invalid dtype %d", (int)t);
    }
}

static ncclRedOp_t nccl_op(ds_reduce_op op) {
    return op == DS_REDUCE_SUM ? ncclSum : op == DS_REDUCE_MAX ? ncclMax : ncclMin;
}

/* NCCL reads and writes GPU memory: a pageable host buffer would fault in
 * its kernels (an illegal address, the communicator lost) instead of failing
 * the call. One attribute query per buffer, a host-side lookup with no
 * device work, against collectives of microseconds and more. */
static ds_status gpu_memory(ds_comm *c, const char *what, const void *p) {
    if (!p) return DS_OK;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) return cuda_error(c, what, e);
    if (a.type == cudaMemoryTypeUnregistered)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s on rank %d: buffer %p is host memory the GPU cannot reach: NCCL "
                      "needs device (or pinned host) memory; the mpi communicator takes host "
                      "buffers",
                      what, c->rank, p);
    return DS_OK;
}

/* The communicator can be used, this thread is on its device, and the
 * buffers (NULL: none) are memory NCCL can reach. */
static ds_status ready(ds_comm *c, const char *what, const void *a, const void *b) {
    nccl_impl *m = c->impl;
    if ((m->aborted || m->base.broken) && m->base.failure != DS_OK)
        return DS_ERR(m->base.failure, "%s", m->base.failure_msg); /* the first failure */
    if (m->aborted || m->base.broken)
        return DS_ERR(DS_ERR_COMM,
                      "%s: the NCCL communicator on rank %d was aborted after an earlier "
                      "timeout or error; destroy it",
                      what, c->rank);
    cudaError_t e = cudaSetDevice(m->device); /* the calling thread may be new */
    if (e != cudaSuccess) return cuda_error(c, what, e);
    DS_TRY(gpu_memory(c, what, a));
    DS_TRY(gpu_memory(c, what, b));
    return DS_OK;
}

static void count(ds_comm *c, ds_coll which, uint64_t elems, ds_dtype t) {
    c->stats.calls[which]++;
    c->stats.elems_sent[which] += elems;
    c->stats.bytes_sent[which] += elems * ds_dtype_size(t);
}

static ds_status nccl_all_reduce(ds_comm *c, void *buf, size_t n, ds_dtype t, ds_reduce_op op) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, "all_reduce", n ? buf : NULL, NULL));
    DS_TRY(nccl_type(t, &nt));
    if (n) DS_TRY(complete(c, "all_reduce", ncclAllReduce(buf, buf, n, nt, nccl_op(op), m->nc,
                                                          m->stream)));
    count(c, DS_COLL_ALL_REDUCE, ds_comm_ring_all_reduce_elems(n, c->world, c->rank), t);
    return DS_OK;
}

static ds_status nccl_reduce_scatter(ds_comm *c, const void *send, void *recv, size_t n,
                                     ds_dtype t, ds_reduce_op op) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, "reduce_scatter", n ? send : NULL, n ? recv : NULL));
    DS_TRY(nccl_type(t, &nt));
    if (n)
        DS_TRY(complete(c, "reduce_scatter",
                        ncclReduceScatter(send, recv, n, nt, nccl_op(op), m->nc, m->stream)));
    count(c, DS_COLL_REDUCE_SCATTER, (uint64_t)(c->world - 1) * n, t);
    return DS_OK;
}

static ds_status nccl_all_gather(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, "all_gather", n ? send : NULL, n ? recv : NULL));
    DS_TRY(nccl_type(t, &nt));
    if (n) DS_TRY(complete(c, "all_gather", ncclAllGather(send, recv, n, nt, m->nc, m->stream)));
    count(c, DS_COLL_ALL_GATHER, (uint64_t)(c->world - 1) * n, t);
    return DS_OK;
}

static ds_status nccl_broadcast(ds_comm *c, void *buf, size_t n, ds_dtype t, int root) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, "broadcast", n ? buf : NULL, NULL));
    DS_TRY(nccl_type(t, &nt));
    if (n)
        DS_TRY(complete(c, "broadcast", ncclBroadcast(buf, buf, n, nt, root, m->nc, m->stream)));
    /* a chain root -> root+1 -> ...: all but its last rank send the buffer */
    bool last = c->world == 1 || c->rank == (root - 1 + c->world) % c->world;
    count(c, DS_COLL_BROADCAST, last ? 0 : n, t);
    return DS_OK;
}

/* NCCL has no v-collectives: one ncclReduce (reduce_scatterv) or
 * ncclBroadcast (all_gatherv) per block, rooted at the block's owner, fused
 * into one launch by a group. Empty blocks are skipped (on every rank alike:
 * counts are the same everywhere). Traffic is counted as the ring would send
 * it: every block but one's own (reduce-scatter), every block but that of
 * rank+1 (all-gather), as in mpi.c. */
static uint64_t total_but(const size_t *counts, int world, int skip) {
    uint64_t n = 0;
    for (int b = 0; b < world; b++)
        if (b != skip) n += counts[b];
    return n;
}

static ds_status nccl_reduce_scatterv(ds_comm *c, const void *send, void *recv,
                                      const size_t *counts, ds_dtype t, ds_reduce_op op) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, "reduce_scatterv", send, recv));
    DS_TRY(nccl_type(t, &nt));
    size_t es = ds_dtype_size(t), off = 0;
    ncclResult_t r = ncclGroupStart();
    for (int b = 0; b < c->world && r == ncclSuccess; b++) {
        const char *blk = (const char *)send + off * es;
        /* recvbuff matters on the root only; elsewhere any valid pointer */
        void *dst = b == c->rank ? recv : (void *)blk;
        if (counts[b]) r = ncclReduce(blk, dst, counts[b], nt, nccl_op(op), b, m->nc, m->stream);
        off += counts[b];
    }
    ncclResult_t e = ncclGroupEnd();
    DS_TRY(complete(c, "reduce_scatterv", r != ncclSuccess ? r : e));
    count(c, DS_COLL_REDUCE_SCATTER, total_but(counts, c->world, c->rank), t);
    return DS_OK;
}

static ds_status nccl_all_gatherv(ds_comm *c, void *buf, const size_t *counts, ds_dtype t) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, "all_gatherv", buf, NULL));
    DS_TRY(nccl_type(t, &nt));
    size_t es = ds_dtype_size(t), off = 0;
    ncclResult_t r = ncclGroupStart();
    for (int b = 0; b < c->world && r == ncclSuccess; b++) {
        char *blk = (char *)buf + off * es;
        if (counts[b]) r = ncclBroadcast(blk, blk, counts[b], nt, b, m->nc, m->stream);
        off += counts[b];
    }
    ncclResult_t e = ncclGroupEnd();
    DS_TRY(complete(c, "all_gatherv", r != ncclSuccess ? r : e));
    uint64_t sent = c->world > 1 ? total_but(counts, c->world, (c->rank + 1) % c->world) : 0;
    count(c, DS_COLL_ALL_GATHER, sent, t);
    return DS_OK;
}

/* NCCL's point-to-point calls in one group: a send to and a receive from
 * every other rank, the own block copied on the stream. counts NULL: every
 * block n elements (all_to_all), else block b of send counts[b] and every
 * received block counts[rank] (all_to_allv). */
static ds_status pairwise(ds_comm *c, const char *coll, const void *send, void *recv,
                          const size_t *counts, size_t n, ds_dtype t) {
    nccl_impl *m = c->impl;
    ncclDataType_t nt;
    DS_TRY(ready(c, coll, send, recv));
    DS_TRY(nccl_type(t, &nt));
    size_t es = ds_dtype_size(t), mine = counts ? counts[c->rank] : n, off = 0, sent = 0;
    bool any = false;
    for (int b = 0; b < c->world; b++) any = any || (counts ? counts[b] : n) > 0;
    if (any) {
        if (mine) { /* the own block, queued before the group on the same stream */
            for (int b = 0; b < c->rank; b++) off += counts ? counts[b] : n;
            cudaError_t ce = cudaMemcpyAsync((char *)recv + (size_t)c->rank * mine * es,
                                             (const char *)send + off * es, mine * es,
                                             cudaMemcpyDeviceToDevice, m->stream);
            if (ce != cudaSuccess) return cuda_error(c, coll, ce);
        }
        ncclResult_t r = ncclGroupStart();
        off = 0;
        for (int b = 0; b < c->world && r == ncclSuccess; b++) {
            size_t len = counts ? counts[b] : n;
            if (b != c->rank && len) {
                r = ncclSend((const char *)send + off * es, len, nt, b, m->nc, m->stream);
                sent += len;
            }
            if (r == ncclSuccess && b != c->rank && mine)
                r = ncclRecv((char *)recv + (size_t)b * mine * es, mine, nt, b, m->nc, m->stream);
            off += len;
        }
        ncclResult_t e = ncclGroupEnd();
        DS_TRY(complete(c, coll, r != ncclSuccess ? r : e));
    }
    count(c, DS_COLL_ALL_TO_ALL, sent, t);
    return DS_OK;
}

static ds_status nccl_all_to_all(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t) {
    return pairwise(c, "all_to_all", send, recv, NULL, n, t);
}

static ds_status nccl_all_to_allv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                                  ds_dtype t) {
    return pairwise(c, "all_to_allv", send, recv, counts, 0, t);
}

/* Through MPI: it stays sound even after the NCCL communicator is aborted. */
static ds_status nccl_barrier(ds_comm *c) {
    DS_TRY(ds_comm_mpi_barrier(c));
    return DS_OK;
}

static void nccl_destroy(ds_comm *c) {
    nccl_impl *m = c->impl;
    if (!m) return;
    if (m->nc && !m->aborted) {
        cudaSetDevice(m->device);
        /* Flush, then free; a peer that is gone turns the flush into an
         * abort (settle aborts on timeout) rather than a hang. */
        ncclResult_t r = ncclCommFinalize(m->nc);
        ds_status st = (r == ncclSuccess || r == ncclInProgress) ? settle(c, "destroy")
                                                                 : DS_ERR_COMM;
        if (st == DS_OK) ncclCommDestroy(m->nc);
        else abort_comm(m);
    }
    ds_comm_mpi_shutdown(&m->base);
    free(m);
    c->impl = NULL;
}

static ds_status nccl_split(ds_comm *c, int color, int key, ds_comm **out);

static const ds_comm_ops k_nccl_ops = {
    .name = "nccl",
    .split = nccl_split,
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .all_to_all = nccl_all_to_all,
    .all_to_allv = nccl_all_to_allv,
    .barrier = nccl_barrier,
    .reduce_scatterv = nccl_reduce_scatterv,
    .all_gatherv = nccl_all_gatherv,
    .destroy = nccl_destroy,
};

/* What rank 0 broadcasts: whether it could make an id, and the id. */
typedef struct bootstrap_msg {
    int ok;
    ncclUniqueId id;
} bootstrap_msg;

/* Every rank of c (MPI side booted, m->device set) joins one NCCL
 * communicator: rank 0 makes the id and always broadcasts, even after a
 * failure of its own, so the others fail with its reason instead of waiting
 * out the deadline. On failure the MPI side is shut down too. */
static ds_status join_nccl(ds_comm *c, nccl_impl *m) {
    m->stream = cudaStreamPerThread;
    bootstrap_msg msg;
    memset(&msg, 0, sizeof msg);
    cudaError_t ce = cudaSetDevice(m->device);
    ds_status local = DS_OK;
    if (ce != cudaSuccess) local = cuda_error(c, "cudaSetDevice", ce);
    if (c->rank == 0 && local == DS_OK) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        if (r != ncclSuccess) local = nccl_error(c, "ncclGetUniqueId", r);
        else msg.ok = 1;
    }
    ds_status st = ds_comm_host_broadcast(c, &msg, sizeof msg, 0);
    if (st == DS_OK && local == DS_OK && !msg.ok)
        st = DS_ERR(DS_ERR_COMM, "nccl: rank 0 could not create the NCCL unique id");
    if (st == DS_OK) st = local;
    ds_status worst = st;
    if (st != DS_ERR_TIMEOUT) { /* after a timeout MPI's collectives are unusable */
        /* Every rank joins ncclCommInitRank, or none does. */
        ds_status agreed = ds_comm_agree(c, st, &worst);
        if (agreed != DS_OK) worst = agreed;
    }
    if (worst == DS_OK) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclResult_t r = ncclCommInitRankConfig(&m->nc, c->world, msg.id, c->rank, &cfg);
        if (r == ncclInProgress || r == ncclSuccess) worst = settle(c, "ncclCommInitRankConfig");
        else worst = nccl_error(c, "ncclCommInitRankConfig", r);
    }
    if (worst != DS_OK) {
        if (m->nc && !m->aborted) ncclCommAbort(m->nc);
        m->aborted = true;
        ds_comm_mpi_shutdown(&m->base);
        ds_error_trace(__FILE__, __LINE__);
        return worst;
    }
    return DS_OK;
}

ds_status ds_comm_nccl_create(const ds_comm_desc *desc, ds_comm **out) {
    *out = NULL;
    if (desc && desc->backend && desc->backend->kind != DS_BACKEND_CUDA)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "comm \"nccl\" needs the cuda backend, got backend \"%s\"",
                      desc->backend->ops ? desc->backend->ops->name : "?");
    ds_comm *c = calloc(1, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return DS_ERR(DS_ERR_OOM, "comm: out of host memory");
    }
    c->ops = &k_nccl_ops;
    c->impl = m;
    ds_status st = ds_comm_mpi_boot("nccl", desc, c, &m->base);
    if (st == DS_OK) {
        m->device = desc && desc->backend ? desc->backend->device : c->local_rank;
        st = join_nccl(c, m);
    }
    if (st != DS_OK) {
        free(c->peer_same_host); /* booted, then NCCL failed */
        free(m);
        free(c);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = c;
    return DS_OK;
}

/* A group's own NCCL communicator on the world's device, bootstrapped over
 * the split MPI communicator (ncclCommSplit would need NCCL 2.18; a fresh
 * communicator works with every version this builds against). */
static ds_status nccl_split(ds_comm *c, int color, int key, ds_comm **out) {
    *out = NULL;
    const nccl_impl *pm = c->impl;
    ds_comm *s = calloc(1, sizeof *s);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!s || !m) {
        free(s);
        free(m);
        return DS_ERR(DS_ERR_OOM, "comm split: out of host memory");
    }
    s->ops = &k_nccl_ops;
    s->impl = m;
    m->device = pm->device;
    ds_status st = ds_comm_mpi_split_boot(c, color, key, s, &m->base);
    bool booted = st == DS_OK; /* a failed boot shut itself down */
    if (st == DS_OK) st = join_nccl(s, m);
    if (st != DS_OK) {
        /* booted, then NCCL failed: the MPI split goes (its communicator,
         * its job numbering, its place in the live list) */
        if (booted) ds_comm_mpi_shutdown(&m->base);
        free(s->peer_same_host);
        free(m);
        free(s);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = s;
    return DS_OK;
}
