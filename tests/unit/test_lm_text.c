/* Language-model text (text/lm_text.h): the four document formats and
 * their errors with path:line, the split by document, the byte and char
 * tokenizers (encode, bytes per token, decode, the folder description), the
 * packing of the stream into overlapping rows (every token after the first a
 * target exactly once), and the UTF-8 sanitizer. Fixtures are written into a
 * fresh temporary folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/lm_text.h"
#include "tests/unit/test_util.h"

static char g_dir[256];

static bool mkdir_p_ok(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    return system(cmd) == 0;
}

/* Write `text` (len bytes; -1: strlen) to g_dir/name; returns the path. */
static const char *fixture(const char *name, const char *text, long len) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) TEST_DIE(p);
    fwrite(text, 1, len < 0 ? strlen(text) : (size_t)len, f);
    fclose(f);
    return p;
}

/* The documents of `path` equal texts[0..n) starting on lines[0..n). */
static void expect_docs(const char *path, const ds_lm_read_opts *o, const char *const *texts,
                        const int *lines, size_t n, size_t n_empty) {
    ds_lm_docs *d = NULL;
    ds_clear_error();
    if (!TEST_OK(ds_lm_docs_read(path, o, &d))) return;
    CHECK(d->n == n, "%s: %zu documents, expected %zu", path, d->n, n);
    CHECK(d->n_empty == n_empty, "%s: %zu empty, expected %zu", path, d->n_empty, n_empty);
    for (size_t i = 0; i < n && i < d->n; i++) {
        CHECK(strcmp(d->texts[i], texts[i]) == 0, "%s doc %zu: '%s', expected '%s'", path, i,
              d->texts[i], texts[i]);
        CHECK(d->lens[i] == strlen(texts[i]), "%s doc %zu: length %zu", path, i, d->lens[i]);
        CHECK(d->lines[i] == lines[i], "%s doc %zu: line %d, expected %d", path, i,
              (int)d->lines[i], lines[i]);
    }
    ds_lm_docs_destroy(d);
}

/* Reading fails with `code` and a message holding `where` and `what`. */
static void expect_error(const char *path, const ds_lm_read_opts *o, ds_status code,
                         const char *where, const char *what) {
    ds_lm_docs *d = NULL;
    ds_clear_error();
    ds_status st = ds_lm_docs_read(path, o, &d);
    CHECK(st == code, "%s: %s, expected %s (%s)", path, ds_status_to_string(st),
          ds_status_to_string(code), ds_last_error());
    CHECK(d == NULL, "%s: documents came back with an error", path);
    CHECK(strstr(ds_last_error(), where) != NULL, "%s: message '%s' lacks '%s'", path,
          ds_last_error(), where);
    CHECK(strstr(ds_last_error(), what) != NULL, "%s: message '%s' lacks '%s'", path,
          ds_last_error(), what);
    ds_lm_docs_destroy(d);
}

