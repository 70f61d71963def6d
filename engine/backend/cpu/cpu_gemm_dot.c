/* bf16-input GEMMs on the CPU's bf16 dot-product instruction (AVX512-BF16:
 * Cooper Lake, Sapphire Rapids and later, AMD Zen 4 and later), behind the
 * gemm slot of the avx512 variant (cpu_gemm_bf16.c, cpu_ops.h).
 *
 * Why. With gemm_inputs DS_BF16 the gemm slot rounds A and B to bf16 and,
 * without this file, multiplies the rounded values with the fp32 kernels
 * (OpenBLAS): the same FLOP rate as fp32 plus a rounding pass, so bf16
 * mixed precision is slower than fp32 on the CPU. VDPBF16PS multiplies 32
 * bf16 pairs and adds them to 16 fp32 sums in one instruction, twice the
 * multiply-adds of an fp32 FMA of the same width, at the same rate on the
 * hosts that have it (measured on Zen 4: bench/RESULTS.md, "bf16 GEMMs on
 * the CPU's dot-product instruction").
 *
 * What it computes. Each element of C is the fp32 sum of the exact
 * products of the bf16-rounded inputs (ds_f32_to_bf16, the rounding of
 * every other path), as the fp32 path computes it, in another order: k in
 * blocks of DOT_KC, each block's products summed in one register from +0.0,
 * two at a time (the instruction adds the odd k's product, then the even
 * one's, each rounded to fp32), and the blocks added to C in order. Inputs
 * below 2^-126 in magnitude count as zero (the conversion's and the dot
 * product's DAZ, see pair_words), and fp32 results below it are flushed to
 * zero (FTZ); nothing else differs from an fp32 sum of the same products.
 * The order depends on the shape
 * only, not on the thread count: the same bits at every thread count
 * (tests/unit/test_gemm_dot.c). Like OpenBLAS's kernels, which already round
 * differently per CPU kind, the result is not the bits of a host without the
 * instruction; the cuda backend's tensor cores sum the same products in
 * their own order too.
 *
 * Layout (GotoBLAS's): op(B) is packed once, in blocks of DOT_KC k's and
 * panels of DOT_NR columns, each k pair of a column as one 32-bit word (the
 * even k in the low half): by one thread block by block as it reaches
 * them, by several all at first, shared, each a part; each thread packs
 * its own rows of op(A), DOT_MC rows by one k block at a time, and goes
 * through every k block of those rows while their block of C is in cache;
 * the kernel keeps a DOT_MR x DOT_NR tile of C in 16 registers over a k
 * block. While a block's tiles run, the thread asks the L2 cache for the
 * next block of op(A) (and, alone, of op(B)) (dot_ahead), so that packing
 * it reads the cache, not memory. Many products in one call (attention's)
 * run a thread per product instead.
 * The threads take contiguous ranges of C's rows, so nothing one thread
 * writes is read by another. The packs take the backend's GEMM workspace
 * that the rounded copies of the fp32 path would (ds_gemm_workspace_of), so
 * the memory plan and the estimate do not change; a call whose packs would
 * not fit it goes the fp32 way, and one with room for fewer threads' packs
 * than the backend has runs on fewer threads.
 *
 * DS_CPU_BF16_DOT=0 in the environment turns this off (for benchmarks that
 * compare the two paths, and the tests that compare the variants bit for
 * bit). */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/math.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define DOT_BUILT 1
#else
#define DOT_BUILT 0
#endif

/* The tile's loops unrolled, so that its 16 sums stay in registers. */
#if defined(__clang__)
#define DOT_UNROLL _Pragma("unroll")
#else
#define DOT_UNROLL _Pragma("GCC unroll 8")
#endif

#define DOT_MR 8    /* rows of the register tile */
#define DOT_NR 32   /* columns: two vectors of 16 */
#define DOT_KC 256  /* k's per block: a 32-column panel of B, 16 KiB, stays in L1 */
#define DOT_MC 256  /* rows per packed block of A: 128 KiB, in L2 (a transposed A is
                     * read in runs of DOT_MC floats of its rows: 128 ran the weight
                     * gradients ~6% slower on cold operands, RESULTS "Stop 42") */
