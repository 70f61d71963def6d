/* The cpu backend's Adam / AdamW and SGD slots against values computed by
 * hand: the formulas of torch.optim.Adam / AdamW / SGD written out below in
 * double, step by step, for three elements over three steps, with the
 * hyper-parameters rounded to float first (that is what the slot receives).
 *
 * Cases: Adam without and with L2 weight decay, AdamW, no bias correction,
 * grad_mult (loss scale folded in), fp16 / bf16 gradients, fp16 / bf16 /
 * fp32 param_lp output; mixed precision's one-loop AdamW (bf16 or fp32
 * gradients into a bf16 working copy) against the same update through fp32
 * gradients and a separate rounding, bit for bit, over thousands of
 * elements (the vector loop, chunk edges, NaN and halfway values); SGD plain, with momentum, dampening, nesterov and
 * weight decay; bad hyper-parameters.
 *
 * Tolerance. Each step the slot rounds p once when it adds the update
 * (<= eps |p|) and the update carries a relative error of at most about
 * 16 eps: m and v each round twice per step (b*m, then the fma), over three
 * steps with at most 2x cancellation in these inputs for m (<= 12 eps), v is
 * a sum of positive terms and sqrt halves its error (<= 3 eps), and the bias
 * corrections, the product and the two divisions round once each (<= 4 eps;
 * the double-vs-float bias correction scalars are rounded once by design).
 * So after three steps |p - p_hand| <= 3 eps (|p| + 16 max|update|), with
 * eps = FLT_EPSILON. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "tests/unit/test_util.h"

#define NE 3    /* elements */
#define NSTEP 3 /* steps */

/* Initial parameters and the gradient of each element at each step; all
 * exactly representable in fp16 and bf16, so fp16/bf16 gradients must give
 * the same bits as fp32 ones. Element 1 sees zero gradients first (Adam's
 * eps-only denominator, weight decay acting alone). */
static const float k_p0[NE] = {1.0f, -2.0f, 0.5f};
static const float k_grad[NSTEP][NE] = {
    {0.5f, 0.0f, 4.0f},
    {-0.25f, 0.0f, 4.0f},
    {0.125f, 1.0f, -8.0f},
};

/* ---- hand computations, double ---- */

typedef struct hand_result {
    double p[NE];
    double max_update[NE];
} hand_result;

/* torch.optim.Adam / AdamW, one element, three steps:
 *   g = grad                                  (Adam L2:  g = g + wd * p)
 *   AdamW:  p = p * (1 - lr * wd)
 *   m = b1 * m + (1 - b1) * g
 *   v = b2 * v + (1 - b2) * g * g
 *   bias correction:  bc1 = 1 - b1^t,  bc2 = 1 - b2^t   (else 1 and 1)
 *   p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 * Element 0 of plain Adam (lr 0.1, betas 0.9 / 0.999, eps 1e-8, floats):
 *   t=1  g= 0.5    m=0.0500000119  v=2.4999678e-4  p=0.9000000005
 *   t=2  g=-0.25   m=0.0200000036  v=3.1224598e-4  p=0.8733662981
 *   t=3  g= 0.125  m=0.0305000057  v=3.2755854e-4  p=0.8393233849 */
static hand_result hand_adam(float lr_f, float wd_f, int adamw, int bias_correction, float eps_f) {
    const double lr = lr_f, b1 = 0.9f, b2 = 0.999f, eps = eps_f, wd = wd_f;
    hand_result r;
    for (int e = 0; e < NE; e++) {
        double p = k_p0[e], m = 0.0, v = 0.0, biggest = 0.0;
        for (int t = 1; t <= NSTEP; t++) {
            double g = k_grad[t - 1][e];
            double before = p;
            if (!adamw) g = g + wd * p;
            if (adamw) p = p * (1.0 - lr * wd);
            m = b1 * m + (1.0 - b1) * g;
            v = b2 * v + (1.0 - b2) * g * g;
            double bc1 = bias_correction ? 1.0 - pow(b1, t) : 1.0;
            double bc2 = bias_correction ? 1.0 - pow(b2, t) : 1.0;
            p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps);
            if (fabs(p - before) > biggest) biggest = fabs(p - before);
        }
        r.p[e] = p;
        r.max_update[e] = biggest;
    }
    return r;
}

