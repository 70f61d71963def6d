/* OneBitAdam and ZeroOneAdam configs (engine/core/config_sections.c):
 *
 * - DeepSpeed's parameter names and defaults (freeze_step 100000,
 *   var_freeze_step 100000, var_update_scaler 16, local_step_scaler 32678,
 *   local_step_clipper 16, cuda_aware false, comm_backend_name "nccl");
 *   the update that runs is recorded as AdamW without bias correction
 *   (bias_correction true warns: DeepSpeed never reads it);
 * - the resolved config written as JSON reads back to the same settings;
 * - bad configs fail naming the key: a ZeRO stage other than 0 (DeepSpeed:
 *   "not compatible with ZeRO"), freeze_step 0 / negative / not an integer,
 *   the scalers below 1, amsgrad true, an unknown comm_backend_name, a key of
 *   the other optimizer. */
#include <stdio.h>
#include <string.h>

#include "engine/core/config.h"
#include "tests/unit/test_util.h"

static int warnings;
static char last_warning[512];
static void count_warn(void *user, const char *msg) {
    (void)user;
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
}

static void good(void) {
    ds_config c;
    warnings = 0;
    REQUIRE_OK(ds_config_parse_string("{\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": "
                                      "{\"lr\": 4e-4}}}", &c, count_warn, NULL));
    CHECK_EQ_I(c.onebit, DS_ONEBIT_ADAM);
    CHECK_EQ_I(c.optimizer, DS_OPTIM_ADAMW);
    CHECK_EQ_I((long long)c.freeze_step, 100000);
    CHECK_TRUE(!c.bias_correction && !c.cuda_aware);
    CHECK_TRUE(!strcmp(c.comm_backend_name, "nccl"));
    CHECK_EQ_I(warnings, 0);

    /* case-insensitive type as the other optimizers; every 0/1 Adam key */
    REQUIRE_OK(ds_config_parse_string(
        "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"zerooneadam\", \"params\": {\"lr\": 1e-3, "
        "\"weight_decay\": 0.01, \"bias_correction\": true, \"var_freeze_step\": 1000, "
        "\"var_update_scaler\": 8, \"local_step_scaler\": 1000, \"local_step_clipper\": 4, "
        "\"cuda_aware\": true, \"comm_backend_name\": \"mpi\", \"amsgrad\": false, "
        "\"eps_inside_sqrt\": false, \"max_grad_norm\": 0.0}}}",
        &c, count_warn, NULL));
    CHECK_EQ_I(c.onebit, DS_ONEBIT_ZERO_ONE);
    CHECK_EQ_I((long long)c.var_freeze_step, 1000);
    CHECK_EQ_I((long long)c.var_update_scaler, 8);
    CHECK_EQ_I((long long)c.local_step_scaler, 1000);
    CHECK_EQ_I((long long)c.local_step_clipper, 4);
    CHECK_TRUE(c.cuda_aware && !strcmp(c.comm_backend_name, "mpi") && !c.bias_correction);
    CHECK_EQ_I(warnings, 1); /* bias_correction true has no effect */
    CHECK(strstr(last_warning, "optimizer.params.bias_correction") != NULL, "warning: %s",
          last_warning);

    /* resolved, written, read back: the same settings */
    ds_config_hints h;
    ds_config_hints_init(&h);
    h.world_size = 2;
    REQUIRE_OK(ds_config_resolve(&c, &h));
    char *js = ds_config_to_json(&c);
    REQUIRE_OK(js ? DS_OK : DS_ERR_OOM);
    ds_config back;
    REQUIRE_OK(ds_config_parse_string(js, &back, count_warn, NULL));
    CHECK_EQ_I(back.onebit, DS_ONEBIT_ZERO_ONE);
    CHECK_EQ_I((long long)back.local_step_clipper, 4);
    CHECK_TRUE(back.cuda_aware && !strcmp(back.comm_backend_name, "mpi"));
    free(js);
    /* DeepSpeed's adam.py and zoadam.py also name "hccl": accepted, the
     * engine's communicator carries the traffic as for the others */
    ds_config hc;
    REQUIRE_OK(ds_config_parse_string(
        "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"OneBitAdam\", \"params\": "
        "{\"comm_backend_name\": \"hccl\"}}}", &hc, count_warn, NULL));
    CHECK_TRUE(!strcmp(hc.comm_backend_name, "hccl"));
    /* the summary names the optimizer that runs */
    char *sum = ds_config_summary(&c);
    CHECK(sum && strstr(sum, "ZeroOneAdam") && strstr(sum, "local_step_clipper 4"),
          "summary: %s", sum ? sum : "(null)");
    free(sum);
}

