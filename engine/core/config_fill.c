/* Filling "auto" keys and missing sections from the trainer's hints, key by
 * key as Hugging Face's integration does (HfTrainerDeepSpeedConfig:
 * trainer_config_process fills the optimizer, clipping, precision and
 * warmup keys from TrainingArguments, trainer_config_finalize the bucket
 * sizes from the model and total_num_steps from the run; a config without
 * "optimizer" / "scheduler" gets the Trainer's own AdamW and lr schedule),
 * recording where each value came from (ds_config.origin). The batch rule
 * and the entry point are in config_resolve.c. */
#include <stdio.h>
#include <string.h>

#include "engine/core/config_internal.h"

/* ------------------------------------------------------------ helpers -- */

static ds_status mismatch_real(const ds_config *c, const char *key, double written, double hint,
                               const char *hint_name) {
    char a[40], b[40];
    cfg_fmt_real(written, a, sizeof a);
    cfg_fmt_real(hint, b, sizeof b);
    return RFAIL(c, DS_ERR_CONFIG,
                 "%s: the config says %s but the trainer's value (%s) is %s; write \"auto\" to "
                 "take the trainer's, or make them agree",
                 key, a, hint_name, b);
}

static ds_status mismatch_int(const ds_config *c, const char *key, long long written,
                              long long hint, const char *hint_name) {
    return RFAIL(c, DS_ERR_CONFIG,
                 "%s: the config says %lld but the trainer's value (%s) is %lld; write \"auto\" "
                 "to take the trainer's, or make them agree",
                 key, written, hint_name, hint);
}

/* "auto" with nothing to take it from: name the key and the hint. */
static ds_status needs_hint(const ds_config *c, const char *key, const char *hint_name) {
    return RFAIL(c, DS_ERR_CONFIG,
                 "%s: \"auto\" needs the trainer's value and none was given: set %s, or write a "
                 "value",
                 key, hint_name);
}

static ds_status check_range(const ds_config *c, const char *key, double v, double lo, double hi,
                             const char *from) {
    if (v >= lo && (hi < 0 || v < hi)) return DS_OK;
    char a[40], b[40], t[40];
    cfg_fmt_real(v, a, sizeof a);
    cfg_fmt_real(lo, b, sizeof b);
    if (hi >= 0) {
        cfg_fmt_real(hi, t, sizeof t);
        return RFAIL(c, DS_ERR_CONFIG, "%s: must be in [%s, %s), got %s (from %s)", key, b, t, a,
                     from);
    }
    return RFAIL(c, DS_ERR_CONFIG, "%s: must be >= %s, got %s (from %s)", key, b, a, from);
}

/* ---------------------------------------------------------- optimizer -- */

/* One real-valued key. `take`: the key takes the trainer's value (written
 * "auto", or an optimizer key without an optimizer section); `missing`: the
 * latter, where a key without a hint keeps DeepSpeed's default rather than
 * failing. A number written in the file must agree with a hint the user
 * chose (HF's fill_match). The result must be in [lo, hi) (hi < 0: no upper
 * bound). */
typedef struct real_key {
    ds_config_key k;
    const char *key;
    double *field;
    bool is_auto, missing, written;
    ds_hint_id id;
    double hint;
    double dflt; /* DeepSpeed's, for a missing section without a hint */
    double lo, hi;
} real_key;

