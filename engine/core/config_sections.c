/* The key tables of ds_config.json: which keys each section has, their
 * types, ranges and DeepSpeed defaults (the defaults live in config.c), and
 * the handlers of sections whose keys depend on one another (the optimizer's
 * and the scheduler's "params" depend on their "type").
 *
 * Ranges follow DeepSpeed / PyTorch where they check (lr >= 0, 0 <= beta < 1,
 * stage 0..3, ratio in [0, 1]); where DeepSpeed accepts a value that cannot
 * work (a bucket of 0 elements, a loss-scale window of 0 steps) we refuse it,
 * since zero-engine would otherwise loop or divide by zero later. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "engine/core/config_internal.h"

#define NKEYS(a) (sizeof(a) / sizeof((a)[0]))
#define OFF(f) offsetof(ds_config, f)
#define OOFF(f) offsetof(ds_offload_config, f)
#define NO CFG_NO_OFF
#define BIG 0.0 /* unused upper bound with CFG_NO_HI */

/* Row builders: name, field, lower bound, upper bound, flags, auto flag, set flag. */
#define ROW(name, kind, off, lo, hi, fl, ao, so, fn) {name, kind, off, lo, hi, fl, ao, so, fn}
#define I64_GE(name, f, lo) ROW(name, CFG_I64, OFF(f), lo, BIG, CFG_NO_HI, NO, NO, NULL)
#define REAL_GE(name, f, lo) ROW(name, CFG_REAL, OFF(f), lo, BIG, CFG_NO_HI, NO, NO, NULL)
#define REAL_GT(name, f, lo) ROW(name, CFG_REAL, OFF(f), lo, BIG, CFG_NO_HI | CFG_LO_OPEN, NO, NO, NULL)
#define REAL_IN(name, f, lo, hi) ROW(name, CFG_REAL, OFF(f), lo, hi, 0, NO, NO, NULL)
#define BOOL(name, f) ROW(name, CFG_BOOL, OFF(f), 0, 0, 0, NO, NO, NULL)
#define FN(name, id, fn) ROW(name, CFG_FN, id, 0, 0, 0, NO, NO, fn)

/* ---------------------------------------------------------------- enums -- */

static ds_status read_offload_device(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    static const char *const names[] = {"none", "cpu", "nvme"};
    int idx;
    DS_TRY(cfg_read_enum(ctx, v, path, names, 3, "\"none\", \"cpu\", \"nvme\"", &idx));
    ((ds_offload_config *)base)->device = (ds_offload_device)idx;
    return DS_OK;
}

static ds_status read_nvme_path(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_offload_config *o = base;
    if (json_is_null(v)) { /* DeepSpeed's default is None: no path */
        o->nvme_path[0] = '\0';
        return DS_OK;
    }
    char got[96];
    cfg_fmt_value(v, got, sizeof got);
    if (!json_is_string(v) || cfg_is_auto(v))
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be a directory path or null, got %s", path,
                        got);
    if (json_string_length(v) >= sizeof o->nvme_path)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be shorter than %zu characters, got %s",
                        path, sizeof o->nvme_path, got);
    snprintf(o->nvme_path, sizeof o->nvme_path, "%s", json_string_value(v));
    return DS_OK;
}

static ds_status read_warmup_type(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    /* DeepSpeed logs a warning and falls back to "log" on an unknown name;
     * a typo here silently changes the schedule, so we refuse it. */
    static const char *const names[] = {"log", "linear"};
    int idx;
    DS_TRY(cfg_read_enum(ctx, v, path, names, 2, "\"log\", \"linear\"", &idx));
    ((ds_config *)base)->warmup_type = (ds_warmup_type)idx;
    return DS_OK;
}

static ds_status read_tag_validation(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    static const char *const names[] = {"Ignore", "Warn", "Fail"};
    int idx;
    DS_TRY(cfg_read_enum(ctx, v, path, names, 3, "\"Ignore\", \"Warn\", \"Fail\"", &idx));
    ((ds_config *)base)->checkpoint_tag_validation = idx;
    return DS_OK;
}

/* A zero_engine key whose values include "auto" as a value of its own (cuda
 * when there is a GPU, NCCL between GPUs, bf16 GEMMs under bf16), not the HF
 * placeholder: matched as a name before the generic check. Three names. */
static ds_status read_named(const cfg_ctx *ctx, json_t *v, const char *path,
                            const char *const names[3], const char *expected, char *dst,
                            size_t cap) {
    int idx = 0;
    if (cfg_is_auto(v)) {
        while (strcmp(names[idx], "auto") != 0) idx++;
    } else {
        DS_TRY(cfg_read_enum(ctx, v, path, names, 3, expected, &idx));
    }
    snprintf(dst, cap, "%s", names[idx]);
    return DS_OK;
}

static ds_status read_backend(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    static const char *const names[] = {"cpu", "cuda", "auto"};
    ds_config *c = base;
    return read_named(ctx, v, path, names, "\"cpu\", \"cuda\", \"auto\"", c->backend,
                      sizeof c->backend);
}

static ds_status read_comm(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    static const char *const names[] = {"auto", "nccl", "mpi"};
    ds_config *c = base;
    return read_named(ctx, v, path, names, "\"auto\", \"nccl\", \"mpi\"", c->comm,
                      sizeof c->comm);
}

