/* The blockwise int4 quantizer of DeepSpeed's qgZ (engine/backend/math.h
 * 2c, the cpu backend's quantize_i4 / dequantize_i4, and the records of
 * engine/comm/codec_q4.h):
 *
 *   - DeepSpeed's arithmetic on known values: scale 1 / (16 / (2 max)),
 *     max itself clamped to 7 (a whole step off), -max to -8, ties to even,
 *     the even element in the high nibble (0x7 and 0x8 -> byte 0x78);
 *   - the round trip error of every element within the bound math.h
 *     derives, |x - x'| <= max / 8 + max * 2^-21 (and max / 16 + max *
 *     2^-21 for the elements that are not clamped), for fp32, fp16 and bf16
 *     input, blocks of magnitudes 1e-3 .. 1e3, an odd short last block; the
 *     unclamped bound is nearly reached (so it is not vacuous);
 *   - an all-zero block stays zero, a block holding NaN or inf decodes to
 *     NaN, its neighbours untouched;
 *   - the same bytes at 1 and 2 threads;
 *   - a record: 4 ceil(n / 256) + roundup4(ceil(n / 2)) bytes, encoded and
 *     decoded as the slots do;
 *   - odd block sizes refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/comm/codec_q4.h"
#include "engine/core/mem.h"
#include "tests/unit/test_util.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 40) / 8388608.0 - 1.0);
}

static void test_known(ds_backend *be) {
    /* max 2: multiplier 16 / 4 = 4, step 0.25. 2 -> 8 clamps to 7; -2 ->
     * -8; 0.125 -> 0.5 ties to 0; 0.375 -> 1.5 ties to 2; -0.3 -> -1.2 ->
     * -1; the odd tail (7 values) leaves the last low nibble 0 */
    float x[7] = {2.0f, -2.0f, 0.125f, 0.375f, -0.3f, 1.0f, 0.0f};
    uint8_t q[4] = {0xff, 0xff, 0xff, 0xff};
    float sc[1], y[7];
    CHECK_OK(be->ops->quantize_i4(be, q, sc, x, DS_F32, 7, 8));
    CHECK(sc[0] == 0.25f, "scale %g, not 1 / (16 / (2 * 2)) = 0.25", (double)sc[0]);
    const uint8_t want[4] = {0x78, 0x02, 0xf4, 0x00, };
    CHECK(memcmp(q, want, 4) == 0, "bytes %02x %02x %02x %02x, want 78 02 f4 00", q[0], q[1],
          q[2], q[3]);
    CHECK_OK(be->ops->dequantize_i4(be, y, q, sc, 7, 8));
    const float dq[7] = {1.75f, -2.0f, 0.0f, 0.5f, -0.25f, 1.0f, 0.0f};
    for (int i = 0; i < 7; i++)
        CHECK(y[i] == dq[i], "element %d: %g -> %g, want %g", i, (double)x[i], (double)y[i],
              (double)dq[i]);
}

/* Quantize n values of dtype t (x rounded to t first), dequantize, check
 * the bound; returns the worst error of unclamped elements as a fraction
 * of max / 16 (half a step). */
static double round_trip(ds_backend *be, const float *x, size_t n, size_t block, ds_dtype t) {
    size_t nb = ds_q8_nblocks(n, block);
    void *in = malloc(n * ds_dtype_size(t));
    float *xr = malloc(n * 4), *y = malloc(n * 4), *sc = malloc(nb * 4);
    uint8_t *q = malloc((n + 1) / 2);
    if (!in || !xr || !y || !sc || !q) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) {
        ds_store_f32(in, t, i, x[i]);
        xr[i] = ds_load_f32(in, t, i);
    }
    CHECK_OK(be->ops->quantize_i4(be, q, sc, in, t, n, block));
    CHECK_OK(be->ops->dequantize_i4(be, y, q, sc, n, block));
    double worst = 0;
    int bad = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float m = 0;
        for (size_t i = lo; i < hi; i++) m = fmaxf(m, fabsf(xr[i]));
        float mult = 16.0f / (2.0f * m);
        CHECK(sc[b] == 1.0f / mult, "%s block %zu: scale %.9g, not DeepSpeed's 1 / (16 / 2max)",
              ds_dtype_name(t), b, (double)sc[b]);
        for (size_t i = lo; i < hi; i++) {
            double err = fabs((double)xr[i] - (double)y[i]);
            bool clamped = xr[i] * mult > 7.5f;
            double bound = (clamped ? m / 8.0 : m / 16.0) + m * ldexp(1.0, -21);
            if (err > bound && bad++ < 5)
                CHECK(0, "%s element %zu: %.9g -> %.9g, error %.3g > bound %.3g",
                      ds_dtype_name(t), i, (double)xr[i], (double)y[i], err, bound);
            if (!clamped && err / (m / 16.0) > worst) worst = err / (m / 16.0);
        }
    }
    CHECK(bad == 0, "%s: %d elements past the bound", ds_dtype_name(t), bad);
    free(in), free(xr), free(y), free(sc), free(q);
    return worst;
}

