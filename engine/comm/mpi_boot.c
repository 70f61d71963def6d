/* MPI bootstrap shared by the mpi and nccl communicators: initialisation
 * (once per process), the world check against the launcher's environment,
 * the polling wait with a deadline, the dissemination barrier, and the MPI
 * datatypes/ops the host helpers use for fp16/bf16. */
#include "engine/comm/comm_internal.h"
#include "engine/comm/comm_worker.h" /* ds_comm_worker_self */

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm/join.h"
#include "engine/comm/reduce.h"

enum { DS_TAG_BARRIER = 7 };

/* Polls of a wait come microseconds apart (a sched_yield every 16); a gap of
 * 0.1 s means the process was not running, not waiting. Generous: time a
 * loaded machine keeps a runnable process off the CPU only makes the
 * deadline later, never earlier. */
#define DS_COMM_POLL_GAP_S 0.1

/* Process-wide MPI state. MPI can be initialised only once per process, so
 * the library initialises it on the first ds_comm_create (unless the program
 * did) and never finalises it when a communicator goes: a program may build
 * one engine after another, or retry after a failed create. When the library
 * was the one to initialise MPI it finalises it at exit. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_booted; /* MPI initialised (or adopted), fp16/bf16 types registered */
/* The job's ranks: MPI_COMM_WORLD, or, when the job was started in parts
 * (engine-run --nnodes, RANK/MASTER_ADDR: join.h), the communicator that
 * joined them. Every communicator of the library is made from this one. */
static MPI_Comm g_world = MPI_COMM_NULL;
/* A join that failed cannot be tried again (MPI may still wait in it on
 * another thread): later creates repeat its failure. */
static ds_status g_join_failure = DS_OK;
static char g_join_msg[1024];
/* The communicators held by live ds_comms. Open MPI 4.1 cannot finalise a
 * joined job while one still exists (a rank dies of SIGPIPE in
 * MPI_Finalize), so those a program did not destroy are freed at exit. */
static ds_comm_mpi_base **g_live;
static int g_n_live, g_cap_live;

