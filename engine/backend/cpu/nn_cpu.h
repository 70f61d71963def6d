/* Private: the cpu model kernels (engine/backend/cpu/nn_*.c), gathered into
 * the `ds_nn_cpu` table by nn_table.c. Semantics of each function: the slot
 * of the same name in engine/backend/nn.h. These files are compiled once per
 * instruction set (cpu_isa.h): every name they export carries the variant's
 * suffix (ds_nn_cpu_layernorm_fwd -> ds_nn_cpu_layernorm_fwd_avx2), through
 * the list below; a new exported function needs a line there (without one
 * the link fails on duplicate symbols). */
#ifndef DS_BACKEND_CPU_NN_CPU_H
#define DS_BACKEND_CPU_NN_CPU_H

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/nn.h"

#ifdef DS_ISA_SUFFIX
#define ds_nn_cpu DS_ISA_NAME(ds_nn_cpu)
#define ds_nn_cpu_col_tile DS_ISA_NAME(ds_nn_cpu_col_tile)
#define ds_nn_cpu_dropout_mults DS_ISA_NAME(ds_nn_cpu_dropout_mults)
#define ds_nn_cpu_embedding_fwd DS_ISA_NAME(ds_nn_cpu_embedding_fwd)
#define ds_nn_cpu_embedding_bwd DS_ISA_NAME(ds_nn_cpu_embedding_bwd)
#define ds_nn_cpu_bcast_add_fwd DS_ISA_NAME(ds_nn_cpu_bcast_add_fwd)
#define ds_nn_cpu_bcast_add_bwd DS_ISA_NAME(ds_nn_cpu_bcast_add_bwd)
#define ds_nn_cpu_mean_pool_fwd DS_ISA_NAME(ds_nn_cpu_mean_pool_fwd)
#define ds_nn_cpu_mean_pool_bwd DS_ISA_NAME(ds_nn_cpu_mean_pool_bwd)
#define ds_nn_cpu_copy_rows DS_ISA_NAME(ds_nn_cpu_copy_rows)
#define ds_nn_cpu_bias_act_fwd DS_ISA_NAME(ds_nn_cpu_bias_act_fwd)
#define ds_nn_cpu_bias_act_bwd DS_ISA_NAME(ds_nn_cpu_bias_act_bwd)
#define ds_nn_cpu_dropout_fwd DS_ISA_NAME(ds_nn_cpu_dropout_fwd)
#define ds_nn_cpu_dropout_ln_fwd DS_ISA_NAME(ds_nn_cpu_dropout_ln_fwd)
#define ds_nn_cpu_dropout_bwd DS_ISA_NAME(ds_nn_cpu_dropout_bwd)
#define ds_nn_cpu_layernorm_fwd DS_ISA_NAME(ds_nn_cpu_layernorm_fwd)
#define ds_nn_cpu_layernorm_bwd DS_ISA_NAME(ds_nn_cpu_layernorm_bwd)
#define ds_nn_cpu_attn_softmax_fwd DS_ISA_NAME(ds_nn_cpu_attn_softmax_fwd)
#define ds_nn_cpu_attn_softmax_bwd DS_ISA_NAME(ds_nn_cpu_attn_softmax_bwd)
#define ds_nn_cpu_shift_labels DS_ISA_NAME(ds_nn_cpu_shift_labels)
#define ds_nn_cpu_xent_fwd DS_ISA_NAME(ds_nn_cpu_xent_fwd)
#define ds_nn_cpu_xent_bwd DS_ISA_NAME(ds_nn_cpu_xent_bwd)
#endif

/* This variant's model-kernel table (nn_table.c). */
extern const ds_nn_ops ds_nn_cpu;

/* Below this many elements a kernel runs on the calling thread: the
 * threshold of the engine's element-wise slots (cpu_ops.h), signed for the
 * kernels' int64_t element counts. */
#define DS_NN_CPU_PAR_MIN ((int64_t)DS_CPU_PAR_MIN)

/* Column tiles for the reductions over rows (bias, gamma, beta gradients):
 * each thread owns whole columns and sums its rows in order, so the result
 * is deterministic and independent of the thread count (and of the tile
 * width). Returns the tile width for `width` columns on nt threads: a
 * multiple of 16 floats, at most DS_NN_CPU_TILE_MAX so a tile's accumulators
 * fit on the stack, and as wide as that allows with the same number of tiles
 * for every thread. Wide, because a tile walks down the rows: each row of a
 * tile is a jump to another page, where the hardware prefetcher starts over,
 * and 256-float tiles of a 4096 x 1024 GELU gradient ran at a third of the
 * speed of whole rows (bench/bench_kernels, "bias + GELU bwd"). */
#define DS_NN_CPU_TILE_MAX 1024
int ds_nn_cpu_col_tile(int nt, int width);

/* Prefetch for the row kernels. In the training step their operands come
 * from memory (the step's activations pass through the L2 many times over),
 * and the hardware prefetchers start over at every 4 KiB page, so a kernel
 * waited on the first loads of each page (up to two thirds of a kernel's
 * samples sat on one load in the BERT-mini step). At row r a kernel asks for
 * row r + ds_nn_cpu_pf_rows(width) of its operands: the row about a page
 * ahead (the next one for rows of 4 KiB or more), to the L2. A prefetch
 * changes no arithmetic. */
