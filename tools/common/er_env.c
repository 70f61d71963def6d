/* engine-run: the environment its ranks start with (see er_env.h). */
#include "tools/common/er_env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Room for every variable engine-run sets in one run: OMP_NUM_THREADS,
 * OPENBLAS_CORETYPE, DS_JOIN_NODE_RANK, DS_JOIN_NNODES, DS_PROGRESS_TTY,
 * DS_PREEMPT_RELAY; two to spare. */
static char g_notes[8][64];
static int g_n_notes;

const char *er_env_get(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

bool er_env_set(const char *name, const char *value) {
    if (setenv(name, value, 1) != 0) return false;
    if (g_n_notes < (int)(sizeof g_notes / sizeof *g_notes))
        snprintf(g_notes[g_n_notes++], sizeof g_notes[0], "%s=%s", name, value);
    return true;
}

bool er_env_default_omp_threads(int value) {
    if (getenv("OMP_NUM_THREADS")) return true;
    char num[16];
    snprintf(num, sizeof num, "%d", value < 1 ? 1 : value);
    return er_env_set("OMP_NUM_THREADS", num);
}

void er_env_print_notes(FILE *out) {
    for (int k = 0; k < g_n_notes; k++) fprintf(out, "%s ", g_notes[k]);
}

/* The names an environment file set (er_env_load_file), forwarded too. */
static char g_file_names[64][128];
static int g_n_file_names;

static bool forwarded_prefix(const char *var) {
    /* DS_: the engine's; NCCL_ and UCX_: the transports' (DeepSpeed's
     * launcher forwards these two as well) */
    static const char *const prefixes[] = {"DS_", "NCCL_", "UCX_"};
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++)
        if (strncmp(var, prefixes[k], strlen(prefixes[k])) == 0) return true;
    return false;
}

void er_env_each_forwarded(void (*fn)(void *ctx, const char *name), void *ctx) {
    extern char **environ;
    fn(ctx, "OMP_NUM_THREADS");
    /* OPENBLAS_CORETYPE, the user's or engine-run's, is this host's choice:
     * a rank on a host without those instructions refuses to start
     * (ds_blas_core_startup_check) rather than die at its first GEMM */
    const char *named[] = {"LD_LIBRARY_PATH", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE"};
    for (size_t k = 0; k < sizeof named / sizeof *named; k++)
        if (getenv(named[k])) fn(ctx, named[k]);
    for (int k = 0; k < g_n_file_names; k++)
        if (!forwarded_prefix(g_file_names[k])) fn(ctx, g_file_names[k]);
    for (char **e = environ; *e; e++) {
        if (!forwarded_prefix(*e)) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[256];
        size_t len = (size_t)(eq - *e);
        if (len >= sizeof name) continue;
        memcpy(name, *e, len);
        name[len] = '\0';
        fn(ctx, name);
    }
}

/* One file's NAME=VALUE lines into the environment; -1 and *bad (a line
 * number) on a line that is not one, else the count. */
static int load_one(const char *path, int *bad) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        const char *p = line + strspn(line, " \t");
        if (!*p || *p == '#') continue;
        const char *eq = strchr(p, '=');
        size_t len = eq ? (size_t)(eq - p) : 0;
        bool name_ok = len > 0 && len < sizeof g_file_names[0];
        for (size_t i = 0; name_ok && i < len; i++)
            name_ok = p[i] == '_' || (p[i] >= 'A' && p[i] <= 'Z') ||
                      (p[i] >= 'a' && p[i] <= 'z') || (i > 0 && p[i] >= '0' && p[i] <= '9');
        if (!name_ok || g_n_file_names >= (int)(sizeof g_file_names / sizeof *g_file_names)) {
            fclose(f);
            *bad = lineno;
            return -1;
        }
        memcpy(g_file_names[g_n_file_names], p, len);
        g_file_names[g_n_file_names][len] = '\0';
        if (setenv(g_file_names[g_n_file_names], eq + 1, 1) != 0) {
            fclose(f);
            *bad = lineno;
            return -1;
        }
        bool again = false; /* set by an earlier line or file: forwarded once */
        for (int k = 0; k < g_n_file_names && !again; k++)
            again = !strcmp(g_file_names[k], g_file_names[g_n_file_names]);
        if (!again) g_n_file_names++;
        n++;
    }
    fclose(f);
    return n;
}

