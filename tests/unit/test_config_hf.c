/* ds_config_resolve as Hugging Face's Trainer integration fills a DeepSpeed
 * config (transformers/integrations/deepspeed.py): HF's ds_config_zero2 and
 * _zero3 templates, every key "auto", resolved through hints key by key
 * with each value's origin; "auto" without a hint failing with the key and
 * the hint to set; hints marked as a trainer's defaults filling "auto" but
 * never checked against numbers; missing optimizer / scheduler sections
 * filled as HF's Trainer builds them (AdamW, lr_scheduler_type) or left as
 * DeepSpeed has them when nothing is given; and ds_config_summary, the
 * start-up print. All comparisons are exact: resolution copies hints and
 * does integer arithmetic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config.h"
#include "tests/unit/test_util.h"

static void quiet(void *user, const char *msg) {
    (void)user, (void)msg;
}

/* HF's docs' ds_config_zero2.json: everything the Trainer knows is "auto". */
static const char k_zero2[] =
    "{\"fp16\": {\"enabled\": \"auto\", \"loss_scale\": 0, \"loss_scale_window\": 1000,"
    "  \"initial_scale_power\": 16, \"hysteresis\": 2, \"min_loss_scale\": 1},"
    " \"bf16\": {\"enabled\": \"auto\"},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\","
    "  \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
    " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": \"auto\","
    "  \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\"}},"
    " \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\","
    "  \"pin_memory\": true}, \"allgather_partitions\": true, \"allgather_bucket_size\": 2e8,"
    "  \"overlap_comm\": true, \"reduce_scatter\": true, \"reduce_bucket_size\": 2e8,"
    "  \"contiguous_gradients\": true},"
    " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
    " \"steps_per_print\": 2000, \"train_batch_size\": \"auto\","
    " \"train_micro_batch_size_per_gpu\": \"auto\", \"wall_clock_breakdown\": false}";

/* ... and ds_config_zero3.json's shape: WarmupDecayLR with total_num_steps
 * "auto" and the hidden-size keys. */
static const char k_zero3[] =
    "{\"bf16\": {\"enabled\": \"auto\"},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\","
    "  \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
    " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": \"auto\","
    "  \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}},"
    " \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"contiguous_gradients\": true,"
    "  \"sub_group_size\": 1e9, \"reduce_bucket_size\": \"auto\","
    "  \"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\","
    "  \"stage3_max_live_parameters\": 1e9, \"stage3_max_reuse_distance\": 1e9,"
    "  \"stage3_gather_16bit_weights_on_model_save\": true},"
    " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
    " \"steps_per_print\": 2000, \"train_batch_size\": \"auto\","
    " \"train_micro_batch_size_per_gpu\": \"auto\", \"wall_clock_breakdown\": false}";

/* A trainer's hints: HF's defaults, the flags' names, and what the user gave. */
static ds_config_hints trainer(int world) {
    ds_config_hints h;
    ds_config_hints_hf_defaults(&h);
    h.world_size = world;
    h.world_source = "test";
    static const char *const names[DS_HINT_COUNT] = {
        "--lr", "--weight-decay", "--adam-beta1", "--adam-beta2", "--adam-epsilon",
        "--max-grad-norm", "--batch", "--grad-accum", "--warmup", "--max-steps", "--epochs",
        "--lr-scheduler-type", "--fp16", "--bf16"};
    for (int i = 0; i < DS_HINT_COUNT; i++) h.name[i] = names[i];
    return h;
}

static ds_status parse_resolve(const char *json, const ds_config_hints *h, ds_config *c) {
    ds_status st = ds_config_parse_string(json, c, quiet, NULL);
    return st != DS_OK ? st : ds_config_resolve(c, h);
}

static ds_config resolve_ok(const char *json, const ds_config_hints *h, int line) {
    ds_config c;
    if (parse_resolve(json, h, &c) != DS_OK) {
        test_fail_at(__FILE__, line, json, "%s", ds_last_error());
        memset(&c, 0, sizeof c);
    }
    return c;
}
#define RESOLVE_OK(json, h) resolve_ok((json), (h), __LINE__)

