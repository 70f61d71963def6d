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
 * GELU_TANH the tanh approximation (GPT-2's "gelu_new", nn.GELU("tanh")),
 * layer norm uses the biased variance, ReLU's derivative at 0 is 0. The
 * exponentials of both GELUs and softmax use ds_expf (below), not libm, so
 * the cpu loops vectorise. */
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
    DS_ACT_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GPT-2's "gelu_new" */
    DS_ACT_COUNT      /* not an activation: one past the last (argument checks) */
} ds_act;

/* Vectorise the next loop (OpenMP simd) in the cpu build; nothing in CUDA,
 * where the row helpers below are not used. There is no simd sum on
 * purpose: its order would follow the vector width; sums use the fixed lanes
 * below (DS_LANES), so every instruction-set variant gives the same bits.
 * DS_SIMD_MAX is exact in any order. */
#if defined(_OPENMP) && !defined(__CUDACC__)
#define DS_SIMD _Pragma("omp simd")
#define DS_SIMD_MAX(v) _Pragma(DS_NN_STR(omp simd reduction(max : v)))
#else
#define DS_SIMD
#define DS_SIMD_MAX(v)
#endif
#define DS_NN_STR(x) #x

/* ---- fixed-order sums ----
 * An `omp simd reduction(+)` adds in an order that depends on the vector
 * width the compiler picked, so the avx512, avx2 and scalar builds of the cpu
 * kernels (engine/backend/cpu/cpu_isa.h) would round a row's sum differently
 * and training would depend on the host. The cpu row sums therefore go into
 * DS_LANES = 16 lanes instead: lane k takes elements k, k + 16, k + 32, ...
 * in order, ds_lanes_sum adds the lanes by a fixed tree, and the last n % 16
 * elements are added in order after it. Any vector width that divides 16
 * computes exactly this, and the loop over the 16 lanes still vectorises. */
#define DS_LANES 16

DS_HD float ds_lanes_sum(const float *a) {
    float s8[8], s4[4];
    for (int k = 0; k < 8; k++) s8[k] = a[k] + a[k + 8];
    for (int k = 0; k < 4; k++) s4[k] = s8[k] + s8[k + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* The maximum of DS_LANES lanes by the tree lm[k] = lm[k + w] > lm[k] ?
 * lm[k + w] : lm[k] for w = 8, 4, 2, 1. The vector variants of the cpu
 * kernels take it in registers (max(a, b) is a > b ? a : b in SSE / AVX
 * too, so the same element wins every tie, +0 / -0 included): gcc compiled
 * the loop to 15 dependent scalar maxss through the stack, about 12% of the
 * softmax forward's samples in the BERT-mini step; bench_kernels' masked
 * softmax + dropout forward 2.35-2.40 -> 2.25-2.31 ms (bench/RESULTS.md,
 * stop 30). */
#if defined(__AVX__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif
DS_HD float ds_lanes_max(const float *lm) {
#if defined(__AVX__) && !defined(__CUDACC__)
    __m256 m8 = _mm256_max_ps(_mm256_loadu_ps(lm + 8), _mm256_loadu_ps(lm));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m8, 1), _mm256_castps256_ps128(m8));
    __m128 m2 = _mm_max_ps(_mm_movehl_ps(m4, m4), m4);
    return _mm_cvtss_f32(_mm_max_ss(_mm_shuffle_ps(m2, m2, 1), m2));
#else
    float t[DS_LANES];
    for (int k = 0; k < DS_LANES; k++) t[k] = lm[k];
    for (int w = DS_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) t[k] = t[k + w] > t[k] ? t[k + w] : t[k];
    return t[0];
#endif
}

/* The whole-lane part of a row of n: the first ds_lanes_end(n) elements go
 * through the lanes, the rest in order. */
DS_HD int ds_lanes_end(int n) { return n - n % DS_LANES; }

#define DS_NN_INV_SQRT2 0.70710678118654752440f
#define DS_NN_INV_SQRT_2PI 0.39894228040143267794f

