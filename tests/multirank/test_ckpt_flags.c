/* Loading flags and refusals, in one process group (run at 2 ranks):
 *
 *   run A trains 3 steps, saves, trains a 4th step (loss4, lr4, params4);
 *   - DS_LOAD_ALL into a fresh engine: the next step is A's 4th, bit for bit
 *     (loss, lr, parameters after); also into A itself after its 4th step
 *     (rewinding a trained engine: moments, counters and data position are
 *     overwritten, not merged);
 *   - DS_LOAD_MODULE_ONLY: the weights are A's at the save, the step counter
 *     and schedule start afresh (step 1, A's first lr);
 *   - DS_LOAD_NO_OPTIMIZER: counters, data position and schedule are restored
 *     (the loss and lr of the next step are A's 4th), the optimizer starts
 *     afresh (the parameters after it differ from A's);
 *   - DS_LOAD_NO_SCHEDULER: the schedule starts afresh (A's first lr) while
 *     the loss of the next step is still A's 4th;
 *   - refusals that leave the engine untouched (parameters compared bit for
 *     bit before and after): a missing tag, another model, an optimizer with
 *     another number of moments (and the same with DS_LOAD_NO_OPTIMIZER,
 *     which then loads), unknown flags, a corrupted frame in rank 1's file
 *     (every rank returns the error naming that file);
 *   - save refusals: a bad tag, client state that is not JSON, a save in the
 *     middle of gradient accumulation;
 *   - at every stage, a load into an engine in the middle of an accumulation
 *     window (one micro-batch's forward, backward and step of two): the next
 *     step is the saving run's, bit for bit (the gradients of that micro-batch
 *     are gone: at stages 2 and 3 the backward's last bucket, still open,
 *     was added into the step after the load). */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "tests/unit/test_util.h"

static int rank;
static char dir[512];

static engine_t *fresh(const ck_setup *s, const ds_dataset *data) {
    engine_t *e;
    if (ck_engine(s, data, &e) != DS_OK) TEST_DIE("engine");
    return e;
}

static ds_step_info step(engine_t *e) {
    ds_step_info info;
    if (ds_train_batch(e, &info) != DS_OK) TEST_DIE("train");
    return info;
}

static bool same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * 4); }

/* A refused load must leave the parameters as they were. */
static void expect_refused(engine_t *e, const char *tag, unsigned flags, ds_status want,
                           const char *needle, const char *what) {
    size_t n;
    float *before = ck_params(e, &n);
    ds_status st = ds_load_checkpoint(e, dir, tag, flags);
    CHECK(st == want, "%s: %s, want %s (%s)", what, ds_status_to_string(st),
          ds_status_to_string(want), ds_last_error());
    CHECK(strstr(ds_last_error(), needle), "%s: message \"%s\" lacks \"%s\"", what,
          ds_last_error(), needle);
    float *after = ck_params(e, &n);
    CHECK(same(before, after, n), "%s: the refused load changed parameters", what);
    free(before);
    free(after);
}

/* Rank 0 copies DIR/FROM to DIR/TO and flips a byte inside the last frame of
 * rank 1's file (moment1; with 1-bit Adam, its rank state). */
static void make_corrupt_copy(engine_t *e, const char *from, const char *to) {
    if (rank == 0) {
        char src[1024], dst[1024], cmd[3200];
        snprintf(src, sizeof src, "%s/%s", dir, from);
        snprintf(dst, sizeof dst, "%s/%s", dir, to);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
        if (system(cmd) != 0) TEST_DIE("copying the checkpoint");
        char f[1100];
        snprintf(f, sizeof f, "%s/shard-00001-of-00002.dsck", dst);
        int fd = open(f, O_RDWR);
        off_t size = lseek(fd, 0, SEEK_END);
        uint64_t index_off;
        pread(fd, &index_off, 8, size - 32);
        unsigned char c;
        pread(fd, &c, 1, (off_t)index_off - 5);
        c ^= 0xff;
        pwrite(fd, &c, 1, (off_t)index_off - 5);
        close(fd);
    }
    ds_all_reduce_host(e, &(int64_t){0}, 1, DS_I64); /* the others wait for the copy */
}

/* One micro-batch of the two a step takes (rows first..first+3 of the
 * data): forward, backward, step; hb stays allocated for more. */
