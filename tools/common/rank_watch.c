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

struct er_ranks {
    pid_t launcher;
    int np, found, first_gone;
    pid_t *pid;  /* [np]: 0 not found yet */
    int *fd;     /* [np]: its pidfd, -1 none (then /proc is looked at) */
    bool *gone;  /* [np] */
    int first_status; /* the first one's wait status, -1 not known (reaped at once) */
};

er_ranks *er_ranks_create(pid_t launcher, int np) {
    if (np < 1 || np > ER_WATCH_MAX) return NULL;
    er_ranks *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->pid = calloc((size_t)np, sizeof *w->pid);
    w->fd = malloc((size_t)np * sizeof *w->fd);
    w->gone = calloc((size_t)np, sizeof *w->gone);
    if (!w->pid || !w->fd || !w->gone) {
        er_ranks_destroy(w);
        return NULL;
    }
    for (int r = 0; r < np; r++) w->fd[r] = -1;
    w->launcher = launcher;
    w->np = np;
    w->first_gone = -1;
    w->first_status = -1;
    return w;
}

void er_ranks_destroy(er_ranks *w) {
    if (!w) return;
    for (int r = 0; w->fd && r < w->np; r++)
        if (w->fd[r] >= 0) close(w->fd[r]);
    free(w->pid);
    free(w->fd);
    free(w->gone);
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

static void add(er_ranks *w, pid_t pid) {
    for (int r = 0; r < w->np; r++)
        if (w->pid[r] == pid) return;
    int r = rank_of(pid);
    if (r < 0 || r >= w->np || w->pid[r]) return;
    w->pid[r] = pid;
    w->fd[r] = (int)syscall(SYS_pidfd_open, pid, 0);
    w->found++;
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
    return w->found == w->np;
}

int er_ranks_fds(const er_ranks *w, struct pollfd *out, int cap) {
    int n = 0;
    for (int r = 0; w && r < w->np && n < cap; r++)
        if (w->fd[r] >= 0 && !w->gone[r]) out[n++] = (struct pollfd){.fd = w->fd[r], .events = POLLIN};
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
static bool ended(const er_ranks *w, int r, int *status) {
    *status = -1;
    if (w->fd[r] >= 0) {
        struct pollfd p = {.fd = w->fd[r], .events = POLLIN};
        if (poll(&p, 1, 0) <= 0) return false;
        proc_state(w->pid[r], status);
        return true;
    }
    char state = proc_state(w->pid[r], status);
    return state == 'X' || state == 'Z';
}

void er_ranks_check(er_ranks *w) {
    if (!w) return;
    for (int r = 0; r < w->np; r++) {
        int status;
        if (!w->pid[r] || w->gone[r] || !ended(w, r, &status)) continue;
        w->gone[r] = true;
        if (w->first_gone < 0) {
            w->first_gone = r;
            w->first_status = status;
        }
    }
}

int er_ranks_first_gone(const er_ranks *w) { return w ? w->first_gone : -1; }
int er_ranks_first_status(const er_ranks *w) { return w ? w->first_status : -1; }

void er_ranks_kill(const er_ranks *w, int sig) {
    for (int r = 0; w && r < w->np; r++)
        if (w->pid[r] && !w->gone[r]) kill(w->pid[r], sig);
}
