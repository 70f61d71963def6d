/* Texts -> ds_dataset (framing, truncation, padding, labels), columns and
 * their checks against a model's inputs, and host batch filling, with their
 * errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data/dataset.h"
#include "models/models.h"
#include "text/text.h"
#include "text/tokenizer.h"
#include "tests/unit/test_util.h"

enum { SEQ = 8 };

/* The real tokens of row i (the attention mask's ones). */
static int row_len(const ds_dataset *d, size_t i) {
    const float *mask = ds_dataset_f32(d, "attention_mask") + i * (size_t)d->seq_len;
    int len = 0;
    while (len < d->seq_len && mask[len] == 1.0f) len++;
    return len;
}

static void test_dataset_and_batch(void) {
    ds_text_set *s = NULL;
    ds_tokenizer *tok = NULL;
    ds_dataset *d = NULL;
    CHECK(ds_text_read(DS_TEST_DATA_DIR "/text/quoted.csv", NULL, &s) == DS_OK, "%s",
          ds_last_error());
    if (!s) return;
    CHECK(ds_char_vocab_build(s, 1, &tok) == DS_OK, "%s", ds_last_error());
    CHECK(ds_dataset_from_text(s, tok, SEQ, &d) == DS_OK, "%s", ds_last_error());
    if (!d || !tok) return;
    CHECK(d->n == s->n && d->seq_len == SEQ && d->n_classes == 3, "shape %zu x %d, %d classes",
          d->n, d->seq_len, d->n_classes);
    CHECK(strcmp(d->class_names[0], "neg") == 0 && strcmp(d->class_names[2], "pos") == 0,
          "class names copied");
    const int32_t *tokens = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    const float *mask = ds_dataset_f32(d, "attention_mask");
    CHECK(tokens && labels && mask && d->n_columns == 3, "the classifiers' three columns");
    if (!tokens || !labels || !mask) return;
    for (size_t i = 0; i < d->n; i++) {
        int32_t ids[SEQ];
        int len;
        CHECK(ds_tokenizer_encode(tok, s->texts[i], SEQ, ids, &len) == DS_OK, "%s",
              ds_last_error());
        const int32_t *row = tokens + i * SEQ;
        for (int t = 0; t < SEQ; t++)
            CHECK(mask[i * SEQ + (size_t)t] == (t < len ? 1.0f : 0.0f), "row %zu mask at %d", i, t);
        CHECK(memcmp(row, ids, (size_t)len * sizeof *ids) == 0, "row %zu tokens", i);
        CHECK(row[0] == ds_tokenizer_cls_id(tok) && row[len - 1] == ds_tokenizer_sep_id(tok),
              "row %zu not framed by [CLS] ... [SEP]", i);
        for (int t = len; t < SEQ; t++) CHECK(row[t] == 0, "row %zu pad at %d is %d", i, t, row[t]);
        CHECK(labels[i] == s->labels[i], "row %zu label", i);
    }
    /* row 0 "plain text" (10 chars) is cut to 6 characters + [CLS] [SEP];
     * row 5 is the empty text: [CLS] [SEP] */
    CHECK(row_len(d, 0) == SEQ, "long text length %d", row_len(d, 0));
    CHECK(row_len(d, 5) == 2, "empty text length %d", row_len(d, 5));

    /* a batch of every column, rows copied as they are */
    ds_host_batch hb;
    CHECK(ds_host_batch_alloc(&hb, d, NULL, 4) == DS_OK, "%s", ds_last_error());
    CHECK(hb.T == SEQ && hb.batch.T == SEQ && hb.batch.n == 3, "T %d, %d tensors", hb.T,
          hb.batch.n);
    const size_t idx[3] = {5, 0, 3};
    CHECK(ds_host_batch_fill(&hb, d, idx, 3) == DS_OK, "%s", ds_last_error());
    CHECK(hb.batch.B == 3, "B %d", hb.batch.B);
    const int32_t *bt = ds_batch_i32(&hb.batch, "input_ids"),
                  *bl = ds_batch_i32(&hb.batch, "labels");
    const float *bm = ds_batch_f32(&hb.batch, "attention_mask");
    for (int b = 0; b < 3 && bt && bl && bm; b++) {
        for (int t = 0; t < SEQ; t++) {
            CHECK(bt[b * SEQ + t] == tokens[idx[b] * SEQ + (size_t)t], "batch row %d token %d", b,
                  t);
            CHECK(bm[b * SEQ + t] == mask[idx[b] * SEQ + (size_t)t], "batch row %d mask %d", b, t);
        }
        CHECK(bl[b] == labels[idx[b]], "batch row %d label", b);
    }
    /* a smaller fill after a larger one: B shrinks */
    CHECK(ds_host_batch_fill(&hb, d, idx + 2, 1) == DS_OK && hb.batch.B == 1, "refill");
    CHECK(bm && bl && bm[0] == 1.0f && bl[0] == labels[3], "refilled row");

    /* errors */
    const size_t too_far[1] = {d->n};
    CHECK(ds_host_batch_fill(&hb, d, too_far, 1) == DS_ERR_INVALID_ARG, "index past the end");
    CHECK(ds_host_batch_fill(&hb, d, idx, 5) == DS_ERR_INVALID_ARG, "more rows than cap_B");
    ds_host_batch small;
    CHECK(ds_host_batch_alloc(&small, d, NULL, 0) == DS_ERR_INVALID_ARG, "cap_B 0");
    ds_host_batch_free(&hb);

    ds_dataset *none = NULL;
    CHECK(ds_dataset_from_text(s, tok, 1, &none) == DS_ERR_INVALID_ARG && !none, "seq_len 1");
    /* a text the tokenizer rejects names its file and line */
    char *bad[] = {"fine", "bad\xff"};
    int32_t lines[] = {4, 9}, blabels[] = {0, 0};
    ds_text_set m = {.n = 2, .texts = bad, .labels = blabels, .lines = lines, .n_classes = 1,
                     .class_names = s->class_names, .path = "manual.txt"};
    CHECK(ds_dataset_from_text(&m, tok, SEQ, &none) == DS_ERR_DATA && !none &&
              strstr(ds_last_error(), "manual.txt:9: invalid UTF-8"),
          "bad text: %s", ds_last_error());

    ds_dataset_destroy(d);
    ds_tokenizer_destroy(tok);
    ds_text_set_destroy(s);
}

