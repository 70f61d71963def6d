/* Optimizer state in host memory: allocation, the chunked copy/update
 * pipeline, and pushing the master to the device's working parameters. */
#include "offload/host_optim.h"

#include <stdlib.h>

/* Elements per pipeline chunk: 4 Mi elements (16 MiB of fp32 master) is
 * large enough that each chunk's OpenMP update and copy launches amortise
 * their fixed cost, and small enough that only the first chunk's download
 * and the last chunk's upload are not hidden behind host math. */
#define DS_HOST_OPTIM_CHUNK ((int64_t)1 << 22)

struct ds_host_optim {
    ds_backend *dev;    /* engine backend (borrowed) */
    ds_backend *host;   /* host math: == dev on cpu, an owned cpu backend on cuda */
    bool own_host;
    int64_t n;
    int n_moments;
    ds_dtype gt, pt;
    bool pinned;        /* master and moments allocated pinned through dev */
    float *master;      /* [n] fp32 */
    float *moment[2];   /* [n] fp32 each, as many as n_moments */
    void *gstage;       /* [n] gt: the partition's gradients */
    void *pstage;       /* [n] pt: updated working parameters (param_t != F32 only) */
    ds_stream *down, *up; /* device->host and host->device copy streams (NULL on cpu) */
    ds_event *ready;    /* recorded on the default stream at the start of a step */
};

static bool is_float_type(ds_dtype t) { return t == DS_F32 || t == DS_F16 || t == DS_BF16; }

/* Master and moments: pinned through the engine backend, or plain host RAM
 * (page-aligned) through the host backend. Either way counted at HOST. */
static ds_status alloc_state(ds_host_optim *o, ds_mem_purpose purpose, float **out) {
    ds_backend *be = o->pinned ? o->dev : o->host;
    DS_TRY(ds_backend_alloc(be, purpose, DS_PLACE_HOST, (size_t)o->n * sizeof(float),
                            (void **)out));
    return DS_OK;
}

static void free_state(ds_host_optim *o, ds_mem_purpose purpose, float *p) {
    ds_backend_free(o->pinned ? o->dev : o->host, purpose, DS_PLACE_HOST, p,
                    (size_t)o->n * sizeof(float));
}

