/* The decoder kernels GPT-2 adds to the cpu model-kernel table, against
 * double-precision references:
 *
 *   - DS_ACT_GELU_TANH ("gelu_new"): nn_math.h's ds_gelu_tanh and its
 *     derivative on a dense sweep, then through bias_act_fwd/bwd (with the
 *     bias gradient, and bit-identical on 1 and 2 threads);
 *   - causal attention (attn_softmax_fwd with causal = true): future keys and
 *     padded keys get probability exactly 0, the visible ones the softmax of
 *     the double reference, fewer query rows (the last Tq positions) are the
 *     last rows of the full call, a query with no visible key is zeros (no
 *     NaN), and the backward (which takes no flag) gives exactly 0 on every
 *     masked entry and the formula elsewhere, with dropout fused in.
 *
 * Tolerances are rounding bounds of the fp32 arithmetic, derived next to
 * each check; a formula error (a wrong constant, a missed key, an off-by-one
 * in the causal limit) is O(1) relative and fails them by orders of
 * magnitude. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "tests/unit/gradcheck_harness.h"
#include "tests/unit/test_util.h"

#define EPS ((double)FLT_EPSILON)
/* Absolute floors: ds_gelu_tanh cuts the sigmoid to exactly 0 once e^(-2u)
 * would overflow (-2u > 88, x < -10.03), where the true sigmoid is below
 * e^-88 = 6e-39: the value x s is then below 10.1 * 6e-39 < 1e-37, and the
 * derivative s (1 + t) below 6e-39 * (1 + 300) < 1e-35 (|t| = |x 2u' e s|
 * is about 230 there). Both are 0 to any use; the bounds add them. */
#define TINY 1e-37
#define TINY_GRAD 1e-35

static ds_backend *g_be, *g_be1; /* 2 threads, 1 thread */
static gc_rng g_rng = {4242};

/* ---- GELU, tanh form ---- */

static const double k_c = 0.044715, k_s2pi = 0.79788456080286535588;

/* The references in the sigmoid form, x s(2u) with 1 + tanh(u) = 2 s(2u):
 * the textbook 0.5 x (1 + tanh(u)) cancels in double too, to 0 below
 * x = -7.2 where the value is still 1e-16 (PyTorch's fp32 gelu_new returns
 * 0 there). The formulas are checked against each other below. */
static double gelu_tanh_sig_d(double x) {
    return 1.0 / (1.0 + exp(-2.0 * k_s2pi * (x + k_c * x * x * x)));
}

static double gelu_tanh_d(double x) { return x * gelu_tanh_sig_d(x); }

static double gelu_tanh_grad_d(double x) {
    double s = gelu_tanh_sig_d(x), e = exp(-2.0 * k_s2pi * (x + k_c * x * x * x));
    /* s' = s (1 - s) 2u' and 1 - s = e s */
    return s + x * s * (e * s) * 2.0 * k_s2pi * (1.0 + 3.0 * k_c * x * x);
}

/* The textbook form, where it does not cancel (x > -3): the two agree. */
static double gelu_tanh_textbook(double x) {
    return 0.5 * x * (1.0 + tanh(k_s2pi * (x + k_c * x * x * x)));
}

/* The rounding bounds of ds_gelu_tanh / _grad at x (see nn_math.h for the
 * evaluation). a = -2u carries <= 4 eps relative error (x^2, c x^2, the fma,
 * the product), so e = e^a is off by <= (4 |a| + 2) eps relative (2 ulp of
 * ds_expf); s = 1 / (1 + e) by (1 - s) times that plus 2 eps (sum and
 * division); the value x s by one rounding more. The derivative s (1 + t),
 * t = x 2u' e s: t carries 3 eps (2u') + rel(e) + rel(s) + 3 roundings, and
 * the sum 1 + t cancels where the derivative crosses zero (x ~ -0.75), so
 * its bound is in terms of |1| + |t|, not |1 + t|. A factor 2 covers the
 * terms left out of these first-order sums. */
