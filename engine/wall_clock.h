/* wall_clock_breakdown: where a step's time goes, as DeepSpeed's timers
 * print it.
 *
 *   "wall_clock_breakdown": true        in ds_config.json
 *
 * The engine then times forward, backward, the end of the gradients'
 * reduction at the step (what backward did not hide, with the ranks'
 * agreement on the step: DeepSpeed's backward_allreduce) and the optimizer
 * step itself, and every
 * steps_per_print steps rank 0 prints their means per step over the steps
 * since the last print, with each kind of collective's calls, bytes, time
 * and achieved bus bandwidth, and the communication time that was not
 * hidden behind computation:
 *
 *   [zero-engine] time (ms) | fwd: 41.20 | bwd: 80.11 | allreduce: 3.40 | step: 6.47 |
 *                 comm_wait: 3.02
 *                 (per step, mean of steps 11-20)
 *   [zero-engine] comm per step | reduce_scatter: 24 calls, 17.52 MB, 6.10 ms,
 *                 busbw 1.44 GB/s | ... | inside host 17.52 MB, across hosts 0 B
 *
 * (one line each). A program reads the same numbers after a step with
 * ds_wall_clock_last (the bundled trainers write them to --metrics). With
 * the key off nothing is timed (one branch per call) and
 * ds_wall_clock_last says so.
 *
 * Bus bandwidth is nccl-tests' (ds_coll_busbw_factor): the operation's size
 * over its time, times 2(n-1)/n for all_reduce and (n-1)/n for
 * reduce_scatter and all_gather, so numbers compare across world sizes and
 * with the link's rate. The traffic counters themselves (ds_comm_report)
 * run whether or not the key is set. */
#ifndef DS_ENGINE_WALL_CLOCK_H
#define DS_ENGINE_WALL_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_wall_clock {
    int64_t from_step, to_step; /* the interval: steps from_step+1 .. to_step */
    /* milliseconds per optimizer step, means over the interval (forward and
     * backward summed over the step's micro-batches) */
    double fwd_ms, bwd_ms, step_ms;
    double allreduce_ms; /* the step's reduction and agreement, not in step_ms */
    double comm_wait_ms; /* blocked on communication (ds_comm_stats.wait_s) */
    /* per step, per kind of collective (ds_coll) */
    double calls[DS_COLL_COUNT];
    double bytes[DS_COLL_COUNT];       /* this rank sent */
    double bytes_intra[DS_COLL_COUNT]; /* ... to a rank on its host */
    double bytes_inter[DS_COLL_COUNT]; /* ... to a rank on another host */
    double ms[DS_COLL_COUNT];
    double busbw_gbps[DS_COLL_COUNT];  /* GB/s (1e9 bytes), 0 without calls */
    /* MPI's own collectives on metadata (the step's loss, agreements) */
    double host_calls, host_bytes, host_ms;
} ds_wall_clock;

/* The breakdown of the latest print interval. DS_ERR_INVALID_ARG when
 * wall_clock_breakdown is off; *ready false before the first interval
 * ends. Every rank has its own (rank 0 prints its own). */
ds_status ds_wall_clock_last(const engine_t *e, ds_wall_clock *out, bool *ready);

/* "17.52 MB", "512 B": bytes in decimal units, as link rates are quoted
 * (the prints above; the trainers' end-of-run report). */
void ds_format_bytes(char *buf, size_t cap, double bytes);

#ifdef __cplusplus
}
#endif
#endif /* DS_ENGINE_WALL_CLOCK_H */
