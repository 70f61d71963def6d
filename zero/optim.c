/* The optimizer pieces that need the flat parameter table: the state count
 * and Hugging Face's no-decay ranges (the update itself is
 * engine/backend/optim_update.c). */
#include "zero/optim.h"

#include <stdlib.h>

int ds_optim_state_count(const ds_config *cfg) {
    if (cfg->optimizer == DS_OPTIM_SGD) return cfg->momentum != 0.0 ? 1 : 0;
    return 2;
}

ds_status ds_no_decay_create(const ds_flat *flat, ds_no_decay **out) {
    *out = NULL;
    ds_no_decay *nd = calloc(1, sizeof *nd);
    int cap = flat->n_params > 0 ? flat->n_params : 1;
    if (nd) {
        nd->lo = malloc((size_t)cap * sizeof *nd->lo);
        nd->hi = malloc((size_t)cap * sizeof *nd->hi);
    }
    if (!nd || !nd->lo || !nd->hi) {
        ds_no_decay_destroy(nd);
        return DS_ERR(DS_ERR_OOM, "the no-decay ranges of %d parameters: out of host memory",
                      flat->n_params);
    }
    for (int i = 0; i < flat->n_params; i++) { /* in flat order */
        const ds_flat_param *p = &flat->params[i];
        if (ds_param_decays(p->desc) || p->numel == 0) continue;
        nd->n_params++;
        nd->elems += p->numel;
        if (nd->n > 0 && nd->hi[nd->n - 1] == p->offset) { /* adjacent: one range */
            nd->hi[nd->n - 1] += p->numel;
            continue;
        }
        nd->lo[nd->n] = p->offset;
        nd->hi[nd->n] = p->offset + p->numel;
        nd->n++;
    }
    *out = nd;
    return DS_OK;
}

void ds_no_decay_destroy(ds_no_decay *nd) {
    if (!nd) return;
    free(nd->lo);
    free(nd->hi);
    free(nd);
}
