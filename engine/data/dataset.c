/* ds_dataset: named columns of fixed-shape rows in host memory. */
#include "engine/data/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ds_dataset_destroy(ds_dataset *d) {
    if (!d) return;
    if (d->class_names) {
        for (int c = 0; c < d->n_classes; c++) free(d->class_names[c]);
        free(d->class_names);
    }
    for (int k = 0; k < d->n_columns; k++) free(d->data[k]);
    if (d->rows_src_free) d->rows_src_free(d->rows_src);
    free(d);
}

ds_status ds_dataset_create(size_t n, int seq_len, ds_dataset **out) {
    if (!out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_create: out is NULL");
    *out = NULL;
    if (seq_len < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_create: seq_len must be >= 0, got %d",
                      seq_len);
    ds_dataset *d = calloc(1, sizeof *d);
    if (!d) return DS_ERR(DS_ERR_OOM, "ds_dataset_create: out of memory");
    d->n = n;
    d->seq_len = seq_len;
    *out = d;
    return DS_OK;
}

int ds_dataset_find(const ds_dataset *d, const char *name) {
    for (int k = 0; d && k < d->n_columns; k++)
        if (strcmp(d->cols[k].name, name) == 0) return k;
    return -1;
}

/* The column's description, checked (add_column's rules). */
static ds_status column_desc(const ds_dataset *d, const char *name, ds_dtype dtype, int ndim,
                             const int64_t *dims, ds_tensor_desc *out) {
    if (!d || !name) return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_add_column: NULL argument");
    if (strlen(name) == 0 || strlen(name) >= DS_MAX_INPUT_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "dataset column \"%s\": names have 1..%d characters",
                      name, DS_MAX_INPUT_NAME - 1);
    if (ds_dataset_find(d, name) >= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s added twice", name);
    if (d->n_columns >= DS_MAX_INPUTS)
        return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s: at most %d columns", name,
                      DS_MAX_INPUTS);
    if (dtype != DS_I32 && dtype != DS_F32)
        return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s: dtype %s (int32 or fp32)", name,
                      ds_dtype_name(dtype));
    if (ndim < 0 || ndim >= DS_MAX_DIMS || (ndim > 0 && !dims))
        return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s: %d dimensions per row (0..%d)",
                      name, ndim, DS_MAX_DIMS - 1);
    ds_tensor_desc c = {.dtype = dtype, .ndim = ndim};
    snprintf(c.name, sizeof c.name, "%s", name);
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == DS_DIM_SEQ && d->seq_len <= 0)
            return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s: a sequence dimension, but the "
                          "dataset was created with seq_len 0", name);
        if (dims[i] <= 0 && dims[i] != DS_DIM_SEQ)
            return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s: dimension %d is %lld", name,
                          i + 1, (long long)dims[i]);
        c.dims[i] = dims[i];
    }
    *out = c;
    return DS_OK;
}

ds_status ds_dataset_add_column(ds_dataset *d, const char *name, ds_dtype dtype, int ndim,
                                const int64_t *dims, void **data_out) {
    if (data_out) *data_out = NULL;
    ds_tensor_desc c;
    DS_TRY(column_desc(d, name, dtype, ndim, dims, &c));
    size_t row = ds_tensor_desc_row_elems(&c, d->seq_len) * ds_dtype_size(dtype);
    if (row && d->n > SIZE_MAX / row)
        return DS_ERR(DS_ERR_OOM, "dataset column %s: %zu rows x %zu bytes overflows", name, d->n,
                      row);
    /* calloc(0) may return NULL: keep at least one byte so NULL means OOM. */
    size_t bytes = d->n * row;
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        return DS_ERR(DS_ERR_OOM, "dataset column %s: %zu rows x %zu bytes", name, d->n, row);
    d->cols[d->n_columns] = c;
    d->data[d->n_columns] = p;
    d->n_columns++;
    if (data_out) *data_out = p;
    return DS_OK;
}

ds_status ds_dataset_add_computed_column(ds_dataset *d, const char *name, ds_dtype dtype,
                                         int ndim, const int64_t *dims) {
    ds_tensor_desc c;
    DS_TRY(column_desc(d, name, dtype, ndim, dims, &c));
    d->cols[d->n_columns] = c;
    d->data[d->n_columns] = NULL;
    d->n_columns++;
    return DS_OK;
}

ds_status ds_dataset_set_rows_source(ds_dataset *d, ds_dataset_rows_fn fn, void *src,
                                     void (*free_src)(void *src)) {
    if (!d || !fn || d->rows_fn) {
        if (free_src) free_src(src);
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_set_rows_source: %s",
                      !d || !fn ? "NULL argument" : "the dataset has a row source already");
    }
    d->rows_fn = fn;
    d->rows_src = src;
    d->rows_src_free = free_src;
    return DS_OK;
}

size_t ds_dataset_row_bytes(const ds_dataset *d, int col) {
    return ds_tensor_desc_row_elems(&d->cols[col], d->seq_len) * ds_dtype_size(d->cols[col].dtype);
}

ds_status ds_dataset_read_rows(const ds_dataset *d, int col, size_t row, size_t count, void *dst) {
    if (!d || col < 0 || col >= d->n_columns || !dst)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_read_rows: no column %d", col);
    if (row > d->n || count > d->n - row)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_read_rows: rows %zu..%zu of %zu", row,
                      row + count, d->n);
    if (d->data[col]) {
        size_t rb = ds_dataset_row_bytes(d, col);
        memcpy(dst, (const char *)d->data[col] + row * rb, count * rb);
        return DS_OK;
    }
    if (!d->rows_fn)
        return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s is computed, but the dataset has no "
                      "row source (ds_dataset_set_rows_source)", d->cols[col].name);
    return d->rows_fn(d->rows_src, col, row, count, dst);
}

