/* The cuda backend against the cpu backend (the reference), slot by slot.
 * Built only with DS_CUDA; exits 77 (skipped) when no CUDA device is visible.
 *
 * Bit-for-bit where the arithmetic is shared (engine/backend/math.h, see its
 * header for why that holds): rng_uniform, rng_normal, cast, fill, scale,
 * axpy, adam, sgd, quantize_i8 / dequantize_i8, quantize_i4 / dequantize_i4,
 * onebit_encode / onebit_decode / onebit_pass, rows_nonzero / rows_gather /
 * rows_scatter / rows_sum (NaN results of arithmetic excepted: their
 * payloads are the hardware's). Within a bound otherwise:
 *   - gemm: cuBLAS and OpenBLAS sum in different orders; both are within
 *     (k + 2) eps sum|a||b| of the exact product (test_backend_gemm.c), so
 *     they are within twice that of each other. The same with bf16 GEMM
 *     inputs (be->gemm_inputs DS_BF16: cuBLAS on bf16 tensor cores, the cpu
 *     on the same rounded values): the products are exact on both, so again
 *     only the order and rounding of the fp32 sums differ; tensor cores may
 *     truncate where IEEE rounds (an error of up to 2u per addition instead
 *     of u), which the factor 2 on eps = 2u covers (4(k+2)u against the
 *     3(k+2)u the two errors add up to);
 *   - sumsq: both sum in double in different orders: relative difference at
 *     most 2 n DBL_EPSILON (each within n DBL_EPSILON of the exact sum of
 *     positive terms); integer data is exact on both.
 * Also: the Philox of math.h equals cuRAND's Philox4_32_10 from the device
 * API (curand_init(seed, subsequence = tag, offset = j)), memory is zeroed,
 * copies in every direction, streams and events order work, bad arguments
 * are rejected as on cpu. */
#include <curand_kernel.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/backend/onebit_math.h"
#include "engine/backend/rows_math.h"
#include "tests/unit/test_util.h"

static ds_backend *g_cpu, *g_gpu;

/* Device buffer of n elements of `es` bytes, freed by dev_free. */
static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    REQUIRE_OK(ds_backend_alloc(g_gpu, DS_MEM_BUFFERS, DS_PLACE_DEVICE, bytes, &p));
    return p;
}
static void dev_free(void *p, size_t bytes) {
    ds_backend_free(g_gpu, DS_MEM_BUFFERS, DS_PLACE_DEVICE, p, bytes);
}
static void to_dev(void *d, const void *h, size_t bytes) {
    REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, d, h, bytes, DS_COPY_H2D, NULL));
}
static void to_host(void *h, const void *d, size_t bytes) {
    REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, h, d, bytes, DS_COPY_D2H, NULL));
    REQUIRE_OK(g_gpu->ops->sync(g_gpu));
}

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 40) / 8388608.0 - 1.0);
}

/* ---- Philox: ours on the device, cuRAND's, and ours on the host ---- */

__global__ void k_philox_pair(uint32_t *ours, uint32_t *curand_out, uint64_t seed, uint32_t tag,
                              uint64_t n) {
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x) {
        ds_philox4 w = ds_rng_block(seed, tag, j >> 2);
        ours[j] = w.v[j & 3];
        curandStatePhilox4_32_10_t st;
        curand_init(seed, tag, j, &st);
        curand_out[j] = curand(&st);
    }
}

static void test_philox_vs_curand(void) {
    const uint64_t n = 4099, seed = 0x0123456789abcdefull;
    uint32_t *d_ours, *d_cur;
    uint32_t *ours = (uint32_t *)malloc(n * 4), *cur = (uint32_t *)malloc(n * 4);
    for (uint32_t tag = 0; tag < 2; tag++) {
        d_ours = (uint32_t *)dev_alloc(n * 4);
        d_cur = (uint32_t *)dev_alloc(n * 4);
        k_philox_pair<<<16, 256, 0, cudaStreamLegacy>>>(d_ours, d_cur, seed, tag, n);
        CHECK(cudaGetLastError() == cudaSuccess, "philox kernel launch failed");
        to_host(ours, d_ours, n * 4);
        to_host(cur, d_cur, n * 4);
        size_t bad_cur = 0, bad_host = 0;
        for (uint64_t j = 0; j < n; j++) {
            bad_cur += ours[j] != cur[j];
            bad_host += ours[j] != ds_rng_block(seed, tag, j >> 2).v[j & 3];
        }
        CHECK(bad_cur == 0, "tag %u: %zu words differ from cuRAND's Philox4_32_10", tag, bad_cur);
        CHECK(bad_host == 0, "tag %u: %zu words differ between device and host", tag, bad_host);
        dev_free(d_ours, n * 4);
        dev_free(d_cur, n * 4);
    }
    free(ours);
    free(cur);
}

/* ---- memory, copies, streams, events ---- */

