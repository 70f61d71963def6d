/* Dropout and the masked attention softmax of the cpu model kernels.
 *
 * Dropout: the keep fraction and its independence across neighbours are
 * binomial statistics checked within 6 standard deviations (a false alarm
 * once in ~5e8 runs; a wrong p, a stuck counter or a reused block shifts
 * them by hundreds of sigmas at n = 2^20); the mask is exactly the stream of
 * ds_rng_uniform_at (engine/backend/math.h) at (seed, offset + i), so
 * backward regenerates it bit for bit and a tensor cut in pieces at offsets
 * gets the same mask.
 *
 * Softmax: padded keys get probability exactly 0, rows sum to 1 within
 * T * eps (float summation of T terms), a row with no real key is zeros
 * (no NaN), the result matches a double reference within a few eps, the
 * backward matches ds = scale * p * (dp - sum dp p) in double, and the fused
 * attention dropout is the same stream as plain dropout. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/backend/nn.h"
#include "tests/unit/gradcheck_harness.h"
#include "tests/unit/test_util.h"

#define EPS ((double)FLT_EPSILON)

static ds_backend *g_be;
static gc_rng g_rng = {7};

static float *randn(size_t n, double sd) { return gc_randn(&g_rng, n, sd); }

static void test_dropout_stats(void) {
    const int rows = 1024, width = 1024; /* n = 2^20 */
    const size_t n = (size_t)rows * width;
    float *ones = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4), *y2 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        float p = ps[k], inv = 1.0f / (1.0f - p);
        uint64_t seed = 1000 + (uint64_t)k, off = 12345;
        CHECK_OK(g_be->nn->dropout_fwd(g_be, y, ones, NULL, NULL, rows, width, p, seed, off, NULL));
        size_t kept = 0, both = 0, other = 0, wrong = 0;
        for (size_t i = 0; i < n; i++) {
            int keep = y[i] != 0.0f;
            kept += keep;
            if (keep && y[i] != inv) wrong++;
            if (i + 1 < n) both += keep && y[i + 1] != 0.0f;
            /* the same stream computed element by element */
            int ref = ds_rng_uniform_at(seed, off + i) >= p;
            other += ref != keep;
        }
        double q = 1.0 - p, sd = sqrt(n * p * q);
        CHECK(fabs((double)kept - n * q) < 6 * sd, "p=%g: kept %zu of %zu, expected %.0f +- %.0f",
              p, kept, n, n * q, sd);
        /* pairs (i, i+1) both kept: (n-1) q^2; var <= 3 n q^2 (1 - q^2) for
         * this 1-dependent sum (each pair overlaps two others) */
        double sd2 = sqrt(3.0 * n * q * q * (1 - q * q));
        CHECK(fabs((double)both - (n - 1) * q * q) < 6 * sd2,
              "p=%g: %zu adjacent pairs kept, expected %.0f +- %.0f", p, both, (n - 1) * q * q,
              sd2);
        CHECK(wrong == 0, "p=%g: %zu kept values are not 1/(1-p)", p, wrong);
        CHECK(other == 0, "p=%g: %zu keep decisions differ from ds_rng_uniform_at", p, other);

        /* backward regenerates the same mask: dropout_bwd(ones) == dropout_fwd(ones) */
        CHECK_OK(g_be->nn->dropout_bwd(g_be, dx, NULL, ones, rows, width, p, seed, off, NULL));
        CHECK(memcmp(dx, y, n * 4) == 0, "p=%g: backward mask differs from forward", p);

        /* pieces at offsets: the second half alone equals the tail of the whole */
        CHECK_OK(g_be->nn->dropout_fwd(g_be, y2, ones, NULL, NULL, rows / 2, width, p, seed,
                                       off + n / 2, NULL));
        CHECK(memcmp(y2, y + n / 2, n / 2 * 4) == 0, "p=%g: sharded mask differs", p);
        /* an odd offset (a row starting mid Philox block) */
        CHECK_OK(g_be->nn->dropout_fwd(g_be, y2, ones, NULL, NULL, 3, 333, p, seed, off + 7, NULL));
        CHECK(memcmp(y2, y + 7, 999 * 4) == 0, "p=%g: mask at offset +7 differs", p);

        /* another seed: agreement ~ p^2 + q^2, not 1 */
        CHECK_OK(g_be->nn->dropout_fwd(g_be, y2, ones, NULL, NULL, rows, width, p, seed + 1, off,
                                       NULL));
        size_t agree = 0;
        for (size_t i = 0; i < n; i++) agree += (y[i] != 0) == (y2[i] != 0);
        double pa = p * p + q * q, sda = sqrt(n * pa * (1 - pa));
        CHECK(fabs((double)agree - n * pa) < 6 * sda, "p=%g: seeds agree on %zu, expected %.0f",
              p, agree, n * pa);
    }
    /* p = 0: identity, no randomness */
    float *x = randn(n, 1.0);
    CHECK_OK(g_be->nn->dropout_fwd(g_be, y, x, NULL, NULL, rows, width, 0.0f, 1, 0, NULL));
    CHECK(memcmp(x, y, n * 4) == 0, "p = 0 is not the identity");
    /* invalid probabilities */
    const float badp[] = {1.0f, -0.1f, NAN};
    for (int k = 0; k < 3; k++) {
        CHECK(g_be->nn->dropout_fwd(g_be, y, x, NULL, NULL, rows, width, badp[k], 1, 0, NULL) ==
                  DS_ERR_INVALID_ARG,
              "dropout_fwd accepted p = %g", badp[k]);
        CHECK(g_be->nn->dropout_bwd(g_be, y, NULL, x, rows, width, badp[k], 1, 0, NULL) ==
                  DS_ERR_INVALID_ARG,
              "dropout_bwd accepted p = %g", badp[k]);
    }
    free(ones), free(y), free(dx), free(y2), free(x);
}

