/* The cpu backend's GEMM with bf16 inputs (be->gemm_inputs DS_BF16,
 * backend.h), the reference the cuda tensor-core GEMM is checked against
 * (test_backend_cuda), on its rounding path (DS_CPU_BF16_DOT=0: the path of
 * every CPU without AVX512-BF16; the dot-product path of those with it is
 * test_gemm_dot's):
 *
 *   - the rounding: products that return their input (x * 1, I * X) give
 *     ds_round_bf16 of it element by element (ties to even, carries into
 *     the exponent, overflow to inf, inf, NaN) on every path that rounds:
 *     the own kernel's copies of A, of B and of a transposed B, and the
 *     vectorised, threaded pass before OpenBLAS;
 *   - the same bits as the fp32 GEMM run on inputs rounded beforehand, for
 *     every path of the slot (the variant's own kernel, OpenBLAS one after
 *     another and one per thread), transposes, padded leading dimensions,
 *     batches with gaps between them, overlapping batches (attention's heads
 *     read from one row block) and a shared B (stride 0), at 1 and 2 threads:
 *     rounding happens before the product and changes nothing else;
 *   - within an error bound of the exact (double) product of the rounded
 *     inputs, and measurably off the fp32 product of the unrounded ones;
 *   - its workspace (backend.h): none before the first bf16 GEMM, then
 *     grown to the largest GEMM and not reallocated by smaller ones or
 *     repeats, recorded in the accountant as "workspace" on the device; a
 *     reserved (planned) one used as it is until a larger GEMM grows it
 *     (recorded, peak the new size: the old buffer goes first); a plan is the
 *     largest of its GEMMs' ds_gemm_workspace_of; nothing left recorded
 *     after the backend is destroyed;
 *   - ds_backend_set_gemm_inputs refuses a type other than fp32 / bf16. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "tests/unit/gemm_ref.h"
#include "tests/unit/test_util.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t next_u64(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}
static float frand(void) { /* uniform in [-1, 1), 24 random bits: rarely a bf16 already */
    return (float)((double)(next_u64() >> 40) / (double)(1u << 24) * 2.0 - 1.0);
}


/* ---- the rounding ------------------------------------------------------- */

static const uint32_t k_special[] = {
    0x3f808000u, /* 1 + 2^-8: a tie, rounds down to even 1 */
    0x3f818000u, /* 1 + 3 * 2^-8: a tie, rounds up to even */
    0x3f80ffffu, /* just under the next bf16: up */
    0x3fffffffu, /* rounds up into the exponent: 2 */
    0x7f7f7fffu, /* just under the halfway point: bf16's largest finite */
    0x00000001u, /* smallest subnormal: rounds to 0 */
    0x80008000u, /* a negative subnormal tie: to even, -0 */
    0x7f7fffffu, /* FLT_MAX: past bf16's largest finite, inf (first of the non-finite) */
    0xff800000u, /* -inf */
    0x7f800000u, /* inf */
    0x7fc00001u, /* quiet NaN with payload */
    0xff800001u, /* signalling NaN */
};
#define N_FINITE_SPECIAL 7 /* k_special's values that round to finite ones */

/* n values: the specials (the first `ns` of them), then random bit
 * patterns, any (finite_only false) or those that round to finite values. */
static float *rounding_inputs(size_t n, size_t ns, bool finite_only) {
    float *x = malloc(n * sizeof *x);
    if (!x) TEST_DIE("out of memory");
    for (size_t i = 0; i < n; i++) {
        if (i < ns) {
            x[i] = ds_bits_f32(k_special[i]);
            continue;
        }
        do x[i] = ds_bits_f32((uint32_t)(next_u64() >> 32));
        while (finite_only && !isfinite(ds_round_bf16(x[i])));
    }
    return x;
}

