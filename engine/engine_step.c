/* The training loop: forward, backward, step, evaluation, prediction.
 * Every buffer used here is allocated once, in ds_engine_plan_activations
 * (engine_plan.c); a step allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/sched.h"
#include "engine/io/fault.h"
#include "engine/engine_internal.h"

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

/* "input_ids, attention_mask, labels (target)" */
static void input_list(const ds_model *m, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int j = 0; j < m->n_inputs && n < cap; j++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%s", j ? ", " : "", m->inputs[j].name,
                              m->inputs[j].flags & DS_INPUT_TARGET ? " (target)" : "");
}

/* Copy a host micro-batch into the planned device buffers: the model's
 * inputs by name, targets only when training. */
static ds_status upload_batch(engine_t *e, const ds_batch *hb, bool with_targets) {
    if (!hb) return DS_ERR(DS_ERR_INVALID_ARG, "batch is NULL");
    if (hb->B < 0 || hb->B > e->cap_B)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "batch of %d rows; the engine planned for train_micro_batch_size_per_gpu "
                      "= %d", hb->B, e->cap_B);
    int T = hb->T > 0 ? hb->T : 1;
    if (T > e->T)
        return DS_ERR(DS_ERR_INVALID_ARG, "batch sequence length %d outside 1..%d (the model's "
                      "max_seq_len)", hb->T, e->T);
    const ds_model *m = e->model;
    char names[DS_MAX_INPUTS * (DS_MAX_INPUT_NAME + 12)];
    for (int i = 0; i < hb->n; i++)
        if (!ds_model_input(m, hb->t[i].name)) {
            input_list(m, names, sizeof names);
            return DS_ERR(DS_ERR_INVALID_ARG, "batch tensor \"%s\" is not an input of model %s "
                          "(its inputs: %s)", hb->t[i].name, m->type, names);
        }
    /* every input checked before the first is copied: a refused batch
     * leaves the last one's device buffers and dbatch as they were */
    const ds_tensor *found[DS_MAX_INPUTS] = {0};
    for (int j = 0; j < m->n_inputs; j++) {
        const ds_tensor_desc *in = &m->inputs[j];
        bool target = (in->flags & DS_INPUT_TARGET) != 0;
        if (target && !with_targets) continue;
        const ds_tensor *t = NULL;
        for (int i = 0; i < hb->n && !t; i++)
            if (strcmp(hb->t[i].name, in->name) == 0) t = &hb->t[i];
        if (!t) {
            if (in->flags & DS_INPUT_OPTIONAL) continue;
            return DS_ERR(DS_ERR_INVALID_ARG, "the batch has no tensor \"%s\", a%s input of model "
                          "%s", in->name, target ? " target" : "n", m->type);
        }
        if (t->dtype != in->dtype)
            return DS_ERR(DS_ERR_INVALID_ARG, "batch tensor %s is %s, model %s declares %s",
                          in->name, ds_dtype_name(t->dtype), m->type, ds_dtype_name(in->dtype));
        size_t row_elems = ds_tensor_desc_row_elems(in, T);
        if (hb->B > 0 && row_elems > 0 && !t->data)
            return DS_ERR(DS_ERR_INVALID_ARG, "batch tensor %s has no data", in->name);
        if (in->dtype == DS_I32 && hb->B > 0) /* a value outside its declared range */
            DS_TRY(ds_tensor_desc_check_values(in, t->data, (size_t)hb->B, row_elems,
                                               "batch tensor"));
        found[j] = t;
    }
    ds_backend *be = e->be;
    e->dbatch = (ds_batch){.B = hb->B, .T = T};
    for (int j = 0; j < m->n_inputs; j++) {
        const ds_tensor_desc *in = &m->inputs[j];
        if (!found[j]) continue;
        size_t bytes = (size_t)hb->B * ds_tensor_desc_row_elems(in, T) * ds_dtype_size(in->dtype);
        DS_TRY(be->ops->memcpy(be, e->d_in[j], found[j]->data, bytes, DS_COPY_H2D, NULL));
        DS_TRY(ds_batch_set(&e->dbatch, in->name, in->dtype, e->d_in[j]));
    }
    return DS_OK;
}

size_t ds_output_elems(const engine_t *e, int B, int T) {
    const ds_model *m = e->model;
    if (m->n_modules < 2) return 0;
    const ds_module *head = m->modules[m->n_modules - 2];
    return head->ops->out_elems(head, B, T > 0 ? T : 1);
}

