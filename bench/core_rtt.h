/* The core-to-core round trip: how long a cache line takes to go from one
 * CPU to another and back. On a VM whose vCPUs the hypervisor places, it
 * tells where the two vCPUs sit right now: 53-90 ns when they share a die,
 * 310-370 ns when they do not, switching within seconds on the Zen 4 VM of
 * RESULTS ("Stop 44"). One rank of 2 threads shares its data between the
 * cores, 2 ranks of 1 do not, so that phase decides how 1 x 2 compares with
 * 2 x 1; bench_train and bench_lm print it beside their figures.
 *
 * Two threads of their own, each pinned to one of the first two CPUs the
 * process may run on, pass a flag back and forth; the caller's own threads
 * keep their affinity. Header-only, as bench_util.h. */
#ifndef DS_BENCH_CORE_RTT_H
#define DS_BENCH_CORE_RTT_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "bench/bench_util.h"

/* Round trips per measurement: 5-40 ms, at least 1,000 times the clock's
 * resolution. */
#define RTT_TRIPS 100000

typedef struct core_rtt {
    _Alignas(64) atomic_int flag; /* a line of its own */
    int cpu[2];
    int n;
    double ns;
} core_rtt;

/* The far side: answers each 1 with a 0. */
static inline void *core_rtt_echo(void *arg) {
    core_rtt *r = arg;
    for (int i = 0; i < r->n; i++) {
        while (atomic_load_explicit(&r->flag, memory_order_acquire) != 1) {
        }
        atomic_store_explicit(&r->flag, 0, memory_order_release);
    }
    return NULL;
}

/* The near side: n round trips; the time per trip in r->ns when timed. */
static inline void *core_rtt_ping(void *arg) {
    core_rtt *r = arg;
    double t0 = now_s();
    for (int i = 0; i < r->n; i++) {
        atomic_store_explicit(&r->flag, 1, memory_order_release);
        while (atomic_load_explicit(&r->flag, memory_order_acquire) != 0) {
        }
    }
    r->ns = (now_s() - t0) * 1e9 / r->n;
    return NULL;
}

/* A thread started on `cpu` only (pinned before it runs, so it cannot
 * start anywhere else). */
static inline int core_rtt_start(pthread_t *t, int cpu, void *(*fn)(void *), core_rtt *r) {
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0) return -1;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    int rc = pthread_attr_setaffinity_np(&a, sizeof s, &s);
    if (rc == 0) rc = pthread_create(t, &a, fn, r);
    pthread_attr_destroy(&a);
    return rc;
}

/* Nanoseconds per round trip over n of them between the first two CPUs this
 * process may run on, or -1 where it may run on one only (or a thread could
 * not start). Both CPUs spin for the whole of it: 100,000 trips take 5-40 ms. */
static inline double core_round_trip_ns(int n) {
    cpu_set_t mine;
    if (n < 1 || sched_getaffinity(0, sizeof mine, &mine) != 0) return -1.0;
    core_rtt r = {.n = n, .ns = -1.0, .cpu = {-1, -1}};
    atomic_init(&r.flag, 0);
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &mine)) r.cpu[k++] = c;
    if (r.cpu[1] < 0) return -1.0;
    /* spinning OpenMP workers of the last parallel region would share the
     * CPUs: let them go to sleep first (GOMP spins well under 10 ms) */
    nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    pthread_t echo, ping;
    if (core_rtt_start(&echo, r.cpu[1], core_rtt_echo, &r) != 0) return -1.0;
    if (core_rtt_start(&ping, r.cpu[0], core_rtt_ping, &r) != 0) {
        core_rtt_ping(&r); /* the echo waits for n ones: this thread sends them, untimed */
        pthread_join(echo, NULL);
        return -1.0;
    }
    pthread_join(ping, NULL);
    pthread_join(echo, NULL);
    return r.ns;
}

/* The line bench_train and bench_lm print (world size 1 only: ranks of
 * their own on the same CPUs would spin against each other). */
static inline void core_rtt_print(const char *prog, double before, double after) {
    if (before < 0 || after < 0) {
        printf("%s: core-to-core round trip not measured (this process may run on one CPU, "
               "or its two threads could not start)\n", prog);
        return;
    }
    printf("%s: core-to-core round trip %.0f ns before the timed steps, %.0f ns after (the "
           "first two CPUs this process may run on)\n", prog, before, after);
}

#endif /* DS_BENCH_CORE_RTT_H */
