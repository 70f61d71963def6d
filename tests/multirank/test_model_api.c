/* The model API through the engine, at the stage given on the command line
 * and whatever world size mpirun starts:
 *
 *  - tied parameters: a model whose embedding table is also its output
 *    projection (tied_model.h) gets, for the table, the SUM of the gradients
 *    its untied twin gets for its table and its own head.weight, from the
 *    same values; the alias head.weight reads the table; after steps the
 *    alias still reads the table (one parameter, not two copies drifting);
 *    zero_to_fp32 stores it once, under the owner's name;
 *  - ds_evaluate: the loss and weight of a batch without touching training
 *    state; refused between ds_forward and ds_backward, as ds_predict is;
 *  - bad batches: an undeclared tensor, a missing input, a wrong dtype, each
 *    named in the message, and the engine still trains afterwards;
 *  - ds_save_weights when rank 0 cannot write: every rank's call fails.
 *
 *   test_model_api --stage S [--dir TMPDIR] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "engine/io/safetensors.h"
#include "models/models.h"
#include "tests/unit/test_util.h"
#include "tied_model.h"

enum { V = 50, E = 16, T = 12, B = 4 };
static const char *k_table = "embeddings.word_embeddings.weight";

static engine_t *make_engine(int stage, bool tied) {
    ds_model *m;
    REQUIRE_OK(tm_create(V, E, T, tied, &m));
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             " \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 500,"
             " \"stage3_param_persistence_threshold\": 0}}",
             B, stage);
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = m;
    d.quiet = true;
    engine_t *e;
    REQUIRE_OK(ds_initialize(&d, &e));
    return e;
}

static float *get(engine_t *e, const char *name, size_t n, bool grad) {
    float *v = malloc(n * sizeof *v);
    if (!v) TEST_DIE("out of memory");
    REQUIRE_OK(grad ? ds_get_grad(e, name, v, n) : ds_get_param(e, name, v, n));
    return v;
}

/* Every parameter of `to` set from `from` (the untied head.weight from the
 * tied alias, which is the table). */
static void copy_params(engine_t *from, engine_t *to) {
    const ds_model *m = ds_get_model(to);
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            const ds_param_desc *d = &m->modules[i]->params[p];
            size_t n = (size_t)ds_param_numel(d);
            float *v = get(from, d->name, n, false);
            CHECK_OK(ds_set_param(to, d->name, v, n));
            free(v);
        }
}

static double max_rel(const float *a, const double *b, size_t n) {
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs(a[i] - b[i]));
    return scale > 0 ? err / scale : err;
}

static void test_tied_gradients(int stage, ds_host_batch *hb) {
    engine_t *a = make_engine(stage, true), *b = make_engine(stage, false);
    copy_params(a, b);
    float la, lb;
    CHECK_OK(ds_forward(a, &hb->batch, &la));
    CHECK_OK(ds_backward(a));
    CHECK_OK(ds_forward(b, &hb->batch, &lb));
    CHECK_OK(ds_backward(b));
    /* the same values through the same arithmetic */
    CHECK(la == lb, "tied loss %.9g, untied %.9g", la, lb);
    size_t n = (size_t)V * E;
    float *ga = get(a, k_table, n, true), *gb_t = get(b, k_table, n, true),
          *gb_h = get(b, "head.weight", n, true), *alias = get(a, "head.weight", n, true);
    double *sum = malloc(n * sizeof *sum);
    for (size_t i = 0; i < n; i++) sum[i] = (double)gb_t[i] + (double)gb_h[i];
    /* The tied slot adds the head's gradient and the embedding's rows in
     * another order than the untied pair summed here in double: a few
     * float32 roundings of the largest entry, relative to it. */
    double err = max_rel(ga, sum, n);
    CHECK(err < 8 * 1.2e-7, "stage %d: tied table gradient vs untied table + head: %.3g", stage,
          err);
    CHECK(memcmp(ga, alias, n * sizeof *ga) == 0, "the alias head.weight reads another gradient");
    double head_norm = 0;
    for (size_t i = 0; i < n; i++) head_norm += (double)gb_h[i] * gb_h[i];
    CHECK(head_norm > 0, "the head contributes no gradient: the test would prove nothing");
    free(ga), free(gb_t), free(gb_h), free(alias), free(sum);

    /* after updates the alias is still the table */
    CHECK_OK(ds_step(a));
    CHECK_OK(ds_step(b));
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ds_forward(a, &hb->batch, &la));
        CHECK_OK(ds_backward(a));
        CHECK_OK(ds_step(a));
    }
    float *table = get(a, k_table, n, false), *head = get(a, "head.weight", n, false);
    CHECK(memcmp(table, head, n * sizeof *table) == 0, "head.weight and the table drifted apart");
    free(table), free(head);
    ds_finalize(a);
    ds_finalize(b);
}

