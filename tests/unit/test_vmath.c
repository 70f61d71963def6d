/* Accuracy of the vectorised element math of the model kernels (nn_math.h:
 * ds_expf, the erf of GELU, both GELUs and their derivatives) against libm in
 * double, over a dense sweep, under every instruction-set variant of the cpu
 * kernels this CPU runs (engine/backend/cpu/cpu_isa.h: ds_cpu_vmath runs the
 * loops as each variant compiled them). The variants must also agree bit for
 * bit (their arithmetic is the same IEEE operations, cpu_isa.h).
 *
 * The sweep: 0 and 2^20 floats of each sign evenly spaced by bit pattern
 * (every ~250th float) from 1e-8 in magnitude to the end of the range, so
 * every binade gets ~30,000 points.
 *
 * Errors are measured against the exact value r (double libm), in ulps of r
 * (ulp(r) = 2^(exponent(r) - 23), 2^-149 below FLT_MIN), and each function
 * is held to a bound of the form
 *     |y - r| <= (U + G g(x)) ulp(r) + A + B |x|
 * whose terms come from how it is computed (measured maxima, in the run that
 * set them, in brackets; the test prints them):
 *
 *   ds_expf          [-87.3, 88]  U = 2: Cephes' polynomial after an exact
 *                                 Cody-Waite reduction [0.99 ulp]
 *   erf (A&S 7.1.26) [-6, 6]      U = 1, A = 5.5e-7: the formula is within
 *                                 1.5e-7 of erf, and 1 - t P(t) e rounds near
 *                                 1 [5.2e-7 at x = 0.035]. In ulps this is
 *                                 large near 0 (erf(x) ~ 1.13 x): it is
 *                                 PyTorch's cpu erf, kept on purpose so GELU
 *                                 rounds as PyTorch's does
 *   gelu (erf form)  [-20, 20]    U = 2, B = 2.75e-7: 0.5 x (1 + erf) carries
 *                                 erf's absolute error times 0.5 |x|; for
 *                                 x < 0, 1 + erf cancels (as in PyTorch)
 *                                 [9.5 ulp at x = -0.32, within the bound]
 *   gelu' (erf form) [-20, 20]    U = 2, A = B = 3e-7: the same cancellation
 *                                 in Phi
 *   gelu_tanh        [-20, 20]    U = 4, G = 3, g = |2u|, A = 1e-27:
 *                                 x / (1 + e^(-2u)) with ds_expf; the rounding
 *                                 of the argument 2u is amplified by |2u| in
 *                                 e^(-2u), as in any float evaluation [2.75
 *                                 ulp for x >= -1, 30 ulp at x = -4.9 where
 *                                 |2u| = 16, 71 at x = -6.7, |2u| = 32]; below x ~ -9.3 the result is 0
 *                                 (e^(-2u) would overflow; the exact value is
 *                                 below 1e-36)
 *   gelu_tanh'       [-20, 20]    U = 2, A = 4e-7: s + x s (1 - s) 2u' adds
 *                                 terms of opposite sign (zero near x = -0.75)
 *
 * These bounds are what the kernels promise (nn_math.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cpu/cpu_isa.h"
#include "engine/core/dtype.h"
#include "tests/unit/test_util.h"

/* ulp of the float nearest r */
static double ulp_of(double r) {
    double a = fabs(r);
    if (a < (double)FLT_MIN) return ldexp(1.0, -149);
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 24);
}

/* The dense sweep of [lo, hi]: 0 and 2^20 floats of both signs, evenly
 * spaced by bit pattern, with magnitude in [1e-8, max(|lo|, |hi|)], that lie
 * in the range. */
static size_t sweep(float lo, float hi, float *x, size_t cap) {
    size_t n = 0;
    uint32_t u0 = ds_f32_bits(1e-8f), u1 = ds_f32_bits(fmaxf(fabsf(lo), fabsf(hi)));
    uint32_t stride = (u1 - u0) >> 20;
    if (stride < 1) stride = 1;
    x[n++] = 0.0f;
    for (uint32_t u = u0; u <= u1 && n + 2 <= cap; u += stride) {
        float v = ds_bits_f32(u);
        if (v <= hi) x[n++] = v;
        if (-v >= lo) x[n++] = -v;
    }
    return n;
}