#define DOT_PB 8    /* pairs a strided pack deals to its panels at a time */
#define DOT_PJ 8    /* panels of op(B) one pack of B as stored reads across (1 KiB of a row) */

static inline int lesser(int a, int b) { return a < b ? a : b; }

/* Rows of op(A) a thread packs at a time: DOT_MC, or all of a smaller m
 * (to the next tile). */
static int a_rows(int m) {
    return lesser((m + DOT_MR - 1) / DOT_MR * DOT_MR, DOT_MC);
}

/* Bytes rounded up to whole 64-byte lines: the packs' and the parts' places
 * in the workspace. */
static inline size_t whole_lines(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* Where a call's packs go in the workspace (64-byte aligned): all of op(B),
 * b bytes, then one block of op(A) per thread, a bytes each. */
typedef struct dot_layout {
    size_t b, a;
} dot_layout;

static dot_layout layout_of(int m, int n, int k) {
    size_t kcp = (size_t)(lesser(k, DOT_KC) + 1) / 2;
    size_t npad = (size_t)(n + DOT_NR - 1) / DOT_NR * DOT_NR;
    return (dot_layout){.b = whole_lines((size_t)(k + 1) / 2 * npad * 4),
                        .a = whole_lines((size_t)a_rows(m) * kcp * 4)};
}

/* Bytes of the workspace a call on nt threads needs (64: the alignment). */
static size_t dot_need(int m, int n, int k, int nt) {
    dot_layout l = layout_of(m, n, k);
    return 64 + l.b + (size_t)nt * l.a;
}

static bool dot_enabled(void) {
#if DOT_BUILT
    static int on = -1; /* decided once: the CPU and the environment do not change */
    if (__atomic_load_n(&on, __ATOMIC_RELAXED) < 0) {
        const char *e = getenv("DS_CPU_BF16_DOT");
        bool off = e && (!strcmp(e, "0") || !strcmp(e, "off"));
        __atomic_store_n(&on, !off && __builtin_cpu_supports("avx512bf16"), __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&on, __ATOMIC_RELAXED) == 1;
#else
    return false;
#endif
}

bool ds_cpu_gemm_dot_takes(int m, int n, int k, float alpha, float beta, size_t ws_bytes) {
    return alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && m > 0 && n > 0 && k > 0 &&
           dot_need(m, n, k, 1) <= ws_bytes && dot_enabled();
}

#if DOT_BUILT
#include <immintrin.h>

/* The packs round with the instruction set's own conversion,
 * VCVTNE2PS2BF16 (32 fp32 values to bf16 in one instruction): round to
 * nearest even and NaNs quieted, as ds_f32_to_bf16 (engine/backend/math.h),
 * except that fp32 inputs below 2^-126 in magnitude (denormals) become
 * zero of their sign; the dot product takes bf16 values below 2^-126 as
 * zero anyway, so the one difference from rounding with ds_f32_to_bf16 is
 * that the fp32 values just below 2^-126, which it rounds up to 2^-126,
 * count as zero too. (Checked over all 2^32 inputs on Zen 4: the same bf16
 * bits for every fp32 value but the denormals.) One instruction per 32
 * values, where the integer rounding of cpu_ops.h (ds_cpu_bf16_round_bits)
 * takes about eight per 16. */

/* The words of a k pair: word l = bf16(x[l]) | bf16(y[l]) << 16 (the low
 * half the even k), from the 16-bit halves lane order vcvtne2ps2bf16 gives
 * (x's 16 values, then y's). */
static const uint16_t pair_lanes[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/* n pair words w[l] = bf16(x[l]) | bf16(y[l]) << 16 for l < have (y NULL:
 * +0.0 there), +0.0 from have on: two rows of k (or of op(A)'s rows). */
__attribute__((target("avx512bf16"))) static void pair_words(uint32_t *restrict w, const float *x,
                                                             const float *y, int have, int n) {
    const __m512i lanes = _mm512_loadu_si512(pair_lanes);
    have = have < n ? (have > 0 ? have : 0) : n;
    for (int l = 0; l < n; l += 16) {
        const int left = have - l;
        const __mmask16 in = left >= 16 ? (__mmask16)0xffff
                             : left > 0 ? (__mmask16)((1u << left) - 1u)
                                        : (__mmask16)0;
        const __mmask16 out = n - l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - l)) - 1u);
        const __m512 xv = _mm512_maskz_loadu_ps(in, x + l);
        const __m512 yv = y ? _mm512_maskz_loadu_ps(in, y + l) : _mm512_setzero_ps();
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(yv, xv);
        _mm512_mask_storeu_epi32(w + l, out, _mm512_permutexvar_epi16(lanes, h));
    }
}

