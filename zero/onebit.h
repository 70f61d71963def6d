/* 1-bit Adam and 0/1 Adam: DeepSpeed's communication-compressed Adams
 * (deepspeed/runtime/fp16/onebit/adam.py and zoadam.py), on the full replica
 * of stage 0 (DeepSpeed refuses both with ZeRO; so does the config here).
 *
 * 1-bit Adam (arXiv:2102.02888). Steps 1..freeze_step are Adam: gradients
 * all-reduced in backward, both moments updated, and the update
 *     p = p (1 - lr wd) - lr m / (sqrt(v) + eps)
 * (DeepSpeed's: decoupled weight decay, no bias correction), the same
 * arithmetic as ds_adam_update with bias_correction false, so the warm-up
 * equals Adam with those settings bit for bit. From step freeze_step + 1
 * the variance is frozen, backward reduces nothing, each rank folds its own
 * gradient into the momentum, and the momentum is all-reduced 1-bit
 * compressed with error feedback (engine/comm/codec.h): about 1/32 of the
 * fp32 traffic.
 *
 * 0/1 Adam (arXiv:2202.06009). The variance is updated (with all-reduced
 * gradients, an Adam step) only at steps t with t % var_interval == 0,
 * var_interval starting at 1 and doubling after every var_update_scaler
 * such updates; the steps between all-reduce the gradient 1-bit compressed
 * and update the momentum only. After var_freeze_step the variance is
 * frozen for good and the ranks take local steps: each updates its own
 * weights from its own gradient and accumulates the change in u; every
 * local_step_interval steps (1, doubling after every local_step_scaler
 * steps, at most local_step_clipper) the ranks undo their local changes,
 * all-reduce u (sqrt(v) + eps) 1-bit compressed, apply the mean, and take
 * the momentum from it (m = -u / sum of the interval's lr). The error
 * feedback is zeroed once when the local steps begin (it measured
 * gradients, from then on it measures u), as DeepSpeed does.
 *
 * Differences from DeepSpeed, on purpose:
 *  - DeepSpeed's first optimizer step only allocates its buffers (the
 *    batch's gradients update nothing); here step 1 is an Adam step.
 *  - Each parameter tensor has its own scale and error feedback, as
 *    DeepSpeed's fp32 path compresses each parameter (under fp16 its
 *    FP16_Optimizer hands it one flat group: one scale for the model, which
 *    here made 0/1 Adam diverge on a small BERT, the embeddings' scale
 *    swamping the layer norms'); all tensors travel in one message per
 *    peer and phase.
 *  - Momentum mask: elements whose variance is exactly 0 never had a
 *    gradient; 1-bit codes cannot carry a zero, and the noise divided by
 *    eps would throw them far (DeepSpeed asks users for an exp_avg_mask for
 *    those, BERT's unused position rows). Here they are masked to 0 after
 *    each decompression, with no mask to supply. A user's exp_avg_mask
 *    (ds_onebit_set_mask) is taken too and multiplied in at the same
 *    places as DeepSpeed's.
 *  - 0/1 Adam's synchronisation adds the mean change to the weights of the
 *    last synchronisation, kept, where DeepSpeed subtracts u from the
 *    current ones (p - u: equal up to a rounding that differs by rank, so
 *    DeepSpeed's replicas drift apart by a few ulps per synchronisation);
 *    here every rank holds the same bits after each one.
 *  - Checkpoints carry the error feedback (and 0/1 Adam's u, the weights of
 *    the last synchronisation and each rank's own weights and momentum,
 *    which differ between synchronisations), so a
 *    run resumed
 *    at the same world size trains bit for bit like one that never stopped;
 *    DeepSpeed resets them on load. At another world size they are reset.
 *
 * Gradients that stay local: the engine's grad_mult averages over ranks
 * (1 / (world scale)); a local gradient is one rank's estimate of the
 * average, so it is used times world. Their norm (for gradient_clipping)
 * and overflow are agreed over ranks: the norm is the root mean square of
 * the ranks' local norms, the overflow any rank's. */
#ifndef DS_ZERO_ONEBIT_H
#define DS_ZERO_ONEBIT_H

#include "engine/comm/codec.h"
#include "zero/zero.h"

typedef struct ds_onebit ds_onebit;

