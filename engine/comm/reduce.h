/* Inside engine/comm only: the element-wise reduction of two values.
 *
 * Written once as DS_HD functions, so the host ring (reduce.c) and the MPI
 * user ops for the host helpers share the arithmetic, as a CUDA kernel would.
 * fp16/bf16 are widened to fp32, combined, and rounded once (round to nearest
 * even, engine/core/dtype.h): per hop, exactly what NCCL does. MAX and MIN
 * propagate NaN, so an overflow seen on one rank is seen on all. Integer SUM
 * wraps (computed unsigned: signed overflow would be undefined). */
#ifndef DS_COMM_REDUCE_H
#define DS_COMM_REDUCE_H

#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/core/dtype.h"

DS_HD float ds_reduce_f32(float a, float b, ds_reduce_op op) {
    if (op == DS_REDUCE_SUM) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    if (op == DS_REDUCE_MAX) return a > b ? a : b;
    return a < b ? a : b;
}

DS_HD double ds_reduce_f64(double a, double b, ds_reduce_op op) {
    if (op == DS_REDUCE_SUM) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    if (op == DS_REDUCE_MAX) return a > b ? a : b;
    return a < b ? a : b;
}

DS_HD uint16_t ds_reduce_f16(uint16_t a, uint16_t b, ds_reduce_op op) {
    return ds_f32_to_f16(ds_reduce_f32(ds_f16_to_f32(a), ds_f16_to_f32(b), op));
}

DS_HD uint16_t ds_reduce_bf16(uint16_t a, uint16_t b, ds_reduce_op op) {
    return ds_f32_to_bf16(ds_reduce_f32(ds_bf16_to_f32(a), ds_bf16_to_f32(b), op));
}

DS_HD int32_t ds_reduce_i32(int32_t a, int32_t b, ds_reduce_op op) {
    if (op == DS_REDUCE_SUM) return (int32_t)((uint32_t)a + (uint32_t)b);
    if (op == DS_REDUCE_MAX) return a > b ? a : b;
    return a < b ? a : b;
}

DS_HD int64_t ds_reduce_i64(int64_t a, int64_t b, ds_reduce_op op) {
    if (op == DS_REDUCE_SUM) return (int64_t)((uint64_t)a + (uint64_t)b);
    if (op == DS_REDUCE_MAX) return a > b ? a : b;
    return a < b ? a : b;
}

DS_HD uint8_t ds_reduce_u8(uint8_t a, uint8_t b, ds_reduce_op op) {
    if (op == DS_REDUCE_SUM) return (uint8_t)(a + b);
    if (op == DS_REDUCE_MAX) return a > b ? a : b;
    return a < b ? a : b;
}

/* dst[i] = a[i] (op) b[i] for i < n. dst may be a (exactly), never a partial
 * overlap; b never overlaps dst. Host loop in reduce.c. */
void ds_comm_reduce(void *dst, const void *a, const void *b, size_t n, ds_dtype t,
                    ds_reduce_op op);

#endif /* DS_COMM_REDUCE_H */
