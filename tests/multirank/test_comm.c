/* The MPI communicator at any world size (ctest runs it at 1, 2 and 4 ranks,
 * and once without mpirun as an MPI singleton).
 *
 * Every collective (the v-variants with uneven blocks, one of them empty),
 * every dtype and reduce op, sizes 0, 1, 7 (not divisible
 * by the world), 1000, 1001, in place and out of place, once with the default
 * scratch and once with a 256-byte scratch that forces every message through
 * many chunks. Inputs are small integers (|x| <= 8, sums <= 32 in magnitude),
 * exact in every dtype including fp16 and bf16 after any number of roundings,
 * so results must match the reference with 0 ulps: memcmp, no tolerance.
 *
 * Traffic: after every call the stats must have grown by exactly what a ring
 * sends (see expected_* below), and the total over ranks of an all_reduce must
 * be exactly 2 (N-1) count whatever the block split. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "tests/unit/test_util.h"

/* Built four times: for the MPI communicator (host buffers, the default);
 * with DS_TEST_STAGED for MPI with staging (ds_comm_desc.stage: every call
 * copies through the backend's host memory), over the cpu backend; with
 * DS_TEST_STAGED and DS_TEST_CUDA over the cuda backend, every buffer in
 * device memory and the ranks sharing GPU 0 (label cuda); and with
 * DS_TEST_NCCL for the NCCL one, every buffer in device memory (label cuda,
 * needs a GPU per rank). */
#ifdef DS_TEST_STAGED
#include "engine/backend/backend.h"
static ds_backend *g_stage_be;
#endif
#if defined(DS_TEST_NCCL) || defined(DS_TEST_CUDA)
#include <cuda_runtime.h>
#ifdef DS_TEST_NCCL
#define TEST_KIND DS_COMM_NCCL
#define TEST_KIND_NAME "nccl"
#else
#define TEST_KIND DS_COMM_MPI
#define TEST_KIND_NAME "mpi"
#endif
static void *dev_in(const void *host, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess ||
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc/cudaMemcpy of %zu bytes failed\n", bytes);
        exit(1);
    }
    return d;
}
static void dev_out(void *host, void *dev, size_t bytes) {
    if (cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "cudaMemcpy of %zu bytes to the host failed\n", bytes);
        exit(1);
    }
    cudaFree(dev);
}
#else
#define TEST_KIND DS_COMM_MPI
#define TEST_KIND_NAME "mpi"
static void *dev_in(const void *host, size_t bytes) {
    (void)bytes;
    return (void *)host;
}
static void dev_out(void *host, void *dev, size_t bytes) {
    (void)host;
    (void)dev;
    (void)bytes;
}
#endif

static const ds_dtype k_types[] = {DS_F32, DS_F64, DS_F16, DS_BF16, DS_I32, DS_I64, DS_U8};
static const ds_reduce_op k_ops[] = {DS_REDUCE_SUM, DS_REDUCE_MAX, DS_REDUCE_MIN};
static const char *const k_op_names[] = {"sum", "max", "min"};
static const size_t k_counts[] = {0, 1, 7, 1000, 1001};

/* Rank r's element i: a small integer, in [-8, 8] (uint8: [0, 16]). */
static double value(ds_dtype t, int r, size_t i) {
    int v = (int)((i * 7 + (size_t)r * 5 + 3) % 17);
    return t == DS_U8 ? v : v - 8;
}

static void put(void *p, ds_dtype t, size_t i, double v) {
    switch (t) {
    case DS_F32: ((float *)p)[i] = (float)v; break;
    case DS_F64: ((double *)p)[i] = v; break;
    case DS_F16: ((uint16_t *)p)[i] = ds_f32_to_f16((float)v); break;
    case DS_BF16: ((uint16_t *)p)[i] = ds_f32_to_bf16((float)v); break;
    case DS_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DS_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case DS_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: break;
    }
}

static double get(const void *p, ds_dtype t, size_t i) {
    switch (t) {
    case DS_F32: return ((const float *)p)[i];
    case DS_F64: return ((const double *)p)[i];
    case DS_F16: return ds_f16_to_f32(((const uint16_t *)p)[i]);
    case DS_BF16: return ds_bf16_to_f32(((const uint16_t *)p)[i]);
    case DS_I32: return ((const int32_t *)p)[i];
    case DS_I64: return (double)((const int64_t *)p)[i];
    case DS_U8: return ((const uint8_t *)p)[i];
    default: return 0;
    }
}

