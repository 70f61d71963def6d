/* The backend's kernels refuse bad arguments before they write anything
 * (the model kernels of engine/backend/nn.h, the dequantizers and the 1-bit
 * code of backend.h; the shared checks of nn_math.h, math.h and
 * onebit_math.h, which the cuda backend calls with the same messages:
 * test_nn_cuda compares them):
 *
 *   - attention with more query rows than positions (Tq > T: the queries are
 *     the last Tq of T, and a causal row would have seen a negative number
 *     of keys, written before its row), and negative sizes whose product is
 *     positive (B = nh = -1);
 *   - negative sizes in the row slots (embedding, bcast_add, copy_rows,
 *     dropout, layer norm, cross-entropy), which would have wrapped an
 *     element count or a memcpy length;
 *   - copy_rows with a stride under the row width (rows would overlap);
 *   - a dropout whose counter range wraps the 64-bit stream;
 *   - dropout_ln_fwd without its layer norm's output or statistics (the
 *     cpu skipped the layer norm, cuda wrote through NULL), and with empty
 *     rows and a bad probability (the cpu let it through, cuda refused);
 *   - a NULL layer-norm parameter, a NULL dequantizer output (named y);
 *   - 1-bit records closer than a record's size (they would overlap);
 *   - and, not a refusal: an empty 1-bit code (n = 0) writes and reads no
 *     record, so its wire may be NULL (the cpu wrote a record header
 *     through it, cuda did not).
 *
 * Each output starts as a known pattern and must keep its bits. At 1 and 2
 * threads, under the variant this CPU chose. */
#include <stdint.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "tests/unit/test_util.h"

#define N 4096 /* floats in each buffer: more than any call below touches */

static float g_out[N], g_out0[N], g_aux[N], g_aux0[N], g_in[N];

static void reset(void) {
    for (int i = 0; i < N; i++) {
        g_out[i] = g_out0[i] = -0.25f * (float)(i % 97);
        g_aux[i] = g_aux0[i] = 3.0f + (float)(i % 13);
        g_in[i] = 0.5f - (float)(i % 7);
    }
}

/* The call was refused with `needle` in its message and wrote nothing. */
static void refused(const char *what, ds_status st, const char *needle) {
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), needle),
          "%s: got %s \"%s\", want INVALID_ARG with \"%s\"", what, ds_status_to_string(st),
          ds_last_error(), needle);
    CHECK(!memcmp(g_out, g_out0, sizeof g_out) && !memcmp(g_aux, g_aux0, sizeof g_aux),
          "%s: the refused call wrote", what);
    ds_clear_error();
    reset(); /* the next check starts from the pattern, whatever this one did */
}

static void test_attention(ds_backend *be) {
    const ds_nn_ops *nn = be->nn;
    uint32_t keep[64];
    /* 4 query rows of 2 positions, causal: row 0 would see 2 - 4 + 1 < 0 keys */
    refused("attn_softmax_fwd, Tq > T, causal",
            nn->attn_softmax_fwd(be, g_out, g_aux, g_in, NULL, true, 1, 2, 4, 2, 0.5f, 0.1f, 7,
                                 0, keep),
            "Tq=4 query rows but T=2");
    refused("attn_softmax_bwd, Tq > T",
            nn->attn_softmax_bwd(be, g_out, g_aux, g_in, g_in, 1, 2, 4, 2, 0.5f, 0.0f, 7, 0,
                                 NULL),
            "Tq=4 query rows but T=2");
    refused("attn_softmax_fwd, B = nh = -1",
            nn->attn_softmax_fwd(be, g_out, g_aux, g_in, NULL, false, -1, -1, 8, 8, 0.5f, 0.0f,
                                 7, 0, NULL),
            "negative size B=-1 nh=-1");
    refused("attn_softmax_bwd, Tq = T = -2",
            nn->attn_softmax_bwd(be, g_out, NULL, g_in, g_in, 1, 1, -2, -2, 0.5f, 0.0f, 7, 0,
                                 NULL),
            "negative size Tq=-2 T=-2");
    refused("attn_softmax_fwd, the counter wraps",
            nn->attn_softmax_fwd(be, g_out, g_aux, g_in, NULL, false, 1, 2, 8, 8, 0.5f, 0.1f, 7,
                                 UINT64_MAX - 10, NULL),
            "overflows the 64-bit counter");
}

