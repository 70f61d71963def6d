/* The dropout keep mask (engine/backend/nn.h, `keep`): under every cpu
 * variant this CPU runs (cpu_isa.h),
 *
 *   - the forward writes exactly the stream's decisions: bit c % 32 of word
 *     r * ld + c / 32 is ds_rng_uniform_at(seed, offset + r * width + c) >=
 *     p, the padding bits of a row's last word are 0, and its outputs are
 *     the same bits as without a mask;
 *   - the backward that reads the mask gives the same bits as the one that
 *     regenerates it (dx, dbias; ds, pd of the attention softmax), at widths
 *     with word, vector and column-tile tails, so a mask that differed from
 *     the regenerated stream anywhere would show;
 *   - the backward reads the mask rather than the stream: one flipped bit
 *     changes exactly that element;
 *   - the attention mask holds every key's bit, causal and padded ones too;
 *   - p = 0 leaves the mask untouched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/backend/nn.h"
#include "tests/unit/test_rand.h"
#include "tests/unit/test_util.h"
#include "tests/unit/test_variants.h"

/* Mask words that differ from the stream (seed, off) over rows x width at p,
 * padding bits included (they must be 0). */
static int mask_errors(const uint32_t *keep, int64_t rows, int width, float p, uint64_t seed,
                       uint64_t off) {
    int ld = ds_dropout_mask_ld(width), bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int w = 0; w < ld; w++) {
            uint32_t want = 0;
            for (int k = 0; k < 32 && 32 * w + k < width; k++) {
                uint64_t j = off + (uint64_t)r * width + (uint64_t)(32 * w + k);
                want |= (uint32_t)(ds_rng_uniform_at(seed, j) >= p) << k;
            }
            bad += keep[r * ld + w] != want;
        }
    return bad;
}

static void check_dropout(ds_backend *be, const char *isa, int rows, int width) {
    const ds_nn_ops *nn = be->nn;
    size_t n = (size_t)rows * width, kb = ds_dropout_mask_bytes(rows, width);
    const float p = 0.3f;
    const uint64_t seed = 977, off = 1000003; /* not a multiple of 4: a head block */
    float *x = test_frand_buf(n, -2.0f, 2.0f), *res = test_frand_buf(n, -1.0f, 1.0f);
    float *bias = test_frand_buf((size_t)width, -0.5f, 0.5f), *dy = test_frand_buf(n, -1.0f, 1.0f);
    float *y1 = test_malloc(n * 4), *y2 = test_malloc(n * 4), *dx1 = test_malloc(n * 4), *dx2 = test_malloc(n * 4);
    float *db1 = calloc((size_t)width, 4), *db2 = calloc((size_t)width, 4);
    uint32_t *keep = test_malloc(kb);
    if (!db1 || !db2) TEST_DIE("out of memory");
    memset(keep, 0xA5, kb); /* the padding bits must be written too */

    CHECK_OK(nn->dropout_fwd(be, y1, x, bias, res, rows, width, p, seed, off, NULL));
    CHECK_OK(nn->dropout_fwd(be, y2, x, bias, res, rows, width, p, seed, off, keep));
    CHECK(memcmp(y1, y2, n * 4) == 0, "%s %dx%d: dropout_fwd's y changes with a mask", isa, rows,
          width);
    int bad = mask_errors(keep, rows, width, p, seed, off);
    CHECK(bad == 0, "%s %dx%d: %d mask words differ from the stream", isa, rows, width, bad);

    /* backward with dbias (column tiles) and without (rows), mask or stream */
    CHECK_OK(nn->dropout_bwd(be, dx1, db1, dy, rows, width, p, seed, off, NULL));
    CHECK_OK(nn->dropout_bwd(be, dx2, db2, dy, rows, width, p, seed, off, keep));
    CHECK(memcmp(dx1, dx2, n * 4) == 0 && memcmp(db1, db2, (size_t)width * 4) == 0,
          "%s %dx%d: dropout_bwd (dbias) from the mask differs from the stream's", isa, rows,
          width);
    CHECK_OK(nn->dropout_bwd(be, dx1, NULL, dy, rows, width, p, seed, off, NULL));
    memcpy(dx2, dy, n * 4); /* in place, as the slot allows */
    CHECK_OK(nn->dropout_bwd(be, dx2, NULL, dx2, rows, width, p, seed, off, keep));
    CHECK(memcmp(dx1, dx2, n * 4) == 0,
          "%s %dx%d: dropout_bwd from the mask differs from the stream's", isa, rows, width);

    /* the backward reads the mask: flip the last element's bit */
    int ld = ds_dropout_mask_ld(width), c = width - 1, r = rows - 1;
    keep[(size_t)r * ld + c / 32] ^= 1u << (c % 32);
    CHECK_OK(nn->dropout_bwd(be, dx2, NULL, dy, rows, width, p, seed, off, keep));
    size_t last = n - 1;
    int moved = 0;
    for (size_t i = 0; i < n; i++) moved += memcmp(&dx1[i], &dx2[i], 4) != 0;
    CHECK(moved == 1 && memcmp(&dx1[last], &dx2[last], 4) != 0,
          "%s %dx%d: a flipped mask bit changed %d elements", isa, rows, width, moved);

    /* p = 0 leaves the mask alone */
    memset(keep, 0x5A, kb);
    CHECK_OK(nn->dropout_fwd(be, y2, x, bias, res, rows, width, 0.0f, seed, off, keep));
    CHECK_OK(nn->dropout_bwd(be, dx2, db2, dy, rows, width, 0.0f, seed, off, keep));
    int touched = 0;
    for (size_t i = 0; i < kb; i++) touched += ((unsigned char *)keep)[i] != 0x5A;
    CHECK(touched == 0, "%s %dx%d: p = 0 wrote %d mask bytes", isa, rows, width, touched);
    free(x), free(res), free(bias), free(dy), free(y1), free(y2), free(dx1), free(dx2);
    free(db1), free(db2), free(keep);
}

