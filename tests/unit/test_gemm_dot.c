/* The cpu backend's bf16 GEMMs on the CPU's bf16 dot-product instruction
 * (engine/backend/cpu/cpu_gemm_dot.c: the avx512 variant on a CPU with
 * AVX512-BF16; elsewhere this test exits 77, skipped, saying why):
 *
 *   - the path runs: an input below 2^-126 counts as zero there (the
 *     instructions' DAZ), where the other paths keep it, so a product that
 *     reads one tells which path computed it;
 *   - its conversion to bf16 (VCVTNE2PS2BF16 in the packs) gives
 *     ds_f32_to_bf16's bits for every finite fp32 value from 2^-126 up, read
 *     off a product with the identity (C = the rounded A, exactly): every
 *     exponent and both signs, mantissas at, just below and just above the
 *     rounding's halfway points, odd and even;
 *   - every element within the bound of the exact (double) product of the
 *     rounded inputs (tests/unit/gemm_ref.h: (k + 2) eps (sum |a b| +
 *     |beta c|), which holds for fp32 sums in any order, and the dot
 *     product's pairs are fp32 additions of exact products), over the four
 *     transposes, row and column counts off the 8 x 32 tiles, odd k (the
 *     last pair half empty), k over several blocks of 256, beta 0 over a C
 *     of NaN (not read) and beta 1, padded leading dimensions (the padding
 *     untouched) and batches;
 *   - the same bits at 1 and 2 threads (the threads split C's rows; the
 *     order of each element's sums depends on the shape only);
 *   - a weight gradient's product with a long k is the sum of two parts
 *     products (cut_is_two_parts);
 *   - gemm_bias (its sums started from the bias) gives the bits of the
 *     bias rows written into C and gemm with beta 1 added to them, over a C
 *     of NaN, at one and several k blocks, both layouts of op(B). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "tests/unit/gemm_ref.h"
#include "tests/unit/test_rand.h"
#include "tests/unit/test_util.h"

#define PAD 12345.0f /* in the padding of C's rows: never written */

static float frand(void) { return test_frand(-1.0f, 1.0f); }

static float round_bf16(float x) { return ds_bf16_to_f32(ds_f32_to_bf16(x)); }

typedef struct dcase {
    int ta, tb, m, n, k, batch, pad;
    float beta;
} dcase;

/* Runs c on be; returns C (the caller frees it) after checking it against
 * the bound. */
static float *run_case(ds_backend *be, const dcase *c, int nt) {
    int arows = c->ta ? c->k : c->m, acols = c->ta ? c->m : c->k;
    int brows = c->tb ? c->n : c->k, bcols = c->tb ? c->k : c->n;
    int lda = acols + c->pad, ldb = bcols + c->pad, ldc = c->n + c->pad;
    int64_t sA = (int64_t)arows * lda, sB = (int64_t)brows * ldb, sC = (int64_t)c->m * ldc;
    size_t nA = (size_t)(sA * c->batch), nB = (size_t)(sB * c->batch), nC = (size_t)(sC * c->batch);
    float *A = malloc(nA * 4), *B = malloc(nB * 4), *Ar = malloc(nA * 4), *Br = malloc(nB * 4);
    float *C = malloc(nC * 4), *C0 = malloc(nC * 4);
    if (!A || !B || !Ar || !Br || !C || !C0) TEST_DIE("out of memory");
    for (size_t i = 0; i < nA; i++) Ar[i] = round_bf16(A[i] = frand());
    for (size_t i = 0; i < nB; i++) Br[i] = round_bf16(B[i] = frand());
    for (int64_t b = 0; b < c->batch; b++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < ldc; j++)
                C[b * sC + (int64_t)i * ldc + j] =
                    j >= c->n ? PAD : c->beta == 0.0f ? NAN : frand();
    memcpy(C0, C, nC * 4);
    CHECK_OK(be->ops->gemm(be, c->ta, c->tb, c->m, c->n, c->k, 1.0f, A, lda, sA, B, ldb, sB,
                           c->beta, C, ldc, sC, c->batch));
    int bad = 0;
    for (int64_t b = 0; b < c->batch; b++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < ldc; j++) {
                int64_t at = b * sC + (int64_t)i * ldc + j;
                if (j >= c->n) {
                    bad += C[at] != PAD;
                    continue;
                }
                double tol, want = gemm_ref_at(c->ta, c->tb, c->k, 1.0f, Ar + b * sA, lda,
                                               Br + b * sB, ldb, c->beta, C0[at], i, j, &tol);
                if (!(fabs((double)C[at] - want) <= tol) && bad++ < 3)
                    printf("  [%lld][%d][%d] = %.9g, want %.9g within %.3g\n", (long long)b, i,
                           j, C[at], want, tol);
            }
    CHECK(bad == 0, "ta %d tb %d %dx%dx%d batch %d pad %d beta %g, %d threads: %d elements off",
          c->ta, c->tb, c->m, c->n, c->k, c->batch, c->pad, c->beta, nt, bad);
    free(A), free(B), free(Ar), free(Br), free(C0);
    return C;
}

