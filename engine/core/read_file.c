/* See read_file.h. */
#include "engine/core/read_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds_status ds_read_file(const char *path, size_t max, char **text, size_t *n) {
    *text = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 14, len = 0;
    char *buf = malloc(cap + 1);
    ds_status st = buf ? DS_OK : DS_ERR(DS_ERR_OOM, "%s: out of memory reading it", path);
    while (st == DS_OK) {
        if (len == cap) { /* full: past the limit, or room for more */
            if (max > 0 && len > max) {
                st = DS_ERR(DS_ERR_INVALID_ARG, "%s: larger than %zu bytes", path, max);
                break;
            }
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) {
                st = DS_ERR(DS_ERR_OOM, "%s: out of memory reading %zu bytes", path, 2 * cap);
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) {
            if (ferror(f)) st = DS_ERR(DS_ERR_IO, "%s: read error", path);
            else if (max > 0 && len > max)
                st = DS_ERR(DS_ERR_INVALID_ARG, "%s: larger than %zu bytes", path, max);
            break;
        }
    }
    fclose(f);
    if (st != DS_OK) {
        free(buf);
        return st;
    }
    buf[len] = '\0';
    *text = buf;
    *n = len;
    return DS_OK;
}
