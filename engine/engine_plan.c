/* The activation plan: every buffer a step uses (module outputs, saved
 * tensors, the recompute area of activation checkpointing, scratch, the two
 * gradient buffers, the device inputs, the bf16 GEMM workspace), sized once
 * for train_micro_batch_size_per_gpu rows from what the modules declare, and
 * allocated through the accountant before the first step. */
#include <stdint.h>
#include <stdlib.h>

#include "engine/engine_internal.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

ds_status ds_engine_plan_activations(engine_t *e) {
    const ds_model *m = e->model;
    int n = m->n_modules;
    e->cap_B = (int)e->cfg.train_micro_batch_size_per_gpu;
    e->T = m->max_seq_len > 0 ? m->max_seq_len : 1;
    if (e->cap_B <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "activation plan: micro batch %d x seq len %d", e->cap_B,
                      e->T);
    e->act = calloc((size_t)n, sizeof *e->act);
    e->act_elems = calloc((size_t)n, sizeof *e->act_elems);
    e->saved = calloc((size_t)n, sizeof *e->saved);
    e->saved_bytes = calloc((size_t)n, sizeof *e->saved_bytes);
    e->recompute = calloc((size_t)n, sizeof *e->recompute);
    if (!e->act || !e->act_elems || !e->saved || !e->saved_bytes || !e->recompute)
        return DS_ERR(DS_ERR_OOM, "activation plan: out of host memory");

    /* Activation checkpointing (DeepSpeed's section): checkpointable modules
     * (BERT's encoder layers) keep only their input; their internals are
     * recomputed in backward into one shared area. number_checkpoints limits
     * how many, counted from the first. */
    int64_t budget = e->cfg.number_checkpoints > 0 ? e->cfg.number_checkpoints : INT64_MAX;
    ds_backend *be = e->be;
    for (int i = 0; i < n; i++) {
        const ds_module *mod = m->modules[i];
        e->act_elems[i] = mod->ops->out_elems(mod, e->cap_B, e->T);
        e->saved_bytes[i] = mod->ops->saved_bytes(mod, e->cap_B, e->T);
        e->scratch_bytes = max_sz(e->scratch_bytes, mod->ops->scratch_bytes(mod, e->cap_B, e->T));
        if (i < n - 1) e->grad_elems = max_sz(e->grad_elems, e->act_elems[i]);
        e->recompute[i] = e->cfg.activation_checkpointing && mod->checkpointable && budget > 0;
        if (e->recompute[i]) {
            budget--;
            e->ckpt_saved_bytes = max_sz(e->ckpt_saved_bytes, e->saved_bytes[i]);
        }
        DS_TRY(ds_backend_alloc(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE,
                                e->act_elems[i] * sizeof(float), (void **)&e->act[i]));
        if (!e->recompute[i])
            DS_TRY(ds_backend_alloc(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE, e->saved_bytes[i],
                                    &e->saved[i]));
    }
    DS_TRY(ds_backend_alloc(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE, e->ckpt_saved_bytes,
                            &e->ckpt_saved));
    for (int i = 0; i < n; i++)
        if (e->recompute[i]) e->saved[i] = e->ckpt_saved;
    DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, e->scratch_bytes, &e->scratch));
    for (int k = 0; k < 2; k++)
        DS_TRY(ds_backend_alloc(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE,
                                e->grad_elems * sizeof(float), (void **)&e->grad_buf[k]));

    for (int j = 0; j < m->n_inputs; j++) {
        const ds_tensor_desc *in = &m->inputs[j];
        e->d_in_bytes[j] = (size_t)e->cap_B * ds_tensor_desc_row_elems(in, e->T) *
                           ds_dtype_size(in->dtype);
        DS_TRY(ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_in_bytes[j], &e->d_in[j]));
    }
    /* bf16 GEMM inputs: the backend's workspace for the rounded copies, as
     * large as the largest GEMM the modules declare (backend.h); the
     * backend frees it */
    if (be->gemm_inputs == DS_BF16) {
        ds_gemm_plan gp = {.kind = be->kind};
        int without = ds_model_plan_gemms(m, e->cap_B, e->T, &gp);
        DS_TRY(ds_backend_reserve_gemm_workspace(be, gp.bytes, without == 0));
    }
    return DS_OK;
}

void ds_engine_free_activations(engine_t *e) {
    ds_backend *be = e->be;
    if (!be || !e->act) return;
    int n = e->model->n_modules;
    for (int i = 0; i < n; i++) {
        ds_backend_free(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE, e->act[i],
                        e->act_elems[i] * sizeof(float));
        if (!e->recompute[i])
            ds_backend_free(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE, e->saved[i],
                            e->saved_bytes[i]);
    }
    ds_backend_free(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE, e->ckpt_saved, e->ckpt_saved_bytes);
    ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, e->scratch, e->scratch_bytes);
    for (int k = 0; k < 2; k++)
        ds_backend_free(be, DS_MEM_ACTIVATIONS, DS_PLACE_DEVICE, e->grad_buf[k],
                        e->grad_elems * sizeof(float));
    for (int j = 0; j < e->model->n_inputs; j++)
        ds_backend_free(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_in[j], e->d_in_bytes[j]);
    free(e->act);
    free(e->act_elems);
    free(e->saved);
    free(e->saved_bytes);
    free(e->recompute);
    e->act = NULL;
}
