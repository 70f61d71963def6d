/* ds_config_resolve: the hints (their names, defaults and HF's defaults),
 * DeepSpeed's batch rule, and the checks that involve more than one key;
 * the "auto" keys and missing sections are filled in config_fill.c. Works
 * on a copy and writes back only on success. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/config_internal.h"

static const char *const k_hint_names[DS_HINT_COUNT] = {
    "hints.lr", "hints.weight_decay", "hints.beta1", "hints.beta2", "hints.eps",
    "hints.gradient_clipping", "hints.micro_batch", "hints.gradient_accumulation_steps",
    "hints.warmup_num_steps", "hints.total_num_steps", "hints.epochs", "hints.lr_scheduler_type",
    "hints.fp16", "hints.bf16",
};

void ds_config_hints_init(ds_config_hints *h) {
    memset(h, 0, sizeof *h);
    h->world_size = 1;
    h->world_source = NULL;
    h->hidden_size = 0;
    h->lr = h->weight_decay = h->eps = h->beta1 = h->beta2 = h->gradient_clipping = -1.0;
    h->micro_batch = 0;
    h->gradient_accumulation_steps = 0;
    h->warmup_num_steps = -1;
    h->total_num_steps = -1;
    h->epochs = -1.0;
    h->train_rows = -1;
    h->lr_scheduler_type = NULL;
    h->fp16 = h->bf16 = -1;
}

void ds_config_hints_hf_defaults(ds_config_hints *h) {
    ds_config_hints_init(h);
    /* transformers' TrainingArguments defaults */
    h->lr = 5e-5;
    h->weight_decay = 0.0;
    h->beta1 = 0.9;
    h->beta2 = 0.999;
    h->eps = 1e-8;
    h->gradient_clipping = 1.0;
    /* per_device_train_batch_size: as a default it fills a micro batch
     * written "auto" only; a number in the config stands, unchecked */
    h->micro_batch = 8;
    h->warmup_num_steps = 0;
    h->lr_scheduler_type = "linear";
    h->fp16 = h->bf16 = 0;
    static const ds_hint_id defaulted[] = {DS_HINT_LR, DS_HINT_WEIGHT_DECAY, DS_HINT_BETA1,
                                           DS_HINT_BETA2, DS_HINT_EPS, DS_HINT_GRADIENT_CLIPPING,
                                           DS_HINT_MICRO_BATCH, DS_HINT_WARMUP,
                                           DS_HINT_LR_SCHEDULER, DS_HINT_FP16, DS_HINT_BF16};
    for (size_t i = 0; i < sizeof defaulted / sizeof *defaulted; i++)
        h->is_default[defaulted[i]] = true;
}

const char *cfg_hint_name(const ds_config_hints *h, ds_hint_id id) {
    return h->name[id] && h->name[id][0] ? h->name[id] : k_hint_names[id];
}

bool cfg_hint_chosen(const ds_config_hints *h, ds_hint_id id) { return !h->is_default[id]; }

ds_config_source cfg_hint_source(const ds_config_hints *h, ds_hint_id id) {
    return h->is_default[id] ? DS_SRC_HINT_DEFAULT : DS_SRC_HINT;
}

void cfg_origin(ds_config *c, ds_config_key k, ds_config_source s, const char *fmt, ...) {
    ds_config_origin *o = &c->origin[k];
    o->source = s;
    o->used = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->from, sizeof o->from, fmt, ap);
    va_end(ap);
}

