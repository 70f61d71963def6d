/* WordPiece parity with Hugging Face's BertTokenizer: every line of
 * tests/data/wordpiece/fixture.jsonl (written by
 * tools/make_tokenizer_fixture.py with transformers) must encode to exactly
 * the ids transformers gave, under every configuration of the fixture and
 * with truncation. Lines taken from the NLPCC file are referenced by line
 * number and read from ../shared/data at test time. Exact equality: token
 * ids have no tolerance. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/text.h"
#include "text/tokenizer.h"
#include "tests/unit/test_util.h"

#define MAX_CONFIGS 8
#define MAX_IDS 512

typedef struct config {
    const char *name;
    ds_tokenizer *tok;
} config;

/* After a failed CHECK, on stderr beside its message. */
static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

/* Compare the C encoding of text with the expected json array. */
static void compare(const ds_tokenizer *tok, const char *cfg, const char *text, int max_len,
                    const json_t *want, int fixture_line) {
    int32_t got[MAX_IDS], exp[MAX_IDS];
    int n = 0;
    size_t ne = json_array_size(want);
    ds_status st = ds_tokenizer_encode(tok, text, max_len, got, &n);
    CHECK(st == DS_OK, "fixture line %d (%s): %s", fixture_line, cfg, ds_last_error());
    if (st != DS_OK || ne > MAX_IDS) return;
    for (size_t i = 0; i < ne; i++) exp[i] = (int32_t)json_integer_value(json_array_get(want, i));
    bool same = (size_t)n == ne && memcmp(got, exp, ne * sizeof *exp) == 0;
    CHECK(same, "fixture line %d (%s, max_len %d): ids differ for text '%.80s'", fixture_line, cfg,
          max_len, text);
    if (!same && test_fails() <= TEST_MAX_REPORTS) { /* its message was printed */
        print_ids("transformers", exp, (int)ne);
        print_ids("C           ", got, n);
    }
}

