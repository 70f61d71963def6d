/* Element-wise arithmetic shared by the cpu loops and the CUDA kernels.
 *
 * Every function marked DS_HD (engine/core/dtype.h) compiles as a plain
 * `static inline` C function for the cpu backend and as a
 * `__host__ __device__` function for the CUDA kernels, so the cpu unit tests
 * check the exact arithmetic the GPU runs.
 *
 * Bit-for-bit agreement between cpu and cuda. The two compilers are free to
 * fuse `a * b + c` into one fma (nvcc always does; gcc would wherever FMA is
 * enabled, but the build gives it -ffp-contract=off so that the instruction-
 * set variants of the cpu kernels agree, engine/backend/cpu/cpu_isa.h), and
 * they would not fuse the same pairs. So every product that feeds
 * an addition here is written as an explicit fmaf(), which both sides compute
 * exactly rounded; what is left is +, -, *, / and sqrtf, which IEEE rounds
 * identically on both (nvcc's defaults -prec-div=true -prec-sqrt=true; do not
 * build with --use_fast_math). For the same reason the normal RNG uses its own
 * log and sin/cos below instead of libm's logf/sinf/cosf, whose last bits
 * differ between glibc and CUDA. (One exception no code can remove: a NaN
 * produced by arithmetic carries the hardware's payload, 0x7fffffff on the GPU,
 * the propagated or default NaN on x86; it is a NaN on both.)
 *
 * Contents:
 *   1. Philox4x32-10 counter-based RNG and the uniform / normal (Box-Muller)
 *      values of element j of a stream (seed, j) -- the RNG of backend.h and
 *      of dropout (nn.h);
 *   2. Adam / AdamW and SGD element updates, with the per-call coefficients
 *      computed once on the host in double;
 *   2b. blockwise symmetric int8 quantization (ZeRO++ qwZ), with its
 *      error bound;
 *   3. host-side argument checks both backends apply to a slot's arguments,
 *      so cpu and cuda reject the same calls with the same messages;
 *   4. bf16 GEMM inputs: the rounding of A and B and the packed layout of
 *      their rounded copies (backend.h, gemm with gemm_inputs DS_BF16).
 * The fp32 <-> fp16 / bf16 casts are in engine/core/dtype.h. */
#ifndef DS_BACKEND_MATH_H
#define DS_BACKEND_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* a * b rounded once and never fused with a following addition. Use it where
 * a product must be rounded before something is added to it. On the device
 * that is __fmul_rn, which nvcc documents as never contracted (LLVM may turn
 * fma(a, b, -0) back into a multiply). On the host, an fma with -0 added:
 * the same value, sign of zero included, and gcc keeps it an fma of its own. */
DS_HD float ds_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return fmaf(a, b, -0.0f);
#endif
}

/* ------------------------------------------------------------------------ */
/* 1. Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11), the generator of cuRAND's curandStatePhilox4_32_10_t. One call
 * maps a 128-bit counter and a 64-bit key to 128 random bits.
 *
 * Layout. Element j of the stream (seed, tag) is word j % 4 of
 *   philox(counter = {lo32(j/4), hi32(j/4), tag, 0}, key = {lo32(seed), hi32(seed)})
 * which is exactly what cuRAND's device API returns from
 *   curand_init(seed, subsequence = tag, offset = j, &st); curand(&st);
 * The value of element j depends on (seed, tag, j) only: a tensor generated in
 * one piece or in shards at offsets gets the same numbers, on any backend. */

typedef struct ds_philox4 {
    uint32_t v[4];
} ds_philox4;

/* Stream tags: uniform and normal draws of one seed use disjoint counters. */
#define DS_RNG_TAG_UNIFORM 0u
#define DS_RNG_TAG_NORMAL 1u

#define DS_PHILOX_M0 0xD2511F53u
#define DS_PHILOX_M1 0xCD9E8D57u
#define DS_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define DS_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

DS_HD ds_philox4 ds_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                  uint32_t k1) {
    /* Unrolled so the loops that call it vectorise (gcc does not unroll
     * this at -O2: dropout masks cost 2.9 instead of 0.8 ns per element). */
#if defined(__CUDACC__)
#pragma unroll
#elif defined(__GNUC__)
#pragma GCC unroll 10
#endif
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += DS_PHILOX_W0;
            k1 += DS_PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)DS_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)DS_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    ds_philox4 out;
    out.v[0] = c0;
    out.v[1] = c1;
    out.v[2] = c2;
    out.v[3] = c3;
    return out;
}

