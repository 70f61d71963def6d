/* Checked collectives (engine/comm/comm.h, "Checked collectives"): where the
 * ranks are about to make different calls, every rank fails at once with
 * DS_ERR_COMM and one message naming both calls; matched calls work as
 * unchecked ones (2 or 3 ranks under mpirun).
 *
 * Each mismatch below has the last rank call something else than the
 * others: another collective, another count, dtype, reduce op, root, the
 * same total cut into other per-rank counts, a host helper where the others
 * run the data path, a barrier where they agree. Unchecked, each of those
 * would wait until the deadline (60 s here: the ctest limit catches that),
 * fail in MPI with a truncation, or sum unrelated buffers. After each one a
 * matched all_reduce still works: every rank stopped at the same point.
 *
 * The sub-communicators of ds_comm_split check too, and the environment's
 * DS_CHECK_COLLECTIVES turns the check on (a bad value is refused, naming
 * the variable), for every rank when one rank has it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "tests/unit/test_util.h"

#define N 96 /* elements per rank's block: small, the check is what is tested */

static int g_rank, g_world, g_last;

/* A matched all_reduce of ranks' ids: the communicator still works. */
static void still_works(ds_comm *c, const char *after) {
    float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)(c->rank + i);
    if (!TEST_OK(ds_comm_all_reduce(c, v, N, DS_F32, DS_REDUCE_SUM))) {
        TEST_FAIL("after %s the communicator no longer works", after);
        return;
    }
    float want0 = (float)(c->world * (c->world - 1) / 2);
    CHECK_EQ_D(v[0], want0);
    CHECK_EQ_D(v[N - 1], want0 + (float)(c->world * (N - 1)));
}

/* st is a mismatch whose message holds every needle (NULL-terminated). */
static void expect_mismatch(const char *what, ds_status st, const char *const *needles) {
    if (st != DS_ERR_COMM) {
        TEST_FAIL("%s: %s (%s), expected DS_ERR_COMM", what, ds_status_to_string(st),
                  st ? ds_last_error() : "no error");
        return;
    }
    const char *msg = ds_last_error();
    for (int i = 0; needles[i]; i++)
        if (!strstr(msg, needles[i])) TEST_FAIL("%s: \"%s\" not in: %s", what, needles[i], msg);
}

static void matched_calls(ds_comm *c) {
    uint64_t calls0 = c->check_calls;
    int W = c->world;
    float *send = test_malloc((size_t)W * N * sizeof(float));
    float *recv = test_malloc((size_t)W * N * sizeof(float));
    for (int i = 0; i < W * N; i++) send[i] = (float)(c->rank + 1);
    CHECK_OK(ds_comm_reduce_scatter(c, send, recv, N, DS_F32, DS_REDUCE_SUM));
    CHECK_EQ_D(recv[0], (float)(W * (W + 1) / 2));
    CHECK_OK(ds_comm_all_gather(c, send, recv, N, DS_F32));
    CHECK_EQ_D(recv[0], 1.0f); /* rank r's block holds r + 1 */
    CHECK_EQ_D(recv[(size_t)(W - 1) * N], (float)W);
    size_t counts[8];
    for (int r = 0; r < W; r++) counts[r] = (size_t)(N / 2 + r);
    CHECK_OK(ds_comm_reduce_scatterv(c, send, recv, counts, DS_F32, DS_REDUCE_SUM));
    CHECK_EQ_D(recv[0], (float)(W * (W + 1) / 2));
    CHECK_OK(ds_comm_all_gatherv(c, recv, counts, DS_F32));
    CHECK_OK(ds_comm_all_to_all(c, send, recv, N / 4, DS_F32));
    CHECK_EQ_D(recv[(W - 1) * (N / 4)], (float)W); /* rank W-1's block for this rank */
    CHECK_OK(ds_comm_all_to_allv(c, send, recv, counts, DS_F32));
    float b = (float)c->rank;
    CHECK_OK(ds_comm_broadcast(c, &b, 1, DS_F32, W - 1));
    CHECK_EQ_D(b, (float)(W - 1));
    CHECK_OK(ds_comm_barrier(c));
    double h = 1.0;
    CHECK_OK(ds_comm_host_all_reduce(c, &h, 1, DS_F64, DS_REDUCE_SUM));
    CHECK_EQ_D(h, (double)W);
    int x = c->rank == 0 ? 7 : 0;
    CHECK_OK(ds_comm_host_broadcast(c, &x, sizeof x, 0));
    CHECK_EQ_I(x, 7);
    ds_status worst;
    CHECK_OK(ds_comm_agree(c, DS_OK, &worst));
    CHECK_EQ_I(worst, DS_OK);
    still_works(c, "the matched calls");
    /* every one of the 12 calls went through the check */
    CHECK_EQ_I(c->check_calls - calls0, 12);
    free(send);
    free(recv);
}

