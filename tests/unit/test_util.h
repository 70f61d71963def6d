/* Assertions shared by the test programs (C and C++/CUDA alike).
 *
 *   #include "tests/unit/test_util.h"
 *
 *   CHECK(x == 3, "x is %d after %s", x, what);  // a failed check is counted and
 *   CHECK_TRUE(c.fp16.enabled);                  // reported as
 *   CHECK_EQ_I(c.stage, 2);                      //   FAIL file:line: <cond>: <message>
 *   CHECK_EQ_D(c.lr, 1e-3);
 *   CHECK_NEAR(got, want, 4 * FLT_EPSILON);      // the tolerance (and the comment
 *   CHECK_OK(ds_config_resolve(&c, &h));         // saying why) stays in the test
 *   TEST_FAIL("round trip changed %s", what);    // a failure the test found itself
 *   return test_finish("test_config_parse");     // "name: ok" -> 0, "name: FAILED" -> 1
 *
 * Also: test_set_rank(r) prefixes messages with the rank (multi-rank tests),
 * test_cpu_backend(nt, mem) creates a cpu backend or exits.
 *
 * A check never stops the test: every failure is counted (test_fails()) and
 * the first TEST_MAX_REPORTS are printed to stderr, so a broken loop does not
 * bury the first message. What must stop the test: REQUIRE_OK (exits 1),
 * CHECK_OK_GOTO (jumps to a cleanup label), TEST_DIE.
 *
 * The counter is per translation unit (a static local of a static inline
 * function): a test program checks in its own .c file; shared fixtures
 * (gradcheck_harness.c, ckpt_harness.c) return their failures instead. */
#ifndef DS_TESTS_TEST_UTIL_H
#define DS_TESTS_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/backend/backend.h"
#include "engine/core/status.h"

#if defined(__GNUC__)
#define TEST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TEST_NORETURN __attribute__((noreturn))
#else
#define TEST_PRINTF(f, a)
#define TEST_NORETURN
#endif

/* Failure messages printed before the rest are only counted. */
#define TEST_MAX_REPORTS 30

typedef struct test_state {
    int fails;
    int rank; /* >= 0: printed in every message (multi-rank tests) */
} test_state;

static inline test_state *test_state_get(void) {
    static test_state s = {0, -1};
    return &s;
}

static inline int test_fails(void) { return test_state_get()->fails; }

/* Multi-rank tests: prefix every message with "rank r". */
static inline void test_set_rank(int rank) { test_state_get()->rank = rank; }

/* Counts one failure and prints "FAIL [rank r ]file:line: what: message"
 * (what and fmt may be NULL). */
static inline void test_fail_at(const char *file, int line, const char *what, const char *fmt, ...)
    TEST_PRINTF(4, 5);
