/* sparse_gradients (DeepSpeed's key; zero/grad_sparse.h): a row_sparse_grad
 * parameter's gradient sent as (row index, row) records changes how many
 * bytes travel, not what arrives.
 *
 *   test_sparse_grads [--model user|bert|tied] [--stage S]
 *                     [--precision fp32|fp16|bf16] [--gas G] [--vocab V]
 *                     [--zero KEYS] [--sparse-zero KEYS] [--mics N]
 *                     [--band B] [--negzero 1] [--engine KEYS]
 *
 * --zero: more zero_optimization keys (JSON members, e.g.
 * '"zero_quantized_weights": true') for both runs; --sparse-zero: for the
 * sparse run only; --mics N: mics_shard_size N in both (the rows are then
 * summed over the N ranks of a shard group and then over the replica
 * groups, so "2 ranks" below means groups of 2 at both levels; with the
 * user's model the sparse run must then all-reduce nothing); --band B:
 * the losses only within B of the first dense loss (qgZ in both runs,
 * below), instead of the same bits; --negzero: the
 * user's module writes its table's column 0 as -0.0 (below); --engine: a
 * zero_engine section's members for both (by hand under tools/twohost.sh:
 * '"qgz_scheme": "int4"', whose two levels need two hosts).
 *
 * Each rank trains STEPS steps twice in one process, sparse_gradients false
 * then true (overlap_comm on: the exchange runs on the communication
 * thread), and checks:
 *
 *  - at 2 ranks: every step's loss and gradient norm and every final weight
 *    bit for bit the same (one addition a + b either way), and with the
 *    user's model the first step's table gradient (ds_get_grad) too, the
 *    sign of each zero included;
 *  - at more ranks: the first step's gradient of the table, sparse and
 *    dense, each within the recursive-summation bound of the exact sum
 *    (below; ranks add in another order than the ring);
 *  - --model user: the table is a module written here as a user would write
 *    one, against the public module API, flagging its table row_sparse_grad.
 *    Its rows touched per rank are known from the batches, so every step's
 *    all-gather bytes must equal the formula (the count, then records of
 *    int32 index + row), and the dense all-reduce must carry nothing (the
 *    table is the model's only parameter). With --vocab small enough that
 *    the ranks' rows together exceed the table's, every step must fall back
 *    to the dense all-reduce (only the counts gathered);
 *  - --model bert: the bundled embeddings' word table goes sparse (gathered
 *    bytes appear, all-reduced bytes shrink);
 *  - --model tied: a table that the head ties to (as GPT-2's wte) is always
 *    exchanged dense: no bytes gathered, nothing changes;
 *  - the buffers sparse_gradients adds, on the host (row lists, the plan)
 *    and in the backend's memory (records, flags, the plan), are what the
 *    memory estimate adds for it (zero/estimate.h), to the byte;
 *  - with qgZ in both runs (--zero): neither sends a full-precision
 *    reduce-scatter (the pieces around the table stay int8);
 *  - --negzero (stage 0, where the sum replaces the row): the module
 *    stores its table's column 0 as 0 x (a negative number) = -0.0 in every
 *    row it touches (a frozen column written as a masked product), the rest
 *    of the row as usual. A row every rank touched then sums to -0.0 + -0.0
 *    = -0.0 in the dense all-reduce; sum_records gets the same bits only by
 *    starting such a row at -0.0 (zero/grad_sparse.h), which the step-1
 *    gradient comparison sees (Adam turns either zero into the same update,
 *    so the losses and weights would not). --vocab 64: the ranks' 32 tokens
 *    each share rows, and together never pass the table's 64 (no fallback).
 * The losses must fall in the sparse run, so a run that trained nothing
 * cannot pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_harness.h"
#include "engine/comm/comm.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tied_model.h"
#include "user_bag.h"

#define STEPS 8
#define T_LEN 8
#define MICRO 4 /* rows per micro-batch and rank (user model) */
#define EMB 12  /* the user table's width */

typedef struct opts {
    int stage, gas, vocab, mics, negzero;
    double band;                 /* 0: the same bits */
    const char *model, *precision;
    const char *zero, *sparse_zero; /* more zero_optimization members, or "" */
    const char *engine;             /* zero_engine members, or "" */
} opts;

/* ------------------------------------------------ the user's module ---- */

