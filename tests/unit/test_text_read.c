/* Text readers: every format on small fixtures (tests/data/text/), the
 * label options, and every error with its path:line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text.h"
#include "tests/unit/test_util.h"

static char *fixture(const char *name) {
    static char buf[8][1024];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/text/%s", DS_TEST_DATA_DIR, name);
    return b;
}

typedef struct row {
    const char *text, *label;
    int line;
} row;

/* The set equals rows[0..n) (labels by class name) with classes[0..nc). */
static void expect_rows(const char *file, const ds_text_read_opts *o, const row *rows, size_t n,
                        const char *const *classes, int nc) {
    ds_text_set *s = NULL;
    ds_clear_error();
    ds_status st = ds_text_read(fixture(file), o, &s);
    CHECK(st == DS_OK, "%s: %s", file, ds_last_error());
    if (st != DS_OK) return;
    CHECK(s->n == n, "%s: %zu rows, expected %zu", file, s->n, n);
    CHECK(s->n_classes == nc, "%s: %d classes, expected %d", file, s->n_classes, nc);
    for (int c = 0; c < nc && c < s->n_classes; c++)
        CHECK(strcmp(s->class_names[c], classes[c]) == 0, "%s: class %d is '%s', expected '%s'",
              file, c, s->class_names[c], classes[c]);
    for (size_t i = 0; i < n && i < s->n; i++) {
        CHECK(strcmp(s->texts[i], rows[i].text) == 0, "%s row %zu: text '%s', expected '%s'",
              file, i, s->texts[i], rows[i].text);
        const char *lab = s->class_names[s->labels[i]];
        CHECK(strcmp(lab, rows[i].label) == 0, "%s row %zu: label '%s', expected '%s'", file, i,
              lab, rows[i].label);
        CHECK(s->lines[i] == rows[i].line, "%s row %zu: line %d, expected %d", file, i,
              (int)s->lines[i], rows[i].line);
    }
    ds_text_set_destroy(s);
}

/* Reading fails with `code` and a message that holds "file:line" (or
 * "file" when line is 0) and `what`. */
static void expect_error(const char *file, const ds_text_read_opts *o, ds_status code, int line,
                         const char *what) {
    ds_text_set *s = NULL;
    ds_clear_error();
    ds_status st = ds_text_read(fixture(file), o, &s);
    CHECK(st == code, "%s: status %s, expected %s (%s)", file, ds_status_to_string(st),
          ds_status_to_string(code), ds_last_error());
    CHECK(s == NULL, "%s: a set came back with an error", file);
    char where[1200];
    if (line) snprintf(where, sizeof where, "%s:%d: ", fixture(file), line);
    else snprintf(where, sizeof where, "%s", fixture(file));
    const char *msg = ds_last_error();
    CHECK(strstr(msg, where) != NULL, "%s: message '%s' lacks '%s'", file, msg, where);
    CHECK(strstr(msg, what) != NULL, "%s: message '%s' lacks '%s'", file, msg, what);
    ds_text_set_destroy(s);
}

static void test_formats(void) {
    const row quoted[] = {{"plain text", "pos", 2},      {"with, comma", "neg", 3},
                          {"say \"hi\" now", "pos", 5},  {"two\nlines, here", "neu", 6},
                          {"a \"quote\" inside", "neg", 8}, {"", "pos", 9}};
    const char *qc[] = {"neg", "neu", "pos"};
    expect_rows("quoted.csv", NULL, quoted, 6, qc, 3);

    const row cols[] = {{"good, really", "pos", 2}, {"tab\there", "neg", 3}};
    const char *cc[] = {"neg", "pos"};
    expect_rows("columns.tsv", NULL, cols, 2, cc, 2);

    const row zh[] = {{"好吃，推荐", "like", 2}, {"今天,天气", "none", 3}, {"难吃", "disgust", 4}};
    const char *zc[] = {"disgust", "like", "none"};
    expect_rows("chinese_header.tsv", NULL, zh, 3, zc, 3);

    /* integer labels become decimal text; '3' sorts before 'a' */
    const row jl[] = {{"first", "b", 1}, {"second", "3", 3}, {"ünïcödé 文本", "a", 4}};
    const char *jc[] = {"3", "a", "b"};
    expect_rows("rows.jsonl", NULL, jl, 3, jc, 3);

    const row js[] = {{"first", "b", 2}, {"second", "3", 3}, {"third", "a", 4}};
    expect_rows("pairs.json", NULL, js, 3, jc, 3);

    /* explicit column names override the defaults */
    ds_text_read_opts named = {.label_column = "id", .text_column = "labels"};
    const row byname[] = {{"pos", "1", 2}, {"neg", "2", 3}};
    const char *bc[] = {"1", "2"};
    expect_rows("columns.tsv", &named, byname, 2, bc, 2);

    /* the format can be forced: JSON lines read as CSV has no header */
    ds_text_read_opts as_csv = {.format = DS_TEXT_CSV};
    expect_error("rows.jsonl", &as_csv, DS_ERR_DATA, 1, "no label column");
}

