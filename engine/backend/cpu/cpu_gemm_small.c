/* The gemm slot of one instruction-set variant: small products (attention's
 * per-head 128 x 128 x 64 blocks) in a kernel of our own, everything else in
 * OpenBLAS (ds_cpu_gemm, cpu_backend.c).
 *
 * Why. OpenBLAS packs both operands of every call into its panel layout and,
 * for beta = 0, first clears C in a separate pass (sgemm_beta + memset). For
 * a 128 x 128 x 64 product that is 4.5 + 2.1 points of the BERT-mini step's
 * 12.0 (bench/RESULTS.md, "where the packing goes"). Here B is copied once
 * per product into a contiguous panel of at most 64 columns (for a transposed
 * B this is the transpose OpenBLAS would do too), A is read in place (one
 * element broadcast per row and k; a transposed A is copied a few rows at a
 * time, see gs_product), and C is written once from registers. At 1 thread
 * on an AVX-512 host the attention shapes ran 1.2-1.6x OpenBLAS's rate in
 * the same run (bench/bench_kernels, RESULTS "issue 17").
 *
 * Which calls. alpha = 1, beta = 0 (C written, as every attention product
 * and forward linear calls it), n a multiple of 16, 1 <= k <= GS_KMAX and at
 * most DS_CPU_GEMM_SMALL_FLOPS per product. The test depends on the shape
 * only, never on the variant or the thread count, so a call takes the same
 * path (and gives the same bits) under every variant and thread count.
 *
 * Same bits. Element (i, j) of C is c = fma(A(i,p), B(p,j), c) for
 * p = 0, 1, ..., k-1 from c = 0, one lane per element: the vector width and
 * the tiling decide which lanes run together, never the order of an
 * element's own operations. The avx512 and avx2 variants use their FMA
 * instructions; the scalar variant calls fmaf (exactly rounded), which is
 * the same arithmetic, and does so only when the CPU has FMA instructions
 * (a libm call then, slow but only what DS_CPU_ISA=scalar asks for in
 * tests); a CPU without them runs the scalar variant alone, where software
 * fmaf would cost more than OpenBLAS, so there every call goes to OpenBLAS.
 * tests/unit/test_backend_gemm.c checks the result against double
 * precision and test_cpu_isa the bits across the variants.
 *
 * bf16 inputs (be->gemm_inputs DS_BF16, cpu_gemm_bf16.c). B always goes
 * through the panel and a transposed A through blocks of GS_AROWS rows, so
 * ds_cpu_gemm_small_bf16 rounds them there; an untransposed A, read in place
 * for fp32, is copied a block at a time too (rows k apart), rounded. The
 * products then see exactly the rounded values a separate pass would give:
 * the same bits (test_backend_gemm_bf16), with no pass over A and B and no
 * scratch. Attention's score products of 128 x 128 x 64 cost 1.19x their
 * fp32 time this way, 1.36x with the pass (1 thread, bench/RESULTS.md).
 * On a CPU with AVX512-BF16 the avx512 variant sends bf16-input products to
 * the dot product instead (cpu_gemm_dot.c), these included. */
#include <math.h>
#include <omp.h>
#include <stdbool.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/math.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Vector type, width (floats) and tile: MR rows x NV vectors of C in
 * registers (avx512: 16 zmm accumulators of the 32; avx2: 12 ymm of 16). */
#if defined(__AVX512F__)
typedef __m512 gs_vec;
#define GS_VW 16
#define GS_MR 4
#define GS_NV 4
#define gs_zero() _mm512_setzero_ps()
#define gs_load(p) _mm512_loadu_ps(p)
#define gs_store(p, v) _mm512_storeu_ps((p), (v))
#define gs_bcast(x) _mm512_set1_ps(x)
#define gs_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define GS_HW_FMA 1
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 gs_vec;
#define GS_VW 8
#define GS_MR 6
#define GS_NV 2
#define gs_zero() _mm256_setzero_ps()
#define gs_load(p) _mm256_loadu_ps(p)
#define gs_store(p, v) _mm256_storeu_ps((p), (v))
#define gs_bcast(x) _mm256_set1_ps(x)
#define gs_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define GS_HW_FMA 1
#else
typedef float gs_vec;
#define GS_VW 1
#define GS_MR 4
#define GS_NV 4
#define gs_zero() 0.0f
#define gs_load(p) (*(p))
#define gs_store(p, v) (*(p) = (v))
#define gs_bcast(x) (x)
#define gs_fma(a, b, c) fmaf((a), (b), (c))
#define GS_HW_FMA 0
#endif

/* bf16 inputs (cpu_gemm_bf16.c): the products of this kernel read A and B
 * through copies (the panel of B, blocks of A) that can round as they copy,
 * so a bf16-input product needs no pass of its own. gs_round is
 * ds_round_bf16 on a vector, in the integer operations of cpu_ops.h's
 * ds_cpu_bf16_round_bits (test_backend_gemm_bf16 and test_cpu_isa check the bits). */
