/* Forced fp16 overflow: a loss scale of 2^32 overflows the fp16 gradients.
 * DeepSpeed's semantics (hysteresis 2): the first overflow only uses up the
 * hysteresis, every later one halves the scale; every overflowing step is
 * skipped on all ranks (no parameter changes) until the scale fits, after
 * which steps apply. Runs at stage 2, where each rank sees only its own
 * gradient partition, so the skip must be agreed across ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"

int main(void) {
    const int T = 8, V = 64;
    const char *names[2] = {"a", "b"};
    ds_dataset *data;
    if (ds_cls_dataset_create(256, T, 2, names, &data) != DS_OK) return 1;
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    for (size_t i = 0; i < 256; i++) {
        for (int t = 0; t < T; t++) {
            ids[i * T + (size_t)t] = (int)((i + (size_t)t * 5) % V);
            mask[i * T + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % 2);
    }
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 16, .hidden_dim = 32,
                      .n_hidden = 1, .n_classes = 2};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) return 1;
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = "{\"train_batch_size\": 16, \"steps_per_print\": 1000,"
                    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-2}},"
                    " \"zero_optimization\": {\"stage\": 2},"
                    " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 32,"
                    "            \"hysteresis\": 2, \"loss_scale_window\": 1000}}";
    d.model = model;
    d.train_data = data;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        printf("FAIL: %s\n", ds_last_error());
        return 1;
    }
    int rank = ds_rank(e), fails = 0;
    const char *probe = "classifier.weight";
    size_t np = 2 * 32;
    float *before = malloc(np * 4), *after = malloc(np * 4);
    double scale = ldexp(1.0, 32);
    int skipped = 0, applied = 0;
    for (int step = 1; step <= 40 && applied < 3; step++) {
        if (ds_get_param(e, probe, before, np) != DS_OK) return 1;
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            printf("FAIL: %s\n", ds_last_error());
            return 1;
        }
        if (ds_get_param(e, probe, after, np) != DS_OK) return 1;
        bool changed = memcmp(before, after, np * 4) != 0;
        /* the same decision on every rank */
        double flags[2] = {info.skipped, -(double)info.skipped};
        ds_all_reduce_host(e, flags, 2, DS_F64);
        int world = ds_world_size(e);
        if (flags[0] != 0 && flags[0] != world) {
            if (rank == 0) printf("FAIL: step %d skipped on some ranks only\n", step);
            fails++;
        }
        if (info.skipped) {
            skipped++;
            /* expected scale after this overflow */
            if (skipped >= 2) scale /= 2;
            if (changed) {
                if (rank == 0) printf("FAIL: step %d was skipped but parameters changed\n", step);
                fails++;
            }
        } else {
            applied++;
            if (!changed) {
                if (rank == 0) printf("FAIL: step %d applied but parameters unchanged\n", step);
                fails++;
            }
        }
        if (info.loss_scale != scale) {
            if (rank == 0)
                printf("FAIL: step %d: loss scale %g, expected %g\n", step, info.loss_scale, scale);
            fails++;
        }
        if (rank == 0)
            printf("step %2d: %s, loss scale %g\n", step, info.skipped ? "skipped" : "applied",
                   info.loss_scale);
    }
    if (skipped < 2 || applied < 3) {
        if (rank == 0) printf("FAIL: %d skipped, %d applied\n", skipped, applied);
        fails++;
    }
    free(before);
    free(after);
    ds_finalize(e);
    ds_dataset_destroy(data);
    if (rank == 0) printf("%s\n", fails ? "test_fp16_overflow: FAILED" : "test_fp16_overflow: ok");
    return fails != 0;
}