static ds_status build(ds_host_optim *o, const ds_host_optim_desc *d) {
    if (d->dev->kind == DS_BACKEND_CPU) {
        o->host = d->dev; /* its "device" memory is host RAM already */
    } else {
        ds_backend_desc hd = {.kind = DS_BACKEND_CPU, .num_threads = d->num_threads,
                              .mem = d->dev->mem};
        DS_TRY(ds_backend_create(&hd, &o->host));
        o->own_host = true;
    }
    DS_TRY(alloc_state(o, DS_MEM_MASTER, &o->master));
    for (int k = 0; k < o->n_moments; k++) DS_TRY(alloc_state(o, DS_MEM_OPTIM, &o->moment[k]));
    /* Staging buffers are the ends of asynchronous copies: page-locked on
     * cuda whatever pin_memory says (the engine backend's HOST place). */
    DS_TRY(ds_backend_alloc(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST,
                            (size_t)o->n * ds_dtype_size(o->gt), &o->gstage));
    if (o->pt != DS_F32)
        DS_TRY(ds_backend_alloc(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST,
                                (size_t)o->n * ds_dtype_size(o->pt), &o->pstage));
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
    ds_host_optim *o = calloc(1, sizeof *o);
    if (!o) return DS_ERR(DS_ERR_OOM, "ds_host_optim_create: out of host memory");
    o->dev = d->dev;
    o->n = d->n;
    o->n_moments = d->n_moments;
    o->gt = d->grad_t;
    o->pt = d->param_t;
    o->pinned = d->pin_memory;
    ds_status st = build(o, d);
    if (st != DS_OK) {
        ds_error_prefix("offload_optimizer: host state of %lld elements", (long long)d->n);
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
    if (o->host) {
        free_state(o, DS_MEM_MASTER, o->master);
        for (int k = 0; k < 2; k++) free_state(o, DS_MEM_OPTIM, o->moment[k]);
    }
    ds_backend_free(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST, o->gstage,
                    (size_t)o->n * ds_dtype_size(o->gt));
    ds_backend_free(o->dev, DS_MEM_BUFFERS, DS_PLACE_HOST, o->pstage,
                    (size_t)o->n * ds_dtype_size(o->pt));
    if (o->own_host) ds_backend_destroy(o->host);
    free(o);
}

float *ds_host_optim_master(ds_host_optim *o) { return o->master; }

float *ds_host_optim_moment(ds_host_optim *o, int k) {
    return k >= 0 && k < o->n_moments ? o->moment[k] : NULL;
}

ds_backend *ds_host_optim_backend(ds_host_optim *o) { return o->host; }

static void *at(void *base, ds_dtype t, int64_t i) {
    return (char *)base + (size_t)i * ds_dtype_size(t);
}

static const void *cat(const void *base, ds_dtype t, int64_t i) {
    return (const char *)base + (size_t)i * ds_dtype_size(t);
}

static ds_status wait(ds_host_optim *o, ds_stream *s) {
    if (s) DS_TRY(o->dev->ops->stream_sync(o->dev, s));
    return DS_OK;
}

/* Gradients of chunk [b, e) into the host staging buffer. */
static ds_status download(ds_host_optim *o, const void *dev_grads, int64_t b, int64_t e) {
    DS_TRY(o->dev->ops->memcpy(o->dev, at(o->gstage, o->gt, b), cat(dev_grads, o->gt, b),
                               (size_t)(e - b) * ds_dtype_size(o->gt), DS_COPY_D2H, o->down));
    return DS_OK;
}

/* Working parameters of chunk [b, e): the low-precision staging copy the
 * update wrote, or the fp32 master itself. */
static ds_status upload(ds_host_optim *o, void *dev_params, int64_t b, int64_t e) {
    const void *src = o->pt == DS_F32 ? (const void *)(o->master + b) : cat(o->pstage, o->pt, b);
    DS_TRY(o->dev->ops->memcpy(o->dev, at(dev_params, o->pt, b), src,
                               (size_t)(e - b) * ds_dtype_size(o->pt), DS_COPY_H2D, o->up));
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

/* The same dispatch as zero/optim.c, on host memory: the cpu backend's
 * slots, so the arithmetic is that of a non-offloaded cpu run. */
static ds_status update(ds_host_optim *o, const ds_host_update *u, int64_t b, int64_t e) {
    ds_backend *h = o->host;
    size_t n = (size_t)(e - b);
    float *w = o->master + b;
    const void *g = cat(o->gstage, o->gt, b);
    float *m0 = o->moment[0] ? o->moment[0] + b : NULL;
    float *m1 = o->moment[1] ? o->moment[1] + b : NULL;
    void *lp = o->pt != DS_F32 ? at(o->pstage, o->pt, b) : NULL;
    if (u->type == DS_OPTIM_SGD)
        DS_TRY(h->ops->sgd(h, w, g, o->gt, u->grad_mult, m0, n, &u->sgd, lp, o->pt));
    else
        DS_TRY(h->ops->adam(h, w, g, o->gt, u->grad_mult, m0, m1, n, &u->adam, lp, o->pt));
    return DS_OK;
}

ds_status ds_host_optim_step(ds_host_optim *o, const ds_host_update *u, const void *dev_grads,
                             void *dev_params) {
    if (o->n == 0) return DS_OK;
    DS_TRY(fence(o));
    /* Pipeline: chunk k+1 downloads and chunk k-1 uploads while chunk k is
     * updated. The staging buffers span the whole partition, so no chunk's
     * buffer is reused within a step. */
    int64_t chunk = DS_HOST_OPTIM_CHUNK;
    DS_TRY(download(o, dev_grads, 0, o->n < chunk ? o->n : chunk));
    for (int64_t b = 0; b < o->n; b += chunk) {
        int64_t e = o->n - b < chunk ? o->n : b + chunk;
        DS_TRY(wait(o, o->down)); /* chunk [b, e) has landed */
        if (e < o->n) DS_TRY(download(o, dev_grads, e, o->n - e < chunk ? o->n : e + chunk));
        DS_TRY(update(o, u, b, e));
        DS_TRY(upload(o, dev_params, b, e));
    }
    /* Callers use dev_params next (all-gather, forward) and may read the
     * master on the host: everything has landed when this returns. */
    DS_TRY(wait(o, o->down));
    DS_TRY(wait(o, o->up));
    return DS_OK;
}

ds_status ds_host_optim_push(ds_host_optim *o, void *dev_params) {
    if (o->n == 0) return DS_OK;
    if (o->pt != DS_F32)
        DS_TRY(o->host->ops->cast(o->host, o->pstage, o->pt, o->master, DS_F32, (size_t)o->n));
    DS_TRY(fence(o));
    DS_TRY(upload(o, dev_params, 0, o->n));
    DS_TRY(wait(o, o->up));
    return DS_OK;
}