static int check_rounded(const char *path, const float *got, size_t gstride, const float *x,
                         size_t n) {
    for (size_t i = 0; i < n; i++) {
        float want = ds_round_bf16(x[i]), g = got[i * gstride];
        if (isnan(want) ? !isnan(g) : g != want) {
            TEST_FAIL("%s: round(%08x) = %08x (%g), want %08x (%g)", path, ds_f32_bits(x[i]),
                      ds_f32_bits(g), (double)g, ds_f32_bits(want), (double)want);
            return 1;
        }
    }
    return 0;
}

/* The rounding, on every path a value can take, as products that return it
 * exactly (a -0 may come back +0, equal as a value): x * 1 (k = 1), and
 * I * X for k = 8, whose other terms are 0 * x = 0 for the finite values it
 * takes. Paths: the own kernel (cpu_gemm_small.c) rounding A's rows (scalar
 * tails at k = 1), B's panel (its vector copy) and a transposed B's panel
 * (8 x 8 transposes in registers, k = 8); and the pass of cpu_gemm_bf16.c
 * before OpenBLAS (n not a multiple of 16), vectorised along a row of
 * 20,011 values and threaded over rows (more than DS_CPU_PAR_MIN values). */
static void test_rounding(ds_backend *be) {
    enum { M = 20011, N = 20016, NT = 512 };
    const size_t ns = sizeof k_special / sizeof *k_special;
    float one[17], *x = rounding_inputs(N, ns, false);
    float *C = malloc((size_t)M * 17 * 4); /* the largest C below */
    if (!C) TEST_DIE("out of memory");
    for (int j = 0; j < 17; j++) one[j] = 1.0f;
    /* own kernel, A's rows: x (M x 1) times ones (1 x 16) */
    CHECK_OK(be->ops->gemm(be, false, false, M, 16, 1, 1.0f, x, 1, 0, one, 16, 0, 0.0f, C, 16, 0,
                           1));
    check_rounded("own kernel, A", C, 16, x, M);
    /* own kernel, B's panel: 1 times x (1 x N) */
    CHECK_OK(be->ops->gemm(be, false, false, 1, N, 1, 1.0f, one, 1, 0, x, N, 0, 0.0f, C, N, 0, 1));
    check_rounded("own kernel, B", C, 1, x, N);
    /* own kernel, transposed B (N x 1) */
    CHECK_OK(be->ops->gemm(be, false, true, 1, N, 1, 1.0f, one, 1, 0, x, 1, 0, 0.0f, C, N, 0, 1));
    check_rounded("own kernel, B^T (k = 1)", C, 1, x, N);
    /* the pass before OpenBLAS (n = 17, not a multiple of 16): A's M rows of
     * one value (threads over rows), then a row of M values (vectors) */
    CHECK_OK(be->ops->gemm(be, false, false, M, 17, 1, 1.0f, x, 1, 0, one, 17, 0, 0.0f, C, 17,
                           0, 1));
    check_rounded("rounding pass, A", C, 17, x, M);
    /* the pass before OpenBLAS: 1 x M (M not a multiple of 16) */
    CHECK_OK(be->ops->gemm(be, false, false, 1, M, 1, 1.0f, one, 1, 0, x, M, 0, 0.0f, C, M, 0, 1));
    check_rounded("rounding pass, B", C, 1, x, M);
    /* own kernel, B^T's 8 x 8 blocks: I (8 x 8) times X^T, X stored NT x 8 of
     * finite-rounding values; C row i = X's column i rounded */
    float eye[64] = {0}, *xf = rounding_inputs((size_t)NT * 8, N_FINITE_SPECIAL, true);
    for (int i = 0; i < 8; i++) eye[i * 8 + i] = 1.0f;
    CHECK_OK(be->ops->gemm(be, false, true, 8, NT, 8, 1.0f, eye, 8, 0, xf, 8, 0, 0.0f, C, NT, 0,
                           1));
    for (int i = 0; i < 8; i++) {
        float col[NT];
        for (int j = 0; j < NT; j++) col[j] = xf[(size_t)j * 8 + i];
        if (check_rounded("own kernel, B^T (8 x 8 blocks)", C + (size_t)i * NT, 1, col, NT)) break;
    }
    /* the special values' expected roundings, from their definitions */
    CHECK(ds_round_bf16(ds_bits_f32(0x3f808000u)) == 1.0f, "tie to even (down)");
    CHECK(ds_f32_bits(ds_round_bf16(ds_bits_f32(0x3f818000u))) == 0x3f820000u, "tie to even (up)");
    CHECK(ds_round_bf16(ds_bits_f32(0x3fffffffu)) == 2.0f, "carry into the exponent");
    CHECK(isinf(ds_round_bf16(FLT_MAX)), "FLT_MAX must round to inf");
    CHECK(ds_f32_bits(ds_round_bf16(ds_bits_f32(0x7f7f7fffu))) == 0x7f7f0000u,
          "largest finite bf16");
    CHECK(isnan(ds_round_bf16(ds_bits_f32(0xff800001u))), "NaN stays NaN");
    free(x), free(xf), free(C);
}

