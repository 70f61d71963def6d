/* A micro-batch the model refuses loses nothing, and when one rank refuses
 * its micro-batch every rank does, at once, saying which rank and why:
 *
 *   test_bad_batch --stage S [--no-range] [--checked]   (under mpirun, 1 or 2 ranks)
 *
 * Each rank feeds its own rows, with gradient accumulation 2. Mid-step (after
 * the first micro-batch of a step), the last rank's micro-batch holds a token
 * id outside the word table. Its ds_forward fails naming the id and where it
 * is; every other rank's fails too, with "rank R failed with
 * DS_ERR_INVALID_ARG: ..." and the same id. The BERT model declares its ids'
 * range (ds_model_input_range), so the engine refuses the batch before
 * copying it ("input_ids: row 0, element 5 holds 4000, outside [0, 4000)");
 * with --no-range the range is taken off, as a model that declares none, and
 * the embedding's forward finds the id ("id 4000 at position 5") part way
 * through the forward, after stage 3 gathered its table. Before, the other ranks went on
 * into the collectives of the forward (stage 3 gathers every module's
 * parameters, stages 1 and 2 exchange an embedding's rows, every stage agrees
 * the loss weights) and waited there for the failed rank until
 * comm_timeout_s (set to 60 s here, far above the ~1 s a run takes), then
 * reported a timeout and not the id. Then rank 0's batch is one row larger
 * than planned (refused before anything is copied, so before any collective):
 * the same, the other way round.
 *
 * Ten bad batches come in a row, the gathered parameters dropped after each
 * (ds_get_param and ds_set_param of the table with its own values, as a
 * checkpoint load does). With stage3_param_persistence_threshold 0 each use
 * of a module gathers it into a slot; a failed forward that kept its slot in
 * use would leave none ("no free gather slot", after a few bad batches).
 *
 * ds_evaluate and ds_predict of a bad batch on the last rank: that rank's
 * call fails, the others' finish (the failed rank still takes part in the
 * gathers).
 *
 * A ds_step with no ds_backward since the last one is refused, and a second
 * ds_forward before the first's ds_backward.
 *
 * After all of it the engine trains exactly as one that never saw the bad
 * batches: the same parameters, bit for bit, on every rank.
 *
 * A backward that fails on one rank (DS_FAULT_INJECT=error:backward:<module>
 * on the last rank, in an encoder layer, which hands its gradients over in
 * two parts): that rank's ds_backward fails naming the module, the others'
 * work, and since the failing rank's backward went on through the modules
 * before it, every rank reaches the boundary, where every rank's ds_step
 * fails, the others naming the failing rank, and the window's gradients are
 * dropped everywhere: the parameters are as before the window, and (without
 * dropout, whose streams follow the micro-batches counted) the next window
 * trains exactly as in an engine that never saw the failed one. The same
 * through ds_train_batch. The buckets (3000 elements, overlap_comm) are cut
 * inside an encoder layer's span, so at stages 2 and 3 the failing rank
 * must hand the failed layer's gradients over in the layer's two parts, as
 * the others do (--checked compares every bucket's counts). Before, the other ranks waited in the backward's
 * collectives until comm_timeout_s.
 *
 * Last, a training dataset with a row the model cannot read: ds_initialize
 * refuses it, naming the column, row, element and value.
 *
 * --checked: all of it with zero_engine.check_collectives, so the refusing
 * rank's walk through the collectives it did not compute must match the
 * others' calls exactly (names, counts, dtypes), not only in number: a walk
 * that joined a gather with another size would otherwise pass wherever the
 * sizes were never compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h" /* ck_params */
#include "tests/unit/test_util.h"

#define SEQ 16
#define ROWS 128
#define MICRO 4
#define GAS 2
#define VOCAB 4000
#define WORDS "bert.embeddings.word_embeddings.weight"

static bool g_checked; /* --checked */
static float g_dropout = 0.1f;

