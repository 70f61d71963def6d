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
                  "with K, M, G or T (binary: DS_MEM_LIMIT=12G, 1.5T), from 1M to 8388608T "
                  "(2^63 bytes); DS_MEM_LIMIT=off turns the start-up memory check off",
                  s, why);
}

/* A decimal number (digits, an optional fraction, an optional exponent)
 * with an optional K/M/G/T suffix, optionally followed by "iB" or "B".
 * strtod alone also takes "nan", "inf", hexadecimal, signs and leading
 * blanks; none of them is a size, and casting its NaN or inf to an
 * integer is undefined (it made everything fit or turned the check off). */
static ds_status parse_size(const char *s, uint64_t *out) {
    const char *p = s;
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (*p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    if (digits == 0) return bad_size(s, "is not a number");
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        if (*q == '+' || *q == '-') q++;
        size_t ed = strspn(q, "0123456789");
        if (ed == 0) return bad_size(s, "has an exponent without digits");
        p = q + ed;
    }
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end != p) return bad_size(s, "is not a number"); /* "0x10": strtod read on */
    double mult = 1;
    switch (*p) {
    case 'k': case 'K': mult = 1024.0; p++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; p++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; p++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; p++; break;
    default: break;
    }
    if (p[0] == 'i' && p[1] == 'B') p += 2;
    else if (p[0] == 'B') p++;
    if (*p) return bad_size(s, "is not a size");
    double bytes = v * mult; /* 1e308G is inf: caught below with the range */
    if (!isfinite(bytes) || bytes < (double)MIN_LIMIT)
        return bad_size(s, "is less than 1M (1048576 bytes)");
    if (bytes > (double)MAX_LIMIT) return bad_size(s, "is more than 2^63 bytes");
    *out = bytes == (double)MAX_LIMIT ? MAX_LIMIT : (uint64_t)bytes;
    return DS_OK;
}

ds_status ds_estimate_ram_limit(uint64_t *out, const char **source) {
    *out = 0;
    const char *env = getenv("DS_MEM_LIMIT");
    if (env && *env) {
        if (source) *source = "DS_MEM_LIMIT";
        if (strcmp(env, "off") == 0) return DS_OK;
        DS_TRY(parse_size(env, out));
        return DS_OK;
    }
    if (source) *source = "MemAvailable in /proc/meminfo";
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return DS_ERR(DS_ERR_IO, "cannot read /proc/meminfo (%s): set DS_MEM_LIMIT to the RAM "
                      "this job may use, or to off", strerror(errno));
    char line[256];
    unsigned long long kb = 0;
    bool seen = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            seen = true;
            break;
        }
    fclose(f);
    if (!seen)
        return DS_ERR(DS_ERR_IO, "/proc/meminfo has no MemAvailable line: set DS_MEM_LIMIT to "
                      "the RAM this job may use, or to off");
    *out = (uint64_t)kb * 1024u;
    return DS_OK;
}
