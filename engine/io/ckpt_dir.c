/* Checkpoint folders: names, atomic commit, `latest`, completeness check. */
#include "engine/io/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/io/ckpt_file.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/ckpt_seal.h"
#include "engine/io/fault.h"

static void append_note(const char *note);
static void note_other_tags(const char *dir);

void ds_ckpt_shard_name(int rank, int world, char *buf, size_t cap) {
    snprintf(buf, cap, "shard-%05d-of-%05d.dsck", rank, world);
}

ds_status ds_ckpt_check_tag(const char *tag) {
    if (!tag || !*tag) return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag is empty");
    size_t n = strlen(tag);
    if (n > DS_CKPT_TAG_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag of %zu characters (at most %d)", n,
                      DS_CKPT_TAG_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = tag[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag \"%s\": character '%c' (allowed: "
                          "letters, digits, '.', '_', '-')", tag, c);
    }
    if (tag[0] == '.')
        return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag \"%s\" starts with '.'", tag);
    if (n >= 4 && !strcmp(tag + n - 4, ".tmp"))
        return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag \"%s\" ends in .tmp (reserved for "
                      "checkpoints being written)", tag);
    if (n >= 4 && !strcmp(tag + n - 4, ".old"))
        return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag \"%s\" ends in .old (reserved for "
                      "a checkpoint being replaced)", tag);
    if (!strcmp(tag, DS_CKPT_LATEST_FILE))
        return DS_ERR(DS_ERR_INVALID_ARG, "checkpoint tag \"latest\" is the name of the "
                      "pointer file");
    return DS_OK;
}

ds_status ds_ckpt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return DS_ERR(DS_ERR_IO, "%s: open folder for fsync: %s", dir, strerror(errno));
    int rc = fsync(fd), err = errno;
    close(fd);
    if (rc != 0) return DS_ERR(DS_ERR_IO, "%s: fsync folder: %s", dir, strerror(err));
    return DS_OK;
}

ds_status ds_ckpt_mkdirs_new(const char *dir, char *first_new, size_t cap) {
    if (first_new && cap) first_new[0] = '\0';
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return DS_ERR(DS_ERR_INVALID_ARG, "path too long: %s", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) == 0) {
                /* A new folder lives only in its parent's entries until the
                 * parent is synced: without this a crash can lose a whole
                 * checkpoint folder whose files were all synced. */
                DS_TRY(ds_ckpt_fsync_parent(p));
                if (first_new && cap && !first_new[0]) snprintf(first_new, cap, "%s", p);
            } else if (errno != EEXIST) {
                return DS_ERR(DS_ERR_IO, "%s: cannot create folder: %s", p, strerror(errno));
            }
            *s = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return DS_ERR(DS_ERR_IO, "%s: not a folder", dir);
    return DS_OK;
}

ds_status ds_ckpt_mkdirs(const char *dir) {
    DS_TRY(ds_ckpt_mkdirs_new(dir, NULL, 0));
    return DS_OK;
}

void ds_ckpt_rmdirs_upto(const char *dir, const char *top) {
    if (!top || !*top) return;
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return;
    size_t keep = strlen(top);
    /* dir, its parent, ... while still inside top (which is removed last) */
    while (strlen(p) >= keep && !strncmp(p, top, keep) && rmdir(p) == 0) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = '\0';
    }
}