static bool live_add(ds_comm_mpi_base *b) {
    pthread_mutex_lock(&g_lock);
    bool ok = true;
    if (g_n_live == g_cap_live) {
        int cap = g_cap_live ? 2 * g_cap_live : 8;
        ds_comm_mpi_base **v = realloc(g_live, (size_t)cap * sizeof *v);
        if (v) {
            g_live = v;
            g_cap_live = cap;
        }
        ok = v != NULL;
    }
    if (ok) g_live[g_n_live++] = b;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

static void live_remove(ds_comm_mpi_base *b) {
    pthread_mutex_lock(&g_lock);
    for (int k = 0; k < g_n_live; k++)
        if (g_live[k] == b) g_live[k--] = g_live[--g_n_live];
    pthread_mutex_unlock(&g_lock);
}
static MPI_Datatype g_f16 = MPI_DATATYPE_NULL, g_bf16 = MPI_DATATYPE_NULL;
static MPI_Op g_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
/* A collective of this process failed or timed out (ds_comm_note_broken):
 * at exit the job is aborted, not finalised. */
static atomic_bool g_failed;
/* What this thread's collectives are for (ds_comm_set_context). */
static __thread const char *t_context;

void ds_comm_set_context(ds_comm *c, const char *what) {
    (void)c; /* per thread: one thread uses a communicator at a time */
    t_context = what;
}

const char *ds_comm_context(void) { return t_context; }

bool ds_comm_process_failed(void) { return atomic_load(&g_failed); }

void ds_comm_note_broken(ds_comm *c, bool collective, ds_status st) {
    atomic_store(&g_failed, true);
    if (!c || !c->impl) return;
    ds_comm_mpi_base *b = ds_comm_base(c);
    if (collective) b->coll_broken = true;
    else b->broken = true;
    if (b->failure == DS_OK) {
        b->failure = st;
        snprintf(b->failure_msg, sizeof b->failure_msg, "%s", ds_last_error());
    }
}

void ds_comm_op_name(const char *coll, char *buf, size_t cap) {
    const char *what = t_context;
    if (what && *what) snprintf(buf, cap, "%s of %s", coll, what);
    else snprintf(buf, cap, "%s", coll);
}

double ds_comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ds_status ds_comm_mpi_error(int code, const char *what, const ds_comm *c) {
    char text[MPI_MAX_ERROR_STRING], op[512];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
    ds_comm_op_name(what, op, sizeof op);
    return DS_ERR(DS_ERR_COMM, "%s failed on rank %d: %s", op, c ? c->rank : -1, text);
}

/* ---- fp16 / bf16 for MPI's own reductions (host helpers only) ---------- */

static void half_op(void *in, void *inout, int *len, MPI_Datatype *dt, ds_reduce_op op) {
    const uint16_t *x = in;
    uint16_t *y = inout;
    bool bf = (*dt == g_bf16);
    for (int i = 0; i < *len; i++)
        y[i] = bf ? ds_reduce_bf16(y[i], x[i], op) : ds_reduce_f16(y[i], x[i], op);
}
static void half_sum(void *in, void *io, int *n, MPI_Datatype *dt) { half_op(in, io, n, dt, DS_REDUCE_SUM); }
static void half_max(void *in, void *io, int *n, MPI_Datatype *dt) { half_op(in, io, n, dt, DS_REDUCE_MAX); }
static void half_min(void *in, void *io, int *n, MPI_Datatype *dt) { half_op(in, io, n, dt, DS_REDUCE_MIN); }

static int register_half_types(void) {
    int rc = MPI_Type_contiguous(2, MPI_BYTE, &g_f16);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&g_f16);
    if (rc == MPI_SUCCESS) rc = MPI_Type_contiguous(2, MPI_BYTE, &g_bf16);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&g_bf16);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(half_sum, 1, &g_ops[DS_REDUCE_SUM]);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(half_max, 1, &g_ops[DS_REDUCE_MAX]);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(half_min, 1, &g_ops[DS_REDUCE_MIN]);
    return rc;
}

static void free_half_types(void) {
    for (int i = 0; i < 3; i++)
        if (g_ops[i] != MPI_OP_NULL) MPI_Op_free(&g_ops[i]);
    if (g_f16 != MPI_DATATYPE_NULL) MPI_Type_free(&g_f16);
    if (g_bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&g_bf16);
}

ds_status ds_comm_mpi_dtype(ds_dtype t, MPI_Datatype *out) {
    switch (t) {
    case DS_F32: *out = MPI_FLOAT; return DS_OK;
    case DS_F64: *out = MPI_DOUBLE; return DS_OK;
    case DS_I32: *out = MPI_INT32_T; return DS_OK;
    case DS_I64: *out = MPI_INT64_T; return DS_OK;
    case DS_U8: *out = MPI_UINT8_T; return DS_OK;
    case DS_F16: *out = g_f16; return DS_OK;
    case DS_BF16: *out = g_bf16; return DS_OK;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "comm: invalid dtype %d", (int)t);
    }
}

ds_status ds_comm_mpi_op(ds_dtype t, ds_reduce_op op, MPI_Op *out) {
    if ((int)op < 0 || op > DS_REDUCE_MIN)
        return DS_ERR(DS_ERR_INVALID_ARG, "comm: invalid reduce op %d", (int)op);
    if (t == DS_F16 || t == DS_BF16) {
        *out = g_ops[op];
        return DS_OK;
    }
    *out = op == DS_REDUCE_SUM ? MPI_SUM : op == DS_REDUCE_MAX ? MPI_MAX : MPI_MIN;
    return DS_OK;
}

/* ---- initialisation ------------------------------------------------------ */

static const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
    }
}

