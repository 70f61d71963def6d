/* Optimizer state in host memory (DeepSpeed's offload_optimizer device "cpu").
 *
 * Holds one partition of n elements: the fp32 master weights (always, even
 * when training in fp32, as DeepSpeed does), the optimizer moments, and two
 * host staging buffers (the partition's gradients in grad_t, and the updated
 * working parameters in param_t when param_t is not fp32). A step
 *
 *   gradients  device -> host staging      (async, on a copy stream)
 *   update     on the host                 (the cpu backend's adam / sgd slot:
 *                                           the same arithmetic as the device
 *                                           run, so losses are bit-identical
 *                                           on the cpu backend)
 *   parameters host -> device              (async, on a second copy stream)
 *
 * runs in chunks, so copying chunk k+1 in and chunk k-1 out overlaps the
 * update of chunk k where the backend has streams (cuda); on the cpu backend
 * every copy is synchronous and the chunks simply run in turn.
 *
 * Memory, all allocated by ds_host_optim_create and counted at
 * DS_PLACE_HOST: master (DS_MEM_MASTER) and moments (DS_MEM_OPTIM), pinned
 * through the engine backend when pin_memory (cudaHostAlloc on cuda),
 * page-aligned RAM through the host backend otherwise; the staging buffers
 * (DS_MEM_BUFFERS) are always pinned on cuda because asynchronous copies
 * need page-locked memory. Nothing is allocated by a step.
 *
 * Usage (zero/shard.c):
 *
 *   ds_host_optim_desc hd = {.dev = be, .n = part, .n_moments = 2,
 *                            .grad_t = DS_F16, .param_t = DS_F16, .pin_memory = true};
 *   ds_host_optim *o;
 *   DS_TRY(ds_host_optim_create(&hd, &o));
 *   float *master = ds_host_optim_master(o);   // host: fill the initial weights
 *   ...
 *   DS_TRY(ds_host_optim_step(o, &upd, dev_grads, dev_params));
 *   ds_host_optim_destroy(o);
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
} ds_host_optim_desc;

/* One update, resolved by the caller (zero/): which optimizer, its
 * hyper-parameters for this step, and the factor folded into the
 * gradients (1/(world*loss_scale) times the clipping coefficient). */
typedef struct ds_host_update {
    ds_optim_type type; /* DS_OPTIM_SGD uses sgd, every other type adam */
    ds_adam_hparams adam;
    ds_sgd_hparams sgd;
    float grad_mult;
} ds_host_update;

/* Allocate the host state (zeroed) and, on a cuda backend, a cpu backend for
 * the host math and two copy streams. On a cpu backend the engine's backend
 * does the host math itself. *out owns everything; free with
 * ds_host_optim_destroy. Errors: DS_ERR_INVALID_ARG (types, n_moments),
 * DS_ERR_OOM / DS_ERR_BACKEND from the allocations (naming the bytes). */
ds_status ds_host_optim_create(const ds_host_optim_desc *d, ds_host_optim **out);
void ds_host_optim_destroy(ds_host_optim *o);

/* Host pointers into the state, valid until destroy: the fp32 master [n] and
 * moment k [n] (NULL when the optimizer keeps fewer than k+1 moments). The
 * caller may read and write them between steps (initialisation,
 * checkpoints). */
float *ds_host_optim_master(ds_host_optim *o);
float *ds_host_optim_moment(ds_host_optim *o, int k);

/* The backend that runs the host math (a cpu backend): host pointers above
 * may be passed to its slots. Borrowed. */
ds_backend *ds_host_optim_backend(ds_host_optim *o);

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
