/* ds_rank_discover: every launcher's variables, their precedence, and bad
 * values rejected with the variable's name and value. Pure environment: no
 * MPI call is made. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "tests/unit/test_util.h"

static const char *const k_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
    "RANK", "WORLD_SIZE",
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "DS_JOIN_NODE_RANK", "DS_JOIN_NNODES",
};

/* Start from a clean environment, then set NAME=VALUE pairs (NULL-ended). */
static void env(const char *first, ...) {
    for (size_t i = 0; i < sizeof k_vars / sizeof k_vars[0]; i++) unsetenv(k_vars[i]);
    va_list ap;
    va_start(ap, first);
    for (const char *name = first; name; name = va_arg(ap, const char *)) {
        const char *value = va_arg(ap, const char *);
        setenv(name, value, 1);
    }
    va_end(ap);
}

static void expect_info(const char *label, int rank, int world, int lrank, int lworld,
                        ds_rank_source src) {
    ds_rank_info info;
    memset(&info, 0x7f, sizeof info);
    ds_status st = ds_rank_discover(&info);
    CHECK(st == DS_OK, "%s: %s: %s", label, ds_status_to_string(st), ds_last_error());
    if (st != DS_OK) return;
    CHECK(info.rank == rank && info.world == world && info.local_rank == lrank &&
              info.local_world == lworld && info.source == src,
          "%s: got rank %d/%d local %d/%d source %s; expected %d/%d local %d/%d source %s", label,
          info.rank, info.world, info.local_rank, info.local_world,
          ds_rank_source_name(info.source), rank, world, lrank, lworld, ds_rank_source_name(src));
}

/* Fails with DS_ERR_INVALID_ARG and a message containing every needle. */
static void expect_error(const char *label, const char *needle1, const char *needle2) {
    ds_rank_info info;
    ds_clear_error();
    ds_status st = ds_rank_discover(&info);
    CHECK(st == DS_ERR_INVALID_ARG, "%s: expected DS_ERR_INVALID_ARG, got %s", label,
          ds_status_to_string(st));
    const char *msg = ds_last_error();
    CHECK(strstr(msg, needle1) != NULL, "%s: message \"%s\" lacks \"%s\"", label, msg, needle1);
    if (needle2)
        CHECK(strstr(msg, needle2) != NULL, "%s: message \"%s\" lacks \"%s\"", label, msg,
              needle2);
}