/* ---- exp and erf without libm ----
 * The loops over millions of GELU / softmax elements must vectorise, and a
 * libm call stops the vectoriser (gcc only maps expf to libmvec under
 * -ffast-math). These are branch-free and fmaf-based; their accuracy against
 * libm in double, under every instruction-set variant of the cpu kernels, is
 * swept densely by tests/unit/test_vmath.c, which states each bound and why:
 * exp within 2 ulp (1 measured), erf within 5.5e-7 absolute, GELU within
 * 2 ulp + 2.75e-7 |x|, the tanh GELU within (4 + 3 |2u|) ulp. */

/* e^x for x <= 88 (larger x is clamped to 88); x < -87.33 gives 0 (the
 * result would be subnormal). Cephes' expf: x = n ln2 + r with a two-part
 * (Cody-Waite) ln2 so r is exact, |r| <= ln2/2, e^r by a degree-7
 * polynomial, then 2^n through the exponent bits. Within 2 ulp. */
DS_HD float ds_expf(float x) {
    /* comparisons, not fminf/fmaxf: those do not vectorise (NaN rules), and
     * these let a NaN through to the result */
    float xc = x > 88.0f ? 88.0f : x;
    xc = xc < -87.33f ? -87.33f : xc;
    /* round to nearest integer: adding 1.5 * 2^23 drops the fraction */
    float n = fmaf(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
    float r = fmaf(n, -0.693359375f, xc);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r) + 1.0f;
    float scale = ds_bits_f32((uint32_t)((int32_t)n + 127) << 23); /* n in [-126, 127] */
    return x < -87.33f ? 0.0f : p * scale;
}

/* erf(z) given e = exp(-z^2): Abramowitz & Stegun 7.1.26,
 * erf(|z|) = 1 - t P(t) e with t = 1 / (1 + 0.3275911 |z|): the formula is
 * within 1.5e-7, its float evaluation within ~1e-6 absolute (near z = 0 the
 * two terms of 1 - t P e cancel). This is the erf of PyTorch's vectorised
 * cpu kernels (Vectorized<float>::erf), so GELU here rounds as PyTorch's does
 * on cpu; GELU multiplies the error by 0.5 |x|, a few eps relative. */
DS_HD float ds_erf_with_exp(float z, float e) {
    float a = fabsf(z);
    float t = 1.0f / fmaf(0.3275911f, a, 1.0f);
    float poly = fmaf(1.061405429f, t, -1.453152027f);
    poly = fmaf(poly, t, 1.421413741f);
    poly = fmaf(poly, t, -0.284496736f);
    poly = fmaf(poly, t, 0.254829592f);
    return copysignf(fmaf(-(poly * t), e, 1.0f), z);
}

/* ---- activations: value and derivative at the pre-activation x ---- */

/* GELU, erf form: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). */
DS_HD float ds_gelu(float x) {
    float z = x * DS_NN_INV_SQRT2;
    return 0.5f * x * (1.0f + ds_erf_with_exp(z, ds_expf(-z * z)));
}

/* d/dx [x Phi(x)] = Phi(x) + x phi(x); erf and phi share exp(-x^2 / 2). */
DS_HD float ds_gelu_grad(float x) {
    float z = x * DS_NN_INV_SQRT2;
    float e = ds_expf(-z * z);
    float cdf = 0.5f * (1.0f + ds_erf_with_exp(z, e));
    return fmaf(x, DS_NN_INV_SQRT_2PI * e, cdf);
}

/* GELU, tanh approximation (Hugging Face's NewGELUActivation, "gelu_new"):
 *   0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),
 * computed as x * sigmoid(2u) = x / (1 + e^(-2u)), the same function
 * (1 + tanh(u) = 2 / (1 + e^(-2u))) but without the cancellation of
 * 1 + tanh(u) for negative x, and with ds_expf instead of libm's tanhf so
 * the loops vectorise. Where e^(-2u) would overflow (-2u > 88: x below about
 * -5.5) the sigmoid is 0 in float anyway, and is returned as exactly 0
 * (x * 0 = -0, as PyTorch's 0.5 x (1 + -1)). */
