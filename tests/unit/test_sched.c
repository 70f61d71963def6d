/* ds_sched_lr against hand-computed values and against an independent
 * transcription of DeepSpeed's lr_schedules.py driven as DeepSpeed's engine
 * drives it (lr set at construction from last_batch_iteration -1, each
 * optimizer step uses the current lr, then scheduler.step()). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/config.h"
#include "engine/core/sched.h"
#include "tests/unit/test_util.h"

/* Tolerance for every value here: glibc's log and cos are accurate to
 * within 1 ulp, and each schedule chains at most five more roundings
 * (reciprocal of log(W), product, difference, product, sum), so the result is
 * within ~7 ulps (~1.6e-15 relative) of the exact value; 2e-15 relative
 * covers that and nothing more. The reference values from Python use the
 * same operations, so on this machine they agree bit for bit; the tolerance
 * is for other libms. Zero is compared exactly (abs 0). */
#define REL_TOL 2e-15

static void check_lr(const ds_config *c, int64_t step, double want, int line) {
    double got = ds_sched_lr(c, step);
    double err = fabs(got - want);
    if (!(err <= REL_TOL * fabs(want))) {
        test_fail_at(__FILE__, line, "LR", "step %lld: lr %.17g, expected %.17g (diff %.3g)",
                     (long long)step, got, want, err);
    }
}
#define LR(c, step, want) check_lr((c), (step), (want), __LINE__)

static ds_config sched(ds_sched_type t, double min_lr, double max_lr, int64_t warmup,
                       ds_warmup_type wt, int64_t total) {
    ds_config c;
    ds_config_defaults(&c);
    c.scheduler = t;
    c.warmup_min_lr = min_lr;
    c.warmup_max_lr = max_lr;
    c.warmup_num_steps = warmup;
    c.warmup_type = wt;
    c.total_num_steps = total;
    return c;
}

static void test_warmup_lr(void) {
    /* log warmup 0 -> 1e-3 over W = 100: lr(step s) = 1e-3 * log(s) / log(100) */
    ds_config c = sched(DS_SCHED_WARMUP_LR, 0.0, 1e-3, 100, DS_WARMUP_LOG, 0);
    LR(&c, 0, 0.0);     /* before the first scheduler step: warmup_min_lr */
    LR(&c, 1, 0.0);     /* log(0 + 1) = 0 */
    LR(&c, 10, 5e-4);   /* log(10) / log(100) = 1/2 */
    LR(&c, 100, 1e-3);  /* it = 99: log(100) / log(100) = 1 */
    LR(&c, 101, 1e-3);  /* constant after warmup */
    LR(&c, 1000000, 1e-3);
    c.optimizer = DS_OPTIM_SGD;
    c.lr = 0.5; /* WarmupLR ignores the optimizer lr */
    LR(&c, 10, 5e-4);

    /* linear warmup 1e-4 -> 1e-3 over 10: it / 10 of the way */
    c = sched(DS_SCHED_WARMUP_LR, 1e-4, 1e-3, 10, DS_WARMUP_LINEAR, 0);
    LR(&c, 5, 1e-4 + 9e-4 * 0.4); /* it = 4 */
    LR(&c, 11, 1e-4 + 9e-4);      /* it = 10 = W: gamma 1 */
    static const double ref[13] = {0.0001, 0.0001, 0.00019, 0.00028000000000000003, 0.00037,
                                   0.00046, 0.00055, 0.00064, 0.00073, 0.0008200000000000001,
                                   0.00091, 0.001, 0.001};
    for (int s = 0; s < 13; s++) LR(&c, s, ref[s]);

    /* DeepSpeed clamps warmup_num_steps to >= 2: W = 1 behaves as 2. */
    c = sched(DS_SCHED_WARMUP_LR, 0.0, 1e-3, 1, DS_WARMUP_LINEAR, 0);
    LR(&c, 1, 0.0);
    LR(&c, 2, 5e-4); /* it = 1 < 2: 1/2 */
    LR(&c, 3, 1e-3);
}

