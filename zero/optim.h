/* Optimizer update of one contiguous range, shared by every stage. */
#ifndef DS_ZERO_OPTIM_H
#define DS_ZERO_OPTIM_H

#include "zero/zero.h"

/* The flat ranges that weight decay skips under Hugging Face's parameter
 * groups (the trainer's AdamW): the elements of every parameter
 * ds_param_decays says no to, as sorted, disjoint [lo[i], hi[i]). */
typedef struct ds_no_decay {
    int n;
    int64_t *lo, *hi;
    int64_t elems;  /* their total */
    int n_params;   /* how many parameters, of flat->n_params */
} ds_no_decay;

/* From the flat table's parameters (adjacent ones merged). Errors: DS_ERR_OOM. */
ds_status ds_no_decay_create(const ds_flat *flat, ds_no_decay **out);
void ds_no_decay_destroy(ds_no_decay *nd);

/* Update n fp32 weights `param` (master copy) from `grad` (grad_t) times
 * grad_mult, with optimizer state `state0` (Adam m / SGD momentum) and
 * `state1` (Adam v; NULL for SGD); also write the result to `param_lp` in
 * lp_t when not NULL. With s->no_decay, `param` is flat element s->flat_lo
 * on, and the runs inside a skipped range are updated with weight decay 0
 * (the same arithmetic otherwise: the update is element-wise). */
ds_status ds_optim_update(ds_backend *be, const ds_optim_step *s, float *param, const void *grad,
                          ds_dtype grad_t, float grad_mult, float *state0, float *state1,
                          size_t n, void *param_lp, ds_dtype lp_t);

/* Number of fp32 state tensors the optimizer keeps per element (2 for Adam,
 * 1 for SGD with momentum, 0 for plain SGD). */
int ds_optim_state_count(const ds_config *cfg);

#endif /* DS_ZERO_OPTIM_H */
