/* FIFO of collectives run by one communication thread (or inline); see
 * comm_worker.h. */
#include "engine/comm/comm_worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm_internal.h"

#define QUEUE_CAP 256

/* Set on a communication thread: its collectives' time is hidden behind the
 * other threads' work unless they wait for it (counted where they wait). */
static _Thread_local bool tl_on_worker;

bool ds_comm_worker_self(void) { return tl_on_worker; }

struct ds_comm_worker {
    ds_comm *comm;
    bool threaded;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond_work, cond_done;
    ds_comm_job *queue[QUEUE_CAP];
    size_t head, tail; /* head: next to run (advanced once it finished); tail: next free */
    bool stop;
    bool cancelled; /* stopping, a closed gate reached: it and all behind it are dropped */
    ds_comm_job *gated_inline; /* inline: the gated job waiting for its input */
    /* The first job that failed: every later job and drain report it. Written
     * by the thread running jobs before it advances head (under the lock),
     * read by waiters after they saw head pass, or by the running thread. */
    ds_status failed;
    char first_msg[1024];
};

/* A wait that blocked: its time is communication the caller could not hide
 * (ds_comm_stats.wait_s). Only the blocking branch reads the clock. */
static void add_wait(ds_comm_worker *w, double t0) { w->comm->stats.wait_s += ds_comm_now() - t0; }

static ds_status run_job(ds_comm_worker *w, ds_comm_job *j) {
    ds_comm *c = j->comm ? j->comm : w->comm;
    switch (j->kind) {
    case DS_JOB_REDUCE_SCATTERV:
        DS_TRY(ds_comm_reduce_scatterv(c, j->send, j->buf, j->counts, j->t, DS_REDUCE_SUM));
        return DS_OK;
    case DS_JOB_ALL_GATHERV:
        DS_TRY(ds_comm_all_gatherv(c, j->buf, j->counts, j->t));
        return DS_OK;
    case DS_JOB_ALL_REDUCE:
        DS_TRY(ds_comm_all_reduce(c, j->buf, j->count, j->t, DS_REDUCE_SUM));
        return DS_OK;
    case DS_JOB_FN: {
        ds_status st = j->fn(j->arg);
        /* not a collective: the context was not in the message yet */
        if (st != DS_OK && j->what[0]) ds_error_prefix("%s", j->what);
        DS_TRY(st);
        return DS_OK;
    }
    }
    return DS_ERR(DS_ERR_INTERNAL, "comm worker: unknown job kind %d", (int)j->kind);
}

/* Open every closed gate in the queue up to `upto` (NULL: all), forced:
 * the caller is about to wait (comm_worker.h). Under the lock. */
static void force_open_locked(ds_comm_worker *w, const ds_comm_job *upto) {
    bool opened = false;
    for (size_t i = w->head; i != w->tail; i++) {
        ds_comm_job *j = w->queue[i % QUEUE_CAP];
        if (j->closed) {
            j->forced = true;
            j->closed = 0;
            opened = true;
        }
        if (j == upto) break;
    }
    if (opened) pthread_cond_broadcast(&w->cond_work);
}

static void finish(ds_comm_worker *w, ds_comm_job *j);

/* Inline: run the gated job waiting for its input, forced. */
static void run_gated_inline(ds_comm_worker *w) {
    ds_comm_job *j = w->gated_inline;
    if (!j) return;
    w->gated_inline = NULL;
    j->forced = true; /* opening clears gated_inline: still here means never opened */
    j->closed = 0;
    finish(w, j);
}

static void finish(ds_comm_worker *w, ds_comm_job *j) {
    ds_status st;
    if (w->failed != DS_OK) {
        st = w->failed;
        snprintf(j->message, sizeof j->message, "%s", w->first_msg);
    } else {
        ds_comm_set_context(w->comm, j->what[0] ? j->what : NULL);
        st = run_job(w, j);
        ds_comm_set_context(w->comm, NULL);
        if (st != DS_OK) {
            snprintf(j->message, sizeof j->message, "%s", ds_last_error());
            snprintf(w->first_msg, sizeof w->first_msg, "%s", j->message);
            w->failed = st;
        }
    }
    j->status = st;
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
}

static void *worker_main(void *arg) {
    ds_comm_worker *w = arg;
    tl_on_worker = true;
    /* the reductions this thread runs (axpy, casts, the int8 codec) run on it
     * alone: the model's thread keeps the backend's team (backend.h) */
    ds_backend_thread_serial(true);
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->head == w->tail && !w->stop) pthread_cond_wait(&w->cond_work, &w->lock);
        if (w->head == w->tail && w->stop) break;
        ds_comm_job *j = w->queue[w->head % QUEUE_CAP];
        while (j->closed && !w->stop) pthread_cond_wait(&w->cond_work, &w->lock);
        /* Stopping at a closed gate: nobody will read what it would bring,
         * nor what the jobs queued behind it would. Those are cancelled too:
         * a rank that fails between its update and its next forward must not
         * start the next collectives of its queue (the parameter chunks)
         * while its peers, in that forward, run the gated one. */
        if (j->closed) w->cancelled = true;
        bool cancel = w->cancelled;
        pthread_mutex_unlock(&w->lock);
        if (cancel) __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
        else finish(w, j);
        pthread_mutex_lock(&w->lock);
        w->head++;
        pthread_cond_broadcast(&w->cond_done);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

