/* Communication between ranks: a vtable with an MPI and an NCCL implementation.
 *
 *   mpi   (engine/comm/mpi.c)   host buffers. The collectives are rings over
 *                               point-to-point messages into buffers allocated
 *                               once (ds_comm_create sizes them), not Open
 *                               MPI's own collectives, which fault in fresh
 *                               pages on every call and lose 2-7x to that.
 *   nccl  (engine/comm/nccl.c)  device buffers; the ncclUniqueId travels over
 *                               MPI, which also remains the bootstrap for
 *                               barriers and host-side metadata.
 *   mpi staged (engine/comm/staged.c, ds_comm_desc.stage): the MPI rings over
 *                               a backend's device buffers, each call copying
 *                               them through pinned host memory; for ranks
 *                               that share a GPU, which NCCL refuses.
 *
 * Every collective is called by all ranks of the world with the same counts.
 * Every collective has a deadline (desc.timeout_s): a rank that waits longer
 * than that for a peer fails with DS_ERR_TIMEOUT naming the collective, what
 * it was for (ds_comm_set_context) and the peer rank it was waiting on,
 * instead of hanging the job ("reduce_scatterv of gradient bucket of modules
 * 3-5 of 12 (...): rank 1 waited 30.0 s for rank 0 (reduce-scatter step 1 of
 * 1, chunk 3 of 8)"). Its pending messages are abandoned, so from then on the
 * data path of that communicator fails with DS_ERR_COMM repeating that first
 * failure's message; ds_comm_agree and the host helpers still work (all ranks
 * can learn of the failure and stop), then destroy it.
 *
 * Ending the job: MPI_Finalize is collective, so after a failed collective it
 * would wait for the peer that did not answer, forever if that peer is
 * stopped or stuck. A process whose collective failed or timed out therefore
 * never finalises: when the library initialised MPI, its exit handler calls
 * MPI_Abort(MPI_COMM_WORLD, exit status) instead, and the launcher (mpirun,
 * srun) ends every rank, the stuck one included. That is the engine's
 * decision, taken at exit, the one point where the program has given up on
 * the job; nothing in the library aborts while the program still runs. So
 * does a process exiting with a non-zero status whose peers do not come to
 * exit within 10 s (it failed on its own: they wait for it in a collective;
 * mpi_boot.c, finalize_at_exit). A program that initialised MPI itself makes
 * the same choice with ds_comm_process_failed().
 *
 *
 * NCCL buffers are device pointers, ready when the call is made (the work
 * that produced them complete, or issued on the calling thread's per-thread
 * default stream); the collective runs on cudaStreamPerThread and is complete
 * when the call returns.
 *
 * Every collective counts what this rank sent, so tests can compare traffic
 * with theory (ds_comm_stats). Reductions of F16/BF16 buffers accumulate each
 * pair in fp32 and round once per hop, as NCCL does.
 *
 * Thread use: one thread at a time uses a ds_comm. While a communication
 * thread owns it (comm_worker.h, overlap_comm), a collective called on any
 * other thread first waits inside the call until that thread's queue is
 * empty, so callers need not coordinate; MPI is initialised with
 * MPI_THREAD_SERIALIZED or better because the calls come from two threads.
 *
 * Checked collectives (ds_comm_desc.check_collectives, the config's
 * zero_engine.check_collectives, or DS_CHECK_COLLECTIVES=1 in the
 * environment for any program): before every collective, the host helpers,
 * ds_comm_agree, barriers and splits included, the ranks exchange what they
 * are about to call (its name, dtype, reduce op, root and counts, with the
 * context of ds_comm_set_context) and compare. Where ranks took different
 * paths (a branch on data only one rank has, a user's module that hands
 * over its gradients differently on one rank), every rank fails at the
 * first call where they part, with DS_ERR_COMM and one message: "collective
 * mismatch at call 57 ...: rank 0 called reduce_scatterv of 4096 bf16 (sum;
 * counts 2048, 2048) for gradient bucket of ..., but rank 1 called
 * all_gatherv of ...". Without it such a program waits until the deadline
 * (naming a rank, not the cause), or fails in MPI with a truncation, or,
 * where the sizes agree, sums unrelated buffers. It costs a 200-byte
 * message from every rank to every other per collective, point-to-point so
 * that a rank that never comes is still named (bench/RESULTS.md, "Checked
 * collectives"), so it is for finding such a fault, not for every run. The
 * communicator stays usable after a mismatch: every rank stopped at the same
 * point. */