static ds_status fill_real(ds_config *c, const ds_config_hints *h, const real_key *r) {
    const char *name = cfg_hint_name(h, r->id);
    if (r->is_auto || r->missing) {
        if (r->hint >= 0) {
            *r->field = r->hint;
            cfg_origin(c, r->k, cfg_hint_source(h, r->id), "%s", name);
            return check_range(c, r->key, *r->field, r->lo, r->hi, name);
        }
        if (r->is_auto) return needs_hint(c, r->key, name);
        *r->field = r->dflt;
        cfg_origin(c, r->k, DS_SRC_DEFAULT, "no optimizer section and no %s", name);
        return DS_OK;
    }
    if (r->written && r->hint >= 0 && cfg_hint_chosen(h, r->id) && *r->field != r->hint)
        return mismatch_real(c, r->key, *r->field, r->hint, name);
    if (!r->written && r->hint >= 0 && cfg_hint_chosen(h, r->id) && *r->field != r->hint) {
        /* HF's fill leaves an absent key to DeepSpeed: the flag the user
         * gave goes unused, said where the summary lists the defaults */
        char v[40];
        cfg_fmt_real(r->hint, v, sizeof v);
        cfg_origin(c, r->k, DS_SRC_DEFAULT, "absent from the config, so not %s %s; \"auto\" "
                   "takes the flag", name, v);
        return DS_OK;
    }
    cfg_origin(c, r->k, r->written ? DS_SRC_CONFIG : DS_SRC_DEFAULT, "%s", "");
    return DS_OK;
}

/* betas: two hints, one key; its origin combines the two. */
static ds_status fill_betas(ds_config *c, const ds_config_hints *h, bool missing) {
    real_key b0 = {DS_KEY_BETAS, "optimizer.params.betas[0]", &c->betas[0], c->betas_auto,
                   missing, c->betas_set, DS_HINT_BETA1, h->beta1, 0.9, 0, 1};
    real_key b1 = {DS_KEY_BETAS, "optimizer.params.betas[1]", &c->betas[1], c->betas_auto,
                   missing, c->betas_set, DS_HINT_BETA2, h->beta2, 0.999, 0, 1};
    DS_TRY(fill_real(c, h, &b0));
    ds_config_origin first = c->origin[DS_KEY_BETAS];
    DS_TRY(fill_real(c, h, &b1));
    ds_config_origin *o = &c->origin[DS_KEY_BETAS];
    if (first.source == o->source && strcmp(first.from, o->from) == 0) return DS_OK;
    /* one from a hint, the other not, or two names: say both, sharing a
     * stem ("--adam-beta1/2") */
    ds_config_source s = first.source == DS_SRC_HINT || o->source == DS_SRC_HINT ? DS_SRC_HINT
                         : first.source > o->source                              ? first.source
                                                                                 : o->source;
    const char *a = first.from[0] ? first.from : ds_config_source_name(first.source);
    char second[sizeof o->from];
    snprintf(second, sizeof second, "%s", o->from[0] ? o->from : ds_config_source_name(o->source));
    size_t la = strlen(a), lb = strlen(second);
    if (la == lb && la > 1 && strncmp(a, second, la - 1) == 0)
        cfg_origin(c, DS_KEY_BETAS, s, "%s/%c", a, second[lb - 1]);
    else
        cfg_origin(c, DS_KEY_BETAS, s, "%s, %s", a, second);
    return DS_OK;
}