/* ---- against the fp32 GEMM on pre-rounded inputs, and against double ---- */

typedef struct bf_case {
    int ta, tb, m, n, k, batch;
    int pad;       /* extra columns in every leading dimension */
    int layout;    /* 0: batches apart with gaps; 1: overlapping (heads of one block);
                      2: B shared (stride 0) */
    float alpha, beta;
} bf_case;

#define PAD_SENTINEL 12345.0f

static void run_case(ds_backend *be, const bf_case *c) {
    int arows = c->ta ? c->k : c->m, acols = c->ta ? c->m : c->k;
    int brows = c->tb ? c->n : c->k, bcols = c->tb ? c->k : c->n;
    int lda = acols + c->pad, ldb = bcols + c->pad, ldc = c->n + c->pad;
    int64_t sA, sB;
    if (c->layout == 1) { /* batch b's matrix starts b columns on, as a head's slice */
        lda = acols * c->batch + c->pad;
        ldb = bcols * c->batch + c->pad;
        sA = acols;
        sB = bcols;
    } else {
        sA = (int64_t)arows * lda + 5;
        sB = c->layout == 2 ? 0 : (int64_t)brows * ldb + 3;
    }
    int64_t sC = (int64_t)c->m * ldc + 7;
    size_t nA = (size_t)sA * (c->batch - 1) + (size_t)arows * lda;
    size_t nB = (size_t)sB * (c->batch - 1) + (size_t)brows * ldb;
    size_t nC = (size_t)sC * c->batch;
    float *A = malloc(nA * 4), *B = malloc(nB * 4), *Ar = malloc(nA * 4), *Br = malloc(nB * 4);
    float *C = malloc(nC * 4), *Cr = malloc(nC * 4), *C0 = malloc(nC * 4), *Cf = malloc(nC * 4);
    if (!A || !B || !Ar || !Br || !C || !Cr || !C0 || !Cf) TEST_DIE("out of memory");
    for (size_t i = 0; i < nA; i++) Ar[i] = ds_round_bf16(A[i] = frand());
    for (size_t i = 0; i < nB; i++) Br[i] = ds_round_bf16(B[i] = frand());
    for (size_t i = 0; i < nC; i++) C0[i] = PAD_SENTINEL;
    for (int b = 0; b < c->batch; b++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++)
                C0[b * sC + (int64_t)i * ldc + j] = c->beta == 0.0f ? NAN : frand();
    memcpy(C, C0, nC * 4);
    memcpy(Cr, C0, nC * 4);
    memcpy(Cf, C0, nC * 4);

    CHECK_OK(ds_backend_set_gemm_inputs(be, DS_BF16));
    CHECK_OK(be->ops->gemm(be, c->ta, c->tb, c->m, c->n, c->k, c->alpha, A, lda, sA, B, ldb, sB,
                           c->beta, C, ldc, sC, c->batch));
    CHECK_OK(ds_backend_set_gemm_inputs(be, DS_F32));
    CHECK_OK(be->ops->gemm(be, c->ta, c->tb, c->m, c->n, c->k, c->alpha, Ar, lda, sA, Br, ldb, sB,
                           c->beta, Cr, ldc, sC, c->batch));
    CHECK_OK(be->ops->gemm(be, c->ta, c->tb, c->m, c->n, c->k, c->alpha, A, lda, sA, B, ldb, sB,
                           c->beta, Cf, ldc, sC, c->batch));
    /* the padding included: neither call may write it */
    CHECK(memcmp(C, Cr, nC * 4) == 0,
          "bf16 GEMM differs from fp32 GEMM of rounded inputs (ta %d tb %d %dx%dx%d batch %d "
          "layout %d, %d threads)", c->ta, c->tb, c->m, c->n, c->k, c->batch, c->layout,
          be->num_threads);

    /* Against double on the rounded inputs. Every product is exact in fp32,
     * so only the k - 1 additions of a dot product, the scaling by alpha and
     * the addition of beta*C round: |C - exact| <= gamma_(k+2) (|alpha|
     * sum|a b| + |beta c|), gamma_j = j u / (1 - j u) (Higham, 3.1), checked
     * with (k + 2) * FLT_EPSILON (u rounded up to 2u: slack for 1/(1-ju)
     * and the double reference's own rounding). And the product of the
     * unrounded inputs is 2^-8-relative away per factor: at least one element
     * of the fp32 GEMM must differ from the bf16 one (random 24-bit inputs
     * are rarely bf16 values already), proving the inputs were rounded. */
    int bad = 0, differ = 0;
    for (int b = 0; b < c->batch && bad < 3; b++) {
        const float *Ab = Ar + b * sA, *Bb = Br + b * sB;
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++) {
                int64_t at = b * sC + (int64_t)i * ldc + j;
                double tol, want = gemm_ref_at(c->ta, c->tb, c->k, c->alpha, Ab, lda, Bb, ldb,
                                               c->beta, C0[at], i, j, &tol);
                if (fabs(C[at] - want) > tol && bad++ < 3)
                    TEST_FAIL("C[%d][%d][%d] = %.9g, exact on rounded inputs %.9g (tol %.3g)", b,
                              i, j, (double)C[at], want, tol);
                differ += Cf[at] != C[at];
            }
    }
    CHECK(differ > 0, "bf16 and fp32 GEMM agree everywhere: inputs not rounded?");
    free(A), free(B), free(Ar), free(Br), free(C), free(Cr), free(C0), free(Cf);
}

