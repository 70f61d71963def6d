/* predict: classify texts with a model saved by train_cls --save-dir.
 *
 *   predict --model run1 "今天真开心" "气死我了"
 *   printf '今天真开心\n' | predict --model run1
 *
 * One output line per input text: the predicted label, a tab, then every
 * class's probability (softmax of the logits) in class order. The model
 * loading is in tools/common/predict_model.c. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/status.h"
#include "tools/common/predict_model.h"

static const char k_usage[] =
    "usage: predict --model PATH [--vocab FILE] [--batch N] [--max-seq-len N] [--logits]\n"
    "               [TEXT...]\n"
    "\n"
    "Classify each TEXT, or each line of standard input when no TEXT is given\n"
    "(UTF-8; a trailing \\r is dropped; an empty line is classified too, so\n"
    "output lines match input lines one to one).\n"
    "\n"
    "  --model PATH       one of:\n"
    "                     - a directory written by train_cls --save-dir: config.json\n"
    "                       (with its \"zero_engine\" object naming the tokenizer),\n"
    "                       model.safetensors (or model.safetensors.index.json and\n"
    "                       its shards) and vocab.txt;\n"
    "                     - a weights file (.safetensors, or a safetensors index\n"
    "                       .json) whose directory holds that config.json; the\n"
    "                       vocabulary is --vocab, else vocab.txt in that directory.\n"
    "                     A ZeRO checkpoint becomes such a directory with\n"
    "                       zero_to_fp32 CKPT_DIR OUT    (OUT/model.safetensors, or\n"
    "                                                     shards and their index)\n"
    "                       cp RUN/config.json RUN/vocab.txt OUT/\n"
    "                     where RUN is the training run's --save-dir (train_cls\n"
    "                     writes both files there).\n"
    "  --vocab FILE       vocabulary to use instead of vocab.txt (char or WordPiece,\n"
    "                     as config.json's zero_engine.tokenizer says)\n"
    "  --batch N          texts per forward pass (default 32)\n"
    "  --max-seq-len N    tokens per text incl. [CLS] and [SEP]; longer texts are\n"
    "                     truncated (default: the max_seq_len the model was trained\n"
    "                     with; at most max_position_embeddings)\n"
    "  --logits           add a third tab-separated field: the raw logits,\n"
    "                     class=value with 9 significant digits (float32 exactly)\n"
    "  --help             this text\n"
    "\n"
    "output, one line per text, classes in the model's order (config.json id2label):\n"
    "  LABEL<TAB>class0=P0 class1=P1 ...[<TAB>class0=L0 class1=L1 ...]\n"
    "probabilities with 6 decimals. Every batch is padded to max-seq-len, so a\n"
    "text's result does not depend on --batch or on the other texts.\n"
    "exit status: 0 done, 1 a model or input error (one line on stderr naming the\n"
    "file, or the argument / stdin line), 2 a usage error.\n";

enum { O_MODEL = 256, O_VOCAB, O_BATCH, O_MAX_SEQ, O_LOGITS, O_HELP };

static const struct option k_long[] = {
    {"model", required_argument, 0, O_MODEL},
    {"vocab", required_argument, 0, O_VOCAB},
    {"batch", required_argument, 0, O_BATCH},
    {"max-seq-len", required_argument, 0, O_MAX_SEQ},
    {"logits", no_argument, 0, O_LOGITS},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "predict: %s%s (see predict --help)\n", msg, arg ? arg : "");
    return 2;
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "predict: %s %s: must be an integer in %d..%d (see predict --help)\n", flag,
                v, lo, hi);
        return 2;
    }
    *out = (int)x;
    return -1;
}

typedef struct run_state {
    pd_model *m;
    int C;
    bool print_logits;
    float *logits;  /* [batch, C] */
    double *probs;  /* [C] */
} run_state;

/* Softmax in double, shifted by the largest logit so exp never overflows. */
static int softmax_argmax(const float *l, int C, double *p) {
    int best = 0;
    for (int c = 1; c < C; c++)
        if (l[c] > l[best]) best = c;
    double sum = 0.0;
    for (int c = 0; c < C; c++) sum += p[c] = exp((double)l[c] - (double)l[best]);
    for (int c = 0; c < C; c++) p[c] /= sum;
    return best;
}

/* Classify texts[0..n) and print one line each. `where` names the source of
 * texts[0] for an error message ("argument 3", "stdin line 7"), `first` its
 * number; text i is number first + i. */
