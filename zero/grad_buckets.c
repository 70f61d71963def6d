/* Bucketed reduce-scatter of gradients into partitions. */
#include "zero/grad_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "engine/comm/codec_q4.h"
#include "engine/comm/codec_q8.h"
#include "zero/grad_sparse.h"
#include "zero/zero_util.h"

typedef struct bucket {
    void *buf;          /* [cap] gt; the range sits at the top: [cap - (hi-lo), cap) */
    ds_comm_job rs;     /* the reduce-scatter */
    ds_comm_job acc;    /* adds the received block into the partition */
    bool busy;
    size_t *counts;     /* [world], the reduce-scatter's blocks */
    /* what acc adds */
    void *recv;
    ds_dtype recv_t;    /* gt */
    int64_t dst;        /* offset in the partition */
    size_t n;
    int64_t lo, hi;     /* its flat range, data at rs.send (sparse_gradients pieces) */
    struct ds_grad_buckets *owner;
} bucket;

struct ds_grad_buckets {
    ds_backend *be;
    ds_comm_worker *w;
    ds_comm *comm;      /* NULL: the worker's */
    const ds_flat *flat;
    int rank;
    ds_dtype gt;
    void *part_grads;
    int64_t cap;   /* buffer size: reduce_bucket_size, at least the largest module */
    int64_t limit; /* reduce_bucket_size: a bucket goes once it holds this much */
    bool per_module;
    bucket b[2];
    int cur;
    bool open;
    int64_t lo, hi;
    /* qgZ (ds_grad_buckets_quantize): the quantized reduce-scatter's
     * scratch (a fixed size, one for both buckets: the worker runs one job
     * at a time) and its communicator */
    ds_q8_rs *q8;
    ds_q4_rs *q4; /* or DeepSpeed's int4 in two levels (ds_grad_buckets_quantize_int4) */
    ds_comm *qcomm;
    ds_grad_sparse *sparse; /* sparse_gradients (ds_grad_buckets_sparse), else NULL */
    ds_comm *scomm;         /* the communicator it runs on */
};

static ds_status accumulate(void *arg) {
    bucket *k = arg;
    ds_grad_buckets *gb = k->owner;
    if (k->n == 0) return DS_OK;
    DS_TRY(gb->be->ops->axpy(gb->be, ds_at(gb->part_grads, gb->gt, k->dst), gb->gt, 1.0f, k->recv,
                             k->recv_t, k->n));
    return DS_OK;
}

/* qgZ: the bucket's quantized reduce-scatter, its sum added into the
 * partition slice by slice (the codec's rounds: no block-sized fp32 sum). */
static ds_status reduce_q8(void *arg) {
    bucket *k = arg;
    ds_grad_buckets *gb = k->owner;
    DS_TRY(ds_comm_reduce_scatterv_q8_add(gb->qcomm, gb->q8, k->rs.send, gb->gt, k->counts,
                                          ds_at(gb->part_grads, gb->gt, k->dst), gb->gt));
    return DS_OK;
}

/* qgZ as DeepSpeed runs it: int4, inside hosts then across them. */
static ds_status reduce_q4(void *arg) {
    bucket *k = arg;
    ds_grad_buckets *gb = k->owner;
    DS_TRY(ds_comm_reduce_scatterv_q4_add(gb->qcomm, gb->q4, k->rs.send, gb->gt, k->counts,
                                          ds_at(gb->part_grads, gb->gt, k->dst), gb->gt));
    return DS_OK;
}

/* [a, b) of a bucket's range, densely: its reduce-scatter in place, the
 * block added into the partition (the plain path's two jobs, in one).
 * Under qgZ the piece goes through the same quantized reduce-scatter as a
 * whole bucket would (its blocks then start at the piece's, not the
 * bucket's, elements), which adds into the partition itself. */
