/* Training throughput of the reference BERT-mini (or the MLP) per ZeRO stage.
 *
 *   OMP_NUM_THREADS=2 bench/bench_train --stage 0
 *   mpirun -np 2 -x OMP_NUM_THREADS=1 bench/bench_train --stage 3
 *   ... bench/bench_train --stage 1 --overlap 1 --bucket 1000000
 *
 * --backend cpu|cuda (zero_engine.backend; default cpu) times the GPU path.
 * --qgz 1 sets zero_optimization.zero_quantized_gradients (ZeRO++ qgZ,
 * stage 3: the gradient reduce-scatter in blockwise int8), --qwz 1
 * zero_quantized_weights (qwZ: the parameter all-gathers in it), --hpz H
 * zero_hpz_partition_size (hpZ: the backward's gathers inside groups of H
 * ranks), --mics N mics_shard_size (MiCS: shards of N ranks, replicated
 * across the groups); the bytes each collective sent per step are printed
 * either way,
 * rank 0's by collective and every rank's inside its host / across hosts. --qgz ab pairs an
 * engine without and one with qgZ as --overlap ab pairs overlap off and on.
 * --qgz 4 is qgZ with zero_engine.qgz_scheme "int4" (DeepSpeed's: int4,
 * inside hosts then across them); --qgz ab4 pairs int8 qgZ and int4 qgZ.
 * --overlap 0|1 sets zero_optimization.overlap_comm (default: DeepSpeed's,
 * true at stage 3 only), --bucket N its reduce_bucket_size in elements
 * (default DeepSpeed's 5e8, which for this model is one bucket: nothing to
 * overlap) and its allgather_bucket_size (stages 1-2: the updated
 * parameters' gather in chunks behind the next forward), unless --ag-bucket N
 * sets that one apart. --gemm auto|bf16|fp32 sets zero_engine.gemm_input_dtype (auto:
 * bf16 GEMM inputs under --precision bf16); --gemm ab pairs fp32 and bf16
 * GEMM inputs (under --precision bf16) as --overlap ab pairs overlap off and
 * on. --zeropp ab pairs plain stage 3 and ZeRO++ (hpZ --hpz H, default 2,
 * with qwZ and qgZ: DeepSpeed's tutorial combination) the same way.
 * --overlap ab builds two engines in one process, overlap_comm off
 * and on, and alternates their steps (off-on, on-off, ...): on a shared
 * machine whose load changes by the second, each pair of steps sees the same
 * load, and the median of the pairs' time ratios is the overlap's effect.
 * --sparse 0|1 sets sparse_gradients (the word table's gradient sent as
 * (row index, row) records at stages 0-3, zero/grad_sparse.h); --sparse
 * ab pairs it off and on as --overlap ab pairs overlap off and on.
 * --gather-rows 0 sets zero_engine.gather_rows false (the word table gathered
 * whole after each update at stages 1-2 and at each use at stage 3, as
 * DeepSpeed does; default on: by the rows a micro-batch reads).
 * --check 0|1 sets zero_engine.check_collectives (every collective checked
 * first: engine/comm/comm.h); --check ab pairs it off and on as --overlap ab
 * pairs overlap off and on, and prints the collectives per step.
 * --gemm-replay 1 records the GEMM calls of the last warm-up step and runs
 * them again by themselves after every timed step, through OpenBLAS and
 * through the backend's slot (bench/gemm_replay.h): the step's rate against
 * its GEMMs' in isolation, measured a second apart in one process (issue 17
 * item 4's 85% goal; cpu backend, one engine, at least one warm-up step);
 * --gemm-replay 2 also times them by shape, the longest first.
 * --cut ab: the bf16 dot product's k cut of the weight gradients
 * (cpu_gemm_dot.c) on in even timed steps and off in odd ones (the
 * backend's gemm_no_cut), so both see the host's same minute; prints the
 * median ratio of the pairs' step times (cpu backend, one engine).
 * --attn-chunk-bytes N: the attention's chunks of N bytes of probabilities
 * (the backend's chunk_bytes, models/modules.h; 0: the whole batch at once)
 * instead of the backend's own size, for every engine of the run.
 * --perf-ctl CTL,ACK: file descriptors of `perf record|stat -D -1 --control
 * fd:CTL,ACK` (events off at the start); the timed steps are bracketed by
 * "enable" and "disable", so the profile holds them alone, without the
 * start-up, the warm-up steps and the report (bench/step_profile.sh).
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
#include <unistd.h>

#include "bench/bench_util.h"
#include "bench/core_rtt.h"
#include "bench/gemm_replay.h"
#include "engine/engine.h"
#include "engine/engine_internal.h" /* e->be: the gemm slot --gemm-replay taps */
#include "models/models.h"

