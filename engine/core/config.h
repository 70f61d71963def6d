/* ds_config.json: DeepSpeed's keys, DeepSpeed's defaults.
 *
 * Reading happens in two phases:
 *   1. ds_config_parse_file / ds_config_parse_string: syntax, types, ranges,
 *      unknown and duplicate keys. Values given as "auto" are marked, not
 *      guessed.
 *   2. ds_config_resolve: fills every "auto" from the world size, the model
 *      and the trainer's hints, then applies the batch rule
 *         train_batch_size = train_micro_batch_size_per_gpu
 *                            * gradient_accumulation_steps * world_size
 *      (any two of the three give the third; one alone takes the others as 1
 *      as DeepSpeed does; all three must agree).
 *
 * Errors name the key path and the value:
 *      "zero_optimization.stage: must be 0..3, got 4"
 *      "train_batch_size 32 != train_micro_batch_size_per_gpu 4 *
 *       gradient_accumulation_steps 2 * world_size 2 (world size from MPI
 *       (OMPI_COMM_WORLD_SIZE))"
 * Unknown keys: a warning at the top level (DeepSpeed ignores them too), an
 * error inside a section (where a typo silently changes training).
 * Duplicate keys anywhere: an error. */
#ifndef DS_CORE_CONFIG_H
#define DS_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_optim_type { DS_OPTIM_ADAM = 0, DS_OPTIM_ADAMW, DS_OPTIM_SGD } ds_optim_type;

/* DeepSpeed's communication-compressed Adams (zero/onebit.h). The optimizer
 * is then DS_OPTIM_ADAMW (their weight decay is decoupled) without bias
 * correction, and these say which compression runs on top of it. */
typedef enum ds_onebit_type {
    DS_ONEBIT_NONE = 0,
    DS_ONEBIT_ADAM,    /* "OneBitAdam": 1-bit Adam, arXiv:2102.02888 */
    DS_ONEBIT_ZERO_ONE /* "ZeroOneAdam": 0/1 Adam, arXiv:2202.06009 */
} ds_onebit_type;

typedef enum ds_sched_type {
    DS_SCHED_NONE = 0, /* constant lr */
    DS_SCHED_WARMUP_LR,
    DS_SCHED_WARMUP_DECAY_LR,
    DS_SCHED_WARMUP_COSINE_LR,
} ds_sched_type;

typedef enum ds_warmup_type { DS_WARMUP_LOG = 0, DS_WARMUP_LINEAR } ds_warmup_type;

typedef enum ds_offload_device {
    DS_OFFLOAD_NONE = 0,
    DS_OFFLOAD_CPU,
    DS_OFFLOAD_NVME,
} ds_offload_device;

typedef struct ds_offload_config {
    ds_offload_device device;   /* "none" | "cpu" | "nvme"; default none */
    bool pin_memory;            /* default true, as DeepSpeed >= 0.19.5 */
    char nvme_path[256];        /* default "" (DeepSpeed's None) */
    int buffer_count;           /* default 4 (optimizer) / 5 (param) */
    int64_t buffer_size;        /* offload_param.buffer_size, default 1e8 */
    int64_t max_in_cpu;         /* offload_param.max_in_cpu, default 1e9 */
    double ratio;               /* offload_optimizer.ratio, default 1.0 */
    bool pipeline_read;         /* offload_optimizer, nvme: read sub-group k+1 during the
                                   update of k; default false */
    bool pipeline_write;        /* offload_optimizer, nvme: write sub-group k-1 during the
                                   update of k; default false */
    bool fast_init;             /* offload_optimizer, nvme: moments not written at start-up
                                   (the preallocated files read as zeros); default false */
} ds_offload_config;

/* Section "aio": how NVMe swap files are read and written (DeepSpeed's
 * async I/O handle; zero-engine's engine is offload/aio.h). */
typedef struct ds_aio_config {
    int64_t block_size;         /* bytes per request, default 1048576 (a multiple of 4096) */
    int queue_depth;            /* requests in flight per thread, default 8 */
    int thread_count;           /* I/O threads, default 1; "intra_op_parallelism" is the
                                   newer DeepSpeed name of the same key */
    bool single_submit;         /* default false */
    bool overlap_events;        /* default true */
} ds_aio_config;