/* The user's bag of rows (user_bag.h), its table flagged row_sparse_grad,
 * with `spy`: a copy of what its backward added into the gradient, which
 * the test reads as this rank's local gradient (gradient_accumulation_steps
 * 1: the slot starts at zero). */
static ds_status user_model(int V, bool negzero, float **spy, ds_model **out) {
    *spy = calloc((size_t)V * EMB, sizeof(float)); /* the test owns it */
    if (!*spy) return DS_ERR(DS_ERR_OOM, "spy");
    ub_desc d = {.vocab = V, .width = EMB, .max_seq_len = T_LEN, .negzero = negzero,
                 .spy = *spy};
    return ub_model(&d, out);
}

/* The user model's data: rank q's micro-batch j of step s. */
typedef struct ubatch {
    int32_t ids[MICRO * T_LEN];
    float mask[MICRO * T_LEN], target[MICRO];
} ubatch;

static void user_batch(int V, int step, int q, int world, int j, ubatch *u) {
    unsigned s = 1000003u * (unsigned)(((step * world + q) * 8 + j) + 1);
    for (int b = 0; b < MICRO; b++) {
        int len = 2 + (b * 3 + step) % (T_LEN - 1);
        for (int t = 0; t < T_LEN; t++) {
            s = s * 1103515245u + 12345u;
            u->ids[b * T_LEN + t] = t < len ? (int)((s >> 16) % (unsigned)V) : 0;
            u->mask[b * T_LEN + t] = t < len ? 1.0f : 0.0f;
        }
        u->target[b] = 0.25f * (float)((b + step) % 3);
    }
}

/* Distinct rows rank q touches in step s (all its micro-batches). */
static long user_rows(int V, int step, int q, int world, int gas) {
    char *seen = calloc((size_t)V, 1);
    long n = 0;
    for (int j = 0; j < gas; j++) {
        ubatch u;
        user_batch(V, step, q, world, j, &u);
        for (int k = 0; k < MICRO * T_LEN; k++)
            if (u.mask[k] != 0.0f && !seen[u.ids[k]]) seen[u.ids[k]] = 1, n++;
    }
    free(seen);
    return n;
}

/* ------------------------------------------------------- one run ------ */

typedef struct run {
    double loss[STEPS], norm[STEPS];
    float *weights;
    size_t n_weights;
    float *grad1;      /* user: the table's gradient at step 1 (ds_get_grad) */
    float *spy1;       /* user: this rank's local gradient at step 1 */
    uint64_t gathered, reduced; /* data-path bytes this rank sent, all steps: all-gather(v)
                                 * (at stage 3 the parameters' too), all-reduce +
                                 * reduce-scatter + all-to-all (qgZ) */
    uint64_t scattered;         /* of which reduce-scatter: none where qgZ quantizes all */
    uint64_t allreduced;        /* of which all-reduce (MiCS: across the replica groups) */
    uint64_t host_real, host_est; /* host buffers: the accountant's, the estimate's */
    uint64_t dev_real, dev_est;   /* the backend's buffers, the same two */
    int fails;
} run;

static ds_status make_model(const opts *o, float **spy, ds_model **out) {
    if (!strcmp(o->model, "user")) return user_model(o->vocab, o->negzero, spy, out);
    if (!strcmp(o->model, "tied")) return tm_create(o->vocab, 16, T_LEN, true, out);
    ds_bert_desc bd = {.vocab_size = o->vocab, .hidden_size = 32, .num_hidden_layers = 1,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 16, .n_classes = 3, .max_seq_len = T_LEN,
                       .hidden_dropout_prob = 0.1f, .attention_probs_dropout_prob = 0.1f};
    return ds_bert_create(&bd, out);
}

