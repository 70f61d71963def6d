/* Stage 3's parameter partition off the device: host memory, and for nvme
 * a file past max_in_cpu elements, moved through aligned buffers. */
#include "offload/param_store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/io/fault.h"
#include "offload/aio.h"
#include "offload/nvme_dir.h"

struct ds_param_store {
    ds_backend *dev;
    ds_dtype t;
    size_t esz;
    int64_t n, n_host;     /* [0, n_host) in host memory, [n_host, n) in the file */
    void *host;
    bool host_pinned;
    /* nvme */
    ds_nvme_dir dir;
    char nvme_path[256];
    int rank;
    int fd;
    uint64_t file_bytes, file_state; /* reserved; of which parameters (accounted) */
    ds_aio *aio;
    int nbuf;
    char **buf;
    uint64_t buf_bytes;
    bool lost;
    char lost_msg[768];
};

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static void textf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void textf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap); /* a long path is cut in the message */
    va_end(ap);
}

uint64_t ds_param_store_file_bytes(int64_t n, ds_dtype t, int64_t max_in_cpu) {
    int64_t host = n < max_in_cpu ? n : max_in_cpu;
    return round_up((uint64_t)(n - host) * ds_dtype_size(t), DS_NVME_ALIGN);
}

/* ------------------------------------------------------------ file I/O -- */

/* A transfer failed: the file no longer holds the partition; it goes now
 * and every later call says so. */
static ds_status lose(ds_param_store *ps, const ds_aio_ticket *tk) {
    textf(ps->lost_msg, sizeof ps->lost_msg,
          "offload_param on rank %d: %s the parameter file params.swp in %s at offset %llu: "
          "%s; %lld bytes free on %s; the file was removed", ps->dir.rank,
          tk->err_write ? "writing" : "reading", ps->dir.path,
          (unsigned long long)tk->err_off, strerror(tk->err),
          (long long)ds_nvme_free_bytes(ps->nvme_path), ps->nvme_path);
    if (ps->fd >= 0) close(ps->fd);
    ps->fd = -1;
    ds_nvme_dir_remove(&ps->dir);
    ps->lost = true;
    return DS_ERR(DS_ERR_IO, "%s", ps->lost_msg);
}

static ds_status alive(const ds_param_store *ps) {
    if (ps->lost)
        return DS_ERR(DS_ERR_IO, "the parameters on NVMe were lost (%s); load the last "
                      "checkpoint (ds_load_checkpoint with the optimizer state) to make the "
                      "file anew", ps->lost_msg);
    return DS_OK;
}

ds_status ds_param_store_check(const ds_param_store *ps) { return alive(ps); }

/* File bytes [a, a + bytes) to / from buffer k, waited for. */
static ds_status xfer(ds_param_store *ps, int k, uint64_t a, uint64_t bytes, bool write) {
    ds_aio_req r = {.fd = ps->fd, .buf = ps->buf[k], .bytes = bytes, .off = a, .write = write};
    ds_aio_ticket tk;
    ds_aio_ticket_init(&tk);
    ds_aio_submit(ps->aio, &r, 1, &tk);
    if (!ds_aio_wait(ps->aio, &tk)) return lose(ps, &tk);
    return DS_OK;
}

/* The device's copies to and from the pinned buffers done. A copy with the
 * default stream is asynchronous on cuda when the host side is pinned (the
 * buffers and a pinned host part are): the disk must not write a buffer
 * before the copy into it has landed, nor a read refill one (or the host
 * part change) while a copy out of it is still queued behind kernels. A
 * no-op on cpu. */
static ds_status fence(ds_param_store *ps) { return ps->dev->ops->sync(ps->dev); }

/* File bytes [b, e) (unaligned) to dst (device memory): whole blocks around
 * them, up to nbuf chunks of buf_bytes in flight at once. */
static ds_status file_read(ds_param_store *ps, uint64_t b, uint64_t e, char *dst) {
    uint64_t a0 = b / DS_NVME_ALIGN * DS_NVME_ALIGN, e0 = round_up(e, DS_NVME_ALIGN);
    ds_aio_req r[8];
    uint64_t start[8];
    for (uint64_t at = a0; at < e0;) {
        ds_aio_ticket tk;
        ds_aio_ticket_init(&tk);
        int k = 0;
        for (; k < ps->nbuf && at < e0; k++, at += ps->buf_bytes) {
            uint64_t len = e0 - at < ps->buf_bytes ? e0 - at : ps->buf_bytes;
            start[k] = at;
            r[k] = (ds_aio_req){.fd = ps->fd, .buf = ps->buf[k], .bytes = len, .off = at};
        }
        if (ds_fault_error("nvme:param_read", ps->dir.rank) != DS_OK) {
            ds_clear_error(); /* tests: a failing disk, reported by the read itself */
            for (int j = 0; j < k; j++) r[j].inject_errno = EIO;
        }
        ds_aio_submit(ps->aio, r, k, &tk);
        if (!ds_aio_wait(ps->aio, &tk)) return lose(ps, &tk);
        for (int j = 0; j < k; j++) { /* the caller's part of chunk j */
            uint64_t cb = start[j] > b ? start[j] : b;
            uint64_t ce = start[j] + r[j].bytes < e ? start[j] + r[j].bytes : e;
            DS_TRY(ps->dev->ops->memcpy(ps->dev, dst + (cb - b), ps->buf[j] + (cb - start[j]),
                                        ce - cb, DS_COPY_H2D, NULL));
        }
        DS_TRY(fence(ps)); /* the buffers are refilled next, here or by the next call */
    }
    return DS_OK;
}

