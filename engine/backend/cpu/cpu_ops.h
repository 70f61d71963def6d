/* Private to the cpu backend: the slots of engine/backend/backend.h that
 * cpu_backend.c (memory, copies, GEMM; compiled once) and cpu_elementwise.c
 * (compiled once per instruction set, cpu_isa.h) implement, wired into one
 * table per variant by cpu_variant.c. Each has the contract of its slot in
 * backend.h. */
#ifndef DS_BACKEND_CPU_OPS_H
#define DS_BACKEND_CPU_OPS_H

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_isa.h"

/* The files compiled once per instruction set get DS_ISA_SUFFIX (_avx512,
 * _avx2, _scalar, _native) from the build, and every name they export is
 * renamed name -> name_<isa> here and in nn_cpu.h, so the variants link side
 * by side. A function added to those files and called from another file
 * needs a line here; a missing one fails the link (duplicate symbols), never
 * silently. Files compiled once see the plain names and must not call them. */
#define DS_ISA_CAT_(a, b) a##b
#define DS_ISA_CAT(a, b) DS_ISA_CAT_(a, b)
#define DS_ISA_NAME(name) DS_ISA_CAT(name, DS_ISA_SUFFIX)
#ifdef DS_ISA_SUFFIX
#define ds_cpu_kernels DS_ISA_NAME(ds_cpu_kernels)
#define ds_cpu_to_f32 DS_ISA_NAME(ds_cpu_to_f32)
#define ds_cpu_from_f32 DS_ISA_NAME(ds_cpu_from_f32)
#define ds_cpu_rng_normal DS_ISA_NAME(ds_cpu_rng_normal)
#define ds_cpu_rng_uniform DS_ISA_NAME(ds_cpu_rng_uniform)
#define ds_cpu_cast DS_ISA_NAME(ds_cpu_cast)
#define ds_cpu_fill DS_ISA_NAME(ds_cpu_fill)
#define ds_cpu_scale DS_ISA_NAME(ds_cpu_scale)
#define ds_cpu_axpy DS_ISA_NAME(ds_cpu_axpy)
#define ds_cpu_sumsq DS_ISA_NAME(ds_cpu_sumsq)
#define ds_cpu_adam DS_ISA_NAME(ds_cpu_adam)
#define ds_cpu_sgd DS_ISA_NAME(ds_cpu_sgd)
#define ds_cpu_vmath DS_ISA_NAME(ds_cpu_vmath)
#define ds_cpu_quantize_i8 DS_ISA_NAME(ds_cpu_quantize_i8)
#define ds_cpu_dequantize_i8 DS_ISA_NAME(ds_cpu_dequantize_i8)
#define ds_cpu_onebit_encode DS_ISA_NAME(ds_cpu_onebit_encode)
#define ds_cpu_onebit_decode DS_ISA_NAME(ds_cpu_onebit_decode)
#define ds_cpu_onebit_pass DS_ISA_NAME(ds_cpu_onebit_pass)
#define ds_cpu_rows_nonzero DS_ISA_NAME(ds_cpu_rows_nonzero)
#define ds_cpu_rows_gather DS_ISA_NAME(ds_cpu_rows_gather)
#define ds_cpu_rows_scatter DS_ISA_NAME(ds_cpu_rows_scatter)
#define ds_cpu_rows_sum DS_ISA_NAME(ds_cpu_rows_sum)
#define ds_cpu_quantize_i4 DS_ISA_NAME(ds_cpu_quantize_i4)
#define ds_cpu_dequantize_i4 DS_ISA_NAME(ds_cpu_dequantize_i4)
#define ds_cpu_gemm_small DS_ISA_NAME(ds_cpu_gemm_small)
#define ds_cpu_gemm_small_takes DS_ISA_NAME(ds_cpu_gemm_small_takes)
#define ds_cpu_gemm_small_bf16 DS_ISA_NAME(ds_cpu_gemm_small_bf16)
#define ds_cpu_gemm_entry DS_ISA_NAME(ds_cpu_gemm_entry)
#define ds_cpu_gemm_bias DS_ISA_NAME(ds_cpu_gemm_bias)
#define ds_cpu_gemm_dot_takes DS_ISA_NAME(ds_cpu_gemm_dot_takes)
#define ds_cpu_gemm_dot DS_ISA_NAME(ds_cpu_gemm_dot)
#endif

/* The team size of the calling thread's loops: be->num_threads, or 1 on a
 * thread that ds_backend_thread_serial(true) marked (backend.h says why). */
static inline int ds_cpu_team(const ds_backend *be) {
    if (ds_backend_thread_is_serial()) return 1;
    return be && be->num_threads > 0 ? be->num_threads : 1;
}

