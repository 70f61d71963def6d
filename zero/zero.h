/* ZeRO strategies: one object per stage behind one interface.
 *
 *   stage 0  zero/stage0.c   everything everywhere; gradients all-reduced in
 *                            buckets during the last micro-batch's backward
 *   stage 1  zero/stage1.c   fp32 master + optimizer moments of the rank's
 *   stage 2  zero/stage2.c   partition only; (2) gradients reduce-scattered
 *                            into the partition during backward
 *   stage 3  zero/stage3.c   parameters partitioned too; gathered per module
 *
 * The engine drives every strategy the same way:
 *
 *   for each micro-batch:
 *     begin_forward(batch)        optional: the rows a table will read
 *     for m in modules:           fetch(m) -> fp32 params (own, tied); forward;
 *                                 release(m)
 *     for m in reverse(modules):  fetch(m); grad_slots(m) -> fp32 slots;
 *                                 backward (accumulates into slots; may
 *                                 call grad_done(m, lo, hi) for the part of
 *                                 m's span it has finished);
 *                                 grad_done(m, rest of the span); release(m)
 *   at the boundary:
 *     reduce_grads()  -> global sum of squares of the summed gradients and
 *                        an overflow flag, identical on every rank
 *     apply(grad_mult, optimizer hparams)   unless the engine skips the step
 *     zero_grad()
 *
 * Tied parameters: fetch hands a module fp32 views of the parameters it
 * uses but an earlier module owns; their gradients are the engine's
 * (zero/ties.h), which adds them into the owner's slots in the owner's
 * backward, so a strategy sees only owned gradients.
 *
 * Gradients are SUMS over ranks (and over micro-batches, each already scaled
 * by 1/gradient_accumulation_steps and by the loss scale); the engine folds
 * 1/(world * loss_scale) and the clipping coefficient into grad_mult, so the
 * arithmetic of the update is the same at every stage.
 *
 * Strategies own all model-state memory (params, grads, master, moments and
 * their communication buffers) and allocate it at creation through the
 * backend, tagged in the accountant: nothing is allocated in a step. */
#ifndef DS_ZERO_ZERO_H
#define DS_ZERO_ZERO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/backend/optim_update.h" /* ds_optim_step */
#include "engine/comm/comm.h"
#include "engine/core/config.h"
#include "engine/core/status.h"
#include "zero/flat.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_zero ds_zero;


typedef struct ds_zero_desc {
    const ds_config *cfg; /* resolved */
    ds_backend *be;
    ds_comm *comm;
    const ds_flat *flat;
    ds_dtype param_t;     /* working parameters: F32, F16 or BF16 */
    ds_dtype grad_t;      /* gradient storage and communication */
    uint64_t seed;        /* parameter initialisation */
} ds_zero_desc;

/* Optimizer-side state a checkpoint saves, all fp32 over the flat space. */
typedef enum ds_zero_state {
    DS_STATE_WEIGHTS = 0, /* fp32 master weights (mixed) or the fp32 parameters */
    DS_STATE_MOMENT0,     /* Adam exp_avg / SGD momentum buffer */
    DS_STATE_MOMENT1,     /* Adam exp_avg_sq */
    DS_STATE_COUNT
} ds_zero_state;

