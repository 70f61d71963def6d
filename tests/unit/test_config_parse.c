/* ds_config parsing: DeepSpeed's defaults, types (integral reals, strict
 * booleans), "auto" where HF allows it, the bf16 alias, optimizer-name
 * semantics, unknown-key warnings, the stage-3 overlap_comm default, files,
 * syntax errors with line:column, and duplicate keys. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/config.h"
#include "tests/unit/test_util.h"
#include "zero/grad_sparse.h"

/* Values copied from the config are compared exactly (CHECK_EQ_I / _D): the
 * parser stores what the file says, no arithmetic happens, so any difference
 * is a bug. */

/* Warnings collected by the callback. */
static char g_warnings[4096];
static int g_nwarnings;
static void collect(void *user, const char *msg) {
    (void)user;
    g_nwarnings++;
    strncat(g_warnings, msg, sizeof g_warnings - strlen(g_warnings) - 2);
    strcat(g_warnings, "\n");
}
static void reset_warnings(void) {
    g_warnings[0] = '\0';
    g_nwarnings = 0;
}

static ds_config parse_ok(const char *json) {
    ds_config c;
    ds_status st = ds_config_parse_string(json, &c, collect, NULL);
    if (st != DS_OK) {
        TEST_FAIL("parse failed for %s: %s", json, ds_last_error());
        ds_config_defaults(&c);
    }
    return c;
}