static void mismatches(ds_comm *c) {
    bool odd = c->rank == g_last; /* the rank that calls something else */
    int W = c->world;
    float *send = test_malloc((size_t)W * (N + 1) * sizeof(float));
    float *recv = test_malloc((size_t)W * (N + 1) * sizeof(float));
    for (int i = 0; i < W * (N + 1); i++) send[i] = 1.0f;
    char last[32];
    snprintf(last, sizeof last, "rank %d called", g_last);

    ds_comm_set_context(c, odd ? "the odd rank's parameters" : "a gradient bucket");
    ds_status st = odd ? ds_comm_all_gather(c, send, recv, N, DS_F32)
                       : ds_comm_reduce_scatter(c, send, recv, N, DS_F32, DS_REDUCE_SUM);
    ds_comm_set_context(c, NULL);
    expect_mismatch("another collective", st,
                    (const char *[]){"collective mismatch", "rank 0 called reduce_scatter of 96 "
                                     "fp32 (sum) for a gradient bucket", last,
                                     "all_gather of 96 fp32 for the odd rank's parameters", NULL});
    still_works(c, "another collective");

    st = ds_comm_all_reduce(c, send, odd ? N + 1 : N, DS_F32, DS_REDUCE_SUM);
    expect_mismatch("another count", st,
                    (const char *[]){"rank 0 called all_reduce of 96 fp32", "all_reduce of 97 fp32",
                                     NULL});
    still_works(c, "another count");

    st = ds_comm_all_reduce(c, send, N, odd ? DS_BF16 : DS_F32, DS_REDUCE_SUM);
    expect_mismatch("another dtype", st, (const char *[]){"all_reduce of 96 bf16", NULL});
    still_works(c, "another dtype");

    st = ds_comm_all_reduce(c, send, N, DS_F32, odd ? DS_REDUCE_MAX : DS_REDUCE_SUM);
    expect_mismatch("another reduce op", st, (const char *[]){"96 fp32 (max)", NULL});
    still_works(c, "another reduce op");

    st = ds_comm_broadcast(c, send, N, DS_F32, odd ? 1 : 0);
    expect_mismatch("another root", st, (const char *[]){"(root 0)", "(root 1)", NULL});
    still_works(c, "another root");

    /* the same total, cut differently: 48, 49, ... against 49, 48, ... */
    size_t counts[8];
    for (int r = 0; r < W; r++) counts[r] = (size_t)(N / 2 + r);
    if (odd) {
        counts[0]++;
        counts[1]--;
    }
    st = ds_comm_reduce_scatterv(c, send, recv, counts, DS_F32, DS_REDUCE_SUM);
    expect_mismatch("other counts", st, (const char *[]){"counts 48, 49", "counts 49, 48", NULL});
    still_works(c, "other counts");

    double h = 1.0;
    st = odd ? ds_comm_host_all_reduce(c, &h, 1, DS_F64, DS_REDUCE_SUM)
             : ds_comm_all_reduce(c, send, N, DS_F32, DS_REDUCE_SUM);
    expect_mismatch("a host helper against the data path", st,
                    (const char *[]){"host_all_reduce of 1 fp64 (sum)", NULL});
    still_works(c, "a host helper against the data path");

    ds_status worst = DS_OK;
    st = odd ? ds_comm_barrier(c) : ds_comm_agree(c, DS_OK, &worst);
    expect_mismatch("a barrier against an agreement", st,
                    (const char *[]){"rank 0 called agree", "called barrier", NULL});
    still_works(c, "a barrier against an agreement");
    free(send);
    free(recv);
}

