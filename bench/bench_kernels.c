/* Every model kernel of the cpu backend, and the engine's optimizer and cast
 * loops, at the shapes of BERT-mini and GPT-2 small, against the memory
 * bandwidth this machine sustains in the same run, and the GEMMs of both
 * models against OpenBLAS sgemm called directly (issue 17, item 1).
 *
 *   bench_kernels [--threads N] [--model bert|gpt2|both] [--secs S]
 *                 [--clock wall|cpu] [--gemm-inputs fp32|bf16] [--gemms-only 0|1]
 *                 [--gemm-cold 0|1]
 *
 *   --threads  the backend's thread count (default: OMP_NUM_THREADS or 2)
 *   --secs     minimum time per case (default 0.25 s)
 *   --clock    wall (default) or cpu: time by the process's CPU time over the
 *              thread count, for a machine shared with other busy processes
 *              (run with OMP_WAIT_POLICY=passive; see now_s)
 *   DS_CPU_ISA=avx2|avx512|scalar in the environment picks the kernels'
 *   instruction-set variant (engine/backend/cpu/cpu_isa.h); the header line
 *   names the one used.
 *
 * Roofline. A STREAM-like triad a[i] = b[i] + s c[i] at 1 and 2 threads, on
 * arrays the size of the kernels' operands (3 x 16 MiB: what one BERT-mini
 * or GPT-2 activation is; on a CPU with a large last-level cache this is the
 * cache's bandwidth, which is what the kernels see in the step too) and on
 * arrays well past the last-level cache (3 x 256 MiB: DRAM). Bytes counted
 * the STREAM way (what the loop reads and writes, no write-allocate). Each
 * kernel's "of triad" is its GB/s over the operand-sized triad at the same
 * thread count; the triad is measured again at the end so drift from the
 * other tenants of a shared machine shows.
 *
 * Kernel bytes are the compulsory traffic of one call: every operand read
 * once and every result written once (a kernel that reads an input twice
 * gets no credit for it), so "of triad" is how far the kernel is from being
 * limited by memory alone. Elements/s counts the output elements (for a
 * reduction such as a bias gradient, the input elements). Times are the best
 * of repeated calls (other processes only slow a call down), after one
 * warm-up call.
 *
 * GEMMs: the backend's gemm slot (what the models call) against cblas_sgemm
 * called directly at the same shape and thread count, the two in
 * alternation (best of each); batched attention products against OpenBLAS
 * looping over the batch. The slot runs products of at most 16 MFLOP with
 * alpha 1, beta 0 and n % 16 == 0 (the attention products here) in the
 * variant's own kernel (cpu_gemm_small.c), the rest in OpenBLAS.
 *
 * --gemm-inputs bf16: the slot with bf16 inputs (be->gemm_inputs), against
 * the same fp32 sgemm: the rounding path, or on a CPU with AVX512-BF16 its
 * dot-product instruction (cpu_gemm_dot.c; DS_CPU_BF16_DOT=0 in the
 * environment picks the rounding path there too). --gemm-cold 1: a buffer
 * twice the L3 (at least 64 MiB) is read before each timed call, so that
 * the operands come from memory as in a step. --gemms-only 1: the GEMM
 * table alone. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "models/modules.h"

static double g_secs = 0.25;
static bool g_gemms_only; /* --gemms-only 1: the GEMM table alone */
static bool g_gemm_cold;  /* --gemm-cold 1: operands out of the caches before each call */
static int g_nt_clock = 0; /* > 0: --clock cpu, the thread count to divide by */

/* Wall-clock seconds, or with --clock cpu the process's CPU seconds divided
 * by the thread count: on a machine shared with other busy processes a call
 * is descheduled for longer than it runs, and the CPU time is what it costs
 * on an idle machine when the threads are balanced (which a parallel loop
 * with static schedule is). It needs OMP_WAIT_POLICY=passive, or the threads
 * waiting at a barrier count their spinning. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_nt_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return g_nt_clock ? t / g_nt_clock : t;
}

/* ---- roofline: triad ---- */

/* GB/s of the best of `passes` passes of a = b + s c over n floats on nt
 * threads (the best, since other processes only slow a pass down). */
static double triad_gbs(float *a, const float *b, const float *c, size_t n, int nt, int passes) {
    double best = 1e30;
    int saved = g_nt_clock;
    if (g_nt_clock) g_nt_clock = nt;
    for (int rep = 0; rep < passes; rep++) {
        double t0 = now_s();
#pragma omp parallel for schedule(static) num_threads(nt)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    g_nt_clock = saved;
    return 3.0 * (double)n * sizeof(float) / best / 1e9;
}

typedef struct roof {
    double cache[3], dram[3]; /* [threads], threads 1 and 2 */
} roof;

static int measure_roof(roof *r, bool with_dram) {
    size_t n_small = (size_t)4 << 20, n_big = with_dram ? (size_t)64 << 20 : 0;
    size_t n = n_small > n_big ? n_small : n_big;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)),
          *c = malloc(n * sizeof(float));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        fprintf(stderr, "bench_kernels: out of memory for the triad arrays\n");
        return -1;
    }
    for (size_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = 1.0f, c[i] = 0.5f;
    for (int t = 1; t <= 2; t++) {
        r->cache[t] = triad_gbs(a, b, c, n_small, t, 100);
        r->dram[t] = with_dram ? triad_gbs(a, b, c, n_big, t, 10) : 0.0;
    }
    free(a), free(b), free(c);
    return 0;
}

