/* Asynchronous file I/O for the NVMe swap, on O_DIRECT file descriptors:
 * a pool of threads running pread / pwrite (the default), or io_uring
 * (offload/aio_uring.c, when built with Debian's liburing-dev and the
 * kernel allows it; chosen by DS_AIO_URING, for measurements).
 *
 * DeepSpeed's "aio" section describes its libaio handle; here the same keys
 * size the engine:
 *
 *   block_size     each request is cut into pieces of this many bytes
 *   thread_count   (alias intra_op_parallelism) threads, each keeping
 *   queue_depth    pieces in flight in its ring (io_uring); the pool runs
 *                  thread_count * queue_depth threads of one piece each, so
 *                  the disk sees as many outstanding requests either way
 *
 * single_submit and overlap_events choose how libaio's io_submit and
 * io_getevents calls are batched; they do not change what this engine does
 * (bench/RESULTS.md measures io_uring against the pool).
 *
 * Usage (offload/nvme_swap.c):
 *
 *   ds_aio *a;
 *   DS_TRY(ds_aio_create(&(ds_aio_desc){.block_size = 1 << 20, .queue_depth = 8,
 *                                       .thread_count = 1}, &a));
 *   ds_aio_ticket t;                  // one per group of requests to wait for
 *   ds_aio_req r[2] = {{.fd = fd0, .buf = b0, .bytes = n, .off = 0, .write = true}, ...};
 *   ds_aio_ticket_init(&t);
 *   ds_aio_submit(a, r, 2, &t);       // returns at once
 *   ...                               // compute
 *   if (!ds_aio_wait(a, &t)) ...      // t.err: errno of the first failed piece
 *   ds_aio_destroy(a);                // waits for nothing: wait first
 *
 * Requests and tickets are the caller's memory and must stay put until the
 * ticket is waited for; nothing is allocated per request. Buffers, offsets
 * and sizes must be multiples of the file system's block (4096 here: the
 * swap keeps every one of them so). Thread-safe for one submitting thread. */
#ifndef DS_OFFLOAD_AIO_H
#define DS_OFFLOAD_AIO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_aio ds_aio;

typedef enum ds_aio_engine {
    DS_AIO_AUTO = 0,    /* the pool: io_uring measured no faster here (bench/RESULTS.md) */
    DS_AIO_POOL,        /* thread_count * queue_depth threads of blocking pread / pwrite */
    DS_AIO_URING,       /* thread_count threads, each a ring of queue_depth entries */
} ds_aio_engine;

typedef struct ds_aio_desc {
    int64_t block_size; /* bytes per piece, > 0 */
    int queue_depth;    /* >= 1 */
    int thread_count;   /* >= 1 */
    ds_aio_engine engine;
} ds_aio_desc;

/* What a group of requests came to. Read err only after ds_aio_wait. */
typedef struct ds_aio_ticket {
    int pending;        /* requests not yet complete */
    int err;            /* errno of the first failed piece, 0 if none */
    bool err_write;     /* the failed piece was a write */
    int err_fd;         /* its file descriptor */
    uint64_t err_off;   /* its file offset */
} ds_aio_ticket;

typedef struct ds_aio_req {
    int fd;
    void *buf;
    uint64_t bytes;
    uint64_t off;       /* file offset of buf[0] */
    bool write;
    int inject_errno;   /* tests: fail every piece with this errno instead of doing it */
    /* internal */
    uint64_t next, done;
    struct ds_aio_req *qnext;
    ds_aio_ticket *ticket;
} ds_aio_req;

/* Start the threads. Errors: DS_ERR_INVALID_ARG (a size < 1), DS_ERR_OOM,
 * DS_ERR_IO (a thread that could not start, with strerror),
 * DS_ERR_UNSUPPORTED (engine DS_AIO_URING where io_uring is not available). */
ds_status ds_aio_create(const ds_aio_desc *d, ds_aio **out);

/* Stop and join the threads. Requests still queued are dropped: wait for
 * every ticket first. NULL is a no-op. */
void ds_aio_destroy(ds_aio *a);

static inline void ds_aio_ticket_init(ds_aio_ticket *t) {
    *t = (ds_aio_ticket){0};
}

/* Queue n requests under ticket t (which may already hold others). */
void ds_aio_submit(ds_aio *a, ds_aio_req *reqs, int n, ds_aio_ticket *t);

/* Block until every request of t is complete; true when all succeeded.
 * Waiting on a ticket with nothing pending returns at once. */
bool ds_aio_wait(ds_aio *a, ds_aio_ticket *t);

/* I/O threads running, and which engine they are: "io_uring" or "pool". */
int ds_aio_threads(const ds_aio *a);
const char *ds_aio_engine_name(const ds_aio *a);

#ifdef __cplusplus
}
#endif
#endif /* DS_OFFLOAD_AIO_H */
