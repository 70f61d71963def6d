/* 1-bit Adam and 0/1 Adam in training (zero/onebit.h), on the checkpoint
 * tests' small BERT (2 layers, hidden 32) and data, fp32, gradient clipping
 * 1.0 and a warm-up schedule, at 2 and 4 ranks:
 *
 * 1. Warm-up is Adam, bit for bit: OneBitAdam before freeze_step and
 *    ZeroOneAdam while its variance interval is 1 (the first
 *    var_update_scaler steps) give the same losses and the same final
 *    parameters, 0 ulps, as AdamW with bias_correction false (DeepSpeed's
 *    1-bit update has no bias correction), 12 steps.
 * 2. Bytes per step, from the communicator's counters (ds_comm_report): the
 *    steps after freeze_step send at least 16x fewer bytes than the warm-up
 *    steps' fp32 all-reduce, everything counted (the compressed all_to_all
 *    and all_gather and the small host all-reduces of the loss and the
 *    agreed norm).
 * 3. After the warm-up, the loss follows Adam's within a band: 300 steps,
 *    freeze_step 100, then the mean loss of the last 100 steps of each run
 *    (lr 1e-3, betas [0.9, 0.98]). The band and its reason are at LOSS_BAND
 *    below. Why beta2 0.98: the update has no bias correction (DeepSpeed's),
 *    so the variance frozen at step F is (1 - beta2^F) of its value; with
 *    0.999 and F = 100 that is 0.095, steps 3.2x too long forever after, and
 *    the frozen runs blow up on this small task (measured: loss 0.9 against
 *    Adam's 0.6). DeepSpeed's own configs freeze after 16000-23000 steps,
 *    where 1 - 0.999^F is 1; 0.98^100 gives 0.87.
 * 4. The ranks hold the same weights after every 1-bit Adam step (the
 *    decompressed momentum is the same everywhere), and after a 0/1 Adam
 *    synchronisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onebit_harness.h"
#include "engine/comm/comm.h"
#include "tests/unit/test_util.h"

/* Adam's and 1-bit / 0/1 Adam's mean loss over the last 100 of 300 steps may
 * differ by at most this much (absolute, in nats: 1.10 at the start of this
 * 3-class task, about 0.59 at the end since every 4th label is wrong). Why
 * this size: after freeze_step each rank folds only its own gradient into
 * the momentum and the momentum crosses the link as signs with one scale per
 * tensor, so each update carries compression noise that error feedback
 * returns over the next steps, not in the same one: the papers promise the
 * same convergence per step, not equal losses step by step. Measured with
 * lr 5e-4, 1e-3 and 2e-3 at 2 and 4 ranks: gaps of -0.002 to +0.020 (lr
 * 1e-3: +0.010 / +0.011 at 2 ranks, +0.008 / +0.014 at 4); the band is 3x
 * the largest. What it catches: a compression without the scale per tensor
 * (one scale for the model) ended 0/1 Adam at 1.0-1.2, a frozen variance
 * taken too early at 0.9, both far outside. */
#define LOSS_BAND 0.06

static ds_dataset *g_data;

static ds_status make(const char *type, const char *params, engine_t **out) {
    return ob_make(type, params, 0.001, g_data, out);
}


typedef struct run {
    double *loss;
    uint64_t *bytes; /* per step, everything this rank sent */
    float *params;
    size_t n;
} run;

static uint64_t sent(const ds_comm_stats *s) {
    uint64_t b = s->host_bytes;
    for (int k = 0; k < DS_COLL_COUNT; k++) b += s->bytes_sent[k];
    return b;
}


static run train(const char *type, const char *params, int steps, bool check_same) {
    run r = {0};
    engine_t *e = NULL;
    if (make(type, params, &e) != DS_OK) TEST_DIE(ds_last_error());
    r.loss = calloc((size_t)steps, sizeof *r.loss);
    r.bytes = calloc((size_t)steps, sizeof *r.bytes);
    for (int s = 0; s < steps; s++) {
        ds_comm_stats a, b;
        ds_comm_report(e, &a);
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) TEST_DIE(ds_last_error());
        ds_comm_report(e, &b);
        r.loss[s] = info.loss;
        r.bytes[s] = sent(&b) - sent(&a);
        if (check_same && (s % 10 == 9 || s == steps - 1)) {
            size_t n;
            float *p = ck_params(e, &n);
            CHECK(p && ob_same_everywhere(e, p, n), "%s step %d: ranks hold different weights",
                  type, s + 1);
            free(p);
        }
    }
    r.params = ck_params(e, &r.n);
    ds_finalize(e);
    return r;
}

