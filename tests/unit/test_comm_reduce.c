/* The element-wise reduction of the host ring (engine/comm/reduce.h): one
 * rounding per hop for fp16/bf16, NaN that survives MAX/MIN from either side,
 * integer sums that wrap instead of invoking undefined behaviour, and the
 * in-place form (dst == a) the ring uses. Reference values are written out
 * by hand or built from dtype.h's conversions, never from the code tested. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/comm/reduce.h"
#include "tests/unit/test_util.h"

int main(void) {
    /* fp16: 2048 + 1 = 2049 is not representable (spacing 2 above 2048); the
     * fp32 sum rounds once, to even: 2048. And 2048 + 3 = 2051 -> 2052. */
    uint16_t a[3] = {ds_f32_to_f16(2048.f), ds_f32_to_f16(2048.f), ds_f32_to_f16(0.1f)};
    uint16_t b[3] = {ds_f32_to_f16(1.f), ds_f32_to_f16(3.f), ds_f32_to_f16(0.2f)};
    uint16_t out[3];
    ds_comm_reduce(out, a, b, 3, DS_F16, DS_REDUCE_SUM);
    CHECK(ds_f16_to_f32(out[0]) == 2048.f, "fp16 2048+1 = %g, expected 2048",
          ds_f16_to_f32(out[0]));
    CHECK(ds_f16_to_f32(out[1]) == 2052.f, "fp16 2048+3 = %g, expected 2052",
          ds_f16_to_f32(out[1]));
    /* 0.1 + 0.2 in fp16 values, summed in fp32, rounded once */
    uint16_t once = ds_f32_to_f16(ds_f16_to_f32(a[2]) + ds_f16_to_f32(b[2]));
    CHECK(out[2] == once, "fp16 0.1+0.2 = 0x%04x, expected 0x%04x", out[2], once);
    /* fp16 overflow becomes inf, which loss scaling must see */
    uint16_t big = ds_f32_to_f16(60000.f), inf_out;
    ds_comm_reduce(&inf_out, &big, &big, 1, DS_F16, DS_REDUCE_SUM);
    CHECK(inf_out == 0x7c00, "fp16 60000+60000 = 0x%04x, expected +inf 0x7c00", inf_out);

    /* bf16: 256 + 1 = 257 is not representable (8 significant bits): 256 */
    uint16_t x = ds_f32_to_bf16(256.f), y = ds_f32_to_bf16(1.f), z;
    ds_comm_reduce(&z, &x, &y, 1, DS_BF16, DS_REDUCE_SUM);
    CHECK(ds_bf16_to_f32(z) == 256.f, "bf16 256+1 = %g, expected 256", ds_bf16_to_f32(z));

    /* NaN wins MAX and MIN from either operand */
    float fa[4] = {NAN, 1.f, NAN, 1.f}, fb[4] = {1.f, NAN, 1.f, NAN}, fo[4];
    ds_comm_reduce(fo, fa, fb, 2, DS_F32, DS_REDUCE_MAX);
    ds_comm_reduce(fo + 2, fa + 2, fb + 2, 2, DS_F32, DS_REDUCE_MIN);
    for (int i = 0; i < 4; i++)
        CHECK(isnan(fo[i]), "fp32 %s with a NaN gave %g", i < 2 ? "max" : "min", fo[i]);
    double da = NAN, db = -1.0, dout;
    ds_comm_reduce(&dout, &db, &da, 1, DS_F64, DS_REDUCE_MAX);
    CHECK(isnan(dout), "fp64 max(-1, NaN) gave %g", dout);
    uint16_t hn = 0x7e00, h1 = ds_f32_to_f16(1.f), ho;
    ds_comm_reduce(&ho, &h1, &hn, 1, DS_F16, DS_REDUCE_MIN);
    CHECK((ho & 0x7c00) == 0x7c00 && (ho & 0x3ff), "fp16 min(1, NaN) = 0x%04x, not a NaN", ho);

    /* integers: SUM wraps, MAX/MIN signed */
    int32_t ia[2] = {INT32_MAX, -5}, ib[2] = {1, 3}, io[2];
    ds_comm_reduce(io, ia, ib, 2, DS_I32, DS_REDUCE_SUM);
    CHECK(io[0] == INT32_MIN && io[1] == -2, "int32 sums %d %d", io[0], io[1]);
    ds_comm_reduce(io, ia, ib, 2, DS_I32, DS_REDUCE_MIN);
    CHECK(io[0] == 1 && io[1] == -5, "int32 min %d %d", io[0], io[1]);
    int64_t la = INT64_MIN, lb = -1, lo;
    ds_comm_reduce(&lo, &la, &lb, 1, DS_I64, DS_REDUCE_SUM);
    CHECK(lo == INT64_MAX, "int64 MIN + -1 = %lld, expected wrap to MAX", (long long)lo);
    uint8_t ua = 200, ub = 100, uo;
    ds_comm_reduce(&uo, &ua, &ub, 1, DS_U8, DS_REDUCE_SUM);
    CHECK(uo == 44, "uint8 200+100 = %u, expected 44", uo);

    /* in place, as the ring calls it (dst == a), over a length that is not a
     * multiple of any vector width */
    float acc[37], add[37];
    for (int i = 0; i < 37; i++) {
        acc[i] = (float)i;
        add[i] = (float)(100 - i);
    }
    ds_comm_reduce(acc, acc, add, 37, DS_F32, DS_REDUCE_SUM);
    for (int i = 0; i < 37; i++) CHECK(acc[i] == 100.f, "in-place sum [%d] = %g", i, acc[i]);
    ds_comm_reduce(acc, acc, add, 0, DS_F32, DS_REDUCE_MAX); /* n = 0 touches nothing */
    CHECK(acc[0] == 100.f, "n = 0 wrote");

    return test_finish("test_comm_reduce");
}
