/* What the offload tests share (test_offload.c: offload_optimizer to host
 * memory; test_offload_nvme.c: to NVMe, and offload_param): one small BERT
 * trained by engines that differ only in where their state lives, compared
 * bit for bit. Every comparison is exact on purpose: an offloaded update runs
 * the cpu backend's own optimizer slot on the same numbers. */
#ifndef DS_TESTS_OFFLOAD_HARNESS_H
#define DS_TESTS_OFFLOAD_HARNESS_H

#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

#define OFF_STEPS 4        /* steps before the checkpoints */
#define OFF_MORE 2         /* steps after loading them */
#define OFF_GLOBAL_BATCH 16

/* The BERT every case trains unless it names another: 2 layers of 32. */
ds_bert_desc off_small_bert(int seq_len);

/* An engine on data (borrowed), quiet: AdamW or SGD (momentum 0.9) at lr
 * 0.003 with weight decay, WarmupLR from 0.001 so every update moves the
 * weights, clipping 1.0, two micro-batches a step, and under fp16 a scale
 * from 2^18 that doubles after 3 clean steps so the 4th overflows (the
 * skip path runs with the state offloaded). zero_more goes inside
 * zero_optimization, top_more at the top level (each "" or ", \"key\": ..."). */
ds_status off_engine(int stage, const char *precision, const char *optimizer,
                     const char *zero_more, const char *top_more, const ds_bert_desc *bd,
                     const ds_dataset *data, engine_t **out);

void off_train(engine_t *e, int steps, ds_step_info *out);
/* Loss, lr, loss scale and skip of n steps: the same bits. */
void off_same_steps(const char *what, const ds_step_info *a, const ds_step_info *b, int n);
/* Every parameter (gathered; collective): the same bits. */
void off_same_params(const char *what, engine_t *a, engine_t *b);
/* The reference run's weights moved (the comparisons prove something). */
void off_check_moved(const ds_step_info *ref, int steps);
/* No byte allocated between two reports (counters and peaks). */
void off_check_no_growth(const char *what, const ds_mem_report *before,
                         const ds_mem_report *after);

/* Checkpoints across the offload boundary: `loads_plain` loads plain_dir
 * (saved by ref), `loads_off` loads off_dir (saved by an offloaded engine at
 * the same step); both equal ref's parameters, then ref and both train
 * OFF_MORE steps with ref's losses (ref's in ref_more). */
void off_cross_load(engine_t *ref, engine_t *loads_plain, engine_t *loads_off,
                    const char *plain_dir, const char *off_dir, ds_step_info *ref_more,
                    const char *what);

/* ds_set_param of the first parameter on both engines (values from seed),
 * then one step each: the same loss and parameters, so the value reached
 * wherever the engine keeps its master. */
void off_set_param_step(engine_t *ref, engine_t *off, int seed, const char *what);

/* The checks of this harness that failed. test_util.h's counter is per
 * translation unit, so they are not in the test's own count. */
int off_harness_fails(void);

/* test_finish for a program using this harness: it fails when a check here
 * failed too (inline, so the failure counts in the program's own unit). */
static inline int off_finish(const char *name) {
    int n = off_harness_fails();
    if (n > 0) TEST_FAIL("%d check(s) of the offload harness failed (printed above)", n);
    return test_finish(name);
}

#endif /* DS_TESTS_OFFLOAD_HARNESS_H */
