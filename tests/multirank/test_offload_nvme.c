/* offload_optimizer {"device": "nvme"} (ZeRO-Infinity's optimizer swap):
 * the same training as without offload, with master weights and moments in
 * swap files.
 *
 *   test_offload_nvme --stage S --precision fp32|fp16|bf16 --dir D [--optimizer AdamW|SGD]
 *       a small BERT, the global batch split over the ranks, swap files in D/nvme:
 *       1. equivalence: an engine without offload (A), one swapping in many
 *          sub-groups with pipeline_read and pipeline_write and an aio pool of
 *          4 threads cutting each request into several blocks (B), and one
 *          with DeepSpeed's defaults (one sub-group, no pipelining; C,
 *          pin_memory false, fast_init true) train STEPS steps: every step's
 *          loss, lr, loss scale and the final parameters identical bit for bit
 *          (the host update runs the cpu backend's adam/sgd slot on each
 *          sub-group, and the update is element-wise);
 *       2. accounting: master and moments are counted at the "nvme" place,
 *          nothing of them on the device or the host; the swap buffers are
 *          what the sub-groups and the pipelining need; a step allocates
 *          nothing;
 *       3. files: while B and C live each rank has two swap folders in D/nvme;
 *          after ds_finalize none is left;
 *       4. checkpoints: A and B save; a fresh swapping engine loads A's, a
 *          fresh plain one loads B's: the parameters equal bit for bit and the
 *          next steps give A's losses; zero_to_fp32 of both checkpoints writes
 *          the same bytes;
 *       5. ds_set_param reaches the swapped master.
 *   test_offload_nvme --errors --dir D
 *       every bad nvme_path fails ds_initialize with one message naming the
 *       path and the bytes (missing, not a directory, not writable, no
 *       O_DIRECT, too small), leaving nothing behind; too few buffers for the
 *       pipelining is a config error; a disk that fills mid-training
 *       (DS_FAULT_INJECT=error:nvme:swap_write) fails the step with the file
 *       and strerror, removes the swap files at once, and the checkpoint saved
 *       before it verifies and loads; one rank's disk filling at stages 1-3
 *       fails every rank's step at once (the other naming it), and training,
 *       saves and evaluation are refused after it; loading the checkpoint
 *       saved before it into the same engine makes the swap files anew
 *       (refused while rank 1's disk is still full: DS_FAULT_INJECT=
 *       error:nvme:reserve, the engine then refused naming the load) and
 *       trains on bit for bit as a fresh engine loading it.
 *   test_offload_nvme --param cpu|nvme --precision P --dir D
 *       offload_param at stage 3 (the parameter partition in host memory, or
 *       in a file past max_in_cpu elements), the optimizer on the device and
 *       swapped to NVMe: losses and parameters bit-identical to no offload;
 *       the partition counted off the device; checkpoints both ways;
 *       ds_set_param; no file left. nvme: one rank's parameter file failing
 *       to read, in a forward, a backward and an evaluation, fails both ranks
 *       at once;
 *       the checkpoint saved before, loaded into the same engine, makes
 *       the file anew and trains on as a fresh engine loading it.
 *   test_offload_nvme --crash --dir D        (run under DS_FAULT_INJECT=nvme:mid_step)
 *       trains until the kill point ends the process: swap files are left.
 *   test_offload_nvme --after-crash --dir D
 *       finds the crashed run's folders, and a new engine's start-up removes
 *       them (and never reads them) and trains. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "engine/io/zero_to_fp32.h"
#include "models/models.h"
#include "offload/nvme_dir.h"
#include "offload_harness.h"
#include "tests/unit/test_util.h"

#define STEPS OFF_STEPS
#define MORE OFF_MORE
#define GLOBAL_BATCH OFF_GLOBAL_BATCH

typedef struct setup {
    int stage;
    const char *precision, *optimizer, *dir;
    char nvme[1024];
} setup;

/* More zero_optimization keys for every engine made while set (the
 * offload_param cases). */
static char g_zero_more[1400];

/* offload: 0 none, 1 nvme pipelined in many sub-groups, 2 nvme with
 * DeepSpeed's defaults (pin_memory false, fast_init true). extra: more
 * offload_optimizer keys (or ""), for the error cases; bdp: another model. */
