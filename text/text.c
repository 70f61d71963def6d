/* Labelled text sets: reading (format dispatch, checks, labels to classes),
 * the train/dev split. The format readers are text_csv.c and text_json.c. */
#include "text/text.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/core/read_file.h"
#include "text/text_rows.h"
#include "text/utf8.h"

/* ---- raw rows ------------------------------------------------------------ */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

ds_status ds_text_rows_push(ds_text_rows *r, const char *text, size_t tlen, const char *label,
                            size_t llen, int32_t line) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        char **t = realloc(r->texts, cap * sizeof *t);
        if (!t) return DS_ERR(DS_ERR_OOM, "reading text: %zu rows", cap);
        r->texts = t;
        char **l = realloc(r->labels, cap * sizeof *l);
        if (!l) return DS_ERR(DS_ERR_OOM, "reading text: %zu rows", cap);
        r->labels = l;
        int32_t *ln = realloc(r->lines, cap * sizeof *ln);
        if (!ln) return DS_ERR(DS_ERR_OOM, "reading text: %zu rows", cap);
        r->lines = ln;
        r->cap = cap;
    }
    char *t = dup_n(text, tlen), *l = dup_n(label, llen);
    if (!t || !l) {
        free(t);
        free(l);
        return DS_ERR(DS_ERR_OOM, "reading text: row %zu", r->n);
    }
    r->texts[r->n] = t;
    r->labels[r->n] = l;
    r->lines[r->n] = line;
    r->n++;
    return DS_OK;
}

void ds_text_rows_free(ds_text_rows *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->texts[i]);
        free(r->labels[i]);
    }
    free(r->texts);
    free(r->labels);
    free(r->lines);
    memset(r, 0, sizeof *r);
}

/* ---- column names --------------------------------------------------------- */

static const char *const k_label_names[] = {"label", "labels", "标签"};
static const char *const k_text_names[] = {"text", "sentence", "文本", "review"};

static bool name_eq(const char *name, size_t len, const char *want) {
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

bool ds_text_column_is(const char *name, size_t len, bool want_label,
                       const ds_text_read_opts *o) {
    const char *given = want_label ? o->label_column : o->text_column;
    if (given) return name_eq(name, len, given);
    const char *const *cand = want_label ? k_label_names : k_text_names;
    size_t n = want_label ? sizeof k_label_names / sizeof *k_label_names
                          : sizeof k_text_names / sizeof *k_text_names;
    for (size_t i = 0; i < n; i++)
        if (name_eq(name, len, cand[i])) return true;
    return false;
}

const char *ds_text_column_names(bool want_label, const ds_text_read_opts *o) {
    static _Thread_local char buf[128];
    const char *given = want_label ? o->label_column : o->text_column;
    if (given) {
        snprintf(buf, sizeof buf, "'%s'", given);
        return buf;
    }
    return want_label ? "label, labels, 标签" : "text, sentence, 文本, review";
}

/* ---- the set ---------------------------------------------------------------- */

void ds_text_set_destroy(ds_text_set *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->texts[i]);
    free(s->texts);
    free(s->labels);
    free(s->lines);
    if (s->class_names)
        for (int c = 0; c < s->n_classes; c++) free(s->class_names[c]);
    free(s->class_names);
    free(s->path);
    free(s);
}

/* A set with room for n rows and a copy of the class list. */
static ds_status set_alloc(size_t n, const char *path, int n_classes,
                           const char *const *class_names, ds_text_set **out) {
    ds_text_set *s = calloc(1, sizeof *s);
    if (!s) return DS_ERR(DS_ERR_OOM, "text set of %zu rows", n);
    size_t rows = n ? n : 1;
    s->texts = calloc(rows, sizeof *s->texts);
    s->labels = calloc(rows, sizeof *s->labels);
    s->lines = calloc(rows, sizeof *s->lines);
    s->class_names = calloc((size_t)(n_classes ? n_classes : 1), sizeof *s->class_names);
    s->path = strdup(path ? path : "");
    if (!s->texts || !s->labels || !s->lines || !s->class_names || !s->path) {
        ds_text_set_destroy(s);
        return DS_ERR(DS_ERR_OOM, "text set of %zu rows", n);
    }
    for (int c = 0; c < n_classes; c++) {
        s->class_names[c] = strdup(class_names[c]);
        if (!s->class_names[c]) {
            s->n_classes = c;
            ds_text_set_destroy(s);
            return DS_ERR(DS_ERR_OOM, "text set class names");
        }
    }
    s->n_classes = n_classes;
    *out = s;
    return DS_OK;
}

