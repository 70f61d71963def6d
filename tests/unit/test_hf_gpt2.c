/* GPT-2 and Hugging Face files: config.json in and out (hf/hf_config.c)
 * and checkpoints onto a GPT-2 engine through ds_hf_load_weights and
 * ds_set_param_cb (hf/hf_weights.c).
 *
 * config.json:
 *   - the file transformers' save_pretrained wrote for the reference model
 *     (tests/data/gpt2_ref_tiny_hf) reads into the dump's config;
 *   - write then read gives the same descriptor back (floats in shortest form:
 *     "0.1", not "0.100000001"), written atomically (no .tmp left), with the
 *     keys transformers needs; gelu_pytorch_tanh is accepted;
 *   - bad files: each error names the file and the key (missing, wrong type
 *     or range, unsupported feature), and a bad descriptor is not written.
 * weights (values compared bit for bit with the dump's initial parameters
 * rounded to fp16, as save_pretrained ran model.half()):
 *   - the transformers folder: 28 parameters, nothing missing or unexpected;
 *   - the original gpt2 checkpoints' layout (GPT2Model names without
 *     "transformer.", the attn.bias / attn.masked_bias buffers, and
 *     lm_head.weight beside wte): prefix added, 3 buffers skipped, the alias
 *     ignored (counted), everything loaded;
 *   - lm_head.weight alone (no wte): it loads the tied wte, which then reads
 *     back under both names;
 *   - a mis-shaped lm_head.weight: DS_ERR_DATA naming it, nothing installed;
 *   - half a model: the rest reported as newly initialised. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/io/safetensors.h"
#include "hf/hf.h"
#include "models/models.h"
#include "models/modules.h"
#include "tests/unit/ref_dump.h"
#include "tests/unit/test_util.h"

#define HF_DIR DS_TEST_DATA_DIR "/gpt2_ref_tiny_hf"
/* The largest tensor of the reference model: mlp.c_fc.weight [32, 128]. */
#define MAX_NUMEL (32 * 128)

static char g_dir[] = "/tmp/ds_test_hf_gpt2_XXXXXX";

