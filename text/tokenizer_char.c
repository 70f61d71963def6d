/* The char tokenizer: one token per Unicode code point. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "text/utf8.h"

/* Sorted (code point, id) pairs of the character tokens: a binary search per
 * character (about 12 steps for the 3.5k NLPCC characters). */
typedef struct char_entry {
    uint32_t cp;
    int32_t id;
} char_entry;

typedef struct char_impl {
    char_entry *chars;
    int n_chars;
} char_impl;

static int32_t char_find(const char_impl *c, uint32_t cp) {
    int lo = 0, hi = c->n_chars - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c->chars[mid].cp == cp) return c->chars[mid].id;
        if (c->chars[mid].cp < cp) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static ds_status char_encode(const ds_tokenizer *t, const char *text, size_t len, int32_t *ids,
                             int cap, int *n) {
    const char_impl *c = t->impl;
    const unsigned char *u = (const unsigned char *)text;
    size_t i = 0;
    while (i < len && *n < cap) {
        uint32_t cp;
        int k = ds_utf8_decode(u + i, len - i, &cp);
        if (!k) return DS_ERR(DS_ERR_DATA, "invalid UTF-8 at byte %zu", i);
        int32_t id = char_find(c, cp);
        ids[(*n)++] = id >= 0 ? id : t->unk;
        i += (size_t)k;
    }
    return DS_OK;
}

/* Control characters would break the one-token-per-line file: \uXXXX. */
static bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == 0x7F; }

static void char_write_token(const ds_tokenizer *t, int32_t id, FILE *f) {
    const char *s = t->tokens[id];
    uint32_t cp;
    int k = ds_utf8_decode((const unsigned char *)s, t->token_len[id], &cp);
    if (k > 0 && (size_t)k == t->token_len[id] && needs_escape(cp)) fprintf(f, "\\u%04X", cp);
    else fputs(s, f);
}

static void char_destroy(ds_tokenizer *t) {
    char_impl *c = t->impl;
    if (c) free(c->chars);
    free(c);
    ds_tokenizer_free_common(t);
}

static const ds_tokenizer_ops k_char_ops = {
    .kind = "char",
    .encode = char_encode,
    .write_token = char_write_token,
    .destroy = char_destroy,
};

static int cmp_entry(const void *a, const void *b) {
    uint32_t x = ((const char_entry *)a)->cp, y = ((const char_entry *)b)->cp;
    return x < y ? -1 : x > y;
}

/* t->tokens is filled: build the map, the specials and the char table. The
 * character of a token is `cps[id]` (UINT32_MAX for non-characters). */
static ds_status char_finish(ds_tokenizer *t, const uint32_t *cps, const char *where) {
    DS_TRY(ds_vocab_map_build(t));
    DS_TRY(ds_tokenizer_find_specials(t, where));
    char_impl *c = calloc(1, sizeof *c);
    if (!c) return DS_ERR(DS_ERR_OOM, "char vocabulary");
    t->impl = c;
    c->chars = malloc(((size_t)t->n + 1) * sizeof *c->chars);
    if (!c->chars) return DS_ERR(DS_ERR_OOM, "char vocabulary of %d tokens", t->n);
    for (int i = 0; i < t->n; i++)
        if (cps[i] != UINT32_MAX) c->chars[c->n_chars++] = (char_entry){cps[i], i};
    qsort(c->chars, (size_t)c->n_chars, sizeof *c->chars, cmp_entry);
    for (int i = 1; i < c->n_chars; i++)
        if (c->chars[i].cp == c->chars[i - 1].cp)
            return DS_ERR(DS_ERR_DATA, "%s: character U+%04X listed twice (ids %d and %d)", where,
                          c->chars[i].cp, (int)c->chars[i - 1].id, (int)c->chars[i].id);
    return DS_OK;
}