ds_status ds_ckpt_remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return DS_OK;
        return DS_ERR(DS_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    }
    ds_status st = DS_OK;
    struct dirent *de;
    char path[4096];
    while (st == DS_OK && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat s;
        if (lstat(path, &s) == 0 && S_ISDIR(s.st_mode))
            st = DS_ERR(DS_ERR_IO, "%s: holds a folder %s; not removing it", dir, de->d_name);
        else if (unlink(path) != 0 && errno != ENOENT)
            st = DS_ERR(DS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    closedir(d);
    DS_TRY(st);
    if (rmdir(dir) != 0 && errno != ENOENT)
        return DS_ERR(DS_ERR_IO, "%s: cannot remove folder: %s", dir, strerror(errno));
    return DS_OK;
}

ds_status ds_ckpt_remove_stale(const char *dir, void (*report)(void *user, const char *path),
                               void *user) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return DS_OK; /* nothing saved there yet */
        return DS_ERR(DS_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    }
    ds_status st = DS_OK;
    struct dirent *de;
    char path[4096], tag[DS_CKPT_TAG_MAX + 8];
    while (st == DS_OK && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || n - 4 >= sizeof tag) continue;
        bool is_old = !strcmp(de->d_name + n - 4, ".old");
        if (!is_old && strcmp(de->d_name + n - 4, ".tmp") != 0) continue;
        memcpy(tag, de->d_name, n - 4);
        tag[n - 4] = '\0';
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat s;
        if (lstat(path, &s) != 0) continue;
        if (is_old) { /* replace_dir's TAG.old: removed beside TAG, else TAG again */
            if (!S_ISDIR(s.st_mode) || ds_ckpt_check_tag(tag) != DS_OK) continue;
            /* only a checkpoint of tag TAG set aside, not a user's tag "X.old"
             * saved before the name was reserved: its meta.json names TAG */
            char meta_path[4200];
            snprintf(meta_path, sizeof meta_path, "%s/meta.json", path);
            ds_ckpt_meta m;
            if (ds_ckpt_meta_read(meta_path, &m) != DS_OK) continue;
            bool aside = strcmp(m.tag, tag) == 0;
            ds_ckpt_meta_free(&m);
            if (!aside) continue;
            char fin[4096];
            snprintf(fin, sizeof fin, "%s/%s", dir, tag);
            struct stat f;
            if (lstat(fin, &f) == 0) {
                st = ds_ckpt_remove_flat_dir(path);
            } else if (rename(path, fin) == 0) {
                st = ds_ckpt_fsync_dir(dir);
                if (st == DS_OK && report) report(user, fin);
                continue;
            } else {
                st = DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", path, fin, strerror(errno));
            }
            if (st == DS_OK && report) report(user, path);
            continue;
        }
        /* only what a save writes: TAG.tmp folders and latest.tmp */
        if (S_ISDIR(s.st_mode) && ds_ckpt_check_tag(tag) == DS_OK)
            st = ds_ckpt_remove_flat_dir(path);
        else if (S_ISREG(s.st_mode) && !strcmp(tag, DS_CKPT_LATEST_FILE))
            st = unlink(path) == 0 ? DS_OK
                                   : DS_ERR(DS_ERR_IO, "%s: cannot remove: %s", path,
                                            strerror(errno));
        else
            continue;
        if (st == DS_OK && report) report(user, path);
    }
    closedir(d);
    DS_TRY(st);
    ds_clear_error(); /* ds_ckpt_check_tag's refusals of other names */
    return DS_OK;
}