static void test_memory(void) {
    const size_t bytes = (3u << 20) + 5;
    unsigned char *h = (unsigned char *)malloc(bytes), *h2 = (unsigned char *)malloc(bytes);
    void *d = dev_alloc(bytes), *d2 = dev_alloc(bytes);
    to_host(h, d, bytes);
    size_t nz = 0;
    for (size_t i = 0; i < bytes; i++) nz += h[i] != 0;
    CHECK(nz == 0, "device allocation not zeroed (%zu bytes)", nz);
    void *pinned = NULL;
    REQUIRE_OK(ds_backend_alloc(g_gpu, DS_MEM_BUFFERS, DS_PLACE_HOST, bytes, &pinned));
    nz = 0;
    for (size_t i = 0; i < bytes; i++) nz += ((unsigned char *)pinned)[i] != 0;
    CHECK(nz == 0, "pinned allocation not zeroed");
    for (size_t i = 0; i < bytes; i++) ((unsigned char *)pinned)[i] = (unsigned char)(i * 7);
    /* pinned -> device on a side stream, fenced by an event before the
     * default stream copies device -> device -> host */
    ds_stream *s = NULL;
    ds_event *e = NULL;
    REQUIRE_OK(g_gpu->ops->stream_create(g_gpu, &s));
    REQUIRE_OK(g_gpu->ops->event_create(g_gpu, &e));
    REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, d, pinned, bytes, DS_COPY_H2D, s));
    REQUIRE_OK(g_gpu->ops->event_record(g_gpu, e, s));
    REQUIRE_OK(g_gpu->ops->stream_wait_event(g_gpu, NULL, e));
    REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, d2, d, bytes, DS_COPY_D2D, NULL));
    to_host(h, d2, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += h[i] != (unsigned char)(i * 7);
    CHECK(bad == 0, "H2D on a stream + event + D2D + D2H: %zu bytes differ", bad);
    REQUIRE_OK(g_gpu->ops->memset(g_gpu, d2, 0x5a, bytes, NULL));
    REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, h2, d2, bytes, DS_COPY_D2H, NULL));
    REQUIRE_OK(g_gpu->ops->sync(g_gpu));
    bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += h2[i] != 0x5a;
    CHECK(bad == 0, "memset: %zu bytes differ", bad);
    REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, h2, pinned, bytes, DS_COPY_H2H, NULL));
    REQUIRE_OK(g_gpu->ops->stream_sync(g_gpu, NULL));
    CHECK(memcmp(h2, pinned, bytes) == 0, "H2H copy differs");
    g_gpu->ops->event_destroy(g_gpu, e);
    g_gpu->ops->stream_destroy(g_gpu, s);
    ds_backend_free(g_gpu, DS_MEM_BUFFERS, DS_PLACE_HOST, pinned, bytes);
    dev_free(d, bytes);
    dev_free(d2, bytes);
    free(h);
    free(h2);
}

/* ---- element-wise slots: the same bits as cpu ---- */

static void test_rng(void) {
    const size_t n = 100003;
    const uint64_t offsets[3] = {0, 5, (1ull << 40) + 3};
    float *c = (float *)malloc(n * 4), *g = (float *)malloc(n * 4);
    float *d = (float *)dev_alloc(n * 4);
    for (int o = 0; o < 3; o++) {
        REQUIRE_OK(g_cpu->ops->rng_normal(g_cpu, c, n, 0.1f, 0.02f, 77, offsets[o]));
        REQUIRE_OK(g_gpu->ops->rng_normal(g_gpu, d, n, 0.1f, 0.02f, 77, offsets[o]));
        to_host(g, d, n * 4);
        CHECK(memcmp(c, g, n * 4) == 0, "rng_normal at offset %llu differs from cpu",
              (unsigned long long)offsets[o]);
        REQUIRE_OK(g_cpu->ops->rng_uniform(g_cpu, c, n, -0.5f, 0.5f, 78, offsets[o]));
        REQUIRE_OK(g_gpu->ops->rng_uniform(g_gpu, d, n, -0.5f, 0.5f, 78, offsets[o]));
        to_host(g, d, n * 4);
        CHECK(memcmp(c, g, n * 4) == 0, "rng_uniform at offset %llu differs from cpu",
              (unsigned long long)offsets[o]);
    }
    dev_free(d, n * 4);
    free(c);
    free(g);
}

static const ds_dtype k_types[3] = {DS_F32, DS_F16, DS_BF16};

/* Equal bits, or NaN on both sides: arithmetic that produces a NaN gives the
 * GPU's canonical NaN (0x7fffffff) but x86's propagated or default one, and
 * bf16 / fp32 keep those payloads. (Casts alone keep NaNs bit-identical.) */
static size_t count_differ_nan_ok(const void *a, const void *b, size_t n, ds_dtype t) {
    size_t es = ds_dtype_size(t), bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) == 0) continue;
        bad += !(isnan(ds_load_f32(a, t, i)) && isnan(ds_load_f32(b, t, i)));
    }
    return bad;
}

static void test_cast_scale_axpy_fill(void) {
    const size_t n = 70001;
    const size_t bytes = n * 4;
    float *x = (float *)malloc(bytes), *y = (float *)malloc(bytes);
    void *hc = malloc(bytes), *hg = malloc(bytes), *hx = malloc(bytes);
    void *dx = dev_alloc(bytes), *dy = dev_alloc(bytes);
    for (size_t i = 0; i < n; i++) {
        x[i] = frand() * powf(2.0f, (float)(i % 48) - 24.0f);
        y[i] = frand();
    }
    x[0] = INFINITY;
    x[1] = NAN;
    x[2] = -0.0f;
    x[3] = 65520.0f;
    for (int s = 0; s < 3; s++) {
        for (int t = 0; t < 3; t++) {
            REQUIRE_OK(
                g_cpu->ops->cast(g_cpu, hx, k_types[s], x, DS_F32, n)); /* source in type s */
            REQUIRE_OK(g_cpu->ops->cast(g_cpu, hc, k_types[t], hx, k_types[s], n));
            to_dev(dx, hx, n * ds_dtype_size(k_types[s]));
            REQUIRE_OK(g_gpu->ops->cast(g_gpu, dy, k_types[t], dx, k_types[s], n));
            to_host(hg, dy, n * ds_dtype_size(k_types[t]));
            CHECK(memcmp(hc, hg, n * ds_dtype_size(k_types[t])) == 0, "cast %s -> %s differs",
                  ds_dtype_name(k_types[s]), ds_dtype_name(k_types[t]));
            /* axpy y(t) += -0.75 x(s) */
            REQUIRE_OK(g_cpu->ops->cast(g_cpu, hc, k_types[t], y, DS_F32, n));
            to_dev(dy, hc, n * ds_dtype_size(k_types[t]));
            REQUIRE_OK(g_cpu->ops->axpy(g_cpu, hc, k_types[t], -0.75f, hx, k_types[s], n));
            REQUIRE_OK(g_gpu->ops->axpy(g_gpu, dy, k_types[t], -0.75f, dx, k_types[s], n));
            to_host(hg, dy, n * ds_dtype_size(k_types[t]));
            CHECK(count_differ_nan_ok(hc, hg, n, k_types[t]) == 0, "axpy y=%s x=%s differs",
                  ds_dtype_name(k_types[t]), ds_dtype_name(k_types[s]));
        }
        /* scale in type s */
        REQUIRE_OK(g_cpu->ops->cast(g_cpu, hc, k_types[s], x, DS_F32, n));
        to_dev(dx, hc, n * ds_dtype_size(k_types[s]));
        REQUIRE_OK(g_cpu->ops->scale(g_cpu, hc, k_types[s], n, 1.3f));
        REQUIRE_OK(g_gpu->ops->scale(g_gpu, dx, k_types[s], n, 1.3f));
        to_host(hg, dx, n * ds_dtype_size(k_types[s]));
        CHECK(count_differ_nan_ok(hc, hg, n, k_types[s]) == 0, "scale %s differs",
              ds_dtype_name(k_types[s]));
    }
    REQUIRE_OK(g_gpu->ops->fill(g_gpu, (float *)dx, n, 3.25f));
    to_host(hg, dx, bytes);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += ((float *)hg)[i] != 3.25f;
    CHECK(bad == 0, "fill: %zu values differ", bad);
    dev_free(dx, bytes);
    dev_free(dy, bytes);
    free(x);
    free(y);
    free(hc);
    free(hg);
    free(hx);
}

