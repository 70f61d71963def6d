/* The tile both own GEMM kernels of a cpu variant run (cpu_gemm_small.c for
 * attention's small products, cpu_gemm_rows.c for the linear layers'): the
 * variant's vector type and its operations, bf16 rounding in vector
 * registers, and the register tile itself. Included by those two files only;
 * each is compiled once per instruction set (cpu_isa.h), so everything here
 * is static. */
#ifndef DS_CPU_GEMM_TILE_H
#define DS_CPU_GEMM_TILE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/backend/math.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Vector type, width (floats) and tiles: GS_MR rows x GS_NV vectors of C in
 * registers for the small products (avx512: 16 zmm accumulators of the 32;
 * avx2: 12 ymm of 16), GR_MR x GS_NV for the linear layers' products
 * (cpu_gemm_rows.c; avx512: 24 zmm, see there). */
#if defined(__AVX512F__)
typedef __m512 gs_vec;
#define GS_VW 16
#define GS_MR 4
#define GR_MR 6
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
#define GR_MR 6
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
#define GR_MR 4
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
 * ds_round_bf16 on a vector, in the integer operations of cpu_gemm_bf16.c's
 * round_bits (test_backend_gemm_bf16 and test_cpu_isa check the bits). */
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

/* The most rows a tile has (GS_MR or GR_MR): the accumulators' array. */
#define GS_MAXR (GS_MR > GR_MR ? GS_MR : GR_MR)

/* C[mr x nv*GS_VW] = (C if acc_in) + A[mr rows] * B, A(r, p) = a[r * ars + p
 * * aks], B's row p at bp + p * bks. Element (r, j) is one fma chain over p
 * from 0 or from C's value, whatever the tile (see cpu_gemm_small.c, "Same
 * bits"). mr, nv, bks and acc_in are constants where it is inlined, so the
 * accumulators live in registers. */
static inline __attribute__((always_inline)) void gs_tile(int mr, int nv, int k, const float *a,
                                                          int64_t ars, int64_t aks,
                                                          const float *bp, int64_t bks,
                                                          float *c, int64_t ldc, bool acc_in) {
    gs_vec acc[GS_MAXR][GS_NV];
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[r][v] = acc_in ? gs_load(c + r * ldc + v * GS_VW) : gs_zero();
    for (int p = 0; p < k; p++) {
        const float *b = bp + (size_t)p * bks;
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

/* Whether this CPU runs the kernel at hardware speed (cpu_gemm_small.c says why). */
static bool gs_enabled(void) {
#if GS_HW_FMA
    return true;
#elif defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("fma");
#else
    return true; /* fmaf is exact everywhere; other architectures have FMA */
#endif
}

#endif
