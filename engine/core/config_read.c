/* Typed, range-checked reading of JSON values and the table-driven walk
 * over an object's keys (see config_internal.h). Every failure message has
 * the shape "key.path: what it must be, got VALUE". */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/core/config_internal.h"

ds_status cfg_fail_at(const char *file_name, ds_status st, const char *src, int line,
                      const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (file_name && file_name[0]) return ds_error_set(st, src, line, "%s: %s", file_name, msg);
    return ds_error_set(st, src, line, "%s", msg);
}

void cfg_warn(const cfg_ctx *ctx, const char *fmt, ...) {
    char msg[768], full[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->file && ctx->file[0])
        snprintf(full, sizeof full, "%s: %s", ctx->file, msg);
    else
        snprintf(full, sizeof full, "%s", msg);
    if (ctx->warn)
        ctx->warn(ctx->user, full);
    else
        fprintf(stderr, "ds_config: warning: %s\n", full);
}

void cfg_fmt_real(double x, char *buf, size_t cap) {
    /* Negative zero: %g gives "-0", which JSON reads as the integer 0, so a
     * config written and read again would hold +0 (found by
     * tests/fuzz/fuzz_config, issue 15); "-0.0" is a real and reads back. */
    if (x == 0.0 && signbit(x)) {
        snprintf(buf, cap, "-0.0");
        return;
    }
    /* The shortest of %.1g..%.17g that strtod reads back to x: 5e-4 prints
     * as 0.0005, not 0.00050000000000000001, and still round-trips. */
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* Append the JSON text of v to buf[*len..cap), reals in shortest form. */
static void fmt_append(const json_t *v, char *buf, size_t cap, size_t *len, int depth) {
    char tmp[80];
    const char *piece = tmp;
    switch (json_typeof(v)) {
    case JSON_INTEGER: snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: cfg_fmt_real(json_real_value(v), tmp, sizeof tmp); break;
    case JSON_TRUE: piece = "true"; break;
    case JSON_FALSE: piece = "false"; break;
    case JSON_NULL: piece = "null"; break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        /* Cut long strings: the message is one line for a human. */
        if (strlen(s) > 60)
            snprintf(tmp, sizeof tmp, "\"%.57s...\"", s);
        else
            snprintf(tmp, sizeof tmp, "\"%s\"", s);
        break;
    }
    case JSON_ARRAY:
    case JSON_OBJECT: {
        int is_arr = json_is_array(v);
        if (depth > 2) {
            piece = is_arr ? "[...]" : "{...}";
            break;
        }
        snprintf(buf + *len, cap - *len, "%c", is_arr ? '[' : '{');
        *len += strlen(buf + *len);
        size_t i = 0;
        const char *key;
        json_t *item;
        if (is_arr) {
            json_array_foreach(v, i, item) {
                if (i) {
                    snprintf(buf + *len, cap - *len, ", ");
                    *len += strlen(buf + *len);
                }
                fmt_append(item, buf, cap, len, depth + 1);
            }
        } else {
            json_object_foreach((json_t *)v, key, item) {
                snprintf(buf + *len, cap - *len, "%s\"%s\": ", i++ ? ", " : "", key);
                *len += strlen(buf + *len);
                fmt_append(item, buf, cap, len, depth + 1);
            }
        }
        snprintf(buf + *len, cap - *len, "%c", is_arr ? ']' : '}');
        *len += strlen(buf + *len);
        return;
    }
    }
    snprintf(buf + *len, cap - *len, "%s", piece);
    *len += strlen(buf + *len);
}