/* Whether the dot path computed: products reading inputs below 2^-126
 * (the dot path takes them as zero, the other paths as themselves): 2^-127,
 * and the largest fp32 value below 2^-126, which ds_f32_to_bf16 rounds up
 * to 2^-126 and the dot path's conversion takes as zero (cpu_gemm_dot.c).
 * n 100: a product only OpenBLAS would take otherwise; n 128 with several
 * products: one the own kernel would (attention's per-head products). */
static bool dot_ran(ds_backend *be, int n, int batch) {
    enum { M = 64, K = 64, NMAX = 128, BMAX = 4 };
    static float A[BMAX * M * K], B[K * NMAX], C[BMAX * M * NMAX];
    memset(A, 0, sizeof A);
    for (int j = 0; j < K * n; j++) B[j] = 1.0f;
    for (int b = 0; b < batch; b++) {
        A[b * M * K] = 0x1.0p-127f;         /* a bf16 subnormal, exact */
        A[b * M * K + 1] = 0x1.fffffcp-127f; /* fp32 0x007fffff */
    }
    CHECK_OK(be->ops->gemm(be, false, false, M, n, K, 1.0f, A, K, M * K, B, n, 0, 0.0f, C, n,
                           (int64_t)M * n, batch));
    bool zero = true;
    for (int b = 0; b < batch; b++) zero = zero && C[(int64_t)b * M * n] == 0.0f;
    return zero;
}

/* C = A I and C = I A for A holding every exponent from 2^-126 to 2^126,
 * both signs, and mantissas around the halfway points of the rounding (low
 * 16 bits 0x7fff, 0x8000, 0x8001 with the kept bit odd and even, 0 and
 * 0xffff): each element of C is one of A's rounded values alone (the other
 * products are zeros), which must be ds_f32_to_bf16's. Each product also
 * with both operands transposed as stored, so that A goes through all four
 * packs (op(A) and op(B), either storage). */
static void conversion_is_the_rounding(ds_backend *be) {
    enum { N = 64 };
    static const uint32_t low[] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff,
                                   0x17fff, 0x18000, 0x18001};
    static float A[N * N], I[N * N], C[N * N];
    for (int i = 0; i < N * N; i++) {
        I[i] = (i / N == i % N) ? 1.0f : 0.0f;
        /* 16 values per exponent (8 patterns x 2 signs), exponents 1..253
         * (254 would round to inf at its top, and inf x 0 is NaN) */
        uint32_t e = 1 + (uint32_t)(i / 16), pat = low[i % 8], sign = (i / 8) % 2;
        if (e > 253) e = 253;
        uint32_t u = sign << 31 | e << 23 | ((uint32_t)i * 2654435761u & 0x7e0000u) | pat;
        memcpy(&A[i], &u, 4);
    }
    int bad = 0, checked = 0;
    for (int t = 0; t < 4; t++) {
        /* t & 1: both read transposed; t & 2: A on the right (C = I A) */
        const bool tr = t & 1, right = t & 2;
        CHECK_OK(be->ops->gemm(be, tr, tr, N, N, N, 1.0f, right ? I : A, N, 0, right ? A : I, N,
                               0, 0.0f, C, N, 0, 1));
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                /* C = op(A) or its place: A (i, j), or A (j, i) when read transposed */
                float a = tr ? A[j * N + i] : A[i * N + j];
                checked++;
                if (C[i * N + j] != round_bf16(a) && bad++ < 3)
                    printf("  t %d: bf16(%a) = %a here, %a by ds_f32_to_bf16\n", t, (double)a,
                           (double)C[i * N + j], (double)round_bf16(a));
            }
    }
    CHECK(bad == 0, "the dot path's conversion differs from ds_f32_to_bf16 for %d of %d values",
          bad, checked);
}

/* gemm_bias against the bias rows, then gemm with beta 1, bit for bit.
 * Over one k block the bias is the first term of every sum either way;
 * over several (k 700) the first block's sums start from it. */