static ds_status new_char_tokenizer(int cap, ds_tokenizer **out) {
    ds_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return DS_ERR(DS_ERR_OOM, "char tokenizer");
    t->ops = &k_char_ops;
    t->tokens = calloc((size_t)cap + 1, sizeof *t->tokens);
    if (!t->tokens) {
        free(t);
        return DS_ERR(DS_ERR_OOM, "char vocabulary of %d tokens", cap);
    }
    *out = t;
    return DS_OK;
}

/* ---- build from texts ------------------------------------------------------- */

typedef struct cp_count {
    uint32_t cp, count;
} cp_count;

/* Descending count, then ascending code point. */
static int cmp_count(const void *a, const void *b) {
    const cp_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->cp < y->cp ? -1 : x->cp > y->cp;
}

#define N_CODE_POINTS 0x110000

ds_status ds_char_vocab_build(const ds_text_set *train, int min_count, ds_tokenizer **out) {
    if (!train || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_char_vocab_build: NULL argument");
    *out = NULL;
    if (min_count < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_char_vocab_build: min_count must be >= 1, got %d",
                      min_count);
    /* A flat counter per code point (4.4 MB, once) is simpler and faster
     * than a hash for a few thousand distinct characters. */
    uint32_t *count = calloc(N_CODE_POINTS, sizeof *count);
    if (!count) return DS_ERR(DS_ERR_OOM, "ds_char_vocab_build: counters");
    for (size_t r = 0; r < train->n; r++) {
        const unsigned char *u = (const unsigned char *)train->texts[r];
        size_t len = strlen(train->texts[r]), i = 0;
        while (i < len) {
            uint32_t cp;
            int k = ds_utf8_decode(u + i, len - i, &cp);
            if (!k) {
                free(count);
                return DS_ERR(DS_ERR_DATA, "%s:%d: invalid UTF-8 at byte %zu", train->path,
                              (int)train->lines[r], i);
            }
            if (count[cp] < UINT32_MAX) count[cp]++;
            i += (size_t)k;
        }
    }
    size_t m = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++) m += count[cp] >= (uint32_t)min_count;
    cp_count *keep = malloc((m + 1) * sizeof *keep);
    uint32_t *cps = malloc((m + 4) * sizeof *cps);
    ds_tokenizer *t = NULL;
    ds_status st = DS_OK;
    if (!keep || !cps) {
        st = DS_ERR(DS_ERR_OOM, "ds_char_vocab_build: %zu characters", m);
        goto done;
    }
    m = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++)
        if (count[cp] >= (uint32_t)min_count) keep[m++] = (cp_count){cp, count[cp]};
    qsort(keep, m, sizeof *keep, cmp_count);
    DS_TRY_GOTO(st, new_char_tokenizer((int)m + 4, &t), done);
    static const char *const specials[4] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
    for (int i = 0; i < 4; i++) {
        t->tokens[i] = strdup(specials[i]);
        cps[i] = UINT32_MAX;
        if (!t->tokens[i]) {
            st = DS_ERR(DS_ERR_OOM, "char vocabulary");
            goto done;
        }
        t->n = i + 1;
    }
    for (size_t i = 0; i < m; i++) {
        char buf[5];
        int k = ds_utf8_encode(keep[i].cp, buf);
        buf[k] = '\0';
        t->tokens[4 + i] = strdup(buf);
        cps[4 + i] = keep[i].cp;
        if (!t->tokens[4 + i]) {
            st = DS_ERR(DS_ERR_OOM, "char vocabulary");
            goto done;
        }
        t->n = 4 + (int)i + 1;
    }
    DS_TRY_GOTO(st, char_finish(t, cps, train->path), done);
    *out = t;
    t = NULL;
done:
    if (t) char_destroy(t);
    free(count);
    free(keep);
    free(cps);
    return st;
}