typedef struct bench {
    int stage, steps, warmup, T, global_batch, ckpt, qwz, hpz, mics;
    int replay; /* --gemm-replay */
    int gather_rows; /* --gather-rows: zero_engine.gather_rows (default 1) */
    const char *precision, *backend;
    long long bucket;
    long long ag_bucket; /* allgather_bucket_size; <= 0: bucket's */
    int64_t psi;
    ds_dataset *data;
    int32_t *ids, *labels;
    float *mask;
} bench;

/* FF: the intermediate size (I is complex.h's, which cblas.h brings) */
enum { V = 21128, H = 256, L = 4, NH = 4, FF = 1024, C = 6 };

/* Per engine: its settings, then total, forward, backward and step time of
 * each timed step. */
typedef struct timing {
    int overlap, qgz;     /* overlap: -1 DeepSpeed's default, 0 off, 1 on; qgz: 0 off, 1 on
                             (int8), 4 on with qgz_scheme int4 */
    int qwz, hpz;         /* zero_quantized_weights; zero_hpz_partition_size (<= 1: off) */
    const char *gemm;     /* zero_engine.gemm_input_dtype */
    int sparse;           /* sparse_gradients: -1 unset (DeepSpeed's false), 0, 1 */
    int check;            /* zero_engine.check_collectives: 0, 1 */
    double *dt, *fw, *bw, *st;
    double *rb, *rk;      /* --gemm-replay: the step's GEMMs alone after each timed step,
                             through OpenBLAS (rb) and the backend's slot (rk) */
    gemm_replay gr;
    ds_comm_stats c0, c1; /* the engine's communication before / after the timed steps */
    double wfw, wbw, wst; /* of c1.wait_s - c0.wait_s: what each phase waited, summed */
    float loss0;          /* the first step's loss (this rank's rows), to compare models */
} timing;

