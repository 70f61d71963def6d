/* The model kernels of the cuda backend (ds_nn_cuda) against the cpu ones
 * (ds_nn_cpu, the reference), slot by slot: the same host inputs go to both,
 * the cuda results come back and are compared. Built only with DS_CUDA;
 * exits 77 (skipped) when no CUDA device is visible.
 *
 * Bit for bit where both backends do the same element-wise IEEE operations
 * in the same order (nn_math.h's DS_HD functions, explicit fmaf, math.h's
 * Philox): embedding fwd/bwd (bwd sums each table row's positions in
 * increasing order on both), bcast_add_fwd, mean_pool fwd/bwd (a 0/1 mask:
 * exact products, the sum over t in order on both), bias_act fwd and dx for
 * NONE / RELU / GELU / GELU_TANH, dropout fwd/bwd (y, dx), the dropout masks
 * of attn_softmax (pd = p * mult exactly, and bwd's regenerated pd), xent_bwd,
 * copy_rows, shift_labels; and any column sum of small integers (exact in
 * every order).
 *
 * Within a bound otherwise, each derived where it is used:
 *   - reductions in another order: column sums (bcast_add_bwd, the dbias of
 *     bias_act_bwd / dropout_bwd, dgamma, dbeta), layer norm's row
 *     statistics, the softmax sum and the dot of its backward, xent's
 *     log-sum-exp and loss;
 *   - libm against CUDA's math library: tanhf (DS_ACT_TANH), and the
 *     exponentials and logarithm of xent.
 * Summation bounds use the classical one for any order: a float sum of n
 * terms is within (n - 1) u sum|terms| of the exact sum, u = FLT_EPSILON / 2;
 * two sides differ by at most twice that, (n - 1) eps sum|terms|. Other
 * roundings are counted as u per operation and side. The bounds are first
 * order; SLACK covers the second-order terms. A formula or index error is
 * O(1) relative and fails them by orders of magnitude; where a worst-case
 * bound grows with n so much that a lost partial sum could hide in it (xent
 * over 50257 classes), a second input makes the sum exact (logits 0 or
 * -inf) so the bound is a few ulps. max |cuda - cpu| / bound is printed per
 * check, for the record.
 *
 * Shapes exercise the launch geometry: 1-row and 1-column cases, rows not a
 * multiple of the 8 rows of a warp-per-row block or the 256 threads of a
 * grid-stride block, widths over 32 (a warp's lanes) and 256, and empty
 * batches (B = 0). Error paths: both backends return the same status and
 * the same message (bad ids, bad labels, unknown activation, dropout p). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "engine/core/module.h"
#include "tests/unit/test_util.h"

#define EPS ((double)FLT_EPSILON)
/* The bounds below are first order in eps; a factor 2 covers the rest. */
#define SLACK 2.0
#define IGN DS_IGNORE_INDEX

static ds_backend *g_cpu, *g_gpu;

/* ---- buffers: every allocation of a test is released at its end ---- */

#define MAX_LIVE 1024
static struct {
    void *p;
    size_t bytes;
    int dev;
} g_live[MAX_LIVE];
static int g_nlive;

static void *track(void *p, size_t bytes, int dev) {
    if (g_nlive == MAX_LIVE) {
        fprintf(stderr, "test_nn_cuda: more than %d live buffers\n", MAX_LIVE);
        exit(1);
    }
    g_live[g_nlive].p = p;
    g_live[g_nlive].bytes = bytes;
    g_live[g_nlive++].dev = dev;
    return p;
}

static void release_all(void) {
    for (int i = 0; i < g_nlive; i++) {
        if (g_live[i].dev)
            ds_backend_free(g_gpu, DS_MEM_BUFFERS, DS_PLACE_DEVICE, g_live[i].p, g_live[i].bytes);
        else
            free(g_live[i].p);
    }
    g_nlive = 0;
}

/* Zeroed; at least 16 bytes, so an empty case can still pass one element. */
static void *hnew(size_t bytes) {
    void *p = calloc(1, bytes > 16 ? bytes : 16);
    if (!p) TEST_DIE("out of host memory");
    return track(p, bytes, 0);
}

/* A device copy of `bytes` host bytes. At least 16 bytes are allocated, so
 * an empty case passes real pointers to both backends (a NULL dx or pd is
 * an argument error of its own). */
static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    size_t alloc = bytes > 16 ? bytes : 16;
    REQUIRE_OK(ds_backend_alloc(g_gpu, DS_MEM_BUFFERS, DS_PLACE_DEVICE, alloc, &d));
    track(d, alloc, 1);
    if (bytes) REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, d, h, bytes, DS_COPY_H2D, NULL));
    return d;
}
static float *upf(const float *h, size_t n) { return (float *)up(h, n * sizeof(float)); }
static int32_t *upi(const int32_t *h, size_t n) { return (int32_t *)up(h, n * sizeof(int32_t)); }

/* The device array back into a new host array (synchronises). */
static float *down(const float *d, size_t n) {
    float *h = (float *)hnew(n * sizeof(float));
    if (n) REQUIRE_OK(g_gpu->ops->memcpy(g_gpu, h, d, n * sizeof(float), DS_COPY_D2H, NULL));
    REQUIRE_OK(g_gpu->ops->sync(g_gpu));
    return h;
}

static float *fnew(size_t n) { return (float *)hnew(n * sizeof(float)); }

/* A device output of n floats holding NaN, so an entry a kernel should
 * write and does not fails every comparison. */
static float *dnan(size_t n) {
    float *h = (float *)hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    return upf(h, n);
}
static double *dnew(size_t n) { return (double *)hnew(n * sizeof(double)); }
static float *fcopy(const float *a, size_t n) {
    float *p = fnew(n);
    if (n) memcpy(p, a, n * sizeof(float));
    return p;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static double rnd_unit(void) { return ((double)(rnd_u64() >> 11) + 0.5) / 9007199254740992.0; }
static float *frandn(size_t n, double sd) {
    float *p = fnew(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(sd * sqrt(-2.0 * log(rnd_unit())) * cos(6.283185307179586 * rnd_unit()));
    return p;
}

/* ---- comparisons ---- */

/* Bit for bit (memcmp per element); reports the count and the first one. */
static void expect_bits(const char *what, const float *cpu, const float *gpu, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(cpu + i, gpu + i, sizeof(float)) != 0 && bad++ == 0) first = i;
    CHECK(bad == 0, "%s: %zu of %zu differ from cpu; first at %zu: cuda %.9g, cpu %.9g", what, bad,
          n, first, (double)gpu[first], (double)cpu[first]);
}

/* The worst bound use of each kind of check, printed at the end. */
static struct {
    char what[48];
    double worst;
} g_use[64];
static int g_nuse;

static void record_use(const char *what, double r) {
    int i = 0;
    while (i < g_nuse && strcmp(g_use[i].what, what) != 0) i++;
    if (i == g_nuse) {
        if (g_nuse == 64) return;
        snprintf(g_use[g_nuse++].what, sizeof g_use[0].what, "%s", what);
        g_use[i].worst = 0.0;
    }
    if (!(r <= g_use[i].worst)) g_use[i].worst = r;
}

/* |cuda - cpu| <= tol per element (tol 0: equal values); NaN fails. `what`
 * names the kind of check (for the summary), `shape` the case. */
static void expect_within(const char *what, const char *shape, const float *cpu, const float *gpu,
                          const double *tol, size_t n) {
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        double r = d == 0.0 ? 0.0 : d / tol[i]; /* d > 0 with tol 0: inf */
        if (!(r <= worst)) {
            worst = r;
            wi = i;
        }
    }
    record_use(what, worst);
    CHECK(worst <= 1.0, "%s (%s): entry %zu: cuda %.9g, cpu %.9g, bound %.3g (%.3g bounds off)",
          what, shape, wi, n ? (double)gpu[wi] : 0.0, n ? (double)cpu[wi] : 0.0,
          n ? tol[wi] : 0.0, worst);
}