static ds_status reduce_dense(ds_grad_buckets *gb, bucket *k, int64_t a, int64_t b) {
    if (b <= a) return DS_OK;
    void *send = ds_at((void *)k->rs.send, gb->gt, a - k->lo);
    ds_zero_counts(gb->flat, a, b, k->counts);
    int64_t part_lo = (int64_t)gb->rank * gb->flat->part;
    void *dst = ds_at(gb->part_grads, gb->gt, (a > part_lo ? a : part_lo) - part_lo);
    if (gb->q8) {
        DS_TRY(ds_comm_reduce_scatterv_q8_add(gb->qcomm, gb->q8, send, gb->gt, k->counts, dst,
                                              gb->gt));
        return DS_OK;
    }
    if (gb->q4) {
        DS_TRY(ds_comm_reduce_scatterv_q4_add(gb->qcomm, gb->q4, send, gb->gt, k->counts, dst,
                                              gb->gt));
        return DS_OK;
    }
    size_t mine = ds_zero_block_offset(k->counts, gb->rank);
    void *recv = ds_at(send, gb->gt, (int64_t)mine);
    DS_TRY(ds_comm_reduce_scatterv(gb->scomm, send, recv, k->counts, gb->gt, DS_REDUCE_SUM));
    if (k->counts[gb->rank] == 0) return DS_OK;
    DS_TRY(gb->be->ops->axpy(gb->be, dst, gb->gt, 1.0f, recv, gb->gt, k->counts[gb->rank]));
    return DS_OK;
}

/* sparse_gradients: a bucket holding a row-sparse parameter goes as its
 * dense pieces and the parameter's row exchange (zero/grad_sparse.h), in
 * descending flat order as the plain path would, each adding into the
 * partition. One job: the pieces' collectives follow each other on every
 * rank in the same order. Under qgZ the dense pieces stay quantized and the
 * rows go as full-precision records: exact, and already about as few bytes
 * as the table's int8 reduce-scatter (BERT-mini's word table at 2 ranks,
 * batch 32 x 128: 2.0 MB of records each rank sends, against 10.8 MB fp32
 * and 2.7 MB int8 on average over the ranks: 1.0 MB from rank 0, 4.4 MB
 * from rank 1, whose share of the table lies in rank 0's partition), so
 * quantizing them would lose bits to save little. */
static ds_status reduce_mixed(void *arg) {
    bucket *k = arg;
    ds_grad_buckets *gb = k->owner;
    int64_t lo = k->lo, hi = k->hi, a, b;
    int which;
    while (hi > lo && ds_grad_sparse_overlap(gb->sparse, lo, hi, &a, &b, &which)) {
        DS_TRY(reduce_dense(gb, k, b > lo ? b : lo, hi));
        /* buckets are cut at parameters, so the whole parameter is here */
        DS_TRY(ds_grad_sparse_reduce_add(gb->sparse, which,
                                         ds_at((void *)k->rs.send, gb->gt, a - k->lo)));
        hi = a;
    }
    DS_TRY(reduce_dense(gb, k, lo, hi));
    return DS_OK;
}

ds_status ds_grad_buckets_create(ds_backend *be, ds_comm_worker *w, const ds_flat *f, int rank,
                                 ds_dtype gt, void *part_grads, int64_t cap, bool per_module,
                                 ds_grad_buckets **out) {
    *out = NULL;
    ds_grad_buckets *gb = calloc(1, sizeof *gb);
    if (!gb) return DS_ERR(DS_ERR_OOM, "gradient buckets: out of host memory");
    /* A bucket never needs more than the whole model (DeepSpeed's default of
     * 5e8 elements would otherwise cost 2 GB per buffer on a small model),
     * nor less than the largest module, which must fit in one. */
    if (cap > f->used) cap = f->used;
    if (cap < 1) cap = 1;
    int64_t limit = cap;
    for (int m = 0; m < f->n_modules; m++)
        if (f->modules[m].end - f->modules[m].begin > cap)
            cap = f->modules[m].end - f->modules[m].begin;
    *gb = (ds_grad_buckets){.be = be, .w = w, .flat = f, .rank = rank, .gt = gt,
                            .part_grads = part_grads, .cap = cap, .limit = limit,
                            .per_module = per_module};
    for (int k = 0; k < 2; k++) {
        gb->b[k].owner = gb;
        ds_status st = ds_mem_host_alloc(be->mem, DS_MEM_OTHER, (size_t)f->world * sizeof(size_t),
                                         "bucket block counts", (void **)&gb->b[k].counts);
        if (st == DS_OK)
            st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE,
                                  (size_t)cap * ds_dtype_size(gt), &gb->b[k].buf);
        if (st != DS_OK) {
            ds_grad_buckets_destroy(gb);
            DS_TRY(st);
        }
    }
    *out = gb;
    return DS_OK;
}

