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

/* Stage 3: the modules whose spans are held gathered while module m runs,
 * largest span first (ties broken by index, so every rank agrees): m itself
 * and each distinct module that owns a parameter m ties to, except those
 * whose span is empty or persistent (0 < span < persistence_threshold: kept
 * whole, not gathered into a slot). A tie is served from its owner's
 * gathered span, so the table is never gathered twice. Writes them to `out`
 * (NULL: count only; else room for the count) and returns the count.
 * zero/stage3.c and zero/estimate.c both size the slot pool from it. */
int ds_ties_held(const ds_flat *f, int m, int64_t persistence_threshold, int *out);

/* The largest ds_ties_held over f's modules: how many gather slots stage 3
 * needs in use at once. */
int ds_ties_max_held(const ds_flat *f, int64_t persistence_threshold);

#endif /* DS_ZERO_TIES_H */
