/* engine-run: the environment its ranks start with (see er_env.h). */
#include "tools/common/er_env.h"

#include <stdlib.h>
#include <string.h>

/* Room for every variable engine-run sets in one run: OMP_NUM_THREADS,
 * DS_JOIN_NODE_RANK, DS_JOIN_NNODES, DS_PROGRESS_TTY, DS_PREEMPT_RELAY; three
 * to spare. */
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

void er_env_each_forwarded(void (*fn)(void *ctx, const char *name), void *ctx) {
    extern char **environ;
    fn(ctx, "OMP_NUM_THREADS");
    const char *named[] = {"LD_LIBRARY_PATH", "OPENBLAS_NUM_THREADS"};
    for (size_t k = 0; k < sizeof named / sizeof *named; k++)
        if (getenv(named[k])) fn(ctx, named[k]);
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "DS_", 3) != 0) continue;
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
