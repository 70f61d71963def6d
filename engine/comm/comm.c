/* The comm front door: create dispatch, argument checks shared by every
 * implementation, ds_comm_agree, the host helpers (MPI's own collectives,
 * polled with the same deadline), and the stats. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda_plugin.h"
#include "engine/comm/comm_internal.h"
#include "engine/comm/comm_worker.h"

/* DS_CHECK_COLLECTIVES=1 turns the check on for any program; 0 or unset
 * leaves the description's choice. */
static ds_status env_check(bool *check) {
    const char *v = getenv("DS_CHECK_COLLECTIVES");
    if (!v || !*v || strcmp(v, "0") == 0) return DS_OK;
    if (strcmp(v, "1") != 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "DS_CHECK_COLLECTIVES=%s: expected 1 (check every "
                      "collective) or 0", v);
    *check = true;
    return DS_OK;
}

static ds_status create_kind(const ds_comm_desc *desc, ds_comm **out);

ds_status ds_comm_create(const ds_comm_desc *desc, ds_comm **out) {
    if (!out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_comm_create: out is NULL");
    *out = NULL;
    ds_comm_desc defaults = {.kind = DS_COMM_MPI};
    if (!desc) desc = &defaults;
    if (desc->timeout_s != desc->timeout_s) /* NaN would never expire */
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_comm_create: timeout_s is NaN");
    bool check = desc->check_collectives;
    /* NCCL's creation may fail on one rank after it has left the others
     * (engine.c's pick_comm agrees that over MPI), so an agreement here
     * would keep them until the deadline: an NCCL communicator checks as
     * its description says, and the engine passes its MPI communicator's
     * agreed choice */
    if (desc->kind != DS_COMM_NCCL) DS_TRY(env_check(&check));
    DS_TRY(create_kind(desc, out));
    ds_status st = desc->kind == DS_COMM_NCCL ? ds_comm_check_set(*out, check)
                                              : ds_comm_check_enable(*out, check);
    if (st != DS_OK) {
        ds_comm_destroy(*out);
        *out = NULL;
        return st;
    }
    return DS_OK;
}

static ds_status create_kind(const ds_comm_desc *desc, ds_comm **out) {
    switch (desc->kind) {
    case DS_COMM_MPI:
        if (desc->stage && !desc->backend)
            return DS_ERR(DS_ERR_INVALID_ARG, "ds_comm_create: stage needs the backend whose "
                          "memory the buffers are");
        DS_TRY(ds_comm_mpi_create(desc, out));
        if (desc->stage) {
            ds_status st = ds_comm_stage_wrap(*out, desc->backend);
            if (st != DS_OK) {
                ds_comm_destroy(*out);
                *out = NULL;
                ds_error_trace(__FILE__, __LINE__);
                return st;
            }
        }
        return DS_OK;
    case DS_COMM_NCCL: { /* in the CUDA module, opened at run time */
        if (desc->stage)
            return DS_ERR(DS_ERR_INVALID_ARG, "ds_comm_create: nccl reads device memory itself: "
                          "stage is for mpi");
        const ds_cuda_plugin *p;
        DS_TRY(ds_cuda_plugin_get(&p));
        DS_TRY(p->nccl_create(desc, out));
        return DS_OK;
    }
    default:
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_comm_create: unknown comm kind %d",
                      (int)desc->kind);
    }
}

void ds_comm_destroy(ds_comm *c) {
    if (!c) return;
    if (c->ops && c->ops->destroy) c->ops->destroy(c);
    free(c->peer_same_host);
    ds_comm_check_free(c);
    free(c);
}

void ds_comm_stats_reset(ds_comm *c) {
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

void ds_comm_stats_diff(const ds_comm_stats *now, const ds_comm_stats *then, ds_comm_stats *out) {
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        out->calls[k] = now->calls[k] - then->calls[k];
        out->elems_sent[k] = now->elems_sent[k] - then->elems_sent[k];
        out->bytes_sent[k] = now->bytes_sent[k] - then->bytes_sent[k];
        out->bytes_intra[k] = now->bytes_intra[k] - then->bytes_intra[k];
        out->bytes_inter[k] = now->bytes_inter[k] - then->bytes_inter[k];
        out->size_bytes[k] = now->size_bytes[k] - then->size_bytes[k];
        out->seconds[k] = now->seconds[k] - then->seconds[k];
    }
    out->wait_s = now->wait_s - then->wait_s;
    out->host_calls = now->host_calls - then->host_calls;
    out->host_bytes = now->host_bytes - then->host_bytes;
    out->host_seconds = now->host_seconds - then->host_seconds;
}

