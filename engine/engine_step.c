/* The training loop: activation plan, forward, backward, step, data loader,
 * prediction. Every buffer used here is allocated once, in
 * ds_engine_plan_activations; a step allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/sched.h"
#include "engine/engine_internal.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* splitmix64 finaliser, for deriving independent RNG streams. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t ds_engine_module_seed(const engine_t *e, uint64_t micro_seed, int module) {
    return mix64(micro_seed ^ mix64(((uint64_t)module << 20) ^ (uint64_t)e->comm->rank));
}

ds_status ds_engine_plan_activations(engine_t *e) {
    const ds_model *m = e->model;
    int n = m->n_modules;
    e->cap_B = (int)e->cfg.train_micro_batch_size_per_gpu;
    e->T = m->max_seq_len;
    if (e->cap_B <= 0 || e->T <= 0)
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

    size_t bt = (size_t)e->cap_B * (size_t)e->T;
    int C = m->n_classes > 0 ? m->n_classes : 1;
    DS_TRY(ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, bt * 4, (void **)&e->d_tokens));
    DS_TRY(ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, bt * 4, (void **)&e->d_type_ids));
    DS_TRY(ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, bt * 4, (void **)&e->d_mask));
    DS_TRY(ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)e->cap_B * 4,
                            (void **)&e->d_labels));
    DS_TRY(ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)C * 4,
                            (void **)&e->d_class_weights));
    DS_TRY(ds_mem_host_alloc(be->mem, DS_MEM_OTHER, (size_t)C * 4, "class weights",
                             (void **)&e->h_class_weights));
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
    size_t bt = (size_t)e->cap_B * (size_t)e->T;
    int C = e->model->n_classes > 0 ? e->model->n_classes : 1;
    ds_backend_free(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_tokens, bt * 4);
    ds_backend_free(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_type_ids, bt * 4);
    ds_backend_free(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_mask, bt * 4);
    ds_backend_free(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_labels, (size_t)e->cap_B * 4);
    ds_backend_free(be, DS_MEM_OTHER, DS_PLACE_DEVICE, e->d_class_weights, (size_t)C * 4);
    ds_mem_host_free(be->mem, DS_MEM_OTHER, e->h_class_weights, (size_t)C * 4);
    free(e->act);
    free(e->act_elems);
    free(e->saved);
    free(e->saved_bytes);
    free(e->recompute);
    e->act = NULL;
}

/* Copy a host micro-batch into the planned device buffers. */
static ds_status upload_batch(engine_t *e, const ds_batch *hb, bool need_labels) {
    if (!hb) return DS_ERR(DS_ERR_INVALID_ARG, "batch is NULL");
    if (hb->B < 0 || hb->B > e->cap_B)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "batch of %d rows; the engine planned for train_micro_batch_size_per_gpu "
                      "= %d", hb->B, e->cap_B);
    if (hb->T <= 0 || hb->T > e->T)
        return DS_ERR(DS_ERR_INVALID_ARG, "batch sequence length %d outside 1..%d", hb->T, e->T);
    if (hb->B > 0 && (!hb->tokens || !hb->mask))
        return DS_ERR(DS_ERR_INVALID_ARG, "batch without tokens or mask");
    if (need_labels && hb->B > 0 && !hb->labels)
        return DS_ERR(DS_ERR_INVALID_ARG, "training batch without labels");
    const ds_model *m = e->model;
    if (hb->labels)
        for (int b = 0; b < hb->B; b++)
            if (hb->labels[b] < 0 || hb->labels[b] >= m->n_classes)
                return DS_ERR(DS_ERR_INVALID_ARG, "batch row %d: label %d outside 0..%d", b,
                              hb->labels[b], m->n_classes - 1);
    ds_backend *be = e->be;
    size_t bt = (size_t)hb->B * (size_t)hb->T;
    DS_TRY(be->ops->memcpy(be, e->d_tokens, hb->tokens, bt * 4, DS_COPY_H2D, NULL));
    DS_TRY(be->ops->memcpy(be, e->d_mask, hb->mask, bt * 4, DS_COPY_H2D, NULL));
    if (hb->type_ids)
        DS_TRY(be->ops->memcpy(be, e->d_type_ids, hb->type_ids, bt * 4, DS_COPY_H2D, NULL));
    if (hb->labels)
        DS_TRY(be->ops->memcpy(be, e->d_labels, hb->labels, (size_t)hb->B * 4, DS_COPY_H2D, NULL));
    if (hb->class_weights) { /* the batch's own weights replace the engine's */
        DS_TRY(be->ops->memcpy(be, e->d_class_weights, hb->class_weights,
                               (size_t)m->n_classes * 4, DS_COPY_H2D, NULL));
        e->class_weights_set = false;
    }
    bool weighted = hb->class_weights || e->class_weights_set;
    e->dbatch = (ds_batch){.B = hb->B, .T = hb->T, .tokens = e->d_tokens,
                           .type_ids = hb->type_ids ? e->d_type_ids : NULL, .mask = e->d_mask,
                           .labels = hb->labels ? e->d_labels : NULL,
                           .class_weights = weighted ? e->d_class_weights : NULL};
    return DS_OK;
}