/* Blockwise int8 (qwZ): the same int8 values, scales and dequantized
 * values as the cpu, in each input type, with a short last block and blocks
 * holding NaN and inf (dequantized to NaN on both). */
static void test_quant(void) {
    const size_t n = 5 * DS_Q8_BLOCK + 321, nb = ds_q8_nblocks(n, DS_Q8_BLOCK);
    float *x = (float *)malloc(n * 4), *yc = (float *)malloc(n * 4), *yg = (float *)malloc(n * 4);
    float *sc = (float *)malloc(nb * 4), *sg = (float *)malloc(nb * 4);
    int8_t *qc = (int8_t *)malloc(n), *qg = (int8_t *)malloc(n);
    void *hx = malloc(n * 4);
    void *dx = dev_alloc(n * 4), *dq = dev_alloc(n), *ds = dev_alloc(nb * 4), *dy = dev_alloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = frand() * powf(10.0f, (float)((i / DS_Q8_BLOCK) % 5) - 2);
    x[DS_Q8_BLOCK + 7] = NAN;
    x[3 * DS_Q8_BLOCK + 9] = -INFINITY;
    for (int t = 0; t < 3; t++) {
        size_t es = ds_dtype_size(k_types[t]);
        REQUIRE_OK(g_cpu->ops->cast(g_cpu, hx, k_types[t], x, DS_F32, n));
        to_dev(dx, hx, n * es);
        REQUIRE_OK(g_cpu->ops->quantize_i8(g_cpu, qc, sc, hx, k_types[t], n, DS_Q8_BLOCK));
        REQUIRE_OK(g_gpu->ops->quantize_i8(g_gpu, (int8_t *)dq, (float *)ds, dx, k_types[t], n,
                                           DS_Q8_BLOCK));
        REQUIRE_OK(g_cpu->ops->dequantize_i8(g_cpu, yc, qc, sc, n, DS_Q8_BLOCK));
        REQUIRE_OK(g_gpu->ops->dequantize_i8(g_gpu, (float *)dy, (const int8_t *)dq,
                                             (const float *)ds, n, DS_Q8_BLOCK));
        to_host(qg, dq, n);
        to_host(sg, ds, nb * 4);
        to_host(yg, dy, n * 4);
        CHECK(memcmp(qc, qg, n) == 0, "quantize_i8 %s: int8 values differ",
              ds_dtype_name(k_types[t]));
        CHECK(count_differ_nan_ok(sc, sg, nb, DS_F32) == 0, "quantize_i8 %s: scales differ",
              ds_dtype_name(k_types[t]));
        CHECK(count_differ_nan_ok(yc, yg, n, DS_F32) == 0, "dequantize_i8 %s differs",
              ds_dtype_name(k_types[t]));
        CHECK(isnan(yg[DS_Q8_BLOCK]) && isnan(yg[3 * DS_Q8_BLOCK]),
              "blocks with NaN / inf are not NaN on the GPU");
    }
    dev_free(dx, n * 4);
    dev_free(dq, n);
    dev_free(ds, nb * 4);
    dev_free(dy, n * 4);
    free(x), free(yc), free(yg), free(sc), free(sg), free(qc), free(qg), free(hx);
}

/* Blockwise int4 (DeepSpeed's qgZ, math.h 2c): the same packed bytes,
 * scales and dequantized values as the cpu, each input type, an odd short
 * last block, blocks holding NaN and inf. */
