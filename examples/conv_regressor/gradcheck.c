/* Gradient check of the conv regressor's modules (conv_model.c) by central
 * differences, on a backend of the user's choice (cpu by default, the
 * reference; "--backend cuda" on a GPU build). Like train.c it needs only the
 * installed headers:
 *
 *   cc -std=c11 gradcheck.c conv_model.c $(pkg-config --cflags --libs zero-engine) -lm
 *   ./a.out                       # exit 0 when every check passes
 *
 * Each case runs a chain of modules the way the engine does (forward in
 * order, backward in reverse, the loss last) on small random tensors, and
 * compares every gradient the modules produce with a central difference
 * (J(v + h) - J(v - h)) / (2h) of the objective J, evaluated in double on
 * the host from the fp32 outputs:
 *   J = sum_i r_i y_i (r random) when the chain ends before a loss module,
 *   J = loss_scale * y[0]        when it ends with the loss (its backward
 *                                 starts from ctx->loss_scale, rule 5).
 * Besides the values it checks the module rules (engine/core/module.h):
 *   rule 2  parameter gradient slots start at 0.25, so a module that writes
 *           (=) instead of accumulating (+=) is off by 0.25; dx starts at a
 *           sentinel, so an element left unwritten fails;
 *   rule 1  every buffer (y, dx, saved, scratch) sized by the module's own
 *           callbacks is followed by a guard zone that must stay untouched;
 *   rule 4  a second forward gives bit-identical outputs and saved areas;
 *   rule 5  the loss writes y[1] = B and y[0] = the mean squared error
 *           computed here in double. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <engine/backend/backend.h>
#include <engine/data/dataset.h> /* ds_splitmix64_next */
#include <engine/core/module.h>

#include "conv_model.h"

enum { MAXM = 8, MAXCHK = 32, GUARD = 64 /* floats after every buffer */ };
static const float k_prefill = 0.25f;   /* parameter gradient slots before backward */
static const float k_sentinel = 1.0e6f; /* dx before backward: must be overwritten */
static const float k_canary = -7.0e5f;  /* guard zones */

/* Tolerances: |analytic - numeric| <= atol(h) + RTOL max(|analytic|, |numeric|).
 * J is a sum of fp32 outputs of order 1; its rounding noise (about 1e-7)
 * becomes about 1e-7 / h in a central difference: 1e-5 at h = 1e-2, 1e-4 at
 * h = 1e-3. Within one ReLU pattern J is a polynomial of degree <= 4 in any
 * one value (a tied weight enters twice, the MSE squares), so the truncation
 * error h^2 |J'''| / 6 stays near 1e-5 at h = 1e-2. A step that moves some
 * pre-activation across 0 (a ReLU kink) breaks that: an element failing at
 * h = 1e-2 is retried at h = 1e-3, where a kink is 10x less likely to be in
 * reach, with the larger atol its noise needs. A wrong gradient (a tap
 * shifted by one row, a missing batch, = instead of +=) is off by 1e-2 or
 * more and fails at both steps.
 * Measured on the cpu backend: every element passing at h = 1e-2 within
 * 0.98 of its tolerance, the smooth ones within 0.09; every retried element
 * within 0.09 at h = 1e-3 (the output prints both per case). */
static const double k_h[2] = {1e-2, 1e-3};
static const double k_atol[2] = {1e-4, 1e-3};
static const double k_rtol = 1e-3;

static ds_backend *g_be;
static int g_failures;

static uint64_t g_rng = 12345;
static float urand(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(ds_splitmix64_next(&g_rng) >> 40) / 16777216.0);
}

/* ---- device buffers with a guard zone ---- */

typedef struct buf {
    float *d;     /* n floats, then GUARD canaries */
    size_t n;
} buf;

static ds_status buf_alloc(buf *b, size_t n) {
    b->n = n;
    DS_TRY(ds_backend_alloc(g_be, DS_MEM_OTHER, DS_PLACE_DEVICE, (n + GUARD) * sizeof(float),
                            (void **)&b->d));
    DS_TRY(g_be->ops->fill(g_be, b->d + n, GUARD, k_canary));
    return DS_OK;
}

