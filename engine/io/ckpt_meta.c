/* meta.json of a checkpoint, through jansson (see ckpt_meta.h). */
#include "engine/io/ckpt_meta.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_file.h"
#include "engine/io/ckpt_seal.h"

#define FORMAT_NAME "zero-engine-checkpoint"

void ds_ckpt_meta_free(ds_ckpt_meta *m) {
    if (!m) return;
    free(m->config_json);
    free(m->params);
    free(m->shards);
    free(m->client_state_json);
    memset(m, 0, sizeof *m);
}

ds_status ds_ckpt_json_check(const char *text, const char *what) {
    json_error_t jerr;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s is not valid JSON: %s (line %d, column %d)", what,
                      jerr.text, jerr.line, jerr.column);
    json_decref(v);
    return DS_OK;
}

/* ------------------------------------------------------------------ write */

static json_t *hex64(uint64_t v) {
    char b[24];
    snprintf(b, sizeof b, "0x%016" PRIx64, v);
    return json_string(b);
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* Build the document; NULL with an error recorded on failure. */
static json_t *build(const ds_ckpt_meta *m) {
    json_error_t jerr;
    json_t *cfg = json_loads(m->config_json ? m->config_json : "{}", 0, &jerr);
    if (!cfg) {
        DS_ERR(DS_ERR_INVALID_ARG, "checkpoint config is not valid JSON: %s (line %d)", jerr.text,
               jerr.line);
        return NULL;
    }
    json_t *client = json_null();
    if (m->client_state_json) {
        json_decref(client);
        client = json_loads(m->client_state_json, JSON_DECODE_ANY, &jerr);
        if (!client) {
            json_decref(cfg);
            DS_ERR(DS_ERR_INVALID_ARG, "client_state is not valid JSON: %s (line %d, column %d)",
                   jerr.text, jerr.line, jerr.column);
            return NULL;
        }
    }
    json_t *params = json_array();
    for (int i = 0; i < m->n_params; i++) {
        const ds_ckpt_param_entry *p = &m->params[i];
        json_t *shape = json_array();
        for (int d = 0; d < p->ndim; d++) json_array_append_new(shape, json_integer(p->shape[d]));
        json_array_append_new(params, json_pack("{s:s, s:o, s:I, s:I}", "name", p->name, "shape",
                                                shape, "offset", (json_int_t)p->offset, "numel",
                                                (json_int_t)p->numel));
    }
    json_t *shards = json_array();
    for (int r = 0; r < m->world; r++) {
        const ds_ckpt_shard_entry *s = &m->shards[r];
        json_array_append_new(shards, json_pack("{s:s, s:i, s:I, s:I, s:I, s:o}", "file", s->file,
                                                "rank", s->rank, "lo", (json_int_t)s->lo, "hi",
                                                (json_int_t)s->hi, "bytes", (json_int_t)s->bytes,
                                                "index_hash", hex64(s->index_hash)));
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "format", json_string(FORMAT_NAME));
    json_object_set_new(doc, "format_version", json_integer(m->format_version));
    json_object_set_new(doc, "tag", json_string(m->tag));
    json_object_set_new(doc, "engine_version", json_string(m->engine_version));
    json_object_set_new(doc, "world_size", json_integer(m->world));
    json_object_set_new(doc, "zero_stage", json_integer(m->stage));
    json_object_set_new(doc, "precision", json_string(m->precision));
    json_object_set_new(doc, "optimizer", json_pack("{s:s, s:i}", "type", m->optimizer, "moments",
                                                    m->moments));
    json_object_set_new(doc, "flat", json_pack("{s:I, s:I, s:I, s:I, s:i, s:I}", "numel",
                                               (json_int_t)m->numel, "used", (json_int_t)m->used,
                                               "padded", (json_int_t)m->padded, "part",
                                               (json_int_t)m->part, "align", m->align,
                                               "frame_elems", (json_int_t)m->frame_elems));
    json_object_set_new(doc, "params", params);
    json_object_set_new(doc, "shards", shards);
    json_object_set_new(doc, "counters",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "global_step",
                                  (json_int_t)m->global_step, "applied_steps",
                                  (json_int_t)m->applied_steps, "skipped_steps",
                                  (json_int_t)m->skipped_steps, "micro_steps",
                                  (json_int_t)m->micro_steps, "samples", (json_int_t)m->samples,
                                  "gradient_accumulation_steps",
                                  (json_int_t)m->gradient_accumulation_steps,
                                  "train_micro_batch_size_per_gpu", (json_int_t)m->micro_batch));
    json_object_set_new(doc, "scheduler", json_pack("{s:s, s:I}", "type", m->scheduler,
                                                    "last_batch_iteration",
                                                    (json_int_t)m->sched_iteration));
    json_object_set_new(doc, "loss_scaler",
                        json_pack("{s:b, s:o, s:i, s:I, s:I}", "enabled", m->scaler_enabled,
                                  "scale", real_or_null(m->loss_scale), "cur_hysteresis",
                                  m->cur_hysteresis, "cur_iter", (json_int_t)m->scaler_cur_iter,
                                  "last_overflow_iter",
                                  (json_int_t)m->scaler_last_overflow_iter));
    json_object_set_new(doc, "rng", json_pack("{s:o}", "seed", hex64(m->seed)));
    json_object_set_new(doc, "data",
                        json_pack("{s:b, s:I, s:I, s:I}", "engine_loader", m->has_loader, "epoch",
                                  (json_int_t)m->epoch, "samples_in_epoch",
                                  (json_int_t)m->epoch_samples, "dataset_size",
                                  (json_int_t)m->dataset_size));
    json_object_set_new(doc, "last_step",
                        json_pack("{s:o, s:o, s:o, s:b}", "loss", real_or_null(m->last_loss),
                                  "lr", real_or_null(m->last_lr), "grad_norm",
                                  real_or_null(m->last_grad_norm), "skipped", m->last_skipped));
    json_object_set_new(doc, "config", cfg);
    json_object_set_new(doc, "client_state", client);
    return doc;
}

