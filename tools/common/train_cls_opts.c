/* train_cls's command line: defaults, parsing, --help. */
#include "tools/common/train_cls_opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config.h"

static const char k_usage[] =
    "usage: train_cls --config ds_config.json --data FILE [options]\n"
    "\n"
    "Train a text classifier data-parallel and evaluate it on a dev split.\n"
    "Usually started by engine-run, which passes --config.\n"
    "\n"
    "data:\n"
    "  --data FILE          labelled text: CSV/TSV with a header naming the label and\n"
    "                       text columns, JSON lines {\"text\",\"label\"}, or a JSON list\n"
    "                       of [text, label] pairs\n"
    "  --eval-data FILE     dev set (else --dev-ratio of --data)\n"
    "  --dev-ratio R        share of rows held out for dev (default 0.1)\n"
    "  --labels a,b,...     keep only rows with these labels\n"
    "  --drop-conflicts     drop every row of a text that appears with two labels\n"
    "  --max-seq-len N      tokens per row incl. [CLS] and [SEP] (default 64)\n"
    "  --vocab FILE         char vocabulary to use (else built from the train split)\n"
    "  --min-char-count N   chars seen fewer times become [UNK] (default 2)\n"
    "model:\n"
    "  --model bert|mlp     (default bert)\n"
    "  --layers N --hidden N --heads N --intermediate N --dropout P\n"
    "                       BERT shape (default 4 x 256, 4 heads, 1024, 0.1); for the\n"
    "                       MLP --hidden is the embedding width, --intermediate the\n"
    "                       hidden width and --layers the hidden layer count\n"
    "  --model-config FILE  a Hugging Face BERT config.json instead of the flags\n"
    "  --init DIR           fine-tune a Hugging Face BERT directory (config.json,\n"
    "                       model.safetensors, vocab.txt; WordPiece tokenizer)\n"
    "  --class-weight none|inverse   cross-entropy class weights (default none)\n"
    "training:\n"
    "  --epochs N           (default 3)\n"
    "  --max-steps N        stop after N optimizer steps (overrides --epochs)\n"
    "  --seed N             split, shuffling, init and dropout (default 42)\n"
    "  --lr X --weight-decay X --batch N --warmup N\n"
    "                       values for the config's \"auto\" keys (optimizer lr and\n"
    "                       weight_decay, train_micro_batch_size_per_gpu,\n"
    "                       warmup_num_steps); total_num_steps \"auto\" is the run's\n"
    "  --eval-batch N       rows per prediction call (default: the micro batch)\n"
    "output:\n"
    "  --metrics FILE       JSON lines: one per step, a last one with \"eval\"\n"
    "  --save-dir DIR       config.json + model.safetensors + vocab.txt, loadable\n"
    "                       by predict and by transformers\n"
    "checkpoints:\n"
    "  --save-steps N       save a training checkpoint every N optimizer steps and at\n"
    "                       the end (crash-safe; zero_to_fp32 converts one to\n"
    "                       safetensors)\n"
    "  --ckpt-dir DIR       where checkpoints go (default SAVE_DIR/checkpoints)\n"
    "  --resume             continue from the checkpoint CKPT_DIR/latest names, on any\n"
    "                       number of ranks (start from step 0 when there is none)\n"
    "  --save-on-signal SIG besides SIGTERM, save a checkpoint and exit on SIG (USR1,\n"
    "                       USR2, INT, HUP, XCPU, PWR; e.g. Slurm's sbatch\n"
    "                       --signal=USR1@90); also zero_engine.save_on_signal\n"
    "\n"
    "On SIGTERM (and SIG) every rank saves a checkpoint at the next step boundary\n"
    "and train_cls exits 128 + the signal (143 for SIGTERM) within\n"
    "zero_engine.preempt_deadline_s (default 30 s); --resume continues from it.\n";

enum {
    O_CONFIG = 256, O_DATA, O_EVAL_DATA, O_DEV_RATIO, O_EPOCHS, O_MAX_STEPS, O_MAX_SEQ,
    O_SEED, O_SAVE, O_METRICS, O_MODEL, O_LAYERS, O_HIDDEN, O_HEADS, O_INTER, O_DROPOUT,
    O_MODEL_CONFIG, O_VOCAB, O_INIT, O_CLASS_WEIGHT, O_LR, O_WD, O_BATCH, O_WARMUP,
    O_EVAL_BATCH, O_MIN_CHAR, O_LABELS, O_DROP_CONFLICTS, O_SAVE_STEPS, O_CKPT_DIR, O_RESUME,
    O_SAVE_ON_SIGNAL, O_HELP
};