/* The optimizer of the flat vectors [0, flat->used) (weights, moments,
 * gradients: be's memory, the GPU's on cuda); each parameter tensor is
 * compressed with its own scale and error feedback. Its arithmetic runs in
 * be's onebit slots (engine/backend/onebit_math.h, the same bits on cpu and
 * cuda). The error feedback (and 0/1 Adam's u and gradient buffer) are
 * allocated from be, so its accountant shows them as optimizer state; the
 * codec's scratch (engine/comm/coded.c: a padded copy of the model and
 * three sets of records, about 3/32 of one) as buffers. */
ds_status ds_onebit_create(const ds_config *cfg, ds_backend *be, ds_comm *comm,
                           const ds_flat *flat, ds_onebit **out);
void ds_onebit_destroy(ds_onebit *ob); /* safe on NULL */

/* Whether the coming step's gradients are all-reduced during backward
 * (1-bit Adam's warm-up, 0/1 Adam's variance steps); otherwise they stay
 * local and ds_onebit_apply communicates. */
bool ds_onebit_reduces_grads(const ds_onebit *ob);

/* One optimizer step over n elements: weights w (fp32), gradients grads
 * (gt; all-reduced sums, or local when ds_onebit_reduces_grads said no),
 * moments m and v; lp (lpt) receives the new weights when not NULL.
 * st->adam carries lr, betas, eps, weight decay and the step. Collective. */
ds_status ds_onebit_apply(ds_onebit *ob, ds_backend *be, const ds_optim_step *st, float grad_mult,
                          float *w, const void *grads, ds_dtype gt, float *m, float *v, void *lp,
                          ds_dtype lpt);

/* DeepSpeed's exp_avg_mask (a param group's key in adam.py / zoadam.py) for
 * flat elements [offset, offset + numel): mask (host, numel floats, every
 * rank the same) is multiplied into every decompressed vector, as DeepSpeed
 * multiplies it: 1-bit Adam's momentum after freeze_step, 0/1 Adam's
 * compressed gradient and its synchronised u (so the momentum and the
 * weight change at a synchronisation), never the full-precision Adam
 * steps. 0 leaves an element no momentum from the compressed phases (a
 * padded or unused embedding row), 1 leaves it as it is. Elements never
 * given a mask keep 1. Not part of a checkpoint (DeepSpeed's load keeps the
 * script's mask): set it again after ds_initialize. Errors: a non-finite
 * element (DS_ERR_NONFINITE), out of memory. */
ds_status ds_onebit_set_mask(ds_onebit *ob, int64_t offset, const float *mask, size_t numel);

/* The rank's own state a checkpoint carries, fp32 back to back: the worker
 * and server error feedback, then (0/1 Adam) u and the weights of the last
 * synchronisation, then a trailer of 4: whether the compressed phase had
 * begun (1-bit Adam past freeze_step, 0/1 Adam's variance frozen) and 0/1
 * Adam's lr sum since the last synchronisation (a double, as three floats
 * that add up to it exactly). Elements. */
size_t ds_onebit_state_len(const ds_onebit *ob);
/* Copy it to (write = false) or from (write = true) host[0, len). */
ds_status ds_onebit_state_io(ds_onebit *ob, float *host, bool write);
/* Whether a saved state fits this run after `applied` steps: its phase is
 * the one this config's freeze_step / var_freeze_step gives at that step.
 * A state saved before 0/1 Adam's variance froze holds a gradient where
 * the weights of the last synchronisation belong, and one saved after holds
 * weights that differ between ranks: neither may be restored into the other
 * phase (the run then starts the state afresh, as at another world size). */
bool ds_onebit_state_fits(const ds_onebit *ob, const float *host, int64_t applied);
/* After a load: the schedule after `applied` steps (the counters are
 * functions of the step; 0/1 Adam's lr sum is the saved one, so a changed
 * lr schedule does not rescale the next synchronisation's momentum); with
 * `have_state` false the error feedback and u start from zero, and 0/1
 * Adam's local steps (lr sum 0) from the weights w (n elements, as
 * loaded). */
ds_status ds_onebit_restart(ds_onebit *ob, int64_t applied, bool have_state, const float *w);
/* 0/1 Adam after the variance froze: the weights of the last
 * synchronisation (n elements, the same on every rank); NULL before, and
 * for 1-bit Adam. Borrowed, valid until the next step. */
const float *ds_onebit_sync_weights(const ds_onebit *ob);
/* 0/1 Adam's local steps make the ranks' weights and momenta differ
 * between synchronisations: a checkpoint keeps each rank's own. */
bool ds_onebit_rank_weights(const ds_onebit *ob);

#endif /* DS_ZERO_ONEBIT_H */