static ds_status try_engine(const setup *s, const ds_dataset *data, int offload,
                            const char *nvme_path, const char *extra, const ds_bert_desc *bdp,
                            engine_t **out) {
    char zero[3072] = "", top[256] = "";
    /* 1: sub-groups of 4096 elements (16 KiB) over a partition of ~10-20 K,
     * the last one short; blocks of 4 KiB, so each request is cut in 4 and
     * spread over 2 * 2 I/O threads. */
    if (offload == 1) {
        snprintf(zero, sizeof zero,
                 ", \"sub_group_size\": 4096, \"offload_optimizer\": {\"device\": \"nvme\","
                 " \"nvme_path\": \"%s\", \"pin_memory\": true, \"buffer_count\": 9,"
                 " \"pipeline_read\": true, \"pipeline_write\": true%s}%s",
                 nvme_path, extra, g_zero_more);
        snprintf(top, sizeof top,
                 ", \"aio\": {\"block_size\": 4096, \"queue_depth\": 2, \"thread_count\": 2}");
    } else if (offload == 2) {
        snprintf(zero, sizeof zero,
                 ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\","
                 " \"pin_memory\": false, \"fast_init\": true%s}%s", nvme_path, extra,
                 g_zero_more);
    } else {
        snprintf(zero, sizeof zero, "%s", g_zero_more);
    }
    return off_engine(s->stage, s->precision, s->optimizer, zero, top, bdp, data, out);
}

static engine_t *make_engine(const setup *s, const ds_dataset *data, int offload) {
    engine_t *e;
    REQUIRE_OK(try_engine(s, data, offload, s->nvme, "", NULL, &e));
    return e;
}

static void barrier(engine_t *e) {
    double x = 0.0;
    REQUIRE_OK(ds_all_reduce_host(e, &x, 1, DS_F64));
}

/* Swap folders under dir (every rank's). */
static int swap_folders(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "zero_engine_swap.", 17)) n++;
    closedir(d);
    return n;
}

#define B(r, p, pl) ((r).bytes[p][pl])

/* The accounting of a swapping engine (off) against the plain one. */
static void check_split(const setup *s, const ds_mem_report *plain, const ds_mem_report *off,
                        const char *what) {
    bool sgd = !strcmp(s->optimizer, "SGD");
    int moments = sgd ? 1 : 2; /* SGD runs with momentum 0.9 */
    uint64_t optim = B(*plain, DS_MEM_OPTIM, DS_PLACE_DEVICE);
    uint64_t part = optim / (uint64_t)(4 * moments);
    CHECK(part > 0, "%s: plain optim bytes %llu", what, (unsigned long long)optim);
    for (int pl = 0; pl < DS_PLACE_NVME; pl++) {
        CHECK_EQ_I((long long)B(*off, DS_MEM_MASTER, pl), 0);
        CHECK_EQ_I((long long)B(*off, DS_MEM_OPTIM, pl), 0);
    }
    CHECK_EQ_I((long long)B(*off, DS_MEM_OPTIM, DS_PLACE_NVME), (long long)optim);
    CHECK_EQ_I((long long)B(*off, DS_MEM_MASTER, DS_PLACE_NVME), (long long)(part * 4));
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        if (p != DS_MEM_MASTER && p != DS_MEM_OPTIM)
            CHECK(B(*off, p, DS_PLACE_DEVICE) == B(*plain, p, DS_PLACE_DEVICE),
                  "%s: %s on the device: %llu vs %llu", what,
                  ds_mem_purpose_name((ds_mem_purpose)p),
                  (unsigned long long)B(*off, p, DS_PLACE_DEVICE),
                  (unsigned long long)B(*plain, p, DS_PLACE_DEVICE));
}

/* Both files byte for byte (rank 0 only). */
static void same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    CHECK(fa && fb, "opening %s and %s", a, b);
    if (fa && fb) {
        int ca, cb;
        long at = 0;
        do {
            ca = fgetc(fa);
            cb = fgetc(fb);
            at++;
        } while (ca == cb && ca != EOF);
        CHECK(ca == cb, "%s and %s differ at byte %ld", a, b, at - 1);
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
}