static ds_status make_engine(bench *b, const timing *tm, engine_t **out) {
    int overlap = tm->overlap;
    ds_bert_desc bd = {.vocab_size = V, .hidden_size = H, .num_hidden_layers = L,
                       .num_attention_heads = NH, .intermediate_size = FF,
                       .max_position_embeddings = 512, .type_vocab_size = 2,
                       .hidden_dropout_prob = 0.1f, .attention_probs_dropout_prob = 0.1f,
                       .n_classes = C, .max_seq_len = b->T};
    ds_model *model;
    DS_TRY(ds_bert_create(&bd, &model));
    b->psi = ds_model_num_params(model);
    char ov[64] = "";
    if (overlap >= 0) snprintf(ov, sizeof ov, ", \"overlap_comm\": %s", overlap ? "true" : "false");
    char mics[48] = "";
    if (b->mics > 0) snprintf(mics, sizeof mics, ", \"mics_shard_size\": %d", b->mics);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"steps_per_print\": 1000000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"weight_decay\": 0.01}},"
             " \"gradient_clipping\": 1.0,"
             " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0,"
             " \"reduce_bucket_size\": %lld, \"allgather_bucket_size\": %lld,"
             " \"zero_hpz_partition_size\": %d%s%s%s%s},"
             " \"fp16\": {\"enabled\": %s}, \"bf16\": {\"enabled\": %s},"
             " \"zero_engine\": {\"backend\": \"%s\", \"gemm_input_dtype\": \"%s\"%s%s%s}"
             "%s}",
             b->global_batch, b->stage, b->bucket, b->ag_bucket > 0 ? b->ag_bucket : b->bucket,
             tm->hpz > 1 ? tm->hpz : 1, mics, ov,
             tm->qgz ? ", \"zero_quantized_gradients\": true" : "",
             tm->qwz ? ", \"zero_quantized_weights\": true" : "",
             strcmp(b->precision, "fp16") ? "false" : "true",
             strcmp(b->precision, "bf16") ? "false" : "true", b->backend, tm->gemm,
             tm->qgz == 4 ? ", \"qgz_scheme\": \"int4\"" : "",
             tm->check ? ", \"check_collectives\": true" : "",
             b->gather_rows ? "" : ", \"gather_rows\": false",
             b->ckpt ? ", \"activation_checkpointing\": {}" : "");
    if (tm->sparse >= 0) { /* a top-level key, put in front */
        const char *key = tm->sparse ? "\"sparse_gradients\": true, "
                                     : "\"sparse_gradients\": false, ";
        size_t n = strlen(cfg), k = strlen(key);
        if (n + k >= sizeof cfg) {
            ds_model_destroy(model);
            return DS_ERR(DS_ERR_INVALID_ARG, "bench_train: the config is too long");
        }
        memmove(cfg + 1 + k, cfg + 1, n); /* after the '{', with the NUL */
        memcpy(cfg + 1, key, k);
    }
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = b->data;
    d.quiet = true;
    DS_TRY(ds_initialize(&d, out));
    return DS_OK;
}


/* Step i: this rank's rows of global batch i, through ds_forward /
 * ds_backward / ds_step so that the three phases are timed apart: with
 * overlap_comm the gradient buckets travel during backward, and what the
 * link could not carry by its end is waited for in the step (with the
 * optimizer and, at stages 1 and 2, the parameters' all-gather). */
static ds_status timed_step(const bench *b, engine_t *e, int i, timing *tm) {
    int world = ds_world_size(e), rank = ds_rank(e), micro = b->global_batch / world;
    size_t row = (size_t)i * (size_t)b->global_batch + (size_t)rank * (size_t)micro;
    ds_batch batch = {.B = micro, .T = b->T};
    DS_TRY(ds_batch_set(&batch, "input_ids", DS_I32, b->ids + row * (size_t)b->T));
    DS_TRY(ds_batch_set(&batch, "attention_mask", DS_F32, b->mask + row * (size_t)b->T));
    DS_TRY(ds_batch_set(&batch, "labels", DS_I32, b->labels + row));
    if (i == b->warmup) ds_comm_report(e, &tm->c0);
    const bool record = b->replay && i == b->warmup - 1;
    if (record) DS_TRY(gr_record_begin(&tm->gr, e->be));
    ds_comm_stats w0, w1, w2, w3; /* the waits of each phase */
    ds_comm_report(e, &w0);
    double t0 = now_s();
    float loss;
    DS_TRY(ds_forward(e, &batch, &loss));
    if (i == 0) tm->loss0 = loss;
    double t1 = now_s();
    ds_comm_report(e, &w1);
    DS_TRY(ds_backward(e));
    double t2 = now_s();
    ds_comm_report(e, &w2);
    ds_status st = ds_step(e);
    double t3 = now_s();
    ds_comm_report(e, &w3);
    if (record && !gr_record_end(&tm->gr))
        return DS_ERR(DS_ERR_OOM, "bench_train: --gemm-replay: out of memory");
    DS_TRY(st);
    if (i >= b->warmup) {
        int k = i - b->warmup;
        if (k == b->steps - 1) ds_comm_report(e, &tm->c1);
        tm->dt[k] = t3 - t0;
        tm->fw[k] = t1 - t0;
        tm->bw[k] = t2 - t1;
        tm->st[k] = t3 - t2;
        tm->wfw += w1.wait_s - w0.wait_s;
        tm->wbw += w2.wait_s - w1.wait_s;
        tm->wst += w3.wait_s - w2.wait_s;
        if (b->replay) {
            DS_TRY(gr_run(&tm->gr, true, &tm->rb[k]));
            DS_TRY(gr_run(&tm->gr, false, &tm->rk[k]));
        }
    }
    return DS_OK;
}

