/* DeepSpeed's qgZ (codec_q4.h): int4 records over the backend's quantize_i4
 * slots, and the two-level reduce-scatter over the communicator's
 * all_to_allv on two sub-communicators (inside a host, across hosts), so
 * every byte is counted and timed like any other collective and lands in
 * the inside / across-host counter where it went. */
#include "engine/comm/codec_q4.h"

#include <stdlib.h>

#include "engine/backend/math.h"

static size_t scales_bytes(size_t n) { return 4 * ds_q8_nblocks(n, DS_Q4_BLOCK); }

size_t ds_q4_record_bytes(size_t n) { return scales_bytes(n) + ds_q4_values_bytes(n); }

ds_status ds_q4_encode(ds_backend *be, const void *x, ds_dtype t, size_t n, void *rec) {
    if (n == 0) return DS_OK;
    uint8_t *p = rec;
    DS_TRY(be->ops->quantize_i4(be, p + scales_bytes(n), (float *)p, x, t, n, DS_Q4_BLOCK));
    return DS_OK;
}

ds_status ds_q4_decode(ds_backend *be, const void *rec, size_t n, float *y) {
    if (n == 0) return DS_OK;
    const uint8_t *p = rec;
    DS_TRY(be->ops->dequantize_i4(be, y, p + scales_bytes(n), (const float *)p, n, DS_Q4_BLOCK));
    return DS_OK;
}

/* Values decoded, summed and re-encoded at once: the fp32 slices of the
 * scratch (256 KiB each), a multiple of DS_Q4_BLOCK. */
#define Q4_RS_SLICE ((size_t)1 << 16)
#define Q4_RS_ROUND ((size_t)1 << 21)

struct ds_q4_rs {
    ds_backend *be;
    ds_comm *c;             /* the communicator it was made over */
    ds_comm *intra, *inter; /* this rank's host; this place on every host */
    int world, L, H;        /* world = H hosts x L ranks */
    size_t chunk;           /* values of a block per round */
    size_t rec;             /* ds_q4_record_bytes(chunk): the most a record holds */
    uint8_t *s1, *r1;       /* level 1: world records each way */
    uint8_t *s2, *r2;       /* level 2: H records each way */
    float *sum, *tmp;       /* [slice] */
    size_t slice;
    size_t *c1, *c2;        /* [L], [H]: the round's byte counts per peer */
};

static size_t rs_chunk(int world, size_t chunk) {
    if (chunk == 0) chunk = Q4_RS_ROUND / (size_t)world;
    chunk -= chunk % DS_Q4_BLOCK;
    return chunk < DS_Q4_BLOCK ? DS_Q4_BLOCK : chunk;
}

static size_t rs_slice(size_t chunk) { return chunk < Q4_RS_SLICE ? chunk : Q4_RS_SLICE; }

size_t ds_q4_rs_bytes(int world, int per_host, size_t chunk) {
    if (world < 1 || per_host < 1 || world % per_host) return 0;
    size_t c = rs_chunk(world, chunk), hosts = (size_t)(world / per_host);
    return 2 * ((size_t)world + hosts) * ds_q4_record_bytes(c) + 2 * 4 * rs_slice(c);
}

