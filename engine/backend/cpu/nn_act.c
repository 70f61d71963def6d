/* cpu kernels of the element-wise layers: bias + activation and dropout
 * (fused with a bias and a residual). Each public function switches on the
 * activation once and calls an always-inlined body with a constant, so the
 * inner loops hold no dispatch and vectorise (the element math of nn_math.h
 * is libm-free for that reason). */
#include "engine/backend/cpu/nn_cpu.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define DS_INLINE static inline __attribute__((always_inline))

/* ---- bias + activation ---- */

/* The rows of a feed-forward activation are 4 KiB (1024 floats), a page
 * each, where the hardware prefetchers start over: each row began with a
 * miss to memory on every operand (47% of GELU backward's samples in the
 * step sat on the first load of x). So the loops walk a row in blocks of
 * ACT_PF floats and ask for the same block of the next row (nn_cpu.h) as
 * they go: GELU forward + backward 6.2-6.5% of the BERT-mini step -> 4.0%
 * (bench/RESULTS.md, stop 29). */
#define ACT_PF 64

/* next: x's next row (NULL on the last); y's next row is asked for too,
 * for writing, when y is not x. stream: y is written with streaming stores
 * (ds_nn_cpu_bias_act_fwd says when). */
DS_INLINE void act_fwd_row(float *yr, const float *xr, const float *next, const float *bias,
                           int width, ds_act act, bool stream) {
    /* streamed: each block computed into b (L1), then written around the caches */
    float b[ACT_PF] __attribute__((aligned(64)));
    for (int c0 = 0; c0 < width; c0 += ACT_PF) {
        int n = width - c0 < ACT_PF ? width - c0 : ACT_PF;
        if (next) {
            ds_nn_cpu_pf_read(next + c0, n);
            if (yr != xr && !stream) ds_nn_cpu_pf_write(yr + width + c0, n);
        }
        const float *xc = xr + c0;
        float *out = stream ? b : yr + c0;
        if (bias) {
            const float *bc = bias + c0;
            DS_SIMD
            for (int c = 0; c < n; c++) out[c] = ds_act_fwd(act, xc[c] + bc[c]);
        } else {
            DS_SIMD
            for (int c = 0; c < n; c++) out[c] = ds_act_fwd(act, xc[c]);
        }
#ifdef DS_NN_CPU_STREAM
        if (stream) ds_nn_cpu_stream(yr + c0, b, n);
#endif
    }
}

/* The switch sits inside the parallel region (OpenMP outlines the region
 * into a function that sees `act` as a variable): each case inlines a loop
 * with a constant activation. */
static void act_fwd_rows(float *y, const float *x, const float *bias, int r0, int r1, int rows,
                         int width, ds_act act, bool st) {
    for (int r = r0; r < r1; r++) {
        float *yr = y + (size_t)r * width;
        const float *xr = x + (size_t)r * width;
        const float *nx = r + 1 < rows ? xr + width : NULL;
        switch (act) {
        case DS_ACT_RELU: act_fwd_row(yr, xr, nx, bias, width, DS_ACT_RELU, st); break;
        case DS_ACT_GELU: act_fwd_row(yr, xr, nx, bias, width, DS_ACT_GELU, st); break;
        case DS_ACT_TANH: act_fwd_row(yr, xr, nx, bias, width, DS_ACT_TANH, st); break;
        case DS_ACT_GELU_TANH: act_fwd_row(yr, xr, nx, bias, width, DS_ACT_GELU_TANH, st); break;
        default: act_fwd_row(yr, xr, nx, bias, width, DS_ACT_NONE, st); break;
        }
    }
}

ds_status ds_nn_cpu_bias_act_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                 int rows, int width, ds_act act) {
    int nt = ds_nn_cpu_threads(be);
    if ((int)act < DS_ACT_NONE || act >= DS_ACT_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_fwd: unknown activation %d", (int)act);
    /* A large output apart from the input (a feed-forward layer's G, 16 MiB
     * in BERT-mini, next read by the down projection) is streamed: it does
     * not fit the L2 anyway, and a normal store first reads every line for
     * ownership. In the step the forward's samples went from 13.6 to 13.0
     * ms (median of 5 runs each; 15.4-15.9 to 13.6-14.5 in 3 earlier pairs),
     * the GEMMs' did not grow (bench/RESULTS.md, stop 30). */
    bool st = false;
#ifdef DS_NN_CPU_STREAM
    st = y != x && (int64_t)rows * width >= DS_NN_CPU_STREAM_MIN && ds_nn_cpu_stream_ok(y, width);
#endif
#pragma omp parallel num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (int r = 0; r < rows; r++) act_fwd_rows(y, x, bias, r, r + 1, rows, width, act, st);
        ds_nn_cpu_stream_fence(); /* before the region's barrier: y is whole for the reader */
    }
    return DS_OK;
}

