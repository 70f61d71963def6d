/* Bad ds_config.json inputs: each must fail with the right status and a
 * message that names the key path and the offending value. Cases with
 * world > 0 parse fine and must fail in ds_config_resolve at that world size
 * (cross-key checks, the batch rule, hint mismatches). */
#include <stdio.h>
#include <string.h>

#include "engine/core/config.h"
#include "tests/unit/test_util.h"

typedef struct bad_case {
    const char *json;
    int world;            /* 0: parsing must fail; else resolve at this world size */
    int64_t hint_micro;   /* > 0: hints.micro_batch */
    double hint_lr;       /* > 0: hints.lr */
    int64_t hint_total;   /* > 0: hints.total_num_steps */
    ds_status st;
    const char *sub1, *sub2; /* both must appear in the message (sub2 may be NULL) */
} bad_case;

#define P(json, st, a, b) {json, 0, 0, 0, 0, st, a, b}
#define R(json, world, st, a, b) {json, world, 0, 0, 0, st, a, b}
#define CFG DS_ERR_CONFIG
#define UNS DS_ERR_UNSUPPORTED

static const bad_case k_cases[] = {
    /* ---- integers: range, type, integral reals ---- */
    P("{\"zero_optimization\": {\"stage\": 4}}", CFG, "zero_optimization.stage: must be 0..3, got 4", NULL),
    P("{\"zero_optimization\": {\"stage\": -1}}", CFG, "zero_optimization.stage: must be 0..3, got -1", NULL),
    P("{\"zero_optimization\": {\"stage\": 1.5}}", CFG, "zero_optimization.stage: must be an integer, got 1.5", NULL),
    P("{\"zero_optimization\": {\"stage\": \"2\"}}", CFG, "zero_optimization.stage: must be an integer, got \"2\"", NULL),
    P("{\"train_batch_size\": 0}", CFG, "train_batch_size: must be >= 1, got 0", NULL),
    P("{\"train_micro_batch_size_per_gpu\": -4}", CFG, "train_micro_batch_size_per_gpu: must be 1..2147483647, got -4", NULL),
    P("{\"gradient_accumulation_steps\": 2.5}", CFG, "gradient_accumulation_steps: must be an integer, got 2.5", NULL),
    P("{\"train_batch_size\": 1e30}", CFG, "train_batch_size: must be <= 9223372036854775807, got 1e+30", NULL),
    P("{\"train_batch_size\": true}", CFG, "train_batch_size: must be an integer, got true", NULL),
    P("{\"steps_per_print\": 0}", CFG, "steps_per_print: must be >= 1, got 0", NULL),
    /* ---- flops_profiler (config_flops.c) ---- */
    P("{\"flops_profiler\": {\"profile_step\": 0}}", CFG, "flops_profiler.profile_step: must be >= 1, got 0", NULL),
    P("{\"flops_profiler\": {\"module_depth\": -2}}", CFG, "flops_profiler.module_depth: must be >= -1, got -2", NULL),
    P("{\"flops_profiler\": {\"top_modules\": 0}}", CFG, "flops_profiler.top_modules: must be >= 1, got 0", NULL),
    P("{\"flops_profiler\": {\"output_file\": 3}}", CFG, "flops_profiler.output_file: must be a file path or null, got 3", NULL),
    P("{\"flops_profiler\": {\"enabled\": \"yes\"}}", CFG, "flops_profiler.enabled: must be true or false, got \"yes\"", NULL),
    /* ---- the engine keeps the micro batch and the accumulation in an int ---- */
    P("{\"train_micro_batch_size_per_gpu\": 2147483648}", CFG, "train_micro_batch_size_per_gpu: must be 1..2147483647", NULL),
    P("{\"train_micro_batch_size_per_gpu\": 4294967300}", CFG, "train_micro_batch_size_per_gpu: must be 1..2147483647", NULL),
    P("{\"gradient_accumulation_steps\": 4294967297}", CFG, "gradient_accumulation_steps: must be 1..2147483647", NULL),
    R("{\"train_batch_size\": 9223372036854775807}", 1, CFG, "gives train_micro_batch_size_per_gpu 9223372036854775807, more than 2147483647", NULL),
    /* ---- booleans are only true/false ---- */
    P("{\"fp16\": {\"enabled\": 1}}", CFG, "fp16.enabled: must be true or false, got 1", NULL),
    P("{\"fp16\": {\"enabled\": \"true\"}}", CFG, "fp16.enabled: must be true or false, got \"true\"", NULL),
    P("{\"wall_clock_breakdown\": \"false\"}", CFG, "wall_clock_breakdown: must be true or false, got \"false\"", NULL),
    P("{\"zero_optimization\": {\"overlap_comm\": 0}}", CFG, "zero_optimization.overlap_comm: must be true or false, got 0", NULL),
    /* ---- fp16 ---- */
    P("{\"fp16\": {\"enabled\": true, \"loss_scale\": -1}}", CFG, "fp16.loss_scale: must be >= 0, got -1", NULL),
    P("{\"fp16\": {\"initial_scale_power\": 65}}", CFG, "fp16.initial_scale_power: must be 0..64, got 65", NULL),
    P("{\"fp16\": {\"loss_scale_window\": 0}}", CFG, "fp16.loss_scale_window: must be >= 1, got 0", NULL),
    P("{\"fp16\": {\"hysteresis\": 0}}", CFG, "fp16.hysteresis: must be >= 1, got 0", NULL),
    P("{\"fp16\": {\"hysteresis\": 3e9}}", CFG, "fp16.hysteresis: must be <= 2147483647, got 3e+09", NULL),
    P("{\"fp16\": {\"min_loss_scale\": 0}}", CFG, "fp16.min_loss_scale: must be > 0, got 0", NULL),
    P("{\"fp16\": {\"loss_scale_windows\": 500}}", CFG, "fp16.loss_scale_windows: unknown key", "did you mean loss_scale_window?"),
    P("{\"fp16\": {\"fp16_master_weights_and_grads\": true}}", UNS, "fp16.fp16_master_weights_and_grads: a DeepSpeed key zero-engine does not implement", "got true"),
    P("{\"bf16\": {\"enabled\": true}, \"bfloat16\": {\"enabled\": true}}", CFG, "bfloat16: same setting as bf16", NULL),
    P("{\"bfloat16\": {\"enabled\": \"yes\"}}", CFG, "bfloat16.enabled: must be true or false, got \"yes\"", NULL),
    /* ---- optimizer ---- */
    P("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": -0.1}}}", CFG, "optimizer.params.lr: must be >= 0, got -0.1", NULL),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, 1.0]}}}", CFG, "optimizer.params.betas[1]: must be in [0, 1), got 1", NULL),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}", CFG, "optimizer.params.betas: must be [beta1, beta2], got [0.9]", NULL),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"eps\": \"small\"}}}", CFG, "optimizer.params.eps: must be a number, got \"small\"", NULL),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"weight_decay\": -0.01}}}", CFG, "optimizer.params.weight_decay: must be >= 0, got -0.01", NULL),
    P("{\"optimizer\": {\"type\": \"Adamax\"}}", CFG, "optimizer.type: must be one of Adam, AdamW, SGD, OneBitAdam, ZeroOneAdam, got \"Adamax\"", NULL),
    P("{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"lr\": 0.01}}}", UNS, "optimizer.type: a DeepSpeed optimizer zero-engine does not implement", "got \"Lamb\""),
    P("{\"optimizer\": {\"params\": {\"lr\": 0.01}}}", CFG, "optimizer.type: missing", NULL),
    P("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"momentum\": 0.9}}}", CFG, "optimizer.params.momentum: unknown key", NULL),
    P("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"adam_w_mode\": true}}}", CFG, "optimizer.params.adam_w_mode: unknown key", NULL),
    P("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"nesterov\": true}}}", CFG, "optimizer.params.nesterov: true needs momentum > 0 and dampening 0", "got momentum 0, dampening 0"),
    P("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"momentum\": \"auto\"}}}", CFG, "optimizer.params.momentum: \"auto\" is not accepted for this key", NULL),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"torch_adam\": true}}}", UNS, "optimizer.params.torch_adam: a DeepSpeed key zero-engine does not implement", NULL),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"param\": {}}}", CFG, "optimizer.param: unknown key", "did you mean params?"),
    P("{\"optimizer\": \"AdamW\"}", CFG, "optimizer: must be an object, got \"AdamW\"", NULL),
    /* ---- scheduler ---- */
    P("{\"scheduler\": {\"type\": \"OneCycle\"}}", UNS, "scheduler.type: a DeepSpeed scheduler zero-engine does not implement", "got \"OneCycle\""),
    P("{\"scheduler\": {\"type\": \"Cosine\"}}", CFG, "scheduler.type: must be one of WarmupLR, WarmupDecayLR, WarmupCosineLR, got \"Cosine\"", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"exp\"}}}", CFG, "scheduler.params.warmup_type: must be one of \"log\", \"linear\", got \"exp\"", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 0}}}", CFG, "scheduler.params.warmup_num_steps: must be >= 1, got 0", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": 100}}}", CFG, "scheduler.params.total_num_steps: unknown key", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 100, \"warmup_max_lr\": 0.1}}}", CFG, "scheduler.params.warmup_max_lr: unknown key", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 100, \"cos_min_ratio\": 1.5}}}", CFG, "scheduler.params.cos_min_ratio: must be in [0, 1], got 1.5", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"last_batch_iteration\": -2}}}", CFG, "scheduler.params.last_batch_iteration: must be >= -1, got -2", NULL),
    P("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": -1e-5, \"total_num_steps\": 10}}}", CFG, "scheduler.params.warmup_min_lr: must be >= 0, got -1e-05", NULL),
    /* ---- zero_optimization and offload ---- */
    P("{\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucketsize\": 5e7}}", CFG, "zero_optimization.stage3_prefetch_bucketsize: unknown key", "did you mean stage3_prefetch_bucket_size?"),
    P("{\"zero_optimization\": {\"reduce_bucket_size\": 0}}", CFG, "zero_optimization.reduce_bucket_size: must be >= 1, got 0", NULL),
    P("{\"zero_optimization\": {\"allgather_bucket_size\": -5e8}}", CFG, "zero_optimization.allgather_bucket_size: must be >= 1, got -5e+08", NULL),
    /* (in zero_optimization, fp16 and bf16 "auto" keeps the default, as
     * DeepSpeed's config models drop it: test_config_parse) */
    P("{\"aio\": {\"block_size\": \"auto\"}}", CFG, "aio.block_size: \"auto\" is not accepted for this key", NULL),
    P("{\"activation_checkpointing\": {\"partition_activations\": \"auto\"}}", CFG, "activation_checkpointing.partition_activations: \"auto\" is not accepted", NULL),
    P("{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": 1e6, \"prefetch_bucket_size\": 1e6}}", CFG, "zero_optimization.prefetch_bucket_size: same setting as zero_optimization.stage3_prefetch_bucket_size", NULL),
    P("{\"zero_optimization\": {\"stage3_param_persistence_threshold\": -1}}", CFG, "zero_optimization.stage3_param_persistence_threshold: must be >= 0, got -1", NULL),
    P("{\"zero_optimization\": {\"sub_group_size\": 0}}", CFG, "zero_optimization.sub_group_size: must be >= 1, got 0", NULL),
    P("{\"zero_optimization\": {\"cpu_offload\": true}}", UNS, "zero_optimization.cpu_offload: a DeepSpeed key zero-engine does not implement", "got true"),
    P("{\"zero_optimization\": 3}", CFG, "zero_optimization: must be an object, got 3", NULL),
    P("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"gpu\"}}}", CFG, "zero_optimization.offload_optimizer.device: must be one of \"none\", \"cpu\", \"nvme\", got \"gpu\"", NULL),
    P("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 1.5}}}", CFG, "zero_optimization.offload_optimizer.ratio: must be in [0, 1], got 1.5", NULL),
    P("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"buffer_count\": 0}}}", CFG, "zero_optimization.offload_param.buffer_count: must be >= 1, got 0", NULL),
    P("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"buffer_size\": 1e8}}}", CFG, "zero_optimization.offload_optimizer.buffer_size: unknown key", NULL),
    P("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": 5}}}", CFG, "zero_optimization.offload_param.nvme_path: must be a directory path or null, got 5", NULL),
    P("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"super_offload\": true}}}", UNS, "zero_optimization.offload_optimizer.super_offload: a DeepSpeed key zero-engine does not implement", NULL),
    P("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", \"pipeline_read\": 1}}}", CFG, "zero_optimization.offload_optimizer.pipeline_read: must be true or false, got 1", NULL),
    P("{\"aio\": {\"block_size\": 1000000}}", CFG, "aio.block_size: must be a multiple of 4096 (direct I/O works in whole blocks), got 1000000", NULL),
    P("{\"aio\": {\"block_size\": 2048}}", CFG, "aio.block_size: must be", NULL),
    P("{\"aio\": {\"queue_depth\": 0}}", CFG, "aio.queue_depth: must be", NULL),
    P("{\"aio\": {\"thread_count\": 2, \"intra_op_parallelism\": 2}}", CFG, "aio.intra_op_parallelism: same setting as aio.thread_count, which is also given; keep one", NULL),
    P("{\"aio\": {\"use_gds\": true}}", UNS, "aio.use_gds: GPUDirect Storage is not implemented", NULL),
    P("{\"aio\": {\"queue_dept\": 4}}", CFG, "aio.queue_dept: unknown key (did you mean queue_depth?)", NULL),
    P("{\"aio\": 5}", CFG, "aio: must be", NULL),
    /* ---- other sections ---- */
    P("{\"communication_data_type\": \"fp8\"}", CFG, "communication_data_type: must be one of null, \"fp32\", \"fp16\", \"bf16\", got \"fp8\"", NULL),
    P("{\"checkpoint\": {\"tag_validation\": \"Maybe\"}}", CFG, "checkpoint.tag_validation: must be one of \"Ignore\", \"Warn\", \"Fail\", got \"Maybe\"", NULL),
    P("{\"checkpoint\": {\"use_node_local_storage\": true}}", UNS, "checkpoint.use_node_local_storage: a DeepSpeed key zero-engine does not implement", NULL),
    P("{\"zero_engine\": {\"backend\": \"tpu\"}}", CFG, "zero_engine.backend: must be one of \"cpu\", \"cuda\", \"auto\", got \"tpu\"", NULL),
    P("{\"zero_engine\": {\"comm\": \"gloo\"}}", CFG, "zero_engine.comm: must be one of \"auto\", \"nccl\", \"mpi\", got \"gloo\"", NULL),
    P("{\"zero_engine\": {\"comm_timeout_s\": 0}}", CFG, "zero_engine.comm_timeout_s: must be > 0, got 0", NULL),
    P("{\"zero_engine\": {\"qgz_scheme\": \"int2\"}}", CFG, "zero_engine.qgz_scheme: must be one of \"int8\", \"int4\", got \"int2\"", NULL),
    P("{\"zero_engine\": {\"num_threads\": -1}}", CFG, "zero_engine.num_threads: must be 0..4096, got -1", NULL),
    P("{\"zero_engine\": {\"timeout\": 10}}", CFG, "zero_engine.timeout: unknown key", NULL),
    P("{\"activation_checkpointing\": {\"number_checkpoints\": -1}}", CFG, "activation_checkpointing.number_checkpoints: must be >= 0, got -1", NULL),
    P("{\"activation_checkpointing\": {\"partition_activation\": true}}", CFG, "activation_checkpointing.partition_activation: unknown key", "did you mean partition_activations?"),
    P("{\"gradient_clipping\": -1}", CFG, "gradient_clipping: must be >= 0, got -1", NULL),
    P("{\"gradient_predivide_factor\": 0}", CFG, "gradient_predivide_factor: must be > 0, got 0", NULL),
    P("{\"steps_per_print\": \"auto\"}", CFG, "steps_per_print: \"auto\" is not accepted for this key", NULL),
    P("{\"dataloader_drop_last\": \"auto\"}", CFG, "dataloader_drop_last: \"auto\" is not accepted", NULL),
    P("{\"sparse_gradients\": 1}", CFG, "sparse_gradients: must be true or false, got 1", NULL),
    P("{\"sparse_gradients\": \"true\"}", CFG, "sparse_gradients: must be true or false, got \"true\"", NULL),
    /* ---- JSON itself ---- */
    P("[1, 2]", CFG, "the top level must be a JSON object, got [1, 2]", NULL),
    P("{\"train_batch_size\": 8,}", CFG, "<string>:1:", "JSON syntax error"),
    P("{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}}", CFG, "zero_optimization.stage: duplicate key", "keep one"),
    P("{\"train_batch_size\": 8, \"train_batch_size\": 8}", CFG, "train_batch_size: duplicate key", "keep one"),
    P("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1, \"betas\": [0.9, 0.99], \"lr\": 2}}}", CFG, "optimizer.params.lr: duplicate key", "keep one"),
    P("{\"zero_engine\": {\"a\\\"b\": {}, \"x\": 1, \"x\": 2}}", CFG, "zero_engine.x: duplicate key", "keep one"),
    P("{\"train_batch_size\": 8} {}", CFG, "JSON syntax error", "end of file expected"),
    /* ---- resolve: cross-key checks ---- */
    R("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}", 1, CFG, "fp16.enabled and bf16.enabled: both true", NULL),
    R("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\"}}", 1, CFG, "scheduler.params.total_num_steps: required by WarmupDecayLR", NULL),
    R("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": \"auto\"}}}", 1, CFG, "scheduler.params.total_num_steps: \"auto\" needs the run's length and none was given: set hints.total_num_steps, or hints.epochs with training data (ds_init_desc.hints)", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}", 1, CFG, "zero_optimization.offload_param.device: \"cpu\" needs zero_optimization.stage 3, got stage 2", NULL),
    /* ZeRO++ qwZ quantizes stage 3's parameter gathers; other stages have none */
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"zero_quantized_weights\": true}}", 1, CFG, "zero_optimization.zero_quantized_weights: true needs zero_optimization.stage 3 (only stage 3 all-gathers parameters), got stage 2", NULL),
    P("{\"zero_optimization\": {\"zero_quantized_weights\": 1}}", CFG, "zero_optimization.zero_quantized_weights: must be true or false, got 1", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, \"zero_quantized_gradients\": true}}", 1, CFG, "zero_optimization.zero_quantized_gradients: true needs zero_optimization.stage 3 (DeepSpeed quantizes only stage 3's gradient reduce-scatter), got stage 1", NULL),
    P("{\"zero_optimization\": {\"zero_quantized_gradients\": \"yes\"}}", CFG, "zero_optimization.zero_quantized_gradients: must be true or false, got \"yes\"", NULL),
    /* hpZ and MiCS (zero/groups.h): stage 3 only, one of them, MiCS without
     * offload; the sizes against the world: test_hier --refusals */
    P("{\"zero_optimization\": {\"zero_hpz_partition_size\": -1}}", CFG, "zero_optimization.zero_hpz_partition_size: must be >= 0, got -1", NULL),
    P("{\"zero_optimization\": {\"mics_shard_size\": -2}}", CFG, "zero_optimization.mics_shard_size: must be >= -1, got -2", NULL),
    P("{\"zero_optimization\": {\"mics_hierarchical_params_gather\": 1}}", CFG, "zero_optimization.mics_hierarchical_params_gather: must be true or false, got 1", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"zero_hpz_partition_size\": 2}}", 2, CFG, "zero_optimization.zero_hpz_partition_size: 2 needs zero_optimization.stage 3", "got stage 2"),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, \"mics_shard_size\": 2}}", 2, CFG, "zero_optimization.mics_shard_size: 2 needs zero_optimization.stage 3", "got stage 1"),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"mics_hierarchical_params_gather\": true}}", 2, CFG, "zero_optimization.mics_hierarchical_params_gather: true needs zero_optimization.mics_shard_size > 0", "got -1"),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 2, \"mics_shard_size\": 2}}", 2, CFG, "zero_optimization.zero_hpz_partition_size 2 and mics_shard_size 2: choose one", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 1, \"offload_optimizer\": {\"device\": \"cpu\"}}}", 2, CFG, "zero_optimization.mics_shard_size: 1 with offload_optimizer: MiCS does not offload", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": \"cpu\"}}}", 1, CFG, "zero_optimization.offload_optimizer.device: \"cpu\" needs zero_optimization.stage >= 1, got stage 0", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": \"nvme\"}}}", 1, CFG, "zero_optimization.offload_optimizer.device: \"nvme\" needs zero_optimization.stage >= 1, got stage 0", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": null}}}", 1, CFG, "zero_optimization.offload_optimizer.nvme_path: required with device \"nvme\" (a folder on the NVMe drive), absent, null or empty", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": \"nvme\"}}}", 1, CFG, "zero_optimization.offload_optimizer.nvme_path: required with device \"nvme\" (a folder on the NVMe drive), absent, null or empty", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": null}}}", 1, CFG, "zero_optimization.offload_param.nvme_path: required with device \"nvme\" (a folder on the NVMe drive), absent, null or empty", NULL),
    R("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}}}", 1, CFG, "zero_optimization.offload_optimizer.ratio: partial offload (< 1) needs zero_optimization.stage 3, got ratio 0.5 with stage 2", NULL),
    /* ---- resolve: the batch rule ---- */
    R("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}", 2, CFG,
      "train_batch_size 32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * world_size 2 (world size from MPI (OMPI_COMM_WORLD_SIZE))", NULL),
    R("{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4}", 2, CFG,
      "train_batch_size 30 is not a multiple of train_micro_batch_size_per_gpu 4 * world_size 2: gradient_accumulation_steps would be 3.75", "(world size from MPI (OMPI_COMM_WORLD_SIZE))"),
    R("{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 16}", 1, CFG,
      "train_batch_size 8 is not a multiple of train_micro_batch_size_per_gpu 16 * world_size 1: gradient_accumulation_steps would be 0.5", NULL),
    R("{\"train_batch_size\": 30, \"gradient_accumulation_steps\": 4}", 2, CFG,
      "train_batch_size 30 is not a multiple of gradient_accumulation_steps 4 * world_size 2: train_micro_batch_size_per_gpu would be 3.75", "world size from MPI"),
    R("{\"train_batch_size\": 30}", 4, CFG,
      "train_batch_size 30 is not a multiple of world_size 4", "train_micro_batch_size_per_gpu would be 7.5"),
    R("{}", 2, CFG, "batch size: set train_batch_size or train_micro_batch_size_per_gpu", NULL),
    R("{\"gradient_accumulation_steps\": 4}", 2, CFG, "batch size: set train_batch_size or train_micro_batch_size_per_gpu", "gradient_accumulation_steps alone cannot give the others"),
    R("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\"}", 2, CFG, "batch size: set train_batch_size or train_micro_batch_size_per_gpu", NULL),
    /* ---- resolve: hints that disagree with the file ---- */
    {"{\"train_micro_batch_size_per_gpu\": 16}", 2, 8, 0, 0, CFG,
     "train_micro_batch_size_per_gpu is 16 in the config", "the trainer's micro batch (hints.micro_batch) is 8"},
    {"{\"train_batch_size\": 64, \"gradient_accumulation_steps\": 2}", 2, 8, 0, 0, CFG,
     "train_batch_size 64 != train_micro_batch_size_per_gpu 8 (from hints.micro_batch) * gradient_accumulation_steps 2 * world_size 2", "(world size from MPI (OMPI_COMM_WORLD_SIZE))"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 5e-4}}}", 1, 0, 1e-3, 0, CFG,
     "optimizer.params.lr: the config says 0.0005 but the trainer's value (hints.lr) is 0.001", NULL},
    {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 100}}}", 1, 0, 0, 200, CFG,
     "scheduler.params.total_num_steps: the config says 100 but the trainer's value (hints.total_num_steps) is 200", NULL},
    {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 0.01}}}", 1, 0, 1e-3, 0, CFG,
     "scheduler.params.warmup_max_lr: the config says 0.01 but the trainer's value (hints.lr) is 0.001", NULL},
};