void cfg_fmt_value(const json_t *v, char *buf, size_t cap) {
    if (!v) {
        snprintf(buf, cap, "(nothing)");
        return;
    }
    size_t len = 0;
    buf[0] = '\0';
    fmt_append(v, buf, cap, &len, 0);
    /* snprintf stopped at cap - 1: mark a cut-off value as such. */
    if (len >= cap - 1 && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

void cfg_join(char *out, const char *prefix, const char *key) {
    if (prefix && prefix[0])
        snprintf(out, CFG_PATH_CAP, "%s.%s", prefix, key);
    else
        snprintf(out, CFG_PATH_CAP, "%s", key);
}

int cfg_is_auto(const json_t *v) {
    return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

/* "auto" where it is not accepted gets its own message: the user clearly
 * meant something, and the generic "must be an integer" would hide that. */
static ds_status fail_auto(const cfg_ctx *ctx, const char *path) {
    return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: \"auto\" is not accepted for this key, got \"auto\"",
                    path);
}

static void fmt_bound(char *buf, size_t cap, double x, int is_int) {
    if (is_int)
        snprintf(buf, cap, "%.0f", x);
    else
        cfg_fmt_real(x, buf, cap);
}

/* "must be 0..3", "must be >= 1", "must be in [0, 1)", "must be > 0". */
static void fmt_range(char *buf, size_t cap, const cfg_key *k, int is_int) {
    char lo[40], hi[40];
    fmt_bound(lo, sizeof lo, k->lo, is_int);
    fmt_bound(hi, sizeof hi, k->hi, is_int);
    if (k->flags & CFG_NO_HI)
        snprintf(buf, cap, "must be %s %s", (k->flags & CFG_LO_OPEN) ? ">" : ">=", lo);
    else if (is_int)
        snprintf(buf, cap, "must be %s..%s", lo, hi);
    else
        snprintf(buf, cap, "must be in %c%s, %s%c", (k->flags & CFG_LO_OPEN) ? '(' : '[', lo, hi,
                 (k->flags & CFG_HI_OPEN) ? ')' : ']');
}

static int in_range(double x, const cfg_key *k) {
    if ((k->flags & CFG_LO_OPEN) ? !(x > k->lo) : !(x >= k->lo)) return 0;
    if (k->flags & CFG_NO_HI) return 1;
    return (k->flags & CFG_HI_OPEN) ? x < k->hi : x <= k->hi;
}

ds_status cfg_read_i64(const cfg_ctx *ctx, const json_t *v, const char *path, const cfg_key *k,
                       int64_t *out) {
    char got[96], range[96];
    cfg_fmt_value(v, got, sizeof got);
    if (cfg_is_auto(v)) return fail_auto(ctx, path);
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
        /* DeepSpeed configs write sizes as 5e8, which JSON reads as a real:
         * accept it when it is a whole number an int64 can hold (2^63 is
         * exactly representable, so the comparison is exact). */
        double d = json_real_value(v);
        if (d != floor(d))
            return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be an integer, got %s", path, got);
        if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) { /* 1e30 */
            if ((k->flags & CFG_NO_HI) && d > 0)
                return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be <= 9223372036854775807, got %s",
                                path, got);
            fmt_range(range, sizeof range, k, 1);
            return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: %s, got %s", path, range, got);
        }
        x = (int64_t)d;
    } else {
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be an integer, got %s", path, got);
    }
    /* Bounds are doubles; every bound in the tables is exact in a double and
     * values beyond 2^53 only meet the open upper end, so the compare is safe. */
    if (!in_range((double)x, k)) {
        fmt_range(range, sizeof range, k, 1);
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: %s, got %s", path, range, got);
    }
    *out = x;
    return DS_OK;
}

ds_status cfg_read_real(const cfg_ctx *ctx, const json_t *v, const char *path, const cfg_key *k,
                        double *out) {
    char got[96], range[96];
    cfg_fmt_value(v, got, sizeof got);
    if (cfg_is_auto(v)) return fail_auto(ctx, path);
    if (!json_is_number(v))
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be a number, got %s", path, got);
    double x = json_number_value(v);
    if (!in_range(x, k)) {
        fmt_range(range, sizeof range, k, 0);
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: %s, got %s", path, range, got);
    }
    *out = x;
    return DS_OK;
}

ds_status cfg_read_bool(const cfg_ctx *ctx, const json_t *v, const char *path, bool *out) {
    if (cfg_is_auto(v)) return fail_auto(ctx, path);
    if (!json_is_boolean(v)) {
        /* 0/1 and "true" are refused, although DeepSpeed's pydantic models
         * (lax mode) convert them: a config that means a switch says true or
         * false, and the same file elsewhere (HF's fill, a plain dict read)
         * would take a quoted "false" as true. */
        char got[96];
        cfg_fmt_value(v, got, sizeof got);
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be true or false, got %s", path, got);
    }
    *out = json_is_true(v);
    return DS_OK;
}

