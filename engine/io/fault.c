/* Test-only fault injection (see fault.h). */
#include "engine/io/fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One spec "SITE[:rank=R]" of length n against (site, rank). */
static bool one_matches(const char *spec, size_t n, const char *site, int rank) {
    size_t sl = strlen(site);
    if (n < sl || strncmp(spec, site, sl) != 0) return false;
    if (n == sl) return true; /* no rank: every rank */
    const char *rest = spec + sl;
    size_t rn = n - sl;
    if (rn < 7 || strncmp(rest, ":rank=", 6) != 0) return false;
    char buf[16];
    if (rn - 6 >= sizeof buf) return false;
    memcpy(buf, rest + 6, rn - 6);
    buf[rn - 6] = '\0';
    if (!strcmp(buf, "*")) return true;
    char *end;
    long r = strtol(buf, &end, 10);
    return *end == '\0' && end != buf && r == rank;
}

/* The kinds of spec: a prefix ("" for SIGKILL) and what it does. */
static const char *const k_prefix[] = {"", "error:", "term:", "stall:"};
enum { KIND_KILL, KIND_ERROR, KIND_TERM, KIND_STALL, N_KINDS };

static int kind_of(const char *spec, size_t n, size_t *skip) {
    for (int k = 1; k < N_KINDS; k++) {
        size_t p = strlen(k_prefix[k]);
        if (n > p && strncmp(spec, k_prefix[k], p) == 0) {
            *skip = p;
            return k;
        }
    }
    *skip = 0;
    return KIND_KILL;
}

static bool matches_kind(const char *spec, const char *site, int rank, int kind) {
    if (!spec || !site) return false;
    while (*spec) {
        const char *comma = strchr(spec, ',');
        size_t n = comma ? (size_t)(comma - spec) : strlen(spec), skip;
        if (kind_of(spec, n, &skip) == kind && one_matches(spec + skip, n - skip, site, rank))
            return true;
        if (!comma) break;
        spec = comma + 1;
    }
    return false;
}

bool ds_fault_matches(const char *spec, const char *site, int rank) {
    return matches_kind(spec, site, rank, KIND_KILL);
}

ds_status ds_fault_error(const char *site, int rank) {
    const char *spec = getenv(DS_FAULT_ENV);
    if (!spec || !matches_kind(spec, site, rank, KIND_ERROR)) return DS_OK;
    return DS_ERR(DS_ERR_IO, "%s: failure injected by %s on rank %d", site, DS_FAULT_ENV, rank);
}

void ds_fault_point(const char *site, int rank) {
    const char *spec = getenv(DS_FAULT_ENV);
    if (!spec) return;
    if (matches_kind(spec, site, rank, KIND_TERM)) { /* a preemption arriving here */
        fprintf(stderr, "[zero-engine] %s: rank %d sends itself SIGTERM at %s\n", DS_FAULT_ENV,
                rank, site);
        raise(SIGTERM);
    }
    if (matches_kind(spec, site, rank, KIND_STALL)) { /* stuck in a computation */
        fprintf(stderr, "[zero-engine] %s: rank %d computes forever at %s\n", DS_FAULT_ENV, rank,
                site);
        fflush(stderr);
        volatile double x = 1.0;
        for (;;) x = x * 1.0000001 + 1e-9; /* busy, never in MPI, until the job is ended */
    }
    if (!ds_fault_matches(spec, site, rank)) return;
    fprintf(stderr, "[zero-engine] %s: rank %d kills itself at %s\n", DS_FAULT_ENV, rank, site);
    fflush(stderr);
    raise(SIGKILL);
}
