/* The cpu kernel variants (engine/backend/cpu/cpu_isa.h) give the same bits.
 *
 * Every variant this build has and this CPU runs (DS_CPU_ISA picks it at
 * backend creation) runs the same calls on the same inputs: the RNG, casts,
 * scale, axpy, sum of squares, Adam / AdamW / SGD (fp32, fp16 and bf16
 * gradients and working copies) and every model kernel (embedding, broadcast
 * add, mean pool, row copies, bias + each activation forward and backward,
 * dropout, layer norm, masked / causal attention softmax with dropout,
 * bias + GELU large enough to be written with streaming stores,
 * cross-entropy), 1-bit Adam's code and passes, the row-sparse gradients'
 * slots, and the small GEMMs of the variants' own kernel
 * (cpu_gemm_small.c, every transpose combination), also with bf16 inputs
 * (each variant's vectorised rounding, cpu_gemm_bf16.c), at 2 threads, on
 * shapes whose widths leave vector tails (37 x 771, heads of 1..133 keys;
 * GEMMs of 37 x 80 x 65). Each output is compared byte for byte
 * with the scalar variant's: the tolerance is zero, because the project
 * promises bit-identical training across stages, resumes and hosts, and the
 * variants differ only in vector width and instruction encoding (no
 * contraction, fixed-lane reductions). A host without AVX-512 or AVX2
 * checks the variants it has and says which it skipped.
 *
 * The bf16 dot product (cpu_gemm_dot.c) is off here (DS_CPU_BF16_DOT=0):
 * only the avx512 variant on a CPU with AVX512-BF16 has it, it sums the
 * same products in another order, and the project does not promise its
 * bits on hosts without the instruction (tests/unit/test_gemm_dot.c checks
 * it against the exact product). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/nn.h"
#include "engine/backend/onebit_math.h"
#include "engine/backend/rows_math.h"
#include "tests/unit/test_rand.h"
#include "tests/unit/test_util.h"

#define MAX_OUT 128

typedef struct outputs {
    int n;
    const char *name[MAX_OUT];
    void *data[MAX_OUT];
    size_t bytes[MAX_OUT];
} outputs;

static void keep(outputs *o, const char *name, const void *p, size_t bytes) {
    if (o->n == MAX_OUT) TEST_DIE("MAX_OUT too small");
    void *c = malloc(bytes ? bytes : 1);
    if (!c) TEST_DIE("out of memory");
    memcpy(c, p, bytes);
    o->name[o->n] = name;
    o->data[o->n] = c;
    o->bytes[o->n] = bytes;
    o->n++;
}


enum { R = 37, W = 771, N = R * W };

/* The engine's element-wise slots and optimizers. */
static void run_elementwise(ds_backend *be, outputs *o) {
    const ds_backend_ops *op = be->ops;
    size_t n = 100003; /* > DS_CPU_PAR_MIN: threads take chunks; odd tail */
    float *a = test_frand_buf(n, -3.0f, 3.0f), *b = test_frand_buf(n, -1.0f, 1.0f);
    a[5] = 0.0f, a[6] = -0.0f, a[7] = 65519.0f, a[8] = 7e-8f, a[9] = 1e30f;
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc(n * sizeof *h), *bf = malloc(n * sizeof *bf);
    if (!f || !h || !bf) TEST_DIE("out of memory");

    CHECK_OK(op->rng_normal(be, f, n, 0.5f, 0.02f, 1234, 7));
    keep(o, "rng_normal", f, n * 4);
    CHECK_OK(op->rng_uniform(be, f, n, -2.0f, 3.0f, 99, 3));
    keep(o, "rng_uniform", f, n * 4);
    CHECK_OK(op->cast(be, h, DS_F16, a, DS_F32, n));
    keep(o, "cast f32->f16", h, n * 2);
    CHECK_OK(op->cast(be, bf, DS_BF16, a, DS_F32, n));
    keep(o, "cast f32->bf16", bf, n * 2);
    CHECK_OK(op->cast(be, f, DS_F32, h, DS_F16, n));
    keep(o, "cast f16->f32", f, n * 4);
    CHECK_OK(op->cast(be, f, DS_F32, bf, DS_BF16, n));
    keep(o, "cast bf16->f32", f, n * 4);
    memcpy(f, a, n * 4);
    CHECK_OK(op->scale(be, f, DS_F32, n, 0.3f));
    keep(o, "scale f32", f, n * 4);
    CHECK_OK(op->scale(be, h, DS_F16, n, 1.7f));
    keep(o, "scale f16", h, n * 2);
    CHECK_OK(op->axpy(be, f, DS_F32, -0.7f, bf, DS_BF16, n));
    keep(o, "axpy f32 += bf16", f, n * 4);
    CHECK_OK(op->axpy(be, h, DS_F16, 0.1f, b, DS_F32, n));
    keep(o, "axpy f16 += f32", h, n * 2);
    double ss[2];
    int nf[2];
    CHECK_OK(op->sumsq(be, a, DS_F32, n, &ss[0], &nf[0]));
    CHECK_OK(op->sumsq(be, h, DS_F16, n, &ss[1], &nf[1]));
    keep(o, "sumsq", ss, sizeof ss);
    keep(o, "sumsq nonfinite", nf, sizeof nf);
    /* qwZ's int8 blocks from fp32 and bf16 (the last block short), and back */
    size_t nb = (n + DS_Q8_BLOCK - 1) / DS_Q8_BLOCK;
    int8_t *q8 = malloc(n);
    float *sc = malloc(nb * sizeof *sc);
    if (!q8 || !sc) TEST_DIE("out of memory");
    CHECK_OK(op->quantize_i8(be, q8, sc, a, DS_F32, n, DS_Q8_BLOCK));
    keep(o, "quantize_i8 f32", q8, n);
    keep(o, "quantize_i8 f32 scales", sc, nb * 4);
    CHECK_OK(op->dequantize_i8(be, f, q8, sc, n, DS_Q8_BLOCK));
    keep(o, "dequantize_i8", f, n * 4);
    CHECK_OK(op->quantize_i8(be, q8, sc, bf, DS_BF16, n, DS_Q8_BLOCK));
    keep(o, "quantize_i8 bf16", q8, n);
    free(q8), free(sc);

    /* Three steps of AdamW (fp32 grads), Adam with L2 (fp16 grads, bf16
     * working copy), SGD with Nesterov momentum (bf16 grads, fp16 copy). */
    float *p = test_frand_buf(n, -1.0f, 1.0f), *m = calloc(n, 4), *v = calloc(n, 4);
    if (!m || !v) TEST_DIE("out of memory");
    for (int t = 1; t <= 3; t++) {
        ds_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.01f, .step = t, .adam_w_mode = true,
                              .bias_correction = true};
        CHECK_OK(op->adam(be, p, b, DS_F32, 0.5f, m, v, n, &hp, NULL, DS_F32));
        hp.adam_w_mode = false;
        CHECK_OK(op->adam(be, p, h, DS_F16, 1.0f / 1024, m, v, n, &hp, bf, DS_BF16));
        ds_sgd_hparams sp = {.lr = 0.01f, .momentum = 0.9f, .dampening = 0.0f,
                             .weight_decay = 1e-4f, .nesterov = true, .first_step = t == 1};
        CHECK_OK(op->sgd(be, p, bf, DS_BF16, 0.25f, v, n, &sp, h, DS_F16));
    }
    keep(o, "optim param", p, n * 4);
    keep(o, "optim m", m, n * 4);
    keep(o, "optim v/momentum", v, n * 4);
    keep(o, "optim bf16 copy", bf, n * 2);
    keep(o, "optim f16 copy", h, n * 2);
    free(a), free(b), free(f), free(h), free(bf), free(p), free(m), free(v);
}

