/* Documents for language models: the four formats of text/lm_text.h, and
 * the split by document. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/core/read_file.h"
#include "text/lm_text.h"
#include "text/text_rows.h"

/* ---- formats ----------------------------------------------------------------- */

static const char *const k_format_names[] = {"auto", "text", "lines", "jsonl", "csv"};

const char *ds_lm_format_name(ds_lm_format f) {
    return (int)f >= 0 && (int)f < 5 ? k_format_names[f] : "?";
}

int ds_lm_format_parse(const char *name) {
    for (int i = 0; i < 5; i++)
        if (name && strcmp(name, k_format_names[i]) == 0) return i;
    return -1;
}

static bool has_suffix(const char *path, const char *suf) {
    size_t n = strlen(path), k = strlen(suf);
    return n >= k && strcasecmp(path + n - k, suf) == 0;
}

ds_lm_format ds_lm_format_of(const char *path) {
    if (has_suffix(path, ".jsonl") || has_suffix(path, ".ndjson")) return DS_LM_JSONL;
    if (has_suffix(path, ".csv") || has_suffix(path, ".tsv")) return DS_LM_CSV;
    return DS_LM_TEXT;
}

/* ---- the set ------------------------------------------------------------------ */

void ds_lm_docs_destroy(ds_lm_docs *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) free(d->texts[i]);
    free(d->texts);
    free(d->lens);
    free(d->lines);
    free(d->path);
    free(d);
}

size_t ds_lm_docs_bytes(const ds_lm_docs *d) {
    size_t b = 0;
    for (size_t i = 0; i < d->n; i++) b += d->lens[i];
    return b;
}

static ds_status docs_new(const char *path, size_t cap, ds_lm_docs **out) {
    ds_lm_docs *d = calloc(1, sizeof *d);
    if (!d) return DS_ERR(DS_ERR_OOM, "%s: documents", path);
    size_t c = cap ? cap : 1;
    d->texts = calloc(c, sizeof *d->texts);
    d->lens = calloc(c, sizeof *d->lens);
    d->lines = calloc(c, sizeof *d->lines);
    d->path = strdup(path ? path : "");
    if (!d->texts || !d->lens || !d->lines || !d->path) {
        ds_lm_docs_destroy(d);
        return DS_ERR(DS_ERR_OOM, "%s: %zu documents", path, cap);
    }
    *out = d;
    return DS_OK;
}

/* Growth while reading: `cap` is how many entries the arrays hold. */
typedef struct builder {
    ds_lm_docs *d;
    size_t cap;
} builder;