#define DS_NN_SQRT_2_OVER_PI 0.79788456080286535588f
#define DS_NN_GELU_TANH_C 0.044715f

/* sigmoid(2u) of the tanh GELU at x, and e = e^(-2u) (0 when the sigmoid is 0). */
DS_HD float ds_gelu_tanh_sig(float x, float *e) {
    float x2 = x * x;
    float a = -2.0f * DS_NN_SQRT_2_OVER_PI * fmaf(DS_NN_GELU_TANH_C * x2, x, x); /* -2u */
    float ea = ds_expf(a);
    *e = a > 88.0f ? 0.0f : ea;
    return a > 88.0f ? 0.0f : 1.0f / (1.0f + ea);
}

DS_HD float ds_gelu_tanh(float x) {
    float e;
    return x * ds_gelu_tanh_sig(x, &e);
}

/* d/dx [x s(2u)] = s + x s (1 - s) 2u' with u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2);
 * 1 - s is written e s (= e / (1 + e)), which keeps its relative accuracy
 * where s is close to 1 (1 - s itself would cancel). Beyond |x| = 10 the
 * correction term is below 1e-35 (e s < 1e-38 for x > 10, s < 1e-37 for
 * x < -10), so x is clamped there in it: x^3 cannot overflow into
 * inf * 0 = NaN. */
DS_HD float ds_gelu_tanh_grad(float x) {
    float e;
    float s = ds_gelu_tanh_sig(x, &e);
    float xc = x > 10.0f ? 10.0f : x;
    xc = xc < -10.0f ? -10.0f : xc;
    float du2 = 2.0f * DS_NN_SQRT_2_OVER_PI * fmaf(3.0f * DS_NN_GELU_TANH_C, xc * xc, 1.0f);
    return s * fmaf(xc * du2, e * s, 1.0f);
}

DS_HD float ds_relu(float x) { return x > 0.0f ? x : 0.0f; }
DS_HD float ds_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

DS_HD float ds_tanh_grad(float x) {
    float t = tanhf(x);
    return fmaf(-t, t, 1.0f); /* explicit: nvcc would fuse 1 - t*t, gcc does not (-ffp-contract=off) */
}

/* Callers switch on `act` outside their loops and call these with a constant,
 * so the switch folds away after inlining (no per-element dispatch). */
DS_HD float ds_act_fwd(ds_act act, float x) {
    switch (act) {
    case DS_ACT_RELU: return ds_relu(x);
    case DS_ACT_GELU: return ds_gelu(x);
    case DS_ACT_TANH: return tanhf(x);
    case DS_ACT_GELU_TANH: return ds_gelu_tanh(x);
    default: return x;
    }
}

DS_HD float ds_act_grad(ds_act act, float x) {
    switch (act) {
    case DS_ACT_RELU: return ds_relu_grad(x);
    case DS_ACT_GELU: return ds_gelu_grad(x);
    case DS_ACT_TANH: return ds_tanh_grad(x);
    case DS_ACT_GELU_TANH: return ds_gelu_tanh_grad(x);
    default: return 1.0f;
    }
}

/* ---- dropout ----
 * Element j of a dropout stream (seed, offset) uses the uniform
 * u = ds_rng_uniform_at(seed, offset + j) of engine/backend/math.h: kept when
 * u >= p, then scaled by inv_keep = 1 / (1 - p). */

/* The keep decision for the uniform word w. */
DS_HD bool ds_dropout_keep(uint32_t w, float p) { return ds_rng_bits_to_unit(w) >= p; }

/* The multiplier (0 or inv_keep) for the uniform word w. */
DS_HD float ds_dropout_mult(uint32_t w, float p, float inv_keep) {
    return ds_dropout_keep(w, p) ? inv_keep : 0.0f;
}

/* A dropout keep mask (the `keep` argument of the dropout slots, nn.h): one
 * bit per element, bit c % 32 of word c / 32 of a row for column c (1 =
 * kept); each row starts on a word of its own, so a row's words are written
 * by one thread and a chunk of rows starts on a whole word. Words per row: */