static void quiet(void *user, const char *msg) {
    (void)user, (void)msg;
}

int main(void) {
    size_t n = sizeof k_cases / sizeof k_cases[0];
    for (size_t i = 0; i < n; i++) {
        const bad_case *b = &k_cases[i];
        ds_clear_error();
        ds_config c;
        ds_status st = ds_config_parse_string(b->json, &c, quiet, NULL);
        const char *stage = "parse";
        if (b->world > 0) {
            if (st != DS_OK) {
                TEST_FAIL("case %zu: %s\n  expected parse to succeed, got %s: %s", i, b->json,
                          ds_status_to_string(st), ds_last_error());
                continue;
            }
            ds_config_hints h;
            ds_config_hints_init(&h);
            h.world_size = b->world;
            h.world_source = "MPI (OMPI_COMM_WORLD_SIZE)";
            if (b->hint_micro > 0) h.micro_batch = b->hint_micro;
            if (b->hint_lr > 0) h.lr = b->hint_lr;
            if (b->hint_total > 0) h.total_num_steps = b->hint_total;
            ds_config before = c;
            st = ds_config_resolve(&c, &h);
            stage = "resolve";
            if (st != DS_OK && memcmp(&before, &c, sizeof c) != 0) {
                TEST_FAIL("case %zu: a failed resolve modified the config", i);
            }
        }
        const char *msg = ds_last_error();
        int ok = st == b->st && strstr(msg, b->sub1) && (!b->sub2 || strstr(msg, b->sub2));
        if (!ok) {
            TEST_FAIL("case %zu (%s): %s\n  expected %s with \"%s\"%s%s%s\n  got      %s: \"%s\"",
                      i, stage, b->json, ds_status_to_string(b->st), b->sub1,
                      b->sub2 ? " and \"" : "", b->sub2 ? b->sub2 : "", b->sub2 ? "\"" : "",
                      ds_status_to_string(st), msg);
        }
    }
    /* A world size below 1 is the caller's bug, not the config's. */
    {
        ds_config c;
        ds_config_hints h;
        ds_config_hints_init(&h);
        h.world_size = 0;
        if (ds_config_parse_string("{\"train_batch_size\": 8}", &c, quiet, NULL) != DS_OK ||
            ds_config_resolve(&c, &h) != DS_ERR_INVALID_ARG ||
            !strstr(ds_last_error(), "hints.world_size must be >= 1, got 0")) {
            TEST_FAIL("world_size 0: expected DS_ERR_INVALID_ARG, got \"%s\"", ds_last_error());
        }
    }
    printf("%zu bad configs\n", n + 1);
    return test_finish("test_config_bad");
}
