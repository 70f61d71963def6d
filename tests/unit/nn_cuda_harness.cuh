/* The harness of the cuda model-kernel tests (test_nn_cuda.cu and
 * nn_cuda_reductions.cu, one program): buffers released per case, a seeded
 * generator, the comparisons (bit for bit, within a bound, the same error)
 * and the record of how much of each bound was used. Static, so each file
 * has its own copy and state, like test_util.h's failure counter; the file
 * that is not main returns its failures to main. The bounds' reasoning is at
 * the top of test_nn_cuda.cu. */
#ifndef DS_TESTS_NN_CUDA_HARNESS_CUH
#define DS_TESTS_NN_CUDA_HARNESS_CUH

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "engine/core/module.h"
#include "tests/unit/test_util.h"

#define EPS ((double)FLT_EPSILON)
/* The bounds below are first order in eps; a factor 2 covers the rest. */
#define SLACK 2.0
#define IGN DS_IGNORE_INDEX

/* Each test file has its own (the harness is per translation unit, as
 * test_util.h's failure counter is): set them before the first check. */
static ds_backend *g_cpu, *g_gpu;

/* ---- buffers: every allocation of a test is released at its end ---- */

#define MAX_LIVE 1024
static struct {
    void *p;
    size_t bytes;
    int dev;
} g_live[MAX_LIVE];
static int g_nlive;

static inline void *track(void *p, size_t bytes, int dev) {
    if (g_nlive == MAX_LIVE) {
        fprintf(stderr, "test_nn_cuda: more than %d live buffers\n", MAX_LIVE);
        exit(1);
    }
    g_live[g_nlive].p = p;
    g_live[g_nlive].bytes = bytes;
    g_live[g_nlive++].dev = dev;
    return p;
}

static inline void release_all(void) {
    for (int i = 0; i < g_nlive; i++) {
        if (g_live[i].dev)
            ds_backend_free(g_gpu, DS_MEM_BUFFERS, DS_PLACE_DEVICE, g_live[i].p, g_live[i].bytes);
        else
            free(g_live[i].p);
    }
    g_nlive = 0;
}

/* Zeroed; at least 16 bytes, so an empty case can still pass one element. */
static inline void *hnew(size_t bytes) {
    void *p = calloc(1, bytes > 16 ? bytes : 16);
    if (!p) TEST_DIE("out of host memory");
    return track(p, bytes, 0);
}

/* A device copy of `bytes` host bytes. At least 16 bytes are allocated, so
 * an empty case passes real pointers to both backends (a NULL dx or pd is
 * an argument error of its own). */
static inline void *up(const void *h, size_t bytes) {
    void *d = NULL;
    size_t alloc = bytes > 16 ? bytes : 16;
    REQUIRE_OK(ds_backend_alloc(g_gpu, DS_MEM_BUFFERS, DS_PLACE_DEVICE, alloc, &d));
    track(d, alloc, 1);
    if (bytes) REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, d, h, bytes, DS_COPY_H2D, NULL));
    return d;
}
static inline float *upf(const float *h, size_t n) { return (float *)up(h, n * sizeof(float)); }
static inline int32_t *upi(const int32_t *h, size_t n) {
    return (int32_t *)up(h, n * sizeof(int32_t));
}

/* The device array back into a new host array (synchronises). */
static inline float *down(const float *d, size_t n) {
    float *h = (float *)hnew(n * sizeof(float));
    if (n) REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, h, d, n * sizeof(float), DS_COPY_D2H, NULL));
    REQUIRE_OK(g_gpu->ops->sync(g_gpu));
    return h;
}

static inline float *fnew(size_t n) { return (float *)hnew(n * sizeof(float)); }

/* A device output of n floats holding NaN, so an entry a kernel should
 * write and does not fails every comparison. */
