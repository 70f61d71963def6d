/* What the bench programs share: a monotonic clock and the comparison their
 * medians sort with. Header-only: every C file of bench/ is its own program
 * (CMakeLists.txt builds each file of bench/ as one). */
#ifndef DS_BENCH_UTIL_H
#define DS_BENCH_UTIL_H

#include <time.h>

/* Seconds on the monotonic clock (wall time, not CPU time). */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort's comparison for doubles, ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif /* DS_BENCH_UTIL_H */