ds_status ds_ckpt_fsync_parent(const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return DS_ERR(DS_ERR_INVALID_ARG, "path too long: %s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    DS_TRY(ds_ckpt_fsync_dir(dir));
    return DS_OK;
}

ds_status ds_ckpt_write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return DS_ERR(DS_ERR_INVALID_ARG, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return DS_ERR(DS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    ds_status st = ds_ckpt_write_all(fd, data, len, tmp);
    if (st == DS_OK && fsync(fd) != 0)
        st = DS_ERR(DS_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == DS_OK)
        st = DS_ERR(DS_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (st == DS_OK && rename(tmp, path) != 0)
        st = DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    if (st != DS_OK) {
        unlink(tmp);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    DS_TRY(ds_ckpt_fsync_parent(path));
    return DS_OK;
}

/* A file system without renameat2's exchange (NFS, Lustre): TAG aside as
 * TAG.old, TAG.tmp into its place, TAG.old removed, each step durable. A
 * crash between the renames leaves no TAG, and TAG.old complete:
 * ds_ckpt_remove_stale puts it back at the next start (and removes a TAG.old
 * beside a TAG). */
static ds_status replace_dir(const char *dir, const char *tmp, const char *fin) {
    char old[4200];
    snprintf(old, sizeof old, "%s.old", fin);
    struct stat s;
    if (lstat(old, &s) == 0) DS_TRY(ds_ckpt_remove_flat_dir(old)); /* an earlier crash's */
    if (rename(fin, old) != 0)
        return DS_ERR(DS_ERR_IO, "rename %s -> %s (replacing a tag where the file system has "
                      "no renameat2 exchange): %s", fin, old, strerror(errno));
    DS_TRY(ds_ckpt_fsync_dir(dir));
    if (rename(tmp, fin) != 0) {
        ds_status st = DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", tmp, fin, strerror(errno));
        if (rename(old, fin) == 0) ds_ckpt_fsync_dir(dir); /* the old one back */
        return st;
    }
    DS_TRY(ds_ckpt_fsync_dir(dir));
    DS_TRY(ds_ckpt_remove_flat_dir(old));
    return DS_OK;
}

ds_status ds_ckpt_commit_dir(const char *dir, const char *tag) {
    char tmp[4096], fin[4096], old[4200];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, tag);
    snprintf(fin, sizeof fin, "%s/%s", dir, tag);
    snprintf(old, sizeof old, "%s.old", fin);
    struct stat s;
    /* a replace_dir that a crash cut between its renames: TAG back first,
     * so that this commit replaces it as any other (a folder outside a
     * checkpoint folder, such as save_best's, has no start-up to do it) */
    if (lstat(old, &s) == 0 && stat(fin, &s) != 0 && rename(old, fin) == 0)
        DS_TRY(ds_ckpt_fsync_dir(dir));
    if (stat(fin, &s) != 0) {
        if (rename(tmp, fin) != 0)
            return DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", tmp, fin, strerror(errno));
        DS_TRY(ds_ckpt_fsync_dir(dir));
        return DS_OK;
    }
    /* Overwriting a tag: swap the two folders in one step, then drop the old
     * one (now named TAG.tmp). A crash in between leaves TAG complete. */
    int ex = ds_fault_error("ckpt:exchange", -1) != DS_OK ? -1 : 0; /* tests: NFS */
    if (ex == 0) ex = renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE);
    else errno = EINVAL;
    if (ex == 0) {
        DS_TRY(ds_ckpt_fsync_dir(dir));
        DS_TRY(ds_ckpt_remove_flat_dir(tmp));
        return DS_OK;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return DS_ERR(DS_ERR_IO, "exchanging %s and %s: %s", tmp, fin, strerror(errno));
    ds_clear_error();
    DS_TRY(replace_dir(dir, tmp, fin));
    return DS_OK;
}

ds_status ds_ckpt_write_latest(const char *dir, const char *tag) {
    char path[4096], text[DS_CKPT_TAG_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", dir, DS_CKPT_LATEST_FILE);
    int n = snprintf(text, sizeof text, "%s\n", tag);
    char *sealed;
    size_t len;
    DS_TRY(ds_ckpt_seal(DS_SEAL_LINE, text, (size_t)n, &sealed, &len));
    ds_status st = ds_ckpt_write_file_atomic(path, sealed, len);
    free(sealed);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_ckpt_read_latest(const char *dir, char *tag, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, DS_CKPT_LATEST_FILE);
    if (access(path, F_OK) != 0) {
        int err = errno;
        struct stat s;
        if (stat(dir, &s) != 0) return DS_ERR(DS_ERR_IO, "%s: %s", dir, strerror(errno));
        if (!S_ISDIR(s.st_mode)) return DS_ERR(DS_ERR_IO, "%s: not a folder", dir);
        char tags[512];
        if (ds_ckpt_describe_tags(dir, tags, sizeof tags, NULL, 0) == 0)
            return DS_ERR(DS_ERR_IO, "%s: %s (no complete checkpoint saved there)", path,
                          strerror(err));
        return DS_ERR(DS_ERR_IO, "%s: %s, though the folder holds %s: name one to read it "
                      "(zero_to_fp32 --tag, the trainers' --resume-from, ds_load_checkpoint's "
                      "tag)", path, strerror(err), tags);
    }
    char *text;
    size_t n, body;
    ds_status rs = ds_ckpt_read_sealed(path, DS_SEAL_LINE, &text, &n, &body);
    if (rs == DS_ERR_CORRUPT) note_other_tags(dir);
    DS_TRY(rs);
    /* the checksum matched, so this is the line a save wrote: one tag */
    text[body > 0 ? body - 1 : 0] = '\0';
    ds_status st = strchr(text, '\n') ? DS_ERR(DS_ERR_CORRUPT, "%s: more than one line before "
                                                "its checksum", path)
                                       : ds_ckpt_check_tag(text);
    if (st != DS_OK) {
        free(text);
        if (st == DS_ERR_CORRUPT) return st;
        return DS_ERR(DS_ERR_CORRUPT, "%s: does not hold a checkpoint tag (%s)", path,
                      ds_last_error());
    }
    size_t len = strlen(text);
    if (len + 1 > cap) st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tag longer than %zu", path, cap - 1);
    else memcpy(tag, text, len + 1);
    free(text);
    DS_TRY(st);
    return DS_OK;
}

/* Every entry of tag_dir is meta.json or a shard file meta names. */
static ds_status no_extra_files(const char *tag_dir, const ds_ckpt_meta *m) {
    DIR *d = opendir(tag_dir);
    if (!d) return DS_ERR(DS_ERR_IO, "%s: cannot open folder: %s", tag_dir, strerror(errno));
    ds_status st = DS_OK;
    struct dirent *de;
    while (st == DS_OK && (de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, DS_CKPT_META_FILE)) continue;
        bool known = false;
        for (int r = 0; r < m->world && !known; r++) known = !strcmp(n, m->shards[r].file);
        if (!known)
            st = DS_ERR(DS_ERR_CORRUPT, "%s/%s: extra file in the checkpoint (meta.json names %d "
                        "shard files of a %d-rank world; a file from another checkpoint or "
                        "world size?)", tag_dir, n, m->world, m->world);
    }
    closedir(d);
    return st;
}

/* open: read header, trailer and index (else only the size is checked);
 * frames: also every frame's checksum. */
static ds_status check_shard(const char *tag_dir, const ds_ckpt_meta *m, int r, bool open,
                             bool frames) {
    const ds_ckpt_shard_entry *e = &m->shards[r];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tag_dir, e->file);
    struct stat s;
    if (stat(path, &s) != 0) {
        int err = errno;
        return DS_ERR(DS_ERR_IO, "%s: %s (meta.json names %d shard files)", path,
                      err == ENOENT ? "missing" : strerror(err), m->world);
    }
    ds_ckpt_header hh;
    if ((uint64_t)s.st_size != e->bytes) {
        /* A header saying which world wrote it explains more than a size. */
        if ((uint64_t)s.st_size >= DS_CKPT_HEADER_BYTES &&
            ds_ckpt_read_header(path, &hh) == DS_OK &&
            (int)hh.world != m->world)
            return DS_ERR(DS_ERR_CORRUPT, "%s: written by a world of %u ranks, meta.json says %d",
                          path, hh.world, m->world);
        ds_clear_error();
        return DS_ERR(DS_ERR_CORRUPT, "%s: %lld bytes, meta.json records %llu (%s)", path,
                      (long long)s.st_size, (unsigned long long)e->bytes,
                      (uint64_t)s.st_size < e->bytes ? "truncated" : "rewritten or appended to");
    }
    if (!open) return DS_OK;
    ds_ckpt_reader *rd;
    DS_TRY(ds_ckpt_reader_open(path, &rd));
    const ds_ckpt_header *h = ds_ckpt_reader_header(rd);
    ds_ckpt_file_info info;
    ds_ckpt_reader_info(rd, &info);
    ds_status st = DS_OK;
    if ((int)h->world != m->world)
        st = DS_ERR(DS_ERR_CORRUPT, "%s: written by a world of %u ranks, meta.json says %d", path,
                    h->world, m->world);
    else if ((int)h->rank != r || h->lo != e->lo || h->hi != e->hi)
        st = DS_ERR(DS_ERR_CORRUPT, "%s: holds rank %u's range [%lld, %lld), meta.json expects "
                    "rank %d's [%lld, %lld)", path, h->rank, (long long)h->lo, (long long)h->hi, r,
                    (long long)e->lo, (long long)e->hi);
    else if (info.index_hash != e->index_hash)
        st = DS_ERR(DS_ERR_CORRUPT, "%s: index checksum %016llx, meta.json records %016llx (a "
                    "file from another save)", path, (unsigned long long)info.index_hash,
                    (unsigned long long)e->index_hash);
    for (int k = 0; st == DS_OK && k <= m->moments; k++) {
        int64_t lo, hi;
        if (!ds_ckpt_reader_section(rd, (uint32_t)k, &lo, &hi) || lo != e->lo || hi != e->hi)
            st = DS_ERR(DS_ERR_CORRUPT, "%s: section %s missing or not covering [%lld, %lld)",
                        path, ds_ckpt_section_name((uint32_t)k), (long long)e->lo,
                        (long long)e->hi);
    }
    if (st == DS_OK && frames) st = ds_ckpt_verify_all(rd);
    ds_ckpt_reader_close(rd);
    DS_TRY(st);
    return DS_OK;
}

static ds_status check_dir(const char *tag_dir, bool frames, int64_t lo, int64_t hi,
                           ds_ckpt_meta *meta) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tag_dir, DS_CKPT_META_FILE);
    struct stat s;
    if (stat(tag_dir, &s) != 0 || !S_ISDIR(s.st_mode)) {
        memset(meta, 0, sizeof *meta);
        return DS_ERR(DS_ERR_IO, "%s: no such checkpoint folder", tag_dir);
    }
    DS_TRY(ds_ckpt_meta_read(path, meta));
    for (int r = 0; r < meta->world; r++) {
        char want[64];
        ds_ckpt_shard_name(r, meta->world, want, sizeof want);
        if (strcmp(meta->shards[r].file, want) != 0 || meta->shards[r].rank != r)
            return DS_ERR(DS_ERR_CORRUPT, "%s: shard %d is recorded as %s (rank %d), expected %s",
                          path, r, meta->shards[r].file, meta->shards[r].rank, want);
        if (meta->shards[r].lo != (int64_t)r * meta->part ||
            meta->shards[r].hi != (int64_t)(r + 1) * meta->part)
            return DS_ERR(DS_ERR_CORRUPT, "%s: shard %d range [%lld, %lld) is not partition %d of "
                          "%lld elements", path, r, (long long)meta->shards[r].lo,
                          (long long)meta->shards[r].hi, r, (long long)meta->part);
    }
    for (int r = 0; r < meta->world; r++) {
        bool overlaps = meta->shards[r].lo < hi && meta->shards[r].hi > lo;
        DS_TRY(check_shard(tag_dir, meta, r, overlaps, frames));
    }
    DS_TRY(no_extra_files(tag_dir, meta));
    return DS_OK;
}

