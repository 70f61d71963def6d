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
 * every order). gemm_bias: the bits of the bias rows and cuda's own GEMM
 * with beta 1, which define it (and the cpu's within a GEMM's bound).
 * dropout_ln_fwd: y bit for bit the cpu's, z, mean and rstd bit for bit the
 * cuda dropout_fwd and layernorm_fwd it is made of.
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
 * the same message (bad ids, bad labels, unknown activation, dropout p).
 *
 * This file holds the element-wise kernels and main; nn_cuda_reductions.cu
 * the row reductions (layer norm, attention softmax, cross-entropy). */
#include "tests/unit/nn_cuda_harness.cuh"

/* nn_cuda_reductions.cu: its checks; returns how many failed. */
int nn_cuda_reductions(ds_backend *cpu, ds_backend *gpu);

/* ---- embedding ---- */

static void test_embedding(void) {
    /* vocab, width, positions; the cases with n > 1000 are nearly all one id: a table
     * row summed from thousands of positions, where any order but the cpu's (float
     * atomics, say) would show in the bits */
    const int shapes[][3] = {{50, 96, 400}, {1000, 769, 37}, {3, 1, 1}, {7, 300, 0},
                             {4, 64, 4096}, {21128, 256, 32768}}; /* last: BERT-mini, 256 x 128 */
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
     * later changes nothing), and neither backend writes its output. */
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
        float *g = down(d, (size_t)n * H), *zeros = fnew((size_t)n * H);
        expect_bits("embedding_fwd refused: cpu output untouched", zeros, c, (size_t)n * H);
        expect_bits("embedding_fwd refused: cuda output untouched", zeros, g, (size_t)n * H);
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

/* ---- gemm_bias (backend.h) ----
 * On cuda the slot writes the bias rows and runs the GEMM adding to them
 * (beta 1): the bits of those two calls made by hand, over old contents in
 * C, with op(B) stored both ways, fp32 and bf16 inputs. Against the cpu's
 * gemm_bias, whose sums run in another order, each element within
 * 2 (k + 2) eps (sum_k |a b| + |bias|): each side's k products and bias,
 * summed in any order, within (k + 1) eps of the exact sum, with the
 * product's own rounding (test_backend_cuda's GEMM bound); with bf16
 * inputs both sides multiply the same rounded values, whose magnitudes are
 * within (1 + 2^-8)^2 < 1.01 of the fp32 ones. And both refuse the same bad
 * arguments before writing anything. */
static void gemm_bias_bound(double *tol, const float *A, const float *B, bool tb,
                            const float *bias, int m, int n, int k, double widen) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double mag = fabs((double)bias[j]);
            for (int p = 0; p < k; p++)
                mag += widen * fabs((double)A[(size_t)i * k + p] *
                                    (double)B[tb ? (size_t)j * k + p : (size_t)p * n + j]);
            tol[(size_t)i * n + j] = SLACK * 2.0 * (k + 2) * EPS * mag;
        }
}

static void test_gemm_bias_refusals(const float *dA, const float *dB, const float *db) {
    const int m = 20, n = 16, k = 8;
    float *hA = frandn((size_t)m * k, 1.0), *hB = frandn((size_t)k * n, 1.0);
    float *hb = frandn(n, 1.0), *old = frandn((size_t)m * n, 1.0);
    const struct {
        const char *what, *needle;
        int lda, ldb;
        bool null_c;
    } bad[] = {{"lda < k", "lda=7", 7, 16, false},
               {"ldb < n", "ldb=15", 8, 15, false},
               {"C NULL", "NULL", 8, 16, true}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        float *hc = fcopy(old, (size_t)m * n), *dc = upf(old, (size_t)m * n);
        ds_clear_error();
        ds_status sc = g_cpu->ops->gemm_bias(g_cpu, false, false, m, n, k, hA, bad[i].lda, hB,
                                             bad[i].ldb, hb, bad[i].null_c ? NULL : hc);
        char mc[512];
        snprintf(mc, sizeof mc, "%s", ds_last_error());
        ds_clear_error();
        ds_status sg = g_gpu->ops->gemm_bias(g_gpu, false, false, m, n, k, dA, bad[i].lda, dB,
                                             bad[i].ldb, db, bad[i].null_c ? NULL : dc);
        char mg[512];
        snprintf(mg, sizeof mg, "%s", ds_last_error());
        ds_clear_error();
        CHECK(sc == DS_ERR_INVALID_ARG && sg == sc && strstr(mc, "cpu gemm_bias") &&
                  strstr(mg, "cuda gemm_bias") && strstr(mc, bad[i].needle) &&
                  strstr(mg, bad[i].needle),
              "gemm_bias %s: cpu %s \"%s\", cuda %s \"%s\" (want INVALID_ARG with \"%s\")",
              bad[i].what, ds_status_to_string(sc), mc, ds_status_to_string(sg), mg,
              bad[i].needle);
        expect_bits("gemm_bias refused: C unchanged on cpu", old, hc, (size_t)m * n);
        expect_bits("gemm_bias refused: C unchanged on cuda", old, down(dc, (size_t)m * n),
                    (size_t)m * n);
    }
}

