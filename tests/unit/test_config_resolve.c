/* ds_config_resolve: DeepSpeed's batch rule in every combination at world
 * sizes 1, 2 and 4; "auto" filled from the trainer's hints (HF semantics)
 * or DeepSpeed's defaults; ds_config_to_json round-tripping through the
 * parser to the same settings; and every JSON file in configs/ resolving at 1, 2
 * and 4 ranks. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config.h"
#include "tests/unit/test_util.h"

/* Exact comparisons (CHECK_EQ_I / _D): resolve copies hints and defaults or
 * does integer arithmetic, so there is no rounding to allow for. */

static void quiet(void *user, const char *msg) {
    (void)user, (void)msg;
}

static void count_warning(void *user, const char *msg) {
    fprintf(stderr, "unexpected warning: %s\n", msg);
    (*(int *)user)++;
}

static ds_config_hints hints_world(int world) {
    ds_config_hints h;
    ds_config_hints_init(&h);
    h.world_size = world;
    h.world_source = "test (WORLD_SIZE)";
    return h;
}

/* Parse and resolve; on failure report and return a zeroed config. */
static ds_config resolve_ok(const char *json, const ds_config_hints *h, int line) {
    ds_config c;
    if (ds_config_parse_string(json, &c, quiet, NULL) != DS_OK ||
        ds_config_resolve(&c, h) != DS_OK) {
        test_fail_at(__FILE__, line, json, "failed at world %d: %s", h->world_size,
                     ds_last_error());
        memset(&c, 0, sizeof c);
    }
    return c;
}
#define RESOLVE_OK(json, h) resolve_ok((json), (h), __LINE__)

static void test_batch_rule(void) {
    static const int worlds[] = {1, 2, 4};
    for (int wi = 0; wi < 3; wi++) {
        int W = worlds[wi];
        ds_config_hints h = hints_world(W);
        char js[256];
        ds_config c;

        /* all three, consistent */
        snprintf(js, sizeof js,
                 "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": 4,"
                 " \"gradient_accumulation_steps\": 3}", 12 * W);
        c = RESOLVE_OK(js, &h);
        CHECK_EQ_I(c.train_batch_size, 12 * W);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 4);
        CHECK_EQ_I(c.gradient_accumulation_steps, 3);
        CHECK_EQ_I(c.world_size, W);
        CHECK_TRUE(strcmp(c.world_source, "test (WORLD_SIZE)") == 0);

        /* train_batch_size + micro -> accumulation */
        c = RESOLVE_OK("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", &h);
        CHECK_EQ_I(c.gradient_accumulation_steps, 8 / W);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 4);

        /* train_batch_size + accumulation -> micro */
        c = RESOLVE_OK("{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}", &h);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 16 / W);
        CHECK_EQ_I(c.gradient_accumulation_steps, 2);

        /* micro + accumulation -> train_batch_size */
        c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 3}", &h);
        CHECK_EQ_I(c.train_batch_size, 12 * W);

        /* train_batch_size alone: accumulation 1, micro = tbs / world (DeepSpeed) */
        c = RESOLVE_OK("{\"train_batch_size\": 32}", &h);
        CHECK_EQ_I(c.gradient_accumulation_steps, 1);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 32 / W);

        /* micro alone: accumulation 1, tbs = micro * world (DeepSpeed) */
        c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4}", &h);
        CHECK_EQ_I(c.gradient_accumulation_steps, 1);
        CHECK_EQ_I(c.train_batch_size, 4 * W);

        /* everything "auto" + the trainer's micro batch (HF's usual config) */
        ds_config_hints hm = h;
        hm.micro_batch = 6;
        c = RESOLVE_OK("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\","
                       " \"gradient_accumulation_steps\": \"auto\"}", &hm);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 6);
        CHECK_EQ_I(c.gradient_accumulation_steps, 1);
        CHECK_EQ_I(c.train_batch_size, 6 * W);
        CHECK_TRUE(c.micro_batch_auto && !c.micro_batch_set); /* provenance kept */

        /* micro "auto" from the hint, accumulation derived from train_batch_size */
        hm.micro_batch = 2;
        c = RESOLVE_OK("{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": \"auto\"}", &hm);
        CHECK_EQ_I(c.gradient_accumulation_steps, 8 / W);

        /* micro absent: the trainer's micro batch fills it like "auto" */
        c = RESOLVE_OK("{\"gradient_accumulation_steps\": 4}", &hm);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 2);
        CHECK_EQ_I(c.train_batch_size, 8 * W);

        /* a micro batch equal to the hint is fine */
        c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 2}", &hm);
        CHECK_EQ_I(c.train_batch_size, 2 * W);

        /* "auto" without a hint is "not given": the rule derives it */
        c = RESOLVE_OK("{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": \"auto\","
                       " \"gradient_accumulation_steps\": 2}", &h);
        CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 32 / W);
        c = RESOLVE_OK("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 4,"
                       " \"gradient_accumulation_steps\": \"auto\"}", &h);
        CHECK_EQ_I(c.train_batch_size, 4 * W);
        CHECK_EQ_I(c.gradient_accumulation_steps, 1);
    }
    /* A mismatch message has all four numbers and the world's source. */
    ds_config c;
    ds_config_hints h = hints_world(4);
    h.world_source = "Slurm (SLURM_NTASKS)";
    CHECK_TRUE(
        ds_config_parse_string("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4,"
                               " \"gradient_accumulation_steps\": 4}",
                               &c, quiet, NULL) == DS_OK);
    CHECK_TRUE(ds_config_resolve(&c, &h) == DS_ERR_CONFIG);
    CHECK_TRUE(strstr(ds_last_error(),
                      "train_batch_size 32 != train_micro_batch_size_per_gpu 4 * "
                      "gradient_accumulation_steps 4 * world_size 4 (world size from "
                      "Slurm (SLURM_NTASKS))"));
    /* Without world_source the message still says where the number came from. */
    h.world_source = NULL;
    CHECK_TRUE(ds_config_resolve(&c, &h) == DS_ERR_CONFIG);
    CHECK_TRUE(
        strstr(ds_last_error(), "(world size from the caller (ds_config_hints.world_size))"));
}

