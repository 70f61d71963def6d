/* The cpu backend's memory slots and element-wise kernels:
 *
 *   - alloc: zeroed, 64-byte aligned, page-aligned when big or pinned-host,
 *     on a 2 MiB boundary from 2 MiB up (transparent huge pages),
 *     recorded by the accountant; memcpy / memset; the optional slots are NULL;
 *   - cast between fp32 / fp16 / bf16 in all 9 directions (and in place)
 *     equal to the scalar conversions test_dtype checks exhaustively;
 *   - fill, scale, axpy (mixed types) against the scalar formula, exactly;
 *   - sumsq: exact on integer data in every dtype, bf16 the bits of the same
 *     values in fp32, non-finite flag for inf and NaN (fp32 and fp16), huge
 *     finite values not flagged, and the same bits at 1 and 2 threads;
 *   - every element-wise slot gives the same bits at 1 and 2 threads;
 *   - bad dtypes and NULL pointers are rejected with a message. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/mem.h"
#include "tests/unit/test_util.h"

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 40) / 8388608.0 - 1.0);
}

static int all_zero(const void *p, size_t bytes) {
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i]) return 0;
    return 1;
}

static void test_memory(ds_backend *be, ds_mem *mem) {
    /* "cpu/<isa>": the kernel variant it chose (engine/backend/cpu/cpu_isa.h) */
    CHECK(strncmp(be->ops->name, "cpu/", 4) == 0, "name %s", be->ops->name);
    CHECK(be->ops->stream_create == NULL && be->ops->event_create == NULL,
          "cpu stream/event slots must be NULL (optional, synchronous backend)");
    const struct {
        size_t bytes;
        ds_mem_place place;
        size_t align;
    } cases[] = {
        {100, DS_PLACE_DEVICE, 64},        {4097, DS_PLACE_DEVICE, 64},
        {1u << 20, DS_PLACE_DEVICE, 4096}, {100, DS_PLACE_HOST, 4096},
        /* a huge page and more: on a huge page's boundary (MADV_HUGEPAGE) */
        {3u << 20, DS_PLACE_HOST, 2u << 20}, {2u << 20, DS_PLACE_DEVICE, 2u << 20},
        {(2u << 20) + 100, DS_PLACE_DEVICE, 2u << 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *p = NULL;
        ds_status st = ds_backend_alloc(be, DS_MEM_BUFFERS, cases[i].place, cases[i].bytes, &p);
        CHECK(st == DS_OK && p, "alloc %zu failed: %s", cases[i].bytes, ds_last_error());
        if (!p) continue;
        CHECK((uintptr_t)p % cases[i].align == 0, "alloc %zu at %s: %p not %zu-aligned",
              cases[i].bytes, ds_mem_place_name(cases[i].place), p, cases[i].align);
        CHECK(all_zero(p, cases[i].bytes), "alloc %zu not zeroed", cases[i].bytes);
        ds_mem_report r;
        ds_mem_snapshot(mem, &r);
        CHECK(r.bytes[DS_MEM_BUFFERS][cases[i].place] == cases[i].bytes,
              "accountant shows %llu bytes, want %zu",
              (unsigned long long)r.bytes[DS_MEM_BUFFERS][cases[i].place], cases[i].bytes);
        /* memset / memcpy round trip */
        CHECK(be->ops->memset(be, p, 0xab, cases[i].bytes, NULL) == DS_OK, "memset failed");
        unsigned char *host = malloc(cases[i].bytes);
        CHECK(be->ops->memcpy(be, host, p, cases[i].bytes, DS_COPY_D2H, NULL) == DS_OK,
              "memcpy failed");
        size_t bad = 0;
        for (size_t b = 0; b < cases[i].bytes; b++) bad += host[b] != 0xab;
        CHECK(bad == 0, "memset/memcpy: %zu bytes differ", bad);
        free(host);
        ds_backend_free(be, DS_MEM_BUFFERS, cases[i].place, p, cases[i].bytes);
        ds_mem_snapshot(mem, &r);
        CHECK(r.bytes[DS_MEM_BUFFERS][cases[i].place] == 0, "accountant not back to 0");
    }
    void *p = (void *)1;
    CHECK(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, 0, &p) == DS_OK && p == NULL,
          "0 bytes must give NULL");
    CHECK(be->ops->sync(be) == DS_OK, "sync failed");
    CHECK(be->ops->memcpy(be, NULL, &p, 8, DS_COPY_H2D, NULL) == DS_ERR_INVALID_ARG,
          "memcpy to NULL accepted");
    CHECK(be->ops->memcpy(be, &p, &p, 8, (ds_copy_kind)9, NULL) == DS_ERR_INVALID_ARG,
          "bad copy kind accepted");
    ds_clear_error();
}

