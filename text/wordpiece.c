/* WordPiece: Hugging Face's BertTokenizer (transformers 5 = the Rust
 * `tokenizers` BertNormalizer, BertPreTokenizer and WordPiece model).
 *
 * Per piece of text between literal special tokens:
 *   1. clean: drop U+0000, U+FFFD and control characters (Cc Cf Co Cs except
 *      \t \n \r); whitespace (Rust's char::is_whitespace) becomes ' '
 *   2. CJK ideographs (the ranges of is_chinese_char) get ' ' on both sides
 *   3. strip accents: NFD (canonical decomposition + canonical ordering),
 *      then nonspacing marks (Mn) dropped
 *   4. lower-case: Rust's char::to_lowercase, code point by code point
 *   5. split on whitespace (dropped) and punctuation (kept, alone)
 *   6. greedy longest-match WordPiece per word, "##" for continuations.
 * The order of 3 and 4 is the Rust one. The Unicode data and its versions
 * are in text/unicode_tables.h and text/unicode_decomp.h
 * (tools/gen_unicode_tables.py says why). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "text/unicode_decomp.h"
#include "text/unicode_tables.h"
#include "text/utf8.h"

#define N_SPECIAL 5

typedef struct wp_impl {
    ds_wordpiece_opts o;
    bool strip;                      /* resolved strip_accents */
    const char *special[N_SPECIAL];  /* literal special tokens in the vocab */
    size_t special_len[N_SPECIAL];
    int32_t special_id[N_SPECIAL];
    int n_special;
} wp_impl;

/* ---- character classes ------------------------------------------------------ */

static int uc_class(uint32_t cp) {
    int lo = 0, hi = (int)(sizeof ds_uc_class / sizeof *ds_uc_class) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < ds_uc_class[mid].lo) hi = mid - 1;
        else if (cp > ds_uc_class[mid].hi) lo = mid + 1;
        else return ds_uc_class[mid].cls;
    }
    return 0;
}

static int uc_ccc(uint32_t cp) {
    if (cp < 0x300) return 0; /* nothing below U+0300 combines */
    int lo = 0, hi = (int)(sizeof ds_uc_ccc / sizeof *ds_uc_ccc) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < ds_uc_ccc[mid].lo) hi = mid - 1;
        else if (cp > ds_uc_ccc[mid].hi) lo = mid + 1;
        else return ds_uc_ccc[mid].ccc;
    }
    return 0;
}

/* Rust's char::is_whitespace: the White_Space property. */
static bool is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_control(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false; /* whitespace, not control */
    return uc_class(c) == DS_UC_CONTROL;
}

static bool is_punctuation(uint32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return true;
    return c > 126 && uc_class(c) == DS_UC_PUNCT;
}

/* The ranges of tokenizers' is_chinese_char (BertNormalizer). They differ from
 * the Python BertTokenizer's in one place: 0x2B920 where Python has 0x2B820. */
static bool is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---- growable code point buffer ------------------------------------------------- */

typedef struct cpbuf {
    uint32_t *v;
    size_t n, cap;
} cpbuf;

static ds_status cp_push(cpbuf *b, uint32_t c) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return DS_ERR(DS_ERR_OOM, "tokenizing: %zu code points", cap);
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = c;
    return DS_OK;
}

/* ---- normalisation ------------------------------------------------------------------ */

static const ds_uc_decomp *find_decomp(uint32_t cp) {
    int lo = 0, hi = (int)(sizeof ds_uc_decomp_tab / sizeof *ds_uc_decomp_tab) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (ds_uc_decomp_tab[mid].cp == cp) return &ds_uc_decomp_tab[mid];
        if (ds_uc_decomp_tab[mid].cp < cp) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* Full canonical decomposition of cp appended to out. */
static ds_status decompose(uint32_t cp, cpbuf *out) {
    if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllables: algorithmic (Unicode 3.12) */
        uint32_t s = cp - 0xAC00;
        DS_TRY(cp_push(out, 0x1100 + s / 588));
        DS_TRY(cp_push(out, 0x1161 + (s % 588) / 28));
        if (s % 28) DS_TRY(cp_push(out, 0x11A7 + s % 28));
        return DS_OK;
    }
    const ds_uc_decomp *d = cp >= 0xC0 ? find_decomp(cp) : NULL;
    if (!d) return cp_push(out, cp);
    DS_TRY(decompose(d->a, out));
    if (d->b) DS_TRY(decompose(d->b, out));
    return DS_OK;
}

