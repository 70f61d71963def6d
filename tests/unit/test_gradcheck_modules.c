/* Gradient check of every module of models/ by central finite differences.
 *
 * The modules compute in fp32 (that is the arithmetic under test), so the
 * scalar L = sum_i r_i y_i (a fixed random projection r of the output) is
 * accumulated in double from the fp32 outputs, and the step is chosen for
 * fp32. A central difference D(h) = (L(t+h) - L(t-h)) / 2h has
 *
 *   |D(h) - dL/dt| <= h^2/6 |d3L/dt3|  +  kappa eps_f32 S / h
 *                     (truncation)        (rounding of L; S = sum |r_i y_i|)
 *
 * and with an fp32 L no single h makes both small where the softmax is sharp
 * (at h = 1e-2 the truncation reached 60x the rounding term here). So the
 * harness uses Richardson's extrapolation FD = (4 D(h/2) - D(h)) / 3, whose
 * truncation is O(h^4) (~1e-8 |d5L/dt5| at h = 1e-2) and whose rounding
 * noise is at most 3 kappa eps S / h. The tolerance per entry is
 *
 *   rtol * max(|FD|, |analytic|)  +  3 * atol * eps_f32 * S / h
 *
 *   h    = 1e-2 relative to max(1, |t|): inputs and weights are O(1);
 *   rtol = 1e-4: covers the O(h^4) truncation with a 100x margin and is
 *          still 10^4 below the O(1) relative error of a wrong formula;
 *   atol = 4:    kappa, the rounding error of L in units of eps * S. A
 *          forward rounds each output through a few dependent sums, each off
 *          by at most ~eps relative; measured, every entry of every module
 *          here is within 1.0 eps S / h.
 * A wrong backward (a missing term, a transposed operand, a wrong mask or
 * offset) is off by a sizeable part of the gradient (|g| ~ 1..10 here, the
 * noise band ~1e-2) and fails.
 *
 * Dropout runs with a fixed seed: the mask is a pure function of (seed,
 * offset), identical in every evaluation, so the module is a fixed smooth
 * map and FD applies. ReLU has kinks: an entry whose D(h) and D(h/2)
 * disagree (a kink inside the step) is skipped, at most 5% per tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "models/modules.h"
#include "tests/unit/gradcheck_harness.h"
#include "tests/unit/test_util.h"

static ds_backend *g_be;

static const gc_opts k_opts = {
    .h = 1e-2, .rtol = 1e-4, .atol = 4.0, .max_per_tensor = 400, .kinks = false, .check_x0 = true,
};

/* Check one module, fed either by the batch or by a random input of nx0. */
static int check_module(ds_module *m, const gc_batch *gb, bool reads_batch, size_t nx0,
                        bool loss, bool training, const gc_opts *o, const char *label) {
    gc_chain c;
    if (gc_chain_init(&c, g_be, &m, 1, &gb->b, reads_batch, nx0, loss, 1234)) return 1;
    c.training = training;
    int f = gc_check(&c, o, label);
    gc_chain_free(&c);
    if (f) fprintf(stderr, "FAILED: %s (%d tensors)\n", label, f);
    return f ? 1 : 0;
}

static int test_linear(void) {
    int fails = 0;
    gc_batch gb;
    gc_batch_make(&gb, 3, 4, 10, 3, NULL, false, false, 1);
    const ds_act acts[] = {DS_ACT_NONE, DS_ACT_RELU, DS_ACT_GELU, DS_ACT_TANH};
    const char *names[] = {"linear/none", "linear/relu", "linear/gelu", "linear/tanh"};
    for (int a = 0; a < 4; a++) {
        ds_module *m;
        if (ds_mod_linear_create("lin", "lin", 7, 5, acts[a], DS_LINEAR_INIT_TORCH, 0.0f, &m)) {
            fprintf(stderr, "%s\n", ds_last_error());
            return 1;
        }
        gc_opts o = k_opts;
        o.kinks = acts[a] == DS_ACT_RELU;
        fails += check_module(m, &gb, false, 3 * 7, false, false, &o, names[a]);
        m->ops->destroy(m);
    }
    gc_batch_free(&gb);
    return fails;
}

