/* The cpu backend's element-wise slots: RNG, casts, fill, scale, axpy, sum of
 * squares, Adam and SGD. Each is an OpenMP loop around the DS_HD functions of
 * engine/backend/math.h and engine/core/dtype.h, which the CUDA kernels call
 * too. Every element is computed independently of the thread count, so the
 * results are the same bits at 1 or N threads (sumsq included, see there).
 *
 * Speed. The loops run over plain float arrays (fp16 / bf16 converted in
 * chunks, cpu_convert.c) under `omp simd`, so gcc vectorises them -- Adam's
 * only when the build has -fno-math-errno, since sqrtf may otherwise set errno
 * and cannot be vectorised (11M parameters: 48 ms -> 15 ms on 1 core here).
 * Vector lanes run the same IEEE operations, so the bits do not change. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/math.h"

/* ---- random numbers ---------------------------------------------------------
 * Element i of the output is element offset + i of the stream, computed from
 * the Philox block (offset + i) / 4: the loop runs over the blocks the range
 * touches and keeps the words that fall inside it. */

ds_status ds_cpu_rng_uniform(ds_backend *be, float *dst, size_t n, float lo, float hi,
                             uint64_t seed, uint64_t offset) {
    DS_TRY(ds_check_rng("cpu rng_uniform", dst, n, offset));
    if (n == 0) return DS_OK;
    float span = hi - lo;
    uint64_t end = offset + n, first = offset >> 2, last = (end - 1) >> 2;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (uint64_t b = first; b <= last; b++) {
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, b);
        for (uint64_t l = 0; l < 4; l++) {
            uint64_t j = 4 * b + l;
            if (j >= offset && j < end) dst[j - offset] = ds_rng_bits_to_uniform(w.v[l], lo, span);
        }
    }
    return DS_OK;
}

ds_status ds_cpu_rng_normal(ds_backend *be, float *dst, size_t n, float mean, float std,
                            uint64_t seed, uint64_t offset) {
    DS_TRY(ds_check_rng("cpu rng_normal", dst, n, offset));
    if (n == 0) return DS_OK;
    uint64_t end = offset + n, first = offset >> 2, last = (end - 1) >> 2;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (uint64_t b = first; b <= last; b++) {
        float z[4];
        ds_rng_normal_block(seed, b, z);
        for (uint64_t l = 0; l < 4; l++) {
            uint64_t j = 4 * b + l;
            if (j >= offset && j < end) dst[j - offset] = fmaf(std, z[l], mean);
        }
    }
    return DS_OK;
}

/* ---- casts, fill, scale, axpy ---------------------------------------------
 * Chunked (DS_CPU_CHUNK): fp16 / bf16 operands are converted to fp32 in a
 * stack buffer, the arithmetic runs on float arrays, results are rounded
 * back. Element i sees exactly the operations of the scalar formula. */

static size_t chunk_len(size_t c, size_t n) {
    size_t lo = c * DS_CPU_CHUNK;
    return n - lo < DS_CPU_CHUNK ? n - lo : DS_CPU_CHUNK;
}

ds_status ds_cpu_cast(ds_backend *be, void *dst, ds_dtype dst_t, const void *src, ds_dtype src_t,
                      size_t n) {
    DS_TRY(ds_check_float_dtype("cpu cast", "dst", dst_t));
    DS_TRY(ds_check_float_dtype("cpu cast", "src", src_t));
    DS_TRY(ds_check_ptr("cpu cast", "dst", dst, n));
    DS_TRY(ds_check_ptr("cpu cast", "src", src, n));
    if (n == 0) return DS_OK;
    if (dst_t == src_t) {
        if (dst != src) memmove(dst, src, n * ds_dtype_size(dst_t));
        return DS_OK;
    }
    size_t nchunks = (n + DS_CPU_CHUNK - 1) / DS_CPU_CHUNK;
    /* element i reads and writes only i, so fp16 <-> bf16 may run in place */
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * DS_CPU_CHUNK, len = chunk_len(c, n);
        float buf[DS_CPU_CHUNK];
        if (dst_t == DS_F32) {
            ds_cpu_to_f32((float *)dst + lo, src, src_t, lo, len);
        } else if (src_t == DS_F32) {
            ds_cpu_from_f32(dst, dst_t, lo, (const float *)src + lo, len);
        } else {
            ds_cpu_to_f32(buf, src, src_t, lo, len);
            ds_cpu_from_f32(dst, dst_t, lo, buf, len);
        }
    }
    return DS_OK;
}

