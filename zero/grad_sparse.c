/* Row-sparse gradient exchange; see grad_sparse.h. */
#include "zero/grad_sparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "zero/zero_util.h"

typedef struct sparse_param {
    ds_grad_sparse *gs;
    int param;                /* index in the flat table */
    int64_t offset, rows, cols;
    size_t rec;               /* record elements (gt): index, then the row */
    int32_t *nz;              /* [rows] this rank's nonzero rows, ascending */
    int32_t *seen;            /* [rows] contributors per row, during a sum */
    int32_t *nrows;           /* [world] the ranks' nonzero rows */
    size_t *counts;           /* [world] gather blocks (elements of gt) */
    void *recs;               /* [rows * rec] the gathered records */
    ds_comm_job job;
    bool busy;
} sparse_param;

struct ds_grad_sparse {
    ds_backend *be;
    ds_comm *comm;
    const ds_flat *flat;
    ds_dtype gt;
    void *grads;
    bool scatter;
    int64_t part_lo, part_hi; /* this rank's partition (scatter) */
    int n;
    sparse_param *p;          /* ascending flat offsets */
    ds_grad_sparse_stats stats;
};

bool ds_grad_sparse_applies(const ds_config *c, bool cpu_backend, char *why, size_t cap) {
    why[0] = '\0';
    if (!c->sparse_gradients) return false;
    if (c->zero_stage >= 2)
        snprintf(why, cap, "sparse_gradients: ignored at zero_optimization.stage %d (DeepSpeed "
                 "sends rows only in stage 0's all-reduce; here stages 0 and 1)", c->zero_stage);
    else if (c->onebit != DS_ONEBIT_NONE)
        snprintf(why, cap, "sparse_gradients: ignored with optimizer.type %s (its compressed "
                 "steps exchange momentum, not gradients)",
                 c->onebit == DS_ONEBIT_ADAM ? "OneBitAdam" : "ZeroOneAdam");
    else if (!cpu_backend)
        snprintf(why, cap, "sparse_gradients: ignored on this backend (the row scan runs on "
                 "the cpu backend only so far); gradients are all-reduced dense");
    return why[0] == '\0';
}

/* Whether any bit of the row is set: a row of +0.0 only is left out. */
static bool row_nonzero(const unsigned char *row, size_t bytes) {
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t v;
        memcpy(&v, row + i, 8);
        if (v) return true;
    }
    for (; i < bytes; i++)
        if (row[i]) return true;
    return false;
}

static ds_status dense(sparse_param *p) {
    ds_grad_sparse *gs = p->gs;
    int64_t lo = p->offset, hi = p->offset + p->rows * p->cols;
    void *base = ds_at(gs->grads, gs->gt, lo);
    if (!gs->scatter) {
        DS_TRY(ds_comm_all_reduce(gs->comm, base, (size_t)(hi - lo), gs->gt, DS_REDUCE_SUM));
        return DS_OK;
    }
    ds_zero_counts(gs->flat, lo, hi, p->counts); /* as grad_reduce's reduce-scatter */
    size_t mine = ds_zero_block_offset(p->counts, gs->comm->rank);
    DS_TRY(ds_comm_reduce_scatterv(gs->comm, base, ds_at(base, gs->gt, (int64_t)mine), p->counts,
                                   gs->gt, DS_REDUCE_SUM));
    return DS_OK;
}

/* Elements [*e0, *e1) of row r that this rank sums: the whole row, or at
 * stage 1 its part inside the partition (false: none). */
static bool row_span(const sparse_param *p, int64_t r, int64_t *e0, int64_t *e1) {
    const ds_grad_sparse *gs = p->gs;
    int64_t a = p->offset + r * p->cols, b = a + p->cols;
    if (gs->scatter) {
        if (a < gs->part_lo) a = gs->part_lo;
        if (b > gs->part_hi) b = gs->part_hi;
    }
    *e0 = a;
    *e1 = b;
    return a < b;
}

/* Add every gathered record into the gradient, rank by rank (grad_sparse.h:
 * the start value and the rounding). */