/* kc consecutive floats as ceil(kc / 2) pair words (the bf16 values in
 * order, +0.0 after the last). */
__attribute__((target("avx512bf16"))) static void pair_row(uint32_t *restrict dst,
                                                           const float *restrict src, int kc) {
    uint16_t *restrict d = (uint16_t *)dst;
    const int len = (kc + 1) / 2 * 2; /* the values and the pad */
    for (int c = 0; c < len; c += 32) {
        const int left = kc - c;
        const __mmask16 lo = left >= 16 ? (__mmask16)0xffff
                             : left > 0 ? (__mmask16)((1u << left) - 1u)
                                        : (__mmask16)0;
        const __mmask16 hi = left >= 32 ? (__mmask16)0xffff
                             : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u)
                                         : (__mmask16)0;
        const __mmask32 out = len - c >= 32 ? (__mmask32)0xffffffffu
                                            : (__mmask32)((1u << (len - c)) - 1u);
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + c + 16),
                                               _mm512_maskz_loadu_ps(lo, src + c));
        _mm512_mask_storeu_epi16(d + c, out, (__m512i)h);
    }
}

/* op(A) rows [r0, r0 + mc), k's [k0, k0 + kc), kcp = ceil(kc / 2) pairs;
 * the k past kc are +0.0. Two layouts, whichever A's storage reads
 * contiguously; the tile reads pair p of row i at a[i si + p sp]:
 *   - A as stored (op = A): row i's pairs together, si = kcp, sp = 1: the
 *     row's bf16 values in order (rows up to the next multiple of DOT_MR
 *     +0.0);
 *   - transposed: panels of DOT_MR rows, pair p of the panel's rows
 *     together, si = 1, sp = DOT_MR (rows past mc +0.0). */
static void pack_a(uint32_t *restrict dst, const float *A, int lda, bool ta, int r0, int mc,
                   int k0, int kc) {
    const int kcp = (kc + 1) / 2;
    if (!ta) {
        for (int i = 0; i < mc; i++) pair_row(dst + (size_t)i * kcp, A + (int64_t)(r0 + i) * lda + k0, kc);
        /* the last tile's rows past mc: +0.0, so that the tile reads no
         * stale words (their sums are not stored) */
        const int rows = (mc + DOT_MR - 1) / DOT_MR * DOT_MR;
        memset(dst + (size_t)mc * kcp, 0, (size_t)(rows - mc) * kcp * 4);
        return;
    }
    /* DOT_PB pairs at a time, so that each panel gets DOT_PB x DOT_MR
     * consecutive words: one pair's words dealt alone would go to every
     * panel at a stride of kcp DOT_MR words (4 KiB at full blocks), the
     * same set of the L1 cache for every panel */
    const int panels = (mc + DOT_MR - 1) / DOT_MR;
    uint32_t w[DOT_PB][DOT_MC]; /* pairs p0.. of every row, then dealt to the panels */
    for (int p0 = 0; p0 < kcp; p0 += DOT_PB) {
        const int pb = lesser(kcp - p0, DOT_PB);
        for (int q = 0; q < pb; q++) {
            const int p = p0 + q;
            const float *x = A + (int64_t)(k0 + 2 * p) * lda + r0;
            pair_words(w[q], x, 2 * p + 1 < kc ? x + lda : NULL, mc, panels * DOT_MR);
        }
        for (int j = 0; j < panels; j++)
            for (int q = 0; q < pb; q++)
                memcpy(dst + ((size_t)j * kcp + p0 + q) * DOT_MR, w[q] + j * DOT_MR, DOT_MR * 4);
    }
}