ds_status ds_cpu_fill(ds_backend *be, float *x, size_t n, float value) {
    DS_TRY(ds_check_ptr("cpu fill", "x", x, n));
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = value;
    return DS_OK;
}

static void scale_run(float *restrict x, size_t n, float alpha) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] = x[i] * alpha;
}

ds_status ds_cpu_scale(ds_backend *be, void *x, ds_dtype t, size_t n, float alpha) {
    DS_TRY(ds_check_float_dtype("cpu scale", "x", t));
    DS_TRY(ds_check_ptr("cpu scale", "x", x, n));
    size_t nchunks = (n + DS_CPU_CHUNK - 1) / DS_CPU_CHUNK;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * DS_CPU_CHUNK, len = chunk_len(c, n);
        if (t == DS_F32) {
            scale_run((float *)x + lo, len, alpha);
        } else {
            float buf[DS_CPU_CHUNK];
            ds_cpu_to_f32(buf, x, t, lo, len);
            scale_run(buf, len, alpha);
            ds_cpu_from_f32(x, t, lo, buf, len);
        }
    }
    return DS_OK;
}

static void axpy_run(float *restrict y, float alpha, const float *restrict x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) y[i] = fmaf(alpha, x[i], y[i]);
}

/* y in bf16 (a replica's gradients under bf16, zero/replica.c grad_done):
 * widened, added to and rounded in registers, the arithmetic of the buffer
 * passes (ds_cpu_to_f32, axpy_run, ds_cpu_from_f32) in one loop. */
static void axpy_bf16_run(uint16_t *restrict y, float alpha, const float *restrict x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        y[i] = ds_cpu_bf16_round(fmaf(alpha, x[i], ds_bf16_to_f32(y[i])));
    }
}

ds_status ds_cpu_axpy(ds_backend *be, void *y, ds_dtype yt, float alpha, const void *x,
                      ds_dtype xt, size_t n) {
    DS_TRY(ds_check_float_dtype("cpu axpy", "y", yt));
    DS_TRY(ds_check_float_dtype("cpu axpy", "x", xt));
    DS_TRY(ds_check_ptr("cpu axpy", "y", y, n));
    DS_TRY(ds_check_ptr("cpu axpy", "x", x, n));
    size_t nchunks = (n + DS_CPU_CHUNK - 1) / DS_CPU_CHUNK;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * DS_CPU_CHUNK, len = chunk_len(c, n);
        float xbuf[DS_CPU_CHUNK], ybuf[DS_CPU_CHUNK];
        const float *xs = ds_cpu_f32_view(xbuf, x, xt, lo, len);
        if (yt == DS_F32) {
            axpy_run((float *)y + lo, alpha, xs, len);
        } else if (yt == DS_BF16) {
            axpy_bf16_run((uint16_t *)y + lo, alpha, xs, len);
        } else {
            ds_cpu_to_f32(ybuf, y, yt, lo, len);
            axpy_run(ybuf, alpha, xs, len);
            ds_cpu_from_f32(y, yt, lo, ybuf, len);
        }
    }
    return DS_OK;
}

/* ---- sum of squares ----------------------------------------------------------
 * The range is cut into a fixed number of chunks whatever the thread count;
 * each chunk is summed in double in SUMSQ_LANES accumulators, element i of
 * each 2048-float piece into lane i mod SUMSQ_LANES, the lanes added by a
 * fixed tree and the chunk sums in order, so the result is the same bits at
 * any thread count, under every instruction-set variant and on every run
 * (an OpenMP reduction combines in whatever order threads finish, which
 * would make the gradient norm, hence clipping, irreproducible across a
 * resume). Sixteen lanes are two AVX-512 vectors of doubles: four scalar
 * accumulators (before stop 43) left the loop at one square per cycle or
 * so, 0.7% of the bf16 BERT-mini step; the order changes only the double
 * rounding of a sum of positive terms (within n DBL_EPSILON relative
 * either way; tests/unit/test_backend_elementwise.c).
 *
 * Non-finite detection needs no per-element test: a float squared is at most
 * 1.2e77 and 2^64 of them stay below double's 1.8e308, so the double sum is
 * finite exactly when every element is. */
#define DS_SUMSQ_CHUNKS 64
#define SUMSQ_LANES 16