static void test_bound(ds_backend *be) {
    size_t n = 40 * DS_Q4_BLOCK + 77, block = DS_Q4_BLOCK; /* odd short last block */
    float *x = malloc(n * 4);
    if (!x) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) x[i] = frand() * powf(10.0f, (float)((int)(i / block % 7) - 3));
    const ds_dtype types[] = {DS_F32, DS_F16, DS_BF16};
    for (int k = 0; k < 3; k++) {
        double worst = round_trip(be, x, n, block, types[k]);
        printf("  %s n=%zu: worst unclamped error %.4f of the half step\n",
               ds_dtype_name(types[k]), n, worst);
        /* uniform values fill the 16 intervals, so some land near a
         * midpoint: the half step is (almost) reached; the rounding term
         * max 2^-21 is 16 / 2^21 = 7.6e-6 of it, which 1e-3 holds */
        CHECK(worst > 0.9 && worst <= 1.0 + 1e-3, "%s: worst %.4f of the half step",
              ds_dtype_name(types[k]), worst);
    }
    free(x);
}

static void test_special(ds_backend *be) {
    enum { B = 16, N = 4 * B };
    float x[N], y[N], sc[4];
    uint8_t q[N / 2];
    for (int i = 0; i < N; i++) x[i] = (float)(i % B) - 7.5f;
    for (int i = 0; i < B; i++) x[B + i] = 0.0f; /* block 1: zeros */
    x[2 * B + 3] = NAN;                          /* block 2: a NaN */
    x[3 * B + 4] = INFINITY;                     /* block 3: inf */
    CHECK_OK(be->ops->quantize_i4(be, q, sc, x, DS_F32, N, B));
    CHECK_OK(be->ops->dequantize_i4(be, y, q, sc, N, B));
    for (int i = 0; i < B; i++) {
        CHECK(y[B + i] == 0.0f, "zero block element %d: %g", i, (double)y[B + i]);
        CHECK(isnan(y[2 * B + i]), "NaN block element %d: %g, not NaN", i, (double)y[2 * B + i]);
        CHECK(isnan(y[3 * B + i]), "inf block element %d: %g, not NaN", i, (double)y[3 * B + i]);
        /* block 0: -7.5 .. 7.5, the bound of math.h 2c */
        CHECK(fabsf(y[i] - x[i]) <= 7.5f / 8 + 7.5f * 0x1p-21f, "block 0 element %d: %g", i,
              (double)y[i]);
    }
}

static void test_threads_and_records(ds_backend *be1, ds_backend *be2) {
    size_t n = 300 * DS_Q4_BLOCK + 33; /* > DS_CPU_PAR_MIN: threads split the blocks */
    size_t rb = ds_q4_record_bytes(n);
    CHECK_EQ_I((long long)rb, (long long)(4 * 301 + ((n + 1) / 2 + 3) / 4 * 4));
    CHECK_EQ_I((long long)ds_q4_record_bytes(0), 0);
    CHECK_EQ_I((long long)ds_q4_record_bytes(1), 4 + 4);
    CHECK_EQ_I((long long)ds_q4_record_bytes(256), 4 + 128);
    CHECK_EQ_I((long long)ds_q4_record_bytes(257), 8 + 132);
    float *x = malloc(n * 4), *y1 = malloc(n * 4), *y2 = malloc(n * 4);
    uint8_t *r1 = malloc(rb), *r2 = malloc(rb);
    if (!x || !y1 || !y2 || !r1 || !r2) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) x[i] = frand();
    CHECK_OK(ds_q4_encode(be1, x, DS_F32, n, r1));
    CHECK_OK(ds_q4_encode(be2, x, DS_F32, n, r2));
    CHECK_OK(ds_q4_decode(be1, r1, n, y1));
    CHECK_OK(ds_q4_decode(be2, r2, n, y2));
    CHECK(memcmp(r1, r2, ds_q4_record_bytes(n) - 3) == 0 && memcmp(y1, y2, n * 4) == 0,
          "1 and 2 threads give different bytes");
    free(x), free(y1), free(y2), free(r1), free(r2);
    float v[4] = {1, 2, 3, 4}, sc[1];
    uint8_t q[2];
    ds_status st = be1->ops->quantize_i4(be1, q, sc, v, DS_F32, 4, 3);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "not a positive even"),
          "block 3: %d %s", (int)st, ds_last_error());
}

int main(void) {
    ds_mem *mem = NULL;
    if (ds_mem_create(&mem) != DS_OK) return 1;
    ds_backend *be1 = test_cpu_backend(1, mem), *be2 = test_cpu_backend(2, mem);
    test_known(be1);
    test_bound(be1);
    test_special(be1);
    test_threads_and_records(be1, be2);
    ds_backend_destroy(be1);
    ds_backend_destroy(be2);
    ds_mem_destroy(mem);
    return test_finish("test_quant4");
}