static void test_formats(void) {
    /* TEXT: blank (and blank-looking) lines separate; CRLF loses its CR */
    const char *txt = "a b\nc\n\n\n  \nd\r\ne\n\nf";
    const char *tp = fixture("docs.txt", txt, -1);
    const char *t_docs[] = {"a b\nc", "d\ne", "f"};
    const int t_lines[] = {1, 6, 9};
    expect_docs(tp, NULL, t_docs, t_lines, 3, 0);
    ds_lm_read_opts lo = {.format = DS_LM_LINES};
    const char *l_docs[] = {"a b", "c", "d", "e", "f"};
    const int l_lines[] = {1, 2, 6, 7, 9};
    expect_docs(tp, &lo, l_docs, l_lines, 5, 0);

    /* JSONL: other keys ignored, an empty text skipped and counted */
    const char *jp = fixture("docs.jsonl",
                             "{\"text\": \"x\\ny\"}\n\n{\"text\": \"\", \"id\": 2}\n"
                             "{\"body\": \"q\", \"text\": \"z\"}\n",
                             -1);
    const char *j_docs[] = {"x\ny", "z"};
    const int j_lines[] = {1, 4};
    expect_docs(jp, NULL, j_docs, j_lines, 2, 1);
    ds_lm_read_opts jo = {.text_field = "body"};
    expect_error(jp, &jo, DS_ERR_DATA, "docs.jsonl:1:", "no \"body\" key");

    /* CSV: RFC 4180 quoting through the shared record reader, a blank
     * record skipped, the record's line */
    const char *cp = fixture("docs.csv",
                             "id,Text\n1,\"hello, world\"\n2,\"multi\nline\"\n\n3,plain\n", -1);
    const char *c_docs[] = {"hello, world", "multi\nline", "plain"};
    const int c_lines[] = {2, 3, 6};
    expect_docs(cp, NULL, c_docs, c_lines, 3, 0);
    /* TSV sniffed, the column chosen by name */
    const char *sp = fixture("docs.tsv", "title\tbody\nA\tfirst\nB\tsecond\n", -1);
    ds_lm_read_opts so = {.column = "body"};
    const char *s_docs[] = {"first", "second"};
    const int s_lines[] = {2, 3};
    expect_docs(sp, &so, s_docs, s_lines, 2, 0);
    expect_error(sp, NULL, DS_ERR_DATA, "docs.tsv:1:", "no text column in the header");

    /* the suffix picks the format; --format overrides it */
    CHECK_EQ_I(ds_lm_format_of("a/b.JSONL"), DS_LM_JSONL);
    CHECK_EQ_I(ds_lm_format_of("x.ndjson"), DS_LM_JSONL);
    CHECK_EQ_I(ds_lm_format_of("x.tsv"), DS_LM_CSV);
    CHECK_EQ_I(ds_lm_format_of("x.txt"), DS_LM_TEXT);
    CHECK_EQ_I(ds_lm_format_of("README"), DS_LM_TEXT);
    CHECK_EQ_I(ds_lm_format_parse("lines"), DS_LM_LINES);
    CHECK_EQ_I(ds_lm_format_parse("xml"), -1);
    ds_lm_read_opts force = {.format = DS_LM_TEXT};
    const char *f_docs[] = {"id,Text\n1,\"hello, world\"\n2,\"multi\nline\"", "3,plain"};
    const int f_lines[] = {1, 6};
    expect_docs(cp, &force, f_docs, f_lines, 2, 0);

    /* a byte-order mark is skipped */
    const char *bp = fixture("bom.txt", "\xEF\xBB\xBFhi\n", -1);
    const char *b_docs[] = {"hi"};
    const int b_lines[] = {1};
    expect_docs(bp, NULL, b_docs, b_lines, 1, 0);
}

static void test_errors(void) {
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nope.txt", g_dir);
    expect_error(missing, NULL, DS_ERR_IO, "nope.txt", "cannot open");
    expect_error(fixture("utf8.txt", "ok\n\nfine\xff\n", -1), NULL, DS_ERR_DATA, "utf8.txt:3:",
                 "invalid UTF-8");
    expect_error(fixture("nul.txt", "a\0b", 3), NULL, DS_ERR_DATA, "nul.txt:1:", "NUL byte");
    expect_error(fixture("blank.txt", "\n  \n\n", -1), NULL, DS_ERR_DATA, "blank.txt",
                 "no documents");
    expect_error(fixture("bad.jsonl", "{\"text\": \"a\"}\n{\"text\": \n", -1), NULL, DS_ERR_DATA,
                 "bad.jsonl:2:", "bad JSON");
    expect_error(fixture("num.jsonl", "{\"text\": 3}\n", -1), NULL, DS_ERR_DATA, "num.jsonl:1:",
                 "must be a string");
    expect_error(fixture("list.jsonl", "[\"a\"]\n", -1), NULL, DS_ERR_DATA, "list.jsonl:1:",
                 "expected an object");
    expect_error(fixture("empty.jsonl", "{\"text\": \"\"}\n", -1), NULL, DS_ERR_DATA,
                 "empty.jsonl", "every one was empty");
    expect_error(fixture("short.csv", "id,text\n1,a\n2\n", -1), NULL, DS_ERR_DATA, "short.csv:3:",
                 "missing column 'text'");
    expect_error(fixture("long.csv", "id,text\n1,a,b\n", -1), NULL, DS_ERR_DATA, "long.csv:2:",
                 "3 fields, the header has 2");
    expect_error(fixture("quote.csv", "text\nfine\n\"open\nnever\n", -1), NULL, DS_ERR_DATA,
                 "quote.csv:3:", "unterminated quote");
    expect_error(fixture("empty.csv", "", 0), NULL, DS_ERR_DATA, "empty.csv", "empty file");
    /* found by tests/fuzz/fuzz_lm_docs (issue 15): a header of empty names
     * left the record buffer NULL and the column search computed NULL + 0,
     * undefined behaviour (UBSan stops the DS_SANITIZE build here) */
    expect_error(fixture("empty_names.csv", "\n,,\nx,y,z\n", -1), NULL, DS_ERR_DATA,
                 "empty_names.csv:2:", "no text column");
}

