/* The cpu backend: memory, copies, ordering and GEMM (OpenBLAS), compiled
 * once; the element-wise and model kernels come in one variant per
 * instruction set (cpu_isa.h), and ds_backend_cpu_init wires in the variant
 * this CPU runs best (or the one DS_CPU_ISA names): be->ops and be->nn are
 * that variant's tables (cpu_variant.c).
 *
 * "Device" memory is host RAM and everything is synchronous, so sync is a
 * no-op and the optional stream / event slots are NULL (backend.h).
 *
 * Threads. The backend runs its OpenMP loops on be->num_threads threads. The
 * OpenMP build of OpenBLAS takes its thread count from omp_get_max_threads()
 * of the calling thread (and runs single-threaded inside a parallel region),
 * so the backend sets that to num_threads with openblas_set_num_threads() at
 * creation and again before a GEMM if the calling thread differs: OpenBLAS and
 * the engine's loops then use the same cores and never oversubscribe them.
 * One product is shared among the threads by blocks of its rows, each a
 * single-threaded OpenBLAS call (gemm_row_blocks says why). A
 * thread marked by ds_backend_thread_serial (the communication worker) runs
 * everything on itself (ds_cpu_team). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/backend/backend.h"
#include "engine/backend/blas_core.h"
#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/math.h"

/* Page alignment for big buffers (whole pages for the kernel and MPI's
 * registration caches), cache-line + AVX-512 alignment for small ones. */
#define DS_CPU_PAGE 4096
#define DS_CPU_LINE 64
#define DS_CPU_BIG ((size_t)1 << 16)
/* Buffers of at least one huge page start on one and ask the kernel for
 * transparent huge pages (MADV_HUGEPAGE: honoured where THP is "madvise" or
 * "always", a no-op where it is "never" or absent). A step walks its
 * activations, gradients and optimizer state in whole tensors of megabytes:
 * with 4 KiB pages every 4 KiB is a TLB entry, and the GEMMs' packing and
 * the row kernels pay a page walk per row of 1,024 floats. */
#define DS_CPU_HUGE ((size_t)2 << 20)

ds_status ds_cpu_alloc(ds_backend *be, size_t bytes, ds_mem_place place, void **out) {
    (void)be;
    *out = NULL;
    if (place != DS_PLACE_DEVICE && place != DS_PLACE_HOST)
        return DS_ERR(DS_ERR_INVALID_ARG, "cpu alloc: unknown place %d", (int)place);
    size_t align = bytes >= DS_CPU_HUGE                           ? DS_CPU_HUGE
                   : (place == DS_PLACE_HOST || bytes >= DS_CPU_BIG) ? DS_CPU_PAGE
                                                                     : DS_CPU_LINE;
    /* posix_memalign wants a size > 0; round up to whole alignment units so
     * vector loops may read the last line without leaving the allocation. */
    size_t unit = align < DS_CPU_PAGE ? align : DS_CPU_PAGE; /* huge: no rounding to 2 MiB */
    size_t rounded = (bytes + unit - 1) / unit * unit;
    if (rounded < bytes) return DS_ERR(DS_ERR_OOM, "cpu alloc: %zu bytes overflow", bytes);
    void *p = NULL;
    int rc = posix_memalign(&p, align, rounded ? rounded : align);
    if (rc != 0 || !p)
        return DS_ERR(DS_ERR_OOM, "cpu alloc: posix_memalign(%zu bytes, align %zu) failed: %s",
                      rounded, align, strerror(rc));
#ifdef MADV_HUGEPAGE
    if (align == DS_CPU_HUGE) (void)madvise(p, rounded, MADV_HUGEPAGE); /* before the first touch */
#endif
    memset(p, 0, rounded);
    *out = p;
    return DS_OK;
}

void ds_cpu_free(ds_backend *be, void *ptr, ds_mem_place place) {
    (void)be;
    (void)place;
    free(ptr);
}

ds_status ds_cpu_memcpy(ds_backend *be, void *dst, const void *src, size_t bytes,
                            ds_copy_kind kind, ds_stream *stream) {
    (void)be;
    (void)stream;
    if ((int)kind < DS_COPY_H2D || kind > DS_COPY_DEFAULT)
        return DS_ERR(DS_ERR_INVALID_ARG, "cpu memcpy: unknown copy kind %d", (int)kind);
    if (bytes == 0) return DS_OK;
    if (!dst || !src)
        return DS_ERR(DS_ERR_INVALID_ARG, "cpu memcpy: NULL pointer (dst=%p src=%p) for %zu bytes",
                      dst, src, bytes);
    if (dst != src) memmove(dst, src, bytes);
    return DS_OK;
}

ds_status ds_cpu_memset(ds_backend *be, void *dst, int value, size_t bytes, ds_stream *stream) {
    (void)be;
    (void)stream;
    if (bytes == 0) return DS_OK;
    if (!dst) return DS_ERR(DS_ERR_INVALID_ARG, "cpu memset: dst is NULL for %zu bytes", bytes);
    memset(dst, value, bytes);
    return DS_OK;
}

