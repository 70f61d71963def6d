/* CUDA kernels of the element-wise layers: bias + activation and dropout
 * (fused with a bias and a residual). The activation is a template
 * parameter, so each instantiation holds no dispatch; the element math is
 * ds_act_fwd / ds_act_grad / ds_dropout_mult of nn_math.h. */
#include "engine/backend/cuda/nn_cuda.cuh"

/* The pre-activation as the cpu loop forms it: x + bias, or x itself without
 * a bias (not x + 0.0f, which turns -0 into +0, so NONE, GELU, TANH and
 * GELU_TANH returned +0 where cpu returns -0). */
__device__ __forceinline__ float ds_preact(const float *x, const float *bias, size_t i,
                                           int width) {
    return bias ? x[i] + bias[i % (size_t)width] : x[i];
}

template <int ACT>
__global__ void ds_k_bias_act_fwd(float *y, const float *x, const float *bias, int rows,
                                  int width) {
    DS_GRID_STRIDE(i, (size_t)rows * width) {
        float z = ds_preact(x, bias, i, width);
        y[i] = ds_act_fwd((ds_act)ACT, z);
    }
}

template <int ACT>
__global__ void ds_k_bias_act_bwd(float *dx, const float *dy, const float *x, const float *bias,
                                  int rows, int width) {
    DS_GRID_STRIDE(i, (size_t)rows * width) {
        float z = ds_preact(x, bias, i, width);
        dx[i] = dy[i] * ds_act_grad((ds_act)ACT, z);
    }
}

/* The cpu slot's checks, in its order and before the empty-shape return, so
 * both backends refuse the same calls with the same message. */
static ds_status ds_check_act(const char *slot, ds_act act) {
    if ((int)act < DS_ACT_NONE || act >= DS_ACT_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: unknown activation %d", slot, (int)act);
    return DS_OK;
}

ds_status ds_nn_cuda_bias_act_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                  int rows, int width, ds_act act) {
    DS_TRY(ds_check_act("bias_act_fwd", act));
    DS_CUDA_ENTER(be);
    if (rows <= 0 || width <= 0) return DS_OK;
    size_t n = (size_t)rows * width;
    switch (act) {
    case DS_ACT_NONE: ds_k_bias_act_fwd<DS_ACT_NONE><<<DS_CUDA_GRID(be, n)>>>(y, x, bias, rows, width); break;
    case DS_ACT_RELU: ds_k_bias_act_fwd<DS_ACT_RELU><<<DS_CUDA_GRID(be, n)>>>(y, x, bias, rows, width); break;
    case DS_ACT_GELU: ds_k_bias_act_fwd<DS_ACT_GELU><<<DS_CUDA_GRID(be, n)>>>(y, x, bias, rows, width); break;
    case DS_ACT_TANH: ds_k_bias_act_fwd<DS_ACT_TANH><<<DS_CUDA_GRID(be, n)>>>(y, x, bias, rows, width); break;
    case DS_ACT_GELU_TANH:
        ds_k_bias_act_fwd<DS_ACT_GELU_TANH><<<DS_CUDA_GRID(be, n)>>>(y, x, bias, rows, width);
        break;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_fwd: unknown activation %d", (int)act);
    }
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_nn_cuda_bias_act_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                  const float *x, const float *bias, int rows, int width,
                                  ds_act act) {
    DS_TRY(ds_check_act("bias_act_bwd", act));
    if (!dx && act != DS_ACT_NONE)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: dx may be NULL only for DS_ACT_NONE");
    DS_CUDA_ENTER(be);
    if (rows <= 0 || width <= 0) return DS_OK;
    size_t n = (size_t)rows * width;
    const float *d = dy; /* what dbias sums */
    switch (act) {
    case DS_ACT_NONE:
        if (dx && dx != dy)
            DS_CHECK_CUDA(cudaMemcpyAsync(dx, dy, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                          DS_CUDA_DEFAULT_STREAM));
        break;
    case DS_ACT_RELU: ds_k_bias_act_bwd<DS_ACT_RELU><<<DS_CUDA_GRID(be, n)>>>(dx, dy, x, bias, rows, width); break;
    case DS_ACT_GELU: ds_k_bias_act_bwd<DS_ACT_GELU><<<DS_CUDA_GRID(be, n)>>>(dx, dy, x, bias, rows, width); break;
    case DS_ACT_TANH: ds_k_bias_act_bwd<DS_ACT_TANH><<<DS_CUDA_GRID(be, n)>>>(dx, dy, x, bias, rows, width); break;
    case DS_ACT_GELU_TANH:
        ds_k_bias_act_bwd<DS_ACT_GELU_TANH><<<DS_CUDA_GRID(be, n)>>>(dx, dy, x, bias, rows, width);
        break;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: unknown activation %d", (int)act);
    }
    DS_CHECK_LAUNCH();
    if (act != DS_ACT_NONE) d = dx;
    if (dbias) DS_TRY(ds_nn_cuda_colsum(be, dbias, d, rows, width));
    return DS_OK;
}

/* ---- dropout ---- */

/* One thread per Philox block of the stream (4 consecutive elements), as
 * the rng kernels of cuda_elementwise.cu: element i of the tensor is stream
 * index offset + i. With keep (zeroed by the caller) the same draws also set
 * the mask's bits (nn_math.h): a block's 4 elements may span words (a row's
 * end splits them; below width 4 each is a row of its own), so a thread ORs
 * each word it touches once; up to 8 threads share a word, which atomicOr
 * makes safe. This replaces a second pass that ran Philox over the whole
 * tensor again for the bits (on an H100: the dropout kernels' GPU time 0.887
 * -> 0.762 ms per BERT-mini step at batch 256; bench/RESULTS.md). */
