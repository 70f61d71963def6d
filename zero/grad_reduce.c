/* In-place bucketed gradient reduction during backward; see grad_reduce.h. */
#include "zero/grad_reduce.h"

#include <stdlib.h>

#include "zero/grad_sparse.h"
#include "zero/zero_util.h"

/* Buckets in flight at once. A module larger than the cap gives several
 * buckets at its end (BERT-mini's 5.5M-element embedding, the last to finish,
 * is 11 buckets of 5e5): enough slots that they all queue at once rather
 * than backward waiting for the first ones to land. The ring only bounds
 * host memory for the jobs (about 1.3 KB each). */
#define NSLOT 64

typedef struct slot {
    ds_comm_job job;
    size_t *counts; /* [world], reduce-scatter blocks */
    bool busy;
} slot;

struct ds_grad_reduce {
    ds_backend *be;
    ds_comm *comm;
    ds_comm_worker *w;
    const ds_flat *flat;
    ds_dtype gt;
    void *grads;
    ds_grad_reduce_kind kind;
    int64_t cap;
    bool per_module;
    ds_grad_sparse *sparse; /* sparse_gradients' row-sparse parameters, else NULL */
    slot s[NSLOT];
    int next;
    /* [cursor, used) is final; [cursor, hi) of it is collected but not yet
     * submitted; [hi, used) is submitted. */
    int64_t cursor, hi;
    bool started;  /* a bucket was submitted since reset */
    bool finished; /* everything submitted and landed */
};

static ds_status wait_slot(ds_grad_reduce *g, slot *k) {
    if (!k->busy) return DS_OK;
    k->busy = false;
    DS_TRY(ds_comm_job_wait(g->w, &k->job));
    return DS_OK;
}

static ds_status wait_all(ds_grad_reduce *g) {
    ds_status first = DS_OK;
    for (int i = 0; i < NSLOT; i++) { /* wait for all, report the first failure */
        ds_status st = wait_slot(g, &g->s[(g->next + i) % NSLOT]);
        if (st != DS_OK && first == DS_OK) first = st;
    }
    if (g->sparse) {
        ds_status st = ds_grad_sparse_wait(g->sparse, g->w);
        if (st != DS_OK && first == DS_OK) first = st;
    }
    DS_TRY(first);
    return DS_OK;
}

/* Reduce [lo, hi) in place, densely. */
static ds_status submit_dense(ds_grad_reduce *g, int64_t lo, int64_t hi) {
    if (hi <= lo) return DS_OK;
    slot *k = &g->s[g->next];
    DS_TRY(wait_slot(g, k)); /* its previous bucket must have landed */
    ds_comm_job *j = &k->job;
    void *base = ds_at(g->grads, g->gt, lo);
    if (g->kind == DS_GRAD_ALL_REDUCE) {
        *j = (ds_comm_job){.kind = DS_JOB_ALL_REDUCE, .buf = base, .count = (size_t)(hi - lo),
                           .t = g->gt};
    } else {
        ds_zero_counts(g->flat, lo, hi, k->counts);
        size_t mine = ds_zero_block_offset(k->counts, g->comm->rank);
        /* in place: the receive block is this rank's block of the bucket */
        *j = (ds_comm_job){.kind = DS_JOB_REDUCE_SCATTERV, .send = base,
                           .buf = ds_at(base, g->gt, (int64_t)mine), .counts = k->counts,
                           .t = g->gt};
    }
    /* named in a timeout ("gradient bucket of modules 3-5 of 12 (...)") */
    ds_zero_describe_range(g->flat, lo, hi, "gradient bucket", j->what, sizeof j->what);
    DS_TRY(ds_comm_job_submit(g->w, j));
    k->busy = true;
    g->next = (g->next + 1) % NSLOT;
    return DS_OK;
}

/* Reduce [lo, hi) in place: the row-sparse parameters in it by their own
 * exchange (grad_sparse.h), queued when the bucket holding a parameter's
 * first element comes (buckets come downwards, so all of it is final then),
 * the rest densely around them. */
static ds_status submit(ds_grad_reduce *g, int64_t lo, int64_t hi) {
    g->started = true;
    if (g->comm->world == 1 || hi <= lo) return DS_OK; /* the sum over one rank */
    int64_t a, b;
    int which;
    while (g->sparse && hi > lo && ds_grad_sparse_overlap(g->sparse, lo, hi, &a, &b, &which)) {
        DS_TRY(submit_dense(g, b > lo ? b : lo, hi));
        if (a >= lo) DS_TRY(ds_grad_sparse_submit(g->sparse, g->w, which));
        hi = a > lo ? a : lo;
    }
    DS_TRY(submit_dense(g, lo, hi));
    return DS_OK;
}

