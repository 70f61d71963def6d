/* tools/common/metrics_resume.c: a --metrics file cut back to the step a run
 * resumes from. A file as an earlier run left it (a trainer header, an
 * initial evaluation, steps 1-7 with an evaluation at 4, a retry back to
 * step 2 and steps 3-7 again, a final eval, a last line cut by the kill):
 *   at 4, re-evaluated   header, initial_eval, steps 1-4, the retry (from 2),
 *                        steps 3-4; not eval_step 4 (the resumed run makes
 *                        it again), nothing after, not the cut line;
 *   at 4, not            the same with eval_step 4 (once per copy of step 4);
 *   at 2                 the retry from 2 goes with all after it;
 *   at 7                 all but the cut line (the final eval was made at 7:
 *                        a run that ended there and goes on keeps it);
 * the lines kept are byte for byte the old ones, in order; a missing file is
 * no error and is not created. Through a link the file is cut and the link
 * and the mode stay; a pipe and a file without a step of a run are left as
 * they are; a line that is not JSON stays unless it is the last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/test_util.h"
#include "tools/common/metrics_resume.h"

static const char *const k_lines[] = {
    "{\"trainer\": {\"eval_steps\": 4}}",                              /* 0 */
    "{\"initial_eval\": {\"loss\": 5.5}}",                             /* 1 */
    "{\"step\": 1, \"loss\": 5.0}",                                    /* 2 */
    "{\"step\": 2, \"loss\": 4.0}",                                    /* 3 */
    "{\"step\": 3, \"loss\": 3.0}",                                    /* 4 */
    "{\"step\": 4, \"loss\": 2.0}",                                    /* 5 */
    "{\"eval_step\": 4, \"dev\": {\"loss\": 2.5}}",                    /* 6 */
    "{\"step\": 5, \"loss\": 1.5}",                                    /* 7 */
    "{\"retry\": {\"failed_step\": 6, \"from_step\": 2, \"error\": \"x\"}}", /* 8 */
    "{\"step\": 3, \"loss\": 3.1}",                                    /* 9 */
    "{\"step\": 4, \"loss\": 2.1}",                                    /* 10 */
    "{\"eval_step\": 4, \"dev\": {\"loss\": 2.6}}",                    /* 11 */
    "{\"step\": 5, \"loss\": 1.6}",                                    /* 12 */
    "{\"step\": 6, \"loss\": 1.2}",                                    /* 13 */
    "{\"step\": 7, \"loss\": 1.1}",                                    /* 14 */
    "{\"eval\": {\"loss\": 1.4}}",                                     /* 15 */
    "{\"step\": 8, \"lo",                                              /* 16: cut */
};
#define N_LINES (int)(sizeof k_lines / sizeof *k_lines)

static void write_file(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) TEST_DIE("cannot write the test file");
    for (int i = 0; i < N_LINES; i++) fprintf(f, "%s%s", k_lines[i], i + 1 < N_LINES ? "\n" : "");
    fclose(f);
}

/* The file's text is exactly lines want[0..n) of k_lines, each ending in \n. */
static void expect(const char *path, const char *what, const int *want, int n) {
    char exp[4096] = "", got[4096] = "";
    for (int i = 0; i < n; i++) {
        strcat(exp, k_lines[want[i]]);
        strcat(exp, "\n");
    }
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[len] = '\0';
    if (f) fclose(f);
    CHECK(strcmp(exp, got) == 0, "%s:\n--- want\n%s--- got\n%s", what, exp, got);
}

static void cut(const char *path, int64_t step, bool reeval, const char *what, const int *want,
                int n) {
    write_file(path);
    long kept, dropped;
    if (tr_metrics_truncate(path, step, reeval, &kept, &dropped) != DS_OK) {
        TEST_FAIL("%s: %s", what, ds_last_error());
        return;
    }
    CHECK(kept == n && dropped == N_LINES - n, "%s: kept %ld, dropped %ld, want %d and %d", what,
          kept, dropped, n, N_LINES - n);
    expect(path, what, want, n);
}

int main(void) {
    char dir[] = "/tmp/test_metrics_resume.XXXXXX";
    if (!mkdtemp(dir)) TEST_DIE("mkdtemp");
    char path[256], tmp[270];
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);

    const int at4[] = {0, 1, 2, 3, 4, 5, 8, 9, 10};
    cut(path, 4, true, "at 4, evaluated again", at4, 9);
    const int at4n[] = {0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11};
    cut(path, 4, false, "at 4, not evaluated again", at4n, 11);
    const int at2[] = {0, 1, 2, 3};
    cut(path, 2, false, "at 2", at2, 4);
    const int at7[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    cut(path, 7, false, "at 7", at7, 16);
    CHECK(access(tmp, F_OK) != 0, "%s left behind", tmp);

    remove(path);
    long kept = -1, dropped = -1;
    CHECK(tr_metrics_truncate(path, 3, false, &kept, &dropped) == DS_OK, "missing file: %s",
          ds_last_error());
    CHECK(kept == 0 && dropped == 0 && access(path, F_OK) != 0,
          "missing file: kept %ld dropped %ld, created %d", kept, dropped, access(path, F_OK) == 0);

    /* through a link: the file it names is cut, the link stays, the mode too */
    char link[270], text[1024];
    snprintf(link, sizeof link, "%s/link.jsonl", dir);
    write_file(path);
    chmod(path, 0640);
    CHECK(symlink("m.jsonl", link) == 0, "symlink");
    CHECK(tr_metrics_truncate(link, 2, false, &kept, &dropped) == DS_OK, "link: %s",
          ds_last_error());
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced");
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640, "mode %o, want 640",
          (unsigned)(sb.st_mode & 0777));
    expect(path, "through a link, at 2", at2, 4);
    remove(link);
    /* a pipe (as /dev/stdout can be): neither read (it would wait) nor replaced */
    char fifo[270];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK(tr_metrics_truncate(fifo, 2, false, &kept, &dropped) == DS_OK && kept == -1,
          "fifo: kept %ld: %s", kept, ds_last_error());
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the fifo was replaced");
    remove(fifo);
    /* not a --metrics file (no step of a run): left whole */
    FILE *f = fopen(path, "w");
    fputs("step,loss\n1,5.0\n2,4.0\n", f);
    fclose(f);
    CHECK(tr_metrics_truncate(path, 1, false, &kept, &dropped) == DS_OK && kept == -2,
          "csv: kept %ld: %s", kept, ds_last_error());
    f = fopen(path, "r");
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    CHECK(strcmp(text, "step,loss\n1,5.0\n2,4.0\n") == 0, "csv changed: %s", text);
    /* a line that is not JSON but not the last stays (a note someone added) */
    f = fopen(path, "w");
    fputs("{\"step\": 1}\n# note\n{\"step\": 2}\n{\"step\": 3}\n", f);
    fclose(f);
    CHECK(tr_metrics_truncate(path, 2, false, &kept, &dropped) == DS_OK && kept == 3 &&
              dropped == 1,
          "note: kept %ld dropped %ld: %s", kept, dropped, ds_last_error());
    remove(path);
    rmdir(dir);
    return test_finish("test_metrics_resume");
}