static ds_module_ctx module_ctx(engine_t *e, int i, bool training) {
    return (ds_module_ctx){.be = e->be, .batch = &e->dbatch, .training = training,
                           .seed = ds_engine_module_seed(e, e->fwd_seed, i),
                           .x = i > 0 ? e->act[i - 1] : NULL, .y = e->act[i],
                           .saved = e->saved[i], .scratch = e->scratch, .loss_scale = 1.0f};
}

/* Tell the strategy a forward begins: a training forward's micro-batch
 * (host), or NULL for an evaluation or prediction (zero.h). */
static ds_status begin_forward(engine_t *e, const ds_batch *host) {
    if (!e->zero->ops->begin_forward) return DS_OK;
    DS_TRY(e->zero->ops->begin_forward(e->zero, host, e->model->inputs, e->model->n_inputs));
    return DS_OK;
}

/* Whether a failure leaves the communicator unusable: then the ranks cannot
 * agree on anything more, and a walk through the rest of a forward's
 * collectives (below) would only wait for a peer that is gone. */
static bool comm_failure(ds_status st) { return st == DS_ERR_COMM || st == DS_ERR_TIMEOUT; }

/* This rank's forward failed with `st` (its message set) before module
 * `from`: a bad token id, a batch it was not planned for. The other ranks go
 * on through the collectives of the forward (stage 3 gathers every module's
 * parameters, stages 1 and 2 exchange the rows an embedding reads), and
 * would wait in them for this rank until comm_timeout_s, then report a
 * timeout instead of the cause. So it takes part in them, computing nothing:
 * posts its batch as NULL when it had not (every table whole: the same
 * exchange on every rank whatever each asks), fetches and releases modules
 * [from, upto). Returns st with its message, or the walk's own failure (a
 * communicator that broke meanwhile) saying what came first. At world 1
 * nobody waits: st as it is. */
static ds_status forward_failed(engine_t *e, ds_status st, int from, int upto, bool post) {
    if (e->comm->world == 1 || comm_failure(st)) return st;
    ds_error_saved keep, unread;
    ds_error_save(&keep);
    int unread_at = -1; /* the first module whose own piece this walk could not read */
    ds_status ws = post ? begin_forward(e, NULL) : DS_OK;
    for (int i = from; ws == DS_OK && i < upto; i++) {
        float **params, **tied;
        ws = e->zero->ops->fetch(e->zero, i, &params, &tied);
        if (ws != DS_OK && e->zero->fetch_local) { /* its gathers went: walk on */
            if (unread_at < 0 && !e->fetch_failed) {
                unread_at = i;
                ds_error_save(&unread);
            }
            e->fetch_failed = true;
            ws = DS_OK;
        }
        if (ws == DS_OK) ws = e->zero->ops->release(e->zero, i);
    }
    if (ws != DS_OK) {
        ds_error_prefix("taking part in the rest of the forward after this rank's own failure "
                        "(%s)", keep.msg);
        return ws;
    }
    if (unread_at < 0) {
        ds_error_restore(&keep);
        return st;
    }
    /* Both: the other ranks computed with zeros for the unread piece, so the
     * message they all fail with (eval_agree, the window's agreement) names
     * it beside the first failure. */
    ds_error_restore(&unread);
    ds_error_prefix("%s; then, taking part in the rest of the forward, the parameters of %s "
                    "(the other ranks used zeros for this rank's part)", keep.msg,
                    e->model->modules[unread_at]->name);
    ds_error_saved both; /* recorded with the status returned: the first failure's */
    ds_error_save(&both);
    both.status = keep.status;
    ds_error_restore(&both);
    return st;
}

/* Forward through modules [0, upto). A module that fails at world > 1 does
 * not leave the other ranks in the collectives of the modules after it
 * (forward_failed). */
static ds_status run_forward(engine_t *e, int upto, bool training) {
    for (int i = 0; i < upto; i++) {
        ds_module *mod = e->model->modules[i];
        float **params, **tied;
        ds_status fst = e->zero->ops->fetch(e->zero, i, &params, &tied);
        if (fst != DS_OK) {
            /* a failure of this rank's alone (offload_param's disk, a cast):
             * its gathers went, so the walk goes on; anything else (a
             * collective, the communication thread) may have parted the
             * ranks' calls, and a walk would fail at once on this rank while
             * the others wait in the gathers it skipped */
            (void)e->zero->ops->release(e->zero, i); /* its slots back */
            if (!comm_failure(fst)) ds_error_prefix("the parameters of %s", mod->name);
            if (!e->zero->fetch_local) return fst;
            e->fetch_failed = true;
            ds_error_trace(__FILE__, __LINE__);
            return forward_failed(e, fst, i + 1, upto, false);
        }
        if (e->dbatch.B > 0) {
            ds_module_ctx ctx = module_ctx(e, i, training);
            ctx.params = params;
            ctx.tied = tied;
            ds_prof_mark pm = ds_prof_begin(&e->prof);
            ds_status st = mod->ops->forward(mod, &ctx);
            ds_prof_end(&e->prof, i, false, pm);
            if (st != DS_OK) {
                /* its parameters back (stage 3: a gather slot kept in use would
                 * be lost to every later forward once the slots are dropped) */
                (void)e->zero->ops->release(e->zero, i);
                ds_error_prefix("forward of %s", mod->name);
                ds_error_trace(__FILE__, __LINE__);
                return forward_failed(e, st, i + 1, upto, false);
            }
        }
        DS_TRY(e->zero->ops->release(e->zero, i));
    }
    return DS_OK;
}

