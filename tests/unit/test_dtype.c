/* fp16 and bf16 conversions of engine/core/dtype.h (the code the CUDA
 * kernels run too).
 *
 *   - every one of the 65536 halves and 65536 bfloats decodes to the value
 *     its bits define (computed here independently in double) and encodes
 *     back to the same bits (NaNs: to a NaN of the same sign);
 *   - every tie between two neighbouring finite values rounds to the even one,
 *     and the floats just below / above each tie to the nearer one;
 *   - hand cases: overflow to inf, subnormals, signed zero, NaN quieting;
 *   - a sweep of 4 million float bit patterns against an independent
 *     nearest-even search (and against the compiler's _Float16 where the
 *     compiler has one). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/dtype.h"
#include "tests/unit/test_util.h"

/* ---- independent decoders (double arithmetic from the bit fields) ---- */

/* Value of a positive half bit pattern h in [0, 0x7c00]; 0x7c00 is taken as
 * 65536 = 2^16, the value the exponent field would give, which is where the
 * round-to-nearest boundary to inf lies. */
static double half_value(uint32_t h) {
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return ldexp((double)m, -24);
    return ldexp(1024.0 + m, (int)e - 25);
}

/* Value of a positive bf16 pattern in [0, 0x7f80]; 0x7f80 is taken as 2^128. */
static double bf16_value(uint32_t h) {
    uint32_t e = (h >> 7) & 0xff, m = h & 0x7f;
    if (e == 0) return ldexp((double)m, -133);
    return ldexp(128.0 + m, (int)e - 134);
}

/* Nearest-even rounding to one of two neighbours, by comparing distances. */
static uint32_t pick_nearest_even(double x, uint32_t lo, double vlo, uint32_t hi, double vhi) {
    double dlo = x - vlo, dhi = vhi - x;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1u) ? hi : lo;
}

/* Reference fp32 -> fp16 by binary search over the table of half values. */
static double g_half_tab[0x7c01];

static uint16_t ref_f32_to_f16(float f) {
    uint32_t sign = signbit(f) ? 0x8000u : 0u;
    if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
    double a = fabs((double)f);
    if (a >= 65536.0) return (uint16_t)(sign | 0x7c00u);
    uint32_t lo = 0, hi = 0x7c00; /* g_half_tab[lo] <= a < g_half_tab[hi] */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (g_half_tab[mid] <= a) lo = mid;
        else hi = mid;
    }
    return (uint16_t)(sign | pick_nearest_even(a, lo, g_half_tab[lo], hi, g_half_tab[hi]));
}

/* Reference fp32 -> bf16: the two bf16 neighbours of f are its bits
 * truncated to 16 and that plus one. */
static uint16_t ref_f32_to_bf16(float f) {
    uint32_t sign = signbit(f) ? 0x8000u : 0u;
    if (isnan(f)) return (uint16_t)(sign | 0x7fc0u);
    double a = fabs((double)f);
    if (isinf(f)) return (uint16_t)(sign | 0x7f80u);
    uint32_t lo = (ds_f32_bits(fabsf(f)) >> 16);
    return (uint16_t)(sign | pick_nearest_even(a, lo, bf16_value(lo), lo + 1, bf16_value(lo + 1)));
}

static int is_half_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
static int is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

/* ---- fp16 ---- */

static void test_f16_all_patterns(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ds_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        int neg = (h & 0x8000u) != 0;
        if (e == 0x1f && m != 0) {
            CHECK(isnan(f), "half %04x decodes to %g, want NaN", h, (double)f);
            uint16_t back = ds_f32_to_f16(f);
            CHECK(is_half_nan(back) && ((back & 0x8000u) != 0) == neg,
                  "half NaN %04x re-encodes to %04x", h, back);
            continue;
        }
        double want = e == 0x1f ? INFINITY : half_value(h & 0x7fffu);
        if (neg) want = -want;
        CHECK((double)f == want, "half %04x decodes to %.9g, want %.9g", h, (double)f, want);
        CHECK((signbit(f) != 0) == neg, "half %04x lost its sign", h);
        uint16_t back = ds_f32_to_f16(f);
        CHECK(back == h, "half %04x -> %.9g -> %04x (round trip)", h, (double)f, back);
    }
}

/* Each tie between neighbours h and h+1 (h = 0 .. 0x7bff, the last pair being
 * 65504 and the overflow boundary 65536) and the floats either side of it. */
static void test_f16_ties(void) {
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = half_value(h), hi = half_value(h + 1);
        float mid = (float)((lo + hi) / 2); /* 12 significant bits: exact in float */
        CHECK((double)mid == (lo + hi) / 2, "tie %04x not exact in float", h);
        uint32_t even = (h & 1u) ? h + 1 : h;
        uint16_t got = ds_f32_to_f16(mid);
        CHECK(got == even, "tie %.9g between %04x and %04x -> %04x, want %04x", (double)mid, h,
              h + 1, got, even);
        CHECK(ds_f32_to_f16(-mid) == (0x8000u | even), "tie -%.9g -> %04x", (double)mid,
              ds_f32_to_f16(-mid));
        float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        CHECK(ds_f32_to_f16(below) == h, "%.9g (below tie) -> %04x, want %04x", (double)below,
              ds_f32_to_f16(below), h);
        CHECK(ds_f32_to_f16(above) == h + 1, "%.9g (above tie) -> %04x, want %04x", (double)above,
              ds_f32_to_f16(above), h + 1);
    }
}

