/* Hugging Face config.json files: BERT's into ds_bert_desc, GPT-2's into and
 * out of ds_gpt2_desc. */
#include "hf/hf.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/ckpt_dir.h"
#include "models/modules.h"

/* A positive integer; required keys fail when absent, optional ones take
 * `def`. */
static ds_status get_int(const char *path, json_t *root, const char *key, bool required, int def,
                         int *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return DS_ERR(DS_ERR_CONFIG, "%s: %s: required key missing", path, key);
        *out = def;
        return DS_OK;
    }
    if (!json_is_integer(v))
        return DS_ERR(DS_ERR_CONFIG, "%s: %s: must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < 1 || x > 1000000000)
        return DS_ERR(DS_ERR_CONFIG, "%s: %s: must be 1..1e9, got %lld", path, key, (long long)x);
    *out = (int)x;
    return DS_OK;
}

/* A number in [lo, hi) (hi_incl: [lo, hi]); absent or null takes `def`. */
static ds_status get_float(const char *path, json_t *root, const char *key, double def, double lo,
                           double hi, bool hi_incl, float *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return DS_OK;
    }
    if (!json_is_number(v)) return DS_ERR(DS_ERR_CONFIG, "%s: %s: must be a number", path, key);
    double x = json_number_value(v);
    if (!(x >= lo) || (hi_incl ? !(x <= hi) : !(x < hi)))
        return DS_ERR(DS_ERR_CONFIG, "%s: %s: must be in [%g, %g%c, got %g", path, key, lo, hi,
                      hi_incl ? ']' : ')', x);
    *out = (float)x;
    return DS_OK;
}

/* An optional string key that, when present, must equal `want`. */
static ds_status want_string(const char *path, json_t *root, const char *key, const char *want,
                             const char *why) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return DS_OK;
    if (!json_is_string(v)) return DS_ERR(DS_ERR_CONFIG, "%s: %s: must be a string", path, key);
    if (strcmp(json_string_value(v), want) != 0)
        return DS_ERR(DS_ERR_UNSUPPORTED, "%s: %s: \"%s\" is not supported, only \"%s\" (%s)", path,
                      key, json_string_value(v), want, why);
    return DS_OK;
}

static ds_status want_false(const char *path, json_t *root, const char *key) {
    json_t *v = json_object_get(root, key);
    if (v && json_is_true(v))
        return DS_ERR(DS_ERR_UNSUPPORTED, "%s: %s: true is not supported (an encoder-only "
                      "classifier)", path, key);
    return DS_OK;
}