int main(void) {
    /* ---- each launcher ---- */
    env(NULL);
    expect_info("nothing set", 0, 1, 0, 1, DS_RANKS_SINGLE);

    env("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_RANK",
        "0", "OMPI_COMM_WORLD_LOCAL_SIZE", "2", NULL);
    expect_info("Open MPI", 2, 4, 0, 2, DS_RANKS_MPI);
    CHECK(strstr(ds_rank_source_name(DS_RANKS_MPI), "OMPI_COMM_WORLD_SIZE") != NULL,
          "source name under Open MPI: %s", ds_rank_source_name(DS_RANKS_MPI));

    env("PMI_RANK", "1", "PMI_SIZE", "3", NULL);
    expect_info("PMI without local ids", 1, 3, -1, -1, DS_RANKS_MPI);
    env("PMI_RANK", "1", "PMI_SIZE", "3", "MPI_LOCALRANKID", "1", "MPI_LOCALNRANKS", "2", NULL);
    expect_info("PMI (Hydra) with local ids", 1, 3, 1, 2, DS_RANKS_MPI);

    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1", NULL);
    expect_info("Slurm", 5, 8, 1, -1, DS_RANKS_SLURM);
    CHECK(strcmp(ds_rank_source_name(DS_RANKS_SLURM), "Slurm (SLURM_NTASKS)") == 0,
          "Slurm source name: %s", ds_rank_source_name(DS_RANKS_SLURM));
    /* a step of 2 tasks in a job of 8: the step's count is the world */
    env("SLURM_STEP_ID", "3", "SLURM_PROCID", "1", "SLURM_NTASKS", "8", "SLURM_STEP_NUM_TASKS",
        "2", NULL);
    expect_info("Slurm step smaller than the job", 1, 2, -1, -1, DS_RANKS_SLURM);
    {
        ds_rank_info ri;
        CHECK_OK(ds_rank_discover(&ri));
        CHECK(ri.world_var && strcmp(ri.world_var, "SLURM_STEP_NUM_TASKS") == 0,
              "Slurm step: world read from %s", ri.world_var ? ri.world_var : "(null)");
    }
    env("SLURM_STEP_ID", "3", "SLURM_PROCID", "2", "SLURM_NTASKS", "8", "SLURM_STEP_NUM_TASKS",
        "2", NULL);
    expect_error("SLURM_PROCID beyond the step", "SLURM_PROCID=2", "SLURM_STEP_NUM_TASKS=2");
    /* an sbatch script (no job step) is one process, not rank 0 of N */
    env("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", NULL);
    expect_info("sbatch script, no step", 0, 1, 0, 1, DS_RANKS_SINGLE);
    env("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "RANK", "1", "WORLD_SIZE", "2", NULL);
    expect_info("sbatch script with RANK", 1, 2, -1, -1, DS_RANKS_ENV);

    env("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", NULL);
    expect_info("RANK/WORLD_SIZE", 1, 2, 1, 2, DS_RANKS_ENV);
    env("RANK", "3", "WORLD_SIZE", "4", NULL);
    expect_info("RANK/WORLD_SIZE without LOCAL_RANK", 3, 4, -1, -1, DS_RANKS_ENV);
    env("RANK", "0", "WORLD_SIZE", "1", NULL);
    expect_info("a world of one is its own node", 0, 1, 0, 1, DS_RANKS_ENV);
    env("LOCAL_RANK", "1", NULL);
    expect_info("LOCAL_RANK alone (device pinning) is not a launcher", 0, 1, 0, 1,
                DS_RANKS_SINGLE);
    env("RANK", " 1", "WORLD_SIZE", "+2", NULL);
    expect_info("leading blank and sign, as strtol reads them", 1, 2, -1, -1, DS_RANKS_ENV);

    /* ---- precedence: MPI, then PMI, then Slurm, then RANK ---- */
    env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "PMI_RANK", "2", "PMI_SIZE",
        "3", "SLURM_STEP_ID", "0", "SLURM_PROCID", "3", "SLURM_NTASKS", "4", "RANK", "4", "WORLD_SIZE", "5", NULL);
    expect_info("Open MPI beats PMI, Slurm and RANK", 1, 2, -1, -1, DS_RANKS_MPI);
    env("PMI_RANK", "2", "PMI_SIZE", "3", "SLURM_STEP_ID", "0", "SLURM_PROCID", "3", "SLURM_NTASKS", "4", "RANK", "4",
        "WORLD_SIZE", "5", NULL);
    expect_info("PMI beats Slurm and RANK", 2, 3, -1, -1, DS_RANKS_MPI);
    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "3", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", "RANK", "4",
        "WORLD_SIZE", "5", "LOCAL_RANK", "1", NULL);
    expect_info("Slurm beats RANK", 3, 4, 0, -1, DS_RANKS_SLURM);
    /* A bad value in a lower-precedence group is never read. */
    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "0", "SLURM_NTASKS", "2", "RANK", "garbage", NULL);
    expect_info("RANK ignored under Slurm", 0, 2, -1, -1, DS_RANKS_SLURM);

    /* ---- a node of engine-run --nnodes: Open MPI's numbering within the
     * node, DS_JOIN_* across nodes (rank = node * K + local rank) ---- */
    env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK",
        "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2", "DS_JOIN_NODE_RANK", "2", "DS_JOIN_NNODES", "3",
        NULL);
    expect_info("node 2 of 3, 2 ranks each", 5, 6, 1, 2, DS_RANKS_JOIN);
    env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", "DS_JOIN_NODE_RANK", "0",
        "DS_JOIN_NNODES", "2", "RANK", "1", "WORLD_SIZE", "2", NULL);
    expect_info("node 0 of 2, one rank, RANK ignored", 0, 2, 0, 1, DS_RANKS_JOIN);
    env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", "DS_JOIN_NODE_RANK", "2",
        "DS_JOIN_NNODES", "2", NULL);
    expect_error("node rank out of range", "DS_JOIN_NODE_RANK=2", "DS_JOIN_NNODES=2");
    env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", "DS_JOIN_NNODES", "2", NULL);
    expect_error("DS_JOIN_NNODES without the node rank", "DS_JOIN_NODE_RANK", "DS_JOIN_NNODES");
    env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4", "DS_JOIN_NODE_RANK", "0",
        "DS_JOIN_NNODES", "1000000000", NULL);
    expect_error("more ranks than an int", "DS_JOIN_NNODES", "too many");
    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "0", "SLURM_NTASKS", "2", "DS_JOIN_NODE_RANK", "0",
        "DS_JOIN_NNODES", "2", NULL);
    expect_error("DS_JOIN_* outside mpirun", "DS_JOIN_NNODES", "not a rank that mpirun started");

    /* ---- bad values: the variable and the value are named ---- */
    env("RANK", "abc", "WORLD_SIZE", "2", NULL);
    expect_error("RANK=abc", "RANK", "\"abc\"");
    env("RANK", "1 ", "WORLD_SIZE", "2", NULL);
    expect_error("trailing blank", "RANK", "\"1 \"");
    env("RANK", "", "WORLD_SIZE", "2", NULL);
    expect_error("empty RANK", "RANK is set but empty", NULL);
    env("RANK", "-1", "WORLD_SIZE", "2", NULL);
    expect_error("negative RANK", "RANK", "\"-1\"");
    env("RANK", "0", "WORLD_SIZE", "0", NULL);
    expect_error("WORLD_SIZE=0", "WORLD_SIZE", "\"0\"");
    env("RANK", "4", "WORLD_SIZE", "4", NULL);
    expect_error("RANK == WORLD_SIZE", "RANK=4", "WORLD_SIZE=4");
    env("RANK", "99999999999999999999", "WORLD_SIZE", "4", NULL);
    expect_error("RANK overflows", "RANK", "99999999999999999999");
    env("RANK", "1", NULL);
    expect_error("RANK without WORLD_SIZE", "WORLD_SIZE", "RANK is set");
    env("WORLD_SIZE", "4", NULL);
    expect_error("WORLD_SIZE without RANK", "RANK", "WORLD_SIZE is set");
    env("RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "x1", NULL);
    expect_error("LOCAL_RANK=x1", "LOCAL_RANK", "\"x1\"");
    env("RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "2", NULL);
    expect_error("LOCAL_RANK >= WORLD_SIZE", "LOCAL_RANK=2", "WORLD_SIZE=2");
    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "8", "SLURM_NTASKS", "8", NULL);
    expect_error("SLURM_PROCID == SLURM_NTASKS", "SLURM_PROCID=8", "SLURM_NTASKS=8");
    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "1", "SLURM_NTASKS", "2(x4)", NULL);
    expect_error("SLURM_NTASKS=2(x4)", "SLURM_NTASKS", "\"2(x4)\"");
    env("SLURM_STEP_ID", "0", "SLURM_PROCID", "1", NULL);
    expect_error("SLURM_PROCID alone", "SLURM_NTASKS", "SLURM_PROCID");
    env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_RANK",
        "3", "OMPI_COMM_WORLD_LOCAL_SIZE", "2", NULL);
    expect_error("local rank >= local size", "OMPI_COMM_WORLD_LOCAL_RANK=3",
                 "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_SIZE",
        "3", NULL);
    expect_error("local size > world", "OMPI_COMM_WORLD_LOCAL_SIZE=3", "OMPI_COMM_WORLD_SIZE=2");
    env("PMI_SIZE", "2", NULL);
    expect_error("PMI_SIZE alone", "PMI_RANK", "PMI_SIZE is set");
    /* A broken higher-precedence group is an error, not a fall-through. */
    env("OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_SIZE", "2", "RANK", "0", "WORLD_SIZE", "2",
        NULL);
    expect_error("bad Open MPI value with good RANK", "OMPI_COMM_WORLD_RANK", "\"x\"");

    CHECK(ds_rank_discover(NULL) == DS_ERR_INVALID_ARG, "NULL out accepted");
    for (int s = DS_RANKS_SINGLE; s <= DS_RANKS_JOIN; s++)
        CHECK(ds_rank_source_name((ds_rank_source)s) && ds_rank_source_name((ds_rank_source)s)[0],
              "source %d has no name", s);

    env(NULL);
    return test_finish("test_discover");
}
