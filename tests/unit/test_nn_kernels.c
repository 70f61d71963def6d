/* The cpu model kernels (engine/backend/nn.h, ds_nn_cpu) against references
 * computed in double from the formulas, plus their error paths.
 *
 * Tolerances are worst-case rounding bounds of the fp32 computation, so a
 * kernel passes when it is as accurate as fp32 allows and fails on any
 * formula error (which is O(1) relative):
 *   - an element-wise result: a few eps relative to the magnitudes involved
 *     (each named below);
 *   - a sum of n terms accumulated in float: n * eps * sum |terms| (the
 *     classical bound for recursive summation; observed errors are ~sqrt(n)
 *     smaller).
 * Sizes are above the kernels' parallel threshold and the backend runs two
 * threads, so the OpenMP paths are the ones tested; the reductions over rows
 * must also be bit-identical with one thread (they are deterministic by
 * design: each column is summed by one thread, in row order). */
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

static ds_backend *g_be, *g_be1; /* 2 threads, 1 thread */
static gc_rng g_rng = {42};

static float *randn(size_t n, double sd) { return gc_randn(&g_rng, n, sd); }

static float *copyf(const float *a, size_t n) {
    float *p = malloc(n * sizeof(float) + 64);
    memcpy(p, a, n * sizeof(float));
    return p;
}

/* max_i |a_i - ref_i| / tol_i > 1 -> report the worst entry */
static void expect_close(const char *what, const float *a, const double *ref, const double *tol,
                         size_t n) {
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)a[i] - ref[i]) / tol[i];
        if (!(r <= worst)) {
            worst = r;
            wi = i;
        }
    }
    CHECK(worst <= 1.0, "%s: entry %zu is %.9g, reference %.9g (tolerance %.3g)", what, wi,
          (double)a[wi], ref[wi], tol[wi]);
}

/* ---- embeddings ---- */

static void test_embedding(void) {
    const int V = 50, H = 96, n = 400;
    float *table = randn((size_t)V * H, 1.0);
    int32_t ids[400];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(gc_rng_u64(&g_rng) % V);
    ids[3] = 0;
    ids[10] = 0; /* the padding row appears */
    float *out = randn((size_t)n * H, 1.0), *out0 = copyf(out, (size_t)n * H);
    CHECK_OK(g_be->nn->embedding_fwd(g_be, out, table, ids, n, H, V, true));
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < H; c++) /* one float addition: exact reference in float */
            bad += out[i * H + c] != out0[i * H + c] + table[ids[i] * H + c];
    CHECK(bad == 0, "embedding_fwd accumulate: %d entries differ", bad);
    CHECK_OK(g_be->nn->embedding_fwd(g_be, out, table, ids, n, H, V, false));
    bad = 0;
    for (int i = 0; i < n; i++) bad += memcmp(out + i * H, table + ids[i] * H, H * 4) != 0;
    CHECK(bad == 0, "embedding_fwd: %d rows differ from the table", bad);

    /* out-of-range ids: an error naming the id and its position, out untouched */
    memcpy(out0, out, (size_t)n * H * 4);
    int32_t saved = ids[7];
    const int32_t bad_ids[] = {V, -1, 1 << 30};
    for (int k = 0; k < 3; k++) {
        ids[7] = bad_ids[k];
        ds_clear_error();
        ds_status st = g_be->nn->embedding_fwd(g_be, out, table, ids, n, H, V, false);
        char want[64];
        snprintf(want, sizeof want, "id %d at position 7", bad_ids[k]);
        CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), want),
              "embedding_fwd with id %d: status %d, message \"%s\" (want \"%s\")", bad_ids[k],
              (int)st, ds_last_error(), want);
    }
    ids[7] = saved;
    CHECK(memcmp(out, out0, (size_t)n * H * 4) == 0, "embedding_fwd wrote output on bad input");

    /* backward: scatter-add with repeated ids, padding_idx row untouched */
    float *dout = randn((size_t)n * H, 1.0);
    for (int pad = -1; pad <= 0; pad++) {
        float *dt = randn((size_t)V * H, 1.0), *dt0 = copyf(dt, (size_t)V * H);
        CHECK_OK(g_be->nn->embedding_bwd(g_be, dt, dout, ids, n, H, pad));
        double *ref = calloc((size_t)V * H, sizeof(double)), *tol = calloc((size_t)V * H, 8);
        for (int r = 0; r < V * H; r++) {
            ref[r] = dt0[r];
            tol[r] = fabs(dt0[r]);
        }
        for (int i = 0; i < n; i++) {
            if (ids[i] == pad) continue;
            for (int c = 0; c < H; c++) {
                ref[ids[i] * H + c] += dout[i * H + c];
                tol[ids[i] * H + c] += fabs(dout[i * H + c]);
            }
        }
        /* each row sums at most n terms in float */
        for (int r = 0; r < V * H; r++) tol[r] = tol[r] * n * EPS + 1e-30;
        expect_close(pad < 0 ? "embedding_bwd" : "embedding_bwd padding_idx=0", dt, ref, tol,
                     (size_t)V * H);
        if (pad == 0)
            CHECK(memcmp(dt, dt0, (size_t)H * 4) == 0, "embedding_bwd changed the padding row");
        free(dt);
        free(dt0);
        free(ref);
        free(tol);
    }
    free(table);
    free(out);
    free(out0);
    free(dout);
}

