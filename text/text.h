/* Labelled text: reading files, the train/dev split, and tokenized datasets.
 *
 *     ds_text_read_opts o = {0};
 *     const char *six[] = {"none", "like", "disgust", "sadness", "happiness", "anger"};
 *     o.keep_labels = six; o.n_keep_labels = 6;   // drop surprise and fear
 *     o.drop_conflicts = true;                    // drop texts with two labels
 *     ds_text_set *all, *train, *dev;
 *     DS_TRY(ds_text_read("Nlpcc2013Train.tsv", &o, &all));
 *     DS_TRY(ds_text_split(all, 0.1, 42, &train, &dev));
 *     ds_tokenizer *tok;
 *     DS_TRY(ds_char_vocab_build(train, 2, &tok));          // text/tokenizer.h
 *     ds_dataset *d;
 *     DS_TRY(ds_dataset_from_text(train, tok, 64, &d));     // models/models.h layout
 *
 * Formats (ds_text_format; AUTO looks at the first character of the file
 * after an optional UTF-8 byte-order mark and blank space: '[' a JSON list,
 * '{' JSON lines, anything else delimited text):
 *   CSV / TSV  a header line naming the label and the text column, then one
 *              record per row. The delimiter is sniffed from the header: the
 *              more frequent of tab and comma outside quotes (a tie goes to
 *              comma), whatever the file's suffix (the NLPCC file is named
 *              .tsv but is comma-separated). RFC 4180 quoting: a field that
 *              starts with '"' runs to the next lone '"' and may hold
 *              delimiters, newlines and doubled quotes ("" for one "); after
 *              its closing quote comes a delimiter or the end of the record.
 *              A '"' inside an unquoted field is kept as a character. CRLF
 *              and LF both end records; blank lines are skipped. Every record
 *              needs exactly as many fields as the header (an unquoted comma
 *              inside a text would otherwise cut it silently).
 *              Header names are matched after trimming blanks, ASCII case
 *              ignored: label, labels, 标签 for the label; text, sentence,
 *              文本, review for the text; or the names given in the options.
 *   JSONL      one object per non-blank line with a string "text" and a
 *              "label" (string or integer; integers become their decimal
 *              text); other keys are ignored; the key names follow the same
 *              candidates and options as the CSV header.
 *   JSON       one list of items, each [text, label] or an object as in
 *              JSONL.
 * Everything must be UTF-8 (checked; a NUL byte is an error too). Texts are
 * kept exactly as written; labels are trimmed of surrounding blanks.
 *
 * From rows to classes, in this order:
 *   1. drop_conflicts: every row of a text that appears with two different
 *      labels anywhere in the file is dropped (decided on the labels as
 *      written, before the filter of step 2: that is the protocol of the
 *      BERT issue, giving 12,715 clean rows of the NLPCC file);
 *   2. keep_labels: rows whose label (as written) is not listed are dropped;
 *   3. map: a label found among map_from[] becomes the class name
 *      map_to[] at the same index (merging labels, or renaming them);
 *   4. classes: with opts->classes, class i is opts->classes[i] and a class
 *      name not in that list is an error (used to read dev or eval data with
 *      the training classes); otherwise the classes are the distinct class
 *      names sorted by their bytes (strcmp), so the order is stable whatever
 *      the row order: for NLPCC's six, anger disgust happiness like none
 *      sadness.
 *
 * Errors are DS_ERR_DATA with "path:line: what" (the line where the record
 * starts; for an unterminated quote the line of the opening quote; for bad
 * JSON jansson's line and column), DS_ERR_IO when the file cannot be read,
 * DS_ERR_INVALID_ARG for unusable options, DS_ERR_OOM. */
#ifndef DS_MODELS_TEXT_H
#define DS_MODELS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/data/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_text_format {
    DS_TEXT_AUTO = 0,
    DS_TEXT_CSV,   /* delimited (comma or tab, sniffed) with a header */
    DS_TEXT_JSONL, /* one {"text": ..., "label": ...} per line */
    DS_TEXT_JSON,  /* [[text, label], ...] */
} ds_text_format;