static void test_defaults(void) {
    ds_config c;
    ds_config_defaults(&c);
    /* DeepSpeed's documented defaults (config-json docs, zero/config.py,
     * offload_config.py, lr_schedules.py, fp16 constants). */
    CHECK_EQ_I(c.train_batch_size, 0);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 0);
    CHECK_EQ_I(c.gradient_accumulation_steps, 0);
    CHECK_EQ_I(c.steps_per_print, 0); /* None since DeepSpeed 0.15.2: no report */
    CHECK_TRUE(!c.wall_clock_breakdown && !c.dataloader_drop_last && !c.prescale_gradients);
    CHECK_TRUE(!c.sparse_gradients); /* DeepSpeed's SPARSE_GRADIENTS_DEFAULT */
    CHECK_EQ_D(c.gradient_predivide_factor, 1.0);
    CHECK_EQ_D(c.gradient_clipping, 1.0); /* GRADIENT_CLIPPING_DEFAULT since 0.19.3 */
    CHECK_TRUE(!c.optimizer_set);
    CHECK_EQ_I(c.optimizer, DS_OPTIM_ADAMW);
    CHECK_EQ_D(c.lr, 1e-3);
    CHECK_EQ_D(c.betas[0], 0.9);
    CHECK_EQ_D(c.betas[1], 0.999);
    CHECK_EQ_D(c.eps, 1e-8);
    CHECK_EQ_D(c.weight_decay, 0.0);
    CHECK_TRUE(c.adam_w_mode && c.bias_correction);
    CHECK_EQ_D(c.momentum, 0.0);
    CHECK_EQ_D(c.dampening, 0.0);
    CHECK_TRUE(!c.nesterov);
    CHECK_EQ_I(c.scheduler, DS_SCHED_NONE);
    CHECK_EQ_D(c.warmup_min_lr, 0.0);
    CHECK_EQ_D(c.warmup_max_lr, 0.001);
    CHECK_EQ_I(c.warmup_num_steps, 1000);
    CHECK_EQ_I(c.warmup_type, DS_WARMUP_LOG);
    CHECK_EQ_I(c.total_num_steps, 0);
    CHECK_EQ_D(c.warmup_min_ratio, 0.0);
    CHECK_EQ_D(c.cos_min_ratio, 0.0001);
    CHECK_EQ_I(c.last_batch_iteration, -1);
    CHECK_TRUE(!c.fp16_enabled && !c.fp16_auto_cast && !c.bf16_enabled);
    CHECK_EQ_D(c.loss_scale, 0.0);
    CHECK_EQ_I(c.initial_scale_power, 16);
    CHECK_EQ_I(c.loss_scale_window, 1000);
    CHECK_EQ_I(c.hysteresis, 2);
    CHECK_TRUE(!c.consecutive_hysteresis);
    CHECK_EQ_D(c.min_loss_scale, 1.0);
    CHECK_TRUE(!c.comm_dtype_set);
    CHECK_EQ_I(c.zero_stage, 0);
    CHECK_TRUE(c.allgather_partitions && c.reduce_scatter && c.contiguous_gradients);
    CHECK_EQ_I(c.allgather_bucket_size, 500000000);
    CHECK_TRUE(!c.overlap_comm && !c.overlap_comm_set);
    CHECK_EQ_I(c.reduce_bucket_size, 500000000);
    CHECK_EQ_I(c.stage3_prefetch_bucket_size, 50000000);
    CHECK_EQ_I(c.stage3_param_persistence_threshold, 100000);
    CHECK_EQ_I(c.stage3_max_live_parameters, 1000000000);
    CHECK_EQ_I(c.stage3_max_reuse_distance, 1000000000);
    CHECK_TRUE(!c.stage3_gather_16bit_weights_on_model_save && !c.round_robin_gradients);
    CHECK_TRUE(!c.zero_quantized_weights); /* DeepSpeed's default: False */
    CHECK_TRUE(!c.zero_quantized_gradients); /* DeepSpeed's default: False */
    CHECK_EQ_I(c.zero_hpz_partition_size, 1); /* DeepSpeed: Field(1, ge=0) */
    CHECK_EQ_I(c.mics_shard_size, -1);        /* DeepSpeed: Field(-1): off */
    CHECK_TRUE(!c.mics_hierarchical_params_gather);
    CHECK_EQ_I(c.sub_group_size, 1000000000);
    CHECK_EQ_I(c.offload_optimizer.device, DS_OFFLOAD_NONE);
    CHECK_EQ_I(c.offload_optimizer.buffer_count, 4);
    CHECK_EQ_D(c.offload_optimizer.ratio, 1.0);
    /* pin_memory True since 0.19.5; nvme_path None */
    CHECK_TRUE(c.offload_optimizer.pin_memory && c.offload_param.pin_memory);
    CHECK_TRUE(c.offload_optimizer.nvme_path[0] == '\0' && c.offload_param.nvme_path[0] == '\0');
    CHECK_TRUE(!c.offload_optimizer.pipeline_read && !c.offload_optimizer.pipeline_write &&
               !c.offload_optimizer.fast_init);
    /* DeepSpeed's AIO defaults (runtime/swap_tensor/constants.py) */
    CHECK_EQ_I(c.aio.block_size, 1048576);
    CHECK_EQ_I(c.aio.queue_depth, 8);
    CHECK_EQ_I(c.aio.thread_count, 1);
    CHECK_TRUE(!c.aio.single_submit && c.aio.overlap_events);
    CHECK_EQ_I(c.offload_param.device, DS_OFFLOAD_NONE);
    CHECK_EQ_I(c.offload_param.buffer_count, 5);
    CHECK_EQ_I(c.offload_param.buffer_size, 100000000);
    CHECK_EQ_I(c.offload_param.max_in_cpu, 1000000000);
    CHECK_TRUE(!c.activation_checkpointing && !c.partition_activations && !c.cpu_checkpointing);
    CHECK_EQ_I(c.number_checkpoints, 0);
    CHECK_EQ_I(c.checkpoint_tag_validation, 1);
    CHECK_TRUE(strcmp(c.backend, "cpu") == 0);
    CHECK_TRUE(strcmp(c.comm, "auto") == 0);
    CHECK_EQ_D(c.comm_timeout_s, 300.0);
    CHECK_EQ_I(c.num_threads, 0);
    CHECK_TRUE(strcmp(c.qgz_scheme, "int8") == 0);

    /* "{}" parses to exactly the defaults. */
    ds_config e = parse_ok("{}");
    CHECK_TRUE(memcmp(&c, &e, sizeof c) == 0);
}

static void test_types(void) {
    /* Integral reals are integers (DeepSpeed configs write 5e8). */
    ds_config c = parse_ok("{\"zero_optimization\": {\"stage\": 2.0, \"allgather_bucket_size\": 5e8,"
                           " \"reduce_bucket_size\": 2e8, \"sub_group_size\": 1e9}}");
    CHECK_EQ_I(c.zero_stage, 2);
    CHECK_EQ_I(c.allgather_bucket_size, 500000000);
    CHECK_EQ_I(c.reduce_bucket_size, 200000000);
    CHECK_EQ_I(c.sub_group_size, 1000000000);
    /* Real-valued keys accept integers. */
    c = parse_ok("{\"gradient_clipping\": 1, \"optimizer\": {\"type\": \"AdamW\","
                 " \"params\": {\"lr\": 1, \"betas\": [0, 0.5]}}}");
    CHECK_EQ_D(c.gradient_clipping, 1.0);
    CHECK_EQ_D(c.lr, 1.0);
    CHECK_EQ_D(c.betas[0], 0.0);
    CHECK_EQ_D(c.betas[1], 0.5);
    /* Large exact sizes survive (2^53 + 2 is not an int once it goes through a float). */
    c = parse_ok("{\"zero_optimization\": {\"stage3_max_live_parameters\": 9007199254740994}}");
    CHECK_EQ_I(c.stage3_max_live_parameters, 9007199254740994LL);
    /* null for the batch keys means "not given", like DeepSpeed's None. */
    c = parse_ok("{\"train_batch_size\": null, \"train_micro_batch_size_per_gpu\": 4}");
    CHECK_TRUE(!c.train_batch_size_set && c.micro_batch_set);
    CHECK_EQ_I(c.train_micro_batch_size_per_gpu, 4);
}

