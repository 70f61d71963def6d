/* The cpu backend's quantization slots (backend.h): blockwise symmetric int8
 * of ZeRO++ qwZ, and int4 in DeepSpeed's arithmetic (its qgZ, math.h 2c).
 * Each block is one work item (threads take whole blocks), and its
 * arithmetic is the DS_HD functions of engine/backend/math.h (2b, 2c) that
 * the CUDA kernels call, so both backends produce the same bytes. The block's
 * max is a max, so its value does not depend on the order it is taken in:
 * the result is the same at 1 or N threads and in every ISA variant. */
#include <math.h>
#include <omp.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/math.h"

/* The block's largest magnitude (math.h 2b: the max both codecs scale by).
 * fp16 / bf16 input is widened in chunks on the stack (cpu_convert.c), like
 * the element-wise loops. */
static float block_absmax(const void *x, ds_dtype t, size_t lo, size_t len) {
    float buf[DS_CPU_CHUNK];
    float m = 0.0f;
    for (size_t c = 0; c < len; c += DS_CPU_CHUNK) {
        size_t k = len - c < DS_CPU_CHUNK ? len - c : DS_CPU_CHUNK;
        const float *v = ds_cpu_f32_view(buf, x, t, lo + c, k);
        for (size_t i = 0; i < k; i++) m = ds_q8_absmax_acc(m, v[i]);
    }
    return m;
}

/* One block: the max, the scale, the values. */
static void quantize_block(void *qv, float *scale, const void *x, ds_dtype t, size_t lo,
                           size_t len) {
    int8_t *q = qv;
    float buf[DS_CPU_CHUNK];
    float m = block_absmax(x, t, lo, len);
    float inv = ds_q8_inv(m);
    *scale = ds_q8_step(m);
    for (size_t c = 0; c < len; c += DS_CPU_CHUNK) {
        size_t k = len - c < DS_CPU_CHUNK ? len - c : DS_CPU_CHUNK;
        const float *v = ds_cpu_f32_view(buf, x, t, lo + c, k);
        int8_t *out = q + lo + c;
#pragma omp simd
        for (size_t i = 0; i < k; i++) out[i] = ds_q8_quantize(v[i], inv);
    }
}

/* Every block of x (threads take whole blocks) through one codec's block
 * function: the max, the scale and the values of [lo, lo + len). */
typedef void (*quantize_block_fn)(void *q, float *scale, const void *x, ds_dtype t, size_t lo,
                                  size_t len);

static void quantize_blocks(ds_backend *be, quantize_block_fn fn, void *q, float *scales,
                            const void *x, ds_dtype t, size_t n, size_t block) {
    size_t nb = ds_q8_nblocks(n, block);
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, len = n - lo < block ? n - lo : block;
        fn(q, &scales[b], x, t, lo, len);
    }
}

ds_status ds_cpu_quantize_i8(ds_backend *be, int8_t *q, float *scales, const void *x, ds_dtype t,
                             size_t n, size_t block) {
    DS_TRY(ds_check_float_dtype("cpu quantize_i8", "x", t));
    DS_TRY(ds_check_q8("cpu quantize_i8", "x", x, q, scales, n, block));
    if (n > 0) quantize_blocks(be, quantize_block, q, scales, x, t, n, block);
    return DS_OK;
}

ds_status ds_cpu_dequantize_i8(ds_backend *be, float *y, const int8_t *q, const float *scales,
                               size_t n, size_t block) {
    DS_TRY(ds_check_q8("cpu dequantize_i8", "y", y, q, scales, n, block));
    if (n == 0) return DS_OK;
    size_t nb = ds_q8_nblocks(n, block);
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, len = n - lo < block ? n - lo : block;
        float step = scales[b];
#pragma omp simd
        for (size_t i = lo; i < lo + len; i++) y[i] = ds_q8_dequantize(q[i], step);
    }
    return DS_OK;
}

/* int4 (math.h 2c): one block, two values a byte. block is even, so the
 * block starts on a byte; a chunk of DS_CPU_CHUNK (even) values too. */
static void quantize_block_i4(void *qv, float *scale, const void *x, ds_dtype t, size_t lo,
                              size_t len) {
    uint8_t *q = qv;
    float buf[DS_CPU_CHUNK];
    float m = block_absmax(x, t, lo, len);
    float mult = ds_q4_mult(m);
    *scale = ds_q4_step(mult);
    for (size_t c = 0; c < len; c += DS_CPU_CHUNK) {
        size_t k = len - c < DS_CPU_CHUNK ? len - c : DS_CPU_CHUNK;
        const float *v = ds_cpu_f32_view(buf, x, t, lo + c, k);
        uint8_t *out = q + (lo + c) / 2;
#pragma omp simd
        for (size_t j = 0; j < k / 2; j++) /* a byte: two values */
            out[j] = ds_q4_pack(ds_q4_quantize(v[2 * j], mult),
                                ds_q4_quantize(v[2 * j + 1], mult));
        if (k % 2) out[k / 2] = ds_q4_pack(ds_q4_quantize(v[k - 1], mult), 0);
    }
}

ds_status ds_cpu_quantize_i4(ds_backend *be, uint8_t *q, float *scales, const void *x, ds_dtype t,
                             size_t n, size_t block) {
    DS_TRY(ds_check_float_dtype("cpu quantize_i4", "x", t));
    DS_TRY(ds_check_q4("cpu quantize_i4", "x", x, q, scales, n, block));
    if (n > 0) quantize_blocks(be, quantize_block_i4, q, scales, x, t, n, block);
    return DS_OK;
}

ds_status ds_cpu_dequantize_i4(ds_backend *be, float *y, const uint8_t *q, const float *scales,
                               size_t n, size_t block) {
    DS_TRY(ds_check_q4("cpu dequantize_i4", "y", y, q, scales, n, block));
    if (n == 0) return DS_OK;
    size_t nb = ds_q8_nblocks(n, block);
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, len = n - lo < block ? n - lo : block;
        float step = scales[b];
        const uint8_t *qb = q + lo / 2; /* lo is even: the block starts on a byte */
        float *yb = y + lo;
#pragma omp simd
        for (size_t j = 0; j < len / 2; j++) { /* a byte: two values */
            yb[2 * j] = ds_q4_dequantize(ds_q4_signed((unsigned)qb[j] >> 4), step);
            yb[2 * j + 1] = ds_q4_dequantize(ds_q4_signed(qb[j] & 15u), step);
        }
        if (len % 2) yb[len - 1] = ds_q4_dequantize(ds_q4_unpack(q, lo + len - 1), step);
    }
    return DS_OK;
}