/* ---- broadcast add, mean pool, copy_rows ---- */

static void test_rows(void) {
    const int R = 300, W = 200;
    float *x = randn(W, 1.0), *out = randn((size_t)R * W, 1.0), *o0 = copyf(out, (size_t)R * W);
    CHECK_OK(g_be->nn->bcast_add_fwd(g_be, out, x, R, W, true));
    int bad = 0;
    for (int i = 0; i < R * W; i++) bad += out[i] != o0[i] + x[i % W];
    CHECK(bad == 0, "bcast_add_fwd: %d entries differ", bad);
    float *dx = randn(W, 1.0), *dx0 = copyf(dx, W), *dx1 = copyf(dx, W);
    CHECK_OK(g_be->nn->bcast_add_bwd(g_be, dx, out, R, W));
    CHECK_OK(g_be1->nn->bcast_add_bwd(g_be1, dx1, out, R, W));
    CHECK(memcmp(dx, dx1, W * 4) == 0, "bcast_add_bwd differs between 1 and 2 threads");
    double ref[200], tol[200];
    for (int c = 0; c < W; c++) {
        ref[c] = dx0[c];
        tol[c] = fabs(dx0[c]);
        for (int r = 0; r < R; r++) {
            ref[c] += out[r * W + c];
            tol[c] += fabs(out[r * W + c]);
        }
        tol[c] *= (R + 1) * EPS;
    }
    expect_close("bcast_add_bwd", dx, ref, tol, W);

    /* masked mean pool; row 2 has no real token (count clamps to 1: zeros) */
    const int B = 4, T = 40, H = 130;
    float *xp = randn((size_t)B * T * H, 1.0), mask[4 * 40];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) mask[b * T + t] = (b != 2 && t < T - 7 * b) ? 1.0f : 0.0f;
    float *pool = randn((size_t)B * H, 1.0);
    CHECK_OK(g_be->nn->mean_pool_fwd(g_be, pool, xp, mask, B, T, H));
    double pr[4 * 130], pt[4 * 130];
    for (int b = 0; b < B; b++) {
        double cnt = 0;
        for (int t = 0; t < T; t++) cnt += mask[b * T + t];
        for (int c = 0; c < H; c++) {
            double s = 0, a = 0;
            for (int t = 0; t < T; t++)
                if (mask[b * T + t] != 0) {
                    s += xp[(b * T + t) * H + c];
                    a += fabs(xp[(b * T + t) * H + c]);
                }
            pr[b * H + c] = s / (cnt > 1 ? cnt : 1);
            pt[b * H + c] = (T + 2) * EPS * a / (cnt > 1 ? cnt : 1) + 1e-30;
        }
    }
    expect_close("mean_pool_fwd", pool, pr, pt, (size_t)B * H);
    float *dpool = randn((size_t)B * H, 1.0), *dxp = randn((size_t)B * T * H, 1.0);
    CHECK_OK(g_be->nn->mean_pool_bwd(g_be, dxp, dpool, mask, B, T, H));
    bad = 0;
    for (int b = 0; b < B; b++) {
        float cnt = 0;
        for (int t = 0; t < T; t++) cnt += mask[b * T + t];
        float inv = 1.0f / (cnt > 1 ? cnt : 1);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < H; c++)
                bad += dxp[(b * T + t) * H + c] != mask[b * T + t] * inv * dpool[b * H + c];
    }
    CHECK(bad == 0, "mean_pool_bwd: %d entries differ from mask * dout / count", bad);

    /* strided rows: the [CLS] rows of [B, T, H] and back */
    float *cls = randn((size_t)B * H, 1.0), *c0 = copyf(cls, (size_t)B * H);
    CHECK_OK(g_be->nn->copy_rows(g_be, cls, H, xp, T * H, B, H, true));
    bad = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < H; c++) bad += cls[b * H + c] != c0[b * H + c] + xp[b * T * H + c];
    CHECK(bad == 0, "copy_rows accumulate: %d entries differ", bad);
    CHECK_OK(g_be->nn->copy_rows(g_be, xp, T * H, c0, H, B, H, false));
    for (int b = 0; b < B; b++) bad += memcmp(xp + (size_t)b * T * H, c0 + b * H, H * 4) != 0;
    CHECK(bad == 0, "copy_rows: %d rows differ", bad);
    free(x), free(out), free(o0), free(dx), free(dx0), free(dx1), free(xp), free(pool);
    free(dpool), free(dxp), free(cls), free(c0);
}