static void gelu_tanh_bounds(double x, double *tol_f, double *tol_g) {
    double u = k_s2pi * (x + k_c * x * x * x), a = fabs(2.0 * u);
    double s = 1.0 / (1.0 + exp(-2.0 * u)), e = exp(-2.0 * u);
    if (!isfinite(e)) e = 0.0, s = 0.0;
    double rel_e = (4.0 * a + 2.0) * EPS;
    double rel_s = (1.0 - s) * rel_e + 2.0 * EPS;
    *tol_f = 2.0 * (rel_s + EPS) * fabs(x * s) + TINY;
    double t = fabs(x * 2.0 * k_s2pi * (1.0 + 3.0 * k_c * x * x) * e * s);
    double rel_t = 6.0 * EPS + rel_e + rel_s;
    *tol_g = 2.0 * s * ((1.0 + t) * (rel_s + EPS) + t * rel_t) + TINY_GRAD;
}

static void test_gelu_tanh_math(void) {
    /* the double derivative formula itself against a double central
     * difference (error ~ h^2 |f'''| + 1e-16 / h ~ 1e-10 at h = 1e-5) */
    for (double x = -6; x <= 6; x += 0.25) {
        double fd = (gelu_tanh_d(x + 1e-5) - gelu_tanh_d(x - 1e-5)) / 2e-5;
        CHECK(fabs(fd - gelu_tanh_grad_d(x)) < 1e-8, "gelu_new' formula at %g: %g vs fd %g", x,
              gelu_tanh_grad_d(x), fd);
        /* the sigmoid form is the textbook function (where that one is
         * accurate: a few double roundings of O(1) values) */
        if (x > -3)
            CHECK(fabs(gelu_tanh_d(x) - gelu_tanh_textbook(x)) < 1e-14,
                  "gelu_new at %g: sigmoid form %.17g, tanh form %.17g", x, gelu_tanh_d(x),
                  gelu_tanh_textbook(x));
    }
    /* dense sweep over the range where both results are normal floats and
     * beyond: worst error in units of the bound */
    double worst_f = 0, worst_g = 0, at_f = 0, at_g = 0;
    for (double xd = -12.0; xd <= 12.0; xd += 0.000731) {
        float x = (float)xd;
        double tf, tg;
        gelu_tanh_bounds(x, &tf, &tg);
        double ef = fabs(ds_gelu_tanh(x) - gelu_tanh_d(x)) / tf;
        double eg = fabs(ds_gelu_tanh_grad(x) - gelu_tanh_grad_d(x)) / tg;
        if (ef > worst_f) worst_f = ef, at_f = x;
        if (eg > worst_g) worst_g = eg, at_g = x;
    }
    printf("gelu_new: worst value error %.3f bounds at %g, derivative %.3f bounds at %g\n",
           worst_f, at_f, worst_g, at_g);
    CHECK(worst_f <= 1.0, "ds_gelu_tanh off by %.3g bounds at %g", worst_f, at_f);
    CHECK(worst_g <= 1.0, "ds_gelu_tanh_grad off by %.3g bounds at %g", worst_g, at_g);
    /* tails and edges: exact limits, no overflow into inf * 0 = NaN for
     * |x| where x^3 overflows, NaN through */
    CHECK(ds_gelu_tanh(20.0f) == 20.0f && ds_gelu_tanh_grad(20.0f) == 1.0f,
          "gelu_new(20) = %g, gelu_new'(20) = %g", ds_gelu_tanh(20.0f), ds_gelu_tanh_grad(20.0f));
    CHECK(ds_gelu_tanh(-20.0f) == 0.0f && ds_gelu_tanh_grad(-20.0f) == 0.0f,
          "gelu_new(-20) = %g, gelu_new'(-20) = %g", ds_gelu_tanh(-20.0f),
          ds_gelu_tanh_grad(-20.0f));
    CHECK(ds_gelu_tanh(0.0f) == 0.0f && ds_gelu_tanh_grad(0.0f) == 0.5f,
          "gelu_new(0) = %g, gelu_new'(0) = %g (want 0, 0.5)", ds_gelu_tanh(0.0f),
          ds_gelu_tanh_grad(0.0f));
    CHECK(ds_gelu_tanh(1e20f) == 1e20f && ds_gelu_tanh_grad(1e20f) == 1.0f &&
              ds_gelu_tanh(-1e20f) == 0.0f && ds_gelu_tanh_grad(-1e20f) == 0.0f,
          "gelu_new at +-1e20: %g %g %g %g", ds_gelu_tanh(1e20f), ds_gelu_tanh_grad(1e20f),
          ds_gelu_tanh(-1e20f), ds_gelu_tanh_grad(-1e20f));
    CHECK(isnan(ds_gelu_tanh(NAN)) && isnan(ds_gelu_tanh_grad(NAN)),
          "NaN does not propagate through gelu_new");
    /* the erf GELU and the tanh approximation differ by up to ~2e-4 in
     * value: a check that the two are not the same function */
    CHECK(fabs(ds_gelu_tanh(1.5f) - ds_gelu(1.5f)) > 1e-5, "gelu_new(1.5) equals gelu(1.5)");
}

