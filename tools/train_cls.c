/* train_cls: train a text classifier (BERT-style encoder or MLP) on labelled
 * text, data-parallel, then evaluate on the dev split with every dev sample
 * counted exactly once across ranks. Usually started by engine-run:
 *
 *   engine-run --np 2 --config configs/ds_config.json train_cls \
 *       --data ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv --epochs 3
 *
 * Every rank reads the data itself (the split and the vocabulary are
 * deterministic), the engine's sampler gives each rank its slice. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "models/models.h"
#include "models/hf.h"
#include "models/metrics.h"
#include "models/saved_model.h"
#include "models/text.h"
#include "models/tokenizer.h"
#include "tools/common/train_cls_opts.h"
#include "tools/common/trainer.h"

/* ---- one failing line, and out ---- */
/* what NULL: the message says it all ("loading --init DIR: ..."). */
static int fail(const char *what) {
    if (!what) fprintf(stderr, "train_cls: %s\n", ds_last_error());
    else fprintf(stderr, "train_cls: %s%s%s\n", what, *ds_last_error() ? ": " : "", ds_last_error());
    return 1;
}

static void quiet_warn(void *user, const char *msg) {
    (void)user;
    (void)msg; /* the engine prints the config's warnings once, on rank 0 */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
    DS_TRY(tr_check_input_file("--data", o->data));
    if (o->eval_data) DS_TRY(tr_check_input_file("--eval-data", o->eval_data));
    ds_text_read_opts ro = {0};
    ro.keep_labels = (const char *const *)o->labels;
    ro.n_keep_labels = o->n_labels;
    ro.drop_conflicts = o->drop_conflicts;
    ds_text_set *all = NULL;
    DS_TRY(ds_text_read(o->data, &ro, &all));
    if (o->eval_data) {
        d->train_txt = all;
        ds_text_read_opts eo = ro;
        eo.classes = (const char *const *)all->class_names;
        eo.n_classes = all->n_classes;
        DS_TRY(ds_text_read(o->eval_data, &eo, &d->dev_txt));
    } else {
        ds_status st = ds_text_split(all, o->dev_ratio, o->seed, &d->train_txt, &d->dev_txt);
        ds_text_set_destroy(all);
        DS_TRY(st);
    }
    if (o->vocab) DS_TRY(ds_char_tokenizer_load(o->vocab, &d->tok));
    else if (!o->init_dir) DS_TRY(ds_char_vocab_build(d->train_txt, o->min_char_count, &d->tok));
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
    memset(sm, 0, sizeof *sm);
    sm->n_classes = d->train->n_classes;
    sm->class_names = d->train->class_names; /* borrowed for writing */
    sm->max_seq_len = o->max_seq_len;
    snprintf(sm->tokenizer, sizeof sm->tokenizer, "%s", ds_tokenizer_kind(d->tok));
    const ds_wordpiece_opts *wo = ds_wordpiece_opts_of(d->tok);
    sm->do_lower_case = wo ? wo->do_lower_case : 1; /* char vocabularies ignore it */
    int V = ds_tokenizer_vocab_size(d->tok);
    if (!strcmp(o->model, "mlp")) {
        snprintf(sm->kind, sizeof sm->kind, "mlp");
        sm->mlp = (ds_mlp_desc){.vocab_size = V, .max_seq_len = o->max_seq_len,
                                .embed_dim = o->hidden, .hidden_dim = o->intermediate,
                                .n_hidden = o->layers > 0 ? o->layers : 1,
                                .n_classes = sm->n_classes};
        DS_TRY(ds_mlp_create(&sm->mlp, out));
        return DS_OK;
    }
    snprintf(sm->kind, sizeof sm->kind, "bert");
    ds_bert_desc *b = &sm->bert;
    if (o->init_dir || o->model_config) {
        char path[4096];
        if (o->model_config) snprintf(path, sizeof path, "%s", o->model_config);
        else snprintf(path, sizeof path, "%s/config.json", o->init_dir);
        ds_status st = ds_hf_bert_config_read(path, sm->n_classes, b);
        if (st != DS_OK && !o->model_config) ds_error_prefix("loading --init %s", o->init_dir);
        DS_TRY(st);
    } else {
        *b = (ds_bert_desc){.vocab_size = V, .hidden_size = o->hidden,
                            .num_hidden_layers = o->layers, .num_attention_heads = o->heads,
                            .intermediate_size = o->intermediate,
                            .max_position_embeddings = o->max_seq_len > 512 ? o->max_seq_len : 512,
                            .type_vocab_size = 2, .hidden_dropout_prob = o->dropout,
                            .attention_probs_dropout_prob = o->dropout,
                            .layer_norm_eps = 1e-12f, .initializer_range = 0.02f};
    }
    if (o->dropout_set) b->hidden_dropout_prob = b->attention_probs_dropout_prob = o->dropout;
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

/* ---- checkpoints ---- */
/* --resume: load the checkpoint latest names, if there is one. */
static ds_status resume(engine_t *e, const tc_opts *o) {
    char tag[256], latest[4200];
    snprintf(latest, sizeof latest, "%s/latest", o->ckpt_dir);
    if (access(latest, F_OK) != 0) {
        if (ds_rank(e) == 0)
            printf("train_cls: --resume: no checkpoint in %s yet (no %s), starting from step 0\n",
                   o->ckpt_dir, latest);
        return DS_OK;
    }
    DS_TRY(ds_checkpoint_latest(o->ckpt_dir, tag, sizeof tag));
    DS_TRY(ds_load_checkpoint(e, o->ckpt_dir, tag, DS_LOAD_ALL));
    if (ds_rank(e) == 0)
        printf("train_cls: resumed from %s/%s at step %lld\n", o->ckpt_dir, tag,
               (long long)ds_global_step(e));
    return DS_OK;
}

/* ---- evaluation ---- */
/* Every rank predicts its strided slice of dev (no padding, so each sample
 * counts once); ranks with fewer rows still join every call with an empty
 * batch, because stage 3 gathers parameters collectively. The confusion
 * matrices are summed over ranks. */
static ds_status evaluate(engine_t *e, const data *d, int batch, int64_t *confusion) {
    const ds_dataset *dev = d->dev;
    int rank = ds_rank(e), world = ds_world_size(e), C = dev->n_classes;
    ds_sampler s;
    DS_TRY(ds_sampler_init(&s, dev->n, world, rank, 0, false, false, false));
    ds_status st = ds_sampler_set_epoch(&s, 0);
    ds_host_batch hb = {0};
    float *logits = malloc((size_t)batch * (size_t)C * sizeof(float));
    if (st == DS_OK && !logits) st = DS_ERR(DS_ERR_OOM, "evaluation: out of memory");
    if (st == DS_OK) st = ds_host_batch_alloc(&hb, dev, ds_get_model(e), batch);
    memset(confusion, 0, (size_t)C * (size_t)C * sizeof *confusion);
    size_t most = (dev->n + (size_t)world - 1) / (size_t)world;
    size_t calls = (most + (size_t)batch - 1) / (size_t)batch;
    for (size_t k = 0; st == DS_OK && k < calls; k++) {
        size_t from = k * (size_t)batch;
        int count = from < s.num_samples
                        ? (int)(s.num_samples - from < (size_t)batch ? s.num_samples - from
                                                                      : (size_t)batch)
                        : 0;
        st = ds_host_batch_fill(&hb, dev, s.indices + (from < s.num_samples ? from : 0), count);
        if (st != DS_OK) break;
        st = ds_predict(e, &hb.batch, logits);
        const int32_t *labels = ds_batch_i32(&hb.batch, "labels");
        for (int r = 0; st == DS_OK && r < count; r++) {
            int best = 0;
            for (int c = 1; c < C; c++)
                if (logits[(size_t)r * C + c] > logits[(size_t)r * C + best]) best = c;
            confusion[(size_t)labels[r] * C + best]++;
        }
    }
    free(logits);
    ds_host_batch_free(&hb);
    ds_sampler_free(&s);
    DS_TRY(st);
    DS_TRY(ds_all_reduce_host(e, confusion, (size_t)C * (size_t)C, DS_I64));
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
static int run(const tc_opts *o) {
    data d = {0};
    ds_saved_model sm;
    ds_model *model = NULL;
    if (load_data(o, &d) != DS_OK) {
        free_data(&d);
        return fail("reading data");
    }
    if (o->init_dir && ds_wordpiece_load_dir(o->init_dir, &d.tok) != DS_OK) {
        ds_error_prefix("loading --init %s", o->init_dir);
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
    ds_rank_info ri;
    if (ds_rank_discover(&ri) != DS_OK) return fail("discovering ranks");
    int world = ri.world > 0 ? ri.world : 1;

    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_path = o->config;
    id.model = model;
    id.train_data = d.train;
    id.seed = o->seed;
    if (o->lr > 0) id.hints.lr = o->lr;
    if (o->weight_decay >= 0) id.hints.weight_decay = o->weight_decay;
    if (o->batch > 0) id.hints.micro_batch = o->batch;
    if (o->warmup >= 0) id.hints.warmup_num_steps = o->warmup;
    /* total_num_steps for "auto": what the run will do. The micro batch is
     * not known before the config is resolved, so read it once here. */
    ds_config pre;
    if (ds_config_parse_file(o->config, &pre, quiet_warn, NULL) != DS_OK) {
        free_data(&d);
        ds_model_destroy(model);
        return fail("reading the config");
    }
    ds_config_hints h = id.hints;
    h.world_size = world;
    h.world_source = ds_rank_source_name(ri.source);
    if (pre.total_num_steps_auto) h.total_num_steps = 1; /* placeholder for this probe only */
    if (ds_config_resolve(&pre, &h) != DS_OK) {
        free_data(&d);
        ds_model_destroy(model);
        return fail("resolving the config");
    }
    int64_t per_rank = (int64_t)((d.train->n + (size_t)world - 1) / (size_t)world);
    if (pre.dataloader_drop_last) per_rank = (int64_t)(d.train->n / (size_t)world);
    int64_t micro = pre.train_micro_batch_size_per_gpu, gas = pre.gradient_accumulation_steps;
    int64_t steps_per_epoch = ((per_rank + micro - 1) / micro) / gas;
    if (steps_per_epoch < 1) steps_per_epoch = 1;
    int64_t total = o->max_steps > 0 ? o->max_steps : steps_per_epoch * o->epochs;
    id.hints.total_num_steps = total;

    engine_t *e;
    if (ds_initialize(&id, &e) != DS_OK) {
        free_data(&d);
        return fail("ds_initialize");
    }
    int rank = ds_rank(e), rc = 0;
    if (o->init_dir) {
        ds_hf_load_report rep = {0};
        ds_status st = ds_hf_load_weights(ds_get_model(e), o->init_dir, ds_set_param_cb, e, &rep);
        if (rank == 0) ds_hf_load_report_print(&rep, stdout);
        ds_hf_load_report_free(&rep);
        if (st != DS_OK) {
            ds_error_prefix("loading --init %s", o->init_dir);
            rc = fail(NULL);
            goto out;
        }
    }
    /* SIGTERM (and --save-on-signal, zero_engine.save_on_signal): save at
     * the next step boundary and exit 128 + the signal. */
    tr_preempt stopper;
    if (tr_preempt_start(&stopper, e, "train_cls", o->save_on_signal, o->ckpt_dir) != DS_OK) {
        rc = fail("preemption handlers");
        goto out;
    }
    /* A job that saves (on schedule or when preempted) starts by removing
     * what an earlier job's unfinished saves left (they hold disk space; each
     * removal is printed). */
    if (o->ckpt_dir && ds_checkpoint_clean(e, o->ckpt_dir) != DS_OK) {
        rc = fail("--ckpt-dir");
        goto out;
    }
    if (o->resume && resume(e, o) != DS_OK) {
        rc = fail("--resume");
        goto out;
    }
    int64_t start = ds_global_step(e);
    /* config.json and vocab.txt go into --save-dir now, so the checkpoints of
     * a run that never reaches its end can still become a predict-able
     * directory (zero_to_fp32 + these two files). */
    if (o->save_dir) {
        ds_status st = DS_OK;
        if (rank == 0) {
            char vp[4096];
            snprintf(vp, sizeof vp, "%s/vocab.txt", o->save_dir);
            st = ds_saved_model_write(o->save_dir, &sm);
            if (st == DS_OK) st = ds_tokenizer_save_vocab(d.tok, vp);
        }
        int32_t bad = st != DS_OK; /* every rank stops together, none waits alone */
        if (ds_all_reduce_host(e, &bad, 1, DS_I32) != DS_OK || bad) {
            rc = fail(rank == 0 ? "writing config.json and vocab.txt to --save-dir"
                                : "rank 0 could not write to --save-dir");
            goto out;
        }
    }
    FILE *mf = NULL;
    if (o->metrics && rank == 0 && !(mf = fopen(o->metrics, start > 0 ? "a" : "w"))) {
        fprintf(stderr, "train_cls: cannot write --metrics %s\n", o->metrics);
        rc = 1;
        goto out;
    }
    if (rank == 0)
        printf("train_cls: %zu train / %zu dev rows, %d classes, vocab %d (%s), %lld steps "
               "(%lld per epoch), world %d\n",
               d.train->n, d.dev->n, d.train->n_classes, ds_tokenizer_vocab_size(d.tok),
               ds_tokenizer_kind(d.tok), (long long)total, (long long)steps_per_epoch, world);
    double t0 = now_s(), t_last = t0;
    ds_step_info li;
    ds_last_step_info(e, &li);
    int64_t samples_last = li.samples, samples_start = li.samples;
    char client[64];
    snprintf(client, sizeof client, "{\"total_steps\": %lld}", (long long)total);
    /* Per-rank memory for --metrics. The engine allocates nothing during a step
     * (tests hold it to that), so the table gathered once here is every
     * step's; every rank takes part in the gather. */
    double *mem_table = o->metrics ? calloc((size_t)world * MEM_COLS, sizeof(double)) : NULL;
    if (o->metrics && !mem_table) {
        fprintf(stderr, "train_cls: out of memory\n");
        rc = 1;
    } else if (mem_table && gather_memory(e, mem_table) != DS_OK) {
        rc = fail("gathering the memory report");
    }
    for (int64_t s = start; rc == 0 && s < total; s++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            rc = fail("training");
            break;
        }
        double t_step = now_s();
        /* every --save-steps steps, and the last one (so a finished run
         * resumes straight to evaluation) */
        bool saved = o->save_steps > 0 && (info.step % o->save_steps == 0 || s + 1 == total);
        if (saved && ds_save_checkpoint(e, o->ckpt_dir, NULL, client) != DS_OK) {
            rc = fail("saving a checkpoint");
            break;
        }
        double t = now_s();
        tr_preempt_observe(&stopper, e, t_step - t_last, saved ? t - t_step : 0.0);
        double sps = (double)(info.samples - samples_last) / (t - t_last);
        t_last = t;
        samples_last = info.samples;
        if (mf) { /* a diverged loss is null, named in "nonfinite": the line stays JSON */
            tr_jline l;
            tr_jline_begin(&l, mf);
            tr_jline_int(&l, "step", (long long)info.step);
            tr_jline_int(&l, "epoch", (long long)info.epoch);
            tr_jline_num(&l, "loss", "%.6f", info.loss);
            tr_jline_num(&l, "lr", "%.6e", info.lr);
            tr_jline_num(&l, "grad_norm", "%.6f", info.grad_norm);
            tr_jline_num(&l, "samples_per_s", "%.3f", sps);
            tr_jline_bool(&l, "skipped", info.skipped);
            tr_jline_num(&l, "loss_scale", "%g", info.loss_scale);
            write_memory(&l, e, mem_table);
            tr_jline_end(&l);
            fputc('\n', mf);
            fflush(mf);
        }
        /* every rank sees the same stop_signal: all save, all exit */
        if (info.stop_signal) rc = tr_preempt_stop(&stopper, e, &info, saved, client);
    }
    free(mem_table);
    if (rc == 0 && rank == 0)
        printf("train_cls: trained %lld steps in %.1f s (%.1f samples/s)\n",
               (long long)(total - start), now_s() - t0,
               (double)(samples_last - samples_start) / (now_s() - t0));
    if (rc == 0) {
        int C = d.dev->n_classes;
        int64_t *cm = calloc((size_t)C * (size_t)C, sizeof *cm);
        ds_cls_report rep;
        /* prediction batches fit the planned micro batch */
        int eb = o->eval_batch < micro ? o->eval_batch : (int)micro;
        if (!cm || evaluate(e, &d, eb, cm) != DS_OK ||
            ds_cls_report_compute(cm, C, &rep) != DS_OK) {
            rc = fail("evaluating");
        } else {
            if (rank == 0) {
                printf("train_cls: dev evaluation over %lld samples\n", (long long)rep.total);
                ds_cls_report_print(&rep, (const char *const *)d.dev->class_names, stdout);
                if (mf) write_eval(mf, &rep, d.dev->class_names);
            }
            ds_cls_report_free(&rep);
        }
        free(cm);
    }
    if (mf) fclose(mf);
    if (rc == 0 && o->save_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", o->save_dir);
        if (ds_save_weights(e, path) != DS_OK) rc = fail("saving the weights");
        else if (rank == 0) printf("train_cls: saved the model to %s\n", o->save_dir);
    }
out:
    ds_finalize(e);
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
