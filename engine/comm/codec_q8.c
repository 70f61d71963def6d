/* The blockwise int8 codec (codec_q8.h): records over the backend's
 * quantization slots, and qgZ's quantized reduce-scatter over the
 * communicator's all_to_allv, so it is counted and timed like every other
 * collective. */
#include "engine/comm/codec_q8.h"

#include <stdint.h>
#include <stdlib.h>

#include "engine/backend/math.h"

size_t ds_q8_record_bytes(size_t n) { return ds_q8_packed_bytes(n, DS_Q8_BLOCK); }

size_t ds_q8_records_bytes_max(size_t n, int world) {
    return ds_q8_gather_bytes(n, world > 0 ? (size_t)world : 1);
}

/* A record: its scales first, then the values. */
static size_t scales_bytes(size_t n) { return 4 * ds_q8_nblocks(n, DS_Q8_BLOCK); }

ds_status ds_q8_encode(ds_backend *be, const void *x, ds_dtype t, size_t n, void *rec) {
    if (n == 0) return DS_OK;
    uint8_t *p = rec;
    DS_TRY(be->ops->quantize_i8(be, (int8_t *)(p + scales_bytes(n)), (float *)p, x, t, n,
                                DS_Q8_BLOCK));
    return DS_OK;
}

ds_status ds_q8_decode(ds_backend *be, const void *rec, size_t n, float *y) {
    if (n == 0) return DS_OK;
    const uint8_t *p = rec;
    DS_TRY(be->ops->dequantize_i8(be, y, (const int8_t *)(p + scales_bytes(n)), (const float *)p,
                                  n, DS_Q8_BLOCK));
    return DS_OK;
}

ds_status ds_q8_decode_all(ds_backend *be, const void *recs, const size_t *counts, int world,
                           float *y) {
    const uint8_t *p = recs;
    for (int r = 0; r < world; r++) {
        DS_TRY(ds_q8_decode(be, p, counts[r], y));
        y += counts[r];
        p += ds_q8_record_bytes(counts[r]);
    }
    return DS_OK;
}

/* Values decoded and summed at once on the receiving side: the two fp32
 * slices of the scratch (256 KiB each), a multiple of DS_Q8_BLOCK. */
#define Q8_RS_SLICE ((size_t)1 << 16)

struct ds_q8_rs {
    ds_backend *be;
    int world;
    size_t chunk;         /* values of a rank's block per round */
    uint8_t *send, *recv; /* one round's records: by destination; every rank's of this rank's piece */
    size_t rec_bytes;     /* each of send and recv: world records of chunk values */
    float *sum, *tmp;     /* [slice]: a slice of the sum; one rank's slice decoded before it is added */
    size_t slice;
    size_t *rcounts;      /* [world]: the round's records' byte counts */
};

static size_t rs_chunk(int world, size_t chunk) {
    if (chunk == 0) chunk = DS_Q8_RS_ROUND / (size_t)world;
    chunk -= chunk % DS_Q8_BLOCK;
    return chunk < DS_Q8_BLOCK ? DS_Q8_BLOCK : chunk;
}

static size_t rs_slice(size_t chunk) { return chunk < Q8_RS_SLICE ? chunk : Q8_RS_SLICE; }

size_t ds_q8_rs_bytes(int world, size_t chunk) {
    if (world < 1) return 0;
    size_t c = rs_chunk(world, chunk);
    return 2 * (size_t)world * ds_q8_record_bytes(c) + 2 * 4 * rs_slice(c);
}

ds_status ds_q8_rs_create(ds_backend *be, int world, size_t chunk, ds_q8_rs **out) {
    *out = NULL;
    if (!be || world < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "quantized reduce-scatter: no backend or world %d < 1",
                      world);
    ds_q8_rs *q = calloc(1, sizeof *q);
    if (!q) return DS_ERR(DS_ERR_OOM, "quantized reduce-scatter: out of host memory");
    size_t c = rs_chunk(world, chunk);
    *q = (ds_q8_rs){.be = be, .world = world, .chunk = c,
                    .rec_bytes = (size_t)world * ds_q8_record_bytes(c), .slice = rs_slice(c)};
    void **bufs[2] = {(void **)&q->send, (void **)&q->recv};
    void **f32[2] = {(void **)&q->sum, (void **)&q->tmp};
    ds_status st = DS_OK;
    for (int k = 0; k < 2 && st == DS_OK; k++)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->rec_bytes, bufs[k]);
    for (int k = 0; k < 2 && st == DS_OK; k++)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, 4 * q->slice, f32[k]);
    if (st == DS_OK && !(q->rcounts = calloc((size_t)world, sizeof *q->rcounts)))
        st = DS_ERR(DS_ERR_OOM, "quantized reduce-scatter: out of host memory");
    if (st != DS_OK) {
        ds_q8_rs_destroy(q);
        DS_TRY(st);
    }
    *out = q;
    return DS_OK;
}