/* dropout_bwd with a bias gradient makes dx and dbias in one pass over
 * column tiles (nn_act.c): both must be bit for bit what the two passes it
 * replaced give (dropout_bwd without dbias, then bcast_add_bwd's column
 * sums), at a size that runs on the 2-thread team, with a width that is not
 * a multiple of the tile and an offset inside a Philox block. */
static void test_dropout_bwd_dbias_one_pass(void) {
    const int R = 301, W = 200; /* 60200 elements: above DS_CPU_PAR_MIN */
    size_t n = (size_t)R * W;
    float *dy = randn(n, 1.0), *dx1 = malloc(n * 4), *dx2 = malloc(n * 4);
    float *db1 = randn(W, 1.0), *db2 = malloc(W * 4);
    memcpy(db2, db1, W * 4); /* accumulated into: start from the same values */
    CHECK_OK(g_be->nn->dropout_bwd(g_be, dx1, db1, dy, R, W, 0.1f, 3, 7, NULL));
    CHECK_OK(g_be->nn->dropout_bwd(g_be, dx2, NULL, dy, R, W, 0.1f, 3, 7, NULL));
    CHECK_OK(g_be->nn->bcast_add_bwd(g_be, db2, dx2, R, W));
    CHECK(memcmp(dx1, dx2, n * 4) == 0, "dropout_bwd: dx differs with and without dbias");
    CHECK(memcmp(db1, db2, W * 4) == 0,
          "dropout_bwd: dbias differs from dropout_bwd then bcast_add_bwd");
    free(dy), free(dx1), free(dx2), free(db1), free(db2);
}

/* The mask where the Philox block counter's low word wraps is still exactly
 * the stream of ds_rng_uniform_at. The vectorised multipliers of nn_act.c
 * carry into the high word per lane and take up to 64 blocks (4 registers of
 * 16 on AVX-512) per call: the wrap at whole blocks from 2^32 - 4 falls in
 * the first register, from 2^32 - 40 in the third. */
static void test_dropout_counter_carry(void) {
    const int R = 2, W = 256;
    size_t n = (size_t)R * W;
    const uint64_t offs[2] = {((uint64_t)1 << 34) - 16 - 2,  /* element 4 (2^32 - 4) - 2: mid-block */
                              ((uint64_t)1 << 34) - 160 - 2}; /* 4 (2^32 - 40) - 2 */
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    float p = 0.5f, inv = 1.0f / (1.0f - p);
    for (int k = 0; k < 2; k++) {
        uint64_t off = offs[k];
        CHECK_OK(g_be->nn->dropout_fwd(g_be, y, x, NULL, NULL, R, W, p, 77, off, NULL));
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += y[i] != (ds_rng_uniform_at(77, off + i) >= p ? inv : 0.0f);
        CHECK(bad == 0, "dropout across the 2^32 block boundary (offset %llu): %d of %zu wrong",
              (unsigned long long)off, bad, n);
    }
    free(x), free(y);
}