static int classify(run_state *r, const char *const *texts, int n, const char *where, long first) {
    int bad;
    if (pd_model_logits(r->m, texts, n, r->logits, &bad) != DS_OK) {
        if (bad >= 0) fprintf(stderr, "predict: %s %ld: %s\n", where, first + bad, ds_last_error());
        else fprintf(stderr, "predict: %s\n", ds_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const float *l = r->logits + (size_t)i * r->C;
        int best = softmax_argmax(l, r->C, r->probs);
        printf("%s\t", pd_model_class_name(r->m, best));
        for (int c = 0; c < r->C; c++)
            printf("%s%s=%.6f", c ? " " : "", pd_model_class_name(r->m, c), r->probs[c]);
        if (r->print_logits) {
            putchar('\t');
            for (int c = 0; c < r->C; c++)
                printf("%s%s=%.9g", c ? " " : "", pd_model_class_name(r->m, c), (double)l[c]);
        }
        putchar('\n');
    }
    return 0;
}

/* Lines of stdin in batches; line by line when a person types them, so each
 * answer comes at once. */
static int run_stdin(run_state *r) {
    int batch = isatty(0) ? 1 : pd_model_batch(r->m);
    char **lines = calloc((size_t)batch, sizeof *lines);
    size_t *caps = calloc((size_t)batch, sizeof *caps);
    int rc = 0, n = 0;
    long lineno = 0;
    if (!lines || !caps) {
        fprintf(stderr, "predict: out of memory\n");
        rc = 1;
    }
    while (rc == 0) {
        ssize_t len = getline(&lines[n], &caps[n], stdin);
        if (len >= 0) {
            lineno++;
            if (len > 0 && lines[n][len - 1] == '\n') lines[n][--len] = '\0';
            if (len > 0 && lines[n][len - 1] == '\r') lines[n][--len] = '\0';
            n++;
        }
        if (n == batch || (len < 0 && n > 0)) {
            rc = classify(r, (const char *const *)lines, n, "stdin line", lineno - n + 1);
            fflush(stdout);
            n = 0;
        }
        if (len < 0) {
            if (ferror(stdin)) {
                fprintf(stderr, "predict: reading stdin: %s\n", strerror(errno));
                rc = 1;
            }
            break;
        }
    }
    for (int i = 0; lines && i < batch; i++) free(lines[i]);
    free(lines);
    free(caps);
    return rc;
}

int main(int argc, char **argv) {
    pd_opts o = {.batch = 32};
    bool print_logits = false;
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", k_long, NULL)) != -1) {
        rc = -1;
        switch (c) {
        case O_MODEL: o.model_path = optarg; break;
        case O_VOCAB: o.vocab_path = optarg; break;
        case O_BATCH: rc = parse_int("--batch", optarg, 1, 1 << 16, &o.batch); break;
        case O_MAX_SEQ: rc = parse_int("--max-seq-len", optarg, 2, 1 << 16, &o.max_seq_len); break;
        case O_LOGITS: print_logits = true; break;
        case O_HELP: fputs(k_usage, stdout); return 0;
        default: return usage_error("unknown or incomplete option ", argv[optind - 1]);
        }
        if (rc >= 0) return rc;
    }
    if (!o.model_path) return usage_error("--model PATH is required", NULL);

    run_state r = {.print_logits = print_logits};
    if (pd_model_open(&o, &r.m) != DS_OK) {
        fprintf(stderr, "predict: %s\n", ds_last_error());
        return 1;
    }
    r.C = pd_model_n_classes(r.m);
    r.logits = malloc((size_t)o.batch * (size_t)r.C * sizeof *r.logits);
    r.probs = malloc((size_t)r.C * sizeof *r.probs);
    if (!r.logits || !r.probs) {
        fprintf(stderr, "predict: out of memory\n");
        rc = 1;
    } else if (optind < argc) {
        rc = 0;
        for (int i = optind; rc == 0 && i < argc; i += o.batch) {
            int n = argc - i < o.batch ? argc - i : o.batch;
            rc = classify(&r, (const char *const *)(argv + i), n, "argument", i - optind + 1);
        }
    } else {
        rc = run_stdin(&r);
    }
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "predict: writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    free(r.logits);
    free(r.probs);
    pd_model_close(r.m);
    return rc;
}
