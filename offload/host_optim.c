/* Optimizer state off the device: allocation, the host-RAM tier, the
 * piecewise copy/update pipeline, and pushing the master to the device's
 * working parameters. */
#include "offload/host_optim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend/optim_update.h"
#include "offload/nvme_swap.h"

/* Elements per pipeline piece in host RAM: 4 Mi elements (16 MiB of fp32
 * master) is large enough that each piece's OpenMP update and copy launches
 * amortise their fixed cost, and small enough that only the first piece's
 * download and the last piece's upload are not hidden behind host math. */
#define DS_HOST_OPTIM_CHUNK ((int64_t)1 << 22)

struct ds_host_optim {
    ds_backend *dev;    /* engine backend (borrowed) */
    ds_backend *host;   /* host math: == dev on cpu, an owned cpu backend on cuda */
    bool own_host;
    int64_t n;
    int n_moments;
    ds_dtype gt, pt;
    ds_tier *tier;      /* where master and moments live */
    bool swapped;       /* the tier's pieces are reused buffers (nvme) */
    bool direct;        /* cpu backend: the "device" arrays are host RAM already */
    void *gstage;       /* [n] gt: the partition's gradients (NULL when direct: read in place) */
    void *pstage;       /* pt: updated working parameters (param_t != F32 only); [n], or
                           one piece when direct (copied out before the next piece) */
    ds_stream *down, *up; /* device->host and host->device copy streams (NULL on cpu) */
    ds_event *ready;    /* recorded on the default stream at the start of a step */
    ds_host_param_sink sink; /* offload_param: where updated pieces go, else NULL */
    void *sink_ctx;
    int64_t pstage_n;   /* elements of pstage */
};

/* ------------------------------------------------ the host-RAM tier -- */

typedef struct ram_tier {
    ds_tier base; /* first */
    ds_backend *be;
    float *arr[3];
} ram_tier;

static ds_status ram_begin(ds_tier *t, int64_t b, int64_t e, float **state) {
    (void)e;
    for (int k = 0; k < t->n_tensors; k++) state[k] = ((ram_tier *)t)->arr[k] + b;
    return DS_OK;
}

static ds_status ram_end(ds_tier *t, int64_t b, int64_t e, bool dirty) {
    (void)t, (void)b, (void)e, (void)dirty; /* resident: nothing to write back */
    return DS_OK;
}

static ds_status ram_finish(ds_tier *t) {
    (void)t;
    return DS_OK;
}

static ds_status ram_io(ds_tier *t, int k, int64_t lo, int64_t hi, float *host, bool write) {
    float *p = ((ram_tier *)t)->arr[k] + lo;
    size_t bytes = (size_t)(hi - lo) * sizeof(float);
    if (write) memcpy(p, host, bytes);
    else memcpy(host, p, bytes);
    return DS_OK;
}

static ds_status ram_fill(ds_tier *t, int k, ds_tier_fill_fn fn, void *ctx) {
    if (t->n > 0) DS_TRY(fn(ctx, 0, t->n, ((ram_tier *)t)->arr[k]));
    return DS_OK;
}

static void ram_destroy(ds_tier *t) {
    ram_tier *r = (ram_tier *)t;
    if (!r) return;
    for (int k = 0; k < t->n_tensors; k++)
        ds_backend_free(r->be, k ? DS_MEM_OPTIM : DS_MEM_MASTER, DS_PLACE_HOST, r->arr[k],
                        (size_t)t->n * sizeof(float));
    free(r);
}

static const ds_tier_ops k_ram_ops = {
    .name = "host", .begin = ram_begin, .end = ram_end, .finish = ram_finish,
    .io = ram_io, .fill = ram_fill, .destroy = ram_destroy,
};

/* Master and moments pinned through the engine backend, or plain host RAM
 * (page-aligned) through the host backend. Either way counted at HOST. */
static ds_status ram_create(ds_backend *be, int64_t n, int n_tensors, ds_tier **out) {
    ram_tier *r = calloc(1, sizeof *r);
    if (!r) return DS_ERR(DS_ERR_OOM, "offload_optimizer: out of host memory");
    r->base = (ds_tier){.ops = &k_ram_ops, .n = n, .n_tensors = n_tensors,
                        .piece = DS_HOST_OPTIM_CHUNK};
    r->be = be;
    for (int k = 0; k < n_tensors; k++) {
        void *p;
        ds_status st = ds_backend_alloc(be, k ? DS_MEM_OPTIM : DS_MEM_MASTER, DS_PLACE_HOST,
                                        (size_t)n * sizeof(float), &p);
        if (st != DS_OK) {
            ram_destroy(&r->base);
            return st;
        }
        r->arr[k] = p;
    }
    *out = &r->base;
    return DS_OK;
}