int main(void) {
    const char *dir = DS_TEST_DATA_DIR "/wordpiece";
    char path[1024];
    snprintf(path, sizeof path, "%s/fixture.jsonl", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL: cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    json_error_t err;
    /* header */
    if (getline(&line, &cap, f) < 0) {
        printf("FAIL: %s is empty\n", path);
        return 1;
    }
    json_t *header = json_loads(line, 0, &err);
    const char *format = header ? json_string_value(json_object_get(header, "format")) : NULL;
    if (!format || strcmp(format, "ds-wordpiece-fixture") != 0 ||
        json_integer_value(json_object_get(header, "version")) != 1) {
        printf("FAIL: %s: not a version 1 ds-wordpiece-fixture\n", path);
        return 1;
    }
    printf("fixture from transformers %s, tokenizers %s\n",
           json_string_value(json_object_get(header, "transformers")),
           json_string_value(json_object_get(header, "tokenizers")));

    config cfg[MAX_CONFIGS];
    int n_cfg = 0;
    const char *key;
    json_t *c;
    json_object_foreach(json_object_get(header, "configs"), key, c) {
        if (n_cfg == MAX_CONFIGS) break;
        ds_wordpiece_opts o = ds_wordpiece_opts_default();
        o.do_lower_case = json_is_true(json_object_get(c, "do_lower_case"));
        json_t *sa = json_object_get(c, "strip_accents");
        o.strip_accents = json_is_null(sa) ? -1 : json_is_true(sa);
        o.tokenize_chinese_chars = json_is_true(json_object_get(c, "tokenize_chinese_chars"));
        char vocab[1024];
        snprintf(vocab, sizeof vocab, "%s/%s", dir, json_string_value(json_object_get(c, "vocab")));
        cfg[n_cfg].name = key;
        if (ds_wordpiece_load(vocab, &o, &cfg[n_cfg].tok) != DS_OK) {
            printf("FAIL: loading %s: %s\n", vocab, ds_last_error());
            return 1;
        }
        n_cfg++;
    }
    const char *trunc_cfg =
        json_string_value(json_object_get(json_object_get(header, "trunc"), "config"));
    int trunc_len =
        (int)json_integer_value(json_object_get(json_object_get(header, "trunc"), "max_length"));
    const ds_tokenizer *trunc_tok = NULL;
    for (int i = 0; i < n_cfg; i++)
        if (trunc_cfg && strcmp(cfg[i].name, trunc_cfg) == 0) trunc_tok = cfg[i].tok;
    if (n_cfg == 0 || !trunc_tok || trunc_len < 2) {
        printf("FAIL: %s: header without configs or truncation\n", path);
        return 1;
    }

    /* NLPCC texts by line, read in place */
    char nlpcc[1024];
    snprintf(nlpcc, sizeof nlpcc, "%s/%s", DS_SHARED_DATA_DIR,
             json_string_value(json_object_get(header, "nlpcc_file")));
    ds_text_set *set = NULL;
    FILE *probe = fopen(nlpcc, "rb");
    if (probe) {
        fclose(probe);
        if (ds_text_read(nlpcc, NULL, &set) != DS_OK) {
            printf("FAIL: reading %s: %s\n", nlpcc, ds_last_error());
            return 1;
        }
    }

    int fixture_line = 1, own = 0, from_nlpcc = 0, skipped = 0;
    while (getline(&line, &cap, f) >= 0) {
        fixture_line++;
        json_t *e = json_loads(line, 0, &err);
        if (!e) {
            printf("FAIL: %s:%d: %s\n", path, fixture_line, err.text);
            return 1;
        }
        const char *text = json_string_value(json_object_get(e, "text"));
        json_t *ln = json_object_get(e, "nlpcc_line");
        if (ln) {
            text = NULL;
            for (size_t i = 0; set && i < set->n; i++)
                if (set->lines[i] == json_integer_value(ln)) text = set->texts[i];
            if (!set) {
                skipped++;
                json_decref(e);
                continue;
            }
            CHECK(text != NULL, "NLPCC line %d not found", (int)json_integer_value(ln));
            from_nlpcc++;
        } else {
            own++;
        }
        if (text) {
            for (int i = 0; i < n_cfg; i++)
                compare(cfg[i].tok, cfg[i].name, text, MAX_IDS,
                        json_object_get(json_object_get(e, "ids"), cfg[i].name), fixture_line);
            compare(trunc_tok, trunc_cfg, text, trunc_len, json_object_get(e, "trunc"),
                    fixture_line);
        }
        json_decref(e);
    }
    printf("compared %d written lines and %d NLPCC lines under %d configs (+ truncation to %d)\n",
           own, from_nlpcc, n_cfg, trunc_len);
    if (skipped) printf("SKIP: %d NLPCC lines: %s is absent\n", skipped, nlpcc);
    CHECK(own >= 50, "only %d written lines compared", own);

    /* save and reload keeps every id */
    char saved[1024];
    snprintf(saved, sizeof saved, "%s/test_wordpiece_vocab.txt", DS_BINARY_DIR);
    CHECK(ds_tokenizer_save_vocab(cfg[0].tok, saved) == DS_OK, "%s", ds_last_error());
    ds_tokenizer *back = NULL;
    CHECK(ds_wordpiece_load(saved, NULL, &back) == DS_OK, "%s", ds_last_error());
    if (back) {
        CHECK(ds_tokenizer_vocab_size(back) == ds_tokenizer_vocab_size(cfg[0].tok), "size");
        for (int i = 0; i < ds_tokenizer_vocab_size(back); i++)
            if (strcmp(ds_tokenizer_id_to_token(back, i), ds_tokenizer_id_to_token(cfg[0].tok, i))) {
                CHECK(0, "token %d differs after save/load", i);
                break;
            }
        CHECK(strcmp(ds_tokenizer_kind(back), "wordpiece") == 0, "kind %s", ds_tokenizer_kind(back));
        CHECK(ds_tokenizer_pad_id(back) == 0 && ds_tokenizer_unk_id(back) == 100 &&
                  ds_tokenizer_cls_id(back) == 101 && ds_tokenizer_sep_id(back) == 102,
              "specials %d %d %d %d", ds_tokenizer_pad_id(back), ds_tokenizer_unk_id(back),
              ds_tokenizer_cls_id(back), ds_tokenizer_sep_id(back));
        CHECK(ds_tokenizer_token_to_id(back, "##able") == 3085, "##able -> %d",
              ds_tokenizer_token_to_id(back, "##able"));
        ds_tokenizer_destroy(back);
    }
    remove(saved);

    /* a Hugging Face model directory: vocab.txt + tokenizer_config.json */
    char dir_path[1024], vocab_path[1100], config_path[1100];
    snprintf(dir_path, sizeof dir_path, "%s/test_wordpiece_dir", DS_BINARY_DIR);
    mkdir(dir_path, 0755);
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", dir_path);
    snprintf(config_path, sizeof config_path, "%s/tokenizer_config.json", dir_path);
    CHECK(ds_tokenizer_save_vocab(cfg[0].tok, vocab_path) == DS_OK, "%s", ds_last_error());
    struct {
        const char *config; /* NULL: no tokenizer_config.json */
        ds_status st;
        int32_t first; /* id of "Hello" (7592 lower-cased, 100 = [UNK] cased) */
        const char *msg;
    } dirs[] = {
        {NULL, DS_OK, 7592, ""},
        {"{\"do_lower_case\": false, \"strip_accents\": null}", DS_OK, 100, ""},
        {"{\"do_lower_case\": true, \"tokenizer_class\": \"BertTokenizer\"}", DS_OK, 7592, ""},
        {"{\"do_lower_case\": \"yes\"}", DS_ERR_DATA, 0, "do_lower_case: expected true or false"},
        {"{\"do_lower_case\": true,,}", DS_ERR_DATA, 0, "tokenizer_config.json:1: bad JSON"},
    };
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        remove(config_path);
        if (dirs[i].config) {
            FILE *cf = fopen(config_path, "wb");
            fputs(dirs[i].config, cf);
            fclose(cf);
        }
        ds_tokenizer *dt = NULL;
        ds_status st = ds_wordpiece_load_dir(dir_path, &dt);
        CHECK(st == dirs[i].st && strstr(ds_last_error(), dirs[i].msg),
              "load_dir with config %s: %s (%s)", dirs[i].config ? dirs[i].config : "(none)",
              ds_status_to_string(st), ds_last_error());
        if (dt) {
            int32_t hid[4];
            int hn = 0;
            CHECK(ds_tokenizer_encode(dt, "Hello", 4, hid, &hn) == DS_OK && hn == 3 &&
                      hid[1] == dirs[i].first,
                  "load_dir with config %s: Hello -> %d", dirs[i].config ? dirs[i].config : "(none)",
                  (int)hid[1]);
            ds_tokenizer_destroy(dt);
        }
        ds_clear_error();
    }
    remove(config_path);
    remove(vocab_path);
    rmdir(dir_path);

    /* argument errors */
    int32_t ids[4];
    int n;
    CHECK(ds_tokenizer_encode(cfg[0].tok, "x", 1, ids, &n) == DS_ERR_INVALID_ARG, "max_len 1");
    CHECK(ds_tokenizer_encode(cfg[0].tok, "bad \xff", 4, ids, &n) == DS_ERR_DATA &&
              strstr(ds_last_error(), "invalid UTF-8 at byte 4"),
          "invalid UTF-8: %s", ds_last_error());
    CHECK(ds_tokenizer_encode(cfg[0].tok, "hello world again", 2, ids, &n) == DS_OK && n == 2 &&
              ids[0] == 101 && ids[1] == 102,
          "max_len 2 keeps only [CLS] [SEP]");
    ds_tokenizer *none = NULL;
    CHECK(ds_wordpiece_load(DS_TEST_DATA_DIR "/wordpiece/no_such_vocab.txt", NULL, &none) ==
                  DS_ERR_IO && !none,
          "missing vocab");
    snprintf(saved, sizeof saved, "%s/test_wordpiece_nospecial.txt", DS_BINARY_DIR);
    FILE *w = fopen(saved, "wb");
    fputs("[PAD]\n[UNK]\n[CLS]\nhello\n", w);
    fclose(w);
    CHECK(ds_wordpiece_load(saved, NULL, &none) == DS_ERR_DATA && !none &&
              strstr(ds_last_error(), "no [SEP]"),
          "vocab without [SEP]: %s", ds_last_error());
    remove(saved);

    for (int i = 0; i < n_cfg; i++) ds_tokenizer_destroy(cfg[i].tok);
    ds_text_set_destroy(set);
    json_decref(header);
    free(line);
    fclose(f);
    return test_finish("test_tokenizer_wordpiece");
}
