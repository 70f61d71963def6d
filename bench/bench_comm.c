/* Bus bandwidth of the engine's host collectives against Open MPI's own, in
 * the same run.
 *
 *   mpirun -np 2 --bind-to core --mca btl self,vader build/bench/bench_comm \
 *       [--mib 256] [--iters 5] [--warmup 2] [--chunk BYTES] [--scratch BYTES]
 *       [--verbose 1 (every iteration's time)]
 *
 * Bandwidths follow nccl-tests: S is the size of the whole buffer (256 MiB:
 * the reduce-scatter input, the all-gather output, the all-reduce buffer),
 * algbw = S / time, busbw = algbw * 2(N-1)/N for all_reduce and (N-1)/N for
 * reduce_scatter and all_gather, which is what each rank's link carries, so
 * numbers compare across world sizes. GB = 1e9 bytes. A time is the slowest
 * rank's, after a barrier; the table shows the median of the timed iterations.
 * Inputs are small integers, so every result is checked exactly once. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "engine/comm/comm.h"

typedef struct opts {
    size_t mib, chunk, scratch;
    int iters, warmup, verbose;
} opts;

typedef enum { RS, AG, AG_IN_PLACE, AR, NWHICH } which;
static const char *const k_names[NWHICH] = {"reduce_scatter", "all_gather",
                                            "all_gather (in place)", "all_reduce"};
static const char *const k_mpi_names[NWHICH] = {"MPI_Reduce_scatter_block", "MPI_Allgather",
                                                "MPI_Allgather, MPI_IN_PLACE", "MPI_Allreduce"};

typedef struct ctx {
    ds_comm *c;
    float *send, *recv, *buf;
    size_t count; /* whole buffer, elements */
    int rank, world;
} ctx;

/* One call of `w`, by the engine (engine != 0) or by Open MPI. */
static int run_once(ctx *x, which w, int engine) {
    size_t blk = x->count / (size_t)x->world;
    float *mine = x->send + (size_t)x->rank * blk, *mine_in_recv = x->recv + (size_t)x->rank * blk;
    if (engine) {
        ds_status st = DS_OK;
        if (w == RS) st = ds_comm_reduce_scatter(x->c, x->send, x->recv, blk, DS_F32, DS_REDUCE_SUM);
        if (w == AG) st = ds_comm_all_gather(x->c, mine, x->recv, blk, DS_F32);
        if (w == AG_IN_PLACE) st = ds_comm_all_gather(x->c, mine_in_recv, x->recv, blk, DS_F32);
        if (w == AR) st = ds_comm_all_reduce(x->c, x->buf, x->count, DS_F32, DS_REDUCE_SUM);
        if (st != DS_OK) {
            fprintf(stderr, "rank %d: %s\n", x->rank, ds_last_error());
            return 1;
        }
        return 0;
    }
    int rc = MPI_SUCCESS;
    if (w == RS)
        rc = MPI_Reduce_scatter_block(x->send, x->recv, (int)blk, MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD);
    if (w == AG)
        rc = MPI_Allgather(mine, (int)blk, MPI_FLOAT, x->recv, (int)blk, MPI_FLOAT,
                           MPI_COMM_WORLD);
    if (w == AG_IN_PLACE)
        rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x->recv, (int)blk, MPI_FLOAT,
                           MPI_COMM_WORLD);
    if (w == AR)
        rc = MPI_Allreduce(MPI_IN_PLACE, x->buf, (int)x->count, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
    return rc != MPI_SUCCESS;
}

/* Inputs: rank r's element i is (i + r) % 8; sums are exact. */
static void fill(ctx *x) {
    for (size_t i = 0; i < x->count; i++) {
        x->send[i] = (float)((i + (size_t)x->rank) % 8);
        x->buf[i] = x->send[i];
        x->recv[i] = -1.0f;
    }
}

/* Untimed: what each call needs in place before it starts. */
static void prepare(ctx *x, which w) {
    size_t blk = x->count / (size_t)x->world;
    if (w == AR) memcpy(x->buf, x->send, x->count * sizeof(float));
    if (w == AG_IN_PLACE)
        memcpy(x->recv + (size_t)x->rank * blk, x->send + (size_t)x->rank * blk,
               blk * sizeof(float));
}

static float sum_at(const ctx *x, size_t i) {
    float s = 0;
    for (int r = 0; r < x->world; r++) s += (float)((i + (size_t)r) % 8);
    return s;
}

