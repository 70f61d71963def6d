/* The trainers' shared command line (see trainer_opts.h). */
#include "tools/common/trainer_opts.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config.h"
#include "engine/io/ckpt_dir.h"
#include "tools/common/train_habits.h"

void tr_opts_defaults(tr_opts *o) {
    memset(o, 0, sizeof *o);
    o->dev_ratio = 0.1;
    o->seed = 42;
    o->layers = 4;
    o->hidden = 256;
    o->heads = 4;
    o->dropout = 0.1f;
    o->min_char_count = 1;
    o->epochs = 1;
    o->max_steps = -1;
    o->lr = -1;
    o->weight_decay = -1;
    o->adam_beta1 = o->adam_beta2 = o->adam_epsilon = o->max_grad_norm = -1;
    o->warmup = -1;
    o->logging_steps = 1;
}

/* The shared flags' ids: below TR_OPT_OWN, apart from the programs'. */
enum {
    O_CONFIG = 256, O_DATA, O_EVAL_DATA, O_DEV_RATIO, O_SEED, O_MODEL_CONFIG, O_INIT, O_LAYERS,
    O_HIDDEN, O_HEADS, O_DROPOUT, O_MIN_CHAR, O_EPOCHS, O_MAX_STEPS, O_LR, O_WD, O_BATCH,
    O_WARMUP, O_EVAL_BATCH, O_METRICS, O_SAVE, O_SAVE_STEPS, O_CKPT_DIR, O_RESUME,
    O_SAVE_ON_SIGNAL, O_SAVE_TOTAL_LIMIT, O_BETA1, O_BETA2, O_ADAM_EPS, O_MAX_GRAD_NORM,
    O_LR_SCHED, O_FP16, O_BF16, O_PRINT_CONFIG, O_HELP, O_EVAL_STEPS, O_SAVE_BEST,
    O_EARLY_STOPPING, O_LOGGING_STEPS, O_RETRIES, O_RESUME_FROM
};

static const struct option k_shared[] = {
    {"config", required_argument, 0, O_CONFIG},
    {"data", required_argument, 0, O_DATA},
    {"eval-data", required_argument, 0, O_EVAL_DATA},
    {"dev-ratio", required_argument, 0, O_DEV_RATIO},
    {"seed", required_argument, 0, O_SEED},
    {"model-config", required_argument, 0, O_MODEL_CONFIG},
    {"init", required_argument, 0, O_INIT},
    {"layers", required_argument, 0, O_LAYERS},
    {"hidden", required_argument, 0, O_HIDDEN},
    {"heads", required_argument, 0, O_HEADS},
    {"dropout", required_argument, 0, O_DROPOUT},
    {"min-char-count", required_argument, 0, O_MIN_CHAR},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"max-steps", required_argument, 0, O_MAX_STEPS},
    {"lr", required_argument, 0, O_LR},
    {"weight-decay", required_argument, 0, O_WD},
    {"batch", required_argument, 0, O_BATCH},
    {"warmup", required_argument, 0, O_WARMUP},
    {"eval-batch", required_argument, 0, O_EVAL_BATCH},
    {"metrics", required_argument, 0, O_METRICS},
    {"save-dir", required_argument, 0, O_SAVE},
    {"save-steps", required_argument, 0, O_SAVE_STEPS},
    {"ckpt-dir", required_argument, 0, O_CKPT_DIR},
    {"resume", no_argument, 0, O_RESUME},
    {"resume-from", required_argument, 0, O_RESUME_FROM},
    {"retries", required_argument, 0, O_RETRIES},
    {"save-on-signal", required_argument, 0, O_SAVE_ON_SIGNAL},
    {"save-total-limit", required_argument, 0, O_SAVE_TOTAL_LIMIT},
    {"adam-beta1", required_argument, 0, O_BETA1},
    {"adam-beta2", required_argument, 0, O_BETA2},
    {"adam-epsilon", required_argument, 0, O_ADAM_EPS},
    {"max-grad-norm", required_argument, 0, O_MAX_GRAD_NORM},
    {"lr-scheduler-type", required_argument, 0, O_LR_SCHED},
    {"fp16", no_argument, 0, O_FP16},
    {"bf16", no_argument, 0, O_BF16},
    {"print-config", no_argument, 0, O_PRINT_CONFIG},
    {"help", no_argument, 0, O_HELP},
    {"eval-steps", required_argument, 0, O_EVAL_STEPS},
    {"save-best", required_argument, 0, O_SAVE_BEST},
    {"early-stopping", required_argument, 0, O_EARLY_STOPPING},
    {"logging-steps", required_argument, 0, O_LOGGING_STEPS},
};
#define N_SHARED (sizeof k_shared / sizeof k_shared[0])
#define MAX_OPTS 96 /* shared + a program's, and the closing zero entry */

int tr_opt_bad(const tr_cli *c, const char *flag, const char *value, const char *want) {
    fprintf(stderr, "%s: --%s %s: %s (see %s --help)\n", c->prog, flag, value, want, c->prog);
    return 2;
}

