/* The NVMe tier (offload/tier.h): a partition's master weights and
 * optimizer moments in O_DIRECT files, swapped through host buffers in
 * sub-groups (DeepSpeed's offload_optimizer device "nvme", ZeRO-Infinity).
 *
 * Files: one per tensor in the rank's folder (offload/nvme_dir.h), sub-group
 * g at byte offset g * sub_group * 4. Sizes are rounded up to whole 4 KiB
 * blocks, so a sub-group is a multiple of 1024 elements: sub_group_size
 * rounded up so, and never more than the partition.
 *
 * Buffers: a "set" holds one sub-group of every tensor (1 + moments
 * buffers). A step keeps 1 + pipeline_read + pipeline_write sets busy:
 *
 *   pipeline_read   sub-group g+1 is read while g is updated
 *   pipeline_write  sub-group g-1 is written while g is updated
 *
 * and refuses at creation a buffer_count smaller than that many sets need
 * (DeepSpeed fails with "ran out of swap buffers" mid-step instead).
 *
 * Errors: any read or write that fails (a full disk, an I/O error) fails
 * the call with the file, offset and strerror, removes the swap files at
 * once (their contents are no longer a consistent state) and makes every
 * later call fail saying the state was lost and the last checkpoint is the
 * way back. DS_FAULT_INJECT=error:nvme:swap_write (":rank=R") makes the
 * next write-back fail with ENOSPC, as a disk that filled would, and
 * DS_FAULT_INJECT=nvme:mid_step kills the process with a write in flight. */
#ifndef DS_OFFLOAD_NVME_SWAP_H
#define DS_OFFLOAD_NVME_SWAP_H

#include "engine/backend/backend.h"
#include "engine/core/config.h"
#include "offload/aio.h"
#include "offload/tier.h"

typedef struct ds_nvme_swap_desc {
    ds_backend *buf_be;  /* allocates the buffers (pinned through the engine's
                            backend with pin_memory); its accountant counts them and
                            the files (DS_PLACE_NVME) */
    const char *what;    /* config key for messages, "zero_optimization.offload_optimizer" */
    const ds_offload_config *off;
    const ds_aio_config *aio;
    int64_t sub_group_size;
    int rank;
    int64_t n;           /* partition elements */
    int n_tensors;       /* 1 + moments */
    ds_aio_engine engine;/* DS_AIO_AUTO (0): the pool; DS_AIO_URING for measurements */
} ds_nvme_swap_desc;

/* Swap bytes a partition of n elements with n_tensors tensors takes on disk. */
uint64_t ds_nvme_swap_bytes(int64_t n, int n_tensors);

/* Folder, files (reserved), buffers and I/O threads. The files hold zeros;
 * fill the master with ds_tier io before the first step. Unless fast_init,
 * every moment block is written once here (a disk that cannot take the
 * state fails now, not mid-training). */
ds_status ds_nvme_swap_create(const ds_nvme_swap_desc *d, ds_tier **out);

/* The I/O engine a swap tier runs: "io_uring" or "pool". */
const char *ds_nvme_swap_engine(const ds_tier *t);

#endif /* DS_OFFLOAD_NVME_SWAP_H */