ds_status cfg_need_object(const cfg_ctx *ctx, const json_t *v, const char *path) {
    if (json_is_object(v)) return DS_OK;
    if (cfg_is_auto(v)) return fail_auto(ctx, path);
    char got[96];
    cfg_fmt_value(v, got, sizeof got);
    return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be an object, got %s", path, got);
}

ds_status cfg_read_enum(const cfg_ctx *ctx, const json_t *v, const char *path,
                        const char *const *names, int n, const char *what, int *idx) {
    char got[96];
    cfg_fmt_value(v, got, sizeof got);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        for (int i = 0; i < n; i++) {
            if (strcasecmp(s, names[i]) == 0) {
                *idx = i;
                return DS_OK;
            }
        }
        if (strcmp(s, "auto") == 0) return fail_auto(ctx, path);
    }
    return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be one of %s, got %s", path, what, got);
}

/* The sections DeepSpeed reads through its config models
 * (DeepSpeedConfigModel), which drop every "auto" value before reading, so
 * that the key keeps its default. */
static bool auto_means_default(const char *path) {
    static const char *const sections[] = {"zero_optimization.", "fp16.", "bf16.", "bfloat16.",
                                           "tensorboard.", "csv_monitor."};
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
        if (strncmp(path, sections[i], strlen(sections[i])) == 0) return true;
    return false;
}

static ds_status read_key(const cfg_ctx *ctx, json_t *v, const char *path, const cfg_key *k,
                          void *base) {
    char *b = (char *)base;
    if ((k->flags & CFG_AUTO) && cfg_is_auto(v)) {
        *(bool *)(b + k->auto_off) = true;
        return DS_OK;
    }
    if (cfg_is_auto(v) && auto_means_default(path)) {
        cfg_warn(ctx, "%s: \"auto\" keeps the default, as DeepSpeed drops \"auto\" in this "
                      "section (no trainer fills this key)", path);
        return DS_OK;
    }
    if ((k->flags & CFG_NULL_UNSET) && json_is_null(v)) return DS_OK;
    switch (k->kind) {
    case CFG_I64: DS_TRY(cfg_read_i64(ctx, v, path, k, (int64_t *)(b + k->off))); break;
    case CFG_INT: {
        int64_t x;
        DS_TRY(cfg_read_i64(ctx, v, path, k, &x));
        if (x > INT_MAX) { /* rows without an upper bound still have int's */
            char got[96];
            cfg_fmt_value(v, got, sizeof got);
            return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be <= %d, got %s", path, INT_MAX, got);
        }
        *(int *)(b + k->off) = (int)x;
        break;
    }
    case CFG_REAL: DS_TRY(cfg_read_real(ctx, v, path, k, (double *)(b + k->off))); break;
    case CFG_BOOL: DS_TRY(cfg_read_bool(ctx, v, path, (bool *)(b + k->off))); break;
    case CFG_FN: DS_TRY(k->fn(ctx, v, path, base)); break;
    }
    if (k->set_off != CFG_NO_OFF) *(bool *)(b + k->set_off) = true;
    return DS_OK;
}

/* Levenshtein distance, for "did you mean ...?" on a misspelt key. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *closest_key(const char *key, const cfg_key *keys, size_t nkeys,
                               size_t *edits) {
    const char *best = NULL;
    size_t best_d = 4; /* beyond 3 edits a suggestion is noise */
    for (size_t i = 0; i < nkeys; i++) {
        size_t d = edit_distance(key, keys[i].name);
        if (d < best_d) {
            best_d = d;
            best = keys[i].name;
        }
    }
    *edits = best_d;
    return best;
}

/* A value of a DeepSpeed key zero-engine does not implement that asks for
 * nothing: null, false, {} or a section with "enabled": false, an object of
 * such values only, or `inert` (JSON, DeepSpeed's default where that is
 * what zero-engine does), so that configs written out in full by DeepSpeed
 * or Hugging Face load as they are. */
