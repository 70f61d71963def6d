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
 * disagree (a kink inside the step) is skipped, at most 5% per tensor.
 *
 * GPT-2's modules are checked the same way (the block with and without a
 * padding mask and with dropout, the tied head chained after the embedding
 * that owns wte), and the block's causality exactly: no output depends on a
 * later position's input. */
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
        ds_xent_desc xd = {.n_classes = 4, .weights = "weights"};
        if (ds_mod_xent_create("loss", &xd, &m)) return 1;
        fails += check_module(m, &gb, false, 5 * 4, true, false, &k_opts,
                              w ? "xent/weighted" : "xent");
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    /* per token with the causal shift and ignored positions: logits
     * [B, T, C], labels [B, T] with -100 at padding */
    enum { B = 3, T = 5, C = 6 };
    gc_batch gb;
    gc_batch_make(&gb, B, T, 10, C, NULL, false, false, 11);
    int32_t labels[B * T];
    for (int i = 0; i < B * T; i++) labels[i] = i % 4 == 2 ? DS_IGNORE_INDEX : (i * 5) % C;
    ds_batch_set(&gb.b, "labels", DS_I32, labels);
    ds_module *m;
    ds_xent_desc xd = {.n_classes = C, .per_token = true, .shift = true};
    if (ds_mod_xent_create("lm_loss", &xd, &m)) return 1;
    fails += check_module(m, &gb, false, B * T * C, true, false, &k_opts, "xent/causal");
    m->ops->destroy(m);
    gc_batch_free(&gb);
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
    for (int variant = 0; variant < 4; variant++) {
        bool training = variant & 1, cls_only = variant >= 2;
        gc_batch gb;
        gc_batch_make(&gb, 2, 5, 30, 3, lens, false, false, 5);
        ds_encoder_desc d = {.hidden = 16, .heads = 2, .intermediate = 32, .hidden_dropout = 0.2f,
                             .attn_dropout = 0.3f, .ln_eps = 1e-12f, .init_std = 0.02f,
                             .cls_only = cls_only};
        ds_module *m;
        if (ds_mod_encoder_layer_create("bert.encoder.layer.0", &d, &m)) return 1;
        const char *label[4] = {"encoder_layer", "encoder_layer/dropout",
                                "encoder_layer/cls_only", "encoder_layer/cls_only+dropout"};
        fails += check_module(m, &gb, false, 2 * 5 * 16, false, training, &k_opts,
                              label[variant]);
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

/* cls_only computes what the full layer computes at position 0, and the same
 * gradients when only that position's output matters: the full layer is run
 * with the projection r zero outside position 0 (no dropout: the two layouts
 * draw their masks at different offsets). The other output rows are zero. */
static int test_encoder_cls_only_is_full_row0(void) {
    const int B = 3, T = 6, H = 16, lens[] = {6, 4, 1};
    gc_batch gb;
    gc_batch_make(&gb, B, T, 30, 3, lens, false, false, 7);
    gc_chain c[2];
    ds_module *m[2];
    for (int k = 0; k < 2; k++) {
        ds_encoder_desc d = {.hidden = H, .heads = 4, .intermediate = 24, .ln_eps = 1e-12f,
                             .init_std = 0.02f, .cls_only = k == 1};
        if (ds_mod_encoder_layer_create("bert.encoder.layer.0", &d, &m[k])) return 1;
        if (gc_chain_init(&c[k], g_be, &m[k], 1, &gb.b, false, (size_t)B * T * H, false, 99))
            return 1;
        gc_chain_randomize(&c[k], 0.3, 0.1, 5);
        for (int b = 0; b < B; b++)
            for (int t = 1; t < T; t++)
                for (int j = 0; j < H; j++) c[k].r[((size_t)b * T + t) * H + j] = 0.0f;
    }
    double L[2];
    int fails = 0;
    for (int k = 0; k < 2; k++)
        if (gc_chain_forward(&c[k], &L[k]) || gc_chain_backward(&c[k])) return 1;
    /* both sides run the same fp32 operations on position 0, except GEMMs of
     * 1 instead of T query rows and sums over B instead of B T rows (with
     * exact zeros in between): a few ulp of each O(1) value; 1e-5 relative
     * to the tensor's largest entry is ~100 ulp and far below any missing
     * term (O(1) relative) */
    const gc_run *f = &c[0].runs[0], *q = &c[1].runs[0];
    double worst_y = 0, other_rows = 0, ymax = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < H; j++) {
                size_t i = ((size_t)b * T + t) * H + j;
                if (t == 0) {
                    worst_y = fmax(worst_y, fabs(q->y[i] - f->y[i]));
                    ymax = fmax(ymax, fabs(f->y[i]));
                } else {
                    other_rows = fmax(other_rows, fabs(q->y[i]));
                }
            }
    CHECK(other_rows == 0.0, "cls_only: an output row past position 0 is %g, not 0", other_rows);
    CHECK(worst_y <= 1e-5 * ymax, "cls_only: position 0 differs by %g (max %g)", worst_y, ymax);
    fails += worst_y > 1e-5 * ymax || other_rows != 0.0;
    /* gradients: 1e-5 of the largest entry of any of the layer's gradients
     * (not of each tensor: the key bias's true gradient is exactly 0, since
     * softmax ignores a constant added to every score, so its own largest
     * entry is rounding noise) */
    double gmax = 0;
    for (int t = -1; t < m[0]->n_params; t++) {
        const float *a = t < 0 ? f->dx : f->grads[t];
        size_t n = t < 0 ? f->nx : f->numel[t];
        for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(a[i]));
    }
    for (int t = -1; t < m[0]->n_params; t++) {
        const float *a = t < 0 ? f->dx : f->grads[t], *b = t < 0 ? q->dx : q->grads[t];
        size_t n = t < 0 ? f->nx : f->numel[t];
        double worst = 0;
        for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
        bool ok = worst <= 1e-5 * gmax;
        CHECK(ok, "cls_only: gradient of %s differs by %g (largest gradient entry %g)",
              t < 0 ? "the input" : m[0]->params[t].name, worst, gmax);
        fails += !ok;
    }
    for (int k = 0; k < 2; k++) {
        gc_chain_free(&c[k]);
        m[k]->ops->destroy(m[k]);
    }
    gc_batch_free(&gb);
    return fails;
}

