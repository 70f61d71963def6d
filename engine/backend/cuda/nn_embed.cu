/* CUDA kernels that move rows: embedding gather / scatter-add, broadcast
 * add and column sums, masked mean pooling, strided row copies. */
#include <limits.h>

#include <cub/device/device_radix_sort.cuh>

#include "engine/backend/cuda/colsum.cuh"
#include "engine/backend/cuda/nn_cuda.cuh"

/* *first = the first out-of-range index, packed (position << 32 |
 * (uint32_t)value) so that atomicMin keeps the lowest position; ULLONG_MAX =
 * none. `first` is the backend's own word (ds_cuda_impl.bad_index_dev). */
__global__ void ds_k_first_bad_index(const int32_t *v, int n, int hi, int has_skip, int skip,
                                     unsigned long long *first) {
    DS_GRID_STRIDE(i, (size_t)n) {
        int x = v[i];
        if ((x < 0 || x >= hi) && !(has_skip && x == skip))
            atomicMin(first,
                      ((unsigned long long)i << 32) | (unsigned long long)(uint32_t)x);
    }
}

ds_status ds_nn_cuda_first_bad_index(ds_backend *be, const int32_t *v, int n, int hi,
                                     bool has_skip, int skip, int *pos, int32_t *val) {
    *pos = -1;
    *val = 0;
    if (n <= 0) return DS_OK;
    unsigned long long *first = ds_cuda_impl_of(be)->bad_index_dev;
    const unsigned long long none = ULLONG_MAX;
    DS_CHECK_CUDA(cudaMemcpyAsync(first, &none, sizeof none, cudaMemcpyHostToDevice,
                                  DS_CUDA_DEFAULT_STREAM));
    ds_k_first_bad_index<<<DS_CUDA_GRID(be, (size_t)n)>>>(v, n, hi, has_skip ? 1 : 0, skip,
                                                          first);
    DS_CHECK_LAUNCH();
    unsigned long long bad = none;
    DS_CHECK_CUDA(cudaMemcpyAsync(&bad, first, sizeof bad, cudaMemcpyDeviceToHost,
                                  DS_CUDA_DEFAULT_STREAM));
    DS_CHECK_CUDA(cudaStreamSynchronize(DS_CUDA_DEFAULT_STREAM));
    if (bad != none) {
        *pos = (int)(bad >> 32);
        *val = (int32_t)(uint32_t)(bad & 0xffffffffull);
    }
    return DS_OK;
}

/* ids are checked before the launch (ds_nn_cuda_first_bad_index) */
__global__ void ds_k_embedding_fwd(float *out, const float *table, const int32_t *ids, int n,
                                   int h, int accumulate) {
    DS_GRID_STRIDE(i, (size_t)n * h) {
        size_t row = i / (size_t)h, c = i % (size_t)h;
        float v = table[(size_t)ids[row] * h + c];
        out[i] = accumulate ? out[i] + v : v;
    }
}