/* The 16 x 16 words at src (rows ld words apart) transposed: word i of
 * src's row r to word r of dst's row i (rows ldd apart), for the first
 * `rows` rows of dst. 32-bit, then 64-bit interleaves within 128-bit
 * lanes, then two lane shuffles. */
static inline void turn16(uint32_t *dst, size_t ldd, const uint32_t *src, size_t ld, int rows) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + (size_t)i * ld);
    for (int i = 0; i < 16; i += 2) { /* lane l: r_i[4l], r_i+1[4l], r_i[4l+1], r_i+1[4l+1] */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) { /* r[g + c], lane l: rows g..g+3 of column 4l + c */
        r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int c = 0; c < 4; c++) { /* column 4l + c: lane l of r[c], r[4 + c], r[8 + c], r[12 + c] */
        const __m512i lo01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
        const __m512i hi01 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        const __m512i lo23 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
        const __m512i hi23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
        const __m512i out[4] = {_mm512_shuffle_i32x4(lo01, hi01, 0x88),
                                _mm512_shuffle_i32x4(lo01, hi01, 0xdd),
                                _mm512_shuffle_i32x4(lo23, hi23, 0x88),
                                _mm512_shuffle_i32x4(lo23, hi23, 0xdd)};
        for (int l = 0; l < 4; l++)
            if (4 * l + c < rows) _mm512_storeu_si512(dst + (size_t)(4 * l + c) * ldd, out[l]);
    }
}

/* op(B)'s k's [k0, k0 + kc) and panels [j0, j1) (at most DOT_PJ of them)
 * into the block at dst (panel jp at dst + jp kcp DOT_NR): pair p, column j
 * of panel jp at word p DOT_NR + j; columns past n and the k past kc are
 * +0.0.
 *   - B as stored (op = B): rows 2p and 2p + 1 of B give pair p. They are
 *     read across all the panels at once (whole stretches of a row, which
 *     the hardware prefetches) and dealt DOT_PB pairs at a time, for the
 *     reason pack_a gives.
 *   - transposed (a weight read as W^T, attention's K): column j of op(B)
 *     is row j of B, its pairs contiguous there; 16 such rows of words are
 *     turned into the panel's layout at a time (turn16). */
static void pack_b(uint32_t *restrict dst, const float *B, int ldb, bool tb, int n, int j0, int j1,
                   int k0, int kc) {
    const int kcp = (kc + 1) / 2;
    if (!tb) {
        uint32_t w[DOT_PB][DOT_PJ * DOT_NR];
        const int c0 = j0 * DOT_NR, width = (j1 - j0) * DOT_NR;
        for (int p0 = 0; p0 < kcp; p0 += DOT_PB) {
            const int pb = lesser(kcp - p0, DOT_PB);
            for (int q = 0; q < pb; q++) {
                const int p = p0 + q;
                const float *x = B + (int64_t)(k0 + 2 * p) * ldb + c0;
                pair_words(w[q], x, 2 * p + 1 < kc ? x + ldb : NULL, n - c0, width);
            }
            for (int jp = j0; jp < j1; jp++)
                for (int q = 0; q < pb; q++)
                    memcpy(dst + ((size_t)jp * kcp + p0 + q) * DOT_NR, w[q] + (jp - j0) * DOT_NR,
                           DOT_NR * 4);
        }
        return;
    }
    /* 16 columns at a time: their pair words as 16 rows, then turned 16 x
     * 16 words at a time in registers (one word at a time, this pack took
     * 16-19% of an attention score product's time) */
    uint32_t rows[16][DOT_KC / 2];
    const int kcp16 = (kcp + 15) / 16 * 16;
    for (int jp = j0; jp < j1; jp++) {
        uint32_t *panel = dst + (size_t)jp * kcp * DOT_NR;
        for (int h = 0; h < DOT_NR; h += 16) {
            for (int j = 0; j < 16; j++) {
                /* columns past n are +0.0; words past kcp become rows past
                 * the panel's, never stored, zeroed so that turn16 reads no
                 * uninitialised memory */
                const int c = jp * DOT_NR + h + j, have = c < n ? kcp : 0;
                if (have) pair_row(rows[j], B + (int64_t)c * ldb + k0, kc);
                memset(rows[j] + have, 0, (size_t)(kcp16 - have) * 4);
            }
            for (int p0 = 0; p0 < kcp; p0 += 16)
                turn16(panel + (size_t)p0 * DOT_NR + h, DOT_NR, &rows[0][p0], DOT_KC / 2,
                       lesser(kcp - p0, 16));
        }
    }
}