ds_status ds_q4_rs_create(ds_backend *be, ds_comm *c, int per_host, size_t chunk, ds_q4_rs **out) {
    *out = NULL;
    if (!be || !c || per_host < 1 || c->world % per_host)
        return DS_ERR(DS_ERR_INVALID_ARG, "int4 reduce-scatter: no backend or communicator, or "
                      "%d ranks per host do not divide %d ranks", per_host, c ? c->world : 0);
    ds_q4_rs *q = calloc(1, sizeof *q);
    if (!q) return DS_ERR(DS_ERR_OOM, "int4 reduce-scatter: out of host memory");
    size_t ch = rs_chunk(c->world, chunk);
    *q = (ds_q4_rs){.be = be, .c = c, .world = c->world, .L = per_host,
                    .H = c->world / per_host, .chunk = ch, .rec = ds_q4_record_bytes(ch),
                    .slice = rs_slice(ch)};
    int r = c->rank;
    /* both splits on every rank, in the same order, even after a failure of
     * the first (a rank that skipped one would stall the others) */
    ds_status st = ds_comm_split(c, r / per_host, r, &q->intra);
    ds_status st2 = ds_comm_split(c, r % per_host, r, &q->inter);
    if (st == DS_OK) st = st2;
    size_t b1 = (size_t)q->world * q->rec, b2 = (size_t)q->H * q->rec;
    void **bufs[4] = {(void **)&q->s1, (void **)&q->r1, (void **)&q->s2, (void **)&q->r2};
    size_t sizes[4] = {b1, b1, b2, b2};
    for (int k = 0; k < 4 && st == DS_OK; k++)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, sizes[k], bufs[k]);
    if (st == DS_OK)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, 4 * q->slice, (void **)&q->sum);
    if (st == DS_OK)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, 4 * q->slice, (void **)&q->tmp);
    if (st == DS_OK && (!(q->c1 = calloc((size_t)q->L, sizeof *q->c1)) ||
                        !(q->c2 = calloc((size_t)q->H, sizeof *q->c2))))
        st = DS_ERR(DS_ERR_OOM, "int4 reduce-scatter: out of host memory");
    if (st != DS_OK) {
        ds_q4_rs_destroy(q);
        DS_TRY(st);
    }
    *out = q;
    return DS_OK;
}

void ds_q4_rs_destroy(ds_q4_rs *q) {
    if (!q) return;
    size_t b1 = (size_t)q->world * q->rec, b2 = (size_t)q->H * q->rec;
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->s1, b1);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->r1, b1);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->s2, b2);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->r2, b2);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->sum, 4 * q->slice);
    ds_backend_free(q->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, q->tmp, 4 * q->slice);
    ds_comm_destroy(q->inter);
    ds_comm_destroy(q->intra);
    free(q->c1);
    free(q->c2);
    free(q);
}

void ds_q4_rs_traffic(const ds_q4_rs *q, uint64_t *inside, uint64_t *across) {
    *inside = q && q->intra ? q->intra->stats.bytes_sent[DS_COLL_ALL_TO_ALL] : 0;
    *across = q && q->inter ? q->inter->stats.bytes_sent[DS_COLL_ALL_TO_ALL] : 0;
}

/* Values [lo, lo + len) of the record of n values at rec: lo a multiple of
 * DS_Q4_BLOCK (so even), so the slice's groups and bytes are the record's. */
static ds_status decode_slice(ds_backend *be, const uint8_t *rec, size_t n, size_t lo, size_t len,
                              float *y) {
    return be->ops->dequantize_i4(be, y, rec + scales_bytes(n) + lo / 2,
                                  (const float *)rec + lo / DS_Q4_BLOCK, len, DS_Q4_BLOCK);
}

static ds_status encode_slice(ds_backend *be, const float *x, uint8_t *rec, size_t n, size_t lo,
                              size_t len) {
    return be->ops->quantize_i4(be, rec + scales_bytes(n) + lo / 2,
                                (float *)rec + lo / DS_Q4_BLOCK, x, DS_F32, len, DS_Q4_BLOCK);
}

/* The part of a block of n values that round `lo` (its first value) carries. */
static size_t piece(size_t n, size_t lo, size_t chunk) {
    return n <= lo ? 0 : n - lo < chunk ? n - lo : chunk;
}

/* Sum into q->sum the slice [s, s + len) of `k` records of n values each,
 * the first at p, the next `stride` bytes on (level 1: one per source of
 * the host; level 2: one per host), in order. */
