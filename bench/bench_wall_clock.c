/* What wall_clock_breakdown costs (issue 16 item 2: "overhead when off:
 * none measurable").
 *
 *   OMP_NUM_THREADS=1 build/bench/bench_wall_clock [--rounds 9] [--steps 300]
 *
 * 1. The timer calls themselves: 10^8 ds_wc_start/ds_wc_stop pairs with the
 *    key off and on, in ns per pair (a step makes three pairs).
 * 2. Whole steps of a small BERT (hidden 32, 1 layer, sequence 16, batch 8,
 *    so a step is short and a fixed cost shows as much as it can): two
 *    engines, the key off and on, trained in alternating rounds of --steps
 *    steps; the median over rounds of each one's mean step time, and the
 *    difference. Single rank, so no communication enters the timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/engine.h"
#include "engine/engine_timers.h"
#include "models/models.h"

static double timer_pairs(bool on, long n) {
    ds_wc_state w = {.on = on};
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        double t = ds_wc_start(&w);
        __asm__ volatile("" ::: "memory"); /* keep the pair from being folded away */
        ds_wc_stop(&w, DS_WC_FWD, t);
    }
    double dt = now_s() - t0;
    if (w.acc[0] < 0) printf("impossible\n"); /* uses the result */
    return dt / (double)n * 1e9;
}

static engine_t *make(bool wcb, ds_dataset *data) {
    ds_bert_desc bd = {.vocab_size = 100, .hidden_size = 32, .num_hidden_layers = 1,
                       .num_attention_heads = 2, .intermediate_size = 64,
                       .max_position_embeddings = 64, .type_vocab_size = 2,
                       .hidden_dropout_prob = 0.1f, .attention_probs_dropout_prob = 0.1f,
                       .n_classes = 2, .max_seq_len = 16};
    ds_model *model;
    if (ds_bert_create(&bd, &model) != DS_OK) return NULL;
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"steps_per_print\": 1000000, \"wall_clock_breakdown\": %s,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}}}",
             wcb ? "true" : "false");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    return ds_initialize(&d, &e) == DS_OK ? e : NULL;
}

int main(int argc, char **argv) {
    int rounds = 9, steps = 300;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_wall_clock: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > 1000 || steps < 1) {
        fprintf(stderr, "bench_wall_clock: --rounds 1..1000, --steps >= 1\n");
        return 2;
    }
    long n = 100000000;
    printf("timer pair (ds_wc_start + ds_wc_stop), ns: off %.2f, on %.2f\n", timer_pairs(false, n),
           timer_pairs(true, n / 10));

    const char *names[2] = {"a", "b"};
    ds_dataset *data;
    size_t rows = 512;
    if (ds_cls_dataset_create(rows, 16, 2, names, &data) != DS_OK) {
        fprintf(stderr, "bench_wall_clock: %s\n", ds_last_error());
        return 1;
    }
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    for (size_t i = 0; i < rows; i++) {
        for (int t = 0; t < 16; t++) {
            ids[i * 16 + (size_t)t] = 4 + (int)((i * 7 + (size_t)t * 13) % 96);
            mask[i * 16 + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % 2);
    }
    engine_t *e[2] = {make(false, data), make(true, data)};
    if (!e[0] || !e[1]) {
        fprintf(stderr, "bench_wall_clock: %s\n", ds_last_error());
        return 1;
    }
    double *ms = calloc((size_t)rounds * 2, sizeof *ms);
    for (int r = -1; r < rounds; r++) { /* round -1 warms both up */
        for (int k = 0; k < 2; k++) {
            int which = (r & 1) ? 1 - k : k; /* alternate who goes first */
            double t0 = now_s();
            for (int s = 0; s < steps; s++) {
                ds_step_info info;
                if (ds_train_batch(e[which], &info) != DS_OK) {
                    fprintf(stderr, "bench_wall_clock: %s\n", ds_last_error());
                    return 1;
                }
            }
            if (r >= 0) ms[(size_t)which * (size_t)rounds + (size_t)r] = (now_s() - t0) * 1e3 / steps;
        }
    }
    double off = median_sort(ms, rounds), on = median_sort(ms + rounds, rounds);
    printf("step of a small BERT (median of %d rounds of %d steps), ms: off %.4f [%.4f..%.4f], "
           "on %.4f [%.4f..%.4f]; on - off %+.4f ms (%+.2f%%)\n",
           rounds, steps, off, ms[0], ms[rounds - 1], on, ms[rounds], ms[2 * rounds - 1], on - off,
           100.0 * (on - off) / off);
    free(ms);
    ds_finalize(e[0]);
    ds_finalize(e[1]);
    ds_dataset_destroy(data);
    return 0;
}