static void test_optimizer_auto(void) {
    ds_config_hints h = hints_world(1);
    const char *autos = "{\"train_batch_size\": 8, \"gradient_clipping\": \"auto\","
                        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\","
                        " \"betas\": \"auto\", \"eps\": \"auto\", \"weight_decay\": \"auto\"}}}";
    /* no hints: "auto" means the trainer's value, and there is none; the
     * error names the first such key and the hint to set */
    ds_config c, bad;
    CHECK_TRUE(ds_config_parse_string(autos, &bad, quiet, NULL) == DS_OK);
    CHECK_TRUE(ds_config_resolve(&bad, &h) == DS_ERR_CONFIG &&
               strstr(ds_last_error(), "optimizer.params.lr: \"auto\" needs the trainer's value "
                                       "and none was given: set hints.lr"));
    /* hints: the trainer's values */
    h.lr = 3e-4;
    h.beta1 = 0.8;
    h.beta2 = 0.95;
    h.eps = 1e-6;
    h.weight_decay = 0.05;
    h.gradient_clipping = 0.7;
    c = RESOLVE_OK(autos, &h);
    CHECK_EQ_D(c.lr, 3e-4);
    CHECK_EQ_D(c.betas[0], 0.8);
    CHECK_EQ_D(c.betas[1], 0.95);
    CHECK_EQ_D(c.eps, 1e-6);
    CHECK_EQ_D(c.weight_decay, 0.05);
    CHECK_EQ_D(c.gradient_clipping, 0.7);
    /* resolving twice gives the same config */
    ds_config again = c;
    CHECK_TRUE(ds_config_resolve(&again, &h) == DS_OK && memcmp(&again, &c, sizeof c) == 0);
    /* no optimizer section: the trainer's optimizer with the trainer's values */
    c = RESOLVE_OK("{\"train_batch_size\": 8}", &h);
    CHECK_TRUE(!c.optimizer_set && c.optimizer == DS_OPTIM_ADAMW);
    CHECK_EQ_I(c.scheduler, DS_SCHED_NONE); /* no lr_scheduler_type: constant, as DeepSpeed */
    CHECK_EQ_D(c.lr, 3e-4);
    CHECK_EQ_D(c.weight_decay, 0.05);
    CHECK_EQ_D(c.gradient_clipping, 1.0); /* a top-level key: absent means DeepSpeed's 1.0 */
    /* numbers that agree with the hints are fine */
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"gradient_clipping\": 0.7, \"optimizer\": {"
                   "\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4, \"betas\": [0.8, 0.95]}}}", &h);
    CHECK_EQ_D(c.lr, 3e-4);
    /* an absent key inside a present section keeps DeepSpeed's default (HF) */
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\","
                   " \"params\": {\"lr\": 3e-4}}}", &h);
    CHECK_EQ_D(c.eps, 1e-8);
    /* a disagreeing gradient_clipping and beta are errors naming both values */
    CHECK_TRUE(ds_config_parse_string("{\"train_batch_size\": 8, \"gradient_clipping\": 1.0}", &bad,
                                      quiet, NULL) == DS_OK);
    CHECK_TRUE(ds_config_resolve(&bad, &h) == DS_ERR_CONFIG &&
               strstr(ds_last_error(),
                      "gradient_clipping: the config says 1 but the trainer's value "
                      "(hints.gradient_clipping) is 0.7"));
    CHECK_TRUE(
        ds_config_parse_string("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\","
                               " \"params\": {\"betas\": [0.9, 0.95]}}}",
                               &bad, quiet, NULL) == DS_OK);
    CHECK_TRUE(ds_config_resolve(&bad, &h) == DS_ERR_CONFIG &&
               strstr(ds_last_error(), "optimizer.params.betas[0]: the config says 0.9 but the "
                                       "trainer's value (hints.beta1) is 0.8"));
    /* a hint out of range is reported against the key it fills */
    ds_config_hints hb = h;
    hb.beta2 = 1.0;
    CHECK_TRUE(ds_config_parse_string(autos, &bad, quiet, NULL) == DS_OK);
    CHECK_TRUE(ds_config_resolve(&bad, &hb) == DS_ERR_CONFIG &&
               strstr(ds_last_error(),
                      "optimizer.params.betas[1]: must be in [0, 1), got 1 (from hints.beta2)"));
}

