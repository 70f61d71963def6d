/* cpu kernels of the element-wise layers: bias + activation and dropout
 * (fused with a bias and a residual). Each public function switches on the
 * activation once and calls an always-inlined body with a constant, so the
 * inner loops hold no dispatch. */
#include "engine/backend/cpu/nn_cpu.h"

#define DS_INLINE static inline __attribute__((always_inline))

/* ---- bias + activation ---- */

DS_INLINE void act_fwd_body(int nt, float *y, const float *x, const float *bias, int rows,
                            int width, ds_act act) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * width;
        float *yr = y + (size_t)r * width;
        if (bias)
            for (int c = 0; c < width; c++) yr[c] = ds_act_fwd(act, xr[c] + bias[c]);
        else
            for (int c = 0; c < width; c++) yr[c] = ds_act_fwd(act, xr[c]);
    }
}

ds_status ds_nn_cpu_bias_act_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                 int rows, int width, ds_act act) {
    int nt = ds_nn_cpu_threads(be);
    switch (act) {
    case DS_ACT_NONE: act_fwd_body(nt, y, x, bias, rows, width, DS_ACT_NONE); break;
    case DS_ACT_RELU: act_fwd_body(nt, y, x, bias, rows, width, DS_ACT_RELU); break;
    case DS_ACT_GELU: act_fwd_body(nt, y, x, bias, rows, width, DS_ACT_GELU); break;
    case DS_ACT_TANH: act_fwd_body(nt, y, x, bias, rows, width, DS_ACT_TANH); break;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_fwd: unknown activation %d", (int)act);
    }
    return DS_OK;
}

/* dx = dy * act'(x + bias) for columns [c0, c1) of every row; adds the column
 * sums into acc[0 .. c1-c0) when acc != NULL. */
DS_INLINE void act_bwd_cols(float *dx, float *acc, const float *dy, const float *x,
                            const float *bias, int rows, int width, int c0, int c1, ds_act act) {
    for (int r = 0; r < rows; r++) {
        const float *dyr = dy + (size_t)r * width;
        float *dxr = dx ? dx + (size_t)r * width : NULL;
        const float *xr = x ? x + (size_t)r * width : NULL; /* unused for NONE */
        for (int c = c0; c < c1; c++) {
            float g = act == DS_ACT_NONE
                          ? dyr[c]
                          : dyr[c] * ds_act_grad(act, xr[c] + (bias ? bias[c] : 0.0f));
            if (dxr) dxr[c] = g;
            if (acc) acc[c - c0] += g;
        }
    }
}

DS_INLINE void act_bwd_body(int nt, float *dx, float *dbias, const float *dy, const float *x,
                            const float *bias, int rows, int width, ds_act act) {
    if (!dbias) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++)
            act_bwd_cols(dx + (size_t)r * width, NULL, dy + (size_t)r * width,
                         x ? x + (size_t)r * width : NULL, bias, 1, width, 0, width, act);
        return;
    }
    /* Column tiles: each thread owns whole bias entries and sums rows in
     * order (deterministic for any thread count). */
    int tile = ds_nn_cpu_col_tile(nt, width);
    int ntiles = (width + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int k = 0; k < ntiles; k++) {
        int c0 = k * tile, c1 = c0 + tile < width ? c0 + tile : width;
        float acc[256];
        for (int c = 0; c < c1 - c0; c++) acc[c] = 0.0f;
        act_bwd_cols(dx, acc, dy, x, bias, rows, width, c0, c1, act);
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
}

ds_status ds_nn_cpu_bias_act_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                 const float *x, const float *bias, int rows, int width,
                                 ds_act act) {
    int nt = ds_nn_cpu_threads(be);
    if (!dx && act != DS_ACT_NONE)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: dx may be NULL only for DS_ACT_NONE");
    switch (act) {
    case DS_ACT_NONE: act_bwd_body(nt, dx, dbias, dy, x, bias, rows, width, DS_ACT_NONE); break;
    case DS_ACT_RELU: act_bwd_body(nt, dx, dbias, dy, x, bias, rows, width, DS_ACT_RELU); break;
    case DS_ACT_GELU: act_bwd_body(nt, dx, dbias, dy, x, bias, rows, width, DS_ACT_GELU); break;
    case DS_ACT_TANH: act_bwd_body(nt, dx, dbias, dy, x, bias, rows, width, DS_ACT_TANH); break;
    default: return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: unknown activation %d", (int)act);
    }
    return DS_OK;
}

/* ---- dropout ---- */

static ds_status check_p(const char *slot, float p) {
    if (!(p >= 0.0f && p < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: dropout probability must be in [0, 1), got %g",
                      slot, (double)p);
    return DS_OK;
}

/* Multipliers are produced a chunk at a time into a stack buffer, then
 * applied by a plain loop the compiler vectorises. */
#define DROP_CHUNK 256

ds_status ds_nn_cpu_dropout_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                const float *res, int rows, int width, float p, uint64_t seed,
                                uint64_t offset) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(check_p("dropout_fwd", p));
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
                ds_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p, inv_keep);
            else
                for (int c = 0; c < n; c++) m[c] = 1.0f;
            for (int c = 0; c < n; c++) {
                float v = xr[c0 + c] + (bias ? bias[c0 + c] : 0.0f);
                yr[c0 + c] = (rr ? rr[c0 + c] : 0.0f) + v * m[c];
            }
        }
    }
    return DS_OK;
}

ds_status ds_nn_cpu_dropout_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                int rows, int width, float p, uint64_t seed, uint64_t offset) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(check_p("dropout_bwd", p));
    float inv_keep = 1.0f / (1.0f - p);
    if (p > 0.0f) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++) {
            const float *dyr = dy + (size_t)r * width;
            float *dxr = dx + (size_t)r * width;
            float m[DROP_CHUNK];
            for (int c0 = 0; c0 < width; c0 += DROP_CHUNK) {
                int n = width - c0 < DROP_CHUNK ? width - c0 : DROP_CHUNK;
                ds_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p, inv_keep);
                for (int c = 0; c < n; c++) dxr[c0 + c] = dyr[c0 + c] * m[c];
            }
        }
    } else if (dx != dy) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < width; c++)
                dx[(size_t)r * width + c] = dy[(size_t)r * width + c];
    }
    /* The bias sits inside the dropout: its gradient is the column sum of dx. */
    if (dbias) DS_TRY(ds_nn_cpu_bcast_add_bwd(be, dbias, dx, rows, width));
    return DS_OK;
}