static void test_quant4(void) {
    const size_t B = 256, n = 40 * B + 77, nb = ds_q8_nblocks(n, B), nq = (n + 1) / 2;
    float *x = (float *)malloc(n * 4), *yc = (float *)malloc(n * 4), *yg = (float *)malloc(n * 4);
    float *sc = (float *)malloc(nb * 4), *sg = (float *)malloc(nb * 4);
    uint8_t *qc = (uint8_t *)malloc(nq), *qg = (uint8_t *)malloc(nq);
    void *hx = malloc(n * 4);
    void *dx = dev_alloc(n * 4), *dq = dev_alloc(nq), *ds = dev_alloc(nb * 4);
    void *dy = dev_alloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = frand() * powf(10.0f, (float)((i / B) % 5) - 2);
    x[B + 7] = NAN;
    x[3 * B + 9] = -INFINITY;
    for (int t = 0; t < 3; t++) {
        size_t es = ds_dtype_size(k_types[t]);
        REQUIRE_OK(g_cpu->ops->cast(g_cpu, hx, k_types[t], x, DS_F32, n));
        to_dev(dx, hx, n * es);
        REQUIRE_OK(g_cpu->ops->quantize_i4(g_cpu, qc, sc, hx, k_types[t], n, B));
        REQUIRE_OK(g_gpu->ops->quantize_i4(g_gpu, (uint8_t *)dq, (float *)ds, dx, k_types[t], n,
                                           B));
        REQUIRE_OK(g_cpu->ops->dequantize_i4(g_cpu, yc, qc, sc, n, B));
        REQUIRE_OK(g_gpu->ops->dequantize_i4(g_gpu, (float *)dy, (const uint8_t *)dq,
                                             (const float *)ds, n, B));
        to_host(qg, dq, nq);
        to_host(sg, ds, nb * 4);
        to_host(yg, dy, n * 4);
        CHECK(memcmp(qc, qg, nq) == 0, "quantize_i4 %s: packed values differ",
              ds_dtype_name(k_types[t]));
        CHECK(count_differ_nan_ok(sc, sg, nb, DS_F32) == 0, "quantize_i4 %s: scales differ",
              ds_dtype_name(k_types[t]));
        CHECK(count_differ_nan_ok(yc, yg, n, DS_F32) == 0, "dequantize_i4 %s differs",
              ds_dtype_name(k_types[t]));
        CHECK(isnan(yg[B]) && isnan(yg[3 * B]),
              "int4 blocks with NaN / inf are not NaN on the GPU");
    }
    dev_free(dx, n * 4);
    dev_free(dq, nq);
    dev_free(ds, nb * 4);
    dev_free(dy, n * 4);
    free(x), free(yc), free(yg), free(sc), free(sg), free(qc), free(qg), free(hx);
}

static void test_sumsq(void) {
    const size_t n = 1000003;
    float *x = (float *)malloc(n * 4);
    float *d = (float *)dev_alloc(n * 4);
    uint16_t *h = (uint16_t *)malloc(n * 2);
    double sc, sg;
    int fc, fg;
    /* integers: exact on both */
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i % 9) - 4);
    for (int t = 0; t < 3; t++) {
        const void *src = x;
        if (k_types[t] != DS_F32) {
            REQUIRE_OK(g_cpu->ops->cast(g_cpu, h, k_types[t], x, DS_F32, n));
            src = h;
        }
        to_dev(d, src, n * ds_dtype_size(k_types[t]));
        REQUIRE_OK(g_cpu->ops->sumsq(g_cpu, src, k_types[t], n, &sc, &fc));
        REQUIRE_OK(g_gpu->ops->sumsq(g_gpu, d, k_types[t], n, &sg, &fg));
        CHECK(sc == sg && fc == 0 && fg == 0, "sumsq %s of integers: cpu %.17g, cuda %.17g",
              ds_dtype_name(k_types[t]), sc, sg);
    }
    /* random: within 2 n DBL_EPSILON relative */
    for (size_t i = 0; i < n; i++) x[i] = frand() * 1e3f;
    to_dev(d, x, n * 4);
    REQUIRE_OK(g_cpu->ops->sumsq(g_cpu, x, DS_F32, n, &sc, &fc));
    REQUIRE_OK(g_gpu->ops->sumsq(g_gpu, d, DS_F32, n, &sg, &fg));
    CHECK_NEAR(sg, sc, 2.0 * n * 2.220446049250313e-16 * sc); /* cuda sumsq vs cpu */
    /* the same call twice: the same bits */
    double sg2;
    REQUIRE_OK(g_gpu->ops->sumsq(g_gpu, d, DS_F32, n, &sg2, &fg));
    CHECK(memcmp(&sg, &sg2, sizeof sg) == 0, "sumsq not deterministic: %.17g then %.17g", sg, sg2);
    /* non-finite */
    x[n / 3] = NAN;
    to_dev(d, x, n * 4);
    REQUIRE_OK(g_gpu->ops->sumsq(g_gpu, d, DS_F32, n, &sg, &fg));
    CHECK(fg == 1, "NaN not flagged on cuda");
    x[n / 3] = -INFINITY;
    to_dev(d, x, n * 4);
    REQUIRE_OK(g_gpu->ops->sumsq(g_gpu, d, DS_F32, n, &sg, &fg));
    CHECK(fg == 1, "-inf not flagged on cuda");
    dev_free(d, n * 4);
    free(x);
    free(h);
}

/* The 1-bit code (1-bit / 0/1 Adam's compressed all-reduce): records at odd
 * byte offsets (the scale unaligned), with and without error feedback, the
 * same bytes and errors as the cpu; then decode, plain and accumulating.
 * The scale is a double sum of squares in another order on each backend,
 * rounded to float: for these inputs it rounds the same (backend.h says
 * when it could not). */