/* 1-bit Adam's code and passes, and the row-sparse gradients' slots. */
static void run_onebit_rows(ds_backend *be, outputs *o) {
    const ds_backend_ops *op = be->ops;
    size_t n = 100000; /* > DS_CPU_PAR_MIN, records of 25,000 elements */
    float *x = test_frand_buf(n, -2.0f, 2.0f), *err = test_frand_buf(n, -0.1f, 0.1f);
    size_t stride = ds_onebit_record_bytes(n / 4) + 3, wb = 4 * stride;
    unsigned char *wire = calloc(wb, 1);
    float *out = test_frand_buf(n / 4, -1.0f, 1.0f);
    if (!wire) TEST_DIE("out of memory");
    CHECK_OK(op->onebit_encode(be, x, err, n, 4, wire, stride));
    keep(o, "onebit_encode records", wire, wb);
    keep(o, "onebit_encode error", err, n * 4);
    CHECK_OK(op->onebit_decode(be, wire + stride, n / 4, 0.5f, true, out));
    keep(o, "onebit_decode", out, n / 4 * 4);
    float *arr[6];
    for (int k = 0; k < 6; k++) arr[k] = test_frand_buf(n, -1.0f, 1.0f);
    float *v = arr[5];
    for (size_t i = 0; i < n; i++) v[i] = i % 89 ? fabsf(v[i]) : 0.0f;
    uint16_t *g = malloc(n * 2);
    if (!g) TEST_DIE("out of memory");
    CHECK_OK(op->cast(be, g, DS_BF16, x, DS_F32, n));
    for (int ph = DS_ONEBIT_GRAD; ph <= DS_ONEBIT_ZO_SYNC; ph++) {
        ds_onebit_pass p = {.phase = (ds_onebit_phase)ph, .n = n, .w = arr[0], .m = arr[1],
                            .x = arr[2], .u = arr[3], .at_sync = arr[4], .v = v, .amask = NULL,
                            .g = g, .gt = DS_BF16, .gm = 0.5f, .lr = 1e-3f, .wd = 0.01f,
                            .lrs = 4e-3f, .sync = 1,
                            .c = ds_adam_coef_make(1e-3f, 0.9f, 0.95f, 1e-8f, 0.01f, 7, true,
                                                   false, 0.5f)};
        CHECK_OK(op->onebit_pass(be, &p));
    }
    static const char *names[5] = {"onebit_pass w", "onebit_pass m", "onebit_pass x",
                                   "onebit_pass u", "onebit_pass at_sync"};
    for (int k = 0; k < 5; k++) keep(o, names[k], arr[k], n * 4);
    /* rows: a 3,000 x 33 table seen through a partition cutting rows 7 and 2,990 */
    const int64_t rows = 3000, cols = 33, lo = 7 * cols + 5, hi = 2990 * cols + 9;
    float *t = test_frand_buf((size_t)(hi - lo), -1.0f, 1.0f);
    for (int64_t e = lo; e < hi; e++)
        if ((e / cols) % 4) t[e - lo] = 0.0f;
    ds_rows_view view = {t, DS_F32, lo, hi, 0, cols};
    uint8_t *flags = malloc((size_t)rows);
    int32_t idx[500];
    float *gathered = malloc(500 * (size_t)cols * 4);
    if (!flags || !gathered) TEST_DIE("out of memory");
    CHECK_OK(op->rows_nonzero(be, &view, 0, rows, flags));
    keep(o, "rows_nonzero", flags, (size_t)rows);
    for (int k = 0; k < 500; k++) idx[k] = 7 + 5 * k; /* rows 7 .. 2,502 */
    CHECK_OK(op->rows_gather(be, &view, idx, 500, gathered));
    keep(o, "rows_gather", gathered, 500 * (size_t)cols * 4);
    float *scattered = malloc((size_t)(hi - lo) * 4);
    if (!scattered) TEST_DIE("out of memory");
    for (int64_t e = lo; e < hi; e++) scattered[e - lo] = (float)(e % 7);
    ds_rows_view into = {scattered, DS_F32, lo, hi, 0, cols};
    CHECK_OK(op->rows_scatter(be, &into, idx, 500, gathered));
    keep(o, "rows_scatter", scattered, (size_t)(hi - lo) * 4);
    free(scattered);
    int32_t row[250];
    uint8_t all[250];
    int64_t first[251], src[500];
    for (int j = 0; j < 250; j++) {
        row[j] = idx[2 * j], all[j] = (uint8_t)(j % 2), first[j] = 2 * j;
        src[2 * j] = 2 * j * cols, src[2 * j + 1] = (2 * j + 1) * cols;
    }
    first[250] = 500;
    ds_rows_sum sum = {view, true, gathered, 250, row, all, first, src};
    CHECK_OK(op->rows_sum(be, &sum));
    keep(o, "rows_sum", t, (size_t)(hi - lo) * 4);
    for (int k = 0; k < 6; k++) free(arr[k]);
    free(x), free(err), free(wire), free(out), free(g), free(t), free(flags), free(gathered);
}

