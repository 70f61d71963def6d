/* The offload tests' shared engine, comparisons and checkpoint crossing
 * (offload_harness.h). */
#include "offload_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_harness.h"
#include "tests/unit/test_util.h"

ds_bert_desc off_small_bert(int seq_len) {
    return (ds_bert_desc){.vocab_size = 50, .hidden_size = 32, .num_hidden_layers = 2,
                          .num_attention_heads = 4, .intermediate_size = 64,
                          .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = seq_len};
}

ds_status off_engine(int stage, const char *precision, const char *optimizer,
                     const char *zero_more, const char *top_more, const ds_bert_desc *bd,
                     const ds_dataset *data, engine_t **out) {
    ds_bert_desc d0 = bd ? *bd : off_small_bert(data->seq_len);
    ds_model *model;
    DS_TRY(ds_bert_create(&d0, &model));
    bool fp16 = !strcmp(precision, "fp16"), bf16 = !strcmp(precision, "bf16");
    bool sgd = !strcmp(optimizer, "SGD");
    char cfg[4096];
    int n = snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"gradient_accumulation_steps\": 2,"
             " \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.003, "
             "\"weight_decay\": 0.01%s}},"
             " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.001,"
             " \"warmup_max_lr\": 0.003, \"warmup_num_steps\": 3}},"
             " \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 1000%s}%s,"
             " \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 18, \"loss_scale_window\": 3,"
             " \"hysteresis\": 1}, \"bf16\": {\"enabled\": %s}}",
             OFF_GLOBAL_BATCH, optimizer, sgd ? ", \"momentum\": 0.9" : "", stage, zero_more,
             top_more, fp16 ? "true" : "false", bf16 ? "true" : "false");
    if (n < 0 || (size_t)n >= sizeof cfg) {
        ds_model_destroy(model);
        return DS_ERR(DS_ERR_INVALID_ARG, "off_engine: the config does not fit %zu bytes",
                      sizeof cfg);
    }
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    return ds_initialize(&d, out);
}

int off_harness_fails(void) { return test_fails(); }

void off_train(engine_t *e, int steps, ds_step_info *out) {
    for (int i = 0; i < steps; i++) REQUIRE_OK(ds_train_batch(e, &out[i]));
}

void off_same_steps(const char *what, const ds_step_info *a, const ds_step_info *b, int n) {
    for (int i = 0; i < n; i++) /* bit for bit: exact comparisons on purpose */
        CHECK(a[i].loss == b[i].loss && a[i].lr == b[i].lr &&
                  a[i].loss_scale == b[i].loss_scale && a[i].skipped == b[i].skipped,
              "%s: step %d: loss %a vs %a, lr %a vs %a, scale %g vs %g", what, i, a[i].loss,
              b[i].loss, a[i].lr, b[i].lr, a[i].loss_scale, b[i].loss_scale);
}

void off_same_params(const char *what, engine_t *a, engine_t *b) {
    size_t na, nb;
    float *pa = ck_params(a, &na), *pb = ck_params(b, &nb);
    CHECK(na == nb && memcmp(pa, pb, na * sizeof *pa) == 0, "%s: parameters differ", what);
    for (size_t i = 0, shown = 0; na == nb && i < na && shown < 3; i++)
        if (memcmp(&pa[i], &pb[i], sizeof *pa) != 0) {
            TEST_FAIL("%s: parameter element %zu: %a vs %a", what, i, pa[i], pb[i]);
            shown++;
        }
    free(pa);
    free(pb);
}

void off_check_moved(const ds_step_info *ref, int steps) {
    int updates = 0;
    for (int i = 0; i < steps; i++) updates += !ref[i].skipped;
    /* fp16 skips one step by design (off_engine); more would mean the
     * comparisons ran on weights that barely moved */
    CHECK(updates >= steps - 1 && ref[steps - 1].loss != ref[0].loss,
          "the reference run took %d updates of %d, loss %g -> %g", updates, steps, ref[0].loss,
          ref[steps - 1].loss);
}

void off_check_no_growth(const char *what, const ds_mem_report *before,
                         const ds_mem_report *after) {
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        for (int pl = 0; pl < DS_PLACE_COUNT; pl++)
            CHECK(after->bytes[p][pl] == before->bytes[p][pl] &&
                      after->peak[p][pl] == before->peak[p][pl],
                  "%s: %s on %s: %llu (peak %llu) after the steps, %llu (peak %llu) before", what,
                  ds_mem_purpose_name((ds_mem_purpose)p), ds_mem_place_name((ds_mem_place)pl),
                  (unsigned long long)after->bytes[p][pl], (unsigned long long)after->peak[p][pl],
                  (unsigned long long)before->bytes[p][pl],
                  (unsigned long long)before->peak[p][pl]);
}

void off_cross_load(engine_t *ref, engine_t *loads_plain, engine_t *loads_off,
                    const char *plain_dir, const char *off_dir, ds_step_info *ref_more,
                    const char *what) {
    char msg[256];
    ds_step_info tail[OFF_MORE];
    REQUIRE_OK(ds_load_checkpoint(loads_plain, plain_dir, NULL, DS_LOAD_ALL));
    REQUIRE_OK(ds_load_checkpoint(loads_off, off_dir, NULL, DS_LOAD_ALL));
    snprintf(msg, sizeof msg, "%s engine loading a plain checkpoint", what);
    off_same_params(msg, ref, loads_plain);
    snprintf(msg, sizeof msg, "plain engine loading a %s checkpoint", what);
    off_same_params(msg, ref, loads_off);
    off_train(ref, OFF_MORE, ref_more);
    off_train(loads_plain, OFF_MORE, tail);
    snprintf(msg, sizeof msg, "continued after loading into %s", what);
    off_same_steps(msg, ref_more, tail, OFF_MORE);
    off_train(loads_off, OFF_MORE, tail);
    snprintf(msg, sizeof msg, "continued after loading from %s", what);
    off_same_steps(msg, ref_more, tail, OFF_MORE);
    snprintf(msg, sizeof msg, "%s: after the continued steps", what);
    off_same_params(msg, ref, loads_plain);
}

void off_set_param_step(engine_t *ref, engine_t *off, int seed, const char *what) {
    const ds_param_desc *p0 = &ds_get_model(ref)->modules[0]->params[0];
    size_t n0 = (size_t)ds_param_numel(p0);
    float *v0 = malloc(n0 * sizeof *v0);
    if (!v0) TEST_DIE("out of memory");
    int period = 97 - 8 * (seed % 2); /* distinct values per seed, small, both signs */
    for (size_t i = 0; i < n0; i++)
        v0[i] = 0.001f * (float)(1 + seed) * (float)(i % (size_t)period) - 0.05f;
    REQUIRE_OK(ds_set_param(ref, p0->name, v0, n0));
    REQUIRE_OK(ds_set_param(off, p0->name, v0, n0));
    free(v0);
    char msg[256];
    snprintf(msg, sizeof msg, "after ds_set_param (%s)", what);
    off_same_params(msg, ref, off);
    ds_step_info a, b;
    off_train(ref, 1, &a);
    off_train(off, 1, &b);
    snprintf(msg, sizeof msg, "the step after ds_set_param (%s)", what);
    off_same_steps(msg, &a, &b, 1);
    off_same_params(msg, ref, off);
}