DS_HD int ds_dropout_mask_ld(int width) { return (width + 31) / 32; }

/* Bytes of the mask of rows x width elements (for a module's saved layout). */
DS_HD size_t ds_dropout_mask_bytes(int64_t rows, int width) {
    return (size_t)rows * (size_t)ds_dropout_mask_ld(width) * sizeof(uint32_t);
}

/* Host only: two sizes of an nn slot, neither negative (the element count
 * would wrap; cpu and cuda refuse the same calls, before writing). */
static inline ds_status ds_check_nn_sizes(const char *slot, const char *a, int64_t va,
                                          const char *b, int64_t vb) {
    if (va < 0 || vb < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: negative size %s=%lld %s=%lld", slot, a,
                      (long long)va, b, (long long)vb);
    return DS_OK;
}

/* Host only: copy_rows' shape: sizes not negative, and each row of width
 * inside its stride on both sides (rows would overlap otherwise). */
static inline ds_status ds_check_copy_rows(const char *slot, int dst_ld, int src_ld, int rows,
                                           int width) {
    DS_TRY(ds_check_nn_sizes(slot, "rows", rows, "width", width));
    if (rows > 1 && (dst_ld < width || src_ld < width))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: dst_ld=%d src_ld=%d, both must be >= width=%d",
                      slot, dst_ld, src_ld, width);
    return DS_OK;
}

/* Host only: layer norm's forward outputs and parameters over rows x width
 * (layernorm_fwd, dropout_ln_fwd). */
static inline ds_status ds_check_ln_fwd(const char *slot, const float *z, const float *mean,
                                        const float *rstd, const float *gamma, const float *beta,
                                        int rows, int width) {
    DS_TRY(ds_check_nn_sizes(slot, "rows", rows, "width", width));
    const size_t n = (size_t)rows * (size_t)width, r = width > 0 ? (size_t)rows : 0;
    DS_TRY(ds_check_ptr(slot, "the normalised output", z, n));
    DS_TRY(ds_check_ptr(slot, "mean", mean, r));
    DS_TRY(ds_check_ptr(slot, "rstd", rstd, r));
    DS_TRY(ds_check_ptr(slot, "gamma", gamma, rows > 0 ? (size_t)width : 0));
    DS_TRY(ds_check_ptr(slot, "beta", beta, rows > 0 ? (size_t)width : 0));
    return DS_OK;
}

/* Host only: a dropout over n elements of the stream at offset, as every
 * dropout slot (dropout_*, attn_softmax_*) of both backends checks it, so
 * cpu and cuda reject the same calls with the same message (as math.h's
 * ds_check_*): p in [0, 1), and a counter range that does not wrap (p = 0
 * draws nothing). */
static inline ds_status ds_check_dropout_stream(const char *slot, float p, uint64_t offset,
                                                uint64_t n) {
    if (!(p >= 0.0f && p < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: dropout probability must be in [0, 1), got %g",
                      slot, (double)p);
    return p > 0.0f ? ds_check_counter(slot, offset, n) : DS_OK;
}

/* Host only: a dropout slot's rows x width elements (dropout_fwd / _bwd,
 * dropout_ln_fwd). */
static inline ds_status ds_check_dropout(const char *slot, float p, int rows, int width,
                                         uint64_t offset) {
    DS_TRY(ds_check_nn_sizes(slot, "rows", rows, "width", width));
    return ds_check_dropout_stream(slot, p, offset, (uint64_t)rows * (uint64_t)width);
}

/* Host only: attn_softmax_fwd / _bwd's shape [B, nh, Tq, T] (the query rows
 * are the last Tq of T positions, so Tq <= T) and dropout stream. */
static inline ds_status ds_check_attn(const char *slot, int B, int nh, int Tq, int T, float p,
                                      uint64_t offset) {
    DS_TRY(ds_check_nn_sizes(slot, "B", B, "nh", nh));
    DS_TRY(ds_check_nn_sizes(slot, "Tq", Tq, "T", T));
    if (Tq > T)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: Tq=%d query rows but T=%d positions (the queries are the last Tq of "
                      "T)", slot, Tq, T);
    return ds_check_dropout_stream(slot, p, offset,
                                   (uint64_t)B * (uint64_t)nh * (uint64_t)Tq * (uint64_t)T);
}

/* Host only: attn_softmax_fwd's arguments (as ds_check_attn; pd needed when
 * p > 0). */
static inline ds_status ds_check_attn_fwd(const char *slot, const float *pd, int B, int nh,
                                          int Tq, int T, float p, uint64_t offset) {
    DS_TRY(ds_check_attn(slot, B, nh, Tq, T, p, offset));
    if (!pd && p > 0.0f)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: pd is NULL but dropout %g > 0", slot, (double)p);
    return DS_OK;
}

/* ---- layer norm ---- */

/* xhat of one element. */
DS_HD float ds_ln_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }

