/* The bundled classifiers' dataset layout (models/models.h). */
#include <math.h>

#include "models/models.h"

ds_status ds_cls_dataset_create(size_t n, int seq_len, int n_classes,
                                const char *const *class_names, ds_dataset **out) {
    *out = NULL;
    if (seq_len < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_cls_dataset_create: seq_len must be >= 1, got %d",
                      seq_len);
    ds_dataset *d;
    DS_TRY(ds_dataset_create(n, seq_len, &d));
    const int64_t seq[1] = {DS_DIM_SEQ};
    ds_status st = ds_dataset_add_column(d, "input_ids", DS_I32, 1, seq, NULL);
    if (st == DS_OK) st = ds_dataset_add_column(d, "attention_mask", DS_F32, 1, seq, NULL);
    if (st == DS_OK) st = ds_dataset_add_column(d, "labels", DS_I32, 0, NULL, NULL);
    if (st == DS_OK) st = ds_dataset_set_classes(d, n_classes, class_names);
    if (st != DS_OK) {
        ds_dataset_destroy(d);
        return st;
    }
    *out = d;
    return DS_OK;
}

ds_status ds_cls_dataset_set_class_weights(ds_dataset *d, const float *class_weights) {
    const int32_t *labels = ds_dataset_i32(d, "labels");
    if (!labels || !class_weights)
        return DS_ERR(DS_ERR_INVALID_ARG, "class weights: %s", !labels ? "the dataset has no "
                      "int32 labels column" : "no weights given");
    for (int c = 0; c < d->n_classes; c++)
        if (!(class_weights[c] >= 0.0f) || !isfinite(class_weights[c]))
            return DS_ERR(DS_ERR_INVALID_ARG, "class weight %d is %g: must be finite and >= 0", c,
                          (double)class_weights[c]);
    for (size_t i = 0; i < d->n; i++)
        if (labels[i] != DS_IGNORE_INDEX && (labels[i] < 0 || labels[i] >= d->n_classes))
            return DS_ERR(DS_ERR_INVALID_ARG, "class weights: row %zu has label %d outside [0, %d)",
                          i, (int)labels[i], d->n_classes);
    float *w = ds_dataset_f32(d, "weights");
    if (!w) DS_TRY(ds_dataset_add_column(d, "weights", DS_F32, 0, NULL, (void **)&w));
    for (size_t i = 0; i < d->n; i++)
        w[i] = labels[i] == DS_IGNORE_INDEX ? 0.0f : class_weights[labels[i]];
    return DS_OK;
}
