/* The optimizer shard of stages 1-3: this rank's partition of the fp32
 * master weights (mixed precision only: under fp32 the working parameters'
 * own slice serves) and of the optimizer moments. */
#ifndef DS_ZERO_SHARD_H
#define DS_ZERO_SHARD_H

#include "zero/zero.h"

typedef struct ds_shard {
    ds_backend *be;
    int64_t part, lo;       /* partition size and its first flat element */
    bool mixed;
    float *master;          /* [part] fp32, mixed only */
    float *state0, *state1; /* [part] optimizer moments (as many as the optimizer keeps) */
} ds_shard;

ds_status ds_shard_init(ds_shard *sh, const ds_zero_desc *d);
void ds_shard_free(ds_shard *sh);

/* One optimizer step on the partition. fp32_weights: the fp32 slice to update
 * when not mixed (ignored when mixed: the master is updated and written to
 * lp_out in lp_t). grads: the partition's summed gradients in gt. */
ds_status ds_shard_update(ds_shard *sh, const ds_optim_step *step, float *fp32_weights,
                          const void *grads, ds_dtype gt, float grad_mult, void *lp_out,
                          ds_dtype lp_t);

/* state_io for the partitioned stages: the weights are the master
 * partition, or `fp32_weights` (the fp32 slice holding flat elements from
 * sh->lo) when not mixed; the moments are the shard's. */
ds_status ds_shard_state_io(ds_shard *sh, float *fp32_weights, ds_zero_state which, int64_t lo,
                            int64_t hi, float *host, bool write);

#endif /* DS_ZERO_SHARD_H */