ds_status ds_nn_cuda_embedding_fwd(ds_backend *be, float *out, const float *table,
                                   const int32_t *ids, int n, int h, int vocab, bool accumulate) {
    DS_TRY(ds_check_nn_sizes("embedding", "n", n, "h", h));
    DS_CUDA_ENTER(be);
    /* Bad ids are bad input and come back as a status before anything is
     * written: one small synchronous copy per call (the first module's
     * forward; the batch was just uploaded anyway). */
    int pos;
    int32_t id;
    DS_TRY(ds_nn_cuda_first_bad_index(be, ids, n, vocab, false, 0, &pos, &id));
    if (pos >= 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "embedding: id %d at position %d is outside the table [0, %d)", id, pos,
                      vocab);
    if (n == 0 || h == 0) return DS_OK;
    ds_k_embedding_fwd<<<DS_CUDA_GRID(be, (size_t)n * h)>>>(out, table, ids, n, h,
                                                           accumulate ? 1 : 0);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* Scatter-add without atomics, so the result is the same on every run (a
 * float atomicAdd sums a repeated id's positions in whatever order the
 * hardware serves them, so training on cuda would not repeat bit for bit).
 * The positions are sorted by id with a stable radix sort (CUB's keeps the
 * positions of one id in increasing order), so each id's positions form one
 * run; the thread of (run, column) adds the run's rows onto dtable[id, c] in
 * that order -- the order of the cpu loop, so the two backends give the same
 * bits. A warp is one run and 32 consecutive columns: a warp whose position
 * does not start a run leaves at once, so the work is the n rows read once
 * plus a chain per id as long as that id is frequent. (The version before
 * this one scanned all n ids in each of 64 id classes, and at batch 256 x
 * seq 128 took 12% of BERT-mini's step on an H100.) */
__global__ void ds_k_iota(int32_t *x, int n) {
    DS_GRID_STRIDE(i, (size_t)n) x[i] = (int32_t)i;
}

/* The rows of a run: loads DS_EMB_RUN_U positions ahead, so a frequent id's
 * chain waits on one memory latency per DS_EMB_RUN_U rows, not two per row. */
#define DS_EMB_RUN_U 16

__global__ void ds_k_embedding_bwd_runs(float *dtable, const float *dout, const int32_t *sid,
                                        const int32_t *pos, int n, int h, int padding_idx) {
    int i = blockIdx.x * blockDim.y + threadIdx.y; /* the sorted position of this warp */
    int c = blockIdx.y * 32 + threadIdx.x;
    if (i >= n || c >= h) return;
    int id = sid[i];
    if (id == padding_idx || (i > 0 && sid[i - 1] == id)) return; /* not a run's start */
    /* the run's end: the first sorted position past i holding another id */
    int lo = i + 1, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (sid[mid] == id) lo = mid + 1;
        else hi = mid;
    }
    const int end = lo;
    const float *col = dout + c;
    float *dst = dtable + (size_t)id * h + c;
    float acc = *dst;
    int p[DS_EMB_RUN_U];
#pragma unroll
    for (int u = 0; u < DS_EMB_RUN_U; u++) p[u] = i + u < end ? pos[i + u] : 0;
    for (int j = i; j < end; j += DS_EMB_RUN_U) {
        float v[DS_EMB_RUN_U];
#pragma unroll
        for (int u = 0; u < DS_EMB_RUN_U; u++) v[u] = j + u < end ? col[(size_t)p[u] * h] : 0.0f;
        const int k = j + DS_EMB_RUN_U; /* the next rows' positions, loaded while these add */
#pragma unroll
        for (int u = 0; u < DS_EMB_RUN_U; u++) p[u] = k + u < end ? pos[k + u] : 0;
        /* in position order, and only the run's rows: adding a 0 for the
         * others could turn a -0 into +0 */
#pragma unroll
        for (int u = 0; u < DS_EMB_RUN_U; u++)
            if (j + u < end) acc += v[u];
    }
    *dst = acc;
}

static size_t ds_align256(size_t b) { return (b + 255) & ~(size_t)255; }

ds_status ds_nn_cuda_embedding_bwd(ds_backend *be, float *dtable, const float *dout,
                                   const int32_t *ids, int n, int h, int padding_idx) {
    DS_CUDA_ENTER(be);
    if (n <= 0 || h <= 0) return DS_OK;
    /* the scratch: sorted ids, positions in and out, then CUB's own */
    size_t cub_bytes = 0;
    DS_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, ids, (int32_t *)NULL,
                                                  (const int32_t *)NULL, (int32_t *)NULL, n, 0,
                                                  32, DS_CUDA_DEFAULT_STREAM));
    size_t arr = ds_align256((size_t)n * sizeof(int32_t));
    char *scratch;
    DS_TRY(ds_cuda_scratch(be, 3 * arr + cub_bytes, (void **)&scratch));
    int32_t *sid = (int32_t *)scratch, *pos_in = (int32_t *)(scratch + arr),
            *pos = (int32_t *)(scratch + 2 * arr);
    ds_k_iota<<<DS_CUDA_GRID(be, (size_t)n)>>>(pos_in, n);
    DS_CHECK_LAUNCH();
    /* ids passed embedding_fwd: all in [0, vocab), so their sign bit is 0
     * and all 32 bits sort them in order */
    DS_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(scratch + 3 * arr, cub_bytes, ids, sid,
                                                  (const int32_t *)pos_in, pos, n, 0, 32,
                                                  DS_CUDA_DEFAULT_STREAM));
    dim3 block(32, 8), grid((unsigned)((n + 7) / 8), (unsigned)((h + 31) / 32));
    ds_k_embedding_bwd_runs<<<grid, block, 0, DS_CUDA_DEFAULT_STREAM>>>(dtable, dout, sid, pos,
                                                                        n, h, padding_idx);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

__global__ void ds_k_bcast_add(float *out, const float *x, int rows, int width, int accumulate) {
    DS_GRID_STRIDE(i, (size_t)rows * width) {
        float v = x[i % (size_t)width];
        out[i] = accumulate ? out[i] + v : v;
    }
}

