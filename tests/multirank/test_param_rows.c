/* rows_read_by (module.h; zero/param_rows.h): at stages 1 and 2 a table
 * whose forward reads only the rows its batch names is gathered after each
 * update by those rows alone. That changes how many bytes travel, never
 * what a module reads.
 *
 *   test_param_rows --stage 1|2|3 [--gas G] [--lie 1] [--around 1] [--absent 1]
 *                   [--fetch-fails 1]
 *
 * A user's module written against the public module API (user_bag.h):
 * y[b, :] = sum over unmasked t of W[ids[b, t], :] over a 512-row table,
 * then a squared loss. Each rank trains STEPS steps twice in one process,
 * the table without rows_read_by (the whole table all-gathered after each
 * update) then with rows_read_by "input_ids", overlap_comm on and an
 * allgather_bucket_size of 64 elements, and checks:
 *
 *  - every step's loss and gradient norm, an evaluation's loss between
 *    steps (which gathers the table whole first) and every final weight
 *    (ds_get_param), bit for bit the same: the rows are copies;
 *  - with --gas 2, the second micro-batch's rows come by an exchange of
 *    their own (its batch names rows the first did not);
 *  - the buffers the rows add in the backend's memory are what the memory
 *    estimate adds for them (zero/estimate.h), to the byte;
 *  - the rows run sends less than half the dense run's all-gather bytes,
 *    so the exchange, not its whole-table fallback, ran: a step's
 *    micro-batches name about 20 rows each, so the union is 40 (2 ranks)
 *    to 120 (3 ranks, 2 micro-batches) of the 512 rows, and the counts and
 *    indices add 4 bytes a row to its 32 (the dense run sends the other
 *    ranks' (world - 1) / world of the table: a fraction of 1/4 to 1/3
 *    measured);
 *  - --lie 1: the module also reads row ids[b, t] + 1, which its batch
 *    does not name. The rows it was not brought hold NaN, so the loss of
 *    step 2 (the first forward after an update) must be NaN, where the run
 *    without rows_read_by stays finite: a module that breaks its
 *    declaration fails loudly instead of reading a stale row.
 *  - --around 1: the table sits between two biases of its module, so the
 *    span has dense parameters on both sides of it (stage 3 gathers them
 *    by jobs of their own beside the rows: zero/stage3_rows.c); the same
 *    bits.
 *  - --absent 1: input_ids is optional, and the last rank's batch of step
 *    ABSENT_STEP leaves it out. With rows_read_by that rank cannot plan the
 *    table's rows before its forward; without, its module fails. Either
 *    way every rank's ds_forward of that step must fail, the others naming
 *    that rank, within the test's time (not a wait for a peer that went
 *    elsewhere), and both runs then train on alike: the same bits.
 *  - --fetch-fails 1 (stages 1-2): the last rank's fetch fails in the
 *    backward of step FETCH_FAIL_STEP on its own (DS_FAULT_INJECT=error:
 *    replica:fetch set around that call: the replica's local part, as a
 *    failed cast). Its gathers went, so its backward goes on through the
 *    gradient buckets the others reduce, its ds_backward failing; every
 *    rank's ds_step then fails naming the injected failure, and both runs
 *    train on alike. (A return at the failed fetch left the others in the
 *    buckets' reduction until the test's timeout.)
 * The losses must fall, so a run that trained nothing cannot pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_harness.h"
#include "engine/comm/comm.h"
#include "engine/engine.h"
#include "user_bag.h"

#define STEPS 6
#define T_LEN 8
#define MICRO 4 /* rows per micro-batch and rank */
#define EMB 8
#define VOCAB 512

#define ABSENT_STEP 3 /* --absent: the step (from 1) whose last rank's batch lacks input_ids */
#define FETCH_FAIL_STEP 2 /* --fetch-fails: the step whose backward's fetch fails on the last rank */

typedef struct opts {
    int stage, gas, lie, around, absent, fetch_fails;
} opts;

/* Rank q's micro-batch j of step s (step -1: the evaluation's). */
typedef struct ubatch {
    int32_t ids[MICRO * T_LEN];
    float mask[MICRO * T_LEN], target[MICRO];
    ds_batch b;
} ubatch;

static ds_status user_batch(int step, int q, int world, int j, bool absent, ubatch *u) {
    unsigned s = 7919u * (unsigned)(((step + 2) * world + q) * 8 + j + 1);
    for (int b = 0; b < MICRO; b++) {
        int len = 2 + (b * 3 + step + 7) % (T_LEN - 1);
        for (int t = 0; t < T_LEN; t++) {
            s = s * 1103515245u + 12345u;
            u->ids[b * T_LEN + t] = t < len ? (int)((s >> 16) % (unsigned)VOCAB) : 0;
            u->mask[b * T_LEN + t] = t < len ? 1.0f : 0.0f;
        }
        u->target[b] = 0.25f * (float)((b + step + 3) % 3);
    }
    u->b = (ds_batch){.B = MICRO, .T = T_LEN};
    if (!absent) DS_TRY(ds_batch_set(&u->b, "input_ids", DS_I32, u->ids));
    DS_TRY(ds_batch_set(&u->b, "attention_mask", DS_F32, u->mask));
    DS_TRY(ds_batch_set(&u->b, "target", DS_F32, u->target));
    return DS_OK;
}

