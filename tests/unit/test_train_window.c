/* ds_train_batch ends an epoch's last step early (engine_train_batch.c): an
 * epoch is every row once, a step never mixes two epochs, and the short
 * window's gradient is the mean of its micro-batches.
 *   counts  10 rows, micro batch 2, accumulation 2 (5 micro-batches an
 *           epoch): steps of 2, 2 and 1 micro-batches, samples 4, 8, 10,
 *           every step of the first three in epoch 0, the fourth in epoch 1
 *           at 14 samples; the same at accumulation 4 (4 + 1 micro-batches);
 *           11 rows: the short sixth micro-batch trains, or is dropped with
 *           dataloader_drop_last;
 *   mean    6 rows, micro batch 2: one epoch is a window of 3 micro-batches
 *           whether the accumulation is 4 (the window cut short at the
 *           epoch's end) or 3, so the first step of both engines, from the
 *           same seed, has the same loss, gradient norm and weights, bit for
 *           bit (the same micro-batches, summed in the same order, divided by
 *           the same 3). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

#define T 8
#define V 20
#define W_NUMEL (V * 8) /* embeddings.word_embeddings.weight [V, embed_dim 8] */

static ds_dataset *make_data(size_t n) {
    const char *names[2] = {"a", "b"};
    ds_dataset *d;
    if (ds_cls_dataset_create(n, T, 2, names, &d) != DS_OK) return NULL;
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < T; t++) {
            ids[i * T + (size_t)t] = 4 + (int)((i * 7 + (size_t)t * 3) % (V - 4));
            mask[i * T + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % 2);
    }
    return d;
}

static engine_t *start(const ds_dataset *data, int micro, int gas, bool drop_last) {
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 8, .hidden_dim = 16,
                      .n_hidden = 1, .n_classes = 2};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) TEST_DIE(ds_last_error());
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"steps_per_print\": 1000, \"dataloader_drop_last\": %s,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}",
             micro, gas, drop_last ? "true" : "false");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.seed = 5;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) TEST_DIE(ds_last_error());
    return e;
}

static void counts(size_t rows, bool drop_last, int gas, const int64_t *want_samples,
                   const int64_t *want_epoch, int steps) {
    ds_dataset *data = make_data(rows);
    if (!data) TEST_DIE(ds_last_error());
    engine_t *e = start(data, 2, gas, drop_last);
    for (int s = 0; s < steps; s++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            TEST_FAIL("gas %d step %d: %s", gas, s + 1, ds_last_error());
            break;
        }
        CHECK(info.samples == want_samples[s] && info.epoch == want_epoch[s],
              "gas %d step %d: %lld samples in epoch %lld, want %lld in epoch %lld", gas, s + 1,
              (long long)info.samples, (long long)info.epoch, (long long)want_samples[s],
              (long long)want_epoch[s]);
    }
    ds_finalize(e);
    ds_dataset_destroy(data);
}

static void first_step(int gas, ds_step_info *info, float *w) {
    ds_dataset *data = make_data(6);
    if (!data) TEST_DIE(ds_last_error());
    engine_t *e = start(data, 2, gas, false);
    if (ds_train_batch(e, info) != DS_OK) TEST_FAIL("gas %d: %s", gas, ds_last_error());
    if (ds_get_param(e, "embeddings.word_embeddings.weight", w, W_NUMEL) != DS_OK)
        TEST_FAIL("gas %d: ds_get_param: %s", gas, ds_last_error());
    ds_finalize(e);
    ds_dataset_destroy(data);
}

int main(void) {
    /* 5 micro-batches of 2 an epoch */
    const int64_t s2[4] = {4, 8, 10, 14}, e2[4] = {0, 0, 0, 1};
    counts(10, false, 2, s2, e2, 4);
    const int64_t s4[3] = {8, 10, 18}, e4[3] = {0, 0, 1};
    counts(10, false, 4, s4, e4, 3);
    /* 11 rows: the sixth micro-batch has 1 row; dataloader_drop_last drops
     * it, as DeepSpeed's DataLoader (the rows are not cut per rank first) */
    const int64_t s11[4] = {4, 8, 11, 15}, e11[4] = {0, 0, 0, 1};
    counts(11, false, 2, s11, e11, 4);
    const int64_t d11[4] = {4, 8, 10, 14}, f11[4] = {0, 0, 0, 1};
    counts(11, true, 2, d11, f11, 4);

    ds_step_info a, b;
    static float wa[W_NUMEL], wb[W_NUMEL];
    first_step(4, &a, wa);
    first_step(3, &b, wb);
    CHECK(a.samples == 6 && b.samples == 6, "samples %lld and %lld, want 6 (one epoch)",
          (long long)a.samples, (long long)b.samples);
    CHECK(a.loss == b.loss, "loss %.9g (accumulation 4, cut to 3) vs %.9g (3)", a.loss, b.loss);
    CHECK(a.grad_norm == b.grad_norm, "grad_norm %.9g vs %.9g", a.grad_norm, b.grad_norm);
    CHECK(memcmp(wa, wb, sizeof wa) == 0, "the weights after the step differ");
    return test_finish("test_train_window");
}