ds_status ds_nn_cuda_bcast_add_fwd(ds_backend *be, float *out, const float *x, int rows,
                                   int width, bool accumulate) {
    DS_TRY(ds_check_nn_sizes("bcast_add_fwd", "rows", rows, "width", width));
    DS_CUDA_ENTER(be);
    if (rows == 0 || width == 0) return DS_OK;
    ds_k_bcast_add<<<DS_CUDA_GRID(be, (size_t)rows * width)>>>(out, x, rows, width,
                                                              accumulate ? 1 : 0);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

/* Column sums: a block of 32 x 8 threads owns 32 columns; its 8 row lanes
 * stride over the rows, then the 8 partial sums are added in a fixed order. */
/* colsum's term: src[r, c] */
struct ds_colsum_src {
    const float *src;
    int width;
    __device__ void operator()(int64_t r, int c, float *a) const {
        a[0] += src[r * width + c];
    }
};

ds_status ds_nn_cuda_colsum(ds_backend *be, float *dst, const float *src, int rows, int width) {
    DS_CUDA_ENTER(be);
    return ds_cuda_colsums<1>(be, dst, NULL, ds_colsum_src{src, width}, rows, width);
}

ds_status ds_nn_cuda_bcast_add_bwd(ds_backend *be, float *dx, const float *dout, int rows,
                                   int width) {
    return ds_nn_cuda_colsum(be, dx, dout, rows, width);
}

/* 1 / max(1, real tokens of row b) */
__device__ __forceinline__ float ds_inv_count(const float *mask, int b, int T) {
    if (!mask) return 1.0f / (float)(T > 1 ? T : 1);
    float cnt = 0.0f;
    for (int t = 0; t < T; t++) cnt += mask[(size_t)b * T + t];
    return 1.0f / (cnt > 1.0f ? cnt : 1.0f);
}

/* One thread per (b, c), looping over t (coalesced over c). */
__global__ void ds_k_mean_pool_fwd(float *out, const float *x, const float *mask, int B, int T,
                                   int H) {
    DS_GRID_STRIDE(i, (size_t)B * H) {
        int b = (int)(i / (size_t)H), c = (int)(i % (size_t)H);
        float s = 0.0f;
        for (int t = 0; t < T; t++) {
            float m = mask ? mask[(size_t)b * T + t] : 1.0f;
            /* unfused, as the cpu loop: an fma rounds once where it rounds twice */
            if (m != 0.0f) s = __fadd_rn(s, __fmul_rn(m, x[((size_t)b * T + t) * H + c]));
        }
        out[i] = s * ds_inv_count(mask, b, T);
    }
}

__global__ void ds_k_mean_pool_bwd(float *dx, const float *dout, const float *mask, int B, int T,
                                   int H) {
    DS_GRID_STRIDE(i, (size_t)B * H) {
        int b = (int)(i / (size_t)H), c = (int)(i % (size_t)H);
        float inv = ds_inv_count(mask, b, T), g = dout[i];
        /* (mask * inv) * g, the cpu loop's order (mask * (inv * g) differs in
         * the last bit for masks other than 0 and 1) */
        for (int t = 0; t < T; t++)
            dx[((size_t)b * T + t) * H + c] =
                __fmul_rn(__fmul_rn(mask ? mask[(size_t)b * T + t] : 1.0f, inv), g);
    }
}

ds_status ds_nn_cuda_mean_pool_fwd(ds_backend *be, float *out, const float *x, const float *mask,
                                   int B, int T, int H) {
    DS_CUDA_ENTER(be);
    if (B <= 0 || H <= 0) return DS_OK;
    ds_k_mean_pool_fwd<<<DS_CUDA_GRID(be, (size_t)B * H)>>>(out, x, mask, B, T, H);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

ds_status ds_nn_cuda_mean_pool_bwd(ds_backend *be, float *dx, const float *dout,
                                   const float *mask, int B, int T, int H) {
    DS_CUDA_ENTER(be);
    if (B <= 0 || H <= 0) return DS_OK;
    ds_k_mean_pool_bwd<<<DS_CUDA_GRID(be, (size_t)B * H)>>>(dx, dout, mask, B, T, H);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

__global__ void ds_k_copy_rows(float *dst, int dst_ld, const float *src, int src_ld, int rows,
                               int width, int accumulate) {
    DS_GRID_STRIDE(i, (size_t)rows * width) {
        size_t r = i / (size_t)width, c = i % (size_t)width;
        float v = src[r * src_ld + c];
        float *d = dst + r * dst_ld + c;
        *d = accumulate ? *d + v : v;
    }
}

ds_status ds_nn_cuda_copy_rows(ds_backend *be, float *dst, int dst_ld, const float *src,
                               int src_ld, int rows, int width, bool accumulate) {
    DS_TRY(ds_check_copy_rows("copy_rows", dst_ld, src_ld, rows, width));
    DS_CUDA_ENTER(be);
    if (rows == 0 || width == 0) return DS_OK;
    ds_k_copy_rows<<<DS_CUDA_GRID(be, (size_t)rows * width)>>>(dst, dst_ld, src, src_ld, rows,
                                                              width, accumulate ? 1 : 0);
    DS_CHECK_LAUNCH();
    return DS_OK;
}

__global__ void ds_k_shift_labels(int32_t *dst, const int32_t *src, int B, int T, int32_t fill) {
    DS_GRID_STRIDE(i, (size_t)B * T) {
        int t = (int)(i % (size_t)T);
        dst[i] = t + 1 < T ? src[i + 1] : fill;
    }
}

ds_status ds_nn_cuda_shift_labels(ds_backend *be, int32_t *dst, const int32_t *src, int B, int T,
                                  int32_t fill) {
    DS_CUDA_ENTER(be);
    if (B <= 0 || T <= 0) return DS_OK;
    ds_k_shift_labels<<<DS_CUDA_GRID(be, (size_t)B * T)>>>(dst, src, B, T, fill);
    DS_CHECK_LAUNCH();
    return DS_OK;
}
