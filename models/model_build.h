/* Internal to models/: assembling a ds_model from modules. */
#ifndef DS_MODELS_MODEL_BUILD_H
#define DS_MODELS_MODEL_BUILD_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/core/module.h"

typedef struct ds_model_builder {
    ds_model *model;
    int cap;
} ds_model_builder;

/* An empty model of type `type` with room for `cap` modules. */
static inline ds_status ds_model_builder_begin(ds_model_builder *mb, const char *type, int cap) {
    mb->cap = cap;
    mb->model = calloc(1, sizeof *mb->model);
    if (mb->model) mb->model->modules = calloc((size_t)cap, sizeof *mb->model->modules);
    if (!mb->model || !mb->model->modules) {
        free(mb->model);
        mb->model = NULL;
        return DS_ERR(DS_ERR_OOM, "%s model: out of host memory", type);
    }
    snprintf(mb->model->type, sizeof mb->model->type, "%s", type);
    return DS_OK;
}

/* Append m when *st is DS_OK (the status of m's constructor). */
static inline void ds_model_builder_add(ds_model_builder *mb, ds_status *st, ds_module *m) {
    if (*st != DS_OK) return;
    DS_ASSERT(mb->model->n_modules < mb->cap);
    mb->model->modules[mb->model->n_modules++] = m;
}

/* Free everything added so far. */
static inline void ds_model_builder_abort(ds_model_builder *mb) {
    ds_model_destroy(mb->model);
    mb->model = NULL;
}

#endif /* DS_MODELS_MODEL_BUILD_H */
