/* Element types and the fp16/bf16 conversions.
 *
 * The conversions are `static inline` and marked DS_HD so the same code runs
 * in the cpu loops and in the CUDA kernels: the cpu tests check the exact
 * rounding the GPU performs. Both round to nearest even, keep NaN a NaN and
 * overflow fp16 to +-inf (which is what dynamic loss scaling detects). */
#ifndef DS_CORE_DTYPE_H
#define DS_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DS_HD __host__ __device__ __forceinline__
#else
#define DS_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_dtype {
    DS_F32 = 0,
    DS_F16,
    DS_BF16,
    DS_F64,
    DS_I32,
    DS_I64,
    DS_U8,
    DS_DTYPE_COUNT
} ds_dtype;

/* Bytes per element; 0 for an invalid value. */
static inline size_t ds_dtype_size(ds_dtype t) {
    switch (t) {
    case DS_F32: return 4;
    case DS_F16: return 2;
    case DS_BF16: return 2;
    case DS_F64: return 8;
    case DS_I32: return 4;
    case DS_I64: return 8;
    case DS_U8: return 1;
    default: return 0;
    }
}

/* "fp32", "fp16", "bf16", ... */
static inline const char *ds_dtype_name(ds_dtype t) {
    switch (t) {
    case DS_F32: return "fp32";
    case DS_F16: return "fp16";
    case DS_BF16: return "bf16";
    case DS_F64: return "fp64";
    case DS_I32: return "int32";
    case DS_I64: return "int64";
    case DS_U8: return "uint8";
    default: return "?";
    }
}

DS_HD uint32_t ds_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

DS_HD float ds_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> bf16, round to nearest even; NaN stays a quiet NaN. */
DS_HD uint16_t ds_f32_to_bf16(float f) {
    uint32_t u = ds_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

DS_HD float ds_bf16_to_f32(uint16_t h) { return ds_bits_f32((uint32_t)h << 16); }

/* fp32 -> IEEE half, round to nearest even, overflow to inf, subnormals kept. */
DS_HD uint16_t ds_f32_to_f16(float f) {
    uint32_t u = ds_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* >= 65520: inf */
    if (abs < 0x38800000u) {                                           /* < 2^-14: subnormal */
        if (abs < 0x33000000u) return (uint16_t)sign;                  /* < 2^-25: zero */
        uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
        int shift = 126 - (int)(abs >> 23);                            /* 14..24 */
        uint32_t halfway = 1u << (shift - 1);
        uint32_t rest = mant & ((1u << shift) - 1u);
        uint32_t h = mant >> shift;
        if (rest > halfway || (rest == halfway && (h & 1u))) h += 1u;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((abs - 0x38000000u) >> 13);                          /* rebias 127 -> 15 */
    uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1u;
    return (uint16_t)(sign | h);
}

DS_HD float ds_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu) return ds_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return ds_bits_f32(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return ds_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Load element i of a buffer of type t as fp32 (F32, F16, BF16 only). */
DS_HD float ds_load_f32(const void *p, ds_dtype t, size_t i) {
    if (t == DS_F16) return ds_f16_to_f32(((const uint16_t *)p)[i]);
    if (t == DS_BF16) return ds_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Store fp32 value v as element i of a buffer of type t (F32, F16, BF16). */
DS_HD void ds_store_f32(void *p, ds_dtype t, size_t i, float v) {
    if (t == DS_F16) ((uint16_t *)p)[i] = ds_f32_to_f16(v);
    else if (t == DS_BF16) ((uint16_t *)p)[i] = ds_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_DTYPE_H */