/* The median of x, left in step order (the overlap pairs match steps). */
static double median(const double *x, int n) {
    double *y = malloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    double m = median_sort(y, n);
    free(y);
    return m;
}

static void report(const bench *b, engine_t *e, const timing *tm) {
    int steps = b->steps, T = b->T, overlap = tm->overlap;
    double med = median(tm->dt, steps), lo = tm->dt[0], hi = tm->dt[0];
    for (int k = 1; k < steps; k++) {
        if (tm->dt[k] < lo) lo = tm->dt[k];
        if (tm->dt[k] > hi) hi = tm->dt[k];
    }
    /* Matmul FLOPs per step, two ways.
     * - The count (what a full BERT does, PyTorch included): forward
     *   2*(matmul params)*T plus attention scores and context 2*2*T*T*H per
     *   layer, backward twice the forward; 84.0 GFLOP per step. GFLOP/s on
     *   this count compare throughput with any other implementation.
     * - Executed here: the last layer computes only the [CLS] row (keys and
     *   values for all T positions, the rest for one), and the pooler and
     *   classifier run once per sample; the GFLOP/s on this count are what
     *   the cores sustain. */
    double mm_params = (double)L * (4.0 * H * H + 2.0 * H * FF) + (double)H * H + (double)H * C;
    double flops = 3.0 * (2.0 * mm_params * T + (double)L * 4.0 * T * T * H) * b->global_batch;
    double full_layer = 2.0 * (4.0 * H * H + 2.0 * H * FF) * T + 4.0 * T * T * H;
    double last_layer = 2.0 * (2.0 * H * H) * T + 2.0 * (2.0 * H * H + 2.0 * H * FF) + 4.0 * T * H;
    double executed = 3.0 * ((L - 1) * full_layer + last_layer + 2.0 * (H * H + H * C)) *
                      b->global_batch;
    ds_mem_report mr;
    ds_memory_report(e, &mr);
    if (ds_rank(e) == 0)
        printf("bench_train: BERT-mini Psi=%lld stage %d %s gemm %s overlap %d bucket %lld world "
               "%d seq %d batch %d: %.2f samples/s (median step %.3f s, min %.3f, max %.3f), %.1f "
               "GFLOP/s matmul on the issue's count (%.1f GFLOP/step; executed %.1f GFLOP/step = "
               "%.1f GFLOP/s), model state %.1f MiB/rank (formula %.1f); medians forward %.3f "
               "s, backward %.3f s, step %.3f s\n",
               (long long)b->psi, b->stage, b->precision, tm->gemm,
               overlap, b->bucket, ds_world_size(e), T, b->global_batch, b->global_batch / med,
               med, lo, hi, flops / med / 1e9, flops / 1e9, executed / 1e9,
               executed / med / 1e9,
               (double)(mr.bytes[DS_MEM_PARAMS][0] + mr.bytes[DS_MEM_GRADS][0] +
                        mr.bytes[DS_MEM_MASTER][0] + mr.bytes[DS_MEM_OPTIM][0]) / 1048576.0,
               (double)ds_expected_model_state_bytes(e) / 1048576.0, median(tm->fw, steps),
               median(tm->bw, steps), median(tm->st, steps));
    /* Communication per timed step (ds_comm_report): the collectives' time on
     * whichever thread ran them, and what the calling threads spent blocked
     * on it (wait); the difference was hidden behind computation. */
    double coll = tm->c1.host_seconds - tm->c0.host_seconds, mb = 0;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        coll += tm->c1.seconds[k] - tm->c0.seconds[k];
        mb += (double)(tm->c1.bytes_sent[k] - tm->c0.bytes_sent[k]) / 1e6;
    }
    double wait = tm->c1.wait_s - tm->c0.wait_s;
    if (ds_rank(e) == 0)
        printf("bench_train: stage %d overlap %d first step loss %.4f (rank 0's %d rows; "
               "ln %d = %.4f)\n", b->stage, overlap, tm->loss0, b->global_batch / ds_world_size(e),
               C, log((double)C));
    if (ds_rank(e) == 0)
        printf("bench_train: stage %d overlap %d communication per step: %.1f MB sent, %.3f s in "
               "collectives, %.3f s waited for (forward %.3f, backward %.3f, step %.3f), %.0f%% "
               "hidden\n", b->stage, overlap, mb / steps, coll / steps, wait / steps,
               tm->wfw / steps, tm->wbw / steps, tm->wst / steps,
               coll > 0 ? 100.0 * (1.0 - (wait < coll ? wait : coll) / coll) : 0.0);
    if (ds_rank(e) == 0 && tm->check) { /* what the check exchanged for */
        uint64_t calls = tm->c1.host_calls - tm->c0.host_calls;
        for (int k = 0; k < DS_COLL_COUNT; k++) calls += tm->c1.calls[k] - tm->c0.calls[k];
        printf("bench_train: stage %d check_collectives: %.1f collectives per step checked\n",
               b->stage, (double)calls / steps);
    }
    if (ds_rank(e) == 0 && tm->sparse >= 0) /* which engine of --sparse ab the next lines are */
        printf("bench_train: stage %d sparse_gradients %d: %.0f bytes per step gathered, %.0f "
               "reduced (rank 0)\n", b->stage, tm->sparse,
               (double)(tm->c1.bytes_sent[DS_COLL_ALL_GATHER] -
                        tm->c0.bytes_sent[DS_COLL_ALL_GATHER]) / steps,
               (double)(tm->c1.bytes_sent[DS_COLL_ALL_REDUCE] -
                        tm->c0.bytes_sent[DS_COLL_ALL_REDUCE] +
                        tm->c1.bytes_sent[DS_COLL_REDUCE_SCATTER] -
                        tm->c0.bytes_sent[DS_COLL_REDUCE_SCATTER]) / steps);
    if (ds_rank(e) == 0) { /* rank 0's bytes by collective */
        printf("bench_train: stage %d overlap %d qwz %d qgz %d bytes per step (rank 0):",
               b->stage, overlap, tm->qwz, tm->qgz);
        for (int k = 0; k < DS_COLL_COUNT; k++)
            printf(" %s %.0f", ds_coll_name((ds_coll)k),
                   (double)(tm->c1.bytes_sent[k] - tm->c0.bytes_sent[k]) / steps);
        printf("\n");
    }
    uint64_t in = 0, out = 0; /* this rank's, by where the ring's next rank runs */
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        in += tm->c1.bytes_intra[k] - tm->c0.bytes_intra[k];
        out += tm->c1.bytes_inter[k] - tm->c0.bytes_inter[k];
    }
    printf("bench_train: stage %d hpz %d qwz %d qgz %d rank %d bytes per step: %.0f inside its "
           "host, %.0f across hosts\n", b->stage, tm->hpz > 1 ? tm->hpz : 1, tm->qwz, tm->qgz,
           ds_rank(e), (double)in / steps, (double)out / steps);
}