void ds_text_set_class_counts(const ds_text_set *s, size_t *counts) {
    for (int c = 0; c < s->n_classes; c++) counts[c] = 0;
    for (size_t i = 0; i < s->n; i++) counts[s->labels[i]]++;
}

/* ---- conflicts: texts with two labels --------------------------------------- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* conflict[i] = row i's text appears elsewhere with another label. */
static ds_status find_conflicts(const ds_text_rows *r, bool *conflict, size_t *n_texts) {
    size_t cap = 16;
    while (cap < 2 * r->n) cap *= 2;
    /* slot -> 1 + first row with that text (0 = empty); the text's flag */
    size_t *slot = calloc(cap, sizeof *slot);
    bool *flag = calloc(cap, sizeof *flag);
    size_t *where = malloc((r->n ? r->n : 1) * sizeof *where);
    if (!slot || !flag || !where) {
        free(slot);
        free(flag);
        free(where);
        return DS_ERR(DS_ERR_OOM, "checking %zu rows for conflicting labels", r->n);
    }
    *n_texts = 0;
    for (size_t i = 0; i < r->n; i++) {
        size_t k = (size_t)fnv1a(r->texts[i]) & (cap - 1);
        while (slot[k] && strcmp(r->texts[slot[k] - 1], r->texts[i]) != 0) k = (k + 1) & (cap - 1);
        if (!slot[k]) {
            slot[k] = i + 1;
        } else if (!flag[k] && strcmp(r->labels[slot[k] - 1], r->labels[i]) != 0) {
            flag[k] = true;
            (*n_texts)++;
        }
        where[i] = k;
    }
    for (size_t i = 0; i < r->n; i++) conflict[i] = flag[where[i]];
    free(slot);
    free(flag);
    free(where);
    return DS_OK;
}

/* ---- rows -> set ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool listed(const char *s, const char *const *list, int n, int *at) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0) {
            if (at) *at = i;
            return true;
        }
    return false;
}

/* Trim surrounding blanks of every label in place; an empty one is an error. */
static ds_status trim_labels(const char *path, ds_text_rows *r) {
    for (size_t i = 0; i < r->n; i++) {
        char *l = r->labels[i];
        size_t len = strlen(l), a = 0;
        while (a < len && (l[a] == ' ' || l[a] == '\t' || l[a] == '\r' || l[a] == '\n')) a++;
        while (len > a && (l[len - 1] == ' ' || l[len - 1] == '\t' || l[len - 1] == '\r' ||
                           l[len - 1] == '\n'))
            len--;
        memmove(l, l + a, len - a);
        l[len - a] = '\0';
        if (!l[0]) return DS_ERR(DS_ERR_DATA, "%s:%d: empty label", path, (int)r->lines[i]);
    }
    return DS_OK;
}

