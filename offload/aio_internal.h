/* Internal to offload/aio*.c: the engine's state and the queue helpers its
 * two kinds of thread share. Call the helpers with `lock` held. */
#ifndef DS_OFFLOAD_AIO_INTERNAL_H
#define DS_OFFLOAD_AIO_INTERNAL_H

#include <pthread.h>

#include "offload/aio.h"

struct ds_aio {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a request was queued, or stop */
    pthread_cond_t done; /* a request completed */
    ds_aio_req *head, *tail;
    bool stop;
    bool uring;          /* io_uring threads, else the pool's */
    int64_t block;
    int queue_depth;
    int nthreads, started;
    pthread_t *threads;
};

/* The next piece of the queue's head request (*r, its byte offset *at and
 * length *len), taking the request off the queue with its last piece;
 * false when the queue is empty. */
bool ds_aio_take(ds_aio *a, ds_aio_req **r, uint64_t *at, uint64_t *len);

/* A piece finished with errno err (0: done); wakes the waiters when its
 * ticket has nothing left pending. */
void ds_aio_complete(ds_aio *a, ds_aio_req *r, uint64_t at, uint64_t len, int err);

/* offload/aio_uring.c: whether this build has io_uring, whether a ring of
 * `entries` can be made here, and the thread that runs one. */
bool ds_aio_uring_built(void);
bool ds_aio_uring_usable(int entries);
void *ds_aio_uring_worker(void *arg);

#endif /* DS_OFFLOAD_AIO_INTERNAL_H */