static void buf_free(buf *b) {
    if (b->d)
        ds_backend_free(g_be, DS_MEM_OTHER, DS_PLACE_DEVICE, b->d, (b->n + GUARD) * sizeof(float));
    b->d = NULL;
}

static ds_status to_dev(float *d, const float *h, size_t n) {
    return g_be->ops->memcpy(g_be, d, h, n * sizeof(float), DS_COPY_H2D, NULL);
}

static ds_status to_host(float *h, const float *d, size_t n) {
    DS_TRY(g_be->ops->memcpy(g_be, h, d, n * sizeof(float), DS_COPY_D2H, NULL));
    return g_be->ops->sync(g_be);
}

static ds_status buf_random(buf *b, float lo, float hi) {
    float *h = malloc(b->n * sizeof *h);
    if (!h) return DS_ERR(DS_ERR_OOM, "gradcheck: %zu floats", b->n);
    for (size_t i = 0; i < b->n; i++) h[i] = urand(lo, hi);
    ds_status st = to_dev(b->d, h, b->n);
    free(h);
    return st;
}

/* The guard zone after b is intact. */
static ds_status buf_guard_ok(const buf *b, const char *what, bool *ok) {
    float g[GUARD];
    DS_TRY(to_host(g, b->d + b->n, GUARD));
    for (int i = 0; i < GUARD; i++)
        if (g[i] != k_canary) {
            printf("  FAIL %s: written past its %zu floats (guard element %d = %g)\n", what, b->n,
                   i, (double)g[i]);
            *ok = false;
            return DS_OK;
        }
    return DS_OK;
}

/* ---- a chain of modules ---- */

typedef struct chk {
    char name[DS_MAX_NAME + 16];
    buf *value, *grad; /* the tensor and its gradient (a parameter's slot, or dx) */
    bool prefilled;    /* grad started at k_prefill (a parameter slot) */
} chk;

typedef struct chain {
    int n, B;
    ds_module *m[MAXM];
    bool borrowed;         /* the modules belong to a model: chain_free leaves them */
    bool is_loss;          /* the last module is the loss */
    float loss_scale;
    ds_batch batch;        /* device tensors */
    buf x0;                /* the first module's input x, when it reads one */
    buf p[MAXM][4], g[MAXM][4]; /* own parameters and gradient slots */
    buf own_tied[MAXM][2], own_tied_g[MAXM][2]; /* ties to nothing in the chain */
    float *pp[MAXM][4], *gp[MAXM][4], *tp[MAXM][2], *tgp[MAXM][2];
    buf y[MAXM], dx[MAXM], saved[MAXM], scratch;
    buf r;                 /* the projection of the last output */
    int n_chk;
    chk c[MAXCHK];
} chain;