/* The reduction over ranks of element i of every rank's input. */
static double reduced(ds_dtype t, ds_reduce_op op, int world, size_t i) {
    double acc = value(t, 0, i);
    for (int r = 1; r < world; r++) {
        double v = value(t, r, i);
        if (op == DS_REDUCE_SUM) acc += v;
        else if (op == DS_REDUCE_MAX) acc = v > acc ? v : acc;
        else acc = v < acc ? v : acc;
    }
    return acc;
}

/* Compare n elements bit for bit with the expected values (which are exact
 * in t), report the first difference. */
static void expect(const char *what, const void *got, const void *want, size_t n, ds_dtype t,
                   const char *op, size_t count) {
    size_t es = ds_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0) {
            CHECK(0, "%s %s %s count %zu: element %zu is %g, expected %g", what,
                  ds_dtype_name(t), op, count, i, get(got, t, i), get(want, t, i));
            return;
        }
}

/* ---- traffic a ring sends, per rank --------------------------------------- */

static size_t block_len(size_t count, int world, int b) {
    return count / (size_t)world + ((size_t)b < count % (size_t)world);
}
/* reduce-scatter phase: every block but its own; all-gather phase: every
 * block but the one of rank+1 (which rank+1 already has). */
static uint64_t expected_all_reduce(size_t count, int world, int rank) {
    if (world == 1) return 0;
    return (count - block_len(count, world, rank)) +
           (count - block_len(count, world, (rank + 1) % world));
}
static uint64_t expected_rs_ag(size_t count, int world) { return (uint64_t)(world - 1) * count; }
/* chain root -> root+1 -> ...: all but the last rank of the chain send it all */
static uint64_t expected_bcast(size_t count, int world, int rank, int root) {
    return rank == (root - 1 + world) % world ? 0 : count;
}

static void check_stats(ds_comm *c, const ds_comm_stats *before, ds_coll which,
                        uint64_t elems, size_t es, const char *what, size_t count) {
    const ds_comm_stats *now = &c->stats;
    CHECK(now->calls[which] == before->calls[which] + 1, "%s count %zu: calls %llu -> %llu", what,
          count, (unsigned long long)before->calls[which], (unsigned long long)now->calls[which]);
    uint64_t de = now->elems_sent[which] - before->elems_sent[which];
    uint64_t db = now->bytes_sent[which] - before->bytes_sent[which];
    CHECK(de == elems && db == elems * es,
          "%s count %zu: sent %llu elements / %llu bytes, a ring sends %llu / %llu", what, count,
          (unsigned long long)de, (unsigned long long)db, (unsigned long long)elems,
          (unsigned long long)(elems * es));
}

/* ---- the collectives ------------------------------------------------------ */

static void test_all_reduce(ds_comm *c, ds_dtype t, ds_reduce_op op, size_t count) {
    size_t es = ds_dtype_size(t);
    char *buf = malloc(count * es + 1), *want = malloc(count * es + 1);
    for (size_t i = 0; i < count; i++) {
        put(buf, t, i, value(t, c->rank, i));
        put(want, t, i, reduced(t, op, c->world, i));
    }
    ds_comm_stats before = c->stats;
    void *d = dev_in(buf, count * es);
    CHECK_OK(ds_comm_all_reduce(c, d, count, t, op));
    dev_out(buf, d, count * es);
    expect("all_reduce", buf, want, count, t, k_op_names[op], count);
    check_stats(c, &before, DS_COLL_ALL_REDUCE, expected_all_reduce(count, c->world, c->rank), es,
                "all_reduce", count);
    /* The sum over ranks does not depend on how blocks were split. */
    uint64_t sent = c->stats.elems_sent[DS_COLL_ALL_REDUCE] - before.elems_sent[DS_COLL_ALL_REDUCE];
    int64_t total = (int64_t)sent;
    CHECK_OK(ds_comm_host_all_reduce(c, &total, 1, DS_I64, DS_REDUCE_SUM));
    CHECK((uint64_t)total == 2 * (uint64_t)(c->world - 1) * count,
          "all_reduce count %zu: ranks sent %lld elements in all, expected 2(N-1)count = %llu",
          count, (long long)total, (unsigned long long)(2 * (uint64_t)(c->world - 1) * count));
    free(buf);
    free(want);
}