/* After the ranks agreed that a forward or a window failed: the strategy's
 * gathered spans go (zero.h, drop_gathered), on every rank alike. */
static ds_status drop_gathered(engine_t *e) {
    if (!e->zero->ops->drop_gathered) return DS_OK;
    DS_TRY(e->zero->ops->drop_gathered(e->zero));
    return DS_OK;
}

/* Every micro-batch's loss is normalised by the loss weight of ALL ranks'
 * rows together (the loss module's y[1]: rows, counted tokens, a weight sum),
 * as one process computing the loss on the concatenated batch would: each
 * rank's loss module divides by its own weight, so its backward is scaled by
 * world * own weight / all ranks' (the average over ranks of the gradients
 * then gives the sum over all items of their gradient / total weight).
 * Without it the objective would depend on how the items fall on the ranks:
 * a language model's padding, class weights. When every rank has the same
 * weight (a plain classification loss, equal rows) the factor is exactly 1.
 * One all-reduce of two scalars per micro-batch, which also agrees whether
 * every rank's forward worked (`mine`: this rank's status, its message set
 * when it failed): when one failed, every rank fails alike, the others
 * saying which rank and why (ds_comm_agree), and all of them can go on with
 * their next micro-batches. Returns the agreed status. */
static ds_status normalise_loss(engine_t *e, ds_status mine, float weight) {
    e->loss_norm = 1.0;
    if (e->comm->world == 1 || comm_failure(mine)) return mine;
    double total[2] = {mine == DS_OK ? weight : 0.0, mine == DS_OK ? 0.0 : 1.0};
    ds_comm_set_context(e->comm, "the loss weights after forward"); /* named in a timeout */
    ds_status st = ds_comm_host_all_reduce(e->comm, total, 2, DS_F64, DS_REDUCE_SUM);
    ds_comm_set_context(e->comm, NULL);
    DS_TRY(st);
    if (total[1] > 0.0) { /* some rank's forward failed: each learns which */
        ds_status worst;
        DS_TRY(ds_comm_agree(e->comm, mine, &worst));
        ds_error_saved keep;
        ds_error_save(&keep);
        DS_TRY(drop_gathered(e)); /* what a failed read left in the caches */
        ds_error_restore(&keep);
        return worst;
    }
    e->loss_norm = total[0] > 0.0 ? (double)e->comm->world * weight / total[0] : 0.0;
    return DS_OK;
}

ds_status ds_forward(engine_t *e, const ds_batch *host_batch, float *loss_out) {
    /* the last micro-batch's gradients are in (and at a boundary reduced):
     * another backward before its ds_step would add to them */
    if (e->have_backward)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_forward after ds_backward: call ds_step first "
                      "(forward, backward, step for every micro-batch)");
    /* and the last forward's loss is counted in the step's, its backward due */
    if (e->have_forward)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_forward twice: the last forward awaits its "
                      "ds_backward (forward, backward, step for every micro-batch)");
    DS_TRY(ds_engine_usable(e, "ds_forward"));
    ds_engine_prof_forward(e); /* flops_profiler: counting starts at profile_step */
    double wc0 = ds_wc_start(&e->wc);
    int n = e->model->n_modules;
    float out[2] = {0.0f, 0.0f}; /* the loss module's mean loss and its weight */
    ds_status st = upload_batch(e, host_batch, true);
    if (st == DS_OK && host_batch->B == 0)
        st = DS_ERR(DS_ERR_INVALID_ARG, "ds_forward: empty batch");
    if (st == DS_OK) {
        st = begin_forward(e, host_batch); /* a table's rows it cannot plan: refused alike */
        if (st != DS_OK) ds_error_prefix("ds_forward");
    }
    if (st != DS_OK) {
        st = forward_failed(e, st, 0, n, true);
    } else {
        e->fwd_seed = mix64(e->seed ^ mix64((uint64_t)e->micro_steps + 0x5151));
        ds_preempt_note(DS_PREEMPT_IN_STEP, e->micro_in_step + 1, (int)ds_engine_window(e));
        st = run_forward(e, n, true);
        if (st == DS_OK)
            st = e->be->ops->memcpy(e->be, out, e->act[n - 1], sizeof out, DS_COPY_D2H, NULL);
    }
    DS_TRY(normalise_loss(e, st, out[1]));
    e->have_forward = true;
    e->loss_accum += out[0] * e->loss_norm;
    if (loss_out) *loss_out = out[0];
    ds_wc_stop(&e->wc, DS_WC_FWD, wc0);
    return DS_OK;
}

