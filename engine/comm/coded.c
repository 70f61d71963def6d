/* The compressed all-reduce (codec.h): DeepSpeed's chunked scheme with
 * worker and server error feedback, per segment, over the communicator's
 * all_to_all and all_gather, so it is counted and timed like every other
 * collective. Its buffers are the backend's memory (the GPU's on cuda, where
 * the codec runs in kernels and NCCL or the staged path moves the records)
 * and every copy goes through the backend. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/codec.h"

/* One segment: where it lies in the vector, the padded vector, the error
 * buffers and each rank's message region. */
typedef struct seg {
    size_t off, n;       /* in the caller's vector */
    size_t poff, padded; /* in the padded vector and the worker error */
    size_t coff, chunk;  /* in the server error: chunk = padded / world */
    size_t woff, record; /* in each rank's region of the messages */
} seg;

struct ds_coded_scratch {
    const ds_codec *codec;
    ds_backend *be;         /* whose memory the buffers below are */
    int world, nseg;
    seg *segs;
    ds_coded_layout lay;
    size_t acc_n, msg_bytes;
    float *padded;          /* [lay.padded]: the input, zero-padded; then the result */
    float *acc;             /* [acc_n: the largest chunk]: the server's average */
    unsigned char *send;    /* world regions: the worker records, by destination */
    unsigned char *recv;    /* world regions: every rank's records of this rank's chunks */
    unsigned char *gather;  /* world regions: every server's records */
};

static size_t gcd(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* DeepSpeed: divider = lcm(world, 8), the tensor padded to a multiple of
 * world * divider, so every chunk is whole bytes of signs. */
static size_t pad_unit(const ds_codec *codec, int world) {
    size_t w = world > 0 ? (size_t)world : 1;
    size_t align = codec->elem_align ? codec->elem_align : 1;
    return w * (w / gcd(w, align) * align);
}

static void lay_out(const ds_codec *codec, const size_t *segs, int nseg, int world, seg *out,
                    ds_coded_layout *l) {
    size_t unit = pad_unit(codec, world), w = world > 0 ? (size_t)world : 1;
    *l = (ds_coded_layout){0};
    for (int s = 0; s < nseg; s++) {
        seg g = {.off = l->n, .n = segs[s], .poff = l->padded, .coff = l->server_n,
                 .woff = l->region};
        g.padded = (g.n + unit - 1) / unit * unit;
        g.chunk = g.padded / w;
        g.record = codec->wire_bytes(g.chunk);
        l->n += g.n;
        l->padded += g.padded;
        l->server_n += g.chunk;
        l->region += g.record;
        if (out) out[s] = g;
    }
    l->worker_n = l->padded;
}

ds_coded_layout ds_coded_layout_of(const ds_codec *codec, const size_t *segs, int nseg,
                                   int world) {
    ds_coded_layout l;
    lay_out(codec, segs, nseg, world, NULL, &l);
    return l;
}

ds_status ds_coded_scratch_create(const ds_codec *codec, ds_backend *be, const size_t *segs,
                                  int nseg, int world, ds_coded_scratch **out) {
    *out = NULL;
    if (!codec || !be || world < 1 || nseg < 0 || (nseg > 0 && !segs))
        return DS_ERR(DS_ERR_INVALID_ARG, "coded all-reduce: no codec, no backend, world < 1 or "
                      "no segments");
    ds_coded_scratch *s = calloc(1, sizeof *s);
    if (!s) return DS_ERR(DS_ERR_OOM, "coded all-reduce: out of host memory");
    s->codec = codec;
    s->be = be;
    s->world = world;
    s->nseg = nseg;
    s->segs = calloc((size_t)nseg + 1, sizeof *s->segs);
    if (!s->segs) {
        free(s);
        return DS_ERR(DS_ERR_OOM, "coded all-reduce of %d segment(s): out of host memory", nseg);
    }
    lay_out(codec, segs, nseg, world, s->segs, &s->lay);
    s->acc_n = 1;
    for (int k = 0; k < nseg; k++) s->acc_n = s->segs[k].chunk > s->acc_n ? s->segs[k].chunk : s->acc_n;
    s->msg_bytes = s->lay.region * (size_t)world + 1;
    void **bufs[5] = {(void **)&s->padded, (void **)&s->acc, (void **)&s->send,
                      (void **)&s->recv, (void **)&s->gather};
    size_t bytes[5] = {(s->lay.padded + 1) * sizeof(float), s->acc_n * sizeof(float),
                       s->msg_bytes, s->msg_bytes, s->msg_bytes};
    ds_status st = DS_OK;
    for (int k = 0; k < 5 && st == DS_OK; k++)
        st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, bytes[k], bufs[k]);
    if (st != DS_OK) {
        ds_coded_scratch_destroy(s);
        return st;
    }
    *out = s;
    return DS_OK;
}

