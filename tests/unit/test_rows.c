/* The backend's rows slots (engine/backend/rows_math.h), the row-sparse
 * gradients' scan, gather and sums, on the cpu backend, against values
 * worked out by hand (test_sparse_grads checks them in training,
 * test_cpu_isa across the ISA variants, test_backend_cuda against cuda):
 *
 * A table of 4 rows x 3 columns at flat offset 10 (rows at flat 10, 13, 16,
 * 19), seen through a view of flat [12, 20): row 0 only by its last
 * element, row 3 only by its first.
 *   - rows_nonzero: a row is flagged for any set bit inside the view (-0.0
 *     too), never for what lies outside it;
 *   - rows_gather: a gathered row is the view's values, +0.0 outside it;
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
}

int main(void) {
    ds_backend *be = test_cpu_backend(1, NULL);
    test_scan_gather(be);
    test_sums(be);
    test_bad_args(be);
    ds_backend_destroy(be);
    return test_finish("test_rows");
}
