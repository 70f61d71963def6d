/* Monitors: scalars of a run written where people look at them, with
 * DeepSpeed's config sections and file layout.
 *
 *   "tensorboard": {"enabled": true, "output_path": "runs", "job_name": "bert"}
 *       -> runs/bert/events.out.tfevents.<time>.<host>.<pid>.0, a TensorBoard
 *          event file (TFRecord framing, Event / Summary scalar messages)
 *   "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "bert"}
 *       -> csv/bert/Train_Samples_train_loss.csv ("step,train_loss" then one
 *          "step,value" row per write), one file per scalar as DeepSpeed's
 *          csvMonitor: '/' and ' ' in the tag become '_' in the file name,
 *          the header is the tag's last '/' component
 *
 * Defaults are DeepSpeed's: enabled false, output_path "" (the current
 * folder), job_name "DeepSpeedJobName". Only rank 0 writes, as in DeepSpeed.
 *
 * The engine opens one at ds_initialize (ds_get_monitor in engine.h) and
 * writes, at every optimizer step, with the step axis DeepSpeed uses (samples
 * consumed by all ranks): Train/Samples/train_loss, lr, grad_norm,
 * loss_scale, samples_per_sec and Train/Samples/memory_<purpose>_MiB (this
 * rank's device memory by purpose). A training loop logs its own scalars
 * into the same files:
 *
 *   // asked each time: NULL off rank 0, when none is enabled, and after a
 *   // write failed (the engine closes it then: training goes on, so a
 *   // full log disk warns rather than ends the run)
 *   if (ds_monitor_write(ds_get_monitor(e), "Eval/accuracy", acc, info.samples) != DS_OK)
 *       fprintf(stderr, "monitor: %s\n", ds_last_error());   // NULL: a no-op, DS_OK
 *
 * Or standalone, without an engine:
 *
 *   ds_monitor *m;
 *   DS_TRY(ds_monitor_open(&cfg, 0, &m));      // cfg from ds_config_parse_file
 *   DS_TRY(ds_monitor_write(m, "loss", 0.5, 1));
 *   ds_monitor_close(m);
 *
 * Errors: DS_ERR_IO naming the path (a folder that cannot be made, a full
 * disk); DS_ERR_INVALID_ARG for an empty tag. Nothing here exits. */
#ifndef DS_MONITOR_MONITOR_H
#define DS_MONITOR_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/config.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_monitor ds_monitor; /* opaque */

/* Open the monitors `cfg` enables (tensorboard, csv_monitor), creating
 * output_path/job_name. On a rank other than 0, or when none is enabled,
 * *out is NULL and DS_OK is returned: every function below takes NULL. */
ds_status ds_monitor_open(const ds_config *cfg, int rank, ds_monitor **out);

/* One scalar `value` of `tag` ("Train/Samples/lr") at `step` into every open
 * monitor. Buffered: ds_monitor_flush pushes the event file and the CSV
 * rows out (the engine does at every step), ds_monitor_close too. */
ds_status ds_monitor_write(ds_monitor *m, const char *tag, double value, int64_t step);

/* Push buffered events to the files (TensorBoard reads them as they come). */
ds_status ds_monitor_flush(ds_monitor *m);

/* The event file's path ("" when TensorBoard is off) and the CSV folder
 * ("" when csv_monitor is off); for messages and tests. */
const char *ds_monitor_event_file(const ds_monitor *m);
const char *ds_monitor_csv_dir(const ds_monitor *m);

/* Flush and close everything. Safe on NULL. */
void ds_monitor_close(ds_monitor *m);

#ifdef __cplusplus
}
#endif
#endif /* DS_MONITOR_MONITOR_H */
