/* Which local rank of an mpirun job ended first (see rank_watch.h). */
#include "tools/common/rank_watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One process: a rank, or a child of mpirun whose rank is not known yet. */
typedef struct watched {
    pid_t pid; /* 0: none */
    int fd;    /* its pidfd, -1 none (then /proc is looked at) */
    bool gone;
} watched;

/* What ended first: a rank (>= 0), or one of these. */
enum { FIRST_NONE = -1, /* nothing yet */
       FIRST_UNNAMED = -2, /* a child of mpirun whose rank was never read */
       FIRST_UNKNOWN = -3 /* more than one rank may have, unseen */ };

struct er_ranks {
    pid_t launcher;
    int np, found, first;
    watched *rank; /* [np], by rank */
    /* Children of mpirun whose environment did not name a rank yet: not
     * exec'd yet, or killed before a scan read it (a zombie has no
     * environment, and mpirun soon reaps it). Every child of mpirun is a
     * rank here (no hostfile). */
    watched *unnamed; /* [np] */
    int n_unnamed;
    int first_status; /* the first one's wait status, -1 not known (reaped at once) */
};

er_ranks *er_ranks_create(pid_t launcher, int np) {
    if (np < 1 || np > ER_WATCH_MAX) return NULL;
    er_ranks *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->rank = calloc((size_t)np, sizeof *w->rank);
    w->unnamed = calloc((size_t)np, sizeof *w->unnamed);
    if (!w->rank || !w->unnamed) {
        er_ranks_destroy(w);
        return NULL;
    }
    w->launcher = launcher;
    w->np = np;
    w->first = FIRST_NONE;
    w->first_status = -1;
    return w;
}

void er_ranks_destroy(er_ranks *w) {
    if (!w) return;
    for (int r = 0; w->rank && r < w->np; r++)
        if (w->rank[r].pid && w->rank[r].fd >= 0) close(w->rank[r].fd);
    for (int k = 0; k < w->n_unnamed; k++)
        if (w->unnamed[k].fd >= 0) close(w->unnamed[k].fd);
    free(w->rank);
    free(w->unnamed);
    free(w);
}

/* OMPI_COMM_WORLD_RANK of process pid, or -1 (not a rank, or not exec'd yet). */
static int rank_of(pid_t pid) {
    char path[64], buf[65536];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    static const char key[] = "OMPI_COMM_WORLD_RANK=";
    for (ssize_t k = 0; k < n; k += (ssize_t)strlen(buf + k) + 1)
        if (!strncmp(buf + k, key, sizeof key - 1)) return atoi(buf + k + sizeof key - 1);
    return -1;
}

/* A child of mpirun seen by a scan: named when its environment says its
 * rank, else watched unnamed until it does (its pidfd opened at first sight,
 * so its end is seen even when no scan ever reads its rank). */
static void add(er_ranks *w, pid_t pid) {
    for (int r = 0; r < w->np; r++)
        if (w->rank[r].pid == pid) return;
    int u = 0;
    while (u < w->n_unnamed && w->unnamed[u].pid != pid) u++;
    if (u < w->n_unnamed && w->unnamed[u].gone) return;
    int r = rank_of(pid);
    if (r >= 0 && r < w->np && !w->rank[r].pid) {
        if (u < w->n_unnamed) { /* named at last: its pidfd moves with it */
            w->rank[r] = w->unnamed[u];
            w->unnamed[u] = w->unnamed[--w->n_unnamed];
        } else {
            w->rank[r] = (watched){.pid = pid, .fd = (int)syscall(SYS_pidfd_open, pid, 0)};
        }
        w->found++;
    } else if (u == w->n_unnamed && u < w->np) {
        w->unnamed[w->n_unnamed++] =
            (watched){.pid = pid, .fd = (int)syscall(SYS_pidfd_open, pid, 0)};
    }
}

/* mpirun forks its local ranks in rank order (Open MPI's odls walks its
 * local children by rank), so every rank below the highest one found has
 * been forked. When more of them are neither found nor running as unnamed
 * children than there are such children, one has ended before this scan,
 * unseen: before the rank found alive above it, so before anything this
 * watch saw end. Which one is known when a single rank is missing and no
 * unnamed child runs. Only until something is seen to end: a rank missing
 * later may have ended after it. */
static void ended_unseen(er_ranks *w) {
    if (w->first != FIRST_NONE) return;
    int hi = w->np - 1;
    while (hi >= 0 && !w->rank[hi].pid) hi--;
    int missing = 0, which = -1, running = 0;
    for (int r = 0; r < hi; r++)
        if (!w->rank[r].pid) {
            missing++;
            which = r;
        }
    for (int k = 0; k < w->n_unnamed; k++) running += !w->unnamed[k].gone;
    if (missing <= running) return;
    w->first = missing == 1 && running == 0 ? which : FIRST_UNKNOWN;
    w->first_status = -1;
}

