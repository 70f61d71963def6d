/* rank_echo: a stand-in APP for the engine-run tests.
 *
 *   rank_echo --config ABS_FILE [--exit-rank R --code C] [--sleep S] [ARGS...]
 *
 * Prints one line "rank_echo rank R of W from SOURCE config PATH omp T args ..."
 * where R/W come from the variables a launcher sets (Open MPI, Slurm, or
 * RANK/WORLD_SIZE; none means rank 0 of 1). It checks what engine-run promises
 * every APP: argv starts with --config and an absolute path to a readable file;
 * if not it prints why and exits 3.
 *
 * --exit-rank R --code C: rank R exits with status C at once, the others sleep
 * S seconds (default 0) and then exit 0; the launcher tests use this to see
 * that one rank's death ends the whole job. --signal N: rank R dies of signal
 * N instead, --after MS milliseconds from its start (default 0). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return (v && *v) ? v : fallback;
}

int main(int argc, char **argv) {
    const char *rank = "0", *world = "1", *source = "none";
    if (getenv("OMPI_COMM_WORLD_RANK")) {
        rank = env_or("OMPI_COMM_WORLD_RANK", "?");
        world = env_or("OMPI_COMM_WORLD_SIZE", "?");
        source = "mpi";
    } else if (getenv("SLURM_PROCID")) {
        rank = env_or("SLURM_PROCID", "?");
        world = env_or("SLURM_NTASKS", "?");
        source = "slurm";
    } else if (getenv("RANK")) {
        rank = env_or("RANK", "?");
        world = env_or("WORLD_SIZE", "?");
        source = "env";
    }

    if (argc < 3 || strcmp(argv[1], "--config") != 0) {
        fprintf(stderr, "rank_echo: rank %s: expected '--config FILE' first, got '%s'\n", rank,
                argc > 1 ? argv[1] : "(nothing)");
        return 3;
    }
    const char *config = argv[2];
    if (config[0] != '/' || access(config, R_OK) != 0) {
        fprintf(stderr, "rank_echo: rank %s: config '%s' is not an absolute path to a readable file\n",
                rank, config);
        return 3;
    }

    int exit_rank = -1, code = 0, sleep_s = 0, sig = 0, after_ms = 0;
    printf("rank_echo rank %s of %s from %s config %s omp %s args", rank, world, source, config,
           env_or("OMP_NUM_THREADS", "unset"));
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--exit-rank") == 0 && i + 1 < argc) exit_rank = atoi(argv[++i]);
        else if (strcmp(argv[i], "--code") == 0 && i + 1 < argc) code = atoi(argv[++i]);
        else if (strcmp(argv[i], "--sleep") == 0 && i + 1 < argc) sleep_s = atoi(argv[++i]);
        else if (strcmp(argv[i], "--signal") == 0 && i + 1 < argc) sig = atoi(argv[++i]);
        else if (strcmp(argv[i], "--after") == 0 && i + 1 < argc) after_ms = atoi(argv[++i]);
        else printf(" %s", argv[i]);
    }
    printf("\n");
    fflush(stdout);

    if (exit_rank == atoi(rank)) {
        struct timespec ts = {.tv_sec = after_ms / 1000, .tv_nsec = (after_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (sig) {
            signal(sig, SIG_DFL); /* die of it, whatever the launcher left set */
            raise(sig);
        }
        return code;
    }
    if (sleep_s > 0) sleep((unsigned)sleep_s);
    return 0;
}