static void test_scheduler_auto(void) {
    ds_config_hints h = hints_world(1);
    const char *decay = "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\":"
                        " {\"lr\": 2e-4}}, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\":"
                        " {\"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\","
                        " \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}}}";
    h.total_num_steps = 5000;
    /* warmup_num_steps "auto" without a warmup hint: the error names it */
    ds_config bad;
    CHECK_TRUE(ds_config_parse_string(decay, &bad, quiet, NULL) == DS_OK);
    CHECK_TRUE(ds_config_resolve(&bad, &h) == DS_ERR_CONFIG &&
               strstr(ds_last_error(), "scheduler.params.warmup_num_steps: \"auto\" needs the "
                                       "trainer's value and none was given: set "
                                       "hints.warmup_num_steps"));
    h.warmup_num_steps = 300;
    ds_config c = RESOLVE_OK(decay, &h);
    CHECK_EQ_D(c.warmup_min_lr, 0.0);
    CHECK_EQ_D(c.warmup_max_lr, 2e-4);     /* no lr hint: the optimizer's lr */
    CHECK_EQ_I(c.warmup_num_steps, 300);
    CHECK_EQ_I(c.total_num_steps, 5000);
    h.lr = 2e-4;
    c = RESOLVE_OK(decay, &h);
    CHECK_EQ_D(c.warmup_max_lr, 2e-4);
    /* a warmup hint of 0 (HF's default warmup_steps) fills 1, the least
     * DeepSpeed takes; its schedules warm up over max(2, W) steps anyway */
    h.warmup_num_steps = 0;
    c = RESOLVE_OK(decay, &h);
    CHECK_EQ_I(c.warmup_num_steps, 1);

    /* warmup_max_lr absent: WarmupLR takes the optimizer lr (DeepSpeed's
     * warmup_max_lr=None), WarmupDecayLR keeps DeepSpeed's 0.001. */
    ds_config_hints h1 = hints_world(1);
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"SGD\", \"params\":"
                   " {\"lr\": 0.05}}, \"scheduler\": {\"type\": \"WarmupLR\"}}", &h1);
    CHECK_EQ_D(c.warmup_max_lr, 0.05);
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"SGD\", \"params\":"
                   " {\"lr\": 0.05}}, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\":"
                   " {\"total_num_steps\": 10}}}", &h1);
    CHECK_EQ_D(c.warmup_max_lr, 0.001);
    /* the cosine schedule takes total_num_steps "auto" from the hint too */
    h1.total_num_steps = 77;
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\","
                   " \"params\": {\"total_num_steps\": \"auto\"}}}", &h1);
    CHECK_EQ_I(c.total_num_steps, 77);
    /* WarmupLR has no total: a hint for it is simply not used */
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\"}}", &h1);
    CHECK_EQ_I(c.total_num_steps, 0);

    /* ... or from the run's length: 1000 rows at 4 ranks (250 each), micro
     * batch 8 (32 micro-batches, the last one short), 2 accumulation steps:
     * 16 steps an epoch, 2.5 epochs -> 40 */
    ds_config_hints h4 = hints_world(4);
    h4.epochs = 2.5;
    h4.train_rows = 1000;
    const char *cos = "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 2,"
                      " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\":"
                      " {\"total_num_steps\": \"auto\"}}}";
    c = RESOLVE_OK(cos, &h4);
    CHECK_EQ_I(c.total_num_steps, 40);
    /* 1003 rows: 251 a rank (rounded up, as without dataloader_drop_last),
     * still 32 micro-batches and 16 steps: the same 40 */
    h4.train_rows = 1003;
    c = RESOLVE_OK(cos, &h4);
    CHECK_EQ_I(c.total_num_steps, 40);
    /* 3 accumulation steps: 32 micro-batches are 10 full windows and one of
     * 2, which ds_train_batch trains as an 11th step (an epoch is every row
     * once): 11 steps an epoch, 2.5 epochs -> ceil(27.5) = 28 */
    const char *cos3 = "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 3,"
                       " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\":"
                       " {\"total_num_steps\": \"auto\"}}}";
    c = RESOLVE_OK(cos3, &h4);
    CHECK_EQ_I(c.total_num_steps, 28);
    /* dataloader_drop_last is DeepSpeed's DataLoader's: 1003 rows are 251 a
     * rank either way (the sampler pads), 31 whole micro-batches of 8 and a
     * short one dropped: 16 steps an epoch (ceil(31 / 2)), 2.5 epochs -> 40;
     * at 1000 rows 250 a rank, 31 whole and one of 2 dropped, the same. At
     * world 1, 44 rows at micro 7: 7 micro-batches, 6 with drop_last (the
     * run of DeepSpeed's own loader, len(sampler) // batch_size) */
    const char *cosd = "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 2,"
                       " \"dataloader_drop_last\": true, \"scheduler\": {\"type\": \"WarmupCosineLR\","
                       " \"params\": {\"total_num_steps\": \"auto\"}}}";
    c = RESOLVE_OK(cosd, &h4);
    CHECK_EQ_I(c.total_num_steps, 40);
    CHECK_EQ_I(ds_config_micro_batches_per_epoch(&c, 1003), 31);
    ds_config one = c;
    one.world_size = 1;
    one.train_micro_batch_size_per_gpu = 7;
    one.gradient_accumulation_steps = 1;
    CHECK_EQ_I(ds_config_steps_per_epoch(&one, 44), 6);
    CHECK_EQ_I(ds_config_rank_rows_per_epoch(&one, 44), 42); /* 6 whole micro-batches of 7 */
    one.dataloader_drop_last = false;
    CHECK_EQ_I(ds_config_steps_per_epoch(&one, 44), 7);
    CHECK_EQ_I(ds_config_rank_rows_per_epoch(&one, 44), 44);
    /* a direct hint wins over the epochs */
    h4.total_num_steps = 9;
    c = RESOLVE_OK(cos, &h4);
    CHECK_EQ_I(c.total_num_steps, 9);
    /* fewer rows than one step: at least one step an epoch */
    h4.total_num_steps = -1;
    h4.train_rows = 4;
    h4.epochs = 3;
    c = RESOLVE_OK(cos, &h4);
    CHECK_EQ_I(c.total_num_steps, 3);
}

