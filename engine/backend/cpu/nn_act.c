/* cpu kernels of the element-wise layers: bias + activation and dropout
 * (fused with a bias and a residual). Each public function switches on the
 * activation once and calls an always-inlined body with a constant, so the
 * inner loops hold no dispatch and vectorise (the element math of nn_math.h
 * is libm-free for that reason). */
#include "engine/backend/cpu/nn_cpu.h"

#define DS_INLINE static inline __attribute__((always_inline))

/* ---- bias + activation ---- */

DS_INLINE void act_fwd_row(float *yr, const float *xr, const float *bias, int width, ds_act act) {
    if (bias) {
        DS_SIMD
        for (int c = 0; c < width; c++) yr[c] = ds_act_fwd(act, xr[c] + bias[c]);
    } else {
        DS_SIMD
        for (int c = 0; c < width; c++) yr[c] = ds_act_fwd(act, xr[c]);
    }
}

/* The switch sits inside the parallel region (OpenMP outlines the region
 * into a function that sees `act` as a variable): each case inlines a loop
 * with a constant activation. */
static void act_fwd_rows(float *y, const float *x, const float *bias, int r0, int r1, int width,
                         ds_act act) {
    for (int r = r0; r < r1; r++) {
        float *yr = y + (size_t)r * width;
        const float *xr = x + (size_t)r * width;
        switch (act) {
        case DS_ACT_RELU: act_fwd_row(yr, xr, bias, width, DS_ACT_RELU); break;
        case DS_ACT_GELU: act_fwd_row(yr, xr, bias, width, DS_ACT_GELU); break;
        case DS_ACT_TANH: act_fwd_row(yr, xr, bias, width, DS_ACT_TANH); break;
        case DS_ACT_GELU_TANH: act_fwd_row(yr, xr, bias, width, DS_ACT_GELU_TANH); break;
        default: act_fwd_row(yr, xr, bias, width, DS_ACT_NONE); break;
        }
    }
}