/* File bytes [b, e) from src (host or device memory), a chunk at a time
 * through buffer 0; a chunk the range covers only in part is read first. */
static ds_status file_write(ds_param_store *ps, uint64_t b, uint64_t e, const char *src,
                            bool from_host) {
    uint64_t a0 = b / DS_NVME_ALIGN * DS_NVME_ALIGN, e0 = round_up(e, DS_NVME_ALIGN);
    for (uint64_t at = a0; at < e0; at += ps->buf_bytes) {
        uint64_t len = e0 - at < ps->buf_bytes ? e0 - at : ps->buf_bytes;
        uint64_t cb = at > b ? at : b, ce = at + len < e ? at + len : e;
        if (cb > at || ce < at + len) DS_TRY(xfer(ps, 0, at, len, false));
        if (from_host)
            memcpy(ps->buf[0] + (cb - at), src + (cb - b), ce - cb);
        else
            DS_TRY(ps->dev->ops->memcpy(ps->dev, ps->buf[0] + (cb - at), src + (cb - b), ce - cb,
                                        DS_COPY_D2H, NULL));
        DS_TRY(fence(ps)); /* the copy has landed before the disk reads the buffer */
        DS_TRY(xfer(ps, 0, at, len, true));
    }
    return DS_OK;
}

/* ---------------------------------------------------------------- API -- */

static ds_status check_range(const ds_param_store *ps, int64_t lo, int64_t hi) {
    if (lo < 0 || hi > ps->n || lo > hi)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "offload_param: range [%lld, %lld) outside the partition's [0, %lld)",
                      (long long)lo, (long long)hi, (long long)ps->n);
    return alive(ps);
}

ds_status ds_param_store_read(ds_param_store *ps, int64_t lo, int64_t hi, void *dst) {
    DS_TRY(check_range(ps, lo, hi));
    char *d = dst;
    int64_t m = hi < ps->n_host ? hi : ps->n_host; /* [lo, m) from host memory */
    if (lo < m)
        DS_TRY(ps->dev->ops->memcpy(ps->dev, d, (char *)ps->host + (size_t)lo * ps->esz,
                                    (size_t)(m - lo) * ps->esz, DS_COPY_H2D, NULL));
    int64_t f = lo > ps->n_host ? lo : ps->n_host; /* [f, hi) from the file */
    if (f < hi)
        DS_TRY(file_read(ps, (uint64_t)(f - ps->n_host) * ps->esz,
                         (uint64_t)(hi - ps->n_host) * ps->esz, d + (size_t)(f - lo) * ps->esz));
    return DS_OK;
}

ds_status ds_param_store_write(ds_param_store *ps, int64_t lo, int64_t hi, const void *src,
                               bool from_host) {
    DS_TRY(check_range(ps, lo, hi));
    const char *s = src;
    int64_t m = hi < ps->n_host ? hi : ps->n_host;
    if (lo < m) {
        char *h = (char *)ps->host + (size_t)lo * ps->esz;
        size_t bytes = (size_t)(m - lo) * ps->esz;
        if (from_host) {
            if (ps->host_pinned) DS_TRY(fence(ps)); /* no copy out of it still queued */
            memcpy(h, s, bytes);
        } else {
            DS_TRY(ps->dev->ops->memcpy(ps->dev, h, s, bytes, DS_COPY_D2H, NULL));
        }
    }
    int64_t f = lo > ps->n_host ? lo : ps->n_host;
    if (f < hi)
        DS_TRY(file_write(ps, (uint64_t)(f - ps->n_host) * ps->esz,
                          (uint64_t)(hi - ps->n_host) * ps->esz, s + (size_t)(f - lo) * ps->esz,
                          from_host));
    return DS_OK;
}

static ds_status open_file(ds_param_store *ps) {
    DS_TRY(ds_nvme_dir_open("zero_optimization.offload_param", ps->nvme_path, ps->rank,
                            &ps->dir));
    DS_TRY(ds_nvme_dir_file(&ps->dir, "params.swp", ps->file_bytes, &ps->fd));
    return DS_OK;
}

/* A new folder and file, empty (lose() waited for the transfer that
 * failed); the host part, the buffers and the I/O threads stay. */
