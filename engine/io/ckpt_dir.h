/* A checkpoint folder on disk: names, the atomic commit, `latest`, and the
 * completeness check every reader runs first.
 *
 *   DIR/TAG.tmp/   ranks write here; a crash leaves only this behind
 *   DIR/TAG/       renamed from TAG.tmp once every file is written and synced
 *   DIR/latest     the name of the newest complete TAG, replaced atomically
 *
 * Crash safety rests on three POSIX guarantees: rename() within a file system
 * is atomic, fsync() of a file makes its bytes durable, fsync() of a
 * directory makes its entries (created, renamed) durable. */
#ifndef DS_IO_CKPT_DIR_H
#define DS_IO_CKPT_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/io/ckpt_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_CKPT_LATEST_FILE "latest"

/* "shard-00001-of-00004.dsck": rank r's file in a world of `world`. */
void ds_ckpt_shard_name(int rank, int world, char *buf, size_t cap);

/* A tag is a folder name: 1..DS_CKPT_TAG_MAX characters of [A-Za-z0-9._-],
 * not starting with '.', not ending in ".tmp", not "latest".
 * Errors: DS_ERR_INVALID_ARG naming the tag and the rule. */
ds_status ds_ckpt_check_tag(const char *tag);

/* fsync a folder (its entries). Errors: DS_ERR_IO naming it. */
ds_status ds_ckpt_fsync_dir(const char *dir);
/* fsync the folder holding `path` ("." when it names none), so a file
 * created or renamed there survives a crash. Errors as ds_ckpt_fsync_dir. */
ds_status ds_ckpt_fsync_parent(const char *path);
/* mkdir -p, syncing the parent of every folder it creates (a new folder is
 * only as durable as its parent's entries). Errors: DS_ERR_IO naming the
 * component that failed. */
ds_status ds_ckpt_mkdirs(const char *dir);
/* ds_ckpt_mkdirs, also telling the first (outermost) folder it created in
 * first_new[cap] ("" when dir existed), for ds_ckpt_rmdirs_upto. */
ds_status ds_ckpt_mkdirs_new(const char *dir, char *first_new, size_t cap);
/* Undo ds_ckpt_mkdirs_new after a failure: remove dir and its parents up to
 * and including `top` (its first_new), each only if empty. Nothing when top
 * is "" or NULL. Never fails: what cannot be removed stays. */
void ds_ckpt_rmdirs_upto(const char *dir, const char *top);
/* What unfinished saves leave in DIR: every TAG.tmp folder (TAG a valid tag)
 * and latest.tmp, removed; a TAG.old (a tag replaced where the file system
 * has no renameat2 exchange, ds_ckpt_commit_dir) removed beside TAG, or put
 * back as TAG when the replacing save ended before TAG landed. `report` (may
 * be NULL) is called with the path of each (TAG itself for one put back).
 * Nothing else is touched; a DIR that does not exist is fine. Errors:
 * DS_ERR_IO naming what could not be removed. */
ds_status ds_ckpt_remove_stale(const char *dir, void (*report)(void *user, const char *path),
                               void *user);
/* Remove a flat folder of files (a TAG.tmp a crash left, or an old TAG
 * swapped out); nothing there is fine. Refuses sub-folders (DS_ERR_IO), so a
 * wrong path cannot delete a tree. */
ds_status ds_ckpt_remove_flat_dir(const char *dir);
/* One writer per checkpoint folder. Takes an exclusive flock on DIR/.lock
 * (creating DIR and the file) for this process, held until the process
 * ends: two jobs saving into one folder would interleave their tags and
 * remove each other's unfinished saves (ds_ckpt_remove_stale). A lock this
 * process already holds on DIR is fine (taken again, nothing happens). The
 * file records who holds it ("pid 4242 on node7 since 2025-03-01 12:00:00
 * UTC"), which the refusal quotes. A job that dies, however it dies, frees
 * the lock with its process: flock belongs to the open file, which the
 * kernel closes, so a stale lock never blocks (on NFS Linux emulates flock
 * with POSIX locks, which the server drops with the client's lease).
 * Errors: DS_ERR_IO "DIR is being written by another job (DIR/.lock held by
 * pid 4242 on node7 since ...)", or naming the call that failed. */
ds_status ds_ckpt_lock_dir(const char *dir);
#define DS_CKPT_LOCK_FILE ".lock"

