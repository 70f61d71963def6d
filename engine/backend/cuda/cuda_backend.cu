/* The cuda backend: device and pinned memory, asynchronous copies, streams
 * and events, strided-batched SGEMM (cuBLAS), and the table that wires in
 * the element-wise kernels of cuda_elementwise.cu.
 *
 * fp32 GEMMs are SGEMM (no TF32); with be->gemm_inputs DS_BF16 the inputs
 * are rounded to bf16 and multiplied on tensor cores (cuda_gemm_bf16.cu).
 *
 * Row-major GEMM on column-major cuBLAS: a row-major m x n matrix with leading
 * dimension ld is, read column-major, its n x m transpose with the same ld. So
 * C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T (column-major): call
 * cuBLAS with the operands swapped, (n, m, k), B first, the same leading
 * dimensions and the same transpose flags.
 *
 * cuRAND is linked but no generator is created: the RNG slots use the Philox
 * of engine/backend/math.h, which is cuRAND's Philox4_32_10 with cuRAND's
 * device-API counter layout, evaluated by our own code so that cpu and cuda
 * produce the same bits (cuRAND's host generators order their output in their
 * own way, and their normal transform is not ours). */
#include <stdlib.h>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/nn.h"

/* ---- memory ---------------------------------------------------------------- */

static ds_status cuda_alloc(ds_backend *be, size_t bytes, ds_mem_place place, void **out) {
    *out = NULL;
    DS_CUDA_ENTER(be);
    void *p = NULL;
    if (place == DS_PLACE_DEVICE) {
        DS_CHECK_CUDA(cudaMalloc(&p, bytes));
        /* zeroed before any stream, blocking or not, can see it */
        cudaError_t e = cudaMemsetAsync(p, 0, bytes, DS_CUDA_DEFAULT_STREAM);
        if (e == cudaSuccess) e = cudaStreamSynchronize(DS_CUDA_DEFAULT_STREAM);
        if (e != cudaSuccess) {
            cudaFree(p);
            return ds_cuda_fail("cudaMemsetAsync(new allocation, 0)", __FILE__, __LINE__,
                                cudaGetErrorName(e), cudaGetErrorString(e));
        }
    } else if (place == DS_PLACE_HOST) {
        /* Portable: pinned for every device's context, as the offload and
         * communication threads may use another one. */
        DS_CHECK_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
        memset(p, 0, bytes);
    } else {
        return DS_ERR(DS_ERR_INVALID_ARG, "cuda alloc: unknown place %d", (int)place);
    }
    *out = p;
    return DS_OK;
}

/* The slot returns nothing: a failure (a sticky error of an earlier kernel,
 * usually) is recorded as the last error for whoever looks next. */
static void cuda_free(ds_backend *be, void *ptr, ds_mem_place place) {
    if (!ptr) return;
    cudaError_t e = cudaSetDevice(be->device);
    if (e == cudaSuccess) e = place == DS_PLACE_HOST ? cudaFreeHost(ptr) : cudaFree(ptr);
    if (e != cudaSuccess)
        ds_cuda_fail(place == DS_PLACE_HOST ? "cudaFreeHost" : "cudaFree", __FILE__, __LINE__,
                     cudaGetErrorName(e), cudaGetErrorString(e));
}

static ds_status cuda_memcpy(ds_backend *be, void *dst, const void *src, size_t bytes,
                             ds_copy_kind kind, ds_stream *stream) {
    cudaMemcpyKind k;
    switch (kind) {
    case DS_COPY_H2D: k = cudaMemcpyHostToDevice; break;
    case DS_COPY_D2H: k = cudaMemcpyDeviceToHost; break;
    case DS_COPY_D2D: k = cudaMemcpyDeviceToDevice; break;
    case DS_COPY_H2H: k = cudaMemcpyHostToHost; break;
    case DS_COPY_DEFAULT: k = cudaMemcpyDefault; break;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "cuda memcpy: unknown copy kind %d", (int)kind);
    }
    if (bytes == 0) return DS_OK;
    if (!dst || !src)
        return DS_ERR(DS_ERR_INVALID_ARG, "cuda memcpy: NULL pointer (dst=%p src=%p) for %zu bytes",
                      dst, src, bytes);
    DS_CUDA_ENTER(be);
    DS_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, k, ds_cuda_stream(stream)));
    return DS_OK;
}

