/* The data side of the issue-3 quality protocol as the C code does it, in a
 * form a Python reference can compare line for line:
 *
 *   bench/dump_split DATA [--seed S] [--dev-ratio R] [--min-count N]
 *   tools/pytorch_cls_reference.py --data DATA --dump-split   # the same lines
 *
 * Reads DATA with the six classes none/like/disgust/sadness/happiness/anger
 * and conflicting texts dropped (text/text.h), splits it with
 * ds_text_split (seed 42, dev ratio 0.1 by default, as train_cls), builds
 * the char vocabulary of the train split (min count 2) and prints:
 *
 *   rows N train N_TRAIN dev N_DEV classes C0,C1,...
 *   train LINE CLASS       one per train row, in train order (LINE: the
 *   dev LINE CLASS         file line where the row starts, header = 1)
 *   vocab ID TOKEN         TOKEN: [PAD] [UNK] [CLS] [SEP], else U+XXXX
 *
 * bench/quality.sh diffs this against the Python script before training, so
 * both sides of the comparison provably see the same rows and ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

static const char *const k_six[] = {"none", "like", "disgust", "sadness", "happiness", "anger"};

static int fail(const char *what) {
    fprintf(stderr, "dump_split: %s: %s\n", what, ds_last_error());
    return 1;
}

static void print_rows(const char *tag, const ds_text_set *s) {
    for (size_t r = 0; r < s->n; r++)
        printf("%s %d %s\n", tag, (int)s->lines[r], s->class_names[s->labels[r]]);
}

int main(int argc, char **argv) {
    const char *data = NULL;
    unsigned long long seed = 42;
    double dev_ratio = 0.1;
    int min_count = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dev-ratio") && i + 1 < argc) dev_ratio = atof(argv[++i]);
        else if (!strcmp(argv[i], "--min-count") && i + 1 < argc) min_count = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !data) data = argv[i];
        else {
            fprintf(stderr, "usage: dump_split DATA [--seed S] [--dev-ratio R] [--min-count N]\n");
            return 2;
        }
    }
    if (!data) {
        fprintf(stderr, "usage: dump_split DATA [--seed S] [--dev-ratio R] [--min-count N]\n");
        return 2;
    }
    ds_text_read_opts o = {.keep_labels = k_six, .n_keep_labels = 6, .drop_conflicts = true};
    ds_text_set *all = NULL, *train = NULL, *dev = NULL;
    ds_tokenizer *tok = NULL;
    int rc = 0;
    if (ds_text_read(data, &o, &all) != DS_OK) return fail("reading");
    if (ds_text_split(all, dev_ratio, seed, &train, &dev) != DS_OK) rc = fail("splitting");
    if (!rc && ds_char_vocab_build(train, min_count, &tok) != DS_OK) rc = fail("vocabulary");
    if (!rc) {
        printf("rows %zu train %zu dev %zu classes ", all->n, train->n, dev->n);
        for (int c = 0; c < all->n_classes; c++)
            printf("%s%s", c ? "," : "", all->class_names[c]);
        printf("\n");
        print_rows("train", train);
        print_rows("dev", dev);
        for (int id = 0; id < ds_tokenizer_vocab_size(tok); id++) {
            const char *s = ds_tokenizer_id_to_token(tok, id);
            uint32_t cp;
            int k = ds_utf8_decode((const unsigned char *)s, strlen(s), &cp);
            if (k <= 0 || (size_t)k != strlen(s)) printf("vocab %d %s\n", id, s);
            else printf("vocab %d U+%04X\n", id, (unsigned)cp);
        }
    }
    ds_tokenizer_destroy(tok);
    ds_text_set_destroy(train);
    ds_text_set_destroy(dev);
    ds_text_set_destroy(all);
    return rc;
}