ds_status cfg_resolve_optimizer(ds_config *c, const ds_config_hints *h) {
    /* Without an optimizer section the trainer's own optimizer is meant: HF
     * builds AdamW from its arguments (create_optimizer). */
    bool missing = !c->optimizer_set;
    if (missing) {
        c->optimizer = DS_OPTIM_ADAMW;
        c->adam_w_mode = true;
        bool any = h->lr >= 0 || h->weight_decay >= 0 || h->beta1 >= 0 || h->beta2 >= 0 ||
                   h->eps >= 0;
        c->optim_hf = any; /* HF's parameter groups come with the trainer's AdamW */
        if (any)
            cfg_origin(c, DS_KEY_OPTIMIZER, DS_SRC_COMPUTED,
                       "no optimizer section: the trainer's AdamW (as HF's Trainer)");
        else
            cfg_origin(c, DS_KEY_OPTIMIZER, DS_SRC_DEFAULT,
                       "no optimizer section and no hints: DeepSpeed's Adam defaults");
    } else {
        cfg_origin(c, DS_KEY_OPTIMIZER, DS_SRC_CONFIG, "%s", "");
    }
    real_key lr = {DS_KEY_LR, "optimizer.params.lr", &c->lr, c->lr_auto, missing, c->lr_set,
                   DS_HINT_LR, h->lr, 1e-3, 0, -1};
    DS_TRY(fill_real(c, h, &lr));
    if (c->optimizer != DS_OPTIM_SGD) {
        DS_TRY(fill_betas(c, h, missing));
        real_key eps = {DS_KEY_EPS, "optimizer.params.eps", &c->eps, c->eps_auto, missing,
                        c->eps_set, DS_HINT_EPS, h->eps, 1e-8, 0, -1};
        DS_TRY(fill_real(c, h, &eps));
    }
    real_key wd = {DS_KEY_WEIGHT_DECAY, "optimizer.params.weight_decay", &c->weight_decay,
                   c->weight_decay_auto, missing, c->weight_decay_set, DS_HINT_WEIGHT_DECAY,
                   h->weight_decay, 0.0, 0, -1};
    DS_TRY(fill_real(c, h, &wd));
    /* A top-level key: absent means DeepSpeed's 1.0 (0.19.3 on) also with a
     * hint (HF's fill_match leaves an absent key alone). */
    real_key clip = {DS_KEY_GRADIENT_CLIPPING, "gradient_clipping", &c->gradient_clipping,
                     c->gradient_clipping_auto, false, c->gradient_clipping_set,
                     DS_HINT_GRADIENT_CLIPPING, h->gradient_clipping, 1.0, 0, -1};
    return fill_real(c, h, &clip);
}

/* ---------------------------------------------------------- scheduler -- */

/* warmup_num_steps from the hint: DeepSpeed accepts no 0 (its schedules warm
 * up over max(2, W) steps), so HF's default of 0 warmup steps becomes 1. */
static void warmup_from_hint(ds_config *c, const ds_config_hints *h) {
    const char *name = cfg_hint_name(h, DS_HINT_WARMUP);
    c->warmup_num_steps = h->warmup_num_steps > 0 ? h->warmup_num_steps : 1;
    if (h->warmup_num_steps > 0)
        cfg_origin(c, DS_KEY_WARMUP_NUM_STEPS, cfg_hint_source(h, DS_HINT_WARMUP), "%s", name);
    else
        cfg_origin(c, DS_KEY_WARMUP_NUM_STEPS, cfg_hint_source(h, DS_HINT_WARMUP),
                   "%s 0, raised to DeepSpeed's least", name);
}

/* total_num_steps from the hint, else from the run's length; false when
 * neither is given. */
static bool total_from_hints(ds_config *c, const ds_config_hints *h) {
    if (h->total_num_steps >= 0) {
        c->total_num_steps = h->total_num_steps;
        cfg_origin(c, DS_KEY_TOTAL_NUM_STEPS, cfg_hint_source(h, DS_HINT_TOTAL_STEPS), "%s",
                   cfg_hint_name(h, DS_HINT_TOTAL_STEPS));
        return true;
    }
    char from[sizeof c->origin[0].from];
    int64_t t = cfg_steps_from_epochs(c, h, from, sizeof from);
    if (t <= 0) return false;
    c->total_num_steps = t;
    cfg_origin(c, DS_KEY_TOTAL_NUM_STEPS, DS_SRC_COMPUTED, "%s", from);
    return true;
}

/* warmup_max_lr "auto" or from the trainer: the optimizer lr, which is the
 * trainer's lr wherever one was given (a written lr that disagrees with a
 * chosen hint has failed already), so its origin is the lr's. */
static void max_lr_from_lr(ds_config *c) {
    c->warmup_max_lr = c->lr;
    const ds_config_origin *lo = &c->origin[DS_KEY_LR];
    if (lo->source == DS_SRC_HINT || lo->source == DS_SRC_HINT_DEFAULT)
        cfg_origin(c, DS_KEY_WARMUP_MAX_LR, lo->source, "%s", lo->from);
    else
        cfg_origin(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_COMPUTED, "the optimizer's lr");
}