/* NFD of in, then nonspacing marks dropped, into out. */
static ds_status strip_accents(const cpbuf *in, cpbuf *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) DS_TRY(decompose(in->v[i], out));
    /* Canonical ordering: a stable sort by combining class of every run of
     * non-starters (insertion sort: runs are a few marks long). */
    for (size_t i = 1; i < out->n; i++) {
        int c = uc_ccc(out->v[i]);
        if (!c) continue;
        uint32_t x = out->v[i];
        size_t j = i;
        while (j > 0) {
            int cj = uc_ccc(out->v[j - 1]);
            if (cj <= c) break; /* a starter (0) or an equal/lower class stops it */
            out->v[j] = out->v[j - 1];
            j--;
        }
        out->v[j] = x;
    }
    size_t k = 0;
    for (size_t i = 0; i < out->n; i++)
        if (uc_class(out->v[i]) != DS_UC_MN) out->v[k++] = out->v[i];
    out->n = k;
    return DS_OK;
}

static uint32_t lower_simple(uint32_t cp) {
    int lo = 0, hi = (int)(sizeof ds_uc_lower / sizeof *ds_uc_lower) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const ds_uc_lower_run *r = &ds_uc_lower[mid];
        if (cp < r->lo) hi = mid - 1;
        else if (cp > r->hi) lo = mid + 1;
        else if (r->stride == 0 || (cp - r->lo) % r->stride == 0) return (uint32_t)((int64_t)cp + r->delta);
        else return cp;
    }
    return cp;
}

static ds_status lower_case(const cpbuf *in, cpbuf *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        uint32_t c = in->v[i];
        if (c == 0x130) { /* the one multi-code-point lowercase: i + combining dot */
            DS_TRY(cp_push(out, 'i'));
            DS_TRY(cp_push(out, 0x307));
        } else {
            DS_TRY(cp_push(out, c < 0x80 ? (c >= 'A' && c <= 'Z' ? c + 32 : c) : lower_simple(c)));
        }
    }
    return DS_OK;
}

/* ---- WordPiece --------------------------------------------------------------------- */

typedef struct scratch {
    cpbuf a, b;
    char *bytes;     /* the word in UTF-8, behind a "##" prefix */
    size_t *bound;   /* byte offset of each character boundary */
    size_t cap_bytes, cap_bound;
} scratch;

static void scratch_free(scratch *s) {
    free(s->a.v);
    free(s->b.v);
    free(s->bytes);
    free(s->bound);
}

/* Tokens of one word w[0..n) appended to ids[*k..cap). */
static ds_status wordpiece_word(const ds_tokenizer *t, const wp_impl *wp, const uint32_t *w,
                                size_t n, scratch *s, int32_t *ids, int cap, int *k) {
    if (n > (size_t)wp->o.max_input_chars_per_word) {
        ids[(*k)++] = t->unk;
        return DS_OK;
    }
    if (s->cap_bytes < 4 * n + 3 || s->cap_bound < n + 1) {
        free(s->bytes);
        free(s->bound);
        s->cap_bytes = 4 * n + 3;
        s->cap_bound = n + 1;
        s->bytes = malloc(s->cap_bytes);
        s->bound = malloc(s->cap_bound * sizeof *s->bound);
        if (!s->bytes || !s->bound) {
            s->cap_bytes = s->cap_bound = 0;
            return DS_ERR(DS_ERR_OOM, "tokenizing a word of %zu characters", n);
        }
    }
    char *word = s->bytes + 2; /* room for "##" before any piece */
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        s->bound[i] = len;
        len += (size_t)ds_utf8_encode(w[i], word + len);
    }
    s->bound[n] = len;
    /* Greedy longest match; a word with an unmatchable rest is one [UNK]. */
    int first = *k;
    size_t start = 0;
    while (start < n) {
        int32_t id = -1;
        size_t end = n;
        for (; end > start; end--) {
            const char *piece = word + s->bound[start];
            size_t plen = s->bound[end] - s->bound[start];
            if (start > 0) {
                /* write "##" just before the piece; restore the bytes after */
                char save0 = piece[-2], save1 = piece[-1];
                char *p = (char *)piece;
                p[-2] = '#', p[-1] = '#';
                id = ds_vocab_map_find(t, piece - 2, plen + 2);
                p[-2] = save0, p[-1] = save1;
            } else {
                id = ds_vocab_map_find(t, piece, plen);
            }
            if (id >= 0) break;
        }
        if (id < 0) {
            *k = first;
            ids[(*k)++] = t->unk;
            return DS_OK;
        }
        if (*k < cap) ids[(*k)++] = id;
        start = end;
    }
    return DS_OK;
}

