/* Training throughput of the reference BERT-mini (or the MLP) per ZeRO stage.
 *
 *   OMP_NUM_THREADS=2 bench/bench_train --stage 0
 *   mpirun -np 2 -x OMP_NUM_THREADS=1 bench/bench_train --stage 3
 *
 * The model is the one issue 3 names: vocab 21128, hidden 256, 4 layers,
 * 4 heads, intermediate 1024, 6 classes: 8,767,238 parameters; sequence 128,
 * global batch 32 (micro batch 32 / world), dropout 0.1, AdamW. Synthetic
 * tokens: the arithmetic does not depend on the values. Prints samples/s
 * (median over the timed steps, after warm-up steps) and the matmul GFLOP/s
 * that implies (on the count and on the work executed, see below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "models/models.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int stage = 0, steps = 8, warmup = 2, T = 128, global_batch = 32, ckpt = 0;
    const char *precision = "fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) global_batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!strcmp(argv[i], "--activation-checkpointing")) ckpt = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_train: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const int V = 21128, H = 256, L = 4, NH = 4, I = 1024, C = 6;
    size_t n_rows = (size_t)global_batch * (size_t)(steps + warmup);
    const char *names[6] = {"a", "b", "c", "d", "e", "f"};
    ds_dataset *data;
    if (ds_cls_dataset_create(n_rows, T, C, names, &data) != DS_OK) {
        fprintf(stderr, "bench_train: %s\n", ds_last_error());
        return 1;
    }
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    unsigned s = 1;
    for (size_t i = 0; i < n_rows; i++) {
        for (int t = 0; t < T; t++) {
            s = s * 1103515245u + 12345u;
            ids[i * (size_t)T + (size_t)t] = 4 + (int)((s >> 8) % (unsigned)(V - 4));
            mask[i * (size_t)T + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % (size_t)C);
    }
    ds_bert_desc bd = {.vocab_size = V, .hidden_size = H, .num_hidden_layers = L,
                       .num_attention_heads = NH, .intermediate_size = I,
                       .max_position_embeddings = 512, .type_vocab_size = 2,
                       .hidden_dropout_prob = 0.1f, .attention_probs_dropout_prob = 0.1f,
                       .n_classes = C, .max_seq_len = T};
    ds_model *model;
    if (ds_bert_create(&bd, &model) != DS_OK) {
        fprintf(stderr, "bench_train: %s\n", ds_last_error());
        return 1;
    }
    int64_t psi = ds_model_num_params(model);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"steps_per_print\": 1000000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"weight_decay\": 0.01}},"
             " \"gradient_clipping\": 1.0,"
             " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0},"
             " \"fp16\": {\"enabled\": %s}, \"bf16\": {\"enabled\": %s}"
             "%s}",
             global_batch, stage, strcmp(precision, "fp16") ? "false" : "true",
             strcmp(precision, "bf16") ? "false" : "true",
             ckpt ? ", \"activation_checkpointing\": {}" : "");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        fprintf(stderr, "bench_train: %s\n", ds_last_error());
        return 1;
    }
    double *dt = calloc((size_t)steps, sizeof *dt);
    for (int i = 0; i < warmup + steps; i++) {
        double t0 = now_s();
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "bench_train: %s\n", ds_last_error());
            return 1;
        }
        if (i >= warmup) dt[i - warmup] = now_s() - t0;
    }
    qsort(dt, (size_t)steps, sizeof *dt, cmp_double);
    double med = dt[steps / 2];
    /* Matmul FLOPs per step, two ways.
     * - The count (what a full BERT does, PyTorch included): forward
     *   2*(matmul params)*T plus attention scores and context 2*2*T*T*H per
     *   layer, backward twice the forward; 84.0 GFLOP per step. GFLOP/s on
     *   this count compare throughput with any other implementation.
     * - Executed here: the last layer computes only the [CLS] row (keys and
     *   values for all T positions, the rest for one), and the pooler and
     *   classifier run once per sample; the GFLOP/s on this count are what
     *   the cores sustain. */
    double mm_params = (double)L * (4.0 * H * H + 2.0 * H * I) + (double)H * H + (double)H * C;
    double flops = 3.0 * (2.0 * mm_params * T + (double)L * 4.0 * T * T * H) * global_batch;
    double full_layer = 2.0 * (4.0 * H * H + 2.0 * H * I) * T + 4.0 * T * T * H;
    double last_layer = 2.0 * (2.0 * H * H) * T + 2.0 * (2.0 * H * H + 2.0 * H * I) + 4.0 * T * H;
    double executed = 3.0 * ((L - 1) * full_layer + last_layer + 2.0 * (H * H + H * C)) *
                      global_batch;
    ds_mem_report mr;
    ds_memory_report(e, &mr);
    if (ds_rank(e) == 0)
        printf("bench_train: BERT-mini Psi=%lld stage %d %s world %d seq %d batch %d: %.2f "
               "samples/s (median step %.3f s, min %.3f, max %.3f), %.1f GFLOP/s matmul on the "
               "issue's count (%.1f GFLOP/step; executed %.1f GFLOP/step = %.1f GFLOP/s), "
               "model state %.1f MiB/rank (formula %.1f)\n",
               (long long)psi, stage, precision, ds_world_size(e), T, global_batch,
               global_batch / med, med, dt[0], dt[steps - 1], flops / med / 1e9, flops / 1e9,
               executed / 1e9, executed / med / 1e9,
               (double)(mr.bytes[DS_MEM_PARAMS][0] + mr.bytes[DS_MEM_GRADS][0] +
                        mr.bytes[DS_MEM_MASTER][0] + mr.bytes[DS_MEM_OPTIM][0]) / 1048576.0,
               (double)ds_expected_model_state_bytes(e) / 1048576.0);
    free(dt);
    ds_finalize(e);
    ds_dataset_destroy(data);
    return 0;
}