static inline int ds_nn_cpu_pf_rows(int width) {
    int a = 1024 / (width > 0 ? width : 1);
    return a > 1 ? a : 1;
}

/* n floats from p, a line (16 floats) at a time, to be read / written. */
static inline void ds_nn_cpu_pf_read(const float *p, int n) {
    for (int i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
}
static inline void ds_nn_cpu_pf_write(float *p, int n) {
    for (int i = 0; i < n; i += 16) __builtin_prefetch(p + i, 1, 2);
}

/* Streaming (non-temporal) stores for an output written once: the line is
 * written around the caches, without first being read for ownership. Only
 * where a full vector stores to an aligned address (the vector variants;
 * rows of a multiple of the vector width starting on one); a kernel that
 * streams calls ds_nn_cpu_stream_fence on each thread before the parallel
 * region ends, so the stores are visible to whoever reads the output next. */
#if defined(__AVX512F__)
#define DS_NN_CPU_STREAM 16
#elif defined(__AVX2__)
#define DS_NN_CPU_STREAM 8
#endif
#ifdef DS_NN_CPU_STREAM
#include <immintrin.h>
/* Outputs smaller than this many elements (8 MiB) are stored normally: one
 * that fits a core's L2 (2 MiB on the host of bench/RESULTS.md) is cheaper
 * to read back from there than from memory. */
#define DS_NN_CPU_STREAM_MIN ((int64_t)1 << 21)
static inline bool ds_nn_cpu_stream_ok(const float *y, int width) {
    return width % DS_NN_CPU_STREAM == 0 &&
           ((uintptr_t)y & (sizeof(float) * DS_NN_CPU_STREAM - 1)) == 0;
}
/* dst[0 .. n) = src[0 .. n), n a multiple of DS_NN_CPU_STREAM, dst aligned */
static inline void ds_nn_cpu_stream(float *dst, const float *src, int n) {
#if DS_NN_CPU_STREAM == 16
    for (int i = 0; i < n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#else
    for (int i = 0; i < n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#endif
}
static inline void ds_nn_cpu_stream_fence(void) { _mm_sfence(); }
#else
static inline void ds_nn_cpu_stream_fence(void) {}
#endif

/* The backend's thread count: every kernel's team has this size, the same
 * cores OpenBLAS uses (see cpu_backend.c; ds_cpu_team). */
static inline int ds_nn_cpu_threads(const ds_backend *be) { return ds_cpu_team(be); }

/* Dropout multipliers (0 or inv_keep) of the n stream elements starting at
 * j0 of the uniform stream of `seed` (ds_rng_uniform_at's values), one
 * Philox block per 4 elements, vectorised across blocks. */
void ds_nn_cpu_dropout_mults(float *m, uint64_t seed, uint64_t j0, int n, float p,
                             float inv_keep);

/* The keep mask's words (nn_math.h, ds_dropout_mask_ld) of n multipliers m
 * (0 or inv_keep > 0): bit k of w[i] = (m[32 i + k] != 0), the bits past n
 * in the last word 0. w is the row's word of the chunk's first column (a
 * multiple of 32); n is a multiple of 32 except at a row's end. */
static inline void ds_nn_cpu_keep_pack(uint32_t *w, const float *m, int n) {
    int i = 0;
    for (; i + 32 <= n; i += 32) {
#if defined(__AVX512F__)
        __mmask16 a = _mm512_cmpneq_ps_mask(_mm512_loadu_ps(m + i), _mm512_setzero_ps());
        __mmask16 b = _mm512_cmpneq_ps_mask(_mm512_loadu_ps(m + i + 16), _mm512_setzero_ps());
        w[i >> 5] = (uint32_t)a | (uint32_t)b << 16;
#elif defined(__AVX2__)
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            __m256 c = _mm256_cmp_ps(_mm256_loadu_ps(m + i + 8 * k), _mm256_setzero_ps(),
                                     _CMP_NEQ_OQ);
            v |= (uint32_t)_mm256_movemask_ps(c) << (8 * k);
        }
        w[i >> 5] = v;
#else
        uint32_t v = 0;
        for (int k = 0; k < 32; k++) v |= (uint32_t)(m[i + k] != 0.0f) << k;
        w[i >> 5] = v;
#endif
    }
    if (i < n) {
        uint32_t v = 0;
        for (int k = 0; i + k < n; k++) v |= (uint32_t)(m[i + k] != 0.0f) << k;
        w[i >> 5] = v;
    }
}

/* The n multipliers (bit ? inv_keep : 0) of one row's keep words w from
 * column c0: what ds_nn_cpu_dropout_mults gave the forward, without Philox.
 * The vector loops take 16 (8) bits from one word, so they need c0 % 16 == 0
 * (every caller's chunk and tile starts); otherwise the scalar loop. */
static inline void ds_nn_cpu_keep_mults(float *m, const uint32_t *w, int c0, int n,
                                        float inv_keep) {
    int i = 0;
#if defined(__AVX512F__)
    if ((c0 & 15) == 0) {
        const __m512 kv = _mm512_set1_ps(inv_keep);
        for (; i + 16 <= n; i += 16) {
            int c = c0 + i;
            __mmask16 k = (__mmask16)(w[c >> 5] >> (c & 31));
            _mm512_storeu_ps(m + i, _mm512_maskz_mov_ps(k, kv));
        }
    }
#elif defined(__AVX2__)
    if ((c0 & 7) == 0) {
        const __m256 kv = _mm256_set1_ps(inv_keep);
        const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        for (; i + 8 <= n; i += 8) {
            int c = c0 + i;
            __m256i b = _mm256_set1_epi32((int)(w[c >> 5] >> (c & 31)));
            __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(b, bit), bit);
            _mm256_storeu_ps(m + i, _mm256_and_ps(_mm256_castsi256_ps(on), kv));
        }
    }
#endif
    for (; i < n; i++) {
        int c = c0 + i;
        m[i] = (w[c >> 5] >> (c & 31)) & 1u ? inv_keep : 0.0f;
    }
}

ds_status ds_nn_cpu_embedding_fwd(ds_backend *be, float *out, const float *table,
                                  const int32_t *ids, int n, int h, int vocab, bool accumulate);
ds_status ds_nn_cpu_embedding_bwd(ds_backend *be, float *dtable, const float *dout,
                                  const int32_t *ids, int n, int h, int padding_idx);
ds_status ds_nn_cpu_bcast_add_fwd(ds_backend *be, float *out, const float *x, int rows, int width,
                                  bool accumulate);
ds_status ds_nn_cpu_bcast_add_bwd(ds_backend *be, float *dx, const float *dout, int rows,
                                  int width);
ds_status ds_nn_cpu_mean_pool_fwd(ds_backend *be, float *out, const float *x, const float *mask,
                                  int B, int T, int H);
ds_status ds_nn_cpu_mean_pool_bwd(ds_backend *be, float *dx, const float *dout, const float *mask,
                                  int B, int T, int H);
ds_status ds_nn_cpu_copy_rows(ds_backend *be, float *dst, int dst_ld, const float *src,
                              int src_ld, int rows, int width, bool accumulate);

ds_status ds_nn_cpu_bias_act_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                 int rows, int width, ds_act act);
ds_status ds_nn_cpu_bias_act_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                 const float *x, const float *bias, int rows, int width,
                                 ds_act act);
