/* Ranks that resolve different configs (each host's copy of the file, or an
 * "auto" input that differs) fail at ds_initialize, every rank with
 * DS_ERR_CONFIG naming the key, both values and the rank, instead of
 * hanging in a split or corrupting a gather (seen with zero_hpz_partition_
 * size and mics_shard_size set on some ranks only: a 20 s wait naming no
 * key, MPI_ERR_TRUNCATE, a segfault). At 3 ranks, the last one differing
 * (so the ranks that agree with rank 0 are told by another rank):
 *
 * - zero_optimization.stage 2 on rank 2, 1 elsewhere;
 * - zero_hpz_partition_size 3 on rank 2 only (stage 3 everywhere);
 * - a key only rank 2's config has a value for (gradient_clipping);
 * - the same config everywhere: it initialises and trains a step; so do
 *   configs that differ only in what a host sets for itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

static ds_dataset *g_data;

static ds_status init(const char *json, engine_t **e) {
    ds_mlp_desc md = {.vocab_size = 32, .max_seq_len = 4, .embed_dim = 8, .hidden_dim = 8,
                      .n_hidden = 1, .n_classes = 2};
    ds_model *model = NULL;
    DS_TRY(ds_mlp_create(&md, &model));
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.model = model;
    d.config_json = json;
    d.train_data = g_data;
    d.quiet = true;
    return ds_initialize(&d, e);
}

#define BASE "{\"train_micro_batch_size_per_gpu\": 2, \"steps_per_print\": 1000, "

/* rank 2 runs `theirs`, the others `ours`; each must fail naming `key`
 * and, on rank 2, both values */
static void differ(int rank, const char *ours, const char *theirs, const char *key,
                   const char *values) {
    engine_t *e = NULL;
    ds_status st = init(rank == 2 ? theirs : ours, &e);
    CHECK(st == DS_ERR_CONFIG, "%s: ds_initialize gave %s, want DS_ERR_CONFIG (%s)", key,
          ds_status_to_string(st), ds_last_error());
    CHECK(e == NULL, "%s: failed, yet an engine", key);
    const char *msg = ds_last_error();
    CHECK(strstr(msg, key) != NULL, "%s: the message does not name the key: %s", key, msg);
    if (rank == 2)
        CHECK(strstr(msg, values) != NULL, "%s: rank 2's message lacks \"%s\": %s", key, values,
              msg);
    else
        CHECK(strstr(msg, "rank 2") != NULL, "%s: rank %d is not told which rank: %s", key, rank,
              msg);
    ds_finalize(e);
}

int main(void) {
    const char *names[2] = {"a", "b"};
    if (ds_cls_dataset_create(64, 4, 2, names, &g_data) != DS_OK) TEST_DIE(ds_last_error());
    int32_t *ids = ds_dataset_i32(g_data, "input_ids"), *labels = ds_dataset_i32(g_data, "labels");
    float *mask = ds_dataset_f32(g_data, "attention_mask");
    for (size_t i = 0; i < 64 * 4; i++) {
        ids[i] = (int32_t)(i % 32);
        mask[i] = 1.0f;
    }
    for (size_t i = 0; i < 64; i++) labels[i] = (int32_t)(i % 2);

    /* the world and rank from a first engine that agrees */
    engine_t *e = NULL;
    REQUIRE_OK(init(BASE "\"zero_optimization\": {\"stage\": 1}}", &e));
    int rank = ds_rank(e), world = ds_world_size(e);
    test_set_rank(rank);
    ds_step_info info;
    CHECK_OK(ds_train_batch(e, &info));
    ds_finalize(e);
    if (world != 3) TEST_DIE("run at 3 ranks");

    differ(rank, BASE "\"zero_optimization\": {\"stage\": 1}}",
           BASE "\"zero_optimization\": {\"stage\": 2}}", "zero_optimization.stage",
           "rank 0 runs with 1, rank 2 with 2");
    differ(rank, BASE "\"zero_optimization\": {\"stage\": 3}}",
           BASE "\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 3}}",
           "zero_optimization.zero_hpz_partition_size", "rank 0 runs with 1, rank 2 with 3");
    differ(rank, BASE "\"gradient_clipping\": 0.0}", BASE "\"gradient_clipping\": 1.0}",
           "gradient_clipping", "rank 0 runs with 0, rank 2 with 1");

    /* what a host may set for itself (its aio threads, its thread count)
     * and what only rank 0 uses (a monitor's output path) may differ */
    REQUIRE_OK(init(rank == 2 ? BASE "\"aio\": {\"thread_count\": 2}, \"zero_engine\": "
                                     "{\"num_threads\": 1}, \"csv_monitor\": {\"output_path\": "
                                     "\"elsewhere\"}}"
                              : BASE "\"aio\": {\"thread_count\": 1}}",
                    &e));
    CHECK_OK(ds_train_batch(e, &info));
    ds_finalize(e);

    /* agreeing again afterwards: nothing was left half-built */
    REQUIRE_OK(init(BASE "\"zero_optimization\": {\"stage\": 2}}", &e));
    CHECK_OK(ds_train_batch(e, &info));
    ds_finalize(e);
    ds_dataset_destroy(g_data);
    return test_finish("test_config_agree");
}