/* A test vector with the interesting values first, random ones after. */
#define NV 5000
static float g_vals[NV];

static void make_values(void) {
    const float special[] = {0.0f,     -0.0f,       1.0f,     -1.5f,          65504.0f,
                             65520.0f, 1e6f,        -1e6f,    6e-8f,          3e-8f,
                             1e-40f,   INFINITY,    -INFINITY, NAN,           0.1f,
                             3.14159f, 1.00048828f, FLT_MAX,  1.17549435e-38f, -2.5e-5f};
    /* NaNs with payloads (signalling, negative) that hardware conversions
     * would propagate differently from the scalar code */
    const uint32_t nan_bits[3] = {0x7f800001u, 0xffa00000u, 0x7fc12345u};
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < NV; i++)
        g_vals[i] = i < ns ? special[i] : frand() * powf(2.0f, (float)(i % 40) - 20.0f);
    for (size_t i = 0; i < 3; i++) g_vals[ns + 5 * i] = ds_bits_f32(nan_bits[i]);
}

/* Scalar reference of one cast: through fp32 with the dtype.h conversions. */
static void cast_ref(void *dst, ds_dtype dt, const void *src, ds_dtype st, size_t n) {
    for (size_t i = 0; i < n; i++) ds_store_f32(dst, dt, i, ds_load_f32(src, st, i));
}

/* Bit equality, NaNs included: the bulk conversions must give the scalar
 * code's canonical NaNs, as the CUDA kernels do. */
static int same_bits(const void *a, const void *b, size_t n, ds_dtype t, size_t *where) {
    size_t es = ds_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0) {
            *where = i;
            return 0;
        }
    return 1;
}

