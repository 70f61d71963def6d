/* The host reduction loop of the MPI ring: one pass per received chunk.
 *
 * The op is hoisted out of the loop so each (type, op) pair is a straight loop
 * the compiler vectorises (the pragma says so; dst == a exactly is allowed,
 * each i reads before it writes its own element only). This pass and the copy
 * MPI does are the whole cost of a ring step on a host. */
#include "engine/comm/reduce.h"

#define DS_REDUCE_LOOP(T, FN, OP)                                                              \
    do {                                                                                       \
        T *d_ = (T *)dst;                                                                      \
        const T *x_ = (const T *)a, *y_ = (const T *)b;                                        \
        _Pragma("omp simd") for (size_t i = 0; i < n; i++) d_[i] = FN(x_[i], y_[i], OP);      \
    } while (0)

#define DS_REDUCE_OPS(T, FN)                                                                   \
    do {                                                                                       \
        switch (op) {                                                                          \
        case DS_REDUCE_SUM: DS_REDUCE_LOOP(T, FN, DS_REDUCE_SUM); break;                       \
        case DS_REDUCE_MAX: DS_REDUCE_LOOP(T, FN, DS_REDUCE_MAX); break;                       \
        default: DS_REDUCE_LOOP(T, FN, DS_REDUCE_MIN); break;                                  \
        }                                                                                      \
    } while (0)

void ds_comm_reduce(void *dst, const void *a, const void *b, size_t n, ds_dtype t,
                    ds_reduce_op op) {
    switch (t) {
    case DS_F32: DS_REDUCE_OPS(float, ds_reduce_f32); break;
    case DS_F64: DS_REDUCE_OPS(double, ds_reduce_f64); break;
    case DS_F16: DS_REDUCE_OPS(uint16_t, ds_reduce_f16); break;
    case DS_BF16: DS_REDUCE_OPS(uint16_t, ds_reduce_bf16); break;
    case DS_I32: DS_REDUCE_OPS(int32_t, ds_reduce_i32); break;
    case DS_I64: DS_REDUCE_OPS(int64_t, ds_reduce_i64); break;
    case DS_U8: DS_REDUCE_OPS(uint8_t, ds_reduce_u8); break;
    default: DS_ASSERT(0 && "dtype validated by the caller"); break;
    }
}
