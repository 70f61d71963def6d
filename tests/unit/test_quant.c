/* The blockwise int8 quantizer of ZeRO++ qwZ (engine/backend/math.h 2b, the
 * cpu backend's quantize_i8 / dequantize_i8):
 *
 *   - every block's scale is max|block| / 127 and its largest element maps
 *     to +-127;
 *   - the round trip error of every element is within the derived bound
 *     |x - x'| <= scale / 2 + max * 2^-21 (math.h says why), for fp32, fp16
 *     and bf16 input, for blocks whose magnitudes span 1e-3 .. 1e3, with a
 *     short last block; and the bound is nearly reached (the worst error is
 *     more than 0.9 of the half step), so it is not vacuous;
 *   - an all-zero block stays zero; a block holding NaN or inf dequantizes to
 *     NaN and its neighbours are untouched;
 *   - the same bytes at 1 and 2 threads;
 *   - the wire format's size: 4 ceil(n / B) + roundup4(n) bytes;
 *   - bad arguments are refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/core/mem.h"
#include "tests/unit/test_util.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 40) / 8388608.0 - 1.0);
}

/* n values whose blocks (of `block`) have magnitudes 10^(-3 .. 3). */
static float *make_values(size_t n, size_t block) {
    float *x = malloc(n * sizeof *x);
    if (!x) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) {
        int decade = (int)((i / block) % 7) - 3;
        x[i] = frand() * powf(10.0f, (float)decade);
    }
    return x;
}

/* Quantize n values of dtype t (given as fp32 `x`, rounded to t first),
 * dequantize, check the bound per element; returns the largest error as a
 * fraction of the half step. */
static double round_trip(ds_backend *be, const float *x, size_t n, size_t block, ds_dtype t) {
    size_t nb = ds_q8_nblocks(n, block);
    void *in = malloc(n * ds_dtype_size(t));
    float *xr = malloc(n * sizeof *xr), *y = malloc(n * sizeof *y), *sc = malloc(nb * 4);
    int8_t *q = malloc(n);
    if (!in || !xr || !y || !sc || !q) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) {
        ds_store_f32(in, t, i, x[i]);
        xr[i] = ds_load_f32(in, t, i); /* the values the quantizer sees */
    }
    CHECK_OK(be->ops->quantize_i8(be, q, sc, in, t, n, block));
    CHECK_OK(be->ops->dequantize_i8(be, y, q, sc, n, block));
    double worst = 0;
    int bad = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float m = 0;
        size_t at = lo;
        for (size_t i = lo; i < hi; i++)
            if (fabsf(xr[i]) > m) m = fabsf(xr[i]), at = i;
        CHECK(sc[b] == m / 127.0f, "%s block %zu: scale %.9g, max/127 = %.9g", ds_dtype_name(t),
              b, (double)sc[b], (double)(m / 127.0f));
        CHECK(abs(q[at]) == 127, "%s block %zu: the largest element maps to %d, not +-127",
              ds_dtype_name(t), b, q[at]);
        double bound = sc[b] / 2.0 + m * ldexp(1.0, -21);
        for (size_t i = lo; i < hi; i++) {
            double err = fabs((double)xr[i] - (double)y[i]);
            if (err > bound && bad++ < 5)
                CHECK(0, "%s element %zu: %.9g -> %.9g, error %.3g > bound %.3g",
                      ds_dtype_name(t), i, (double)xr[i], (double)y[i], err, bound);
            if (sc[b] > 0 && err / (sc[b] / 2.0) > worst) worst = err / (sc[b] / 2.0);
        }
    }
    CHECK(bad == 0, "%s: %d elements past the bound", ds_dtype_name(t), bad);
    free(in), free(xr), free(y), free(sc), free(q);
    return worst;
}

static void test_bound(ds_backend *be) {
    /* three whole blocks and a short one; and a small block size, so that
     * many blocks of every magnitude are seen */
    const size_t cases[][2] = {{3 * DS_Q8_BLOCK + 1234, DS_Q8_BLOCK}, {20000, 64}};
    const ds_dtype types[] = {DS_F32, DS_F16, DS_BF16};
    for (size_t c = 0; c < 2; c++) {
        float *x = make_values(cases[c][0], cases[c][1]);
        for (int k = 0; k < 3; k++) {
            double worst = round_trip(be, x, cases[c][0], cases[c][1], types[k]);
            printf("  %s n=%zu block=%zu: worst error %.4f of the half step\n",
                   ds_dtype_name(types[k]), cases[c][0], cases[c][1], worst);
            /* uniform values fill every quantization interval: some land
             * near a midpoint, so the half step is (almost) reached; a
             * quantizer with a step half as fine would stay under 0.5. The
             * bound's rounding term m 2^-21 is 254 / 2^21 = 1.2e-4 of the
             * half step (m / 254): 1e-3 holds it */
            CHECK(worst > 0.9 && worst <= 1.0 + 1e-3, "%s: worst %.4f of the half step",
                  ds_dtype_name(types[k]), worst);
        }
        free(x);
    }
}

