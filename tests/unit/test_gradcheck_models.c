/* Gradient check of whole models: the MLP and a tiny BERT (2 layers, hidden
 * 16, 2 heads, vocab 30, T 5 with padding in one row), every parameter of
 * every module against central finite differences of the mean loss, run
 * module by module as the engine runs them (each module's dx is the previous
 * module's dy). The step, the Richardson extrapolation and the tolerances are
 * those of test_gradcheck_modules.c, where they are derived; here L is the
 * loss itself, so S = max(1, |L|).
 *
 * Also: a forward repeated with the same seeds is bit-identical (what
 * activation checkpointing relies on when it recomputes a layer), and the
 * loss module's backward scales by loss_scale.
 *
 * A tiny GPT-2 (vocab 23, 2 layers, n_embd 16, 2 heads, T 6 with right
 * padding, labels -100 at padding) is checked the same way, eval and with
 * dropout, its tied wte gradient being the sum of the embedding's and the
 * output projection's uses; and its blocks recompute bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "models/models.h"
#include "tests/unit/gradcheck_harness.h"
#include "tests/unit/test_util.h"

static ds_backend *g_be;

static const gc_opts k_opts = {
    .h = 1e-2, .rtol = 1e-4, .atol = 4.0, .max_per_tensor = 600, .kinks = false,
    .check_x0 = false,
};

static int check_model(ds_model *model, const gc_batch *gb, bool training, bool kinks,
                       double wstd, const char *label) {
    gc_chain c;
    if (gc_chain_init(&c, g_be, model->modules, model->n_modules, &gb->b, true, 0, true, 77))
        return 1;
    gc_chain_randomize(&c, wstd, 0.1, 78);
    c.training = training;
    gc_opts o = k_opts;
    o.kinks = kinks;
    int f = gc_check(&c, &o, label);
    gc_chain_free(&c);
    if (f) fprintf(stderr, "FAILED: %s (%d tensors)\n", label, f);
    return f ? 1 : 0;
}

static int test_mlp(void) {
    ds_mlp_desc d = {.vocab_size = 20, .max_seq_len = 6, .embed_dim = 8, .hidden_dim = 12,
                     .n_hidden = 2, .n_classes = 3};
    ds_model *model;
    if (ds_mlp_create(&d, &model) != DS_OK) {
        fprintf(stderr, "mlp: %s\n", ds_last_error());
        return 1;
    }
    gc_batch gb;
    const int lens[] = {6, 4, 2, 5};
    gc_batch_make(&gb, 4, 6, 20, 3, lens, false, false, 11);
    /* Weights N(0, 1): pre-activations of the ReLUs are O(1), so few lie
     * within a step of their kink. */
    int f = check_model(model, &gb, false, true, 1.0, "mlp");
    gc_batch_free(&gb);
    ds_model_destroy(model);
    return f;
}

static ds_status tiny_bert(ds_model **out) {
    ds_bert_desc d = {.vocab_size = 30, .hidden_size = 16, .num_hidden_layers = 2,
                      .num_attention_heads = 2, .intermediate_size = 32,
                      .max_position_embeddings = 8, .hidden_dropout_prob = 0.1f,
                      .attention_probs_dropout_prob = 0.1f, .n_classes = 3, .max_seq_len = 5};
    return ds_bert_create(&d, out);
}

static int test_bert(void) {
    int fails = 0;
    ds_model *model;
    if (tiny_bert(&model) != DS_OK) {
        fprintf(stderr, "bert: %s\n", ds_last_error());
        return 1;
    }
    const int lens[] = {5, 3, 5};
    for (int v = 0; v < 2; v++) {
        gc_batch gb;
        /* eval: plain loss; training: dropout everywhere and class weights */
        gc_batch_make(&gb, 3, 5, 30, 3, lens, true, v == 1, 12);
        /* Weights N(0, 0.25), half the single-module checks' 0.5: through a
         * whole model, std 0.5 makes attention and logits saturate, and near
         * a saturation edge L bends too sharply for any fp32 step (seen: FD
         * drifting by 10% between h = 1e-2 and 1e-3). */
        fails += check_model(model, &gb, v == 1, false, 0.25, v ? "bert/train" : "bert/eval");
        gc_batch_free(&gb);
    }
    ds_model_destroy(model);
    return fails;
}

