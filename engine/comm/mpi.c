/* The MPI communicator: host-buffer collectives as rings over point-to-point
 * messages (MPI_Isend / MPI_Irecv), through scratch allocated once.
 *
 * Why not MPI_Allreduce & co: Open MPI's large collectives allocate their
 * temporaries per call, and fresh pages cost about 2 us each here, which loses
 * 2-7x (bench/RESULTS.md). A ring moves the bandwidth-optimal amount of data,
 * (N-1)/N of the buffer per phase, and with its scratch preallocated and
 * touched at create, a call faults in nothing.
 *
 * Layout of the ring: rank r sends to r+1 and receives from r-1. Messages are
 * cut into chunks of at most chunk_bytes; each chunk goes once around the ring
 * (N-1 steps) before the next, so any size runs through a fixed scratch.
 *
 *   reduce_scatter  step s sends block r-s-1 (the partial sum received in step
 *                   s-1, or the raw input at s = 0) and receives block r-s-2,
 *                   to which it adds its own input; after N-1 steps block r is
 *                   complete. Scratch: two chunks (receive + the one in flight).
 *   all_gather      step s forwards block r-s straight out of the output and
 *                   receives block r-s-1 straight into it. No scratch. Out
 *                   of place, the own block goes out straight from the input
 *                   and is copied into the output while the ring waits.
 *   all_reduce      reduce_scatter over blocks of count/N (the first count%N one
 *                   element longer), in place, then all_gather of those blocks.
 *   broadcast       a pipelined chain root -> root+1 -> ...: every rank but
 *                   the last forwards each chunk as soon as it has it.
 *   barrier         dissemination (mpi_boot.c). */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm_internal.h"
#include "engine/comm/reduce.h"
#include "engine/core/mem.h"

enum { TAG_REDUCE = 1, TAG_GATHER = 2, TAG_BCAST = 3, TAG_A2A = 4 };

/* Chunk size of the ring messages when the caller does not choose one.
 * Measured here at 2 ranks (bench/RESULTS.md): through Open MPI's shared
 * memory (vader, copy-in/copy-out) 256 KiB to 128 MiB messages all move at
 * the same rate, so the chunk is chosen for the reduction: a received 1 MiB
 * chunk is still in cache when it is added, and two of them are the whole
 * scratch. */
#define DS_COMM_DEFAULT_CHUNK ((size_t)1 << 20)
#define DS_COMM_DEFAULT_SCRATCH ((size_t)64 << 20)

typedef struct mpi_impl {
    ds_comm_mpi_base base; /* first: comm.c reaches it through c->impl */
    unsigned char *scratch;
    size_t scratch_bytes;
    size_t chunk_bytes; /* per message; scratch holds two */
    ds_mem *mem;        /* where the scratch is accounted, may be NULL */
    bool borrowed;      /* a sub-communicator: the scratch is its world's (one
                         * thread uses them all at a time, comm.h) */
} mpi_impl;

/* How a buffer is cut into N blocks: `per` elements each, or explicit
 * `counts` back to back (the v-collectives), or (per == 0, counts NULL)
 * `total` elements cut nearly evenly (ds_comm_block_off/len). */
typedef struct layout {
    size_t per, total;
    int world;
    const size_t *counts;
} layout;

static size_t lay_off(const layout *l, int b) {
    if (l->counts) {
        size_t off = 0;
        for (int r = 0; r < b; r++) off += l->counts[r];
        return off;
    }
    return l->per ? (size_t)b * l->per : ds_comm_block_off(l->total, l->world, b);
}
static size_t lay_len(const layout *l, int b) {
    if (l->counts) return l->counts[b];
    return l->per ? l->per : ds_comm_block_len(l->total, l->world, b);
}
/* The longest block: how many chunks each block's trip around the ring takes. */
static size_t lay_longest(const layout *l) {
    size_t m = 0;
    for (int b = 0; b < l->world; b++)
        if (lay_len(l, b) > m) m = lay_len(l, b);
    return m;
}
/* Elements of chunk starting at element `o` of block b (0 past its end). */
static size_t chunk_len(const layout *l, int b, size_t o, size_t chunk) {
    size_t len = lay_len(l, b);
    if (o >= len) return 0;
    return len - o < chunk ? len - o : chunk;
}