/* Which tracked keys the file wrote as "auto" (before anything is filled). */
static void mark_auto(ds_config *c) {
    memset(c->origin, 0, sizeof c->origin);
    const bool autos[DS_KEY_COUNT] = {
        [DS_KEY_TRAIN_BATCH_SIZE] = c->train_batch_size_auto,
        [DS_KEY_MICRO_BATCH] = c->micro_batch_auto,
        [DS_KEY_GRAD_ACCUM] = c->grad_accum_auto,
        [DS_KEY_GRADIENT_CLIPPING] = c->gradient_clipping_auto,
        [DS_KEY_LR] = c->lr_auto,
        [DS_KEY_BETAS] = c->betas_auto,
        [DS_KEY_EPS] = c->eps_auto,
        [DS_KEY_WEIGHT_DECAY] = c->weight_decay_auto,
        [DS_KEY_WARMUP_MIN_LR] = c->warmup_min_lr_auto,
        [DS_KEY_WARMUP_MAX_LR] = c->warmup_max_lr_auto,
        [DS_KEY_WARMUP_NUM_STEPS] = c->warmup_num_steps_auto,
        [DS_KEY_TOTAL_NUM_STEPS] = c->total_num_steps_auto,
        [DS_KEY_FP16] = c->fp16_enabled_auto,
        [DS_KEY_BF16] = c->bf16_enabled_auto,
        [DS_KEY_REDUCE_BUCKET_SIZE] = c->reduce_bucket_size_auto,
        [DS_KEY_PREFETCH_BUCKET_SIZE] = c->prefetch_bucket_size_auto,
        [DS_KEY_PERSISTENCE_THRESHOLD] = c->persistence_threshold_auto,
    };
    for (int k = 0; k < DS_KEY_COUNT; k++) c->origin[k].was_auto = autos[k];
}

/* total_num_steps from the run's length (hints.epochs over train_rows), as
 * the engine's loader walks an epoch; -1 when not given. Needs the batch
 * keys resolved. */
int64_t ds_config_micro_batches_per_epoch(const ds_config *c, size_t rows) {
    int64_t world = c->world_size > 0 ? c->world_size : 1;
    int64_t micro = c->train_micro_batch_size_per_gpu > 0 ? c->train_micro_batch_size_per_gpu : 1;
    int64_t per_rank = ((int64_t)rows + world - 1) / world;
    return c->dataloader_drop_last ? per_rank / micro : (per_rank + micro - 1) / micro;
}

int64_t ds_config_rank_rows_per_epoch(const ds_config *c, size_t rows) {
    int64_t world = c->world_size > 0 ? c->world_size : 1;
    int64_t per_rank = ((int64_t)rows + world - 1) / world;
    return c->dataloader_drop_last
               ? ds_config_micro_batches_per_epoch(c, rows) * c->train_micro_batch_size_per_gpu
               : per_rank;
}

int64_t ds_config_steps_per_epoch(const ds_config *c, size_t rows) {
    int64_t gas = c->gradient_accumulation_steps > 0 ? c->gradient_accumulation_steps : 1;
    /* the engine's loader ends a step at the epoch's end (ds_train_batch):
     * a partial accumulation window is one more step */
    return (ds_config_micro_batches_per_epoch(c, rows) + gas - 1) / gas;
}

int64_t cfg_steps_from_epochs(const ds_config *c, const ds_config_hints *h, char *from,
                              size_t cap) {
    if (!(h->epochs > 0) || h->train_rows <= 0) return -1;
    int64_t world = c->world_size, rows = h->train_rows;
    int64_t per_rank = (rows + world - 1) / world;
    int64_t micro = c->train_micro_batch_size_per_gpu, gas = c->gradient_accumulation_steps;
    int64_t per_epoch = ds_config_steps_per_epoch(c, (size_t)rows);
    if (per_epoch < 1) per_epoch = 1;
    int64_t total = (int64_t)ceil(h->epochs * (double)per_epoch);
    if (from)
        snprintf(from, cap, "%s %g x %lld steps an epoch (%lld rows, %lld a rank, micro %lld, "
                 "accumulation %lld)",
                 cfg_hint_name(h, DS_HINT_EPOCHS), h->epochs, (long long)per_epoch,
                 (long long)rows, (long long)per_rank, (long long)micro, (long long)gas);
    return total;
}

/* ---------------------------------------------------------- batch rule -- */

typedef struct batch_ctx {
    const ds_config *c;
    int64_t world;
    const char *source;
    const char *micro_note; /* " (from hints.micro_batch)" or "" */
} batch_ctx;