/* Normalize and tokenize text[0..len) (no special tokens inside). */
static ds_status encode_piece(const ds_tokenizer *t, const wp_impl *wp, const char *text,
                              size_t len, size_t base, scratch *s, int32_t *ids, int cap,
                              int *k) {
    const unsigned char *u = (const unsigned char *)text;
    cpbuf *cur = &s->a, *other = &s->b;
    cur->n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        int n = ds_utf8_decode(u + i, len - i, &c);
        if (!n) return DS_ERR(DS_ERR_DATA, "invalid UTF-8 at byte %zu", base + i);
        i += (size_t)n;
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_whitespace(c)) c = ' ';
        if (wp->o.tokenize_chinese_chars && is_chinese(c)) {
            DS_TRY(cp_push(cur, ' '));
            DS_TRY(cp_push(cur, c));
            DS_TRY(cp_push(cur, ' '));
        } else {
            DS_TRY(cp_push(cur, c));
        }
    }
    if (wp->strip) {
        DS_TRY(strip_accents(cur, other));
        cpbuf *x = cur;
        cur = other, other = x;
    }
    if (wp->o.do_lower_case) {
        DS_TRY(lower_case(cur, other));
        cpbuf *x = cur;
        cur = other, other = x;
    }
    size_t w0 = 0;
    for (size_t i = 0; i <= cur->n && *k < cap; i++) {
        uint32_t c = i < cur->n ? cur->v[i] : ' ';
        bool ws = is_whitespace(c), punct = !ws && is_punctuation(c);
        if (!ws && !punct) continue;
        if (i > w0) DS_TRY(wordpiece_word(t, wp, cur->v + w0, i - w0, s, ids, cap, k));
        if (punct && *k < cap) DS_TRY(wordpiece_word(t, wp, cur->v + i, 1, s, ids, cap, k));
        w0 = i + 1;
    }
    return DS_OK;
}

static ds_status wp_encode(const ds_tokenizer *t, const char *text, size_t len, int32_t *ids,
                           int cap, int *k) {
    const wp_impl *wp = t->impl;
    scratch s = {0};
    ds_status st = DS_OK;
    size_t pos = 0;
    while (pos < len && *k < cap) {
        /* the next literal special token (leftmost, then longest) */
        size_t at = len, mlen = 0;
        int which = -1;
        for (size_t q = pos; q < len && which < 0; q++) {
            if (text[q] != '[') continue;
            for (int i = 0; i < wp->n_special; i++) {
                size_t l = wp->special_len[i];
                if (len - q >= l && memcmp(text + q, wp->special[i], l) == 0 && l > mlen)
                    which = i, mlen = l, at = q;
            }
        }
        st = encode_piece(t, wp, text + pos, at - pos, pos, &s, ids, cap, k);
        if (st != DS_OK) break;
        if (which >= 0 && *k < cap) ids[(*k)++] = wp->special_id[which];
        pos = which >= 0 ? at + mlen : len;
    }
    scratch_free(&s);
    return st;
}

static void wp_write_token(const ds_tokenizer *t, int32_t id, FILE *f) { fputs(t->tokens[id], f); }

static void wp_destroy(ds_tokenizer *t) {
    free(t->impl);
    ds_tokenizer_free_common(t);
}

static const ds_tokenizer_ops k_wp_ops = {
    .kind = "wordpiece",
    .encode = wp_encode,
    .write_token = wp_write_token,
    .destroy = wp_destroy,
};

/* ---- loading -------------------------------------------------------------------------- */

ds_wordpiece_opts ds_wordpiece_opts_default(void) {
    return (ds_wordpiece_opts){.do_lower_case = true,
                               .strip_accents = -1,
                               .tokenize_chinese_chars = true,
                               .max_input_chars_per_word = 100};
}