/* The bound of a column sum dst[c] (+)= sum_r src[r, c] computed in two
 * orders: R + 1 terms with the old dst, see the top. `extra` (may be NULL)
 * adds per-element differences of the summed terms themselves. */
static void colsum_bound(double *tol, const float *dst0, const float *src, const double *extra,
                         int R, int W) {
    for (int c = 0; c < W; c++) {
        double mag = fabs((double)dst0[c]), ex = 0.0;
        for (int r = 0; r < R; r++) {
            mag += fabs((double)src[(size_t)r * W + c]);
            if (extra) ex += extra[(size_t)r * W + c];
        }
        tol[c] = SLACK * (R + 1) * EPS * mag + ex;
    }
}

/* Both backends refuse a call with DS_ERR_INVALID_ARG and the same message,
 * which contains `want`. */
#define EXPECT_SAME_ERROR(want, cpu_call, gpu_call)                                              \
    do {                                                                                         \
        char mc_[512], mg_[512];                                                                 \
        ds_clear_error();                                                                        \
        ds_status sc_ = (cpu_call);                                                              \
        snprintf(mc_, sizeof mc_, "%s", ds_last_error());                                        \
        ds_clear_error();                                                                        \
        ds_status sg_ = (gpu_call);                                                              \
        snprintf(mg_, sizeof mg_, "%s", ds_last_error());                                        \
        ds_clear_error();                                                                        \
        CHECK(sc_ == DS_ERR_INVALID_ARG && sg_ == sc_ && strcmp(mc_, mg_) == 0 &&                \
                  strstr(mg_, (want)) != NULL,                                                   \
              "cpu %s \"%s\", cuda %s \"%s\" (want INVALID_ARG with \"%s\")",                    \
              ds_status_to_string(sc_), mc_, ds_status_to_string(sg_), mg_, (want));             \
    } while (0)

/* ---- embedding ---- */

static void test_embedding(void) {
    /* vocab, width, positions; the last case is nearly all one id: a table
     * row summed from ~4000 positions, where any order but the cpu's (float
     * atomics, say) would show in the bits */
    const int shapes[][3] = {{50, 96, 400}, {1000, 769, 37}, {3, 1, 1}, {7, 300, 0},
                             {4, 64, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int V = shapes[s][0], H = shapes[s][1], n = shapes[s][2];
        char shape[64];
        snprintf(shape, sizeof shape, "V=%d H=%d n=%d", V, H, n);
        size_t nt = (size_t)V * H, no = (size_t)n * H;
        float *table = frandn(nt, 1.0), *out0 = frandn(no, 1.0), *dout = frandn(no, 1.0);
        int32_t *ids = (int32_t *)hnew((size_t)n * 4);
        /* repeated ids (V < n), the padding row among them */
        for (int i = 0; i < n; i++) ids[i] = (int32_t)(rnd_u64() % (uint64_t)V);
        if (n > 1000)
            for (int i = 0; i < n; i++) ids[i] = i % 97 ? 1 : ids[i];
        if (n > 2) ids[n - 1] = ids[1] = 0;
        float *d_table = upf(table, nt);
        int32_t *d_ids = upi(ids, n);
        for (int acc = 0; acc < 2; acc++) {
            float *c = fcopy(out0, no), *d = upf(out0, no);
            CHECK_OK(g_cpu->nn->embedding_fwd(g_cpu, c, table, ids, n, H, V, acc));
            CHECK_OK(g_gpu->nn->embedding_fwd(g_gpu, d, d_table, d_ids, n, H, V, acc));
            expect_bits(acc ? "embedding_fwd accumulate" : "embedding_fwd", c, down(d, no), no);
        }
        for (int pad = -1; pad <= 0; pad++) {
            float *dt = frandn(nt, 1.0), *d = upf(dt, nt);
            CHECK_OK(g_cpu->nn->embedding_bwd(g_cpu, dt, dout, ids, n, H, pad));
            CHECK_OK(g_gpu->nn->embedding_bwd(g_gpu, d, upf(dout, no), d_ids, n, H, pad));
            expect_bits(pad < 0 ? "embedding_bwd" : "embedding_bwd padding_idx=0", dt,
                        down(d, nt), nt);
        }
        release_all();
    }

    /* Ids outside the table: the same message naming the first bad position
     * (cuda keeps the lowest position of all bad ones, so a second bad id
     * later changes nothing); cuda's output holds table row 0 there. */
    const int V = 50, H = 40, n = 300;
    float *table = frandn((size_t)V * H, 1.0);
    int32_t ids[300];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(rnd_u64() % (uint64_t)V);
    float *c = fnew((size_t)n * H), *d_table = upf(table, (size_t)V * H);
    float *d = upf(c, (size_t)n * H);
    const int32_t bad_ids[] = {V, -1, 1 << 30, INT32_MIN};
    for (int k = 0; k < 4; k++) {
        ids[7] = bad_ids[k];
        ids[250] = V + 3;
        char want[64];
        snprintf(want, sizeof want, "id %d at position 7", bad_ids[k]);
        int32_t *d_ids = upi(ids, n);
        EXPECT_SAME_ERROR(want, g_cpu->nn->embedding_fwd(g_cpu, c, table, ids, n, H, V, false),
                          g_gpu->nn->embedding_fwd(g_gpu, d, d_table, d_ids, n, H, V, false));
        float *g = down(d, (size_t)n * H);
        int wrong = 0;
        for (int i = 0; i < n; i++) {
            int id = (i == 7 || i == 250) ? 0 : ids[i];
            wrong += memcmp(g + (size_t)i * H, table + (size_t)id * H, (size_t)H * 4) != 0;
        }
        CHECK(wrong == 0, "embedding_fwd with id %d: %d rows are not the documented ones",
              bad_ids[k], wrong);
    }
    /* all ids valid again: no error (the flag was reset) */
    ids[7] = 1;
    ids[250] = 2;
    CHECK_OK(g_gpu->nn->embedding_fwd(g_gpu, d, d_table, upi(ids, n), n, H, V, false));
    release_all();
}

/* ---- broadcast add and its column sums ---- */

static void test_bcast_add(void) {
    const int shapes[][2] = {{300, 200}, {1, 1000}, {1000, 33}, {5, 1}, {64, 2304}, {0, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], W = shapes[s][1];
        char shape[48];
        snprintf(shape, sizeof shape, "R=%d W=%d", R, W);
        size_t n = (size_t)R * W;
        float *x = frandn(W, 1.0), *out0 = frandn(n, 1.0), *d_x = upf(x, W);
        for (int acc = 0; acc < 2; acc++) {
            float *c = fcopy(out0, n), *d = upf(out0, n);
            CHECK_OK(g_cpu->nn->bcast_add_fwd(g_cpu, c, x, R, W, acc));
            CHECK_OK(g_gpu->nn->bcast_add_fwd(g_gpu, d, d_x, R, W, acc));
            expect_bits(acc ? "bcast_add_fwd accumulate" : "bcast_add_fwd", c, down(d, n), n);
        }
        /* random terms: within the summation bound; the same bits twice */
        float *dx0 = frandn(W, 1.0), *c = fcopy(dx0, W), *d = upf(dx0, W), *d2 = upf(dx0, W);
        float *d_dout = upf(out0, n);
        CHECK_OK(g_cpu->nn->bcast_add_bwd(g_cpu, c, out0, R, W));
        CHECK_OK(g_gpu->nn->bcast_add_bwd(g_gpu, d, d_dout, R, W));
        CHECK_OK(g_gpu->nn->bcast_add_bwd(g_gpu, d2, d_dout, R, W));
        double *tol = dnew(W);
        colsum_bound(tol, dx0, out0, NULL, R, W);
        float *g = down(d, W);
        expect_within("bcast_add_bwd", shape, c, g, tol, W);
        expect_bits("bcast_add_bwd run twice", g, down(d2, W), W);
        /* small integers: every partial sum is an integer below 2^24, exact
         * in any order, so a row summed twice or left out shows */
        float *iv = fnew(n), *i0 = fnew(W);
        for (size_t i = 0; i < n; i++) iv[i] = (float)((int)((i * 7 + i / 3) % 17) - 8);
        for (int k = 0; k < W; k++) i0[k] = (float)(k % 5);
        float *ci = fcopy(i0, W), *di = upf(i0, W);
        CHECK_OK(g_cpu->nn->bcast_add_bwd(g_cpu, ci, iv, R, W));
        CHECK_OK(g_gpu->nn->bcast_add_bwd(g_gpu, di, upf(iv, n), R, W));
        expect_bits("bcast_add_bwd of integers", ci, down(di, W), W);
        release_all();
    }
}

/* ---- masked mean pool ---- */

static void test_mean_pool(void) {
    const int shapes[][3] = {{4, 40, 130}, {1, 1, 300}, {3, 257, 33}, {2, 0, 5}, {0, 8, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], H = shapes[s][2];
        size_t nx = (size_t)B * T * H, no = (size_t)B * H;
        float *x = frandn(nx, 1.0), *mask = fnew((size_t)B * T), *dout = frandn(no, 1.0);
        /* a shorter real length per row; row 2 has no real token (count 1) */
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) mask[b * T + t] = (b != 2 && t < T - 7 * b) ? 1.0f : 0.0f;
        float *d_x = upf(x, nx), *d_mask = upf(mask, (size_t)B * T), *d_dout = upf(dout, no);
        for (int m = 0; m < 2; m++) {
            const float *hm = m ? mask : NULL, *dm = m ? d_mask : NULL;
            float *c = frandn(no, 1.0), *d = upf(c, no);
            CHECK_OK(g_cpu->nn->mean_pool_fwd(g_cpu, c, x, hm, B, T, H));
            CHECK_OK(g_gpu->nn->mean_pool_fwd(g_gpu, d, d_x, dm, B, T, H));
            expect_bits(m ? "mean_pool_fwd mask" : "mean_pool_fwd", c, down(d, no), no);
            float *cx = frandn(nx, 1.0), *dx = upf(cx, nx);
            CHECK_OK(g_cpu->nn->mean_pool_bwd(g_cpu, cx, dout, hm, B, T, H));
            CHECK_OK(g_gpu->nn->mean_pool_bwd(g_gpu, dx, d_dout, dm, B, T, H));
            expect_bits(m ? "mean_pool_bwd mask" : "mean_pool_bwd", cx, down(dx, nx), nx);
        }
        release_all();
    }
}