#ifndef DS_COMM_COMM_H
#define DS_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_comm ds_comm;
typedef struct ds_backend ds_backend;
typedef struct ds_comm_stage ds_comm_stage; /* staged.c */

typedef enum ds_reduce_op { DS_REDUCE_SUM = 0, DS_REDUCE_MAX, DS_REDUCE_MIN } ds_reduce_op;

typedef enum ds_comm_kind { DS_COMM_MPI = 0, DS_COMM_NCCL = 1 } ds_comm_kind;

/* Where rank / world / local rank came from. */
typedef enum ds_rank_source {
    DS_RANKS_SINGLE = 0, /* nothing set: one rank */
    DS_RANKS_MPI,        /* OMPI_COMM_WORLD_* / PMI_* / MPI itself */
    DS_RANKS_SLURM,      /* SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID */
    DS_RANKS_ENV,        /* RANK, WORLD_SIZE, LOCAL_RANK (with MASTER_ADDR and
                          * MASTER_PORT: the parts join, engine/comm/join.h) */
    DS_RANKS_JOIN,       /* a node of engine-run --nnodes: Open MPI's variables
                          * within the node, DS_JOIN_NODE_RANK / DS_JOIN_NNODES
                          * across nodes (engine/comm/join.h) */
} ds_rank_source;

typedef struct ds_rank_info {
    int rank, world, local_rank, local_world; /* local_*: -1 when the launcher does
                                               * not say (ds_comm_create then asks
                                               * MPI which ranks share the node) */
    ds_rank_source source;
    const char *world_var; /* the variable the world size was read from
                              ("OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", ...;
                              static), NULL for a single process */
} ds_rank_info;

/* Read the launcher's environment (no MPI call). Precedence: Open MPI / PMI
 * variables (with DS_JOIN_NNODES also set: one node of engine-run --nnodes,
 * rank = DS_JOIN_NODE_RANK * OMPI_COMM_WORLD_SIZE + OMPI_COMM_WORLD_RANK),
 * then Slurm (inside a job step only; the step's task count
 * SLURM_STEP_NUM_TASKS before SLURM_NTASKS), then RANK/WORLD_SIZE/LOCAL_RANK,
 * else a single rank. Inconsistent values (rank >= world, non-numbers, half a
 * launcher's set) fail with DS_ERR_INVALID_ARG naming the variable. engine-run
 * decides with this same function whether it already runs inside a launcher. */
ds_status ds_rank_discover(ds_rank_info *out);
/* "single process", "MPI (OMPI_COMM_WORLD_SIZE)", "Slurm (SLURM_NTASKS)", ... */
const char *ds_rank_source_name(ds_rank_source s);

/* Traffic counters: elements and bytes this rank sent, per collective. */
typedef enum ds_coll {
    DS_COLL_ALL_REDUCE = 0,
    DS_COLL_REDUCE_SCATTER,
    DS_COLL_ALL_GATHER,
    DS_COLL_BROADCAST,
    DS_COLL_ALL_TO_ALL, /* the 1-bit compressed all-reduce's first phase (codec.h) */
    DS_COLL_COUNT
} ds_coll;