void ds_q8_rs_destroy(ds_q8_rs *q) {
    if (!q) return;
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->send, q->rec_bytes);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->recv, q->rec_bytes);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->sum, 4 * q->slice);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->tmp, 4 * q->slice);
    free(q->rcounts);
    free(q);
}

/* Values [lo, lo + len) of the record of n values at rec decoded into y; lo
 * a multiple of DS_Q8_BLOCK, so the slice's blocks are the record's. */
static ds_status decode_slice(ds_backend *be, const uint8_t *rec, size_t n, size_t lo, size_t len,
                              float *y) {
    return be->ops->dequantize_i8(be, y, (const int8_t *)(rec + scales_bytes(n) + lo),
                                  (const float *)rec + lo / DS_Q8_BLOCK, len, DS_Q8_BLOCK);
}

/* The part of a block of n values that round `lo` (its first value) carries. */
static size_t piece(size_t n, size_t lo, size_t chunk) {
    return n <= lo ? 0 : n - lo < chunk ? n - lo : chunk;
}

ds_status ds_comm_reduce_scatterv_q8_add(ds_comm *c, ds_q8_rs *q, const void *send, ds_dtype t,
                                         const size_t *counts, void *acc, ds_dtype acc_t) {
    if (!c || !q || !counts)
        return DS_ERR(DS_ERR_INVALID_ARG, "quantized reduce-scatter: communicator, scratch or "
                      "counts is NULL");
    int w = c->world, me = c->rank;
    if (w != q->world)
        return DS_ERR(DS_ERR_INVALID_ARG, "quantized reduce-scatter: scratch for %d ranks, "
                      "called over %d", q->world, w);
    ds_backend *be = q->be;
    size_t es = ds_dtype_size(t), aes = ds_dtype_size(acc_t), longest = 0;
    for (int r = 0; r < w; r++)
        if (counts[r] > longest) longest = counts[r];
    for (size_t lo = 0; lo < longest; lo += q->chunk) { /* the same rounds on every rank */
        size_t off = 0, boff = 0;
        for (int r = 0; r < w; r++) { /* record r: this round's piece of rank r's block */
            size_t n = piece(counts[r], lo, q->chunk);
            DS_TRY(ds_q8_encode(be, (const uint8_t *)send + (off + lo) * es, t, n,
                                q->send + boff));
            q->rcounts[r] = ds_q8_record_bytes(n);
            off += counts[r];
            boff += q->rcounts[r];
        }
        DS_TRY(ds_comm_all_to_allv(c, q->send, q->recv, q->rcounts, DS_U8));
        /* rank 0's record into the sum, the others added in rank order (the
         * fp32 sum of what every rank's record carries), the slice then
         * added to acc */
        size_t n = piece(counts[me], lo, q->chunk), rec = ds_q8_record_bytes(n);
        for (size_t s = 0; s < n; s += q->slice) {
            size_t len = n - s < q->slice ? n - s : q->slice;
            DS_TRY(decode_slice(be, q->recv, n, s, len, q->sum));
            for (int r = 1; r < w; r++) {
                DS_TRY(decode_slice(be, q->recv + (size_t)r * rec, n, s, len, q->tmp));
                DS_TRY(be->ops->axpy(be, q->sum, DS_F32, 1.0f, q->tmp, DS_F32, len));
            }
            DS_TRY(be->ops->axpy(be, (uint8_t *)acc + (lo + s) * aes, acc_t, 1.0f, q->sum, DS_F32,
                                 len));
        }
    }
    return DS_OK;
}