/* Sections "tensorboard" and "csv_monitor" (DeepSpeed's monitor config;
 * engine/monitor/monitor.h writes them). */
typedef struct ds_monitor_config {
    bool enabled;               /* default false */
    char output_path[512];      /* default "" (the current folder) */
    char job_name[128];         /* default "DeepSpeedJobName"; a folder in output_path */
} ds_monitor_config;

/* Section "flops_profiler" (DeepSpeed's; engine/flops_profiler.h). */
typedef struct ds_flops_profiler_config {
    bool enabled;               /* default false */
    double recompute_fwd_factor; /* default 0; accepted: the counts are measured, a
                                    recomputed forward included */
    int64_t profile_step;       /* default 1: the optimizer step profiled */
    int64_t module_depth;       /* default -1: every depth of the module names */
    int64_t top_modules;        /* default 1: modules listed per depth */
    bool detailed;              /* default true: the per-module table */
    char output_file[512];      /* default "": stdout */
} ds_flops_profiler_config;

/* Where a resolved value came from (ds_config.origin). */
typedef enum ds_config_source {
    DS_SRC_DEFAULT = 0,  /* DeepSpeed's default: absent from the file, or
                            "auto" / a missing section with nothing given */
    DS_SRC_CONFIG,       /* written in the file as a value */
    DS_SRC_HINT,         /* the caller's value (a trainer flag the user gave) */
    DS_SRC_HINT_DEFAULT, /* the caller's default for it (a flag left out) */
    DS_SRC_COMPUTED,     /* "auto" computed: the batch rule, the run's length,
                            the hidden size, the optimizer lr */
} ds_config_source;

/* The keys whose origin is tracked: those "auto" or a missing section can
 * fill. */
typedef enum ds_config_key {
    DS_KEY_TRAIN_BATCH_SIZE = 0,
    DS_KEY_MICRO_BATCH,
    DS_KEY_GRAD_ACCUM,
    DS_KEY_GRADIENT_CLIPPING,
    DS_KEY_OPTIMIZER,          /* optimizer.type */
    DS_KEY_LR,
    DS_KEY_BETAS,
    DS_KEY_EPS,
    DS_KEY_WEIGHT_DECAY,
    DS_KEY_SCHEDULER,          /* scheduler.type */
    DS_KEY_WARMUP_MIN_LR,
    DS_KEY_WARMUP_MAX_LR,
    DS_KEY_WARMUP_NUM_STEPS,
    DS_KEY_TOTAL_NUM_STEPS,
    DS_KEY_FP16,               /* fp16.enabled */
    DS_KEY_BF16,               /* bf16.enabled */
    DS_KEY_REDUCE_BUCKET_SIZE,
    DS_KEY_PREFETCH_BUCKET_SIZE,
    DS_KEY_PERSISTENCE_THRESHOLD,
    DS_KEY_COUNT
} ds_config_key;

typedef struct ds_config_origin {
    ds_config_source source;
    bool was_auto;   /* the file wrote "auto" */
    bool used;       /* the key applies to this config (a scheduler's keys
                        only with that scheduler, ...) */
    char from[128];  /* how: "--lr", "hints.micro_batch", "16 x 1 x 2 ranks",
                        "no optimizer section"; "" when nothing to add */
} ds_config_origin;