/* --gemm-replay: per timed step, the replays' time over the step's, the
 * GEMMs' rate over the step's (issue 17 item 4's goal: at least 0.85 against
 * OpenBLAS); the median, the range and the fastest step's. */
static void report_replay(const bench *b, engine_t *e, const timing *tm) {
    int n = b->steps, fast = 0;
    double *rb = malloc((size_t)n * 2 * sizeof *rb), *rk = rb + n;
    double blo = 1e30, bhi = 0, sb = 0, sk = 0;
    for (int k = 0; k < n; k++) {
        rb[k] = tm->rb[k] / tm->dt[k], rk[k] = tm->rk[k] / tm->dt[k];
        blo = rb[k] < blo ? rb[k] : blo, bhi = rb[k] > bhi ? rb[k] : bhi;
        sb += tm->rb[k], sk += tm->rk[k];
        if (tm->dt[k] < tm->dt[fast]) fast = k;
    }
    if (ds_rank(e) == 0)
        printf("bench_train: gemm replay: %d GEMM calls per step recorded, %.2f GFLOP; the step "
               "at %.1f%% of its GEMMs' rate in OpenBLAS (median over %d steps, each against "
               "the replay right after it; range %.1f-%.1f%%, fastest step %.1f%%; GEMMs alone "
               "%.3f s on average) and at %.1f%% of their rate through the backend's slot "
               "(%.3f s)\n", tm->gr.n, tm->gr.flops / 1e9, 100.0 * median_sort(rb, n), n,
               100.0 * blo, 100.0 * bhi, 100.0 * tm->rb[fast] / tm->dt[fast], sb / n,
               100.0 * median_sort(rk, n), sk / n);
    free(rb);
}