/* At exit of a process whose MPI the library initialised: MPI_Finalize, a
 * collective, when every collective so far worked. After one failed or timed
 * out, the peer it waited for may be stopped or stuck, and MPI_Finalize
 * would wait for it forever (seen with gdb: ompi_mpi_finalize waiting on a
 * SIGSTOPped rank while mpirun never learnt that anything failed). Then the
 * job is ended instead: MPI_Abort makes the launcher kill every rank, the
 * stuck one included, and mpirun exits with `status`. This is where the
 * library decides to end the job: the program has already given up (it is
 * exiting), so aborting takes nothing from it but the hang.
 *
 * The same for a process that exits with a failure status while its peers
 * do not: one whose own call failed (a file only it reads, memory on its
 * host) and left the others in a collective it will never join. MPI_Finalize
 * would wait there for them, and they for it until comm_timeout_s (300 s by
 * default), then end the job with a timeout that does not say why. When
 * every rank exits with the failure (an error they agreed on, a preemption's
 * save), they meet in a barrier within EXIT_GRACE_S and finalise as usual;
 * when the barrier is not complete by then, the job is ended now.
 *
 * A rank that exits well meets the others in the same barrier, without a
 * limit (MPI_Finalize would wait for them as long), before MPI_Finalize:
 * no rank enters MPI_Finalize until every rank has come to exit without
 * aborting. Open MPI 4.1.4's mpirun crashes (SIGSEGV) or hangs in its own
 * finalize, every rank gone, when the job is aborted while some ranks wait
 * in MPI_Finalize's fence and others are elsewhere: 19 of 100 runs with
 * rank 0 finalising and ranks 1-3 calling MPI_Abort, 8 of 60 with two ranks
 * sleeping instead, none of 100 with rank 0 waiting outside MPI_Finalize
 * (tests/fault/test_comm_rollcall.c hung CI this way). */
#define EXIT_GRACE_S 10.0

/* The exit barrier on `world`: true when every rank came to it within
 * limit_s (< 0: no limit); false when not, or when MPI failed. */
static bool exit_barrier(MPI_Comm world, double limit_s) {
    int size = 1;
    MPI_Comm_size(world, &size);
    if (size == 1) return true;
    MPI_Request req;
    if (MPI_Ibarrier(world, &req) != MPI_SUCCESS) return false;
    double t0 = ds_comm_now();
    int done = 0;
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           (limit_s < 0 || ds_comm_now() - t0 < limit_s))
        usleep(1000);
    return done != 0; /* an incomplete barrier is left to the abort */
}

static void finalize_at_exit(int status, void *arg) {
    (void)arg;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return;
    MPI_Comm world = g_world != MPI_COMM_NULL ? g_world : MPI_COMM_WORLD;
    /* (the program has printed why; this line says which rank ends the job
     * and why it cannot finalise: mpirun's own banner may name another rank,
     * one it killed, so engine-run names the rank from this line) */
    const char *why = "a collective of this rank failed or timed out, and finalising would "
                      "wait for a peer that does not answer";
    if (!atomic_load(&g_failed) && !exit_barrier(world, status != 0 ? EXIT_GRACE_S : -1.0)) {
        atomic_store(&g_failed, true);
        why = status != 0 ? "it exits with a failure, and the other ranks have not come to "
                            "exit within 10 s (they wait for it in a collective)"
                          : "the barrier before MPI_Finalize failed";
    }
    if (atomic_load(&g_failed)) {
        int rank = -1;
        MPI_Comm_rank(world, &rank);
        fflush(stdout);
        fprintf(stderr, "[zero-engine] rank %d ends the job with MPI_Abort (status %d): %s\n",
                rank, status, why);
        fflush(stderr);
        /* The launcher's SIGTERM to every rank of the aborted job, this one
         * included, is no preemption to save for (ds_preempt_install): die. */
        signal(SIGTERM, SIG_DFL);
        ds_join_stop_server();
        /* a joined job: the launcher of this part ends its ranks (the other
         * parts' ranks time out on this one and end theirs) */
        MPI_Abort(world, status);
        _exit(status ? status : 1); /* MPI_Abort does not return; if it did, still no finalize */
    }
    free_half_types();
    for (int k = 0; k < g_n_live; k++)
        if (g_live[k]->comm != MPI_COMM_NULL) MPI_Comm_free(&g_live[k]->comm);
    free(g_live);
    g_live = NULL;
    g_n_live = 0;
    ds_join_release();
    MPI_Finalize();
}

