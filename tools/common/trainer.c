/* Shared pieces of the bundled trainers (see trainer.h). */
#include "tools/common/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ds_status tr_check_input_file(const char *flag, const char *path) {
    struct stat s;
    if (stat(path, &s) != 0)
        return DS_ERR(DS_ERR_DATA, "%s %s: %s", flag, path,
                      errno == ENOENT ? "no such file" : strerror(errno));
    /* A folder reads as "read error" deep in stdio; say what it is. */
    if (S_ISDIR(s.st_mode))
        return DS_ERR(DS_ERR_DATA, "%s %s: is a folder, not a file (give the data file itself)",
                      flag, path);
    if (access(path, R_OK) != 0)
        return DS_ERR(DS_ERR_DATA, "%s %s: not readable: %s", flag, path, strerror(errno));
    return DS_OK;
}

void tr_jline_begin(tr_jline *l, FILE *f) {
    *l = (tr_jline){.f = f};
    fputc('{', f);
}

/* key as a JSON string: a class label may hold quotes or backslashes */
void tr_jline_key(tr_jline *l, const char *key) {
    FILE *f = l->f;
    fputs(l->members++ ? ", \"" : "\"", f);
    for (const unsigned char *c = (const unsigned char *)key; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputs("\": ", f);
}

void tr_jline_num(tr_jline *l, const char *key, const char *fmt, double x) {
    tr_jline_key(l, key);
    if (isfinite(x)) {
        fprintf(l->f, fmt, x);
        return;
    }
    fputs("null", l->f);
    int n = snprintf(l->nonfinite + l->nf_len, sizeof l->nonfinite - l->nf_len, "%s\"%s\"",
                     l->nf_len ? ", " : "", key);
    if (n > 0 && l->nf_len + (size_t)n < sizeof l->nonfinite) l->nf_len += (size_t)n;
    else l->nonfinite[l->nf_len] = '\0'; /* a key that does not fit is left out of the list */
}

void tr_jline_int(tr_jline *l, const char *key, long long v) {
    tr_jline_key(l, key);
    fprintf(l->f, "%lld", v);
}

void tr_jline_bool(tr_jline *l, const char *key, bool v) {
    tr_jline_key(l, key);
    fputs(v ? "true" : "false", l->f);
}

void tr_jline_end(tr_jline *l) {
    if (l->nf_len) {
        tr_jline_key(l, "nonfinite");
        fprintf(l->f, "[%s]", l->nonfinite);
    }
    fputc('}', l->f);
}