/* Append a copy of s[0..len) (empty: counted, not kept). */
static ds_status push(builder *b, const char *s, size_t len, int line) {
    ds_lm_docs *d = b->d;
    if (len == 0) {
        d->n_empty++;
        return DS_OK;
    }
    if (d->n == b->cap) {
        size_t cap = b->cap * 2;
        char **t = realloc(d->texts, cap * sizeof *t);
        if (t) d->texts = t;
        size_t *l = t ? realloc(d->lens, cap * sizeof *l) : NULL;
        if (l) d->lens = l;
        int32_t *ln = l ? realloc(d->lines, cap * sizeof *ln) : NULL;
        if (ln) d->lines = ln;
        if (!ln) return DS_ERR(DS_ERR_OOM, "%s: %zu documents", d->path, cap);
        b->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return DS_ERR(DS_ERR_OOM, "%s:%d: a document of %zu bytes", d->path, line, len);
    memcpy(c, s, len);
    c[len] = '\0';
    d->texts[d->n] = c;
    d->lens[d->n] = len;
    d->lines[d->n] = line;
    d->n++;
    return DS_OK;
}

/* ---- plain text ----------------------------------------------------------------- */

static bool blank_line(const char *s, const char *e) {
    for (; s < e; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return false;
    return true;
}

/* TEXT (per_line false) and LINES (true). A document is gathered in `acc`
 * line by line, each line without its CR before LF. */
static ds_status parse_text(builder *b, const char *buf, size_t len, bool per_line) {
    const char *p = buf, *end = buf + len;
    char *acc = NULL;
    size_t n = 0, cap = 0;
    int line = 1, start = 0;
    ds_status st = DS_OK;
    while (p < end && st == DS_OK) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        const char *e = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        if (blank_line(p, eol)) {
            if (n) st = push(b, acc, n, start);
            n = 0;
        } else {
            size_t need = n + (size_t)(e - p) + 2;
            if (need > cap) {
                size_t c = cap ? cap : 4096;
                while (c < need) c *= 2;
                char *a = realloc(acc, c);
                if (!a) {
                    st = DS_ERR(DS_ERR_OOM, "%s:%d: a document of %zu bytes", b->d->path, start,
                                need);
                    break;
                }
                acc = a;
                cap = c;
            }
            if (n) acc[n++] = '\n';
            else start = line;
            memcpy(acc + n, p, (size_t)(e - p));
            n += (size_t)(e - p);
            if (per_line) {
                st = push(b, acc, n, start);
                n = 0;
            }
        }
        p = nl ? nl + 1 : end;
        line++;
    }
    if (st == DS_OK && n) st = push(b, acc, n, start);
    free(acc);
    return st;
}

/* ---- JSON lines -------------------------------------------------------------- */

static ds_status parse_jsonl(builder *b, const char *buf, size_t len, const char *field) {
    const char *path = b->d->path, *p = buf, *end = buf + len;
    int line = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        if (!blank_line(p, eol)) {
            json_error_t err;
            json_t *obj = json_loadb(p, (size_t)(eol - p), JSON_REJECT_DUPLICATES, &err);
            if (!obj)
                return DS_ERR(DS_ERR_DATA, "%s:%d: bad JSON: %s (column %d)", path, line, err.text,
                              err.column);
            ds_status st = DS_OK;
            const json_t *v = json_is_object(obj) ? json_object_get(obj, field) : NULL;
            if (!json_is_object(obj))
                st = DS_ERR(DS_ERR_DATA, "%s:%d: expected an object {\"%s\": ...}", path, line,
                            field);
            else if (!v)
                st = DS_ERR(DS_ERR_DATA, "%s:%d: no \"%s\" key (the text field; see --text-field)",
                            path, line, field);
            else if (!json_is_string(v))
                st = DS_ERR(DS_ERR_DATA, "%s:%d: \"%s\" must be a string", path, line, field);
            else
                st = push(b, json_string_value(v), json_string_length(v), line);
            json_decref(obj);
            DS_TRY(st);
        }
        p = nl ? nl + 1 : end;
        line++;
    }
    return DS_OK;
}

/* ---- CSV / TSV ---------------------------------------------------------------- */

static ds_status parse_csv(builder *b, const char *buf, size_t len, const char *column) {
    const char *path = b->d->path;
    ds_text_read_opts o = {0};
    o.text_column = column; /* NULL: the default text column names */
    ds_csv_reader rd;
    ds_status st;
    DS_TRY_GOTO(st, ds_csv_begin(&rd, path, buf, len), done);
    int col = -1;
    for (int i = 0; i < rd.header.n && col < 0; i++) {
        const char *name = rd.header.buf + rd.header.off[i];
        size_t n = rd.header.flen[i];
        while (n && (*name == ' ' || *name == '\t')) name++, n--;
        while (n && (name[n - 1] == ' ' || name[n - 1] == '\t' || name[n - 1] == '\r')) n--;
        if (ds_text_column_is(name, n, false, &o)) col = i;
    }
    if (col < 0) {
        char names[256];
        ds_csv_header_names(&rd.header, names, sizeof names);
        st = DS_ERR(DS_ERR_DATA, "%s:%d: no text column in the header (looked for %s; header has "
                    "%s; see --column)",
                    path, rd.header_line, ds_text_column_names(false, &o), names);
        goto done;
    }
    for (;;) {
        bool more;
        DS_TRY_GOTO(st, ds_csv_next(&rd, &more), done);
        if (!more) break;
        DS_TRY_GOTO(st, ds_csv_check_fields(&rd, &col, 1), done);
        DS_TRY_GOTO(st, push(b, rd.rec.buf + rd.rec.off[col], rd.rec.flen[col], rd.rec_line),
                    done);
    }
    st = DS_OK;
done:
    ds_csv_end(&rd);
    return st;
}