ds_status ds_wordpiece_load(const char *vocab_path, const ds_wordpiece_opts *opts,
                            ds_tokenizer **out) {
    if (!vocab_path || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_wordpiece_load: NULL argument");
    *out = NULL;
    ds_wordpiece_opts o = opts ? *opts : ds_wordpiece_opts_default();
    if (o.max_input_chars_per_word < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_wordpiece_load: max_input_chars_per_word %d < 1",
                      o.max_input_chars_per_word);
    FILE *f = fopen(vocab_path, "rb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", vocab_path, strerror(errno));
    ds_status st = DS_OK;
    ds_tokenizer *t = calloc(1, sizeof *t);
    wp_impl *wp = calloc(1, sizeof *wp);
    char *line = NULL;
    size_t line_cap = 0;
    int cap = 32768;
    if (!t || !wp || !(t->tokens = calloc((size_t)cap, sizeof *t->tokens))) {
        free(wp);
        free(t);
        fclose(f);
        return DS_ERR(DS_ERR_OOM, "%s: vocabulary", vocab_path);
    }
    t->ops = &k_wp_ops;
    t->impl = wp;
    ssize_t got;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        if (ds_utf8_check(line, len) != len || memchr(line, '\0', len)) {
            st = DS_ERR(DS_ERR_DATA, "%s:%d: invalid UTF-8 or NUL byte", vocab_path, t->n + 1);
            goto done;
        }
        if (t->n == cap) {
            char **nt = realloc(t->tokens, (size_t)cap * 2 * sizeof *nt);
            if (!nt) {
                st = DS_ERR(DS_ERR_OOM, "%s: %d tokens", vocab_path, cap * 2);
                goto done;
            }
            t->tokens = nt;
            cap *= 2;
        }
        t->tokens[t->n] = strndup(line, len);
        if (!t->tokens[t->n]) {
            st = DS_ERR(DS_ERR_OOM, "%s: vocabulary", vocab_path);
            goto done;
        }
        t->n++;
    }
    if (ferror(f)) {
        st = DS_ERR(DS_ERR_IO, "%s: read error", vocab_path);
        goto done;
    }
    DS_TRY_GOTO(st, ds_vocab_map_build(t), done);
    DS_TRY_GOTO(st, ds_tokenizer_find_specials(t, vocab_path), done);
    wp->o = o;
    wp->strip = o.strip_accents < 0 ? o.do_lower_case : o.strip_accents != 0;
    static const char *const specials[N_SPECIAL] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                    "[MASK]"};
    for (int i = 0; i < N_SPECIAL; i++) {
        int32_t id = ds_vocab_map_find(t, specials[i], strlen(specials[i]));
        if (id < 0) continue;
        wp->special[wp->n_special] = specials[i];
        wp->special_len[wp->n_special] = strlen(specials[i]);
        wp->special_id[wp->n_special] = id;
        wp->n_special++;
    }
    *out = t;
    t = NULL;
done:
    free(line);
    fclose(f);
    if (t) wp_destroy(t);
    return st;
}

/* A boolean key of tokenizer_config.json; absent or null leaves *v. */
static ds_status config_bool(const char *path, json_t *root, const char *key, int *v,
                             bool null_is_minus_one) {
    json_t *x = json_object_get(root, key);
    if (!x) return DS_OK;
    if (json_is_null(x) && null_is_minus_one) {
        *v = -1;
        return DS_OK;
    }
    if (!json_is_boolean(x))
        return DS_ERR(DS_ERR_DATA, "%s: %s: expected true or false", path, key);
    *v = json_is_true(x);
    return DS_OK;
}

ds_status ds_wordpiece_load_dir(const char *dir, ds_tokenizer **out) {
    if (!dir || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_wordpiece_load_dir: NULL argument");
    *out = NULL;
    char vocab[4096], config[4096];
    if (snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir) >= (int)sizeof vocab ||
        snprintf(config, sizeof config, "%s/tokenizer_config.json", dir) >= (int)sizeof config)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_wordpiece_load_dir: path too long: %s", dir);
    ds_wordpiece_opts o = ds_wordpiece_opts_default();
    FILE *probe = fopen(config, "rb");
    if (probe) {
        fclose(probe);
        json_error_t err;
        json_t *root = json_load_file(config, 0, &err);
        if (!root)
            return DS_ERR(DS_ERR_DATA, "%s:%d: bad JSON: %s", config, err.line, err.text);
        int lower = o.do_lower_case, chinese = o.tokenize_chinese_chars;
        ds_status st = json_is_object(root)
                           ? DS_OK
                           : DS_ERR(DS_ERR_DATA, "%s: expected a JSON object", config);
        if (st == DS_OK) st = config_bool(config, root, "do_lower_case", &lower, false);
        if (st == DS_OK) st = config_bool(config, root, "strip_accents", &o.strip_accents, true);
        if (st == DS_OK)
            st = config_bool(config, root, "tokenize_chinese_chars", &chinese, false);
        json_decref(root);
        DS_TRY(st);
        o.do_lower_case = lower;
        o.tokenize_chinese_chars = chinese;
    }
    DS_TRY(ds_wordpiece_load(vocab, &o, out));
    return DS_OK;
}

const ds_wordpiece_opts *ds_wordpiece_opts_of(const ds_tokenizer *t) {
    if (!t || t->ops != &k_wp_ops) return NULL;
    return &((const wp_impl *)t->impl)->o;
}
