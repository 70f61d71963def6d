/* predict's model: saved config + weights + vocabulary -> a one-rank engine
 * that turns texts into logits. */
#include "tools/common/predict_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "models/models.h"
#include "hf/hf.h"
#include "hf/saved_model.h"
#include "text/tokenizer.h"

struct pd_model {
    engine_t *e;
    ds_tokenizer *tok;
    ds_saved_model sm;
    int batch, T, C;
    int32_t *tokens; /* [batch, T] */
    float *mask;     /* [batch, T] */
    int32_t *ids;    /* [T] one encoded text */
};

int pd_model_n_classes(const pd_model *m) { return m->C; }
const char *pd_model_class_name(const pd_model *m, int c) { return m->sm.class_names[c]; }
int pd_model_batch(const pd_model *m) { return m->batch; }
int pd_model_max_seq_len(const pd_model *m) { return m->T; }
const char *pd_model_tokenizer_kind(const pd_model *m) { return ds_tokenizer_kind(m->tok); }

/* A file we are about to hand to a library reader: say which one is missing
 * in our own words, before the reader's less direct message. */
static ds_status need_file(const char *path, const char *what) {
    FILE *f = fopen(path, "rb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    fclose(f);
    return DS_OK;
}

/* out = dir/name, or an error naming the path when it does not fit. */
static ds_status path_join(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) return DS_ERR(DS_ERR_INVALID_ARG, "%s/%s: path too long", dir, name);
    return DS_OK;
}

/* model_path -> the directory of config.json and the vocabulary file (see
 * predict_model.h). The weights are model_path itself: ds_hf_load_weights
 * finds the file in a folder. */
static ds_status resolve_paths(const pd_opts *o, char *dir, char *vocab, size_t cap) {
    struct stat st;
    if (stat(o->model_path, &st) != 0)
        return DS_ERR(DS_ERR_IO, "%s: %s", o->model_path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (snprintf(dir, cap, "%s", o->model_path) >= (int)cap)
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: path too long", o->model_path);
    } else {
        const char *slash = strrchr(o->model_path, '/');
        if (!slash) snprintf(dir, cap, ".");
        else if (slash == o->model_path) snprintf(dir, cap, "/");
        else snprintf(dir, cap, "%.*s", (int)(slash - o->model_path), o->model_path);
    }
    char config[4096];
    DS_TRY(path_join(config, sizeof config, dir, "config.json"));
    DS_TRY(need_file(config, "the model's config.json (train_cls --save-dir writes it)"));
    if (o->vocab_path) {
        if (snprintf(vocab, cap, "%s", o->vocab_path) >= (int)cap)
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: path too long", o->vocab_path);
    } else {
        DS_TRY(path_join(vocab, cap, dir, "vocab.txt"));
    }
    DS_TRY(need_file(vocab, "the vocabulary"));
    return DS_OK;
}

static ds_status load_tokenizer(const ds_saved_model *sm, const char *dir, const char *vocab,
                                ds_tokenizer **out) {
    if (!strcmp(sm->tokenizer, "char")) {
        DS_TRY(ds_char_tokenizer_load(vocab, out));
    } else if (!strcmp(sm->tokenizer, "wordpiece")) {
        ds_wordpiece_opts wo = ds_wordpiece_opts_default();
        wo.do_lower_case = sm->do_lower_case != 0; /* all three as training had them */
        wo.strip_accents = sm->strip_accents;
        wo.tokenize_chinese_chars = sm->tokenize_chinese_chars != 0;
        DS_TRY(ds_wordpiece_load(vocab, &wo, out));
    } else {
        return DS_ERR(DS_ERR_DATA,
                      "%s/config.json: zero_engine.tokenizer: \"%s\" (expected char or wordpiece)",
                      dir, sm->tokenizer);
    }
    return DS_OK;
}

/* Every parameter must come from the file: one left at its random initial
 * value would make every prediction garbage without any other sign. */
static ds_status load_weights(pd_model *m, const char *weights) {
    ds_hf_load_report rep = {0};
    ds_status st = ds_hf_load_weights(ds_get_model(m->e), weights, ds_set_param_cb, m->e, &rep);
    if (st == DS_OK && rep.n_missing > 0)
        st = DS_ERR(DS_ERR_DATA, "%s: lacks %d parameter%s of the model: %s%s", rep.source,
                    rep.n_missing, rep.n_missing > 1 ? "s" : "", rep.missing[0],
                    rep.n_missing > 1 ? ", ..." : "");
    if (st == DS_OK && rep.n_unexpected > 0)
        fprintf(stderr, "predict: warning: %s: %d tensor%s the model does not have, ignored: %s%s\n",
                rep.source, rep.n_unexpected, rep.n_unexpected > 1 ? "s" : "", rep.unexpected[0],
                rep.n_unexpected > 1 ? ", ..." : "");
    ds_hf_load_report_free(&rep);
    DS_TRY(st);
    return DS_OK;
}

/* The engine only runs forward passes: SGD without momentum keeps no
 * optimizer state, stage 0 keeps the whole model on the one rank. */
