/* overlap_comm changes when gradients travel, never what arrives: a run with
 * overlap_comm true and the same run with it false give bit-identical losses,
 * gradient norms and final weights, at every stage and world size.
 *
 *   test_overlap_equiv [--stage S] [--model mlp|bert|tied]
 *                      [--precision fp32|fp16|bf16] [--gas G] [--ckpt 0|1]
 *                      [--bucket N] [--contiguous true|false]
 *
 * Each rank trains the same STEPS steps twice in one process, first with
 * overlap_comm false (every gradient bucket reduced inline, on the thread
 * that runs backward), then true (the same buckets on the communication
 * thread while backward goes on), and compares every step's loss and global
 * gradient norm and every final parameter with memcmp: no tolerance, since
 * the collectives, their buckets and their order are the same and only the
 * thread differs. The bucket is small (--bucket, default 1000 elements) so
 * that every model has several buckets in flight during one backward. It is
 * also the allgather_bucket_size: at stages 1 and 2 the updated parameters
 * then travel in many chunks behind the next forward, each module waiting
 * for its own (zero/param_gather.h), more chunks than the 64 queued ahead
 * for BERT.
 * --gas 2 checks that only the last micro-batch's backward reduces (the
 * first one's gradients must stay local and be added to); --model tied that
 * a tied table (embedding = output projection) is reduced only once both
 * uses are in; --ckpt 1 (BERT) recomputes the encoder layers in backward;
 * --precision fp16/bf16 reduces gradients stored in the half type. The
 * second run must also differ from nothing: the losses must fall, so a run
 * that silently did not train cannot pass. Last, a ds_forward between a
 * ds_backward and its ds_step must fail at every stage and change nothing
 * (check_forward_after_backward). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tied_model.h"

#define STEPS 20
#define GLOBAL_BATCH 16
#define T_LEN 12
#define VOCAB 50

typedef struct opts {
    int stage, gas, ckpt;
    long bucket;
    const char *model, *precision, *contiguous;
} opts;

typedef struct run {
    double loss[STEPS], norm[STEPS];
    float *weights; /* every parameter, in model order */
    size_t n_weights;
} run;

static ds_status make_model(const opts *o, ds_model **out) {
    if (!strcmp(o->model, "tied")) return tm_create(VOCAB, 16, T_LEN, true, out);
    if (!strcmp(o->model, "bert")) {
        ds_bert_desc bd = {.vocab_size = VOCAB, .hidden_size = 32, .num_hidden_layers = 2,
                           .num_attention_heads = 4, .intermediate_size = 64,
                           .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = T_LEN,
                           .hidden_dropout_prob = 0.1f, .attention_probs_dropout_prob = 0.1f};
        return ds_bert_create(&bd, out);
    }
    ds_mlp_desc md = {.vocab_size = VOCAB, .max_seq_len = T_LEN, .embed_dim = 16,
                      .hidden_dim = 32, .n_hidden = 1, .n_classes = 3};
    return ds_mlp_create(&md, out);
}

/* An engine of o with overlap_comm `overlap` and gas micro-batches a step;
 * *model stays readable until ds_finalize. */
static int make_engine(const opts *o, int gas, const ds_dataset *data, bool overlap,
                       ds_model **model, engine_t **out) {
    if (make_model(o, model) != DS_OK) {
        fprintf(stderr, "model: %s\n", ds_last_error());
        return 1;
    }
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003,"
             " \"weight_decay\": 0.01}}, \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": %ld,"
             " \"allgather_bucket_size\": %ld, \"overlap_comm\": %s,"
             " \"contiguous_gradients\": %s},"
             " \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 8},"
             " \"bf16\": {\"enabled\": %s}%s}",
             GLOBAL_BATCH, gas, o->stage, o->bucket, o->bucket, overlap ? "true" : "false",
             o->contiguous,
             strcmp(o->precision, "fp16") ? "false" : "true",
             strcmp(o->precision, "bf16") ? "false" : "true",
             o->ckpt ? ", \"activation_checkpointing\": {}" : "");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = *model;
    d.train_data = data;
    d.quiet = true;
    if (ds_initialize(&d, out) != DS_OK) {
        fprintf(stderr, "init: %s\n", ds_last_error());
        return 1;
    }
    return 0;
}

/* This rank's rows of the first global batch, by the model's input names. */
static int first_batch(const ds_model *model, const ds_dataset *data, int rank, int micro,
                       ds_batch *b) {
    *b = (ds_batch){.B = micro, .T = T_LEN};
    for (int j = 0; j < model->n_inputs; j++) {
        const ds_tensor_desc *in = &model->inputs[j];
        size_t off = (size_t)rank * (size_t)micro * ds_tensor_desc_row_elems(in, T_LEN);
        int32_t *i32 = in->dtype == DS_I32 ? ds_dataset_i32(data, in->name) : NULL;
        float *f32 = in->dtype == DS_F32 ? ds_dataset_f32(data, in->name) : NULL;
        if (!i32 && !f32) continue; /* an optional input the data does not have */
        const void *col = i32 ? (const void *)(i32 + off) : (const void *)(f32 + off);
        if (ds_batch_set(b, in->name, in->dtype, col) != DS_OK) return 1;
    }
    return 0;
}

/* A ds_forward after a ds_backward, before its ds_step, would let a second
 * backward add to gradients the first had already reduced (stages 0 and 1
 * reduce the replica in place during the last micro-batch's backward, so the
 * first would count world times; stages 2 and 3 would take an extra
 * micro-batch the step does not count). It must fail at every stage, naming
 * the fix, and change nothing: the ds_step after it gives the parameters of
 * an engine that never saw it, bit for bit. Returns the number of failures. */
