/* train_cls: train a text classifier (BERT-style encoder or MLP) on labelled
 * text, data-parallel, then evaluate on the dev split with every dev sample
 * counted exactly once across ranks. Usually started by engine-run:
 *
 *   engine-run --np 2 --config configs/ds_config.json train_cls \
 *       --data ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv --epochs 3
 *
 * Every rank reads the data itself (the split and the vocabulary are
 * deterministic), the engine's sampler gives each rank its slice. The run
 * from ds_initialize to the saved weights (checkpoints, --resume, preemption,
 * --metrics) is shared with train_lm: tools/common/trainer_run.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "hf/hf.h"
#include "metrics/metrics.h"
#include "hf/saved_model.h"
#include "text/text.h"
#include "text/tokenizer.h"
#include "tools/common/train_cls_opts.h"
#include "tools/common/train_habits.h"
#include "tools/common/trainer_run.h"

/* ---- one failing line, and out ---- */
/* what NULL: the message says it all ("loading --init DIR: ..."). */
static int fail(const char *what) { return tr_fail("train_cls", what); }

/* ---- data ---- */
typedef struct data {
    ds_text_set *train_txt, *dev_txt;
    ds_tokenizer *tok;
    ds_dataset *train, *dev;
    float *class_weights; /* --class-weight inverse, else NULL */
} data;

/* The labelled text and the tokenizer: a char vocabulary built here or read
 * from --vocab. A WordPiece vocabulary from --init comes from load_init_vocab,
 * so its errors say "loading --init", not "reading data". */
static ds_status load_data(const tc_opts *o, data *d) {
    const tr_opts *t = &o->tr;
    DS_TRY(tr_check_input_file("--data", t->data));
    if (t->eval_data) DS_TRY(tr_check_input_file("--eval-data", t->eval_data));
    ds_text_read_opts ro = {0};
    ro.keep_labels = (const char *const *)o->labels;
    ro.n_keep_labels = o->n_labels;
    ro.drop_conflicts = o->drop_conflicts;
    ro.keep_labels_occur = true; /* --labels typed wrong drops a class */
    ds_text_set *all = NULL;
    ds_status rs = ds_text_read(t->data, &ro, &all);
    if (rs != DS_OK) { /* the readers name the file: say which option gave it */
        tr_error_name_flag("--data", t->data);
        return rs;
    }
    if (all->n_classes < 2) {
        ds_status st = DS_ERR(DS_ERR_DATA, "%s: %d class%s (%s) after the label filter: a "
                              "classifier needs at least 2", t->data, all->n_classes,
                              all->n_classes == 1 ? "" : "es",
                              all->n_classes ? all->class_names[0] : "none");
        ds_text_set_destroy(all);
        return st;
    }
    if (t->eval_data) {
        d->train_txt = all;
        ds_text_read_opts eo = ro;
        eo.keep_labels_occur = false; /* a dev file may lack a class */
        eo.classes = (const char *const *)all->class_names;
        eo.n_classes = all->n_classes;
        rs = ds_text_read(t->eval_data, &eo, &d->dev_txt);
        if (rs != DS_OK) tr_error_name_flag("--eval-data", t->eval_data);
        DS_TRY(rs);
    } else {
        ds_status st = ds_text_split(all, t->dev_ratio, t->seed, &d->train_txt, &d->dev_txt);
        ds_text_set_destroy(all);
        DS_TRY(st);
    }
    if (o->vocab) {
        rs = ds_char_tokenizer_load(o->vocab, &d->tok);
        if (rs != DS_OK) tr_error_name_flag("--vocab", o->vocab);
        DS_TRY(rs);
    }
    else if (!t->init_dir) DS_TRY(ds_char_vocab_build(d->train_txt, t->min_char_count, &d->tok));
    return DS_OK;
}

