/* Reader of the reference dump written by tools/make_bert_reference.py
 * (format version 1: magic "DSREF\0\0\0", u32 version, u32 reserved, u64 J,
 * J bytes of JSON, then the data; see the script's docstring). For tests. */
#ifndef DS_TESTS_BERT_REF_H
#define DS_TESTS_BERT_REF_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "models/models.h"

typedef struct bert_ref {
    json_t *hdr;          /* the JSON header (owned) */
    unsigned char *data;  /* the data section (owned) */
    size_t data_len;
    ds_bert_desc desc;    /* from hdr.config (max_seq_len = batch T) */
    int B, T;
} bert_ref;

/* Load and validate (magic, version, every tensor inside the data).
 * Returns 0, or -1 with a message in err. */
int bert_ref_load(const char *path, bert_ref *r, char *err, size_t cap);
void bert_ref_free(bert_ref *r);

/* Tensor `name` of dtype "f32" / "i32": pointer into the data, *numel
 * elements, shape in shape[0..*ndim) (either may be NULL). NULL if absent or
 * of another dtype. */
const float *bert_ref_f32(const bert_ref *r, const char *name, size_t *numel, int *ndim,
                          int64_t shape[4]);
/* bert_ref_f32 of "<kind>/<param>": kind "param" (initial values), "grad"
 * (gradients of the first step) or "after" (values after the steps). */
const float *bert_ref_param_f32(const bert_ref *r, const char *kind, const char *param,
                                size_t *numel, int *ndim, int64_t shape[4]);
const int32_t *bert_ref_i32(const bert_ref *r, const char *name, size_t *numel);

/* hdr.param_names: count and i-th name. */
int bert_ref_n_params(const bert_ref *r);
const char *bert_ref_param_name(const bert_ref *r, int i);

#endif
