/* The counter-based RNG (engine/backend/math.h) and the cpu backend's
 * rng_uniform / rng_normal slots.
 *
 *   - Philox4x32-10 against Random123's known-answer vectors;
 *   - the per-element accessors agree with the block layout;
 *   - determinism: same (seed, offset) -> same bits; shard independence:
 *     n values at offset 0 == two halves at offsets 0 and n/2 (and any other
 *     cut, at unaligned offsets), at 1 and 2 threads;
 *   - the fmaf-only log and sin/cos used by Box-Muller against libm in double;
 *   - each normal value against Box-Muller evaluated in double from the same
 *     Philox words; mean, std and P(|z| < 1) of 2^20 draws and the uniform's
 *     mean and variance within statistical tolerances derived below. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "tests/unit/test_util.h"

static const double k_two_pi = 6.283185307179586476925;

/* Random123 tests/kat_vectors, the three "philox4x32 10" lines:
 * counter[4] key[2] -> output[4]. */
static void test_philox_kat(void) {
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        const uint32_t *v = kat[t];
        ds_philox4 r = ds_philox4x32_10(v[0], v[1], v[2], v[3], v[4], v[5]);
        for (int i = 0; i < 4; i++)
            CHECK(r.v[i] == v[6 + i], "philox KAT %d word %d: %08x, want %08x", t, i, r.v[i],
                  v[6 + i]);
    }
    /* the block layout puts the block index in counter words 0-1, the tag in
     * word 2, the seed in the key (the layout of cuRAND's curand_init) */
    uint64_t seed = 0x299f31d0a4093822ull, block = 0x85a308d3243f6a88ull;
    ds_philox4 a = ds_rng_block(seed, 0x13198a2eu, block);
    ds_philox4 b = ds_philox4x32_10(0x243f6a88, 0x85a308d3, 0x13198a2e, 0, 0xa4093822, 0x299f31d0);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "ds_rng_block layout differs from counter/key order");
}

static void test_accessors(void) {
    for (uint64_t j = 0; j < 64; j++) {
        ds_philox4 w = ds_rng_block(42, DS_RNG_TAG_UNIFORM, j / 4);
        float u = ds_rng_uniform_at(42, j);
        CHECK(u == ds_rng_bits_to_unit(w.v[j % 4]), "uniform_at(%llu) disagrees with the block",
              (unsigned long long)j);
        CHECK(u >= 0.0f && u < 1.0f, "uniform %g outside [0,1)", (double)u);
        float z[4];
        ds_rng_normal_block(42, j / 4, z);
        CHECK(ds_rng_normal_at(42, j) == z[j % 4], "normal_at(%llu) disagrees with the block",
              (unsigned long long)j);
    }
    CHECK(ds_rng_bits_to_unit(0xffffffffu) < 1.0f, "unit(max) must stay below 1");
    CHECK(ds_rng_bits_to_unit(0xffu) == 0.0f, "unit keeps the top 24 bits only");
}

/* ds_rng_logf over every input Box-Muller feeds it, k * 2^-24 for k in
 * [1, 2^24]: within 2 ulp (float) of log in double -- the series is
 * truncated at 2e-11 and each of the ~10 float operations rounds once, most
 * on values much smaller than the result. */
static void test_logf(void) {
    double worst = 0.0;
    for (uint32_t k = 1; k <= (1u << 24); k++) {
        float x = (float)k * 5.9604644775390625e-8f;
        double want = log((double)x), got = ds_rng_logf(x);
        double ulp = want == 0.0 ? FLT_MIN : ldexp(1.0, ilogb(want) - 23);
        double e = fabs(got - want) / ulp;
        if (e > worst) worst = e;
    }
    CHECK(worst <= 2.0, "ds_rng_logf: worst error %.3f ulp > 2", worst);
    CHECK(ds_rng_logf(1.0f) == 0.0f, "log(1) = %g", (double)ds_rng_logf(1.0f));
}

/* sin/cos of 2 pi k 2^-24 for every 24-bit k: absolute error below 1.5e-7.
 * The angle a = r * fl(2 pi 2^-24) with |a| <= pi/4 carries the constant's
 * relative rounding 2^-24 -> <= 4.7e-8 absolute, plus a's own rounding
 * (half an ulp of a < 1: <= 3e-8); the series' last fmaf rounds once more
 * (<= 3e-8 for a result below 1) and the inner ones and the truncation add
 * about 1e-8: 1.2e-7 in all. (Measured: 8.3e-8.) */