static void test_label_options(void) {
    const char *keep[] = {"none", "like", "anger", "sadness"};
    ds_text_read_opts o = {.keep_labels = keep, .n_keep_labels = 4, .drop_conflicts = true};
    const row clean[] = {{"other", "like", 3},
                         {"kept", "none", 5},
                         {"twice same label", "like", 7},
                         {"twice same label", "like", 8}};
    const char *cls[] = {"like", "none"};
    expect_rows("conflicts.csv", &o, clean, 4, cls, 2);

    ds_text_set *s = NULL;
    CHECK(ds_text_read(fixture("conflicts.csv"), &o, &s) == DS_OK, "%s", ds_last_error());
    if (s) {
        CHECK(s->n_read == 9, "n_read %zu", s->n_read);
        CHECK(s->n_dropped_conflict == 4, "dropped for conflicts %zu", s->n_dropped_conflict);
        CHECK(s->n_conflict_texts == 2, "conflicting texts %zu", s->n_conflict_texts);
        CHECK(s->n_dropped_label == 1, "dropped by the filter %zu", s->n_dropped_label);
        size_t counts[2];
        ds_text_set_class_counts(s, counts);
        CHECK(counts[0] == 3 && counts[1] == 1, "class counts %zu %zu", counts[0], counts[1]);
        ds_text_set_destroy(s);
    }

    /* without drop_conflicts only the filter applies: "same text" stays once
     * (as none), "x" twice (anger, sadness) */
    ds_text_read_opts f = {.keep_labels = keep, .n_keep_labels = 4};
    const row filt[] = {{"same text", "none", 2}, {"other", "like", 3},  {"kept", "none", 5},
                        {"twice same label", "like", 7}, {"twice same label", "like", 8},
                        {"x", "anger", 9},               {"x", "sadness", 10}};
    const char *fc[] = {"anger", "like", "none", "sadness"};
    expect_rows("conflicts.csv", &f, filt, 7, fc, 4);

    /* label -> class map, then sorted classes */
    const char *from[] = {"like"}, *to[] = {"positive"};
    ds_text_read_opts m = o;
    m.map_from = from, m.map_to = to, m.n_map = 1;
    const row mapped[] = {{"other", "positive", 3},
                          {"kept", "none", 5},
                          {"twice same label", "positive", 7},
                          {"twice same label", "positive", 8}};
    const char *mc[] = {"none", "positive"};
    expect_rows("conflicts.csv", &m, mapped, 4, mc, 2);

    /* a fixed class list keeps its order */
    ds_text_read_opts fixed = o;
    fixed.classes = keep, fixed.n_classes = 4;
    expect_rows("conflicts.csv", &fixed, clean, 4, keep, 4);
    /* ... and rejects labels outside it */
    const char *only_none[] = {"none"};
    ds_text_read_opts narrow = {.classes = only_none, .n_classes = 1};
    expect_error("conflicts.csv", &narrow, DS_ERR_DATA, 3, "label 'like' is not one of the 1");

    /* nothing left */
    const char *nothing[] = {"joy"};
    ds_text_read_opts none = {.keep_labels = nothing, .n_keep_labels = 1};
    expect_error("conflicts.csv", &none, DS_ERR_DATA, 0, "no rows");
    /* a listed label no row has (a typo: "happyness"), where the file must
     * have each (train_cls' training file): refused by name; it dropped the
     * class without a word */
    const char *typo[] = {"none", "like", "happyness"};
    ds_text_read_opts must = {.keep_labels = typo, .n_keep_labels = 3, .keep_labels_occur = true};
    expect_error("conflicts.csv", &must, DS_ERR_DATA, 0, "names \"happyness\", which no row has");
    ds_text_read_opts bad = {.n_keep_labels = 2}; /* a count without its list */
    s = NULL;
    CHECK(ds_text_read(fixture("conflicts.csv"), &bad, &s) == DS_ERR_INVALID_ARG && !s,
          "inconsistent options accepted");
}