static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double ref_gelu_grad(double x) {
    return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}
static double ref_u2(double x) { /* 2u of the tanh GELU */
    return 2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
}
static double ref_gelu_tanh(double x) { return x / (1.0 + exp(-ref_u2(x))); }
static double ref_gelu_tanh_grad(double x) {
    double e = exp(-ref_u2(x)), s = 1.0 / (1.0 + e);
    double du2 = 2.0 * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
    return s + x * s * (e * s) * du2;
}

static double abs_u2(double x) { return fabs(ref_u2(x)); }

typedef struct case_t {
    const char *name;
    ds_vmath_fn fn;
    float lo, hi;
    double (*ref)(double);
    double U, G;         /* ulps, and ulps per unit of g(x) */
    double (*g)(double); /* NULL: 0 */
    double A, B;         /* absolute, and absolute per unit of |x| */
} case_t;

static const case_t k_cases[] = {
    {"expf", DS_VMATH_EXP, -87.3f, 88.0f, exp, 2, 0, NULL, 0, 0},
    {"erf", DS_VMATH_ERF, -6.0f, 6.0f, erf, 1, 0, NULL, 5.5e-7, 0},
    {"gelu", DS_VMATH_GELU, -20.0f, 20.0f, ref_gelu, 2, 0, NULL, 0, 2.75e-7},
    {"gelu_grad", DS_VMATH_GELU_GRAD, -20.0f, 20.0f, ref_gelu_grad, 2, 0, NULL, 3e-7, 3e-7},
    {"gelu_tanh", DS_VMATH_GELU_TANH, -20.0f, 20.0f, ref_gelu_tanh, 4, 3, abs_u2, 1e-27, 0},
    {"gelu_tanh_grad", DS_VMATH_GELU_TANH_GRAD, -20.0f, 20.0f, ref_gelu_tanh_grad, 2, 0, NULL,
     4e-7, 0},
};
#define NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

int main(void) {
    size_t cap = (size_t)1 << 22;
    float *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    float *first = malloc(cap * sizeof *first);
    if (!x || !y || !first) TEST_DIE("out of memory");
    for (int c = 0; c < NCASES; c++) {
        const case_t *k = &k_cases[c];
        size_t n = sweep(k->lo, k->hi, x, cap);
        const char *first_isa = NULL;
        for (int v = 0; ds_cpu_isa_names[v]; v++) {
            const ds_cpu_variant *var = ds_cpu_variant_find(ds_cpu_isa_names[v]);
            if (!var) {
                if (c == 0) printf("test_vmath: %s: not run by this CPU, skipped\n",
                                   ds_cpu_isa_names[v]);
                continue;
            }
            var->vmath(k->fn, y, x, n);
            double worst_ratio = 0, worst_ulp = 0;
            float at_ratio = 0, at_ulp = 0;
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) {
                double xd = (double)x[i], r = k->ref(xd), err = fabs((double)y[i] - r);
                double ulps = err / ulp_of(r);
                double lim = (k->U + (k->g ? k->G * k->g(xd) : 0.0)) * ulp_of(r) + k->A +
                             k->B * fabs(xd);
                if (ulps > worst_ulp) worst_ulp = ulps, at_ulp = x[i];
                if (err / lim > worst_ratio) worst_ratio = err / lim, at_ratio = x[i];
                if (!(err <= lim)) bad++;
            }
            printf("test_vmath: %-6s %-14s %zu points in [%g, %g]: max %.3g ulp (x = %g), "
                   "max %.2f of the bound (x = %g)\n",
                   var->isa, k->name, n, (double)k->lo, (double)k->hi, worst_ulp, (double)at_ulp,
                   worst_ratio, (double)at_ratio);
            CHECK(bad == 0, "%s under %s: %zu of %zu points outside the bound", k->name, var->isa,
                  bad, n);
            if (!first_isa) {
                first_isa = var->isa;
                memcpy(first, y, n * sizeof *y);
            } else {
                CHECK(memcmp(first, y, n * sizeof *y) == 0, "%s: %s and %s differ in bits",
                      k->name, first_isa, var->isa);
            }
        }
    }
    free(x), free(y), free(first);
    return test_finish("test_vmath");
}