static ds_status read_gemm_inputs(const cfg_ctx *ctx, json_t *v, const char *path,
                                  void *base) {
    static const char *const names[] = {"auto", "bf16", "fp32"};
    ds_config *c = base;
    return read_named(ctx, v, path, names, "\"auto\", \"bf16\", \"fp32\"",
                      c->gemm_input_dtype, sizeof c->gemm_input_dtype);
}

/* zero-engine's: which qgZ (config.h qgz_scheme) */
static ds_status read_qgz_scheme(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    static const char *const names[] = {"int8", "int4"};
    int idx;
    DS_TRY(cfg_read_enum(ctx, v, path, names, 2, "\"int8\", \"int4\"", &idx));
    ds_config *c = base;
    snprintf(c->qgz_scheme, sizeof c->qgz_scheme, "%s", names[idx]);
    return DS_OK;
}

static ds_status read_signal(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    if (json_is_null(v)) {
        c->save_on_signal = 0;
        return DS_OK;
    }
    int s = json_is_string(v) ? ds_signal_from_name(json_string_value(v)) : 0;
    if (!s) {
        char got[96];
        cfg_fmt_value(v, got, sizeof got);
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be null or a signal name (\"SIGUSR1\", "
                        "\"SIGUSR2\", \"SIGTERM\", \"SIGINT\", \"SIGHUP\", \"SIGXCPU\", "
                        "\"SIGPWR\"; the SIG may be left out), got %s", path, got);
    }
    c->save_on_signal = s;
    return DS_OK;
}

static ds_status read_comm_dtype(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    static const char *const names[] = {"fp32", "fp16", "bf16"};
    static const ds_dtype types[] = {DS_F32, DS_F16, DS_BF16};
    ds_config *c = base;
    if (json_is_null(v)) { /* DeepSpeed's default: communicate in the training dtype */
        c->comm_dtype_set = false;
        c->communication_data_type = DS_F32;
        return DS_OK;
    }
    int idx;
    DS_TRY(cfg_read_enum(ctx, v, path, names, 3, "null, \"fp32\", \"fp16\", \"bf16\"", &idx));
    c->comm_dtype_set = true;
    c->communication_data_type = types[idx];
    return DS_OK;
}

/* ----------------------------------------------------------- optimizer -- */

static ds_status read_betas(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    char got[96];
    cfg_fmt_value(v, got, sizeof got);
    if (!json_is_array(v) || json_array_size(v) != 2)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be [beta1, beta2], got %s", path, got);
    /* PyTorch's Adam: 0 <= beta < 1 (beta 1 never forgets the first step). */
    static const cfg_key unit = {"betas", CFG_REAL, 0, 0, 1, CFG_HI_OPEN, NO, NO, NULL};
    for (int i = 0; i < 2; i++) {
        char ipath[CFG_PATH_CAP];
        snprintf(ipath, sizeof ipath, "%s[%d]", path, i);
        DS_TRY(cfg_read_real(ctx, json_array_get(v, (size_t)i), ipath, &unit, &c->betas[i]));
    }
    return DS_OK;
}

static const cfg_key k_adam_params[] = {
    ROW("lr", CFG_REAL, OFF(lr), 0, BIG, CFG_NO_HI | CFG_AUTO, OFF(lr_auto), OFF(lr_set), NULL),
    ROW("betas", CFG_FN, OFF(betas), 0, 0, CFG_AUTO, OFF(betas_auto), OFF(betas_set), read_betas),
    ROW("eps", CFG_REAL, OFF(eps), 0, BIG, CFG_NO_HI | CFG_AUTO, OFF(eps_auto), OFF(eps_set), NULL),
    ROW("weight_decay", CFG_REAL, OFF(weight_decay), 0, BIG, CFG_NO_HI | CFG_AUTO,
        OFF(weight_decay_auto), OFF(weight_decay_set), NULL),
    BOOL("adam_w_mode", adam_w_mode),
    BOOL("bias_correction", bias_correction),
    BOOL("hf_param_groups", optim_hf), /* zero-engine's: config.h optim_hf */
};

static const cfg_key k_sgd_params[] = {
    ROW("lr", CFG_REAL, OFF(lr), 0, BIG, CFG_NO_HI | CFG_AUTO, OFF(lr_auto), OFF(lr_set), NULL),
    REAL_GE("momentum", momentum, 0),
    REAL_GE("dampening", dampening, 0),
    ROW("weight_decay", CFG_REAL, OFF(weight_decay), 0, BIG, CFG_NO_HI | CFG_AUTO,
        OFF(weight_decay_auto), OFF(weight_decay_set), NULL),
    BOOL("nesterov", nesterov),
};

static const char *const k_adam_unimpl[] = {"torch_adam", "amsgrad", "fused", NULL};

/* OneBitAdam / ZeroOneAdam: the arguments of DeepSpeed's OnebitAdam and
 * ZeroOneAdam constructors (deepspeed/runtime/fp16/onebit/). */
static ds_status read_onebit_amsgrad(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    (void)base;
    bool on;
    DS_TRY(cfg_read_bool(ctx, v, path, &on));
    if (on)
        return CFG_FAIL(ctx, DS_ERR_UNSUPPORTED, "%s: true is not supported by 1-bit Adam or 0/1 "
                        "Adam (DeepSpeed refuses the AMSGrad variant too)", path);
    return DS_OK;
}

