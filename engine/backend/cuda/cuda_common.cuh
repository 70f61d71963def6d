/* Shared by the CUDA backend's .cu files (and usable by the CUDA model
 * kernels of nn.h): error checks, the backend's private state, the stream a
 * ds_stream stands for, and launch geometry.
 *
 * Streams. The backend's default stream (ds_stream NULL) is CUDA's legacy
 * default stream: every kernel of the backend is launched on it explicitly,
 * and so should other kernels that must be ordered with the backend's slots
 * (<<<grid, block, 0, ds_cuda_stream(NULL)>>>). Streams from stream_create are
 * non-blocking (they do not wait for the default stream implicitly): order
 * them with event_record / stream_wait_event, as backend.h says.
 *
 * Devices. Every slot first makes be->device current on the calling thread
 * (DS_CUDA_ENTER), so a communication or offload thread may call the backend
 * without calling cudaSetDevice itself. */
#ifndef DS_BACKEND_CUDA_COMMON_CUH
#define DS_BACKEND_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"

/* Record a CUDA / cuBLAS failure: the call as written, where it was made and
 * the library's name and text for the code. Returns DS_ERR_BACKEND. */
static inline ds_status ds_cuda_fail(const char *call, const char *file, int line,
                                     const char *name, const char *text) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    return ds_error_set(DS_ERR_BACKEND, file, line, "%s failed at %s:%d: %s (%s)", call, base,
                        line, name, text);
}

/* Return DS_ERR_BACKEND from the enclosing function if a CUDA call fails. */
#define DS_CHECK_CUDA(expr)                                                                      \
    do {                                                                                         \
        cudaError_t ds_cu_e_ = (expr);                                                           \
        if (ds_cu_e_ != cudaSuccess)                                                             \
            return ds_cuda_fail(#expr, __FILE__, __LINE__, cudaGetErrorName(ds_cu_e_),           \
                                cudaGetErrorString(ds_cu_e_));                                   \
    } while (0)

#define DS_CHECK_CUBLAS(expr)                                                                    \
    do {                                                                                         \
        cublasStatus_t ds_cb_s_ = (expr);                                                        \
        if (ds_cb_s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return ds_cuda_fail(#expr, __FILE__, __LINE__, cublasGetStatusName(ds_cb_s_),        \
                                cublasGetStatusString(ds_cb_s_));                                \
    } while (0)

/* After a <<<>>> launch: a bad configuration shows up here, not at the launch. */
#define DS_CHECK_LAUNCH() DS_CHECK_CUDA(cudaGetLastError())

/* Number of blocks of the sum-of-squares reduction, and so of its partial
 * sums: fixed, so the summation order (and the result's bits) depends only on
 * n and the device. */
#define DS_CUDA_SUMSQ_BLOCKS 1024
#define DS_CUDA_THREADS 256

/* A device buffer grown on demand, never shrunk (ds_cuda_buf_reserve). */
typedef struct ds_cuda_buf {
    void *p;
    size_t bytes;
} ds_cuda_buf;

/* be->impl of the cuda backend. */
typedef struct ds_cuda_impl {
    cublasHandle_t blas;
    int sm_count;
    int max_blocks;       /* grid-stride kernels launch at most this many blocks */
    double *sumsq_dev;    /* [DS_CUDA_SUMSQ_BLOCKS] partial sums, device */
    double *sumsq_host;   /* [DS_CUDA_SUMSQ_BLOCKS] pinned copy */
    /* ds_nn_cuda_first_bad_index's answer: one word per backend, so two
     * backends (two engines, two threads) on one device never share it */
    unsigned long long *bad_index_dev;
    ds_cuda_buf scratch;      /* ds_cuda_scratch's buffer */
} ds_cuda_impl;

/* *out = b's buffer after growing it to at least `bytes`. Freeing the old
 * one waits for the device (cudaFree), so kernels still reading it finish
 * first. */
ds_status ds_cuda_buf_reserve(ds_cuda_buf *b, size_t bytes, void **out);

/* A device buffer of at least `bytes` for a slot's intermediate results
 * (colsum.cuh's partial sums, the embedding backward's sort), valid until
 * the next call (ds_cuda_buf_reserve on im->scratch). Only the default
 * stream's slots use it, from the thread that runs the model. Recorded in
 * be->mem as DS_MEM_BUFFERS on the device as it grows, so the memory report
 * and the peak show it; unlike the GEMM workspace (backend.h) it is not
 * planned before the first step: its size comes from the nn kernels' shapes,
 * which no module declares yet (at most 16 MB for a column sum, plus the
 * embedding backward's sort of B x T ids). */
ds_status ds_cuda_scratch(ds_backend *be, size_t bytes, void **out);

static inline ds_cuda_impl *ds_cuda_impl_of(ds_backend *be) { return (ds_cuda_impl *)be->impl; }

/* The backend's default stream, named explicitly so that a build with
 * nvcc --default-stream per-thread does not split the backend's work over
 * two streams. */
#define DS_CUDA_DEFAULT_STREAM cudaStreamLegacy

/* The CUDA stream a ds_stream stands for: the pointer itself, NULL meaning
 * the default stream. Kernels of other files launch on ds_cuda_stream(NULL)
 * to be ordered with the backend's slots. */
static inline cudaStream_t ds_cuda_stream(ds_stream *s) {
    return s ? (cudaStream_t)s : DS_CUDA_DEFAULT_STREAM;
}

#define DS_CUDA_ENTER(be) DS_CHECK_CUDA(cudaSetDevice((be)->device))

/* Blocks for a grid-stride loop over `items` work items. */
static inline unsigned ds_cuda_blocks(const ds_backend *be, size_t items) {
    size_t want = (items + DS_CUDA_THREADS - 1) / DS_CUDA_THREADS;
    size_t cap = (size_t)((const ds_cuda_impl *)be->impl)->max_blocks;
    if (want < 1) want = 1;
    return (unsigned)(want < cap ? want : cap);
}

/* The loop of a grid-stride kernel: i runs over [0, n) (size_t). */
#define DS_GRID_STRIDE(i, n)                                                                     \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);              \
         i += (size_t)gridDim.x * blockDim.x)