/* ---- the cases ---- */

typedef struct model {
    const char *name;
    int B, T, H, nh, Ff, V, C, R; /* R: rows of the cross-entropy / LM-head case */
    bool causal;
    ds_act act;
    size_t n_opt; /* optimizer / cast elements */
} model;

/* GPT-2 small at bench_lm's default batch 8 x 256; the LM head and its
 * cross-entropy on one sequence of 256 rows (the full 2048 x 50257 logits
 * are 412 MB per buffer); the optimizer loops at a 1/8 shard of its 124.4 M
 * parameters (ZeRO-1 at 8 ranks). BERT-mini as bench_train: the optimizer
 * over all 8.77 M parameters, the classifier's cross-entropy over 32 rows of
 * 6 classes. */
static const model k_models[] = {
    {"BERT-mini", 32, 128, 256, 4, 1024, 21128, 6, 32, false, DS_ACT_GELU, 8767238},
    {"GPT-2 small", 8, 256, 768, 12, 3072, 50257, 50257, 256, true, DS_ACT_GELU_TANH,
     124439808 / 8},
};

typedef struct bufs {
    float *x, *y, *z, *w, *dy; /* big activations: max(N*Ff, B*nh*T*T, R*C, V*H) */
    float *p1, *p2;            /* parameters (read only): max(T*H, Ff) */
    float *g1, *g2;            /* their gradients (accumulated into, never read as inputs:
                                * grown values would change what the GELU costs) */
    float *table;              /* embedding table V x H */
    float *stats1, *stats2;    /* mean, rstd [N] */
    float *mask;               /* [B, T] */
    int32_t *ids, *labels;
    float *scalars;            /* loss, wsum */
    float *om, *ov, *og, *op;  /* optimizer: m, v, grad, param */
    uint16_t *half;
    uint32_t *keep;            /* a dropout keep mask (nn.h) of the largest dropout */
} bufs;

typedef struct bench {
    ds_backend *be;
    int nt;
    const roof *rf;
    int failed;
} bench;

typedef ds_status (*case_fn)(ds_backend *be, const model *m, bufs *b, int variant);

/* Runs fn until g_secs have passed (at least 3 calls, after a warm-up);
 * returns the best seconds per call, or -1 on an error (printed). */
static double time_case(bench *bk, case_fn fn, const model *m, bufs *b, int variant) {
    ds_status st = fn(bk->be, m, b, variant);
    if (st != DS_OK) {
        fprintf(stderr, "bench_kernels: %s\n", ds_last_error());
        bk->failed = 1;
        return -1.0;
    }
    double best = 1e30, t_start = now_s();
    for (int it = 0; it < 3 || now_s() - t_start < g_secs; it++) {
        double t0 = now_s();
        (void)fn(bk->be, m, b, variant);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        if (it > 10000) break;
    }
    return best;
}

static void row(bench *bk, const char *name, const char *shape, double bytes, double elems,
                case_fn fn, const model *m, bufs *b, int variant) {
    double t = time_case(bk, fn, m, b, variant);
    if (t < 0) return;
    double gbs = bytes / t / 1e9;
    int rt = bk->nt < 2 ? 1 : 2;
    printf("| %s | %s | %.1f | %.1f | %.1f | %.0f%% | %.2f |\n", name, shape, bytes / 1e6,
           t * 1e6, gbs, 100.0 * gbs / bk->rf->cache[rt], elems / t / 1e9);
}

#define N_TOK(m) ((int64_t)(m)->B * (m)->T)
#define N_ATT(m) ((int64_t)(m)->B * (m)->nh * (m)->T * (m)->T)

static ds_status k_embed_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->embedding_fwd(be, b->y, b->table, b->ids, (int)N_TOK(m), m->H, m->V, false);
}
static ds_status k_embed_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->embedding_bwd(be, b->table, b->dy, b->ids, (int)N_TOK(m), m->H, -1);
}
static ds_status k_bcast_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v; /* position embeddings: [T*H] added to each of B sequences */
    return be->nn->bcast_add_fwd(be, b->y, b->p1, m->B, m->T * m->H, true);
}
static ds_status k_bcast_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->bcast_add_bwd(be, b->g1, b->dy, m->B, m->T * m->H);
}
static ds_status k_ln_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->layernorm_fwd(be, b->y, b->stats1, b->stats2, b->x, b->p1, b->p2,
                                 (int)N_TOK(m), m->H, 1e-12f);
}
static ds_status k_ln_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->layernorm_bwd(be, b->z, b->g1, b->g2, b->dy, b->x, b->stats1,
                                 b->stats2, b->p1, (int)N_TOK(m), m->H, false);
}
/* variant: 0 the model's activation over [N, Ff]; 1 bias only over [N, H] */
static ds_status k_act_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    int w = v ? m->H : m->Ff;
    return be->nn->bias_act_fwd(be, b->y, b->x, b->p1, (int)N_TOK(m), w, v ? DS_ACT_NONE : m->act);
}
static ds_status k_act_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->bias_act_bwd(be, b->z, b->g2, b->dy, b->x, b->p1, (int)N_TOK(m), m->Ff, m->act);
}
/* variant: 0 p = 0.1 (bias + residual), 1 p = 0 (no random numbers), 2 p =
 * 0.1 writing the keep mask */