static void test_reduce_scatter(ds_comm *c, ds_dtype t, ds_reduce_op op, size_t count,
                                bool in_place) {
    size_t es = ds_dtype_size(t), n = count * (size_t)c->world;
    char *send = malloc(n * es + 1), *own = malloc(count * es + 1), *want = malloc(count * es + 1);
    for (size_t i = 0; i < n; i++) put(send, t, i, value(t, c->rank, i));
    for (size_t i = 0; i < count; i++)
        put(want, t, i, reduced(t, op, c->world, (size_t)c->rank * count + i));
    char *copy = malloc(n * es + 1);
    memcpy(copy, send, n * es);
    size_t off = (size_t)c->rank * count * es;
    char *recv = in_place ? send + off : own;
    ds_comm_stats before = c->stats;
    char *dsend = dev_in(send, n * es), *drecv = in_place ? dsend + off : dev_in(own, count * es);
    CHECK_OK(ds_comm_reduce_scatter(c, dsend, drecv, count, t, op));
    if (!in_place) dev_out(own, drecv, count * es);
    dev_out(send, dsend, n * es);
    const char *what = in_place ? "reduce_scatter (in place)" : "reduce_scatter";
    expect(what, recv, want, count, t, k_op_names[op], count);
    if (!in_place) /* out of place leaves the input alone */
        expect("reduce_scatter input", send, copy, n, t, k_op_names[op], count);
    free(copy);
    check_stats(c, &before, DS_COLL_REDUCE_SCATTER, expected_rs_ag(count, c->world), es, what,
                count);
    free(send);
    free(own);
    free(want);
}

static void test_all_gather(ds_comm *c, ds_dtype t, size_t count, bool in_place) {
    size_t es = ds_dtype_size(t), n = count * (size_t)c->world;
    char *recv = malloc(n * es + 1), *send = malloc(count * es + 1), *want = malloc(n * es + 1);
    memset(recv, 0x5a, n * es);
    for (int r = 0; r < c->world; r++)
        for (size_t i = 0; i < count; i++) put(want, t, (size_t)r * count + i, value(t, r, i));
    size_t off = (size_t)c->rank * count * es;
    char *src = in_place ? recv + off : send;
    for (size_t i = 0; i < count; i++) put(src, t, i, value(t, c->rank, i));
    ds_comm_stats before = c->stats;
    char *drecv = dev_in(recv, n * es), *dsrc = in_place ? drecv + off : dev_in(send, count * es);
    CHECK_OK(ds_comm_all_gather(c, dsrc, drecv, count, t));
    if (!in_place) dev_out(send, dsrc, count * es);
    dev_out(recv, drecv, n * es);
    const char *what = in_place ? "all_gather (in place)" : "all_gather";
    expect(what, recv, want, n, t, "-", count);
    check_stats(c, &before, DS_COLL_ALL_GATHER, expected_rs_ag(count, c->world), es, what, count);
    free(recv);
    free(send);
    free(want);
}

static void test_broadcast(ds_comm *c, ds_dtype t, size_t count, int root) {
    size_t es = ds_dtype_size(t);
    char *buf = malloc(count * es + 1), *want = malloc(count * es + 1);
    memset(buf, 0x5a, count * es);
    for (size_t i = 0; i < count; i++) {
        put(want, t, i, value(t, root, i));
        if (c->rank == root) put(buf, t, i, value(t, root, i));
    }
    ds_comm_stats before = c->stats;
    void *d = dev_in(buf, count * es);
    CHECK_OK(ds_comm_broadcast(c, d, count, t, root));
    dev_out(buf, d, count * es);
    char what[64];
    snprintf(what, sizeof what, "broadcast from %d", root);
    expect(what, buf, want, count, t, "-", count);
    check_stats(c, &before, DS_COLL_BROADCAST, expected_bcast(count, c->world, c->rank, root), es,
                what, count);
    free(buf);
    free(want);
}

