/* Documents for language models (text/lm_docs.c): plain text, one per
 * line, JSON lines and a CSV / TSV column, then the split, both tokenizers
 * and the packing into rows (text/lm_tokenizer.c, lm_pack.c).
 *
 * Input: one flags byte, then the file.
 *   bits 0-1  format: TEXT, LINES, JSONL, CSV
 *   bit 2     AUTO instead, from the file's suffix (.txt, .txt, .jsonl, .csv)
 *   bit 3     the text field / column is "body" instead of the defaults
 * Documents that read are split 4:1 and the training part packed into rows
 * of 8 tokens with the byte tokenizer and with a char tokenizer built from
 * it. Checks: the split keeps every document; the packed stream is EOT d1
 * EOT ... dn EOT, so with bytes it holds bytes + n + 1 tokens; every token
 * but the first is a target once, and the targets stand for every byte of
 * the documents (lm_text.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data/dataset.h"
#include "text/lm_text.h"
#include "tests/fuzz/fuzz_util.h"

static void pack_and_check(const ds_lm_docs *d, const ds_lm_tokenizer *t) {
    ds_dataset *ds = NULL;
    ds_lm_pack_stats ps;
    fz_begin();
    if (fz_check(ds_lm_pack(d, t, 8, &ds, &ps), "ds_lm_pack") != DS_OK) return;
    ds_dataset_destroy(ds);
    if (d->n == 0) return;
    size_t bytes = ds_lm_docs_bytes(d);
    const char *kind = ds_lm_tokenizer_kind(t);
    if (ps.docs != d->n) fz_fail("%s: packed %zu of %zu documents", kind, ps.docs, d->n);
    if (ps.targets + 1 != ps.tokens)
        fz_fail("%s: %zu targets for %zu tokens", kind, ps.targets, ps.tokens);
    if (!strcmp(kind, "byte") && ps.tokens != bytes + d->n + 1)
        fz_fail("byte: %zu tokens for %zu bytes in %zu documents", ps.tokens, bytes, d->n);
    if (ps.bytes != bytes)
        fz_fail("%s: the targets stand for %zu bytes, the documents hold %zu", kind, ps.bytes,
                bytes);
    if (ps.rows * 7 < ps.targets || (ps.rows > 0 && (ps.rows - 1) * 7 >= ps.targets))
        fz_fail("%s: %zu rows of 8 for %zu targets", kind, ps.rows, ps.targets);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0];
    static const char *const names[] = {"docs.txt", "docs.txt", "docs.jsonl", "docs.csv"};
    ds_lm_read_opts o = {0};
    o.format = (flags & 4) ? DS_LM_AUTO : (ds_lm_format)(DS_LM_TEXT + (flags & 3));
    if (flags & 8) o.text_field = "body", o.column = "body";
    const char *path = fz_write(names[flags & 3], data + 1, size - 1);

    ds_lm_docs *all = NULL, *train = NULL, *dev = NULL;
    fz_begin();
    if (fz_check(ds_lm_docs_read(path, &o, &all), "ds_lm_docs_read") != DS_OK) return 0;
    if (all->n == 0) fz_fail("a document set read with no documents");
    for (size_t i = 0; i < all->n; i++)
        if (all->lens[i] == 0 || strlen(all->texts[i]) != all->lens[i])
            fz_fail("document %zu: %zu bytes recorded, %zu up to its NUL", i, all->lens[i],
                    strlen(all->texts[i]));
    fz_begin();
    if (fz_check(ds_lm_docs_split(all, 0.2, 3, &train, &dev), "ds_lm_docs_split") == DS_OK) {
        if (train->n + dev->n != all->n)
            fz_fail("split %zu documents into %zu + %zu", all->n, train->n, dev->n);
        ds_lm_tokenizer *t = NULL;
        fz_begin();
        if (fz_check(ds_lm_tokenizer_byte(&t), "ds_lm_tokenizer_byte") == DS_OK)
            pack_and_check(train, t);
        ds_lm_tokenizer_destroy(t);
        t = NULL;
        fz_begin();
        if (train->n > 0 &&
            fz_check(ds_lm_tokenizer_char_build(train, 1, &t), "ds_lm_tokenizer_char_build") ==
                DS_OK)
            pack_and_check(train, t);
        ds_lm_tokenizer_destroy(t);
    }
    ds_lm_docs_destroy(train);
    ds_lm_docs_destroy(dev);
    ds_lm_docs_destroy(all);
    return 0;
}