/* The resolve fails with `st` and a message holding `want`. */
static void fails_with(const char *json, const ds_config_hints *h, ds_status st,
                       const char *want, int line) {
    ds_config c;
    ds_status got = parse_resolve(json, h, &c);
    if (got != st || !strstr(ds_last_error(), want))
        test_fail_at(__FILE__, line, json, "got %s \"%s\", want %s with \"%s\"",
                     ds_status_to_string(got), ds_last_error(), ds_status_to_string(st), want);
}
#define FAILS_WITH(json, h, st, want) fails_with((json), (h), (st), (want), __LINE__)

static void origin_is(const ds_config *c, ds_config_key k, ds_config_source s, const char *from,
                      int line) {
    const ds_config_origin *o = &c->origin[k];
    if (!o->used || o->source != s || (from && strcmp(o->from, from) != 0))
        test_fail_at(__FILE__, line, ds_config_key_name(k),
                     "origin %s%s \"%s\", want %s \"%s\"", o->used ? "" : "(unused) ",
                     ds_config_source_name(o->source), o->from, ds_config_source_name(s),
                     from ? from : "(any)");
}
#define ORIGIN(c, k, s, from) origin_is(&(c), (k), (s), (from), __LINE__)

static void test_zero2_template(void) {
    ds_config_hints h = trainer(2);
    h.micro_batch = 8; /* --batch 8, the user's */
    h.is_default[DS_HINT_MICRO_BATCH] = false;
    ds_config c = RESOLVE_OK(k_zero2, &h);
    /* the batch: micro from --batch, accumulation 1, train_batch_size 8 x 1 x 2 */
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 8);
    CHECK_EQ_I(c.gradient_accumulation_steps, 1);
    CHECK_EQ_I(c.train_batch_size, 16);
    ORIGIN(c, DS_KEY_MICRO_BATCH, DS_SRC_HINT, "--batch");
    ORIGIN(c, DS_KEY_GRAD_ACCUM, DS_SRC_COMPUTED, NULL);
    ORIGIN(c, DS_KEY_TRAIN_BATCH_SIZE, DS_SRC_COMPUTED, "micro 8 x accumulation 1 x world 2");
    /* HF's TrainingArguments defaults, marked as the trainer's */
    CHECK_EQ_D(c.gradient_clipping, 1.0);
    CHECK_EQ_D(c.lr, 5e-5);
    CHECK_EQ_D(c.betas[0], 0.9);
    CHECK_EQ_D(c.betas[1], 0.999);
    CHECK_EQ_D(c.eps, 1e-8);
    CHECK_EQ_D(c.weight_decay, 0.0);
    ORIGIN(c, DS_KEY_GRADIENT_CLIPPING, DS_SRC_HINT_DEFAULT, "--max-grad-norm");
    ORIGIN(c, DS_KEY_LR, DS_SRC_HINT_DEFAULT, "--lr");
    ORIGIN(c, DS_KEY_BETAS, DS_SRC_HINT_DEFAULT, "--adam-beta1/2");
    ORIGIN(c, DS_KEY_EPS, DS_SRC_HINT_DEFAULT, "--adam-epsilon");
    ORIGIN(c, DS_KEY_WEIGHT_DECAY, DS_SRC_HINT_DEFAULT, "--weight-decay");
    ORIGIN(c, DS_KEY_OPTIMIZER, DS_SRC_CONFIG, "");
    /* WarmupLR: min 0 (HF's fill), max the lr, warmup 0 -> 1 */
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_LR);
    CHECK_EQ_D(c.warmup_min_lr, 0.0);
    CHECK_EQ_D(c.warmup_max_lr, 5e-5);
    CHECK_EQ_I(c.warmup_num_steps, 1);
    ORIGIN(c, DS_KEY_WARMUP_MIN_LR, DS_SRC_COMPUTED, NULL);
    ORIGIN(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_HINT_DEFAULT, "--lr");
    ORIGIN(c, DS_KEY_WARMUP_NUM_STEPS, DS_SRC_HINT_DEFAULT, "--warmup 0, raised to DeepSpeed's least");
    CHECK_TRUE(!c.origin[DS_KEY_TOTAL_NUM_STEPS].used); /* WarmupLR has none */
    /* precision "auto": the trainer's --fp16 / --bf16, off */
    CHECK_TRUE(!c.fp16_enabled && !c.bf16_enabled);
    ORIGIN(c, DS_KEY_FP16, DS_SRC_HINT_DEFAULT, "--fp16");
    ORIGIN(c, DS_KEY_BF16, DS_SRC_HINT_DEFAULT, "--bf16");
    /* written numbers stay, marked as the config's */
    CHECK_EQ_I(c.reduce_bucket_size, 200000000);
    ORIGIN(c, DS_KEY_REDUCE_BUCKET_SIZE, DS_SRC_CONFIG, "");
    CHECK_TRUE(c.offload_optimizer.device == DS_OFFLOAD_CPU && c.zero_stage == 2);

    /* flags the user gave take the place of the defaults and say so */
    h.lr = 3e-4;
    h.is_default[DS_HINT_LR] = false;
    h.gradient_clipping = 0.5;
    h.is_default[DS_HINT_GRADIENT_CLIPPING] = false;
    h.warmup_num_steps = 20;
    h.is_default[DS_HINT_WARMUP] = false;
    h.bf16 = 1;
    h.is_default[DS_HINT_BF16] = false;
    c = RESOLVE_OK(k_zero2, &h);
    CHECK_EQ_D(c.lr, 3e-4);
    CHECK_EQ_D(c.warmup_max_lr, 3e-4);
    CHECK_EQ_D(c.gradient_clipping, 0.5);
    CHECK_EQ_I(c.warmup_num_steps, 20);
    CHECK_TRUE(c.bf16_enabled && !c.fp16_enabled);
    ORIGIN(c, DS_KEY_LR, DS_SRC_HINT, "--lr");
    ORIGIN(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_HINT, "--lr");
    ORIGIN(c, DS_KEY_GRADIENT_CLIPPING, DS_SRC_HINT, "--max-grad-norm");
    ORIGIN(c, DS_KEY_WARMUP_NUM_STEPS, DS_SRC_HINT, "--warmup");
    ORIGIN(c, DS_KEY_BF16, DS_SRC_HINT, "--bf16");
    /* one beta given, the other the default: both named */
    h.beta2 = 0.95;
    h.is_default[DS_HINT_BETA2] = false;
    c = RESOLVE_OK(k_zero2, &h);
    CHECK_EQ_D(c.betas[1], 0.95);
    ORIGIN(c, DS_KEY_BETAS, DS_SRC_HINT, "--adam-beta1/2");
    /* names that do not share a stem are both given in full */
    h.name[DS_HINT_BETA2] = "--b2";
    c = RESOLVE_OK(k_zero2, &h);
    ORIGIN(c, DS_KEY_BETAS, DS_SRC_HINT, "--adam-beta1, --b2");

    /* a micro batch "auto" without --batch takes HF's default
     * per_device_train_batch_size, 8, named as a trainer default */
    ds_config_hints db = trainer(2);
    db.total_num_steps = 10; /* the trainer's linear schedule needs a length */
    c = RESOLVE_OK(k_zero2, &db);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 8);
    CHECK_EQ_I(c.train_batch_size, 16);
    ORIGIN(c, DS_KEY_MICRO_BATCH, DS_SRC_HINT_DEFAULT, "--batch");
    /* ... and never overrides a number, nor conflicts with one */
    c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 3}", &db);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 3);
    c = RESOLVE_OK("{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": \"auto\","
                   " \"gradient_accumulation_steps\": 3}", &db);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 2); /* 12 / 3 / 2 ranks: the rule, not 8 */
    /* with no micro batch at all "auto" counts as not given: the batch rule
     * needs one of the two, and the error names the flag */
    ds_config_hints nb = trainer(2);
    nb.micro_batch = 0;
    FAILS_WITH(k_zero2, &nb, DS_ERR_CONFIG,
               "batch size: set train_batch_size or train_micro_batch_size_per_gpu (a number, "
               "or \"auto\" with the trainer's micro batch in --batch)");
}