static void run_free(run *r) { free(r->loss), free(r->bytes), free(r->params); }

static int exact(const run *a, const run *b, int steps) {
    int bad = 0;
    for (int s = 0; s < steps; s++) bad += memcmp(&a->loss[s], &b->loss[s], sizeof(double)) != 0;
    bad += a->n != b->n || memcmp(a->params, b->params, a->n * sizeof(float)) != 0;
    return bad;
}

static double tail_mean(const run *r, int steps, int last) {
    double m = 0;
    for (int s = steps - last; s < steps; s++) m += r->loss[s];
    return m / last;
}

int main(void) {
    /* 2000 rows, every 4th labelled wrong (its class token says another
     * class): the loss cannot reach 0, so the runs after freeze_step still
     * learn (memorise) instead of resting at the minimum */
    g_data = ob_make_data();
    if (!g_data) TEST_DIE("data");
    int32_t *labels = ds_dataset_i32(g_data, "labels");
    for (size_t i = 0; i < 2000; i += 4) labels[i] = (labels[i] + 1) % 3;
    engine_t *probe = NULL;
    if (make("AdamW", "", &probe) != DS_OK) TEST_DIE(ds_last_error());
    int world = (int)ds_get_config(probe)->world_size;
    ds_finalize(probe);

    /* 1. warm-up = Adam without bias correction, bit for bit */
    const int W = 12;
    run adam = train("AdamW", ", \"bias_correction\": false", W, false);
    run ob = train("OneBitAdam", ", \"freeze_step\": 1000", W, false);
    run zo = train("ZeroOneAdam", ", \"var_update_scaler\": 16", W, false);
    CHECK(exact(&adam, &ob, W) == 0, "OneBitAdam before freeze_step differs from AdamW");
    CHECK(exact(&adam, &zo, W) == 0, "ZeroOneAdam in its first var_update_scaler steps differs "
          "from AdamW");
    run_free(&adam), run_free(&ob), run_free(&zo);

    /* 2 + 3 + 4: 300 steps, freeze_step (var_freeze_step) 100 */
    const int N = 300, F = 100, LAST = 100;
    run a = train("AdamW", ", \"bias_correction\": false", N, false);
    run o = train("OneBitAdam", ", \"freeze_step\": 100", N, world > 1);
    /* DeepSpeed's tutorial values for the local steps (local_step_scaler 1000,
     * local_step_clipper 16): within 200 steps every step synchronises */
    run z = train("ZeroOneAdam", ", \"var_freeze_step\": 100, \"local_step_scaler\": 1000,"
                  " \"local_step_clipper\": 16", N, false);
    if (world > 1) {
        uint64_t warm = o.bytes[F - 1], worst = 0;
        for (int s = F; s < N; s++) worst = o.bytes[s] > worst ? o.bytes[s] : worst;
        CHECK(warm >= 16 * worst, "bytes per step: warm-up %llu, after freeze_step at most %llu "
              "(%.1fx, want >= 16x)", (unsigned long long)warm, (unsigned long long)worst,
              (double)warm / (double)worst);
        /* equal to the fp32 ring all-reduce of the warm-up (Adam's) */
        CHECK(a.bytes[N - 1] == warm, "Adam's step sends %llu bytes, 1-bit's warm-up %llu",
              (unsigned long long)a.bytes[N - 1], (unsigned long long)warm);
    }
    double la = tail_mean(&a, N, LAST), lo = tail_mean(&o, N, LAST), lz = tail_mean(&z, N, LAST);
    printf("world %d: mean loss of the last %d of %d steps: Adam %.4f, 1-bit Adam %.4f "
           "(%+.4f), 0/1 Adam %.4f (%+.4f); 1-bit step bytes %llu -> %llu\n",
           world, LAST, N, la, lo, lo - la, lz, lz - la, (unsigned long long)o.bytes[F - 1],
           (unsigned long long)o.bytes[N - 1]);
    CHECK(isfinite(lo) && fabs(lo - la) <= LOSS_BAND, "1-bit Adam %.4f vs Adam %.4f", lo, la);
    CHECK(isfinite(lz) && fabs(lz - la) <= LOSS_BAND, "0/1 Adam %.4f vs Adam %.4f", lz, la);
    run_free(&a), run_free(&o), run_free(&z);
    ds_dataset_destroy(g_data);
    return test_finish("test_onebit");
}