static void test_gelu_tanh_kernel(void) {
    const int R = 129, W = 300; /* W not a multiple of the column tile */
    size_t n = (size_t)R * W;
    float *x = gc_randn(&g_rng, n, 2.5), *b = gc_randn(&g_rng, W, 0.5);
    float *y = malloc(n * 4), *y1 = malloc(n * 4), *dy = gc_randn(&g_rng, n, 1.0);
    float *dx = malloc(n * 4), *dx1 = malloc(n * 4);
    float *db = gc_randn(&g_rng, W, 1.0), *db0 = malloc(W * 4), *db1 = malloc(W * 4);
    memcpy(db0, db, W * 4);
    memcpy(db1, db, W * 4);
    CHECK_OK(g_be->nn->bias_act_fwd(g_be, y, x, b, R, W, DS_ACT_GELU_TANH));
    CHECK_OK(g_be1->nn->bias_act_fwd(g_be1, y1, x, b, R, W, DS_ACT_GELU_TANH));
    CHECK(memcmp(y, y1, n * 4) == 0, "bias_act_fwd gelu_new differs between 1 and 2 threads");
    CHECK_OK(g_be->nn->bias_act_bwd(g_be, dx, db, dy, x, b, R, W, DS_ACT_GELU_TANH));
    CHECK_OK(g_be1->nn->bias_act_bwd(g_be1, dx1, db1, dy, x, b, R, W, DS_ACT_GELU_TANH));
    CHECK(memcmp(dx, dx1, n * 4) == 0 && memcmp(db, db1, W * 4) == 0,
          "bias_act_bwd gelu_new differs between 1 and 2 threads");
    double worst_y = 0, worst_dx = 0;
    for (size_t i = 0; i < n; i++) {
        float z = x[i] + b[i % W]; /* the kernel's own fp32 sum */
        double tf, tg;
        gelu_tanh_bounds(z, &tf, &tg);
        worst_y = fmax(worst_y, fabs(y[i] - gelu_tanh_d(z)) / tf);
        /* dx = dy * act': one more rounding of the product */
        double ref = (double)dy[i] * gelu_tanh_grad_d(z);
        worst_dx = fmax(worst_dx, fabs(dx[i] - ref) / (fabs(dy[i]) * tg + EPS * fabs(ref)));
    }
    CHECK(worst_y <= 1.0, "bias_act_fwd gelu_new off by %.3g bounds", worst_y);
    CHECK(worst_dx <= 1.0, "bias_act_bwd gelu_new dx off by %.3g bounds", worst_dx);
    /* dbias[c] += sum_r dx[r, c]: R + 1 float additions */
    int bad = 0;
    for (int c = 0; c < W; c++) {
        double s = db0[c], a = fabs(db0[c]);
        for (int r = 0; r < R; r++) {
            s += dx[(size_t)r * W + c];
            a += fabs(dx[(size_t)r * W + c]);
        }
        bad += fabs(db[c] - s) > (R + 1) * EPS * a;
    }
    CHECK(bad == 0, "bias_act_bwd gelu_new: %d bias gradients off their column sums", bad);
    /* in place, as the modules call it */
    memcpy(y1, x, n * 4);
    CHECK_OK(g_be->nn->bias_act_fwd(g_be, y1, y1, b, R, W, DS_ACT_GELU_TANH));
    CHECK(memcmp(y1, y, n * 4) == 0, "bias_act_fwd gelu_new in place differs");
    float tmp[4] = {0};
    CHECK(g_be->nn->bias_act_fwd(g_be, tmp, tmp, NULL, 1, 4, DS_ACT_COUNT) == DS_ERR_INVALID_ARG,
          "bias_act_fwd accepted activation DS_ACT_COUNT");
    CHECK(g_be->nn->bias_act_bwd(g_be, tmp, NULL, tmp, tmp, NULL, 1, 4, DS_ACT_COUNT) ==
              DS_ERR_INVALID_ARG,
          "bias_act_bwd accepted activation DS_ACT_COUNT");
    free(x), free(b), free(y), free(y1), free(dy), free(dx), free(dx1), free(db), free(db0);
    free(db1);
}

