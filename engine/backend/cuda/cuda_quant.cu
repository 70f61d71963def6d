/* The cuda backend's quantization slots (backend.h): blockwise symmetric int8
 * of ZeRO++ qwZ, and int4 in DeepSpeed's arithmetic (its qgZ, math.h 2c).
 * One thread block per quantization block: its threads take the block's max
 * (a max, so the order of the reduction does not change it), then quantize
 * their elements with the DS_HD functions of engine/backend/math.h (2b, 2c)
 * that the cpu loops call: the same bytes on both
 * backends. */
#include "engine/backend/cuda/cuda_common.cuh"

/* Thread blocks per launch at most; a grid-stride loop takes the rest. */
#define DS_Q8_MAX_GRID 65535u

/* The largest magnitude of x[lo, hi) (math.h 2b: the max both codecs scale
 * by), reduced through part in shared memory. Every thread of the block
 * calls it (it synchronises the block) and gets the same value. */
static __device__ float block_absmax(float *part, const void *x, ds_dtype t, size_t lo, size_t hi) {
    float m = 0.0f;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        m = ds_q8_absmax_acc(m, ds_load_f32(x, t, i));
    part[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            part[threadIdx.x] = ds_q8_absmax_acc(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    float mx = part[0];
    __syncthreads(); /* part is rewritten by the next block's pass */
    return mx;
}

__global__ void ds_k_quantize_i8(int8_t *q, float *scales, const void *x, ds_dtype t, size_t n,
                                 size_t block, size_t nb) {
    __shared__ float part[DS_CUDA_THREADS]; /* block_absmax's partial maxima */
    for (size_t b = blockIdx.x; b < nb; b += gridDim.x) {
        size_t lo = b * block, hi = n - lo < block ? n : lo + block;
        float mx = block_absmax(part, x, t, lo, hi);
        float inv = ds_q8_inv(mx);
        if (threadIdx.x == 0) scales[b] = ds_q8_step(mx);
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
            q[i] = ds_q8_quantize(ds_load_f32(x, t, i), inv);
    }
}

__global__ void ds_k_dequantize_i8(float *y, const int8_t *q, const float *scales, size_t n,
                                   size_t block) {
    DS_GRID_STRIDE(i, n) y[i] = ds_q8_dequantize(q[i], scales[i / block]);
}

ds_status ds_cuda_quantize_i8(ds_backend *be, int8_t *q, float *scales, const void *x,
                              ds_dtype t, size_t n, size_t block) {
    DS_TRY(ds_check_float_dtype("cuda quantize_i8", "x", t));
    DS_TRY(ds_check_q8("cuda quantize_i8", "x", x, q, scales, n, block));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    size_t nb = ds_q8_nblocks(n, block);
    unsigned grid = nb < DS_Q8_MAX_GRID ? (unsigned)nb : DS_Q8_MAX_GRID;
    ds_k_quantize_i8<<<grid, DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(q, scales, x, t, n,
                                                                           block, nb);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_dequantize_i8(ds_backend *be, float *y, const int8_t *q, const float *scales,
                                size_t n, size_t block) {
    DS_TRY(ds_check_q8("cuda dequantize_i8", "y", y, q, scales, n, block));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_dequantize_i8<<<DS_CUDA_GRID(be, n)>>>(y, q, scales, n, block);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* int4: one thread block per quantization block as above; each thread then
 * writes whole bytes (two values; block is even, so a byte never straddles
 * two blocks), the same bytes as the cpu loop. */
__global__ void ds_k_quantize_i4(uint8_t *q, float *scales, const void *x, ds_dtype t, size_t n,
                                 size_t block, size_t nb) {
    __shared__ float part[DS_CUDA_THREADS]; /* block_absmax's partial maxima */
    for (size_t b = blockIdx.x; b < nb; b += gridDim.x) {
        size_t lo = b * block, hi = n - lo < block ? n : lo + block;
        float mx = block_absmax(part, x, t, lo, hi);
        float mult = ds_q4_mult(mx);
        if (threadIdx.x == 0) scales[b] = ds_q4_step(mult);
        for (size_t i = lo + 2 * threadIdx.x; i < hi; i += 2 * blockDim.x) {
            int odd = i + 1 < hi ? ds_q4_quantize(ds_load_f32(x, t, i + 1), mult) : 0;
            q[i / 2] = ds_q4_pack(ds_q4_quantize(ds_load_f32(x, t, i), mult), odd);
        }
    }
}

__global__ void ds_k_dequantize_i4(float *y, const uint8_t *q, const float *scales, size_t n,
                                   size_t block) {
    DS_GRID_STRIDE(i, n) y[i] = ds_q4_dequantize(ds_q4_unpack(q, i), scales[i / block]);
}

ds_status ds_cuda_quantize_i4(ds_backend *be, uint8_t *q, float *scales, const void *x,
                              ds_dtype t, size_t n, size_t block) {
    DS_TRY(ds_check_float_dtype("cuda quantize_i4", "x", t));
    DS_TRY(ds_check_q4("cuda quantize_i4", "x", x, q, scales, n, block));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    size_t nb = ds_q8_nblocks(n, block);
    unsigned grid = nb < DS_Q8_MAX_GRID ? (unsigned)nb : DS_Q8_MAX_GRID;
    ds_k_quantize_i4<<<grid, DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(q, scales, x, t, n,
                                                                           block, nb);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_dequantize_i4(ds_backend *be, float *y, const uint8_t *q, const float *scales,
                                size_t n, size_t block) {
    DS_TRY(ds_check_q4("cuda dequantize_i4", "y", y, q, scales, n, block));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_dequantize_i4<<<DS_CUDA_GRID(be, n)>>>(y, q, scales, n, block);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
