/* The double-precision reference of one GEMM element, for the gemm tests
 * (test_backend_gemm, test_backend_gemm_bf16). */
#ifndef DS_TESTS_GEMM_REF_H
#define DS_TESTS_GEMM_REF_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* C[i][j] of alpha op(A) op(B) + beta c0 in double (A and B row-major with
 * leading dimensions lda, ldb; op transposes when ta / tb), and in *tol the
 * bound an fp32 GEMM summing in any order stays within: (k + 2) eps
 * (|alpha| sum |a b| + |beta c0|), the k additions' and the alpha / beta
 * steps' rounding, each at most eps relative to the running magnitude.
 * beta 0 ignores c0 (it may be NaN: BLAS does not read C then). */
static inline double gemm_ref_at(bool ta, bool tb, int k, float alpha, const float *A, int lda,
                                 const float *B, int ldb, float beta, float c0, int i, int j,
                                 double *tol) {
    double acc = 0.0, mag = 0.0;
    for (int l = 0; l < k; l++) {
        double a = ta ? A[(int64_t)l * lda + i] : A[(int64_t)i * lda + l];
        double b = tb ? B[(int64_t)j * ldb + l] : B[(int64_t)l * ldb + j];
        acc += a * b;
        mag += fabs(a * b);
    }
    double old = beta == 0.0f ? 0.0 : (double)c0 * beta;
    *tol = (k + 2) * (double)FLT_EPSILON * (fabs((double)alpha) * mag + fabs(old));
    return (double)alpha * acc + old;
}

#endif /* DS_TESTS_GEMM_REF_H */
