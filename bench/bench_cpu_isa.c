/* AdamW of the cpu backend under each instruction-set variant of its kernels
 * (engine/backend/cpu/cpu_isa.h) against hand-vectorised AVX2 and AVX-512
 * loops written here with intrinsics, in the same run (issue 14 item 6: at
 * least 0.9x the hand-written loop). Also the vectorised element math
 * (ds_cpu_vmath: exp, GELU) per variant, in G elements/s.
 *
 *   bench/bench_cpu_isa [--n 100000000] [--threads 2] [--reps 7]
 *
 * Each repetition times one AdamW step of n fp32 parameters (fp32 gradients,
 * moments m and v) for every contender in turn, so drift of the machine hits
 * all alike; the median over the repetitions is printed in G params/s, with
 * the bytes moved (p, g, m, v read, p, m, v written: 28 bytes a parameter) as
 * GB/s. The hand loops do the textbook AdamW (g *= mult; p *= 1 - lr wd;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g; p += -lr/bc1 m / (sqrt(v)/
 * sqrt(bc2) + eps)) with the same roundings as the engine's ds_adam_update,
 * split over the threads in the same chunks; the line "same bits" says
 * whether their parameters equal the engine's after the run. A variant or a
 * hand loop this CPU cannot run is listed as skipped.
 *
 *   OPENBLAS_CORETYPE=Haswell bench/bench_cpu_isa --gemm-hash
 *
 * prints only OpenBLAS's kernel name and a hash of the bits of one
 * 384 x 320 x 1000 sgemm (1 thread): run under several OPENBLAS_CORETYPE
 * values, it shows whether OpenBLAS's kernels round alike (they do not). */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/math.h"

#define CHUNK 2048 /* the engine's DS_CPU_CHUNK */

/* ---- the hand-vectorised loops ---- */

__attribute__((target("avx2,fma"))) static void adam_avx2(float *p, const float *g, float *m,
                                                          float *v, size_t n,
                                                          const ds_adam_coef *c) {
    const __m256 mult = _mm256_set1_ps(c->grad_mult), decay = _mm256_set1_ps(c->decay);
    const __m256 b1 = _mm256_set1_ps(c->beta1), omb1 = _mm256_set1_ps(c->one_minus_beta1);
    const __m256 b2 = _mm256_set1_ps(c->beta2), omb2 = _mm256_set1_ps(c->one_minus_beta2);
    const __m256 bc2 = _mm256_set1_ps(c->bc2_sqrt), eps = _mm256_set1_ps(c->eps);
    const __m256 nss = _mm256_set1_ps(c->neg_step_size);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gg = _mm256_mul_ps(_mm256_loadu_ps(g + i), mult);
        __m256 w = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
        __m256 mm = _mm256_fmadd_ps(omb1, gg, _mm256_mul_ps(b1, _mm256_loadu_ps(m + i)));
        __m256 vv = _mm256_fmadd_ps(_mm256_mul_ps(omb2, gg), gg,
                                    _mm256_mul_ps(b2, _mm256_loadu_ps(v + i)));
        __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2), eps);
        w = _mm256_add_ps(w, _mm256_div_ps(_mm256_mul_ps(nss, mm), den));
        _mm256_storeu_ps(m + i, mm);
        _mm256_storeu_ps(v + i, vv);
        _mm256_storeu_ps(p + i, w);
    }
    for (; i < n; i++) ds_adam_update(&p[i], &m[i], &v[i], g[i], c);
}