/* Initialise MPI (or adopt the program's) once per process, and join the
 * parts of a job started in parts (join.h) within timeout_s. */
static ds_status boot_mpi(const char *who, const ds_rank_info *info, double timeout_s) {
    pthread_mutex_lock(&g_lock);
    ds_status st = DS_OK;
    int flag = 0;
    MPI_Finalized(&flag);
    if (flag) {
        st = DS_ERR(DS_ERR_COMM,
                    "%s: MPI was already finalised in this process (the program called "
                    "MPI_Finalize before ds_comm_create)",
                    who);
        goto out;
    }
    if (g_join_failure != DS_OK) {
        st = DS_ERR(g_join_failure, "%s", g_join_msg);
        goto out;
    }
    if (g_booted) goto out;
    int provided = MPI_THREAD_SINGLE;
    bool ours = false;
    ds_join_plan plan;
    DS_TRY_GOTO(st, ds_join_plan_read(info, &plan), out);
    MPI_Initialized(&flag);
    if (flag && plan.kind == DS_JOIN_ENV) {
        st = DS_ERR(DS_ERR_COMM,
                    "%s: RANK/WORLD_SIZE/MASTER_ADDR ask this process to join the other ranks, "
                    "but the program initialised MPI itself before ds_comm_create, too early "
                    "for that: let ds_comm_create initialise MPI",
                    who);
        goto out;
    }
    if (!flag) {
        /* the env form meets the other ranks before MPI starts (join.h) */
        DS_TRY_GOTO(st, ds_join_prepare(&plan, timeout_s), out);
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            st = ds_comm_mpi_error(rc, "MPI_Init_thread", NULL);
            goto out;
        }
        ours = true;
        on_exit(finalize_at_exit, NULL);
    } else {
        MPI_Query_thread(&provided);
    }
    /* Requests abandoned after a timeout are cancelled and freed; when the
     * job is being torn down those calls may fail, and errors not tied to a
     * communicator of ours land on MPI_COMM_WORLD, whose default handler
     * would end the process from inside MPI with a banner. When the library
     * owns MPI, they come back as codes like everything else. */
    if (ours) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* The engine's communication thread calls MPI while the main thread does
     * not: SERIALIZED is the least that is correct. Left initialised on
     * failure: finalising would only make a later MPI_Init impossible. */
    if (provided < MPI_THREAD_SERIALIZED) {
        st = DS_ERR(DS_ERR_COMM,
                    "%s: MPI provides %s, zero-engine needs MPI_THREAD_SERIALIZED or better%s",
                    who, thread_level_name(provided),
                    ours ? "" : " (initialise MPI with MPI_Init_thread)");
        goto out;
    }
    int rc = register_half_types();
    if (rc != MPI_SUCCESS) {
        st = ds_comm_mpi_error(rc, "registering fp16/bf16 MPI datatypes", NULL);
        free_half_types();
        goto out;
    }
    g_world = MPI_COMM_WORLD;
    if (plan.kind != DS_JOIN_NONE) {
        st = ds_join_merge(&plan, timeout_s, &g_world);
        if (st != DS_OK) {
            /* a thread may still wait in MPI for the missing part: the job is
             * ended at exit (MPI_Abort), never finalised */
            g_world = MPI_COMM_WORLD;
            g_join_failure = st;
            snprintf(g_join_msg, sizeof g_join_msg, "%s", ds_last_error());
            atomic_store(&g_failed, true);
            goto out;
        }
    }
    g_booted = true;
