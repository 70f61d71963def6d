/* The command line the bundled trainers (train_cls, train_lm) share: the
 * flags both take, parsed once, and the program's own flags handed to it.
 *
 *   static int take(const tr_cli *c, void *user, int id, const char *flag, const char *v) {
 *       my_opts *o = user;
 *       switch (id) {
 *       case O_VOCAB: o->vocab = v; return -1;
 *       case O_INTERMEDIATE: return tr_opt_int(c, flag, v, 1, 1 << 20, &o->intermediate);
 *       }
 *       return -1;
 *   }
 *   tr_opts_defaults(&o->tr);
 *   o->tr.epochs = 3;                                    // the program's own defaults
 *   tr_cli cli = {.prog = "train_cls", .usage = k_usage, .own = k_own, .take = take,
 *                 .user = o, .max_steps_min = 1};
 *   int rc = tr_opts_parse(argc, argv, &o->tr, &cli);   // -1 go on, 0 --help, 2 error
 *
 * Every usage error is one line on stderr naming the flag, and parsing
 * returns 2; --help prints cli.usage and returns 0. */
#ifndef DS_TOOLS_TRAINER_OPTS_H
#define DS_TOOLS_TRAINER_OPTS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct tr_opts {
    const char *config, *data, *eval_data; /* --config and --data are required */
    double dev_ratio;          /* default 0.1 */
    bool dev_ratio_set;        /* given: refused with --eval-data, which it cannot split */
    uint64_t seed;             /* default 42 */
    /* the model: shape flags, a config file, a folder to start from */
    const char *model_config, *init_dir;
    int layers, hidden, heads; /* default 4, 256, 4 */
    float dropout;             /* default 0.1 */
    bool dropout_set;
    int min_char_count;        /* char vocabularies; default 1 */
    /* the run's length: --max-steps, else --epochs over the training rows */
    int epochs;                /* default 1 */
    int64_t max_steps;         /* < 0: not given */
    /* values for the config's "auto" keys and missing optimizer / scheduler
     * sections, Hugging Face Trainer style (trainer_run.c passes them as
     * ds_config_hints over the HF Trainer's defaults) */
    double lr, weight_decay;   /* < 0: not given */
    double adam_beta1, adam_beta2, adam_epsilon, max_grad_norm; /* < 0: not given */
    int64_t batch, warmup;     /* <= 0 / < 0: not given */
    const char *lr_scheduler_type; /* NULL: not given (HF's "linear") */
    bool fp16, bf16;           /* --fp16 / --bf16 given */
    bool print_config;         /* --print-config: print the resolved config, exit 0 */
    int eval_batch;            /* rows per evaluation call; 0: the micro batch
                                  (--batch when given) */
    bool eval_batch_given;     /* --eval-batch on the command line */
    /* outputs */
    const char *metrics, *save_dir;
    /* checkpoints: every save_steps optimizer steps (and at the end) into
     * ckpt_dir, default <save_dir>/checkpoints; resume from ckpt_dir/latest;
     * a preemption signal saves there too */
    const char *ckpt_dir;      /* NULL: none (neither --ckpt-dir nor --save-dir) */
    int64_t save_steps;        /* 0: no scheduled checkpoints */
    int save_total_limit;      /* --save-total-limit: checkpoints kept after each
                                  save (and the one latest names); 0: all */
    bool resume;
    const char *resume_from;   /* --resume-from TAG (sets resume): that checkpoint, not
                                  the one latest names; NULL none */
    int retries;               /* --retries: times a step failing with an I/O error goes
                                  back to ckpt_dir/latest in the same engine; 0 none */
    int save_on_signal;        /* --save-on-signal: a signal besides SIGTERM; 0 none */
    /* the Hugging Face Trainer's habits (train_habits.h) */
    int64_t eval_steps;        /* --eval-steps: evaluate every N steps; 0 none */
    const char *save_best;     /* --save-best METRIC: keep SAVE_DIR/best; NULL none */
    int early_stopping;        /* --early-stopping PATIENCE; 0 none */
    int64_t logging_steps;     /* --logging-steps: a --metrics line every N steps; default 1 */
    char ckpt_dir_buf[4096];
} tr_opts;

/* The shared defaults above. */
void tr_opts_defaults(tr_opts *o);

