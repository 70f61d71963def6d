/* CUDA attention probabilities: masked (padding and, for a decoder, causal)
 * scaled softmax with the attention dropout fused in, and its backward; one
 * warp per (batch, head, query) row.
 * Each lane owns the columns lane, lane + 32, ... in every pass, so the
 * in-place uses the slot allows (p over s, ds over dpd) are safe. */
#include "engine/backend/cuda/nn_cuda.cuh"

/* Key j is visible: not padding, and (causal) among the first nk keys. */
__device__ __forceinline__ bool ds_key_ok(const float *mrow, int j, int nk) {
    return j < nk && (!mrow || mrow[j] != 0.0f);
}

__global__ void ds_k_attn_softmax_fwd(float *p, float *pd, const float *s, const float *mask,
                                      bool causal, int nh, int Tq, int T, int64_t rows,
                                      float scale, float drop_p, float inv_keep, uint64_t seed,
                                      uint64_t offset, uint32_t *keep) {
    int lane = threadIdx.x % 32;
    int ld = ds_dropout_mask_ld(T);
    DS_NN_WARP_ROWS(r, rows) {
        int b = (int)(r / ((int64_t)nh * Tq));
        const float *mrow = mask ? mask + (size_t)b * T : NULL;
        int nk = causal ? ds_causal_keys((int)(r % Tq), Tq, T) : T; /* as the cpu loop */
        const float *sr = s + r * T;
        float *pr = p + r * T;
        float mx = -INFINITY;
        for (int j = lane; j < T; j += 32) {
            float v = sr[j] * scale;
            if (ds_key_ok(mrow, j, nk) && v > mx) mx = v; /* as ds_softmax_row */
        }
        mx = ds_warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j < T; j += 32) {
            bool ok = mx != -INFINITY && ds_key_ok(mrow, j, nk);
            float e = ok ? ds_expf(sr[j] * scale - mx) : 0.0f;
            pr[j] = e;
            sum += e;
        }
        sum = ds_warp_sum(sum);
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* no real key: zeros */
        /* Windows of 128 keys: lane l draws the Philox block b0 + l of the
         * window's stream (4 keys each; one more block when the window does
         * not start on a block), and the keys' words reach their lanes by
         * shuffles: one Philox per lane per 128 keys instead of one per key
         * (ds_rng_uniform_at's block for each of 4 keys). Then words of 32
         * keys, so the warp's ballot is one word of keep. */
        uint64_t base = offset + (uint64_t)r * T;
        for (int w0 = 0; w0 < T; w0 += 128) {
            uint64_t e0 = base + (uint64_t)w0, b0 = e0 >> 2;
            ds_philox4 w = {{0, 0, 0, 0}}, wx = {{0, 0, 0, 0}};
            if (drop_p > 0.0f) {
                w = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, b0 + (uint64_t)lane);
                if (e0 & 3u) wx = ds_rng_block(seed, DS_RNG_TAG_UNIFORM, b0 + 32);
            }
            for (int j0 = w0; j0 < T && j0 < w0 + 128; j0 += 32) {
                int j = j0 + lane;
                bool kp = false;
                if (drop_p > 0.0f) { /* warp-uniform: every lane shuffles */
                    uint64_t e = base + (uint64_t)j;
                    int src = (int)((e >> 2) - b0), c = (int)(e & 3u); /* src in [0, 32] */
                    uint32_t v0 = __shfl_sync(0xffffffffu, w.v[0], src & 31);
                    uint32_t v1 = __shfl_sync(0xffffffffu, w.v[1], src & 31);
                    uint32_t v2 = __shfl_sync(0xffffffffu, w.v[2], src & 31);
                    uint32_t v3 = __shfl_sync(0xffffffffu, w.v[3], src & 31);
                    uint32_t bits = src == 32 ? wx.v[c]
                                    : c == 0  ? v0
                                    : c == 1  ? v1
                                    : c == 2  ? v2
                                              : v3;
                    kp = j < T && ds_dropout_keep(bits, drop_p);
                }
                if (j < T) {
                    float v = pr[j] * inv;
                    pr[j] = v;
                    if (pd) pd[r * T + j] = drop_p > 0.0f ? v * (kp ? inv_keep : 0.0f) : v;
                }
                if (keep && drop_p > 0.0f) {
                    uint32_t word = __ballot_sync(0xffffffffu, kp);
                    if (lane == 0) keep[r * ld + j0 / 32] = word;
                }
            }
        }
    }
}