static void test_f16_hand_cases(void) {
    struct {
        float f;
        uint16_t h;
        const char *why;
    } cases[] = {
        {1.0f, 0x3c00, "one"},
        {-2.0f, 0xc000, "minus two"},
        {0.1f, 0x2e66, "0.1 rounds down (0x2e66 = 0.0999755859)"},
        {65504.0f, 0x7bff, "largest half"},
        {65519.99609375f, 0x7bff, "just below the overflow tie"},
        {65520.0f, 0x7c00, "overflow tie rounds to even = inf"},
        {1e5f, 0x7c00, "overflow"},
        {FLT_MAX, 0x7c00, "FLT_MAX overflows"},
        {-FLT_MAX, 0xfc00, "-FLT_MAX overflows to -inf"},
        {INFINITY, 0x7c00, "inf"},
        {-INFINITY, 0xfc00, "-inf"},
        {0.0f, 0x0000, "zero"},
        {-0.0f, 0x8000, "negative zero keeps its sign"},
        {5.9604644775390625e-8f, 0x0001, "2^-24, smallest subnormal"},
        {2.98023223876953125e-8f, 0x0000, "2^-25 ties to even (zero)"},
        {2.9802326e-8f, 0x0001, "just above 2^-25 rounds up"},
        {8.94069671630859375e-8f, 0x0002, "3 * 2^-25 ties to even (2)"},
        {-1.4901161193847656e-8f, 0x8000, "-2^-26 underflows to -0"},
        {6.103515625e-5f, 0x0400, "2^-14, smallest normal"},
        {6.1005353927612305e-05f, 0x0400, "2^-14 - 2^-25 ties to even (0x0400)"},
        {6.097555160522461e-05f, 0x03ff, "largest subnormal"},
        {1.00048828125f, 0x3c00, "1 + 2^-11 ties to even (1)"},
        {1.00146484375f, 0x3c02, "1 + 3*2^-11 ties to even (0x3c02)"},
        {1e-45f, 0x0000, "float subnormal underflows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = ds_f32_to_f16(cases[i].f);
        CHECK(got == cases[i].h, "f16(%.10g) = %04x, want %04x (%s)", (double)cases[i].f, got,
              cases[i].h, cases[i].why);
    }
    CHECK(is_half_nan(ds_f32_to_f16(NAN)), "f16(NaN) = %04x, want a NaN", ds_f32_to_f16(NAN));
    /* a signalling NaN with payload only in bits the half drops must stay NaN */
    CHECK(is_half_nan(ds_f32_to_f16(ds_bits_f32(0x7f800001u))), "f16(sNaN 0x7f800001) = %04x",
          ds_f32_to_f16(ds_bits_f32(0x7f800001u)));
    CHECK(isinf(ds_f16_to_f32(0x7c00)) && ds_f16_to_f32(0x7c00) > 0, "f16 0x7c00 is not +inf");
}

/* ---- bf16 ---- */

static void test_bf16_all_patterns(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ds_bf16_to_f32((uint16_t)h);
        uint32_t e = (h >> 7) & 0xff, m = h & 0x7f;
        int neg = (h & 0x8000u) != 0;
        if (e == 0xff && m != 0) {
            CHECK(isnan(f), "bf16 %04x decodes to %g, want NaN", h, (double)f);
            uint16_t back = ds_f32_to_bf16(f);
            CHECK(is_bf16_nan(back) && ((back & 0x8000u) != 0) == neg,
                  "bf16 NaN %04x re-encodes to %04x", h, back);
            continue;
        }
        double want = e == 0xff ? INFINITY : bf16_value(h & 0x7fffu);
        if (neg) want = -want;
        CHECK((double)f == want && (signbit(f) != 0) == neg, "bf16 %04x decodes to %.9g, want %.9g",
              h, (double)f, want);
        uint16_t back = ds_f32_to_bf16(f);
        CHECK(back == h, "bf16 %04x -> %.9g -> %04x (round trip)", h, (double)f, back);
    }
}