static void test_precision_and_sizes_auto(void) {
    ds_config_hints h = hints_world(2);
    ds_config c = RESOLVE_OK("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": \"auto\"},"
                             " \"bf16\": {\"enabled\": \"auto\"}}", &h);
    CHECK_TRUE(!c.fp16_enabled && !c.bf16_enabled);
    /* one explicit, the other "auto": no conflict */
    c = RESOLVE_OK("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true},"
                   " \"bf16\": {\"enabled\": \"auto\"}}", &h);
    CHECK_TRUE(c.fp16_enabled && !c.bf16_enabled);

    const char *z3 = "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3,"
                     " \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\","
                     " \"stage3_param_persistence_threshold\": \"auto\"}}";
    c = RESOLVE_OK(z3, &h); /* hidden size unknown: DeepSpeed's defaults */
    CHECK_EQ_I(c.reduce_bucket_size, 500000000);
    CHECK_EQ_I(c.stage3_prefetch_bucket_size, 50000000);
    CHECK_EQ_I(c.stage3_param_persistence_threshold, 100000);
    h.hidden_size = 768; /* HF: hidden^2, int(0.9 * hidden * hidden), 10 * hidden */
    c = RESOLVE_OK(z3, &h);
    CHECK_EQ_I(c.reduce_bucket_size, 589824);
    CHECK_EQ_I(c.stage3_prefetch_bucket_size, 530841);
    CHECK_EQ_I(c.stage3_param_persistence_threshold, 7680);
    CHECK_TRUE(c.overlap_comm); /* stage 3 default */
}

