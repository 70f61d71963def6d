/* The last-error API (engine/core/status.h) cannot format a message into
 * itself: a caller wrapping the last error in a new one
 * (DS_ERR(..., "%s: %s", path, ds_last_error())) gets exactly the wrapped
 * text. Before the fix ds_error_set ran vsnprintf into the buffer its own
 * argument pointed at (undefined behaviour; glibc printed the prefix again
 * and again and cut the message off), which the exact comparisons below
 * catch. Also: a message at the capacity is cut, NUL-terminated, and does
 * not spill; the prefix and the trace; each thread keeps its own message. */
#include <pthread.h>
#include <string.h>

#include "tests/unit/test_util.h"

/* The capacity status.c keeps (DS_MSG_CAP): 1023 characters and the NUL. */
#define CAP 1024

static void *other_thread(void *arg) {
    (void)arg;
    DS_ERR(DS_ERR_IO, "the other thread's message");
    return NULL;
}

int main(void) {
    /* wrapping the last error, once and twice */
    DS_ERR(DS_ERR_CORRUPT, "ckpt/latest: bad tag");
    ds_status st = DS_ERR(DS_ERR_CORRUPT, "reading %s (%s)", "ckpt", ds_last_error());
    CHECK(st == DS_ERR_CORRUPT, "status %s", ds_status_to_string(st));
    CHECK(!strcmp(ds_last_error(), "reading ckpt (ckpt/latest: bad tag)"), "got \"%s\"",
          ds_last_error());
    DS_ERR(DS_ERR_IO, "%s; again: %s", ds_last_error(), ds_last_error());
    CHECK(!strcmp(ds_last_error(), "reading ckpt (ckpt/latest: bad tag); again: reading ckpt "
                                   "(ckpt/latest: bad tag)"),
          "got \"%s\"", ds_last_error());

    /* the message as the only argument, and as the prefix */
    DS_ERR(DS_ERR_IO, "x");
    DS_ERR(DS_ERR_IO, "%s", ds_last_error());
    CHECK(!strcmp(ds_last_error(), "x"), "got \"%s\"", ds_last_error());
    ds_error_prefix("%s", ds_last_error());
    CHECK(!strcmp(ds_last_error(), "x: x"), "prefix with itself: \"%s\"", ds_last_error());

    /* at the capacity: cut, terminated, nothing past it (a long path wrapped) */
    static char big[3 * CAP];
    memset(big, 'p', sizeof big - 1);
    DS_ERR(DS_ERR_IO, "%s", big);
    CHECK(strlen(ds_last_error()) == CAP - 1, "long message of %zu characters",
          strlen(ds_last_error()));
    DS_ERR(DS_ERR_IO, "wrapped: %s", ds_last_error());
    const char *m = ds_last_error();
    size_t n = strlen(m);
    CHECK(n == CAP - 1 && !strncmp(m, "wrapped: ppp", 12) && m[n - 1] == 'p',
          "wrapped long message: %zu characters, starts \"%.16s\"", n, m);
    ds_error_prefix("in %s", "the prefix");
    CHECK(strlen(ds_last_error()) == CAP - 1 && !strncmp(ds_last_error(), "in the prefix: wrapped",
                                                         22),
          "prefixed long message: \"%.30s\"", ds_last_error());

    /* the trace starts anew at each DS_ERR and grows with each DS_TRY level */
    DS_ERR(DS_ERR_IO, "t");
    ds_error_trace("a/b/outer.c", 7);
    CHECK(strstr(ds_last_error_trace(), "test_status.c:") == ds_last_error_trace() &&
              strstr(ds_last_error_trace(), " <- outer.c:7"),
          "trace \"%s\"", ds_last_error_trace());

    /* thread-local */
    DS_ERR(DS_ERR_IO, "main");
    pthread_t t;
    if (pthread_create(&t, NULL, other_thread, NULL) != 0) TEST_DIE("pthread_create");
    pthread_join(t, NULL);
    CHECK(!strcmp(ds_last_error(), "main"), "main thread's message became \"%s\"", ds_last_error());
    ds_clear_error();
    CHECK(!*ds_last_error() && !*ds_last_error_trace(), "cleared");
    return test_finish("test_status");
}