#if defined(__AVX512F__)
static inline gs_vec gs_round(gs_vec v) {
    const __m512i u = _mm512_castps_si512(v), hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), hi);
    __m512i q = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, q));
}
#endif
#if defined(__AVX2__)
static inline __m256 gs_round8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v), hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), hi);
    __m256i q = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), hi);
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(q),
                            _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
#if !defined(__AVX512F__)
static inline gs_vec gs_round(gs_vec v) { return gs_round8(v); }
#endif
#endif
#if !defined(__AVX2__)
static inline gs_vec gs_round(gs_vec v) { return ds_round_bf16(v); }
#endif

/* Columns of B per packed panel, and the longest k a panel holds: 64 x 256
 * floats, 64 KiB on the stack of the thread that runs the product. */
#define GS_NC 64
#define GS_KMAX 256

/* C[mr x nv*GS_VW] = A[mr rows] * Bp, A(r, p) = a[r * ars + p * aks], Bp
 * row p at bp + p * GS_NC. mr and nv are constants where it is inlined, so
 * the accumulators live in registers. */
static inline __attribute__((always_inline)) void gs_tile(int mr, int nv, int k, const float *a,
                                                          int64_t ars, int64_t aks,
                                                          const float *bp, float *c, int64_t ldc) {
    gs_vec acc[GS_MR][GS_NV];
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) acc[r][v] = gs_zero();
    for (int p = 0; p < k; p++) {
        const float *b = bp + (size_t)p * GS_NC;
        gs_vec bv[GS_NV];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) bv[v] = gs_load(b + v * GS_VW);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            gs_vec ar = gs_bcast(a[r * ars + p * aks]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = gs_fma(ar, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) gs_store(c + r * ldc + v * GS_VW, acc[r][v]);
}

/* The full-width tile for any row count 1..GS_MR (each a constant). */
static void gs_tile_rows(int mr, int k, const float *a, int64_t ars, int64_t aks, const float *bp,
                         float *c, int64_t ldc) {
    switch (mr) {
    case 1: gs_tile(1, GS_NV, k, a, ars, aks, bp, c, ldc); break;
    case 2: gs_tile(2, GS_NV, k, a, ars, aks, bp, c, ldc); break;
    case 3: gs_tile(3, GS_NV, k, a, ars, aks, bp, c, ldc); break;
#if GS_MR >= 4
    case 4: gs_tile(4, GS_NV, k, a, ars, aks, bp, c, ldc); break;
#endif
#if GS_MR >= 5
    case 5: gs_tile(5, GS_NV, k, a, ars, aks, bp, c, ldc); break;
#endif
#if GS_MR >= 6
    case 6: gs_tile(6, GS_NV, k, a, ars, aks, bp, c, ldc); break;
#endif
    default: break;
    }
}

/* A narrower tile (the last 16-48 columns of a panel on avx512: heads of
 * 32 floats, as MiniLM's): GS_MR rows at once, else row by row. */
static void gs_tile_cols(int mr, int nv, int k, const float *a, int64_t ars, int64_t aks,
                         const float *bp, float *c, int64_t ldc) {
#if GS_NV > 1
    if (mr == GS_MR) {
        switch (nv) {
        case 1: gs_tile(GS_MR, 1, k, a, ars, aks, bp, c, ldc); return;
#if GS_NV > 2
        case 2: gs_tile(GS_MR, 2, k, a, ars, aks, bp, c, ldc); return;
#endif
#if GS_NV > 3
        case 3: gs_tile(GS_MR, 3, k, a, ars, aks, bp, c, ldc); return;
#endif
        default: break;
        }
    }
#endif
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            gs_tile(1, 1, k, a + r * ars, 0, aks, bp + v * GS_VW, c + r * ldc + v * GS_VW, ldc);
}

/* bp[p * GS_NC + jj] = src[jj * ld + p] for jj < nc (a multiple of 16),
 * p < k: the panel of a transposed B. With AVX2 (both vector variants) in
 * 8 x 8 blocks transposed in registers: the scalar loop took a quarter of
 * the time of a 128 x 128 x 64 product. Copies only, so no bit depends on
 * the path. */