typedef struct ds_config {
    /* ---- batch (after resolve all three are > 0) ---- */
    int64_t train_batch_size;               /* default: derived */
    int64_t train_micro_batch_size_per_gpu; /* default: derived */
    int64_t gradient_accumulation_steps;    /* default: derived */
    bool train_batch_size_auto, micro_batch_auto, grad_accum_auto;
    bool train_batch_size_set, micro_batch_set, grad_accum_set; /* given in the file */

    int64_t steps_per_print;     /* default 0 = off (DeepSpeed's None) */
    bool wall_clock_breakdown;   /* default false */
    bool dataloader_drop_last;   /* default false */
    bool prescale_gradients;     /* default false */
    double gradient_predivide_factor; /* default 1.0 */
    double gradient_clipping;    /* default 1.0 (DeepSpeed >= 0.19.3); 0 = off */
    bool sparse_gradients;       /* default false: row_sparse_grad parameters (embedding
                                  * tables) exchanged as (row index, row) pairs at stages 0
                                  * to 3 (zero/grad_sparse.h) */
    bool gradient_clipping_auto;

    /* ---- optimizer ---- */
    bool optimizer_set;          /* section present (else the trainer's default) */
    ds_optim_type optimizer;     /* "Adam" | "AdamW" | "SGD" (case-insensitive). After
                                  * parsing ADAMW iff adam_w_mode (an "Adam" with
                                  * adam_w_mode true is stored as ADAMW), ADAM means
                                  * classic L2 Adam (adam_w_mode false). */
    double lr;                   /* default 1e-3 */
    double betas[2];             /* default 0.9, 0.999 */
    double eps;                  /* default 1e-8 */
    double weight_decay;         /* default 0.0 */
    bool adam_w_mode;            /* default true; "AdamW" forces true */
    bool bias_correction;        /* default true */
    double momentum;             /* SGD, default 0.0 */
    double dampening;            /* SGD, default 0.0 */
    bool nesterov;               /* SGD, default false */
    /* OneBitAdam / ZeroOneAdam (DeepSpeed's parameter names and defaults) */
    ds_onebit_type onebit;       /* DS_ONEBIT_NONE for Adam, AdamW, SGD */
    int64_t freeze_step;         /* OneBitAdam: uncompressed warm-up steps, 100000 */
    int64_t var_freeze_step;     /* ZeroOneAdam: last step that updates the variance, 100000 */
    int64_t var_update_scaler;   /* ZeroOneAdam: kappa, variance updates per interval, 16 */
    int64_t local_step_scaler;   /* ZeroOneAdam: alpha, syncs per local-step interval, 32678 */
    int64_t local_step_clipper;  /* ZeroOneAdam: H, the longest local-step interval, 16 */
    bool cuda_aware;             /* accepted (DeepSpeed's MPI backend option), default false */
    char comm_backend_name[16];  /* accepted: "nccl" (default), "mpi", "compressed"; the
                                  * engine's own communicator carries the traffic */
    bool lr_auto, betas_auto, eps_auto, weight_decay_auto;
    /* a number was written in the file (for the hint mismatch check) */
    bool lr_set, betas_set, eps_set, weight_decay_set, gradient_clipping_set;

    /* ---- scheduler ---- */
    ds_sched_type scheduler;     /* section absent: NONE */
    double warmup_min_lr;        /* default 0.0 */
    double warmup_max_lr;        /* default 0.001; WarmupLR without it: the optimizer
                                  * lr (DeepSpeed's WarmupLR(warmup_max_lr=None)) */
    int64_t warmup_num_steps;    /* default 1000 */
    ds_warmup_type warmup_type;  /* default "log" */
    int64_t total_num_steps;     /* WarmupDecayLR / WarmupCosineLR; required there;
                                  * 0 = not given */
    double warmup_min_ratio;     /* WarmupCosineLR, default 0.0 */
    double cos_min_ratio;        /* WarmupCosineLR, default 0.0001 */
    int64_t last_batch_iteration;/* default -1 */
    bool warmup_min_lr_auto, warmup_max_lr_auto, warmup_num_steps_auto, total_num_steps_auto;
    bool warmup_max_lr_set, warmup_num_steps_set, total_num_steps_set; /* given as numbers */
    bool warmup_min_lr_set;
    bool scheduler_set;          /* section present */
    /* The trainer's schedule (no scheduler section, hints.lr_scheduler_type):
     * HF's LambdaLR (get_linear / get_cosine / get_constant_schedule_with_
     * warmup) stepped as its Trainer steps it, written with the keys of the
     * DeepSpeed scheduler of the same shape plus "hf_lambda_lr": true. Step s
     * (0-based) runs at lr * lambda(s); warmup_num_steps may be 0 and is not
     * raised to DeepSpeed's least (engine/core/sched.h). */
    bool sched_hf;
    /* The trainer's AdamW (no optimizer section, hints given): HF's two
     * parameter groups, weight decay only for the parameters ds_param_decays
     * says (biases and normalization weights left out); written as
     * optimizer.params "hf_param_groups": true. A written optimizer section
     * (DeepSpeed's one group) decays every parameter. */
    bool optim_hf;

    /* ---- precision ---- */
    bool fp16_enabled;           /* default false */
    bool fp16_auto_cast;         /* default false */
    double loss_scale;           /* default 0 = dynamic */
    int initial_scale_power;     /* default 16 */
    int64_t loss_scale_window;   /* default 1000 */
    int hysteresis;              /* default 2 */
    bool consecutive_hysteresis; /* default false */
    double min_loss_scale;       /* default 1 */
    bool bf16_enabled;           /* default false; section "bf16" or "bfloat16" */
    bool fp16_enabled_auto, bf16_enabled_auto;
    bool fp16_enabled_set, bf16_enabled_set; /* written as true / false */
    /* "communication_data_type": null (= the training dtype), "fp32", "fp16", "bf16" */
    bool comm_dtype_set;
    ds_dtype communication_data_type;

    /* ---- zero_optimization ---- */
    int zero_stage;                      /* default 0 */
    bool allgather_partitions;           /* default true */
    int64_t allgather_bucket_size;       /* default 5e8 */
    bool overlap_comm;                   /* default false (true for stage 3 if unset) */
    bool overlap_comm_set;
    bool reduce_scatter;                 /* default true */
    int64_t reduce_bucket_size;          /* default 5e8 */
    bool contiguous_gradients;           /* default true */
    int64_t stage3_prefetch_bucket_size; /* default 5e7 */
    int64_t stage3_param_persistence_threshold; /* default 1e5 */
    int64_t stage3_max_live_parameters;  /* default 1e9 */
    int64_t stage3_max_reuse_distance;   /* default 1e9 */
    bool stage3_gather_16bit_weights_on_model_save; /* default false */
    int64_t sub_group_size;              /* default 1e9 */
    bool round_robin_gradients;          /* default false */
    /* ZeRO++ qwZ: stage 3's parameter all-gathers carry blockwise int8
     * (engine/backend/math.h 2b); default false, stage 3 only */
    bool zero_quantized_weights;
    /* ZeRO++ qgZ: stage 3's gradient reduce-scatter carries blockwise int8
     * (engine/comm/codec_q8.h); default false, stage 3 only */
    bool zero_quantized_gradients;
    /* ZeRO++ hpZ: a secondary copy of the stage-3 parameters partitioned
     * over groups of this many consecutive ranks (a host's), from which the
     * backward gathers; 0 or 1 (default 1): off. Stage 3 only. */
    int64_t zero_hpz_partition_size;
    /* MiCS: stage 3's parameters, gradients and optimizer state partitioned
     * over groups of this many consecutive ranks and replicated across the
     * groups; -1 (default) or 0: off (the whole world is one group). */
    int64_t mics_shard_size;
    /* MiCS: gather parameters across hosts first (ranks of the same place
     * on each host), then inside each host; needs a shard group spanning
     * hosts. Default false. */
    bool mics_hierarchical_params_gather;
    bool reduce_bucket_size_auto, prefetch_bucket_size_auto, persistence_threshold_auto;
    bool reduce_bucket_size_set, prefetch_bucket_size_set, persistence_threshold_set;
    ds_offload_config offload_optimizer;
    ds_offload_config offload_param;
    ds_aio_config aio;                   /* section "aio" */
    ds_monitor_config tensorboard;       /* section "tensorboard" */
    ds_monitor_config csv_monitor;       /* section "csv_monitor" */
    ds_flops_profiler_config flops_profiler; /* section "flops_profiler" */

    /* ---- activation_checkpointing ---- */
    bool activation_checkpointing;       /* section present: recompute checkpointable modules */
    bool partition_activations;          /* default false */
    bool cpu_checkpointing;              /* default false */
    bool contiguous_memory_optimization; /* default false */
    int64_t number_checkpoints;          /* default 0 = every checkpointable module */
    bool synchronize_checkpoint_boundary;/* default false */
    bool profile_checkpointing;          /* default false */

    /* ---- checkpoint ---- */
    int checkpoint_tag_validation;       /* 0 Ignore, 1 Warn (default), 2 Fail */

    /* ---- zero-engine extensions, section "zero_engine" ---- */
    char backend[16];                    /* "cpu" (default) | "cuda" | "auto" */
    char comm[8];                        /* "auto" (default) | "nccl" | "mpi": the data path
                                            between ranks. auto: MPI on cpu, NCCL on cuda at
                                            more than one rank; "mpi" on cuda copies device
                                            buffers through pinned host memory and lets
                                            ranks share a GPU */
    double comm_timeout_s;               /* default 300 */
    bool check_collectives;              /* default false: before every collective the
                                            ranks compare what they are about to call and
                                            fail alike where one differs (engine/comm/
                                            comm.h, "Checked collectives") */
    int num_threads;                     /* default 0 = OMP_NUM_THREADS or cores */
    int max_consecutive_skips;           /* default 3: steps in a row with non-finite
                                            gradients that fp32, bf16 and static-scale
                                            fp16 skip before ds_step fails */
    int save_on_signal;                  /* default 0 (none): a signal that, besides
                                            SIGTERM, asks for a save and exit (ds_preempt_*) */
    double preempt_deadline_s;           /* default 30: the longest a save-and-exit may take */
    char gemm_input_dtype[8];            /* "auto" (default) | "bf16" | "fp32": what the
                                            backend's GEMMs round A and B to (fp32
                                            accumulation either way); resolve turns auto
                                            into bf16 under bf16.enabled, else fp32;
                                            "bf16" needs bf16.enabled */
    bool gather_rows;                    /* default true: at stages 1-2 a table that declares
                                            rows_read_by is gathered after the update by the
                                            rows the next micro-batch reads
                                            (zero/param_rows.h), at stage 3 (without qwZ,
                                            hpZ, MiCS and offload_param) each gather of
                                            its module by the micro-batch's rows
                                            (zero/stage3_rows.c); false: whole */
    char qgz_scheme[8];                  /* "int8" (default) | "int4": how
                                            zero_quantized_gradients quantizes stage 3's
                                            gradient reduce-scatter: int8 in one all-to-all
                                            over the ranks (engine/comm/codec_q8.h), or
                                            DeepSpeed's int4 in two levels, inside hosts then
                                            across them, plain on one host (codec_q4.h) */

    /* ---- provenance ---- */
    char path[512];                      /* file it came from, "" for a string */
    int world_size;                      /* set by resolve */
    char world_source[96];               /* set by resolve, e.g. "MPI (OMPI_COMM_WORLD_SIZE)" */
    ds_config_origin origin[DS_KEY_COUNT]; /* set by resolve: where each tracked value came from */
} ds_config;

