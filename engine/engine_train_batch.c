/* ds_train_batch: one optimizer step from the engine's own data loader
 * (gradient_accumulation_steps micro-batches through ds_forward, ds_backward
 * and ds_step, engine_step.c). */
#include "engine/engine_internal.h"

/* Next micro-batch of this rank from the sampler, rolling epochs over. */
static ds_status next_batch(engine_t *e, ds_batch *out) {
    if (e->cursor >= e->sampler.num_samples) {
        e->epoch++;
        e->cursor = 0;
        DS_TRY(ds_sampler_set_epoch(&e->sampler, e->epoch));
    }
    size_t left = e->sampler.num_samples - e->cursor;
    int count = left < (size_t)e->cap_B ? (int)left : e->cap_B;
    DS_TRY(ds_host_batch_fill(&e->hb, e->train, e->sampler.indices + e->cursor, count));
    e->cursor += (size_t)count;
    *out = e->hb.batch;
    return DS_OK;
}

ds_status ds_train_batch(engine_t *e, ds_step_info *out) {
    if (!e->train)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_train_batch: no training data was given to ds_initialize");
    for (int64_t g = 0; g < e->cfg.gradient_accumulation_steps; g++) {
        ds_batch b;
        DS_TRY(next_batch(e, &b));
        DS_TRY(ds_forward(e, &b, NULL));
        /* a module that failed here left the backward going on through
         * every collective: the window goes on to its boundary, where
         * ds_step fails on every rank (drop_window); the strategy's own
         * failures (communication, NVMe) end it at once */
        ds_status bs = ds_backward(e);
        if (bs != DS_OK && !e->backward_ended) return bs;
        DS_TRY(ds_step(e));
    }
    if (out) *out = e->last;
    return DS_OK;
}