/* Accepted and without effect, as in DeepSpeed, whose 1-bit optimizers
 * store eps_inside_sqrt and max_grad_norm and never read them. */
static ds_status read_onebit_unread(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    (void)base;
    if (json_is_boolean(v)) return DS_OK;
    static const cfg_key any = {"max_grad_norm", CFG_REAL, 0, 0, 0, CFG_NO_HI, NO, NO, NULL};
    double x;
    DS_TRY(cfg_read_real(ctx, v, path, &any, &x));
    return DS_OK;
}

/* DeepSpeed picks its compressed backend by this name; here the engine's
 * communicator carries the traffic (MPI on cpu, NCCL on cuda) whichever is
 * named, so the known names are accepted and others refused. */
static ds_status read_comm_backend_name(const cfg_ctx *ctx, json_t *v, const char *path,
                                        void *base) {
    ds_config *c = base;
    static const char *const names[] = {"nccl", "mpi", "compressed", "hccl"};
    int idx;
    DS_TRY(cfg_read_enum(ctx, v, path, names, 4, "nccl, mpi, compressed, hccl", &idx));
    snprintf(c->comm_backend_name, sizeof c->comm_backend_name, "%s", names[idx]);
    return DS_OK;
}

#define K_ONEBIT_COMMON                                                                        \
    ROW("lr", CFG_REAL, OFF(lr), 0, BIG, CFG_NO_HI | CFG_AUTO, OFF(lr_auto), OFF(lr_set), NULL), \
    ROW("betas", CFG_FN, OFF(betas), 0, 0, CFG_AUTO, OFF(betas_auto), OFF(betas_set),         \
        read_betas),                                                                           \
    ROW("eps", CFG_REAL, OFF(eps), 0, BIG, CFG_NO_HI | CFG_AUTO, OFF(eps_auto), OFF(eps_set),  \
        NULL),                                                                                 \
    ROW("weight_decay", CFG_REAL, OFF(weight_decay), 0, BIG, CFG_NO_HI | CFG_AUTO,            \
        OFF(weight_decay_auto), OFF(weight_decay_set), NULL),                                  \
    BOOL("bias_correction", bias_correction), BOOL("cuda_aware", cuda_aware),                  \
    FN("comm_backend_name", OFF(comm_backend_name), read_comm_backend_name),                   \
    FN("amsgrad", OFF(onebit), read_onebit_amsgrad),                                           \
    FN("eps_inside_sqrt", OFF(var_update_scaler) + 1, read_onebit_unread),                     \
    FN("max_grad_norm", OFF(var_update_scaler) + 2, read_onebit_unread)

static const cfg_key k_onebit_adam_params[] = {
    K_ONEBIT_COMMON,
    /* at least one uncompressed step: the frozen variance must exist */
    I64_GE("freeze_step", freeze_step, 1),
};

static const cfg_key k_zero_one_params[] = {
    K_ONEBIT_COMMON,
    I64_GE("var_freeze_step", var_freeze_step, 0),
    I64_GE("var_update_scaler", var_update_scaler, 1),
    I64_GE("local_step_scaler", local_step_scaler, 1),
    I64_GE("local_step_clipper", local_step_clipper, 1),
};

static ds_status read_optim_params(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    if (c->optimizer == DS_OPTIM_SGD)
        return cfg_walk(ctx, v, path, k_sgd_params, NKEYS(k_sgd_params), c, NULL, 0);
    if (c->onebit == DS_ONEBIT_ADAM)
        return cfg_walk(ctx, v, path, k_onebit_adam_params, NKEYS(k_onebit_adam_params), c, NULL,
                        0);
    if (c->onebit == DS_ONEBIT_ZERO_ONE)
        return cfg_walk(ctx, v, path, k_zero_one_params, NKEYS(k_zero_one_params), c, NULL, 0);
    return cfg_walk(ctx, v, path, k_adam_params, NKEYS(k_adam_params), c, k_adam_unimpl, 0);
}

static ds_status read_nothing(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    (void)ctx, (void)v, (void)path, (void)base; /* "type": read before the walk */
    return DS_OK;
}

static const cfg_key k_optimizer[] = {
    FN("type", OFF(optimizer), read_nothing),
    FN("params", OFF(lr), read_optim_params),
};

/* Optimizers DeepSpeed has and zero-engine does not: DS_ERR_UNSUPPORTED
 * rather than "unknown", so the user knows the name was not a typo. */
static const char *const k_ds_optimizers[] = {"Lamb", "OneBitLamb", "Adagrad", "Lion", "MuAdam",
                                              "MuAdamW", "MuSGD", "Muon", NULL};

static int in_list_ci(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcasecmp(s, *list) == 0) return 1;
    return 0;
}

