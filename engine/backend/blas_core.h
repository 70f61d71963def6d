/* Which kernels OpenBLAS runs, and whether they are what the CPU can do.
 *
 * A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernel "core" when it loads,
 * from the CPU's model number. A model it does not know gets a generic old
 * core: OpenBLAS 0.3.21 chose Prescott (SSE3 kernels) on a Xeon with AVX-512,
 * and every GEMM then runs several times slower, silently. OpenBLAS reads
 * OPENBLAS_CORETYPE once, when the library loads (before main), so a process
 * cannot change its own choice; the launcher can, for the ranks it starts:
 *
 *   ds_blas_core_probe p;
 *   ds_blas_core_probe_read(&p);
 *   const char *set = NULL;
 *   char why[256];
 *   if (ds_blas_core_check(&p, &set, why, sizeof why) == DS_BLAS_CORE_FALLBACK)
 *       setenv("OPENBLAS_CORETYPE", set, 1);   // for the child, not for us
 *
 * engine-run does that (tools/common/er_env.h); ds_initialize warns on rank 0
 * when nobody did (ds_blas_core_startup_check). */
#ifndef DS_BACKEND_BLAS_CORE_H
#define DS_BACKEND_BLAS_CORE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/core/status.h"

/* The CPU features OpenBLAS's x86-64 cores are built for, as the compiler's
 * run-time check sees them (which includes the OS's support of the wide
 * registers). */
typedef struct ds_cpu_flags {
    bool avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512dq;
} ds_cpu_flags;

/* What the diagnosis looks at. */
typedef struct ds_blas_core_probe {
    char core[32];      /* the core OpenBLAS runs (openblas_get_corename) */
    bool dynamic;       /* a DYNAMIC_ARCH build: OPENBLAS_CORETYPE takes effect */
    bool x86;           /* `cpu` was read (false elsewhere: nothing is judged) */
    ds_cpu_flags cpu;
    bool coretype_set;  /* OPENBLAS_CORETYPE is in the environment (even "") */
    char coretype[32];  /* its value */
} ds_blas_core_probe;

/* Fills `p` from this process: OpenBLAS as loaded, the CPU, the environment. */
void ds_blas_core_probe_read(ds_blas_core_probe *p);

/* The core to set for a CPU with `cpu` when OpenBLAS chose `core`, or NULL
 * to leave it. Only a core that needs at most AVX (Prescott, Core2, Nehalem,
 * Sandybridge, Atom, Barcelona and the other pre-AVX2 cores: OpenBLAS's
 * fallbacks) is replaced: by "SkylakeX" when the CPU has AVX-512 F, BW, VL
 * and DQ (with AVX2 and FMA), else by "Haswell" when it has AVX2 and FMA.
 * Haswell, Zen, SkylakeX, Cooperlake and any name not known here are never
 * replaced: OpenBLAS chose them on purpose (Haswell is also its choice where
 * it finds AVX-512 unusable). Names compare without regard to case, as
 * OpenBLAS reads OPENBLAS_CORETYPE. */
const char *ds_blas_core_upgrade(const char *core, const ds_cpu_flags *cpu);

typedef enum ds_blas_core_verdict {
    DS_BLAS_CORE_OK,        /* nothing to say (also: not DYNAMIC_ARCH, not x86) */
    DS_BLAS_CORE_FALLBACK,  /* OPENBLAS_CORETYPE unset and the core is a fallback
                               older than the CPU: *set is the core to set */
    DS_BLAS_CORE_NOT_TAKEN, /* OPENBLAS_CORETYPE set, but OpenBLAS runs another
                               core (0.3.21 does not take "Cooperlake", say) */
    DS_BLAS_CORE_TOO_NEW    /* OPENBLAS_CORETYPE chose kernels whose instructions
                               this CPU lacks: the first GEMM would die (SIGILL) */
} ds_blas_core_verdict;

/* Judges `p` (a pure function of it): the verdict, the core to set (*set, for
 * FALLBACK; else NULL) and, unless OK, one clause saying what was found
 * ("OpenBLAS chose core Prescott, but this CPU has AVX-512 F/BW/VL/DQ") in
 * `why`. */
ds_blas_core_verdict ds_blas_core_check(const ds_blas_core_probe *p, const char **set, char *why,
                                        size_t cap);

/* Rows of a row-major C at which one product can be cut into calls, one
 * per thread, that give the bits of one call over all rows with `core`'s
 * kernels: 12 for Haswell and Zen, 16 for SkylakeX, Cooperlake and
 * Sandybridge (measured, blas_core.c), 48 (a multiple of both) for any other
 * core. It holds for parts above OpenBLAS's small-matrix threshold (m n k
 * above 10^6 multiply-adds: SkylakeX's kernels take a smaller part another
 * way), which the caller keeps (cpu_backend.c). */
int ds_blas_row_unit(const char *core);

/* ds_initialize's check, on each rank: TOO_NEW fails (DS_ERR_UNSUPPORTED,
 * naming the variable and what the CPU lacks); FALLBACK and NOT_TAKEN print
 * one warning line on stderr when `rank` is 0. */
ds_status ds_blas_core_startup_check(int rank);

#endif /* DS_BACKEND_BLAS_CORE_H */
