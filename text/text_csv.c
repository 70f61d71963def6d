/* Delimited text with a header (CSV / TSV, RFC 4180 quoting): the record
 * reader (ds_csv_*, text_rows.h) and the labelled reader on top of it. The
 * format rules are in text/text.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text_rows.h"

static void record_free(ds_csv_record *r) {
    free(r->buf);
    free(r->off);
    free(r->flen);
}

static ds_status record_put(ds_csv_record *r, char c) {
    if (r->len + 1 >= r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        char *b = realloc(r->buf, cap);
        if (!b) return DS_ERR(DS_ERR_OOM, "reading CSV: a record of %zu bytes", r->len);
        r->buf = b;
        r->cap = cap;
    }
    r->buf[r->len++] = c;
    return DS_OK;
}

static ds_status record_field(ds_csv_record *r, size_t start) {
    if (r->n == r->capf) {
        int cap = r->capf ? r->capf * 2 : 8;
        size_t *o = realloc(r->off, (size_t)cap * sizeof *o);
        if (!o) return DS_ERR(DS_ERR_OOM, "reading CSV: %d fields", cap);
        r->off = o;
        size_t *l = realloc(r->flen, (size_t)cap * sizeof *l);
        if (!l) return DS_ERR(DS_ERR_OOM, "reading CSV: %d fields", cap);
        r->flen = l;
        r->capf = cap;
    }
    r->off[r->n] = start;
    r->flen[r->n] = r->len - start;
    r->n++;
    return DS_OK;
}

/* End of a line at q: LF, CRLF, or a CR that ends the file. */
static bool is_eol(const char *q, const char *end) {
    return *q == '\n' || (*q == '\r' && (q + 1 == end || q[1] == '\n'));
}

/* Parse the record starting at *pp (on line *line); leaves *pp after its line
 * end and *line on the line after it. */
static ds_status parse_record(const char *path, const char **pp, const char *end, char delim,
                              int *line, ds_csv_record *r) {
    const char *q = *pp;
    r->n = 0;
    r->len = 0;
    /* Readers take field i as buf + off[i]: buf must exist even when every
     * field is empty (a header ","), as NULL + 0 is undefined behaviour. */
    if (!r->buf) {
        r->buf = malloc(256);
        if (!r->buf) return DS_ERR(DS_ERR_OOM, "reading CSV: a record buffer");
        r->cap = 256;
    }
    for (;;) {
        size_t start = r->len;
        if (q < end && *q == '"') {
            int quote_line = *line;
            q++;
            for (;;) {
                if (q >= end)
                    return DS_ERR(DS_ERR_DATA,
                                  "%s:%d: unterminated quote (the quoted field that opens on "
                                  "this line never closes)",
                                  path, quote_line);
                if (*q == '"') {
                    if (q + 1 < end && q[1] == '"') {
                        DS_TRY(record_put(r, '"'));
                        q += 2;
                        continue;
                    }
                    q++;
                    break;
                }
                if (*q == '\n') (*line)++;
                DS_TRY(record_put(r, *q++));
            }
            if (q < end && *q != delim && !is_eol(q, end))
                return DS_ERR(DS_ERR_DATA,
                              "%s:%d: '%c' after a closing quote (a quote inside a quoted "
                              "field is written \"\")",
                              path, *line, *q);
        } else {
            while (q < end && *q != delim && !is_eol(q, end)) DS_TRY(record_put(r, *q++));
        }
        DS_TRY(record_field(r, start));
        if (q < end && *q == delim) {
            q++;
            continue;
        }
        break;
    }
    if (q < end) q += (*q == '\r') ? (q + 1 < end ? 2 : 1) : 1;
    (*line)++;
    *pp = q;
    return DS_OK;
}

/* The header's delimiter: the more frequent of tab and comma outside quotes
 * on the first line (a tie, including none of either, goes to comma). */
static char sniff_delimiter(const char *p, const char *end) {
    size_t tabs = 0, commas = 0;
    bool quoted = false;
    for (; p < end; p++) {
        if (*p == '"') quoted = !quoted;
        else if (!quoted && is_eol(p, end)) break;
        else if (!quoted && *p == '\t') tabs++;
        else if (!quoted && *p == ',') commas++;
    }
    return tabs > commas ? '\t' : ',';
}

static bool blank_record(const ds_csv_record *r) {
    if (r->n != 1) return false;
    for (size_t i = 0; i < r->flen[0]; i++) {
        char c = r->buf[r->off[0] + i];
        if (c != ' ' && c != '\t') return false;
    }
    return true;
}

/* Trimmed [s, s+len) into (*ts, *tlen). */
static void trim(const char *s, size_t len, const char **ts, size_t *tlen) {
    while (len && (*s == ' ' || *s == '\t')) s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    *ts = s;
    *tlen = len;
}

