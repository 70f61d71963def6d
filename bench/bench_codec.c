/* What the 1-bit codec costs (engine/comm/codec.h), apart from the wire:
 * CPU time (CLOCK_PROCESS_CPUTIME_ID, so the machine's load does not count)
 * of one encode with error feedback, one decode, and one whole compressed
 * all-reduce (ds_comm_all_reduce_coded: the encode, the all_to_all, the
 * servers' decode and re-encode, the all_gather, the final decode; MPI's
 * polling while a peer is slow counts too), against an fp32 ring
 * all-reduce of the same vector (ds_comm_all_reduce), medians of REPS.
 *
 *   mpirun -np 2 bench/bench_codec [N] [TENSORS] [REPS]
 *
 * N elements (default 4,250,000: train_cls's default BERT) cut into TENSORS
 * equal segments (default 70), each with its own scale. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/comm/codec.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : 4250000;
    int nseg = argc > 2 ? atoi(argv[2]) : 70, reps = argc > 3 ? atoi(argv[3]) : 7;
    if (nseg < 1 || reps < 1 || n < (size_t)nseg) return 2;
    ds_comm *c = NULL;
    ds_comm_desc d = {.kind = DS_COMM_MPI};
    if (ds_comm_create(&d, &c) != DS_OK) {
        fprintf(stderr, "bench_codec: %s\n", ds_last_error());
        return 1;
    }
    ds_backend *be = NULL; /* the codec's slots: cpu, one thread (CPU time is the measure) */
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 1};
    if (ds_backend_create(&bd, &be) != DS_OK) {
        fprintf(stderr, "bench_codec: %s\n", ds_last_error());
        return 1;
    }
    size_t *segs = malloc((size_t)nseg * sizeof *segs);
    for (int k = 0; k < nseg; k++) segs[k] = n / (size_t)nseg + (k < (int)(n % (size_t)nseg));
    ds_coded_layout l = ds_coded_layout_of(&ds_codec_onebit, segs, nseg, c->world);
    float *buf = malloc(n * 4), *x = malloc(l.padded * 4), *out = malloc(l.padded * 4);
    float *we = calloc(l.worker_n, 4), *se = calloc(l.server_n, 4), *e1 = calloc(l.padded, 4);
    unsigned char *wire = malloc(ds_codec_onebit.wire_bytes(l.padded));
    ds_coded_scratch *s = NULL;
    if (!buf || !x || !out || !we || !se || !e1 || !wire ||
        ds_coded_scratch_create(&ds_codec_onebit, be, segs, nseg, c->world, &s) != DS_OK)
        return 1;
    for (size_t i = 0; i < l.padded; i++)
        x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    double *t = malloc((size_t)reps * sizeof *t), enc, dec, coded, ring;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        if (ds_codec_onebit.encode(be, x, e1, l.padded, 1, wire, 0) != DS_OK) return 1;
        t[r] = cpu_now() - t0;
    }
    enc = median(t, reps);
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        if (ds_codec_onebit.decode(be, wire, l.padded, 1.0f, false, out) != DS_OK) return 1;
        t[r] = cpu_now() - t0;
    }
    dec = median(t, reps);
    for (int r = 0; r < reps; r++) {
        for (size_t i = 0; i < n; i++) buf[i] = x[i];
        double t0 = cpu_now();
        if (ds_comm_all_reduce_coded(c, buf, n, &ds_codec_onebit, we, se, s) != DS_OK) return 1;
        t[r] = cpu_now() - t0;
    }
    coded = median(t, reps);
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        if (ds_comm_all_reduce(c, buf, n, DS_F32, DS_REDUCE_SUM) != DS_OK) return 1;
        t[r] = cpu_now() - t0;
    }
    ring = median(t, reps);
    if (c->rank == 0)
        printf("bench_codec: %zu elements in %d tensors, world %d, CPU ms (median of %d): "
               "encode %.1f, decode %.1f, coded all-reduce %.1f (%zu bytes per peer and "
               "phase), fp32 ring all-reduce %.1f (%zu bytes per peer and phase)\n",
               n, nseg, c->world, reps, enc * 1e3, dec * 1e3, coded * 1e3, l.region,
               ring * 1e3, n * 4 / (size_t)c->world);
    ds_coded_scratch_destroy(s);
    ds_backend_destroy(be);
    ds_comm_destroy(c);
    free(segs), free(buf), free(x), free(out), free(we), free(se), free(e1), free(wire), free(t);
    return 0;
}
