/* The cpu backend's strided-batched row-major GEMM against a naive loop in
 * double: all four transpose combinations, non-square shapes, leading
 * dimensions wider than the rows, batches (sequential and one-per-thread
 * paths, shared operands with stride 0), beta 0 and 1, k = 0, the
 * argument checks, the same bits at 1 and 2 threads, and the slot's tap
 * (ds_backend_tap_gemm).
 *
 * Tolerance. For a dot product of length k evaluated in float in any order
 * (blocked, vectorised, with fma), |computed - exact| <= gamma_k * sum|a||b|
 * with gamma_k = k*u / (1 - k*u), u = FLT_EPSILON/2 (Higham, Accuracy and
 * Stability, 3.1). Scaling by alpha and adding beta*C rounds twice more. So
 * each element must lie within (k + 2) * FLT_EPSILON * (|alpha| sum|a||b| +
 * |beta c|) of the double result: the bound with u rounded up to eps (a
 * factor 2 of slack for the 1/(1-ku) term and the double reference's own
 * rounding), never loosened past what the analysis allows. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cblas.h>

#include "engine/backend/backend.h"
#include "tests/unit/gemm_ref.h"
#include "tests/unit/test_util.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1), xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    uint64_t r = g_rng * 0x2545f4914f6cdd1dull;
    return (float)((double)(r >> 40) / (double)(1u << 24) * 2.0 - 1.0);
}

/* Sentinel written into the padding between rows and between batches of C:
 * GEMM must not touch it. */
#define PAD_SENTINEL 12345.0f

typedef struct gemm_case {
    int ta, tb, m, n, k, batch;
    int pad;            /* extra columns in every leading dimension */
    int share_b;        /* strideB = 0: one B for every batch */
    float alpha, beta;
} gemm_case;

