/* ds_dataset: fixed-width token rows in host memory. */
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
    free(d->tokens);
    free(d->lengths);
    free(d->labels);
    free(d);
}

ds_status ds_dataset_create(size_t n, int seq_len, int n_classes, const char *const *class_names,
                            ds_dataset **out) {
    if (!out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_create: out is NULL");
    *out = NULL;
    if (seq_len < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_create: seq_len must be >= 1, got %d",
                      seq_len);
    if (n_classes < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_create: n_classes must be >= 1, got %d",
                      n_classes);
    if (n > SIZE_MAX / sizeof(int32_t) / (size_t)seq_len)
        return DS_ERR(DS_ERR_OOM, "ds_dataset_create: %zu rows x %d tokens overflows", n,
                      seq_len);
    ds_dataset *d = calloc(1, sizeof *d);
    if (!d) return DS_ERR(DS_ERR_OOM, "ds_dataset_create: out of memory");
    d->n = n;
    d->seq_len = seq_len;
    d->n_classes = n_classes;
    /* calloc(0) may return NULL: keep at least one element so NULL means OOM. */
    size_t rows = n ? n : 1;
    d->tokens = calloc(rows * (size_t)seq_len, sizeof(int32_t));
    d->lengths = calloc(rows, sizeof(int32_t));
    d->labels = calloc(rows, sizeof(int32_t));
    d->class_names = calloc((size_t)n_classes, sizeof(char *));
    if (!d->tokens || !d->lengths || !d->labels || !d->class_names) {
        d->n_classes = d->class_names ? n_classes : 0;
        ds_dataset_destroy(d);
        return DS_ERR(DS_ERR_OOM, "ds_dataset_create: %zu rows x %d tokens (%zu bytes)", n,
                      seq_len, rows * (size_t)seq_len * sizeof(int32_t));
    }
    for (int c = 0; c < n_classes; c++) {
        char num[16];
        const char *name = class_names ? class_names[c] : num;
        if (!class_names) snprintf(num, sizeof num, "%d", c);
        if (!name) {
            ds_dataset_destroy(d);
            return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_create: class name %d is NULL", c);
        }
        d->class_names[c] = strdup(name);
        if (!d->class_names[c]) {
            ds_dataset_destroy(d);
            return DS_ERR(DS_ERR_OOM, "ds_dataset_create: copying class names");
        }
    }
    *out = d;
    return DS_OK;
}