static const char *tmp_path(const char *name) {
    static char p[4][600];
    static int r;
    r = (r + 1) % 4;
    snprintf(p[r], sizeof p[r], "%s/%s", g_dir, name);
    return p[r];
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* ---- config.json ---- */

static void test_config_transformers(void) {
    ds_gpt2_desc d;
    CHECK_OK(ds_hf_gpt2_config_read(HF_DIR "/config.json", &d));
    CHECK(d.vocab_size == 97 && d.n_embd == 32 && d.n_layer == 2 && d.n_head == 4 &&
              d.n_positions == 16 && d.n_inner == 0,
          "shape read as vocab %d n_embd %d n_layer %d n_head %d n_positions %d n_inner %d",
          d.vocab_size, d.n_embd, d.n_layer, d.n_head, d.n_positions, d.n_inner);
    CHECK(d.resid_pdrop == 0.0f && d.embd_pdrop == 0.0f && d.attn_pdrop == 0.0f && d.dropout_set,
          "dropouts %g %g %g (set %d): the file's zeros are meant", (double)d.resid_pdrop,
          (double)d.embd_pdrop, (double)d.attn_pdrop, d.dropout_set);
    CHECK(d.layer_norm_epsilon == 1e-5f && d.initializer_range == 0.02f && d.max_seq_len == 16,
          "eps %g init %g max_seq_len %d", (double)d.layer_norm_epsilon,
          (double)d.initializer_range, d.max_seq_len);
}

static void test_config_roundtrip(void) {
    ds_gpt2_desc w = {.vocab_size = 1000, .n_positions = 64, .n_embd = 48, .n_layer = 3,
                      .n_head = 6, .n_inner = 100, .resid_pdrop = 0.1f, .embd_pdrop = 0.0f,
                      .attn_pdrop = 0.25f, .layer_norm_epsilon = 1e-6f,
                      .initializer_range = 0.02f, .dropout_set = true};
    const char *path = tmp_path("config.json");
    CHECK_OK(ds_hf_gpt2_config_write(path, &w));
    ds_gpt2_desc r;
    CHECK_OK(ds_hf_gpt2_config_read(path, &r));
    CHECK(r.vocab_size == w.vocab_size && r.n_positions == w.n_positions && r.n_embd == w.n_embd &&
              r.n_layer == w.n_layer && r.n_head == w.n_head && r.n_inner == w.n_inner,
          "shape changed in the round trip");
    CHECK(r.resid_pdrop == w.resid_pdrop && r.embd_pdrop == w.embd_pdrop &&
              r.attn_pdrop == w.attn_pdrop && r.layer_norm_epsilon == w.layer_norm_epsilon &&
              r.initializer_range == w.initializer_range,
          "floats changed in the round trip: %.9g %.9g %.9g %.9g %.9g", (double)r.resid_pdrop,
          (double)r.embd_pdrop, (double)r.attn_pdrop, (double)r.layer_norm_epsilon,
          (double)r.initializer_range);
    char *text = read_text(path);
    CHECK(text && strstr(text, "\"resid_pdrop\": 0.1,") && strstr(text, "\"attn_pdrop\": 0.25,") &&
              strstr(text, "\"layer_norm_epsilon\": 1e-6,") &&
              strstr(text, "\"model_type\": \"gpt2\"") && strstr(text, "\"GPT2LMHeadModel\"") &&
              strstr(text, "\"activation_function\": \"gelu_new\"") &&
              strstr(text, "\"tie_word_embeddings\": true") && strstr(text, "\"n_inner\": 100,"),
          "config.json as written:\n%s", text ? text : "(unreadable)");
    free(text);
    CHECK(access(tmp_path("config.json.tmp"), F_OK) != 0, "config.json.tmp left behind");
    /* defaults resolved before writing: n_inner 4 n_embd is GPT2Config's null,
     * unset dropouts are GPT-2's 0.1 */
    ds_gpt2_desc small = {.vocab_size = 50, .n_positions = 8, .n_embd = 16, .n_layer = 1,
                          .n_head = 2};
    CHECK_OK(ds_hf_gpt2_config_write(path, &small));
    text = read_text(path);
    CHECK(text && strstr(text, "\"n_inner\": null,") && strstr(text, "\"embd_pdrop\": 0.1,") &&
              strstr(text, "\"layer_norm_epsilon\": 1e-5,"),
          "defaults not written as HF spells them:\n%s", text ? text : "(unreadable)");
    free(text);
    CHECK_OK(ds_hf_gpt2_config_read(path, &r));
    CHECK(r.n_inner == 0 && r.embd_pdrop == 0.1f && r.attn_pdrop == 0.1f,
          "defaults read back as n_inner %d, pdrop %g %g", r.n_inner, (double)r.embd_pdrop,
          (double)r.attn_pdrop);
    CHECK(!r.token_ids_set, "null bos/eos read as ids");
    /* the tokenizer's special ids (0 is a valid id) round-trip */
    small.token_ids_set = true;
    small.bos_token_id = 0;
    small.eos_token_id = 49;
    CHECK_OK(ds_hf_gpt2_config_write(path, &small));
    CHECK_OK(ds_hf_gpt2_config_read(path, &r));
    CHECK(r.token_ids_set && r.bos_token_id == 0 && r.eos_token_id == 49, "ids %d %d",
          r.bos_token_id, r.eos_token_id);
    small.eos_token_id = 50; /* outside the vocabulary */
    CHECK(ds_hf_gpt2_config_write(path, &small) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "eos_token_id 50"),
          "an id outside the vocabulary: %s", ds_last_error());
    small.token_ids_set = false;
    /* an invalid descriptor is not written (and names the field) */
    ds_gpt2_desc bad = small;
    bad.n_head = 3;
    unlink(path);
    ds_clear_error();
    CHECK(ds_hf_gpt2_config_write(path, &bad) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "n_head") && access(path, F_OK) != 0,
          "n_embd 16 with 3 heads written or not named: \"%s\"", ds_last_error());
    ds_clear_error();
    CHECK(ds_hf_gpt2_config_write(tmp_path("no/such/dir/config.json"), &small) == DS_ERR_IO,
          "writing into a missing folder: \"%s\"", ds_last_error());
}

typedef struct bad_case {
    const char *json;
    ds_status want;
    const char *needle; /* the message names this */
} bad_case;

