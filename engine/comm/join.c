/* One job out of separately started MPI jobs (see join.h). */
#include "engine/comm/join.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm/rdzv.h"

/* Between two lookups of part 0's port (Open MPI answers at once when the
 * name is not published yet). */
#define JOIN_LOOKUP_RETRY_S 0.05

/* Communicators the join made: all must be freed before MPI_Finalize. Two
 * per joined part (the intercommunicator and the merge) plus the final one. */
static MPI_Comm *g_kept;
static int g_n_kept, g_cap_kept;
static ds_ompi_server g_server; /* the env form's RANK 0 */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- the plan ------------------------------------------------------------ */

static ds_status env_int(const char *name, int lo, int hi, int *out) {
    const char *v = getenv(name);
    char *end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || errno || *end || x < lo || x > hi)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s=\"%s\": expected a whole number in %d..%d", name,
                      v ? v : "", lo, hi);
    *out = (int)x;
    return DS_OK;
}

ds_status ds_join_plan_read(const ds_rank_info *info, ds_join_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->kind = DS_JOIN_NONE;
    if (info->source == DS_RANKS_JOIN) {
        /* discover.c checked the variables and made rank = node * K + local */
        plan->kind = DS_JOIN_NODES;
        plan->what = "node";
        DS_TRY(env_int(DS_JOIN_NODE_RANK_VAR, 0, INT_MAX, &plan->part));
        DS_TRY(env_int(DS_JOIN_NNODES_VAR, 1, INT_MAX, &plan->parts));
        plan->world = info->world;
        plan->part_size = info->world / plan->parts;
        return DS_OK;
    }
    if (info->source != DS_RANKS_ENV || info->world < 2) return DS_OK;
    /* without a place to meet, these variables describe a job some MPI
     * launcher started: mpi_boot.c compares them with MPI's view */
    const char *addr = getenv("MASTER_ADDR");
    if (!addr || !*addr || !getenv("MASTER_PORT")) return DS_OK;
    plan->kind = DS_JOIN_ENV;
    plan->what = "rank";
    plan->part = info->rank;
    plan->parts = info->world;
    plan->part_size = 1;
    plan->world = info->world;
    snprintf(plan->master_addr, sizeof plan->master_addr, "%s", addr);
    DS_TRY(env_int("MASTER_PORT", 1, 65535, &plan->master_port));
    return DS_OK;
}

/* ---- the ompi-server ------------------------------------------------------- */

static bool on_path(const char *prog, char *out, size_t cap) {
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len && snprintf(out, cap, "%.*s/%s", (int)len, p, prog) < (int)cap &&
            access(out, X_OK) == 0)
            return true;
        p = colon ? colon + 1 : NULL;
    }
    return false;
}

