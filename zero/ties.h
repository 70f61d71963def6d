/* Gradients of tied parameters.
 *
 * A module that uses a parameter an earlier module owns (GPT-2's output
 * projection using the token embedding) runs its backward before the
 * owner's. Its gradient for that parameter goes into an fp32 accumulator of
 * the parameter's size, kept here, and the owner's backward starts from it:
 * when the engine takes the owner module's gradient slots, the accumulator
 * is added into the slot of that parameter and cleared. The owner's slot
 * then holds the sum of every use, in the order autograd would add them (the
 * later module's contribution first), and every strategy reduces, clips and
 * updates it as any other gradient, stored once. */
#ifndef DS_ZERO_TIES_H
#define DS_ZERO_TIES_H

#include "engine/backend/backend.h"
#include "zero/flat.h"

typedef struct ds_ties ds_ties;

/* Accumulators for f's tied parameters (none without ties), zeroed; tagged
 * DS_MEM_BUFFERS. */
ds_status ds_ties_create(ds_backend *be, const ds_flat *f, ds_ties **out);
void ds_ties_destroy(ds_ties *t);

/* Gradient slots of module m's tied parameters (m->tied order), NULL when m
 * has none. */
float **ds_ties_grad_slots(ds_ties *t, int m);

/* Module m is about to run its backward into `own` (its own gradient slots
 * from the strategy): add the accumulated gradients of the parameters it
 * owns that others tie to, and clear those accumulators. */
ds_status ds_ties_fold(ds_ties *t, int m, float *const *own);

/* Clear every accumulator (a backward abandoned half way). */
ds_status ds_ties_clear(ds_ties *t);

#endif /* DS_ZERO_TIES_H */
