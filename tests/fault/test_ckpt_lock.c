/* One writer per checkpoint folder, and bounded disk use (issue 15, item 4),
 * on one rank:
 *   - another process holding DIR's lock (a child, forked before MPI starts)
 *     makes ds_checkpoint_clean and ds_save_checkpoint fail with DS_ERR_IO
 *     naming DIR, the lock file and the holder's pid, and the save writes
 *     nothing (no TAG.tmp, no latest);
 *   - killed with SIGKILL, the holder frees the lock with its process: the
 *     next clean and save work at once (a dead job never blocks);
 *   - this process taking the lock again (every save does) is fine;
 *   - ds_checkpoint_prune(keep 2) with latest pointed at an older tag keeps
 *     the newest two and latest's, removes the others, and leaves alone a
 *     folder that is not a checkpoint and one whose meta.json is damaged;
 *     latest's checkpoint still loads; keep 0 is refused;
 *   - a removal cut short (what a crash between its rename and its delete
 *     leaves: TAG.tmp) is cleared by ds_checkpoint_clean. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "engine/io/ckpt_dir.h"
#include "tests/unit/test_util.h"

static char dir[512];

static bool exists(const char *name) {
    char p[800];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void touch(const char *name, const char *text) {
    char p[800];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) TEST_DIE(p);
    fputs(text, f);
    fclose(f);
}

/* A child that takes the lock and waits to be killed; its pid. */
static pid_t lock_holder(void) {
    int fds[2];
    if (pipe(fds) != 0) TEST_DIE("pipe");
    pid_t pid = fork();
    if (pid < 0) TEST_DIE("fork");
    if (pid == 0) {
        close(fds[0]);
        char ok = ds_ckpt_lock_dir(dir) == DS_OK ? 'L' : 'E';
        if (write(fds[1], &ok, 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(fds[1]);
    char got = 0;
    if (read(fds[0], &got, 1) != 1 || got != 'L') TEST_DIE("the child could not take the lock");
    close(fds[0]);
    return pid;
}

static void train_and_save(engine_t *e, int steps) {
    for (int k = 0; k < steps; k++) {
        ds_step_info info;
        REQUIRE_OK(ds_train_batch(e, &info));
        REQUIRE_OK(ds_save_checkpoint(e, dir, NULL, NULL));
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tests/ckpt_lock", DS_BINARY_DIR);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) TEST_DIE("cleaning the work folder");

    /* forked before the engine exists, so before MPI is initialised */
    pid_t holder = lock_holder();
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    engine_t *e = NULL;
    REQUIRE_OK(ck_engine(&s, data, &e));

    char pid_text[64], lock_text[1200];
    snprintf(pid_text, sizeof pid_text, "held by pid %ld on ", (long)holder);
    snprintf(lock_text, sizeof lock_text, "%s is being written by another job (%s/.lock", dir, dir);
    ds_status st = ds_checkpoint_clean(e, dir);
    CHECK(st == DS_ERR_IO && strstr(ds_last_error(), lock_text) &&
              strstr(ds_last_error(), pid_text),
          "clean of a folder another process locks: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    ds_step_info info;
    REQUIRE_OK(ds_train_batch(e, &info));
    st = ds_save_checkpoint(e, dir, NULL, NULL);
    CHECK(st == DS_ERR_IO && strstr(ds_last_error(), lock_text),
          "save into a folder another process locks: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    CHECK(!exists("latest") && !exists("global_step1.tmp") && !exists("global_step1"),
          "the refused save wrote something");

    /* the holder dies as a killed job does: its lock goes with it */
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_OK(ds_checkpoint_clean(e, dir));
    CHECK_OK(ds_checkpoint_clean(e, dir)); /* this process again: fine */
    REQUIRE_OK(ds_save_checkpoint(e, dir, NULL, NULL)); /* global_step1 */
    train_and_save(e, 4);                               /* global_step2 .. 5 */

    /* latest pointed back at global_step2 (a user who chose it); two folders
     * that are not checkpoints of ours */
    REQUIRE_OK(ds_ckpt_write_latest(dir, "global_step2"));
    char p[800];
    snprintf(p, sizeof p, "%s/notes", dir);
    mkdir(p, 0755);
    touch("notes/readme.txt", "mine\n");
    snprintf(p, sizeof p, "%s/broken", dir);
    mkdir(p, 0755);
    touch("broken/meta.json", "{\"format_version\": 2}\n");
    CHECK(ds_checkpoint_prune(e, dir, 0) == DS_ERR_INVALID_ARG, "keep 0 accepted");
    CHECK_OK(ds_checkpoint_prune(e, dir, 2));
    const char *kept[] = {"global_step5", "global_step4", "global_step2", "notes", "broken"};
    const char *gone[] = {"global_step1", "global_step3", "global_step1.tmp", "global_step3.tmp"};
    for (int k = 0; k < 5; k++) CHECK(exists(kept[k]), "prune removed %s", kept[k]);
    for (int k = 0; k < 4; k++) CHECK(!exists(gone[k]), "prune left %s", gone[k]);
    CHECK_OK(ds_load_checkpoint(e, dir, NULL, DS_LOAD_ALL));
    CHECK(ds_global_step(e) == 2, "latest's checkpoint loaded step %lld",
          (long long)ds_global_step(e));

    /* a removal cut short between its rename and its delete */
    snprintf(p, sizeof p, "%s/global_step4.tmp", dir);
    snprintf(cmd, sizeof cmd, "mv '%s/global_step4' '%s'", dir, p);
    if (system(cmd) != 0) TEST_DIE("renaming global_step4");
    CHECK_OK(ds_checkpoint_clean(e, dir));
    CHECK(!exists("global_step4.tmp") && exists("global_step5"),
          "clean after a removal cut short");

    ds_finalize(e);
    ds_dataset_destroy(data);
    return test_finish("test_ckpt_lock");
}