/* All fields optional: a zeroed struct (or a NULL pointer) reads every row
 * of an AUTO-detected file with the default column names. */
typedef struct ds_text_read_opts {
    ds_text_format format;
    const char *label_column;        /* NULL: label | labels | 标签 */
    const char *text_column;         /* NULL: text | sentence | 文本 | review */
    const char *const *keep_labels;  /* NULL: keep every label */
    int n_keep_labels;
    bool keep_labels_occur;          /* each keep_labels entry must label a row (a
                                        training file: a typo drops a class) */
    bool drop_conflicts;             /* drop every row of a text with two labels */
    const char *const *map_from;     /* label -> class name, n_map pairs */
    const char *const *map_to;
    int n_map;
    const char *const *classes;      /* NULL: sorted distinct class names */
    int n_classes;
} ds_text_read_opts;

/* Labelled texts; every array has n entries and is owned by the set. */
typedef struct ds_text_set {
    size_t n;
    char **texts;          /* UTF-8, NUL-terminated */
    int32_t *labels;       /* class index in [0, n_classes) */
    int32_t *lines;        /* line in the source file where the row starts */
    int n_classes;
    char **class_names;    /* [n_classes] */
    char *path;            /* source file, for messages */
    /* what reading did (0 for sets made by ds_text_split) */
    size_t n_read;             /* rows in the file */
    size_t n_dropped_conflict; /* rows dropped by drop_conflicts */
    size_t n_conflict_texts;   /* distinct texts that had two labels */
    size_t n_dropped_label;    /* rows dropped by keep_labels */
} ds_text_set;

/* Read `path` into *out (owned by the caller: ds_text_set_destroy).
 * Errors as in the file comment; DS_ERR_DATA "path: no rows ..." when no row
 * is left after the filters. */
ds_status ds_text_read(const char *path, const ds_text_read_opts *opts, ds_text_set **out);

/* Frees the set and everything in it; NULL is fine. */
void ds_text_set_destroy(ds_text_set *s);

/* Rows counted per class into counts[0..n_classes). */
void ds_text_set_class_counts(const ds_text_set *s, size_t *counts);

/* Split `set` into new sets *train and *dev (both owned by the caller; `set`
 * is not changed). The rows are permuted by ds_permutation(n, seed)
 * (engine/data/dataset.h, reproducible in Python); the first
 *     n_train = floor(n * (1 - dev_ratio) + 1e-9)
 * rows of the permutation go to train in that order, the rest to dev (the
 * 1e-9 keeps products like 10 * 0.7 from rounding down to 6). Python:
 *     n_train = int(n * (1 - dev_ratio) + 1e-9)
 * Both sets keep the class list of `set`. dev_ratio 0 gives an empty dev.
 * Errors: DS_ERR_INVALID_ARG for dev_ratio outside [0, 1); DS_ERR_OOM. */
ds_status ds_text_split(const ds_text_set *set, double dev_ratio, uint64_t seed,
                        ds_text_set **train, ds_text_set **dev);

struct ds_tokenizer;

/* Tokenize every row of `set` into a new dataset (owned by the caller:
 * ds_dataset_destroy) in the classifiers' layout (models/models.h): rows of
 * seq_len input_ids, [CLS] tokens... [SEP], truncated to seq_len, padded
 * with the tokenizer's [PAD] id, attention_mask 1 over the real tokens;
 * labels from the set, class names copied.
 * Errors: DS_ERR_INVALID_ARG for seq_len < 2; DS_ERR_DATA "path:line: ..."
 * when a text cannot be encoded; DS_ERR_OOM. */
ds_status ds_dataset_from_text(const ds_text_set *set, const struct ds_tokenizer *tok,
                               int seq_len, ds_dataset **out);

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_TEXT_H */