__attribute__((target("avx512f"))) static void adam_avx512(float *p, const float *g, float *m,
                                                           float *v, size_t n,
                                                           const ds_adam_coef *c) {
    const __m512 mult = _mm512_set1_ps(c->grad_mult), decay = _mm512_set1_ps(c->decay);
    const __m512 b1 = _mm512_set1_ps(c->beta1), omb1 = _mm512_set1_ps(c->one_minus_beta1);
    const __m512 b2 = _mm512_set1_ps(c->beta2), omb2 = _mm512_set1_ps(c->one_minus_beta2);
    const __m512 bc2 = _mm512_set1_ps(c->bc2_sqrt), eps = _mm512_set1_ps(c->eps);
    const __m512 nss = _mm512_set1_ps(c->neg_step_size);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gg = _mm512_mul_ps(_mm512_loadu_ps(g + i), mult);
        __m512 w = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay);
        __m512 mm = _mm512_fmadd_ps(omb1, gg, _mm512_mul_ps(b1, _mm512_loadu_ps(m + i)));
        __m512 vv = _mm512_fmadd_ps(_mm512_mul_ps(omb2, gg), gg,
                                    _mm512_mul_ps(b2, _mm512_loadu_ps(v + i)));
        __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2), eps);
        w = _mm512_add_ps(w, _mm512_div_ps(_mm512_mul_ps(nss, mm), den));
        _mm512_storeu_ps(m + i, mm);
        _mm512_storeu_ps(v + i, vv);
        _mm512_storeu_ps(p + i, w);
    }
    for (; i < n; i++) ds_adam_update(&p[i], &m[i], &v[i], g[i], c);
}

typedef void (*hand_fn)(float *, const float *, float *, float *, size_t, const ds_adam_coef *);

/* The hand loop over the threads, in the engine's chunks and schedule. */
static void hand_step(hand_fn fn, int nt, float *p, const float *g, float *m, float *v, size_t n,
                      const ds_adam_coef *c) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t ch = 0; ch < nchunks; ch++) {
        size_t lo = ch * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
        fn(p + lo, g + lo, m + lo, v + lo, len, c);
    }
}

/* ---- the contenders ---- */

typedef struct state {
    float *p, *g, *m, *v;
} state;

static void state_init(state *s, size_t n, int nt) {
    s->p = aligned_alloc(4096, n * 4), s->g = aligned_alloc(4096, n * 4);
    s->m = aligned_alloc(4096, n * 4), s->v = aligned_alloc(4096, n * 4);
    if (!s->p || !s->g || !s->m || !s->v) {
        fprintf(stderr, "bench_cpu_isa: out of memory for %zu parameters\n", n);
        exit(1);
    }
    /* first touch by the threads that will use the pages */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        s->p[i] = 0.01f * (float)((i * 2654435761u) % 1000) - 5.0f;
        s->g[i] = 1e-3f * (float)((i * 40503u) % 2001) - 1.0f;
        s->m[i] = 0.0f;
        s->v[i] = 0.0f;
    }
}

enum { MAXC = 8 };

/* FNV-1a of one sgemm's output bits, with OpenBLAS's kernel name. */
static int gemm_hash(void) {
    enum { M = 384, N = 320, K = 1000 };
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N);
    if (!A || !B || !C) return 1;
    uint64_t s = 1;
    for (int i = 0; i < M * K; i++) {
        s = s * 6364136223846793005ull + 1;
        A[i] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < K * N; i++) {
        s = s * 6364136223846793005ull + 1;
        B[i] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f;
    }
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)C;
    for (size_t i = 0; i < sizeof(float) * M * N; i++) h = (h ^ p[i]) * 1099511628211ull;
    printf("OpenBLAS kernel %s: sgemm %dx%dx%d bits hash %016llx, C[7] = %.9g\n",
           openblas_get_corename(), M, N, K, (unsigned long long)h, (double)C[7]);
    free(A), free(B), free(C);
    return 0;
}