static void test_zero3_template(void) {
    ds_config_hints h = trainer(4);
    h.micro_batch = 4; /* --batch 4 */
    h.is_default[DS_HINT_MICRO_BATCH] = false;
    h.hidden_size = 768;
    h.epochs = 3;
    h.train_rows = 1000; /* 250 a rank, 63 micro-batches of 4: 63 steps an epoch */
    h.gradient_accumulation_steps = 1;
    ds_config c = RESOLVE_OK(k_zero3, &h);
    CHECK_EQ_I(c.train_batch_size, 16);
    ORIGIN(c, DS_KEY_GRAD_ACCUM, DS_SRC_HINT, "--grad-accum");
    CHECK_EQ_I(c.total_num_steps, 189);
    ORIGIN(c, DS_KEY_TOTAL_NUM_STEPS, DS_SRC_COMPUTED, NULL);
    CHECK_TRUE(strstr(c.origin[DS_KEY_TOTAL_NUM_STEPS].from, "--epochs 3 x 63 steps an epoch"));
    /* HF's trainer_config_finalize from the hidden size */
    CHECK_EQ_I(c.reduce_bucket_size, 589824);
    CHECK_EQ_I(c.stage3_prefetch_bucket_size, 530841);
    CHECK_EQ_I(c.stage3_param_persistence_threshold, 7680);
    ORIGIN(c, DS_KEY_REDUCE_BUCKET_SIZE, DS_SRC_COMPUTED, "hidden^2, hidden_size 768");
    ORIGIN(c, DS_KEY_PREFETCH_BUCKET_SIZE, DS_SRC_COMPUTED, "int(0.9 * hidden^2), hidden_size 768");
    ORIGIN(c, DS_KEY_PERSISTENCE_THRESHOLD, DS_SRC_COMPUTED, "10 * hidden, hidden_size 768");
    /* --max-steps wins over the epochs */
    h.total_num_steps = 50;
    h.is_default[DS_HINT_TOTAL_STEPS] = false;
    c = RESOLVE_OK(k_zero3, &h);
    CHECK_EQ_I(c.total_num_steps, 50);
    ORIGIN(c, DS_KEY_TOTAL_NUM_STEPS, DS_SRC_HINT, "--max-steps");
    /* the accumulation the user chose must agree with a number written */
    FAILS_WITH("{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}", &h,
               DS_ERR_CONFIG,
               "gradient_accumulation_steps: the config says 2 but the trainer's value "
               "(--grad-accum) is 1");
}

