/* The 1-bit codec (codec.h): sign bits and one root-mean-square scale, in
 * the backend's onebit slots (engine/backend/onebit_math.h). */
#include "engine/backend/onebit_math.h"
#include "engine/comm/codec.h"

static size_t onebit_wire_bytes(size_t n) { return ds_onebit_record_bytes(n); }

static ds_status onebit_encode(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                               void *wire, size_t stride) {
    return be->ops->onebit_encode(be, x, err, n, nblocks, wire, stride);
}

static ds_status onebit_decode(ds_backend *be, const void *wire, size_t n, float alpha,
                               bool accumulate, float *out) {
    return be->ops->onebit_decode(be, wire, n, alpha, accumulate, out);
}

const ds_codec ds_codec_onebit = {
    .name = "onebit",
    .elem_align = 8,
    .wire_bytes = onebit_wire_bytes,
    .encode = onebit_encode,
    .decode = onebit_decode,
};