static ds_status k_drop_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    return be->nn->dropout_fwd(be, b->y, b->x, b->p1, b->z, (int)N_TOK(m), m->H,
                               v == 1 ? 0.0f : 0.1f, 1234, 0, v == 2 ? b->keep : NULL);
}
/* variant: 0 the mask regenerated, 1 read from the keep mask (variant 1 of
 * each backward runs after variant 2 / 1 of its forward wrote the mask) */
static ds_status k_drop_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    return be->nn->dropout_bwd(be, b->y, b->g2, b->dy, (int)N_TOK(m), m->H, 0.1f, 1234, 0,
                               v ? b->keep : NULL);
}
/* variant: 0 dropout 0.1, 1 the same writing the keep mask, 2 p = 0 (the
 * softmax alone, pd its copy: the difference to 0 is the dropout's cost) */
static ds_status k_smax_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    return be->nn->attn_softmax_fwd(be, b->y, b->z, b->x, m->causal ? NULL : b->mask, m->causal,
                                    m->B, m->nh, m->T, m->T, 0.125f, v == 2 ? 0.0f : 0.1f, 1234,
                                    0, v == 1 ? b->keep : NULL);
}
static ds_status k_smax_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    return be->nn->attn_softmax_bwd(be, b->w, b->z, b->dy, b->y, m->B, m->nh, m->T, m->T, 0.125f,
                                    0.1f, 1234, 0, v ? b->keep : NULL);
}
static ds_status k_xent_fwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->xent_fwd(be, b->scalars, b->scalars + 1, b->y, b->stats1, b->x, b->labels,
                            NULL, m->R, m->C, -100);
}
static ds_status k_xent_bwd(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->nn->xent_bwd(be, b->z, b->y, b->scalars + 1, b->labels, NULL, m->R, m->C, -100,
                            1.0f);
}
/* variant: 0 fp32 gradients, no working copy; 1 mixed precision's: bf16
 * gradients (b->half) and the bf16 working copy written (into b->og's
 * bytes, which hold n halves twice over) */
static ds_status k_adam(ds_backend *be, const model *m, bufs *b, int v) {
    ds_adam_hparams hp = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .weight_decay = 0.01f, .step = 10, .adam_w_mode = true,
                          .bias_correction = true};
    if (v == 1)
        return be->ops->adam(be, b->op, b->half, DS_BF16, 1.0f, b->om, b->ov, m->n_opt, &hp,
                             b->og, DS_BF16);
    return be->ops->adam(be, b->op, b->og, DS_F32, 1.0f, b->om, b->ov, m->n_opt, &hp, NULL,
                         DS_F32);
}
/* variant: 0 f32 -> bf16, 1 bf16 -> f32, 2 f32 -> f16, 3 f16 -> f32 */
static ds_status k_cast(ds_backend *be, const model *m, bufs *b, int v) {
    ds_dtype lp = v < 2 ? DS_BF16 : DS_F16;
    if (v % 2 == 0) return be->ops->cast(be, b->half, lp, b->og, DS_F32, m->n_opt);
    return be->ops->cast(be, b->og, DS_F32, b->half, lp, m->n_opt);
}
/* variant: 0 fp32; 1 bf16 y (b->half) += fp32 x, a replica's gradient
 * accumulation under bf16 */
static ds_status k_axpy(ds_backend *be, const model *m, bufs *b, int v) {
    if (v == 1) return be->ops->axpy(be, b->half, DS_BF16, 0.5f, b->om, DS_F32, m->n_opt);
    return be->ops->axpy(be, b->og, DS_F32, 0.5f, b->om, DS_F32, m->n_opt);
}
static ds_status k_scale(ds_backend *be, const model *m, bufs *b, int v) {
    (void)v;
    return be->ops->scale(be, b->og, DS_F32, m->n_opt, 1.0f);
}
/* variant: 0 fp32; 1 bf16 (b->half: mixed precision's gradient norm) */
static ds_status k_sumsq(ds_backend *be, const model *m, bufs *b, int v) {
    double s;
    int nf;
    if (v == 1) return be->ops->sumsq(be, b->half, DS_BF16, m->n_opt, &s, &nf);
    return be->ops->sumsq(be, b->og, DS_F32, m->n_opt, &s, &nf);
}

/* ---- GEMMs ---- */

typedef struct gshape {
    const char *name;
    int m, n, k, batch;
    bool ta, tb;
} gshape;

/* One call of the product: through the backend's gemm slot, or cblas_sgemm
 * directly (one call per product of a batch). */