static void sum_records(sparse_param *p, int64_t total) {
    ds_grad_sparse *gs = p->gs;
    ds_dtype t = gs->gt;
    size_t es = ds_dtype_size(t);
    const char *recs = p->recs;
    int world = gs->comm->world;
    for (int64_t k = 0; k < total; k++) { /* contributors per row */
        int32_t r;
        memcpy(&r, recs + (size_t)k * p->rec * es, 4);
        p->seen[r] = 0;
    }
    for (int64_t k = 0; k < total; k++) {
        int32_t r;
        memcpy(&r, recs + (size_t)k * p->rec * es, 4);
        p->seen[r]++;
    }
    size_t idx = 4 / es; /* index elements before the row */
    for (int64_t k = 0; k < total; k++) {
        const char *rec = recs + (size_t)k * p->rec * es;
        int32_t r;
        memcpy(&r, rec, 4);
        int64_t e0, e1;
        if (!row_span(p, r, &e0, &e1)) continue;
        int64_t col0 = e0 - (p->offset + (int64_t)r * p->cols);
        if (p->seen[r] > 0) { /* the first record of row r: the start value */
            float start = p->seen[r] == world ? -0.0f : 0.0f;
            for (int64_t e = e0; e < e1; e++) ds_store_f32(gs->grads, t, (size_t)e, start);
            p->seen[r] = -1;
        }
        for (int64_t e = e0; e < e1; e++) {
            float v = ds_load_f32(rec, t, idx + (size_t)(col0 + e - e0));
            float acc = ds_load_f32(gs->grads, t, (size_t)e);
            ds_store_f32(gs->grads, t, (size_t)e, acc + v);
        }
    }
}

/* The job (grad_sparse.h steps 1-4); on the communication thread with
 * overlap_comm. */
static ds_status exchange(void *arg) {
    sparse_param *p = arg;
    ds_grad_sparse *gs = p->gs;
    ds_comm *c = gs->comm;
    size_t es = ds_dtype_size(gs->gt), row_bytes = (size_t)p->cols * es;
    const char *g = ds_at(gs->grads, gs->gt, p->offset);
    int32_t n = 0;
    for (int64_t r = 0; r < p->rows; r++)
        if (row_nonzero((const unsigned char *)g + (size_t)r * row_bytes, row_bytes))
            p->nz[n++] = (int32_t)r;
    DS_TRY(ds_comm_all_gather(c, &n, p->nrows, 1, DS_I32));
    int64_t total = 0, before = 0;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) before = total;
        total += p->nrows[q];
    }
    if (total > p->rows) { /* past break-even: dense, on every rank alike */
        gs->stats.dense_steps++;
        DS_TRY(dense(p));
        return DS_OK;
    }
    char *mine = (char *)p->recs + (size_t)before * p->rec * es;
    for (int32_t k = 0; k < n; k++) {
        char *rec = mine + (size_t)k * p->rec * es;
        memcpy(rec, &p->nz[k], 4);
        memcpy(rec + 4, g + (size_t)p->nz[k] * row_bytes, row_bytes);
    }
    for (int q = 0; q < c->world; q++) p->counts[q] = (size_t)p->nrows[q] * p->rec;
    DS_TRY(ds_comm_all_gatherv(c, p->recs, p->counts, gs->gt));
    sum_records(p, total);
    gs->stats.sparse_steps++;
    gs->stats.rows_sent += (uint64_t)n;
    return DS_OK;
}

static ds_status init_param(ds_grad_sparse *gs, int i, sparse_param *p) {
    const ds_flat_param *fp = &gs->flat->params[i];
    size_t es = ds_dtype_size(gs->gt), world = (size_t)gs->comm->world;
    *p = (sparse_param){.gs = gs, .param = i, .offset = fp->offset, .rows = fp->desc->shape[0]};
    p->cols = fp->numel / p->rows;
    p->rec = 4 / es + (size_t)p->cols;
    ds_mem *m = gs->be->mem;
    size_t rows = (size_t)p->rows;
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, rows * 4, "sparse gradient rows",
                             (void **)&p->nz));
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, rows * 4, "sparse gradient row marks",
                             (void **)&p->seen));
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, world * 4, "sparse gradient row counts",
                             (void **)&p->nrows));
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, world * sizeof(size_t),
                             "sparse gradient blocks", (void **)&p->counts));
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, rows * p->rec * es, "sparse gradient records",
                             &p->recs));
    return DS_OK;
}

static bool is_sparse(const ds_flat *f, int i) {
    const ds_flat_param *fp = &f->params[i];
    /* a tied table's gradient has the using module's dense part in every row */
    return fp->desc->row_sparse_grad && ds_flat_tied_index(f, i) < 0 && fp->desc->shape[0] > 0 &&
           fp->desc->shape[0] <= INT32_MAX;
}