/* ---- split ---- */

static void test_split(void) {
    char text[400] = "";
    for (int i = 0; i < 10; i++) snprintf(text + strlen(text), 40, "doc %d\n\n", i);
    ds_lm_docs *all = NULL, *tr = NULL, *dv = NULL, *tr2 = NULL, *dv2 = NULL;
    REQUIRE_OK(ds_lm_docs_read(fixture("ten.txt", text, -1), NULL, &all));
    REQUIRE_OK(ds_lm_docs_split(all, 0.3, 7, &tr, &dv));
    CHECK_EQ_I(tr->n, 7); /* floor(10 * 0.7 + 1e-9), not 6 */
    CHECK_EQ_I(dv->n, 3);
    /* dev is the permutation's tail, in file order */
    size_t perm[10];
    ds_permutation(10, 7, perm);
    bool in_dev[10] = {false};
    for (int i = 7; i < 10; i++) in_dev[perm[i]] = true;
    size_t k = 0, j = 0;
    for (size_t i = 0; i < 10; i++) {
        ds_lm_docs *part = in_dev[i] ? dv : tr;
        size_t *at = in_dev[i] ? &k : &j;
        if (*at < part->n) {
            CHECK(strcmp(part->texts[*at], all->texts[i]) == 0, "doc %zu went to %s as '%s'", i,
                  in_dev[i] ? "dev" : "train", part->texts[*at]);
            CHECK_EQ_I(part->lines[*at], all->lines[i]);
        }
        (*at)++;
    }
    /* the same seed, the same split (every rank computes it alone) */
    REQUIRE_OK(ds_lm_docs_split(all, 0.3, 7, &tr2, &dv2));
    for (size_t i = 0; i < dv->n && i < dv2->n; i++)
        CHECK(strcmp(dv->texts[i], dv2->texts[i]) == 0, "dev %zu differs between two splits", i);
    ds_lm_docs_destroy(tr2);
    ds_lm_docs_destroy(dv2);
    tr2 = dv2 = NULL;
    REQUIRE_OK(ds_lm_docs_split(all, 0.0, 7, &tr2, &dv2));
    CHECK_EQ_I(tr2->n, 10);
    CHECK_EQ_I(dv2->n, 0);
    ds_lm_docs *a = NULL, *b = NULL;
    CHECK(ds_lm_docs_split(all, 1.0, 7, &a, &b) == DS_ERR_INVALID_ARG, "ratio 1 accepted");
    CHECK_EQ_I(ds_lm_docs_bytes(all), 50);
    ds_lm_docs_destroy(all);
    ds_lm_docs_destroy(tr);
    ds_lm_docs_destroy(dv);
    ds_lm_docs_destroy(tr2);
    ds_lm_docs_destroy(dv2);
}

/* ---- tokenizers ---- */