ds_status ds_comm_worker_create(ds_comm *comm, bool threaded, ds_comm_worker **out) {
    *out = NULL;
    if (!comm) return DS_ERR(DS_ERR_INVALID_ARG, "comm worker: communicator is NULL");
    ds_comm_mpi_base *base = ds_comm_base(comm);
    if (threaded && base->worker)
        return DS_ERR(DS_ERR_INVALID_ARG, "comm worker: the communicator already has a "
                      "communication thread (one owner at a time)");
    ds_comm_worker *w = calloc(1, sizeof *w);
    if (!w) return DS_ERR(DS_ERR_OOM, "comm worker: out of host memory");
    w->comm = comm;
    w->threaded = threaded;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond_work, NULL);
    pthread_cond_init(&w->cond_done, NULL);
    if (threaded && pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond_work);
        pthread_cond_destroy(&w->cond_done);
        free(w);
        return DS_ERR(DS_ERR_INTERNAL, "comm worker: cannot start the communication thread");
    }
    if (threaded) base->worker = w;
    *out = w;
    return DS_OK;
}

void ds_comm_worker_destroy(ds_comm_worker *w) {
    if (!w) return;
    w->gated_inline = NULL; /* never opened: nobody will read what it would bring */
    if (w->threaded) {
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_broadcast(&w->cond_work);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        ds_comm_mpi_base *base = ds_comm_base(w->comm);
        if (base->worker == w) base->worker = NULL;
    }
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond_work);
    pthread_cond_destroy(&w->cond_done);
    free(w);
}

ds_status ds_comm_job_submit(ds_comm_worker *w, ds_comm_job *job) {
    job->done = 0;
    job->status = DS_OK;
    job->message[0] = '\0';
    job->forced = false;
    job->closed = job->gated;
    if (!w->threaded) {
        if (!job->gated) {
            finish(w, job);
            return DS_OK;
        }
        if (w->gated_inline)
            return DS_ERR(DS_ERR_INTERNAL, "comm worker: a second gated job before the first "
                          "was opened");
        w->gated_inline = job;
        return DS_OK;
    }
    pthread_mutex_lock(&w->lock);
    if (w->tail - w->head >= QUEUE_CAP) {
        double t0 = ds_comm_now();
        while (w->tail - w->head >= QUEUE_CAP) pthread_cond_wait(&w->cond_done, &w->lock);
        add_wait(w, t0);
    }
    w->queue[w->tail % QUEUE_CAP] = job;
    w->tail++;
    pthread_cond_broadcast(&w->cond_work);
    pthread_mutex_unlock(&w->lock);
    return DS_OK;
}

ds_status ds_comm_job_open(ds_comm_worker *w, ds_comm_job *job) {
    if (!w->threaded) {
        if (w->gated_inline == job) {
            w->gated_inline = NULL;
            job->closed = 0;
            finish(w, job);
        }
        return DS_OK;
    }
    pthread_mutex_lock(&w->lock);
    if (job->closed) {
        job->closed = 0;
        pthread_cond_broadcast(&w->cond_work);
    }
    pthread_mutex_unlock(&w->lock);
    return DS_OK;
}

ds_status ds_comm_job_wait(ds_comm_worker *w, ds_comm_job *job) {
    if (!w->threaded && w->gated_inline == job) run_gated_inline(w);
    if (w->threaded && !__atomic_load_n(&job->done, __ATOMIC_ACQUIRE)) {
        double t0 = ds_comm_now();
        pthread_mutex_lock(&w->lock);
        /* done since the look above: it may have left the queue, and the
         * walk would then open every gate behind it */
        if (!__atomic_load_n(&job->done, __ATOMIC_ACQUIRE)) force_open_locked(w, job);
        while (!__atomic_load_n(&job->done, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&w->cond_done, &w->lock);
        pthread_mutex_unlock(&w->lock);
        add_wait(w, t0);
    }
    if (job->status != DS_OK) return DS_ERR(job->status, "%s", job->message);
    return DS_OK;
}

ds_status ds_comm_worker_drain(ds_comm_worker *w) {
    ds_status failed;
    char msg[sizeof w->first_msg];
    run_gated_inline(w);
    pthread_mutex_lock(&w->lock);
    if (w->threaded && w->head != w->tail) {
        force_open_locked(w, NULL);
        double t0 = ds_comm_now();
        while (w->head != w->tail) pthread_cond_wait(&w->cond_done, &w->lock);
        add_wait(w, t0);
    }
    failed = w->failed;
    if (failed != DS_OK) snprintf(msg, sizeof msg, "%s", w->first_msg);
    pthread_mutex_unlock(&w->lock);
    if (failed != DS_OK) return DS_ERR(failed, "%s", msg);
    return DS_OK;
}

void ds_comm_worker_wait_idle(ds_comm_worker *w) {
    if (!w->threaded || pthread_equal(pthread_self(), w->thread)) return;
    pthread_mutex_lock(&w->lock);
    if (w->head != w->tail) {
        force_open_locked(w, NULL);
        double t0 = ds_comm_now();
        while (w->head != w->tail) pthread_cond_wait(&w->cond_done, &w->lock);
        add_wait(w, t0);
    }
    pthread_mutex_unlock(&w->lock);
}
