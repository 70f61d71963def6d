/* Internal to the text readers (text/text*.c, text/lm_docs.c): the raw
 * rows a format reader produces before labels become classes
 * (text/text.c), the delimited-record reader the CSV formats share, the
 * file reading and encoding check every reader starts with, and the
 * train/dev split rule. */
#ifndef DS_MODELS_TEXT_ROWS_H
#define DS_MODELS_TEXT_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "text/text.h"

/* Rows as written in the file; all strings owned. */
typedef struct ds_text_rows {
    size_t n, cap;
    char **texts;
    char **labels;
    int32_t *lines;
} ds_text_rows;

/* Append copies of text[0..tlen) and label[0..llen). */
ds_status ds_text_rows_push(ds_text_rows *r, const char *text, size_t tlen, const char *label,
                            size_t llen, int32_t line);
void ds_text_rows_free(ds_text_rows *r);

/* Does a column / key name denote the label (want_label) or the text column?
 * The option's name when given, else the default candidates (text.h). */
bool ds_text_column_is(const char *name, size_t len, bool want_label,
                       const ds_text_read_opts *o);
/* The names looked for, for messages ("label, labels, 标签"). */
const char *ds_text_column_names(bool want_label, const ds_text_read_opts *o);

/* Format readers: parse buf[0..len) (the whole file, NUL-terminated after
 * len, byte-order mark already skipped; first_line is 1) into rows. Errors
 * are DS_ERR_DATA "path:line: what". */
ds_status ds_text_parse_csv(const char *path, const char *buf, size_t len,
                            const ds_text_read_opts *o, ds_text_rows *rows);
ds_status ds_text_parse_jsonl(const char *path, const char *buf, size_t len,
                              const ds_text_read_opts *o, ds_text_rows *rows);
ds_status ds_text_parse_json(const char *path, const char *buf, size_t len,
                             const ds_text_read_opts *o, ds_text_rows *rows);

/* ---- the split (text.c) ---- */

/* The split rule ds_text_split (text/text.h) and ds_lm_docs_split
 * (text/lm_text.h) share, so that a row set and a document set split
 * alike: dev_ratio must be in [0, 1); *perm (n entries, malloc'd: free() it)
 * is ds_permutation(n, seed); its first
 *     *n_train = floor(n * (1 - dev_ratio) + 1e-9)   (at most n)
 * entries go to train, the rest to dev. fn and what name the caller and the
 * things split in messages ("ds_text_split", "rows"). Errors:
 * DS_ERR_INVALID_ARG "fn: dev ratio must be in [0, 1), got R", DS_ERR_OOM. */
ds_status ds_text_split_plan(size_t n, double dev_ratio, uint64_t seed, const char *fn,
                             const char *what, size_t **perm, size_t *n_train);

/* ---- files ---- */

/* UTF-8 and NUL check of buf[0..len): DS_ERR_DATA "path:line: invalid UTF-8
 * (byte 0xXX at column C)" or "path:line: NUL byte (column C)". */
ds_status ds_text_check_encoding(const char *path, const char *buf, size_t len);

/* ---- delimited records (text_csv.c) ----
 * The CSV / TSV rules of text/text.h without any schema: a header, then
 * records with their line numbers. Readers of other schemas (the labelled
 * rows below, text/lm_docs.c's text column) pick their columns.
 *
 *     ds_csv_reader rd;
 *     ds_status st = ds_csv_begin(&rd, path, buf, len);   // header in rd.header
 *     bool more;
 *     while (st == DS_OK && (st = ds_csv_next(&rd, &more)) == DS_OK && more)
 *         st = ds_csv_check_fields(&rd, cols, n_cols);     // then rd.rec's fields
 *     ds_csv_end(&rd);                                     // also after a failed begin */

/* One record: field i is buf + off[i], flen[i] bytes (unescaped, not
 * NUL-terminated). */
typedef struct ds_csv_record {
    char *buf;
    size_t len, cap;
    size_t *off, *flen;
    int n, capf;
} ds_csv_record;

typedef struct ds_csv_reader {
    const char *path;
    const char *p, *end; /* what is left to read */
    char delim;          /* ',' or '\t', sniffed from the header line */
    int line;            /* line of the next record */
    int header_line;
    ds_csv_record header;
    ds_csv_record rec;   /* the record ds_csv_next read last */
    int rec_line;        /* the line it starts on */
} ds_csv_reader;

/* Skip blank lines, sniff the delimiter, parse the header. Errors:
 * DS_ERR_DATA "path: empty file (no header line)", an unterminated quote. */
ds_status ds_csv_begin(ds_csv_reader *r, const char *path, const char *buf, size_t len);
/* Read the next record that is not blank into r->rec; *more is false at the
 * end of the file. Errors: DS_ERR_DATA "path:line: ..." (quoting). */
ds_status ds_csv_next(ds_csv_reader *r, bool *more);
/* The record must have as many fields as the header: DS_ERR_DATA
 * "path:line: missing column 'NAME' ..." naming the first of cols[0..n_cols)
 * the record lacks, or "path:line: N fields, the header has M ...". */
ds_status ds_csv_check_fields(const ds_csv_reader *r, const int *cols, int n_cols);
/* The header's fields as "'a', 'b', ..." into names[0..cap) (truncated). */
void ds_csv_header_names(const ds_csv_record *h, char *names, size_t cap);
void ds_csv_end(ds_csv_reader *r);

#endif /* DS_MODELS_TEXT_ROWS_H */