/* The gradient norm streams tens of MB that the step wrote long before,
 * from memory, with little arithmetic per byte; the hardware prefetchers
 * start over at every 4 KiB page, and two thirds of sumsq_range's samples in
 * the BERT-mini step sat on its load. So it asks for the data EW_PF_AHEAD
 * floats (one page) ahead, a cache line per 16 floats: 0.9-1.0% of the step
 * -> 0.5-0.7% (bench/RESULTS.md, stop 29). A prefetch changes no arithmetic,
 * and one past the end of an array is harmless (it never faults). (The same
 * in AdamW, which divides twice per element, measured no change.) */
#define EW_PF_AHEAD 1024

/* Sum of squares of x[lo, hi) in double, SUMSQ_LANES interleaved
 * accumulators; fp16 / bf16 go through an fp32 buffer a piece at a time
 * (widening bf16 in the loop instead measured the same: 1.31 against
 * 1.28-1.49 ms for 8.77M values, bench_kernels, stop 43). */
static double sumsq_range(const void *x, ds_dtype t, size_t lo, size_t hi) {
    double acc[SUMSQ_LANES] = {0};
    float buf[DS_CPU_CHUNK];
    for (size_t start = lo; start < hi; start += DS_CPU_CHUNK) {
        size_t len = hi - start < DS_CPU_CHUNK ? hi - start : DS_CPU_CHUNK;
        const float *f = ds_cpu_f32_view(buf, x, t, start, len);
        size_t i = 0;
        for (; i + SUMSQ_LANES <= len; i += SUMSQ_LANES) { /* a line at a time */
            __builtin_prefetch(f + i + EW_PF_AHEAD, 0, 3);
#pragma omp simd
            for (int j = 0; j < SUMSQ_LANES; j++) {
                double v = f[i + j];
                acc[j] += v * v;
            }
        }
        for (int j = 0; i < len; i++, j++) {
            double v = f[i];
            acc[j] += v * v;
        }
    }
    for (int w = SUMSQ_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

ds_status ds_cpu_sumsq(ds_backend *be, const void *x, ds_dtype t, size_t n, double *out_sumsq,
                       int *out_nonfinite) {
    DS_TRY(ds_check_float_dtype("cpu sumsq", "x", t));
    DS_TRY(ds_check_ptr("cpu sumsq", "x", x, n));
    if (!out_sumsq || !out_nonfinite)
        return DS_ERR(DS_ERR_INVALID_ARG, "cpu sumsq: NULL output (out_sumsq=%p out_nonfinite=%p)",
                      (void *)out_sumsq, (void *)out_nonfinite);
    double part[DS_SUMSQ_CHUNKS];
    size_t q = n / DS_SUMSQ_CHUNKS, r = n % DS_SUMSQ_CHUNKS;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (int c = 0; c < DS_SUMSQ_CHUNKS; c++) {
        size_t uc = (size_t)c;
        size_t lo = uc * q + (uc < r ? uc : r);
        size_t hi = lo + q + (uc < r ? 1 : 0);
        part[c] = sumsq_range(x, t, lo, hi);
    }
    double total = 0.0;
    for (int c = 0; c < DS_SUMSQ_CHUNKS; c++) total += part[c];
    *out_sumsq = total;
    *out_nonfinite = isfinite(total) ? 0 : 1;
    return DS_OK;
}

/* ---- optimizers ------------------------------------------------------------ */

static void adam_run(float *restrict p, const float *restrict g, float *restrict m,
                     float *restrict v, size_t n, const ds_adam_coef *cp) {
    const ds_adam_coef c = *cp;
#pragma omp simd
    for (size_t i = 0; i < n; i++) ds_adam_update(&p[i], &m[i], &v[i], g[i], &c);
}

/* Mixed precision's AdamW: bf16 gradients (or fp32 ones) widened and the
 * updated parameters rounded into the bf16 working copy in the same loop,
 * in registers, instead of a widening pass into a buffer before and a
 * rounding pass after (ds_cpu_f32_view, ds_cpu_from_f32): the same
 * arithmetic (ds_bf16_to_f32, ds_cpu_bf16_round), so the same bits.
 * BERT-mini's 8.77M parameters at 1 thread: 5.5-5.7 -> 4.9-5.2 ms, fp32
 * AdamW 4.2-4.8 ms in the same runs (bench_kernels, RESULTS "Stop 43"). */
static inline __attribute__((always_inline)) void
adam_run_lp(float *restrict p, const void *restrict grad, bool g16, size_t lo, float *restrict m,
            float *restrict v, uint16_t *restrict lp, size_t n, const ds_adam_coef *cp) {
    const ds_adam_coef c = *cp;
    const uint16_t *restrict gh = (const uint16_t *)grad + lo;
    const float *restrict gf = (const float *)grad + lo;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float w = p[i];
        ds_adam_update(&w, &m[i], &v[i], g16 ? ds_bf16_to_f32(gh[i]) : gf[i], &c);
        p[i] = w;
        lp[i] = ds_cpu_bf16_round(w);
    }
}

ds_status ds_cpu_adam(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                      float grad_mult, float *m, float *v, size_t n, const ds_adam_hparams *hp,
                      void *param_lp, ds_dtype lp_t) {
    DS_TRY(ds_check_optim("cpu adam", param, grad, grad_t, n, hp, param_lp, lp_t));
    DS_TRY(ds_check_ptr("cpu adam", "m", m, n));
    DS_TRY(ds_check_ptr("cpu adam", "v", v, n));
    DS_TRY(ds_check_adam("cpu adam", hp->beta1, hp->beta2, hp->eps, hp->step,
                         hp->bias_correction));
    const ds_adam_coef c =
        ds_adam_coef_make(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->step,
                          hp->adam_w_mode, hp->bias_correction, grad_mult);
    size_t nchunks = (n + DS_CPU_CHUNK - 1) / DS_CPU_CHUNK;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t ch = 0; ch < nchunks; ch++) {
        size_t lo = ch * DS_CPU_CHUNK, len = chunk_len(ch, n);
        if (param_lp && lp_t == DS_BF16 && grad_t != DS_F16) {
            uint16_t *lp = (uint16_t *)param_lp + lo;
            if (grad_t == DS_BF16)
                adam_run_lp(param + lo, grad, true, lo, m + lo, v + lo, lp, len, &c);
            else
                adam_run_lp(param + lo, grad, false, lo, m + lo, v + lo, lp, len, &c);
            continue;
        }
        float gbuf[DS_CPU_CHUNK];
        const float *g = ds_cpu_f32_view(gbuf, grad, grad_t, lo, len);
        adam_run(param + lo, g, m + lo, v + lo, len, &c);
        if (param_lp) ds_cpu_from_f32(param_lp, lp_t, lo, param + lo, len);
    }
    return DS_OK;
}