/* ---- bias + activation ---- */

static const ds_act k_acts[] = {DS_ACT_NONE, DS_ACT_RELU, DS_ACT_GELU, DS_ACT_TANH,
                                DS_ACT_GELU_TANH};
static const char *k_act_names[] = {"none", "relu", "gelu", "tanh", "gelu_tanh"};

static void test_bias_act(void) {
    const int shapes[][2] = {{257, 300}, {1, 1025}, {33, 1}, {0, 10}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], W = shapes[s][1];
        size_t n = (size_t)R * W;
        float *x = frandn(n, 2.5), *b = frandn(W, 0.5), *dy = frandn(n, 1.0);
        /* signed zeros (the sign of zero is part of the bits), relu'(0),
         * and the tails where GELU_TANH's sigmoid is cut to 0 */
        if (n > 4) x[0] = -0.0f, x[1] = 0.0f, x[2] = -12.0f, x[3] = 12.0f;
        b[0] = 0.0f;
        float *d_x = upf(x, n), *d_b = upf(b, W), *d_dy = upf(dy, n);
        for (int a = 0; a < 5; a++) {
            ds_act act = k_acts[a];
            bool exact = act != DS_ACT_TANH;
            for (int hb = 0; hb < 2; hb++) {
                const float *hbias = hb ? b : NULL, *dbias_in = hb ? d_b : NULL;
                char what[160], shape[64];
                snprintf(shape, sizeof shape, "%s%s R=%d W=%d", k_act_names[a],
                         hb ? " bias" : "", R, W);
                /* forward */
                float *c = fnew(n), *d = dnan(n);
                CHECK_OK(g_cpu->nn->bias_act_fwd(g_cpu, c, x, hbias, R, W, act));
                CHECK_OK(g_gpu->nn->bias_act_fwd(g_gpu, d, d_x, dbias_in, R, W, act));
                float *g = down(d, n);
                double *tol = dnew(n), *tdx = dnew(n), *tdb = dnew(W);
                if (exact) {
                    snprintf(what, sizeof what, "bias_act_fwd %s", shape);
                    expect_bits(what, c, g, n);
                } else {
                    /* glibc's tanhf and CUDA's are each within 2 ulp of
                     * tanh, ulp(y) <= eps |y|: 4 eps |y| apart (+ the
                     * smallest subnormal, for y = 0) */
                    for (size_t i = 0; i < n; i++)
                        tol[i] = 4.0 * EPS * fabs((double)c[i]) + 4.0 * FLT_TRUE_MIN;
                    expect_within("bias_act_fwd tanh", shape, c, g, tol, n);
                }
                /* in place: y over x */
                float *dxi = upf(x, n);
                CHECK_OK(g_gpu->nn->bias_act_fwd(g_gpu, dxi, dxi, dbias_in, R, W, act));
                snprintf(what, sizeof what, "bias_act_fwd in place %s", shape);
                expect_bits(what, g, down(dxi, n), n);

                /* backward: dx and the bias gradient (+= onto random) */
                float *db0 = frandn(W, 1.0), *cdb = fcopy(db0, W), *ddb = upf(db0, W);
                float *cdx = fnew(n), *ddx = dnan(n);
                CHECK_OK(g_cpu->nn->bias_act_bwd(g_cpu, cdx, cdb, dy, x, hbias, R, W, act));
                CHECK_OK(g_gpu->nn->bias_act_bwd(g_gpu, ddx, ddb, d_dy, d_x, dbias_in, R, W, act));
                float *gdx = down(ddx, n);
                if (exact) {
                    snprintf(what, sizeof what, "bias_act_bwd dx %s", shape);
                    expect_bits(what, cdx, gdx, n);
                } else {
                    /* g = 1 - t^2 from t 4 eps |t| apart (above): t^2 is
                     * 8 eps t^2 apart, plus its rounding or contraction
                     * (u t^2 a side) and that of 1 - t^2 (u |g| a side);
                     * dx = dy g rounds once more (u |dx| a side) */
                    for (size_t i = 0; i < n; i++) {
                        double z = (double)x[i] + (hb ? (double)b[i % W] : 0.0);
                        double t = tanh(z), gd = 1.0 - t * t;
                        tdx[i] = SLACK * (fabs((double)dy[i]) * EPS * (9.0 * t * t + fabs(gd)) +
                                          EPS * fabs((double)cdx[i])) +
                                 4.0 * FLT_TRUE_MIN;
                    }
                    expect_within("bias_act_bwd dx tanh", shape, cdx, gdx, tdx, n);
                }
                colsum_bound(tdb, db0, cdx, exact ? NULL : tdx, R, W);
                expect_within("bias_act_bwd dbias", shape, cdb, down(ddb, W), tdb, W);
                /* dx over dy */
                float *dal = upf(dy, n);
                CHECK_OK(g_gpu->nn->bias_act_bwd(g_gpu, dal, NULL, dal, d_x, dbias_in, R, W, act));
                snprintf(what, sizeof what, "bias_act_bwd dx over dy %s", shape);
                expect_bits(what, gdx, down(dal, n), n);
            }
        }
        /* NONE with dx NULL: only the bias gradient */
        float *db0 = frandn(W, 1.0), *cdb = fcopy(db0, W), *ddb = upf(db0, W);
        CHECK_OK(g_cpu->nn->bias_act_bwd(g_cpu, NULL, cdb, dy, x, b, R, W, DS_ACT_NONE));
        CHECK_OK(g_gpu->nn->bias_act_bwd(g_gpu, NULL, ddb, d_dy, d_x, d_b, R, W, DS_ACT_NONE));
        double *tol = dnew(W);
        colsum_bound(tol, db0, dy, NULL, R, W);
        expect_within("bias_act_bwd dbias (dx NULL)", "none", cdb, down(ddb, W), tol, W);
        release_all();
    }
    /* refusals, also for an empty shape (checked before the shape) */
    float h[4] = {0, 0, 0, 0}, *d = upf(h, 4);
    for (int rows = 0; rows < 2; rows++) {
        EXPECT_SAME_ERROR("unknown activation 9",
                          g_cpu->nn->bias_act_fwd(g_cpu, h, h, NULL, rows, 4, (ds_act)9),
                          g_gpu->nn->bias_act_fwd(g_gpu, d, d, NULL, rows, 4, (ds_act)9));
        EXPECT_SAME_ERROR("unknown activation -1",
                          g_cpu->nn->bias_act_bwd(g_cpu, h, NULL, h, h, NULL, rows, 4, (ds_act)-1),
                          g_gpu->nn->bias_act_bwd(g_gpu, d, NULL, d, d, NULL, rows, 4, (ds_act)-1));
        EXPECT_SAME_ERROR("unknown activation 9",
                          g_cpu->nn->bias_act_bwd(g_cpu, NULL, h, h, h, NULL, rows, 4, (ds_act)9),
                          g_gpu->nn->bias_act_bwd(g_gpu, NULL, d, d, d, NULL, rows, 4, (ds_act)9));
        EXPECT_SAME_ERROR(
            "dx may be NULL only for DS_ACT_NONE",
            g_cpu->nn->bias_act_bwd(g_cpu, NULL, h, h, h, NULL, rows, 4, DS_ACT_GELU),
            g_gpu->nn->bias_act_bwd(g_gpu, NULL, d, d, d, NULL, rows, 4, DS_ACT_GELU));
    }
    release_all();
}

