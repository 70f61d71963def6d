/* The Hugging Face Trainer's habits for the bundled trainers (train_cls,
 * train_lm): evaluation during training, the best model kept by a dev
 * metric, early stopping, and how often --metrics gets a line.
 *
 *   --eval-steps N          evaluate on dev every N optimizer steps (all
 *                           ranks, every dev sample once), print it on rank 0,
 *                           write {"eval_step": ...} to --metrics and
 *                           Eval/<metric> to the config's monitors
 *   --save-best METRIC      after each such evaluation, when METRIC improved,
 *                           write the model to SAVE_DIR/best (replaced as a
 *                           whole: best.tmp, then renamed); needs --save-dir
 *                           and --eval-steps
 *   --early-stopping P      stop when METRIC has not improved in P evaluations
 *                           in a row (HF's early_stopping_patience); needs
 *                           --save-best (the metric it watches)
 *   --logging-steps N       a --metrics step line every N steps (and the
 *                           last), its "loss" the mean over the steps since
 *                           the previous line, as HF logs it (default 1:
 *                           every step, its own loss)
 *
 * Metrics: train_cls accuracy, macro_f1, weighted_f1, loss; train_lm loss,
 * perplexity. accuracy and the F1s improve upwards, loss and perplexity
 * downwards.
 *
 * Wiring (trainer_run.c calls the step hooks when tr_run.habits is set):
 *
 *   tr_habits h;
 *   tr_habits_init(&h, &o->tr, evaluate_fn, &state, describe, &state);
 *   r.habits = &h;                          // before tr_run_train
 *   ... tr_run_train: after each step tr_habits_log picks the --metrics lines,
 *       tr_habits_after_step evaluates / saves / stops ...
 *   tr_habits_finish(&h, &r);               // the summary line in --metrics */
#ifndef DS_TOOLS_TRAIN_HABITS_H
#define DS_TOOLS_TRAIN_HABITS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "tools/common/trainer_opts.h"

typedef struct tr_run tr_run;

#define TR_EVAL_MAX 8

/* One evaluation's numbers, the same on every rank. */
typedef struct tr_eval_result {
    int n;
    const char *name[TR_EVAL_MAX]; /* "accuracy", "loss", ... (static strings) */
    double value[TR_EVAL_MAX];
    int64_t samples;               /* dev samples counted */
} tr_eval_result;

/* Add a named value to a result. */
void tr_eval_put(tr_eval_result *r, const char *name, double value);

/* The trainer's evaluation on dev: collective, every rank gets the same. */
typedef ds_status (*tr_evaluate_fn)(void *user, engine_t *e, int batch, tr_eval_result *out);
/* What a model folder holds besides the weights (config.json, vocabulary):
 * the trainer's tr_describe_fn. Rank 0. */
typedef ds_status (*tr_habits_describe_fn)(void *user, const char *dir);

typedef struct tr_habits {
    const tr_opts *o;
    tr_evaluate_fn evaluate;
    void *eval_user;
    tr_habits_describe_fn describe;
    void *describe_user;
    /* --save-best / --early-stopping */
    bool higher_better;
    double best;
    int64_t best_step;     /* 0: none yet */
    int evals, bad_evals;
    bool stopped;          /* early stopping ended the run */
    /* --logging-steps: the loss since the last line */
    double loss_sum;
    int64_t loss_n;
} tr_habits;

/* The result into the config's monitors as Eval/<name> at `samples` (the x
 * axis of the engine's Train/Samples/ scalars); a write that fails is one
 * line on stderr. Rank 0 writes; a no-op elsewhere. */
void tr_monitor_eval(engine_t *e, const char *prog, const tr_eval_result *res, int64_t samples);

/* METRIC names a metric the trainer computes (names: "accuracy,macro_f1,..."),
 * and whether it improves upwards; for the option checks. */
bool tr_metric_known(const char *names, const char *metric, bool *higher_better);

void tr_habits_init(tr_habits *h, const tr_opts *o, tr_evaluate_fn evaluate, void *eval_user,
                    tr_habits_describe_fn describe, void *describe_user);

/* The flags, once, as the first --metrics line of the training
 * ({"trainer": {"eval_steps": ..., ...}}) when any of them is given. Rank 0
 * with --metrics. */
void tr_habits_record(const tr_habits *h, tr_run *r);

/* After tr_run_prepare, on every rank: the state a --resume'd checkpoint
 * holds (best value and step, evaluations without improvement; each
 * checkpoint's client state carries it), and, when the checkpoint is of an
 * evaluation step (saved before that evaluation), the evaluation again.
 * 0 to go on (h->stopped: early stopping ended the run there), 1 after a
 * failure (the line printed). */
int tr_habits_resume(tr_habits *h, tr_run *r);

/* Whether step `info` gets a --metrics line (every --logging-steps, and the
 * last step); when it does, info->loss becomes the mean since the last
 * line. Call it on every step. h may be NULL: every step, unchanged. */
bool tr_habits_log(tr_habits *h, ds_step_info *info, bool last);

/* After a step: evaluate (every --eval-steps), keep the best model, decide
 * on early stopping. Collective. Returns 0 to go on, -1 to stop early (the
 * line printed), 1 after a failure (the line printed). */
int tr_habits_after_step(tr_habits *h, tr_run *r, const ds_step_info *info);

/* The run's summary line {"best": {...}, "early_stopped": ...} in
 * --metrics, and rank 0's line on stdout. */
void tr_habits_finish(const tr_habits *h, tr_run *r);

#endif /* DS_TOOLS_TRAIN_HABITS_H */