/* ---- compiled once (cpu_backend.c) ---- */

/* Products of at most this many flops are "small": in a batch, OpenBLAS runs
 * them one per thread rather than one after another with OpenBLAS splitting
 * each (attention's 128 x 128 x 64 blocks are too small to split well;
 * bench/bench_gemm.c measures both), and cpu_gemm_small.c takes the ones its
 * kernel handles. */
#define DS_CPU_GEMM_SMALL_FLOPS (16.0 * 1024 * 1024)

ds_status ds_cpu_alloc(ds_backend *be, size_t bytes, ds_mem_place place, void **out);
void ds_cpu_free(ds_backend *be, void *ptr, ds_mem_place place);
ds_status ds_cpu_memcpy(ds_backend *be, void *dst, const void *src, size_t bytes,
                        ds_copy_kind kind, ds_stream *stream);
ds_status ds_cpu_memset(ds_backend *be, void *dst, int value, size_t bytes, ds_stream *stream);
ds_status ds_cpu_sync(ds_backend *be);
ds_status ds_cpu_gemm(ds_backend *be, bool transa, bool transb, int m, int n, int k, float alpha,
                      const float *A, int lda, int64_t strideA, const float *B, int ldb,
                      int64_t strideB, float beta, float *C, int ldc, int64_t strideC, int batch);
void ds_cpu_destroy(ds_backend *be);

/* ---- compiled once per instruction set ---- */

/* Element counts below this run on the calling thread: starting an OpenMP
 * team costs a few microseconds, more than 16k element updates. */
#define DS_CPU_PAR_MIN ((size_t)1 << 14)

/* Element-wise loops work in chunks of this many elements: threads take
 * whole chunks, and a chunk of fp16 / bf16 input is converted into an fp32
 * buffer on the stack (8 KiB) before the arithmetic, which then runs over
 * plain float arrays the compiler can vectorise. */
#define DS_CPU_CHUNK ((size_t)2048)

/* The bits of ds_round_bf16(x) from the bits u of x (ds_f32_to_bf16 is
 * their top half), written without a branch so that a loop of them
 * vectorises at the variant's width: round to nearest even is adding 0x7fff
 * plus the lowest kept bit and dropping the low 16 bits; a NaN keeps its top
 * bits with the quiet bit set. No fp32 value that is not a NaN carries into
 * the sign (the largest, -inf, is 0xff800000). */
static inline uint32_t ds_cpu_bf16_round_bits(uint32_t u) {
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
}

/* ds_f32_to_bf16(x), branch-free as above (the loops that write a bf16
 * copy: casts, mixed precision's AdamW and gradient accumulation). */
static inline uint16_t ds_cpu_bf16_round(float x) {
    return (uint16_t)(ds_cpu_bf16_round_bits(ds_f32_bits(x)) >> 16);
}

/* fp32 elements read and written as their bits (may_alias: the arrays are
 * float arrays, and the compiler must not assume otherwise). */
typedef uint32_t __attribute__((may_alias)) ds_cpu_f32_bits;

/* dst[i] = src[first + i] as fp32, for i < n (cpu_convert.c). */
void ds_cpu_to_f32(float *restrict dst, const void *src, ds_dtype t, size_t first, size_t n);

/* The fp32 values of src[lo, lo + len): src itself when it is fp32, else
 * converted into buf (len <= DS_CPU_CHUNK). */
static inline const float *ds_cpu_f32_view(float *buf, const void *src, ds_dtype t, size_t lo,
                                           size_t len) {
    if (t == DS_F32) return (const float *)src + lo;
    ds_cpu_to_f32(buf, src, t, lo, len);
    return buf;
}
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

/* cpu_quant.c: blockwise int8 (ZeRO++ qwZ). */
ds_status ds_cpu_quantize_i8(ds_backend *be, int8_t *q, float *scales, const void *x, ds_dtype t,
                             size_t n, size_t block);
ds_status ds_cpu_dequantize_i8(ds_backend *be, float *y, const int8_t *q, const float *scales,
                               size_t n, size_t block);
/* cpu_quant.c: blockwise int4, DeepSpeed's arithmetic (its qgZ). */
ds_status ds_cpu_quantize_i4(ds_backend *be, uint8_t *q, float *scales, const void *x,
                             ds_dtype t, size_t n, size_t block);
ds_status ds_cpu_dequantize_i4(ds_backend *be, float *y, const uint8_t *q, const float *scales,
                               size_t n, size_t block);

