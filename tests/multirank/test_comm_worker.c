/* The communication thread's FIFO (engine/comm/comm_worker.h), threaded and
 * inline, at 1 and 2 ranks:
 *
 * - a gated job holds the jobs queued behind it until opened, and runs
 *   before them;
 * - a wait on a closed gate opens it, forced;
 * - destroying the worker with a closed gate in the queue drops the gate
 *   and every job behind it (no collective starts that the peers, in their
 *   next forward, would meet with the gated one), while jobs with no gate in
 *   front of them still run;
 * - after a failure, later jobs and the drain report the first failure's
 *   status and message, and run nothing.
 * Every check is on what ran and in which order (flags and buffer values),
 * never on a timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/comm/comm_worker.h"
#include "tests/unit/test_util.h"

enum { N = 64 };

typedef struct probe {
    int ran;         /* times fn ran */
    int order;       /* the sequence number it ran at */
    const int *seen; /* another probe's `ran`, read when this one runs */
    int seen_then;
    ds_status fail;  /* returned (with a message) instead of DS_OK */
} probe;

static int g_seq;

static ds_status probe_fn(void *arg) {
    probe *p = arg;
    p->ran++;
    p->order = ++g_seq;
    if (p->seen) p->seen_then = *p->seen;
    if (p->fail != DS_OK) return DS_ERR(p->fail, "probe failed on purpose");
    return DS_OK;
}

static ds_comm_job fn_job(probe *p, bool gated) {
    return (ds_comm_job){.kind = DS_JOB_FN, .fn = probe_fn, .arg = p, .gated = gated};
}

/* A gated job runs when opened, before the job queued behind it. */
static void gate_orders(ds_comm *c, bool threaded) {
    ds_comm_worker *w = NULL;
    REQUIRE_OK(ds_comm_worker_create(c, threaded, &w));
    probe g = {0}, f = {0};
    g.seen = &f.ran; /* f must not have run when g runs */
    ds_comm_job jg = fn_job(&g, true), jf = fn_job(&f, false);
    REQUIRE_OK(ds_comm_job_submit(w, &jg));
    REQUIRE_OK(ds_comm_job_submit(w, &jf));
    CHECK_OK(ds_comm_job_open(w, &jg));
    CHECK_OK(ds_comm_job_wait(w, &jf));
    CHECK_OK(ds_comm_job_wait(w, &jg));
    CHECK_EQ_I(g.ran, 1);
    CHECK_EQ_I(f.ran, 1);
    if (threaded) { /* inline, f ran at its submission: nothing queues */
        CHECK(g.seen_then == 0, "the job behind the gate ran before the gate was opened");
        CHECK(g.order < f.order, "gate ran %d-th, the job behind it %d-th", g.order, f.order);
    }
    CHECK(!jg.forced, "opened by ds_comm_job_open, yet marked forced");
    ds_comm_worker_destroy(w);
}

/* A wait on a closed gate opens it. */
static void wait_forces(ds_comm *c, bool threaded) {
    ds_comm_worker *w = NULL;
    REQUIRE_OK(ds_comm_worker_create(c, threaded, &w));
    probe g = {0};
    ds_comm_job jg = fn_job(&g, true);
    REQUIRE_OK(ds_comm_job_submit(w, &jg));
    CHECK_OK(ds_comm_job_wait(w, &jg));
    CHECK_EQ_I(g.ran, 1);
    CHECK(jg.forced, "a wait opened the gate, yet it is not marked forced");
    ds_comm_worker_destroy(w);
}

/* Destroying with a closed gate queued: the gate and everything behind it
 * (here a real all-gather) are dropped; jobs in front of it run. */