static int run_equiv(setup *s) {
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * (STEPS + MORE), 12, 50);
    if (!data) TEST_DIE("dataset");
    ds_step_info ia[STEPS + MORE], ib[STEPS], ic[STEPS];
    ds_mem_report ra, rb, rb2, rc;
    engine_t *a = make_engine(s, data, 0);
    int rank = ds_rank(a), world = ds_world_size(a);
    test_set_rank(rank);
    engine_t *b = make_engine(s, data, 1);
    engine_t *c = make_engine(s, data, 2);
    barrier(a); /* every rank's folders exist */
    CHECK_EQ_I(swap_folders(s->nvme), 2 * world);
    ds_memory_report(a, &ra);
    ds_memory_report(b, &rb);
    ds_memory_report(c, &rc);
    check_split(s, &ra, &rb, "pipelined");
    check_split(s, &ra, &rc, "defaults");
    off_train(a, STEPS, ia);
    off_train(b, STEPS, ib);
    off_train(c, STEPS, ic);
    ds_memory_report(b, &rb2);
    off_check_no_growth("swapped steps", &rb, &rb2);
    off_same_steps("nvme pipelined vs none", ia, ib, STEPS);
    off_same_steps("nvme defaults vs none", ia, ic, STEPS);
    off_check_moved(ia, STEPS);
    off_same_params("nvme pipelined vs none", a, b);
    off_same_params("nvme defaults vs none", a, c);
    ds_finalize(c);

    /* checkpoints cross the swap boundary both ways */
    char da[1200], db[1200];
    snprintf(da, sizeof da, "%s/plain", s->dir);
    snprintf(db, sizeof db, "%s/nvme_ckpt", s->dir);
    REQUIRE_OK(ds_save_checkpoint(a, da, NULL, NULL));
    REQUIRE_OK(ds_save_checkpoint(b, db, NULL, NULL));
    ds_finalize(b);
    if (rank == 0) { /* zero_to_fp32 reads the same weights out of both */
        char oa[1300], ob[1300];
        snprintf(oa, sizeof oa, "%s/plain.safetensors", s->dir);
        snprintf(ob, sizeof ob, "%s/nvme.safetensors", s->dir);
        ds_z2f_opts o;
        ds_z2f_opts_defaults(&o);
        REQUIRE_OK(ds_zero_to_fp32(da, oa, &o, NULL));
        REQUIRE_OK(ds_zero_to_fp32(db, ob, &o, NULL));
        same_file(oa, ob);
    }
    engine_t *oa = make_engine(s, data, 1); /* swapping, loads the plain save */
    engine_t *pb = make_engine(s, data, 0); /* plain, loads the swapped save */
    off_cross_load(a, oa, pb, da, db, ia + STEPS, "nvme");

    /* ds_set_param reaches the swapped master (the next update starts from it) */
    off_set_param_step(a, oa, 0, "nvme");
    ds_finalize(pb);
    ds_finalize(oa);
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 0); /* ds_finalize removed every one */
    ds_finalize(a);
    ds_dataset_destroy(data);
    if (rank == 0 && test_fails() == 0)
        printf("stage %d %s %s: %d steps bit-identical with and without NVMe offload, "
               "checkpoints cross both ways, no swap file left\n", s->stage, s->precision,
               s->optimizer, STEPS + MORE);
    return off_finish("test_offload_nvme");
}

/* ds_initialize must fail with a message holding every needle. */
static void expect_fail(const setup *s, const ds_dataset *data, const char *path,
                        const char *extra, const ds_bert_desc *bd, const char *what,
                        const char *const *needles) {
    engine_t *e = NULL;
    ds_clear_error();
    ds_status st = try_engine(s, data, 2, path, extra, bd, &e);
    CHECK(st != DS_OK, "%s: ds_initialize succeeded", what);
    if (st == DS_OK) {
        ds_finalize(e);
        return;
    }
    const char *msg = ds_last_error();
    for (const char *const *n = needles; *n; n++)
        CHECK(strstr(msg, *n) != NULL, "%s: \"%s\" not in the message: %s", what, *n, msg);
    if (test_state_get()->rank <= 0) printf("  %s: %s\n", what, msg);
}

/* After engine b lost an offload file on rank 1: the checkpoint `before`
 * (saved by b before the loss), loaded into b, is refused while rank 1's
 * disk still cannot take the file (every rank's load fails, and b is then
 * refused naming the load), and loaded again makes the file anew: b trains
 * on bit for bit as a fresh engine loading the same checkpoint. Finalizes
 * b; no swap folder is left. */
static void reload_after_loss(const setup *s, engine_t *a, engine_t *b, const ds_dataset *data,
                              int offload, const char *before, int stage, int rank) {
    setenv("DS_FAULT_INJECT", "error:nvme:reserve:rank=1", 1);
    ds_clear_error();
    ds_status st = ds_load_checkpoint(b, before, NULL, DS_LOAD_ALL);
    unsetenv("DS_FAULT_INJECT");
    const char *msg = ds_last_error();
    CHECK(st == DS_ERR_IO && strstr(msg, "anew after") && strstr(msg, "No space left") &&
              (rank == 1 || strstr(msg, "rank 1 failed")),
          "stage %d: the load with rank 1's disk still full gave %s: %s", stage,
          ds_status_to_string(st), msg);
    if (rank == 0) printf("  stage %d, reloading while rank 1's disk is full: %s\n", stage, msg);
    ds_step_info ib[2], ic[2];
    ds_clear_error();
    st = ds_train_batch(b, &ib[0]);
    CHECK(st == DS_ERR_IO && strstr(ds_last_error(), "refused: loading") &&
              strstr(ds_last_error(), before),
          "stage %d: a step after the failed load gave %s: %s", stage, ds_status_to_string(st),
          ds_last_error());
    REQUIRE_OK(ds_load_checkpoint(b, before, NULL, DS_LOAD_ALL));
    engine_t *c = make_engine(s, data, offload);
    REQUIRE_OK(ds_load_checkpoint(c, before, NULL, DS_LOAD_ALL));
    off_train(b, 2, ib);
    off_train(c, 2, ic);
    char what[96];
    snprintf(what, sizeof what, "stage %d, reloaded after the loss vs a fresh engine", stage);
    off_same_steps(what, ib, ic, 2);
    off_same_params(what, b, c);
    ds_finalize(b);
    ds_finalize(c);
    barrier(a); /* every rank's engines gone, their folders with them */
    CHECK_EQ_I(swap_folders(s->nvme), 0);
}