static ds_status batch_fail(const batch_ctx *b, const char *what) {
    return RFAIL(b->c, DS_ERR_CONFIG, "%s (world size from %s)", what, b->source);
}

/* The batch keys' origins once the rule has run. */
static void batch_origins(ds_config *c, const ds_config_hints *h, bool tb, bool mb_file,
                          bool mb_hint, bool ga_file, bool ga_hint) {
    long long T = c->train_batch_size, M = c->train_micro_batch_size_per_gpu,
              G = c->gradient_accumulation_steps, W = c->world_size;
    if (tb)
        cfg_origin(c, DS_KEY_TRAIN_BATCH_SIZE, DS_SRC_CONFIG, "%s", "");
    else
        cfg_origin(c, DS_KEY_TRAIN_BATCH_SIZE, DS_SRC_COMPUTED,
                   "micro %lld x accumulation %lld x world %lld", M, G, W);
    if (mb_file)
        cfg_origin(c, DS_KEY_MICRO_BATCH, DS_SRC_CONFIG, "%s", "");
    else if (mb_hint)
        cfg_origin(c, DS_KEY_MICRO_BATCH, cfg_hint_source(h, DS_HINT_MICRO_BATCH), "%s",
                   cfg_hint_name(h, DS_HINT_MICRO_BATCH));
    else
        cfg_origin(c, DS_KEY_MICRO_BATCH, DS_SRC_COMPUTED,
                   "train_batch_size %lld / (accumulation %lld x world %lld)", T, G, W);
    if (ga_file)
        cfg_origin(c, DS_KEY_GRAD_ACCUM, DS_SRC_CONFIG, "%s", "");
    else if (ga_hint)
        cfg_origin(c, DS_KEY_GRAD_ACCUM, cfg_hint_source(h, DS_HINT_GRAD_ACCUM), "%s",
                   cfg_hint_name(h, DS_HINT_GRAD_ACCUM));
    else if (tb && (mb_file || mb_hint))
        cfg_origin(c, DS_KEY_GRAD_ACCUM, DS_SRC_COMPUTED,
                   "train_batch_size %lld / (micro %lld x world %lld)", T, M, W);
    else
        cfg_origin(c, DS_KEY_GRAD_ACCUM, DS_SRC_COMPUTED, "only %s given",
                   tb ? "train_batch_size" : "the micro batch");
}

/* DeepSpeed's _set_batch_related_parameters + _batch_assertion, with exact
 * division where DeepSpeed floors and then fails its assertion. */
