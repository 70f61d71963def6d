/* Only the rows the next micro-batch reads, gathered after the update; see
 * param_rows.h. */
#include "zero/param_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/rows_math.h"
#include "zero/zero_util.h"

typedef struct table {
    int param;          /* index into the flat parameters */
    int64_t off, numel; /* its flat range */
    int64_t R, L;       /* rows, elements per row */
    uint8_t *fresh;     /* [R] 1: this rank holds the row's updated values */
    uint8_t *seen;      /* [R] scratch of the union */
    int32_t *req;       /* [R] rows this rank asks for */
    int32_t n_req;
    int32_t *ids;       /* [world * R] every rank's asked rows, rank-major */
    int32_t *n_all;     /* [world] rows each rank asks for (-1: the whole table) */
    int32_t *uni;       /* [R] the union, ascending */
    int32_t *lists;     /* [cap_rows] the rows each rank's block holds, rank-major */
    size_t *n_rows;     /* [world] how many */
    /* The backend's memory: what the collectives carry (device buffers on
     * cuda) and what the rows slots read. */
    int32_t *d_n;       /* [1 + world] this rank's count, then every rank's */
    int32_t *d_ids;     /* [world * R] every rank's asked rows, then the blocks' lists */
    void *packed;       /* [cap_rows * L] pt: the blocks, rank-major */
    int64_t cap_rows;   /* a partition's worth of rows: past it, the whole table */
    size_t *counts;     /* [world] */
    bool whole;         /* gathered whole this round: every row fresh */
} table;

typedef enum { ROUND_NONE = 0, ROUND_GATED, ROUND_RUNNING, ROUND_DONE } round_state;

struct ds_param_rows {
    ds_backend *be;
    ds_comm *comm;
    ds_comm_worker *w;
    const ds_flat *f;
    void *params;
    ds_dtype pt;
    int n;
    table *t;
    ds_comm_job job;
    round_state state;
    bool want_whole; /* the posted batch was NULL: every table whole */
    bool whole;      /* every table was gathered whole this round: nothing more to ask */
    /* Stage 3's window (ds_param_rows_window): no replica; the rows go into
     * a buffer holding flat [win_lo, win_hi), packed from `own`, this
     * rank's partition. win NULL: the replica at params. */
    void *win;
    int64_t win_lo, win_hi;
    const void *own;
    /* what the exchange's collectives are for, named in a timeout; not the
     * job's `what`, which the worker would put before the collective's own
     * message naming it again */
    char what[256];
};

/* ---- host memory, tagged in the accountant ---- */

static ds_status halloc(ds_param_rows *r, size_t bytes, const char *what, void **p) {
    return ds_mem_host_alloc(r->be->mem, DS_MEM_OTHER, bytes ? bytes : 1, what, p);
}

static void hfree(ds_param_rows *r, void *p, size_t bytes) {
    if (p) ds_mem_host_free(r->be->mem, DS_MEM_OTHER, p, bytes ? bytes : 1);
}

static size_t es(const ds_param_rows *r) { return ds_dtype_size(r->pt); }

static ds_status table_alloc(ds_param_rows *r, table *t) {
    size_t R = (size_t)t->R, W = (size_t)r->f->world;
    DS_TRY(halloc(r, R, "row table: fresh rows", (void **)&t->fresh));
    DS_TRY(halloc(r, R, "row table: union scratch", (void **)&t->seen));
    DS_TRY(halloc(r, R * 4, "row table: asked rows", (void **)&t->req));
    DS_TRY(halloc(r, W * R * 4, "row table: every rank's rows", (void **)&t->ids));
    DS_TRY(halloc(r, W * 4, "row table: row counts", (void **)&t->n_all));
    DS_TRY(halloc(r, R * 4, "row table: union", (void **)&t->uni));
    DS_TRY(halloc(r, (size_t)t->cap_rows * 4, "row table: blocks' rows", (void **)&t->lists));
    DS_TRY(halloc(r, W * sizeof(size_t), "row table: blocks' row counts", (void **)&t->n_rows));
    DS_TRY(halloc(r, W * sizeof(size_t), "row table: block counts", (void **)&t->counts));
    DS_TRY(ds_backend_alloc(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, (1 + W) * 4,
                            (void **)&t->d_n));
    DS_TRY(ds_backend_alloc(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, W * R * 4,
                            (void **)&t->d_ids));
    DS_TRY(ds_backend_alloc(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE,
                            (size_t)(t->cap_rows * t->L) * es(r), &t->packed));
    return DS_OK;
}