/* torch.optim.SGD, one element, three steps:
 *   d = g + wd * p
 *   momentum:  buf = (t == 1) ? d : momentum * buf + (1 - dampening) * d
 *              d = nesterov ? d + momentum * buf : buf
 *   p = p - lr * d
 * Element 0 with lr 0.1, momentum 0.9, no decay, no dampening:
 *   t=1  buf=0.5     p=0.95
 *   t=2  buf=0.2     p=0.93
 *   t=3  buf=0.305   p=0.8995 */
static hand_result hand_sgd(float lr_f, float mom_f, float damp_f, float wd_f, int nesterov) {
    const double lr = lr_f, mom = mom_f, damp = damp_f, wd = wd_f;
    hand_result r;
    for (int e = 0; e < NE; e++) {
        double p = k_p0[e], buf = 0.0, biggest = 0.0;
        for (int t = 1; t <= NSTEP; t++) {
            double before = p;
            double d = k_grad[t - 1][e] + wd * p;
            if (mom != 0.0) {
                buf = (t == 1) ? d : mom * buf + (1.0 - damp) * d;
                d = nesterov ? d + mom * buf : buf;
            }
            p = p - lr * d;
            if (fabs(p - before) > biggest) biggest = fabs(p - before);
        }
        r.p[e] = p;
        r.max_update[e] = biggest;
    }
    return r;
}

static void expect_close(const char *what, const float *p, const hand_result *h) {
    for (int e = 0; e < NE; e++) {
        double tol = 3.0 * FLT_EPSILON * (fabs(h->p[e]) + 16.0 * h->max_update[e]);
        double err = fabs((double)p[e] - h->p[e]);
        CHECK(err <= tol, "%s: p[%d] = %.9g, by hand %.9g (err %.3g > tol %.3g)", what, e,
              (double)p[e], h->p[e], err, tol);
    }
}

/* ---- running the slots ---- */

typedef struct adam_run {
    float lr, wd, eps;
    int adamw, bias_correction;
    ds_dtype grad_t;   /* gradients stored as */
    float grad_scale;  /* stored gradients = grad * grad_scale, grad_mult = 1/grad_scale */
    ds_dtype lp_t;     /* param_lp type; DS_DTYPE_COUNT = none */
} adam_run;

static void run_adam(ds_backend *be, const adam_run *c, float p_out[NE], uint16_t lp_out[NE],
                     float lp32_out[NE]) {
    float p[NE], m[NE] = {0}, v[NE] = {0}, g32[NE];
    uint16_t g16[2 * NE]; /* 2x: -O3's -Warray-bounds follows ds_store_f32's dead F32 branch */
    memcpy(p, k_p0, sizeof p);
    for (int t = 1; t <= NSTEP; t++) {
        for (int e = 0; e < NE; e++) g32[e] = k_grad[t - 1][e] * c->grad_scale;
        const void *g = g32;
        if (c->grad_t != DS_F32) {
            for (int e = 0; e < NE; e++) ds_store_f32(g16, c->grad_t, e, g32[e]);
            g = g16;
        }
        ds_adam_hparams hp = {.lr = c->lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = c->eps,
                              .weight_decay = c->wd, .step = t, .adam_w_mode = c->adamw,
                              .bias_correction = c->bias_correction};
        void *lp = c->lp_t == DS_F32 ? (void *)lp32_out : c->lp_t == DS_DTYPE_COUNT ? NULL : lp_out;
        ds_status st = be->ops->adam(be, p, g, c->grad_t, 1.0f / c->grad_scale, m, v, NE, &hp, lp,
                                     c->lp_t);
        CHECK(st == DS_OK, "adam step %d failed: %s", t, ds_last_error());
    }
    memcpy(p_out, p, sizeof p);
}

