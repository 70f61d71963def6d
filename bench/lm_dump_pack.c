/* The data side of the language-model quality protocol (bench/lm_quality.sh)
 * as train_lm computes it, written out so that the Python reference can
 * check, element for element, that it trains and evaluates on the same
 * tokens in the same order:
 *
 *   bench/lm_dump_pack DATA OUT.bin [--seed S] [--dev-ratio R] [--seq-len T]
 *                      [--tokenizer byte|char] [--min-char-count N]
 *                      [--world W] [--micro-batch B] [--steps K]
 *   tools/pytorch_lm_reference.py --data DATA --check-pack OUT.bin ...
 *
 * Reads DATA as train_lm does (text/lm_text.h: ds_lm_docs_read with the
 * format from the suffix and the default column), splits it by document
 * with --seed and --dev-ratio (ds_lm_docs_split), tokenizes and packs both
 * parts into rows of --seq-len (ds_lm_pack), and replays the engine's
 * training sampler (engine/data/dataset.h: ds_sampler per rank, epochs
 * rolled over as ds_train_batch's loader does) for --steps optimizer steps
 * of --world ranks x --micro-batch rows. OUT.bin, little-endian:
 *
 *   "DSLMPACK" u32 version (1)
 *   per part (train, then dev): u64 rows, u32 seq_len, then rows x seq_len
 *     int32 input_ids, int32 labels, fp32 attention_mask, int32 token_bytes
 *   u32 world, u32 micro_batch, u32 steps, then per step and rank:
 *     u32 count (the rows the rank's micro-batch holds), then per row of
 *     the rank: u64 row index into train
 *
 * and prints the documents, tokens, rows and target bytes of each part. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data/dataset.h"
#include "text/lm_text.h"

static int fail(const char *what) {
    fprintf(stderr, "lm_dump_pack: %s: %s\n", what, ds_last_error());
    return 1;
}

static int put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

static int put_part(FILE *f, const ds_dataset *d) {
    uint64_t rows = d->n;
    uint32_t T = (uint32_t)d->seq_len;
    size_t n = (size_t)rows * T;
    if (put(f, &rows, 8) || put(f, &T, 4)) return -1;
    if (!n) return 0;
    /* each column whole, in this order, read through the dataset (the
     * packed columns are computed, text/lm_pack.c) */
    static const char *const cols[] = {"input_ids", "labels", "attention_mask", "token_bytes"};
    void *buf = malloc(n * 4);
    int rc = buf ? 0 : -1;
    for (int c = 0; c < 4 && rc == 0; c++) {
        int k = ds_dataset_find(d, cols[c]);
        rc = k >= 0 && ds_dataset_read_rows(d, k, 0, (size_t)rows, buf) == DS_OK ? put(f, buf, n * 4)
                                                                                 : -1;
    }
    free(buf);
    return rc;
}

