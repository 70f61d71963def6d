/* Documents -> one token stream -> rows of seq_len that overlap by one token
 * (text/lm_text.h, "packing"). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/lm_text.h"

/* EOT d1 EOT d2 ... EOT dn EOT into *s. */
static ds_status build_stream(const ds_lm_docs *docs, const ds_lm_tokenizer *t,
                              ds_lm_tokens *s) {
    int32_t eot = ds_lm_tokenizer_eot_id(t);
    for (size_t i = 0; i < docs->n; i++) {
        DS_TRY(ds_lm_tokens_push(s, eot, 0));
        ds_status st = ds_lm_tokenizer_encode(t, docs->texts[i], docs->lens[i], s);
        if (st != DS_OK) {
            ds_error_prefix("%s:%d", docs->path, (int)docs->lines[i]);
            ds_error_trace(__FILE__, __LINE__);
            return st;
        }
    }
    if (docs->n) DS_TRY(ds_lm_tokens_push(s, eot, 0));
    return DS_OK;
}

/* The rows' source: the token stream itself (5 bytes a token), each row a
 * window computed when read, instead of four stored columns of every row
 * (16 bytes a token, and the stream besides while packing). */
typedef struct lm_rows {
    ds_lm_tokens s;
    size_t T, stride;
    int32_t eot;
} lm_rows;

enum { COL_IDS, COL_MASK, COL_LABELS, COL_BYTES }; /* the columns' order below */

static void lm_rows_free(void *p) {
    lm_rows *r = p;
    if (!r) return;
    ds_lm_tokens_free(&r->s);
    free(r);
}

/* Row k is stream[k (T-1) .. k (T-1) + T), its positions past the stream's
 * end padded: end-of-text as input, -100 as label, mask 0, 0 bytes. */
static ds_status lm_rows_read(void *p, int col, size_t row, size_t count, void *dst) {
    const lm_rows *r = p;
    int32_t *out_i = dst;
    float *out_f = dst;
    for (size_t q = 0; q < count; q++) {
        size_t from = (row + q) * r->stride;
        for (size_t j = 0; j < r->T; j++) {
            size_t k = from + j, at = q * r->T + j;
            bool in = k < r->s.n;
            switch (col) {
            case COL_IDS: out_i[at] = in ? r->s.ids[k] : r->eot; break;
            case COL_MASK: out_f[at] = in ? 1.0f : 0.0f; break;
            case COL_LABELS: out_i[at] = in ? r->s.ids[k] : DS_IGNORE_INDEX; break;
            case COL_BYTES: out_i[at] = in ? r->s.bytes[k] : 0; break;
            default: return DS_ERR(DS_ERR_INVALID_ARG, "lm rows: no column %d", col);
            }
        }
    }
    return DS_OK;
}

ds_status ds_lm_pack(const ds_lm_docs *docs, const ds_lm_tokenizer *t, int seq_len,
                     ds_dataset **out, ds_lm_pack_stats *stats) {
    if (!docs || !t || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_pack: NULL argument");
    *out = NULL;
    if (seq_len < 2)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_lm_pack: seq_len must be >= 2 (a token and the one it predicts), got %d",
                      seq_len);
    lm_rows *src = calloc(1, sizeof *src);
    if (!src) return DS_ERR(DS_ERR_OOM, "ds_lm_pack: out of memory");
    ds_dataset *d = NULL;
    ds_status st = build_stream(docs, t, &src->s);
    if (st != DS_OK) goto done;
    /* the stream grew by doubling: what it kept beyond its tokens goes (up
     * to as much again as it holds; a failed shrink keeps the block) */
    if (src->s.n > 0 && src->s.n < src->s.cap) {
        int32_t *ids = realloc(src->s.ids, src->s.n * sizeof *ids);
        if (ids) src->s.ids = ids;
        uint8_t *by = realloc(src->s.bytes, src->s.n * sizeof *by);
        if (by) src->s.bytes = by;
        if (ids && by) src->s.cap = src->s.n;
    }
    /* Row k covers stream[k (T-1) .. k (T-1) + T): its targets are the
     * positions 1..T-1, so ceil((N - 1) / (T - 1)) rows predict each of the
     * N - 1 tokens after the first once. */
    size_t T = (size_t)seq_len, stride = T - 1, n = src->s.n;
    size_t rows = n > 1 ? (n - 1 + stride - 1) / stride : 0;
    src->T = T;
    src->stride = stride;
    src->eot = ds_lm_tokenizer_eot_id(t);
    DS_TRY_GOTO(st, ds_dataset_create(rows, seq_len, &d), done);
    const int64_t seq[1] = {DS_DIM_SEQ};
    DS_TRY_GOTO(st, ds_dataset_add_computed_column(d, "input_ids", DS_I32, 1, seq), done);
    DS_TRY_GOTO(st, ds_dataset_add_computed_column(d, "attention_mask", DS_F32, 1, seq), done);
    DS_TRY_GOTO(st, ds_dataset_add_computed_column(d, "labels", DS_I32, 1, seq), done);
    DS_TRY_GOTO(st, ds_dataset_add_computed_column(d, "token_bytes", DS_I32, 1, seq), done);
    /* every token after the first is a target once; the last row's
     * positions past the stream's end are the padding */
    size_t target_bytes = 0;
    for (size_t k = 1; k < n; k++) target_bytes += (size_t)src->s.bytes[k];
    size_t padding = rows ? T - (n - (rows - 1) * stride) : 0;
    ds_lm_pack_stats ps = {.docs = docs->n, .tokens = n, .targets = n ? n - 1 : 0,
                           .bytes = target_bytes, .rows = rows, .padding = padding};
    st = ds_dataset_set_rows_source(d, lm_rows_read, src, lm_rows_free);
    src = NULL; /* the dataset's now, freed by it also on failure */
    if (st != DS_OK) goto done;
    if (stats) *stats = ps;
    *out = d;
    d = NULL;
done:
    ds_dataset_destroy(d);
    lm_rows_free(src);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}
