/* The language models' tokenizers (text/lm_text.h): bytes, or characters
 * through the char vocabulary of text/tokenizer_char.c. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/lm_text.h"
#include "text/text.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

#define BYTE_EOT 256
#define BYTE_VOCAB 257
#define EOT_TEXT "<|endoftext|>"

typedef enum { LM_BYTE = 0, LM_CHAR } lm_kind;

struct ds_lm_tokenizer {
    lm_kind kind;
    int vocab;
    int32_t eot;
    ds_tokenizer *chars; /* LM_CHAR: the char vocabulary ([SEP] is the end of text) */
};

/* ---- token sequences ---------------------------------------------------------- */

ds_status ds_lm_tokens_push(ds_lm_tokens *s, int32_t id, int32_t bytes) {
    if (bytes < 0 || bytes > UINT8_MAX)
        return DS_ERR(DS_ERR_INTERNAL, "a token of %d bytes (a byte count is 0..255)", (int)bytes);
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        int32_t *i = realloc(s->ids, cap * sizeof *i);
        if (i) s->ids = i;
        uint8_t *b = i ? realloc(s->bytes, cap * sizeof *b) : NULL;
        if (b) s->bytes = b;
        if (!b) return DS_ERR(DS_ERR_OOM, "a token sequence of %zu tokens", cap);
        s->cap = cap;
    }
    s->ids[s->n] = id;
    s->bytes[s->n] = (uint8_t)bytes;
    s->n++;
    return DS_OK;
}

void ds_lm_tokens_free(ds_lm_tokens *s) {
    free(s->ids);
    free(s->bytes);
    memset(s, 0, sizeof *s);
}

/* ---- construction --------------------------------------------------------------- */

ds_status ds_lm_tokenizer_byte(ds_lm_tokenizer **out) {
    ds_lm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return DS_ERR(DS_ERR_OOM, "byte tokenizer");
    t->kind = LM_BYTE;
    t->vocab = BYTE_VOCAB;
    t->eot = BYTE_EOT;
    *out = t;
    return DS_OK;
}

static ds_status wrap_chars(ds_tokenizer *chars, ds_lm_tokenizer **out) {
    ds_lm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        ds_tokenizer_destroy(chars);
        return DS_ERR(DS_ERR_OOM, "char tokenizer");
    }
    t->kind = LM_CHAR;
    t->chars = chars;
    t->vocab = ds_tokenizer_vocab_size(chars);
    t->eot = ds_tokenizer_sep_id(chars);
    *out = t;
    return DS_OK;
}

ds_status ds_lm_tokenizer_char_build(const ds_lm_docs *train, int min_count,
                                     ds_lm_tokenizer **out) {
    if (!train || !out)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_tokenizer_char_build: NULL argument");
    *out = NULL;
    /* ds_char_vocab_build reads the texts, lines and path of a text set: lend
     * it the documents' arrays (nothing is copied, nothing is freed). */
    ds_text_set view = {0};
    view.n = train->n;
    view.texts = train->texts;
    view.lines = train->lines;
    view.path = train->path;
    ds_tokenizer *chars;
    DS_TRY(ds_char_vocab_build(&view, min_count, &chars));
    return wrap_chars(chars, out);
}

void ds_lm_tokenizer_destroy(ds_lm_tokenizer *t) {
    if (!t) return;
    ds_tokenizer_destroy(t->chars);
    free(t);
}

const char *ds_lm_tokenizer_kind(const ds_lm_tokenizer *t) {
    return t->kind == LM_BYTE ? "byte" : "char";
}
int ds_lm_tokenizer_vocab_size(const ds_lm_tokenizer *t) { return t->vocab; }
int32_t ds_lm_tokenizer_eot_id(const ds_lm_tokenizer *t) { return t->eot; }

/* ---- encode / decode ------------------------------------------------------------ */

ds_status ds_lm_tokenizer_encode(const ds_lm_tokenizer *t, const char *text, size_t len,
                                 ds_lm_tokens *out) {
    const unsigned char *u = (const unsigned char *)text;
    if (t->kind == LM_BYTE) {
        for (size_t i = 0; i < len; i++) DS_TRY(ds_lm_tokens_push(out, u[i], 1));
        return DS_OK;
    }
    int32_t unk = ds_tokenizer_unk_id(t->chars);
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = ds_utf8_decode(u + i, len - i, &cp);
        if (!k) return DS_ERR(DS_ERR_DATA, "invalid UTF-8 at byte %zu", i);
        /* a character's token is its UTF-8 text; specials are bracketed
         * words, never a single character */
        int32_t id = ds_vocab_map_find(t->chars, text + i, (size_t)k);
        DS_TRY(ds_lm_tokens_push(out, id >= 0 ? id : unk, k));
        i += (size_t)k;
    }
    return DS_OK;
}