/* dx = dy * act'(x + bias) over columns [c0, c1) of rows [r0, r1); adds the
 * column sums of dx into acc[0 .. c1-c0) when acc != NULL. For NONE, dx may
 * be NULL (only the sums are wanted). */
DS_INLINE void act_bwd_block(float *dx, float *acc, const float *dy, const float *x,
                             const float *bias, int r0, int r1, int rows, int width, int c0,
                             int c1, ds_act act) {
    for (int r = r0; r < r1; r++) {
        const float *dyr = dy + (size_t)r * width;
        if (act == DS_ACT_NONE) {
            if (dx && dx != dy) {
                float *dxr = dx + (size_t)r * width;
                DS_SIMD
                for (int c = c0; c < c1; c++) dxr[c] = dyr[c];
            }
            if (acc) {
                DS_SIMD
                for (int c = c0; c < c1; c++) acc[c - c0] += dyr[c];
            }
            continue;
        }
        float *dxr = dx + (size_t)r * width;
        const float *xr = x + (size_t)r * width;
        const bool pf = r + 1 < rows; /* prefetch the next row (ACT_PF) */
        for (int b0 = c0; b0 < c1; b0 += ACT_PF) {
            int b1 = b0 + ACT_PF < c1 ? b0 + ACT_PF : c1;
            if (pf) {
                ds_nn_cpu_pf_read(xr + width + b0, b1 - b0);
                ds_nn_cpu_pf_read(dyr + width + b0, b1 - b0);
            }
            if (bias && acc) {
                DS_SIMD
                for (int c = b0; c < b1; c++) {
                    float g = dyr[c] * ds_act_grad(act, xr[c] + bias[c]);
                    dxr[c] = g;
                    acc[c - c0] += g;
                }
            } else if (bias) {
                DS_SIMD
                for (int c = b0; c < b1; c++)
                    dxr[c] = dyr[c] * ds_act_grad(act, xr[c] + bias[c]);
            } else if (acc) {
                DS_SIMD
                for (int c = b0; c < b1; c++) {
                    float g = dyr[c] * ds_act_grad(act, xr[c]);
                    dxr[c] = g;
                    acc[c - c0] += g;
                }
            } else {
                DS_SIMD
                for (int c = b0; c < b1; c++) dxr[c] = dyr[c] * ds_act_grad(act, xr[c]);
            }
        }
    }
}

static void act_bwd_dispatch(float *dx, float *acc, const float *dy, const float *x,
                             const float *bias, int r0, int r1, int rows, int width, int c0,
                             int c1, ds_act act) {
    switch (act) {
    case DS_ACT_RELU: act_bwd_block(dx, acc, dy, x, bias, r0, r1, rows, width, c0, c1, DS_ACT_RELU); break;
    case DS_ACT_GELU: act_bwd_block(dx, acc, dy, x, bias, r0, r1, rows, width, c0, c1, DS_ACT_GELU); break;
    case DS_ACT_TANH: act_bwd_block(dx, acc, dy, x, bias, r0, r1, rows, width, c0, c1, DS_ACT_TANH); break;
    case DS_ACT_GELU_TANH:
        act_bwd_block(dx, acc, dy, x, bias, r0, r1, rows, width, c0, c1, DS_ACT_GELU_TANH);
        break;
    default: act_bwd_block(dx, acc, dy, x, bias, r0, r1, rows, width, c0, c1, DS_ACT_NONE); break;
    }
}

