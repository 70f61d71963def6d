/* OpenBLAS's core against the CPU (engine/backend/blas_core.h), over every
 * x86 core name OpenBLAS 0.3.21 reports and the flag sets that decide:
 *   - a pre-AVX2 core (OpenBLAS's fallbacks) becomes SkylakeX on a CPU with
 *     AVX-512 F/BW/VL/DQ, Haswell on one with AVX2 and FMA, nothing below;
 *   - Haswell, Excavator, Zen, SkylakeX, Cooperlake, SapphireRapids and any
 *     name not known are never replaced (never a downgrade, never a guess);
 *   - the verdicts: a user's OPENBLAS_CORETYPE is left alone, but said when
 *     OpenBLAS did not take it or the CPU cannot run it; a build that is not
 *     DYNAMIC_ARCH and a non-x86 probe have nothing to say.
 * The launcher's use of it is tested through engine-run --dry-run
 * (tests/unit/test_engine_run.sh, case blas_core). */
#include <string.h>

#include "engine/backend/blas_core.h"
#include "tests/unit/test_util.h"

static const ds_cpu_flags k_sse = {0};
static const ds_cpu_flags k_avx = {.avx = true};
static const ds_cpu_flags k_avx2_nofma = {.avx = true, .avx2 = true};
static const ds_cpu_flags k_avx2 = {.avx = true, .avx2 = true, .fma = true};
static const ds_cpu_flags k_avx512 = {.avx = true, .avx2 = true, .fma = true, .avx512f = true,
                                      .avx512bw = true, .avx512vl = true, .avx512dq = true};
/* AVX-512 F/BW/VL without DQ: not enough for SkylakeX's kernels */
static const ds_cpu_flags k_avx512_nodq = {.avx = true, .avx2 = true, .fma = true,
                                           .avx512f = true, .avx512bw = true, .avx512vl = true};

static void check_upgrade(const char *core, const ds_cpu_flags *f, const char *fname,
                          const char *want) {
    const char *got = ds_blas_core_upgrade(core, f);
    CHECK(want ? got && strcmp(got, want) == 0 : got == NULL, "%s on %s: got %s, want %s", core,
          fname, got ? got : "none", want ? want : "none");
}

/* One verdict case: the probe's fields, then what ds_blas_core_check gives. */
typedef struct verdict_case {
    const char *core;
    const ds_cpu_flags *cpu;
    const char *coretype; /* NULL: unset */
    bool one_core_build;  /* not DYNAMIC_ARCH */
    bool not_x86;
    ds_blas_core_verdict want;
    const char *want_set;
    const char *want_why;
} verdict_case;

static void check_verdict(const verdict_case *c) {
    ds_blas_core_probe p = {.dynamic = !c->one_core_build, .x86 = !c->not_x86, .cpu = *c->cpu,
                            .coretype_set = c->coretype != NULL};
    snprintf(p.core, sizeof p.core, "%s", c->core);
    snprintf(p.coretype, sizeof p.coretype, "%s", c->coretype ? c->coretype : "");
    const char *set = "untouched";
    char why[256];
    ds_blas_core_verdict got = ds_blas_core_check(&p, &set, why, sizeof why);
    CHECK(got == c->want, "core %s, OPENBLAS_CORETYPE %s: verdict %d, want %d", c->core,
          c->coretype ? c->coretype : "unset", (int)got, (int)c->want);
    CHECK(c->want_set ? set && strcmp(set, c->want_set) == 0 : set == NULL,
          "core %s: set %s, want %s", c->core, set ? set : "NULL",
          c->want_set ? c->want_set : "NULL");
    CHECK(strcmp(why, c->want_why) == 0, "core %s: why \"%s\", want \"%s\"", c->core, why,
          c->want_why);
}