/* A sub-communicator checks as its parent does: the ranks of even and odd
 * id, the odd group's last member calling something else. */
static void split_checks(ds_comm *c) {
    ds_comm *sub = NULL;
    if (!TEST_OK(ds_comm_split(c, c->rank % 2, c->rank, &sub))) return;
    CHECK_TRUE(sub->check_recs != NULL || sub->world == 1);
    if (sub->world > 1) {
        float v[4] = {1, 1, 1, 1};
        bool odd = sub->rank == sub->world - 1;
        ds_status st = ds_comm_all_reduce(sub, v, odd ? 3 : 4, DS_F32, DS_REDUCE_SUM);
        expect_mismatch("inside a split", st,
                        (const char *[]){"on a communicator of 2 ranks", "all_reduce of 3 fp32",
                                         NULL});
        still_works(sub, "a mismatch inside a split");
    }
    ds_comm_destroy(sub);
}

int main(void) {
    /* the environment's switch: a bad value is refused before anything */
    setenv("DS_CHECK_COLLECTIVES", "yes", 1);
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI, .timeout_s = 60.0};
    ds_status st = ds_comm_create(&d, &c);
    CHECK_EQ_I(st, DS_ERR_INVALID_ARG);
    CHECK_TRUE(strstr(ds_last_error(), "DS_CHECK_COLLECTIVES=yes") != NULL);
    setenv("DS_CHECK_COLLECTIVES", "1", 1);
    REQUIRE_OK(ds_comm_create(&d, &c)); /* check_collectives false: the variable turns it on */
    unsetenv("DS_CHECK_COLLECTIVES");
    g_rank = c->rank;
    g_world = c->world;
    g_last = c->world - 1;
    test_set_rank(g_rank);
    if (g_world > 8) TEST_DIE("at most 8 ranks");
    if (g_world == 1) {
        CHECK_TRUE(c->check_recs == NULL); /* nothing to compare with */
        still_works(c, "nothing");
    } else {
        CHECK_TRUE(c->check_recs != NULL);
        matched_calls(c);
        mismatches(c);
        split_checks(c);
    }
    ds_comm_destroy(c);

    /* off: created without the flag or the variable, nothing is exchanged */
    REQUIRE_OK(ds_comm_create(&d, &c));
    CHECK_TRUE(c->check_recs == NULL);
    still_works(c, "creating an unchecked communicator");
    CHECK_EQ_I(c->check_calls, 0);
    ds_comm_destroy(c);

    /* one rank's choice is every rank's (the environment may differ by
     * host): only the last rank asks */
    if (g_rank == g_last) setenv("DS_CHECK_COLLECTIVES", "1", 1);
    REQUIRE_OK(ds_comm_create(&d, &c));
    unsetenv("DS_CHECK_COLLECTIVES");
    CHECK_TRUE(g_world == 1 || c->check_recs != NULL);
    if (g_world > 1) {
        float v[2] = {1, 1};
        expect_mismatch("checked because one rank asked",
                        ds_comm_all_reduce(c, v, c->rank == g_last ? 1 : 2, DS_F32,
                                           DS_REDUCE_SUM),
                        (const char *[]){"all_reduce of 2 fp32", "all_reduce of 1 fp32", NULL});
    }
    ds_comm_destroy(c);
    return test_finish("test_comm_check");
}
