/* The BERT issue's data protocol on the real NLPCC 2013 file
 * (../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv, read in place):
 * six classes, every row of a text with two labels dropped, rows permuted
 * with seed 42, first 90% train, char vocab of the characters seen at least
 * twice in train.
 *
 * The expected numbers come from an independent Python implementation of
 * the same protocol (csv module + the permutation written out in
 * engine/data/dataset.h), run once by hand:
 *   clean rows 12,715 (the issue says so), split 11,443 / 1,272 (so does the
 *   issue), the first train / dev rows by file line, per-class counts, and
 *   the char vocab: 3,483 entries (4 specials + 3,479 characters), first
 *   '，' (14,520 times) '的' '。' '是' '一' '不'.
 * The issue quotes 3,473 vocab entries: that count depends on which rows
 * land in train, i.e. on the shuffle. Over seeds 0..19 of Python's
 * random.shuffle the same protocol gives 3,471..3,508 entries; the
 * specified permutation with seed 42 gives 3,483. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text.h"
#include "text/tokenizer.h"
#include "tests/unit/test_util.h"

static const char *k_six[] = {"none", "like", "disgust", "sadness", "happiness", "anger"};

int main(void) {
    const char *path = DS_SHARED_DATA_DIR "/nlpcc2013-emotion/Nlpcc2013Train.tsv";
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        /* The shared data sits beside the project on every machine of this
         * project and in CI; a checkout elsewhere does not have it. */
        printf("SKIP: %s is absent\n", path);
        return 0;
    }
    fclose(probe);

    /* permutation spot checks against the Python reference */
    size_t p10[10], p5[5];
    ds_permutation(10, 1, p10);
    ds_permutation(5, 0, p5);
    const size_t e10[10] = {4, 2, 8, 1, 9, 3, 0, 6, 7, 5}, e5[5] = {2, 3, 1, 4, 0};
    CHECK(memcmp(p10, e10, sizeof e10) == 0, "permutation(10, seed 1) differs from Python");
    CHECK(memcmp(p5, e5, sizeof e5) == 0, "permutation(5, seed 0) differs from Python");

    ds_text_read_opts o = {.keep_labels = k_six, .n_keep_labels = 6, .drop_conflicts = true};
    ds_text_set *all = NULL, *train = NULL, *dev = NULL, *train2 = NULL, *dev2 = NULL,
                *train3 = NULL, *dev3 = NULL;
    if (ds_text_read(path, &o, &all) != DS_OK) {
        printf("FAIL reading %s: %s\n", path, ds_last_error());
        return 1;
    }
    printf("NLPCC: read %zu rows, %zu texts with two labels (%zu rows dropped), %zu rows of "
           "other labels dropped, %zu clean\n",
           all->n_read, all->n_conflict_texts, all->n_dropped_conflict, all->n_dropped_label,
           all->n);
    CHECK(all->n_read == 13250, "rows read %zu", all->n_read);
    CHECK(all->n_conflict_texts == 36, "texts with two labels %zu (README: 36)",
          all->n_conflict_texts);
    CHECK(all->n == 12715, "clean rows %zu, the issue says 12,715", all->n);
    const char *sorted[] = {"anger", "disgust", "happiness", "like", "none", "sadness"};
    CHECK(all->n_classes == 6, "%d classes", all->n_classes);
    for (int c = 0; c < 6 && c < all->n_classes; c++)
        CHECK(strcmp(all->class_names[c], sorted[c]) == 0, "class %d is %s", c,
              all->class_names[c]);

    CHECK(ds_text_split(all, 0.1, 42, &train, &dev) == DS_OK, "%s", ds_last_error());
    if (!train || !dev) return 1;
    printf("NLPCC split (seed 42, dev 0.1): train %zu, dev %zu\n", train->n, dev->n);
    CHECK(train->n == 11443 && dev->n == 1272, "split %zu / %zu, the issue says 11,443 / 1,272",
          train->n, dev->n);
    const int32_t tr_lines[5] = {6196, 12713, 725, 10853, 10336};
    const int32_t dv_lines[5] = {3780, 9323, 6427, 10241, 5005};
    for (int i = 0; i < 5; i++) {
        CHECK(train->lines[i] == tr_lines[i], "train row %d is line %d, Python says %d", i,
              (int)train->lines[i], (int)tr_lines[i]);
        CHECK(dev->lines[i] == dv_lines[i], "dev row %d is line %d, Python says %d", i,
              (int)dev->lines[i], (int)dv_lines[i]);
    }
    size_t tc[6], dc[6];
    ds_text_set_class_counts(train, tc);
    ds_text_set_class_counts(dev, dc);
    const size_t etc[6] = {625, 906, 630, 1100, 7453, 729}, edc[6] = {90, 92, 70, 103, 825, 92};
    for (int c = 0; c < 6; c++)
        CHECK(tc[c] == etc[c] && dc[c] == edc[c], "class %s: train %zu dev %zu, Python %zu %zu",
              sorted[c], tc[c], dc[c], etc[c], edc[c]);

    /* train and dev partition the clean rows (lines are unique: one record
     * per line in this file) */
    char *seen = calloc(20000, 1);
    size_t dup = 0, covered = 0;
    for (size_t i = 0; i < all->n; i++) seen[all->lines[i]] = 1;
    const ds_text_set *parts[2] = {train, dev};
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < parts[p]->n; i++) {
            int32_t l = parts[p]->lines[i];
            if (seen[l] == 1) seen[l] = 2, covered++;
            else dup++;
        }
    CHECK(dup == 0 && covered == all->n, "split: %zu duplicates, %zu of %zu covered", dup,
          covered, all->n);
    free(seen);

    /* deterministic given the seed; another seed gives another split */
    CHECK(ds_text_split(all, 0.1, 42, &train2, &dev2) == DS_OK, "%s", ds_last_error());
    CHECK(ds_text_split(all, 0.1, 43, &train3, &dev3) == DS_OK, "%s", ds_last_error());
    if (train2 && train3) {
        CHECK(memcmp(train->lines, train2->lines, train->n * sizeof(int32_t)) == 0,
              "same seed, different split");
        CHECK(memcmp(train->lines, train3->lines, train->n * sizeof(int32_t)) != 0,
              "seeds 42 and 43 gave the same split");
    }

    /* char vocab: [PAD] [UNK] [CLS] [SEP], then by count */
    ds_tokenizer *tok = NULL;
    CHECK(ds_char_vocab_build(train, 2, &tok) == DS_OK, "%s", ds_last_error());
    if (tok) {
        int v = ds_tokenizer_vocab_size(tok);
        printf("NLPCC char vocab (min count 2, train split): %d entries\n", v);
        CHECK(v == 3483, "char vocab %d entries, the Python reference 3,483", v);
        const char *first[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "，", "的", "。", "是", "一", "不"};
        for (int i = 0; i < 10; i++)
            CHECK(strcmp(ds_tokenizer_id_to_token(tok, i), first[i]) == 0, "id %d is '%s', expected '%s'",
                  i, ds_tokenizer_id_to_token(tok, i), first[i]);
        /* the last three: count 2, ascending code point U+FF23 U+FF36 U+FFE2 */
        CHECK(strcmp(ds_tokenizer_id_to_token(tok, v - 3), "Ｃ") == 0 &&
                  strcmp(ds_tokenizer_id_to_token(tok, v - 2), "Ｖ") == 0 &&
                  strcmp(ds_tokenizer_id_to_token(tok, v - 1), "￢") == 0,
              "last entries '%s' '%s' '%s'", ds_tokenizer_id_to_token(tok, v - 3),
              ds_tokenizer_id_to_token(tok, v - 2), ds_tokenizer_id_to_token(tok, v - 1));
        ds_tokenizer_destroy(tok);
    }

    ds_text_set_destroy(all);
    ds_text_set_destroy(train);
    ds_text_set_destroy(dev);
    ds_text_set_destroy(train2);
    ds_text_set_destroy(dev2);
    ds_text_set_destroy(train3);
    ds_text_set_destroy(dev3);
    return test_finish("test_text_nlpcc");
}