double ds_coll_busbw_factor(ds_coll which, int world) {
    double n = world > 0 ? (double)world : 1.0;
    switch (which) {
    case DS_COLL_ALL_REDUCE: return 2.0 * (n - 1.0) / n;
    case DS_COLL_REDUCE_SCATTER:
    case DS_COLL_ALL_GATHER:
    case DS_COLL_ALL_TO_ALL: return (n - 1.0) / n;
    default: return 1.0;
    }
}

const char *ds_coll_name(ds_coll which) {
    static const char *const names[DS_COLL_COUNT] = {"all_reduce", "reduce_scatter",
                                                     "all_gather", "broadcast",
                                                     "all_to_all"};
    return (int)which >= 0 && which < DS_COLL_COUNT ? names[which] : "?";
}

/* ---- counting: one place for every implementation ---------------------------
 * The implementations count calls and bytes sent; here each call's time,
 * size, and where its bytes went (the ring sends only to rank + 1, so the
 * call's new bytes are all inside or all across hosts). Two clock reads per
 * collective, about 40 ns against collectives of microseconds and more. */

typedef struct coll_mark {
    double t0;
    uint64_t calls0, elems0, sent0;
} coll_mark;

static coll_mark mark(const ds_comm *c, ds_coll which) {
    return (coll_mark){.t0 = ds_comm_now(), .calls0 = c->stats.calls[which],
                       .elems0 = c->stats.elems_sent[which],
                       .sent0 = c->stats.bytes_sent[which]};
}

/* intra: the bytes of `sent` that stayed on this host, or -1 for the ring's
 * rule (all of them go to rank + 1). */
static void account_split(ds_comm *c, ds_coll which, coll_mark m, size_t size_bytes,
                          int64_t intra) {
    double dt = ds_comm_now() - m.t0;
    uint64_t sent = c->stats.bytes_sent[which] - m.sent0;
    uint64_t in = intra < 0 ? (ds_comm_next_same_host(c) ? sent : 0) : (uint64_t)intra;
    if (in > sent) in = sent; /* a call that failed part way sent less */
    c->stats.bytes_intra[which] += in;
    c->stats.bytes_inter[which] += sent - in;
    c->stats.size_bytes[which] += size_bytes;
    c->stats.seconds[which] += dt;
    /* on the communication thread the time is hidden unless someone waits
     * for it, which comm_worker.c counts where they wait */
    bool waited = !ds_comm_worker_self();
    if (waited) c->stats.wait_s += dt;
    /* a sub-communicator's traffic is the rank's traffic too: the world
     * communicator's report holds every byte, by where its peer ran */
    ds_comm *r = c->root;
    if (!r) return;
    r->stats.calls[which] += c->stats.calls[which] - m.calls0;
    r->stats.elems_sent[which] += c->stats.elems_sent[which] - m.elems0;
    r->stats.bytes_sent[which] += sent;
    r->stats.bytes_intra[which] += in;
    r->stats.bytes_inter[which] += sent - in;
    r->stats.size_bytes[which] += size_bytes;
    r->stats.seconds[which] += dt;
    if (waited) r->stats.wait_s += dt;
}

static void account(ds_comm *c, ds_coll which, coll_mark m, size_t size_bytes) {
    account_split(c, which, m, size_bytes, -1);
}

/* ---- argument checks ------------------------------------------------------ */

static ds_status check_common(const ds_comm *c, const char *what, const void *p, size_t count,
                              ds_dtype t) {
    if (!c) return DS_ERR(DS_ERR_INVALID_ARG, "%s: communicator is NULL", what);
    if (ds_dtype_size(t) == 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: invalid dtype %d", what, (int)t);
    if (count && !p)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: buffer is NULL with count %zu", what, count);
    if (count > SIZE_MAX / ds_dtype_size(t) / (size_t)c->world)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: count %zu of %s overflows the address space",
                      what, count, ds_dtype_name(t));
    return DS_OK;
}

