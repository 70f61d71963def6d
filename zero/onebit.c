/* 1-bit Adam and 0/1 Adam on a full replica (zero/onebit.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/core/sched.h"
#include "zero/onebit.h"
#include "zero/flat.h"
#include "zero/optim.h"

struct ds_onebit {
    ds_onebit_type type;
    ds_backend *be;     /* its accountant holds the buffers below (DS_MEM_OPTIM) */
    const ds_config *cfg;
    ds_comm *comm;
    size_t n;
    ds_coded_layout lay;
    ds_coded_scratch *scr;
    float *werr, *serr; /* error feedback: worker [lay.worker_n], server [lay.server_n] */
    float *u;           /* 0/1 Adam: the local steps' accumulated change [n] */
    float *gbuf;        /* 0/1 Adam: the gradient to compress [n] before the variance
                           freezes; from then on the weights of the last
                           synchronisation, the same on every rank */
    float *amask;       /* the user's exp_avg_mask [n], NULL until one is set */
    /* the schedule, a function of the step and the lr schedule */
    int64_t step;       /* optimizer steps applied */
    int64_t var_interval, var_counter, local_interval, local_counter;
    double lrs;         /* 0/1 Adam: sum of lr since the last synchronisation */
    bool frozen;        /* 0/1 Adam: variance frozen, local steps */
};

/* ---- element-wise math (written once, ds_adam_update's coefficients) ---- */

/* m = b1 m + (1 - b1) g, as ds_adam_update forms it */
DS_HD float ob_momentum(float m, float g, const ds_adam_coef *c) {
    return fmaf(c->one_minus_beta1, g, c->beta1 * m);
}

/* ds_adam_update's weight update with v left as it is (bias_correction
 * false: bc2_sqrt 1, neg_step_size -lr) */
DS_HD float ob_weight(float w, float m, float v, const ds_adam_coef *c) {
    w = ds_mul_rn(w, c->decay);
    float denom = sqrtf(v) / c->bc2_sqrt + c->eps;
    return w + (c->neg_step_size * m) / denom;
}

/* ---- lifetime -------------------------------------------------------------- */

static int by_offset(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* One segment per parameter tensor (its alignment padding included), so
 * each tensor gets its own scale, as DeepSpeed compresses each parameter. */
static ds_status tensor_segments(const ds_flat *f, size_t **segs, int *nseg) {
    int64_t *at = malloc(((size_t)f->n_params + 2) * sizeof *at);
    size_t *s = malloc(((size_t)f->n_params + 2) * sizeof *s);
    *segs = NULL;
    if (!at || !s) {
        free(at);
        free(s);
        return DS_ERR(DS_ERR_OOM, "1-bit Adam: out of host memory");
    }
    int m = 0;
    at[m++] = 0;
    for (int i = 0; i < f->n_params; i++) at[m++] = f->params[i].offset;
    qsort(at, (size_t)m, sizeof *at, by_offset);
    int n = 0;
    for (int i = 0; i < m; i++) {
        int64_t end = i + 1 < m ? at[i + 1] : f->used;
        if (end > at[i]) s[n++] = (size_t)(end - at[i]);
    }
    free(at);
    *segs = s;
    *nseg = n;
    return DS_OK;
}

/* One fp32 buffer of n elements, zeroed, in the accountant's optimizer
 * state; NULL when n is 0. */
static ds_status state_alloc(ds_backend *be, size_t n, float **out) {
    *out = NULL;
    if (!n) return DS_OK;
    DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, n * sizeof(float), (void **)out));
    memset(*out, 0, n * sizeof(float)); /* host memory: the cpu backend */
    return DS_OK;
}

static void state_free(ds_backend *be, float *p, size_t n) {
    if (p) ds_backend_free(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, p, n * sizeof(float));
}