/* DS_FAULT_INJECT=error:backward:<module name>[:rank=R] makes that module's
 * backward fail (engine/io/fault.h): the tests' way to fail one rank's
 * backward part way. One getenv per module when unset. */
static ds_status backward_fault(const engine_t *e, const ds_module *mod) {
    if (!getenv(DS_FAULT_ENV)) return DS_OK;
    char site[DS_MAX_NAME + 16];
    snprintf(site, sizeof site, "backward:%s", mod->name);
    DS_TRY(ds_fault_error(site, e->comm->rank));
    return DS_OK;
}

/* Module e->bwd_module's parameters from `first` on (0: all of them) are
 * final: hand the part of its span not handed over yet to the strategy
 * (zero.h, grad_done). A module that calls ds_module_grads_final
 * with a larger `first` than before says nothing new. */
static ds_status grads_final(void *arg, int first) {
    engine_t *e = arg;
    const ds_flat_module *fm = &e->flat->modules[e->bwd_module];
    int64_t lo = first > 0 ? e->flat->params[fm->first_param + first].offset : fm->begin;
    if (lo >= e->bwd_done) return DS_OK;
    ds_status st = e->zero->ops->grad_done(e->zero, e->bwd_module, lo, e->bwd_done);
    if (st != DS_OK) {
        e->handover_failed = true;
        return st;
    }
    e->bwd_done = lo;
    return DS_OK;
}

/* A module failed with st (its message set): the first of this backward
 * is kept for the return (*failed, *why), the first of the window for the
 * boundary. Whatever module failed, the backward goes on through the
 * modules before it (computing on what it has), so the strategy's
 * collectives (gradient buckets, stage 3's gathers) stay the others'. */
static void note_module_failure(engine_t *e, ds_status st, ds_status *failed,
                                ds_error_saved *why) {
    if (e->window_failed == DS_OK) {
        e->window_failed = st;
        ds_error_save(&e->window_err);
    }
    if (*failed == DS_OK) {
        *failed = st;
        ds_error_save(why);
    }
}