out:
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* Every rank's host name (MPI_Get_processor_name: gethostname, so a
 * simulated host with its own UTS namespace counts as a host), gathered
 * once: c->nhosts and c->peer_same_host, for the
 * inside/across-host split of the traffic counters (ds_comm_stats), and with set_local_rank
 * c->local_rank, how many lower ranks run on a host of this one's name. */
static ds_status hosts_by_name(ds_comm *c, MPI_Comm comm, bool set_local_rank) {
    c->nhosts = 1;
    if (set_local_rank) c->local_rank = 0;
    if (c->world == 1) return DS_OK;
    char *names = calloc((size_t)c->world, MPI_MAX_PROCESSOR_NAME);
    char self[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    if (!names) return DS_ERR(DS_ERR_OOM, "comm: out of memory for %d host names", c->world);
    MPI_Get_processor_name(self, &len);
    free(c->peer_same_host);
    c->peer_same_host = calloc((size_t)c->world, sizeof *c->peer_same_host);
    if (!c->peer_same_host) {
        free(names);
        return DS_ERR(DS_ERR_OOM, "comm: out of memory for %d ranks' hosts", c->world);
    }
    int rc = MPI_Allgather(self, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME,
                           MPI_CHAR, comm);
    if (rc == MPI_SUCCESS) {
        for (int r = 0; r < c->world; r++)
            c->peer_same_host[r] = strcmp(names + (size_t)r * MPI_MAX_PROCESSOR_NAME, self) == 0;
        c->nhosts = 0;
        for (int r = 0; r < c->world; r++) { /* a name not seen at a lower rank is a new host */
            const char *nr = names + (size_t)r * MPI_MAX_PROCESSOR_NAME;
            int seen = 0;
            for (int q = 0; q < r && !seen; q++)
                seen = strcmp(names + (size_t)q * MPI_MAX_PROCESSOR_NAME, nr) == 0;
            c->nhosts += !seen;
            if (set_local_rank && r < c->rank) c->local_rank += strcmp(nr, self) == 0;
        }
    }
    free(names);
    if (rc == MPI_SUCCESS) return DS_OK;
    free(c->peer_same_host); /* the callers free c itself on failure */
    c->peer_same_host = NULL;
    return ds_comm_mpi_error(rc, "MPI_Allgather of host names", c);
}

ds_status ds_comm_mpi_boot(const char *who, const ds_comm_desc *desc, ds_comm *c,
                           ds_comm_mpi_base *base) {
    ds_rank_info info;
    DS_TRY(ds_rank_discover(&info));
    c->timeout_s = (desc && desc->timeout_s > 0) ? desc->timeout_s : 300.0;
    DS_TRY(boot_mpi(who, &info, c->timeout_s));
    base->initialised = true;
    base->comm = MPI_COMM_NULL;

    ds_status st = DS_OK;
    int rank = 0, world = 1;
    int rc = MPI_Comm_dup(g_world, &base->comm);
    if (rc != MPI_SUCCESS) {
        st = ds_comm_mpi_error(rc, "MPI_Comm_dup", NULL);
        goto fail;
    }
    if (!live_add(base)) {
        st = DS_ERR(DS_ERR_OOM, "%s: out of memory", who);
        goto fail;
    }
    /* Errors come back as codes on this communicator, so a peer's failure
     * becomes a ds_status instead of MPI aborting the job from inside. */
    MPI_Comm_set_errhandler(base->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(base->comm, &rank);
    MPI_Comm_size(base->comm, &world);
    if (info.source != DS_RANKS_SINGLE && (info.world != world || info.rank != rank)) {
        st = DS_ERR(DS_ERR_COMM,
                    "%s: %s says rank %d of %d, but MPI says rank %d of %d: start "
                    "the ranks with the launcher that set those variables (mpirun, srun)%s, or "
                    "unset them",
                    who, ds_rank_source_name(info.source), info.rank, info.world, rank, world,
                    info.source == DS_RANKS_ENV
                        ? ", set MASTER_ADDR and MASTER_PORT too (the ranks then meet there, "
                          "torchrun-style)"
                        : "");
        goto fail;
    }
    c->rank = rank;
    c->world = world;
    c->source = (info.source == DS_RANKS_SINGLE && world > 1) ? DS_RANKS_MPI : info.source;
    /* A joined job (join.h) whose launcher did not say the local rank:
     * MPI's shared-memory split stops at the parts' borders (every rank of
     * the env form came out local rank 0), so the lower ranks on this host
     * are counted by name (hosts_by_name, below). */
    bool local_by_name = false;
    if (info.source != DS_RANKS_SINGLE && info.local_rank >= 0) {
        c->local_rank = info.local_rank;
    } else if (g_world != MPI_COMM_WORLD) {
        local_by_name = true;
    } else {
        /* The launcher did not say: ranks that share memory are on one node. */
        MPI_Comm node;
        rc = MPI_Comm_split_type(base->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        if (rc != MPI_SUCCESS) {
            st = ds_comm_mpi_error(rc, "MPI_Comm_split_type", c);
            goto fail;
        }
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_free(&node);
    }
    DS_TRY_GOTO(st, hosts_by_name(c, base->comm, local_by_name), fail);
    return DS_OK;
fail:
    ds_comm_mpi_shutdown(base);
    ds_error_trace(__FILE__, __LINE__);
    return st;
}

/* A split's ranks as the job numbers them: through the parent's group,
 * then the parent's own numbering. */
static ds_status job_ranks(ds_comm *parent, ds_comm *c, ds_comm_mpi_base *base) {
    base->job_rank = malloc((size_t)c->world * sizeof *base->job_rank);
    int *mine = malloc((size_t)c->world * sizeof *mine);
    if (!base->job_rank || !mine) {
        free(mine);
        return DS_ERR(DS_ERR_OOM, "comm split: out of memory");
    }
    for (int r = 0; r < c->world; r++) mine[r] = r;
    MPI_Group g, pg;
    MPI_Comm_group(base->comm, &g);
    MPI_Comm_group(ds_comm_base(parent)->comm, &pg);
    int rc = MPI_Group_translate_ranks(g, c->world, mine, pg, base->job_rank);
    MPI_Group_free(&g);
    MPI_Group_free(&pg);
    free(mine);
    if (rc != MPI_SUCCESS) return ds_comm_mpi_error(rc, "MPI_Group_translate_ranks", parent);
    for (int r = 0; r < c->world; r++)
        base->job_rank[r] = ds_comm_job_rank(parent, base->job_rank[r]);
    return DS_OK;
}

ds_status ds_comm_mpi_split_boot(ds_comm *parent, int color, int key, ds_comm *c,
                                 ds_comm_mpi_base *base) {
    base->initialised = true;
    base->comm = MPI_COMM_NULL;
    c->timeout_s = parent->timeout_s;
    c->source = parent->source;
    c->local_rank = parent->local_rank; /* the same process on the same host */
    ds_status st = DS_OK;
    int rc = MPI_Comm_split(ds_comm_base(parent)->comm, color, key, &base->comm);
    if (rc != MPI_SUCCESS) {
        st = ds_comm_mpi_error(rc, "MPI_Comm_split", parent);
        goto fail;
    }
    if (!live_add(base)) {
        st = DS_ERR(DS_ERR_OOM, "comm split: out of memory");
        goto fail;
    }
    MPI_Comm_set_errhandler(base->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(base->comm, &c->rank);
    MPI_Comm_size(base->comm, &c->world);
    DS_TRY_GOTO(st, job_ranks(parent, c, base), fail);
    DS_TRY_GOTO(st, hosts_by_name(c, base->comm, false), fail);
    return DS_OK;
fail:
    ds_comm_mpi_shutdown(base);
    ds_error_trace(__FILE__, __LINE__);
    return st;
}

void ds_comm_mpi_shutdown(ds_comm_mpi_base *base) {
    if (!base->initialised) return;
    live_remove(base);
    if (base->comm != MPI_COMM_NULL) MPI_Comm_free(&base->comm);
    free(base->job_rank);
    base->job_rank = NULL;
    base->initialised = false;
}

/* ---- waiting with a deadline --------------------------------------------- */

/* Give up on requests that will not complete: receives are cancelled, and
 * every request is freed (MPI finishes or drops it in the background). The
 * buffers stay allocated until the communicator is destroyed. The request
 * of an MPI collective is left as it is: cancelling or freeing one is
 * erroneous (MPI 3.1, 5.12), and under a program's own MPI_Init its fatal
 * error handler ended the process inside MPI_Cancel instead of returning
 * the timeout. The process ends soon after anyway (ds_comm_process_failed). */
static void abandon(MPI_Request *reqs, const bool *is_recv, int n, bool collective) {
    if (collective) return;
    for (int i = 0; i < n; i++) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        if (is_recv[i]) MPI_Cancel(&reqs[i]);
        MPI_Request_free(&reqs[i]);
    }
}

/* A timeout or error leaves requests behind: point-to-point ones break the
 * data path, MPI collectives (host helpers) break those; each keeps working
 * without the other, which is what lets ds_comm_agree run after a timeout.
 * Called once the error is recorded, so the communicator keeps its text. */
static void mark_broken(ds_comm *c, const ds_comm_wait_ctx *ctx, ds_status st) {
    ds_comm_note_broken(c, ctx->collective, st);
}

ds_status ds_comm_mpi_wait(ds_comm *c, MPI_Request *reqs, const int *peers, const bool *is_recv,
                           int n, const ds_comm_wait_ctx *ctx) {
    /* The deadline counts the time this process spent waiting, awake: a gap
     * between two polls longer than DS_COMM_POLL_GAP_S means it did not run
     * (SIGSTOP, a debugger, the scheduler), and it cannot blame a peer for
     * that time. So a rank stopped in the middle of a wait and continued
     * before the deadline does not time out on its peers when it wakes,
     * which would fail a job whose ranks were only slow. */
    double last = 0.0, waited = 0.0;
    bool on_worker = ds_comm_worker_self();
    for (unsigned spin = 0;; spin++) {
        int pending = -1, pending_send = -1;
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int done = 0;
            MPI_Status status;
            int rc = MPI_Test(&reqs[i], &done, &status);
            if (rc != MPI_SUCCESS) {
                int code = (rc == MPI_ERR_IN_STATUS) ? status.MPI_ERROR : rc;
                char what[160];
                snprintf(what, sizeof what, "%s (%s rank %d)", ctx->coll,
                         is_recv[i] ? "receive from" : "send to", peers[i]);
                abandon(reqs, is_recv, n, ctx->collective);
                ds_status st = ds_comm_mpi_error(code, what, c);
                mark_broken(c, ctx, st);
                return st;
            }
            if (!done) {
                if (is_recv[i] && pending < 0) pending = i;
                if (!is_recv[i] && pending_send < 0) pending_send = i;
            }
        }
        if (pending < 0 && pending_send < 0) return DS_OK;
        double t = ds_comm_now();
        if (spin == 0) {
            last = t;
            continue;
        }
        if (t - last < DS_COMM_POLL_GAP_S) waited += t - last;
        last = t;
        if (waited > c->timeout_s) {
            int who = pending >= 0 ? peers[pending] : peers[pending_send];
            /* MPI's own collectives do not say who is late; of two ranks,
             * the other one is */
            if (who < 0 && c->world == 2) who = 1 - c->rank;
            abandon(reqs, is_recv, n, ctx->collective);
            /* who is actually missing: the peer waited for may be a live
             * rank waiting itself (rollcall.c) */
            int absent[8], n_absent = -1;
            if (c->world > 2)
                n_absent = ds_comm_roll_call(c, ds_comm_roll_call_grace(c->timeout_s), absent, 8);
            char gone[160] = "";
            for (int k = 0, at = 0; k < n_absent && k < 8 && at < (int)sizeof gone; k++)
                at += snprintf(gone + at, sizeof gone - (size_t)at, "%s%d",
                               k == 0 ? "" : k + 1 == n_absent ? " and " : ", ", absent[k]);
            char where[160], op[512];
            if (ctx->nsteps > 0)
                snprintf(where, sizeof where, " (%s%sstep %d of %d, chunk %zu of %zu)",
                         ctx->phase ? ctx->phase : "", ctx->phase ? " " : "", ctx->step + 1,
                         ctx->nsteps, ctx->chunk + 1, ctx->nchunks);
            else
                where[0] = '\0';
            ds_comm_op_name(ctx->coll, op, sizeof op);
            ds_status st;
            int me = ds_comm_job_rank(c, c->rank);
            if (n_absent > 0) /* the roll call found who is not there */
                st = DS_ERR(DS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for rank%s %s%s, not "
                            "answering (stopped, stuck or gone)%s", op, me, waited,
                            n_absent > 1 ? "s" : "", gone, n_absent > 8 ? " and more" : "",
                            where);
            else if (who < 0) /* a collective of MPI's own: it does not say who is late */
                st = DS_ERR(DS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for the other ranks%s", op,
                            me, waited, where);
            else
                st = DS_ERR(DS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for rank %d%s", op, me,
                            waited, ds_comm_job_rank(c, who), where);
            mark_broken(c, ctx, st);
            return st;
        }
        if (ctx->idle && ctx->idle->left) {
            ds_comm_idle_copy *w = ctx->idle;
            /* 128 KiB: a few microseconds, so MPI progresses between slices */
            size_t n = w->left < ((size_t)128 << 10) ? w->left : ((size_t)128 << 10);
            memcpy(w->dst, w->src, n);
            w->dst += n;
            w->src += n;
            w->left -= n;
            continue;
        }
        /* The communication thread (overlap_comm) waits while its rank's
         * main thread computes the backward it hides behind: spinning would
         * take that thread's core. After a short spin it sleeps 50 us
         * between polls (still 20,000 polls a second, far finer than a
         * bucket's time on the wire). Elsewhere, with more ranks than cores
         * (tests run oversubscribed) a spinning rank would starve the peer
         * it waits for: it yields. */
        if (on_worker && spin > 64)
            nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 50000}, NULL);
        else if ((spin & 15) == 0)
            sched_yield();
    }
}