/* Input gradient of one element given the row means
 * a = mean_j(dy_j g_j) and c = mean_j(dy_j g_j xhat_j):
 * dx = rstd * (dy g - a - xhat c). */
DS_HD float ds_ln_dx(float dy, float g, float xhat, float rstd, float a, float c) {
    return rstd * fmaf(-xhat, c, fmaf(dy, g, -a)); /* both fused, as nvcc would anyway */
}

/* Row statistics, two passes over a row that sits in cache (a one-pass
 * E[x^2] - E[x]^2 loses the variance to cancellation when |mean| >> std). */
DS_HD void ds_ln_row_stats(const float *x, int h, float eps, float *mean, float *rstd) {
    int hb = ds_lanes_end(h);
    float acc[DS_LANES] = {0.0f};
    for (int i0 = 0; i0 < hb; i0 += DS_LANES) {
        DS_SIMD
        for (int k = 0; k < DS_LANES; k++) acc[k] += x[i0 + k];
    }
    float s = ds_lanes_sum(acc);
    for (int i = hb; i < h; i++) s += x[i];
    float m = s / (float)h;
    for (int k = 0; k < DS_LANES; k++) acc[k] = 0.0f;
    for (int i0 = 0; i0 < hb; i0 += DS_LANES) {
        DS_SIMD
        for (int k = 0; k < DS_LANES; k++) {
            float d = x[i0 + k] - m;
            acc[k] = fmaf(d, d, acc[k]);
        }
    }
    float v = ds_lanes_sum(acc);
    for (int i = hb; i < h; i++) {
        float d = x[i] - m;
        v = fmaf(d, d, v);
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)h + eps);
}

DS_HD void ds_ln_row_fwd(float *y, const float *x, const float *gamma, const float *beta, int h,
                         float mean, float rstd) {
    DS_SIMD
    for (int i = 0; i < h; i++) y[i] = fmaf(ds_ln_xhat(x[i], mean, rstd), gamma[i], beta[i]);
}

/* dx (= or +=) for one row; dx may alias dy when !accumulate (each element of
 * dy is read before its dx is written). */
DS_HD void ds_ln_row_bwd(float *dx, const float *dy, const float *x, const float *gamma, int h,
                         float mean, float rstd, int accumulate) {
    int hb = ds_lanes_end(h);
    float acc_a[DS_LANES] = {0.0f}, acc_c[DS_LANES] = {0.0f};
    for (int i0 = 0; i0 < hb; i0 += DS_LANES) {
        DS_SIMD
        for (int k = 0; k < DS_LANES; k++) {
            float dg = dy[i0 + k] * gamma[i0 + k];
            acc_a[k] += dg;
            acc_c[k] = fmaf(dg, ds_ln_xhat(x[i0 + k], mean, rstd), acc_c[k]);
        }
    }
    float a = ds_lanes_sum(acc_a), c = ds_lanes_sum(acc_c);
    for (int i = hb; i < h; i++) {
        float dg = dy[i] * gamma[i];
        a += dg;
        c = fmaf(dg, ds_ln_xhat(x[i], mean, rstd), c);
    }
    a /= (float)h;
    c /= (float)h;
    if (accumulate) {
        DS_SIMD
        for (int i = 0; i < h; i++)
            dx[i] += ds_ln_dx(dy[i], gamma[i], ds_ln_xhat(x[i], mean, rstd), rstd, a, c);
    } else {
        DS_SIMD
        for (int i = 0; i < h; i++)
            dx[i] = ds_ln_dx(dy[i], gamma[i], ds_ln_xhat(x[i], mean, rstd), rstd, a, c);
    }
}

