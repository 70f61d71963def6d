/* NVMe swap folders: start-up checks, the rank's own folder with its owner
 * lock, the swap files, and the removal of a crashed run's leftovers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, fallocate */
#endif
#include "offload/nvme_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/io/fault.h"

#define PREFIX "zero_engine_swap."

/* snprintf that cuts long paths short in a message instead of failing the
 * build's -Wformat-truncation (the paths come from the user). */
static void textf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void textf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

int64_t ds_nvme_free_bytes(const char *path) {
    struct statvfs v;
    if (statvfs(path, &v) != 0) return -1;
    return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

/* "needs N bytes (X GiB) on rank R, F bytes free": F from `path`, or from
 * the nearest folder above it that exists when it does not. */
static void need_text(const char *path, int rank, uint64_t need, char *buf, size_t cap) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    int64_t fr = -1;
    for (int up = 0; up < 64; up++) {
        fr = ds_nvme_free_bytes(p);
        if (fr >= 0 || !strcmp(p, "/") || !strcmp(p, ".")) break;
        char *d = dirname(p); /* may return a pointer into p or a static string */
        memmove(p, d, strlen(d) + 1);
    }
    if (fr >= 0)
        textf(buf, cap, "needs %llu bytes (%.2f GiB) on rank %d, %lld bytes (%.2f GiB) free%s%s",
                 (unsigned long long)need, (double)need / 1073741824.0, rank, (long long)fr,
                 (double)fr / 1073741824.0, strcmp(p, path) ? " on " : "",
                 strcmp(p, path) ? p : "");
    else
        textf(buf, cap, "needs %llu bytes (%.2f GiB) on rank %d", (unsigned long long)need,
                     (double)need / 1073741824.0, rank);
}

/* ---------------------------------------------------------- leftovers -- */

static char g_host[256];

static const char *host_name(void) {
    if (!g_host[0]) {
        if (gethostname(g_host, sizeof g_host - 1) != 0) snprintf(g_host, sizeof g_host, "host");
        for (char *c = g_host; *c; c++) /* keep the folder name one path component */
            if (*c == '/') *c = '_';
    }
    return g_host;
}

/* "zero_engine_swap.HOST.PID.rRANK.XXXXXX" -> HOST (the host may hold
 * dots, so it is read from the right) and PID. */
static bool parse_name(const char *name, char *host, size_t cap, long *pid) {
    if (strncmp(name, PREFIX, strlen(PREFIX)) != 0) return false;
    const char *s = name + strlen(PREFIX);
    const char *dots[3] = {NULL, NULL, NULL}; /* the last three dots */
    for (const char *c = s; *c; c++)
        if (*c == '.') {
            dots[0] = dots[1];
            dots[1] = dots[2];
            dots[2] = c;
        }
    if (!dots[0] || dots[0] == s) return false;
    size_t hl = (size_t)(dots[0] - s);
    if (hl >= cap) return false;
    memcpy(host, s, hl);
    host[hl] = '\0';
    char *end;
    *pid = strtol(dots[0] + 1, &end, 10);
    return end == dots[1] && *pid > 0;
}

/* Remove a folder's files and the folder; returns the bytes freed. */
static uint64_t remove_tree(const char *dir) {
    uint64_t bytes = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[PATH_MAX + 256];
            if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
            struct stat st;
            if (stat(p, &st) == 0) bytes += (uint64_t)st.st_blocks * 512u;
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
    return bytes;
}

