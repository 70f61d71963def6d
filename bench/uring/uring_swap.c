/* io_uring against the swap's thread pool, on the swap's access pattern:
 * 3 files of MIB MiB (master and two moments), 1 MiB direct-I/O requests,
 * QD requests in flight from one thread. Not part of the build (it needs
 * Debian's liburing-dev); bench/RESULTS.md gives the command:
 *
 *   cc -O2 -o /tmp/uring_swap bench/uring/uring_swap.c -luring
 *   /tmp/uring_swap DIR [MIB] [QD]
 *
 * Passes: write every file, read every file, and the step's pass (read
 * file k while file k-1 is written back, both in the one queue). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1u << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct job { int fd; int write; unsigned long long off, end; } job;

/* Run the jobs to completion, keeping qd requests in flight, taking
 * requests from the jobs in turn (so a read and a write stream share it). */
static void run(struct io_uring *ring, job *jobs, int nj, char *bufs, int qd) {
    int inflight = 0, next = 0, free_slot[256], nfree = qd;
    for (int i = 0; i < qd; i++) free_slot[i] = i;
    for (;;) {
        while (nfree > 0) {
            int j = -1;
            for (int k = 0; k < nj; k++) {
                int c = (next + k) % nj;
                if (jobs[c].off < jobs[c].end) { j = c; break; }
            }
            if (j < 0) break;
            next = (j + 1) % nj;
            int s = free_slot[--nfree];
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            char *b = bufs + (size_t)s * BLOCK;
            if (jobs[j].write) io_uring_prep_write(sqe, jobs[j].fd, b, BLOCK, jobs[j].off);
            else io_uring_prep_read(sqe, jobs[j].fd, b, BLOCK, jobs[j].off);
            io_uring_sqe_set_data64(sqe, (unsigned long long)s);
            jobs[j].off += BLOCK;
            inflight++;
        }
        if (inflight == 0) break;
        io_uring_submit(ring);
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(ring, &cqe) != 0) { perror("wait"); exit(1); }
        if (cqe->res != (int)BLOCK) { fprintf(stderr, "I/O: %s\n", strerror(-cqe->res)); exit(1); }
        free_slot[nfree++] = (int)io_uring_cqe_get_data64(cqe);
        io_uring_cqe_seen(ring, cqe);
        inflight--;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: uring_swap DIR [MIB] [QD]\n"); return 2; }
    unsigned long long mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 256;
    int qd = argc > 3 ? atoi(argv[3]) : 8;
    unsigned long long bytes = mib << 20;
    int fd[3];
    for (int k = 0; k < 3; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/uring%d.swp", argv[1], k);
        fd[k] = open(p, O_CREAT | O_RDWR | O_DIRECT | O_TRUNC, 0600);
        if (fd[k] < 0 || fallocate(fd[k], 0, 0, (off_t)bytes) != 0) { perror(p); return 1; }
        unlink(p);
    }
    char *bufs;
    if (posix_memalign((void **)&bufs, 4096, (size_t)qd * BLOCK)) return 1;
    memset(bufs, 1, (size_t)qd * BLOCK);
    struct io_uring ring;
    if (io_uring_queue_init((unsigned)qd, &ring, 0) != 0) { perror("io_uring_queue_init"); return 1; }
    double mb = 3.0 * (double)bytes / 1e6;
    job w[3], r[3];
    for (int k = 0; k < 3; k++) {
        w[k] = (job){fd[k], 1, 0, bytes};
        r[k] = (job){fd[k], 0, 0, bytes};
    }
    double t0 = now_s();
    for (int k = 0; k < 3; k++) run(&ring, &w[k], 1, bufs, qd);
    double tw = now_s() - t0;
    t0 = now_s();
    for (int k = 0; k < 3; k++) run(&ring, &r[k], 1, bufs, qd);
    double tr = now_s() - t0;
    /* the step: 3 reads and 3 writes of the same sizes, sharing the queue */
    job rw[6];
    for (int k = 0; k < 3; k++) {
        rw[2 * k] = (job){fd[k], 0, 0, bytes};
        rw[2 * k + 1] = (job){fd[k], 1, 0, bytes};
    }
    t0 = now_s();
    run(&ring, rw, 6, bufs, qd);
    double trw = now_s() - t0;
    printf("io_uring, 3 x %llu MiB, 1 MiB requests, queue depth %d, one thread:\n", mib, qd);
    printf("  write              %8.0f MB/s\n", mb / tw);
    printf("  read               %8.0f MB/s\n", mb / tr);
    printf("  read + write step  %8.0f MB/s each way\n", mb / trw);
    io_uring_queue_exit(&ring);
    return 0;
}