#define SHAPE "\"vocab_size\": 50, \"n_embd\": 16, \"n_layer\": 1, \"n_head\": 2, \"n_positions\": 8"

static void test_config_errors(void) {
    const bad_case cases[] = {
        {"{\"n_embd\": 16, \"n_layer\": 1, \"n_head\": 2, \"n_positions\": 8}", DS_ERR_CONFIG,
         "vocab_size: required"},
        {"{" SHAPE ", \"n_embd\": 17}", DS_ERR_CONFIG, "duplicate"},
        {"{\"vocab_size\": 50, \"n_embd\": 18, \"n_layer\": 1, \"n_head\": 4, \"n_positions\": 8}",
         DS_ERR_CONFIG, "n_embd: 18 is not a multiple of n_head 4"},
        {"{" SHAPE ", \"activation_function\": \"relu\"}", DS_ERR_UNSUPPORTED,
         "activation_function: \"relu\""},
        {"{" SHAPE ", \"activation_function\": \"gelu\"}", DS_ERR_UNSUPPORTED,
         "activation_function: \"gelu\""},
        {"{" SHAPE ", \"model_type\": \"bert\"}", DS_ERR_UNSUPPORTED, "model_type"},
        {"{" SHAPE ", \"tie_word_embeddings\": false}", DS_ERR_UNSUPPORTED, "tie_word_embeddings"},
        {"{" SHAPE ", \"scale_attn_by_inverse_layer_idx\": true}", DS_ERR_UNSUPPORTED,
         "scale_attn_by_inverse_layer_idx"},
        {"{" SHAPE ", \"scale_attn_weights\": false}", DS_ERR_UNSUPPORTED, "scale_attn_weights"},
        {"{" SHAPE ", \"add_cross_attention\": true}", DS_ERR_UNSUPPORTED, "add_cross_attention"},
        {"{" SHAPE ", \"attn_pdrop\": 1.0}", DS_ERR_CONFIG, "attn_pdrop: must be in [0, 1)"},
        {"{" SHAPE ", \"layer_norm_epsilon\": 0}", DS_ERR_CONFIG, "layer_norm_epsilon"},
        {"{" SHAPE ", \"n_inner\": -4}", DS_ERR_CONFIG, "n_inner: must be 1..1e9, got -4"},
        {"{" SHAPE ", \"n_inner\": \"4\"}", DS_ERR_CONFIG, "n_inner: must be an integer"},
        {"{" SHAPE ", \"tie_word_embeddings\": 1}", DS_ERR_CONFIG, "tie_word_embeddings: must be"},
        {"{\"vocab_size\": 1, \"n_embd\": 16, \"n_layer\": 1, \"n_head\": 2, \"n_positions\": 8}",
         DS_ERR_CONFIG, "vocab_size: must be >= 2"},
        {"[1, 2]", DS_ERR_CONFIG, "not a JSON object"},
        {"{" SHAPE ",}", DS_ERR_CONFIG, "config.json:1:"},
    };
    const char *path = tmp_path("config.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(path, cases[i].json);
        ds_gpt2_desc d;
        ds_clear_error();
        ds_status st = ds_hf_gpt2_config_read(path, &d);
        CHECK(st == cases[i].want && strstr(ds_last_error(), cases[i].needle) &&
                  strstr(ds_last_error(), path),
              "%s: status %d (want %d), message \"%s\" (want \"%s\" and the path)",
              cases[i].json, (int)st, (int)cases[i].want, ds_last_error(), cases[i].needle);
    }
    /* the other name of the tanh GELU, and a minimal file: GPT2Config's defaults */
    write_text(path, "{" SHAPE ", \"activation_function\": \"gelu_pytorch_tanh\"}");
    ds_gpt2_desc d;
    CHECK_OK(ds_hf_gpt2_config_read(path, &d));
    CHECK(d.resid_pdrop == 0.1f && d.embd_pdrop == 0.1f && d.attn_pdrop == 0.1f &&
              d.layer_norm_epsilon == 1e-5f && d.initializer_range == 0.02f && d.n_inner == 0,
          "GPT2Config's defaults not applied");
    /* Found by tests/fuzz/fuzz_hf_config (issue 15): a width the reader
     * accepts (up to 1e9) whose default n_inner, 4 * n_embd, overflowed an
     * int in ds_gpt2_resolve, and in the writer's test for the default */
    write_text(path, "{\"vocab_size\": 50, \"n_embd\": 1000000000, \"n_layer\": 1, "
                     "\"n_head\": 4, \"n_positions\": 8}");
    CHECK_OK(ds_hf_gpt2_config_read(path, &d));
    ds_gpt2_desc r, back;
    ds_clear_error();
    CHECK(ds_gpt2_resolve(&d, &r) == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "give n_inner"),
          "n_embd 1e9 without n_inner: \"%s\"", ds_last_error());
    d.n_inner = 8;
    CHECK_OK(ds_hf_gpt2_config_write(tmp_path("wide.json"), &d));
    CHECK_OK(ds_hf_gpt2_config_read(tmp_path("wide.json"), &back));
    CHECK(back.n_embd == 1000000000 && back.n_inner == 8, "wide config read back: %d, %d",
          back.n_embd, back.n_inner);
    ds_clear_error();
    CHECK(ds_hf_gpt2_config_read(tmp_path("missing.json"), &d) == DS_ERR_IO &&
              strstr(ds_last_error(), "missing.json"),
          "a missing file: \"%s\"", ds_last_error());
}