/* The cpu attention layers run their attention a few samples at a time
 * (ds_attn_chunk_rows, models/modules.h: as many samples as keep 512 KiB of
 * probabilities, at least one per thread). At T = 128 and 4 heads a sample
 * holds 256 KiB, so one and two threads take chunks of 2 samples (2, 2, 1
 * for B = 5), three threads chunks of 3 (3, 2) and five threads the whole
 * batch in one. For BERT's encoder layer and GPT-2's block (causal) alike,
 * all must agree bit for bit, dropout on and padded rows included (each
 * product, softmax row and dropout element is the same computation either
 * way; the other kernels and the GEMMs give the same bits at any thread
 * count). A chunk that read or wrote the wrong sample's rows, mask or
 * dropout stream fails it. */
static int make_attn_layer(int gpt2, ds_module **out) {
    if (gpt2) {
        ds_gpt2_block_desc d = {.n_embd = 32, .n_head = 4, .n_inner = 64, .resid_pdrop = 0.1f,
                                .attn_pdrop = 0.2f, .ln_eps = 1e-5f, .init_std = 0.02f,
                                .proj_std = 0.01f};
        return ds_mod_gpt2_block_create("transformer.h.0", &d, out) != DS_OK;
    }
    ds_encoder_desc d = {.hidden = 32, .heads = 4, .intermediate = 64, .hidden_dropout = 0.1f,
                         .attn_dropout = 0.2f, .ln_eps = 1e-12f, .init_std = 0.02f};
    return ds_mod_encoder_layer_create("bert.encoder.layer.0", &d, out) != DS_OK;
}

