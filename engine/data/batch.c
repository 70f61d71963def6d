/* Host staging of one micro-batch: copy rows, build the attention mask. */
#include "engine/data/dataset.h"

#include <stdlib.h>
#include <string.h>

ds_status ds_host_batch_alloc(ds_host_batch *hb, int cap_B, int T) {
    if (!hb) return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_alloc: batch is NULL");
    memset(hb, 0, sizeof *hb);
    if (cap_B < 1 || T < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_alloc: need B >= 1 and T >= 1, got %d x %d",
                      cap_B, T);
    size_t cells = (size_t)cap_B * (size_t)T;
    hb->tokens = calloc(cells, sizeof(int32_t));
    hb->mask = calloc(cells, sizeof(float));
    hb->labels = calloc((size_t)cap_B, sizeof(int32_t));
    if (!hb->tokens || !hb->mask || !hb->labels) {
        ds_host_batch_free(hb);
        return DS_ERR(DS_ERR_OOM, "ds_host_batch_alloc: %d x %d", cap_B, T);
    }
    hb->cap_B = cap_B;
    hb->T = T;
    return DS_OK;
}

void ds_host_batch_free(ds_host_batch *hb) {
    if (!hb) return;
    free(hb->tokens);
    free(hb->mask);
    free(hb->labels);
    memset(hb, 0, sizeof *hb);
}

ds_status ds_host_batch_fill(ds_host_batch *hb, const ds_dataset *d, const size_t *idx,
                             int count) {
    if (!hb || !hb->tokens || !d)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_fill: batch or dataset missing");
    if (count < 0 || count > hb->cap_B)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_fill: %d rows for a batch of %d", count,
                      hb->cap_B);
    if (d->seq_len > hb->T)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_host_batch_fill: dataset rows have %d tokens, the batch holds %d",
                      d->seq_len, hb->T);
    const int T = hb->T, S = d->seq_len;
    for (int b = 0; b < count; b++) {
        size_t i = idx[b];
        if (i >= d->n)
            return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_batch_fill: index %zu >= %zu rows", i,
                          d->n);
        int32_t len = d->lengths[i], label = d->labels[i];
        if (len < 1 || len > S)
            return DS_ERR(DS_ERR_DATA, "dataset row %zu: length %d outside [1, %d]", i,
                          (int)len, S);
        if (label < 0 || label >= d->n_classes)
            return DS_ERR(DS_ERR_DATA, "dataset row %zu: label %d outside [0, %d)", i,
                          (int)label, d->n_classes);
        int32_t *tok = hb->tokens + (size_t)b * (size_t)T;
        float *mask = hb->mask + (size_t)b * (size_t)T;
        memcpy(tok, d->tokens + i * (size_t)S, (size_t)S * sizeof(int32_t));
        for (int t = S; t < T; t++) tok[t] = 0;
        for (int t = 0; t < T; t++) mask[t] = t < len ? 1.0f : 0.0f;
        hb->labels[b] = label;
    }
    hb->B = count;
    return DS_OK;
}