static void table_free(ds_param_rows *r, table *t) {
    size_t R = (size_t)t->R, W = (size_t)r->f->world;
    hfree(r, t->fresh, R);
    hfree(r, t->seen, R);
    hfree(r, t->req, R * 4);
    hfree(r, t->ids, W * R * 4);
    hfree(r, t->n_all, W * 4);
    hfree(r, t->uni, R * 4);
    hfree(r, t->lists, (size_t)t->cap_rows * 4);
    hfree(r, t->n_rows, W * sizeof(size_t));
    hfree(r, t->counts, W * sizeof(size_t));
    if (t->d_n) ds_backend_free(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, t->d_n, (1 + W) * 4);
    if (t->d_ids) ds_backend_free(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, t->d_ids, W * R * 4);
    if (t->packed)
        ds_backend_free(r->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, t->packed,
                        (size_t)(t->cap_rows * t->L) * es(r));
}

/* ---- rows and partitions ---- */

/* Row u's piece inside rank q's partition: [*b, *e) flat, false if none. */
static bool piece(const ds_param_rows *r, const table *t, int64_t u, int q, int64_t *b,
                  int64_t *e) {
    int64_t lo = t->off + u * t->L, hi = lo + t->L;
    int64_t plo = (int64_t)q * r->f->part, phi = plo + r->f->part;
    *b = lo > plo ? lo : plo;
    *e = hi < phi ? hi : phi;
    return *b < *e;
}

static bool owned(const ds_param_rows *r, const table *t, int64_t u) {
    int64_t b, e;
    return piece(r, t, u, r->comm->rank, &b, &e) && e - b == t->L;
}

/* ---- the exchange, on the communication thread ---- */

static ds_status gather_whole(ds_param_rows *r, table *t) {
    ds_zero_counts(r->f, t->off, t->off + t->numel, t->counts);
    void *at = r->win ? ds_at(r->win, r->pt, t->off - r->win_lo) : ds_at(r->params, r->pt, t->off);
    DS_TRY(ds_comm_all_gatherv(r->comm, at, t->counts, r->pt));
    memset(t->fresh, 1, (size_t)t->R);
    t->whole = true;
    return DS_OK;
}

/* Rank q's partition of the table as a rows view (rows_math.h): the
 * replica's flat elements [q part, (q + 1) part). */
static ds_rows_view part_view(const ds_param_rows *r, const table *t, int q) {
    int64_t lo = (int64_t)q * r->f->part, hi = lo + r->f->part;
    void *base = ds_at(r->params, r->pt, lo);
    if (r->win && q == r->comm->rank) { /* the window's: packed from the partition */
        base = (void *)r->own;
    } else if (r->win) { /* unpacked into the window's part of q's partition */
        lo = lo > r->win_lo ? lo : r->win_lo;
        hi = hi < r->win_hi ? hi : r->win_hi;
        base = ds_at(r->win, r->pt, lo - r->win_lo);
    }
    return (ds_rows_view){.base = base, .t = r->pt, .lo = lo, .hi = hi > lo ? hi : lo,
                          .offset = t->off, .cols = t->L};
}

/* Every rank's rows of table t, gathered into t->ids (host, rank-major,
 * *total of them), or *whole set when some rank asks for the whole table
 * (every rank sees the same counts, so all decide alike). The collectives
 * carry the backend's memory: on cuda their buffers are the device's. */
static ds_status gather_asks(ds_param_rows *r, table *t, bool *whole, size_t *total) {
    int world = r->comm->world, me = r->comm->rank;
    int32_t mine = *whole ? -1 : t->n_req;
    DS_TRY(ds_zero_put(r->be, t->d_n, &mine, 4));
    DS_TRY(ds_comm_all_gather(r->comm, t->d_n, t->d_n + 1, 1, DS_I32));
    DS_TRY(ds_zero_fetch(r->be, t->n_all, t->d_n + 1, (size_t)world * 4));
    size_t off_me = 0;
    *total = 0;
    for (int q = 0; q < world; q++) {
        if (t->n_all[q] < 0) *whole = true;
        if (*whole) continue;
        if (q == me) off_me = *total;
        t->counts[q] = (size_t)t->n_all[q];
        *total += t->counts[q];
    }
    if (*whole) return DS_OK;
    DS_TRY(ds_zero_put(r->be, t->d_ids + off_me, t->req, (size_t)t->n_req * 4));
    DS_TRY(ds_comm_all_gatherv(r->comm, t->d_ids, t->counts, DS_I32));
    return ds_zero_fetch(r->be, t->ids, t->d_ids, *total * 4);
}

