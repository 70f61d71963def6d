/* The shared-folder marker (engine/io/ckpt_shared.h), in one process: the
 * folder rank 0 writes into and the folder another rank looks at are given
 * as two paths, as two hosts that do not share a disk would see one path.
 * (The real thing, two hosts in two namespaces with a folder one of them
 * does not share, is tests/fault/test_two_hosts.sh.)
 *   - the same folder passes; the text names this host, and two markers
 *     differ (a fresh nonce each);
 *   - another folder, empty: one error naming the rank, both hosts, the
 *     folder, the missing file and the rule;
 *   - a folder that does not exist on "this host": says so;
 *   - a folder holding another job's marker, or the marker with a byte
 *     more: "holds other bytes";
 *   - a marker that cannot be read (a folder in its place): strerror;
 *   - remove: gone, and removing nothing is fine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/io/ckpt_shared.h"
#include "tests/unit/test_util.h"

static char root[256];

/* ds_ckpt_marker_check(dir, m, 3) fails with DS_ERR_IO and a message that
 * holds every one of the NULL-terminated strings. */
static void expect_refused(const char *dir, const ds_ckpt_marker *m, const char *what, ...) {
    ds_status st = ds_ckpt_marker_check(dir, m, 3);
    CHECK(st == DS_ERR_IO, "%s: status %s, want DS_ERR_IO", what, ds_status_to_string(st));
    const char *msg = ds_last_error();
    char host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    char want[400];
    snprintf(want, sizeof want, "checkpoint folder %s: rank 3 (host %s) does not see the folder "
             "rank 0 (host %s) writes (", dir, host, host);
    CHECK(strstr(msg, want) != NULL, "%s: no '%s' in: %s", what, want, msg);
    CHECK(strstr(msg, "every rank must see the same checkpoint folder") != NULL,
          "%s: the rule is missing: %s", what, msg);
    CHECK(strchr(msg, '\n') == NULL, "%s: more than one line: %s", what, msg);
    va_list ap;
    va_start(ap, what);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        CHECK(strstr(msg, s) != NULL, "%s: no '%s' in: %s", what, s, msg);
    va_end(ap);
}

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", root, name);
}

int main(void) {
    snprintf(root, sizeof root, "%s/tests/ckpt_shared", DS_BINARY_DIR);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/a' '%s/b' '%s/c'", root, root, root,
             root);
    if (system(cmd) != 0) return 1;
    char a[300], b[300], c[300], gone[300], file[400];
    path_in(a, sizeof a, "a");
    path_in(b, sizeof b, "b");
    path_in(c, sizeof c, "c");
    path_in(gone, sizeof gone, "not-here");

    ds_ckpt_marker m, other;
    REQUIRE_OK(ds_ckpt_marker_write(a, &m));
    CHECK_OK(ds_ckpt_marker_check(a, &m, 1));
    char host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    char head[100];
    snprintf(head, sizeof head, "host %s pid %ld nonce ", host, (long)getpid());
    CHECK(strncmp(m.text, head, strlen(head)) == 0, "marker text '%s', want it to start '%s'",
          m.text, head);

    /* another folder under the same name: empty, absent, or another job's */
    snprintf(file, sizeof file, "%s/%s", b, DS_CKPT_MARKER_FILE);
    expect_refused(b, &m, "empty folder", file, "which rank 0 has just written, is not there",
                   (const char *)NULL);
    char no_dir[400];
    snprintf(no_dir, sizeof no_dir, "there is no %s on %s", gone, host);
    expect_refused(gone, &m, "no folder", no_dir, (const char *)NULL);
    REQUIRE_OK(ds_ckpt_marker_write(b, &other));
    CHECK(strcmp(other.text, m.text) != 0, "two markers are the same: %s", m.text);
    expect_refused(b, &m, "another marker", "holds other bytes than rank 0 has just written",
                   (const char *)NULL);
    /* the right text with one byte more is not the marker either */
    snprintf(file, sizeof file, "%s/%s", c, DS_CKPT_MARKER_FILE);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL, "cannot write %s", file);
    if (f) {
        fprintf(f, "%sx", m.text);
        fclose(f);
    }
    expect_refused(c, &m, "a longer marker", "holds other bytes", (const char *)NULL);
    /* unreadable: a folder where the file should be */
    CHECK_OK(ds_ckpt_marker_remove(c));
    CHECK(mkdir(file, 0755) == 0, "mkdir %s", file);
    expect_refused(c, &m, "a folder as marker", "cannot read", "Is a directory",
                   (const char *)NULL);

    /* removed, and removing it twice is fine */
    snprintf(file, sizeof file, "%s/%s", a, DS_CKPT_MARKER_FILE);
    CHECK_OK(ds_ckpt_marker_remove(a));
    CHECK(access(file, F_OK) != 0, "%s still there after remove", file);
    CHECK_OK(ds_ckpt_marker_remove(a));
    expect_refused(a, &m, "after remove", "is not there", (const char *)NULL);

    if (test_fails() == 0) { /* keep the files of a failed run */
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0) return 1;
    }
    return test_finish("test_ckpt_shared");
}