static ds_status check_op(const char *what, ds_reduce_op op) {
    if ((int)op < 0 || op > DS_REDUCE_MIN)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: invalid reduce op %d", what, (int)op);
    return DS_OK;
}

/* `small` (small_bytes) lies inside or beside `big` (big_bytes); the only
 * overlap allowed is small == big + allowed_off exactly. */
static ds_status check_alias(const char *what, const void *big, size_t big_bytes,
                             const void *small, size_t small_bytes, size_t allowed_off) {
    uintptr_t b = (uintptr_t)big, s = (uintptr_t)small;
    if (!big_bytes || !small_bytes) return DS_OK;
    if (s + small_bytes <= b || b + big_bytes <= s) return DS_OK;
    if (s == b + allowed_off) return DS_OK;
    return DS_ERR(DS_ERR_INVALID_ARG,
                  "%s: send and receive buffers overlap other than in place (the rank's own "
                  "block at offset %zu bytes)",
                  what, allowed_off);
}

/* One owner of the communicator: while a communication thread holds it, a
 * collective from any other thread waits until that thread's queue is empty
 * (comm_worker.h), so two threads never use it at once. The thread's own
 * jobs come through here too and pass straight on. */
static void enter(ds_comm *c) {
    /* a sub-communicator belongs to its world communicator's thread */
    ds_comm_worker *w = ds_comm_base(c->root ? c->root : c)->worker;
    if (w) ds_comm_worker_wait_idle(w);
}

/* ---- the data path ---------------------------------------------------------- */

