/* A --metrics file at --resume: the lines a run wrote after the checkpoint
 * it resumes from go, so the resumed run's steps are not in it twice. */
#ifndef DS_TOOLS_METRICS_RESUME_H
#define DS_TOOLS_METRICS_RESUME_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

/* Rewrite `path` (a --metrics file, JSON lines) to what was written up to
 * optimizer step `step`, the one a run resumes from: path.tmp is written and
 * renamed over path, so the file is the old one or the new one whole. Each
 * line belongs to a step: {"step": N} and {"eval_step": N} their own N, a
 * {"retry": {"from_step": F}} to F (the steps after it come again), and any
 * other line ({"initial_eval"}, {"trainer"}, a last {"eval"}, the habits'
 * summary) to the step of the line before it (0 at the top). A line is kept
 * when its step is at most `step`, except:
 *   - {"eval_step": step} when `reevaluated`: the checkpoint of an
 *     evaluation step is saved before the evaluation, which the resumed run
 *     makes again (train_habits.h);
 *   - a "retry" whose from_step is `step` or later: nothing kept follows it;
 *   - a last line that is not a JSON object (cut by a kill; one elsewhere
 *     stays).
 * A link is followed (the file it names is rewritten, the link stays); the
 * rewrite is on the disk (fsync) before it replaces the file, with the
 * file's mode. A missing file is fine (nothing to keep). *kept and *dropped
 * count the lines; left as it is: *kept -1 for what is not a regular file
 * (a pipe, a terminal, /dev/stdout), -2 for a file without a line of a run
 * ({"step"} or {"eval_step"}): not a --metrics file. Errors: DS_ERR_IO
 * naming the file (reading, writing, renaming; the old file is then left as
 * it was). */
ds_status tr_metrics_truncate(const char *path, int64_t step, bool reevaluated, long *kept,
                              long *dropped);

#endif /* DS_TOOLS_METRICS_RESUME_H */