/* ---- dropout ---- */

static void test_dropout(void) {
    const int shapes[][2] = {{257, 300}, {1, 1025}, {33, 1}, {0, 5}};
    const float ps[] = {0.0f, 0.1f, 0.5f};
    /* offsets mid Philox block and past 2^32 elements */
    const uint64_t offs[] = {0, 7, (1ull << 40) + 3};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], W = shapes[s][1];
        size_t n = (size_t)R * W;
        float *x = frandn(n, 1.0), *b = frandn(W, 0.5), *res = frandn(n, 1.0), *dy = frandn(n, 1.0);
        if (n > 2) x[0] = -0.0f, x[1] = -1.0f; /* signed zeros when dropped or kept */
        float *d_x = upf(x, n), *d_b = upf(b, W), *d_res = upf(res, n), *d_dy = upf(dy, n);
        for (int k = 0; k < 3; k++) {
            float p = ps[k];
            uint64_t off = offs[k], seed = 1234 + (uint64_t)k;
            char shape[64];
            snprintf(shape, sizeof shape, "p=%g R=%d W=%d", (double)p, R, W);
            for (int combo = 0; combo < 4; combo++) {
                const float *hb = combo & 1 ? b : NULL, *dbp = combo & 1 ? d_b : NULL;
                const float *hr = combo & 2 ? res : NULL, *drp = combo & 2 ? d_res : NULL;
                float *c = fnew(n), *d = dnan(n);
                CHECK_OK(g_cpu->nn->dropout_fwd(g_cpu, c, x, hb, hr, R, W, p, seed, off));
                CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, d, d_x, dbp, drp, R, W, p, seed, off));
                char what[160];
                snprintf(what, sizeof what, "dropout_fwd %s%s %s", hb ? "bias " : "",
                         hr ? "res" : "", shape);
                float *g = down(d, n);
                expect_bits(what, c, g, n);
                /* in place: y over x, y over res */
                float *dal = upf(x, n);
                CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, dal, dal, dbp, drp, R, W, p, seed, off));
                expect_bits("dropout_fwd y over x", g, down(dal, n), n);
                if (hr) {
                    float *dar = upf(res, n);
                    CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, dar, d_x, dbp, dar, R, W, p, seed, off));
                    expect_bits("dropout_fwd y over res", g, down(dar, n), n);
                }
            }
            /* backward: dx the same mask; dbias a column sum of dx */
            float *db0 = frandn(W, 1.0), *cdb = fcopy(db0, W), *ddb = upf(db0, W);
            float *cdx = fnew(n), *ddx = dnan(n);
            CHECK_OK(g_cpu->nn->dropout_bwd(g_cpu, cdx, cdb, dy, R, W, p, seed, off));
            CHECK_OK(g_gpu->nn->dropout_bwd(g_gpu, ddx, ddb, d_dy, R, W, p, seed, off));
            float *gdx = down(ddx, n);
            expect_bits("dropout_bwd dx", cdx, gdx, n);
            double *tol = dnew(W);
            colsum_bound(tol, db0, cdx, NULL, R, W);
            expect_within("dropout_bwd dbias", shape, cdb, down(ddb, W), tol, W);
            float *dal = upf(dy, n);
            CHECK_OK(g_gpu->nn->dropout_bwd(g_gpu, dal, NULL, dal, R, W, p, seed, off));
            expect_bits("dropout_bwd dx over dy", gdx, down(dal, n), n);
        }
        release_all();
    }
    float h[4] = {0, 0, 0, 0}, *d = upf(h, 4);
    EXPECT_SAME_ERROR("dropout probability must be in [0, 1), got 1",
                      g_cpu->nn->dropout_fwd(g_cpu, h, h, NULL, NULL, 1, 4, 1.0f, 1, 0),
                      g_gpu->nn->dropout_fwd(g_gpu, d, d, NULL, NULL, 1, 4, 1.0f, 1, 0));
    EXPECT_SAME_ERROR("dropout probability must be in [0, 1), got -0.5",
                      g_cpu->nn->dropout_bwd(g_cpu, h, NULL, h, 1, 4, -0.5f, 1, 0),
                      g_gpu->nn->dropout_bwd(g_gpu, d, NULL, d, 1, 4, -0.5f, 1, 0));
    release_all();
}

/* ---- layer norm ---- */

