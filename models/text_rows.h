/* Internal to the text readers (models/text*.c): the raw rows a format
 * reader produces before labels become classes (models/text.c). */
#ifndef DS_MODELS_TEXT_ROWS_H
#define DS_MODELS_TEXT_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "models/text.h"

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

#endif /* DS_MODELS_TEXT_ROWS_H */
