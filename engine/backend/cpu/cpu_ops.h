/* Private to the cpu backend: the slots of engine/backend/backend.h that
 * cpu_elementwise.c implements, wired into the table by cpu_backend.c.
 * Each has the contract of its slot in backend.h. */
#ifndef DS_BACKEND_CPU_OPS_H
#define DS_BACKEND_CPU_OPS_H

#include "engine/backend/backend.h"

/* Element counts below this run on the calling thread: starting an OpenMP
 * team costs a few microseconds, more than 16k element updates. */
#define DS_CPU_PAR_MIN ((size_t)1 << 14)

/* Element-wise loops work in chunks of this many elements: threads take
 * whole chunks, and a chunk of fp16 / bf16 input is converted into an fp32
 * buffer on the stack (8 KiB) before the arithmetic, which then runs over
 * plain float arrays the compiler can vectorise. */
#define DS_CPU_CHUNK ((size_t)2048)

/* dst[i] = src[first + i] as fp32, for i < n (cpu_convert.c). */
void ds_cpu_to_f32(float *restrict dst, const void *src, ds_dtype t, size_t first, size_t n);
/* dst[first + i] = src[i] rounded to t, for i < n. */
void ds_cpu_from_f32(void *dst, ds_dtype t, size_t first, const float *restrict src, size_t n);

ds_status ds_cpu_rng_normal(ds_backend *be, float *dst, size_t n, float mean, float std,
                            uint64_t seed, uint64_t offset);
ds_status ds_cpu_rng_uniform(ds_backend *be, float *dst, size_t n, float lo, float hi,
                             uint64_t seed, uint64_t offset);
ds_status ds_cpu_cast(ds_backend *be, void *dst, ds_dtype dst_t, const void *src, ds_dtype src_t,
                      size_t n);
ds_status ds_cpu_fill(ds_backend *be, float *x, size_t n, float value);
ds_status ds_cpu_scale(ds_backend *be, void *x, ds_dtype t, size_t n, float alpha);
ds_status ds_cpu_axpy(ds_backend *be, void *y, ds_dtype yt, float alpha, const void *x,
                      ds_dtype xt, size_t n);
ds_status ds_cpu_sumsq(ds_backend *be, const void *x, ds_dtype t, size_t n, double *out_sumsq,
                       int *out_nonfinite);
ds_status ds_cpu_adam(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                      float grad_mult, float *m, float *v, size_t n, const ds_adam_hparams *hp,
                      void *param_lp, ds_dtype lp_t);
ds_status ds_cpu_sgd(ds_backend *be, float *param, const void *grad, ds_dtype grad_t,
                     float grad_mult, float *momentum_buf, size_t n, const ds_sgd_hparams *hp,
                     void *param_lp, ds_dtype lp_t);

#endif /* DS_BACKEND_CPU_OPS_H */