static ds_status resolve_batch_with(ds_config *c, const ds_config_hints *h, bool default_fills) {
    char note[96] = "";
    batch_ctx b = {c, c->world_size, c->world_source, note};
    bool tb = c->train_batch_size_set, mb = c->micro_batch_set, ga = c->grad_accum_set;
    bool mb_file = mb, ga_file = ga, mb_hint = false, ga_hint = false;
    const char *micro_name = cfg_hint_name(h, DS_HINT_MICRO_BATCH);
    const char *accum_name = cfg_hint_name(h, DS_HINT_GRAD_ACCUM);
    /* The trainer's micro batch fills "auto", and also an absent key when
     * the user chose it: a trainer's --batch is the micro batch, and
     * DeepSpeed's rules for the missing key would only contradict it
     * (checked below). */
    if (!mb && h->micro_batch > 0 &&
        ((c->micro_batch_auto && default_fills) || cfg_hint_chosen(h, DS_HINT_MICRO_BATCH))) {
        c->train_micro_batch_size_per_gpu = h->micro_batch;
        mb = mb_hint = true;
        snprintf(note, sizeof note, " (from %s)", micro_name);
    }
    /* Accumulation the same way (HF's gradient_accumulation_steps). */
    int64_t hg = h->gradient_accumulation_steps;
    if (ga && hg > 0 && cfg_hint_chosen(h, DS_HINT_GRAD_ACCUM) && c->gradient_accumulation_steps != hg)
        return RFAIL(c, DS_ERR_CONFIG,
                     "gradient_accumulation_steps: the config says %lld but the trainer's value "
                     "(%s) is %lld; write \"auto\" to take the trainer's, or make them agree",
                     (long long)c->gradient_accumulation_steps, accum_name, (long long)hg);
    if (!ga && hg > 0 && (c->grad_accum_auto || cfg_hint_chosen(h, DS_HINT_GRAD_ACCUM))) {
        c->gradient_accumulation_steps = hg;
        ga = ga_hint = true;
    }
    int64_t W = b.world, T = c->train_batch_size, M = c->train_micro_batch_size_per_gpu,
            G = c->gradient_accumulation_steps;
    char msg[640];

    if (tb && mb && ga) {
        int64_t prod;
        if (__builtin_mul_overflow(M, G, &prod) || __builtin_mul_overflow(prod, W, &prod) ||
            prod != T) {
            snprintf(msg, sizeof msg,
                     "train_batch_size %lld != train_micro_batch_size_per_gpu %lld%s * "
                     "gradient_accumulation_steps %lld * world_size %lld",
                     (long long)T, (long long)M, b.micro_note, (long long)G, (long long)W);
            return batch_fail(&b, msg);
        }
    } else if (tb && mb) {
        if (T % M != 0 || (T / M) % W != 0) {
            snprintf(msg, sizeof msg,
                     "train_batch_size %lld is not a multiple of train_micro_batch_size_per_gpu "
                     "%lld%s * world_size %lld: gradient_accumulation_steps would be %g",
                     (long long)T, (long long)M, b.micro_note, (long long)W,
                     (double)T / ((double)M * (double)W));
            return batch_fail(&b, msg);
        }
        c->gradient_accumulation_steps = T / M / W;
    } else if (tb && ga) {
        if (T % G != 0 || (T / G) % W != 0) {
            snprintf(msg, sizeof msg,
                     "train_batch_size %lld is not a multiple of gradient_accumulation_steps "
                     "%lld * world_size %lld: train_micro_batch_size_per_gpu would be %g",
                     (long long)T, (long long)G, (long long)W, (double)T / ((double)G * (double)W));
            return batch_fail(&b, msg);
        }
        c->train_micro_batch_size_per_gpu = T / G / W;
    } else if (mb && ga) {
        int64_t prod;
        if (__builtin_mul_overflow(M, G, &prod) || __builtin_mul_overflow(prod, W, &prod)) {
            snprintf(msg, sizeof msg,
                     "train_micro_batch_size_per_gpu %lld%s * gradient_accumulation_steps %lld * "
                     "world_size %lld overflows train_batch_size",
                     (long long)M, b.micro_note, (long long)G, (long long)W);
            return batch_fail(&b, msg);
        }
        c->train_batch_size = prod;
    } else if (tb) {
        /* DeepSpeed: train_batch_size alone -> accumulation 1. */
        if (T % W != 0) {
            snprintf(msg, sizeof msg,
                     "train_batch_size %lld is not a multiple of world_size %lld (with only "
                     "train_batch_size given, gradient_accumulation_steps is 1): "
                     "train_micro_batch_size_per_gpu would be %g",
                     (long long)T, (long long)W, (double)T / (double)W);
            return batch_fail(&b, msg);
        }
        c->gradient_accumulation_steps = 1;
        c->train_micro_batch_size_per_gpu = T / W;
    } else if (mb) {
        /* DeepSpeed: micro batch alone -> accumulation 1. */
        int64_t prod;
        if (__builtin_mul_overflow(M, W, &prod)) {
            snprintf(msg, sizeof msg,
                     "train_micro_batch_size_per_gpu %lld%s * world_size %lld overflows "
                     "train_batch_size",
                     (long long)M, b.micro_note, (long long)W);
            return batch_fail(&b, msg);
        }
        c->gradient_accumulation_steps = 1;
        c->train_batch_size = prod;
    } else {
        /* DeepSpeed: "Either train_batch_size or train_micro_batch_size_per_gpu
         * needs to be provided" (accumulation alone cannot give the others). */
        return RFAIL(c, DS_ERR_CONFIG,
                     "batch size: set train_batch_size or train_micro_batch_size_per_gpu (a "
                     "number, or \"auto\" with the trainer's micro batch in %s)%s",
                     micro_name,
                     ga ? "; gradient_accumulation_steps alone cannot give the others" : "");
    }

    /* a derived micro batch or accumulation beyond an int (the engine's
     * counters; the parser bounds the written ones the same) */
    if (c->train_micro_batch_size_per_gpu > INT_MAX || c->gradient_accumulation_steps > INT_MAX) {
        snprintf(msg, sizeof msg,
                 "train_batch_size %lld over world_size %lld gives %s %lld, more than %d",
                 (long long)c->train_batch_size, (long long)W,
                 c->train_micro_batch_size_per_gpu > INT_MAX ? "train_micro_batch_size_per_gpu"
                                                             : "gradient_accumulation_steps",
                 (long long)(c->train_micro_batch_size_per_gpu > INT_MAX
                                 ? c->train_micro_batch_size_per_gpu
                                 : c->gradient_accumulation_steps),
                 INT_MAX);
        return batch_fail(&b, msg);
    }

    /* The micro batch the user chose (a trainer's --batch) must be what is used. */
    if (h->micro_batch > 0 && cfg_hint_chosen(h, DS_HINT_MICRO_BATCH) &&
        c->train_micro_batch_size_per_gpu != h->micro_batch) {
        if (mb_file) /* written in the config: no derivation to show */
            snprintf(msg, sizeof msg,
                     "train_micro_batch_size_per_gpu is %lld in the config but the trainer's "
                     "micro batch (%s) is %lld; write \"auto\" or make them agree",
                     (long long)c->train_micro_batch_size_per_gpu, micro_name,
                     (long long)h->micro_batch);
        else
            snprintf(msg, sizeof msg,
                     "train_micro_batch_size_per_gpu resolves to %lld (train_batch_size %lld / "
                     "(gradient_accumulation_steps %lld * world_size %lld)) but the trainer's "
                     "micro batch (%s) is %lld; write \"auto\" or make them agree",
                     (long long)c->train_micro_batch_size_per_gpu, (long long)c->train_batch_size,
                     (long long)c->gradient_accumulation_steps, (long long)W, micro_name,
                     (long long)h->micro_batch);
        return batch_fail(&b, msg);
    }
    batch_origins(c, h, tb, mb_file, mb_hint, ga_file, ga_hint);
    return DS_OK;
}