static ds_status read_optimizer(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    char tpath[CFG_PATH_CAP];
    cfg_join(tpath, path, "type");
    json_t *type = json_object_get(v, "type");
    if (!type)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: missing; must be one of Adam, AdamW, SGD, "
                        "OneBitAdam, ZeroOneAdam", tpath);
    if (json_is_string(type) && in_list_ci(json_string_value(type), k_ds_optimizers))
        return CFG_FAIL(ctx, DS_ERR_UNSUPPORTED,
                        "%s: a DeepSpeed optimizer zero-engine does not implement (it has Adam, "
                        "AdamW, SGD, OneBitAdam, ZeroOneAdam), got \"%s\"",
                        tpath, json_string_value(type));
    static const char *const names[] = {"Adam", "AdamW", "SGD", "OneBitAdam", "ZeroOneAdam"};
    int idx;
    DS_TRY(cfg_read_enum(ctx, type, tpath, names, 5,
                         "Adam, AdamW, SGD, OneBitAdam, ZeroOneAdam", &idx));
    c->optimizer_set = true;
    c->optimizer = idx == 2 ? DS_OPTIM_SGD : DS_OPTIM_ADAM;
    c->onebit = idx == 3 ? DS_ONEBIT_ADAM : idx == 4 ? DS_ONEBIT_ZERO_ONE : DS_ONEBIT_NONE;
    DS_TRY(cfg_walk(ctx, v, path, k_optimizer, NKEYS(k_optimizer), c, NULL, 0));
    if (c->onebit != DS_ONEBIT_NONE) {
        /* DeepSpeed's 1-bit update is p -= lr (m / (sqrt(v) + eps) + wd p):
         * decoupled weight decay and no bias correction, whatever
         * bias_correction says (its constructors keep the key, the step
         * never reads it). Store what runs, and say so when the file asked
         * for the correction. */
        if (c->bias_correction && json_object_get(json_object_get(v, "params"),
                                                  "bias_correction"))
            cfg_warn(ctx, "%s.params.bias_correction: true has no effect for %s (DeepSpeed's "
                          "update has no bias correction either)", path, names[idx]);
        c->bias_correction = false;
        c->adam_w_mode = true;
        c->optimizer = DS_OPTIM_ADAMW;
        return DS_OK;
    }

    if (idx == 1) {
        /* DeepSpeed: the name AdamW forces decoupled weight decay whatever
         * adam_w_mode says; say so rather than silently ignore the key. */
        if (!c->adam_w_mode)
            cfg_warn(ctx, "%s.params.adam_w_mode: false is ignored for type AdamW (DeepSpeed "
                          "forces AdamW); use type Adam for L2 Adam", path);
        c->adam_w_mode = true;
    }
    if (idx != 2) c->optimizer = c->adam_w_mode ? DS_OPTIM_ADAMW : DS_OPTIM_ADAM;
    if (idx == 2 && c->nesterov && (c->momentum <= 0.0 || c->dampening != 0.0)) {
        char m[40], d[40];
        cfg_fmt_real(c->momentum, m, sizeof m);
        cfg_fmt_real(c->dampening, d, sizeof d);
        return CFG_FAIL(ctx, DS_ERR_CONFIG,
                        "%s.params.nesterov: true needs momentum > 0 and dampening 0 (as "
                        "PyTorch's SGD), got momentum %s, dampening %s",
                        path, m, d);
    }
    return DS_OK;
}

/* ----------------------------------------------------------- scheduler -- */

#define K_MIN_LR                                                                               \
    ROW("warmup_min_lr", CFG_REAL, OFF(warmup_min_lr), 0, BIG, CFG_NO_HI | CFG_AUTO,           \
        OFF(warmup_min_lr_auto), OFF(warmup_min_lr_set), NULL)
#define K_MAX_LR                                                                               \
    ROW("warmup_max_lr", CFG_REAL, OFF(warmup_max_lr), 0, BIG, CFG_NO_HI | CFG_AUTO,           \
        OFF(warmup_max_lr_auto), OFF(warmup_max_lr_set), NULL)
/* DeepSpeed (since 0.14) raises on warmup_num_steps <= 0; HF's schedules
 * (hf_lambda_lr) take 0 as no warmup: the >= 1 is checked after the walk. */
#define K_WARMUP_STEPS                                                                         \
    ROW("warmup_num_steps", CFG_I64, OFF(warmup_num_steps), 0, BIG, CFG_NO_HI | CFG_AUTO,      \
        OFF(warmup_num_steps_auto), OFF(warmup_num_steps_set), NULL)
#define K_TOTAL_STEPS                                                                          \
    ROW("total_num_steps", CFG_I64, OFF(total_num_steps), 1, BIG, CFG_NO_HI | CFG_AUTO,        \
        OFF(total_num_steps_auto), OFF(total_num_steps_set), NULL)
#define K_WARMUP_TYPE FN("warmup_type", OFF(warmup_type), read_warmup_type)
#define K_LAST_ITER I64_GE("last_batch_iteration", last_batch_iteration, -1)
/* zero-engine's: the trainer's schedule, HF's LambdaLR (config.h sched_hf) */
#define K_HF_LAMBDA BOOL("hf_lambda_lr", sched_hf)

static const cfg_key k_warmup_lr[] = {K_MIN_LR,      K_MAX_LR,    K_WARMUP_STEPS,
                                      K_WARMUP_TYPE, K_LAST_ITER, K_HF_LAMBDA};
static const cfg_key k_warmup_decay_lr[] = {K_MIN_LR,      K_MAX_LR,      K_WARMUP_STEPS,
                                            K_TOTAL_STEPS, K_WARMUP_TYPE, K_LAST_ITER,
                                            K_HF_LAMBDA};
