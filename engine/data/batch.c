/* Host staging of one micro-batch: copy the rows of the staged columns. */
#include "engine/data/dataset.h"

#include <stdlib.h>
#include <string.h>

ds_status ds_host_batch_alloc(ds_host_batch *hb, const ds_dataset *d, const ds_model *model,
                              int cap_B) {
    if (!hb) return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_alloc: batch is NULL");
    memset(hb, 0, sizeof *hb);
    if (!d) return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_alloc: dataset is NULL");
    if (cap_B < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_alloc: need B >= 1, got %d", cap_B);
    if (model) DS_TRY(ds_dataset_check(d, model));
    hb->cap_B = cap_B;
    hb->T = d->seq_len > 0 ? d->seq_len : 1;
    hb->batch.T = hb->T;
    for (int k = 0; k < d->n_columns; k++) {
        if (model && !ds_model_input(model, d->cols[k].name)) continue;
        int j = hb->batch.n;
        hb->col[j] = k;
        hb->row_bytes[j] =
            ds_tensor_desc_row_elems(&d->cols[k], d->seq_len) * ds_dtype_size(d->cols[k].dtype);
        void *buf = calloc((size_t)cap_B, hb->row_bytes[j] ? hb->row_bytes[j] : 1);
        ds_status st = buf ? ds_batch_set(&hb->batch, d->cols[k].name, d->cols[k].dtype, buf)
                           : DS_ERR(DS_ERR_OOM, "ds_host_batch_alloc: %d rows of %s", cap_B,
                                    d->cols[k].name);
        if (st != DS_OK) {
            free(buf);
            ds_host_batch_free(hb);
            return st;
        }
    }
    return DS_OK;
}

void ds_host_batch_free(ds_host_batch *hb) {
    if (!hb) return;
    for (int j = 0; j < hb->batch.n; j++) free(hb->batch.t[j].data);
    memset(hb, 0, sizeof *hb);
}

ds_status ds_host_batch_fill(ds_host_batch *hb, const ds_dataset *d, const size_t *idx,
                             int count) {
    if (!hb || !hb->cap_B || !d)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_fill: batch or dataset missing");
    if (count < 0 || count > hb->cap_B)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_fill: %d rows for a batch of %d", count,
                      hb->cap_B);
    for (int b = 0; b < count; b++)
        if (idx[b] >= d->n)
            return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_fill: index %zu >= %zu rows", idx[b],
                          d->n);
    for (int j = 0; j < hb->batch.n; j++) {
        size_t rb = hb->row_bytes[j];
        const char *src = d->data[hb->col[j]];
        char *dst = hb->batch.t[j].data;
        if (src)
            for (int b = 0; b < count; b++) memcpy(dst + (size_t)b * rb, src + idx[b] * rb, rb);
        else /* a computed column (ds_dataset_add_computed_column) */
            for (int b = 0; b < count; b++)
                DS_TRY(ds_dataset_read_rows(d, hb->col[j], idx[b], 1, dst + (size_t)b * rb));
    }
    hb->batch.B = count;
    return DS_OK;
}