/* A program's own flags: `own` is a getopt_long table ended by a zero entry
 * whose `val`s are the program's ids, each >= TR_OPT_OWN. */
enum { TR_OPT_OWN = 1024 };

typedef struct tr_cli tr_cli;
struct tr_cli {
    const char *prog;              /* "train_lm": the first word of every message */
    const char *usage;             /* --help's text */
    const struct option *own;      /* the program's flags (may be NULL) */
    /* One of them (value NULL for a flag without one): -1 to go on, 2 after
     * a usage error it printed (tr_opt_bad and the tr_opt_ parsers do). */
    int (*take)(const tr_cli *c, void *user, int id, const char *flag, const char *value);
    /* After every flag was read and --config and --data are known to be
     * there: the program's checks across flags and its derived defaults;
     * -1 or 2 as take. May be NULL. */
    int (*check)(const tr_cli *c, void *user);
    void *user;
    int64_t max_steps_min;         /* --max-steps' lowest value: 1, or 0 when no
                                      training is a use (evaluate, generate) */
    bool hint_required;            /* the missing --config / --data lines end in
                                      "(see PROG --help)" as well */
    const char *eval_metrics;      /* --save-best's choices, "accuracy,macro_f1,...";
                                      NULL: the program has none */
};

/* Parse argv into o (start from tr_opts_defaults and the program's own
 * defaults) and, through cli->take, the program's options. Then: --config
 * and --data are required; --eval-batch defaults to --batch; cli->check;
 * ckpt_dir defaults to SAVE_DIR/checkpoints, and --save-steps, --resume and
 * --save-total-limit need one. Returns -1 to go on, 0 after --help, 2 after a usage error. */
int tr_opts_parse(int argc, char **argv, tr_opts *o, const tr_cli *cli);

/* Usage errors, one line on stderr, each returning 2:
 * "PROG: --FLAG VALUE: WANT (see PROG --help)" */
int tr_opt_bad(const tr_cli *c, const char *flag, const char *value, const char *want);
/* "PROG: MSG (see PROG --help)" */
int tr_usage_error(const tr_cli *c, const char *msg);

/* Value parsers for take: -1 with *out set, or 2 after a usage error that
 * names the flag and the range. */
int tr_opt_i64(const tr_cli *c, const char *flag, const char *v, int64_t lo, int64_t hi,
               int64_t *out);
int tr_opt_int(const tr_cli *c, const char *flag, const char *v, int lo, int hi, int *out);
int tr_opt_f64(const tr_cli *c, const char *flag, const char *v, double lo, double hi,
               double *out);

/* --help text both trainers print the same way: the checkpoint flags ... */
#define TR_USAGE_CHECKPOINTS                                                            \
    "checkpoints:\n"                                                                    \
    "  --save-steps N       save a training checkpoint every N optimizer steps and at\n" \
    "                       the end (crash-safe; zero_to_fp32 converts one to\n"        \
    "                       safetensors)\n"                                             \
    "  --ckpt-dir DIR       where checkpoints go (default SAVE_DIR/checkpoints); one\n" \
    "                       job at a time writes there (a second one fails at start)\n" \
    "  --save-total-limit K keep only the newest K checkpoints in CKPT_DIR (and the\n"  \
    "                       one CKPT_DIR/latest names), removing older ones after\n"   \
    "                       each save (default: keep all)\n"                          \
    "  --resume             continue from the checkpoint CKPT_DIR/latest names, on\n"  \
    "                       any number of ranks (without latest, from the newest\n"    \
    "                       complete one there; from step 0 when there is none)\n"     \
    "  --resume-from TAG    continue from CKPT_DIR/TAG instead (e.g. global_step300)\n" \
    "  --retries N          a step that fails with an I/O error on every rank (an\n"    \
    "                       NVMe swap or parameter file's disk) loads CKPT_DIR/latest\n" \
    "                       into the same engine, which makes lost swap files anew,\n"  \
    "                       and trains on from it; at most N times (default 0)\n"       \
    "  --save-on-signal SIG besides SIGTERM, save a checkpoint and exit on SIG (USR1,\n" \
    "                       USR2, INT, HUP, XCPU, PWR; e.g. Slurm's sbatch\n"           \
    "                       --signal=USR1@90); also zero_engine.save_on_signal\n"