static const cfg_key k_warmup_cosine_lr[] = {
    K_TOTAL_STEPS,
    REAL_IN("warmup_min_ratio", warmup_min_ratio, 0, 1),
    K_WARMUP_STEPS,
    REAL_IN("cos_min_ratio", cos_min_ratio, 0, 1),
    K_WARMUP_TYPE,
    K_LAST_ITER,
    K_HF_LAMBDA,
};

static ds_status read_sched_params(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    switch (c->scheduler) {
    case DS_SCHED_WARMUP_LR:
        DS_TRY(cfg_walk(ctx, v, path, k_warmup_lr, NKEYS(k_warmup_lr), c, NULL, 0));
        break;
    case DS_SCHED_WARMUP_DECAY_LR:
        DS_TRY(cfg_walk(ctx, v, path, k_warmup_decay_lr, NKEYS(k_warmup_decay_lr), c, NULL, 0));
        break;
    case DS_SCHED_WARMUP_COSINE_LR:
        DS_TRY(cfg_walk(ctx, v, path, k_warmup_cosine_lr, NKEYS(k_warmup_cosine_lr), c, NULL, 0));
        break;
    case DS_SCHED_NONE: break;
    }
    if (!c->sched_hf && c->warmup_num_steps_set && c->warmup_num_steps < 1)
        return RFAIL(c, DS_ERR_CONFIG, "%s.warmup_num_steps: must be >= 1, got %lld", path,
                     (long long)c->warmup_num_steps);
    return DS_OK;
}

static const cfg_key k_scheduler[] = {
    FN("type", OFF(scheduler), read_nothing),
    FN("params", OFF(warmup_min_lr), read_sched_params),
};

static ds_status read_scheduler(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    char tpath[CFG_PATH_CAP];
    cfg_join(tpath, path, "type");
    json_t *type = json_object_get(v, "type");
    static const char *const names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
    static const char *const ds_only[] = {"OneCycle", "LRRangeTest", NULL};
    if (!type)
        return CFG_FAIL(ctx, DS_ERR_CONFIG,
                        "%s: missing; must be one of WarmupLR, WarmupDecayLR, WarmupCosineLR", tpath);
    if (json_is_string(type) && in_list_ci(json_string_value(type), ds_only))
        return CFG_FAIL(ctx, DS_ERR_UNSUPPORTED,
                        "%s: a DeepSpeed scheduler zero-engine does not implement (it has "
                        "WarmupLR, WarmupDecayLR, WarmupCosineLR), got \"%s\"",
                        tpath, json_string_value(type));
    int idx;
    DS_TRY(cfg_read_enum(ctx, type, tpath, names, 3, "WarmupLR, WarmupDecayLR, WarmupCosineLR",
                         &idx));
    c->scheduler = (ds_sched_type)(DS_SCHED_WARMUP_LR + idx);
    c->scheduler_set = true;
    DS_TRY(cfg_walk(ctx, v, path, k_scheduler, NKEYS(k_scheduler), c, NULL, 0));
    if (c->total_num_steps_set && c->warmup_num_steps_set && c->total_num_steps < c->warmup_num_steps)
        cfg_warn(ctx, "%s.params.total_num_steps %lld is less than warmup_num_steps %lld: the "
                      "schedule never finishes warming up (DeepSpeed warns too)",
                 path, (long long)c->total_num_steps, (long long)c->warmup_num_steps);
    return DS_OK;
}

/* ----------------------------------------------------------- precision -- */

static const cfg_key k_fp16[] = {
    ROW("enabled", CFG_BOOL, OFF(fp16_enabled), 0, 0, CFG_AUTO, OFF(fp16_enabled_auto),
        OFF(fp16_enabled_set), NULL),
    BOOL("auto_cast", fp16_auto_cast),
    REAL_GE("loss_scale", loss_scale, 0),
    /* 2^64 times any loss overflows every fp16 gradient (max 65504); the
     * bound keeps 2^power finite in a float. */
    ROW("initial_scale_power", CFG_INT, OFF(initial_scale_power), 0, 64, 0, NO, NO, NULL),
    I64_GE("loss_scale_window", loss_scale_window, 1),
    ROW("hysteresis", CFG_INT, OFF(hysteresis), 1, BIG, CFG_NO_HI, NO, NO, NULL),
    BOOL("consecutive_hysteresis", consecutive_hysteresis),
    REAL_GT("min_loss_scale", min_loss_scale, 0),
};
static const char *const k_fp16_unimpl[] = {"fp16_master_weights_and_grads", NULL};

static const cfg_key k_bf16[] = {
    ROW("enabled", CFG_BOOL, OFF(bf16_enabled), 0, 0, CFG_AUTO, OFF(bf16_enabled_auto),
        OFF(bf16_enabled_set), NULL),
};
static const char *const k_bf16_unimpl[] = {"immediate_grad_update", "check_grad_overflow",
                                            "bf16_master_weights_and_grads",
                                            "bf16_optimizer_states", NULL};

static ds_status read_fp16(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_fp16, NKEYS(k_fp16), base, k_fp16_unimpl, 0);
}

static ds_status read_bf16(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_bf16, NKEYS(k_bf16), base, k_bf16_unimpl, 0);
}

/* ------------------------------------------------------------ offload -- */

#define OROW(name, kind, f, lo, hi, fl) ROW(name, kind, OOFF(f), lo, hi, fl, NO, NO, NULL)