int main(void) {
    /* every pre-AVX2 core OpenBLAS reports is a fallback on a newer CPU */
    static const char *const old[] = {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias",
                                      "Atom", "Core2", "Penryn", "Dunnington", "Nehalem",
                                      "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano",
                                      "Bobcat", "Sandybridge", "Bulldozer", "Piledriver",
                                      "Steamroller"};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++) {
        check_upgrade(old[i], &k_avx512, "avx512", "SkylakeX");
        check_upgrade(old[i], &k_avx512_nodq, "avx512 without dq", "Haswell");
        check_upgrade(old[i], &k_avx2, "avx2+fma", "Haswell");
        check_upgrade(old[i], &k_avx2_nofma, "avx2 without fma", NULL);
        check_upgrade(old[i], &k_avx, "avx", NULL);
        check_upgrade(old[i], &k_sse, "sse", NULL);
    }
    /* chosen on purpose, or not known: never replaced, whatever the CPU has */
    static const char *const keep[] = {"Haswell", "Excavator", "Zen", "SkylakeX", "Cooperlake",
                                       "SapphireRapids", "Unknown", "Zen4", "NeoverseN1", ""};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
        check_upgrade(keep[i], &k_avx512, "avx512", NULL);
        check_upgrade(keep[i], &k_avx2, "avx2+fma", NULL);
    }
    /* OPENBLAS_CORETYPE compares without regard to case, as OpenBLAS reads it */
    check_upgrade("PRESCOTT", &k_avx512, "avx512", "SkylakeX");
    check_upgrade("sandybridge", &k_avx2, "avx2+fma", "Haswell");

    /* the verdicts, with the clause each caller puts in its line */
    static const char not_taken[] = "OPENBLAS_CORETYPE=%s, but OpenBLAS runs core Prescott (this "
                                    "OpenBLAS does not take that name)";
    char not_taken_cl[160], not_taken_empty[160];
    snprintf(not_taken_cl, sizeof not_taken_cl, not_taken, "Cooperlake");
    snprintf(not_taken_empty, sizeof not_taken_empty, not_taken, "");
    const verdict_case cases[] = {
        {"Prescott", &k_avx512, NULL, false, false, DS_BLAS_CORE_FALLBACK, "SkylakeX",
         "OpenBLAS chose core Prescott, but this CPU has AVX-512 (F, BW, VL, DQ)"},
        {"Nehalem", &k_avx2, NULL, false, false, DS_BLAS_CORE_FALLBACK, "Haswell",
         "OpenBLAS chose core Nehalem, but this CPU has AVX2 and FMA"},
        {"Cooperlake", &k_avx512, NULL, false, false, DS_BLAS_CORE_OK, NULL, ""},
        /* the user's choice stays, even an old core: only said when not taken */
        {"Prescott", &k_avx512, "prescott", false, false, DS_BLAS_CORE_OK, NULL, ""},
        {"Prescott", &k_avx512, "Cooperlake", false, false, DS_BLAS_CORE_NOT_TAKEN, NULL,
         not_taken_cl},
        {"Prescott", &k_avx512, "", false, false, DS_BLAS_CORE_NOT_TAKEN, NULL, not_taken_empty},
        /* a choice passed on to a host with less: refused before the first GEMM */
        {"SkylakeX", &k_avx2, "SkylakeX", false, false, DS_BLAS_CORE_TOO_NEW, NULL,
         "OpenBLAS runs core SkylakeX (OPENBLAS_CORETYPE=SkylakeX), whose kernels need AVX-512 "
         "(F, BW, VL, DQ), which this CPU lacks"},
        {"Haswell", &k_avx, "Haswell", false, false, DS_BLAS_CORE_TOO_NEW, NULL,
         "OpenBLAS runs core Haswell (OPENBLAS_CORETYPE=Haswell), whose kernels need AVX2 and "
         "FMA, which this CPU lacks"},
        /* OpenBLAS's own choice is trusted over the flags read here */
        {"SkylakeX", &k_avx2, NULL, false, false, DS_BLAS_CORE_OK, NULL, ""},
        /* nothing to set in a build for one core, nothing to judge off x86 */
        {"Prescott", &k_avx512, NULL, true, false, DS_BLAS_CORE_OK, NULL, ""},
        {"Prescott", &k_avx512, NULL, false, true, DS_BLAS_CORE_OK, NULL, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_verdict(&cases[i]);

    /* this process's own probe: OpenBLAS's name, and the environment's value */
    ds_blas_core_probe self;
    ds_blas_core_probe_read(&self);
    CHECK(self.core[0] != '\0', "openblas_get_corename gave an empty name");
    const char *env = getenv("OPENBLAS_CORETYPE");
    CHECK(self.coretype_set == (env != NULL) && strcmp(self.coretype, env ? env : "") == 0,
          "OPENBLAS_CORETYPE '%s' read as set=%d '%s'", env ? env : "(unset)", self.coretype_set,
          self.coretype);
    return test_finish("test_blas_core");
}
