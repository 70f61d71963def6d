/* cpu layer norm: rows in parallel, each row with the helpers of nn_math.h;
 * the gamma / beta gradients in a second pass over column tiles so the sums
 * over rows are deterministic for any thread count. */
#include "engine/backend/cpu/nn_cpu.h"

ds_status ds_nn_cpu_layernorm_fwd(ds_backend *be, float *y, float *mean, float *rstd,
                                  const float *x, const float *gamma, const float *beta, int n,
                                  int h, float eps) {
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)n * h >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < n; r++) {
        float m, rs;
        ds_ln_row_stats(x + (size_t)r * h, h, eps, &m, &rs);
        mean[r] = m;
        rstd[r] = rs;
        ds_ln_row_fwd(y + (size_t)r * h, x + (size_t)r * h, gamma, beta, h, m, rs);
    }
    return DS_OK;
}

ds_status ds_nn_cpu_layernorm_bwd(ds_backend *be, float *dx, float *dgamma, float *dbeta,
                                  const float *dy, const float *x, const float *mean,
                                  const float *rstd, const float *gamma, int n, int h,
                                  bool accumulate_dx) {
    int nt = ds_nn_cpu_threads(be);
    int par = (int64_t)n * h >= DS_NN_CPU_PAR_MIN;
    /* Parameter gradients first: dx may alias dy. */
    int tile = ds_nn_cpu_col_tile(nt, h);
    int ntiles = (h + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int k = 0; k < ntiles; k++) {
        int c0 = k * tile, c1 = c0 + tile < h ? c0 + tile : h;
        float ag[DS_NN_CPU_TILE_MAX], ab[DS_NN_CPU_TILE_MAX];
        for (int c = 0; c < c1 - c0; c++) ag[c] = ab[c] = 0.0f;
        for (int r = 0; r < n; r++) {
            const float *dyr = dy + (size_t)r * h;
            const float *xr = x + (size_t)r * h;
            float m = mean[r], rs = rstd[r];
            DS_SIMD
            for (int c = c0; c < c1; c++) {
                /* fused as nvcc fuses the cuda kernel's ag += d * xhat */
                ag[c - c0] = fmaf(dyr[c], ds_ln_xhat(xr[c], m, rs), ag[c - c0]);
                ab[c - c0] += dyr[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dgamma[c] += ag[c - c0];
            dbeta[c] += ab[c - c0];
        }
    }
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int r = 0; r < n; r++)
        ds_ln_row_bwd(dx + (size_t)r * h, dy + (size_t)r * h, x + (size_t)r * h, gamma, h,
                      mean[r], rstd[r], accumulate_dx ? 1 : 0);
    return DS_OK;
}
