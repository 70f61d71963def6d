/* engine-run's watch of which local rank ended first (tools/common/rank_watch.h),
 * with this test as "mpirun": its children exec /bin/sleep with
 * OMPI_COMM_WORLD_RANK set, forked in rank order as Open MPI's are, and are
 * killed in the orders that confused the watch before:
 *   - both ranks found, rank 1 killed first: rank 1, with its wait status;
 *   - rank 0 killed and reaped before any scan found it, rank 1 found and
 *     killed after it (ci79's failure: the watch named rank 1): rank 0;
 *   - rank 0 killed before a scan read its rank, left a zombie: rank 0,
 *     with its status;
 *   - rank 0 seen before its exec, named once it execs, then killed: rank 0;
 *   - two ranks below the one found ended unseen: no rank named rather than
 *     a wrong one;
 *   - rank 0 ends while rank 1 was never forked (a rank that fails before
 *     the others start): rank 0. */
#include <stdbool.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/test_util.h"
#include "tools/common/rank_watch.h"

/* Fork a rank: it waits for a byte on *gate (when gate is not NULL: a child
 * seen before its exec), then execs sleep with its rank in the environment. */
static pid_t fork_rank(int rank, int *gate) {
    int p[2] = {-1, -1};
    if (gate && pipe(p) != 0) TEST_DIE("pipe");
    pid_t pid = fork();
    if (pid < 0) TEST_DIE("fork");
    if (pid == 0) {
        if (gate) {
            char c;
            close(p[1]);
            if (read(p[0], &c, 1) != 1) _exit(3);
        }
        char env[64];
        snprintf(env, sizeof env, "OMPI_COMM_WORLD_RANK=%d", rank);
        char *argv[] = {"sleep", "30", NULL}, *envp[] = {env, NULL};
        execve("/bin/sleep", argv, envp);
        _exit(4);
    }
    if (gate) {
        close(p[0]);
        *gate = p[1];
    }
    return pid;
}

/* Until pid runs sleep (its exec is done), at most 5 s. */
static void wait_exec(pid_t pid) {
    char path[64], exe[256];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    for (int k = 0; k < 5000; k++) {
        ssize_t n = readlink(path, exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = '\0';
            if (strstr(exe, "sleep")) return;
        }
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    TEST_DIE("a rank did not exec sleep within 5 s");
}

/* SIGKILL pid and wait until it has ended; reap it (as mpirun does) or
 * leave it a zombie. */
static void kill_rank(pid_t pid, int reap) {
    kill(pid, SIGKILL);
    siginfo_t si;
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | (reap ? 0 : WNOWAIT)) != 0) TEST_DIE("waitid");
}

/* A scan and a check, as engine-run's loop does after each poll. */
static void look(er_ranks *w) {
    er_ranks_scan(w);
    er_ranks_check(w);
}

static void reap_all(void) {
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {}
}

/* A rank running sleep (forked, its exec done). */
static pid_t running_rank(int rank) {
    pid_t pid = fork_rank(rank, NULL);
    wait_exec(pid);
    return pid;
}

/* pid killed (left a zombie until reap_all, as mpirun would reap it), then
 * a look. */
static void kill_look(er_ranks *w, pid_t pid) {
    kill_rank(pid, 0);
    look(w);
}

/* The first rank's status the watch read: killed by SIGKILL. */
static void check_sigkill(const er_ranks *w) {
    int st = er_ranks_first_status(w);
    CHECK(st > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %d", st);
}

static er_ranks *watch(int np) {
    er_ranks *w = er_ranks_create(getpid(), np);
    if (!w) TEST_DIE("er_ranks_create");
    return w;
}

/* The scenario's end: the rank named first is `want` (-1: none). */
static void expect_first(er_ranks *w, int want, const char *scenario) {
    CHECK(er_ranks_first_gone(w) == want, "%s: rank %d named first, want %d", scenario,
          er_ranks_first_gone(w), want);
    er_ranks_destroy(w);
    reap_all();
}

static void both_found(void) {
    er_ranks *w = watch(2);
    pid_t r0 = running_rank(0), r1 = running_rank(1);
    CHECK(er_ranks_scan(w), "both ranks running, not both found");
    kill_look(w, r1);
    kill_look(w, r0);
    check_sigkill(w);
    expect_first(w, 1, "both found, rank 1 killed first");
}

/* Rank 0 killed before the watch looked, then rank 1 found and killed:
 * reaped (as mpirun does at once: the watch never sees it) or left a zombie
 * (seen, but its environment is gone), rank 0 ended first. */
static void killed_unseen(int reap) {
    er_ranks *w = watch(2);
    kill_rank(running_rank(0), reap);
    pid_t r1 = running_rank(1);
    look(w);
    kill_look(w, r1); /* as mpirun stops the rest */
    if (reap) /* nobody can read its status any more */
        CHECK_EQ_I(er_ranks_first_status(w), -1);
    else
        check_sigkill(w);
    expect_first(w, 0, reap ? "rank 0 reaped unseen" : "rank 0 a zombie, unnamed");
}

static void named_after_exec(void) {
    er_ranks *w = watch(2);
    int gate;
    pid_t r0 = fork_rank(0, &gate), r1 = running_rank(1);
    CHECK(!er_ranks_scan(w), "rank 0 found before its exec");
    struct pollfd p[4];
    CHECK_EQ_I(er_ranks_fds(w, p, 4), 2); /* rank 1 and the unnamed child */
    if (write(gate, "x", 1) != 1) TEST_DIE("write");
    close(gate);
    wait_exec(r0);
    /* /proc/PID/exe names sleep a moment before the new environment is in
     * place (the kernel sets exe in begin_new_exec, the environment's
     * bounds after it, loading the binary): engine-run looks again every
     * 10 ms until every rank is found, so does this, for at most 1 s */
    bool found = false;
    for (int k = 0; k < 100 && !(found = er_ranks_scan(w)); k++)
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    CHECK(found, "rank 0 not found within 1 s of its exec");
    kill_look(w, r0);
    kill_look(w, r1);
    expect_first(w, 0, "rank 0 named after its exec");
}

static void two_unseen(void) {
    er_ranks *w = watch(3);
    for (int r = 0; r < 2; r++) kill_rank(running_rank(r), 1);
    pid_t r2 = running_rank(2);
    look(w);
    kill_look(w, r2);
    expect_first(w, -1, "ranks 0 and 1 reaped unseen");
}

static void first_before_others(void) {
    er_ranks *w = watch(2);
    pid_t r0 = running_rank(0);
    look(w);
    kill_look(w, r0);
    expect_first(w, 0, "rank 0 ended, rank 1 never started");
}

int main(void) {
    both_found();
    killed_unseen(1);
    killed_unseen(0);
    named_after_exec();
    two_unseen();
    first_before_others();
    return test_finish("test_rank_watch");
}