ds_status ds_onebit_create(const ds_config *cfg, ds_backend *be, ds_comm *comm,
                           const ds_flat *flat, ds_onebit **out) {
    *out = NULL;
    ds_onebit *ob = calloc(1, sizeof *ob);
    if (!ob) return DS_ERR(DS_ERR_OOM, "%s: out of host memory", "1-bit Adam");
    size_t n = (size_t)flat->used;
    ob->be = be;
    ob->type = cfg->onebit;
    ob->cfg = cfg;
    ob->comm = comm;
    ob->n = n;
    size_t *segs = NULL;
    int nseg = 0;
    ds_status st = tensor_segments(flat, &segs, &nseg);
    if (st == DS_OK) {
        ob->lay = ds_coded_layout_of(&ds_codec_onebit, segs, nseg, comm->world);
        st = ds_coded_scratch_create(&ds_codec_onebit, segs, nseg, comm->world, &ob->scr);
    }
    free(segs);
    if (st == DS_OK) st = state_alloc(be, ob->lay.worker_n, &ob->werr);
    if (st == DS_OK) st = state_alloc(be, ob->lay.server_n, &ob->serr);
    if (st == DS_OK && ob->type == DS_ONEBIT_ZERO_ONE) st = state_alloc(be, n, &ob->u);
    if (st == DS_OK && ob->type == DS_ONEBIT_ZERO_ONE) st = state_alloc(be, n, &ob->gbuf);
    if (st != DS_OK) {
        ds_onebit_destroy(ob);
        return st;
    }
    ds_onebit_restart(ob, 0, true, NULL);
    *out = ob;
    return DS_OK;
}

void ds_onebit_destroy(ds_onebit *ob) {
    if (!ob) return;
    ds_coded_scratch_destroy(ob->scr);
    state_free(ob->be, ob->werr, ob->lay.worker_n);
    state_free(ob->be, ob->serr, ob->lay.server_n);
    state_free(ob->be, ob->u, ob->n);
    state_free(ob->be, ob->gbuf, ob->n);
    state_free(ob->be, ob->amask, ob->n);
    free(ob);
}

/* ---- the schedule ---------------------------------------------------------- */

bool ds_onebit_reduces_grads(const ds_onebit *ob) {
    int64_t t = ob->step + 1;
    if (ob->type == DS_ONEBIT_ADAM) return t <= ob->cfg->freeze_step;
    return !ob->frozen && t % ob->var_interval == 0;
}

/* 0/1 Adam: whether step t synchronises (local steps only). */
static bool syncs(const ds_onebit *ob, int64_t t) {
    return ob->frozen && t % ob->local_interval == 0;
}

/* Before step t's math: the lr sum of the local steps. */
static void pre(ds_onebit *ob, double lr) {
    if (ob->type == DS_ONEBIT_ZERO_ONE && ob->frozen) ob->lrs += lr;
}

/* After step t: DeepSpeed's counters, in zoadam.py's order. Returns whether
 * the error feedback is to be zeroed (the local steps begin). */
static bool post(ds_onebit *ob, int64_t t) {
    ob->step = t;
    if (ob->type != DS_ONEBIT_ZERO_ONE) return false;
    if (!ob->frozen) {
        if (t % ob->var_interval == 0 && ++ob->var_counter == ob->cfg->var_update_scaler) {
            ob->var_counter = 0;
            ob->var_interval *= 2;
        }
    } else {
        if (syncs(ob, t)) ob->lrs = 0.0;
        if (++ob->local_counter == ob->cfg->local_step_scaler) {
            ob->local_counter = 0;
            int64_t twice = ob->local_interval * 2;
            ob->local_interval = twice < ob->cfg->local_step_clipper ? twice
                                                                     : ob->cfg->local_step_clipper;
        }
    }
    if (!ob->frozen && t > ob->cfg->var_freeze_step) {
        ob->frozen = true;
        return true;
    }
    return false;
}

static void zero_feedback(ds_onebit *ob) {
    if (ob->werr) memset(ob->werr, 0, ob->lay.worker_n * sizeof(float));
    if (ob->serr) memset(ob->serr, 0, ob->lay.server_n * sizeof(float));
}

void ds_onebit_restart(ds_onebit *ob, int64_t applied, bool have_state, const float *w) {
    ob->step = 0;
    ob->var_interval = ob->local_interval = 1;
    ob->var_counter = ob->local_counter = 0;
    ob->lrs = 0.0;
    ob->frozen = false;
    for (int64_t t = 1; t <= applied; t++) {
        pre(ob, (float)ds_sched_lr(ob->cfg, t - 1)); /* the lr the step ran with */
        (void)post(ob, t);
    }
    if (!have_state) {
        zero_feedback(ob);
        if (ob->u) memset(ob->u, 0, ob->n * sizeof(float));
        /* u is 0: the weights as loaded are the last synchronisation's */
        if (ob->frozen && w) memcpy(ob->gbuf, w, ob->n * sizeof(float));
    }
}