static void test_sincos(void) {
    double worst = 0.0;
    for (uint32_t k = 0; k < (1u << 24); k++) {
        float s, c;
        ds_rng_sincos_turn24(k, &s, &c);
        double a = k_two_pi * (double)k / 16777216.0;
        double es = fabs(s - sin(a)), ec = fabs(c - cos(a));
        if (es > worst) worst = es;
        if (ec > worst) worst = ec;
    }
    CHECK(worst <= 1.5e-7, "ds_rng_sincos_turn24: worst absolute error %.3g > 1.5e-7", worst);
}

typedef ds_status (*rng_fn)(ds_backend *, float *, size_t, float, float, uint64_t, uint64_t);

/* The same stream cut three ways and at two thread counts gives equal bits. */
static void test_sharding(ds_backend *be1, ds_backend *be2, rng_fn f1, rng_fn f2,
                          const char *name) {
    const size_t n = 100003; /* odd: halves and blocks of 4 do not line up */
    const uint64_t seed = 0x1234abcdull;
    float *full = malloc(n * sizeof *full), *part = malloc(n * sizeof *part);
    float *again = malloc(n * sizeof *again);
    CHECK(f1(be1, full, n, 0.5f, 2.0f, seed, 0) == DS_OK, "%s failed", name);
    CHECK(f1(be1, again, n, 0.5f, 2.0f, seed, 0) == DS_OK, "%s failed", name);
    CHECK(memcmp(full, again, n * sizeof *full) == 0, "%s: same seed, different values", name);
    /* two halves at offsets 0 and n/2 */
    size_t h = n / 2;
    f1(be1, part, h, 0.5f, 2.0f, seed, 0);
    f1(be1, part + h, n - h, 0.5f, 2.0f, seed, h);
    CHECK(memcmp(full, part, n * sizeof *full) == 0, "%s: halves differ from the whole", name);
    /* uneven shards at unaligned offsets, as a flat parameter space cuts a tensor */
    const size_t cuts[] = {0, 1, 6, 4099, 50001, 77777, n};
    memset(part, 0, n * sizeof *part);
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++)
        f1(be1, part + cuts[c], cuts[c + 1] - cuts[c], 0.5f, 2.0f, seed, cuts[c]);
    CHECK(memcmp(full, part, n * sizeof *full) == 0, "%s: uneven shards differ", name);
    /* two threads */
    f2(be2, again, n, 0.5f, 2.0f, seed, 0);
    CHECK(memcmp(full, again, n * sizeof *full) == 0, "%s: 2 threads differ from 1", name);
    /* another seed gives other values */
    f1(be1, again, n, 0.5f, 2.0f, seed + 1, 0);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += full[i] == again[i];
    CHECK(same < n / 1000, "%s: seeds %llu and %llu agree on %zu of %zu values", name,
          (unsigned long long)seed, (unsigned long long)seed + 1, same, n);
    free(full);
    free(part);
    free(again);
}

/* Statistics of 2^20 standard normals (seed fixed, so the test is
 * deterministic; the tolerances say what an honest N(0,1) sample of this size
 * satisfies with overwhelming probability):
 *   mean: standard error 1/sqrt(n) = 9.8e-4; 5 of them = 4.9e-3;
 *   std: standard error of s is 1/sqrt(2n) = 6.9e-4; 5 of them = 3.5e-3;
 *   P(|z| < 1) = 0.682689: standard error sqrt(p(1-p)/n) = 4.5e-4; 5 = 2.3e-3.
 * And every value against Box-Muller in double from the same Philox words:
 * |z| = r |cos| with r's relative error ~3 ulp (log 2 ulp, halved by sqrt, plus
 * sqrt and product roundings) and cos/sin 1.5e-7 absolute (test_sincos), so
 * |err| <= 1.5e-7 r + 3 * 6e-8 |z| + 6e-8 |z| = 1.5e-7 r + 2.4e-7 |z|. */
