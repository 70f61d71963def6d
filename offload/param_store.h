/* Where stage 3 keeps its working-parameter partition with
 * zero_optimization.offload_param (ZeRO-Infinity's parameter offload):
 *
 *   device "cpu"   the partition in host memory (pinned through the engine's
 *                  backend when pin_memory, plain RAM otherwise)
 *   device "nvme"  its first max_in_cpu elements in host memory, the rest in
 *                  an O_DIRECT file under nvme_path (offload/nvme_dir.h);
 *                  transfers go through buffer_count aligned buffers of up to
 *                  buffer_size elements, as many in flight as there are
 *                  buffers (offload/aio.h)
 *
 * Stage 3 reads this rank's piece of a module's span into the gather slot
 * right before the all-gather (the module schedule's prefetch included), and
 * the update writes the partition once per step. Nothing else touches it:
 * a parameter that did not change is never written back.
 *
 * Memory: the host part counts as DS_MEM_PARAMS at DS_PLACE_HOST, the file
 * part at DS_PLACE_NVME, the transfer buffers as DS_MEM_BUFFERS at HOST.
 * ds_param_store_destroy removes the file and its folder.
 *
 * Usage (zero/stage3.c):
 *
 *   ds_param_store *ps;
 *   DS_TRY(ds_param_store_create(&(ds_param_store_desc){.dev = be, .off = &cfg->offload_param,
 *                                .aio = &cfg->aio, .rank = r, .n = part, .t = DS_F16}, &ps));
 *   DS_TRY(ds_param_store_read(ps, lo, hi, slot));        // device memory
 *   DS_TRY(ds_param_store_write(ps, lo, hi, src, false)); // from device memory
 */
#ifndef DS_OFFLOAD_PARAM_STORE_H
#define DS_OFFLOAD_PARAM_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/core/config.h"
#include "engine/core/status.h"

typedef struct ds_param_store ds_param_store;

typedef struct ds_param_store_desc {
    ds_backend *dev;               /* the engine's backend (borrowed): copies, accountant */
    const ds_offload_config *off;  /* zero_optimization.offload_param: device cpu or nvme */
    const ds_aio_config *aio;      /* the aio section (nvme) */
    int rank;
    int64_t n;                     /* partition elements (>= 0) */
    ds_dtype t;                    /* working dtype */
} ds_param_store_desc;

/* Bytes the file of an nvme store of n elements of t takes, max_in_cpu
 * elements kept in host memory (0 when everything fits there). */
uint64_t ds_param_store_file_bytes(int64_t n, ds_dtype t, int64_t max_in_cpu);

/* Allocate the host part (zeroed) and, for nvme, make the folder, the file
 * (reserved) and the buffers. Errors: DS_ERR_OOM, DS_ERR_IO from the file
 * (call ds_nvme_preflight first for the start-up checks). */
ds_status ds_param_store_create(const ds_param_store_desc *d, ds_param_store **out);
void ds_param_store_destroy(ds_param_store *ps);

/* After a failed transfer lost the file (every call then fails saying
 * so): make the folder and file anew, empty, before a checkpoint load
 * writes the whole partition. Nothing done when not lost. A disk still too
 * full fails as at start-up and the file stays lost. */
ds_status ds_param_store_revive(ds_param_store *ps);

/* DS_OK, or, once a failed transfer lost the file, that loss (DS_ERR_IO
 * with its message). */
ds_status ds_param_store_check(const ds_param_store *ps);

/* Elements [lo, hi) to device memory dst. */
ds_status ds_param_store_read(ds_param_store *ps, int64_t lo, int64_t hi, void *dst);

/* Elements [lo, hi) from src: host memory (from_host) or device memory. */
ds_status ds_param_store_write(ds_param_store *ps, int64_t lo, int64_t hi, const void *src,
                               bool from_host);

#endif /* DS_OFFLOAD_PARAM_STORE_H */