/* Settings only: provenance (which keys were "auto" or written, the file
 * name) legitimately differs between a config and its printed form. */
static void clear_provenance(ds_config *c) {
    memset(c->path, 0, sizeof c->path);
    c->train_batch_size_auto = c->micro_batch_auto = c->grad_accum_auto = false;
    c->train_batch_size_set = c->micro_batch_set = c->grad_accum_set = false;
    c->gradient_clipping_auto = false;
    c->lr_auto = c->betas_auto = c->eps_auto = c->weight_decay_auto = false;
    c->lr_set = c->betas_set = c->eps_set = c->weight_decay_set = c->gradient_clipping_set = false;
    c->warmup_min_lr_auto = c->warmup_max_lr_auto = false;
    c->warmup_num_steps_auto = c->total_num_steps_auto = false;
    c->warmup_max_lr_set = c->warmup_num_steps_set = c->total_num_steps_set = false;
    c->fp16_enabled_auto = c->bf16_enabled_auto = false;
    c->overlap_comm_set = false;
    c->reduce_bucket_size_auto = c->prefetch_bucket_size_auto = c->persistence_threshold_auto = false;
    /* the printed form writes every section and key the run uses */
    c->optimizer_set = c->scheduler_set = false;
    c->warmup_min_lr_set = c->fp16_enabled_set = c->bf16_enabled_set = false;
    c->reduce_bucket_size_set = c->prefetch_bucket_size_set = c->persistence_threshold_set = false;
    memset(c->origin, 0, sizeof c->origin);
}

/* to_json -> parse -> resolve gives the same settings, and printing again
 * gives the same text. */
