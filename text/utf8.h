/* Strict UTF-8 decoding and encoding (internal to text/).
 *
 * Strict means what RFC 3629 allows and nothing else: no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing past U+10FFFF. The text readers
 * reject files that break it; the tokenizers reject such texts. */
#ifndef DS_MODELS_UTF8_H
#define DS_MODELS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decode one code point from s[0..n). Returns the bytes used (1..4) and sets
 * *cp, or 0 when the bytes there are not valid UTF-8 (n == 0 included). */
static inline int ds_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0; /* continuation byte, 0xC0/0xC1 (overlong) or 0xF5.. */
    }
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* Encode cp (a valid scalar value) into out[0..4); returns the bytes written. */
static inline int ds_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Offset of the first invalid byte in s[0..n), or n when all of it is valid. */
static inline size_t ds_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = ds_utf8_decode(u + i, n - i, &cp);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}

#endif /* DS_MODELS_UTF8_H */