ds_status ds_ckpt_meta_write(const char *path, const ds_ckpt_meta *m) {
    json_t *doc = build(m);
    if (!doc) {
        ds_error_trace(__FILE__, __LINE__);
        return DS_ERR_INVALID_ARG;
    }
    char *text = json_dumps(doc, JSON_INDENT(1) | JSON_REAL_PRECISION(17) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (!text) return DS_ERR(DS_ERR_OOM, "%s: out of memory formatting meta.json", path);
    char *sealed = NULL;
    size_t n = 0;
    ds_status st = ds_ckpt_seal(DS_SEAL_JSON, text, strlen(text), &sealed, &n);
    free(text);
    if (st == DS_OK) st = ds_ckpt_write_file_atomic(path, sealed, n);
    free(sealed);
    DS_TRY(st);
    return DS_OK;
}

/* ------------------------------------------------------------------ read */

typedef struct rd {
    const char *path;
    ds_status st;
} rd;

static json_t *need(rd *c, json_t *obj, const char *key, const char *where, json_type t) {
    if (c->st != DS_OK) return NULL;
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    bool ok = v && (json_typeof(v) == t || (t == JSON_REAL && json_is_number(v)) ||
                    (t == JSON_TRUE && json_is_boolean(v)));
    if (!ok) {
        static const char *names[] = {"an object", "an array", "a string", "an integer",
                                      "a number", "a boolean", "a boolean", "null"};
        c->st = DS_ERR(DS_ERR_CORRUPT, "%s: %s%s%s missing or not %s", c->path, where,
                       *where ? "." : "", key, names[t]);
        return NULL;
    }
    return v;
}

static int64_t get_i64(rd *c, json_t *o, const char *k, const char *w) {
    json_t *v = need(c, o, k, w, JSON_INTEGER);
    return v ? (int64_t)json_integer_value(v) : 0;
}

/* An integer in [lo, hi]. Every field narrower than 64 bits is read through
 * this, so that no value changes on the way in (a world size of 2^32 + 1
 * would otherwise become 1). */
static int64_t get_ranged(rd *c, json_t *o, const char *k, const char *w, int64_t lo, int64_t hi) {
    int64_t v = get_i64(c, o, k, w);
    if (c->st == DS_OK && (v < lo || v > hi))
        c->st = DS_ERR(DS_ERR_CORRUPT, "%s: %s%s%s = %lld, outside [%lld, %lld]", c->path, w,
                       *w ? "." : "", k, (long long)v, (long long)lo, (long long)hi);
    return c->st == DS_OK ? v : 0;
}

static bool get_bool(rd *c, json_t *o, const char *k, const char *w) {
    json_t *v = need(c, o, k, w, JSON_TRUE);
    return v ? json_is_true(v) : false;
}

static void get_str(rd *c, json_t *o, const char *k, const char *w, char *out, size_t cap) {
    json_t *v = need(c, o, k, w, JSON_STRING);
    if (!v) return;
    if (strlen(json_string_value(v)) >= cap) {
        c->st = DS_ERR(DS_ERR_CORRUPT, "%s: %s.%s longer than %zu characters", c->path, w, k,
                       cap - 1);
        return;
    }
    snprintf(out, cap, "%s", json_string_value(v));
}

static double get_real_or_nan(rd *c, json_t *o, const char *k, const char *w) {
    if (c->st != DS_OK) return NAN;
    json_t *v = json_object_get(o, k);
    if (v && json_is_null(v)) return NAN;
    v = need(c, o, k, w, JSON_REAL);
    return v ? json_number_value(v) : NAN;
}

static uint64_t get_hex(rd *c, json_t *o, const char *k, const char *w) {
    char b[32] = "";
    get_str(c, o, k, w, b, sizeof b);
    if (c->st != DS_OK) return 0;
    char *end;
    uint64_t v = strtoull(b, &end, 16);
    if (strncmp(b, "0x", 2) != 0 || *end)
        c->st = DS_ERR(DS_ERR_CORRUPT, "%s: %s.%s = \"%s\" is not a 0x-prefixed hex number",
                       c->path, w, k, b);
    return v;
}

static void range_check(rd *c, bool ok, const char *what) {
    if (c->st == DS_OK && !ok) c->st = DS_ERR(DS_ERR_CORRUPT, "%s: %s", c->path, what);
}

static void read_params(rd *c, json_t *doc, ds_ckpt_meta *m) {
    json_t *arr = need(c, doc, "params", "", JSON_ARRAY);
    if (!arr) return;
    m->n_params = (int)json_array_size(arr);
    m->params = calloc(m->n_params ? (size_t)m->n_params : 1, sizeof *m->params);
    if (!m->params) {
        c->st = DS_ERR(DS_ERR_OOM, "%s: out of memory for %d parameters", c->path, m->n_params);
        return;
    }
    int64_t prev_end = 0;
    for (int i = 0; i < m->n_params && c->st == DS_OK; i++) {
        char where[48];
        snprintf(where, sizeof where, "params[%d]", i);
        json_t *p = json_array_get(arr, (size_t)i);
        ds_ckpt_param_entry *e = &m->params[i];
        get_str(c, p, "name", where, e->name, sizeof e->name);
        e->offset = get_i64(c, p, "offset", where);
        e->numel = get_i64(c, p, "numel", where);
        json_t *shape = need(c, p, "shape", where, JSON_ARRAY);
        if (!shape) return;
        e->ndim = (int)json_array_size(shape);
        range_check(c, e->ndim <= DS_MAX_DIMS, "a parameter has more dimensions than supported");
        int64_t n = 1;
        for (int d = 0; d < e->ndim && c->st == DS_OK; d++) {
            json_t *v = json_array_get(shape, (size_t)d);
            range_check(c, json_is_integer(v) && json_integer_value(v) >= 0,
                        "a parameter shape holds a non-integer or negative dimension");
            if (c->st == DS_OK) {
                e->shape[d] = (int64_t)json_integer_value(v);
                range_check(c, !__builtin_mul_overflow(n, e->shape[d], &n),
                            "a parameter shape overflows 64 bits");
            }
        }
        char msg[DS_MAX_NAME + 96];
        snprintf(msg, sizeof msg, "parameter %s: numel, shape and offset disagree or overlap",
                 e->name);
        /* offset >= prev_end >= 0 and numel = n >= 0: no sum below overflows */
        range_check(c, n == e->numel && e->offset >= prev_end && e->numel <= m->used - e->offset,
                    msg);
        if (c->st == DS_OK) prev_end = e->offset + e->numel;
    }
}

static void read_shards(rd *c, json_t *doc, ds_ckpt_meta *m) {
    json_t *arr = need(c, doc, "shards", "", JSON_ARRAY);
    if (!arr) return;
    if ((int)json_array_size(arr) != m->world) {
        c->st = DS_ERR(DS_ERR_CORRUPT, "%s: %zu shard entries for a world of %d", c->path,
                       json_array_size(arr), m->world);
        return;
    }
    m->shards = calloc((size_t)m->world, sizeof *m->shards);
    if (!m->shards) {
        c->st = DS_ERR(DS_ERR_OOM, "%s: out of memory", c->path);
        return;
    }
    for (int r = 0; r < m->world && c->st == DS_OK; r++) {
        char where[48];
        snprintf(where, sizeof where, "shards[%d]", r);
        json_t *s = json_array_get(arr, (size_t)r);
        ds_ckpt_shard_entry *e = &m->shards[r];
        get_str(c, s, "file", where, e->file, sizeof e->file);
        e->rank = (int)get_ranged(c, s, "rank", where, 0, INT_MAX);
        e->lo = get_i64(c, s, "lo", where);
        e->hi = get_i64(c, s, "hi", where);
        e->bytes = (uint64_t)get_ranged(c, s, "bytes", where, 0, INT64_MAX);
        e->index_hash = get_hex(c, s, "index_hash", where);
    }
}

static void read_doc(rd *c, json_t *doc, ds_ckpt_meta *m) {
    char fmt[64] = "";
    get_str(c, doc, "format", "", fmt, sizeof fmt);
    range_check(c, !strcmp(fmt, FORMAT_NAME), "not a zero-engine checkpoint (format)");
    m->format_version = (int)get_ranged(c, doc, "format_version", "", 0, INT_MAX);
    if (c->st == DS_OK && m->format_version != DS_CKPT_FORMAT_VERSION) {
        c->st = DS_ERR(DS_ERR_UNSUPPORTED, "%s: checkpoint format version %d, this build reads %d",
                       c->path, m->format_version, DS_CKPT_FORMAT_VERSION);
        return;
    }
    get_str(c, doc, "tag", "", m->tag, sizeof m->tag);
    get_str(c, doc, "engine_version", "", m->engine_version, sizeof m->engine_version);
    m->world = (int)get_ranged(c, doc, "world_size", "", 1, INT_MAX);
    m->stage = (int)get_ranged(c, doc, "zero_stage", "", 0, 3);
    get_str(c, doc, "precision", "", m->precision, sizeof m->precision);
    json_t *o = need(c, doc, "optimizer", "", JSON_OBJECT);
    get_str(c, o, "type", "optimizer", m->optimizer, sizeof m->optimizer);
    m->moments = (int)get_ranged(c, o, "moments", "optimizer", 0, 2);
    json_t *f = need(c, doc, "flat", "", JSON_OBJECT);
    m->numel = get_i64(c, f, "numel", "flat");
    m->used = get_i64(c, f, "used", "flat");
    m->padded = get_i64(c, f, "padded", "flat");
    m->part = get_i64(c, f, "part", "flat");
    m->align = (int)get_ranged(c, f, "align", "flat", 1, INT_MAX);
    /* the shard files' own bounds (ckpt_file.h): a load and zero_to_fp32
     * read one frame of this many elements at a time, and 0 would never
     * advance */
    m->frame_elems = (uint32_t)get_ranged(c, f, "frame_elems", "flat", DS_CKPT_FRAME_ELEMS_MIN,
                                          DS_CKPT_FRAME_ELEMS_MAX);
    int64_t whole;
    range_check(c, m->numel >= 0 && m->used >= m->numel && m->padded >= m->used &&
                       !__builtin_mul_overflow(m->part, (int64_t)m->world, &whole) &&
                       whole == m->padded,
                "the flat layout (numel <= used <= padded = part * world_size) out of range");
    read_params(c, doc, m);
    read_shards(c, doc, m);
    json_t *k = need(c, doc, "counters", "", JSON_OBJECT);
    m->global_step = get_i64(c, k, "global_step", "counters");
    m->applied_steps = get_i64(c, k, "applied_steps", "counters");
    m->skipped_steps = get_i64(c, k, "skipped_steps", "counters");
    m->micro_steps = get_i64(c, k, "micro_steps", "counters");
    m->samples = get_i64(c, k, "samples", "counters");
    m->gradient_accumulation_steps = get_i64(c, k, "gradient_accumulation_steps", "counters");
    m->micro_batch = get_i64(c, k, "train_micro_batch_size_per_gpu", "counters");
    range_check(c, m->gradient_accumulation_steps >= 1 && m->global_step >= 0 &&
                       m->micro_steps >= 0 && m->applied_steps >= 0 && m->skipped_steps >= 0 &&
                       m->samples >= 0,
                "counters out of range");
    json_t *s = need(c, doc, "scheduler", "", JSON_OBJECT);
    get_str(c, s, "type", "scheduler", m->scheduler, sizeof m->scheduler);
    m->sched_iteration = get_i64(c, s, "last_batch_iteration", "scheduler");
    json_t *ls = need(c, doc, "loss_scaler", "", JSON_OBJECT);
    m->scaler_enabled = get_bool(c, ls, "enabled", "loss_scaler");
    m->loss_scale = get_real_or_nan(c, ls, "scale", "loss_scaler");
    m->cur_hysteresis = (int)get_ranged(c, ls, "cur_hysteresis", "loss_scaler", INT_MIN, INT_MAX);
    m->scaler_cur_iter = get_i64(c, ls, "cur_iter", "loss_scaler");
    m->scaler_last_overflow_iter = get_i64(c, ls, "last_overflow_iter", "loss_scaler");
    /* checked here, before the load changes anything (a bad value found
     * while restoring would leave a half-loaded engine) */
    range_check(c, !m->scaler_enabled || (isfinite(m->loss_scale) && m->loss_scale > 0.0),
                "loss_scaler.scale must be a positive number when the scaler is enabled");
    json_t *g = need(c, doc, "rng", "", JSON_OBJECT);
    m->seed = get_hex(c, g, "seed", "rng");
    json_t *d = need(c, doc, "data", "", JSON_OBJECT);
    m->has_loader = get_bool(c, d, "engine_loader", "data");
    m->epoch = get_i64(c, d, "epoch", "data");
    m->epoch_samples = get_i64(c, d, "samples_in_epoch", "data");
    m->dataset_size = get_i64(c, d, "dataset_size", "data");
    range_check(c, (!m->has_loader || (m->epoch >= 0 && m->epoch_samples >= 0)) &&
                       m->dataset_size >= -1, /* -1: saved without training data */
                "data.epoch and samples_in_epoch must not be negative, nor dataset_size below "
                "-1");
    json_t *l = need(c, doc, "last_step", "", JSON_OBJECT);
    m->last_loss = get_real_or_nan(c, l, "loss", "last_step");
    m->last_lr = get_real_or_nan(c, l, "lr", "last_step");
    m->last_grad_norm = get_real_or_nan(c, l, "grad_norm", "last_step");
    m->last_skipped = get_bool(c, l, "skipped", "last_step");
    json_t *cfg = need(c, doc, "config", "", JSON_OBJECT);
    if (cfg && !(m->config_json = json_dumps(cfg, JSON_COMPACT | JSON_REAL_PRECISION(17) |
                                                      JSON_PRESERVE_ORDER)))
        c->st = DS_ERR(DS_ERR_OOM, "%s: out of memory", c->path);
    json_t *cs = json_object_get(doc, "client_state");
    if (c->st == DS_OK && cs && !json_is_null(cs) &&
        !(m->client_state_json = json_dumps(cs, JSON_COMPACT | JSON_ENCODE_ANY |
                                                    JSON_REAL_PRECISION(17) | JSON_PRESERVE_ORDER)))
        c->st = DS_ERR(DS_ERR_OOM, "%s: out of memory", c->path);
}

ds_status ds_ckpt_meta_read(const char *path, ds_ckpt_meta *out) {
    memset(out, 0, sizeof *out);
    char *text;
    size_t n;
    DS_TRY(ds_ckpt_read_sealed(path, DS_SEAL_JSON, &text, &n, NULL));
    json_error_t jerr;
    json_t *doc = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!doc)
        return DS_ERR(DS_ERR_CORRUPT, "%s:%d:%d: invalid JSON: %s", path, jerr.line, jerr.column,
                      jerr.text);
    rd c = {.path = path, .st = DS_OK};
    if (!json_is_object(doc)) c.st = DS_ERR(DS_ERR_CORRUPT, "%s: not a JSON object", path);
    else read_doc(&c, doc, out);
    json_decref(doc);
    if (c.st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return c.st;
}
