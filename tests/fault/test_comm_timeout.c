/* A rank that never joins a collective: the others fail with DS_ERR_TIMEOUT
 * after their deadline instead of hanging the job (2 ranks).
 *
 * Rank 0 skips an all_reduce that rank 1 enters with a 2 s deadline. Rank 1
 * must give up after at least 2 s (the deadline is not cut short) and well
 * before a hang (generous upper bound: this is a loaded, oversubscribed CI
 * machine, and the point is "returns", not "returns fast"), with a message
 * that names the collective, itself, and rank 0. Then both ranks learn of the
 * failure through ds_comm_agree, rank 1's data path refuses further work, and
 * both exit normally: ds_comm_destroy, then MPI_Finalize at exit (the library
 * initialised MPI). Rank 1's abandoned send of a 512 KiB block must not keep
 * MPI_Finalize from returning.
 *
 * Under ctest the whole program has a 60 s limit, which is what catches a hang
 * in MPI_Finalize. No MPI_Abort is needed, in the test or the library: the
 * abandoned requests are freed (MPI_Request_free), Open MPI 4.1's finalize
 * does not wait for them, and the unmatched message is dropped. */
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
        /* The data path refuses to run over abandoned messages. */
        ds_status again = ds_comm_barrier(c);
        if (again != DS_ERR_COMM) {
            fprintf(stderr, "rank 1: barrier after a timeout gave %s, expected DS_ERR_COMM\n",
                    ds_status_to_string(again));
            fail = 1;
        }
    } else {
        /* Skip the collective; arrive at the agreement after rank 1 gave up
         * (it arrives at ~2 s and waits up to 2 s there). */
        usleep((useconds_t)((TIMEOUT_S + 0.5) * 1e6));
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
    int rank = c->rank;
    ds_comm_destroy(c);
    printf("rank %d: %s, exiting\n", rank, fail ? "FAILED" : "ok");
    return fail;
}