/* Counted once, at the front door (comm.c), for every implementation:
 * calls, what this rank sent (elements and bytes, split by where the peer it
 * sent to runs), the operation's size for bandwidth (nccl-tests' "size": the
 * buffer of all_reduce and broadcast, the whole send buffer of
 * reduce_scatter, the whole receive buffer of all_gather), and wall time in
 * the collective on whichever thread ran it. The data path sends only to
 * the next rank of the ring (rank + 1 mod world, the broadcast chain too),
 * so a rank's bytes are all inside its host or all across hosts; with NCCL
 * the same ring is assumed (NCCL does not say which links it used).
 *
 * wait_s is what the calling threads spent blocked on communication: the
 * collectives they ran themselves, plus the time they waited for the
 * communication thread (overlap_comm) to finish jobs they needed. The part
 * of the collectives' time not in wait_s was hidden behind computation. */
typedef struct ds_comm_stats {
    uint64_t calls[DS_COLL_COUNT];
    uint64_t elems_sent[DS_COLL_COUNT];
    uint64_t bytes_sent[DS_COLL_COUNT];
    uint64_t bytes_intra[DS_COLL_COUNT]; /* sent to a rank on this host */
    uint64_t bytes_inter[DS_COLL_COUNT]; /* sent to a rank on another host */
    uint64_t size_bytes[DS_COLL_COUNT];  /* operation sizes (nccl-tests' size) */
    double seconds[DS_COLL_COUNT];       /* wall time inside the collectives */
    double wait_s;                       /* calling threads blocked on communication */
    /* The host helpers and ds_comm_agree (MPI's own collectives on small
     * metadata: the step's loss, agreed statuses): calls, buffer bytes, time
     * (also in wait_s: the caller runs them). Where their bytes go is MPI's
     * choice, so they are not split by host. */
    uint64_t host_calls, host_bytes;
    double host_seconds;
} ds_comm_stats;

/* out = now - then, every counter (an interval's traffic from two reports). */
void ds_comm_stats_diff(const ds_comm_stats *now, const ds_comm_stats *then, ds_comm_stats *out);

/* nccl-tests' bus-bandwidth factor of a collective over `world` ranks:
 * all_reduce 2(n-1)/n, reduce_scatter, all_gather and all_to_all (n-1)/n,
 * broadcast 1.
 * busbw = size_bytes / seconds * factor, comparable across world sizes. */
double ds_coll_busbw_factor(ds_coll which, int world);
/* "all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all" */
const char *ds_coll_name(ds_coll which);

typedef struct ds_comm_ops {
    const char *name; /* "mpi", "nccl" */
    /* In place: buf (count elements) becomes the reduction over all ranks. */
    ds_status (*all_reduce)(ds_comm *c, void *buf, size_t count, ds_dtype t, ds_reduce_op op);
    /* send holds world * count elements; rank r receives the reduction of
     * block r (elements [r*count, (r+1)*count)) into recv (count elements).
     * recv may alias send + rank*count. */
    ds_status (*reduce_scatter)(ds_comm *c, const void *send, void *recv, size_t count,
                                ds_dtype t, ds_reduce_op op);
    /* send (count elements) of rank r lands at recv + r*count on every rank;
     * send may alias recv + rank*count (in place). */
    ds_status (*all_gather)(ds_comm *c, const void *send, void *recv, size_t count, ds_dtype t);
    ds_status (*broadcast)(ds_comm *c, void *buf, size_t count, ds_dtype t, int root);
    ds_status (*barrier)(ds_comm *c);
    /* Uneven blocks (ZeRO buckets and module spans cut by partitions): send
     * holds the blocks of counts[0], counts[1], ... elements back to back;
     * rank r receives the reduction of block r into recv (counts[r]
     * elements; recv may alias its block in send). Counts may be zero and
     * are the same on every rank. */
    ds_status (*reduce_scatterv)(ds_comm *c, const void *send, void *recv, const size_t *counts,
                                 ds_dtype t, ds_reduce_op op);
    /* In place: buf holds the blocks back to back; block rank is this
     * rank's, the others arrive. */
    ds_status (*all_gatherv)(ds_comm *c, void *buf, const size_t *counts, ds_dtype t);
    /* send holds world blocks of count elements; block b goes to rank b, and
     * rank b's block `rank` lands at recv + b*count. send and recv do not
     * overlap. */
    ds_status (*all_to_all)(ds_comm *c, const void *send, void *recv, size_t count, ds_dtype t);
    /* Uneven blocks: send holds blocks of counts[0], counts[1], ...
     * elements back to back, block b for rank b; rank q's block for this
     * rank lands at recv + q*counts[rank]. Counts may be zero and are the
     * same on every rank. send and recv do not overlap. */
    ds_status (*all_to_allv)(ds_comm *c, const void *send, void *recv, const size_t *counts,
                             ds_dtype t);
    /* A sub-communicator of the same kind (ds_comm_split). */
    ds_status (*split)(ds_comm *c, int color, int key, ds_comm **out);
    void (*destroy)(ds_comm *c);
} ds_comm_ops;

