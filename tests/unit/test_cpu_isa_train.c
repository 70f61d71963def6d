/* Training gives the same bits under every instruction-set variant of the cpu
 * kernels (engine/backend/cpu/cpu_isa.h): a small BERT (GELU, layer norm,
 * attention with dropout, hidden dropout, cross-entropy; AdamW with gradient
 * clipping) trains 8 steps at ZeRO stage 2 under each variant this CPU runs
 * (DS_CPU_ISA, set before each ds_initialize), and every step's loss must
 * equal the first variant's bit for bit. Zero tolerance: the variants differ
 * only in vector width and instruction encoding (test_cpu_isa checks the
 * kernels one by one; this checks that nothing between them, the GEMMs
 * included, which are OpenBLAS's own kernel whatever the variant, adds a
 * difference). Run at 2 ranks, so the reduce-scatter and the sharded
 * optimizer are in the loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cpu/cpu_isa.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h"

#define STEPS 8

static int train(const char *isa, double loss[STEPS], int *rank) {
    setenv("DS_CPU_ISA", isa, 1);
    const int T = 12, V = 50;
    ds_dataset *data = ck_make_data(8 * STEPS, T, V);
    ds_model *model = NULL;
    if (!data || ck_tiny_bert(T, V, &model) != DS_OK) {
        fprintf(stderr, "setup: %s\n", ds_last_error());
        return 1;
    }
    const char *cfg = "{\"train_batch_size\": 8, \"steps_per_print\": 1000,"
                      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003,"
                      " \"weight_decay\": 0.01}}, \"gradient_clipping\": 0.5,"
                      " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 1000}}";
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        fprintf(stderr, "init under %s: %s\n", isa, ds_last_error());
        return 1;
    }
    for (int i = 0; i < STEPS; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "%s step %d: %s\n", isa, i, ds_last_error());
            return 1;
        }
        loss[i] = info.loss;
    }
    *rank = ds_rank(e);
    ds_finalize(e);
    ds_dataset_destroy(data);
    return 0;
}

int main(void) {
    double ref[STEPS], loss[STEPS];
    const char *ref_isa = NULL;
    int rank = 0, fails = 0, compared = 0;
    for (int v = 0; ds_cpu_isa_names[v]; v++) {
        const char *isa = ds_cpu_isa_names[v];
        if (!ds_cpu_variant_find(isa)) {
            printf("test_cpu_isa_train: %s: not run by this CPU, skipped\n", isa);
            continue;
        }
        if (train(isa, ref_isa ? loss : ref, &rank) != 0) return 1;
        if (!ref_isa) {
            ref_isa = isa;
            continue;
        }
        int same = 0;
        for (int i = 0; i < STEPS; i++) {
            if (memcmp(&loss[i], &ref[i], sizeof(double)) == 0) {
                same++;
            } else if (rank == 0) {
                fprintf(stderr, "step %d: loss %.9g under %s, %.9g under %s\n", i, loss[i], isa,
                        ref[i], ref_isa);
            }
        }
        if (rank == 0)
            printf("test_cpu_isa_train: %s vs %s: %d of %d step losses bit-identical (last %.7f)\n",
                   isa, ref_isa, same, STEPS, loss[STEPS - 1]);
        if (same != STEPS) fails++;
        compared++;
    }
    if (!compared) { /* one variant runs here: nothing to compare */
        if (rank == 0) printf("test_cpu_isa_train: only %s runs here, skipped\n", ref_isa);
        return 77;
    }
    if (rank == 0) printf("test_cpu_isa_train: %s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