/* C[0..mr) x [0..nr) (ldc) = the tile's sums over kcp pairs, plus row i
 * of `from` (ldf apart) when it is given: C itself to add to it, or a bias
 * vector with ldf 0. The one function built for AVX512-BF16 (called only
 * where the CPU has it). */
__attribute__((target("avx512bf16"))) static void dot_tile(int kcp, const uint32_t *restrict a, size_t si, size_t sp,
                     const uint32_t *restrict b, float *C, int ldc, int mr, int nr,
                     const float *from, size_t ldf) {
    __m512 acc[DOT_MR][2];
DOT_UNROLL
    for (int i = 0; i < DOT_MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kcp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * DOT_NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * DOT_NR + 16);
        const uint32_t *ap = a + (size_t)p * sp;
DOT_UNROLL
        for (int i = 0; i < DOT_MR; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)ap[i * si]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
    const __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
    const __mmask16 m1 = nr >= 32   ? (__mmask16)0xffff
                         : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1u)
                                   : (__mmask16)0;
DOT_UNROLL
    for (int i = 0; i < DOT_MR; i++) {
        if (i >= mr) break;
        float *c = C + (size_t)i * ldc;
        __m512 v0 = acc[i][0], v1 = acc[i][1];
        if (from) {
            const float *f = from + (size_t)i * ldf;
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, f), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, f + 16), v1);
        }
        _mm512_mask_storeu_ps(c, m0, v0);
        _mm512_mask_storeu_ps(c + 16, m1, v1);
    }
}

/* The next block of op(A) a thread will pack, asked into the L2 cache a few
 * lines at a time while the tiles of the current one run. Packing reads A
 * in runs of one block's k's (or rows) a stride apart, which the hardware's
 * prefetchers follow badly: read cold, a pack took 15-17% of its product's
 * time at BERT-mini's k = 1024 and weight-gradient shapes (a driver that
 * timed the packs alone, bench/RESULTS.md "Stop 42"); while the tiles
 * compute, the memory is idle. bench_kernels --gemm-cold 1 shows the
 * products' rates on cold operands. */
typedef struct dot_ahead {
    const char *run; /* the run being asked for */
    size_t stride;   /* bytes between runs */
    int lines, line; /* 64-byte lines per run; the next one of `run` */
    int runs;        /* runs not yet asked for in full */
} dot_ahead;

/* `runs` runs of `len` floats from `first`, `ld` floats apart. */
static dot_ahead ahead_runs(const float *first, int ld, int runs, int len) {
    const int lines = (len * 4 + 63) / 64 + 1; /* + 1: a run need not start on a line */
    return (dot_ahead){(const char *)first, (size_t)ld * 4, lines, 0, runs};
}

/* Block (r0, mc) x (k0, kc) of op(A): runs of kc floats (A as stored) or
 * of mc floats (transposed: the k's are A's rows). */
static dot_ahead ahead_a(const float *A, int lda, bool ta, int r0, int mc, int k0, int kc) {
    return ta ? ahead_runs(A + (int64_t)k0 * lda + r0, lda, kc, mc)
              : ahead_runs(A + (int64_t)r0 * lda + k0, lda, mc, kc);
}

/* k block (k0, kc) of op(B), all n columns: the same for B. */
static dot_ahead ahead_b(const float *B, int ldb, bool tb, int n, int k0, int kc) {
    return tb ? ahead_runs(B + k0, ldb, n, kc) : ahead_runs(B + (int64_t)k0 * ldb, ldb, kc, n);
}

