/* Test harness for modules: buffers, chained forward/backward, finite
 * differences. See gradcheck_harness.h. */
#include "tests/unit/gradcheck_harness.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- RNG: splitmix64, Box-Muller in double ---- */

uint64_t gc_rng_u64(gc_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double gc_rng_uniform(gc_rng *r) { return (double)(gc_rng_u64(r) >> 11) * 0x1.0p-53; }

double gc_rng_normal(gc_rng *r) {
    double u1 = gc_rng_uniform(r), u2 = gc_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

float *gc_randn(gc_rng *r, size_t n, double sd) {
    float *p = malloc(n * sizeof(float) + 64);
    for (size_t i = 0; i < n; i++) p[i] = (float)(sd * gc_rng_normal(r));
    return p;
}

/* ---- guarded buffers ---- */

#define GUARD_FLOATS 16
#define GUARD_BITS 0x7fbadbadu /* a NaN no kernel produces */

static void *gbuf_alloc(size_t bytes) {
    size_t total = (bytes + 63) / 64 * 64 + GUARD_FLOATS * sizeof(float);
    char *p = aligned_alloc(64, (total + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "harness: out of memory (%zu bytes)\n", total);
        exit(2);
    }
    memset(p, 0, bytes);
    uint32_t *g = (uint32_t *)(p + bytes);
    for (int i = 0; i < GUARD_FLOATS; i++) g[i] = GUARD_BITS;
    return p;
}

static int gbuf_ok(const void *p, size_t bytes, const char *what, const char *module) {
    if (!p) return 1;
    uint32_t g[GUARD_FLOATS];
    memcpy(g, (const char *)p + bytes, sizeof g);
    for (int i = 0; i < GUARD_FLOATS; i++)
        if (g[i] != GUARD_BITS) {
            fprintf(stderr, "module %s wrote past the end of its %s (%zu bytes)\n", module, what,
                    bytes);
            return 0;
        }
    return 1;
}

static void poison(void *p, size_t bytes) {
    if (p) memset(p, 0xff, bytes); /* all-ones floats are NaN */
}

/* ---- batch ---- */

void gc_batch_make(gc_batch *gb, int B, int T, int vocab, int n_classes, const int *lengths,
                   bool with_types, bool with_weights, uint64_t seed) {
    memset(gb, 0, sizeof *gb);
    gc_rng r = {seed};
    size_t n = (size_t)B * T;
    gb->tokens = calloc(n, sizeof(int32_t));
    gb->mask = calloc(n, sizeof(float));
    gb->labels = calloc((size_t)B, sizeof(int32_t));
    if (with_types) gb->type_ids = calloc(n, sizeof(int32_t));
    if (with_weights) gb->weights = calloc((size_t)B, sizeof(float));
    float *class_weights = with_weights ? calloc((size_t)n_classes, sizeof(float)) : NULL;
    for (int b = 0; b < B; b++) {
        int len = lengths ? lengths[b] : T;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            if (t < len) {
                gb->tokens[i] = 1 + (int32_t)(gc_rng_u64(&r) % (uint64_t)(vocab - 1));
                gb->mask[i] = 1.0f;
                if (gb->type_ids) gb->type_ids[i] = t >= len / 2 ? 1 : 0;
            }
        }
        gb->labels[b] = (int32_t)(gc_rng_u64(&r) % (uint64_t)n_classes);
    }
    if (class_weights) {
        for (int c = 0; c < n_classes; c++)
            class_weights[c] = (float)(0.5 + 1.5 * gc_rng_uniform(&r));
        for (int b = 0; b < B; b++) gb->weights[b] = class_weights[gb->labels[b]];
    }
    free(class_weights);
    gb->b.B = B;
    gb->b.T = T;
    ds_batch_set(&gb->b, "input_ids", DS_I32, gb->tokens);
    ds_batch_set(&gb->b, "attention_mask", DS_F32, gb->mask);
    ds_batch_set(&gb->b, "labels", DS_I32, gb->labels);
    if (gb->type_ids) ds_batch_set(&gb->b, "token_type_ids", DS_I32, gb->type_ids);
    if (gb->weights) ds_batch_set(&gb->b, "weights", DS_F32, gb->weights);
}

void gc_batch_free(gc_batch *gb) {
    free(gb->tokens);
    free(gb->type_ids);
    free(gb->labels);
    free(gb->mask);
    free(gb->weights);
    memset(gb, 0, sizeof *gb);
}

/* ---- chain ---- */

int gc_chain_init(gc_chain *c, ds_backend *be, ds_module **modules, int n, const ds_batch *b,
                  bool first_reads_batch, size_t nx0, bool loss_last, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->batch = b;
    c->n = n;
    c->loss_last = loss_last;
    c->seed = seed;
    c->loss_scale = 1.0f;
    c->runs = calloc((size_t)n, sizeof *c->runs);
    gc_rng rng = {seed ^ 0xabcdefull};
    if (!first_reads_batch) {
        c->nx0 = nx0;
        c->x0 = gbuf_alloc(nx0 * sizeof(float));
        for (size_t i = 0; i < nx0; i++) c->x0[i] = (float)gc_rng_normal(&rng);
    }
    size_t prev_ny = nx0;
    for (int i = 0; i < n; i++) {
        gc_run *r = &c->runs[i];
        ds_module *m = modules[i];
        r->m = m;
        r->params = calloc((size_t)m->n_params + 1, sizeof(float *));
        r->grads = calloc((size_t)m->n_params + 1, sizeof(float *));
        r->numel = calloc((size_t)m->n_params + 1, sizeof(size_t));
        for (int p = 0; p < m->n_params; p++) {
            r->numel[p] = (size_t)ds_param_numel(&m->params[p]);
            r->params[p] = gbuf_alloc(r->numel[p] * sizeof(float));
            r->grads[p] = gbuf_alloc(r->numel[p] * sizeof(float));
        }
        r->ny = m->ops->out_elems(m, b->B, b->T);
        r->y = gbuf_alloc(r->ny * sizeof(float));
        r->saved_bytes = m->ops->saved_bytes(m, b->B, b->T);
        r->scratch_bytes = m->ops->scratch_bytes(m, b->B, b->T);
        r->saved = r->saved_bytes ? gbuf_alloc(r->saved_bytes) : NULL;
        r->scratch = r->scratch_bytes ? gbuf_alloc(r->scratch_bytes) : NULL;
        if (i == 0 && first_reads_batch) {
            r->x = NULL;
            r->dx = NULL;
        } else {
            r->x = i == 0 ? c->x0 : c->runs[i - 1].y;
            r->nx = prev_ny;
            r->dx = gbuf_alloc(prev_ny * sizeof(float));
        }
        prev_ny = r->ny;
    }
    gc_run *last = &c->runs[n - 1];
    if (!loss_last) {
        c->r = gbuf_alloc(last->ny * sizeof(float));
        for (size_t i = 0; i < last->ny; i++) c->r[i] = (float)gc_rng_normal(&rng);
    } else if (last->ny != 2) {
        fprintf(stderr, "harness: last module %s is not a loss (%zu outputs)\n", last->m->name,
                last->ny);
        return -1;
    }
    for (int i = 0; i < n; i++)
        c->runs[i].dy = i + 1 < n ? c->runs[i + 1].dx : (loss_last ? NULL : c->r);
    /* Tied parameters point at an earlier module's parameter and its
     * gradient buffer: both uses accumulate there, so the owner's check
     * covers the sum. */
    for (int i = 0; i < n; i++) {
        gc_run *r = &c->runs[i];
        r->tied = calloc((size_t)r->m->n_tied + 1, sizeof(float *));
        r->tied_grads = calloc((size_t)r->m->n_tied + 1, sizeof(float *));
        for (int k = 0; k < r->m->n_tied; k++) {
            for (int j = 0; j < i && !r->tied[k]; j++)
                for (int p = 0; p < c->runs[j].m->n_params; p++)
                    if (!strcmp(c->runs[j].m->params[p].name, r->m->tied[k].target)) {
                        r->tied[k] = c->runs[j].params[p];
                        r->tied_grads[k] = c->runs[j].grads[p];
                    }
            if (!r->tied[k]) {
                fprintf(stderr, "harness: module %s ties to %s, which no earlier module of the "
                        "chain owns\n", r->m->name, r->m->tied[k].target);
                return -1;
            }
        }
    }
    gc_chain_randomize(c, 0.5, 0.2, seed + 17);
    return 0;
}

void gc_chain_free(gc_chain *c) {
    for (int i = 0; i < c->n; i++) {
        gc_run *r = &c->runs[i];
        for (int p = 0; p < r->m->n_params; p++) {
            free(r->params[p]);
            free(r->grads[p]);
        }
        free(r->params);
        free(r->grads);
        free(r->tied);
        free(r->tied_grads);
        free(r->numel);
        free(r->y);
        free(r->dx);
        free(r->saved);
        free(r->scratch);
    }
    free(c->runs);
    free(c->x0);
    free(c->r);
    memset(c, 0, sizeof *c);
}

void gc_chain_randomize(gc_chain *c, double wstd, double vstd, uint64_t seed) {
    gc_rng rng = {seed};
    for (int i = 0; i < c->n; i++) {
        gc_run *r = &c->runs[i];
        for (int p = 0; p < r->m->n_params; p++) {
            const ds_param_desc *d = &r->m->params[p];
            for (size_t j = 0; j < r->numel[p]; j++) {
                double v;
                switch (d->init) {
                case DS_INIT_ONES: v = 1.0 + vstd * gc_rng_normal(&rng); break;
                case DS_INIT_ZEROS: v = vstd * gc_rng_normal(&rng); break;
                default: v = wstd * gc_rng_normal(&rng); break;
                }
                r->params[p][j] = (float)v;
            }
        }
    }
}

static double chain_value(const gc_chain *c) {
    const gc_run *last = &c->runs[c->n - 1];
    if (c->loss_last) return (double)last->y[0];
    double L = 0.0;
    for (size_t i = 0; i < last->ny; i++) L += (double)c->r[i] * (double)last->y[i];
    return L;
}

static ds_module_ctx make_ctx(gc_chain *c, int i) {
    gc_run *r = &c->runs[i];
    ds_module_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.be = c->be;
    ctx.batch = c->batch;
    ctx.training = c->training;
    ctx.seed = c->seed + (uint64_t)i;
    ctx.params = r->params;
    ctx.tied = r->tied;
    ctx.x = r->x;
    ctx.y = r->y;
    ctx.saved = r->saved;
    ctx.scratch = r->scratch;
    ctx.loss_scale = c->loss_scale;
    return ctx;
}

int gc_chain_forward(gc_chain *c, double *L) {
    for (int i = 0; i < c->n; i++) {
        gc_run *r = &c->runs[i];
        poison(r->y, r->ny * sizeof(float));
        poison(r->saved, r->saved_bytes);
        poison(r->scratch, r->scratch_bytes);
        ds_module_ctx ctx = make_ctx(c, i);
        ds_status st = r->m->ops->forward(r->m, &ctx);
        if (st != DS_OK) {
            fprintf(stderr, "forward of %s failed: %s: %s\n", r->m->name, ds_status_to_string(st),
                    ds_last_error());
            return -1;
        }
        if (!gbuf_ok(r->y, r->ny * sizeof(float), "output", r->m->name) ||
            !gbuf_ok(r->saved, r->saved_bytes, "saved area", r->m->name) ||
            !gbuf_ok(r->scratch, r->scratch_bytes, "scratch area", r->m->name))
            return -1;
    }
    *L = chain_value(c);
    return 0;
}

int gc_chain_backward(gc_chain *c) {
    for (int i = c->n - 1; i >= 0; i--) {
        gc_run *r = &c->runs[i];
        poison(r->scratch, r->scratch_bytes);
        if (r->dx) poison(r->dx, r->nx * sizeof(float));
        ds_module_ctx ctx = make_ctx(c, i);
        ctx.grads = r->grads;
        ctx.tied_grads = r->tied_grads;
        ctx.dy = r->dy;
        ctx.dx = r->dx;
        ds_status st = r->m->ops->backward(r->m, &ctx);
        if (st != DS_OK) {
            fprintf(stderr, "backward of %s failed: %s: %s\n", r->m->name,
                    ds_status_to_string(st), ds_last_error());
            return -1;
        }
        if (!gbuf_ok(r->scratch, r->scratch_bytes, "scratch area", r->m->name) ||
            !gbuf_ok(r->dx, r->nx * sizeof(float), "input gradient", r->m->name))
            return -1;
        for (int p = 0; p < r->m->n_params; p++)
            if (!gbuf_ok(r->grads[p], r->numel[p] * sizeof(float), r->m->params[p].name,
                         r->m->name))
                return -1;
    }
    return 0;
}

/* ---- finite differences ---- */

typedef struct fd_stats {
    int checked, failed, skipped;
    double max_err, max_ratio;
} fd_stats;

/* Central difference of L in *v with step s (the step actually taken after
 * rounding to float is used as the divisor). */
static int central_diff(gc_chain *c, float *v, double s, double *out) {
    float orig = *v;
    double Lp, Lm;
    *v = (float)((double)orig + s);
    double up = (double)*v - (double)orig;
    if (gc_chain_forward(c, &Lp)) return -1;
    *v = (float)((double)orig - s);
    double dn = (double)orig - (double)*v;
    if (gc_chain_forward(c, &Lm)) return -1;
    *v = orig;
    *out = (Lp - Lm) / (up + dn);
    return 0;
}

/* Richardson's extrapolation of two central differences,
 *   FD = R(h) = (4 D(h/2) - D(h)) / 3,
 * cancels the h^2 term of the truncation error (left: O(h^4)), at the price
 * of 3x the rounding noise of D(h): |noise| <= 3 * kappa * eps * S / h. */
static int check_entry(gc_chain *c, const gc_opts *o, float *v, double an, double S,
                       fd_stats *fs, const char *name, size_t j) {
    double s = o->h * fmax(1.0, fabs((double)*v));
    double d1, d2;
    if (central_diff(c, v, s, &d1) || central_diff(c, v, s / 2, &d2)) return -1;
    double fd = (4.0 * d2 - d1) / 3.0;
    double noise = 3.0 * o->atol * (double)FLT_EPSILON * S / s;
    if (o->kinks) {
        /* Where L is smooth, R(h) and R(h/2) agree to O(h^4) plus their
         * noise (R(h/2) has twice R(h)'s); a ReLU kink inside the step
         * breaks that, and FD says nothing about the derivative there. */
        double d3;
        if (central_diff(c, v, s / 4, &d3)) return -1;
        double fd_half = (4.0 * d3 - d2) / 3.0;
        if (fabs(fd - fd_half) > o->rtol * fmax(fabs(fd), fabs(fd_half)) + 3.0 * noise) {
            fs->skipped++;
            return 0;
        }
    }
    double err = fabs(fd - an);
    double tol = o->rtol * fmax(fabs(fd), fabs(an)) + noise;
    fs->checked++;
    if (err > fs->max_err) fs->max_err = err;
    if (err / tol > fs->max_ratio) fs->max_ratio = err / tol;
    if (!(err <= tol)) {
        if (fs->failed < 5)
            fprintf(stderr, "  MISMATCH %s[%zu]: analytic %.9g finite-difference %.9g (tol %.3g)\n",
                    name, j, an, fd, tol);
        fs->failed++;
    }
    return 0;
}

/* GC_MAX_PER_TENSOR caps o->max_per_tensor: tools/test_sanitize.sh sets it,
 * since under the sanitizers the point is every code path's memory accesses,
 * which fewer entries reach as well (each entry is two more forwards, 15x
 * slower there); tools/test.sh checks the gradients with the full count. */
static size_t max_entries(const gc_opts *o) {
    size_t m = (size_t)o->max_per_tensor;
    const char *cap = getenv("GC_MAX_PER_TENSOR");
    if (cap && atoi(cap) > 0 && (size_t)atoi(cap) < m) m = (size_t)atoi(cap);
    return m;
}

static int check_tensor(gc_chain *c, const gc_opts *o, float *vals, const double *an, size_t n,
                        double S, const char *name, gc_rng *rng, const char *label) {
    fd_stats fs = {0};
    size_t most = max_entries(o);
    size_t count = n <= most ? n : most;
    for (size_t k = 0; k < count; k++) {
        size_t j = n <= most ? k : (size_t)(gc_rng_u64(rng) % n);
        if (check_entry(c, o, &vals[j], an[j], S, &fs, name, j)) return 1;
    }
    double an_norm = 0.0;
    for (size_t j = 0; j < n; j++) an_norm = fmax(an_norm, fabs(an[j]));
    printf("%s: %-56s n %4d  max|err| %.2e = %5.2f eps*S/h  err/tol %.3f  max|g| %.2e%s\n",
           label, name, fs.checked, fs.max_err, fs.max_err * o->h / ((double)FLT_EPSILON * S),
           fs.max_ratio, an_norm, fs.skipped ? "  (kinks skipped)" : "");
    int fails = fs.failed > 0;
    if (fs.skipped * 20 > fs.checked + fs.skipped) {
        fprintf(stderr, "  %s: %d of %d entries skipped as kinks (> 5%%)\n", name, fs.skipped,
                fs.checked + fs.skipped);
        fails = 1;
    }
    if (fs.checked == 0) {
        fprintf(stderr, "  %s: nothing checked\n", name);
        fails = 1;
    }
    return fails;
}

int gc_check(gc_chain *c, const gc_opts *o, const char *label) {
    gc_rng rng = {c->seed * 31 + 7};
    /* Non-zero gradient slots before backward: the analytic gradient is the
     * increase, so a module that overwrote instead of accumulating fails. */
    size_t total = 0;
    for (int i = 0; i < c->n; i++)
        for (int p = 0; p < c->runs[i].m->n_params; p++) total += c->runs[i].numel[p];
    double *pre = malloc((total + 1) * sizeof(double));
    for (int i = 0, k = 0; i < c->n; i++)
        for (int p = 0; p < c->runs[i].m->n_params; p++)
            for (size_t j = 0; j < c->runs[i].numel[p]; j++, k++) {
                float v = (float)gc_rng_normal(&rng);
                c->runs[i].grads[p][j] = v;
                pre[k] = v;
            }
    double L0;
    int fails = 0;
    if (gc_chain_forward(c, &L0) || gc_chain_backward(c)) {
        fails = 1;
        goto done;
    }
    /* S: the magnitude the rounding noise of L scales with */
    double S = 0.0;
    if (c->loss_last) {
        S = fmax(1.0, fabs(L0));
    } else {
        const gc_run *last = &c->runs[c->n - 1];
        for (size_t i = 0; i < last->ny; i++) S += fabs((double)c->r[i] * last->y[i]);
    }
    /* copy the analytic gradients before the FD forwards */
    double *an = malloc((total + 1) * sizeof(double));
    for (int i = 0, k = 0; i < c->n; i++)
        for (int p = 0; p < c->runs[i].m->n_params; p++)
            for (size_t j = 0; j < c->runs[i].numel[p]; j++, k++)
                an[k] = (double)c->runs[i].grads[p][j] - pre[k];
    double *an_x = NULL;
    if (o->check_x0 && c->x0) {
        an_x = malloc(c->nx0 * sizeof(double));
        for (size_t j = 0; j < c->nx0; j++) an_x[j] = c->runs[0].dx[j];
    }
    for (int i = 0, k = 0; i < c->n; i++) {
        gc_run *r = &c->runs[i];
        for (int p = 0; p < r->m->n_params; p++) {
            fails += check_tensor(c, o, r->params[p], an + k, r->numel[p], S, r->m->params[p].name,
                                  &rng, label);
            k += (int)r->numel[p];
        }
    }
    if (an_x) fails += check_tensor(c, o, c->x0, an_x, c->nx0, S, "input x", &rng, label);
    free(an);
    free(an_x);
done:
    free(pre);
    return fails;
}