/* A default micro batch (HF's per_device_train_batch_size 8, a flag the user
 * left out) fills "auto" only where it fits the numbers the config gives:
 * where it would make DeepSpeed's rule fail (a train_batch_size that is no
 * multiple of it, or one fixed with the accumulation), the rule derives the
 * micro batch as if there were no hint. A default never conflicts. */
static ds_status resolve_batch(ds_config *c, const ds_config_hints *h) {
    if (h->micro_batch <= 0 || cfg_hint_chosen(h, DS_HINT_MICRO_BATCH) || !c->micro_batch_auto)
        return resolve_batch_with(c, h, true);
    ds_config tried = *c;
    if (resolve_batch_with(&tried, h, true) == DS_OK) {
        *c = tried;
        return DS_OK;
    }
    ds_clear_error();
    return resolve_batch_with(c, h, false);
}

/* ------------------------------------------------------- cross checks -- */

static ds_status check_offload(const ds_config *c, const char *name, const ds_offload_config *o,
                               int min_stage, int nvme_stage) {
    if (o->device == DS_OFFLOAD_NONE) return DS_OK;
    const char *dev = ds_offload_device_name(o->device);
    int need = o->device == DS_OFFLOAD_NVME ? nvme_stage : min_stage;
    if (c->zero_stage < need)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.%s.device: \"%s\" needs zero_optimization.stage %s%d, got "
                     "stage %d",
                     name, dev, need == 3 ? "" : ">= ", need, c->zero_stage);
    if (o->device == DS_OFFLOAD_NVME && o->nvme_path[0] == '\0')
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.%s.nvme_path: required with device \"nvme\" (a folder on "
                     "the NVMe drive), absent, null or empty",
                     name);
    return DS_OK;
}