uint64_t ds_grad_sparse_bytes(const ds_flat *f, ds_dtype gt, int world) {
    uint64_t total = 0, es = ds_dtype_size(gt);
    for (int i = 0; i < f->n_params; i++) {
        if (!is_sparse(f, i)) continue;
        uint64_t rows = (uint64_t)f->params[i].desc->shape[0];
        uint64_t cols = (uint64_t)f->params[i].numel / rows;
        total += rows * 8 + rows * (4 / es + cols) * es + (uint64_t)world * (4 + sizeof(size_t));
    }
    return total;
}

ds_status ds_grad_sparse_create(ds_backend *be, ds_comm *comm, const ds_flat *f, ds_dtype gt,
                                void *grads, bool scatter, ds_grad_sparse **out) {
    *out = NULL;
    int n = 0;
    for (int i = 0; i < f->n_params; i++) n += is_sparse(f, i);
    if (n == 0) return DS_OK;
    ds_grad_sparse *gs = calloc(1, sizeof *gs);
    sparse_param *p = calloc((size_t)n, sizeof *p);
    if (!gs || !p) {
        free(gs);
        free(p);
        return DS_ERR(DS_ERR_OOM, "sparse_gradients: out of host memory");
    }
    *gs = (ds_grad_sparse){.be = be, .comm = comm, .flat = f, .gt = gt, .grads = grads,
                           .scatter = scatter, .part_lo = (int64_t)comm->rank * f->part,
                           .part_hi = (int64_t)(comm->rank + 1) * f->part, .p = p};
    ds_status st = DS_OK;
    for (int i = 0; st == DS_OK && i < f->n_params; i++)
        if (is_sparse(f, i)) st = init_param(gs, i, &gs->p[gs->n++]);
    if (st != DS_OK) {
        ds_grad_sparse_destroy(gs);
        DS_TRY(st);
    }
    *out = gs;
    return DS_OK;
}

void ds_grad_sparse_destroy(ds_grad_sparse *gs) {
    if (!gs) return;
    ds_mem *m = gs->be->mem;
    size_t es = ds_dtype_size(gs->gt), world = (size_t)gs->comm->world;
    for (int i = 0; i < gs->n; i++) {
        sparse_param *p = &gs->p[i];
        size_t rows = (size_t)p->rows;
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->nz, rows * 4);
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->seen, rows * 4);
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->nrows, world * 4);
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->counts, world * sizeof(size_t));
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->recs, rows * p->rec * es);
    }
    free(gs->p);
    free(gs);
}

bool ds_grad_sparse_overlap(const ds_grad_sparse *gs, int64_t lo, int64_t hi, int64_t *a,
                            int64_t *b, int *which) {
    for (int i = gs->n - 1; i >= 0; i--) {
        const sparse_param *p = &gs->p[i];
        int64_t pa = p->offset, pb = p->offset + p->rows * p->cols;
        if (pa < hi && pb > lo) {
            *a = pa;
            *b = pb;
            *which = i;
            return true;
        }
    }
    return false;
}

ds_status ds_grad_sparse_submit(ds_grad_sparse *gs, ds_comm_worker *w, int which) {
    sparse_param *p = &gs->p[which];
    if (p->busy) { /* the previous step's exchange: reset waits, so only a misuse */
        p->busy = false;
        DS_TRY(ds_comm_job_wait(w, &p->job));
    }
    p->job = (ds_comm_job){.kind = DS_JOB_FN, .fn = exchange, .arg = p};
    snprintf(p->job.what, sizeof p->job.what, "sparse gradient of %s",
             gs->flat->params[p->param].desc->name);
    DS_TRY(ds_comm_job_submit(w, &p->job));
    p->busy = true;
    return DS_OK;
}

ds_status ds_grad_sparse_wait(ds_grad_sparse *gs, ds_comm_worker *w) {
    ds_status first = DS_OK;
    for (int i = 0; i < gs->n; i++) {
        sparse_param *p = &gs->p[i];
        if (!p->busy) continue;
        p->busy = false;
        ds_status st = ds_comm_job_wait(w, &p->job);
        if (st != DS_OK && first == DS_OK) first = st;
    }
    DS_TRY(first);
    return DS_OK;
}

void ds_grad_sparse_get_stats(const ds_grad_sparse *gs, ds_grad_sparse_stats *out) {
    if (gs) *out = gs->stats;
    else *out = (ds_grad_sparse_stats){0};
}
