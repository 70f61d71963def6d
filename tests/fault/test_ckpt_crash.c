/* Crash safety of ds_save_checkpoint, one phase per process group
 * (tests/fault/test_ckpt_crash.sh runs them):
 *
 *   --phase base  --dir D --work W   train 2 steps, save D/global_step2, dump
 *                                    the parameters to W/params_2
 *   --phase crash --dir D --work W   a fresh run of 3 steps, dump W/params_3,
 *                                    then save D/global_step3 with
 *                                    DS_FAULT_INJECT armed: a rank SIGKILLs
 *                                    itself at the armed point (exit 3 here
 *                                    means the point never fired)
 *   --phase resave --dir D --work W  train 2 steps and save global_step2
 *                                    again, over the complete one there (the
 *                                    atomic exchange of a tag being replaced;
 *                                    tests/fault/test_ckpt_fsync.sh traces it)
 *   --phase check --dir D --work W --expect N
 *                                    a new process group: D/latest must name
 *                                    global_stepN, ds_checkpoint_verify must
 *                                    pass, ds_load_checkpoint must load it
 *                                    with the parameters of W/params_N bit for
 *                                    bit; then one more step and a save of
 *                                    global_step3 must succeed over whatever
 *                                    the crash left (a stale
 *                                    global_step3.tmp, or a complete
 *                                    global_step3 that latest did not name
 *                                    yet), leaving no .tmp behind. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "../multirank/ckpt_harness.h"
#include "tests/unit/test_util.h"

static void dump(engine_t *e, const char *work, int step) {
    size_t n;
    float *p = ck_params(e, &n);
    char path[1024];
    snprintf(path, sizeof path, "%s/params_%d", work, step);
    if (!p || (ds_rank(e) == 0 && !ck_write_floats(path, p, n))) TEST_DIE("dumping parameters");
    free(p);
}

static void train(engine_t *e, int steps) {
    for (int i = 0; i < steps; i++)
        if (ds_train_batch(e, NULL) != DS_OK) TEST_DIE("train");
}

int main(int argc, char **argv) {
    const char *phase = NULL, *dir = NULL, *work = NULL;
    int expect = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--phase")) phase = argv[i + 1];
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--work")) work = argv[i + 1];
        else if (!strcmp(argv[i], "--expect")) expect = atoi(argv[i + 1]);
    }
    if (!phase || !dir || !work) {
        fprintf(stderr, "usage: test_ckpt_crash --phase base|resave|crash|check --dir D --work W\n");
        return 2;
    }
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    s.stage = 2;
    engine_t *e;
    if (!data || ck_engine(&s, data, &e) != DS_OK) TEST_DIE("engine");
    int rank = ds_rank(e);
    if (!strcmp(phase, "base")) {
        train(e, 2);
        dump(e, work, 2);
        if (ds_save_checkpoint(e, dir, NULL, NULL) != DS_OK) TEST_DIE("save");
    } else if (!strcmp(phase, "resave")) {
        train(e, 2);
        if (ds_save_checkpoint(e, dir, "global_step2", NULL) != DS_OK) TEST_DIE("save again");
    } else if (!strcmp(phase, "crash")) {
        train(e, 3);
        dump(e, work, 3);
        ds_status st = ds_save_checkpoint(e, dir, NULL, NULL);
        fprintf(stderr, "test_ckpt_crash: rank %d: save returned %s (%s): the fault point "
                "never fired\n", rank, ds_status_to_string(st), ds_last_error());
        return 3;
    } else {
        char tag[256], want[64];
        snprintf(want, sizeof want, "global_step%d", expect);
        if (ds_checkpoint_latest(dir, tag, sizeof tag) != DS_OK) TEST_DIE("latest");
        CHECK(!strcmp(tag, want), "latest names %s, want %s", tag, want);
        if (rank == 0) CHECK(ds_checkpoint_verify(dir, NULL) == DS_OK, "verify: %s",
                             ds_last_error());
        if (ds_load_checkpoint(e, dir, NULL, DS_LOAD_ALL) != DS_OK) TEST_DIE("load");
        CHECK(ds_global_step(e) == expect, "loaded step %lld", (long long)ds_global_step(e));
        size_t n, nw;
        float *p = ck_params(e, &n);
        char path[1024];
        snprintf(path, sizeof path, "%s/params_%d", work, expect);
        float *w = rank == 0 ? ck_read_floats(path, &nw) : NULL;
        if (rank == 0)
            CHECK(w && nw == n && !memcmp(p, w, n * 4),
                  "loaded parameters differ from the run that saved step %d", expect);
        free(p);
        free(w);
        /* Save step 3 over what the crash left. */
        train(e, 3 - expect);
        if (ds_save_checkpoint(e, dir, "global_step3", NULL) != DS_OK) TEST_DIE("save after crash");
        if (rank == 0) {
            CHECK(ds_checkpoint_verify(dir, NULL) == DS_OK, "verify after: %s", ds_last_error());
            CHECK(ds_checkpoint_latest(dir, tag, sizeof tag) == DS_OK &&
                      !strcmp(tag, "global_step3"), "latest after the new save: %s", tag);
            DIR *d = opendir(dir);
            struct dirent *de;
            while (d && (de = readdir(d))) {
                size_t l = strlen(de->d_name);
                CHECK(l < 4 || strcmp(de->d_name + l - 4, ".tmp"), "left behind: %s",
                      de->d_name);
            }
            if (d) closedir(d);
            printf("%s: latest was %s and loaded; a new save over the debris succeeded\n",
                   test_fails() ? "FAIL" : "ok", want);
        }
    }
    ds_finalize(e);
    ds_dataset_destroy(data);
    return test_finish("test_ckpt_crash");
}