static void test_all_sections(void) {
    reset_warnings();
    ds_config c = parse_ok(
        "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 8,"
        " \"gradient_accumulation_steps\": 4, \"steps_per_print\": 5,"
        " \"wall_clock_breakdown\": true, \"dataloader_drop_last\": true,"
        " \"prescale_gradients\": true, \"gradient_predivide_factor\": 2.0,"
        " \"gradient_clipping\": 0.5, \"sparse_gradients\": true,"
        " \"fp16\": {\"enabled\": true, \"auto_cast\": true, \"loss_scale\": 128,"
        "   \"initial_scale_power\": 12, \"loss_scale_window\": 500, \"hysteresis\": 3,"
        "   \"consecutive_hysteresis\": true, \"min_loss_scale\": 0.5},"
        " \"communication_data_type\": \"bf16\","
        " \"zero_optimization\": {\"stage\": 3, \"allgather_partitions\": false,"
        "   \"allgather_bucket_size\": 1000, \"overlap_comm\": false, \"reduce_scatter\": false,"
        "   \"reduce_bucket_size\": 2000, \"contiguous_gradients\": false,"
        "   \"prefetch_bucket_size\": 3000, \"param_persistence_threshold\": 40,"
        "   \"max_live_parameters\": 5000, \"max_reuse_distance\": 6000,"
        "   \"gather_16bit_weights_on_model_save\": true, \"sub_group_size\": 7000,"
        "   \"round_robin_gradients\": true, \"zero_quantized_weights\": true,"
        "   \"zero_quantized_gradients\": true,"
        "   \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/mnt/nvme\","
        "     \"buffer_count\": 6, \"pin_memory\": true, \"ratio\": 0.25, \"pipeline_read\": true,"
        "     \"pipeline_write\": true, \"fast_init\": true},"
        "   \"offload_param\": {\"device\": \"CPU\", \"nvme_path\": null, \"buffer_count\": 7,"
        "     \"buffer_size\": 123, \"max_in_cpu\": 456, \"pin_memory\": true}},"
        " \"activation_checkpointing\": {\"partition_activations\": false,"
        "   \"cpu_checkpointing\": true, \"contiguous_memory_optimization\": true,"
        "   \"number_checkpoints\": 3, \"synchronize_checkpoint_boundary\": true, \"profile\": true},"
        " \"checkpoint\": {\"tag_validation\": \"fail\"},"
        " \"aio\": {\"block_size\": 262144, \"queue_depth\": 4, \"intra_op_parallelism\": 2,"
        "   \"single_submit\": true, \"overlap_events\": false, \"use_gds\": false},"
        " \"zero_engine\": {\"backend\": \"cuda\", \"comm_timeout_s\": 12.5, \"num_threads\": 2,"
        "   \"qgz_scheme\": \"int4\", \"comm\": \"mpi\"}}");
    CHECK_EQ_I(c.train_batch_size, 64);
    CHECK_TRUE(c.train_batch_size_set && c.micro_batch_set && c.grad_accum_set);
    CHECK_EQ_I(c.gradient_accumulation_steps, 4);
    CHECK_EQ_I(c.steps_per_print, 5);
    CHECK_TRUE(c.wall_clock_breakdown && c.dataloader_drop_last && c.prescale_gradients);
    CHECK_TRUE(c.sparse_gradients);
    CHECK_EQ_D(c.gradient_predivide_factor, 2.0);
    /* read, and said to be without effect (the sum is divided in the update) */
    CHECK_TRUE(strstr(g_warnings, "gradient_predivide_factor: without effect here"));
    CHECK_EQ_D(c.gradient_clipping, 0.5);
    CHECK_TRUE(c.fp16_enabled && c.fp16_auto_cast && c.consecutive_hysteresis);
    CHECK_EQ_D(c.loss_scale, 128.0);
    CHECK_EQ_I(c.initial_scale_power, 12);
    CHECK_EQ_I(c.loss_scale_window, 500);
    CHECK_EQ_I(c.hysteresis, 3);
    CHECK_EQ_D(c.min_loss_scale, 0.5);
    CHECK_TRUE(c.comm_dtype_set);
    CHECK_EQ_I(c.communication_data_type, DS_BF16);
    CHECK_EQ_I(c.zero_stage, 3);
    CHECK_TRUE(!c.allgather_partitions && !c.reduce_scatter && !c.contiguous_gradients);
    CHECK_TRUE(!c.overlap_comm &&
               c.overlap_comm_set); /* explicit false wins over stage 3's default */
    CHECK_EQ_I(c.allgather_bucket_size, 1000);
    CHECK_EQ_I(c.reduce_bucket_size, 2000);
    CHECK_EQ_I(c.stage3_prefetch_bucket_size, 3000);
    CHECK_EQ_I(c.stage3_param_persistence_threshold, 40);
    CHECK_EQ_I(c.stage3_max_live_parameters, 5000);
    CHECK_EQ_I(c.stage3_max_reuse_distance, 6000);
    CHECK_TRUE(c.stage3_gather_16bit_weights_on_model_save && c.round_robin_gradients);
    CHECK_TRUE(c.zero_quantized_weights);
    CHECK_TRUE(c.zero_quantized_gradients);
    CHECK_EQ_I(c.sub_group_size, 7000);
    CHECK_EQ_I(c.offload_optimizer.device, DS_OFFLOAD_NVME);
    CHECK_TRUE(strcmp(c.offload_optimizer.nvme_path, "/mnt/nvme") == 0);
    CHECK_EQ_I(c.offload_optimizer.buffer_count, 6);
    CHECK_TRUE(c.offload_optimizer.pin_memory);
    CHECK_EQ_D(c.offload_optimizer.ratio, 0.25);
    CHECK_TRUE(c.offload_optimizer.pipeline_read && c.offload_optimizer.pipeline_write &&
               c.offload_optimizer.fast_init);
    CHECK_EQ_I(c.aio.block_size, 262144);
    CHECK_EQ_I(c.aio.queue_depth, 4);
    CHECK_EQ_I(c.aio.thread_count, 2); /* intra_op_parallelism: DeepSpeed's newer name */
    CHECK_TRUE(c.aio.single_submit && !c.aio.overlap_events);
    CHECK_EQ_I(c.offload_param.device, DS_OFFLOAD_CPU); /* device names are case-insensitive */
    CHECK_EQ_I(c.offload_param.nvme_path[0], 0);
    CHECK_EQ_I(c.offload_param.buffer_count, 7);
    CHECK_EQ_I(c.offload_param.buffer_size, 123);
    CHECK_EQ_I(c.offload_param.max_in_cpu, 456);
    CHECK_TRUE(c.offload_param.pin_memory);
    CHECK_TRUE(c.activation_checkpointing && !c.partition_activations && c.cpu_checkpointing);
    CHECK_TRUE(c.contiguous_memory_optimization && c.synchronize_checkpoint_boundary);
    CHECK_TRUE(c.profile_checkpointing);
    CHECK_EQ_I(c.number_checkpoints, 3);
    CHECK_EQ_I(c.checkpoint_tag_validation, 2);
    CHECK_TRUE(strcmp(c.backend, "cuda") == 0);
    CHECK_TRUE(strcmp(c.comm, "mpi") == 0);
    CHECK_EQ_D(c.comm_timeout_s, 12.5);
    CHECK_EQ_I(c.num_threads, 2);
    CHECK_TRUE(strcmp(c.qgz_scheme, "int4") == 0);

    /* The stage3_ spellings are the same settings. */
    c = parse_ok("{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": 11,"
                 " \"stage3_param_persistence_threshold\": 12, \"stage3_max_live_parameters\": 13,"
                 " \"stage3_max_reuse_distance\": 14,"
                 " \"stage3_gather_fp16_weights_on_model_save\": true}}");
    CHECK_EQ_I(c.stage3_prefetch_bucket_size, 11);
    CHECK_EQ_I(c.stage3_param_persistence_threshold, 12);
    CHECK_EQ_I(c.stage3_max_live_parameters, 13);
    CHECK_EQ_I(c.stage3_max_reuse_distance, 14);
    CHECK_TRUE(c.stage3_gather_16bit_weights_on_model_save);

    /* activation_checkpointing: the section's presence turns recomputation on,
     * whatever its keys say; absent, it is off. */
    c = parse_ok("{\"activation_checkpointing\": {\"partition_activations\": false,"
                 " \"number_checkpoints\": null}}");
    CHECK_TRUE(c.activation_checkpointing);
    c = parse_ok("{}");
    CHECK_TRUE(!c.activation_checkpointing);
    c = parse_ok("{\"activation_checkpointing\": {\"partition_activations\": true}}");
    CHECK_TRUE(c.activation_checkpointing && c.partition_activations);

    c = parse_ok("{\"communication_data_type\": null}");
    CHECK_TRUE(!c.comm_dtype_set);
    c = parse_ok("{\"communication_data_type\": \"fp16\"}");
    CHECK_TRUE(c.comm_dtype_set && c.communication_data_type == DS_F16);
    c = parse_ok("{\"zero_engine\": {\"backend\": \"auto\"}}");
    CHECK_TRUE(strcmp(c.backend, "auto") == 0);
}