/* Same seeds -> bit-identical outputs (recomputation); another seed changes
 * the dropout masks; training off ignores the seed. c starts at seed 5.
 * Training forwards at seed 5 twice (the loss, and blk's saved area when blk
 * is not NULL, must repeat bit for bit) and once at seed 6 (the loss must
 * change), then eval at seeds 6 and 5 (the loss must not). Returns the
 * failures, printed with `label`; -1 when a forward fails. */
static int check_seeds(gc_chain *c, gc_run *blk, const char *label) {
    int fails = 0;
    double L1, L2, L3, E1, E2;
    c->training = true;
    if (gc_chain_forward(c, &L1)) return -1;
    void *saved1 = NULL;
    if (blk) {
        saved1 = malloc(blk->saved_bytes);
        memcpy(saved1, blk->saved, blk->saved_bytes);
    }
    if (gc_chain_forward(c, &L2)) return -1;
    if (blk && memcmp(saved1, blk->saved, blk->saved_bytes) != 0) {
        fprintf(stderr, "%s: %s's saved area differs in a second forward\n", label,
                blk->m->name);
        fails++;
    }
    free(saved1);
    c->seed = 6;
    if (gc_chain_forward(c, &L3)) return -1;
    c->training = false;
    if (gc_chain_forward(c, &E1)) return -1;
    c->seed = 5;
    if (gc_chain_forward(c, &E2)) return -1;
    if (L1 != L2) {
        fprintf(stderr, "%s: same seed gave losses %.9g and %.9g\n", label, L1, L2);
        fails++;
    }
    if (L1 == L3) {
        fprintf(stderr, "%s: seeds 5 and 6 gave the same training loss %.9g\n", label, L1);
        fails++;
    }
    if (E1 != E2) {
        fprintf(stderr, "%s: eval loss depends on the seed (%.9g vs %.9g)\n", label, E1, E2);
        fails++;
    }
    printf("%s: train %.9g (again %.9g, other seed %.9g), eval %.9g\n", label, L1, L2, L3, E1);
    return fails;
}

/* check_seeds on the tiny BERT, then the loss module's loss_scale. */
static int test_recompute(void) {
    ds_model *model;
    if (tiny_bert(&model) != DS_OK) return 1;
    gc_batch gb;
    const int lens[] = {5, 2};
    gc_batch_make(&gb, 2, 5, 30, 3, lens, true, false, 13);
    gc_chain c;
    if (gc_chain_init(&c, g_be, model->modules, model->n_modules, &gb.b, true, 0, true, 5))
        return 1;
    int fails = check_seeds(&c, NULL, "recompute");
    if (fails < 0) return 1;

    /* loss_scale: the loss module's dx scales linearly */
    double E1;
    int last = c.n - 1;
    gc_run *lr = &c.runs[last];
    float *d1 = malloc(lr->nx * sizeof(float));
    c.loss_scale = 1.0f;
    if (gc_chain_forward(&c, &E1) || gc_chain_backward(&c)) return 1;
    memcpy(d1, lr->dx, lr->nx * sizeof(float));
    c.loss_scale = 1024.0f;
    if (gc_chain_forward(&c, &E1) || gc_chain_backward(&c)) return 1;
    for (size_t i = 0; i < lr->nx; i++)
        if (lr->dx[i] != 1024.0f * d1[i]) { /* a power of two: exact */
            fprintf(stderr, "loss_scale: dlogits[%zu] = %g, expected 1024 * %g\n", i, lr->dx[i],
                    d1[i]);
            fails++;
            break;
        }
    free(d1);
    gc_chain_free(&c);
    gc_batch_free(&gb);
    ds_model_destroy(model);
    return fails;
}