/* ---- the step ---------------------------------------------------------------- */

/* Elements that never had a gradient (v exactly 0) carry no momentum. */
static void mask(float *x, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v[i] == 0.0f) x[i] = 0.0f;
}

/* The compressed all-reduce and the masks, where DeepSpeed multiplies its
 * exp_avg_mask in: right after each decompression. */
static ds_status compress(ds_onebit *ob, float *x, const float *v) {
    DS_TRY(ds_comm_all_reduce_coded(ob->comm, x, ob->n, &ds_codec_onebit, ob->werr, ob->serr,
                                    ob->scr));
    mask(x, v, ob->n);
    if (ob->amask)
        for (size_t i = 0; i < ob->n; i++) x[i] *= ob->amask[i];
    return DS_OK;
}

ds_status ds_onebit_set_mask(ds_onebit *ob, int64_t offset, const float *mask_in, size_t numel) {
    if (offset < 0 || (size_t)offset + numel > ob->n)
        return DS_ERR(DS_ERR_INVALID_ARG, "exp_avg_mask: elements [%lld, %lld) outside the "
                      "model's %zu", (long long)offset, (long long)offset + (long long)numel,
                      ob->n);
    for (size_t k = 0; k < numel; k++)
        if (!isfinite(mask_in[k]))
            return DS_ERR(DS_ERR_NONFINITE, "exp_avg_mask: element %zu of %zu is %s", k, numel,
                          isnan(mask_in[k]) ? "nan" : "inf");
    if (!ob->amask) { /* the first mask: every other element keeps its momentum */
        DS_TRY(state_alloc(ob->be, ob->n, &ob->amask));
        for (size_t i = 0; i < ob->n; i++) ob->amask[i] = 1.0f;
    }
    memcpy(ob->amask + offset, mask_in, numel * sizeof(float));
    return DS_OK;
}

/* 1-bit Adam after freeze_step: m from the local gradient, compressed. */
static ds_status onebit_step(ds_onebit *ob, const ds_adam_coef *c, float *w, const void *g,
                             ds_dtype gt, float *m, const float *v) {
    float gm = c->grad_mult * (float)ob->comm->world; /* one rank's estimate of the mean */
    for (size_t i = 0; i < ob->n; i++) m[i] = ob_momentum(m[i], ds_load_f32(g, gt, i) * gm, c);
    DS_TRY(compress(ob, m, v));
    for (size_t i = 0; i < ob->n; i++) w[i] = ob_weight(w[i], m[i], v[i], c);
    return DS_OK;
}

/* 0/1 Adam between variance updates: the gradient compressed, m only. */
static ds_status zo_momentum_step(ds_onebit *ob, const ds_adam_coef *c, float *w, const void *g,
                                  ds_dtype gt, float *m, const float *v) {
    float gm = c->grad_mult * (float)ob->comm->world;
    for (size_t i = 0; i < ob->n; i++) ob->gbuf[i] = ds_load_f32(g, gt, i) * gm;
    DS_TRY(compress(ob, ob->gbuf, v));
    for (size_t i = 0; i < ob->n; i++) {
        m[i] = ob_momentum(m[i], ob->gbuf[i], c);
        w[i] = ob_weight(w[i], m[i], v[i], c);
    }
    return DS_OK;
}

/* 0/1 Adam's local step t (zoadam.py: p -= lr update, u -= lr update with
 * update = m / (sqrt(v) + eps) + wd p), synchronising when t says so.
 * DeepSpeed synchronises p = (p - u) + mean(u) / (sqrt(v) + eps): p - u is
 * the last synchronisation's weights only up to rounding, a different
 * rounding on each rank (each summed its own changes), so the replicas
 * drift apart, measured 2e-7 after one synchronisation and 1.3e-6 after 18
 * on test_onebit_local's BERT. Here the weights of the last synchronisation
 * are kept (in gbuf, idle after the variance froze) and the mean added to
 * them: the same bits on every rank after each synchronisation. */