static void test_onebit_code(void) {
    const int nb = 3;
    const size_t per = 8 * 137, n = nb * per, stride = 4 + per / 8 + 3, wb = nb * stride;
    float *x = (float *)malloc(n * 4), *ec = (float *)malloc(n * 4), *eg = (float *)malloc(n * 4);
    float *oc = (float *)malloc(n * 4), *og = (float *)malloc(n * 4);
    unsigned char *wc = (unsigned char *)malloc(wb), *wg = (unsigned char *)malloc(wb);
    float *dx = (float *)dev_alloc(n * 4), *de = (float *)dev_alloc(n * 4);
    float *dout = (float *)dev_alloc(n * 4);
    unsigned char *dw = (unsigned char *)dev_alloc(wb);
    for (size_t i = 0; i < n; i++) {
        x[i] = frand() * 3.0f;
        ec[i] = frand() * 0.25f;
    }
    x[5] = 0.0f, x[6] = -0.0f, ec[5] = ec[6] = 0.0f; /* zero encodes positive */
    for (int fb = 0; fb < 2; fb++) {
        memset(wc, 0xab, wb);
        to_dev(dw, wc, wb); /* the gaps between records keep 0xab on both */
        to_dev(dx, x, n * 4);
        to_dev(de, ec, n * 4);
        REQUIRE_OK(g_cpu->ops->onebit_encode(g_cpu, x, fb ? ec : NULL, n, nb, wc, stride));
        REQUIRE_OK(g_gpu->ops->onebit_encode(g_gpu, dx, fb ? de : NULL, n, nb, dw, stride));
        to_host(wg, dw, wb);
        to_host(eg, de, n * 4);
        CHECK(memcmp(wc, wg, wb) == 0, "onebit_encode (feedback %d): records differ", fb);
        CHECK(memcmp(ec, eg, n * 4) == 0, "onebit_encode (feedback %d): errors differ", fb);
        CHECK((wc[4] >> 1 & 3) == 3, "zero and -0 must encode as 1 bits"); /* elements 5, 6 */
    }
    for (int acc = 0; acc < 2; acc++) {
        for (size_t i = 0; i < per; i++) oc[i] = frand();
        to_dev(dout, oc, per * 4);
        REQUIRE_OK(g_cpu->ops->onebit_decode(g_cpu, wc + stride, per, 1.0f / 3, acc, oc));
        REQUIRE_OK(g_gpu->ops->onebit_decode(g_gpu, dw + stride, per, 1.0f / 3, acc, dout));
        to_host(og, dout, per * 4);
        CHECK(memcmp(oc, og, per * 4) == 0, "onebit_decode (accumulate %d) differs", acc);
    }
    CHECK(g_gpu->ops->onebit_encode(g_gpu, dx, NULL, 12, 1, dw, 0) == DS_ERR_INVALID_ARG,
          "a record of 12 elements (not a multiple of 8) is refused");
    /* an empty code writes and reads no record, on both (a NULL wire) */
    CHECK(g_gpu->ops->onebit_encode(g_gpu, NULL, NULL, 0, 1, NULL, 0) == DS_OK &&
              g_gpu->ops->onebit_decode(g_gpu, NULL, 0, 1.0f, false, NULL) == DS_OK,
          "an empty 1-bit code: %s", ds_last_error());
    dev_free(dx, n * 4), dev_free(de, n * 4), dev_free(dout, n * 4), dev_free(dw, wb);
    free(x), free(ec), free(eg), free(oc), free(og), free(wc), free(wg);
}

/* Every pass of 1-bit / 0/1 Adam (onebit_math.h), with an exp_avg_mask and
 * some v exactly 0, gradients in each type: the same bits as the cpu. */
static void test_onebit_pass(void) {
    const size_t n = 40009, b4 = n * 4;
    enum { W, M, X, U, S, V, A, NARR };
    float *h[NARR], *d[NARR], *back = (float *)malloc(b4);
    for (int k = 0; k < NARR; k++) {
        h[k] = (float *)malloc(b4);
        d[k] = (float *)dev_alloc(b4);
        for (size_t i = 0; i < n; i++)
            h[k][i] = k == V ? (i % 97 ? fabsf(frand() * frand()) : 0.0f) : k == A ? (float)(i % 3) / 2
                                                                             : frand();
        to_dev(d[k], h[k], b4);
    }
    float *g = (float *)malloc(b4);
    void *hg = malloc(b4), *dg = dev_alloc(b4);
    for (size_t i = 0; i < n; i++) g[i] = frand() * 8.0f;
    const char *names[NARR] = {"w", "m", "x", "u", "at_sync", "v", "amask"};
    for (int ph = DS_ONEBIT_GRAD; ph <= DS_ONEBIT_ZO_SYNC; ph++) {
        ds_dtype gt = k_types[ph % 3];
        REQUIRE_OK(g_cpu->ops->cast(g_cpu, hg, gt, g, DS_F32, n));
        to_dev(dg, hg, n * ds_dtype_size(gt));
        ds_onebit_pass p = {};
        p.phase = (ds_onebit_phase)ph;
        p.n = n;
        p.gt = gt;
        p.gm = 0.5f;
        p.lr = 1e-3f;
        p.wd = 0.01f;
        p.lrs = 7e-3f;
        p.sync = ph == DS_ONEBIT_ZO_LOCAL;
        p.c = ds_adam_coef_make(1e-3f, 0.9f, 0.98f, 1e-8f, 0.01f, 5, true, false, 0.5f);
        ds_onebit_pass q = p;
        p.w = h[W], p.m = h[M], p.x = h[X], p.u = h[U], p.at_sync = h[S], p.v = h[V];
        p.amask = h[A], p.g = hg;
        q.w = d[W], q.m = d[M], q.x = d[X], q.u = d[U], q.at_sync = d[S], q.v = d[V];
        q.amask = d[A], q.g = dg;
        REQUIRE_OK(g_cpu->ops->onebit_pass(g_cpu, &p));
        REQUIRE_OK(g_gpu->ops->onebit_pass(g_gpu, &q));
        for (int k = 0; k < NARR; k++) {
            to_host(back, d[k], b4);
            CHECK(count_differ_nan_ok(back, h[k], n, DS_F32) == 0,
                  "onebit_pass phase %d (grad %s): %s differs from cpu", ph, ds_dtype_name(gt),
                  names[k]);
        }
    }
    ds_onebit_pass bad = {};
    bad.phase = DS_ONEBIT_WEIGHT;
    bad.n = 8;
    CHECK(g_gpu->ops->onebit_pass(g_gpu, &bad) == DS_ERR_INVALID_ARG,
          "a pass without its arrays is refused");
    for (int k = 0; k < NARR; k++) free(h[k]), dev_free(d[k], b4);
    dev_free(dg, b4);
    free(g), free(hg), free(back);
}

