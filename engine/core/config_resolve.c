/* ds_config_resolve: "auto" from the trainer's hints (as Hugging Face's
 * Trainer fills a DeepSpeed config), DeepSpeed's batch rule, and the checks
 * that involve more than one key. Works on a copy and writes back only on
 * success. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/config_internal.h"

void ds_config_hints_init(ds_config_hints *h) {
    memset(h, 0, sizeof *h);
    h->world_size = 1;
    h->world_source = NULL;
    h->hidden_size = 0;
    h->lr = h->weight_decay = h->eps = h->beta1 = h->beta2 = h->gradient_clipping = -1.0;
    h->micro_batch = 0;
    h->warmup_num_steps = -1;
    h->total_num_steps = -1;
    h->epochs = -1.0;
    h->train_rows = -1;
}

/* total_num_steps from the run's length (hints.epochs over train_rows), as
 * the engine's loader walks an epoch; -1 when not given. Needs the batch
 * keys resolved. */
static int64_t steps_from_epochs(const ds_config *c, const ds_config_hints *h) {
    if (!(h->epochs > 0) || h->train_rows <= 0) return -1;
    int64_t world = c->world_size, rows = h->train_rows;
    int64_t per_rank = c->dataloader_drop_last ? rows / world : (rows + world - 1) / world;
    int64_t micro = c->train_micro_batch_size_per_gpu, gas = c->gradient_accumulation_steps;
    int64_t per_epoch = ((per_rank + micro - 1) / micro) / gas;
    if (per_epoch < 1) per_epoch = 1;
    return (int64_t)ceil(h->epochs * (double)per_epoch);
}

/* Resolve failures carry the file name like parse failures do. */
#define RFAIL(c, st, ...) cfg_fail_at((c)->path, (st), __FILE__, __LINE__, __VA_ARGS__)

/* One real-valued key: "auto" (or no optimizer section, for the optimizer's
 * keys) takes the hint or DeepSpeed's default; a number written in the file
 * must agree with a given hint (HF's fill_match); the result must be in
 * [lo, hi) (hi < 0: no upper bound). */
static ds_status fill_real(const ds_config *c, const char *key, double *field, bool take_hint,
                           bool written, double hint, const char *hint_name, double dflt,
                           double lo, double hi) {
    char a[40], b[40];
    if (take_hint) {
        *field = hint >= 0 ? hint : dflt;
    } else if (written && hint >= 0 && *field != hint) {
        cfg_fmt_real(*field, a, sizeof a);
        cfg_fmt_real(hint, b, sizeof b);
        return RFAIL(c, DS_ERR_CONFIG,
                     "%s: the config says %s but the trainer's value (%s) is %s; write \"auto\" "
                     "to take the trainer's, or make them agree",
                     key, a, hint_name, b);
    }
    if (*field < lo || (hi >= 0 && *field >= hi)) {
        cfg_fmt_real(*field, a, sizeof a);
        cfg_fmt_real(lo, b, sizeof b);
        if (hi >= 0) {
            char h[40];
            cfg_fmt_real(hi, h, sizeof h);
            return RFAIL(c, DS_ERR_CONFIG, "%s: must be in [%s, %s), got %s (from %s)", key, b, h,
                         a, hint_name);
        }
        return RFAIL(c, DS_ERR_CONFIG, "%s: must be >= %s, got %s (from %s)", key, b, a,
                     hint_name);
    }
    return DS_OK;
}

/* Same for a step count: "auto" takes the hint (which must be >= 1) or
 * `dflt` (0 = still not given, checked by the caller). */
static ds_status fill_steps(const ds_config *c, const char *key, int64_t *field, bool is_auto,
                            bool written, int64_t hint, const char *hint_name, int64_t dflt) {
    if (is_auto) {
        *field = hint >= 0 ? hint : dflt;
        if (hint >= 0 && hint < 1)
            return RFAIL(c, DS_ERR_CONFIG, "%s: must be >= 1, got %lld (\"auto\" from %s)", key,
                         (long long)hint, hint_name);
    } else if (written && hint >= 0 && *field != hint) {
        return RFAIL(c, DS_ERR_CONFIG,
                     "%s: the config says %lld but the trainer's value (%s) is %lld; write "
                     "\"auto\" to take the trainer's, or make them agree",
                     key, (long long)*field, hint_name, (long long)hint);
    }
    return DS_OK;
}

