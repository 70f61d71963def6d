/* The NVMe optimizer swap (offload/nvme_swap.h): its disk throughput, and
 * the training step with the optimizer state in memory, in host RAM
 * (offload "cpu") and in swap files (offload "nvme").
 *
 *   bench/bench_swap --io DIR [--mib 256] [--sub-group-mib 64] [--threads T --depth Q --block B]
 *                    [--engine auto|pool|uring]
 *       one partition of 3 tensors of MIB MiB each in swap files under DIR:
 *       write (the start-up fill), read only, and the step's read + write
 *       pass (pipelined), in MB/s of file data moved. Compare with
 *       dd bs=1M oflag=direct / iflag=direct on the same file system.
 *   OMP_NUM_THREADS=2 bench/bench_swap --train DIR [--steps 6]
 *       an MLP of 80.7 M parameters (Adam state 0.97 GB), stage 1, one rank,
 *       fp32, a tiny batch so the optimizer step dominates: median step time
 *       without offload, offload "cpu", offload "nvme" with sub-groups of 1e7
 *       (pipelined and not), swap files under DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "models/models.h"
#include "offload/nvme_swap.h"

static void die(const char *what) {
    fprintf(stderr, "bench_swap: %s: %s\n", what, ds_last_error());
    exit(1);
}

static ds_status ones(void *ctx, int64_t b, int64_t e, float *dst) {
    (void)ctx;
    for (int64_t i = 0; i < e - b; i++) dst[i] = 1.0f;
    return DS_OK;
}

/* One pass over every piece: begin (reads, ahead when pipelined), end
 * (writes when dirty, behind when pipelined), finish. */
static double pass(ds_tier *t, bool dirty) {
    double t0 = now_s();
    for (int64_t b = 0; b < t->n; b += t->piece) {
        int64_t e = t->n - b < t->piece ? t->n : b + t->piece;
        float *st[3];
        if (t->ops->begin(t, b, e, st) != DS_OK) die("begin");
        st[0][0] += 1.0f; /* touch it, as an update would */
        if (t->ops->end(t, b, e, dirty) != DS_OK) die("end");
    }
    if (t->ops->finish(t) != DS_OK) die("finish");
    return now_s() - t0;
}

static int run_io(const char *dir, int64_t mib, int64_t sg_mib, int threads, int depth,
                  int64_t block, ds_aio_engine engine) {
    ds_backend *be;
    ds_mem *mem;
    if (ds_mem_create(&mem) != DS_OK) die("accountant");
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 1, .mem = mem};
    if (ds_backend_create(&bd, &be) != DS_OK) die("backend");
    ds_offload_config off = {.device = DS_OFFLOAD_NVME, .buffer_count = 9, .pipeline_read = true,
                             .pipeline_write = true, .fast_init = true};
    snprintf(off.nvme_path, sizeof off.nvme_path, "%s", dir);
    ds_aio_config aio = {.block_size = block, .queue_depth = depth, .thread_count = threads};
    int64_t n = mib << 18; /* elements of 4 bytes */
    ds_nvme_swap_desc d = {.buf_be = be, .what = "bench", .off = &off, .aio = &aio,
                           .sub_group_size = sg_mib << 18, .rank = 0, .n = n, .n_tensors = 3,
                           .engine = engine};
    ds_tier *t;
    if (ds_nvme_swap_create(&d, &t) != DS_OK) die("swap");
    double mb = 3.0 * (double)n * 4.0 / 1e6;
    double t0 = now_s();
    for (int k = 0; k < 3; k++)
        if (t->ops->fill(t, k, ones, NULL) != DS_OK) die("fill");
    double tw = now_s() - t0;
    double tr = pass(t, false);
    double trw = pass(t, true);
    printf("swap of 3 x %lld MiB, sub-groups of %lld MiB, %s, thread_count %d, queue_depth %d, "
           "block %lld KiB:\n", (long long)mib, (long long)sg_mib, ds_nvme_swap_engine(t),
           threads, depth, (long long)(block >> 10));
    printf("  write (fill)       %8.0f MB/s\n", mb / tw);
    printf("  read (pipelined)   %8.0f MB/s\n", mb / tr);
    printf("  read + write step  %8.0f MB/s each way (%.2f s for %.0f MB in and out)\n",
           mb / trw, trw, mb);
    t->ops->destroy(t);
    ds_backend_destroy(be);
    ds_mem_destroy(mem);
    return 0;
}

