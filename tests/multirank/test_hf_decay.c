/* The trainer's AdamW (a config without an optimizer section, hints given)
 * has Hugging Face's two parameter groups: weight decay for every parameter
 * but biases and normalization weights (Trainer.get_decay_parameter_names).
 *
 * 1. Which parameters: ds_param_decays on a 1-layer BERT and GPT-2 gives
 *    exactly the names transformers 5.24 gives for the same architectures
 *    (BertForSequenceClassification / GPT2LMHeadModel, 1 layer; the lists
 *    below are what get_decay_parameter_names left out, printed once by
 *    hand). GPT-2's ln_1 / ln_2 / ln_f weights are left out by module type
 *    (nn.LayerNorm), which their modules declare (no_decay); the rest by
 *    name. And the name patterns themselves on made-up names.
 * 2. That the engine applies it, at ZeRO stages 0-3 and with the optimizer
 *    offloaded, on every rank's partition: from weights set nonzero
 *    everywhere (biases included), one step with weight decay 0.1 against
 *    the same step with 0. The Adam part of the two updates is the
 *    same arithmetic on the same gradients and moments, so a parameter left
 *    out ends bit for bit equal, and a decayed one differs by lr * wd * p0
 *    (AdamW's decoupled decay of the initial value p0). Tolerance: the
 *    difference of two fp32 results of size |p|, each rounded once after
 *    the decay term was formed: 2^-22 (|p| + |p0|) covers the two roundings
 *    and the decay term's own; the decay term is lr * wd = 1e-3 of |p0|,
 *    about 8000 times that.
 * 3. A config that writes its optimizer section (DeepSpeed's one group)
 *    decays every parameter, biases included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

static const char *const k_bert_no_decay[] = {
    "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.LayerNorm.bias",
    "bert.encoder.layer.0.attention.self.query.bias",
    "bert.encoder.layer.0.attention.self.key.bias",
    "bert.encoder.layer.0.attention.self.value.bias",
    "bert.encoder.layer.0.attention.output.dense.bias",
    "bert.encoder.layer.0.attention.output.LayerNorm.weight",
    "bert.encoder.layer.0.attention.output.LayerNorm.bias",
    "bert.encoder.layer.0.intermediate.dense.bias",
    "bert.encoder.layer.0.output.dense.bias",
    "bert.encoder.layer.0.output.LayerNorm.weight",
    "bert.encoder.layer.0.output.LayerNorm.bias",
    "bert.pooler.dense.bias",
    "classifier.bias",
    NULL,
};
static const char *const k_gpt2_no_decay[] = {
    "transformer.h.0.ln_1.weight",     "transformer.h.0.ln_1.bias",
    "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.bias",
    "transformer.h.0.ln_2.weight",     "transformer.h.0.ln_2.bias",
    "transformer.h.0.mlp.c_fc.bias",   "transformer.h.0.mlp.c_proj.bias",
    "transformer.ln_f.weight",         "transformer.ln_f.bias",
    NULL,
};

static ds_bert_desc tiny_bert(void) {
    return (ds_bert_desc){.vocab_size = 30, .hidden_size = 8, .num_hidden_layers = 1,
                          .num_attention_heads = 2, .intermediate_size = 16,
                          .max_position_embeddings = 16, .n_classes = 2};
}

/* The names of m's parameters ds_param_decays leaves out, in order, against
 * `want`; and how many parameters m has. */
static int check_names(const ds_model *m, const char *const *want, const char *what) {
    int k = 0, n = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int j = 0; j < m->modules[i]->n_params; j++, n++) {
            const ds_param_desc *p = &m->modules[i]->params[j];
            if (ds_param_decays(p)) continue;
            if (!want[k] || strcmp(want[k], p->name) != 0)
                TEST_FAIL("%s: %s left out of weight decay, transformers leaves out %s", what,
                          p->name, want[k] ? want[k] : "nothing more");
            if (want[k]) k++;
        }
    CHECK(!want[k], "%s: transformers also leaves out %s", what, want[k] ? want[k] : "");
    return n;
}