/* cpu_onebit.c: the 1-bit code and the passes of 1-bit / 0/1 Adam. */
ds_status ds_cpu_onebit_encode(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                               void *wire, size_t stride);
ds_status ds_cpu_onebit_decode(ds_backend *be, const void *wire, size_t n, float alpha,
                               bool accumulate, float *out);
ds_status ds_cpu_onebit_pass(ds_backend *be, const struct ds_onebit_pass *p);

/* cpu_rows.c: row-sparse gradients' scan, gather and sums. */
ds_status ds_cpu_rows_nonzero(ds_backend *be, const struct ds_rows_view *v, int64_t r0,
                              int64_t r1, uint8_t *flags);
ds_status ds_cpu_rows_gather(ds_backend *be, const struct ds_rows_view *v, const void *idx,
                             int64_t n, void *dst);
ds_status ds_cpu_rows_scatter(ds_backend *be, const struct ds_rows_view *v, const void *idx,
                              int64_t n, const void *src);
ds_status ds_cpu_rows_sum(ds_backend *be, const struct ds_rows_sum *s);

/* cpu_gemm_small.c: the variant's gemm slot (backend.h's contract): small
 * products with alpha 1, beta 0 in the variant's own kernel, the rest
 * through ds_cpu_gemm (OpenBLAS). */
ds_status ds_cpu_gemm_small(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                            float alpha, const float *A, int lda, int64_t strideA, const float *B,
                            int ldb, int64_t strideB, float beta, float *C, int ldc,
                            int64_t strideC, int batch);
/* Whether ds_cpu_gemm_small runs a call of this shape in its own kernel (a
 * function of the shape only, see cpu_gemm_small.c). */
bool ds_cpu_gemm_small_takes(int m, int n, int k, float alpha, float beta, int batch);
/* A call ds_cpu_gemm_small_takes (alpha 1, beta 0) with bf16 inputs: the own
 * kernel rounds A and B as it copies them into its blocks and panels, the
 * same bits as rounding them first. */
ds_status ds_cpu_gemm_small_bf16(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                                 const float *A, int lda, int64_t strideA, const float *B,
                                 int ldb, int64_t strideB, float *C, int ldc, int64_t strideC,
                                 int batch);

/* cpu_gemm_dot.c: bf16-input products on the CPU's bf16 dot-product
 * instruction (AVX512-BF16). Whether this variant on this CPU takes a call
 * with these m, n, k, alpha and beta whose workspace (ds_gemm_workspace_of)
 * has ws_bytes, whatever the thread count (the same path, so the same bits,
 * at any); then ds_cpu_gemm_dot computes it with that workspace at ws
 * (arguments checked by the caller), bias (NULL: none; with beta 0) added
 * to every row of C as gemm_bias says (backend.h). */
bool ds_cpu_gemm_dot_takes(int m, int n, int k, float alpha, float beta, size_t ws_bytes);
ds_status ds_cpu_gemm_dot(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                          const float *A, int lda, int64_t strideA, const float *B, int ldb,
                          int64_t strideB, float beta, const float *bias, float *C, int ldc,
                          int64_t strideC, int batch, void *ws, size_t ws_bytes);

/* cpu_gemm_bf16.c: the variant's gemm slot. With be->gemm_inputs DS_BF16,
 * a call ds_cpu_gemm_dot_takes goes to the bf16 dot product; else a call the
 * own kernel takes to ds_cpu_gemm_small_bf16 (rounding as it copies); for
 * any other, A and B are rounded to bf16 into the backend's GEMM workspace
 * (packed, ds_gemm_workspace_of; backend.h) and the product runs on those
 * copies through ds_cpu_gemm_small (OpenBLAS). DS_F32 calls go to
 * ds_cpu_gemm_small directly. */
ds_status ds_cpu_gemm_entry(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                            float alpha, const float *A, int lda, int64_t strideA, const float *B,
                            int ldb, int64_t strideB, float beta, float *C, int ldc,
                            int64_t strideC, int batch);

/* cpu_gemm_bf16.c: the variant's gemm_bias slot (backend.h). A call the
 * bf16 dot product takes starts its sums from the bias; any other writes
 * the bias rows and runs ds_cpu_gemm_entry with beta 1 (the fill takes the
 * place of OpenBLAS's clearing of C for beta 0). */
ds_status ds_cpu_gemm_bias(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                           const float *A, int lda, const float *B, int ldb, const float *bias,
                           float *C);

/* cpu_vmath.c: the ds_cpu_variant.vmath of this variant (cpu_isa.h). */
void ds_cpu_vmath(ds_vmath_fn fn, float *y, const float *x, size_t n);

#endif /* DS_BACKEND_CPU_OPS_H */