/* A refusal after the data path broke repeats the failure that broke it:
 * that one names the peer and the operation. */
static ds_status broken_error(ds_comm *c, const char *coll) {
    const ds_comm_mpi_base *b = ds_comm_base(c);
    if (b->failure != DS_OK)
        return DS_ERR(b->failure, "%s", b->failure_msg);
    return DS_ERR(DS_ERR_COMM,
                  "%s: communicator on rank %d is unusable after an earlier timeout or MPI "
                  "error (pending messages were abandoned); destroy it",
                  coll, c->rank);
}

/* Post a receive of rbytes from `from` and a send of sbytes to `to` (either
 * may be 0: nothing posted), then wait for both under the deadline. */
static ds_status exchange(ds_comm *c, const void *sbuf, size_t sbytes, int to, void *rbuf,
                          size_t rbytes, int from, int tag, const ds_comm_wait_ctx *ctx) {
    MPI_Comm comm = ds_comm_base(c)->comm;
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int peers[2] = {from, to};
    bool is_recv[2] = {true, false};
    int rc = MPI_SUCCESS;
    if (rbytes) rc = MPI_Irecv(rbuf, (int)rbytes, MPI_BYTE, from, tag, comm, &reqs[0]);
    if (rc == MPI_SUCCESS && sbytes)
        rc = MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, to, tag, comm, &reqs[1]);
    if (rc != MPI_SUCCESS) {
        if (reqs[0] != MPI_REQUEST_NULL) {
            MPI_Cancel(&reqs[0]);
            MPI_Request_free(&reqs[0]);
        }
        ds_status st = ds_comm_mpi_error(rc, ctx->coll, c);
        ds_comm_note_broken(c, false, st);
        return st;
    }
    DS_TRY(ds_comm_mpi_wait(c, reqs, peers, is_recv, 2, ctx));
    return DS_OK;
}

/* Ring reduce-scatter of `src` (N blocks as `lay` says) leaving the reduction
 * of block `rank` at `out` (which may be src's block `rank` itself). Adds the
 * elements sent to *sent. */
static ds_status ring_reduce_scatter(ds_comm *c, const char *coll, const unsigned char *src,
                                     unsigned char *out, const layout *lay, ds_dtype t,
                                     ds_reduce_op op, uint64_t *sent) {
    mpi_impl *m = c->impl;
    int n = c->world, r = c->rank;
    size_t es = ds_dtype_size(t);
    size_t chunk = m->chunk_bytes / es;
    size_t own = lay_len(lay, r);
    if (n == 1) {
        if (out != src + lay_off(lay, 0) * es) memmove(out, src, own * es);
        return DS_OK;
    }
    size_t longest = lay_longest(lay);
    size_t nchunks = (longest + chunk - 1) / chunk;
    int to = (r + 1) % n, from = (r - 1 + n) % n;
    unsigned char *bufs[2] = {m->scratch, m->scratch + m->chunk_bytes};
    for (size_t k = 0; k < nchunks; k++) {
        size_t o = k * chunk;
        unsigned char *inflight = NULL; /* partial sum sent this step */
        for (int s = 0; s < n - 1; s++) {
            int bs = (r - s - 1 + 2 * n) % n, br = (r - s - 2 + 2 * n) % n;
            size_t ls = chunk_len(lay, bs, o, chunk), lr = chunk_len(lay, br, o, chunk);
            const unsigned char *sp = s == 0 ? src + (lay_off(lay, bs) + o) * es : inflight;
            unsigned char *rp = bufs[s & 1];
            ds_comm_wait_ctx ctx = {.coll = coll, .phase = "reduce-scatter", .step = s,
                                    .nsteps = n - 1, .chunk = k, .nchunks = nchunks};
            DS_TRY(exchange(c, sp, ls * es, to, rp, lr * es, from, TAG_REDUCE, &ctx));
            *sent += ls;
            const unsigned char *mine = src + (lay_off(lay, br) + o) * es;
            if (s == n - 2) /* br == r: the block is complete */
                ds_comm_reduce(out + o * es, mine, rp, lr, t, op);
            else
                ds_comm_reduce(rp, rp, mine, lr, t, op);
            inflight = rp;
        }
    }
    return DS_OK;
}

