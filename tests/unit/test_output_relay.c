/* engine-run's output relay (tools/common/output_relay.h) on streams shaped
 * like what mpirun --tag-output writes, checked byte for byte:
 *   - tags removed, each rank's partial writes reassembled into its own
 *     lines, also when a tag is cut across two reads (fed byte by byte);
 *   - a stderr line every rank prints shows once; the same rank printing it
 *     again shows again; "X: rank 1 failed with DS_ERR_IO: M" (what the
 *     ranks that did not fail say) and rank 1's own "X: M" are one error;
 *     stdout lines are never merged;
 *   - mpirun's failure banners (MPI_Abort, a non-zero exit, a signal, an exit
 *     without MPI_Finalize) become one line naming the rank; the "Primary job
 *     terminated normally" preface disappears; a banner it does not know
 *     passes whole; mpirun's failed show_help line is dropped, its other
 *     one-line messages pass;
 *   - a partial line is printed after it waited half a second, and what is
 *     still held at the end is printed with a newline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/test_util.h"
#include "tools/common/output_relay.h"

/* A relay writing into two temporary files. */
typedef struct sink {
    FILE *out, *err;
    er_relay *r;
} sink;

static void sink_open(sink *s, int np) {
    s->out = tmpfile();
    s->err = tmpfile();
    if (!s->out || !s->err) TEST_DIE("tmpfile");
    s->r = er_relay_create(np, fileno(s->out), fileno(s->err));
    if (!s->r) TEST_DIE("er_relay_create");
}

/* Everything written to f, as a string (caller frees). */
static char *slurp(FILE *f) {
    long n = lseek(fileno(f), 0, SEEK_END);
    char *buf = calloc((size_t)n + 1, 1);
    if (!buf || pread(fileno(f), buf, (size_t)n, 0) != n) TEST_DIE("reading back the output");
    return buf;
}

/* Finish the relay and compare both outputs with what is wanted. */
static void expect(sink *s, const char *name, const char *want_out, const char *want_err) {
    er_relay_finish(s->r);
    er_relay_destroy(s->r);
    char *out = slurp(s->out), *err = slurp(s->err);
    CHECK(strcmp(out, want_out) == 0, "%s: stdout\n--- got ---\n%s--- want ---\n%s", name, out,
          want_out);
    CHECK(strcmp(err, want_err) == 0, "%s: stderr\n--- got ---\n%s--- want ---\n%s", name, err,
          want_err);
    free(out);
    free(err);
    fclose(s->out);
    fclose(s->err);
}

static void feed(sink *s, int from_err, const char *text) {
    er_relay_feed(s->r, from_err, text, strlen(text));
}

/* The same text one byte per read: every tag is cut somewhere. */
static void feed_bytes(sink *s, int from_err, const char *text) {
    for (const char *c = text; *c; c++) er_relay_feed(s->r, from_err, c, 1);
}

static const char *const k_dash =
    "--------------------------------------------------------------------------\n";

static void test_lines(void) {
    /* as mpirun wrote it for two ranks printing "err partial " and, 0.1 s
     * later, "rest R\nsecond\n" (seen with Open MPI 4.1) */
    static const char k_err[] = "[1,0]<stderr>:err partial [1,1]<stderr>:err partial "
                                "[1,0]<stderr>:rest 0\n[1,0]<stderr>:second\n"
                                "[1,1]<stderr>:rest 1\n[1,1]<stderr>:second\n";
    static const char k_out[] = "[1,0]<stdout>:out line\n[1,1]<stdout>:out line\n"
                                "[1,1]<stdout>:[zero-engine] [x] not a tag\n";
    static const char k_want_err[] = "err partial rest 0\nsecond\nerr partial rest 1\n";
    static const char k_want_out[] = "out line\nout line\n[zero-engine] [x] not a tag\n";
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        sink s;
        sink_open(&s, 2);
        if (bytewise) {
            feed_bytes(&s, 1, k_err);
            feed_bytes(&s, 0, k_out);
        } else {
            feed(&s, 1, k_err);
            feed(&s, 0, k_out);
        }
        /* "second" from rank 1 repeats rank 0's line: shown once; stdout
         * keeps both ranks' "out line" */
        expect(&s, bytewise ? "lines, byte by byte" : "lines", k_want_out, k_want_err);
    }
}

static void test_once(void) {
    sink s;
    sink_open(&s, 4);
    for (int r = 0; r < 4; r++) {
        char line[160];
        snprintf(line, sizeof line, "[7,%d]<stderr>:train_cls: ds_initialize: c.json: "
                 "zero_optimization.stage: must be 0..3, got 4\n", r);
        feed(&s, 1, line);
    }
    /* rank 2 twice in a row: its second is a new occurrence */
    feed(&s, 1, "[7,2]<stderr>:warning: slow disk\n[7,2]<stderr>:warning: slow disk\n");
    feed(&s, 1, "[7,3]<stderr>:warning: slow disk\n"); /* rank 3's copy of it */
    /* the rank that failed and one that was told */
    feed(&s, 1, "[7,0]<stderr>:train_cls: saving: rank 1 failed with DS_ERR_IO: ck/x: write "
                "failed: No space left on device\n");
    feed(&s, 1, "[7,1]<stderr>:train_cls: saving: ck/x: write failed: No space left on device\n");
    feed(&s, 1, "[7,2]<stderr>:train_cls: saving: rank 1 failed with DS_ERR_IO: ck/x: write "
                "failed: No space left on device\n");
    expect(&s, "once", "",
           "train_cls: ds_initialize: c.json: zero_optimization.stage: must be 0..3, got 4\n"
           "warning: slow disk\nwarning: slow disk\n"
           "train_cls: saving: rank 1 failed with DS_ERR_IO: ck/x: write failed: No space left "
           "on device\n");
}

