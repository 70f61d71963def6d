/* The optimizer pieces that need the flat parameter table: Hugging Face's
 * no-decay ranges and the state count. The update of a range, and the
 * ds_no_decay and ds_optim_step types, are engine/backend/optim_update.h. */
#ifndef DS_ZERO_OPTIM_H
#define DS_ZERO_OPTIM_H

#include "engine/backend/optim_update.h"
#include "zero/zero.h"

/* From the flat table's parameters (adjacent ones merged). Errors: DS_ERR_OOM. */
ds_status ds_no_decay_create(const ds_flat *flat, ds_no_decay **out);
void ds_no_decay_destroy(ds_no_decay *nd);

/* Number of fp32 state tensors the optimizer keeps per element (2 for Adam,
 * 1 for SGD with momentum, 0 for plain SGD). */
int ds_optim_state_count(const ds_config *cfg);

#endif /* DS_ZERO_OPTIM_H */