ds_status ds_cpu_sync(ds_backend *be) {
    (void)be;
    return DS_OK;
}

/* C_b = beta * C_b for k == 0, where BLAS semantics say op(A) op(B) is
 * empty; beta == 0 writes zeros without reading C (NaN in C is cleared). */
static void gemm_beta_only(float beta, float *C, int m, int n, int ldc, int64_t strideC,
                           int batch) {
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < m; i++) {
            float *row = C + b * strideC + (int64_t)i * ldc;
            for (int j = 0; j < n; j++) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
        }
    }
}

/* Rows of C per unit when one product is split over the threads: where the
 * core's kernels cut a product into calls with the bits of one call over
 * all rows (ds_blas_row_unit: 12 for Haswell and Zen, 16 for SkylakeX and
 * Cooperlake, 48 for a core not measured), so that a rank of 2 threads
 * computes what a rank of 1 does (test_backend_gemm checks it at 1 and 2
 * threads, also under the Haswell kernels). A fixed 48 for every core split
 * BERT-mini's 256-row weight gradients 144 / 112: those products ran at
 * 0.61 of their 1-thread time instead of ~0.53 (RESULTS, "Stop 44"). Decided
 * once: OpenBLAS picks its core when it loads. */
static int gemm_row_unit(void) {
    static int unit;
    int u = __atomic_load_n(&unit, __ATOMIC_RELAXED);
    if (!u) {
        u = ds_blas_row_unit(openblas_get_corename());
        __atomic_store_n(&unit, u, __ATOMIC_RELAXED);
    }
    return u;
}

/* Multiply-adds a block of a split product has on average, at least: twice
 * OpenBLAS's small-matrix threshold (10^6; SkylakeX's kernels compute a
 * smaller product another way, with other bits), so that the smallest
 * block, at least half the average, stays above it at any thread count. */
#define DS_CPU_GEMM_BLOCK_MACS (2.0 * 1024 * 1024)

/* How one product (batch 1) runs on nt > 1 threads: in how many blocks of
 * C's rows (gemm_row_blocks), each a single-threaded OpenBLAS call, or 0:
 * through OpenBLAS's own threading. A product of at most
 * DS_CPU_GEMM_SMALL_FLOPS is one block on one thread (OpenBLAS would share
 * it above 2^18 multiply-adds, for a fraction of a millisecond, and with
 * bits that depend on the thread count). OpenBLAS's threading keeps the
 * bigger products with too few rows for two units and those whose C is
 * more than 4 times wider than tall: there each thread would pack all of a
 * B much larger than A, where OpenBLAS's threads share it (an LM head over
 * one sequence, 256 x 50257 x 768: 0.84x OpenBLAS's threading in blocks,
 * RESULTS). Those keep thread-count-dependent bits with the Haswell and Zen
 * kernels: a split of C's columns is not on their tiles' boundaries either
 * (splits at multiples of 256 to 6144 columns all changed bits).
 *
 * Why not OpenBLAS's own threading otherwise. (1) It shares its packed
 * panels: each thread packs a part of B, every thread reads every part, and
 * they signal
 * through flags in shared memory. Where the two cores share no cache (vCPUs
 * the hypervisor put on different dies: a core-to-core round trip of
 * 320-360 ns instead of 55-75 ns, measured on the Zen 4 VM of RESULTS), the
 * BERT-mini step at 1 rank x 2 threads ran 15-20% slower than at 2 ranks x 1
 * thread, and its GEMMs alone 25-35% slower. Blocks of rows share nothing
 * written: each thread packs its own rows of A and reads all of B (at most
 * a layer's weight) itself. (2) With the Haswell and Zen kernels OpenBLAS's
 * split is not on tile boundaries, so its result depended on the thread
 * count; the blocks give the bits of one single-threaded call. */
static int gemm_row_block_count(int m, int n, int k, int nt, int unit) {
    const double flops = 2.0 * m * n * k;
    if (flops <= DS_CPU_GEMM_SMALL_FLOPS) return 1;
    if (m < 2 * unit || n > 4 * m) return 0;
    /* whole units (gemm_row_blocks): each block at least one */
    const int units = m / unit, most = (int)(flops / 2 / DS_CPU_GEMM_BLOCK_MACS);
    int blocks = units < nt ? units : nt;
    return blocks < most ? blocks : most;
}

/* C's rows in `blocks` blocks: the whole units of `unit` rows dealt out
 * evenly (the blocks differ by one unit at most), the rows past the last
 * whole unit going with the last block. A short unit never makes a block
 * of its own: a block of 1-2 rows falls under OpenBLAS's small-matrix
 * threshold, whose kernel rounds otherwise (measured: m 33, n 128, k 4096
 * at 3-5 threads changed row 32's bits against one thread). nt: the team,
 * told to OpenBLAS again after a one-block call. */