static void test_warmup_decay_lr(void) {
    /* linear warmup to 1e-3 over 10, then linear decay to warmup_min_lr at 110 */
    ds_config c = sched(DS_SCHED_WARMUP_DECAY_LR, 0.0, 1e-3, 10, DS_WARMUP_LINEAR, 110);
    LR(&c, 11, 1e-3);  /* it = 10: (110 - 10) / 100 = 1 */
    LR(&c, 61, 5e-4);  /* it = 60: (110 - 60) / 100 = 1/2 */
    LR(&c, 86, 2.5e-4);/* it = 85: 25 / 100 */
    LR(&c, 111, 0.0);  /* it = 110: gamma 0 */
    LR(&c, 500, 0.0);  /* clamped at 0, never negative */

    /* the Python transcription: log warmup 1e-5 -> 3e-4 over 7, total 20 */
    c = sched(DS_SCHED_WARMUP_DECAY_LR, 1e-5, 3e-4, 7, DS_WARMUP_LOG, 20);
    static const double ref[24] = {
        1e-05, 1e-05, 0.00011330008426132641, 0.00017372675987553809, 0.00021660016852265282,
        0.00024985536785060566, 0.0002770268441368645, 0.0003, 0.0003, 0.0002776923076923077,
        0.0002553846153846154, 0.00023307692307692306, 0.00021076923076923074,
        0.00018846153846153844, 0.00016615384615384612, 0.00014384615384615383,
        0.00012153846153846153, 9.923076923076922e-05, 7.692307692307691e-05,
        5.461538461538461e-05, 3.230769230769231e-05, 1e-05, 1e-05, 1e-05};
    for (int s = 0; s < 24; s++) LR(&c, s, ref[s]);
}

static void test_warmup_cosine_lr(void) {
    /* optimizer lr 2e-3, linear warmup ratio 0.2 -> 1 over 10, cosine to 0.1 at 110 */
    ds_config c = sched(DS_SCHED_WARMUP_COSINE_LR, 0, 0, 10, DS_WARMUP_LINEAR, 110);
    c.lr = 2e-3;
    c.warmup_min_ratio = 0.2;
    c.cos_min_ratio = 0.1;
    LR(&c, 0, 0.0);                /* before the first step DeepSpeed returns 0 */
    LR(&c, 1, 2e-3 * 0.2);         /* it = 0: warmup_min_ratio */
    LR(&c, 6, 2e-3 * 0.6);         /* it = 5: 0.2 + 0.5 * 0.8 */
    LR(&c, 11, 2e-3 * (0.1 + 0.9 * 0.9997532801828658)); /* p = 1/100: (1 + cos(pi/100)) / 2 */
    LR(&c, 60, 2e-3 * 0.55);       /* it = 59: p = 50/100, cos(pi/2) = 0: 0.1 + 0.9 / 2 */
    LR(&c, 110, 2e-3 * 0.1);       /* it = 109: p = 1: cos_min_ratio */
    LR(&c, 5000, 2e-3 * 0.1);      /* progress clamped at 1: stays at the floor */

    /* the Python transcription: log warmup over 5 from ratio 0.1, total 15, floor 0.05 */
    c = sched(DS_SCHED_WARMUP_COSINE_LR, 0, 0, 5, DS_WARMUP_LOG, 15);
    c.lr = 2e-3;
    c.warmup_min_ratio = 0.1;
    c.cos_min_ratio = 0.05;
    static const double ref[18] = {
        0.0, 0.0002, 0.0009752178045321076, 0.0014286911500747737, 0.0017504356090642151,
        0.002, 0.001953503690480396, 0.0018185661446562, 0.0016083959896778495,
        0.0013435661446562002, 0.0010500000000000002, 0.0007564338553438,
        0.0004916040103221507, 0.00028143385534380006, 0.00014649630951960415, 0.0001, 0.0001,
        0.0001};
    for (int s = 0; s < 18; s++) LR(&c, s, ref[s]);
}

static void test_none_and_resume(void) {
    ds_config c;
    ds_config_defaults(&c);
    c.lr = 0.125;
    LR(&c, 0, 0.125);
    LR(&c, 123456, 0.125);

    /* Pure: the value depends only on (config, step), in any call order. */
    ds_config d = sched(DS_SCHED_WARMUP_DECAY_LR, 1e-5, 3e-4, 7, DS_WARMUP_LOG, 20);
    double forward[30], backward[30];
    for (int s = 0; s < 30; s++) forward[s] = ds_sched_lr(&d, s);
    for (int s = 29; s >= 0; s--) backward[s] = ds_sched_lr(&d, s);
    if (memcmp(forward, backward, sizeof forward) != 0) {
        TEST_FAIL("ds_sched_lr is not a pure function of the step");
    }
    /* last_batch_iteration shifts the schedule: resuming "after 9 steps"
     * through the config is the same as asking for step + 10. */
    ds_config r = d;
    r.last_batch_iteration = 9;
    for (int s = 0; s < 20; s++) {
        if (ds_sched_lr(&r, s) != ds_sched_lr(&d, s + 10)) {
            TEST_FAIL("last_batch_iteration 9: step %d differs from step %d", s, s + 10);
        }
    }
}