/* Blocks of the v-collectives: uneven, one of them empty (rank 1's). */
static void v_counts(size_t n, int world, size_t *counts, size_t *total) {
    *total = 0;
    for (int r = 0; r < world; r++) {
        counts[r] = r == 1 ? 0 : n + (size_t)r;
        *total += counts[r];
    }
}

static void test_reduce_scatterv(ds_comm *c, ds_dtype t, ds_reduce_op op, size_t n,
                                 bool in_place) {
    size_t counts[64] = {0}, total, es = ds_dtype_size(t), off = 0;
    v_counts(n, c->world, counts, &total);
    for (int r = 0; r < c->rank; r++) off += counts[r];
    size_t mine = counts[c->rank];
    char *send = malloc(total * es + 1), *own = malloc(mine * es + 1), *want = malloc(mine * es + 1);
    for (size_t i = 0; i < total; i++) put(send, t, i, value(t, c->rank, i));
    for (size_t i = 0; i < mine; i++) put(want, t, i, reduced(t, op, c->world, off + i));
    char *recv = in_place ? send + off * es : own;
    ds_comm_stats before = c->stats;
    char *dsend = dev_in(send, total * es);
    char *drecv = in_place ? dsend + off * es : dev_in(own, mine * es);
    CHECK_OK(ds_comm_reduce_scatterv(c, dsend, drecv, counts, t, op));
    if (!in_place) dev_out(own, drecv, mine * es);
    dev_out(send, dsend, total * es);
    const char *what = in_place ? "reduce_scatterv (in place)" : "reduce_scatterv";
    expect(what, recv, want, mine, t, k_op_names[op], n);
    /* a ring sends every block but its own */
    check_stats(c, &before, DS_COLL_REDUCE_SCATTER, total - mine, es, what, n);
    free(send);
    free(own);
    free(want);
}

static void test_all_gatherv(ds_comm *c, ds_dtype t, size_t n) {
    size_t counts[64] = {0}, total, es = ds_dtype_size(t);
    v_counts(n, c->world, counts, &total);
    char *buf = malloc(total * es + 1), *want = malloc(total * es + 1);
    memset(buf, 0x5a, total * es);
    size_t off = 0;
    for (int r = 0; r < c->world; r++)
        for (size_t i = 0; i < counts[r]; i++, off++) {
            put(want, t, off, value(t, r, off));
            if (r == c->rank) put(buf, t, off, value(t, r, off));
        }
    ds_comm_stats before = c->stats;
    void *d = dev_in(buf, total * es);
    CHECK_OK(ds_comm_all_gatherv(c, d, counts, t));
    dev_out(buf, d, total * es);
    expect("all_gatherv", buf, want, total, t, "-", n);
    /* a ring sends every block but that of rank+1 */
    uint64_t sent = c->world > 1 ? total - counts[(c->rank + 1) % c->world] : 0;
    check_stats(c, &before, DS_COLL_ALL_GATHER, sent, es, "all_gatherv", n);
    free(buf);
    free(want);
}

/* Rank q's send holds rank q's values of the whole run of blocks; this rank
 * receives from every q block `rank` of it. */
static void test_all_to_allv(ds_comm *c, ds_dtype t, size_t n) {
    size_t counts[64] = {0}, total, es = ds_dtype_size(t), off = 0;
    v_counts(n, c->world, counts, &total);
    for (int r = 0; r < c->rank; r++) off += counts[r];
    size_t mine = counts[c->rank], rn = mine * (size_t)c->world;
    char *send = malloc(total * es + 1), *recv = malloc(rn * es + 1), *want = malloc(rn * es + 1);
    for (size_t i = 0; i < total; i++) put(send, t, i, value(t, c->rank, i));
    for (int q = 0; q < c->world; q++)
        for (size_t i = 0; i < mine; i++) put(want, t, (size_t)q * mine + i, value(t, q, off + i));
    ds_comm_stats before = c->stats;
    char *dsend = dev_in(send, total * es), *drecv = dev_in(recv, rn * es);
    CHECK_OK(ds_comm_all_to_allv(c, dsend, drecv, counts, t));
    dev_out(recv, drecv, rn * es);
    dev_out(send, dsend, total * es);
    expect("all_to_allv", recv, want, rn, t, "-", n);
    /* every block but its own, straight to its rank */
    check_stats(c, &before, DS_COLL_ALL_TO_ALL, total - mine, es, "all_to_allv", n);
    free(send);
    free(recv);
    free(want);
}