static void test_evaluate(int stage, ds_host_batch *hb) {
    engine_t *e = make_engine(stage, true);
    double loss, weight;
    CHECK_OK(ds_evaluate(e, &hb->batch, &loss, &weight));
    CHECK(weight == B, "evaluate weight %g for %d rows", weight, B);
    float fl;
    CHECK_OK(ds_forward(e, &hb->batch, &fl));
    /* no dropout in this model: evaluation is the training forward */
    CHECK(loss == fl, "evaluate %.9g, forward %.9g", loss, (double)fl);
    CHECK(ds_evaluate(e, &hb->batch, &loss, &weight) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "between ds_forward and ds_backward"),
          "evaluate after forward: %s", ds_last_error());
    float *logits = malloc(ds_output_elems(e, B, T) * sizeof *logits);
    CHECK(ds_predict(e, &hb->batch, logits) == DS_ERR_INVALID_ARG, "predict after forward");
    CHECK_OK(ds_backward(e));
    CHECK_OK(ds_step(e));
    CHECK(ds_output_elems(e, B, T) == (size_t)B * V, "output elems %zu", ds_output_elems(e, B, T));
    CHECK_OK(ds_predict(e, &hb->batch, logits));
    /* an empty batch (a rank with nothing left) counts nothing */
    ds_batch empty = hb->batch;
    empty.B = 0;
    CHECK_OK(ds_evaluate(e, &empty, &loss, &weight));
    CHECK(loss == 0 && weight == 0, "empty batch: %g %g", loss, weight);
    free(logits);

    /* bad batches: named in the message, nothing lost */
    ds_batch bad = hb->batch;
    CHECK_OK(ds_batch_set(&bad, "input_idz", DS_I32, ds_batch_get(&hb->batch, "input_ids")));
    CHECK(ds_forward(e, &bad, &fl) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "\"input_idz\" is not an input of model tied") &&
              strstr(ds_last_error(), "labels (target)"),
          "undeclared tensor: %s", ds_last_error());
    ds_batch nolabels = {.B = B, .T = T};
    CHECK_OK(ds_batch_set(&nolabels, "input_ids", DS_I32, ds_batch_get(&hb->batch, "input_ids")));
    CHECK(ds_forward(e, &nolabels, &fl) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "no tensor \"labels\", a target input"),
          "missing target: %s", ds_last_error());
    CHECK(ds_evaluate(e, &nolabels, &loss, &weight) == DS_ERR_INVALID_ARG, "evaluate without "
          "targets");
    ds_batch wrong = hb->batch;
    CHECK_OK(ds_batch_set(&wrong, "labels", DS_F32, ds_batch_get(&hb->batch, "labels")));
    CHECK(ds_forward(e, &wrong, &fl) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "labels is fp32, model tied declares int32"),
          "wrong dtype: %s", ds_last_error());
    ds_batch longer = hb->batch;
    longer.T = T + 1;
    CHECK(ds_forward(e, &longer, &fl) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "max_seq_len"),
          "too long: %s", ds_last_error());
    /* predicting needs no targets */
    logits = malloc(ds_output_elems(e, B, T) * sizeof *logits);
    CHECK_OK(ds_predict(e, &nolabels, logits));
    free(logits);
    CHECK_OK(ds_forward(e, &hb->batch, &fl));
    CHECK_OK(ds_backward(e));
    CHECK_OK(ds_step(e));
    ds_finalize(e);
}

