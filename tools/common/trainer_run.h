/* The run the bundled trainers (train_cls, train_lm) share, from
 * ds_initialize to the saved weights; the program keeps its data, its model,
 * its metrics fields and its evaluation:
 *
 *   tr_run r;
 *   int rc = tr_run_init(&r, "train_lm", &o->tr, model, d.train); // owns model now
 *   if (rc == 0) rc = tr_run_prepare(&r, describe, &d, "writing config.json ... to --save-dir");
 *   if (rc == 0) { ...print what the run is (r.total, r.per_epoch)... }
 *   if (rc == 0) rc = tr_run_train(&r, step_fields, &d);   // 128 + signal when preempted
 *   if (rc == 0) { ...evaluate in calls of r.eval_batch rows (tr_eval_slices)... }
 *   if (rc == 0) rc = tr_run_save(&r);
 *   tr_run_end(&r);                                      // whatever rc is
 *   return rc;
 *
 * Each function returns an exit code: 0, or 1 after printing one line
 * "PROG: what: why" on stderr (tr_fail); tr_run_train also 128 + a
 * preemption signal. Every rank calls every function (they are collective). */
#ifndef DS_TOOLS_TRAINER_RUN_H
#define DS_TOOLS_TRAINER_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "tools/common/trainer.h"
#include "tools/common/trainer_opts.h"

typedef struct tr_run {
    const char *prog;
    const tr_opts *o;
    engine_t *e;           /* NULL when ds_initialize failed */
    int rank, world;
    int64_t per_epoch;     /* optimizer steps in a pass over the training rows */
    double epoch_samples;  /* samples (all ranks') a pass consumes */
    int64_t total;         /* the run's steps: --max-steps, else --epochs x per_epoch */
    int64_t start;         /* the step it starts from: > 0 after --resume, and the
                              checkpoint's after a --retries */
    int64_t micro;         /* the resolved train_micro_batch_size_per_gpu */
    int eval_batch;        /* rows per evaluation call: --eval-batch, at most micro
                              (the plan holds activations for that many) */
    FILE *metrics;         /* rank 0's --metrics (appended to after a resume) */
    tr_preempt stopper;
    char client[256];      /* each checkpoint's client state {"total_steps": N}, and
                              the habits' {"habits": {...}} (train_habits.h) */
    char ckpt_tag[256];    /* the checkpoint this run saved last or resumed from, ""
                              for none: what --retries goes back to (never one that
                              another run left in the folder) */
    double train_s;        /* tr_run_train's seconds, and the steps and the samples of */
    int64_t train_steps;   /* all ranks it took in them (those a --retries took again */
    int64_t train_samples; /* included: the work the seconds paid for) */
    struct tr_habits *habits; /* --eval-steps and the rest (train_habits.h); NULL: none.
                                 The program sets it before tr_run_train */
} tr_run;

/* After a line is written to r->metrics: flushed, and when the file took
 * it not (a full disk, a quota), one line on stderr saying so and that the
 * run goes on without it; the file is closed and r->metrics NULL, so no
 * later line is lost silently and none half-written follows. Training is
 * the job; the metrics are its record. */
void tr_metrics_written(tr_run *r);

/* ds_initialize with the options as the config's hints, Hugging Face
 * Trainer style: its defaults (ds_config_hints_hf_defaults), then the flags
 * the user gave (--lr, --weight-decay, --adam-beta1/2, --adam-epsilon,
 * --max-grad-norm, --batch, --warmup, --lr-scheduler-type, --fp16, --bf16),
 * each named by its flag, and the run's length: hints.total_num_steps from
 * --max-steps (at least 1: a scheduler needs a step, also when none is
 * taken), else hints.epochs over the training rows. The config is resolved
 * there, once; per_epoch, total, micro and eval_batch are read back from it
 * (ds_get_config). A written total_num_steps that disagrees with --epochs
 * is refused, naming both. With --print-config rank 0 prints the resolved
 * config and the process exits 0 here. `model` passes to the engine, also
 * on failure. */
int tr_run_init(tr_run *r, const char *prog, const tr_opts *o, ds_model *model,
                const ds_dataset *train);

/* What --save-dir holds before training: the model's description (config,
 * tokenizer), so that the checkpoints of a run that never ends can still
 * become a loadable folder (zero_to_fp32 + these files). Runs on rank 0. */
typedef ds_status (*tr_describe_fn)(void *user, const char *save_dir);

/* Before the first step, in this order: --init DIR's weights by name (rank 0
 * prints the load report; errors say "loading --init DIR"); the preemption
 * handlers and watchdog (tr_preempt_start, with --save-on-signal); ckpt_dir's
 * lock (a second job on it fails here) and what unfinished saves of an
 * earlier job left there (ds_checkpoint_clean);
 * --resume from ckpt_dir/latest (from step 0 when there is none, saying
 * so); `describe` into --save-dir on rank 0, every rank learning whether it
 * worked (`what` names the files in the error line); --metrics opened on
 * rank 0; the resolved config, every key, written to ds_config.resolved.json
 * beside --metrics (in the folder of its file), else in --save-dir, every
 * rank learning whether rank 0 could write these. */
int tr_run_prepare(tr_run *r, tr_describe_fn describe, void *user, const char *what);

/* Collective: `mine` is this rank's result of work only rank 0 did; every
 * rank returns an error when rank 0 failed (rank 0 its own, the others
 * "rank 0 could not WHAT"), so none goes on alone. */
ds_status tr_agree(engine_t *e, ds_status mine, const char *what);

/* A step's metrics members after step, epoch, loss, lr and grad_norm. */
typedef void (*tr_step_fields_fn)(void *user, tr_jline *l, const ds_step_info *info,
                                  double samples_per_s);

/* Steps start .. total-1 (ds_train_batch): a checkpoint every --save-steps
 * steps and at the last one (so a finished run resumes straight to its
 * evaluation), older ones removed past --save-total-limit, and a failure
 * names the step ("PROG: training step 13: ..."), a --metrics line per step (the rest of its members from
 * `fields`; non-finite numbers null and named in "nonfinite"), and at a
 * preemption signal a save and 128 + the signal (tr_preempt_stop). Sets
 * train_s and train_samples. */
int tr_run_train(tr_run *r, tr_step_fields_fn fields, void *user);

/* After the evaluation: closes --metrics, writes --save-dir's
 * model.safetensors (and says so on rank 0). */
int tr_run_save(tr_run *r);

/* Closes --metrics if still open and finalizes the engine. */
void tr_run_end(tr_run *r);

/* Evaluation over `rows` in calls of `batch` rows: rank r takes rows r,
 * r + world, ... (no padding, so each row counts once), and a rank with
 * fewer rows still joins every call with an empty batch, because stage 3
 * gathers parameters collectively inside ds_predict and ds_evaluate. `fn`
 * gets each call's batch and the dataset indices of its `count` rows. */
typedef ds_status (*tr_eval_fn)(void *user, const ds_batch *b, const size_t *idx, int count);
ds_status tr_eval_slices(engine_t *e, const ds_dataset *rows, int batch, tr_eval_fn fn,
                         void *user);

#endif /* DS_TOOLS_TRAINER_RUN_H */