static void test_cast(ds_backend *be) {
    const ds_dtype ts[3] = {DS_F32, DS_F16, DS_BF16};
    static float src32[NV], buf_a[NV], buf_b[NV]; /* 4 bytes each: room for any dtype */
    memcpy(src32, g_vals, sizeof src32);
    for (int s = 0; s < 3; s++) {
        for (int d = 0; d < 3; d++) {
            /* source in dtype s, from the fp32 values */
            static float src[NV];
            cast_ref(src, ts[s], src32, DS_F32, NV);
            ds_status st = be->ops->cast(be, buf_a, ts[d], src, ts[s], NV);
            CHECK(st == DS_OK, "cast %s->%s failed: %s", ds_dtype_name(ts[s]), ds_dtype_name(ts[d]),
                  ds_last_error());
            cast_ref(buf_b, ts[d], src, ts[s], NV);
            size_t at = 0;
            CHECK(same_bits(buf_a, buf_b, NV, ts[d], &at), "cast %s->%s differs at %zu (%g)",
                  ds_dtype_name(ts[s]), ds_dtype_name(ts[d]), at,
                  (double)ds_load_f32(src, ts[s], at));
            /* in place for equal element sizes */
            if (ds_dtype_size(ts[s]) == ds_dtype_size(ts[d])) {
                memcpy(buf_a, src, NV * ds_dtype_size(ts[s]));
                CHECK(be->ops->cast(be, buf_a, ts[d], buf_a, ts[s], NV) == DS_OK, "in place");
                CHECK(same_bits(buf_a, buf_b, NV, ts[d], &at), "in-place cast %s->%s at %zu",
                      ds_dtype_name(ts[s]), ds_dtype_name(ts[d]), at);
            }
        }
    }
    /* every fp16 and bf16 bit pattern (signalling NaNs included) to the
     * other two types, against the scalar conversions */
    static uint16_t all16[65536];
    static float out_a[65536], out_b[65536];
    for (uint32_t h = 0; h < 65536; h++) all16[h] = (uint16_t)h;
    for (int s = 1; s < 3; s++) {
        for (int d = 0; d < 3; d++) {
            if (d == s) continue;
            CHECK(be->ops->cast(be, out_a, ts[d], all16, ts[s], 65536) == DS_OK, "cast all");
            cast_ref(out_b, ts[d], all16, ts[s], 65536);
            size_t at = 0;
            CHECK(same_bits(out_a, out_b, 65536, ts[d], &at), "cast %s->%s of pattern %04zx",
                  ds_dtype_name(ts[s]), ds_dtype_name(ts[d]), at);
        }
    }
    /* known values, to pin the reference itself */
    uint16_t h[3];
    float f[3] = {1.0f, 65520.0f, -0.0f};
    be->ops->cast(be, h, DS_F16, f, DS_F32, 3);
    CHECK(h[0] == 0x3c00 && h[1] == 0x7c00 && h[2] == 0x8000, "f16 cast %04x %04x %04x", h[0], h[1],
          h[2]);
    be->ops->cast(be, h, DS_BF16, f, DS_F32, 3);
    CHECK(h[0] == 0x3f80 && h[1] == 0x4780 && h[2] == 0x8000, "bf16 cast %04x %04x %04x", h[0],
          h[1], h[2]);
    CHECK(be->ops->cast(be, buf_a, DS_I32, src32, DS_F32, 4) == DS_ERR_INVALID_ARG,
          "cast to int32 accepted");
    CHECK(strstr(ds_last_error(), "int32") != NULL, "message: %s", ds_last_error());
    ds_clear_error();
}

static void test_fill_scale_axpy(ds_backend *be) {
    static float x[NV], y[NV];
    CHECK(be->ops->fill(be, x, NV, -7.25f) == DS_OK, "fill failed");
    size_t bad = 0;
    for (size_t i = 0; i < NV; i++) bad += x[i] != -7.25f;
    CHECK(bad == 0, "fill wrote %zu wrong values", bad);

    const ds_dtype ts[3] = {DS_F32, DS_F16, DS_BF16};
    for (int t = 0; t < 3; t++) {
        static float buf[NV], ref[NV];
        cast_ref(buf, ts[t], g_vals, DS_F32, NV);
        memcpy(ref, buf, sizeof buf);
        CHECK(be->ops->scale(be, buf, ts[t], NV, 0.375f) == DS_OK, "scale failed");
        for (size_t i = 0; i < NV; i++)
            ds_store_f32(ref, ts[t], i, ds_load_f32(ref, ts[t], i) * 0.375f);
        size_t at = 0;
        CHECK(same_bits(buf, ref, NV, ts[t], &at), "scale %s differs at %zu", ds_dtype_name(ts[t]),
              at);
    }
    /* a hand value: 3 * 0.375 = 1.125, exact in every dtype */
    float three = 3.0f;
    be->ops->scale(be, &three, DS_F32, 1, 0.375f);
    CHECK(three == 1.125f, "scale 3 * 0.375 = %g", (double)three);

    for (int yt = 0; yt < 3; yt++) {
        for (int xt = 0; xt < 3; xt++) {
            static float ybuf[NV], xbuf[NV], ref[NV];
            for (size_t i = 0; i < NV; i++) {
                ds_store_f32(ybuf, ts[yt], i, frand());
                ds_store_f32(xbuf, ts[xt], i, g_vals[(i * 7) % NV]);
            }
            memcpy(ref, ybuf, sizeof ybuf);
            CHECK(be->ops->axpy(be, ybuf, ts[yt], -0.5f, xbuf, ts[xt], NV) == DS_OK, "axpy failed");
            for (size_t i = 0; i < NV; i++) {
                float yi = ds_load_f32(ref, ts[yt], i), xi = ds_load_f32(xbuf, ts[xt], i);
                ds_store_f32(ref, ts[yt], i, fmaf(-0.5f, xi, yi));
            }
            size_t at = 0;
            CHECK(same_bits(ybuf, ref, NV, ts[yt], &at), "axpy y=%s x=%s differs at %zu",
                  ds_dtype_name(ts[yt]), ds_dtype_name(ts[xt]), at);
        }
    }
    /* a hand value: 1 + 2 * 0.25 = 1.5 */
    x[0] = 1.0f;
    y[0] = 0.25f;
    be->ops->axpy(be, x, DS_F32, 2.0f, y, DS_F32, 1);
    CHECK(x[0] == 1.5f, "axpy 1 + 2 * 0.25 = %g", (double)x[0]);
}

