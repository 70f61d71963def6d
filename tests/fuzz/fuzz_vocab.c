/* Char vocabularies (text/tokenizer_char.c: vocab.txt) and the language
 * models' tokenizer description (text/lm_tokenizer.c: lm_tokenizer.json
 * beside a vocab.txt).
 *
 * Input: one flags byte, then the file.
 *   bit 0 clear  the file is a char vocab.txt: loaded, used to encode a fixed
 *                text and the file's own bytes (when they are text), saved
 *                with ds_tokenizer_save_vocab and loaded again, which
 *                tokenizer.h promises gives the same ids
 *   bit 0 set    the file is lm_tokenizer.json, beside a valid char vocab of
 *                6 tokens: loaded, then used to encode and decode a text
 * (mutated with fz_mutate_json, which also puts the int limits where the
 * JSON has numbers) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/lm_text.h"
#include "text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static void encode(const ds_tokenizer *t, const char *text) {
    int32_t ids[64];
    int n = 0;
    fz_begin();
    if (fz_check(ds_tokenizer_encode(t, text, 64, ids, &n), "ds_tokenizer_encode") != DS_OK)
        return;
    if (n < 2 || n > 64) fz_fail("encode gave %d ids for max_len 64", n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= ds_tokenizer_vocab_size(t))
            fz_fail("encode gave id %d outside the vocabulary of %d", (int)ids[i],
                    ds_tokenizer_vocab_size(t));
}

static void char_vocab(const uint8_t *data, size_t size) {
    const char *path = fz_write("vocab.txt", data, size);
    ds_tokenizer *t = NULL, *again = NULL;
    fz_begin();
    if (fz_check(ds_char_tokenizer_load(path, &t), "ds_char_tokenizer_load") != DS_OK) return;
    encode(t, "Hello, \xe4\xb8\x96\xe7\x95\x8c! [CLS] \t\x01~");
    char *text = fz_strdup(data, size);
    encode(t, text); /* invalid UTF-8 is refused with a status: fine */
    free(text);
    char saved[512];
    fz_write_to(saved, sizeof saved, "saved_vocab.txt", "", 0);
    fz_begin();
    if (fz_check(ds_tokenizer_save_vocab(t, saved), "ds_tokenizer_save_vocab") != DS_OK)
        fz_fail("saving a loaded vocabulary failed: %s", ds_last_error());
    fz_begin();
    if (fz_check(ds_char_tokenizer_load(saved, &again), "ds_char_tokenizer_load(saved)") != DS_OK)
        fz_fail("a vocabulary that loaded was saved into one that does not: %s", ds_last_error());
    if (ds_tokenizer_vocab_size(again) != ds_tokenizer_vocab_size(t))
        fz_fail("saved and loaded again: %d tokens, was %d", ds_tokenizer_vocab_size(again),
                ds_tokenizer_vocab_size(t));
    for (int i = 0; i < ds_tokenizer_vocab_size(t); i++)
        if (strcmp(ds_tokenizer_id_to_token(t, i), ds_tokenizer_id_to_token(again, i)) != 0)
            fz_fail("saved and loaded again: id %d is '%s', was '%s'", i,
                    ds_tokenizer_id_to_token(again, i), ds_tokenizer_id_to_token(t, i));
    ds_tokenizer_destroy(again);
    ds_tokenizer_destroy(t);
}

static void lm_description(const uint8_t *data, size_t size) {
    static const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n\\u000A\n";
    fz_write("vocab.txt", vocab, sizeof vocab - 1);
    fz_write("lm_tokenizer.json", data, size);
    ds_lm_tokenizer *t = NULL;
    fz_begin();
    if (fz_check(ds_lm_tokenizer_load(fz_dir(), &t), "ds_lm_tokenizer_load") != DS_OK) return;
    ds_lm_tokens s = {0};
    static const char text[] = "ab\n\xc3\xa9";
    fz_begin();
    if (fz_check(ds_lm_tokenizer_encode(t, text, sizeof text - 1, &s), "ds_lm_tokenizer_encode") ==
        DS_OK) {
        int v = ds_lm_tokenizer_vocab_size(t);
        for (size_t i = 0; i < s.n; i++) {
            char buf[16];
            if (s.ids[i] < 0 || s.ids[i] >= v) fz_fail("token %d outside the vocabulary %d", (int)s.ids[i], v);
            if (ds_lm_tokenizer_decode(t, s.ids[i], buf, sizeof buf) > sizeof buf)
                fz_fail("decode of %d wrote past its buffer", (int)s.ids[i]);
        }
    }
    ds_lm_tokens_free(&s);
    ds_lm_tokenizer_destroy(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1) lm_description(data + 1, size - 1);
    else char_vocab(data + 1, size - 1);
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    return fz_mutate_json(data, size, max_size, seed, 1);
}