/* Signals zero_engine.save_on_signal accepts: "SIGUSR1" or "USR1" (also
 * USR2, TERM, INT, HUP, XCPU, PWR) -> the number, 0 for anything else. */
int ds_signal_from_name(const char *name);
/* "SIGUSR1" for a signal of that list, "SIG<n>" otherwise (static text). */
const char *ds_signal_name(int signo);

/* The GEMM input type a config runs with: DS_BF16 for
 * zero_engine.gemm_input_dtype "bf16" (or, before ds_config_resolve, "auto"
 * with bf16.enabled); else DS_F32 (fp16 training keeps fp32 GEMMs). The
 * engine hands it to ds_backend_set_gemm_inputs at ds_initialize. */
ds_dtype ds_config_gemm_inputs(const ds_config *c);
/* What zero_engine.comm "auto" means for c's backend and world_size: "mpi"
 * on cpu; on cuda "nccl" between ranks, "mpi" at one rank (nothing crosses);
 * "auto" while the backend itself is "auto" (ds_initialize decides). */
const char *ds_config_comm_auto(const ds_config *c);
/* Settle c->comm against c->backend: "auto" becomes ds_config_comm_auto's
 * answer; "nccl" with the cpu backend is DS_ERR_CONFIG naming the key.
 * ds_config_resolve calls it, and ds_initialize again once backend "auto"
 * has become the backend that runs. */