/* y = res + dropout(x + bias); dbias = column sums of the backward */
static void test_dropout_fused(void) {
    const int R = 97, W = 130;
    size_t n = (size_t)R * W;
    float *x = randn(n, 1.0), *b = randn(W, 1.0), *res = randn(n, 1.0), *y = malloc(n * 4);
    float p = 0.3f, inv = 1.0f / (1.0f - p);
    CHECK_OK(g_be->nn->dropout_fwd(g_be, y, x, b, res, R, W, p, 9, 100, NULL));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float m = ds_rng_uniform_at(9, 100 + i) >= p ? inv : 0.0f;
        bad += y[i] != fmaf(x[i] + b[i % W], m, res[i]); /* the kernel's float arithmetic */
    }
    CHECK(bad == 0, "fused dropout: %d entries differ from res + dropout(x + b)", bad);
    float *dy = randn(n, 1.0), *dx = malloc(n * 4), *db = calloc(W, 4);
    CHECK_OK(g_be->nn->dropout_bwd(g_be, dx, db, dy, R, W, p, 9, 100, NULL));
    for (int c = 0; c < W; c++) {
        double s = 0, a = 0;
        for (int r = 0; r < R; r++) {
            float m = ds_rng_uniform_at(9, 100 + (size_t)r * W + c) >= p ? inv : 0.0f;
            bad += dx[r * W + c] != dy[r * W + c] * m;
            s += dx[r * W + c];
            a += fabs(dx[r * W + c]);
        }
        bad += fabs(db[c] - s) > R * EPS * a; /* float sum of R terms */
    }
    CHECK(bad == 0, "dropout_bwd: %d entries of dx or dbias wrong", bad);
    free(x), free(b), free(res), free(y), free(dy), free(dx), free(db);
}