static void test_banners(void) {
    sink s;
    sink_open(&s, 2);
    char text[4096];
    snprintf(text, sizeof text,
             "%sMPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode "
             "1.\n\nNOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\nYou may "
             "or may not see output from other processes, depending on\nexactly when Open MPI "
             "kills them.\n%s", k_dash, k_dash);
    feed(&s, 1, text);
    snprintf(text, sizeof text,
             "%sPrimary job  terminated normally, but 1 process returned\na non-zero exit code. "
             "Per user-direction, the job has been aborted.\n%s%smpirun detected that one or "
             "more processes exited with non-zero status, thus causing\nthe job to be "
             "terminated. The first process to do so was:\n\n  Process name: [[2355,1],1]\n  "
             "Exit code:    3\n%s", k_dash, k_dash, k_dash, k_dash);
    feed_bytes(&s, 1, text);
    snprintf(text, sizeof text,
             "%smpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
             "(Killed).\n%s", k_dash, k_dash);
    feed(&s, 1, text);
    snprintf(text, sizeof text,
             "%smpirun has exited due to process rank 0 with PID 4242 on\nnode vm exiting "
             "improperly. There are three reasons this could occur:\n%s", k_dash, k_dash);
    feed(&s, 1, text);
    snprintf(text, sizeof text,
             "%smpirun has exited due to process rank 1 with PID 0 on\nnode vm exiting "
             "improperly. There are three reasons this could occur:\n%s", k_dash, k_dash);
    feed(&s, 1, text);
    feed(&s, 1, "[vm:18006] [[10920,0],0] ORTE_ERROR_LOG: Data unpack would read past end of "
                "buffer in file ../../../orte/util/show_help.c at line 501\n");
    feed(&s, 1, "[vm:18006] a message of mpirun's own\n");
    snprintf(text, sizeof text, "%sSomething mpirun says\nthat engine-run does not know.\n%s",
             k_dash, k_dash);
    feed(&s, 1, text);
    char want[4096];
    snprintf(want, sizeof want,
             "engine-run: rank 0 ended the job with MPI_Abort (status 1) after the error above; "
             "mpirun stopped the other ranks\n"
             "engine-run: rank 1 exited with status 3; mpirun stopped the other ranks\n"
             "engine-run: rank 1 (on vm) was killed by signal 9 (SIGKILL); mpirun stopped the "
             "other ranks\n"
             "engine-run: rank 0 (on vm) exited without finishing MPI (no MPI_Finalize); mpirun "
             "stopped the other ranks\n"
             "engine-run: rank 1 (on vm) ended without MPI_Finalize as mpirun saw it, pid 0: "
             "mpirun lost track of it (Open MPI's race at exit, open-mpi/ompi#7833, also after a "
             "program that finished); mpirun stopped the other ranks\n"
             "[vm:18006] a message of mpirun's own\n"
             "%sSomething mpirun says\nthat engine-run does not know.\n%s", k_dash, k_dash);
    expect(&s, "banners", "", want);
}

/* The rank that ends the job says so before MPI_Abort; mpirun's banner may
 * then name another rank, one it killed with the same status (seen once in
 * CI: "Process name: [[..],0] Exit code: 3" after rank 1's abort). */
static void test_abort_line(void) {
    sink s;
    sink_open(&s, 2);
    feed(&s, 1, "[4,1]<stderr>:prog: rank 1 gives up\n[4,1]<stderr>:[zero-engine] rank 1 ends the "
                "job with MPI_Abort (status 3): it exits with a failure, and the other ranks "
                "have not come to exit within 10 s (they wait for it in a collective)\n");
    int status = 0;
    CHECK_EQ_I(er_relay_abort_rank(s.r, &status), 1);
    CHECK_EQ_I(status, 3);
    char text[2048];
    snprintf(text, sizeof text,
             "%smpirun detected that one or more processes exited with non-zero status, thus "
             "causing\nthe job to be terminated. The first process to do so was:\n\n  Process "
             "name: [[2355,1],0]\n  Exit code:    3\n%s", k_dash, k_dash);
    feed(&s, 1, text);
    expect(&s, "abort line", "",
           "prog: rank 1 gives up\n[zero-engine] rank 1 ends the job with MPI_Abort (status 3): "
           "it exits with a failure, and the other ranks have not come to exit within 10 s "
           "(they wait for it in a collective)\n"
           "engine-run: rank 1 ended the job with MPI_Abort (status 3) after the error above; "
           "mpirun stopped the other ranks\n");
}

static void test_partial(void) {
    sink s;
    sink_open(&s, 1);
    er_relay_tick(s.r, 100.0);
    feed(&s, 0, "[1,0]<stdout>:loading 50%");
    er_relay_tick(s.r, 100.2); /* not yet: it may get its newline */
    CHECK(lseek(fileno(s.out), 0, SEEK_END) == 0, "a partial line was printed after 0.2 s");
    er_relay_tick(s.r, 100.7);
    CHECK(lseek(fileno(s.out), 0, SEEK_END) == 11, "a partial line held for 0.7 s");
    feed(&s, 0, "[1,0]<stdout>: done\n[1,0]<stdout>:no newline at the end");
    expect(&s, "partial", "loading 50% done\nno newline at the end\n", "");
}

int main(void) {
    test_lines();
    test_once();
    test_banners();
    test_abort_line();
    test_partial();
    return test_finish("test_output_relay");
}