static inline void ahead_some(dot_ahead *h, int count) {
    for (; count > 0 && h->runs > 0; count--) {
        __builtin_prefetch(h->run + (size_t)h->line * 64, 0, 2);
        if (++h->line == h->lines) h->line = 0, h->run += h->stride, h->runs--;
    }
}

/* Piece pc of op(B)'s k block kb (panels [pc pj, pc pj + pj)) into its
 * place in bpack. */
static void pack_b_piece(uint32_t *bpack, size_t npad, const float *B, int ldb, bool tb, int n,
                         int k, int npanels, int pj, int kb, int pc) {
    const int k0 = kb * DOT_KC, j0 = pc * pj;
    pack_b(bpack + (size_t)k0 / 2 * npad, B, ldb, tb, n, j0, lesser(j0 + pj, npanels), k0,
           lesser(k - k0, DOT_KC));
}

/* One product: C = op(A) op(B) (+ C when beta is 1; + bias on every row
 * when it is given, with beta 0: the first k block's sums start from it as
 * they would from C holding it), the threads over C's rows. */
static void dot_one(int nt, bool ta, bool tb, int m, int n, int k, const float *A, int lda,
                    const float *B, int ldb, float beta, const float *bias, float *C, int ldc,
                    void *ws) {
    const int npanels = (n + DOT_NR - 1) / DOT_NR, units = (m + DOT_MR - 1) / DOT_MR;
    const int kblocks = (k + DOT_KC - 1) / DOT_KC;
    const size_t npad = (size_t)npanels * DOT_NR;
    const dot_layout l = layout_of(m, n, k);
    char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    uint32_t *bpack = (uint32_t *)base; /* block kb at word (kb DOT_KC / 2) npad */
    /* One thread packs op(B) block by block when its first row block
     * reaches it, having asked the cache for it while the block before ran
     * (as for op(A), below); several share each block, so they pack all of
     * op(B) first, each a part, and meet at a barrier. */
    const bool lazy = nt == 1;
    /* pieces of up to DOT_PJ panels, fewer where a product has too few k
     * blocks to give each thread two (one k block of 8 panels, BERT-mini's
     * 256 x 256 weights, was one piece: one thread packed, the other waited) */
    const int share = npanels * kblocks / (2 * nt);
    const int pj = share < 1 ? 1 : lesser(share, DOT_PJ);
    const int pieces = (npanels + pj - 1) / pj;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        if (!lazy) {
            /* the pieces; the implicit barrier ends it */
#pragma omp for schedule(static) collapse(2)
            for (int kb = 0; kb < kblocks; kb++)
                for (int pc = 0; pc < pieces; pc++)
                    pack_b_piece(bpack, npad, B, ldb, tb, n, k, npanels, pj, kb, pc);
        }
        const int t = omp_get_thread_num(), tn = omp_get_num_threads();
        const int m0 = (int)((int64_t)units * t / tn) * DOT_MR;
        int m1 = (int)((int64_t)units * (t + 1) / tn) * DOT_MR;
        m1 = lesser(m1, m);
        uint32_t *apack = (uint32_t *)(base + l.b + (size_t)t * l.a);
        /* a block of C's rows over every k block while it is in cache */
        for (int r0 = m0; r0 < m1; r0 += DOT_MC) {
            const int mc = lesser(m1 - r0, DOT_MC);
            for (int k0 = 0; k0 < k; k0 += DOT_KC) {
                const int kc = lesser(k - k0, DOT_KC), kcp = (kc + 1) / 2;
                const bool add = k0 > 0 || beta == 1.0f, first = lazy && r0 == m0;
                float *const cb = C + (int64_t)r0 * ldc;
                /* what the sums start from: C itself, the bias (each row), or nothing */
                const float *from = add ? cb : bias;
                const size_t ldf = add ? (size_t)ldc : 0;
                for (int pc = 0; first && pc < pieces; pc++)
                    pack_b_piece(bpack, npad, B, ldb, tb, n, k, npanels, pj, k0 / DOT_KC, pc);
                pack_a(apack, A, lda, ta, r0, mc, k0, kc);
                /* the blocks after these, over this block's tiles */
                const int nk0 = k0 + kc < k ? k0 + kc : 0, nr0 = nk0 ? r0 : r0 + mc;
                dot_ahead next_a = {0}, next_b = {0};
                if (nr0 < m1)
                    next_a = ahead_a(A, lda, ta, nr0, lesser(m1 - nr0, DOT_MC), nk0,
                                     lesser(k - nk0, DOT_KC));
                if (first && nk0) next_b = ahead_b(B, ldb, tb, n, nk0, lesser(k - nk0, DOT_KC));
                const int tiles = npanels * ((mc + DOT_MR - 1) / DOT_MR);
                const int per_a = (next_a.runs * next_a.lines + tiles - 1) / tiles;
                const int per_b = (next_b.runs * next_b.lines + tiles - 1) / tiles;
                for (int jp = 0; jp < npanels; jp++) {
                    const int c0 = jp * DOT_NR, nr = lesser(n - c0, DOT_NR);
                    const uint32_t *bp = bpack + (size_t)k0 / 2 * npad + (size_t)jp * kcp * DOT_NR;
                    for (int i0 = 0; i0 < mc; i0 += DOT_MR) {
                        ahead_some(&next_a, per_a);
                        ahead_some(&next_b, per_b);
                        dot_tile(kcp, apack + (size_t)i0 * kcp, ta ? 1 : (size_t)kcp,
                                 ta ? DOT_MR : 1, bp, cb + (int64_t)i0 * ldc + c0, ldc,
                                 lesser(mc - i0, DOT_MR), nr,
                                 from ? from + (size_t)i0 * ldf + c0 : NULL, ldf);
                    }
                }
            }
        }
    }
}
#endif

