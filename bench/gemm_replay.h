/* The GEMMs of one training step, recorded, then replayed by themselves
 * (issue 17, item 4). Header-only, for bench_train.
 *
 * Item 4's goal, "the step at least 85% of the rate its GEMM FLOPs run at in
 * OpenBLAS at the same shapes", needs the time of the step's GEMMs alone.
 * bench_kernels times each shape apart, but in another run, a minute from
 * the step's, and on the hosts we measure on a core's speed drifts by up to
 * 2x over seconds to a minute (RESULTS, "Item 4's goals on a second host
 * type"): a ratio of two runs measures the host as much as the engine.
 *
 * So the backend's gemm slot is tapped for one step (ds_backend_tap_gemm)
 * and every call's arguments are kept (transposes, shape, leading dimensions, strides, alpha,
 * beta, batch); after each timed step the same calls run again on scratch
 * operands of the same extents, once through cblas_sgemm (OpenBLAS, one
 * call per matrix of a batch: the goal's yardstick) and once through the
 * backend's slot (what the models call, with the backend's own small-GEMM
 * kernel where it has one). Same process, same threads, a second apart:
 * the replays' time over the step's is a ratio from one phase of the host,
 * one per timed step.
 *
 * The replays read operands no other kernel has just written, as
 * bench_kernels' do: it is the rate of the GEMMs in isolation, which is what
 * the goal compares the step with. Their A and B hold 0.125: a call adds at
 * most 0.125^2 * k to an element of C, so C stays finite and far from
 * subnormal whatever beta, and no value slows an FMA down.
 *
 * The cpu backend only (the operands are host memory). */
#ifndef DS_BENCH_GEMM_REPLAY_H
#define DS_BENCH_GEMM_REPLAY_H

#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench/bench_util.h"
#include "engine/backend/backend.h"

typedef struct gemm_replay {
    ds_backend *be;
    ds_gemm_call *calls;
    int n, cap;
    bool oom;
    float *A, *B, *C; /* scratch operands of the largest extents recorded */
    double flops;     /* 2 m n k per matrix, summed over the recorded calls */
} gemm_replay;

/* Elements a stored row-major matrix of rows x cols spans with leading
 * dimension ld, over a batch of matrices stride apart. */