static void test_layernorm(void) {
    const int shapes[][2] = {{300, 272}, {1, 1024}, {37, 33}, {9, 7}, {8, 32}, {0, 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], h = shapes[s][1];
        float eps_ln = s == 0 ? 1e-12f : 1e-5f;
        char shape[48];
        snprintf(shape, sizeof shape, "n=%d h=%d", n, h);
        size_t N = (size_t)n * h;
        float *x = frandn(N, 1.0), *g = frandn(h, 0.3), *be = frandn(h, 0.3);
        /* rows whose mean is several standard deviations from 0 */
        for (int r = 0; r < n && r < 10; r++)
            for (int c = 0; c < h; c++) x[(size_t)r * h + c] += 5.0f;
        for (int c = 0; c < h; c++) g[c] += 1.0f;
        float *cy = fnew(N), *cm = fnew(n), *cr = fnew(n);
        float *dy_ = dnan(N), *dm = dnan(n), *dr = dnan(n);
        float *d_x = upf(x, N), *d_g = upf(g, h), *d_be = upf(be, h);
        CHECK_OK(g_cpu->nn->layernorm_fwd(g_cpu, cy, cm, cr, x, g, be, n, h, eps_ln));
        CHECK_OK(g_gpu->nn->layernorm_fwd(g_gpu, dy_, dm, dr, d_x, d_g, d_be, n, h, eps_ln));
        /* Per side: the mean is within (h + 1) u sum|x| / h = (h + 1) u M1
         * of the exact one (h terms, then / h); the variance, a sum of h
         * squares of x - mean, within (h + 2) u relative (plus (mean
         * error)^2 / var, second order); rstd = 1 / sqrt(var / h + eps)
         * within (h/2 + 3) u; xhat = (x - mean) rstd within (h + 1) u M1
         * rstd + (h/2 + 5) u |xhat|; y = xhat g + b one rounding more
         * (two with nvcc's contraction undone). Two sides: twice, u -> eps. */
        double *ty = dnew(N), *tm = dnew(n), *tr = dnew(n);
        for (int r = 0; r < n; r++) {
            double M1 = 0;
            for (int c = 0; c < h; c++) M1 += fabs((double)x[(size_t)r * h + c]);
            M1 /= h;
            double rs = cr[r];
            tm[r] = SLACK * (h + 1) * EPS * M1;
            tr[r] = SLACK * (h / 2.0 + 3) * EPS * rs;
            for (int c = 0; c < h; c++) {
                size_t i = (size_t)r * h + c;
                double xh = ((double)x[i] - cm[r]) * rs;
                ty[i] = SLACK * (fabs((double)g[c]) *
                                     ((h + 1) * EPS * M1 * rs + (h / 2.0 + 5) * EPS * fabs(xh)) +
                                 EPS * fabs((double)cy[i]));
            }
        }
        expect_within("layernorm_fwd y", shape, cy, down(dy_, N), ty, N);
        expect_within("layernorm_fwd mean", shape, cm, down(dm, n), tm, n);
        expect_within("layernorm_fwd rstd", shape, cr, down(dr, n), tr, n);

        /* backward on the same inputs (cpu's mean and rstd, so xhat has the
         * same bits on both): dx, and dgamma, dbeta += onto random */
        float *dyv = frandn(N, 1.0), *dg0 = frandn(h, 1.0), *db0 = frandn(h, 1.0);
        float *d_dy = upf(dyv, N), *d_m = upf(cm, n), *d_r = upf(cr, n);
        float *cdx = fnew(N), *cdg = fcopy(dg0, h), *cdb = fcopy(db0, h);
        float *ddx = dnan(N), *ddg = upf(dg0, h), *ddb = upf(db0, h);
        CHECK_OK(g_cpu->nn->layernorm_bwd(g_cpu, cdx, cdg, cdb, dyv, x, cm, cr, g, n, h, false));
        CHECK_OK(g_gpu->nn->layernorm_bwd(g_gpu, ddx, ddg, ddb, d_dy, d_x, d_m, d_r, d_g, n, h,
                                          false));
        /* dx = rstd (dy g - a - xhat c), a = mean(dy g), c = mean(dy g
         * xhat): a, c are sums of the same h terms in another order, apart
         * by 2 u sum|dg| and 2 u sum|dg xhat| (h u per side, then / h);
         * the element's own operations round 3 times a side (fma, the
         * subtraction or its contraction, the product by rstd). */
        double *tdx = dnew(N), *tdg = dnew(h), *tdb = dnew(h);
        for (int c = 0; c < h; c++) tdg[c] = fabs((double)dg0[c]), tdb[c] = fabs((double)db0[c]);
        for (int r = 0; r < n; r++) {
            double sa = 0, sc = 0, a = 0, cc = 0, rs = cr[r];
            for (int c = 0; c < h; c++) {
                size_t i = (size_t)r * h + c;
                double dg = (double)dyv[i] * g[c], xh = ((double)x[i] - cm[r]) * rs;
                sa += fabs(dg), sc += fabs(dg * xh), a += dg, cc += dg * xh;
                tdg[c] += fabs(dyv[i] * xh);
                tdb[c] += fabs((double)dyv[i]);
            }
            a /= h, cc /= h;
            for (int c = 0; c < h; c++) {
                size_t i = (size_t)r * h + c;
                double dg = (double)dyv[i] * g[c], xh = ((double)x[i] - cm[r]) * rs;
                tdx[i] = SLACK * rs *
                         (2 * EPS * (sa + fabs(xh) * sc) +
                          3 * EPS * (fabs(dg) + fabs(a) + fabs(xh * cc)));
            }
        }
        /* dgamma, dbeta: n products / terms plus the old value per column */
        for (int c = 0; c < h; c++) {
            tdg[c] *= SLACK * (n + 2) * EPS;
            tdb[c] *= SLACK * (n + 1) * EPS;
        }
        float *gdx = down(ddx, N);
        expect_within("layernorm_bwd dx", shape, cdx, gdx, tdx, N);
        expect_within("layernorm_bwd dgamma", shape, cdg, down(ddg, h), tdg, h);
        expect_within("layernorm_bwd dbeta", shape, cdb, down(ddb, h), tdb, h);
        /* the same bits twice (fixed partitions, no atomics) */
        float *ddx2 = dnan(N), *ddg2 = upf(dg0, h), *ddb2 = upf(db0, h);
        CHECK_OK(g_gpu->nn->layernorm_bwd(g_gpu, ddx2, ddg2, ddb2, d_dy, d_x, d_m, d_r, d_g, n, h,
                                          false));
        expect_bits("layernorm_bwd dx run twice", gdx, down(ddx2, N), N);
        expect_bits("layernorm_bwd dgamma run twice", down(ddg, h), down(ddg2, h), h);
        /* accumulate_dx: old + dx, one rounding more a side */
        float *old = frandn(N, 1.0), *cacc = fcopy(old, N), *dacc = upf(old, N);
        CHECK_OK(g_cpu->nn->layernorm_bwd(g_cpu, cacc, cdg, cdb, dyv, x, cm, cr, g, n, h, true));
        CHECK_OK(g_gpu->nn->layernorm_bwd(g_gpu, dacc, ddg, ddb, d_dy, d_x, d_m, d_r, d_g, n, h,
                                          true));
        for (size_t i = 0; i < N; i++)
            tdx[i] += SLACK * EPS * (fabs((double)old[i]) + fabs((double)cdx[i]));
        expect_within("layernorm_bwd accumulate_dx", shape, cacc, down(dacc, N), tdx, N);
        /* dx over dy */
        float *dal = upf(dyv, N), *dgs = upf(dg0, h), *dbs = upf(db0, h);
        CHECK_OK(g_gpu->nn->layernorm_bwd(g_gpu, dal, dgs, dbs, dal, d_x, d_m, d_r, d_g, n, h,
                                          false));
        expect_bits("layernorm_bwd dx over dy", gdx, down(dal, N), N);
        release_all();
    }
}

/* ---- attention softmax ---- */

typedef struct attn_case {
    int B, nh, Tq, T;
    bool causal, mask;
    float drop_p;
    uint64_t offset;
} attn_case;