void ds_grad_buckets_set_comm(ds_grad_buckets *gb, ds_comm *c) { gb->comm = c; }

ds_status ds_grad_buckets_quantize(ds_grad_buckets *gb, ds_comm *c) {
    DS_TRY(ds_q8_rs_create(gb->be, c->world, 0, &gb->q8));
    gb->qcomm = c;
    return DS_OK;
}

ds_status ds_grad_buckets_quantize_int4(ds_grad_buckets *gb, ds_comm *c, int per_host) {
    DS_TRY(ds_q4_rs_create(gb->be, c, per_host, 0, &gb->q4));
    gb->qcomm = c;
    return DS_OK;
}

ds_status ds_grad_buckets_sparse(ds_grad_buckets *gb, ds_comm *c) {
    if (gb->sparse || c->world == 1) return DS_OK; /* one rank: nothing to exchange */
    DS_TRY(ds_grad_sparse_create(gb->be, c, gb->flat, gb->gt, gb->part_grads,
                                 DS_SPARSE_PARTITION_ADD, &gb->sparse));
    gb->scomm = c;
    return DS_OK;
}

void ds_grad_buckets_destroy(ds_grad_buckets *gb) {
    if (!gb) return;
    ds_grad_sparse_destroy(gb->sparse);
    ds_q8_rs_destroy(gb->q8);
    ds_q4_rs_destroy(gb->q4);
    for (int k = 0; k < 2; k++) {
        ds_backend_free(gb->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, gb->b[k].buf,
                        (size_t)gb->cap * ds_dtype_size(gb->gt));
        ds_mem_host_free(gb->be->mem, DS_MEM_OTHER, gb->b[k].counts,
                         (size_t)gb->flat->world * sizeof(size_t));
    }
    free(gb);
}

static ds_status wait_bucket(ds_grad_buckets *gb, bucket *k) {
    if (!k->busy) return DS_OK;
    k->busy = false;
    ds_status a = ds_comm_job_wait(gb->w, &k->rs);
    ds_status b = ds_comm_job_wait(gb->w, &k->acc);
    DS_TRY(a);
    DS_TRY(b);
    return DS_OK;
}

static ds_status flush(ds_grad_buckets *gb) {
    if (!gb->open) return DS_OK;
    bucket *k = &gb->b[gb->cur];
    int64_t len = gb->hi - gb->lo;
    void *send = ds_at(k->buf, gb->gt, gb->cap - len);
    k->rs.counts = k->counts;
    ds_zero_counts(gb->flat, gb->lo, gb->hi, k->rs.counts);
    size_t mine = ds_zero_block_offset(k->rs.counts, gb->rank);
    k->rs.kind = DS_JOB_REDUCE_SCATTERV;
    k->rs.comm = gb->comm;
    k->rs.send = send;
    k->rs.buf = ds_at(send, gb->gt, (int64_t)mine); /* in place: recv aliases our block */
    k->rs.t = gb->gt;
    k->recv = k->rs.buf;
    k->recv_t = gb->gt;
    k->n = k->rs.counts[gb->rank];
    if (gb->q8 || gb->q4) { /* qgZ: the same blocks through the int8 (or int4)
                             * codec, summed in fp32 and added into the
                             * partition by the job itself */
        k->rs.kind = DS_JOB_FN;
        k->rs.fn = gb->q8 ? reduce_q8 : reduce_q4;
        k->rs.arg = k;
        k->n = 0; /* acc: nothing left to add */
    }
    k->lo = gb->lo;
    k->hi = gb->hi;
    int64_t sa, sb;
    int sw;
    if (gb->sparse && ds_grad_sparse_overlap(gb->sparse, gb->lo, gb->hi, &sa, &sb, &sw)) {
        k->rs.kind = DS_JOB_FN; /* the dense pieces and the row exchange, each added */
        k->rs.fn = reduce_mixed;
        k->rs.arg = k;
        k->n = 0;
    }
    int64_t part_lo = (int64_t)gb->rank * gb->flat->part;
    k->dst = (gb->lo > part_lo ? gb->lo : part_lo) - part_lo;
    k->acc = (ds_comm_job){.kind = DS_JOB_FN, .fn = accumulate, .arg = k};
    /* named in a timeout ("gradient bucket of modules 3-5 of 12 (...)") */
    ds_zero_describe_range(gb->flat, gb->lo, gb->hi, "gradient bucket", k->rs.what,
                           sizeof k->rs.what);
    memcpy(k->acc.what, k->rs.what, sizeof k->acc.what);
    DS_TRY(ds_comm_job_submit(gb->w, &k->rs));
    DS_TRY(ds_comm_job_submit(gb->w, &k->acc));
    k->busy = true;
    gb->open = false;
    gb->cur ^= 1;
    return DS_OK;
}