static ds_status init(const ds_dataset *data, int stage, bool range, bool quiet, engine_t **e) {
    ds_bert_desc bd = {.vocab_size = VOCAB, .hidden_size = 32, .num_hidden_layers = 2,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 32, .hidden_dropout_prob = g_dropout,
                       .attention_probs_dropout_prob = g_dropout, .n_classes = 3,
                       .max_seq_len = SEQ};
    ds_model *model;
    if (ds_bert_create(&bd, &model) != DS_OK) TEST_DIE("model");
    if (!range) /* a model that declares no range for its ids */
        for (int i = 0; i < model->n_inputs; i++) model->inputs[i].lo = model->inputs[i].hi = 0;
    char cfg[640];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"steps_per_print\": 1000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},"
             " \"zero_optimization\": {\"stage\": %d,"
             " \"stage3_param_persistence_threshold\": 0, \"reduce_bucket_size\": 3000,"
             " \"overlap_comm\": true},"
             " \"zero_engine\": {\"comm_timeout_s\": 60, \"check_collectives\": %s}}",
             MICRO, GAS, stage, g_checked ? "true" : "false");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = quiet;
    return ds_initialize(&d, e);
}

/* The table's own values back: every gathered parameter dropped (as a
 * checkpoint load does), so the next forward gathers each module again at
 * stage 3 (every module: persistence threshold 0), a collective per module
 * that a rank refusing its batch must still join. */
static void drop_gathered(engine_t *e) {
    const size_t nw = (size_t)VOCAB * 32;
    float *w = malloc(nw * sizeof *w);
    if (!w) TEST_DIE("out of memory");
    CHECK_OK(ds_get_param(e, WORDS, w, nw));
    CHECK_OK(ds_set_param(e, WORDS, w, nw));
    free(w);
}

static engine_t *make(const ds_dataset *data, int stage, bool range, bool quiet) {
    engine_t *e;
    REQUIRE_OK(init(data, stage, range, quiet, &e));
    return e;
}

/* This rank's micro-batch i: rows [MICRO * (world * i + rank), + MICRO),
 * ids from `ids`. */
static ds_batch batch_of(engine_t *e, const ds_dataset *data, const int32_t *ids, int i) {
    ds_batch b = {.B = MICRO, .T = SEQ};
    size_t r = (size_t)MICRO * (size_t)(ds_world_size(e) * i + ds_rank(e));
    ds_dataset *d = (ds_dataset *)data;
    const float *mask = ds_dataset_f32(d, "attention_mask");
    if (ds_batch_set(&b, "input_ids", DS_I32, ids + r * SEQ) != DS_OK ||
        ds_batch_set(&b, "attention_mask", DS_F32, mask + r * SEQ) != DS_OK ||
        ds_batch_set(&b, "labels", DS_I32, ds_dataset_i32(d, "labels") + r) != DS_OK)
        TEST_DIE("batch");
    return b;
}

/* Forward, backward and step of micro-batch i. */
static void micro(engine_t *e, const ds_dataset *data, int i) {
    ds_batch b = batch_of(e, data, ds_dataset_i32((ds_dataset *)data, "input_ids"), i);
    CHECK_OK(ds_forward(e, &b, NULL));
    CHECK_OK(ds_backward(e));
    CHECK_OK(ds_step(e));
}

/* Every rank's ds_forward fails: `culprit` with its own message (containing
 * `why`), every other rank naming it. */
static void expect_refused(ds_status st, int rank, int culprit, const char *why) {
    char who[64];
    snprintf(who, sizeof who, "rank %d failed with DS_ERR_INVALID_ARG", culprit);
    const char *msg = ds_last_error();
    CHECK(st == DS_ERR_INVALID_ARG && strstr(msg, why) && (rank == culprit || strstr(msg, who)),
          "rank %d of a batch refused by rank %d: %s \"%s\"", rank, culprit,
          ds_status_to_string(st), msg);
    ds_clear_error();
}

#define FAILING "bert.encoder.layer.1"

/* Arm (or, with rank < 0, disarm) the failure of FAILING's backward on
 * `rank`. */
static void arm_backward_fault(int rank) {
    char spec[128];
    snprintf(spec, sizeof spec, "error:backward:" FAILING ":rank=%d", rank);
    if (rank >= 0) setenv("DS_FAULT_INJECT", spec, 1);
    else unsetenv("DS_FAULT_INJECT");
}

/* ds_step at the boundary of a window whose backward failed on `culprit`:
 * fails on every rank, the step skipped. */