ds_status ds_backward(engine_t *e) {
    if (!e->have_forward)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s (forward, backward, step for every micro-batch)",
                      e->have_backward ? "ds_backward twice: the last backward awaits its ds_step"
                                       : "ds_backward without ds_forward");
    double wc0 = ds_wc_start(&e->wc);
    e->have_forward = false;
    e->have_backward = true; /* until ds_step, even if this backward fails part-way */
    int n = e->model->n_modules;
    ds_status failed = DS_OK; /* the first module that failed, and why */
    ds_error_saved why;
    e->backward_ended = false;
    /* Gradient accumulation: each micro-batch contributes loss / the
     * window's micro-batches (GAS, fewer in the window that ends an epoch:
     * the step is the mean over what it saw, as the HF Trainer divides by
     * the last window's own length); fp16 scales the loss up so small
     * gradients survive the half format. */
    float loss_scale = (float)(e->scaler.scale * e->loss_norm / (double)ds_engine_window(e));
    const float *dy = NULL;
    int which = 0;
    /* The last micro-batch of the accumulation: each module's gradients are
     * final when its backward ends (or, part by part, where it says so:
     * ds_module_grads_final), and the strategy reduces them while the
     * backward goes on (overlap_comm). */
    e->zero->final_backward = e->micro_in_step + 1 >= ds_engine_window(e);
    for (int i = n - 1; i >= 0; i--) {
        ds_module *mod = e->model->modules[i];
        float **params, **tied, **grads;
        /* a fetch that failed on this rank alone (offload_param's disk, a
         * cast) fails the module, as its backward failing would: its gathers
         * went; any other failure may have parted the ranks (run_forward) */
        ds_status st = e->zero->ops->fetch(e->zero, i, &params, &tied);
        if (st != DS_OK && !comm_failure(st)) ds_error_prefix("the parameters of %s", mod->name);
        if (st != DS_OK && !e->zero->fetch_local) {
            (void)e->zero->ops->release(e->zero, i);
            return st;
        }
        DS_TRY(e->zero->ops->grad_slots(e->zero, i, &grads));
        DS_TRY(ds_ties_fold(e->ties, i, grads)); /* later modules' uses of its parameters */
        ds_module_ctx ctx = module_ctx(e, i, true);
        ctx.params = params;
        ctx.tied = tied;
        e->bwd_module = i;
        e->bwd_done = e->flat->modules[i].end;
        e->handover_failed = false;
        ds_prof_mark pm = ds_prof_begin(&e->prof); /* a recomputed forward counts in backward */
        if (st == DS_OK && e->recompute[i]) { /* activation checkpointing: rebuild the internals */
            st = mod->ops->forward(mod, &ctx);
            if (st != DS_OK) ds_error_prefix("recomputing forward of %s", mod->name);
        }
        ctx.grads = grads;
        ctx.tied_grads = ds_ties_grad_slots(e->ties, i);
        ctx.dy = dy;
        ctx.dx = i > 0 ? e->grad_buf[which] : NULL;
        ctx.loss_scale = loss_scale;
        ctx.grads_final = grads_final;
        ctx.grads_final_arg = e;
        if (st == DS_OK) {
            st = backward_fault(e, mod);
            if (st == DS_OK) st = mod->ops->backward(mod, &ctx);
            if (st != DS_OK) ds_error_prefix("backward of %s", mod->name);
        }
        ds_prof_end(&e->prof, i, true, pm);
        if (st == DS_OK) {
            st = grads_final(e, 0); /* what the module did not hand over itself */
        } else if (comm_failure(st) || e->handover_failed) {
            /* the strategy's failure inside the module's own hand-over (a
             * collective, a refused bucket): handing over again would
             * repeat a range, so nothing more is made */
            (void)e->zero->ops->release(e->zero, i);
            ds_error_trace(__FILE__, __LINE__);
            return st;
        } else {
            ds_error_trace(__FILE__, __LINE__);
            note_module_failure(e, st, &failed, &why);
            /* the rest of its span in one piece: the strategies' buckets
             * are cut at parameters, whatever the pieces (grad_buckets.h),
             * so this rank still makes the others' collectives */
            st = grads_final(e, 0);
            /* the modules before it read its dx: defined, whatever it left */
            if (st == DS_OK && i > 0)
                st = e->be->ops->memset(e->be, ctx.dx, 0, e->act_elems[i - 1] * sizeof(float),
                                        NULL);
        }
        if (st != DS_OK) { /* the strategy's own failure: communication, NVMe */
            (void)e->zero->ops->release(e->zero, i); /* as in run_forward */
            if (failed != DS_OK)
                ds_error_prefix("handing over the gradients of %s after this rank's failure (%s)",
                                mod->name, why.msg);
            return st;
        }
        DS_TRY(e->zero->ops->release(e->zero, i));
        dy = ctx.dx;
        which ^= 1;
    }
    e->micro_steps++;
    e->samples += (int64_t)e->dbatch.B * e->comm->world;
    ds_wc_stop(&e->wc, DS_WC_BWD, wc0);
    e->backward_ended = true;
    if (failed != DS_OK) { /* the first failure, as it was said */
        ds_error_restore(&why);
        return failed;
    }
    return DS_OK;
}

