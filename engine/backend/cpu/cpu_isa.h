/* Private to the cpu backend: run-time choice of the kernels' instruction set.
 *
 * The hot files of the cpu backend (every .c file of engine/backend/cpu except
 * cpu_backend.c and cpu_isa.c) are compiled once per instruction-set level in
 * one build (CMakeLists.txt, "cpu kernels, once per instruction set"):
 *
 *   avx512  -march=x86-64-v4  (AVX-512 F/BW/CD/DQ/VL, plus everything of v3)
 *   avx2    -march=x86-64-v3  (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE)
 *   scalar  -march=x86-64     (SSE2: any x86-64; fmaf is a libm call)
 *
 * (a build with DS_NATIVE=ON has one variant, "native", compiled for the
 * build host; a non-x86 build has "scalar" alone, with the compiler's default
 * flags). Each compilation gives its exported names the suffix _<isa>
 * (DS_ISA_NAME, cpu_ops.h / nn_cpu.h) and its own tables (cpu_variant.c), so
 * the variants link side by side. ds_backend_cpu_init picks one variant per
 * backend from the CPU's flags (the widest the CPU runs), or from the
 * environment variable DS_CPU_ISA (avx512 | avx2 | scalar | native | auto),
 * for tests and benchmarks; the backend's name says which ("cpu/avx2"), and
 * the engine's start-up line prints that name.
 *
 * Same bits. Every variant computes the same IEEE operations in the same
 * order: the whole build has -ffp-contract=off (no product is fused with an
 * addition unless the code says fmaf, which is exactly rounded everywhere),
 * and the reductions that vector widths would reorder sum into a fixed number
 * of lanes (nn_math.h, DS_LANES). tests/unit/test_cpu_isa.c checks the
 * element-wise slots, the optimizers and every model kernel bit for bit across
 * the variants this host runs. The small GEMMs (attention's per-head
 * products, cpu_gemm_small.c) are each variant's own kernel with one fma chain
 * per element, the same bits on every variant and host with FMA (test_cpu_isa
 * checks them too); the others are OpenBLAS's, which chooses its own kernel
 * from the CPU and rounds differently per kernel: hosts of different kinds
 * give the same bits only with OPENBLAS_CORETYPE pinned to a kernel all of
 * them run (Haswell for AVX2 and later). */
#ifndef DS_BACKEND_CPU_ISA_H
#define DS_BACKEND_CPU_ISA_H

#include <stddef.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"

/* The element functions of nn_math.h that ds_cpu_vmath evaluates. */
typedef enum ds_vmath_fn {
    DS_VMATH_EXP = 0,       /* ds_expf(x) */
    DS_VMATH_ERF,           /* ds_erf_with_exp(x, ds_expf(-x*x)) */
    DS_VMATH_GELU,          /* ds_gelu(x), erf form */
    DS_VMATH_GELU_GRAD,     /* ds_gelu_grad(x) */
    DS_VMATH_GELU_TANH,     /* ds_gelu_tanh(x) */
    DS_VMATH_GELU_TANH_GRAD /* ds_gelu_tanh_grad(x) */
} ds_vmath_fn;

/* One compiled variant of the cpu kernels. */
typedef struct ds_cpu_variant {
    const char *isa;           /* "avx512", "avx2", "scalar" or "native" */
    const ds_backend_ops *ops; /* name "cpu/<isa>" */
    const ds_nn_ops *nn;
    /* y[i] = fn(x[i]) for i < n, in a loop vectorised as the kernels' own:
     * the element math of the model kernels under this variant, for the
     * accuracy test (tests/unit/test_vmath.c) and benchmarks. */
    void (*vmath)(ds_vmath_fn fn, float *y, const float *x, size_t n);
} ds_cpu_variant;

/* The variant a new cpu backend uses: DS_CPU_ISA when it is set (and not
 * "auto"), else the widest variant the CPU runs. Fails with
 * DS_ERR_INVALID_ARG for an unknown name, DS_ERR_UNSUPPORTED for a variant
 * this build lacks or this CPU cannot run (the message lists what can). */
ds_status ds_cpu_variant_pick(const ds_cpu_variant **out);

/* The variant called `isa` if this build has it and this CPU runs it, else
 * NULL. */
const ds_cpu_variant *ds_cpu_variant_find(const char *isa);

/* The names of this build's variants, widest first, NULL-terminated (tests
 * run each one the host supports). */
extern const char *const ds_cpu_isa_names[];

#endif /* DS_BACKEND_CPU_ISA_H */