ds_status ds_config_settle_comm(ds_config *c);

/* Fill `c` with DeepSpeed's defaults (what an empty "{}" parses to). The
 * struct is zeroed first, so two configs with equal settings compare equal
 * byte for byte. */
void ds_config_defaults(ds_config *c);

/* "Adam", "AdamW", "SGD" / "none", "WarmupLR", "WarmupDecayLR",
 * "WarmupCosineLR" / "log", "linear" / "none", "cpu", "nvme"; never NULL. */
const char *ds_optim_type_name(ds_optim_type t);
const char *ds_sched_type_name(ds_sched_type t);
const char *ds_warmup_type_name(ds_warmup_type t);
const char *ds_offload_device_name(ds_offload_device d);

/* Parse a file / a string. Warnings (unknown top-level keys, "AdamW" with
 * adam_w_mode false, total_num_steps < warmup_num_steps) go to `warn` (may
 * be NULL: then they are printed to stderr with a "ds_config: warning:"
 * prefix). `out` is written only on success.
 * Errors: DS_ERR_CONFIG with "<file>: key.path: what, got value", or
 * "<file>:line:col: JSON syntax error: ..." from jansson (a duplicate key is
 * one, at any depth); DS_ERR_UNSUPPORTED for a DeepSpeed key or type that
 * zero-engine does not implement ("optimizer.type: Lamb ..."); DS_ERR_IO
 * when the file cannot be read. Integer keys accept integral reals (5e8);
 * booleans must be true/false. */
