/* Inside engine/comm only: the MPI bootstrap every implementation shares.
 *
 * Both implementations (mpi.c, nccl.c) keep an MPI communicator for barriers,
 * the host helpers and ds_comm_agree. Their impl structs therefore BEGIN with
 * a ds_comm_mpi_base, so comm.c can reach it through c->impl without knowing
 * which implementation it talks to. */
#ifndef DS_COMM_COMM_INTERNAL_H
#define DS_COMM_COMM_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>

#include "engine/comm/comm.h"

struct ds_comm_worker;

typedef struct ds_comm_mpi_base {
    MPI_Comm comm;     /* a duplicate of MPI_COMM_WORLD, errors returned not fatal */
    bool initialised;  /* comm is held (freed by ds_comm_mpi_shutdown) */
    bool broken;       /* a point-to-point wait timed out or failed: requests were
                        * abandoned, the data path cannot be trusted any more */
    bool coll_broken;  /* the same for MPI's own collectives (host helpers) */
    /* The first failure that broke either path, kept so that every later
     * refusal repeats it: the first failure is the one that knows the peer
     * and the operation, a later "not attempted" knows nothing. */
    ds_status failure;       /* DS_OK until then */
    char failure_msg[1024];
    /* The communication thread that owns this communicator while it exists
     * (comm_worker.h); collectives from any other thread wait for its queue
     * to be empty first, so two threads never use the communicator at once. */
    struct ds_comm_worker *worker;
    /* A split's ranks as the job numbers them (ds_comm_job_rank); NULL for
     * the job's own communicator. */
    int *job_rank;
} ds_comm_mpi_base;

static inline ds_comm_mpi_base *ds_comm_base(ds_comm *c) { return (ds_comm_mpi_base *)c->impl; }

/* Record that communicator c cannot be trusted any more: `collective` says
 * which path (MPI's own collectives, or the point-to-point data path) has
 * abandoned requests. Keeps `st` and the current error message as the
 * communicator's first failure (only the first is kept) and marks the
 * process: at exit it ends the job with MPI_Abort instead of MPI_Finalize
 * (ds_comm_process_failed). Call it right after DS_ERR recorded the failure. */
void ds_comm_note_broken(ds_comm *c, bool collective, ds_status st);

/* This thread's context (ds_comm_set_context), or NULL. */
const char *ds_comm_context(void);
/* "coll", or "coll of <context>" when this thread named one: how failure
 * messages name the operation. */
void ds_comm_op_name(const char *coll, char *buf, size_t cap);

/* Initialise MPI if nobody has (MPI_THREAD_MULTIPLE requested, SERIALIZED
 * accepted; finalised at exit when the library initialised it), check that
 * the launcher's environment agrees with MPI_COMM_WORLD, and fill
 * c->rank/world/local_rank/source/timeout_s and base->comm. `who` ("mpi",
 * "nccl") prefixes messages. On failure base holds nothing; MPI stays
 * initialised (it cannot be initialised twice), so a later create can retry. */
ds_status ds_comm_mpi_boot(const char *who, const ds_comm_desc *desc, ds_comm *c,
                           ds_comm_mpi_base *base);
/* A sub-communicator's MPI side (ds_comm_split): MPI_Comm_split of
 * parent's communicator by (color, key), errors returned, and c's rank,
 * world, the ranks' hosts (nhosts, peer_same_host), deadline, source
 * and local rank (the process's, from parent). Collective over parent. */
ds_status ds_comm_mpi_split_boot(ds_comm *parent, int color, int key, ds_comm *c,
                                 ds_comm_mpi_base *base);
/* Free base->comm. MPI itself is finalised at exit, and only when the
 * library was the one to initialise it. */
void ds_comm_mpi_shutdown(ds_comm_mpi_base *base);

/* A copy nothing in flight depends on, done a slice at a time while a rank
 * waits for its messages (ds_comm_mpi_wait): on a host the transport's copies
 * and this one share the core, and the waits have idle time to fill. */
typedef struct ds_comm_idle_copy {
    unsigned char *dst;
    const unsigned char *src;
    size_t left; /* bytes still to copy; the caller finishes what is left */
} ds_comm_idle_copy;

/* What a wait is for, so a timeout can say where it stood. */
typedef struct ds_comm_wait_ctx {
    const char *coll;   /* "all_reduce" */
    const char *phase;  /* "reduce-scatter", or NULL */
    int step, nsteps;   /* 0-based step of the phase, steps per chunk */
    size_t chunk, nchunks;
    bool collective;    /* requests of an MPI collective (peers unknown: -1) */
    ds_comm_idle_copy *idle; /* optional work while waiting */
} ds_comm_wait_ctx;

