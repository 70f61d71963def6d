/* Deterministic test inputs: a xorshift64* stream per translation unit,
 * the same numbers on every host and build, so a test that compares two
 * code paths (cpu variants, a mask against the stream) feeds both the same
 * operands.
 *
 *   #include "tests/unit/test_rand.h"
 *
 *   test_rand_seed(0x9E3779B97F4A7C15ull);   // the same inputs again
 *   float x = test_frand(-1.0f, 1.0f);       // uniform in [lo, hi), 24 bits
 *   float *buf = test_frand_buf(n, 0.0f, 1.0f);   // malloc'd; exits when out of memory
 */
#ifndef DS_TESTS_TEST_RAND_H
#define DS_TESTS_TEST_RAND_H

#include <stdint.h>
#include <stdlib.h>

#include "tests/unit/test_util.h"

static inline uint64_t *test_rand_state(void) {
    static uint64_t s = 0x243F6A8885A308D3ull;
    return &s;
}

static inline void test_rand_seed(uint64_t seed) { *test_rand_state() = seed; }

static inline float test_frand(float lo, float hi) {
    uint64_t *s = test_rand_state();
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 2685821657736338717ull;
    return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}

static inline float *test_frand_buf(size_t n, float lo, float hi) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) p[i] = test_frand(lo, hi);
    return p;
}

#endif
