/* The cpu backend's rows slots (backend.h): row-sparse gradients' scan,
 * gather and rank-ordered sums, and the scatter that unpacks gathered rows,
 * with the element functions of engine/backend/rows_math.h that the CUDA
 * kernels call. Rows are independent: the threads take whole rows, so the
 * bits do not depend on their number. */
#include <omp.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/rows_math.h"

ds_status ds_cpu_rows_nonzero(ds_backend *be, const ds_rows_view *v, int64_t r0, int64_t r1,
                              uint8_t *flags) {
    DS_TRY(ds_check_rows_view("cpu rows_nonzero", v));
    DS_TRY(ds_check_ptr("cpu rows_nonzero", "flags", flags, r1 > r0 ? (size_t)(r1 - r0) : 0));
    const ds_rows_view w = *v;
    size_t work = r1 > r0 ? (size_t)((r1 - r0) * w.cols) : 0;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (work >= DS_CPU_PAR_MIN)
    for (int64_t r = r0; r < r1; r++) {
        int64_t e0, e1;
        ds_rows_slice(&w, r, &e0, &e1);
        uint8_t any = 0;
        for (int64_t e = e0; e < e1 && !any; e++) any = ds_rows_elem_nonzero(&w, e);
        flags[r - r0] = any;
    }
    return DS_OK;
}

ds_status ds_cpu_rows_gather(ds_backend *be, const ds_rows_view *v, const void *idx, int64_t n,
                             void *dst) {
    DS_TRY(ds_check_rows_list("cpu rows_gather", v, idx, n, "dst", dst));
    size_t cells = (size_t)n * (size_t)v->cols;
    const ds_rows_view w = *v;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (cells >= DS_CPU_PAR_MIN)
    for (int64_t k = 0; k < n; k++) {
        int64_t r = ds_rows_index(idx, (size_t)k);
        for (int64_t c = 0; c < w.cols; c++)
            ds_store_f32(dst, w.t, (size_t)(k * w.cols + c), ds_rows_gather_elem(&w, r, c));
    }
    return DS_OK;
}

ds_status ds_cpu_rows_scatter(ds_backend *be, const ds_rows_view *v, const void *idx, int64_t n,
                              const void *src) {
    DS_TRY(ds_check_rows_list("cpu rows_scatter", v, idx, n, "src", src));
    size_t cells = (size_t)n * (size_t)v->cols;
    const ds_rows_view w = *v;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (cells >= DS_CPU_PAR_MIN)
    for (int64_t k = 0; k < n; k++) {
        int64_t r = ds_rows_index(idx, (size_t)k);
        for (int64_t c = 0; c < w.cols; c++) ds_rows_scatter_elem(&w, r, c, src, k);
    }
    return DS_OK;
}

ds_status ds_cpu_rows_sum(ds_backend *be, const ds_rows_sum *s) {
    DS_TRY(ds_check_rows_sum("cpu rows_sum", s));
    const ds_rows_sum p = *s;
    size_t work = (size_t)(p.nout * p.dst.cols);
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (work >= DS_CPU_PAR_MIN)
    for (int64_t j = 0; j < p.nout; j++) {
        int64_t e0, e1;
        ds_rows_slice(&p.dst, p.row[j], &e0, &e1);
        for (int64_t e = e0; e < e1; e++) ds_rows_sum_elem(&p, j, e);
    }
    return DS_OK;
}