/* Columns, class names, and checking a dataset against a model's inputs. */
static void test_columns(void) {
    ds_dataset *d = NULL;
    CHECK(ds_cls_dataset_create(3, 4, 2, NULL, &d) == DS_OK, "%s", ds_last_error());
    if (d) {
        CHECK(strcmp(d->class_names[0], "0") == 0 && strcmp(d->class_names[1], "1") == 0,
              "default class names");
        const int32_t *ids = ds_dataset_i32(d, "input_ids");
        for (int i = 0; ids && i < 12; i++) CHECK(ids[i] == 0, "zeroed tokens");
        CHECK(!ds_dataset_f32(d, "input_ids"), "a typed view of the other dtype is NULL");
        CHECK(ds_dataset_add_column(d, "labels", DS_I32, 0, NULL, NULL) == DS_ERR_INVALID_ARG,
              "a column twice");
        CHECK(ds_dataset_add_column(d, "x", DS_F64, 0, NULL, NULL) == DS_ERR_INVALID_ARG,
              "fp64 column");
        /* class weights become the per-row weights column */
        int32_t *labels = ds_dataset_i32(d, "labels");
        labels[0] = 1;
        labels[1] = 0;
        labels[2] = DS_IGNORE_INDEX;
        const float cw[2] = {0.25f, 3.0f};
        CHECK(ds_cls_dataset_set_class_weights(d, cw) == DS_OK, "%s", ds_last_error());
        const float *w = ds_dataset_f32(d, "weights");
        CHECK(w && w[0] == 3.0f && w[1] == 0.25f && w[2] == 0.0f, "row weights from classes");
        const float neg[2] = {-1.0f, 1.0f};
        CHECK(ds_cls_dataset_set_class_weights(d, neg) == DS_ERR_INVALID_ARG, "negative weight");
        labels[1] = 2;
        CHECK(ds_cls_dataset_set_class_weights(d, cw) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "row 1"),
              "label outside the classes: %s", ds_last_error());
        labels[1] = 0;

        /* against a model: a missing required input, a shape mismatch, a
         * sequence longer than the model plans for */
        ds_mlp_desc md = {.vocab_size = 10, .max_seq_len = 4, .embed_dim = 4, .hidden_dim = 4,
                          .n_classes = 2};
        ds_model *mlp = NULL;
        CHECK(ds_mlp_create(&md, &mlp) == DS_OK, "%s", ds_last_error());
        CHECK(ds_dataset_check(d, mlp) == DS_OK, "%s", ds_last_error()); /* label -100 too */
        /* every value in the range the model declares (ds_model_input_range):
         * the token table's 10 rows, the 2 classes; the first outside named
         * by column, row and element */
        int32_t *tok = ds_dataset_i32(d, "input_ids");
        tok[2 * 4 + 3] = 10;
        CHECK(ds_dataset_check(d, mlp) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "column input_ids: row 2, element 3 holds 10, outside "
                         "[0, 10)"),
              "a token id past the table: %s", ds_last_error());
        tok[2 * 4 + 3] = -1;
        CHECK(ds_dataset_check(d, mlp) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "row 2, element 3 holds -1"),
              "a negative token id: %s", ds_last_error());
        tok[2 * 4 + 3] = 9;
        labels[1] = 2;
        CHECK(ds_dataset_check(d, mlp) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "column labels: row 1 holds 2, outside [0, 2) (or "
                         "-100, ignored)"),
              "a label past the classes: %s", ds_last_error());
        labels[1] = 0;
        CHECK(ds_dataset_check(d, mlp) == DS_OK, "%s", ds_last_error());
        /* declaring a range: an int32 input that exists, a range not empty */
        CHECK(ds_model_input_range(mlp, "nope", 0, 2, false) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "no input nope"),
              "a range for an unknown input: %s", ds_last_error());
        CHECK(ds_model_input_range(mlp, "attention_mask", 0, 2, false) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "int32"),
              "a range for an fp32 input: %s", ds_last_error());
        CHECK(ds_model_input_range(mlp, "labels", 2, 2, false) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "[2, 2) is empty"),
              "an empty range: %s", ds_last_error());
        ds_clear_error();
        md.max_seq_len = 3;
        ds_model *short_mlp = NULL;
        CHECK(ds_mlp_create(&md, &short_mlp) == DS_OK, "%s", ds_last_error());
        CHECK(ds_dataset_check(d, short_mlp) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "max_seq_len"),
              "rows longer than the model: %s", ds_last_error());
        ds_dataset *x = NULL;
        CHECK(ds_dataset_create(3, 4, &x) == DS_OK, "%s", ds_last_error());
        const int64_t seq[1] = {DS_DIM_SEQ};
        CHECK(ds_dataset_add_column(x, "input_ids", DS_F32, 1, seq, NULL) == DS_OK, "%s",
              ds_last_error());
        CHECK(ds_dataset_check(x, mlp) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "input_ids is fp32 [B, T], model mlp declares int32"),
              "dtype mismatch: %s", ds_last_error());
        ds_dataset_destroy(x);
        CHECK(ds_dataset_create(3, 0, &x) == DS_OK, "%s", ds_last_error());
        CHECK(ds_dataset_add_column(x, "input_ids", DS_I32, 1, seq, NULL) == DS_ERR_INVALID_ARG,
              "a sequence column in a dataset without seq_len");
        CHECK(ds_dataset_check(x, mlp) == DS_ERR_INVALID_ARG &&
                  strstr(ds_last_error(), "no column \"input_ids\""),
              "missing column: %s", ds_last_error());
        ds_host_batch hb;
        CHECK(ds_host_batch_alloc(&hb, x, mlp, 2) == DS_ERR_INVALID_ARG, "staging for a model "
              "whose inputs the dataset lacks");
        ds_dataset_destroy(x);
        /* staged for the model: only the columns it reads */
        CHECK(ds_host_batch_alloc(&hb, d, short_mlp ? mlp : mlp, 2) == DS_OK, "%s",
              ds_last_error());
        CHECK(hb.batch.n == 4, "input_ids, attention_mask, labels, weights: %d", hb.batch.n);
        ds_host_batch_free(&hb);
        ds_model_destroy(mlp);
        ds_model_destroy(short_mlp);
        ds_dataset_destroy(d);
    }
    CHECK(ds_dataset_create(3, -1, &d) == DS_ERR_INVALID_ARG && !d, "seq_len -1");
    CHECK(ds_cls_dataset_create(3, 4, 0, NULL, &d) == DS_ERR_INVALID_ARG && !d, "no classes");
    const char *names[] = {"a", NULL};
    CHECK(ds_cls_dataset_create(3, 4, 2, names, &d) == DS_ERR_INVALID_ARG && !d,
          "NULL class name");
    CHECK(ds_dataset_create(0, 4, &d) == DS_OK && d && d->n == 0, "empty dataset");
    ds_dataset_destroy(d);
}