ds_status ds_set_class_weights(engine_t *e, const float *weights) {
    if (!weights) {
        e->class_weights_set = false;
        return DS_OK;
    }
    int C = e->model->n_classes;
    for (int c = 0; c < C; c++)
        if (!(weights[c] >= 0.0f) || weights[c] > 1e30f)
            return DS_ERR(DS_ERR_INVALID_ARG, "class weight %d is %g: must be finite and >= 0", c,
                          (double)weights[c]);
    DS_TRY(e->be->ops->memcpy(e->be, e->d_class_weights, weights, (size_t)C * sizeof(float),
                              DS_COPY_H2D, NULL));
    memcpy(e->h_class_weights, weights, (size_t)C * sizeof(float));
    e->class_weights_set = true;
    return DS_OK;
}

static ds_module_ctx module_ctx(engine_t *e, int i, bool training) {
    return (ds_module_ctx){.be = e->be, .batch = &e->dbatch, .training = training,
                           .seed = ds_engine_module_seed(e, e->fwd_seed, i),
                           .x = i > 0 ? e->act[i - 1] : NULL, .y = e->act[i],
                           .saved = e->saved[i], .scratch = e->scratch, .loss_scale = 1.0f};
}

/* Forward through modules [0, upto). */
static ds_status run_forward(engine_t *e, int upto, bool training) {
    for (int i = 0; i < upto; i++) {
        ds_module *mod = e->model->modules[i];
        float **params;
        DS_TRY(e->zero->ops->fetch(e->zero, i, &params));
        if (e->dbatch.B > 0) {
            ds_module_ctx ctx = module_ctx(e, i, training);
            ctx.params = params;
            ds_status st = mod->ops->forward(mod, &ctx);
            if (st != DS_OK) {
                ds_error_prefix("forward of %s", mod->name);
                ds_error_trace(__FILE__, __LINE__);
                return st;
            }
        }
        DS_TRY(e->zero->ops->release(e->zero, i));
    }
    return DS_OK;
}

/* A weighted loss is normalised by the weight sum of the whole micro-batch,
 * all ranks' rows together, as one process computing CrossEntropyLoss(weight)
 * on the concatenated batch would: each rank's loss module divides by its own
 * sum, so its backward is scaled by world * own sum / all ranks' sum (the
 * gradient average over ranks then gives sum over all rows of w * grad / total
 * weight). Without it the objective would depend on how the rows fall on the
 * ranks. One scalar all-reduce per weighted micro-batch. */
