/* The io_uring threads of the NVMe swap's I/O engine: each owns a ring of
 * queue_depth entries, keeps it full from the shared queue and completes
 * pieces as their completions arrive. Built only with liburing
 * (DS_HAVE_URING); otherwise io_uring is reported unusable. Measured
 * against the pool in bench/RESULTS.md, where it was no faster, so it runs
 * only when asked for (ds_aio_desc.engine DS_AIO_URING). */
#include "offload/aio_internal.h"

#ifdef DS_HAVE_URING

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

bool ds_aio_uring_built(void) { return true; }

bool ds_aio_uring_usable(int entries) {
    struct io_uring ring;
    if (io_uring_queue_init((unsigned)entries, &ring, 0) != 0) return false;
    io_uring_queue_exit(&ring);
    return true;
}

typedef struct inflight {
    ds_aio_req *r;
    uint64_t at, len;  /* the piece */
    uint64_t moved;    /* bytes of it done (a short transfer is resubmitted) */
} inflight;

static void prep(struct io_uring *ring, inflight *f, int slot) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring); /* never NULL: one per free slot */
    char *buf = (char *)f->r->buf + f->at + f->moved;
    unsigned n = (unsigned)(f->len - f->moved);
    uint64_t off = f->r->off + f->at + f->moved;
    if (f->r->write) io_uring_prep_write(sqe, f->r->fd, buf, n, off);
    else io_uring_prep_read(sqe, f->r->fd, buf, n, off);
    io_uring_sqe_set_data64(sqe, (uint64_t)slot);
}

void *ds_aio_uring_worker(void *arg) {
    ds_aio *a = arg;
    struct io_uring ring;
    int qd = a->queue_depth;
    inflight *fl = calloc((size_t)qd, sizeof *fl);
    int *free_slots = calloc((size_t)qd, sizeof *free_slots);
    /* a ring this thread could not make (the memlock limit with several
     * rings): every piece fails with the reason, and nothing is torn down */
    int init_rc = fl && free_slots ? io_uring_queue_init((unsigned)qd, &ring, 0) : -ENOMEM;
    bool ring_up = init_rc == 0, ok = ring_up;
    int fail_errno = ring_up ? EIO : -init_rc;
    int nfree = qd, busy = 0;
    for (int i = 0; i < qd && free_slots; i++) free_slots[i] = qd - 1 - i;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        /* fill the ring from the queue; failed pieces complete at once */
        int queued = 0;
        ds_aio_req *r;
        uint64_t at, len;
        while (nfree > 0 && ds_aio_take(a, &r, &at, &len)) {
            if (!ok || r->inject_errno) {
                ds_aio_complete(a, r, at, len, ok ? r->inject_errno : fail_errno);
                continue;
            }
            int s = free_slots[--nfree];
            fl[s] = (inflight){.r = r, .at = at, .len = len};
            prep(&ring, &fl[s], s);
            queued++;
            busy++;
        }
        if (busy == 0) {
            if (a->stop) break;
            pthread_cond_wait(&a->work, &a->lock);
            continue;
        }
        pthread_mutex_unlock(&a->lock);
        if (queued) io_uring_submit(&ring);
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&ring, &cqe);
        pthread_mutex_lock(&a->lock);
        while (rc == 0) { /* every completion that is there */
            int s = (int)io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&ring, cqe);
            inflight *f = &fl[s];
            if (res > 0 && f->moved + (uint64_t)res < f->len) { /* short: the rest again */
                f->moved += (uint64_t)res;
                prep(&ring, f, s);
                pthread_mutex_unlock(&a->lock);
                io_uring_submit(&ring);
                pthread_mutex_lock(&a->lock);
            } else {
                int err = res < 0 ? -res : res == 0 ? (f->r->write ? ENOSPC : EIO) : 0;
                ds_aio_complete(a, f->r, f->at, f->len, err);
                free_slots[nfree++] = s;
                busy--;
            }
            rc = io_uring_peek_cqe(&ring, &cqe);
        }
        if (rc != 0 && rc != -EAGAIN && rc != -EINTR) ok = false; /* the ring broke */
    }
    pthread_mutex_unlock(&a->lock);
    if (ring_up) io_uring_queue_exit(&ring);
    free(fl);
    free(free_slots);
    return NULL;
}

#else /* no liburing in this build: the pool runs */

bool ds_aio_uring_built(void) { return false; }
bool ds_aio_uring_usable(int entries) {
    (void)entries;
    return false;
}
void *ds_aio_uring_worker(void *arg) { return arg; }

#endif