ds_status ds_nn_cuda_attn_softmax_fwd(ds_backend *be, float *p, float *pd, const float *s,
                                      const float *mask, bool causal, int B, int nh, int Tq, int T,
                                      float scale, float drop_p, uint64_t seed, uint64_t offset,
                                      uint32_t *keep) {
    DS_TRY(ds_check_attn_fwd("attn_softmax_fwd", pd, B, nh, Tq, T, drop_p, offset));
    DS_CUDA_ENTER(be);
    int64_t rows = (int64_t)B * nh * Tq;
    if (rows <= 0) return DS_OK;
    ds_k_attn_softmax_fwd<<<ds_nn_row_blocks(rows), 32 * DS_NN_ROWS_PER_BLOCK, 0,
                            DS_CUDA_DEFAULT_STREAM>>>(p, pd, s, mask, causal, nh, Tq, T, rows,
                                                      scale, drop_p, 1.0f / (1.0f - drop_p),
                                                      seed, offset, keep);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

__global__ void ds_k_attn_softmax_bwd(float *ds, float *pd, const float *dpd, const float *p,
                                      int T, int64_t rows, float scale, float drop_p,
                                      float inv_keep, uint64_t seed, uint64_t offset,
                                      const uint32_t *keep) {
    int lane = threadIdx.x % 32;
    int ld = ds_dropout_mask_ld(T);
    DS_NN_WARP_ROWS(r, rows) {
        const float *pr = p + r * T;
        float dot = 0.0f;
        for (int j = lane; j < T; j += 32) {
            /* the forward's bit when it kept the mask, else the stream again */
            bool kp = drop_p > 0.0f &&
                      (keep ? (keep[r * ld + j / 32] >> (j & 31)) & 1u
                            : ds_rng_uniform_at(seed, offset + (uint64_t)r * T + j) >= drop_p);
            float m = drop_p > 0.0f ? (kp ? inv_keep : 0.0f) : 1.0f;
            float dp = dpd[r * T + j] * m;
            ds[r * T + j] = dp;
            dot += dp * pr[j];
            if (pd) pd[r * T + j] = pr[j] * m;
        }
        dot = ds_warp_sum(dot);
        for (int j = lane; j < T; j += 32)
            ds[r * T + j] = ds_softmax_ds(pr[j], ds[r * T + j], dot, scale);
    }
}

ds_status ds_nn_cuda_attn_softmax_bwd(ds_backend *be, float *ds, float *pd, const float *dpd,
                                      const float *p, int B, int nh, int Tq, int T, float scale,
                                      float drop_p, uint64_t seed, uint64_t offset,
                                      const uint32_t *keep) {
    DS_TRY(ds_check_attn("attn_softmax_bwd", B, nh, Tq, T, drop_p, offset));
    DS_CUDA_ENTER(be);
    int64_t rows = (int64_t)B * nh * Tq;
    if (rows <= 0) return DS_OK;
    ds_k_attn_softmax_bwd<<<ds_nn_row_blocks(rows), 32 * DS_NN_ROWS_PER_BLOCK, 0,
                            DS_CUDA_DEFAULT_STREAM>>>(ds, pd, dpd, p, T, rows, scale, drop_p,
                                                      1.0f / (1.0f - drop_p), seed, offset,
                                                      drop_p > 0.0f ? keep : NULL);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