static void test_overlap_default(void) {
    ds_config c = parse_ok("{\"zero_optimization\": {\"stage\": 3}}");
    CHECK_TRUE(c.overlap_comm && !c.overlap_comm_set);
    c = parse_ok("{\"zero_optimization\": {\"stage\": 2}}");
    CHECK_TRUE(!c.overlap_comm);
    c = parse_ok("{\"zero_optimization\": {\"stage\": 2, \"overlap_comm\": true}}");
    CHECK_TRUE(c.overlap_comm && c.overlap_comm_set);
}

static void test_bf16_alias(void) {
    ds_config c = parse_ok("{\"bfloat16\": {\"enabled\": true}}");
    CHECK_TRUE(c.bf16_enabled);
    c = parse_ok("{\"bf16\": {\"enabled\": true}}");
    CHECK_TRUE(c.bf16_enabled);
    c = parse_ok("{\"bf16\": {\"enabled\": \"auto\"}}");
    CHECK_TRUE(c.bf16_enabled_auto && !c.bf16_enabled);
}

static void test_optimizer_semantics(void) {
    /* "Adam" means AdamW unless adam_w_mode is false (DeepSpeed); names are
     * case-insensitive. */
    ds_config c = parse_ok("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}}}");
    CHECK_TRUE(c.optimizer_set && c.optimizer == DS_OPTIM_ADAMW && c.adam_w_mode);
    CHECK_EQ_D(c.lr, 0.01);
    c = parse_ok("{\"optimizer\": {\"type\": \"adam\", \"params\": {\"adam_w_mode\": false,"
                 " \"bias_correction\": false, \"weight_decay\": 0.1}}}");
    CHECK_TRUE(c.optimizer == DS_OPTIM_ADAM && !c.adam_w_mode && !c.bias_correction);
    CHECK_EQ_D(c.weight_decay, 0.1);
    c = parse_ok("{\"optimizer\": {\"type\": \"ADAMW\"}}");
    CHECK_TRUE(c.optimizer == DS_OPTIM_ADAMW && c.adam_w_mode);
    /* "AdamW" forces adam_w_mode true, and says so. */
    reset_warnings();
    c = parse_ok("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"adam_w_mode\": false}}}");
    CHECK_TRUE(c.optimizer == DS_OPTIM_ADAMW && c.adam_w_mode);
    CHECK_TRUE(g_nwarnings == 1 &&
               strstr(g_warnings, "optimizer.params.adam_w_mode: false is ignored"));
    c = parse_ok("{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9,"
                 " \"dampening\": 0, \"nesterov\": true, \"weight_decay\": 1e-4}}}");
    CHECK_TRUE(c.optimizer == DS_OPTIM_SGD && c.nesterov);
    CHECK_EQ_D(c.lr, 0.1);
    CHECK_EQ_D(c.momentum, 0.9);
    CHECK_EQ_D(c.weight_decay, 1e-4);
    /* Key order inside the section does not matter ("params" before "type"). */
    c = parse_ok("{\"optimizer\": {\"params\": {\"momentum\": 0.5}, \"type\": \"SGD\"}}");
    CHECK_TRUE(c.optimizer == DS_OPTIM_SGD);
    CHECK_EQ_D(c.momentum, 0.5);
}