/* The 4 words of block `block` (elements 4*block .. 4*block+3) of (seed, tag). */
DS_HD ds_philox4 ds_rng_block(uint64_t seed, uint32_t tag, uint64_t block) {
    return ds_philox4x32_10((uint32_t)block, (uint32_t)(block >> 32), tag, 0u, (uint32_t)seed,
                            (uint32_t)(seed >> 32));
}

/* Top 24 bits as a float in [0, 1): exact (k * 2^-24), so identical everywhere. */
DS_HD float ds_rng_bits_to_unit(uint32_t x) { return (float)(x >> 8) * 5.9604644775390625e-8f; }

/* lo + span * u with span = hi - lo computed by the caller once. */
DS_HD float ds_rng_bits_to_uniform(uint32_t x, float lo, float span) {
    return fmaf(span, ds_rng_bits_to_unit(x), lo);
}

/* Natural log of x, for normal positive x, with fmaf only (see top).
 * x = 2^e * m with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s) with
 * s = (m-1)/(m+1), |s| <= 0.1716, summed to s^11 (truncation < 2e-11
 * relative); m - 1 is exact (Sterbenz). Within about 2 ulp of the true value. */
DS_HD float ds_rng_logf(float x) {
    uint32_t u = ds_f32_bits(x);
    int e = (int)((u >> 23) & 0xffu) - 127;
    float m = ds_bits_f32((u & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
    if (m > 1.41421356f) {
        m *= 0.5f; /* exact, and so is m - 1 below, fused or not */
        e += 1;
    }
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float p = fmaf(fmaf(fmaf(fmaf(1.0f / 11.0f, z, 1.0f / 9.0f), z, 1.0f / 7.0f), z, 1.0f / 5.0f),
                   z, 1.0f / 3.0f);
    float logm = 2.0f * fmaf(s * z, p, s);
    return fmaf((float)e, 0.693147180559945309f, logm);
}

/* sin and cos of 2*pi*k/2^24 for a 24-bit k, with fmaf only. The turn is
 * split exactly in integers into a quadrant q and a remainder r in
 * [-2^21, 2^21), i.e. an angle a in [-pi/4, pi/4), where the Taylor series
 * to a^9 (sin) and a^10 (cos) are off by less than 2e-9 and 1e-10. */
DS_HD void ds_rng_sincos_turn24(uint32_t k, float *s_out, float *c_out) {
    uint32_t qfull = (k + (1u << 21)) >> 22;           /* nearest quarter turn, 0..4 */
    uint32_t q = qfull & 3u;
    int32_t r = (int32_t)k - (int32_t)(qfull << 22);   /* in [-2^21, 2^21) */
    float a = (float)r * 3.74507028e-7f;                /* 2*pi / 2^24; r is exact */
    float z = a * a;
    float ps = fmaf(fmaf(fmaf(2.75573192e-6f, z, -1.98412698e-4f), z, 8.33333333e-3f), z,
                    -1.66666667e-1f);
    float sn = fmaf(a * z, ps, a);
    float pc = fmaf(fmaf(fmaf(fmaf(-2.75573192e-7f, z, 2.48015873e-5f), z, -1.38888889e-3f), z,
                         4.16666667e-2f),
                    z, -0.5f);
    float cs = fmaf(pc, z, 1.0f);
    switch (q) {
    case 0: *s_out = sn; *c_out = cs; break;
    case 1: *s_out = cs; *c_out = -sn; break;
    case 2: *s_out = -sn; *c_out = -cs; break;
    default: *s_out = -cs; *c_out = sn; break;
    }
}

/* Box-Muller: two words -> two independent N(0, 1) values.
 * u1 = (top 24 bits + 1) / 2^24 in (0, 1], so log never sees 0 and
 * |z| <= sqrt(2 * 24 ln 2) = 5.77 (a 1-in-10^8 tail is cut; fine for init). */
DS_HD void ds_rng_box_muller(uint32_t w0, uint32_t w1, float *z0, float *z1) {
    float u1 = (float)((w0 >> 8) + 1u) * 5.9604644775390625e-8f;
    float r = sqrtf(-2.0f * ds_rng_logf(u1));
    float sn, cs;
    ds_rng_sincos_turn24(w1 >> 8, &sn, &cs);
    *z0 = r * cs;
    *z1 = r * sn;
}

/* The 4 normal values of a block of the DS_RNG_TAG_NORMAL stream. */
DS_HD void ds_rng_normal_block(uint64_t seed, uint64_t block, float z[4]) {
    ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_NORMAL, block);
    ds_rng_box_muller(w.v[0], w.v[1], &z[0], &z[1]);
    ds_rng_box_muller(w.v[2], w.v[3], &z[2], &z[3]);
}

/* Element j of the uniform [0, 1) stream of `seed` (dropout: keep = u >= p).
 * Costs one Philox call; loops over many elements should call ds_rng_block
 * once per 4 elements, which gives the same values. */
DS_HD float ds_rng_uniform_at(uint64_t seed, uint64_t j) {
    ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, j >> 2);
    return ds_rng_bits_to_unit(w.v[j & 3u]);
}

