/* SGEMM throughput of the cpu backend on BERT-mini shapes (hidden 256,
 * intermediate 1024, 4 heads of 64, 32 sequences of 128 tokens), at 1 and 2
 * threads, beside the machine's measured FMA peak.
 *
 *   bench_gemm [seconds_per_case]      (default 0.5)
 *
 * Shapes (row-major, C[m x n] = A[m x k] B[k x n], B transposed as a linear
 * layer stores it):
 *   qkv/out proj   4096 x 256  x 256     tokens x hidden x hidden
 *   ffn up         4096 x 1024 x 256
 *   ffn down       4096 x 256  x 1024
 *   dW             256  x 256  x 4096    (A^T dY: the weight gradient)
 *   attn scores    128 x 128 x 64, batch 128   (Q K^T per (sequence, head))
 *   attn context   128 x 64 x 128, batch 128   (P V)
 * For the batched cases the table also shows the other strategy -- one GEMM
 * after another, each split by OpenBLAS over the threads -- against the
 * backend's choice, which is what DS_CPU_GEMM_SMALL_FLOPS (cpu_ops.h)
 * rests on.
 *
 * Peak: the FMA throughput measured with independent vector FMAs (AVX2 and,
 * where the CPU has it, AVX-512) on the same threads: the ceiling no GEMM
 * can pass. "of peak" compares with the vector width of the kernel OpenBLAS
 * picked (printed): 0.3.21 picks by CPU model and takes this machine's AMD
 * AVX-512 CPU for Haswell (AVX2); OPENBLAS_CORETYPE=SkylakeX in the
 * environment forces its AVX-512 kernel. */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend/backend.h"

char *openblas_get_corename(void);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- FMA peak: 12 independent accumulators in registers hide the FMA
 * latency (4 cycles x 2 pipes needs at least 8) ---- */

#define PEAK_ITERS 20000000L
#define FMA12(F, x, y)                                                                           \
    a0 = F(a0, x, y), a1 = F(a1, x, y), a2 = F(a2, x, y), a3 = F(a3, x, y), a4 = F(a4, x, y),   \
    a5 = F(a5, x, y), a6 = F(a6, x, y), a7 = F(a7, x, y), a8 = F(a8, x, y), a9 = F(a9, x, y),   \
    a10 = F(a10, x, y), a11 = F(a11, x, y)

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
           a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    for (long it = 0; it < iters; it++) {
        FMA12(_mm256_fmadd_ps, x, y);
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
           a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    for (long it = 0; it < iters; it++) {
        FMA12(_mm512_fmadd_ps, x, y);
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

/* GFLOP/s of `threads` cores running FMAs of `width` floats: the best of 5
 * runs of ~40 ms, since other processes on a shared machine only slow it. */
static double fma_peak(int threads, int width) {
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        volatile float sink = 0;
        double t0 = now();
#pragma omp parallel num_threads(threads)
        {
            float r = width == 16 ? fma_avx512(PEAK_ITERS) : fma_avx2(PEAK_ITERS);
#pragma omp atomic
            sink += r;
        }
        double dt = now() - t0;
        (void)sink;
        double gf = 2.0 * width * 12.0 * PEAK_ITERS * threads / dt / 1e9;
        if (gf > best) best = gf;
    }
    return best;
}

/* ---- GEMM cases ---- */

typedef struct shape {
    const char *name;
    int m, n, k, batch;
    bool ta, tb;
} shape;

static const shape k_shapes[] = {
    {"qkv/out proj", 4096, 256, 256, 1, false, true},
    {"ffn up", 4096, 1024, 256, 1, false, true},
    {"ffn down", 4096, 256, 1024, 1, false, true},
    {"dW = X^T dY", 256, 256, 4096, 1, true, false},
    {"attn scores", 128, 128, 64, 128, false, true},
    {"attn context", 128, 64, 128, 128, false, false},
};

static void fill(float *x, size_t n) {
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
}

/* Runs `fn` until `secs` have passed (after one warm-up); seconds per call. */
typedef struct gemm_args {
    ds_backend *be;
    const shape *s;
    float *A, *B, *C;
    int lda, ldb, ldc;
    int64_t sA, sB, sC;
} gemm_args;

static void call_backend(const gemm_args *g) {
    const shape *s = g->s;
    ds_status st = g->be->ops->gemm(g->be, s->ta, s->tb, s->m, s->n, s->k, 1.0f, g->A, g->lda,
                                    g->sA, g->B, g->ldb, g->sB, 0.0f, g->C, g->ldc, g->sC,
                                    s->batch);
    if (st != DS_OK) {
        fprintf(stderr, "gemm failed: %s\n", ds_last_error());
        exit(1);
    }
}

/* The alternative for batches: one cblas_sgemm after another, each split
 * over all threads by OpenBLAS. */
static void call_sequential(const gemm_args *g) {
    const shape *s = g->s;
    for (int b = 0; b < s->batch; b++)
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1.0f, g->A + b * g->sA,
                    g->lda, g->B + b * g->sB, g->ldb, 0.0f, g->C + b * g->sC, g->ldc);
}

