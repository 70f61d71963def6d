/* The 1-bit compressed all-reduce (engine/comm/codec.h) at 1, 2 and 4 ranks.
 *
 * 1. By hand. Rank r sends s_i (r+1) [7, 1, 7, 1, ...] (s_i = -1 on the
 *    second half): the root mean square of |7|, |1| is 5 exactly, so the
 *    worker scale is 5 (r+1), the worker error (r+1) s_i [2, -4, ...], and
 *    the server's average of the chunks is s_i 5 (w+1)/2 (7.5 at 2 ranks,
 *    12.5 at 4: every term 5 (r+1)/w is exact), which it sends with no
 *    error. Call 2 sends s_i (r+1) [-1, 5, ...]: with the carried error
 *    that is s_i (r+1) [1, 1, ...], so the result is s_i (w+1)/2 and every
 *    error returns to 0: the two results add up to the mean of the two
 *    inputs, 6 s_i (w+1)/2, exactly (what error feedback promises).
 * 2. Against a serial reference: every rank generates every rank's input
 *    (fixed seeds) and runs the scheme of DeepSpeed's compressed_allreduce
 *    itself in plain loops, once per segment as DeepSpeed calls it once per
 *    tensor (padding to world lcm(world, 8), one RMS scale per worker
 *    vector, the servers' average in rank order, signs as sign(x) + 1 != 0);
 *    three calls in a row with segments that are not multiples of the
 *    padding, so the worker and server errors carried across calls are
 *    compared, 0 ulps, with the rank's own buffers.
 * 3. The counters: each call is one all_to_all and one all_gather of
 *    (world - 1) regions, a record of chunk/8 + 4 bytes per segment.
 * 4. The backend's onebit slots refuse a record that is not whole bytes of
 *    signs and a pass without its arrays or with an unknown phase. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/onebit_math.h"
#include "engine/comm/codec.h"
#include "engine/comm/comm.h"
#include "tests/unit/test_util.h"

static ds_backend *g_be; /* cpu, one thread: the codec's slots */

static void hand(ds_comm *c) {
    int w = c->world, r = c->rank;
    /* one padding unit (16 elements at 2 ranks, 32 at 4): nothing padded */
    size_t n = 1;
    n = ds_coded_layout_of(&ds_codec_onebit, &n, 1, w).padded;
    ds_coded_layout l = ds_coded_layout_of(&ds_codec_onebit, &n, 1, w);
    float *buf = malloc(n * 4), *we = calloc(l.worker_n, 4), *se = calloc(l.server_n, 4);
    ds_coded_scratch *scr = NULL;
    REQUIRE_OK(ds_coded_scratch_create(&ds_codec_onebit, g_be, &n, 1, w, &scr));
    float k = (float)(r + 1), avg = 5.0f * (float)(w + 1) / 2.0f;
    for (size_t i = 0; i < n; i++) buf[i] = (i >= n / 2 ? -1.0f : 1.0f) * k * (i % 2 ? 1 : 7);
    CHECK_OK(ds_comm_all_reduce_coded(c, buf, n, &ds_codec_onebit, we, se, scr));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float s = i >= n / 2 ? -1.0f : 1.0f;
        float out = w == 1 ? s * k * (i % 2 ? 1 : 7) : s * avg;
        float ew = w == 1 ? 0.0f : s * k * (i % 2 ? -4.0f : 2.0f);
        if (buf[i] != out || we[i] != ew) bad++;
    }
    for (size_t i = 0; i < l.server_n; i++) bad += se[i] != 0.0f;
    CHECK(bad == 0, "hand call 1: %d values differ", bad);
    float first[64];
    memcpy(first, buf, n * 4);
    for (size_t i = 0; i < n; i++) buf[i] = (i >= n / 2 ? -1.0f : 1.0f) * k * (i % 2 ? 5 : -1);
    CHECK_OK(ds_comm_all_reduce_coded(c, buf, n, &ds_codec_onebit, we, se, scr));
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float s = i >= n / 2 ? -1.0f : 1.0f;
        float out = w == 1 ? s * k * (i % 2 ? 5 : -1) : s * (float)(w + 1) / 2.0f;
        if (buf[i] != out || we[i] != 0.0f) bad++;
        /* the two results add to the mean of the two inputs exactly */
        if (w > 1 && first[i] + buf[i] != s * 6.0f * (float)(w + 1) / 2.0f) bad++;
    }
    for (size_t i = 0; i < l.server_n; i++) bad += se[i] != 0.0f;
    CHECK(bad == 0, "hand call 2: %d values differ", bad);
    ds_coded_scratch_destroy(scr);
    free(buf), free(we), free(se);
}