int main(int argc, char **argv) {
    size_t n = 100000000;
    int nt = 2, reps = 7;
    if (argc == 2 && !strcmp(argv[1], "--gemm-hash")) return gemm_hash();
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = (size_t)atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_cpu_isa [--n N] [--threads T] [--reps R]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || nt < 1 || n < 1) {
        fprintf(stderr, "bench_cpu_isa: bad --n, --threads or --reps\n");
        return 2;
    }
    __builtin_cpu_init();
    const char *name[MAXC];
    ds_backend *be[MAXC] = {0};
    hand_fn hand[MAXC] = {0};
    int nc = 0;
    for (int i = 0; ds_cpu_isa_names[i] && nc < MAXC; i++) {
        const char *isa = ds_cpu_isa_names[i];
        if (!ds_cpu_variant_find(isa)) {
            printf("engine %s: skipped (this CPU lacks its instructions)\n", isa);
            continue;
        }
        setenv("DS_CPU_ISA", isa, 1);
        ds_backend_desc d = {.kind = DS_BACKEND_CPU, .num_threads = nt};
        if (ds_backend_create(&d, &be[nc]) != DS_OK) {
            fprintf(stderr, "bench_cpu_isa: %s\n", ds_last_error());
            return 1;
        }
        name[nc] = be[nc]->ops->name;
        nc++;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        hand[nc] = adam_avx2, name[nc++] = "hand AVX2+FMA";
    } else {
        printf("hand AVX2+FMA: skipped (no AVX2/FMA)\n");
    }
    if (__builtin_cpu_supports("avx512f")) {
        hand[nc] = adam_avx512, name[nc++] = "hand AVX-512";
    } else {
        printf("hand AVX-512: skipped (no AVX-512F)\n");
    }

    state st[MAXC];
    for (int c = 0; c < nc; c++) state_init(&st[c], n, nt);
    ds_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .weight_decay = 0.01f, .adam_w_mode = true, .bias_correction = true};
    double t[MAXC][64];
    for (int r = 0; r < reps; r++) {
        hp.step = r + 1;
        ds_adam_coef coef = ds_adam_coef_make(hp.lr, hp.beta1, hp.beta2, hp.eps,
                                              hp.weight_decay, hp.step, true, true, 1.0f);
        for (int c = 0; c < nc; c++) {
            double t0 = now_s();
            if (be[c]) {
                if (be[c]->ops->adam(be[c], st[c].p, st[c].g, DS_F32, 1.0f, st[c].m, st[c].v, n,
                                     &hp, NULL, DS_F32) != DS_OK) {
                    fprintf(stderr, "bench_cpu_isa: %s\n", ds_last_error());
                    return 1;
                }
            } else {
                hand_step(hand[c], nt, st[c].p, st[c].g, st[c].m, st[c].v, n, &coef);
            }
            t[c][r] = now_s() - t0;
        }
    }
    printf("AdamW, %zu fp32 parameters, %d threads, median of %d steps (28 bytes a parameter):\n",
           n, nt, reps);
    double best_hand = 0;
    double med[MAXC];
    for (int c = 0; c < nc; c++) {
        med[c] = median_sort(t[c], reps);
        if (!be[c] && n / med[c] > best_hand) best_hand = (double)n / med[c];
    }
    for (int c = 0; c < nc; c++) {
        double gps = (double)n / med[c] / 1e9;
        printf("  %-16s %7.1f ms  %6.3f G params/s  %6.1f GB/s", name[c], med[c] * 1e3, gps,
               28.0 * n / med[c] / 1e9);
        if (best_hand > 0) printf("  %.2fx the best hand loop", (double)n / med[c] / best_hand);
        int same = memcmp(st[c].p, st[0].p, n * 4) == 0;
        printf("  %s\n", c == 0 ? "(bits: reference)" : same ? "same bits" : "bits differ");
    }

    /* element math per variant, single thread, 4M elements in [-8, 8] */
    size_t ne = (size_t)1 << 22;
    float *x = malloc(ne * 4), *y = malloc(ne * 4);
    if (!x || !y) return 1;
    for (size_t i = 0; i < ne; i++) x[i] = -8.0f + 16.0f * (float)i / (float)ne;
    static const struct {
        const char *name;
        ds_vmath_fn fn;
    } fns[] = {{"expf", DS_VMATH_EXP}, {"gelu", DS_VMATH_GELU},
               {"gelu_grad", DS_VMATH_GELU_GRAD}, {"gelu_tanh", DS_VMATH_GELU_TANH}};
    printf("element math, 1 thread, %zu elements, G elements/s (best of 5):\n", ne);
    for (int i = 0; ds_cpu_isa_names[i]; i++) {
        const ds_cpu_variant *var = ds_cpu_variant_find(ds_cpu_isa_names[i]);
        if (!var) continue;
        printf("  %-8s", var->isa);
        for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                double t0 = now_s();
                var->vmath(fns[f].fn, y, x, ne);
                double dt = now_s() - t0;
                if (dt < best) best = dt;
            }
            printf("  %s %6.3f", fns[f].name, (double)ne / best / 1e9);
        }
        printf("\n");
    }
    free(x), free(y);
    for (int c = 0; c < nc; c++) {
        free(st[c].p), free(st[c].g), free(st[c].m), free(st[c].v);
        ds_backend_destroy(be[c]);
    }
    return 0;
}