static int check_forward_after_backward(const opts *o, const ds_dataset *data) {
    float *w[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    int fails = 0;
    for (int misuse = 0; misuse < 2; misuse++) {
        ds_model *model;
        engine_t *e;
        if (make_engine(o, 1, data, true, &model, &e)) return fails + 1;
        int world = ds_world_size(e), micro = GLOBAL_BATCH / world;
        ds_batch b;
        ds_status st = first_batch(model, data, ds_rank(e), micro, &b) ? DS_ERR_INVALID_ARG
                                                                       : DS_OK;
        if (st == DS_OK) st = ds_forward(e, &b, NULL);
        if (st == DS_OK) st = ds_backward(e);
        if (st == DS_OK && misuse) {
            ds_status again = ds_forward(e, &b, NULL);
            if (again != DS_ERR_INVALID_ARG || !strstr(ds_last_error(), "ds_step")) {
                printf("FAIL: stage %d: ds_forward after ds_backward gave %s (%s), not "
                       "DS_ERR_INVALID_ARG naming ds_step\n", o->stage,
                       ds_status_to_string(again), again ? ds_last_error() : "");
                fails++;
            }
            ds_clear_error();
            /* and a second ds_backward: named as such, not as a missing forward */
            again = ds_backward(e);
            if (again != DS_ERR_INVALID_ARG || !strstr(ds_last_error(), "ds_backward twice")) {
                printf("FAIL: stage %d: ds_backward twice gave %s (%s)\n", o->stage,
                       ds_status_to_string(again), again ? ds_last_error() : "");
                fails++;
            }
            ds_clear_error();
        }
        if (st == DS_OK) st = ds_step(e);
        if (st != DS_OK) {
            printf("FAIL: stage %d: forward / backward / step: %s\n", o->stage, ds_last_error());
            fails++;
        } else {
            w[misuse] = ck_params(e, &n[misuse]);
        }
        ds_finalize(e);
    }
    if (w[0] && w[1] && (n[0] != n[1] || memcmp(w[0], w[1], n[0] * sizeof *w[0]))) {
        printf("FAIL: stage %d: the refused ds_forward changed the step's parameters\n",
               o->stage);
        fails++;
    }
    free(w[0]);
    free(w[1]);
    return fails;
}

/* Train STEPS steps with overlap_comm `overlap`; fill r. 0 on success. */
static int train(const opts *o, const ds_dataset *data, bool overlap, run *r) {
    ds_model *model;
    engine_t *e;
    if (make_engine(o, o->gas, data, overlap, &model, &e)) return 1;
    int rc = 0;
    for (int i = 0; i < STEPS && rc == 0; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "overlap %d step %d: %s\n", overlap, i + 1, ds_last_error());
            rc = 1;
            break;
        }
        r->loss[i] = info.loss;
        r->norm[i] = info.grad_norm;
    }
    /* every parameter in model order (NULL, said on stderr, on failure) */
    r->weights = rc == 0 ? ck_params(e, &r->n_weights) : NULL;
    if (!r->weights) rc = 1;
    ds_finalize(e);
    return rc;
}

int main(int argc, char **argv) {
    opts o = {.stage = 0, .gas = 1, .ckpt = 0, .bucket = 1000, .model = "mlp",
              .precision = "fp32", .contiguous = "true"};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) o.stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model")) o.model = argv[i + 1];
        else if (!strcmp(argv[i], "--precision")) o.precision = argv[i + 1];
        else if (!strcmp(argv[i], "--gas")) o.gas = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ckpt")) o.ckpt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bucket")) o.bucket = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--contiguous")) o.contiguous = argv[i + 1];
        else {
            fprintf(stderr, "test_overlap_equiv: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * STEPS, T_LEN, VOCAB);
    if (!data) {
        fprintf(stderr, "data: %s\n", ds_last_error());
        return 1;
    }
    static run off, on;
    if (train(&o, data, false, &off) || train(&o, data, true, &on)) return 1;
    int fails = check_forward_after_backward(&o, data);
    ds_dataset_destroy(data);

    for (int i = 0; i < STEPS; i++) {
        if (memcmp(&off.loss[i], &on.loss[i], sizeof(double)) != 0) {
            printf("FAIL: step %d loss %.17g (overlap off) vs %.17g (on)\n", i + 1, off.loss[i],
                   on.loss[i]);
            fails++;
        }
        if (memcmp(&off.norm[i], &on.norm[i], sizeof(double)) != 0) {
            printf("FAIL: step %d gradient norm %.17g (overlap off) vs %.17g (on)\n", i + 1,
                   off.norm[i], on.norm[i]);
            fails++;
        }
    }
    size_t differ = 0;
    for (size_t k = 0; k < off.n_weights; k++)
        differ += memcmp(&off.weights[k], &on.weights[k], sizeof(float)) != 0;
    if (differ) {
        printf("FAIL: %zu of %zu final weights differ between overlap off and on\n", differ,
               off.n_weights);
        fails++;
    }
    if (!(on.loss[STEPS - 1] < on.loss[0])) {
        printf("FAIL: the loss did not fall (%.6f -> %.6f): the run trained nothing\n", on.loss[0],
               on.loss[STEPS - 1]);
        fails++;
    }
    printf("%s: stage %d %s %s gas %d ckpt %d bucket %ld contiguous %s: %d steps, %zu weights, "
           "loss %.6f -> %.6f, %s with overlap on and off\n",
           fails ? "FAIL" : "ok", o.stage, o.model, o.precision, o.gas, o.ckpt, o.bucket,
           o.contiguous, STEPS, off.n_weights, on.loss[0], on.loss[STEPS - 1],
           fails ? "NOT bit-identical" : "bit-identical");
    free(off.weights);
    free(on.weights);
    return fails != 0;
}
