/* Element math of the model kernels, written once.
 *
 * Every function here is DS_HD (engine/core/dtype.h): `static inline` in C,
 * `__host__ __device__` under nvcc, so the cpu loops (engine/backend/cpu/nn_*.c)
 * and the CUDA kernels (engine/backend/cuda/nn_*.cu) run the same arithmetic
 * and the cpu tests check what the GPU computes. The row helpers at the end
 * (a whole layer-norm or softmax row in one thread) are what the cpu loops
 * use; the CUDA kernels split a row over a warp and call the element parts.
 *
 * Formulas follow PyTorch: GELU is the erf form (nn.GELU(), BERT's "gelu"),
 * layer norm uses the biased variance, ReLU's derivative at 0 is 0. */
#ifndef DS_BACKEND_NN_MATH_H
#define DS_BACKEND_NN_MATH_H

#include <math.h>
#include <stdint.h>

#include "engine/backend/math.h"
#include "engine/core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation after a linear layer. */
typedef enum ds_act {
    DS_ACT_NONE = 0,
    DS_ACT_RELU,
    DS_ACT_GELU, /* 0.5 x (1 + erf(x / sqrt 2)) */
    DS_ACT_TANH,
} ds_act;

#define DS_NN_INV_SQRT2 0.70710678118654752440f
#define DS_NN_INV_SQRT_2PI 0.39894228040143267794f

/* ---- activations: value and derivative at the pre-activation x ---- */

DS_HD float ds_gelu(float x) { return 0.5f * x * (1.0f + erff(x * DS_NN_INV_SQRT2)); }

/* d/dx [x Phi(x)] = Phi(x) + x phi(x) */
DS_HD float ds_gelu_grad(float x) {
    float cdf = 0.5f * (1.0f + erff(x * DS_NN_INV_SQRT2));
    float pdf = DS_NN_INV_SQRT_2PI * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

DS_HD float ds_relu(float x) { return x > 0.0f ? x : 0.0f; }
DS_HD float ds_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

DS_HD float ds_tanh_grad(float x) {
    float t = tanhf(x);
    return 1.0f - t * t;
}

/* Callers switch on `act` outside their loops and call these with a constant,
 * so the switch folds away after inlining (no per-element dispatch). */
DS_HD float ds_act_fwd(ds_act act, float x) {
    switch (act) {
    case DS_ACT_RELU: return ds_relu(x);
    case DS_ACT_GELU: return ds_gelu(x);
    case DS_ACT_TANH: return tanhf(x);
    default: return x;
    }
}

DS_HD float ds_act_grad(ds_act act, float x) {
    switch (act) {
    case DS_ACT_RELU: return ds_relu_grad(x);
    case DS_ACT_GELU: return ds_gelu_grad(x);
    case DS_ACT_TANH: return ds_tanh_grad(x);
    default: return 1.0f;
    }
}

/* ---- dropout ----
 * Element j of a dropout stream (seed, offset) uses the uniform
 * u = ds_rng_uniform_at(seed, offset + j) of engine/backend/math.h: kept when
 * u >= p, then scaled by inv_keep = 1 / (1 - p). */

/* The multiplier (0 or inv_keep) for the uniform word w. */
DS_HD float ds_dropout_mult(uint32_t w, float p, float inv_keep) {
    return ds_rng_bits_to_unit(w) >= p ? inv_keep : 0.0f;
}

/* Multipliers of the n consecutive elements starting at stream index j0,
 * one Philox block per 4 elements (the values of ds_rng_uniform_at). */
DS_HD void ds_dropout_mults(float *m, uint64_t seed, uint64_t j0, int n, float p,
                            float inv_keep) {
    int i = 0;
    uint32_t k = (uint32_t)(j0 & 3u);
    uint64_t blk = j0 >> 2;
    while (i < n) {
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk++);
        for (; k < 4u && i < n; k++, i++) m[i] = ds_dropout_mult(w.v[k], p, inv_keep);
        k = 0;
    }
}

/* ---- layer norm ---- */

/* xhat of one element. */
DS_HD float ds_ln_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }

/* Input gradient of one element given the row means
 * a = mean_j(dy_j g_j) and c = mean_j(dy_j g_j xhat_j):
 * dx = rstd * (dy g - a - xhat c). */
DS_HD float ds_ln_dx(float dy, float g, float xhat, float rstd, float a, float c) {
    return rstd * (dy * g - a - xhat * c);
}

/* Row statistics, two passes over a row that sits in cache (a one-pass
 * E[x^2] - E[x]^2 loses the variance to cancellation when |mean| >> std). */
DS_HD void ds_ln_row_stats(const float *x, int h, float eps, float *mean, float *rstd) {
    float s = 0.0f;
    for (int i = 0; i < h; i++) s += x[i];
    float m = s / (float)h;
    float v = 0.0f;
    for (int i = 0; i < h; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)h + eps);
}

DS_HD void ds_ln_row_fwd(float *y, const float *x, const float *gamma, const float *beta, int h,
                         float mean, float rstd) {
    for (int i = 0; i < h; i++) y[i] = ds_ln_xhat(x[i], mean, rstd) * gamma[i] + beta[i];
}

/* dx (= or +=) for one row; dx may alias dy when !accumulate (each element of
 * dy is read before its dx is written). */
DS_HD void ds_ln_row_bwd(float *dx, const float *dy, const float *x, const float *gamma, int h,
                         float mean, float rstd, int accumulate) {
    float a = 0.0f, c = 0.0f;
    for (int i = 0; i < h; i++) {
        float dg = dy[i] * gamma[i];
        a += dg;
        c += dg * ds_ln_xhat(x[i], mean, rstd);
    }
    a /= (float)h;
    c /= (float)h;
    if (accumulate) {
        for (int i = 0; i < h; i++)
            dx[i] += ds_ln_dx(dy[i], gamma[i], ds_ln_xhat(x[i], mean, rstd), rstd, a, c);
    } else {
        for (int i = 0; i < h; i++)
            dx[i] = ds_ln_dx(dy[i], gamma[i], ds_ln_xhat(x[i], mean, rstd), rstd, a, c);
    }
}

/* ---- softmax ---- */

/* Masked, scaled softmax of one row of n scores: masked entries (mask[j] ==
 * 0; mask may be NULL) get exactly 0; a row with no unmasked entry is all
 * zeros. p may alias s. */
DS_HD void ds_softmax_row(float *p, const float *s, const float *mask, int n, float scale) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        if (!mask || mask[j] != 0.0f) mx = fmaxf(mx, s[j] * scale);
    if (mx == -INFINITY) { /* no real key */
        for (int j = 0; j < n; j++) p[j] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        float e = (!mask || mask[j] != 0.0f) ? expf(s[j] * scale - mx) : 0.0f;
        p[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) p[j] *= inv;
}

/* One element of the softmax input gradient: scale * p (dp - sum_j dp_j p_j). */
DS_HD float ds_softmax_ds(float p, float dp, float dot, float scale) {
    return scale * p * (dp - dot);
}

/* ---- cross-entropy ---- */

/* log sum_j exp(z_j), stable. */
DS_HD float ds_logsumexp_row(const float *z, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = fmaxf(mx, z[j]);
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += expf(z[j] - mx);
    return mx + logf(s);
}

/* d(w * nll)/dz_j = w (p_j - [j == label]), times the loss scale / wsum. */
DS_HD float ds_xent_dlogit(float p, int is_label, float coef) {
    return coef * (p - (is_label ? 1.0f : 0.0f));
}

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_NN_MATH_H */
