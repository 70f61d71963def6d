/* The cuda backend's element-wise slots: RNG, casts, fill, scale, axpy, sum of
 * squares, Adam and SGD, and the k = 0 case of GEMM. Each kernel is a
 * grid-stride loop around the same DS_HD functions (engine/backend/math.h,
 * engine/core/dtype.h) that the cpu loops call, with the same argument
 * checks, so both backends compute the same bits for every element-wise slot
 * (sumsq aside: its summation order differs, see there). The dtype arguments
 * are uniform across a launch, so their branches inside the loops cost a
 * predicated instruction, not divergence. */
#include "engine/backend/cuda/cuda_common.cuh"

/* ---- random numbers ------------------------------------------------------------ */

/* One thread per Philox block; element j of the stream lands in dst[j - offset]
 * when offset <= j < end (the cpu loop's layout, cpu_elementwise.c). */
__global__ void ds_k_rng_uniform(float *dst, uint64_t first, uint64_t nblocks, uint64_t offset,
                                 uint64_t end, float lo, float span, uint64_t seed) {
    DS_GRID_STRIDE(bi, nblocks) {
        uint64_t b = first + bi;
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, b);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint64_t j = 4 * b + (uint64_t)l;
            if (j >= offset && j < end) dst[j - offset] = ds_rng_bits_to_uniform(w.v[l], lo, span);
        }
    }
}

__global__ void ds_k_rng_normal(float *dst, uint64_t first, uint64_t nblocks, uint64_t offset,
                                uint64_t end, float mean, float std, uint64_t seed) {
    DS_GRID_STRIDE(bi, nblocks) {
        uint64_t b = first + bi;
        float z[4];
        ds_rng_normal_block(seed, b, z);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint64_t j = 4 * b + (uint64_t)l;
            if (j >= offset && j < end) dst[j - offset] = fmaf(std, z[l], mean);
        }
    }
}