static void test_attn_softmax(void) {
    const attn_case cases[] = {
        {2, 3, 37, 37, false, true, 0.0f, 0},
        {2, 2, 300, 300, true, true, 0.1f, 12345}, /* rows over a block of keys */
        {1, 1, 1, 513, false, false, 0.2f, 7},     /* the [CLS] row only */
        {3, 2, 5, 70, true, true, 0.3f, (1ull << 40) + 3}, /* the last Tq of T, causal */
        {3, 2, 33, 33, true, true, 0.0f, 0},
        {0, 2, 4, 4, true, true, 0.1f, 0},
    };
    const float scale = 0.35f;
    const uint64_t seed = 99;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        attn_case a = cases[k];
        char shape[96];
        snprintf(shape, sizeof shape, "B=%d nh=%d Tq=%d T=%d causal=%d mask=%d p=%g", a.B, a.nh,
                 a.Tq, a.T, a.causal, a.mask, (double)a.drop_p);
        int64_t rows = (int64_t)a.B * a.nh * a.Tq;
        size_t n = (size_t)rows * a.T;
        float *s = frandn(n, 2.0), *mask = fnew((size_t)a.B * a.T), *dpd = frandn(n, 1.0);
        /* padding at the end of each row; batch 1 also pads its first two
         * keys (an early causal query sees none: a row of zeros); batch 2
         * has no real key at all */
        for (int b = 0; b < a.B; b++)
            for (int j = 0; j < a.T; j++)
                mask[b * a.T + j] = (b == 2 || (b == 1 && j < 2) || j >= a.T - 3 * b) ? 0.0f : 1.0f;
        const float *hm = a.mask ? mask : NULL;
        float *d_s = upf(s, n), *d_mask = a.mask ? upf(mask, (size_t)a.B * a.T) : NULL;
        float *cp = fnew(n), *cpd = fnew(n), *dp = dnan(n), *dpdv = dnan(n);
        CHECK_OK(g_cpu->nn->attn_softmax_fwd(g_cpu, cp, cpd, s, hm, a.causal, a.B, a.nh, a.Tq,
                                             a.T, scale, a.drop_p, seed, a.offset));
        CHECK_OK(g_gpu->nn->attn_softmax_fwd(g_gpu, dp, dpdv, d_s, d_mask, a.causal, a.B, a.nh,
                                             a.Tq, a.T, scale, a.drop_p, seed, a.offset));
        float *gp = down(dp, n), *gpd = down(dpdv, n);
        /* p_j = e_j / S. The exponent s_j scale - mx may be rounded twice
         * (cpu without contraction) or once (nvcc's fma): u |s_j scale| +
         * 2 u |arg_j| apart; ds_expf is within 2 ulp on each side where the
         * arguments differ: e_j is eps (A + 4) apart relative, A = max over
         * the row of |s scale| + |arg|; S (T terms, other order) (T - 1) eps
         * plus the e's; 1 / S and the product 2 eps. Masked and future keys
         * (cpu's p exactly 0) must be exactly 0: bound 0. */
        double *tp = dnew(n);
        for (int64_t r = 0; r < rows; r++) {
            int b = (int)(r / ((int64_t)a.nh * a.Tq));
            int nk = a.causal ? ds_causal_keys((int)(r % a.Tq), a.Tq, a.T) : a.T;
            const float *sr = s + (size_t)r * a.T;
            double mx = -INFINITY, A = 0;
            for (int j = 0; j < nk; j++)
                if (!hm || hm[b * a.T + j] != 0.0f) mx = fmax(mx, (double)sr[j] * scale);
            for (int j = 0; j < nk; j++)
                if (!hm || hm[b * a.T + j] != 0.0f) {
                    double v = (double)sr[j] * scale;
                    A = fmax(A, fabs(v) + fabs(v - mx));
                }
            for (int j = 0; j < a.T; j++)
                tp[(size_t)r * a.T + j] =
                    SLACK * fabs((double)cp[(size_t)r * a.T + j]) * EPS * (2 * A + a.T + 10);
        }
        expect_within("attn_softmax_fwd p", shape, cp, gp, tp, n);
        /* the dropout mask bit for bit: pd = p * mult(Philox at seed,
         * offset + flat index) on each side, the same stream */
        float inv_keep = 1.0f / (1.0f - a.drop_p);
        float *mult = fnew(n);
        size_t bad_c = 0, bad_g = 0;
        for (size_t i = 0; i < n; i++) {
            mult[i] = a.drop_p > 0.0f ? (ds_rng_uniform_at(seed, a.offset + i) >= a.drop_p
                                             ? inv_keep
                                             : 0.0f)
                                      : 1.0f;
            bad_c += cpd[i] != cp[i] * mult[i];
            bad_g += gpd[i] != gp[i] * mult[i];
        }
        CHECK(bad_c == 0 && bad_g == 0,
              "attn_softmax_fwd pd (%s): %zu cpu and %zu cuda entries are not p * dropout mask",
              shape, bad_c, bad_g);
        /* the same bits twice; p over s */
        float *dp2 = dnan(n), *dpd2 = dnan(n);
        CHECK_OK(g_gpu->nn->attn_softmax_fwd(g_gpu, dp2, dpd2, d_s, d_mask, a.causal, a.B, a.nh,
                                             a.Tq, a.T, scale, a.drop_p, seed, a.offset));
        expect_bits("attn_softmax_fwd p run twice", gp, down(dp2, n), n);
        float *dsi = upf(s, n);
        CHECK_OK(g_gpu->nn->attn_softmax_fwd(g_gpu, dsi, dpd2, dsi, d_mask, a.causal, a.B, a.nh,
                                             a.Tq, a.T, scale, a.drop_p, seed, a.offset));
        expect_bits("attn_softmax_fwd p over s", gp, down(dsi, n), n);

        /* backward from cpu's p on both: pd regenerated bit for bit; ds =
         * scale p (dp - dot) with dp = dpd * mult the same bits and dot =
         * sum dp p (T fma terms, other order) T eps D apart, D = sum |dp
         * p|; dp - dot rounds u |dp - dot| a side, the two products 2 u
         * |ds| a side. p = 0 (masked): ds exactly 0. */
        float *d_p = upf(cp, n), *d_dpd = upf(dpd, n);
        float *cds = fnew(n), *cpd2 = fnew(n), *dds = dnan(n), *dpd3 = dnan(n);
        CHECK_OK(g_cpu->nn->attn_softmax_bwd(g_cpu, cds, cpd2, dpd, cp, a.B, a.nh, a.Tq, a.T,
                                             scale, a.drop_p, seed, a.offset));
        CHECK_OK(g_gpu->nn->attn_softmax_bwd(g_gpu, dds, dpd3, d_dpd, d_p, a.B, a.nh, a.Tq, a.T,
                                             scale, a.drop_p, seed, a.offset));
        expect_bits("attn_softmax_bwd pd", cpd2, down(dpd3, n), n);
        double *tds = dnew(n);
        for (int64_t r = 0; r < rows; r++) {
            double D = 0, dot = 0;
            for (int j = 0; j < a.T; j++) {
                size_t i = (size_t)r * a.T + j;
                double dpv = (double)(dpd[i] * mult[i]);
                D += fabs(dpv * cp[i]);
                dot += dpv * cp[i];
            }
            for (int j = 0; j < a.T; j++) {
                size_t i = (size_t)r * a.T + j;
                double dpv = (double)(dpd[i] * mult[i]);
                tds[i] = SLACK * (fabs(scale * (double)cp[i]) *
                                      (a.T * EPS * D + EPS * (fabs(dpv) + fabs(dot))) +
                                  2 * EPS * fabs((double)cds[i]));
            }
        }
        float *gds = down(dds, n);
        expect_within("attn_softmax_bwd ds", shape, cds, gds, tds, n);
        /* ds over dpd */
        float *dal = upf(dpd, n);
        CHECK_OK(g_gpu->nn->attn_softmax_bwd(g_gpu, dal, NULL, dal, d_p, a.B, a.nh, a.Tq, a.T,
                                             scale, a.drop_p, seed, a.offset));
        expect_bits("attn_softmax_bwd ds over dpd", gds, down(dal, n), n);
        release_all();
    }
    float h[4] = {0, 0, 0, 0}, *d = upf(h, 4);
    EXPECT_SAME_ERROR("pd is NULL but dropout",
                      g_cpu->nn->attn_softmax_fwd(g_cpu, h, NULL, h, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  0.1f, 1, 0),
                      g_gpu->nn->attn_softmax_fwd(g_gpu, d, NULL, d, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  0.1f, 1, 0));
    EXPECT_SAME_ERROR("attn_softmax_fwd: dropout probability must be in [0, 1), got 1",
                      g_cpu->nn->attn_softmax_fwd(g_cpu, h, h, h, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  1.0f, 1, 0),
                      g_gpu->nn->attn_softmax_fwd(g_gpu, d, d, d, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  1.0f, 1, 0));
    EXPECT_SAME_ERROR("attn_softmax_bwd: dropout probability must be in [0, 1), got 2",
                      g_cpu->nn->attn_softmax_bwd(g_cpu, h, NULL, h, h, 1, 1, 2, 2, 1.0f, 2.0f,
                                                  1, 0),
                      g_gpu->nn->attn_softmax_bwd(g_gpu, d, NULL, d, d, 1, 1, 2, 2, 1.0f, 2.0f,
                                                  1, 0));
    release_all();
}

