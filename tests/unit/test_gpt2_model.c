/* ds_gpt2_create (models/gpt2.c): what it builds, without training it.
 *
 *   - GPT-2 small from an all-zero descriptor (GPT2Config's defaults): the
 *     124,439,808 parameters transformers' GPT2LMHeadModel has (wte counted
 *     once: lm_head.weight is tied), modules, inputs, sizes for "auto";
 *   - Hugging Face's names, shapes (Conv1D [in, out]) and _init_weights in
 *     the parameter descriptors, the tie lm_head.weight -> transformer.wte.weight,
 *     checkpointable blocks;
 *   - the defaults: n_inner 4 n_embd, dropouts 0.1 unless dropout_set,
 *     layer_norm_epsilon 1e-5, initializer_range 0.02, max_seq_len n_positions;
 *   - bad descriptors: DS_ERR_INVALID_ARG naming the field and the value. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/models.h"
#include "models/modules.h"
#include "tests/unit/test_util.h"

static const ds_param_desc *find(const ds_model *m, const char *name) {
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++)
            if (!strcmp(m->modules[i]->params[p].name, name)) return &m->modules[i]->params[p];
    return NULL;
}

static void expect_param(const ds_model *m, const char *name, int64_t d0, int64_t d1,
                         ds_init_kind init, float std) {
    const ds_param_desc *p = find(m, name);
    if (!p) {
        CHECK(0, "no parameter %s", name);
        return;
    }
    bool shape_ok = d1 > 0 ? (p->ndim == 2 && p->shape[0] == d0 && p->shape[1] == d1)
                           : (p->ndim == 1 && p->shape[0] == d0);
    CHECK(shape_ok, "%s: shape [%lld, %lld] (ndim %d), want [%lld, %lld]", name,
          (long long)p->shape[0], (long long)(p->ndim > 1 ? p->shape[1] : 0), p->ndim,
          (long long)d0, (long long)d1);
    CHECK(p->init == init && (init != DS_INIT_NORMAL || (p->init_a == 0.0f && p->init_b == std)),
          "%s: init %d (%g, %g), want %d std %g", name, (int)p->init, (double)p->init_a,
          (double)p->init_b, (int)init, (double)std);
}

/* prefix.weight [n] ones and prefix.bias [n] zeros. */
static void expect_layer_norm(const ds_model *m, const char *prefix, int64_t n) {
    char name[128];
    snprintf(name, sizeof name, "%s.weight", prefix);
    expect_param(m, name, n, 0, DS_INIT_ONES, 0);
    snprintf(name, sizeof name, "%s.bias", prefix);
    expect_param(m, name, n, 0, DS_INIT_ZEROS, 0);
}

/* A Conv1D: prefix.weight [in, out] (transposed from nn.Linear's) N(0, std^2),
 * prefix.bias [out] zeros. */
static void expect_conv1d(const ds_model *m, const char *prefix, int64_t in, int64_t out,
                          float std) {
    char name[128];
    snprintf(name, sizeof name, "%s.weight", prefix);
    expect_param(m, name, in, out, DS_INIT_NORMAL, std);
    snprintf(name, sizeof name, "%s.bias", prefix);
    expect_param(m, name, out, 0, DS_INIT_ZEROS, 0);
}

