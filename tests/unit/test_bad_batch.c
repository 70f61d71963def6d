/* A micro-batch the model refuses loses nothing: at stage 3 (one rank), a
 * forward whose input_ids hold an id outside the word table fails naming the
 * id and its position; after it, a ds_set_param (which drops the gathered
 * parameters, as a checkpoint load does) and more steps train exactly as an
 * engine that never saw the bad batch: the same parameters, bit for bit.
 * The table (4000 x 32) is above stage3_param_persistence_threshold (1e5
 * elements), so each use gathers it into a slot. Before, the failed forward
 * kept that slot in use; once the parameters were dropped no slot was left
 * that could hold the table ("no free gather slot", after a few bad batches).
 * Last, a second ds_forward before the first's ds_backward: refused, and the
 * step after it the same as without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h" /* ck_params */
#include "tests/unit/test_util.h"

#define SEQ 16
#define ROWS 64
#define MICRO 8
#define VOCAB 4000
#define WORDS "bert.embeddings.word_embeddings.weight"

static engine_t *make(const ds_dataset *data) {
    ds_bert_desc bd = {.vocab_size = VOCAB, .hidden_size = 32, .num_hidden_layers = 2,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 32, .hidden_dropout_prob = 0.1f,
                       .attention_probs_dropout_prob = 0.1f, .n_classes = 3, .max_seq_len = SEQ};
    ds_model *model;
    if (ds_bert_create(&bd, &model) != DS_OK) TEST_DIE("model");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = "{\"train_batch_size\": 8, \"steps_per_print\": 1000,"
                    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},"
                    " \"zero_optimization\": {\"stage\": 3}}";
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) TEST_DIE("ds_initialize");
    return e;
}

/* Rows [MICRO * i, MICRO * (i + 1)) of the data, ids from `ids`. */
static ds_batch batch_of(const ds_dataset *data, const int32_t *ids, int i) {
    ds_batch b = {.B = MICRO, .T = SEQ};
    size_t r = (size_t)i * MICRO;
    ds_dataset *d = (ds_dataset *)data;
    const float *mask = ds_dataset_f32(d, "attention_mask");
    if (ds_batch_set(&b, "input_ids", DS_I32, ids + r * SEQ) != DS_OK ||
        ds_batch_set(&b, "attention_mask", DS_F32, mask + r * SEQ) != DS_OK ||
        ds_batch_set(&b, "labels", DS_I32, ds_dataset_i32(d, "labels") + r) != DS_OK)
        TEST_DIE("batch");
    return b;
}

static void train(engine_t *e, const ds_dataset *data, int i) {
    ds_batch b = batch_of(data, ds_dataset_i32((ds_dataset *)data, "input_ids"), i);
    CHECK_OK(ds_forward(e, &b, NULL));
    CHECK_OK(ds_backward(e));
    CHECK_OK(ds_step(e));
}

int main(void) {
    const char *names[3] = {"a", "b", "c"};
    ds_dataset *data;
    if (ds_cls_dataset_create(ROWS, SEQ, 3, names, &data) != DS_OK) TEST_DIE("data");
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    for (size_t i = 0; i < ROWS; i++) {
        for (int t = 0; t < SEQ; t++) {
            ids[i * SEQ + (size_t)t] = (int)((i * 7 + (size_t)t * 3) % VOCAB);
            mask[i * SEQ + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % 3);
    }
    int32_t bad[ROWS * SEQ];
    memcpy(bad, ids, sizeof bad);
    bad[MICRO * SEQ + 5] = VOCAB; /* batch 1, position 5 */

    engine_t *e = make(data), *ref = make(data);
    train(e, data, 0);
    train(ref, data, 0);

    /* ten refused batches, the gathered parameters dropped after each (the
     * same values back): a slot kept in use by each would leave none */
    const size_t nw = (size_t)VOCAB * 32;
    float *w = malloc(nw * sizeof *w);
    if (!w) TEST_DIE("out of memory");
    for (int k = 0; k < 10; k++) {
        ds_batch b = batch_of(data, bad, 1);
        ds_status st = ds_forward(e, &b, NULL);
        CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "id 4000 at position 5"),
              "a bad id: %s \"%s\"", ds_status_to_string(st), ds_last_error());
        ds_clear_error();
        CHECK_OK(ds_get_param(e, WORDS, w, nw));
        CHECK_OK(ds_set_param(e, WORDS, w, nw));
    }
    free(w);

    /* a second forward before the first's backward is refused and changes
     * nothing either (its loss would have counted in the step's) */
    ds_batch good = batch_of(data, ds_dataset_i32(data, "input_ids"), 1);
    CHECK_OK(ds_forward(e, &good, NULL));
    ds_status twice = ds_forward(e, &good, NULL);
    CHECK(twice == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "ds_backward"),
          "a second forward: %s \"%s\"", ds_status_to_string(twice), ds_last_error());
    ds_clear_error();
    CHECK_OK(ds_backward(e));
    CHECK_OK(ds_step(e));
    train(ref, data, 1);
    for (int i = 2; i < 4; i++) {
        train(e, data, i);
        train(ref, data, i);
    }
    size_t n, nr;
    float *p = ck_params(e, &n), *pr = ck_params(ref, &nr);
    CHECK(p && pr && n == nr && !memcmp(p, pr, n * sizeof *p),
          "after the refused batch the parameters differ from a run without it");
    free(p);
    free(pr);
    ds_finalize(e);
    ds_finalize(ref);
    ds_dataset_destroy(data);
    return test_finish("test_bad_batch");
}