static ds_status chain_add_chk(chain *ch, const char *name, buf *v, buf *g, bool prefilled) {
    if (ch->n_chk >= MAXCHK) return DS_ERR(DS_ERR_INVALID_ARG, "gradcheck: too many tensors");
    chk *c = &ch->c[ch->n_chk++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = v;
    c->grad = g;
    c->prefilled = prefilled;
    return DS_OK;
}

/* Allocate everything for modules m[0..n) on batches of B rows; x0_elems > 0
 * gives module 0 an input activation (else it reads the batch). Ties resolve
 * to an earlier module's parameter of that name, else get their own storage,
 * checked as a tensor of its own. */
static ds_status chain_setup(chain *ch, size_t x0_elems) {
    if (x0_elems) {
        DS_TRY(buf_alloc(&ch->x0, x0_elems));
        DS_TRY(buf_random(&ch->x0, -1.0f, 1.0f));
    }
    size_t scratch = 0;
    for (int i = 0; i < ch->n; i++) {
        ds_module *m = ch->m[i];
        if (m->n_params > 4 || m->n_tied > 2)
            return DS_ERR(DS_ERR_INVALID_ARG, "gradcheck: module %s has too many parameters",
                          m->name);
        for (int k = 0; k < m->n_params; k++) {
            size_t n = (size_t)ds_param_numel(&m->params[k]);
            DS_TRY(buf_alloc(&ch->p[i][k], n));
            DS_TRY(buf_random(&ch->p[i][k], -0.5f, 0.5f));
            DS_TRY(buf_alloc(&ch->g[i][k], n));
            ch->pp[i][k] = ch->p[i][k].d;
            ch->gp[i][k] = ch->g[i][k].d;
            DS_TRY(chain_add_chk(ch, m->params[k].name, &ch->p[i][k], &ch->g[i][k], true));
        }
        for (int k = 0; k < m->n_tied; k++) {
            const ds_param_tie *t = &m->tied[k];
            for (int o = 0; o < i && !ch->tp[i][k]; o++)
                for (int q = 0; q < ch->m[o]->n_params; q++)
                    if (!strcmp(ch->m[o]->params[q].name, t->target)) {
                        ch->tp[i][k] = ch->pp[o][q];
                        ch->tgp[i][k] = ch->gp[o][q];
                    }
            if (ch->tp[i][k]) continue;
            size_t n = (size_t)t->shape[0] * (size_t)(t->ndim > 1 ? t->shape[1] : 1);
            DS_TRY(buf_alloc(&ch->own_tied[i][k], n));
            DS_TRY(buf_random(&ch->own_tied[i][k], -0.5f, 0.5f));
            DS_TRY(buf_alloc(&ch->own_tied_g[i][k], n));
            ch->tp[i][k] = ch->own_tied[i][k].d;
            ch->tgp[i][k] = ch->own_tied_g[i][k].d;
            char name[DS_MAX_NAME + 16];
            snprintf(name, sizeof name, "%s (tied)", t->target);
            DS_TRY(chain_add_chk(ch, name, &ch->own_tied[i][k], &ch->own_tied_g[i][k], true));
        }
        DS_TRY(buf_alloc(&ch->y[i], m->ops->out_elems(m, ch->B, 1)));
        size_t in = i > 0 ? ch->y[i - 1].n : x0_elems;
        if (in) DS_TRY(buf_alloc(&ch->dx[i], in));
        DS_TRY(buf_alloc(&ch->saved[i], (m->ops->saved_bytes(m, ch->B, 1) + 3) / 4));
        size_t sb = m->ops->scratch_bytes(m, ch->B, 1);
        if (sb > scratch) scratch = sb;
    }
    DS_TRY(buf_alloc(&ch->scratch, (scratch + 3) / 4));
    if (!ch->is_loss) {
        DS_TRY(buf_alloc(&ch->r, ch->y[ch->n - 1].n));
        DS_TRY(buf_random(&ch->r, -1.0f, 1.0f));
    }
    if (x0_elems)
        DS_TRY(chain_add_chk(ch, "x (dx of the first module)", &ch->x0, &ch->dx[0], false));
    return DS_OK;
}

static void chain_free(chain *ch) {
    buf_free(&ch->x0);
    buf_free(&ch->scratch);
    buf_free(&ch->r);
    for (int i = 0; i < ch->n; i++) {
        for (int k = 0; k < 4; k++) buf_free(&ch->p[i][k]), buf_free(&ch->g[i][k]);
        for (int k = 0; k < 2; k++) buf_free(&ch->own_tied[i][k]), buf_free(&ch->own_tied_g[i][k]);
        buf_free(&ch->y[i]);
        buf_free(&ch->dx[i]);
        buf_free(&ch->saved[i]);
        if (ch->m[i] && !ch->borrowed) ch->m[i]->ops->destroy(ch->m[i]);
    }
}

static ds_module_ctx chain_ctx(chain *ch, int i) {
    return (ds_module_ctx){.be = g_be, .batch = &ch->batch, .training = true, .seed = 7,
                           .params = ch->pp[i], .tied = ch->tp[i],
                           .x = i > 0 ? ch->y[i - 1].d : ch->x0.d, .y = ch->y[i].d,
                           .saved = ch->saved[i].d, .scratch = ch->scratch.d,
                           .loss_scale = 1.0f};
}

/* Forward through the chain; *J the objective. */
static ds_status chain_forward(chain *ch, double *J) {
    for (int i = 0; i < ch->n; i++) {
        ds_module_ctx ctx = chain_ctx(ch, i);
        DS_TRY(ch->m[i]->ops->forward(ch->m[i], &ctx));
    }
    buf *out = &ch->y[ch->n - 1];
    if (ch->is_loss) {
        float y[2];
        DS_TRY(to_host(y, out->d, 2));
        *J = (double)ch->loss_scale * y[0];
        return DS_OK;
    }
    float *y = malloc(out->n * sizeof *y), *r = malloc(out->n * sizeof *r);
    ds_status st = y && r ? DS_OK : DS_ERR(DS_ERR_OOM, "gradcheck: %zu floats", out->n);
    if (st == DS_OK) st = to_host(y, out->d, out->n);
    if (st == DS_OK) st = to_host(r, ch->r.d, out->n);
    double s = 0;
    for (size_t k = 0; st == DS_OK && k < out->n; k++) s += (double)r[k] * y[k];
    *J = s;
    free(y);
    free(r);
    return st;
}

static ds_status chain_backward(chain *ch) {
    for (int i = 0; i < ch->n; i++) {
        for (int k = 0; k < ch->m[i]->n_params; k++)
            DS_TRY(g_be->ops->fill(g_be, ch->g[i][k].d, ch->g[i][k].n, k_prefill));
        for (int k = 0; k < ch->m[i]->n_tied; k++)
            if (ch->own_tied_g[i][k].d)
                DS_TRY(g_be->ops->fill(g_be, ch->own_tied_g[i][k].d, ch->own_tied_g[i][k].n,
                                       k_prefill));
    }
    for (int i = ch->n - 1; i >= 0; i--) {
        ds_module_ctx ctx = chain_ctx(ch, i);
        ctx.grads = ch->gp[i];
        ctx.tied_grads = ch->tgp[i];
        ctx.dy = i == ch->n - 1 ? (ch->is_loss ? NULL : ch->r.d) : ch->dx[i + 1].d;
        ctx.dx = ch->dx[i].d; /* NULL for a first module that reads the batch */
        ctx.loss_scale = ch->loss_scale;
        if (ctx.dx) DS_TRY(g_be->ops->fill(g_be, ctx.dx, ch->dx[i].n, k_sentinel));
        DS_TRY(ch->m[i]->ops->backward(ch->m[i], &ctx));
    }
    return DS_OK;
}

/* Rule 4: a second forward reproduces the outputs and saved areas bit for bit. */
static ds_status chain_check_pure(chain *ch, bool *ok) {
    size_t total = 0;
    for (int i = 0; i < ch->n; i++) total += ch->y[i].n + ch->saved[i].n;
    float *a = malloc(total * sizeof *a), *b = malloc(total * sizeof *b);
    ds_status st = a && b ? DS_OK : DS_ERR(DS_ERR_OOM, "gradcheck: %zu floats", total);
    double J;
    for (int pass = 0; pass < 2 && st == DS_OK; pass++) {
        float *dst = pass ? b : a;
        st = chain_forward(ch, &J);
        for (int i = 0; i < ch->n && st == DS_OK; i++) {
            st = to_host(dst, ch->y[i].d, ch->y[i].n);
            dst += ch->y[i].n;
            if (st == DS_OK && ch->saved[i].n) st = to_host(dst, ch->saved[i].d, ch->saved[i].n);
            dst += ch->saved[i].n;
        }
    }
    if (st == DS_OK && memcmp(a, b, total * sizeof *a) != 0) {
        printf("  FAIL rule 4: a second forward gave other outputs or saved values\n");
        *ok = false;
    }
    free(a);
    free(b);
    return st;
}

/* One value of a device tensor. */
static ds_status get1(const buf *b, size_t i, float *v) { return to_host(v, b->d + i, 1); }
static ds_status set1(buf *b, size_t i, float v) { return to_dev(b->d + i, &v, 1); }

/* The central difference of J in element i of c->value at step h. */
static ds_status numeric(chain *ch, chk *c, size_t i, double h, double *out) {
    float v;
    DS_TRY(get1(c->value, i, &v));
    /* the steps fp32 can represent: (v + h) - (v - h) is not exactly 2h */
    float vp = (float)(v + h), vm = (float)(v - h);
    double Jp, Jm;
    DS_TRY(set1(c->value, i, vp));
    DS_TRY(chain_forward(ch, &Jp));
    DS_TRY(set1(c->value, i, vm));
    DS_TRY(chain_forward(ch, &Jm));
    DS_TRY(set1(c->value, i, v));
    *out = (Jp - Jm) / ((double)vp - (double)vm);
    return DS_OK;
}

/* Run one case: backward once for the analytic gradients, then every element
 * of every checked tensor by central differences. */
static ds_status chain_run(chain *ch, const char *title) {
    bool ok = true;
    double J;
    DS_TRY(chain_forward(ch, &J));
    DS_TRY(chain_backward(ch));
    double worst[2] = {0, 0}; /* largest error / tolerance among the values passing at h[s] */
    int at[2] = {0, 0};
    for (int t = 0; t < ch->n_chk; t++) {
        chk *c = &ch->c[t];
        float *g = malloc(c->grad->n * sizeof *g);
        if (!g) return DS_ERR(DS_ERR_OOM, "gradcheck: %zu floats", c->grad->n);
        ds_status st = to_host(g, c->grad->d, c->grad->n);
        int bad = 0;
        for (size_t i = 0; st == DS_OK && i < c->value->n; i++) {
            double a = (double)g[i] - (c->prefilled ? k_prefill : 0.0f);
            if (!c->prefilled && g[i] == k_sentinel) {
                if (bad++ < 3) printf("  FAIL %s[%zu]: dx never written (rule 2)\n", c->name, i);
                continue;
            }
            bool pass = false;
            for (int s = 0; s < 2 && !pass && st == DS_OK; s++) {
                double num = 0;
                st = numeric(ch, c, i, k_h[s], &num);
                double ratio = fabs(a - num) / (k_atol[s] + k_rtol * fmax(fabs(a), fabs(num)));
                pass = ratio <= 1.0;
                if (pass) {
                    at[s]++;
                    worst[s] = fmax(worst[s], ratio);
                } else if (s == 1 && bad++ < 3) {
                    printf("  FAIL %s[%zu]: analytic %.6g, numeric %.6g (h=%g)\n", c->name, i, a,
                           num, k_h[s]);
                }
            }
        }
        free(g);
        DS_TRY(st);
        if (bad) ok = false;
    }
    for (int i = 0; i < ch->n; i++) {
        DS_TRY(buf_guard_ok(&ch->y[i], "y", &ok));
        if (ch->dx[i].d) DS_TRY(buf_guard_ok(&ch->dx[i], "dx", &ok));
        DS_TRY(buf_guard_ok(&ch->saved[i], "saved", &ok));
    }
    DS_TRY(buf_guard_ok(&ch->scratch, "scratch", &ok));
    DS_TRY(chain_check_pure(ch, &ok));
    printf("%s %s: %d values within %.2f of the tolerance at h=%g", ok ? "ok  " : "FAIL", title,
           at[0], worst[0], k_h[0]);
    if (at[1]) printf(", %d more (ReLU kinks) within %.2f at h=%g", at[1], worst[1], k_h[1]);
    printf("\n");
    if (!ok) g_failures++;
    return DS_OK;
}

/* ---- forward values ----
 * A gradient check cannot see a forward that computes the wrong function
 * consistently (a tap that skips an edge row in forward and backward alike
 * has the right gradient of the wrong map), so the conv and the dense layer
 * are also compared with direct loops in double. Their outputs are sums of at
 * most 20 products of values below 1 in magnitude: fp32 rounding stays below
 * 20 * 6e-8 = 1.2e-6 (measured on cpu: 1.5e-7), and 1e-5 leaves 8x room above
 * that bound; one wrong term is off by about 0.1. */
static const double k_value_tol = 1e-5;

typedef ds_status (*value_fn)(chain *ch, const void *arg, bool *ok);

/* Host copies of n floats at device d (caller frees). */
static ds_status host_copy(const float *d, size_t n, float **out) {
    *out = malloc(n * sizeof **out);
    if (!*out) return DS_ERR(DS_ERR_OOM, "gradcheck: %zu floats", n);
    ds_status st = to_host(*out, d, n);
    if (st != DS_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static void value_report(const char *what, double worst, bool *ok) {
    bool pass = worst <= k_value_tol;
    printf("%s %s: forward against a direct loop, largest error %.2e\n", pass ? "ok  " : "FAIL",
           what, worst);
    if (!pass) *ok = false;
}

/* y[b, t, o] = relu(bias[o] + sum_j sum_i W[j C_out + o, i] x[b, t + j - pad, i]) */
static ds_status conv_value(chain *ch, const void *arg, bool *ok) {
    const cr_conv1d_desc *d = arg;
    int B = ch->B, L = d->seq_len, ci = d->in_channels, co = d->out_channels, k = d->kernel;
    int pad = d->padding == CR_PAD_SAME ? (k - 1) / 2 : 0;
    int Lo = d->padding == CR_PAD_SAME ? L : L - k + 1;
    double J;
    DS_TRY(chain_forward(ch, &J));
    bool tied = d->tie_weight != NULL;
    const float *xd = d->input ? ds_batch_f32(&ch->batch, d->input) : ch->x0.d;
    float *W = NULL, *bias = NULL, *x = NULL, *y = NULL;
    ds_status st = host_copy(tied ? ch->tp[0][0] : ch->pp[0][0], (size_t)k * co * ci, &W);
    if (st == DS_OK) st = host_copy(ch->pp[0][tied ? 0 : 1], (size_t)co, &bias);
    if (st == DS_OK) st = host_copy(xd, (size_t)B * L * ci, &x);
    if (st == DS_OK) st = host_copy(ch->y[0].d, (size_t)B * Lo * co, &y);
    double worst = 0;
    for (int b = 0; st == DS_OK && b < B; b++)
        for (int t = 0; t < Lo; t++)
            for (int o = 0; o < co; o++) {
                double s = bias[o];
                for (int j = 0; j < k; j++) {
                    int u = t + j - pad;
                    if (u < 0 || u >= L) continue; /* the zero padding */
                    const float *w = W + ((size_t)j * co + o) * ci;
                    const float *xr = x + ((size_t)b * L + u) * ci;
                    for (int i = 0; i < ci; i++) s += (double)w[i] * xr[i];
                }
                double want = s > 0 ? s : 0;
                worst = fmax(worst, fabs(want - y[((size_t)b * Lo + t) * co + o]));
            }
    free(W);
    free(bias);
    free(x);
    free(y);
    DS_TRY(st);
    value_report(ch->m[0]->name, worst, ok);
    return DS_OK;
}

/* y[b, o] = bias[o] + sum_i W[o, i] x[b, i]; arg: {in, out} */
static ds_status dense_value(chain *ch, const void *arg, bool *ok) {
    const int *io = arg;
    int B = ch->B, in = io[0], out = io[1];
    double J;
    DS_TRY(chain_forward(ch, &J));
    float *W = NULL, *bias = NULL, *x = NULL, *y = NULL;
    ds_status st = host_copy(ch->pp[0][0], (size_t)out * in, &W);
    if (st == DS_OK) st = host_copy(ch->pp[0][1], (size_t)out, &bias);
    if (st == DS_OK) st = host_copy(ch->x0.d, (size_t)B * in, &x);
    if (st == DS_OK) st = host_copy(ch->y[0].d, (size_t)B * out, &y);
    double worst = 0;
    for (int b = 0; st == DS_OK && b < B; b++)
        for (int o = 0; o < out; o++) {
            double s = bias[o];
            for (int i = 0; i < in; i++) s += (double)W[(size_t)o * in + i] * x[(size_t)b * in + i];
            worst = fmax(worst, fabs(s - y[(size_t)b * out + o]));
        }
    free(W);
    free(bias);
    free(x);
    free(y);
    DS_TRY(st);
    value_report(ch->m[0]->name, worst, ok);
    return DS_OK;
}

/* ---- the cases ---- */

/* Batch tensors "signal" [B, L, C] and "target" [B], random. */
typedef struct batch_data {
    buf signal, target;
} batch_data;

static ds_status batch_make(chain *ch, batch_data *bd, int L, int C) {
    ch->batch = (ds_batch){.B = ch->B, .T = 1};
    DS_TRY(buf_alloc(&bd->signal, (size_t)ch->B * L * C));
    DS_TRY(buf_random(&bd->signal, -1.0f, 1.0f));
    DS_TRY(buf_alloc(&bd->target, (size_t)ch->B));
    DS_TRY(buf_random(&bd->target, -1.0f, 1.0f));
    DS_TRY(ds_batch_set(&ch->batch, "signal", DS_F32, bd->signal.d));
    DS_TRY(ds_batch_set(&ch->batch, "target", DS_F32, bd->target.d));
    return DS_OK;
}

/* One module alone (created by the caller into ch->m[0]) or a chain; `value`
 * (may be NULL) checks the forward values first. */
static ds_status run_case(chain *ch, const char *title, size_t x0_elems, int L, int C,
                          value_fn value, const void *arg) {
    batch_data bd = {0};
    ds_status st = batch_make(ch, &bd, L, C);
    if (st == DS_OK) st = chain_setup(ch, x0_elems);
    bool ok = true;
    if (st == DS_OK && value) st = value(ch, arg, &ok);
    if (!ok) g_failures++;
    if (st == DS_OK) st = chain_run(ch, title);
    chain_free(ch);
    buf_free(&bd.signal);
    buf_free(&bd.target);
    return st;
}

/* The loss value itself: y[0] = mean (x - target)^2 in double, y[1] = B. */
static ds_status mse_value_case(void) {
    const int B = 5;
    chain ch = {.n = 1, .B = B, .is_loss = true, .loss_scale = 1.0f};
    batch_data bd = {0};
    DS_TRY(cr_mse_create("loss", "target", &ch.m[0]));
    ds_status st = batch_make(&ch, &bd, 1, 1);
    if (st == DS_OK) st = chain_setup(&ch, (size_t)B);
    float x[5], t[5], y[2];
    double J;
    if (st == DS_OK) st = chain_forward(&ch, &J);
    if (st == DS_OK) st = to_host(x, ch.x0.d, B);
    if (st == DS_OK) st = to_host(t, bd.target.d, B);
    if (st == DS_OK) st = to_host(y, ch.y[0].d, 2);
    if (st == DS_OK) {
        double want = 0;
        for (int i = 0; i < B; i++) want += ((double)x[i] - t[i]) * ((double)x[i] - t[i]) / B;
        /* y[0] is the fp32 rounding of a sum taken in double: 1 ulp, 1.2e-7 relative */
        bool ok = y[1] == (float)B && fabs(y[0] - want) <= 2.4e-7 * want;
        printf("%s mse value: y[0] = %.8g (want %.8g), y[1] = %g (want %d)\n", ok ? "ok  " : "FAIL",
               (double)y[0], want, (double)y[1], B);
        if (!ok) g_failures++;
    }
    chain_free(&ch);
    buf_free(&bd.signal);
    buf_free(&bd.target);
    return st;
}

static ds_status run_all(void) {
    const int B = 3, L = 9;
    {   /* the first module: reads the batch's signal, 'same' padding, k = 5 */
        chain ch = {.n = 1, .B = B};
        cr_conv1d_desc d = {.seq_len = L, .in_channels = 3, .out_channels = 4, .kernel = 5,
                            .padding = CR_PAD_SAME, .input = "signal"};
        DS_TRY(cr_conv1d_create("conv.first", &d, &ch.m[0]));
        DS_TRY(run_case(&ch, "conv1d k=5 same, from the batch", 0, L, 3, conv_value, &d));
    }
    {   /* a middle module: its input gradient too */
        chain ch = {.n = 1, .B = B};
        cr_conv1d_desc d = {.seq_len = L, .in_channels = 4, .out_channels = 5, .kernel = 3,
                            .padding = CR_PAD_SAME};
        DS_TRY(cr_conv1d_create("conv.mid", &d, &ch.m[0]));
        DS_TRY(run_case(&ch, "conv1d k=3 same, from x", (size_t)B * L * 4, L, 3, conv_value, &d));
    }
    {   /* valid padding, an even kernel, a tied weight from outside the chain */
        chain ch = {.n = 1, .B = B};
        cr_conv1d_desc d = {.seq_len = L, .in_channels = 5, .out_channels = 3, .kernel = 4,
                            .padding = CR_PAD_VALID, .tie_weight = "elsewhere.weight"};
        DS_TRY(cr_conv1d_create("conv.tied", &d, &ch.m[0]));
        DS_TRY(run_case(&ch, "conv1d k=4 valid, tied weight", (size_t)B * L * 5, L, 3, conv_value,
                        &d));
    }
    {
        chain ch = {.n = 1, .B = B};
        DS_TRY(cr_mean_pool_create("pool", 7, 5, &ch.m[0]));
        DS_TRY(run_case(&ch, "mean pool", (size_t)B * 7 * 5, L, 3, NULL, NULL));
    }
    {
        chain ch = {.n = 1, .B = B};
        const int io[2] = {6, 2};
        DS_TRY(cr_dense_create("dense", io[0], io[1], &ch.m[0]));
        DS_TRY(run_case(&ch, "dense", (size_t)B * io[0], L, 3, dense_value, io));
    }
    {   /* the loss, with a loss scale as the engine passes it (GAS, rank weight) */
        chain ch = {.n = 1, .B = 5, .is_loss = true, .loss_scale = 0.75f};
        DS_TRY(cr_mse_create("loss", "target", &ch.m[0]));
        DS_TRY(run_case(&ch, "mse, loss_scale 0.75", 5, L, 3, NULL, NULL));
    }
    DS_TRY(mse_value_case());
    {   /* the whole model: conv.1.weight's gradient is the sum of conv.1's and conv.2's uses */
        const int Lm = 10, Cin = 3;
        cr_model_desc md = {.seq_len = Lm, .in_channels = Cin, .channels = 4, .kernel1 = 5,
                            .kernel2 = 3};
        ds_model *model;
        DS_TRY(cr_model_create(&md, &model));
        chain ch = {.n = model->n_modules, .B = B, .is_loss = true, .loss_scale = 0.5f,
                    .borrowed = true};
        ds_status st = ch.n <= MAXM ? DS_OK
                                    : DS_ERR(DS_ERR_INVALID_ARG, "gradcheck: %d modules", ch.n);
        for (int i = 0; st == DS_OK && i < ch.n; i++) ch.m[i] = model->modules[i];
        if (st == DS_OK)
            st = run_case(&ch, "whole model (tied conv.1/conv.2 weight)", 0, Lm, Cin, NULL, NULL);
        ds_model_destroy(model);
        DS_TRY(st);
    }
    return DS_OK;
}

int main(int argc, char **argv) {
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 1};
    if (argc == 3 && !strcmp(argv[1], "--backend") && !strcmp(argv[2], "cuda")) {
        bd.kind = DS_BACKEND_CUDA;
    } else if (argc != 1 && !(argc == 3 && !strcmp(argv[1], "--backend") &&
                              !strcmp(argv[2], "cpu"))) {
        fprintf(stderr, "usage: gradcheck [--backend cpu|cuda]\n");
        return 2;
    }
    if (ds_backend_create(&bd, &g_be) != DS_OK) {
        fprintf(stderr, "gradcheck: backend: %s\n", ds_last_error());
        return 1;
    }
    ds_status st = run_all();
    ds_backend_destroy(g_be);
    if (st != DS_OK) {
        fprintf(stderr, "gradcheck: %s\n", ds_last_error());
        return 1;
    }
    if (g_failures) {
        printf("gradcheck: %d case(s) FAILED\n", g_failures);
        return 1;
    }
    printf("gradcheck: all cases passed\n");
    return 0;
}
