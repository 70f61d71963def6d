/* OpenBLAS's kernel core against the CPU (see blas_core.h). */
#include "engine/backend/blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What a core's kernels need, in steps the flags can tell apart. */
enum { LVL_SSE = 0, LVL_AVX = 1, LVL_AVX2 = 2, LVL_AVX512 = 3 };

/* OpenBLAS's x86 core names (driver/others/dynamic.c, 0.3.21, plus
 * SapphireRapids of later versions), the level of their kernels and their
 * row unit (ds_blas_row_unit; 0: not measured). The pre-AVX cores are where
 * OpenBLAS lands for a CPU it does not know: Prescott (x86-64, model
 * unknown), Barcelona (AMD family unknown), Nehalem and Sandybridge (its
 * fallbacks where it finds no AVX or no AVX2). Bulldozer's family also needs
 * FMA4, which no Intel CPU has; that is not checked.
 *
 * The row units were measured with OpenBLAS 0.3.21 (Debian) forced to each
 * core on one AVX-512 host: a row-major product cut at every multiple of 4
 * rows into two calls, against one call, for six shapes (BERT-mini's weight
 * gradients, odd sizes, an LM head's width) and all four transposes. The
 * Haswell and Zen sgemm gives other bits at cuts off multiples of 12; the
 * SkylakeX / Cooperlake and Sandybridge kernels at none of them, except
 * where a part falls under OpenBLAS's small-matrix threshold (see
 * ds_blas_row_unit); 16 is their kernels' own tile. */
static const struct {
    const char *name;
    int level, rows;
} k_cores[] = {
    {"Katmai", LVL_SSE, 0},       {"Coppermine", LVL_SSE, 0},   {"Northwood", LVL_SSE, 0},
    {"Prescott", LVL_SSE, 0},     {"Banias", LVL_SSE, 0},       {"Atom", LVL_SSE, 0},
    {"Core2", LVL_SSE, 0},        {"Penryn", LVL_SSE, 0},       {"Dunnington", LVL_SSE, 0},
    {"Nehalem", LVL_SSE, 0},      {"Athlon", LVL_SSE, 0},       {"Opteron", LVL_SSE, 0},
    {"Opteron_SSE3", LVL_SSE, 0}, {"Barcelona", LVL_SSE, 0},    {"Nano", LVL_SSE, 0},
    {"Bobcat", LVL_SSE, 0},       {"Sandybridge", LVL_AVX, 16}, {"Bulldozer", LVL_AVX, 0},
    {"Piledriver", LVL_AVX, 0},   {"Steamroller", LVL_AVX, 0},  {"Haswell", LVL_AVX2, 12},
    {"Excavator", LVL_AVX2, 0},   {"Zen", LVL_AVX2, 12},        {"SkylakeX", LVL_AVX512, 16},
    {"Cooperlake", LVL_AVX512, 16}, {"SapphireRapids", LVL_AVX512, 0},
};

static int core_index(const char *core) {
    for (size_t i = 0; i < sizeof k_cores / sizeof *k_cores; i++)
        if (strcasecmp(core, k_cores[i].name) == 0) return (int)i;
    return -1;
}

/* The level of `core`'s kernels; -1 for a name not in the table ("Unknown",
 * a core of a newer OpenBLAS, another architecture's). */
static int core_level(const char *core) {
    int i = core_index(core);
    return i < 0 ? -1 : k_cores[i].level;
}

int ds_blas_row_unit(const char *core) {
    int i = core_index(core);
    return i < 0 || !k_cores[i].rows ? 48 : k_cores[i].rows;
}

/* The highest level whose kernels this CPU runs. SkylakeX's kernels use
 * AVX2 and FMA beside AVX-512 (its level-2 routines are Haswell's). */
static int cpu_level(const ds_cpu_flags *f) {
    bool v3 = f->avx && f->avx2 && f->fma;
    if (v3 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq) return LVL_AVX512;
    if (v3) return LVL_AVX2;
    return f->avx ? LVL_AVX : LVL_SSE;
}