/* Element j of the N(0, 1) stream of `seed`. */
DS_HD float ds_rng_normal_at(uint64_t seed, uint64_t j) {
    float z[4];
    ds_rng_normal_block(seed, j >> 2, z);
    return z[j & 3u];
}

/* ------------------------------------------------------------------------ */
/* 2. Optimizer element updates.
 *
 * The coefficients that depend only on the step are computed once per call
 * on the host in double (as PyTorch does in Python floats), then rounded to
 * float and passed to the element function. */

/* Adam / AdamW, the formulas of torch.optim.Adam / AdamW (single-tensor path)
 * and DeepSpeed's FusedAdam:
 *   g  = grad * grad_mult                         (loss scale, clipping)
 *   Adam with weight decay (L2):  g += wd * p
 *   AdamW:                        p *= 1 - lr*wd  (before the moments)
 *   m  = b1*m + (1-b1)*g
 *   v  = b2*v + (1-b2)*g*g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p  = p + (-lr / (1 - b1^t)) * m / denom       (torch's addcdiv order)
 * Without bias correction the two corrections are 1. */
typedef struct ds_adam_coef {
    float grad_mult;
    float l2;             /* Adam's L2 weight decay; 0 in AdamW mode */
    float decay;          /* AdamW's 1 - lr*wd; 1 in Adam mode */
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float bc2_sqrt;       /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step_size;  /* -lr / (1 - beta1^t) */
} ds_adam_coef;

/* Host only. `step` >= 1 (the caller checks). */
static inline ds_adam_coef ds_adam_coef_make(float lr, float beta1, float beta2, float eps,
                                             float weight_decay, int64_t step, bool adam_w_mode,
                                             bool bias_correction, float grad_mult) {
    ds_adam_coef c;
    double bc1 = 1.0, bc2 = 1.0;
    if (bias_correction) {
        bc1 = 1.0 - pow((double)beta1, (double)step);
        bc2 = 1.0 - pow((double)beta2, (double)step);
    }
    c.grad_mult = grad_mult;
    c.l2 = adam_w_mode ? 0.0f : weight_decay;
    c.decay = adam_w_mode ? (float)(1.0 - (double)lr * (double)weight_decay) : 1.0f;
    c.beta1 = beta1;
    c.one_minus_beta1 = (float)(1.0 - (double)beta1);
    c.beta2 = beta2;
    c.one_minus_beta2 = (float)(1.0 - (double)beta2);
    c.bc2_sqrt = (float)sqrt(bc2);
    c.eps = eps;
    c.neg_step_size = (float)(-(double)lr / bc1);
    return c;
}