static bool gemm_once(bench *bk, const gshape *g, float *A, float *B, float *C, bool direct) {
    int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n, ldc = g->n;
    int64_t sA = (int64_t)g->m * g->k, sB = (int64_t)g->k * g->n, sC = (int64_t)g->m * g->n;
    if (direct) {
        for (int q = 0; q < g->batch; q++)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, A + q * sA,
                        lda, B + q * sB, ldb, 0.0f, C + q * sC, ldc);
        return true;
    }
    if (bk->be->ops->gemm(bk->be, g->ta, g->tb, g->m, g->n, g->k, 1.0f, A, lda, sA, B, ldb, sB,
                          0.0f, C, ldc, sC, g->batch) != DS_OK) {
        fprintf(stderr, "bench_kernels: %s\n", ds_last_error());
        bk->failed = 1;
        return false;
    }
    return true;
}

/* The L3 cache's size in bytes as the kernel reports it (sysfs; glibc's
 * sysconf(_SC_LEVEL3_CACHE_SIZE) said 320 MiB on the Zen 4 VM whose L3 is
 * 32 MiB), 0 when it says nothing. */
static size_t l3_bytes(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    size_t v = 0;
    char unit = 0;
    if (f) {
        if (fscanf(f, "%zu%c", &v, &unit) < 1) v = 0;
        fclose(f);
    }
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
}

/* Read a buffer twice the size of the L3 (at least 64 MiB), so that a
 * product's operands come from memory, as in a training step, where each
 * GEMM reads what the passes before it wrote long ago: --gemm-cold 1. Not
 * timed. */
static volatile unsigned char g_flush_sink;
static void flush_caches(void) {
    static unsigned char *buf;
    static size_t bytes;
    if (!buf) {
        size_t l3 = l3_bytes();
        bytes = l3 > (size_t)32 << 20 ? 2 * l3 : (size_t)64 << 20;
        buf = malloc(bytes);
        if (!buf) return; /* then the products run warm, as without the option */
        memset(buf, 1, bytes);
    }
    unsigned char acc = 0;
    for (size_t i = 0; i < bytes; i += 64) acc ^= buf[i];
    g_flush_sink = acc;
}

/* The best time of each way, calls alternating (backend, OpenBLAS, backend,
 * ...) so that both see the same phases of a host whose speed drifts over
 * seconds; the first call of each warms up. */
static bool gemm_times(bench *bk, const gshape *g, float *A, float *B, float *C, double *t_be,
                       double *t_blas) {
    double best[2] = {1e30, 1e30}, t_start = now_s();
    for (int it = 0; it < 4 || now_s() - t_start < 2 * g_secs; it++) {
        for (int way = 0; way < 2; way++) {
            if (g_gemm_cold) flush_caches();
            double t0 = now_s();
            if (!gemm_once(bk, g, A, B, C, way == 1)) return false;
            double dt = now_s() - t0;
            if (it > 0 && dt < best[way]) best[way] = dt;
        }
        if (it > 10000) break;
    }
    *t_be = best[0], *t_blas = best[1];
    return true;
}

static void run_gemms(bench *bk, const model *md, bufs *b) {
    int N = (int)N_TOK(md), H = md->H, Ff = md->Ff, dh = md->H / md->nh, T = md->T;
    int BH = md->B * md->nh;
    gshape gs[] = {
        {"proj (q, k, v, out)", N, H, H, 1, false, true},
        {"ffn up", N, Ff, H, 1, false, true},
        {"ffn down", N, H, Ff, 1, false, true},
        {"dW = X^T dY (proj)", H, H, N, 1, true, false},
        {"dW = X^T dY (ffn)", Ff, H, N, 1, true, false},
        /* the input gradients: the forwards' shapes, B not transposed */
        {"dX = dY W (proj)", N, H, H, 1, false, false},
        {"dX = dY W (ffn up)", N, H, Ff, 1, false, false},
        {"dX = dY W (ffn down)", N, Ff, H, 1, false, false},
        {"attn scores Q K^T", T, T, dh, BH, false, true},
        {"attn context P V", T, dh, T, BH, false, false},
        /* backward: dV = P^T dC and dK = dS^T Q (dP = dC V^T is the scores'
         * shape, dQ = dS K the context's) */
        {"attn dV = P^T dC", T, dh, T, BH, true, false},
        /* Q, K and V in one GEMM: GPT-2's c_attn; for BERT, what its three
         * projections (and their weight gradients) would cost as one, which
         * packs x once instead of three times (RESULTS: no faster here) */
        {"proj q|k|v in one", N, 3 * H, H, 1, false, true},
        {"dW = X^T dY (q|k|v in one)", 3 * H, H, N, 1, true, false},
        {"LM head (one sequence)", md->R, md->V, H, 1, false, true},
    };
    int ng = md->C > 100 ? 14 : 13; /* the classifier has no LM head */
    printf("\n%s GEMMs, %d threads (OpenBLAS %s):\n\n", md->name, bk->nt,
           openblas_get_config());
    printf("| GEMM | m x n x k (batch) | backend GFLOP/s | OpenBLAS sgemm GFLOP/s | ratio |\n");
    printf("| --- | --- | ---: | ---: | ---: |\n");
    openblas_set_num_threads(bk->nt);
    for (int i = 0; i < ng; i++) {
        const gshape *g = &gs[i];
        double flops = 2.0 * g->m * g->n * g->k * g->batch;
        double tb, td;
        if (!gemm_times(bk, g, b->x, b->y, b->z, &tb, &td)) return;
        printf("| %s | %d x %d x %d (%d) | %.1f | %.1f | %.2f |\n", g->name, g->m, g->n, g->k,
               g->batch, flops / tb / 1e9, flops / td / 1e9, td / tb);
    }
}