struct ds_comm {
    const ds_comm_ops *ops;
    int rank, world, local_rank;
    ds_rank_source source;
    double timeout_s;
    int nhosts;          /* hosts the ranks run on (by host name) */
    bool *peer_same_host; /* [world] rank r runs on this host (by name): where a
                             ring's and an all-to-all's bytes go; NULL at one rank */
    ds_comm_stats stats;
    /* A sub-communicator's world communicator (ds_comm_split), NULL for a
     * world communicator: its counters count this one's traffic too, and its
     * communication thread owns this one as well. */
    ds_comm *root;
    void *impl;
    /* Set when the buffers are a backend's memory that MPI cannot read
     * (ds_comm_desc.stage): the ops then copy through host memory. */
    ds_comm_stage *stage;
    /* check_collectives (engine/comm/check.c): the ranks' records of the
     * call about to be made, NULL when off; calls checked so far. */
    void *check_recs;
    uint64_t check_calls;
    /* A world communicator's running hash of every collective called on it
     * (ds_comm_sequence); 0 on a sub-communicator. */
    uint32_t seq_hash;
};

/* The ranks that run on this host, this one included: those that share its
 * RAM and its disks (the memory check at start-up, the NVMe preflight). The
 * real count from peer_same_host, not world / nhosts, which under uneven
 * placement (8 + 2) under-counts the busy host; 1 at one rank. */
static inline int ds_comm_ranks_on_host(const ds_comm *c) {
    int here = 0;
    for (int r = 0; c->peer_same_host && r < c->world; r++) here += c->peer_same_host[r];
    return here < 1 ? 1 : here;
}

/* Whether rank + 1 mod world, the ring's next, runs on this host. */
static inline bool ds_comm_next_same_host(const ds_comm *c) {
    return !c->peer_same_host || c->peer_same_host[(c->rank + 1) % c->world];
}

typedef struct ds_comm_desc {
    ds_comm_kind kind;
    double timeout_s;        /* per collective; <= 0 means 300 s */
    size_t scratch_bytes;    /* ring scratch preallocated at create; 0 = 64 MiB. An
                              * upper bound: mpi allocates two chunks of it */
    ds_backend *backend;     /* nccl: the cuda backend whose device/stream to use;
                              * both: its accountant (may be NULL) records the scratch */
    size_t chunk_bytes;      /* mpi: largest ring message; 0 = tuned default (1 MiB) */
    bool stage;              /* mpi: the data path's buffers are `backend`'s memory
                              * (device memory on cuda): each call copies them through
                              * pinned host memory (engine/comm/staged.c). NCCL reads
                              * device memory itself and is the fast way; this is the
                              * one for ranks that share a GPU, which NCCL refuses */
    bool check_collectives;  /* before every collective the ranks compare what they
                              * are about to call (above, "Checked collectives");
                              * also on with DS_CHECK_COLLECTIVES=1 in the environment.
                              * mpi: on when any rank asks (agreed at creation); nccl:
                              * as given, which must be the same on every rank */
} ds_comm_desc;