/* Every model kernel. */
static void run_nn(ds_backend *be, outputs *o) {
    const ds_nn_ops *nn = be->nn;
    float *x = test_frand_buf(N, -6.0f, 6.0f), *dy = test_frand_buf(N, -1.0f, 1.0f);
    float *bias = test_frand_buf(W, -0.5f, 0.5f), *y = malloc(N * 4), *dx = malloc(N * 4);
    float *db = calloc(W, 4);
    if (!y || !dx || !db) TEST_DIE("out of memory");

    static const char *act_name[DS_ACT_COUNT][2] = {
        {"act none fwd", "act none bwd"}, {"act relu fwd", "act relu bwd"},
        {"act gelu fwd", "act gelu bwd"}, {"act tanh fwd", "act tanh bwd"},
        {"act gelu_tanh fwd", "act gelu_tanh bwd"}};
    for (int a = 0; a < DS_ACT_COUNT; a++) {
        CHECK_OK(nn->bias_act_fwd(be, y, x, bias, R, W, (ds_act)a));
        keep(o, act_name[a][0], y, N * 4);
        CHECK_OK(nn->bias_act_bwd(be, dx, db, dy, x, bias, R, W, (ds_act)a));
        keep(o, act_name[a][1], dx, N * 4);
    }
    keep(o, "act dbias", db, W * 4);
    {
        /* bias + GELU at BERT-mini's 2048 x 1024 (8 MiB, aligned): large
         * enough that the vector variants write y with streaming stores
         * (nn_cpu.h, DS_NN_CPU_STREAM_MIN), the scalar one with plain ones */
        enum { SR = 2048, SW = 1024 };
        size_t sn = (size_t)SR * SW;
        float *sx = aligned_alloc(64, sn * 4), *sy = aligned_alloc(64, sn * 4);
        float *sb = test_frand_buf(SW, -0.5f, 0.5f);
        if (!sx || !sy) TEST_DIE("out of memory");
        for (size_t i = 0; i < sn; i++) sx[i] = test_frand(-6.0f, 6.0f);
        CHECK_OK(nn->bias_act_fwd(be, sy, sx, sb, SR, SW, DS_ACT_GELU));
        keep(o, "act gelu fwd streamed", sy, sn * 4);
        free(sx), free(sy), free(sb);
    }

    CHECK_OK(nn->dropout_fwd(be, y, x, bias, dy, R, W, 0.1f, 42, 5, NULL));
    keep(o, "dropout fwd", y, N * 4);
    CHECK_OK(nn->dropout_bwd(be, dx, db, dy, R, W, 0.1f, 42, 5, NULL));
    keep(o, "dropout bwd", dx, N * 4);
    { /* the keep mask in bits (nn.h), and the backward that reads it */
        size_t kb = ds_dropout_mask_bytes(R, W);
        uint32_t *km = calloc(kb, 1);
        if (!km) TEST_DIE("out of memory");
        CHECK_OK(nn->dropout_fwd(be, y, x, bias, dy, R, W, 0.1f, 42, 5, km));
        keep(o, "dropout keep mask", km, kb);
        CHECK_OK(nn->dropout_bwd(be, dx, db, dy, R, W, 0.1f, 42, 5, km));
        keep(o, "dropout bwd from the mask", dx, N * 4);
        free(km);
    }

    float *gamma = test_frand_buf(W, 0.5f, 1.5f), *beta = test_frand_buf(W, -0.2f, 0.2f);
    float mean[R], rstd[R];
    float *dg = calloc(W, 4), *dbeta = calloc(W, 4);
    if (!dg || !dbeta) TEST_DIE("out of memory");
    for (int i = 0; i < W; i++) x[i] += 100.0f; /* a row whose mean dwarfs its spread */
    CHECK_OK(nn->layernorm_fwd(be, y, mean, rstd, x, gamma, beta, R, W, 1e-12f));
    keep(o, "layernorm y", y, N * 4);
    keep(o, "layernorm mean", mean, sizeof mean);
    keep(o, "layernorm rstd", rstd, sizeof rstd);
    CHECK_OK(nn->layernorm_bwd(be, dx, dg, dbeta, dy, x, mean, rstd, gamma, R, W, false));
    keep(o, "layernorm dx", dx, N * 4);
    keep(o, "layernorm dgamma", dg, W * 4);
    keep(o, "layernorm dbeta", dbeta, W * 4);

    /* attention: B=2, nh=3, T up to 133 keys (tails of every vector width),
     * a padding mask, causal and not, with dropout */
    enum { B = 2, NH = 3, T = 133 };
    size_t na = (size_t)B * NH * T * T;
    float *s = test_frand_buf(na, -8.0f, 8.0f), *pa = malloc(na * 4), *pd = malloc(na * 4);
    float *dpd = test_frand_buf(na, -1.0f, 1.0f), *dsc = malloc(na * 4), *pd2 = malloc(na * 4);
    float mask[B * T];
    if (!pa || !pd || !dsc || !pd2) TEST_DIE("out of memory");
    for (int i = 0; i < B * T; i++) mask[i] = (i % T) < (i < T ? T : 70) ? 1.0f : 0.0f;
    for (int causal = 0; causal < 2; causal++) {
        CHECK_OK(nn->attn_softmax_fwd(be, pa, pd, s, mask, causal, B, NH, T, T, 0.125f, 0.1f, 7,
                                      11, NULL));
        keep(o, causal ? "softmax causal p" : "softmax p", pa, na * 4);
        keep(o, causal ? "softmax causal pd" : "softmax pd", pd, na * 4);
        CHECK_OK(nn->attn_softmax_bwd(be, dsc, pd2, dpd, pa, B, NH, T, T, 0.125f, 0.1f, 7, 11,
                                      NULL));
        keep(o, causal ? "softmax causal ds" : "softmax ds", dsc, na * 4);
        /* with the keep mask in bits (every key's, causal ones too) */
        size_t kb = ds_dropout_mask_bytes((int64_t)B * NH * T, T);
        uint32_t *km = calloc(kb, 1);
        if (!km) TEST_DIE("out of memory");
        CHECK_OK(nn->attn_softmax_fwd(be, pa, pd, s, mask, causal, B, NH, T, T, 0.125f, 0.1f, 7,
                                      11, km));
        keep(o, causal ? "softmax causal keep mask" : "softmax keep mask", km, kb);
        CHECK_OK(nn->attn_softmax_bwd(be, dsc, pd2, dpd, pa, B, NH, T, T, 0.125f, 0.1f, 7, 11,
                                      km));
        keep(o, causal ? "softmax causal ds from the mask" : "softmax ds from the mask", dsc,
             na * 4);
        free(km);
    }

    /* cross-entropy over a 1000-class head with weights and an ignored row */
    enum { XR = 29, XC = 1001 };
    float *logits = test_frand_buf((size_t)XR * XC, -10.0f, 10.0f);
    float *probs = malloc((size_t)XR * XC * 4), *dl = malloc((size_t)XR * XC * 4);
    float loss, wsum, row_loss[XR], wts[XR];
    int32_t labels[XR];
    if (!probs || !dl) TEST_DIE("out of memory");
    for (int r = 0; r < XR; r++)
        labels[r] = r == 3 ? -100 : (r * 37) % XC, wts[r] = test_frand(0, 2);
    CHECK_OK(nn->xent_fwd(be, &loss, &wsum, probs, row_loss, logits, labels, wts, XR, XC, -100));
    keep(o, "xent loss", &loss, 4);
    keep(o, "xent probs", probs, (size_t)XR * XC * 4);
    keep(o, "xent row loss", row_loss, sizeof row_loss);
    CHECK_OK(nn->xent_bwd(be, dl, probs, &wsum, labels, wts, XR, XC, -100, 0.5f));
    keep(o, "xent dlogits", dl, (size_t)XR * XC * 4);

    /* embedding, broadcast add, mean pool, row copies */
    enum { V = 50 };
    int32_t ids[R];
    for (int i = 0; i < R; i++) ids[i] = (i * 7) % V;
    float *table = test_frand_buf((size_t)V * W, -1.0f, 1.0f), *dtab = calloc((size_t)V * W, 4);
    if (!dtab) TEST_DIE("out of memory");
    CHECK_OK(nn->embedding_fwd(be, y, table, ids, R, W, V, false));
    CHECK_OK(nn->embedding_fwd(be, y, table, ids, R, W, V, true));
    CHECK_OK(nn->bcast_add_fwd(be, y, bias, R, W, true));
    keep(o, "embedding + bcast fwd", y, N * 4);
    CHECK_OK(nn->embedding_bwd(be, dtab, dy, ids, R, W, 0));
    keep(o, "embedding bwd", dtab, (size_t)V * W * 4);
    CHECK_OK(nn->bcast_add_bwd(be, db, dy, R, W));
    keep(o, "bcast bwd", db, W * 4);
    float pmask[R], pool[W];
    for (int i = 0; i < R; i++) pmask[i] = i % 5 ? 1.0f : 0.0f;
    CHECK_OK(nn->mean_pool_fwd(be, pool, x, pmask, 1, R, W));
    keep(o, "mean pool fwd", pool, sizeof pool);
    CHECK_OK(nn->mean_pool_bwd(be, dx, pool, pmask, 1, R, W));
    keep(o, "mean pool bwd", dx, N * 4);
    CHECK_OK(nn->copy_rows(be, y, W, x + 3, W, R, W - 3, true));
    keep(o, "copy rows", y, N * 4);

    free(x), free(dy), free(bias), free(y), free(dx), free(db), free(gamma), free(beta);
    free(dg), free(dbeta), free(s), free(pa), free(pd), free(dpd), free(dsc), free(pd2);
    free(logits), free(probs), free(dl), free(table), free(dtab);
}