static void bias_is_the_rows(ds_backend *be, int nt) {
    static const int shapes[][4] = {/* tb, m, n, k */
                                    {1, 300, 260, 191}, {1, 129, 97, 700}, {0, 77, 130, 256},
                                    {0, 8, 33, 513}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int tb = shapes[s][0], m = shapes[s][1], n = shapes[s][2], k = shapes[s][3];
        float *A = test_frand_buf((size_t)m * k, -1.0f, 1.0f);
        float *B = test_frand_buf((size_t)k * n, -1.0f, 1.0f);
        float *bias = test_frand_buf((size_t)n, -4.0f, 4.0f);
        float *C = malloc((size_t)m * n * 4), *C0 = malloc((size_t)m * n * 4);
        if (!C || !C0) TEST_DIE("out of memory");
        for (size_t i = 0; i < (size_t)m * n; i++) C[i] = NAN;
        for (int i = 0; i < m; i++) memcpy(C0 + (size_t)i * n, bias, (size_t)n * 4);
        CHECK_OK(be->ops->gemm_bias(be, false, tb, m, n, k, A, k, B, tb ? k : n, bias, C));
        CHECK_OK(be->ops->gemm(be, false, tb, m, n, k, 1.0f, A, k, 0, B, tb ? k : n, 0, 1.0f, C0,
                               n, 0, 1));
        CHECK(memcmp(C, C0, (size_t)m * n * 4) == 0,
              "gemm_bias tb %d %dx%dx%d, %d threads: not the bits of the bias rows + gemm", tb, m,
              n, k, nt);
        free(A), free(B), free(bias), free(C), free(C0);
    }
}

/* A weight gradient's product with k >= 2048 and 4 times C's larger side
 * is computed in two parts, k cut at kh = k / 2 rounded up to 256
 * (cpu_gemm_dot.c, cut_at): its bits are those of the first part's
 * product (with beta), the second part's with beta 0, added in fp32 (the
 * shapes are chosen so that neither part alone is cut again: the
 * reference computes them through the same slot), at 1, 2 and 3 threads (3: the parts
 * in turn, each over the threads; 2: a part per thread at once). A kernel
 * that cut a block earlier fails (two of the shapes), as does one that
 * drops a column of the second part. With the backend's gemm_no_cut the
 * product is not cut: other bits. */
static void cut_is_two_parts(ds_backend *const *be, int nbe) {
    static const int shapes[][4] = {{200, 140, 2100, 1}, {96, 64, 3500, 0}, {256, 1024, 4096, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], kh = (k / 2 + 255) / 256 * 256;
        const float beta = shapes[s][3] ? 1.0f : 0.0f;
        float *A = malloc((size_t)k * m * 4), *B = malloc((size_t)k * n * 4);
        float *C0 = malloc((size_t)m * n * 4), *want = malloc((size_t)m * n * 4);
        float *T = malloc((size_t)m * n * 4), *C = malloc((size_t)m * n * 4);
        if (!A || !B || !C0 || !want || !T || !C) TEST_DIE("out of memory");
        for (size_t i = 0; i < (size_t)k * m; i++) A[i] = frand();
        for (size_t i = 0; i < (size_t)k * n; i++) B[i] = frand();
        for (size_t i = 0; i < (size_t)m * n; i++) C0[i] = frand();
        memcpy(want, C0, (size_t)m * n * 4);
        CHECK_OK(be[0]->ops->gemm(be[0], true, false, m, n, kh, 1.0f, A, m, 0, B, n, 0, beta, want,
                                  n, 0, 1));
        CHECK_OK(be[0]->ops->gemm(be[0], true, false, m, n, k - kh, 1.0f, A + (size_t)kh * m, m,
                                  0, B + (size_t)kh * n, n, 0, 0.0f, T, n, 0, 1));
        for (size_t i = 0; i < (size_t)m * n; i++) want[i] += T[i];
        for (int t = 0; t < nbe; t++) {
            memcpy(C, C0, (size_t)m * n * 4);
            CHECK_OK(be[t]->ops->gemm(be[t], true, false, m, n, k, 1.0f, A, m, 0, B, n, 0, beta,
                                      C, n, 0, 1));
            CHECK(memcmp(C, want, (size_t)m * n * 4) == 0,
                  "%dx%dx%d beta %g, %d threads: not the bits of the parts k < %d and k >= %d "
                  "added", m, n, k, (double)beta, be[t]->num_threads, kh, kh);
        }
        /* gemm_no_cut (bench_train --cut ab) computes the product uncut:
         * one sum over all of k's blocks, other bits */
        be[0]->gemm_no_cut = true;
        memcpy(C, C0, (size_t)m * n * 4);
        CHECK_OK(be[0]->ops->gemm(be[0], true, false, m, n, k, 1.0f, A, m, 0, B, n, 0, beta, C,
                                  n, 0, 1));
        be[0]->gemm_no_cut = false;
        CHECK(memcmp(C, want, (size_t)m * n * 4) != 0,
              "%dx%dx%d: gemm_no_cut set, and still the bits of the cut", m, n, k);
        free(A), free(B), free(C0), free(want), free(T), free(C);
    }
}