static ds_status read_desc(const char *path, json_t *root, int n_classes, ds_bert_desc *d) {
    if (!json_is_object(root))
        return DS_ERR(DS_ERR_CONFIG, "%s: the top level is not a JSON object", path);
    DS_TRY(want_string(path, root, "model_type", "bert",
                       "other architectures differ in positions, norms or heads"));
    DS_TRY(want_string(path, root, "hidden_act", "gelu",
                       "the engine implements BERT's exact erf GELU"));
    DS_TRY(want_string(path, root, "position_embedding_type", "absolute",
                       "relative position embeddings are not implemented"));
    DS_TRY(want_false(path, root, "is_decoder"));
    DS_TRY(want_false(path, root, "add_cross_attention"));
    DS_TRY(get_int(path, root, "vocab_size", true, 0, &d->vocab_size));
    DS_TRY(get_int(path, root, "hidden_size", true, 0, &d->hidden_size));
    DS_TRY(get_int(path, root, "num_hidden_layers", true, 0, &d->num_hidden_layers));
    DS_TRY(get_int(path, root, "num_attention_heads", true, 0, &d->num_attention_heads));
    DS_TRY(get_int(path, root, "intermediate_size", true, 0, &d->intermediate_size));
    DS_TRY(get_int(path, root, "max_position_embeddings", true, 0, &d->max_position_embeddings));
    DS_TRY(get_int(path, root, "type_vocab_size", false, 2, &d->type_vocab_size));
    DS_TRY(get_float(path, root, "hidden_dropout_prob", 0.1, 0.0, 1.0, false,
                     &d->hidden_dropout_prob));
    DS_TRY(get_float(path, root, "attention_probs_dropout_prob", 0.1, 0.0, 1.0, false,
                     &d->attention_probs_dropout_prob));
    /* > 0: a zero eps would divide by zero on a constant row */
    DS_TRY(get_float(path, root, "layer_norm_eps", 1e-12, 1e-30, 1.0, true, &d->layer_norm_eps));
    if (d->layer_norm_eps <= 0.0f)
        return DS_ERR(DS_ERR_CONFIG, "%s: layer_norm_eps: underflows fp32", path);
    DS_TRY(get_float(path, root, "initializer_range", 0.02, 0.0, 10.0, true,
                     &d->initializer_range));
    if (d->hidden_size % d->num_attention_heads != 0)
        return DS_ERR(DS_ERR_CONFIG, "%s: hidden_size: %d is not a multiple of "
                      "num_attention_heads %d", path, d->hidden_size, d->num_attention_heads);
    /* pad_token_id may be 0 (BERT's [PAD]); null means none, where HF keeps no
     * padding row: row 0 then is as good as any, since only padding uses it */
    json_t *pad = json_object_get(root, "pad_token_id");
    d->pad_token_id = 0;
    if (pad && !json_is_null(pad)) {
        if (!json_is_integer(pad) || json_integer_value(pad) < 0 ||
            json_integer_value(pad) >= d->vocab_size)
            return DS_ERR(DS_ERR_CONFIG, "%s: pad_token_id: must be an integer in [0, vocab_size "
                          "%d)", path, d->vocab_size);
        d->pad_token_id = (int)json_integer_value(pad);
    }
    /* the engine's classifier dropout is hidden_dropout_prob, which is what
     * HF uses when classifier_dropout is null */
    json_t *cd = json_object_get(root, "classifier_dropout");
    if (cd && !json_is_null(cd) &&
        !(json_is_number(cd) && (float)json_number_value(cd) == d->hidden_dropout_prob))
        return DS_ERR(DS_ERR_UNSUPPORTED, "%s: classifier_dropout: only null or a value equal to "
                      "hidden_dropout_prob (%g) is supported", path, (double)d->hidden_dropout_prob);
    if (n_classes > 0) {
        d->n_classes = n_classes;
    } else {
        json_t *id2label = json_object_get(root, "id2label");
        if (json_is_object(id2label) && json_object_size(id2label) > 0)
            d->n_classes = (int)json_object_size(id2label);
        else
            DS_TRY(get_int(path, root, "num_labels", false, 2, &d->n_classes));
    }
    d->max_seq_len = d->max_position_embeddings;
    return DS_OK;
}

ds_status ds_hf_bert_config_read(const char *config_json_path, int n_classes, ds_bert_desc *out) {
    memset(out, 0, sizeof *out);
    if (n_classes < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: n_classes %d must be >= 0 (0 = from the file)",
                      config_json_path, n_classes);
    FILE *fp = fopen(config_json_path, "rb");
    if (!fp) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", config_json_path, strerror(errno));
    json_error_t jerr;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root)
        return DS_ERR(DS_ERR_CONFIG, "%s:%d:%d: %s", config_json_path, jerr.line, jerr.column,
                      jerr.text);
    ds_bert_desc d;
    memset(&d, 0, sizeof d);
    ds_status st = read_desc(config_json_path, root, n_classes, &d);
    json_decref(root);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = d;
    return DS_OK;
}

/* ---- GPT-2 ---- */

/* An optional boolean key that, when present, must equal `want`. */
static ds_status want_bool(const char *path, json_t *root, const char *key, bool want,
                           const char *why) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return DS_OK;
    if (!json_is_boolean(v)) return DS_ERR(DS_ERR_CONFIG, "%s: %s: must be true or false", path, key);
    if (json_is_true(v) != want)
        return DS_ERR(DS_ERR_UNSUPPORTED, "%s: %s: %s is not supported (%s)", path, key,
                      want ? "false" : "true", why);
    return DS_OK;
}

