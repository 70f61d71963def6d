/* What the engine is after a step's error it returns, for a caller that
 * carries on (2 ranks, the MLP of the checkpoint tests):
 *
 *   1. ds_train_batch whose forward failed on the second micro-batch of a
 *      window (gradient_accumulation_steps 2; rank 1's parameter fetch
 *      fails, injected): the next call completes that window and returns
 *      at its boundary, where a checkpoint can be saved, and so do the
 *      calls after it. It started the window over instead, so every later
 *      call crossed the boundary in its middle and returned one micro-batch
 *      into the next step, and every save was refused ("called inside a
 *      step") for good.
 *   2. ds_step failing after the reduction (fp16 overflow with the loss
 *      scale at min_loss_scale, "cannot learn"), at stages 0 and 2: the
 *      window's gradients go with the error, so each later call fails the
 *      same way. At stage 0 the next backward said "already reduced by an
 *      earlier backward" and then every call "ds_forward after
 *      ds_backward"; at stage 2 the old infinities stayed in the partition.
 *
 *   3. the same failure anywhere in the second window of an epoch of 28
 *      rows (2 ranks, micro batch 2, accumulation 4: windows of 4 and 3
 *      micro-batches), every fetch from the 40th to the 70th failing in
 *      turn: no step takes micro-batches of two epochs, so no epoch counts
 *      more than its 2 steps, and a save after every step that returned
 *      works. Completing the window from the next epoch, a failure on the
 *      epoch's last micro-batch made the next epoch's first step a mix.
 *
 *   4. (pending_forward below) a forward the caller left pending.
 *
 * argv[1]: a folder for the checkpoints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "models/models.h"

static int g_fail;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                              \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            g_fail = 1;                                                                        \
        }                                                                                      \
    } while (0)

static ds_dataset *g_data; /* the last engine's training data (the caller frees it) */

static engine_t *make_n(const char *cfg, size_t rows) {
    const int T = 12, V = 50;
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 16, .hidden_dim = 32,
                      .n_hidden = 1, .n_classes = 3};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) return NULL;
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = g_data = ck_make_data(rows, T, V);
    d.quiet = true;
    engine_t *e = NULL;
    if (ds_initialize(&d, &e) != DS_OK) {
        fprintf(stderr, "ds_initialize: %s\n", ds_last_error());
        return NULL;
    }
    return e;
}

static engine_t *make(const char *cfg) { return make_n(cfg, 16 * 40); }

static void failure_at_epoch_end(const char *dir, int nth) {
    engine_t *e = make_n("{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 4,"
                         " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}},"
                         " \"zero_optimization\": {\"stage\": 1}}",
                         28);
    if (!e) {
        g_fail = 1;
        return;
    }
    char spec[64];
    snprintf(spec, sizeof spec, "error:replica:fetch:rank=1:nth=%d", nth);
    setenv("DS_FAULT_INJECT", spec, 1);
    int per_epoch[8] = {0}, errors = 0;
    for (int call = 0; call < 7; call++) {
        ds_step_info info;
        ds_status st = ds_train_batch(e, &info);
        if (st != DS_OK) {
            errors++;
            continue;
        }
        if (info.epoch >= 0 && info.epoch < 8) per_epoch[info.epoch]++;
        st = ds_save_checkpoint(e, dir, NULL, NULL);
        CHECK(st == DS_OK, "nth %d, save after call %d: %s", nth, call, ds_last_error());
    }
    unsetenv("DS_FAULT_INJECT");
    CHECK(errors == 1, "nth %d: %d calls failed, want the one injected", nth, errors);
    for (int k = 0; k < 8; k++)
        CHECK(per_epoch[k] <= 2, "nth %d: %d steps in epoch %d, an epoch has 2 windows", nth,
              per_epoch[k], k);
    ds_finalize(e);
    ds_dataset_destroy(g_data); /* borrowed by the engine */
}