static inline float *dnan(size_t n) {
    float *h = (float *)hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    return upf(h, n);
}
static inline double *dnew(size_t n) { return (double *)hnew(n * sizeof(double)); }
static inline float *fcopy(const float *a, size_t n) {
    float *p = fnew(n);
    if (n) memcpy(p, a, n * sizeof(float));
    return p;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static inline double rnd_unit(void) {
    return ((double)(rnd_u64() >> 11) + 0.5) / 9007199254740992.0;
}
static inline float *frandn(size_t n, double sd) {
    float *p = fnew(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(sd * sqrt(-2.0 * log(rnd_unit())) * cos(6.283185307179586 * rnd_unit()));
    return p;
}

/* ---- comparisons ---- */

/* Bit for bit (memcmp per element); reports the count and the first one. */
static inline void expect_bits(const char *what, const float *cpu, const float *gpu,
                               size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(cpu + i, gpu + i, sizeof(float)) != 0 && bad++ == 0) first = i;
    CHECK(bad == 0, "%s: %zu of %zu differ from cpu; first at %zu: cuda %.9g, cpu %.9g", what, bad,
          n, first, (double)gpu[first], (double)cpu[first]);
}

/* The worst bound use of each kind of check, printed at the end. */
static struct {
    char what[48];
    double worst;
} g_use[64];
static int g_nuse;

static inline void record_use(const char *what, double r) {
    int i = 0;
    while (i < g_nuse && strcmp(g_use[i].what, what) != 0) i++;
    if (i == g_nuse) {
        if (g_nuse == 64) return;
        snprintf(g_use[g_nuse++].what, sizeof g_use[0].what, "%s", what);
        g_use[i].worst = 0.0;
    }
    if (!(r <= g_use[i].worst)) g_use[i].worst = r;
}

/* |cuda - cpu| <= tol per element (tol 0: equal values); NaN fails. `what`
 * names the kind of check (for the summary), `shape` the case. */
static inline void expect_within(const char *what, const char *shape, const float *cpu,
                                 const float *gpu, const double *tol, size_t n) {
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        double r = d == 0.0 ? 0.0 : d / tol[i]; /* d > 0 with tol 0: inf */
        if (!(r <= worst)) {
            worst = r;
            wi = i;
        }
    }
    record_use(what, worst);
    CHECK(worst <= 1.0, "%s (%s): entry %zu: cuda %.9g, cpu %.9g, bound %.3g (%.3g bounds off)",
          what, shape, wi, n ? (double)gpu[wi] : 0.0, n ? (double)cpu[wi] : 0.0,
          n ? tol[wi] : 0.0, worst);
}

/* The bound of a column sum dst[c] (+)= sum_r src[r, c] computed in two
 * orders: R + 1 terms with the old dst, see the top. `extra` (may be NULL)
 * adds per-element differences of the summed terms themselves. */
static inline void colsum_bound(double *tol, const float *dst0, const float *src,
                                const double *extra, int R, int W) {
    for (int c = 0; c < W; c++) {
        double mag = fabs((double)dst0[c]), ex = 0.0;
        for (int r = 0; r < R; r++) {
            mag += fabs((double)src[(size_t)r * W + c]);
            if (extra) ex += extra[(size_t)r * W + c];
        }
        tol[c] = SLACK * (R + 1) * EPS * mag + ex;
    }
}

/* Both backends refuse a call with DS_ERR_INVALID_ARG and the same message,
 * which contains `want`. */
#define EXPECT_SAME_ERROR(want, cpu_call, gpu_call)                                              \
    do {                                                                                         \
        char mc_[512], mg_[512];                                                                 \
        ds_clear_error();                                                                        \
        ds_status sc_ = (cpu_call);                                                              \
        snprintf(mc_, sizeof mc_, "%s", ds_last_error());                                        \
        ds_clear_error();                                                                        \
        ds_status sg_ = (gpu_call);                                                              \
        snprintf(mg_, sizeof mg_, "%s", ds_last_error());                                        \
        ds_clear_error();                                                                        \
        CHECK(sc_ == DS_ERR_INVALID_ARG && sg_ == sc_ && strcmp(mc_, mg_) == 0 &&                \
                  strstr(mg_, (want)) != NULL,                                                   \
              "cpu %s \"%s\", cuda %s \"%s\" (want INVALID_ARG with \"%s\")",                    \
              ds_status_to_string(sc_), mc_, ds_status_to_string(sg_), mg_, (want));             \
    } while (0)

/* The worst use of each bound, for the record. */
static inline void print_bound_use(const char *title) {
    printf("max |cuda - cpu| / bound per bounded check, %s (<= 1 passes):\n", title);
    for (int i = 0; i < g_nuse; i++) printf("  %-34s %.3g\n", g_use[i].what, g_use[i].worst);
}

#endif /* DS_TESTS_NN_CUDA_HARNESS_CUH */