static ds_status read_gpt2(const char *path, json_t *root, ds_gpt2_desc *d) {
    if (!json_is_object(root))
        return DS_ERR(DS_ERR_CONFIG, "%s: the top level is not a JSON object", path);
    DS_TRY(want_string(path, root, "model_type", "gpt2",
                       "other architectures differ in positions, norms or heads"));
    json_t *act = json_object_get(root, "activation_function");
    if (act && !json_is_null(act)) {
        if (!json_is_string(act))
            return DS_ERR(DS_ERR_CONFIG, "%s: activation_function: must be a string", path);
        const char *a = json_string_value(act);
        /* two names of one function: the tanh approximation of GELU */
        if (strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)
            return DS_ERR(DS_ERR_UNSUPPORTED, "%s: activation_function: \"%s\" is not supported, "
                          "only \"gelu_new\" or \"gelu_pytorch_tanh\" (the tanh GELU the engine "
                          "implements)", path, a);
    }
    DS_TRY(want_bool(path, root, "tie_word_embeddings", true,
                     "the engine's output projection is the token embedding"));
    DS_TRY(want_bool(path, root, "scale_attn_weights", true,
                     "attention scores are always scaled by 1/sqrt(head size)"));
    DS_TRY(want_bool(path, root, "scale_attn_by_inverse_layer_idx", false,
                     "no per-layer attention scaling is implemented"));
    DS_TRY(want_bool(path, root, "add_cross_attention", false, "a decoder-only model"));
    json_t *reorder = json_object_get(root, "reorder_and_upcast_attn");
    if (reorder && !json_is_null(reorder) && !json_is_boolean(reorder))
        return DS_ERR(DS_ERR_CONFIG, "%s: reorder_and_upcast_attn: must be true or false", path);
    DS_TRY(get_int(path, root, "vocab_size", true, 0, &d->vocab_size));
    DS_TRY(get_int(path, root, "n_embd", true, 0, &d->n_embd));
    DS_TRY(get_int(path, root, "n_layer", true, 0, &d->n_layer));
    DS_TRY(get_int(path, root, "n_head", true, 0, &d->n_head));
    DS_TRY(get_int(path, root, "n_positions", true, 0, &d->n_positions));
    /* null (GPT2Config's default): 4 n_embd, which ds_gpt2_desc spells 0 */
    DS_TRY(get_int(path, root, "n_inner", false, 0, &d->n_inner));
    if (d->vocab_size < 2)
        return DS_ERR(DS_ERR_CONFIG, "%s: vocab_size: must be >= 2, got %d", path, d->vocab_size);
    if (d->n_embd % d->n_head != 0)
        return DS_ERR(DS_ERR_CONFIG, "%s: n_embd: %d is not a multiple of n_head %d", path,
                      d->n_embd, d->n_head);
    DS_TRY(get_float(path, root, "resid_pdrop", 0.1, 0.0, 1.0, false, &d->resid_pdrop));
    DS_TRY(get_float(path, root, "embd_pdrop", 0.1, 0.0, 1.0, false, &d->embd_pdrop));
    DS_TRY(get_float(path, root, "attn_pdrop", 0.1, 0.0, 1.0, false, &d->attn_pdrop));
    /* > 0: a zero epsilon would divide by zero on a constant row */
    DS_TRY(get_float(path, root, "layer_norm_epsilon", 1e-5, 1e-30, 1.0, true,
                     &d->layer_norm_epsilon));
    if (d->layer_norm_epsilon <= 0.0f)
        return DS_ERR(DS_ERR_CONFIG, "%s: layer_norm_epsilon: underflows fp32", path);
    DS_TRY(get_float(path, root, "initializer_range", 0.02, 1e-30, 10.0, true,
                     &d->initializer_range));
    if (d->initializer_range <= 0.0f)
        return DS_ERR(DS_ERR_CONFIG, "%s: initializer_range: underflows fp32", path);
    /* both ids given as integers: the tokenizer's special ids round-trip */
    json_t *bos = json_object_get(root, "bos_token_id"), *eos = json_object_get(root, "eos_token_id");
    if (json_is_integer(bos) && json_is_integer(eos)) {
        json_int_t b = json_integer_value(bos), e = json_integer_value(eos);
        if (b < 0 || b >= d->vocab_size || e < 0 || e >= d->vocab_size)
            return DS_ERR(DS_ERR_CONFIG, "%s: bos_token_id %lld / eos_token_id %lld: outside the "
                          "vocabulary [0, %d)", path, (long long)b, (long long)e, d->vocab_size);
        d->bos_token_id = (int)b;
        d->eos_token_id = (int)e;
        d->token_ids_set = true;
    }
    d->dropout_set = true;
    d->max_seq_len = d->n_positions;
    return DS_OK;
}