static void test_adam(ds_backend *be) {
    const adam_run base = {0.1f, 0.0f, 1e-8f, 0, 1, DS_F32, 1.0f, DS_DTYPE_COUNT};
    float p[NE], ref[NE];
    uint16_t lp[NE];
    float lp32[NE];

    run_adam(be, &base, ref, lp, lp32);
    hand_result h = hand_adam(0.1f, 0.0f, 0, 1, 1e-8f);
    expect_close("adam", ref, &h);
    /* the literal values written out above, to pin the hand code itself */
    CHECK(fabs(h.p[0] - 0.8393233849) < 1e-9, "hand Adam element 0 = %.10f", h.p[0]);

    adam_run c = base;
    c.wd = 0.01f; /* Adam with L2: g += wd * p */
    run_adam(be, &c, p, lp, lp32);
    h = hand_adam(0.1f, 0.01f, 0, 1, 1e-8f);
    expect_close("adam L2 weight decay", p, &h);

    c.adamw = 1; /* AdamW: p *= 1 - lr * wd before the moments */
    run_adam(be, &c, p, lp, lp32);
    h = hand_adam(0.1f, 0.01f, 1, 1, 1e-8f);
    expect_close("adamw", p, &h);
    /* element 1 (zero gradients for two steps) moved by the decay alone first */
    CHECK(p[1] != ref[1], "adamw decay had no effect on element 1");

    /* a large eps: it is added after the bias correction of sqrt(v)
     * (torch), not before (which would give 0.5 + 0.0316 instead of 0.501
     * for element 0's first denominator) */
    c = base;
    c.eps = 1e-3f;
    run_adam(be, &c, p, lp, lp32);
    h = hand_adam(0.1f, 0.0f, 0, 1, 1e-3f);
    expect_close("adam eps 1e-3", p, &h);

    c = base;
    c.bias_correction = 0;
    run_adam(be, &c, p, lp, lp32);
    h = hand_adam(0.1f, 0.0f, 0, 0, 1e-8f);
    expect_close("adam without bias correction", p, &h);

    /* gradients stored x1024 (a loss scale) with grad_mult 1/1024: same bits */
    c = base;
    c.grad_scale = 1024.0f;
    run_adam(be, &c, p, lp, lp32);
    CHECK(memcmp(p, ref, sizeof p) == 0, "grad_mult 1/1024 on x1024 gradients changed the result");

    /* fp16 / bf16 gradients (values exact in both): same bits */
    c = base;
    c.grad_t = DS_F16;
    run_adam(be, &c, p, lp, lp32);
    CHECK(memcmp(p, ref, sizeof p) == 0, "fp16 gradients changed the result");
    c.grad_t = DS_BF16;
    c.grad_scale = 1024.0f; /* and scaled, in bf16 */
    run_adam(be, &c, p, lp, lp32);
    CHECK(memcmp(p, ref, sizeof p) == 0, "bf16 gradients x1024 changed the result");

    /* working copies: param_lp = the master rounded to the low precision */
    const ds_dtype lps[3] = {DS_F16, DS_BF16, DS_F32};
    for (int i = 0; i < 3; i++) {
        c = base;
        c.lp_t = lps[i];
        memset(lp, 0, sizeof lp);
        memset(lp32, 0, sizeof lp32);
        run_adam(be, &c, p, lp, lp32);
        CHECK(memcmp(p, ref, sizeof p) == 0, "param_lp %s changed the master",
              ds_dtype_name(lps[i]));
        for (int e = 0; e < NE; e++) {
            float got = lps[i] == DS_F32 ? lp32[e] : ds_load_f32(lp, lps[i], e);
            float want = lps[i] == DS_F16 ? ds_f16_to_f32(ds_f32_to_f16(p[e]))
                         : lps[i] == DS_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(p[e]))
                                             : p[e];
            CHECK(got == want, "param_lp %s[%d] = %.9g, want %.9g", ds_dtype_name(lps[i]), e,
                  (double)got, (double)want);
            /* and within half an lp ulp (2^-11 fp16, 2^-8 bf16 relative) of the hand value */
            double rel = lps[i] == DS_F16 ? 1.0 / 2048 : lps[i] == DS_BF16 ? 1.0 / 256 : 1e-6;
            h = hand_adam(0.1f, 0.0f, 0, 1, 1e-8f);
            CHECK(fabs(got - h.p[e]) <= rel * fabs(h.p[e]), "param_lp %s[%d] = %.9g far from %.9g",
                  ds_dtype_name(lps[i]), e, (double)got, h.p[e]);
        }
    }

    /* bad hyper-parameters */
    float m[NE] = {0}, v[NE] = {0};
    memcpy(p, k_p0, sizeof p);
    ds_adam_hparams hp = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0,
                          .adam_w_mode = true, .bias_correction = true};
    CHECK(be->ops->adam(be, p, k_grad[0], DS_F32, 1.0f, m, v, NE, &hp, NULL, DS_F32) ==
              DS_ERR_INVALID_ARG,
          "step 0 with bias correction accepted");
    CHECK(strstr(ds_last_error(), "step") != NULL, "message: %s", ds_last_error());
    hp.step = 1;
    hp.beta1 = 1.0f;
    CHECK(be->ops->adam(be, p, k_grad[0], DS_F32, 1.0f, m, v, NE, &hp, NULL, DS_F32) ==
              DS_ERR_INVALID_ARG,
          "beta1 = 1 accepted");
    hp.beta1 = 0.9f;
    CHECK(be->ops->adam(be, p, k_grad[0], DS_I32, 1.0f, m, v, NE, &hp, NULL, DS_F32) ==
              DS_ERR_INVALID_ARG,
          "int32 gradients accepted");
    CHECK(be->ops->adam(be, p, k_grad[0], DS_F32, 1.0f, NULL, v, NE, &hp, NULL, DS_F32) ==
              DS_ERR_INVALID_ARG,
          "NULL m accepted");
    CHECK(memcmp(p, k_p0, sizeof p) == 0, "a rejected call modified the parameters");
    ds_clear_error();
}

