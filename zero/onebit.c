/* 1-bit Adam and 0/1 Adam on a full replica (zero/onebit.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/backend/onebit_math.h"
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
    bool loaded;        /* a checkpoint's state was written in: loaded_lrs is its lr sum */
    double loaded_lrs;
};

/* The trailer of the checkpointed state (ds_onebit_state_len). */
enum { TRAILER = 4 };

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
/* A state buffer of the backend (the GPU's on cuda), zeroed. */
static ds_status state_alloc(ds_backend *be, size_t n, float **out) {
    *out = NULL;
    if (!n) return DS_OK;
    DS_TRY(ds_backend_alloc(be, DS_MEM_OPTIM, DS_PLACE_DEVICE, n * sizeof(float), (void **)out));
    DS_TRY(be->ops->memset(be, *out, 0, n * sizeof(float), NULL));
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
        st = ds_coded_scratch_create(&ds_codec_onebit, be, segs, nseg, comm->world, &ob->scr);
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

/* Zeroes n floats of the backend's memory (nothing for NULL). */
static ds_status clear(ds_onebit *ob, float *x, size_t n) {
    return x ? ob->be->ops->memset(ob->be, x, 0, n * sizeof(float), NULL) : DS_OK;
}

static ds_status zero_feedback(ds_onebit *ob) {
    DS_TRY(clear(ob, ob->werr, ob->lay.worker_n));
    return clear(ob, ob->serr, ob->lay.server_n);
}

/* 0/1 Adam's local steps start from w: the weights of the last synchronisation. */
static ds_status mark_sync(ds_onebit *ob, const float *w) {
    return ob->be->ops->memcpy(ob->be, ob->gbuf, w, ob->n * sizeof(float), DS_COPY_D2D, NULL);
}

/* The schedule's counters after `applied` steps from the start. */
static void replay(ds_onebit *ob, int64_t applied) {
    ob->step = 0;
    ob->var_interval = ob->local_interval = 1;
    ob->var_counter = ob->local_counter = 0;
    ob->lrs = 0.0;
    ob->frozen = false;
    for (int64_t t = 1; t <= applied; t++) {
        pre(ob, (float)ds_sched_lr(ob->cfg, t - 1)); /* the lr the step ran with */
        (void)post(ob, t);
    }
}

/* Whether the compressed phase has begun: 1-bit Adam compresses from the
 * step after freeze_step, 0/1 Adam's local steps from the freeze. */
static bool compressing(const ds_onebit *ob) {
    return ob->type == DS_ONEBIT_ADAM ? ob->step >= ob->cfg->freeze_step : ob->frozen;
}

bool ds_onebit_state_fits(const ds_onebit *ob, const float *host, int64_t applied) {
    ds_onebit probe = *ob; /* the counters only: replay touches no buffer */
    replay(&probe, applied);
    float saved = host[ds_onebit_state_len(ob) - TRAILER];
    return (saved != 0.0f) == compressing(&probe);
}

ds_status ds_onebit_restart(ds_onebit *ob, int64_t applied, bool have_state, const float *w) {
    replay(ob, applied);
    if (have_state && ob->loaded) {
        ob->lrs = ob->loaded_lrs; /* the sum the saved u was made with */
    } else if (!have_state) {
        DS_TRY(zero_feedback(ob));
        DS_TRY(clear(ob, ob->u, ob->n));
        /* u is 0: the weights as loaded are the last synchronisation's, and
         * no lr has been summed since */
        ob->lrs = 0.0;
        if (ob->frozen && w) DS_TRY(mark_sync(ob, w));
    }
    ob->loaded = false;
    return DS_OK;
}

/* ---- the step ---------------------------------------------------------------- */

ds_status ds_onebit_set_mask(ds_onebit *ob, int64_t offset, const float *mask_in, size_t numel) {
    if (offset < 0 || (size_t)offset + numel > ob->n)
        return DS_ERR(DS_ERR_INVALID_ARG, "exp_avg_mask: elements [%lld, %lld) outside the "
                      "model's %zu", (long long)offset, (long long)offset + (long long)numel,
                      ob->n);
    for (size_t k = 0; k < numel; k++)
        if (!isfinite(mask_in[k]))
            return DS_ERR(DS_ERR_NONFINITE, "exp_avg_mask: element %zu of %zu is %s", k, numel,
                          isnan(mask_in[k]) ? "nan" : "inf");
    ds_backend *be = ob->be;
    if (!ob->amask) { /* the first mask: every other element keeps its momentum */
        DS_TRY(state_alloc(be, ob->n, &ob->amask));
        DS_TRY(be->ops->fill(be, ob->amask, ob->n, 1.0f));
    }
    return be->ops->memcpy(be, ob->amask + offset, mask_in, numel * sizeof(float), DS_COPY_H2D,
                           NULL);
}

/* The pass of one phase over the whole vector (onebit_math.h). */
static ds_status pass(ds_onebit *ob, ds_onebit_pass p, ds_onebit_phase phase) {
    p.phase = phase;
    return ob->be->ops->onebit_pass(ob->be, &p);
}

/* The compressed all-reduce of x; the masks are multiplied in by the pass
 * that reads the result (ds_onebit_masked), where DeepSpeed multiplies its
 * exp_avg_mask: right after each decompression. */
static ds_status compress(ds_onebit *ob, float *x) {
    return ds_comm_all_reduce_coded(ob->comm, x, ob->n, &ds_codec_onebit, ob->werr, ob->serr,
                                    ob->scr);
}

/* 1-bit Adam after freeze_step: m from the local gradient, compressed. */
static ds_status onebit_step(ds_onebit *ob, const ds_onebit_pass *p) {
    DS_TRY(pass(ob, *p, DS_ONEBIT_MOMENTUM));
    DS_TRY(compress(ob, p->m));
    return pass(ob, *p, DS_ONEBIT_WEIGHT);
}

/* 0/1 Adam between variance updates: the gradient compressed, m only. */
static ds_status zo_momentum_step(ds_onebit *ob, const ds_onebit_pass *p) {
    DS_TRY(pass(ob, *p, DS_ONEBIT_GRAD));
    DS_TRY(compress(ob, p->x));
    return pass(ob, *p, DS_ONEBIT_ZO_MOMENTUM);
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
static ds_status zo_local_step(ds_onebit *ob, ds_onebit_pass p, int64_t t) {
    p.sync = syncs(ob, t);
    DS_TRY(pass(ob, p, DS_ONEBIT_ZO_LOCAL));
    if (!p.sync) return DS_OK;
    DS_TRY(compress(ob, ob->u));
    return pass(ob, p, DS_ONEBIT_ZO_SYNC);
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
    bool reduced = ds_onebit_reduces_grads(ob);
    pre(ob, h->lr);
    ds_onebit_pass p = {
        .n = ob->n, .w = w, .m = m, .x = ob->gbuf, .u = ob->u, .at_sync = ob->gbuf, .v = v,
        .amask = ob->amask, .g = grads, .gt = gt,
        .gm = grad_mult * (float)ob->comm->world, /* one rank's estimate of the mean */
        .lr = h->lr, .wd = ob->cfg->weight_decay, .lrs = (float)ob->lrs,
        .c = ds_adam_coef_make(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, t, true, false,
                               grad_mult)};
    ds_status s = DS_OK;
    if (reduced) /* Adam, exactly: both moments from the all-reduced gradient */
        s = ds_optim_update(be, &adam, w, grads, gt, grad_mult, m, v, ob->n, NULL, DS_F32);
    else if (ob->type == DS_ONEBIT_ADAM)
        s = onebit_step(ob, &p);
    else if (!ob->frozen)
        s = zo_momentum_step(ob, &p);
    else
        s = zo_local_step(ob, p, t);
    DS_TRY(s);
    if (post(ob, t)) { /* the local steps begin (u is 0): these weights are where they start */
        DS_TRY(zero_feedback(ob));
        DS_TRY(mark_sync(ob, w));
    }
    if (lp) DS_TRY(be->ops->cast(be, lp, lpt, w, DS_F32, ob->n));
    return DS_OK;
}

/* ---- checkpoints --------------------------------------------------------------- */

size_t ds_onebit_state_len(const ds_onebit *ob) {
    return ob->lay.worker_n + ob->lay.server_n + (ob->u ? 2 * ob->n : 0) + TRAILER;
}

ds_status ds_onebit_state_io(ds_onebit *ob, float *host, bool write) {
    float *trailer = host + ds_onebit_state_len(ob) - TRAILER;
    if (write) {
        ob->loaded = true;
        ob->loaded_lrs = ((double)trailer[1] + (double)trailer[2]) + (double)trailer[3];
    } else { /* the double in three floats, each what the ones before rounded off:
              * 72 bits hold its 53 exactly, and so does the sum back */
        trailer[0] = compressing(ob) ? 1.0f : 0.0f;
        double rest = ob->lrs;
        for (int k = 1; k < TRAILER; k++) {
            trailer[k] = (float)rest;
            rest -= (double)trailer[k];
        }
    }
    float *parts[4] = {ob->werr, ob->serr, ob->u, ob->gbuf};
    size_t lens[4] = {ob->lay.worker_n, ob->lay.server_n, ob->u ? ob->n : 0, ob->u ? ob->n : 0};
    ds_backend *be = ob->be;
    for (int k = 0; k < 4; k++) {
        if (!lens[k]) continue;
        size_t bytes = lens[k] * sizeof(float);
        if (write) DS_TRY(be->ops->memcpy(be, parts[k], host, bytes, DS_COPY_H2D, NULL));
        else DS_TRY(be->ops->memcpy(be, host, parts[k], bytes, DS_COPY_D2H, NULL));
        host += lens[k];
    }
    return DS_OK;
}

const float *ds_onebit_sync_weights(const ds_onebit *ob) {
    return ob->type == DS_ONEBIT_ZERO_ONE && ob->frozen ? ob->gbuf : NULL;
}

bool ds_onebit_rank_weights(const ds_onebit *ob) { return ob->type == DS_ONEBIT_ZERO_ONE; }