static void test_gpt2_small(void) {
    ds_gpt2_desc d;
    memset(&d, 0, sizeof d);
    ds_model *m;
    REQUIRE_OK(ds_gpt2_create(&d, &m));
    /* transformers: sum(p.numel() for p in GPT2LMHeadModel(GPT2Config()).parameters()) */
    CHECK(ds_model_num_params(m) == 124439808, "GPT-2 small has %lld parameters",
          (long long)ds_model_num_params(m));
    CHECK(!strcmp(m->type, "gpt2") && m->n_modules == 15, "type %s, %d modules (want 15)",
          m->type, m->n_modules);
    CHECK(m->max_seq_len == 1024 && m->hidden_size == 768 && m->vocab_size == 50257,
          "max_seq_len %d hidden %d vocab %d", m->max_seq_len, m->hidden_size, m->vocab_size);
    const char *want_mod[] = {"transformer.embed", "transformer.h.0", "transformer.h.11",
                              "lm_head", "loss"};
    const int at[] = {0, 1, 12, 13, 14};
    for (int i = 0; i < 5; i++)
        CHECK(!strcmp(m->modules[at[i]]->name, want_mod[i]), "module %d is %s, want %s", at[i],
              m->modules[at[i]]->name, want_mod[i]);
    for (int i = 1; i <= 12; i++)
        CHECK(m->modules[i]->checkpointable, "%s is not checkpointable", m->modules[i]->name);
    /* inputs */
    const ds_tensor_desc *ids = ds_model_input(m, "input_ids");
    const ds_tensor_desc *mask = ds_model_input(m, "attention_mask");
    const ds_tensor_desc *lab = ds_model_input(m, "labels");
    CHECK(ids && ids->dtype == DS_I32 && ids->ndim == 1 && ids->dims[0] == DS_DIM_SEQ &&
              ids->flags == 0 && ids->lo == 0 && ids->hi == m->vocab_size,
          "input_ids declared wrong");
    CHECK(mask && mask->dtype == DS_F32 && mask->ndim == 1 && mask->dims[0] == DS_DIM_SEQ &&
              mask->flags == DS_INPUT_OPTIONAL,
          "attention_mask declared wrong");
    CHECK(lab && lab->dtype == DS_I32 && lab->ndim == 1 && lab->dims[0] == DS_DIM_SEQ &&
              lab->flags == (DS_INPUT_TARGET | DS_INPUT_IGNORE) && lab->lo == 0 &&
              lab->hi == m->vocab_size,
          "labels declared wrong (targets in the vocabulary, or -100: ignored)");
    CHECK(m->n_inputs == 3, "%d inputs, want 3", m->n_inputs);
    /* HF names, Conv1D shapes, _init_weights (c_proj: 0.02 / sqrt(2 * 12)) */
    const float sd = 0.02f, proj = 0.02f / sqrtf(24.0f);
    expect_param(m, "transformer.wte.weight", 50257, 768, DS_INIT_NORMAL, sd);
    expect_param(m, "transformer.wpe.weight", 1024, 768, DS_INIT_NORMAL, sd);
    expect_layer_norm(m, "transformer.h.3.ln_1", 768);
    expect_conv1d(m, "transformer.h.3.attn.c_attn", 768, 2304, sd);
    expect_conv1d(m, "transformer.h.3.attn.c_proj", 768, 768, proj);
    expect_layer_norm(m, "transformer.h.3.ln_2", 768);
    expect_conv1d(m, "transformer.h.3.mlp.c_fc", 768, 3072, sd);
    expect_conv1d(m, "transformer.h.3.mlp.c_proj", 3072, 768, proj);
    expect_layer_norm(m, "transformer.ln_f", 768);
    CHECK(find(m, "lm_head.weight") == NULL, "lm_head.weight is a parameter of its own");
    const ds_module *head = m->modules[13];
    CHECK(head->n_tied == 1 && !strcmp(head->tied[0].name, "lm_head.weight") &&
              !strcmp(head->tied[0].target, "transformer.wte.weight") &&
              head->tied[0].ndim == 2 && head->tied[0].shape[0] == 50257 &&
              head->tied[0].shape[1] == 768,
          "lm_head's tie is wrong");
    ds_model_destroy(m);
}

