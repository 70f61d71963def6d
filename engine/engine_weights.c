/* Whole-model weights in and out of the engine as safetensors. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/io/fault.h"
#include "engine/io/safetensors.h"

/* Collective. Only rank 0 writes, but every rank gathers each tensor with
 * it, so a failure of rank 0's (the file cannot be created, a full disk part
 * way, the final rename) and a rank's own (no host memory for the buffers)
 * are agreed, never left for the others to find in a gather that rank 0
 * does not join (a wait until comm_timeout_s that reports a timeout): rank 0
 * goes on gathering after a failed write, writing nothing more, and the
 * ranks agree once before the gathers and once after the file is complete.
 * Other ranks' calls then fail with "rank 0 failed with DS_ERR_IO: ...". */
ds_status ds_save_weights(engine_t *e, const char *path) {
    DS_TRY(ds_engine_usable(e, "ds_save_weights"));
    const ds_flat *f = e->flat;
    int rank = e->comm->rank;
    int64_t largest = 0;
    for (int i = 0; i < f->n_params; i++)
        if (f->params[i].numel > largest) largest = f->params[i].numel;
    /* n_params >= 1 (a model has parameters); the guard also tells gcc, whose
     * -Walloc-size-larger-than under -fsanitize=address otherwise sees a
     * negative count cast to a huge size */
    ds_st_decl *decl = calloc(f->n_params > 0 ? (size_t)f->n_params : 1, sizeof *decl);
    float *buf = malloc((size_t)largest * sizeof(float));
    ds_st_writer *w = NULL;
    ds_status st = DS_OK, local = DS_OK, worst;
    if (!decl || !buf) local = DS_ERR(DS_ERR_OOM, "saving weights: out of host memory");
    for (int i = 0; local == DS_OK && i < f->n_params; i++) {
        const ds_param_desc *d = f->params[i].desc;
        decl[i] = (ds_st_decl){.name = d->name, .dtype = DS_ST_F32, .ndim = d->ndim};
        memcpy(decl[i].shape, d->shape, sizeof(int64_t) * (size_t)d->ndim);
    }
    const ds_st_kv meta[] = {{"format", "pt"}, {"writer", "zero-engine"}};
    if (local == DS_OK && rank == 0)
        local = ds_st_writer_open(path, decl, f->n_params, meta, 2, &w);
    DS_TRY_GOTO(st, ds_comm_agree(e->comm, local, &worst), done);
    if (worst != DS_OK) { /* other ranks' message names the rank and its error */
        st = worst;
        goto done;
    }
    /* One tensor at a time: gathered (collective), then written by rank 0. */
    for (int i = 0; i < f->n_params; i++) {
        /* a gather's failure ends the save here: most are the communicator's
         * (nothing more can be agreed); a local one before the collective (an
         * NVMe read) leaves the others in it, and this rank's exit ends the
         * job (comm.h, "Ending the job") */
        DS_TRY_GOTO(st, e->zero->ops->get_param(e->zero, i, buf), done);
        if (w && local == DS_OK) {
            local = ds_fault_error("weights:write", rank);
            if (local == DS_OK) local = ds_st_writer_write_f32(w, buf, (size_t)f->params[i].numel);
        }
    }
    if (w) {
        if (local == DS_OK) {
            local = ds_st_writer_finish(w); /* fsync and rename, or nothing left */
        } else {
            ds_st_writer_abort(w); /* the partial .tmp goes; `path` stays as it was */
        }
        w = NULL;
    }
    DS_TRY_GOTO(st, ds_comm_agree(e->comm, local, &worst), done);
    st = worst;
done:
    if (w) ds_st_writer_abort(w);
    free(decl);
    free(buf);
    return st;
}
