/* Which compiled variant of the cpu kernels runs here (cpu_isa.h).
 *
 * Compiled once, for the baseline. The build says which variants it has
 * (CMakeLists.txt): DS_CPU_VARIANTS_X86 (avx512, avx2, scalar),
 * DS_CPU_VARIANT_NATIVE (DS_NATIVE=ON: one variant for the build host) or
 * neither (a non-x86 build: scalar, with the compiler's default flags).
 *
 * The CPU's flags come from __builtin_cpu_supports, which also checks that
 * the operating system saves the vector registers (XGETBV): a CPU with
 * AVX-512 under a kernel or hypervisor that disables it counts as without. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "engine/backend/cpu/cpu_isa.h"

#if defined(DS_CPU_VARIANT_NATIVE)
extern const ds_cpu_variant ds_cpu_kernels_native;
#define DS_CPU_NVARIANTS 1
static const ds_cpu_variant *const k_variants[DS_CPU_NVARIANTS] = {&ds_cpu_kernels_native};
const char *const ds_cpu_isa_names[DS_CPU_NVARIANTS + 1] = {"native", NULL};
#elif defined(DS_CPU_VARIANTS_X86)
extern const ds_cpu_variant ds_cpu_kernels_avx512, ds_cpu_kernels_avx2, ds_cpu_kernels_scalar;
#define DS_CPU_NVARIANTS 3
static const ds_cpu_variant *const k_variants[DS_CPU_NVARIANTS] = {
    &ds_cpu_kernels_avx512, &ds_cpu_kernels_avx2, &ds_cpu_kernels_scalar};
const char *const ds_cpu_isa_names[DS_CPU_NVARIANTS + 1] = {"avx512", "avx2", "scalar", NULL};
#else
extern const ds_cpu_variant ds_cpu_kernels_scalar;
#define DS_CPU_NVARIANTS 1
static const ds_cpu_variant *const k_variants[DS_CPU_NVARIANTS] = {&ds_cpu_kernels_scalar};
const char *const ds_cpu_isa_names[DS_CPU_NVARIANTS + 1] = {"scalar", NULL};
#endif

#if defined(DS_CPU_VARIANTS_X86) && !(defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12)
/* F16C (CPUID leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports has no
 * name for it. The AVX check beside it covers the OS saving the registers. */
static int host_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

/* Whether this CPU runs the variant `isa`: everything its -march level lets
 * the compiler use. */
static int host_runs(const char *isa) {
#if defined(DS_CPU_VARIANTS_X86)
    __builtin_cpu_init();
    if (strcmp(isa, "avx512") == 0) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
        return __builtin_cpu_supports("x86-64-v4") != 0;
#else
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl") && host_runs("avx2");
#endif
    }
    if (strcmp(isa, "avx2") == 0) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
        return __builtin_cpu_supports("x86-64-v3") != 0;
#else
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               host_has_f16c() && __builtin_cpu_supports("bmi") &&
               __builtin_cpu_supports("bmi2");
#endif
    }
#endif
    /* scalar is the baseline; native was compiled for this very host */
    (void)isa;
    return 1;
}

const ds_cpu_variant *ds_cpu_variant_find(const char *isa) {
    for (int i = 0; i < DS_CPU_NVARIANTS; i++)
        if (strcmp(k_variants[i]->isa, isa) == 0) return host_runs(isa) ? k_variants[i] : NULL;
    return NULL;
}

/* "avx2, scalar": the variants this host runs, for messages. */
static void list_runnable(char *buf, size_t cap) {
    buf[0] = '\0';
    for (int i = 0; i < DS_CPU_NVARIANTS; i++) {
        if (!host_runs(k_variants[i]->isa)) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", k_variants[i]->isa);
    }
}

ds_status ds_cpu_variant_pick(const ds_cpu_variant **out) {
    *out = NULL;
    const char *want = getenv("DS_CPU_ISA");
    if (!want || !*want || strcmp(want, "auto") == 0) {
        /* widest first: the first the CPU runs */
        for (int i = 0; i < DS_CPU_NVARIANTS; i++) {
            if (host_runs(k_variants[i]->isa)) {
                *out = k_variants[i];
                return DS_OK;
            }
        }
        return DS_ERR(DS_ERR_UNSUPPORTED, "cpu backend: no kernel variant runs on this CPU");
    }
    char runnable[64];
    list_runnable(runnable, sizeof runnable);
    for (int i = 0; i < DS_CPU_NVARIANTS; i++) {
        if (strcmp(k_variants[i]->isa, want) != 0) continue;
        if (!host_runs(want))
            return DS_ERR(DS_ERR_UNSUPPORTED,
                          "DS_CPU_ISA=%s: this CPU lacks the instructions of the %s kernels "
                          "(it runs: %s)",
                          want, want, runnable);
        *out = k_variants[i];
        return DS_OK;
    }
    if (strcmp(want, "avx512") == 0 || strcmp(want, "avx2") == 0 ||
        strcmp(want, "scalar") == 0 || strcmp(want, "native") == 0)
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "DS_CPU_ISA=%s: this build has no %s kernels (it has: %s; DS_NATIVE=ON "
                      "builds only the native ones)",
                      want, want, runnable);
    return DS_ERR(DS_ERR_INVALID_ARG,
                  "DS_CPU_ISA=%s: unknown; expected auto, avx512, avx2, scalar or native "
                  "(this build and CPU run: %s)",
                  want, runnable);
}