/* Rank q's block: the rows of the union that reach into q's partition, whole
 * (rows_gather: +0.0 outside it), ascending. A row a partition boundary cuts
 * is in both ranks' blocks; each unpacks only its own partition's part.
 * Returns false past break-even (the blocks would not fit the packing
 * buffer), decided alike on every rank from the same union. */
static bool plan_blocks(ds_param_rows *r, table *t, int64_t n_uni) {
    int64_t at = 0;
    for (int q = 0; q < r->comm->world; q++) {
        int64_t start = at, b, e;
        for (int64_t k = 0; k < n_uni; k++) {
            if (!piece(r, t, t->uni[k], q, &b, &e)) continue;
            if (at == t->cap_rows) return false;
            t->lists[at++] = t->uni[k];
        }
        t->n_rows[q] = (size_t)(at - start);
    }
    return true;
}

static ds_status exchange_table(ds_param_rows *r, table *t, bool whole) {
    int world = r->comm->world, me = r->comm->rank;
    ds_backend *be = r->be;
    size_t total;
    DS_TRY(gather_asks(r, t, &whole, &total));
    if (whole) return gather_whole(r, t);
    memset(t->seen, 0, (size_t)t->R);
    for (size_t k = 0; k < total; k++) t->seen[t->ids[k]] = 1;
    int64_t n_uni = 0;
    for (int64_t u = 0; u < t->R; u++)
        if (t->seen[u]) t->uni[n_uni++] = (int32_t)u;
    if (!plan_blocks(r, t, n_uni)) return gather_whole(r, t);
    /* the blocks' row lists go where the asked rows were (they are read) */
    size_t n_listed = 0;
    for (int q = 0; q < world; q++) n_listed += t->n_rows[q];
    DS_TRY(ds_zero_put(r->be, t->d_ids, t->lists, n_listed * 4));
    size_t row = 0; /* rank q's block starts at row `row` of packed and of the lists */
    for (int q = 0; q < world; q++) {
        if (q == me) {
            ds_rows_view v = part_view(r, t, q);
            DS_TRY(be->ops->rows_gather(be, &v, t->d_ids + row, (int64_t)t->n_rows[q],
                                        ds_at(t->packed, r->pt, (int64_t)row * t->L)));
        }
        t->counts[q] = t->n_rows[q] * (size_t)t->L;
        row += t->n_rows[q];
    }
    DS_TRY(ds_comm_all_gatherv(r->comm, t->packed, t->counts, r->pt));
    row = 0;
    for (int q = 0; q < world; q++) {
        if (q != me) {
            ds_rows_view v = part_view(r, t, q);
            DS_TRY(be->ops->rows_scatter(be, &v, t->d_ids + row, (int64_t)t->n_rows[q],
                                         ds_at(t->packed, r->pt, (int64_t)row * t->L)));
        }
        row += t->n_rows[q];
    }
    for (int64_t k = 0; k < n_uni; k++) t->fresh[t->uni[k]] = 1;
    return DS_OK;
}

static ds_status exchange(void *arg) {
    ds_param_rows *r = arg;
    /* forced: this rank's main thread waited before posting a batch */
    bool whole = r->want_whole || r->job.forced;
    r->whole = true;
    ds_comm_set_context(r->comm, r->what);
    ds_status st = DS_OK;
    for (int i = 0; i < r->n && st == DS_OK; i++) {
        st = exchange_table(r, &r->t[i], whole);
        r->whole &= r->t[i].whole;
    }
    ds_comm_set_context(r->comm, NULL);
    DS_TRY(st);
    return DS_OK;
}

/* ---- the strategy's side ---- */

/* Whether parameter i is gathered by rows: declared, and nothing ties to it. */
static bool qualifies(const ds_flat *f, int i) {
    const ds_param_desc *d = f->params[i].desc;
    for (int j = 0; j < f->n_tied_params; j++)
        if (f->tied_params[j] == i) return false;
    return d->rows_read_by[0] && d->ndim >= 1 && d->shape[0] > 0;
}

static int64_t cap_rows(int64_t R, int world) { return (R + world - 1) / world; }

