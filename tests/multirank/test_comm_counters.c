/* The traffic counters every collective keeps at the comm front door
 * (ds_comm_stats, engine/comm/comm.c), at 1 and 2 ranks on this one host:
 *
 * - calls, operation sizes (nccl-tests' size) and bytes sent per kind, the
 *   bytes all inside the host (every rank here has the same host name) and
 *   none across; the host count 1;
 * - time in the collectives positive, and all of it counted as waiting when
 *   the calling thread ran the collective itself;
 * - through a communication thread (ds_comm_worker, overlap_comm), the
 *   collective's time is counted, and waiting counts only what the caller
 *   spent blocked in ds_comm_job_wait;
 * - the bus-bandwidth factors are nccl-tests'.
 * Sizes are exact integers; no timing value is compared with a bound other
 * than > 0 (timings are never asserted). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/comm/comm_worker.h"
#include "tests/unit/test_util.h"

enum { N = 1000 };

int main(void) {
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI};
    REQUIRE_OK(ds_comm_create(&d, &c));
    test_set_rank(c->rank);
    int w = c->world;
    CHECK_EQ_I(c->nhosts, 1);
    CHECK_TRUE(ds_comm_next_same_host(c));

    /* nccl-tests' factors */
    CHECK_EQ_D(ds_coll_busbw_factor(DS_COLL_ALL_REDUCE, 4), 1.5);
    CHECK_EQ_D(ds_coll_busbw_factor(DS_COLL_REDUCE_SCATTER, 4), 0.75);
    CHECK_EQ_D(ds_coll_busbw_factor(DS_COLL_ALL_GATHER, 2), 0.5);
    CHECK_EQ_D(ds_coll_busbw_factor(DS_COLL_BROADCAST, 8), 1.0);
    CHECK_EQ_D(ds_coll_busbw_factor(DS_COLL_ALL_REDUCE, 1), 0.0);

    float *buf = calloc((size_t)N * (size_t)w, sizeof *buf);
    float *out = calloc((size_t)N, sizeof *out);
    if (!buf || !out) TEST_DIE("out of memory");
    ds_comm_stats_reset(c);
    REQUIRE_OK(ds_comm_all_reduce(c, buf, N, DS_F32, DS_REDUCE_SUM));
    REQUIRE_OK(ds_comm_reduce_scatter(c, buf, out, N, DS_F32, DS_REDUCE_SUM));
    REQUIRE_OK(ds_comm_all_gather(c, out, buf, N, DS_F32));
    REQUIRE_OK(ds_comm_broadcast(c, buf, N, DS_F32, 0));
    float *a2a = calloc((size_t)N * (size_t)w, sizeof *a2a);
    if (!a2a) TEST_DIE("out of memory");
    REQUIRE_OK(ds_comm_all_to_all(c, buf, a2a, N, DS_F32));
    const ds_comm_stats *s = &c->stats;
    /* all_to_all: its whole send buffer; every block but its own is sent */
    CHECK_EQ_I((long long)s->size_bytes[DS_COLL_ALL_TO_ALL], 4LL * N * w);
    CHECK_EQ_I((long long)s->bytes_sent[DS_COLL_ALL_TO_ALL], 4LL * N * (w - 1));
    CHECK_EQ_D(ds_coll_busbw_factor(DS_COLL_ALL_TO_ALL, 4), 0.75);
    free(a2a);
    /* sizes: the all_reduce buffer, the whole reduce_scatter send buffer,
     * the whole all_gather receive buffer, the broadcast buffer */
    CHECK_EQ_I((long long)s->size_bytes[DS_COLL_ALL_REDUCE], 4 * N);
    CHECK_EQ_I((long long)s->size_bytes[DS_COLL_REDUCE_SCATTER], 4LL * N * w);
    CHECK_EQ_I((long long)s->size_bytes[DS_COLL_ALL_GATHER], 4LL * N * w);
    CHECK_EQ_I((long long)s->size_bytes[DS_COLL_BROADCAST], 4 * N);
    double sum_s = 0;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        CHECK(s->calls[k] == 1, "%s: %llu calls", ds_coll_name((ds_coll)k),
              (unsigned long long)s->calls[k]);
        CHECK(s->bytes_intra[k] == s->bytes_sent[k] && s->bytes_inter[k] == 0,
              "%s: sent %llu, inside %llu, across %llu (one host)", ds_coll_name((ds_coll)k),
              (unsigned long long)s->bytes_sent[k], (unsigned long long)s->bytes_intra[k],
              (unsigned long long)s->bytes_inter[k]);
        CHECK(s->seconds[k] > 0, "%s: %g s", ds_coll_name((ds_coll)k), s->seconds[k]);
        sum_s += s->seconds[k];
    }
    /* a ring sends (N-1)/N of the buffer per phase: exact at 2 ranks */
    if (w == 2) {
        CHECK_EQ_I((long long)s->bytes_sent[DS_COLL_ALL_REDUCE], 4 * N);
        CHECK_EQ_I((long long)s->bytes_sent[DS_COLL_REDUCE_SCATTER], 4 * N);
    }
    /* run on this thread: all of it was waiting (the same sum, in the same
     * order of additions, so equal up to the last bit of a double's sum) */
    CHECK_NEAR(s->wait_s, sum_s, 1e-12);

    /* Through a communication thread: the job's time is counted, and the
     * wait is only what ds_comm_job_wait blocked (it may be 0 if the job was
     * already done: what we check is that it never exceeds the time the
     * caller spent in submit + wait). */
    ds_comm_worker *wk = NULL;
    REQUIRE_OK(ds_comm_worker_create(c, true, &wk));
    ds_comm_stats_reset(c);
    size_t *counts = malloc((size_t)w * sizeof *counts);
    if (!counts) TEST_DIE("out of memory");
    for (int r = 0; r < w; r++) counts[r] = N;
    ds_comm_job job = {.kind = DS_JOB_ALL_GATHERV, .buf = buf, .counts = counts, .t = DS_F32};
    double t0 = MPI_Wtime();
    REQUIRE_OK(ds_comm_job_submit(wk, &job));
    REQUIRE_OK(ds_comm_job_wait(wk, &job));
    double caller = MPI_Wtime() - t0;
    CHECK_EQ_I((long long)s->calls[DS_COLL_ALL_GATHER], 1);
    CHECK(s->seconds[DS_COLL_ALL_GATHER] > 0, "all_gatherv on the thread: %g s",
          s->seconds[DS_COLL_ALL_GATHER]);
    /* 1 us: two clocks (MPI_Wtime, CLOCK_MONOTONIC) read around the same interval */
    CHECK(s->wait_s <= caller + 1e-6, "waited %g s of the caller's %g s", s->wait_s, caller);
    ds_comm_worker_destroy(wk);

    free(counts);
    free(buf);
    free(out);
    ds_comm_destroy(c);
    return test_finish("test_comm_counters");
}