ds_status ds_hf_gpt2_config_read(const char *path, ds_gpt2_desc *out) {
    memset(out, 0, sizeof *out);
    if (!path) return DS_ERR(DS_ERR_INVALID_ARG, "ds_hf_gpt2_config_read: path is NULL");
    FILE *fp = fopen(path, "rb");
    if (!fp) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    json_error_t jerr;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root) return DS_ERR(DS_ERR_CONFIG, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    ds_gpt2_desc d;
    memset(&d, 0, sizeof d);
    ds_status st = read_gpt2(path, root, &d);
    json_decref(root);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = d;
    return DS_OK;
}

/* v as the JSON number with the fewest significant digits that reads back
 * as the same float (0.1f is written 0.1, not 0.100000001490116), as Python
 * writes the values of a config that was given 0.1. Printed with
 * JSON_REAL_PRECISION(9) below, which reproduces those digits. */
double ds_hf_shortest(float v) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return strtod(buf, NULL);
}

static json_t *json_float(float v) { return json_real(ds_hf_shortest(v)); }

/* Sets key to value (a new reference, stolen); false when either failed. */
static bool put(json_t *root, const char *key, json_t *value) {
    return value && json_object_set_new(root, key, value) == 0;
}

ds_status ds_hf_gpt2_config_write(const char *path, const ds_gpt2_desc *in) {
    if (!path || !in) return DS_ERR(DS_ERR_INVALID_ARG, "ds_hf_gpt2_config_write: NULL argument");
    ds_gpt2_desc d;
    ds_status st = ds_gpt2_resolve(in, &d);
    if (st != DS_OK) {
        ds_error_prefix("%s", path);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    json_t *root = json_object();
    json_t *arch = json_array();
    bool ok = root && arch && json_array_append_new(arch, json_string("GPT2LMHeadModel")) == 0;
    ok = ok && put(root, "architectures", arch);
    if (!ok) json_decref(arch); /* not yet owned by root */
    ok = ok && put(root, "model_type", json_string("gpt2"));
    ok = ok && put(root, "activation_function", json_string("gelu_new"));
    ok = ok && put(root, "vocab_size", json_integer(d.vocab_size));
    ok = ok && put(root, "n_positions", json_integer(d.n_positions));
    ok = ok && put(root, "n_embd", json_integer(d.n_embd));
    ok = ok && put(root, "n_layer", json_integer(d.n_layer));
    ok = ok && put(root, "n_head", json_integer(d.n_head));
    /* null is GPT2Config's way of saying 4 n_embd */
    ok = ok && put(root, "n_inner",
                   (int64_t)d.n_inner == 4 * (int64_t)d.n_embd ? json_null()
                                                                : json_integer(d.n_inner));
    ok = ok && put(root, "resid_pdrop", json_float(d.resid_pdrop));
    ok = ok && put(root, "embd_pdrop", json_float(d.embd_pdrop));
    ok = ok && put(root, "attn_pdrop", json_float(d.attn_pdrop));
    ok = ok && put(root, "layer_norm_epsilon", json_float(d.layer_norm_epsilon));
    ok = ok && put(root, "initializer_range", json_float(d.initializer_range));
    ok = ok && put(root, "tie_word_embeddings", json_true());
    ok = ok && put(root, "scale_attn_weights", json_true());
    ok = ok && put(root, "scale_attn_by_inverse_layer_idx", json_false());
    ok = ok && put(root, "reorder_and_upcast_attn", json_false());
    ok = ok && put(root, "add_cross_attention", json_false());
    /* generate() stops at eos_token_id: known only when the tokenizer said */
    ok = ok && put(root, "bos_token_id",
                   d.token_ids_set ? json_integer(d.bos_token_id) : json_null());
    ok = ok && put(root, "eos_token_id",
                   d.token_ids_set ? json_integer(d.eos_token_id) : json_null());
    ok = ok && put(root, "use_cache", json_true());
    char *text = ok ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                           JSON_REAL_PRECISION(9))
                    : NULL;
    json_decref(root);
    if (!text) return DS_ERR(DS_ERR_OOM, "%s: building the config JSON", path);
    size_t len = strlen(text);
    /* a trailing newline, as json.dump / save_pretrained leave one */
    char *line = malloc(len + 2);
    if (!line) {
        free(text);
        return DS_ERR(DS_ERR_OOM, "%s: %zu bytes", path, len + 2);
    }
    memcpy(line, text, len);
    line[len] = '\n';
    free(text);
    st = ds_ckpt_write_file_atomic(path, line, len + 1);
    free(line);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}