static void test_softmax(void) {
    const int B = 3, nh = 2, T = 37;
    const float scale = 0.37f;
    size_t n = (size_t)B * nh * T * T;
    float *s = randn(n, 3.0), *p = malloc(n * 4), mask[3 * 37];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) mask[b * T + t] = (b == 2) ? 0.0f : (t < T - 10 * b ? 1 : 0);
    /* batch row 2 is all padding */
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p, NULL, s, mask, false, B, nh, T, T, scale, 0.0f,
                                        0, 0, NULL));
    int masked_nonzero = 0, nans = 0;
    double worst_sum = 0, worst_rel = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < T; i++) {
                const float *pr = p + (((size_t)b * nh + h) * T + i) * T;
                const float *sr = s + (((size_t)b * nh + h) * T + i) * T;
                double mx = -INFINITY, sum = 0, ref_sum = 0;
                for (int j = 0; j < T; j++)
                    if (mask[b * T + j] != 0) mx = fmax(mx, (double)sr[j] * scale);
                for (int j = 0; j < T; j++)
                    if (mask[b * T + j] != 0) ref_sum += exp((double)sr[j] * scale - mx);
                for (int j = 0; j < T; j++) {
                    nans += isnan(pr[j]);
                    sum += pr[j];
                    if (mask[b * T + j] == 0) {
                        masked_nonzero += pr[j] != 0.0f;
                    } else {
                        double ref = exp((double)sr[j] * scale - mx) / ref_sum;
                        /* expf ~1 ulp on an argument rounded in float (|arg|
                         * eps * scale * |s|), plus the T-term sum */
                        double tol = ref * (4 + T + fabs(sr[j] * scale) * 2) * EPS + 1e-30;
                        worst_rel = fmax(worst_rel, fabs(pr[j] - ref) / tol);
                    }
                }
                if (b != 2) worst_sum = fmax(worst_sum, fabs(sum - 1.0));
                else CHECK(sum == 0.0, "all-padding row sums to %g, expected zeros", sum);
            }
    CHECK(masked_nonzero == 0, "%d padded keys got a non-zero probability", masked_nonzero);
    CHECK(nans == 0, "%d NaN probabilities", nans);
    CHECK(worst_sum <= (T + 2) * EPS, "a row sums to 1 +- %g", worst_sum);
    CHECK(worst_rel <= 1.0, "softmax off the double reference by %.3g tolerances", worst_rel);

    /* backward, no dropout: ds = scale p (dp - sum dp p) */
    float *dp = randn(n, 1.0), *ds = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_bwd(g_be, ds, NULL, dp, p, B, nh, T, T, scale, 0.0f, 0, 0,
                                        NULL));
    double worst = 0;
    for (size_t r = 0; r < n / T; r++) {
        double dot = 0, mag = 0;
        for (int j = 0; j < T; j++) {
            dot += (double)dp[r * T + j] * p[r * T + j];
            mag += fabs((double)dp[r * T + j] * p[r * T + j]);
        }
        for (int j = 0; j < T; j++) {
            double ref = scale * p[r * T + j] * (dp[r * T + j] - dot);
            double tol = scale * p[r * T + j] * (T * EPS * mag + 4 * EPS * fabs(dp[r * T + j])) +
                         1e-30;
            worst = fmax(worst, fabs(ds[r * T + j] - ref) / tol);
        }
    }
    CHECK(worst <= 1.0, "softmax backward off the formula by %.3g tolerances", worst);

    /* one query row per head (Tq = 1, the [CLS]-only layer): the rows are
     * row 0 of every (b, head) of the full call, and the padding mask must
     * still be found by batch row (r / nh, not r / (nh T)) */
    {
        size_t n1 = (size_t)B * nh * T;
        float *s1 = malloc(n1 * 4), *p1 = malloc(n1 * 4), *dp1 = malloc(n1 * 4);
        float *ds1 = malloc(n1 * 4);
        for (size_t r = 0; r < (size_t)B * nh; r++) {
            memcpy(s1 + r * T, s + r * T * T, (size_t)T * 4);
            memcpy(dp1 + r * T, dp + r * T * T, (size_t)T * 4);
        }
        CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p1, NULL, s1, mask, false, B, nh, 1, T, scale,
                                            0.0f, 0, 0, NULL));
        CHECK_OK(g_be->nn->attn_softmax_bwd(g_be, ds1, NULL, dp1, p1, B, nh, 1, T, scale, 0.0f,
                                            0, 0, NULL));
        int diff_p = 0, diff_ds = 0;
        for (size_t r = 0; r < (size_t)B * nh; r++) {
            diff_p += memcmp(p1 + r * T, p + r * T * T, (size_t)T * 4) != 0;
            diff_ds += memcmp(ds1 + r * T, ds + r * T * T, (size_t)T * 4) != 0;
        }
        CHECK(diff_p == 0 && diff_ds == 0,
              "Tq = 1: %d probability rows and %d gradient rows differ from row 0 of the full "
              "call",
              diff_p, diff_ds);
        free(s1), free(p1), free(dp1), free(ds1);
    }

    /* fused attention dropout: pd = dropout(p) from the same stream; the
     * backward regenerates pd bit for bit and applies the mask to dpd */
    float pa = 0.25f;
    float *p2 = malloc(n * 4), *pd = malloc(n * 4), *pd2 = malloc(n * 4), *ref = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p2, pd, s, mask, false, B, nh, T, T, scale, pa, 55,
                                        1000, NULL));
    CHECK(memcmp(p2, p, n * 4) == 0, "softmax with dropout changed p");
    CHECK_OK(g_be->nn->dropout_fwd(g_be, ref, p, NULL, NULL, (int)(n / T), T, pa, 55, 1000, NULL));
    CHECK(memcmp(pd, ref, n * 4) == 0, "attention dropout is not dropout(p) of the same stream");
    float *ds2 = malloc(n * 4), *dpm = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_bwd(g_be, ds2, pd2, dp, p, B, nh, T, T, scale, pa, 55, 1000,
                                        NULL));
    CHECK(memcmp(pd2, pd, n * 4) == 0, "backward regenerated a different dropout(p)");
    CHECK_OK(g_be->nn->dropout_bwd(g_be, dpm, NULL, dp, (int)(n / T), T, pa, 55, 1000, NULL));
    CHECK_OK(g_be->nn->attn_softmax_bwd(g_be, ds, NULL, dpm, p, B, nh, T, T, scale, 0.0f, 0, 0,
                                        NULL));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += fabsf(ds2[i] - ds[i]) > 1e-6f * (fabsf(ds[i]) + 1e-3f);
    CHECK(bad == 0, "fused softmax backward with dropout differs from dropout_bwd then softmax "
                    "backward in %d entries", bad);
    CHECK(g_be->nn->attn_softmax_fwd(g_be, p2, NULL, s, mask, false, B, nh, T, T, scale, pa, 1,
                                     0, NULL) ==
              DS_ERR_INVALID_ARG,
          "softmax accepted dropout without a pd buffer");
    const float badp[] = {1.0f, -0.1f, NAN};
    for (int k = 0; k < 3; k++) {
        CHECK(g_be->nn->attn_softmax_fwd(g_be, p2, pd, s, mask, false, B, nh, T, T, scale,
                                         badp[k], 1, 0, NULL) == DS_ERR_INVALID_ARG,
              "attn_softmax_fwd accepted p = %g", badp[k]);
        CHECK(g_be->nn->attn_softmax_bwd(g_be, ds, pd, dp, p, B, nh, T, T, scale, badp[k], 1, 0,
                                         NULL) ==
                  DS_ERR_INVALID_ARG,
              "attn_softmax_bwd accepted p = %g", badp[k]);
    }
    free(s), free(p), free(dp), free(ds), free(p2), free(pd), free(pd2), free(ref), free(ds2);
    free(dpm);
}

int main(void) {
    g_be = test_cpu_backend(2, NULL);
    test_dropout_stats();
    test_dropout_fused();
    test_dropout_bwd_dbias_one_pass();
    test_dropout_counter_carry();
    test_softmax();
    ds_backend_destroy(g_be);
    return test_finish("test_nn_dropout");
}