ds_status ds_cuda_rng_uniform(ds_backend *be, float *dst, size_t n, float lo, float hi,
                              uint64_t seed, uint64_t offset) {
    DS_TRY(ds_check_rng("cuda rng_uniform", dst, n, offset));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    uint64_t end = offset + n, first = offset >> 2, nblocks = ((end - 1) >> 2) - first + 1;
    ds_k_rng_uniform<<<DS_CUDA_GRID(be, nblocks)>>>(dst, first, nblocks, offset, end, lo, hi - lo,
                                                    seed);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_rng_normal(ds_backend *be, float *dst, size_t n, float mean, float std,
                             uint64_t seed, uint64_t offset) {
    DS_TRY(ds_check_rng("cuda rng_normal", dst, n, offset));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    uint64_t end = offset + n, first = offset >> 2, nblocks = ((end - 1) >> 2) - first + 1;
    ds_k_rng_normal<<<DS_CUDA_GRID(be, nblocks)>>>(dst, first, nblocks, offset, end, mean, std,
                                                   seed);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* ---- casts, fill, scale, axpy -------------------------------------------------- */

__global__ void ds_k_cast(void *dst, ds_dtype dt, const void *src, ds_dtype st, size_t n) {
    DS_GRID_STRIDE(i, n) ds_store_f32(dst, dt, i, ds_load_f32(src, st, i));
}

__global__ void ds_k_fill(float *x, size_t n, float value) {
    DS_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void ds_k_scale(void *x, ds_dtype t, size_t n, float alpha) {
    DS_GRID_STRIDE(i, n) ds_store_f32(x, t, i, ds_load_f32(x, t, i) * alpha);
}

__global__ void ds_k_axpy(void *y, ds_dtype yt, float alpha, const void *x, ds_dtype xt,
                          size_t n) {
    DS_GRID_STRIDE(i, n)
    ds_store_f32(y, yt, i, fmaf(alpha, ds_load_f32(x, xt, i), ds_load_f32(y, yt, i)));
}

ds_status ds_cuda_cast(ds_backend *be, void *dst, ds_dtype dst_t, const void *src,
                       ds_dtype src_t, size_t n) {
    DS_TRY(ds_check_float_dtype("cuda cast", "dst", dst_t));
    DS_TRY(ds_check_float_dtype("cuda cast", "src", src_t));
    DS_TRY(ds_check_ptr("cuda cast", "dst", dst, n));
    DS_TRY(ds_check_ptr("cuda cast", "src", src, n));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    if (dst_t == src_t) {
        if (dst != src)
            DS_CHECK_CUDA(cudaMemcpyAsync(dst, src, n * ds_dtype_size(dst_t),
                                          cudaMemcpyDeviceToDevice, DS_CUDA_DEFAULT_STREAM));
        return DS_OK;
    }
    ds_k_cast<<<DS_CUDA_GRID(be, n)>>>(dst, dst_t, src, src_t, n);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_fill(ds_backend *be, float *x, size_t n, float value) {
    DS_TRY(ds_check_ptr("cuda fill", "x", x, n));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_fill<<<DS_CUDA_GRID(be, n)>>>(x, n, value);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_scale(ds_backend *be, void *x, ds_dtype t, size_t n, float alpha) {
    DS_TRY(ds_check_float_dtype("cuda scale", "x", t));
    DS_TRY(ds_check_ptr("cuda scale", "x", x, n));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_scale<<<DS_CUDA_GRID(be, n)>>>(x, t, n, alpha);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_axpy(ds_backend *be, void *y, ds_dtype yt, float alpha, const void *x,
                       ds_dtype xt, size_t n) {
    DS_TRY(ds_check_float_dtype("cuda axpy", "y", yt));
    DS_TRY(ds_check_float_dtype("cuda axpy", "x", xt));
    DS_TRY(ds_check_ptr("cuda axpy", "y", y, n));
    DS_TRY(ds_check_ptr("cuda axpy", "x", x, n));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_axpy<<<DS_CUDA_GRID(be, n)>>>(y, yt, alpha, x, xt, n);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* ---- sum of squares ----------------------------------------------------------------
 * A fixed grid of `blocks` blocks: each thread sums its grid-stride elements
 * in double, each block reduces its threads in shared memory in a fixed tree
 * and writes one partial; the host adds the partials in block order. No
 * atomics, so the bits depend only on n and the grid (DS_CUDA_SUMSQ_BLOCKS,
 * capped by n), not on scheduling. The non-finite flag comes from the total
 * as on cpu: the double sum of squares of floats is finite exactly when every
 * element is. The partials live in the backend's one scratch buffer, so two
 * host threads must not call sumsq on the same backend at once. */
__global__ void ds_k_sumsq(const void *x, ds_dtype t, size_t n, double *partial) {
    __shared__ double acc[DS_CUDA_THREADS];
    double s = 0.0;
    DS_GRID_STRIDE(i, n) {
        double v = (double)ds_load_f32(x, t, i);
        s += v * v;
    }
    double total = ds_block_sum_f64(acc, s);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

ds_status ds_cuda_sumsq(ds_backend *be, const void *x, ds_dtype t, size_t n, double *out_sumsq,
                        int *out_nonfinite) {
    DS_TRY(ds_check_float_dtype("cuda sumsq", "x", t));
    DS_TRY(ds_check_ptr("cuda sumsq", "x", x, n));
    if (!out_sumsq || !out_nonfinite)
        return DS_ERR(DS_ERR_INVALID_ARG, "cuda sumsq: NULL output (out_sumsq=%p out_nonfinite=%p)",
                      (void *)out_sumsq, (void *)out_nonfinite);
    if (n == 0) {
        *out_sumsq = 0.0;
        *out_nonfinite = 0;
        return DS_OK;
    }
    DS_CUDA_ENTER(be);
    ds_cuda_impl *im = ds_cuda_impl_of(be);
    size_t want = (n + DS_CUDA_THREADS - 1) / DS_CUDA_THREADS;
    unsigned blocks = (unsigned)(want < DS_CUDA_SUMSQ_BLOCKS ? want : DS_CUDA_SUMSQ_BLOCKS);
    ds_k_sumsq<<<blocks, DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(x, t, n, im->sumsq_dev);
    DS_CHECK_LAUNCH();
    DS_CHECK_CUDA(cudaMemcpyAsync(im->sumsq_host, im->sumsq_dev, blocks * sizeof(double),
                                  cudaMemcpyDeviceToHost, DS_CUDA_DEFAULT_STREAM));
    DS_CHECK_CUDA(cudaStreamSynchronize(DS_CUDA_DEFAULT_STREAM));
    double total = 0.0;
    for (unsigned b = 0; b < blocks; b++) total += im->sumsq_host[b];
    *out_sumsq = total;
    *out_nonfinite = isfinite(total) ? 0 : 1;
    return DS_OK;
}

/* ---- optimizers ----------------------------------------------------------------------- */

__global__ void ds_k_adam(float *param, const void *grad, ds_dtype grad_t, float *m, float *v,
                          size_t n, ds_adam_coef c, void *param_lp, ds_dtype lp_t) {
    DS_GRID_STRIDE(i, n) {
        ds_adam_update(&param[i], &m[i], &v[i], ds_load_f32(grad, grad_t, i), &c);
        if (param_lp) ds_store_f32(param_lp, lp_t, i, param[i]);
    }
}

__global__ void ds_k_sgd(float *param, const void *grad, ds_dtype grad_t, float *buf, size_t n,
                         ds_sgd_coef c, void *param_lp, ds_dtype lp_t) {
    DS_GRID_STRIDE(i, n) {
        ds_sgd_update(&param[i], buf ? &buf[i] : NULL, ds_load_f32(grad, grad_t, i), &c);
        if (param_lp) ds_store_f32(param_lp, lp_t, i, param[i]);
    }
}

ds_status ds_cuda_adam(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                       float grad_mult, float *m, float *v, size_t n, const ds_adam_hparams *hp,
                       void *param_lp, ds_dtype lp_t) {
    DS_TRY(ds_check_optim("cuda adam", param, grad, grad_t, n, hp, param_lp, lp_t));
    DS_TRY(ds_check_ptr("cuda adam", "m", m, n));
    DS_TRY(ds_check_ptr("cuda adam", "v", v, n));
    DS_TRY(ds_check_adam("cuda adam", hp->beta1, hp->beta2, hp->eps, hp->step,
                         hp->bias_correction));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_adam_coef c = ds_adam_coef_make(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay,
                                       hp->step, hp->adam_w_mode, hp->bias_correction, grad_mult);
    ds_k_adam<<<DS_CUDA_GRID(be, n)>>>(param, grad, grad_t, m, v, n, c, param_lp, lp_t);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_sgd(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                      float grad_mult, float *momentum_buf, size_t n, const ds_sgd_hparams *hp,
                      void *param_lp, ds_dtype lp_t) {
    DS_TRY(ds_check_optim("cuda sgd", param, grad, grad_t, n, hp, param_lp, lp_t));
    DS_TRY(ds_check_sgd("cuda sgd", hp->momentum, hp->dampening, hp->nesterov));
    if (hp->momentum != 0.0f) DS_TRY(ds_check_ptr("cuda sgd", "momentum_buf", momentum_buf, n));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_sgd_coef c = ds_sgd_coef_make(hp->lr, hp->momentum, hp->dampening, hp->weight_decay,
                                     hp->nesterov, hp->first_step, grad_mult);
    ds_k_sgd<<<DS_CUDA_GRID(be, n)>>>(param, grad, grad_t, momentum_buf, n, c, param_lp, lp_t);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* ---- GEMM with k = 0 --------------------------------------------------------------------
 * C = beta * C; beta == 0 writes zeros without reading C (BLAS semantics). */
__global__ void ds_k_gemm_beta(float beta, float *C, int m, int n, int ldc, int64_t strideC,
                               size_t total) {
    DS_GRID_STRIDE(idx, total) {
        size_t per = (size_t)m * (size_t)n;
        size_t b = idx / per, r = idx % per;
        size_t row = r / (size_t)n, col = r % (size_t)n;
        float *c = C + (int64_t)b * strideC + (int64_t)row * ldc + (int64_t)col;
        *c = beta == 0.0f ? 0.0f : beta * *c;
    }
}

ds_status ds_cuda_gemm_beta(ds_backend *be, float beta, float *C, int m, int n, int ldc,
                            int64_t strideC, int batch) {
    size_t total = (size_t)m * (size_t)n * (size_t)batch;
    if (total == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_gemm_beta<<<DS_CUDA_GRID(be, total)>>>(beta, C, m, n, ldc, strideC, total);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
