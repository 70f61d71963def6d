/* The linear layers' products in a kernel of our own: a tall operand of
 * tokens (rows) against a weight of at most a few hundred thousand floats.
 *
 * Why. A linear layer's three products at BERT-mini's shapes are Y = X W^T,
 * dX = dY W (X, Y: 4096 tokens x 256 or 1024 features) and dW += dY^T X
 * (k = 4096 tokens). OpenBLAS packs both operands of every call, the tall
 * one included, and clears C in a pass of its own when beta = 0: with only
 * 256-1024 columns to use each packed token row for, packing and clearing
 * were 14.5% of the step's CPU time (12.1 + 2.4, bench/step_profile.sh on
 * the Skylake-SP VM), the weight-gradient products' transposing copies
 * alone 6.9%. Here:
 *   - op(A) = A (forward and dX): A's rows are read in place, a tile of
 *     GR_MR rows broadcasting one element per row and k; only B, the weight,
 *     is packed, in blocks of GR_KC x GR_NC (at most 256 KiB, in the L2,
 *     shared by the threads), once per call: a few hundred thousand floats
 *     against millions of products;
 *   - op(A) = A^T, op(B) = B (dW = dY^T X): nothing is packed. At step p a
 *     tile reads GR_MR consecutive floats of dY's row p and GS_NV vectors of
 *     X's row p: both operands are walked row by row as stored, in blocks
 *     of GR_KW rows that stay in the L2 while every tile of C passes over
 *     them;
 *   - C is written once from registers (beta 0) or accumulated into
 *     (beta 1, or the k blocks after the first): no clearing pass.
 *
 * Which calls. Those where the kernel was measured faster than OpenBLAS at 1
 * thread in the same run (bench/RESULTS.md, "The linear layers' products"):
 * alpha = 1, beta 0 or 1, one product, n a multiple of 16, more flops than a
 * small product (cpu_gemm_small.c takes those), and either op(A) = A with B
 * at most 1024 x 1024 and 256 Ki floats (BERT-mini's 256 x 256, 1024 x 256
 * and 256 x 1024: 1.04-1.57x; GPT-2's 768 x 768 and larger ran 0.88-0.94x
 * and stay with OpenBLAS), or op(A) = A^T, op(B) = B with C at most 256 x 256
 * (1.07-1.23x; 1024 x 256 and 256 x 1024 ran 0.77-0.96x: rows 4 KiB apart
 * share the L1's sets). As for the small products the test depends on the
 * shape only, so every variant and thread count takes the same path.
 *
 * Same bits. Element (i, j) of C is one fma chain over p = 0, 1, ..., k-1
 * from 0 (beta 0) or from C's value (beta 1), as in cpu_gemm_small.c: the
 * blocks of k continue the chain from C, where the previous block stored it
 * exactly. So the variants and thread counts agree bit for bit
 * (test_cpu_isa), and the result differs from OpenBLAS's, which adds its
 * sum to beta C at the end, within fp32 rounding (test_backend_gemm checks
 * both against double precision). */
#include <omp.h>
#include <stdbool.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_gemm_tile.h"
#include "engine/backend/cpu/cpu_ops.h"

/* Columns of a packed panel (the tile's width) and of a packed block; the k
 * of a block: GR_KC x GR_NC floats, the cpu backend's pack buffer
 * (DS_CPU_PACK_FLOATS). 256 x 256 measured 1.04-1.57x OpenBLAS where 128 x
 * 256 and 256 x 128 ran 0.70-1.13x (the tile's C rows then go through the
 * L1 more often than the block's reuse pays for). */
#define GR_NR (GS_NV * GS_VW)
#define GR_KC 256
#define GR_NC 256
/* Rows of dY and X per block of the weight gradient: 128 rows of 256-1024
 * floats stay in the L2 with room to spare; 256 ran 0.76-0.87x as fast. */
#define GR_KW 128

_Static_assert(GR_KC * GR_NC <= DS_CPU_PACK_FLOATS, "the pack buffer holds one block");
_Static_assert(GR_NC % GR_NR == 0, "a block is whole panels");

bool ds_cpu_gemm_rows_takes(bool transa, bool transb, int m, int n, int k, float alpha,
                            float beta, int batch) {
    if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f) || batch != 1 || m <= 0 || n <= 0 ||
        n % 16 != 0 || k <= 0 || 2.0 * m * n * k <= DS_CPU_GEMM_SMALL_FLOPS || !gs_enabled())
        return false;
    if (!transa) return n <= 1024 && k <= 1024 && (int64_t)n * k <= 256 * 1024;
    return !transb && m <= 256 && n <= 256;
}

/* One tile of mr <= GR_MR rows and nv <= GS_NV vectors; the full tile and
 * the last rows of a full-width panel inline their own constants, the rest
 * (a panel of 16-48 columns on avx512) go vector by vector. Inlined where it
 * is called, so that the strides each caller fixes (A's rows one float
 * apart, or B's GR_NR) are constants in the loop over k. */
