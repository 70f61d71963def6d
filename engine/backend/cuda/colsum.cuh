/* Column sums over many rows, in a fixed order: the bias and layer-norm
 * parameter gradients (dst[c] += sum_r term(r, c), one or two outputs).
 *
 * Pass 1 splits the rows into slabs; a block sums 32 columns of one slab with
 * 8 row lanes, then adds its lanes in lane order, and writes one partial per
 * column. Pass 2 adds each column's partials in slab order onto dst. No
 * atomics: the same bits every run, as test_nn_cuda checks; the order differs
 * from the cpu backend's, within the summation bound that test derives.
 *
 * Why two passes: one block per 32 columns (the first version) gave BERT-mini's
 * 256-wide bias gradients 8 blocks on a 132-SM H100, each walking all 32,768
 * rows of a batch of 256; ncu measured the column sums and the layer-norm
 * parameter sums at 48% of the step's GPU time. Slabs of at least
 * DS_COLSUM_MIN_SLAB rows and at most DS_COLSUM_MAX_SLABS of them give
 * hundreds of blocks there, and a small input keeps one pass (no partials). */
#ifndef DS_BACKEND_CUDA_COLSUM_CUH
#define DS_BACKEND_CUDA_COLSUM_CUH

#include "engine/backend/cuda/cuda_common.cuh"

#define DS_COLSUM_LANES 8
#define DS_COLSUM_MIN_SLAB 64
#define DS_COLSUM_MAX_SLABS 64
/* the partials live in the backend's scratch (ds_cuda_scratch): a wide sum
 * (a vocabulary-sized bias) takes fewer slabs rather than more memory */
#define DS_COLSUM_SCRATCH_MAX ((size_t)16 << 20)

template <int NOUT, class Term>
__global__ void ds_k_colsum_slab(float *d0, float *d1, float *part, Term term, int64_t rows,
                                 int width, int64_t slab) {
    __shared__ float lane[NOUT][DS_COLSUM_LANES][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * slab, r1 = r0 + slab < rows ? r0 + slab : rows;
    float a[NOUT];
    for (int k = 0; k < NOUT; k++) a[k] = 0.0f;
    if (c < width)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += DS_COLSUM_LANES) term(r, c, a);
    for (int k = 0; k < NOUT; k++) lane[k][threadIdx.y][threadIdx.x] = a[k];
    __syncthreads();
    if (threadIdx.y != 0 || c >= width) return;
    for (int k = 0; k < NOUT; k++) {
        float s = 0.0f;
        for (int j = 0; j < DS_COLSUM_LANES; j++) s += lane[k][j][threadIdx.x];
        if (part) {
            part[((size_t)k * gridDim.y + blockIdx.y) * (size_t)width + c] = s;
        } else {
            float *d = k ? d1 : d0;
            d[c] += s;
        }
    }
}

template <int NOUT>
__global__ void ds_k_colsum_finish(float *d0, float *d1, const float *part, int slabs,
                                   int width) {
    DS_GRID_STRIDE(i, (size_t)NOUT * width) {
        int k = (int)(i / (size_t)width), c = (int)(i % (size_t)width);
        const float *p = part + (size_t)k * slabs * width + c;
        float s = 0.0f;
        for (int j = 0; j < slabs; j++) s += p[(size_t)j * width];
        float *d = k ? d1 : d0;
        d[c] += s;
    }
}

/* d0[c] (+ d1[c] when NOUT is 2) += the sums over rows of term(r, c, a),
 * which adds its terms into a[0..NOUT). On the default stream. */
template <int NOUT, class Term>
static inline ds_status ds_cuda_colsums(ds_backend *be, float *d0, float *d1, Term term,
                                        int64_t rows, int width) {
    if (rows <= 0 || width <= 0) return DS_OK;
    size_t per_slab = (size_t)NOUT * (size_t)width * sizeof(float);
    int64_t slabs = rows / DS_COLSUM_MIN_SLAB;
    if (slabs > DS_COLSUM_MAX_SLABS) slabs = DS_COLSUM_MAX_SLABS;
    if (slabs > 1 && (size_t)slabs * per_slab > DS_COLSUM_SCRATCH_MAX)
        slabs = (int64_t)(DS_COLSUM_SCRATCH_MAX / per_slab);
    if (slabs < 1) slabs = 1;
    int64_t slab = (rows + slabs - 1) / slabs;
    slabs = (rows + slab - 1) / slab; /* no empty slab */
    float *part = NULL;
    if (slabs > 1) DS_TRY(ds_cuda_scratch(be, (size_t)slabs * per_slab, (void **)&part));
    dim3 block(32, DS_COLSUM_LANES), grid((unsigned)((width + 31) / 32), (unsigned)slabs);
    ds_k_colsum_slab<NOUT, Term>
        <<<grid, block, 0, DS_CUDA_DEFAULT_STREAM>>>(d0, d1, part, term, rows, width, slab);
    DS_CHECK_LAUNCH();
    if (part) {
        ds_k_colsum_finish<NOUT>
            <<<DS_CUDA_GRID(be, (size_t)NOUT * width)>>>(d0, d1, part, (int)slabs, width);
        DS_CHECK_LAUNCH();
    }
    return DS_OK;
}

#endif /* DS_BACKEND_CUDA_COLSUM_CUH */