/* The gemm slot where each variant runs its own kernel (alpha 1, beta 0, n a
 * multiple of 16, small): row and column tails of every tile shape (37 rows;
 * 80 = 64 + 16 columns), k = 65, three products, each transpose pair; then
 * the same with bf16 inputs, whose rounding pass runs rows of 37, 65 and 80
 * elements (vector tails) in each variant's width. */
static void run_gemm(ds_backend *be, outputs *o) {
    enum { GM = 37, GN = 80, GK = 65, GB = 3 };
    static const char *const names[8] = {"gemm nn",      "gemm nt",      "gemm tn",
                                         "gemm tt",      "gemm bf16 nn", "gemm bf16 nt",
                                         "gemm bf16 tn", "gemm bf16 tt"};
    float *a = test_frand_buf((size_t)GB * GM * GK, -1.0f, 1.0f);
    float *b = test_frand_buf((size_t)GB * GK * GN, -1.0f, 1.0f);
    float *c = malloc((size_t)GB * GM * GN * sizeof *c);
    if (!c) TEST_DIE("out of memory");
    for (int t = 0; t < 8; t++) {
        bool ta = t & 2, tb = t & 1;
        CHECK_OK(ds_backend_set_gemm_inputs(be, t < 4 ? DS_F32 : DS_BF16));
        CHECK_OK(be->ops->gemm(be, ta, tb, GM, GN, GK, 1.0f, a, ta ? GM : GK, (int64_t)GM * GK, b,
                               tb ? GK : GN, (int64_t)GK * GN, 0.0f, c, GN, (int64_t)GM * GN,
                               GB));
        keep(o, names[t], c, (size_t)GB * GM * GN * 4);
    }
    CHECK_OK(ds_backend_set_gemm_inputs(be, DS_F32));
    free(a), free(b), free(c);
}