static ds_status resolve_optimizer(ds_config *c, const ds_config_hints *h) {
    /* Without an optimizer section the trainer's own optimizer is meant, and
     * it takes the trainer's values (HF builds its optimizer from its args). */
    bool trainer = !c->optimizer_set;
    DS_TRY(fill_real(c, "optimizer.params.lr", &c->lr, trainer || c->lr_auto, c->lr_set, h->lr,
                     "hints.lr", 1e-3, 0, -1));
    DS_TRY(fill_real(c, "optimizer.params.betas[0]", &c->betas[0], trainer || c->betas_auto,
                     c->betas_set, h->beta1, "hints.beta1", 0.9, 0, 1));
    DS_TRY(fill_real(c, "optimizer.params.betas[1]", &c->betas[1], trainer || c->betas_auto,
                     c->betas_set, h->beta2, "hints.beta2", 0.999, 0, 1));
    DS_TRY(fill_real(c, "optimizer.params.eps", &c->eps, trainer || c->eps_auto, c->eps_set, h->eps,
                     "hints.eps", 1e-8, 0, -1));
    DS_TRY(fill_real(c, "optimizer.params.weight_decay", &c->weight_decay,
                     trainer || c->weight_decay_auto, c->weight_decay_set, h->weight_decay,
                     "hints.weight_decay", 0.0, 0, -1));
    DS_TRY(fill_real(c, "gradient_clipping", &c->gradient_clipping, c->gradient_clipping_auto,
                     c->gradient_clipping_set, h->gradient_clipping, "hints.gradient_clipping", 0.0,
                     0, -1));
    return DS_OK;
}

static ds_status resolve_scheduler(ds_config *c, const ds_config_hints *h) {
    if (c->scheduler == DS_SCHED_NONE) return DS_OK;
    /* HF fills warmup_min_lr "auto" with 0 (no trainer argument for it). */
    if (c->warmup_min_lr_auto) c->warmup_min_lr = 0.0;
    if (c->scheduler != DS_SCHED_WARMUP_COSINE_LR) {
        /* warmup_max_lr "auto": the trainer's lr (HF), else the optimizer's
         * lr, which is where the trainer's lr went anyway. Absent with
         * WarmupLR: DeepSpeed's WarmupLR(warmup_max_lr=None) takes the
         * optimizer lr; WarmupDecayLR keeps its 0.001. */
        bool absent = !c->warmup_max_lr_auto && !c->warmup_max_lr_set;
        if (absent && c->scheduler == DS_SCHED_WARMUP_LR) c->warmup_max_lr = c->lr;
        DS_TRY(fill_real(c, "scheduler.params.warmup_max_lr", &c->warmup_max_lr,
                         c->warmup_max_lr_auto, c->warmup_max_lr_set, h->lr, "hints.lr", c->lr, 0,
                         -1));
    }
    DS_TRY(fill_steps(c, "scheduler.params.warmup_num_steps", &c->warmup_num_steps,
                      c->warmup_num_steps_auto, c->warmup_num_steps_set, h->warmup_num_steps,
                      "hints.warmup_num_steps", 1000));
    if (c->scheduler == DS_SCHED_WARMUP_LR) return DS_OK;

    int64_t total = h->total_num_steps;
    const char *from = "hints.total_num_steps";
    if (total < 0 && c->total_num_steps_auto && (total = steps_from_epochs(c, h)) > 0)
        from = "hints.epochs over the training rows";
    DS_TRY(fill_steps(c, "scheduler.params.total_num_steps", &c->total_num_steps,
                      c->total_num_steps_auto, c->total_num_steps_set, total, from, 0));
    if (c->total_num_steps < 1) {
        if (c->total_num_steps_auto)
            return RFAIL(c, DS_ERR_CONFIG,
                         "scheduler.params.total_num_steps: \"auto\" needs the run's length and "
                         "none was given: set ds_init_desc.hints.total_num_steps, or "
                         "hints.epochs with training data; or write a number");
        return RFAIL(c, DS_ERR_CONFIG,
                     "scheduler.params.total_num_steps: required by %s (a number or \"auto\"), "
                     "got nothing",
                     ds_sched_type_name(c->scheduler));
    }
    return DS_OK;
}