static void test_split_edges(void) {
    ds_text_set *s = NULL, *tr = NULL, *dv = NULL;
    CHECK(ds_text_read(DS_TEST_DATA_DIR "/text/quoted.csv", NULL, &s) == DS_OK, "%s",
          ds_last_error());
    if (!s) return;
    /* 6 rows: 0.5 -> 3 / 3; 0 -> all train; 1/6 -> 5 / 1 */
    const double ratios[] = {0.5, 0.0, 1.0 / 6.0};
    const size_t want_train[] = {3, 6, 5};
    for (int i = 0; i < 3; i++) {
        CHECK(ds_text_split(s, ratios[i], 7, &tr, &dv) == DS_OK, "%s", ds_last_error());
        if (!tr || !dv) continue;
        CHECK(tr->n == want_train[i] && dv->n == s->n - want_train[i],
              "ratio %g: %zu / %zu", ratios[i], tr->n, dv->n);
        CHECK(tr->n_classes == s->n_classes && dv->n_classes == s->n_classes, "classes kept");
        ds_text_set_destroy(tr);
        ds_text_set_destroy(dv);
        tr = dv = NULL;
    }
    CHECK(ds_text_split(s, 1.0, 7, &tr, &dv) == DS_ERR_INVALID_ARG && !tr && !dv, "ratio 1");
    CHECK(ds_text_split(s, -0.1, 7, &tr, &dv) == DS_ERR_INVALID_ARG, "negative ratio");
    ds_text_set_destroy(s);
}

int main(void) {
    test_dataset_and_batch();
    test_columns();
    test_split_edges();
    return test_finish("test_text_dataset");
}