static void half_step(engine_t *e, const ds_dataset *data, size_t first, ds_host_batch *hb) {
    *hb = (ds_host_batch){0};
    if (ds_host_batch_alloc(hb, data, ds_get_model(e), 4) != DS_OK) TEST_DIE("batch");
    size_t idx[4] = {first, first + 1, first + 2, first + 3};
    ds_host_batch_fill(hb, data, idx, CK_GLOBAL_BATCH / CK_GAS / ds_world_size(e));
    if (ds_forward(e, &hb->batch, NULL) != DS_OK || ds_backward(e) != DS_OK || ds_step(e) != DS_OK)
        TEST_DIE("half a step");
}

/* A loads into B after B took one micro-batch of a two-micro-batch step;
 * B's next step must be the saving run's (see the top). */
static void load_mid_window(const ds_dataset *data, int stage) {
    ck_setup s;
    ck_setup_defaults(&s);
    s.model = "mlp"; /* its backward leaves a bucket open at its end */
    s.stage = stage;
    char wdir[600];
    snprintf(wdir, sizeof wdir, "%s/window", dir);
    engine_t *a = fresh(&s, data);
    step(a);
    step(a);
    if (ds_save_checkpoint(a, wdir, NULL, NULL) != DS_OK) TEST_DIE("save");
    ds_step_info a3 = step(a);
    size_t n;
    float *p3 = ck_params(a, &n);
    ds_finalize(a);
    engine_t *b = fresh(&s, data);
    ds_host_batch hb;
    half_step(b, data, 5, &hb);
    ds_host_batch_free(&hb);
    CHECK(ds_load_checkpoint(b, wdir, NULL, DS_LOAD_ALL) == DS_OK, "stage %d: load: %s", stage,
          ds_last_error());
    ds_step_info i = step(b);
    float *q = ck_params(b, &n);
    CHECK(i.step == 3 && i.loss == a3.loss && same(q, p3, n),
          "stage %d, a load half-way through a step: step %lld loss %.9g vs %.9g, params %s",
          stage, (long long)i.step, i.loss, a3.loss, same(q, p3, n) ? "equal" : "differ");
    free(q);
    free(p3);
    ds_finalize(b);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/tests/ckpt_flags", DS_BINARY_DIR);
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    s.model = "bert"; /* dropout 0.1: the dropout stream must follow the counters */
    s.stage = 2;
    engine_t *a = fresh(&s, data);
    rank = ds_rank(a);
    test_set_rank(rank);
    if (rank == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) TEST_DIE("cleaning");
    }
    ds_step_info a1 = step(a);
    step(a);
    step(a);
    if (ds_save_checkpoint(a, dir, NULL, "{\"note\": \"flags\"}") != DS_OK) TEST_DIE("save");
    size_t n;
    float *p3 = ck_params(a, &n);
    ds_step_info a4 = step(a);
    float *p4 = ck_params(a, &n);

    /* everything, into a fresh engine */
    engine_t *e = fresh(&s, data);
    CHECK(ds_load_checkpoint(e, dir, NULL, DS_LOAD_ALL) == DS_OK, "load: %s", ds_last_error());
    CHECK(ds_global_step(e) == 3, "global step %lld", (long long)ds_global_step(e));
    ds_step_info i = step(e);
    float *q = ck_params(e, &n);
    CHECK(i.step == 4 && i.loss == a4.loss && i.lr == a4.lr && same(q, p4, n),
          "DS_LOAD_ALL: step %lld loss %.9g lr %.9g vs %.9g %.9g, params %s", (long long)i.step,
          i.loss, i.lr, a4.loss, a4.lr, same(q, p4, n) ? "equal" : "differ");
    free(q);
    ds_finalize(e);

    /* into A itself, after its 4th step: rewinds it */
    CHECK(ds_load_checkpoint(a, dir, "global_step3", DS_LOAD_ALL) == DS_OK, "rewind: %s",
          ds_last_error());
    i = step(a);
    q = ck_params(a, &n);
    CHECK(i.step == 4 && i.loss == a4.loss && same(q, p4, n),
          "rewound engine: step %lld loss %.9g vs %.9g, params %s", (long long)i.step, i.loss,
          a4.loss, same(q, p4, n) ? "equal" : "differ");
    free(q);

    /* module only */
    e = fresh(&s, data);
    CHECK(ds_load_checkpoint(e, dir, NULL, DS_LOAD_MODULE_ONLY) == DS_OK, "module only: %s",
          ds_last_error());
    q = ck_params(e, &n);
    CHECK(same(q, p3, n), "module only: weights differ from the saved ones");
    free(q);
    CHECK(ds_global_step(e) == 0, "module only: global step %lld", (long long)ds_global_step(e));
    i = step(e);
    CHECK(i.step == 1 && i.lr == a1.lr, "module only: step %lld lr %.9g, want 1 and %.9g",
          (long long)i.step, i.lr, a1.lr);
    ds_finalize(e);

    /* no optimizer */
    e = fresh(&s, data);
    CHECK(ds_load_checkpoint(e, dir, NULL, DS_LOAD_NO_OPTIMIZER) == DS_OK, "no optimizer: %s",
          ds_last_error());
    i = step(e);
    q = ck_params(e, &n);
    CHECK(i.step == 4 && i.loss == a4.loss && i.lr == a4.lr,
          "no optimizer: step %lld loss %.9g lr %.9g, want 4 %.9g %.9g", (long long)i.step,
          i.loss, i.lr, a4.loss, a4.lr);
    CHECK(!same(q, p4, n), "no optimizer: fresh moments should give other parameters");
    free(q);
    ds_finalize(e);

    /* no scheduler */
    e = fresh(&s, data);
    CHECK(ds_load_checkpoint(e, dir, NULL, DS_LOAD_NO_SCHEDULER) == DS_OK, "no scheduler: %s",
          ds_last_error());
    i = step(e);
    CHECK(i.step == 4 && i.loss == a4.loss && i.lr == a1.lr,
          "no scheduler: step %lld loss %.9g lr %.9g, want 4 %.9g %.9g", (long long)i.step,
          i.loss, i.lr, a4.loss, a1.lr);
    ds_finalize(e);

    /* refusals */
    e = fresh(&s, data);
    expect_refused(e, "nope", DS_LOAD_ALL, DS_ERR_IO, "nope", "missing tag");
    expect_refused(e, NULL, 1u << 7, DS_ERR_INVALID_ARG, "unknown flags", "unknown flags");
    make_corrupt_copy(e, "global_step3", "bad");
    expect_refused(e, "bad", DS_LOAD_ALL, DS_ERR_CORRUPT, "shard-00001-of-00002.dsck",
                   "corrupted frame");
    CHECK(strstr(ds_last_error(), "checksum"), "corrupted frame: \"%s\"", ds_last_error());
    /* ranks naming different checkpoints (the last rank "bad", the others
     * "global_step3": each would have loaded its own): refused on every
     * rank, both named, nothing changed */
    int world = ds_world_size(e);
    expect_refused(e, rank == world - 1 ? "bad" : "global_step3", DS_LOAD_ALL,
                   DS_ERR_INVALID_ARG, "names checkpoint \"bad\", rank 0 \"global_step3\"",
                   "ranks naming different tags");
    ds_finalize(e);

    ck_setup other = s;
    other.model = "mlp";
    e = fresh(&other, data);
    expect_refused(e, NULL, DS_LOAD_ALL, DS_ERR_INVALID_ARG, "this model has", "another model");
    ds_finalize(e);

    ck_setup sgd = s;
    sgd.optimizer = "SGD";
    e = fresh(&sgd, data);
    expect_refused(e, NULL, DS_LOAD_ALL, DS_ERR_INVALID_ARG, "DS_LOAD_NO_OPTIMIZER",
                   "SGD engine, AdamW checkpoint");
    CHECK(ds_load_checkpoint(e, dir, NULL, DS_LOAD_NO_OPTIMIZER) == DS_OK,
          "SGD with DS_LOAD_NO_OPTIMIZER: %s", ds_last_error());
    q = ck_params(e, &n);
    CHECK(same(q, p3, n), "SGD with DS_LOAD_NO_OPTIMIZER: weights differ");
    free(q);
    ds_finalize(e);

    /* save refusals */
    CHECK(ds_save_checkpoint(a, dir, "a/b", NULL) == DS_ERR_INVALID_ARG, "tag with a slash");
    CHECK(ds_save_checkpoint(a, dir, "x.tmp", NULL) == DS_ERR_INVALID_ARG, "tag .tmp");
    CHECK(ds_save_checkpoint(a, dir, NULL, "{\"a\": }") == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "client_state"),
          "bad client JSON: %s", ds_last_error());
    /* a bad argument on one rank only (its own client state, its own
     * DS_CKPT_FRAME_ELEMS): every rank refuses, none waits in the save's
     * first agreement for the one that returned (it hung there until
     * comm_timeout_s) */
    int last = ds_world_size(a) - 1;
    ds_status bs = ds_save_checkpoint(a, dir, "one_bad", rank == last ? "{\"a\": }" : NULL);
    CHECK(bs == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "client_state"),
          "bad client JSON on rank %d only: %s: %s", last, ds_status_to_string(bs),
          ds_last_error());
    if (rank == last) setenv("DS_CKPT_FRAME_ELEMS", "5", 1);
    bs = ds_save_checkpoint(a, dir, "one_bad", NULL);
    unsetenv("DS_CKPT_FRAME_ELEMS");
    CHECK(bs == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "DS_CKPT_FRAME_ELEMS"),
          "DS_CKPT_FRAME_ELEMS on rank %d only: %s: %s", last, ds_status_to_string(bs),
          ds_last_error());
    /* tags that differ between ranks */
    bs = ds_save_checkpoint(a, dir, rank == last ? "tag_b" : "tag_a", NULL);
    CHECK(bs == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "\"tag_b\", rank 0 \"tag_a\""),
          "tags differing between ranks: %s: %s", ds_status_to_string(bs), ds_last_error());
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/one_bad", dir);
    CHECK(access(probe, F_OK) != 0, "a refused save left %s", probe);
    ds_host_batch hb;
    half_step(a, data, 0, &hb);
    CHECK(ds_save_checkpoint(a, dir, "mid", NULL) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "inside a step"),
          "save between micro-batches: %s", ds_last_error());
    struct stat st;
    char mid[1024];
    snprintf(mid, sizeof mid, "%s/mid", dir);
    CHECK(stat(mid, &st) != 0, "a refused save left %s", mid);
    /* the step completed; then between the next micro-batch's backward and
     * its ds_step, where no micro-batch is counted as accumulated yet: the
     * counters already hold it, its gradients are not applied */
    if (ds_forward(a, &hb.batch, NULL) != DS_OK || ds_backward(a) != DS_OK ||
        ds_step(a) != DS_OK || ds_forward(a, &hb.batch, NULL) != DS_OK || ds_backward(a) != DS_OK)
        TEST_DIE("a step and a half");
    CHECK(ds_save_checkpoint(a, dir, "mid", NULL) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "a backward awaits its ds_step"),
          "save between ds_backward and ds_step: %s", ds_last_error());
    CHECK(stat(mid, &st) != 0, "a refused save left %s", mid);
    CHECK(ds_step(a) == DS_OK, "the step after a refused save: %s", ds_last_error());
    ds_host_batch_free(&hb);

    /* (last: its save becomes DIR/latest) 1-bit Adam: the rank's own state (its error feedback, the shard's last
     * section) is verified with the rest, before the load changes anything */
    ck_setup ob = s;
    ob.stage = 0;
    ob.optimizer = "OneBitAdam";
    ob.optim_params = ", \"freeze_step\": 2";
    e = fresh(&ob, data);
    step(e);
    step(e);
    step(e);
    if (ds_save_checkpoint(e, dir, "onebit", NULL) != DS_OK) TEST_DIE("1-bit save");
    ds_finalize(e);
    e = fresh(&ob, data);
    make_corrupt_copy(e, "onebit", "onebit_bad");
    expect_refused(e, "onebit_bad", DS_LOAD_ALL, DS_ERR_CORRUPT, "shard-00001-of-00002.dsck",
                   "a corrupted 1-bit rank state");
    CHECK(ds_load_checkpoint(e, dir, "onebit", DS_LOAD_ALL) == DS_OK,
          "the 1-bit checkpoint itself: %s", ds_last_error());
    ds_finalize(e);

    for (int stage = 0; stage <= 3; stage++) load_mid_window(data, stage);

    ds_finalize(a);
    free(p3);
    free(p4);
    ds_dataset_destroy(data);
    return test_finish("test_ckpt_flags");
}
