/* The compressed all-reduce (codec.h): DeepSpeed's chunked scheme with
 * worker and server error feedback, over the communicator's all_to_all and
 * all_gather, so it is counted and timed like every other collective. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/codec.h"

struct ds_coded_scratch {
    const ds_codec *codec;
    size_t n;
    int world;
    ds_coded_layout lay;
    float *padded;          /* [lay.padded]: the input, zero-padded; then the result */
    float *acc;             /* [lay.chunk]: the server's average */
    unsigned char *send;    /* world worker records */
    unsigned char *recv;    /* world worker records of this rank's chunk */
    unsigned char *gather;  /* world server records */
};

static size_t gcd(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

ds_coded_layout ds_coded_layout_of(const ds_codec *codec, size_t n, int world) {
    ds_coded_layout l = {0};
    size_t w = world > 0 ? (size_t)world : 1;
    size_t align = codec->elem_align ? codec->elem_align : 1;
    /* DeepSpeed: divider = lcm(world, 8), the tensor padded to a multiple of
     * world * divider, so every chunk is whole bytes of signs. */
    size_t lcm = w / gcd(w, align) * align;
    size_t unit = w * lcm;
    l.padded = (n + unit - 1) / unit * unit;
    l.chunk = l.padded / w;
    l.worker_n = l.padded;
    l.server_n = l.chunk;
    l.record = codec->wire_bytes(l.chunk);
    return l;
}

ds_status ds_coded_scratch_create(const ds_codec *codec, size_t n, int world,
                                  ds_coded_scratch **out) {
    *out = NULL;
    if (!codec || world < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "coded all-reduce: %s", codec ? "world < 1" : "no codec");
    ds_coded_scratch *s = calloc(1, sizeof *s);
    if (!s) return DS_ERR(DS_ERR_OOM, "coded all-reduce: out of host memory");
    s->codec = codec;
    s->n = n;
    s->world = world;
    s->lay = ds_coded_layout_of(codec, n, world);
    size_t recs = s->lay.record * (size_t)world;
    s->padded = calloc(s->lay.padded ? s->lay.padded : 1, sizeof(float));
    s->acc = calloc(s->lay.chunk ? s->lay.chunk : 1, sizeof(float));
    s->send = malloc(recs ? recs : 1);
    s->recv = malloc(recs ? recs : 1);
    s->gather = malloc(recs ? recs : 1);
    if (!s->padded || !s->acc || !s->send || !s->recv || !s->gather) {
        ds_coded_scratch_destroy(s);
        return DS_ERR(DS_ERR_OOM, "coded all-reduce of %zu elements: out of host memory", n);
    }
    *out = s;
    return DS_OK;
}

void ds_coded_scratch_destroy(ds_coded_scratch *s) {
    if (!s) return;
    free(s->padded);
    free(s->acc);
    free(s->send);
    free(s->recv);
    free(s->gather);
    free(s);
}

ds_status ds_comm_all_reduce_coded(ds_comm *c, float *buf, size_t n, const ds_codec *codec,
                                   float *worker_err, float *server_err,
                                   ds_coded_scratch *s) {
    if (!c || !codec || !s)
        return DS_ERR(DS_ERR_INVALID_ARG, "coded all-reduce: communicator, codec or scratch is "
                      "NULL");
    if (s->codec != codec || s->n != n || s->world != c->world)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "coded all-reduce: scratch made for %zu elements of %s over %d ranks, "
                      "called with %zu of %s over %d",
                      s->n, s->codec->name, s->world, n, codec->name, c->world);
    if (c->world == 1 || n == 0) return DS_OK;
    if (!buf || !worker_err || !server_err)
        return DS_ERR(DS_ERR_INVALID_ARG, "coded all-reduce: buffer or error feedback is NULL");
    const ds_coded_layout *l = &s->lay;
    int w = c->world, r = c->rank;

    /* 1. worker: encode the padded vector into one record per chunk */
    memcpy(s->padded, buf, n * sizeof(float));
    memset(s->padded + n, 0, (l->padded - n) * sizeof(float));
    codec->encode(s->padded, worker_err, l->padded, w, s->send);
    DS_TRY(ds_comm_all_to_all(c, s->send, s->recv, l->record, DS_U8));

    /* 2. server of chunk r: the average of the ranks' records, re-encoded */
    float inv = 1.0f / (float)w;
    for (int k = 0; k < w; k++)
        codec->decode(s->recv + (size_t)k * l->record, l->chunk, inv, k > 0, s->acc);
    unsigned char *mine = s->gather + (size_t)r * l->record;
    codec->encode(s->acc, server_err, l->chunk, 1, mine);
    DS_TRY(ds_comm_all_gather(c, mine, s->gather, l->record, DS_U8));

    /* 3. every rank decodes every server's chunk */
    for (int k = 0; k < w; k++)
        codec->decode(s->gather + (size_t)k * l->record, l->chunk, 1.0f, false,
                      s->padded + (size_t)k * l->chunk);
    memcpy(buf, s->padded, n * sizeof(float));
    return DS_OK;
}