/* ------------------------------------------------------- one run ------ */

typedef struct run {
    double loss[STEPS], norm[STEPS], eval;
    float *weights;
    size_t n_weights;
    uint64_t gathered; /* all-gather bytes this rank sent over the steps */
    uint64_t dev_real, dev_est; /* the backend's buffers: the accountant's, the estimate's */
} run;

static int train(const opts *o, bool rows, bool lie, run *r) {
    ds_model *model;
    ub_desc ud = {.vocab = VOCAB, .width = EMB, .max_seq_len = T_LEN, .rows = rows, .lie = lie,
                  .around = o->around, .optional_ids = o->absent};
    if (ub_model(&ud, &model) != DS_OK) {
        fprintf(stderr, "model: %s\n", ds_last_error());
        return 1;
    }
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
             " \"weight_decay\": 0.01}}, \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"overlap_comm\": true,"
             " \"reduce_bucket_size\": 64, \"allgather_bucket_size\": 64%s}%s}",
             MICRO, o->gas, o->stage,
             /* stage 3: the 4096-element table gathered at each use, not kept whole as a
              * module under the persistence threshold; reuse 0: the backward gathers it
              * again, by the same micro-batch's rows */
             o->stage == 3 ? ", \"stage3_param_persistence_threshold\": 0,"
                             " \"stage3_max_reuse_distance\": 0" : "",
             /* --lie: every step's loss NaN, skipped, and the run goes on to be looked at */
             lie ? ", \"zero_engine\": {\"max_consecutive_skips\": 100}" : "");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        fprintf(stderr, "init: %s\n", ds_last_error());
        return 1;
    }
    int world = ds_world_size(e), rank = ds_rank(e), rc = 0;
    uint64_t real[2], est[2];
    rc = ck_buffer_bytes(e, world, real, est);
    r->dev_real = real[1], r->dev_est = est[1];
    ds_comm_stats before, after;
    ds_comm_report(e, &before);
    for (int s = 0; s < STEPS && rc == 0; s++) {
        for (int j = 0; j < o->gas && rc == 0; j++) {
            ubatch u;
            /* two batches in turn, so the rows they name learn */
            bool absent_step = o->absent && s + 1 == ABSENT_STEP && j == 0;
            ds_status st = user_batch(s % 2, rank, world, j, absent_step && rank == world - 1, &u);
            if (st == DS_OK) st = ds_forward(e, &u.b, NULL);
            if (absent_step) { /* refused on every rank, naming the input; then on */
                char want[64];
                snprintf(want, sizeof want, rank == world - 1 ? "input_ids" : "rank %d",
                         world - 1);
                if (st == DS_OK || !strstr(ds_last_error(), want)) {
                    fprintf(stderr, "rows %d step %d: the forward without input_ids on rank "
                            "%d gave %s (want a failure naming \"%s\")\n", rows, s + 1,
                            world - 1, st == DS_OK ? "no error" : ds_last_error(), want);
                    rc = 1;
                } else if (rank == 0) {
                    printf("rows %d step %d refused as it should: %s\n", rows, s + 1,
                           ds_last_error());
                }
                continue;
            }
            bool fail_fetch = o->fetch_fails && s + 1 == FETCH_FAIL_STEP && j == 0;
            if (fail_fetch && st == DS_OK) {
                if (rank == world - 1) setenv("DS_FAULT_INJECT", "error:replica:fetch", 1);
                st = ds_backward(e);
                unsetenv("DS_FAULT_INJECT");
                bool bwd_ok = rank == world - 1
                                  ? st != DS_OK &&
                                        strstr(ds_last_error(), "replica:fetch: failure injected")
                                  : st == DS_OK;
                ds_status ss = ds_step(e);
                bool step_ok = ss != DS_OK &&
                               strstr(ds_last_error(), "replica:fetch: failure injected");
                if (!bwd_ok || !step_ok) {
                    fprintf(stderr, "rows %d step %d: rank %d's fetch failing in its backward: "
                            "backward %s, step %s (want the step refused on every rank)\n", rows,
                            s + 1, world - 1, st == DS_OK ? "ok" : "failed",
                            ss == DS_OK ? "ok" : ds_last_error());
                    rc = 1;
                } else if (rank == 0) {
                    printf("rows %d step %d refused as it should: %s\n", rows, s + 1,
                           ds_last_error());
                }
                continue;
            }
            if (st == DS_OK) st = ds_backward(e);
            if (st == DS_OK) st = ds_step(e);
            if (st != DS_OK) {
                fprintf(stderr, "rows %d step %d: %s\n", rows, s + 1, ds_last_error());
                rc = 1;
            }
        }
        ds_step_info info;
        if (ds_last_step_info(e, &info) != DS_OK) rc = 1;
        r->loss[s] = info.loss;
        r->norm[s] = info.grad_norm;
        if (s == 3 && rc == 0) { /* an evaluation between updates: the table whole first */
            ubatch u;
            double loss, weight;
            if (user_batch(-1, rank, world, 0, false, &u) != DS_OK ||
                ds_evaluate(e, &u.b, &loss, &weight) != DS_OK) {
                fprintf(stderr, "rows %d evaluate: %s\n", rows, ds_last_error());
                rc = 1;
            }
            r->eval = loss;
        }
    }
    ds_comm_report(e, &after);
    r->gathered = after.bytes_sent[DS_COLL_ALL_GATHER] - before.bytes_sent[DS_COLL_ALL_GATHER];
    r->weights = rc == 0 ? ck_params(e, &r->n_weights) : NULL;
    if (rc == 0 && !r->weights) rc = 1;
    ds_finalize(e);
    return rc;
}