uint64_t ds_param_rows_bytes(const ds_flat *f, ds_dtype pt, int world) {
    uint64_t total = 0;
    for (int i = 0; world > 1 && i < f->n_params; i++) {
        if (!qualifies(f, i)) continue;
        int64_t R = f->params[i].desc->shape[0];
        uint64_t packed = (uint64_t)(cap_rows(R, world) * (f->params[i].numel / R)) *
                          ds_dtype_size(pt);
        total += packed + (uint64_t)(1 + world) * 4 + (uint64_t)world * (uint64_t)R * 4;
    }
    return total;
}

ds_status ds_param_rows_create(ds_backend *be, ds_comm *comm, ds_comm_worker *w,
                               const ds_flat *f, void *params, ds_dtype pt, ds_param_rows **out) {
    *out = NULL;
    if (comm->world == 1) return DS_OK;
    int n = 0;
    for (int i = 0; i < f->n_params; i++) n += qualifies(f, i);
    if (n == 0) return DS_OK;
    ds_param_rows *r = calloc(1, sizeof *r);
    table *ts = calloc((size_t)n, sizeof *ts);
    if (!r || !ts) {
        free(r);
        free(ts);
        return DS_ERR(DS_ERR_OOM, "row gather: out of host memory");
    }
    /* stage 3 (no replica): the tables whole until a forward plans its rows */
    *r = (ds_param_rows){.be = be, .comm = comm, .w = w, .f = f, .params = params, .pt = pt,
                         .n = n, .t = ts, .want_whole = params == NULL};
    ds_status st = DS_OK;
    int k = 0;
    for (int i = 0; i < f->n_params && st == DS_OK; i++) {
        if (!qualifies(f, i)) continue;
        const ds_param_desc *d = f->params[i].desc;
        table *t = &ts[k++];
        t->param = i;
        t->off = f->params[i].offset;
        t->numel = f->params[i].numel;
        t->R = d->shape[0];
        t->L = t->numel / t->R;
        t->cap_rows = cap_rows(t->R, comm->world);
        st = table_alloc(r, t);
    }
    r->job = (ds_comm_job){.kind = DS_JOB_FN, .fn = exchange, .arg = r, .gated = true};
    snprintf(r->what, sizeof r->what, "the rows the next micro-batch reads of %s%s",
             f->params[ts[0].param].desc->name, n > 1 ? " and other tables" : "");
    if (st != DS_OK) {
        ds_param_rows_destroy(r);
        DS_TRY(st);
    }
    *out = r;
    return DS_OK;
}

void ds_param_rows_destroy(ds_param_rows *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) table_free(r, &r->t[i]);
    free(r->t);
    free(r);
}

int ds_param_rows_ranges(const ds_param_rows *r, int64_t (*ranges)[2], int cap) {
    if (!ranges) return r ? r->n : 0;
    int n = 0;
    for (int i = 0; r && i < r->n && n < cap; i++, n++) {
        ranges[n][0] = r->t[i].off;
        ranges[n][1] = r->t[i].off + r->t[i].numel;
    }
    return n;
}

ds_status ds_param_rows_wait(ds_param_rows *r) {
    if (r->state == ROUND_GATED || r->state == ROUND_RUNNING) {
        r->state = ROUND_DONE;
        DS_TRY(ds_comm_job_wait(r->w, &r->job)); /* a gated one opens forced: whole */
    }
    return DS_OK;
}

/* NaN over every piece of table t outside this rank's partition, in buf
 * (holding flat elements from buf_lo on: the replica, or stage 3's
 * window); all bits set is a NaN in fp32, fp16 and bf16. */
static ds_status nan_outside(ds_param_rows *r, const table *t, void *buf, int64_t buf_lo) {
    int64_t plo = (int64_t)r->comm->rank * r->f->part, phi = plo + r->f->part;
    int64_t a = t->off, b = t->off + t->numel;
    if (a < plo)
        DS_TRY(r->be->ops->memset(r->be, ds_at(buf, r->pt, a - buf_lo), 0xff,
                                  (size_t)((b < plo ? b : plo) - a) * es(r), NULL));
    if (b > phi)
        DS_TRY(r->be->ops->memset(r->be, ds_at(buf, r->pt, (a > phi ? a : phi) - buf_lo), 0xff,
                                  (size_t)(b - (a > phi ? a : phi)) * es(r), NULL));
    return DS_OK;
}

