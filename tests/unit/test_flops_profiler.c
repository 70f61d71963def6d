/* flops_profiler (engine/flops_profiler.h): the FLOPs each module's GEMMs
 * did in the profiled step, against counts worked out by hand from the
 * models' shapes, exact (integers far below 2^53, so no tolerance):
 *
 * - the MLP (embeddings: no GEMM; mlp.i: x W^T, then dW and dx in backward;
 *   the classifier likewise), over 2 micro-batches of gradient accumulation;
 * - BERT (every encoder layer: Q, K, V, attention output and the two FFN
 *   projections, QK^T and PV per head; the last layer queries position 0
 *   only; pooler and classifier; backward twice the forward);
 * - a model written here against the public module API alone (a dense layer
 *   calling the backend's GEMM and a squared-error loss): a user's model is
 *   profiled the same way;
 * and the print: output_file holds the summary, the aggregated profile down
 * to module_depth with top_modules names each, and the detailed table only
 * with detailed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/flops_profiler.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

static ds_dataset *cls_data(size_t n, int T, int C, int vocab) {
    ds_dataset *d = NULL;
    REQUIRE_OK(ds_cls_dataset_create(n, T, C, NULL, &d));
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *lab = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < T; t++) {
            ids[i * (size_t)T + (size_t)t] = 1 + (int)((i * 7 + (size_t)t * 3) % (size_t)(vocab - 1));
            mask[i * (size_t)T + (size_t)t] = 1.0f; /* every position real: T is the batch's */
        }
        lab[i] = (int)(i % (size_t)C);
    }
    return d;
}

/* Trains `steps` steps with the profiler config `prof`; returns the engine. */
static engine_t *run(ds_model *m, ds_dataset *d, int micro, int gas, const char *prof,
                     int steps) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},"
             " \"flops_profiler\": %s}",
             micro, gas, prof);
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = cfg;
    id.model = m;
    id.train_data = d;
    id.quiet = true;
    engine_t *e = NULL;
    REQUIRE_OK(ds_initialize(&id, &e));
    for (int s = 0; s < steps; s++) REQUIRE_OK(ds_train_batch(e, NULL));
    return e;
}

static void check_module(const engine_t *e, const char *name, double fwd, double bwd) {
    ds_flops_profile p;
    bool ready = false;
    REQUIRE_OK(ds_flops_profile_get(e, &p, &ready));
    for (int i = 0; i < p.n_modules; i++) {
        ds_flops_module_profile m;
        REQUIRE_OK(ds_flops_profile_module(e, i, &m));
        if (strcmp(m.name, name) != 0) continue;
        CHECK(m.fwd_flops == fwd, "%s: fwd flops %.0f, by hand %.0f", name, m.fwd_flops, fwd);
        CHECK(m.bwd_flops == bwd, "%s: bwd flops %.0f, by hand %.0f", name, m.bwd_flops, bwd);
        return;
    }
    TEST_FAIL("no module %s in the profile", name);
}

static void test_mlp(void) {
    const int V = 50, E = 8, HD = 16, C = 3, B = 4, GAS = 2, T = 6;
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = E, .hidden_dim = HD,
                      .n_hidden = 2, .n_classes = C};
    ds_model *m;
    REQUIRE_OK(ds_mlp_create(&md, &m));
    ds_dataset *d = cls_data(64, T, C, V);
    /* DeepSpeed's profile_step: the step after that many, here the third */
    engine_t *e = run(m, d, B, GAS, "{\"enabled\": true, \"profile_step\": 2}", 3);
    ds_flops_profile p;
    bool ready = false;
    REQUIRE_OK(ds_flops_profile_get(e, &p, &ready));
    CHECK_TRUE(ready);
    CHECK_EQ_I(p.step, 3);
    CHECK_EQ_I(p.batch_per_rank, B * GAS);
    /* per micro-batch: linear fwd 2 B in out; bwd dW 2 out in B + dx 2 B out in */
    double g = GAS;
    check_module(e, "embeddings", 0, 0);
    check_module(e, "mlp.0", g * 2 * B * E * HD, g * 4 * B * E * HD);
    check_module(e, "mlp.1", g * 2 * B * HD * HD, g * 4 * B * HD * HD);
    check_module(e, "classifier", g * 2 * B * HD * C, g * 4 * B * HD * C);
    CHECK(p.fwd_flops == g * 2 * B * (E * HD + HD * HD + HD * C), "MLP total fwd %.0f",
          p.fwd_flops);
    /* not a speed: the step's interval contains the forward's and the
     * backward's on one clock; 1e-9 relative allows the rounding of the
     * differences of clock readings (doubles of ~1e5 s hold ~1e-11 s) */
    CHECK(p.fwd_s > 0 && p.bwd_s > 0 && p.iter_s >= (p.fwd_s + p.bwd_s) * (1.0 - 1e-9),
          "latencies fwd %g bwd %g iter %g", p.fwd_s, p.bwd_s, p.iter_s);
    ds_finalize(e);
    ds_dataset_destroy(d);
}

