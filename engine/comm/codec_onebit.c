/* The 1-bit codec (codec.h): sign bits and one root-mean-square scale. */
#include <math.h>
#include <string.h>

#include "engine/comm/codec.h"

static size_t onebit_wire_bytes(size_t n) { return sizeof(float) + n / 8; }

static void onebit_encode(const float *x, float *err, size_t n, int nblocks, void *wire,
                          size_t stride) {
    /* The scale is over the whole compensated vector c = x + err (DeepSpeed's
     * worker scale is per tensor, not per chunk). With feedback, err holds c
     * until the last loop turns it into c - decode(c). */
    double sumsq = 0.0;
    if (err) {
        for (size_t i = 0; i < n; i++) {
            float c = x[i] + err[i];
            err[i] = c;
            sumsq += (double)c * (double)c;
        }
    } else {
        for (size_t i = 0; i < n; i++) sumsq += (double)x[i] * (double)x[i];
    }
    const float *c = err ? err : x;
    float scale = n ? (float)(sqrt(sumsq) / sqrt((double)n)) : 0.0f;
    size_t per = nblocks > 0 ? n / (size_t)nblocks : n;
    unsigned char *w = wire;
    for (int b = 0; b < nblocks; b++, w += stride) {
        memcpy(w, &scale, sizeof scale);
        unsigned char *bits = w + sizeof scale;
        const float *cb = c + (size_t)b * per;
        for (size_t k = 0; k < per / 8; k++) {
            const float *p = cb + k * 8;
            unsigned byte = 0;
            for (int j = 0; j < 8; j++) byte |= (unsigned)ds_onebit_bit(p[j]) << (7 - j);
            bits[k] = (unsigned char)byte;
        }
    }
    if (err) /* what the code lost; a loop of its own so that it vectorises */
        for (size_t i = 0; i < n; i++) err[i] -= ds_onebit_value(ds_onebit_bit(err[i]), scale);
}

static void onebit_decode(const void *wire, size_t n, float alpha, bool accumulate, float *out) {
    const unsigned char *w = wire;
    float scale;
    memcpy(&scale, w, sizeof scale);
    /* DeepSpeed multiplies the ±1 signs by (scale * alpha), one rounding */
    float s = scale * alpha;
    const unsigned char *bits = w + sizeof scale;
    for (size_t k = 0; k < n / 8; k++) {
        unsigned byte = bits[k];
        float *o = out + k * 8;
        if (accumulate)
            for (int j = 0; j < 8; j++) o[j] += ds_onebit_value((byte >> (7 - j)) & 1, s);
        else
            for (int j = 0; j < 8; j++) o[j] = ds_onebit_value((byte >> (7 - j)) & 1, s);
    }
}

const ds_codec ds_codec_onebit = {
    .name = "onebit",
    .elem_align = 8,
    .wire_bytes = onebit_wire_bytes,
    .encode = onebit_encode,
    .decode = onebit_decode,
};