static ds_optim_step optim_step(const engine_t *e, double lr) {
    const ds_config *c = &e->cfg;
    ds_optim_step s = {.type = c->optimizer, .no_decay = e->no_decay, .flat_lo = 0};
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

/* A step whose gradients are not finite is skipped, and a run that keeps
 * skipping cannot learn: it stops with its reason instead of ending
 * "successfully" having trained nothing. fp16 with a dynamic scale does as
 * DeepSpeed: skips lower the scale, and an overflow that would lower it below
 * min_loss_scale ends the run (DeepSpeed's raise_error_at_min_scale). fp32,
 * bf16 and a static fp16 scale have nothing to adapt, so they fail after
 * zero_engine.max_consecutive_skips skips in a row. Every rank knows the
 * overflow (reduce_grads agrees it), so every rank fails alike. */
static ds_status check_can_learn(engine_t *e, bool skip) {
    if (!skip) {
        e->consecutive_skips = 0;
        return DS_OK;
    }
    long long step = (long long)e->global_step + 1;
    const ds_loss_scaler *ls = &e->scaler;
    if (ls->enabled && ls->dynamic) {
        bool lowers = ls->delayed_shift == 1 || ls->cur_hysteresis == 1;
        if (lowers && ls->scale <= ls->min_scale)
            return DS_ERR(DS_ERR_NONFINITE, "step %lld: gradient overflow with the loss scale "
                          "already at fp16.min_loss_scale = %g: the run cannot learn in fp16 (every "
                          "step would be skipped); lower the learning rate, or train in bf16 or "
                          "fp32", step, ls->min_scale);
        return DS_OK;
    }
    if (++e->consecutive_skips > e->cfg.max_consecutive_skips)
        return DS_ERR(DS_ERR_NONFINITE, "step %lld: non-finite gradient (NaN or inf) in %lld "
                      "steps in a row, more than zero_engine.max_consecutive_skips = %d allows: "
                      "the run cannot learn; lower the learning rate, or look for NaN or inf in "
                      "the data and the loaded weights", step, (long long)e->consecutive_skips,
                      e->cfg.max_consecutive_skips);
    return DS_OK;
}

/* Ranks whose collectives have parted without a hang (sizes that happened
 * to fit: a training loop's own ds_all_reduce_host called with other
 * counts on one rank) hold sums of unrelated buffers: no rank may update
 * on them. The
 * sequence hashes of the ranks' calls (ds_comm_sequence) ride the step's
 * loss all-reduce as two 16-bit halves h and their squares: all ranks' h
 * are equal exactly when world * sum(h^2) == sum(h)^2 (Cauchy-Schwarz),
 * every term an integer below 2^53 for worlds up to SEQ_MAX_WORLD, so the
 * doubles are exact in any order of summation. */
#define SEQ_MAX_WORLD 1024
static void seq_terms(const engine_t *e, double *out) {
    uint32_t h = ds_comm_sequence(e->comm);
    double lo = (double)(h & 0xffffu), hi = (double)(h >> 16);
    out[0] = lo, out[1] = lo * lo, out[2] = hi, out[3] = hi * hi;
}
static bool seq_parted(const engine_t *e, const double *sum) {
    double w = (double)e->comm->world;
    if (e->comm->world > SEQ_MAX_WORLD) return false; /* not exact past it: unchecked */
    return w * sum[1] != sum[0] * sum[0] || w * sum[3] != sum[2] * sum[2];
}

/* The step's loss summed over all ranks (*loss_sum), whether a preemption
 * signal reached any rank (*stop), and whether a backward failed on any
 * rank since the last boundary (*window_failed): one all-reduce of seven
 * doubles (the flags cost nothing when neither came), which also compares
 * the ranks' collectives so far (seq_terms). Only when a signal came, the
 * ranks agree on which. */
/* An error after the window's gradients were reduced and before ds_step
 * clears them (collectives that parted, a run that cannot learn): they go
 * on this path too, so that a caller that carries on, or saves, starts the
 * next window clean instead of adding to them or failing in the next
 * backward; st and its message are what is returned. */
ds_status ds_engine_forget_window(engine_t *e) {
    e->loss_accum = 0.0;
    e->micro_in_step = 0;
    e->window = 0;
    DS_TRY(e->zero->ops->zero_grad(e->zero)); /* waits for reductions in flight */
    DS_TRY(ds_ties_clear(e->ties));
    DS_TRY(drop_gathered(e));
    return DS_OK;
}

static ds_status forget_window(engine_t *e, ds_status st) {
    ds_error_saved keep;
    ds_error_save(&keep);
    ds_status zs = ds_engine_forget_window(e);
    ds_error_restore(&keep);
    if (zs != DS_OK) /* the gradients could not be cleared: only a load goes on */
        ds_engine_lose(e, st, "step %lld's gradients", (long long)e->global_step + 1);
    return st;
}

static ds_status agree_loss(engine_t *e, int64_t window, double *loss_sum, int32_t *stop,
                            bool *window_failed) {
    double red[7] = {e->loss_accum / (double)window,
                     ds_preempt_pending() ? 1.0 : 0.0, e->window_failed != DS_OK ? 1.0 : 0.0};
    seq_terms(e, red + 3);
    ds_comm_set_context(e->comm, "the step's loss"); /* named in a timeout */
    ds_status st = ds_comm_host_all_reduce(e->comm, red, 7, DS_F64, DS_REDUCE_SUM);
    *stop = 0;
    if (st == DS_OK && red[1] > 0.0) {
        *stop = ds_preempt_pending();
        ds_comm_set_context(e->comm, "the preemption signal");
        st = ds_comm_host_all_reduce(e->comm, stop, 1, DS_I32, DS_REDUCE_MAX);
    }
    ds_comm_set_context(e->comm, NULL);
    DS_TRY(st);
    if (seq_parted(e, red + 3))
        return forget_window(e, DS_ERR(DS_ERR_COMM, "step %lld: the ranks have made different collective calls "
                      "(a branch on something only some ranks see, such as a training loop's "
                      "ds_all_reduce_host made otherwise on one rank), so what they reduced cannot "
                      "be trusted and no rank updates; run with zero_engine.check_collectives "
                      "(or DS_CHECK_COLLECTIVES=1) to find the first call where they part",
                      (long long)e->global_step + 1));
    *loss_sum = red[0];
    *window_failed = red[2] > 0.0;
    return DS_OK;
}

/* A backward failed on some rank since the last boundary: its gradients,
 * and every gradient of the window on every rank, are dropped (reduced and
 * cleared alike everywhere: the strategy's collectives ran as for any step),
 * nothing is updated, and the step counts as skipped, as an fp16 overflow
 * skips one, the loss scale and the schedule left as they were. Every rank
 * fails with the failing rank's error, the others naming it. */
static ds_status drop_window(engine_t *e, double loss_sum, int32_t stop) {
    ds_status mine = e->window_failed, worst = mine;
    e->window_failed = DS_OK;
    if (mine != DS_OK) ds_error_restore(&e->window_err);
    if (e->comm->world > 1) DS_TRY(ds_comm_agree(e->comm, mine, &worst));
    /* (the ties: a failed module's uses of tied parameters) */
    DS_TRY(ds_engine_forget_window(e));
    e->global_step++;
    e->skipped_steps++;
    ds_engine_prof_drop(e); /* a profiled step's counters would stay on for good */
    e->last = (ds_step_info){.step = e->global_step, .epoch = e->epoch,
                             .micro_steps = e->micro_steps,
                             .loss = loss_sum / (double)e->comm->world,
                             .lr = ds_sched_lr(&e->cfg, e->applied_steps), .grad_norm = 0.0,
                             .loss_scale = e->scaler.scale, .skipped = true,
                             .samples = e->samples, .stop_signal = stop};
    ds_preempt_note(DS_PREEMPT_BETWEEN_STEPS, 0, (int)e->cfg.gradient_accumulation_steps);
    ds_error_prefix("step %lld skipped, its gradients dropped on every rank",
                    (long long)e->global_step);
    return mine != DS_OK ? mine : worst; /* a failing rank keeps its own message */
}

ds_status ds_step(engine_t *e) {
    if (e->have_forward) return DS_ERR(DS_ERR_INVALID_ARG, "ds_step between forward and backward");
    /* a step counts one micro-batch: without its backward it would count one
     * nobody computed, and at a boundary update on what the others left
     * (Adam moves on zero gradients: its moments, weight decay) */
    if (!e->have_backward)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_step without ds_backward since the last ds_step "
                      "(forward, backward, step for every micro-batch)");
    e->have_backward = false;
    e->micro_in_step++;
    int64_t window = ds_engine_window(e);
    if (e->micro_in_step < window) return DS_OK;
    e->micro_in_step = 0;
    /* the next window is GAS micro-batches unless ds_train_batch says
     * otherwise (a short one left open by a failure does not outlive it) */
    e->window = 0;
    double wc0 = ds_wc_start(&e->wc);

    double sumsq;
    int nonfinite;
    DS_TRY(e->zero->ops->reduce_grads(e->zero, &sumsq, &nonfinite));
    /* Before the update, not after: at stages 1 and 2 the update queues the
     * parameters' all-gather on the communication thread to run behind the
     * next forward (zero/param_gather.h), and a collective on this thread
     * waits until that queue is empty (comm_worker.h). */
    double loss_sum = 0.0;
    int32_t stop = 0;
    bool window_failed = false;
    DS_TRY(agree_loss(e, window, &loss_sum, &stop, &window_failed));
    ds_wc_stop(&e->wc, DS_WC_ALLREDUCE, wc0); /* DeepSpeed's backward_allreduce */
    wc0 = ds_wc_start(&e->wc);
    if (window_failed) return drop_window(e, loss_sum, stop);
    double world = (double)e->comm->world, scale = e->scaler.scale;
    double norm = sqrt(sumsq) / (world * scale);
    double lr = ds_sched_lr(&e->cfg, e->applied_steps);
    bool skip = nonfinite != 0;
    ds_status cl = check_can_learn(e, skip);
    if (cl != DS_OK) return forget_window(e, cl);
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
        ds_status ast = e->zero->ops->apply(e->zero, (float)(coef / (world * scale)), &st);
        if (ast != DS_OK) { /* the strategies agree where one rank can fail alone */
            ds_engine_lose(e, ast, "step %lld's update", (long long)e->global_step + 1);
            ds_error_trace(__FILE__, __LINE__);
            return ast;
        }
        e->applied_steps++;
    }
    bool changed = ds_loss_scaler_update(&e->scaler, skip);
    if (changed && e->comm->rank == 0 && !e->quiet && e->scaler.enabled)
        fprintf(stderr, "[zero-engine] step %lld: loss scale %g -> %g\n",
                (long long)e->global_step + 1, scale, e->scaler.scale);
    DS_TRY(e->zero->ops->zero_grad(e->zero));
    e->global_step++;

    ds_preempt_note(DS_PREEMPT_BETWEEN_STEPS, 0, (int)e->cfg.gradient_accumulation_steps);
    e->loss_accum = 0.0;
    e->last = (ds_step_info){.step = e->global_step, .epoch = e->epoch,
                             .micro_steps = e->micro_steps, .loss = loss_sum / world, .lr = lr,
                             .grad_norm = norm, .loss_scale = e->scaler.scale, .skipped = skip,
                             .samples = e->samples, .stop_signal = stop};
    ds_wc_stop(&e->wc, DS_WC_STEP, wc0);
    ds_engine_prof_step_end(e);
    if (!e->quiet) ds_engine_print_step(e);
    ds_engine_wall_clock_step(e);
    ds_engine_monitor_step(e);
    return DS_OK;
}