ds_status ds_ckpt_check_dir(const char *tag_dir, bool frames, ds_ckpt_meta *meta) {
    DS_TRY(check_dir(tag_dir, frames, 0, INT64_MAX, meta));
    return DS_OK;
}

ds_status ds_ckpt_check_dir_range(const char *tag_dir, int64_t lo, int64_t hi,
                                  ds_ckpt_meta *meta) {
    DS_TRY(check_dir(tag_dir, false, lo, hi, meta));
    return DS_OK;
}

/* ---- one writer per folder ---------------------------------------------- */

/* The folders whose lock this process holds: the descriptor stays open (the
 * lock with it) until the process ends. A process saves into few folders. */
#define MAX_HELD_LOCKS 16
static struct held_lock {
    dev_t dev;
    ino_t ino;
    int fd;
} g_locks[MAX_HELD_LOCKS];
static int g_n_locks;
static pthread_mutex_t g_locks_mu = PTHREAD_MUTEX_INITIALIZER;

static ds_status lock_dir(const char *dir) {
    struct stat ds;
    if (stat(dir, &ds) != 0)
        return DS_ERR(DS_ERR_IO, "%s: cannot lock the checkpoint folder: %s", dir, strerror(errno));
    for (int k = 0; k < g_n_locks; k++)
        if (g_locks[k].dev == ds.st_dev && g_locks[k].ino == ds.st_ino) return DS_OK;
    if (g_n_locks == MAX_HELD_LOCKS)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: this process already locks %d checkpoint folders, "
                      "the most it may", dir, MAX_HELD_LOCKS);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, DS_CKPT_LOCK_FILE) >= (int)sizeof path)
        return DS_ERR(DS_ERR_INVALID_ARG, "path too long: %s", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return DS_ERR(DS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char who[256] = "";
        ssize_t n = err == EWOULDBLOCK ? pread(fd, who, sizeof who - 1, 0) : -1;
        close(fd);
        if (err != EWOULDBLOCK)
            return DS_ERR(DS_ERR_IO, "%s: cannot lock: %s", path, strerror(err));
        who[n > 0 ? n : 0] = '\0';
        who[strcspn(who, "\n")] = '\0';
        return DS_ERR(DS_ERR_IO, "%s is being written by another job (%s held by %s): two jobs "
                      "saving checkpoints into one folder would interleave their tags and remove "
                      "each other's unfinished saves; wait for that job to end, or save into "
                      "another folder", dir, path, who[0] ? who : "another process");
    }
    /* who holds it, for the refusal a second job prints */
    char host[128] = "?", when[64] = "?", text[320];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int len = snprintf(text, sizeof text, "pid %ld on %s since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        /* the lock holds without its note; a refusal then says less */
    }
    g_locks[g_n_locks++] = (struct held_lock){.dev = ds.st_dev, .ino = ds.st_ino, .fd = fd};
    return DS_OK;
}