/* ---- the serial reference: plain loops, the scheme as DeepSpeed writes it */

static float gen(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(*s >> 33) % 2001 - 1000) / 250.0f; /* [-4, 4] */
}

static float rms(const float *c, size_t n) {
    double q = 0.0;
    for (size_t i = 0; i < n; i++) q += (double)c[i] * (double)c[i];
    return (float)(sqrt(q) / sqrt((double)n));
}

typedef struct ref {
    int w;
    size_t n, padded, chunk;
    float *we;  /* [w][padded] worker errors */
    float *se;  /* [w][chunk] server errors */
} ref;

/* One call: in (w vectors of n) -> out (n), updating every rank's errors. */
static void ref_call(ref *R, const float *in, float *out) {
    int w = R->w;
    size_t P = R->padded, C = R->chunk;
    float *cw = calloc(P * (size_t)w, 4), *sc = calloc((size_t)w, 4);
    for (int r = 0; r < w; r++) {
        float *cr = cw + (size_t)r * P, *er = R->we + (size_t)r * P;
        for (size_t i = 0; i < P; i++) cr[i] = (i < R->n ? in[(size_t)r * R->n + i] : 0.0f) + er[i];
        sc[r] = rms(cr, P);
        for (size_t i = 0; i < P; i++) er[i] = cr[i] - (cr[i] < 0.0f ? -sc[r] : sc[r]);
    }
    for (int k = 0; k < w; k++) { /* server k */
        float *acc = calloc(C, 4), *es = R->se + (size_t)k * C;
        for (int r = 0; r < w; r++) {
            float s = sc[r] * (1.0f / (float)w);
            for (size_t i = 0; i < C; i++) {
                float v = cw[(size_t)r * P + (size_t)k * C + i] < 0.0f ? -s : s;
                acc[i] = r == 0 ? v : acc[i] + v;
            }
        }
        for (size_t i = 0; i < C; i++) acc[i] += es[i];
        float ss = rms(acc, C);
        for (size_t i = 0; i < C; i++) {
            float d = acc[i] < 0.0f ? -ss : ss;
            es[i] = acc[i] - d;
            size_t g = (size_t)k * C + i;
            if (g < R->n) out[g] = d;
        }
        free(acc);
    }
    free(cw), free(sc);
}

static void against_reference(ds_comm *c, const size_t *segs, int nseg) {
    int w = c->world, r = c->rank;
    size_t n = 0;
    for (int k = 0; k < nseg; k++) n += segs[k];
    ds_coded_layout l = ds_coded_layout_of(&ds_codec_onebit, segs, nseg, w);
    ref R[8];
    for (int k = 0; k < nseg; k++) {
        ds_coded_layout one = ds_coded_layout_of(&ds_codec_onebit, &segs[k], 1, w);
        R[k] = (ref){.w = w, .n = segs[k], .padded = one.padded, .chunk = one.padded / (size_t)w};
        R[k].we = calloc(one.padded * (size_t)w, 4);
        R[k].se = calloc(R[k].chunk * (size_t)w, 4);
    }
    float *in = malloc(n * (size_t)w * 4), *want = malloc(n * 4), *buf = malloc(n * 4);
    float *sin = malloc(n * (size_t)w * 4);
    float *we = calloc(l.worker_n, 4), *se = calloc(l.server_n, 4);
    ds_coded_scratch *scr = NULL;
    REQUIRE_OK(ds_coded_scratch_create(&ds_codec_onebit, g_be, segs, nseg, w, &scr));
    for (int call = 0; call < 3; call++) {
        for (int q = 0; q < w; q++) {
            uint64_t s = 1000u * (uint64_t)call + (uint64_t)q + 1;
            for (size_t i = 0; i < n; i++) in[(size_t)q * n + i] = gen(&s);
        }
        memcpy(buf, in + (size_t)r * n, n * 4);
        size_t off = 0;
        for (int k = 0; k < nseg && w > 1; k++) { /* each segment on its own */
            for (int q = 0; q < w; q++)
                memcpy(sin + (size_t)q * segs[k], in + (size_t)q * n + off, segs[k] * 4);
            ref_call(&R[k], sin, want + off);
            off += segs[k];
        }
        if (w == 1) memcpy(want, buf, n * 4); /* one rank: nothing is encoded */
        CHECK_OK(ds_comm_all_reduce_coded(c, buf, n, &ds_codec_onebit, we, se, scr));
        int bad = 0;
        for (size_t i = 0; i < n; i++) bad += memcmp(&buf[i], &want[i], 4) != 0;
        CHECK(bad == 0, "%d segments, n %zu, call %d: %d of %zu results differ from the "
              "reference", nseg, n, call, bad, n);
        if (w > 1) {
            bad = 0;
            size_t po = 0, co = 0;
            for (int k = 0; k < nseg; k++) {
                for (size_t i = 0; i < R[k].padded; i++)
                    bad += memcmp(&we[po + i], &R[k].we[(size_t)r * R[k].padded + i], 4) != 0;
                for (size_t i = 0; i < R[k].chunk; i++)
                    bad += memcmp(&se[co + i], &R[k].se[(size_t)r * R[k].chunk + i], 4) != 0;
                po += R[k].padded;
                co += R[k].chunk;
            }
            CHECK(bad == 0, "%d segments, call %d: %d error-feedback values differ", nseg, call,
                  bad);
        }
    }
    ds_coded_scratch_destroy(scr);
    for (int k = 0; k < nseg; k++) free(R[k].we), free(R[k].se);
    free(in), free(sin), free(want), free(buf), free(we), free(se);
}