/* Ring all-gather into `buf`: block `rank` is this rank's, the others arrive.
 * This rank's block is sent from `own` (NULL: from buf itself), so a caller
 * copying it into buf can do so during the waits (`idle`, may be NULL). Adds
 * the elements sent to *sent. */
static ds_status ring_all_gather(ds_comm *c, const char *coll, const char *phase,
                                 unsigned char *buf, const unsigned char *own,
                                 ds_comm_idle_copy *idle, const layout *lay, size_t es,
                                 uint64_t *sent) {
    mpi_impl *m = c->impl;
    int n = c->world, r = c->rank;
    if (n == 1) return DS_OK;
    size_t chunk = m->chunk_bytes / es;
    size_t longest = lay_longest(lay);
    size_t nchunks = (longest + chunk - 1) / chunk;
    int to = (r + 1) % n, from = (r - 1 + n) % n;
    for (size_t k = 0; k < nchunks; k++) {
        size_t o = k * chunk;
        for (int s = 0; s < n - 1; s++) {
            int bs = (r - s + n) % n, br = (r - s - 1 + n) % n;
            size_t ls = chunk_len(lay, bs, o, chunk), lr = chunk_len(lay, br, o, chunk);
            ds_comm_wait_ctx ctx = {.coll = coll, .phase = phase, .step = s, .nsteps = n - 1,
                                    .chunk = k, .nchunks = nchunks, .idle = idle};
            const unsigned char *sp = (s == 0 && own) ? own + o * es
                                                      : buf + (lay_off(lay, bs) + o) * es;
            DS_TRY(exchange(c, sp, ls * es, to, buf + (lay_off(lay, br) + o) * es, lr * es,
                            from, TAG_GATHER, &ctx));
            *sent += ls;
        }
    }
    return DS_OK;
}

static void count(ds_comm *c, ds_coll which, uint64_t elems, size_t es) {
    c->stats.calls[which]++;
    c->stats.elems_sent[which] += elems;
    c->stats.bytes_sent[which] += elems * es;
}

