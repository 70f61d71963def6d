/* Row-sparse gradient exchange: DeepSpeed's "sparse_gradients" (stages 0-3).
 *
 * A parameter flagged row_sparse_grad (engine/core/module.h: an embedding
 * table, rows a step does not touch keep an exactly zero gradient) is left
 * out of the dense gradient buckets (zero/grad_reduce.h at stages 0 and 1,
 * zero/grad_buckets.h at stages 2 and 3). When its bucket comes, one job on
 * the communication thread (inline without overlap_comm)
 *
 *   1. scans this rank's gradient of it (stages 0-1: accumulated over the
 *      step's micro-batches; stages 2-3: this micro-batch's, which they
 *      reduce every micro-batch) for rows with any nonzero bit (exact: a
 *      row of +0.0 adds nothing to any sum),
 *   2. all-gathers the ranks' row counts (one int32 each),
 *   3. all-gathers the rows with uneven blocks, rank order, each rank's
 *      block its int32 row indices, then its rows in the gradient type
 *      (4 + row bytes per row, as records of index and row would be; the
 *      indices together so that one copy brings them to the host, where
 *      the sums are planned),
 *   4. sums every rank's records of a row, in rank order (the ranks' blocks
 *      are ascending: a merge, one row at a time), into the gradient: at
 *      stage 0 every row of the replica; at stage 1 (reduce-scatter) only
 *      the elements inside this rank's partition, the rest keeping the
 *      rank's own values as the dense reduce-scatter leaves them; at stages
 *      2-3 the row's sum is ADDED to the partition's elements, as the dense
 *      path adds its reduce-scatter's block.
 *
 * Stage 3: the same buckets as stage 2, so the same exchange. hpZ and qwZ
 * change only parameter gathers. Under qgZ the rest of each bucket stays
 * quantized while the rows go as exact records (zero/grad_buckets.c); a
 * step past break-even reduce-scatters the table in full precision (below),
 * as its records would have been. Under MiCS the exchange runs over the
 * shard group, as the dense reduce-scatter does (its ranks, its partition);
 * then the all-reduce of the partition across the replica groups (the one
 * that crosses hosts when a shard group is a host) sends the partition's
 * slice of each table as records too (DS_SPARSE_REPLICAS: rows clipped to
 * the partition, scanned there, their elements outside it zero in the
 * record and never stored), the rest of the partition dense around them.
 * Both levels are sums in rank order with the start rule below, so with 2
 * ranks per shard group and 2 replica groups the bits are the dense path's
 * ((a + b) + (c + d) either way).
 * offload_optimizer / offload_param read the partition's gradient after
 * the buckets have finished, whichever way it was summed.
 *
 * Traffic per step and rank at 2 ranks: 4 bytes (the count) + n_r x
 * (row bytes + 4) where n_r is this rank's nonzero rows; at world n the
 * all-gather ring forwards every block but its successor's, (n - 1) blocks.
 *
 * Fallback to dense, decided from the gathered counts, so on every rank
 * alike: when the ranks' nonzero rows TOGETHER exceed the table's rows, the
 * parameter is all-reduced (stage 0) or reduce-scattered (stages 1, 2)
 * densely that step. At that point the records would be about half a dense
 * all-reduce's bytes (a ring all-reduce sends 2(n-1)/n of the buffer, the
 * gather (n-1)/n of the records); the bound also sizes the one record buffer
 * (table rows x (row + 4) bytes, allocated at creation). A parameter that
 * another module ties to (GPT-2's wte, also lm_head) is never treated as
 * sparse: the tied use's gradient is dense in every row.
 *
 * Sums: each addition in fp32, rounded to the gradient type after each (as
 * the ring rounds once per hop), starting from -0.0 (the identity of IEEE
 * addition) where every rank sent the row and from +0.0 otherwise (the
 * silent ranks' +0.0 is part of the dense sum: -0.0 + +0.0 is +0.0). At 2
 * ranks the result is therefore bit for bit the dense all-reduce's (one
 * addition a + b either way, commutative). At n > 2 ranks the dense ring
 * adds in a rotated order per chunk and this in rank order; both are
 * recursive sums of n terms, each within (n-1) u sum_i |g_i| of the exact
 * sum (u the unit roundoff of the gradient type), so they differ by at most
 * 2 (n-1) u sum_i |g_i| per element. */
#ifndef DS_ZERO_GRAD_SPARSE_H
#define DS_ZERO_GRAD_SPARSE_H