static ds_status cuda_memset(ds_backend *be, void *dst, int value, size_t bytes,
                             ds_stream *stream) {
    if (bytes == 0) return DS_OK;
    if (!dst) return DS_ERR(DS_ERR_INVALID_ARG, "cuda memset: dst is NULL for %zu bytes", bytes);
    DS_CUDA_ENTER(be);
    DS_CHECK_CUDA(cudaMemsetAsync(dst, value, bytes, ds_cuda_stream(stream)));
    return DS_OK;
}

/* ---- ordering ---------------------------------------------------------------- */

static ds_status cuda_sync(ds_backend *be) {
    DS_CUDA_ENTER(be);
    DS_CHECK_CUDA(cudaDeviceSynchronize());
    return DS_OK;
}

static ds_status cuda_stream_create(ds_backend *be, ds_stream **out) {
    *out = NULL;
    DS_CUDA_ENTER(be);
    cudaStream_t s = NULL;
    DS_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = (ds_stream *)s;
    return DS_OK;
}

static void cuda_stream_destroy(ds_backend *be, ds_stream *s) {
    if (!s) return;
    cudaError_t e = cudaSetDevice(be->device);
    if (e == cudaSuccess) e = cudaStreamDestroy(ds_cuda_stream(s));
    if (e != cudaSuccess)
        ds_cuda_fail("cudaStreamDestroy", __FILE__, __LINE__, cudaGetErrorName(e),
                     cudaGetErrorString(e));
}

static ds_status cuda_stream_sync(ds_backend *be, ds_stream *s) {
    DS_CUDA_ENTER(be);
    DS_CHECK_CUDA(cudaStreamSynchronize(ds_cuda_stream(s)));
    return DS_OK;
}

static ds_status cuda_event_create(ds_backend *be, ds_event **out) {
    *out = NULL;
    DS_CUDA_ENTER(be);
    cudaEvent_t e = NULL;
    /* no timing: recording and waiting are cheaper without it */
    DS_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = (ds_event *)e;
    return DS_OK;
}

static void cuda_event_destroy(ds_backend *be, ds_event *ev) {
    if (!ev) return;
    cudaError_t e = cudaSetDevice(be->device);
    if (e == cudaSuccess) e = cudaEventDestroy((cudaEvent_t)ev);
    if (e != cudaSuccess)
        ds_cuda_fail("cudaEventDestroy", __FILE__, __LINE__, cudaGetErrorName(e),
                     cudaGetErrorString(e));
}

static ds_status cuda_event_record(ds_backend *be, ds_event *e, ds_stream *s) {
    if (!e) return DS_ERR(DS_ERR_INVALID_ARG, "cuda event_record: event is NULL");
    DS_CUDA_ENTER(be);
    DS_CHECK_CUDA(cudaEventRecord((cudaEvent_t)e, ds_cuda_stream(s)));
    return DS_OK;
}

static ds_status cuda_stream_wait_event(ds_backend *be, ds_stream *s, ds_event *e) {
    if (!e) return DS_ERR(DS_ERR_INVALID_ARG, "cuda stream_wait_event: event is NULL");
    DS_CUDA_ENTER(be);
    DS_CHECK_CUDA(cudaStreamWaitEvent(ds_cuda_stream(s), (cudaEvent_t)e, 0));
    return DS_OK;
}

/* ---- GEMM ---------------------------------------------------------------------- */

static ds_status cuda_gemm(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                           float alpha, const float *A, int lda, int64_t strideA, const float *B,
                           int ldb, int64_t strideB, float beta, float *C, int ldc,
                           int64_t strideC, int batch) {
    DS_TRY(ds_check_gemm("cuda gemm", transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB,
                         C, ldc, strideC, batch));
    if (m == 0 || n == 0 || batch == 0) return DS_OK;
    if (k == 0) {
        DS_TRY(ds_cuda_gemm_beta(be, beta, C, m, n, ldc, strideC, batch));
        return DS_OK;
    }
    if (be->gemm_inputs == DS_BF16)
        return ds_cuda_gemm_bf16(be, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
                                 strideB, beta, C, ldc, strideC, batch);
    DS_CUDA_ENTER(be);
    ds_cuda_impl *im = ds_cuda_impl_of(be);
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    DS_CHECK_CUBLAS(cublasSgemmStridedBatched(im->blas, opb, opa, n, m, k, &alpha, B, ldb,
                                              (long long)strideB, A, lda, (long long)strideA,
                                              &beta, C, ldc, (long long)strideC, batch));
    return DS_OK;
}

/* The bias rows, then the product added to them: the same bits as the
 * models' way before the slot (a cuBLASLt bias epilogue would add the bias
 * after the sum, other bits than the cpu backend's). */