/* Every "auto" that needs a trainer value fails without one, naming the key
 * and the hint (or the caller's name for it). */
static void test_auto_needs_hints(void) {
    ds_config_hints h;
    ds_config_hints_init(&h);
    h.world_size = 2;
    h.micro_batch = 4;
    h.lr = 1e-3;
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": \"auto\"}}}",
         "optimizer.params.betas[0]: \"auto\" needs the trainer's value and none was given: set "
         "hints.beta1"},
        {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"eps\": \"auto\"}}}",
         "optimizer.params.eps: \"auto\" needs the trainer's value and none was given: set "
         "hints.eps"},
        {"{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"weight_decay\": \"auto\"}}}",
         "optimizer.params.weight_decay: \"auto\" needs the trainer's value and none was given: "
         "set hints.weight_decay"},
        {"{\"gradient_clipping\": \"auto\"}",
         "gradient_clipping: \"auto\" needs the trainer's value and none was given: set "
         "hints.gradient_clipping"},
        {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": \"auto\"}}}",
         "scheduler.params.warmup_num_steps: \"auto\" needs the trainer's value and none was "
         "given: set hints.warmup_num_steps"},
        {"{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": "
         "\"auto\"}}}",
         "scheduler.params.total_num_steps: \"auto\" needs the run's length and none was given: "
         "set hints.total_num_steps, or hints.epochs with training data"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        FAILS_WITH(cases[i].json, &h, DS_ERR_CONFIG, cases[i].want);
    /* the first key without a value is the one named: lr, without hints.lr */
    h.lr = -1;
    FAILS_WITH("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\"}}}", &h,
               DS_ERR_CONFIG, "optimizer.params.lr: \"auto\" needs the trainer's value and none "
                              "was given: set hints.lr");
    /* the caller's names are used */
    h.name[DS_HINT_LR] = "--learning-rate";
    FAILS_WITH("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\"}}}", &h,
               DS_ERR_CONFIG, "set --learning-rate");
    /* where no trainer value is involved, "auto" resolves without hints */
    ds_config c = RESOLVE_OK("{\"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},"
                             " \"train_batch_size\": \"auto\", \"gradient_accumulation_steps\": 2,"
                             " \"zero_optimization\": {\"reduce_bucket_size\": \"auto\"}}", &h);
    CHECK_TRUE(!c.fp16_enabled && !c.bf16_enabled);
    ORIGIN(c, DS_KEY_FP16, DS_SRC_DEFAULT, "\"auto\" and no hints.fp16: off");
    CHECK_EQ_I(c.train_batch_size, 16);
    CHECK_EQ_I(c.reduce_bucket_size, 500000000);
    ORIGIN(c, DS_KEY_REDUCE_BUCKET_SIZE, DS_SRC_DEFAULT, "\"auto\" without the model's hidden size");
}