/* ---- weights ---- */

typedef struct fixture {
    ref_dump ref;
    engine_t *e;
    ds_gpt2_desc d;
} fixture;

/* How a checkpoint variant is written from the transformers file. */
enum {
    V_ORIGINAL = 1, /* GPT2Model names, buffers, lm_head.weight beside wte */
    V_ALIAS_ONLY,   /* prefixed names, wte only as lm_head.weight */
    V_BAD_ALIAS,    /* as V_ALIAS_ONLY with lm_head.weight [V, E - 1] */
    V_HALF,         /* embeddings and layer 0 only */
};

/* Writes `path` from the transformers checkpoint's tensors (as F32: the
 * fp16 values exactly) renamed / extended as `variant` says. */
static void write_variant(const char *path, int variant) {
    ds_st_file *src;
    REQUIRE_OK(ds_st_open(HF_DIR "/model.safetensors", &src));
    int n = ds_st_count(src);
    ds_st_decl decl[48];
    char names[48][160];
    int from[48], k = 0; /* source tensor of each, -1: a generated buffer */
    for (int i = 0; i < n; i++) {
        const ds_st_tensor *t = ds_st_tensor_at(src, i);
        const char *name = t->name;
        if (variant == V_HALF && (strstr(name, ".h.1.") || strstr(name, "ln_f"))) continue;
        if (variant == V_ORIGINAL && !strncmp(name, "transformer.", 12)) name += 12;
        bool wte = !strcmp(t->name, "transformer.wte.weight");
        if (wte && (variant == V_ALIAS_ONLY || variant == V_BAD_ALIAS)) name = "lm_head.weight";
        snprintf(names[k], sizeof names[k], "%s", name);
        decl[k] = (ds_st_decl){.name = names[k], .dtype = DS_ST_F32, .ndim = t->ndim};
        memcpy(decl[k].shape, t->shape, sizeof t->shape);
        if (wte && variant == V_BAD_ALIAS) decl[k].shape[1] -= 1;
        from[k++] = i;
        if (wte && variant == V_ORIGINAL) { /* lm_head.weight too, as GPT2LMHeadModel.bin had */
            snprintf(names[k], sizeof names[k], "lm_head.weight");
            decl[k] = decl[k - 1];
            decl[k].name = names[k];
            from[k++] = i;
        }
    }
    if (variant == V_ORIGINAL) { /* the non-persistent causal mask buffers */
        for (int l = 0; l < 2; l++) {
            snprintf(names[k], sizeof names[k], "h.%d.attn.bias", l);
            decl[k] = (ds_st_decl){.name = names[k], .dtype = DS_ST_F32, .ndim = 4,
                                   .shape = {1, 1, 16, 16}};
            from[k++] = -1;
        }
        snprintf(names[k], sizeof names[k], "h.0.attn.masked_bias");
        decl[k] = (ds_st_decl){.name = names[k], .dtype = DS_ST_F32, .ndim = 0};
        from[k++] = -1;
    }
    ds_st_writer *w;
    REQUIRE_OK(ds_st_writer_open(path, decl, k, NULL, 0, &w));
    float *buf = malloc(sizeof(float) * MAX_NUMEL);
    for (int i = 0; i < k; i++) {
        uint64_t numel = ds_st_decl_bytes(&decl[i]) / 4;
        if (from[i] < 0) {
            for (uint64_t j = 0; j < numel; j++) /* tril(ones), or the -1e4 scalar */
                buf[j] = decl[i].ndim == 0 ? -1e4f : (j % 16 <= j / 16 ? 1.0f : 0.0f);
        } else {
            REQUIRE_OK(ds_st_read_f32(src, ds_st_tensor_at(src, from[i]), 0, numel, buf));
        }
        REQUIRE_OK(ds_st_writer_write_f32(w, buf, numel));
    }
    REQUIRE_OK(ds_st_writer_finish(w));
    free(buf);
    ds_st_close(src);
}