/* ------------------------------------------------------------ object -- */

static bool is_float_type(ds_dtype t) { return t == DS_F32 || t == DS_F16 || t == DS_BF16; }

static ds_status build(ds_host_optim *o, const ds_host_optim_desc *d) {
    if (d->dev->kind == DS_BACKEND_CPU) {
        o->host = d->dev; /* its "device" memory is host RAM already */
    } else {
        ds_backend_desc hd = {.kind = DS_BACKEND_CPU, .num_threads = d->num_threads,
                              .mem = d->dev->mem};
        DS_TRY(ds_backend_create(&hd, &o->host));
        o->own_host = true;
    }
    ds_backend *state_be = d->pin_memory ? o->dev : o->host;
    if (d->nvme) {
        ds_nvme_swap_desc sd = {.buf_be = state_be, .what = "zero_optimization.offload_optimizer",
                                .off = d->nvme, .aio = d->aio,
                                .sub_group_size = d->sub_group_size, .rank = d->rank, .n = o->n,
                                .n_tensors = 1 + o->n_moments};
        DS_TRY(ds_nvme_swap_create(&sd, &o->tier));
        o->swapped = true;
    } else {
        DS_TRY(ram_create(state_be, o->n, 1 + o->n_moments, &o->tier));
    }
    /* Staging buffers are the ends of asynchronous copies: page-locked on
     * cuda whatever pin_memory says (the engine backend's HOST place). On
     * the cpu backend every copy is synchronous and the gradients are host
     * RAM already: they are read in place, and the updated working
     * parameters need one piece of staging, not the partition (a 2e9
     * parameter bf16 model saves 8 GB). */
    o->direct = d->dev->kind == DS_BACKEND_CPU;
    o->pstage_n = o->direct ? (o->n < o->tier->piece ? o->n : o->tier->piece) : o->n;
    if (!o->direct)
        DS_TRY(ds_backend_alloc(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST,
                                (size_t)o->n * ds_dtype_size(o->gt), &o->gstage));
    if (o->pt != DS_F32)
        DS_TRY(ds_backend_alloc(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST,
                                (size_t)o->pstage_n * ds_dtype_size(o->pt), &o->pstage));
    const ds_backend_ops *ops = o->dev->ops;
    if (ops->stream_create && ops->event_create && ops->event_record && ops->stream_wait_event) {
        DS_TRY(ops->stream_create(o->dev, &o->down));
        DS_TRY(ops->stream_create(o->dev, &o->up));
        DS_TRY(ops->event_create(o->dev, &o->ready));
    }
    return DS_OK;
}

ds_status ds_host_optim_create(const ds_host_optim_desc *d, ds_host_optim **out) {
    *out = NULL;
    if (!d || !d->dev) return DS_ERR(DS_ERR_INVALID_ARG, "ds_host_optim_create: no backend");
    if (d->n < 0 || d->n_moments < 0 || d->n_moments > 2)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_host_optim_create: n must be >= 0 and n_moments 0..2, got n=%lld "
                      "n_moments=%d", (long long)d->n, d->n_moments);
    if (!is_float_type(d->grad_t) || !is_float_type(d->param_t))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_host_optim_create: gradients and parameters must be fp32, fp16 or "
                      "bf16, got %s and %s", ds_dtype_name(d->grad_t), ds_dtype_name(d->param_t));
    if (d->nvme && (!d->aio || d->sub_group_size < 1))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_host_optim_create: nvme needs the aio settings and sub_group_size >= 1");
    ds_host_optim *o = calloc(1, sizeof *o);
    if (!o) return DS_ERR(DS_ERR_OOM, "ds_host_optim_create: out of host memory");
    o->dev = d->dev;
    o->n = d->n;
    o->n_moments = d->n_moments;
    o->gt = d->grad_t;
    o->pt = d->param_t;
    ds_status st = build(o, d);
    if (st != DS_OK) {
        ds_error_prefix("offload_optimizer: %s state of %lld elements",
                        d->nvme ? "NVMe" : "host", (long long)d->n);
        ds_error_trace(__FILE__, __LINE__);
        ds_host_optim_destroy(o);
        return st;
    }
    *out = o;
    return DS_OK;
}

void ds_host_optim_destroy(ds_host_optim *o) {
    if (!o) return;
    const ds_backend_ops *ops = o->dev->ops;
    if (o->down) ops->stream_destroy(o->dev, o->down);
    if (o->up) ops->stream_destroy(o->dev, o->up);
    if (o->ready) ops->event_destroy(o->dev, o->ready);
    if (o->tier) o->tier->ops->destroy(o->tier); /* nvme: the files go with it */
    ds_backend_free(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST, o->gstage,
                    (size_t)o->n * ds_dtype_size(o->gt));
    ds_backend_free(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST, o->pstage,
                    (size_t)o->pstage_n * ds_dtype_size(o->pt));
    if (o->own_host) ds_backend_destroy(o->host);
    free(o);
}