ds_status ds_nn_cpu_bias_act_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                 const float *x, const float *bias, int rows, int width,
                                 ds_act act) {
    int nt = ds_nn_cpu_threads(be);
    if ((int)act < DS_ACT_NONE || act >= DS_ACT_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: unknown activation %d", (int)act);
    if (!dx && act != DS_ACT_NONE)
        return DS_ERR(DS_ERR_INVALID_ARG, "bias_act_bwd: dx may be NULL only for DS_ACT_NONE");
    if (!dbias) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++)
            act_bwd_dispatch(dx, NULL, dy, x, bias, r, r + 1, rows, width, 0, width, act);
        return DS_OK;
    }
    /* Column tiles: each thread owns whole bias entries and sums rows in
     * order (deterministic for any thread count). */
    int tile = ds_nn_cpu_col_tile(nt, width);
    int ntiles = (width + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int k = 0; k < ntiles; k++) {
        int c0 = k * tile, c1 = c0 + tile < width ? c0 + tile : width;
        float acc[DS_NN_CPU_TILE_MAX];
        for (int c = 0; c < c1 - c0; c++) acc[c] = 0.0f;
        act_bwd_dispatch(dx, acc, dy, x, bias, 0, rows, rows, width, c0, c1, act);
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
    return DS_OK;
}

/* ---- dropout ---- */

/* The integer form of ds_dropout_mult's test for p in [0, 1): the 24-bit
 * k = w >> 8 is kept where k 2^-24 >= p, i.e. k >= K = ceil(p 2^24) (p 2^24
 * is exact in float, K <= 2^24 - 1 for p < 1), i.e. w >= K 2^8. One unsigned
 * comparison instead of a shift, a conversion and a multiply per element,
 * and the same keep decisions. */
#if defined(__AVX512F__) || defined(__AVX2__) /* the vector variants' only */
static inline uint32_t dropout_keep_threshold(float p) {
    float x = p * 16777216.0f;
    uint32_t k = (uint32_t)x;
    if ((float)k < x) k++;
    return k << 8;
}
#endif

#if defined(__AVX512F__)
/* The 64-bit products a * b of the 16 lanes of a, split into their low and
 * high 32-bit halves. vpmuludq multiplies the even lanes; the odd ones are
 * moved down by a vpshufd first, and the halves are picked by merge-masked
 * vpshufd: port 5's shuffles instead of 512-bit shifts, which share port 0
 * with the multiplies (2.1 against 2.6 ns per block with shifts and blends,
 * measured in isolation). */
DS_INLINE void mulhilo16(__m512i a, __m512i b, __m512i *lo, __m512i *hi) {
    __m512i pe = _mm512_mul_epu32(a, b);
    __m512i po = _mm512_mul_epu32(_mm512_shuffle_epi32(a, _MM_PERM_DDBB), b);
    /* lo: pe's low words in the even lanes, po's (one lane down) in the odd */
    *lo = _mm512_mask_shuffle_epi32(pe, 0xAAAA, po, _MM_PERM_CCAA);
    /* hi: po's high words in the odd lanes, pe's (one lane up) in the even */
    *hi = _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_DDBB);
}

/* The dropout multipliers of 16 S consecutive Philox blocks blk .. of the
 * uniform stream (64 S elements) into m: ds_rng_block and ds_dropout_mult of
 * engine/backend/math.h and nn_math.h with the blocks in the lanes of S
 * AVX-512 registers, then a 4 x 16 transpose to element order. The S sets
 * are independent chains of ten dependent rounds, interleaved so one set's
 * multiply latency hides behind the others' work: per block 2.1 ns with one
 * set, 1.7 with two, 1.6 with four (2.6 before, one register with shifts),
 * in isolation on the AVX-512 host of bench/RESULTS.md. Integer arithmetic and an integer
 * comparison, so the same bits as the scalar loop (test_nn_dropout,
 * test_cpu_isa). */
