/* ds_module_grads_final (module.h): a module's backward says its last
 * parameters' gradients are final before it returns, and the engine starts
 * reducing them while the backward goes on. It changes when, not what.
 *
 *   test_grads_final [--stage S] [--precision fp32|fp16|bf16] [--gas G]
 *                    [--watch 1] [--uneven 1|2] [--fail 1|2] [--parted 1|2]
 *
 * The model is a user's, written here against the public module API as
 * someone outside the library would write one: "pair", y = w2 * (w1 * x +
 * b1) + b2 elementwise over E features (parameters declared w1, b1, w2,
 * b2, E floats each), then user_bag.h's squared-error loss against one
 * target per row. Its backward computes the
 * gradients of w2 and b2 first and, when told to, says so
 * (ds_module_grads_final(m, ctx, 2)) before computing w1's and b1's.
 * reduce_bucket_size is a fraction of one parameter, so the part it hands
 * over fills several buckets at once and they go while the rest of the
 * backward runs (overlap_comm on).
 *
 * Each rank trains STEPS steps twice in one process, without and with the
 * call, and checks that every step's loss and gradient norm and every final
 * weight are the same bits (the sums are the same sums; only the time a
 * bucket leaves changes), and that the losses fell.
 *
 * --watch 1 (stage 0, fp32, one micro-batch per step, more than one rank:
 * the reduction then runs in place in the gradients the module wrote): after
 * the call, the module waits until the last element of b2's gradient holds
 * the sum over the ranks instead of its own value, which it can only do
 * while the backward has not returned if the reduction started at the call.
 * A reduction that waits for the module's end would leave it waiting: the
 * module gives up after WATCH_S seconds and fails the step.
 *
 * --uneven 1 (more than one rank): the second run makes the call on the
 * last rank only (a branch on something one rank sees), so that rank hands
 * its gradients over in other pieces than the others. The buckets are cut
 * at parameters whatever the pieces, so with zero_engine.check_collectives
 * every call still matches the other ranks' exactly, and the run is the
 * same bits as the first. (Stages 2 and 3 once cut their buckets at the
 * pieces: this made the ranks' reduce-scatters part, and without the check
 * trained to the end on mismatched sums.) --uneven 2: the same without the
 * check (the boundary's comparison of the ranks' sequences of calls is then
 * what would refuse a parted step).
 *
 * --fail 1 (more than one rank): the last rank's module fails its backward
 * once, at the first micro-batch of step FAIL_STEP + 1, before it computes
 * anything (so before its call). That rank's ds_backward fails and the
 * backward goes on, handing the rest of the module's gradients over in one
 * piece while the other ranks' modules hand theirs over in two; the
 * buckets match (check_collectives on), every rank's ds_step fails at that
 * step's boundary, its gradients dropped, and the run goes on. Both runs,
 * without and with the call, then must still be the same bits at every
 * step: the same step dropped, the others trained alike. --fail 2: the
 * same at the very first backward, before any call was ever made (no rank
 * has yet seen the module hand over in pieces).
 *
 * --bucket 7000: reduce_bucket_size 7000, three parameters' room and not
 * four, so a bucket holds b1, w2 and b2 whole: cut at the module's pieces
 * instead, it would hold w2 and b2 after the call and all four without it.
 *
 * --parted 1 (more than one rank): a user's bug the engine cannot mend,
 * the training loop's own collective made otherwise on one rank: before
 * step 2, every rank sums a statistic with ds_all_reduce_host, the last
 * rank as one fp64, the others as two fp32 (the same 8 bytes, so MPI runs
 * it without an error). With check_collectives every rank's call fails at
 * once, naming both. --parted 2: without the check, the sum goes through,
 * and step 2's boundary, comparing the ranks' sequences of calls inside its
 * loss all-reduce, refuses the update on every rank.
 *
 * Also, without an engine behind the context: the call does nothing for a
 * first in [0, n_params) and refuses one outside, naming the module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_harness.h"
#include "engine/engine.h"
#include "user_bag.h"

#define STEPS 6
#define MICRO 4   /* rows per micro-batch and rank */
#define E 2048    /* features, and the floats of each parameter */
#define BUCKET 500 /* reduce_bucket_size: a quarter of a parameter (--bucket N: N) */
/* Seconds the module waits for the sum: a reduction of a few buckets of 500
 * floats takes milliseconds, under the sanitizers and two ranks per core
 * still far below a second; one that never started would wait forever. */