static ds_status find_columns(const char *path, int line, const ds_csv_record *h,
                              const ds_text_read_opts *o, int *label_col, int *text_col) {
    *label_col = *text_col = -1;
    for (int i = 0; i < h->n; i++) {
        const char *name;
        size_t len;
        trim(h->buf + h->off[i], h->flen[i], &name, &len);
        if (*label_col < 0 && ds_text_column_is(name, len, true, o)) *label_col = i;
        else if (*text_col < 0 && ds_text_column_is(name, len, false, o)) *text_col = i;
    }
    if (*label_col >= 0 && *text_col >= 0) return DS_OK;
    char names[256];
    ds_csv_header_names(h, names, sizeof names);
    bool want_label = *label_col < 0;
    return DS_ERR(DS_ERR_DATA, "%s:%d: no %s column in the header (looked for %s; header has %s)",
                  path, line, want_label ? "label" : "text",
                  ds_text_column_names(want_label, o), names);
}

/* ---- the record reader ------------------------------------------------------ */

void ds_csv_header_names(const ds_csv_record *h, char *names, size_t cap) {
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < h->n && used + 4 < cap; i++) {
        size_t len = h->flen[i];
        if (len > cap - used - 4) len = cap - used - 4;
        used += (size_t)snprintf(names + used, cap - used, "%s'%.*s'", i ? ", " : "", (int)len,
                                 h->buf + h->off[i]);
    }
}

ds_status ds_csv_begin(ds_csv_reader *r, const char *path, const char *buf, size_t len) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->p = buf;
    r->end = buf + len;
    r->line = 1;
    /* Blank lines before the header are skipped. */
    while (r->p < r->end && is_eol(r->p, r->end)) {
        r->p += (*r->p == '\r' && r->p + 1 < r->end) ? 2 : 1;
        r->line++;
    }
    if (r->p >= r->end) return DS_ERR(DS_ERR_DATA, "%s: empty file (no header line)", path);
    r->delim = sniff_delimiter(r->p, r->end);
    r->header_line = r->line;
    return parse_record(path, &r->p, r->end, r->delim, &r->line, &r->header);
}

ds_status ds_csv_next(ds_csv_reader *r, bool *more) {
    while (r->p < r->end) {
        r->rec_line = r->line;
        DS_TRY(parse_record(r->path, &r->p, r->end, r->delim, &r->line, &r->rec));
        if (blank_record(&r->rec)) continue;
        *more = true;
        return DS_OK;
    }
    *more = false;
    return DS_OK;
}

ds_status ds_csv_check_fields(const ds_csv_reader *r, const int *cols, int n_cols) {
    const ds_csv_record *h = &r->header, *rec = &r->rec;
    if (rec->n < h->n) {
        /* name the first absent column that matters, as the header writes it */
        int miss = rec->n;
        for (int k = 0; k < n_cols; k++)
            if (cols[k] >= rec->n) {
                miss = cols[k];
                break;
            }
        return DS_ERR(DS_ERR_DATA,
                      "%s:%d: missing column '%.*s' (the record has %d field%s, the header %d)",
                      r->path, r->rec_line, (int)h->flen[miss], h->buf + h->off[miss], rec->n,
                      rec->n == 1 ? "" : "s", h->n);
    }
    if (rec->n > h->n)
        return DS_ERR(DS_ERR_DATA,
                      "%s:%d: %d fields, the header has %d (quote a text that holds '%s')",
                      r->path, r->rec_line, rec->n, h->n, r->delim == '\t' ? "\\t" : ",");
    return DS_OK;
}

void ds_csv_end(ds_csv_reader *r) {
    record_free(&r->header);
    record_free(&r->rec);
    memset(r, 0, sizeof *r);
}

/* ---- labelled rows -------------------------------------------------------------- */

ds_status ds_text_parse_csv(const char *path, const char *buf, size_t len,
                            const ds_text_read_opts *o, ds_text_rows *rows) {
    ds_csv_reader rd;
    ds_status st;
    int label_col, text_col;
    DS_TRY_GOTO(st, ds_csv_begin(&rd, path, buf, len), done);
    if (rd.header.n < 2) {
        st = DS_ERR(DS_ERR_DATA,
                    "%s:%d: the header has one column; expected a label and a text column "
                    "separated by ',' or a tab",
                    path, rd.header_line);
        goto done;
    }
    DS_TRY_GOTO(st, find_columns(path, rd.header_line, &rd.header, o, &label_col, &text_col),
                done);
    const int cols[2] = {label_col, text_col};
    for (;;) {
        bool more;
        DS_TRY_GOTO(st, ds_csv_next(&rd, &more), done);
        if (!more) break;
        DS_TRY_GOTO(st, ds_csv_check_fields(&rd, cols, 2), done);
        const ds_csv_record *r = &rd.rec;
        DS_TRY_GOTO(st,
                    ds_text_rows_push(rows, r->buf + r->off[text_col], r->flen[text_col],
                                      r->buf + r->off[label_col], r->flen[label_col], rd.rec_line),
                    done);
    }
    st = DS_OK;
done:
    ds_csv_end(&rd);
    return st;
}