/* The block's threads' values s added in a fixed tree through acc (shared,
 * DS_CUDA_THREADS doubles), so the bits depend only on what each thread
 * holds. Every thread of the block calls it; thread 0's return is the sum. */
static __device__ __forceinline__ double ds_block_sum_f64(double *acc, double s) {
    acc[threadIdx.x] = s;
    __syncthreads();
    for (unsigned stride = DS_CUDA_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) acc[threadIdx.x] += acc[threadIdx.x + stride];
        __syncthreads();
    }
    return acc[0];
}

/* Launch geometry of a grid-stride kernel over `items` on the default
 * stream: kernel<<<DS_CUDA_GRID(be, n)>>>(...). */
#define DS_CUDA_GRID(be, items)                                                                  \
    ds_cuda_blocks((be), (items)), DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM

/* Element-wise slots (cuda_elementwise.cu), wired into the table by
 * cuda_backend.cu. Each has the contract of its slot in backend.h. */
ds_status ds_cuda_rng_normal(ds_backend *be, float *dst, size_t n, float mean, float std,
                             uint64_t seed, uint64_t offset);
ds_status ds_cuda_rng_uniform(ds_backend *be, float *dst, size_t n, float lo, float hi,
                              uint64_t seed, uint64_t offset);
ds_status ds_cuda_cast(ds_backend *be, void *dst, ds_dtype dst_t, const void *src,
                       ds_dtype src_t, size_t n);
ds_status ds_cuda_fill(ds_backend *be, float *x, size_t n, float value);
ds_status ds_cuda_scale(ds_backend *be, void *x, ds_dtype t, size_t n, float alpha);
ds_status ds_cuda_axpy(ds_backend *be, void *y, ds_dtype yt, float alpha, const void *x,
                       ds_dtype xt, size_t n);
ds_status ds_cuda_sumsq(ds_backend *be, const void *x, ds_dtype t, size_t n, double *out_sumsq,
                        int *out_nonfinite);
ds_status ds_cuda_adam(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                       float grad_mult, float *m, float *v, size_t n, const ds_adam_hparams *hp,
                       void *param_lp, ds_dtype lp_t);
ds_status ds_cuda_sgd(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                      float grad_mult, float *momentum_buf, size_t n, const ds_sgd_hparams *hp,
                      void *param_lp, ds_dtype lp_t);
/* Blockwise int8 (cuda_quant.cu). */
ds_status ds_cuda_quantize_i8(ds_backend *be, int8_t *q, float *scales, const void *x,
                              ds_dtype t, size_t n, size_t block);
ds_status ds_cuda_dequantize_i8(ds_backend *be, float *y, const int8_t *q, const float *scales,
                                size_t n, size_t block);
/* Blockwise int4, DeepSpeed's arithmetic (cuda_quant.cu). */
ds_status ds_cuda_quantize_i4(ds_backend *be, uint8_t *q, float *scales, const void *x,
                              ds_dtype t, size_t n, size_t block);
ds_status ds_cuda_dequantize_i4(ds_backend *be, float *y, const uint8_t *q, const float *scales,
                                size_t n, size_t block);
/* The 1-bit code and the passes of 1-bit / 0/1 Adam (cuda_onebit.cu). */
ds_status ds_cuda_onebit_encode(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                                void *wire, size_t stride);
ds_status ds_cuda_onebit_decode(ds_backend *be, const void *wire, size_t n, float alpha,
                                bool accumulate, float *out);
ds_status ds_cuda_onebit_pass(ds_backend *be, const struct ds_onebit_pass *p);
/* Row-sparse gradients' scan, gather and sums (cuda_rows.cu). */
ds_status ds_cuda_rows_nonzero(ds_backend *be, const struct ds_rows_view *v, int64_t r0,
                               int64_t r1, uint8_t *flags);
ds_status ds_cuda_rows_gather(ds_backend *be, const struct ds_rows_view *v, const void *idx,
                              int64_t n, void *dst);
ds_status ds_cuda_rows_scatter(ds_backend *be, const struct ds_rows_view *v, const void *idx,
                               int64_t n, const void *src);
ds_status ds_cuda_rows_sum(ds_backend *be, const struct ds_rows_sum *s);
/* The gemm slot for be->gemm_inputs DS_BF16, arguments checked and m, n, k,
 * batch > 0 (cuda_gemm_bf16.cu). Its copies go to the backend's GEMM
 * workspace (backend.h), which backend.c owns and frees. */
ds_status ds_cuda_gemm_bf16(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                            float alpha, const float *A, int lda, int64_t strideA, const float *B,
                            int ldb, int64_t strideB, float beta, float *C, int ldc,
                            int64_t strideC, int batch);
/* C_b = beta * C_b for each batch (GEMM with k = 0). */
ds_status ds_cuda_gemm_beta(ds_backend *be, float beta, float *C, int m, int n, int ldc,
                            int64_t strideC, int batch);

#endif /* DS_BACKEND_CUDA_COMMON_CUH */
