/* Train the conv regressor (conv_model.h) on synthetic sensor signals, data
 * parallel with ZeRO, through zero-engine's public API; then score a held-out
 * set with ds_predict. A user program: it includes the installed headers only.
 *
 *   cc -std=c11 train.c conv_model.c $(pkg-config --cflags --libs zero-engine) -o conv_train
 *   ./conv_train --config ds_config.json                       # one rank
 *   engine-run --np 2 --config ds_config.json ./conv_train     # two ranks
 *   mpirun -np 2 ./conv_train --config ds_config.json          # the same, by hand
 *
 * Options: --config FILE (required; engine-run passes it), --steps N
 * (default 150), --seed S (data and initialisation, default 42).
 * Rank 0 prints "step N loss X" after every optimizer step and
 * "held-out mse X (target variance 1)" at the end. Exit status 0, or 1 with a
 * one-line message naming what failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <engine/engine.h>

#include "conv_model.h"

/* ---- data ----------------------------------------------------------------
 * Each row: C_in = 3 vibration sensors sampled L times,
 *   s_c(t) = A_c sin(2 pi f_c t / L + phi_c),  x_c(t) = s_c(t) + noise,
 * with amplitude A_c in [0.2, 1), f_c in 1..6 cycles per window, a random
 * phase and uniform noise in [-0.1, 0.1]. The target is an intensity reading
 * made of what a conv + ReLU + mean pool can measure (|v| = relu(v) +
 * relu(-v), a difference is a 2-tap filter):
 *   raw = mean_t |s_0| - 0.5 mean_t |s_1| + 2 mean_t |s_2(t + 1) - s_2(t)|,
 * standardised with the training rows' mean and deviation, so predicting the
 * mean scores a loss of 1. */
enum { SEQ_LEN = 32, IN_CHANNELS = 3 };

