/* qgZ's quantized reduce-scatter (engine/comm/codec_q8.h,
 * ds_comm_reduce_scatterv_q8_add) in rounds of a fixed scratch, at 2 and 4
 * ranks, cpu backend.
 *
 * 1. Against a serial reference, 0 ulps: every rank generates every rank's
 *    send buffer (fixed seeds) and runs the one-round scheme itself: rank
 *    r's block `me` encoded as ONE record (ds_q8_encode), decoded
 *    (ds_q8_decode), the world decodings summed in fp32 in rank order, the
 *    sum added to acc. The collective runs with chunks of 1, 2 and 3
 *    quantization blocks and with the default (one round here): blocks
 *    of several chunks, not multiples of 4 or of a block, one empty, one
 *    past the receiver's 64 Ki slice, so rounds carry uneven pieces and
 *    some ranks none. Sends in fp32 and
 *    bf16, acc in fp32 and bf16 (the bf16 acc against the default chunk's
 *    result: the reference's last add would be the backend's axpy).
 * 2. The counters: every call sends this rank the same bytes as one record
 *    per other rank's whole block (sum over b != me of
 *    ds_q8_record_bytes(counts[b])), in ceil(max counts / chunk) calls.
 * 3. The scratch is bounded: what the accountant records for it equals
 *    ds_q8_rs_bytes(world, chunk), whatever the blocks passed later (here
 *    up to 17x a chunk), and the default's figure at 2 ranks is under
 *    5 MiB (the whole-block scratch it replaced was 50 MiB for BERT-mini). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/math.h"
#include "engine/comm/codec_q8.h"
#include "engine/comm/comm.h"
#include "engine/core/mem.h"
#include "tests/unit/test_util.h"

#define MAXW 4

static float gen(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(*s >> 33) % 20001 - 10000) / 1000.0f; /* [-10, 10] */
}

/* Rank r's send buffer (its blocks back to back), as `t`; every rank can
 * make every rank's. One value in 5000 is 40x larger, so that the blocks'
 * scales differ. */
static void *make_send(int r, const size_t *counts, int w, ds_dtype t, size_t *total) {
    size_t n = 0;
    for (int b = 0; b < w; b++) n += counts[b];
    *total = n;
    void *x = malloc((n ? n : 1) * ds_dtype_size(t));
    uint64_t s = 1000003u * (uint64_t)(r + 1);
    for (size_t i = 0; i < n; i++) {
        float v = gen(&s) * (i % 5000 == 17 ? 40.0f : 1.0f);
        if (t == DS_BF16) ((uint16_t *)x)[i] = ds_f32_to_bf16(v);
        else ((float *)x)[i] = v;
    }
    return x;
}

static void make_acc(int me, size_t n, float *acc) {
    uint64_t s = 77u + (uint64_t)me;
    for (size_t i = 0; i < n; i++) acc[i] = gen(&s);
}

/* The one-round scheme, serially: acc[i] += sum over r (rank order) of the
 * decoding of rank r's record of block `me`. */
static void reference(ds_backend *be, const size_t *counts, int w, int me, ds_dtype t,
                      float *acc) {
    size_t n = counts[me], off = 0;
    for (int b = 0; b < me; b++) off += counts[b];
    float *sum = calloc(n + 1, 4), *dec = calloc(n + 1, 4);
    uint8_t *rec = malloc(ds_q8_record_bytes(n) + 4);
    for (int r = 0; r < w; r++) {
        size_t total;
        uint8_t *x = make_send(r, counts, w, t, &total);
        CHECK_OK(ds_q8_encode(be, x + off * ds_dtype_size(t), t, n, rec));
        CHECK_OK(ds_q8_decode(be, rec, n, dec));
        for (size_t i = 0; i < n; i++) sum[i] = r == 0 ? dec[i] : sum[i] + dec[i];
        free(x);
    }
    for (size_t i = 0; i < n; i++) acc[i] += sum[i];
    free(sum), free(dec), free(rec);
}

/* One call of the collective with scratch of `chunk` (0: the default),
 * acc of acc_t starting from make_acc; checks the counters and the
 * accountant; returns acc as fp32 (malloc'd). */
