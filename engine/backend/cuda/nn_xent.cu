/* CUDA softmax cross-entropy with optional class weights. B x C is small:
 * the forward is one block (rows strided over its threads, the loss sums in
 * double reduced in a fixed order); bad labels come back as a status through
 * a __device__ flag read after the kernel. */
#include <limits.h>

#include "engine/backend/cuda/nn_cuda.cuh"

#define XENT_THREADS 256

/* First bad label, packed (row << 32 | (uint32_t)label); ULLONG_MAX = none. */
__device__ unsigned long long g_ds_nn_bad_label;

__global__ void ds_k_xent_fwd(float *loss, float *wsum, float *probs, const float *logits,
                              const int32_t *labels, const float *weights, int B, int C) {
    __shared__ double snum[XENT_THREADS], sden[XENT_THREADS];
    double num = 0.0, den = 0.0;
    for (int b = threadIdx.x; b < B; b += XENT_THREADS) {
        int y = labels[b];
        if (y < 0 || y >= C) {
            atomicMin(&g_ds_nn_bad_label,
                      ((unsigned long long)b << 32) | (unsigned long long)(uint32_t)y);
            continue;
        }
        const float *z = logits + (size_t)b * C;
        float lse = ds_logsumexp_row(z, C);
        for (int c = 0; c < C; c++) probs[(size_t)b * C + c] = expf(z[c] - lse);
        float w = weights ? weights[y] : 1.0f;
        num += (double)w * (double)(lse - z[y]);
        den += (double)w;
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
        loss[0] = sden[0] > 0.0 ? (float)(snum[0] / sden[0]) : NAN;
        wsum[0] = (float)sden[0];
    }
}

ds_status ds_nn_cuda_xent_fwd(ds_backend *be, float *loss, float *wsum, float *probs,
                              const float *logits, const int32_t *labels, const float *weights,
                              int B, int C) {
    if (!labels) return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: the batch has no labels");
    DS_CUDA_ENTER(be);
    const unsigned long long none = ULLONG_MAX;
    DS_CHECK_CUDA(cudaMemcpyToSymbolAsync(g_ds_nn_bad_label, &none, sizeof none, 0,
                                          cudaMemcpyHostToDevice, DS_CUDA_DEFAULT_STREAM));
    ds_k_xent_fwd<<<1, XENT_THREADS, 0, DS_CUDA_DEFAULT_STREAM>>>(loss, wsum, probs, logits, labels,
                                                                weights, B, C);
    DS_CHECK_LAUNCH();
    unsigned long long bad = none;
    float ws = 0.0f;
    DS_CHECK_CUDA(cudaMemcpyFromSymbolAsync(&bad, g_ds_nn_bad_label, sizeof bad, 0,
                                            cudaMemcpyDeviceToHost, DS_CUDA_DEFAULT_STREAM));
    DS_CHECK_CUDA(cudaMemcpyAsync(&ws, wsum, sizeof ws, cudaMemcpyDeviceToHost,
                                  DS_CUDA_DEFAULT_STREAM));
    DS_CHECK_CUDA(cudaStreamSynchronize(DS_CUDA_DEFAULT_STREAM));
    if (bad != none)
        return DS_ERR(DS_ERR_INVALID_ARG, "xent_fwd: label %d of row %d is outside [0, %d)",
                      (int)(int32_t)(uint32_t)(bad & 0xffffffffull), (int)(bad >> 32), C);
    if (!(ws > 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "xent_fwd: the class weights of this batch's labels sum to %g (need > 0)",
                      (double)ws);
    return DS_OK;
}

__global__ void ds_k_xent_bwd(float *dlogits, const float *probs, const float *wsum,
                              const int32_t *labels, const float *weights, int B, int C,
                              float scale) {
    float inv = scale / wsum[0];
    DS_GRID_STRIDE(i, (size_t)B * C) {
        int b = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
        int y = labels[b];
        float coef = (weights ? weights[y] : 1.0f) * inv;
        dlogits[i] = ds_xent_dlogit(probs[i], c == y, coef);
    }
}

ds_status ds_nn_cuda_xent_bwd(ds_backend *be, float *dlogits, const float *probs,
                              const float *wsum, const int32_t *labels, const float *weights,
                              int B, int C, float scale) {
    DS_CUDA_ENTER(be);
    if (B <= 0 || C <= 0) return DS_OK;
    ds_k_xent_bwd<<<DS_CUDA_GRID(be, (size_t)B * C)>>>(dlogits, probs, wsum, labels, weights, B, C,
                                                      scale);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