static void run_case(ds_backend *be, const gemm_case *c) {
    int arows = c->ta ? c->k : c->m, acols = c->ta ? c->m : c->k;
    int brows = c->tb ? c->n : c->k, bcols = c->tb ? c->k : c->n;
    int lda = acols + c->pad, ldb = bcols + c->pad, ldc = c->n + c->pad;
    int64_t sA = (int64_t)arows * lda + 5, sB = c->share_b ? 0 : (int64_t)brows * ldb + 3;
    int64_t sC = (int64_t)c->m * ldc + 7;
    size_t nA = (size_t)sA * c->batch;
    size_t nB = c->share_b ? (size_t)brows * ldb : (size_t)sB * c->batch;
    size_t nC = (size_t)sC * c->batch;
    float *A = malloc(nA * sizeof *A), *B = malloc(nB * sizeof *B);
    float *C = malloc(nC * sizeof *C), *C0 = malloc(nC * sizeof *C0);
    for (size_t i = 0; i < nA; i++) A[i] = frand();
    for (size_t i = 0; i < nB; i++) B[i] = frand();
    for (size_t i = 0; i < nC; i++) C[i] = PAD_SENTINEL;
    for (int b = 0; b < c->batch; b++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++)
                C[b * sC + (int64_t)i * ldc + j] = c->beta == 0.0f ? NAN : frand();
    memcpy(C0, C, nC * sizeof *C);

    ds_status st = be->ops->gemm(be, c->ta, c->tb, c->m, c->n, c->k, c->alpha, A, lda, sA, B, ldb,
                                 sB, c->beta, C, ldc, sC, c->batch);
    CHECK(st == DS_OK, "gemm failed: %s", ds_last_error());

    for (int b = 0; b < c->batch; b++) {
        const float *Ab = A + b * sA, *Bb = B + b * sB;
        for (int i = 0; i < c->m; i++) {
            for (int j = 0; j < c->n; j++) {
                int64_t at = b * sC + (int64_t)i * ldc + j;
                double tol, want = gemm_ref_at(c->ta, c->tb, c->k, c->alpha, Ab, lda, Bb, ldb,
                                               c->beta, C0[at], i, j, &tol);
                double err = fabs((double)C[at] - want);
                if (!(err <= tol)) {
                    CHECK(0,
                          "gemm ta=%d tb=%d m=%d n=%d k=%d batch=%d beta=%g: C[%d][%d][%d] = "
                          "%.9g, want %.9g (err %.3g > tol %.3g)",
                          c->ta, c->tb, c->m, c->n, c->k, c->batch, (double)c->beta, b, i, j,
                          (double)C[at], want, err, tol);
                    goto done;
                }
            }
            for (int j = c->n; j < ldc && i < c->m - 1; j++) /* row padding untouched */
                CHECK(C[b * sC + (int64_t)i * ldc + j] == PAD_SENTINEL, "row padding written");
        }
        for (int64_t x = (int64_t)(c->m - 1) * ldc + c->n; x < sC; x++)
            CHECK(C[b * sC + x] == PAD_SENTINEL, "batch padding written at batch %d +%lld", b,
                  (long long)x);
    }
done:
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void test_shapes(ds_backend *be) {
    const int shapes[][3] = {
        {1, 1, 1}, {5, 7, 3}, {17, 13, 29}, {64, 33, 1}, {3, 96, 200}, {130, 70, 65},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int bi = 0; bi < 2; bi++)
                    for (int batch = 1; batch <= 3; batch += 2) {
                        gemm_case c = {ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], batch,
                                       (int)(s % 3) + 1, 0, 0.75f, bi ? 1.0f : 0.0f};
                        run_case(be, &c);
                    }
    /* batches sharing one B (stride 0), as a layer applied to micro-batches */
    gemm_case shared = {0, 1, 9, 11, 6, 4, 2, 1, 1.0f, 1.0f};
    run_case(be, &shared);
    /* big enough that OpenBLAS splits it across threads */
    gemm_case big = {0, 0, 300, 260, 190, 1, 0, 0, 1.0f, 0.0f};
    run_case(be, &big);
    /* attention-like batch: many small matrices (one-per-thread path) */
    gemm_case attn = {0, 1, 32, 32, 16, 8, 0, 0, 0.125f, 0.0f};
    run_case(be, &attn);
    /* the variants' own kernel (cpu_gemm_small.c: alpha 1, beta 0, n % 16 == 0,
     * k <= 256, small): full and partial row tiles (4 or 6 rows), full panels
     * of 64 columns and tails of 16-48, k from 1 to its 256 limit, one
     * product split over the threads by rows (m = 130), several products */
    const int own[][4] = {{130, 144, 65, 1}, {37, 80, 256, 3}, {1, 16, 1, 2},
                          {5, 32, 7, 5},     {48, 48, 64, 2}, {130, 64, 257, 1}};
    for (size_t s = 0; s < sizeof own / sizeof own[0]; s++)
        for (int t = 0; t < 4; t++) {
            gemm_case c = {t >> 1, t & 1, own[s][0], own[s][1], own[s][2], own[s][3],
                           (int)(s % 2) * 3, 0, 1.0f, 0.0f};
            run_case(be, &c);
        }
    gemm_case own_shared = {1, 0, 20, 64, 30, 3, 1, 1, 1.0f, 0.0f};
    run_case(be, &own_shared);
}

/* k = 0: op(A) op(B) is empty, so C = beta * C; beta = 0 clears NaN. */
static void test_k_zero(ds_backend *be) {
    float C[2][3] = {{1, 2, 3}, {NAN, 5, 6}};
    ds_status st = be->ops->gemm(be, false, false, 2, 3, 0, 1.0f, NULL, 1, 0, NULL, 3, 0, 2.0f,
                                 &C[0][0], 3, 0, 1);
    CHECK(st == DS_OK, "k=0 gemm failed: %s", ds_last_error());
    CHECK(C[0][0] == 2 && C[0][2] == 6 && C[1][1] == 10 && isnan(C[1][0]), "k=0, beta=2 wrong");
    st = be->ops->gemm(be, false, false, 2, 3, 0, 1.0f, NULL, 1, 0, NULL, 3, 0, 0.0f, &C[0][0], 3,
                       0, 1);
    CHECK(st == DS_OK && C[1][0] == 0.0f && C[1][2] == 0.0f, "k=0, beta=0 must write zeros");
}