/* The result of one call of `w` must be exact (checked at a stride). */
static int verify(ctx *x, which w, const char *who) {
    size_t blk = x->count / (size_t)x->world;
    size_t stride = 4093; /* prime: visits every block and offset pattern */
    for (size_t i = 0; i < (w == RS ? blk : x->count); i += stride) {
        float got, want;
        if (w == RS) {
            got = x->recv[i];
            want = sum_at(x, (size_t)x->rank * blk + i);
        } else if (w == AR) {
            got = x->buf[i];
            want = sum_at(x, i);
        } else { /* element i came from rank i / blk's send[i] */
            got = x->recv[i];
            want = (float)((i + i / blk) % 8);
        }
        if (got != want) {
            fprintf(stderr, "rank %d: %s %s wrong at %zu: %g, expected %g\n", x->rank, who,
                    k_names[w], i, got, want);
            return 1;
        }
    }
    return 0;
}

/* Time of one call: the slowest rank's, started together after a barrier. */
static double time_once(ctx *x, which w, int engine, int check, int *err) {
    prepare(x, w);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    *err |= run_once(x, w, engine);
    double dt = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (check) *err |= verify(x, w, engine ? "engine" : "Open MPI");
    return slowest;
}

/* The engine and Open MPI alternate call by call, so both see the same
 * machine: on a shared host, memory bandwidth comes and goes for seconds. */
static void measure(ctx *x, which w, const opts *o, double *te, double *tm, int *err) {
    double *e = calloc((size_t)o->iters, sizeof *e), *m = calloc((size_t)o->iters, sizeof *m);
    for (int it = -o->warmup; it < o->iters && !*err; it++) {
        double a = time_once(x, w, 1, it == -o->warmup, err);
        double b = time_once(x, w, 0, it == -o->warmup, err);
        if (it >= 0) {
            e[it] = a;
            m[it] = b;
        }
        if (o->verbose && x->rank == 0)
            printf("  %s iteration %d: engine %.2f ms, Open MPI %.2f ms\n", k_names[w], it,
                   a * 1e3, b * 1e3);
    }
    int any = *err;
    MPI_Allreduce(&any, err, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    *te = median_sort(e, o->iters);
    *tm = median_sort(m, o->iters);
    free(e);
    free(m);
}

static size_t parse_size(const char *s) { return (size_t)strtoull(s, NULL, 0); }

int main(int argc, char **argv) {
    opts o = {.mib = 256, .chunk = 0, .scratch = 0, .iters = 5, .warmup = 2};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib")) o.mib = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) o.chunk = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--scratch")) o.scratch = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) o.iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) o.warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--verbose")) o.verbose = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_comm: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (o.iters < 1) o.iters = 1;
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI, .chunk_bytes = o.chunk, .scratch_bytes = o.scratch};
    if (ds_comm_create(&d, &c) != DS_OK) {
        fprintf(stderr, "ds_comm_create: %s\n", ds_last_error());
        return 1;
    }
    ctx x = {.c = c, .rank = c->rank, .world = c->world};
    x.count = o.mib * ((size_t)1 << 20) / sizeof(float) / (size_t)c->world * (size_t)c->world;
    x.send = malloc(x.count * sizeof(float));
    x.recv = malloc(x.count * sizeof(float));
    x.buf = malloc(x.count * sizeof(float));
    if (!x.send || !x.recv || !x.buf) {
        fprintf(stderr, "bench_comm: out of memory for %zu MiB buffers\n", o.mib);
        return 1;
    }
    fill(&x); /* also faults every page in before timing */

    double n = c->world;
    double bytes = (double)x.count * sizeof(float);
    int err = 0;
    if (x.rank == 0) {
        printf("bench_comm: %d ranks, %.0f MiB fp32 per buffer, median of %d (+%d warmup), "
               "chunk %s\n",
               c->world, bytes / (1 << 20), o.iters, o.warmup,
               o.chunk ? "as given" : "default");
        printf("| collective | engine busbw GB/s | Open MPI busbw GB/s | Open MPI call | engine / "
               "Open MPI |\n");
        printf("| --- | ---: | ---: | --- | ---: |\n");
    }
    for (int w = 0; w < NWHICH && !err; w++) {
        double te, tm;
        measure(&x, (which)w, &o, &te, &tm, &err);
        double factor = (w == AR ? 2 : 1) * (n - 1) / n;
        double be = bytes / te * factor / 1e9, bm = bytes / tm * factor / 1e9;
        if (x.rank == 0 && !err)
            printf("| %s | %.2f | %.2f | %s | %.2fx |\n", k_names[w], be, bm, k_mpi_names[w],
                   be / bm);
        fflush(stdout);
    }
    free(x.send);
    free(x.recv);
    free(x.buf);
    ds_comm_destroy(c);
    return err;
}
