/* The row-reduction kernels of the cuda backend against the cpu ones: layer
 * norm (row statistics, dgamma / dbeta column sums), attention softmax with
 * its dropout masks, cross-entropy. Part of test_nn_cuda (its main is in
 * test_nn_cuda.cu, with the reasoning of the bounds used here). */
#include "tests/unit/nn_cuda_harness.cuh"

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
                                             a.T, scale, a.drop_p, seed, a.offset, NULL));
        CHECK_OK(g_gpu->nn->attn_softmax_fwd(g_gpu, dp, dpdv, d_s, d_mask, a.causal, a.B, a.nh,
                                             a.Tq, a.T, scale, a.drop_p, seed, a.offset, NULL));
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
                                             a.Tq, a.T, scale, a.drop_p, seed, a.offset, NULL));
        expect_bits("attn_softmax_fwd p run twice", gp, down(dp2, n), n);
        float *dsi = upf(s, n);
        CHECK_OK(g_gpu->nn->attn_softmax_fwd(g_gpu, dsi, dpd2, dsi, d_mask, a.causal, a.B, a.nh,
                                             a.Tq, a.T, scale, a.drop_p, seed, a.offset, NULL));
        expect_bits("attn_softmax_fwd p over s", gp, down(dsi, n), n);
        /* the keep mask in bits (nn.h): cpu's and cuda's words the same,
         * every key's bit (causal and padded ones too); compared as floats
         * of the same bytes */
        size_t kw = ds_dropout_mask_bytes(rows, a.T) / 4;
        float *ck = fnew(kw), *dk = dnan(kw);
        if (a.drop_p > 0.0f) {
            CHECK_OK(g_cpu->nn->attn_softmax_fwd(g_cpu, fnew(n), fnew(n), s, hm, a.causal, a.B,
                                                 a.nh, a.Tq, a.T, scale, a.drop_p, seed, a.offset,
                                                 (uint32_t *)ck));
            CHECK_OK(g_gpu->nn->attn_softmax_fwd(g_gpu, dp2, dpd2, d_s, d_mask, a.causal, a.B,
                                                 a.nh, a.Tq, a.T, scale, a.drop_p, seed, a.offset,
                                                 (uint32_t *)dk));
            expect_bits("attn_softmax_fwd keep mask", ck, down(dk, kw), kw);
            expect_bits("attn_softmax_fwd p with a keep mask", gp, down(dp2, n), n);
        }

        /* backward from cpu's p on both: pd regenerated bit for bit; ds =
         * scale p (dp - dot) with dp = dpd * mult the same bits and dot =
         * sum dp p (T fma terms, other order) T eps D apart, D = sum |dp
         * p|; dp - dot rounds u |dp - dot| a side, the two products 2 u
         * |ds| a side. p = 0 (masked): ds exactly 0. */
        float *d_p = upf(cp, n), *d_dpd = upf(dpd, n);
        float *cds = fnew(n), *cpd2 = fnew(n), *dds = dnan(n), *dpd3 = dnan(n);
        CHECK_OK(g_cpu->nn->attn_softmax_bwd(g_cpu, cds, cpd2, dpd, cp, a.B, a.nh, a.Tq, a.T,
                                             scale, a.drop_p, seed, a.offset, NULL));
        CHECK_OK(g_gpu->nn->attn_softmax_bwd(g_gpu, dds, dpd3, d_dpd, d_p, a.B, a.nh, a.Tq, a.T,
                                             scale, a.drop_p, seed, a.offset, NULL));
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
                                             scale, a.drop_p, seed, a.offset, NULL));
        expect_bits("attn_softmax_bwd ds over dpd", gds, down(dal, n), n);
        if (a.drop_p > 0.0f) { /* from the keep mask: the stream's bits */
            float *dds2 = dnan(n), *dpd4 = dnan(n);
            CHECK_OK(g_gpu->nn->attn_softmax_bwd(g_gpu, dds2, dpd4, d_dpd, d_p, a.B, a.nh, a.Tq,
                                                 a.T, scale, a.drop_p, seed, a.offset,
                                                 (const uint32_t *)dk));
            expect_bits("attn_softmax_bwd ds from the keep mask", gds, down(dds2, n), n);
            expect_bits("attn_softmax_bwd pd from the keep mask", cpd2, down(dpd4, n), n);
        }
        release_all();
    }
    float h[4] = {0, 0, 0, 0}, *d = upf(h, 4);
    EXPECT_SAME_ERROR("pd is NULL but dropout",
                      g_cpu->nn->attn_softmax_fwd(g_cpu, h, NULL, h, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  0.1f, 1, 0, NULL),
                      g_gpu->nn->attn_softmax_fwd(g_gpu, d, NULL, d, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  0.1f, 1, 0, NULL));
    EXPECT_SAME_ERROR("attn_softmax_fwd: dropout probability must be in [0, 1), got 1",
                      g_cpu->nn->attn_softmax_fwd(g_cpu, h, h, h, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  1.0f, 1, 0, NULL),
                      g_gpu->nn->attn_softmax_fwd(g_gpu, d, d, d, NULL, false, 1, 1, 2, 2, 1.0f,
                                                  1.0f, 1, 0, NULL));
    EXPECT_SAME_ERROR("attn_softmax_bwd: dropout probability must be in [0, 1), got 2",
                      g_cpu->nn->attn_softmax_bwd(g_cpu, h, NULL, h, h, 1, 1, 2, 2, 1.0f, 2.0f,
                                                  1, 0, NULL),
                      g_gpu->nn->attn_softmax_bwd(g_gpu, d, NULL, d, d, 1, 1, 2, 2, 1.0f, 2.0f,
                                                  1, 0, NULL));
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
     * the lowest row of all bad ones); -1 is not the ignore index; nothing
     * written on either backend */
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
        expect_bits("xent_fwd refused: cuda probs untouched", p, down(d_p, (size_t)R * C),
                    (size_t)R * C);
        expect_bits("xent_fwd refused: cuda row losses untouched", rl, down(d_rl, R), R);
        expect_bits("xent_fwd refused: cuda loss untouched", &l, down(d_l, 1), 1);
        expect_bits("xent_fwd refused: cuda weight sum untouched", &wsum, down(d_w, 1), 1);
        { /* and the cpu's, the reference above, still the zeros they started as */
            int wrote = l != 0.0f || wsum != 0.0f;
            for (int i = 0; i < R * C; i++) wrote += p[i] != 0.0f;
            for (int i = 0; i < R; i++) wrote += rl[i] != 0.0f;
            CHECK(wrote == 0, "xent_fwd refused: the cpu wrote %d outputs", wrote);
        }
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

int nn_cuda_reductions(ds_backend *cpu, ds_backend *gpu) {
    g_cpu = cpu;
    g_gpu = gpu;
    test_layernorm();
    test_attn_softmax();
    test_xent();
    print_bound_use("row reductions");
    return test_fails();
}
