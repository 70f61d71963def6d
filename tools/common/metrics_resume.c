/* A --metrics file cut back to a resumed step (see metrics_resume.h). */
#include "tools/common/metrics_resume.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

/* Whether `line` stays; *at is the step the lines so far belong to. */
static bool keep_line(const char *line, int64_t step, bool reevaluated, int64_t *at) {
    json_t *o = json_loads(line, JSON_DECODE_ANY, NULL);
    if (!json_is_object(o)) { /* a line cut by the kill */
        json_decref(o);
        return false;
    }
    bool keep;
    const json_t *s = json_object_get(o, "step"), *es = json_object_get(o, "eval_step");
    const json_t *from = json_object_get(json_object_get(o, "retry"), "from_step");
    if (json_is_integer(s)) {
        *at = json_integer_value(s);
        keep = *at <= step;
    } else if (json_is_integer(es)) {
        *at = json_integer_value(es);
        keep = *at < step || (*at == step && !reevaluated);
    } else if (json_is_integer(from)) {
        *at = json_integer_value(from);
        keep = *at < step;
    } else {
        keep = *at <= step;
    }
    json_decref(o);
    return keep;
}

ds_status tr_metrics_truncate(const char *path, int64_t step, bool reevaluated, long *kept,
                              long *dropped) {
    *kept = *dropped = 0;
    FILE *in = fopen(path, "r");
    if (!in && errno == ENOENT) return DS_OK;
    if (!in) return DS_ERR(DS_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        int err = errno;
        fclose(in);
        return DS_ERR(DS_ERR_IO, "%s: cannot write: %s", tmp, strerror(err));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t at = 0;
    bool ok = true;
    errno = 0;
    while (ok && (n = getline(&line, &cap, in)) > 0) {
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        if (!keep_line(line, step, reevaluated, &at)) {
            (*dropped)++;
            continue;
        }
        (*kept)++;
        ok = fwrite(line, 1, (size_t)n, out) == (size_t)n &&
             (line[n - 1] == '\n' || fputc('\n', out) != EOF);
    }
    int err = errno;
    bool read_ok = !ferror(in);
    free(line);
    fclose(in);
    if (fclose(out) != 0) ok = false;
    if (!read_ok || !ok) {
        remove(tmp);
        return DS_ERR(DS_ERR_IO, "%s: %s: %s", read_ok ? tmp : path,
                      read_ok ? "cannot write" : "cannot read", strerror(err ? err : EIO));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        return DS_ERR(DS_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(err));
    }
    return DS_OK;
}
