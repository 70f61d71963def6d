/* ZeRO-Infinity on one machine (issue 14, item 7): a model whose training
 * state does not fit in RAM, refused up front without offload, trained
 * with the optimizer state on NVMe.
 *
 *   OMP_NUM_THREADS=2 bench/bench_infinity --dir DIR [--hidden 8192] [--layers 30]
 *       [--steps 4] [--batch 8] [--sub-group 5e7] [--pipeline] [--lr 1e-4]
 *
 * An MLP (vocab 1024, embedding 1024 wide, `layers` hidden layers of
 * `hidden`, 4 classes: 1.956e9 parameters at the defaults), bf16, ZeRO stage
 * 1, one rank, AdamW. First the config without offload: ds_initialize must
 * refuse it (the estimate against MemAvailable) before allocating. Then
 * offload_optimizer nvme under DIR (sub_group_size pieces, pipelined or
 * not), trained `steps` steps on one fixed batch, each split into compute
 * (forward + backward), swap read, swap write and Adam (ds_host_optim's
 * process totals) and the rest of ds_step, with the swap's throughput.
 * Peak RSS (VmHWM) against the estimate is printed at the end. The disk's
 * own throughput: bench/infinity_demo.sh runs dd beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/engine.h"
#include "models/models.h"
#include "offload/host_optim.h"
#include "zero/estimate.h"

static void die(const char *what) {
    fprintf(stderr, "bench_infinity: %s: %s\n", what, ds_last_error());
    exit(1);
}

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

/* kB in /proc/self/status's line `key` (VmHWM: peak RSS). */
static double status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) v = atof(line + n + 1);
    if (f) fclose(f);
    return v;
}

typedef struct args {
    const char *dir;
    int hidden, layers, steps, batch;
    double sub_group, lr;
    bool pipeline;
} args;

static ds_model *make_model(const args *a) {
    ds_mlp_desc md = {.vocab_size = 1024, .max_seq_len = 16, .embed_dim = 1024,
                      .hidden_dim = a->hidden, .n_hidden = a->layers, .n_classes = 4};
    ds_model *m;
    if (ds_mlp_create(&md, &m) != DS_OK) die("model");
    return m;
}

static void config(const args *a, bool nvme, char *out, size_t cap) {
    char off[1024] = "";
    if (nvme)
        snprintf(off, sizeof off,
                 ", \"sub_group_size\": %.0f, \"offload_optimizer\": {\"device\": \"nvme\","
                 " \"nvme_path\": \"%s\", \"buffer_count\": %d, \"pipeline_read\": %s,"
                 " \"pipeline_write\": %s, \"fast_init\": true}",
                 a->sub_group, a->dir, a->pipeline ? 9 : 4, a->pipeline ? "true" : "false",
                 a->pipeline ? "true" : "false");
    snprintf(out, cap,
             "{\"train_batch_size\": %d, \"steps_per_print\": 1000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %g}},"
             " \"bf16\": {\"enabled\": true},"
             " \"zero_optimization\": {\"stage\": 1%s}}",
             a->batch, a->lr, off);
}

