/* Reader of tools/make_bert_reference.py's dump (see bert_ref.h). */
#include "bert_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t cap, const char *msg, const char *path) {
    snprintf(err, cap, "%s: %s", path, msg);
    return -1;
}

static int cfg_int(json_t *cfg, const char *key) {
    return (int)json_integer_value(json_object_get(cfg, key));
}

static float cfg_num(json_t *cfg, const char *key) {
    return (float)json_number_value(json_object_get(cfg, key));
}

int bert_ref_load(const char *path, bert_ref *r, char *err, size_t cap) {
    memset(r, 0, sizeof *r);
    FILE *fp = fopen(path, "rb");
    if (!fp) return fail(err, cap, "cannot open", path);
    unsigned char head[24];
    if (fread(head, 1, 24, fp) != 24 || memcmp(head, "DSREF\0\0\0", 8) != 0) {
        fclose(fp);
        return fail(err, cap, "not a DSREF dump (bad magic)", path);
    }
    uint32_t version;
    uint64_t jlen;
    memcpy(&version, head + 8, 4);
    memcpy(&jlen, head + 16, 8);
    if (version != 1) {
        fclose(fp);
        return fail(err, cap, "unsupported DSREF version (this reader knows 1)", path);
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    if (size < 0 || jlen > (uint64_t)size - 24) {
        fclose(fp);
        return fail(err, cap, "JSON length past the end of the file", path);
    }
    char *text = malloc(jlen + 1);
    r->data_len = (size_t)((uint64_t)size - 24 - jlen);
    r->data = malloc(r->data_len ? r->data_len : 1);
    fseek(fp, 24, SEEK_SET);
    int ok = text && r->data && fread(text, 1, jlen, fp) == jlen &&
             fread(r->data, 1, r->data_len, fp) == r->data_len;
    fclose(fp);
    if (!ok) {
        free(text);
        bert_ref_free(r);
        return fail(err, cap, "short read", path);
    }
    json_error_t jerr;
    r->hdr = json_loadb(text, jlen, 0, &jerr);
    free(text);
    if (!r->hdr) {
        bert_ref_free(r);
        return fail(err, cap, "bad JSON header", path);
    }
    json_t *tensors = json_object_get(r->hdr, "tensors");
    const char *key;
    json_t *v;
    json_object_foreach(tensors, key, v) {
        size_t n = 1;
        json_t *shape = json_object_get(v, "shape");
        for (size_t i = 0; i < json_array_size(shape); i++)
            n *= (size_t)json_integer_value(json_array_get(shape, i));
        json_int_t off = json_integer_value(json_object_get(v, "offset"));
        if (off < 0 || (size_t)off + 4 * n > r->data_len || off % 4 != 0) {
            snprintf(err, cap, "%s: tensor %s lies outside the data", path, key);
            bert_ref_free(r);
            return -1;
        }
    }
    json_t *cfg = json_object_get(r->hdr, "config");
    json_t *batch = json_object_get(r->hdr, "batch");
    r->B = (int)json_integer_value(json_object_get(batch, "B"));
    r->T = (int)json_integer_value(json_object_get(batch, "T"));
    ds_bert_desc *d = &r->desc;
    d->vocab_size = cfg_int(cfg, "vocab_size");
    d->hidden_size = cfg_int(cfg, "hidden_size");
    d->num_hidden_layers = cfg_int(cfg, "num_hidden_layers");
    d->num_attention_heads = cfg_int(cfg, "num_attention_heads");
    d->intermediate_size = cfg_int(cfg, "intermediate_size");
    d->max_position_embeddings = cfg_int(cfg, "max_position_embeddings");
    d->type_vocab_size = cfg_int(cfg, "type_vocab_size");
    d->hidden_dropout_prob = cfg_num(cfg, "hidden_dropout_prob");
    d->attention_probs_dropout_prob = cfg_num(cfg, "attention_probs_dropout_prob");
    d->layer_norm_eps = cfg_num(cfg, "layer_norm_eps");
    d->initializer_range = cfg_num(cfg, "initializer_range");
    d->pad_token_id = cfg_int(cfg, "pad_token_id");
    d->n_classes = cfg_int(cfg, "n_classes");
    d->max_seq_len = r->T;
    return 0;
}

void bert_ref_free(bert_ref *r) {
    if (r->hdr) json_decref(r->hdr);
    free(r->data);
    memset(r, 0, sizeof *r);
}

static const void *lookup(const bert_ref *r, const char *name, const char *dtype, size_t *numel,
                          int *ndim, int64_t shape[4]) {
    json_t *v = json_object_get(json_object_get(r->hdr, "tensors"), name);
    if (!v || strcmp(json_string_value(json_object_get(v, "dtype")), dtype) != 0) return NULL;
    json_t *sh = json_object_get(v, "shape");
    size_t n = 1;
    for (size_t i = 0; i < json_array_size(sh); i++) {
        int64_t d = json_integer_value(json_array_get(sh, i));
        if (shape && i < 4) shape[i] = d;
        n *= (size_t)d;
    }
    if (ndim) *ndim = (int)json_array_size(sh);
    if (numel) *numel = n;
    return r->data + json_integer_value(json_object_get(v, "offset"));
}

const float *bert_ref_f32(const bert_ref *r, const char *name, size_t *numel, int *ndim,
                          int64_t shape[4]) {
    return lookup(r, name, "f32", numel, ndim, shape);
}

const float *bert_ref_param_f32(const bert_ref *r, const char *kind, const char *param,
                                size_t *numel, int *ndim, int64_t shape[4]) {
    char key[DS_MAX_NAME + 16];
    snprintf(key, sizeof key, "%s/%s", kind, param);
    return bert_ref_f32(r, key, numel, ndim, shape);
}

const int32_t *bert_ref_i32(const bert_ref *r, const char *name, size_t *numel) {
    return lookup(r, name, "i32", numel, NULL, NULL);
}

int bert_ref_n_params(const bert_ref *r) {
    return (int)json_array_size(json_object_get(r->hdr, "param_names"));
}

const char *bert_ref_param_name(const bert_ref *r, int i) {
    return json_string_value(json_array_get(json_object_get(r->hdr, "param_names"), (size_t)i));
}