static void test_special(ds_backend *be) {
    enum { B = 16, N = 5 * B };
    float x[N], y[N], sc[5];
    int8_t q[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % B) - 7.5f;
    for (int i = 0; i < B; i++) x[B + i] = 0.0f;       /* block 1: zeros */
    x[2 * B + 3] = NAN;                                /* block 2: a NaN */
    x[3 * B + 5] = -INFINITY;                          /* block 3: -inf */
    CHECK_OK(be->ops->quantize_i8(be, q, sc, x, DS_F32, N, B));
    CHECK_OK(be->ops->dequantize_i8(be, y, q, sc, N, B));
    CHECK(sc[1] == 0.0f, "zero block: scale %g", (double)sc[1]);
    for (int i = 0; i < B; i++) {
        CHECK(y[B + i] == 0.0f, "zero block element %d: %g", i, (double)y[B + i]);
        CHECK(isnan(y[2 * B + i]), "NaN block element %d: %g, not NaN", i, (double)y[2 * B + i]);
        CHECK(isnan(y[3 * B + i]), "inf block element %d: %g, not NaN", i, (double)y[3 * B + i]);
        /* blocks 0 and 4 hold -7.5 .. 7.5: step 7.5/127, error <= half a step
         * plus the bound's rounding term max 2^-21 (backend.h) */
        CHECK(fabsf(y[i] - x[i]) <= 7.5f / 127 / 2 + 7.5f * 0x1p-21f, "block 0 element %d: %g", i,
              (double)y[i]);
        CHECK(y[4 * B + i] == y[i], "block 4 element %d: %g vs block 0 %g", i,
              (double)y[4 * B + i], (double)y[i]);
    }
}

static void test_threads(ds_backend *be1, ds_backend *be2) {
    size_t n = 50 * DS_Q8_BLOCK + 77; /* > DS_CPU_PAR_MIN: threads split the blocks */
    size_t nb = ds_q8_nblocks(n, DS_Q8_BLOCK);
    float *x = make_values(n, DS_Q8_BLOCK), *y1 = malloc(n * 4), *y2 = malloc(n * 4);
    float *s1 = malloc(nb * 4), *s2 = malloc(nb * 4);
    int8_t *q1 = malloc(n), *q2 = malloc(n);
    if (!y1 || !y2 || !s1 || !s2 || !q1 || !q2) TEST_DIE("out of memory");
    CHECK_OK(be1->ops->quantize_i8(be1, q1, s1, x, DS_F32, n, DS_Q8_BLOCK));
    CHECK_OK(be2->ops->quantize_i8(be2, q2, s2, x, DS_F32, n, DS_Q8_BLOCK));
    CHECK_OK(be1->ops->dequantize_i8(be1, y1, q1, s1, n, DS_Q8_BLOCK));
    CHECK_OK(be2->ops->dequantize_i8(be2, y2, q2, s2, n, DS_Q8_BLOCK));
    CHECK(memcmp(q1, q2, n) == 0 && memcmp(s1, s2, nb * 4) == 0 && memcmp(y1, y2, n * 4) == 0,
          "1 and 2 threads give different bytes");
    free(x), free(y1), free(y2), free(s1), free(s2), free(q1), free(q2);
}

static void test_format_and_args(ds_backend *be) {
    CHECK_EQ_I((long long)ds_q8_packed_bytes(0, 4096), 0);
    CHECK_EQ_I((long long)ds_q8_packed_bytes(1, 4096), 4 + 4);
    CHECK_EQ_I((long long)ds_q8_packed_bytes(4096, 4096), 4 + 4096);
    CHECK_EQ_I((long long)ds_q8_packed_bytes(4097, 4096), 8 + 4100);
    float x[4] = {1, 2, 3, 4}, sc[1];
    int8_t q[4];
    ds_status st = be->ops->quantize_i8(be, q, sc, x, DS_F32, 4, 0);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "block size is 0"),
          "block 0: %d %s", (int)st, ds_last_error());
    st = be->ops->quantize_i8(be, q, sc, x, DS_I32, 4, 4);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "int32"), "int32 input: %d %s",
          (int)st, ds_last_error());
    st = be->ops->dequantize_i8(be, x, NULL, sc, 4, 4);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "q is NULL"), "NULL q: %d %s",
          (int)st, ds_last_error());
}

int main(void) {
    ds_mem *mem = NULL;
    if (ds_mem_create(&mem) != DS_OK) return 1;
    ds_backend *be1 = test_cpu_backend(1, mem), *be2 = test_cpu_backend(2, mem);
    test_bound(be1);
    test_special(be1);
    test_threads(be1, be2);
    test_format_and_args(be1);
    ds_backend_destroy(be1);
    ds_backend_destroy(be2);
    ds_mem_destroy(mem);
    return test_finish("test_quant");
}