static inline size_t gr_extent(int rows, int cols, int ld, int64_t stride, int batch) {
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

static void gr_tap(void *ctx, const ds_gemm_call *call) {
    gemm_replay *r = ctx;
    if (r->n == r->cap && !r->oom) {
        int cap = r->cap ? 2 * r->cap : 256;
        ds_gemm_call *c = realloc(r->calls, (size_t)cap * sizeof *c);
        if (c) r->calls = c, r->cap = cap;
        else r->oom = true;
    }
    /* a call that computes nothing (batch, m or n 0) has nothing to replay */
    if (r->n < r->cap && call->batch > 0 && call->m > 0 && call->n > 0) r->calls[r->n++] = *call;
}

/* From here to gr_record_end, every GEMM of be is recorded. */
static inline ds_status gr_record_begin(gemm_replay *r, ds_backend *be) {
    *r = (gemm_replay){.be = be};
    return ds_backend_tap_gemm(be, gr_tap, r);
}

/* Removes the tap and makes the scratch operands. false when memory ran
 * out (nothing is left allocated then). */
static inline bool gr_record_end(gemm_replay *r) {
    ds_backend_untap_gemm(r->be);
    size_t nA = 1, nB = 1, nC = 1;
    r->flops = 0;
    for (int i = 0; i < r->n; i++) {
        const ds_gemm_call *c = &r->calls[i];
        size_t a = gr_extent(c->transa ? c->k : c->m, c->transa ? c->m : c->k, c->lda,
                             c->strideA, c->batch);
        size_t b = gr_extent(c->transb ? c->n : c->k, c->transb ? c->k : c->n, c->ldb,
                             c->strideB, c->batch);
        size_t d = gr_extent(c->m, c->n, c->ldc, c->strideC, c->batch);
        nA = a > nA ? a : nA, nB = b > nB ? b : nB, nC = d > nC ? d : nC;
        r->flops += 2.0 * c->m * c->n * c->k * c->batch;
    }
    r->A = malloc(nA * sizeof *r->A), r->B = malloc(nB * sizeof *r->B);
    r->C = calloc(nC, sizeof *r->C);
    if (r->oom || !r->A || !r->B || !r->C) {
        free(r->calls), free(r->A), free(r->B), free(r->C);
        *r = (gemm_replay){0};
        return false;
    }
    for (size_t i = 0; i < nA; i++) r->A[i] = 0.125f;
    for (size_t i = 0; i < nB; i++) r->B[i] = 0.125f;
    return true;
}

/* Recorded call c once through the backend's slot, on the scratch operands. */
static inline ds_status gr_slot(const gemm_replay *r, const ds_gemm_call *c) {
    return r->be->ops->gemm(r->be, c->transa, c->transb, c->m, c->n, c->k, c->alpha, r->A,
                            c->lda, c->strideA, r->B, c->ldb, c->strideB, c->beta, r->C, c->ldc,
                            c->strideC, c->batch);
}

/* *secs: the time to run every recorded call once, through cblas_sgemm
 * (blas) or the backend's slot; the slot's status when it refused a call. */
static inline ds_status gr_run(const gemm_replay *r, bool blas, double *secs) {
    double t0 = now_s();
    for (int i = 0; i < r->n; i++) {
        const ds_gemm_call *c = &r->calls[i];
        if (blas) {
            for (int q = 0; q < c->batch; q++)
                cblas_sgemm(CblasRowMajor, c->transa ? CblasTrans : CblasNoTrans,
                            c->transb ? CblasTrans : CblasNoTrans, c->m, c->n, c->k, c->alpha,
                            r->A + q * c->strideA, c->lda, r->B + q * c->strideB, c->ldb,
                            c->beta, r->C + q * c->strideC, c->ldc);
        } else {
            DS_TRY(gr_slot(r, c));
        }
    }
    *secs = now_s() - t0;
    return DS_OK;
}

/* The recorded calls grouped by shape (transposes, m, n, k, batch), each
 * group run `reps` times through the backend's slot; one line per shape,
 * the longest first: calls per step, GFLOP, seconds per step, GFLOP/s and
 * the share of the GEMMs' time. Which products lose the rate, not only how
 * much is lost. */
static inline ds_status gr_by_shape(const gemm_replay *r, int reps) {
    typedef struct {
        int first, calls;
        double flops, secs, best; /* best: the fastest single call */
    } group;
    group *g = calloc((size_t)r->n + 1, sizeof *g);
    int *of = malloc(((size_t)r->n + 1) * sizeof *of);
    if (!g || !of) return free(g), free(of), DS_ERR(DS_ERR_OOM, "gemm replay: out of memory");
    int ng = 0;
    for (int i = 0; i < r->n; i++) {
        const ds_gemm_call *c = &r->calls[i];
        int j = 0;
        for (; j < ng; j++) {
            const ds_gemm_call *f = &r->calls[g[j].first];
            if (f->transa == c->transa && f->transb == c->transb && f->m == c->m &&
                f->n == c->n && f->k == c->k && f->batch == c->batch)
                break;
        }
        if (j == ng) g[ng++] = (group){.first = i};
        g[j].calls++, g[j].flops += 2.0 * c->m * c->n * c->k * c->batch, of[i] = j;
    }
    double total = 0;
    for (int j = 0; j < ng; j++) {
        const double t0 = now_s();
        g[j].best = 1e30;
        for (int q = 0; q < reps; q++)
            for (int i = 0; i < r->n; i++) {
                if (of[i] != j) continue;
                const double tc = now_s();
                ds_status st = gr_slot(r, &r->calls[i]);
                if (st != DS_OK) return free(g), free(of), st;
                const double dt = now_s() - tc;
                if (dt < g[j].best) g[j].best = dt;
            }
        g[j].secs = (now_s() - t0) / reps, total += g[j].secs;
    }
    for (int done = 0; done < ng; done++) {
        int b = -1;
        for (int j = 0; j < ng; j++)
            if (g[j].calls && (b < 0 || g[j].secs > g[b].secs)) b = j;
        const ds_gemm_call *f = &r->calls[g[b].first];
        printf("bench_train: gemm replay by shape: %c%c m %5d n %5d k %5d batch %3d: %4d calls, "
               "%6.2f GFLOP, %.4f s, %6.1f GFLOP/s (fastest call %6.1f), %4.1f%% of the GEMMs' "
               "time\n",
               f->transa ? 'T' : 'N', f->transb ? 'T' : 'N', f->m, f->n, f->k, f->batch,
               g[b].calls, g[b].flops / 1e9, g[b].secs, g[b].flops / g[b].secs / 1e9,
               2.0 * f->m * f->n * f->k * f->batch / g[b].best / 1e9, 100.0 * g[b].secs / total);
        g[b].calls = 0;
    }
    free(g), free(of);
    return DS_OK;
}

static inline void gr_free(gemm_replay *r) {
    free(r->calls), free(r->A), free(r->B), free(r->C);
    *r = (gemm_replay){0};
}

#endif /* DS_BENCH_GEMM_REPLAY_H */
