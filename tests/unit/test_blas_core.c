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

static ds_blas_core_probe probe(const char *core, const ds_cpu_flags *f, const char *coretype) {
    ds_blas_core_probe p = {.dynamic = true, .x86 = true, .cpu = *f};
    snprintf(p.core, sizeof p.core, "%s", core);
    if (coretype) {
        p.coretype_set = true;
        snprintf(p.coretype, sizeof p.coretype, "%s", coretype);
    }
    return p;
}

static void check_verdict(const ds_blas_core_probe *p, ds_blas_core_verdict want,
                          const char *want_set, const char *want_why) {
    const char *set = "untouched";
    char why[256];
    ds_blas_core_verdict got = ds_blas_core_check(p, &set, why, sizeof why);
    CHECK(got == want, "core %s, OPENBLAS_CORETYPE %s: verdict %d, want %d", p->core,
          p->coretype_set ? p->coretype : "unset", (int)got, (int)want);
    CHECK(want_set ? set && strcmp(set, want_set) == 0 : set == NULL, "core %s: set %s, want %s",
          p->core, set ? set : "NULL", want_set ? want_set : "NULL");
    CHECK(strcmp(why, want_why) == 0, "core %s: why \"%s\", want \"%s\"", p->core, why, want_why);
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
    ds_blas_core_probe p = probe("Prescott", &k_avx512, NULL);
    check_verdict(&p, DS_BLAS_CORE_FALLBACK, "SkylakeX",
                  "OpenBLAS chose core Prescott, but this CPU has AVX-512 (F, BW, VL, DQ)");
    p = probe("Nehalem", &k_avx2, NULL);
    check_verdict(&p, DS_BLAS_CORE_FALLBACK, "Haswell",
                  "OpenBLAS chose core Nehalem, but this CPU has AVX2 and FMA");
    p = probe("Cooperlake", &k_avx512, NULL);
    check_verdict(&p, DS_BLAS_CORE_OK, NULL, "");
    /* the user's choice stays, even an old core: only said when not taken */
    p = probe("Prescott", &k_avx512, "prescott");
    check_verdict(&p, DS_BLAS_CORE_OK, NULL, "");
    p = probe("Prescott", &k_avx512, "Cooperlake");
    check_verdict(&p, DS_BLAS_CORE_NOT_TAKEN, NULL,
                  "OPENBLAS_CORETYPE=Cooperlake, but OpenBLAS runs core Prescott (this OpenBLAS "
                  "does not take that name)");
    p = probe("Prescott", &k_avx512, "");
    check_verdict(&p, DS_BLAS_CORE_NOT_TAKEN, NULL,
                  "OPENBLAS_CORETYPE=, but OpenBLAS runs core Prescott (this OpenBLAS does not "
                  "take that name)");
    /* a choice passed on to a host with less: refused before the first GEMM */
    p = probe("SkylakeX", &k_avx2, "SkylakeX");
    check_verdict(&p, DS_BLAS_CORE_TOO_NEW, NULL,
                  "OpenBLAS runs core SkylakeX (OPENBLAS_CORETYPE=SkylakeX), whose kernels need "
                  "AVX-512 (F, BW, VL, DQ), which this CPU lacks");
    p = probe("Haswell", &k_avx, "Haswell");
    check_verdict(&p, DS_BLAS_CORE_TOO_NEW, NULL,
                  "OpenBLAS runs core Haswell (OPENBLAS_CORETYPE=Haswell), whose kernels need "
                  "AVX2 and FMA, which this CPU lacks");
    /* OpenBLAS's own choice is trusted over the flags read here */
    p = probe("SkylakeX", &k_avx2, NULL);
    check_verdict(&p, DS_BLAS_CORE_OK, NULL, "");
    /* nothing to set in a build for one core, nothing to judge off x86 */
    p = probe("Prescott", &k_avx512, NULL);
    p.dynamic = false;
    check_verdict(&p, DS_BLAS_CORE_OK, NULL, "");
    p = probe("Prescott", &k_avx512, NULL);
    p.x86 = false;
    check_verdict(&p, DS_BLAS_CORE_OK, NULL, "");

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