ds_status ds_comm_all_reduce(ds_comm *c, void *buf, size_t count, ds_dtype t, ds_reduce_op op) {
    DS_TRY(check_common(c, "all_reduce", buf, count, t));
    DS_TRY(check_op("all_reduce", op));
    enter(c);
    DS_TRY(ds_comm_check_call(c, "all_reduce", (int)t, (int)op, -1, count, NULL));
    coll_mark m = mark(c, DS_COLL_ALL_REDUCE);
    ds_status st = c->ops->all_reduce(c, buf, count, t, op);
    account(c, DS_COLL_ALL_REDUCE, m, count * ds_dtype_size(t));
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_comm_reduce_scatter(ds_comm *c, const void *send, void *recv, size_t count,
                                 ds_dtype t, ds_reduce_op op) {
    DS_TRY(check_common(c, "reduce_scatter", send, count, t));
    DS_TRY(check_common(c, "reduce_scatter", recv, count, t));
    DS_TRY(check_op("reduce_scatter", op));
    size_t es = ds_dtype_size(t);
    DS_TRY(check_alias("reduce_scatter", send, count * es * (size_t)c->world, recv, count * es,
                       (size_t)c->rank * count * es));
    enter(c);
    DS_TRY(ds_comm_check_call(c, "reduce_scatter", (int)t, (int)op, -1, count, NULL));
    coll_mark m = mark(c, DS_COLL_REDUCE_SCATTER);
    ds_status st = c->ops->reduce_scatter(c, send, recv, count, t, op);
    account(c, DS_COLL_REDUCE_SCATTER, m, count * es * (size_t)c->world);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_comm_all_gather(ds_comm *c, const void *send, void *recv, size_t count, ds_dtype t) {
    DS_TRY(check_common(c, "all_gather", send, count, t));
    DS_TRY(check_common(c, "all_gather", recv, count, t));
    size_t es = ds_dtype_size(t);
    DS_TRY(check_alias("all_gather", recv, count * es * (size_t)c->world, send, count * es,
                       (size_t)c->rank * count * es));
    enter(c);
    DS_TRY(ds_comm_check_call(c, "all_gather", (int)t, -1, -1, count, NULL));
    coll_mark m = mark(c, DS_COLL_ALL_GATHER);
    ds_status st = c->ops->all_gather(c, send, recv, count, t);
    account(c, DS_COLL_ALL_GATHER, m, count * es * (size_t)c->world);
    DS_TRY(st);
    return DS_OK;
}

static size_t sum_counts(const ds_comm *c, const size_t *counts) {
    size_t n = 0;
    for (int r = 0; r < c->world; r++) n += counts[r];
    return n;
}

ds_status ds_comm_reduce_scatterv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                                  ds_dtype t, ds_reduce_op op) {
    if (!counts) return DS_ERR(DS_ERR_INVALID_ARG, "reduce_scatterv: counts is NULL");
    size_t total = sum_counts(c, counts), mine = counts[c->rank];
    DS_TRY(check_common(c, "reduce_scatterv", send, total, t));
    DS_TRY(check_common(c, "reduce_scatterv", recv, mine, t));
    DS_TRY(check_op("reduce_scatterv", op));
    size_t es = ds_dtype_size(t), off = 0;
    for (int r = 0; r < c->rank; r++) off += counts[r];
    DS_TRY(check_alias("reduce_scatterv", send, total * es, recv, mine * es, off * es));
    enter(c);
    DS_TRY(ds_comm_check_call(c, "reduce_scatterv", (int)t, (int)op, -1, total, counts));
    coll_mark m = mark(c, DS_COLL_REDUCE_SCATTER);
    ds_status st = c->ops->reduce_scatterv(c, send, recv, counts, t, op);
    account(c, DS_COLL_REDUCE_SCATTER, m, total * es);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_comm_all_gatherv(ds_comm *c, void *buf, const size_t *counts, ds_dtype t) {
    if (!counts) return DS_ERR(DS_ERR_INVALID_ARG, "all_gatherv: counts is NULL");
    size_t total = sum_counts(c, counts);
    DS_TRY(check_common(c, "all_gatherv", buf, total, t));
    enter(c);
    DS_TRY(ds_comm_check_call(c, "all_gatherv", (int)t, -1, -1, total, counts));
    coll_mark m = mark(c, DS_COLL_ALL_GATHER);
    ds_status st = c->ops->all_gatherv(c, buf, counts, t);
    account(c, DS_COLL_ALL_GATHER, m, total * ds_dtype_size(t));
    DS_TRY(st);
    return DS_OK;
}

/* all_to_all (counts NULL: every block `count` elements) and all_to_allv. */
static ds_status personalised(ds_comm *c, const char *what, const void *send, void *recv,
                              const size_t *counts, size_t count, ds_dtype t) {
    if (!c) return DS_ERR(DS_ERR_INVALID_ARG, "%s: communicator is NULL", what);
    /* send: the blocks back to back; recv: world blocks of this rank's size */
    size_t mine = counts ? counts[c->rank] : count, es = ds_dtype_size(t);
    size_t total = counts ? sum_counts(c, counts) : count * (size_t)c->world;
    DS_TRY(check_common(c, what, send, counts ? total : count, t));
    DS_TRY(check_common(c, what, recv, mine, t));
    size_t sbytes = total * es, rbytes = mine * (size_t)c->world * es;
    uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
    if (sbytes && rbytes && s < r + rbytes && r < s + sbytes)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: send and receive buffers overlap", what);
    /* the blocks for ranks on this host; every block travels straight to
     * its rank (pairwise exchange), so this is exact */
    int64_t intra = -1;
    if (c->peer_same_host) {
        intra = 0;
        for (int b = 0; b < c->world; b++)
            if (b != c->rank && c->peer_same_host[b])
                intra += (int64_t)((counts ? counts[b] : count) * es);
    }
    enter(c);
    DS_TRY(ds_comm_check_call(c, what, (int)t, -1, -1, total, counts));
    coll_mark m = mark(c, DS_COLL_ALL_TO_ALL);
    ds_status st = counts ? c->ops->all_to_allv(c, send, recv, counts, t)
                          : c->ops->all_to_all(c, send, recv, count, t);
    account_split(c, DS_COLL_ALL_TO_ALL, m, sbytes, intra);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_comm_all_to_all(ds_comm *c, const void *send, void *recv, size_t count, ds_dtype t) {
    DS_TRY(personalised(c, "all_to_all", send, recv, NULL, count, t));
    return DS_OK;
}

ds_status ds_comm_all_to_allv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                              ds_dtype t) {
    if (!counts) return DS_ERR(DS_ERR_INVALID_ARG, "all_to_allv: counts is NULL");
    DS_TRY(personalised(c, "all_to_allv", send, recv, counts, 0, t));
    return DS_OK;
}

ds_status ds_comm_broadcast(ds_comm *c, void *buf, size_t count, ds_dtype t, int root) {
    DS_TRY(check_common(c, "broadcast", buf, count, t));
    if (root < 0 || root >= c->world)
        return DS_ERR(DS_ERR_INVALID_ARG, "broadcast: root %d is not a rank of a world of %d",
                      root, c->world);
    enter(c);
    DS_TRY(ds_comm_check_call(c, "broadcast", (int)t, -1, root, count, NULL));
    coll_mark m = mark(c, DS_COLL_BROADCAST);
    ds_status st = c->ops->broadcast(c, buf, count, t, root);
    account(c, DS_COLL_BROADCAST, m, count * ds_dtype_size(t));
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_comm_split(ds_comm *c, int color, int key, ds_comm **out) {
    if (!out) return DS_ERR(DS_ERR_INVALID_ARG, "comm split: out is NULL");
    *out = NULL;
    if (!c) return DS_ERR(DS_ERR_INVALID_ARG, "comm split: communicator is NULL");
    if (color < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "comm split: color %d is negative (every rank joins "
                      "one group)", color);
    if (!c->ops->split)
        return DS_ERR(DS_ERR_INVALID_ARG, "comm split: the %s communicator cannot split",
                      c->ops->name);
    enter(c);
    /* colors and keys differ by rank: only that every rank splits */
    DS_TRY(ds_comm_check_call(c, "split", -1, -1, -1, 0, NULL));
    DS_TRY(c->ops->split(c, color, key, out));
    (*out)->root = c->root ? c->root : c;
    ds_status st = ds_comm_check_enable(*out, c->check_recs != NULL);
    if (st != DS_OK) {
        ds_comm_destroy(*out);
        *out = NULL;
        return st;
    }
    return DS_OK;
}

uint32_t ds_comm_sequence(ds_comm *c) {
    if (!c) return 0;
    enter(c); /* the communication thread's calls are in, and none is running */
    uint32_t h = c->seq_hash;
    c->seq_hash = 0; /* the next call starts the next stretch */
    return h;
}

ds_status ds_comm_barrier(ds_comm *c) {
    if (!c) return DS_ERR(DS_ERR_INVALID_ARG, "barrier: communicator is NULL");
    enter(c);
    DS_TRY(ds_comm_check_call(c, "barrier", -1, -1, -1, 0, NULL));
    DS_TRY(c->ops->barrier(c));
    return DS_OK;
}

/* ---- host helpers: MPI's own collectives, polled under the deadline ------- */

static ds_status host_ready(ds_comm *c, const char *what) {
    enter(c);
    const ds_comm_mpi_base *b = ds_comm_base(c);
    if (b->coll_broken && b->failure != DS_OK) /* repeat the failure that broke it */
        return DS_ERR(b->failure, "%s", b->failure_msg);
    if (b->coll_broken)
        return DS_ERR(DS_ERR_COMM,
                      "%s: rank %d's host collectives are unusable after an earlier timeout; "
                      "destroy the communicator",
                      what, c->rank);
    return DS_OK;
}

/* Waits for one MPI collective of `bytes` bytes started at t0, and counts
 * it (ds_comm_stats.host_*; the caller's thread waited for all of it). */
static ds_status host_wait(ds_comm *c, MPI_Request *req, const char *what, double t0,
                           size_t bytes) {
    int peer = -1;
    bool is_recv = true;
    ds_comm_wait_ctx ctx = {.coll = what, .collective = true};
    ds_status st = ds_comm_mpi_wait(c, req, &peer, &is_recv, 1, &ctx);
    double dt = ds_comm_now() - t0;
    c->stats.host_calls++;
    c->stats.host_bytes += bytes;
    c->stats.host_seconds += dt;
    if (!ds_comm_worker_self()) c->stats.wait_s += dt;
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_comm_host_all_reduce(ds_comm *c, void *buf, size_t count, ds_dtype t,
                                  ds_reduce_op op) {
    const char *what = "host_all_reduce";
    DS_TRY(check_common(c, what, buf, count, t));
    DS_TRY(check_op(what, op));
    if (count > INT_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: count %zu exceeds MPI's int count (for metadata; "
                      "use ds_comm_all_reduce for data)", what, count);
    DS_TRY(host_ready(c, what));
    DS_TRY(ds_comm_check_call(c, what, (int)t, (int)op, -1, count, NULL));
    if (count == 0) return DS_OK;
    MPI_Datatype dt;
    MPI_Op mop;
    DS_TRY(ds_comm_mpi_dtype(t, &dt));
    DS_TRY(ds_comm_mpi_op(t, op, &mop));
    MPI_Request req;
    double t0 = ds_comm_now();
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, dt, mop, ds_comm_base(c)->comm, &req);
    if (rc != MPI_SUCCESS) return ds_comm_mpi_error(rc, "host_all_reduce: MPI_Iallreduce", c);
    DS_TRY(host_wait(c, &req, what, t0, count * ds_dtype_size(t)));
    return DS_OK;
}

ds_status ds_comm_host_broadcast(ds_comm *c, void *buf, size_t bytes, int root) {
    const char *what = "host_broadcast";
    DS_TRY(check_common(c, what, buf, bytes, DS_U8));
    if (root < 0 || root >= c->world)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: root %d is not a rank of a world of %d", what,
                      root, c->world);
    if (bytes > INT_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: %zu bytes exceed MPI's int count", what, bytes);
    DS_TRY(host_ready(c, what));
    DS_TRY(ds_comm_check_call(c, what, (int)DS_U8, -1, root, bytes, NULL));
    if (bytes == 0) return DS_OK;
    MPI_Request req;
    double t0 = ds_comm_now();
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, ds_comm_base(c)->comm, &req);
    if (rc != MPI_SUCCESS) return ds_comm_mpi_error(rc, "host_broadcast: MPI_Ibcast", c);
    DS_TRY(host_wait(c, &req, what, t0, bytes));
    return DS_OK;
}

static ds_status agree(ds_comm *c, ds_status local, ds_status *out_worst, bool one_message) {
    if (!out_worst) return DS_ERR(DS_ERR_INVALID_ARG, "agree: out_worst is NULL");
    *out_worst = local;
    if (!c) return DS_ERR(DS_ERR_INVALID_ARG, "agree: communicator is NULL");
    DS_TRY(host_ready(c, "agree"));
    DS_TRY(ds_comm_check_call(c, "agree", -1, -1, -1, 0, NULL));
    /* (status, rank) under MAXLOC: the worst status and the lowest rank that
     * has it, so a rank that was fine can say who was not. */
    int pair[2] = {(int)local, c->rank};
    MPI_Request req;
    double t0 = ds_comm_now();
    int rc = MPI_Iallreduce(MPI_IN_PLACE, pair, 1, MPI_2INT, MPI_MAXLOC, ds_comm_base(c)->comm,
                            &req);
    if (rc != MPI_SUCCESS) return ds_comm_mpi_error(rc, "agree: MPI_Iallreduce", c);
    /* Keep the local failure's message: if the agreement itself fails the
     * caller reports the communication error (returned) and still knows its
     * own status through *out_worst. */
    DS_TRY(host_wait(c, &req, "agree", t0, sizeof pair));
    *out_worst = (ds_status)pair[0];
    if (pair[0] == DS_OK) return DS_OK;
    /* Somebody failed (every rank knows it, so every rank joins): that rank
     * sends its message, so the others can say why, not only who. */
    char msg[1024] = {0};
    if (c->rank == pair[1]) snprintf(msg, sizeof msg, "%s", ds_last_error());
    MPI_Request breq;
    t0 = ds_comm_now();
    rc = MPI_Ibcast(msg, (int)sizeof msg, MPI_BYTE, pair[1], ds_comm_base(c)->comm, &breq);
    if (rc != MPI_SUCCESS) return ds_comm_mpi_error(rc, "agree: MPI_Ibcast", c);
    DS_TRY(host_wait(c, &breq, "agree", t0, sizeof msg));
    msg[sizeof msg - 1] = '\0';
    if (local == DS_OK || (one_message && c->rank != pair[1]))
        DS_ERR((ds_status)pair[0], "rank %d failed with %s: %s", pair[1],
               ds_status_to_string((ds_status)pair[0]), msg);
    return DS_OK;
}

ds_status ds_comm_agree(ds_comm *c, ds_status local, ds_status *out_worst) {
    DS_TRY(agree(c, local, out_worst, false));
    return DS_OK;
}

ds_status ds_comm_agree_one(ds_comm *c, ds_status local, ds_status *out_worst) {
    DS_TRY(agree(c, local, out_worst, true));
    return DS_OK;
}