static void run_sgd(ds_backend *be, float lr, float mom, float damp, float wd, int nesterov,
                    ds_dtype grad_t, float p_out[NE]) {
    float p[NE], buf[NE] = {0}, g32[NE];
    uint16_t g16[2 * NE]; /* 2x: -O3's -Warray-bounds follows ds_store_f32's dead F32 branch */
    memcpy(p, k_p0, sizeof p);
    for (int t = 1; t <= NSTEP; t++) {
        for (int e = 0; e < NE; e++) g32[e] = k_grad[t - 1][e];
        const void *g = g32;
        if (grad_t != DS_F32) {
            for (int e = 0; e < NE; e++) ds_store_f32(g16, grad_t, e, g32[e]);
            g = g16;
        }
        ds_sgd_hparams hp = {.lr = lr, .momentum = mom, .dampening = damp, .weight_decay = wd,
                             .nesterov = nesterov, .first_step = t == 1};
        ds_status st = be->ops->sgd(be, p, g, grad_t, 1.0f, mom != 0.0f ? buf : NULL, NE, &hp,
                                    NULL, DS_F32);
        CHECK(st == DS_OK, "sgd step %d failed: %s", t, ds_last_error());
    }
    memcpy(p_out, p, sizeof p);
}

static void test_sgd(ds_backend *be) {
    float p[NE], ref[NE];
    hand_result h;
    run_sgd(be, 0.1f, 0.0f, 0.0f, 0.0f, 0, DS_F32, p);
    h = hand_sgd(0.1f, 0.0f, 0.0f, 0.0f, 0);
    expect_close("sgd", p, &h);
    run_sgd(be, 0.1f, 0.9f, 0.0f, 0.0f, 0, DS_F32, ref);
    h = hand_sgd(0.1f, 0.9f, 0.0f, 0.0f, 0);
    expect_close("sgd momentum", ref, &h);
    /* 0.8995 with decimal 0.1 and 0.9; their float roundings move it by 1.2e-9 */
    CHECK(fabs(h.p[0] - 0.8995) < 2e-9, "hand SGD element 0 = %.12f", h.p[0]);
    run_sgd(be, 0.1f, 0.9f, 0.1f, 0.0f, 0, DS_F32, p);
    h = hand_sgd(0.1f, 0.9f, 0.1f, 0.0f, 0);
    expect_close("sgd momentum dampening", p, &h);
    run_sgd(be, 0.1f, 0.9f, 0.0f, 0.0f, 1, DS_F32, p);
    h = hand_sgd(0.1f, 0.9f, 0.0f, 0.0f, 1);
    expect_close("sgd nesterov", p, &h);
    run_sgd(be, 0.1f, 0.9f, 0.0f, 0.01f, 1, DS_F32, p);
    h = hand_sgd(0.1f, 0.9f, 0.0f, 0.01f, 1);
    expect_close("sgd nesterov weight decay", p, &h);
    run_sgd(be, 0.05f, 0.0f, 0.0f, 0.01f, 0, DS_F32, p);
    h = hand_sgd(0.05f, 0.0f, 0.0f, 0.01f, 0);
    expect_close("sgd weight decay", p, &h);
    run_sgd(be, 0.1f, 0.9f, 0.0f, 0.0f, 0, DS_BF16, p);
    CHECK(memcmp(p, ref, sizeof p) == 0, "bf16 gradients changed sgd momentum");

    /* param_lp output and grad_mult */
    float q[NE], buf[NE] = {0}, g2[NE];
    uint16_t lp[NE];
    memcpy(q, k_p0, sizeof q);
    for (int e = 0; e < NE; e++) g2[e] = k_grad[0][e] * 4.0f;
    ds_sgd_hparams hp = {.lr = 0.1f, .momentum = 0.9f, .first_step = true};
    CHECK(be->ops->sgd(be, q, g2, DS_F32, 0.25f, buf, NE, &hp, lp, DS_F16) == DS_OK, "sgd lp");
    /* step 1 with momentum: buf = g, p = p - lr g: 1 - 0.1 * 0.5 = 0.95 */
    CHECK(fabsf(q[0] - 0.95f) <= FLT_EPSILON, "sgd step 1 element 0 = %.9g, want 0.95",
          (double)q[0]);
    for (int e = 0; e < NE; e++)
        CHECK(lp[e] == ds_f32_to_f16(q[e]), "sgd param_lp[%d] = %04x, want %04x", e, lp[e],
              ds_f32_to_f16(q[e]));

    /* nesterov needs momentum and no dampening; momentum needs its buffer */
    hp.nesterov = true;
    hp.dampening = 0.5f;
    CHECK(be->ops->sgd(be, q, g2, DS_F32, 1.0f, buf, NE, &hp, NULL, DS_F32) == DS_ERR_INVALID_ARG,
          "nesterov with dampening accepted");
    hp.nesterov = false;
    hp.dampening = 0.0f;
    CHECK(be->ops->sgd(be, q, g2, DS_F32, 1.0f, NULL, NE, &hp, NULL, DS_F32) == DS_ERR_INVALID_ARG,
          "momentum without a buffer accepted");
    ds_clear_error();
}