static const cfg_key k_offload_optimizer[] = {
    FN("device", OOFF(device), read_offload_device),
    FN("nvme_path", OOFF(nvme_path), read_nvme_path),
    OROW("buffer_count", CFG_INT, buffer_count, 1, BIG, CFG_NO_HI),
    OROW("pin_memory", CFG_BOOL, pin_memory, 0, 0, 0),
    OROW("ratio", CFG_REAL, ratio, 0, 1, 0),
    OROW("pipeline_read", CFG_BOOL, pipeline_read, 0, 0, 0),
    OROW("pipeline_write", CFG_BOOL, pipeline_write, 0, 0, 0),
    OROW("fast_init", CFG_BOOL, fast_init, 0, 0, 0),
};
static const char *const k_offload_optimizer_unimpl[] = {
    "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc", NULL};

static const cfg_key k_offload_param[] = {
    FN("device", OOFF(device), read_offload_device),
    FN("nvme_path", OOFF(nvme_path), read_nvme_path),
    OROW("buffer_count", CFG_INT, buffer_count, 1, BIG, CFG_NO_HI),
    OROW("buffer_size", CFG_I64, buffer_size, 1, BIG, CFG_NO_HI),
    OROW("max_in_cpu", CFG_I64, max_in_cpu, 0, BIG, CFG_NO_HI),
    OROW("pin_memory", CFG_BOOL, pin_memory, 0, 0, 0),
};

/* null, DeepSpeed's default for both offload sections: no offload */
static ds_status read_offload_optimizer(const cfg_ctx *ctx, json_t *v, const char *path,
                                        void *base) {
    if (json_is_null(v)) return DS_OK;
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_offload_optimizer, NKEYS(k_offload_optimizer),
                    &((ds_config *)base)->offload_optimizer, k_offload_optimizer_unimpl, 0);
}

static ds_status read_offload_param(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    if (json_is_null(v)) return DS_OK;
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_offload_param, NKEYS(k_offload_param),
                    &((ds_config *)base)->offload_param, NULL, 0);
}

/* ----------------------------------------------------------------- aio -- */

/* O_DIRECT transfers must start and end on the file system's block
 * boundaries (512 or 4096 bytes): a request size that is a multiple of 4096
 * keeps every piece aligned on any of them. */
static ds_status read_aio_block_size(const cfg_ctx *ctx, json_t *v, const char *path,
                                     void *base) {
    static const cfg_key k = {"block_size", CFG_I64, 0, 4096, 1 << 30, 0, NO, NO, NULL};
    int64_t b;
    DS_TRY(cfg_read_i64(ctx, v, path, &k, &b));
    if (b % 4096 != 0)
        return CFG_FAIL(ctx, DS_ERR_CONFIG,
                        "%s: must be a multiple of 4096 (direct I/O works in whole blocks), got "
                        "%lld", path, (long long)b);
    ((ds_config *)base)->aio.block_size = b;
    return DS_OK;
}

static ds_status read_aio_use_gds(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    (void)base;
    bool gds;
    DS_TRY(cfg_read_bool(ctx, v, path, &gds));
    if (gds)
        return CFG_FAIL(ctx, DS_ERR_UNSUPPORTED,
                        "%s: GPUDirect Storage is not implemented in this version of zero-engine "
                        "(swap goes through host buffers), got true", path);
    return DS_OK;
}

/* Upper bounds: far past what any disk queue takes; they keep the I/O
 * thread count (thread_count * queue_depth) a number a process can start. */
static const cfg_key k_aio[] = {
    FN("block_size", OFF(aio.block_size), read_aio_block_size),
    ROW("queue_depth", CFG_INT, OFF(aio.queue_depth), 1, 128, 0, NO, NO, NULL),
    ROW("thread_count", CFG_INT, OFF(aio.thread_count), 1, 64, 0, NO, NO, NULL),
    ROW("intra_op_parallelism", CFG_INT, OFF(aio.thread_count), 1, 64, 0, NO, NO, NULL),
    BOOL("single_submit", aio.single_submit),
    BOOL("overlap_events", aio.overlap_events),
    FN("use_gds", OFF(aio.queue_depth), read_aio_use_gds), /* an id no other FN row has */
};

static ds_status read_aio(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    if (json_is_null(v)) return DS_OK; /* DeepSpeed: a null section means the defaults */
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_aio, NKEYS(k_aio), base, NULL, 0);
}

/* --------------------------------------------------- zero_optimization -- */

/* Sizes count elements. DeepSpeed's fields are named without "stage3_" and
 * take the "stage3_" spelling as an alias; both are accepted here. */
#define ZSIZE(name, f, lo, ao, so)                                                             \
    ROW(name, CFG_I64, OFF(f), lo, BIG, CFG_NO_HI | CFG_AUTO, OFF(ao), OFF(so), NULL)

