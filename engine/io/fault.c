/* Test-only fault injection (see fault.h). */
#include "engine/io/fault.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A whole number of text [s, s + n), or -1. */
static long number(const char *s, size_t n) {
    char buf[16];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    return *end == '\0' && v >= 0 ? v : -1;
}

/* One spec "SITE[:rank=R][:restart=K][:nth=N]" of length n against (site,
 * rank); *nth gets N (0 when not given: every time). */
static bool one_matches(const char *spec, size_t n, const char *site, int rank, long *nth) {
    size_t sl = strlen(site);
    *nth = 0;
    if (n < sl || strncmp(spec, site, sl) != 0) return false;
    const char *rest = spec + sl, *end = spec + n;
    while (rest < end) { /* the qualifiers */
        if (*rest != ':') return false;
        const char *next = memchr(rest + 1, ':', (size_t)(end - rest - 1));
        if (!next) next = end;
        size_t len = (size_t)(next - rest);
        if (len > 6 && !strncmp(rest, ":rank=", 6)) {
            bool any = len == 7 && rest[6] == '*';
            if (!any && number(rest + 6, len - 6) != rank) return false;
        } else if (len > 9 && !strncmp(rest, ":restart=", 9)) {
            const char *rc = getenv("DS_RESTART_COUNT"); /* engine-run --max-restarts */
            if (number(rest + 9, len - 9) != (rc && *rc ? number(rc, strlen(rc)) : 0))
                return false;
        } else if (len > 5 && !strncmp(rest, ":nth=", 5)) {
            *nth = number(rest + 5, len - 5);
            if (*nth < 1) return false;
        } else {
            return false;
        }
        rest = next;
    }
    return true;
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

/* Whether a spec of `kind` names (site, rank); *nth as one_matches. */
static bool matches_kind(const char *spec, const char *site, int rank, int kind, long *nth) {
    if (!spec || !site) return false;
    while (*spec) {
        const char *comma = strchr(spec, ',');
        size_t n = comma ? (size_t)(comma - spec) : strlen(spec), skip;
        if (kind_of(spec, n, &skip) == kind && one_matches(spec + skip, n - skip, site, rank, nth))
            return true;
        if (!comma) break;
        spec = comma + 1;
    }
    return false;
}

bool ds_fault_matches(const char *spec, const char *site, int rank) {
    long nth;
    return matches_kind(spec, site, rank, KIND_KILL, &nth);
}

/* How many times this process asked for each site an ":nth=" spec names.
 * A site is "backward:" and a module's name at most (DS_MAX_NAME): one that
 * does not fit, or a table full of other sites, counts 0, and its ":nth="
 * spec never fires (a test then fails for want of the failure it asked for,
 * never by a wrong count). */
#define MAX_COUNTED 64
static struct {
    char site[256];
    long calls;
} g_counted[MAX_COUNTED];
static pthread_mutex_t g_count_lock = PTHREAD_MUTEX_INITIALIZER;

static long count_call(const char *site) {
    if (strlen(site) >= sizeof g_counted[0].site) return 0; /* would be cut: never equal */
    pthread_mutex_lock(&g_count_lock);
    long c = 0;
    for (int i = 0; i < MAX_COUNTED; i++) {
        if (g_counted[i].site[0] && strcmp(g_counted[i].site, site)) continue;
        if (!g_counted[i].site[0]) snprintf(g_counted[i].site, sizeof g_counted[i].site, "%s", site);
        c = ++g_counted[i].calls;
        break;
    }
    pthread_mutex_unlock(&g_count_lock);
    return c;
}

/* Whether an error spec names (site, rank) at this call: one without
 * ":nth=", or one whose N is this call's number (counted once per call, for
 * all the specs naming the site). */
static bool error_now(const char *spec, const char *site, int rank) {
    long call = 0;
    while (*spec) {
        const char *comma = strchr(spec, ',');
        size_t n = comma ? (size_t)(comma - spec) : strlen(spec), skip;
        long nth;
        if (kind_of(spec, n, &skip) == KIND_ERROR &&
            one_matches(spec + skip, n - skip, site, rank, &nth)) {
            if (nth == 0) return true;
            if (call == 0) call = count_call(site);
            if (call == nth) return true;
        }
        if (!comma) break;
        spec = comma + 1;
    }
    return false;
}

ds_status ds_fault_error(const char *site, int rank) {
    const char *spec = getenv(DS_FAULT_ENV);
    if (!spec || !site || !error_now(spec, site, rank)) return DS_OK;
    return DS_ERR(DS_ERR_IO, "%s: failure injected by %s on rank %d", site, DS_FAULT_ENV, rank);
}

void ds_fault_point(const char *site, int rank) {
    const char *spec = getenv(DS_FAULT_ENV);
    long nth;
    if (!spec) return;
    if (matches_kind(spec, site, rank, KIND_TERM, &nth)) { /* a preemption arriving here */
        fprintf(stderr, "[zero-engine] %s: rank %d sends itself SIGTERM at %s\n", DS_FAULT_ENV,
                rank, site);
        raise(SIGTERM);
    }
    if (matches_kind(spec, site, rank, KIND_STALL, &nth)) { /* stuck in a computation */
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