static void resolve_precision_and_sizes(ds_config *c, const ds_config_hints *h) {
    /* HF: fp16/bf16 "auto" follow --fp16/--bf16; our trainers train fp32
     * unless the config says otherwise. */
    if (c->fp16_enabled_auto) c->fp16_enabled = false;
    if (c->bf16_enabled_auto) c->bf16_enabled = false;

    /* HF's trainer_config_finalize: sizes from the model's hidden size. */
    int64_t hid = h->hidden_size > 0 ? h->hidden_size : 0;
    if (c->reduce_bucket_size_auto) c->reduce_bucket_size = hid ? hid * hid : 500000000;
    if (c->prefetch_bucket_size_auto)
        /* int(0.9 * hidden * hidden) evaluated left to right as Python does,
         * so the value is HF's to the element. */
        c->stage3_prefetch_bucket_size = hid ? (int64_t)(0.9 * (double)hid * (double)hid) : 50000000;
    if (c->persistence_threshold_auto)
        c->stage3_param_persistence_threshold = hid ? 10 * hid : 100000;
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

/* DeepSpeed's _set_batch_related_parameters + _batch_assertion, with exact
 * division where DeepSpeed floors and then fails its assertion. */
static ds_status resolve_batch(ds_config *c, const ds_config_hints *h) {
    batch_ctx b = {c, c->world_size, c->world_source, ""};
    bool tb = c->train_batch_size_set, mb = c->micro_batch_set, ga = c->grad_accum_set;
    /* The trainer's micro batch fills "auto", and also an absent key: a
     * trainer's --batch is the micro batch, and DeepSpeed's rules for the
     * missing key would only contradict it (checked below). */
    if (!mb && h->micro_batch > 0) {
        c->train_micro_batch_size_per_gpu = h->micro_batch;
        mb = true;
        b.micro_note = " (from hints.micro_batch)";
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
                     "number, or \"auto\" with the trainer's micro batch in hints.micro_batch)%s",
                     ga ? "; gradient_accumulation_steps alone cannot give the others" : "");
    }

    /* The trainer's micro batch (its --batch flag) must be what is used. */
    if (h->micro_batch > 0 && c->train_micro_batch_size_per_gpu != h->micro_batch) {
        snprintf(msg, sizeof msg,
                 "train_micro_batch_size_per_gpu resolves to %lld (train_batch_size %lld / "
                 "(gradient_accumulation_steps %lld * world_size %lld)) but the trainer's micro "
                 "batch (hints.micro_batch) is %lld; write \"auto\" or make them agree",
                 (long long)c->train_micro_batch_size_per_gpu, (long long)c->train_batch_size,
                 (long long)c->gradient_accumulation_steps, (long long)W,
                 (long long)h->micro_batch);
        return batch_fail(&b, msg);
    }
    return DS_OK;
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
                     "zero_optimization.%s.nvme_path: required with device \"nvme\", got null",
                     name);
    return DS_OK;
}

static ds_status check_cross(const ds_config *c) {
    if (c->fp16_enabled && c->bf16_enabled)
        return RFAIL(c, DS_ERR_CONFIG,
                     "fp16.enabled and bf16.enabled: both true, got fp16.enabled true%s, "
                     "bf16.enabled true%s; enable one",
                     c->fp16_enabled_auto ? " (auto)" : "", c->bf16_enabled_auto ? " (auto)" : "");
    /* DeepSpeed: offload_param is "valid only with stage 3"; optimizer
     * offload, to cpu or nvme, "valid with stage 1, 2, and 3" (stage 0 has
     * no ZeRO optimizer to offload). */
    DS_TRY(check_offload(c, "offload_param", &c->offload_param, 3, 3));
    DS_TRY(check_offload(c, "offload_optimizer", &c->offload_optimizer, 1, 1));
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
    DS_TRY(resolve_optimizer(&c, h));
    resolve_precision_and_sizes(&c, h);
    DS_TRY(resolve_batch(&c, h));
    DS_TRY(resolve_scheduler(&c, h)); /* total_num_steps from epochs needs the batch */
    DS_TRY(check_cross(&c));
    *cfg = c;
    return DS_OK;
}
