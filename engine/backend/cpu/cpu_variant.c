/* The backend table and the variant record (cpu_isa.h) of one instruction
 * set. Compiled once per variant with DS_ISA_SUFFIX and DS_ISA_LABEL (the
 * variant's name as a string) from the build: the element-wise and model
 * slots are this variant's (renamed, cpu_ops.h / nn_cpu.h), and so is the
 * GEMM slot (bf16 inputs rounded, cpu_gemm_bf16.c; small products,
 * cpu_gemm_small.c; the rest OpenBLAS through cpu_backend.c); memory and
 * copies are the shared ones of cpu_backend.c. */
#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/nn_cpu.h"

#ifndef DS_ISA_LABEL
#error "cpu_variant.c is compiled once per instruction set, with DS_ISA_SUFFIX and DS_ISA_LABEL"
#endif

static const ds_backend_ops k_ops = {
    .name = "cpu/" DS_ISA_LABEL,
    .alloc = ds_cpu_alloc,
    .free = ds_cpu_free,
    .memcpy = ds_cpu_memcpy,
    .memset = ds_cpu_memset,
    .sync = ds_cpu_sync,
    /* streams and events: OPTIONAL, NULL (everything is synchronous) */
    .gemm = ds_cpu_gemm_entry, /* bf16 inputs rounded, then its own kernel or ds_cpu_gemm */
    .gemm_bias = ds_cpu_gemm_bias,
    .rng_normal = ds_cpu_rng_normal,
    .rng_uniform = ds_cpu_rng_uniform,
    .cast = ds_cpu_cast,
    .fill = ds_cpu_fill,
    .scale = ds_cpu_scale,
    .axpy = ds_cpu_axpy,
    .sumsq = ds_cpu_sumsq,
    .adam = ds_cpu_adam,
    .sgd = ds_cpu_sgd,
    .quantize_i8 = ds_cpu_quantize_i8,
    .dequantize_i8 = ds_cpu_dequantize_i8,
    .quantize_i4 = ds_cpu_quantize_i4,
    .dequantize_i4 = ds_cpu_dequantize_i4,
    .onebit_encode = ds_cpu_onebit_encode,
    .onebit_decode = ds_cpu_onebit_decode,
    .onebit_pass = ds_cpu_onebit_pass,
    .rows_nonzero = ds_cpu_rows_nonzero,
    .rows_gather = ds_cpu_rows_gather,
    .rows_scatter = ds_cpu_rows_scatter,
    .rows_sum = ds_cpu_rows_sum,
    .destroy = ds_cpu_destroy,
};

const ds_cpu_variant ds_cpu_kernels = {
    .isa = DS_ISA_LABEL,
    .ops = &k_ops,
    .nn = &ds_nn_cpu,
    .vmath = ds_cpu_vmath,
};