__global__ void ds_k_dropout_fwd(float *y, const float *x, const float *bias, const float *res,
                                 size_t n, int width, float p, float inv_keep, uint64_t seed,
                                 uint64_t offset, uint32_t *keep) {
    uint64_t first = offset >> 2, nblocks = ((offset + n - 1) >> 2) - first + 1;
    int ld = ds_dropout_mask_ld(width);
    DS_GRID_STRIDE(bi, nblocks) {
        uint64_t blk = first + bi;
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk);
        size_t word = ~(size_t)0;
        uint32_t bits = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint64_t j = 4 * blk + (uint64_t)l;
            if (j < offset || j >= offset + n) continue;
            size_t i = (size_t)(j - offset);
            float v = ds_preact(x, bias, i, width);
            float m = ds_dropout_mult(w.v[l], p, inv_keep);
            /* as the cpu loop: an explicit fma with a residual (not left to
             * nvcc's contraction), a plain product without (0.0f + v * m
             * would turn a dropped negative v's -0 into +0) */
            y[i] = res ? fmaf(v, m, res[i]) : v * m;
            if (keep) {
                size_t r = i / (size_t)width;
                int c = (int)(i - r * (size_t)width);
                size_t wd = r * (size_t)ld + (size_t)(c >> 5);
                if (wd != word) {
                    if (bits) atomicOr(&keep[word], bits);
                    word = wd;
                    bits = 0;
                }
                if (ds_dropout_keep(w.v[l], p)) bits |= 1u << (c & 31);
            }
        }
        if (bits) atomicOr(&keep[word], bits);
    }
}

__global__ void ds_k_dropout_bwd(float *dx, const float *dy, size_t n, float p, float inv_keep,
                                 uint64_t seed, uint64_t offset) {
    uint64_t first = offset >> 2, nblocks = ((offset + n - 1) >> 2) - first + 1;
    DS_GRID_STRIDE(bi, nblocks) {
        uint64_t blk = first + bi;
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint64_t j = 4 * blk + (uint64_t)l;
            if (j < offset || j >= offset + n) continue;
            size_t i = (size_t)(j - offset);
            dx[i] = dy[i] * ds_dropout_mult(w.v[l], p, inv_keep);
        }
    }
}

/* dropout_bwd from the forward's keep mask: one thread per element */
__global__ void ds_k_dropout_bwd_keep(float *dx, const float *dy, size_t n, int width,
                                      float inv_keep, const uint32_t *keep) {
    int ld = ds_dropout_mask_ld(width);
    DS_GRID_STRIDE(i, n) {
        size_t r = i / (size_t)width;
        int c = (int)(i % (size_t)width);
        bool k = (keep[r * ld + (size_t)(c >> 5)] >> (c & 31)) & 1u;
        dx[i] = dy[i] * (k ? inv_keep : 0.0f);
    }
}

/* p = 0: y = res + x + bias, no random numbers */
__global__ void ds_k_bias_add_res(float *y, const float *x, const float *bias, const float *res,
                                  size_t n, int width) {
    DS_GRID_STRIDE(i, n) {
        float v = ds_preact(x, bias, i, width);
        y[i] = res ? res[i] + v : v; /* cpu: fmaf(v, 1, res) = res + v, or v */
    }
}

ds_status ds_nn_cuda_dropout_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                 const float *res, int rows, int width, float p, uint64_t seed,
                                 uint64_t offset, uint32_t *keep) {
    DS_TRY(ds_check_dropout("dropout_fwd", p, rows, width, offset));
    DS_CUDA_ENTER(be);
    size_t n = (size_t)rows * width;
    if (n == 0) return DS_OK;
    if (p == 0.0f) {
        ds_k_bias_add_res<<<DS_CUDA_GRID(be, n)>>>(y, x, bias, res, n, width);
    } else {
        size_t nblocks = (size_t)(((offset + n - 1) >> 2) - (offset >> 2) + 1);
        if (keep)
            DS_CHECK_CUDA(cudaMemsetAsync(keep, 0,
                                          (size_t)rows * ds_dropout_mask_ld(width) *
                                              sizeof(uint32_t),
                                          DS_CUDA_DEFAULT_STREAM));
        ds_k_dropout_fwd<<<DS_CUDA_GRID(be, nblocks)>>>(y, x, bias, res, n, width, p,
                                                        1.0f / (1.0f - p), seed, offset, keep);
    }
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_nn_cuda_dropout_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                 int rows, int width, float p, uint64_t seed, uint64_t offset,
                                 const uint32_t *keep) {
    DS_TRY(ds_check_dropout("dropout_bwd", p, rows, width, offset));
    DS_CUDA_ENTER(be);
    size_t n = (size_t)rows * width;
    if (n == 0) return DS_OK;
    if (p == 0.0f) {
        if (dx != dy)
            DS_CHECK_CUDA(cudaMemcpyAsync(dx, dy, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                          DS_CUDA_DEFAULT_STREAM));
    } else if (keep) {
        ds_k_dropout_bwd_keep<<<DS_CUDA_GRID(be, n)>>>(dx, dy, n, width, 1.0f / (1.0f - p),
                                                       keep);
        DS_CHECK_LAUNCH();
    } else {
        size_t nblocks = (size_t)(((offset + n - 1) >> 2) - (offset >> 2) + 1);
        ds_k_dropout_bwd<<<DS_CUDA_GRID(be, nblocks)>>>(dx, dy, n, p, 1.0f / (1.0f - p), seed,
                                                        offset);
        DS_CHECK_LAUNCH();
    }
    if (dbias) DS_TRY(ds_nn_cuda_colsum(be, dbias, dx, rows, width));
    return DS_OK;
}