/* No scheduler section: the schedule HF's Trainer builds (create_scheduler
 * with lr_scheduler_type, its warmup steps and the run's length), as the
 * DeepSpeed scheduler HF's documentation pairs with it. */
static ds_status fill_missing_scheduler(ds_config *c, const ds_config_hints *h) {
    const char *t = h->lr_scheduler_type;
    if (!t) {
        c->scheduler = DS_SCHED_NONE;
        cfg_origin(c, DS_KEY_SCHEDULER, DS_SRC_DEFAULT, "no scheduler section: constant lr");
        return DS_OK;
    }
    const char *name = cfg_hint_name(h, DS_HINT_LR_SCHEDULER);
    ds_sched_type s;
    if (!strcmp(t, "linear")) s = DS_SCHED_WARMUP_DECAY_LR;
    else if (!strcmp(t, "cosine")) s = DS_SCHED_WARMUP_COSINE_LR;
    else if (!strcmp(t, "constant")) s = DS_SCHED_NONE;
    else if (!strcmp(t, "constant_with_warmup")) s = DS_SCHED_WARMUP_LR;
    else
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: must be linear, cosine, constant or constant_with_warmup, got \"%s\"",
                      name, t);
    c->scheduler = s;
    cfg_origin(c, DS_KEY_SCHEDULER, cfg_hint_source(h, DS_HINT_LR_SCHEDULER), "%s %s", name, t);
    if (s == DS_SCHED_NONE) return DS_OK;
    /* HF's schedules warm up linearly from 0 to the optimizer lr; its
     * cosine ends at 0. They are its LambdaLR, stepped as its Trainer steps
     * them (sched_hf), over the warmup steps as given: 0 is no warmup. */
    c->sched_hf = true;
    c->warmup_type = DS_WARMUP_LINEAR;
    c->warmup_num_steps = h->warmup_num_steps > 0 ? h->warmup_num_steps : 0;
    cfg_origin(c, DS_KEY_WARMUP_NUM_STEPS, cfg_hint_source(h, DS_HINT_WARMUP), "%s",
               cfg_hint_name(h, DS_HINT_WARMUP));
    if (s == DS_SCHED_WARMUP_COSINE_LR) {
        c->warmup_min_ratio = 0.0;
        c->cos_min_ratio = 0.0;
    } else {
        c->warmup_min_lr = 0.0;
        cfg_origin(c, DS_KEY_WARMUP_MIN_LR, DS_SRC_COMPUTED, "HF's schedules start at 0");
        max_lr_from_lr(c);
    }
    if (s == DS_SCHED_WARMUP_LR || total_from_hints(c, h)) return DS_OK;
    return RFAIL(c, DS_ERR_CONFIG,
                 "scheduler: no section, so the trainer's \"%s\" schedule (%s, from %s) runs, "
                 "and it needs the run's length: set %s, or %s with training data; or %s "
                 "\"constant\"; or write a scheduler section",
                 t, ds_sched_type_name(s), name, cfg_hint_name(h, DS_HINT_TOTAL_STEPS),
                 cfg_hint_name(h, DS_HINT_EPOCHS), name);
}

static ds_status fill_warmup_num_steps(ds_config *c, const ds_config_hints *h) {
    const char *key = "scheduler.params.warmup_num_steps", *name = cfg_hint_name(h, DS_HINT_WARMUP);
    if (c->warmup_num_steps_auto) {
        if (h->warmup_num_steps < 0) return needs_hint(c, key, name);
        warmup_from_hint(c, h);
        return DS_OK;
    }
    if (c->warmup_num_steps_set && h->warmup_num_steps >= 0 && cfg_hint_chosen(h, DS_HINT_WARMUP) &&
        c->warmup_num_steps != h->warmup_num_steps)
        return mismatch_int(c, key, (long long)c->warmup_num_steps,
                            (long long)h->warmup_num_steps, name);
    cfg_origin(c, DS_KEY_WARMUP_NUM_STEPS, c->warmup_num_steps_set ? DS_SRC_CONFIG : DS_SRC_DEFAULT,
               "%s", "");
    return DS_OK;
}

