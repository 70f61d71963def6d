/* Training throughput and memory of GPT2LMHeadModel (models.h: ds_gpt2_create)
 * per ZeRO stage; bench/bench_pytorch_gpt2.py is its PyTorch peer and
 * bench/lm_speed.sh runs both and writes the table.
 *
 *   OMP_NUM_THREADS=2 bench/bench_lm --stage 0
 *   mpirun -np 2 -x OMP_NUM_THREADS=1 bench/bench_lm --stage 3 --batch 8 --seq 256
 *
 * Default model: GPT-2 small (12 layers, 768 wide, 12 heads, vocab 50257,
 * n_positions 1024; dropout 0.1 at the three sites, as GPT2Config), sequence
 * 256, global batch 8 (micro batch 8 / world), AdamW (lr 1e-4, weight decay
 * 0.01), gradient clipping 1.0. Synthetic token ids uniform over the
 * vocabulary with labels = input_ids (the loss scores position t on token
 * t + 1, as Hugging Face shifts them): the arithmetic does not depend on the
 * values.
 *
 * Prints tokens/s over the median timed step (after warm-up steps), the
 * matmul GFLOP/s that implies (formula at flops_per_step), and per-rank
 * memory by purpose from the engine's accountant next to the ZeRO formula
 * (ds_expected_model_state_bytes), and the activation bytes of the plan with
 * and without activation checkpointing (computed from the modules' sizes
 * as the engine's plan computes them; the run's own setting is the measured
 * one). The last line, "bench_lm_json: {...}", is what bench/lm_table.py
 * reads.
 *
 * --chunks ab: the blocks' attention in chunks of a few sequences (the cpu
 * backend's chunk_bytes, models/modules.h) in even timed steps and over the
 * whole batch at once in odd ones. The same bits either way; prints the
 * median ratio of the pairs' step times, both seeing the host's same
 * minute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/bench_util.h"
#include "bench/core_rtt.h"
#include "engine/engine.h"
#include "engine/engine_internal.h" /* e->be: the chunk size --chunks ab turns */
#include "models/models.h"

static void usage(void) {
    fprintf(stderr,
            "usage: bench_lm [--stage 0..3] [--batch GLOBAL] [--seq T] [--steps N]\n"
            "                [--warmup N] [--precision fp32|fp16|bf16]\n"
            "                [--activation-checkpointing 0|1] [--layers L] [--hidden E]\n"
            "                [--heads NH] [--vocab V] [--positions P] [--dropout p]\n"
            "                [--chunks ab]\n"
            "defaults: GPT-2 small (12 x 768, 12 heads, vocab 50257, 1024 positions,\n"
            "dropout 0.1), seq 256, batch 8, 3 timed steps after 1 warm-up, fp32, stage 0\n");
}

/* Matmul FLOPs of one training step (forward + backward = 3 x forward, the
 * backward computing a data and a weight gradient per GEMM), counted per
 * token: the four Conv1D projections of each block (QKV 3E^2, output E^2,
 * MLP 2EI) and the tied output projection (EV), 2 FLOPs a multiply-add; and
 * per sequence and layer the attention's two T x T x E GEMMs (scores and
 * context; full squares: the engine and PyTorch's eager and sdpa paths on
 * cpu compute the masked half too). Embedding lookups, layer norms, softmax
 * and the element-wise work are not counted. */
static double flops_per_step(int L, int E, int I, int V, int T, int global_batch) {
    double tokens = (double)global_batch * T;
    double per_token = 2.0 * ((double)L * (4.0 * E * E + 2.0 * (double)E * I) + (double)E * V);
    double attn_per_seq = (double)L * 4.0 * (double)T * T * E;
    return 3.0 * (tokens * per_token + (double)global_batch * attn_per_seq);
}

/* The activation plan's bytes (engine_step.c: ds_engine_plan_activations):
 * every module's output, its saved tensors unless recomputed (then one shared
 * area of the largest recomputed module's), and two gradient buffers of the
 * largest output before the loss. Scratch is counted under buffers. */