int32_t *ds_dataset_i32(const ds_dataset *d, const char *name) {
    int k = ds_dataset_find(d, name);
    return k >= 0 && d->cols[k].dtype == DS_I32 ? (int32_t *)d->data[k] : NULL;
}

float *ds_dataset_f32(const ds_dataset *d, const char *name) {
    int k = ds_dataset_find(d, name);
    return k >= 0 && d->cols[k].dtype == DS_F32 ? (float *)d->data[k] : NULL;
}

ds_status ds_dataset_set_classes(ds_dataset *d, int n, const char *const *names) {
    if (!d || n < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_set_classes: need a dataset and n >= 1, "
                      "got %d", n);
    char **v = calloc((size_t)n, sizeof *v);
    if (!v) return DS_ERR(DS_ERR_OOM, "ds_dataset_set_classes: out of memory");
    for (int c = 0; c < n; c++) {
        char num[16];
        snprintf(num, sizeof num, "%d", c);
        const char *name = names ? names[c] : num;
        v[c] = name ? strdup(name) : NULL;
        if (!v[c]) {
            for (int k = 0; k < c; k++) free(v[k]);
            free(v);
            return name ? DS_ERR(DS_ERR_OOM, "ds_dataset_set_classes: out of memory")
                        : DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_set_classes: name %d is NULL", c);
        }
    }
    if (d->class_names)
        for (int c = 0; c < d->n_classes; c++) free(d->class_names[c]);
    free(d->class_names);
    d->class_names = v;
    d->n_classes = n;
    return DS_OK;
}

/* "[B, 64]", "[B, T]", "[B]" */
static void shape_str(const ds_tensor_desc *t, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "[B");
    for (int i = 0; i < t->ndim && n > 0 && (size_t)n < cap; i++) {
        if (t->dims[i] == DS_DIM_SEQ) n += snprintf(buf + n, cap - (size_t)n, ", T");
        else n += snprintf(buf + n, cap - (size_t)n, ", %lld", (long long)t->dims[i]);
    }
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

/* Every value of int32 column k against the model input's range; a computed
 * column read in chunks of rows. */
static ds_status check_values(const ds_dataset *d, int k, const ds_tensor_desc *in) {
    size_t elems = ds_tensor_desc_row_elems(&d->cols[k], d->seq_len);
    if (d->data[k]) return ds_tensor_desc_check_values(in, d->data[k], d->n, elems, "column");
    if (in->hi <= in->lo || d->n == 0) return DS_OK; /* no range declared */
    enum { CHUNK = 1024 };
    int32_t *buf = malloc(CHUNK * (elems ? elems : 1) * sizeof *buf);
    if (!buf) return DS_ERR(DS_ERR_OOM, "checking dataset column %s", d->cols[k].name);
    ds_status st = DS_OK;
    for (size_t r = 0; r < d->n && st == DS_OK; r += CHUNK) {
        size_t m = d->n - r < CHUNK ? d->n - r : CHUNK;
        st = ds_dataset_read_rows(d, k, r, m, buf);
        if (st == DS_OK) st = ds_tensor_desc_check_rows(in, buf, r, m, elems, "column");
    }
    free(buf);
    return st;
}

ds_status ds_dataset_check(const ds_dataset *d, const ds_model *model) {
    if (!d || !model) return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_check: NULL argument");
    for (int i = 0; i < model->n_inputs; i++) {
        const ds_tensor_desc *in = &model->inputs[i];
        int k = ds_dataset_find(d, in->name);
        if (k < 0) {
            if (in->flags & DS_INPUT_OPTIONAL) continue;
            char names[DS_MAX_INPUTS * (DS_MAX_INPUT_NAME + 2) + 1] = "";
            for (int c = 0; c < d->n_columns; c++) {
                if (c) strcat(names, ", ");
                strcat(names, d->cols[c].name);
            }
            return DS_ERR(DS_ERR_INVALID_ARG, "the dataset has no column \"%s\", an input of model "
                          "%s (its columns: %s)", in->name, model->type,
                          d->n_columns ? names : "none");
        }
        const ds_tensor_desc *c = &d->cols[k];
        bool same = c->dtype == in->dtype && c->ndim == in->ndim;
        for (int j = 0; same && j < c->ndim; j++) same = c->dims[j] == in->dims[j];
        if (!same) {
            char a[96], b[96];
            shape_str(c, a, sizeof a);
            shape_str(in, b, sizeof b);
            return DS_ERR(DS_ERR_INVALID_ARG, "dataset column %s is %s %s, model %s declares %s %s",
                          in->name, ds_dtype_name(c->dtype), a, model->type,
                          ds_dtype_name(in->dtype), b);
        }
        bool seq = false;
        for (int j = 0; j < c->ndim; j++) seq |= c->dims[j] == DS_DIM_SEQ;
        if (seq && d->seq_len > model->max_seq_len)
            return DS_ERR(DS_ERR_INVALID_ARG, "dataset rows have %d positions but model %s plans "
                          "for at most %d (max_seq_len)", d->seq_len, model->type,
                          model->max_seq_len);
        /* every value once, here, rather than a module's failure at the row's
         * turn, an epoch into the run */
        if (in->dtype == DS_I32) DS_TRY(check_values(d, k, in));
    }
    return DS_OK;
}