static void check_round_trip(const ds_config *resolved, const ds_config_hints *h, const char *what) {
    char *js = ds_config_to_json(resolved);
    CHECK_TRUE(js != NULL);
    if (!js) return;
    /* No HF placeholder survives resolution (zero_engine.backend "auto" is
     * a real value of that key, not a placeholder; the tests here use cpu). */
    if (strstr(js, "\"auto\"")) {
        TEST_FAIL("%s: to_json still has \"auto\":\n%s", what, js);
    }
    ds_config back;
    if (ds_config_parse_string(js, &back, quiet, NULL) != DS_OK ||
        ds_config_resolve(&back, h) != DS_OK) {
        TEST_FAIL("%s: printed config does not read back: %s\n%s", what, ds_last_error(), js);
        free(js);
        return;
    }
    ds_config a = *resolved;
    clear_provenance(&a);
    clear_provenance(&back);
    if (memcmp(&a, &back, sizeof a) != 0) {
        char *js2 = ds_config_to_json(&back);
        TEST_FAIL("%s: round trip changed the config\nfirst:\n%s\nsecond:\n%s", what, js,
                  js2 ? js2 : "(null)");
        free(js2);
    }
    char *js2 = ds_config_to_json(&back);
    CHECK_TRUE(js2 && strcmp(js, js2) == 0);
    free(js2);
    free(js);
}

