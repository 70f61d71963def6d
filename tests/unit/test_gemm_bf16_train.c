/* bf16 mixed precision with bf16 GEMM inputs (zero_engine.gemm_input_dtype,
 * the backend's gemm_inputs) from the engine's side: a small BERT (GELU,
 * layer norm, attention with dropout, cross-entropy; AdamW with clipping)
 * trains STEPS steps at ZeRO stage 2 under bf16.enabled
 *
 *   auto  (the default: bf16 GEMM inputs under bf16),
 *   bf16  (written: the same setting, so the same bits as auto),
 *   fp32  (forced fp32 GEMMs under bf16: what bf16 did before),
 *
 * and the losses must show the switch works: auto's first loss differs from
 * fp32's (the forward's GEMMs already round), yet every step stays within a
 * band of it. Then the config side: "bf16" without bf16.enabled is refused
 * naming the key, and ds_config_gemm_inputs resolves auto to fp32 under fp32
 * and fp16 training. One rank, a second or two. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h"
#include "tests/unit/test_util.h"

#define STEPS 6

/* Train STEPS steps; `extra` is spliced into the config (precision and
 * zero_engine keys). Returns the ds_initialize status (the error stays in
 * ds_last_error); losses in loss[] when it trained. */
static ds_status train(const char *extra, double loss[STEPS], ds_dtype *gemm_inputs) {
    const int T = 12, V = 50;
    ds_dataset *data = ck_make_data(8 * STEPS, T, V);
    ds_model *model = NULL;
    if (!data || ck_tiny_bert(T, V, &model) != DS_OK) TEST_DIE("model or data");
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"steps_per_print\": 1000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003,"
             " \"weight_decay\": 0.01}}, \"gradient_clipping\": 0.5,"
             " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 1000}, %s}",
             extra);
    engine_t *e;
    ds_status st = ck_start(cfg, model, data, &e);
    if (st == DS_OK) {
        *gemm_inputs = ds_config_gemm_inputs(ds_get_config(e));
        for (int i = 0; i < STEPS; i++) {
            ds_step_info info;
            if (ds_train_batch(e, &info) != DS_OK) TEST_DIE(ds_last_error());
            loss[i] = info.loss;
        }
        ds_finalize(e);
    } /* the engine owns the model, also when ds_initialize failed */
    ds_dataset_destroy(data);
    return st;
}

int main(void) {
    double la[STEPS], lb[STEPS], lf[STEPS];
    ds_dtype ga = DS_F32, gb = DS_F32, gf = DS_BF16;
    REQUIRE_OK(train("\"bf16\": {\"enabled\": true}", la, &ga));
    REQUIRE_OK(train("\"bf16\": {\"enabled\": true},"
                     " \"zero_engine\": {\"gemm_input_dtype\": \"bf16\"}", lb, &gb));
    REQUIRE_OK(train("\"bf16\": {\"enabled\": true},"
                     " \"zero_engine\": {\"gemm_input_dtype\": \"fp32\"}", lf, &gf));
    CHECK(ga == DS_BF16 && gb == DS_BF16 && gf == DS_F32, "GEMM inputs %s / %s / %s",
          ds_dtype_name(ga), ds_dtype_name(gb), ds_dtype_name(gf));
    CHECK(memcmp(la, lb, sizeof la) == 0, "\"auto\" and \"bf16\" must train the same bits");
    /* The band. bf16 GEMM inputs round every activation and weight entering
     * a product by up to 2^-9 relative (the weights are bf16 already under
     * bf16.enabled: only activations and gradients are new roundings), so a
     * loss moves by a few 2^-9 at most over a few steps; measured: 7.6e-4
     * worst over these 6 steps (printed below). 1e-2 (5 x 2^-9, 13x the
     * measured) leaves room for other hosts' OpenBLAS and other instruction
     * sets, and still catches a GEMM that rounds to something coarser than
     * bf16 or rounds its output. */
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(la[i] - lf[i]) / fabs(lf[i]);
        if (rel > worst) worst = rel;
        CHECK(rel <= 1e-2, "step %d: loss %.9f with bf16 GEMMs, %.9f with fp32 (rel %.2e)", i + 1,
              la[i], lf[i], rel);
    }
    CHECK(la[0] != lf[0], "first loss identical with bf16 and fp32 GEMM inputs (%.9f): the "
          "setting did not reach the GEMMs", la[0]);
    printf("test_gemm_bf16_train: bf16 vs fp32 GEMM inputs under bf16: first loss %.7f vs %.7f, "
           "worst relative difference over %d steps %.3e\n", la[0], lf[0], STEPS, worst);

    /* "bf16" GEMMs without bf16 training: refused, naming the key */
    double unused[STEPS];
    ds_dtype g;
    ds_clear_error();
    ds_status st = train("\"zero_engine\": {\"gemm_input_dtype\": \"bf16\"}", unused, &g);
    CHECK(st == DS_ERR_CONFIG && strstr(ds_last_error(), "zero_engine.gemm_input_dtype") &&
              strstr(ds_last_error(), "bf16.enabled"),
          "bf16 GEMM inputs under fp32: got %s: %s", ds_status_to_string(st), ds_last_error());
    ds_clear_error();
    st = train("\"fp16\": {\"enabled\": true}, \"zero_engine\": {\"gemm_input_dtype\": \"bf16\"}",
               unused, &g);
    CHECK(st == DS_ERR_CONFIG && strstr(ds_last_error(), "fp16 training"),
          "bf16 GEMM inputs under fp16: got %s: %s", ds_status_to_string(st), ds_last_error());
    ds_clear_error();
    /* auto under fp32 and fp16: fp32 GEMMs */
    ds_config c;
    ds_config_defaults(&c);
    CHECK(ds_config_gemm_inputs(&c) == DS_F32, "auto under fp32");
    c.fp16_enabled = true;
    CHECK(ds_config_gemm_inputs(&c) == DS_F32, "auto under fp16");
    c.fp16_enabled = false;
    c.bf16_enabled = true;
    CHECK(ds_config_gemm_inputs(&c) == DS_BF16, "auto under bf16");
    return test_finish("test_gemm_bf16_train");
}