static bool unimpl_inert(json_t *v, const char *inert) {
    if (json_is_null(v)) return true;
    if (inert) { /* a key whose default is not false: only that value */
        json_t *d = json_loads(inert, JSON_DECODE_ANY, NULL);
        bool same = d && json_equal(v, d);
        json_decref(d);
        return same;
    }
    if (json_is_false(v)) return true;
    if (json_is_array(v)) return json_array_size(v) == 0;
    if (!json_is_object(v)) return false;
    /* "enabled": "auto" is HF's fill, which no trainer here turns on */
    json_t *en = json_object_get(v, "enabled");
    if (en) return json_is_false(en) || cfg_is_auto(en);
    const char *k;
    json_t *m;
    json_object_foreach(v, k, m) {
        if (!unimpl_inert(m, NULL)) return false;
    }
    return true;
}

ds_status cfg_walk(const cfg_ctx *ctx, json_t *obj, const char *prefix, const cfg_key *keys,
                   size_t nkeys, void *base, const char *const *unimplemented, int top_level) {
    const char *seen_name[64] = {0}; /* per table row: the spelling already read */
    DS_ASSERT(nkeys <= 64);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        char path[CFG_PATH_CAP];
        cfg_join(path, prefix, key);
        size_t i = 0;
        while (i < nkeys && strcmp(keys[i].name, key) != 0) i++;
        if (i == nkeys) {
            for (const char *const *u = unimplemented; u && *u; u++) {
                bool trains = **u == '!';
                const char *name = *u + trains, *eq = strchr(name, '=');
                size_t len = eq ? (size_t)(eq - name) : strlen(name);
                if (strncmp(name, key, len) != 0 || key[len] != '\0') continue;
                /* what DeepSpeed does with it left out: nothing to implement
                 * ("auto" too where DeepSpeed's config models drop it) */
                if (unimpl_inert(v, eq ? eq + 1 : NULL) ||
                    (cfg_is_auto(v) && auto_means_default(path)))
                    goto next_key;
                char got[96];
                cfg_fmt_value(v, got, sizeof got);
                if (top_level && !trains) {
                    cfg_warn(ctx, "%s: a DeepSpeed key zero-engine does not implement, "
                                  "ignored, got %s", path, got);
                    goto next_key;
                }
                return CFG_FAIL(ctx, DS_ERR_UNSUPPORTED,
                                "%s: a DeepSpeed key zero-engine does not implement, got %s%s",
                                path, got,
                                top_level ? " (ignored, the run would train otherwise than the "
                                            "config asks: remove it or turn it off)"
                                          : "");
            }
            size_t edits;
            const char *hint = closest_key(key, keys, nkeys, &edits);
            char mean[CFG_PATH_CAP + 32] = "";
            if (hint) snprintf(mean, sizeof mean, " (did you mean %s?)", hint);
            /* A top-level key of someone's own is ignored with a warning, as
             * DeepSpeed ignores it; one a letter or two off a key of ours is
             * a misspelling (zero_optimisation) that would train quietly
             * without its section: refused. */
            if (top_level && !(hint && edits <= 2 && strlen(key) >= 6)) {
                cfg_warn(ctx, "%s: unknown top-level key, ignored%s", path, mean);
                goto next_key;
            }
            if (top_level)
                return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: unknown top-level key%s; misspelt, it "
                                "would be ignored and the run would go without it", path, mean);
            return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: unknown key%s", path, mean);
        }
        /* Aliases (stage3_prefetch_bucket_size / prefetch_bucket_size, bf16 /
         * bfloat16) write the same field: giving both is ambiguous. */
        for (size_t j = 0; j < nkeys; j++) {
            if (seen_name[j] && j != i && keys[j].kind == keys[i].kind && keys[j].off == keys[i].off) {
                char other[CFG_PATH_CAP];
                cfg_join(other, prefix, seen_name[j]);
                return CFG_FAIL(ctx, DS_ERR_CONFIG,
                                "%s: same setting as %s, which is also given; keep one", path,
                                other);
            }
        }
        seen_name[i] = keys[i].name;
        DS_TRY(read_key(ctx, v, path, &keys[i], base));
    next_key:;
    }
    return DS_OK;
}