static void test_round_trip(void) {
    ds_config_hints h = hints_world(2);
    h.total_num_steps = 400;
    h.hidden_size = 64;
    h.micro_batch = 4;
    h.lr = 7e-4;
    static const char *const cases[] = {
        "{}",
        "{\"train_batch_size\": 32}",
        "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false, \"lr\": \"auto\","
        " \"betas\": [0.85, 0.975], \"eps\": 1e-7, \"weight_decay\": 0.1, \"bias_correction\": false}},"
        " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 1e-6,"
        " \"warmup_num_steps\": 17, \"warmup_type\": \"linear\", \"last_batch_iteration\": 5}}}",
        "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": \"auto\", \"momentum\": 0.9,"
        " \"dampening\": 0.1, \"weight_decay\": 1e-5}}, \"scheduler\": {\"type\": \"WarmupCosineLR\","
        " \"params\": {\"total_num_steps\": \"auto\", \"warmup_min_ratio\": 0.05,"
        " \"cos_min_ratio\": 0.001, \"warmup_num_steps\": 30}}}",
        "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\","
        " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": 0.3,"
        " \"steps_per_print\": 7, \"wall_clock_breakdown\": true, \"dataloader_drop_last\": true,"
        " \"prescale_gradients\": true, \"gradient_predivide_factor\": 3.5,"
        " \"fp16\": {\"enabled\": true, \"auto_cast\": true, \"loss_scale\": 0.5,"
        " \"initial_scale_power\": 9, \"loss_scale_window\": 77, \"hysteresis\": 5,"
        " \"consecutive_hysteresis\": true, \"min_loss_scale\": 0.25}, \"bf16\": {\"enabled\": \"auto\"},"
        " \"communication_data_type\": \"fp16\","
        " \"zero_optimization\": {\"stage\": 3, \"allgather_partitions\": false,"
        " \"allgather_bucket_size\": 3e6, \"reduce_scatter\": false, \"reduce_bucket_size\": \"auto\","
        " \"contiguous_gradients\": false, \"stage3_prefetch_bucket_size\": \"auto\","
        " \"stage3_param_persistence_threshold\": \"auto\", \"stage3_max_live_parameters\": 123,"
        " \"stage3_max_reuse_distance\": 456, \"stage3_gather_16bit_weights_on_model_save\": true,"
        " \"sub_group_size\": 789, \"round_robin_gradients\": true,"
        " \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true,"
        " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/nv\\\"me\", \"buffer_count\": 8,"
        " \"pin_memory\": true, \"ratio\": 0.3, \"pipeline_read\": true, \"fast_init\": true},"
        " \"offload_param\": {\"device\": \"cpu\", \"nvme_path\": null, \"buffer_count\": 9,"
        " \"buffer_size\": 1e7, \"max_in_cpu\": 2e8, \"pin_memory\": true}},"
        " \"activation_checkpointing\": {\"partition_activations\": true, \"cpu_checkpointing\": true,"
        " \"contiguous_memory_optimization\": true, \"number_checkpoints\": 4,"
        " \"synchronize_checkpoint_boundary\": true, \"profile\": true},"
        " \"checkpoint\": {\"tag_validation\": \"Ignore\"},"
        " \"aio\": {\"block_size\": 65536, \"queue_depth\": 3, \"thread_count\": 2,"
        " \"single_submit\": true, \"overlap_events\": false},"
        " \"zero_engine\": {\"backend\": \"cuda\", \"comm_timeout_s\": 45.25, \"num_threads\": 3}}",
        /* found by tests/fuzz/fuzz_config (issue 15): -0.0 was printed "-0",
         * which reads back as the integer 0 */
        "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\","
        " \"betas\": [0.9, -0.0], \"weight_decay\": -0.0}}, \"gradient_clipping\": -0.0}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_config c = RESOLVE_OK(cases[i], &h);
        char what[32];
        snprintf(what, sizeof what, "round-trip case %zu", i);
        check_round_trip(&c, &h, what);
    }
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void test_shipped_configs(void) {
    char dirname[512];
    snprintf(dirname, sizeof dirname, "%s/configs", DS_SOURCE_DIR);
    DIR *d = opendir(dirname);
    CHECK_TRUE(d != NULL);
    if (!d) return;
    int nfiles = 0, seen_required = 0;
    static const char *const required[] = {"ds_config.json", "zero0.json", "zero1.json",
                                           "zero2.json", "zero3.json", "fp16.json",
                                           "bf16.json", "offload.json", "hf_zero2.json"};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!ends_with(e->d_name, ".json")) continue;
        nfiles++;
        for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
            if (strcmp(e->d_name, required[i]) == 0) seen_required++;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dirname, e->d_name);
        static const int worlds[] = {1, 2, 4};
        for (int wi = 0; wi < 3; wi++) {
            /* What a trainer always knows: the world and the step count,
             * and HF's defaults for what its user left out (they fill
             * "auto", as hf_zero2.json's, and never override a number). */
            ds_config_hints h;
            ds_config_hints_hf_defaults(&h);
            h.world_size = worlds[wi];
            h.world_source = "test (WORLD_SIZE)";
            h.total_num_steps = 1000;
            h.micro_batch = 8;
            h.is_default[DS_HINT_MICRO_BATCH] = true;
            ds_config c;
            int warnings = 0;
            if (ds_config_parse_file(path, &c, count_warning, &warnings) != DS_OK ||
                ds_config_resolve(&c, &h) != DS_OK) {
                TEST_FAIL("%s at world %d: %s", path, worlds[wi], ds_last_error());
                continue;
            }
            CHECK_EQ_I(warnings, 0); /* the shipped examples use only known keys */
            CHECK_EQ_I(c.train_batch_size, c.train_micro_batch_size_per_gpu *
                                               c.gradient_accumulation_steps * worlds[wi]);
            check_round_trip(&c, &h, path);
            if (strcmp(e->d_name, "ds_config.json") == 0) {
                /* the quickstart's settings */
                CHECK_EQ_I(c.zero_stage, 0);
                CHECK_TRUE(c.optimizer_set && c.optimizer == DS_OPTIM_ADAMW);
                CHECK_EQ_D(c.lr, 5e-4);
                CHECK_EQ_D(c.weight_decay, 0.01);
                CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_DECAY_LR);
                CHECK_EQ_I(c.warmup_num_steps, 100);
                CHECK_EQ_I(c.total_num_steps, 1000);
                CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 16);
                CHECK_EQ_D(c.gradient_clipping, 1.0);
                CHECK_EQ_I(c.steps_per_print, 10);
            } else if (strcmp(e->d_name, "hf_zero2.json") == 0) {
                /* HF's template: every trainer value "auto" */
                CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 8);
                CHECK_EQ_I(c.gradient_accumulation_steps, 1);
                CHECK_EQ_D(c.gradient_clipping, 1.0);
                CHECK_EQ_D(c.lr, 5e-5);
                CHECK_EQ_D(c.warmup_max_lr, 5e-5);
                CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_LR);
                CHECK_TRUE(c.zero_stage == 2 && c.offload_optimizer.device == DS_OFFLOAD_CPU);
                CHECK_TRUE(!c.fp16_enabled && !c.bf16_enabled);
            } else if (strcmp(e->d_name, "fp16.json") == 0) {
                CHECK_TRUE(c.fp16_enabled && c.loss_scale == 0.0 && c.zero_stage == 2);
            } else if (strcmp(e->d_name, "offload.json") == 0) {
                CHECK_TRUE(c.zero_stage == 2 && c.offload_optimizer.device == DS_OFFLOAD_CPU &&
                           c.offload_optimizer.pin_memory);
            } else if (strcmp(e->d_name, "bf16.json") == 0) {
                CHECK_TRUE(c.bf16_enabled && !c.fp16_enabled && c.zero_stage == 2);
            } else if (strncmp(e->d_name, "zero", 4) == 0 && e->d_name[4] >= '0' &&
                       e->d_name[4] <= '3' && e->d_name[5] == '.') {
                CHECK_EQ_I(c.zero_stage, e->d_name[4] - '0');
            }
        }
    }
    closedir(d);
    CHECK_EQ_I(seen_required, (int)(sizeof required / sizeof required[0]));
    printf("configs/: %d files resolved at world 1, 2, 4\n", nfiles);
}