static void test_all(ds_comm *c) {
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        ds_dtype t = k_types[ti];
        for (size_t ci = 0; ci < sizeof k_counts / sizeof k_counts[0]; ci++) {
            size_t count = k_counts[ci];
            for (int o = 0; o < 3; o++) {
                test_all_reduce(c, t, k_ops[o], count);
                test_reduce_scatter(c, t, k_ops[o], count, false);
                test_reduce_scatter(c, t, k_ops[o], count, true);
                test_reduce_scatterv(c, t, k_ops[o], count, false);
                test_reduce_scatterv(c, t, k_ops[o], count, true);
            }
            test_all_gather(c, t, count, false);
            test_all_gather(c, t, count, true);
            test_all_gatherv(c, t, count);
            test_all_to_allv(c, t, count);
            for (int root = 0; root < c->world; root++) test_broadcast(c, t, count, root);
        }
    }
    CHECK_OK(ds_comm_barrier(c));
    CHECK_OK(ds_comm_barrier(c));
}

/* Host helpers (MPI's own collectives) and agree. */
static void test_host(ds_comm *c) {
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        ds_dtype t = k_types[ti];
        size_t es = ds_dtype_size(t);
        for (int o = 0; o < 3; o++) {
            char buf[7 * 8], want[7 * 8];
            for (size_t i = 0; i < 7; i++) {
                put(buf, t, i, value(t, c->rank, i));
                put(want, t, i, reduced(t, k_ops[o], c->world, i));
            }
            ds_comm_stats before = c->stats;
            CHECK_OK(ds_comm_host_all_reduce(c, buf, 7, t, k_ops[o]));
            expect("host_all_reduce", buf, want, 7, t, k_op_names[o], 7);
            /* the data path's counters stay; the host helpers' own count it */
            CHECK(memcmp(before.calls, c->stats.calls, sizeof before.calls) == 0 &&
                      memcmp(before.bytes_sent, c->stats.bytes_sent, sizeof before.bytes_sent) == 0,
                  "host_all_reduce changed the data-path stats");
            CHECK(c->stats.host_calls == before.host_calls + 1 &&
                      c->stats.host_bytes == before.host_bytes + 7 * es,
                  "host_all_reduce: host_calls %llu -> %llu, host_bytes %llu -> %llu (7 x %zu)",
                  (unsigned long long)before.host_calls, (unsigned long long)c->stats.host_calls,
                  (unsigned long long)before.host_bytes, (unsigned long long)c->stats.host_bytes,
                  es);
        }
    }
    char text[32] = {0};
    if (c->rank == c->world - 1) snprintf(text, sizeof text, "from the last rank");
    CHECK_OK(ds_comm_host_broadcast(c, text, sizeof text, c->world - 1));
    CHECK(strcmp(text, "from the last rank") == 0, "host_broadcast gave \"%s\"", text);

    ds_status worst = DS_ERR_INTERNAL;
    CHECK_OK(ds_comm_agree(c, DS_OK, &worst));
    CHECK(worst == DS_OK, "agree(all OK) gave %s", ds_status_to_string(worst));
    ds_status mine = c->rank == c->world - 1 ? DS_ERR_DATA : DS_OK;
    ds_clear_error();
    if (mine != DS_OK) DS_ERR(mine, "bad line 7 on the last rank");
    CHECK_OK(ds_comm_agree(c, mine, &worst));
    CHECK(worst == DS_ERR_DATA, "agree(last rank DS_ERR_DATA) gave %s", ds_status_to_string(worst));
    /* the others are told who failed and why; the failing rank keeps its own */
    char needle[96];
    if (mine == DS_OK)
        snprintf(needle, sizeof needle, "rank %d failed with DS_ERR_DATA: bad line 7 on the "
                 "last rank", c->world - 1);
    else
        snprintf(needle, sizeof needle, "bad line 7 on the last rank");
    CHECK(strstr(ds_last_error(), needle) != NULL, "agree message \"%s\" lacks \"%s\"",
          ds_last_error(), needle);
    CHECK(mine == DS_OK || !strstr(ds_last_error(), "failed with"),
          "the failing rank's own message was replaced: \"%s\"", ds_last_error());
}