#define WATCH_S 10.0
#define FAIL_STEP 2 /* --fail: the step (0-based) whose first backward fails */

typedef struct opts {
    int stage, gas, watch, uneven, fail, parted, bucket;
    const char *precision;
} opts;

/* ------------------------------------------------ the user's module ---- */

typedef struct pair_impl {
    bool announce; /* call ds_module_grads_final after w2's and b2's gradients */
    bool watch;    /* then wait for b2's reduced gradient (--watch) */
    int watch_fails;
    int calls, fail_call; /* backward calls so far; the one that fails (--fail; 0: none) */
} pair_impl;

static size_t pair_out(const ds_module *m, int B, int T) {
    (void)m, (void)T;
    return (size_t)B * E;
}

static ds_status pair_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, false));
    const float *x;
    DS_TRY(ds_module_input_f32(m, ctx, "features", &x));
    const float *w1 = ctx->params[0], *b1 = ctx->params[1], *w2 = ctx->params[2],
                *b2 = ctx->params[3];
    for (int b = 0; b < ctx->batch->B; b++)
        for (int i = 0; i < E; i++) {
            float h = w1[i] * x[b * E + i] + b1[i];
            ctx->y[b * E + i] = w2[i] * h + b2[i];
        }
    return DS_OK;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wait until *g is no longer `mine` (the reduction wrote the ranks' sum),
 * at most WATCH_S seconds; false when it never changed. */
static bool wait_reduced(volatile float *g, float mine) {
    double t0 = now_s();
    while (*g == mine) {
        if (now_s() - t0 > WATCH_S) return false;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 100000}, NULL);
    }
    return true;
}

static ds_status pair_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, true));
    pair_impl *p = m->impl;
    if (++p->calls == p->fail_call) /* --fail: before anything, its call included */
        return DS_ERR(DS_ERR_INVALID_ARG, "pair: backward %d fails on purpose", p->calls);
    const float *x;
    DS_TRY(ds_module_input_f32(m, ctx, "features", &x));
    const float *w1 = ctx->params[0], *b1 = ctx->params[1], *w2 = ctx->params[2];
    float *gw1 = ctx->grads[0], *gb1 = ctx->grads[1], *gw2 = ctx->grads[2], *gb2 = ctx->grads[3];
    const float *dy = ctx->dy;
    int B = ctx->batch->B;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++) {
            float h = w1[i] * x[b * E + i] + b1[i];
            gw2[i] += dy[b * E + i] * h;
            gb2[i] += dy[b * E + i];
        }
    if (p->announce) {
        float mine = gb2[E - 1];
        DS_TRY(ds_module_grads_final(m, ctx, 2)); /* w2 and b2 are done */
        if (p->watch && !wait_reduced(&gb2[E - 1], mine)) {
            p->watch_fails++;
            p->watch = false; /* once is enough to fail; the run goes on */
        }
    }

    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++) {
            float d = dy[b * E + i] * w2[i];
            gw1[i] += d * x[b * E + i];
            gb1[i] += d;
        }
    return DS_OK;
}

static const ds_module_ops k_pair_ops = {.type = "pair", .out_elems = pair_out,
                                         .saved_bytes = ub_no_bytes, .scratch_bytes = ub_no_bytes,
                                         .forward = pair_forward, .backward = pair_backward,
                                         .destroy = ds_module_free};