/* ---- causal attention ---- */

enum { B = 4, NH = 2, T = 23 };

/* Row b's keys: row 0 all real, row 1 the last 6 padded (right padding, as
 * a batch of different lengths), row 2 the first 4 padded (left padding:
 * its first queries see no real key), row 3 real except a hole at 10. */
static void make_mask(float *mask) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            bool pad = (b == 1 && t >= T - 6) || (b == 2 && t < 4) || (b == 3 && t == 10);
            mask[b * T + t] = pad ? 0.0f : 1.0f;
        }
}

/* Checks p [B, NH, Tq, T] of queries at positions T - Tq .. T - 1 against
 * the double softmax over the keys each may see. */
static void check_causal_probs(const float *p, const float *s, const float *mask, int Tq,
                               float scale, bool left_padded_row2, const char *what) {
    int leaked = 0, nans = 0, empty_rows = 0;
    double worst_rel = 0, worst_sum = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Tq; i++) {
                size_t r = ((size_t)b * NH + h) * Tq + i;
                const float *pr = p + r * T, *sr = s + r * T;
                int pos = i + (T - Tq); /* sees keys 0..pos */
                double mx = -INFINITY, z = 0, sum = 0;
                for (int j = 0; j <= pos; j++)
                    if (mask[b * T + j] != 0) mx = fmax(mx, (double)sr[j] * scale);
                for (int j = 0; j <= pos; j++)
                    if (mask[b * T + j] != 0) z += exp((double)sr[j] * scale - mx);
                for (int j = 0; j < T; j++) {
                    nans += isnan(pr[j]);
                    sum += pr[j];
                    if (j > pos || mask[b * T + j] == 0) {
                        leaked += pr[j] != 0.0f;
                        continue;
                    }
                    double ref = exp((double)sr[j] * scale - mx) / z;
                    /* as test_nn_dropout: expf within ~1 ulp of an argument
                     * rounded in float (|arg| eps), plus the sum of the
                     * pos + 1 visible terms */
                    double tol = ref * (4 + (pos + 1) + fabs(sr[j] * scale) * 2) * EPS + 1e-30;
                    worst_rel = fmax(worst_rel, fabs(pr[j] - ref) / tol);
                }
                if (mx == -INFINITY) {
                    empty_rows++;
                    CHECK(sum == 0.0, "%s: query %d of row %d sees no key but sums to %g", what,
                          pos, b, sum);
                } else {
                    /* float sum of pos + 1 terms, each rounded once */
                    worst_sum = fmax(worst_sum, fabs(sum - 1.0) / ((pos + 3) * EPS));
                }
            }
    CHECK(leaked == 0, "%s: %d future or padded keys got a non-zero probability", what, leaked);
    CHECK(nans == 0, "%s: %d NaN probabilities", what, nans);
    CHECK(worst_rel <= 1.0, "%s: off the double softmax by %.3g tolerances", what, worst_rel);
    CHECK(worst_sum <= 1.0, "%s: a row sums to 1 +- %.3g (pos + 3) eps", what, worst_sum);
    /* row 2's first 4 queries (left padding) see only padding, in every head */
    int want_empty = 0;
    for (int i = 0; i < Tq && left_padded_row2; i++) want_empty += (i + (T - Tq)) < 4 ? NH : 0;
    CHECK(empty_rows == want_empty, "%s: %d rows without a visible key, expected %d", what,
          empty_rows, want_empty);
}

