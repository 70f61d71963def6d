/* The RAM a job may plan for (ds_estimate_ram_limit): DS_MEM_LIMIT when
 * set, else what the kernel says is available. */
#include "zero/estimate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The range a limit may have: under 1 MiB no rank of any model starts (a
 * typo such as "0.5" or "1024" meant a larger unit), over 2^63 bytes the
 * value is no longer a size of memory (and no longer fits the arithmetic). */
#define MIN_LIMIT ((uint64_t)1 << 20)
#define MAX_LIMIT ((uint64_t)1 << 63)

static ds_status bad_size(const char *s, const char *why) {
    return DS_ERR(DS_ERR_INVALID_ARG,
                  "DS_MEM_LIMIT: '%s' %s: give the RAM this job may use in bytes, or a number "
                  "with K, M, G or T, all binary (DS_MEM_LIMIT=12G, 12Gi, 12GB, 1.5T), from 1M to 8388608T "
                  "(2^63 bytes); DS_MEM_LIMIT=off turns the start-up memory check off",
                  s, why);
}

bool ds_estimate_parse_decimal(const char *s, double *v, const char **end) {
    const char *p = s;
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (*p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    if (digits == 0) return false;
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1 + (p[1] == '+' || p[1] == '-');
        size_t ed = strspn(q, "0123456789");
        if (ed == 0) return false;
        p = q + ed;
    }
    char *e;
    *v = strtod(s, &e);
    if (e != p || !isfinite(*v)) return false; /* "0x10": strtod read on */
    *end = p;
    return true;
}

/* A decimal number (ds_estimate_parse_decimal) with an optional K/M/G/T
 * suffix, optionally followed by "iB", "i" (as Kubernetes writes limits) or
 * "B"; every suffix is binary. Casting strtod's NaN or inf to an integer is
 * undefined (it made everything fit or turned the check off). */
static ds_status parse_size(const char *s, uint64_t *out) {
    const char *p;
    double v;
    if (!ds_estimate_parse_decimal(s, &v, &p)) return bad_size(s, "is not a number");
    double mult = 1;
    switch (*p) {
    case 'k': case 'K': mult = 1024.0; p++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; p++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; p++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; p++; break;
    default: break;
    }
    /* 12GiB, 12GB (binary all the same) and Kubernetes' 12Gi */
    if (mult > 1 && p[0] == 'i') p += p[1] == 'B' ? 2 : 1;
    else if (p[0] == 'B') p++;
    if (*p) return bad_size(s, "is not a size");
    double bytes = v * mult; /* 1e308G is inf: caught below with the range */
    if (!isfinite(bytes) || bytes < (double)MIN_LIMIT)
        return bad_size(s, "is less than 1M (1048576 bytes)");
    if (bytes > (double)MAX_LIMIT) return bad_size(s, "is more than 2^63 bytes");
    *out = bytes == (double)MAX_LIMIT ? MAX_LIMIT : (uint64_t)bytes;
    return DS_OK;
}

/* The first number after `key` at the start of a line of `path` (`key`
 * includes its separator: "MemAvailable:", "inactive_file "); false when
 * the file or the line is missing. */
static bool read_key(const char *path, const char *key, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    size_t n = strlen(key);
    bool seen = false;
    while (!seen && fgets(line, sizeof line, f))
        seen = strncmp(line, key, n) == 0 && sscanf(line + n, " %llu", v) == 1;
    fclose(f);
    return seen;
}

/* A cgroup file holding one number, or "max" (cgroup v2: no limit, *v =
 * UINT64_MAX). False when missing or not a number. */
static bool read_value(const char *path, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char word[64] = "";
    bool ok = fscanf(f, "%63s", word) == 1;
    fclose(f);
    if (!ok) return false;
    if (strcmp(word, "max") == 0) {
        *v = UINT64_MAX;
        return true;
    }
    char *end;
    errno = 0;
    *v = strtoull(word, &end, 10);
    return end != word && !*end && !errno;
}

/* The cgroup paths of this process (/proc/self/cgroup): the v2 one ("0::"),
 * and the v1 hierarchy that has the memory controller ("N:...memory...:"). */
