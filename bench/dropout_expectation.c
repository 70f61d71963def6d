/* Does the engine's dropout have the same expectation as PyTorch's? At fixed
 * trained weights and one fixed batch, average the training-mode loss and the
 * gradients of a few tensors over K dropout draws; the Python half does the
 * same in PyTorch and compares (bench/RESULTS.md, "Dropout: same expectation
 * as PyTorch"):
 *
 *   python3 bench/dropout_expectation.py --model DIR --data DATA --write-batch B.bin
 *   build/bench/dropout_expectation --model DIR --batch B.bin --out E.safetensors
 *                                   [--draws K] [--seed S] [--tensor NAME]...
 *   python3 bench/dropout_expectation.py --model DIR --batch B.bin --engine E.safetensors
 *
 * DIR is a train_cls --save-dir folder (config.json with id2label,
 * model.safetensors). B.bin is the batch file the Python half writes, all
 * little-endian:
 *
 *   8 bytes "DXBATCH\0", int32 version (1), int32 B, int32 T, int32 C,
 *   int32 tokens[B*T], float32 mask[B*T], int32 labels[B]
 *
 * with labels indexing config.json's id2label (so both sides use the model's
 * class order). Output: the eval loss (no dropout), the mean and standard
 * error of the training-mode loss over the K draws, and E.safetensors holding
 * the mean gradient of each --tensor (Hugging Face names; default
 * classifier.weight, bert.encoder.layer.0.attention.self.query.weight,
 * bert.embeddings.LayerNorm.weight) with those figures as metadata.
 *
 * Each draw is ds_forward + ds_backward + ds_step at lr 0 and weight decay 0:
 * the step clears the gradients and advances the step counter, which gives
 * the next forward fresh dropout masks, but leaves the weights where they
 * are (checked: the eval loss after the K draws must equal the one before,
 * bit for bit). One process, world size 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/io/safetensors.h"
#include "hf/hf.h"
#include "models/models.h"

#define MAX_TENSORS 8
#define BATCH_MAGIC "DXBATCH" /* + its terminating NUL: 8 bytes */
#define BATCH_VERSION 1

static const char *const k_default_tensors[] = {
    "classifier.weight",
    "bert.encoder.layer.0.attention.self.query.weight",
    "bert.embeddings.LayerNorm.weight",
};

typedef struct opts {
    const char *model_dir, *batch_path, *out_path;
    int draws;
    unsigned long long seed;
    int n_tensors;
    const char *tensors[MAX_TENSORS];
} opts;

typedef struct dx_batch {
    int B, T, C;
    int32_t *tokens; /* [B*T] */
    float *mask;     /* [B*T] */
    int32_t *labels; /* [B] */
} dx_batch;

static void dx_batch_free(dx_batch *b) {
    free(b->tokens);
    free(b->mask);
    free(b->labels);
    memset(b, 0, sizeof *b);
}

static ds_status read_exact(FILE *f, void *dst, size_t size, size_t n, const char *path,
                            const char *what) {
    if (fread(dst, size, n, f) != n)
        return DS_ERR(DS_ERR_DATA, "%s: truncated batch file (reading %s)", path, what);
    return DS_OK;
}