static void test_normal(ds_backend *be) {
    const size_t n = (size_t)1 << 20;
    const uint64_t seed = 2024, offset = 3;
    float *z = malloc(n * sizeof *z);
    CHECK(be->ops->rng_normal(be, z, n, 0.0f, 1.0f, seed, offset) == DS_OK, "rng_normal failed");
    double sum = 0, sum2 = 0;
    size_t inside = 0, nbad = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t j = offset + i;
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_NORMAL, j / 4);
        uint32_t w0 = w.v[(j % 4) / 2 * 2], w1 = w.v[(j % 4) / 2 * 2 + 1];
        double u1 = ((w0 >> 8) + 1.0) / 16777216.0, th = k_two_pi * (w1 >> 8) / 16777216.0;
        double r = sqrt(-2.0 * log(u1));
        double want = (j % 2 == 0) ? r * cos(th) : r * sin(th);
        double err = fabs(z[i] - want), tol = 1.5e-7 * r + 2.4e-7 * fabs(want);
        if (err > tol && nbad++ == 0)
            fprintf(stderr, "normal[%zu] = %.9g, Box-Muller in double %.9g (err %.3g > %.3g)\n", i,
                    (double)z[i], want, err, tol);
        sum += z[i];
        sum2 += (double)z[i] * z[i];
        inside += fabsf(z[i]) < 1.0f;
    }
    CHECK(nbad == 0, "%zu normal values differ from Box-Muller in double", nbad);
    double mean = sum / n, sd = sqrt(sum2 / n - mean * mean), p1 = (double)inside / n;
    CHECK(fabs(mean) < 4.9e-3, "normal mean %.5f, want 0 +- 4.9e-3", mean);
    CHECK(fabs(sd - 1.0) < 3.5e-3, "normal std %.5f, want 1 +- 3.5e-3", sd);
    CHECK(fabs(p1 - 0.682689) < 2.3e-3, "P(|z|<1) = %.5f, want 0.68269 +- 2.3e-3", p1);
    /* mean and std are applied as fmaf(std, z, mean), exactly */
    float *y = malloc(n * sizeof *y);
    be->ops->rng_normal(be, y, n, 2.0f, 0.02f, seed, offset);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != fmaf(0.02f, z[i], 2.0f);
    CHECK(bad == 0, "rng_normal(mean 2, std 0.02) != fmaf(std, z, mean) for %zu values", bad);
    free(y);
    free(z);
}

/* 2^20 uniforms in [-3, 5): all inside; mean 1 with standard error
 * 8/sqrt(12 n) = 2.3e-3 (5 of them: 1.1e-2); variance 64/12 = 5.333 with
 * standard error sqrt((m4 - s^4)/n) = 64 sqrt(1/80 - 1/144)/sqrt(n) = 4.6e-3
 * (5 of them: 2.3e-2). */
static void test_uniform(ds_backend *be) {
    const size_t n = (size_t)1 << 20;
    float *u = malloc(n * sizeof *u);
    CHECK(be->ops->rng_uniform(be, u, n, -3.0f, 5.0f, 99, 0) == DS_OK, "rng_uniform failed");
    double sum = 0, sum2 = 0;
    size_t outside = 0;
    for (size_t i = 0; i < n; i++) {
        outside += !(u[i] >= -3.0f && u[i] < 5.0f);
        sum += u[i];
        sum2 += (double)u[i] * u[i];
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    CHECK(outside == 0, "%zu uniforms outside [-3, 5)", outside);
    CHECK(fabs(mean - 1.0) < 1.1e-2, "uniform mean %.5f, want 1 +- 1.1e-2", mean);
    CHECK(fabs(var - 64.0 / 12.0) < 2.3e-2, "uniform variance %.5f, want 5.3333 +- 2.3e-2", var);
    /* element i is fmaf(hi - lo, unit(word), lo) of element offset + i */
    for (size_t i = 0; i < 1000; i++)
        CHECK(u[i] == fmaf(8.0f, ds_rng_uniform_at(99, i), -3.0f), "uniform[%zu] layout", i);
    free(u);
}

static void test_bad_args(ds_backend *be) {
    float x[4];
    CHECK(be->ops->rng_normal(be, NULL, 4, 0, 1, 1, 0) == DS_ERR_INVALID_ARG, "NULL dst accepted");
    CHECK(be->ops->rng_uniform(be, x, 4, 0, 1, 1, UINT64_MAX - 1) == DS_ERR_INVALID_ARG,
          "counter overflow accepted");
    CHECK(strstr(ds_last_error(), "overflow") != NULL, "message: %s", ds_last_error());
    CHECK(be->ops->rng_uniform(be, NULL, 0, 0, 1, 1, 0) == DS_OK, "n = 0 must be a no-op");
    ds_clear_error();
}

int main(void) {
    test_philox_kat();
    test_accessors();
    test_logf();
    test_sincos();
    ds_backend *be1 = test_cpu_backend(1, NULL), *be2 = test_cpu_backend(2, NULL);
    test_sharding(be1, be2, be1->ops->rng_normal, be2->ops->rng_normal, "rng_normal");
    test_sharding(be1, be2, be1->ops->rng_uniform, be2->ops->rng_uniform, "rng_uniform");
    test_normal(be1);
    test_uniform(be2);
    test_bad_args(be1);
    ds_backend_destroy(be1);
    ds_backend_destroy(be2);
    return test_finish("test_backend_rng");
}
