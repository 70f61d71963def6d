/* Thread-local last error with a file:line trace. */
#include "engine/core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_MSG_CAP 1024
#define DS_TRACE_CAP 1024

static _Thread_local char tl_msg[DS_MSG_CAP];
static _Thread_local char tl_trace[DS_TRACE_CAP];
static _Thread_local ds_status tl_status;

static const char *const k_names[DS_STATUS_COUNT] = {
    [DS_OK] = "DS_OK",
    [DS_ERR_INVALID_ARG] = "DS_ERR_INVALID_ARG",
    [DS_ERR_CONFIG] = "DS_ERR_CONFIG",
    [DS_ERR_DATA] = "DS_ERR_DATA",
    [DS_ERR_IO] = "DS_ERR_IO",
    [DS_ERR_CORRUPT] = "DS_ERR_CORRUPT",
    [DS_ERR_OOM] = "DS_ERR_OOM",
    [DS_ERR_BACKEND] = "DS_ERR_BACKEND",
    [DS_ERR_COMM] = "DS_ERR_COMM",
    [DS_ERR_TIMEOUT] = "DS_ERR_TIMEOUT",
    [DS_ERR_UNSUPPORTED] = "DS_ERR_UNSUPPORTED",
    [DS_ERR_NONFINITE] = "DS_ERR_NONFINITE",
    [DS_ERR_INTERNAL] = "DS_ERR_INTERNAL",
};

const char *ds_status_to_string(ds_status s) {
    if ((int)s < 0 || s >= DS_STATUS_COUNT) return "DS_ERR_UNKNOWN";
    return k_names[s];
}

const char *ds_last_error(void) { return tl_msg; }
const char *ds_last_error_trace(void) { return tl_trace; }
ds_status ds_last_status(void) { return tl_status; }

void ds_clear_error(void) {
    tl_msg[0] = '\0';
    tl_trace[0] = '\0';
    tl_status = DS_OK;
}

/* Only the file's base name goes into the trace: build paths are noise. */
static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The new message is formatted into a buffer of its own and copied in
 * afterwards: its arguments may point into tl_msg (a caller wrapping the
 * last error: DS_ERR(..., "%s: %s", path, ds_last_error())), and vsnprintf
 * reading the buffer it writes is undefined behaviour; glibc's output repeats
 * the message and cuts it off. test_status checks this. */
ds_status ds_error_set(ds_status s, const char *file, int line, const char *fmt, ...) {
    char msg[DS_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(tl_msg, msg, sizeof tl_msg);
    snprintf(tl_trace, sizeof tl_trace, "%s:%d", base_name(file), line);
    tl_status = s;
    return s;
}

void ds_error_trace(const char *file, int line) {
    size_t n = strlen(tl_trace);
    if (n + 8 >= sizeof tl_trace) return; /* keep the innermost frames */
    snprintf(tl_trace + n, sizeof tl_trace - n, " <- %s:%d", base_name(file), line);
}

void ds_error_prefix(const char *fmt, ...) {
    char prefix[DS_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* prefix + ": " + old message, cut at the capacity (the message tail is
     * the least useful part to lose). */
    char joined[DS_MSG_CAP];
    size_t np = strnlen(prefix, DS_MSG_CAP - 3);
    memcpy(joined, prefix, np);
    memcpy(joined + np, ": ", 2);
    size_t room = DS_MSG_CAP - np - 3, nm = strnlen(tl_msg, room);
    memcpy(joined + np + 2, tl_msg, nm);
    joined[np + 2 + nm] = '\0';
    memcpy(tl_msg, joined, sizeof tl_msg);
}

_Static_assert(sizeof(((ds_error_saved *)0)->msg) == DS_MSG_CAP &&
                   sizeof(((ds_error_saved *)0)->trace) == DS_TRACE_CAP,
               "ds_error_saved holds the whole message and trace");

void ds_error_save(ds_error_saved *s) {
    memcpy(s->msg, tl_msg, sizeof s->msg);
    memcpy(s->trace, tl_trace, sizeof s->trace);
    s->status = tl_status;
}

void ds_error_restore(const ds_error_saved *s) {
    memcpy(tl_msg, s->msg, sizeof tl_msg);
    memcpy(tl_trace, s->trace, sizeof tl_trace);
    tl_status = s->status;
}

void ds_assert_fail(const char *expr, const char *file, int line) {
    /* An invariant inside the library is broken: continuing would corrupt
     * training state silently, so stop loudly. Never reached on bad input. */
    fprintf(stderr, "zero-engine: internal invariant failed: %s at %s:%d\n", expr,
            base_name(file), line);
    fflush(stderr);
    __builtin_trap();
}