int main(int argc, char **argv) {
    opts o = {.stage = 1, .gas = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) o.stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gas")) o.gas = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lie")) o.lie = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--around")) o.around = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--absent")) o.absent = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fetch-fails")) o.fetch_fails = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "test_param_rows: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    static run dense, rows;
    if (train(&o, false, o.lie, &dense) || train(&o, true, o.lie, &rows)) return 1;
    int fails = 0;
    if (o.lie) {
        /* stages 1-2: the first step reads initial values every rank drew;
         * the second reads rows after an update, and row id + 1 was not
         * brought. Stage 3 gathers by rows from the first forward on. */
        for (int s = 0; s < 2; s++)
            if (!isfinite(dense.loss[s])) {
                printf("FAIL: without rows_read_by, step %d's loss is %g\n", s + 1, dense.loss[s]);
                fails++;
            }
        bool first_ok = o.stage == 3 ? isnan(rows.loss[0]) : isfinite(rows.loss[0]);
        if (!first_ok || !isnan(rows.loss[1])) {
            printf("FAIL: a module reading rows its batch does not name: losses %g, %g "
                   "(want %s, then NaN)\n", rows.loss[0], rows.loss[1],
                   o.stage == 3 ? "NaN" : "finite");
            fails++;
        }
    } else {
        for (int s = 0; s < STEPS; s++)
            if (memcmp(&dense.loss[s], &rows.loss[s], sizeof(double)) ||
                memcmp(&dense.norm[s], &rows.norm[s], sizeof(double))) {
                printf("FAIL: step %d: loss %.9g / %.9g, norm %.9g / %.9g (dense / rows)\n", s + 1,
                       dense.loss[s], rows.loss[s], dense.norm[s], rows.norm[s]);
                fails++;
            }
        if (memcmp(&dense.eval, &rows.eval, sizeof(double))) {
            printf("FAIL: evaluation loss %.9g / %.9g\n", dense.eval, rows.eval);
            fails++;
        }
        if (dense.n_weights != rows.n_weights ||
            memcmp(dense.weights, rows.weights, dense.n_weights * sizeof(float))) {
            printf("FAIL: final weights differ\n");
            fails++;
        }
        /* --absent: the refused micro-batch makes its exchange for the whole
         * table (the rank without input_ids asks for every row, engine_step.c
         * forward_failed), one dense round on top of the rows' own: fewer
         * bytes than the dense run still, not under half */
        if (o.absent ? !(rows.gathered < dense.gathered) : !(rows.gathered * 2 < dense.gathered)) {
            printf("FAIL: the rows run gathered %llu bytes, the dense run %llu: not under "
                   "%s\n", (unsigned long long)rows.gathered,
                   (unsigned long long)dense.gathered, o.absent ? "it" : "half");
            fails++;
        }
        /* the buffers the rows add (packing, counts, asked rows), in the
         * backend's memory: the accountant's and the estimate's, to the byte */
        uint64_t add_real = rows.dev_real - dense.dev_real, add_est = rows.dev_est - dense.dev_est;
        if (add_real != add_est || add_real == 0) {
            printf("FAIL: the rows added %llu bytes of the backend's buffers, the estimate %llu "
                   "(want the same, > 0)\n", (unsigned long long)add_real,
                   (unsigned long long)add_est);
            fails++;
        }
        if (!(rows.loss[STEPS - 1] < rows.loss[0])) {
            printf("FAIL: the loss did not fall (%g -> %g)\n", rows.loss[0], rows.loss[STEPS - 1]);
            fails++;
        }
    }
    printf("%s: stage %d gas %d lie %d around %d absent %d: losses %.6f -> %.6f (rows) / %.6f "
           "(dense), all-gather bytes %llu (rows) / %llu (dense)\n", fails ? "FAIL" : "ok",
           o.stage, o.gas, o.lie, o.around, o.absent, rows.loss[0], rows.loss[STEPS - 1], dense.loss[STEPS - 1],
           (unsigned long long)rows.gathered, (unsigned long long)dense.gathered);
    free(dense.weights);
    free(rows.weights);
    return fails ? 1 : 0;
}