DS_INLINE void philox_mults_sets(float *m, uint64_t seed, uint64_t blk, uint32_t thr,
                                 float inv_keep, const int S) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i c0[4], c1[4], c2[4], c3[4];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        uint64_t b = blk + 16u * (uint64_t)s;
        __m512i base = _mm512_set1_epi32((int)(uint32_t)b);
        __m512i hi = _mm512_set1_epi32((int)(uint32_t)(b >> 32));
        c0[s] = _mm512_add_epi32(base, lane);
        /* the counter's high word, plus the carry where the low word wrapped */
        c1[s] = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(c0[s], base), hi,
                                      _mm512_set1_epi32(1));
        c2[s] = _mm512_set1_epi32((int)DS_RNG_TAG_UNIFORM);
        c3[s] = _mm512_setzero_si512();
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m512i m0 = _mm512_set1_epi32((int)DS_PHILOX_M0), m1 = _mm512_set1_epi32((int)DS_PHILOX_M1);
#pragma GCC unroll 10
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += DS_PHILOX_W0;
            k1 += DS_PHILOX_W1;
        }
        const __m512i kk0 = _mm512_set1_epi32((int)k0), kk1 = _mm512_set1_epi32((int)k1);
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            __m512i lo0, hi0, lo1, hi1;
            mulhilo16(c0[s], m0, &lo0, &hi0);
            mulhilo16(c2[s], m1, &lo1, &hi1);
            /* 0x96: a ^ b ^ c */
            c0[s] = _mm512_ternarylogic_epi32(hi1, c1[s], kk0, 0x96);
            c2[s] = _mm512_ternarylogic_epi32(hi0, c3[s], kk1, 0x96);
            c1[s] = lo1;
            c3[s] = lo0;
        }
    }
    /* keep where (w >> 8) 2^-24 >= p, i.e. w >= thr (dropout_keep_threshold) */
    const __m512i tv = _mm512_set1_epi32((int)thr);
    const __m512 keep = _mm512_set1_ps(inv_keep);
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        __m512i w[4] = {c0[s], c1[s], c2[s], c3[s]};
        __m512i v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm512_castps_si512(
                _mm512_maskz_mov_ps(_mm512_cmpge_epu32_mask(w[k], tv), keep));
        /* v[k] lane b is element 4 b + k: transpose 4 x 16 to element order */
        __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
        __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
        /* u0 holds blocks 0, 4, 8, 12 (one per 128-bit chunk), u1 1, 5, 9, 13, ... */
        __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
        __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
        __m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);
        __m512i c = _mm512_shuffle_i32x4(u0, u1, 0xEE), d = _mm512_shuffle_i32x4(u2, u3, 0xEE);
        float *ms = m + 64 * s;
        _mm512_storeu_si512((void *)(ms + 0), _mm512_shuffle_i32x4(a, b, 0x88));
        _mm512_storeu_si512((void *)(ms + 16), _mm512_shuffle_i32x4(a, b, 0xDD));
        _mm512_storeu_si512((void *)(ms + 32), _mm512_shuffle_i32x4(c, d, 0x88));
        _mm512_storeu_si512((void *)(ms + 48), _mm512_shuffle_i32x4(c, d, 0xDD));
    }
}

#define PHILOX_SET 16 /* blocks in one set: one register of counters */

#elif defined(__AVX2__)
DS_INLINE void mulhilo8(__m256i a, __m256i b, __m256i *lo, __m256i *hi) {
    __m256i pe = _mm256_mul_epu32(a, b);
    __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}

/* philox_mults_sets of the AVX-512 build with S sets of 8 blocks (32
 * elements) per 256-bit register: AVX2 hosts (the AMD EPYC) spent
 * 5.5% of the BERT-mini step in these multipliers. In isolation on the
 * AVX-512 host (x86-64-v3 code): 4.3 ns per block with one set, 3.1 with
 * two, 2.8 with four (which spill a few of the 16 ymm registers). */
DS_INLINE void philox_mults_sets(float *m, uint64_t seed, uint64_t blk, uint32_t thr,
                                  float inv_keep, const int S) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    __m256i c0[4], c1[4], c2[4], c3[4];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        uint64_t b = blk + 8u * (uint64_t)s;
        __m256i base = _mm256_set1_epi32((int)(uint32_t)b);
        c0[s] = _mm256_add_epi32(base, lane);
        /* carry where the low word wrapped: c0 < base unsigned (-1 there) */
        __m256i wrap =
            _mm256_cmpgt_epi32(_mm256_xor_si256(base, sign), _mm256_xor_si256(c0[s], sign));
        c1[s] = _mm256_sub_epi32(_mm256_set1_epi32((int)(uint32_t)(b >> 32)), wrap);
        c2[s] = _mm256_set1_epi32((int)DS_RNG_TAG_UNIFORM);
        c3[s] = _mm256_setzero_si256();
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m256i m0 = _mm256_set1_epi32((int)DS_PHILOX_M0), m1 = _mm256_set1_epi32((int)DS_PHILOX_M1);
#pragma GCC unroll 10
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += DS_PHILOX_W0;
            k1 += DS_PHILOX_W1;
        }
        const __m256i kk0 = _mm256_set1_epi32((int)k0), kk1 = _mm256_set1_epi32((int)k1);
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            __m256i lo0, hi0, lo1, hi1;
            mulhilo8(c0[s], m0, &lo0, &hi0);
            mulhilo8(c2[s], m1, &lo1, &hi1);
            c0[s] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[s]), kk0);
            c2[s] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[s]), kk1);
            c1[s] = lo1;
            c3[s] = lo0;
        }
    }
    /* keep where w >= thr unsigned, i.e. not (thr > w) with both signs flipped */
    const __m256i tv = _mm256_set1_epi32((int)(thr ^ 0x80000000u));
    const __m256 keep = _mm256_set1_ps(inv_keep);
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        __m256i w[4] = {c0[s], c1[s], c2[s], c3[s]};
        __m256i v[4];
        for (int k = 0; k < 4; k++) {
            __m256i drop = _mm256_cmpgt_epi32(tv, _mm256_xor_si256(w[k], sign));
            v[k] = _mm256_castps_si256(_mm256_andnot_ps(_mm256_castsi256_ps(drop), keep));
        }
        __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
        __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        /* u0 holds blocks 0 and 4 (one per 128-bit half), u1 1 and 5, ... */
        __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        float *ms = m + 32 * s;
        _mm256_storeu_si256((__m256i *)(ms + 0), _mm256_permute2x128_si256(u0, u1, 0x20));
        _mm256_storeu_si256((__m256i *)(ms + 8), _mm256_permute2x128_si256(u2, u3, 0x20));
        _mm256_storeu_si256((__m256i *)(ms + 16), _mm256_permute2x128_si256(u0, u1, 0x31));
        _mm256_storeu_si256((__m256i *)(ms + 24), _mm256_permute2x128_si256(u2, u3, 0x31));
    }
}