static int test_embed_pool(void) {
    gc_batch gb;
    const int lens[] = {5, 3, 1};
    gc_batch_make(&gb, 3, 5, 11, 3, lens, false, false, 2);
    ds_module *m;
    if (ds_mod_embed_pool_create("embeddings", "embeddings.word_embeddings", 11, 6, &m)) return 1;
    int f = check_module(m, &gb, true, 0, false, false, &k_opts, "embed_pool");
    m->ops->destroy(m);
    gc_batch_free(&gb);
    return f;
}

static int test_xent(void) {
    int fails = 0;
    for (int w = 0; w < 2; w++) {
        gc_batch gb;
        gc_batch_make(&gb, 5, 2, 10, 4, NULL, false, w == 1, 3 + (uint64_t)w);
        ds_module *m;
        if (ds_mod_xent_create("loss", 4, &m)) return 1;
        fails += check_module(m, &gb, false, 5 * 4, true, false, &k_opts,
                              w ? "xent/weighted" : "xent");
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

static int test_bert_embeddings(void) {
    int fails = 0;
    const int lens[] = {5, 3};
    for (int variant = 0; variant < 3; variant++) {
        bool types = variant != 1, training = variant == 2;
        gc_batch gb;
        gc_batch_make(&gb, 2, 5, 30, 3, lens, types, false, 4);
        /* padding_idx -1: with a projection over every output position, the
         * padding row does influence L, so it must get its gradient here
         * (test_nn_kernels checks padding_idx itself). */
        ds_bert_embed_desc d = {.vocab = 30, .hidden = 16, .max_positions = 8, .type_vocab = 2,
                                .padding_idx = -1, .dropout = 0.25f, .ln_eps = 1e-12f,
                                .init_std = 0.02f};
        ds_module *m;
        if (ds_mod_bert_embeddings_create("bert.embeddings", &d, &m)) return 1;
        const char *label = variant == 0   ? "bert_embeddings"
                            : variant == 1 ? "bert_embeddings/no-type-ids"
                                           : "bert_embeddings/dropout";
        fails += check_module(m, &gb, true, 0, false, training, &k_opts, label);
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

static int test_encoder_layer(void) {
    int fails = 0;
    const int lens[] = {5, 3};
    for (int training = 0; training < 2; training++) {
        gc_batch gb;
        gc_batch_make(&gb, 2, 5, 30, 3, lens, false, false, 5);
        ds_encoder_desc d = {.hidden = 16, .heads = 2, .intermediate = 32, .hidden_dropout = 0.2f,
                             .attn_dropout = 0.3f, .ln_eps = 1e-12f, .init_std = 0.02f};
        ds_module *m;
        if (ds_mod_encoder_layer_create("bert.encoder.layer.0", &d, &m)) return 1;
        fails += check_module(m, &gb, false, 2 * 5 * 16, false, training, &k_opts,
                              training ? "encoder_layer/dropout" : "encoder_layer");
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

static int test_pooler(void) {
    int fails = 0;
    for (int training = 0; training < 2; training++) {
        gc_batch gb;
        gc_batch_make(&gb, 3, 4, 30, 3, NULL, false, false, 6);
        ds_module *m;
        if (ds_mod_bert_pooler_create("bert.pooler", 16, 0.3f, 0.02f, &m)) return 1;
        fails += check_module(m, &gb, false, 3 * 4 * 16, false, training, &k_opts,
                              training ? "bert_pooler/dropout" : "bert_pooler");
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

int main(void) {
    g_be = test_cpu_backend(1, NULL);
    int fails = 0; /* failed tensors, each printed by gc_check */
    fails += test_linear();
    fails += test_embed_pool();
    fails += test_xent();
    fails += test_bert_embeddings();
    fails += test_encoder_layer();
    fails += test_pooler();
    ds_backend_destroy(g_be);
    CHECK(fails == 0, "%d module gradient check(s) failed", fails);
    return test_finish("test_gradcheck_modules");
}