static size_t put(char *buf, size_t cap, const char *s, size_t n) {
    if (n > cap) n = 0; /* never a partial token */
    memcpy(buf, s, n);
    return n;
}

size_t ds_lm_tokenizer_decode(const ds_lm_tokenizer *t, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= t->vocab) return 0;
    if (id == t->eot) return put(buf, cap, EOT_TEXT, sizeof EOT_TEXT - 1);
    if (t->kind == LM_BYTE) {
        char c = (char)(unsigned char)id;
        return put(buf, cap, &c, 1);
    }
    if (id == ds_tokenizer_unk_id(t->chars)) return put(buf, cap, "\xEF\xBF\xBD", 3);
    if (id == ds_tokenizer_pad_id(t->chars) || id == ds_tokenizer_cls_id(t->chars)) return 0;
    const char *s = ds_tokenizer_id_to_token(t->chars, id);
    return put(buf, cap, s, strlen(s));
}

size_t ds_lm_utf8_sanitize(const char *s, size_t n, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int k = ds_utf8_decode(u + i, n - i, &cp);
        if (k) {
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    return o;
}

/* ---- the folder's description ----------------------------------------------------- */

static void join(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

ds_status ds_lm_tokenizer_save(const ds_lm_tokenizer *t, const char *dir) {
    char path[4096];
    join(path, sizeof path, dir, "lm_tokenizer.json");
    json_t *o = json_pack("{s:s, s:i, s:i, s:s}", "kind", ds_lm_tokenizer_kind(t), "vocab_size",
                          t->vocab, "eot_id", (int)t->eot, "eot_token",
                          t->kind == LM_BYTE ? EOT_TEXT : "[SEP]");
    if (!o) return DS_ERR(DS_ERR_OOM, "%s", path);
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (rc != 0) return DS_ERR(DS_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    if (t->kind == LM_CHAR) {
        join(path, sizeof path, dir, "vocab.txt");
        DS_TRY(ds_tokenizer_save_vocab(t->chars, path));
    }
    return DS_OK;
}

/* An integer key of the description. */
static ds_status get_int(const char *path, const json_t *o, const char *key, int *out) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return DS_ERR(DS_ERR_DATA, "%s: %s: missing or not an integer", path, key);
    /* checked before narrowing: 2^32 + 257 would otherwise read as 257 */
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return DS_ERR(DS_ERR_DATA, "%s: %s: %lld does not fit an int", path, key, (long long)x);
    *out = (int)x;
    return DS_OK;
}

ds_status ds_lm_tokenizer_load(const char *dir, ds_lm_tokenizer **out) {
    if (!dir || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_lm_tokenizer_load: NULL argument");
    *out = NULL;
    char path[4096];
    join(path, sizeof path, dir, "lm_tokenizer.json");
    FILE *f = fopen(path, "rb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    json_error_t err;
    json_t *o = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
    fclose(f);
    if (!o)
        return DS_ERR(DS_ERR_DATA, "%s:%d: bad JSON: %s (column %d)", path, err.line, err.text,
                      err.column);
    ds_status st = DS_OK;
    ds_lm_tokenizer *t = NULL;
    const char *kind = json_string_value(json_object_get(o, "kind"));
    int vocab = 0, eot = 0;
    if (!json_is_object(o)) {
        st = DS_ERR(DS_ERR_DATA, "%s: expected a JSON object", path);
    } else if (!kind || (strcmp(kind, "byte") && strcmp(kind, "char"))) {
        st = DS_ERR(DS_ERR_DATA, "%s: kind: must be \"byte\" or \"char\"", path);
    } else if ((st = get_int(path, o, "vocab_size", &vocab)) == DS_OK &&
               (st = get_int(path, o, "eot_id", &eot)) == DS_OK) {
        if (!strcmp(kind, "byte")) {
            st = ds_lm_tokenizer_byte(&t);
        } else {
            char vp[4096];
            join(vp, sizeof vp, dir, "vocab.txt");
            ds_tokenizer *chars;
            st = ds_char_tokenizer_load(vp, &chars);
            if (st == DS_OK) st = wrap_chars(chars, &t);
        }
        if (st == DS_OK && t->vocab != vocab)
            st = DS_ERR(DS_ERR_DATA, "%s: vocab_size: %d, but the %s tokenizer has %d", path,
                        vocab, kind, t->vocab);
        else if (st == DS_OK && t->eot != eot)
            st = DS_ERR(DS_ERR_DATA, "%s: eot_id: %d, but the %s tokenizer's is %d", path, eot,
                        kind, (int)t->eot);
    }
    json_decref(o);
    if (st != DS_OK) {
        ds_lm_tokenizer_destroy(t);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = t;
    return DS_OK;
}
