/* 1-bit Adam and 0/1 Adam, element by element: the 1-bit code of the
 * compressed all-reduce (engine/comm/codec.h) and the optimizers' passes
 * (zero/onebit.c), written once for the cpu loops and the CUDA kernels of the
 * backend's onebit slots (backend.h), under math.h's rules: every product
 * that feeds an addition is an explicit fmaf or ds_mul_rn, so both backends
 * compute the same bits.
 *
 * The code (DeepSpeed's): a record of n elements is one fp32 scale then the
 * signs, one bit per element, most significant bit first (numpy.packbits);
 * 1 means >= 0, so zero and NaN decode positive, as DeepSpeed's
 * sign().add_(1).bool(). The scale is the root mean square of the encoded
 * vector, ||c||_2 / sqrt(n), its sum of squares in double. Records follow
 * each other at any byte offset, so the scale is moved as four bytes. */
#ifndef DS_BACKEND_ONEBIT_MATH_H
#define DS_BACKEND_ONEBIT_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend/math.h"

#ifdef __cplusplus
extern "C" {
#endif

DS_HD int ds_onebit_bit(float c) { return !(c < 0.0f); }
DS_HD float ds_onebit_value(int bit, float scale) { return bit ? scale : -scale; }

/* Bytes of the record of n elements (n a multiple of 8). */
DS_HD size_t ds_onebit_record_bytes(size_t n) { return sizeof(float) + n / 8; }

/* The scale of n elements whose squares sum to sumsq. */
DS_HD float ds_onebit_scale(double sumsq, size_t n) {
    return n ? (float)(sqrt(sumsq) / sqrt((double)n)) : 0.0f;
}

/* The scale at the head of a record, which may sit at any byte. */
DS_HD void ds_onebit_put_scale(unsigned char *rec, float scale) {
    memcpy(rec, &scale, sizeof scale);
}
DS_HD float ds_onebit_get_scale(const unsigned char *rec) {
    float s;
    memcpy(&s, rec, sizeof s);
    return s;
}

/* Byte k of the signs of c (elements 8k .. 8k + 7). */
DS_HD unsigned char ds_onebit_pack8(const float *c) {
    unsigned byte = 0;
    for (int j = 0; j < 8; j++) byte |= (unsigned)ds_onebit_bit(c[j]) << (7 - j);
    return (unsigned char)byte;
}

/* ---- the optimizers' passes -------------------------------------------------
 * One pass over the n elements of the flat vector per call of the
 * onebit_pass slot. Names as in zero/onebit.c: w the fp32 weights, m and v
 * Adam's moments, g the gradient (gt), x the vector the compressed
 * all-reduce carries (m, the scaled gradient or u), u 0/1 Adam's
 * accumulated local change, at_sync the weights of its last
 * synchronisation. `masked` is what the all-reduce's result becomes where
 * DeepSpeed multiplies its masks in: 0 where v is 0 (an element that never
 * had a gradient carries no momentum), times the user's exp_avg_mask. */
typedef enum ds_onebit_phase {
    DS_ONEBIT_GRAD,        /* x = g gm (0/1 Adam: the gradient to compress) */
    DS_ONEBIT_MOMENTUM,    /* m = b1 m + (1 - b1) g gm (1-bit Adam: m to compress) */
    DS_ONEBIT_WEIGHT,      /* 1-bit Adam after the all-reduce of m: m masked, w updated */
    DS_ONEBIT_ZO_MOMENTUM, /* 0/1 Adam after the all-reduce of x: x masked, m and w from it */
    DS_ONEBIT_ZO_LOCAL,    /* 0/1 Adam's local step: m, w and u; with sync, u scaled by
                              sqrt(v) + eps for the all-reduce */
    DS_ONEBIT_ZO_SYNC,     /* after the all-reduce of u: u masked, m and w from it,
                              at_sync = w, u = 0 */
} ds_onebit_phase;

typedef struct ds_onebit_pass {
    ds_onebit_phase phase;
    size_t n;
    float *w, *m, *x, *u, *at_sync;
    const float *v, *amask; /* amask: NULL (no exp_avg_mask) */
    const void *g;
    ds_dtype gt;
    float gm;      /* the gradient's multiplier: grad_mult times the world (one rank's
                      estimate of the mean) */
    float lr, wd;  /* 0/1 Adam's local step */
    float lrs;     /* 0/1 Adam: the sum of lr since the last synchronisation */
    int sync;      /* ZO_LOCAL: this step synchronises */
    ds_adam_coef c; /* DeepSpeed's update: decoupled decay, no bias correction */
} ds_onebit_pass;

/* m = b1 m + (1 - b1) g, as ds_adam_update forms it */
DS_HD float ds_onebit_momentum(float m, float g, const ds_adam_coef *c) {
    return fmaf(c->one_minus_beta1, g, c->beta1 * m);
}

/* ds_adam_update's weight update with v left as it is (bias_correction
 * false: bc2_sqrt 1, neg_step_size -lr) */
DS_HD float ds_onebit_weight(float w, float m, float v, const ds_adam_coef *c) {
    w = ds_mul_rn(w, c->decay);
    float denom = sqrtf(v) / c->bc2_sqrt + c->eps;
    return w + (c->neg_step_size * m) / denom;
}

DS_HD float ds_onebit_masked(const ds_onebit_pass *p, float x, size_t i) {
    if (p->v[i] == 0.0f) x = 0.0f;
    return p->amask ? x * p->amask[i] : x;
}

/* Element i of the pass; the phase is p->phase, passed on its own so that a
 * loop over one phase can be compiled without the switch. */
DS_HD void ds_onebit_elem(const ds_onebit_pass *p, ds_onebit_phase phase, size_t i) {
    const ds_adam_coef *c = &p->c;
    switch (phase) {
    case DS_ONEBIT_GRAD:
        p->x[i] = ds_load_f32(p->g, p->gt, i) * p->gm;
        break;
    case DS_ONEBIT_MOMENTUM:
        p->m[i] = ds_onebit_momentum(p->m[i], ds_load_f32(p->g, p->gt, i) * p->gm, c);
        break;
    case DS_ONEBIT_WEIGHT: {
        float m = ds_onebit_masked(p, p->m[i], i);
        p->m[i] = m;
        p->w[i] = ds_onebit_weight(p->w[i], m, p->v[i], c);
        break;
    }
    case DS_ONEBIT_ZO_MOMENTUM: {
        float x = ds_onebit_masked(p, p->x[i], i);
        p->x[i] = x;
        float m = ds_onebit_momentum(p->m[i], x, c);
        p->m[i] = m;
        p->w[i] = ds_onebit_weight(p->w[i], m, p->v[i], c);
        break;
    }
    case DS_ONEBIT_ZO_LOCAL: { /* zoadam.py: update = m / (sqrt(v) + eps) + wd p */
        float m = ds_onebit_momentum(p->m[i], ds_load_f32(p->g, p->gt, i) * p->gm, c);
        float w = p->w[i], den = sqrtf(p->v[i]) + c->eps;
        float upd = m / den + ds_mul_rn(p->wd, w);
        float step = ds_mul_rn(-p->lr, upd);
        float u = p->u[i] + step;
        p->m[i] = m;
        p->w[i] = w + step;
        p->u[i] = p->sync ? u * den : u;
        break;
    }
    case DS_ONEBIT_ZO_SYNC: {
        float u = ds_onebit_masked(p, p->u[i], i);
        float w = p->at_sync[i] + u / (sqrtf(p->v[i]) + c->eps);
        p->m[i] = -(u / p->lrs);
        p->w[i] = w;
        p->at_sync[i] = w;
        p->u[i] = 0.0f;
        break;
    }
    }
}

/* ---- the slots' argument checks (host), the same on both backends ---- */

/* The code's n elements (x: the encode's input, the decode's output) in
 * nblocks records of whole bytes of signs, stride bytes apart (records that
 * overlap would be written in another order by each backend). */
static inline ds_status ds_check_onebit_code(const char *who, const char *xname, const void *x,
                                             size_t n, int nblocks, const void *wire,
                                             size_t stride) {
    if (nblocks < 1 || n % (size_t)nblocks || (n / (size_t)nblocks) % 8)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: %zu elements in %d record(s): each record must "
                      "hold a positive multiple of 8", who, n, nblocks);
    const size_t record = ds_onebit_record_bytes(n / (size_t)nblocks);
    if (nblocks > 1 && n > 0 && stride < record)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: records %zu bytes apart, but each takes %zu", who,
                      stride, record);
    DS_TRY(ds_check_ptr(who, xname, x, n));
    DS_TRY(ds_check_ptr(who, "wire", wire, n));
    return DS_OK;
}