const char *er_env_load_file(FILE *msg) {
    static char err[4200];
    char paths[2][4000];
    int np = 0;
    const char *file = er_env_get("DS_ENV_FILE"), *home = er_env_get("HOME");
    if (file) {
        snprintf(paths[np++], sizeof paths[0], "%s", file);
    } else {
        if (home) snprintf(paths[np++], sizeof paths[0], "%s/.deepspeed_env", home);
        snprintf(paths[np++], sizeof paths[0], ".deepspeed_env");
    }
    for (int k = 0; k < np; k++) {
        int bad = 0, n = load_one(paths[k], &bad);
        if (n < 0) {
            int w = snprintf(err, sizeof err, "%s line %d: expected NAME=VALUE (at most %d names "
                             "in all)", paths[k], bad,
                             (int)(sizeof g_file_names / sizeof *g_file_names));
            return w < 0 ? "an environment file: a line that is not NAME=VALUE" : err;
        }
        if (n > 0 && msg)
            fprintf(msg, "engine-run: %d variable(s) from %s for the ranks on every host\n", n,
                    paths[k]);
    }
    return NULL;
}

/* Test-only (er_env.h): a process cannot make its own OpenBLAS choose a core
 * other than the one it chose at load, nor change its CPU's flags, so
 * without this hook the launcher's decision could be tested only on the
 * hosts that need it. Cheap, and read here alone: the library's own check
 * (ds_initialize) never sees it. */
const char *er_blas_core_probe(ds_blas_core_probe *p) {
    ds_blas_core_probe_read(p);
    const char *fake = er_env_get("ENGINE_RUN_TEST_OPENBLAS");
    if (!fake) return NULL;
    const char *colon = strchr(fake, ':');
    size_t len = colon ? (size_t)(colon - fake) : strlen(fake);
    snprintf(p->core, sizeof p->core, "%.*s", (int)len, fake);
    p->dynamic = true;
    if (!colon) return NULL;
    static const char *const names[] = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                        "avx512dq"};
    bool *slots[] = {&p->cpu.avx, &p->cpu.avx2, &p->cpu.fma, &p->cpu.avx512f, &p->cpu.avx512bw,
                     &p->cpu.avx512vl, &p->cpu.avx512dq};
    p->x86 = true;
    p->cpu = (ds_cpu_flags){0};
    for (const char *w = colon + 1; *w;) {
        size_t n = strcspn(w, ",");
        size_t k = 0;
        while (k < 7 && !(strlen(names[k]) == n && strncmp(w, names[k], n) == 0)) k++;
        if (k == 7) {
            static char msg[128];
            snprintf(msg, sizeof msg, "ENGINE_RUN_TEST_OPENBLAS: unknown flag '%.*s'", (int)n, w);
            return msg;
        }
        *slots[k] = true;
        w += n + (w[n] == ',');
    }
    return NULL;
}

const char *er_env_blas_core(FILE *msg) {
    ds_blas_core_probe p;
    const char *bad = er_blas_core_probe(&p);
    if (bad) return bad;
    const char *set = NULL;
    char why[256];
    if (ds_blas_core_check(&p, &set, why, sizeof why) != DS_BLAS_CORE_FALLBACK) return NULL;
    if (!er_env_set("OPENBLAS_CORETYPE", set)) {
        static char err[96];
        snprintf(err, sizeof err, "setenv OPENBLAS_CORETYPE: %s", strerror(errno));
        return err;
    }
    if (msg)
        fprintf(msg, "engine-run: %s: OPENBLAS_CORETYPE=%s for the ranks (set it yourself to "
                "choose another)\n", why, set);
    return NULL;
}