static ds_status rows_to_set(const char *path, ds_text_rows *r, const ds_text_read_opts *o,
                             ds_text_set **out) {
    DS_TRY(trim_labels(path, r));
    size_t n = r->n, n_conflict_texts = 0;
    bool *drop = calloc(n ? n : 1, sizeof *drop);
    const char **cls = malloc((n ? n : 1) * sizeof *cls); /* class name per row */
    const char **names = malloc((n ? n : 1) * sizeof *names);
    ds_text_set *s = NULL;
    ds_status st = DS_OK;
    if (!drop || !cls || !names) {
        st = DS_ERR(DS_ERR_OOM, "%s: %zu rows", path, n);
        goto done;
    }
    if (o->drop_conflicts) DS_TRY_GOTO(st, find_conflicts(r, drop, &n_conflict_texts), done);
    size_t n_conflict = 0, n_label = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (drop[i]) {
            n_conflict++;
            continue;
        }
        if (o->keep_labels && !listed(r->labels[i], o->keep_labels, o->n_keep_labels, NULL)) {
            drop[i] = true;
            n_label++;
            continue;
        }
        int at;
        cls[i] = o->n_map > 0 && listed(r->labels[i], o->map_from, o->n_map, &at) ? o->map_to[at]
                                                                                  : r->labels[i];
        kept++;
    }
    /* a listed label no row has: a typo that would drop a whole class */
    for (int k = 0; o->keep_labels && o->keep_labels_occur && k < o->n_keep_labels; k++) {
        bool seen = false;
        for (size_t i = 0; i < n && !seen; i++) /* a row dropped as a conflict is no row */
            seen = !drop[i] && !strcmp(r->labels[i], o->keep_labels[k]);
        if (!seen) {
            st = DS_ERR(DS_ERR_DATA, "%s: the label filter names \"%s\", which no row has "
                        "(a class would be missing; check its spelling)", path,
                        o->keep_labels[k]);
            goto done;
        }
    }
    if (kept == 0) {
        st = DS_ERR(DS_ERR_DATA,
                    "%s: no rows (read %zu, dropped %zu with conflicting labels, %zu by the "
                    "label filter)",
                    path, n, n_conflict, n_label);
        goto done;
    }
    int n_classes;
    const char *const *class_list;
    if (o->classes) {
        n_classes = o->n_classes;
        class_list = o->classes;
    } else {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (!drop[i]) names[m++] = cls[i];
        qsort(names, m, sizeof *names, cmp_str);
        size_t u = 0;
        for (size_t i = 0; i < m; i++)
            if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
        n_classes = (int)u;
        class_list = names;
    }
    DS_TRY_GOTO(st, set_alloc(kept, path, n_classes, class_list, &s), done);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (drop[i]) continue;
        int c = -1;
        if (o->classes) {
            if (!listed(cls[i], o->classes, o->n_classes, &c)) {
                st = DS_ERR(DS_ERR_DATA, "%s:%d: label '%s' is not one of the %d known classes",
                            path, (int)r->lines[i], cls[i], o->n_classes);
                goto done;
            }
        } else {
            /* binary search in the sorted unique names */
            int lo = 0, hi = n_classes - 1;
            while (lo <= hi) {
                int mid = (lo + hi) / 2, d = strcmp(names[mid], cls[i]);
                if (d == 0) {
                    c = mid;
                    break;
                }
                if (d < 0) lo = mid + 1;
                else hi = mid - 1;
            }
            DS_ASSERT(c >= 0);
        }
        s->texts[k] = r->texts[i]; /* move the string */
        r->texts[i] = NULL;
        s->labels[k] = c;
        s->lines[k] = r->lines[i];
        s->n = ++k; /* the moved texts are freed with s on a later error */
    }
    s->n_read = n;
    s->n_dropped_conflict = n_conflict;
    s->n_conflict_texts = n_conflict_texts;
    s->n_dropped_label = n_label;
    *out = s;
    s = NULL;
done:
    ds_text_set_destroy(s);
    free(drop);
    free(cls);
    free(names);
    return st;
}

/* ---- reading -------------------------------------------------------------------- */


/* UTF-8 and NUL check of the whole file, with the line of the first fault. */
ds_status ds_text_check_encoding(const char *path, const char *buf, size_t len) {
    size_t bad = ds_utf8_check(buf, len);
    const char *nul = memchr(buf, '\0', bad);
    size_t at = nul ? (size_t)(nul - buf) : bad;
    if (at == len) return DS_OK;
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at; i++)
        if (buf[i] == '\n') line++, line_start = i + 1;
    if (nul)
        return DS_ERR(DS_ERR_DATA, "%s:%d: NUL byte (column %zu)", path, line,
                      at - line_start + 1);
    return DS_ERR(DS_ERR_DATA, "%s:%d: invalid UTF-8 (byte 0x%02X at column %zu)", path, line,
                  (unsigned char)buf[at], at - line_start + 1);
}

