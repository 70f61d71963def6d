/* The cuda backend's rows slots (backend.h): row-sparse gradients' scan,
 * gather and rank-ordered sums, each element through the DS_HD functions of
 * engine/backend/rows_math.h that the cpu loops call: the same bits. One
 * thread block per row in the scan and the sums (a row's columns over its
 * threads), one thread per element in the gather and the scatter. */
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/rows_math.h"

/* Thread blocks per launch at most; the blocks stride over the rest. */
#define DS_ROWS_MAX_GRID 65535u

__global__ void ds_k_rows_nonzero(ds_rows_view v, int64_t r0, int64_t r1, uint8_t *flags) {
    for (int64_t r = r0 + blockIdx.x; r < r1; r += gridDim.x) {
        int64_t e0, e1;
        ds_rows_slice(&v, r, &e0, &e1);
        int any = 0;
        for (int64_t e = e0 + threadIdx.x; e < e1 && !any; e += blockDim.x)
            any = ds_rows_elem_nonzero(&v, e);
        any = __syncthreads_or(any);
        if (threadIdx.x == 0) flags[r - r0] = (uint8_t)(any != 0);
    }
}

__global__ void ds_k_rows_gather(ds_rows_view v, const void *idx, int64_t n, void *dst) {
    DS_GRID_STRIDE(i, (size_t)n * (size_t)v.cols) {
        int64_t k = (int64_t)(i / (size_t)v.cols), c = (int64_t)(i % (size_t)v.cols);
        ds_store_f32(dst, v.t, i, ds_rows_gather_elem(&v, ds_rows_index(idx, (size_t)k), c));
    }
}

__global__ void ds_k_rows_scatter(ds_rows_view v, const void *idx, int64_t n, const void *src) {
    DS_GRID_STRIDE(i, (size_t)n * (size_t)v.cols) {
        int64_t k = (int64_t)(i / (size_t)v.cols), c = (int64_t)(i % (size_t)v.cols);
        ds_rows_scatter_elem(&v, ds_rows_index(idx, (size_t)k), c, src, k);
    }
}

__global__ void ds_k_rows_sum(ds_rows_sum s) {
    for (int64_t j = blockIdx.x; j < s.nout; j += gridDim.x) {
        int64_t e0, e1;
        ds_rows_slice(&s.dst, s.row[j], &e0, &e1);
        for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) ds_rows_sum_elem(&s, j, e);
    }
}

static unsigned row_grid(int64_t rows) {
    return rows < (int64_t)DS_ROWS_MAX_GRID ? (unsigned)rows : DS_ROWS_MAX_GRID;
}

ds_status ds_cuda_rows_nonzero(ds_backend *be, const ds_rows_view *v, int64_t r0, int64_t r1,
                               uint8_t *flags) {
    DS_TRY(ds_check_rows_view("cuda rows_nonzero", v));
    DS_TRY(ds_check_ptr("cuda rows_nonzero", "flags", flags, r1 > r0 ? (size_t)(r1 - r0) : 0));
    if (r1 <= r0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_rows_nonzero<<<row_grid(r1 - r0), DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(
        *v, r0, r1, flags);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_rows_gather(ds_backend *be, const ds_rows_view *v, const void *idx, int64_t n,
                              void *dst) {
    DS_TRY(ds_check_rows_list("cuda rows_gather", v, idx, n, "dst", dst));
    size_t cells = (size_t)n * (size_t)v->cols;
    if (cells == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_rows_gather<<<DS_CUDA_GRID(be, cells)>>>(*v, idx, n, dst);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_rows_scatter(ds_backend *be, const ds_rows_view *v, const void *idx, int64_t n,
                               const void *src) {
    DS_TRY(ds_check_rows_list("cuda rows_scatter", v, idx, n, "src", src));
    if (n == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_rows_scatter<<<DS_CUDA_GRID(be, (size_t)n * (size_t)v->cols)>>>(*v, idx, n, src);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_cuda_rows_sum(ds_backend *be, const ds_rows_sum *s) {
    DS_TRY(ds_check_rows_sum("cuda rows_sum", s));
    if (s->nout == 0) return DS_OK;
    DS_CUDA_ENTER(be);
    ds_k_rows_sum<<<row_grid(s->nout), DS_CUDA_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(*s);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