typedef struct ds_zero_ops {
    const char *name; /* "stage0", ... */
    /* fp32 pointers to module m's parameters (in declared order) and to the
     * parameters it ties to (module->tied order; NULL when it has none),
     * valid until release(m). Collective under stage 3 (gathers). A
     * failure sets z->fetch_local when it was this rank's alone and every
     * collective of the fetch went as on the other ranks (stage 3: its own
     * piece could not be read; stages 0-2: the widening cast of the
     * replica); any other failure (a collective, the communication thread)
     * leaves it false: the ranks' calls may have parted. */
    ds_status (*fetch)(ds_zero *z, int module, float ***out, float ***tied);
    ds_status (*release)(ds_zero *z, int module);
    /* fp32 gradient slots for module m's backward; the module accumulates. */
    ds_status (*grad_slots)(ds_zero *z, int module, float ***out);
    /* The gradients in [lo, hi) of module m's span are final for this
     * micro-batch (a strategy may start reducing them). The engine hands
     * each module's span over downwards in one or more calls, the first
     * ending at the span's end, the last (when m's backward returns)
     * starting at its begin: parts come when the module says its last
     * parameters are done (ds_module_grads_final), so a reduction can
     * start before the module's backward ends. The pieces may differ
     * between ranks (a module's calls, a failed backward's rest in one
     * piece): what a strategy sends must depend on the range, not on the
     * pieces (grad_buckets.h cuts at parameters). */
    ds_status (*grad_done)(ds_zero *z, int module, int64_t lo, int64_t hi);
    /* Boundary: finish all reductions; *sumsq = sum of squares of the summed
     * gradient over the whole model, *overflow = any inf/nan anywhere; both
     * identical on every rank. */
    ds_status (*reduce_grads)(ds_zero *z, double *sumsq, int *overflow);
    /* Update the parameters: g = grad * grad_mult, optimizer step on the
     * owned range, then make the working parameters consistent everywhere. */
    ds_status (*apply)(ds_zero *z, float grad_mult, const ds_optim_step *step);
    ds_status (*zero_grad)(ds_zero *z);
    /* Full fp32 parameter / gradient i to or from host memory. Collective. */
    ds_status (*get_param)(ds_zero *z, int param, float *host);
    ds_status (*set_param)(ds_zero *z, int param, const float *host);
    ds_status (*get_grad)(ds_zero *z, int param, float *host);
    /* Copy flat elements [lo, hi) of fp32 state `which` to (write = false)
     * or from (write = true) host memory. [lo, hi) must lie in this rank's
     * partition [rank*part, (rank+1)*part) (stage 0 holds everything and
     * accepts any range). A moment the optimizer does not keep reads as
     * zeros and fails DS_ERR_INVALID_ARG on write. Local. */
    ds_status (*state_io)(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi, float *host,
                          bool write);
    /* After DS_STATE_WEIGHTS were written on every rank: rebuild the working
     * parameters (low-precision copies, replicas, gather caches).
     * Collective. */
    ds_status (*sync_params)(ds_zero *z);
    void (*destroy)(ds_zero *z);
    /* Optional (NULL where a strategy keeps none): state that is this
     * rank's own, not a part of the flat space (1-bit Adam's error
     * feedback, zero/onebit.h), which a checkpoint keeps per rank and
     * restores only at the same world size. Elements, and a copy to
     * (write = false) or from (write = true) host[0, len). Local. */
    size_t (*rank_state_len)(ds_zero *z);
    ds_status (*rank_state_io)(ds_zero *z, float *host, bool write);
    /* Optional: whether a saved rank_state fits this run after `applied`
     * steps (else it starts afresh, as at another world size). Local. */
    bool (*rank_state_fits)(ds_zero *z, const float *host, int64_t applied);
    /* After a load: `applied` optimizer steps were taken; have_state says
     * whether rank_state was restored (else it starts afresh). Local. */
    ds_status (*rank_state_restart)(ds_zero *z, int64_t applied, bool have_state);
    /* Optional: a forward is about to fetch modules. host: the micro-batch
     * in host memory for a training forward (its inputs described by
     * `inputs`), NULL for an evaluation or prediction. Stages 1 and 2 bring
     * the table rows it reads (zero/param_rows.h). */
    ds_status (*begin_forward)(ds_zero *z, const ds_batch *host, const ds_tensor_desc *inputs,
                               int n_inputs);
    /* Optional (NULL where the optimizer has none): DeepSpeed's exp_avg_mask
     * for parameter i, numel host floats (zero/onebit.h). Local. */
    ds_status (*set_exp_avg_mask)(ds_zero *z, int param, const float *host);
    /* Optional (NULL where nothing is gathered ahead): forget what was
     * gathered, after the ranks agreed that a forward or a window failed
     * somewhere, so that the next fetches gather afresh on every rank alike.
     * Stage 3 keeps a fetch whose own piece could not be read failing while
     * its span stays cached (the ranks must keep caching alike); this ends
     * that, and any zeros the others took in its place. Every rank calls it
     * at the same point (what is in flight is waited for). */
    ds_status (*drop_gathered)(ds_zero *z);
    /* Optional (NULL where nothing lives off the device): an NVMe file of
     * offload_optimizer or offload_param that an I/O failure lost (its
     * calls failing since) is made anew, empty, at the start of a load
     * that writes every value of the state (ds_load_checkpoint with the
     * optimizer state), so the same engine trains on from the checkpoint.
     * Nothing done where nothing was lost. Local: the load agrees after. */
    ds_status (*revive)(ds_zero *z);
} ds_zero_ops;

