/* The tokenizer handle: dispatch, [CLS]/[SEP] framing and truncation, the
 * vocabulary map and file writing shared by the char and wordpiece kinds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

int32_t ds_vocab_map_find(const ds_tokenizer *t, const char *s, size_t len) {
    const ds_vocab_map *m = &t->map;
    size_t k = (size_t)hash_bytes(s, len) & (m->cap - 1);
    for (;;) {
        int32_t v = m->slot[k];
        if (!v) return -1;
        int32_t id = v - 1;
        if (t->token_len[id] == len && memcmp(t->tokens[id], s, len) == 0) return id;
        k = (k + 1) & (m->cap - 1);
    }
}

ds_status ds_vocab_map_build(ds_tokenizer *t) {
    size_t cap = 16;
    while (cap < 2 * (size_t)t->n) cap *= 2;
    t->map.cap = cap;
    t->map.slot = calloc(cap, sizeof *t->map.slot);
    t->token_len = malloc(((size_t)t->n + 1) * sizeof *t->token_len);
    if (!t->map.slot || !t->token_len)
        return DS_ERR(DS_ERR_OOM, "vocabulary of %d tokens", t->n);
    for (int i = 0; i < t->n; i++) t->token_len[i] = strlen(t->tokens[i]);
    for (int i = 0; i < t->n; i++) {
        size_t len = t->token_len[i];
        size_t k = (size_t)hash_bytes(t->tokens[i], len) & (cap - 1);
        for (;;) {
            int32_t v = t->map.slot[k];
            if (!v) {
                t->map.slot[k] = i + 1;
                break;
            }
            if (t->token_len[v - 1] == len && memcmp(t->tokens[v - 1], t->tokens[i], len) == 0) {
                t->map.slot[k] = i + 1; /* a repeated token keeps its last id */
                break;
            }
            k = (k + 1) & (cap - 1);
        }
    }
    return DS_OK;
}

void ds_tokenizer_free_common(ds_tokenizer *t) {
    if (!t) return;
    if (t->tokens)
        for (int i = 0; i < t->n; i++) free(t->tokens[i]);
    free(t->tokens);
    free(t->token_len);
    free(t->map.slot);
    free(t);
}

ds_status ds_tokenizer_find_specials(ds_tokenizer *t, const char *where) {
    static const char *const names[4] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
    int32_t *dst[4] = {&t->pad, &t->unk, &t->cls, &t->sep};
    for (int i = 0; i < 4; i++) {
        int32_t id = ds_vocab_map_find(t, names[i], strlen(names[i]));
        if (id < 0) return DS_ERR(DS_ERR_DATA, "%s: vocabulary has no %s", where, names[i]);
        *dst[i] = id;
    }
    return DS_OK;
}

ds_status ds_tokenizer_encode(const ds_tokenizer *t, const char *text, int max_len, int32_t *ids,
                              int *len) {
    if (!t || !text || !ids || !len)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_tokenizer_encode: NULL argument");
    if (max_len < 2)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_tokenizer_encode: max_len %d leaves no room for [CLS] and [SEP]",
                      max_len);
    int n = 1;
    ids[0] = t->cls;
    DS_TRY(t->ops->encode(t, text, strlen(text), ids, max_len - 1, &n));
    ids[n++] = t->sep;
    *len = n;
    return DS_OK;
}

const char *ds_tokenizer_kind(const ds_tokenizer *t) { return t->ops->kind; }
int ds_tokenizer_vocab_size(const ds_tokenizer *t) { return t->n; }
const char *ds_tokenizer_id_to_token(const ds_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n ? t->tokens[id] : NULL;
}
int32_t ds_tokenizer_token_to_id(const ds_tokenizer *t, const char *token) {
    return token ? ds_vocab_map_find(t, token, strlen(token)) : -1;
}
int32_t ds_tokenizer_pad_id(const ds_tokenizer *t) { return t->pad; }
int32_t ds_tokenizer_unk_id(const ds_tokenizer *t) { return t->unk; }
int32_t ds_tokenizer_cls_id(const ds_tokenizer *t) { return t->cls; }
int32_t ds_tokenizer_sep_id(const ds_tokenizer *t) { return t->sep; }

ds_status ds_tokenizer_save_vocab(const ds_tokenizer *t, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    for (int i = 0; i < t->n; i++) {
        t->ops->write_token(t, i, f);
        fputc('\n', f);
    }
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    if (bad) return DS_ERR(DS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return DS_OK;
}

void ds_tokenizer_destroy(ds_tokenizer *t) {
    if (!t) return;
    t->ops->destroy(t);
}
