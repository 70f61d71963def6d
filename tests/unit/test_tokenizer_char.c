/* The char tokenizer: vocabulary order (count descending, then code point),
 * min_count, encoding with [CLS]/[SEP]/[UNK] and truncation, the vocab file
 * with escaped control characters, load errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text.h"
#include "text/tokenizer.h"
#include "tests/unit/test_util.h"

/* A set built by hand (only what the vocab builder reads). */
static char *k_texts[] = {"abca", "b\nc", "ddd", "é\n", "éz", "😀😀"};
static int32_t k_lines[] = {2, 3, 4, 5, 6, 7};
static int32_t k_labels[] = {0, 0, 0, 0, 0, 0};

static ds_text_set manual_set(void) {
    return (ds_text_set){.n = 6, .texts = k_texts, .labels = k_labels, .lines = k_lines,
                         .n_classes = 1, .path = "manual.txt"};
}

static void expect_encode(const ds_tokenizer *t, const char *text, int max_len,
                          const int32_t *want, int n_want) {
    int32_t ids[64];
    int n = -1;
    ds_status st = ds_tokenizer_encode(t, text, max_len, ids, &n);
    CHECK(st == DS_OK, "encode '%s': %s", text, ds_last_error());
    bool same = n == n_want && memcmp(ids, want, (size_t)n_want * sizeof *want) == 0;
    CHECK(same, "encode '%s' max_len %d: got %d ids", text, max_len, n);
    if (!same) { /* the ids, after the CHECK's message */
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, "\n");
    }
}

static void check_vocab(const ds_tokenizer *t, const char *const *want, int n) {
    CHECK(ds_tokenizer_vocab_size(t) == n, "vocab size %d, want %d", ds_tokenizer_vocab_size(t), n);
    for (int i = 0; i < n && i < ds_tokenizer_vocab_size(t); i++)
        CHECK(strcmp(ds_tokenizer_id_to_token(t, i), want[i]) == 0, "id %d is '%s', want '%s'", i,
              ds_tokenizer_id_to_token(t, i), want[i]);
}

static void write_bytes(const char *path, const char *content, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(content, 1, n, f);
    fclose(f);
}

static void write_file(const char *path, const char *content) {
    write_bytes(path, content, strlen(content));
}

