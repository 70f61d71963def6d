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
    int64_t *pos;             /* [world] the next record of each rank's block, during a sum */
    float *acc;               /* [cols] one row's sum over the ranks */
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
    void *grads;              /* REPLICA_*: the replica; PARTITION_ADD, REPLICAS: the
                               * partition */
    ds_grad_sparse_kind kind;
    int64_t part_lo, part_hi; /* this rank's partition */
    int world;                /* comm's, kept for destroy: stage 3 frees MiCS's shard
                               * group before its gradient buckets */
    int n;
    sparse_param *p;          /* ascending flat offsets */
};

bool ds_grad_sparse_applies(const ds_config *c, bool cpu_backend, char *why, size_t cap) {
    why[0] = '\0';
    if (!c->sparse_gradients) return false;
    if (c->onebit != DS_ONEBIT_NONE)
        snprintf(why, cap, "sparse_gradients: ignored with optimizer.type %s (its compressed "
                 "steps exchange momentum, not gradients)",
                 c->onebit == DS_ONEBIT_ADAM ? "OneBitAdam" : "ZeroOneAdam");
    else if (!cpu_backend)
        snprintf(why, cap, "sparse_gradients: ignored on this backend (the row scan runs on "
                 "the cpu backend only so far); gradients are reduced dense");
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

/* Past break-even: the dense collective the buckets would have run. src:
 * the parameter's gradient (gt), modified in place. */
static ds_status dense(sparse_param *p, void *src) {
    ds_grad_sparse *gs = p->gs;
    int64_t lo = p->offset, hi = p->offset + p->rows * p->cols;
    if (gs->kind == DS_SPARSE_REPLICAS) { /* the partition's slice of the table */
        if (lo < gs->part_lo) lo = gs->part_lo;
        if (hi > gs->part_hi) hi = gs->part_hi;
        if (hi > lo)
            DS_TRY(ds_comm_all_reduce(gs->comm, ds_at(gs->grads, gs->gt, lo - gs->part_lo),
                                      (size_t)(hi - lo), gs->gt, DS_REDUCE_SUM));
        return DS_OK;
    }
    if (gs->kind == DS_SPARSE_REPLICA_ALL) {
        DS_TRY(ds_comm_all_reduce(gs->comm, src, (size_t)(hi - lo), gs->gt, DS_REDUCE_SUM));
        return DS_OK;
    }
    ds_zero_counts(gs->flat, lo, hi, p->counts); /* as the buckets' reduce-scatter */
    int rank = gs->comm->rank;
    size_t mine = ds_zero_block_offset(p->counts, rank);
    void *recv = ds_at(src, gs->gt, (int64_t)mine);
    DS_TRY(ds_comm_reduce_scatterv(gs->comm, src, recv, p->counts, gs->gt, DS_REDUCE_SUM));
    if (gs->kind == DS_SPARSE_PARTITION_ADD && p->counts[rank] > 0) { /* as grad_buckets' */
        int64_t dst = (lo > gs->part_lo ? lo : gs->part_lo) - gs->part_lo;
        DS_TRY(gs->be->ops->axpy(gs->be, ds_at(gs->grads, gs->gt, dst), gs->gt, 1.0f, recv,
                                 gs->gt, p->counts[rank]));
    }
    return DS_OK;
}

/* x rounded to the gradient type, as a ring hop stores its sum. */
static float round_to(ds_dtype t, float x) {
    if (t == DS_F16) return ds_f16_to_f32(ds_f32_to_f16(x));
    if (t == DS_BF16) return ds_bf16_to_f32(ds_f32_to_bf16(x));
    return x;
}

/* Every gathered record into the gradient, row by row in ascending order
 * (each rank's block is ascending: a merge), each row's records in rank
 * order (grad_sparse.h: the start value and the rounding). REPLICA_*: the
 * sum replaces the row (stage 1: its part in the partition);
 * PARTITION_ADD: it is added to the partition's elements of the row, as
 * the dense path adds a reduce-scatter's block. */
static void sum_records(sparse_param *p) {
    ds_grad_sparse *gs = p->gs;
    ds_dtype t = gs->gt;
    size_t es = ds_dtype_size(t), rec_bytes = p->rec * es, idx = 4 / es;
    const char *recs = p->recs;
    int world = gs->comm->world;
    int64_t at = 0;
    for (int q = 0; q < world; q++) { /* pos[q]: rank q's next record */
        p->pos[q] = at;
        at += p->nrows[q];
    }
    for (;;) {
        int32_t r = INT32_MAX;
        int have = 0; /* ranks whose next record is row r */
        at = 0;       /* block starts again: rank q's block is [at, at + nrows[q]) */
        for (int q = 0; q < world; q++) {
            int64_t next = p->pos[q], stop = at + p->nrows[q];
            at = stop;
            if (next >= stop) continue;
            int32_t rq;
            memcpy(&rq, recs + (size_t)next * rec_bytes, 4);
            if (rq < r) r = rq, have = 1;
            else if (rq == r) have++;
        }
        if (r == INT32_MAX) break;
        int64_t a = p->offset + (int64_t)r * p->cols, b = a + p->cols, e0 = a, e1 = b;
        if (gs->kind != DS_SPARSE_REPLICA_ALL) { /* only the partition's elements */
            if (e0 < gs->part_lo) e0 = gs->part_lo;
            if (e1 > gs->part_hi) e1 = gs->part_hi;
        }
        float start = have == world ? -0.0f : 0.0f;
        for (int64_t e = e0; e < e1; e++) p->acc[e - a] = start;
        at = 0;
        for (int q = 0; q < world; q++) {
            int64_t next = p->pos[q], stop = at + p->nrows[q];
            at = stop;
            if (next >= stop) continue;
            const char *rec = recs + (size_t)next * rec_bytes;
            int32_t rq;
            memcpy(&rq, rec, 4);
            if (rq != r) continue;
            for (int64_t e = e0; e < e1; e++)
                p->acc[e - a] =
                    round_to(t, p->acc[e - a] + ds_load_f32(rec, t, idx + (size_t)(e - a)));
            p->pos[q] = next + 1;
        }
        for (int64_t e = e0; e < e1; e++) {
            if (gs->kind == DS_SPARSE_PARTITION_ADD) {
                size_t d = (size_t)(e - gs->part_lo);
                ds_store_f32(gs->grads, t, d, ds_load_f32(gs->grads, t, d) + p->acc[e - a]);
            } else if (gs->kind == DS_SPARSE_REPLICAS) {
                ds_store_f32(gs->grads, t, (size_t)(e - gs->part_lo), p->acc[e - a]);
            } else {
                ds_store_f32(gs->grads, t, (size_t)e, p->acc[e - a]);
            }
        }
    }
}

/* The rows [*r0, *r1) of p a sum can touch: all of them, or under
 * REPLICAS those that meet the partition. */
static void scan_rows(const sparse_param *p, int64_t *r0, int64_t *r1) {
    const ds_grad_sparse *gs = p->gs;
    *r0 = 0;
    *r1 = p->rows;
    if (gs->kind != DS_SPARSE_REPLICAS) return;
    int64_t lo = gs->part_lo - p->offset, hi = gs->part_hi - p->offset;
    *r0 = lo > 0 ? lo / p->cols : 0;
    *r1 = hi < p->rows * p->cols ? (hi + p->cols - 1) / p->cols : p->rows;
    if (*r0 > p->rows) *r0 = p->rows;
    if (*r1 < *r0) *r1 = *r0;
}

/* Row r of p's gradient as this rank sends it: the elements [*e0, *e1) of
 * the flat space and where they are. The whole row at src, or under
 * REPLICAS its elements inside the partition (the record's others zero). */
static const char *row_slice(const sparse_param *p, const char *src, int64_t r, int64_t *e0,
                             int64_t *e1) {
    const ds_grad_sparse *gs = p->gs;
    size_t es = ds_dtype_size(gs->gt);
    int64_t a = p->offset + r * p->cols, b = a + p->cols;
    if (gs->kind != DS_SPARSE_REPLICAS) {
        *e0 = a, *e1 = b;
        return src + (size_t)r * p->cols * es;
    }
    *e0 = a > gs->part_lo ? a : gs->part_lo;
    *e1 = b < gs->part_hi ? b : gs->part_hi;
    return (const char *)gs->grads + (size_t)(*e0 - gs->part_lo) * es;
}

/* grad_sparse.h steps 1-4 for parameter p whose gradient is at src (gt;
 * REPLICAS: the partition's slice); on the communication thread with
 * overlap_comm. */
static ds_status exchange_from(sparse_param *p, void *src) {
    ds_grad_sparse *gs = p->gs;
    ds_comm *c = gs->comm;
    size_t es = ds_dtype_size(gs->gt), row_bytes = (size_t)p->cols * es;
    int32_t n = 0;
    int64_t r0, r1, e0, e1;
    scan_rows(p, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *g = row_slice(p, src, r, &e0, &e1);
        if (e1 > e0 && row_nonzero((const unsigned char *)g, (size_t)(e1 - e0) * es))
            p->nz[n++] = (int32_t)r;
    }
    DS_TRY(ds_comm_all_gather(c, &n, p->nrows, 1, DS_I32));
    int64_t total = 0, before = 0;
    for (int q = 0; q < c->world; q++) {
        if (q == c->rank) before = total;
        total += p->nrows[q];
    }
    if (total > r1 - r0) { /* past break-even: dense, on every rank alike */
        DS_TRY(dense(p, src));
        return DS_OK;
    }
    char *mine = (char *)p->recs + (size_t)before * p->rec * es;
    for (int32_t k = 0; k < n; k++) {
        char *rec = mine + (size_t)k * p->rec * es;
        const char *g = row_slice(p, src, p->nz[k], &e0, &e1);
        int64_t a = p->offset + (int64_t)p->nz[k] * p->cols;
        memcpy(rec, &p->nz[k], 4);
        if (e1 - e0 < p->cols) memset(rec + 4, 0, row_bytes);
        memcpy(rec + 4 + (size_t)(e0 - a) * es, g, (size_t)(e1 - e0) * es);
    }
    for (int q = 0; q < c->world; q++) p->counts[q] = (size_t)p->nrows[q] * p->rec;
    DS_TRY(ds_comm_all_gatherv(c, p->recs, p->counts, gs->gt));
    sum_records(p);
    return DS_OK;
}

/* The job of the replica kinds: the gradient is the replica's. */
static ds_status exchange(void *arg) {
    sparse_param *p = arg;
    return exchange_from(p, ds_at(p->gs->grads, p->gs->gt, p->offset));
}

ds_status ds_grad_sparse_reduce_add(ds_grad_sparse *gs, int which, void *src) {
    DS_TRY(exchange_from(&gs->p[which], src));
    return DS_OK;
}

ds_status ds_grad_sparse_replicas(ds_grad_sparse *gs) {
    int64_t lo = gs->part_lo, hi = gs->part_hi, a, b;
    int which;
    while (hi > lo && ds_grad_sparse_overlap(gs, lo, hi, &a, &b, &which)) {
        int64_t d = b > lo ? b : lo; /* the dense piece above the table */
        if (hi > d)
            DS_TRY(ds_comm_all_reduce(gs->comm, ds_at(gs->grads, gs->gt, d - gs->part_lo),
                                      (size_t)(hi - d), gs->gt, DS_REDUCE_SUM));
        DS_TRY(exchange_from(&gs->p[which], gs->grads));
        hi = a;
    }
    if (hi > lo)
        DS_TRY(ds_comm_all_reduce(gs->comm, gs->grads, (size_t)(hi - lo), gs->gt,
                                  DS_REDUCE_SUM));
    return DS_OK;
}

/* Host bytes of one sparse parameter's buffers (init_param). */
static uint64_t param_bytes(int64_t rows, int64_t cols, ds_dtype gt, int world) {
    uint64_t es = ds_dtype_size(gt), w = (uint64_t)world;
    return (uint64_t)rows * 4 + (uint64_t)cols * 4 + w * (8 + 4 + sizeof(size_t)) +
           (uint64_t)rows * (4 / es + (uint64_t)cols) * es;
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
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, (size_t)p->cols * 4, "sparse gradient row sum",
                             (void **)&p->acc));
    DS_TRY(ds_mem_host_alloc(m, DS_MEM_BUFFERS, world * 8, "sparse gradient merge",
                             (void **)&p->pos));
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
    uint64_t total = 0;
    for (int i = 0; i < f->n_params; i++) {
        if (!is_sparse(f, i)) continue;
        int64_t rows = f->params[i].desc->shape[0];
        total += param_bytes(rows, f->params[i].numel / rows, gt, world);
    }
    return total;
}