static ds_status mpi_all_reduce(ds_comm *c, void *buf, size_t n, ds_dtype t, ds_reduce_op op) {
    if (ds_comm_base(c)->broken) return broken_error(c, "all_reduce");
    size_t es = ds_dtype_size(t);
    layout lay = {.per = 0, .total = n, .world = c->world};
    unsigned char *b = buf;
    uint64_t sent = 0;
    ds_status st = ring_reduce_scatter(c, "all_reduce", b, b + lay_off(&lay, c->rank) * es, &lay,
                                       t, op, &sent);
    if (st == DS_OK)
        st = ring_all_gather(c, "all_reduce", "all-gather", b, NULL, NULL, &lay, es, &sent);
    count(c, DS_COLL_ALL_REDUCE, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_reduce_scatter(ds_comm *c, const void *send, void *recv, size_t n,
                                    ds_dtype t, ds_reduce_op op) {
    if (ds_comm_base(c)->broken) return broken_error(c, "reduce_scatter");
    size_t es = ds_dtype_size(t);
    layout lay = {.per = n, .total = n * (size_t)c->world, .world = c->world};
    uint64_t sent = 0;
    ds_status st = ring_reduce_scatter(c, "reduce_scatter", send, recv, &lay, t, op, &sent);
    count(c, DS_COLL_REDUCE_SCATTER, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_all_gather(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t) {
    if (ds_comm_base(c)->broken) return broken_error(c, "all_gather");
    size_t es = ds_dtype_size(t);
    unsigned char *mine = (unsigned char *)recv + (size_t)c->rank * n * es;
    /* Out of place, this rank's block is sent straight from `send` and copied
     * into place while the ring waits: at 2 ranks the copy is a third of the
     * memory traffic. Measured on 128 MiB blocks with vader copy-in/copy-out:
     * 1-15% faster than copying first (medians of 15, 3 runs); with CMA no
     * difference beyond the noise. */
    bool in_place = send == mine;
    ds_comm_idle_copy copy = {.dst = mine, .src = send, .left = in_place ? 0 : n * es};
    layout lay = {.per = n, .total = n * (size_t)c->world, .world = c->world};
    uint64_t sent = 0;
    ds_status st = ring_all_gather(c, "all_gather", NULL, recv, in_place ? NULL : send, &copy,
                                   &lay, es, &sent);
    if (copy.left) memcpy(copy.dst, copy.src, copy.left);
    count(c, DS_COLL_ALL_GATHER, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_broadcast(ds_comm *c, void *buf, size_t n, ds_dtype t, int root) {
    if (ds_comm_base(c)->broken) return broken_error(c, "broadcast");
    mpi_impl *m = c->impl;
    size_t es = ds_dtype_size(t);
    int w = c->world, r = c->rank;
    int pos = (r - root + w) % w; /* place in the chain, root = 0 */
    int from = (r - 1 + w) % w, to = (r + 1) % w;
    size_t bytes = n * es, chunk = m->chunk_bytes / es * es;
    size_t nchunks = (bytes + chunk - 1) / chunk;
    MPI_Comm comm = ds_comm_base(c)->comm;
    unsigned char *b = buf;
    /* Two sends in flight: chunk k goes out while chunk k+1 comes in. */
    MPI_Request sreq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int speers[2] = {to, to};
    bool ssend[2] = {false, false};
    uint64_t sent = 0;
    ds_status st = DS_OK;
    for (size_t k = 0; k < nchunks && st == DS_OK; k++) {
        size_t len = bytes - k * chunk < chunk ? bytes - k * chunk : chunk;
        ds_comm_wait_ctx ctx = {.coll = "broadcast", .step = pos, .nsteps = w - 1, .chunk = k,
                                .nchunks = nchunks};
        if (pos > 0) {
            MPI_Request rq = MPI_REQUEST_NULL;
            int rc = MPI_Irecv(b + k * chunk, (int)len, MPI_BYTE, from, TAG_BCAST, comm, &rq);
            if (rc != MPI_SUCCESS) {
                st = ds_comm_mpi_error(rc, "broadcast: MPI_Irecv", c);
                break;
            }
            bool yes = true;
            st = ds_comm_mpi_wait(c, &rq, &from, &yes, 1, &ctx);
            if (st != DS_OK) break;
        }
        if (pos < w - 1) {
            MPI_Request *slot = &sreq[k & 1];
            if (*slot != MPI_REQUEST_NULL) {
                st = ds_comm_mpi_wait(c, slot, &to, &ssend[0], 1, &ctx);
                if (st != DS_OK) break;
            }
            int rc = MPI_Isend(b + k * chunk, (int)len, MPI_BYTE, to, TAG_BCAST, comm, slot);
            if (rc != MPI_SUCCESS) {
                st = ds_comm_mpi_error(rc, "broadcast: MPI_Isend", c);
                break;
            }
            sent += len / es;
        }
    }
    if (st == DS_OK) {
        ds_comm_wait_ctx ctx = {.coll = "broadcast", .step = pos, .nsteps = w - 1,
                                .chunk = nchunks ? nchunks - 1 : 0, .nchunks = nchunks};
        st = ds_comm_mpi_wait(c, sreq, speers, ssend, 2, &ctx);
    } else {
        for (int i = 0; i < 2; i++)
            if (sreq[i] != MPI_REQUEST_NULL) MPI_Request_free(&sreq[i]);
        ds_comm_note_broken(c, false, st); /* the wait did already, or MPI_Isend/Irecv failed */
    }
    count(c, DS_COLL_BROADCAST, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_barrier(ds_comm *c) {
    if (ds_comm_base(c)->broken) return broken_error(c, "barrier");
    DS_TRY(ds_comm_mpi_barrier(c));
    return DS_OK;
}

static void mpi_destroy(ds_comm *c) {
    mpi_impl *m = c->impl;
    if (!m) return;
    ds_comm_mpi_shutdown(&m->base);
    if (!m->borrowed) ds_mem_host_free(m->mem, DS_MEM_BUFFERS, m->scratch, m->scratch_bytes);
    free(m);
    c->impl = NULL;
}

static ds_status mpi_reduce_scatterv(ds_comm *c, const void *send, void *recv,
                                     const size_t *counts, ds_dtype t, ds_reduce_op op) {
    if (ds_comm_base(c)->broken) return broken_error(c, "reduce_scatterv");
    size_t es = ds_dtype_size(t);
    layout lay = {.world = c->world, .counts = counts};
    uint64_t sent = 0;
    ds_status st = ring_reduce_scatter(c, "reduce_scatterv", send, recv, &lay, t, op, &sent);
    count(c, DS_COLL_REDUCE_SCATTER, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_all_gatherv(ds_comm *c, void *buf, const size_t *counts, ds_dtype t) {
    if (ds_comm_base(c)->broken) return broken_error(c, "all_gatherv");
    size_t es = ds_dtype_size(t);
    layout lay = {.world = c->world, .counts = counts};
    uint64_t sent = 0;
    ds_status st = ring_all_gather(c, "all_gatherv", NULL, buf, NULL, NULL, &lay, es, &sent);
    count(c, DS_COLL_ALL_GATHER, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_split(ds_comm *c, int color, int key, ds_comm **out);

/* Pairwise exchange: in step s (1..N-1) a rank sends block r+s and receives
 * from r-s, so every pair meets once and no rank waits on two peers; each
 * block goes in messages of at most chunk_bytes (MPI counts are ints). The
 * own block is copied while the first step waits. counts NULL: every block
 * is n elements (all_to_all); else block b of send is counts[b] elements
 * and every received block counts[rank] (all_to_allv). */
static ds_status pairwise(ds_comm *c, const char *coll, const void *send, void *recv,
                          const size_t *counts, size_t n, ds_dtype t) {
    if (ds_comm_base(c)->broken) return broken_error(c, coll);
    mpi_impl *m = c->impl;
    int w = c->world, r = c->rank;
    size_t es = ds_dtype_size(t);
    layout lay = {.per = n, .world = w, .counts = counts};
    size_t rbytes = lay_len(&lay, r) * es; /* every received block */
    const unsigned char *sb = send;
    unsigned char *rb = recv;
    ds_comm_idle_copy copy = {.dst = rb + (size_t)r * rbytes, .src = sb + lay_off(&lay, r) * es,
                              .left = rbytes};
    uint64_t sent = 0;
    ds_status st = DS_OK;
    for (int s = 1; s < w && st == DS_OK; s++) {
        int to = (r + s) % w, from = (r - s + w) % w;
        size_t sbytes = lay_len(&lay, to) * es, most = sbytes > rbytes ? sbytes : rbytes;
        size_t nchunks = most ? (most + m->chunk_bytes - 1) / m->chunk_bytes : 0;
        for (size_t k = 0; k < nchunks && st == DS_OK; k++) {
            size_t o = k * m->chunk_bytes;
            size_t ls = sbytes > o ? (sbytes - o < m->chunk_bytes ? sbytes - o : m->chunk_bytes) : 0;
            size_t lr = rbytes > o ? (rbytes - o < m->chunk_bytes ? rbytes - o : m->chunk_bytes) : 0;
            ds_comm_wait_ctx ctx = {.coll = coll, .phase = "exchange", .step = s - 1,
                                    .nsteps = w - 1, .chunk = k, .nchunks = nchunks,
                                    .idle = &copy};
            st = exchange(c, sb + lay_off(&lay, to) * es + o, ls, to, rb + (size_t)from * rbytes + o, lr, from,
                          TAG_A2A, &ctx);
            if (st == DS_OK) sent += ls / es;
        }
    }
    if (copy.left) memcpy(copy.dst, copy.src, copy.left);
    count(c, DS_COLL_ALL_TO_ALL, sent, es);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status mpi_all_to_all(ds_comm *c, const void *send, void *recv, size_t n, ds_dtype t) {
    return pairwise(c, "all_to_all", send, recv, NULL, n, t);
}

static ds_status mpi_all_to_allv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                                 ds_dtype t) {
    return pairwise(c, "all_to_allv", send, recv, counts, 0, t);
}

static const ds_comm_ops k_mpi_ops = {
    .split = mpi_split,
    .reduce_scatterv = mpi_reduce_scatterv,
    .all_gatherv = mpi_all_gatherv,
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .all_to_all = mpi_all_to_all,
    .all_to_allv = mpi_all_to_allv,
    .barrier = mpi_barrier,
    .destroy = mpi_destroy,
};

ds_status ds_comm_mpi_create(const ds_comm_desc *desc, ds_comm **out) {
    *out = NULL;
    size_t scratch = desc && desc->scratch_bytes ? desc->scratch_bytes : DS_COMM_DEFAULT_SCRATCH;
    size_t chunk = desc && desc->chunk_bytes ? desc->chunk_bytes : DS_COMM_DEFAULT_CHUNK;
    /* Two chunks live in the scratch; a chunk holds whole elements of every
     * type (multiple of 8) and fits one MPI message (an int count). */
    if (chunk > scratch / 2) chunk = scratch / 2;
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    chunk &= ~(size_t)7;
    if (chunk < 8)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "comm: scratch_bytes %zu too small (the ring needs two chunks of at least "
                      "8 bytes: at least 16)",
                      scratch);
    ds_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return DS_ERR(DS_ERR_OOM, "comm: out of host memory");
    }
    c->ops = &k_mpi_ops;
    c->impl = m;
    m->mem = desc && desc->backend ? desc->backend->mem : NULL;
    m->scratch_bytes = 2 * chunk;
    m->chunk_bytes = chunk;
    ds_status st = ds_mem_host_alloc(m->mem, DS_MEM_BUFFERS, m->scratch_bytes, "comm scratch",
                                     (void **)&m->scratch);
    if (st != DS_OK) {
        free(m);
        free(c);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* Touch every page now, so no collective ever faults one in. */
    memset(m->scratch, 0, m->scratch_bytes);
    st = ds_comm_mpi_boot("mpi", desc, c, &m->base);
    if (st != DS_OK) {
        ds_mem_host_free(m->mem, DS_MEM_BUFFERS, m->scratch, m->scratch_bytes);
        free(m);
        free(c);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = c;
    return DS_OK;
}

/* A sub-communicator rings through its world's scratch: nothing allocated,
 * nothing to account (ds_comm_split; comm.h's ownership rule keeps the two
 * from running at once). */
static ds_status mpi_split(ds_comm *c, int color, int key, ds_comm **out) {
    *out = NULL;
    const mpi_impl *pm = c->impl;
    ds_comm *s = calloc(1, sizeof *s);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!s || !m) {
        free(s);
        free(m);
        return DS_ERR(DS_ERR_OOM, "comm split: out of host memory");
    }
    s->ops = &k_mpi_ops;
    s->impl = m;
    m->scratch = pm->scratch;
    m->scratch_bytes = pm->scratch_bytes;
    m->chunk_bytes = pm->chunk_bytes;
    m->borrowed = true;
    ds_status st = ds_comm_mpi_split_boot(c, color, key, s, &m->base);
    if (st != DS_OK) {
        free(m);
        free(s);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = s;
    return DS_OK;
}
