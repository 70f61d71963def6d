/* The engine and what starts and stops it: preemption signals (ds_preempt_*,
 * engine.h) and the note each rank leaves for engine-run when it joins.
 *
 * Signal handlers run at any instruction of any thread, so everything they
 * touch is a lock-free atomic, and they call only async-signal-safe
 * functions (write, clock_gettime, sem_post). */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine_internal.h"

/* ------------------------------------------------------------- the request */

static atomic_int g_signal;   /* the first preemption signal; 0: none */
static atomic_int g_count;    /* signals received since the last reset */
static atomic_llong g_at_ns;  /* CLOCK_MONOTONIC when the first came */
static atomic_int g_during, g_micro_at, g_gas_at; /* where training was then */
/* where training is: updated by the engine (ds_preempt_note_*) */
static atomic_int g_phase = DS_PREEMPT_BETWEEN_STEPS, g_micro, g_gas = 1;
static sem_t g_sem;
static atomic_int g_sem_ready;

/* engine-run relays a SIGTERM it receives as g_relay_from (mpirun cannot
 * pass SIGTERM on), naming it in DS_PREEMPT_RELAY="FROM:TO". */
static atomic_int g_relay_from, g_relay_to;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Async-signal-safe text: append s, or a non-negative number, to buf[*n]. */
static void put_s(char *buf, size_t cap, size_t *n, const char *s) {
    while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
}
static void put_u(char *buf, size_t cap, size_t *n, long v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10); while ((v /= 10) > 0 && k < 23);
    while (k > 0 && *n + 1 < cap) buf[(*n)++] = d[--k];
}

static const char *sig_text(int s) {
    switch (s) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGXCPU: return "SIGXCPU";
    case SIGPWR: return "SIGPWR";
    default: return "a preemption signal";
    }
}

void ds_preempt_request(int signo) {
    int saved = errno;
    int none = 0;
    bool first = atomic_compare_exchange_strong(&g_signal, &none, signo);
    int count = atomic_fetch_add(&g_count, 1) + 1;
    if (first) {
        atomic_store(&g_at_ns, now_ns());
        atomic_store(&g_during, atomic_load(&g_phase));
        atomic_store(&g_micro_at, atomic_load(&g_micro));
        atomic_store(&g_gas_at, atomic_load(&g_gas));
        if (atomic_load(&g_sem_ready)) sem_post(&g_sem);
    }
    char msg[200];
    size_t n = 0;
    put_s(msg, sizeof msg, &n, "[zero-engine] pid ");
    put_u(msg, sizeof msg, &n, (long)getpid());
    put_s(msg, sizeof msg, &n, ": ");
    put_s(msg, sizeof msg, &n, sig_text(signo));
    if (first) {
        put_s(msg, sizeof msg, &n, ": saving at the next step boundary, then exiting\n");
    } else {
        put_s(msg, sizeof msg, &n, " (signal ");
        put_u(msg, sizeof msg, &n, count);
        put_s(msg, sizeof msg, &n, "): already stopping, the save goes on\n");
    }
    ssize_t w = write(2, msg, n);
    (void)w;
    errno = saved;
}

/* The process that started this one is Open MPI's launcher (mpirun or an
 * orted daemon): its SIGTERM is no preemption. mpirun cannot pass a SIGTERM
 * on (engine-run relays one as SIGURG); it sends SIGTERM only to end the
 * job (a rank died or aborted, or mpirun itself was signalled), with SIGKILL
 * a second later. A rank that took it for a preemption printed "saving at
 * the next step boundary" under the error that ended the job and waited for
 * that SIGKILL, for a save that could not finish with its peers gone. */
static atomic_int g_parent_kills;

static bool parent_is_ompi_launcher(void) {
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)getppid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, comm, sizeof comm - 1);
    close(fd);
    if (n <= 0) return false;
    comm[n] = '\0';
    comm[strcspn(comm, "\n")] = '\0';
    static const char *const k_launchers[] = {"mpirun", "mpiexec", "orterun", "orted"};
    for (size_t k = 0; k < sizeof k_launchers / sizeof *k_launchers; k++)
        if (!strcmp(comm, k_launchers[k])) return true;
    return false;
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (sig == SIGTERM && atomic_load(&g_parent_kills) && si && si->si_pid == getppid()) {
        signal(SIGTERM, SIG_DFL); /* the launcher ends the job: go, as without a handler */
        raise(SIGTERM);
        return;
    }
    int from = atomic_load(&g_relay_from);
    ds_preempt_request(from && sig == from ? atomic_load(&g_relay_to) : sig);
}

/* ----------------------------------------------------------- installation */

static struct sigaction g_old[NSIG];
static bool g_installed[NSIG];

/* Signals an application may ask to save on: those the config accepts. */
static bool allowed(int s) { return s > 0 && s < NSIG && ds_signal_from_name(ds_signal_name(s)) == s; }

