/* JSON lines ({"text": ..., "label": ...} per line) and JSON lists
 * ([[text, label], ...]) through jansson. The format rules are in
 * text/text.h. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "text/text_rows.h"

/* A label value as text: strings as they are, integers in decimal. */
static ds_status label_text(const char *path, int line, const json_t *v, char *num,
                            size_t num_cap, const char **s, size_t *len) {
    if (json_is_string(v)) {
        *s = json_string_value(v);
        *len = json_string_length(v);
        return DS_OK;
    }
    if (json_is_integer(v)) {
        snprintf(num, num_cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        *s = num;
        *len = strlen(num);
        return DS_OK;
    }
    return DS_ERR(DS_ERR_DATA, "%s:%d: the label must be a string or an integer", path, line);
}

static ds_status push_object(const char *path, int line, const json_t *obj,
                             const ds_text_read_opts *o, ds_text_rows *rows) {
    const json_t *text = NULL, *label = NULL;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        size_t klen = strlen(key);
        if (!label && ds_text_column_is(key, klen, true, o)) label = v;
        else if (!text && ds_text_column_is(key, klen, false, o)) text = v;
    }
    if (!text)
        return DS_ERR(DS_ERR_DATA, "%s:%d: missing the text (looked for the key %s)", path, line,
                      ds_text_column_names(false, o));
    if (!label)
        return DS_ERR(DS_ERR_DATA, "%s:%d: missing the label (looked for the key %s)", path,
                      line, ds_text_column_names(true, o));
    if (!json_is_string(text))
        return DS_ERR(DS_ERR_DATA, "%s:%d: the text must be a string", path, line);
    char num[32];
    const char *ls = NULL; /* set by label_text; -O3 cannot see it */
    size_t llen = 0;
    DS_TRY(label_text(path, line, label, num, sizeof num, &ls, &llen));
    return ds_text_rows_push(rows, json_string_value(text), json_string_length(text), ls, llen,
                             line);
}

static int count_lines(const char *a, const char *b) {
    int n = 0;
    for (; a < b; a++) n += *a == '\n';
    return n;
}

ds_status ds_text_parse_jsonl(const char *path, const char *buf, size_t len,
                              const ds_text_read_opts *o, ds_text_rows *rows) {
    const char *p = buf, *end = buf + len;
    int line = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        const char *q = p;
        while (q < eol && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        if (q < eol) {
            json_error_t err;
            json_t *obj = json_loadb(p, (size_t)(eol - p), JSON_REJECT_DUPLICATES, &err);
            if (!obj)
                return DS_ERR(DS_ERR_DATA, "%s:%d: bad JSON: %s (column %d)", path, line,
                              err.text, err.column);
            ds_status st = json_is_object(obj)
                               ? push_object(path, line, obj, o, rows)
                               : DS_ERR(DS_ERR_DATA,
                                        "%s:%d: expected an object {\"text\": ..., \"label\": "
                                        "...}",
                                        path, line);
            json_decref(obj);
            DS_TRY(st);
        }
        p = nl ? nl + 1 : end;
        line++;
    }
    return DS_OK;
}

static const char *skip_space(const char *p, const char *end, int *line) {
    for (; p < end; p++) {
        if (*p == '\n') (*line)++;
        else if (*p != ' ' && *p != '\t' && *p != '\r') break;
    }
    return p;
}

/* The list is walked item by item (jansson with JSON_DISABLE_EOF_CHECK stops
 * after each item and says how far it read), so every item knows its line. */
ds_status ds_text_parse_json(const char *path, const char *buf, size_t len,
                             const ds_text_read_opts *o, ds_text_rows *rows) {
    const char *p = buf, *end = buf + len;
    int line = 1;
    p = skip_space(p, end, &line);
    if (p >= end || *p != '[')
        return DS_ERR(DS_ERR_DATA, "%s:%d: expected a JSON list of [text, label] items", path,
                      line);
    p = skip_space(p + 1, end, &line);
    size_t item = 0;
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p >= end)
                return DS_ERR(DS_ERR_DATA, "%s:%d: the list is not closed with ']'", path, line);
            json_error_t err;
            json_t *v = json_loadb(p, (size_t)(end - p),
                                   JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &err);
            if (!v)
                return DS_ERR(DS_ERR_DATA, "%s:%d: bad JSON in item %zu: %s (column %d)", path,
                              line + err.line - 1, item, err.text, err.column);
            int item_line = line;
            ds_status st = DS_OK;
            if (json_is_array(v) && json_array_size(v) == 2 &&
                json_is_string(json_array_get(v, 0))) {
                char num[32];
                const char *ls = NULL; /* set by label_text; -O3 cannot see it */
                size_t llen = 0;
                const json_t *t = json_array_get(v, 0);
                st = label_text(path, item_line, json_array_get(v, 1), num, sizeof num, &ls,
                                &llen);
                if (st == DS_OK)
                    st = ds_text_rows_push(rows, json_string_value(t), json_string_length(t), ls,
                                           llen, item_line);
            } else if (json_is_object(v)) {
                st = push_object(path, item_line, v, o, rows);
            } else {
                st = DS_ERR(DS_ERR_DATA, "%s:%d: item %zu is not [text, label] (a string and a "
                            "string or integer label)",
                            path, item_line, item);
            }
            json_decref(v);
            DS_TRY(st);
            line += count_lines(p, p + err.position);
            p = skip_space(p + err.position, end, &line);
            item++;
            if (p < end && *p == ',') {
                p = skip_space(p + 1, end, &line);
                continue;
            }
            if (p < end && *p == ']') {
                p++;
                break;
            }
            return DS_ERR(DS_ERR_DATA, "%s:%d: expected ',' or ']' after item %zu", path, line,
                          item - 1);
        }
    }
    p = skip_space(p, end, &line);
    if (p < end)
        return DS_ERR(DS_ERR_DATA, "%s:%d: text after the end of the list", path, line);
    return DS_OK;
}