/* zero_engine.comm "auto" becomes the data path the backend needs; "nccl"
 * on the cpu backend is refused naming the key. */
static void test_comm_auto(void) {
    ds_config_hints h1 = hints_world(1), h2 = hints_world(2);
    static const struct {
        const char *backend;
        int world;
        const char *comm;
    } cases[] = {{"cpu", 1, "mpi"}, {"cpu", 2, "mpi"},    {"cuda", 1, "mpi"},
                 {"cuda", 2, "nccl"}, {"auto", 2, "auto"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char js[160];
        snprintf(js, sizeof js,
                 "{\"train_batch_size\": 8, \"zero_engine\": {\"backend\": \"%s\"}}",
                 cases[i].backend);
        ds_config c = RESOLVE_OK(js, cases[i].world == 1 ? &h1 : &h2);
        CHECK(strcmp(c.comm, cases[i].comm) == 0, "backend %s at %d ranks: comm %s, want %s",
              cases[i].backend, cases[i].world, c.comm, cases[i].comm);
    }
    ds_config c = RESOLVE_OK("{\"train_batch_size\": 8, \"zero_engine\": {\"backend\": \"cuda\","
                             " \"comm\": \"mpi\"}}", &h2);
    CHECK(strcmp(c.comm, "mpi") == 0, "a written comm is kept: %s", c.comm);
    ds_config bad;
    CHECK_TRUE(ds_config_parse_string("{\"train_batch_size\": 8, \"zero_engine\": "
                                      "{\"comm\": \"nccl\"}}", &bad, quiet, NULL) == DS_OK);
    CHECK(ds_config_resolve(&bad, &h2) == DS_ERR_CONFIG &&
              strstr(ds_last_error(), "zero_engine.comm: \"nccl\" needs the cuda backend"),
          "nccl on cpu: %s", ds_last_error());
}

/* zero_hpz_partition_size past the world is the world, as DeepSpeed's
 * secondary group (min of the two): a config written for 8-rank hosts runs
 * on 2 ranks; within it, it stays */
static void test_hpz_capped(void) {
    ds_config_hints h2 = hints_world(2), h4 = hints_world(4);
    const char *js = "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                     "\"zero_hpz_partition_size\": 8}}";
    ds_config c = RESOLVE_OK(js, &h2);
    CHECK_EQ_I(c.zero_hpz_partition_size, 2);
    js = "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
         "\"zero_hpz_partition_size\": 2}}";
    c = RESOLVE_OK(js, &h4);
    CHECK_EQ_I(c.zero_hpz_partition_size, 2);
}

int main(void) {
    test_batch_rule();
    test_hpz_capped();
    test_comm_auto();
    test_optimizer_auto();
    test_scheduler_auto();
    test_precision_and_sizes_auto();
    test_round_trip();
    test_shipped_configs();
    return test_finish("test_config_resolve");
}