/* Saved once, under the owner's name, and loaded at another stage. */
static void test_checkpoint(int stage, const char *dir) {
    engine_t *e = make_engine(stage, true);
    CHECK_OK(ds_save_checkpoint(e, dir, "t", NULL));
    size_t n = (size_t)V * E;
    float *table = get(e, k_table, n, false);
    ds_finalize(e);
    int rank;
    {
        engine_t *f = make_engine(stage == 0 ? 3 : 0, true);
        rank = ds_rank(f);
        CHECK_OK(ds_load_checkpoint(f, dir, "t", DS_LOAD_ALL));
        float *back = get(f, "head.weight", n, false);
        CHECK(memcmp(back, table, n * sizeof *back) == 0, "loaded table differs");
        free(back);
        ds_finalize(f);
    }
    if (rank == 0) {
        char out[1024];
        snprintf(out, sizeof out, "%s/tied.safetensors", dir);
        ds_z2f_opts o;
        ds_z2f_opts_defaults(&o);
        o.tag = "t";
        CHECK_OK(ds_zero_to_fp32(dir, out, &o, NULL));
        ds_st_file *st = NULL;
        CHECK_OK(ds_st_open(out, &st));
        if (st) {
            CHECK(ds_st_find(st, k_table) != NULL, "the table is missing");
            CHECK(ds_st_find(st, "head.weight") == NULL, "the alias was stored too");
            CHECK(ds_st_count(st) == 4, "%d tensors, expected 4 (the table, hidden.weight, "
                  "hidden.bias, head.bias)", ds_st_count(st));
            ds_st_close(st);
        }
    }
    free(table);
}

/* ds_save_weights when rank 0 cannot write: a folder that is not there,
 * then a disk that fills part way (an injected write error, every tensor's
 * write failing from the first on). Every rank's call fails at once, the
 * others naming rank 0 (before, they waited in the next tensor's gather
 * until comm_timeout_s); the file is not there, nor its .tmp. Then a save
 * that works, readable with every owned tensor. */
static void test_save_weights(int stage, const char *dir) {
    engine_t *e = make_engine(stage, true);
    int rank = ds_rank(e);
    char path[1024], tmp[1100], missing[1100];
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(missing, sizeof missing, "%s/no/such/folder/w.safetensors", dir);
    if (rank == 0) remove(path);
    for (int k = 0; k < 2; k++) {
        if (k == 1) setenv("DS_FAULT_INJECT", "error:weights:write:rank=0", 1);
        ds_status st = ds_save_weights(e, k == 0 ? missing : path);
        const char *msg = ds_last_error();
        CHECK(st == DS_ERR_IO && (rank == 0 || strstr(msg, "rank 0 failed with DS_ERR_IO")) &&
                  strstr(msg, k == 0 ? "cannot create" : "weights:write"),
              "save %d with rank 0's write failing: %s \"%s\"", k, ds_status_to_string(st), msg);
        ds_clear_error();
        unsetenv("DS_FAULT_INJECT");
    }
    if (rank == 0)
        CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0,
              "a failed save left %s or its .tmp", path);
    CHECK_OK(ds_save_weights(e, path));
    if (rank == 0) {
        ds_st_file *st = NULL;
        CHECK_OK(ds_st_open(path, &st));
        if (st) {
            CHECK(ds_st_count(st) == 4, "%d tensors, expected the 4 owned", ds_st_count(st));
            ds_st_close(st);
        }
    }
    ds_finalize(e);
}

int main(int argc, char **argv) {
    int stage = 0;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    }
    ds_dataset *data = ck_make_data(64, T, V);
    ds_model *probe;
    REQUIRE_OK(tm_create(V, E, T, true, &probe));
    ds_host_batch hb;
    REQUIRE_OK(ds_host_batch_alloc(&hb, data, probe, B));
    ds_model_destroy(probe);
    /* each rank its own rows (the model is the same; the ranks' sums differ) */
    engine_t *probe_e = make_engine(stage, true);
    int rank = ds_rank(probe_e), world = ds_world_size(probe_e);
    ds_finalize(probe_e);
    test_set_rank(world > 1 ? rank : -1);
    size_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (size_t)(rank * B + i);
    REQUIRE_OK(ds_host_batch_fill(&hb, data, idx, B));

    test_tied_gradients(stage, &hb);
    test_evaluate(stage, &hb);
    if (dir) test_checkpoint(stage, dir);
    if (dir) test_save_weights(stage, dir);
    ds_host_batch_free(&hb);
    ds_dataset_destroy(data);
    return test_finish("test_model_api");
}