static ds_status pair_model(bool announce, bool watch, ds_model **out, pair_impl **impl) {
    ds_model *model;
    DS_TRY(ds_model_create("user_pair", &model));
    int64_t dims[1] = {E};
    ds_module *pair = NULL, *loss = NULL;
    ds_status st = ds_model_add_input(model, "features", DS_F32, 1, dims, 0);
    if (st == DS_OK)
        st = ds_model_add_input(model, "target", DS_F32, 0, NULL, DS_INPUT_TARGET);
    if (st == DS_OK) st = ds_module_create(&k_pair_ops, "pair", 4, sizeof(pair_impl), &pair);
    if (st == DS_OK) {
        *(pair_impl *)pair->impl = (pair_impl){.announce = announce, .watch = watch};
        *impl = pair->impl;
        const char *names[4] = {"w1", "b1", "w2", "b2"};
        for (int k = 0; st == DS_OK && k < 4; k++)
            st = ds_module_param(pair, k, NULL, names[k], E, 0,
                                 k % 2 ? DS_INIT_ZEROS : DS_INIT_NORMAL, 1.0f, 0.5f);
        ds_status add = ds_model_add_module(model, pair); /* owns pair from here */
        if (st == DS_OK) st = add;
    }
    if (st == DS_OK) st = ub_sq_loss(E, &loss);
    if (st == DS_OK) st = ds_model_add_module(model, loss);
    if (st != DS_OK) {
        ds_model_destroy(model);
        return st;
    }
    *out = model;
    return DS_OK;
}

/* ------------------------------------------------------- one run ------ */

typedef struct run {
    float loss[STEPS], norm[STEPS];
    float w[4][E];
    int watch_fails;
    int bwd_failed;       /* --fail: this rank's backward calls that failed */
    int rank, world;
    bool dropped[STEPS];  /* --fail: the steps whose ds_step dropped the window */
    ds_status failed; /* a step's failure, and its message */
    char error[1024];
} run;

/* Rank q's micro-batch j of step s: features from a fixed LCG and a target
 * per row, different on every rank (so a rank's own gradient is not the
 * sum). */