static void gs_pack_t(float *bp, const float *src, int ld, int nc, int k, bool round) {
    int p = 0;
#if defined(__AVX2__)
    for (; p + 8 <= k; p += 8) {
        for (int jj = 0; jj < nc; jj += 8) {
            const float *s0 = src + (size_t)jj * ld + p;
            const size_t l = (size_t)ld;
            __m256 r0 = _mm256_loadu_ps(s0), r1 = _mm256_loadu_ps(s0 + l);
            __m256 r2 = _mm256_loadu_ps(s0 + 2 * l), r3 = _mm256_loadu_ps(s0 + 3 * l);
            __m256 r4 = _mm256_loadu_ps(s0 + 4 * l), r5 = _mm256_loadu_ps(s0 + 5 * l);
            __m256 r6 = _mm256_loadu_ps(s0 + 6 * l), r7 = _mm256_loadu_ps(s0 + 7 * l);
            if (round) {
                r0 = gs_round8(r0), r1 = gs_round8(r1), r2 = gs_round8(r2);
                r3 = gs_round8(r3), r4 = gs_round8(r4), r5 = gs_round8(r5);
                r6 = gs_round8(r6), r7 = gs_round8(r7);
            }
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
            __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
            float *d = bp + (size_t)p * GS_NC + jj;
            _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + GS_NC, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * GS_NC, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * GS_NC, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * GS_NC, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * GS_NC, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * GS_NC, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * GS_NC, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
    }
#endif
    for (int jj = 0; jj < nc; jj++) /* the last k % 8 (or all) of p */
        for (int q = p; q < k; q++) {
            float x = src[(size_t)jj * ld + q];
            bp[(size_t)q * GS_NC + jj] = round ? ds_round_bf16(x) : x;
        }
}

/* dst[i] = src[i] for i < n, in vector registers. gcc turns a plain copy
 * loop (even of vector loads and stores) into `rep movsq` or a memcpy call,
 * whose start-up cost on copies of 128-256 bytes took 70% (rep movsq) and
 * 26% (memcpy) of a transposed product's time; the empty asm, which
 * claims to change the register, keeps the loop a loop. */
static inline void gs_copy(float *restrict dst, const float *restrict src, int n) {
    int i = 0;
    for (; i + GS_VW <= n; i += GS_VW) {
        gs_vec v = gs_load(src + i);
#if defined(__x86_64__) || defined(__i386__)
        __asm__("" : "+x"(v));
#endif
        gs_store(dst + i, v);
    }
    for (; i < n; i++) dst[i] = src[i];
}

/* gs_copy rounding to bf16 on the way (no memcpy to fear: the rounding
 * keeps it a loop). */
static inline void gs_copy_round(float *restrict dst, const float *restrict src, int n) {
    int i = 0;
    for (; i + GS_VW <= n; i += GS_VW) gs_store(dst + i, gs_round(gs_load(src + i)));
    for (; i < n; i++) dst[i] = ds_round_bf16(src[i]);
}

/* Rows per block of a transposed A copied apart (GS_AROWS x GS_KMAX floats,
 * 16-24 KiB on the stack): with a 64-column panel of B at k = 128 (32 KiB),
 * 32 rows (16 KiB) filled the 48 KiB L1 and ran 0.97x as fast as 16. */
#define GS_AROWS (4 * GS_MR)

/* Rows [i0, i1) and the columns of one panel: the tiles. Tile t (rows
 * i0 + t MR ...) starts at A + t * tstride; in it A(r, p) = a[r ars + p aks]. */
static void gs_rows(int i0, int i1, int nc, int k, const float *A, int64_t tstride, int64_t ars,
                    int64_t aks, const float *bp, float *C, int ldc) {
    for (int i = i0; i < i1; i += GS_MR) {
        const int mr = i1 - i < GS_MR ? i1 - i : GS_MR;
        const float *a = A + (size_t)((i - i0) / GS_MR) * tstride;
        float *c = C + (size_t)i * ldc;
        int jj = 0;
        for (; jj + GS_NV * GS_VW <= nc; jj += GS_NV * GS_VW)
            gs_tile_rows(mr, k, a, ars, aks, bp + jj, c + jj, ldc);
        if (jj < nc) gs_tile_cols(mr, (nc - jj) / GS_VW, k, a, ars, aks, bp + jj, c + jj, ldc);
    }
}

/* Rows [i0, i1) of one product C = op(A) op(B). A not transposed is read in
 * place (a tile's rows are MR streams along k). A transposed is copied per
 * block of GS_AROWS rows into ap[p][r], rows GS_AROWS floats apart: read in
 * place, a tile touches one cache line per p at a stride of lda, and at
 * lda = 128 floats (attention's dV = P^T dC, dK = dS^T Q) those lines fall
 * into 8 of the L1's 64 sets and are evicted before the next tile reuses
 * them (the product ran at 0.8 of the untransposed one's rate). */
static void gs_product(bool ta, bool tb, int i0, int i1, int n, int k, const float *A, int lda,
                       const float *B, int ldb, float *C, int ldc, bool round) {
    float bp[GS_KMAX * GS_NC] __attribute__((aligned(64)));
    float ap[GS_AROWS * GS_KMAX] __attribute__((aligned(64)));
    for (int j0 = 0; j0 < n; j0 += GS_NC) {
        const int nc = n - j0 < GS_NC ? n - j0 : GS_NC;
        /* the panel Bp[p][jj] = op(B)(p, j0 + jj) */
        if (tb) {
            gs_pack_t(bp, B + (size_t)j0 * ldb, ldb, nc, k, round);
        } else if (round) {
            for (int p = 0; p < k; p++)
                gs_copy_round(bp + (size_t)p * GS_NC, B + (size_t)p * ldb + j0, nc);
        } else {
            for (int p = 0; p < k; p++)
                gs_copy(bp + (size_t)p * GS_NC, B + (size_t)p * ldb + j0, nc);
        }
        if (!ta && !round) {
            gs_rows(i0, i1, nc, k, A + (size_t)i0 * lda, (int64_t)GS_MR * lda, lda, 1, bp,
                    C + j0, ldc);
            continue;
        }
        for (int ib = i0; ib < i1; ib += GS_AROWS) {
            const int rows = i1 - ib < GS_AROWS ? i1 - ib : GS_AROWS;
            if (!ta) { /* round: the block's rows, rounded, k apart */
                for (int r = 0; r < rows; r++)
                    gs_copy_round(ap + (size_t)r * k, A + (size_t)(ib + r) * lda, k);
                gs_rows(ib, ib + rows, nc, k, ap, (int64_t)GS_MR * k, k, 1, bp, C + j0, ldc);
                continue;
            }
            for (int p = 0; p < k; p++) {
                if (round)
                    gs_copy_round(ap + (size_t)p * GS_AROWS, A + (size_t)p * lda + ib, rows);
                else
                    gs_copy(ap + (size_t)p * GS_AROWS, A + (size_t)p * lda + ib, rows);
            }
            gs_rows(ib, ib + rows, nc, k, ap, GS_MR, 1, GS_AROWS, bp, C + j0, ldc);
        }
    }
}

/* Whether this CPU runs the kernel at hardware speed (see the file comment). */
static bool gs_enabled(void) {
#if GS_HW_FMA
    return true;
#elif defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("fma");
#else
    return true; /* fmaf is exact everywhere; other architectures have FMA */
#endif
}

bool ds_cpu_gemm_small_takes(int m, int n, int k, float alpha, float beta, int batch) {
    return alpha == 1.0f && beta == 0.0f && n > 0 && n % 16 == 0 && k >= 1 && k <= GS_KMAX &&
           m > 0 && batch > 0 && 2.0 * m * n * k <= DS_CPU_GEMM_SMALL_FLOPS && gs_enabled();
}

/* The products of a call this kernel takes; `round`: bf16 inputs. */
static ds_status gs_run(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                        const float *A, int lda, int64_t strideA, const float *B, int ldb,
                        int64_t strideB, float *C, int ldc, int64_t strideC, int batch,
                        bool round) {
    DS_TRY(ds_check_gemm("cpu gemm", transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C,
                         ldc, strideC, batch));
    /* Tasks: whole products, or (fewer products than threads) row ranges of
     * at least 8 tiles each; the split changes no element's arithmetic. */
    const int nt = ds_cpu_team(be);
    int parts = 1;
    if (batch < nt) {
        parts = (nt + batch - 1) / batch;
        int most = m / (8 * GS_MR);
        if (parts > most) parts = most > 1 ? most : 1;
    }
    const int tasks = batch * parts;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && tasks > 1)
    for (int t = 0; t < tasks; t++) {
        const int b = t / parts, part = t % parts;
        /* row ranges on tile boundaries */
        const int tiles = (m + GS_MR - 1) / GS_MR;
        const int i0 = (int)((int64_t)tiles * part / parts) * GS_MR;
        int i1 = (int)((int64_t)tiles * (part + 1) / parts) * GS_MR;
        if (i1 > m) i1 = m;
        gs_product(transa, transb, i0, i1, n, k, A + b * strideA, lda, B + b * strideB, ldb,
                   C + b * strideC, ldc, round);
    }
    return DS_OK;
}

ds_status ds_cpu_gemm_small(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                            float alpha, const float *A, int lda, int64_t strideA, const float *B,
                            int ldb, int64_t strideB, float beta, float *C, int ldc,
                            int64_t strideC, int batch) {
    if (!ds_cpu_gemm_small_takes(m, n, k, alpha, beta, batch))
        return ds_cpu_gemm(be, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
                           beta, C, ldc, strideC, batch);
    return gs_run(be, transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C, ldc, strideC,
                  batch, false);
}

ds_status ds_cpu_gemm_small_bf16(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                                 const float *A, int lda, int64_t strideA, const float *B,
                                 int ldb, int64_t strideB, float *C, int ldc, int64_t strideC,
                                 int batch) {
    return gs_run(be, transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C, ldc, strideC,
                  batch, true);
}