bool er_ranks_scan(er_ranks *w) {
    if (!w || w->found == w->np) return true;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)w->launcher);
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *de;
    while ((de = readdir(d))) { /* every thread of mpirun may have forked ranks */
        if (de->d_name[0] == '.') continue;
        char cpath[400];
        snprintf(cpath, sizeof cpath, "%s/%.256s/children", path, de->d_name);
        FILE *f = fopen(cpath, "r");
        if (!f) continue;
        int pid;
        while (fscanf(f, "%d", &pid) == 1) add(w, pid);
        fclose(f);
    }
    closedir(d);
    ended_unseen(w);
    return w->found == w->np;
}

int er_ranks_fds(const er_ranks *w, struct pollfd *out, int cap) {
    int n = 0;
    for (int r = 0; w && r < w->np && n < cap; r++)
        if (w->rank[r].pid && w->rank[r].fd >= 0 && !w->rank[r].gone)
            out[n++] = (struct pollfd){.fd = w->rank[r].fd, .events = POLLIN};
    for (int k = 0; w && k < w->n_unnamed && n < cap; k++)
        if (w->unnamed[k].fd >= 0 && !w->unnamed[k].gone)
            out[n++] = (struct pollfd){.fd = w->unnamed[k].fd, .events = POLLIN};
    return n;
}

/* /proc/<pid>/stat: 'Z' and the wait status of a zombie (its 52nd field),
 * 'X' when it is gone, else its state; *status -1 when not known. */
static char proc_state(pid_t pid, int *status) {
    char path[64], stat[1024];
    *status = -1;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 'X';
    ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0) return 'X';
    stat[n] = '\0';
    const char *p = strrchr(stat, ')'); /* "pid (comm) S ...": comm may hold spaces */
    if (!p || p[1] != ' ') return 'X';
    char state = p[2];
    if (state != 'Z') return state;
    int field = 3; /* the state */
    for (p += 2; *p && field < 52; p++)
        if (*p == ' ') field++;
    if (field == 52) *status = atoi(p);
    return state;
}

/* Ended: its pidfd is readable, or (no pidfd) /proc has it no more or as a
 * zombie. *status: its wait status while mpirun has not reaped it. */
static bool ended(const watched *p, int *status) {
    *status = -1;
    if (p->fd >= 0) {
        struct pollfd q = {.fd = p->fd, .events = POLLIN};
        if (poll(&q, 1, 0) <= 0) return false;
        proc_state(p->pid, status);
        return true;
    }
    char state = proc_state(p->pid, status);
    return state == 'X' || state == 'Z';
}

/* p (rank r, or -1: unnamed) ended since the last check? The first one
 * noted is the first to end, to the resolution of the poll. */
static void note(er_ranks *w, watched *p, int r) {
    int status;
    if (!p->pid || p->gone || !ended(p, &status)) return;
    p->gone = true;
    if (w->first == FIRST_NONE) {
        w->first = r < 0 ? FIRST_UNNAMED : r;
        w->first_status = status;
    }
}

void er_ranks_check(er_ranks *w) {
    if (!w) return;
    /* Ranks in rank order, as before: several seen to end in one poll are
     * told apart no better (mpirun takes far longer than a poll to stop
     * the others). */
    for (int r = 0; r < w->np; r++) note(w, &w->rank[r], r);
    for (int k = 0; k < w->n_unnamed; k++) note(w, &w->unnamed[k], -1);
}

int er_ranks_first_gone(const er_ranks *w) {
    if (!w || w->first == FIRST_UNKNOWN) return -1;
    if (w->first != FIRST_UNNAMED) return w->first;
    /* The first to end was never named: it was the one rank never found,
     * if exactly one is and no other unnamed child ended. */
    int gone = 0;
    for (int k = 0; k < w->n_unnamed; k++) gone += w->unnamed[k].gone;
    if (gone != 1 || w->found != w->np - 1) return -1;
    for (int r = 0; r < w->np; r++)
        if (!w->rank[r].pid) return r;
    return -1;
}

int er_ranks_first_status(const er_ranks *w) { return w ? w->first_status : -1; }

void er_ranks_kill(const er_ranks *w, int sig) {
    for (int r = 0; w && r < w->np; r++)
        if (w->rank[r].pid && !w->rank[r].gone) kill(w->rank[r].pid, sig);
    for (int k = 0; w && k < w->n_unnamed; k++)
        if (!w->unnamed[k].gone) kill(w->unnamed[k].pid, sig);
}
