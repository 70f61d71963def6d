/* Full replicas of the working parameters and gradients, as stages 0 and 1
 * keep them: every rank holds both over the whole flat space.
 *
 * Under fp32 the modules read parameters and accumulate gradients directly in
 * the flat buffers. Under fp16/bf16 the parameters (and, unless
 * communication_data_type is fp32, the gradients) are stored in the
 * low-precision type: a module's parameters are widened into an fp32 staging
 * area before use and its gradients computed in an fp32 staging area, then
 * added into the stored gradient (rounded once per module and micro-batch, as
 * a low-precision backward would). */
#ifndef DS_ZERO_REPLICA_H
#define DS_ZERO_REPLICA_H

#include "zero/param_gather.h"
#include "zero/param_rows.h"
#include "zero/shard.h"
#include "zero/zero.h"

typedef struct ds_replica {
    ds_backend *be;
    const ds_flat *flat;
    ds_dtype pt, gt;
    void *params;          /* [padded] pt */
    void *grads;           /* [padded] gt; NULL when the stage keeps only a partition */
    bool grads_lent;       /* grads is the stage's buffer (ds_replica_init's grads_at) */
    float *pstage, *gstage;/* fp32 staging [max_span], when pt / gt != F32 */
    int64_t max_span;
    float ***ptrs, ***gptrs; /* per module: parameter / gradient slot pointers */
    float ***tptrs;        /* per module: its tied parameters (NULL without ties) */
    float **tstage;        /* [n_tied_params] fp32 widened copies, when pt != F32 */
} ds_replica;

/* full_grads: keep a full gradient replica (stages 0, 1). Without it
 * (stage 2) gradients are computed in the fp32 staging area only and the
 * strategy moves them out in grad_done, unless grads_at is given: a buffer
 * of the stage's, [padded] gt, that the modules accumulate into as into a
 * full replica (stage 2 at one rank, whose partition is the whole flat
 * space; not freed here). */
ds_status ds_replica_init(ds_replica *r, const ds_zero_desc *d, bool full_grads, void *grads_at);
void ds_replica_free(ds_replica *r);

/* Draw every parameter's initial values (ds_zero_init_range) into the
 * replica, locally, without communication. Under mixed precision the values
 * pass through the fp32 staging area and, when `master` is given, the slice
 * [lo, lo + n) of the flat space is also kept there in fp32 (the master
 * partition of stage 1, or the whole master of stage 0 with lo 0). */
ds_status ds_replica_init_values(ds_replica *r, uint64_t seed, float *master, int64_t lo,
                                 int64_t n);

/* Module m's parameters (*out) and tied parameters (*tied), fp32. */
ds_status ds_replica_fetch(ds_replica *r, int m, float ***out, float ***tied);
ds_status ds_replica_grad_slots(ds_replica *r, int m, float ***out);
/* [lo, hi) of module m's span is final (zero.h, grad_done): under mixed
 * precision, add it from the staging area into the replica. */
ds_status ds_replica_grad_done(ds_replica *r, int m, int64_t lo, int64_t hi);
ds_status ds_replica_zero_grad(ds_replica *r);
/* Full fp32 values of parameter i to / from the host for stages 1 and 2:
 * from the master partitions when `master` is given (mixed precision; a
 * collective assembling the pieces), else from the fp32 replica itself.
 * set_weights also refreshes the replica's low-precision copy. */
ds_status ds_replica_get_weights(ds_replica *r, ds_comm *comm, const float *master, int i,
                                 float *host);
ds_status ds_replica_set_weights(ds_replica *r, ds_comm *comm, float *master, int i,
                                 const float *host);
/* Local (unreduced) gradient of parameter i as fp32 into host. */
ds_status ds_replica_grad_to_host(ds_replica *r, int i, float *host);

/* ---- strategy slots shared by the replica stages ----
 * They require the strategy's impl struct to BEGIN with a ds_replica
 * (stage 0) or a ds_replica_shard (stages 1 and 2). */
ds_status ds_replica_op_fetch(ds_zero *z, int m, float ***out, float ***tied);
ds_status ds_replica_op_release(ds_zero *z, int m); /* resident: nothing to do */
ds_status ds_replica_op_grad_slots(ds_zero *z, int m, float ***out);
ds_status ds_replica_op_zero_grad(ds_zero *z);

/* Stages 1 and 2: a replica of the working parameters plus an optimizer
 * shard (zero/shard.h). */
typedef struct ds_replica_shard {
    ds_replica rep;
    ds_shard sh;
    ds_comm *comm;
    ds_param_gather *pg; /* the updated parameters' gather behind the next forward
                            (ds_replica_shard_gather_on, which the stages call) */
    ds_param_rows *rows; /* the tables gathered by the rows a batch reads, or NULL */
} ds_replica_shard;

ds_status ds_replica_shard_init(ds_replica_shard *rs, const ds_zero_desc *d, bool full_grads,
                                void *grads_at);
/* Destroy the stage's communication worker first (param_gather.h). */
void ds_replica_shard_free(ds_replica_shard *rs);
/* Gather the updated parameters in allgather_bucket_size chunks through w
 * (zero/param_gather.h), each module waiting in fetch for its own, and of
 * the tables that declare rows_read_by only the rows the next micro-batch
 * reads (zero/param_rows.h). */
ds_status ds_replica_shard_gather_on(ds_replica_shard *rs, const ds_zero_desc *d,
                                     ds_comm_worker *w);
/* Update the partition from its summed gradients (grads: partition, gt) and
 * all-gather the working parameters (queued behind the next forward with
 * ds_replica_shard_gather_on). */
ds_status ds_replica_shard_update(ds_replica_shard *rs, const ds_optim_step *step,
                                  const void *grads, float grad_mult);
ds_status ds_replica_shard_op_fetch(ds_zero *z, int m, float ***out, float ***tied);
ds_status ds_replica_shard_op_begin_forward(ds_zero *z, const ds_batch *host,
                                            const ds_tensor_desc *inputs, int n_inputs);
ds_status ds_replica_shard_op_get_param(ds_zero *z, int i, float *host);
ds_status ds_replica_shard_op_set_param(ds_zero *z, int i, const float *host);
ds_status ds_replica_shard_op_state_io(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi,
                                       float *host, bool write);
ds_status ds_replica_shard_op_sync_params(ds_zero *z);
ds_status ds_replica_shard_op_revive(ds_zero *z);

#endif /* DS_ZERO_REPLICA_H */