static ds_status weighted_loss_norm(engine_t *e, const ds_batch *hb) {
    e->loss_norm = 1.0;
    /* the weights upload_batch gave the loss: the batch's own, else the engine's */
    const float *w = hb->class_weights ? hb->class_weights
                     : e->class_weights_set ? e->h_class_weights : NULL;
    if (!w) return DS_OK;
    double mine = 0.0;
    for (int b = 0; b < hb->B; b++) mine += w[hb->labels[b]];
    double total = mine;
    DS_TRY(ds_comm_host_all_reduce(e->comm, &total, 1, DS_F64, DS_REDUCE_SUM));
    if (total > 0.0) e->loss_norm = (double)e->comm->world * mine / total;
    return DS_OK;
}

ds_status ds_forward(engine_t *e, const ds_batch *host_batch, float *loss_out) {
    DS_TRY(upload_batch(e, host_batch, true));
    if (host_batch->B == 0) return DS_ERR(DS_ERR_INVALID_ARG, "ds_forward: empty batch");
    e->fwd_seed = mix64(e->seed ^ mix64((uint64_t)e->micro_steps + 0x5151));
    DS_TRY(weighted_loss_norm(e, host_batch));
    int n = e->model->n_modules;
    DS_TRY(run_forward(e, n, true));
    float loss;
    DS_TRY(e->be->ops->memcpy(e->be, &loss, e->act[n - 1], sizeof loss, DS_COPY_D2H, NULL));
    e->have_forward = true;
    e->loss_accum += loss * e->loss_norm;
    if (loss_out) *loss_out = loss;
    return DS_OK;
}

ds_status ds_backward(engine_t *e) {
    if (!e->have_forward) return DS_ERR(DS_ERR_INVALID_ARG, "ds_backward without ds_forward");
    e->have_forward = false;
    int n = e->model->n_modules;
    /* Gradient accumulation: each micro-batch contributes loss/GAS; fp16
     * scales the loss up so small gradients survive the half format. */
    float loss_scale =
        (float)(e->scaler.scale * e->loss_norm / (double)e->cfg.gradient_accumulation_steps);
    const float *dy = NULL;
    int which = 0;
    for (int i = n - 1; i >= 0; i--) {
        ds_module *mod = e->model->modules[i];
        float **params, **grads;
        DS_TRY(e->zero->ops->fetch(e->zero, i, &params));
        DS_TRY(e->zero->ops->grad_slots(e->zero, i, &grads));
        ds_module_ctx ctx = module_ctx(e, i, true);
        ctx.params = params;
        if (e->recompute[i]) { /* activation checkpointing: rebuild the internals */
            ds_status st = mod->ops->forward(mod, &ctx);
            if (st != DS_OK) {
                ds_error_prefix("recomputing forward of %s", mod->name);
                ds_error_trace(__FILE__, __LINE__);
                return st;
            }
        }
        ctx.grads = grads;
        ctx.dy = dy;
        ctx.dx = i > 0 ? e->grad_buf[which] : NULL;
        ctx.loss_scale = loss_scale;
        ds_status st = mod->ops->backward(mod, &ctx);
        if (st != DS_OK) {
            ds_error_prefix("backward of %s", mod->name);
            ds_error_trace(__FILE__, __LINE__);
            return st;
        }
        DS_TRY(e->zero->ops->grad_done(e->zero, i));
        DS_TRY(e->zero->ops->release(e->zero, i));
        dy = ctx.dx;
        which ^= 1;
    }
    e->micro_steps++;
    e->samples += (int64_t)e->dbatch.B * e->comm->world;
    return DS_OK;
}

static ds_optim_step optim_step(const engine_t *e, double lr) {
    const ds_config *c = &e->cfg;
    ds_optim_step s = {.type = c->optimizer};
    s.adam = (ds_adam_hparams){.lr = (float)lr, .beta1 = (float)c->betas[0],
                               .beta2 = (float)c->betas[1], .eps = (float)c->eps,
                               .weight_decay = (float)c->weight_decay,
                               .step = e->applied_steps + 1,
                               .adam_w_mode = c->optimizer == DS_OPTIM_ADAMW ||
                                              (c->optimizer == DS_OPTIM_ADAM && c->adam_w_mode),
                               .bias_correction = c->bias_correction};
    s.sgd = (ds_sgd_hparams){.lr = (float)lr, .momentum = (float)c->momentum,
                             .dampening = (float)c->dampening,
                             .weight_decay = (float)c->weight_decay, .nesterov = c->nesterov,
                             .first_step = e->applied_steps == 0};
    return s;
}