/* Row-sparse gradients' slots (rows_math.h) on a table of 301 x 37 at flat
 * offset 1000 seen through a partition that cuts its first and last rows,
 * in each gradient type: the scan's flags (a row of -0.0 counts, a row set
 * only outside the partition does not), rows gathered by an index list at
 * an odd byte offset, the rank-ordered sums of three blocks of records,
 * replacing and adding, and the gathered rows scattered back: the same bits
 * as the cpu. */
static void test_rows(void) {
    const int64_t R = 301, C = 37, off = 1000, lo = off + 5 * C + 11, hi = off + 290 * C + 3;
    const size_t cells = (size_t)(hi - lo), tb = (size_t)(R * C) * 4;
    float *f = (float *)malloc(cells * 4);
    void *hx = malloc(cells * 4), *hy = malloc(cells * 4), *back = malloc(tb + 64);
    void *dx = dev_alloc(cells * 4), *dflags = dev_alloc((size_t)R), *didx = dev_alloc(64 * 4 + 8);
    void *drec = dev_alloc(tb), *dplan = dev_alloc(4096);
    uint8_t fc[301], fg[301];
    for (int t = 0; t < 3; t++) {
        ds_dtype gt = k_types[t];
        size_t es = ds_dtype_size(gt);
        for (size_t i = 0; i < cells; i++) {
            int64_t r = ((int64_t)i + lo - off) / C;
            f[i] = r % 3 == 0 ? frand() : 0.0f;
        }
        f[(size_t)(off + 100 * C + 4 - lo)] = -0.0f; /* row 100 (100 % 3 != 0): only a -0.0 */
        REQUIRE_OK(g_cpu->ops->cast(g_cpu, hx, gt, f, DS_F32, cells));
        to_dev(dx, hx, cells * es);
        ds_rows_view vc = {hx, gt, lo, hi, off, C}, vg = vc;
        vg.base = dx;
        REQUIRE_OK(g_cpu->ops->rows_nonzero(g_cpu, &vc, 0, R, fc));
        REQUIRE_OK(g_gpu->ops->rows_nonzero(g_gpu, &vg, 0, R, (uint8_t *)dflags));
        to_host(fg, dflags, (size_t)R);
        CHECK(memcmp(fc, fg, (size_t)R) == 0, "rows_nonzero %s differs", ds_dtype_name(gt));
        /* row 6 set, 100 only -0.0, 7 zero, 1 and 299 outside the view */
        CHECK(fc[6] == 1 && fc[100] == 1 && fc[7] == 0 && fc[1] == 0 && fc[299] == 0,
              "rows_nonzero %s: flags of rows 1, 6, 7, 100, 299 wrong", ds_dtype_name(gt));
        /* gather 40 rows, the cut ones included, indices at byte 2 */
        int32_t idx[40];
        for (int k = 0; k < 40; k++) idx[k] = k < 2 ? (k ? 290 : 5) : 7 * k;
        unsigned char hidx[40 * 4 + 2];
        memcpy(hidx + 2, idx, sizeof idx);
        to_dev(didx, hidx, sizeof hidx);
        void *hc = malloc(40 * (size_t)C * es);
        REQUIRE_OK(g_cpu->ops->rows_gather(g_cpu, &vc, hidx + 2, 40, hc));
        REQUIRE_OK(g_gpu->ops->rows_gather(g_gpu, &vg, (char *)didx + 2, 40, drec));
        to_host(back, drec, 40 * (size_t)C * es);
        CHECK(memcmp(hc, back, 40 * (size_t)C * es) == 0, "rows_gather %s differs",
              ds_dtype_name(gt));
        /* sums: records of 3 "ranks" (the gathered rows, read as 3 blocks),
         * outputs with 1-3 contributions, into the partition view */
        int32_t row[8] = {5, 14, 21, 63, 140, 200, 273, 290};
        uint8_t all[8] = {1, 0, 1, 0, 0, 1, 0, 1};
        int64_t first[9], src[24], m = 0;
        for (int j = 0; j < 8; j++) {
            first[j] = m;
            for (int q = 0; q <= j % 3; q++) src[m++] = (int64_t)((j * 3 + q) % 40) * C;
        }
        first[8] = m;
        unsigned char plan[4096];
        size_t o_row = 0, o_all = 32, o_first = 48, o_src = 128;
        memcpy(plan + o_row, row, sizeof row);
        memcpy(plan + o_all, all, sizeof all);
        memcpy(plan + o_first, first, sizeof first);
        memcpy(plan + o_src, src, (size_t)m * 8);
        to_dev(dplan, plan, sizeof plan);
        for (int add = 0; add < 2; add++) {
            memcpy(hy, hx, cells * es);
            to_dev(dx, hx, cells * es);
            ds_rows_sum sc = {{hy, gt, lo, hi, off, C}, add != 0, hc, 8,
                              (const int32_t *)(plan + o_row), plan + o_all,
                              (const int64_t *)(plan + o_first), (const int64_t *)(plan + o_src)};
            ds_rows_sum sg = sc;
            sg.dst.base = dx;
            sg.recs = drec;
            sg.row = (const int32_t *)((char *)dplan + o_row);
            sg.all = (const uint8_t *)dplan + o_all;
            sg.first = (const int64_t *)((char *)dplan + o_first);
            sg.src = (const int64_t *)((char *)dplan + o_src);
            REQUIRE_OK(g_cpu->ops->rows_sum(g_cpu, &sc));
            REQUIRE_OK(g_gpu->ops->rows_sum(g_gpu, &sg));
            to_host(back, dx, cells * es);
            CHECK(count_differ_nan_ok(hy, back, cells, gt) == 0, "rows_sum %s (add %d) differs",
                  ds_dtype_name(gt), add);
            CHECK(memcmp(hy, hx, cells * es) != 0, "rows_sum %s (add %d) changed nothing",
                  ds_dtype_name(gt), add);
        }
        /* scatter: the 40 gathered rows back into a view of other values
         * (the cut rows 5 and 290 only inside it) */
        memset(hy, 0x3c, cells * es);
        to_dev(dx, hy, cells * es);
        vc.base = hy, vg.base = dx;
        REQUIRE_OK(g_cpu->ops->rows_scatter(g_cpu, &vc, hidx + 2, 40, hc));
        REQUIRE_OK(g_gpu->ops->rows_scatter(g_gpu, &vg, (char *)didx + 2, 40, drec));
        to_host(back, dx, cells * es);
        CHECK(memcmp(hy, back, cells * es) == 0, "rows_scatter %s differs", ds_dtype_name(gt));
        free(hc);
    }
    dev_free(dx, cells * 4), dev_free(dflags, (size_t)R), dev_free(didx, 64 * 4 + 8);
    dev_free(drec, tb), dev_free(dplan, 4096);
    free(f), free(hx), free(hy), free(back);
}