/* A trainer's defaults fill "auto" but a number the user wrote wins over
 * them; a value the user chose must agree with it. */
static void test_defaults_versus_chosen(void) {
    ds_config_hints h = trainer(1);
    const char *written = "{\"train_micro_batch_size_per_gpu\": 16, \"gradient_clipping\": 0.3,"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3,"
                          " \"betas\": [0.8, 0.9], \"eps\": 1e-6, \"weight_decay\": 0.1}},"
                          " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {"
                          " \"warmup_max_lr\": 1e-3, \"warmup_num_steps\": 7,"
                          " \"total_num_steps\": 70}}, \"fp16\": {\"enabled\": true}}";
    ds_config c = RESOLVE_OK(written, &h);
    CHECK_EQ_D(c.lr, 1e-3);
    CHECK_EQ_D(c.gradient_clipping, 0.3);
    CHECK_EQ_I(c.warmup_num_steps, 7);
    CHECK_TRUE(c.fp16_enabled);
    for (int k = 0; k < DS_KEY_COUNT; k++) { /* nothing here came from a hint */
        ds_config_source s = c.origin[k].source;
        if (c.origin[k].used && (s == DS_SRC_HINT || s == DS_SRC_HINT_DEFAULT))
            TEST_FAIL("%s: origin %s", ds_config_key_name((ds_config_key)k),
                      ds_config_source_name(s));
    }
    ORIGIN(c, DS_KEY_LR, DS_SRC_CONFIG, "");
    ORIGIN(c, DS_KEY_WARMUP_MIN_LR, DS_SRC_DEFAULT, "");
    /* chosen values that disagree are errors naming the flag, one key at a time */
    static const struct {
        ds_hint_id id;
        double v;
        const char *want;
    } chosen[] = {
        {DS_HINT_LR, 2e-3, "optimizer.params.lr: the config says 0.001 but the trainer's value "
                           "(--lr) is 0.002"},
        {DS_HINT_BETA1, 0.9, "optimizer.params.betas[0]: the config says 0.8 but the trainer's "
                             "value (--adam-beta1) is 0.9"},
        {DS_HINT_EPS, 1e-8, "optimizer.params.eps: the config says 1e-06 but the trainer's "
                            "value (--adam-epsilon) is 1e-08"},
        {DS_HINT_WEIGHT_DECAY, 0.0, "optimizer.params.weight_decay: the config says 0.1 but the "
                                    "trainer's value (--weight-decay) is 0"},
        {DS_HINT_GRADIENT_CLIPPING, 1.0, "gradient_clipping: the config says 0.3 but the "
                                         "trainer's value (--max-grad-norm) is 1"},
        {DS_HINT_WARMUP, 5, "scheduler.params.warmup_num_steps: the config says 7 but the "
                            "trainer's value (--warmup) is 5"},
        {DS_HINT_TOTAL_STEPS, 80, "scheduler.params.total_num_steps: the config says 70 but "
                                  "the trainer's value (--max-steps) is 80"},
        {DS_HINT_MICRO_BATCH, 8, "the trainer's micro batch (--batch) is 8"},
        {DS_HINT_FP16, 0, "fp16.enabled: the config says true but the trainer's value (--fp16) "
                          "is false"},
    };
    for (size_t i = 0; i < sizeof chosen / sizeof *chosen; i++) {
        ds_config_hints hc = trainer(1);
        double v = chosen[i].v;
        switch (chosen[i].id) {
        case DS_HINT_LR: hc.lr = v; break;
        case DS_HINT_BETA1: hc.beta1 = v; break;
        case DS_HINT_EPS: hc.eps = v; break;
        case DS_HINT_WEIGHT_DECAY: hc.weight_decay = v; break;
        case DS_HINT_GRADIENT_CLIPPING: hc.gradient_clipping = v; break;
        case DS_HINT_WARMUP: hc.warmup_num_steps = (int64_t)v; break;
        case DS_HINT_TOTAL_STEPS: hc.total_num_steps = (int64_t)v; break;
        case DS_HINT_MICRO_BATCH: hc.micro_batch = (int64_t)v; break;
        case DS_HINT_FP16: hc.fp16 = (int)v; break;
        default: break;
        }
        hc.is_default[chosen[i].id] = false;
        FAILS_WITH(written, &hc, DS_ERR_CONFIG, chosen[i].want);
    }
    /* a default micro batch fills "auto" only, never an absent key (the
     * trainer's linear schedule needs a length here: --max-steps 10) */
    h.total_num_steps = 10;
    h.micro_batch = 8;
    h.is_default[DS_HINT_MICRO_BATCH] = true;
    c = RESOLVE_OK("{\"train_batch_size\": 32}", &h);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 32);
    c = RESOLVE_OK("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": \"auto\"}", &h);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 8);
    CHECK_EQ_I(c.gradient_accumulation_steps, 4);
    /* a precision the user chose turns on an absent section; a default does not */
    ds_config_hints hp = trainer(1);
    hp.micro_batch = 2; /* --batch 2 */
    hp.is_default[DS_HINT_MICRO_BATCH] = false;
    hp.total_num_steps = 10;
    c = RESOLVE_OK("{}", &hp);
    CHECK_TRUE(!c.bf16_enabled);
    ORIGIN(c, DS_KEY_BF16, DS_SRC_DEFAULT, "");
    hp.bf16 = 1;
    hp.is_default[DS_HINT_BF16] = false;
    c = RESOLVE_OK("{}", &hp);
    CHECK_TRUE(c.bf16_enabled);
    ORIGIN(c, DS_KEY_BF16, DS_SRC_HINT, "--bf16; the config does not set bf16.enabled");
    /* and then meets an explicit fp16 in the cross check */
    FAILS_WITH("{\"fp16\": {\"enabled\": true}}", &hp, DS_ERR_CONFIG,
               "fp16.enabled and bf16.enabled: both true");
}