void ds_coded_scratch_destroy(ds_coded_scratch *s) {
    if (!s) return;
    ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, s->padded,
                    (s->lay.padded + 1) * sizeof(float));
    ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, s->acc, s->acc_n * sizeof(float));
    ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, s->send, s->msg_bytes);
    ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, s->recv, s->msg_bytes);
    ds_backend_free(s->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, s->gather, s->msg_bytes);
    free(s->segs);
    free(s);
}

ds_status ds_comm_all_reduce_coded(ds_comm *c, float *buf, size_t n, const ds_codec *codec,
                                   float *worker_err, float *server_err,
                                   ds_coded_scratch *s) {
    if (!c || !codec || !s)
        return DS_ERR(DS_ERR_INVALID_ARG, "coded all-reduce: communicator, codec or scratch is "
                      "NULL");
    if (s->codec != codec || s->lay.n != n || s->world != c->world)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "coded all-reduce: scratch made for %zu elements of %s over %d ranks, "
                      "called with %zu of %s over %d",
                      s->lay.n, s->codec->name, s->world, n, codec->name, c->world);
    if (c->world == 1 || n == 0) return DS_OK;
    if (!buf || !worker_err || !server_err)
        return DS_ERR(DS_ERR_INVALID_ARG, "coded all-reduce: buffer or error feedback is NULL");
    int w = c->world, r = c->rank;
    size_t region = s->lay.region;
    ds_backend *be = s->be;

    /* 1. worker: each segment padded and encoded into one record per chunk,
     * rank k's record into region k. A segment that needs no padding (most
     * tensors: a multiple of world x lcm(world, 8) elements) is encoded
     * where it lies, the others from a padded copy. */
    for (int k = 0; k < s->nseg; k++) {
        const seg *g = &s->segs[k];
        float *p = s->padded + g->poff;
        if (g->padded == g->n) {
            p = buf + g->off;
        } else {
            DS_TRY(be->ops->memcpy(be, p, buf + g->off, g->n * sizeof(float), DS_COPY_D2D,
                                   NULL));
            DS_TRY(be->ops->memset(be, p + g->n, 0, (g->padded - g->n) * sizeof(float), NULL));
        }
        DS_TRY(codec->encode(be, p, worker_err + g->poff, g->padded, w, s->send + g->woff,
                             region));
    }
    DS_TRY(ds_comm_all_to_all(c, s->send, s->recv, region, DS_U8));

    /* 2. server of chunk r of every segment: the ranks' average, re-encoded */
    float inv = 1.0f / (float)w;
    unsigned char *mine = s->gather + (size_t)r * region;
    for (int k = 0; k < s->nseg; k++) {
        const seg *g = &s->segs[k];
        for (int q = 0; q < w; q++)
            DS_TRY(codec->decode(be, s->recv + (size_t)q * region + g->woff, g->chunk, inv, q > 0,
                                 s->acc));
        DS_TRY(codec->encode(be, s->acc, server_err + g->coff, g->chunk, 1, mine + g->woff,
                             region));
    }
    DS_TRY(ds_comm_all_gather(c, mine, s->gather, region, DS_U8));

    /* 3. every rank decodes every server's chunks: into buf where the
     * segment has no padding, else into the padded copy and back */
    for (int k = 0; k < s->nseg; k++) {
        const seg *g = &s->segs[k];
        bool whole = g->padded == g->n;
        float *p = whole ? buf + g->off : s->padded + g->poff;
        for (int q = 0; q < w; q++)
            DS_TRY(codec->decode(be, s->gather + (size_t)q * region + g->woff, g->chunk, 1.0f,
                                 false, p + (size_t)q * g->chunk));
        if (!whole)
            DS_TRY(be->ops->memcpy(be, buf + g->off, p, g->n * sizeof(float), DS_COPY_D2D,
                                   NULL));
    }
    return DS_OK;
}