/* The batch file described at the top; every field range-checked. */
static ds_status dx_batch_read(const char *path, int vocab_size, dx_batch *b) {
    memset(b, 0, sizeof *b);
    FILE *f = fopen(path, "rb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot open the batch file", path);
    ds_status st = DS_OK;
    char magic[8];
    int32_t head[4];
    DS_TRY_GOTO(st, read_exact(f, magic, 1, sizeof magic, path, "the magic"), out);
    if (memcmp(magic, BATCH_MAGIC, sizeof magic) != 0) {
        st = DS_ERR(DS_ERR_DATA, "%s: not a batch file of bench/dropout_expectation.py", path);
        goto out;
    }
    DS_TRY_GOTO(st, read_exact(f, head, sizeof head[0], 4, path, "the header"), out);
    if (head[0] != BATCH_VERSION) {
        st = DS_ERR(DS_ERR_DATA, "%s: batch file version %d, this program reads %d", path,
                    (int)head[0], BATCH_VERSION);
        goto out;
    }
    b->B = head[1], b->T = head[2], b->C = head[3];
    /* The bounds only reject nonsense headers: 4096 x 4096 is far above any
     * batch this diagnostic runs, and keeps B*T inside an int. */
    if (b->B < 1 || b->B > 4096 || b->T < 2 || b->T > 4096 || b->C < 2) {
        st = DS_ERR(DS_ERR_DATA, "%s: implausible header B %d T %d C %d", path, b->B, b->T, b->C);
        goto out;
    }
    size_t bt = (size_t)b->B * (size_t)b->T;
    b->tokens = malloc(bt * sizeof *b->tokens);
    b->mask = malloc(bt * sizeof *b->mask);
    b->labels = malloc((size_t)b->B * sizeof *b->labels);
    if (!b->tokens || !b->mask || !b->labels) {
        st = DS_ERR(DS_ERR_OOM, "%s: batch of %d x %d", path, b->B, b->T);
        goto out;
    }
    DS_TRY_GOTO(st, read_exact(f, b->tokens, sizeof *b->tokens, bt, path, "tokens"), out);
    DS_TRY_GOTO(st, read_exact(f, b->mask, sizeof *b->mask, bt, path, "mask"), out);
    DS_TRY_GOTO(st, read_exact(f, b->labels, sizeof *b->labels, (size_t)b->B, path, "labels"), out);
    if (fgetc(f) != EOF) {
        st = DS_ERR(DS_ERR_DATA, "%s: bytes after the labels of a %d x %d batch", path, b->B, b->T);
        goto out;
    }
    for (size_t i = 0; i < bt; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= vocab_size) {
            st = DS_ERR(DS_ERR_DATA, "%s: token %d at row %zu, position %zu: the model's vocab has %d",
                        path, (int)b->tokens[i], i / (size_t)b->T, i % (size_t)b->T, vocab_size);
            goto out;
        }
        if (b->mask[i] != 0.0f && b->mask[i] != 1.0f) {
            st = DS_ERR(DS_ERR_DATA, "%s: mask %g at row %zu, position %zu: must be 0 or 1", path,
                        (double)b->mask[i], i / (size_t)b->T, i % (size_t)b->T);
            goto out;
        }
    }
    for (int r = 0; r < b->B; r++)
        if (b->labels[r] < 0 || b->labels[r] >= b->C) {
            st = DS_ERR(DS_ERR_DATA, "%s: label %d at row %d: the batch has %d classes", path,
                        (int)b->labels[r], r, b->C);
            goto out;
        }
out:
    fclose(f);
    if (st != DS_OK) dx_batch_free(b);
    return st;
}

static const ds_param_desc *find_param(const ds_model *m, const char *name) {
    for (int i = 0; i < m->n_modules; i++)
        for (int j = 0; j < m->modules[i]->n_params; j++)
            if (!strcmp(m->modules[i]->params[j].name, name)) return &m->modules[i]->params[j];
    return NULL;
}

/* Mean cross-entropy of the batch without dropout, in double from the
 * engine's fp32 logits (logits: B*C floats of scratch). */
static ds_status eval_loss(engine_t *e, const ds_batch *bt, int C, float *logits, double *out) {
    DS_TRY(ds_predict(e, bt, logits));
    double sum = 0;
    for (int i = 0; i < bt->B; i++) {
        const float *z = logits + (size_t)i * C;
        double mx = z[0], s = 0;
        for (int c = 1; c < C; c++) mx = z[c] > mx ? z[c] : mx;
        for (int c = 0; c < C; c++) s += exp(z[c] - mx);
        sum += -(z[ds_batch_i32(bt, "labels")[i]] - mx - log(s));
    }
    *out = sum / bt->B;
    return DS_OK;
}

/* The mean gradients acc[k] / K as float into OUT, with the loss figures
 * as metadata (strings, as safetensors wants them). */
static ds_status write_means(const char *path, const opts *o, const ds_param_desc *const *pd,
                             double *const *acc, float *buf, double el, double mean, double sd) {
    ds_st_decl decl[MAX_TENSORS];
    for (int k = 0; k < o->n_tensors; k++) {
        decl[k].name = o->tensors[k];
        decl[k].dtype = DS_ST_F32;
        decl[k].ndim = pd[k]->ndim;
        for (int d = 0; d < pd[k]->ndim; d++) decl[k].shape[d] = pd[k]->shape[d];
    }
    char v_el[32], v_mean[32], v_sd[32], v_k[32], v_seed[32];
    snprintf(v_el, sizeof v_el, "%.9g", el);
    snprintf(v_mean, sizeof v_mean, "%.9g", mean);
    snprintf(v_sd, sizeof v_sd, "%.9g", sd);
    snprintf(v_k, sizeof v_k, "%d", o->draws);
    snprintf(v_seed, sizeof v_seed, "%llu", o->seed);
    ds_st_kv meta[] = {{"eval_loss", v_el}, {"train_loss_mean", v_mean}, {"train_loss_sd", v_sd},
                       {"draws", v_k}, {"seed", v_seed}};
    ds_st_writer *w;
    DS_TRY(ds_st_writer_open(path, decl, o->n_tensors, meta, (int)(sizeof meta / sizeof meta[0]), &w));
    for (int k = 0; k < o->n_tensors; k++) {
        int64_t n = ds_param_numel(pd[k]);
        for (int64_t j = 0; j < n; j++) buf[j] = (float)(acc[k][j] / o->draws);
        ds_status st = ds_st_writer_write_f32(w, buf, (size_t)n);
        if (st != DS_OK) {
            ds_st_writer_abort(w);
            DS_TRY(st);
        }
    }
    DS_TRY(ds_st_writer_finish(w));
    return DS_OK;
}

