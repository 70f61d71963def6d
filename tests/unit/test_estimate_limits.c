/* The memory estimator's edges (zero/estimate.h), one process, no MPI:
 *   - DS_MEM_LIMIT: sizes with and without suffixes are read; NaN, inf,
 *     negative and hexadecimal numbers, anything under 1 MiB or over 2^63
 *     bytes is refused naming DS_MEM_LIMIT (they turned the check off or
 *     made everything fit); only "off" turns the check off.
 *
 *   test_estimate_limits */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_util.h"
#include "zero/estimate.h"

/* DS_MEM_LIMIT=value must give `want` bytes (0: refused, naming the variable). */
static void mem_limit_is(const char *value, uint64_t want) {
    setenv("DS_MEM_LIMIT", value, 1);
    uint64_t got = 12345;
    const char *source = NULL;
    ds_status st = ds_estimate_ram_limit(&got, &source);
    if (want) {
        CHECK(st == DS_OK && got == want && source && strstr(source, "DS_MEM_LIMIT"),
              "DS_MEM_LIMIT=%s: %s, %llu bytes, want %llu (%s)", value, ds_status_to_string(st),
              (unsigned long long)got, (unsigned long long)want, ds_last_error());
    } else {
        CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "DS_MEM_LIMIT") &&
                  strstr(ds_last_error(), value),
              "DS_MEM_LIMIT=%s must be refused naming it: %s, %llu bytes (%s)", value,
              ds_status_to_string(st), (unsigned long long)got, ds_last_error());
    }
    ds_clear_error();
}

static void check_mem_limit(void) {
    const uint64_t K = 1024, M = K * K, G = M * K;
    mem_limit_is("12G", 12 * G);
    mem_limit_is("12GiB", 12 * G);
    mem_limit_is("1.5g", 3 * G / 2);
    mem_limit_is("1M", M); /* the least a limit may be */
    mem_limit_is("1048576", M);
    mem_limit_is("8589934592", 8 * G);
    mem_limit_is("2e9", 2000000000);
    mem_limit_is("8388608T", (uint64_t)1 << 63); /* 2^63 bytes, the most */
    /* each of these turned the check off, made everything fit (nan:
     * "available 8589934592.000 GiB: fits") or was undefined behaviour */
    static const char *bad[] = {"nan", "NaN", "inf", "-inf", "0", "-0", "0.5", "1e30", "-1",
                                "1048575", "0.5M", "8388609T", "1e300G", "0x100000000", "12X",
                                "G", " 12G", "12 G", "12G ", "infinity", "OFF", "none"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) mem_limit_is(bad[i], 0);
    /* the one word that turns it off */
    setenv("DS_MEM_LIMIT", "off", 1);
    uint64_t got = 1;
    const char *source = NULL;
    CHECK(TEST_OK(ds_estimate_ram_limit(&got, &source)) && got == 0,
          "DS_MEM_LIMIT=off: %llu, want 0 (the check off)", (unsigned long long)got);
    unsetenv("DS_MEM_LIMIT");
}

int main(void) {
    check_mem_limit();
    return test_finish("test_estimate_limits");
}
