/* train_cls's command line: its own flags, defaults and --help; the shared
 * flags are parsed by tools/common/trainer_opts.c. */
#include "tools/common/train_cls_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "  --dev-ratio R        share of rows held out for dev (default 0.1; not with\n"
    "                       --eval-data)\n"
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
    "  --epochs N           passes over the training rows (default 3)\n"
    TR_USAGE_EPOCH
    "  --max-steps N        stop after N optimizer steps (overrides --epochs)\n"
    "  --seed N             split, shuffling, init and dropout (default 42)\n"
    TR_USAGE_AUTO
    TR_USAGE_EVAL_BATCH("prediction")
    "output:\n"
    "  --metrics FILE       JSON lines: one per step, a last one with \"eval\"\n"
    "  --save-dir DIR       config.json + model.safetensors + vocab.txt, loadable\n"
    "                       by predict and by transformers\n"
    TR_USAGE_CHECKPOINTS
    TR_USAGE_HABITS("accuracy, macro_f1, weighted_f1, loss")
    "\n"
    TR_USAGE_PREEMPTION("train_cls")
    "\n"
    TR_USAGE_EXIT("train_cls");

enum {
    O_MODEL = TR_OPT_OWN, O_INTER, O_VOCAB, O_CLASS_WEIGHT, O_MAX_SEQ, O_LABELS,
    O_DROP_CONFLICTS
};

static const struct option k_own[] = {
    {"model", required_argument, 0, O_MODEL},
    {"intermediate", required_argument, 0, O_INTER},
    {"vocab", required_argument, 0, O_VOCAB},
    {"class-weight", required_argument, 0, O_CLASS_WEIGHT},
    {"max-seq-len", required_argument, 0, O_MAX_SEQ},
    {"labels", required_argument, 0, O_LABELS},
    {"drop-conflicts", no_argument, 0, O_DROP_CONFLICTS},
    {0, 0, 0, 0},
};

static int split_labels(const tr_cli *c, const char *v, tc_opts *o) {
    char *copy = strdup(v);
    if (!copy) return tr_opt_bad(c, "labels", v, "out of memory");
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        char **grown = realloc(o->labels, (size_t)(o->n_labels + 1) * sizeof *grown);
        if (!grown) {
            free(copy);
            return tr_opt_bad(c, "labels", v, "out of memory");
        }
        o->labels = grown;
        o->labels[o->n_labels++] = strdup(tok);
    }
    free(copy);
    return o->n_labels > 0 ? -1 : tr_opt_bad(c, "labels", v, "needs at least one label");
}

static int take(const tr_cli *c, void *user, int id, const char *flag, const char *v) {
    tc_opts *o = user;
    switch (id) {
    case O_VOCAB: o->vocab = v; break;
    case O_DROP_CONFLICTS: o->drop_conflicts = true; break;
    case O_LABELS: return split_labels(c, v, o);
    case O_MODEL:
        o->model = v;
        if (strcmp(v, "bert") && strcmp(v, "mlp"))
            return tr_opt_bad(c, flag, v, "must be bert or mlp");
        break;
    case O_CLASS_WEIGHT:
        o->class_weight_inverse = !strcmp(v, "inverse");
        if (strcmp(v, "none") && strcmp(v, "inverse"))
            return tr_opt_bad(c, flag, v, "must be none or inverse");
        break;
    case O_MAX_SEQ: return tr_opt_int(c, flag, v, 2, 1 << 20, &o->max_seq_len);
    case O_INTER: return tr_opt_int(c, flag, v, 1, 1 << 20, &o->intermediate);
    }
    return -1;
}

static int check(const tr_cli *c, void *user) {
    tc_opts *o = user;
    if (o->tr.init_dir && o->vocab) {
        fprintf(stderr, "%s: --init brings its own vocab.txt; drop --vocab\n", c->prog);
        return 2;
    }
    if (!o->tr.eval_batch) o->tr.eval_batch = 32;
    return -1;
}

int tc_opts_parse(int argc, char **argv, tc_opts *o) {
    memset(o, 0, sizeof *o);
    tr_opts_defaults(&o->tr);
    o->tr.epochs = 3;
    o->tr.min_char_count = 2;
    o->model = "bert";
    o->max_seq_len = 64;
    o->intermediate = 1024;
    tr_cli cli = {.prog = "train_cls", .usage = k_usage, .own = k_own, .take = take,
                  .check = check, .user = o, .max_steps_min = 1,
                  .eval_metrics = "accuracy,macro_f1,weighted_f1,loss"};
    return tr_opts_parse(argc, argv, &o->tr, &cli);
}

void tc_opts_free(tc_opts *o) {
    for (int k = 0; k < o->n_labels; k++) free(o->labels[k]);
    free(o->labels);
    o->labels = NULL;
}