ds_status ds_ckpt_lock_dir(const char *dir) {
    DS_TRY(ds_ckpt_mkdirs(dir));
    pthread_mutex_lock(&g_locks_mu);
    ds_status st = lock_dir(dir);
    pthread_mutex_unlock(&g_locks_mu);
    DS_TRY(st);
    return DS_OK;
}

/* ---- bounded disk use ------------------------------------------------------ */

typedef struct ckpt_entry {
    char tag[DS_CKPT_TAG_MAX + 1];
    int64_t step;
    struct timespec mtime;
} ckpt_entry;

/* newest first: the higher step, then the later folder */
static int newer_first(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step > y->step ? -1 : 1;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec > y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->tag, y->tag);
}

/* The complete checkpoints in dir: folders with a valid tag whose meta.json
 * reads and verifies. *out is malloc'ed (free it). */
static ds_status list_checkpoints(const char *dir, ckpt_entry **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return DS_ERR(DS_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    ckpt_entry *v = NULL;
    int n = 0, cap = 0;
    ds_status st = DS_OK;
    struct dirent *de;
    while (st == DS_OK && (de = readdir(d))) {
        char path[4096];
        struct stat s;
        if (strlen(de->d_name) > DS_CKPT_TAG_MAX || ds_ckpt_check_tag(de->d_name) != DS_OK)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (lstat(path, &s) != 0 || !S_ISDIR(s.st_mode)) continue;
        snprintf(path, sizeof path, "%s/%s/%s", dir, de->d_name, DS_CKPT_META_FILE);
        ds_ckpt_meta m;
        ds_status ok = ds_ckpt_meta_read(path, &m);
        int64_t step = m.global_step;
        ds_ckpt_meta_free(&m);
        if (ok != DS_OK) continue; /* not a checkpoint this version can read: not ours to remove */
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            ckpt_entry *w = realloc(v, (size_t)cap * sizeof *v);
            if (!w) {
                st = DS_ERR_OOM; /* the message after the loop, which clears errors */
                break;
            }
            v = w;
        }
        snprintf(v[n].tag, sizeof v[n].tag, "%s", de->d_name);
        v[n].step = step;
        v[n].mtime = s.st_mtim;
        n++;
    }
    closedir(d);
    ds_clear_error(); /* the names and folders skipped above */
    if (st != DS_OK) {
        free(v);
        return DS_ERR(st, "%s: listing the checkpoints: out of host memory", dir);
    }
    *out = v;
    *n_out = n;
    return DS_OK;
}