/* No optimizer / scheduler section: HF's Trainer's AdamW and schedule from
 * the hints, or DeepSpeed's behaviour when nothing is given. */
static void test_missing_sections(void) {
    /* nothing given: DeepSpeed's Adam defaults, constant lr, and it says so */
    ds_config_hints none;
    ds_config_hints_init(&none);
    ds_config c = RESOLVE_OK("{\"train_batch_size\": 8}", &none);
    CHECK_TRUE(!c.optimizer_set && c.optimizer == DS_OPTIM_ADAMW);
    CHECK_EQ_D(c.lr, 1e-3);
    CHECK_EQ_I(c.scheduler, DS_SCHED_NONE);
    ORIGIN(c, DS_KEY_OPTIMIZER, DS_SRC_DEFAULT,
           "no optimizer section and no hints: DeepSpeed's Adam defaults");
    ORIGIN(c, DS_KEY_LR, DS_SRC_DEFAULT, "no optimizer section and no hints.lr");
    ORIGIN(c, DS_KEY_SCHEDULER, DS_SRC_DEFAULT, "no scheduler section: constant lr");

    /* a trainer: AdamW with its values and HF's linear schedule over the run */
    ds_config_hints h = trainer(2);
    h.lr = 2e-4;
    h.is_default[DS_HINT_LR] = false;
    h.weight_decay = 0.01;
    h.is_default[DS_HINT_WEIGHT_DECAY] = false;
    h.warmup_num_steps = 10;
    h.is_default[DS_HINT_WARMUP] = false;
    h.total_num_steps = 100;
    h.is_default[DS_HINT_TOTAL_STEPS] = false;
    c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4}", &h);
    CHECK_TRUE(c.optimizer == DS_OPTIM_ADAMW && c.adam_w_mode);
    CHECK_EQ_D(c.lr, 2e-4);
    CHECK_EQ_D(c.weight_decay, 0.01);
    CHECK_EQ_D(c.gradient_clipping, 1.0); /* a top-level key absent: DeepSpeed's 1.0, as HF */
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_DECAY_LR);
    CHECK_EQ_I(c.warmup_type, DS_WARMUP_LINEAR);
    CHECK_EQ_D(c.warmup_min_lr, 0.0);
    CHECK_EQ_D(c.warmup_max_lr, 2e-4);
    CHECK_EQ_I(c.warmup_num_steps, 10);
    CHECK_EQ_I(c.total_num_steps, 100);
    ORIGIN(c, DS_KEY_OPTIMIZER, DS_SRC_COMPUTED, NULL);
    ORIGIN(c, DS_KEY_LR, DS_SRC_HINT, "--lr");
    ORIGIN(c, DS_KEY_EPS, DS_SRC_HINT_DEFAULT, "--adam-epsilon");
    ORIGIN(c, DS_KEY_SCHEDULER, DS_SRC_HINT_DEFAULT, "--lr-scheduler-type linear");
    ORIGIN(c, DS_KEY_TOTAL_NUM_STEPS, DS_SRC_HINT, "--max-steps");
    /* resolving the resolved config again changes nothing */
    ds_config again = c;
    CHECK_TRUE(ds_config_resolve(&again, &h) == DS_OK && memcmp(&again, &c, sizeof c) == 0);
    /* the printed config holds both sections and reads back, without any
     * hint, to the same text (what a checkpoint's meta.json relies on) */
    char *js = ds_config_to_json(&c);
    ds_config_hints w2;
    ds_config_hints_init(&w2);
    w2.world_size = 2;
    ds_config back = RESOLVE_OK(js ? js : "", &w2);
    char *js2 = ds_config_to_json(&back);
    CHECK_TRUE(js && js2 && strcmp(js, js2) == 0);
    CHECK_TRUE(js && strstr(js, "\"type\": \"WarmupDecayLR\"") && strstr(js, "\"type\": \"AdamW\""));
    free(js);
    free(js2);

    /* the other HF schedule names */
    h.lr_scheduler_type = "cosine";
    c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4}", &h);
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_COSINE_LR);
    CHECK_EQ_D(c.cos_min_ratio, 0.0); /* HF's cosine ends at 0 */
    CHECK_EQ_D(c.warmup_min_ratio, 0.0);
    CHECK_EQ_I(c.total_num_steps, 100);
    h.lr_scheduler_type = "constant_with_warmup";
    c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4}", &h);
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_LR);
    CHECK_EQ_D(c.warmup_max_lr, 2e-4);
    CHECK_TRUE(!c.origin[DS_KEY_TOTAL_NUM_STEPS].used);
    h.lr_scheduler_type = "constant";
    c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4}", &h);
    CHECK_EQ_I(c.scheduler, DS_SCHED_NONE);
    ORIGIN(c, DS_KEY_SCHEDULER, DS_SRC_HINT_DEFAULT, "--lr-scheduler-type constant");
    h.lr_scheduler_type = "polynomial";
    FAILS_WITH("{\"train_micro_batch_size_per_gpu\": 4}", &h, DS_ERR_INVALID_ARG,
               "--lr-scheduler-type: must be linear, cosine, constant or constant_with_warmup, "
               "got \"polynomial\"");
    /* a schedule that needs the run's length, and none is given */
    ds_config_hints nl = trainer(1);
    FAILS_WITH("{\"train_micro_batch_size_per_gpu\": 4}", &nl, DS_ERR_CONFIG,
               "scheduler: no section, so the trainer's \"linear\" schedule (WarmupDecayLR, from "
               "--lr-scheduler-type) runs, and it needs the run's length: set --max-steps, or "
               "--epochs with training data");
    /* a section present is the config's, whatever the hints say */
    c = RESOLVE_OK("{\"train_micro_batch_size_per_gpu\": 4, \"scheduler\": {\"type\": \"WarmupLR\","
                   " \"params\": {\"warmup_num_steps\": 3}}}", &nl);
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_LR);
    ORIGIN(c, DS_KEY_SCHEDULER, DS_SRC_CONFIG, "");
    ORIGIN(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_COMPUTED,
           "WarmupLR without it: the optimizer's lr (DeepSpeed)");
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The start-up print: what runs, where each filled value came from, and the
 * other keys that differ from DeepSpeed's defaults. */
