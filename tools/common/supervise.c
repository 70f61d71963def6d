/* engine-run as mpirun's parent (see supervise.h). */
#include "tools/common/supervise.h"
#include "tools/common/output_relay.h"
#include "tools/common/rank_watch.h"
#include "engine/core/config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

/* Signals engine-run handles, and what came: a count per signal (the
 * handler only adds). mpirun runs in a process group of its own
 * (start_child), so a signal sent to engine-run's group (a terminal's
 * Ctrl-C, `timeout`, `kill -- -PGID`, a scheduler) reaches mpirun only as
 * engine-run passes it on: once, and a SIGTERM as the relay the ranks save
 * on, not as mpirun's own teardown. */
static const int k_handled[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU, SIGPWR};
#define N_HANDLED (int)(sizeof k_handled / sizeof *k_handled)
static atomic_int g_got[N_HANDLED];

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)si;
    (void)uc;
    for (int k = 0; k < N_HANDLED; k++)
        if (k_handled[k] == sig) atomic_fetch_add(&g_got[k], 1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The pipe ranks write 'S' (reached the library), 'C' (connected) and 'P'
 * (saves on signals) to. */
typedef struct joins {
    char dir[64], path[96];
    int rfd, wfd; /* engine-run holds a write end so reads never see EOF */
    int started, connected, preempt;
} joins;

static bool joins_open(joins *j) {
    memset(j, 0, sizeof *j);
    j->rfd = j->wfd = -1;
    snprintf(j->dir, sizeof j->dir, "/tmp/engine-run.XXXXXX");
    if (!mkdtemp(j->dir)) return false;
    snprintf(j->path, sizeof j->path, "%s/join", j->dir);
    if (mkfifo(j->path, 0600) != 0 ||
        (j->rfd = open(j->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 ||
        (j->wfd = open(j->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
        unlink(j->path);
        rmdir(j->dir);
        return false;
    }
    return setenv("DS_LAUNCH_FIFO", j->path, 1) == 0;
}

static void joins_read(joins *j) {
    char buf[512];
    ssize_t n;
    while (j->rfd >= 0 && (n = read(j->rfd, buf, sizeof buf)) > 0)
        for (ssize_t k = 0; k < n; k++) {
            j->started += buf[k] == 'S';
            j->connected += buf[k] == 'C';
            j->preempt += buf[k] == 'P';
        }
}

static void joins_close(joins *j) {
    if (j->rfd >= 0) close(j->rfd);
    if (j->wfd >= 0) close(j->wfd);
    if (j->path[0]) unlink(j->path);
    if (j->dir[0]) rmdir(j->dir);
}

static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    for (int k = 0; k < N_HANDLED; k++) sigaction(k_handled[k], &sa, NULL);
}

/* Pipes for mpirun's stdout and stderr: [k][0] ours to read, [k][1] its. */
static bool open_pipes(int fds[2][2]) {
    for (int k = 0; k < 2; k++) fds[k][0] = fds[k][1] = -1;
    for (int k = 0; k < 2; k++)
        if (pipe2(fds[k], O_CLOEXEC) != 0) return false;
    return true;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static pid_t start_child(char **argv, int fds[2][2]) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid > 0) {
        setpgid(pid, pid); /* also here: no signal may find it still in ours */
        return pid;
    }
    if (pid < 0) return pid;
    /* the child: mpirun in its own process group (see k_handled) with the
     * signals as they were (SIGPIPE too: engine-run ignores it, and an
     * ignored signal stays ignored across exec), dying with us */
    setpgid(0, 0);
    if (fds && (dup2(fds[0][1], 1) < 0 || dup2(fds[1][1], 2) < 0)) _exit(1);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int k = 0; k < N_HANDLED; k++) sigaction(k_handled[k], &dfl, NULL);
    sigaction(SIGPIPE, &dfl, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1); /* engine-run died before the prctl */
    execv(argv[0], argv);
    fprintf(stderr, "engine-run: cannot run '%s': %s\n", argv[0], strerror(errno));
    _exit(1);
}

/* How long mpirun may take to end a job once a rank died or failed: it
 * takes 1-2 s here (SIGTERM to the others, SIGKILL a second later), and the
 * job must end within 15 s of a rank's death (issue 15). */
#define ER_TEARDOWN_S 5.0

/* After mpirun exited, its pipes reach EOF at once (the ranks write through
 * mpirun, not into them); this bounds the wait if something else holds one. */
#define RELAY_DRAIN_S 2.0

/* Whatever mpirun's pipes hold, into the relay; a pipe at EOF is closed. */
static void relay_pipes(er_relay *relay, int fds[2][2], double now) {
    er_relay_tick(relay, now);
    for (int k = 0; k < 2; k++) {
        if (fds[k][0] < 0) continue;
        char buf[65536];
        /* a bounded number of reads, so signals and the join count are not
         * starved by a rank that prints without pause */
        for (int rounds = 0; rounds < 16; rounds++) {
            struct pollfd p = {.fd = fds[k][0], .events = POLLIN};
            if (poll(&p, 1, 0) <= 0) break;
            ssize_t n = read(fds[k][0], buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close_fd(&fds[k][0]);
                break;
            }
            er_relay_feed(relay, k, buf, (size_t)n);
        }
    }
}

/* Signals engine-run got since `base` (counts per handled signal). */
static bool signalled_since(const int *base) {
    for (int k = 0; k < N_HANDLED; k++)
        if (atomic_load(&g_got[k]) != base[k]) return true;
    return false;
}

/* One run of the job. base: the signal counts when the supervision began,
 * so that one that came between two runs is passed to the next (then no
 * restart follows it: er_supervise). */
static int supervise_once(char **argv, const er_supervise_opts *o, const int *base) {
    joins j;
    bool counting = o->count_joins && joins_open(&j);
    if (!counting) {
        memset(&j, 0, sizeof j);
        j.rfd = j.wfd = -1;
    }
    install();
    fflush(stdout);
    fflush(stderr);
    /* mpirun's output through the relay; without pipes or memory, as it is */
    int fds[2][2];
    er_relay *relay = NULL;
    if (o->relay_output && open_pipes(fds)) relay = er_relay_create(o->np, 1, 2);
    if (relay) er_relay_set_rank_offset(relay, o->rank_offset);
    if (!relay && o->relay_output)
        for (int k = 0; k < 2; k++) {
            close_fd(&fds[k][0]);
            close_fd(&fds[k][1]);
        }
    pid_t pid = start_child(argv, relay ? fds : NULL);
    if (relay)
        for (int k = 0; k < 2; k++) close_fd(&fds[k][1]);
    if (pid < 0) {
        fprintf(stderr, "engine-run: cannot start '%s': %s\n", argv[0], strerror(errno));
        joins_close(&j);
        if (relay)
            for (int k = 0; k < 2; k++) close_fd(&fds[k][0]);
        er_relay_destroy(relay);
        return 1;
    }
    /* which local rank ends first, to name it when mpirun's banner does not */
    er_ranks *ranks = relay && o->count_joins ? er_ranks_create(pid, o->np) : NULL;
    double t0 = now_s(), last_print = 0, relayed_at = -1, over_at = -1;
    int torn_down = 0;
    int seen[N_HANDLED], stop_sig = 0, printed_s = -1, printed_c = -1, status = 0;
    memcpy(seen, base, sizeof seen);
    int hook_code = -1; /* the hook ended the job: engine-run's exit status */
    bool progress = false, escalated = false;
    for (;;) {
        struct pollfd p[3 + ER_WATCH_MAX + ER_HOOK_FDS] = {
            {.fd = counting ? j.rfd : -1, .events = POLLIN},
            {.fd = relay ? fds[0][0] : -1, .events = POLLIN},
            {.fd = relay ? fds[1][0] : -1, .events = POLLIN}};
        /* Until every rank is found, look every 10 ms: a rank that ends
         * between two looks is named only by what the watch can deduce
         * (rank_watch.c), or by the naming after the loop. Not only in the
         * first seconds: on a loaded host mpirun can take longer to start
         * them. */
        bool all_found = er_ranks_scan(ranks);
        int np = 3 + er_ranks_fds(ranks, p + 3, ER_WATCH_MAX);
        if (o->hook) np += o->hook->fds(o->hook->arg, p + np, ER_HOOK_FDS);
        poll(p, (nfds_t)np, all_found ? 100 : 10);
        er_ranks_check(ranks);
        joins_read(&j);
        if (relay) relay_pipes(relay, fds, now_s());
        double t = now_s() - t0;
        /* Start-up: after 2 s without every rank connected, a line each time
         * the counts move (at most every 5 s), and one when all are there. */
        if (counting && j.connected < o->np && t >= 2.0 &&
            (j.started != printed_s || j.connected != printed_c) &&
            (!progress || t - last_print >= 5.0)) {
            fprintf(stderr, "engine-run: waiting for the ranks: %d of %d started, %d connected "
                    "(%.0f s)\n", j.started, o->np, j.connected, t);
            printed_s = j.started;
            printed_c = j.connected;
            last_print = t;
            progress = true;
        }
        if (counting && progress && j.connected >= o->np && printed_c < o->np) {
            fprintf(stderr, "engine-run: all %d ranks connected (%.1f s)\n", o->np, t);
            printed_c = o->np;
        }
        for (int k = 0; k < N_HANDLED; k++) {
            int got = atomic_load(&g_got[k]);
            if (got == seen[k]) continue;
            seen[k] = got;
            int sig = k_handled[k];
            if (sig == SIGTERM) {
                /* the ranks save on signals: relay; else mpirun ends the job.
                 * Without the count (a hostfile) the relay is tried first. */
                bool relay = !counting || j.preempt > 0;
                if (!stop_sig) stop_sig = sig;
                if (relay) {
                    fprintf(stderr, "engine-run: SIGTERM: every rank saves at its next step "
                            "boundary and exits (relayed as SIGURG)\n");
                    kill(pid, ER_RELAY_SIGNAL);
                    if (relayed_at < 0) relayed_at = t;
                } else {
                    kill(pid, SIGTERM);
                }
            } else if (sig == SIGINT) {
                kill(pid, SIGINT); /* mpirun ends the job */
            } else {
                if (sig != SIGHUP && !stop_sig) stop_sig = sig;
                kill(pid, sig);
            }
        }
        /* the other nodes say this node's ranks must go */
        if (o->hook && hook_code < 0 && (hook_code = o->hook->tick(o->hook->arg)) >= 0) {
            kill(pid, SIGTERM);
            if (over_at < 0) over_at = t; /* then SIGKILL, as after a rank's end */
        }
        /* a relay the ranks did not act on in time: end the job */
        if (relayed_at >= 0 && !escalated && t - relayed_at > o->deadline_s + 5.0) {
            fprintf(stderr, "engine-run: the ranks did not exit within %.0f s of the relayed "
                    "SIGTERM: ending the job\n", o->deadline_s + 5.0);
            kill(pid, SIGTERM);
            escalated = true;
            if (over_at < 0) over_at = t; /* then SIGKILL, should mpirun hang */
        }
        /* A rank died or failed: mpirun ends the job within a second or two.
         * Open MPI 4.1's mpirun can hang instead when a rank dies while the
         * ranks connect (seen: "PMIX ERROR: UNREACHABLE", the dead rank left
         * a zombie, mpirun waiting forever): past ER_TEARDOWN_S engine-run
         * ends what is left itself. */
        int st1 = er_ranks_first_status(ranks);
        /* not after a relayed SIGTERM: the ranks save and end on purpose,
         * one before another, and the relay's deadline (below) covers one
         * that does not */
        bool saving = relayed_at >= 0;
        if (over_at < 0 && !saving &&
            ((relay && er_relay_named_rank(relay)) || (st1 > 0 && !stop_sig)))
            over_at = t;
        if (over_at >= 0 && t - over_at > ER_TEARDOWN_S && torn_down < 2) {
            if (!torn_down && hook_code < 0)
                fprintf(stderr, "engine-run: mpirun did not end the job within %.0f s of a "
                        "rank's end: ending it\n", ER_TEARDOWN_S);
            er_ranks_kill(ranks, SIGKILL);
            kill(pid, torn_down ? SIGKILL : SIGTERM);
            torn_down++;
            over_at = t; /* SIGKILL follows after the same wait */
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "engine-run: waiting for %s: %s\n", argv[0], strerror(errno));
            status = 1 << 8;
            break;
        }
    }
    if (relay) { /* what mpirun wrote before it exited */
        double until = now_s() + RELAY_DRAIN_S;
        while ((fds[0][0] >= 0 || fds[1][0] >= 0) && now_s() < until) {
            struct pollfd p[2] = {{.fd = fds[0][0], .events = POLLIN},
                                  {.fd = fds[1][0], .events = POLLIN}};
            poll(p, 2, 100);
            relay_pipes(relay, fds, now_s());
        }
        er_relay_finish(relay);
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    er_ranks_check(ranks);
    int first = er_ranks_first_gone(ranks), first_status = er_ranks_first_status(ranks);
    /* ended by engine-run: the status is the first rank's, as mpirun's would be */
    if (torn_down && first_status > 0)
        code = WIFSIGNALED(first_status) ? 128 + WTERMSIG(first_status)
                                         : WEXITSTATUS(first_status);
    /* mpirun's banner did not come (or was not about a rank): say which rank
     * ended first and how mpirun reports it (128 + a signal that killed it,
     * else the rank's exit status); not after a preemption, whose ending is
     * the plan */
    first += first >= 0 ? o->rank_offset : 0;
    bool quiet = !relay || code == 0 || stop_sig || hook_code >= 0 || er_relay_named_rank(relay);
    /* Neither: a rank that fails at once (a bad data line every rank reads,
     * before MPI starts) can start and end between two looks of the watch,
     * and mpirun then sometimes prints only "Primary job terminated
     * normally, but 1 process returned a non-zero exit code". Name the rank
     * whose error came first, as that. */
    int erred = relay ? er_relay_first_error_rank(relay) : -1;
    int abort_status = 0, aborted = relay ? er_relay_abort_rank(relay, &abort_status) : -1;
    if (!quiet && aborted >= 0) { /* the library said which rank ends it, and why */
        fprintf(stderr, "engine-run: rank %d ended the job with MPI_Abort (status %d) after the "
                "error above; mpirun stopped the other ranks\n", aborted, abort_status);
        quiet = true;
    }
    if (!quiet && first < 0 && erred >= 0)
        fprintf(stderr, "engine-run: the job ended with status %d after rank %d's error above; "
                "mpirun stopped the other ranks\n", code, erred);
    if (!quiet && first >= 0) {
        const char *abbrev = code > 128 && code - 128 < NSIG ? sigabbrev_np(code - 128) : NULL;
        if (abbrev)
            fprintf(stderr, "engine-run: rank %d was killed by signal %d (SIG%s); mpirun stopped "
                    "the other ranks\n", first, code - 128, abbrev);
        else
            fprintf(stderr, "engine-run: rank %d exited with status %d; mpirun stopped the other "
                    "ranks\n", first, code);
    }
    er_ranks_destroy(ranks);
    if (relay) {
        er_relay_destroy(relay);
        for (int k = 0; k < 2; k++) close_fd(&fds[k][0]);
    }
    joins_close(&j);
    /* told to stop: a job that stopped says which signal stopped it */
    if (stop_sig && code != 0) code = 128 + stop_sig;
    /* stopped for another node: that node's status (the hook said why) */
    if (hook_code >= 0) code = hook_code;
    return code;
}

int er_supervise(char **argv, const er_supervise_opts *o) {
    int base[N_HANDLED];
    for (int k = 0; k < N_HANDLED; k++) base[k] = atomic_load(&g_got[k]);
    for (int restarts = 0;; restarts++) {
        if (o->max_restarts > 0) { /* the ranks' DS_RESTART_COUNT (mpirun -x) */
            char n[16];
            snprintf(n, sizeof n, "%d", restarts);
            setenv("DS_RESTART_COUNT", n, 1);
        }
        int code = supervise_once(argv, o, base);
        /* a job that ended well, was told to stop (during it, or since it
         * ended), or was started wrongly (a usage error, status 2) is not
         * started again */
        if (code == 0 || signalled_since(base) || code == 2 || o->max_restarts == 0) return code;
        if (restarts >= o->max_restarts) {
            fprintf(stderr, "engine-run: the job ended with status %d after %d restart(s); "
                    "--max-restarts %d spent\n", code, restarts, o->max_restarts);
            return code;
        }
        fprintf(stderr, "engine-run: the job ended with status %d: starting it again (restart %d "
                "of --max-restarts %d; DS_RESTART_COUNT=%d)\n", code, restarts + 1,
                o->max_restarts, restarts + 1);
    }
}

void er_forward_signals(char *out, size_t cap, const int *save_sigs, int n) {
    const char *user = getenv("OMPI_MCA_ess_base_forward_signals");
    if (user && (!*user || strcmp(user, "none") == 0)) user = NULL;
    snprintf(out, cap, "%s%sSIGURG", user ? user : "", user ? "," : "");
    for (int k = 0; k < n; k++)
        if (save_sigs[k] == SIGXCPU || save_sigs[k] == SIGPWR)
            snprintf(out + strlen(out), cap - strlen(out), ",%s", ds_signal_name(save_sigs[k]));
}

void er_warn_unforwarded(FILE *out, const int save_sigs[2]) {
    for (int k = 0; k < 2; k++)
        if (save_sigs[k] == SIGINT || save_sigs[k] == SIGHUP)
            fprintf(out, "engine-run: warning: mpirun does not pass %s on to the ranks: %s %s "
                    "works when sent to the ranks themselves\n", ds_signal_name(save_sigs[k]),
                    k == 0 ? "zero_engine.save_on_signal" : "--save-on-signal",
                    ds_signal_name(save_sigs[k]));
}