ds_status ds_grad_reduce_create(ds_backend *be, ds_comm *comm, const ds_flat *f, ds_dtype gt,
                                void *grads, ds_grad_reduce_kind kind, int64_t cap,
                                bool per_module, bool threaded, ds_grad_reduce **out) {
    *out = NULL;
    ds_grad_reduce *g = calloc(1, sizeof *g);
    if (!g) return DS_ERR(DS_ERR_OOM, "gradient reduction: out of host memory");
    *g = (ds_grad_reduce){.be = be, .comm = comm, .flat = f, .gt = gt, .grads = grads,
                          .kind = kind, .cap = cap > 0 ? cap : 1, .per_module = per_module,
                          .cursor = f->used, .hi = f->used};
    ds_status st = DS_OK;
    for (int i = 0; st == DS_OK && i < NSLOT; i++)
        st = ds_mem_host_alloc(be->mem, DS_MEM_OTHER, (size_t)f->world * sizeof(size_t),
                               "bucket block counts", (void **)&g->s[i].counts);
    if (st == DS_OK) st = ds_comm_worker_create(comm, threaded, &g->w);
    if (st != DS_OK) {
        ds_grad_reduce_destroy(g);
        DS_TRY(st);
    }
    *out = g;
    return DS_OK;
}

ds_comm_worker *ds_grad_reduce_worker(ds_grad_reduce *g) { return g->w; }

ds_status ds_grad_reduce_sparse(ds_grad_reduce *g) {
    if (g->sparse || g->comm->world == 1) return DS_OK; /* one rank: nothing to exchange */
    DS_TRY(ds_grad_sparse_create(g->be, g->comm, g->flat, g->gt, g->grads,
                                 g->kind == DS_GRAD_REDUCE_SCATTER ? DS_SPARSE_REPLICA_PART
                                                                   : DS_SPARSE_REPLICA_ALL,
                                 &g->sparse));
    return DS_OK;
}

void ds_grad_reduce_destroy(ds_grad_reduce *g) {
    if (!g) return;
    ds_comm_worker_destroy(g->w); /* joins the thread: no job still runs */
    ds_grad_sparse_destroy(g->sparse);
    for (int i = 0; i < NSLOT; i++)
        ds_mem_host_free(g->be->mem, DS_MEM_OTHER, g->s[i].counts,
                         (size_t)g->flat->world * sizeof(size_t));
    free(g);
}

ds_status ds_grad_reduce_ready(ds_grad_reduce *g, int64_t begin, int64_t end, bool module_end) {
    if (end <= begin) return DS_OK;
    if (g->finished || end != g->cursor)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_backward: this step's gradients were already "
                      "reduced by an earlier backward of its last micro-batch (with "
                      "gradient_accumulation_steps = k, call ds_step after each ds_backward; "
                      "the k-th reduces)");
    g->cursor = begin;
    while (g->hi - g->cursor >= g->cap) {
        DS_TRY(submit(g, g->hi - g->cap, g->hi));
        g->hi -= g->cap;
    }
    /* a module's end, or the model's start: what is left goes now */
    if (((g->per_module && module_end) || g->cursor == 0) && g->hi > g->cursor) {
        DS_TRY(submit(g, g->cursor, g->hi));
        g->hi = g->cursor;
    }
    return DS_OK;
}

ds_status ds_grad_reduce_finish(ds_grad_reduce *g) {
    if (!g->finished) {
        /* everything below hi: the collected rest and what was never marked */
        while (g->hi > 0) {
            int64_t len = g->hi < g->cap ? g->hi : g->cap;
            DS_TRY(submit(g, g->hi - len, g->hi));
            g->hi -= len;
        }
        g->cursor = 0;
        g->started = true;
        g->finished = true;
    }
    DS_TRY(wait_all(g));
    return DS_OK;
}

bool ds_grad_reduce_started(const ds_grad_reduce *g) { return g->started; }

ds_status ds_grad_reduce_grad_done(ds_grad_reduce *g, ds_replica *rep, bool final_backward,
                                   int m, int64_t lo, int64_t hi) {
    DS_TRY(ds_replica_grad_done(rep, m, lo, hi));
    if (final_backward)
        DS_TRY(ds_grad_reduce_ready(g, lo, hi, lo == rep->flat->modules[m].begin));
    return DS_OK;
}

ds_status ds_grad_reduce_zero_grad(ds_grad_reduce *g, ds_replica *rep) {
    DS_TRY(ds_grad_reduce_reset(g)); /* nothing in flight writes the replica */
    DS_TRY(ds_replica_zero_grad(rep));
    return DS_OK;
}

ds_status ds_grad_reduce_reset(ds_grad_reduce *g) {
    ds_status st = wait_all(g);
    g->cursor = g->hi = g->flat->used;
    g->started = g->finished = false;
    DS_TRY(st);
    return DS_OK;
}