/* An evaluation or a prediction at stage 3: a rank whose own piece of the
 * parameters could not be read (offload_param's disk) took part in every
 * gather with zeros in its place, so the other ranks computed with them
 * too: every rank learns it and fails with that rank's message, and the
 * gathered spans go. A refused batch stays its own rank's failure (the
 * parameters are whole). One host all-reduce of a scalar per call. */
static ds_status eval_agree(engine_t *e, ds_status st) {
    if (e->comm->world == 1 || !e->zero->ops->drop_gathered || comm_failure(st)) return st;
    double bad = e->fetch_failed ? 1.0 : 0.0;
    ds_error_saved keep;
    ds_error_save(&keep);
    ds_comm_set_context(e->comm, "an evaluation's parameter reads"); /* named in a timeout */
    ds_status rs = ds_comm_host_all_reduce(e->comm, &bad, 1, DS_F64, DS_REDUCE_SUM);
    ds_comm_set_context(e->comm, NULL);
    DS_TRY(rs);
    ds_error_restore(&keep);
    if (bad == 0.0) return st;
    ds_status worst;
    DS_TRY(ds_comm_agree(e->comm, e->fetch_failed ? st : DS_OK, &worst));
    ds_error_save(&keep);
    DS_TRY(drop_gathered(e));
    ds_error_restore(&keep);
    return worst;
}