/* The datasets (and class weights) once the tokenizer exists. */
static ds_status tokenize_data(const tc_opts *o, data *d) {
    DS_TRY(ds_dataset_from_text(d->train_txt, d->tok, o->max_seq_len, &d->train));
    DS_TRY(ds_dataset_from_text(d->dev_txt, d->tok, o->max_seq_len, &d->dev));
    if (o->class_weight_inverse) {
        /* inverse class frequency over train, normalised to mean 1 */
        int C = d->train_txt->n_classes;
        size_t *counts = calloc((size_t)C, sizeof *counts);
        d->class_weights = calloc((size_t)C, sizeof *d->class_weights);
        if (!counts || !d->class_weights) {
            free(counts);
            return DS_ERR(DS_ERR_OOM, "class weights: out of memory");
        }
        ds_text_set_class_counts(d->train_txt, counts);
        double sum = 0;
        for (int c = 0; c < C; c++) sum += counts[c] ? 1.0 / (double)counts[c] : 0.0;
        for (int c = 0; c < C; c++)
            d->class_weights[c] = counts[c] ? (float)((1.0 / (double)counts[c]) * C / sum) : 0.0f;
        free(counts);
        /* each training row's loss weight: its class's */
        DS_TRY(ds_cls_dataset_set_class_weights(d->train, d->class_weights));
    }
    return DS_OK;
}

static void free_data(data *d) {
    ds_dataset_destroy(d->train);
    ds_dataset_destroy(d->dev);
    ds_tokenizer_destroy(d->tok);
    ds_text_set_destroy(d->train_txt);
    ds_text_set_destroy(d->dev_txt);
    free(d->class_weights);
}

/* ---- model ---- */
static ds_status make_model(const tc_opts *o, const data *d, ds_saved_model *sm, ds_model **out) {
    const tr_opts *t = &o->tr;
    memset(sm, 0, sizeof *sm);
    sm->n_classes = d->train->n_classes;
    sm->class_names = d->train->class_names; /* borrowed for writing */
    sm->max_seq_len = o->max_seq_len;
    snprintf(sm->tokenizer, sizeof sm->tokenizer, "%s", ds_tokenizer_kind(d->tok));
    const ds_wordpiece_opts *wo = ds_wordpiece_opts_of(d->tok);
    sm->do_lower_case = wo ? wo->do_lower_case : 1; /* char vocabularies ignore it */
    sm->strip_accents = wo ? wo->strip_accents : -1;
    sm->tokenize_chinese_chars = wo ? wo->tokenize_chinese_chars : 1;
    int V = ds_tokenizer_vocab_size(d->tok);
    if (!strcmp(o->model, "mlp")) {
        snprintf(sm->kind, sizeof sm->kind, "mlp");
        sm->mlp = (ds_mlp_desc){.vocab_size = V, .max_seq_len = o->max_seq_len,
                                .embed_dim = t->hidden, .hidden_dim = o->intermediate,
                                .n_hidden = t->layers > 0 ? t->layers : 1,
                                .n_classes = sm->n_classes};
        DS_TRY(ds_mlp_create(&sm->mlp, out));
        return DS_OK;
    }
    snprintf(sm->kind, sizeof sm->kind, "bert");
    ds_bert_desc *b = &sm->bert;
    if (t->init_dir || t->model_config) {
        char path[4096];
        if (t->model_config) snprintf(path, sizeof path, "%s", t->model_config);
        else snprintf(path, sizeof path, "%s/config.json", t->init_dir);
        ds_status st = ds_hf_bert_config_read(path, sm->n_classes, b);
        if (st != DS_OK && !t->model_config) ds_error_prefix("loading --init %s", t->init_dir);
        else if (st != DS_OK) tr_error_name_flag("--model-config", t->model_config);
        DS_TRY(st);
    } else {
        *b = (ds_bert_desc){.vocab_size = V, .hidden_size = t->hidden,
                            .num_hidden_layers = t->layers, .num_attention_heads = t->heads,
                            .intermediate_size = o->intermediate,
                            .max_position_embeddings = o->max_seq_len > 512 ? o->max_seq_len : 512,
                            .type_vocab_size = 2, .hidden_dropout_prob = t->dropout,
                            .attention_probs_dropout_prob = t->dropout,
                            .layer_norm_eps = 1e-12f, .initializer_range = 0.02f};
    }
    if (t->dropout_set) b->hidden_dropout_prob = b->attention_probs_dropout_prob = t->dropout;
    if (b->vocab_size < V)
        return DS_ERR(DS_ERR_INVALID_ARG, "model vocab_size %d < tokenizer vocabulary %d",
                      b->vocab_size, V);
    if (b->max_position_embeddings < o->max_seq_len)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "--max-seq-len %d exceeds the model's max_position_embeddings %d",
                      o->max_seq_len, b->max_position_embeddings);
    b->n_classes = sm->n_classes;
    b->max_seq_len = o->max_seq_len;
    DS_TRY(ds_bert_create(b, out));
    return DS_OK;
}

