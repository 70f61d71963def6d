/* Every rank must see the checkpoint folder rank 0 writes.
 *
 * A checkpoint folder on a shared file system is one folder for every host.
 * Given a path that is a local disk on each host, or a mount missing on one,
 * the ranks see different folders under the same name: rank 0 creates
 * DIR/TAG.tmp on its disk and rank 1's shard then fails with "No such file
 * or directory" (or, worse, lands in another folder). The marker names that
 * cause before anything is written:
 *
 *   rank 0:        ds_ckpt_marker_write(dir, &m)      DIR/.shared-check holds a
 *                                                     fresh random nonce
 *   all ranks:     broadcast m from rank 0
 *   other ranks:   ds_ckpt_marker_check(dir, &m, rank)   reads it back: the same
 *                                                     bytes, or one clear error
 *   rank 0, after every rank checked:  ds_ckpt_marker_remove(dir)
 *
 * Cost: rank 0 writes and removes one small file, every other rank reads it
 * (no fsync: the file is never published, only compared while it exists).
 * The marker sits in DIR itself, not in TAG.tmp, so nothing of it can end
 * up in a checkpoint. Rank 0 writes it only while holding DIR's lock
 * (ckpt_dir.h), so no other job's marker can replace it in between. */
#ifndef DS_IO_CKPT_SHARED_H
#define DS_IO_CKPT_SHARED_H

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_CKPT_MARKER_FILE ".shared-check"

/* What rank 0 wrote and sends to the others: "host H pid P nonce N\n",
 * NUL-terminated, fixed size so it travels as one broadcast. */
typedef struct ds_ckpt_marker {
    char text[160];
} ds_ckpt_marker;

/* Rank 0: write DIR/.shared-check (DIR exists) with a new 64-bit random
 * nonce, this host's name and pid; *m gets its text. Errors: DS_ERR_IO
 * naming the file. */
ds_status ds_ckpt_marker_write(const char *dir, ds_ckpt_marker *m);

/* Rank `rank`: DIR/.shared-check holds exactly m's text. Errors: DS_ERR_IO,
 * one line: "checkpoint folder DIR: rank R (host H) does not see the folder
 * rank 0 (host H0) writes (WHY); every rank must see the same checkpoint
 * folder: a shared file system mounted at the same path on every host",
 * WHY being that DIR does not exist on this host, that the marker is
 * missing, holds other bytes, or cannot be read (with strerror). */
ds_status ds_ckpt_marker_check(const char *dir, const ds_ckpt_marker *m, int rank);

/* Rank 0, once every rank has checked: remove DIR/.shared-check; nothing
 * there is fine. Errors: DS_ERR_IO naming the file. */
ds_status ds_ckpt_marker_remove(const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_CKPT_SHARED_H */