ds_status ds_nn_cpu_dropout_fwd(ds_backend *be, float *y, const float *x, const float *bias,
                                const float *res, int rows, int width, float p, uint64_t seed,
                                uint64_t offset, uint32_t *keep);
ds_status ds_nn_cpu_dropout_bwd(ds_backend *be, float *dx, float *dbias, const float *dy,
                                int rows, int width, float p, uint64_t seed, uint64_t offset,
                                const uint32_t *keep);
ds_status ds_nn_cpu_dropout_ln_fwd(ds_backend *be, float *y, float *z, float *mean, float *rstd,
                                   const float *x, const float *bias, const float *res,
                                   const float *gamma, const float *beta, int rows, int width,
                                   float p, uint64_t seed, uint64_t offset, uint32_t *keep,
                                   float eps);

ds_status ds_nn_cpu_layernorm_fwd(ds_backend *be, float *y, float *mean, float *rstd,
                                  const float *x, const float *gamma, const float *beta, int n,
                                  int h, float eps);
ds_status ds_nn_cpu_layernorm_bwd(ds_backend *be, float *dx, float *dgamma, float *dbeta,
                                  const float *dy, const float *x, const float *mean,
                                  const float *rstd, const float *gamma, int n, int h,
                                  bool accumulate_dx);

ds_status ds_nn_cpu_attn_softmax_fwd(ds_backend *be, float *p, float *pd, const float *s,
                                     const float *mask, bool causal, int B, int nh, int Tq, int T,
                                     float scale, float drop_p, uint64_t seed, uint64_t offset,
                                     uint32_t *keep);
ds_status ds_nn_cpu_attn_softmax_bwd(ds_backend *be, float *ds, float *pd, const float *dpd,
                                     const float *p, int B, int nh, int Tq, int T, float scale,
                                     float drop_p, uint64_t seed, uint64_t offset,
                                     const uint32_t *keep);

ds_status ds_nn_cpu_shift_labels(ds_backend *be, int32_t *dst, const int32_t *src, int B, int T,
                                int32_t fill);
ds_status ds_nn_cpu_xent_fwd(ds_backend *be, float *loss, float *wsum, float *probs, float *row_loss,
                             const float *logits, const int32_t *labels, const float *weights,
                             int R, int C, int ignore_index);
ds_status ds_nn_cpu_xent_bwd(ds_backend *be, float *dlogits, const float *probs,
                             const float *wsum, const int32_t *labels, const float *weights, int R,
                             int C, int ignore_index, float scale);

#endif /* DS_BACKEND_CPU_NN_CPU_H */