static void check_decode(const ds_lm_tokenizer *t, int32_t id, const char *want) {
    char buf[16];
    size_t n = ds_lm_tokenizer_decode(t, id, buf, sizeof buf);
    CHECK(n == strlen(want) && memcmp(buf, want, n) == 0, "%s: id %d decodes to '%.*s', not '%s'",
          ds_lm_tokenizer_kind(t), (int)id, (int)n, buf, want);
}

static void test_byte_tokenizer(void) {
    ds_lm_tokenizer *t;
    REQUIRE_OK(ds_lm_tokenizer_byte(&t));
    CHECK(strcmp(ds_lm_tokenizer_kind(t), "byte") == 0, "kind %s", ds_lm_tokenizer_kind(t));
    CHECK_EQ_I(ds_lm_tokenizer_vocab_size(t), 257);
    CHECK_EQ_I(ds_lm_tokenizer_eot_id(t), 256);
    ds_lm_tokens s = {0};
    const char *text = "h\xC3\xA9\xE4\xB8\x96"; /* "hé世": 1 + 2 + 3 bytes */
    REQUIRE_OK(ds_lm_tokenizer_encode(t, text, strlen(text), &s));
    const int32_t want[] = {0x68, 0xC3, 0xA9, 0xE4, 0xB8, 0x96};
    CHECK_EQ_I(s.n, 6);
    for (size_t i = 0; i < s.n && i < 6; i++) {
        CHECK_EQ_I(s.ids[i], want[i]);
        CHECK_EQ_I(s.bytes[i], 1);
    }
    ds_lm_tokens_free(&s);
    check_decode(t, 'A', "A");
    check_decode(t, 256, "<|endoftext|>");
    check_decode(t, 257, "");
    char one[16];
    CHECK_EQ_I(ds_lm_tokenizer_decode(t, 0xE4, one, sizeof one), 1);
    CHECK_EQ_I((unsigned char)one[0], 0xE4);
    ds_lm_tokenizer_destroy(t);
}

static ds_lm_docs *read_docs(const char *name, const char *text) {
    ds_lm_docs *d = NULL;
    if (ds_lm_docs_read(fixture(name, text, -1), NULL, &d) != DS_OK) TEST_DIE(name);
    return d;
}

static void test_char_tokenizer(void) {
    ds_lm_docs *d = read_docs("chars.txt", "abca\n\nb\xE4\xB8\x96");
    ds_lm_tokenizer *t;
    REQUIRE_OK(ds_lm_tokenizer_char_build(d, 1, &t));
    /* [PAD] [UNK] [CLS] [SEP], then a (2) b (2) c (1) 世 (1): by count, then
     * code point; the blank line between the documents is no character */
    CHECK(strcmp(ds_lm_tokenizer_kind(t), "char") == 0, "kind %s", ds_lm_tokenizer_kind(t));
    CHECK_EQ_I(ds_lm_tokenizer_vocab_size(t), 4 + 4);
    CHECK_EQ_I(ds_lm_tokenizer_eot_id(t), 3);
    ds_lm_tokens s = {0};
    const char *text = "a\n\xE4\xB8\x96z\xC3\xA9"; /* \n, z and é were never seen */
    REQUIRE_OK(ds_lm_tokenizer_encode(t, text, strlen(text), &s));
    const int32_t want_ids[] = {4, 1, 7, 1, 1};
    const int32_t want_bytes[] = {1, 1, 3, 1, 2};
    CHECK_EQ_I(s.n, 5);
    for (size_t i = 0; i < s.n && i < 5; i++) {
        CHECK_EQ_I(s.ids[i], want_ids[i]);
        CHECK_EQ_I(s.bytes[i], want_bytes[i]); /* [UNK] keeps the bytes it replaced */
    }
    check_decode(t, 7, "\xE4\xB8\x96");
    check_decode(t, 3, "<|endoftext|>");
    check_decode(t, 1, "\xEF\xBF\xBD");
    check_decode(t, 0, "");
    ds_lm_tokens_free(&s);
    const char *bad = "ok\xC3";
    ds_clear_error();
    CHECK(ds_lm_tokenizer_encode(t, bad, strlen(bad), &s) == DS_ERR_DATA, "invalid UTF-8 taken");
    CHECK(strstr(ds_last_error(), "invalid UTF-8 at byte 2") != NULL, "message '%s'",
          ds_last_error());
    ds_lm_tokens_free(&s);
    ds_lm_tokenizer *t2 = NULL;
    CHECK(ds_lm_tokenizer_char_build(d, 0, &t2) == DS_ERR_INVALID_ARG, "min_count 0 accepted");
    /* min_count 2 keeps a and b only */
    REQUIRE_OK(ds_lm_tokenizer_char_build(d, 2, &t2));
    CHECK_EQ_I(ds_lm_tokenizer_vocab_size(t2), 6);
    ds_lm_tokenizer_destroy(t2);
    ds_lm_tokenizer_destroy(t);
    ds_lm_docs_destroy(d);
}