/* Keep the newest `keep` (>= 1) checkpoints of DIR and the one `latest`
 * names, removing the others: a checkpoint is a folder DIR/TAG (TAG a valid
 * tag) with a meta.json that reads and verifies; newest is the highest
 * global_step recorded there, ties broken by the folder's modification time.
 * Folders that are not such a checkpoint are left alone. Each removal is
 * crash-safe: TAG is renamed to TAG.tmp (DIR synced), then deleted, so a
 * crash leaves only what ds_ckpt_remove_stale clears, never a partial TAG.
 * `report` (may be NULL) gets each removed TAG's path. Call it with DIR
 * locked (ds_ckpt_lock_dir). Errors: DS_ERR_IO naming what could not be
 * removed; DS_ERR_INVALID_ARG for keep < 1. */
ds_status ds_ckpt_prune(const char *dir, int keep, void (*report)(void *user, const char *path),
                        void *user);

/* The complete checkpoints of DIR (as ds_ckpt_prune counts them), newest
 * first, as "TAG (step N), ..." into buf[cap] (cut with "..."), and the
 * newest's tag into newest[newest_cap] (newest may be NULL); returns how
 * many, 0 when DIR holds none or cannot be listed (the last error is left
 * as it was). */
int ds_ckpt_describe_tags(const char *dir, char *buf, size_t cap, char *newest,
                          size_t newest_cap);

/* After a failed write under `path`: when the error recorded says the disk
 * or a quota is full (or a file-size limit), add what the file system
 * holding `path` has left and, when `need` is not NULL, what the write
 * needed, so the one line the user reads has the path and the bytes:
 * "...: No space left on device (the file system of /ckpt/global_step4.tmp
 * has 40960 bytes free of 2097152; the shard holds 1572864 bytes before
 * compression)". Any other error stays as it is. */
void ds_ckpt_note_space(const char *path, const char *need);

/* Write len bytes to path atomically: path.tmp, fsync, rename, fsync folder. */
ds_status ds_ckpt_write_file_atomic(const char *path, const void *data, size_t len);

/* Make DIR/TAG.tmp (already synced) the checkpoint DIR/TAG: rename, or when
 * DIR/TAG exists, exchange the two atomically (renameat2 RENAME_EXCHANGE)
 * and remove the old one, so DIR/TAG is at every instant either the old or
 * the new complete checkpoint. Where the file system has no exchange (NFS,
 * Lustre: EINVAL), the old one goes aside as TAG.old first; a crash between
 * the two renames leaves TAG.old complete, which ds_ckpt_remove_stale puts
 * back. Then fsync DIR. */
ds_status ds_ckpt_commit_dir(const char *dir, const char *tag);

/* Replace DIR/latest with `tag` atomically. */
ds_status ds_ckpt_write_latest(const char *dir, const char *tag);
/* Read DIR/latest into tag[cap]. Errors: DS_ERR_IO "DIR/latest: no such
 * file" when there is none (no complete checkpoint yet); DS_ERR_CORRUPT when
 * its content is not a valid tag. */
ds_status ds_ckpt_read_latest(const char *dir, char *tag, size_t cap);

/* Check DIR/TAG (tag_dir) before reading it: meta.json reads and is
 * consistent; every shard file meta.json names exists, has the recorded size,
 * a valid header, trailer and index whose checksum and rank / world / range
 * match the record; no other file is there. With `frames` also every frame's
 * checksum (reading all stored bytes, decompressing nothing). Fills *meta
 * (caller frees with ds_ckpt_meta_free, also on failure). Errors name the
 * file: DS_ERR_IO "…: missing (meta.json names N shard files)",
 * DS_ERR_CORRUPT "…: 1000 bytes, meta.json records 4096 (truncated?)",
 * "…: written by a world of 4 ranks, meta.json says 2", "…: extra file …". */
ds_status ds_ckpt_check_dir(const char *tag_dir, bool frames, ds_ckpt_meta *meta);

/* The same check for one rank of a load that reads flat elements [lo, hi):
 * every file is looked up and its size compared (a stat, no read), only the
 * files overlapping [lo, hi) are opened (header, trailer, index). Since the
 * ranks' ranges cover the flat space, the ranks together open every file
 * once (a 1000-rank checkpoint costs each rank of a 1000-rank load a few
 * indexes, not 1000). No frame is read. */
ds_status ds_ckpt_check_dir_range(const char *tag_dir, int64_t lo, int64_t hi,
                                  ds_ckpt_meta *meta);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_CKPT_DIR_H */