ds_status ds_evaluate(engine_t *e, const ds_batch *host_batch, double *loss, double *weight) {
    *loss = *weight = 0.0;
    if (e->have_forward)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_evaluate between ds_forward and ds_backward (it "
                      "would overwrite what the backward needs)");
    DS_TRY(ds_engine_usable(e, "ds_evaluate"));
    int n = e->model->n_modules;
    e->fetch_failed = false;
    ds_status st = upload_batch(e, host_batch, true);
    if (st != DS_OK) return eval_agree(e, forward_failed(e, st, 0, n, true));
    st = begin_forward(e, NULL);
    if (st != DS_OK) return eval_agree(e, forward_failed(e, st, 0, n, false));
    DS_TRY(eval_agree(e, run_forward(e, n, false))); /* through the loss, no dropout */
    if (host_batch->B == 0) return DS_OK;
    float out[2];
    DS_TRY(e->be->ops->memcpy(e->be, out, e->act[n - 1], sizeof out, DS_COPY_D2H, NULL));
    *loss = out[0];
    *weight = out[1];
    return DS_OK;
}

ds_status ds_predict(engine_t *e, const ds_batch *host_batch, float *out) {
    int n = e->model->n_modules;
    if (n < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_predict: model %s has no module before its loss",
                      e->model->type);
    if (e->have_forward)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_predict between ds_forward and ds_backward (it "
                      "would overwrite what the backward needs)");
    DS_TRY(ds_engine_usable(e, "ds_predict"));
    e->fetch_failed = false;
    ds_status st = upload_batch(e, host_batch, false);
    if (st != DS_OK) return eval_agree(e, forward_failed(e, st, 0, n - 1, true));
    st = begin_forward(e, NULL);
    if (st != DS_OK) return eval_agree(e, forward_failed(e, st, 0, n - 1, false));
    DS_TRY(eval_agree(e, run_forward(e, n - 1, false))); /* stop before the loss module */
    if (host_batch->B > 0)
        DS_TRY(e->be->ops->memcpy(e->be, out, e->act[n - 2],
                                  ds_output_elems(e, host_batch->B, host_batch->T) * 4,
                                  DS_COPY_D2H, NULL));
    return DS_OK;
}