/* ---- load ------------------------------------------------------------------------ */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* One vocab line -> token string (allocated) and its character. */
static ds_status parse_line(const char *path, int line, const char *s, size_t len, char **tok,
                            uint32_t *cp) {
    *cp = UINT32_MAX;
    if (len == 0) return DS_ERR(DS_ERR_DATA, "%s:%d: empty line", path, line);
    /* Tokens are C strings and texts UTF-8 without NUL (the readers check
     * both): a NUL would cut the token short of its line, so that the
     * vocabulary holds another token than the file and saves an unreadable
     * one. */
    if (memchr(s, '\0', len) || ds_utf8_check(s, len) != len)
        return DS_ERR(DS_ERR_DATA, "%s:%d: invalid UTF-8 or a NUL byte", path, line);
    uint32_t c;
    int k = ds_utf8_decode((const unsigned char *)s, len, &c);
    char buf[5];
    if (k > 0 && (size_t)k == len) {
        *cp = c;
    } else if (len == 6 && s[0] == '\\' && s[1] == 'u') {
        c = 0;
        for (int i = 2; i < 6; i++) {
            int h = hexval(s[i]);
            if (h < 0) return DS_ERR(DS_ERR_DATA, "%s:%d: bad \\u escape '%.6s'", path, line, s);
            c = c * 16 + (uint32_t)h;
        }
        if (c >= 0xD800 && c <= 0xDFFF)
            return DS_ERR(DS_ERR_DATA, "%s:%d: \\u escape of a surrogate", path, line);
        if (c == 0)
            return DS_ERR(DS_ERR_DATA, "%s:%d: \\u0000: a text never holds U+0000", path, line);
        int n = ds_utf8_encode(c, buf);
        s = buf, len = (size_t)n;
        *cp = c;
    } else if (!(len >= 3 && s[0] == '[' && s[len - 1] == ']')) {
        return DS_ERR(DS_ERR_DATA,
                      "%s:%d: '%.*s' is not one character, a \\uXXXX escape or a [SPECIAL]",
                      path, line, (int)(len > 40 ? 40 : len), s);
    }
    char *d = malloc(len + 1);
    if (!d) return DS_ERR(DS_ERR_OOM, "char vocabulary");
    memcpy(d, s, len);
    d[len] = '\0';
    *tok = d;
    return DS_OK;
}

ds_status ds_char_tokenizer_load(const char *vocab_path, ds_tokenizer **out) {
    if (!vocab_path || !out)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_char_tokenizer_load: NULL argument");
    *out = NULL;
    FILE *f = fopen(vocab_path, "rb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", vocab_path, strerror(errno));
    int cap = 4096;
    ds_tokenizer *t = NULL;
    uint32_t *cps = malloc((size_t)cap * sizeof *cps);
    char *line = NULL;
    size_t line_cap = 0;
    ds_status st = DS_OK;
    if (!cps) {
        st = DS_ERR(DS_ERR_OOM, "char vocabulary");
        goto done;
    }
    DS_TRY_GOTO(st, new_char_tokenizer(cap, &t), done);
    ssize_t got;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        if (t->n == cap) {
            cap *= 2;
            char **nt = realloc(t->tokens, (size_t)cap * sizeof *nt);
            uint32_t *nc = nt ? realloc(cps, (size_t)cap * sizeof *nc) : NULL;
            if (nt) t->tokens = nt;
            if (nc) cps = nc;
            if (!nt || !nc) {
                st = DS_ERR(DS_ERR_OOM, "char vocabulary of %d tokens", cap);
                goto done;
            }
        }
        DS_TRY_GOTO(st,
                    parse_line(vocab_path, t->n + 1, line, len, &t->tokens[t->n], &cps[t->n]),
                    done);
        t->n++;
    }
    if (ferror(f)) {
        st = DS_ERR(DS_ERR_IO, "%s: read error", vocab_path);
        goto done;
    }
    DS_TRY_GOTO(st, char_finish(t, cps, vocab_path), done);
    *out = t;
    t = NULL;
done:
    fclose(f);
    free(line);
    free(cps);
    if (t) char_destroy(t);
    return st;
}