/* One element: updates *p, *m, *v from the raw gradient g_raw. */
DS_HD void ds_adam_update(float *p, float *m, float *v, float g_raw, const ds_adam_coef *c) {
    float g = g_raw * c->grad_mult;
    float w = *p;
    g = fmaf(c->l2, w, g);            /* torch: grad.add(param, alpha=wd) */
    w = ds_mul_rn(w, c->decay);       /* torch: param.mul_(1 - lr*wd) */
    float mm = fmaf(c->one_minus_beta1, g, c->beta1 * *m);
    float vv = fmaf(c->one_minus_beta2 * g, g, c->beta2 * *v);
    float denom = sqrtf(vv) / c->bc2_sqrt + c->eps;
    w = w + (c->neg_step_size * mm) / denom;
    *m = mm;
    *v = vv;
    *p = w;
}

/* SGD, torch.optim.SGD:
 *   g = grad * grad_mult;  g += wd * p
 *   momentum != 0:  buf = first_step ? g : momentum*buf + (1-dampening)*g
 *                   g   = nesterov ? g + momentum*buf : buf
 *   p = p - lr * g */
typedef struct ds_sgd_coef {
    float grad_mult;
    float neg_lr;
    float weight_decay;
    float momentum;
    float one_minus_dampening;
    int nesterov;
    int first_step;
} ds_sgd_coef;

static inline ds_sgd_coef ds_sgd_coef_make(float lr, float momentum, float dampening,
                                           float weight_decay, bool nesterov, bool first_step,
                                           float grad_mult) {
    ds_sgd_coef c;
    c.grad_mult = grad_mult;
    c.neg_lr = -lr;
    c.weight_decay = weight_decay;
    c.momentum = momentum;
    c.one_minus_dampening = (float)(1.0 - (double)dampening);
    c.nesterov = nesterov;
    c.first_step = first_step;
    return c;
}

/* One element. buf may be NULL when momentum == 0. */
DS_HD void ds_sgd_update(float *p, float *buf, float g_raw, const ds_sgd_coef *c) {
    float w = *p;
    float g = g_raw * c->grad_mult;
    g = fmaf(c->weight_decay, w, g);
    if (c->momentum != 0.0f) {
        float b = c->first_step ? g : fmaf(c->one_minus_dampening, g, c->momentum * *buf);
        *buf = b;
        g = c->nesterov ? fmaf(c->momentum, b, g) : b;
    }
    *p = fmaf(c->neg_lr, g, w);
}

/* ------------------------------------------------------------------------ */
/* 2b. Blockwise symmetric int8 quantization (ZeRO++ qwZ: the parameters a
 * stage-3 all-gather carries, zero/stage3.c).
 *
 * A run of n values is cut into blocks of `block` elements (the last may be
 * shorter); each block keeps one fp32 scale, step = max|x| / 127, and each
 * value becomes q = round_to_nearest_even(x * (127 / max|x|)) in [-127, 127].
 * Dequantized, x' = q * step. DeepSpeed's kernel (csrc/includes/
 * quantization_utils.h, Symmetric, 8 bits) multiplies by 2^8 / (2 max) =
 * 128 / max and clamps to [-128, 127], so its largest element may land a
 * whole step off; 127 keeps every element within half a step:
 *
 *   |x - x'| <= step / 2 + max * 2^-21.
 *
 * Why: x * inv with inv = 127 / max is exact up to two fp32 roundings
 * (inv's and the product's, each relative 2^-24 of at most 127.5), so it is
 * within 127.5 * 2^-23 of x * 127 / max; rounding to an integer adds at
 * most 1/2; in units of x (times max / 127) that is step/2 + 1.004 max *
 * 2^-23, and the step itself (relative 2^-24, times |q| <= 127) and the
 * product q * step (relative 2^-24 of at most max) add max * 2^-23 more:
 * just over max * 2^-22 in all, which 2^-21 covers with room. |x * inv| <= 127 (1 + 2^-24)^2 < 127.5,
 * so no value rounds past 127 (the clamp only guards NaN).
 *
 * Non-finite values poison their block: max|x| is inf or NaN (NaN sticks
 * in the running max), inv is 0, every q is 0 and q * step is 0 * inf or
 * 0 * NaN = NaN, so the dequantized block is NaN and the overflow checks
 * downstream see it. A block whose max is below 127 / FLT_MAX (about
 * 4e-37) has no finite inv and becomes zeros (error <= max). */

/* DeepSpeed's qwZ groups (CUDAQuantizer in runtime/zero/
 * partition_parameters.py) hold at most 8000 elements, "the optimal size is
 * 4k"; a fixed 4096 keeps a scale's cost at 4 / 4096 of the int8 bytes. */