static void test_scheduler_parse(void) {
    ds_config c = parse_ok("{\"scheduler\": {\"type\": \"warmupdecaylr\", \"params\": {"
                           "\"warmup_min_lr\": 1e-5, \"warmup_max_lr\": 3e-4,"
                           " \"warmup_num_steps\": 50, \"total_num_steps\": 500,"
                           " \"warmup_type\": \"linear\", \"last_batch_iteration\": 7}}}");
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_DECAY_LR);
    CHECK_EQ_D(c.warmup_min_lr, 1e-5);
    CHECK_EQ_D(c.warmup_max_lr, 3e-4);
    CHECK_TRUE(c.warmup_max_lr_set && c.warmup_num_steps_set && c.total_num_steps_set);
    CHECK_EQ_I(c.warmup_num_steps, 50);
    CHECK_EQ_I(c.total_num_steps, 500);
    CHECK_EQ_I(c.warmup_type, DS_WARMUP_LINEAR);
    CHECK_EQ_I(c.last_batch_iteration, 7);
    c = parse_ok("{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {"
                 "\"total_num_steps\": 100, \"warmup_min_ratio\": 0.1, \"cos_min_ratio\": 0.01}}}");
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_COSINE_LR);
    CHECK_EQ_D(c.warmup_min_ratio, 0.1);
    CHECK_EQ_D(c.cos_min_ratio, 0.01);
    c = parse_ok("{\"scheduler\": {\"type\": \"WarmupLR\"}}");
    CHECK_EQ_I(c.scheduler, DS_SCHED_WARMUP_LR);
    CHECK_TRUE(!c.warmup_max_lr_set);
    /* DeepSpeed warns when the decay ends before the warmup; so do we. */
    reset_warnings();
    parse_ok("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {"
             "\"warmup_num_steps\": 100, \"total_num_steps\": 50}}}");
    CHECK_TRUE(g_nwarnings == 1 &&
               strstr(g_warnings, "total_num_steps 50 is less than warmup_num_steps 100"));
}

