/* What the bundled trainers (train_cls, train_lm) share beyond their own
 * options: checks of input paths that name the flag, and (below) the
 * --metrics line and the preemption save.
 *
 *   if (tr_check_input_file("--data", o->data) != DS_OK) return fail("reading data");
 *
 * Functions return a ds_status with the message in ds_last_error(), like the
 * library's. */
#ifndef DS_TOOLS_TRAINER_H
#define DS_TOOLS_TRAINER_H

#include "engine/engine.h"

/* `path`, given with `flag`, is a file that can be opened for reading.
 * Errors (DS_ERR_DATA) name the flag and the path: "--data /tmp: is a folder,
 * not a file", "--data x.csv: no such file". */
ds_status tr_check_input_file(const char *flag, const char *path);

#endif /* DS_TOOLS_TRAINER_H */