static void test_gemm_bias(void) {
    const int m = 300, n = 200, k = 64;
    const size_t mn = (size_t)m * n;
    float *hA = frandn((size_t)m * k, 1.0), *hB = frandn((size_t)k * n, 1.0);
    float *hb = frandn(n, 1.0), *old = frandn(mn, 1.0);
    float *dA = upf(hA, (size_t)m * k), *dB = upf(hB, (size_t)k * n), *db = upf(hb, n);
    double *tol = dnew(mn);
    for (int bf = 0; bf < 2; bf++) {
        CHECK_OK(ds_backend_set_gemm_inputs(g_gpu, bf ? DS_BF16 : DS_F32));
        CHECK_OK(ds_backend_set_gemm_inputs(g_cpu, bf ? DS_BF16 : DS_F32));
        for (int tb = 0; tb < 2; tb++) {
            const char *name = bf ? (tb ? "gemm_bias bf16, B^T" : "gemm_bias bf16")
                                  : (tb ? "gemm_bias, B^T" : "gemm_bias");
            float *d = upf(old, mn), *d2 = upf(old, mn), *c = fcopy(old, mn);
            const int ldb = tb ? k : n;
            CHECK_OK(g_gpu->ops->gemm_bias(g_gpu, false, tb, m, n, k, dA, k, dB, ldb, db, d));
            CHECK_OK(g_gpu->nn->bcast_add_fwd(g_gpu, d2, db, m, n, false));
            CHECK_OK(g_gpu->ops->gemm(g_gpu, false, tb, m, n, k, 1.0f, dA, k, 0, dB, ldb, 0, 1.0f,
                                      d2, n, 0, 1));
            float *got = down(d, mn);
            expect_bits(name, down(d2, mn), got, mn);
            /* with tb the same array is B stored as n x k (ldb k), on both sides */
            CHECK_OK(g_cpu->ops->gemm_bias(g_cpu, false, tb, m, n, k, hA, k, hB, ldb, hb, c));
            gemm_bias_bound(tol, hA, hB, tb, hb, m, n, k, bf ? 1.01 : 1.0);
            expect_within("gemm_bias against cpu", name, c, got, tol, mn);
        }
    }
    CHECK_OK(ds_backend_set_gemm_inputs(g_gpu, DS_F32));
    CHECK_OK(ds_backend_set_gemm_inputs(g_cpu, DS_F32));
    test_gemm_bias_refusals(dA, dB, db);
    release_all();
}

/* ---- refusals (nn.h: before anything is written) ----
 * The calls test_nn_refusals makes on the cpu: both backends refuse them with
 * the same message, and cuda's output keeps its bits. */