static void test_auto_accepted(void) {
    /* Every key HF's integration may leave as "auto". */
    ds_config c = parse_ok(
        "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\","
        " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\","
        "   \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
        " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": \"auto\","
        "   \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}},"
        " \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},"
        " \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": \"auto\","
        "   \"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\"}}");
    CHECK_TRUE(c.train_batch_size_auto && c.micro_batch_auto && c.grad_accum_auto);
    CHECK_TRUE(!c.train_batch_size_set && !c.micro_batch_set && !c.grad_accum_set);
    CHECK_TRUE(c.gradient_clipping_auto && c.lr_auto && c.betas_auto && c.eps_auto);
    CHECK_TRUE(c.weight_decay_auto && c.warmup_min_lr_auto && c.warmup_max_lr_auto);
    CHECK_TRUE(c.warmup_num_steps_auto && c.total_num_steps_auto);
    CHECK_TRUE(c.fp16_enabled_auto && c.bf16_enabled_auto);
    CHECK_TRUE(c.reduce_bucket_size_auto && c.prefetch_bucket_size_auto &&
               c.persistence_threshold_auto);
    /* the SGD table takes "auto" for lr and weight_decay as well */
    c = parse_ok("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": \"auto\", \"weight_decay\": \"auto\"}}}");
    CHECK_TRUE(c.lr_auto && c.weight_decay_auto);
    c = parse_ok("{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {"
                 "\"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}}}");
    CHECK_TRUE(c.warmup_num_steps_auto && c.total_num_steps_auto);
}