static int start(const opts *o, bool sparse, int world, const ds_dataset *data, float **spy,
                 engine_t **e) {
    ds_model *model;
    if (make_model(o, spy, &model) != DS_OK) {
        fprintf(stderr, "model: %s\n", ds_last_error());
        return 1;
    }
    char cfg[2048], mics[64] = "";
    if (o->mics > 0) snprintf(mics, sizeof mics, " \"mics_shard_size\": %d,", o->mics);
    const char *more = sparse ? o->sparse_zero : "";
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
             " \"weight_decay\": 0.01}}, \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"sparse_gradients\": %s,"
             " \"zero_optimization\": {\"stage\": %d, \"overlap_comm\": true,%s%s%s%s%s"
             " \"reduce_bucket_size\": 2000},"
             " \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 8},"
             " \"bf16\": {\"enabled\": %s}, \"zero_engine\": {%s}}",
             MICRO * world * o->gas, o->gas, sparse ? "true" : "false", o->stage, mics,
             o->zero, o->zero[0] ? "," : "", more, more[0] ? "," : "",
             strcmp(o->precision, "fp16") ? "false" : "true",
             strcmp(o->precision, "bf16") ? "false" : "true", o->engine);
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    if (ds_initialize(&d, e) != DS_OK) {
        fprintf(stderr, "init: %s\n", ds_last_error());
        return 1;
    }
    return 0;
}

/* One step of the user model from our own batches; checks the bytes. */
static int user_step(const opts *o, engine_t *e, bool sparse, int s, float *spy, run *r) {
    int world = ds_world_size(e), rank = ds_rank(e);
    ds_comm_stats before, after;
    ds_comm_report(e, &before);
    if (s == 0) memset(spy, 0, sizeof(float) * (size_t)o->vocab * EMB);
    for (int j = 0; j < o->gas; j++) {
        ubatch u;
        user_batch(o->vocab, s, rank, world, j, &u);
        ds_batch b = {.B = MICRO, .T = T_LEN};
        float loss;
        if (ds_batch_set(&b, "input_ids", DS_I32, u.ids) != DS_OK ||
            ds_batch_set(&b, "attention_mask", DS_F32, u.mask) != DS_OK ||
            ds_batch_set(&b, "target", DS_F32, u.target) != DS_OK ||
            ds_forward(e, &b, &loss) != DS_OK || ds_backward(e) != DS_OK ||
            (j + 1 < o->gas && ds_step(e) != DS_OK)) { /* ds_step counts the micro-step */
            fprintf(stderr, "step %d: %s\n", s + 1, ds_last_error());
            return 1;
        }
    }
    if (s == 0) {
        size_t n = (size_t)o->vocab * EMB;
        r->grad1 = malloc(n * sizeof(float));
        r->spy1 = malloc(n * sizeof(float));
        if (!r->grad1 || !r->spy1 || ds_get_grad(e, "bag.weight", r->grad1, n) != DS_OK) {
            fprintf(stderr, "ds_get_grad: %s\n", ds_last_error());
            return 1;
        }
        memcpy(r->spy1, spy, n * sizeof(float));
    }
    if (ds_step(e) != DS_OK) {
        fprintf(stderr, "ds_step %d: %s\n", s + 1, ds_last_error());
        return 1;
    }
    ds_comm_report(e, &after);
    uint64_t ag = after.bytes_sent[DS_COLL_ALL_GATHER] - before.bytes_sent[DS_COLL_ALL_GATHER];
    uint64_t ar = after.bytes_sent[DS_COLL_ALL_REDUCE] - before.bytes_sent[DS_COLL_ALL_REDUCE];
    if (!sparse || o->stage != 0 || world < 2) return 0;
    /* The ring all-gather: a rank sends every block but its successor's.
     * Blocks: one int32 count each, then n_q records of (4 + row) bytes. */
    long total = 0, send_rows = 0;
    int succ = (rank + 1) % world;
    for (int q = 0; q < world; q++) {
        long n = user_rows(o->vocab, s, q, world, o->gas);
        total += n;
        if (q != succ) send_rows += n;
    }
    uint64_t rec = 4 + (uint64_t)EMB * 4; /* fp32 gradients here */
    uint64_t counts = 4 * (uint64_t)(world - 1);
    bool fallback = total > o->vocab; /* grad_sparse.h: rows together beyond the table's */
    uint64_t want_ag = counts + (fallback ? 0 : (uint64_t)send_rows * rec);
    if (ag != want_ag || (!fallback && ar != 0) || (fallback && ar == 0)) {
        printf("FAIL: step %d rank %d: all-gather %llu bytes (want %llu: %d counts + %ld rows "
               "of %llu), all-reduce %llu bytes (want %s); rows of all ranks %ld of %d\n",
               s + 1, rank, (unsigned long long)ag, (unsigned long long)want_ag, world - 1,
               fallback ? 0L : send_rows, (unsigned long long)rec, (unsigned long long)ar,
               fallback ? "the dense table" : "0", total, o->vocab);
        r->fails++;
    }
    return 0;
}