/* Bad arguments come back as DS_ERR_INVALID_ARG, on every rank alike (no
 * communication happens, so no rank is left waiting). */
static void test_bad_args(ds_comm *c) {
    float buf[16] = {0};
    CHECK(ds_comm_broadcast(c, buf, 4, DS_F32, c->world) == DS_ERR_INVALID_ARG,
          "broadcast root == world accepted");
    CHECK(ds_comm_broadcast(c, buf, 4, DS_F32, -1) == DS_ERR_INVALID_ARG, "root -1 accepted");
    CHECK(ds_comm_all_reduce(c, NULL, 4, DS_F32, DS_REDUCE_SUM) == DS_ERR_INVALID_ARG,
          "NULL buffer accepted");
    CHECK(ds_comm_all_reduce(c, buf, 4, (ds_dtype)99, DS_REDUCE_SUM) == DS_ERR_INVALID_ARG,
          "dtype 99 accepted");
    CHECK(ds_comm_all_reduce(c, buf, 4, DS_F32, (ds_reduce_op)7) == DS_ERR_INVALID_ARG,
          "op 7 accepted");
    if (c->world > 1) {
        /* recv overlapping send anywhere but the rank's own block */
        float *send = calloc(4 * (size_t)c->world, sizeof(float));
        float *bad = send + (c->rank == 0 ? 1 : 0);
        CHECK(ds_comm_reduce_scatter(c, send, bad, 4, DS_F32, DS_REDUCE_SUM) ==
                  DS_ERR_INVALID_ARG,
              "reduce_scatter with partially overlapping buffers accepted");
        CHECK(ds_comm_all_gather(c, bad, send, 4, DS_F32) == DS_ERR_INVALID_ARG,
              "all_gather with partially overlapping buffers accepted");
        free(send);
    }
    ds_comm_desc nccl = {.kind = DS_COMM_NCCL};
    ds_comm *none = NULL;
#ifndef DS_HAVE_CUDA
    CHECK(ds_comm_create(&nccl, &none) == DS_ERR_UNSUPPORTED && none == NULL,
          "nccl in a build without CUDA was not DS_ERR_UNSUPPORTED");
    CHECK(strstr(ds_last_error(), "no CUDA module"), "the message says why: %s", ds_last_error());
#else
    (void)nccl;
    (void)none;
#endif
}

int main(void) {
#if defined(DS_TEST_NCCL) || defined(DS_TEST_CUDA)
    /* A CUDA build on a machine without a usable GPU (no device, or a driver
     * older than the runtime): nothing to test, reported as skipped. */
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("test_comm_nccl: no usable CUDA device, skipped\n");
        return 77;
    }
#endif
    ds_comm *c = NULL;
    ds_comm_desc desc = {.kind = TEST_KIND};
#ifdef DS_TEST_STAGED
    /* every rank on device 0 (cuda): the staged path is the one that allows it */
#ifdef DS_TEST_CUDA
    ds_backend_desc bd = {.kind = DS_BACKEND_CUDA, .device = 0, .share_devices = true};
#else
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 1};
#endif
    if (ds_backend_create(&bd, &g_stage_be) != DS_OK) {
        fprintf(stderr, "ds_backend_create: %s\n", ds_last_error());
        return 1;
    }
    desc.stage = true;
    desc.backend = g_stage_be;
    ds_comm *bad = NULL;
    CHECK(ds_comm_create(&(ds_comm_desc){.kind = DS_COMM_MPI, .stage = true}, &bad) ==
                  DS_ERR_INVALID_ARG && !bad,
          "stage without a backend was accepted");
