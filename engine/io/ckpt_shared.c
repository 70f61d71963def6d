/* The shared-folder marker (engine/io/ckpt_shared.h). */
#include "engine/io/ckpt_shared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/io/ckpt_file.h"

#define MARKER_PATH_CAP 4200

static ds_status marker_path(const char *dir, char *path) {
    if (snprintf(path, MARKER_PATH_CAP, "%s/%s", dir, DS_CKPT_MARKER_FILE) >= MARKER_PATH_CAP)
        return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint folder path too long: %s", dir);
    return DS_OK;
}

static void host_name(char *buf, size_t cap) {
    if (gethostname(buf, cap) != 0) snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

/* 64 random bits: a marker another job (or an earlier save) left in a
 * folder of the same name must not match by chance. getrandom does not
 * fail for 8 bytes once the pool is up; the clock and pid stand in if it
 * does (still unique among the folders this could be confused with). */
static uint64_t nonce(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x) return x;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return ((uint64_t)t.tv_sec << 32) ^ (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 20);
}

ds_status ds_ckpt_marker_write(const char *dir, ds_ckpt_marker *m) {
    char path[MARKER_PATH_CAP], host[64];
    DS_TRY(marker_path(dir, path));
    host_name(host, sizeof host);
    memset(m, 0, sizeof *m);
    int len = snprintf(m->text, sizeof m->text, "host %s pid %ld nonce %016llx\n", host,
                       (long)getpid(), (unsigned long long)nonce());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return DS_ERR(DS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    ds_status st = ds_ckpt_write_all(fd, m->text, (size_t)len, path);
    if (close(fd) != 0 && st == DS_OK)
        st = DS_ERR(DS_ERR_IO, "%s: close: %s", path, strerror(errno));
    if (st != DS_OK) {
        unlink(path); /* a part of the text would fail every check */
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    return DS_OK;
}

/* Rank 0's host, from the text it sent: "host H pid ...". */
static void writer_host(const ds_ckpt_marker *m, char *buf, size_t cap) {
    char h[64] = "?";
    if (sscanf(m->text, "host %63s", h) != 1) snprintf(h, sizeof h, "?");
    snprintf(buf, cap, "%s", h);
}

ds_status ds_ckpt_marker_check(const char *dir, const ds_ckpt_marker *m, int rank) {
    char path[MARKER_PATH_CAP], why[MARKER_PATH_CAP + 160];
    DS_TRY(marker_path(dir, path));
    size_t want = strnlen(m->text, sizeof m->text);
    char got[sizeof m->text + 1];
    ssize_t n = -1;
    int err = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        /* one byte more than the text: a longer file does not match */
        n = read(fd, got, sizeof got);
        if (n < 0) err = errno;
        close(fd);
    } else {
        err = errno;
    }
    if (n == (ssize_t)want && memcmp(got, m->text, want) == 0) return DS_OK;

    char here[64], there[64];
    host_name(here, sizeof here);
    writer_host(m, there, sizeof there);
    struct stat s;
    if (err == ENOENT && stat(dir, &s) != 0)
        snprintf(why, sizeof why, "there is no %s on %s", dir, here);
    else if (err == ENOENT)
        snprintf(why, sizeof why, "%s, which rank 0 has just written, is not there", path);
    else if (err != 0)
        snprintf(why, sizeof why, "cannot read %s: %s", path, strerror(err));
    else
        snprintf(why, sizeof why, "%s holds other bytes than rank 0 has just written there",
                 path);
    return DS_ERR(DS_ERR_IO, "checkpoint folder %s: rank %d (host %s) does not see the folder "
                  "rank 0 (host %s) writes (%s); every rank must see the same checkpoint "
                  "folder: a shared file system mounted at the same path on every host", dir,
                  rank, here, there, why);
}

ds_status ds_ckpt_marker_remove(const char *dir) {
    char path[MARKER_PATH_CAP];
    DS_TRY(marker_path(dir, path));
    if (unlink(path) != 0 && errno != ENOENT)
        return DS_ERR(DS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return DS_OK;
}