#define DS_Q8_BLOCK ((size_t)4096)

/* The running max|x| of a block, with NaN sticky (fmaxf would drop it). */
DS_HD float ds_q8_absmax_acc(float m, float x) {
    float a = fabsf(x);
    return (a > m || a != a) ? a : m;
}

/* The block's dequantization step. */
DS_HD float ds_q8_step(float absmax) { return absmax / 127.0f; }

/* The block's quantization multiplier; 0 where it would not be finite. */
DS_HD float ds_q8_inv(float absmax) {
    float inv = absmax > 0.0f ? 127.0f / absmax : 0.0f;
    return inv <= 3.4028234663852886e38f ? inv : 0.0f;
}

DS_HD int8_t ds_q8_quantize(float x, float inv) {
    float r = rintf(x * inv);
    if (r != r) r = 0.0f;
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    return (int8_t)r;
}

DS_HD float ds_q8_dequantize(int8_t q, float step) { return (float)q * step; }

DS_HD size_t ds_q8_nblocks(size_t n, size_t block) { return (n + block - 1) / block; }

/* Bytes of n values packed as the qwZ wire format: the fp32 scales of its
 * blocks, then the int8 values, padded to 4 bytes so that the next piece's
 * scales stay aligned. */
DS_HD size_t ds_q8_packed_bytes(size_t n, size_t block) {
    return 4 * ds_q8_nblocks(n, block) + ((n + 3) & ~(size_t)3);
}

/* Room for the packed pieces of a span of n elements cut among `world`
 * ranks, DS_Q8_BLOCK blocks: the sum over r of ds_q8_packed_bytes(n_r) is at
 * most n + 4 (n / B + world) + 3 world (stage 3's qwZ gather buffer). */
DS_HD size_t ds_q8_gather_bytes(size_t n, size_t world) {
    return n + 4 * (n / DS_Q8_BLOCK + world) + 3 * world;
}

/* ------------------------------------------------------------------------ */
/* 2c. Blockwise symmetric int4 quantization, DeepSpeed's arithmetic (ZeRO++
 * qgZ as DeepSpeed runs it: csrc/includes/quantization_utils.h, Params<
 * Symmetric, 4>, and csrc/includes/quantization.h PackedInt4; the comm
 * codec engine/comm/codec_q4.h).
 *
 * Each block of `block` values (the last may be shorter) keeps one fp32
 * scale. With max = max|x| of the block, DeepSpeed's multiplier is
 * mult = 2^4 / (2 max) (1 where max is 0), q = clamp(round_to_nearest_even(
 * x * mult), -8, 7), and the stored scale is step = 1 / mult, dequantized
 * x' = q * step: the same fp32 operations here. Two values share a byte,
 * value 2i in the high nibble and 2i + 1 in the low one (PackedInt4's
 * `high` field is declared first and so takes the low bits; dequantize.cu
 * reads `low`, the high bits, as the even element); an odd tail leaves the
 * low nibble 0.
 *
 * Bound: 2 max is exact, so mult = 8 / max within one rounding (relative
 * 2^-24) and step = max / 8 within two (2^-23); x * mult is then within
 * 8 * 2^-23 = 2^-20 of 8 x / max, which lies in [-8, 8]. Rounding moves it
 * at most 1/2, except that values above 7.5 clamp to 7, at most 1 + 2^-20
 * off (x = max itself lands a whole step off: DeepSpeed's 2^4 / (2 max)
 * puts max at 8, which int4 does not hold). So |q - 8 x / max| <=
 * 1 + 2^-19, i.e. |x - q max / 8| <= max / 8 + max 2^-22, and q * step is
 * within |q| (max / 8) (2^-23 + 2^-24) <= max 2^-22 of q max / 8:
 *
 *   |x - x'| <= max / 8 + max * 2^-21    (max / 16 + max * 2^-21 where
 *                                          x * mult <= 7.5: no clamp)
 *
 * Non-finite values poison their block as in 2b: a max of inf gives
 * mult 0 and step inf, a NaN max NaN for both, so every x' is NaN
 * (q * inf with q = 0, or q * NaN). A block whose mult overflows (max below
 * 8 / FLT_MAX) gets step 0 and decodes to zeros (error <= max). */

