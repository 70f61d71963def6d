/* Checked collectives (ds_comm_desc.check_collectives, DS_CHECK_COLLECTIVES):
 * before each collective, every rank shows the others what it is about to
 * call, so a program whose ranks took different paths fails at the first
 * call where they part, naming both calls, instead of meeting in a
 * mismatched collective: a wait until the deadline that names a rank but
 * not the cause, an MPI truncation error, or, where the sizes happen to
 * agree, sums of unrelated buffers that nobody notices.
 *
 * The exchange: every rank sends a fixed record to every other rank, by
 * point-to-point messages of a tag of their own on the communicator's MPI
 * side (also under NCCL), polled under the communicator's deadline. Not
 * MPI's all-gather: a wait for a rank that never comes must still name that
 * rank, as the data path's rings do, and MPI's collectives do not say who
 * is late. world - 1 messages each way per rank, for a mode that finds
 * faults; they are not in ds_comm_stats, which keep counting the program's
 * own collectives. Every rank compares every record with rank 0's, so all of them
 * reach the same verdict and return the same message: the ranks stay in
 * step and the communicator stays usable.
 *
 * Whether to check is agreed when the communicator is made (any rank's
 * choice turns it on for all): a rank that checks while another does not
 * would send records nobody receives. The environment differs between hosts
 * unless the launcher forwards it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm_internal.h"

/* What one rank shows. Only name, dtype, op, root and the counts are
 * compared: the context (`what`) is shown, not compared, since nothing
 * requires two ranks to describe the same call alike. */
typedef struct call_rec {
    char name[24];
    int32_t dtype, op, root, n_counts;
    uint64_t count;       /* elements; the sum of the counts for the v calls */
    uint64_t counts_hash; /* FNV-1a (32 bits) over every count; 0 without counts */
    uint64_t counts[4];   /* the first counts, for the message */
    char what[112];       /* the thread's ds_comm_set_context, cut */
} call_rec;

enum { TAG_CHECK = 9 }; /* beside mpi.c's 1-4 and the barrier's 7 */

/* FNV-1a, 32 bits, continuing from h (2166136261 to start). */
static uint32_t fnv(uint32_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* What a check needs, allocated once: every rank's record and the
 * requests of one exchange. */
typedef struct check_state {
    call_rec *recs; /* [world] */
    MPI_Request *reqs;
    int *peers;
    bool *is_recv;
} check_state;

static void free_state(check_state *s) {
    if (!s) return;
    free(s->recs);
    free(s->reqs);
    free(s->peers);
    free(s->is_recv);
    free(s);
}

void ds_comm_check_free(ds_comm *c) {
    free_state(c->check_recs);
    c->check_recs = NULL;
}

ds_status ds_comm_check_set(ds_comm *c, bool on) {
    ds_comm_check_free(c);
    c->check_calls = 0;
    if (!on || c->world < 2) return DS_OK;
    size_t n = 2 * (size_t)(c->world - 1);
    check_state *s = calloc(1, sizeof *s);
    if (s) {
        s->recs = calloc((size_t)c->world, sizeof *s->recs);
        s->reqs = calloc(n, sizeof *s->reqs);
        s->peers = calloc(n, sizeof *s->peers);
        s->is_recv = calloc(n, sizeof *s->is_recv);
    }
    if (!s || !s->recs || !s->reqs || !s->peers || !s->is_recv) {
        free_state(s);
        return DS_ERR(DS_ERR_OOM, "check_collectives: no memory for %d ranks' records",
                      c->world);
    }
    c->check_recs = s;
    return DS_OK;
}

ds_status ds_comm_check_enable(ds_comm *c, bool on) {
    int any = on; /* the ranks agree: any rank's choice turns it on for all */
    if (c->world > 1) {
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, ds_comm_base(c)->comm,
                                &req);
        if (rc != MPI_SUCCESS)
            return ds_comm_mpi_error(rc, "check_collectives: MPI_Iallreduce", c);
        int peer = -1;
        bool is_recv = true;
        ds_comm_wait_ctx ctx = {.coll = "agreeing on check_collectives", .collective = true};
        DS_TRY(ds_comm_mpi_wait(c, &req, &peer, &is_recv, 1, &ctx));
    }
    DS_TRY(ds_comm_check_set(c, any != 0));
    return DS_OK;
}

static bool same_call(const call_rec *a, const call_rec *b) {
    return strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root && a->count == b->count && a->counts_hash == b->counts_hash;
}

static const char *op_name(int op) {
    switch (op) {
    case DS_REDUCE_SUM: return "sum";
    case DS_REDUCE_MAX: return "max";
    case DS_REDUCE_MIN: return "min";
    default: return NULL;
    }
}

/* "reduce_scatterv of 4096 bf16 (sum; counts 2048, 2048) for <what>" */
static void describe(const call_rec *r, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s", r->name);
    if (r->dtype >= 0 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, " of %llu %s", (unsigned long long)r->count,
                              ds_dtype_name((ds_dtype)r->dtype));
    const char *op = op_name(r->op);
    bool paren = op || r->root >= 0 || r->n_counts > 0;
    if (paren && n < cap) n += (size_t)snprintf(buf + n, cap - n, " (");
    const char *sep = "";
    if (op && n < cap) {
        n += (size_t)snprintf(buf + n, cap - n, "%s", op);
        sep = "; ";
    }
    if (r->root >= 0 && n < cap) {
        n += (size_t)snprintf(buf + n, cap - n, "%sroot %d", sep, (int)r->root);
        sep = "; ";
    }
    if (r->n_counts > 0 && n < cap) {
        n += (size_t)snprintf(buf + n, cap - n, "%scounts", sep);
        int shown = r->n_counts < 4 ? r->n_counts : 4;
        for (int i = 0; i < shown && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s %llu", i ? "," : "",
                                  (unsigned long long)r->counts[i]);
        if (r->n_counts > shown && n < cap) n += (size_t)snprintf(buf + n, cap - n, ", ...");
    }
    if (paren && n < cap) n += (size_t)snprintf(buf + n, cap - n, ")");
    if (r->what[0] && n < cap) snprintf(buf + n, cap - n, " for %s", r->what);
}