static void test_optim(void) {
    const size_t n = 50003;
    const size_t b4 = n * 4;
    float *p = (float *)malloc(b4), *m = (float *)calloc(n, 4), *v = (float *)calloc(n, 4);
    float *g = (float *)malloc(b4), *back = (float *)malloc(b4);
    uint16_t *g16 = (uint16_t *)malloc(n * 2), *lp = (uint16_t *)malloc(n * 2),
             *lpg = (uint16_t *)malloc(n * 2);
    float *dp = (float *)dev_alloc(b4), *dm = (float *)dev_alloc(b4), *dv = (float *)dev_alloc(b4);
    void *dg = dev_alloc(b4), *dlp = dev_alloc(n * 2);
    for (int variant = 0; variant < 4; variant++) {
        /* 0: AdamW fp32 grads; 1: Adam L2 bf16 grads + fp16 lp; 2: no bias
         * correction fp16 grads + bf16 lp; 3: SGD nesterov + decay */
        for (size_t i = 0; i < n; i++) {
            p[i] = frand();
            m[i] = 0;
            v[i] = 0;
        }
        to_dev(dp, p, b4);
        to_dev(dm, m, b4);
        to_dev(dv, v, b4);
        ds_dtype gt = variant == 1 ? DS_BF16 : variant == 2 ? DS_F16 : DS_F32;
        ds_dtype lt = variant == 1 ? DS_F16 : DS_BF16;
        void *hlp = variant == 1 || variant == 2 ? (void *)lp : NULL;
        void *dlpp = hlp ? dlp : NULL;
        for (int step = 1; step <= 3; step++) {
            for (size_t i = 0; i < n; i++) g[i] = frand() * 64.0f;
            const void *hg = g;
            if (gt != DS_F32) {
                REQUIRE_OK(g_cpu->ops->cast(g_cpu, g16, gt, g, DS_F32, n));
                hg = g16;
            }
            to_dev(dg, hg, n * ds_dtype_size(gt));
            if (variant < 3) {
                ds_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, variant == 0,
                                      variant != 2};
                REQUIRE_OK(g_cpu->ops->adam(g_cpu, p, hg, gt, 1.0f / 64, m, v, n, &hp, hlp, lt));
                REQUIRE_OK(
                    g_gpu->ops->adam(g_gpu, dp, dg, gt, 1.0f / 64, dm, dv, n, &hp, dlpp, lt));
            } else {
                ds_sgd_hparams hp = {0.05f, 0.9f, 0.0f, 1e-4f, true, step == 1};
                REQUIRE_OK(g_cpu->ops->sgd(g_cpu, p, hg, gt, 1.0f / 64, m, n, &hp, NULL, DS_F32));
                REQUIRE_OK(g_gpu->ops->sgd(g_gpu, dp, dg, gt, 1.0f / 64, dm, n, &hp, NULL, DS_F32));
            }
        }
        to_host(back, dp, b4);
        CHECK(memcmp(back, p, b4) == 0, "optimizer variant %d: parameters differ from cpu",
              variant);
        to_host(back, dm, b4);
        CHECK(memcmp(back, m, b4) == 0, "optimizer variant %d: first moment / buffer differs",
              variant);
        if (variant < 3) {
            to_host(back, dv, b4);
            CHECK(memcmp(back, v, b4) == 0, "optimizer variant %d: second moment differs", variant);
        }
        if (hlp) {
            to_host(lpg, dlp, n * 2);
            CHECK(memcmp(lpg, lp, n * 2) == 0, "optimizer variant %d: param_lp differs", variant);
        }
    }
    dev_free(dp, b4);
    dev_free(dm, b4);
    dev_free(dv, b4);
    dev_free(dg, b4);
    dev_free(dlp, n * 2);
    free(p);
    free(m);
    free(v);
    free(g);
    free(back);
    free(g16);
    free(lp);
    free(lpg);
}

/* ---- GEMM ---- */

/* With inputs DS_BF16 also: the cuda result must be off the cpu's fp32
 * GEMM (unrounded inputs) by more than the bound somewhere, proving the
 * cuda path rounded; the rounding moves a dot product by about 2^-9
 * sum|a b| / sqrt(k), far past 4 (k + 2) u sum|a b| at these k. */