/* Large n runs in parallel: same bits at 1 and 2 threads. */
static void test_threads(ds_backend *be1, ds_backend *be2) {
    const size_t n = 200003;
    float *p[2], *m[2], *v[2], *g = malloc(n * sizeof *g);
    for (int k = 0; k < 2; k++) {
        p[k] = malloc(n * sizeof(float));
        m[k] = calloc(n, sizeof(float));
        v[k] = calloc(n, sizeof(float));
    }
    for (size_t i = 0; i < n; i++) {
        p[0][i] = p[1][i] = sinf((float)i);
        g[i] = cosf((float)i * 0.37f);
    }
    ds_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .weight_decay = 0.01f, .adam_w_mode = true, .bias_correction = true};
    for (int t = 1; t <= 2; t++) {
        hp.step = t;
        be1->ops->adam(be1, p[0], g, DS_F32, 0.5f, m[0], v[0], n, &hp, NULL, DS_F32);
        be2->ops->adam(be2, p[1], g, DS_F32, 0.5f, m[1], v[1], n, &hp, NULL, DS_F32);
    }
    CHECK(memcmp(p[0], p[1], n * 4) == 0 && memcmp(v[0], v[1], n * 4) == 0,
          "adam differs between 1 and 2 threads");
    /* and is, bit for bit, the element function of math.h (which the CUDA
     * kernel runs) applied one element at a time, whatever the vector code */
    float *q = malloc(n * sizeof *q), *qm = calloc(n, sizeof *qm), *qv = calloc(n, sizeof *qv);
    for (size_t i = 0; i < n; i++) q[i] = sinf((float)i);
    for (int t = 1; t <= 2; t++) {
        ds_adam_coef c = ds_adam_coef_make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t, true, true, 0.5f);
        for (size_t i = 0; i < n; i++) ds_adam_update(&q[i], &qm[i], &qv[i], g[i], &c);
    }
    CHECK(memcmp(q, p[0], n * 4) == 0 && memcmp(qm, m[0], n * 4) == 0 &&
              memcmp(qv, v[0], n * 4) == 0,
          "adam slot differs from the scalar ds_adam_update");
    /* SGD with nesterov and bf16 gradients, against ds_sgd_update */
    uint16_t *gb = malloc(n * sizeof *gb);
    for (size_t i = 0; i < n; i++) {
        gb[i] = ds_f32_to_bf16(g[i]);
        p[0][i] = q[i] = sinf((float)i);
    }
    ds_sgd_hparams sh = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true};
    for (int t = 1; t <= 2; t++) {
        sh.first_step = t == 1;
        be2->ops->sgd(be2, p[0], gb, DS_BF16, 2.0f, m[0], n, &sh, NULL, DS_F32);
        ds_sgd_coef c = ds_sgd_coef_make(0.01f, 0.9f, 0.0f, 1e-4f, true, t == 1, 2.0f);
        for (size_t i = 0; i < n; i++) ds_sgd_update(&q[i], &qm[i], ds_bf16_to_f32(gb[i]), &c);
    }
    CHECK(memcmp(q, p[0], n * 4) == 0 && memcmp(qm, m[0], n * 4) == 0,
          "sgd slot differs from the scalar ds_sgd_update");
    free(q);
    free(qm);
    free(qv);
    free(gb);
    for (int k = 0; k < 2; k++) {
        free(p[k]);
        free(m[k]);
        free(v[k]);
    }
    free(g);
}