struct ds_zero {
    const ds_zero_ops *ops;
    ds_zero_desc d;
    int stage;
    void *impl;
    /* Set by the engine before each backward: this micro-batch ends the
     * gradient accumulation, so each module's gradients are final at its
     * grad_done calls (tied uses already folded in) and stages 0 and 1 reduce them
     * during the backward. Stages 2 and 3 reduce every micro-batch's
     * gradients into their partition anyway (they keep no full replica). */
    bool final_backward;
    /* How the optimizer state is laid over the ranks, for checkpoints (one
     * file per part): flat->padded cut into state_parts equal parts, this
     * rank holding part state_part (state_io's range at stages 1-3). The
     * world's ranks, except under MiCS: its shard groups replicate the
     * state, so there are mics_shard_size parts and a replica holds the
     * part of its place in its group. */
    int state_parts, state_part;
    /* The last fetch failed on this rank alone, its collectives made (fetch
     * above): the engine may then take part in the rest of a forward's or
     * backward's collectives, as the other ranks do, before they all agree
     * that it failed. */
    bool fetch_local;
};

/* ZeRO-Infinity's start-up checks, before anything is allocated: a bad
 * nvme_path (missing, not a folder, not writable, no O_DIRECT, too small for
 * the bytes the swap or the parameter file needs) fails with one message
 * naming the key, the path and the bytes; a crashed run's leftovers there are
 * removed. Nothing to do without NVMe offload. */
ds_status ds_zero_preflight(const ds_zero_desc *d);

/* Build the strategy for cfg->zero_optimization.stage (ds_zero_preflight
 * first) and initialise the
 * parameters from their declared inits (the same values on every rank and
 * for every world size: element i of parameter p comes from the Philox
 * stream (seed, p) at counter i). */
ds_status ds_zero_create(const ds_zero_desc *d, ds_zero **out);
void ds_zero_destroy(ds_zero *z);

/* For the implementations: allocate a strategy with `ops` and a zeroed impl
 * of impl_size bytes. */
ds_status ds_zero_alloc(const ds_zero_desc *d, const ds_zero_ops *ops, int stage, size_t impl_size,
                        ds_zero **out);

/* Implementation constructors. */
ds_status ds_zero_stage0_create(const ds_zero_desc *d, ds_zero **out);
ds_status ds_zero_stage1_create(const ds_zero_desc *d, ds_zero **out);
ds_status ds_zero_stage2_create(const ds_zero_desc *d, ds_zero **out);
ds_status ds_zero_stage3_create(const ds_zero_desc *d, ds_zero **out);

/* Bytes of model state per rank the ZeRO paper predicts (params + grads +
 * fp32 master + optimizer state) for this layout, stage and precision. With
 * the optimizer offloaded the fp32 master exists even in fp32 training (it
 * lives on the host, as in DeepSpeed), so K counts it then too. */
uint64_t ds_zero_expected_bytes(const ds_flat *f, int stage, ds_dtype param_t, ds_dtype grad_t,
                                ds_optim_type opt, bool has_momentum, bool offload_optimizer);

/* Initialise `n` elements of parameter p's values, elements [first, first+n),
 * as fp32 into dst (device). Shared by all stages. */
ds_status ds_zero_init_range(ds_backend *be, const ds_flat_param *p, int param_index,
                             uint64_t seed, int64_t first, int64_t n, float *dst);

#ifdef __cplusplus
}
#endif
#endif /* DS_ZERO_ZERO_H */