static const char *level_text(int level) {
    switch (level) {
    case LVL_AVX512: return "AVX-512 (F, BW, VL, DQ)";
    case LVL_AVX2: return "AVX2 and FMA";
    case LVL_AVX: return "AVX";
    default: return "no AVX";
    }
}

const char *ds_blas_core_upgrade(const char *core, const ds_cpu_flags *cpu) {
    int have = core_level(core);
    if (have < 0 || have > LVL_AVX) return NULL; /* unknown, or chosen on purpose */
    switch (cpu_level(cpu)) {
    case LVL_AVX512: return "SkylakeX";
    case LVL_AVX2: return "Haswell";
    default: return NULL;
    }
}

ds_blas_core_verdict ds_blas_core_check(const ds_blas_core_probe *p, const char **set, char *why,
                                        size_t cap) {
    *set = NULL;
    if (cap) why[0] = '\0';
    /* a build for one core ignores OPENBLAS_CORETYPE: nothing to set */
    if (!p->dynamic || !p->x86) return DS_BLAS_CORE_OK;
    int need = core_level(p->core), can = cpu_level(&p->cpu);
    if (p->coretype_set && need > can) {
        snprintf(why, cap, "OpenBLAS runs core %s (OPENBLAS_CORETYPE=%s), whose kernels need %s, "
                 "which this CPU lacks", p->core, p->coretype, level_text(need));
        return DS_BLAS_CORE_TOO_NEW;
    }
    if (p->coretype_set) {
        if (strcasecmp(p->coretype, p->core) == 0) return DS_BLAS_CORE_OK;
        snprintf(why, cap, "OPENBLAS_CORETYPE=%s, but OpenBLAS runs core %s (this OpenBLAS does "
                 "not take that name)", p->coretype, p->core);
        return DS_BLAS_CORE_NOT_TAKEN;
    }
    *set = ds_blas_core_upgrade(p->core, &p->cpu);
    if (!*set) return DS_BLAS_CORE_OK;
    snprintf(why, cap, "OpenBLAS chose core %s, but this CPU has %s", p->core, level_text(can));
    return DS_BLAS_CORE_FALLBACK;
}

void ds_blas_core_probe_read(ds_blas_core_probe *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->core, sizeof p->core, "%s", openblas_get_corename());
    p->dynamic = strstr(openblas_get_config(), "DYNAMIC_ARCH") != NULL;
    const char *t = getenv("OPENBLAS_CORETYPE");
    p->coretype_set = t != NULL;
    snprintf(p->coretype, sizeof p->coretype, "%s", t ? t : "");
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    p->x86 = true;
    p->cpu = (ds_cpu_flags){.avx = __builtin_cpu_supports("avx"),
                            .avx2 = __builtin_cpu_supports("avx2"),
                            .fma = __builtin_cpu_supports("fma"),
                            .avx512f = __builtin_cpu_supports("avx512f"),
                            .avx512bw = __builtin_cpu_supports("avx512bw"),
                            .avx512vl = __builtin_cpu_supports("avx512vl"),
                            .avx512dq = __builtin_cpu_supports("avx512dq")};
#endif
}

ds_status ds_blas_core_startup_check(int rank) {
    ds_blas_core_probe p;
    ds_blas_core_probe_read(&p);
    const char *set = NULL;
    char why[256];
    switch (ds_blas_core_check(&p, &set, why, sizeof why)) {
    case DS_BLAS_CORE_OK: break;
    case DS_BLAS_CORE_TOO_NEW:
        /* engine-run may have passed its host's choice to a host with less */
        return DS_ERR(DS_ERR_UNSUPPORTED, "%s: its first GEMM would stop the rank (illegal "
                      "instruction); unset OPENBLAS_CORETYPE or name a core this CPU runs", why);
    case DS_BLAS_CORE_NOT_TAKEN:
        if (rank == 0) fprintf(stderr, "[zero-engine] warning: %s\n", why);
        break;
    case DS_BLAS_CORE_FALLBACK:
        if (rank == 0)
            fprintf(stderr, "[zero-engine] warning: %s: its GEMMs run several times slower than "
                    "%s's; start the ranks with engine-run, or set OPENBLAS_CORETYPE=%s\n",
                    why, set, set);
        break;
    }
    return DS_OK;
}