/* y = x W^T + b at the projections' shapes: BERT's q, k and v of a layer
 * (three outputs, as the encoder writes them: one output written again and
 * again would stay in the cache, which the step's do not), GPT-2's c_attn
 * (H -> 3H, one output). Variant 0: the GEMM (beta 0), then a pass adding
 * the bias, as the models did before; 1: ds_linear_bias_fwd, the backend's
 * gemm_bias slot (models/modules.h: on OpenBLAS the bias rows first and the
 * GEMM adding to them; the bf16 dot product starts its sums from the
 * bias). x: b->x, W: b->y,
 * outputs b->z, b->w, b->dy (the last case to read dy runs before). */
static ds_status k_lin_bias(ds_backend *be, const model *m, bufs *b, int v) {
    int N = (int)N_TOK(m), in = m->H, out = m->causal ? 3 * m->H : m->H;
    float *ys[3] = {b->z, b->w, b->dy};
    for (int q = 0; q < (m->causal ? 1 : 3); q++) {
        if (v == 1) {
            DS_TRY(ds_linear_bias_fwd(be, ys[q], b->x, in, b->y, b->p1, N, in, out));
            continue;
        }
        DS_TRY(ds_linear_fwd(be, ys[q], b->x, in, b->y, N, in, out, 0.0f));
        DS_TRY(be->nn->bias_act_fwd(be, ys[q], ys[q], b->p1, N, out, DS_ACT_NONE));
    }
    return DS_OK;
}

/* How many of the elements k_lin_bias's two ways write differ in their bits
 * (its first output; models/modules.h: none while the GEMM sums k in one
 * block), or -1 on an error (printed). */
static int64_t lin_bias_bits(bench *bk, const model *m, bufs *b) {
    size_t n = (size_t)N_TOK(m) * (m->causal ? 3 * m->H : m->H);
    float *y0 = malloc(n * sizeof *y0);
    int64_t diff = -1;
    if (!y0) {
        fprintf(stderr, "bench_kernels: out of memory\n");
    } else if (k_lin_bias(bk->be, m, b, 0) == DS_OK) {
        memcpy(y0, b->z, n * sizeof *y0);
        if (k_lin_bias(bk->be, m, b, 1) == DS_OK) {
            diff = 0;
            for (size_t i = 0; i < n; i++) diff += memcmp(&y0[i], &b->z[i], sizeof *y0) != 0;
        }
    }
    if (y0 && diff < 0) fprintf(stderr, "bench_kernels: %s\n", ds_last_error());
    if (diff < 0) bk->failed = 1;
    free(y0);
    return diff;
}

/* A residual branch into the next layer norm (nn.h, dropout_ln_fwd): variant
 * 0 dropout_fwd (p = 0.1, bias, residual, keep mask) then layernorm_fwd, as
 * the models did before; 1 the one-pass slot. x: b->x (the GEMM output),
 * res: b->w, y: b->y, z: b->z. */
static ds_status k_drop_ln(ds_backend *be, const model *m, bufs *b, int v) {
    int N = (int)N_TOK(m), H = m->H;
    if (v == 1)
        return be->nn->dropout_ln_fwd(be, b->y, b->z, b->stats1, b->stats2, b->x, b->p1, b->w,
                                      b->p2, b->p1, N, H, 0.1f, 7, 0, b->keep, 1e-12f);
    DS_TRY(be->nn->dropout_fwd(be, b->y, b->x, b->p1, b->w, N, H, 0.1f, 7, 0, b->keep));
    return be->nn->layernorm_fwd(be, b->z, b->stats1, b->stats2, b->y, b->p2, b->p1, N, H,
                                 1e-12f);
}

/* The two ways of a case_fn with variants 0 and 1 in turn, 4 rounds, each
 * way's best, as one table row. */
static void run_pair(bench *bk, const model *md, bufs *b, case_fn fn, const char *title,
                     const char *way0, const char *way1) {
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 4; round++)
        for (int v = 0; v < 2; v++) {
            double t = time_case(bk, fn, md, b, v);
            if (t < 0) return;
            if (t < best[v]) best[v] = t;
        }
    printf("\n%s %s, %d threads:\n\n", md->name, title, bk->nt);
    printf("| %s, ms | %s, ms | ratio |\n| ---: | ---: | ---: |\n", way0, way1);
    printf("| %.3f | %.3f | %.3f |\n", best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
}

/* ---- per model ---- */

static void fill_uniform(ds_backend *be, float *x, size_t n, uint64_t seed) {
    (void)be->ops->rng_uniform(be, x, n, -1.0f, 1.0f, seed, 0);
}

