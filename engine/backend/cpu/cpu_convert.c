/* Bulk fp32 <-> fp16 / bf16 conversion of runs of elements for the cpu
 * loops: the same bits as the scalar ds_f32_to_f16 & co. of
 * engine/core/dtype.h (which the CUDA kernels run), only faster.
 *
 * With F16C (any x86-64 since 2013: the avx2 and avx512 variants of the
 * kernels, cpu_isa.h; the scalar variant runs the scalar code) fp16 goes
 * through vcvtps2ph / vcvtph2ps, 8 at a time: both round to nearest even,
 * overflow to inf and keep subnormals exactly as the scalar code does
 * (tests/unit/test_dtype.c checks the scalar code against the hardware
 * conversion). They differ only in NaN payloads, so a group of 8 holding a NaN
 * is redone with the scalar code. bf16 is a shift one way and a rounding add
 * the other, in loops the compiler vectorises (ds_cpu_bf16_round_bits: the
 * scalar code's branch for NaN kept the loop scalar, at 35% of the memory's
 * bandwidth, bench_kernels on Zen 4). */
#include <string.h>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define DS_HAVE_F16C 1
#endif

#include "engine/backend/cpu/cpu_ops.h"

static void f32_to_f16_run(uint16_t *restrict dst, const float *restrict src, size_t n) {
    size_t i = 0;
#ifdef DS_HAVE_F16C
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
            for (size_t j = i; j < i + 8; j++) dst[j] = ds_f32_to_f16(src[j]);
    }
#endif
    for (; i < n; i++) dst[i] = ds_f32_to_f16(src[i]);
}

static void f16_to_f32_run(float *restrict dst, const uint16_t *restrict src, size_t n) {
    size_t i = 0;
#ifdef DS_HAVE_F16C
    for (; i + 8 <= n; i += 8) {
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, y);
        if (_mm256_movemask_ps(_mm256_cmp_ps(y, y, _CMP_UNORD_Q)))
            for (size_t j = i; j < i + 8; j++) dst[j] = ds_f16_to_f32(src[j]);
    }
#endif
    for (; i < n; i++) dst[i] = ds_f16_to_f32(src[i]);
}

void ds_cpu_to_f32(float *restrict dst, const void *src, ds_dtype t, size_t first, size_t n) {
    if (t == DS_F32) {
        if (dst != (const float *)src + first)
            memcpy(dst, (const float *)src + first, n * sizeof(float));
    } else if (t == DS_F16) {
        f16_to_f32_run(dst, (const uint16_t *)src + first, n);
    } else {
        const uint16_t *s = (const uint16_t *)src + first;
        ds_cpu_f32_bits *restrict d = (ds_cpu_f32_bits *)dst;
#pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] = (uint32_t)s[i] << 16;
    }
}

void ds_cpu_from_f32(void *dst, ds_dtype t, size_t first, const float *restrict src, size_t n) {
    if (t == DS_F32) {
        if ((float *)dst + first != src) memcpy((float *)dst + first, src, n * sizeof(float));
    } else if (t == DS_F16) {
        f32_to_f16_run((uint16_t *)dst + first, src, n);
    } else {
        uint16_t *restrict d = (uint16_t *)dst + first;
#pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] = ds_cpu_bf16_round(src[i]);
    }
}