static void run_variant(const char *isa, outputs *o) {
    if (setenv("DS_CPU_ISA", isa, 1) != 0) TEST_DIE("setenv");
    ds_backend *be = test_cpu_backend(2, NULL);
    char want[32];
    snprintf(want, sizeof want, "cpu/%s", isa);
    CHECK(strcmp(be->ops->name, want) == 0, "DS_CPU_ISA=%s gave backend %s", isa, be->ops->name);
    test_rand_seed(0x9E3779B97F4A7C15ull); /* the same inputs for every variant */
    run_elementwise(be, o);
    run_onebit_rows(be, o);
    run_nn(be, o);
    run_gemm(be, o);
    ds_backend_destroy(be);
}

/* DS_CPU_ISA that names no variant: the backend is refused with one message
 * that says what the name may be. */
static void check_refusal(void) {
    if (setenv("DS_CPU_ISA", "avx9000", 1) != 0) TEST_DIE("setenv");
    ds_backend_desc d = {.kind = DS_BACKEND_CPU, .num_threads = 1};
    ds_backend *be = NULL;
    ds_clear_error();
    ds_status st = ds_backend_create(&d, &be);
    const char *msg = ds_last_error();
    CHECK(st == DS_ERR_INVALID_ARG && strstr(msg, "DS_CPU_ISA=avx9000") && strstr(msg, "unknown") &&
              strstr(msg, "avx2") && strstr(msg, "scalar"),
          "DS_CPU_ISA=avx9000: %s, '%s'", ds_status_to_string(st), msg);
    if (st == DS_OK) ds_backend_destroy(be);
    unsetenv("DS_CPU_ISA");
}