static ds_status create(ds_backend *be, ds_comm *comm, const ds_flat *f, int part, ds_dtype gt,
                        void *grads, ds_grad_sparse_kind kind, ds_grad_sparse **out) {
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
                           .kind = kind, .part_lo = (int64_t)part * f->part,
                           .part_hi = (int64_t)(part + 1) * f->part,
                           .world = comm->world, .p = p};
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

ds_status ds_grad_sparse_create(ds_backend *be, ds_comm *comm, const ds_flat *f, ds_dtype gt,
                                void *grads, ds_grad_sparse_kind kind, ds_grad_sparse **out) {
    DS_TRY(create(be, comm, f, comm->rank, gt, grads, kind, out));
    return DS_OK;
}

ds_status ds_grad_sparse_create_replicas(ds_backend *be, ds_comm *comm, const ds_flat *f,
                                         int part, ds_dtype gt, void *grads,
                                         ds_grad_sparse **out) {
    DS_TRY(create(be, comm, f, part, gt, grads, DS_SPARSE_REPLICAS, out));
    return DS_OK;
}

void ds_grad_sparse_destroy(ds_grad_sparse *gs) {
    if (!gs) return;
    ds_mem *m = gs->be->mem;
    size_t es = ds_dtype_size(gs->gt), world = (size_t)gs->world;
    for (int i = 0; i < gs->n; i++) {
        sparse_param *p = &gs->p[i];
        size_t rows = (size_t)p->rows;
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->nz, rows * 4);
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->acc, (size_t)p->cols * 4);
        ds_mem_host_free(m, DS_MEM_BUFFERS, p->pos, world * 8);
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
