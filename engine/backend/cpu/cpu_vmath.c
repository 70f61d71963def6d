/* ds_cpu_vmath (cpu_isa.h): the element math of nn_math.h over an array,
 * compiled per instruction set like the kernels, so the accuracy test and the
 * benchmarks measure the code the kernels run under each variant. Each case
 * is one `omp simd` loop over a constant function, as in nn_act.c. */
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/nn_math.h"

void ds_cpu_vmath(ds_vmath_fn fn, float *y, const float *x, size_t n) {
    switch (fn) {
    case DS_VMATH_EXP:
        DS_SIMD
        for (size_t i = 0; i < n; i++) y[i] = ds_expf(x[i]);
        break;
    case DS_VMATH_ERF:
        DS_SIMD
        for (size_t i = 0; i < n; i++) y[i] = ds_erf_with_exp(x[i], ds_expf(-x[i] * x[i]));
        break;
    case DS_VMATH_GELU:
        DS_SIMD
        for (size_t i = 0; i < n; i++) y[i] = ds_gelu(x[i]);
        break;
    case DS_VMATH_GELU_GRAD:
        DS_SIMD
        for (size_t i = 0; i < n; i++) y[i] = ds_gelu_grad(x[i]);
        break;
    case DS_VMATH_GELU_TANH:
        DS_SIMD
        for (size_t i = 0; i < n; i++) y[i] = ds_gelu_tanh(x[i]);
        break;
    case DS_VMATH_GELU_TANH_GRAD:
        DS_SIMD
        for (size_t i = 0; i < n; i++) y[i] = ds_gelu_tanh_grad(x[i]);
        break;
    }
}
