/* One optimizer update of a contiguous fp32 range on the backend's fused
 * slots (adam, sgd), with Hugging Face's parameter groups: the ground floor
 * under zero/ (every stage's update of its shard) and offload/ (the host
 * optimizer's update of each piece), so that both run the same arithmetic
 * and offload needs nothing of zero/. The ranges themselves are cut from
 * the flat parameter table by zero/optim.h (ds_no_decay_create). */
#ifndef DS_BACKEND_OPTIM_UPDATE_H
#define DS_BACKEND_OPTIM_UPDATE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/core/config.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The flat ranges that weight decay skips under Hugging Face's parameter
 * groups (the trainer's AdamW): the elements of every parameter
 * ds_param_decays says no to, as sorted, disjoint [lo[i], hi[i]) (made by
 * zero/optim.h's ds_no_decay_create). */
typedef struct ds_no_decay {
    int n;
    int64_t *lo, *hi;
    int64_t elems;  /* their total */
    int n_params;   /* how many parameters, of flat->n_params */
} ds_no_decay;

/* Optimizer of one step, already resolved by the engine (lr from the
 * scheduler, step count). */
typedef struct ds_optim_step {
    ds_optim_type type;
    ds_adam_hparams adam;
    ds_sgd_hparams sgd;
    /* HF's parameter groups (config optim_hf; ds_no_decay above): the flat
     * ranges weight decay skips, NULL when every parameter decays, and the
     * flat element of an update call's first element (0 for a whole-flat
     * update; a caller that updates a partition sets its own). */
    const struct ds_no_decay *no_decay;
    int64_t flat_lo;
} ds_optim_step;

/* Update n fp32 weights `param` (master copy) from `grad` (grad_t) times
 * grad_mult, with optimizer state `state0` (Adam m / SGD momentum) and
 * `state1` (Adam v; NULL for SGD); also write the result to `param_lp` in
 * lp_t when not NULL. With s->no_decay, `param` is flat element s->flat_lo
 * on, and the runs inside a skipped range are updated with weight decay 0
 * (the same arithmetic otherwise: the update is element-wise). */
ds_status ds_optim_update(ds_backend *be, const ds_optim_step *s, float *param, const void *grad,
                          ds_dtype grad_t, float grad_mult, float *state0, float *state1,
                          size_t n, void *param_lp, ds_dtype lp_t);

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_OPTIM_UPDATE_H */
