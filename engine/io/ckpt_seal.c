/* Checksums of meta.json and `latest` (see ckpt_seal.h). */
#include "engine/io/ckpt_seal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/read_file.h"
#include "engine/io/hash.h"

#define MARK "xxh64:"
#define MARK_LEN 6
#define HEX_LEN 16
#define JSON_MEMBER "\n \"checksum\": \""
#define JSON_TAIL "\"\n}\n"
#define LINE_TAIL "\n"
/* meta.json of a model with tens of thousands of tensors is a few MB; a
 * file far larger is not one this code wrote. */
#define MAX_SEALED_BYTES ((size_t)1 << 30)

static const char *tail_of(ds_seal_kind kind) { return kind == DS_SEAL_JSON ? JSON_TAIL : LINE_TAIL; }

ds_status ds_ckpt_seal(ds_seal_kind kind, const char *body, size_t n, char **out, size_t *out_n) {
    *out = NULL;
    *out_n = 0;
    size_t keep = n;           /* bytes of body kept */
    const char *join = "";     /* what goes between them and the marker */
    if (kind == DS_SEAL_JSON) {
        while (keep > 0 && strchr(" \t\r\n", body[keep - 1])) keep--;
        if (keep < 2 || body[0] != '{' || body[keep - 1] != '}')
            return DS_ERR(DS_ERR_INVALID_ARG, "sealing: the text is not a JSON object");
        keep--; /* the closing brace goes after the checksum member */
        while (keep > 0 && strchr(" \t\r\n", body[keep - 1])) keep--;
        join = keep == 1 ? JSON_MEMBER : "," JSON_MEMBER; /* "{" alone: no member before */
    } else if (n == 0 || body[n - 1] != '\n') {
        return DS_ERR(DS_ERR_INVALID_ARG, "sealing: the text does not end in a newline");
    }
    const char *tail = tail_of(kind);
    size_t nj = strlen(join), total = keep + nj + MARK_LEN + HEX_LEN + strlen(tail);
    char *t = malloc(total + 1);
    if (!t) return DS_ERR(DS_ERR_OOM, "sealing: out of memory for %zu bytes", total);
    memcpy(t, body, keep);
    memcpy(t + keep, join, nj);
    uint64_t h = ds_xxh64(t, keep + nj, 0);
    snprintf(t + keep + nj, total + 1 - keep - nj, MARK "%016" PRIx64 "%s", h, tail);
    *out = t;
    *out_n = total;
    return DS_OK;
}

static bool lower_hex(const char *s, size_t n, uint64_t *v) {
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        *v = (*v << 4) | (uint64_t)d;
    }
    return true;
}

/* The file whole; one longer than any sealed file a save writes is refused
 * as not one (a reader must not take a stray large file into memory). */
static ds_status read_all(const char *path, char **text, size_t *n) {
    ds_status st = ds_read_file(path, MAX_SEALED_BYTES, text, n);
    if (st == DS_ERR_INVALID_ARG)
        return DS_ERR(DS_ERR_CORRUPT, "%s: larger than %zu bytes: not a file a checkpoint save "
                      "wrote", path, MAX_SEALED_BYTES);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_ckpt_read_sealed(const char *path, ds_seal_kind kind, char **text, size_t *n,
                              size_t *body_n) {
    *text = NULL;
    *n = 0;
    char *t = NULL;
    size_t len = 0;
    DS_TRY(read_all(path, &t, &len));
    const char *tail = tail_of(kind);
    size_t nt = strlen(tail), need = MARK_LEN + HEX_LEN + nt;
    uint64_t recorded = 0;
    size_t at = len >= need ? len - need : 0; /* where the marker must start */
    if (len < need || memcmp(t + len - nt, tail, nt) != 0 || memcmp(t + at, MARK, MARK_LEN) != 0 ||
        !lower_hex(t + at + MARK_LEN, HEX_LEN, &recorded)) {
        free(t);
        return DS_ERR(DS_ERR_CORRUPT, "%s: no checksum at its end (cut short or edited, or written "
                      "by a zero-engine older than checkpoint format 2, which this build does not "
                      "read)", path);
    }
    uint64_t actual = ds_xxh64(t, at, 0);
    if (actual != recorded) {
        free(t);
        return DS_ERR(DS_ERR_CORRUPT, "%s: checksum mismatch: its %zu bytes before the checksum "
                      "hash to xxh64 %016" PRIx64 ", the checksum it carries is %016" PRIx64
                      " (edited or damaged after it was saved)", path, at, actual, recorded);
    }
    *text = t;
    *n = len;
    if (body_n) *body_n = at;
    return DS_OK;
}