/* One encoder layer's forward GEMM flops: B rows of T positions, Tq queried. */
/* An epoch of 6 rows at micro batch 2 and accumulation 4: every step is the
 * epoch's short window of 3 micro-batches, and the profile says the 6 rows
 * it took (micro x accumulation said 8, the samples/second a third high) */
static void test_short_window(void) {
    const int V = 50, T = 6, C = 3;
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 8, .hidden_dim = 16,
                      .n_hidden = 1, .n_classes = C};
    ds_model *m;
    REQUIRE_OK(ds_mlp_create(&md, &m));
    ds_dataset *d = cls_data(6, T, C, V);
    engine_t *e = run(m, d, 2, 4, "{\"enabled\": true, \"profile_step\": 1}", 2);
    ds_flops_profile p;
    bool ready = false;
    REQUIRE_OK(ds_flops_profile_get(e, &p, &ready));
    CHECK_TRUE(ready);
    CHECK_EQ_I(p.batch_per_rank, 6);
    ds_finalize(e);
    ds_dataset_destroy(d);
}

static double enc_fwd(double B, double T, double Tq, double H, double I) {
    double N = B * T, Nq = B * Tq;
    return 2 * (Nq * H * H + 2 * N * H * H) /* Q on the queried rows, K and V on all */
           + 2 * 2 * B * Tq * T * H        /* QK^T and PV, all heads (nh hd = H) */
           + 2 * Nq * H * H                /* attention output */
           + 2 * 2 * Nq * H * I;           /* FFN in and out */
}

static void test_bert(const char *dir) {
    const int V = 60, H = 32, L = 3, NH = 2, I = 64, C = 3, B = 4, T = 16;
    ds_bert_desc bd = {.vocab_size = V, .hidden_size = H, .num_hidden_layers = L,
                       .num_attention_heads = NH, .intermediate_size = I,
                       .max_position_embeddings = 64, .type_vocab_size = 2, .n_classes = C,
                       .max_seq_len = T};
    ds_model *m;
    REQUIRE_OK(ds_bert_create(&bd, &m));
    ds_dataset *d = cls_data(64, T, C, V);
    char prof[700];
    snprintf(prof, sizeof prof,
             "{\"enabled\": true, \"profile_step\": 2, \"module_depth\": 2, \"top_modules\": 2,"
             " \"output_file\": \"%s/bert_profile.txt\"}", dir);
    engine_t *e = run(m, d, B, 1, prof, 3);
    check_module(e, "bert.embeddings", 0, 0);
    for (int l = 0; l < L; l++) {
        char name[64];
        snprintf(name, sizeof name, "bert.encoder.layer.%d", l);
        double f = enc_fwd(B, T, l == L - 1 ? 1 : T, H, I); /* the last layer: [CLS] only */
        check_module(e, name, f, 2 * f);
    }
    check_module(e, "bert.pooler", 2.0 * B * H * H, 4.0 * B * H * H);
    check_module(e, "classifier", 2.0 * B * H * C, 4.0 * B * H * C);
    ds_finalize(e);
    ds_dataset_destroy(d);

    char path[512], line[512];
    snprintf(path, sizeof path, "%s/bert_profile.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        TEST_FAIL("no output_file %s", path);
        return;
    }
    int summary = 0, depth2 = 0, depth3 = 0, detailed = 0, rows = 0, two = 0;
    while (fgets(line, sizeof line, f)) {
        summary += strstr(line, "Profile Summary at step 3:") != NULL;
        depth2 += strncmp(line, "depth 2:", 8) == 0;
        depth3 += strncmp(line, "depth 3:", 8) == 0;
        detailed += strstr(line, "Detailed Profile per rank") != NULL;
        rows += strncmp(line, "bert.encoder.layer.", 19) == 0;
        /* top_modules 2: depths 0 (bert, classifier, loss) and 1 (bert.embeddings,
         * bert.encoder, bert.pooler) have more than 2 names and list exactly 2;
         * depth 2 has one (bert.encoder.layer) */
        const char *sep = strstr(line, "params      - {") ? strstr(line, "', '") : NULL;
        two += sep && !strstr(sep + 1, "', '");
    }
    fclose(f);
    CHECK_EQ_I(summary, 1);
    CHECK_EQ_I(depth2, 1);
    CHECK_EQ_I(depth3, 0); /* module_depth 2 */
    CHECK_EQ_I(detailed, 1);
    CHECK_EQ_I(rows, L);
    CHECK_EQ_I(two, 2); /* depths 0 and 1 */
}

/* ---- a model of our own, as a user writes it (public API only) ---- */

enum { IN = 8, OUT = 5 };