static void test_summary(void) {
    ds_config_hints h = trainer(2);
    h.micro_batch = 8; /* --batch 8 */
    h.is_default[DS_HINT_MICRO_BATCH] = false;
    ds_config c = RESOLVE_OK(k_zero2, &h);
    char *s = ds_config_summary(&c);
    CHECK_TRUE(s != NULL);
    if (!s) return;
    static const char *const want[] = {
        "batch: train_batch_size 16 (auto) = micro 8 (--batch) x accumulation 1 (auto) x world 2 "
        "(from test)\n",
        "optimizer: AdamW lr 5e-05, betas [0.9, 0.999], eps 1e-08, weight_decay 0; "
        "gradient_clipping 1\n",
        "scheduler: WarmupLR, log warmup 0 -> 5e-05 over 2 steps (DeepSpeed's least), then "
        "constant\n",
        "fp16.enabled, bf16.enabled false (--fp16, --bf16)",
        "trainer defaults: gradient_clipping 1 (--max-grad-norm), lr, warmup_max_lr 5e-05 (--lr),",
        "computed: warmup_min_lr 0 (HF's fill for \"auto\")\n",
        "other keys off DeepSpeed's defaults (default in brackets): steps_per_print 2000 (null),",
        "stage 2 (0)", "allgather_bucket_size 2e8 (5e8)",
        "offload_optimizer.device \"cpu\" (\"none\")",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(s, want[i])) TEST_FAIL("summary lacks \"%s\":\n%s", want[i], s);
    /* keys the optimizer and scheduler lines show are not repeated there */
    const char *other = strstr(s, "other keys off");
    CHECK_TRUE(other && !strstr(other, " lr ") && !strstr(other, "gradient_clipping"));
    /* short: the whole HF template in a dozen lines (the engine adds its
     * first line and the memory line), each within 100 columns */
    CHECK(count_lines(s) <= 13, "%d lines:\n%s", count_lines(s), s);
    for (const char *l = s, *nl; (nl = strchr(l, '\n')) != NULL; l = nl + 1)
        CHECK(nl - l <= 100, "line of %d columns: %.*s", (int)(nl - l), (int)(nl - l), l);
    free(s);

    /* the quickstart's config: nothing filled but the run's length */
    ds_config_hints q = trainer(2);
    q.epochs = 1;
    q.train_rows = 1000;
    char path[512];
    snprintf(path, sizeof path, "%s/configs/ds_config.json", DS_SOURCE_DIR);
    ds_config qc;
    if (ds_config_parse_file(path, &qc, quiet, NULL) != DS_OK || ds_config_resolve(&qc, &q) != DS_OK) {
        TEST_FAIL("%s: %s", path, ds_last_error());
        return;
    }
    s = ds_config_summary(&qc);
    CHECK_TRUE(s && strstr(s, "scheduler: WarmupDecayLR, linear warmup 0 -> 0.0005 over 100 "
                              "steps, then linear decay to 0 at step 32\n"));
    CHECK_TRUE(s && strstr(s, "total_num_steps 32 (--epochs 1 x 32 steps an epoch"));
    CHECK_TRUE(s && !strstr(s, "trainer defaults") && !strstr(s, "from the trainer"));
    CHECK(s && count_lines(s) <= 8, "%s", s ? s : "(null)");
    free(s);
}

int main(void) {
    test_zero2_template();
    test_zero3_template();
    test_auto_needs_hints();
    test_defaults_versus_chosen();
    test_missing_sections();
    test_summary();
    return test_finish("test_config_hf");
}
