/* dropout_ln_fwd (engine/backend/nn.h): dropout + residual and the layer
 * norm of the result in one pass, under every cpu variant this CPU runs
 * (cpu_isa.h), at 1 and 2 threads. It must be bit for bit dropout_fwd then
 * layernorm_fwd:
 *
 *   - y, z, mean, rstd and the keep mask, with p = 0.1 and p = 0, with and
 *     without bias, residual and mask, at widths with chunk, vector and word
 *     tails and at row counts under and over the cpu's parallel threshold;
 *   - z written over x or over res (the encoder's [CLS]-only layer writes
 *     LN2's rows over the GEMM output they come from);
 *   - a bad p is refused with the slot's name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "tests/unit/test_rand.h"
#include "tests/unit/test_util.h"
#include "tests/unit/test_variants.h"

typedef struct ln_case {
    int rows, width;
    float p;
    bool bias, res, keep;
    int alias; /* 0: z apart; 1: z over x; 2: z over res */
} ln_case;

static void check_case(ds_backend *be, const char *isa, const ln_case *c) {
    const ds_nn_ops *nn = be->nn;
    size_t n = (size_t)c->rows * c->width, kb = ds_dropout_mask_bytes(c->rows, c->width);
    const uint64_t seed = 4242, off = 77; /* not a multiple of 4: a head block */
    const float eps = 1e-12f;
    float *x = test_frand_buf(n, -2.0f, 2.0f), *res = test_frand_buf(n, -1.0f, 1.0f);
    float *bias = test_frand_buf((size_t)c->width, -0.5f, 0.5f);
    float *gamma = test_frand_buf((size_t)c->width, 0.5f, 1.5f);
    float *beta = test_frand_buf((size_t)c->width, -0.5f, 0.5f);
    float *x2 = test_malloc(n * 4), *res2 = test_malloc(n * 4);
    memcpy(x2, x, n * 4);
    memcpy(res2, res, n * 4);
    float *y1 = test_malloc(n * 4), *z1 = test_malloc(n * 4), *y2 = test_malloc(n * 4), *zs = test_malloc(n * 4);
    float *m1 = test_malloc((size_t)c->rows * 4), *r1 = test_malloc((size_t)c->rows * 4);
    float *m2 = test_malloc((size_t)c->rows * 4), *r2 = test_malloc((size_t)c->rows * 4);
    uint32_t *k1 = test_malloc(kb), *k2 = test_malloc(kb);
    memset(k1, 0, kb);
    memset(k2, 0, kb);
    const float *b = c->bias ? bias : NULL;

    /* the two calls */
    CHECK_OK(nn->dropout_fwd(be, y1, x, b, c->res ? res : NULL, c->rows, c->width, c->p, seed, off,
                             c->keep ? k1 : NULL));
    CHECK_OK(nn->layernorm_fwd(be, z1, m1, r1, y1, gamma, beta, c->rows, c->width, eps));
    /* the fused slot, on copies of x and res that z may overwrite */
    float *z2 = c->alias == 1 ? x2 : c->alias == 2 ? res2 : zs;
    CHECK_OK(nn->dropout_ln_fwd(be, y2, z2, m2, r2, x2, b, c->res ? res2 : NULL, gamma, beta,
                                c->rows, c->width, c->p, seed, off, c->keep ? k2 : NULL, eps));
    const char *what = c->alias == 1 ? " z over x" : c->alias == 2 ? " z over res" : "";
    CHECK(memcmp(y1, y2, n * 4) == 0, "%s %d x %d p %.1f%s: y differs from dropout_fwd's", isa,
          c->rows, c->width, (double)c->p, what);
    CHECK(memcmp(z1, z2, n * 4) == 0, "%s %d x %d p %.1f%s: z differs from layernorm_fwd's", isa,
          c->rows, c->width, (double)c->p, what);
    CHECK(memcmp(m1, m2, (size_t)c->rows * 4) == 0 && memcmp(r1, r2, (size_t)c->rows * 4) == 0,
          "%s %d x %d p %.1f%s: mean / rstd differ", isa, c->rows, c->width, (double)c->p, what);
    CHECK(memcmp(k1, k2, kb) == 0, "%s %d x %d p %.1f%s: keep mask differs", isa, c->rows,
          c->width, (double)c->p, what);
    free(x), free(res), free(bias), free(gamma), free(beta), free(x2), free(res2), free(y1);
    free(z1), free(y2), free(zs), free(m1), free(r1), free(m2), free(r2), free(k1), free(k2);
}

static void run_variant(const char *isa) {
    for (int nt = 1; nt <= 2; nt++) {
        ds_backend *be = test_cpu_backend(nt, NULL);
        /* widths: a word's tail (37), BERT-mini's 256, a DROP_CHUNK tail
         * (300), GPT-2's 768; rows 3 (under the cpu's parallel threshold of
         * 16,384 elements at every width) and 130 (over it from 256 on) */
        static const int widths[] = {37, 256, 300, 768};
        for (int w = 0; w < 4; w++)
            for (int rows = 3; rows <= 130; rows += 127) {
                const ln_case cases[] = {
                    {rows, widths[w], 0.1f, true, true, true, 0},
                    {rows, widths[w], 0.1f, true, true, false, 0},
                    {rows, widths[w], 0.1f, false, true, true, 0},
                    {rows, widths[w], 0.1f, true, false, true, 0},
                    {rows, widths[w], 0.0f, true, true, true, 0},
                    {rows, widths[w], 0.0f, false, false, false, 0},
                    {rows, widths[w], 0.1f, true, true, true, 1},
                    {rows, widths[w], 0.1f, true, true, true, 2},
                };
                for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++)
                    check_case(be, isa, &cases[i]);
            }
        float v[4] = {0};
        ds_status st = be->nn->dropout_ln_fwd(be, v, v + 1, v + 2, v + 3, v, NULL, NULL, v, v, 1,
                                              1, 1.0f, 1, 0, NULL, 1e-5f);
        CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "dropout_ln_fwd"),
              "%s: p = 1 not refused by name (%s)", isa, ds_last_error());
        ds_backend_destroy(be);
    }
}

int main(void) {
    test_each_cpu_variant("test_nn_dropout_ln", run_variant);
    return test_finish("test_nn_dropout_ln");
}