static size_t dense_out(const ds_module *m, int B, int T) { (void)m, (void)T; return (size_t)B * OUT; }
static size_t zero_bytes(const ds_module *m, int B, int T) { (void)m, (void)B, (void)T; return 0; }
static ds_status dense_fwd(ds_module *m, ds_module_ctx *c) {
    (void)m;
    const float *x = ds_batch_f32(c->batch, "x");
    /* y[B, OUT] = x[B, IN] W^T, W [OUT, IN] */
    return c->be->ops->gemm(c->be, false, true, c->batch->B, OUT, IN, 1.0f, x, IN, 0,
                            c->params[0], IN, 0, 0.0f, c->y, OUT, 0, 1);
}
static ds_status dense_bwd(ds_module *m, ds_module_ctx *c) {
    (void)m;
    const float *x = ds_batch_f32(c->batch, "x");
    /* dW[OUT, IN] += dy^T x (the first module: no dx) */
    return c->be->ops->gemm(c->be, true, false, OUT, IN, c->batch->B, 1.0f, c->dy, OUT, 0, x,
                            IN, 0, 1.0f, c->grads[0], IN, 0, 1);
}
static const ds_module_ops k_dense = {.type = "my_dense", .out_elems = dense_out,
                                      .saved_bytes = zero_bytes, .scratch_bytes = zero_bytes,
                                      .forward = dense_fwd, .backward = dense_bwd,
                                      .destroy = ds_module_free};

static size_t two(const ds_module *m, int B, int T) { (void)m, (void)B, (void)T; return 2; }
/* loss = mean over rows of the sum of squares of x (target 0) */
static ds_status sq_fwd(ds_module *m, ds_module_ctx *c) {
    (void)m;
    int n = c->batch->B * OUT;
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)c->x[i] * c->x[i];
    c->y[0] = (float)(s / c->batch->B);
    c->y[1] = (float)c->batch->B;
    return DS_OK;
}
static ds_status sq_bwd(ds_module *m, ds_module_ctx *c) {
    (void)m;
    int n = c->batch->B * OUT;
    for (int i = 0; i < n; i++) c->dx[i] = c->loss_scale * 2.0f * c->x[i] / (float)c->batch->B;
    return DS_OK;
}
static const ds_module_ops k_sq = {.type = "my_sq_loss", .out_elems = two,
                                   .saved_bytes = zero_bytes, .scratch_bytes = zero_bytes,
                                   .forward = sq_fwd, .backward = sq_bwd,
                                   .destroy = ds_module_free};

static void user_model(ds_model **out_m, ds_dataset **out_d);

/* The profiled step's window dropped (a backward failed at profile_step's
 * step): the counters went off for good before, the profile never came.
 * Now the next step is profiled. */
static void test_dropped_step(void) {
    ds_model *m;
    ds_dataset *d;
    user_model(&m, &d);
    engine_t *e = run(m, d, 4, 1, "{\"enabled\": true, \"profile_step\": 1}", 1);
    setenv("DS_FAULT_INJECT", "error:backward:dense", 1);
    CHECK(ds_train_batch(e, NULL) != DS_OK, "the step with a failing backward went through");
    unsetenv("DS_FAULT_INJECT");
    ds_clear_error();
    ds_flops_profile p;
    bool ready = true;
    REQUIRE_OK(ds_flops_profile_get(e, &p, &ready));
    CHECK(!ready, "a profile of the dropped step");
    REQUIRE_OK(ds_train_batch(e, NULL));
    REQUIRE_OK(ds_flops_profile_get(e, &p, &ready));
    CHECK(ready && p.step == 3, "after the dropped step 2: ready %d, step %lld", ready,
          (long long)p.step);
    ds_finalize(e);
    ds_dataset_destroy(d);
}

static void user_model(ds_model **out_m, ds_dataset **out_d) {
    ds_model *m;
    REQUIRE_OK(ds_model_create("my_model", &m));
    int64_t feat[1] = {IN};
    REQUIRE_OK(ds_model_add_input(m, "x", DS_F32, 1, feat, 0));
    ds_module *mod;
    REQUIRE_OK(ds_module_create(&k_dense, "dense", 1, 0, &mod));
    REQUIRE_OK(ds_module_param(mod, 0, NULL, "weight", OUT, IN, DS_INIT_NORMAL, 0.0f, 0.1f));
    REQUIRE_OK(ds_model_add_module(m, mod));
    REQUIRE_OK(ds_module_create(&k_sq, "loss", 0, 0, &mod));
    REQUIRE_OK(ds_model_add_module(m, mod));
    ds_dataset *d;
    REQUIRE_OK(ds_dataset_create(32, 0, &d));
    float *x;
    REQUIRE_OK(ds_dataset_add_column(d, "x", DS_F32, 1, feat, (void **)&x));
    for (int i = 0; i < 32 * IN; i++) x[i] = (float)(i % 7) - 3.0f;
    *out_m = m;
    *out_d = d;
}

static void test_user_model(void) {
    const int B = 4;
    ds_model *m;
    ds_dataset *d;
    user_model(&m, &d);
    engine_t *e = run(m, d, B, 1, "{\"enabled\": true, \"profile_step\": 1}", 2);
    check_module(e, "dense", 2.0 * B * IN * OUT, 2.0 * B * IN * OUT);
    check_module(e, "loss", 0, 0);
    ds_finalize(e);
    ds_dataset_destroy(d);
}

int main(void) {
    char dir[] = "/tmp/test_flops_profiler.XXXXXX";
    if (!mkdtemp(dir)) TEST_DIE("mkdtemp");
    test_mlp();
    test_short_window();
    test_bert(dir);
    test_user_model();
    test_dropped_step();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_flops_profiler");
}