static void test_rows(ds_backend *be) {
    const ds_nn_ops *nn = be->nn;
    const int32_t ids[4] = {0, 1, 2, 3};
    uint32_t keep[64];
    refused("embedding_fwd, h < 0",
            nn->embedding_fwd(be, g_out, g_in, ids, 4, -8, 4, false), "negative size n=4 h=-8");
    /* a negative id that never passed embedding_fwd wrote before the table
     * on one thread and was skipped on several; padding_idx -1 is none */
    const int32_t bad_ids[4] = {0, 1, -5, 3};
    refused("embedding_bwd, a negative id",
            nn->embedding_bwd(be, g_out, g_in, bad_ids, 4, 8, -1), "id -5 at position 2");
    refused("bcast_add_fwd, width < 0", nn->bcast_add_fwd(be, g_out, g_in, 4, -3, false),
            "negative size rows=4 width=-3");
    refused("copy_rows, width < 0", nn->copy_rows(be, g_out, 8, g_in, 8, 2, -1, false),
            "negative size rows=2 width=-1");
    refused("copy_rows, dst_ld < width", nn->copy_rows(be, g_out, 4, g_in, 8, 3, 8, false),
            "dst_ld=4 src_ld=8, both must be >= width=8");
    refused("dropout_fwd, rows < 0",
            nn->dropout_fwd(be, g_out, g_in, NULL, NULL, -2, 64, 0.1f, 7, 0, keep),
            "negative size rows=-2 width=64");
    refused("dropout_bwd, width < 0",
            nn->dropout_bwd(be, g_out, g_aux, g_in, 2, -64, 0.1f, 7, 0, NULL),
            "negative size rows=2 width=-64");
    refused("dropout_fwd, the counter wraps",
            nn->dropout_fwd(be, g_out, g_in, NULL, NULL, 4, 64, 0.1f, 7, UINT64_MAX - 100, keep),
            "overflows the 64-bit counter");
    refused("dropout_bwd, the counter wraps",
            nn->dropout_bwd(be, g_out, NULL, g_in, 4, 64, 0.5f, 7, UINT64_MAX, NULL),
            "overflows the 64-bit counter");
    refused("xent_fwd, C < 0",
            nn->xent_fwd(be, g_out, g_out + 1, g_aux, g_out + 8, g_in, ids, NULL, 4, -6, -100),
            "negative size R=4 C=-6");
    refused("xent_bwd, C < 0",
            nn->xent_bwd(be, g_out, g_in, g_in, ids, NULL, 4, -6, -100, 1.0f),
            "negative size R=4 C=-6");
    /* no rows: nothing to write, and wsum is not read (it may be NULL) */
    CHECK_OK(nn->xent_bwd(be, g_out, g_in, NULL, ids, NULL, 0, 6, -100, 1.0f));
    /* the dequantizers name their output y when it is missing (not "x") */
    const int8_t q8[8] = {0};
    const uint8_t q4[4] = {0};
    refused("dequantize_i8, y NULL", be->ops->dequantize_i8(be, NULL, q8, g_in, 8, 4),
            "y is NULL");
    refused("dequantize_i4, y NULL", be->ops->dequantize_i4(be, NULL, q4, g_in, 8, 4),
            "y is NULL");
}

static void test_layernorm(ds_backend *be) {
    const ds_nn_ops *nn = be->nn;
    float *gamma = g_in, *beta = g_in + 64;
    uint32_t keep[64];
    refused("dropout_ln_fwd, z NULL",
            nn->dropout_ln_fwd(be, g_out, NULL, g_aux, g_aux + 8, g_in, NULL, NULL, gamma, beta,
                               4, 64, 0.1f, 7, 0, keep, 1e-5f),
            "the normalised output is NULL");
    refused("dropout_ln_fwd, rstd NULL",
            nn->dropout_ln_fwd(be, g_out, g_aux, g_aux + 512, NULL, g_in, NULL, NULL, gamma,
                               beta, 4, 64, 0.0f, 7, 0, NULL, 1e-5f),
            "rstd is NULL");
    refused("dropout_ln_fwd, width < 0",
            nn->dropout_ln_fwd(be, g_out, g_aux, g_aux + 512, g_aux + 520, g_in, NULL, NULL,
                               gamma, beta, 4, -64, 0.0f, 7, 0, NULL, 1e-5f),
            "negative size rows=4 width=-64");
    /* empty rows with a bad probability: refused as a wider call is (the cpu
     * returned before its dropout's check, cuda refused) */
    refused("dropout_ln_fwd, width 0, p 1",
            nn->dropout_ln_fwd(be, g_out, g_out + 64, g_aux, g_aux + 8, g_in, NULL, NULL, gamma,
                               beta, 4, 0, 1.0f, 7, 0, keep, 1e-5f),
            "dropout probability must be in [0, 1), got 1");
    /* empty rows: no statistics written (the cpu wrote NaN, cuda nothing) */
    CHECK_OK(nn->layernorm_fwd(be, g_out, g_aux, g_aux + 8, g_in, gamma, beta, 4, 0, 1e-5f));
    CHECK_OK(nn->dropout_ln_fwd(be, g_out, g_out + 64, g_aux, g_aux + 8, g_in, NULL, NULL, gamma,
                                beta, 4, 0, 0.1f, 7, 0, keep, 1e-5f));
    CHECK(!memcmp(g_out, g_out0, sizeof g_out) && !memcmp(g_aux, g_aux0, sizeof g_aux),
          "layer norm of empty rows wrote");
    refused("layernorm_fwd, gamma NULL",
            nn->layernorm_fwd(be, g_out, g_aux, g_aux + 8, g_in, NULL, beta, 4, 64, 1e-5f),
            "gamma is NULL");
}

static void test_onebit_code(ds_backend *be) {
    /* 2 records of 64 elements take 4 + 8 bytes each: 10 apart would overlap */
    refused("onebit_encode, records overlap",
            be->ops->onebit_encode(be, g_in, NULL, 128, 2, g_out, 10),
            "records 10 bytes apart, but each takes 12");
    CHECK_OK(be->ops->onebit_encode(be, NULL, NULL, 0, 1, NULL, 0));
    CHECK_OK(be->ops->onebit_decode(be, NULL, 0, 1.0f, false, NULL));
}

int main(void) {
    for (int nt = 1; nt <= 2; nt++) {
        ds_backend *be = test_cpu_backend(nt, NULL);
        reset();
        test_attention(be);
        test_rows(be);
        test_layernorm(be);
        test_onebit_code(be);
        ds_backend_destroy(be);
    }
    return test_finish("test_nn_refusals");
}