/* Initialise MPI if needed (MPI_Init_thread) and build the world communicator.
 * With a single rank and no MPI launcher it still works (world = 1). */
ds_status ds_comm_create(const ds_comm_desc *desc, ds_comm **out);
/* Destroys the communicator. MPI stays initialised (it cannot be initialised
 * twice in a process); when ds_comm_create initialised it, it is finalised
 * at exit. */
void ds_comm_destroy(ds_comm *c);

/* Convenience wrappers that forward to c->ops and add the call site to the
 * error trace. */
ds_status ds_comm_all_reduce(ds_comm *c, void *buf, size_t count, ds_dtype t, ds_reduce_op op);
ds_status ds_comm_reduce_scatter(ds_comm *c, const void *send, void *recv, size_t count,
                                 ds_dtype t, ds_reduce_op op);
ds_status ds_comm_all_gather(ds_comm *c, const void *send, void *recv, size_t count, ds_dtype t);
ds_status ds_comm_broadcast(ds_comm *c, void *buf, size_t count, ds_dtype t, int root);
ds_status ds_comm_barrier(ds_comm *c);
ds_status ds_comm_reduce_scatterv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                                  ds_dtype t, ds_reduce_op op);
ds_status ds_comm_all_gatherv(ds_comm *c, void *buf, const size_t *counts, ds_dtype t);
/* Personalised exchange (MPI_Alltoall): block b of send (count elements)
 * goes to rank b; recv block b comes from rank b. Counted as DS_COLL_ALL_TO_ALL
 * ((world-1) blocks sent); each block lands in the inside- or across-host
 * counter by the host of the rank it goes to (peer_same_host), not by the
 * ring's next rank as the ring collectives' bytes do. */
ds_status ds_comm_all_to_all(ds_comm *c, const void *send, void *recv, size_t count, ds_dtype t);
/* The same with uneven blocks (the ops' all_to_allv): send holds the
 * blocks of counts[0], counts[1], ... back to back, block b for rank b;
 * recv receives world blocks of counts[rank] elements, block q from rank q
 * (ZeRO++ qgZ's quantized reduce-scatter, codec.h). Counted as
 * DS_COLL_ALL_TO_ALL: the blocks for the other ranks are sent. */
ds_status ds_comm_all_to_allv(ds_comm *c, const void *send, void *recv, const size_t *counts,
                              ds_dtype t);

/* Sub-communicators: the groups hierarchical schemes choose (ZeRO++ hpZ's
 * ranks of a host, MiCS's shard and replica groups), not new collectives.
 * Collective over c: every rank of c calls it; the ranks that pass the same
 * color form one new communicator, ranked by key (ties by their rank in c).
 * The new one is of c's kind (mpi: MPI_Comm_split; nccl: an NCCL
 * communicator of the group, bootstrapped over the split MPI one), with c's
 * deadline; its nhosts / peer_same_host describe its own ranks, so its bytes
 * land in the right inside/across-host counter. The split itself, like
 * ds_comm_create's MPI_Comm_dup, is MPI's blocking call: a rank that never
 * calls it stalls the others (engines split once, at creation).
 *
 * Counting: a sub-communicator's collectives count in its own stats and in
 * its world communicator's (root), so the world's report holds every byte
 * the rank sent, split by where its peer runs.
 *
 * Ownership: one thread at a time uses the world communicator and all its
 * sub-communicators together (the mpi kind shares the world's ring
 * scratch): a collective on any of them from a thread other than the
 * world's communication thread waits for that thread's queue to be empty,
 * and jobs name the communicator they run on (ds_comm_job.comm). Destroy
 * sub-communicators before their world communicator. */
ds_status ds_comm_split(ds_comm *c, int color, int key, ds_comm **out);