#endif
    ds_status st = ds_comm_create(&desc, &c);
    if (st != DS_OK) {
        fprintf(stderr, "ds_comm_create: %s: %s\n", ds_status_to_string(st), ds_last_error());
        return 1;
    }
    test_set_rank(c->rank);
    if (c->world > 64) { /* the v-collective tests keep counts on the stack */
        fprintf(stderr, "test_comm: at most 64 ranks (got %d)\n", c->world);
        ds_comm_destroy(c);
        return 1;
    }
    int mpi_world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_world);
    CHECK(c->world == mpi_world, "world %d, MPI_COMM_WORLD has %d", c->world, mpi_world);
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    CHECK(env ? c->source == DS_RANKS_MPI : c->source == DS_RANKS_SINGLE,
          "source %s (OMPI_COMM_WORLD_SIZE %s)", ds_rank_source_name(c->source),
          env ? env : "unset");
    CHECK(c->local_rank >= 0 && c->local_rank < c->world, "local rank %d", c->local_rank);
    CHECK(strcmp(c->ops->name, TEST_KIND_NAME) == 0, "ops name %s", c->ops->name);
#ifdef DS_TEST_STAGED
    CHECK(ds_comm_staged(c), "the communicator is not staged");
#else
    CHECK(!ds_comm_staged(c), "the communicator is staged");
#endif

    test_all(c);
    test_host(c);
    test_bad_args(c);
#ifdef DS_TEST_NCCL
    /* a pageable host buffer is refused by name, and the communicator goes on */
    float host[4] = {0};
    ds_clear_error();
    CHECK(ds_comm_all_reduce(c, host, 4, DS_F32, DS_REDUCE_SUM) == DS_ERR_INVALID_ARG &&
              strstr(ds_last_error(), "all_reduce on rank") &&
              strstr(ds_last_error(), "host memory the GPU cannot reach"),
          "nccl with a host buffer: %s", ds_last_error());
    test_all_reduce(c, DS_F32, DS_REDUCE_SUM, 7);
#endif

#ifndef DS_TEST_NCCL
    /* A 256-byte scratch: two 128-byte chunks, so 1000 elements of any type
     * take 8 to 63 chunks, and 7 elements of fp64 two. */
    ds_comm *tiny = NULL;
    ds_comm_desc tiny_desc = desc;
    tiny_desc.scratch_bytes = 256;
    CHECK_OK(ds_comm_create(&tiny_desc, &tiny));
    if (tiny) {
        test_all(tiny);
        ds_comm_destroy(tiny);
    }
    CHECK(ds_comm_create(&(ds_comm_desc){.scratch_bytes = 8}, &tiny) == DS_ERR_INVALID_ARG,
          "an 8-byte scratch was accepted");
#endif
#ifdef DS_TEST_STAGED
    /* a sub-communicator of a staged one stages too (hpZ, MiCS and qgZ's
     * groups are splits) */
    ds_comm *sub = NULL;
    CHECK_OK(ds_comm_split(c, 0, c->world - 1 - c->rank, &sub));
    if (sub) {
        CHECK(ds_comm_staged(sub), "the split communicator is not staged");
        test_all_reduce(sub, DS_F32, DS_REDUCE_SUM, 1001);
        test_all_gather(sub, DS_BF16, 7, true);
        ds_comm_destroy(sub);
    }
#endif
    /* Larger than the default 1 MiB chunk of the default communicator. */
    test_all_reduce(c, DS_F32, DS_REDUCE_SUM, 300001);
    test_reduce_scatter(c, DS_F32, DS_REDUCE_SUM, 300001, true);
    test_all_gather(c, DS_F32, 300001, false);
    test_broadcast(c, DS_F32, 300001, c->world - 1);

    /* Every rank exits with the same verdict. */
    ds_status worst = DS_OK;
    int mine = test_fails();
    CHECK_OK(ds_comm_agree(c, mine ? DS_ERR_INTERNAL : DS_OK, &worst));
    ds_comm_destroy(c);
#ifdef DS_TEST_STAGED
    ds_backend_destroy(g_stage_be);
#endif
    CHECK(mine || worst == DS_OK, "another rank failed (%s)", ds_status_to_string(worst));
    char name[64];
    snprintf(name, sizeof name, "test_comm at world %d", mpi_world);
    return test_finish(name);
}
