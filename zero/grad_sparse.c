/* Row-sparse gradient exchange; see grad_sparse.h. */
#include "zero/grad_sparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/rows_math.h"
#include "zero/zero_util.h"

/* The gradients, the records and what the backend's rows slots read are the
 * backend's memory (the GPU's on cuda); the row lists and the merge are
 * planned in host memory, from the flags and indices copied back. A rank's
 * block of the gathered records is its n row indices (int32, 4 / es
 * elements each) then its n rows: n x rec elements, as one record per row
 * would be, but with the indices together so one copy brings them back. */
typedef struct sparse_param {
    ds_grad_sparse *gs;
    int param;                /* index in the flat table */
    int64_t offset, rows, cols;
    size_t rec;               /* elements (gt) per row in a block: its index, the row */
    /* host */
    uint8_t *flags_h;         /* [rows] the scan's flags */
    int32_t *nz;              /* [rows] this rank's nonzero rows, ascending */
    int32_t *idx_h;           /* [rows] every rank's rows, block after block */
    int64_t *pos;             /* [world] the next row of each rank's block, while planning */
    int32_t *nrows;           /* [world] the ranks' nonzero rows */
    size_t *counts;           /* [world] gather blocks (elements of gt) */
    int32_t *row_h;           /* [rows] the plan (ds_rows_sum): each output's row, */
    uint8_t *all_h;           /* [rows] whether every rank sent it, */
    int64_t *first_h;         /* [rows + 1] its contributions' range, */
    int64_t *src_h;           /* [rows] and where each contribution lies in recs */
    /* the backend's */
    uint8_t *flags;           /* [rows] */
    int32_t *cnt;             /* [1 + world]: this rank's count, then every rank's */
    void *recs;               /* [rows * rec] the gathered blocks */
    int32_t *row;             /* [rows] the plan, as above */
    uint8_t *all;             /* [rows] */
    int64_t *first;           /* [rows + 1] */
    int64_t *src;             /* [rows] */
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

bool ds_grad_sparse_applies(const ds_config *c, char *why, size_t cap) {
    why[0] = '\0';
    if (!c->sparse_gradients) return false;
    if (c->onebit != DS_ONEBIT_NONE)
        snprintf(why, cap, "sparse_gradients: ignored with optimizer.type %s (its compressed "
                 "steps exchange momentum, not gradients)",
                 c->onebit == DS_ONEBIT_ADAM ? "OneBitAdam" : "ZeroOneAdam");
    return why[0] == '\0';
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

/* The table as this rank sends it: the whole of it at src, or under
 * REPLICAS its elements inside the partition (the rows' others zero). */
static ds_rows_view send_view(const sparse_param *p, void *src) {
    const ds_grad_sparse *gs = p->gs;
    ds_rows_view v = {.base = src, .t = gs->gt, .lo = p->offset,
                      .hi = p->offset + p->rows * p->cols, .offset = p->offset, .cols = p->cols};
    if (gs->kind == DS_SPARSE_REPLICAS)
        v.base = gs->grads, v.lo = gs->part_lo, v.hi = gs->part_hi;
    return v;
}

/* Where the sums go (grad_sparse.h): REPLICA_ALL every row of the
 * replica; the other kinds only the table's elements inside this rank's
 * partition, in the replica (REPLICA_PART) or in the partition itself. */
static ds_rows_view sum_view(const sparse_param *p) {
    const ds_grad_sparse *gs = p->gs;
    int64_t lo = p->offset, hi = p->offset + p->rows * p->cols;
    if (gs->kind != DS_SPARSE_REPLICA_ALL) {
        lo = lo > gs->part_lo ? lo : gs->part_lo;
        hi = hi < gs->part_hi ? hi : gs->part_hi;
        hi = hi > lo ? hi : lo;
    }
    int64_t at = gs->kind == DS_SPARSE_REPLICA_ALL || gs->kind == DS_SPARSE_REPLICA_PART
                     ? lo : lo - gs->part_lo; /* the replica, or the partition */
    return (ds_rows_view){.base = ds_at(gs->grads, gs->gt, at), .t = gs->gt, .lo = lo, .hi = hi,
                          .offset = p->offset, .cols = p->cols};
}

/* The merge of the gathered blocks into the sums' plan: every row some
 * rank sent, ascending (each rank's block is: a merge), with its
 * contributions in rank order. Returns the outputs. */
static int64_t plan_sums(sparse_param *p) {
    int world = p->gs->comm->world;
    size_t idxw = 4 / ds_dtype_size(p->gs->gt);
    int64_t nout = 0, m = 0;
    for (int q = 0; q < world; q++) p->pos[q] = 0;
    for (;;) {
        int32_t r = INT32_MAX;
        int have = 0; /* ranks whose next row is r */
        for (int q = 0, at = 0; q < world; at += p->nrows[q], q++) {
            if (p->pos[q] >= p->nrows[q]) continue;
            int32_t rq = p->idx_h[at + p->pos[q]];
            if (rq < r) r = rq, have = 1;
            else if (rq == r) have++;
        }
        if (r == INT32_MAX) break;
        p->row_h[nout] = r;
        p->all_h[nout] = have == world;
        p->first_h[nout] = m;
        int64_t blk = 0; /* rank q's block in recs (elements) */
        for (int q = 0, at = 0; q < world; at += p->nrows[q], q++) {
            if (p->pos[q] < p->nrows[q] && p->idx_h[at + p->pos[q]] == r) {
                p->src_h[m++] = blk + (int64_t)p->nrows[q] * (int64_t)idxw + p->pos[q] * p->cols;
                p->pos[q]++;
            }
            blk += (int64_t)p->nrows[q] * (int64_t)p->rec;
        }
        nout++;
    }
    p->first_h[nout] = m;
    return nout;
}

/* grad_sparse.h steps 1-4 for parameter p whose gradient is at src (gt;
 * REPLICAS: the partition's slice); on the communication thread with
 * overlap_comm. */
static ds_status exchange_from(sparse_param *p, void *src) {
    ds_grad_sparse *gs = p->gs;
    ds_backend *be = gs->be;
    ds_comm *c = gs->comm;
    size_t es = ds_dtype_size(gs->gt), idxw = 4 / es;
    int64_t r0, r1;
    scan_rows(p, &r0, &r1);
    ds_rows_view v = send_view(p, src);
    DS_TRY(be->ops->rows_nonzero(be, &v, r0, r1, p->flags));
    DS_TRY(ds_zero_fetch(be, p->flags_h, p->flags, (size_t)(r1 - r0)));
    int32_t n = 0;
    for (int64_t r = r0; r < r1; r++)
        if (p->flags_h[r - r0]) p->nz[n++] = (int32_t)r;
    DS_TRY(ds_zero_put(be, p->cnt, &n, 4));
    DS_TRY(ds_comm_all_gather(c, p->cnt, p->cnt + 1, 1, DS_I32));
    DS_TRY(ds_zero_fetch(be, p->nrows, p->cnt + 1, (size_t)c->world * 4));
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
    DS_TRY(ds_zero_put(be, mine, p->nz, (size_t)n * 4));
    DS_TRY(be->ops->rows_gather(be, &v, mine, n, mine + (size_t)n * idxw * es));
    for (int q = 0; q < c->world; q++) p->counts[q] = (size_t)p->nrows[q] * p->rec;
    DS_TRY(ds_comm_all_gatherv(c, p->recs, p->counts, gs->gt));
    size_t blk = 0, at = 0; /* every block's indices back, block after block */
    for (int q = 0; q < c->world; q++) {
        DS_TRY(be->ops->memcpy(be, p->idx_h + at, (char *)p->recs + blk * es,
                               (size_t)p->nrows[q] * 4, DS_COPY_D2H, NULL));
        at += (size_t)p->nrows[q];
        blk += p->counts[q];
    }
    DS_TRY(be->ops->sync(be));
    int64_t nout = plan_sums(p);
    DS_TRY(ds_zero_put(be, p->row, p->row_h, (size_t)nout * 4));
    DS_TRY(ds_zero_put(be, p->all, p->all_h, (size_t)nout));
    DS_TRY(ds_zero_put(be, p->first, p->first_h, (size_t)(nout + 1) * 8));
    DS_TRY(ds_zero_put(be, p->src, p->src_h, (size_t)p->first_h[nout] * 8));
    ds_rows_sum sum = {.dst = sum_view(p), .add = gs->kind == DS_SPARSE_PARTITION_ADD,
                       .recs = p->recs, .nout = nout, .row = p->row, .all = p->all,
                       .first = p->first, .src = p->src};
    return be->ops->rows_sum(be, &sum);
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

/* One sparse parameter's buffers (init_param): host (the scan's flags, the
 * row lists, the plan, the per-rank counts) or the backend's (the same
 * flags and plan, the counts, the records). */
static uint64_t param_bytes(int64_t rows, int64_t cols, ds_dtype gt, int world, bool host) {
    uint64_t es = ds_dtype_size(gt), w = (uint64_t)world, r = (uint64_t)rows;
    uint64_t plan = r * (4 + 1 + 8 + 8) + 8; /* row, all, first, src */
    if (host) return r * (1 + 4 + 4) + plan + w * (8 + 4 + sizeof(size_t));
    return r + (1 + w) * 4 + r * (4 / es + (uint64_t)cols) * es + plan;
}

/* Each buffer of p: its pointer, bytes, host or the backend's, and name. */
#define DS_SPARSE_BUFFERS 17
typedef struct buffer {
    void **at;
    size_t bytes;
    bool host;
    const char *what;
} buffer;

static int buffers_of(sparse_param *p, size_t world, size_t es, buffer *b) {
    size_t rows = (size_t)p->rows, plan[4] = {rows * 4, rows, (rows + 1) * 8, rows * 8};
    buffer list[] = {
        {(void **)&p->flags_h, rows, true, "sparse gradient row flags"},
        {(void **)&p->nz, rows * 4, true, "sparse gradient rows"},
        {(void **)&p->idx_h, rows * 4, true, "sparse gradient gathered rows"},
        {(void **)&p->pos, world * 8, true, "sparse gradient merge"},
        {(void **)&p->nrows, world * 4, true, "sparse gradient row counts"},
        {(void **)&p->counts, world * sizeof(size_t), true, "sparse gradient blocks"},
        {(void **)&p->row_h, plan[0], true, "sparse gradient plan"},
        {(void **)&p->all_h, plan[1], true, "sparse gradient plan"},
        {(void **)&p->first_h, plan[2], true, "sparse gradient plan"},
        {(void **)&p->src_h, plan[3], true, "sparse gradient plan"},
        {(void **)&p->flags, rows, false, NULL},
        {(void **)&p->cnt, (1 + world) * 4, false, NULL},
        {(void **)&p->recs, rows * p->rec * es, false, NULL},
        {(void **)&p->row, plan[0], false, NULL},
        {(void **)&p->all, plan[1], false, NULL},
        {(void **)&p->first, plan[2], false, NULL},
        {(void **)&p->src, plan[3], false, NULL},
    };
    _Static_assert(sizeof list / sizeof list[0] == DS_SPARSE_BUFFERS, "one entry per buffer");
    memcpy(b, list, sizeof list);
    return DS_SPARSE_BUFFERS;
}

static ds_status init_param(ds_grad_sparse *gs, int i, sparse_param *p) {
    const ds_flat_param *fp = &gs->flat->params[i];
    size_t es = ds_dtype_size(gs->gt);
    *p = (sparse_param){.gs = gs, .param = i, .offset = fp->offset, .rows = fp->desc->shape[0]};
    p->cols = fp->numel / p->rows;
    p->rec = 4 / es + (size_t)p->cols;
    buffer b[DS_SPARSE_BUFFERS];
    int n = buffers_of(p, (size_t)gs->comm->world, es, b);
    for (int k = 0; k < n; k++) {
        if (b[k].host)
            DS_TRY(ds_mem_host_alloc(gs->be->mem, DS_MEM_BUFFERS, b[k].bytes, b[k].what, b[k].at));
        else
            DS_TRY(ds_backend_alloc(gs->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, b[k].bytes, b[k].at));
    }
    return DS_OK;
}

static bool is_sparse(const ds_flat *f, int i) {
    const ds_flat_param *fp = &f->params[i];
    /* a tied table's gradient has the using module's dense part in every row */
    return fp->desc->row_sparse_grad && ds_flat_tied_index(f, i) < 0 && fp->desc->shape[0] > 0 &&
           fp->desc->shape[0] <= INT32_MAX;
}

uint64_t ds_grad_sparse_bytes(const ds_flat *f, ds_dtype gt, int world, bool host) {
    uint64_t total = 0;
    for (int i = 0; i < f->n_params; i++) {
        if (!is_sparse(f, i)) continue;
        int64_t rows = f->params[i].desc->shape[0];
        total += param_bytes(rows, f->params[i].numel / rows, gt, world, host);
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
    size_t es = ds_dtype_size(gs->gt);
    for (int i = 0; i < gs->n; i++) {
        buffer b[DS_SPARSE_BUFFERS];
        int n = buffers_of(&gs->p[i], (size_t)gs->world, es, b);
        for (int k = 0; k < n; k++) {
            if (b[k].host) ds_mem_host_free(gs->be->mem, DS_MEM_BUFFERS, *b[k].at, b[k].bytes);
            else ds_backend_free(gs->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, *b[k].at, b[k].bytes);
        }
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