/* ---- bias + activation ---- */

static double gelu_d(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double gelu_grad_d(double x) {
    return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}

static double act_d(ds_act a, double x) {
    switch (a) {
    case DS_ACT_RELU: return x > 0 ? x : 0;
    case DS_ACT_GELU: return gelu_d(x);
    case DS_ACT_TANH: return tanh(x);
    default: return x;
    }
}

static double act_grad_d(ds_act a, double x) {
    switch (a) {
    case DS_ACT_RELU: return x > 0 ? 1 : 0;
    case DS_ACT_GELU: return gelu_grad_d(x);
    case DS_ACT_TANH: return 1.0 - tanh(x) * tanh(x);
    default: return 1;
    }
}

/* The libm-free exp and erf of nn_math.h against double precision, on a
 * dense sweep. ds_expf: Cephes' expf, within 2 ulp (<= 2 eps relative). The
 * A&S erf: its published bound 1.5e-7 plus the float evaluation: near z = 0
 * the result is 1 - t P(t) e with both terms ~1, and the Horner steps and
 * the subtraction each round at magnitude ~1, so up to ~8 eps absolute is
 * lost to cancellation (PyTorch's vectorised erf, the same formula, too). */
static void test_exp_erf(void) {
    double worst_e = 0, worst_f = 0, at_e = 0, at_f = 0;
    for (double x = -87.0; x <= 88.0; x += 0.000917) {
        float xf = (float)x;
        double ref = exp((double)xf), rel = fabs(ds_expf(xf) - ref) / ref;
        if (rel > worst_e) worst_e = rel, at_e = xf;
    }
    for (double z = -9.0; z <= 9.0; z += 0.0001) {
        float zf = (float)z;
        double err = fabs(ds_erf_with_exp(zf, ds_expf(-zf * zf)) - erf((double)zf));
        if (err > worst_f) worst_f = err, at_f = zf;
    }
    printf("ds_expf: max relative error %.3g (%.2f eps) at %g; erf: max abs error %.3g at %g\n",
           worst_e, worst_e / EPS, at_e, worst_f, at_f);
    CHECK(worst_e <= 2 * EPS, "ds_expf: relative error %.3g at %g exceeds 2 eps", worst_e, at_e);
    CHECK(worst_f <= 1.5e-7 + 8 * EPS, "erf: absolute error %.3g at %g exceeds 1.5e-7 + 8 eps",
          worst_f, at_f);
    /* the edges: underflow to 0, clamp, NaN through */
    CHECK(ds_expf(-100.0f) == 0.0f && ds_expf(-87.34f) == 0.0f, "ds_expf underflow not 0");
    CHECK(ds_expf(0.0f) == 1.0f, "ds_expf(0) = %.9g", ds_expf(0.0f));
    CHECK(isnan(ds_expf(NAN)) && isnan(ds_gelu(NAN)), "NaN does not propagate through exp/gelu");
    CHECK(ds_gelu(-20.0f) == 0.0f && ds_gelu(20.0f) == 20.0f && ds_gelu_grad(20.0f) == 1.0f,
          "gelu tails: %g %g %g", ds_gelu(-20.0f), ds_gelu(20.0f), ds_gelu_grad(20.0f));
}

static void test_bias_act(void) {
    /* The double GELU derivative formula itself, against a double central
     * difference (error ~ h^2 + 1e-16/h ~ 1e-10 at h = 1e-5). */
    for (double x = -6; x <= 6; x += 0.25) {
        double fd = (gelu_d(x + 1e-5) - gelu_d(x - 1e-5)) / 2e-5;
        CHECK(fabs(fd - gelu_grad_d(x)) < 1e-8, "gelu' formula at %g: %g vs fd %g", x,
              gelu_grad_d(x), fd);
    }
    const int R = 257, W = 300; /* W not a multiple of the column tile */
    const ds_act acts[] = {DS_ACT_NONE, DS_ACT_RELU, DS_ACT_GELU, DS_ACT_TANH};
    const char *names[] = {"none", "relu", "gelu", "tanh"};
    float *x = randn((size_t)R * W, 2.5), *b = randn(W, 0.5);
    x[0] = 0.0f; /* relu'(0) = 0 as PyTorch */
    b[0] = 0.0f;
    size_t n = (size_t)R * W;
    double *ref = malloc(n * 8), *tol = malloc(n * 8);
    for (int a = 0; a < 4; a++) {
        char what[64];
        float *y = malloc(n * 4);
        CHECK_OK(g_be->nn->bias_act_fwd(g_be, y, x, b, R, W, acts[a]));
        for (size_t i = 0; i < n; i++) {
            float z = x[i] + b[i % W]; /* the kernel's own fp32 sum */
            ref[i] = act_d(acts[a], z);
            /* erff / tanhf / expf are within ~2 ulp; GELU's 1 + erf cancels
             * for negative z, leaving an absolute error ~eps * |z| / 2 */
            tol[i] = 4 * EPS * (fabs(ref[i]) + 0.5 * fabs(z)) + 1e-30;
        }
        snprintf(what, sizeof what, "bias_act_fwd %s", names[a]);
        expect_close(what, y, ref, tol, n);
        /* in place */
        float *yi = copyf(x, n);
        CHECK_OK(g_be->nn->bias_act_fwd(g_be, yi, yi, b, R, W, acts[a]));
        CHECK(memcmp(yi, y, n * 4) == 0, "bias_act_fwd %s in place differs", names[a]);

        float *dy = randn(n, 1.0), *dx = malloc(n * 4);
        float *db = randn(W, 1.0), *db0 = copyf(db, W), *db1 = copyf(db, W), *dx1 = malloc(n * 4);
        CHECK_OK(g_be->nn->bias_act_bwd(g_be, dx, db, dy, x, b, R, W, acts[a]));
        CHECK_OK(g_be1->nn->bias_act_bwd(g_be1, dx1, db1, dy, x, b, R, W, acts[a]));
        CHECK(memcmp(db, db1, W * 4) == 0 && memcmp(dx, dx1, n * 4) == 0,
              "bias_act_bwd %s differs between 1 and 2 threads", names[a]);
        for (size_t i = 0; i < n; i++) {
            float z = x[i] + b[i % W];
            ref[i] = (double)dy[i] * act_grad_d(acts[a], z);
            tol[i] = 4 * EPS * fabs(dy[i]) * (fabs(act_grad_d(acts[a], z)) + 0.5 * fabs(z) + 1) +
                     1e-30;
        }
        snprintf(what, sizeof what, "bias_act_bwd %s dx", names[a]);
        expect_close(what, dx, ref, tol, n);
        double rb[300], tb[300];
        for (int c = 0; c < W; c++) {
            rb[c] = db0[c];
            tb[c] = fabs(db0[c]);
            for (int r = 0; r < R; r++) {
                rb[c] += dx[r * W + c];
                tb[c] += fabs(dx[r * W + c]);
            }
            tb[c] *= (R + 1) * EPS;
        }
        snprintf(what, sizeof what, "bias_act_bwd %s dbias", names[a]);
        expect_close(what, db, rb, tb, W);
        free(y), free(yi), free(dy), free(dx), free(db), free(db0), free(db1), free(dx1);
    }
    /* unknown activation, NULL dx with an activation: errors */
    float tmp[4] = {0};
    CHECK(g_be->nn->bias_act_fwd(g_be, tmp, tmp, NULL, 1, 4, (ds_act)9) == DS_ERR_INVALID_ARG,
          "bias_act_fwd accepted activation 9");
    CHECK(g_be->nn->bias_act_bwd(g_be, NULL, tmp, tmp, tmp, NULL, 1, 4, DS_ACT_GELU) ==
              DS_ERR_INVALID_ARG,
          "bias_act_bwd accepted dx == NULL with GELU");
    free(x), free(b), free(ref), free(tol);
}

/* ---- layer norm ---- */

/* n x h: the cpu backward runs in one pass with dgamma / dbeta summed per
 * block of 64 rows while those partial sums fit its stack budget (300 x 272:
 * 5 blocks, the last of 44 rows), else in two passes (300 x 6600). */
static void test_layernorm(int n, int h) {
    float *x = randn((size_t)n * h, 1.0);
    /* rows whose mean is several standard deviations from zero */
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < h; c++) x[r * h + c] += 5.0f;
    float *g = randn(h, 0.3), *be = randn(h, 0.3);
    for (int c = 0; c < h; c++) g[c] += 1.0f;
    float eps = 1e-12f;
    float *y = malloc((size_t)n * h * 4), *mean = malloc(n * 4), *rstd = malloc(n * 4);
    CHECK_OK(g_be->nn->layernorm_fwd(g_be, y, mean, rstd, x, g, be, n, h, eps));
    size_t N = (size_t)n * h;
    double *ref = malloc(N * 8), *tol = malloc(N * 8), *xh = malloc(N * 8), *rs = malloc(n * 8);
    for (int r = 0; r < n; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < h; c++) m += x[r * h + c];
        m /= h;
        for (int c = 0; c < h; c++) v += (x[r * h + c] - m) * (x[r * h + c] - m);
        rs[r] = 1.0 / sqrt(v / h + eps);
        for (int c = 0; c < h; c++) {
            xh[r * h + c] = (x[r * h + c] - m) * rs[r];
            ref[r * h + c] = xh[r * h + c] * g[c] + be[c];
            /* float mean and variance are off by <= h eps relative to the
             * row's magnitude |x| / std, which scales into xhat */
            double scale = (fabs(m) + 1.0 / rs[r]) * rs[r];
            tol[r * h + c] = 2 * h * EPS * scale * fabs(g[c]) + 4 * EPS * fabs(be[c]) + 1e-30;
        }
    }
    expect_close("layernorm_fwd", y, ref, tol, N);
    /* backward vs double formula */
    float *dy = randn(N, 1.0), *dx = malloc(N * 4), *dg = randn(h, 1.0), *db = randn(h, 1.0);
    float *dg0 = copyf(dg, h), *db0 = copyf(db, h), *dg1 = copyf(dg, h), *db1 = copyf(db, h);
    float *dx1 = malloc(N * 4);
    CHECK_OK(g_be->nn->layernorm_bwd(g_be, dx, dg, db, dy, x, mean, rstd, g, n, h, false));
    CHECK_OK(g_be1->nn->layernorm_bwd(g_be1, dx1, dg1, db1, dy, x, mean, rstd, g, n, h, false));
    CHECK(memcmp(dx, dx1, N * 4) == 0 && memcmp(dg, dg1, h * 4) == 0 && memcmp(db, db1, h * 4) == 0,
          "layernorm_bwd differs between 1 and 2 threads");
    for (int r = 0; r < n; r++) {
        double a = 0, cc = 0, mag = 0;
        for (int c = 0; c < h; c++) {
            a += dy[r * h + c] * g[c];
            cc += dy[r * h + c] * g[c] * xh[r * h + c];
            mag += fabs(dy[r * h + c] * g[c]) * (1 + fabs(xh[r * h + c]));
        }
        a /= h;
        cc /= h;
        for (int c = 0; c < h; c++) {
            ref[r * h + c] = rs[r] * (dy[r * h + c] * g[c] - a - xh[r * h + c] * cc);
            /* the row sums (h terms) and the float xhat (see forward) */
            double scale = (fabs(x[r * h]) * rs[r] + 1.0);
            tol[r * h + c] = rs[r] * (4 * h * EPS * scale * (mag / h + fabs(dy[r * h + c] * g[c])) +
                                      4 * EPS * fabs(dy[r * h + c] * g[c])) + 1e-30;
        }
    }
    expect_close("layernorm_bwd dx", dx, ref, tol, N);
    double *rg = malloc(h * 8), *tg = malloc(h * 8), *rb = malloc(h * 8), *tb = malloc(h * 8);
    for (int c = 0; c < h; c++) {
        rg[c] = dg0[c], tg[c] = fabs(dg0[c]), rb[c] = db0[c], tb[c] = fabs(db0[c]);
        for (int r = 0; r < n; r++) {
            rg[c] += dy[r * h + c] * xh[r * h + c];
            tg[c] += fabs(dy[r * h + c] * xh[r * h + c]) *
                     (1 + 2 * h * (fabs(x[r * h]) * rs[r] + 1));
            rb[c] += dy[r * h + c];
            tb[c] += fabs(dy[r * h + c]);
        }
        tg[c] *= (n + 2) * EPS;
        tb[c] *= (n + 1) * EPS;
    }
    expect_close("layernorm_bwd dgamma", dg, rg, tg, h);
    expect_close("layernorm_bwd dbeta", db, rb, tb, h);
    /* accumulate_dx adds: old + dx up to dx's own rounding bound (the
     * compiler may contract the accumulating path's multiply-adds
     * differently) plus that of the addition */
    float *acc = randn(N, 1.0), *acc0 = copyf(acc, N);
    CHECK_OK(g_be->nn->layernorm_bwd(g_be, acc, dg, db, dy, x, mean, rstd, g, n, h, true));
    int bad = 0;
    for (size_t i = 0; i < N; i++)
        bad += fabs((double)acc[i] - ((double)acc0[i] + dx[i])) >
               tol[i] + 2 * EPS * (fabs(acc0[i]) + fabs(dx[i]));
    CHECK(bad == 0, "layernorm_bwd accumulate_dx: %d entries are not old + dx", bad);
    float *alias = copyf(dy, N);
    CHECK_OK(g_be->nn->layernorm_bwd(g_be, alias, dg, db, alias, x, mean, rstd, g, n, h, false));
    CHECK(memcmp(alias, dx, N * 4) == 0, "layernorm_bwd with dx == dy differs");
    free(x), free(g), free(be), free(y), free(mean), free(rstd), free(ref), free(tol), free(xh);
    free(rs), free(dy), free(dx), free(dg), free(db), free(dg0), free(db0), free(dg1), free(db1);
    free(dx1), free(acc), free(acc0), free(alias), free(rg), free(tg), free(rb), free(tb);
}

