/* Pieces the bundled trainers (train_cls, train_lm) share: the failing
 * line, checks of input paths that name the flag, the --metrics line (valid
 * JSON whatever the numbers), and the preemption save. The run built from
 * them is trainer_run.h, the shared command line trainer_opts.h.
 *
 *   if (tr_check_input_file("--data", o->data) != DS_OK) return fail("reading data");
 *
 *   tr_jline l;                                  // {"step": 7, "loss": null, ...,
 *   tr_jline_begin(&l, f);                       //  "nonfinite": ["loss"]}
 *   tr_jline_int(&l, "step", 7);
 *   tr_jline_num(&l, "loss", "%.6f", NAN);
 *   tr_jline_end(&l);
 *   fputc('\n', f);
 *
 * Functions return a ds_status with the message in ds_last_error(), like the
 * library's. */
#ifndef DS_TOOLS_TRAINER_H
#define DS_TOOLS_TRAINER_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/engine.h"

/* The one line a tool prints when it gives up, returning its exit code:
 * "PROG: WHAT: <ds_last_error()>", or "PROG: <ds_last_error()>" when WHAT is
 * NULL because the message says it all ("loading --init DIR: ..."). The code
 * is tr_exit_code(ds_last_status()). */
int tr_fail(const char *prog, const char *what);

/* A failing tool's exit code: 2 when starting it again the same way cannot
 * get past the failure (a config, data or argument error, what this build
 * does not support, a corrupt checkpoint: engine-run --max-restarts does not
 * start such a job again), 1 for the rest (I/O, a peer lost or timed out,
 * memory, the device), which a restart from the last checkpoint may get
 * past. */
int tr_exit_code(ds_status st);

/* The failure just recorded came from reading `path`, given as `flag`: the
 * message gets the flag, so it says which option to fix ("nope.txt: cannot
 * open" becomes "--eval-data nope.txt: cannot open"; a message that does not
 * start with the path gets "--eval-data nope.txt: " before it). The status
 * stays. */
void tr_error_name_flag(const char *flag, const char *path);

/* `path`, given with `flag`, is a file that can be opened for reading.
 * Errors (DS_ERR_DATA) name the flag and the path: "--data /tmp: is a folder,
 * not a file", "--data x.csv: no such file". */
ds_status tr_check_input_file(const char *flag, const char *path);
/* Only the folder check, for readers whose own errors already name a
 * missing or unreadable file ("corpus.txt: cannot open: ..."). */
ds_status tr_check_not_folder(const char *flag, const char *path);

/* One JSON object written member by member. JSON has no NaN or infinity
 * (Python's json, jq and jansson refuse the bare words), so a number that is
 * not finite, a diverged loss, is written as null and its key listed in a
 * last member "nonfinite": [...]; a line with only finite numbers has no
 * such member. */
typedef struct tr_jline {
    FILE *f;
    int members;
    char nonfinite[512]; /* '"loss", "grad_norm"' */
    size_t nf_len;
} tr_jline;

void tr_jline_begin(tr_jline *l, FILE *f); /* "{" */
void tr_jline_num(tr_jline *l, const char *key, const char *fmt, double x);
void tr_jline_int(tr_jline *l, const char *key, long long v);
void tr_jline_bool(tr_jline *l, const char *key, bool v);
/* "key": (escaped) and nothing else: the caller writes the value (raw JSON)
 * next. The other functions' keys are escaped the same way. */
void tr_jline_key(tr_jline *l, const char *key);
void tr_jline_end(tr_jline *l);            /* the "nonfinite" list, then "}" */

/* Preemption (engine.h, ds_preempt_*) for a trainer:
 *
 *   tr_preempt p;
 *   DS_TRY(tr_preempt_start(&p, e, "train_cls", o->save_on_signal, o->ckpt_dir));
 *   for (...) {
 *       DS_TRY(ds_train_batch(e, &info));
 *       ... scheduled save (saved = true), metrics ...
 *       tr_preempt_observe(&p, e, step_seconds, saved ? save_seconds : 0);
 *       if (info.stop_signal) return tr_preempt_stop(&p, e, &info, saved, client);
 *   }
 *
 * start installs the handlers (SIGTERM, zero_engine.save_on_signal,
 * extra_signal when not 0), starts a watchdog thread that ends the process
 * with 128 + the signal if the save and exit take longer than
 * zero_engine.preempt_deadline_s after the signal, and has rank 0 print
 * which signals save, where, and that bound. observe warns once (rank 0)
 * when a step plus a save take longer than the bound. stop saves a
 * checkpoint into ckpt_dir (unless this step's was just saved; nothing when
 * ckpt_dir is NULL), keeping `keep` of them when set, prints what it did and
 * returns the exit code 128 + signal, or 1 when the save failed (the message
 * printed). */
typedef struct tr_preempt {
    const char *prog, *ckpt_dir;
    double deadline_s;
    bool warned;
    int keep; /* after stop's save, keep this many checkpoints (ds_checkpoint_prune); 0 all */
} tr_preempt;

ds_status tr_preempt_start(tr_preempt *p, engine_t *e, const char *prog, int extra_signal,
                           const char *ckpt_dir);
void tr_preempt_observe(tr_preempt *p, engine_t *e, double step_s, double save_s);
int tr_preempt_stop(tr_preempt *p, engine_t *e, const ds_step_info *info, bool saved,
                    const char *client_state_json);

#endif /* DS_TOOLS_TRAINER_H */