static ds_status sum_records(ds_q4_rs *q, const uint8_t *p, size_t stride, int k, size_t n,
                             size_t s, size_t len) {
    ds_backend *be = q->be;
    DS_TRY(decode_slice(be, p, n, s, len, q->sum));
    for (int j = 1; j < k; j++) {
        DS_TRY(decode_slice(be, p + (size_t)j * stride, n, s, len, q->tmp));
        DS_TRY(be->ops->axpy(be, q->sum, DS_F32, 1.0f, q->tmp, DS_F32, len));
    }
    return DS_OK;
}

ds_status ds_comm_reduce_scatterv_q4_add(ds_comm *c, ds_q4_rs *q, const void *send, ds_dtype t,
                                         const size_t *counts, void *acc, ds_dtype acc_t) {
    if (!c || !q || !counts)
        return DS_ERR(DS_ERR_INVALID_ARG, "int4 reduce-scatter: communicator, scratch or counts "
                      "is NULL");
    if (c != q->c)
        return DS_ERR(DS_ERR_INVALID_ARG, "int4 reduce-scatter: called over another "
                      "communicator than its scratch was made over");
    ds_backend *be = q->be;
    int L = q->L, H = q->H, me = c->rank, l = me % L;
    size_t es = ds_dtype_size(t), aes = ds_dtype_size(acc_t), longest = 0;
    for (int r = 0; r < q->world; r++)
        if (counts[r] > longest) longest = counts[r];
    for (size_t lo = 0; lo < longest; lo += q->chunk) { /* the same rounds on every rank */
        /* 1. records by place, then host: block h' L + l' at place l' */
        size_t boff = 0;
        for (int dl = 0; dl < L; dl++) {
            q->c1[dl] = 0;
            for (int h = 0; h < H; h++) {
                int b = h * L + dl;
                size_t off = 0;
                for (int r = 0; r < b; r++) off += counts[r];
                size_t n = piece(counts[b], lo, q->chunk);
                DS_TRY(ds_q4_encode(be, (const uint8_t *)send + (off + lo) * es, t, n,
                                    q->s1 + boff));
                q->c1[dl] += ds_q4_record_bytes(n);
                boff += ds_q4_record_bytes(n);
            }
        }
        DS_TRY(ds_comm_all_to_allv(q->intra, q->s1, q->r1, q->c1, DS_U8));
        /* 2. per host h': the host's L records of block h' L + l summed and
         * encoded again as record h' of level 2. Each source sent c1[l]
         * bytes, its records in host order with the same sizes as level
         * 2's, so record h' sits at the same offset in both. */
        size_t from = q->c1[l], hoff = 0;
        for (int h = 0; h < H; h++) {
            size_t n = piece(counts[h * L + l], lo, q->chunk);
            for (size_t s = 0; s < n; s += q->slice) {
                size_t len = n - s < q->slice ? n - s : q->slice;
                DS_TRY(sum_records(q, q->r1 + hoff, from, L, n, s, len));
                DS_TRY(encode_slice(be, q->sum, q->s2 + hoff, n, s, len));
            }
            q->c2[h] = ds_q4_record_bytes(n);
            hoff += q->c2[h];
        }
        /* 3. across hosts among the ranks at place l: record h' to host h' */
        DS_TRY(ds_comm_all_to_allv(q->inter, q->s2, q->r2, q->c2, DS_U8));
        /* 4. the H partial sums of this rank's block, summed in host order,
         * added to acc slice by slice */
        size_t n = piece(counts[me], lo, q->chunk), rb = ds_q4_record_bytes(n);
        for (size_t s = 0; s < n; s += q->slice) {
            size_t len = n - s < q->slice ? n - s : q->slice;
            DS_TRY(sum_records(q, q->r2, rb, H, n, s, len));
            DS_TRY(be->ops->axpy(be, (uint8_t *)acc + (lo + s) * aes, acc_t, 1.0f, q->sum, DS_F32,
                                 len));
        }
    }
    return DS_OK;
}
