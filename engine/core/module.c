/* Model lifetime and size. */
#include "engine/core/module.h"

#include <stdlib.h>

void ds_model_destroy(ds_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_modules; i++)
        if (m->modules[i] && m->modules[i]->ops->destroy) m->modules[i]->ops->destroy(m->modules[i]);
    free(m->modules);
    free(m);
}

int64_t ds_model_num_params(const ds_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++)
            n += ds_param_numel(&m->modules[i]->params[p]);
    return n;
}
