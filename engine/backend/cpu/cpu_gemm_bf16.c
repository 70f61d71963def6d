/* The gemm slot of one instruction-set variant, in front of
 * cpu_gemm_small.c: with be->gemm_inputs DS_BF16 (mixed precision's GEMMs,
 * backend.h) A and B are rounded to bf16 first, into the backend's GEMM
 * workspace (backend.h: sized by the engine's plan before the first step and
 * recorded in the accountant), and the product runs on those copies through
 * the same fp32 kernels.
 *
 * Why this is a bf16 GEMM. The rounded values have 8-bit significands, so
 * each product A(i,p) B(p,j) is exact in fp32 (16 significant bits) and the
 * kernel's fma chain or OpenBLAS's sums round exactly as a bf16 x bf16 ->
 * fp32-accumulate GEMM that sums in the same order would; the cuda backend's
 * tensor-core GEMM multiplies the same values (the rounding is
 * ds_f32_to_bf16 on both, engine/backend/math.h section 4) and differs only
 * in the order of the sums.
 *
 * The own kernel's products (cpu_gemm_small.c: attention's per-head
 * blocks) copy A and B into blocks and panels anyway and round there
 * instead (ds_cpu_gemm_small_bf16): no pass and no workspace of their own.
 * Every other call rounds first, as follows.
 *
 * On a CPU with AVX512-BF16 the avx512 variant multiplies bf16 values
 * directly instead (cpu_gemm_dot.c), in the same workspace: every call
 * ds_cpu_gemm_dot_takes, the own kernel's included (the dot product runs
 * attention's products at 1.7-1.9x the own kernel's rate, bench/RESULTS.md).
 *
 * Layout. Each operand is packed (ds_gemm_pack_of): the stored matrices
 * densely, ld = their column count, one copy when the stride is 0. The
 * product then reads a copy no larger than what it reads anyway, whatever
 * the caller's strides (attention's per-head slices of a QKV row block
 * included), and the kernels' choice of path depends on the shape only
 * (cpu_gemm_small.c), so rounding changes no path.
 *
 * The rounding pass. A bit operation per element (ds_f32_to_bf16 followed
 * by the widening shift, as one mask and select the compiler vectorises at
 * the variant's width), threads over rows when there are enough elements.
 * Its cost on the BERT-mini training step is in bench/RESULTS.md.
 */
#include <omp.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/math.h"

/* dst[r * p->ld + c] = round(src[r * ld + c]) for the p.rows rows of each of
 * the p.copies matrices (src matrices `stride` apart). */
static void round_pack(float *restrict dst, const float *restrict src, int ld, int64_t stride,
                       const ds_gemm_pack *p, int nt) {
    const int64_t rows = (int64_t)p->copies * p->rows;
    const int cols = p->cols;
    const bool par = nt > 1 && p->elems >= DS_CPU_PAR_MIN;
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / p->rows, i = r % p->rows;
        const ds_cpu_f32_bits *restrict s = (const ds_cpu_f32_bits *)(src + b * stride + i * ld);
        ds_cpu_f32_bits *restrict d = (ds_cpu_f32_bits *)(dst + r * p->ld);
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = ds_cpu_bf16_round_bits(s[c]);
    }
}

/* The gemm and gemm_bias slots (bias NULL for gemm; with a bias alpha is
 * 1, beta 0, one product and ldc n). The bf16 dot product starts its sums
 * from the bias; every other path writes the bias rows and adds the
 * product to them (beta 1), as gemm_bias is defined (backend.h). */
static ds_status gemm_call(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                           float alpha, const float *A, int lda, int64_t strideA, const float *B,
                           int ldb, int64_t strideB, float beta, const float *bias, float *C,
                           int ldc, int64_t strideC, int batch) {
    const bool bf16 = be->gemm_inputs == DS_BF16 && m > 0 && n > 0 && k > 0 && batch > 0;
    ds_gemm_ws w = {0};
    bool dot = false;
    if (bf16) {
        w = ds_gemm_workspace_of(DS_BACKEND_CPU, transa, transb, m, n, k, strideA, strideB, batch);
        dot = ds_cpu_gemm_dot_takes(m, n, k, alpha, beta, w.bytes);
    }
    if (bias && !dot) {
        DS_TRY(be->nn->bcast_add_fwd(be, C, bias, m, n, false));
        beta = 1.0f, bias = NULL;
    }
    if (!bf16)
        return ds_cpu_gemm_small(be, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
                                 strideB, beta, C, ldc, strideC, batch);
    if (!dot && ds_cpu_gemm_small_takes(m, n, k, alpha, beta, batch))
        return ds_cpu_gemm_small_bf16(be, transa, transb, m, n, k, A, lda, strideA, B, ldb,
                                      strideB, C, ldc, strideC, batch);
    DS_TRY(ds_check_gemm("cpu gemm", transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C,
                         ldc, strideC, batch));
    void *ws;
    DS_TRY(ds_backend_gemm_workspace(be, &w, &ws));
    if (dot)
        return ds_cpu_gemm_dot(be, transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB,
                               beta, bias, C, ldc, strideC, batch, ws, w.bytes);
    float *a = ws, *b = (float *)((char *)ws + w.b_offset);
    round_pack(a, A, lda, strideA, &w.a, ds_cpu_team(be));
    round_pack(b, B, ldb, strideB, &w.b, ds_cpu_team(be));
    return ds_cpu_gemm_small(be, transa, transb, m, n, k, alpha, a, w.a.ld, w.a.stride, b,
                             w.b.ld, w.b.stride, beta, C, ldc, strideC, batch);
}

ds_status ds_cpu_gemm_entry(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                            float alpha, const float *A, int lda, int64_t strideA, const float *B,
                            int ldb, int64_t strideB, float beta, float *C, int ldc,
                            int64_t strideC, int batch) {
    return gemm_call(be, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta,
                     NULL, C, ldc, strideC, batch);
}

ds_status ds_cpu_gemm_bias(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                           const float *A, int lda, const float *B, int ldb, const float *bias,
                           float *C) {
    if (!bias) return DS_ERR(DS_ERR_INVALID_ARG, "cpu gemm_bias: bias is NULL");
    /* before the bias rows are written: a refused call leaves C as it was */
    DS_TRY(ds_check_gemm("cpu gemm_bias", transa, transb, m, n, k, A, lda, 0, B, ldb, 0, C, n, 0,
                         1));
    return gemm_call(be, transa, transb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, bias, C, n, 0,
                     1);
}
