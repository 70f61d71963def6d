/* The communication and wall-clock numbers the bundled trainers record
 * (issue 16's wall_clock_breakdown, issue 22's counters):
 *
 *   ds_comm_stats prev;
 *   ds_comm_report(e, &prev);                   // before the first step
 *   ... each step's --metrics line:
 *   tr_comm_fields(&l, e, &prev);               // "comm": {...}, prev updated
 *   tr_wall_clock_fields(&l, e, info.step);     // "wall_clock": {...} at a print step
 *   ... after the last step, every rank:
 *   tr_comm_report(e, "train_cls", &start, steps);
 *
 * "comm" holds, for each kind of collective this rank ran in the step (the
 * v-variants count with their kind): {"calls", "bytes" (this rank sent),
 * "inside_host", "across_hosts" (the same bytes split by where the
 * receiving rank runs), "seconds"}, "host" {"calls", "bytes", "seconds"}
 * for MPI's own collectives on metadata (the step's loss, agreements), and
 * "wait_s", the time the training thread was blocked on communication. "wall_clock" is ds_wall_clock_last's
 * interval (engine/wall_clock.h) on the step that closed it. */
#ifndef DS_TOOLS_RUN_STATS_H
#define DS_TOOLS_RUN_STATS_H

#include <stdint.h>

#include "engine/engine.h"
#include "tools/common/trainer.h"

void tr_comm_fields(tr_jline *l, const engine_t *e, ds_comm_stats *prev);
void tr_wall_clock_fields(tr_jline *l, const engine_t *e, int64_t step);

/* The end-of-run report: collective (every rank calls it; the counters are
 * summed over the ranks), rank 0 prints per kind the calls, bytes inside
 * and across hosts, and time, in total and per step, for `steps` steps
 * since `start` (this rank's counters then). */
ds_status tr_comm_report(engine_t *e, const char *prog, const ds_comm_stats *start,
                         int64_t steps);

#endif /* DS_TOOLS_RUN_STATS_H */