/* The sequence of collectives called on world communicator c since the
 * last call of this function (since its creation the first time): the
 * calls' names, dtypes, reduce ops, roots and counts, the host helpers,
 * ds_comm_agree and barriers included, a sub-communicator's not, as a
 * 32-bit hash, taken after the communication thread's queue has emptied.
 * Equal on every rank while they have made the same calls: the engine
 * compares it at every step's boundary inside an all-reduce it makes
 * anyway, so ranks that parted without a hang (collectives whose sizes
 * happened to fit) are found there by default; check_collectives finds the
 * call itself. Always kept: a hash of a few fields per collective. A call
 * the check refused is not in it (no rank made it). */
uint32_t ds_comm_sequence(ds_comm *c);

/* Agree on a status across ranks: *out_worst gets the worst (largest) status
 * code of any rank, so all ranks take the same branch after a local failure
 * (e.g. a bad data line seen by one rank only). Uses the host path even under
 * NCCL. Returns DS_OK when the agreement itself worked (else the comm error,
 * with *out_worst = local); on a rank whose own status was DS_OK but another's
 * was not, ds_last_error() then reads "rank R failed with DS_ERR_...: <R's
 * message>" (R: the lowest rank with the worst status; a failing rank keeps
 * its own message). Costs one small all-reduce, plus one broadcast of the
 * message when some rank failed. */
ds_status ds_comm_agree(ds_comm *c, ds_status local, ds_status *out_worst);
/* ds_comm_agree, but with one message on every rank, for failures that
 * share a cause (a full disk every rank writes to): R keeps its own and every
 * other rank, failing or not, reads "rank R failed with DS_ERR_...: <R's
 * message>". Printed by every rank, that is one error, and engine-run shows
 * it once (tools/common/output_relay.h). Other ranks' own messages are
 * dropped. */
ds_status ds_comm_agree_one(ds_comm *c, ds_status local, ds_status *out_worst);

/* Host-side MPI collectives for small metadata, also available when the data
 * path is NCCL (these count in ds_comm_stats' host_* fields only). */
ds_status ds_comm_host_all_reduce(ds_comm *c, void *buf, size_t count, ds_dtype t,
                                  ds_reduce_op op);
ds_status ds_comm_host_broadcast(ds_comm *c, void *buf, size_t bytes, int root);

void ds_comm_stats_reset(ds_comm *c);

/* Name what this thread's next collectives on c are for, so a timeout or
 * failure says so: "gradient bucket of modules 3-5 of 12 (...)" turns
 * "reduce_scatterv: rank 0 waited ..." into "reduce_scatterv of gradient
 * bucket of modules 3-5 of 12 (...): rank 0 waited ...". Per thread (the
 * communication thread sets each job's own); `what` is borrowed until the
 * next call; NULL clears it. */
void ds_comm_set_context(ds_comm *c, const char *what);

/* Whether a collective of this process failed or timed out on any
 * communicator (requests were abandoned). Then MPI_Finalize would wait for
 * the peer that did not answer: end the job with MPI_Abort instead. The
 * library does so itself at exit when it initialised MPI (see the deadline
 * paragraph above); a program that initialised MPI itself asks here. */
bool ds_comm_process_failed(void);

/* Whether c's data path copies its buffers through host memory. */
bool ds_comm_staged(const ds_comm *c);

/* Implementation entry points. */
ds_status ds_comm_mpi_create(const ds_comm_desc *desc, ds_comm **out);
/* In the CUDA module (libzero-engine-cuda.so); reach it with ds_comm_create. */
ds_status ds_comm_nccl_create(const ds_comm_desc *desc, ds_comm **out);
/* Put staging (ds_comm_desc.stage) in front of an MPI communicator's ops;
 * its sub-communicators are staged too. be must outlive c. */
ds_status ds_comm_stage_wrap(ds_comm *c, ds_backend *be);

#ifdef __cplusplus
}
#endif
#endif /* DS_COMM_COMM_H */