static void test_names(void) {
    ds_bert_desc bd = tiny_bert();
    ds_model *m;
    REQUIRE_OK(ds_bert_create(&bd, &m));
    CHECK_EQ_I(check_names(m, k_bert_no_decay, "bert"), 25); /* 14 left out, 11 decayed */
    ds_model_destroy(m);
    ds_gpt2_desc gd = {.vocab_size = 30, .n_positions = 16, .n_embd = 8, .n_layer = 1,
                       .n_head = 2};
    REQUIRE_OK(ds_gpt2_create(&gd, &m));
    CHECK_EQ_I(check_names(m, k_gpt2_no_decay, "gpt2"), 16); /* 10 left out, 6 decayed */
    ds_model_destroy(m);

    /* the patterns: "bias", "layernorm", "rmsnorm" anywhere (any case), a
     * component "norm", a component ending in "_norm" */
    static const struct {
        const char *name;
        bool decays;
    } names[] = {
        {"x.Bias", false},          {"model.RMSNorm.weight", false},
        {"encoder.norm.weight", false}, {"norm.weight", false},
        {"q_norm.weight", false},   {"x.layer_norm", false},
        {"x.normal.weight", true},  {"x.enorm.weight", true},
        {"x.norm_a.weight", true},  {"dense.weight", true},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        ds_param_desc p = {0};
        snprintf(p.name, sizeof p.name, "%s", names[i].name);
        CHECK(ds_param_decays(&p) == names[i].decays, "%s: decays %d", names[i].name,
              !names[i].decays);
    }
    ds_param_desc flagged = {.name = "dense.weight", .no_decay = true};
    CHECK_TRUE(!ds_param_decays(&flagged));
}

/* One step of a tiny BERT with the trainer's AdamW (lr 1e-2, weight decay
 * wd) or, with `written`, an optimizer section saying the same; every
 * parameter after it, concatenated, into *out (and before it into *p0). */
static void one_step(const char *zero_json, double wd, bool written, float **p0, float **out,
                     size_t *total, int *world) {
    enum { T = 8 };
    ds_bert_desc bd = tiny_bert();
    bd.max_seq_len = T;
    bd.hidden_dropout_prob = bd.attention_probs_dropout_prob = 0.0f;
    ds_model *m;
    REQUIRE_OK(ds_bert_create(&bd, &m));
    enum { N = 16 };
    ds_dataset *d;
    REQUIRE_OK(ds_cls_dataset_create(N, T, 2, NULL, &d));
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    for (int i = 0; i < N * T; i++) {
        ids[i] = 1 + (i * 7) % 29;
        mask[i] = 1.0f;
    }
    for (int i = 0; i < N; i++) labels[i] = i % 2;
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\": %s%s}", zero_json,
             written ? ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, "
                       "\"weight_decay\": 0.1}}"
                     : "");
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = json;
    id.model = m;
    id.train_data = d;
    id.quiet = true;
    ds_config_hints_hf_defaults(&id.hints);
    id.hints.lr = 1e-2;
    id.hints.is_default[DS_HINT_LR] = false;
    id.hints.weight_decay = wd;
    id.hints.is_default[DS_HINT_WEIGHT_DECAY] = false;
    id.hints.total_num_steps = 1; /* HF's linear schedule at step 1: the full lr */
    if (written) id.hints.weight_decay = 0.1;
    engine_t *e;
    REQUIRE_OK(ds_initialize(&id, &e));
    *world = ds_world_size(e);
    const ds_model *em = ds_get_model(e);
    size_t n = 0;
    for (int i = 0; i < em->n_modules; i++)
        for (int j = 0; j < em->modules[i]->n_params; j++)
            n += (size_t)ds_param_numel(&em->modules[i]->params[j]);
    *total = n;
    *p0 = malloc(n * sizeof **p0);
    *out = malloc(n * sizeof **out);
    if (!*p0 || !*out) TEST_DIE("out of memory");
    /* every parameter nonzero, biases too (they start at 0, where decay
     * shows nothing): 0.5 .. 1.46 by position */
    size_t at0 = 0;
    for (int i = 0; i < em->n_modules; i++)
        for (int j = 0; j < em->modules[i]->n_params; j++) {
            const ds_param_desc *p = &em->modules[i]->params[j];
            size_t k = (size_t)ds_param_numel(p);
            for (size_t x = 0; x < k; x++) (*p0)[at0 + x] = 0.5f + 0.01f * (float)((at0 + x) % 97);
            REQUIRE_OK(ds_set_param(e, p->name, *p0 + at0, k));
            at0 += k;
        }
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            ds_step_info info;
            REQUIRE_OK(ds_train_batch(e, &info));
        }
        size_t at = 0;
        for (int i = 0; i < em->n_modules; i++)
            for (int j = 0; j < em->modules[i]->n_params; j++) {
                const ds_param_desc *p = &em->modules[i]->params[j];
                size_t k = (size_t)ds_param_numel(p);
                REQUIRE_OK(ds_get_param(e, p->name, (pass ? *out : *p0) + at, k));
                at += k;
            }
    }
    ds_finalize(e);
    ds_dataset_destroy(d);
}

