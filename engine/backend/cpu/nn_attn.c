/* cpu attention probabilities: masked (padding and, for a decoder, causal)
 * scaled softmax with the attention dropout fused in, and its backward, one
 * (batch, head, query) row at a time. */
#include "engine/backend/cpu/nn_cpu.h"

/* Rows longer than this are handled in chunks of multipliers. */
#define ROW_CHUNK 256

ds_status ds_nn_cpu_attn_softmax_fwd(ds_backend *be, float *p, float *pd, const float *s,
                                     const float *mask, bool causal, int B, int nh, int Tq, int T,
                                     float scale, float drop_p, uint64_t seed, uint64_t offset,
                                     uint32_t *keep) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(ds_check_attn_fwd("attn_softmax_fwd", pd, B, nh, Tq, T, drop_p, offset));
    int64_t rows = (int64_t)B * nh * Tq;
    float inv_keep = 1.0f / (1.0f - drop_p);
    const int ld = ds_dropout_mask_ld(T);
    const int ahead = ds_nn_cpu_pf_rows(T);
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * T >= DS_NN_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int b = (int)(r / ((int64_t)nh * Tq));
        const float *mrow = mask ? mask + (size_t)b * T : NULL;
        float *pr = p + (size_t)r * T;
        if (r + ahead < rows) { /* the row a page ahead (nn_cpu.h) */
            ds_nn_cpu_pf_read(s + (size_t)(r + ahead) * T, T);
            if (p != s) ds_nn_cpu_pf_write(pr + (size_t)ahead * T, T);
            if (pd) ds_nn_cpu_pf_write(pd + (size_t)(r + ahead) * T, T);
        }
        /* causal: the softmax runs over the visible prefix of the keys only,
         * the rest is exactly 0 (the dropout below keeps 0 at 0) */
        int nk = causal ? ds_causal_keys((int)(r % Tq), Tq, T) : T;
        ds_softmax_row(pr, s + (size_t)r * T, mrow, nk, scale);
        for (int j = nk; j < T; j++) pr[j] = 0.0f;
        if (!pd) continue;
        float *pdr = pd + (size_t)r * T;
        if (drop_p == 0.0f) {
            DS_SIMD
            for (int j = 0; j < T; j++) pdr[j] = pr[j];
            continue;
        }
        /* multipliers for the visible keys only: past nk, p is exactly 0 and
         * so is 0 * multiplier (half of a causal layer's random numbers);
         * but a kept mask holds all T keys' bits, as the backward uses them */
        float m[ROW_CHUNK];
        const int nm = keep ? T : nk;
        for (int j0 = 0; j0 < nm; j0 += ROW_CHUNK) {
            int n = nm - j0 < ROW_CHUNK ? nm - j0 : ROW_CHUNK;
            ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * T + j0, n, drop_p, inv_keep);
            if (keep) ds_nn_cpu_keep_pack(keep + (size_t)r * ld + j0 / 32, m, n);
            int na = nk - j0 < n ? nk - j0 : n; /* visible keys of the chunk */
            DS_SIMD
            for (int j = 0; j < na; j++) pdr[j0 + j] = pr[j0 + j] * m[j];
        }
        for (int j = nk; j < T; j++) pdr[j] = 0.0f;
    }
    return DS_OK;
}

ds_status ds_nn_cpu_attn_softmax_bwd(ds_backend *be, float *ds, float *pd, const float *dpd,
                                     const float *p, int B, int nh, int Tq, int T, float scale,
                                     float drop_p, uint64_t seed, uint64_t offset,
                                     const uint32_t *keep) {
    int nt = ds_nn_cpu_threads(be);
    DS_TRY(ds_check_attn("attn_softmax_bwd", B, nh, Tq, T, drop_p, offset));
    int64_t rows = (int64_t)B * nh * Tq;
    float inv_keep = 1.0f / (1.0f - drop_p);
    const int ld = ds_dropout_mask_ld(T);
    const int ahead = ds_nn_cpu_pf_rows(T);
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * T >= DS_NN_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *pr = p + (size_t)r * T;
        const float *dr = dpd + (size_t)r * T;
        float *sr = ds + (size_t)r * T;
        float *pdr = pd ? pd + (size_t)r * T : NULL;
        if (r + ahead < rows) { /* the row a page ahead (nn_cpu.h) */
            ds_nn_cpu_pf_read(pr + (size_t)ahead * T, T);
            ds_nn_cpu_pf_read(dr + (size_t)ahead * T, T);
            if (pdr) ds_nn_cpu_pf_write(pdr + (size_t)ahead * T, T);
        }
        /* pass 1: dp = dropout_bwd(dpd) into ds, dot = sum dp * p, pd = dropout(p) */
        float dot = 0.0f;
        if (drop_p > 0.0f) {
            float m[ROW_CHUNK];
            for (int j0 = 0; j0 < T; j0 += ROW_CHUNK) {
                int n = T - j0 < ROW_CHUNK ? T - j0 : ROW_CHUNK;
                if (keep) /* the forward's bits, without Philox */
                    ds_nn_cpu_keep_mults(m, keep + (size_t)r * ld, j0, n, inv_keep);
                else
                    ds_nn_cpu_dropout_mults(m, seed, offset + (uint64_t)r * T + j0, n, drop_p,
                                            inv_keep);
                const float *pc = pr + j0, *dc = dr + j0;
                float *sc = sr + j0;
                /* fixed-lane sum (nn_math.h), chunk after chunk: the
                 * same bits for every vector width */
                float acc[DS_LANES] = {0.0f};
                int nb = ds_lanes_end(n);
                for (int q = 0; q < nb; q += DS_LANES) {
                    DS_SIMD
                    for (int k = 0; k < DS_LANES; k++) {
                        float dp = dc[q + k] * m[q + k];
                        sc[q + k] = dp;
                        acc[k] = fmaf(dp, pc[q + k], acc[k]);
                    }
                }
                dot += ds_lanes_sum(acc);
                for (int j = nb; j < n; j++) {
                    float dp = dc[j] * m[j];
                    sc[j] = dp;
                    dot = fmaf(dp, pc[j], dot);
                }
                if (pdr) {
                    DS_SIMD
                    for (int j = 0; j < n; j++) pdr[j0 + j] = pc[j] * m[j];
                }
            }
        } else {
            float acc[DS_LANES] = {0.0f};
            int nb = ds_lanes_end(T);
            for (int q = 0; q < nb; q += DS_LANES) {
                DS_SIMD
                for (int k = 0; k < DS_LANES; k++) {
                    sr[q + k] = dr[q + k];
                    acc[k] = fmaf(dr[q + k], pr[q + k], acc[k]);
                }
            }
            dot = ds_lanes_sum(acc);
            for (int j = nb; j < T; j++) {
                sr[j] = dr[j];
                dot = fmaf(dr[j], pr[j], dot);
            }
            if (pdr) {
                DS_SIMD
                for (int j = 0; j < T; j++) pdr[j] = pr[j];
            }
        }
        /* pass 2: ds = scale * p * (dp - dot) */
        DS_SIMD
        for (int j = 0; j < T; j++) sr[j] = ds_softmax_ds(pr[j], sr[j], dot, scale);
    }
    return DS_OK;
}