static void test_causal_softmax(void) {
    const float scale = 0.41f;
    size_t n = (size_t)B * NH * T * T;
    float mask[B * T];
    make_mask(mask);
    float *s = gc_randn(&g_rng, n, 3.0), *p = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p, NULL, s, mask, true, B, NH, T, T, scale, 0.0f,
                                        0, 0, NULL));
    check_causal_probs(p, s, mask, T, scale, true, "causal, Tq = T");
    /* no mask: only the causal limit */
    float *pn = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, pn, NULL, s, NULL, true, B, NH, T, T, scale, 0.0f,
                                        0, 0, NULL));
    float ones[B * T];
    for (int i = 0; i < B * T; i++) ones[i] = 1.0f;
    check_causal_probs(pn, s, ones, T, scale, false, "causal, no mask");
    /* in place (p over s), as the modules call it */
    float *pi = malloc(n * 4);
    memcpy(pi, s, n * 4);
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, pi, NULL, pi, mask, true, B, NH, T, T, scale, 0.0f,
                                        0, 0, NULL));
    CHECK(memcmp(pi, p, n * 4) == 0, "causal softmax in place differs");

    /* the last Tq = 5 queries alone: rows T-5 .. T-1 of the full call (the
     * same visible keys and arithmetic, so bit for bit) */
    enum { TQ = 5 };
    size_t nq = (size_t)B * NH * TQ * T;
    float *sq = malloc(nq * 4), *pq = malloc(nq * 4);
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        memcpy(sq + bh * TQ * T, s + (bh * T + (T - TQ)) * T, (size_t)TQ * T * 4);
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, pq, NULL, sq, mask, true, B, NH, TQ, T, scale,
                                        0.0f, 0, 0, NULL));
    check_causal_probs(pq, sq, mask, TQ, scale, true, "causal, Tq = 5");
    int diff = 0;
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        diff += memcmp(pq + bh * TQ * T, p + (bh * T + (T - TQ)) * T, (size_t)TQ * T * 4) != 0;
    CHECK(diff == 0, "Tq = 5: %d (batch, head) blocks differ from the full call's last rows", diff);

    /* backward, no dropout: exactly 0 wherever p is 0, the formula
     * ds = scale p (dp - sum dp p) elsewhere (bound of test_nn_dropout: the
     * T-term dot product and the final products) */
    float *dp = gc_randn(&g_rng, n, 1.0), *ds = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_bwd(g_be, ds, NULL, dp, p, B, NH, T, T, scale, 0.0f, 0, 0,
                                        NULL));
    int nonzero = 0;
    double worst = 0;
    for (size_t r = 0; r < n / T; r++) {
        double dot = 0, mag = 0;
        for (int j = 0; j < T; j++) {
            dot += (double)dp[r * T + j] * p[r * T + j];
            mag += fabs((double)dp[r * T + j] * p[r * T + j]);
        }
        for (int j = 0; j < T; j++) {
            if (p[r * T + j] == 0.0f) {
                nonzero += ds[r * T + j] != 0.0f;
                continue;
            }
            double ref = scale * p[r * T + j] * (dp[r * T + j] - dot);
            double tol = scale * p[r * T + j] * (T * EPS * mag + 4 * EPS * fabs(dp[r * T + j])) +
                         1e-30;
            worst = fmax(worst, fabs(ds[r * T + j] - ref) / tol);
        }
    }
    CHECK(nonzero == 0, "causal backward: %d masked entries got a non-zero gradient", nonzero);
    CHECK(worst <= 1.0, "causal backward off the formula by %.3g tolerances", worst);

    /* attention dropout fused in: pd = dropout(p) from the same stream
     * (masked entries stay exactly 0), regenerated bit for bit by the
     * backward, whose ds is 0 on the masked entries too */
    const float pa = 0.3f;
    float *p2 = malloc(n * 4), *pd = malloc(n * 4), *ref = malloc(n * 4), *pd2 = malloc(n * 4);
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p2, pd, s, mask, true, B, NH, T, T, scale, pa, 7,
                                        333, NULL));
    CHECK(memcmp(p2, p, n * 4) == 0, "causal softmax with dropout changed p");
    CHECK_OK(g_be->nn->dropout_fwd(g_be, ref, p, NULL, NULL, (int)(n / T), T, pa, 7, 333, NULL));
    CHECK(memcmp(pd, ref, n * 4) == 0, "causal attention dropout is not dropout(p)");
    CHECK_OK(g_be->nn->attn_softmax_bwd(g_be, ds, pd2, dp, p, B, NH, T, T, scale, pa, 7, 333,
                                        NULL));
    CHECK(memcmp(pd2, pd, n * 4) == 0, "causal backward regenerated another dropout(p)");
    nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += p[i] == 0.0f && (ds[i] != 0.0f || pd[i] != 0.0f);
    CHECK(nonzero == 0, "causal with dropout: %d masked entries non-zero in pd or ds", nonzero);
    free(s), free(p), free(pn), free(pi), free(sq), free(pq), free(dp), free(ds), free(p2);
    free(pd), free(ref), free(pd2);
}