static size_t plan_activation_bytes(const ds_model *m, int B, int T, bool ckpt) {
    size_t act = 0, saved = 0, ckpt_saved = 0, grad = 0;
    for (int i = 0; i < m->n_modules; i++) {
        const ds_module *mod = m->modules[i];
        size_t out = mod->ops->out_elems(mod, B, T), sv = mod->ops->saved_bytes(mod, B, T);
        act += out * sizeof(float);
        if (i < m->n_modules - 1 && out > grad) grad = out;
        if (ckpt && mod->checkpointable) {
            if (sv > ckpt_saved) ckpt_saved = sv;
        } else {
            saved += sv;
        }
    }
    return act + saved + ckpt_saved + 2 * grad * sizeof(float);
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

int main(int argc, char **argv) {
    int stage = 0, steps = 3, warmup = 1, T = 256, global_batch = 8, ckpt = 0;
    int L = 12, E = 768, NH = 12, V = 50257, P = 1024;
    float dropout = 0.1f;
    const char *precision = "fp32";
    int ab = 0; /* --chunks ab */
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_lm: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *v = argv[i + 1];
        if (!strcmp(argv[i], "--stage")) stage = atoi(v);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(v);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(v);
        else if (!strcmp(argv[i], "--seq")) T = atoi(v);
        else if (!strcmp(argv[i], "--batch")) global_batch = atoi(v);
        else if (!strcmp(argv[i], "--precision")) precision = v;
        else if (!strcmp(argv[i], "--activation-checkpointing")) ckpt = atoi(v);
        else if (!strcmp(argv[i], "--layers")) L = atoi(v);
        else if (!strcmp(argv[i], "--hidden")) E = atoi(v);
        else if (!strcmp(argv[i], "--heads")) NH = atoi(v);
        else if (!strcmp(argv[i], "--vocab")) V = atoi(v);
        else if (!strcmp(argv[i], "--positions")) P = atoi(v);
        else if (!strcmp(argv[i], "--dropout")) dropout = (float)atof(v);
        else if (!strcmp(argv[i], "--chunks") && !strcmp(v, "ab")) ab = 1;
        else {
            fprintf(stderr, "bench_lm: unknown option %s\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (steps < 1 || warmup < 0 || T < 2 || global_batch < 1 || P < T || (ab && steps < 2)) {
        fprintf(stderr, "bench_lm: need steps >= 1 (2 with an ab option), warmup >= 0, "
                        "seq >= 2, batch >= 1, positions >= seq\n");
        return 2;
    }
    const int I = 4 * E;
    ds_gpt2_desc gd = {.vocab_size = V, .n_positions = P, .n_embd = E, .n_layer = L,
                       .n_head = NH, .resid_pdrop = dropout, .embd_pdrop = dropout,
                       .attn_pdrop = dropout, .max_seq_len = T, .dropout_set = true};
    ds_model *model;
    if (ds_gpt2_create(&gd, &model) != DS_OK) {
        fprintf(stderr, "bench_lm: %s\n", ds_last_error());
        return 1;
    }
    int64_t psi = ds_model_num_params(model);

    /* every rank holds the whole (small) table; the sampler picks its rows */
    size_t n_rows = (size_t)global_batch * (size_t)(steps + warmup);
    ds_dataset *data;
    int32_t *ids, *labels;
    const int64_t seq[1] = {DS_DIM_SEQ};
    if (ds_dataset_create(n_rows, T, &data) != DS_OK ||
        ds_dataset_add_column(data, "input_ids", DS_I32, 1, seq, (void **)&ids) != DS_OK ||
        ds_dataset_add_column(data, "labels", DS_I32, 1, seq, (void **)&labels) != DS_OK) {
        fprintf(stderr, "bench_lm: %s\n", ds_last_error());
        return 1;
    }
    uint64_t s = 1;
    for (size_t i = 0; i < n_rows * (size_t)T; i++) {
        ids[i] = (int32_t)(ds_splitmix64_next(&s) % (uint64_t)V);
        labels[i] = ids[i];
    }

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
        fprintf(stderr, "bench_lm: %s\n", ds_last_error());
        return 1;
    }
    const int world = ds_world_size(e), rank = ds_rank(e);
    const int micro = global_batch / world;
    double *dt = calloc((size_t)steps, sizeof *dt);
    double first_loss = 0.0, last_loss = 0.0;
    long faults0 = 0;
    const size_t chunk_bytes = e->be->chunk_bytes;
    double rtt0 = -1.0, rtt1 = -1.0; /* where the CPUs sit, at one rank (core_rtt.h) */
    for (int i = 0; i < warmup + steps; i++) {
        if (i == warmup && world == 1) rtt0 = core_round_trip_ns(RTT_TRIPS);
        if (ab) /* no chunks in odd timed steps; changed between steps only, so
                 * a step's forward and backward chunk alike */
            e->be->chunk_bytes = i >= warmup && (i - warmup) % 2 == 1 ? 0 : chunk_bytes;
        if (i == warmup) {
            struct rusage r0;
            getrusage(RUSAGE_SELF, &r0);
            faults0 = r0.ru_minflt + r0.ru_majflt;
        }
        double t0 = now_s();
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "bench_lm: %s\n", ds_last_error());
            return 1;
        }
        if (i >= warmup) dt[i - warmup] = now_s() - t0;
        if (i == 0) first_loss = info.loss;
        last_loss = info.loss;
        if (rank == 0)
            fprintf(stderr, "bench_lm: step %d%s %.3f s loss %.4f\n", i + 1,
                    i < warmup ? " (warm-up)" : "", now_s() - t0, info.loss);
    }
    if (ab && rank == 0) { /* each pair of timed steps: without over with */
        double lo, hi, med = pair_ratio_median(dt, steps, &lo, &hi);
        printf("bench_lm: chunks ab: step time without / with the chunks %.3f (median of %d "
               "pairs, min %.3f, max %.3f)\n", med, steps / 2, lo, hi);
    }
    double med = median_sort(dt, steps);
    double tokens = (double)global_batch * T;
    double flops = flops_per_step(L, E, I, V, T, global_batch);

    ds_mem_report mr;
    ds_memory_report(e, &mr);
    uint64_t by[DS_MEM_PURPOSE_COUNT];
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        by[p] = mr.bytes[p][DS_PLACE_DEVICE] + mr.bytes[p][DS_PLACE_HOST];
    uint64_t state = by[DS_MEM_PARAMS] + by[DS_MEM_GRADS] + by[DS_MEM_MASTER] + by[DS_MEM_OPTIM];
    uint64_t formula = ds_expected_model_state_bytes(e);
    const ds_model *pm = ds_get_model(e);
    size_t act_plain = plan_activation_bytes(pm, micro, T, false);
    size_t act_ckpt = plan_activation_bytes(pm, micro, T, true);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* page faults in the timed steps: a step that maps fresh memory (an
     * allocation inside it) pays the kernel for zeroing every page */
    double faults_per_step = (double)(ru.ru_minflt + ru.ru_majflt - faults0) / steps;
    double rss_mib = (double)ru.ru_maxrss / 1024.0; /* kB on Linux */
    if (world == 1) rtt1 = core_round_trip_ns(RTT_TRIPS); /* after the fault count */

    if (rank == 0) {
        printf("bench_lm: GPT-2 L=%d E=%d heads=%d V=%d Psi=%lld, stage %d %s, %d rank(s) x "
               "micro batch %d, seq %d, global batch %d, activation checkpointing %s\n",
               L, E, NH, V, (long long)psi, stage, precision, world, micro, T, global_batch,
               ckpt ? "on" : "off");
        printf("  %.1f tokens/s (median step %.3f s of %d, min %.3f, max %.3f; %d warm-up), "
               "%.1f GFLOP/s matmul (%.1f GFLOP/step), loss %.4f -> %.4f\n",
               tokens / med, med, steps, dt[0], dt[steps - 1], warmup, flops / med / 1e9,
               flops / 1e9, first_loss, last_loss);
        printf("  memory per rank (rank 0, MiB): params %.1f, grads %.1f, master %.1f, optim %.1f"
               " = model state %.1f (ZeRO formula %.1f, %+.3f%%); buffers %.1f, activations "
               "%.1f, other %.1f; peak RSS %.0f; page faults per timed step %.0f\n",
               mib(by[DS_MEM_PARAMS]), mib(by[DS_MEM_GRADS]), mib(by[DS_MEM_MASTER]),
               mib(by[DS_MEM_OPTIM]), mib(state), mib(formula),
               100.0 * ((double)state - (double)formula) / (double)formula,
               mib(by[DS_MEM_BUFFERS]), mib(by[DS_MEM_ACTIVATIONS]), mib(by[DS_MEM_OTHER]),
               rss_mib, faults_per_step);
        printf("  activation plan per rank (MiB): without checkpointing %.1f, with %.1f "
               "(this run %s: measured %.1f)\n",
               mib(act_plain), mib(act_ckpt), ckpt ? "with" : "without",
               mib(by[DS_MEM_ACTIVATIONS]));
        printf("bench_lm_json: {\"side\": \"engine\", \"stage\": %d, \"world\": %d, "
               "\"precision\": \"%s\", \"ckpt\": %d, \"layers\": %d, \"hidden\": %d, \"heads\": "
               "%d, \"vocab\": %d, \"seq\": %d, \"batch\": %d, \"psi\": %lld, \"steps\": %d, "
               "\"warmup\": %d, \"step_s\": [",
               stage, world, precision, ckpt, L, E, NH, V, T, global_batch, (long long)psi, steps,
               warmup);
        for (int i = 0; i < steps; i++) printf("%s%.4f", i ? ", " : "", dt[i]);
        printf("], \"median_s\": %.4f, \"tokens_per_s\": %.2f, \"gflops\": %.2f, "
               "\"flop_per_step\": %.6e, \"params\": %llu, \"grads\": %llu, \"master\": %llu, "
               "\"optim\": %llu, \"state\": %llu, \"formula\": %llu, \"buffers\": %llu, "
               "\"activations\": %llu, \"other\": %llu, \"act_plain\": %llu, \"act_ckpt\": %llu, "
               "\"rss_mib\": %.1f, \"faults_per_step\": %.0f, \"loss_first\": %.5f, \"loss_last\": %.5f}\n",
               med, tokens / med, flops / med / 1e9, flops,
               (unsigned long long)by[DS_MEM_PARAMS], (unsigned long long)by[DS_MEM_GRADS],
               (unsigned long long)by[DS_MEM_MASTER], (unsigned long long)by[DS_MEM_OPTIM],
               (unsigned long long)state, (unsigned long long)formula,
               (unsigned long long)by[DS_MEM_BUFFERS], (unsigned long long)by[DS_MEM_ACTIVATIONS],
               (unsigned long long)by[DS_MEM_OTHER], (unsigned long long)act_plain,
               (unsigned long long)act_ckpt, rss_mib, faults_per_step, first_loss, last_loss);
        if (world == 1) core_rtt_print("bench_lm", rtt0, rtt1);
    }
    free(dt);
    ds_finalize(e);
    ds_dataset_destroy(data);
    return 0;
}