static void test_gemm(ds_dtype inputs) {
    REQUIRE_OK(ds_backend_set_gemm_inputs(g_cpu, inputs));
    REQUIRE_OK(ds_backend_set_gemm_inputs(g_gpu, inputs));
    const bool bf = inputs == DS_BF16;
    const int shapes[][4] = {{33, 17, 65, 1}, {128, 128, 64, 4}, {7, 300, 2, 3}, {5, 6, 0, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], batch = shapes[s][3];
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
                int64_t sA = (int64_t)(ta ? k : m) * lda + 1, sB = (int64_t)(tb ? n : k) * ldb;
                int64_t sC = (int64_t)m * ldc + 4;
                size_t nA = (size_t)sA * batch + 1, nB = (size_t)sB * batch + 1,
                       nC = (size_t)sC * batch;
                float *A = (float *)malloc(nA * 4), *B = (float *)malloc(nB * 4);
                float *Cc = (float *)malloc(nC * 4), *Cg = (float *)malloc(nC * 4);
                float *C0 = (float *)malloc(nC * 4), *Cf = (float *)malloc(nC * 4);
                for (size_t i = 0; i < nA; i++) A[i] = frand();
                for (size_t i = 0; i < nB; i++) B[i] = frand();
                for (size_t i = 0; i < nC; i++) C0[i] = Cc[i] = Cf[i] = frand();
                float *dA = (float *)dev_alloc(nA * 4), *dB = (float *)dev_alloc(nB * 4),
                      *dC = (float *)dev_alloc(nC * 4);
                to_dev(dA, A, nA * 4);
                to_dev(dB, B, nB * 4);
                to_dev(dC, Cc, nC * 4);
                REQUIRE_OK(g_cpu->ops->gemm(g_cpu, ta, tb, m, n, k, 0.5f, A, lda, sA, B, ldb, sB,
                                            1.0f, Cc, ldc, sC, batch));
                REQUIRE_OK(g_gpu->ops->gemm(g_gpu, ta, tb, m, n, k, 0.5f, dA, lda, sA, dB, ldb, sB,
                                            1.0f, dC, ldc, sC, batch));
                to_host(Cg, dC, nC * 4);
                if (bf) { /* the cpu's fp32 GEMM of the unrounded inputs */
                    REQUIRE_OK(ds_backend_set_gemm_inputs(g_cpu, DS_F32));
                    REQUIRE_OK(g_cpu->ops->gemm(g_cpu, ta, tb, m, n, k, 0.5f, A, lda, sA, B, ldb,
                                                sB, 1.0f, Cf, ldc, sC, batch));
                    REQUIRE_OK(ds_backend_set_gemm_inputs(g_cpu, DS_BF16));
                }
                size_t bad = 0, off_fp32 = 0;
                for (int b = 0; b < batch; b++)
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) {
                            double mag = 0;
                            for (int l = 0; l < k; l++) {
                                float a = ta ? A[b * sA + (int64_t)l * lda + i]
                                             : A[b * sA + (int64_t)i * lda + l];
                                float bb = tb ? B[b * sB + (int64_t)j * ldb + l]
                                              : B[b * sB + (int64_t)l * ldb + j];
                                if (bf) { /* the values multiplied */
                                    a = ds_round_bf16(a);
                                    bb = ds_round_bf16(bb);
                                }
                                mag += fabs((double)a * bb);
                            }
                            int64_t at = b * sC + (int64_t)i * ldc + j;
                            double tol = 2.0 * (k + 2) * 1.1920929e-7 *
                                         (0.5 * mag + fabs((double)C0[at]));
                            bad += !(fabs((double)Cc[at] - Cg[at]) <= tol);
                            off_fp32 += !(fabs((double)Cf[at] - Cg[at]) <= tol);
                        }
                CHECK(bad == 0, "gemm (%s inputs) ta=%d tb=%d m=%d n=%d k=%d batch=%d: %zu "
                      "elements differ", ds_dtype_name(inputs), ta, tb, m, n, k, batch, bad);
                CHECK(!bf || k == 0 || off_fp32 > 0, "bf16-input gemm ta=%d tb=%d m=%d n=%d k=%d: "
                      "the same as the fp32 gemm of unrounded inputs (not rounded?)", ta, tb, m,
                      n, k);
                dev_free(dA, nA * 4);
                dev_free(dB, nB * 4);
                dev_free(dC, nC * 4);
                free(A);
                free(B);
                free(Cc);
                free(Cg);
                free(C0);
                free(Cf);
            }
        }
    }
}

static void test_bad_args(void) {
    float x = 0.0f;
    CHECK(g_gpu->ops->gemm(g_gpu, false, false, 4, 3, 5, 1, &x, 4, 0, &x, 3, 0, 0, &x, 3, 0, 1) ==
              DS_ERR_INVALID_ARG,
          "cuda gemm with lda < k accepted");
    CHECK(g_gpu->ops->cast(g_gpu, &x, DS_I64, &x, DS_F32, 1) == DS_ERR_INVALID_ARG,
          "cuda cast to int64 accepted");
    ds_backend_desc d = {DS_BACKEND_CUDA, 999, 0, NULL};
    ds_backend *be = NULL;
    CHECK(ds_backend_create(&d, &be) == DS_ERR_INVALID_ARG && be == NULL, "device 999 accepted");
    CHECK(strstr(ds_last_error(), "999") != NULL, "message: %s", ds_last_error());
    ds_clear_error();
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("test_backend_cuda: no CUDA device visible, skipped\n");
        return 77;
    }
    ds_backend_desc dc = {DS_BACKEND_CPU, 0, 2, NULL};
    ds_backend_desc dg = {DS_BACKEND_CUDA, 0, 0, NULL};
    REQUIRE_OK(ds_backend_create(&dc, &g_cpu));
    REQUIRE_OK(ds_backend_create(&dg, &g_gpu));
    CHECK(strcmp(g_gpu->ops->name, "cuda") == 0, "name %s", g_gpu->ops->name);
    test_philox_vs_curand();
    test_memory();
    test_rng();
    test_cast_scale_axpy_fill();
    test_quant();
    test_quant4();
    test_sumsq();
    test_optim();
    test_onebit_code();
    test_onebit_pass();
    test_rows();
    test_gemm(DS_F32);
    test_gemm(DS_BF16);
    REQUIRE_OK(ds_backend_set_gemm_inputs(g_gpu, DS_F32));
    test_bad_args();
    ds_backend_destroy(g_gpu);
    ds_backend_destroy(g_cpu);
    return test_finish("test_backend_cuda");
}