/* ... the Hugging Face Trainer's evaluation habits ... */
#define TR_USAGE_HABITS(METRICS)                                                        \
    "evaluation during training (Hugging Face Trainer style):\n"                        \
    "  --eval-steps N       evaluate on dev every N steps (every dev sample once);\n"   \
    "                       printed, written to --metrics and the config's monitors\n" \
    "  --save-best METRIC   keep the model with the best dev METRIC in SAVE_DIR/best\n" \
    "                       (" METRICS "); needs --eval-steps\n"                        \
    "                       and --save-dir\n"                                          \
    "  --early-stopping P   stop when METRIC has not improved in P evaluations in a\n" \
    "                       row; needs --save-best\n"                                  \
    "  --logging-steps N    a --metrics line every N steps and at the last, its loss\n" \
    "                       the mean since the line before (default 1)\n"

/* ... the values for the config's "auto" keys ... */
#define TR_USAGE_AUTO                                                                   \
    "  --lr X --weight-decay X --adam-beta1 X --adam-beta2 X --adam-epsilon X\n"       \
    "  --max-grad-norm X --batch N --warmup N --lr-scheduler-type NAME --fp16 --bf16\n" \
    "                       as Hugging Face's Trainer: they fill the config's\n"      \
    "                       \"auto\" keys (lr, weight_decay, betas, eps,\n"          \
    "                       gradient_clipping, train_micro_batch_size_per_gpu,\n"     \
    "                       warmup_num_steps, fp16/bf16.enabled) and a missing\n"    \
    "                       optimizer (AdamW) or scheduler section (NAME: linear =\n" \
    "                       WarmupDecayLR, cosine, constant, constant_with_warmup);\n" \
    "                       HF's defaults: lr 5e-5, weight decay 0, betas 0.9 0.999,\n" \
    "                       eps 1e-8, max grad norm 1.0, warmup 0, linear; a number\n" \
    "                       in the config must agree with a flag given;\n"           \
    "                       total_num_steps \"auto\" is the run's length\n"          \
    "  --print-config       print the resolved config (every key) and exit; a run\n"  \
    "                       writes it to ds_config.resolved.json beside --metrics,\n" \
    "                       else in --save-dir\n"                                  \
    "  --help               print this text and exit\n"

/* ... what an epoch is (engine.h, ds_train_batch) ... */
#define TR_USAGE_EPOCH                                                                  \
    "                       An epoch trains every row once (rows split evenly over\n" \
    "                       the ranks, the last ones repeated to even counts); with\n" \
    "                       gradient accumulation its last step takes the\n"         \
    "                       micro-batches left when fewer (as the Hugging Face\n"   \
    "                       Trainer), so an epoch is ceil(ceil(rows per rank / micro\n" \
    "                       batch) / accumulation steps) steps and no step mixes\n"  \
    "                       two epochs\n"

/* ... evaluation's batch: the engine plans its buffers for the micro batch ... */
#define TR_USAGE_EVAL_BATCH(CALL)                                                       \
    "  --eval-batch N       rows per " CALL " call (default: the micro batch; a larger\n" \
    "                       N is lowered to the micro batch, the engine's buffers\n" \
    "                       being planned for it, and said at start-up)\n"

/* ... the exit codes (trainer.h, tr_exit_code) ... */
#define TR_USAGE_EXIT(PROG)                                                             \
    "Errors print one line (" PROG ": what: why). Exit codes: 2 for what starting\n"  \
    "the run again the same way cannot get past (a bad command line, a config,\n"     \
    "data or argument error, a corrupt checkpoint, what this build does not\n"       \
    "support: engine-run --max-restarts does not restart it), 1 for the rest (a\n"  \
    "file that cannot be opened or written, a rank lost or timed out, memory),\n"    \
    "128 + the signal after a preemption save.\n"

/* ... and the paragraph on what a preemption signal does. */
#define TR_USAGE_PREEMPTION(PROG)                                                       \
    "On SIGTERM (and SIG) every rank saves a checkpoint at the next step boundary\n"    \
    "and " PROG " exits 128 + the signal (143 for SIGTERM) within\n"                    \
    "zero_engine.preempt_deadline_s (default 30 s); --resume continues from it.\n"

#endif /* DS_TOOLS_TRAINER_OPTS_H */
