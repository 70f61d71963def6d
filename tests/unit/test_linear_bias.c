/* ds_linear_bias_fwd (models/modules.h): y = x W^T + b through the
 * backend's gemm_bias slot, the bias joining the GEMM's sums as if written
 * into y's rows first with the GEMM adding to them (beta 1).
 *
 *   - with fp32 inputs, every element against the double-precision
 *     x W^T + b, at the k of BERT-mini (256, one block of OpenBLAS's k
 *     loop), of GPT-2 small (768, past it: the bias then joins the first
 *     block's sum) and odd shapes, with x a strided view (ldx > in, as the
 *     [CLS] rows of [B, T, H]);
 *   - y's old contents never reach the result (y starts as NaN);
 *   - b NULL is ds_linear_fwd with beta 0, bit for bit;
 *   - with fp32 and bf16 GEMM inputs (the dot product's sums started from
 *     the bias on a CPU with AVX512-BF16, the rows and beta 1 elsewhere),
 *     the bits of b's rows written into y and ds_linear_fwd with beta 1;
 *   - at 1 and 2 threads;
 *   - arguments the slot refuses (lda or ldb too small, C NULL) are refused
 *     before the bias rows are written: C keeps its bits.
 *
 * Tolerance: gemm_ref_at's bound with beta 1 and c0 = b[j], (k + 2) eps
 * (sum |x w| + |b|): the k additions of the product and the one of the bias,
 * each rounding at most eps relative to the running magnitude, in whatever
 * order the GEMM sums (tests/unit/test_backend_gemm.c derives it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/modules.h"
#include "tests/unit/gemm_ref.h"
#include "tests/unit/test_rand.h"
#include "tests/unit/test_util.h"

/* With fp32 inputs every element within the bound of the double product;
 * with either, the bits of b's rows written first and ds_linear_fwd with
 * beta 1 (gemm_bias's definition), and no bias the bits of the plain
 * product. */
static void run_case(ds_backend *be, int N, int in, int out, int ldx) {
    const size_t ny = (size_t)N * out;
    float *x = test_frand_buf((size_t)N * ldx, -1.0f, 1.0f);
    float *W = test_frand_buf((size_t)out * in, -1.0f, 1.0f);
    float *b = test_frand_buf((size_t)out, -4.0f, 4.0f); /* larger than a product term */
    float *y = malloc(ny * sizeof *y), *y0 = malloc(ny * sizeof *y0);
    if (!y || !y0) TEST_DIE("out of memory");
    const char *in_t = be->gemm_inputs == DS_BF16 ? "bf16" : "fp32";
    for (size_t i = 0; i < ny; i++) y[i] = NAN;

    CHECK_OK(ds_linear_bias_fwd(be, y, x, ldx, W, b, N, in, out));
    int bad = 0;
    for (int i = 0; i < N && bad < 5 && be->gemm_inputs == DS_F32; i++)
        for (int j = 0; j < out && bad < 5; j++) {
            double tol, want = gemm_ref_at(false, true, in, 1.0f, x + (size_t)i * ldx, ldx,
                                           W + (size_t)j * in, in, 1.0f, b[j], 0, 0, &tol);
            float got = y[(size_t)i * out + j];
            if (!(fabs(got - want) <= tol)) {
                CHECK(0, "%d x %d -> %d (ldx %d): y[%d][%d] = %.9g, want %.9g +- %.3g", N, in,
                      out, ldx, i, j, got, want, tol);
                bad++;
            }
        }
    for (int i = 0; i < N; i++) memcpy(y0 + (size_t)i * out, b, (size_t)out * sizeof *b);
    CHECK_OK(ds_linear_fwd(be, y0, x, ldx, W, N, in, out, 1.0f));
    CHECK(memcmp(y, y0, ny * sizeof *y) == 0,
          "%s %d x %d -> %d (ldx %d): not the bits of the bias rows + GEMM with beta 1", in_t, N,
          in, out, ldx);

    /* no bias: exactly the plain product */
    for (size_t i = 0; i < ny; i++) y[i] = NAN;
    CHECK_OK(ds_linear_bias_fwd(be, y, x, ldx, W, NULL, N, in, out));
    CHECK_OK(ds_linear_fwd(be, y0, x, ldx, W, N, in, out, 0.0f));
    CHECK(memcmp(y, y0, ny * sizeof *y) == 0, "%s %d x %d -> %d: no bias differs from "
          "ds_linear_fwd", in_t, N, in, out);
    free(x), free(W), free(b), free(y), free(y0);
}

/* A refused gemm_bias writes nothing: C keeps its bits, and the message
 * names the slot and what is wrong. */
static void expect_refused(ds_backend *be, const char *what, const char *needle, bool tb,
                           int lda, int ldb, bool null_c) {
    enum { M = 20, N = 16, K = 8 };
    float A[M * K], B[K * N], bias[N], C[M * N], C0[M * N];
    for (int i = 0; i < M * K; i++) A[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)(i % 5) - 2.0f;
    for (int j = 0; j < N; j++) bias[j] = (float)j;
    for (int i = 0; i < M * N; i++) C[i] = C0[i] = -0.5f * (float)i;
    ds_clear_error();
    ds_status st = be->ops->gemm_bias(be, false, tb, M, N, K, A, lda, B, ldb, bias,
                                      null_c ? NULL : C);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "gemm_bias") &&
              strstr(ds_last_error(), needle),
          "%s inputs %s: got %s \"%s\", want INVALID_ARG naming gemm_bias and \"%s\"",
          be->gemm_inputs == DS_BF16 ? "bf16" : "fp32", what, ds_status_to_string(st),
          ds_last_error(), needle);
    CHECK(memcmp(C, C0, sizeof C) == 0, "%s: the refused call wrote into C", what);
    ds_clear_error();
}

static void test_refusals(ds_backend *be) {
    expect_refused(be, "lda < k", "lda=7", false, 7, 16, false);
    expect_refused(be, "ldb < n", "ldb=15", false, 8, 15, false);
    expect_refused(be, "ldb < k with B transposed", "ldb=4", true, 8, 4, false);
    expect_refused(be, "C NULL", "NULL", false, 8, 16, true);
}

int main(void) {
    for (int nt = 1; nt <= 2; nt++) {
        ds_backend *be = test_cpu_backend(nt, NULL);
        for (int bf = 0; bf < 2; bf++) {
            REQUIRE_OK(ds_backend_set_gemm_inputs(be, bf ? DS_BF16 : DS_F32));
            run_case(be, 64, 256, 256, 256);  /* BERT-mini's q, k, v at 64 rows */
            run_case(be, 16, 256, 256, 2048); /* the [CLS] rows of [B, 8, 256] */
            run_case(be, 24, 768, 2304, 768); /* GPT-2 small's c_attn, k past a block */
            run_case(be, 7, 33, 5, 40);       /* odd: a classifier head */
            run_case(be, 1, 1, 16, 1);        /* k = 1 */
            test_refusals(be);
        }
        ds_backend_destroy(be);
    }
    return test_finish("test_linear_bias");
}