static float *collective(ds_comm *c, ds_backend *be, ds_mem *mem, const size_t *counts,
                         ds_dtype t, ds_dtype acc_t, size_t chunk) {
    int w = c->world, me = c->rank;
    size_t n = counts[me], total;
    void *send = make_send(me, counts, w, t, &total);
    float *acc = malloc((n + 1) * 4);
    make_acc(me, n, acc);
    void *dst = acc;
    uint16_t *acc16 = NULL;
    if (acc_t == DS_BF16) {
        acc16 = malloc((n + 1) * 2);
        for (size_t i = 0; i < n; i++) acc16[i] = ds_f32_to_bf16(acc[i]);
        dst = acc16;
    }
    ds_mem_report m0, m1;
    ds_mem_snapshot(mem, &m0);
    ds_q8_rs *q = NULL;
    if (!TEST_OK(ds_q8_rs_create(be, w, chunk, &q))) exit(1);
    ds_mem_snapshot(mem, &m1);
    uint64_t scratch = m1.bytes[DS_MEM_BUFFERS][DS_PLACE_DEVICE] -
                       m0.bytes[DS_MEM_BUFFERS][DS_PLACE_DEVICE];
    CHECK(scratch == ds_q8_rs_bytes(w, chunk), "chunk %zu: the accountant saw %llu bytes of "
          "scratch, ds_q8_rs_bytes says %zu", chunk, (unsigned long long)scratch,
          ds_q8_rs_bytes(w, chunk));
    ds_comm_stats before = c->stats;
    CHECK_OK(ds_comm_reduce_scatterv_q8_add(c, q, send, t, counts, dst, acc_t));
    uint64_t bytes = c->stats.bytes_sent[DS_COLL_ALL_TO_ALL] -
                     before.bytes_sent[DS_COLL_ALL_TO_ALL];
    uint64_t calls = c->stats.calls[DS_COLL_ALL_TO_ALL] - before.calls[DS_COLL_ALL_TO_ALL];
    uint64_t want = 0;
    size_t longest = 0, c_eff = chunk ? chunk - chunk % DS_Q8_BLOCK : 0;
    for (int b = 0; b < w; b++) {
        if (b != me) want += ds_q8_record_bytes(counts[b]);
        if (counts[b] > longest) longest = counts[b];
    }
    CHECK(bytes == want, "chunk %zu: %llu all_to_all bytes sent, one record per block: %llu",
          chunk, (unsigned long long)bytes, (unsigned long long)want);
    if (c_eff) /* the default's chunk is the codec's choice: calls not predicted */
        CHECK(calls == (longest + c_eff - 1) / c_eff, "chunk %zu: %llu all_to_all calls, "
              "rounds %zu", chunk, (unsigned long long)calls, (longest + c_eff - 1) / c_eff);
    ds_q8_rs_destroy(q);
    if (acc16) {
        for (size_t i = 0; i < n; i++) acc[i] = ds_bf16_to_f32(acc16[i]);
        free(acc16);
    }
    free(send);
    return acc;
}

static size_t diffs(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
    return bad;
}

int main(void) {
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI};
    REQUIRE_OK(ds_comm_create(&d, &c));
    test_set_rank(c->rank);
    ds_mem *mem = NULL;
    ds_backend *be = NULL;
    REQUIRE_OK(ds_mem_create(&mem));
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 1, .mem = mem};
    REQUIRE_OK(ds_backend_create(&bd, &be));
    int w = c->world, me = c->rank;
    if (w > MAXW) {
        TEST_FAIL("at most %d ranks", MAXW);
        return test_finish("test_q8_rs");
    }
    /* 17 blocks + 5 values (several chunks, not a multiple of 4, past the
     * receiver's 64 Ki slice in one round of the default chunk), none, 2.5
     * blocks, one value */
    const size_t shapes[MAXW] = {17 * DS_Q8_BLOCK + 5, 0, 2 * DS_Q8_BLOCK + 2048, 1};
    size_t counts[MAXW];
    for (int b = 0; b < w; b++) counts[b] = shapes[(b + 1) % MAXW]; /* rank 0's block empty */
    if (w == 2) counts[1] = shapes[0];
    const size_t chunks[4] = {DS_Q8_BLOCK, 2 * DS_Q8_BLOCK, 3 * DS_Q8_BLOCK + 100, 0};
    const ds_dtype ts[2] = {DS_F32, DS_BF16};
    size_t n = counts[me];
    for (int k = 0; k < 2; k++) {
        float *want = malloc((n + 1) * 4);
        make_acc(me, n, want);
        reference(be, counts, w, me, ts[k], want);
        float *one = collective(c, be, mem, counts, ts[k], DS_BF16, 0);
        for (int j = 0; j < 4; j++) {
            float *got = collective(c, be, mem, counts, ts[k], DS_F32, chunks[j]);
            size_t bad = diffs(got, want, n);
            CHECK(bad == 0, "send %s, chunk %zu: %zu of %zu values differ from the one-round "
                  "reference", ds_dtype_name(ts[k]), chunks[j], bad, n);
            free(got);
            got = collective(c, be, mem, counts, ts[k], DS_BF16, chunks[j]);
            bad = diffs(got, one, n);
            CHECK(bad == 0, "send %s, acc bf16, chunk %zu: %zu of %zu values differ from the "
                  "default chunk's", ds_dtype_name(ts[k]), chunks[j], bad, n);
            free(got);
        }
        free(one), free(want);
    }
    /* bounded: the default at 2 ranks, 5 MiB against 50 MiB before */
    CHECK(ds_q8_rs_bytes(2, 0) < (size_t)5 << 20, "default scratch at 2 ranks: %zu bytes",
          ds_q8_rs_bytes(2, 0));
    if (me == 0)
        printf("test_q8_rs: %d ranks, default scratch %zu bytes (%.2f MiB)\n", w,
               ds_q8_rs_bytes(w, 0), (double)ds_q8_rs_bytes(w, 0) / (1 << 20));
    ds_backend_destroy(be);
    ds_mem_destroy(mem);
    ds_comm_destroy(c);
    return test_finish("test_q8_rs");
}
