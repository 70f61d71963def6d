/* After a timeout: which ranks are there at all (comm_internal.h).
 *
 * A rank that waits names the peer it waits for, which at 3 or more ranks
 * is often a live rank waiting itself: in a ring, rank s + 2 waits for
 * s + 1, which waits for the stopped s; MPI's own collectives (the host
 * helpers) name no peer at all. Every live rank times out in the same
 * collective within a poll of the others (they started waiting together),
 * so each then sends every other rank a word and listens for a short grace:
 * a rank whose word did not come is not in the collective at all, stopped,
 * stuck computing or gone. Point-to-point on a tag of its own: the data
 * path's pending requests were abandoned (cancelled or left), and an MPI
 * collective may be the thing that hangs. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/comm/comm_internal.h"

enum { TAG_ROLL_CALL = 11 }; /* beside mpi.c's 1-4, the barrier's 7, check.c's 9 */

int ds_comm_job_rank(ds_comm *c, int r) {
    const ds_comm_mpi_base *b = ds_comm_base(c);
    return b->job_rank && r >= 0 && r < c->world ? b->job_rank[r] : r;
}

double ds_comm_roll_call_grace(double timeout_s) {
    double g = timeout_s / 2.0;
    return g < 1.0 ? 1.0 : g > 10.0 ? 10.0 : g;
}

int ds_comm_roll_call(ds_comm *c, double grace_s, int *absent, int cap) {
    int w = c->world, me = c->rank;
    if (w <= 1) return 0;
    MPI_Comm comm = ds_comm_base(c)->comm;
    MPI_Request *rq = malloc(2 * (size_t)w * sizeof *rq);
    int *words = malloc((size_t)w * sizeof *words);
    if (!rq || !words) {
        free(rq);
        free(words);
        return -1;
    }
    for (int i = 0; i < 2 * w; i++) rq[i] = MPI_REQUEST_NULL;
    /* static: a send freed while pending may read its buffer after return */
    static const int present = 1;
    int ok = 1;
    for (int r = 0; r < w && ok; r++) {
        if (r == me) continue;
        ok = MPI_Irecv(&words[r], 1, MPI_INT, r, TAG_ROLL_CALL, comm, &rq[r]) == MPI_SUCCESS &&
             MPI_Isend((void *)&present, 1, MPI_INT, r, TAG_ROLL_CALL, comm, &rq[w + r]) ==
                 MPI_SUCCESS;
    }
    double t0 = ds_comm_now();
    int answered = 0;
    while (ok && answered < w - 1 && ds_comm_now() - t0 < grace_s) {
        answered = 0;
        for (int r = 0; r < w; r++) {
            if (r == me) continue;
            int done = rq[r] == MPI_REQUEST_NULL;
            if (!done && MPI_Test(&rq[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) ok = 0;
            answered += done;
        }
        if (answered < w - 1) nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 1000000}, NULL);
    }
    int n = 0;
    for (int r = 0; r < w; r++) {
        if (r == me) continue;
        if (rq[r] != MPI_REQUEST_NULL) { /* no word from r: it is not here */
            MPI_Cancel(&rq[r]); /* a receive: cancelling it is allowed */
            MPI_Request_free(&rq[r]);
            if (ok && n < cap) absent[n] = ds_comm_job_rank(c, r);
            n++;
        }
        if (rq[w + r] != MPI_REQUEST_NULL) MPI_Request_free(&rq[w + r]); /* one int: buffered */
    }
    free(rq);
    /* words[] may still be written by a late word to a cancelled receive
     * that had matched: kept until the process ends, as the data path's
     * buffers are */
    return ok ? n : -1;
}