/* One rank's disk fills in the middle of an update at `stage`: every rank's
 * step fails at once, the other naming the rank and its error (the ranks
 * agree before the parameters' gather, which the healthy rank would
 * otherwise wait in until comm_timeout_s); from then on training, saves and
 * evaluation are refused on every rank, since part of the partitions was
 * updated and part not. */
static void one_disk_fills(setup *s, engine_t *a, const ds_dataset *data, int stage, int rank) {
    int keep = s->stage;
    s->stage = stage;
    engine_t *b = make_engine(s, data, 2);
    ds_step_info info[2];
    off_train(b, 1, info);
    char before[1200];
    snprintf(before, sizeof before, "%s/ckpt_before_%d", s->dir, stage);
    REQUIRE_OK(ds_save_checkpoint(b, before, NULL, NULL));
    setenv("DS_FAULT_INJECT", "error:nvme:swap_write:rank=1", 1);
    ds_clear_error();
    ds_status st = ds_train_batch(b, &info[1]);
    unsetenv("DS_FAULT_INJECT");
    const char *msg = ds_last_error();
    CHECK(st == DS_ERR_IO, "stage %d, rank 1's disk full: the step returned %s (%s)", stage,
          ds_status_to_string(st), msg);
    CHECK(strstr(msg, "No space left on device") && (rank == 1 || strstr(msg, "rank 1 failed")),
          "stage %d, rank 1's disk full: %s", stage, msg);
    if (rank == 0) printf("  stage %d, rank 1's disk full, on rank 0: %s\n", stage, msg);
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/ckpt_lost", s->dir);
    const char *what[] = {"ds_forward", "ds_save_checkpoint", "ds_evaluate"};
    for (int k = 0; k < 3; k++) {
        ds_clear_error();
        if (k == 0) st = ds_train_batch(b, &info[1]);
        else if (k == 1) st = ds_save_checkpoint(b, ck, NULL, NULL);
        else {
            double loss, weight;
            ds_batch none = {.B = 0, .T = 12};
            st = ds_evaluate(b, &none, &loss, &weight);
        }
        msg = ds_last_error();
        CHECK(st == DS_ERR_IO && strstr(msg, what[k]) && strstr(msg, "refused: step 2's update "
                                                                    "failed") &&
                  strstr(msg, "load the last checkpoint"),
              "stage %d: %s after the failed update gave %s: %s", stage, what[k],
              ds_status_to_string(st), msg);
    }
    reload_after_loss(s, a, b, data, 2, before, stage, rank);
    s->stage = keep;
}

