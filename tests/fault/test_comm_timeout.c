/* A rank that never joins a collective: the others fail with DS_ERR_TIMEOUT
 * after their deadline instead of hanging the job (2 ranks).
 *
 * Rank 0 skips an all_reduce that rank 1 enters with a 2 s deadline. Rank 1
 * must give up after at least 2 s (the deadline is not cut short) and well
 * before a hang (generous upper bound: this is a loaded, oversubscribed CI
 * machine, and the point is "returns", not "returns fast"), with a message
 * that names the collective, itself, and rank 0. Its data path then refuses
 * further work repeating that first failure (status and message), not a
 * generic "unusable", and ds_comm_process_failed() says the process had a
 * failed collective. Both ranks learn of the failure through ds_comm_agree
 * (the host path still works) and exit.
 *
 * At exit rank 1 does not call MPI_Finalize (collective: after a failed
 * collective it could wait forever for a peer that is stopped): the library's
 * exit handler ends the job with MPI_Abort(MPI_COMM_WORLD, exit status), so
 * mpirun's status is rank 1's (0 when every check passed) and rank 0 may be
 * stopped by mpirun before it prints its last line (it waits for that,
 * below). Under ctest the whole
 * program has a 60 s limit, which is what catches a hang at exit. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm/comm.h"

#define TIMEOUT_S 2.0

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI, .timeout_s = TIMEOUT_S};
    if (ds_comm_create(&d, &c) != DS_OK) {
        fprintf(stderr, "ds_comm_create: %s\n", ds_last_error());
        return 1;
    }
    if (c->world != 2) {
        fprintf(stderr, "run with 2 ranks (got %d)\n", c->world);
        ds_comm_destroy(c);
        return 1;
    }
    int fail = 0;
    /* 1 MiB of fp32 per rank, so 512 KiB blocks: large enough that the
     * shared-memory transport uses its rendezvous protocol, the case where a
     * send cannot complete without the receiver. */
    enum { N = 1 << 18 };
    static float buf[N];
    ds_status local = DS_OK;
    if (c->rank == 1) {
        double t0 = now();
        local = ds_comm_all_reduce(c, buf, N, DS_F32, DS_REDUCE_SUM);
        double dt = now() - t0;
        const char *msg = ds_last_error();
        printf("rank 1: %s after %.2f s: %s\n", ds_status_to_string(local), dt, msg);
        if (local != DS_ERR_TIMEOUT) {
            fprintf(stderr, "rank 1: expected DS_ERR_TIMEOUT, got %s\n", ds_status_to_string(local));
            fail = 1;
        }
        if (dt < TIMEOUT_S || dt > TIMEOUT_S + 20.0) {
            fprintf(stderr, "rank 1: gave up after %.2f s, deadline %.1f s\n", dt, TIMEOUT_S);
            fail = 1;
        }
        if (!strstr(msg, "all_reduce: rank 1 waited") || !strstr(msg, "for rank 0") ||
            !strstr(msg, "step 1 of 1")) {
            fprintf(stderr, "rank 1: message does not name collective, rank, peer and step\n");
            fail = 1;
        }
        /* The data path refuses to run over abandoned messages, repeating
         * the failure that broke it. */
        char first[1024];
        snprintf(first, sizeof first, "%s", msg);
        ds_status again = ds_comm_barrier(c);
        if (again != DS_ERR_TIMEOUT || strcmp(ds_last_error(), first) != 0) {
            fprintf(stderr, "rank 1: barrier after a timeout gave %s \"%s\", expected the first "
                    "failure DS_ERR_TIMEOUT \"%s\"\n", ds_status_to_string(again),
                    ds_last_error(), first);
            fail = 1;
        }
        if (!ds_comm_process_failed()) {
            fprintf(stderr, "rank 1: ds_comm_process_failed() is false after a timeout\n");
            fail = 1;
        }
    } else {
        /* Skip the collective; arrive at the agreement after rank 1 gave up
         * (it arrives at ~2 s and waits up to 2 s there). */
        usleep((useconds_t)((TIMEOUT_S + 0.5) * 1e6));
        if (ds_comm_process_failed()) {
            fprintf(stderr, "rank 0: ds_comm_process_failed() is true, no collective of it "
                    "failed\n");
            fail = 1;
        }
    }
    ds_status worst = DS_OK;
    ds_status st = ds_comm_agree(c, local, &worst);
    if (st != DS_OK || worst != DS_ERR_TIMEOUT) {
        fprintf(stderr, "rank %d: agree -> %s, worst %s (%s)\n", c->rank, ds_status_to_string(st),
                ds_status_to_string(worst), ds_last_error());
        fail = 1;
    }
    if (c->rank == 0 && !strstr(ds_last_error(), "rank 1 failed with DS_ERR_TIMEOUT")) {
        fprintf(stderr, "rank 0: agree message \"%s\"\n", ds_last_error());
        fail = 1;
    }
    /* Rank 1's exit status becomes mpirun's (MPI_Abort), and rank 0 may be
     * stopped before it exits: rank 1 exits with either rank's failure. */
    int32_t any = fail;
    if (ds_comm_host_all_reduce(c, &any, 1, DS_I32, DS_REDUCE_MAX) != DS_OK) {
        fprintf(stderr, "rank %d: sharing the result: %s\n", c->rank, ds_last_error());
        any = 1;
    }
    int rank = c->rank;
    ds_comm_destroy(c);
    printf("rank %d: %s, exiting\n", rank, fail ? "FAILED" : "ok");
    /* Rank 0 waits for rank 1's MPI_Abort to end it instead of entering
     * MPI_Finalize while rank 1 aborts: with one rank finalizing and the
     * other aborting, Open MPI 4.1's mpirun itself can crash
     * (PMIx_server_finalize, SIGSEGV) or never exit, seen once each in 9
     * runs on a loaded machine. A library job ends every rank by MPI_Abort
     * or engine-run ends a hung mpirun (tools/common/supervise.c); this
     * program runs under a bare mpirun. */
    if (rank == 0 && !any) {
        fflush(stdout);
        sleep(30);
        fprintf(stderr, "rank 0: not ended by rank 1's MPI_Abort within 30 s\n");
        return 1;
    }
    return any;
}