static void test_errors(void) {
    expect_error("err_unterminated.csv", NULL, DS_ERR_DATA, 3, "unterminated quote");
    expect_error("err_missing_column.csv", NULL, DS_ERR_DATA, 3, "missing column 'text'");
    expect_error("err_extra_field.csv", NULL, DS_ERR_DATA, 3, "3 fields, the header has 2");
    expect_error("err_empty_label.csv", NULL, DS_ERR_DATA, 3, "empty label");
    expect_error("err_after_quote.csv", NULL, DS_ERR_DATA, 2, "after a closing quote");
    expect_error("err_no_label_column.csv", NULL, DS_ERR_DATA, 1, "no label column");
    expect_error("err_header_one_column.csv", NULL, DS_ERR_DATA, 1, "one column");
    expect_error("err_utf8.csv", NULL, DS_ERR_DATA, 3, "invalid UTF-8 (byte 0xFF at column 9)");
    expect_error("err_nul.csv", NULL, DS_ERR_DATA, 2, "NUL byte");
    expect_error("err_empty.csv", NULL, DS_ERR_DATA, 0, "empty file");
    expect_error("err_bad_json.jsonl", NULL, DS_ERR_DATA, 2, "bad JSON");
    expect_error("err_jsonl_missing_text.jsonl", NULL, DS_ERR_DATA, 2, "missing the text");
    expect_error("err_jsonl_label_type.jsonl", NULL, DS_ERR_DATA, 1, "string or an integer");
    expect_error("err_jsonl_duplicate_key.jsonl", NULL, DS_ERR_DATA, 1, "duplicate");
    expect_error("err_bad_json_list.json", NULL, DS_ERR_DATA, 4, "bad JSON in item 1");
    expect_error("err_json_item.json", NULL, DS_ERR_DATA, 3, "item 1 is not [text, label]");
    expect_error("err_json_unclosed.json", NULL, DS_ERR_DATA, 3, "not closed");
    expect_error("err_json_trailing.json", NULL, DS_ERR_DATA, 2, "after the end of the list");
    expect_error("empty_list.json", NULL, DS_ERR_DATA, 0, "no rows");
    expect_error("does_not_exist.csv", NULL, DS_ERR_IO, 0, "cannot open");
}

/* Inputs the fuzz harness tests/fuzz/fuzz_text found (issue 15), written
 * out here; each one failed under the DS_SANITIZE build before its fix. */
static void test_fuzz_regressions(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/test_text_read_fuzz.csv", DS_BINARY_DIR);
    /* a header of two empty names: the record buffer stayed NULL and the
     * column search computed NULL + 0, undefined behaviour */
    FILE *f = fopen(path, "wb");
    if (!f) TEST_DIE(path);
    fputs(",", f);
    fclose(f);
    ds_text_set *s = NULL;
    ds_clear_error();
    ds_status st = ds_text_read(path, NULL, &s);
    CHECK(st == DS_ERR_DATA && strstr(ds_last_error(), ":1: no label column"),
          "a header of empty names: %s: %s", ds_status_to_string(st), ds_last_error());
    ds_text_set_destroy(s);
    remove(path);
}

int main(void) {
    test_formats();
    test_label_options();
    test_errors();
    test_fuzz_regressions();
    return test_finish("test_text_read");
}