static ds_status fill_total_num_steps(ds_config *c, const ds_config_hints *h) {
    const char *key = "scheduler.params.total_num_steps";
    if (c->total_num_steps_auto) {
        if (total_from_hints(c, h)) return DS_OK;
        return RFAIL(c, DS_ERR_CONFIG,
                     "%s: \"auto\" needs the run's length and none was given: set %s, or %s "
                     "with training data (ds_init_desc.hints); or write a number",
                     key, cfg_hint_name(h, DS_HINT_TOTAL_STEPS), cfg_hint_name(h, DS_HINT_EPOCHS));
    }
    if (!c->total_num_steps_set)
        return RFAIL(c, DS_ERR_CONFIG, "%s: required by %s (a number or \"auto\"), got nothing",
                     key, ds_sched_type_name(c->scheduler));
    if (h->total_num_steps >= 0 && cfg_hint_chosen(h, DS_HINT_TOTAL_STEPS) &&
        c->total_num_steps != h->total_num_steps)
        return mismatch_int(c, key, (long long)c->total_num_steps, (long long)h->total_num_steps,
                            cfg_hint_name(h, DS_HINT_TOTAL_STEPS));
    cfg_origin(c, DS_KEY_TOTAL_NUM_STEPS, DS_SRC_CONFIG, "%s", "");
    return DS_OK;
}

ds_status cfg_resolve_scheduler(ds_config *c, const ds_config_hints *h) {
    if (!c->scheduler_set) return fill_missing_scheduler(c, h);
    cfg_origin(c, DS_KEY_SCHEDULER, DS_SRC_CONFIG, "%s", "");
    if (c->scheduler != DS_SCHED_WARMUP_COSINE_LR) {
        /* HF fills warmup_min_lr "auto" with 0 (no trainer argument for it). */
        if (c->warmup_min_lr_auto) {
            c->warmup_min_lr = 0.0;
            cfg_origin(c, DS_KEY_WARMUP_MIN_LR, DS_SRC_COMPUTED, "HF's fill for \"auto\"");
        } else {
            cfg_origin(c, DS_KEY_WARMUP_MIN_LR,
                       c->warmup_min_lr_set ? DS_SRC_CONFIG : DS_SRC_DEFAULT, "%s", "");
        }
        /* warmup_max_lr "auto": the trainer's lr (HF), which is the
         * optimizer's. Absent with WarmupLR: DeepSpeed's
         * WarmupLR(warmup_max_lr=None) takes the optimizer lr; WarmupDecayLR
         * keeps its 0.001. */
        if (c->warmup_max_lr_auto) {
            max_lr_from_lr(c);
        } else if (c->warmup_max_lr_set) {
            if (h->lr >= 0 && cfg_hint_chosen(h, DS_HINT_LR) && c->warmup_max_lr != h->lr)
                return mismatch_real(c, "scheduler.params.warmup_max_lr", c->warmup_max_lr, h->lr,
                                     cfg_hint_name(h, DS_HINT_LR));
            cfg_origin(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_CONFIG, "%s", "");
        } else if (c->scheduler == DS_SCHED_WARMUP_LR) {
            c->warmup_max_lr = c->lr;
            cfg_origin(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_COMPUTED,
                       "WarmupLR without it: the optimizer's lr (DeepSpeed)");
        } else {
            cfg_origin(c, DS_KEY_WARMUP_MAX_LR, DS_SRC_DEFAULT, "%s", "");
        }
    }
    DS_TRY(fill_warmup_num_steps(c, h));
    if (c->scheduler == DS_SCHED_WARMUP_LR) return DS_OK;
    return fill_total_num_steps(c, h);
}

/* ---------------------------------------------------------- precision -- */