/* ---- softmax ---- */

/* Masked, scaled softmax of one row of n scores: masked entries (mask[j] ==
 * 0; mask may be NULL) get exactly 0; a row with no unmasked entry is all
 * zeros. p may alias s. */
DS_HD void ds_softmax_row(float *p, const float *s, const float *mask, int n, float scale) {
    /* The maximum in DS_LANES lanes, then across them: a maximum is exact in
     * any order. Not an `omp simd reduction(max)`: gcc kept that one's
     * partial maxima on the stack, reduced them by a chain of 16 scalar
     * maxss and reloaded the vector from a scalar store on the next row (a
     * failed store forward), about half the cpu forward's time at T = 128. */
    int nb = ds_lanes_end(n);
    float lm[DS_LANES];
    for (int k = 0; k < DS_LANES; k++) lm[k] = -INFINITY;
    for (int j0 = 0; j0 < nb; j0 += DS_LANES) {
        if (mask) {
            DS_SIMD
            for (int k = 0; k < DS_LANES; k++) {
                float v = s[j0 + k] * scale;
                lm[k] = mask[j0 + k] != 0.0f && v > lm[k] ? v : lm[k];
            }
        } else {
            DS_SIMD
            for (int k = 0; k < DS_LANES; k++) {
                float v = s[j0 + k] * scale;
                lm[k] = v > lm[k] ? v : lm[k];
            }
        }
    }
    float mx = ds_lanes_max(lm);
    for (int j = nb; j < n; j++) {
        float v = s[j] * scale;
        if ((!mask || mask[j] != 0.0f) && v > mx) mx = v;
    }
    if (mx == -INFINITY) { /* no real key */
        for (int j = 0; j < n; j++) p[j] = 0.0f;
        return;
    }
    float acc[DS_LANES] = {0.0f};
    for (int j0 = 0; j0 < nb; j0 += DS_LANES) {
        DS_SIMD
        for (int k = 0; k < DS_LANES; k++) {
            int j = j0 + k;
            float e = (!mask || mask[j] != 0.0f) ? ds_expf(fmaf(s[j], scale, -mx)) : 0.0f;
            p[j] = e;
            acc[k] += e;
        }
    }
    float sum = ds_lanes_sum(acc);
    for (int j = nb; j < n; j++) {
        float e = (!mask || mask[j] != 0.0f) ? ds_expf(fmaf(s[j], scale, -mx)) : 0.0f;
        p[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    DS_SIMD
    for (int j = 0; j < n; j++) p[j] *= inv;
}

/* Causal attention: the keys query row i (of Tq query rows, the last Tq of
 * T positions) sees are j < ds_causal_keys(i, Tq, T) = i + (T - Tq) + 1:
 * its own position and the earlier ones. */
DS_HD int ds_causal_keys(int i, int Tq, int T) {
    int n = i + (T - Tq) + 1;
    return n < T ? n : T;
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

/* d(w * nll)/dz_j = w (p_j - [j == label]), times the loss scale / wsum.
 * A row with no weight (ignored, weight 0, or nothing counted) gets exact
 * zeros even when its probabilities are not finite (all logits -inf, or an
 * fp16 overflow on a padding row): 0 * NaN would be NaN, skip the step for a
 * row the loss never saw, and carry a NaN sign IEEE leaves unspecified (the
 * H100 and the cpu differed there). */
DS_HD float ds_xent_dlogit(float p, int is_label, float coef) {
    return coef == 0.0f ? 0.0f : coef * (p - (is_label ? 1.0f : 0.0f));
}

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_NN_MATH_H */
