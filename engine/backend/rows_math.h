/* Row-sparse gradients (zero/grad_sparse.h), element by element: the row
 * scan, the gather of rows into records and the rank-ordered sums of the
 * gathered rows; and the scatter of gathered rows back into a table (the
 * stage-1/2 word table by rows, zero/param_rows.h). Written once for the cpu
 * loops and the CUDA kernels of the backend's rows slots (backend.h), so
 * both backends produce the same bits.
 *
 * A table is rows x cols elements of the flat space from `offset` on: row r
 * is flat elements [offset + r cols, offset + (r + 1) cols). A view holds
 * the flat elements [lo, hi) of some buffer at base (element e at
 * base[e - lo]): the table itself, or a partition that cuts its first and
 * last rows; a row's slice is the part of it inside [lo, hi). */
#ifndef DS_BACKEND_ROWS_MATH_H
#define DS_BACKEND_ROWS_MATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend/math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_rows_view {
    void *base;
    ds_dtype t;
    int64_t lo, hi;       /* base holds flat elements [lo, hi) */
    int64_t offset, cols; /* the table */
} ds_rows_view;

/* The flat elements [*e0, *e1) of row r inside the view (*e1 <= *e0: none). */
DS_HD void ds_rows_slice(const ds_rows_view *v, int64_t r, int64_t *e0, int64_t *e1) {
    int64_t a = v->offset + r * v->cols, b = a + v->cols;
    *e0 = a > v->lo ? a : v->lo;
    *e1 = b < v->hi ? b : v->hi;
}

/* Whether element e of the view has any bit set (a row of +0.0 adds
 * nothing to any sum, so only such a row is left out). */
DS_HD bool ds_rows_elem_nonzero(const ds_rows_view *v, int64_t e) {
    const unsigned char *p = (const unsigned char *)v->base;
    size_t es = v->t == DS_F32 ? 4 : 2, at = (size_t)(e - v->lo) * es; /* float types only */
    if (es == 2) {
        uint16_t x;
        memcpy(&x, p + at, 2);
        return x != 0;
    }
    uint32_t x;
    memcpy(&x, p + at, 4);
    return x != 0;
}

/* Element c of the gathered copy of row r: the view's value inside the
 * slice, +0.0 outside it. */
DS_HD float ds_rows_gather_elem(const ds_rows_view *v, int64_t r, int64_t c) {
    int64_t e = v->offset + r * v->cols + c;
    return e >= v->lo && e < v->hi ? ds_load_f32(v->base, v->t, (size_t)(e - v->lo)) : 0.0f;
}

/* rows_scatter, the inverse of the gather: element c of row k of src (a
 * gathered copy of table row r, in v's type) into the view where it falls
 * inside row r's slice; outside it nothing is written (the view's other
 * elements belong to another partition or to no row). Through fp32, which
 * holds every fp16 and bf16 value exactly. */
DS_HD void ds_rows_scatter_elem(const ds_rows_view *v, int64_t r, int64_t c, const void *src,
                                int64_t k) {
    int64_t e = v->offset + r * v->cols + c;
    if (e >= v->lo && e < v->hi)
        ds_store_f32(v->base, v->t, (size_t)(e - v->lo),
                     ds_load_f32(src, v->t, (size_t)(k * v->cols + c)));
}

/* x rounded to the gradient type, as a ring hop stores its sum. */
DS_HD float ds_rows_round(ds_dtype t, float x) {
    if (t == DS_F16) return ds_f16_to_f32(ds_f32_to_f16(x));
    if (t == DS_BF16) return ds_bf16_to_f32(ds_f32_to_bf16(x));
    return x;
}

/* The row index a record block holds at byte `at` (any alignment). */
DS_HD int32_t ds_rows_index(const void *idx, size_t k) {
    int32_t r;
    memcpy(&r, (const unsigned char *)idx + 4 * k, 4);
    return r;
}

/* The sums of gathered rows (zero/grad_sparse.c plans them): output j is
 * table row row[j]; its value at each element is the sum, in the order
 * given, of the contributions src[first[j]] .. src[first[j + 1] - 1] (each
 * the element offset of a gathered row in recs, in dst.t), each addition in
 * fp32 rounded to dst.t, starting from -0.0 where all[j] (every rank sent
 * the row) and +0.0 otherwise (zero/grad_sparse.h says why). The sum
 * replaces the row's slice in dst, or with add is added to it. */
typedef struct ds_rows_sum {
    ds_rows_view dst;
    bool add;
    const void *recs;
    int64_t nout;
    const int32_t *row;   /* [nout] */
    const uint8_t *all;   /* [nout] */
    const int64_t *first; /* [nout + 1] */
    const int64_t *src;   /* [first[nout]] */
} ds_rows_sum;

/* Element e (inside the slice) of output j. */
DS_HD void ds_rows_sum_elem(const ds_rows_sum *s, int64_t j, int64_t e) {
    const ds_rows_view *v = &s->dst;
    int64_t c = e - (v->offset + (int64_t)s->row[j] * v->cols);
    float acc = s->all[j] ? -0.0f : 0.0f;
    for (int64_t k = s->first[j]; k < s->first[j + 1]; k++)
        acc = ds_rows_round(v->t, acc + ds_load_f32(s->recs, v->t, (size_t)(s->src[k] + c)));
    size_t d = (size_t)(e - v->lo);
    ds_store_f32(v->base, v->t, d, s->add ? ds_load_f32(v->base, v->t, d) + acc : acc);
}

/* ---- the slots' argument checks (host), the same on both backends ---- */

static inline ds_status ds_check_rows_view(const char *who, const ds_rows_view *v) {
    if (!v) return DS_ERR(DS_ERR_INVALID_ARG, "%s: the view is NULL", who);
    DS_TRY(ds_check_float_dtype(who, "the view", v->t));
    if (v->cols < 1 || v->hi < v->lo)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: a table of %lld columns over flat [%lld, %lld)",
                      who, (long long)v->cols, (long long)v->lo, (long long)v->hi);
    return ds_check_ptr(who, "the view's base", v->base, (size_t)(v->hi - v->lo));
}

/* The arguments of rows_gather and rows_scatter: a view, n rows named by
 * idx and n gathered rows at `rows` (named `arg` in a message). */
static inline ds_status ds_check_rows_list(const char *who, const ds_rows_view *v,
                                           const void *idx, int64_t n, const char *arg,
                                           const void *rows) {
    DS_TRY(ds_check_rows_view(who, v));
    if (n < 0) return DS_ERR(DS_ERR_INVALID_ARG, "%s: %lld rows", who, (long long)n);
    size_t cells = (size_t)n * (size_t)v->cols;
    DS_TRY(ds_check_ptr(who, "idx", idx, cells));
    return ds_check_ptr(who, arg, rows, cells);
}

static inline ds_status ds_check_rows_sum(const char *who, const ds_rows_sum *s) {
    if (!s) return DS_ERR(DS_ERR_INVALID_ARG, "%s: the plan is NULL", who);
    DS_TRY(ds_check_rows_view(who, &s->dst));
    if (s->nout < 0) return DS_ERR(DS_ERR_INVALID_ARG, "%s: %lld rows", who, (long long)s->nout);
    size_t n = (size_t)s->nout;
    DS_TRY(ds_check_ptr(who, "row", s->row, n));
    DS_TRY(ds_check_ptr(who, "all", s->all, n));
    DS_TRY(ds_check_ptr(who, "first", s->first, n));
    DS_TRY(ds_check_ptr(who, "recs", s->recs, n));
    return ds_check_ptr(who, "src", s->src, n);
}

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_ROWS_MATH_H */