ds_status ds_text_read(const char *path, const ds_text_read_opts *opts, ds_text_set **out) {
    if (!path || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_text_read: path or out is NULL");
    *out = NULL;
    ds_text_read_opts none = {0};
    const ds_text_read_opts *o = opts ? opts : &none;
    if ((o->n_keep_labels > 0 && !o->keep_labels) || (o->n_map > 0 && (!o->map_from || !o->map_to)) ||
        (o->classes && o->n_classes < 1) || o->n_keep_labels < 0 || o->n_map < 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_text_read: inconsistent options (a list count without its list, or "
                      "an empty class list)");
    char *buf = NULL;
    size_t len = 0;
    DS_TRY(ds_read_file(path, 0, &buf, &len));
    const char *p = buf;
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) p += 3, len -= 3;
    ds_status st = ds_text_check_encoding(path, p, len);
    ds_text_rows rows = {0};
    if (st != DS_OK) goto done;
    ds_text_format fmt = o->format;
    if (fmt == DS_TEXT_AUTO) {
        const char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
        fmt = q < p + len && *q == '[' ? DS_TEXT_JSON
              : q < p + len && *q == '{' ? DS_TEXT_JSONL
                                         : DS_TEXT_CSV;
    }
    switch (fmt) {
    case DS_TEXT_JSON: st = ds_text_parse_json(path, p, len, o, &rows); break;
    case DS_TEXT_JSONL: st = ds_text_parse_jsonl(path, p, len, o, &rows); break;
    default: st = ds_text_parse_csv(path, p, len, o, &rows); break;
    }
    if (st != DS_OK) goto done;
    st = rows_to_set(path, &rows, o, out);
done:
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    ds_text_rows_free(&rows);
    free(buf);
    return st;
}

/* ---- split -------------------------------------------------------------------- */

static ds_status subset(const ds_text_set *s, const size_t *rows, size_t n, ds_text_set **out) {
    ds_text_set *t;
    DS_TRY(set_alloc(n, s->path, s->n_classes, (const char *const *)s->class_names, &t));
    for (size_t i = 0; i < n; i++) {
        size_t r = rows[i];
        t->texts[i] = strdup(s->texts[r]);
        if (!t->texts[i]) {
            t->n = i;
            ds_text_set_destroy(t);
            return DS_ERR(DS_ERR_OOM, "splitting %zu rows", s->n);
        }
        t->labels[i] = s->labels[r];
        t->lines[i] = s->lines[r];
    }
    t->n = n;
    *out = t;
    return DS_OK;
}

ds_status ds_text_split_plan(size_t n, double dev_ratio, uint64_t seed, const char *fn,
                             const char *what, size_t **perm, size_t *n_train) {
    if (!(dev_ratio >= 0.0 && dev_ratio < 1.0))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: dev ratio must be in [0, 1), got %g", fn,
                      dev_ratio);
    /* the 1e-9 keeps products like 10 * 0.7 from rounding down to 6 */
    *n_train = (size_t)floor((double)n * (1.0 - dev_ratio) + 1e-9);
    if (*n_train > n) *n_train = n;
    *perm = malloc((n ? n : 1) * sizeof **perm);
    if (!*perm) return DS_ERR(DS_ERR_OOM, "%s: %zu %s", fn, n, what);
    ds_permutation(n, seed, *perm);
    return DS_OK;
}

ds_status ds_text_split(const ds_text_set *set, double dev_ratio, uint64_t seed,
                        ds_text_set **train, ds_text_set **dev) {
    if (!set || !train || !dev)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_text_split: NULL argument");
    *train = *dev = NULL;
    size_t n = set->n, n_train, *perm;
    DS_TRY(ds_text_split_plan(n, dev_ratio, seed, "ds_text_split", "rows", &perm, &n_train));
    ds_status st = subset(set, perm, n_train, train);
    if (st == DS_OK) st = subset(set, perm + n_train, n - n_train, dev);
    free(perm);
    if (st != DS_OK) {
        ds_text_set_destroy(*train);
        *train = NULL;
        ds_error_trace(__FILE__, __LINE__);
    }
    return st;
}
