/* Optimizer update of one contiguous range, shared by every stage. */
#ifndef DS_ZERO_OPTIM_H
#define DS_ZERO_OPTIM_H

#include "zero/zero.h"

/* Update n fp32 weights `param` (master copy) from `grad` (grad_t) times
 * grad_mult, with optimizer state `state0` (Adam m / SGD momentum) and
 * `state1` (Adam v; NULL for SGD); also write the result to `param_lp` in
 * lp_t when not NULL. */
ds_status ds_optim_update(ds_backend *be, const ds_optim_step *s, float *param, const void *grad,
                          ds_dtype grad_t, float grad_mult, float *state0, float *state1,
                          size_t n, void *param_lp, ds_dtype lp_t);

/* Number of fp32 state tensors the optimizer keeps per element (2 for Adam,
 * 1 for SGD with momentum, 0 for plain SGD). */
int ds_optim_state_count(const ds_config *cfg);

#endif /* DS_ZERO_OPTIM_H */