static ds_status run(const opts *o) {
    char cfg_path[4096];
    if ((size_t)snprintf(cfg_path, sizeof cfg_path, "%s/config.json", o->model_dir) >= sizeof cfg_path)
        return DS_ERR(DS_ERR_INVALID_ARG, "--model: path too long");
    ds_bert_desc d;
    DS_TRY(ds_hf_bert_config_read(cfg_path, 0, &d)); /* classes: id2label's */
    dx_batch b;
    DS_TRY(dx_batch_read(o->batch_path, d.vocab_size, &b));
    if (b.C != d.n_classes) {
        dx_batch_free(&b);
        return DS_ERR(DS_ERR_DATA, "%s: %d classes, %s has %d", o->batch_path, b.C, cfg_path,
                      d.n_classes);
    }
    if (b.T > d.max_position_embeddings) {
        dx_batch_free(&b);
        return DS_ERR(DS_ERR_DATA, "%s: %d positions, %s allows %d", o->batch_path, b.T, cfg_path,
                      d.max_position_embeddings);
    }
    d.max_seq_len = b.T;

    ds_status st = DS_OK;
    engine_t *e = NULL;
    float *logits = NULL, *buf = NULL;
    double *draw_loss = NULL;
    double *acc[MAX_TENSORS] = {0};
    const ds_param_desc *pd[MAX_TENSORS];
    ds_hf_load_report rep;
    memset(&rep, 0, sizeof rep);
    ds_model *m;
    DS_TRY_GOTO(st, ds_bert_create(&d, &m), out);

    /* lr 0 and no weight decay: ds_step leaves the weights alone (see top). */
    char config[256];
    snprintf(config, sizeof config,
             "{\"train_batch_size\": %d, \"optimizer\": {\"type\": \"AdamW\", "
             "\"params\": {\"lr\": 0.0, \"weight_decay\": 0.0}}}",
             b.B);
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = config;
    id.model = m;
    id.seed = o->seed;
    id.quiet = true;
    DS_TRY_GOTO(st, ds_initialize(&id, &e), out);
    if (ds_world_size(e) != 1) {
        st = DS_ERR(DS_ERR_INVALID_ARG, "run as one process (world size %d): the batch is not split",
                    ds_world_size(e));
        goto out;
    }
    DS_TRY_GOTO(st, ds_hf_load_weights(ds_get_model(e), o->model_dir, ds_set_param_cb, e, &rep), out);
    if (rep.n_missing > 0 || rep.n_unexpected > 0) {
        st = DS_ERR(DS_ERR_DATA, "%s: %d parameters missing (first %s), %d tensors unexpected: "
                    "the weights must be exactly the model's", rep.source, rep.n_missing,
                    rep.n_missing ? rep.missing[0] : "-", rep.n_unexpected);
        goto out;
    }

    size_t max_numel = 0;
    for (int k = 0; k < o->n_tensors; k++) {
        pd[k] = find_param(ds_get_model(e), o->tensors[k]);
        if (!pd[k]) {
            st = DS_ERR(DS_ERR_INVALID_ARG, "--tensor %s: no such parameter in the model", o->tensors[k]);
            goto out;
        }
        size_t n = (size_t)ds_param_numel(pd[k]);
        max_numel = n > max_numel ? n : max_numel;
        if (!(acc[k] = calloc(n, sizeof *acc[k]))) {
            st = DS_ERR(DS_ERR_OOM, "%s: %zu accumulators", o->tensors[k], n);
            goto out;
        }
    }
    logits = malloc((size_t)b.B * (size_t)b.C * sizeof *logits);
    buf = malloc(max_numel * sizeof *buf);
    if (!logits || !buf) {
        st = DS_ERR(DS_ERR_OOM, "logits and a gradient buffer of %zu floats", max_numel);
        goto out;
    }

    ds_batch bt = {.B = b.B, .T = b.T};
    DS_TRY_GOTO(st, ds_batch_set(&bt, "input_ids", DS_I32, b.tokens), out);
    DS_TRY_GOTO(st, ds_batch_set(&bt, "attention_mask", DS_F32, b.mask), out);
    DS_TRY_GOTO(st, ds_batch_set(&bt, "labels", DS_I32, b.labels), out);
    double el0, el1;
    DS_TRY_GOTO(st, eval_loss(e, &bt, b.C, logits, &el0), out);
    if (!(draw_loss = malloc((size_t)o->draws * sizeof *draw_loss))) {
        st = DS_ERR(DS_ERR_OOM, "%d per-draw losses", o->draws);
        goto out;
    }
    for (int it = 0; it < o->draws; it++) {
        float loss;
        DS_TRY_GOTO(st, ds_forward(e, &bt, &loss), out);
        DS_TRY_GOTO(st, ds_backward(e), out);
        for (int k = 0; k < o->n_tensors; k++) {
            size_t n = (size_t)ds_param_numel(pd[k]);
            DS_TRY_GOTO(st, ds_get_grad(e, o->tensors[k], buf, n), out);
            for (size_t j = 0; j < n; j++) acc[k][j] += buf[j];
        }
        DS_TRY_GOTO(st, ds_step(e), out);
        draw_loss[it] = loss;
    }
    DS_TRY_GOTO(st, eval_loss(e, &bt, b.C, logits, &el1), out);
    if (el1 != el0) {
        st = DS_ERR(DS_ERR_INTERNAL, "the weights moved during the draws: eval loss %.9g before, "
                    "%.9g after (a step at lr 0 must not change them)", el0, el1);
        goto out;
    }
    int K = o->draws;
    double mean = 0, ss = 0;
    for (int i = 0; i < K; i++) mean += draw_loss[i] / K;
    for (int i = 0; i < K; i++) ss += (draw_loss[i] - mean) * (draw_loss[i] - mean);
    /* sample standard deviation (K - 1), as numpy's std(ddof=1) on the other side */
    double sd = K > 1 ? sqrt(ss / (K - 1)) : 0.0;
    printf("dropout_expectation: engine, batch %d x %d, %d classes, %d draws, seed %llu\n", b.B, b.T,
           b.C, K, o->seed);
    printf("eval_loss %.7f\n", el0);
    printf("train_loss_mean %.5f sd %.5f se %.5f\n", mean, sd, sd / sqrt((double)K));
    /* Fresh masks every step: successive draws' losses must be uncorrelated
     * (|r| within ~2/sqrt(K) of 0); a mask reused or drawn from a stream that
     * advanced too little would show as a positive lag-1 correlation. */
    printf("loss autocorrelation, lags 1 2 3:");
    for (int lag = 1; lag <= 3 && lag < K; lag++) {
        double c = 0;
        for (int i = 0; i + lag < K; i++) c += (draw_loss[i] - mean) * (draw_loss[i + lag] - mean);
        printf(" %.3f", ss > 0 ? c / (K - lag) / (ss / K) : 0.0);
    }
    printf(" (noise ~ +-%.3f)\n", 2.0 / sqrt((double)K));
    DS_TRY_GOTO(st, write_means(o->out_path, o, pd, acc, buf, el0, mean, sd), out);
    printf("mean gradients of %d tensors written to %s\n", o->n_tensors, o->out_path);
out:
    for (int k = 0; k < o->n_tensors; k++) free(acc[k]);
    free(draw_loss);
    free(logits);
    free(buf);
    ds_hf_load_report_free(&rep);
    ds_finalize(e); /* safe on NULL; the engine owns the model, also after a failed init */
    dx_batch_free(&b);
    return st;
}