static void test_bf16_ties(void) {
    for (uint32_t h = 0; h < 0x7f80; h++) {
        uint32_t tie_bits = (h << 16) | 0x8000u; /* halfway between h and h+1 */
        float mid = ds_bits_f32(tie_bits);
        uint32_t even = (h & 1u) ? h + 1 : h;
        CHECK(ds_f32_to_bf16(mid) == even, "bf16 tie %08x -> %04x, want %04x", tie_bits,
              ds_f32_to_bf16(mid), even);
        CHECK(ds_f32_to_bf16(-mid) == (0x8000u | even), "bf16 tie -%08x -> %04x", tie_bits,
              ds_f32_to_bf16(-mid));
        CHECK(ds_f32_to_bf16(ds_bits_f32(tie_bits - 1)) == h, "bf16 below tie %08x -> %04x",
              tie_bits - 1, ds_f32_to_bf16(ds_bits_f32(tie_bits - 1)));
        CHECK(ds_f32_to_bf16(ds_bits_f32(tie_bits + 1)) == h + 1, "bf16 above tie %08x -> %04x",
              tie_bits + 1, ds_f32_to_bf16(ds_bits_f32(tie_bits + 1)));
    }
}

static void test_bf16_hand_cases(void) {
    struct {
        uint32_t f_bits;
        uint16_t h;
        const char *why;
    } cases[] = {
        {0x3f800000u, 0x3f80, "one"},
        {0x3f808000u, 0x3f80, "1 + 2^-8 ties to even (1)"},
        {0x3f818000u, 0x3f82, "1 + 3*2^-8 ties to even (0x3f82)"},
        {0x3dcccccdu, 0x3dcd, "0.1 rounds up"},
        {0x7f7f0000u, 0x7f7f, "largest bf16"},
        {0x7f7f7fffu, 0x7f7f, "just below the overflow tie"},
        {0x7f7f8000u, 0x7f80, "overflow tie rounds to even = inf"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX overflows to inf"},
        {0xff7fffffu, 0xff80, "-FLT_MAX overflows to -inf"},
        {0x7f800000u, 0x7f80, "inf"},
        {0x80000000u, 0x8000, "negative zero keeps its sign"},
        {0x00000001u, 0x0000, "smallest float subnormal rounds to zero"},
        {0x00008000u, 0x0000, "subnormal tie to even (zero)"},
        {0x00008001u, 0x0001, "just above the subnormal tie"},
        {0x00018000u, 0x0002, "subnormal tie to even (2)"},
        {0x007f8000u, 0x0080, "largest subnormal tie carries into the smallest normal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = ds_f32_to_bf16(ds_bits_f32(cases[i].f_bits));
        CHECK(got == cases[i].h, "bf16(%08x) = %04x, want %04x (%s)", cases[i].f_bits, got,
              cases[i].h, cases[i].why);
    }
    /* signalling NaN whose payload is only in the dropped bits: without
     * setting the quiet bit it would truncate to inf */
    CHECK(is_bf16_nan(ds_f32_to_bf16(ds_bits_f32(0x7f800001u))), "bf16(sNaN 0x7f800001) = %04x",
          ds_f32_to_bf16(ds_bits_f32(0x7f800001u)));
    CHECK(is_bf16_nan(ds_f32_to_bf16(ds_bits_f32(0xff800001u))) &&
              (ds_f32_to_bf16(ds_bits_f32(0xff800001u)) & 0x8000u),
          "bf16(-sNaN) = %04x", ds_f32_to_bf16(ds_bits_f32(0xff800001u)));
}

/* ---- sweep against independent references ---- */

static void test_sweep(void) {
    for (uint32_t h = 0; h <= 0x7c00; h++) g_half_tab[h] = half_value(h);
    /* 1021 is odd, so the stride visits every exponent and low-bit pattern
     * class; 4.2 million values. */
    size_t checked = 0;
    for (uint64_t u = 7; u < ((uint64_t)1 << 32); u += 1021) {
        float f = ds_bits_f32((uint32_t)u);
        uint16_t h = ds_f32_to_f16(f), hr = ref_f32_to_f16(f);
        if (isnan(f)) {
            CHECK(is_half_nan(h), "f16(NaN %08x) = %04x", (uint32_t)u, h);
        } else {
            CHECK(h == hr, "f16(%.10g = %08x) = %04x, reference %04x", (double)f, (uint32_t)u, h,
                  hr);
#ifdef __FLT16_MAX__
            _Float16 hw = (_Float16)f; /* the compiler's (or F16C's) conversion */
            uint16_t hwb;
            memcpy(&hwb, &hw, 2);
            CHECK(h == hwb, "f16(%.10g = %08x) = %04x, _Float16 gives %04x", (double)f, (uint32_t)u,
                  h, hwb);
#endif
        }
        uint16_t b = ds_f32_to_bf16(f), br = ref_f32_to_bf16(f);
        if (isnan(f))
            CHECK(is_bf16_nan(b), "bf16(NaN %08x) = %04x", (uint32_t)u, b);
        else
            CHECK(b == br, "bf16(%.10g = %08x) = %04x, reference %04x", (double)f, (uint32_t)u, b,
                  br);
        checked++;
    }
    CHECK(checked > 4000000, "sweep checked only %zu values", checked);
}

int main(void) {
    test_f16_all_patterns();
    test_f16_ties();
    test_f16_hand_cases();
    test_bf16_all_patterns();
    test_bf16_ties();
    test_bf16_hand_cases();
    test_sweep();
    return test_finish("test_dtype");
}