/* Whether the folder belongs to a process that is gone. */
static bool is_stale(const char *dir, long pid) {
    char owner[PATH_MAX + 16];
    textf(owner, sizeof owner, "%s/owner", dir);
    int fd = open(owner, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        /* The live owner holds LOCK_EX for as long as it uses the folder. */
        bool free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0;
        close(fd);
        return free_lock;
    }
    /* No owner file: made but not yet locked (its process is alive), or its
     * process died in between. */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* A folder being removed is first renamed to CLAIM.PID.NAME: rename is
 * atomic, so of two start-ups scanning at once exactly one removes it, and
 * the claim of a remover that died itself is found by its PID. */
#define CLAIM ".zero_engine_removing."

int ds_nvme_clean_stale(const char *nvme_path) {
    DIR *d = opendir(nvme_path);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[PATH_MAX + 256], claim[PATH_MAX + 320];
        if (!strncmp(e->d_name, CLAIM, strlen(CLAIM))) { /* a remover that died midway */
            long pid = strtol(e->d_name + strlen(CLAIM), NULL, 10);
            if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH &&
                snprintf(p, sizeof p, "%s/%s", nvme_path, e->d_name) < (int)sizeof p)
                remove_tree(p);
            continue;
        }
        char host[256];
        long pid;
        if (!parse_name(e->d_name, host, sizeof host, &pid)) continue;
        if (strcmp(host, host_name()) != 0) continue; /* another machine's, on a shared disk */
        if (snprintf(p, sizeof p, "%s/%s", nvme_path, e->d_name) >= (int)sizeof p) continue;
        if (!is_stale(p, pid)) continue;
        if (snprintf(claim, sizeof claim, "%s/" CLAIM "%ld.%s", nvme_path, (long)getpid(),
                     e->d_name) >= (int)sizeof claim ||
            rename(p, claim) != 0)
            continue; /* another start-up claimed it first */
        uint64_t bytes = remove_tree(claim);
        fprintf(stderr,
                "[zero-engine] nvme_path: removed %s (%llu bytes), swap files of a run (pid %ld) "
                "that ended without ds_finalize; they are never read as state\n",
                p, (unsigned long long)bytes, pid);
        removed++;
    }
    closedir(d);
    return removed;
}

/* ------------------------------------------------------ the rank's dir -- */

static ds_status path_checks(const char *what, const char *nvme_path, int rank, uint64_t need) {
    char nt[256];
    struct stat st;
    if (stat(nvme_path, &st) != 0) {
        int err = errno;
        need_text(nvme_path, rank, need, nt, sizeof nt);
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: %s (the swap %s)", what, nvme_path,
                      err == ENOENT ? "does not exist" : strerror(err), nt);
    }
    if (!S_ISDIR(st.st_mode)) {
        need_text(nvme_path, rank, need, nt, sizeof nt);
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: is not a directory (the swap %s)", what,
                      nvme_path, nt);
    }
    return DS_OK;
}

ds_status ds_nvme_dir_open(const char *what, const char *nvme_path, int rank, ds_nvme_dir *d) {
    memset(d, 0, sizeof *d);
    d->lock_fd = -1;
    d->rank = rank;
    DS_TRY(path_checks(what, nvme_path, rank, 0));
    snprintf(d->path, sizeof d->path, "%s/" PREFIX "%s.%ld.r%d.XXXXXX", nvme_path, host_name(),
             (long)getpid(), rank);
    if (!mkdtemp(d->path)) {
        int err = errno;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s", d->path);
        d->path[0] = '\0';
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: not writable (making %s: %s)", what,
                      nvme_path, p, strerror(err));
    }
    /* The lock is taken on a file under another name and then renamed into
     * place, so a scanning start-up never finds "owner" unlocked while we
     * live (a lock belongs to the open file, and rename keeps it). */
    char tmp[PATH_MAX + 16], owner[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s/owner.tmp", d->path);
    snprintf(owner, sizeof owner, "%s/owner", d->path);
    int fd = open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) err = errno;
    if (!err) {
        char line[320];
        int n = snprintf(line, sizeof line, "%s %ld %d\n", host_name(), (long)getpid(), rank);
        if (write(fd, line, (size_t)n) != n || rename(tmp, owner) != 0) err = errno ? errno : EIO;
    }
    if (err) {
        if (fd >= 0) close(fd);
        ds_nvme_dir_remove(d);
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: making the owner file %s: %s", what,
                      nvme_path, owner, strerror(err));
    }
    d->lock_fd = fd;
    return DS_OK;
}