/* ---- cross-entropy ---- */

/* One xent case on both backends: forward within its bounds (or exact where
 * said), backward bit for bit from the same probs and wsum. sum_exact: the
 * logits are 0 or -inf, so every exponential is exactly 1 or 0 (expf(0) = 1
 * and expf(-inf) = +0 in C's Annex F and in CUDA's documentation; ds_expf
 * gives the same) and the row sums are exact integers on both sides. */
static void xent_case(const char *shape, const float *z, const int32_t *y, const float *w, int R,
                      int C, bool sum_exact) {
    size_t n = (size_t)R * C;
    float cl = -1, cw = -1, *cp = fnew(n), *crl = fnew(R);
    CHECK_OK(g_cpu->nn->xent_fwd(g_cpu, &cl, &cw, cp, crl, z, y, w, R, C, IGN));
    float *d_z = upf(z, n), *d_w = w ? upf(w, R) : NULL;
    int32_t *d_y = upi(y, R);
    float *dp = dnan(n), *drl = dnan(R), *d_l = dnan(1), *d_wsum = dnan(1);
    CHECK_OK(g_gpu->nn->xent_fwd(g_gpu, d_l, d_wsum, dp, drl, d_z, d_y, d_w, R, C, IGN));
    float *gp = down(dp, n), *grl = down(drl, R), *gl = down(d_l, 1), *gw = down(d_wsum, 1);
    /* Per row: the max and z - max are the same bits on both; each side's
     * exponential (CUDA's expf, cpu's libm expf or ds_expf) is within 2 ulp:
     * e_j 4 eps apart relative; S (C terms in another order) (C - 1) eps
     * more, unless exact; log S 1 ulp a side (CUDA, glibc), lse = max +
     * log S one rounding a side. Then row loss = lse - z_y one rounding;
     * p_j, as expf(z_j - lse) (the argument's rounding, 2 ulp a side) or as
     * e_j / S (the e_j and S above, 2 roundings a side), within those terms
     * plus 4 eps. */
    double *tp = dnew(n), *trl = dnew(R), num = 0, den = 0;
    for (int r = 0; r < R; r++) {
        const float *zr = z + (size_t)r * C;
        double mx = -INFINITY, S = 0;
        for (int c = 0; c < C; c++) mx = fmax(mx, (double)zr[c]);
        for (int c = 0; c < C; c++) S += exp((double)zr[c] - mx);
        double lse = mx + log(S);
        double dlse = (sum_exact ? 0.0 : (C + 3) * EPS) + 2 * EPS * fabs(log(S)) + EPS * fabs(lse);
        for (int c = 0; c < C; c++) {
            double pr = exp((double)zr[c] - lse);
            tp[(size_t)r * C + c] =
                pr == 0.0 ? 0.0 : SLACK * pr * (dlse + EPS * fabs((double)zr[c] - lse) + 4 * EPS);
        }
        bool counted = y[r] != IGN;
        trl[r] = counted ? SLACK * (dlse + EPS * fabs(lse - zr[y[r]])) : 0.0;
        double wr = w ? w[r] : 1.0;
        if (counted) num += wr * trl[r], den += wr;
    }
    expect_within(sum_exact ? "xent_fwd probs (exact sums)" : "xent_fwd probs", shape, cp, gp, tp,
                  n);
    expect_within(sum_exact ? "xent_fwd row_loss (exact sums)" : "xent_fwd row_loss", shape, crl,
                  grl, trl, R);
    /* the loss: a weighted mean of the row losses (each at most trl[r]
     * apart), summed in double (1e-16 relative), rounded to float once */
    double tl = (den > 0 ? num / den : 0.0) + EPS * fabs((double)cl);
    expect_within("xent_fwd loss", shape, &cl, gl, &tl, 1);
    /* the weights' sum: dyadic weights (k / 8) add exactly in any order */
    expect_bits("xent_fwd wsum", &cw, gw, 1);
    /* the same bits twice */
    float *dp2 = dnan(n), *drl2 = dnan(R), *d_lw = dnan(1), *d_ww = dnan(1);
    CHECK_OK(g_gpu->nn->xent_fwd(g_gpu, d_lw, d_ww, dp2, drl2, d_z, d_y, d_w, R, C, IGN));
    expect_bits("xent_fwd probs run twice", gp, down(dp2, n), n);
    expect_bits("xent_fwd loss run twice", gl, down(d_lw, 1), 1);

    /* backward from cpu's probs and wsum: the same element formula */
    const float scale = 3.0f;
    float *cd = fnew(n), *d_pc = upf(cp, n), *d_wc = upf(&cw, 1), *dd = dnan(n);
    CHECK_OK(g_cpu->nn->xent_bwd(g_cpu, cd, cp, &cw, y, w, R, C, IGN, scale));
    CHECK_OK(g_gpu->nn->xent_bwd(g_gpu, dd, d_pc, d_wc, d_y, d_w, R, C, IGN, scale));
    expect_bits("xent_bwd", cd, down(dd, n), n);
    /* dlogits over probs */
    CHECK_OK(g_gpu->nn->xent_bwd(g_gpu, d_pc, d_pc, d_wc, d_y, d_w, R, C, IGN, scale));
    expect_bits("xent_bwd over probs", cd, down(d_pc, n), n);
}