/* ---- evaluation ---- */
/* The confusion matrix of this rank's share of dev (tr_eval_slices), summed
 * over ranks afterwards. */
typedef struct confusion {
    engine_t *e;
    int C;
    float *logits; /* [batch, C] */
    int64_t *counts; /* [C, C]: true class x predicted class */
    double nll;      /* summed cross-entropy of the rows (no class weights) */
} confusion;

static ds_status predict_call(void *user, const ds_batch *b, const size_t *idx, int count) {
    (void)idx;
    confusion *cm = user;
    int C = cm->C;
    DS_TRY(ds_predict(cm->e, b, cm->logits));
    const int32_t *labels = ds_batch_i32(b, "labels");
    for (int r = 0; r < count; r++) {
        const float *l = cm->logits + (size_t)r * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (l[c] > l[best]) best = c;
        cm->counts[(size_t)labels[r] * C + best]++;
        double z = 0.0; /* log-sum-exp around the largest logit */
        for (int c = 0; c < C; c++) z += exp((double)l[c] - (double)l[best]);
        cm->nll += (double)l[best] + log(z) - (double)l[labels[r]];
    }
    return DS_OK;
}

static ds_status evaluate(engine_t *e, const data *d, int batch, int64_t *counts, double *nll) {
    int C = d->dev->n_classes;
    confusion cm = {.e = e, .C = C, .counts = counts,
                    .logits = malloc((size_t)batch * (size_t)C * sizeof(float))};
    memset(counts, 0, (size_t)C * (size_t)C * sizeof *counts);
    ds_status st = cm.logits ? tr_eval_slices(e, d->dev, batch, predict_call, &cm)
                             : DS_ERR(DS_ERR_OOM, "evaluation: out of memory");
    free(cm.logits);
    DS_TRY(st);
    DS_TRY(ds_all_reduce_host(e, counts, (size_t)C * (size_t)C, DS_I64));
    *nll = cm.nll;
    DS_TRY(ds_all_reduce_host(e, nll, 1, DS_F64));
    return DS_OK;
}

/* --eval-steps' evaluation (tr_evaluate_fn): accuracy, the F1s and the mean
 * cross-entropy over dev. */
static ds_status eval_during(void *user, engine_t *e, int batch, tr_eval_result *out) {
    const data *d = user;
    if (d->dev->n == 0) /* as train_lm: nothing to measure */
        return DS_ERR(DS_ERR_INVALID_ARG, "--eval-steps: the dev split has no rows (raise "
                      "--dev-ratio or give --eval-data)");
    int C = d->dev->n_classes;
    int64_t *cm = calloc((size_t)C * (size_t)C, sizeof *cm);
    double nll = 0.0;
    ds_cls_report rep;
    ds_status st = cm ? evaluate(e, d, batch, cm, &nll) : DS_ERR(DS_ERR_OOM, "out of memory");
    if (st == DS_OK) st = ds_cls_report_compute(cm, C, &rep);
    free(cm);
    DS_TRY(st);
    tr_eval_put(out, "accuracy", rep.accuracy);
    tr_eval_put(out, "macro_f1", rep.macro_f1);
    tr_eval_put(out, "weighted_f1", rep.weighted_f1);
    tr_eval_put(out, "loss", rep.total ? nll / (double)rep.total : NAN);
    out->samples = rep.total;
    ds_cls_report_free(&rep);
    return DS_OK;
}

/* ---- metrics file ---- */
/* Every rank's memory by purpose and place (rank r fills row r, a sum over
 * ranks assembles the table). Collective: every rank calls it. */
#define MEM_COLS (DS_MEM_PURPOSE_COUNT * DS_PLACE_COUNT)
static ds_status gather_memory(engine_t *e, double *table) {
    int world = ds_world_size(e);
    memset(table, 0, sizeof(double) * (size_t)world * MEM_COLS);
    ds_mem_report r;
    ds_memory_report(e, &r);
    double *row = table + (size_t)ds_rank(e) * MEM_COLS;
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        for (int l = 0; l < DS_PLACE_COUNT; l++) row[p * DS_PLACE_COUNT + l] = (double)r.bytes[p][l];
    DS_TRY(ds_all_reduce_host(e, table, (size_t)world * MEM_COLS, DS_F64));
    return DS_OK;
}

