/* The program for test_lone_exit.sh: two ranks, started by engine-run with
 * --config FILE (zero_engine.comm_timeout_s 100), then a mode:
 *
 *   lone  rank 1 fails on its own and exits 3 while rank 0 waits for it in an
 *         all-reduce. Rank 1's exit handler finds rank 0 not exiting and ends
 *         the job (MPI_Abort) after its grace period; before, it waited in
 *         MPI_Finalize, rank 0 in the all-reduce until comm_timeout_s, and
 *         the job ended 100 s later with a timeout that did not say why.
 *         Should rank 0's all-reduce return at all, it says so and exits 4.
 *   all   both ranks fail alike (agreed in an all-reduce) and exit 3, rank 0
 *         two seconds after rank 1: they meet at exit and finalise as usual,
 *         no abort. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "models/models.h"

int main(int argc, char **argv) {
    const char *config = NULL, *mode = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
        else mode = argv[i];
    }
    if (!config || !mode || (strcmp(mode, "lone") && strcmp(mode, "all"))) {
        fprintf(stderr, "usage: test_lone_exit --config FILE lone|all\n");
        return 2;
    }
    ds_mlp_desc md = {.vocab_size = 10, .max_seq_len = 4, .embed_dim = 4, .hidden_dim = 4,
                      .n_classes = 2};
    ds_model *m;
    if (ds_mlp_create(&md, &m) != DS_OK) return 2;
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_path = config;
    d.model = m;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        fprintf(stderr, "test_lone_exit: %s\n", ds_last_error());
        return 2;
    }
    int rank = ds_rank(e);
    double x = 1.0;
    if (!strcmp(mode, "lone")) {
        if (rank == 1) {
            fprintf(stderr, "test_lone_exit: rank 1 fails on its own\n");
            exit(3); /* without ds_finalize, as a program that gives up */
        }
        ds_status st = ds_all_reduce_host(e, &x, 1, DS_F64);
        fprintf(stderr, "test_lone_exit: rank 0's all-reduce returned: %s %s\n",
                ds_status_to_string(st), ds_last_error());
        return 4;
    }
    if (ds_all_reduce_host(e, &x, 1, DS_F64) != DS_OK || x != 2.0) {
        fprintf(stderr, "test_lone_exit: the agreement failed: %s\n", ds_last_error());
        return 4;
    }
    fprintf(stderr, "test_lone_exit: rank %d fails with the others\n", rank);
    ds_finalize(e);
    if (rank == 0) sleep(2);
    return 3;
}