int tr_usage_error(const tr_cli *c, const char *msg) {
    fprintf(stderr, "%s: %s (see %s --help)\n", c->prog, msg, c->prog);
    return 2;
}

int tr_opt_i64(const tr_cli *c, const char *flag, const char *v, int64_t lo, int64_t hi,
               int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        char want[96];
        snprintf(want, sizeof want, "must be an integer in %lld..%lld", (long long)lo,
                 (long long)hi);
        return tr_opt_bad(c, flag, v, want);
    }
    *out = x;
    return -1;
}

int tr_opt_int(const tr_cli *c, const char *flag, const char *v, int lo, int hi, int *out) {
    int64_t x;
    int rc = tr_opt_i64(c, flag, v, lo, hi, &x);
    if (rc < 0) *out = (int)x;
    return rc;
}

int tr_opt_f64(const tr_cli *c, const char *flag, const char *v, double lo, double hi,
               double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || end == v || !(x >= lo && x <= hi)) {
        char want[96];
        snprintf(want, sizeof want, "must be a number in [%g, %g]", lo, hi);
        return tr_opt_bad(c, flag, v, want);
    }
    *out = x;
    return -1;
}

/* One shared flag: -1 to go on, 0 after --help, 2 after a usage error. */
static int take_shared(const tr_cli *c, tr_opts *o, int id, const char *flag, const char *v) {
    int64_t i;
    double x;
    int rc = -1;
    switch (id) {
    case O_CONFIG: o->config = v; break;
    case O_DATA: o->data = v; break;
    case O_EVAL_DATA: o->eval_data = v; break;
    case O_MODEL_CONFIG: o->model_config = v; break;
    case O_INIT: o->init_dir = v; break;
    case O_METRICS: o->metrics = v; break;
    case O_SAVE: o->save_dir = v; break;
    case O_CKPT_DIR: o->ckpt_dir = v; break;
    case O_RESUME: o->resume = true; break;
    case O_RESUME_FROM:
        if (ds_ckpt_check_tag(v) != DS_OK) {
            rc = tr_opt_bad(c, flag, v, "must be a checkpoint's tag, a folder name in CKPT_DIR "
                            "(letters, digits, '.', '_', '-')");
            break;
        }
        o->resume = true;
        o->resume_from = v;
        break;
    case O_SAVE_ON_SIGNAL:
        o->save_on_signal = ds_signal_from_name(v);
        if (!o->save_on_signal)
            rc = tr_opt_bad(c, flag, v, "must be a signal name: USR1, USR2, TERM, INT, HUP, XCPU "
                            "or PWR (SIG may be given)");
        break;
    case O_DEV_RATIO:
        rc = tr_opt_f64(c, flag, v, 0.0, 0.99, &o->dev_ratio);
        o->dev_ratio_set = true;
        break;
    case O_DROPOUT:
        rc = tr_opt_f64(c, flag, v, 0.0, 0.95, &x);
        o->dropout = (float)x;
        o->dropout_set = true;
        break;
    case O_LR: rc = tr_opt_f64(c, flag, v, 1e-12, 10.0, &o->lr); break;
    case O_WD: rc = tr_opt_f64(c, flag, v, 0.0, 10.0, &o->weight_decay); break;
    /* PyTorch's Adam: 0 <= beta < 1; the largest double below 1 is the bound */
    case O_BETA1: rc = tr_opt_f64(c, flag, v, 0.0, 0.9999999999999999, &o->adam_beta1); break;
    case O_BETA2: rc = tr_opt_f64(c, flag, v, 0.0, 0.9999999999999999, &o->adam_beta2); break;
    case O_ADAM_EPS: rc = tr_opt_f64(c, flag, v, 0.0, 1.0, &o->adam_epsilon); break;
    case O_MAX_GRAD_NORM: rc = tr_opt_f64(c, flag, v, 0.0, 1e30, &o->max_grad_norm); break;
    case O_LR_SCHED:
        if (strcmp(v, "linear") && strcmp(v, "cosine") && strcmp(v, "constant") &&
            strcmp(v, "constant_with_warmup"))
            rc = tr_opt_bad(c, flag, v, "must be linear, cosine, constant or constant_with_warmup");
        else
            o->lr_scheduler_type = v;
        break;
    case O_FP16: o->fp16 = true; break;
    case O_BF16: o->bf16 = true; break;
    case O_PRINT_CONFIG: o->print_config = true; break;
    case O_MAX_STEPS:
        rc = tr_opt_i64(c, flag, v, c->max_steps_min, INT64_MAX, &o->max_steps);
        break;
    case O_SAVE_STEPS: rc = tr_opt_i64(c, flag, v, 1, INT64_MAX, &o->save_steps); break;
    case O_RETRIES: rc = tr_opt_int(c, flag, v, 0, 1000, &o->retries); break;
    case O_SAVE_TOTAL_LIMIT:
        rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->save_total_limit);
        break;
    case O_SEED:
        rc = tr_opt_i64(c, flag, v, 0, INT64_MAX, &i);
        o->seed = (uint64_t)i;
        break;
    case O_BATCH: rc = tr_opt_i64(c, flag, v, 1, 1 << 20, &o->batch); break;
    case O_WARMUP: rc = tr_opt_i64(c, flag, v, 0, INT64_MAX, &o->warmup); break;
    case O_EPOCHS: rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->epochs); break;
    case O_LAYERS: rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->layers); break;
    case O_HIDDEN: rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->hidden); break;
    case O_HEADS: rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->heads); break;
    case O_EVAL_BATCH:
        rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->eval_batch);
        o->eval_batch_given = true;
        break;
    case O_MIN_CHAR: rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->min_char_count); break;
    case O_HELP: fputs(c->usage, stdout); return 0;
    case O_EVAL_STEPS: rc = tr_opt_i64(c, flag, v, 1, INT64_MAX, &o->eval_steps); break;
    case O_SAVE_BEST: o->save_best = v; break;
    case O_EARLY_STOPPING: rc = tr_opt_int(c, flag, v, 1, 1 << 20, &o->early_stopping); break;
    case O_LOGGING_STEPS: rc = tr_opt_i64(c, flag, v, 1, INT64_MAX, &o->logging_steps); break;
    }
    return rc;
}