static int run_errors(setup *s) {
    s->stage = 2;
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * 4, 12, 50);
    if (!data) TEST_DIE("dataset");
    /* the plain engine is this rank's handle on the communicator */
    engine_t *a = make_engine(s, data, 0);
    int rank = ds_rank(a);
    test_set_rank(rank);
    char p[1300];

    snprintf(p, sizeof p, "%s/missing", s->dir);
    expect_fail(s, data, p, "", NULL, "missing",
                (const char *[]){p, "does not exist", "bytes", "free", NULL});

    snprintf(p, sizeof p, "%s/a_file", s->dir);
    if (rank == 0) {
        FILE *f = fopen(p, "w");
        if (f) fclose(f);
    }
    barrier(a);
    expect_fail(s, data, p, "", NULL, "not a directory",
                (const char *[]){p, "is not a directory", "bytes", "free", NULL});

    /* Not writable: a read-only folder, or, for root (whom permissions do
     * not stop), sysfs, where no one can make a folder. */
    if (geteuid() == 0) {
        snprintf(p, sizeof p, "/sys/kernel");
    } else {
        snprintf(p, sizeof p, "%s/read_only", s->dir);
        mkdir(p, 0555);
    }
    expect_fail(s, data, p, "", NULL, "not writable",
                (const char *[]){p, "not writable", "bytes", "free", NULL});

    /* No O_DIRECT: a file system without it refuses the flag with EINVAL;
     * every file system on this machine may have it (tmpfs has since Linux
     * 6.6), so the probe is told to fail as such a one does. */
    setenv("DS_FAULT_INJECT", "error:nvme:odirect", 1);
    expect_fail(s, data, s->nvme, "", NULL, "no O_DIRECT",
                (const char *[]){s->nvme, "does not support direct I/O", "bytes", "free", NULL});
    unsetenv("DS_FAULT_INJECT");

    /* Too small: a model whose Adam state (12 bytes a parameter) is twice
     * what the disk has free; the check runs before anything is allocated,
     * so the model's size costs nothing. */
    int64_t fr = ds_nvme_free_bytes(s->nvme);
    CHECK(fr > 0, "free bytes of %s: %lld", s->nvme, (long long)fr);
    int64_t want = fr / 12 * 2 * 2 + 1; /* parameters: 2x the state that fits, 2 ranks */
    ds_bert_desc big = {.vocab_size = 0, .hidden_size = 1024, .num_hidden_layers = 1,
                        .num_attention_heads = 4, .intermediate_size = 64,
                        .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = 12};
    big.vocab_size = (int)(want / 1024 < 2000000000 ? want / 1024 + 1 : 2000000000);
    expect_fail(s, data, s->nvme, "", &big, "too small",
                (const char *[]){s->nvme, "too small", "bytes", "free", NULL});
    /* Each rank's swap fits (0.75 of the free bytes), the two ranks' on
     * this host together do not (1.5): refused at start-up (each rank
     * checked its own alone, and a file system without fallocate filled in
     * the middle of the run). The margins leave room for what other tests
     * write meanwhile. */
    want = fr / 8 + 1; /* 12 bytes a parameter over 2 ranks: 0.75 fr each */
    big.vocab_size = (int)(want / 1024 < 2000000000 ? want / 1024 + 1 : 2000000000);
    if (ds_world_size(a) == 2)
        expect_fail(s, data, s->nvme, "", &big, "too small together",
                    (const char *[]){s->nvme, "too small for this host's swaps together",
                                     "bytes", "free", NULL});

    /* pipelining without the buffers for it: a config error at start-up */
    expect_fail(s, data, s->nvme, ", \"pipeline_read\": true, \"pipeline_write\": true", NULL,
                "too few buffers",
                (const char *[]){"buffer_count: 4 buffers", "give buffer_count >= 9", NULL});
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 0); /* no failed start-up left anything */

    /* A disk that fills mid-training: the step fails naming the file and
     * strerror, the swap files go at once, the checkpoint saved before is
     * intact. */
    engine_t *b = make_engine(s, data, 2);
    ds_step_info info[2];
    off_train(b, 1, info);
    char ck[1200];
    snprintf(ck, sizeof ck, "%s/ckpt", s->dir);
    REQUIRE_OK(ds_save_checkpoint(b, ck, NULL, NULL));
    size_t nsaved;
    float *saved = ck_params(b, &nsaved);
    /* A read that fails outside a step (a save reading the state) changed
     * nothing: the save fails, the swap files stay, and the save tried
     * again works (the files used to be removed, the engine lost) */
    setenv("DS_FAULT_INJECT", "error:nvme:io_read", 1);
    ds_clear_error();
    char ck_retry[1300];
    snprintf(ck_retry, sizeof ck_retry, "%s/ckpt_retry", s->dir);
    ds_status rs = ds_save_checkpoint(b, ck_retry, NULL, NULL);
    unsetenv("DS_FAULT_INJECT");
    CHECK(rs == DS_ERR_IO && strstr(ds_last_error(), "swap files are kept"),
          "a save whose read failed: %s: %s", ds_status_to_string(rs), ds_last_error());
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), ds_world_size(a)); /* b's, still there */
    CHECK_OK(ds_save_checkpoint(b, ck_retry, NULL, NULL));
    setenv("DS_FAULT_INJECT", "error:nvme:swap_write", 1);
    ds_clear_error();
    ds_status st = ds_train_batch(b, &info[1]);
    unsetenv("DS_FAULT_INJECT");
    const char *msg = ds_last_error();
    CHECK(st == DS_ERR_IO, "the step with a full disk returned %s", ds_status_to_string(st));
    CHECK(strstr(msg, "No space left on device") && strstr(msg, ".swp") &&
              strstr(msg, "swap files were removed"),
          "disk full message: %s", msg);
    if (rank == 0) printf("  disk full: %s\n", msg);
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 0); /* gone before ds_finalize */
    ds_clear_error();
    st = ds_train_batch(b, &info[1]);
    CHECK(st != DS_OK && strstr(ds_last_error(), "load the last checkpoint"),
          "a step after the loss: %s", ds_last_error());
    if (rank == 0) {
        char tag[256];
        REQUIRE_OK(ds_checkpoint_latest(ck, tag, sizeof tag));
        REQUIRE_OK(ds_checkpoint_verify(ck, tag));
    }
    /* the checkpoint, into the same engine (its swap files made anew) and a
     * fresh one: the saved weights in both, then the same steps */
    REQUIRE_OK(ds_load_checkpoint(b, ck, NULL, DS_LOAD_ALL));
    engine_t *c = make_engine(s, data, 2);
    REQUIRE_OK(ds_load_checkpoint(c, ck, NULL, DS_LOAD_ALL));
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 2 * ds_world_size(a)); /* b's again, and c's */
    for (int k = 0; k < 2; k++) {
        size_t nl;
        float *loaded = ck_params(k ? c : b, &nl);
        CHECK(nl == nsaved && memcmp(loaded, saved, nl * sizeof *loaded) == 0,
              "the checkpoint saved before the full disk does not load the saved weights into "
              "the %s engine", k ? "fresh" : "same");
        free(loaded);
    }
    free(saved);
    ds_step_info ib[2], ic[2];
    off_train(b, 2, ib);
    off_train(c, 2, ic);
    off_same_steps("disk full, reloaded in the same engine vs a fresh one", ib, ic, 2);
    off_same_params("disk full, reloaded in the same engine vs a fresh one", b, c);
    ds_finalize(b);
    ds_finalize(c);
    for (int stage = 1; stage <= 3; stage++) one_disk_fills(s, a, data, stage, rank);
    ds_finalize(a);
    ds_dataset_destroy(data);
    return off_finish("test_offload_nvme --errors");
}