static ds_status cuda_gemm_bias(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                                const float *A, int lda, const float *B, int ldb,
                                const float *bias, float *C) {
    if (!bias) return DS_ERR(DS_ERR_INVALID_ARG, "cuda gemm_bias: bias is NULL");
    /* before the bias rows are written: a refused call leaves C as it was */
    DS_TRY(ds_check_gemm("cuda gemm_bias", transa, transb, m, n, k, A, lda, 0, B, ldb, 0, C, n, 0,
                         1));
    DS_TRY(be->nn->bcast_add_fwd(be, C, bias, m, n, false));
    return cuda_gemm(be, transa, transb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, 1.0f, C, n, 0, 1);
}

/* ---- lifetime ------------------------------------------------------------------- */

ds_status ds_cuda_buf_reserve(ds_cuda_buf *b, size_t bytes, void **out) {
    if (bytes > b->bytes) {
        if (b->p) DS_CHECK_CUDA(cudaFree(b->p));
        b->p = NULL;
        b->bytes = 0;
        DS_CHECK_CUDA(cudaMalloc(&b->p, bytes));
        b->bytes = bytes;
    }
    *out = b->p;
    return DS_OK;
}

ds_status ds_cuda_scratch(ds_backend *be, size_t bytes, void **out) {
    ds_cuda_buf *b = &ds_cuda_impl_of(be)->scratch;
    size_t before = b->bytes;
    ds_status st = ds_cuda_buf_reserve(b, bytes, out);
    /* the accountant follows the buffer, failed growth (freed, then 0) included;
     * nothing (no lock) on the usual call, which reuses it */
    if (b->bytes != before)
        ds_mem_add(be->mem, DS_MEM_BUFFERS, DS_PLACE_DEVICE, (int64_t)b->bytes - (int64_t)before);
    return st;
}

static void cuda_impl_release(ds_backend *be, ds_cuda_impl *im) {
    if (!im) return;
    cudaSetDevice(be->device);
    /* teardown: failures here can only be sticky errors already reported */
    if (im->blas) cublasDestroy(im->blas);
    if (im->sumsq_dev) cudaFree(im->sumsq_dev);
    if (im->sumsq_host) cudaFreeHost(im->sumsq_host);
    if (im->bad_index_dev) cudaFree(im->bad_index_dev);
    if (im->scratch.p) cudaFree(im->scratch.p);
    ds_mem_add(be->mem, DS_MEM_BUFFERS, DS_PLACE_DEVICE, -(int64_t)im->scratch.bytes);
    free(im);
}

static void cuda_destroy(ds_backend *be) {
    cuda_impl_release(be, ds_cuda_impl_of(be));
    be->impl = NULL;
}

static ds_status cuda_mem_info(ds_backend *be, size_t *free_bytes, size_t *total_bytes) {
    DS_CHECK_CUDA(cudaSetDevice(be->device));
    DS_CHECK_CUDA(cudaMemGetInfo(free_bytes, total_bytes));
    return DS_OK;
}

static const ds_backend_ops k_cuda_ops = {
    /* .name = */ "cuda",
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .memcpy = */ cuda_memcpy,
    /* .memset = */ cuda_memset,
    /* .sync = */ cuda_sync,
    /* .stream_create = */ cuda_stream_create,
    /* .stream_destroy = */ cuda_stream_destroy,
    /* .stream_sync = */ cuda_stream_sync,
    /* .event_create = */ cuda_event_create,
    /* .event_destroy = */ cuda_event_destroy,
    /* .event_record = */ cuda_event_record,
    /* .stream_wait_event = */ cuda_stream_wait_event,
    /* .gemm = */ cuda_gemm,
    /* .gemm_bias = */ cuda_gemm_bias,
    /* .rng_normal = */ ds_cuda_rng_normal,
    /* .rng_uniform = */ ds_cuda_rng_uniform,
    /* .cast = */ ds_cuda_cast,
    /* .fill = */ ds_cuda_fill,
    /* .scale = */ ds_cuda_scale,
    /* .axpy = */ ds_cuda_axpy,
    /* .sumsq = */ ds_cuda_sumsq,
    /* .adam = */ ds_cuda_adam,
    /* .sgd = */ ds_cuda_sgd,
    /* .quantize_i8 = */ ds_cuda_quantize_i8,
    /* .dequantize_i8 = */ ds_cuda_dequantize_i8,
    /* .quantize_i4 = */ ds_cuda_quantize_i4,
    /* .dequantize_i4 = */ ds_cuda_dequantize_i4,
    /* .onebit_encode = */ ds_cuda_onebit_encode,
    /* .onebit_decode = */ ds_cuda_onebit_decode,
    /* .onebit_pass = */ ds_cuda_onebit_pass,
    /* .rows_nonzero = */ ds_cuda_rows_nonzero,
    /* .rows_gather = */ ds_cuda_rows_gather,
    /* .rows_scatter = */ ds_cuda_rows_scatter,
    /* .rows_sum = */ ds_cuda_rows_sum,
    /* .destroy = */ cuda_destroy,
    /* .mem_info = */ cuda_mem_info,
};