ds_status ds_host_optim_revive(ds_host_optim *o) {
    if (!o->tier->ops->revive) return DS_OK;
    DS_TRY(o->tier->ops->revive(o->tier));
    return DS_OK;
}

ds_status ds_host_optim_state_io(ds_host_optim *o, int k, int64_t lo, int64_t hi, float *host,
                                 bool write) {
    if (lo < 0 || hi > o->n || lo > hi || k < 0 || k > 2)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "offload_optimizer: state %d range [%lld, %lld) outside the partition's "
                      "[0, %lld)", k, (long long)lo, (long long)hi, (long long)o->n);
    if (k > o->n_moments) { /* a moment this optimizer does not keep */
        if (write)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "the checkpoint holds optimizer moments this optimizer does not keep");
        memset(host, 0, (size_t)(hi - lo) * sizeof(float));
        return DS_OK;
    }
    if (lo < hi) DS_TRY(o->tier->ops->io(o->tier, k, lo, hi, host, write));
    return DS_OK;
}

ds_status ds_host_optim_fill_master(ds_host_optim *o, ds_tier_fill_fn fn, void *ctx) {
    DS_TRY(o->tier->ops->fill(o->tier, 0, fn, ctx));
    return DS_OK;
}

ds_backend *ds_host_optim_backend(ds_host_optim *o) { return o->host; }

ds_tier_stats ds_host_optim_swap_stats(const ds_host_optim *o) { return o->tier->stats; }

void ds_host_optim_set_sink(ds_host_optim *o, ds_host_param_sink fn, void *ctx) {
    o->sink = fn;
    o->sink_ctx = ctx;
}

/* --------------------------------------------------------------- step -- */

/* Process-wide sums over every host optimizer's steps: a bench reads them
 * around a training step to split its time. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ds_host_optim_totals g_totals;

void ds_host_optim_get_totals(ds_host_optim_totals *out) {
    pthread_mutex_lock(&g_lock);
    *out = g_totals;
    pthread_mutex_unlock(&g_lock);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *at(void *base, ds_dtype t, int64_t i) {
    return (char *)base + (size_t)i * ds_dtype_size(t);
}

static const void *cat(const void *base, ds_dtype t, int64_t i) {
    return (const char *)base + (size_t)i * ds_dtype_size(t);
}

/* Piece [b, ...)'s place in the working-parameter staging. */
static void *lp_at(const ds_host_optim *o, int64_t b) {
    return o->direct ? o->pstage : at(o->pstage, o->pt, b);
}

static ds_status wait(ds_host_optim *o, ds_stream *s) {
    if (s) DS_TRY(o->dev->ops->stream_sync(o->dev, s));
    return DS_OK;
}

/* Gradients of piece [b, e) into the host staging buffer. */
static ds_status download(ds_host_optim *o, const void *dev_grads, int64_t b, int64_t e) {
    if (o->direct) return DS_OK; /* read in place by update() */
    DS_TRY(o->dev->ops->memcpy(o->dev, at(o->gstage, o->gt, b), cat(dev_grads, o->gt, b),
                               (size_t)(e - b) * ds_dtype_size(o->gt), DS_COPY_D2H, o->down));
    return DS_OK;
}

/* Working parameters of piece [b, e): the low-precision staging copy the
 * update wrote, or the fp32 master piece itself. A swapped piece's buffer is
 * reused by a later piece, so the copy must land before the piece ends. */
static ds_status upload(ds_host_optim *o, void *dev_params, int64_t b, int64_t e,
                        const float *master) {
    const void *src = o->pt == DS_F32 ? (const void *)master : lp_at(o, b);
    if (o->sink) { /* synchronous: the piece has landed when it returns */
        DS_TRY(o->sink(o->sink_ctx, b, e, src));
        return DS_OK;
    }
    DS_TRY(o->dev->ops->memcpy(o->dev, at(dev_params, o->pt, b), src,
                               (size_t)(e - b) * ds_dtype_size(o->pt), DS_COPY_H2D, o->up));
    if (o->swapped) DS_TRY(wait(o, o->up));
    return DS_OK;
}

/* The copies start only after the kernels already queued on the default
 * stream (the gradient reduction, readers of the parameters) finished. */