/* --save-best names a metric of this program and needs an evaluation to
 * judge and a folder to keep it in; --early-stopping watches that metric. */
static int check_habits(const tr_cli *c, const tr_opts *o) {
    if (o->save_best) {
        bool up;
        char want[160];
        snprintf(want, sizeof want, "one of %s", c->eval_metrics ? c->eval_metrics : "(none)");
        if (!tr_metric_known(c->eval_metrics, o->save_best, &up))
            return tr_opt_bad(c, "save-best", o->save_best, want);
        if (!o->eval_steps) return tr_usage_error(c, "--save-best needs --eval-steps N");
        if (!o->save_dir) return tr_usage_error(c, "--save-best needs --save-dir DIR");
    }
    if (o->early_stopping && !o->save_best)
        return tr_usage_error(c, "--early-stopping needs --save-best METRIC (the metric it watches)");
    return -1;
}

int tr_opts_parse(int argc, char **argv, tr_opts *o, const tr_cli *c) {
    /* one getopt table: the shared flags, then the program's */
    struct option all[MAX_OPTS];
    size_t n = 0;
    for (size_t k = 0; k < N_SHARED; k++) all[n++] = k_shared[k];
    for (const struct option *p = c->own; p && p->name; p++) {
        assert(n + 1 < MAX_OPTS && "raise MAX_OPTS for the program's flags");
        all[n++] = *p;
    }
    all[n] = (struct option){0, 0, 0, 0};
    int ch, at;
    opterr = 0;
    optind = 1;
    while ((at = -1, ch = getopt_long(argc, argv, "", all, &at)) != -1) {
        if (ch == '?' || ch == ':' || at < 0) {
            fprintf(stderr, "%s: unknown or incomplete option %s (see %s --help)\n", c->prog,
                    argv[optind - 1], c->prog);
            return 2;
        }
        const char *flag = all[at].name;
        int rc = ch >= TR_OPT_OWN ? c->take(c, c->user, ch, flag, optarg)
                                  : take_shared(c, o, ch, flag, optarg);
        if (rc >= 0) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument %s (see %s --help)\n", c->prog, argv[optind],
                c->prog);
        return 2;
    }
    const char *missing = !o->config ? "--config is required (engine-run passes it)"
                          : !o->data ? "--data is required" : NULL;
    if (missing && c->hint_required) return tr_usage_error(c, missing);
    if (missing) {
        fprintf(stderr, "%s: %s\n", c->prog, missing);
        return 2;
    }
    if (o->fp16 && o->bf16) return tr_usage_error(c, "--fp16 and --bf16: give one");
    /* --eval-data is the dev set whole: a ratio given too would be ignored */
    if (o->eval_data && o->dev_ratio_set)
        return tr_usage_error(c, "--dev-ratio and --eval-data: give one (--eval-data is the "
                                 "dev set; --dev-ratio holds out part of --data instead)");
    if (!o->eval_batch && o->batch > 0) o->eval_batch = (int)o->batch;
    int rc = c->check ? c->check(c, c->user) : -1;
    if (rc >= 0) return rc;
    if (!o->ckpt_dir && o->save_dir) {
        snprintf(o->ckpt_dir_buf, sizeof o->ckpt_dir_buf, "%s/checkpoints", o->save_dir);
        o->ckpt_dir = o->ckpt_dir_buf;
    }
    if ((o->save_steps > 0 || o->resume || o->save_total_limit > 0 || o->retries > 0) &&
        !o->ckpt_dir) {
        fprintf(stderr, "%s: --%s needs --ckpt-dir or --save-dir (see %s --help)\n", c->prog,
                o->resume_from ? "resume-from" : o->resume ? "resume"
                : o->save_steps > 0 ? "save-steps"
                                     : o->retries > 0 ? "retries" : "save-total-limit",
                c->prog);
        return 2;
    }
    return check_habits(c, o);
}