#if DOT_BUILT
/* Weight gradients, op(A) op(B) = X^T dY (A and B stored with k as their
 * rows: a batch's tokens), one product, k at least DOT_CUT_K and at least 4
 * times C's larger side, are cut along k at kh = k / 2 rounded up to a
 * block:
 *
 *   C = ([C +] the products of k < kh)  +  (the products of k >= kh),
 *
 * each part summed as dot_one sums (its blocks in order, the first part's
 * from C when beta is 1, the second's from +0.0), then the second added to
 * the first. The order depends on the shape only, as everywhere in this
 * file, so the bits do not depend on the thread count. At 2 threads each
 * thread computes one part: it reads only the rows of X and dY that the
 * element-wise passes before it wrote on the same thread (they split rows
 * the same way), packs its own op(B) and meets the other thread once, at
 * the end. Split by C's rows, each thread read all of X and dY and half of
 * the op(B) the other had packed: where the two cores share no cache (the
 * Zen 4 VM's vCPUs on two dies) these products took 27-37% longer than
 * where they do. With the cut the bf16 step ran 1.034-1.059x as fast at 1
 * rank x 2 threads on two dies, 1.008x on one, and 1.000-1.002x at 1 thread
 * (bench_train --cut ab; bench/RESULTS.md, "Stop 44").
 * The same cut of the fp32 path's OpenBLAS products did not pay there
 * (0.99-1.01x natively, 0.98-1.00x with the Zen kernels) and was not kept.
 * Returns kh, or 0 for a product that is not cut. */
#define DOT_CUT_K 2048
static int cut_at(bool ta, bool tb, int m, int n, int k, int batch, const float *bias) {
    const int side = m > n ? m : n;
    if (!ta || tb || batch != 1 || bias || k < DOT_CUT_K || k / 4 < side) return 0;
    return (k / 2 + DOT_KC - 1) / DOT_KC * DOT_KC;
}

/* Bytes of a cut product's workspace: the second part's sums (m x n), then
 * the packs of the two parts on nt threads each, side by side when the
 * parts run at once (both), one after the other's otherwise. */
static size_t cut_need(int m, int n, int k, int kh, int nt, bool both) {
    const size_t t = whole_lines((size_t)m * n * 4);
    const size_t p0 = whole_lines(dot_need(m, n, kh, nt));
    const size_t p1 = whole_lines(dot_need(m, n, k - kh, nt));
    return t + (both ? p0 + p1 : (p0 > p1 ? p0 : p1));
}