/* ---- reading ------------------------------------------------------------------- */

ds_status ds_lm_docs_read(const char *path, const ds_lm_read_opts *opts, ds_lm_docs **out) {
    if (!path || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_docs_read: path or out is NULL");
    *out = NULL;
    ds_lm_read_opts none = {0};
    const ds_lm_read_opts *o = opts ? opts : &none;
    ds_lm_format fmt = o->format == DS_LM_AUTO ? ds_lm_format_of(path) : o->format;
    if ((int)fmt < DS_LM_TEXT || (int)fmt > DS_LM_CSV)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_docs_read: unknown format %d", (int)o->format);
    char *buf = NULL;
    size_t len = 0;
    DS_TRY(ds_read_file(path, 0, &buf, &len));
    const char *p = buf;
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) p += 3, len -= 3;
    builder b = {NULL, 1024};
    ds_status st = ds_text_check_encoding(path, p, len);
    if (st == DS_OK) st = docs_new(path, b.cap, &b.d);
    if (st == DS_OK) {
        switch (fmt) {
        case DS_LM_LINES: st = parse_text(&b, p, len, true); break;
        case DS_LM_JSONL: st = parse_jsonl(&b, p, len, o->text_field ? o->text_field : "text"); break;
        case DS_LM_CSV: st = parse_csv(&b, p, len, o->column); break;
        default: st = parse_text(&b, p, len, false); break;
        }
    }
    if (st == DS_OK && b.d->n == 0)
        st = DS_ERR(DS_ERR_DATA, "%s: no documents (read as %s%s%s)", path,
                    ds_lm_format_name(fmt), b.d->n_empty ? "; every one was empty" : "",
                    fmt == DS_LM_TEXT || fmt == DS_LM_LINES ? "; the file is blank" : "");
    free(buf);
    if (st != DS_OK) {
        ds_lm_docs_destroy(b.d);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = b.d;
    return DS_OK;
}

/* ---- split ---------------------------------------------------------------------- */

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* A new set of the documents all[idx[0..n)]; idx is sorted first so the
 * part keeps the file's order. */
static ds_status subset(const ds_lm_docs *all, size_t *idx, size_t n, ds_lm_docs **out) {
    qsort(idx, n, sizeof *idx, cmp_size);
    ds_lm_docs *d;
    DS_TRY(docs_new(all->path, n, &d));
    for (size_t i = 0; i < n; i++) {
        size_t k = idx[i];
        d->texts[i] = malloc(all->lens[k] + 1);
        if (!d->texts[i]) {
            ds_lm_docs_destroy(d);
            return DS_ERR(DS_ERR_OOM, "splitting %zu documents", all->n);
        }
        memcpy(d->texts[i], all->texts[k], all->lens[k] + 1);
        d->lens[i] = all->lens[k];
        d->lines[i] = all->lines[k];
        d->n = i + 1;
    }
    *out = d;
    return DS_OK;
}

ds_status ds_lm_docs_split(const ds_lm_docs *all, double dev_ratio, uint64_t seed,
                           ds_lm_docs **train, ds_lm_docs **dev) {
    if (!all || !train || !dev) return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_docs_split: NULL argument");
    *train = *dev = NULL;
    size_t n = all->n, n_train, *perm;
    DS_TRY(ds_text_split_plan(n, dev_ratio, seed, "ds_lm_docs_split", "documents", &perm,
                              &n_train));
    ds_status st = subset(all, perm, n_train, train);
    /* the empty documents skipped were in the file the train part came
     * from; which part they would have fallen in is unknown */
    if (st == DS_OK) (*train)->n_empty = all->n_empty;
    if (st == DS_OK) st = subset(all, perm + n_train, n - n_train, dev);
    free(perm);
    if (st != DS_OK) {
        ds_lm_docs_destroy(*train);
        *train = NULL;
        ds_error_trace(__FILE__, __LINE__);
    }
    return st;
}