static double train_median(const char *offload, int steps) {
    ds_mlp_desc md = {.vocab_size = 8192, .max_seq_len = 16, .embed_dim = 1024,
                      .hidden_dim = 4096, .n_hidden = 5, .n_classes = 4};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) die("model");
    const char *names[4] = {"a", "b", "c", "d"};
    ds_dataset *data;
    size_t rows = (size_t)8 * (size_t)(steps + 1);
    if (ds_cls_dataset_create(rows, 16, 4, names, &data) != DS_OK) die("dataset");
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    for (size_t i = 0; i < rows; i++) {
        labels[i] = (int32_t)(i % 4);
        for (int j = 0; j < 16; j++) {
            ids[i * 16 + j] = (int32_t)((i * 131 + (size_t)j * 17) % 8192);
            mask[i * 16 + j] = 1.0f;
        }
    }
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 1e-4}}, \"steps_per_print\": 1000, \"zero_optimization\": {\"stage\": 1%s}}",
             offload);
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) die("ds_initialize");
    double *t = calloc((size_t)steps, sizeof *t);
    ds_step_info info;
    if (ds_train_batch(e, &info) != DS_OK) die("warm-up step");
    for (int i = 0; i < steps; i++) {
        double t0 = now_s();
        if (ds_train_batch(e, &info) != DS_OK) die("step");
        t[i] = now_s() - t0;
    }
    double med = median_sort(t, steps);
    free(t);
    ds_finalize(e);
    ds_dataset_destroy(data);
    return med;
}

static int run_train(const char *dir, int steps) {
    char nv[1024], nvp[1024];
    snprintf(nv, sizeof nv,
             ", \"sub_group_size\": 1e7, \"offload_optimizer\": {\"device\": \"nvme\","
             " \"nvme_path\": \"%s\"}", dir);
    snprintf(nvp, sizeof nvp,
             ", \"sub_group_size\": 1e7, \"offload_optimizer\": {\"device\": \"nvme\","
             " \"nvme_path\": \"%s\", \"buffer_count\": 9, \"pipeline_read\": true,"
             " \"pipeline_write\": true}", dir);
    struct { const char *name, *off; } runs[] = {
        {"no offload", ""},
        {"offload cpu", ", \"offload_optimizer\": {\"device\": \"cpu\"}"},
        {"offload nvme, sub-groups 1e7", nv},
        {"offload nvme, sub-groups 1e7, pipelined", nvp},
    };
    printf("MLP 80.7 M parameters, stage 1, 1 rank, fp32 AdamW, batch 8 x 16 tokens; median of "
           "%d steps\n", steps);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        printf("  %-42s %7.3f s/step\n", runs[i].name, train_median(runs[i].off, steps));
    return 0;
}

int main(int argc, char **argv) {
    const char *io = NULL, *train = NULL;
    int64_t mib = 256, sg = 64, block = 1 << 20;
    int threads = 1, depth = 8, steps = 6;
    ds_aio_engine engine = DS_AIO_AUTO;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--io")) io = argv[i + 1];
        else if (!strcmp(argv[i], "--train")) train = argv[i + 1];
        else if (!strcmp(argv[i], "--mib")) mib = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--sub-group-mib")) sg = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--depth")) depth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--block")) block = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--engine"))
            engine = !strcmp(argv[i + 1], "pool") ? DS_AIO_POOL
                     : !strcmp(argv[i + 1], "uring") ? DS_AIO_URING : DS_AIO_AUTO;
        else {
            fprintf(stderr, "bench_swap: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (io) return run_io(io, mib, sg, threads, depth, block, engine);
    if (train) return run_train(train, steps);
    fprintf(stderr, "usage: bench_swap --io DIR | --train DIR\n");
    return 2;
}
