/* The communication thread of overlap_comm.
 *
 * Collectives the strategies issue during forward and backward (stage 2's
 * gradient buckets, stage 3's parameter gathers and prefetches) go into one
 * FIFO executed by one thread, so they run while the main thread computes the
 * next module. One FIFO keeps the collectives in the same order on every rank
 * (the main thread enqueues them in model order) and means only that thread
 * talks to the communicator while jobs are in flight (MPI_THREAD_SERIALIZED
 * is enough). Without overlap_comm the same jobs run inline at submission,
 * so the strategies have one code path.
 *
 * A job's status is kept; ds_comm_job_wait returns it. After a failure the
 * worker keeps failing later jobs with DS_ERR_COMM ("an earlier collective
 * failed") so no rank proceeds into a mismatched sequence. */
#ifndef DS_ZERO_COMM_WORKER_H
#define DS_ZERO_COMM_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/comm/comm.h"

typedef struct ds_comm_worker ds_comm_worker;

typedef enum ds_comm_job_kind {
    DS_JOB_REDUCE_SCATTERV = 0, /* send (sum of counts elements) -> recv (counts[rank]) */
    DS_JOB_ALL_GATHERV,         /* in place in buf: block rank is this rank's */
    DS_JOB_FN,                  /* run fn(arg) on the worker (host-side finishing work) */
} ds_comm_job_kind;

typedef struct ds_comm_job {
    ds_comm_job_kind kind;
    const void *send;
    void *buf;        /* recv for reduce_scatterv, the buffer otherwise */
    size_t *counts;   /* [world] block sizes; owned by the submitter, alive until waited */
    ds_dtype t;
    ds_status (*fn)(void *arg);
    void *arg;
    /* filled by the worker */
    volatile int done;
    ds_status status;
    char message[256];
} ds_comm_job;

/* `threaded`: run jobs on a thread (overlap_comm) or inline. */
ds_status ds_comm_worker_create(ds_comm *comm, bool threaded, ds_comm_worker **out);
void ds_comm_worker_destroy(ds_comm_worker *w);

/* Queue a job (the caller keeps the job memory alive until waited). Inline
 * mode runs it now. */
ds_status ds_comm_job_submit(ds_comm_worker *w, ds_comm_job *job);
/* Wait for the job and return its status (its message becomes this thread's
 * last error on failure). */
ds_status ds_comm_job_wait(ds_comm_worker *w, ds_comm_job *job);
/* Wait for everything queued so far. */
ds_status ds_comm_worker_drain(ds_comm_worker *w);

#endif /* DS_ZERO_COMM_WORKER_H */