typedef struct bad {
    const char *json;
    int world; /* 0: parse fails; else resolve at this world */
    ds_status st;
    const char *sub;
} bad;

#define OB(params) "{\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": {" params "}}"
#define ZO(params) "{\"optimizer\": {\"type\": \"ZeroOneAdam\", \"params\": {" params "}}"

static const bad k_bad[] = {
    {OB("") ", \"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1}}", 2, DS_ERR_CONFIG,
     "zero_optimization.stage: optimizer.type OneBitAdam runs at stage 0 only"},
    {ZO("") ", \"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3}}", 2, DS_ERR_CONFIG,
     "zero_optimization.stage: optimizer.type ZeroOneAdam runs at stage 0 only"},
    {OB("\"freeze_step\": 0") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.freeze_step: must be >= 1, got 0"},
    {OB("\"freeze_step\": -5") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.freeze_step: must be >= 1, got -5"},
    {OB("\"freeze_step\": 2.5") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.freeze_step: must be an integer, got 2.5"},
    {OB("\"freeze_step\": \"100\"") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.freeze_step: must be an integer"},
    {ZO("\"var_update_scaler\": 0") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.var_update_scaler: must be >= 1, got 0"},
    {ZO("\"local_step_clipper\": 0") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.local_step_clipper: must be >= 1, got 0"},
    {ZO("\"var_freeze_step\": -1") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.var_freeze_step: must be >= 0, got -1"},
    {OB("\"amsgrad\": true") "}", 0, DS_ERR_UNSUPPORTED, "optimizer.params.amsgrad: true"},
    {OB("\"comm_backend_name\": \"gloo\"") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.comm_backend_name"},
    {OB("\"cuda_aware\": 1") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.cuda_aware: must be true or false, got 1"},
    /* a key of the other optimizer, as DeepSpeed's constructor would refuse it */
    {OB("\"var_freeze_step\": 10") "}", 0, DS_ERR_CONFIG,
     "optimizer.params.var_freeze_step: unknown key"},
    {ZO("\"freeze_step\": 10") "}", 0, DS_ERR_CONFIG, "optimizer.params.freeze_step: unknown key"},
    /* the other compressed optimizer DeepSpeed has is still refused as such */
    {"{\"optimizer\": {\"type\": \"OneBitLamb\"}}", 0, DS_ERR_UNSUPPORTED,
     "optimizer.type: a DeepSpeed optimizer zero-engine does not implement"},
};

static void quiet(void *user, const char *msg) { (void)user, (void)msg; }

int main(void) {
    good();
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        const bad *b = &k_bad[i];
        ds_clear_error();
        ds_config c;
        ds_status st = ds_config_parse_string(b->json, &c, quiet, NULL);
        if (b->world > 0 && st == DS_OK) {
            ds_config_hints h;
            ds_config_hints_init(&h);
            h.world_size = b->world;
            st = ds_config_resolve(&c, &h);
        }
        CHECK(st == b->st && strstr(ds_last_error(), b->sub),
              "case %zu: %s\n  expected %s with \"%s\"\n  got %s: \"%s\"", i, b->json,
              ds_status_to_string(b->st), b->sub, ds_status_to_string(st), ds_last_error());
    }
    return test_finish("test_onebit_config");
}
