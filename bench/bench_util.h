/* What the bench programs share: a monotonic clock and medians. Header-only: every C file of bench/ is its own program
 * (CMakeLists.txt builds each file of bench/ as one). */
#ifndef DS_BENCH_UTIL_H
#define DS_BENCH_UTIL_H

#include <stdlib.h>
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

/* The median of n > 0 values (the mean of the middle two when n is even),
 * sorting them in place. */
static inline double median_sort(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* An A/B run in one process, A in even timed steps and B in odd ones (t:
 * their times, `steps` of them): the median of each pair's B / A, and the
 * pairs' least and greatest in *lo and *hi. 0 when there is no pair. */
static inline double pair_ratio_median(const double *t, int steps, double *lo, double *hi) {
    const int n = steps / 2;
    *lo = *hi = 0.0;
    if (n < 1) return 0.0;
    double *r = malloc((size_t)n * sizeof *r);
    if (!r) return 0.0;
    *lo = 1e30;
    for (int j = 0; j < n; j++) {
        r[j] = t[2 * j + 1] / t[2 * j];
        *lo = r[j] < *lo ? r[j] : *lo, *hi = r[j] > *hi ? r[j] : *hi;
    }
    const double med = median_sort(r, n);
    free(r);
    return med;
}

#endif /* DS_BENCH_UTIL_H */