/* The body of ds_backend_cuda_init; on failure the caller releases `im`. */
static ds_status cuda_setup(ds_backend *be, ds_cuda_impl *im, const ds_backend_desc *desc) {
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    /* the two ways a machine with the CUDA libraries has no GPU to use, each
     * said as what is missing rather than as the runtime's error name */
    if (ce == cudaErrorInsufficientDriver) {
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        if (drv == 0)
            return DS_ERR(DS_ERR_UNSUPPORTED, "cuda backend: no NVIDIA driver (libcuda.so.1 is "
                          "not installed or not on the loader's path): no GPU can be used here");
        return DS_ERR(DS_ERR_UNSUPPORTED, "cuda backend: the NVIDIA driver supports CUDA %d.%d, "
                      "older than the CUDA %d.%d runtime this build uses: update the driver",
                      drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    }
    if (ce == cudaErrorNoDevice || (ce == cudaSuccess && count == 0)) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return DS_ERR(DS_ERR_UNSUPPORTED, "cuda backend: the NVIDIA driver is installed but no "
                      "GPU is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
                      vis ? vis : "", vis ? ")" : "");
    }
    DS_CHECK_CUDA(ce);
    if (desc->share_devices && desc->device >= 0) be->device = desc->device % count;
    if (be->device < 0 || be->device >= count) {
        /* the engine asks for its local rank's GPU: more ranks on a host than
         * GPUs (NCCL would refuse two ranks on one GPU anyway) */
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return DS_ERR(DS_ERR_INVALID_ARG, "cuda backend: GPU %d requested (each rank takes the "
                      "GPU of its local rank) but %d visible%s%s%s: start at most %d rank%s per "
                      "host, one GPU each (or zero_engine.comm \"mpi\", whose ranks may share "
                      "one)", be->device, count,
                      vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "",
                      count, count == 1 ? "" : "s");
    }
    DS_CHECK_CUDA(cudaSetDevice(be->device));
    DS_CHECK_CUDA(cudaDeviceGetAttribute(&im->sm_count, cudaDevAttrMultiProcessorCount,
                                         be->device));
    /* enough resident blocks to fill every SM several times over */
    im->max_blocks = im->sm_count * 8;
    DS_CHECK_CUBLAS(cublasCreate(&im->blas));
    DS_CHECK_CUBLAS(cublasSetStream(im->blas, DS_CUDA_DEFAULT_STREAM));
    /* Plain fp32 (no TF32 tensor cores): results comparable with the cpu
     * backend to fp32 rounding. */
    DS_CHECK_CUBLAS(cublasSetMathMode(im->blas, CUBLAS_DEFAULT_MATH));
    DS_CHECK_CUDA(cudaMalloc((void **)&im->sumsq_dev, DS_CUDA_SUMSQ_BLOCKS * sizeof(double)));
    DS_CHECK_CUDA(cudaHostAlloc((void **)&im->sumsq_host, DS_CUDA_SUMSQ_BLOCKS * sizeof(double),
                                cudaHostAllocPortable));
    DS_CHECK_CUDA(cudaMalloc((void **)&im->bad_index_dev, sizeof *im->bad_index_dev));
    return DS_OK;
}

extern "C" ds_status ds_backend_cuda_init(ds_backend *be, const ds_backend_desc *desc) {
    if (desc->num_threads < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "cuda backend: num_threads must be >= 0, got %d",
                      desc->num_threads);
    ds_cuda_impl *im = (ds_cuda_impl *)calloc(1, sizeof *im);
    if (!im) return DS_ERR(DS_ERR_OOM, "cuda backend: out of host memory");
    be->device = desc->device;
    ds_status st = cuda_setup(be, im, desc);
    if (st != DS_OK) {
        ds_error_prefix("creating the cuda backend on device %d", be->device);
        cuda_impl_release(be, im);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    be->ops = &k_cuda_ops;
    be->impl = im;
    /* host threads for whatever host-side work the engine does beside the
     * device (the device kernels do not use it) */
    be->num_threads = desc->num_threads > 0 ? desc->num_threads : 1;
    return DS_OK;
}