/* Parameter by parameter: left out ones equal, decayed ones lr * wd * p0
 * apart; with `all`, every one decayed. */
static void compare(const char *what, const float *p0, const float *with, const float *without,
                    bool all) {
    ds_bert_desc bd = tiny_bert();
    ds_model *m;
    REQUIRE_OK(ds_bert_create(&bd, &m)); /* the names and sizes, in the same order */
    size_t at = 0;
    int left_out = 0, decayed = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int j = 0; j < m->modules[i]->n_params; j++) {
            const ds_param_desc *p = &m->modules[i]->params[j];
            bool decays = all || ds_param_decays(p);
            int bad = 0;
            for (int64_t k = 0; k < ds_param_numel(p); k++, at++) {
                double d = (double)without[at] - (double)with[at];
                double want = decays ? 1e-2 * 0.1 * (double)p0[at] : 0.0;
                double tol = decays ? ldexp(fabs(without[at]) + fabs(p0[at]), -22) : 0.0;
                if (fabs(d - want) > tol && bad++ == 0)
                    TEST_FAIL("%s: %s[%lld]: %.9g with decay, %.9g without, p0 %.9g: apart "
                              "%.3g, want %.3g", what, p->name, (long long)k, with[at],
                              without[at], p0[at], d, want);
            }
            if (decays) decayed++;
            else left_out++;
        }
    CHECK(all ? left_out == 0 && decayed == 25 : left_out == 14 && decayed == 11,
          "%s: %d left out, %d decayed", what, left_out, decayed);
    ds_model_destroy(m);
}

int main(void) {
    test_names();
    static const char *const zeros[] = {
        "{\"stage\": 0}", "{\"stage\": 1}", "{\"stage\": 2}", "{\"stage\": 3}",
        "{\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}",
    };
    int world = 1;
    for (size_t z = 0; z < sizeof zeros / sizeof *zeros; z++) {
        float *p0, *with, *p0b, *without;
        size_t n, nb;
        one_step(zeros[z], 0.1, false, &p0, &with, &n, &world);
        one_step(zeros[z], 0.0, false, &p0b, &without, &nb, &world);
        if (n != nb || memcmp(p0, p0b, n * sizeof *p0) != 0)
            TEST_FAIL("%s: the two engines start from different weights", zeros[z]);
        else
            compare(zeros[z], p0, with, without, false);
        free(p0b);
        free(without);
        /* a written optimizer section: one group, the biases decay too */
        if (z == 2) {
            float *p0w, *withw;
            one_step(zeros[z], 0.1, true, &p0w, &withw, &n, &world);
            one_step(zeros[z], 0.0, false, &p0b, &without, &nb, &world);
            compare("written optimizer section", p0w, withw, without, true);
            free(p0w);
            free(withw);
            free(p0b);
            free(without);
        }
        free(p0);
        free(with);
    }
    printf("test_hf_decay: %d rank(s), stages 0-3 and offload\n", world);
    return test_finish("test_hf_decay");
}
