/* A file read whole into memory: configs, sealed checkpoint files, text
 * corpora. One reader, so each caller's limit and message are its own and
 * the loop is written once. */
#ifndef DS_CORE_READ_FILE_H
#define DS_CORE_READ_FILE_H

#include <stddef.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read `path` whole into *text (malloc'd, NUL-terminated after its *n
 * bytes; free it). max > 0 refuses a file longer than max bytes with
 * DS_ERR_INVALID_ARG ("PATH: larger than MAX bytes"; a caller with a reason
 * says it instead), stopping once it has read past max. Errors: DS_ERR_IO naming
 * the path and errno's words, DS_ERR_OOM. */
ds_status ds_read_file(const char *path, size_t max, char **text, size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* DS_CORE_READ_FILE_H */