ds_status ds_comm_mpi_barrier(ds_comm *c) {
    MPI_Comm comm = ds_comm_base(c)->comm;
    int rounds = 0;
    for (int d = 1; d < c->world; d <<= 1) rounds++;
    int round = 0;
    for (int d = 1; d < c->world; d <<= 1, round++) {
        int to = (c->rank + d) % c->world, from = (c->rank - d + c->world) % c->world;
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        int peers[2] = {from, to};
        bool is_recv[2] = {true, false};
        int rc = MPI_Irecv(NULL, 0, MPI_BYTE, from, DS_TAG_BARRIER, comm, &reqs[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Isend(NULL, 0, MPI_BYTE, to, DS_TAG_BARRIER, comm, &reqs[1]);
        if (rc != MPI_SUCCESS) {
            abandon(reqs, is_recv, 2, false);
            return ds_comm_mpi_error(rc, "barrier", c);
        }
        ds_comm_wait_ctx ctx = {.coll = "barrier", .phase = NULL, .step = round,
                                .nsteps = rounds, .chunk = 0, .nchunks = 1};
        DS_TRY(ds_comm_mpi_wait(c, reqs, peers, is_recv, 2, &ctx));
    }
    return DS_OK;
}

uint64_t ds_comm_ring_all_reduce_elems(size_t count, int world, int rank) {
    if (world <= 1) return 0;
    size_t own = ds_comm_block_len(count, world, rank);
    size_t next = ds_comm_block_len(count, world, (rank + 1) % world);
    return (uint64_t)(count - own) + (uint64_t)(count - next);
}