#include <stdbool.h>

#include "engine/comm/comm_worker.h"
#include "zero/zero.h"

typedef struct ds_grad_sparse ds_grad_sparse;

/* Where "sparse_gradients": true applies: stages 0-3 on either backend
 * (the scan, the gather and the sums are the backend's rows slots,
 * engine/backend/rows_math.h), without OneBitAdam / ZeroOneAdam (their
 * compressed steps exchange momentum, not gradients). False with the reason
 * in why (a sentence for a warning) otherwise; true with why "" when the key
 * is false or it applies. */
bool ds_grad_sparse_applies(const ds_config *c, char *why, size_t cap);

typedef enum ds_grad_sparse_kind {
    DS_SPARSE_REPLICA_ALL = 0, /* stage 0: grads is the replica; every row summed in place */
    DS_SPARSE_REPLICA_PART,    /* stage 1: the replica; only this rank's partition summed */
    DS_SPARSE_PARTITION_ADD,   /* stages 2-3: grads is the partition (f->part elements); the
                                  sums are added to it (ds_grad_sparse_reduce_add) */
    DS_SPARSE_REPLICAS,        /* MiCS: grads is the partition holding its shard group's
                                  sums; comm the replica group (the ranks holding the same
                                  partition); each table element of the partition becomes
                                  the sum over the replicas (ds_grad_sparse_replicas) */
} ds_grad_sparse_kind;

/* The exchange of every untied row_sparse_grad parameter of f; *out stays
 * NULL when f has none. grads: see kind (gt). Allocates every buffer now. */
ds_status ds_grad_sparse_create(ds_backend *be, ds_comm *comm, const ds_flat *f, ds_dtype gt,
                                void *grads, ds_grad_sparse_kind kind, ds_grad_sparse **out);
/* DS_SPARSE_REPLICAS over comm (the replica group) for the partition of
 * index `part` of f (the shard group's view: the rank in the shard group). */
ds_status ds_grad_sparse_create_replicas(ds_backend *be, ds_comm *comm, const ds_flat *f,
                                         int part, ds_dtype gt, void *grads,
                                         ds_grad_sparse **out);
void ds_grad_sparse_destroy(ds_grad_sparse *gs);

/* Bytes ds_grad_sparse_create allocates for f at `world` ranks with
 * gradients of type gt, in host memory (host) or the backend's (the memory
 * estimate counts both, zero/estimate.h). Per sparse parameter of R rows:
 * the backend's R x (4 + row bytes) of records, R bytes of flags, the plan
 * (R x 21 + 8 bytes) and (1 + world) x 4 of counts; host R x 9 (flags, this
 * rank's and every rank's row lists), the plan again and world x (12 +
 * sizeof(size_t)). 0 without any; nothing is allocated at one rank
 * (zero/grad_reduce.h). */
uint64_t ds_grad_sparse_bytes(const ds_flat *f, ds_dtype gt, int world, bool host);

/* The highest sparse parameter whose range [*a, *b) overlaps [lo, hi), or
 * false when none does. *which names it for submit. */
bool ds_grad_sparse_overlap(const ds_grad_sparse *gs, int64_t lo, int64_t hi, int64_t *a,
                            int64_t *b, int *which);
/* REPLICA kinds: queue the exchange of parameter `which` on w (its gradient
 * must be final). */
ds_status ds_grad_sparse_submit(ds_grad_sparse *gs, ds_comm_worker *w, int which);
/* PARTITION_ADD: exchange parameter `which`, whose gradient of this
 * micro-batch is at src (gt; used as scratch), and add the sums into the
 * partition, now, on the calling thread (a bucket's job on the
 * communication thread, zero/grad_buckets.c). Collective. */
ds_status ds_grad_sparse_reduce_add(ds_grad_sparse *gs, int which, void *src);
/* DS_SPARSE_REPLICAS: the whole partition (grads) summed across the
 * replicas, now, on the calling thread (a job on the
 * communication thread): the tables' elements in it by their rows' records,
 * the rest by all-reduces, in descending flat order. Collective over the
 * replica group. */
ds_status ds_grad_sparse_replicas(ds_grad_sparse *gs);
/* Wait for every queued exchange; the first failure. */
ds_status ds_grad_sparse_wait(ds_grad_sparse *gs, ds_comm_worker *w);

#endif /* DS_ZERO_GRAD_SPARSE_H */
