/* Reader of the DSREF reference dumps (see ref_dump.h). */
#include "ref_dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t cap, const char *msg, const char *path) {
    snprintf(err, cap, "%s: %s", path, msg);
    return -1;
}

static int cfg_int(const ref_dump *r, const char *key) {
    return (int)json_integer_value(json_object_get(json_object_get(r->hdr, "config"), key));
}

static float cfg_num(const ref_dump *r, const char *key) {
    return (float)json_number_value(json_object_get(json_object_get(r->hdr, "config"), key));
}

int ref_dump_load(const char *path, ref_dump *r, char *err, size_t cap) {
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
        ref_dump_free(r);
        return fail(err, cap, "short read", path);
    }
    json_error_t jerr;
    r->hdr = json_loadb(text, jlen, 0, &jerr);
    free(text);
    if (!r->hdr) {
        ref_dump_free(r);
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
            ref_dump_free(r);
            return -1;
        }
    }
    json_t *batch = json_object_get(r->hdr, "batch");
    r->B = (int)json_integer_value(json_object_get(batch, "B"));
    r->T = (int)json_integer_value(json_object_get(batch, "T"));
    return 0;
}

void ref_dump_free(ref_dump *r) {
    if (r->hdr) json_decref(r->hdr);
    free(r->data);
    memset(r, 0, sizeof *r);
}

static const void *lookup(const ref_dump *r, const char *name, const char *dtype, size_t *numel,
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

const float *ref_dump_f32(const ref_dump *r, const char *name, size_t *numel, int *ndim,
                          int64_t shape[4]) {
    return lookup(r, name, "f32", numel, ndim, shape);
}

const float *ref_dump_param_f32(const ref_dump *r, const char *kind, const char *param,
                                size_t *numel, int *ndim, int64_t shape[4]) {
    char key[DS_MAX_NAME + 16];
    snprintf(key, sizeof key, "%s/%s", kind, param);
    return ref_dump_f32(r, key, numel, ndim, shape);
}

const int32_t *ref_dump_i32(const ref_dump *r, const char *name, size_t *numel) {
    return lookup(r, name, "i32", numel, NULL, NULL);
}

int ref_dump_n_params(const ref_dump *r) {
    return (int)json_array_size(json_object_get(r->hdr, "param_names"));
}

const char *ref_dump_param_name(const ref_dump *r, int i) {
    return json_string_value(json_array_get(json_object_get(r->hdr, "param_names"), (size_t)i));
}

double ref_dump_num(const ref_dump *r, const char *section, const char *key) {
    return json_number_value(json_object_get(json_object_get(r->hdr, section), key));
}

ds_bert_desc ref_dump_bert_desc(const ref_dump *r) {
    ds_bert_desc d = {
        .vocab_size = cfg_int(r, "vocab_size"),
        .hidden_size = cfg_int(r, "hidden_size"),
        .num_hidden_layers = cfg_int(r, "num_hidden_layers"),
        .num_attention_heads = cfg_int(r, "num_attention_heads"),
        .intermediate_size = cfg_int(r, "intermediate_size"),
        .max_position_embeddings = cfg_int(r, "max_position_embeddings"),
        .type_vocab_size = cfg_int(r, "type_vocab_size"),
        .hidden_dropout_prob = cfg_num(r, "hidden_dropout_prob"),
        .attention_probs_dropout_prob = cfg_num(r, "attention_probs_dropout_prob"),
        .layer_norm_eps = cfg_num(r, "layer_norm_eps"),
        .initializer_range = cfg_num(r, "initializer_range"),
        .pad_token_id = cfg_int(r, "pad_token_id"),
        .n_classes = cfg_int(r, "n_classes"),
        .max_seq_len = r->T,
    };
    return d;
}

ds_gpt2_desc ref_dump_gpt2_desc(const ref_dump *r) {
    ds_gpt2_desc d = {
        .vocab_size = cfg_int(r, "vocab_size"),
        .n_positions = cfg_int(r, "n_positions"),
        .n_embd = cfg_int(r, "n_embd"),
        .n_layer = cfg_int(r, "n_layer"),
        .n_head = cfg_int(r, "n_head"),
        .n_inner = cfg_int(r, "n_inner"),
        .resid_pdrop = cfg_num(r, "resid_pdrop"),
        .embd_pdrop = cfg_num(r, "embd_pdrop"),
        .attn_pdrop = cfg_num(r, "attn_pdrop"),
        .layer_norm_epsilon = cfg_num(r, "layer_norm_epsilon"),
        .initializer_range = cfg_num(r, "initializer_range"),
        .max_seq_len = r->T,
        .dropout_set = true, /* the zeros are meant */
    };
    return d;
}

bool ref_dump_zero_range(const ref_dump *r, const char *param, size_t numel, size_t *lo,
                         size_t *hi) {
    json_t *range = json_object_get(json_object_get(r->hdr, "zero_true_grad"), param);
    if (range) {
        *lo = (size_t)json_integer_value(json_array_get(range, 0));
        *hi = (size_t)json_integer_value(json_array_get(range, 1));
        return true;
    }
    json_t *list = json_object_get(r->hdr, "zero_true_grad_params");
    for (size_t i = 0; i < json_array_size(list); i++)
        if (strcmp(json_string_value(json_array_get(list, i)), param) == 0) {
            *lo = 0;
            *hi = numel;
            return true;
        }
    return false;
}