static ds_status fence(ds_host_optim *o) {
    if (!o->ready) return DS_OK;
    const ds_backend_ops *ops = o->dev->ops;
    DS_TRY(ops->event_record(o->dev, o->ready, NULL));
    DS_TRY(ops->stream_wait_event(o->dev, o->down, o->ready));
    DS_TRY(ops->stream_wait_event(o->dev, o->up, o->ready));
    return DS_OK;
}

/* The optimizer dispatch (engine/backend/optim_update.h, HF's parameter
 * groups included), on host memory: the
 * cpu backend's slots, so the arithmetic is that of a non-offloaded cpu run. */
static ds_status update(ds_host_optim *o, const ds_host_update *u, const void *dev_grads,
                        int64_t b, int64_t e, float **st) {
    ds_backend *h = o->host;
    size_t n = (size_t)(e - b);
    const void *g = cat(o->direct ? dev_grads : o->gstage, o->gt, b);
    float *m0 = o->n_moments >= 1 ? st[1] : NULL;
    float *m1 = o->n_moments >= 2 ? st[2] : NULL;
    void *lp = o->pt != DS_F32 ? lp_at(o, b) : NULL;
    ds_optim_step s = {.type = u->type, .adam = u->adam, .sgd = u->sgd,
                       .no_decay = u->no_decay, .flat_lo = u->flat_lo + b};
    return ds_optim_update(h, &s, st[0], g, o->gt, u->grad_mult, m0, m1, n, lp, o->pt);
}

static int64_t piece_end(const ds_host_optim *o, int64_t b) {
    return o->n - b < o->tier->piece ? o->n : b + o->tier->piece;
}

ds_status ds_host_optim_step(ds_host_optim *o, const ds_host_update *u, const void *dev_grads,
                             void *dev_params) {
    if (o->n == 0) return DS_OK;
    DS_TRY(fence(o));
    /* Pipeline: piece k+1's gradients download and piece k-1's parameters
     * upload while piece k is updated; the tier reads and writes the state
     * pieces (overlapped as pipeline_read / pipeline_write say). The staging
     * buffers span the whole partition, so no piece's buffer is reused
     * within a step. */
    const ds_tier_ops *t = o->tier->ops;
    double t0 = now_s(), upd = 0;
    ds_tier_stats before = o->tier->stats;
    DS_TRY(download(o, dev_grads, 0, piece_end(o, 0)));
    for (int64_t b = 0; b < o->n; b = piece_end(o, b)) {
        int64_t e = piece_end(o, b);
        float *st[3];
        DS_TRY(wait(o, o->down)); /* piece [b, e) has landed */
        if (e < o->n) DS_TRY(download(o, dev_grads, e, piece_end(o, e)));
        DS_TRY(t->begin(o->tier, b, e, st));
        double u0 = now_s();
        DS_TRY(update(o, u, dev_grads, b, e, st));
        upd += now_s() - u0;
        DS_TRY(upload(o, dev_params, b, e, st[0]));
        DS_TRY(t->end(o->tier, b, e, true));
    }
    /* Callers use dev_params next (all-gather, forward) and may read the
     * state: everything has landed when this returns. */
    DS_TRY(wait(o, o->down));
    DS_TRY(wait(o, o->up));
    DS_TRY(t->finish(o->tier));
    const ds_tier_stats *a = &o->tier->stats;
    pthread_mutex_lock(&g_lock);
    g_totals.steps++;
    g_totals.step_s += now_s() - t0;
    g_totals.update_s += upd;
    g_totals.read_bytes += a->read_bytes - before.read_bytes;
    g_totals.write_bytes += a->write_bytes - before.write_bytes;
    g_totals.read_wait_s += a->read_wait_s - before.read_wait_s;
    g_totals.write_wait_s += a->write_wait_s - before.write_wait_s;
    pthread_mutex_unlock(&g_lock);
    return DS_OK;
}

ds_status ds_host_optim_push(ds_host_optim *o, void *dev_params) {
    if (o->n == 0) return DS_OK;
    DS_TRY(fence(o));
    const ds_tier_ops *t = o->tier->ops;
    for (int64_t b = 0; b < o->n; b = piece_end(o, b)) {
        int64_t e = piece_end(o, b);
        float *st[3];
        DS_TRY(t->begin(o->tier, b, e, st));
        if (o->pt != DS_F32)
            DS_TRY(o->host->ops->cast(o->host, lp_at(o, b), o->pt, st[0], DS_F32,
                                      (size_t)(e - b)));
        DS_TRY(upload(o, dev_params, b, e, st[0]));
        DS_TRY(t->end(o->tier, b, e, false)); /* read only */
    }
    DS_TRY(wait(o, o->up));
    DS_TRY(t->finish(o->tier));
    return DS_OK;
}