static void check_attention(ds_backend *be, const char *isa, int B, int nh, int Tq, int T,
                            bool causal) {
    const ds_nn_ops *nn = be->nn;
    int64_t rows = (int64_t)B * nh * Tq;
    size_t n = (size_t)rows * T, kb = ds_dropout_mask_bytes(rows, T);
    const float pa = 0.2f, scale = 0.3f;
    const uint64_t seed = 4242, off = 77;
    float *s = test_frand_buf(n, -6.0f, 6.0f), *dpd = test_frand_buf(n, -1.0f, 1.0f);
    float *mask = test_malloc((size_t)B * T * 4);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) mask[b * T + t] = t < T - 7 * b ? 1.0f : 0.0f;
    float *p1 = test_malloc(n * 4), *p2 = test_malloc(n * 4), *pd1 = test_malloc(n * 4), *pd2 = test_malloc(n * 4);
    float *ds1 = test_malloc(n * 4), *ds2 = test_malloc(n * 4);
    float *pb1 = test_malloc(n * 4), *pb2 = test_malloc(n * 4);
    uint32_t *keep = test_malloc(kb);
    memset(keep, 0xA5, kb);
    CHECK_OK(nn->attn_softmax_fwd(be, p1, pd1, s, mask, causal, B, nh, Tq, T, scale, pa, seed,
                                  off, NULL));
    CHECK_OK(nn->attn_softmax_fwd(be, p2, pd2, s, mask, causal, B, nh, Tq, T, scale, pa, seed,
                                  off, keep));
    CHECK(memcmp(p1, p2, n * 4) == 0 && memcmp(pd1, pd2, n * 4) == 0,
          "%s attention %d/%d%s: p or pd changes with a mask", isa, Tq, T, causal ? " causal" : "");
    int bad = mask_errors(keep, rows, T, pa, seed, off);
    CHECK(bad == 0, "%s attention %d/%d%s: %d mask words differ from the stream (every key)", isa,
          Tq, T, causal ? " causal" : "", bad);
    CHECK_OK(nn->attn_softmax_bwd(be, ds1, pb1, dpd, p1, B, nh, Tq, T, scale, pa, seed, off,
                                  NULL));
    CHECK_OK(nn->attn_softmax_bwd(be, ds2, pb2, dpd, p1, B, nh, Tq, T, scale, pa, seed, off,
                                  keep));
    CHECK(memcmp(ds1, ds2, n * 4) == 0 && memcmp(pb1, pb2, n * 4) == 0,
          "%s attention %d/%d%s: backward from the mask differs from the stream's", isa, Tq, T,
          causal ? " causal" : "");
    free(s), free(dpd), free(mask), free(p1), free(p2), free(pd1), free(pd2), free(ds1);
    free(ds2), free(pb1), free(pb2), free(keep);
}

static void run_variant(const char *isa) {
    ds_backend *be = test_cpu_backend(2, NULL);
    /* widths: under a word, word and vector tails, 16-column tiles that
     * start inside a word (48), a DROP_CHUNK tail (300), BERT-mini's 256 */
    static const int widths[] = {1, 37, 48, 256, 300, 1040};
    for (int i = 0; i < (int)(sizeof widths / sizeof *widths); i++)
        check_dropout(be, isa, 67, widths[i]);
    check_attention(be, isa, 2, 3, 133, 133, false);
    check_attention(be, isa, 2, 3, 133, 133, true);
    check_attention(be, isa, 3, 2, 1, 133, false); /* the [CLS]-only layer */
    check_attention(be, isa, 2, 2, 64, 64, true);  /* whole words, causal */
    ds_backend_destroy(be);
}

int main(void) {
    test_each_cpu_variant("test_nn_dropout_mask", run_variant);
    return test_finish("test_nn_dropout_mask");
}