static void cut_one(int team, int m, int n, int k, int kh, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc, char *ws,
                      size_t ws_bytes) {
    float *T = (float *)ws;
    char *packs = ws + whole_lines((size_t)m * n * 4);
    const float *A1 = A + (int64_t)kh * lda, *B1 = B + (int64_t)kh * ldb;
    /* the parts at once, a thread each, where there are 2 threads and room */
    const bool both = team == 2 && cut_need(m, n, k, kh, 1, true) <= ws_bytes;
    if (!both) {
        int nt = team;
        while (nt > 1 && cut_need(m, n, k, kh, nt, false) > ws_bytes) nt--;
        /* the second part first: the first's C is in cache for the sum */
        dot_one(nt, true, false, m, n, k - kh, A1, lda, B1, ldb, 0.0f, NULL, T, n, packs);
        dot_one(nt, true, false, m, n, kh, A, lda, B, ldb, beta, NULL, C, ldc, packs);
    }
#pragma omp parallel num_threads(team) if (team > 1)
    {
        if (both) {
            if (omp_get_thread_num() == 0)
                dot_one(1, true, false, m, n, kh, A, lda, B, ldb, beta, NULL, C, ldc, packs);
            else
                dot_one(1, true, false, m, n, k - kh, A1, lda, B1, ldb, 0.0f, NULL, T, n,
                        packs + whole_lines(dot_need(m, n, kh, 1)));
#pragma omp barrier
        }
#pragma omp for schedule(static)
        for (int i = 0; i < m; i++) {
            float *c = C + (int64_t)i * ldc;
            const float *t = T + (size_t)i * n;
#pragma omp simd
            for (int j = 0; j < n; j++) c[j] += t[j];
        }
    }
}
#endif

ds_status ds_cpu_gemm_dot(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                          const float *A, int lda, int64_t strideA, const float *B, int ldb,
                          int64_t strideB, float beta, const float *bias, float *C, int ldc,
                          int64_t strideC, int batch, void *ws, size_t ws_bytes) {
#if DOT_BUILT
    const int team = ds_cpu_team(be);
    const int kh = be->gemm_no_cut ? 0 : cut_at(transa, transb, m, n, k, batch, bias);
    if (kh && cut_need(m, n, k, kh, 1, false) <= ws_bytes) {
        cut_one(team, m, n, k, kh, A, lda, B, ldb, beta, C, ldc, ws, ws_bytes);
        return DS_OK;
    }
    /* Many products (attention's per-head ones): a thread per product, each
     * with its own packs of A and B in its slice of the workspace, so no
     * thread waits for another's share of a product's op(B). Where the
     * products do not deal out evenly, or the slices do not fit, the
     * threads share each product as below. The bits are the same either
     * way: dot_one's order depends on the shape only. */
    const size_t slice = whole_lines(dot_need(m, n, k, 1));
    if (team > 1 && (batch % team == 0 || batch >= 4 * team) && (size_t)team * slice <= ws_bytes) {
#pragma omp parallel for num_threads(team) schedule(static)
        for (int b = 0; b < batch; b++)
            dot_one(1, transa, transb, m, n, k, A + b * strideA, lda, B + b * strideB, ldb, beta,
                    bias, C + b * strideC, ldc, (char *)ws + (size_t)omp_get_thread_num() * slice);
        return DS_OK;
    }
    /* as many threads as have room for their packs of A (the call was
     * taken with room for one) */
    int nt = team;
    while (nt > 1 && dot_need(m, n, k, nt) > ws_bytes) nt--;
    for (int b = 0; b < batch; b++)
        dot_one(nt, transa, transb, m, n, k, A + b * strideA, lda, B + b * strideB, ldb, beta,
                bias, C + b * strideC, ldc, ws);
    return DS_OK;
#else
    (void)transa, (void)transb, (void)m, (void)n, (void)k, (void)A, (void)lda, (void)strideA;
    (void)B, (void)ldb, (void)strideB, (void)beta, (void)bias, (void)C, (void)ldc, (void)strideC;
    (void)batch, (void)ws, (void)ws_bytes;
    return DS_ERR(DS_ERR_UNSUPPORTED, "cpu gemm: the %s kernels have no bf16 dot product",
                  be->ops->name);
#endif
}