static ds_status install_one(int s, const sigset_t *mask) {
    if (g_installed[s]) return DS_OK;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_mask = *mask;        /* one handler at a time */
    sa.sa_flags = SA_RESTART | SA_SIGINFO; /* a write or a wait it interrupts goes on */
    if (sigaction(s, &sa, &g_old[s]) != 0)
        return DS_ERR(DS_ERR_INTERNAL, "ds_preempt_install: sigaction(%s): %s", ds_signal_name(s),
                      strerror(errno));
    g_installed[s] = true;
    return DS_OK;
}

/* DS_PREEMPT_RELAY="FROM:TO" (signal numbers) or unset. */
static ds_status read_relay(int *from, int *to) {
    *from = *to = 0;
    const char *v = getenv("DS_PREEMPT_RELAY");
    if (!v || !*v) return DS_OK;
    char *end;
    long a = strtol(v, &end, 10), b = *end == ':' ? strtol(end + 1, &end, 10) : 0;
    if (*end || a <= 0 || a >= NSIG || !allowed((int)b))
        return DS_ERR(DS_ERR_INVALID_ARG, "DS_PREEMPT_RELAY=%s: expected FROM:TO, two signal "
                      "numbers (engine-run sets it)", v);
    *from = (int)a;
    *to = (int)b;
    return DS_OK;
}

ds_status ds_preempt_install(const engine_t *e, const int *extra, int n_extra) {
    int want[16], n = 0;
    want[n++] = SIGTERM;
    if (e && e->cfg.save_on_signal) want[n++] = e->cfg.save_on_signal;
    for (int k = 0; k < n_extra; k++) {
        if (!allowed(extra[k]))
            return DS_ERR(DS_ERR_INVALID_ARG, "ds_preempt_install: %s is not a signal to save on "
                          "(SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, SIGXCPU, SIGPWR)",
                          ds_signal_name(extra[k]));
        if (n < 14) want[n++] = extra[k];
    }
    int from, to;
    DS_TRY(read_relay(&from, &to));
    if (from) want[n++] = from;
    if (!atomic_load(&g_sem_ready)) {
        if (sem_init(&g_sem, 0, 0) != 0)
            return DS_ERR(DS_ERR_INTERNAL, "ds_preempt_install: sem_init: %s", strerror(errno));
        atomic_store(&g_sem_ready, 1);
    }
    atomic_store(&g_relay_to, to);
    atomic_store(&g_relay_from, from);
    atomic_store(&g_parent_kills, parent_is_ompi_launcher());
    sigset_t mask;
    sigemptyset(&mask);
    for (int k = 0; k < n; k++) sigaddset(&mask, want[k]);
    for (int k = 0; k < n; k++) DS_TRY(install_one(want[k], &mask));
    ds_engine_note_join('P'); /* engine-run relays a SIGTERM only to ranks that save */
    return DS_OK;
}

void ds_preempt_uninstall(void) {
    for (int s = 1; s < NSIG; s++)
        if (g_installed[s]) {
            sigaction(s, &g_old[s], NULL);
            g_installed[s] = false;
        }
}

int ds_preempt_signals(int *out, int cap) {
    int n = 0;
    for (int s = 1; s < NSIG; s++)
        if (g_installed[s] && s != atomic_load(&g_relay_from)) {
            if (n < cap) out[n] = s;
            n++;
        }
    return n;
}

int ds_preempt_pending(void) { return atomic_load(&g_signal); }

void ds_preempt_get(ds_preempt_info *out) {
    memset(out, 0, sizeof *out);
    out->signo = atomic_load(&g_signal);
    out->count = atomic_load(&g_count);
    if (!out->signo) return;
    out->seconds_ago = (double)(now_ns() - atomic_load(&g_at_ns)) * 1e-9;
    out->during = atomic_load(&g_during);
    out->micro = atomic_load(&g_micro_at);
    out->gas = atomic_load(&g_gas_at);
}

int ds_preempt_wait(void) {
    if (!atomic_load(&g_sem_ready)) return 0;
    while (sem_wait(&g_sem) != 0 && errno == EINTR) {
    }
    return atomic_load(&g_signal);
}

void ds_preempt_reset(void) {
    atomic_store(&g_signal, 0);
    atomic_store(&g_count, 0);
}

void ds_preempt_note(int phase, int micro, int gas) {
    atomic_store(&g_micro, micro);
    atomic_store(&g_gas, gas);
    atomic_store(&g_phase, phase);
}

/* ------------------------------------------------------------- the join */

void ds_engine_note_join(char stage) {
    /* engine-run counts the ranks that started and that connected while it
     * waits (tools/engine_run.c); elsewhere the variable is unset. Nothing
     * here may fail a rank: a missing or full pipe is ignored. */
    const char *path = getenv("DS_LAUNCH_FIFO");
    if (!path || !*path) return;
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t w = write(fd, &stage, 1); /* one byte: atomic on a pipe */
    (void)w;
    close(fd);
}