int main(void) {
    if (setenv("DS_CPU_BF16_DOT", "0", 1) != 0) TEST_DIE("setenv"); /* see the top */
    check_refusal();
    static outputs out[8];
    const char *ran[8];
    int nv = 0;
    for (int i = 0; ds_cpu_isa_names[i] && nv < 8; i++) {
        const char *isa = ds_cpu_isa_names[i];
        if (!ds_cpu_variant_find(isa)) {
            printf("test_cpu_isa: %s: not run by this CPU, skipped\n", isa);
            continue;
        }
        run_variant(isa, &out[nv]);
        ran[nv++] = isa;
    }
    if (nv == 0) {
        TEST_FAIL("no variant ran, not even scalar");
        return test_finish("test_cpu_isa");
    }
    if (nv == 1 && test_fails() == 0) { /* a native or non-x86 build, or a CPU without AVX2 */
        printf("test_cpu_isa: only %s runs here: nothing to compare, skipped\n", ran[0]);
        return 77;
    }
    /* the last (narrowest) variant is the reference */
    const outputs *ref = &out[nv - 1];
    for (int k = 0; k + 1 < nv; k++) {
        const outputs *o = &out[k];
        CHECK(o->n == ref->n, "%s: %d outputs, %s: %d", ran[k], o->n, ran[nv - 1], ref->n);
        int same = 0;
        for (int j = 0; j < o->n && j < ref->n; j++) {
            if (memcmp(o->data[j], ref->data[j], o->bytes[j]) == 0) {
                same++;
                continue;
            }
            size_t first = 0;
            const unsigned char *a = o->data[j], *b = ref->data[j];
            while (a[first] == b[first]) first++;
            TEST_FAIL("%s: %s differs from %s at byte %zu of %zu", o->name[j], ran[k],
                      ran[nv - 1], first, o->bytes[j]);
        }
        printf("test_cpu_isa: %s vs %s: %d of %d outputs bit-identical\n", ran[k], ran[nv - 1],
               same, o->n);
    }
    for (int k = 0; k < nv; k++)
        for (int j = 0; j < out[k].n; j++) free(out[k].data[j]);
    return test_finish("test_cpu_isa");
}
