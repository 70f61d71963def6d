/* Reader of the reference dumps written by tools/make_bert_reference.py and
 * tools/make_gpt2_reference.py (the writer they share is tools/ref_dump.py;
 * format version 1: magic "DSREF\0\0\0", u32 version, u32 reserved, u64 J,
 * J bytes of JSON, then the data; each script's docstring lists its header
 * keys and tensors). For tests.
 *
 *   ref_dump ref;
 *   char err[512];
 *   if (ref_dump_load(DS_TEST_DATA_DIR "/gpt2_ref_tiny.bin", &ref, err, sizeof err) != 0)
 *       ...                                   // err says why
 *   ds_gpt2_desc d = ref_dump_gpt2_desc(&ref);
 *   for (int i = 0; i < ref_dump_n_params(&ref); i++) {
 *       const char *name = ref_dump_param_name(&ref, i);
 *       const float *w = ref_dump_param_f32(&ref, "param", name, &numel, NULL, NULL);
 *   }
 *   ref_dump_free(&ref);                      // the pointers above die with it */
#ifndef DS_TESTS_REF_DUMP_H
#define DS_TESTS_REF_DUMP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/models.h"

typedef struct ref_dump {
    json_t *hdr;          /* the JSON header (owned) */
    unsigned char *data;  /* the data section (owned) */
    size_t data_len;
    int B, T;             /* hdr.batch */
} ref_dump;

/* Load and validate (magic, version, every tensor inside the data).
 * Returns 0, or -1 with a message in err. */
int ref_dump_load(const char *path, ref_dump *r, char *err, size_t cap);
void ref_dump_free(ref_dump *r);

/* Tensor `name` of dtype "f32" / "i32": pointer into the data, *numel
 * elements, shape in shape[0..*ndim) (either may be NULL). NULL if absent or
 * of another dtype. */
const float *ref_dump_f32(const ref_dump *r, const char *name, size_t *numel, int *ndim,
                          int64_t shape[4]);
/* ref_dump_f32 of "<kind>/<param>": kind "param" (initial values), "grad"
 * (gradients of the first step) or "after" (values after the steps). */
const float *ref_dump_param_f32(const ref_dump *r, const char *kind, const char *param,
                                size_t *numel, int *ndim, int64_t shape[4]);
const int32_t *ref_dump_i32(const ref_dump *r, const char *name, size_t *numel);

/* hdr.param_names: count and i-th name. */
int ref_dump_n_params(const ref_dump *r);
const char *ref_dump_param_name(const ref_dump *r, int i);

/* hdr[section][key] as a number (0 when absent), e.g. ("optimizer", "lr"). */
double ref_dump_num(const ref_dump *r, const char *section, const char *key);

/* The model descriptor of hdr.config, max_seq_len = the batch's T.
 * BERT: the BertConfig keys plus n_classes. GPT-2: the GPT2Config keys, the
 * dropouts as given (dropout_set, so the dump's zeros are meant). */
ds_bert_desc ref_dump_bert_desc(const ref_dump *r);
ds_gpt2_desc ref_dump_gpt2_desc(const ref_dump *r);

/* The element range [*lo, *hi) of parameter `param` (numel elements) whose
 * exact gradient is zero, or false when it has none. The GPT-2 dump lists
 * ranges (hdr.zero_true_grad: {param: [lo, hi)}), the BERT dump whole
 * parameters (hdr.zero_true_grad_params: [param, ...] -> [0, numel)). */
bool ref_dump_zero_range(const ref_dump *r, const char *param, size_t numel, size_t *lo,
                         size_t *hi);

#endif