static void test_refusals(void) {
    const size_t n = 4096;
    float *h = frandn(n, 1.0), *hc = fcopy(h, n), *d = upf(h, n), *d2 = upf(h, n);
    const int32_t ids[4] = {0, 1, 2, 3};
    int32_t *d_ids = upi(ids, 4);
    uint32_t hk[64], *dk = (uint32_t *)up(hk, sizeof hk);
    EXPECT_SAME_ERROR("Tq=4 query rows but T=2",
                      g_cpu->nn->attn_softmax_fwd(g_cpu, hc, hc, h, NULL, true, 1, 2, 4, 2, 0.5f,
                                                  0.1f, 7, 0, hk),
                      g_gpu->nn->attn_softmax_fwd(g_gpu, d, d, d2, NULL, true, 1, 2, 4, 2, 0.5f,
                                                  0.1f, 7, 0, dk)); /* both outputs in d, as hc */
    EXPECT_SAME_ERROR("negative size B=-1 nh=-1",
                      g_cpu->nn->attn_softmax_bwd(g_cpu, hc, NULL, h, h, -1, -1, 8, 8, 0.5f, 0.0f,
                                                  7, 0, NULL),
                      g_gpu->nn->attn_softmax_bwd(g_gpu, d, NULL, d2, d2, -1, -1, 8, 8, 0.5f,
                                                  0.0f, 7, 0, NULL));
    EXPECT_SAME_ERROR("overflows the 64-bit counter",
                      g_cpu->nn->dropout_fwd(g_cpu, hc, h, NULL, NULL, 4, 64, 0.1f, 7,
                                             UINT64_MAX - 100, hk),
                      g_gpu->nn->dropout_fwd(g_gpu, d, d2, NULL, NULL, 4, 64, 0.1f, 7,
                                             UINT64_MAX - 100, dk));
    EXPECT_SAME_ERROR("negative size rows=2 width=-64",
                      g_cpu->nn->dropout_bwd(g_cpu, hc, NULL, h, 2, -64, 0.1f, 7, 0, NULL),
                      g_gpu->nn->dropout_bwd(g_gpu, d, NULL, d2, 2, -64, 0.1f, 7, 0, NULL));
    EXPECT_SAME_ERROR("the normalised output is NULL",
                      g_cpu->nn->dropout_ln_fwd(g_cpu, hc, NULL, hc + 512, hc + 520, h, NULL,
                                                NULL, h, h, 4, 64, 0.1f, 7, 0, hk, 1e-5f),
                      g_gpu->nn->dropout_ln_fwd(g_gpu, d, NULL, d + 512, d + 520, d2, NULL, NULL,
                                                d2, d2, 4, 64, 0.1f, 7, 0, dk, 1e-5f));
    EXPECT_SAME_ERROR("dropout probability must be in [0, 1), got 1",
                      g_cpu->nn->dropout_ln_fwd(g_cpu, hc, hc + 64, hc + 512, hc + 520, h, NULL,
                                                NULL, h, h, 4, 0, 1.0f, 7, 0, hk, 1e-5f),
                      g_gpu->nn->dropout_ln_fwd(g_gpu, d, d + 64, d + 512, d + 520, d2, NULL,
                                                NULL, d2, d2, 4, 0, 1.0f, 7, 0, dk, 1e-5f));
    EXPECT_SAME_ERROR("gamma is NULL",
                      g_cpu->nn->layernorm_fwd(g_cpu, hc, hc + 512, hc + 520, h, NULL, h, 4, 64,
                                               1e-5f),
                      g_gpu->nn->layernorm_fwd(g_gpu, d, d + 512, d + 520, d2, NULL, d2, 4, 64,
                                               1e-5f));
    EXPECT_SAME_ERROR("negative size n=4 h=-8",
                      g_cpu->nn->embedding_fwd(g_cpu, hc, h, ids, 4, -8, 4, false),
                      g_gpu->nn->embedding_fwd(g_gpu, d, d2, d_ids, 4, -8, 4, false));
    EXPECT_SAME_ERROR("negative size rows=4 width=-3",
                      g_cpu->nn->bcast_add_fwd(g_cpu, hc, h, 4, -3, false),
                      g_gpu->nn->bcast_add_fwd(g_gpu, d, d2, 4, -3, false));
    EXPECT_SAME_ERROR("dst_ld=4 src_ld=8, both must be >= width=8",
                      g_cpu->nn->copy_rows(g_cpu, hc, 4, h, 8, 3, 8, false),
                      g_gpu->nn->copy_rows(g_gpu, d, 4, d2, 8, 3, 8, false));
    EXPECT_SAME_ERROR("negative size R=4 C=-6",
                      g_cpu->nn->xent_fwd(g_cpu, hc, hc + 1, hc + 8, hc + 64, h, ids, NULL, 4, -6,
                                          IGN),
                      g_gpu->nn->xent_fwd(g_gpu, d, d + 1, d + 8, d + 64, d2, d_ids, NULL, 4, -6,
                                          IGN));
    expect_bits("refused calls: cpu output untouched", h, hc, n);
    expect_bits("refused calls: cuda output untouched", h, down(d, n), n);
    expect_bits("refused calls: cuda inputs untouched", h, down(d2, n), n);
    release_all();
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
                CHECK_OK(g_cpu->nn->dropout_fwd(g_cpu, c, x, hb, hr, R, W, p, seed, off, NULL));
                CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, d, d_x, dbp, drp, R, W, p, seed, off, NULL));
                char what[160];
                snprintf(what, sizeof what, "dropout_fwd %s%s %s", hb ? "bias " : "",
                         hr ? "res" : "", shape);
                float *g = down(d, n);
                expect_bits(what, c, g, n);
                /* in place: y over x, y over res */
                float *dal = upf(x, n);
                CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, dal, dal, dbp, drp, R, W, p, seed, off,
                                                NULL));
                expect_bits("dropout_fwd y over x", g, down(dal, n), n);
                if (hr) {
                    float *dar = upf(res, n);
                    CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, dar, d_x, dbp, dar, R, W, p, seed, off,
                                                    NULL));
                    expect_bits("dropout_fwd y over res", g, down(dar, n), n);
                }
            }
            /* backward: dx the same mask; dbias a column sum of dx */
            float *db0 = frandn(W, 1.0), *cdb = fcopy(db0, W), *ddb = upf(db0, W);
            float *cdx = fnew(n), *ddx = dnan(n);
            CHECK_OK(g_cpu->nn->dropout_bwd(g_cpu, cdx, cdb, dy, R, W, p, seed, off, NULL));
            CHECK_OK(g_gpu->nn->dropout_bwd(g_gpu, ddx, ddb, d_dy, R, W, p, seed, off, NULL));
            float *gdx = down(ddx, n);
            expect_bits("dropout_bwd dx", cdx, gdx, n);
            double *tol = dnew(W);
            colsum_bound(tol, db0, cdx, NULL, R, W);
            expect_within("dropout_bwd dbias", shape, cdb, down(ddb, W), tol, W);
            float *dal = upf(dy, n);
            CHECK_OK(g_gpu->nn->dropout_bwd(g_gpu, dal, NULL, dal, R, W, p, seed, off, NULL));
            expect_bits("dropout_bwd dx over dy", gdx, down(dal, n), n);
            { /* dropout_ln_fwd: the two kernels' bits, y the cpu's (nn.h) */
                float *gm = frandn(W, 0.5), *bt = frandn(W, 0.5), *d_gm = upf(gm, W);
                float *d_bt = upf(bt, W), *y1 = dnan(n), *z1 = dnan(n), *y2 = dnan(n);
                float *z2 = dnan(n), *m1 = dnan(R), *r1 = dnan(R), *m2 = dnan(R), *r2 = dnan(R);
                CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, y1, d_x, d_b, d_res, R, W, p, seed, off,
                                                NULL));
                CHECK_OK(g_gpu->nn->layernorm_fwd(g_gpu, z1, m1, r1, y1, d_gm, d_bt, R, W,
                                                  1e-12f));
                CHECK_OK(g_gpu->nn->dropout_ln_fwd(g_gpu, y2, z2, m2, r2, d_x, d_b, d_res, d_gm,
                                                   d_bt, R, W, p, seed, off, NULL, 1e-12f));
                float *c = fnew(n);
                CHECK_OK(g_cpu->nn->dropout_fwd(g_cpu, c, x, b, res, R, W, p, seed, off, NULL));
                expect_bits("dropout_ln_fwd y", c, down(y2, n), n);
                expect_bits("dropout_ln_fwd z", down(z1, n), down(z2, n), n);
                expect_bits("dropout_ln_fwd mean", down(m1, R), down(m2, R), R);
                expect_bits("dropout_ln_fwd rstd", down(r1, R), down(r2, R), R);
            }
            if (p > 0.0f) { /* the keep mask in bits (nn.h): the same words, dx from it */
                size_t kw = ds_dropout_mask_bytes(R, W) / 4;
                float *ck = fnew(kw), *dk = dnan(kw), *dx2 = dnan(n);
                CHECK_OK(g_cpu->nn->dropout_fwd(g_cpu, fnew(n), x, NULL, NULL, R, W, p, seed, off,
                                                (uint32_t *)ck));
                CHECK_OK(g_gpu->nn->dropout_fwd(g_gpu, dnan(n), d_x, NULL, NULL, R, W, p, seed,
                                                off, (uint32_t *)dk));
                expect_bits("dropout_fwd keep mask", ck, down(dk, kw), kw);
                CHECK_OK(g_gpu->nn->dropout_bwd(g_gpu, dx2, NULL, d_dy, R, W, p, seed, off,
                                                (const uint32_t *)dk));
                expect_bits("dropout_bwd dx from the keep mask", cdx, down(dx2, n), n);
            }
        }
        release_all();
    }
    float h[4] = {0, 0, 0, 0}, *d = upf(h, 4);
    EXPECT_SAME_ERROR("dropout probability must be in [0, 1), got 1",
                      g_cpu->nn->dropout_fwd(g_cpu, h, h, NULL, NULL, 1, 4, 1.0f, 1, 0, NULL),
                      g_gpu->nn->dropout_fwd(g_gpu, d, d, NULL, NULL, 1, 4, 1.0f, 1, 0, NULL));
    EXPECT_SAME_ERROR("dropout probability must be in [0, 1), got -0.5",
                      g_cpu->nn->dropout_bwd(g_cpu, h, NULL, h, 1, 4, -0.5f, 1, 0, NULL),
                      g_gpu->nn->dropout_bwd(g_gpu, d, NULL, d, 1, 4, -0.5f, 1, 0, NULL));
    release_all();
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
    test_gemm_bias();
    test_refusals();
    test_mean_pool();
    test_bias_act();
    test_dropout();
    test_rows();
    print_bound_use("element-wise kernels");
    int fails = nn_cuda_reductions(g_cpu, g_gpu); /* nn_cuda_reductions.cu */
    ds_backend_destroy(g_gpu);
    ds_backend_destroy(g_cpu);
    CHECK(fails == 0, "%d check(s) of nn_cuda_reductions.cu failed (above)", fails);
    return test_finish("test_nn_cuda");
}