static void destroy_drops_behind_gate(ds_comm *c, bool threaded) {
    ds_comm_worker *w = NULL;
    REQUIRE_OK(ds_comm_worker_create(c, threaded, &w));
    float *buf = malloc((size_t)N * (size_t)c->world * sizeof *buf);
    size_t *counts = malloc((size_t)c->world * sizeof *counts);
    if (!buf || !counts) TEST_DIE("out of memory");
    for (int r = 0; r < c->world; r++) counts[r] = N;
    for (int i = 0; i < N * c->world; i++) buf[i] = -1.0f; /* the other blocks stay -1 if dropped */
    for (int i = 0; i < N; i++) buf[c->rank * N + i] = (float)(c->rank + 1);
    probe before = {0}, g = {0}, after = {0};
    ds_comm_job jb = fn_job(&before, false), jg = fn_job(&g, true), jf = fn_job(&after, false);
    ds_comm_job ja = {.kind = DS_JOB_ALL_GATHERV, .buf = buf, .counts = counts, .t = DS_F32};
    REQUIRE_OK(ds_comm_job_submit(w, &jb));
    REQUIRE_OK(ds_comm_job_submit(w, &jg));
    REQUIRE_OK(ds_comm_job_submit(w, &ja));
    REQUIRE_OK(ds_comm_job_submit(w, &jf));
    ds_comm_worker_destroy(w);
    CHECK_EQ_I(before.ran, 1);
    CHECK_EQ_I(g.ran, 0);
    if (threaded) {
        /* before the fix the jobs behind the gate ran at teardown */
        CHECK(after.ran == 0, "a job queued behind a dropped gate ran at teardown");
        int gathered = 0;
        for (int r = 0; r < c->world; r++)
            if (r != c->rank && buf[r * N] != -1.0f) gathered = 1;
        CHECK(!gathered, "the all-gather queued behind a dropped gate ran at teardown");
        CHECK(jf.done && ja.done && jg.done, "a dropped job is not marked done");
    } else { /* inline: the jobs behind it ran at their submission */
        CHECK_EQ_I(after.ran, 1);
        for (int r = 0; r < c->world; r++)
            CHECK(buf[r * N + N - 1] == (float)(r + 1), "inline all-gather: block %d is %g", r,
                  (double)buf[r * N + N - 1]);
    }
    free(buf);
    free(counts);
}

/* After a failure: later jobs and the drain fail with the first message. */
static void failure_first_message(ds_comm *c, bool threaded) {
    ds_comm_worker *w = NULL;
    REQUIRE_OK(ds_comm_worker_create(c, threaded, &w));
    probe bad = {.fail = DS_ERR_DATA}, later = {0};
    ds_comm_job jb = fn_job(&bad, false), jl = fn_job(&later, false);
    snprintf(jb.what, sizeof jb.what, "the probe job");
    REQUIRE_OK(ds_comm_job_submit(w, &jb));
    REQUIRE_OK(ds_comm_job_submit(w, &jl));
    ds_status st = ds_comm_job_wait(w, &jl);
    CHECK(st == DS_ERR_DATA, "the job after a failure: %s, want DS_ERR_DATA", ds_status_to_string(st));
    CHECK(strstr(ds_last_error(), "probe failed on purpose") &&
              strstr(ds_last_error(), "the probe job"),
          "the job after a failure says \"%s\"", ds_last_error());
    CHECK_EQ_I(later.ran, 0);
    st = ds_comm_worker_drain(w);
    CHECK(st == DS_ERR_DATA, "drain after a failure: %s", ds_status_to_string(st));
    CHECK(ds_comm_job_wait(w, &jb) == DS_ERR_DATA, "the failed job's own wait");
    ds_comm_worker_destroy(w);
}

int main(void) {
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI};
    REQUIRE_OK(ds_comm_create(&d, &c));
    test_set_rank(c->rank);
    for (int threaded = 1; threaded >= 0; threaded--) {
        gate_orders(c, threaded);
        wait_forces(c, threaded);
        destroy_drops_behind_gate(c, threaded);
        failure_first_message(c, threaded);
    }
    ds_comm_destroy(c);
    return test_finish("test_comm_worker");
}
