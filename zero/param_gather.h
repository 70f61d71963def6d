/* Stages 1 and 2: the updated working parameters' all-gather, behind the
 * next forward.
 *
 * After the optimizer step each rank holds its partition of the new
 * parameters, and every module needs the whole of its span before it runs.
 * One all-gather at the step boundary leaves the forward waiting for all of
 * it and the link idle while the forward runs: over a 1 Gbit/s link
 * BERT-mini's 17.5 MB per rank is about 0.15 s, half a step.
 *
 * So the flat space is cut into chunks of allgather_bucket_size elements
 * (DeepSpeed's key: "elements all-gathered at a time"), each an
 * all-gatherv of the chunk's intersection with the partitions, in place.
 * At the boundary every chunk is queued, in flat (forward) order, on the
 * communication thread that also carries the gradient buckets; module m's
 * fetch waits only for the chunks that start below m's end, so the later
 * chunks land while the earlier modules compute. Tied parameters belong to
 * earlier modules, whose chunks are waited for first.
 *
 * Every rank queues the same chunks in the same order, and a gather only
 * copies: the parameters, and so the losses, are bit-identical to one
 * blocking gather. Without overlap_comm the worker runs each chunk as it is
 * queued: the whole gather happens at the boundary, as before.
 *
 * Whatever else reads or writes the working parameters (the next update,
 * which writes this rank's block, the chunks' send data; get/set_param;
 * state_io; sync_params) first waits for every chunk (ds_param_gather_wait
 * with the end of the space). */
#ifndef DS_ZERO_PARAM_GATHER_H
#define DS_ZERO_PARAM_GATHER_H

#include "engine/comm/comm_worker.h"
#include "zero/zero.h"

typedef struct ds_param_gather ds_param_gather;

/* params: the working replica (pt, f->padded elements), owned by the
 * strategy; w: the communication worker (threaded with overlap_comm); cap:
 * allgather_bucket_size in elements; skip: n_skip flat ranges [begin, end),
 * ascending, that the chunks leave out (the tables param_rows.h gathers by
 * rows). Job memory is taken here, tagged in the accountant: nothing is
 * allocated in a step. */
ds_status ds_param_gather_create(ds_backend *be, ds_comm *comm, ds_comm_worker *w,
                                 const ds_flat *f, void *params, ds_dtype pt, int64_t cap,
                                 const int64_t (*skip)[2], int n_skip, ds_param_gather **out);
/* Frees the job memory: destroy the worker first (it joins its thread, so
 * no queued chunk still points here). */
void ds_param_gather_destroy(ds_param_gather *g);

/* Queue every chunk. Waits for the previous round's chunks first. */
ds_status ds_param_gather_start(ds_param_gather *g);

/* Wait for the queued chunks that start below flat element `end` (all of
 * them for f->padded); the first failure's status and message. */
ds_status ds_param_gather_wait(ds_param_gather *g, int64_t end);

#endif /* DS_ZERO_PARAM_GATHER_H */
