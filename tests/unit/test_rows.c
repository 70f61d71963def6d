/* The backend's rows slots (engine/backend/rows_math.h), the row-sparse
 * gradients' scan, gather and sums and the scatter of gathered rows, on the
 * cpu backend, against values
 * worked out by hand (test_sparse_grads checks them in training,
 * test_cpu_isa across the ISA variants, test_backend_cuda against cuda):
 *
 * A table of 4 rows x 3 columns at flat offset 10 (rows at flat 10, 13, 16,
 * 19), seen through a view of flat [12, 20): row 0 only by its last
 * element, row 3 only by its first.
 *   - rows_nonzero: a row is flagged for any set bit inside the view (-0.0
 *     too), never for what lies outside it;
 *   - rows_gather: a gathered row is the view's values, +0.0 outside it;
 *   - rows_scatter: a gathered row lands in its slice of the view and
 *     nowhere else (the element before and after the view untouched), in
 *     fp32 and bit for bit in bf16;
 *   - rows_sum: contributions added in the order given from -0.0 (all) or
 *     +0.0, rounded to the gradient type after each addition, replacing or
 *     adding to the row's slice, nothing outside the view written;
 *   - bad arguments are refused, naming what is wrong. */
#include <math.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/rows_math.h"
#include "tests/unit/test_util.h"

static void test_scan_gather(ds_backend *be) {
    /* flat 12..19: row 0's last (12), row 1 (13-15), row 2 (16-18), row 3's first (19) */
    float v[8] = {0.0f, 0.0f, -0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 5.0f};
    ds_rows_view view = {v, DS_F32, 12, 20, 10, 3};
    uint8_t flags[4];
    CHECK_OK(be->ops->rows_nonzero(be, &view, 0, 4, flags));
    CHECK(flags[0] == 0 && flags[1] == 1 && flags[2] == 0 && flags[3] == 1,
          "flags %d %d %d %d, want 0 1 0 1 (row 1 holds only -0.0, row 3 only inside the view)",
          flags[0], flags[1], flags[2], flags[3]);
    v[0] = 2.0f; /* row 0's one element inside the view */
    CHECK_OK(be->ops->rows_nonzero(be, &view, 0, 1, flags));
    CHECK(flags[0] == 1, "row 0 set at its element inside the view not flagged");
    /* gather rows 3 and 0 (indices at an odd byte offset): 5 0 0 | 0 0 2 */
    unsigned char idx[9];
    int32_t rows[2] = {3, 0};
    memcpy(idx + 1, rows, sizeof rows);
    float got[6], want[6] = {5.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f};
    memset(got, 0xff, sizeof got);
    CHECK_OK(be->ops->rows_gather(be, &view, idx + 1, 2, got));
    CHECK(memcmp(got, want, sizeof got) == 0, "gathered %g %g %g | %g %g %g", got[0], got[1],
          got[2], got[3], got[4], got[5]);
}

static void test_scatter(ds_backend *be) {
    /* a buffer of flat 11..20 whose view is flat [12, 20): the guards at
     * 11 and 20 are outside it and must stay */
    float buf[10];
    for (int i = 0; i < 10; i++) buf[i] = 100.0f + (float)i;
    ds_rows_view view = {buf + 1, DS_F32, 12, 20, 10, 3};
    /* rows 0 (only flat 12 inside), 3 (only 19) and 2 (16-18), indices at an
     * odd byte offset */
    unsigned char idx[13];
    int32_t rows[3] = {0, 3, 2};
    memcpy(idx + 1, rows, sizeof rows);
    const float src[9] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, -0.0f};
    CHECK_OK(be->ops->rows_scatter(be, &view, idx + 1, 3, src));
    /* flat 11 | 12 = row 0's col 2 | 13-15 row 1 untouched | 16-18 row 2 |
     * 19 = row 3's col 0 | 20 */
    const float want[10] = {100.0f, 3.0f, 102.0f, 103.0f, 104.0f, 7.0f, 8.0f, -0.0f, 4.0f,
                            109.0f};
    CHECK(memcmp(buf, want, sizeof buf) == 0,
          "scattered %g | %g | %g %g %g | %g %g %g (signbit %d) | %g | %g", buf[0], buf[1],
          buf[2], buf[3], buf[4], buf[5], buf[6], buf[7], signbit(buf[7]) != 0, buf[8], buf[9]);
    /* a gather then a scatter into another buffer: the same bits, in bf16
     * (a NaN payload aside, every bf16 value is an fp32 value) */
    uint16_t t16[6], g16[6], back[6];
    for (int i = 0; i < 6; i++) t16[i] = (uint16_t)(0x3f81 + 0x111 * i); /* 1.0078, ... */
    memset(back, 0, sizeof back);
    ds_rows_view tv = {t16, DS_BF16, 0, 6, 0, 3}, bv = {back, DS_BF16, 0, 6, 0, 3};
    int32_t both[2] = {1, 0};
    CHECK_OK(be->ops->rows_gather(be, &tv, both, 2, g16));
    CHECK_OK(be->ops->rows_scatter(be, &bv, both, 2, g16));
    CHECK(memcmp(back, t16, sizeof t16) == 0, "bf16 gather + scatter: %04x .. %04x, want %04x "
          ".. %04x", back[0], back[5], t16[0], t16[5]);
}