static int run_model(bench *bk, const model *md) {
    ds_backend *be = bk->be;
    int64_t N = N_TOK(md);
    size_t big = (size_t)N * md->Ff;
    if ((size_t)N_ATT(md) > big) big = (size_t)N_ATT(md);
    if ((size_t)md->R * md->C > big) big = (size_t)md->R * md->C;
    /* the GEMM operands: an LM head's weight is V x H */
    if ((size_t)md->V * md->H > big) big = (size_t)md->V * md->H;
    size_t par = (size_t)md->T * md->H;
    if ((size_t)md->Ff > par) par = (size_t)md->Ff;
    bufs b = {0};
    float **big_bufs[] = {&b.x, &b.y, &b.z, &b.w, &b.dy};
    for (int i = 0; i < 5; i++)
        if (ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, big * 4, (void **)big_bufs[i]))
            goto oom;
    if (ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, par * 4, (void **)&b.p1) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, par * 4, (void **)&b.p2) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, par * 4, (void **)&b.g1) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, par * 4, (void **)&b.g2) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)md->V * md->H * 4,
                         (void **)&b.table) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)N * 4, (void **)&b.stats1) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)N * 4, (void **)&b.stats2) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)N * 4, (void **)&b.mask) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)N * 4, (void **)&b.ids) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, (size_t)N * 4, (void **)&b.labels) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, 64, (void **)&b.scalars) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, md->n_opt * 4, (void **)&b.om) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, md->n_opt * 4, (void **)&b.ov) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, md->n_opt * 4, (void **)&b.og) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, md->n_opt * 4, (void **)&b.op) ||
        ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, md->n_opt * 2, (void **)&b.half))
        goto oom;
    size_t kb = ds_dropout_mask_bytes((int64_t)md->B * md->nh * md->T, md->T);
    if (ds_dropout_mask_bytes(N, md->H) > kb) kb = ds_dropout_mask_bytes(N, md->H);
    if (ds_backend_alloc(be, DS_MEM_OTHER, DS_PLACE_DEVICE, kb, (void **)&b.keep)) goto oom;
    fill_uniform(be, b.x, big, 1);
    fill_uniform(be, b.y, big, 2);
    fill_uniform(be, b.z, big, 3);
    fill_uniform(be, b.dy, big, 4);
    fill_uniform(be, b.p1, par, 5);
    fill_uniform(be, b.p2, par, 6);
    fill_uniform(be, b.table, (size_t)md->V * md->H, 7);
    fill_uniform(be, b.og, md->n_opt, 8);
    fill_uniform(be, b.op, md->n_opt, 9);
    fill_uniform(be, b.om, md->n_opt, 10);
    (void)be->ops->rng_uniform(be, b.ov, md->n_opt, 0.0f, 1.0f, 11, 0); /* v >= 0 */
    /* every position attends (no padding), as bench_train's batches */
    for (int64_t i = 0; i < N; i++) {
        b.mask[i] = 1.0f;
        b.ids[i] = (int32_t)((i * 7919) % md->V);
        b.labels[i] = (int32_t)((i * 104729) % md->C);
    }
    /* attention probabilities as the forward makes them, for the backward case */
    if (k_smax_fwd(be, md, &b, 0) != DS_OK) goto fail;

    int H = md->H, Ff = md->Ff, T = md->T;
    double f = sizeof(float), NH = (double)N * H, NI = (double)N * Ff, NA = (double)N_ATT(md);
    double RC = (double)md->R * md->C, n = (double)md->n_opt;
    char s_nh[64], s_ni[64], s_att[64], s_rc[64], s_opt[64], s_pos[64];
    snprintf(s_nh, sizeof s_nh, "%lld x %d", (long long)N, H);
    snprintf(s_ni, sizeof s_ni, "%lld x %d", (long long)N, Ff);
    snprintf(s_att, sizeof s_att, "%d x %d x %d x %d", md->B, md->nh, T, T);
    snprintf(s_rc, sizeof s_rc, "%d x %d", md->R, md->C);
    snprintf(s_opt, sizeof s_opt, "%zu", md->n_opt);
    snprintf(s_pos, sizeof s_pos, "%d x %d", md->B, T * H);
    const char *act = md->act == DS_ACT_GELU ? "GELU (erf)" : "GELU (tanh)";
    char nm_af[64], nm_ab[64];
    snprintf(nm_af, sizeof nm_af, "bias + %s fwd", act);
    snprintf(nm_ab, sizeof nm_ab, "bias + %s bwd (+ dbias)", act);

    printf("\n%s kernels, %d threads (%s):\n\n", md->name, bk->nt, be->ops->name);
    printf("| kernel | shape | MB/call | us/call | GB/s | of triad | Gelem/s |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    if (g_gemms_only) {
        run_gemms(bk, md, &b);
        goto done;
    }
    row(bk, "embedding fwd", s_nh, f * (2 * NH + N), NH, k_embed_fwd, md, &b, 0);
    row(bk, "embedding bwd (scatter-add)", s_nh, f * (3 * NH + N), NH, k_embed_bwd, md, &b, 0);
    row(bk, "position add fwd", s_pos, f * (2 * NH + T * H), NH, k_bcast_fwd, md, &b, 0);
    row(bk, "position add bwd (column sums)", s_pos, f * (NH + 2.0 * T * H), NH, k_bcast_bwd,
        md, &b, 0);
    row(bk, "layer norm fwd", s_nh, f * (2 * NH + 2.0 * N), NH, k_ln_fwd, md, &b, 0);
    row(bk, "layer norm bwd", s_nh, f * (3 * NH + 2.0 * N), NH, k_ln_bwd, md, &b, 0);
    row(bk, nm_af, s_ni, f * 2 * NI, NI, k_act_fwd, md, &b, 0);
    row(bk, nm_ab, s_ni, f * 3 * NI, NI, k_act_bwd, md, &b, 0);
    row(bk, "bias fwd (no activation)", s_nh, f * 2 * NH, NH, k_act_fwd, md, &b, 1);
    row(bk, "dropout fwd p=0.1 (+ bias, residual)", s_nh, f * 3 * NH, NH, k_drop_fwd, md, &b, 0);
    row(bk, "dropout fwd p=0 (+ bias, residual)", s_nh, f * 3 * NH, NH, k_drop_fwd, md, &b, 1);
    row(bk, "dropout bwd p=0.1 (+ dbias)", s_nh, f * 2 * NH, NH, k_drop_bwd, md, &b, 0);
    /* with the keep mask in bits (1/32 of the elements' bytes, not counted) */
    row(bk, "dropout fwd p=0.1, keep mask written", s_nh, f * 3 * NH, NH, k_drop_fwd, md, &b, 2);
    row(bk, "dropout bwd p=0.1 from the keep mask", s_nh, f * 2 * NH, NH, k_drop_bwd, md, &b, 1);
    row(bk, md->causal ? "causal softmax + dropout fwd" : "masked softmax + dropout fwd", s_att,
        f * (3 * NA + (md->causal ? 0 : N)), NA, k_smax_fwd, md, &b, 0);
    row(bk, md->causal ? "causal softmax fwd, p = 0" : "masked softmax fwd, p = 0", s_att,
        f * (3 * NA + (md->causal ? 0 : N)), NA, k_smax_fwd, md, &b, 2);
    row(bk, "softmax + dropout bwd (+ pd)", s_att, f * 4 * NA, NA, k_smax_bwd, md, &b, 0);
    row(bk, "softmax + dropout fwd, keep mask written", s_att,
        f * (3 * NA + (md->causal ? 0 : N)), NA, k_smax_fwd, md, &b, 1);
    row(bk, "softmax + dropout bwd from the keep mask", s_att, f * 4 * NA, NA, k_smax_bwd, md,
        &b, 1);
    row(bk, "cross-entropy fwd", s_rc, f * 2 * RC, RC, k_xent_fwd, md, &b, 0);
    row(bk, "cross-entropy bwd", s_rc, f * 2 * RC, RC, k_xent_bwd, md, &b, 0);
    row(bk, "AdamW (fp32)", s_opt, f * 7 * n, n, k_adam, md, &b, 0);
    row(bk, "AdamW (bf16 gradients, bf16 working copy)", s_opt, f * 6 * n + 4 * n, n, k_adam, md,
        &b, 1);
    row(bk, "cast fp32 -> bf16", s_opt, 6 * n, n, k_cast, md, &b, 0);
    row(bk, "cast bf16 -> fp32", s_opt, 6 * n, n, k_cast, md, &b, 1);
    row(bk, "cast fp32 -> fp16", s_opt, 6 * n, n, k_cast, md, &b, 2);
    row(bk, "cast fp16 -> fp32", s_opt, 6 * n, n, k_cast, md, &b, 3);
    row(bk, "axpy (fp32)", s_opt, f * 3 * n, n, k_axpy, md, &b, 0);
    row(bk, "axpy (bf16 y += fp32 x)", s_opt, f * n + 4 * n, n, k_axpy, md, &b, 1);
    row(bk, "scale (fp32)", s_opt, f * 2 * n, n, k_scale, md, &b, 0);
    row(bk, "sum of squares (fp32)", s_opt, f * n, n, k_sumsq, md, &b, 0);
    row(bk, "sum of squares (bf16)", s_opt, 2 * n, n, k_sumsq, md, &b, 1);
    run_gemms(bk, md, &b);
    char title[96];
    snprintf(title, sizeof title, "linear + bias, %d x (%lld x %d -> %d)", md->causal ? 1 : 3,
             (long long)N, H, md->causal ? 3 * H : H);
    run_pair(bk, md, &b, k_lin_bias, title, "GEMM, then a bias pass",
             "ds_linear_bias_fwd (gemm_bias)");
    int64_t diff = lin_bias_bits(bk, md, &b);
    if (diff >= 0)
        printf("\nelements whose bits differ between the two ways: %lld of %lld\n",
               (long long)diff, (long long)(N * (md->causal ? 3 * H : H)));
    snprintf(title, sizeof title, "dropout p=0.1 + residual, then layer norm, %lld x %d",
             (long long)N, H);
    run_pair(bk, md, &b, k_drop_ln, title, "dropout_fwd, then layernorm_fwd", "dropout_ln_fwd");
    goto done;
