/* A --metrics file cut back to a resumed step (see metrics_resume.h). */
#include "tools/common/metrics_resume.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

/* Whether `line` stays; *at is the step the lines so far belong to, *ours
 * set by a line with a step of its own. A line that is not a JSON object
 * goes when it is the last (cut by the kill), stays elsewhere. */
static bool keep_line(const char *line, bool last, int64_t step, bool reevaluated, int64_t *at,
                      bool *ours) {
    json_t *o = json_loads(line, JSON_DECODE_ANY, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return !last;
    }
    bool keep;
    const json_t *s = json_object_get(o, "step"), *es = json_object_get(o, "eval_step");
    const json_t *from = json_object_get(json_object_get(o, "retry"), "from_step");
    if (json_is_integer(s)) {
        *at = json_integer_value(s);
        keep = *at <= step;
        *ours = true;
    } else if (json_is_integer(es)) {
        *at = json_integer_value(es);
        keep = *at < step || (*at == step && !reevaluated);
        *ours = true;
    } else if (json_is_integer(from)) {
        *at = json_integer_value(from);
        keep = *at < step;
    } else {
        keep = *at <= step;
    }
    json_decref(o);
    return keep;
}

typedef struct cut {
    FILE *out;
    int64_t step, at;
    bool reevaluated, ours, ok;
    long kept, dropped;
} cut;

static void one_line(cut *c, const char *line, size_t n, bool last) {
    if (!keep_line(line, last, c->step, c->reevaluated, &c->at, &c->ours)) {
        c->dropped++;
        return;
    }
    c->kept++;
    c->ok = c->ok && fwrite(line, 1, n, c->out) == n &&
            (line[n - 1] == '\n' || fputc('\n', c->out) != EOF);
}

ds_status tr_metrics_truncate(const char *path, int64_t step, bool reevaluated, long *kept,
                              long *dropped) {
    *kept = *dropped = 0;
    /* The file itself, through a link (the link stays), and only a regular
     * one: a pipe, a terminal or /dev/stdout is written as it goes, never
     * read back or replaced */
    char *real = realpath(path, NULL);
    if (!real && errno == ENOENT) return DS_OK;
    if (!real) return DS_ERR(DS_ERR_IO, "%s: cannot resolve: %s", path, strerror(errno));
    struct stat sb;
    if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        free(real);
        *kept = -1;
        return DS_OK;
    }
    FILE *in = fopen(real, "r");
    if (!in) {
        int err = errno;
        free(real);
        return DS_ERR(DS_ERR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    size_t tl = strlen(real) + 5;
    char *tmp = malloc(tl);
    if (!tmp) {
        fclose(in);
        free(real);
        return DS_ERR(DS_ERR_OOM, "%s: out of memory", path);
    }
    snprintf(tmp, tl, "%s.tmp", real);
    cut c = {.out = fopen(tmp, "w"), .step = step, .reevaluated = reevaluated, .ok = true};
    if (!c.out) {
        int err = errno;
        fclose(in);
        ds_status st = DS_ERR(DS_ERR_IO, "%s: cannot write: %s", tmp, strerror(err));
        free(tmp);
        free(real);
        return st;
    }
    /* one line behind, to know the last */
    char *line = NULL, *prev = NULL;
    size_t cap = 0, prev_cap = 0, prev_n = 0;
    ssize_t n;
    errno = 0;
    while (c.ok && (n = getline(&line, &cap, in)) > 0) {
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        if (prev_n) one_line(&c, prev, prev_n, false);
        char *t = prev; /* swap the buffers: line becomes prev */
        size_t tc = prev_cap;
        prev = line;
        prev_cap = cap;
        prev_n = (size_t)n;
        line = t;
        cap = tc;
    }
    if (c.ok && prev_n) one_line(&c, prev, prev_n, true);
    int err = errno;
    bool read_ok = !ferror(in);
    free(line);
    free(prev);
    fclose(in);
    /* on the disk before it replaces the old file: a crash then leaves one
     * of the two whole */
    if (fflush(c.out) != 0 || fsync(fileno(c.out)) != 0) c.ok = false;
    if (fchmod(fileno(c.out), sb.st_mode & 07777) != 0) c.ok = false;
    if (fclose(c.out) != 0) c.ok = false;
    ds_status st = DS_OK;
    if (!read_ok || !c.ok) {
        remove(tmp);
        st = DS_ERR(DS_ERR_IO, "%s: %s: %s", read_ok ? tmp : path,
                    read_ok ? "cannot write" : "cannot read", strerror(err ? err : EIO));
    } else if (!c.ours && c.kept + c.dropped > 0) { /* no line of a run: not ours */
        remove(tmp);
        *kept = -2;
    } else if (rename(tmp, real) != 0) {
        err = errno;
        remove(tmp);
        st = DS_ERR(DS_ERR_IO, "%s: cannot rename to %s: %s", tmp, real, strerror(err));
    } else {
        *kept = c.kept;
        *dropped = c.dropped;
    }
    free(tmp);
    free(real);
    return st;
}