static void test_sumsq(ds_backend *be) {
    /* integers -3..3: squares and their sums are exact in double */
    enum { N = 100001 };
    static float f[N];
    static uint16_t h[N];
    double want = 0;
    for (size_t i = 0; i < N; i++) {
        f[i] = (float)((int)(i % 7) - 3);
        want += (double)f[i] * f[i];
    }
    const ds_dtype ts[3] = {DS_F32, DS_F16, DS_BF16};
    for (int t = 0; t < 3; t++) {
        const void *x = f;
        if (ts[t] != DS_F32) {
            cast_ref(h, ts[t], f, DS_F32, N);
            x = h;
        }
        double s = -1;
        int nf = -1;
        CHECK(be->ops->sumsq(be, x, ts[t], N, &s, &nf) == DS_OK, "sumsq failed");
        CHECK(s == want && nf == 0, "sumsq %s = %.17g nonfinite %d, want %.17g and 0",
              ds_dtype_name(ts[t]), s, nf, want);
    }
    /* bf16: the bits of the same values as fp32 (the lanes take the same
     * elements either way), on random data at lengths around the pieces of
     * 2048 and the lanes' 16;
     * magnitudes 2^-30..2^30, so that the double sums round and an element
     * summed into another lane would change them */
    static const size_t lens[] = {N, 2048 * 3 + 17, 2048, 31, 5};
    for (size_t q = 0; q < sizeof lens / sizeof *lens; q++) {
        for (size_t i = 0; i < lens[q]; i++)
            f[i] = frand() * ldexpf(1.0f, (int)((i * 37) % 61) - 30);
        cast_ref(h, DS_BF16, f, DS_F32, lens[q]);
        cast_ref(f, DS_F32, h, DS_BF16, lens[q]);
        double sh = -1, sf = -2;
        int nh = -1, nfl = -1;
        CHECK_OK(be->ops->sumsq(be, h, DS_BF16, lens[q], &sh, &nh));
        CHECK_OK(be->ops->sumsq(be, f, DS_F32, lens[q], &sf, &nfl));
        CHECK(memcmp(&sh, &sf, sizeof sh) == 0 && nh == 0 && nfl == 0,
              "sumsq of %zu bf16 values %.17g, of the same as fp32 %.17g", lens[q], sh, sf);
    }
    for (size_t i = 0; i < N; i++) f[i] = (float)((int)(i % 7) - 3);
    /* hand case: 3^2 + 4^2 = 25 */
    float v[2] = {3.0f, -4.0f};
    double s = 0;
    int nf = 0;
    be->ops->sumsq(be, v, DS_F32, 2, &s, &nf);
    CHECK(s == 25.0 && nf == 0, "sumsq(3, -4) = %g", s);
    /* empty input */
    be->ops->sumsq(be, v, DS_F32, 0, &s, &nf);
    CHECK(s == 0.0 && nf == 0, "sumsq of nothing = %g (%d)", s, nf);
    /* huge but finite values: 1000 * FLT_MAX^2 ~ 1.2e80 is finite in double
     * (relative error of 1000 double additions: at most 1000 * DBL_EPSILON) */
    static float big[1000];
    for (size_t i = 0; i < 1000; i++) big[i] = i % 2 ? FLT_MAX : -FLT_MAX;
    be->ops->sumsq(be, big, DS_F32, 1000, &s, &nf);
    CHECK(nf == 0 && fabs(s / (1000.0 * (double)FLT_MAX * FLT_MAX) - 1.0) <= 1000 * DBL_EPSILON,
          "sumsq of FLT_MAX: %g flag %d", s, nf);
    /* non-finite at the start, the middle and the end, fp32 and fp16 */
    const size_t at[3] = {0, N / 2, N - 1};
    const float bad[2] = {INFINITY, NAN};
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 2; b++) {
            float keep = f[at[a]];
            f[at[a]] = b ? -bad[b] : bad[b];
            be->ops->sumsq(be, f, DS_F32, N, &s, &nf);
            CHECK(nf == 1, "fp32 %g at %zu not flagged", (double)f[at[a]], at[a]);
            f[at[a]] = keep;
            uint16_t hk = h[at[a]];
            cast_ref(h, DS_F16, f, DS_F32, N);
            h[at[a]] = b ? 0x7e00 : 0xfc00; /* NaN, -inf */
            be->ops->sumsq(be, h, DS_F16, N, &s, &nf);
            CHECK(nf == 1, "fp16 %04x at %zu not flagged", h[at[a]], at[a]);
            h[at[a]] = hk;
        }
    }
    CHECK(be->ops->sumsq(be, f, DS_F32, N, NULL, &nf) == DS_ERR_INVALID_ARG, "NULL out accepted");
    ds_clear_error();
}