/* save -> load gives a tokenizer that encodes every text the same way. */
static void round_trip(ds_lm_tokenizer *t, const char *sub, const char *text) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
    CHECK_TRUE(mkdir_p_ok(dir));
    if (!TEST_OK(ds_lm_tokenizer_save(t, dir))) return;
    ds_lm_tokenizer *u = NULL;
    if (!TEST_OK(ds_lm_tokenizer_load(dir, &u))) return;
    CHECK(strcmp(ds_lm_tokenizer_kind(u), ds_lm_tokenizer_kind(t)) == 0, "kind %s",
          ds_lm_tokenizer_kind(u));
    CHECK_EQ_I(ds_lm_tokenizer_vocab_size(u), ds_lm_tokenizer_vocab_size(t));
    CHECK_EQ_I(ds_lm_tokenizer_eot_id(u), ds_lm_tokenizer_eot_id(t));
    ds_lm_tokens a = {0}, b = {0};
    CHECK_OK(ds_lm_tokenizer_encode(t, text, strlen(text), &a));
    CHECK_OK(ds_lm_tokenizer_encode(u, text, strlen(text), &b));
    CHECK(a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof *a.ids) &&
              !memcmp(a.bytes, b.bytes, a.n * sizeof *a.bytes),
          "%s: encodings differ after a round trip", sub);
    ds_lm_tokens_free(&a);
    ds_lm_tokens_free(&b);
    ds_lm_tokenizer_destroy(u);
}

static void test_tokenizer_files(void) {
    ds_lm_tokenizer *bt;
    REQUIRE_OK(ds_lm_tokenizer_byte(&bt));
    round_trip(bt, "tok_byte", "any text \xE4\xB8\x96");
    ds_lm_tokenizer_destroy(bt);
    /* a newline and a tab in the vocabulary: escaped in vocab.txt */
    ds_lm_docs *d = read_docs("ctl.txt", "a\tb\nc\n\nd");
    ds_lm_tokenizer *ct;
    REQUIRE_OK(ds_lm_tokenizer_char_build(d, 1, &ct));
    round_trip(ct, "tok_char", "a\tb\nc d");
    ds_lm_tokenizer_destroy(ct);
    ds_lm_docs_destroy(d);

    ds_lm_tokenizer *u = NULL;
    ds_clear_error();
    CHECK(ds_lm_tokenizer_load(g_dir, &u) == DS_ERR_IO, "a folder without lm_tokenizer.json");
    CHECK(strstr(ds_last_error(), "lm_tokenizer.json") != NULL, "message '%s'", ds_last_error());
    char dir[300];
    snprintf(dir, sizeof dir, "%s/tok_bad", g_dir);
    CHECK_TRUE(mkdir_p_ok(dir));
    fixture("tok_bad/lm_tokenizer.json", "{\"kind\": \"byte\", \"vocab_size\": 300, \"eot_id\": 256}",
            -1);
    ds_clear_error();
    CHECK(ds_lm_tokenizer_load(dir, &u) == DS_ERR_DATA, "vocab_size 300 for bytes accepted");
    CHECK(strstr(ds_last_error(), "vocab_size: 300") != NULL, "message '%s'", ds_last_error());
    /* issue 15: an integer beyond int was narrowed first, so 2^32 + 257
     * read as the byte tokenizer's 257 and passed the check */
    fixture("tok_bad/lm_tokenizer.json",
            "{\"kind\": \"byte\", \"vocab_size\": 4294967553, \"eot_id\": 256}", -1);
    ds_clear_error();
    CHECK(ds_lm_tokenizer_load(dir, &u) == DS_ERR_DATA &&
              strstr(ds_last_error(), "vocab_size: 4294967553 does not fit an int"),
          "vocab_size 2^32 + 257: '%s'", ds_last_error());
    fixture("tok_bad/lm_tokenizer.json", "{\"kind\": \"bpe\", \"vocab_size\": 50257}", -1);
    CHECK(ds_lm_tokenizer_load(dir, &u) == DS_ERR_DATA, "kind bpe accepted");
    CHECK(u == NULL, "a tokenizer came back with an error");
}