static void forward_fails_mid_window(const char *dir) {
    engine_t *e = make("{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,"
                       " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}},"
                       " \"zero_optimization\": {\"stage\": 1}}");
    if (!e) {
        g_fail = 1;
        return;
    }
    /* the 10th fetch of rank 1's replica is the second micro-batch's
     * forward of the first window (5 modules' parameters a forward) */
    setenv("DS_FAULT_INJECT", "error:replica:fetch:rank=1:nth=10", 1);
    ds_step_info info;
    ds_status st = ds_train_batch(e, &info);
    unsetenv("DS_FAULT_INJECT");
    CHECK(st != DS_OK && strstr(ds_last_error(), "failure injected"),
          "the first call: want the injected forward failure, got %s: %s",
          ds_status_to_string(st), ds_last_error());
    for (int i = 1; i <= 3; i++) {
        st = ds_train_batch(e, &info);
        CHECK(st == DS_OK && info.step == i, "call %d: %s, step %lld (want %d): %s", i,
              ds_status_to_string(st), (long long)info.step, i, ds_last_error());
        st = ds_save_checkpoint(e, dir, NULL, NULL);
        CHECK(st == DS_OK, "save after call %d: %s", i, ds_last_error());
    }
    ds_finalize(e);
    ds_dataset_destroy(g_data); /* borrowed by the engine */
}

static void cannot_learn(int stage) {
    char cfg[512];
    /* every step overflows at 2^30 and the scale may not go lower */
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 16, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 0.003}}, \"zero_optimization\": {\"stage\": %d}, \"fp16\": {\"enabled\": "
             "true, \"initial_scale_power\": 31, \"hysteresis\": 1, \"min_loss_scale\": "
             "1073741824}}",
             stage);
    engine_t *e = make(cfg);
    if (!e) {
        g_fail = 1;
        return;
    }
    int errors = 0;
    for (int i = 0; i < 5; i++) {
        ds_step_info info;
        ds_status st = ds_train_batch(e, &info);
        if (st == DS_OK) continue; /* the first steps skip while the scale comes down */
        errors++;
        CHECK(st == DS_ERR_NONFINITE && strstr(ds_last_error(), "min_loss_scale"),
              "stage %d, call %d: want the min_loss_scale error again, got %s: %s", stage, i,
              ds_status_to_string(st), ds_last_error());
    }
    CHECK(errors >= 2, "stage %d: %d calls failed, want the error at least twice", stage, errors);
    ds_finalize(e);
    ds_dataset_destroy(g_data); /* borrowed by the engine */
}

/* 4. The caller's own ds_forward, then ds_train_batch: refused, naming the
 *    calls that complete the micro-batch, before the loader uses up one of
 *    its own; after ds_backward and ds_step it trains on. */
static void pending_forward(void) {
    engine_t *e = make("{\"train_batch_size\": 16,"
                       " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}}");
    if (!e) {
        g_fail = 1;
        return;
    }
    ds_host_batch hb;
    size_t idx[2] = {0, 1};
    ds_status st = ds_host_batch_alloc(&hb, g_data, NULL, 2);
    if (st == DS_OK) st = ds_host_batch_fill(&hb, g_data, idx, 2);
    if (st == DS_OK) st = ds_forward(e, &hb.batch, NULL);
    CHECK(st == DS_OK, "the caller's forward: %s", ds_last_error());
    ds_step_info info;
    st = ds_train_batch(e, &info);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "ds_backward and ds_step"),
          "ds_train_batch with a forward pending: %s: %s", ds_status_to_string(st),
          ds_last_error());
    st = ds_backward(e);
    if (st == DS_OK) st = ds_step(e);
    if (st == DS_OK) st = ds_train_batch(e, &info);
    CHECK(st == DS_OK, "after the caller's backward and step: %s", ds_last_error());
    ds_host_batch_free(&hb);
    ds_finalize(e);
    ds_dataset_destroy(g_data); /* borrowed by the engine */
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s CKPT_DIR [NTH]\n", argv[0]);
        return 2;
    }
    if (argc == 3) { /* case 3, one fetch: the count runs per process */
        failure_at_epoch_end(argv[1], atoi(argv[2]));
        return g_fail;
    }
    forward_fails_mid_window(argv[1]);
    pending_forward();
    cannot_learn(0);
    cannot_learn(2);
    return g_fail;
}