int main(void) {
    ds_backend *be[2] = {test_cpu_backend(1, NULL), test_cpu_backend(2, NULL)};
    for (int t = 0; t < 2; t++) REQUIRE_OK(ds_backend_set_gemm_inputs(be[t], DS_BF16));
    const char *off = getenv("DS_CPU_BF16_DOT");
    if (strcmp(be[0]->ops->name, "cpu/avx512") || !__builtin_cpu_supports("avx512bf16") ||
        (off && (!strcmp(off, "0") || !strcmp(off, "off")))) {
        printf("test_gemm_dot: skipped: the kernels are %s, the CPU %s AVX512-BF16%s\n",
               be[0]->ops->name, __builtin_cpu_supports("avx512bf16") ? "has" : "lacks",
               off ? " (DS_CPU_BF16_DOT set)" : "");
        ds_backend_destroy(be[0]), ds_backend_destroy(be[1]);
        return 77;
    }
    for (int t = 0; t < 2; t++) {
        CHECK(dot_ran(be[t], 100, 1), "%d threads: a bf16 subnormal input was not taken as "
              "zero: the dot-product path did not run", t + 1);
        CHECK(dot_ran(be[t], 128, 4), "%d threads, small products: a bf16 subnormal input was "
              "not taken as zero: the dot-product path did not run", t + 1);
    }
    conversion_is_the_rounding(be[0]);
    ds_backend *three = test_cpu_backend(3, NULL);
    REQUIRE_OK(ds_backend_set_gemm_inputs(three, DS_BF16));
    ds_backend *const cut_be[] = {be[0], be[1], three};
    cut_is_two_parts(cut_be, 3);
    ds_backend_destroy(three);
    bias_is_the_rows(be[0], 1);
    bias_is_the_rows(be[1], 2);
    static const dcase cases[] = {
        {0, 0, 300, 260, 191, 1, 0, 0.0f}, {0, 1, 300, 260, 191, 1, 0, 0.0f},
        {1, 0, 300, 260, 191, 1, 0, 0.0f}, {1, 1, 300, 260, 191, 1, 0, 0.0f},
        {0, 1, 129, 97, 700, 1, 3, 1.0f},  /* three k blocks, C added to */
        {1, 0, 7, 33, 513, 2, 5, 0.0f},    /* one tile of 7 rows, batches */
        {1, 1, 64, 1000, 96, 1, 1, 1.0f},  /* many column panels */
        {0, 0, 1024, 64, 256, 1, 0, 0.0f}, /* the rows over both threads */
        /* A and B read in runs a stride apart (a weight gradient's layout):
         * several row blocks of A by several k blocks, the last pairs of a
         * block dealt short, B's panels in two pieces */
        {1, 0, 520, 300, 600, 1, 2, 1.0f},
        /* attention's per-head products (the own kernel's shapes without the
         * instruction): a thread per product at 2 threads, and 3 products
         * over 2 threads, which share each product instead */
        {0, 1, 128, 128, 64, 8, 0, 0.0f}, {1, 0, 128, 64, 128, 3, 4, 0.0f},
        /* weight gradients whose k is cut in two parts (cut_is_two_parts) */
        {1, 0, 200, 140, 2100, 1, 3, 1.0f}, {1, 0, 96, 64, 3500, 1, 0, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        test_rand_seed(0x452821e638d01377ull + i);
        float *c1 = run_case(be[0], &cases[i], 1);
        test_rand_seed(0x452821e638d01377ull + i); /* the same inputs */
        float *c2 = run_case(be[1], &cases[i], 2);
        const dcase *c = &cases[i];
        size_t nC = (size_t)c->m * (size_t)(c->n + c->pad) * (size_t)c->batch;
        CHECK(memcmp(c1, c2, nC * 4) == 0, "ta %d tb %d %dx%dx%d: 1 and 2 threads differ", c->ta,
              c->tb, c->m, c->n, c->k);
        free(c1), free(c2);
    }
    ds_backend_destroy(be[0]), ds_backend_destroy(be[1]);
    return test_finish("test_gemm_dot");
}
