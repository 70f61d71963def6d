/* Labelled text files (text/text.c, text_csv.c, text_json.c): CSV / TSV,
 * JSON lines and JSON lists, then the labels-to-classes step, the split and
 * the tokenization a classifier's data goes through.
 *
 * Input: one flags byte, then the file.
 *   bits 0-1  format: AUTO, CSV, JSONL, JSON
 *   bit 2     drop_conflicts
 *   bit 3     keep_labels {"0", "1", "neg", "pos"}
 *   bit 4     map "neg" -> "0", "pos" -> "1"
 *   bit 5     classes {"0", "1", "neg", "pos"} given (dev data's way)
 *   bit 6     column names "y" (label) and "x" (text) instead of the defaults
 * A set that reads is checked (labels in range, counts adding up to the rows
 * read), split 3:1, and its training part builds a char vocabulary and a
 * dataset of 16-token rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data/dataset.h"
#include "text/text.h"
#include "text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static void check_set(const ds_text_set *s) {
    if (s->n == 0 || s->n_classes < 1) fz_fail("a set read without rows or classes");
    if (s->n + s->n_dropped_conflict + s->n_dropped_label != s->n_read)
        fz_fail("rows kept %zu + dropped %zu + %zu != rows read %zu", s->n, s->n_dropped_conflict,
                s->n_dropped_label, s->n_read);
    for (size_t i = 0; i < s->n; i++) {
        if (s->labels[i] < 0 || s->labels[i] >= s->n_classes)
            fz_fail("row %zu: label %d outside [0, %d)", i, (int)s->labels[i], s->n_classes);
        if (!s->texts[i]) fz_fail("row %zu: no text", i);
    }
    size_t *counts = calloc((size_t)s->n_classes, sizeof *counts), sum = 0;
    if (!counts) abort();
    ds_text_set_class_counts(s, counts);
    for (int c = 0; c < s->n_classes; c++) sum += counts[c];
    free(counts);
    if (sum != s->n) fz_fail("class counts add up to %zu, the set has %zu rows", sum, s->n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0];
    static const char *const labels[] = {"0", "1", "neg", "pos"};
    static const char *const from[] = {"neg", "pos"}, *const to[] = {"0", "1"};
    ds_text_read_opts o = {0};
    o.format = (ds_text_format)(flags & 3);
    o.drop_conflicts = flags & 4;
    if (flags & 8) o.keep_labels = labels, o.n_keep_labels = 4;
    if (flags & 16) o.map_from = from, o.map_to = to, o.n_map = 2;
    if (flags & 32) o.classes = labels, o.n_classes = 4;
    if (flags & 64) o.label_column = "y", o.text_column = "x";
    const char *path = fz_write("data.txt", data + 1, size - 1);

    ds_text_set *all = NULL, *train = NULL, *dev = NULL;
    ds_tokenizer *tok = NULL;
    ds_dataset *ds = NULL;
    fz_begin();
    if (fz_check(ds_text_read(path, &o, &all), "ds_text_read") != DS_OK) return 0;
    check_set(all);
    fz_begin();
    if (fz_check(ds_text_split(all, 0.25, 7, &train, &dev), "ds_text_split") == DS_OK) {
        if (train->n + dev->n != all->n)
            fz_fail("split %zu rows into %zu + %zu", all->n, train->n, dev->n);
        fz_begin();
        /* a train part of no rows has nothing to build from: refused, not a finding */
        if (fz_check(ds_char_vocab_build(train, 1, &tok), "ds_char_vocab_build") == DS_OK) {
            fz_begin();
            fz_check(ds_dataset_from_text(train, tok, 16, &ds), "ds_dataset_from_text");
        }
    }
    ds_dataset_destroy(ds);
    ds_tokenizer_destroy(tok);
    ds_text_set_destroy(train);
    ds_text_set_destroy(dev);
    ds_text_set_destroy(all);
    return 0;
}
