/* Fault injection for tests: named points in the checkpoint code where a
 * test can make a rank kill itself, armed through the environment.
 *
 *   DS_FAULT_INJECT=ckpt:after_shard_write:rank=1 mpirun -np 2 prog ...
 *
 * makes rank 1 raise SIGKILL on itself when it reaches the point
 * "ckpt:after_shard_write" (a process killed by the kernel, as an OOM kill or
 * a lost node looks: no handler, no flush, no unwinding). Several specs may
 * be given separated by ','; ":rank=R" may be left out to match every rank.
 * Unset (the normal case) the points cost one getenv each.
 *
 * A spec starting with "error:" makes a point fail instead, where the code
 * asks with ds_fault_error (a full disk, a quota, a lost mount, as a
 * function returning DS_ERR_IO sees them):
 *
 *   DS_FAULT_INJECT=error:ckpt:write_meta:rank=0   rank 0's meta.json write fails
 *
 * and ":nth=N" after it makes it fail only the N-th time this process asks
 * (a disk that fills at the 4th swap write, then has room again):
 *
 *   DS_FAULT_INJECT=error:nvme:swap_write:rank=1:nth=4
 *
 * ":restart=K" on any spec limits it to the K-th start of a job that
 * engine-run --max-restarts starts again (DS_RESTART_COUNT; unset is 0):
 *
 *   DS_FAULT_INJECT=train:step6:rank=1:restart=0   killed in the first start only
 *
 * and one starting with "term:" makes a kill point raise SIGTERM and go on
 * (a preemption arriving in the middle of a save):
 *
 *   DS_FAULT_INJECT=term:ckpt:after_shard_write:rank=1
 *
 * and one starting with "stall:" makes a kill point compute forever instead
 * (a rank stuck in a long computation: alive, busy, in no collective):
 *
 *   DS_FAULT_INJECT=stall:train:step12:rank=1   (the trainers' step 12)
 *
 * This is test machinery and the only code in the library that ends the
 * process; it never runs unless a test sets the variable. */
#ifndef DS_IO_FAULT_H
#define DS_IO_FAULT_H

#include <stdbool.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_FAULT_ENV "DS_FAULT_INJECT"

/* Whether `spec` (the variable's syntax) arms `site` for `rank`. */
bool ds_fault_matches(const char *spec, const char *site, int rank);

/* Raise SIGKILL on this process when DS_FAULT_INJECT arms `site` for
 * `rank` (SIGTERM, then return, for a "term:" spec; spin until killed for a
 * "stall:" spec); otherwise return. */
void ds_fault_point(const char *site, int rank);

/* DS_ERR_IO ("SITE: failure injected by DS_FAULT_INJECT") when an "error:"
 * spec arms `site` for `rank`; otherwise DS_OK. */
ds_status ds_fault_error(const char *site, int rank);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_FAULT_H */
