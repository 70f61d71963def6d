/* Optimizer state off the device (DeepSpeed's offload_optimizer device
 * "cpu" or "nvme").
 *
 * Holds one partition of n elements: the fp32 master weights (always, even
 * when training in fp32, as DeepSpeed does), the optimizer moments, and two
 * host staging buffers (the partition's gradients in grad_t, and the updated
 * working parameters in param_t when param_t is not fp32). Where master and
 * moments live is a tier (offload/tier.h): host RAM for "cpu", files under
 * nvme_path for "nvme" (offload/nvme_swap.h), swapped in sub_group_size
 * pieces. A step
 *
 *   gradients  device -> host staging      (async, on a copy stream)
 *   state      tier -> host, per piece     (nvme: read, sub-group by sub-group)
 *   update     on the host                 (the cpu backend's adam / sgd slot:
 *                                           the same arithmetic as the device
 *                                           run, so losses are bit-identical
 *                                           on the cpu backend)
 *   state      host -> tier                (nvme: written back)
 *   parameters host -> device              (async, on a second copy stream)
 *
 * runs in pieces, so copying piece k+1 in and piece k-1 out overlaps the
 * update of piece k where the backend has streams (cuda) and, on NVMe, where
 * pipeline_read / pipeline_write ask for it; on the cpu backend every device
 * copy is synchronous.
 *
 * Memory, all allocated by ds_host_optim_create: with "cpu", master
 * (DS_MEM_MASTER) and moments (DS_MEM_OPTIM) at DS_PLACE_HOST, pinned
 * through the engine backend when pin_memory (cudaHostAlloc on cuda),
 * page-aligned RAM through the host backend otherwise; with "nvme" they are
 * counted at DS_PLACE_NVME and only the swap buffers (DS_MEM_BUFFERS) are in
 * RAM. The staging buffers (DS_MEM_BUFFERS) are always pinned on cuda
 * because asynchronous copies need page-locked memory. On the cpu backend,
 * whose "device" memory is host RAM, there is no gradient staging (the
 * update reads the gradients in place) and the parameter staging holds one
 * piece (4 Mi elements, or a sub-group on NVMe), not the partition. Nothing
 * is allocated by a step.
 *
 * Usage (zero/shard.c):
 *
 *   ds_host_optim_desc hd = {.dev = be, .n = part, .n_moments = 2,
 *                            .grad_t = DS_F16, .param_t = DS_F16, .pin_memory = true};
 *   ds_host_optim *o;
 *   DS_TRY(ds_host_optim_create(&hd, &o));
 *   DS_TRY(ds_host_optim_fill_master(o, draw_initial_values, ctx));
 *   ...
 *   DS_TRY(ds_host_optim_step(o, &upd, dev_grads, dev_params));
 *   ds_host_optim_destroy(o);     // nvme: the swap files are removed
 *
 * This folder depends on engine/ only (zero uses offload, never the
 * reverse). */
#ifndef DS_OFFLOAD_HOST_OPTIM_H
#define DS_OFFLOAD_HOST_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/core/config.h"
#include "engine/core/status.h"
#include "offload/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_host_optim ds_host_optim;

typedef struct ds_host_optim_desc {
    ds_backend *dev;    /* the engine's backend (borrowed); its accountant records the bytes */
    int64_t n;          /* elements of the partition (>= 0) */
    int n_moments;      /* fp32 moments the optimizer keeps: 0, 1 or 2 */
    ds_dtype grad_t;    /* gradients on the device: F32, F16 or BF16 */
    ds_dtype param_t;   /* working parameters on the device: F32, F16 or BF16 */
    bool pin_memory;    /* master and moments page-locked (on cuda) */
    int num_threads;    /* OpenMP threads of the host math (0: OMP_NUM_THREADS or cores) */
    /* device "nvme": the swap's settings (offload_optimizer: nvme_path,
     * buffer_count, pipeline_read/_write, fast_init; the aio section;
     * zero_optimization.sub_group_size), and the rank naming its folder.
     * NULL nvme: the state lives in host RAM. */
    const ds_offload_config *nvme;
    const ds_aio_config *aio;
    int64_t sub_group_size;
    int rank;
} ds_host_optim_desc;

/* One update, resolved by the caller (zero/): which optimizer, its
 * hyper-parameters for this step, and the factor folded into the
 * gradients (1/(world*loss_scale) times the clipping coefficient). */
