/* Texts -> ds_dataset (framing, truncation, padding, labels) and host batch
 * filling (tokens, attention mask, labels), with their errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data/dataset.h"
#include "models/text.h"
#include "models/tokenizer.h"
#include "tests/unit/test_util.h"

enum { SEQ = 8 };

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
    for (size_t i = 0; i < d->n; i++) {
        int32_t ids[SEQ];
        int len;
        CHECK(ds_tokenizer_encode(tok, s->texts[i], SEQ, ids, &len) == DS_OK, "%s",
              ds_last_error());
        const int32_t *row = d->tokens + i * SEQ;
        CHECK(d->lengths[i] == len, "row %zu length %d, encode says %d", i, (int)d->lengths[i],
              len);
        CHECK(memcmp(row, ids, (size_t)len * sizeof *ids) == 0, "row %zu tokens", i);
        CHECK(row[0] == ds_tokenizer_cls_id(tok) && row[len - 1] == ds_tokenizer_sep_id(tok),
              "row %zu not framed by [CLS] ... [SEP]", i);
        for (int t = len; t < SEQ; t++) CHECK(row[t] == 0, "row %zu pad at %d is %d", i, t, row[t]);
        CHECK(d->labels[i] == s->labels[i], "row %zu label", i);
    }
    /* row 0 "plain text" (10 chars) is cut to 6 characters + [CLS] [SEP];
     * row 5 is the empty text: [CLS] [SEP] */
    CHECK(d->lengths[0] == SEQ, "long text length %d", (int)d->lengths[0]);
    CHECK(d->lengths[5] == 2, "empty text length %d", (int)d->lengths[5]);

    /* a batch wider than the rows: extra columns are [PAD] with mask 0 */
    ds_host_batch hb;
    CHECK(ds_host_batch_alloc(&hb, 4, SEQ + 2) == DS_OK, "%s", ds_last_error());
    const size_t idx[3] = {5, 0, 3};
    CHECK(ds_host_batch_fill(&hb, d, idx, 3) == DS_OK, "%s", ds_last_error());
    CHECK(hb.B == 3, "B %d", hb.B);
    for (int b = 0; b < 3; b++) {
        const int32_t *row = d->tokens + idx[b] * SEQ;
        int len = d->lengths[idx[b]];
        for (int t = 0; t < SEQ + 2; t++) {
            int32_t want = t < SEQ ? row[t] : 0;
            CHECK(hb.tokens[b * (SEQ + 2) + t] == want, "batch row %d token %d", b, t);
            float m = hb.mask[b * (SEQ + 2) + t];
            CHECK(m == (t < len ? 1.0f : 0.0f), "batch row %d mask %d is %g (length %d)", b, t, m,
                  len);
        }
        CHECK(hb.labels[b] == d->labels[idx[b]], "batch row %d label", b);
    }
    /* a smaller fill after a larger one: B shrinks */
    CHECK(ds_host_batch_fill(&hb, d, idx + 2, 1) == DS_OK && hb.B == 1, "refill");
    CHECK(hb.mask[0] == 1.0f && hb.labels[0] == d->labels[3], "refilled row");

    /* errors */
    const size_t too_far[1] = {d->n};
    CHECK(ds_host_batch_fill(&hb, d, too_far, 1) == DS_ERR_INVALID_ARG, "index past the end");
    CHECK(ds_host_batch_fill(&hb, d, idx, 5) == DS_ERR_INVALID_ARG, "more rows than cap_B");
    ds_host_batch small;
    CHECK(ds_host_batch_alloc(&small, 2, SEQ - 1) == DS_OK, "%s", ds_last_error());
    CHECK(ds_host_batch_fill(&small, d, idx, 1) == DS_ERR_INVALID_ARG, "rows wider than T");
    ds_host_batch_free(&small);
    int32_t saved = d->lengths[0];
    d->lengths[0] = SEQ + 1;
    CHECK(ds_host_batch_fill(&hb, d, idx + 1, 1) == DS_ERR_DATA, "corrupt length");
    d->lengths[0] = saved;
    d->labels[0] = 3;
    CHECK(ds_host_batch_fill(&hb, d, idx + 1, 1) == DS_ERR_DATA, "label out of range");
    CHECK(ds_host_batch_alloc(&small, 0, 4) == DS_ERR_INVALID_ARG, "cap_B 0");
    ds_host_batch_free(&hb);

    ds_dataset *none = NULL;
    CHECK(ds_dataset_from_text(s, tok, 1, &none) == DS_ERR_INVALID_ARG && !none, "seq_len 1");
    /* a text the tokenizer rejects names its file and line */
    char *bad[] = {"fine", "bad\xff"};
    int32_t lines[] = {4, 9}, labels[] = {0, 0};
    ds_text_set m = {.n = 2, .texts = bad, .labels = labels, .lines = lines, .n_classes = 1,
                     .class_names = s->class_names, .path = "manual.txt"};
    CHECK(ds_dataset_from_text(&m, tok, SEQ, &none) == DS_ERR_DATA && !none &&
              strstr(ds_last_error(), "manual.txt:9: invalid UTF-8"),
          "bad text: %s", ds_last_error());

    ds_dataset_destroy(d);
    ds_tokenizer_destroy(tok);
    ds_text_set_destroy(s);
}

static void test_create(void) {
    ds_dataset *d = NULL;
    CHECK(ds_dataset_create(3, 4, 2, NULL, &d) == DS_OK, "%s", ds_last_error());
    if (d) {
        CHECK(strcmp(d->class_names[0], "0") == 0 && strcmp(d->class_names[1], "1") == 0,
              "default class names");
        for (int i = 0; i < 12; i++) CHECK(d->tokens[i] == 0, "zeroed tokens");
        ds_dataset_destroy(d);
    }
    CHECK(ds_dataset_create(3, 0, 2, NULL, &d) == DS_ERR_INVALID_ARG && !d, "seq_len 0");
    CHECK(ds_dataset_create(3, 4, 0, NULL, &d) == DS_ERR_INVALID_ARG && !d, "no classes");
    const char *names[] = {"a", NULL};
    CHECK(ds_dataset_create(3, 4, 2, names, &d) == DS_ERR_INVALID_ARG && !d, "NULL class name");
    CHECK(ds_dataset_create(0, 4, 1, NULL, &d) == DS_OK && d && d->n == 0, "empty dataset");
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
    test_create();
    test_split_edges();
    return test_finish("test_text_dataset");
}
