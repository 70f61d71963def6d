/* The cpu backend's onebit slots (backend.h): the 1-bit code of the
 * compressed all-reduce and the passes of 1-bit / 0/1 Adam, with the element
 * functions of engine/backend/onebit_math.h that the CUDA kernels call. The
 * encode's sum of squares is one sequential double sum (its order fixes the
 * scale's bits, the same at any thread count and in every ISA variant); the
 * rest is element-wise and split over the threads. */
#include <omp.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/onebit_math.h"

ds_status ds_cpu_onebit_encode(ds_backend *be, const float *x, float *err, size_t n, int nblocks,
                               void *wire, size_t stride) {
    DS_TRY(ds_check_onebit_code("cpu onebit_encode", "x", x, n, nblocks, wire, stride));
    if (n == 0) return DS_OK; /* no records: nothing written (as cuda) */
    /* with feedback, err holds c = x + err until the last loop turns it
     * into c - decode(c) */
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
    float scale = ds_onebit_scale(sumsq, n);
    size_t bytes = n / (size_t)nblocks / 8; /* of signs per record */
    unsigned char *w = wire;
    for (int b = 0; b < nblocks; b++) ds_onebit_put_scale(w + (size_t)b * stride, scale);
    /* each byte of signs, and with feedback what the code lost of its 8
     * elements, in one pass over c */
    if (err) {
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
        for (size_t k = 0; k < n / 8; k++) {
            float *e = err + 8 * k;
            w[k / bytes * stride + sizeof(float) + k % bytes] = ds_onebit_pack8(e);
#pragma omp simd
            for (int j = 0; j < 8; j++) e[j] -= ds_onebit_value(ds_onebit_bit(e[j]), scale);
        }
    } else {
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
        for (size_t k = 0; k < n / 8; k++)
            w[k / bytes * stride + sizeof(float) + k % bytes] = ds_onebit_pack8(c + 8 * k);
    }
    return DS_OK;
}

ds_status ds_cpu_onebit_decode(ds_backend *be, const void *wire, size_t n, float alpha,
                               bool accumulate, float *out) {
    DS_TRY(ds_check_onebit_code("cpu onebit_decode", "out", out, n, 1, wire, 0));
    if (n == 0) return DS_OK; /* nothing encoded: no record to read */
    const unsigned char *w = wire;
    /* DeepSpeed multiplies the signs by (scale * alpha), one rounding */
    float s = ds_onebit_get_scale(w) * alpha;
    const unsigned char *bits = w + sizeof(float);
    /* a byte's 8 values as one vector: its bits tested against constant
     * masks (ds_onebit_value's choice), the two cases in loops of their own */
    static const unsigned bit_of[8] = {0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01};
    if (accumulate) {
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
        for (size_t k = 0; k < n / 8; k++) {
            unsigned byte = bits[k];
            float *o = out + k * 8;
#pragma omp simd
            for (int j = 0; j < 8; j++) o[j] += ds_onebit_value((byte & bit_of[j]) != 0, s);
        }
    } else {
#pragma omp parallel for num_threads(ds_cpu_team(be)) schedule(static) if (n >= DS_CPU_PAR_MIN)
        for (size_t k = 0; k < n / 8; k++) {
            unsigned byte = bits[k];
            float *o = out + k * 8;
#pragma omp simd
            for (int j = 0; j < 8; j++) o[j] = ds_onebit_value((byte & bit_of[j]) != 0, s);
        }
    }
    return DS_OK;
}

/* One phase's loop: the phase a constant, so the switch folds away. */
#define DS_ONEBIT_LOOP(ph)                                                                         \
    case ph: {                                                                                     \
        _Pragma("omp parallel for num_threads(team) schedule(static) if (n >= DS_CPU_PAR_MIN)")   \
        for (size_t i = 0; i < n; i++) ds_onebit_elem(&q, ph, i);                                 \
        break;                                                                                     \
    }

ds_status ds_cpu_onebit_pass(ds_backend *be, const ds_onebit_pass *p) {
    DS_TRY(ds_check_onebit_pass("cpu onebit_pass", p));
    const ds_onebit_pass q = *p; /* a local copy: its fields cannot alias the arrays */
    size_t n = q.n;
    int team = ds_cpu_team(be);
    switch (q.phase) {
        DS_ONEBIT_LOOP(DS_ONEBIT_GRAD)
        DS_ONEBIT_LOOP(DS_ONEBIT_MOMENTUM)
        DS_ONEBIT_LOOP(DS_ONEBIT_WEIGHT)
        DS_ONEBIT_LOOP(DS_ONEBIT_ZO_MOMENTUM)
        DS_ONEBIT_LOOP(DS_ONEBIT_ZO_LOCAL)
        DS_ONEBIT_LOOP(DS_ONEBIT_ZO_SYNC)
    }
    return DS_OK;
}
