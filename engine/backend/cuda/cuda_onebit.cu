/* The cuda backend's onebit slots (backend.h): the 1-bit code of the
 * compressed all-reduce and the passes of 1-bit / 0/1 Adam, each element
 * through the DS_HD functions of engine/backend/onebit_math.h that the cpu
 * loops call. The encode takes two launches and never waits for the device:
 * the compensated vector's sum of squares in block partials (a fixed grid
 * and tree, like sumsq: the bits depend only on n), then every block of the
 * packing kernel adds the partials in block order itself, so the scale is
 * computed on the device and reaches the records without a copy to the
 * host. */
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/onebit_math.h"

/* c = x + err (kept in err) and each block's sum of squares of c. */
__global__ void ds_k_onebit_sumsq(const float *x, float *err, size_t n, double *partial) {
    __shared__ double acc[DS_CUDA_THREADS];
    double s = 0.0;
    DS_GRID_STRIDE(i, n) {
        float c = x[i];
        if (err) {
            c += err[i];
            err[i] = c;
        }
        s += (double)c * (double)c; /* exact in double: fused or not, the same */
    }
    double total = ds_block_sum_f64(acc, s);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

/* One thread per byte of signs: record b's byte kk, then (with feedback)
 * what the code lost of those 8 elements. */
__global__ void ds_k_onebit_pack(const float *c, float *err, size_t n, const double *partial,
                                 unsigned nparts, unsigned char *wire, size_t bytes,
                                 size_t stride) {
    __shared__ float scale_sh;
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (unsigned b = 0; b < nparts; b++) total += partial[b];
        scale_sh = ds_onebit_scale(total, n);
    }
    __syncthreads();
    float scale = scale_sh;
    DS_GRID_STRIDE(k, n / 8) {
        unsigned char *rec = wire + k / bytes * stride;
        size_t kk = k % bytes;
        if (kk == 0) ds_onebit_put_scale(rec, scale);
        rec[sizeof(float) + kk] = ds_onebit_pack8(c + 8 * k);
        if (err)
            for (int j = 0; j < 8; j++) {
                float e = err[8 * k + j];
                err[8 * k + j] = e - ds_onebit_value(ds_onebit_bit(e), scale);
            }
    }
}

__global__ void ds_k_onebit_decode(const unsigned char *wire, size_t bytes, float alpha,
                                   bool accumulate, float *out) {
    /* DeepSpeed multiplies the signs by (scale * alpha), one rounding */
    float s = ds_onebit_get_scale(wire) * alpha;
    DS_GRID_STRIDE(k, bytes) {
        unsigned byte = wire[sizeof(float) + k];
        float *o = out + 8 * k;
        for (int j = 0; j < 8; j++) {
            float v = ds_onebit_value((byte >> (7 - j)) & 1, s);
            o[j] = accumulate ? o[j] + v : v;
        }
    }
}

__global__ void ds_k_onebit_pass(ds_onebit_pass p) {
    DS_GRID_STRIDE(i, p.n) ds_onebit_elem(&p, p.phase, i);
}

ds_status ds_cuda_onebit_encode(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                                void *wire, size_t stride) {
    DS_TRY(ds_check_onebit_code("cuda onebit_encode", "x", x, n, nblocks, wire, stride));
    if (n == 0) return DS_OK; /* no records: nothing written (as cpu) */
    DS_CUDA_ENTER(be);
    ds_cuda_impl *im = ds_cuda_impl_of(be);
    size_t want = (n + DS_CUDA_THREADS - 1) / DS_CUDA_THREADS;
    unsigned parts = (unsigned)(want < DS_CUDA_SUMSQ_BLOCKS ? want : DS_CUDA_SUMSQ_BLOCKS);
    if (parts < 1) parts = 1;
    /* the partials share sumsq's buffer: the same one thread per backend */
    ds_k_onebit_sumsq<<<parts, DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(x, err, n,
                                                                             im->sumsq_dev);
    DS_CHECK_LAUNCH();
    ds_k_onebit_pack<<<DS_CUDA_GRID(be, n / 8)>>>(err ? err : x, err, n, im->sumsq_dev, parts,
                                                  (unsigned char *)wire,
                                                  n / (size_t)nblocks / 8, stride);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_onebit_decode(ds_backend *be, const void *wire, size_t n, float alpha,
                                bool accumulate, float *out) {
    DS_TRY(ds_check_onebit_code("cuda onebit_decode", "out", out, n, 1, wire, 0));
    if (n == 0) return DS_OK; /* nothing encoded: no record to read */
    DS_CUDA_ENTER(be);
    ds_k_onebit_decode<<<DS_CUDA_GRID(be, n / 8)>>>((const unsigned char *)wire, n / 8, alpha,
                                                    accumulate, out);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_onebit_pass(ds_backend *be, const ds_onebit_pass *p) {
    DS_TRY(ds_check_onebit_pass("cuda onebit_pass", p));
    if (p->n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_onebit_pass<<<DS_CUDA_GRID(be, p->n)>>>(*p);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