/* ---- GPT-2 ---- */

/* Tiny GPT-2: vocab 23, 2 layers, n_embd 16, 2 heads, n_inner 32, 8
 * positions; dropout 0.1 everywhere (used when training). */
static ds_status tiny_gpt2(ds_model **out) {
    ds_gpt2_desc d = {.vocab_size = 23, .n_positions = 8, .n_embd = 16, .n_layer = 2,
                      .n_head = 2, .n_inner = 32, .resid_pdrop = 0.1f, .embd_pdrop = 0.1f,
                      .attn_pdrop = 0.1f, .dropout_set = true, .max_seq_len = 6};
    return ds_gpt2_create(&d, out);
}

/* A language model's batch: B x T tokens, rows of lengths lens padded at the
 * end (mask 0), labels = the tokens with DS_IGNORE_INDEX at padding. */
typedef struct lm_batch {
    gc_batch gb;
    int32_t labels[64];
} lm_batch;

static void lm_batch_make(lm_batch *lb, int B, int T, int vocab, const int *lens, uint64_t seed) {
    gc_batch_make(&lb->gb, B, T, vocab, 2, lens, false, false, seed);
    for (int i = 0; i < B * T; i++)
        lb->labels[i] = lb->gb.mask[i] != 0.0f ? lb->gb.tokens[i] : DS_IGNORE_INDEX;
    ds_batch_set(&lb->gb.b, "labels", DS_I32, lb->labels);
}

/* The whole chain, embeddings to loss, against finite differences of the
 * mean loss over the counted (shifted, unpadded) positions; wte's gradient
 * is the sum of its two uses (the harness ties the head to the embedding's
 * buffers). */
static int test_gpt2(void) {
    int fails = 0;
    ds_model *model;
    if (tiny_gpt2(&model) != DS_OK) {
        fprintf(stderr, "gpt2: %s\n", ds_last_error());
        return 1;
    }
    const int lens[] = {6, 4, 5};
    for (int v = 0; v < 2; v++) {
        lm_batch lb;
        lm_batch_make(&lb, 3, 6, 23, lens, 31);
        /* weights N(0, 0.25) as BERT's check above, for the same reason */
        fails += check_model(model, &lb.gb, v == 1, false, 0.25, v ? "gpt2/train" : "gpt2/eval");
        gc_batch_free(&lb.gb);
    }
    ds_model_destroy(model);
    return fails;
}

/* check_seeds on the tiny GPT-2, with the first block's saved area (what
 * activation checkpointing relies on when it recomputes a block), which must
 * be checkpointable. */
static int test_gpt2_recompute(void) {
    ds_model *model;
    if (tiny_gpt2(&model) != DS_OK) return 1;
    lm_batch lb;
    const int lens[] = {6, 3};
    lm_batch_make(&lb, 2, 6, 23, lens, 32);
    gc_chain c;
    if (gc_chain_init(&c, g_be, model->modules, model->n_modules, &lb.gb.b, true, 0, true, 5))
        return 1;
    /* the first block: its saved area recomputes too */
    gc_run *blk = &c.runs[1];
    int fails = check_seeds(&c, blk, "gpt2 recompute");
    if (fails < 0) return 1;
    if (!blk->m->checkpointable) {
        fprintf(stderr, "gpt2: %s is not checkpointable\n", blk->m->name);
        fails++;
    }
    gc_chain_free(&c);
    gc_batch_free(&lb.gb);
    ds_model_destroy(model);
    return fails;
}

int main(void) {
    g_be = test_cpu_backend(1, NULL);
    int fails = 0; /* failed tensors, each printed by gc_check */
    fails += test_mlp();
    fails += test_bert();
    fails += test_recompute();
    fails += test_gpt2();
    fails += test_gpt2_recompute();
    ds_backend_destroy(g_be);
    CHECK(fails == 0, "%d model gradient check(s) failed", fails);
    return test_finish("test_gradcheck_models");
}