static ds_status fill_enabled(ds_config *c, const ds_config_hints *h, ds_config_key k,
                              const char *key, bool *field, bool is_auto, bool written,
                              ds_hint_id id, int hint) {
    const char *name = cfg_hint_name(h, id);
    if (is_auto) {
        if (hint >= 0) {
            *field = hint > 0;
            cfg_origin(c, k, cfg_hint_source(h, id), "%s", name);
        } else { /* HF's --fp16 / --bf16 default: off */
            *field = false;
            cfg_origin(c, k, DS_SRC_DEFAULT, "\"auto\" and no %s: off", name);
        }
        return DS_OK;
    }
    bool chosen = hint >= 0 && cfg_hint_chosen(h, id);
    if (written) {
        if (chosen && *field != (hint > 0))
            return RFAIL(c, DS_ERR_CONFIG,
                         "%s: the config says %s but the trainer's value (%s) is %s; write "
                         "\"auto\" to take the trainer's, or make them agree",
                         key, *field ? "true" : "false", name, hint > 0 ? "true" : "false");
        cfg_origin(c, k, DS_SRC_CONFIG, "%s", "");
        return DS_OK;
    }
    /* absent: a precision the user asked for turns on (HF would silently
     * train in the config's precision instead) */
    if (chosen && hint > 0) {
        *field = true;
        cfg_origin(c, k, DS_SRC_HINT, "%s; the config does not set %s", name, key);
    } else {
        cfg_origin(c, k, DS_SRC_DEFAULT, "%s", "");
    }
    return DS_OK;
}

ds_status cfg_resolve_precision(ds_config *c, const ds_config_hints *h) {
    DS_TRY(fill_enabled(c, h, DS_KEY_FP16, "fp16.enabled", &c->fp16_enabled, c->fp16_enabled_auto,
                        c->fp16_enabled_set, DS_HINT_FP16, h->fp16));
    return fill_enabled(c, h, DS_KEY_BF16, "bf16.enabled", &c->bf16_enabled, c->bf16_enabled_auto,
                        c->bf16_enabled_set, DS_HINT_BF16, h->bf16);
}

/* -------------------------------------------------------------- sizes -- */

static void fill_size(ds_config *c, ds_config_key k, int64_t *field, bool is_auto, bool written,
                      int64_t from_hidden, const char *formula, int64_t hid, int64_t dflt) {
    if (!is_auto) {
        cfg_origin(c, k, written ? DS_SRC_CONFIG : DS_SRC_DEFAULT, "%s", "");
    } else if (hid > 0) {
        *field = from_hidden;
        cfg_origin(c, k, DS_SRC_COMPUTED, "%s, hidden_size %lld", formula, (long long)hid);
    } else {
        *field = dflt;
        cfg_origin(c, k, DS_SRC_DEFAULT, "\"auto\" without the model's hidden size");
    }
}

void cfg_resolve_sizes(ds_config *c, const ds_config_hints *h) {
    /* HF's trainer_config_finalize: sizes from the model's hidden size;
     * DeepSpeed's defaults stand when it is unknown. */
    int64_t hid = h->hidden_size > 0 ? h->hidden_size : 0;
    fill_size(c, DS_KEY_REDUCE_BUCKET_SIZE, &c->reduce_bucket_size, c->reduce_bucket_size_auto,
              c->reduce_bucket_size_set, hid * hid, "hidden^2", hid, 500000000);
    /* int(0.9 * hidden * hidden) evaluated left to right as Python does, so
     * the value is HF's to the element. */
    fill_size(c, DS_KEY_PREFETCH_BUCKET_SIZE, &c->stage3_prefetch_bucket_size,
              c->prefetch_bucket_size_auto, c->prefetch_bucket_size_set,
              (int64_t)(0.9 * (double)hid * (double)hid), "int(0.9 * hidden^2)", hid, 50000000);
    fill_size(c, DS_KEY_PERSISTENCE_THRESHOLD, &c->stage3_param_persistence_threshold,
              c->persistence_threshold_auto, c->persistence_threshold_set, 10 * hid,
              "10 * hidden", hid, 100000);
}