typedef void (*ds_config_warn_fn)(void *user, const char *message);
ds_status ds_config_parse_file(const char *path, ds_config *out, ds_config_warn_fn warn,
                               void *user);
ds_status ds_config_parse_string(const char *json, ds_config *out, ds_config_warn_fn warn,
                                 void *user);

/* The trainer-side values that fill "auto" keys and missing sections, by
 * index into ds_config_hints.name and .is_default. */
typedef enum ds_hint_id {
    DS_HINT_LR = 0,            /* lr                 HF --learning_rate */
    DS_HINT_WEIGHT_DECAY,      /* weight_decay       HF --weight_decay */
    DS_HINT_BETA1,             /* beta1              HF --adam_beta1 */
    DS_HINT_BETA2,             /* beta2              HF --adam_beta2 */
    DS_HINT_EPS,               /* eps                HF --adam_epsilon */
    DS_HINT_GRADIENT_CLIPPING, /* gradient_clipping  HF --max_grad_norm */
    DS_HINT_MICRO_BATCH,       /* micro_batch        HF --per_device_train_batch_size */
    DS_HINT_GRAD_ACCUM,        /* gradient_accumulation_steps */
    DS_HINT_WARMUP,            /* warmup_num_steps   HF --warmup_steps */
    DS_HINT_TOTAL_STEPS,       /* total_num_steps    HF --max_steps */
    DS_HINT_EPOCHS,            /* epochs             HF --num_train_epochs */
    DS_HINT_LR_SCHEDULER,      /* lr_scheduler_type  HF --lr_scheduler_type */
    DS_HINT_FP16,              /* fp16               HF --fp16 */
    DS_HINT_BF16,              /* bf16               HF --bf16 */
    DS_HINT_COUNT
} ds_hint_id;

/* What the world and the trainer know, for "auto", missing sections and the
 * batch rule. Start from ds_config_hints_init (nothing given) or
 * ds_config_hints_hf_defaults (a Hugging Face Trainer's defaults). */