/* ---- cross-entropy ---- */

static void test_xent(void) {
    /* A hand example: logits [[1, 2, 3], [1, 0, 0], [0.5, -1, 2]], labels
     * [2, 0, 1], class weights [1, 2, 0.5], so row weights w[y] = [0.5, 1,
     * 2]. PyTorch's CrossEntropyLoss(weight=w): sum_b w[y_b] * -log
     * softmax(z_b)[y_b] / sum_b w[y_b]. */
    const float z[9] = {1, 2, 3, 1, 0, 0, 0.5f, -1, 2};
    const int32_t y[3] = {2, 0, 1};
    const float cw[3] = {1, 2, 0.5f};
    const float w[3] = {cw[2], cw[0], cw[1]}; /* per row */
    const int IGN = DS_IGNORE_INDEX;
    double num = 0, den = 0, num_u = 0, nll[3];
    for (int b = 0; b < 3; b++) {
        double s = 0;
        for (int c = 0; c < 3; c++) s += exp(z[b * 3 + c]);
        nll[b] = log(s) - z[b * 3 + y[b]];
        num += w[b] * nll[b];
        den += w[b];
        num_u += nll[b];
    }
    float loss, wsum, probs[9], rows[3], dl[9];
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, y, w, 3, 3, IGN));
    /* each nll is a log-sum-exp of 3 terms: a few eps relative */
    CHECK(fabs(loss - num / den) < 8 * EPS * num / den, "weighted xent %.9g, formula %.9g", loss,
          num / den);
    CHECK(wsum == 3.5f, "wsum %g, expected 1 + 2 + 0.5", wsum);
    for (int b = 0; b < 3; b++)
        CHECK(fabs(rows[b] - nll[b]) < 8 * EPS * nll[b], "row loss %d %.9g, formula %.9g", b,
              rows[b], nll[b]);
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, y, NULL, 3, 3, IGN));
    CHECK(fabs(loss - num_u / 3) < 8 * EPS * num_u / 3, "unweighted xent %.9g, formula %.9g",
          loss, num_u / 3);
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, y, w, 3, 3, IGN));
    CHECK_OK(g_be->nn->xent_bwd(g_be, dl, probs, &wsum, y, w, 3, 3, IGN, 8.0f));
    for (int b = 0; b < 3; b++) {
        double s = 0;
        for (int c = 0; c < 3; c++) s += exp(z[b * 3 + c]);
        for (int c = 0; c < 3; c++) {
            double p = exp(z[b * 3 + c]) / s;
            double ref = 8.0 * w[b] / den * (p - (c == y[b]));
            CHECK(fabs(dl[b * 3 + c] - ref) < 8 * EPS * 8.0 * w[b] / den,
                  "dlogits[%d,%d] %.9g, formula %.9g", b, c, dl[b * 3 + c], ref);
        }
    }
    /* the ignore index: row 1 drops out of the mean and gets no gradient,
     * exactly as the loss over rows 0 and 2 alone */
    const int32_t yi[3] = {2, IGN, 1};
    float loss2, wsum2;
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, yi, NULL, 3, 3, IGN));
    CHECK(wsum == 2.0f && rows[1] == 0.0f, "ignored row counted: wsum %g, row loss %g", wsum,
          rows[1]);
    const float z02[6] = {1, 2, 3, 0.5f, -1, 2};
    const int32_t y02[2] = {2, 1};
    float p02[6], r02[2], d02[6];
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss2, &wsum2, p02, r02, z02, y02, NULL, 2, 3, IGN));
    CHECK(loss == loss2, "with an ignored row %.9g, without the row %.9g", loss, loss2);
    CHECK_OK(g_be->nn->xent_bwd(g_be, dl, probs, &wsum, yi, NULL, 3, 3, IGN, 1.0f));
    CHECK_OK(g_be->nn->xent_bwd(g_be, d02, p02, &wsum2, y02, NULL, 2, 3, IGN, 1.0f));
    CHECK(dl[3] == 0 && dl[4] == 0 && dl[5] == 0, "ignored row has a gradient");
    CHECK(memcmp(dl, d02, 3 * 4) == 0 && memcmp(dl + 6, d02 + 3, 3 * 4) == 0,
          "counted rows' gradients differ from the loss without the ignored row");
    /* nothing counts: loss 0, weight 0, no gradient (not NaN) */
    const int32_t yall[3] = {IGN, IGN, IGN};
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, yall, NULL, 3, 3, IGN));
    CHECK(loss == 0.0f && wsum == 0.0f, "all ignored: loss %g, weight %g", loss, wsum);
    CHECK_OK(g_be->nn->xent_bwd(g_be, dl, probs, &wsum, yall, NULL, 3, 3, IGN, 1.0f));
    for (int i = 0; i < 9; i++) CHECK(dl[i] == 0.0f, "all ignored: dlogits[%d] = %g", i, dl[i]);
    /* an ignored row whose probabilities are not finite (all its logits
     * -inf) still gets exact zeros, and the counted rows stay finite */
    const float zinf[9] = {0.5f, -1, 2, -INFINITY, -INFINITY, -INFINITY, 1, 0, -2};
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, zinf, yi, NULL, 3, 3, IGN));
    CHECK(isnan(probs[3]) && isfinite(loss), "all -inf ignored row: p %g, loss %g", probs[3], loss);
    CHECK_OK(g_be->nn->xent_bwd(g_be, dl, probs, &wsum, yi, NULL, 3, 3, IGN, 1.0f));
    for (int i = 0; i < 9; i++)
        CHECK(i / 3 == 1 ? dl[i] == 0.0f && !signbit(dl[i]) : isfinite(dl[i]),
              "all -inf ignored row: dlogits[%d] = %g", i, dl[i]);
    const float w0[3] = {0, 0, 0};
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, y, w0, 3, 3, IGN));
    CHECK(loss == 0.0f && wsum == 0.0f, "zero weights: loss %g, weight %g", loss, wsum);
    /* bad labels, no labels */
    const int32_t bad[3] = {2, 3, 0};
    ds_clear_error();
    ds_status st = g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, bad, w, 3, 3, IGN);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "label 3 of row 1"),
          "xent with label 3: status %d, \"%s\"", (int)st, ds_last_error());
    const int32_t neg[3] = {2, -1, 0};
    CHECK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, neg, w, 3, 3, IGN) ==
              DS_ERR_INVALID_ARG,
          "xent with label -1 (not the ignore index) accepted");
    CHECK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, z, NULL, w, 3, 3, IGN) ==
              DS_ERR_INVALID_ARG,
          "xent without labels accepted");
    /* large logits: no overflow */
    const float zl[3] = {1000, 0, -1000};
    const int32_t yl[1] = {1};
    CHECK_OK(g_be->nn->xent_fwd(g_be, &loss, &wsum, probs, rows, zl, yl, NULL, 1, 3, IGN));
    CHECK(fabs(loss - 1000.0f) < 1e-3f && probs[0] == 1.0f, "xent(1000, 0, -1000) = %g", loss);
    /* a language model's size runs in parallel: the same as one thread,
     * bit for bit (rows are independent, the sum runs in row order) */
    enum { R = 64, C = 3001 };
    float *zz = randn(R * C, 3.0), *pa = malloc(R * C * 4), *pb = malloc(R * C * 4);
    float ra[R], rb[R], la, lb, wa, wb;
    int32_t yy[R];
    for (int r = 0; r < R; r++) yy[r] = r % 7 == 3 ? IGN : (r * 977) % C;
    CHECK_OK(g_be->nn->xent_fwd(g_be, &la, &wa, pa, ra, zz, yy, NULL, R, C, IGN));
    CHECK_OK(g_be1->nn->xent_fwd(g_be1, &lb, &wb, pb, rb, zz, yy, NULL, R, C, IGN));
    CHECK(la == lb && wa == wb && memcmp(pa, pb, (size_t)R * C * 4) == 0,
          "xent on 2 threads differs from 1 thread");
    free(zz), free(pa), free(pb);
}

int main(void) {
    g_be = test_cpu_backend(2, NULL);
    g_be1 = test_cpu_backend(1, NULL);
    test_embedding();
    test_rows();
    test_exp_erf();
    test_bias_act();
    test_layernorm(300, 272);
    test_layernorm(300, 6600);
    test_xent();
    ds_backend_destroy(g_be);
    ds_backend_destroy(g_be1);
    return test_finish("test_nn_kernels");
}
