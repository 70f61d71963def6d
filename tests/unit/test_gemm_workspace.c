/* The GEMM workspace of bf16 inputs (backend.h) from the engine's side: a
 * small BERT under bf16.enabled (GEMM inputs bf16 by default) at ZeRO stage
 * 2, with and without offload_optimizer cpu, one rank:
 *
 *   - ds_initialize reserves the workspace from the modules' declared GEMMs
 *     (ds_module_ops.plan_gemms): the memory report holds it under
 *     "workspace" on the device, its peak is the same, and the estimator
 *     (ds_estimate_model) counts the same bytes;
 *   - the plan is what the GEMMs ask for: after the steps, the largest
 *     request the backend saw equals the reservation (this model's largest
 *     GEMM is a weight gradient, which accumulates (beta 1) and so always
 *     goes through the workspace on cpu, never the own kernel that needs
 *     none), and no warning of growth was due;
 *   - nothing grows during or after the first step: every purpose's bytes and
 *     peak after STEPS steps equal those after ds_initialize (what the
 *     offload tests check, here with bf16 GEMMs);
 *   - forced fp32 GEMM inputs under bf16 hold no workspace, in the report
 *     and in the estimate.
 * Under a second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/engine_internal.h" /* e->be: the backend's largest request */
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h"
#include "tests/unit/test_util.h"
#include "zero/estimate.h"

#define STEPS 3

static uint64_t ws(const ds_mem_report *r) { return r->bytes[DS_MEM_WORKSPACE][DS_PLACE_DEVICE]; }

/* One engine with `extra` spliced into the config; checks the above. */
static void run(const char *what, const char *extra, bool want_ws) {
    const int T = 12, V = 50;
    ds_dataset *data = ck_make_data(8 * STEPS, T, V);
    ds_model *model = NULL;
    if (!data || ck_tiny_bert(T, V, &model) != DS_OK) TEST_DIE("model or data");
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"steps_per_print\": 1000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}},"
             " \"bf16\": {\"enabled\": true}, %s}",
             extra);
    engine_t *e;
    REQUIRE_OK(ck_start(cfg, model, data, &e));
    ds_mem_report r0, r1, est;
    ds_memory_report(e, &r0);
    REQUIRE_OK(ds_estimate_model(ds_get_model(e), ds_world_size(e), ds_get_config(e),
                                 DS_BACKEND_CPU, &est));
    CHECK(want_ws ? ws(&r0) > 0 : ws(&r0) == 0, "%s: workspace %llu bytes after ds_initialize",
          what, (unsigned long long)ws(&r0));
    CHECK(r0.peak[DS_MEM_WORKSPACE][DS_PLACE_DEVICE] == ws(&r0) && ws(&est) == ws(&r0),
          "%s: workspace %llu, peak %llu, estimate %llu", what, (unsigned long long)ws(&r0),
          (unsigned long long)r0.peak[DS_MEM_WORKSPACE][DS_PLACE_DEVICE],
          (unsigned long long)ws(&est));
    for (int i = 0; i < STEPS; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) TEST_DIE(ds_last_error());
    }
    ds_memory_report(e, &r1);
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        for (int at = 0; at < DS_PLACE_COUNT; at++)
            CHECK(r1.bytes[p][at] == r0.bytes[p][at] && r1.peak[p][at] == r0.peak[p][at],
                  "%s: %s on %s: %llu (peak %llu) after %d steps, %llu (peak %llu) before", what,
                  ds_mem_purpose_name((ds_mem_purpose)p), ds_mem_place_name((ds_mem_place)at),
                  (unsigned long long)r1.bytes[p][at], (unsigned long long)r1.peak[p][at], STEPS,
                  (unsigned long long)r0.bytes[p][at], (unsigned long long)r0.peak[p][at]);
    CHECK(e->be->gemm_ws_need == ws(&r0) && !e->be->gemm_ws_warned,
          "%s: the GEMMs asked for %zu bytes at most, the plan reserved %llu (warned %d)", what,
          e->be->gemm_ws_need, (unsigned long long)ws(&r0), e->be->gemm_ws_warned);
    printf("test_gemm_workspace: %s: workspace %llu bytes (planned = estimated = largest "
           "request), nothing grew in %d steps\n",
           what, (unsigned long long)ws(&r0), STEPS);
    ds_finalize(e);
    ds_dataset_destroy(data);
}

int main(void) {
    run("stage 2, bf16", "\"zero_optimization\": {\"stage\": 2}", true);
    run("stage 2, bf16, offload_optimizer cpu",
        "\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}",
        true);
    run("stage 2, bf16, fp32 GEMM inputs",
        "\"zero_optimization\": {\"stage\": 2}, \"zero_engine\": {\"gemm_input_dtype\": \"fp32\"}",
        false);
    return test_finish("test_gemm_workspace");
}