static void write_memory(tr_jline *l, engine_t *e, const double *table) {
    FILE *f = l->f;
    tr_jline_key(l, "memory_bytes");
    fputc('[', f);
    for (int k = 0; k < ds_world_size(e); k++) {
        const double *row = table + (size_t)k * MEM_COLS;
        fprintf(f, "%s{\"rank\": %d", k ? ", " : "", k);
        for (int l = 0; l < DS_PLACE_COUNT; l++) {
            fprintf(f, ", \"%s\": {", ds_mem_place_name((ds_mem_place)l));
            for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
                fprintf(f, "%s\"%s\": %.0f", p ? ", " : "", ds_mem_purpose_name((ds_mem_purpose)p),
                        row[p * DS_PLACE_COUNT + l]);
            fprintf(f, "}");
        }
        fprintf(f, "}");
    }
    fputc(']', f);
    tr_jline_int(l, "model_state_formula", (long long)ds_expected_model_state_bytes(e));
}

static void write_eval(FILE *f, const ds_cls_report *r, char *const *names) {
    tr_jline top, ev;
    tr_jline_begin(&top, f);
    tr_jline_key(&top, "eval");
    tr_jline_begin(&ev, f);
    tr_jline_num(&ev, "accuracy", "%.6f", r->accuracy);
    tr_jline_num(&ev, "macro_f1", "%.6f", r->macro_f1);
    tr_jline_num(&ev, "weighted_f1", "%.6f", r->weighted_f1);
    tr_jline_int(&ev, "total", (long long)r->total);
    tr_jline_key(&ev, "per_class");
    tr_jline pc;
    tr_jline_begin(&pc, f);
    for (int c = 0; c < r->n_classes; c++) {
        const ds_class_metrics *m = &r->per_class[c];
        tr_jline cl;
        tr_jline_key(&pc, names[c]);
        tr_jline_begin(&cl, f);
        tr_jline_num(&cl, "precision", "%.6f", m->precision);
        tr_jline_num(&cl, "recall", "%.6f", m->recall);
        tr_jline_num(&cl, "f1", "%.6f", m->f1);
        tr_jline_int(&cl, "support", (long long)m->support);
        tr_jline_end(&cl);
    }
    tr_jline_end(&pc);
    tr_jline_end(&ev);
    tr_jline_end(&top);
    fputc('\n', f);
}

/* ---- the run ---- */
typedef struct run_state {
    const data *d;
    const ds_saved_model *sm;
    engine_t *e;
    double *mem_table; /* --metrics: every rank's memory, gathered once */
} run_state;

/* --save-dir at the start (tr_describe_fn): config.json and vocab.txt, so
 * that zero_to_fp32 + these make a predict-able folder of any checkpoint. */
static ds_status describe(void *user, const char *save_dir) {
    const run_state *rs = user;
    char vp[4096];
    snprintf(vp, sizeof vp, "%s/vocab.txt", save_dir);
    DS_TRY(ds_saved_model_write(save_dir, rs->sm));
    DS_TRY(ds_tokenizer_save_vocab(rs->d->tok, vp));
    return DS_OK;
}

/* A step's members after grad_norm (tr_step_fields_fn). */
static void step_fields(void *user, tr_jline *l, const ds_step_info *info, double sps) {
    const run_state *rs = user;
    tr_jline_num(l, "samples_per_s", "%.3f", sps);
    tr_jline_bool(l, "skipped", info->skipped);
    tr_jline_num(l, "loss_scale", "%g", info->loss_scale);
    write_memory(l, rs->e, rs->mem_table);
}