oom:
    fprintf(stderr, "bench_kernels: %s: %s\n", md->name, ds_last_error());
fail:
    bk->failed = 1;
done:;
    void *all[] = {b.x,      b.y,  b.z,  b.w,  b.dy, b.p1, b.p2, b.g1,  b.g2,   b.table,
                   b.stats1, b.stats2, b.mask, b.ids, b.labels, b.scalars, b.om, b.ov, b.og, b.op,
                   b.half,   b.keep};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) be->ops->free(be, all[i], DS_PLACE_DEVICE);
    return bk->failed ? -1 : 0;
}

static void print_cpu(void) {
    FILE *fp = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int got_name = 0, got_flags = 0;
    while (fp && fgets(line, sizeof line, fp) && !(got_name && got_flags)) {
        if (!got_name && !strncmp(line, "model name", 10)) {
            printf("cpu: %s", strchr(line, ':') + 2);
            got_name = 1;
        } else if (!got_flags && !strncmp(line, "flags", 5)) {
            /* the flags the kernels' code paths depend on */
            const char *want[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                  "avx512vl", "avx512dq", "avx512_bf16", "avx512_fp16"};
            printf("cpu flags (of those the kernels use):");
            for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                char pat[32];
                snprintf(pat, sizeof pat, " %s ", want[i]);
                size_t L = strlen(line);
                if (L && line[L - 1] == '\n') line[L - 1] = ' ';
                if (strstr(line, pat)) printf(" %s", want[i]);
            }
            printf("\n");
            got_flags = 1;
        }
    }
    if (fp) fclose(fp);
}