static inline __attribute__((always_inline)) void gr_tile(int mr, int nv, int k, const float *a,
                                                          int64_t ars, int64_t aks,
                                                          const float *b, int64_t bks, float *c,
                                                          int64_t ldc, bool acc) {
    if (nv == GS_NV) {
        switch (mr) {
        case GR_MR: gs_tile(GR_MR, GS_NV, k, a, ars, aks, b, bks, c, ldc, acc); return;
        case 1: gs_tile(1, GS_NV, k, a, ars, aks, b, bks, c, ldc, acc); return;
        case 2: gs_tile(2, GS_NV, k, a, ars, aks, b, bks, c, ldc, acc); return;
        case 3: gs_tile(3, GS_NV, k, a, ars, aks, b, bks, c, ldc, acc); return;
#if GR_MR > 4
        case 4: gs_tile(4, GS_NV, k, a, ars, aks, b, bks, c, ldc, acc); return;
#endif
#if GR_MR > 5
        case 5: gs_tile(5, GS_NV, k, a, ars, aks, b, bks, c, ldc, acc); return;
#endif
        default: break;
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            gs_tile(1, 1, k, a + r * ars, 0, aks, b + v * GS_VW, bks, c + r * ldc + v * GS_VW,
                    ldc, acc);
}

/* Panel q of the block (rows p0.., columns j0..j0 + nc): bp[p * GR_NR + jj]
 * = op(B)(p0 + p, j0 + q GR_NR + jj), jj below the panel's width. */
static void gr_pack(float *bp, const float *B, int ldb, bool transb, int p0, int kc, int j0,
                    int q, int nc) {
    const int jq = j0 + q * GR_NR, w = nc - q * GR_NR < GR_NR ? nc - q * GR_NR : GR_NR;
    float *d = bp + (size_t)q * GR_NR * kc;
    if (transb) {
        for (int jj = 0; jj < w; jj++) {
            const float *s = B + (size_t)(jq + jj) * ldb + p0;
            for (int p = 0; p < kc; p++) d[(size_t)p * GR_NR + jj] = s[p];
        }
    } else {
        for (int p = 0; p < kc; p++) {
            const float *s = B + (size_t)(p0 + p) * ldb + jq;
            for (int jj = 0; jj < w; jj++) d[(size_t)p * GR_NR + jj] = s[jj];
        }
    }
}

/* C = (beta C) + A op(B), A's rows in place, B packed block by block. */
static void gr_rows(ds_backend *be, bool transb, int m, int n, int k, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
    float *bp = ds_cpu_pack_buffer(be);
    const int nt = ds_cpu_team(be), tiles = (m + GR_MR - 1) / GR_MR;
    for (int j0 = 0; j0 < n; j0 += GR_NC) {
        const int nc = n - j0 < GR_NC ? n - j0 : GR_NC, panels = (nc + GR_NR - 1) / GR_NR;
        for (int p0 = 0; p0 < k; p0 += GR_KC) {
            const int kc = k - p0 < GR_KC ? k - p0 : GR_KC;
            const bool acc = p0 > 0 || beta == 1.0f;
#pragma omp parallel num_threads(nt) if (nt > 1)
            {
#pragma omp for schedule(static)
                for (int q = 0; q < panels; q++) gr_pack(bp, B, ldb, transb, p0, kc, j0, q, nc);
#pragma omp for schedule(static)
                for (int t = 0; t < tiles; t++) {
                    const int i = t * GR_MR, mr = m - i < GR_MR ? m - i : GR_MR;
                    for (int q = 0; q < panels; q++) {
                        const int w = nc - q * GR_NR < GR_NR ? nc - q * GR_NR : GR_NR;
                        gr_tile(mr, w / GS_VW, kc, A + (size_t)i * lda + p0, lda, 1,
                                bp + (size_t)q * GR_NR * kc, GR_NR,
                                C + (size_t)i * ldc + j0 + q * GR_NR, ldc, acc);
                    }
                }
            }
        }
    }
}

/* C = (beta C) + A^T B, both read in place; each thread owns whole row tiles
 * of C and walks k in blocks of GR_KW rows. */
static void gr_wgrad(ds_backend *be, int m, int n, int k, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    const int nt = ds_cpu_team(be), tiles = (m + GR_MR - 1) / GR_MR;
    const int panels = (n + GR_NR - 1) / GR_NR;
#pragma omp parallel num_threads(nt) if (nt > 1 && tiles > 1)
    {
        const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
        const int t0 = (int)((int64_t)tiles * id / cnt);
        const int t1 = (int)((int64_t)tiles * (id + 1) / cnt);
        for (int p0 = 0; p0 < k; p0 += GR_KW) {
            const int kc = k - p0 < GR_KW ? k - p0 : GR_KW;
            const bool acc = p0 > 0 || beta == 1.0f;
            for (int t = t0; t < t1; t++) {
                const int i = t * GR_MR, mr = m - i < GR_MR ? m - i : GR_MR;
                for (int q = 0; q < panels; q++) {
                    const int j = q * GR_NR, w = n - j < GR_NR ? n - j : GR_NR;
                    gr_tile(mr, w / GS_VW, kc, A + (size_t)p0 * lda + i, 1, lda,
                            B + (size_t)p0 * ldb + j, ldb, C + (size_t)i * ldc + j, ldc, acc);
                }
            }
        }
    }
}

ds_status ds_cpu_gemm_rows(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                           const float *A, int lda, const float *B, int ldb, float beta,
                           float *C, int ldc) {
    DS_TRY(ds_check_gemm("cpu gemm", transa, transb, m, n, k, A, lda, 0, B, ldb, 0, C, ldc, 0,
                         1));
    if (transa)
        gr_wgrad(be, m, n, k, A, lda, B, ldb, beta, C, ldc);
    else
        gr_rows(be, transb, m, n, k, A, lda, B, ldb, beta, C, ldc);
    return DS_OK;
}