/* TAG -> TAG.tmp, DIR synced, then deleted: a crash leaves only a TAG.tmp,
 * which the next job's ds_ckpt_remove_stale clears. */
static ds_status remove_checkpoint(const char *dir, const char *tag) {
    char fin[4096], tmp[4096];
    snprintf(fin, sizeof fin, "%s/%s", dir, tag);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, tag);
    DS_TRY(ds_ckpt_remove_flat_dir(tmp)); /* debris of an earlier save of this tag */
    if (rename(fin, tmp) != 0)
        return DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", fin, tmp, strerror(errno));
    DS_TRY(ds_ckpt_fsync_dir(dir));
    DS_TRY(ds_ckpt_remove_flat_dir(tmp));
    return DS_OK;
}

int ds_ckpt_describe_tags(const char *dir, char *buf, size_t cap, char *newest,
                          size_t newest_cap) {
    buf[0] = '\0';
    if (newest && newest_cap) newest[0] = '\0';
    ds_error_saved keep;
    ds_error_save(&keep);
    ckpt_entry *v;
    int n;
    ds_status st = list_checkpoints(dir, &v, &n);
    ds_error_restore(&keep);
    if (st != DS_OK) return 0;
    if (n > 1) qsort(v, (size_t)n, sizeof *v, newer_first); /* v is NULL when n is 0 */
    if (n > 0 && newest && newest_cap) snprintf(newest, newest_cap, "%s", v[0].tag);
    size_t at = 0;
    for (int k = 0; k < n && at < cap; k++) {
        int w = snprintf(buf + at, cap - at, "%s%s (step %lld)", k ? ", " : "", v[k].tag,
                         (long long)v[k].step);
        if (w < 0 || (size_t)w >= cap - at) { /* cut: end with an ellipsis that fits */
            if (cap >= 4) memcpy(buf + cap - 4, "...", 4);
            break;
        }
        at += (size_t)w;
    }
    free(v);
    return n;
}