/* hpZ and MiCS choose the groups stage 3 gathers and shards in; the sizes
 * against the world are checked where the world is known (zero/groups.h). */
static ds_status check_groups(const ds_config *c) {
    bool hpz = c->zero_hpz_partition_size > 1, mics = c->mics_shard_size > 0;
    if (hpz && c->zero_stage != 3)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.zero_hpz_partition_size: %lld needs "
                     "zero_optimization.stage 3 (the secondary copy is of stage 3's partitioned "
                     "parameters), got stage %d",
                     (long long)c->zero_hpz_partition_size, c->zero_stage);
    if (mics && c->zero_stage != 3)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.mics_shard_size: %lld needs zero_optimization.stage 3 "
                     "(MiCS shards stage 3's parameters), got stage %d",
                     (long long)c->mics_shard_size, c->zero_stage);
    if (c->mics_hierarchical_params_gather && !mics)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.mics_hierarchical_params_gather: true needs "
                     "zero_optimization.mics_shard_size > 0 (it is how MiCS gathers), got %lld",
                     (long long)c->mics_shard_size);
    if (hpz && mics)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.zero_hpz_partition_size %lld and mics_shard_size %lld: "
                     "choose one (MiCS already keeps the gathers inside its shard group)",
                     (long long)c->zero_hpz_partition_size, (long long)c->mics_shard_size);
    /* DeepSpeed's MiCS: "Local sharding has no support for CPU offloading".
     * hpZ takes offload_param: its secondary piece stays in device memory,
     * filled from the gathers, which read the host partition (zero/stage3.c) */
    if (mics && (c->offload_optimizer.device != DS_OFFLOAD_NONE ||
                 c->offload_param.device != DS_OFFLOAD_NONE))
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.mics_shard_size: %lld with offload_%s: MiCS does not "
                     "offload (as in DeepSpeed); remove one",
                     (long long)c->mics_shard_size,
                     c->offload_param.device != DS_OFFLOAD_NONE ? "param" : "optimizer");
    return DS_OK;
}

