/* Whole-model weights in and out of the engine as safetensors. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/io/safetensors.h"

ds_status ds_save_weights(engine_t *e, const char *path) {
    const ds_flat *f = e->flat;
    int64_t largest = 0;
    for (int i = 0; i < f->n_params; i++)
        if (f->params[i].numel > largest) largest = f->params[i].numel;
    /* n_params >= 1 (a model has parameters); the guard also tells gcc, whose
     * -Walloc-size-larger-than under -fsanitize=address otherwise sees a
     * negative count cast to a huge size */
    ds_st_decl *decl = calloc(f->n_params > 0 ? (size_t)f->n_params : 1, sizeof *decl);
    float *buf = malloc((size_t)largest * sizeof(float));
    ds_status st = DS_OK;
    if (!decl || !buf) {
        st = DS_ERR(DS_ERR_OOM, "saving weights: out of host memory");
        goto done;
    }
    for (int i = 0; i < f->n_params; i++) {
        const ds_param_desc *d = f->params[i].desc;
        decl[i] = (ds_st_decl){.name = d->name, .dtype = DS_ST_F32, .ndim = d->ndim};
        memcpy(decl[i].shape, d->shape, sizeof(int64_t) * (size_t)d->ndim);
    }
    ds_st_writer *w = NULL;
    const ds_st_kv meta[] = {{"format", "pt"}, {"writer", "zero-engine"}};
    ds_status local = DS_OK;
    if (e->comm->rank == 0) local = ds_st_writer_open(path, decl, f->n_params, meta, 2, &w);
    /* Every rank learns whether rank 0 could open the file before gathering,
     * so the gathers below stay matched. */
    ds_status worst;
    DS_TRY_GOTO(st, ds_comm_agree(e->comm, local, &worst), done);
    if (worst != DS_OK) { /* other ranks' message names rank 0 and its error */
        st = worst;
        goto done;
    }
    /* One tensor at a time: gathered (collective), then written by rank 0. */
    for (int i = 0; i < f->n_params; i++) {
        DS_TRY_GOTO(st, e->zero->ops->get_param(e->zero, i, buf), fail_writer);
        if (w) DS_TRY_GOTO(st, ds_st_writer_write_f32(w, buf, (size_t)f->params[i].numel),
                           fail_writer);
    }
    if (w) {
        st = ds_st_writer_finish(w);
        w = NULL;
    }
    goto done;
fail_writer:
    if (w) ds_st_writer_abort(w);
done:
    free(decl);
    free(buf);
    return st;
}