static void make_batch(int s, int q, int j, float *x, float *t) {
    unsigned r = 2654435761u * (unsigned)((s * 64 + q) * 8 + j + 1);
    for (int k = 0; k < MICRO * E; k++) {
        r = r * 1103515245u + 12345u;
        x[k] = (float)((r >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int b = 0; b < MICRO; b++) t[b] = 0.25f * (float)((b + q + s) % 3);
}

static int train(const opts *o, bool announce, run *r) {
    ds_model *model;
    pair_impl *impl;
    if (pair_model(announce, announce && o->watch, &model, &impl) != DS_OK) {
        fprintf(stderr, "model: %s\n", ds_last_error());
        return 1;
    }
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             " \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"overlap_comm\": true,"
             " \"reduce_bucket_size\": %d, \"allgather_bucket_size\": %d},"
             " \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 8},"
             " \"bf16\": {\"enabled\": %s},"
             " \"zero_engine\": {\"check_collectives\": %s}}",
             MICRO, o->gas, o->stage, o->bucket, o->bucket,
             strcmp(o->precision, "fp16") ? "false" : "true",
             strcmp(o->precision, "bf16") ? "false" : "true",
             o->uneven == 1 || o->fail || o->parted == 1 ? "true" : "false");
    engine_t *e;
    if (ck_start(cfg, model, NULL, &e) != DS_OK) {
        fprintf(stderr, "init: %s\n", ds_last_error());
        return 1;
    }
    int rank = ds_rank(e);
    r->rank = rank;
    r->world = ds_world_size(e);
    if (o->uneven) impl->announce = announce && rank == ds_world_size(e) - 1;
    if (o->fail && rank == ds_world_size(e) - 1)
        impl->fail_call = o->fail == 2 ? 1 : FAIL_STEP * o->gas + 1;
    /* at one rank the sum is the rank's own value: nothing to wait for */
    impl->watch = impl->watch && ds_world_size(e) > 1;
    static float x[MICRO * E], t[MICRO];
    for (int s = 0; s < STEPS; s++) {
        double sum = 0.0;
        if (o->parted && s == 1) { /* the user's bug: one rank sums another type */
            union { float f[2]; double d; } stat = {.f = {1.0f, 2.0f}};
            ds_status st = rank == r->world - 1 ? ds_all_reduce_host(e, &stat.d, 1, DS_F64)
                                                : ds_all_reduce_host(e, stat.f, 2, DS_F32);
            if (st != DS_OK) {
                r->failed = st;
                snprintf(r->error, sizeof r->error, "%s", ds_last_error());
                ds_finalize(e);
                return 1;
            }
        }
        for (int j = 0; j < o->gas; j++) {
            make_batch(s, rank, j, x, t);
            ds_batch b = {.B = MICRO, .T = 1};
            float loss;
            ds_status st = ds_batch_set(&b, "features", DS_F32, x);
            if (st == DS_OK) st = ds_batch_set(&b, "target", DS_F32, t);
            if (st == DS_OK) st = ds_forward(e, &b, &loss);
            if (st == DS_OK) {
                st = ds_backward(e);
                if (st != DS_OK && o->fail && strstr(ds_last_error(), "fails on purpose")) {
                    r->bwd_failed++; /* the window goes on to its boundary */
                    st = DS_OK;
                }
            }
            if (st == DS_OK) {
                st = ds_step(e);
                if (st != DS_OK && o->fail && strstr(ds_last_error(), "fails on purpose") &&
                    strstr(ds_last_error(), "gradients dropped on every rank")) {
                    r->dropped[s] = true;
                    st = DS_OK;
                }
            }
            if (st != DS_OK) {
                r->failed = st;
                snprintf(r->error, sizeof r->error, "%s", ds_last_error());
                if (!o->parted) fprintf(stderr, "step %d: %s\n", s + 1, ds_last_error());
                ds_finalize(e);
                return 1;
            }
            sum += loss;
        }
        ds_step_info info;
        if (ds_last_step_info(e, &info) != DS_OK) {
            fprintf(stderr, "step %d: %s\n", s + 1, ds_last_error());
            ds_finalize(e);
            return 1;
        }
        r->loss[s] = (float)(sum / o->gas);
        r->norm[s] = r->dropped[s] ? 0.0f : (float)info.grad_norm; /* none: nothing reduced */
    }
    const char *names[4] = {"pair.w1", "pair.b1", "pair.w2", "pair.b2"};
    for (int k = 0; k < 4; k++)
        if (ds_get_param(e, names[k], r->w[k], E) != DS_OK) {
            fprintf(stderr, "ds_get_param %s: %s\n", names[k], ds_last_error());
            ds_finalize(e);
            return 1;
        }
    r->watch_fails = impl->watch_fails;
    ds_finalize(e);
    return 0;
}

/* Without an engine: nothing to tell, and a bad index is refused. */
static int no_engine(void) {
    ds_model *model;
    pair_impl *impl;
    if (pair_model(true, false, &model, &impl) != DS_OK) return 1;
    ds_module *pair = NULL;
    for (int i = 0; i < model->n_modules; i++)
        if (!strcmp(model->modules[i]->name, "pair")) pair = model->modules[i];
    ds_module_ctx ctx = {0};
    int fails = 0;
    for (int first = 0; first < 4; first++)
        if (ds_module_grads_final(pair, &ctx, first) != DS_OK) {
            printf("FAIL: grads_final(first %d) without an engine: %s\n", first, ds_last_error());
            fails++;
        }
    int bad[2] = {-1, 4};
    for (int k = 0; k < 2; k++) {
        ds_status st = ds_module_grads_final(pair, &ctx, bad[k]);
        if (st != DS_ERR_INVALID_ARG || !strstr(ds_last_error(), "module pair") ||
            !strstr(ds_last_error(), "4 parameters")) {
            printf("FAIL: grads_final(first %d) gave %d, \"%s\"\n", bad[k], (int)st,
                   ds_last_error());
            fails++;
        }
    }
    ds_model_destroy(model);
    return fails;
}

/* --parted: the run whose loop sums otherwise on the last rank fails on
 * every rank alike, naming both calls (checked) or the parted sequences
 * (unchecked, at step 2's boundary). */
static int parted(const opts *o) {
    static run r;
    if (train(o, true, &r) == 0) {
        printf("FAIL: a run whose last rank alone sums its statistic as fp64 trained without "
               "an error\n");
        return 1;
    }
    const char *checked[] = {"collective mismatch", "called host_all_reduce of 2 fp32",
                             "called host_all_reduce of 1 fp64"};
    const char *unchecked[] = {"step 2: the ranks have made different collective calls",
                               "no rank updates", "check_collectives"};
    const char *const *want = o->parted == 1 ? checked : unchecked;
    int fails = r.failed != DS_ERR_COMM;
    for (int i = 0; i < 3; i++) fails += strstr(r.error, want[i]) == NULL;
    if (fails) {
        printf("FAIL: %s: %s, expected DS_ERR_COMM with \"%s\"\n", ds_status_to_string(r.failed),
               r.error, want[0]);
        return 1;
    }
    printf("grads_final: stage %d, the last rank alone summing as fp64: every rank failed "
           "with: %s\n", o->stage, r.error);
    return 0;
}

int main(int argc, char **argv) {
    opts o = {.stage = 0, .gas = 1, .watch = 0, .precision = "fp32", .bucket = BUCKET};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) o.stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gas")) o.gas = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--watch")) o.watch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) o.precision = argv[i + 1];
        else if (!strcmp(argv[i], "--uneven")) o.uneven = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fail")) o.fail = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--parted")) o.parted = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bucket")) o.bucket = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "test_grads_final: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (o.watch && (o.gas != 1 || o.stage != 0 || strcmp(o.precision, "fp32"))) {
        /* elsewhere the sum does not land in the slot the module wrote, or
         * an accumulating micro-batch reduces nothing */
        fprintf(stderr, "test_grads_final: --watch needs --stage 0 --precision fp32 --gas 1\n");
        return 2;
    }
    int fails = no_engine();
    static run plain, told;
    if (o.parted) return parted(&o);
    if (train(&o, false, &plain) || train(&o, true, &told)) return 1;
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&plain.loss[s], &told.loss[s], sizeof(float)) ||
            memcmp(&plain.norm[s], &told.norm[s], sizeof(float))) {
            printf("FAIL: step %d: loss %.9g / %.9g, gradient norm %.9g / %.9g (without / "
                   "with the call)\n", s + 1, plain.loss[s], told.loss[s], plain.norm[s],
                   told.norm[s]);
            fails++;
        }
    if (memcmp(plain.w, told.w, sizeof plain.w)) {
        printf("FAIL: the final weights differ without and with the call\n");
        fails++;
    }
    if (!(told.loss[STEPS - 1] < told.loss[0])) {
        printf("FAIL: the loss did not fall (%.6g -> %.6g)\n", told.loss[0],
               told.loss[STEPS - 1]);
        fails++;
    }
    int fail_step = o.fail == 2 ? 0 : FAIL_STEP;
    for (int s = 0; o.fail && s < STEPS; s++)
        if (plain.dropped[s] != (s == fail_step) || told.dropped[s] != (s == fail_step)) {
            printf("FAIL: step %d %s dropped (without / with the call: %d / %d)\n", s + 1,
                   s == fail_step ? "was not" : "was", plain.dropped[s], told.dropped[s]);
            fails++;
        }
    int want_failed = told.rank == told.world - 1; /* the last rank's module, once */
    if (o.fail && (plain.bwd_failed != want_failed || told.bwd_failed != want_failed)) {
        printf("FAIL: rank %d: %d / %d backward failures without / with the call, expected %d\n",
               told.rank, plain.bwd_failed, told.bwd_failed, want_failed);
        fails++;
    }
    if (told.watch_fails) {
        printf("FAIL: b2's gradient was not reduced within %.0f s of ds_module_grads_final, "
               "while the module's backward waited\n", WATCH_S);
        fails++;
    }
    if (fails) return 1;
    printf("grads_final: stage %d %s gas %d%s%s%s: %d steps the same bits without and with the "
           "call (loss %.6g -> %.6g)\n", o.stage, o.precision, o.gas,
           o.watch ? ", b2 reduced while the backward ran" : "",
           o.fail ? ", the last rank's backward failing once, its step dropped everywhere" : "",
           o.uneven ? ", the call on the last rank only" : "",
           STEPS, told.loss[0],
           told.loss[STEPS - 1]);
    return 0;
}