static void test_sums(ds_backend *be) {
    /* records: rows of 3 at element offsets 0, 3, 6 */
    const float recs[9] = {1.0f, 2.0f, 3.0f, 10.0f, 20.0f, 30.0f, -0.0f, -0.0f, -0.0f};
    float g[8];
    for (int i = 0; i < 8; i++) g[i] = 100.0f + (float)i;
    ds_rows_view view = {g, DS_F32, 12, 20, 10, 3};
    /* row 1 <- records 0 + 1 (a rank did not send it: from +0.0); row 0 <-
     * record 2 from -0.0 (every rank sent it): -0.0 + -0.0 stays -0.0 */
    int32_t row[2] = {1, 0};
    uint8_t all[2] = {0, 1};
    int64_t first[3] = {0, 2, 3}, src[3] = {0, 3, 6};
    ds_rows_sum s = {view, false, recs, 2, row, all, first, src};
    CHECK_OK(be->ops->rows_sum(be, &s));
    const float want[8] = {-0.0f, 11.0f, 22.0f, 33.0f, 104.0f, 105.0f, 106.0f, 107.0f};
    CHECK(memcmp(g, want, sizeof g) == 0, "replaced: %g %g %g %g ... %g (signbit %d)", g[0],
          g[1], g[2], g[3], g[7], signbit(g[0]) != 0);
    s.add = true; /* adding: row 1's slice gets 11 22 33 more */
    CHECK_OK(be->ops->rows_sum(be, &s));
    CHECK(g[1] == 22.0f && g[2] == 44.0f && g[3] == 66.0f && g[4] == 104.0f && g[0] == 0.0f,
          "added: %g %g %g %g %g", g[0], g[1], g[2], g[3], g[4]);
    /* bf16: each addition rounded to bf16 (8 bits of mantissa): 256 + 1 is
     * 256 again, then + 1 again 256, where one fp32 sum would give 258 */
    uint16_t b[3], r16[9];
    const float r32[9] = {256.0f, 0, 0, 1.0f, 0, 0, 1.0f, 0, 0};
    CHECK_OK(be->ops->cast(be, r16, DS_BF16, r32, DS_F32, 9));
    ds_rows_view bv = {b, DS_BF16, 0, 3, 0, 3};
    int32_t row0[1] = {0};
    uint8_t some[1] = {0};
    int64_t f3[2] = {0, 3}, s3[3] = {0, 3, 6};
    ds_rows_sum sb = {bv, false, r16, 1, row0, some, f3, s3};
    CHECK_OK(be->ops->rows_sum(be, &sb));
    CHECK(ds_bf16_to_f32(b[0]) == 256.0f, "bf16 sum %g, want 256 (rounded per addition)",
          ds_bf16_to_f32(b[0]));
}

static void test_bad_args(ds_backend *be) {
    float v[3] = {0};
    uint8_t flags[1];
    ds_rows_view bad = {v, DS_F32, 5, 2, 0, 3};
    CHECK_TRUE(be->ops->rows_nonzero(be, &bad, 0, 1, flags) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "over flat [5, 2)") != NULL, "message: %s", ds_last_error());
    ds_rows_view cols0 = {v, DS_F32, 0, 3, 0, 0};
    CHECK_TRUE(be->ops->rows_gather(be, &cols0, v, 1, v) == DS_ERR_INVALID_ARG);
    ds_rows_view ok = {v, DS_F32, 0, 3, 0, 3};
    CHECK_TRUE(be->ops->rows_nonzero(be, &ok, 0, 1, NULL) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "flags is NULL") != NULL, "message: %s", ds_last_error());
    ds_rows_sum s = {ok, false, v, 1, NULL, NULL, NULL, NULL};
    CHECK_TRUE(be->ops->rows_sum(be, &s) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "row is NULL") != NULL, "message: %s", ds_last_error());
    ds_rows_view i8 = {v, DS_I32, 0, 3, 0, 3};
    CHECK_TRUE(be->ops->rows_nonzero(be, &i8, 0, 1, flags) == DS_ERR_INVALID_ARG);
    int32_t r0 = 0;
    CHECK_TRUE(be->ops->rows_scatter(be, &ok, &r0, 1, NULL) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "rows_scatter: src is NULL for 3 elements") != NULL,
          "message: %s", ds_last_error());
    CHECK_TRUE(be->ops->rows_scatter(be, &ok, &r0, -1, v) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "-1 rows") != NULL, "message: %s", ds_last_error());
}

int main(void) {
    ds_backend *be = test_cpu_backend(1, NULL);
    test_scan_gather(be);
    test_scatter(be);
    test_sums(be);
    test_bad_args(be);
    ds_backend_destroy(be);
    return test_finish("test_rows");
}
