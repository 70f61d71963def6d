/* cpu layer norm: rows in parallel, each row with the helpers of nn_math.h.
 * The gamma / beta gradients sum over rows in an order fixed by the shape
 * (blocks of rows, or column tiles), never by the thread count. */
#include "engine/backend/cpu/nn_cpu.h"

/* Backward in one pass over dy and x where the partial sums of dgamma and
 * dbeta, one row of each per block of LN_BWD_ROWS rows, fit LN_BWD_PART
 * floats (256 KiB of the calling thread's stack: 4096 x 256 has 64 blocks of
 * 2 x 256, GPT-2 small's 2048 x 768 32 of 2 x 768; blocks of 64 rows give
 * 16 threads work from 1024 rows on); otherwise two passes, column tiles for
 * the parameter gradients and rows for dx. One pass reads dy and x once
 * instead of twice: 4096 x 256 at 1 thread took 449-490 us against 640-715
 * us (bench_kernels, "layer norm bwd", alternating runs). */
#define LN_BWD_ROWS 64
#define LN_BWD_PART (64 * 1024)

ds_status ds_nn_cpu_layernorm_fwd(ds_backend *be, float *y, float *mean, float *rstd,
                                  const float *x, const float *gamma, const float *beta, int n,
                                  int h, float eps) {
    DS_TRY(ds_check_ln_fwd("layernorm_fwd", y, mean, rstd, gamma, beta, n, h));
    if (h == 0) return DS_OK; /* no statistics of an empty row (as cuda) */
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
    const int nblk = (n + LN_BWD_ROWS - 1) / LN_BWD_ROWS;
    if ((size_t)nblk * h * 2 <= LN_BWD_PART) {
        /* One pass: block b of LN_BWD_ROWS rows sums its rows' dgamma /
         * dbeta terms in row order into part[b] and writes their dx; the
         * blocks' sums are then added in block order. Blocks, not threads,
         * fix the order, so the bits are the same at any thread count. */
        float part[LN_BWD_PART];
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
        for (int b = 0; b < nblk; b++) {
            float *pg = part + (size_t)b * 2 * h, *pb = pg + h;
            for (int c = 0; c < h; c++) pg[c] = pb[c] = 0.0f;
            const int r1 = (b + 1) * LN_BWD_ROWS < n ? (b + 1) * LN_BWD_ROWS : n;
            for (int r = b * LN_BWD_ROWS; r < r1; r++) {
                const float *dyr = dy + (size_t)r * h;
                const float *xr = x + (size_t)r * h;
                float m = mean[r], rs = rstd[r];
                DS_SIMD
                for (int c = 0; c < h; c++) {
                    pg[c] = fmaf(dyr[c], ds_ln_xhat(xr[c], m, rs), pg[c]);
                    pb[c] += dyr[c];
                }
                ds_ln_row_bwd(dx + (size_t)r * h, dyr, xr, gamma, h, m, rs,
                              accumulate_dx ? 1 : 0);
            }
        }
        for (int c = 0; c < h; c++) {
            float g = 0.0f, bb = 0.0f;
            for (int b = 0; b < nblk; b++) {
                g += part[(size_t)b * 2 * h + c];
                bb += part[(size_t)b * 2 * h + h + c];
            }
            dgamma[c] += g;
            dbeta[c] += bb;
        }
        return DS_OK;
    }
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