ds_status ds_ompi_server_start(double timeout_s, ds_ompi_server *s) {
    memset(s, 0, sizeof *s);
    char exe[PATH_MAX];
    if (!on_path("ompi-server", exe, sizeof exe))
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "ompi-server not found on PATH: joining separately started parts of a job "
                      "needs Open MPI's ompi-server (Debian package openmpi-bin)");
    snprintf(s->dir, sizeof s->dir, "/tmp/zero-engine-join.XXXXXX");
    if (!mkdtemp(s->dir)) {
        s->dir[0] = '\0';
        return DS_ERR(DS_ERR_IO, "ompi-server: cannot make a folder in /tmp: %s", strerror(errno));
    }
    char file[128];
    snprintf(file, sizeof file, "%s/uri", s->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        ds_ompi_server_stop(s);
        return DS_ERR(DS_ERR_IO, "ompi-server: fork: %s", strerror(e));
    }
    if (pid == 0) {
        /* the server lives as long as this process: no stray servers.
         * (Linux sends the signal when the thread that forked ends: a
         * program that creates its engine on a thread that then ends loses
         * the server, which the jobs no longer need once they are joined.) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        signal(SIGPIPE, SIG_DFL);
        char *argv[] = {exe, "--no-daemonize", "-r", file, NULL};
        execv(exe, argv);
        _exit(127);
    }
    s->pid = pid;
    double deadline = now_s() + (timeout_s > 0 ? timeout_s : 300.0);
    for (;;) {
        FILE *f = fopen(file, "r");
        if (f) {
            bool got = fgets(s->uri, sizeof s->uri, f) && strchr(s->uri, '\n');
            fclose(f);
            if (got) {
                s->uri[strcspn(s->uri, "\n")] = '\0';
                return DS_OK;
            }
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            s->pid = 0;
            ds_ompi_server_stop(s);
            return DS_ERR(DS_ERR_COMM, "ompi-server (%s) %s %d before it reported its address",
                          exe, WIFEXITED(status) ? "exited with status" : "was killed by signal",
                          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        }
        if (now_s() > deadline) {
            ds_ompi_server_stop(s);
            return DS_ERR(DS_ERR_TIMEOUT, "ompi-server did not report its address within %.0f s",
                          timeout_s);
        }
        sleep_s(0.01);
    }
}

void ds_ompi_server_stop(ds_ompi_server *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status;
        while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR) {
        }
        s->pid = 0;
    }
    if (s->dir[0]) {
        char file[128];
        snprintf(file, sizeof file, "%s/uri", s->dir);
        unlink(file);
        rmdir(s->dir);
        s->dir[0] = '\0';
    }
}

/* ---- the env form's rendezvous ----------------------------------------------- */

ds_status ds_join_prepare(const ds_join_plan *plan, double timeout_s) {
    if (plan->kind != DS_JOIN_ENV) return DS_OK;
    ds_rdzv_desc d = {.addr = plan->master_addr, .port = plan->master_port,
                      .member = plan->part, .members = plan->parts, .nproc = 1,
                      .timeout_s = timeout_s, .what = "rank"};
    ds_rdzv *r = NULL;
    char uri[DS_RDZV_LINE];
    ds_status st;
    if (plan->part == 0) {
        st = ds_rdzv_listen(&d, &r);
        if (st == DS_OK) st = ds_ompi_server_start(timeout_s, &g_server);
        if (st == DS_OK) st = ds_rdzv_serve(r, g_server.uri);
        if (st == DS_OK) snprintf(uri, sizeof uri, "%s", g_server.uri);
    } else {
        st = ds_rdzv_join(&d, &r, uri, sizeof uri);
    }
    /* the connections only carried the URI: the ranks talk over MPI now */
    ds_rdzv_close(r);
    if (st != DS_OK) {
        ds_ompi_server_stop(&g_server);
        ds_error_prefix("rank %d of %d: meeting the other ranks at %s:%d", plan->part,
                        plan->parts, plan->master_addr, plan->master_port);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    if (setenv("OMPI_MCA_pmix_server_uri", uri, 1) != 0)
        return DS_ERR(DS_ERR_IO, "setenv OMPI_MCA_pmix_server_uri: %s", strerror(errno));
    return DS_OK;
}

/* ---- the MPI side --------------------------------------------------------------- */

static ds_status keep(MPI_Comm c) {
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (g_n_kept == g_cap_kept) {
        int cap = g_cap_kept ? 2 * g_cap_kept : 16;
        MPI_Comm *k = realloc(g_kept, (size_t)cap * sizeof *k);
        if (!k) return DS_ERR(DS_ERR_OOM, "joining the job: out of memory");
        g_kept = k;
        g_cap_kept = cap;
    }
    g_kept[g_n_kept++] = c;
    return DS_OK;
}

static ds_status mpi_fail(int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return DS_ERR(DS_ERR_COMM, "joining the job: %s: %s", what, text);
}

/* MPI_Comm_accept / MPI_Comm_connect have no deadline of their own: each
 * runs on a thread of its own while this one waits for it until the
 * deadline. One that does not return is left behind (the process ends its
 * job with MPI_Abort at exit, which MPI_THREAD_MULTIPLE allows while the
 * thread still waits). */
typedef struct cc_call {
    bool accept;
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm comm, inter;
    int rc;
    atomic_bool done;
} cc_call;

static void *cc_run(void *arg) {
    cc_call *c = arg;
    c->rc = c->accept ? MPI_Comm_accept(c->port, MPI_INFO_NULL, 0, c->comm, &c->inter)
                      : MPI_Comm_connect(c->port, MPI_INFO_NULL, 0, c->comm, &c->inter);
    atomic_store(&c->done, true);
    return NULL;
}

/* 1: done (c->rc says how), 0: the deadline passed (c now belongs to the
 * thread), -1: no thread could be started. */
static int cc_wait(cc_call *c, double deadline) {
    pthread_t t;
    if (pthread_create(&t, NULL, cc_run, c) != 0) return -1;
    while (!atomic_load(&c->done) && now_s() < deadline) sleep_s(0.002);
    if (!atomic_load(&c->done)) {
        pthread_detach(t);
        return 0;
    }
    pthread_join(t, NULL);
    return 1;
}

/* "node 2", "nodes 2 and 3": the parts not in `joined` (at most 16 named). */
static void missing_parts(const ds_join_plan *p, const unsigned char *joined, char *buf,
                          size_t cap) {
    int n = 0, shown = 0;
    for (int g = 0; g < p->parts; g++) n += !joined[g];
    size_t len = (size_t)snprintf(buf, cap, "%s%s ", p->what, n > 1 ? "s" : "");
    for (int g = 0; g < p->parts && len < cap; g++) {
        if (joined[g]) continue;
        if (shown == 16) {
            snprintf(buf + len, cap - len, " and %d more", n - shown);
            return;
        }
        const char *sep = shown == 0 ? "" : shown == n - 1 ? " and " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", sep, g);
        shown++;
    }
}

/* The parts in comm (every rank's part, gathered) as a set. */
static ds_status gather_parts(const ds_join_plan *p, MPI_Comm comm, unsigned char *joined) {
    int n = 0;
    MPI_Comm_size(comm, &n);
    int *parts = malloc((size_t)n * sizeof *parts);
    if (!parts) return DS_ERR(DS_ERR_OOM, "joining the job: out of memory");
    int rc = MPI_Allgather(&p->part, 1, MPI_INT, parts, 1, MPI_INT, comm);
    if (rc == MPI_SUCCESS) {
        memset(joined, 0, (size_t)p->parts);
        for (int k = 0; k < n; k++)
            if (parts[k] >= 0 && parts[k] < p->parts) joined[parts[k]] = 1;
    }
    free(parts);
    return rc == MPI_SUCCESS ? DS_OK : mpi_fail(rc, "MPI_Allgather of the parts");
}

/* Part 0's local rank 0 publishes; every other part's looks the port up. */
static ds_status find_port(const ds_join_plan *p, int local_rank, double deadline, double timeout,
                           char *port) {
    int rc = MPI_SUCCESS;
    if (p->part == 0) {
        if (local_rank != 0) return DS_OK;
        rc = MPI_Open_port(MPI_INFO_NULL, port);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Open_port");
        rc = MPI_Publish_name(DS_JOIN_SERVICE, MPI_INFO_NULL, port);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Publish_name (is this MPI pointed at the job's "
                                "ompi-server?)");
        return DS_OK;
    }
    int found = 0;
    if (local_rank == 0) {
        do {
            found = MPI_Lookup_name(DS_JOIN_SERVICE, MPI_INFO_NULL, port) == MPI_SUCCESS;
            if (!found) sleep_s(JOIN_LOOKUP_RETRY_S);
        } while (!found && now_s() < deadline);
    }
    /* the other local ranks learn whether it was found: they must not wait
     * in MPI_Comm_connect for a root that gave up */
    rc = MPI_Bcast(&found, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast");
    if (!found)
        return DS_ERR(DS_ERR_TIMEOUT,
                      "joining the job: %s 0's ranks did not publish their MPI port within "
                      "%.0f s (did %s 0 start its ranks?)",
                      p->what, timeout, p->what);
    return DS_OK;
}

ds_status ds_join_merge(const ds_join_plan *p, double timeout_s, MPI_Comm *world) {
    if (timeout_s <= 0) timeout_s = 300.0;
    double deadline = now_s() + timeout_s;
    int local_rank = 0, local_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &local_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &local_size);
    if (local_size != p->part_size)
        return DS_ERR(DS_ERR_COMM,
                      "joining the job: this %s's MPI job has %d rank(s), the job expects %d "
                      "per %s",
                      p->what, local_size, p->part_size, p->what);
    unsigned char *joined = calloc((size_t)p->parts, 1);
    if (!joined) return DS_ERR(DS_ERR_OOM, "joining the job: out of memory");
    /* a failed lookup or connect comes back as a code, not through
     * MPI_COMM_WORLD's handler ending the process */
    MPI_Errhandler old_handler;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &old_handler);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    char port[MPI_MAX_PORT_NAME] = "";
    ds_status st = find_port(p, local_rank, deadline, timeout_s, port);
    MPI_Comm cur = MPI_COMM_WORLD;
    char who[512];
    if (st != DS_OK) goto out;
    joined[p->part] = 1;
    if (p->part != 0) {
        cc_call *c = calloc(1, sizeof *c);
        if (!c) {
            st = DS_ERR(DS_ERR_OOM, "joining the job: out of memory");
            goto out;
        }
        memcpy(c->port, port, sizeof port);
        c->comm = MPI_COMM_WORLD;
        int w = cc_wait(c, deadline);
        if (w <= 0) {
            st = w < 0 ? DS_ERR(DS_ERR_COMM, "joining the job: cannot start a thread")
                       : DS_ERR(DS_ERR_TIMEOUT,
                                "joining the job: %s 0's ranks did not take %s %d in within "
                                "%.0f s",
                                p->what, p->what, p->part, timeout_s);
            if (w < 0) free(c);
            goto out;
        }
        int rc = c->rc;
        MPI_Comm inter = c->inter;
        free(c);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(rc, "MPI_Comm_connect");
            goto out;
        }
        DS_TRY_GOTO(st, keep(inter), out);
        rc = MPI_Intercomm_merge(inter, 1, &cur);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(rc, "MPI_Intercomm_merge");
            goto out;
        }
        DS_TRY_GOTO(st, keep(cur), out);
        DS_TRY_GOTO(st, gather_parts(p, cur, joined), out);
    }
    for (;;) {
        int n = 0;
        for (int g = 0; g < p->parts; g++) n += joined[g];
        if (n == p->parts) break;
        /* the next part to connect, whichever it is, joins everyone so far */
        cc_call *c = calloc(1, sizeof *c);
        if (!c) {
            st = DS_ERR(DS_ERR_OOM, "joining the job: out of memory");
            goto out;
        }
        c->accept = true;
        memcpy(c->port, port, sizeof port);
        c->comm = cur;
        int w = cc_wait(c, deadline);
        if (w <= 0) {
            missing_parts(p, joined, who, sizeof who);
            st = w < 0 ? DS_ERR(DS_ERR_COMM, "joining the job: cannot start a thread")
                       : DS_ERR(DS_ERR_TIMEOUT,
                                "joining the job: %s of %d did not connect within %.0f s", who,
                                p->parts, timeout_s);
            if (w < 0) free(c);
            goto out;
        }
        int rc = c->rc;
        MPI_Comm inter = c->inter, next;
        free(c);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(rc, "MPI_Comm_accept");
            goto out;
        }
        DS_TRY_GOTO(st, keep(inter), out);
        rc = MPI_Intercomm_merge(inter, 0, &next);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(rc, "MPI_Intercomm_merge");
            goto out;
        }
        DS_TRY_GOTO(st, keep(next), out);
        cur = next;
        DS_TRY_GOTO(st, gather_parts(p, cur, joined), out);
    }
    /* arrival order is any order: rank = part * K + local rank */
    MPI_Comm ordered;
    int rc = MPI_Comm_split(cur, 0, p->part * p->part_size + local_rank, &ordered);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Comm_split");
        goto out;
    }
    DS_TRY_GOTO(st, keep(ordered), out);
    int size = 0;
    MPI_Comm_size(ordered, &size);
    if (size != p->world) {
        st = DS_ERR(DS_ERR_COMM, "joining the job: %d ranks joined, the job has %d", size,
                    p->world);
        goto out;
    }
    *world = ordered;
    if (p->part == 0 && local_rank == 0) {
        /* nobody else may join this job under that name any more (after a
         * failure the port stays: a thread may still wait on it) */
        MPI_Unpublish_name(DS_JOIN_SERVICE, MPI_INFO_NULL, port);
        MPI_Close_port(port);
    }
out:
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, old_handler);
    MPI_Errhandler_free(&old_handler);
    free(joined);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

void ds_join_stop_server(void) { ds_ompi_server_stop(&g_server); }

void ds_join_release(void) {
    /* newest first: the final split, then each merge and its intercomm */
    for (int k = g_n_kept - 1; k >= 0; k--)
        if (g_kept[k] != MPI_COMM_NULL) MPI_Comm_free(&g_kept[k]);
    free(g_kept);
    g_kept = NULL;
    g_n_kept = g_cap_kept = 0;
    ds_ompi_server_stop(&g_server);
}