#define PHILOX_SET 8
#endif

#ifdef PHILOX_SET
/* The whole blocks of ds_nn_cpu_dropout_mults: four sets at a time, then two,
 * then one (philox_mults_sets of this variant, PHILOX_SET blocks a set). */
static int philox_mults_vec(float *m, uint64_t seed, uint64_t blk, int nb, float p,
                            float inv_keep) {
    uint32_t thr = dropout_keep_threshold(p);
    int b = 0;
    for (; b + 4 * PHILOX_SET <= nb; b += 4 * PHILOX_SET)
        philox_mults_sets(m + 4 * b, seed, blk + (uint64_t)b, thr, inv_keep, 4);
    /* constant set counts: each call inlines with its registers unrolled */
    if (b + 2 * PHILOX_SET <= nb) {
        philox_mults_sets(m + 4 * b, seed, blk + (uint64_t)b, thr, inv_keep, 2);
        b += 2 * PHILOX_SET;
    }
    if (b + PHILOX_SET <= nb) {
        philox_mults_sets(m + 4 * b, seed, blk + (uint64_t)b, thr, inv_keep, 1);
        b += PHILOX_SET;
    }
    return b;
}
#endif

void ds_nn_cpu_dropout_mults(float *m, uint64_t seed, uint64_t j0, int n, float p,
                             float inv_keep) {
    int i = 0;
    /* head: up to the next Philox block boundary */
    if (j0 & 3u) {
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, j0 >> 2);
        for (uint32_t k = (uint32_t)(j0 & 3u); k < 4u && i < n; k++, i++)
            m[i] = ds_dropout_mult(w.v[k], p, inv_keep);
    }
    /* whole blocks: independent Philox evaluations, vectorised across blocks */
    uint64_t blk0 = (j0 + (uint64_t)i) >> 2;
    int nb = (n - i) / 4;
    float *mb = m + i;
    int b0 = 0;
#ifdef PHILOX_SET
    b0 = philox_mults_vec(mb, seed, blk0, nb, p, inv_keep);
#endif
    DS_SIMD
    for (int b = b0; b < nb; b++) {
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk0 + (uint64_t)b);
        mb[4 * b + 0] = ds_dropout_mult(w.v[0], p, inv_keep);
        mb[4 * b + 1] = ds_dropout_mult(w.v[1], p, inv_keep);
        mb[4 * b + 2] = ds_dropout_mult(w.v[2], p, inv_keep);
        mb[4 * b + 3] = ds_dropout_mult(w.v[3], p, inv_keep);
    }
    i += 4 * nb;
    if (i < n) { /* tail */
        ds_philox4 w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, blk0 + (uint64_t)nb);
        for (uint32_t k = 0; i < n; k++, i++) m[i] = ds_dropout_mult(w.v[k], p, inv_keep);
    }
}

/* Multipliers are produced a chunk at a time into a stack buffer, then
 * applied by a plain loop the compiler vectorises. */