static ds_status zo_local_step(ds_onebit *ob, const ds_adam_coef *c, float lr, int64_t t,
                               float *w, const void *g, ds_dtype gt, float *m, const float *v) {
    float gm = c->grad_mult * (float)ob->comm->world, wd = ob->cfg->weight_decay;
    for (size_t i = 0; i < ob->n; i++) {
        m[i] = ob_momentum(m[i], ds_load_f32(g, gt, i) * gm, c);
        float upd = m[i] / (sqrtf(v[i]) + c->eps) + wd * w[i];
        w[i] += -lr * upd;
        ob->u[i] += -lr * upd;
    }
    if (!syncs(ob, t)) return DS_OK;
    for (size_t i = 0; i < ob->n; i++) ob->u[i] *= sqrtf(v[i]) + c->eps;
    DS_TRY(compress(ob, ob->u, v));
    float lrs = (float)ob->lrs, *at_sync = ob->gbuf;
    for (size_t i = 0; i < ob->n; i++) {
        m[i] = -(ob->u[i] / lrs);
        w[i] = at_sync[i] + ob->u[i] / (sqrtf(v[i]) + c->eps);
        at_sync[i] = w[i];
        ob->u[i] = 0.0f;
    }
    return DS_OK;
}

ds_status ds_onebit_apply(ds_onebit *ob, ds_backend *be, const ds_optim_step *st, float grad_mult,
                          float *w, const void *grads, ds_dtype gt, float *m, float *v, void *lp,
                          ds_dtype lpt) {
    int64_t t = ob->step + 1;
    const ds_adam_hparams *h = &st->adam;
    /* DeepSpeed's update: decoupled weight decay, no bias correction */
    ds_optim_step adam = *st;
    adam.type = DS_OPTIM_ADAMW;
    adam.adam.adam_w_mode = true;
    adam.adam.bias_correction = false;
    ds_adam_coef c = ds_adam_coef_make(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, t,
                                       true, false, grad_mult);
    bool reduced = ds_onebit_reduces_grads(ob);
    pre(ob, h->lr);
    ds_status s = DS_OK;
    if (reduced) /* Adam, exactly: both moments from the all-reduced gradient */
        s = ds_optim_update(be, &adam, w, grads, gt, grad_mult, m, v, ob->n, NULL, DS_F32);
    else if (ob->type == DS_ONEBIT_ADAM)
        s = onebit_step(ob, &c, w, grads, gt, m, v);
    else if (!ob->frozen)
        s = zo_momentum_step(ob, &c, w, grads, gt, m, v);
    else
        s = zo_local_step(ob, &c, h->lr, t, w, grads, gt, m, v);
    DS_TRY(s);
    if (post(ob, t)) { /* the local steps begin (u is 0): these weights are where they start */
        zero_feedback(ob);
        memcpy(ob->gbuf, w, ob->n * sizeof(float));
    }
    if (lp) DS_TRY(be->ops->cast(be, lp, lpt, w, DS_F32, ob->n));
    return DS_OK;
}

/* ---- checkpoints --------------------------------------------------------------- */

size_t ds_onebit_state_len(const ds_onebit *ob) {
    return ob->lay.worker_n + ob->lay.server_n + (ob->u ? 2 * ob->n : 0);
}

ds_status ds_onebit_state_io(ds_onebit *ob, float *host, bool write) {
    float *parts[4] = {ob->werr, ob->serr, ob->u, ob->gbuf};
    size_t lens[4] = {ob->lay.worker_n, ob->lay.server_n, ob->u ? ob->n : 0, ob->u ? ob->n : 0};
    for (int k = 0; k < 4; k++) {
        if (!lens[k]) continue;
        if (write) memcpy(parts[k], host, lens[k] * sizeof(float));
        else memcpy(host, parts[k], lens[k] * sizeof(float));
        host += lens[k];
    }
    return DS_OK;
}

const float *ds_onebit_sync_weights(const ds_onebit *ob) {
    return ob->type == DS_ONEBIT_ZERO_ONE && ob->frozen ? ob->gbuf : NULL;
}

bool ds_onebit_rank_weights(const ds_onebit *ob) { return ob->type == DS_ONEBIT_ZERO_ONE; }
