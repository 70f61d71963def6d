/* The communication thread of overlap_comm: the one owner of a communicator
 * while the collectives of a step are in flight.
 *
 * Collectives the strategies issue during forward and backward (the
 * gradient buckets of stages 0-2, stage 3's parameter gathers and
 * prefetches) go into one
 * FIFO executed by one thread, so they run while the main thread computes the
 * next module. One FIFO keeps the collectives in the same order on every rank
 * (the main thread enqueues them in model order). Without overlap_comm the
 * same jobs run inline at submission, so the strategies have one code path.
 *
 * One owner: while a threaded worker exists, a collective called on any
 * other thread (the engine's scalar all-reduces, ds_comm_agree, a
 * checkpoint's barrier) first waits until the worker's queue is empty, inside
 * the ds_comm_* call itself, so two threads never use the communicator at
 * the same time and callers need not know the worker exists.
 *
 * Failures: a job's status and message are kept; ds_comm_job_wait returns
 * them. After a failure the worker does not run later jobs (no rank proceeds
 * into a mismatched sequence): each of them, and ds_comm_worker_drain, fails
 * with the FIRST failure's status and message, which is the one that names
 * the peer, the collective and the job ("gradient bucket of modules 3-5
 * ...: rank 0 waited 30.0 s for rank 1"), not a generic "an earlier
 * collective failed". */
#ifndef DS_COMM_COMM_WORKER_H
#define DS_COMM_COMM_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/comm/comm.h"

typedef struct ds_comm_worker ds_comm_worker;

typedef enum ds_comm_job_kind {
    DS_JOB_REDUCE_SCATTERV = 0, /* send (sum of counts elements) -> recv (counts[rank]) */
    DS_JOB_ALL_GATHERV,         /* in place in buf: block rank is this rank's */
    DS_JOB_FN,                  /* run fn(arg) on the worker (host-side finishing work) */
    DS_JOB_ALL_REDUCE,          /* sum of count elements, in place in buf */
} ds_comm_job_kind;

typedef struct ds_comm_job {
    ds_comm_job_kind kind;
    /* The communicator the collective runs on: NULL for the worker's own,
     * or one of its sub-communicators (ds_comm_split; one thread owns them
     * all). counts then has that communicator's world entries. */
    ds_comm *comm;
    const void *send;
    void *buf;        /* recv for reduce_scatterv, the buffer otherwise */
    size_t *counts;   /* [world] block sizes; owned by the submitter, alive until waited */
    size_t count;     /* all_reduce: elements */
    ds_dtype t;
    ds_status (*fn)(void *arg);
    void *arg;
    /* What the job is for, named in its failure message (the collective's
     * context, ds_comm_set_context): "gradient bucket of modules 3-5 of 12
     * (bert.encoder.layer.0.*)". "" for none. */
    char what[256];
    /* Gated: the job's input is known only after it must be queued (the
     * rows the next micro-batch reads, zero/param_rows.h, queued at the
     * update so that it runs before the parameter chunks queued behind it).
     * The worker stops before a gated job until ds_comm_job_open. A wait on
     * the worker from another thread (ds_comm_job_wait for this job or a
     * later one, drain, a collective's wait for the queue) opens it first
     * with `forced` set: the thread that would give the input is waiting,
     * so the job runs without it. The worker's destruction drops a gated
     * job still closed (no one will read what it brings; a rank that fails
     * before its next forward must not start a collective its peers never
     * join), and every job queued behind it, which would otherwise start
     * while the peers run the gated one. Inline, a gated job runs when
     * opened (at most one waits). */
    bool gated;
    bool forced;      /* set when a wait, not ds_comm_job_open, opened it */
    /* filled by the worker */
    volatile int closed;
    volatile int done;
    ds_status status;
    char message[1024];
} ds_comm_job;

/* `threaded`: run jobs on a thread (overlap_comm) or inline. A threaded
 * worker becomes the communicator's owner until destroyed (one at a time:
 * DS_ERR_INVALID_ARG if the communicator already has one). */
ds_status ds_comm_worker_create(ds_comm *comm, bool threaded, ds_comm_worker **out);
/* Joins the thread (jobs still queued run first, or fail fast after a
 * failure, or are dropped from a closed gate on: see `gated`) and gives the
 * communicator back. */
void ds_comm_worker_destroy(ds_comm_worker *w);

/* Queue a job (the caller keeps the job memory alive until waited). Inline
 * mode runs it now. */
ds_status ds_comm_job_submit(ds_comm_worker *w, ds_comm_job *job);
/* Open a gated job: its input is in place (no-op when already open). Inline,
 * runs it now. */
ds_status ds_comm_job_open(ds_comm_worker *w, ds_comm_job *job);
/* Wait for the job and return its status (its message becomes this thread's
 * last error on failure). */
ds_status ds_comm_job_wait(ds_comm_worker *w, ds_comm_job *job);
/* Wait for everything queued so far; the first failure's status and message
 * if any job failed. */
ds_status ds_comm_worker_drain(ds_comm_worker *w);

/* For engine/comm: block until w's queue is empty and no job runs, unless
 * the caller is w's own thread (then return at once). */
void ds_comm_worker_wait_idle(ds_comm_worker *w);

/* For engine/comm: whether the calling thread is a communication thread
 * (its collectives' time counts in ds_comm_stats.wait_s only where another
 * thread waits for it). */
bool ds_comm_worker_self(void);

#endif /* DS_COMM_COMM_WORKER_H */