static const struct option k_long[] = {
    {"config", required_argument, 0, O_CONFIG},
    {"data", required_argument, 0, O_DATA},
    {"eval-data", required_argument, 0, O_EVAL_DATA},
    {"dev-ratio", required_argument, 0, O_DEV_RATIO},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"max-steps", required_argument, 0, O_MAX_STEPS},
    {"max-seq-len", required_argument, 0, O_MAX_SEQ},
    {"seed", required_argument, 0, O_SEED},
    {"save-dir", required_argument, 0, O_SAVE},
    {"metrics", required_argument, 0, O_METRICS},
    {"model", required_argument, 0, O_MODEL},
    {"layers", required_argument, 0, O_LAYERS},
    {"hidden", required_argument, 0, O_HIDDEN},
    {"heads", required_argument, 0, O_HEADS},
    {"intermediate", required_argument, 0, O_INTER},
    {"dropout", required_argument, 0, O_DROPOUT},
    {"model-config", required_argument, 0, O_MODEL_CONFIG},
    {"vocab", required_argument, 0, O_VOCAB},
    {"init", required_argument, 0, O_INIT},
    {"class-weight", required_argument, 0, O_CLASS_WEIGHT},
    {"lr", required_argument, 0, O_LR},
    {"weight-decay", required_argument, 0, O_WD},
    {"batch", required_argument, 0, O_BATCH},
    {"warmup", required_argument, 0, O_WARMUP},
    {"eval-batch", required_argument, 0, O_EVAL_BATCH},
    {"min-char-count", required_argument, 0, O_MIN_CHAR},
    {"labels", required_argument, 0, O_LABELS},
    {"drop-conflicts", no_argument, 0, O_DROP_CONFLICTS},
    {"save-steps", required_argument, 0, O_SAVE_STEPS},
    {"ckpt-dir", required_argument, 0, O_CKPT_DIR},
    {"resume", no_argument, 0, O_RESUME},
    {"save-on-signal", required_argument, 0, O_SAVE_ON_SIGNAL},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

static int bad(const char *flag, const char *value, const char *want) {
    fprintf(stderr, "train_cls: --%s %s: %s (see train_cls --help)\n", flag, value, want);
    return 2;
}

/* Integer in [lo, hi] or a usage error naming the flag. */
static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        char want[96];
        snprintf(want, sizeof want, "must be an integer in %lld..%lld", (long long)lo,
                 (long long)hi);
        return bad(flag, v, want);
    }
    *out = x;
    return -1;
}

static int parse_f64(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || end == v || !(x >= lo && x <= hi)) {
        char want[96];
        snprintf(want, sizeof want, "must be a number in [%g, %g]", lo, hi);
        return bad(flag, v, want);
    }
    *out = x;
    return -1;
}

static int split_labels(const char *v, tc_opts *o) {
    char *copy = strdup(v);
    if (!copy) return bad("labels", v, "out of memory");
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        char **grown = realloc(o->labels, (size_t)(o->n_labels + 1) * sizeof *grown);
        if (!grown) {
            free(copy);
            return bad("labels", v, "out of memory");
        }
        o->labels = grown;
        o->labels[o->n_labels++] = strdup(tok);
    }
    free(copy);
    return o->n_labels > 0 ? -1 : bad("labels", v, "needs at least one label");
}