/* Dev evaluation: the report on rank 0, and the last --metrics line. */
static int report_dev(tr_run *r, const data *d) {
    if (d->dev->n == 0) { /* --dev-ratio 0: no table of zeros, as train_lm */
        if (r->rank == 0) printf("train_cls: no dev rows (--dev-ratio 0): no evaluation\n");
        return 0;
    }
    int C = d->dev->n_classes, rc = 0;
    int64_t *cm = calloc((size_t)C * (size_t)C, sizeof *cm);
    ds_cls_report rep;
    double nll = 0.0;
    if (!cm || evaluate(r->e, d, r->eval_batch, cm, &nll) != DS_OK ||
        ds_cls_report_compute(cm, C, &rep) != DS_OK) {
        rc = fail("evaluating");
    } else {
        if (r->rank == 0) {
            /* the final evaluation in the monitors too, at the last step's samples */
            tr_eval_result res = {0};
            ds_step_info li;
            ds_last_step_info(r->e, &li);
            tr_eval_put(&res, "accuracy", rep.accuracy);
            tr_eval_put(&res, "macro_f1", rep.macro_f1);
            tr_eval_put(&res, "weighted_f1", rep.weighted_f1);
            tr_eval_put(&res, "loss", rep.total ? nll / (double)rep.total : NAN);
            tr_monitor_eval(r->e, "train_cls", &res, li.samples);
            printf("train_cls: dev evaluation over %lld samples\n", (long long)rep.total);
            ds_cls_report_print(&rep, (const char *const *)d->dev->class_names, stdout);
            if (r->metrics) {
                write_eval(r->metrics, &rep, d->dev->class_names);
                tr_metrics_written(r);
            }
        }
        ds_cls_report_free(&rep);
    }
    free(cm);
    return rc;
}

static int run(const tc_opts *o) {
    data d = {0};
    ds_saved_model sm;
    ds_model *model = NULL;
    if (load_data(o, &d) != DS_OK) {
        free_data(&d);
        return fail("reading data");
    }
    if (o->tr.init_dir && ds_wordpiece_load_dir(o->tr.init_dir, &d.tok) != DS_OK) {
        ds_error_prefix("loading --init %s", o->tr.init_dir);
        free_data(&d);
        return fail(NULL);
    }
    if (tokenize_data(o, &d) != DS_OK) {
        free_data(&d);
        return fail("reading data");
    }
    if (make_model(o, &d, &sm, &model) != DS_OK) {
        free_data(&d);
        return fail(strncmp(ds_last_error(), "loading --init", 14) ? "building the model" : NULL);
    }
    tr_run r;
    run_state rs = {.d = &d, .sm = &sm};
    int rc = tr_run_init(&r, "train_cls", &o->tr, model, d.train);
    rs.e = r.e;
    tr_habits habits; /* --eval-steps, --save-best, --early-stopping, --logging-steps */
    tr_habits_init(&habits, &o->tr, eval_during, &d, describe, &rs);
    r.habits = &habits;
    if (rc == 0)
        rc = tr_run_prepare(&r, describe, &rs, "writing config.json and vocab.txt to --save-dir");
    if (rc == 0 && r.rank == 0)
        printf("train_cls: %zu train / %zu dev rows, %d classes, vocab %d (%s), %lld steps "
               "(%lld per epoch), world %d\n",
               d.train->n, d.dev->n, d.train->n_classes, ds_tokenizer_vocab_size(d.tok),
               ds_tokenizer_kind(d.tok), (long long)r.total, (long long)r.per_epoch, r.world);
    /* Per-rank memory for --metrics. The engine allocates nothing during a step
     * (tests hold it to that), so the table gathered once here is every
     * step's; every rank takes part in the gather. */
    if (rc == 0 && o->tr.metrics) {
        rs.mem_table = calloc((size_t)r.world * MEM_COLS, sizeof(double));
        if (!rs.mem_table) {
            fprintf(stderr, "train_cls: out of memory\n");
            rc = 1;
        } else if (gather_memory(r.e, rs.mem_table) != DS_OK) {
            rc = fail("gathering the memory report");
        }
    }
    if (rc == 0 && r.rank == 0) tr_habits_record(&habits, &r);
    if (rc == 0) rc = tr_habits_resume(&habits, &r);
    if (rc == 0 && !habits.stopped) rc = tr_run_train(&r, step_fields, &rs);
    if (rc == 0) tr_habits_finish(&habits, &r);
    free(rs.mem_table);
    if (rc == 0 && r.rank == 0)
        printf("train_cls: trained %lld steps in %.1f s (%.1f samples/s)\n",
               (long long)r.train_steps, r.train_s,
               (double)r.train_samples / r.train_s); /* fewer after an early stop */
    if (rc == 0) rc = report_dev(&r, &d);
    if (rc == 0) rc = tr_run_save(&r);
    tr_run_end(&r);
    free_data(&d);
    return rc;
}

int main(int argc, char **argv) {
    tc_opts o;
    int prc = tc_opts_parse(argc, argv, &o);
    if (prc >= 0) return prc; /* --help (0) or a usage error (2) */
    int rc = run(&o);
    tc_opts_free(&o);
    return rc;
}