static ds_status check_cross(const ds_config *c) {
    if (c->fp16_enabled && c->bf16_enabled)
        return RFAIL(c, DS_ERR_CONFIG,
                     "fp16.enabled and bf16.enabled: both true, got fp16.enabled true%s, "
                     "bf16.enabled true%s; enable one",
                     c->fp16_enabled_auto ? " (auto)" : "", c->bf16_enabled_auto ? " (auto)" : "");
    /* bf16 GEMM inputs are part of bf16 mixed precision: under fp32 they
     * would round what the user asked to keep exact, under fp16 they would
     * lose the 3 significand bits fp16 has over bf16 */
    if (!strcmp(c->gemm_input_dtype, "bf16") && !c->bf16_enabled)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_engine.gemm_input_dtype: \"bf16\" needs bf16.enabled true, got "
                     "bf16.enabled false (%s); enable bf16 or write \"auto\" / \"fp32\"",
                     c->fp16_enabled ? "fp16 training" : "fp32 training");
    /* DeepSpeed: offload_param is "valid only with stage 3"; optimizer
     * offload, to cpu or nvme, "valid with stage 1, 2, and 3" (stage 0 has
     * no ZeRO optimizer to offload). */
    DS_TRY(check_offload(c, "offload_param", &c->offload_param, 3, 3));
    DS_TRY(check_offload(c, "offload_optimizer", &c->offload_optimizer, 1, 1));
    /* DeepSpeed reads zero_quantized_weights only where stage 3 gathers
     * parameters (zero.Init) and ignores it elsewhere; a user who asks for
     * quantized gathers at a stage that has none is told so instead. */
    if (c->zero_quantized_weights && c->zero_stage != 3)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.zero_quantized_weights: true needs "
                     "zero_optimization.stage 3 (only stage 3 all-gathers parameters), got "
                     "stage %d",
                     c->zero_stage);
    /* DeepSpeed hands its all-to-all group (engine.py, all2all_process_group)
     * only to the stage-3 optimizer; stages 0-2 would ignore the key. The
     * reduce-scatter it quantizes is stage 3's. */
    if (c->zero_quantized_gradients && c->zero_stage != 3)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.zero_quantized_gradients: true needs "
                     "zero_optimization.stage 3 (DeepSpeed quantizes only stage 3's gradient "
                     "reduce-scatter), got stage %d",
                     c->zero_stage);
    /* DeepSpeed's engine asserts "1bit-Adam is not compatible with ZeRO" and
     * "0/1 Adam is not compatible with ZeRO": both run on a full replica of
     * the momentum and the weights, stage 0. */
    if (c->onebit != DS_ONEBIT_NONE && c->zero_stage != 0)
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.stage: optimizer.type %s runs at stage 0 only (DeepSpeed: "
                     "\"%s is not compatible with ZeRO\"), got stage %d",
                     c->onebit == DS_ONEBIT_ADAM ? "OneBitAdam" : "ZeroOneAdam",
                     c->onebit == DS_ONEBIT_ADAM ? "1bit-Adam" : "0/1 Adam", c->zero_stage);
    DS_TRY(check_groups(c));
    if (c->offload_optimizer.device != DS_OFFLOAD_NONE && c->offload_optimizer.ratio < 1.0 &&
        c->zero_stage != 3) {
        char r[40];
        cfg_fmt_real(c->offload_optimizer.ratio, r, sizeof r);
        return RFAIL(c, DS_ERR_CONFIG,
                     "zero_optimization.offload_optimizer.ratio: partial offload (< 1) needs "
                     "zero_optimization.stage 3, got ratio %s with stage %d",
                     r, c->zero_stage);
    }
    return DS_OK;
}

ds_status ds_config_resolve(ds_config *cfg, const ds_config_hints *h) {
    if (!cfg || !h) return DS_ERR(DS_ERR_INVALID_ARG, "ds_config_resolve: NULL argument");
    if (h->world_size < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_config_resolve: hints.world_size must be >= 1, got %d",
                      h->world_size);
    ds_config c = *cfg;
    c.world_size = h->world_size;
    memset(c.world_source, 0, sizeof c.world_source);
    snprintf(c.world_source, sizeof c.world_source, "%s",
             h->world_source && h->world_source[0] ? h->world_source
                                                   : "the caller (ds_config_hints.world_size)");
    mark_auto(&c);
    DS_TRY(cfg_resolve_optimizer(&c, h));
    DS_TRY(cfg_resolve_precision(&c, h));
    cfg_resolve_sizes(&c, h);
    DS_TRY(resolve_batch(&c, h));
    DS_TRY(cfg_resolve_scheduler(&c, h)); /* total_num_steps from epochs needs the batch */
    DS_TRY(check_cross(&c));
    /* DeepSpeed's secondary group is min(zero_hpz_partition_size, world)
     * ranks: a config written for larger hosts runs on fewer ranks (the
     * resolved config shows the size used) */
    if (c.zero_hpz_partition_size > c.world_size) c.zero_hpz_partition_size = c.world_size;
    /* zero_engine.gemm_input_dtype "auto": bf16 GEMM inputs under bf16 */
    if (!strcmp(c.gemm_input_dtype, "auto"))
        snprintf(c.gemm_input_dtype, sizeof c.gemm_input_dtype, "%s",
                 c.bf16_enabled ? "bf16" : "fp32");
    /* zero_engine.comm against the backend, where it is known */
    DS_TRY(ds_config_settle_comm(&c));
    *cfg = c;
    return DS_OK;
}