static double time_it(void (*fn)(const gemm_args *), const gemm_args *g, double secs) {
    fn(g);
    int reps = 0;
    double t0 = now(), dt;
    do {
        fn(g);
        reps++;
        dt = now() - t0;
    } while (dt < secs);
    return dt / reps;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    if (secs <= 0) {
        fprintf(stderr, "usage: bench_gemm [seconds_per_case > 0]\n");
        return 2;
    }
    int has512 = __builtin_cpu_supports("avx512f");
    /* the kernels OpenBLAS 0.3.21 has with AVX-512 */
    const char *core = openblas_get_corename();
    int blas512 = has512 && (strstr(core, "SkylakeX") || strstr(core, "Cooperlake") ||
                             strstr(core, "SapphireRapids"));
    printf("bench_gemm: OpenBLAS kernel %s (%s); %.2g s per case\n", core,
           blas512 ? "AVX-512" : "AVX2", secs);

    for (int nt = 1; nt <= 2; nt++) {
        ds_backend_desc d = {.kind = DS_BACKEND_CPU, .num_threads = nt};
        ds_backend *be = NULL;
        if (ds_backend_create(&d, &be) != DS_OK) {
            fprintf(stderr, "backend: %s\n", ds_last_error());
            return 1;
        }
        double p256 = fma_peak(nt, 8), p512 = has512 ? fma_peak(nt, 16) : 0.0;
        printf("\n%d thread%s: FMA peak %.1f GFLOP/s (AVX2)", nt, nt > 1 ? "s" : "", p256);
        if (has512) printf(", %.1f GFLOP/s (AVX-512)", p512);
        double peak = blas512 ? p512 : p256;
        printf("\n%-14s %6s %6s %6s %5s %10s %8s %s\n", "case", "m", "n", "k", "batch", "GFLOP/s",
               "of peak", nt > 1 ? "  one GEMM after another" : "");
        for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
            const shape *s = &k_shapes[i];
            gemm_args g = {.be = be, .s = s};
            g.lda = s->ta ? s->m : s->k;
            g.ldb = s->tb ? s->k : s->n;
            g.ldc = s->n;
            g.sA = (int64_t)s->m * s->k;
            g.sB = (int64_t)s->k * s->n;
            g.sC = (int64_t)s->m * s->n;
            size_t nA = (size_t)g.sA * s->batch, nB = (size_t)g.sB * s->batch,
                   nC = (size_t)g.sC * s->batch;
            g.A = malloc(nA * sizeof(float));
            g.B = malloc(nB * sizeof(float));
            g.C = malloc(nC * sizeof(float));
            fill(g.A, nA);
            fill(g.B, nB);
            memset(g.C, 0, nC * sizeof(float));
            double flops = 2.0 * s->m * s->n * s->k * s->batch;
            double gf = flops / time_it(call_backend, &g, secs) / 1e9;
            printf("%-14s %6d %6d %6d %5d %10.1f %7.0f%%", s->name, s->m, s->n, s->k, s->batch, gf,
                   100.0 * gf / peak);
            if (s->batch > 1 && nt > 1) {
                double gs = flops / time_it(call_sequential, &g, secs) / 1e9;
                printf(" %9.1f GF/s", gs);
            }
            printf("\n");
            free(g.A);
            free(g.B);
            free(g.C);
        }
        ds_backend_destroy(be);
    }
    return 0;
}