static void test_unknown_top_level(void) {
    reset_warnings();
    ds_config c = parse_ok("{\"train_batch_size\": 8, \"my_custom_key\": 1,"
                           " \"train_batch_sizes_note\": 3, \"wandb\": {\"enabled\": true}}");
    CHECK_EQ_I(c.train_batch_size, 8);
    CHECK_EQ_I(g_nwarnings, 3);
    CHECK_TRUE(strstr(g_warnings, "my_custom_key: unknown top-level key, ignored"));
    CHECK_TRUE(strstr(g_warnings, "train_batch_sizes_note: unknown top-level key, ignored"));
    CHECK_TRUE(strstr(g_warnings, "wandb: a DeepSpeed key zero-engine does not implement, ignored"));
    /* DeepSpeed keys zero-engine lacks, left off or at DeepSpeed's default
     * (what zero-engine does): accepted without a word, as a config written
     * out in full by DeepSpeed or HF carries them */
    reset_warnings();
    parse_ok("{\"amp\": {\"enabled\": false}, \"torch_autocast\": {\"enabled\": false},"
             " \"wandb\": {\"enabled\": false, \"project\": null}, \"memory_breakdown\": false,"
             " \"gradient_allreduce_op\": \"mean\", \"data_types\": {\"grad_accum_dtype\": null},"
             " \"elasticity\": {}, \"zero_force_ds_cpu_optimizer\": true,"
             " \"zero_optimization\": {\"load_from_fp32_weights\": true,"
             " \"ignore_unused_parameters\": true, \"legacy_stage1\": false,"
             " \"memory_efficient_linear\": true, \"stage3_use_all_reduce_for_fetch_params\": false}}");
    CHECK(g_nwarnings == 0, "warnings: %s", g_warnings);
    /* DeepSpeed's defaults that are not false, HF's "auto" for apex, null
     * for DeepSpeed's Optional sections */
    ds_config dump = parse_ok(
        "{\"amp\": {\"enabled\": \"auto\", \"opt_level\": \"auto\"},"
        " \"zero_optimization\": {\"stage\": 3, \"stage3_module_granularity_threshold\": 0,"
        " \"model_persistence_threshold\": 9223372036854775807,"
        " \"leaf_module\": {\"classes\": [], \"names\": [], \"name_suffixes\": []},"
        " \"stage3_model_persistence_threshold\": \"auto\", \"offload_param\": null,"
        " \"offload_optimizer\": null, \"overlap_comm\": null}}");
    CHECK(g_nwarnings == 0, "warnings: %s", g_warnings);
    CHECK_TRUE(dump.overlap_comm); /* null: unset, stage 3's default */
    CHECK_EQ_I(dump.offload_param.device, DS_OFFLOAD_NONE);
    /* ones that change what training computes, asked for: refused, not
     * ignored (the run would not train as its config says) */
    const char *trains[] = {
        "{\"amp\": {\"enabled\": true}}", "{\"gradient_allreduce_op\": \"sum\"}",
        "{\"elasticity\": {\"enabled\": true, \"max_train_batch_size\": 64}}",
        "{\"progressive_layer_drop\": {\"enabled\": true}}",
        "{\"data_types\": {\"grad_accum_dtype\": \"fp32\"}}",
        "{\"zero_optimization\": {\"load_from_fp32_weights\": false}}",
        "{\"zero_optimization\": {\"stage3_use_all_reduce_for_fetch_params\": true}}",
        "{\"managed_gradient_accumulation\": false}", /* every step() an update */
        "{\"zero_optimization\": {\"stage3_module_granularity_threshold\": 100}}"};
    for (size_t k = 0; k < sizeof trains / sizeof *trains; k++) {
        ds_config t;
        ds_status st = ds_config_parse_string(trains[k], &t, collect, NULL);
        CHECK(st == DS_ERR_UNSUPPORTED &&
                  strstr(ds_last_error(), "a DeepSpeed key zero-engine does not implement"),
              "%s: %s (%s)", trains[k], ds_status_to_string(st), ds_last_error());
    }
    /* "auto" in a section DeepSpeed reads through its config models: the
     * default, said (DeepSpeedConfigModel drops "auto") */
    reset_warnings();
    c = parse_ok("{\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": \"auto\","
                 " \"stage3_max_live_parameters\": \"auto\"}}");
    CHECK_TRUE(c.overlap_comm); /* stage 3's default */
    CHECK_EQ_I(c.stage3_max_live_parameters, 1000000000);
    CHECK_EQ_I(g_nwarnings, 2);
    CHECK_TRUE(strstr(g_warnings, "zero_optimization.overlap_comm: \"auto\" keeps the default"));
    /* steps_per_print null: DeepSpeed's None */
    c = parse_ok("{\"steps_per_print\": null}");
    CHECK_EQ_I(c.steps_per_print, 0);
    /* a letter or two off one of ours: a misspelling, refused (it would
     * train without its section) */
    const char *typos[][2] = {
        {"{\"zero_optimisation\": {\"stage\": 3}}", "did you mean zero_optimization?"},
        {"{\"train_batch_sise\": 3}", "did you mean train_batch_size?"},
        {"{\"gradient_acumulation_steps\": 4}", "did you mean gradient_accumulation_steps?"},
    };
    for (size_t k = 0; k < sizeof typos / sizeof typos[0]; k++) {
        ds_config t;
        ds_status st = ds_config_parse_string(typos[k][0], &t, collect, NULL);
        CHECK(st == DS_ERR_CONFIG && strstr(ds_last_error(), typos[k][1]) &&
                  strstr(ds_last_error(), "unknown top-level key"),
              "%s: %s (%s)", typos[k][0], ds_status_to_string(st), ds_last_error());
    }
    /* Without a callback the warning goes to stderr and parsing succeeds. */
    ds_config d;
    CHECK_TRUE(ds_config_parse_string("{\"unknown_key\": 1}", &d, NULL, NULL) == DS_OK);
}