int main(void) {
    ds_text_set set = manual_set();
    ds_tokenizer *t = NULL;
    /* counts: a 2, b 2, c 2, d 3, \n 2, é 2, z 1, 😀 2 */
    CHECK(ds_char_vocab_build(&set, 2, &t) == DS_OK, "%s", ds_last_error());
    if (!t) return 1;
    const char *want2[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "d", "\n", "a", "b", "c", "é", "😀"};
    check_vocab(t, want2, 11);
    CHECK(strcmp(ds_tokenizer_kind(t), "char") == 0, "kind %s", ds_tokenizer_kind(t));
    CHECK(ds_tokenizer_pad_id(t) == 0 && ds_tokenizer_unk_id(t) == 1 && ds_tokenizer_cls_id(t) == 2 &&
              ds_tokenizer_sep_id(t) == 3,
          "specials");
    CHECK(ds_tokenizer_token_to_id(t, "é") == 9 && ds_tokenizer_token_to_id(t, "z") == -1 &&
              ds_tokenizer_token_to_id(t, "[SEP]") == 3,
          "token_to_id");
    CHECK(ds_tokenizer_id_to_token(t, 11) == NULL && ds_tokenizer_id_to_token(t, -1) == NULL,
          "ids outside the vocab");

    const int32_t e1[] = {2, 4, 6, 7, 5, 1, 9, 10, 3}; /* z is [UNK] */
    expect_encode(t, "dab\nzé😀", 64, e1, 9);
    const int32_t e2[] = {2, 4, 4, 3}; /* truncated to max_len */
    expect_encode(t, "dddd", 4, e2, 4);
    const int32_t e3[] = {2, 3};
    expect_encode(t, "", 8, e3, 2);
    expect_encode(t, "abc", 2, e3, 2);
    const int32_t e4[] = {2, 1, 1, 1, 1, 1, 1, 1, 3}; /* specials are not parsed in text */
    expect_encode(t, "[CLS]xy", 64, e4, 9);

    int32_t ids[8];
    int n;
    CHECK(ds_tokenizer_encode(t, "a\xc3", 8, ids, &n) == DS_ERR_DATA &&
              strstr(ds_last_error(), "invalid UTF-8 at byte 1"),
          "truncated UTF-8: %s", ds_last_error());
    CHECK(ds_tokenizer_encode(t, "a", 1, ids, &n) == DS_ERR_INVALID_ARG, "max_len 1");

    /* save: one token per line, the newline escaped; load gives the same ids */
    char path[1024];
    snprintf(path, sizeof path, "%s/test_char_vocab.txt", DS_BINARY_DIR);
    CHECK(ds_tokenizer_save_vocab(t, path) == DS_OK, "%s", ds_last_error());
    FILE *f = fopen(path, "rb");
    char buf[256] = {0};
    size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    const char *file = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nd\n\\u000A\na\nb\nc\né\n😀\n";
    CHECK(got == strlen(file) && strcmp(buf, file) == 0, "vocab file:\n%s", buf);
    ds_tokenizer *back = NULL;
    CHECK(ds_char_tokenizer_load(path, &back) == DS_OK, "%s", ds_last_error());
    if (back) {
        check_vocab(back, want2, 11);
        expect_encode(back, "dab\nzé😀", 64, e1, 9);
        ds_tokenizer_destroy(back);
    }

    /* min_count 1 adds z (count 1) after every count-2 character */
    ds_tokenizer *t1 = NULL;
    CHECK(ds_char_vocab_build(&set, 1, &t1) == DS_OK, "%s", ds_last_error());
    if (t1) {
        const char *want1[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "d", "\n", "a",
                               "b",     "c",     "é",     "😀",    "z"};
        check_vocab(t1, want1, 12);
        ds_tokenizer_destroy(t1);
    }
    CHECK(ds_char_vocab_build(&set, 0, &t1) == DS_ERR_INVALID_ARG, "min_count 0");

    /* a text that is not UTF-8 names its file and line */
    char *bad_texts[] = {"ok", "bad\xff"};
    ds_text_set bad = set;
    bad.n = 2, bad.texts = bad_texts;
    CHECK(ds_char_vocab_build(&bad, 1, &t1) == DS_ERR_DATA &&
              strstr(ds_last_error(), "manual.txt:3: invalid UTF-8"),
          "bad text: %s", ds_last_error());

    /* load errors */
    write_file(path, "[PAD]\n[UNK]\nab\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA && strstr(ds_last_error(), ":3: 'ab'"),
          "two characters on a line: %s", ds_last_error());
    write_file(path, "[PAD]\n[UNK]\n[CLS]\nx\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA && strstr(ds_last_error(), "no [SEP]"),
          "missing [SEP]: %s", ds_last_error());
    write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\ny\nx\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA &&
              strstr(ds_last_error(), "U+0078 listed twice"),
          "duplicate: %s", ds_last_error());
    write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA && strstr(ds_last_error(), ":5: empty"),
          "empty line: %s", ds_last_error());
    write_file(path, "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n\\u00e9\r\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_OK, "CRLF and a lower-case escape: %s",
          ds_last_error());
    if (back) {
        CHECK(ds_tokenizer_token_to_id(back, "é") == 4, "escaped é -> %d",
              ds_tokenizer_token_to_id(back, "é"));
        ds_tokenizer_destroy(back);
    }
    /* Found by tests/fuzz/fuzz_vocab (issue 15): a [SPECIAL] line holding a
     * NUL byte loaded as the token cut at the NUL (the vocabulary then held
     * another token than its file, and saved a line that does not load);
     * invalid UTF-8 in a special and the escape \u0000 went through too. */
    static const char nul_special[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[a\0b]\n";
    write_bytes(path, nul_special, sizeof nul_special - 1);
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA &&
              strstr(ds_last_error(), ":5: invalid UTF-8 or a NUL byte"),
          "a NUL inside a special: %s", ds_last_error());
    write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[\x94,.d]\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA &&
              strstr(ds_last_error(), ":5: invalid UTF-8 or a NUL byte"),
          "invalid UTF-8 inside a special: %s", ds_last_error());
    write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n\\u0000\n");
    CHECK(ds_char_tokenizer_load(path, &back) == DS_ERR_DATA &&
              strstr(ds_last_error(), ":5: \\u0000"),
          "the escape of U+0000: %s", ds_last_error());
    CHECK(ds_char_tokenizer_load(DS_BINARY_DIR "/no/such/vocab.txt", &back) == DS_ERR_IO,
          "missing file");
    remove(path);

    ds_tokenizer_destroy(t);
    return test_finish("test_tokenizer_char");
}