static void gemm_row_blocks(int blocks, int unit, int nt, enum CBLAS_TRANSPOSE ta,
                            enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc) {
    const int units = m / unit;
    if (blocks == 1) { /* outside a parallel region: OpenBLAS told one thread */
        openblas_set_num_threads(1);
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        openblas_set_num_threads(nt);
        return;
    }
#pragma omp parallel num_threads(blocks)
    {
        const int t = omp_get_thread_num();
        const int u0 = (int)((int64_t)units * t / blocks);
        const int u1 = (int)((int64_t)units * (t + 1) / blocks);
        const int m0 = u0 * unit, m1 = t == blocks - 1 ? m : u1 * unit;
        if (m0 < m1)
            cblas_sgemm(CblasRowMajor, ta, tb, m1 - m0, n, k, alpha,
                        ta == CblasTrans ? A + m0 : A + (int64_t)m0 * lda, lda, B, ldb, beta,
                        C + (int64_t)m0 * ldc, ldc);
    }
}

ds_status ds_cpu_gemm(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                          float alpha, const float *A, int lda, int64_t strideA, const float *B,
                          int ldb, int64_t strideB, float beta, float *C, int ldc, int64_t strideC,
                          int batch) {
    DS_TRY(ds_check_gemm("cpu gemm", transa, transb, m, n, k, A, lda, strideA, B, ldb, strideB, C,
                         ldc, strideC, batch));
    if (m == 0 || n == 0 || batch == 0) return DS_OK;
    if (k == 0) {
        gemm_beta_only(beta, C, m, n, ldc, strideC, batch);
        return DS_OK;
    }
    int nt = ds_cpu_team(be);
    if (omp_get_max_threads() != nt) openblas_set_num_threads(nt);
    enum CBLAS_TRANSPOSE ta = transa ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transb ? CblasTrans : CblasNoTrans;
    int blocks, unit = gemm_row_unit();
    /* several products one per thread (OpenBLAS single-threaded inside the
     * parallel region): the small ones cpu_gemm_small.c leaves to OpenBLAS,
     * and the big ones too, whose bits OpenBLAS's threading would make
     * depend on the thread count with the Haswell and Zen kernels (measured:
     * attention at T 512, 512 x 512 x 64 in a batch of 4, 5e4-1.2e5 elements
     * differing at 2-8 threads); each product is one single-threaded call,
     * as at one thread. Fewer big products than threads: each in row blocks,
     * which keep one thread's bits too, so no thread idles */
    const bool small = 2.0 * m * n * k <= DS_CPU_GEMM_SMALL_FLOPS;
    if (batch > 1 && nt > 1 && (small || batch >= nt)) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int b = 0; b < batch; b++)
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A + b * strideA, lda,
                        B + b * strideB, ldb, beta, C + b * strideC, ldc);
    } else if (nt > 1 && (blocks = gemm_row_block_count(m, n, k, nt, unit)) > 0) {
        for (int b = 0; b < batch; b++)
            gemm_row_blocks(blocks, unit, nt, ta, tb, m, n, k, alpha, A + b * strideA, lda,
                            B + b * strideB, ldb, beta, C + b * strideC, ldc);
    } else {
        for (int b = 0; b < batch; b++)
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A + b * strideA, lda,
                        B + b * strideB, ldb, beta, C + b * strideC, ldc);
    }
    return DS_OK;
}

void ds_cpu_destroy(ds_backend *be) {
    be->impl = NULL; /* nothing of its own: the GEMM workspace is the backend's (backend.c) */
}

ds_status ds_backend_cpu_init(ds_backend *be, const ds_backend_desc *desc) {
    if (desc->num_threads < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "cpu backend: num_threads must be >= 0, got %d",
                      desc->num_threads);
    int nt = desc->num_threads > 0 ? desc->num_threads : omp_get_max_threads();
    if (nt < 1) nt = 1;
    const ds_cpu_variant *v;
    DS_TRY(ds_cpu_variant_pick(&v));
    be->ops = v->ops;
    be->nn = v->nn;
    be->num_threads = nt;
    /* With its dropped-out copy and the rows of Q, K, V and C it reads and
     * writes, 512 KiB of attention probabilities stays within a core's 2 MiB
     * L2 at BERT-mini's shapes: scores + softmax + context over the batch in
     * chunks of 1-2 rows took 6.3-6.8 ms against 8.1-9.0 ms in one pass each
     * (1 thread, CPU time, same run, caches flushed between calls as the
     * step's other kernels do). */
    be->chunk_bytes = 512u * 1024u;
    be->device = 0;
    be->impl = NULL;
    /* Also sets this thread's OpenMP default to nt (OpenMP build). */
    openblas_set_num_threads(nt);
    return DS_OK;
}