int tc_opts_parse(int argc, char **argv, tc_opts *o) {
    memset(o, 0, sizeof *o);
    o->model = "bert";
    o->dev_ratio = 0.1;
    o->epochs = 3;
    o->max_seq_len = 64;
    o->seed = 42;
    o->layers = 4;
    o->hidden = 256;
    o->heads = 4;
    o->intermediate = 1024;
    o->dropout = 0.1f;
    o->lr = -1;
    o->weight_decay = -1;
    o->warmup = -1;
    o->min_char_count = 2;
    int64_t i;
    double x;
    int rc, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", k_long, NULL)) != -1) {
        const char *v = optarg, *flag = c >= 256 && c <= O_HELP ? k_long[c - 256].name : "?";
        rc = -1;
        switch (c) {
        case O_CONFIG: o->config = v; break;
        case O_DATA: o->data = v; break;
        case O_EVAL_DATA: o->eval_data = v; break;
        case O_SAVE: o->save_dir = v; break;
        case O_METRICS: o->metrics = v; break;
        case O_MODEL_CONFIG: o->model_config = v; break;
        case O_VOCAB: o->vocab = v; break;
        case O_INIT: o->init_dir = v; break;
        case O_DROP_CONFLICTS: o->drop_conflicts = true; break;
        case O_SAVE_STEPS: rc = parse_i64(flag, v, 1, INT64_MAX, &o->save_steps); break;
        case O_CKPT_DIR: o->ckpt_dir = v; break;
        case O_RESUME: o->resume = true; break;
        case O_SAVE_ON_SIGNAL:
            o->save_on_signal = ds_signal_from_name(v);
            if (!o->save_on_signal)
                rc = bad(flag, v, "must be a signal name: USR1, USR2, TERM, INT, HUP, XCPU or PWR "
                         "(SIG may be given)");
            break;
        case O_LABELS: rc = split_labels(v, o); break;
        case O_MODEL:
            if (strcmp(v, "bert") && strcmp(v, "mlp")) rc = bad(flag, v, "must be bert or mlp");
            o->model = v;
            break;
        case O_CLASS_WEIGHT:
            if (strcmp(v, "none") && strcmp(v, "inverse"))
                rc = bad(flag, v, "must be none or inverse");
            o->class_weight_inverse = !strcmp(v, "inverse");
            break;
        case O_DEV_RATIO: rc = parse_f64(flag, v, 0.0, 0.99, &o->dev_ratio); break;
        case O_DROPOUT:
            rc = parse_f64(flag, v, 0.0, 0.95, &x);
            o->dropout = (float)x;
            o->dropout_set = true;
            break;
        case O_LR: rc = parse_f64(flag, v, 1e-12, 10.0, &o->lr); break;
        case O_WD: rc = parse_f64(flag, v, 0.0, 10.0, &o->weight_decay); break;
        case O_MAX_STEPS: rc = parse_i64(flag, v, 1, INT64_MAX, &o->max_steps); break;
        case O_SEED:
            rc = parse_i64(flag, v, 0, INT64_MAX, &i);
            o->seed = (uint64_t)i;
            break;
        case O_BATCH: rc = parse_i64(flag, v, 1, 1 << 20, &o->batch); break;
        case O_WARMUP: rc = parse_i64(flag, v, 0, INT64_MAX, &o->warmup); break;
        case O_EPOCHS: case O_MAX_SEQ: case O_LAYERS: case O_HIDDEN: case O_HEADS:
        case O_INTER: case O_EVAL_BATCH: case O_MIN_CHAR:
            rc = parse_i64(flag, v, c == O_MAX_SEQ ? 2 : 1, 1 << 20, &i);
            if (c == O_EPOCHS) o->epochs = (int)i;
            if (c == O_MAX_SEQ) o->max_seq_len = (int)i;
            if (c == O_LAYERS) o->layers = (int)i;
            if (c == O_HIDDEN) o->hidden = (int)i;
            if (c == O_HEADS) o->heads = (int)i;
            if (c == O_INTER) o->intermediate = (int)i;
            if (c == O_EVAL_BATCH) o->eval_batch = (int)i;
            if (c == O_MIN_CHAR) o->min_char_count = (int)i;
            break;
        case O_HELP: fputs(k_usage, stdout); return 0;
        default:
            fprintf(stderr, "train_cls: unknown or incomplete option %s (see train_cls --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (rc >= 0) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "train_cls: unexpected argument %s (see train_cls --help)\n", argv[optind]);
        return 2;
    }
    if (!o->config) {
        fprintf(stderr, "train_cls: --config is required (engine-run passes it)\n");
        return 2;
    }
    if (!o->data) {
        fprintf(stderr, "train_cls: --data is required\n");
        return 2;
    }
    if (o->init_dir && o->vocab) {
        fprintf(stderr, "train_cls: --init brings its own vocab.txt; drop --vocab\n");
        return 2;
    }
    if (!o->eval_batch) o->eval_batch = o->batch > 0 ? (int)o->batch : 32;
    if (!o->ckpt_dir && o->save_dir) {
        snprintf(o->ckpt_dir_buf, sizeof o->ckpt_dir_buf, "%s/checkpoints", o->save_dir);
        o->ckpt_dir = o->ckpt_dir_buf;
    }
    if ((o->save_steps > 0 || o->resume) && !o->ckpt_dir) {
        fprintf(stderr, "train_cls: --%s needs --ckpt-dir or --save-dir (see train_cls --help)\n",
                o->resume ? "resume" : "save-steps");
        return 2;
    }
    return -1;
}

void tc_opts_free(tc_opts *o) {
    for (int k = 0; k < o->n_labels; k++) free(o->labels[k]);
    free(o->labels);
    o->labels = NULL;
}