static void test_files(void) {
    char dir[] = "/tmp/ds_config_test_XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("mkdtemp: %s", strerror(errno));
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/bad.json", dir);
    /* A syntax error on line 3 (the ':' missing before 10): the message has
     * file:line:col, the column being where jansson stopped, at the end of
     * the token "10" (column 16). */
    FILE *f = fopen(path, "w");
    fputs("{\n  \"train_batch_size\": 8,\n  \"steps_per\" 10\n}\n", f);
    fclose(f);
    ds_config c;
    ds_config_defaults(&c);
    c.train_batch_size = 12345;
    ds_status st = ds_config_parse_file(path, &c, collect, NULL);
    CHECK_TRUE(st == DS_ERR_CONFIG);
    char want[600];
    snprintf(want, sizeof want, "%s:3:16: JSON syntax error: ':' expected", path);
    CHECK_TRUE(strstr(ds_last_error(), want));
    CHECK_EQ_I(c.train_batch_size, 12345); /* untouched on failure */

    /* A duplicate key deep inside: rejected with its position and path. */
    f = fopen(path, "w");
    fputs("{\"zero_optimization\": {\"offload_param\": {\n \"device\": \"cpu\",\n \"device\": \"none\"}}}\n", f);
    fclose(f);
    st = ds_config_parse_file(path, &c, collect, NULL);
    CHECK_TRUE(st == DS_ERR_CONFIG &&
               strstr(ds_last_error(), "zero_optimization.offload_param.device: duplicate key"));
    snprintf(want, sizeof want, "%s:3:", path);
    CHECK_TRUE(strstr(ds_last_error(), want));

    /* A semantic error names the file before the key path. */
    f = fopen(path, "w");
    fputs("{\"zero_optimization\": {\"stage\": 4}}\n", f);
    fclose(f);
    st = ds_config_parse_file(path, &c, collect, NULL);
    snprintf(want, sizeof want, "%s: zero_optimization.stage: must be 0..3, got 4", path);
    CHECK_TRUE(st == DS_ERR_CONFIG && strstr(ds_last_error(), want));
    CHECK_TRUE(strstr(ds_last_error_trace(), "config_read.c:"));

    /* A good file records its path. */
    f = fopen(path, "w");
    fputs("{\"train_micro_batch_size_per_gpu\": 4}\n", f);
    fclose(f);
    st = ds_config_parse_file(path, &c, collect, NULL);
    CHECK_TRUE(st == DS_OK && strcmp(c.path, path) == 0);
    remove(path);

    /* A missing file is an I/O error naming the file. */
    snprintf(path, sizeof path, "%s/missing.json", dir);
    st = ds_config_parse_file(path, &c, collect, NULL);
    CHECK_TRUE(st == DS_ERR_IO && strstr(ds_last_error(), path) &&
               strstr(ds_last_error(), "No such file"));
    rmdir(dir);
}

/* sparse_gradients: where it applies (every stage, either backend), and the
 * warning that names the key where it is ignored (the engine prints it on
 * rank 0). */
static void test_sparse_gradients_applies(void) {
    char why[256];
    ds_config c = parse_ok("{\"sparse_gradients\": false}");
    CHECK_TRUE(!ds_grad_sparse_applies(&c, why, sizeof why) && !why[0]);
    c = parse_ok("{\"sparse_gradients\": true, \"zero_optimization\": {\"stage\": 1}}");
    CHECK_TRUE(ds_grad_sparse_applies(&c, why, sizeof why) && !why[0]);
    c = parse_ok("{\"sparse_gradients\": true, \"zero_optimization\": {\"stage\": 2}}");
    CHECK_TRUE(ds_grad_sparse_applies(&c, why, sizeof why) && !why[0]);
    /* stage 3 (the same gradient buckets as stage 2), qgZ and MiCS included */
    c = parse_ok("{\"sparse_gradients\": true, \"zero_optimization\": {\"stage\": 3,"
                 " \"zero_quantized_gradients\": true, \"mics_shard_size\": 2}}");
    CHECK_TRUE(ds_grad_sparse_applies(&c, why, sizeof why) && !why[0]);
    c = parse_ok("{\"sparse_gradients\": true, \"optimizer\": {\"type\": \"OneBitAdam\","
                 " \"params\": {\"lr\": 0.001, \"freeze_step\": 10}}}");
    CHECK_TRUE(!ds_grad_sparse_applies(&c, why, sizeof why));
    CHECK_TRUE(strstr(why, "sparse_gradients: ignored with optimizer.type OneBitAdam"));
}

int main(void) {
    test_defaults();
    test_sparse_gradients_applies();
    test_types();
    test_all_sections();
    test_overlap_default();
    test_bf16_alias();
    test_optimizer_semantics();
    test_scheduler_parse();
    test_auto_accepted();
    test_unknown_top_level();
    test_files();
    return test_finish("test_config_parse");
}