static int train(const opts *o, const ds_dataset *data, bool sparse, run *r) {
    engine_t *e;
    float *spy = NULL;
    int world = 0;
    {
        const char *np = getenv("OMPI_COMM_WORLD_SIZE");
        world = np ? atoi(np) : 1;
    }
    if (start(o, sparse, world, data, &spy, &e)) return 1;
    int rc = 0;
    uint64_t real[2], est[2];
    rc = ck_buffer_bytes(e, world, real, est);
    r->host_real = real[0], r->host_est = est[0];
    r->dev_real = real[1], r->dev_est = est[1];
    ds_comm_stats c0, c1;
    ds_comm_report(e, &c0);
    for (int i = 0; i < STEPS && rc == 0; i++) {
        ds_step_info info;
        if (!strcmp(o->model, "user")) {
            rc = user_step(o, e, sparse, i, spy, r);
            if (rc == 0 && ds_last_step_info(e, &info) != DS_OK) rc = 1;
        } else if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "sparse %d step %d: %s\n", sparse, i + 1, ds_last_error());
            rc = 1;
        }
        if (rc == 0) {
            r->loss[i] = info.loss;
            r->norm[i] = info.grad_norm;
        }
    }
    ds_comm_report(e, &c1);
    r->gathered = c1.bytes_sent[DS_COLL_ALL_GATHER] - c0.bytes_sent[DS_COLL_ALL_GATHER];
    r->reduced = c1.bytes_sent[DS_COLL_ALL_REDUCE] - c0.bytes_sent[DS_COLL_ALL_REDUCE] +
                 c1.bytes_sent[DS_COLL_REDUCE_SCATTER] - c0.bytes_sent[DS_COLL_REDUCE_SCATTER] +
                 c1.bytes_sent[DS_COLL_ALL_TO_ALL] - c0.bytes_sent[DS_COLL_ALL_TO_ALL]; /* qgZ */
    r->scattered = c1.bytes_sent[DS_COLL_REDUCE_SCATTER] - c0.bytes_sent[DS_COLL_REDUCE_SCATTER];
    r->allreduced = c1.bytes_sent[DS_COLL_ALL_REDUCE] - c0.bytes_sent[DS_COLL_ALL_REDUCE];
    r->weights = rc == 0 ? ck_params(e, &r->n_weights) : NULL;
    if (!r->weights) rc = 1;
    ds_finalize(e);
    free(spy);
    return rc;
}

/* ---------------------------------------------------- the checks ------ */

/* World > 2: the step-1 table gradient of one run against the exact sum of
 * the ranks' local gradients (from the spies, summed in double on a
 * communicator of our own). Any order of adding n fp32 terms is within
 * (n-1) u sum_i |g_i| of the exact sum (recursive summation, u = 2^-24);
 * ds_get_grad then divides by n in double and rounds once more (u of the
 * result). */
static int check_bound(const opts *o, const run *r, const char *which) {
    ds_comm *c;
    ds_comm_desc cd = {.kind = DS_COMM_MPI};
    if (ds_comm_create(&cd, &c) != DS_OK) {
        fprintf(stderr, "comm: %s\n", ds_last_error());
        return 1;
    }
    size_t n = (size_t)o->vocab * EMB;
    double *sum = malloc(2 * n * sizeof(double)), *abs_sum = sum + n;
    for (size_t k = 0; k < n; k++) {
        sum[k] = r->spy1[k];
        abs_sum[k] = fabs(r->spy1[k]);
    }
    int fails = 0, world = c->world;
    if (ds_comm_host_all_reduce(c, sum, 2 * n, DS_F64, DS_REDUCE_SUM) != DS_OK) {
        fprintf(stderr, "host sum: %s\n", ds_last_error());
        fails++;
    }
    const double u = ldexp(1.0, -24);
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t k = 0; k < n && !fails; k++) {
        double exact = sum[k] / world;
        double tol = ((world - 1) * u * abs_sum[k]) / world + u * fabs(exact);
        double err = fabs((double)r->grad1[k] - exact);
        if (tol > 0 && err / tol > worst) worst = err / tol;
        if (err > tol) {
            if (!bad) first = k;
            bad++;
        }
    }
    if (bad) {
        printf("FAIL: %s at %d ranks: %zu table gradient elements outside the summation bound "
               "(first %zu: %.9g vs exact %.9g)\n", which, world, bad, first,
               (double)r->grad1[first], sum[first] / world);
        fails++;
    } else if (c->rank == 0) {
        printf("%s at %d ranks: the table gradient within (n-1) u sum|g_i| of the exact sum "
               "(worst %.2f of the bound)\n", which, world, worst);
    }
    free(sum);
    ds_comm_destroy(c);
    return fails;
}