/* Zero every parameter, so a load that skips one is seen. */
static void zero_params(fixture *fx) {
    const ds_model *m = ds_get_model(fx->e);
    float *z = calloc(MAX_NUMEL, sizeof(float));
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            const ds_param_desc *pd = &m->modules[i]->params[p];
            CHECK_OK(ds_set_param(fx->e, pd->name, z, (size_t)ds_param_numel(pd)));
        }
    free(z);
}

/* Every parameter (or only those whose name contains `only`) equals the
 * dump's initial value rounded to fp16; returns the number that do not. */
static int expect_loaded(fixture *fx, const char *only, const char *what) {
    int bad = 0;
    float *buf = malloc(sizeof(float) * MAX_NUMEL);
    for (int i = 0; i < ref_dump_n_params(&fx->ref); i++) {
        const char *name = ref_dump_param_name(&fx->ref, i);
        if (only && !strstr(name, only)) continue;
        size_t numel;
        const float *want = ref_dump_param_f32(&fx->ref, "param", name, &numel, NULL, NULL);
        CHECK_OK(ds_get_param(fx->e, name, buf, numel));
        for (size_t j = 0; j < numel; j++)
            if (buf[j] != ds_f16_to_f32(ds_f32_to_f16(want[j]))) {
                CHECK(0, "%s: %s[%zu] = %.8g, dump %.8g as fp16 %.8g", what, name, j, buf[j],
                      want[j], ds_f16_to_f32(ds_f32_to_f16(want[j])));
                bad++;
                break;
            }
    }
    free(buf);
    return bad;
}