static ds_status start_engine(pd_model *m, ds_model *model) {
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.0}},"
             " \"zero_optimization\": {\"stage\": 0}}",
             m->batch);
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model; /* the engine owns it from here, also on failure */
    d.quiet = true;
    DS_TRY(ds_initialize(&d, &m->e));
    if (ds_world_size(m->e) != 1)
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "predict runs as one process, but the launcher environment says %d ranks",
                      ds_world_size(m->e));
    return DS_OK;
}

static ds_status open_into(const pd_opts *o, pd_model *m) {
    if (o->batch < 1) return DS_ERR(DS_ERR_INVALID_ARG, "batch must be >= 1, got %d", o->batch);
    if (o->max_seq_len != 0 && o->max_seq_len < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "max_seq_len must be >= 2 ([CLS] and [SEP]), got %d",
                      o->max_seq_len);
    char dir[4096], vocab[4096];
    DS_TRY(resolve_paths(o, dir, vocab, sizeof dir));
    DS_TRY(ds_saved_model_read(dir, &m->sm));
    ds_saved_model *sm = &m->sm;
    m->batch = o->batch;
    m->C = sm->n_classes;
    m->T = o->max_seq_len ? o->max_seq_len : sm->max_seq_len;
    if (m->T < 2)
        return DS_ERR(DS_ERR_DATA, "%s/config.json: zero_engine.max_seq_len: must be >= 2, got %d",
                      dir, m->T);
    int model_vocab;
    if (!strcmp(sm->kind, "bert")) {
        if (m->T > sm->bert.max_position_embeddings)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "max_seq_len %d exceeds the model's max_position_embeddings %d "
                          "(%s/config.json)", m->T, sm->bert.max_position_embeddings, dir);
        sm->bert.max_seq_len = m->T;
        model_vocab = sm->bert.vocab_size;
    } else {
        sm->mlp.max_seq_len = m->T;
        model_vocab = sm->mlp.vocab_size;
    }
    sm->max_seq_len = m->T;
    DS_TRY(load_tokenizer(sm, dir, vocab, &m->tok));
    /* Token ids index the embedding table: a larger vocabulary would read
     * past it. A smaller one is fine (train_cls --init keeps HF's size). */
    if (ds_tokenizer_vocab_size(m->tok) > model_vocab)
        return DS_ERR(DS_ERR_DATA, "%s: %d tokens, but the model's vocab_size is %d (%s/config.json)",
                      vocab, ds_tokenizer_vocab_size(m->tok), model_vocab, dir);
    size_t bt = (size_t)m->batch * (size_t)m->T;
    m->tokens = malloc(bt * sizeof *m->tokens);
    m->mask = malloc(bt * sizeof *m->mask);
    m->ids = malloc((size_t)m->T * sizeof *m->ids);
    if (!m->tokens || !m->mask || !m->ids)
        return DS_ERR(DS_ERR_OOM, "predict buffers for %d x %d tokens: out of memory", m->batch,
                      m->T);
    ds_model *model;
    DS_TRY(ds_saved_model_build(sm, &model));
    DS_TRY(start_engine(m, model));
    DS_TRY(load_weights(m, o->model_path));
    return DS_OK;
}

ds_status pd_model_open(const pd_opts *o, pd_model **out) {
    *out = NULL;
    pd_model *m = calloc(1, sizeof *m);
    if (!m) return DS_ERR(DS_ERR_OOM, "predict: out of memory");
    ds_status st = open_into(o, m);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        pd_model_close(m);
        return st;
    }
    *out = m;
    return DS_OK;
}

ds_status pd_model_logits(pd_model *m, const char *const *texts, int n, float *logits,
                          int *bad_index) {
    *bad_index = -1;
    if (n < 0 || n > m->batch)
        return DS_ERR(DS_ERR_INVALID_ARG, "%d texts for a batch of %d", n, m->batch);
    if (n == 0) return DS_OK;
    int32_t pad = ds_tokenizer_pad_id(m->tok);
    for (int i = 0; i < n; i++) {
        int len;
        ds_status st = ds_tokenizer_encode(m->tok, texts[i], m->T, m->ids, &len);
        if (st != DS_OK) {
            *bad_index = i;
            ds_error_trace(__FILE__, __LINE__);
            return st;
        }
        int32_t *row = m->tokens + (size_t)i * m->T;
        float *mrow = m->mask + (size_t)i * m->T;
        for (int t = 0; t < m->T; t++) {
            row[t] = t < len ? m->ids[t] : pad;
            mrow[t] = t < len ? 1.0f : 0.0f;
        }
    }
    /* Always the full width T, never the longest text of the batch: then a
     * row's arithmetic does not depend on its neighbours (see the header). */
    ds_batch b = {.B = n, .T = m->T};
    DS_TRY(ds_batch_set(&b, "input_ids", DS_I32, m->tokens));
    DS_TRY(ds_batch_set(&b, "attention_mask", DS_F32, m->mask));
    DS_TRY(ds_predict(m->e, &b, logits));
    return DS_OK;
}

void pd_model_close(pd_model *m) {
    if (!m) return;
    ds_finalize(m->e);
    ds_tokenizer_destroy(m->tok);
    ds_saved_model_free(&m->sm);
    free(m->tokens);
    free(m->mask);
    free(m->ids);
    free(m);
}
