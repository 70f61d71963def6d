/* ds_train_batch: one optimizer step from the engine's own data loader
 * (gradient_accumulation_steps micro-batches through ds_forward, ds_backward
 * and ds_step, engine_step.c; fewer for the step that ends an epoch). */
#include "engine/engine_internal.h"

size_t ds_engine_epoch_rows(const engine_t *e) {
    size_t n = e->sampler.num_samples, B = (size_t)e->cap_B;
    return e->cfg.dataloader_drop_last && B > 0 ? n / B * B : n;
}

/* At the end of the epoch's slice, the next epoch's (reshuffled). */
static ds_status roll_epoch(engine_t *e) {
    if (e->cursor < ds_engine_epoch_rows(e)) return DS_OK;
    e->epoch++;
    e->cursor = 0;
    return ds_sampler_set_epoch(&e->sampler, e->epoch);
}

/* Next micro-batch of this rank from the sampler. */
static ds_status next_batch(engine_t *e, ds_batch *out) {
    DS_TRY(roll_epoch(e));
    size_t left = ds_engine_epoch_rows(e) - e->cursor;
    int count = left < (size_t)e->cap_B ? (int)left : e->cap_B;
    DS_TRY(ds_host_batch_fill(&e->hb, e->train, e->sampler.indices + e->cursor, count));
    e->cursor += (size_t)count;
    *out = e->hb.batch;
    return DS_OK;
}

/* The micro-batches of the step about to start: gradient_accumulation_steps,
 * or the ones left in the epoch when fewer (the HF Trainer's last, partial
 * accumulation window), so an epoch is every row once and no step mixes two
 * epochs. Every rank's slice has the same length (the training sampler pads
 * or drops to equal counts) and the same cursor, so the ranks agree. */
static int64_t window_at(const engine_t *e) {
    int64_t gas = e->cfg.gradient_accumulation_steps;
    size_t left = ds_engine_epoch_rows(e) - e->cursor;
    int64_t micro = (int64_t)((left + (size_t)e->cap_B - 1) / (size_t)e->cap_B);
    return micro > 0 && micro < gas ? micro : gas;
}

/* The window's micro-batches not yet run: all of them, or those after the
 * ones an earlier call ran before its forward failed (the ranks agree on a
 * forward's failure, so they stand at the same micro-batch), which are kept
 * and completed as a caller's own loop would after skipping a bad batch.
 * Starting over at 0 instead crossed the boundary inside every later call,
 * returning mid-window, where no checkpoint can be saved. */
static ds_status run_window(engine_t *e) {
    /* a forward or backward pending (the caller's own ds_forward, or a
     * failure the strategy ended at once): the loader would use up a
     * micro-batch that ds_forward then refuses */
    if (e->have_forward || e->have_backward)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_train_batch: a micro-batch's %s is pending (a "
                      "ds_forward without it, or an earlier call that failed in it): call %s, "
                      "or load a checkpoint after a failure",
                      e->have_forward ? "backward" : "ds_step",
                      e->have_forward ? "ds_backward and ds_step" : "ds_step");
    int64_t n = ds_engine_window(e);
    if (e->micro_in_step > 0) {
        /* The failed micro-batch was used up: the window ends with the
         * epoch, its gradient the mean of the micro-batches it holds. A
         * failure on the epoch's last micro-batch leaves nothing to complete
         * it with short of the next epoch: its gradients go instead (all
         * ranks stand here alike), and the next epoch opens its own. */
        size_t left = ds_engine_epoch_rows(e) - e->cursor, B = (size_t)e->cap_B;
        int64_t more = (int64_t)((left + B - 1) / B);
        if (more == 0) {
            DS_TRY(ds_engine_forget_window(e));
            DS_TRY(roll_epoch(e));
            e->window = n = window_at(e);
        } else if (e->micro_in_step + more < n) {
            e->window = n = e->micro_in_step + more;
        }
    }
    for (int64_t g = e->micro_in_step; g < n; g++) {
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
    return DS_OK;
}

ds_status ds_train_batch(engine_t *e, ds_step_info *out) {
    if (!e->train)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_train_batch: no training data was given to ds_initialize");
    /* a window the caller's own ds_forward / ds_step left open keeps GAS */
    if (e->micro_in_step == 0 && !e->have_forward && !e->have_backward) {
        DS_TRY(roll_epoch(e));
        e->window = window_at(e);
    }
    ds_status st = run_window(e);
    /* ds_forward / ds_step driven by the caller: GAS; a window left open by
     * a failure keeps its length for the call that completes it */
    if (e->micro_in_step == 0) e->window = 0;
    DS_TRY(st);
    if (out) *out = e->last;
    return DS_OK;
}