static void self_cgroups(const char *file, char *v2, char *v1, size_t cap) {
    v2[0] = v1[0] = '\0';
    FILE *f = fopen(file, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = '\0';
        const char *ctl = c1 + 1, *path = c2 + 1;
        if (strcmp(line, "0") == 0 && !ctl[0]) {
            snprintf(v2, cap, "%s", path);
            continue;
        }
        for (const char *w = ctl; *w;) { /* "memory" or "cpu,memory" */
            size_t n = strcspn(w, ",");
            if (n == 6 && strncmp(w, "memory", 6) == 0) snprintf(v1, cap, "%s", path);
            w += n + (w[n] == ',');
        }
    }
    fclose(f);
}

/* The least headroom (limit less what is charged) of the cgroup at `base`
 * + `path` and every cgroup above it up to `base`: a parent's limit binds
 * the children, and inside a container the path /proc/self/cgroup names
 * may not exist under the mount (its cgroup is the mount's root), so
 * missing folders are passed over. The charge counts page cache that the
 * kernel reclaims before it kills, as MemAvailable does not; the inactive
 * file pages (memory.stat) are taken off it, as kubelet's working set does.
 * False when no level has a limit. */
static bool cgroup_headroom(const char *base, const char *path, const char *limit_file,
                            const char *usage_file, const char *inactive_key, uint64_t *out) {
    char dir[4096], file[4200];
    snprintf(dir, sizeof dir, "%s%s%s", base, path[0] == '/' ? "" : "/", path);
    size_t root_len = strlen(base);
    bool found = false;
    for (;;) {
        size_t n = strlen(dir);
        while (n > root_len && dir[n - 1] == '/') dir[--n] = '\0';
        unsigned long long lim, used, inactive = 0;
        snprintf(file, sizeof file, "%s/%s", dir, limit_file);
        bool has = read_value(file, &lim) && lim != UINT64_MAX;
        snprintf(file, sizeof file, "%s/%s", dir, usage_file);
        if (has && read_value(file, &used)) {
            snprintf(file, sizeof file, "%s/memory.stat", dir);
            if (!read_key(file, inactive_key, &inactive) || inactive > used) inactive = 0;
            used -= inactive;
            uint64_t room = lim > used ? lim - used : 0;
            if (!found || room < *out) *out = room;
            found = true;
        }
        if (n <= root_len) break;
        char *slash = strrchr(dir + root_len, '/');
        if (!slash) break;
        *slash = '\0';
    }
    return found;
}

ds_status ds_estimate_ram_limit_at(const char *meminfo, const char *self_cgroup,
                                   const char *cgroup_root, uint64_t *out,
                                   const char **source) {
    *out = 0;
    const char *env = getenv("DS_MEM_LIMIT");
    if (env && *env) {
        if (source) *source = "DS_MEM_LIMIT";
        if (strcmp(env, "off") == 0) return DS_OK;
        DS_TRY(parse_size(env, out));
        return DS_OK;
    }
    if (source) *source = "MemAvailable in /proc/meminfo";
    unsigned long long kb = 0;
    errno = 0;
    if (!read_key(meminfo, "MemAvailable:", &kb))
        return DS_ERR(DS_ERR_IO, "cannot read MemAvailable from %s (%s): set DS_MEM_LIMIT to "
                      "the RAM this job may use, or to off", meminfo,
                      errno ? strerror(errno) : "no such line");
    *out = (uint64_t)kb * 1024u;
    /* a container's limit is not in MemAvailable, which is the host's: a
     * job over it is killed by the kernel although the host has room */
    char v2[2048], v1[2048], base[2100];
    self_cgroups(self_cgroup, v2, v1, sizeof v2);
    uint64_t room;
    if (v2[0] && cgroup_headroom(cgroup_root, v2, "memory.max", "memory.current",
                                 "inactive_file", &room) && room < *out) {
        *out = room;
        if (source)
            *source = "this cgroup's memory.max less memory.current (cgroup v2), below "
                      "MemAvailable";
    }
    snprintf(base, sizeof base, "%s/memory", cgroup_root);
    if (v1[0] && cgroup_headroom(base, v1, "memory.limit_in_bytes", "memory.usage_in_bytes",
                                 "total_inactive_file", &room) && room < *out) {
        *out = room;
        if (source)
            *source = "this cgroup's memory.limit_in_bytes less memory.usage_in_bytes "
                      "(cgroup v1), below MemAvailable";
    }
    /* 0 means "no check" to the callers: a cgroup already at its limit
     * has room for nothing, which one byte says */
    if (*out == 0) *out = 1;
    return DS_OK;
}

ds_status ds_estimate_ram_limit(uint64_t *out, const char **source) {
    return ds_estimate_ram_limit_at("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup", out,
                                    source);
}