static int test_attn_chunks(int gpt2) {
    enum { NBE = 4 };
    const int B = 5, T = 128, H = 32, lens[] = {128, 100, 1, 128, 64};
    const int threads[NBE] = {5, 1, 2, 3};
    gc_batch gb;
    gc_batch_make(&gb, B, T, 30, 3, lens, false, false, 8);
    ds_backend *bes[NBE];
    for (int k = 0; k < NBE; k++) bes[k] = test_cpu_backend(threads[k], NULL);
    gc_chain c[NBE];
    ds_module *m[NBE];
    for (int k = 0; k < NBE; k++) {
        if (make_attn_layer(gpt2, &m[k])) return 1;
        if (gc_chain_init(&c[k], bes[k], &m[k], 1, &gb.b, false, (size_t)B * T * H, false, 77))
            return 1;
        gc_chain_randomize(&c[k], 0.3, 0.1, 6);
        c[k].training = true;
    }
    double L[NBE];
    for (int k = 0; k < NBE; k++)
        if (gc_chain_forward(&c[k], &L[k]) || gc_chain_backward(&c[k])) return 1;
    int fails = 0;
    const gc_run *a = &c[0].runs[0];
    for (int k = 1; k < NBE; k++) {
        const gc_run *b = &c[k].runs[0];
        for (int t = -2; t < m[0]->n_params; t++) {
            const float *u = t == -2 ? a->y : t == -1 ? a->dx : a->grads[t];
            const float *v = t == -2 ? b->y : t == -1 ? b->dx : b->grads[t];
            size_t n = t == -2 ? a->ny : t == -1 ? a->nx : a->numel[t];
            size_t differ = 0;
            for (size_t i = 0; i < n; i++) differ += memcmp(&u[i], &v[i], sizeof(float)) != 0;
            CHECK(differ == 0, "%s: attention in chunks at %d threads vs the whole batch: "
                  "%zu of %zu values of %s differ", m[0]->name, threads[k], differ, n,
                  t == -2 ? "the output" : t == -1 ? "the input gradient" : m[0]->params[t].name);
            fails += differ != 0;
        }
    }
    for (int k = 0; k < NBE; k++) {
        gc_chain_free(&c[k]);
        m[k]->ops->destroy(m[k]);
        ds_backend_destroy(bes[k]);
    }
    gc_batch_free(&gb);
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

/* ---- GPT-2 (models/mod_gpt2_*.c) ---- */

static const ds_gpt2_block_desc k_gpt2_block = {
    .n_embd = 16, .n_head = 2, .n_inner = 24, .resid_pdrop = 0.2f, .attn_pdrop = 0.3f,
    .ln_eps = 1e-5f, .init_std = 0.02f, .proj_std = 0.01f,
};

static int test_gpt2_embed(void) {
    int fails = 0;
    for (int training = 0; training < 2; training++) {
        gc_batch gb;
        const int lens[] = {5, 3};
        gc_batch_make(&gb, 2, 5, 30, 3, lens, false, false, 21);
        ds_gpt2_embed_desc d = {.vocab = 30, .n_embd = 16, .n_positions = 8, .embd_pdrop = 0.25f,
                                .init_std = 0.02f};
        ds_module *m;
        if (ds_mod_gpt2_embed_create("transformer.embed", "transformer", &d, &m)) return 1;
        fails += check_module(m, &gb, true, 0, false, training, &k_opts,
                              training ? "gpt2_embed/dropout" : "gpt2_embed");
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

/* Variants: no attention_mask in the batch (causal only), right padding, and
 * training with every dropout on (the masks are fixed by the seed, so the
 * block is a fixed smooth map). */
static int test_gpt2_block(void) {
    int fails = 0;
    const int B = 2, T = 5, lens[] = {5, 3};
    for (int variant = 0; variant < 3; variant++) {
        gc_batch gb;
        gc_batch_make(&gb, B, T, 30, 3, lens, false, false, 22);
        ds_batch no_mask = {.B = B, .T = T};
        ds_batch_set(&no_mask, "input_ids", DS_I32, gb.tokens);
        ds_module *m;
        if (ds_mod_gpt2_block_create("transformer.h.0", &k_gpt2_block, &m)) return 1;
        gc_chain c;
        const ds_batch *b = variant == 0 ? &no_mask : &gb.b;
        if (gc_chain_init(&c, g_be, &m, 1, b, false, (size_t)B * T * 16, false, 1234)) return 1;
        c.training = variant == 2;
        const char *label[3] = {"gpt2_block/causal", "gpt2_block/padding",
                                "gpt2_block/padding+dropout"};
        int f = gc_check(&c, &k_opts, label[variant]);
        if (f) fprintf(stderr, "FAILED: %s (%d tensors)\n", label[variant], f);
        fails += f ? 1 : 0;
        gc_chain_free(&c);
        m->ops->destroy(m);
        gc_batch_free(&gb);
    }
    return fails;
}

/* Causality: output position t depends on inputs at positions <= t only, bit
 * for bit (future keys get probability exactly 0, and every other operation
 * is per position), with and without the padding mask. */
static int test_gpt2_block_causal(void) {
    const int B = 2, T = 6, E = 16, lens[] = {6, 4};
    gc_batch gb;
    gc_batch_make(&gb, B, T, 30, 3, lens, false, false, 23);
    ds_module *m;
    if (ds_mod_gpt2_block_create("transformer.h.0", &k_gpt2_block, &m)) return 1;
    gc_chain c;
    if (gc_chain_init(&c, g_be, &m, 1, &gb.b, false, (size_t)B * T * E, false, 77)) return 1;
    size_t n = (size_t)B * T * E;
    float *y0 = malloc(n * sizeof(float));
    double L;
    int fails = 0;
    if (gc_chain_forward(&c, &L)) return 1;
    memcpy(y0, c.runs[0].y, n * sizeof(float));
    for (int t = T - 1; t >= 1; t--) {
        /* perturb every input at positions >= t */
        for (int b = 0; b < B; b++)
            for (int j = 0; j < E; j++) c.x0[((size_t)b * T + t) * E + j] += 0.5f;
        if (gc_chain_forward(&c, &L)) return 1;
        int changed = 0;
        for (int b = 0; b < B; b++)
            for (int tt = 0; tt < t; tt++)
                changed += memcmp(c.runs[0].y + ((size_t)b * T + tt) * E,
                                  y0 + ((size_t)b * T + tt) * E, E * sizeof(float)) != 0;
        CHECK(changed == 0, "gpt2_block: inputs at positions >= %d changed %d earlier outputs", t,
              changed);
        fails += changed != 0;
    }
    printf("gpt2_block/causality: outputs before t unchanged by inputs at t.. (t = %d..1)\n",
           T - 1);
    free(y0);
    gc_chain_free(&c);
    m->ops->destroy(m);
    gc_batch_free(&gb);
    return fails;
}

/* The tied head needs its owner earlier in the chain: embeddings -> head
 * (the harness points the head's tied parameter at the embedding's buffers),
 * so wte's checked gradient is the sum of its uses as the embedding table
 * and as the output projection; finite differences move both at once, and
 * a missing or overwritten term fails. */
static int test_gpt2_head(void) {
    gc_batch gb;
    const int lens[] = {4, 2, 3};
    gc_batch_make(&gb, 3, 4, 13, 3, lens, false, false, 24);
    ds_gpt2_embed_desc ed = {.vocab = 13, .n_embd = 8, .n_positions = 6, .init_std = 0.02f};
    ds_gpt2_head_desc hd = {.vocab = 13, .n_embd = 8, .ln_eps = 1e-5f,
                            .ln_prefix = "transformer.ln_f", .alias = "lm_head.weight",
                            .tied_to = "transformer.wte.weight"};
    ds_module *ms[2];
    if (ds_mod_gpt2_embed_create("transformer.embed", "transformer", &ed, &ms[0]) ||
        ds_mod_gpt2_head_create("lm_head", &hd, &ms[1])) {
        fprintf(stderr, "%s\n", ds_last_error());
        return 1;
    }
    gc_chain c;
    if (gc_chain_init(&c, g_be, ms, 2, &gb.b, true, 0, false, 4321)) return 1;
    int f = gc_check(&c, &k_opts, "gpt2_embed+lm_head (tied)");
    if (f) fprintf(stderr, "FAILED: gpt2_embed+lm_head (%d tensors)\n", f);
    gc_chain_free(&c);
    for (int i = 0; i < 2; i++) ms[i]->ops->destroy(ms[i]);
    gc_batch_free(&gb);
    return f ? 1 : 0;
}

int main(void) {
    g_be = test_cpu_backend(1, NULL);
    int fails = 0; /* failed tensors, each printed by gc_check */
    fails += test_linear();
    fails += test_embed_pool();
    fails += test_xent();
    fails += test_bert_embeddings();
    fails += test_encoder_layer();
    fails += test_encoder_cls_only_is_full_row0();
    fails += test_attn_chunks(0);
    fails += test_attn_chunks(1);
    fails += test_pooler();
    fails += test_gpt2_embed();
    fails += test_gpt2_block();
    fails += test_gpt2_block_causal();
    fails += test_gpt2_head();
    ds_backend_destroy(g_be);
    CHECK(fails == 0, "%d module gradient check(s) failed", fails);
    return test_finish("test_gradcheck_modules");
}