/* The start of the parameter whose room (its elements and the alignment
 * after them) holds element x - 1: the next place below x where a bucket
 * may be cut. Parameters lie in flat order, their offsets rising. */
static int64_t param_below(const ds_flat *f, int64_t x) {
    int lo = 0, hi = f->n_params; /* the first parameter starting at x or later */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (f->params[mid].offset < x) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 ? f->params[lo - 1].offset : 0;
}

/* Buckets are cut at parameter boundaries by DeepSpeed's rule, one
 * parameter at a time from the top: a parameter that would take a
 * non-empty bucket past reduce_bucket_size sends that bucket first, and a
 * bucket that reaches it goes at once. So where the cuts fall depends on the
 * parameters alone, never on the pieces a backward hands its gradients over
 * in (ds_module_grads_final's parts): ranks whose modules announce other
 * parts, or whose module failed before announcing any, still make the same
 * reduce-scatters. (Cutting at the pieces did not: a rank handing over in
 * other parts cut other buckets, and the collectives parted.) Each run of
 * parameters between two cuts is cast in one call. */
ds_status ds_grad_buckets_add(ds_grad_buckets *gb, int64_t begin, int64_t end, const float *src,
                              bool module_end) {
    if (end <= begin) return DS_OK;
    int64_t top = end;
    while (top > begin) {
        if (gb->open && gb->lo != top) DS_TRY(flush(gb)); /* not adjacent: a new bucket */
        bucket *k = &gb->b[gb->cur];
        if (!gb->open) {
            DS_TRY(wait_bucket(gb, k)); /* its last use must have landed */
            gb->open = true;
            gb->lo = gb->hi = top;
        }
        int64_t low = top;
        bool full = false;
        while (low > begin) {
            int64_t p = param_below(gb->flat, low);
            if (p < begin) p = begin; /* a piece starts at a parameter; defensive */
            if (gb->hi > low && gb->hi - p > gb->limit) { /* would pass: send first */
                full = true;
                break;
            }
            low = p;
            if (gb->hi - low >= gb->limit) { /* reached: on the wire now */
                full = true;
                break;
            }
        }
        if (low < top) {
            void *dst = ds_at(k->buf, gb->gt, gb->cap - (gb->hi - low));
            DS_TRY(gb->be->ops->cast(gb->be, dst, gb->gt, src + (low - begin), DS_F32,
                                     (size_t)(top - low)));
        }
        gb->lo = low;
        top = low;
        /* Full: on the wire now, while the next modules' backward runs.
         * (Before, buffers sized to the largest module, BERT-mini's
         * 5.5M-element embedding, gathered every encoder layer into one
         * bucket that left only when backward had ended.) */
        if (full) DS_TRY(flush(gb));
    }
    if (gb->per_module && module_end) DS_TRY(flush(gb));
    return DS_OK;
}

ds_status ds_grad_buckets_finish(ds_grad_buckets *gb) {
    DS_TRY(flush(gb));
    for (int k = 0; k < 2; k++) DS_TRY(wait_bucket(gb, &gb->b[k]));
    return DS_OK;
}

ds_status ds_grad_buckets_reset(ds_grad_buckets *gb) {
    gb->open = false;
    ds_status st = DS_OK;
    for (int k = 0; k < 2; k++) {
        ds_status w = wait_bucket(gb, &gb->b[k]);
        if (st == DS_OK) st = w;
    }
    DS_TRY(st);
    return DS_OK;
}