/* Train until DS_FAULT_INJECT=nvme:mid_step kills this process. */
static int run_crash(setup *s) {
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * 4, 12, 50);
    if (!data) TEST_DIE("dataset");
    engine_t *e = make_engine(s, data, 1);
    ds_step_info info;
    for (int i = 0; i < 4; i++) REQUIRE_OK(ds_train_batch(e, &info));
    fprintf(stderr, "test_offload_nvme --crash: the kill point was never reached\n");
    return 1;
}

static int run_after_crash(setup *s) {
    int left = swap_folders(s->nvme);
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * 4, 12, 50);
    if (!data) TEST_DIE("dataset");
    engine_t *a = make_engine(s, data, 0);
    int rank = ds_rank(a), world = ds_world_size(a);
    test_set_rank(rank);
    /* every rank of the killed run left its folder (mpirun's SIGKILL to the
     * others is as abrupt as the kill point's) */
    CHECK(left >= 1, "the crashed run left %d swap folders", left);
    barrier(a);
    engine_t *b = make_engine(s, data, 1); /* its start-up removes them */
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), world); /* only the new engine's */
    ds_step_info ia[2], ib[2];
    off_train(a, 2, ia);
    off_train(b, 2, ib);
    off_same_steps("after cleaning a crashed run's leftovers", ia, ib, 2);
    ds_finalize(b);
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 0);
    ds_finalize(a);
    ds_dataset_destroy(data);
    if (rank == 0 && test_fails() == 0)
        printf("%d swap folder(s) of a killed run removed at the next start-up\n", left);
    return off_finish("test_offload_nvme --after-crash");
}

/* offload_param at stage 3: the same training with the parameter partition
 * in host memory or, past max_in_cpu elements, in a file; with the
 * optimizer on the device (B) and swapped to NVMe as well (C). */
/* Rank 1's parameter file fails to read (DS_FAULT_INJECT=error:nvme:param_read)
 * at stage 3 with offload_param on NVMe: rank 1 still takes part in every
 * gather (its own piece as zeros), so neither rank waits for the other.
 * In a forward: every rank's ds_train_batch fails at once, rank 0 naming
 * rank 1. In a backward (each module gathered again there,
 * stage3_max_reuse_distance 0): rank 1's ds_backward fails naming the
 * module, rank 0's goes through (the same reduce-scatters on both), and the
 * next forward fails on both, the file now gone. In an evaluation whose
 * batch rank 1 refuses as well (a token id out of range): rank 1 walks
 * through the gathers after its refusal, cannot read its piece there, and
 * every rank's message names both, the parameter file too. */