static void test_weights(fixture *fx) {
    ds_hf_load_report rep;
    /* the folder transformers wrote */
    zero_params(fx);
    CHECK_OK(ds_hf_load_weights(ds_get_model(fx->e), HF_DIR, ds_set_param_cb, fx->e, &rep));
    CHECK(rep.n_loaded == 28 && rep.n_missing == 0 && rep.n_unexpected == 0 &&
              rep.n_ignored_buffers == 0 && rep.n_ignored_aliases == 0 && !rep.prefix_added,
          "transformers folder: loaded %d, missing %d, unexpected %d, buffers %d, aliases %d",
          rep.n_loaded, rep.n_missing, rep.n_unexpected, rep.n_ignored_buffers,
          rep.n_ignored_aliases);
    ds_hf_load_report_free(&rep);
    expect_loaded(fx, NULL, "transformers folder");

    /* the original gpt2 layout */
    const char *orig = tmp_path("original.safetensors");
    write_variant(orig, V_ORIGINAL);
    zero_params(fx);
    CHECK_OK(ds_hf_load_weights(ds_get_model(fx->e), orig, ds_set_param_cb, fx->e, &rep));
    CHECK(rep.n_loaded == 28 && rep.n_missing == 0 && rep.n_unexpected == 0 &&
              rep.n_ignored_buffers == 3 && rep.n_ignored_aliases == 1 && rep.prefix_added &&
              !strcmp(rep.prefix, "transformer."),
          "original layout: loaded %d, missing %d, unexpected %d (%s), buffers %d, aliases %d, "
          "prefix \"%s\"",
          rep.n_loaded, rep.n_missing, rep.n_unexpected,
          rep.n_unexpected ? rep.unexpected[0] : "", rep.n_ignored_buffers,
          rep.n_ignored_aliases, rep.prefix);
    ds_hf_load_report_print(&rep, stdout);
    ds_hf_load_report_free(&rep);
    expect_loaded(fx, NULL, "original layout");

    /* lm_head.weight alone loads the tied wte */
    const char *alias = tmp_path("alias.safetensors");
    write_variant(alias, V_ALIAS_ONLY);
    zero_params(fx);
    CHECK_OK(ds_hf_load_weights(ds_get_model(fx->e), alias, ds_set_param_cb, fx->e, &rep));
    CHECK(rep.n_loaded == 28 && rep.n_missing == 0 && rep.n_unexpected == 0 &&
              rep.n_ignored_aliases == 0,
          "lm_head.weight only: loaded %d, missing %d, unexpected %d, aliases %d", rep.n_loaded,
          rep.n_missing, rep.n_unexpected, rep.n_ignored_aliases);
    ds_hf_load_report_free(&rep);
    expect_loaded(fx, NULL, "lm_head.weight only");
    float *a = malloc(sizeof(float) * 97 * 32), *b = malloc(sizeof(float) * 97 * 32);
    CHECK_OK(ds_get_param(fx->e, "lm_head.weight", a, 97 * 32));
    CHECK_OK(ds_get_param(fx->e, "transformer.wte.weight", b, 97 * 32));
    CHECK(memcmp(a, b, sizeof(float) * 97 * 32) == 0, "lm_head.weight reads other than wte");
    free(a);
    free(b);

    /* a mis-shaped alias: named, nothing installed */
    const char *bad = tmp_path("bad_alias.safetensors");
    write_variant(bad, V_BAD_ALIAS);
    zero_params(fx);
    ds_clear_error();
    ds_status st = ds_hf_load_weights(ds_get_model(fx->e), bad, ds_set_param_cb, fx->e, &rep);
    CHECK(st == DS_ERR_DATA && strstr(ds_last_error(), "lm_head.weight: checkpoint [97, 31] vs "
                                                        "model [97, 32]") && rep.n_loaded == 0,
          "mis-shaped lm_head.weight: status %d, \"%s\", loaded %d", (int)st, ds_last_error(),
          rep.n_loaded);
    ds_hf_load_report_free(&rep);

    /* half a model: the rest is newly initialised */
    const char *half = tmp_path("half.safetensors");
    write_variant(half, V_HALF);
    CHECK_OK(ds_hf_load_weights(ds_get_model(fx->e), half, ds_set_param_cb, fx->e, &rep));
    bool ln_f_missing = false;
    for (int i = 0; i < rep.n_missing; i++)
        ln_f_missing |= !strcmp(rep.missing[i], "transformer.ln_f.weight");
    CHECK(rep.n_loaded == 14 && rep.n_missing == 14 && ln_f_missing && rep.n_unexpected == 0,
          "half a model: loaded %d, missing %d (ln_f among them: %d)", rep.n_loaded,
          rep.n_missing, ln_f_missing);
    ds_hf_load_report_free(&rep);
    expect_loaded(fx, ".h.0.", "half a model");
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_config_transformers();
    test_config_roundtrip();
    test_config_errors();

    fixture fx = {0};
    char err[512];
    if (ref_dump_load(DS_TEST_DATA_DIR "/gpt2_ref_tiny.bin", &fx.ref, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL %s\n", err);
        return 1;
    }
    CHECK_OK(ds_hf_gpt2_config_read(HF_DIR "/config.json", &fx.d));
    ds_model *model = NULL;
    CHECK_OK_GOTO(ds_gpt2_create(&fx.d, &model), out);
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = "{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"AdamW\", "
                     "\"params\": {\"lr\": 1e-3}}}";
    id.model = model;
    id.quiet = true;
    CHECK_OK_GOTO(ds_initialize(&id, &fx.e), out);
    test_weights(&fx);
out:
    ds_finalize(fx.e);
    ref_dump_free(&fx.ref);
    const char *files[] = {"config.json", "original.safetensors", "alias.safetensors",
                           "bad_alias.safetensors", "half.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(tmp_path(files[i]));
    rmdir(g_dir);
    return test_finish("test_hf_gpt2");
}