typedef struct ds_config_hints {
    int world_size;            /* required, >= 1 */
    const char *world_source;  /* for messages, e.g. "MPI (OMPI_COMM_WORLD_SIZE)" */
    int hidden_size;           /* model's, for bucket sizes; 0 = unknown */
    /* trainer's values for "auto" (HF Trainer's role); < 0 = not given */
    double lr, weight_decay, eps, beta1, beta2;
    double gradient_clipping;   /* HF's max_grad_norm */
    int64_t micro_batch;        /* e.g. train_cls --batch; <= 0 = not given */
    int64_t gradient_accumulation_steps; /* <= 0 = not given */
    int64_t warmup_num_steps;   /* < 0 = not given; 0 resolves to 1 (below) */
    int64_t total_num_steps;    /* < 0 = not given */
    /* Or the run's length, from which total_num_steps "auto" is computed:
     * epochs over train_rows rows (ds_initialize fills train_rows from the
     * training data), at the resolved micro batch, accumulation and world
     * size, as the engine's loader walks them. <= 0 = not given. */
    double epochs;
    int64_t train_rows;
    /* The schedule a config without a "scheduler" section gets, in HF's
     * names: "linear" (WarmupDecayLR, linear warmup, decay to 0),
     * "cosine" (WarmupCosineLR down to 0), "constant" (no scheduler),
     * "constant_with_warmup" (WarmupLR, linear warmup). NULL = not given:
     * such a config keeps a constant lr, as DeepSpeed alone does. */
    const char *lr_scheduler_type;
    int fp16, bf16;             /* 1 on, 0 off, < 0 = not given */
    /* What the caller calls each value, for messages and the start-up
     * print ("--lr" for a trainer flag); NULL: "hints.lr" and so on. */
    const char *name[DS_HINT_COUNT];
    /* A value the caller defaults rather than one the user chose (a flag
     * left out): it fills "auto" and missing optimizer / scheduler sections
     * like any hint, but a number written in the config is not checked
     * against it, and it fills no absent key (micro batch, fp16, bf16). */
    bool is_default[DS_HINT_COUNT];
} ds_config_hints;

/* Initialise hints with "not given" everywhere and world_size 1. */
void ds_config_hints_init(ds_config_hints *h);

/* ds_config_hints_init, then the Hugging Face Trainer's defaults
 * (TrainingArguments), each marked is_default: lr 5e-5, weight_decay 0,
 * betas 0.9 / 0.999, eps 1e-8, gradient_clipping (max_grad_norm) 1.0,
 * micro_batch (per_device_train_batch_size) 8, warmup 0 steps,
 * lr_scheduler_type "linear", fp16 and bf16 off. A program
 * that acts as a trainer starts here and overwrites what its user gave
 * (clearing is_default for those). */
void ds_config_hints_hf_defaults(ds_config_hints *h);