static inline ds_status ds_check_onebit_pass(const char *who, const ds_onebit_pass *p) {
    if (!p) return DS_ERR(DS_ERR_INVALID_ARG, "%s: the pass is NULL", who);
    ds_onebit_phase ph = p->phase;
    if ((int)ph < (int)DS_ONEBIT_GRAD || (int)ph > (int)DS_ONEBIT_ZO_SYNC)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: unknown phase %d", who, (int)ph);
    bool grad = ph == DS_ONEBIT_GRAD || ph == DS_ONEBIT_MOMENTUM || ph == DS_ONEBIT_ZO_LOCAL;
    bool after = ph >= DS_ONEBIT_WEIGHT; /* every phase that updates w */
    struct {
        const char *name;
        const void *ptr;
        bool needed;
    } arg[] = {
        {"g", p->g, grad},
        {"x", p->x, ph == DS_ONEBIT_GRAD || ph == DS_ONEBIT_ZO_MOMENTUM},
        {"m", p->m, ph != DS_ONEBIT_GRAD},
        {"w", p->w, after},
        {"v", p->v, after},
        {"u", p->u, ph >= DS_ONEBIT_ZO_LOCAL},
        {"at_sync", p->at_sync, ph == DS_ONEBIT_ZO_SYNC},
    };
    for (size_t k = 0; k < sizeof arg / sizeof arg[0]; k++)
        if (arg[k].needed) DS_TRY(ds_check_ptr(who, arg[k].name, arg[k].ptr, p->n));
    if (grad) DS_TRY(ds_check_float_dtype(who, "g", p->gt));
    return DS_OK;
}

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_ONEBIT_MATH_H */