/* Every element-wise slot: the same bits at 1 and 2 threads on inputs big
 * enough to run in parallel. */
static void test_thread_invariance(ds_backend *be1, ds_backend *be2) {
    const size_t n = 300007;
    float *x = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
    uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = frand() * 100.0f;
    be1->ops->cast(be1, ha, DS_BF16, x, DS_F32, n);
    be2->ops->cast(be2, hb, DS_BF16, x, DS_F32, n);
    CHECK(memcmp(ha, hb, n * 2) == 0, "cast differs across thread counts");
    memcpy(a, x, n * 4);
    memcpy(b, x, n * 4);
    be1->ops->axpy(be1, a, DS_F32, 0.3f, ha, DS_BF16, n);
    be2->ops->axpy(be2, b, DS_F32, 0.3f, hb, DS_BF16, n);
    be1->ops->scale(be1, a, DS_F32, n, 1.7f);
    be2->ops->scale(be2, b, DS_F32, n, 1.7f);
    CHECK(memcmp(a, b, n * 4) == 0, "axpy/scale differ across thread counts");
    double s1, s2;
    int f1, f2;
    be1->ops->sumsq(be1, x, DS_F32, n, &s1, &f1);
    be2->ops->sumsq(be2, x, DS_F32, n, &s2, &f2);
    CHECK(memcmp(&s1, &s2, sizeof s1) == 0, "sumsq %.17g at 1 thread, %.17g at 2", s1, s2);
    /* and close to a compensated reference: relative error of a double sum
     * of n positive terms <= n * DBL_EPSILON */
    long double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    CHECK(fabsl(s1 - ref) <= n * DBL_EPSILON * ref, "sumsq %.17g vs long double %.17Lg", s1, ref);
    free(x);
    free(a);
    free(b);
    free(ha);
    free(hb);
}

int main(void) {
    ds_mem *mem = NULL;
    if (ds_mem_create(&mem) != DS_OK) return 1;
    ds_backend *be1 = test_cpu_backend(1, mem), *be2 = test_cpu_backend(2, mem);
    make_values();
    test_memory(be1, mem);
    test_cast(be1);
    test_fill_scale_axpy(be1);
    test_sumsq(be1);
    test_sumsq(be2);
    test_thread_invariance(be1, be2);
    ds_backend_destroy(be1);
    ds_backend_destroy(be2);
    ds_mem_destroy(mem);
    return test_finish("test_backend_elementwise");
}