/* The block's quantization multiplier, DeepSpeed's 2^4 / (2 max); 1 for an
 * all-zero block. */
DS_HD float ds_q4_mult(float absmax) {
    return absmax == 0.0f ? 1.0f : 16.0f / (2.0f * absmax);
}

/* The stored scale: DeepSpeed's 1 / mult. */
DS_HD float ds_q4_step(float mult) { return 1.0f / mult; }

/* One value to a signed nibble in [-8, 7] (NaN, from inf * 0, to 0). */
DS_HD int ds_q4_quantize(float x, float mult) {
    float r = rintf(x * mult);
    if (r != r) r = 0.0f;
    r = r > 7.0f ? 7.0f : r < -8.0f ? -8.0f : r;
    return (int)r;
}

/* Two nibbles into a byte: the even element high, the odd one low. */
DS_HD uint8_t ds_q4_pack(int even, int odd) {
    return (uint8_t)(((unsigned)even & 15u) << 4 | ((unsigned)odd & 15u));
}

/* A nibble (0..15) as the signed value it holds: 7 -> 7, 8 -> -8, 15 -> -1. */
DS_HD int ds_q4_signed(unsigned v) { return (int)(v ^ 8u) - 8; }

/* Element i (even: the high nibble) of packed bytes p, sign-extended. */
DS_HD int ds_q4_unpack(const uint8_t *p, size_t i) {
    return ds_q4_signed(i & 1 ? p[i >> 1] & 15u : (unsigned)p[i >> 1] >> 4);
}

DS_HD float ds_q4_dequantize(int q, float step) { return (float)q * step; }

/* Bytes of n packed values, padded to 4 so that a record's next scales stay
 * aligned. */
DS_HD size_t ds_q4_values_bytes(size_t n) { return ((n + 1) / 2 + 3) & ~(size_t)3; }

/* ------------------------------------------------------------------------ */
/* 3. Argument checks (host only). Each returns DS_OK or DS_ERR_INVALID_ARG
 * with a message that names the slot (`who`) and the offending values. */

/* The element-wise slots take F32, F16 or BF16. */
static inline ds_status ds_check_float_dtype(const char *who, const char *arg, ds_dtype t) {
    if (t == DS_F32 || t == DS_F16 || t == DS_BF16) return DS_OK;
    return DS_ERR(DS_ERR_INVALID_ARG, "%s: %s has dtype %s (%d); expected fp32, fp16 or bf16", who,
                  arg, ds_dtype_name(t), (int)t);
}

static inline ds_status ds_check_ptr(const char *who, const char *arg, const void *p, size_t n) {
    if (p || n == 0) return DS_OK;
    return DS_ERR(DS_ERR_INVALID_ARG, "%s: %s is NULL for %zu elements", who, arg, n);
}

/* n elements of a Philox stream from offset: a counter range that does not
 * wrap the 64-bit counter (the RNG slots; dropout's, nn_math.h). */
static inline ds_status ds_check_counter(const char *who, uint64_t offset, uint64_t n) {
    if (n > 0 && offset + n < offset)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: offset %llu + %llu elements overflows the 64-bit counter", who,
                      (unsigned long long)offset, (unsigned long long)n);
    return DS_OK;
}

/* The RNG slots: a destination for n elements, and their counter range. */
static inline ds_status ds_check_rng(const char *who, const float *dst, size_t n, uint64_t offset) {
    DS_TRY(ds_check_ptr(who, "dst", dst, n));
    return ds_check_counter(who, offset, n);
}

/* The optimizer slots' common arguments. */
static inline ds_status ds_check_optim(const char *who, const float *param, const void *grad,
                                       ds_dtype grad_t, size_t n, const void *hp,
                                       const void *param_lp, ds_dtype lp_t) {
    if (!hp) return DS_ERR(DS_ERR_INVALID_ARG, "%s: hyper-parameters are NULL", who);
    DS_TRY(ds_check_float_dtype(who, "grad", grad_t));
    if (param_lp) DS_TRY(ds_check_float_dtype(who, "param_lp", lp_t));
    DS_TRY(ds_check_ptr(who, "param", param, n));
    DS_TRY(ds_check_ptr(who, "grad", grad, n));
    return DS_OK;
}