#define DROP_CHUNK 256

/* Row r of dropout_fwd: yr = rr + dropout(xr + bias) (bias, rr may be NULL),
 * its keep bits at keep_r when keep_r != NULL and p > 0. */
static void dropout_row(float *yr, const float *xr, const float *bias, const float *rr, int r,
                        int width, float p, float inv_keep, uint64_t seed, uint64_t offset,
                        uint32_t *keep_r) {
    float m[DROP_CHUNK];
    for (int c0 = 0; c0 < width; c0 += DROP_CHUNK) {
        int n = width - c0 < DROP_CHUNK ? width - c0 : DROP_CHUNK;
        if (p > 0.0f) {
            ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p, inv_keep);
            /* c0 is a multiple of DROP_CHUNK, so of 32 */
            if (keep_r) ds_nn_cpu_keep_pack(keep_r + c0 / 32, m, n);
        } else
            for (int c = 0; c < n; c++) m[c] = 1.0f;
        const float *bc = bias ? bias + c0 : NULL;
        const float *rc = rr ? rr + c0 : NULL;
        float *yc = yr + c0;
        const float *xc = xr + c0;
        if (bc && rc) {
            DS_SIMD
            for (int c = 0; c < n; c++) yc[c] = fmaf(xc[c] + bc[c], m[c], rc[c]);
        } else if (rc) {
            DS_SIMD
            for (int c = 0; c < n; c++) yc[c] = fmaf(xc[c], m[c], rc[c]);
        } else if (bc) {
            DS_SIMD
            for (int c = 0; c < n; c++) yc[c] = (xc[c] + bc[c]) * m[c];
        } else {
            DS_SIMD
            for (int c = 0; c < n; c++) yc[c] = xc[c] * m[c];
        }
    }
}

/* The rows of x, res and y a page ahead of row r (as the row kernels of
 * nn_cpu.h prefetch), and z's when the fused kernel writes it. */
static void dropout_prefetch(float *y, float *z, const float *x, const float *res, int r,
                             int rows, int width) {
    int ra = r + ds_nn_cpu_pf_rows(width);
    if (ra >= rows) return;
    ds_nn_cpu_pf_read(x + (size_t)ra * width, width);
    if (res) ds_nn_cpu_pf_read(res + (size_t)ra * width, width);
    if (y != x && y != res) ds_nn_cpu_pf_write(y + (size_t)ra * width, width);
    if (z) ds_nn_cpu_pf_write(z + (size_t)ra * width, width);
}

/* dropout_fwd's rows and, when z != NULL, layer norm's statistics and output
 * of each row while it is still in L1 (nn_norm.c's per-row arithmetic,
 * ds_ln_row_*): the one loop of both slots. */
static ds_status dropout_rows(ds_backend *be, const char *slot, float *y, float *z, float *mean,
                              float *rstd, const float *x, const float *bias, const float *res,
                              const float *gamma, const float *beta, int rows, int width,
                              float p, uint64_t seed, uint64_t offset, uint32_t *keep,
                              float eps) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(ds_check_dropout(slot, p, rows, width, offset));
    float inv_keep = 1.0f / (1.0f - p);
    const int ld = ds_dropout_mask_ld(width);
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * width;
        dropout_prefetch(y, z, x, res, r, rows, width);
        dropout_row(yr, x + (size_t)r * width, bias, res ? res + (size_t)r * width : NULL, r,
                    width, p, inv_keep, seed, offset, keep ? keep + (size_t)r * ld : NULL);
        if (!z) continue;
        float m, rs;
        ds_ln_row_stats(yr, width, eps, &m, &rs);
        mean[r] = m;
        rstd[r] = rs;
        ds_ln_row_fwd(z + (size_t)r * width, yr, gamma, beta, width, m, rs);
    }
    return DS_OK;
}

ds_status ds_nn_cpu_dropout_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                const float *res, int rows, int width, float p, uint64_t seed,
                                uint64_t offset, uint32_t *keep) {
    return dropout_rows(be, "dropout_fwd", y, NULL, NULL, NULL, x, bias, res, NULL, NULL, rows,
                        width, p, seed, offset, keep, 0.0f);
}