/* After a failure reading DIR/latest: add which checkpoints DIR holds and
 * how to name one, when it holds any. */
static void note_other_tags(const char *dir) {
    char tags[512], note[768];
    if (ds_ckpt_describe_tags(dir, tags, sizeof tags, NULL, 0) == 0) return;
    snprintf(note, sizeof note, "the folder holds %s: name one to read it (zero_to_fp32 --tag, "
             "the trainers' --resume-from, ds_load_checkpoint's tag)", tags);
    append_note(note);
}

ds_status ds_ckpt_prune(const char *dir, int keep, void (*report)(void *user, const char *path),
                        void *user) {
    if (keep < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: keeping %d checkpoints: at least 1 must stay", dir,
                      keep);
    char latest[DS_CKPT_TAG_MAX + 1] = "", path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, DS_CKPT_LATEST_FILE);
    if (access(path, F_OK) == 0) DS_TRY(ds_ckpt_read_latest(dir, latest, sizeof latest));
    ckpt_entry *v;
    int n;
    DS_TRY(list_checkpoints(dir, &v, &n));
    if (n > 1) qsort(v, (size_t)n, sizeof *v, newer_first); /* v is NULL when n is 0 */
    ds_status st = DS_OK;
    for (int k = keep; st == DS_OK && k < n; k++) {
        if (!strcmp(v[k].tag, latest)) continue; /* what a resume loads stays */
        st = remove_checkpoint(dir, v[k].tag);
        if (st == DS_OK && report) {
            snprintf(path, sizeof path, "%s/%s", dir, v[k].tag);
            report(user, path);
        }
    }
    free(v);
    DS_TRY(st);
    return DS_OK;
}

/* ---- a full disk, said with numbers ---------------------------------------- */

/* The last error's message, with `note` appended; its trace stays. */
static void append_note(const char *note) {
    ds_error_saved keep, now;
    ds_error_save(&keep);
    DS_ERR(DS_ERR_IO, "%s (%s)", keep.msg, note);
    ds_error_save(&now);
    memcpy(keep.msg, now.msg, sizeof keep.msg);
    ds_error_restore(&keep);
}

void ds_ckpt_note_space(const char *path, const char *need) {
    const char *msg = ds_last_error();
    char note[1024];
    if (strstr(msg, strerror(EFBIG))) { /* not the disk: the process's file-size limit */
        struct rlimit rl;
        if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
        snprintf(note, sizeof note, "the file-size limit of this process, ulimit -f, is %llu "
                 "bytes%s%.200s", (unsigned long long)rl.rlim_cur, need ? "; " : "",
                 need ? need : "");
        append_note(note);
        return;
    }
    if (!strstr(msg, strerror(ENOSPC)) && !strstr(msg, strerror(EDQUOT))) return;
    /* the nearest folder of path that exists holds the file system */
    char at[4096];
    snprintf(at, sizeof at, "%s", path);
    struct statvfs v;
    while (statvfs(at, &v) != 0) {
        char *slash = strrchr(at, '/');
        if (!slash || slash == at) {
            snprintf(at, sizeof at, "%s", slash == at ? "/" : ".");
            if (statvfs(at, &v) != 0) return;
            break;
        }
        *slash = '\0';
    }
    /* a path too long for the note is cut: the message keeps the file's name */
    snprintf(note, sizeof note, "the file system of %.600s has %llu bytes free of %llu%s%.200s",
             at, (unsigned long long)v.f_bavail * v.f_frsize,
             (unsigned long long)v.f_blocks * v.f_frsize, need ? "; " : "", need ? need : "");
    append_note(note);
}