ds_status ds_nvme_dir_file(const ds_nvme_dir *d, const char *name, uint64_t bytes, int *fd) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", d->path, name);
    *fd = open(p, O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
    if (*fd < 0)
        return DS_ERR(errno == EINVAL ? DS_ERR_UNSUPPORTED : DS_ERR_IO,
                      "NVMe swap: opening %s with O_DIRECT: %s", p, strerror(errno));
    if (bytes == 0) return DS_OK;
    int rc = fallocate(*fd, 0, 0, (off_t)bytes);
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
        rc = ftruncate(*fd, (off_t)bytes); /* sparse: the preflight's free-space check guards */
    if (rc == 0 && ds_fault_error("nvme:reserve", d->rank) != DS_OK) {
        ds_clear_error(); /* tests: a disk too full to make the file (again) */
        rc = -1;
        errno = ENOSPC;
    }
    if (rc != 0) {
        int err = errno;
        char nt[256];
        need_text(d->path, d->rank, bytes, nt, sizeof nt);
        close(*fd);
        *fd = -1;
        unlink(p);
        return DS_ERR(DS_ERR_IO, "NVMe swap: reserving %llu bytes for %s: %s (this file %s)",
                      (unsigned long long)bytes, p, strerror(err), nt);
    }
    return DS_OK;
}

void ds_nvme_dir_remove(ds_nvme_dir *d) {
    if (d->path[0]) remove_tree(d->path);
    d->path[0] = '\0';
    if (d->lock_fd >= 0) close(d->lock_fd); /* after the removal: nobody scans it meanwhile */
    d->lock_fd = -1;
}

/* ---------------------------------------------------------- preflight -- */

/* A 4096-byte block written and read back through O_DIRECT: some file
 * systems refuse the flag at open (EINVAL), others only at the first
 * transfer. Returns 0 or an errno. */
static int odirect_probe(const ds_nvme_dir *d, int rank, char *file, size_t cap) {
    snprintf(file, cap, "%s/probe.swp", d->path);
    if (ds_fault_error("nvme:odirect", rank) != DS_OK) {
        ds_clear_error(); /* the injected failure is EINVAL, reported below */
        return EINVAL;
    }
    int fd = open(file, O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    void *buf = NULL;
    int err = posix_memalign(&buf, DS_NVME_ALIGN, DS_NVME_ALIGN);
    if (!err) {
        memset(buf, 0x5a, DS_NVME_ALIGN);
        if (pwrite(fd, buf, DS_NVME_ALIGN, 0) != DS_NVME_ALIGN) err = errno ? errno : EIO;
        else if (pread(fd, buf, DS_NVME_ALIGN, 0) != DS_NVME_ALIGN) err = errno ? errno : EIO;
    }
    free(buf);
    close(fd);
    unlink(file);
    return err;
}

ds_status ds_nvme_preflight(const char *what, const char *nvme_path, int rank, uint64_t need,
                            uint64_t host_need) {
    DS_TRY(path_checks(what, nvme_path, rank, need));
    ds_nvme_clean_stale(nvme_path); /* their bytes count as free below */
    ds_nvme_dir d;
    ds_status st = ds_nvme_dir_open(what, nvme_path, rank, &d);
    if (st != DS_OK) { /* not writable: add the bytes to the message */
        char nt[256];
        need_text(nvme_path, rank, need, nt, sizeof nt);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s (the swap %s)", ds_last_error(), nt);
        return DS_ERR(st, "%s", msg);
    }
    char file[PATH_MAX + 16];
    int err = odirect_probe(&d, rank, file, sizeof file);
    ds_nvme_dir_remove(&d);
    char nt[256];
    need_text(nvme_path, rank, need, nt, sizeof nt);
    if (err == EINVAL)
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "%s.nvme_path %s: the file system does not support direct I/O (O_DIRECT: "
                      "%s), which the swap needs; point nvme_path at a local disk (the swap %s)",
                      what, nvme_path, strerror(err), nt);
    if (err)
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: a test block through %s failed: %s (the swap "
                      "%s)", what, nvme_path, file, strerror(err), nt);
    int64_t fr = ds_nvme_free_bytes(nvme_path);
    if (fr >= 0 && (uint64_t)fr < need)
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: too small: the swap %s", what, nvme_path, nt);
    /* each rank's swap alone fits; this host's together may not, and a file
     * system that cannot reserve them up front (no fallocate) would fill in
     * the middle of the run */
    if (fr >= 0 && (uint64_t)fr < host_need)
        return DS_ERR(DS_ERR_IO, "%s.nvme_path %s: too small for this host's swaps together: "
                      "they need %llu bytes (%.2f GiB), %lld bytes (%.2f GiB) free (each rank's "
                      "swap %s)", what, nvme_path, (unsigned long long)host_need,
                      (double)host_need / 1073741824.0, (long long)fr, (double)fr / 1073741824.0,
                      nt);
    return DS_OK;
}
