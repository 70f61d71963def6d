/* Stages 1 and 2: of a table whose forward reads only the rows a batch
 * names (ds_param_desc.rows_read_by: an embedding's lookup), gather after
 * each update only the rows the next micro-batch reads.
 *
 * Why: the updated parameters' gather behind the next forward
 * (param_gather.h) cannot hide the first module's parameters, and an NLP
 * model's first module is its word table, often most of the model
 * (BERT-mini: 5.4M of 8.8M parameters, 62%). The optimizer changes every
 * row of it at every step (Adam's moments, weight decay), but a
 * micro-batch of 16 x 128 tokens reads about a thousand of its 21,128
 * rows. So the table is left out of the dense chunks, and at the first
 * forward after the update every rank brings only the rows it reads.
 *
 * The exchange is one job on the communication thread, queued at the
 * update AHEAD of the dense chunks, gated (comm_worker.h): it waits for the
 * next forward to post its batch, then runs, and the dense chunks follow
 * behind the forward. Three collectives, the same on every rank: the
 * number of rows each rank asks for (-1: the whole table), their indices,
 * and the union of all ranks' rows, each rank contributing those that
 * reach into its partition. Past break-even (the blocks would fill the
 * packing buffer, a partition's worth of the table) or when any rank asks
 * for the whole table, every rank all-gathers the whole table instead,
 * decided alike from the counts.
 *
 * Until a row comes, this rank's copy of it is not the updated value, so
 * the update fills every row piece this rank does not own with NaN: a
 * module that reads a row its batch does not name reads NaN, its loss turns
 * non-finite and the engine says so, never a silently stale row.
 * Everything else that reads the parameters (an evaluation, a checkpoint,
 * ds_get_param) asks for the whole table first.
 *
 * The rows travel whole: each rank packs the union's rows that reach into
 * its partition with the backend's rows_gather (+0.0 outside the
 * partition) and unpacks the other ranks' blocks with rows_scatter, each
 * into its sender's partition only, so a row that a partition boundary cuts
 * comes in two parts from two ranks. The counts, the indices and the rows
 * are the backend's memory, so the same code runs on cpu and on cuda (NCCL
 * or the staged path); the union and the blocks' lists are planned on the
 * host. With more than one rank, for a table no other module ties to (a
 * tied output projection reads every row). */
#ifndef DS_ZERO_PARAM_ROWS_H
#define DS_ZERO_PARAM_ROWS_H

#include "engine/comm/comm_worker.h"
#include "zero/zero.h"

typedef struct ds_param_rows ds_param_rows;

/* *out NULL when no parameter qualifies (nothing to do). params: the
 * working replica (pt, f->padded elements). */
ds_status ds_param_rows_create(ds_backend *be, ds_comm *comm, ds_comm_worker *w,
                               const ds_flat *f, void *params, ds_dtype pt, ds_param_rows **out);
/* Bytes of the backend's memory the tables' buffers take (the memory
 * estimate): the packing buffer, a partition's worth of the table; the
 * counts; every rank's asked rows, 4 bytes a row of the table per rank.
 * The host's row lists are host memory of the strategy, a few bytes a row. */
uint64_t ds_param_rows_bytes(const ds_flat *f, ds_dtype pt, int world);
/* Destroy the worker first (its thread may still run the job). */
void ds_param_rows_destroy(ds_param_rows *r);

/* The tables' flat ranges, which the dense gather leaves out: up to cap of
 * them into ranges[][2] (begin, end), in flat order; returns how many (with
 * ranges NULL: how many tables; 0 for r NULL). */
int ds_param_rows_ranges(const ds_param_rows *r, int64_t (*ranges)[2], int cap);

/* After the update, before the dense chunks are queued: fill this rank's
 * stale pieces with NaN and queue the gated exchange. Waits for the
 * previous one first. */
ds_status ds_param_rows_start(ds_param_rows *r);

/* The next forward's batch (host memory; NULL: every table whole, for an
 * evaluation, a checkpoint, ds_get_param), with the model's input
 * descriptions to size the named tensors. The first post after start opens
 * the gated exchange; a later one (the next micro-batch of the same step:
 * every rank runs as many) queues an exchange of the rows still missing;
 * none once the tables were gathered whole. Before any update: nothing. */
ds_status ds_param_rows_post(ds_param_rows *r, const ds_batch *host, const ds_tensor_desc *inputs,
                             int n_inputs);

/* Wait for the exchange (a forced one gathers the tables whole). */
ds_status ds_param_rows_wait(ds_param_rows *r);

/* Whether module m owns one of the tables (its fetch waits for the rows). */
bool ds_param_rows_in_module(const ds_param_rows *r, int m);

/* Stage 3, which keeps no replica (params NULL at create): the same
 * exchange into a module's gathered span.
 *   ds_param_rows_plan    at the start of a forward (the main thread): the
 *                         rows `host` names that this rank's partition lacks
 *                         (host NULL: the tables whole, an evaluation);
 *   ds_param_rows_nan     the tables of module m in `win` (a buffer holding
 *                         flat elements from win_lo on) NaN outside this
 *                         rank's partition, before its piece goes in;
 *   ds_param_rows_window  on the communication thread, this rank's piece
 *                         in place: the planned rows of module m's tables
 *                         into win (flat [win_lo, win_hi)), packed from
 *                         `own`, this rank's partition. Collective. */
ds_status ds_param_rows_plan(ds_param_rows *r, const ds_batch *host, const ds_tensor_desc *inputs,
                             int n_inputs);
ds_status ds_param_rows_nan(ds_param_rows *r, int m, void *win, int64_t win_lo);
ds_status ds_param_rows_window(ds_param_rows *r, int m, void *win, int64_t win_lo,
                               int64_t win_hi, const void *own);

#endif /* DS_ZERO_PARAM_ROWS_H */
