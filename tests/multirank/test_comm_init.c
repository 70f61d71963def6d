/* Who initialises and finalises MPI, and what ds_comm_create refuses.
 * One scenario per process (MPI can be initialised once per process):
 *
 *   test_comm_init owned      the library initialises MPI; communicators come
 *                             and go, MPI stays initialised for the next one
 *                             (it can be initialised once per process) and is
 *                             finalised at exit
 *   test_comm_init user       the program initialised MPI (SERIALIZED): the
 *                             library uses it and leaves it to the program
 *   test_comm_init funneled   the program initialised MPI with FUNNELED: too
 *                             weak for a communication thread, refused
 *   test_comm_init mismatch   RANK=1 WORLD_SIZE=2 in the environment but a
 *                             single process: refused, naming both views; with
 *                             the variables gone, a retry in the same process
 *                             works
 *
 * Each runs as a plain process (Open MPI singleton), no mpirun. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "tests/unit/test_util.h"

static int mpi_initialized(void) {
    int f = 0;
    MPI_Initialized(&f);
    return f;
}
static int mpi_finalized(void) {
    int f = 0;
    MPI_Finalized(&f);
    return f;
}

static void owned(void) {
    ds_comm *a = NULL, *b = NULL;
    CHECK(ds_comm_create(NULL, &a) == DS_OK, "create a: %s", ds_last_error());
    CHECK(ds_comm_create(NULL, &b) == DS_OK, "create b: %s", ds_last_error());
    CHECK(mpi_initialized(), "MPI not initialised by ds_comm_create");
    if (a && b) {
        CHECK(a->world == 1 && a->rank == 0 && a->local_rank == 0 && a->source == DS_RANKS_SINGLE,
              "singleton: rank %d of %d, local %d, source %s", a->rank, a->world, a->local_rank,
              ds_rank_source_name(a->source));
        CHECK(a->timeout_s == 300.0, "default timeout %.1f, expected 300", a->timeout_s);
        float x[3] = {1, 2, 3};
        CHECK(ds_comm_all_reduce(b, x, 3, DS_F32, DS_REDUCE_MAX) == DS_OK && x[2] == 3,
              "all_reduce on the second communicator");
    }
    ds_comm_destroy(a);
    ds_comm_destroy(b);
    CHECK(mpi_initialized() && !mpi_finalized(), "MPI finalised when the communicators went");
    /* One engine after another in the same process. */
    ds_comm *c = NULL;
    CHECK(ds_comm_create(NULL, &c) == DS_OK, "create after destroy: %s", ds_last_error());
    double v = 2.5;
    CHECK(c && ds_comm_all_reduce(c, &v, 1, DS_F64, DS_REDUCE_SUM) == DS_OK && v == 2.5,
          "all_reduce on the third communicator");
    ds_comm_destroy(c);
}

static void user(void) {
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    ds_comm *c = NULL;
    CHECK(ds_comm_create(&(ds_comm_desc){.timeout_s = 5}, &c) == DS_OK, "create: %s",
          ds_last_error());
    if (c) CHECK(c->timeout_s == 5.0, "timeout %.1f, expected 5", c->timeout_s);
    CHECK(ds_comm_barrier(c) == DS_OK, "barrier: %s", ds_last_error());
    ds_comm_destroy(c);
    CHECK(!mpi_finalized(), "the library finalised the program's MPI");
    MPI_Finalize();
}

static void funneled(void) {
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    ds_comm *c = NULL;
    ds_status st = ds_comm_create(NULL, &c);
    if (provided >= MPI_THREAD_SERIALIZED) {
        /* An MPI may give more than asked; then there is nothing to refuse. */
        CHECK(st == DS_OK, "create: %s", ds_last_error());
        printf("MPI gave more than FUNNELED (%d): nothing to refuse\n", provided);
    } else {
        CHECK(st == DS_ERR_COMM && c == NULL, "FUNNELED accepted (%s)", ds_status_to_string(st));
        CHECK(strstr(ds_last_error(), "MPI_THREAD_FUNNELED") &&
                  strstr(ds_last_error(), "MPI_THREAD_SERIALIZED"),
              "message \"%s\" does not name the levels", ds_last_error());
    }
    ds_comm_destroy(c);
    CHECK(!mpi_finalized(), "the library finalised the program's MPI");
    MPI_Finalize();
}

static void mismatch(void) {
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    ds_comm *c = NULL;
    ds_status st = ds_comm_create(NULL, &c);
    CHECK(st == DS_ERR_COMM && c == NULL, "mismatch accepted (%s)", ds_status_to_string(st));
    const char *msg = ds_last_error();
    CHECK(strstr(msg, "rank 1 of 2") && strstr(msg, "rank 0 of 1") && strstr(msg, "WORLD_SIZE"),
          "message \"%s\" does not show both views and the variable", msg);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    CHECK(ds_comm_create(NULL, &c) == DS_OK && c && c->world == 1,
          "retry without the variables: %s", ds_last_error());
    ds_comm_destroy(c);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "owned")) owned();
    else if (!strcmp(mode, "user")) user();
    else if (!strcmp(mode, "funneled")) funneled();
    else if (!strcmp(mode, "mismatch")) mismatch();
    else {
        fprintf(stderr, "usage: test_comm_init owned|user|funneled|mismatch\n");
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "test_comm_init %s", mode);
    return test_finish(name);
}