ds_status ds_nn_cpu_bias_act_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                 int rows, int width, ds_act act) {
    int nt = ds_nn_cpu_threads(be);
    if ((int)act < DS_ACT_NONE || act >= DS_ACT_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_fwd: unknown activation %d", (int)act);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) act_fwd_rows(y, x, bias, r, r + 1, width, act);
    return DS_OK;
}

/* dx = dy * act'(x + bias) over columns [c0, c1) of rows [r0, r1); adds the
 * column sums of dx into acc[0 .. c1-c0) when acc != NULL. For NONE, dx may
 * be NULL (only the sums are wanted). */
DS_INLINE void act_bwd_block(float *dx, float *acc, const float *dy, const float *x,
                             const float *bias, int r0, int r1, int width, int c0, int c1,
                             ds_act act) {
    for (int r = r0; r < r1; r++) {
        const float *dyr = dy + (size_t)r * width;
        if (act == DS_ACT_NONE) {
            if (dx && dx != dy) {
                float *dxr = dx + (size_t)r * width;
                DS_SIMD
                for (int c = c0; c < c1; c++) dxr[c] = dyr[c];
            }
            if (acc) {
                DS_SIMD
                for (int c = c0; c < c1; c++) acc[c - c0] += dyr[c];
            }
            continue;
        }
        float *dxr = dx + (size_t)r * width;
        const float *xr = x + (size_t)r * width;
        if (bias && acc) {
            DS_SIMD
            for (int c = c0; c < c1; c++) {
                float g = dyr[c] * ds_act_grad(act, xr[c] + bias[c]);
                dxr[c] = g;
                acc[c - c0] += g;
            }
        } else if (bias) {
            DS_SIMD
            for (int c = c0; c < c1; c++) dxr[c] = dyr[c] * ds_act_grad(act, xr[c] + bias[c]);
        } else if (acc) {
            DS_SIMD
            for (int c = c0; c < c1; c++) {
                float g = dyr[c] * ds_act_grad(act, xr[c]);
                dxr[c] = g;
                acc[c - c0] += g;
            }
        } else {
            DS_SIMD
            for (int c = c0; c < c1; c++) dxr[c] = dyr[c] * ds_act_grad(act, xr[c]);
        }
    }
}

static void act_bwd_dispatch(float *dx, float *acc, const float *dy, const float *x,
                             const float *bias, int r0, int r1, int width, int c0, int c1,
                             ds_act act) {
    switch (act) {
    case DS_ACT_RELU: act_bwd_block(dx, acc, dy, x, bias, r0, r1, width, c0, c1, DS_ACT_RELU); break;
    case DS_ACT_GELU: act_bwd_block(dx, acc, dy, x, bias, r0, r1, width, c0, c1, DS_ACT_GELU); break;
    case DS_ACT_TANH: act_bwd_block(dx, acc, dy, x, bias, r0, r1, width, c0, c1, DS_ACT_TANH); break;
    case DS_ACT_GELU_TANH:
        act_bwd_block(dx, acc, dy, x, bias, r0, r1, width, c0, c1, DS_ACT_GELU_TANH);
        break;
    default: act_bwd_block(dx, acc, dy, x, bias, r0, r1, width, c0, c1, DS_ACT_NONE); break;
    }
}

ds_status ds_nn_cpu_bias_act_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                 const float *x, const float *bias, int rows, int width,
                                 ds_act act) {
    int nt = ds_nn_cpu_threads(be);
    if ((int)act < DS_ACT_NONE || act >= DS_ACT_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: unknown activation %d", (int)act);
    if (!dx && act != DS_ACT_NONE)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: dx may be NULL only for DS_ACT_NONE");
    if (!dbias) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++)
            act_bwd_dispatch(dx, NULL, dy, x, bias, r, r + 1, width, 0, width, act);
        return DS_OK;
    }
    /* Column tiles: each thread owns whole bias entries and sums rows in
     * order (deterministic for any thread count). */
    int tile = ds_nn_cpu_col_tile(nt, width);
    int ntiles = (width + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int k = 0; k < ntiles; k++) {
        int c0 = k * tile, c1 = c0 + tile < width ? c0 + tile : width;
        float acc[DS_NN_CPU_TILE_MAX];
        for (int c = 0; c < c1 - c0; c++) acc[c] = 0.0f;
        act_bwd_dispatch(dx, acc, dy, x, bias, 0, rows, width, c0, c1, act);
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
    return DS_OK;
}

/* ---- dropout ---- */

void ds_nn_cpu_dropout_mults(float *m, uint64_t seed, uint64_t j0, int n, float p,
                             float inv_keep) {
    int i = 0;
    /* head: up to the next Philox block boundary */
    if (j0 & 3u) {
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, j0 >> 2);
        for (uint32_t k = (uint32_t)(j0 & 3u); k < 4u && i < n; k++, i++)
            m[i] = ds_dropout_mult(w.v[k], p, inv_keep);
    }
    /* whole blocks: independent Philox evaluations, vectorised across blocks */
    uint64_t blk0 = (j0 + (uint64_t)i) >> 2;
    int nb = (n - i) / 4;
    float *mb = m + i;
    DS_SIMD
    for (int b = 0; b < nb; b++) {
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk0 + (uint64_t)b);
        mb[4 * b + 0] = ds_dropout_mult(w.v[0], p, inv_keep);
        mb[4 * b + 1] = ds_dropout_mult(w.v[1], p, inv_keep);
        mb[4 * b + 2] = ds_dropout_mult(w.v[2], p, inv_keep);
        mb[4 * b + 3] = ds_dropout_mult(w.v[3], p, inv_keep);
    }
    i += 4 * nb;
    if (i < n) { /* tail */
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk0 + (uint64_t)nb);
        for (uint32_t k = 0; i < n; k++, i++) m[i] = ds_dropout_mult(w.v[k], p, inv_keep);
    }
}

/* Multipliers are produced a chunk at a time into a stack buffer, then
 * applied by a plain loop the compiler vectorises. */