/* The int4 slots: blocks of an even size, so that a byte's two values
 * share their block. */
static inline ds_status ds_check_q4(const char *who, const char *xname, const void *x,
                                    const void *q, const float *scales, size_t n, size_t block) {
    if (block == 0 || block % 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: block size %zu is not a positive even number", who,
                      block);
    DS_TRY(ds_check_ptr(who, xname, x, n));
    DS_TRY(ds_check_ptr(who, "q", q, n));
    DS_TRY(ds_check_ptr(who, "scales", scales, n));
    return DS_OK;
}

/* The quantization slots: a block of at least one element. */
static inline ds_status ds_check_q8(const char *who, const char *xname, const void *x,
                                    const void *q, const float *scales, size_t n, size_t block) {
    if (block == 0) return DS_ERR(DS_ERR_INVALID_ARG, "%s: block size is 0", who);
    DS_TRY(ds_check_ptr(who, xname, x, n));
    DS_TRY(ds_check_ptr(who, "q", q, n));
    DS_TRY(ds_check_ptr(who, "scales", scales, n));
    return DS_OK;
}

/* Row-major GEMM shapes (backend.h): op(A) is m x k, op(B) k x n, C m x n.
 * A stored row-major has transa ? m : k columns, so lda must cover them; the
 * same for B and C. Batches of C must not overlap (they are written in
 * parallel); batches of A and B may (stride 0 shares one matrix). */
static inline ds_status ds_check_gemm(const char *who, bool transa, bool transb, int m, int n,
                                      int k, const float *A, int lda, int64_t strideA,
                                      const float *B, int ldb, int64_t strideB, const float *C,
                                      int ldc, int64_t strideC, int batch) {
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: negative size m=%d n=%d k=%d batch=%d", who, m, n,
                      k, batch);
    int a_cols = transa ? m : k, b_cols = transb ? k : n;
    if (lda < (a_cols > 1 ? a_cols : 1))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: lda=%d < %d columns of A (%s, m=%d k=%d)", who, lda,
                      a_cols, transa ? "transposed" : "not transposed", m, k);
    if (ldb < (b_cols > 1 ? b_cols : 1))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: ldb=%d < %d columns of B (%s, k=%d n=%d)", who, ldb,
                      b_cols, transb ? "transposed" : "not transposed", k, n);
    if (ldc < (n > 1 ? n : 1))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: ldc=%d < n=%d", who, ldc, n);
    if (strideA < 0 || strideB < 0 || strideC < 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: negative batch stride (strideA=%lld strideB=%lld strideC=%lld)", who,
                      (long long)strideA, (long long)strideB, (long long)strideC);
    if (m == 0 || n == 0 || batch == 0) return DS_OK;
    if (!C || (k > 0 && (!A || !B)))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: NULL matrix (A=%p B=%p C=%p) for m=%d n=%d k=%d",
                      who, (const void *)A, (const void *)B, (const void *)C, m, n, k);
    int64_t c_extent = (int64_t)(m - 1) * ldc + n;
    if (batch > 1 && strideC < c_extent)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: strideC=%lld < %lld elements of one C (m=%d ldc=%d n=%d): batches of C "
                      "would overlap",
                      who, (long long)strideC, (long long)c_extent, m, ldc, n);
    return DS_OK;
}

/* Adam hyper-parameters that would divide by zero or make no sense. */
static inline ds_status ds_check_adam(const char *who, float beta1, float beta2, float eps,
                                      int64_t step, bool bias_correction) {
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: betas must be in [0, 1), got (%g, %g)", who,
                      (double)beta1, (double)beta2);
    if (!(eps >= 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: eps must be >= 0, got %g", who, (double)eps);
    if (bias_correction && step < 1)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: step must be >= 1 with bias correction (1 - beta^step), got %lld", who,
                      (long long)step);
    return DS_OK;
}