int main(int argc, char **argv) {
    args a = {.hidden = 8192, .layers = 30, .steps = 4, .batch = 8, .sub_group = 5e7,
              .lr = 1e-4};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--dir")) a.dir = v, i++;
        else if (!strcmp(argv[i], "--hidden")) a.hidden = atoi(v), i++;
        else if (!strcmp(argv[i], "--layers")) a.layers = atoi(v), i++;
        else if (!strcmp(argv[i], "--steps")) a.steps = atoi(v), i++;
        else if (!strcmp(argv[i], "--batch")) a.batch = atoi(v), i++;
        else if (!strcmp(argv[i], "--sub-group")) a.sub_group = atof(v), i++;
        else if (!strcmp(argv[i], "--lr")) a.lr = atof(v), i++;
        else if (!strcmp(argv[i], "--pipeline")) a.pipeline = true;
        else {
            fprintf(stderr, "bench_infinity: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!a.dir) {
        fprintf(stderr, "usage: bench_infinity --dir DIR [--hidden H] [--layers L] [--steps N] "
                        "[--batch B] [--sub-group S] [--pipeline] [--lr LR]\n");
        return 2;
    }
    /* one fixed batch: every step sees these rows (4 classes, skewed so
     * that even the last layers alone can lower the loss) */
    const char *names[4] = {"a", "b", "c", "d"};
    ds_dataset *data;
    if (ds_cls_dataset_create((size_t)a.batch, 16, 4, names, &data) != DS_OK) die("dataset");
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    for (int i = 0; i < a.batch; i++) {
        labels[i] = i % 4 == 3 ? 1 : 0;
        for (int j = 0; j < 16; j++) {
            ids[i * 16 + j] = (int32_t)((i * 131 + j * 17 + labels[i] * 7) % 1024);
            mask[i * 16 + j] = 1.0f;
        }
    }
    char cfg[2048];
    ds_init_desc d;
    engine_t *e;

    /* 1. without offload: refused before anything is allocated */
    config(&a, false, cfg, sizeof cfg);
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = make_model(&a);
    d.train_data = data;
    double t0 = now_s();
    ds_status st = ds_initialize(&d, &e);
    printf("without offload: %s after %.2f s, peak RSS %.2f GiB\n  %s\n",
           st == DS_OK ? "STARTED (expected a refusal)" : ds_status_to_string(st),
           now_s() - t0, gib(status_kb("VmHWM:") * 1024), st == DS_OK ? "" : ds_last_error());
    if (st == DS_OK) ds_finalize(e);
    ds_clear_error();

    /* 2. optimizer state on NVMe; the peak RSS counts from here (writing
     * 5 to clear_refs resets VmHWM, Linux >= 4.0) */
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    if (cr) {
        fputs("5", cr);
        fclose(cr);
    }
    config(&a, true, cfg, sizeof cfg);
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = make_model(&a);
    d.train_data = data;
    t0 = now_s();
    if (ds_initialize(&d, &e) != DS_OK) die("ds_initialize with offload_optimizer nvme");
    printf("offload_optimizer nvme: started in %.1f s\n", now_s() - t0);
    ds_mem_report est, real;
    if (ds_estimate_model(ds_get_model(e), 1, ds_get_config(e), DS_BACKEND_CPU, &est) != DS_OK)
        die("estimate");
    ds_memory_report(e, &real);
    printf("step  loss      total_s  compute_s  read_s (GB/s)   write_s (GB/s)  adam_s  "
           "other_s\n");
    for (int s = 0; s < a.steps; s++) {
        ds_host_optim_totals h0, h1;
        ds_host_optim_get_totals(&h0);
        double s0 = now_s();
        ds_step_info info;
        /* ds_train_batch runs forward + backward + step; time the step
         * itself through the optimizer totals and the rest as compute */
        if (ds_train_batch(e, &info) != DS_OK) die("step");
        double total = now_s() - s0;
        ds_host_optim_get_totals(&h1);
        double step = h1.step_s - h0.step_s, rd = h1.read_wait_s - h0.read_wait_s,
               wr = h1.write_wait_s - h0.write_wait_s, adam = h1.update_s - h0.update_s;
        double rb = (double)(h1.read_bytes - h0.read_bytes),
               wb = (double)(h1.write_bytes - h0.write_bytes);
        printf("%4d  %.5f  %7.2f  %9.2f  %6.2f (%.2f)  %6.2f (%.2f)  %6.2f  %7.2f\n", s + 1,
               info.loss, total, total - step, rd, rd > 0 ? rb / rd / 1e9 : 0, wr,
               wr > 0 ? wb / wr / 1e9 : 0, adam, step - rd - wr - adam);
        fflush(stdout);
    }
    double hwm = status_kb("VmHWM:") * 1024;
    uint64_t real_ram = real.total[DS_PLACE_DEVICE] + real.total[DS_PLACE_HOST];
    printf("memory: estimate %.3f GiB RAM + %.3f GiB NVMe; accountant %.3f GiB RAM + %.3f GiB "
           "NVMe; peak RSS (VmHWM) %.3f GiB\n",
           gib((double)ds_estimate_ram(&est, DS_BACKEND_CPU)), gib((double)est.total[DS_PLACE_NVME]),
           gib((double)real_ram), gib((double)real.total[DS_PLACE_NVME]), gib(hwm));
    ds_finalize(e);
    ds_dataset_destroy(data);
    return 0;
}
