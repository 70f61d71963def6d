/* The NVMe swap's I/O engine: one queue of requests, threads taking
 * block_size pieces off its head: blocking pread / pwrite each (the pool),
 * or io_uring with queue_depth in flight each (offload/aio_uring.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "offload/aio_internal.h"

/* One piece, retried until whole: pread / pwrite may move fewer bytes than
 * asked (a signal, a file system's own limit). Returns 0 or an errno. */
static int do_piece(int fd, char *buf, uint64_t len, uint64_t off, bool write) {
    while (len > 0) {
        ssize_t n = write ? pwrite(fd, buf, len, (off_t)off) : pread(fd, buf, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return write ? ENOSPC : EIO; /* no progress: a full disk, or past the end */
        buf += n;
        len -= (uint64_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

bool ds_aio_take(ds_aio *a, ds_aio_req **r, uint64_t *at, uint64_t *len) {
    ds_aio_req *q = a->head;
    if (!q) return false;
    *r = q;
    *at = q->next;
    *len = q->bytes - q->next < (uint64_t)a->block ? q->bytes - q->next : (uint64_t)a->block;
    q->next += *len;
    if (q->next == q->bytes) { /* every piece handed out: off the queue */
        a->head = q->qnext;
        if (!a->head) a->tail = NULL;
    }
    return true;
}

void ds_aio_complete(ds_aio *a, ds_aio_req *r, uint64_t at, uint64_t len, int err) {
    ds_aio_ticket *t = r->ticket;
    if (err && !t->err) {
        t->err = err;
        t->err_write = r->write;
        t->err_fd = r->fd;
        t->err_off = r->off + at;
    }
    r->done += len;
    if (r->done == r->bytes && --t->pending == 0) pthread_cond_broadcast(&a->done);
}

/* The pool's thread: one blocking transfer at a time. */
static void *worker(void *arg) {
    ds_aio *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        ds_aio_req *r;
        uint64_t at, len;
        while (!a->stop && !ds_aio_take(a, &r, &at, &len)) pthread_cond_wait(&a->work, &a->lock);
        if (a->stop) break;
        pthread_mutex_unlock(&a->lock);
        int err = r->inject_errno ? r->inject_errno
                                  : do_piece(r->fd, (char *)r->buf + at, len, r->off + at,
                                             r->write);
        pthread_mutex_lock(&a->lock);
        ds_aio_complete(a, r, at, len, err);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

ds_status ds_aio_create(const ds_aio_desc *d, ds_aio **out) {
    *out = NULL;
    if (d->block_size < 1 || d->queue_depth < 1 || d->thread_count < 1)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "aio: block_size, queue_depth and thread_count must be >= 1, got %lld, %d, "
                      "%d", (long long)d->block_size, d->queue_depth, d->thread_count);
    ds_aio *a = calloc(1, sizeof *a);
    if (!a) return DS_ERR(DS_ERR_OOM, "aio: out of host memory");
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->done, NULL);
    a->block = d->block_size;
    a->queue_depth = d->queue_depth;
    /* The pool unless io_uring is asked for: measured on this project's
     * machine, io_uring moved the swap's traffic no faster (bench/RESULTS.md).
     * io_uring needs the build's liburing and a kernel that lets us (a
     * container's seccomp profile may not). */
    a->uring = d->engine == DS_AIO_URING && ds_aio_uring_usable(d->queue_depth);
    if (d->engine == DS_AIO_URING && !a->uring) {
        ds_aio_destroy(a);
        return DS_ERR(DS_ERR_UNSUPPORTED, "aio: io_uring is not available (%s)",
                      ds_aio_uring_built() ? "the kernel refused io_uring_queue_init"
                                           : "built without liburing");
    }
    int n = a->uring ? d->thread_count : d->thread_count * d->queue_depth;
    a->threads = calloc((size_t)n, sizeof *a->threads);
    if (!a->threads) {
        ds_aio_destroy(a);
        return DS_ERR(DS_ERR_OOM, "aio: out of host memory for %d I/O threads", n);
    }
    a->nthreads = n;
    for (; a->started < n; a->started++) {
        int rc = pthread_create(&a->threads[a->started], NULL,
                                a->uring ? ds_aio_uring_worker : worker, a);
        if (rc != 0) {
            ds_aio_destroy(a);
            return DS_ERR(DS_ERR_IO, "aio: starting I/O thread %d of %d: %s", a->started + 1, n,
                          strerror(rc));
        }
    }
    *out = a;
    return DS_OK;
}

void ds_aio_destroy(ds_aio *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->lock);
    for (int i = 0; i < a->started; i++) pthread_join(a->threads[i], NULL);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->done);
    pthread_mutex_destroy(&a->lock);
    free(a->threads);
    free(a);
}

void ds_aio_submit(ds_aio *a, ds_aio_req *reqs, int n, ds_aio_ticket *t) {
    pthread_mutex_lock(&a->lock);
    for (int i = 0; i < n; i++) {
        ds_aio_req *r = &reqs[i];
        if (r->bytes == 0) continue; /* nothing to move: never queued, never waited for */
        r->next = r->done = 0;
        r->qnext = NULL;
        r->ticket = t;
        t->pending++;
        if (a->tail) a->tail->qnext = r;
        else a->head = r;
        a->tail = r;
    }
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->lock);
}

bool ds_aio_wait(ds_aio *a, ds_aio_ticket *t) {
    pthread_mutex_lock(&a->lock);
    while (t->pending > 0) pthread_cond_wait(&a->done, &a->lock);
    bool ok = t->err == 0;
    pthread_mutex_unlock(&a->lock);
    return ok;
}

int ds_aio_threads(const ds_aio *a) { return a->nthreads; }

const char *ds_aio_engine_name(const ds_aio *a) { return a->uring ? "io_uring" : "pool"; }
