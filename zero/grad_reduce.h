/* In-place gradient reduction during backward (stages 0 and 1).
 *
 * Stages 0 and 1 keep a full gradient replica. In the last micro-batch of an
 * accumulation each module's gradients are final as soon as its backward
 * finished (tied parameters included: zero/ties.h folds every use into the
 * owner's slots before the owner's backward, which runs after all users').
 * Modules finish in reverse flat order and their spans are adjacent, so the
 * final gradients always form one range [cursor, used) growing downwards.
 * Each time that range has grown by reduce_bucket_size elements (or by one
 * module, with contiguous_gradients false), the new bucket is reduced in
 * place on the communication thread (overlap_comm; inline without it), while
 * the backward of the earlier modules goes on:
 *
 *   DS_GRAD_ALL_REDUCE      stage 0: every rank gets the bucket's sum
 *   DS_GRAD_REDUCE_SCATTER  stage 1: each rank gets the sum of the bucket's
 *                           intersection with its partition, in place at
 *                           the same flat offsets (the rest of the bucket is
 *                           left as the rank's own unreduced values)
 *
 * Bucket boundaries depend only on the layout and the cap, so every rank
 * issues the same collectives in the same order, and the arithmetic is the
 * same with overlap on and off (the jobs are the same; only the thread that
 * runs them differs): losses are bit-identical.
 *
 * Buckets are cut from the top: when [cursor, hi) reaches cap elements,
 * [hi - cap, hi) is submitted (a module larger than cap gives several); the
 * remainder goes when module 0 finished (cursor reaches 0). A ring of 64 job
 * slots bounds what is in flight: submitting into a slot still in flight
 * waits for it first (back-pressure when the link is far slower than
 * backward). */
#ifndef DS_ZERO_GRAD_REDUCE_H
#define DS_ZERO_GRAD_REDUCE_H

#include "engine/comm/comm_worker.h"
#include "zero/grad_sparse.h"
#include "zero/replica.h"
#include "zero/zero.h"

typedef enum ds_grad_reduce_kind {
    DS_GRAD_ALL_REDUCE = 0,
    DS_GRAD_REDUCE_SCATTER,
} ds_grad_reduce_kind;

typedef struct ds_grad_reduce ds_grad_reduce;

/* grads: the full replica (gt, f->padded elements), owned by the strategy.
 * cap: reduce_bucket_size in elements (at least 1). per_module: a bucket
 * never spans two modules (contiguous_gradients false). threaded:
 * overlap_comm (a communication thread owns comm until destroy). */
ds_status ds_grad_reduce_create(ds_backend *be, ds_comm *comm, const ds_flat *f, ds_dtype gt,
                                void *grads, ds_grad_reduce_kind kind, int64_t cap,
                                bool per_module, bool threaded, ds_grad_reduce **out);
/* Joins the communication thread. */
void ds_grad_reduce_destroy(ds_grad_reduce *g);

/* The communication worker the buckets go through, for the strategy's
 * other collectives of a step (zero/param_gather.h): one FIFO keeps every
 * rank's collectives in the same order. */
ds_comm_worker *ds_grad_reduce_worker(ds_grad_reduce *g);

/* sparse_gradients: from now on the row_sparse_grad parameters (untied) go
 * through zero/grad_sparse.h's row exchange instead of the dense buckets
 * (no-op for a model without any). Call once, before the first backward. */
ds_status ds_grad_reduce_sparse(ds_grad_reduce *g);

/* The gradients of flat range [begin, end) (a module's span, or the part of
 * it zero.h's grad_done hands over) are final; module_end: the range
 * reaches the module's begin. Ranges come in reverse flat order, each
 * ending where the previous began; one that does not is a second backward
 * into gradients already reduced: DS_ERR_INVALID_ARG (the sums would count
 * the first backward world times). */
ds_status ds_grad_reduce_ready(ds_grad_reduce *g, int64_t begin, int64_t end, bool module_end);

/* Reduce whatever was not reduced yet (all of [0, used) when no backward
 * marked anything final) and wait for every bucket. Idempotent until reset. */
ds_status ds_grad_reduce_finish(ds_grad_reduce *g);

/* Whether any bucket was submitted since the last reset: the replica then
 * holds reduced values (after finish), not this rank's own gradients. */
bool ds_grad_reduce_started(const ds_grad_reduce *g);

/* New accumulation: nothing reduced. Waits for anything in flight. */
ds_status ds_grad_reduce_reset(ds_grad_reduce *g);

/* The strategy slots of a replica reduced during the last backward (stages
 * 0 and 1): [lo, hi) of module m's span is final (in the last micro-batch:
 * reduce it now; zero.h, grad_done), and a new accumulation. */
ds_status ds_grad_reduce_grad_done(ds_grad_reduce *g, ds_replica *rep, bool final_backward, int m,
                                   int64_t lo, int64_t hi);
ds_status ds_grad_reduce_zero_grad(ds_grad_reduce *g, ds_replica *rep);

#endif /* DS_ZERO_GRAD_REDUCE_H */
