/* The updated parameters' all-gather in chunks behind the forward; see
 * param_gather.h. */
#include "zero/param_gather.h"

#include <stdlib.h>

#include "zero/zero_util.h"

/* Chunks queued ahead of the last one waited for. The worker's queue holds
 * 256 jobs; a model cut into more chunks than that would block the
 * boundary until most of them had landed. A window keeps the queue short
 * and the link busy: the forward tops it up at every fetch. */
#define WINDOW 64

/* At most this many chunks: each takes a job and a row of block counts in
 * host memory, and their count is an int. A 1B-parameter model reaches it
 * with chunks of 1,000 elements, far below any useful allgather_bucket_size. */
#define MAX_CHUNKS (1 << 20)

struct ds_param_gather {
    ds_backend *be;
    ds_comm_worker *w;
    const ds_flat *f;
    void *params;
    ds_dtype pt;
    int n;             /* chunks, in flat order */
    int64_t *lo;       /* [n] each chunk's first element */
    ds_comm_job *jobs; /* [n] */
    size_t *counts;    /* [n * world]: chunk k's block per rank */
    int queued;        /* chunks [0, queued) of this round were submitted */
    int waited;        /* chunks [0, waited) of this round were waited for */
};

static size_t jobs_bytes(const ds_param_gather *g) { return (size_t)g->n * sizeof *g->jobs; }
static size_t lo_bytes(const ds_param_gather *g) { return (size_t)g->n * sizeof *g->lo; }
static size_t counts_bytes(const ds_param_gather *g) {
    return (size_t)g->n * (size_t)g->f->world * sizeof *g->counts;
}

/* The chunks of [0, padded) outside the skipped ranges: each stretch between
 * them cut every cap elements. With lo NULL only counts them. */
static int cut(const ds_flat *f, int64_t cap, const int64_t (*skip)[2], int n_skip, int64_t *lo,
               int64_t *hi) {
    int n = 0;
    int64_t a = 0;
    for (int s = 0; s <= n_skip; s++) {
        int64_t b = s < n_skip ? skip[s][0] : f->padded;
        for (int64_t x = a; x < b; x += cap, n++)
            if (lo) {
                lo[n] = x;
                hi[n] = x + cap < b ? x + cap : b;
            }
        if (s < n_skip) a = skip[s][1];
    }
    return n;
}

ds_status ds_param_gather_create(ds_backend *be, ds_comm *comm, ds_comm_worker *w,
                                 const ds_flat *f, void *params, ds_dtype pt, int64_t cap,
                                 const int64_t (*skip)[2], int n_skip, ds_param_gather **out) {
    *out = NULL;
    cap = cap > 0 ? cap : 1;
    if (comm->world > 1 && f->padded / cap + n_skip + 1 > MAX_CHUNKS) /* a bound of cut's count */
        return DS_ERR(DS_ERR_CONFIG, "zero_optimization.allgather_bucket_size %lld cuts the %lld "
                      "parameters into more than %d chunks; give at least %lld",
                      (long long)cap, (long long)f->padded, MAX_CHUNKS,
                      (long long)(f->padded / (MAX_CHUNKS - n_skip - 1) + 1));
    ds_param_gather *g = calloc(1, sizeof *g);
    if (!g) return DS_ERR(DS_ERR_OOM, "parameter all-gather: out of host memory");
    *g = (ds_param_gather){.be = be, .w = w, .f = f, .params = params, .pt = pt,
                           .n = comm->world > 1 ? cut(f, cap, skip, n_skip, NULL, NULL) : 0};
    ds_status st = DS_OK;
    int64_t *hi = NULL;
    if (g->n > 0) {
        st = ds_mem_host_alloc(be->mem, DS_MEM_OTHER, jobs_bytes(g), "parameter gather jobs",
                               (void **)&g->jobs);
        if (st == DS_OK)
            st = ds_mem_host_alloc(be->mem, DS_MEM_OTHER, counts_bytes(g),
                                   "parameter gather block counts", (void **)&g->counts);
        if (st == DS_OK)
            st = ds_mem_host_alloc(be->mem, DS_MEM_OTHER, lo_bytes(g), "parameter gather chunks",
                                   (void **)&g->lo);
        if (st == DS_OK && !(hi = malloc(lo_bytes(g))))
            st = DS_ERR(DS_ERR_OOM, "parameter all-gather: out of host memory");
        if (st == DS_OK) cut(f, cap, skip, n_skip, g->lo, hi);
    }
    for (int k = 0; st == DS_OK && k < g->n; k++) {
        size_t *counts = g->counts + (size_t)k * (size_t)f->world;
        ds_zero_counts(f, g->lo[k], hi[k], counts);
        ds_comm_job *j = &g->jobs[k];
        /* in place: this rank's block of the chunk is already its own */
        *j = (ds_comm_job){.kind = DS_JOB_ALL_GATHERV, .buf = ds_at(params, pt, g->lo[k]),
                           .counts = counts, .t = pt};
        /* named in a timeout ("updated parameters of modules 3-5 of 12 (...)") */
        ds_zero_describe_range(f, g->lo[k], hi[k], "updated parameters", j->what,
                               sizeof j->what);
    }
    free(hi);
    if (st != DS_OK) {
        ds_param_gather_destroy(g);
        DS_TRY(st);
    }
    g->queued = g->waited = g->n; /* nothing in flight */
    *out = g;
    return DS_OK;
}

void ds_param_gather_destroy(ds_param_gather *g) {
    if (!g) return;
    if (g->jobs) ds_mem_host_free(g->be->mem, DS_MEM_OTHER, g->jobs, jobs_bytes(g));
    if (g->counts) ds_mem_host_free(g->be->mem, DS_MEM_OTHER, g->counts, counts_bytes(g));
    if (g->lo) ds_mem_host_free(g->be->mem, DS_MEM_OTHER, g->lo, lo_bytes(g));
    free(g);
}

/* Keep WINDOW chunks queued ahead of the last one waited for. */
static ds_status top_up(ds_param_gather *g) {
    while (g->queued < g->n && g->queued < g->waited + WINDOW) {
        DS_TRY(ds_comm_job_submit(g->w, &g->jobs[g->queued]));
        g->queued++;
    }
    return DS_OK;
}

ds_status ds_param_gather_wait(ds_param_gather *g, int64_t end) {
    while (g->waited < g->n && g->lo[g->waited] < end) {
        DS_TRY(top_up(g)); /* the chunk waited for next is queued */
        int k = g->waited++;
        /* a failure stays in the job: a later wait meets the worker's first
         * failure again in the next chunk */
        DS_TRY(ds_comm_job_wait(g->w, &g->jobs[k]));
    }
    DS_TRY(top_up(g));
    return DS_OK;
}

ds_status ds_param_gather_start(ds_param_gather *g) {
    DS_TRY(ds_param_gather_wait(g, g->f->padded));
    g->queued = g->waited = 0;
    DS_TRY(top_up(g));
    return DS_OK;
}