ds_status ds_step(engine_t *e) {
    if (e->have_forward) return DS_ERR(DS_ERR_INVALID_ARG, "ds_step between forward and backward");
    e->micro_in_step++;
    if (e->micro_in_step < e->cfg.gradient_accumulation_steps) return DS_OK;
    e->micro_in_step = 0;

    double sumsq;
    int nonfinite;
    DS_TRY(e->zero->ops->reduce_grads(e->zero, &sumsq, &nonfinite));
    double world = (double)e->comm->world, scale = e->scaler.scale;
    double norm = sqrt(sumsq) / (world * scale);
    double lr = ds_sched_lr(&e->cfg, e->applied_steps);
    bool skip = nonfinite != 0;
    if (skip) {
        e->skipped_steps++;
        if (e->comm->rank == 0 && !e->quiet) {
            if (e->scaler.enabled)
                fprintf(stderr,
                        "[zero-engine] step %lld: gradient overflow with loss scale %g, step "
                        "skipped\n", (long long)e->global_step + 1, scale);
            else
                fprintf(stderr,
                        "[zero-engine] step %lld: non-finite gradient, step skipped (loss "
                        "diverged? lower the learning rate)\n", (long long)e->global_step + 1);
        }
    } else {
        /* DeepSpeed: clip_coef = max_norm / (total_norm + 1e-6), applied when < 1. */
        double coef = 1.0;
        double clip = e->cfg.gradient_clipping;
        if (clip > 0.0 && norm > clip) coef = clip / (norm + 1e-6);
        ds_optim_step st = optim_step(e, lr);
        DS_TRY(e->zero->ops->apply(e->zero, (float)(coef / (world * scale)), &st));
        e->applied_steps++;
    }
    bool changed = ds_loss_scaler_update(&e->scaler, skip);
    if (changed && e->comm->rank == 0 && !e->quiet && e->scaler.enabled)
        fprintf(stderr, "[zero-engine] step %lld: loss scale %g -> %g\n",
                (long long)e->global_step + 1, scale, e->scaler.scale);
    DS_TRY(e->zero->ops->zero_grad(e->zero));
    e->global_step++;

    double loss = e->loss_accum / (double)e->cfg.gradient_accumulation_steps;
    DS_TRY(ds_comm_host_all_reduce(e->comm, &loss, 1, DS_F64, DS_REDUCE_SUM));
    e->loss_accum = 0.0;
    e->last = (ds_step_info){.step = e->global_step, .epoch = e->epoch,
                             .micro_steps = e->micro_steps, .loss = loss / world, .lr = lr,
                             .grad_norm = norm, .loss_scale = e->scaler.scale, .skipped = skip,
                             .samples = e->samples};
    if (!e->quiet) ds_engine_print_step(e);
    return DS_OK;
}

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
    *out = (ds_batch){.B = e->hb.B, .T = e->hb.T, .tokens = e->hb.tokens, .mask = e->hb.mask,
                      .labels = e->hb.labels};
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
        DS_TRY(ds_backward(e));
        DS_TRY(ds_step(e));
    }
    if (out) *out = e->last;
    return DS_OK;
}

ds_status ds_predict(engine_t *e, const ds_batch *host_batch, float *logits_out) {
    DS_TRY(upload_batch(e, host_batch, false));
    int n = e->model->n_modules;
    DS_TRY(run_forward(e, n - 1, false)); /* stop before the loss module */
    if (host_batch->B > 0)
        DS_TRY(e->be->ops->memcpy(e->be, logits_out, e->act[n - 2],
                                  (size_t)host_batch->B * (size_t)e->model->n_classes * 4,
                                  DS_COPY_D2H, NULL));
    return DS_OK;
}