static const cfg_key k_zero[] = {
    ROW("stage", CFG_INT, OFF(zero_stage), 0, 3, 0, NO, NO, NULL),
    BOOL("allgather_partitions", allgather_partitions),
    I64_GE("allgather_bucket_size", allgather_bucket_size, 1),
    /* DeepSpeed's Optional[bool] = None: null is unset (true at stage 3) */
    ROW("overlap_comm", CFG_BOOL, OFF(overlap_comm), 0, 0, CFG_NULL_UNSET, NO, OFF(overlap_comm_set),
        NULL),
    BOOL("reduce_scatter", reduce_scatter),
    ZSIZE("reduce_bucket_size", reduce_bucket_size, 1, reduce_bucket_size_auto,
          reduce_bucket_size_set),
    BOOL("contiguous_gradients", contiguous_gradients),
    /* 0 is meaningful for these two: no prefetch / partition everything. */
    ZSIZE("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size, 0, prefetch_bucket_size_auto,
          prefetch_bucket_size_set),
    ZSIZE("prefetch_bucket_size", stage3_prefetch_bucket_size, 0, prefetch_bucket_size_auto,
          prefetch_bucket_size_set),
    ZSIZE("stage3_param_persistence_threshold", stage3_param_persistence_threshold, 0,
          persistence_threshold_auto, persistence_threshold_set),
    ZSIZE("param_persistence_threshold", stage3_param_persistence_threshold, 0,
          persistence_threshold_auto, persistence_threshold_set),
    I64_GE("stage3_max_live_parameters", stage3_max_live_parameters, 0),
    I64_GE("max_live_parameters", stage3_max_live_parameters, 0),
    I64_GE("stage3_max_reuse_distance", stage3_max_reuse_distance, 0),
    I64_GE("max_reuse_distance", stage3_max_reuse_distance, 0),
    BOOL("stage3_gather_16bit_weights_on_model_save", stage3_gather_16bit_weights_on_model_save),
    BOOL("gather_16bit_weights_on_model_save", stage3_gather_16bit_weights_on_model_save),
    BOOL("stage3_gather_fp16_weights_on_model_save", stage3_gather_16bit_weights_on_model_save),
    I64_GE("sub_group_size", sub_group_size, 1),
    BOOL("round_robin_gradients", round_robin_gradients),
    BOOL("zero_quantized_weights", zero_quantized_weights),
    BOOL("zero_quantized_gradients", zero_quantized_gradients),
    I64_GE("zero_hpz_partition_size", zero_hpz_partition_size, 0),
    I64_GE("mics_shard_size", mics_shard_size, -1),
    BOOL("mics_hierarchical_params_gather", mics_hierarchical_params_gather),
    FN("offload_optimizer", OFF(offload_optimizer), read_offload_optimizer),
    FN("offload_param", OFF(offload_param), read_offload_param),
};
/* (NAME=VALUE: VALUE, DeepSpeed's default, is what zero-engine does:
 * accepted. A checkpoint holds the fp32 master weights, which a load always
 * reads; a parameter without a gradient is left as it is; the linear layers
 * keep what their backward needs.) */
static const char *const k_zero_unimpl[] = {
    "load_from_fp32_weights=true", "elastic_checkpoint", "ignore_unused_parameters=true",
    "legacy_stage1", "cpu_offload", "cpu_offload_param", "cpu_offload_params",
    "cpu_offload_use_pin_memory", "stage3_model_persistence_threshold=9223372036854775807",
    "model_persistence_threshold=9223372036854775807", "zero_quantized_nontrainable_weights",
    "memory_efficient_linear=true", "use_multi_rank_bucket_allreduce=true", "zenflow",
    "stage3_module_granularity_threshold=0", "module_granularity_threshold=0",
    "pipeline_loading_checkpoint", "override_module_apply=true", "log_trace_cache_warnings",
    "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params",
    "stage3_allgather_sequential", "allgather_sequential", "zeropp_loco_param",
    "enable_sanity_checks", "leaf_module", "save_muon_momentum_buffer_in_memory", NULL};

static ds_status read_zero(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    DS_TRY(cfg_walk(ctx, v, path, k_zero, NKEYS(k_zero), c, k_zero_unimpl, 0));
    /* DeepSpeed: overlap_comm left unset means true for stage 3 only. */
    if (!c->overlap_comm_set) c->overlap_comm = c->zero_stage == 3;
    return DS_OK;
}

/* ------------------------------------- activation_checkpointing etc. -- */

static const cfg_key k_activation[] = {
    BOOL("partition_activations", partition_activations),
    BOOL("cpu_checkpointing", cpu_checkpointing),
    BOOL("contiguous_memory_optimization", contiguous_memory_optimization),
    ROW("number_checkpoints", CFG_I64, OFF(number_checkpoints), 0, BIG,
        CFG_NO_HI | CFG_NULL_UNSET, NO, NO, NULL),
    BOOL("synchronize_checkpoint_boundary", synchronize_checkpoint_boundary),
    BOOL("profile", profile_checkpointing),
};

static ds_status read_activation(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    DS_TRY(cfg_walk(ctx, v, path, k_activation, NKEYS(k_activation), c, NULL, 0));
    /* The section's presence turns recomputation on (DeepSpeed's models opt
     * in by calling its checkpoint API; ours are driven by the engine, so the
     * config is where the user opts in). */
    c->activation_checkpointing = true;
    return DS_OK;
}

static const cfg_key k_checkpoint[] = {
    FN("tag_validation", OFF(checkpoint_tag_validation), read_tag_validation),
};
static const char *const k_checkpoint_unimpl[] = {"use_node_local_storage", "load_universal",
                                                  "parallel_write", "writer", NULL};

static ds_status read_checkpoint(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_checkpoint, NKEYS(k_checkpoint), base, k_checkpoint_unimpl, 0);
}

