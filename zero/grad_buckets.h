/* Gradient buckets of stages 2 and 3: reduce-scatter during backward.
 *
 * Modules finish their backward in reverse flat order, and their spans are
 * adjacent in the flat space, so the gradients completed so far always form
 * one contiguous range growing downwards. A bucket collects that range (cast
 * to the communication type), parameter by parameter, until it holds
 * reduce_bucket_size elements, or adding the next parameter would pass that
 * (DeepSpeed's rule; so the cuts depend on the parameters alone, not on the
 * pieces a backward hands over); then it is reduce-scattered, each rank
 * receiving the sum of the bucket's intersection with its partition (a
 * reduce-scatter with uneven blocks: a bucket usually falls into one or two
 * partitions), which is added into the rank's gradient partition. Two bucket
 * buffers alternate, so the next bucket fills while the last one is on the
 * wire (overlap_comm runs the collectives on the communication thread).
 *
 * With contiguous_gradients false each module is reduced on its own, without
 * gathering several into one bucket. */
#ifndef DS_ZERO_GRAD_BUCKETS_H
#define DS_ZERO_GRAD_BUCKETS_H

#include "engine/comm/comm_worker.h"
#include "zero/zero.h"

typedef struct ds_grad_buckets ds_grad_buckets;

/* part_grads: the rank's gradient partition (gt, flat->part elements), owned
 * by the strategy. cap: reduce_bucket_size (raised to the largest module
 * span). */
ds_status ds_grad_buckets_create(ds_backend *be, ds_comm_worker *w, const ds_flat *f, int rank,
                                 ds_dtype gt, void *part_grads, int64_t cap, bool per_module,
                                 ds_grad_buckets **out);
void ds_grad_buckets_destroy(ds_grad_buckets *gb);
/* The communicator the reduce-scatters run on when it is not the worker's
 * own: MiCS's shard group (f and rank given at create are then that
 * group's). */
void ds_grad_buckets_set_comm(ds_grad_buckets *gb, ds_comm *c);
/* ZeRO++ qgZ (zero_quantized_gradients): from now on every bucket goes
 * through the blockwise int8 codec's quantized reduce-scatter over c
 * (engine/comm/codec_q8.h: each rank's block encoded, all-to-all in
 * rounds, decoded and summed in fp32 by its owner and added into its
 * partition) instead of the full-precision one; its scratch (one round's
 * records each way and two fp32 slices: about 4.5 MiB at 2 ranks, the same
 * for any model) is allocated here, once. Call before the first add; c is
 * the communicator the buckets run on. */
ds_status ds_grad_buckets_quantize(ds_grad_buckets *gb, ds_comm *c);
/* qgZ as DeepSpeed runs it (zero_engine.qgz_scheme "int4"): every bucket
 * through engine/comm/codec_q4.h's int4 reduce-scatter in two levels over
 * c cut into hosts of per_host consecutive ranks (collective over c: it
 * splits c). Its scratch is allocated here, once. Instead of
 * ds_grad_buckets_quantize, before the first add. */
ds_status ds_grad_buckets_quantize_int4(ds_grad_buckets *gb, ds_comm *c, int per_host);

/* sparse_gradients (zero/grad_sparse.h): from now on a bucket holding a
 * row_sparse_grad parameter sends that parameter as its nonzero rows
 * (all-gathered records, each rank adding the sums of its partition's
 * elements) and the rest of the bucket densely around it, in one job. c:
 * the communicator the buckets run on (stage 2: the world's; stage 3: the
 * partition's, MiCS's shard group). With qgZ (either scheme) the rest of a
 * bucket stays quantized, the rows go exact. Its buffers
 * are allocated here, once; nothing at one rank. Call before the first add. */
ds_status ds_grad_buckets_sparse(ds_grad_buckets *gb, ds_comm *c);

/* The fp32 gradients of flat range [begin, end) (a module's span, or the
 * part of it zero.h's grad_done hands over; src[0] = element begin) are
 * complete for this micro-batch; module_end: the range reaches the module's
 * begin. src may be reused when this returns. */
ds_status ds_grad_buckets_add(ds_grad_buckets *gb, int64_t begin, int64_t end, const float *src,
                              bool module_end);

/* Reduce what is pending and wait until every bucket has landed in the
 * partition. */
ds_status ds_grad_buckets_finish(ds_grad_buckets *gb);

/* Forget the gradients not sent yet: a micro-batch's backward leaves its
 * lowest bucket open for the next one to continue, and a zero_grad outside
 * the step's boundary (a load in the middle of an accumulation window, a
 * dropped window) must not let it reach the next step. What is on the wire
 * is waited for first (every rank submitted it); the caller zeroes the
 * partition after. Every rank calls it at the same point. */
ds_status ds_grad_buckets_reset(ds_grad_buckets *gb);

#endif /* DS_ZERO_GRAD_BUCKETS_H */
