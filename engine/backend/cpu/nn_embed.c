/* cpu kernels that move rows: embedding gather/scatter, broadcast add and
 * its column sum, masked mean pooling, strided row copies, shifted labels. */
#include <omp.h>
#include <string.h>

#include "engine/backend/cpu/nn_cpu.h"

int ds_nn_cpu_col_tile(int nt, int width) {
    for (int per = 1;; per++) { /* tiles per thread */
        int t = (width + nt * per - 1) / (nt * per);
        t = (t + 15) / 16 * 16;
        if (t <= DS_NN_CPU_TILE_MAX) return t < 16 ? 16 : t;
    }
}

ds_status ds_nn_cpu_embedding_fwd(ds_backend *be, float *out, const float *table,
                                  const int32_t *ids, int n, int h, int vocab, bool accumulate) {
    DS_TRY(ds_check_nn_sizes("embedding", "n", n, "h", h));
    int nt = ds_nn_cpu_threads(be);
    /* Validate first, so a bad id leaves `out` untouched and the message names
     * the first offending position. */
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "embedding: id %d at position %d is outside the table [0, %d)", ids[i],
                          i, vocab);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)n * h >= DS_NN_CPU_PAR_MIN)
    for (int i = 0; i < n; i++) {
        const float *restrict src = table + (size_t)ids[i] * h;
        float *restrict dst = out + (size_t)i * h;
        if (accumulate) {
            DS_SIMD
            for (int c = 0; c < h; c++) dst[c] += src[c];
        }
        else
            memcpy(dst, src, (size_t)h * sizeof(float));
    }
    return DS_OK;
}

ds_status ds_nn_cpu_embedding_bwd(ds_backend *be, float *dtable, const float *dout,
                                  const int32_t *ids, int n, int h, int padding_idx) {
    int nt = ds_nn_cpu_threads(be);
    /* The ids passed embedding_fwd (nn.h); a negative one (not padding_idx)
     * that did not is refused before anything is written: it would write
     * before the table on one thread and be skipped on several. */
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 && ids[i] != padding_idx)
            return DS_ERR(DS_ERR_INVALID_ARG, "embedding backward: id %d at position %d is "
                          "outside the table (ids must have passed embedding_fwd)", ids[i], i);
    /* The same id may appear at many positions: thread t owns the table rows
     * with id % nthreads == t, so no two threads write one row and each row
     * sums its positions in order (deterministic for a given thread count). */
#pragma omp parallel num_threads(nt) if ((int64_t)n * h >= DS_NN_CPU_PAR_MIN)
    {
        int team = omp_get_num_threads(), t = omp_get_thread_num();
        for (int i = 0; i < n; i++) {
            int id = ids[i];
            if (id == padding_idx || id % team != t) continue;
            float *restrict dst = dtable + (size_t)id * h;
            const float *restrict src = dout + (size_t)i * h;
            DS_SIMD
            for (int c = 0; c < h; c++) dst[c] += src[c];
        }
    }
    return DS_OK;
}

ds_status ds_nn_cpu_bcast_add_fwd(ds_backend *be, float *out, const float *x, int rows, int width,
                                  bool accumulate) {
    DS_TRY(ds_check_nn_sizes("bcast_add_fwd", "rows", rows, "width", width));
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        float *restrict dst = out + (size_t)r * width;
        if (accumulate) {
            DS_SIMD
            for (int c = 0; c < width; c++) dst[c] += x[c];
        }
        else
            memcpy(dst, x, (size_t)width * sizeof(float));
    }
    return DS_OK;
}

ds_status ds_nn_cpu_bcast_add_bwd(ds_backend *be, float *dx, const float *dout, int rows,
                                  int width) {
    int nt = ds_nn_cpu_threads(be);
    int tile = ds_nn_cpu_col_tile(nt, width);
    int ntiles = (width + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int k = 0; k < ntiles; k++) {
        int c0 = k * tile, c1 = c0 + tile < width ? c0 + tile : width;
        float acc[DS_NN_CPU_TILE_MAX];
        for (int c = c0; c < c1; c++) acc[c - c0] = 0.0f;
        for (int r = 0; r < rows; r++) {
            const float *restrict src = dout + (size_t)r * width;
            DS_SIMD
            for (int c = c0; c < c1; c++) acc[c - c0] += src[c];
        }
        for (int c = c0; c < c1; c++) dx[c] += acc[c - c0];
    }
    return DS_OK;
}

/* 1 / max(1, number of real tokens) of row b; no mask: every token is real. */
static float inv_count(const float *mask, int b, int T) {
    if (!mask) return 1.0f / (float)(T > 1 ? T : 1);
    float cnt = 0.0f;
    for (int t = 0; t < T; t++) cnt += mask[(size_t)b * T + t];
    return 1.0f / (cnt > 1.0f ? cnt : 1.0f);
}

ds_status ds_nn_cpu_mean_pool_fwd(ds_backend *be, float *out, const float *x, const float *mask,
                                  int B, int T, int H) {
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)B * T * H >= DS_NN_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        float inv = inv_count(mask, b, T);
        float *restrict o = out + (size_t)b * H;
        for (int c = 0; c < H; c++) o[c] = 0.0f;
        for (int t = 0; t < T; t++) {
            float m = mask ? mask[(size_t)b * T + t] : 1.0f;
            if (m == 0.0f) continue;
            const float *restrict xr = x + ((size_t)b * T + t) * H;
            for (int c = 0; c < H; c++) o[c] += m * xr[c];
        }
        for (int c = 0; c < H; c++) o[c] *= inv;
    }
    return DS_OK;
}

ds_status ds_nn_cpu_mean_pool_bwd(ds_backend *be, float *dx, const float *dout, const float *mask,
                                  int B, int T, int H) {
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)B * T * H >= DS_NN_CPU_PAR_MIN)
    for (int b = 0; b < B; b++) {
        float inv = inv_count(mask, b, T);
        const float *restrict g = dout + (size_t)b * H;
        for (int t = 0; t < T; t++) {
            float w = (mask ? mask[(size_t)b * T + t] : 1.0f) * inv;
            float *restrict d = dx + ((size_t)b * T + t) * H;
            for (int c = 0; c < H; c++) d[c] = w * g[c];
        }
    }
    return DS_OK;
}

ds_status ds_nn_cpu_copy_rows(ds_backend *be, float *dst, int dst_ld, const float *src,
                              int src_ld, int rows, int width, bool accumulate) {
    DS_TRY(ds_check_copy_rows("copy_rows", dst_ld, src_ld, rows, width));
    int nt = ds_nn_cpu_threads(be);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        float *restrict d = dst + (size_t)r * dst_ld;
        const float *restrict s = src + (size_t)r * src_ld;
        if (accumulate) {
            DS_SIMD
            for (int c = 0; c < width; c++) d[c] += s[c];
        }
        else
            memcpy(d, s, (size_t)width * sizeof(float));
    }
    return DS_OK;
}

ds_status ds_nn_cpu_shift_labels(ds_backend *be, int32_t *dst, const int32_t *src, int B, int T,
                                 int32_t fill) {
    (void)be;
    for (int b = 0; b < B; b++) {
        int32_t *d = dst + (size_t)b * T;
        const int32_t *s = src + (size_t)b * T;
        for (int t = 0; t + 1 < T; t++) d[t] = s[t + 1];
        if (T > 0) d[T - 1] = fill;
    }
    return DS_OK;
}