static void test_defaults(void) {
    ds_gpt2_desc in = {.vocab_size = 50, .n_positions = 8, .n_embd = 16, .n_layer = 2,
                       .n_head = 2};
    ds_gpt2_desc d;
    CHECK_OK(ds_gpt2_resolve(&in, &d));
    CHECK(d.n_inner == 64 && d.resid_pdrop == 0.1f && d.embd_pdrop == 0.1f &&
              d.attn_pdrop == 0.1f && d.layer_norm_epsilon == 1e-5f &&
              d.initializer_range == 0.02f && d.max_seq_len == 8 && d.dropout_set,
          "defaults: n_inner %d pdrop %g %g %g eps %g init %g max_seq_len %d", d.n_inner,
          (double)d.resid_pdrop, (double)d.embd_pdrop, (double)d.attn_pdrop,
          (double)d.layer_norm_epsilon, (double)d.initializer_range, d.max_seq_len);
    in.dropout_set = true; /* zeros meant: no dropout */
    CHECK_OK(ds_gpt2_resolve(&in, &d));
    CHECK(d.resid_pdrop == 0.0f && d.embd_pdrop == 0.0f && d.attn_pdrop == 0.0f,
          "dropout_set with zeros gave %g %g %g", (double)d.resid_pdrop, (double)d.embd_pdrop,
          (double)d.attn_pdrop);
    in.dropout_set = false;
    in.attn_pdrop = 0.2f; /* one given: the others stay as given (0) */
    CHECK_OK(ds_gpt2_resolve(&in, &d));
    CHECK(d.resid_pdrop == 0.0f && d.attn_pdrop == 0.2f, "a given dropout changed the others");
}

/* Case k of the bad descriptors: a valid tiny GPT-2 with one field broken;
 * *needle is what the message must say. False past the last case. */
static bool bad_case(int k, ds_gpt2_desc *d, const char **needle) {
    *d = (ds_gpt2_desc){.vocab_size = 50, .n_positions = 8, .n_embd = 16, .n_layer = 2,
                        .n_head = 2};
    switch (k) {
    case 0: d->n_head = 3, *needle = "n_embd 16 is not a multiple of n_head 3"; break;
    case 1: d->vocab_size = 1, *needle = "vocab_size must be >= 2, got 1"; break;
    case 2: d->n_layer = -1, *needle = "n_layer must be > 0, got -1"; break;
    case 3: d->n_inner = -5, *needle = "n_inner must be > 0, got -5"; break;
    case 4: d->max_seq_len = 9, *needle = "max_seq_len 9 exceeds n_positions 8"; break;
    case 5: d->resid_pdrop = 1.0f, *needle = "resid_pdrop must be in [0, 1), got 1"; break;
    case 6: d->embd_pdrop = -0.5f, *needle = "embd_pdrop must be in [0, 1), got -0.5"; break;
    case 7: d->attn_pdrop = NAN, *needle = "attn_pdrop must be in [0, 1), got nan"; break;
    case 8: d->layer_norm_epsilon = -1e-5f, *needle = "layer_norm_epsilon must be > 0"; break;
    case 9:
        d->initializer_range = INFINITY, *needle = "initializer_range must be > 0, got inf";
        break;
    default: return false;
    }
    return true;
}

static void test_errors(void) {
    ds_gpt2_desc d;
    const char *needle;
    for (int k = 0; bad_case(k, &d, &needle); k++) {
        ds_model *m = (ds_model *)&d; /* must be overwritten with NULL on failure */
        ds_clear_error();
        ds_status st = ds_gpt2_create(&d, &m);
        CHECK(st == DS_ERR_INVALID_ARG && m == NULL && strstr(ds_last_error(), needle),
              "case %d: status %d, \"%s\" (want \"%s\")", k, (int)st, ds_last_error(), needle);
        if (st == DS_OK) ds_model_destroy(m);
    }
    ds_model *m;
    CHECK(ds_gpt2_create(NULL, &m) == DS_ERR_INVALID_ARG, "a NULL descriptor accepted");
}

int main(void) {
    test_gpt2_small();
    test_defaults();
    test_errors();
    return test_finish("test_gpt2_model");
}