static void expect_invalid(ds_status st, const char *what, const char *needle) {
    CHECK(st == DS_ERR_INVALID_ARG, "%s: got %s, want DS_ERR_INVALID_ARG", what,
          ds_status_to_string(st));
    CHECK(strstr(ds_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
          ds_last_error(), needle);
    ds_clear_error();
}

static void test_bad_args(ds_backend *be) {
    float A[64] = {0}, B[64] = {0}, C[64] = {0};
    /* A not transposed is m x k = 4 x 5: lda 4 is too small */
    expect_invalid(be->ops->gemm(be, false, false, 4, 3, 5, 1, A, 4, 0, B, 3, 0, 0, C, 3, 0, 1),
                   "lda too small", "lda=4");
    /* B transposed is n x k = 3 x 5: ldb 3 too small */
    expect_invalid(be->ops->gemm(be, false, true, 4, 3, 5, 1, A, 5, 0, B, 3, 0, 0, C, 3, 0, 1),
                   "ldb too small", "ldb=3");
    expect_invalid(be->ops->gemm(be, false, false, 4, 3, 5, 1, A, 5, 0, B, 3, 0, 0, C, 2, 0, 1),
                   "ldc too small", "ldc=2");
    expect_invalid(be->ops->gemm(be, false, false, -1, 3, 5, 1, A, 5, 0, B, 3, 0, 0, C, 3, 0, 1),
                   "negative m", "negative");
    /* two batches of C (4 x 3, 12 elements) 6 apart would overlap */
    expect_invalid(be->ops->gemm(be, false, false, 4, 3, 5, 1, A, 5, 0, B, 3, 0, 0, C, 3, 6, 2),
                   "overlapping C", "overlap");
    expect_invalid(be->ops->gemm(be, false, false, 4, 3, 5, 1, NULL, 5, 0, B, 3, 0, 0, C, 3, 0, 1),
                   "NULL A", "NULL");
}

/* A product's bits do not depend on the thread count, so one rank of 2
 * threads trains the same model as 2 ranks of 1 or one of 1 (the stage
 * equivalence tests run at 1 thread). Products big enough to be split over
 * the threads, by rows of C (cpu_backend.c: units of ds_blas_row_unit
 * rows), all four transposes, beta 0 and 1: row counts that are not
 * multiples of a unit, BERT-mini's 256-row weight gradients (cut 128 / 128
 * on 16-row units, 132 / 124 on 12-row ones: a cut off the Haswell kernels'
 * 12 rows changes 2-5% of the elements), and too few rows for blocks of 48.
 * With 16 threads, a product whose blocks would fall under OpenBLAS's
 * small-matrix threshold if every thread took one (800 x 130 x 129: 16
 * blocks of 48-64 rows, 0.8-1.07 million multiply-adds; SkylakeX's small
 * kernel gives other bits for 48 x 130 x 129): it must run in fewer,
 * larger blocks. */
static void same_bits(ds_backend *one, ds_backend *many, const int (*shapes)[3], size_t count) {
    for (size_t s = 0; s < count; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        size_t nA = (size_t)m * k, nB = (size_t)k * n, nC = (size_t)m * n;
        float *A = malloc(nA * sizeof *A), *B = malloc(nB * sizeof *B);
        float *C1 = malloc(nC * sizeof *C1), *C2 = malloc(nC * sizeof *C2);
        for (size_t i = 0; i < nA; i++) A[i] = frand();
        for (size_t i = 0; i < nB; i++) B[i] = frand();
        for (int t = 0; t < 8; t++) {
            bool ta = t & 1, tb = t & 2;
            float beta = t & 4 ? 1.0f : 0.0f;
            for (size_t i = 0; i < nC; i++) C1[i] = C2[i] = frand();
            ds_status s1 = one->ops->gemm(one, ta, tb, m, n, k, 0.5f, A, ta ? m : k, 0, B,
                                          tb ? k : n, 0, beta, C1, n, 0, 1);
            ds_status s2 = many->ops->gemm(many, ta, tb, m, n, k, 0.5f, A, ta ? m : k, 0, B,
                                           tb ? k : n, 0, beta, C2, n, 0, 1);
            CHECK(s1 == DS_OK && s2 == DS_OK, "gemm failed: %s", ds_last_error());
            CHECK(!memcmp(C1, C2, nC * sizeof *C1),
                  "m=%d n=%d k=%d ta=%d tb=%d beta=%g: 1 and %d threads differ", m, n, k, ta,
                  tb, (double)beta, many->num_threads);
        }
        free(A), free(B), free(C1), free(C2);
    }
}

/* A batch of products (each its own A, B and C), one thread against many. */
static void same_bits_batched(ds_backend *one, ds_backend *many, int m, int n, int k, int batch,
                              bool tb) {
    size_t nA = (size_t)m * k, nB = (size_t)k * n, nC = (size_t)m * n;
    float *A = malloc(nA * batch * sizeof *A), *B = malloc(nB * batch * sizeof *B);
    float *C1 = malloc(nC * batch * sizeof *C1), *C2 = malloc(nC * batch * sizeof *C2);
    for (size_t i = 0; i < nA * batch; i++) A[i] = frand();
    for (size_t i = 0; i < nB * batch; i++) B[i] = frand();
    ds_status s1 = one->ops->gemm(one, false, tb, m, n, k, 1.0f, A, k, (int64_t)nA, B,
                                  tb ? k : n, (int64_t)nB, 0.0f, C1, n, (int64_t)nC, batch);
    ds_status s2 = many->ops->gemm(many, false, tb, m, n, k, 1.0f, A, k, (int64_t)nA, B,
                                   tb ? k : n, (int64_t)nB, 0.0f, C2, n, (int64_t)nC, batch);
    CHECK(s1 == DS_OK && s2 == DS_OK, "batched gemm failed: %s", ds_last_error());
    CHECK(!memcmp(C1, C2, nC * batch * sizeof *C1),
          "m=%d n=%d k=%d batch %d tb=%d: 1 and %d threads differ", m, n, k, batch, tb,
          many->num_threads);
    free(A), free(B), free(C1), free(C2);
}

static void test_threads_same_bits(ds_backend *one, ds_backend *two, ds_backend *sixteen) {
    static const int two_shapes[][3] = {
        {4096, 256, 256}, {256, 256, 4096}, {256, 1024, 4096}, {1024, 256, 4096},
        {1000, 300, 200}, {777, 130, 129},  {40, 160, 4096},   {97, 70, 64}}; /* the last: one call on one thread */
    static const int many_shapes[][3] = {{800, 130, 129}};
    same_bits(one, two, two_shapes, sizeof two_shapes / sizeof *two_shapes);
    same_bits(one, sixteen, many_shapes, 1);
    /* a short last unit of rows (m % unit of 1 or 2) at as many threads as
     * units: it made a block of its own, small enough for OpenBLAS's
     * small-matrix kernel, which rounds otherwise (row 32 of m 33 differed
     * at 3-5 threads; row 96 of a MiniLM FFN over 97 tokens at 7-8) */
    static const int short_unit[][3] = {{33, 128, 4096}, {50, 200, 2048}, {97, 384, 1536}};
    for (int nt = 3; nt <= 8; nt++) {
        if (nt == 6) continue; /* 3, 4, 5, 7, 8: the counts the shapes failed at */
        ds_backend *be = test_cpu_backend(nt, NULL);
        same_bits(one, be, short_unit, sizeof short_unit / sizeof *short_unit);
        ds_backend_destroy(be);
    }
    /* batched products above the small threshold (attention at T 512):
     * OpenBLAS's own threading gave thread-count-dependent bits with the
     * Haswell and Zen kernels (test_backend_gemm_haswell runs those) */
    for (int nt = 2; nt <= 4; nt++) {
        ds_backend *be = nt == 2 ? two : test_cpu_backend(nt, NULL);
        same_bits_batched(one, be, 512, 512, 64, 4, true);
        same_bits_batched(one, be, 512, 64, 512, 4, false);
        same_bits_batched(one, be, 512, 512, 64, 2, true); /* fewer than the threads at 3-4 */
        if (be != two) ds_backend_destroy(be);
    }
}

/* ds_backend_tap_gemm: the tap sees each call's arguments, the product is
 * still computed, a call the slot refuses is not shown (the flops profiler
 * would count FLOPs nobody ran), a second tap is refused with a message,
 * and untapping puts the backend's own table back. */
typedef struct tap_seen {
    int calls;
    ds_gemm_call last;
} tap_seen;

static void tap_count(void *ctx, const ds_gemm_call *c) {
    tap_seen *t = ctx;
    t->calls++;
    t->last = *c;
}

static void test_tap(ds_backend *be) {
    const ds_backend_ops *own = be->ops;
    tap_seen seen = {0};
    CHECK(ds_backend_tap_gemm(be, tap_count, &seen) == DS_OK, "tap: %s", ds_last_error());
    CHECK(ds_backend_tap_gemm(be, tap_count, &seen) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "tapped already"),
          "a second tap was not refused: %s", ds_last_error());
    ds_clear_error();
    float A[6] = {1, 2, 3, 4, 5, 6}, B[3] = {1, 1, 2}, C[2] = {-1, -1};
    CHECK(be->ops->gemm(be, false, false, 2, 1, 3, 1.0f, A, 3, 0, B, 1, 0, 0.0f, C, 1, 0, 1) ==
              DS_OK, "tapped gemm failed: %s", ds_last_error());
    CHECK(C[0] == 9.0f && C[1] == 21.0f, "tapped gemm computed %g %g, want 9 21", (double)C[0],
          (double)C[1]);
    CHECK(seen.calls == 1 && seen.last.m == 2 && seen.last.n == 1 && seen.last.k == 3 &&
              seen.last.lda == 3 && seen.last.batch == 1 && !seen.last.transa,
          "the tap saw %d calls, m %d n %d k %d lda %d", seen.calls, seen.last.m, seen.last.n,
          seen.last.k, seen.last.lda);
    CHECK(be->ops->gemm(be, false, false, 2, 1, 3, 1.0f, A, 2, 0, B, 1, 0, 0.0f, C, 1, 0, 1) ==
              DS_ERR_INVALID_ARG && seen.calls == 1,
          "a refused call (lda 2 < 3 columns of A) reached the tap: %d calls", seen.calls);
    ds_clear_error();
    CHECK(be->ops->gemm_bias(be, false, false, 2, 1, 3, A, 2, B, 1, B, C) ==
              DS_ERR_INVALID_ARG && seen.calls == 1,
          "a refused gemm_bias reached the tap: %d calls", seen.calls);
    ds_clear_error();
    ds_backend_untap_gemm(be);
    CHECK(be->ops == own, "untap did not restore the backend's table");
    CHECK(be->ops->gemm(be, false, false, 2, 1, 3, 1.0f, A, 3, 0, B, 1, 0, 0.0f, C, 1, 0, 1) ==
              DS_OK && seen.calls == 1, "a call after untap reached the tap");
    ds_backend_untap_gemm(be); /* none: nothing happens */
    CHECK(be->ops == own, "a second untap changed the table");
}

