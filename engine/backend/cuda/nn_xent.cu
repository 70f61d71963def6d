/* CUDA softmax cross-entropy with optional per-row weights and an ignore
 * index. One block per row computes the row's log-sum-exp (max and sum
 * reduced in shared memory), its probabilities and its -log p; a second
 * single-block kernel sums the rows in double in a fixed order. Bad labels
 * come back as a status before the kernels (ds_nn_cuda_first_bad_index). */

#include "engine/backend/cuda/nn_cuda.cuh"

#define XENT_THREADS 256

/* labels are checked before the launch (ds_nn_cuda_first_bad_index) */
__global__ void ds_k_xent_rows(float *probs, float *row_loss, const float *logits,
                               const int32_t *labels, int C, int ignore_index) {
    __shared__ float red[XENT_THREADS];
    int r = blockIdx.x;
    const float *z = logits + (size_t)r * C;
    int y = labels[r];
    bool counted = y != ignore_index;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < C; c += XENT_THREADS) mx = fmaxf(mx, z[c]);
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int s = XENT_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += XENT_THREADS) sum += expf(z[c] - mx);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = XENT_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float lse = mx + logf(red[0]);
    for (int c = threadIdx.x; c < C; c += XENT_THREADS) probs[(size_t)r * C + c] = expf(z[c] - lse);
    if (threadIdx.x == 0) row_loss[r] = counted ? lse - z[y] : 0.0f;
}

/* Row sums in double, each thread a strided share, reduced in a fixed tree. */
__global__ void ds_k_xent_sum(float *loss, float *wsum, const float *row_loss,
                              const int32_t *labels, const float *weights, int R,
                              int ignore_index) {
    __shared__ double snum[XENT_THREADS], sden[XENT_THREADS];
    double num = 0.0, den = 0.0;
    for (int r = threadIdx.x; r < R; r += XENT_THREADS) {
        if (labels[r] == ignore_index) continue;
        double w = weights ? (double)weights[r] : 1.0;
        num += w * (double)row_loss[r];
        den += w;
    }
    snum[threadIdx.x] = num;
    sden[threadIdx.x] = den;
    __syncthreads();
    for (int s = XENT_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            snum[threadIdx.x] += snum[threadIdx.x + s];
            sden[threadIdx.x] += sden[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        loss[0] = sden[0] > 0.0 ? (float)(snum[0] / sden[0]) : 0.0f;
        wsum[0] = (float)sden[0];
    }
}

ds_status ds_nn_cuda_xent_fwd(ds_backend *be, float *loss, float *wsum, float *probs,
                              float *row_loss, const float *logits, const int32_t *labels,
                              const float *weights, int R, int C, int ignore_index) {
    if (!labels) return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: the batch has no labels");
    DS_TRY(ds_check_nn_sizes("xent_fwd", "R", R, "C", C));
    DS_CUDA_ENTER(be);
    /* bad labels come back as a status before anything is written */
    int row;
    int32_t label;
    DS_TRY(ds_nn_cuda_first_bad_index(be, labels, R, C, true, ignore_index, &row, &label));
    if (row >= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: label %d of row %d is outside [0, %d)",
                      label, row, C);
    if (R > 0) {
        ds_k_xent_rows<<<R, XENT_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(probs, row_loss, logits,
                                                                      labels, C, ignore_index);
        DS_CHECK_LAUNCH();
    }
    ds_k_xent_sum<<<1, XENT_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(loss, wsum, row_loss, labels,
                                                                weights, R, ignore_index);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

__global__ void ds_k_xent_bwd(float *dlogits, const float *probs, const float *wsum,
                              const int32_t *labels, const float *weights, int R, int C,
                              int ignore_index, float scale) {
    float inv = wsum[0] > 0.0f ? scale / wsum[0] : 0.0f;
    DS_GRID_STRIDE(i, (size_t)R * C) {
        int r = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
        int y = labels[r];
        bool counted = y != ignore_index;
        float coef = counted ? (weights ? weights[r] : 1.0f) * inv : 0.0f;
        dlogits[i] = ds_xent_dlogit(probs[i], counted && c == y, coef);
    }
}

ds_status ds_nn_cuda_xent_bwd(ds_backend *be, float *dlogits, const float *probs,
                              const float *wsum, const int32_t *labels, const float *weights,
                              int R, int C, int ignore_index, float scale) {
    DS_TRY(ds_check_nn_sizes("xent_bwd", "R", R, "C", C));
    DS_CUDA_ENTER(be);
    if (R == 0 || C == 0) return DS_OK;
    ds_k_xent_bwd<<<DS_CUDA_GRID(be, (size_t)R * C)>>>(dlogits, probs, wsum, labels, weights, R,
                                                      C, ignore_index, scale);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
