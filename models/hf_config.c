/* A Hugging Face BERT config.json into ds_bert_desc. */
#include "models/hf.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

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
