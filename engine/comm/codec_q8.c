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

struct ds_q8_rs {
    ds_backend *be;
    int world;
    size_t cap, block_cap;
    uint8_t *send, *recv; /* the records by destination; every rank's record of this rank's block */
    size_t send_bytes, recv_bytes;
    float *tmp;           /* [block_cap]: one rank's block decoded before it is added */
    size_t *rcounts;      /* [world]: the records' byte counts */
};

static size_t recv_bytes(int world, size_t block_cap) {
    return (size_t)world * ds_q8_record_bytes(block_cap);
}

size_t ds_q8_rs_bytes(int world, size_t cap, size_t block_cap) {
    return ds_q8_records_bytes_max(cap, world) + recv_bytes(world, block_cap) + 4 * block_cap;
}

ds_status ds_q8_rs_create(ds_backend *be, int world, size_t cap, size_t block_cap,
                          ds_q8_rs **out) {
    *out = NULL;
    if (!be || world < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "quantized reduce-scatter: no backend or world %d < 1",
                      world);
    ds_q8_rs *q = calloc(1, sizeof *q);
    if (!q) return DS_ERR(DS_ERR_OOM, "quantized reduce-scatter: out of host memory");
    *q = (ds_q8_rs){.be = be, .world = world, .cap = cap, .block_cap = block_cap,
                    .send_bytes = ds_q8_records_bytes_max(cap, world),
                    .recv_bytes = recv_bytes(world, block_cap)};
    ds_status st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->send_bytes,
                                    (void **)&q->send);
    if (st == DS_OK)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->recv_bytes,
                              (void **)&q->recv);
    if (st == DS_OK)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, 4 * block_cap,
                              (void **)&q->tmp);
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
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->send, q->send_bytes);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->recv, q->recv_bytes);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->tmp, 4 * q->block_cap);
    free(q->rcounts);
    free(q);
}

ds_status ds_comm_reduce_scatterv_q8(ds_comm *c, ds_q8_rs *q, const void *send, ds_dtype t,
                                     const size_t *counts, float *recv) {
    if (!c || !q || !counts)
        return DS_ERR(DS_ERR_INVALID_ARG, "quantized reduce-scatter: communicator, scratch or "
                      "counts is NULL");
    size_t total = 0;
    for (int r = 0; r < c->world; r++) total += counts[r];
    int w = c->world, me = c->rank;
    size_t mine = counts[me];
    if (w != q->world || total > q->cap || mine > q->block_cap)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "quantized reduce-scatter: scratch for %zu values (%zu per rank) over %d "
                      "ranks, called with %zu (%zu for rank %d) over %d",
                      q->cap, q->block_cap, q->world, total, mine, me, w);
    ds_backend *be = q->be;
    size_t es = ds_dtype_size(t), off = 0, boff = 0;
    for (int r = 0; r < w; r++) { /* record r: rank r's block, to rank r */
        DS_TRY(ds_q8_encode(be, (const uint8_t *)send + off * es, t, counts[r], q->send + boff));
        q->rcounts[r] = ds_q8_record_bytes(counts[r]);
        off += counts[r];
        boff += q->rcounts[r];
    }
    DS_TRY(ds_comm_all_to_allv(c, q->send, q->recv, q->rcounts, DS_U8));
    /* rank 0's record straight into recv, the others added in rank order:
     * the fp32 sum of what every rank's record carries */
    size_t rec = ds_q8_record_bytes(mine);
    if (mine == 0) return DS_OK;
    DS_TRY(ds_q8_decode(be, q->recv, mine, recv));
    for (int r = 1; r < w; r++) {
        DS_TRY(ds_q8_decode(be, q->recv + (size_t)r * rec, mine, q->tmp));
        DS_TRY(be->ops->axpy(be, recv, DS_F32, 1.0f, q->tmp, DS_F32, mine));
    }
    return DS_OK;
}