static void expect_dropped(ds_status st, int rank, int culprit) {
    const char *msg = ds_last_error();
    char who[64];
    snprintf(who, sizeof who, "rank %d failed with DS_ERR_IO", culprit);
    CHECK(st == DS_ERR_IO && strstr(msg, "skipped, its gradients dropped on every rank") &&
              strstr(msg, "backward of " FAILING) && (rank == culprit || strstr(msg, who)),
          "rank %d's step after rank %d's backward failed: %s \"%s\"", rank, culprit,
          ds_status_to_string(st), msg);
    ds_clear_error();
}

/* The backward failures (above); without dropout, so that the windows
 * after a dropped one compare bit for bit with an engine that never ran
 * it. Micro-batches 0-1 train both engines, 2-3 are the failed window
 * (the failure in the first of them), 4-5 train both again. */
static void bad_backward(const ds_dataset *data, int stage, bool range) {
    g_dropout = 0.0f;
    engine_t *e = make(data, stage, range, true), *ref = make(data, stage, range, true);
    g_dropout = 0.1f;
    int rank = ds_rank(e), last = ds_world_size(e) - 1;
    for (int i = 0; i < 2; i++) {
        micro(e, data, i);
        micro(ref, data, i);
    }
    size_t n0, n;
    float *p0 = ck_params(e, &n0);
    const int32_t *ids = ds_dataset_i32((ds_dataset *)data, "input_ids");
    ds_batch b = batch_of(e, data, ids, 2);
    CHECK_OK(ds_forward(e, &b, NULL));
    arm_backward_fault(last);
    ds_status st = ds_backward(e);
    arm_backward_fault(-1);
    CHECK(rank == last ? st == DS_ERR_IO && strstr(ds_last_error(), "backward of " FAILING)
                       : st == DS_OK,
          "backward with the last rank's failing: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    ds_clear_error();
    CHECK_OK(ds_step(e)); /* not the boundary: it only counts */
    b = batch_of(e, data, ids, 3);
    CHECK_OK(ds_forward(e, &b, NULL));
    CHECK_OK(ds_backward(e));
    expect_dropped(ds_step(e), rank, last);
    ds_step_info info;
    CHECK_OK(ds_last_step_info(e, &info));
    CHECK(info.skipped && info.step == 2, "the dropped step: skipped %d, step %lld",
          (int)info.skipped, (long long)info.step);
    float *p = ck_params(e, &n);
    CHECK(p && p0 && n == n0 && !memcmp(p, p0, n * sizeof *p),
          "a dropped window changed the parameters");
    free(p);
    free(p0);
    for (int i = 4; i < 6; i++) {
        micro(e, data, i);
        micro(ref, data, i);
    }
    size_t nr;
    p = ck_params(e, &n);
    float *pr = ck_params(ref, &nr);
    CHECK(p && pr && n == nr && !memcmp(p, pr, n * sizeof *p),
          "after a dropped window the next one trained otherwise than without it");
    free(p);
    free(pr);
    /* through the engine's own loader: the window runs to its boundary */
    arm_backward_fault(last);
    expect_dropped(ds_train_batch(e, NULL), rank, last);
    arm_backward_fault(-1);
    ds_step_info after;
    CHECK_OK(ds_train_batch(e, &after));
    CHECK(!after.skipped, "the window after a dropped one was skipped too");
    ds_finalize(e);
    ds_finalize(ref);
}

int main(int argc, char **argv) {
    int stage = -1;
    bool range = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--stage") && i + 1 < argc) stage = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-range")) range = false;
        else if (!strcmp(argv[i], "--checked")) g_checked = true;
    }
    if (stage < 0 || stage > 3) TEST_DIE("usage: test_bad_batch --stage 0..3 [--no-range]");
    const char *why = range ? "input_ids: row 0, element 5 holds 4000, outside [0, 4000)"
                            : "id 4000 at position 5";
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

    /* ref: quiet on every rank but 0, each its own value (the start-up
     * report is collective; before, rank 0 waited in it alone) */
    const char *wr = getenv("OMPI_COMM_WORLD_RANK");
    engine_t *e = make(data, stage, range, true);
    engine_t *ref = make(data, stage, range, wr && atoi(wr) != 0);
    int rank = ds_rank(e), world = ds_world_size(e);
    if (world > 2) TEST_DIE("test_bad_batch: the data holds micro-batches for 2 ranks");
    test_set_rank(world > 1 ? rank : -1);
    int last = world - 1;
    int32_t *bad = malloc(sizeof(int32_t) * ROWS * SEQ);
    if (!bad) TEST_DIE("out of memory");
    memcpy(bad, ids, sizeof(int32_t) * ROWS * SEQ);
    /* micro-batch 3 of the last rank, position 5 */
    bad[((size_t)MICRO * (size_t)(world * 3 + last)) * SEQ + 5] = VOCAB;

    for (int i = 0; i < 3; i++) { /* one step, and the first micro-batch of the next */
        micro(e, data, i);
        micro(ref, data, i);
    }

    for (int k = 0; k < 10; k++) {
        ds_batch b = batch_of(e, data, rank == last ? bad : ids, 3);
        expect_refused(ds_forward(e, &b, NULL), rank, last, why);
        drop_gathered(e);
    }

    /* refused before anything is copied: rank 0 never reaches a collective of
     * its own forward */
    ds_batch big = batch_of(e, data, ids, 3);
    if (rank == 0) big.B = MICRO + 1;
    expect_refused(ds_forward(e, &big, NULL), rank, 0, "batch of 5 rows");

    /* an evaluation refused by one rank: the others' finish */
    ds_batch ev = batch_of(e, data, rank == last ? bad : ids, 3);
    double loss, weight;
    drop_gathered(e);
    ds_status st = ds_evaluate(e, &ev, &loss, &weight);
    CHECK(rank == last ? st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), why)
                       : st == DS_OK,
          "evaluate with the last rank's batch bad: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    ds_clear_error();
    /* and a prediction (through the module before the loss): the same */
    float logits[MICRO * 3];
    drop_gathered(e);
    st = ds_predict(e, &ev, logits);
    CHECK(rank == last ? st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), why)
                       : st == DS_OK,
          "predict with the last rank's batch bad: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    ds_clear_error();

    /* a step without a backward (the refused forwards had none) is refused
     * and changes nothing: it would have counted a micro-batch nobody
     * computed and, here at the boundary, updated on half the gradients */
    ds_status lone = ds_step(e);
    CHECK(lone == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "without ds_backward"),
          "a step without backward: %s \"%s\"", ds_status_to_string(lone), ds_last_error());
    ds_clear_error();

    /* a second forward before the first's backward is refused and changes
     * nothing either (its loss would have counted in the step's) */
    ds_batch good = batch_of(e, data, ids, 3);
    CHECK_OK(ds_forward(e, &good, NULL));
    ds_status twice = ds_forward(e, &good, NULL);
    CHECK(twice == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "ds_backward"),
          "a second forward: %s \"%s\"", ds_status_to_string(twice), ds_last_error());
    ds_clear_error();
    CHECK_OK(ds_backward(e));
    CHECK_OK(ds_step(e));
    micro(ref, data, 3);
    for (int i = 4; i < 8; i++) {
        micro(e, data, i);
        micro(ref, data, i);
    }
    size_t n, nr;
    float *p = ck_params(e, &n), *pr = ck_params(ref, &nr);
    CHECK(p && pr && n == nr && !memcmp(p, pr, n * sizeof *p),
          "after the refused batches the parameters differ from a run without them");
    free(p);
    free(pr);
    free(bad);
    ds_finalize(e);
    ds_finalize(ref);

    bad_backward(data, stage, range);

    /* a dataset row the model cannot read is refused at ds_initialize, on
     * every rank alike (each holds the whole dataset), naming it */
    if (range) {
        ids[77 * SEQ + 2] = VOCAB;
        engine_t *none = NULL;
        ds_status st0 = init(data, stage, range, true, &none);
        CHECK(st0 == DS_ERR_INVALID_ARG && !none &&
                  strstr(ds_last_error(), "training data: column input_ids: row 77, element 2 "
                         "holds 4000, outside [0, 4000)"),
              "a bad dataset row: %s \"%s\"", ds_status_to_string(st0), ds_last_error());
        ds_clear_error();
    }
    ds_dataset_destroy(data);
    return test_finish("test_bad_batch");
}
