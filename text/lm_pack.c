/* Documents -> one token stream -> rows of seq_len that overlap by one token
 * (text/lm_text.h, "packing"). */
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

ds_status ds_lm_pack(const ds_lm_docs *docs, const ds_lm_tokenizer *t, int seq_len,
                     ds_dataset **out, ds_lm_pack_stats *stats) {
    if (!docs || !t || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_pack: NULL argument");
    *out = NULL;
    if (seq_len < 2)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_lm_pack: seq_len must be >= 2 (a token and the one it predicts), got %d",
                      seq_len);
    ds_lm_tokens s = {0};
    ds_dataset *d = NULL;
    ds_status st = build_stream(docs, t, &s);
    if (st != DS_OK) goto done;
    /* Row k covers stream[k (T-1) .. k (T-1) + T): its targets are the
     * positions 1..T-1, so ceil((N - 1) / (T - 1)) rows predict each of the
     * N - 1 tokens after the first once. */
    size_t T = (size_t)seq_len, stride = T - 1;
    size_t rows = s.n > 1 ? (s.n - 1 + stride - 1) / stride : 0;
    DS_TRY_GOTO(st, ds_dataset_create(rows, seq_len, &d), done);
    const int64_t seq[1] = {DS_DIM_SEQ};
    int32_t *ids, *labels, *bytes;
    float *mask;
    DS_TRY_GOTO(st, ds_dataset_add_column(d, "input_ids", DS_I32, 1, seq, (void **)&ids), done);
    DS_TRY_GOTO(st, ds_dataset_add_column(d, "attention_mask", DS_F32, 1, seq, (void **)&mask),
                done);
    DS_TRY_GOTO(st, ds_dataset_add_column(d, "labels", DS_I32, 1, seq, (void **)&labels), done);
    DS_TRY_GOTO(st, ds_dataset_add_column(d, "token_bytes", DS_I32, 1, seq, (void **)&bytes),
                done);
    int32_t eot = ds_lm_tokenizer_eot_id(t);
    size_t padding = 0, target_bytes = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t from = r * stride;
        for (size_t j = 0; j < T; j++) {
            size_t at = r * T + j, k = from + j;
            if (k < s.n) {
                ids[at] = labels[at] = s.ids[k];
                mask[at] = 1.0f;
                bytes[at] = s.bytes[k];
                if (j > 0) target_bytes += (size_t)s.bytes[k];
            } else {
                ids[at] = eot;
                labels[at] = DS_IGNORE_INDEX;
                mask[at] = 0.0f;
                bytes[at] = 0;
                padding++;
            }
        }
    }
    if (stats) {
        stats->docs = docs->n;
        stats->tokens = s.n;
        stats->targets = s.n ? s.n - 1 : 0;
        stats->bytes = target_bytes;
        stats->rows = rows;
        stats->padding = padding;
    }
    *out = d;
    d = NULL;
done:
    ds_dataset_destroy(d);
    ds_lm_tokens_free(&s);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}