static void print_stats(const char *part, const ds_lm_pack_stats *s) {
    printf("%s: %zu docs, %zu tokens, %zu targets, %zu target bytes, %zu rows, %zu padded\n", part,
           s->docs, s->tokens, s->targets, s->bytes, s->rows, s->padding);
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = NULL, *tokenizer = "byte";
    unsigned long long seed = 42;
    double dev_ratio = 0.1;
    int seq_len = 128, min_char_count = 1, world = 2, micro = 16, steps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seed") && v) seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--dev-ratio") && v) dev_ratio = atof(v), i++;
        else if (!strcmp(a, "--seq-len") && v) seq_len = atoi(v), i++;
        else if (!strcmp(a, "--tokenizer") && v) tokenizer = v, i++;
        else if (!strcmp(a, "--min-char-count") && v) min_char_count = atoi(v), i++;
        else if (!strcmp(a, "--world") && v) world = atoi(v), i++;
        else if (!strcmp(a, "--micro-batch") && v) micro = atoi(v), i++;
        else if (!strcmp(a, "--steps") && v) steps = atoi(v), i++;
        else if (a[0] != '-' && !data) data = a;
        else if (a[0] != '-' && !out) out = a;
        else {
            fprintf(stderr, "usage: lm_dump_pack DATA OUT.bin [--seed S] [--dev-ratio R] "
                            "[--seq-len T] [--tokenizer byte|char] [--min-char-count N] "
                            "[--world W] [--micro-batch B] [--steps K]\n");
            return 2;
        }
    }
    if (!data || !out || world < 1 || micro < 1 || steps < 0) {
        fprintf(stderr, "lm_dump_pack: need DATA and OUT.bin, --world and --micro-batch >= 1\n");
        return 2;
    }
    ds_lm_docs *all, *train, *dev;
    if (ds_lm_docs_read(data, NULL, &all) != DS_OK) return fail(data);
    if (ds_lm_docs_split(all, dev_ratio, seed, &train, &dev) != DS_OK) return fail("split");
    ds_lm_tokenizer *tok;
    ds_status st = strcmp(tokenizer, "char")
                       ? ds_lm_tokenizer_byte(&tok)
                       : ds_lm_tokenizer_char_build(train, min_char_count, &tok);
    if (st != DS_OK) return fail("tokenizer");
    ds_dataset *dtr, *ddv;
    ds_lm_pack_stats ptr, pdv;
    if (ds_lm_pack(train, tok, seq_len, &dtr, &ptr) != DS_OK) return fail("packing train");
    if (ds_lm_pack(dev, tok, seq_len, &ddv, &pdv) != DS_OK) return fail("packing dev");
    printf("lm_dump_pack: %s: %zu documents (%zu empty skipped), seed %llu, dev ratio %g, "
           "%s tokenizer (vocabulary %d), seq_len %d\n",
           data, all->n, all->n_empty, seed, dev_ratio, ds_lm_tokenizer_kind(tok),
           ds_lm_tokenizer_vocab_size(tok), seq_len);
    print_stats("train", &ptr);
    print_stats("dev", &pdv);

    FILE *f = fopen(out, "wb");
    if (!f) {
        perror(out);
        return 1;
    }
    uint32_t version = 1;
    int bad = put(f, "DSLMPACK", 8) || put(f, &version, 4) || put_part(f, dtr) ||
              put_part(f, ddv);
    uint32_t hdr[3] = {(uint32_t)world, (uint32_t)micro, (uint32_t)steps};
    bad = bad || put(f, hdr, sizeof hdr);
    /* the engine's loader (engine_step.c: next_batch) on every rank */
    ds_sampler *s = calloc((size_t)world, sizeof *s);
    size_t *cursor = calloc((size_t)world, sizeof *cursor);
    int64_t *epoch = calloc((size_t)world, sizeof *epoch);
    for (int r = 0; r < world && !bad; r++) {
        if (ds_sampler_init(&s[r], dtr->n, world, r, seed, true, false, true) != DS_OK ||
            ds_sampler_set_epoch(&s[r], 0) != DS_OK)
            return fail("sampler");
    }
    for (int k = 0; k < steps && !bad; k++) {
        for (int r = 0; r < world && !bad; r++) {
            if (cursor[r] >= s[r].num_samples) {
                cursor[r] = 0;
                if (ds_sampler_set_epoch(&s[r], ++epoch[r]) != DS_OK) return fail("sampler");
            }
            size_t left = s[r].num_samples - cursor[r];
            uint32_t count = left < (size_t)micro ? (uint32_t)left : (uint32_t)micro;
            bad = put(f, &count, 4);
            for (uint32_t j = 0; j < count && !bad; j++) {
                uint64_t idx = s[r].indices[cursor[r] + j];
                bad = put(f, &idx, 8);
            }
            cursor[r] += count;
        }
    }
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "lm_dump_pack: writing %s failed\n", out);
        return 1;
    }
    for (int r = 0; r < world; r++) ds_sampler_free(&s[r]);
    free(s);
    free(cursor);
    free(epoch);
    ds_dataset_destroy(dtr);
    ds_dataset_destroy(ddv);
    ds_lm_tokenizer_destroy(tok);
    ds_lm_docs_destroy(train);
    ds_lm_docs_destroy(dev);
    ds_lm_docs_destroy(all);
    return 0;
}