static void test_paths(ds_backend *be) {
    static const bf_case cases[] = {
        /* the variant's own kernel: alpha 1, beta 0, n % 16 == 0, k <= 256 */
        {0, 1, 128, 128, 64, 4, 0, 1, 1.0f, 0.0f}, /* scores: heads of a QKV block */
        {0, 0, 128, 64, 128, 4, 0, 1, 1.0f, 0.0f}, /* context = P V */
        {1, 0, 128, 64, 128, 2, 3, 0, 1.0f, 0.0f}, /* dV = P^T dC */
        {0, 1, 37, 80, 200, 3, 1, 2, 1.0f, 0.0f},  /* shared B */
        /* OpenBLAS one per thread (small, batched) and one after another */
        {1, 1, 33, 17, 29, 5, 2, 0, 0.75f, 1.0f},
        {0, 1, 20, 24, 300, 3, 0, 2, 1.0f, 1.0f},  /* k > 256, shared B, accumulate */
        {0, 0, 300, 260, 190, 1, 0, 0, 1.0f, 0.0f}, /* split by OpenBLAS across threads */
        {1, 0, 256, 96, 512, 1, 1, 0, 1.0f, 1.0f},  /* a weight gradient: dW += x^T dy */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(be, &cases[i]);
}

/* ---- the scratch --------------------------------------------------------- */

/* The accountant's workspace bytes and peak on the device. */
static void ws_recorded(ds_mem *mem, uint64_t *bytes, uint64_t *peak) {
    ds_mem_report r;
    ds_mem_snapshot(mem, &r);
    *bytes = r.bytes[DS_MEM_WORKSPACE][DS_PLACE_DEVICE];
    *peak = r.peak[DS_MEM_WORKSPACE][DS_PLACE_DEVICE];
}

static void test_workspace(int nt) {
    ds_mem *mem;
    REQUIRE_OK(ds_mem_create(&mem));
    ds_backend *be = test_cpu_backend(nt, mem);
    CHECK(be->gemm_inputs == DS_F32, "a new backend's GEMM inputs are fp32");
    ds_clear_error();
    CHECK(ds_backend_set_gemm_inputs(be, DS_F16) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "fp32 or bf16"),
          "fp16 GEMM inputs must be refused: %s", ds_last_error());
    ds_clear_error();
    REQUIRE_OK(ds_backend_set_gemm_inputs(be, DS_BF16));
    enum { M = 64, N = 50, K = 40 }; /* n % 16 != 0: OpenBLAS, through the workspace */
    static float A[M * K], B[K * N], C[M * N];
    for (int i = 0; i < M * K; i++) A[i] = frand();
    for (int i = 0; i < K * N; i++) B[i] = frand();
    uint64_t rec, peak;
    CHECK(be->gemm_ws == NULL && be->gemm_ws_bytes == 0, "workspace before the first GEMM");
    CHECK_OK(be->ops->gemm(be, false, false, M, N, K, 1.0f, A, K, 0, B, N, 0, 0.0f, C, N, 0, 1));
    /* A's fp32 copy rounded up to a 64-byte line (16 floats), then B's */
    const size_t want = ((M * K + 15) / 16 * 16 + K * N) * sizeof(float);
    CHECK(ds_gemm_workspace_of(DS_BACKEND_CPU, false, false, M, N, K, 0, 0, 1).bytes == want,
          "ds_gemm_workspace_of disagrees with the layout: %zu, want %zu",
          ds_gemm_workspace_of(DS_BACKEND_CPU, false, false, M, N, K, 0, 0, 1).bytes, want);
    const void *first = be->gemm_ws;
    CHECK(first && be->gemm_ws_bytes == want && be->gemm_ws_need == want,
          "workspace of %zu bytes (need %zu), want %zu", be->gemm_ws_bytes, be->gemm_ws_need,
          want);
    ws_recorded(mem, &rec, &peak);
    CHECK(rec == want && peak == want, "recorded %llu (peak %llu), want %zu",
          (unsigned long long)rec, (unsigned long long)peak, want);
    /* smaller and equal GEMMs again: the same buffer */
    for (int rep = 0; rep < 3; rep++) {
        CHECK_OK(
            be->ops->gemm(be, false, false, M, N, K, 1.0f, A, K, 0, B, N, 0, 0.0f, C, N, 0, 1));
        CHECK_OK(be->ops->gemm(be, true, false, K / 2, N, M / 2, 1.0f, A, K, 0, B, N, 0, 0.0f, C,
                               N, 0, 1));
    }
    CHECK(be->gemm_ws == first && be->gemm_ws_bytes == want,
          "workspace reallocated in steady state (%zu bytes)", be->gemm_ws_bytes);
    CHECK(!be->gemm_ws_planned && !be->gemm_ws_warned, "grown without a plan: no warning");

    /* a plan: the largest of its GEMMs, reserved up front and recorded */
    ds_gemm_plan plan = {.kind = DS_BACKEND_CPU};
    ds_gemm_plan_add(&plan, false, false, M, N, K, 0, 0, 1);
    ds_gemm_plan_add(&plan, true, false, K / 2, N, M / 2, 0, 0, 1);
    ds_gemm_plan_add(&plan, false, false, M, N, K, (int64_t)M * K, 0, 2); /* 2 copies of A */
    ds_gemm_plan_add(&plan, false, false, M, N, 0, 0, 0, 1);              /* k 0: no copies */
    const size_t two = ((2 * M * K + 15) / 16 * 16 + K * N) * sizeof(float);
    CHECK(plan.gemms == 4 && plan.bytes == two, "plan of %d GEMMs: %zu bytes, want %zu",
          plan.gemms, plan.bytes, two);
    /* a plan with a module that declares none (plan_gemms is optional):
     * growing past it later is expected, so it arms no warning */
    REQUIRE_OK(ds_backend_reserve_gemm_workspace(be, 0, false));
    CHECK(!be->gemm_ws_planned, "an incomplete plan armed the growth warning");
    REQUIRE_OK(ds_backend_reserve_gemm_workspace(be, plan.bytes + 4096, true));
    ws_recorded(mem, &rec, &peak);
    CHECK(rec == two + 4096 && peak == two + 4096 && be->gemm_ws_planned,
          "reserved: recorded %llu (peak %llu), want %zu", (unsigned long long)rec,
          (unsigned long long)peak, two + 4096);
    const void *planned = be->gemm_ws;
    CHECK_OK(be->ops->gemm(be, false, false, M, N, K, 1.0f, A, K, (int64_t)M * K / 2, B, N, 0,
                           0.0f, C, N, 0, 1));
    CHECK(be->gemm_ws == planned && !be->gemm_ws_warned, "a planned GEMM grew the workspace");
    /* a GEMM larger than the plan grows it, recorded, with the warning */
    static float A2[2 * M * 2 * K], C2[2 * M * N];
    static float B2[2 * K * N];
    for (int i = 0; i < 4 * M * K; i++) A2[i] = frand();
    for (int i = 0; i < 2 * K * N; i++) B2[i] = frand();
    CHECK_OK(be->ops->gemm(be, false, false, 2 * M, N, 2 * K, 1.0f, A2, 2 * K, 0, B2, N, 0, 0.0f,
                           C2, N, 0, 1));
    const size_t big = ((4 * M * K + 15) / 16 * 16 + 2 * K * N) * sizeof(float);
    ws_recorded(mem, &rec, &peak);
    CHECK(be->gemm_ws_bytes == big && rec == big && peak == big && be->gemm_ws_warned,
          "grown past the plan: %zu bytes, recorded %llu (peak %llu), want %zu, warned %d",
          be->gemm_ws_bytes, (unsigned long long)rec, (unsigned long long)peak, big,
          be->gemm_ws_warned);
    ds_backend_destroy(be); /* frees it (the asan build checks) */
    ds_mem_report r;
    ds_mem_snapshot(mem, &r);
    CHECK(r.total[DS_PLACE_DEVICE] == 0, "%llu device bytes recorded after the backend is gone",
          (unsigned long long)r.total[DS_PLACE_DEVICE]);
    ds_mem_destroy(mem);
}

int main(void) {
    /* the rounding path: on a CPU with AVX512-BF16 the slot would multiply
     * bf16 values on the dot-product instruction instead (test_gemm_dot) */
    setenv("DS_CPU_BF16_DOT", "0", 1);
    for (int nt = 1; nt <= 2; nt++) {
        ds_backend *be = test_cpu_backend(nt, NULL);
        REQUIRE_OK(ds_backend_set_gemm_inputs(be, DS_BF16));
        test_rounding(be);
        test_paths(be);
        ds_backend_destroy(be);
        test_workspace(nt);
    }
    return test_finish("test_backend_gemm_bf16");
}