/* Run with OPENBLAS_CORETYPE set (tests/backend.cmake: Haswell, whose
 * 12-row unit differs from the AVX-512 cores' 16), the test is about that
 * core's kernels: skipped (77) where the CPU cannot run them or this
 * OpenBLAS did not take the name. */
static bool forced_core_runs(void) {
    const char *want = getenv("OPENBLAS_CORETYPE");
    if (!want) return true;
#if defined(__x86_64__)
    if (!strcasecmp(want, "Haswell") &&
        !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        printf("test_backend_gemm: this CPU has no AVX2 and FMA for OpenBLAS's Haswell core\n");
        return false;
    }
#endif
    if (strcasecmp(openblas_get_corename(), want)) {
        printf("test_backend_gemm: OPENBLAS_CORETYPE=%s, but OpenBLAS runs %s\n", want,
               openblas_get_corename());
        return false;
    }
    return true;
}

int main(void) {
    if (!forced_core_runs()) return 77;
    ds_backend *one = test_cpu_backend(1, NULL), *two = test_cpu_backend(2, NULL);
    ds_backend *sixteen = test_cpu_backend(16, NULL);
    test_tap(one);
    test_threads_same_bits(one, two, sixteen);
    ds_backend_destroy(one);
    ds_backend_destroy(two);
    ds_backend_destroy(sixteen);
    for (int nt = 1; nt <= 2; nt++) {
        ds_backend *be = test_cpu_backend(nt, NULL);
        CHECK(be->num_threads == nt, "num_threads %d, want %d", be->num_threads, nt);
        test_shapes(be);
        test_k_zero(be);
        test_bad_args(be);
        ds_backend_destroy(be);
    }
    return test_finish("test_backend_gemm");
}
