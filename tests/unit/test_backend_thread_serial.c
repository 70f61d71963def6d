/* ds_backend_thread_serial (backend.h): a thread that marks itself runs a
 * cpu backend's loops on itself, so no second OpenMP team starts beside the
 * model's. Counted in /proc/self/task: the main thread's axpy on a 2-thread
 * backend starts its team once; a marked thread's axpy adds no thread, where
 * an unmarked one adds its own team's (the check is shown to see that). The
 * results are the same bits either way. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "tests/unit/test_util.h"

#define N ((size_t)1 << 20) /* far above DS_CPU_PAR_MIN: the loop forks */

static ds_backend *g_be;

static int threads_now(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) TEST_DIE("cannot read /proc/self/task");
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* y = 1 + 0.5 x, x[i] = i / 7 */
static float *axpy_result(void) {
    float *y = malloc(N * sizeof *y), *x = malloc(N * sizeof *x);
    if (!y || !x) TEST_DIE("out of memory");
    for (size_t i = 0; i < N; i++) y[i] = 1.0f, x[i] = (float)i / 7.0f;
    CHECK_OK(g_be->ops->axpy(g_be, y, DS_F32, 0.5f, x, DS_F32, N));
    free(x);
    return y;
}

typedef struct job {
    bool serial;
    int threads_after; /* /proc/self/task while the thread still runs */
    float *y;
} job;

static void *side_thread(void *arg) {
    job *j = arg;
    ds_backend_thread_serial(j->serial);
    CHECK(ds_backend_thread_is_serial() == j->serial, "the mark is not the thread's own");
    j->y = axpy_result();
    j->threads_after = threads_now();
    return NULL;
}

static job run_side(bool serial) {
    job j = {.serial = serial};
    pthread_t t;
    if (pthread_create(&t, NULL, side_thread, &j) != 0) TEST_DIE("pthread_create");
    pthread_join(t, NULL);
    return j;
}

int main(void) {
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .num_threads = 2};
    CHECK_OK(ds_backend_create(&bd, &g_be));
    float *want = axpy_result(); /* the main thread's team exists from here */
    int base = threads_now();
    CHECK(!ds_backend_thread_is_serial(), "the main thread is marked serial without asking");

    job s = run_side(true);
    /* base + the side thread itself, nothing else */
    CHECK(s.threads_after == base + 1, "a serial thread's axpy left %d threads, want %d",
          s.threads_after, base + 1);
    CHECK(memcmp(s.y, want, N * sizeof *want) == 0, "serial axpy differs from the team's");

    job u = run_side(false);
    /* the check sees a second team: an unmarked thread starts one */
    CHECK(u.threads_after > base + 1, "an unmarked thread's axpy left %d threads (base %d): "
          "the count does not see teams", u.threads_after, base);
    CHECK(memcmp(u.y, want, N * sizeof *want) == 0, "unmarked axpy differs from the team's");

    free(want), free(s.y), free(u.y);
    ds_backend_destroy(g_be);
    return test_finish("test_backend_thread_serial");
}