static const char k_usage[] =
    "usage: dropout_expectation --model DIR --batch FILE --out FILE [--draws K] [--seed S]\n"
    "                           [--tensor NAME]...\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "dropout_expectation: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", k_usage);
    return 2;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    opts o = {.draws = 300, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("%s: needs a value", a);
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "--model")) o.model_dir = v;
        else if (!strcmp(a, "--batch")) o.batch_path = v;
        else if (!strcmp(a, "--out")) o.out_path = v;
        else if (!strcmp(a, "--draws")) {
            if (parse_int(v, 2, 1000000, &n)) return usage_error("--draws %s: want 2 .. 1000000", v);
            o.draws = (int)n;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            o.seed = strtoull(v, &end, 10);
            if (*v == '\0' || *end != '\0') return usage_error("--seed %s: want an integer", v);
        } else if (!strcmp(a, "--tensor")) {
            if (o.n_tensors == MAX_TENSORS) return usage_error("--tensor %s: at most 8", v);
            o.tensors[o.n_tensors++] = v;
        } else return usage_error("unknown argument %s", a);
    }
    if (!o.model_dir || !o.batch_path || !o.out_path)
        return usage_error("%s", "--model, --batch and --out are required");
    if (o.n_tensors == 0) {
        o.n_tensors = (int)(sizeof k_default_tensors / sizeof k_default_tensors[0]);
        for (int k = 0; k < o.n_tensors; k++) o.tensors[k] = k_default_tensors[k];
    }
    if (run(&o) != DS_OK) {
        fprintf(stderr, "dropout_expectation: %s\n  at %s\n", ds_last_error(), ds_last_error_trace());
        return 1;
    }
    return 0;
}