static inline void test_fail_at(const char *file, int line, const char *what, const char *fmt, ...) {
    test_state *s = test_state_get();
    if (s->fails++ >= TEST_MAX_REPORTS) {
        if (s->fails == TEST_MAX_REPORTS + 1)
            fprintf(stderr, "(further failures are counted, not printed)\n");
        return;
    }
    fflush(stdout); /* keep the test's own stdout lines before the message */
    if (s->rank >= 0) fprintf(stderr, "FAIL rank %d %s:%d", s->rank, file, line);
    else fprintf(stderr, "FAIL %s:%d", file, line);
    if (what) fprintf(stderr, ": %s", what);
    if (fmt && fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) test_fail_at(__FILE__, __LINE__, #cond, __VA_ARGS__);                       \
    } while (0)

/* A failure found by the test's own logic: "FAIL file:line: message". */
#define TEST_FAIL(...) test_fail_at(__FILE__, __LINE__, NULL, __VA_ARGS__)

#define CHECK_TRUE(cond)                                                                         \
    do {                                                                                         \
        if (!(cond)) test_fail_at(__FILE__, __LINE__, #cond, NULL);                              \
    } while (0)

/* Integers, compared exactly as long long. */
#define CHECK_EQ_I(a, b)                                                                         \
    do {                                                                                         \
        long long a_ = (long long)(a), b_ = (long long)(b);                                      \
        if (a_ != b_) test_fail_at(__FILE__, __LINE__, #a, "%lld, expected %lld", a_, b_);       \
    } while (0)

/* Doubles, compared exactly (for values copied or computed without rounding). */
#define CHECK_EQ_D(a, b)                                                                         \
    do {                                                                                         \
        double a_ = (double)(a), b_ = (double)(b);                                               \
        if (a_ != b_) test_fail_at(__FILE__, __LINE__, #a, "%.17g, expected %.17g", a_, b_);     \
    } while (0)

/* |a - b| <= tol (a NaN fails). The caller chooses tol and says why. */
#define CHECK_NEAR(a, b, tol)                                                                    \
    do {                                                                                         \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                           \
        if (!(fabs(a_ - b_) <= t_))                                                              \
            test_fail_at(__FILE__, __LINE__, #a, "%.17g, expected %.17g +- %.3g (diff %.3g)", a_, \
                         b_, t_, fabs(a_ - b_));                                                 \
    } while (0)

/* expr returned DS_OK; else counts a failure naming the status, the last
 * error and its trace. Returns whether it was DS_OK. */
static inline int test_ok_at(const char *file, int line, const char *expr, ds_status st) {
    if (st == DS_OK) return 1;
    char what[512];
    snprintf(what, sizeof what, "%s -> %s", expr, ds_status_to_string(st));
    const char *trace = ds_last_error_trace();
    if (trace && trace[0]) test_fail_at(file, line, what, "%s (at %s)", ds_last_error(), trace);
    else test_fail_at(file, line, what, "%s", ds_last_error());
    return 0;
}

#define TEST_OK(expr) test_ok_at(__FILE__, __LINE__, #expr, (expr))
#define CHECK_OK(expr) ((void)TEST_OK(expr))
/* On failure jump to label (the test's cleanup), skipping what depends on expr. */
#define CHECK_OK_GOTO(expr, label)                                                               \
    do {                                                                                         \
        if (!TEST_OK(expr)) goto label;                                                          \
    } while (0)
/* On failure the test cannot go on: exit 1. */
#define REQUIRE_OK(expr)                                                                         \
    do {                                                                                         \
        if (!TEST_OK(expr)) exit(1);                                                             \
    } while (0)

/* Setup failed: print what and the last error, exit 1. */
#define TEST_DIE(what) test_die_at(__FILE__, __LINE__, (what))
static inline TEST_NORETURN void test_die_at(const char *file, int line, const char *what) {
    const char *trace = ds_last_error_trace();
    fflush(stdout);
    fprintf(stderr, "FATAL %s:%d: %s: %s", file, line, what, ds_last_error());
    if (trace && trace[0]) fprintf(stderr, " (at %s)", trace);
    fputc('\n', stderr);
    exit(1);
}

/* malloc that exits 1 when out of memory (n = 0: one byte, never NULL). */
static inline void *test_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) TEST_DIE("out of memory");
    return p;
}

/* A cpu backend of nt threads accounting into mem (NULL: none); exits 1 when
 * it cannot be created (nothing else of the test can run). */
static inline ds_backend *test_cpu_backend(int nt, ds_mem *mem) {
    ds_backend_desc d;
    d.kind = DS_BACKEND_CPU;
    d.device = 0;
    d.num_threads = nt;
    d.mem = mem;
    ds_backend *be = NULL;
    if (ds_backend_create(&d, &be) != DS_OK) TEST_DIE("cpu backend");
    return be;
}

/* The last line of a test: "name: ok" (returns 0) or "name: FAILED, n
 * check(s)" (returns 1), for main to return. */
static inline int test_finish(const char *name) {
    int n = test_fails();
    if (n) {
        fflush(stdout);
        fprintf(stderr, "%s: FAILED, %d check(s)\n", name, n);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

#endif /* DS_TESTS_TEST_UTIL_H */