ds_status ds_param_rows_start(ds_param_rows *r) {
    DS_TRY(ds_param_rows_wait(r));
    for (int i = 0; i < r->n; i++) {
        table *t = &r->t[i];
        DS_TRY(nan_outside(r, t, r->params, 0));
        for (int64_t u = 0; u < t->R; u++) t->fresh[u] = owned(r, t, u);
        t->whole = false;
    }
    r->whole = r->want_whole = false;
    r->job.gated = true;
    DS_TRY(ds_comm_job_submit(r->w, &r->job));
    r->state = ROUND_GATED;
    return DS_OK;
}

/* The rows of table t that the batch names and this rank lacks. */
static ds_status ask(ds_param_rows *r, table *t, const ds_batch *host,
                     const ds_tensor_desc *inputs, int n_inputs) {
    const ds_param_desc *d = r->f->params[t->param].desc;
    const int32_t *ids = ds_batch_i32(host, d->rows_read_by);
    const ds_tensor_desc *in = NULL;
    for (int j = 0; j < n_inputs; j++)
        if (!strcmp(inputs[j].name, d->rows_read_by)) in = &inputs[j];
    if (!ids || !in)
        return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s: rows_read_by names \"%s\", but the "
                      "batch has no int32 input of that name", d->name, d->rows_read_by);
    size_t n = (size_t)host->B * ds_tensor_desc_row_elems(in, host->T);
    memset(t->seen, 0, (size_t)t->R);
    t->n_req = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t u = ids[k];
        /* an index outside the table is the module's to report */
        if (u < 0 || u >= t->R || t->fresh[u] || t->seen[u]) continue;
        t->seen[u] = 1;
        t->req[t->n_req++] = u;
    }
    return DS_OK;
}

ds_status ds_param_rows_post(ds_param_rows *r, const ds_batch *host, const ds_tensor_desc *inputs,
                             int n_inputs) {
    if (r->state == ROUND_NONE) return DS_OK; /* no update yet: the replica is whole */
    if (r->state == ROUND_RUNNING) DS_TRY(ds_param_rows_wait(r));
    if (r->state == ROUND_DONE && r->whole) return DS_OK;
    r->want_whole = host == NULL;
    for (int i = 0; host && i < r->n; i++) DS_TRY(ask(r, &r->t[i], host, inputs, n_inputs));
    if (r->state == ROUND_GATED) {
        DS_TRY(ds_comm_job_open(r->w, &r->job));
    } else { /* a later micro-batch of the same step: its own exchange */
        r->job.gated = false;
        DS_TRY(ds_comm_job_submit(r->w, &r->job));
    }
    r->state = ROUND_RUNNING;
    return DS_OK;
}

bool ds_param_rows_in_module(const ds_param_rows *r, int m) {
    for (int i = 0; r && i < r->n; i++)
        if (r->f->params[r->t[i].param].module == m) return true;
    return false;
}

/* ---- stage 3: a window instead of a replica ---- */

ds_status ds_param_rows_plan(ds_param_rows *r, const ds_batch *host, const ds_tensor_desc *inputs,
                             int n_inputs) {
    r->want_whole = host == NULL;
    for (int i = 0; i < r->n; i++) {
        table *t = &r->t[i];
        for (int64_t u = 0; u < t->R; u++) t->fresh[u] = owned(r, t, u);
        t->n_req = 0;
        if (host) DS_TRY(ask(r, t, host, inputs, n_inputs));
    }
    return DS_OK;
}

ds_status ds_param_rows_nan(ds_param_rows *r, int m, void *win, int64_t win_lo) {
    for (int i = 0; !r->want_whole && i < r->n; i++)
        if (r->f->params[r->t[i].param].module == m) DS_TRY(nan_outside(r, &r->t[i], win, win_lo));
    return DS_OK;
}

ds_status ds_param_rows_window(ds_param_rows *r, int m, void *win, int64_t win_lo,
                               int64_t win_hi, const void *own) {
    r->win = win;
    r->win_lo = win_lo;
    r->win_hi = win_hi;
    r->own = own;
    ds_comm_set_context(r->comm, r->what);
    ds_status st = DS_OK;
    for (int i = 0; i < r->n && st == DS_OK; i++)
        if (r->f->params[r->t[i].param].module == m)
            st = exchange_table(r, &r->t[i], r->want_whole);
    ds_comm_set_context(r->comm, NULL);
    r->win = NULL;
    DS_TRY(st);
    return DS_OK;
}