/* causal attention with dropout: p is the no-dropout call's, pd is p times
 * the dropout stream's multiplier at every element (ds_rng_uniform_at at
 * offset + flat index), so exactly 0 past each row's visible keys, where
 * nn_attn.c draws no multipliers and writes the zeros itself */
static void test_causal_dropout(void) {
    const float scale = 0.41f, pdrop = 0.2f, inv = 1.0f / (1.0f - pdrop);
    size_t n = (size_t)B * NH * T * T;
    float mask[B * T];
    make_mask(mask);
    float *s = gc_randn(&g_rng, n, 3.0), *p = malloc(n * 4), *pd = malloc(n * 4);
    float *p0 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) pd[i] = NAN; /* every entry must be written */
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p, pd, s, mask, true, B, NH, T, T, scale, pdrop,
                                        5, 33, NULL));
    CHECK_OK(g_be->nn->attn_softmax_fwd(g_be, p0, NULL, s, mask, true, B, NH, T, T, scale, 0.0f,
                                        0, 0, NULL));
    CHECK(memcmp(p, p0, n * 4) == 0, "causal softmax: p differs with dropout on");
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float m = ds_rng_uniform_at(5, 33 + i) >= pdrop ? inv : 0.0f;
        bad += !(pd[i] == p[i] * m); /* the kernel's one product; NaN fails */
    }
    CHECK(bad == 0, "causal softmax with dropout: %d of %zu entries of pd wrong", bad, n);
    free(s), free(p), free(pd), free(p0);
}

int main(void) {
    g_be = test_cpu_backend(2, NULL);
    g_be1 = test_cpu_backend(1, NULL);
    test_gelu_tanh_math();
    test_gelu_tanh_kernel();
    test_causal_softmax();
    test_causal_dropout();
    ds_backend_destroy(g_be);
    ds_backend_destroy(g_be1);
    return test_finish("test_nn_decoder");
}