/* --cut ab: per pair of timed steps (with the k cut, then without), the
 * time without over the time with; > 1: the cut is faster. */
static void report_cut_ab(const bench *b, const timing *tm) {
    double lo, hi, med = pair_ratio_median(tm->dt, b->steps, &lo, &hi);
    printf("bench_train: k cut ab: step time without / with the cut %.3f (median of %d pairs, "
           "min %.3f, max %.3f)\n", med, b->steps / 2, lo, hi);
}

/* Sends `cmd` ("enable" or "disable") to perf's control fd and waits for its
 * "ack", so the events are on (off) before the next line runs. */
static int perf_ctl(int ctl, int ack, const char *cmd) {
    char line[16], buf[8];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    if (write(ctl, line, (size_t)n) != n) return -1;
    ssize_t r = read(ack, buf, sizeof buf);
    return r >= 3 && !memcmp(buf, "ack", 3) ? 0 : -1;
}

static int fail(void) {
    fprintf(stderr, "bench_train: %s\n", ds_last_error());
    return 1;
}

int main(int argc, char **argv) {
    bench b = {.stage = 0, .steps = 8, .warmup = 2, .T = 128, .global_batch = 32, .ckpt = 0,
               .precision = "fp32", .backend = "cpu", .bucket = 500000000, .gather_rows = 1};
    int overlap = -1, qgz = 0; /* overlap -1: DeepSpeed's default; 2 (either): ab; qgz 5: ab4 */
    const char *gemm = "auto";
    int zpp_ab = 0; /* --zeropp ab */
    int cut_ab = 0; /* --cut ab */
    int sparse = -1; /* --sparse: -1 unset, 0, 1, 2 ab */
    int check = 0;   /* --check: 0, 1, 2 ab */
    int pctl = -1, pack = -1; /* --perf-ctl */
    long long chunk = -1;     /* --attn-chunk-bytes; -1: the backend's own */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) b.stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) b.steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) b.warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) b.T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) b.global_batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) b.precision = argv[i + 1];
        else if (!strcmp(argv[i], "--backend")) b.backend = argv[i + 1];
        else if (!strcmp(argv[i], "--activation-checkpointing")) b.ckpt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--overlap"))
            overlap = !strcmp(argv[i + 1], "ab") ? 2 : atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bucket")) b.bucket = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--ag-bucket")) b.ag_bucket = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--sparse"))
            sparse = !strcmp(argv[i + 1], "ab") ? 2 : atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--check"))
            check = !strcmp(argv[i + 1], "ab") ? 2 : atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--qgz"))
            qgz = !strcmp(argv[i + 1], "ab") ? 2 : !strcmp(argv[i + 1], "ab4") ? 5
                                                 : atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--qwz")) b.qwz = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hpz")) b.hpz = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mics")) b.mics = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gather-rows")) b.gather_rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gemm")) gemm = argv[i + 1];
        else if (!strcmp(argv[i], "--gemm-replay")) b.replay = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--zeropp") && !strcmp(argv[i + 1], "ab")) zpp_ab = 1;
        else if (!strcmp(argv[i], "--cut") && !strcmp(argv[i + 1], "ab")) cut_ab = 1;
        else if (!strcmp(argv[i], "--attn-chunk-bytes") && (chunk = atoll(argv[i + 1])) >= 0) {
        }
        else if (!strcmp(argv[i], "--perf-ctl") &&
                 sscanf(argv[i + 1], "%d,%d", &pctl, &pack) == 2 && pctl >= 0 && pack >= 0) {
        } else {
            fprintf(stderr, "bench_train: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const int gemm_ab = !strcmp(gemm, "ab");
    if (b.steps < 1 || b.warmup < 0 ||
        (overlap == 2) + (qgz == 2 || qgz == 5) + gemm_ab + zpp_ab > 1) {
        fprintf(stderr, "bench_train: --steps must be at least 1, --warmup at least 0, and "
                "one of --overlap, --qgz, --gemm and --zeropp ab at a time\n");
        return 2;
    }
    if (sparse == 2 && (overlap == 2 || (qgz != 0 && qgz != 1) || gemm_ab || zpp_ab)) {
        fprintf(stderr, "bench_train: --sparse ab pairs with no other ab mode\n");
        return 2;
    }
    if (check == 2 && (overlap == 2 || (qgz != 0 && qgz != 1) || gemm_ab || zpp_ab ||
                       sparse == 2)) {
        fprintf(stderr, "bench_train: --check ab pairs with no other ab mode\n");
        return 2;
    }
    if (cut_ab && (overlap == 2 || qgz == 2 || qgz == 5 || gemm_ab || zpp_ab || sparse == 2 ||
                   check == 2 || strcmp(b.backend, "cpu") || b.steps < 2)) {
        fprintf(stderr, "bench_train: --cut ab needs the cpu backend, one engine (no other ab "
                "mode) and --steps 2 or more\n");
        return 2;
    }
    if (b.replay && (overlap == 2 || qgz == 2 || qgz == 5 || gemm_ab || zpp_ab || sparse == 2 ||
                     check == 2 || strcmp(b.backend, "cpu") || b.warmup < 1 || pctl >= 0)) {
        fprintf(stderr, "bench_train: --gemm-replay needs the cpu backend, one engine (no ab "
                "mode), --warmup 1 or more (it records the last warm-up step) and no "
                "--perf-ctl (the replays would be in the profile)\n");
        return 2;
    }
    size_t n_rows = (size_t)b.global_batch * (size_t)(b.steps + b.warmup);
    const char *names[6] = {"a", "b", "c", "d", "e", "f"};
    if (ds_cls_dataset_create(n_rows, b.T, C, names, &b.data) != DS_OK) return fail();
    b.ids = ds_dataset_i32(b.data, "input_ids");
    b.labels = ds_dataset_i32(b.data, "labels");
    b.mask = ds_dataset_f32(b.data, "attention_mask");
    unsigned s = 1;
    for (size_t i = 0; i < n_rows; i++) {
        for (int t = 0; t < b.T; t++) {
            s = s * 1103515245u + 12345u;
            b.ids[i * (size_t)b.T + (size_t)t] = 4 + (int)((s >> 8) % (unsigned)(V - 4));
            b.mask[i * (size_t)b.T + (size_t)t] = 1.0f;
        }
        b.labels[i] = (int)(i % (size_t)C);
    }
    int ne = overlap == 2 || qgz == 2 || qgz == 5 || gemm_ab || zpp_ab ? 2 : 1;
    if (sparse == 2 || check == 2) ne = 2;
    engine_t *e[2] = {NULL, NULL};
    timing tm[2];
    for (int k = 0; k < ne; k++) {
        double *m = calloc((size_t)b.steps * 6, sizeof *m);
        tm[k] = (timing){.overlap = overlap == 2 ? k : overlap,
                         .qgz = qgz == 2 ? k : qgz == 5 ? (k ? 4 : 1) : qgz,
                         .qwz = b.qwz, .hpz = b.hpz,
                         .gemm = gemm_ab ? (k ? "bf16" : "fp32") : gemm, .dt = m,
                         .fw = m + b.steps, .bw = m + 2 * b.steps, .st = m + 3 * b.steps,
                         .rb = m + 4 * b.steps, .rk = m + 5 * b.steps};
        if (zpp_ab) /* engine 0 plain stage 3, engine 1 hpZ + qwZ + qgZ */
            tm[k].qgz = tm[k].qwz = k, tm[k].hpz = k ? (b.hpz > 1 ? b.hpz : 2) : 1;
        tm[k].sparse = sparse == 2 ? k : sparse;
        tm[k].check = check == 2 ? k : check;
        if (make_engine(&b, &tm[k], &e[k]) != DS_OK) return fail();
    }
    const size_t own_chunk = e[0]->be->chunk_bytes;
    for (int k = 0; k < ne && chunk >= 0; k++) e[k]->be->chunk_bytes = (size_t)chunk;
    /* where the CPUs sit, around the timed steps (core_rtt.h) */
    const bool rtt = ds_world_size(e[0]) == 1;
    double rtt0 = -1.0, rtt1 = -1.0;
    for (int i = 0; i < b.warmup + b.steps; i++) {
        if (i == b.warmup && rtt) rtt0 = core_round_trip_ns(RTT_TRIPS);
        if (i == b.warmup && pctl >= 0 && perf_ctl(pctl, pack, "enable")) {
            fprintf(stderr, "bench_train: --perf-ctl %d,%d: perf did not acknowledge\n", pctl,
                    pack);
            return 1;
        }
        if (cut_ab) e[0]->be->gemm_no_cut = i >= b.warmup && (i - b.warmup) % 2 == 1;
        for (int j = 0; j < ne; j++) {
            int k = (i + j) % ne; /* ab: off first in even steps, on first in odd ones */
            if (timed_step(&b, e[k], i, &tm[k]) != DS_OK) return fail();
        }
    }
    if (pctl >= 0 && perf_ctl(pctl, pack, "disable")) {
        fprintf(stderr, "bench_train: --perf-ctl: perf did not acknowledge\n");
        return 1;
    }
    if (rtt) rtt1 = core_round_trip_ns(RTT_TRIPS);
    for (int k = 0; k < ne; k++) report(&b, e[k], &tm[k]);
    if (rtt) core_rtt_print("bench_train", rtt0, rtt1);
    if (chunk >= 0 && ds_rank(e[0]) == 0)
        printf("bench_train: attention in chunks of %lld bytes (the backend's own: %zu)\n", chunk,
               own_chunk);
    if (b.replay) report_replay(&b, e[0], &tm[0]);
    if (b.replay == 2 && ds_rank(e[0]) == 0 && gr_by_shape(&tm[0].gr, 5) != DS_OK) return fail();
    if (cut_ab && ds_rank(e[0]) == 0) report_cut_ab(&b, &tm[0]);
    if (ne == 2 && ds_rank(e[0]) == 0) {
        double *r = malloc((size_t)b.steps * sizeof *r);
        double rlo = 1e30, rhi = 0;
        for (int k = 0; k < b.steps; k++) {
            r[k] = tm[0].dt[k] / tm[1].dt[k]; /* > 1: the second engine is faster */
            if (r[k] < rlo) rlo = r[k];
            if (r[k] > rhi) rhi = r[k];
        }
        printf("bench_train: stage %d paired steps: samples/s %s on / off = %.3f (median "
               "of %d pairs, min %.3f, max %.3f)\n", b.stage,
               check == 2 ? "checked" : sparse == 2 ? "sparse" : overlap == 2 ? "overlap" : qgz == 2 ? "qgz"
               : qgz == 5 ? "qgz-int4" : zpp_ab ? "ZeRO++" : "bf16-GEMM",
               median(r, b.steps), b.steps, rlo, rhi);
        free(r);
    }
    for (int k = 0; k < ne; k++) {
        ds_finalize(e[k]);
        gr_free(&tm[k].gr);
        free(tm[k].dt);
    }
    ds_dataset_destroy(b.data);
    return 0;
}
