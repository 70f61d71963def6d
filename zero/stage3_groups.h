/* Stage 3's side of hpZ and MiCS (zero/groups.h): the secondary copy, the
 * hierarchical gather and the all-reduce across replica groups, kept apart
 * from zero/stage3.c's gather slots. Memory: the secondary piece (hpZ,
 * DS_MEM_PARAMS) and the packed pieces of the hierarchical gather
 * (DS_MEM_BUFFERS), both on the device, both replayed by zero/estimate.c. */
#ifndef DS_ZERO_STAGE3_GROUPS_H
#define DS_ZERO_STAGE3_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm_worker.h"
#include "zero/groups.h"

typedef struct ds_s3_groups {
    ds_zero_groups g;
    ds_backend *be;
    ds_dtype pt;       /* working parameters */
    ds_comm *part;     /* the ranks the partition is cut over: world or shard group */
    int n_modules;
    /* hpZ */
    ds_flat hflat;     /* the flat space cut over the secondary group */
    void *sec;         /* [hflat.part] pt: this rank's secondary piece, NULL without hpZ */
    bool *sec_valid;   /* [n_modules]: the module's secondary pieces are current */
    /* mics_hierarchical_params_gather */
    bool qwz;          /* zero_quantized_weights: the pieces are int8 records */
    void *hbuf;        /* [hbuf_bytes]: this place's pieces of every host, packed */
    size_t hbuf_bytes; /* a span of pt, or its records under qwZ, whichever is larger */
    size_t *hcounts;   /* [hosts of the group] */
    /* MiCS: the partition's gradients are summed across the replica groups */
    bool repl_done;
    struct ds_grad_sparse *rsparse; /* sparse_gradients: that sum's tables as rows, else NULL */
} ds_s3_groups;

/* The groups cfg asks for (collective over world, zero/groups.h); x->part
 * is then the communicator the partition is cut over (MiCS's shard group,
 * else world). On failure, as after success, ds_s3_groups_free. */
ds_status ds_s3_groups_create(ds_s3_groups *x, const ds_config *cfg, ds_comm *world,
                              ds_backend *be, ds_dtype pt);
/* The buffers the groups need: pflat is the partition's view of the flat
 * space, max_span its largest module span. */
ds_status ds_s3_groups_alloc(ds_s3_groups *x, const ds_flat *pflat, int64_t max_span);
/* After the communication thread is gone (its jobs used the groups). */
void ds_s3_groups_free(ds_s3_groups *x);

/* hpZ: whether module m's span can be gathered from the secondary copy. */
static inline bool ds_s3_from_secondary(const ds_s3_groups *x, int m) {
    return x->sec && x->sec_valid[m];
}
/* hpZ: this rank's secondary piece of flat range [begin, begin + n...)
 * (its counts[rank] elements, starting at begin or at the piece's start)
 * into dst. */
ds_status ds_s3_secondary_piece(ds_s3_groups *x, int64_t begin, void *dst, size_t n);
/* hpZ: where this rank's secondary piece of a range starting at begin
 * starts (as ds_s3_secondary_piece reads it): what qwZ quantizes. */
const void *ds_s3_secondary_at(const ds_s3_groups *x, int64_t begin);
/* hpZ: module m's span [begin, begin + len), gathered into `span` (dtype
 * st: the working dtype, or fp32 where qwZ dequantized it), gives this
 * rank's secondary piece of it, in the working dtype; m's pieces are then
 * current. */
ds_status ds_s3_fill_secondary(ds_s3_groups *x, int m, const void *span, ds_dtype st,
                               int64_t begin, int64_t len);
/* The parameters changed: no secondary piece is current. */
void ds_s3_invalidate(ds_s3_groups *x);

/* mics_hierarchical_params_gather (on the communication thread): buf holds
 * a span cut over the shard group by counts (elements of t), this rank's
 * piece in place; gathered first across hosts among the group's ranks at
 * this rank's place on each host (one piece per host crosses the link),
 * then inside each host, one gather per host's blocks (DeepSpeed's
 * _hierarchical_all_gather_params). It only moves the pieces, so under qwZ
 * it takes the int8 records as they are (t DS_U8, counts their bytes): the
 * same bytes arrive as the flat gather's, and each crosses the link once. */
ds_status ds_s3_hier_gather(ds_s3_groups *x, void *buf, const size_t *counts, ds_dtype t);
/* Bytes of the hierarchical gather's packed buffer for spans of at most
 * max_span elements of es bytes over a shard group of `shard` ranks, or
 * their int8 records under qwZ (tiny pieces' records outgrow them): what
 * ds_s3_groups_alloc allocates, zero/estimate.c counts it. */
size_t ds_s3_hier_buffer_bytes(size_t max_span, size_t es, bool qwz, int shard);

/* MiCS at the boundary: the partition's gradients (n elements of gt, the
 * shard group's sum) all-reduced across the replica groups into the
 * world's sum (DeepSpeed's allreduce_mics_shard_grads), once per step, on
 * the communication thread w. Nothing without replicas. */
ds_status ds_s3_sum_replicas(ds_s3_groups *x, ds_comm_worker *w, void *grads, size_t n,
                             ds_dtype gt);
/* sparse_gradients under MiCS with replicas: from now on that all-reduce
 * sends the row_sparse_grad tables' elements of the partition (grads, of
 * pflat's partition `part`, gt) as the rows' records over the replica group
 * (zero/grad_sparse.h DS_SPARSE_REPLICAS), the rest dense around them, so
 * that the link between hosts, which a shard group of one host leaves to
 * this all-reduce, carries rows too. Nothing without replicas. */
ds_status ds_s3_sparse_replicas(ds_s3_groups *x, const ds_flat *pflat, int part, ds_dtype gt,
                                void *grads);
/* MiCS before that all-reduce: a gathered fp32 gradient (host, n elements)
 * summed across the replicas, the partition left alone (a later
 * micro-batch still adds into it). */
ds_status ds_s3_replica_host_sum(ds_s3_groups *x, float *host, int64_t n, const char *name);

#endif /* DS_ZERO_STAGE3_GROUPS_H */