static void counters(ds_comm *c) {
    int w = c->world;
    size_t n = 1000;
    ds_coded_layout l = ds_coded_layout_of(&ds_codec_onebit, &n, 1, w);
    /* 1000 at 2 ranks pads to 1008 (a multiple of 16), 4 ranks to 1024 */
    CHECK_EQ_I((long long)l.padded, w == 2 ? 1008 : w == 4 ? 1024 : 1000);
    CHECK_EQ_I((long long)l.region, (long long)(4 + l.padded / (size_t)w / 8));
    float *buf = calloc(n, 4), *we = calloc(l.worker_n, 4), *se = calloc(l.server_n, 4);
    ds_coded_scratch *scr = NULL;
    REQUIRE_OK(ds_coded_scratch_create(&ds_codec_onebit, g_be, &n, 1, w, &scr));
    ds_comm_stats before = c->stats;
    CHECK_OK(ds_comm_all_reduce_coded(c, buf, n, &ds_codec_onebit, we, se, scr));
    ds_comm_stats d;
    ds_comm_stats_diff(&c->stats, &before, &d);
    long long per = w > 1 ? (long long)(w - 1) * (long long)l.region : 0;
    CHECK_EQ_I((long long)d.bytes_sent[DS_COLL_ALL_TO_ALL], per);
    CHECK_EQ_I((long long)d.bytes_sent[DS_COLL_ALL_GATHER], per);
    CHECK_EQ_I((long long)d.calls[DS_COLL_ALL_TO_ALL], w > 1 ? 1 : 0);
    CHECK_EQ_I((long long)d.bytes_sent[DS_COLL_ALL_REDUCE], 0);
    /* a scratch of another size is refused, naming both */
    CHECK_TRUE(ds_comm_all_reduce_coded(c, buf, n - 1, &ds_codec_onebit, we, se, scr) ==
               DS_ERR_INVALID_ARG);
    ds_coded_scratch_destroy(scr);
    free(buf), free(we), free(se);
}

/* The slots refuse what they cannot encode, naming it, and write nothing. */
static void bad_args(void) {
    float x[16] = {0};
    unsigned char wire[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_TRUE(ds_codec_onebit.encode(g_be, x, NULL, 12, 1, wire, 0) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "multiple of 8") != NULL, "message: %s", ds_last_error());
    CHECK_TRUE(wire[0] == 1 && wire[7] == 8);
    CHECK_TRUE(ds_codec_onebit.encode(g_be, x, NULL, 16, 3, wire, 0) == DS_ERR_INVALID_ARG);
    ds_onebit_pass p = {.phase = DS_ONEBIT_WEIGHT, .n = 16, .m = x};
    CHECK_TRUE(g_be->ops->onebit_pass(g_be, &p) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "w is NULL") != NULL, "message: %s", ds_last_error());
    p.phase = (ds_onebit_phase)42;
    CHECK_TRUE(g_be->ops->onebit_pass(g_be, &p) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "unknown phase 42") != NULL, "message: %s", ds_last_error());
}

int main(void) {
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI};
    REQUIRE_OK(ds_comm_create(&d, &c));
    test_set_rank(c->rank);
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 1};
    REQUIRE_OK(ds_backend_create(&bd, &g_be));
    hand(c);
    /* 4096: a multiple of the padding at 1, 2 and 4 ranks, encoded and
     * decoded in place (coded.c) */
    size_t one8[1] = {8}, one1000[1] = {1000}, many[5] = {5, 37, 4096, 1000, 100003};
    against_reference(c, one8, 1);
    against_reference(c, one1000, 1);
    against_reference(c, many, 5); /* odd sizes, one tiny; messages of several KiB */
    counters(c);
    bad_args();
    ds_backend_destroy(g_be);
    ds_comm_destroy(c);
    return test_finish("test_coded_allreduce");
}
