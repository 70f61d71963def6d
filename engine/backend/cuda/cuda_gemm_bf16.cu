/* The gemm slot's bf16-input path (be->gemm_inputs DS_BF16, backend.h):
 * A and B are rounded to bf16 into device scratch and multiplied by cuBLAS
 * on tensor cores, bf16 x bf16 products summed in fp32 into an fp32 C.
 *
 * Rounding. One kernel per operand writes ds_f32_to_bf16 of every element
 * (engine/core/dtype.h: round to nearest even, NaN kept quiet) into a packed
 * copy (ds_gemm_pack_of, engine/backend/math.h section 4, rows padded to 8
 * elements for 16-byte aligned tensor-core rows): the same function, so the
 * same bf16 values, as the cpu reference (cpu_gemm_bf16.c). We do not hand
 * fp32 inputs to CUBLAS_COMPUTE_32F_FAST_16BF instead: cuBLAS documents that
 * mode as converting inputs "down" to bf16 without saying how it rounds, and
 * nothing here could show that it rounds as the cpu does.
 *
 * The product. cublasGemmStridedBatchedEx with CUDA_R_16BF A and B,
 * CUDA_R_32F C and CUBLAS_COMPUTE_32F: fp32 alpha, beta and accumulation.
 * The handle's CUBLAS_DEFAULT_MATH (cuda_backend.cu) lets cuBLAS use tensor
 * cores for 16-bit inputs (it only keeps fp32 inputs off TF32). Row-major on
 * column-major as in cuda_gemm: operands swapped, (n, m, k), B first.
 *
 * Workspace. The copies go to the backend's GEMM workspace (backend.h; not
 * ds_cuda_scratch, which other slots use): sized by the engine's plan
 * before the first step and recorded in be->mem as DS_MEM_WORKSPACE; a
 * call larger than the plan grows it (freeing the old buffer waits for the
 * device, cudaFree, so a GEMM still reading it has finished). Layout and
 * size: ds_gemm_workspace_of(DS_BACKEND_CUDA, ...), rows padded to 8
 * elements, B 256-byte aligned as cudaMalloc's own buffers are. */
#include <limits.h>

#include "engine/backend/cuda/cuda_common.cuh"

/* dst[(b * rows + r) * ld + c] = bf16(src[b * stride + r * lds + c]) for
 * every b < copies, r < rows, c < cols. A warp takes 32 columns of a row
 * (coalesced), a block 8 rows; the row's origin is found once per row, not
 * per element. (The first version divided a 64-bit flat index twice per
 * element: on an H100 its 348 calls took 8.7 ms of a 16.9 ms bf16 step.) The
 * row and column counters are 64-bit: a grid-stride step past INT_MAX would
 * wrap negative and stay below the bound, writing outside the operand. */
__global__ void ds_k_round_pack_bf16(uint16_t *__restrict__ dst, const float *__restrict__ src,
                                     int lds, int64_t stride, int rows, int cols, int ld,
                                     int64_t nrows) {
    for (int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; row < nrows;
         row += (int64_t)gridDim.y * blockDim.y) {
        int64_t b = row / rows, r = row - b * rows;
        const float *s = src + b * stride + r * lds;
        uint16_t *d = dst + (size_t)row * (size_t)ld;
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
             c += (int64_t)gridDim.x * blockDim.x)
            d[c] = ds_f32_to_bf16(s[c]);
    }
}

/* The pack kernel indexes an operand's rows with 32 bits. */
static ds_status pack_fits(const ds_gemm_pack *p) {
    int64_t nrows = (int64_t)p->copies * p->rows;
    if (nrows > INT_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "cuda gemm (bf16 inputs): %lld rows of one operand are "
                      "more than this kernel indexes", (long long)nrows);
    return DS_OK;
}

static ds_status round_pack(ds_backend *be, uint16_t *dst, const float *src, int lds,
                            int64_t stride, const ds_gemm_pack *p) {
    int64_t nrows = (int64_t)p->copies * p->rows;
    if (nrows == 0 || p->cols == 0) return DS_OK;
    dim3 block(32, 8);
    unsigned gy = (unsigned)((nrows + 7) / 8);
    dim3 grid((unsigned)((p->cols + 31) / 32), gy < 65535u ? gy : 65535u);
    ds_k_round_pack_bf16<<<grid, block, 0, DS_CUDA_DEFAULT_STREAM>>>(
        dst, src, lds, stride, p->rows, p->cols, p->ld, nrows);
    DS_CHECK_LAUNCH();
    return DS_OK;
}


ds_status ds_cuda_gemm_bf16(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                            float alpha, const float *A, int lda, int64_t strideA, const float *B,
                            int ldb, int64_t strideB, float beta, float *C, int ldc,
                            int64_t strideC, int batch) {
    /* the caller (cuda_gemm) checked the arguments and took m, n, k or
     * batch 0 */
    DS_CUDA_ENTER(be);
    const ds_gemm_ws w =
        ds_gemm_workspace_of(DS_BACKEND_CUDA, transa, transb, m, n, k, strideA, strideB, batch);
    const ds_gemm_pack pa = w.a, pb = w.b;
    ds_cuda_impl *im = ds_cuda_impl_of(be);
    /* both operands refused or taken before the workspace grows for them */
    DS_TRY(pack_fits(&pa));
    DS_TRY(pack_fits(&pb));
    void *buf;
    DS_TRY(ds_backend_gemm_workspace(be, &w, &buf));
    uint16_t *Ah = (uint16_t *)buf, *Bh = (uint16_t *)((char *)buf + w.b_offset);
    DS_TRY(round_pack(be, Ah, A, lda, strideA, &pa));
    DS_TRY(round_pack(be, Bh, B, ldb, strideB, &pb));
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    DS_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
        im->blas, opb, opa, n, m, k, &alpha, Bh, CUDA_R_16BF, pb.ld, (long long)pb.stride, Ah,
        CUDA_R_16BF, pa.ld, (long long)pa.stride, &beta, C, CUDA_R_32F, ldc, (long long)strideC,
        batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return DS_OK;
}
