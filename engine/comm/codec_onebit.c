/* The 1-bit codec (codec.h): sign bits and one root-mean-square scale. */
#include <math.h>
#include <string.h>

#include "engine/comm/codec.h"

static size_t onebit_wire_bytes(size_t n) { return sizeof(float) + n / 8; }

static void onebit_encode(const float *x, float *err, size_t n, int nblocks, void *wire,
                          size_t stride) {
    /* The scale is over the whole compensated vector c = x + err (DeepSpeed's
     * worker scale is per tensor, not per chunk). */
    double sumsq = 0.0;
    for (size_t i = 0; i < n; i++) {
        float c = err ? x[i] + err[i] : x[i];
        sumsq += (double)c * (double)c;
    }
    float scale = n ? (float)(sqrt(sumsq) / sqrt((double)n)) : 0.0f;
    size_t per = nblocks > 0 ? n / (size_t)nblocks : n;
    unsigned char *w = wire;
    for (int b = 0; b < nblocks; b++) {
        memcpy(w, &scale, sizeof scale);
        unsigned char *bits = w + sizeof scale;
        size_t lo = (size_t)b * per;
        for (size_t k = 0; k < per / 8; k++) {
            unsigned byte = 0;
            for (int j = 0; j < 8; j++) {
                size_t i = lo + k * 8 + (size_t)j;
                float c = err ? x[i] + err[i] : x[i];
                int bit = ds_onebit_bit(c);
                byte |= (unsigned)bit << (7 - j);
                if (err) err[i] = c - ds_onebit_value(bit, scale);
            }
            bits[k] = (unsigned char)byte;
        }
        w += stride;
    }
}

static void onebit_decode(const void *wire, size_t n, float alpha, bool accumulate, float *out) {
    const unsigned char *w = wire;
    float scale;
    memcpy(&scale, w, sizeof scale);
    /* DeepSpeed multiplies the ±1 signs by (scale * alpha), one rounding */
    float s = scale * alpha;
    const unsigned char *bits = w + sizeof scale;
    for (size_t i = 0; i < n; i++) {
        int bit = (bits[i / 8] >> (7 - (i % 8))) & 1;
        float v = ds_onebit_value(bit, s);
        out[i] = accumulate ? out[i] + v : v;
    }
}

const ds_codec ds_codec_onebit = {
    .name = "onebit",
    .elem_align = 8,
    .wire_bytes = onebit_wire_bytes,
    .encode = onebit_encode,
    .decode = onebit_decode,
};
