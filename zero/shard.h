/* The optimizer shard of stages 1-3: this rank's partition of the fp32
 * master weights (mixed precision only: under fp32 the working parameters'
 * own slice serves) and of the optimizer moments.
 *
 * With zero_optimization.offload_optimizer.device "cpu" or "nvme" the shard
 * delegates to offload/host_optim.h: master (always, fp32 training
 * included, as DeepSpeed keeps it) and moments live in host memory or in
 * swap files under nvme_path, the update runs on the host, and `master`,
 * `state0`, `state1` below stay NULL. Stages then
 * reach the fp32 weights only through ds_shard_get_weights /
 * ds_shard_set_weights / ds_shard_sync_working / ds_shard_state_io. */
#ifndef DS_ZERO_SHARD_H
#define DS_ZERO_SHARD_H

#include "offload/host_optim.h"
#include "offload/param_store.h"
#include "zero/zero.h"

typedef struct ds_shard {
    ds_backend *be;
    int64_t part, lo;       /* partition size and its first flat element */
    bool mixed;
    float *master;          /* [part] fp32 on the device, not offloaded: mixed precision, or
                               offload_param (the working partition is then not fp32 storage
                               the update can own) */
    float *state0, *state1; /* [part] device optimizer moments (as many as the optimizer keeps) */
    ds_host_optim *off;     /* offload_optimizer cpu / nvme: master + moments off the device,
                               else NULL */
    ds_param_store *ps;     /* stage 3 with offload_param: the working partition (borrowed;
                               ds_shard_attach_store), else NULL */
    void *scratch;          /* [scratch_n] param_t on the device: one piece of the update's
                               output on its way to ps (device optimizer only) */
    int64_t scratch_n;
    ds_dtype pt;
} ds_shard;

/* Allocate the shard. Offloaded, the host master is also initialised here
 * from the parameters' declared inits (the values every stage draws). */
ds_status ds_shard_init(ds_shard *sh, const ds_zero_desc *d);
void ds_shard_free(ds_shard *sh);

static inline bool ds_shard_offloaded(const ds_shard *sh) { return sh->off != NULL; }

/* Stage 3 with offload_param: the working partition lives in ps, and every
 * call below that writes working parameters (lp_out / working / the fp32
 * slice) writes them there instead, piece by piece; those pointers are then
 * ignored (pass NULL). */
void ds_shard_attach_store(ds_shard *sh, ds_param_store *ps);

/* One optimizer step on the partition. fp32_weights: the fp32 slice to update
 * when not mixed (ignored when mixed: the master is updated and written to
 * lp_out in lp_t). grads: the partition's summed gradients in gt. Offloaded:
 * the host master is updated and the result written to lp_out (mixed) or
 * fp32_weights (not mixed) on the device. */
ds_status ds_shard_update(ds_shard *sh, const ds_optim_step *step, float *fp32_weights,
                          const void *grads, ds_dtype gt, float grad_mult, void *lp_out,
                          ds_dtype lp_t);

/* The ranks' agreement on a ds_shard_update's status `st`, before any
 * collective follows it (stages 1 and 2 start the parameters' all-gather;
 * stage 3 gathers in the next forward): where the update can fail on one
 * rank alone (offloaded: a swap file's read or write, a full disk), every
 * rank then fails with that rank's message at once, instead of the others
 * waiting in the gather for a rank that never comes. c: the world (every
 * rank that gathers or reduces with this one). Elsewhere, or at one rank,
 * st as it is: a device update fails only where the device does. */
ds_status ds_shard_agree(const ds_shard *sh, ds_comm *c, ds_status st);

/* zero.h's revive for a shard: the swap files of offload_optimizer nvme and
 * offload_param's file (ds_shard_attach_store), where lost, made anew. */
ds_status ds_shard_revive(ds_shard *sh);

/* state_io for the partitioned stages: the weights are the master
 * partition, or `fp32_weights` (the fp32 slice holding flat elements from
 * sh->lo) when not mixed; the moments are the shard's. Offloaded: the host
 * master and moments (after writing DS_STATE_WEIGHTS, ds_shard_sync_working
 * brings the working parameters up to date). */
ds_status ds_shard_state_io(ds_shard *sh, float *fp32_weights, ds_zero_state which, int64_t lo,
                            int64_t hi, float *host, bool write);

/* Parameter i's fp32 values to host `host` from the master partitions of all
 * ranks. Only for a shard that holds a master (mixed or offloaded); stages
 * read their working parameters otherwise. Collective. */
ds_status ds_shard_get_weights(ds_shard *sh, ds_comm *comm, const ds_flat *f, int i, float *host);

/* This rank's piece of parameter i from host `host` into the master (mixed
 * or offloaded; nothing to do otherwise). Local. */
ds_status ds_shard_set_weights(ds_shard *sh, const ds_flat *f, int rank, int i, const float *host);

/* The working partition (device, part elements of pt) from the master:
 * a cast when mixed, an upload when offloaded, nothing otherwise. */
ds_status ds_shard_sync_working(ds_shard *sh, void *working, ds_dtype pt);

/* Stage 3: initial values of the partition into the master (if any) and the
 * working partition (device, part elements of pt). */
ds_status ds_shard_init_working(ds_shard *sh, const ds_zero_desc *d, void *working, ds_dtype pt);

#endif /* DS_ZERO_SHARD_H */
