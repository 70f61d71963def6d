/* A hung rank named by every other rank at 4 ranks, not the live peer each
 * waits for (engine/comm/rollcall.c): rank 0 stays out of
 *
 *   1. a ring all_reduce: ranks 1 and 3 wait for rank 0 itself, rank 2 for
 *      rank 1, which waits for rank 0 (rank 2 named rank 1);
 *   2. a host all_reduce (MPI's own collective: it names no peer; the
 *      ranks said "the other ranks");
 *   3. an all_reduce on a split, world ranks {1, 3} with rank 3 out (here
 *      rank 0 takes no part): rank 1 names rank 3 in the job's numbering
 *      (it said "rank 1 waited for rank 1", the split's own numbers).
 *
 * Each case on a communicator of its own (a timeout breaks it); the ranks
 * share their results on a last one. Every timeout is 2 s; rank 0 (and
 * rank 3 in case 3) sleeps past the others' deadline and roll call. At
 * exit the library ends the job with MPI_Abort (a collective failed), with
 * the status main returns: mpirun's status is the verdict. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm/comm.h"

#define TIMEOUT_S 2.0
/* the others' deadline, their roll call's grace (half the deadline, at
 * least 1 s) and 1.5 s of margin for an oversubscribed machine */
#define OUT_S (TIMEOUT_S + 1.0 + 1.5)

static ds_comm *make(double timeout_s) {
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI, .timeout_s = timeout_s};
    if (ds_comm_create(&d, &c) != DS_OK) {
        fprintf(stderr, "ds_comm_create: %s\n", ds_last_error());
        return NULL;
    }
    return c;
}

/* st must be a timeout whose message holds `want` */
static int expect(int rank, const char *what, ds_status st, const char *want) {
    const char *msg = ds_last_error();
    printf("rank %d, %s: %s: %s\n", rank, what, ds_status_to_string(st), msg);
    if (st != DS_ERR_TIMEOUT || !strstr(msg, want)) {
        fprintf(stderr, "rank %d, %s: want DS_ERR_TIMEOUT naming \"%s\"\n", rank, what, want);
        return 1;
    }
    return 0;
}

int main(void) {
    /* the last one waits for ranks that slept through the cases */
    ds_comm *a = make(TIMEOUT_S), *b = make(TIMEOUT_S), *s = make(TIMEOUT_S), *last = make(60.0);
    if (!a || !b || !s || !last) return 1;
    int rank = a->rank, fail = 0;
    if (a->world != 4) {
        fprintf(stderr, "run with 4 ranks (got %d)\n", a->world);
        return 1;
    }
    enum { N = 1 << 16 };
    static float buf[N];
    char want[64];
    /* 1: the ring */
    if (rank == 0) {
        usleep((useconds_t)(OUT_S * 1e6));
    } else {
        snprintf(want, sizeof want, "rank %d waited", rank);
        fail |= expect(rank, "ring all_reduce", ds_comm_all_reduce(a, buf, N, DS_F32,
                                                                   DS_REDUCE_SUM), want);
        fail |= expect(rank, "ring all_reduce", DS_ERR_TIMEOUT, "for rank 0, not answering");
    }
    /* 2: MPI's own collective */
    if (rank == 0) {
        usleep((useconds_t)(OUT_S * 1e6));
    } else {
        double x = 1.0;
        fail |= expect(rank, "host all_reduce", ds_comm_host_all_reduce(b, &x, 1, DS_F64,
                                                                        DS_REDUCE_SUM),
                       "for rank 0, not answering");
    }
    /* 3: a split of ranks {0, 2} and {1, 3}; rank 3 stays out of its group's */
    ds_comm *sub = NULL;
    if (ds_comm_split(s, rank % 2, rank, &sub) != DS_OK) {
        fprintf(stderr, "rank %d: split: %s\n", rank, ds_last_error());
        return 1;
    }
    if (rank == 3) {
        usleep((useconds_t)(OUT_S * 1e6));
    } else if (rank == 1) {
        ds_status st = ds_comm_all_reduce(sub, buf, N, DS_F32, DS_REDUCE_SUM);
        fail |= expect(rank, "split all_reduce", st, "rank 1 waited");
        fail |= expect(rank, "split all_reduce", st, "for rank 3");
    } else {
        usleep((useconds_t)(OUT_S * 1e6)); /* ranks 0 and 2 wait for case 3 to end */
    }
    /* the verdict, on a communicator nothing broke */
    int32_t any = fail;
    if (ds_comm_host_all_reduce(last, &any, 1, DS_I32, DS_REDUCE_MAX) != DS_OK) {
        fprintf(stderr, "rank %d: sharing the result: %s\n", rank, ds_last_error());
        any = 1;
    }
    printf("rank %d: %s\n", rank, any ? "FAILED" : "ok");
    fflush(stdout);
    return any ? 1 : 0;
}