ds_status ds_param_store_revive(ds_param_store *ps) {
    if (!ps->lost) return DS_OK;
    ds_status st = open_file(ps);
    if (st != DS_OK) {
        if (ps->fd >= 0) close(ps->fd);
        ps->fd = -1;
        ds_nvme_dir_remove(&ps->dir);
        ds_error_prefix("offload_param on rank %d: making the parameter file anew after its "
                        "loss", ps->rank);
        return st;
    }
    ps->lost = false;
    return DS_OK;
}

static ds_status build(ds_param_store *ps, const ds_param_store_desc *d) {
    const ds_offload_config *o = d->off;
    bool nvme = o->device == DS_OFFLOAD_NVME;
    ps->n_host = nvme ? (d->n < o->max_in_cpu ? d->n : o->max_in_cpu) : d->n;
    size_t hb = (size_t)ps->n_host * ps->esz;
    ps->host_pinned = o->pin_memory;
    if (ps->host_pinned)
        DS_TRY(ds_backend_alloc(ps->dev, DS_MEM_PARAMS, DS_PLACE_HOST, hb, &ps->host));
    else
        DS_TRY(ds_mem_host_alloc(ps->dev->mem, DS_MEM_PARAMS, hb, "offload_param partition",
                                 &ps->host));
    if (!nvme || ps->n_host == d->n) return DS_OK;
    snprintf(ps->nvme_path, sizeof ps->nvme_path, "%s", o->nvme_path);
    ps->rank = d->rank;
    uint64_t state = (uint64_t)(d->n - ps->n_host) * ps->esz;
    ps->file_bytes = round_up(state, DS_NVME_ALIGN);
    DS_TRY(open_file(ps));
    ds_mem_add(ps->dev->mem, DS_MEM_PARAMS, DS_PLACE_NVME, (int64_t)state);
    ps->file_state = state; /* counted: destroy takes it back */
    /* buffer_count buffers (at most 8 in flight) of buffer_size elements,
     * never more than the file holds */
    ps->buf_bytes = round_up((uint64_t)o->buffer_size * ps->esz, DS_NVME_ALIGN);
    if (ps->buf_bytes > ps->file_bytes) ps->buf_bytes = ps->file_bytes;
    ps->nbuf = o->buffer_count < 8 ? o->buffer_count : 8;
    ps->buf = calloc((size_t)ps->nbuf, sizeof *ps->buf);
    if (!ps->buf) return DS_ERR(DS_ERR_OOM, "offload_param: out of host memory");
    for (int k = 0; k < ps->nbuf; k++)
        DS_TRY(ds_backend_alloc(ps->dev, DS_MEM_BUFFERS, DS_PLACE_HOST, ps->buf_bytes,
                                (void **)&ps->buf[k]));
    ds_aio_desc ad = {.block_size = d->aio->block_size, .queue_depth = d->aio->queue_depth,
                      .thread_count = d->aio->thread_count};
    DS_TRY(ds_aio_create(&ad, &ps->aio));
    return DS_OK;
}

ds_status ds_param_store_create(const ds_param_store_desc *d, ds_param_store **out) {
    *out = NULL;
    if (!d->dev || !d->off || d->n < 0 || d->off->device == DS_OFFLOAD_NONE ||
        (d->off->device == DS_OFFLOAD_NVME && !d->aio))
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_param_store_create: bad descriptor");
    ds_param_store *ps = calloc(1, sizeof *ps);
    if (!ps) return DS_ERR(DS_ERR_OOM, "offload_param: out of host memory");
    ps->dev = d->dev;
    ps->t = d->t;
    ps->esz = ds_dtype_size(d->t);
    ps->n = d->n;
    ps->fd = -1;
    ps->dir.lock_fd = -1;
    ds_status st = build(ps, d);
    if (st != DS_OK) {
        ds_error_prefix("offload_param: the parameter partition of %lld elements",
                        (long long)d->n);
        ds_error_trace(__FILE__, __LINE__);
        ds_param_store_destroy(ps);
        return st;
    }
    *out = ps;
    return DS_OK;
}

void ds_param_store_destroy(ds_param_store *ps) {
    if (!ps) return;
    ds_aio_destroy(ps->aio); /* every transfer was waited for */
    if (ps->fd >= 0) close(ps->fd);
    ds_nvme_dir_remove(&ps->dir);
    if (ps->file_state) ds_mem_add(ps->dev->mem, DS_MEM_PARAMS, DS_PLACE_NVME,
                                   -(int64_t)ps->file_state);
    for (int k = 0; ps->buf && k < ps->nbuf; k++)
        ds_backend_free(ps->dev, DS_MEM_BUFFERS, DS_PLACE_HOST, ps->buf[k], ps->buf_bytes);
    free(ps->buf);
    size_t hb = (size_t)ps->n_host * ps->esz;
    if (ps->host_pinned) ds_backend_free(ps->dev, DS_MEM_PARAMS, DS_PLACE_HOST, ps->host, hb);
    else ds_mem_host_free(ps->dev->mem, DS_MEM_PARAMS, ps->host, hb);
    free(ps);
}
