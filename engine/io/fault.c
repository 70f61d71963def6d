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

#define ERROR_PREFIX "error:"

/* Specs of one kind: kill specs (no prefix) or error specs ("error:"). */
static bool matches_kind(const char *spec, const char *site, int rank, bool error) {
    if (!spec || !site) return false;
    size_t ep = strlen(ERROR_PREFIX);
    while (*spec) {
        const char *comma = strchr(spec, ',');
        size_t n = comma ? (size_t)(comma - spec) : strlen(spec);
        bool is_error = n > ep && strncmp(spec, ERROR_PREFIX, ep) == 0;
        if (is_error == error &&
            one_matches(spec + (is_error ? ep : 0), n - (is_error ? ep : 0), site, rank))
            return true;
        if (!comma) break;
        spec = comma + 1;
    }
    return false;
}

bool ds_fault_matches(const char *spec, const char *site, int rank) {
    return matches_kind(spec, site, rank, false);
}

ds_status ds_fault_error(const char *site, int rank) {
    const char *spec = getenv(DS_FAULT_ENV);
    if (!spec || !matches_kind(spec, site, rank, true)) return DS_OK;
    return DS_ERR(DS_ERR_IO, "%s: failure injected by %s on rank %d", site, DS_FAULT_ENV, rank);
}

void ds_fault_point(const char *site, int rank) {
    const char *spec = getenv(DS_FAULT_ENV);
    if (!spec || !ds_fault_matches(spec, site, rank)) return;
    fprintf(stderr, "[zero-engine] %s: rank %d kills itself at %s\n", DS_FAULT_ENV, rank, site);
    fflush(stderr);
    raise(SIGKILL);
}
