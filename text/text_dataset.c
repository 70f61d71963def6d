/* Labelled texts -> a tokenized ds_dataset (text/text.h). */
#include <string.h>

#include "models/models.h"
#include "text/text.h"
#include "text/tokenizer.h"

ds_status ds_dataset_from_text(const ds_text_set *set, const ds_tokenizer *tok, int seq_len,
                               ds_dataset **out) {
    if (!set || !tok || !out)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_dataset_from_text: NULL argument");
    *out = NULL;
    if (seq_len < 2)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_dataset_from_text: seq_len %d leaves no room for [CLS] and [SEP]",
                      seq_len);
    ds_dataset *d;
    DS_TRY(ds_cls_dataset_create(set->n, seq_len, set->n_classes,
                                 (const char *const *)set->class_names, &d));
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    const int32_t pad = ds_tokenizer_pad_id(tok);
    for (size_t i = 0; i < set->n; i++) {
        int32_t *row = ids + i * (size_t)seq_len;
        int len = 0;
        ds_status st = ds_tokenizer_encode(tok, set->texts[i], seq_len, row, &len);
        if (st != DS_OK) {
            ds_error_prefix("%s:%d", set->path, (int)set->lines[i]);
            ds_error_trace(__FILE__, __LINE__);
            ds_dataset_destroy(d);
            return st;
        }
        for (int t = len; t < seq_len; t++) row[t] = pad;
        for (int t = 0; t < len; t++) mask[i * (size_t)seq_len + (size_t)t] = 1.0f;
        labels[i] = set->labels[i];
    }
    *out = d;
    return DS_OK;
}