static void test_xent(void) {
    /* rows, classes: tiny, one class, > 256 classes (the block), an LM head */
    const int shapes[][2] = {{3, 3}, {1, 1}, {5, 257}, {37, 1000}, {64, 50257}, {0, 10}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)R * C;
        for (int variant = 0; variant < 3; variant++) {
            /* 0: random logits, no weights; 1: random, dyadic weights and
             * ignored rows; 2: logits 0 / -inf (exact sums), weights */
            char shape[64];
            snprintf(shape, sizeof shape, "R=%d C=%d variant %d", R, C, variant);
            float *z = frandn(n, 3.0), *w = variant ? fnew(R) : NULL;
            int32_t *y = (int32_t *)hnew((size_t)R * 4);
            for (int r = 0; r < R; r++) {
                y[r] = (int32_t)((r * 977u + 13u) % (unsigned)C);
                if (variant && r % 4 == 1) y[r] = IGN;
                if (w) w[r] = (float)(r % 17) / 8.0f;
            }
            if (variant == 2) {
                for (int r = 0; r < R; r++)
                    for (int c = 0; c < C; c++)
                        z[(size_t)r * C + c] =
                            (r == 0 || (c * 131 + r * 7) % 5 == 0 || c == y[r]) ? 0.0f : -INFINITY;
            }
            xent_case(shape, z, y, w, R, C, variant == 2);
            release_all();
        }
    }
    /* every row ignored: loss 0, weight 0, gradient 0 on both */
    {
        const int R = 5, C = 300;
        float *z = frandn((size_t)R * C, 1.0);
        int32_t y[5] = {IGN, IGN, IGN, IGN, IGN};
        xent_case("all ignored", z, y, NULL, R, C, false);
        float l = -1, wsum = -1, *d_l = upf(&l, 1), *d_w = upf(&l, 1);
        float *dp = upf(z, (size_t)R * C), *drl = upf(z, R);
        CHECK_OK(g_gpu->nn->xent_fwd(g_gpu, d_l, d_w, dp, drl, upf(z, (size_t)R * C), upi(y, R),
                                     NULL, R, C, IGN));
        l = down(d_l, 1)[0];
        wsum = down(d_w, 1)[0];
        CHECK(l == 0.0f && wsum == 0.0f, "cuda xent, all ignored: loss %g, weight %g", (double)l,
              (double)wsum);
        float *dd = upf(z, (size_t)R * C);
        CHECK_OK(g_gpu->nn->xent_bwd(g_gpu, dd, dp, d_w, upi(y, R), NULL, R, C, IGN, 1.0f));
        float *g = down(dd, (size_t)R * C);
        int nz = 0;
        for (int i = 0; i < R * C; i++) nz += g[i] != 0.0f;
        CHECK(nz == 0, "cuda xent, all ignored: %d non-zero gradients", nz);
        release_all();
    }
    /* bad labels: the same message naming the first bad row (cuda keeps
     * the lowest row of all bad ones); -1 is not the ignore index */
    {
        const int R = 6, C = 7;
        float *z = frandn((size_t)R * C, 1.0), l = 0, wsum = 0, *p = fnew((size_t)R * C);
        float *rl = fnew(R);
        float *d_z = upf(z, (size_t)R * C), *d_l = upf(&l, 1), *d_w = upf(&l, 1);
        float *d_p = upf(p, (size_t)R * C), *d_rl = upf(rl, R);
        const int32_t bad1[6] = {2, 7, 0, IGN, 9, 1}, bad2[6] = {2, IGN, 0, -1, 1, 1};
        EXPECT_SAME_ERROR("label 7 of row 1 is outside [0, 7)",
                          g_cpu->nn->xent_fwd(g_cpu, &l, &wsum, p, rl, z, bad1, NULL, R, C, IGN),
                          g_gpu->nn->xent_fwd(g_gpu, d_l, d_w, d_p, d_rl, d_z, upi(bad1, R), NULL,
                                              R, C, IGN));
        EXPECT_SAME_ERROR("label -1 of row 3",
                          g_cpu->nn->xent_fwd(g_cpu, &l, &wsum, p, rl, z, bad2, NULL, R, C, IGN),
                          g_gpu->nn->xent_fwd(g_gpu, d_l, d_w, d_p, d_rl, d_z, upi(bad2, R), NULL,
                                              R, C, IGN));
        EXPECT_SAME_ERROR("no labels",
                          g_cpu->nn->xent_fwd(g_cpu, &l, &wsum, p, rl, z, NULL, NULL, R, C, IGN),
                          g_gpu->nn->xent_fwd(g_gpu, d_l, d_w, d_p, d_rl, d_z, NULL, NULL, R, C,
                                              IGN));
        /* the flag is reset: good labels pass after bad ones */
        const int32_t good[6] = {2, 6, 0, IGN, 5, 1};
        CHECK_OK(g_gpu->nn->xent_fwd(g_gpu, d_l, d_w, d_p, d_rl, d_z, upi(good, R), NULL, R, C,
                                     IGN));
        release_all();
    }
}

/* ---- rows: strided copies, shifted labels ---- */

static void test_rows(void) {
    /* rows, width, src_ld, dst_ld: [CLS] rows out of [B, T, H], padded
     * strides, one element, none */
    const int shapes[][4] = {{4, 130, 40 * 130, 130}, {300, 257, 300, 260}, {1, 1, 1, 1},
                             {0, 5, 5, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], W = shapes[s][1], sld = shapes[s][2], dld = shapes[s][3];
        size_t ns = R ? (size_t)(R - 1) * sld + W : 0, nd = R ? (size_t)(R - 1) * dld + W : 0;
        float *src = frandn(ns, 1.0), *dst0 = frandn(nd, 1.0), *d_src = upf(src, ns);
        for (int acc = 0; acc < 2; acc++) {
            float *c = fcopy(dst0, nd), *d = upf(dst0, nd);
            CHECK_OK(g_cpu->nn->copy_rows(g_cpu, c, dld, src, sld, R, W, acc));
            CHECK_OK(g_gpu->nn->copy_rows(g_gpu, d, dld, d_src, sld, R, W, acc));
            /* the whole destination: the gaps between rows untouched too */
            expect_bits(acc ? "copy_rows accumulate" : "copy_rows", c, down(d, nd), nd);
        }
        release_all();
    }
    const int lshapes[][2] = {{3, 1}, {4, 1000}, {1, 2}, {0, 5}};
    for (size_t s = 0; s < sizeof lshapes / sizeof lshapes[0]; s++) {
        int B = lshapes[s][0], T = lshapes[s][1];
        size_t n = (size_t)B * T;
        int32_t *src = (int32_t *)hnew(n * 4), *c = (int32_t *)hnew(n * 4);
        for (size_t i = 0; i < n; i++) src[i] = (int32_t)(rnd_u64() % 50257), c[i] = -7;
        int32_t *d = upi(c, n);
        CHECK_OK(g_cpu->nn->shift_labels(g_cpu, c, src, B, T, IGN));
        CHECK_OK(g_gpu->nn->shift_labels(g_gpu, d, upi(src, n), B, T, IGN));
        int32_t *g = (int32_t *)down((const float *)d, n); /* 4-byte elements either way */
        CHECK(n == 0 || memcmp(c, g, n * 4) == 0, "shift_labels B=%d T=%d differs from cpu", B,
              T);
        release_all();
    }
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("test_nn_cuda: no CUDA device visible, skipped\n");
        return 77;
    }
    ds_backend_desc dc = {DS_BACKEND_CPU, 0, 2, NULL};
    ds_backend_desc dg = {DS_BACKEND_CUDA, 0, 0, NULL};
    REQUIRE_OK(ds_backend_create(&dc, &g_cpu));
    REQUIRE_OK(ds_backend_create(&dg, &g_gpu));
    CHECK(strcmp(g_gpu->ops->name, "cuda") == 0 && g_gpu->nn != g_cpu->nn,
          "the cuda backend has no model kernels of its own (name %s)", g_gpu->ops->name);
    test_embedding();
    test_bcast_add();
    test_mean_pool();
    test_bias_act();
    test_dropout();
    test_layernorm();
    test_attn_softmax();
    test_xent();
    test_rows();
    printf("max |cuda - cpu| / bound per bounded check (<= 1 passes):\n");
    for (int i = 0; i < g_nuse; i++) printf("  %-34s %.3g\n", g_use[i].what, g_use[i].worst);
    ds_backend_destroy(g_gpu);
    ds_backend_destroy(g_cpu);
    return test_finish("test_nn_cuda");
}
