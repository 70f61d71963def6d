/* CUDA layer norm: one warp per row for the statistics, the output and the
 * input gradient; the gamma / beta gradients as column sums over the rows
 * (deterministic, as on cpu). */
#include "engine/backend/cuda/colsum.cuh"
#include "engine/backend/cuda/nn_cuda.cuh"

__global__ void ds_k_layernorm_fwd(float *y, float *mean, float *rstd, const float *x,
                                   const float *gamma, const float *beta, int64_t n, int h,
                                   float eps) {
    int lane = threadIdx.x % 32;
    DS_NN_WARP_ROWS(r, n) {
        const float *xr = x + r * h;
        float s = 0.0f;
        for (int c = lane; c < h; c += 32) s += xr[c];
        float m = ds_warp_sum(s) / (float)h;
        float v = 0.0f; /* two passes, as ds_ln_row_stats */
        for (int c = lane; c < h; c += 32) {
            float d = xr[c] - m;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(ds_warp_sum(v) / (float)h + eps);
        for (int c = lane; c < h; c += 32)
            y[r * h + c] = ds_ln_xhat(xr[c], m, rs) * gamma[c] + beta[c];
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

ds_status ds_nn_cuda_layernorm_fwd(ds_backend *be, float *y, float *mean, float *rstd,
                                   const float *x, const float *gamma, const float *beta, int n,
                                   int h, float eps) {
    DS_TRY(ds_check_ln_fwd("layernorm_fwd", y, mean, rstd, gamma, beta, n, h));
    DS_CUDA_ENTER(be);
    if (n == 0 || h == 0) return DS_OK;
    ds_k_layernorm_fwd<<<ds_nn_row_blocks(n), 32 * DS_NN_ROWS_PER_BLOCK, 0,
                         DS_CUDA_DEFAULT_STREAM>>>(y, mean, rstd, x, gamma, beta, n, h, eps);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* The two kernels one after the other (nn.h: the same bits as the two
 * calls); a kernel of its own would keep y's row in registers between them,
 * as the cpu does, which no GPU has measured yet. */
ds_status ds_nn_cuda_dropout_ln_fwd(ds_backend *be, float *y, float *z, float *mean, float *rstd,
                                    const float *x, const float *bias, const float *res,
                                    const float *gamma, const float *beta, int rows, int width,
                                    float p, uint64_t seed, uint64_t offset, uint32_t *keep,
                                    float eps) {
    /* both parts' checks first, named as the cpu names them: a refused call
     * writes nothing */
    DS_TRY(ds_check_ln_fwd("dropout_ln_fwd", z, mean, rstd, gamma, beta, rows, width));
    DS_TRY(ds_check_dropout("dropout_ln_fwd", p, rows, width, offset));
    DS_TRY(ds_nn_cuda_dropout_fwd(be, y, x, bias, res, rows, width, p, seed, offset, keep));
    return ds_nn_cuda_layernorm_fwd(be, z, mean, rstd, y, gamma, beta, rows, width, eps);
}

/* dx: each lane reads dy before it writes dx for the same columns, so dx
 * may alias dy. */
__global__ void ds_k_layernorm_bwd_dx(float *dx, const float *dy, const float *x,
                                      const float *mean, const float *rstd, const float *gamma,
                                      int64_t n, int h, int accumulate) {
    int lane = threadIdx.x % 32;
    DS_NN_WARP_ROWS(r, n) {
        float m = mean[r], rs = rstd[r];
        float a = 0.0f, c2 = 0.0f;
        for (int c = lane; c < h; c += 32) {
            float dg = dy[r * h + c] * gamma[c];
            a += dg;
            c2 += dg * ds_ln_xhat(x[r * h + c], m, rs);
        }
        a = ds_warp_sum(a) / (float)h;
        c2 = ds_warp_sum(c2) / (float)h;
        for (int c = lane; c < h; c += 32) {
            float d = ds_ln_dx(dy[r * h + c], gamma[c], ds_ln_xhat(x[r * h + c], m, rs), rs, a, c2);
            dx[r * h + c] = accumulate ? dx[r * h + c] + d : d;
        }
    }
}

/* layernorm_bwd's parameter terms: dgamma[c] += sum_r dy xhat, dbeta[c] +=
 * sum_r dy (colsum.cuh adds them up). */
struct ds_ln_param_terms {
    const float *dy, *x, *mean, *rstd;
    int h;
    __device__ void operator()(int64_t r, int c, float *a) const {
        float d = dy[r * h + c];
        a[0] += d * ds_ln_xhat(x[r * h + c], mean[r], rstd[r]);
        a[1] += d;
    }
};

ds_status ds_nn_cuda_layernorm_bwd(ds_backend *be, float *dx, float *dgamma, float *dbeta,
                                   const float *dy, const float *x, const float *mean,
                                   const float *rstd, const float *gamma, int n, int h,
                                   bool accumulate_dx) {
    DS_CUDA_ENTER(be);
    if (n <= 0 || h <= 0) return DS_OK;
    /* parameter gradients first: dx may alias dy */
    DS_TRY(ds_cuda_colsums<2>(be, dgamma, dbeta, ds_ln_param_terms{dy, x, mean, rstd, h}, n, h));
    ds_k_layernorm_bwd_dx<<<ds_nn_row_blocks(n), 32 * DS_NN_ROWS_PER_BLOCK, 0,
                            DS_CUDA_DEFAULT_STREAM>>>(dx, dy, x, mean, rstd, gamma, n, h,
                                                      accumulate_dx ? 1 : 0);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