/* Nesterov needs momentum and no dampening (torch.optim.SGD's rule). */
static inline ds_status ds_check_sgd(const char *who, float momentum, float dampening,
                                     bool nesterov) {
    if (!(momentum >= 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: momentum must be >= 0, got %g", who,
                      (double)momentum);
    if (nesterov && (momentum <= 0.0f || dampening != 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: nesterov needs momentum > 0 and dampening 0, got momentum %g "
                      "dampening %g",
                      who, (double)momentum, (double)dampening);
    return DS_OK;
}

/* ------------------------------------------------------------------------ */
/* 4. bf16 GEMM inputs. With be->gemm_inputs DS_BF16 the gemm slot multiplies
 * A and B rounded to bf16 and sums in fp32 (backend.h). The rounding is
 * ds_f32_to_bf16 on both backends: the cuda kernel stores its 16 bits for
 * cuBLAS, the cpu loop widens them straight back (ds_round_bf16) for its fp32
 * kernels. Both then multiply the same values; a product of two bf16 values
 * (8-bit significands) has at most 16 significant bits, exact in fp32, so
 * the backends differ only in how they order and round the sums. */

/* x rounded to the nearest bf16 (ties to even), as fp32. inf stays inf, a
 * NaN stays a (quiet) NaN, values past bf16's largest finite round to inf. */
DS_HD float ds_round_bf16(float x) { return ds_bf16_to_f32(ds_f32_to_bf16(x)); }

/* Where the rounded copy of one operand goes: each stored matrix (rows x
 * cols, row-major, whatever its ld and transposition) packed with ld = cols
 * rounded up to a multiple of `ld_multiple` (1 on cpu; 8 on cuda, where
 * tensor-core GEMMs want 16-byte aligned rows), matrices rows * ld apart;
 * one copy for a stride-0 operand, which every product of the batch shares.
 * The padding of a row is never read by the product. */
typedef struct ds_gemm_pack {
    int rows, cols; /* of the stored matrix */
    int ld;         /* of the packed copy */
    int copies;     /* 1 (stride 0 or batch 1) or batch */
    int64_t stride; /* packed batch stride: 0 or rows * ld */
    size_t elems;   /* copies * rows * ld */
} ds_gemm_pack;

/* The pack of A (is_a) or B of gemm(transa/transb, m, n, k, ..., batch):
 * A stored is (trans ? k x m : m x k), B (trans ? n x k : k x n). */
static inline ds_gemm_pack ds_gemm_pack_of(bool is_a, bool trans, int m, int n, int k,
                                           int64_t stride, int batch, int ld_multiple) {
    ds_gemm_pack p;
    int r = is_a ? m : k, c = is_a ? k : n; /* op(X) is r x c */
    p.rows = trans ? c : r;
    p.cols = trans ? r : c;
    p.ld = (p.cols + ld_multiple - 1) / ld_multiple * ld_multiple;
    p.copies = (stride == 0 || batch <= 1) ? 1 : batch;
    p.stride = p.copies > 1 ? (int64_t)p.rows * p.ld : 0;
    p.elems = (size_t)p.copies * (size_t)p.rows * (size_t)p.ld;
    return p;
}

/* The GEMM workspace of one bf16-input call (backend.h): A's packed copy at
 * offset 0, B's at b_offset (A's bytes rounded up to `align`), elements of
 * `esz` bytes, rows padded to ld_multiple. The backends' parameters are in
 * ds_gemm_workspace_of (backend.c), which both their gemm slots and the
 * engine's plan read, so the plan is what the slots ask for. */
typedef struct ds_gemm_ws {
    ds_gemm_pack a, b;
    size_t b_offset; /* bytes */
    size_t bytes;    /* b_offset + B's copy */
} ds_gemm_ws;

static inline ds_gemm_ws ds_gemm_ws_of(size_t esz, int ld_multiple, size_t align, bool transa,
                                       bool transb, int m, int n, int k, int64_t strideA,
                                       int64_t strideB, int batch) {
    ds_gemm_ws w;
    w.a = ds_gemm_pack_of(true, transa, m, n, k, strideA, batch, ld_multiple);
    w.b = ds_gemm_pack_of(false, transb, m, n, k, strideB, batch, ld_multiple);
    w.b_offset = (w.a.elems * esz + align - 1) / align * align;
    w.bytes = w.b_offset + w.b.elems * esz;
    return w;
}

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_MATH_H */
