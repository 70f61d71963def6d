/* The checksum of a checkpoint's small text files, meta.json and `latest`,
 * and the one function every reader of them goes through.
 *
 * A sealed file ends in "xxh64:" and 16 lowercase hex digits: XXH64 (seed
 * 0, engine/io/hash.h) of every byte before the "xxh64:", followed by a
 * fixed tail. The two kinds differ only in what surrounds it:
 *
 *   meta.json (DS_SEAL_JSON): the last member of the object, so the file
 *   stays JSON that jq and Python read:
 *       {
 *        "format": "zero-engine-checkpoint",
 *        ...
 *        "client_state": null,
 *        "checksum": "xxh64:0123456789abcdef"
 *       }
 *   latest (DS_SEAL_LINE): the tag on the first line (`head -n1 latest`),
 *   the checksum on the second:
 *       global_step7
 *       xxh64:0123456789abcdef
 *
 * Shard files carry their own checksums (engine/io/ckpt_file.h) and
 * meta.json records each shard's size and index checksum, so with these two
 * every byte of a checkpoint is covered. A reader verifies the bytes before
 * it parses anything: an edited, truncated or bit-flipped file is refused
 * with the file's name and both checksums, whatever the edit was. */
#ifndef DS_IO_CKPT_SEAL_H
#define DS_IO_CKPT_SEAL_H

#include <stddef.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_seal_kind {
    DS_SEAL_JSON, /* body: a JSON object's text ending in '}' (trailing whitespace allowed) */
    DS_SEAL_LINE, /* body: text ending in '\n' */
} ds_seal_kind;

/* The sealed file for `body` (n bytes): a malloc'd text (NUL-terminated) in
 * *out, its length in *out_n. Errors: DS_ERR_INVALID_ARG when the body does
 * not end as its kind requires (a JSON body that is not an object, a line
 * body without its newline), DS_ERR_OOM. */
ds_status ds_ckpt_seal(ds_seal_kind kind, const char *body, size_t n, char **out, size_t *out_n);

/* Read `path` and verify its checksum: the one verifier of meta.json and
 * `latest`. On success *text is the whole file (malloc'd, NUL-terminated;
 * the caller frees it) and *n its length; for DS_SEAL_LINE, *body_n is the
 * length of the part before the checksum line (may be NULL). Errors, naming
 * the file: DS_ERR_IO when it cannot be read; DS_ERR_CORRUPT "checksum
 * mismatch: its bytes hash to xxh64 X, the checksum it carries is Y (edited
 * or damaged after it was saved)", or "no checksum at its end" (cut short, or
 * written by a zero-engine from before checkpoint format 2). */
ds_status ds_ckpt_read_sealed(const char *path, ds_seal_kind kind, char **text, size_t *n,
                              size_t *body_n);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_CKPT_SEAL_H */
