/* config.json of a saved classifier, in Hugging Face's layout. */
#include "hf/saved_model.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/io/ckpt_dir.h"
#include "hf/hf.h"

/* strip_accents as BertTokenizer's config holds it: null (as do_lower_case),
 * false or true. */
static json_t *strip_json(int v) { return v < 0 ? json_null() : json_boolean(v); }

/* DIR/tokenizer_config.json for AutoTokenizer: the options training
 * tokenized with (without it transformers falls back to BertTokenizer's
 * defaults: lower-cased, accents stripped); removed for the char
 * tokenizer, which transformers has no counterpart of. */
static ds_status write_tokenizer_config(const char *dir, const ds_saved_model *m, bool wordpiece) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (!wordpiece) {
        if (unlink(path) != 0 && errno != ENOENT)
            return DS_ERR(DS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
        return DS_OK;
    }
    json_t *t = json_object();
    json_object_set_new(t, "tokenizer_class", json_string("BertTokenizer"));
    json_object_set_new(t, "do_lower_case", json_boolean(m->do_lower_case));
    json_object_set_new(t, "strip_accents", strip_json(m->strip_accents));
    json_object_set_new(t, "tokenize_chinese_chars", json_boolean(m->tokenize_chinese_chars));
    json_object_set_new(t, "model_max_length", json_integer(m->max_seq_len));
    json_object_set_new(t, "unk_token", json_string("[UNK]"));
    json_object_set_new(t, "sep_token", json_string("[SEP]"));
    json_object_set_new(t, "pad_token", json_string("[PAD]"));
    json_object_set_new(t, "cls_token", json_string("[CLS]"));
    json_object_set_new(t, "mask_token", json_string("[MASK]"));
    int rc = json_dump_file(t, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(t);
    if (rc != 0) return DS_ERR(DS_ERR_IO, "cannot write %s", path);
    return DS_OK;
}

ds_status ds_saved_model_write(const char *dir, const ds_saved_model *m) {
    DS_TRY(ds_ckpt_mkdirs(dir));
    json_t *root = json_object(), *id2label = json_object(), *label2id = json_object();
    json_t *ze = json_object();
    for (int c = 0; c < m->n_classes; c++) {
        char key[16];
        snprintf(key, sizeof key, "%d", c);
        json_object_set_new(id2label, key, json_string(m->class_names[c]));
        json_object_set_new(label2id, m->class_names[c], json_integer(c));
    }
    if (!strcmp(m->kind, "bert")) {
        const ds_bert_desc *b = &m->bert;
        json_object_set_new(root, "architectures",
                            json_pack("[s]", "BertForSequenceClassification"));
        json_object_set_new(root, "model_type", json_string("bert"));
        json_object_set_new(root, "vocab_size", json_integer(b->vocab_size));
        json_object_set_new(root, "hidden_size", json_integer(b->hidden_size));
        json_object_set_new(root, "num_hidden_layers", json_integer(b->num_hidden_layers));
        json_object_set_new(root, "num_attention_heads", json_integer(b->num_attention_heads));
        json_object_set_new(root, "intermediate_size", json_integer(b->intermediate_size));
        json_object_set_new(root, "max_position_embeddings",
                            json_integer(b->max_position_embeddings));
        json_object_set_new(root, "type_vocab_size", json_integer(b->type_vocab_size ? b->type_vocab_size : 2));
        json_object_set_new(root, "hidden_act", json_string("gelu"));
        json_object_set_new(root, "hidden_dropout_prob",
                            json_real(ds_hf_shortest(b->hidden_dropout_prob)));
        json_object_set_new(root, "attention_probs_dropout_prob",
                            json_real(ds_hf_shortest(b->attention_probs_dropout_prob)));
        json_object_set_new(root, "layer_norm_eps",
                            json_real(ds_hf_shortest(b->layer_norm_eps > 0 ? b->layer_norm_eps
                                                                           : 1e-12f)));
        json_object_set_new(root, "initializer_range",
                            json_real(ds_hf_shortest(b->initializer_range > 0 ? b->initializer_range
                                                                              : 0.02f)));
        /* the row the model keeps for padding (an --init model's may not be 0) */
        json_object_set_new(root, "pad_token_id", json_integer(b->pad_token_id));
        json_object_set_new(root, "problem_type", json_string("single_label_classification"));
    } else {
        json_object_set_new(root, "model_type", json_string("zero_engine_mlp"));
        json_object_set_new(root, "vocab_size", json_integer(m->mlp.vocab_size));
        json_object_set_new(ze, "embed_dim", json_integer(m->mlp.embed_dim));
        json_object_set_new(ze, "hidden_dim", json_integer(m->mlp.hidden_dim));
        json_object_set_new(ze, "n_hidden", json_integer(m->mlp.n_hidden));
    }
    json_object_set_new(root, "id2label", id2label);
    json_object_set_new(root, "label2id", label2id);
    json_object_set_new(ze, "tokenizer", json_string(m->tokenizer));
    json_object_set_new(ze, "do_lower_case", json_boolean(m->do_lower_case));
    bool wordpiece = !strcmp(m->tokenizer, "wordpiece");
    if (wordpiece) {
        json_object_set_new(ze, "strip_accents", strip_json(m->strip_accents));
        json_object_set_new(ze, "tokenize_chinese_chars",
                            json_boolean(m->tokenize_chinese_chars));
    }
    json_object_set_new(ze, "max_seq_len", json_integer(m->max_seq_len));
    json_object_set_new(root, "zero_engine", ze);

    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                            JSON_REAL_PRECISION(9));
    json_decref(root);
    if (rc != 0) return DS_ERR(DS_ERR_IO, "cannot write %s", path);
    DS_TRY(write_tokenizer_config(dir, m, wordpiece));
    return DS_OK;
}

