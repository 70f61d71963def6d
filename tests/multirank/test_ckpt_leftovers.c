/* Nothing left behind (2 ranks, stage 2, the MLP, frames of 64 values):
 *   - a save whose meta.json write fails on rank 0, or whose shard write
 *     fails on rank 1 (DS_FAULT_INJECT=error:..., a full disk as the code
 *     sees it), returns the failure on every rank and leaves no TAG.tmp and
 *     no latest; the next save succeeds;
 *   - ds_checkpoint_clean removes stale TAG.tmp folders and latest.tmp,
 *     printing each path, and nothing else (a user's notes.tmp stays);
 *   - a zero_to_fp32 that fails on a corrupted frame after finishing some
 *     shards of a sharded output removes those shards and the folders it
 *     created for OUT; into an existing folder it leaves the folder as it
 *     was; a single-file output leaves neither the file nor its .tmp. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "tests/unit/test_util.h"

static char out[512], ckpt[600];

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) TEST_DIE(path);
    fputs("x", f);
    fclose(f);
}

/* A save with the fault `spec` armed must fail everywhere naming `needle`
 * and leave nothing in the checkpoint folder but what was there. */
static void failing_save(engine_t *e, const char *spec, const char *needle) {
    setenv("DS_FAULT_INJECT", spec, 1);
    ds_status st = ds_save_checkpoint(e, ckpt, NULL, NULL);
    unsetenv("DS_FAULT_INJECT");
    CHECK(st == DS_ERR_IO && strstr(ds_last_error(), needle), "save with %s: %s \"%s\"", spec,
          ds_status_to_string(st), ds_last_error());
    /* rank 0 removes TAG.tmp before it returns; the others may be faster */
    ds_all_reduce_host(e, &(int64_t){0}, 1, DS_I64);
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s/global_step%lld.tmp", ckpt, (long long)ds_global_step(e));
    CHECK(!exists(tmp), "a save failing with %s left %s", spec, tmp);
    snprintf(tmp, sizeof tmp, "%s/latest", ckpt);
    CHECK(!exists(tmp), "a failed save wrote %s", tmp);
    ds_all_reduce_host(e, &(int64_t){0}, 1, DS_I64); /* nobody saves before all looked */
}

static void check_clean(engine_t *e) {
    char p[900], log[700];
    const char *stale[] = {"global_step9.tmp", "other-run.tmp"};
    if (ds_rank(e) == 0) {
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s", ckpt, stale[k]);
            mkdir(p, 0755);
            snprintf(p, sizeof p, "%s/%s/shard-00000-of-00002.dsck", ckpt, stale[k]);
            touch(p);
        }
        snprintf(p, sizeof p, "%s/latest.tmp", ckpt);
        touch(p);
        snprintf(p, sizeof p, "%s/notes.tmp", ckpt); /* not a save's: stays */
        touch(p);
    }
    /* rank 0 prints what it removes: catch its stderr in a file. Only rank
     * 0 opens it: another rank's O_TRUNC, arriving after rank 0 printed,
     * emptied it (seen once in a full run under load) */
    snprintf(log, sizeof log, "%s/clean.log", out);
    int saved = -1, fd = -1;
    if (ds_rank(e) == 0) {
        saved = dup(2);
        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
    }
    ds_status st = ds_checkpoint_clean(e, ckpt);
    if (ds_rank(e) == 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(fd);
        close(saved);
    }
    CHECK(st == DS_OK, "ds_checkpoint_clean: %s", ds_last_error());
    if (ds_rank(e) != 0) return;
    FILE *f = fopen(log, "r");
    char text[4096] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/%s", ckpt, k < 2 ? stale[k] : "latest.tmp");
        CHECK(!exists(p), "ds_checkpoint_clean left %s", p);
        CHECK(strstr(text, p) != NULL, "ds_checkpoint_clean did not say it removed %s: \"%s\"", p,
              text);
    }
    snprintf(p, sizeof p, "%s/notes.tmp", ckpt);
    CHECK(exists(p), "ds_checkpoint_clean removed a file no save writes: %s", p);
    unlink(p);
}