static void param_read_fails(setup *s, engine_t *a, const ds_dataset *data, int rank) {
    snprintf(g_zero_more, sizeof g_zero_more,
             ", \"stage3_max_reuse_distance\": 0, \"stage3_param_persistence_threshold\": 0,"
             " \"offload_param\": {\"device\": \"nvme\","
             " \"nvme_path\": \"%s\", \"max_in_cpu\": 1000, \"buffer_size\": 1500,"
             " \"buffer_count\": 3}", s->nvme);
    for (int phase = 0; phase < 4; phase++) {
        engine_t *d = make_engine(s, data, 0);
        ds_step_info info;
        off_train(d, 1, &info);
        char before[1200];
        snprintf(before, sizeof before, "%s/param_before_%d", s->dir, phase);
        REQUIRE_OK(ds_save_checkpoint(d, before, NULL, NULL));
        ds_status st;
        const char *where = phase == 3   ? "an evaluation of a refused batch"
                            : phase == 2 ? "an evaluation"
                            : phase      ? "a backward"
                                         : "a forward";
        if (phase == 0) {
            setenv("DS_FAULT_INJECT", "error:nvme:param_read:rank=1", 1);
            st = ds_train_batch(d, &info);
            unsetenv("DS_FAULT_INJECT");
        } else if (phase >= 2) { /* rank 0 would compute with rank 1's zeros */
            ds_host_batch hb;
            REQUIRE_OK(ds_host_batch_alloc(&hb, data, ds_get_model(d), 4));
            size_t rows[4];
            for (int k = 0; k < 4; k++) rows[k] = (size_t)(rank * 4 + k);
            REQUIRE_OK(ds_host_batch_fill(&hb, data, rows, 4));
            if (phase == 3 && rank == 1) /* ck_make_data's vocabulary is 50 */
                for (int i = 0; i < hb.batch.n; i++)
                    if (!strcmp(hb.batch.t[i].name, "input_ids"))
                        ((int32_t *)hb.batch.t[i].data)[3] = 9999;
            double loss, weight;
            setenv("DS_FAULT_INJECT", "error:nvme:param_read:rank=1", 1);
            st = ds_evaluate(d, &hb.batch, &loss, &weight);
            unsetenv("DS_FAULT_INJECT");
            ds_host_batch_free(&hb);
        } else {
            ds_host_batch hb;
            REQUIRE_OK(ds_host_batch_alloc(&hb, data, ds_get_model(d), 4));
            size_t rows[4];
            for (int k = 0; k < 4; k++) rows[k] = (size_t)(rank * 4 + k);
            REQUIRE_OK(ds_host_batch_fill(&hb, data, rows, 4));
            float loss;
            REQUIRE_OK(ds_forward(d, &hb.batch, &loss));
            setenv("DS_FAULT_INJECT", "error:nvme:param_read:rank=1", 1);
            st = ds_backward(d);
            unsetenv("DS_FAULT_INJECT");
            CHECK(rank == 1 ? st == DS_ERR_IO && strstr(ds_last_error(), "the parameters of")
                            : st == DS_OK,
                  "rank %d's backward with rank 1's file failing: %s: %s", rank,
                  ds_status_to_string(st), ds_last_error());
            if (rank == 1) printf("  rank 1's backward: %s\n", ds_last_error());
            REQUIRE_OK(ds_step(d)); /* not a boundary: two micro-batches a step */
            st = ds_forward(d, &hb.batch, &loss);
            ds_host_batch_free(&hb);
        }
        const char *msg = ds_last_error();
        if (phase < 3)
            CHECK(st == DS_ERR_IO && strstr(msg, "params.swp") &&
                      (rank == 1 || strstr(msg, "rank 1 failed")),
                  "rank 1's parameter file failing in %s: rank %d got %s: %s", where, rank,
                  ds_status_to_string(st), msg);
        else /* the refusal is rank 1's status; both causes are in every message */
            CHECK(st == DS_ERR_INVALID_ARG && strstr(msg, "9999") && strstr(msg, "params.swp") &&
                      (rank == 1 || strstr(msg, "rank 1 failed")),
                  "rank 1's batch refused and its parameter file failing in %s: rank %d got "
                  "%s: %s", where, rank, ds_status_to_string(st), msg);
        if (rank == 0) printf("  rank 1's parameter file failing in %s, on rank 0: %s\n",
                              where, msg);
        reload_after_loss(s, a, d, data, 0, before, 3, rank);
    }
    g_zero_more[0] = '\0';
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 0);
}