/* ---- packing ---- */

/* docs "ab", "c" with bytes, T = 4: the stream EOT a b EOT c EOT (6 tokens)
 * gives rows [EOT a b EOT] [EOT c EOT pad]. */

/* Every row of a column, read through the dataset (computed or stored), in
 * a buffer to free; NULL when absent, of another dtype, or unreadable. */
static void *read_col(const ds_dataset *ds, const char *name, ds_dtype dt) {
    int k = ds_dataset_find(ds, name);
    if (k < 0 || ds->cols[k].dtype != dt) return NULL;
    size_t rb = ds_dataset_row_bytes(ds, k);
    void *p = malloc(ds->n * rb + 1);
    if (p && ds_dataset_read_rows(ds, k, 0, ds->n, p) != DS_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

static void test_pack_small(void) {
    ds_lm_docs *d = read_docs("ab.txt", "ab\n\nc\n");
    ds_lm_tokenizer *t;
    REQUIRE_OK(ds_lm_tokenizer_byte(&t));
    ds_dataset *ds = NULL;
    ds_lm_pack_stats ps;
    REQUIRE_OK(ds_lm_pack(d, t, 4, &ds, &ps));
    CHECK_EQ_I(ds->n, 2);
    CHECK_EQ_I(ds->seq_len, 4);
    CHECK_EQ_I(ps.docs, 2);
    CHECK_EQ_I(ps.tokens, 6);
    CHECK_EQ_I(ps.targets, 5);
    CHECK_EQ_I(ps.bytes, 3);
    CHECK_EQ_I(ps.rows, 2);
    CHECK_EQ_I(ps.padding, 1);
    const int32_t E = 256, I = DS_IGNORE_INDEX;
    const int32_t ids[8] = {E, 'a', 'b', E, E, 'c', E, E};
    const int32_t labels[8] = {E, 'a', 'b', E, E, 'c', E, I};
    const float mask[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    const int32_t bytes[8] = {0, 1, 1, 0, 0, 1, 0, 0};
    /* the columns are computed from the stream (nothing stored per row) */
    CHECK(!ds_dataset_i32(ds, "input_ids") && !ds_dataset_f32(ds, "attention_mask"),
          "a packed column is stored");
    int32_t *gi = read_col(ds, "input_ids", DS_I32), *gl = read_col(ds, "labels", DS_I32),
            *gb = read_col(ds, "token_bytes", DS_I32);
    float *gm = read_col(ds, "attention_mask", DS_F32);
    CHECK(gi && gl && gb && gm, "a column is missing or of another type");
    for (int i = 0; gi && gl && gb && gm && i < 8; i++) {
        CHECK(gi[i] == ids[i], "input_ids[%d] = %d, expected %d", i, (int)gi[i], (int)ids[i]);
        CHECK(gl[i] == labels[i], "labels[%d] = %d, expected %d", i, (int)gl[i], (int)labels[i]);
        CHECK(gm[i] == mask[i], "attention_mask[%d] = %g", i, (double)gm[i]);
        CHECK(gb[i] == bytes[i], "token_bytes[%d] = %d", i, (int)gb[i]);
    }
    free(gi);
    free(gl);
    free(gb);
    free(gm);
    ds_dataset_destroy(ds);
    /* seq_len 2: every row is one token and the next, no padding (5 rows) */
    REQUIRE_OK(ds_lm_pack(d, t, 2, &ds, &ps));
    CHECK_EQ_I(ds->n, 5);
    CHECK_EQ_I(ps.padding, 0);
    ds_dataset_destroy(ds);
    ds = NULL;
    ds_clear_error();
    CHECK(ds_lm_pack(d, t, 1, &ds, NULL) == DS_ERR_INVALID_ARG, "seq_len 1 accepted");
    CHECK(strstr(ds_last_error(), "seq_len must be >= 2") != NULL, "message '%s'",
          ds_last_error());
    ds_lm_tokenizer_destroy(t);
    ds_lm_docs_destroy(d);
}

/* For many documents and lengths: the targets of all rows, read in row
 * order (positions 1..T-1 whose label is not ignored), are exactly the
 * stream after its first token, and their bytes add up to the documents'
 * bytes. Padding only at the end of the last row. */
static void check_targets(const ds_lm_docs *d, const ds_lm_tokenizer *t, int T) {
    ds_dataset *ds = NULL;
    ds_lm_pack_stats ps;
    if (!TEST_OK(ds_lm_pack(d, t, T, &ds, &ps))) return;
    ds_lm_tokens s = {0};
    int32_t eot = ds_lm_tokenizer_eot_id(t);
    for (size_t i = 0; i < d->n; i++) {
        CHECK_OK(ds_lm_tokens_push(&s, eot, 0));
        CHECK_OK(ds_lm_tokenizer_encode(t, d->texts[i], d->lens[i], &s));
    }
    CHECK_OK(ds_lm_tokens_push(&s, eot, 0));
    int32_t *ids = read_col(ds, "input_ids", DS_I32), *lab = read_col(ds, "labels", DS_I32),
            *by = read_col(ds, "token_bytes", DS_I32);
    float *m = read_col(ds, "attention_mask", DS_F32);
    if (!ids || !lab || !by || !m) TEST_DIE("reading the packed columns");
    size_t k = 1, bytes = 0, bad = 0, pads = 0;
    for (size_t r = 0; r < ds->n; r++) {
        for (int j = 0; j < T; j++) {
            size_t at = r * (size_t)T + (size_t)j;
            bool pad = lab[at] == DS_IGNORE_INDEX;
            if (pad) {
                pads++;
                bad += r + 1 != ds->n || m[at] != 0.0f || by[at] != 0;
                continue;
            }
            bad += m[at] != 1.0f || lab[at] != ids[at];
            if (j == 0) {
                /* the first token of a row is the last target of the one before */
                bad += r > 0 ? ids[at] != s.ids[k - 1] : ids[at] != s.ids[0];
                continue;
            }
            bad += k >= s.n || ids[at] != s.ids[k];
            bytes += (size_t)by[at];
            k++;
        }
    }
    CHECK(bad == 0, "%s T=%d: %zu positions break the layout", ds_lm_tokenizer_kind(t), T, bad);
    CHECK(k == s.n, "%s T=%d: %zu of %zu stream tokens were targets", ds_lm_tokenizer_kind(t), T,
          k - 1, s.n - 1);
    CHECK_EQ_I(bytes, ds_lm_docs_bytes(d));
    CHECK_EQ_I(ps.bytes, ds_lm_docs_bytes(d));
    CHECK_EQ_I(ps.targets, s.n - 1);
    CHECK_EQ_I(ps.padding, pads);
    CHECK(pads < (size_t)T - 1, "T=%d: %zu padded positions (a whole row?)", T, pads);
    free(ids);
    free(lab);
    free(by);
    free(m);
    ds_lm_tokens_free(&s);
    ds_dataset_destroy(ds);
}

static void test_pack_property(void) {
    /* documents of 1..40 characters mixing 1-, 2- and 3-byte UTF-8 */
    static const char *const pieces[] = {"a", "Z", " ", "\xC3\xA9", "\xE4\xB8\x96", ".", "\n"};
    char *text = malloc(64 * 1024);
    size_t n = 0;
    uint64_t rng = 12345;
    for (int doc = 0; doc < 60; doc++) {
        int len = 1 + (int)(ds_splitmix64_next(&rng) % 40);
        for (int i = 0; i < len; i++) {
            const char *p = pieces[ds_splitmix64_next(&rng) % 6]; /* no newline inside */
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        memcpy(text + n, "\n\n", 2);
        n += 2;
    }
    text[n] = '\0';
    ds_lm_docs *d = read_docs("mixed.txt", text);
    free(text);
    ds_lm_tokenizer *bt, *ct;
    REQUIRE_OK(ds_lm_tokenizer_byte(&bt));
    REQUIRE_OK(ds_lm_tokenizer_char_build(d, 1, &ct));
    const int lens[] = {2, 3, 7, 16, 64, 4096};
    for (int i = 0; i < 6; i++) {
        check_targets(d, bt, lens[i]);
        check_targets(d, ct, lens[i]);
    }
    ds_lm_tokenizer_destroy(bt);
    ds_lm_tokenizer_destroy(ct);
    ds_lm_docs_destroy(d);
}

/* A document the char tokenizer cannot encode names its file and line; no
 * documents give no rows. */
static void test_pack_edges(void) {
    ds_lm_docs *d = read_docs("edge.txt", "one\n\ntwo\n");
    ds_lm_tokenizer *ct;
    REQUIRE_OK(ds_lm_tokenizer_char_build(d, 1, &ct));
    d->texts[1][1] = (char)0xFF; /* "t\xFFo" on line 3 */
    ds_dataset *ds = NULL;
    ds_clear_error();
    CHECK(ds_lm_pack(d, ct, 8, &ds, NULL) == DS_ERR_DATA, "invalid UTF-8 packed");
    CHECK(strstr(ds_last_error(), "edge.txt:3: invalid UTF-8 at byte 1") != NULL, "message '%s'",
          ds_last_error());
    CHECK(ds == NULL, "a dataset came back with an error");
    ds_lm_docs *tr = NULL, *dv = NULL;
    REQUIRE_OK(ds_lm_docs_split(d, 0.0, 1, &tr, &dv));
    ds_lm_pack_stats ps;
    REQUIRE_OK(ds_lm_pack(dv, ct, 8, &ds, &ps));
    CHECK_EQ_I(ds->n, 0);
    CHECK_EQ_I(ps.tokens, 0);
    CHECK_EQ_I(ps.targets, 0);
    ds_dataset_destroy(ds);
    ds_lm_docs_destroy(tr);
    ds_lm_docs_destroy(dv);
    ds_lm_tokenizer_destroy(ct);
    ds_lm_docs_destroy(d);
}

/* ---- printing generated bytes ---- */

static void check_sanitize(const char *in, size_t n, const char *want) {
    char out[64];
    size_t got = ds_lm_utf8_sanitize(in, n, out);
    CHECK(got == strlen(want) && memcmp(out, want, got) == 0, "sanitize gave %zu bytes '%.*s'",
          got, (int)got, out);
}

static void test_sanitize(void) {
    check_sanitize("plain", 5, "plain");
    check_sanitize("\xE4\xB8\x96!", 4, "\xE4\xB8\x96!");
    check_sanitize("a\xFF", 2, "a\xEF\xBF\xBD");
    /* a sequence cut short: each byte of it is replaced */
    check_sanitize("\xE4\xB8", 2, "\xEF\xBF\xBD\xEF\xBF\xBD");
    /* a surrogate (ED A0 80) is not UTF-8 */
    check_sanitize("\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_lm_text.XXXXXX");
    if (!mkdtemp(g_dir)) TEST_DIE("mkdtemp");
    test_formats();
    test_errors();
    test_split();
    test_byte_tokenizer();
    test_char_tokenizer();
    test_tokenizer_files();
    test_pack_small();
    test_pack_property();
    test_pack_edges();
    test_sanitize();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return test_finish("test_lm_text");
}