ds_status ds_nn_cpu_dropout_ln_fwd(ds_backend *be, float *y, float *z, float *mean, float *rstd,
                                   const float *x, const float *bias, const float *res,
                                   const float *gamma, const float *beta, int rows, int width,
                                   float p, uint64_t seed, uint64_t offset, uint32_t *keep,
                                   float eps) {
    /* both parts' checks first, as cuda makes them: the same calls refused */
    DS_TRY(ds_check_ln_fwd("dropout_ln_fwd", z, mean, rstd, gamma, beta, rows, width));
    DS_TRY(ds_check_dropout("dropout_ln_fwd", p, rows, width, offset));
    if (width == 0) return DS_OK; /* no statistics of an empty row (as layernorm_fwd, cuda) */
    return dropout_rows(be, "dropout_ln_fwd", y, z, mean, rstd, x, bias, res, gamma, beta, rows,
                        width, p, seed, offset, keep, eps);
}

ds_status ds_nn_cpu_dropout_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                int rows, int width, float p, uint64_t seed, uint64_t offset,
                                const uint32_t *keep) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(ds_check_dropout("dropout_bwd", p, rows, width, offset));
    float inv_keep = 1.0f / (1.0f - p);
    const int ld = ds_dropout_mask_ld(width);
    if (p > 0.0f && dbias) {
        /* One pass: the multipliers, dx and the bias gradient together, in
         * column tiles (as bcast_add_bwd, whose sums this repeats bit for
         * bit: each column's rows in order from 0, then added to dbias), so
         * dx is not read a second time. */
        int tile = ds_nn_cpu_col_tile(nt, width);
        int ntiles = (width + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int k = 0; k < ntiles; k++) {
            int c0 = k * tile, n = (c0 + tile < width ? c0 + tile : width) - c0;
            float acc[DS_NN_CPU_TILE_MAX], m[DS_NN_CPU_TILE_MAX];
            for (int c = 0; c < n; c++) acc[c] = 0.0f;
            const int ahead = ds_nn_cpu_pf_rows(n);
            for (int r = 0; r < rows; r++) {
                const float *dyr = dy + (size_t)r * width + c0;
                float *dxr = dx + (size_t)r * width + c0;
                if (r + ahead < rows) { /* this tile of the row a page ahead */
                    ds_nn_cpu_pf_read(dyr + (size_t)ahead * width, n);
                    if (dx != dy) ds_nn_cpu_pf_write(dxr + (size_t)ahead * width, n);
                }
                /* the forward's bits when it kept them (c0: a multiple of 16) */
                if (keep)
                    ds_nn_cpu_keep_mults(m, keep + (size_t)r * ld, c0, n, inv_keep);
                else
                    ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p,
                                            inv_keep);
                DS_SIMD
                for (int c = 0; c < n; c++) {
                    float g = dyr[c] * m[c];
                    dxr[c] = g;
                    acc[c] += g;
                }
            }
            for (int c = 0; c < n; c++) dbias[c0 + c] += acc[c];
        }
        return DS_OK;
    }
    if (p > 0.0f) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++) {
            const float *dyr = dy + (size_t)r * width;
            float *dxr = dx + (size_t)r * width;
            float m[DROP_CHUNK];
            int ra = r + ds_nn_cpu_pf_rows(width); /* the row a page ahead */
            if (ra < rows) {
                ds_nn_cpu_pf_read(dy + (size_t)ra * width, width);
                if (dx != dy) ds_nn_cpu_pf_write(dx + (size_t)ra * width, width);
            }
            for (int c0 = 0; c0 < width; c0 += DROP_CHUNK) {
                int n = width - c0 < DROP_CHUNK ? width - c0 : DROP_CHUNK;
                if (keep)
                    ds_nn_cpu_keep_mults(m, keep + (size_t)r * ld, c0, n, inv_keep);
                else
                    ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * width + c0, n, p,
                                            inv_keep);
                DS_SIMD
                for (int c = 0; c < n; c++) dxr[c0 + c] = dyr[c0 + c] * m[c];
            }
        }
    } else if (dx != dy) {
#pragma omp parallel for schedule(static) num_threads(nt) if ((int64_t)rows * width >= DS_NN_CPU_PAR_MIN)
        for (int r = 0; r < rows; r++) {
            DS_SIMD
            for (int c = 0; c < width; c++)
                dx[(size_t)r * width + c] = dy[(size_t)r * width + c];
        }
    }
    /* The bias sits inside the dropout: its gradient is the column sum of dx. */
    if (dbias) DS_TRY(ds_nn_cpu_bcast_add_bwd(be, dbias, dx, rows, width));
    return DS_OK;
}