static double uniform01(uint64_t *state) {
    return (double)(ds_splitmix64_next(state) >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

static void make_row(uint64_t *rng, float *x, double *raw) {
    const double two_pi = 6.283185307179586;
    double s[IN_CHANNELS][SEQ_LEN];
    for (int c = 0; c < IN_CHANNELS; c++) {
        double A = 0.2 + 0.8 * uniform01(rng);
        int f = 1 + (int)(6.0 * uniform01(rng));
        double phi = two_pi * uniform01(rng);
        for (int t = 0; t < SEQ_LEN; t++) {
            s[c][t] = A * sin(two_pi * f * t / SEQ_LEN + phi);
            x[t * IN_CHANNELS + c] = (float)(s[c][t] + 0.2 * (uniform01(rng) - 0.5));
        }
    }
    double a0 = 0, a1 = 0, d2 = 0;
    for (int t = 0; t < SEQ_LEN; t++) {
        a0 += fabs(s[0][t]) / SEQ_LEN;
        a1 += fabs(s[1][t]) / SEQ_LEN;
        if (t + 1 < SEQ_LEN) d2 += fabs(s[2][t + 1] - s[2][t]) / (SEQ_LEN - 1);
    }
    *raw = a0 - 0.5 * a1 + 2.0 * d2;
}

/* n rows of "signal" [L, C_in] and "target"; mean and sd standardise the
 * targets (NULL: use this set's own, returned there). */
static ds_status make_data(size_t n, uint64_t seed, double *mean, double *sd, ds_dataset **out) {
    *out = NULL;
    ds_dataset *d;
    DS_TRY(ds_dataset_create(n, 0, &d)); /* 0: no DS_DIM_SEQ column */
    const int64_t sig[2] = {SEQ_LEN, IN_CHANNELS};
    float *x, *y;
    ds_status st;
    DS_TRY_GOTO(st, ds_dataset_add_column(d, "signal", DS_F32, 2, sig, (void **)&x), fail);
    DS_TRY_GOTO(st, ds_dataset_add_column(d, "target", DS_F32, 0, NULL, (void **)&y), fail);
    double *raw = malloc(n * sizeof *raw);
    if (!raw) {
        st = DS_ERR(DS_ERR_OOM, "make_data: %zu targets", n);
        goto fail;
    }
    uint64_t rng = seed;
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++) {
        make_row(&rng, x + i * SEQ_LEN * IN_CHANNELS, &raw[i]);
        sum += raw[i];
        sum2 += raw[i] * raw[i];
    }
    if (*sd <= 0) {
        *mean = sum / (double)n;
        *sd = sqrt(sum2 / (double)n - *mean * *mean);
    }
    for (size_t i = 0; i < n; i++) y[i] = (float)((raw[i] - *mean) / *sd);
    free(raw);
    *out = d;
    return DS_OK;
fail:
    ds_dataset_destroy(d);
    return st;
}

/* ---- evaluation ------------------------------------------------------------
 * Mean squared error of ds_predict over every row of `d`, in micro-batches
 * (the engine planned its buffers for that many rows). Every rank scores all
 * rows: under ZeRO stage 3 ds_predict gathers parameters, so all ranks must
 * call it equally often. */
static ds_status held_out_mse(engine_t *e, const ds_dataset *d, double *out) {
    int cap = (int)ds_get_config(e)->train_micro_batch_size_per_gpu;
    const float *x = ds_dataset_f32(d, "signal"), *y = ds_dataset_f32(d, "target");
    float *pred = malloc((size_t)cap * sizeof *pred);
    if (!pred) return DS_ERR(DS_ERR_OOM, "held_out_mse: %d predictions", cap);
    double sum = 0;
    ds_status st = DS_OK;
    for (size_t i = 0; i < d->n && st == DS_OK; i += (size_t)cap) {
        int B = (int)(d->n - i < (size_t)cap ? d->n - i : (size_t)cap);
        ds_batch b = {.B = B, .T = 1};
        st = ds_batch_set(&b, "signal", DS_F32, x + i * SEQ_LEN * IN_CHANNELS);
        if (st == DS_OK) st = ds_predict(e, &b, pred); /* [B, 1]: the head's output */
        for (int r = 0; st == DS_OK && r < B; r++)
            sum += (pred[r] - y[i + (size_t)r]) * (double)(pred[r] - y[i + (size_t)r]);
    }
    free(pred);
    *out = sum / (double)d->n;
    return st;
}

/* ---- main ------------------------------------------------------------------ */

static int fail(const char *what) {
    fprintf(stderr, "conv_train: %s: %s\n", what, ds_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *config = NULL;
    long steps = 150;
    unsigned long long seed = 42;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = strtol(argv[++i], &end, 10);
            if (*end || steps < 1) {
                fprintf(stderr, "conv_train: --steps wants a count >= 1, got %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], &end, 10);
            if (*end) {
                fprintf(stderr, "conv_train: --seed wants an integer, got %s\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: conv_train --config ds_config.json [--steps N] [--seed S]\n"
                            "(unknown or incomplete argument %s)\n", argv[i]);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "usage: conv_train --config ds_config.json [--steps N] [--seed S]\n");
        return 2;
    }

    /* Every rank builds the same data; the engine's sampler gives each its slice. */
    double mean = 0, sd = 0;
    ds_dataset *train = NULL, *test = NULL;
    if (make_data(1024, seed, &mean, &sd, &train) != DS_OK) return fail("training data");
    if (make_data(256, seed + 1, &mean, &sd, &test) != DS_OK) { /* the training set's scaling */
        ds_dataset_destroy(train);
        return fail("held-out data");
    }

    cr_model_desc md = {.seq_len = SEQ_LEN, .in_channels = IN_CHANNELS, .channels = 16,
                        .kernel1 = 5, .kernel2 = 3};
    ds_model *model;
    if (cr_model_create(&md, &model) != DS_OK) {
        ds_dataset_destroy(train);
        ds_dataset_destroy(test);
        return fail("model");
    }
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_path = config;
    d.model = model; /* the engine owns it from here, also if ds_initialize fails */
    d.train_data = train;
    d.seed = seed;
    engine_t *e = NULL;
    int rc = 0;
    if (ds_initialize(&d, &e) != DS_OK) {
        rc = fail("ds_initialize");
        goto out;
    }
    int rank = ds_rank(e);
    if (rank == 0)
        printf("conv_train: %lld parameters, %d ranks, ZeRO stage %d\n",
               (long long)ds_model_num_params(ds_get_model(e)), ds_world_size(e),
               ds_get_config(e)->zero_stage);
    for (long i = 0; i < steps; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            rc = fail("ds_train_batch");
            goto out;
        }
        if (rank == 0) printf("step %lld loss %.9g\n", (long long)info.step, info.loss);
    }
    double mse = 0;
    if (held_out_mse(e, test, &mse) != DS_OK) {
        rc = fail("ds_predict");
        goto out;
    }
    if (rank == 0) printf("held-out mse %.6f (target variance 1)\n", mse);
out:
    ds_finalize(e);
    ds_dataset_destroy(train);
    ds_dataset_destroy(test);
    return rc;
}