/* Complete n requests (MPI_REQUEST_NULL entries allowed) by polling MPI_Test
 * until c->timeout_s passes without all of them completing. peers[i] is the
 * rank request i talks to, is_recv[i] whether it is a receive: a timeout
 * names the first pending receive's peer (else the first pending send's),
 * cancels/frees the pending requests, marks the communicator broken and
 * returns DS_ERR_TIMEOUT. MPI errors return DS_ERR_COMM with MPI's text. */
ds_status ds_comm_mpi_wait(ds_comm *c, MPI_Request *reqs, const int *peers, const bool *is_recv,
                           int n, const ds_comm_wait_ctx *ctx);

/* rollcall.c: rank r of c as the job numbers it (a split's ranks are its
 * own: messages name the job's). */
int ds_comm_job_rank(ds_comm *c, int r);
/* After a timeout, every live rank of c (they time out in the same
 * collective within a poll of each other) sends each other rank a word and
 * listens up to grace_s: the ranks whose word did not come (job numbers)
 * into absent[0..cap); returns how many, or -1 when MPI failed. A rank in
 * none of it answers nothing: that is the point. */
int ds_comm_roll_call(ds_comm *c, double grace_s, int *absent, int cap);
/* The grace a roll call listens for: half the deadline, 1 to 10 s (every
 * live rank timed out within a poll of the others; the wait only lasts
 * that long when some rank is absent). */
double ds_comm_roll_call_grace(double timeout_s);

/* Barrier by dissemination over zero-byte messages (log2(world) rounds), so a
 * timeout can name the rank that did not arrive. */
ds_status ds_comm_mpi_barrier(ds_comm *c);

/* MPI's text for an error code, "MPI_Isend: MPI_ERR_TRUNCATE: ..." style. */
ds_status ds_comm_mpi_error(int code, const char *what, const ds_comm *c);

/* MPI datatype and op for the host helpers (MPI's own collectives). F16 and
 * BF16 use datatypes and ops this library registers at boot (fp32
 * accumulation of each pair, one rounding, like the data path). */
ds_status ds_comm_mpi_dtype(ds_dtype t, MPI_Datatype *out);
ds_status ds_comm_mpi_op(ds_dtype t, ds_reduce_op op, MPI_Op *out);

/* Elements rank `rank` sends in a ring all_reduce of `count` elements over
 * `world` ranks with blocks of count/world (the first count%world blocks one
 * longer): everything but its own block in the reduce-scatter phase, and
 * everything but block rank+1 in the all-gather phase. The NCCL
 * implementation reports this, since NCCL does not say what it sent. */
uint64_t ds_comm_ring_all_reduce_elems(size_t count, int world, int rank);

/* Block b of `count` elements cut into `world` nearly equal blocks. */
static inline size_t ds_comm_block_off(size_t count, int world, int b) {
    size_t base = count / (size_t)world, rem = count % (size_t)world;
    return (size_t)b * base + ((size_t)b < rem ? (size_t)b : rem);
}
static inline size_t ds_comm_block_len(size_t count, int world, int b) {
    return count / (size_t)world + ((size_t)b < count % (size_t)world ? 1 : 0);
}

/* Checked collectives (check.c). Whether c checks: on when any rank's `on`
 * is (collective over c: one small all-reduce under the deadline); its
 * records are allocated here, nothing at one rank. Free them with
 * ds_comm_check_free (ds_comm_destroy does). */
ds_status ds_comm_check_enable(ds_comm *c, bool on);
/* The same without the agreement: c checks when `on` (every rank must pass
 * the same; an NCCL communicator, whose creation may fail on one rank). */
ds_status ds_comm_check_set(ds_comm *c, bool on);
void ds_comm_check_free(ds_comm *c);
/* Before collective `name` on c: adds it to c's sequence hash
 * (ds_comm_sequence), and when c checks, exchanges what every rank is
 * about to call and fail with DS_ERR_COMM on every rank alike, naming both
 * calls, where one differs from rank 0's. dtype, op, root: -1 where the
 * call has none; count: its elements (the counts' sum for the v calls);
 * counts: the per-rank counts (world of them) or NULL. The caller has
 * waited for the communication thread (enter). */
ds_status ds_comm_check_call(ds_comm *c, const char *name, int dtype, int op, int root,
                             size_t count, const size_t *counts);

/* Wall clock in seconds for deadlines (CLOCK_MONOTONIC). */
double ds_comm_now(void);

#endif /* DS_COMM_COMM_INTERNAL_H */