int main(int argc, char **argv) {
    opts o = {.stage = 0, .gas = 1, .vocab = 400, .model = "user", .precision = "fp32",
              .zero = "", .sparse_zero = "", .engine = ""};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stage")) o.stage = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model")) o.model = argv[i + 1];
        else if (!strcmp(argv[i], "--precision")) o.precision = argv[i + 1];
        else if (!strcmp(argv[i], "--gas")) o.gas = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab")) o.vocab = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--zero")) o.zero = argv[i + 1];
        else if (!strcmp(argv[i], "--sparse-zero")) o.sparse_zero = argv[i + 1];
        else if (!strcmp(argv[i], "--mics")) o.mics = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--band")) o.band = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--negzero")) o.negzero = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--engine")) o.engine = argv[i + 1];
        else {
            fprintf(stderr, "test_sparse_grads: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    bool user = !strcmp(o.model, "user");
    ds_dataset *data = user ? NULL : ck_make_data(MICRO * 4 * o.gas * STEPS, T_LEN, o.vocab);
    if (!user && !data) {
        fprintf(stderr, "data: %s\n", ds_last_error());
        return 1;
    }
    static run off, on;
    if (train(&o, data, false, &off) || train(&o, data, true, &on)) return 1;
    ds_dataset_destroy(data);
    int fails = off.fails + on.fails;
    const char *np = getenv("OMPI_COMM_WORLD_SIZE");
    int world = np ? atoi(np) : 1;
    /* the ranks one row's records are summed over: the shard group's, then (MiCS) the
     * replica groups' */
    int group = o.mics > 0 ? o.mics : world, replicas = world / group;
    bool exact = group <= 2 && replicas <= 2 && o.band == 0;
    if (o.band > 0) { /* the losses within the band (its reason: tests/overlap.cmake) */
        double worst;
        fails += ck_loss_band(off.loss, on.loss, STEPS, o.band, "sparse_gradients", &worst);
        ck_loss_summary(off.loss, on.loss, STEPS, o.band, "sparse", worst);
    }
    for (int i = 0; exact && i < STEPS; i++) {
        if (memcmp(&off.loss[i], &on.loss[i], sizeof(double)) ||
            memcmp(&off.norm[i], &on.norm[i], sizeof(double))) {
            printf("FAIL: step %d loss %.17g / norm %.17g (dense) vs %.17g / %.17g (sparse)\n",
                   i + 1, off.loss[i], off.norm[i], on.loss[i], on.norm[i]);
            fails++;
        }
    }
    size_t differ = 0;
    for (size_t k = 0; exact && k < off.n_weights; k++)
        differ += memcmp(&off.weights[k], &on.weights[k], sizeof(float)) != 0;
    if (differ) {
        printf("FAIL: %zu of %zu final weights differ between sparse off and on\n", differ,
               off.n_weights);
        fails++;
    }
    size_t n_table = (size_t)o.vocab * EMB, gdiff = 0, gfirst = 0, negz = 0;
    for (size_t k = 0; user && exact && k < n_table; k++) {
        negz += signbit(off.grad1[k]) && off.grad1[k] == 0.0f;
        if (memcmp(&off.grad1[k], &on.grad1[k], sizeof(float)) && gdiff++ == 0) gfirst = k;
    }
    if (gdiff) {
        printf("FAIL: %zu of %zu step-1 table gradient elements differ in their bits, the "
               "first row %zu column %zu: %g (dense) vs %g (sparse)\n", gdiff, n_table,
               gfirst / EMB, gfirst % EMB, (double)off.grad1[gfirst], (double)on.grad1[gfirst]);
        fails++;
    }
    if (o.negzero && exact && negz == 0) { /* else the rule went untested */
        printf("FAIL: --negzero: no -0.0 in the dense step-1 gradient (no row every rank "
               "touched?)\n");
        fails++;
    }
    if (user && !exact && o.band == 0)
        fails += check_bound(&o, &off, "dense") + check_bound(&o, &on, "sparse");
    if (!(on.loss[STEPS - 1] < on.loss[0])) {
        printf("FAIL: the loss did not fall (%.6f -> %.6f)\n", on.loss[0], on.loss[STEPS - 1]);
        fails++;
    }
    /* the buffers sparse_gradients adds, host and the backend's (records,
     * flags, plan), in the accountant and the estimate */
    bool has_table = strcmp(o.model, "tied") != 0 && world > 1; /* MiCS: group or replicas */
    const char *where[2] = {"host", "backend"};
    uint64_t add_real[2] = {on.host_real - off.host_real, on.dev_real - off.dev_real};
    uint64_t add_est[2] = {on.host_est - off.host_est, on.dev_est - off.dev_est};
    for (int k = 0; k < 2; k++)
        if (add_real[k] != add_est[k] || (has_table != (add_real[k] > 0))) {
            printf("FAIL: sparse_gradients added %llu %s bytes, the estimate %llu (expected "
                   "%s)\n", (unsigned long long)add_real[k], where[k],
                   (unsigned long long)add_est[k], has_table ? "the same, > 0" : "none");
            fails++;
        }
    if (!strcmp(o.model, "tied") && on.gathered != off.gathered) {
        printf("FAIL: the tied table was gathered as rows (%llu bytes vs %llu dense)\n",
               (unsigned long long)on.gathered, (unsigned long long)off.gathered);
        fails++;
    }
    /* qgZ in both runs: the pieces around the table still go quantized (all-to-all), not as
     * a full-precision reduce-scatter */
    if (strstr(o.zero, "zero_quantized_gradients\": true") && (on.scattered || off.scattered)) {
        printf("FAIL: qgZ sent %llu / %llu bytes of full-precision reduce-scatter (dense / "
               "sparse)\n", (unsigned long long)off.scattered, (unsigned long long)on.scattered);
        fails++;
    }
    /* MiCS with replicas: the user's table (its model's only parameter) crosses the replica
     * groups as rows too, so the sparse run all-reduces nothing: with the 400-row table no
     * step falls back (a partition's 200 rows against the under 100 its replicas send;
     * --vocab 24 falls back every step) */
    if (user && o.mics > 0 && world > o.mics && o.vocab >= 400 &&
        !(off.allreduced > 0 && on.allreduced == 0)) {
        printf("FAIL: MiCS across replicas: %llu / %llu bytes all-reduced (dense / sparse)\n",
               (unsigned long long)off.allreduced, (unsigned long long)on.allreduced);
        fails++;
    }
    if (!strcmp(o.model, "bert") && world > 1 &&
        !(on.gathered > off.gathered && on.reduced < off.reduced)) {
        printf("FAIL: bert word table not exchanged as rows: gathered %llu vs %llu, reduced "
               "%llu vs %llu bytes (sparse vs dense)\n", (unsigned long long)on.gathered,
               (unsigned long long)off.gathered, (unsigned long long)on.reduced,
               (unsigned long long)off.reduced);
        fails++;
    }
    printf("%s: %s stage %d %s gas %d vocab %d at %d ranks: loss %.6f -> %.6f; bytes sent per "
           "rank reduced %llu -> %llu, gathered %llu -> %llu (dense -> sparse)%s\n",
           fails ? "FAIL" : "ok", o.model, o.stage, o.precision, o.gas, o.vocab, world,
           on.loss[0], on.loss[STEPS - 1], (unsigned long long)off.reduced,
           (unsigned long long)on.reduced, (unsigned long long)off.gathered,
           (unsigned long long)on.gathered,
           exact ? (fails ? ", compared bit for bit" : ", bit-identical") : "");
    if (o.zero[0] || o.sparse_zero[0] || o.mics || o.engine[0])
        printf("  zero_optimization also {%s} (sparse run: {%s}), mics_shard_size %d, "
               "zero_engine {%s}\n", o.zero, o.sparse_zero, o.mics, o.engine);
    if (o.negzero && exact)
        printf("  --negzero: %zu step-1 gradient elements are -0.0 in both runs\n", negz);
    free(off.weights);
    free(on.weights);
    free(off.grad1);
    free(on.grad1);
    free(off.spy1);
    free(on.spy1);
    return fails != 0;
}