static void test_through_config(void) {
    /* The quickstart's schedule, read from JSON and resolved. */
    ds_config c;
    ds_config_hints h;
    ds_config_hints_init(&h);
    h.total_num_steps = 300;
    if (ds_config_parse_string("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\","
                               " \"params\": {\"lr\": 5e-4}}, \"scheduler\": {\"type\": "
                               "\"WarmupDecayLR\", \"params\": {\"warmup_max_lr\": \"auto\","
                               " \"warmup_num_steps\": 100, \"warmup_type\": \"linear\","
                               " \"total_num_steps\": \"auto\"}}}",
                               &c, NULL, NULL) != DS_OK ||
        ds_config_resolve(&c, &h) != DS_OK) {
        TEST_FAIL("config: %s", ds_last_error());
        return;
    }
    LR(&c, 51, 2.5e-4);  /* it = 50: half way up to the optimizer lr */
    LR(&c, 101, 5e-4);   /* it = 100: top */
    LR(&c, 201, 2.5e-4); /* it = 200: (300 - 200) / 200 */
    LR(&c, 301, 0.0);
}

/* The trainer's schedule (sched_hf): transformers' LambdaLR as its Trainer
 * steps it, step s at lr * lambda(s). The values are what
 * get_scheduler(NAME, AdamW(lr=1e-3), num_warmup_steps=W,
 * num_training_steps=6) gives as param_groups[0]["lr"] before each of six
 * optimizer.step(); scheduler.step() pairs (transformers 5.24 / torch 2.15,
 * checked by hand once; derived here from optimization.py's lambdas):
 *   linear W=2: 0, 1/2, 1, 3/4, 1/2, 1/4 (x 1e-3) - DeepSpeed's WarmupDecayLR
 *               of the same keys gives 0, 0, 1/2, 1, 3/4, 1/2: one behind;
 *   linear W=0: (6 - s) / 6, from the full lr at the first step;
 *   cosine W=2: 0, 1/2, then (1 + cos(pi (s - 2) / 4)) / 2;
 *   constant_with_warmup W=2: 0, 1/2, then 1. */
static void test_hf_lambda(void) {
    ds_config c = sched(DS_SCHED_WARMUP_DECAY_LR, 0.0, 1e-3, 2, DS_WARMUP_LINEAR, 6);
    c.lr = 1e-3;
    c.sched_hf = true;
    const double lin2[] = {0.0, 0.5e-3, 1e-3, 0.75e-3, 0.5e-3, 0.25e-3};
    for (int s = 0; s < 6; s++) LR(&c, s, lin2[s]);
    LR(&c, 6, 0.0); /* past the end: 0, as max(0, ...) */
    LR(&c, 9, 0.0);
    c.warmup_num_steps = 0;
    for (int s = 0; s < 6; s++) LR(&c, s, 1e-3 * (double)(6 - s) / 6.0);
    c.scheduler = DS_SCHED_WARMUP_COSINE_LR;
    c.warmup_num_steps = 2;
    LR(&c, 0, 0.0);
    LR(&c, 1, 0.5e-3);
    for (int s = 2; s < 6; s++)
        LR(&c, s, 1e-3 * (0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * (double)(s - 2) / 4.0))));
    c.scheduler = DS_SCHED_WARMUP_LR;
    const double cw2[] = {0.0, 0.5e-3, 1e-3, 1e-3, 1e-3, 1e-3};
    for (int s = 0; s < 6; s++) LR(&c, s, cw2[s]);
}

int main(void) {
    test_hf_lambda();
    test_warmup_lr();
    test_warmup_decay_lr();
    test_warmup_cosine_lr();
    test_none_and_resume();
    test_through_config();
    return test_finish("test_sched");
}