static int run_param(setup *s, const char *device) {
    s->stage = 3;
    bool nvme = !strcmp(device, "nvme");
    ds_dataset *data = ck_make_data(GLOBAL_BATCH * (STEPS + MORE), 12, 50);
    if (!data) TEST_DIE("dataset");
    ds_step_info ia[STEPS + MORE], ib[STEPS], ic[STEPS];
    engine_t *a = make_engine(s, data, 0);
    int rank = ds_rank(a), world = ds_world_size(a);
    test_set_rank(rank);
    /* nvme: 1000 elements in host memory, the rest (~10 K) in the file,
     * moved through 3 buffers of 1500 elements: many chunks, edges that cut
     * 4 KiB blocks */
    if (nvme)
        snprintf(g_zero_more, sizeof g_zero_more,
                 ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\","
                 " \"max_in_cpu\": 1000, \"buffer_size\": 1500, \"buffer_count\": 3,"
                 " \"pin_memory\": true}", s->nvme);
    else
        snprintf(g_zero_more, sizeof g_zero_more,
                 ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}");
    engine_t *b = make_engine(s, data, 0);
    engine_t *c = make_engine(s, data, 1);
    g_zero_more[0] = '\0';
    ds_mem_report ra, rb, rc, rb2;
    ds_memory_report(a, &ra);
    ds_memory_report(b, &rb);
    ds_memory_report(c, &rc);
    uint64_t pbytes = B(ra, DS_MEM_PARAMS, DS_PLACE_DEVICE);
    for (int k = 0; k < 2; k++) { /* the partition left the device, nothing of it is lost */
        const ds_mem_report *r = k ? &rc : &rb;
        uint64_t pdev = B(*r, DS_MEM_PARAMS, DS_PLACE_DEVICE);
        uint64_t phost = B(*r, DS_MEM_PARAMS, DS_PLACE_HOST);
        uint64_t pnvme = B(*r, DS_MEM_PARAMS, DS_PLACE_NVME);
        /* the device keeps only stage 3's persistent small modules */
        CHECK(pdev < pbytes && pdev + phost + pnvme == pbytes,
              "offload_param %s: params device %llu host %llu nvme %llu, plain %llu", device,
              (unsigned long long)pdev, (unsigned long long)phost, (unsigned long long)pnvme,
              (unsigned long long)pbytes);
        CHECK(nvme ? pnvme > 0 && phost > 0 : pnvme == 0,
              "offload_param %s: %llu bytes at host, %llu at nvme", device,
              (unsigned long long)phost, (unsigned long long)pnvme);
    }
    off_train(a, STEPS, ia);
    off_train(b, STEPS, ib);
    off_train(c, STEPS, ic);
    ds_memory_report(b, &rb2);
    off_check_no_growth("offload_param steps", &rb, &rb2);
    off_same_steps("offload_param vs none", ia, ib, STEPS);
    off_same_steps("offload_param + nvme optimizer vs none", ia, ic, STEPS);
    off_same_params("offload_param vs none", a, b);
    off_same_params("offload_param + nvme optimizer vs none", a, c);
    if (nvme) {
        barrier(a);
        CHECK_EQ_I(swap_folders(s->nvme), 3 * world); /* b's params, c's params and state */
    }
    /* checkpoints: the offloaded engine saves, a plain one loads, and back */
    char da[1200], db[1200];
    snprintf(da, sizeof da, "%s/plain", s->dir);
    snprintf(db, sizeof db, "%s/param_ckpt", s->dir);
    REQUIRE_OK(ds_save_checkpoint(a, da, NULL, NULL));
    REQUIRE_OK(ds_save_checkpoint(c, db, NULL, NULL));
    ds_finalize(c);
    engine_t *pb = make_engine(s, data, 0);
    off_cross_load(a, b, pb, da, db, ia + STEPS, "offload_param"); /* b continues from a's save */
    /* ds_set_param reaches the stored partition */
    off_set_param_step(a, b, 1, "offload_param");
    ds_finalize(pb);
    ds_finalize(b);
    barrier(a);
    CHECK_EQ_I(swap_folders(s->nvme), 0);
    if (nvme && world > 1) param_read_fails(s, a, data, rank);
    ds_finalize(a);
    ds_dataset_destroy(data);
    if (rank == 0 && test_fails() == 0)
        printf("stage 3 %s, offload_param %s: bit-identical with and without, with the "
               "optimizer on the device and swapped; checkpoints both ways\n", s->precision,
               device);
    return off_finish("test_offload_nvme --param");
}

int main(int argc, char **argv) {
    setup s = {.stage = 2, .precision = "fp32", .optimizer = "AdamW"};
    const char *mode = "equiv";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--errors")) mode = "errors";
        else if (!strcmp(argv[i], "--crash")) mode = "crash";
        else if (!strcmp(argv[i], "--after-crash")) mode = "after-crash";
        else if (i + 1 < argc && !strcmp(argv[i], "--param")) mode = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--stage")) s.stage = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--precision")) s.precision = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--optimizer")) s.optimizer = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--dir")) s.dir = argv[++i];
        else {
            fprintf(stderr, "test_offload_nvme: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!s.dir) {
        fprintf(stderr, "test_offload_nvme: --dir is required\n");
        return 2;
    }
    /* the swap folder: made here (every rank; mkdir of an existing one is fine) */
    mkdir(s.dir, 0755);
    snprintf(s.nvme, sizeof s.nvme, "%s/nvme", s.dir);
    mkdir(s.nvme, 0755);
    if (!strcmp(mode, "errors")) return run_errors(&s);
    if (!strcmp(mode, "crash")) return run_crash(&s);
    if (!strcmp(mode, "after-crash")) return run_after_crash(&s);
    if (!strcmp(mode, "cpu") || !strcmp(mode, "nvme")) return run_param(&s, mode);
    return run_equiv(&s);
}
