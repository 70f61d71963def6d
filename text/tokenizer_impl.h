/* Internal to the tokenizers (text/tokenizer*.c, text/wordpiece.c): the
 * handle's layout and the vocabulary shared by both kinds. */
#ifndef DS_MODELS_TOKENIZER_IMPL_H
#define DS_MODELS_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "text/tokenizer.h"

/* token string -> id, open addressing over the vocabulary's strings. */
typedef struct ds_vocab_map {
    size_t cap;      /* power of two */
    int32_t *slot;   /* [cap], id + 1 (0 = empty) */
} ds_vocab_map;

typedef struct ds_tokenizer_ops {
    const char *kind;
    /* Append the tokens of text[0..len) to ids[*n..cap), stopping at cap. */
    ds_status (*encode)(const ds_tokenizer *t, const char *text, size_t len, int32_t *ids,
                        int cap, int *n);
    /* Write token `id` as one vocab line, without the newline. */
    void (*write_token)(const ds_tokenizer *t, int32_t id, FILE *f);
    void (*destroy)(ds_tokenizer *t);
} ds_tokenizer_ops;

struct ds_tokenizer {
    const ds_tokenizer_ops *ops;
    int n;              /* vocabulary size */
    char **tokens;      /* [n], id -> token, owned */
    size_t *token_len;  /* [n] bytes of each token */
    ds_vocab_map map;
    int32_t pad, unk, cls, sep;
    void *impl;         /* the kind's own state */
};

/* Lookup of s[0..len) (not necessarily NUL-terminated); -1 when absent. */
int32_t ds_vocab_map_find(const ds_tokenizer *t, const char *s, size_t len);

/* Build t->map from t->tokens[0..n) (a repeated token maps to its last id)
 * and fill t->token_len. */
ds_status ds_vocab_map_build(ds_tokenizer *t);

/* Free the common parts (tokens, map) and t itself. */
void ds_tokenizer_free_common(ds_tokenizer *t);

/* Look up [PAD], [UNK], [CLS], [SEP]; DS_ERR_DATA "<where>: vocabulary has no
 * [XXX]" when one is missing. */
ds_status ds_tokenizer_find_specials(ds_tokenizer *t, const char *where);

#endif /* DS_MODELS_TOKENIZER_IMPL_H */
