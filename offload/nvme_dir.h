/* The folder a rank's NVMe swap files live in, under offload_optimizer.nvme_path.
 *
 *   NVME_PATH/zero_engine_swap.HOST.PID.rRANK.XXXXXX/
 *       owner          "HOST PID RANK": flock()ed by the live process for
 *                      as long as the folder is in use
 *       master.swp     one O_DIRECT file per state tensor
 *       moment0.swp ...
 *
 * Every run makes a new folder (mkdtemp) and never reads one it did not
 * make, so a folder left by a run that crashed is never taken for state. A
 * start-up on the same host removes such leftovers first: a folder whose
 * owner lock can be taken (the kernel drops a lock when its process dies,
 * however it died), or, without an owner file yet, whose PID is gone.
 *
 * ds_nvme_preflight runs the checks of a start-up before the engine
 * allocates anything, so a bad nvme_path fails at once with one message
 * naming the path and the bytes needed against the bytes free:
 *   missing, not a directory, not writable, no O_DIRECT, too small.
 * DS_FAULT_INJECT=error:nvme:odirect makes the direct-I/O probe fail as a
 * file system without O_DIRECT does (EINVAL), for tests on machines whose
 * every file system has it (tmpfs too, since Linux 6.6). */
#ifndef DS_OFFLOAD_NVME_DIR_H
#define DS_OFFLOAD_NVME_DIR_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Direct I/O alignment kept by every buffer, offset and size of the swap:
 * the largest logical block of the file systems it runs on. */
#define DS_NVME_ALIGN 4096

typedef struct ds_nvme_dir {
    char path[PATH_MAX];  /* the rank's folder */
    int lock_fd;          /* the owner file, flock()ed; -1 when closed */
    int rank;
} ds_nvme_dir;

/* Check nvme_path for `need` bytes of swap on this rank (after removing
 * leftovers of crashed runs on this host): exists, is a directory, a folder
 * can be made in it, a file in it opens and moves a block with O_DIRECT,
 * and the file system has `need` bytes free, and `host_need` (what every
 * swap on this host and this path needs together: the host's ranks, both
 * offloads; at least need) too. Leaves nothing behind. `what` names the key
 * in messages ("zero_optimization.offload_optimizer"). Errors: DS_ERR_IO or
 * DS_ERR_UNSUPPORTED (no O_DIRECT) with the path, the reason and "needs N
 * bytes (X GiB) ..., F bytes free". */
ds_status ds_nvme_preflight(const char *what, const char *nvme_path, int rank, uint64_t need,
                            uint64_t host_need);

/* Make this rank's folder and take its owner lock. */
ds_status ds_nvme_dir_open(const char *what, const char *nvme_path, int rank, ds_nvme_dir *d);

/* Create `name` in the folder, open it O_DIRECT read-write and reserve
 * `bytes` (fallocate; where the file system cannot, the file is sized
 * sparse and the preflight's free-space check is the guard). *fd is the
 * caller's to close. ENOSPC names the bytes needed and free
 * (DS_FAULT_INJECT=error:nvme:reserve[:rank=R] makes the reservation fail
 * so, for tests). */
ds_status ds_nvme_dir_file(const ds_nvme_dir *d, const char *name, uint64_t bytes, int *fd);

/* Remove every file of the folder and the folder, then drop the lock.
 * Quiet and idempotent; safe on a zeroed / never-opened dir. */
void ds_nvme_dir_remove(ds_nvme_dir *d);

/* Bytes the file system holding `path` has free for this user (statvfs
 * f_bavail), or -1 with errno set. */
int64_t ds_nvme_free_bytes(const char *path);

/* Remove leftovers of dead runs on this host under nvme_path; returns how
 * many folders were removed (each one is also reported on stderr). */
int ds_nvme_clean_stale(const char *nvme_path);

#ifdef __cplusplus
}
#endif
#endif /* DS_OFFLOAD_NVME_DIR_H */