int main(int argc, char **argv) {
    int nt = 0, which = 3, cpu_clock = 0;
    ds_dtype inputs = DS_F32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--secs")) g_secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--clock")) cpu_clock = !strcmp(argv[i + 1], "cpu");
        else if (!strcmp(argv[i], "--gemm-inputs")) {
            if (strcmp(argv[i + 1], "bf16") && strcmp(argv[i + 1], "fp32")) {
                fprintf(stderr, "bench_kernels: --gemm-inputs is fp32 or bf16, not %s\n",
                        argv[i + 1]);
                return 2;
            }
            inputs = !strcmp(argv[i + 1], "bf16") ? DS_BF16 : DS_F32;
        }
        else if (!strcmp(argv[i], "--gemms-only")) g_gemms_only = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--gemm-cold")) g_gemm_cold = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--model"))
            which = !strcmp(argv[i + 1], "bert") ? 1 : !strcmp(argv[i + 1], "gpt2") ? 2 : 3;
        else {
            fprintf(stderr, "bench_kernels: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "bench_kernels: option %s needs a value\n", argv[argc - 1]);
        return 2;
    }
    if (nt <= 0) nt = getenv("OMP_NUM_THREADS") ? atoi(getenv("OMP_NUM_THREADS")) : 2;
    if (nt <= 0) nt = 2;
    if (cpu_clock) {
        g_nt_clock = nt;
        const char *wp = getenv("OMP_WAIT_POLICY");
        if (!wp || strcasecmp(wp, "passive"))
            fprintf(stderr, "bench_kernels: --clock cpu without OMP_WAIT_POLICY=passive counts "
                            "the threads' spinning at barriers\n");
    }
    ds_backend *be;
    ds_backend_desc desc = {.kind = DS_BACKEND_CPU, .num_threads = nt};
    if (ds_backend_create(&desc, &be) != DS_OK) {
        fprintf(stderr, "bench_kernels: %s\n", ds_last_error());
        return 1;
    }
    if (ds_backend_set_gemm_inputs(be, inputs) != DS_OK) {
        fprintf(stderr, "bench_kernels: %s\n", ds_last_error());
        return 1;
    }
    print_cpu();
    double la[3] = {0};
    FILE *fl = fopen("/proc/loadavg", "r");
    if (fl) {
        if (fscanf(fl, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = la[1] = la[2] = 0;
        fclose(fl);
    }
    const char *dot = getenv("DS_CPU_BF16_DOT");
    printf("backend %s, %d threads, %s clock, GEMM inputs %s%s%s, load average at start %.2f "
           "%.2f %.2f\n", be->ops->name, nt, cpu_clock ? "cpu" : "wall", ds_dtype_name(inputs),
           dot ? ", DS_CPU_BF16_DOT=" : "", dot ? dot : "", la[0], la[1], la[2]);
    roof rf;
    if (measure_roof(&rf, true) != 0) return 1;
    printf("triad GB/s: 3 x 16 MiB arrays %.1f (1 thread) %.1f (2 threads); "
           "3 x 256 MiB arrays %.1f (1 thread) %.1f (2 threads)\n",
           rf.cache[1], rf.cache[2], rf.dram[1], rf.dram[2]);
    bench bk = {.be = be, .nt = nt, .rf = &rf};
    for (int i = 0; i < 2; i++)
        if (which & (1 << i)) (void)run_model(&bk, &k_models[i]);
    roof end;
    if (measure_roof(&end, false) == 0)
        printf("\ntriad GB/s again at the end: 3 x 16 MiB arrays %.1f (1 thread) %.1f "
               "(2 threads)\n", end.cache[1], end.cache[2]);
    ds_backend_destroy(be);
    return bk.failed ? 1 : 0;
}