static ds_status get_int(json_t *o, const char *path, const char *key, int *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return DS_ERR(DS_ERR_DATA, "%s: %s: missing or not an integer", path, key);
    /* checked before narrowing: 2^32 + 100 would otherwise read as 100 */
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return DS_ERR(DS_ERR_DATA, "%s: %s: %lld does not fit an int", path, key, (long long)x);
    *out = (int)x;
    return DS_OK;
}

static float get_real(json_t *o, const char *key, float dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? (float)json_number_value(v) : dflt;
}

ds_status ds_saved_model_read(const char *dir, ds_saved_model *out) {
    memset(out, 0, sizeof *out);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) return DS_ERR(DS_ERR_IO, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    ds_status st = DS_OK;
    json_t *ze = json_object_get(root, "zero_engine");
    json_t *id2label = json_object_get(root, "id2label");
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!json_is_object(ze) || !json_is_object(id2label) || !type) {
        st = DS_ERR(DS_ERR_DATA, "%s: needs model_type, id2label and zero_engine (written by "
                                 "train_cls --save-dir)", path);
        goto done;
    }
    out->n_classes = (int)json_object_size(id2label);
    out->class_names = calloc((size_t)out->n_classes, sizeof *out->class_names);
    if (!out->class_names) {
        st = DS_ERR(DS_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    for (int c = 0; c < out->n_classes; c++) {
        char key[16];
        snprintf(key, sizeof key, "%d", c);
        const char *name = json_string_value(json_object_get(id2label, key));
        if (!name) {
            st = DS_ERR(DS_ERR_DATA, "%s: id2label lacks \"%s\"", path, key);
            goto done;
        }
        out->class_names[c] = strdup(name);
    }
    const char *tok = json_string_value(json_object_get(ze, "tokenizer"));
    snprintf(out->tokenizer, sizeof out->tokenizer, "%s", tok ? tok : "char");
    out->do_lower_case = json_is_true(json_object_get(ze, "do_lower_case"));
    /* absent (a folder saved before they were kept): BertTokenizer's defaults */
    json_t *sa = json_object_get(ze, "strip_accents"), *tc;
    out->strip_accents = json_is_boolean(sa) ? json_is_true(sa) : -1;
    tc = json_object_get(ze, "tokenize_chinese_chars");
    out->tokenize_chinese_chars = json_is_boolean(tc) ? json_is_true(tc) : 1;
    DS_TRY_GOTO(st, get_int(ze, path, "max_seq_len", &out->max_seq_len), done);
    if (!strcmp(type, "bert")) {
        ds_bert_desc *b = &out->bert;
        snprintf(out->kind, sizeof out->kind, "bert");
        DS_TRY_GOTO(st, get_int(root, path, "vocab_size", &b->vocab_size), done);
        DS_TRY_GOTO(st, get_int(root, path, "hidden_size", &b->hidden_size), done);
        DS_TRY_GOTO(st, get_int(root, path, "num_hidden_layers", &b->num_hidden_layers), done);
        DS_TRY_GOTO(st, get_int(root, path, "num_attention_heads", &b->num_attention_heads), done);
        DS_TRY_GOTO(st, get_int(root, path, "intermediate_size", &b->intermediate_size), done);
        DS_TRY_GOTO(st, get_int(root, path, "max_position_embeddings",
                                &b->max_position_embeddings), done);
        DS_TRY_GOTO(st, get_int(root, path, "type_vocab_size", &b->type_vocab_size), done);
        b->hidden_dropout_prob = get_real(root, "hidden_dropout_prob", 0.1f);
        b->attention_probs_dropout_prob = get_real(root, "attention_probs_dropout_prob", 0.1f);
        b->layer_norm_eps = get_real(root, "layer_norm_eps", 1e-12f);
        b->initializer_range = get_real(root, "initializer_range", 0.02f);
        json_t *pad = json_object_get(root, "pad_token_id");
        b->pad_token_id = json_is_integer(pad) && json_integer_value(pad) >= 0 &&
                                  json_integer_value(pad) < b->vocab_size
                              ? (int)json_integer_value(pad)
                              : 0;
        b->n_classes = out->n_classes;
        b->max_seq_len = out->max_seq_len;
    } else if (!strcmp(type, "zero_engine_mlp")) {
        ds_mlp_desc *m = &out->mlp;
        snprintf(out->kind, sizeof out->kind, "mlp");
        DS_TRY_GOTO(st, get_int(root, path, "vocab_size", &m->vocab_size), done);
        DS_TRY_GOTO(st, get_int(ze, path, "embed_dim", &m->embed_dim), done);
        DS_TRY_GOTO(st, get_int(ze, path, "hidden_dim", &m->hidden_dim), done);
        DS_TRY_GOTO(st, get_int(ze, path, "n_hidden", &m->n_hidden), done);
        m->n_classes = out->n_classes;
        m->max_seq_len = out->max_seq_len;
    } else {
        st = DS_ERR(DS_ERR_UNSUPPORTED, "%s: model_type \"%s\" (expected bert or zero_engine_mlp)",
                    path, type);
    }
done:
    json_decref(root);
    if (st != DS_OK) ds_saved_model_free(out);
    return st;
}

void ds_saved_model_free(ds_saved_model *m) {
    for (int c = 0; m->class_names && c < m->n_classes; c++) free(m->class_names[c]);
    free(m->class_names);
    m->class_names = NULL;
}

ds_status ds_saved_model_build(const ds_saved_model *m, ds_model **out) {
    if (!strcmp(m->kind, "bert")) DS_TRY(ds_bert_create(&m->bert, out));
    else DS_TRY(ds_mlp_create(&m->mlp, out));
    return DS_OK;
}