static void sgd_run(float *restrict p, const float *restrict g, float *restrict buf, size_t n,
                    const ds_sgd_coef *cp) {
    const ds_sgd_coef c = *cp;
    if (buf) {
        for (size_t i = 0; i < n; i++) ds_sgd_update(&p[i], &buf[i], g[i], &c);
    } else {
        for (size_t i = 0; i < n; i++) ds_sgd_update(&p[i], NULL, g[i], &c);
    }
}

ds_status ds_cpu_sgd(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                     float grad_mult, float *momentum_buf, size_t n, const ds_sgd_hparams *hp,
                     void *param_lp, ds_dtype lp_t) {
    DS_TRY(ds_check_optim("cpu sgd", param, grad, grad_t, n, hp, param_lp, lp_t));
    DS_TRY(ds_check_sgd("cpu sgd", hp->momentum, hp->dampening, hp->nesterov));
    if (hp->momentum != 0.0f) DS_TRY(ds_check_ptr("cpu sgd", "momentum_buf", momentum_buf, n));
    const ds_sgd_coef c = ds_sgd_coef_make(hp->lr, hp->momentum, hp->dampening, hp->weight_decay,
                                           hp->nesterov, hp->first_step, grad_mult);
    /* without momentum the buffer is neither read nor written */
    float *buf = hp->momentum != 0.0f ? momentum_buf : NULL;
    size_t nchunks = (n + DS_CPU_CHUNK - 1) / DS_CPU_CHUNK;
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t ch = 0; ch < nchunks; ch++) {
        size_t lo = ch * DS_CPU_CHUNK, len = chunk_len(ch, n);
        float gbuf[DS_CPU_CHUNK];
        const float *g = ds_cpu_f32_view(gbuf, grad, grad_t, lo, len);
        sgd_run(param + lo, g, buf ? buf + lo : NULL, len, &c);
        if (param_lp) ds_cpu_from_f32(param_lp, lp_t, lo, param + lo, len);
    }
    return DS_OK;
}