/* Resolve every "auto", fill missing optimizer / scheduler sections, apply
 * the batch rule and cross-key checks (fp16 and bf16 both enabled;
 * WarmupDecayLR without total_num_steps; offload_param without stage 3;
 * ...). Errors name the keys, the values and the hint to set. Where each
 * tracked value came from is recorded in c->origin (ds_config_origin).
 *
 * Hints work as Hugging Face's Trainer integration does
 * (HfTrainerDeepSpeedConfig.trainer_config_process / _finalize):
 *   - a key written "auto" takes the hint; without one it is an error that
 *     names the key and the hint ("optimizer.params.lr: \"auto\" needs the
 *     trainer's value: set hints.lr"), except where no trainer value is
 *     involved: warmup_min_lr "auto" is 0 (HF's fill), warmup_max_lr
 *     "auto" the optimizer lr, fp16 / bf16 "auto" off, the batch keys
 *     follow the batch rule below, reduce_bucket_size hidden^2,
 *     stage3_prefetch_bucket_size int(0.9 * hidden^2),
 *     stage3_param_persistence_threshold 10 * hidden (DeepSpeed's defaults
 *     when hidden_size is unknown); total_num_steps "auto" needs
 *     hints.total_num_steps, or hints.epochs and hints.train_rows (steps per
 *     epoch: ceil(ceil(rows per rank / micro batch) / accumulation steps),
 *     as ds_train_batch ends the last step of an epoch early; rows per rank
 *     rounded up, or down with dataloader_drop_last);
 *     warmup_num_steps 0 becomes 1, the least DeepSpeed accepts (its
 *     schedules warm up over max(2, W) steps anyway);
 *   - a key written as a number and a hint the user chose that disagrees
 *     with it is an error naming both (hints marked is_default are not
 *     checked);
 *   - without an "optimizer" section the trainer's optimizer runs: AdamW
 *     with lr, betas, eps and weight_decay from the hints, DeepSpeed's Adam
 *     defaults for those not given (lr 1e-3, betas 0.9 / 0.999, eps 1e-8,
 *     weight_decay 0). DeepSpeed itself would need a client optimizer here;
 *     zero-engine has none, so its own AdamW is that optimizer;
 *   - without a "scheduler" section and with hints.lr_scheduler_type, the
 *     schedule HF's Trainer would build (see lr_scheduler_type) from the
 *     optimizer lr, hints.warmup_num_steps (0 when not given) and the run's
 *     length as for total_num_steps "auto"; without lr_scheduler_type the lr
 *     stays constant (DeepSpeed);
 *   - the micro-batch hint fills train_micro_batch_size_per_gpu when it is
 *     "auto", or absent when the user chose it; the batch trio then follows
 *     DeepSpeed's rule ("auto" without a hint counts as not given), and a
 *     micro batch that resolves to something other than a chosen hint is an
 *     error; gradient_accumulation_steps "auto" takes its hint likewise;
 *   - fp16 / bf16 "auto" take the hint (off without one); a hint the user
 *     chose also turns on a precision whose section is absent.
 * `c` is written only on success, so a failed resolve leaves it as parsed. */
ds_status ds_config_resolve(ds_config *c, const ds_config_hints *h);

/* How the engine's loader walks an epoch of `rows` training rows at the
 * resolved batch keys, as DeepSpeed's (a DistributedSampler that pads every
 * rank to ceil(rows / world), a DataLoader whose drop_last is
 * dataloader_drop_last): each rank's micro-batches, the last one short, or
 * dropped with dataloader_drop_last; ds_config_steps_per_epoch: those over
 * gradient_accumulation_steps, rounded up (the epoch's last step takes the
 * micro-batches left, ds_train_batch). 0 when dataloader_drop_last leaves
 * no whole micro-batch. */
int64_t ds_config_micro_batches_per_epoch(const ds_config *c, size_t rows);
/* The rows one rank trains an epoch: ceil(rows / world), or its whole
 * micro-batches' with dataloader_drop_last. */
int64_t ds_config_rank_rows_per_epoch(const ds_config *c, size_t rows);
int64_t ds_config_steps_per_epoch(const ds_config *c, size_t rows);

/* Tracked keys' names ("optimizer.params.lr") and sources' names
 * ("config", "hint", "trainer default", "DeepSpeed default", "auto"). */
const char *ds_config_key_name(ds_config_key k);
const char *ds_config_source_name(ds_config_source s);

/* A short account of a resolved config, a few lines of text, each ending in
 * '\n': the batch rule with its numbers, the optimizer and the schedule
 * that will run with their parameters, every value filled from "auto", a
 * hint or a trainer default and from where, and every key whose value
 * differs from DeepSpeed's default (what the engine prints at start-up;
 * ds_config_to_json has every key). Returns a malloc'd string the caller
 * frees, or NULL when out of memory. */
char *ds_config_summary(const ds_config *c);

/* The resolved config as DeepSpeed-style JSON (every key, no "auto"), for
 * rank 0 to print at start-up and for checkpoints' meta.json. Reals are
 * written with the fewest digits that read back to the same double, so
 * parsing and resolving the text gives the same settings. The "optimizer"
 * section is always written (the optimizer that runs, also when the file had
 * none), "scheduler" when one runs. Call it after
 * ds_config_resolve. Returns a malloc'd string the caller frees, or NULL when
 * out of memory. */
char *ds_config_to_json(const ds_config *c);

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_CONFIG_H */
