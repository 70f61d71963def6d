/* engine-run as mpirun's parent (see supervise.h). */
#include "tools/common/supervise.h"

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
 * handler only adds), and whether the last SIGINT came from a terminal. */
static const int k_handled[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU, SIGPWR};
#define N_HANDLED (int)(sizeof k_handled / sizeof *k_handled)
static atomic_int g_got[N_HANDLED];
static atomic_int g_int_from_tty;

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    for (int k = 0; k < N_HANDLED; k++)
        if (k_handled[k] == sig) atomic_fetch_add(&g_got[k], 1);
    /* a terminal's Ctrl-C goes to the whole foreground group, mpirun too */
    if (sig == SIGINT) atomic_store(&g_int_from_tty, si->si_code == SI_KERNEL);
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

static pid_t start_child(char **argv) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* the child: mpirun with the signals as they were, dying with us */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int k = 0; k < N_HANDLED; k++) sigaction(k_handled[k], &dfl, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1); /* engine-run died before the prctl */
    execv(argv[0], argv);
    fprintf(stderr, "engine-run: cannot run '%s': %s\n", argv[0], strerror(errno));
    _exit(1);
}

int er_supervise(char **argv, const er_supervise_opts *o) {
    joins j;
    bool counting = o->count_joins && joins_open(&j);
    if (!counting) {
        memset(&j, 0, sizeof j);
        j.rfd = j.wfd = -1;
    }
    install();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = start_child(argv);
    if (pid < 0) {
        fprintf(stderr, "engine-run: cannot start '%s': %s\n", argv[0], strerror(errno));
        joins_close(&j);
        return 1;
    }
    double t0 = now_s(), last_print = 0, relayed_at = -1;
    int seen[N_HANDLED] = {0}, stop_sig = 0, printed_s = -1, printed_c = -1, status = 0;
    bool progress = false, escalated = false;
    for (;;) {
        struct pollfd p = {.fd = j.rfd, .events = POLLIN};
        poll(counting ? &p : NULL, counting ? 1 : 0, 100);
        joins_read(&j);
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
                if (!atomic_load(&g_int_from_tty)) kill(pid, SIGINT);
            } else {
                if (sig != SIGHUP && !stop_sig) stop_sig = sig;
                kill(pid, sig);
            }
        }
        /* a relay the ranks did not act on in time: end the job */
        if (relayed_at >= 0 && !escalated && t - relayed_at > o->deadline_s + 5.0) {
            fprintf(stderr, "engine-run: the ranks did not exit within %.0f s of the relayed "
                    "SIGTERM: ending the job\n", o->deadline_s + 5.0);
            kill(pid, SIGTERM);
            escalated = true;
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "engine-run: waiting for %s: %s\n", argv[0], strerror(errno));
            status = 1 << 8;
            break;
        }
    }
    joins_close(&j);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* told to stop: a job that stopped says which signal stopped it */
    if (stop_sig && code != 0) code = 128 + stop_sig;
    return code;
}
