/* predict's model: a saved classifier opened for inference in a one-rank
 * engine, and texts -> logits.
 *
 *     pd_opts o = {.model_path = "run1", .batch = 32};
 *     pd_model *m;
 *     if (pd_model_open(&o, &m) != DS_OK) die(ds_last_error());
 *     float logits[32 * 6];
 *     int bad;
 *     if (pd_model_logits(m, texts, n, logits, &bad) != DS_OK) ...  // texts[bad] failed
 *     pd_model_close(m);
 *
 * What model_path may be:
 *   a directory holding config.json (written by train_cls --save-dir: it
 *     carries the "zero_engine" object with the tokenizer kind), the weights
 *     (model.safetensors, or model.safetensors.index.json and its shards) and
 *     vocab.txt;
 *   a weights file (.safetensors, or a safetensors index .json) with that
 *     config.json in the same directory; the vocabulary is vocab_path, else
 *     vocab.txt in that directory.
 * vocab_path, when set, replaces vocab.txt in both cases.
 *
 * Every batch is padded to the same width (max_seq_len), so a text's logits
 * do not depend on the other texts of its batch or on where it sits in it:
 * each row goes through the same arithmetic whatever B is (the tests check
 * this bit for bit). */
#ifndef DS_TOOLS_PREDICT_MODEL_H
#define DS_TOOLS_PREDICT_MODEL_H

#include <stdint.h>

#include "engine/core/status.h"

typedef struct pd_opts {
    const char *model_path; /* required */
    const char *vocab_path; /* NULL: vocab.txt beside config.json */
    int batch;              /* texts per forward, >= 1 */
    int max_seq_len;        /* tokens per text incl. [CLS] and [SEP]; 0: the saved one */
} pd_opts;

typedef struct pd_model pd_model; /* opaque */

/* Read the config, build the model, start a one-rank engine (stage 0,
 * quiet), load the weights and the tokenizer. Errors name the file and, for
 * config.json, the key: DS_ERR_IO for a missing path or file, DS_ERR_DATA
 * for a bad config or vocabulary, for weights that lack a parameter of the
 * model or have it in another shape, for a vocabulary larger than the
 * model's vocab_size; DS_ERR_INVALID_ARG for a bad batch or max_seq_len
 * (beyond max_position_embeddings); DS_ERR_UNSUPPORTED when run as one of
 * several ranks. *out is owned by the caller (pd_model_close). */
ds_status pd_model_open(const pd_opts *o, pd_model **out);

int pd_model_n_classes(const pd_model *m);
const char *pd_model_class_name(const pd_model *m, int c); /* borrowed */
int pd_model_batch(const pd_model *m);
int pd_model_max_seq_len(const pd_model *m);
const char *pd_model_tokenizer_kind(const pd_model *m); /* "char" | "wordpiece" */

/* logits[i * C + c] for texts[0..n), 0 <= n <= batch, texts NUL-terminated
 * UTF-8, truncated to max_seq_len tokens. On a text that cannot be encoded
 * (DS_ERR_DATA "invalid UTF-8 at byte N") *bad_index is its index; -1 for
 * other failures. */
ds_status pd_model_logits(pd_model *m, const char *const *texts, int n, float *logits,
                          int *bad_index);

/* Frees everything; NULL is fine. */
void pd_model_close(pd_model *m);

#endif /* DS_TOOLS_PREDICT_MODEL_H */