/* Corrupt the first weights frame of rank 1's file (just past its 64-byte
 * header): the converter fails there, after the tensors of rank 0's file. */
static void corrupt_rank1(const char *tag_dir) {
    char p[900];
    snprintf(p, sizeof p, "%s/shard-00001-of-00002.dsck", tag_dir);
    int fd = open(p, O_RDWR);
    unsigned char b;
    if (fd < 0 || pread(fd, &b, 1, 70) != 1) TEST_DIE(p);
    b ^= 0xff;
    if (pwrite(fd, &b, 1, 70) != 1) TEST_DIE(p);
    close(fd);
}

static void check_z2f(void) {
    char tag_dir[800], dst[900], top[900];
    snprintf(tag_dir, sizeof tag_dir, "%s/global_step1", ckpt);
    corrupt_rank1(tag_dir);
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    /* 1 kB shards: the first tensors fill several before the walk reaches
     * rank 1's file */
    o.max_shard_bytes = 1000;
    snprintf(top, sizeof top, "%s/new", out);
    snprintf(dst, sizeof dst, "%s/new/a/b", out);
    ds_status st = ds_zero_to_fp32(ckpt, dst, &o, NULL);
    CHECK(st == DS_ERR_CORRUPT && strstr(ds_last_error(), "shard-00001-of-00002.dsck"),
          "sharded conversion of a corrupted checkpoint: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    CHECK(!exists(top), "a failed conversion left %s (and what is in it)", top);
    /* into a folder that exists: the folder stays, empty */
    snprintf(dst, sizeof dst, "%s/existing", out);
    mkdir(dst, 0755);
    st = ds_zero_to_fp32(ckpt, dst, &o, NULL);
    CHECK(st == DS_ERR_CORRUPT, "conversion into an existing folder: %s", ds_last_error());
    CHECK(count_entries(dst) == 0, "a failed conversion left %d files in %s", count_entries(dst),
          dst);
    /* one file */
    o.max_shard_bytes = 0;
    snprintf(dst, sizeof dst, "%s/existing/model.safetensors", out);
    st = ds_zero_to_fp32(ckpt, dst, &o, NULL);
    CHECK(st == DS_ERR_CORRUPT && !exists(dst), "single-file conversion: %s \"%s\"",
          ds_status_to_string(st), ds_last_error());
    snprintf(dst, sizeof dst, "%s/existing", out);
    CHECK(count_entries(dst) == 0, "a failed single-file conversion left %d files in %s",
          count_entries(dst), dst);
}

int main(void) {
    snprintf(out, sizeof out, "%s/tests/ckpt_leftovers", DS_BINARY_DIR);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", out);
    setenv("DS_CKPT_FRAME_ELEMS", "64", 1);
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    s.stage = 2;
    engine_t *e;
    if (!data || ck_engine(&s, data, &e) != DS_OK) TEST_DIE("engine");
    int rank = ds_rank(e);
    test_set_rank(rank);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, ckpt);
    if (rank == 0 && system(cmd) != 0) TEST_DIE("work folder");
    ds_all_reduce_host(e, &(int64_t){0}, 1, DS_I64); /* rank 0 made it */
    if (ds_train_batch(e, NULL) != DS_OK) TEST_DIE("train");

    failing_save(e, "error:ckpt:write_meta:rank=0", "ckpt:write_meta");
    failing_save(e, "error:ckpt:write_shard:rank=1", "ckpt:write_shard");
    check_clean(e);
    CHECK(ds_save_checkpoint(e, ckpt, NULL, NULL) == DS_OK, "save after the failures: %s",
          ds_last_error());
    ds_finalize(e);
    ds_dataset_destroy(data);
    if (rank == 0) {
        CHECK(ds_checkpoint_verify(ckpt, NULL) == DS_OK, "verify: %s", ds_last_error());
        check_z2f();
        if (test_fails() == 0) {
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
            if (system(cmd) != 0) return 1;
        }
    }
    return test_finish("test_ckpt_leftovers");
}
