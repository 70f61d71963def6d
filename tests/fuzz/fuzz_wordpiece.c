/* WordPiece (text/wordpiece.c): a BERT vocab.txt, a model folder's
 * tokenizer_config.json, and the normalizer and greedy matcher the texts of
 * a data file go through.
 *
 * Input: one flags byte, then the bytes.
 *   bits 0-1  0: the bytes are a vocab.txt, loaded with the options below,
 *                then used to encode a fixed text and the bytes themselves
 *             1: the bytes are tokenizer_config.json beside a small valid
 *                vocab.txt (ds_wordpiece_load_dir), then a fixed text
 *             2: the bytes are a text, encoded with the MiniLM vocabulary
 *                (tests/data/wordpiece/minilm_vocab.txt)
 *             3: the same with the Chinese BERT vocabulary (zh_vocab.txt)
 *   bit 2     do_lower_case
 *   bits 3-4  strip_accents: 0 as do_lower_case, 1 no, 2 yes
 *   bit 5     tokenize_chinese_chars
 *   bit 6     max_input_chars_per_word 5 instead of 100
 * Every id encode gives must lie in the vocabulary, and [CLS] ... [SEP]
 * frame them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static ds_wordpiece_opts opts_of(unsigned flags) {
    ds_wordpiece_opts o = ds_wordpiece_opts_default();
    o.do_lower_case = flags & 4;
    int sa = (flags >> 3) & 3;
    o.strip_accents = sa == 1 ? 0 : sa >= 2 ? 1 : -1;
    o.tokenize_chinese_chars = flags & 32;
    o.max_input_chars_per_word = (flags & 64) ? 5 : 100;
    return o;
}

static void encode(const ds_tokenizer *t, const char *text, int max_len) {
    int32_t ids[256];
    int n = 0;
    fz_begin();
    if (fz_check(ds_tokenizer_encode(t, text, max_len, ids, &n), "ds_tokenizer_encode") != DS_OK)
        return;
    if (n < 2 || n > max_len) fz_fail("encode gave %d ids for max_len %d", n, max_len);
    if (ids[0] != ds_tokenizer_cls_id(t) || ids[n - 1] != ds_tokenizer_sep_id(t))
        fz_fail("encode: ids not framed by [CLS] and [SEP]");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= ds_tokenizer_vocab_size(t))
            fz_fail("encode gave id %d outside the vocabulary of %d", (int)ids[i],
                    ds_tokenizer_vocab_size(t));
}

static const char k_text[] = "Hello, [CLS]W\xc3\xb6rld! \xe4\xb8\xad\xe6\x96\x87 don't "
                             "\xe1\xba\x9e\xc3\x85ngstr\xc3\xb6m [MASK]x\t\xe2\x80\x8b";

/* The fixed vocabularies, loaded once per option set. */
static ds_tokenizer *fixed_vocab(int which, unsigned flags) {
    static ds_tokenizer *cache[2][128];
    unsigned k = (flags >> 2) & 31;
    if (!cache[which][k]) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/data/wordpiece/%s", fz_source_dir(),
                 which ? "zh_vocab.txt" : "minilm_vocab.txt");
        ds_wordpiece_opts o = opts_of(flags);
        if (ds_wordpiece_load(path, &o, &cache[which][k]) != DS_OK)
            fz_fail("the harness's vocabulary %s: %s", path, ds_last_error());
    }
    return cache[which][k];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0], mode = flags & 3;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    ds_tokenizer *t = NULL;
    if (mode == 0) {
        const char *path = fz_write("vocab.txt", body, n);
        ds_wordpiece_opts o = opts_of(flags);
        fz_begin();
        if (fz_check(ds_wordpiece_load(path, &o, &t), "ds_wordpiece_load") != DS_OK) return 0;
        encode(t, k_text, 256);
        char *text = fz_strdup(body, n);
        encode(t, text, 256);
        encode(t, text, 3);
        free(text);
        ds_tokenizer_destroy(t);
    } else if (mode == 1) {
        static const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n,\n##o\nw\n!\n";
        fz_write("vocab.txt", vocab, sizeof vocab - 1);
        fz_write("tokenizer_config.json", body, n);
        fz_begin();
        if (fz_check(ds_wordpiece_load_dir(fz_dir(), &t), "ds_wordpiece_load_dir") != DS_OK)
            return 0;
        encode(t, k_text, 256);
        ds_tokenizer_destroy(t);
    } else {
        char *text = fz_strdup(body, n);
        const ds_tokenizer *v = fixed_vocab(mode == 3, flags);
        encode(v, text, 256);
        encode(v, text, 2);
        free(text);
    }
    return 0;
}
