/* launch_probe: an APP built on the library for the engine-run tests.
 *
 *   launch_probe --config FILE [--delay-rank R S] [--train]
 *
 * Rank R (OMPI_COMM_WORLD_RANK; 0 without one) sleeps S seconds before
 * ds_initialize, so engine-run has ranks to wait for. Then a small MLP engine
 * (the checkpoint tests' harness; FILE is not read). With --train it saves on
 * signals (ds_preempt_install), prints "launch_probe: rank R training" and
 * trains until a step's stop_signal, then exits 128 + it; without, it exits
 * 0 at once. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/multirank/ckpt_harness.h"

int main(int argc, char **argv) {
    int delay_rank = -1, delay_s = 0;
    bool train = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--delay-rank") && i + 2 < argc) {
            delay_rank = atoi(argv[i + 1]);
            delay_s = atoi(argv[i + 2]);
            i += 2;
        } else if (!strcmp(argv[i], "--train")) {
            train = true;
        }
    }
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    int rank = r ? atoi(r) : 0;
    if (rank == delay_rank) sleep((unsigned)delay_s);
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    engine_t *e;
    if (!data || ck_engine(&s, data, &e) != DS_OK) {
        fprintf(stderr, "launch_probe: %s\n", ds_last_error());
        return 1;
    }
    int rc = 0;
    if (train) {
        if (ds_preempt_install(e, NULL, 0) != DS_OK) {
            fprintf(stderr, "launch_probe: %s\n", ds_last_error());
            return 1;
        }
        printf("launch_probe: rank %d training\n", rank);
        fflush(stdout);
        ds_step_info info = {0};
        for (int k = 0; k < 1000000 && !info.stop_signal; k++) {
            if (ds_train_batch(e, &info) != DS_OK) {
                fprintf(stderr, "launch_probe: %s\n", ds_last_error());
                return 1;
            }
        }
        rc = 128 + info.stop_signal;
        printf("launch_probe: rank %d stopped by signal %d at step %lld\n", rank, info.stop_signal,
               (long long)info.step);
    }
    ds_finalize(e);
    ds_dataset_destroy(data);
    return rc;
}