/* The world communicator's running hash (ds_comm_sequence). */
static void note_sequence(ds_comm *c, const char *name, int dtype, int op, int root,
                          size_t count, const size_t *counts) {
    if (c->root) return; /* a sub-communicator: its group's calls, not every rank's */
    uint64_t f[4] = {(uint64_t)(uint32_t)dtype, (uint64_t)(uint32_t)op,
                     (uint64_t)(uint32_t)root, (uint64_t)count};
    uint32_t h = c->seq_hash ? c->seq_hash : 2166136261u;
    h = fnv(h, name, strlen(name));
    h = fnv(h, f, sizeof f);
    if (counts) h = fnv(h, counts, (size_t)c->world * sizeof *counts);
    c->seq_hash = h;
}

/* The exchange and the comparison (ds_comm_check_call). */
static ds_status check(ds_comm *c, const char *name, int dtype, int op, int root, size_t count,
                       const size_t *counts) {
    check_state *s = c->check_recs;
    /* built where it is sent from: the heap record outlives a wait
     * abandoned at the deadline, which MPI may still read */
    call_rec *all = s->recs, *mine = &all[c->rank];
    memset(mine, 0, sizeof *mine);
    snprintf(mine->name, sizeof mine->name, "%s", name);
    mine->dtype = dtype;
    mine->op = op;
    mine->root = root;
    mine->count = (uint64_t)count;
    if (counts) {
        mine->n_counts = c->world;
        mine->counts_hash = fnv(2166136261u, counts, (size_t)c->world * sizeof *counts);
        for (int i = 0; i < 4 && i < c->world; i++) mine->counts[i] = (uint64_t)counts[i];
    }
    const char *what = ds_comm_context();
    if (what) snprintf(mine->what, sizeof mine->what, "%s", what);
    uint64_t call = ++c->check_calls;

    /* receives first, from every other rank, then the sends */
    MPI_Comm comm = ds_comm_base(c)->comm;
    int n = 0, rc = MPI_SUCCESS;
    for (int r = 0; r < c->world && rc == MPI_SUCCESS; r++)
        if (r != c->rank) {
            s->peers[n] = r;
            s->is_recv[n] = true;
            rc = MPI_Irecv(&all[r], (int)sizeof *mine, MPI_BYTE, r, TAG_CHECK, comm, &s->reqs[n++]);
        }
    for (int r = 0; r < c->world && rc == MPI_SUCCESS; r++)
        if (r != c->rank) {
            s->peers[n] = r;
            s->is_recv[n] = false;
            rc = MPI_Isend(mine, (int)sizeof *mine, MPI_BYTE, r, TAG_CHECK, comm, &s->reqs[n++]);
        }
    char coll[64];
    snprintf(coll, sizeof coll, "the collective check before %s", name);
    if (rc != MPI_SUCCESS) {
        /* what was posted must not stay pending: wait for it under the deadline */
        s->reqs[n - 1] = MPI_REQUEST_NULL;
        (void)ds_comm_mpi_wait(c, s->reqs, s->peers, s->is_recv, n,
                               &(ds_comm_wait_ctx){.coll = coll});
        return ds_comm_mpi_error(rc, coll, c);
    }
    ds_comm_wait_ctx ctx = {.coll = coll};
    ds_status st = ds_comm_mpi_wait(c, s->reqs, s->peers, s->is_recv, n, &ctx);
    DS_TRY(st);

    for (int r = 1; r < c->world; r++) {
        all[r].name[sizeof all[r].name - 1] = all[r].what[sizeof all[r].what - 1] = '\0';
        if (same_call(&all[0], &all[r])) continue;
        all[0].name[sizeof all[0].name - 1] = all[0].what[sizeof all[0].what - 1] = '\0';
        char a[320], b[320];
        describe(&all[0], a, sizeof a);
        describe(&all[r], b, sizeof b);
        return DS_ERR(DS_ERR_COMM, "collective mismatch at call %llu on a communicator of %d "
                      "ranks: rank 0 called %s, but rank %d called %s (every rank must make the "
                      "same collective calls in the same order; found by check_collectives)",
                      (unsigned long long)call, c->world, a, r, b);
    }
    return DS_OK;
}

ds_status ds_comm_check_call(ds_comm *c, const char *name, int dtype, int op, int root,
                             size_t count, const size_t *counts) {
    /* off, or either path already failed (the exchange is point-to-point:
     * after an abandoned wait a late record could meet the wrong call): the
     * call itself then repeats why */
    const ds_comm_mpi_base *b = ds_comm_base(c);
    if (c->check_recs && !b->broken && !b->coll_broken)
        DS_TRY(check(c, name, dtype, op, root, count, counts));
    /* only a call the ranks go on to make: after a mismatch they all stop
     * at the same point, their sequences still alike */
    note_sequence(c, name, dtype, op, root, count, counts);
    return DS_OK;
}