#define DROP_CHUNK 256

ds_status ds_nn_cpu_dropout_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                const float *res, int rows, int width, float p, uint64_t seed,
                                uint64_t offset) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(ds_check_dropout_p("dropout_fwd", p));
    float inv_keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * width;
        const float *rr = res ? res + (size_t)r * width : NULL;
        float *yr = y + (size_t)r * width;
        float m[DROP_CHUNK];
        for (int c0 = 0; c0 < width; c0 += DROP_CHUNK) {
            int n = width - c0 < DROP_CHUNK ? width - c0 : DROP_CHUNK;
            if (p > 0.0f)
                ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p,
                                        inv_keep);
            else
                for (int c = 0; c < n; c++) m[c] = 1.0f;
            const float *bc = bias ? bias + c0 : NULL;
            const float *rc = rr ? rr + c0 : NULL;
            float *yc = yr + c0;
            const float *xc = xr + c0;
            if (bc && rc) {
                DS_SIMD
                for (int c = 0; c < n; c++) yc[c] = fmaf(xc[c] + bc[c], m[c], rc[c]);
            } else if (rc) {
                DS_SIMD
                for (int c = 0; c < n; c++) yc[c] = fmaf(xc[c], m[c], rc[c]);
            } else if (bc) {
                DS_SIMD
                for (int c = 0; c < n; c++) yc[c] = (xc[c] + bc[c]) * m[c];
            } else {
                DS_SIMD
                for (int c = 0; c < n; c++) yc[c] = xc[c] * m[c];
            }
        }
    }
    return DS_OK;
}

ds_status ds_nn_cpu_dropout_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                int rows, int width, float p, uint64_t seed, uint64_t offset) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(ds_check_dropout_p("dropout_bwd", p));
    float inv_keep = 1.0f / (1.0f - p);
    if (p > 0.0f && dbias) {
        /* One pass: the multipliers, dx and the bias gradient together, in
         * column tiles (as bcast_add_bwd, whose sums this repeats bit for
         * bit: each column's rows in order from 0, then added to dbias), so
         * dx is not read a second time. */
        int tile = ds_nn_cpu_col_tile(nt, width);
        int ntiles = (width + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int k = 0; k < ntiles; k++) {
            int c0 = k * tile, n = (c0 + tile < width ? c0 + tile : width) - c0;
            float acc[DS_NN_CPU_TILE_MAX], m[DS_NN_CPU_TILE_MAX];
            for (int c = 0; c < n; c++) acc[c] = 0.0f;
            for (int r = 0; r < rows; r++) {
                const float *dyr = dy + (size_t)r * width + c0;
                float *dxr = dx + (size_t)r * width + c0;
                ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p,
                                        inv_keep);
                DS_SIMD
                for (int c = 0; c < n; c++) {
                    float g = dyr[c] * m[c];
                    dxr[c] = g;
                    acc[c] += g;
                }
            }
            for (int c = 0; c < n; c++) dbias[c0 + c] += acc[c];
        }
        return DS_OK;
    }
    if (p > 0.0f) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++) {
            const float *dyr = dy + (size_t)r * width;
            float *dxr = dx + (size_t)r * width;
            float m[DROP_CHUNK];
            for (int c0 = 0; c0 < width; c0 += DROP_CHUNK) {
                int n = width - c0 < DROP_CHUNK ? width - c0 : DROP_CHUNK;
                ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p,
                                        inv_keep);
                DS_SIMD
                for (int c = 0; c < n; c++) dxr[c0 + c] = dyr[c0 + c] * m[c];
            }
        }
    } else if (dx != dy) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++) {
            DS_SIMD
            for (int c = 0; c < width; c++)
                dx[(size_t)r * width + c] = dy[(size_t)r * width + c];
        }
    }
    /* The bias sits inside the dropout: its gradient is the column sum of dx. */
    if (dbias) DS_TRY(ds_nn_cpu_bcast_add_bwd(be, dbias, dx, rows, width));
    return DS_OK;
}