typedef struct ds_host_update {
    ds_optim_type type; /* DS_OPTIM_SGD uses sgd, every other type adam */
    ds_adam_hparams adam;
    ds_sgd_hparams sgd;
    float grad_mult;
    /* HF's parameter groups (engine/backend/optim_update.h): the flat
     * ranges weight decay skips (NULL: none) and the flat element of this
     * state's element 0 */
    const struct ds_no_decay *no_decay;
    int64_t flat_lo;
} ds_host_update;

/* Allocate the state (zeroed) and, on a cuda backend, a cpu backend for
 * the host math and two copy streams. On a cpu backend the engine's backend
 * does the host math itself. With nvme, make the swap folder and files
 * (call ds_nvme_preflight first for the start-up checks). *out owns
 * everything; free with ds_host_optim_destroy. Errors: DS_ERR_INVALID_ARG
 * (types, n_moments), DS_ERR_OOM / DS_ERR_BACKEND from the allocations
 * (naming the bytes), DS_ERR_IO / DS_ERR_CONFIG from the swap. */
ds_status ds_host_optim_create(const ds_host_optim_desc *d, ds_host_optim **out);
void ds_host_optim_destroy(ds_host_optim *o);

/* State tensor k (0 the fp32 master, 1 and 2 the moments), elements
 * [lo, hi) of the partition, to (write false) or from (write true) host
 * memory, between steps (initialisation, checkpoints, set/get of weights).
 * A moment the optimizer does not keep reads as zeros and fails
 * DS_ERR_INVALID_ARG on write. After writing the master,
 * ds_host_optim_push brings the working parameters up to date. */
ds_status ds_host_optim_state_io(ds_host_optim *o, int k, int64_t lo, int64_t hi, float *host,
                                 bool write);

/* After an I/O failure lost the nvme swap (every call then fails saying
 * so): make the swap files anew, empty, before a checkpoint load writes
 * every value into them. Nothing done when not lost, or for "cpu". A disk
 * still too full fails as at start-up and the swap stays lost. */
ds_status ds_host_optim_revive(ds_host_optim *o);

/* The whole master from fn, called with consecutive ranges [b, e) of the
 * partition and a host buffer to fill (initialisation). */
ds_status ds_host_optim_fill_master(ds_host_optim *o, ds_tier_fill_fn fn, void *ctx);

/* The backend that runs the host math (a cpu backend): host pointers
 * handed to a fill function may be passed to its slots. Borrowed. */
ds_backend *ds_host_optim_backend(ds_host_optim *o);

/* Bytes the swap moved and the time steps waited for it ("nvme"; zeros for
 * "cpu"), since creation. */
ds_tier_stats ds_host_optim_swap_stats(const ds_host_optim *o);

/* What every host optimizer of this process did in its steps, summed
 * (ds_host_optim_step only: initialisation and checkpoints not counted):
 * the wall time of the steps, the time in the update (Adam or SGD) itself,
 * the bytes the swap read and wrote and the time the steps waited for them
 * (all of the I/O time without pipelining, the part not hidden behind the
 * update with it). For benchmarks: bench/bench_infinity splits a training
 * step with it. Thread-safe. */
typedef struct ds_host_optim_totals {
    uint64_t steps, read_bytes, write_bytes;
    double step_s, update_s, read_wait_s, write_wait_s;
} ds_host_optim_totals;
void ds_host_optim_get_totals(ds_host_optim_totals *out);

/* With offload_param the working parameters have no device partition: the
 * updated pieces go to fn(ctx, b, e, src) instead (src: host memory, e - b
 * elements of param_t), in step and push, which then take NULL dev_params. */
typedef ds_status (*ds_host_param_sink)(void *ctx, int64_t b, int64_t e, const void *src);
void ds_host_optim_set_sink(ds_host_optim *o, ds_host_param_sink fn, void *ctx);

/* One optimizer step on the partition: dev_grads (device, n elements of
 * grad_t) -> host, update master and moments, write the updated working
 * parameters to dev_params (device, n elements of param_t; the fp32 master
 * itself when param_t is F32). Returns after dev_params holds the new values.
 * dev_grads is only read. */
ds_status ds_host_optim_step(ds_host_optim *o, const ds_host_update *u, const void *dev_grads,
                             void *dev_params);

/* dev_params (device, n elements of param_t) from the master: after the
 * master was written (initialisation, checkpoint load, set_param). */
ds_status ds_host_optim_push(ds_host_optim *o, void *dev_params);

#ifdef __cplusplus
}
#endif
#endif /* DS_OFFLOAD_HOST_OPTIM_H */