/* The one-loop bf16 AdamW (cpu_elementwise.c adam_run_lp) against its
 * definition: the gradients' fp32 values, no param_lp, then each p rounded
 * by ds_f32_to_bf16; p, m, v and the working copy bit for bit. n spans two
 * chunks and a tail; p holds a NaN, values halfway between bf16 neighbours
 * and random ones. */
static void test_adam_lp_loop(ds_backend *be, ds_dtype grad_t) {
    enum { N = 5003, STEPS = 2 };
    float *p = malloc(N * 4), *m = calloc(N, 4), *v = calloc(N, 4), *g32 = malloc(N * 4);
    float *p2 = malloc(N * 4), *m2 = calloc(N, 4), *v2 = calloc(N, 4);
    uint16_t *g16 = malloc(N * 2), *lp = malloc(N * 2);
    if (!p || !m || !v || !g32 || !p2 || !m2 || !v2 || !g16 || !lp) TEST_DIE("out of memory");
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((int64_t)(x >> 40) - (1 << 23)) / (1 << 22);
        if (i % 7 == 3) /* halfway: the low 16 bits 0x8000 */
            p[i] = ds_bits_f32((ds_f32_bits(p[i]) & 0xffff0000u) | 0x8000u);
    }
    p[17] = NAN;
    memcpy(p2, p, N * 4);
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            g32[i] = (float)((int64_t)(x >> 44) - (1 << 19)) / (1 << 20);
            if (grad_t == DS_BF16) {
                g16[i] = ds_f32_to_bf16(g32[i]);
                g32[i] = ds_bf16_to_f32(g16[i]);
            }
        }
        ds_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.01f, .step = t, .adam_w_mode = true,
                              .bias_correction = true};
        const void *g = grad_t == DS_BF16 ? (const void *)g16 : (const void *)g32;
        CHECK_OK(be->ops->adam(be, p, g, grad_t, 0.5f, m, v, N, &hp, lp, DS_BF16));
        CHECK_OK(be->ops->adam(be, p2, g32, DS_F32, 0.5f, m2, v2, N, &hp, NULL, DS_F32));
    }
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += memcmp(&p[i], &p2[i], 4) || memcmp(&m[i], &m2[i], 4) ||
               memcmp(&v[i], &v2[i], 4) || lp[i] != ds_f32_to_bf16(p2[i]);
    CHECK(bad == 0, "bf16 working copy, %s gradients, %d threads: %d of %d elements differ from "
          "fp32 gradients and a separate rounding", ds_dtype_name(grad_t), be->num_threads, bad,
          (int)N);
    free(p), free(m), free(v), free(g32), free(p2), free(m2), free(v2), free(g16), free(lp);
}

int main(void) {
    ds_backend *be[2] = {test_cpu_backend(1, NULL), test_cpu_backend(2, NULL)};
    test_adam(be[0]);
    test_sgd(be[0]);
    test_threads(be[0], be[1]);
    for (int t = 0; t < 2; t++) {
        test_adam_lp_loop(be[t], DS_BF16);
        test_adam_lp_loop(be[t], DS_F32);
    }
    ds_backend_destroy(be[0]);
    ds_backend_destroy(be[1]);
    return test_finish("test_backend_optim");
}