static const cfg_key k_zero_engine[] = {
    FN("backend", OFF(backend), read_backend),
    FN("comm", OFF(comm), read_comm),
    REAL_GT("comm_timeout_s", comm_timeout_s, 0),
    BOOL("check_collectives", check_collectives),
    /* 0 = OMP_NUM_THREADS or the cores; 4096 is far past any machine here. */
    ROW("num_threads", CFG_INT, OFF(num_threads), 0, 4096, 0, NO, NO, NULL),
    /* 0: the first non-finite gradient fails the step; a million is "never" */
    ROW("max_consecutive_skips", CFG_INT, OFF(max_consecutive_skips), 0, 1000000, 0, NO, NO, NULL),
    FN("save_on_signal", OFF(save_on_signal), read_signal),
    REAL_GT("preempt_deadline_s", preempt_deadline_s, 0),
    FN("gemm_input_dtype", OFF(gemm_input_dtype), read_gemm_inputs),
    FN("qgz_scheme", OFF(qgz_scheme), read_qgz_scheme),
    BOOL("gather_rows", gather_rows),
};

static ds_status read_zero_engine(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_zero_engine, NKEYS(k_zero_engine), base, NULL, 0);
}

/* ------------------------------------------------------------ top level -- */

#define BATCH(name, f, ao, so)                                                                 \
    ROW(name, CFG_I64, OFF(f), 1, BIG, CFG_NO_HI | CFG_AUTO | CFG_NULL_UNSET, OFF(ao), OFF(so), NULL)
/* the micro batch and the accumulation steps: the engine keeps them in an
 * int (their product with the world, train_batch_size, in an int64) */
#define BATCH_INT(name, f, ao, so)                                                             \
    ROW(name, CFG_I64, OFF(f), 1, INT_MAX, CFG_AUTO | CFG_NULL_UNSET, OFF(ao), OFF(so), NULL)

const cfg_key cfg_top_keys[] = {
    BATCH("train_batch_size", train_batch_size, train_batch_size_auto, train_batch_size_set),
    BATCH_INT("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu, micro_batch_auto,
              micro_batch_set),
    BATCH_INT("gradient_accumulation_steps", gradient_accumulation_steps, grad_accum_auto,
              grad_accum_set),
    /* DeepSpeed's default None (no report): null, here 0 */
    ROW("steps_per_print", CFG_I64, OFF(steps_per_print), 1, BIG, CFG_NO_HI | CFG_NULL_UNSET, NO,
        NO, NULL),
    BOOL("wall_clock_breakdown", wall_clock_breakdown),
    BOOL("dataloader_drop_last", dataloader_drop_last),
    BOOL("prescale_gradients", prescale_gradients),
    BOOL("sparse_gradients", sparse_gradients),
    REAL_GT("gradient_predivide_factor", gradient_predivide_factor, 0),
    ROW("gradient_clipping", CFG_REAL, OFF(gradient_clipping), 0, BIG, CFG_NO_HI | CFG_AUTO,
        OFF(gradient_clipping_auto), OFF(gradient_clipping_set), NULL),
    FN("optimizer", OFF(optimizer), read_optimizer),
    FN("scheduler", OFF(scheduler), read_scheduler),
    FN("fp16", OFF(fp16_enabled), read_fp16),
    FN("bf16", OFF(bf16_enabled), read_bf16),
    FN("bfloat16", OFF(bf16_enabled), read_bf16),
    FN("communication_data_type", OFF(communication_data_type), read_comm_dtype),
    FN("zero_optimization", OFF(zero_stage), read_zero),
    FN("activation_checkpointing", OFF(activation_checkpointing), read_activation),
    FN("checkpoint", OFF(checkpoint_tag_validation), read_checkpoint),
    FN("zero_engine", OFF(backend), read_zero_engine),
    FN("aio", OFF(aio), read_aio),
    FN("tensorboard", OFF(tensorboard), cfg_read_monitor),
    FN("csv_monitor", OFF(csv_monitor), cfg_read_monitor),
    FN("flops_profiler", OFF(flops_profiler), cfg_read_flops_profiler),
};
const size_t cfg_top_nkeys = NKEYS(cfg_top_keys);

/* DeepSpeed top-level keys zero-engine does not implement. Left out, off
 * or at DeepSpeed's default (NAME=VALUE) they ask for nothing and are
 * accepted. Otherwise the warning says they are ignored rather than calling
 * them unknown; those marked ! change what training computes (another
 * precision, batch, reduction or data order) and are refused instead: a run
 * that ignored them would train otherwise than its config says. */
const char *const cfg_top_unimplemented[] = {
    "!amp", "!torch_autocast", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer=true", "gradient_accumulation_dtype", "!data_types",
    "memory_breakdown", "wandb", "comet", "comms_logger", "!elasticity", "autotuning",
    "pipeline", "tensor_parallel", "!compression_training", "!curriculum_learning",
    "!data_efficiency", "!sparse_attention", "seq_parallel_communication_data_type",
    "!gradient_allreduce_op=\"mean\"", "compile", "timers", "!weight_quantization",
    "hybrid_engine", "eigenvalue", "!progressive_layer_drop", "!fp8", "nebula", "dump_state",
    "vocabulary_size", "!managed_gradient_accumulation=true", "disable_allgather",
    NULL};
