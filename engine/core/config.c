/* ds_config: DeepSpeed's defaults and the parse entry points. The key
 * tables are in config_sections.c, the typed readers in config_read.c,
 * "auto" and the batch rule in config_resolve.c, the JSON writer in
 * config_json.c. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config_internal.h"
#include "engine/core/read_file.h"

void ds_config_defaults(ds_config *c) {
    /* Zero first: padding and unused string tails are then equal in two
     * configs with equal settings, so tests can compare them byte for byte. */
    memset(c, 0, sizeof *c);
    c->steps_per_print = 0; /* DeepSpeed's None: no progress report */
    c->gradient_predivide_factor = 1.0;
    c->gradient_clipping = 1.0; /* DeepSpeed >= 0.19.3 (constants.py) */

    c->optimizer = DS_OPTIM_ADAMW; /* "Adam" with DeepSpeed's adam_w_mode default true */
    c->lr = 1e-3;
    c->betas[0] = 0.9;
    c->betas[1] = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 0.0;
    c->adam_w_mode = true;
    c->bias_correction = true;
    c->onebit = DS_ONEBIT_NONE; /* DeepSpeed's OnebitAdam / ZeroOneAdam defaults: */
    c->freeze_step = 100000;
    c->var_freeze_step = 100000;
    c->var_update_scaler = 16;
    c->local_step_scaler = 32678;
    c->local_step_clipper = 16;
    c->cuda_aware = false;
    snprintf(c->comm_backend_name, sizeof c->comm_backend_name, "nccl");

    c->scheduler = DS_SCHED_NONE;
    c->warmup_min_lr = 0.0;
    c->warmup_max_lr = 0.001;
    c->warmup_num_steps = 1000;
    c->warmup_type = DS_WARMUP_LOG;
    c->total_num_steps = 0;
    c->warmup_min_ratio = 0.0;
    c->cos_min_ratio = 0.0001;
    c->last_batch_iteration = -1;

    c->loss_scale = 0.0;
    c->initial_scale_power = 16;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->min_loss_scale = 1.0;
    c->communication_data_type = DS_F32;

    c->zero_stage = 0;
    c->allgather_partitions = true;
    c->allgather_bucket_size = 500000000;
    c->overlap_comm = false;
    c->reduce_scatter = true;
    c->reduce_bucket_size = 500000000;
    c->contiguous_gradients = true;
    c->stage3_prefetch_bucket_size = 50000000;
    c->stage3_param_persistence_threshold = 100000;
    c->stage3_max_live_parameters = 1000000000;
    c->stage3_max_reuse_distance = 1000000000;
    c->sub_group_size = 1000000000;
    c->zero_quantized_weights = false; /* DeepSpeed DeepSpeedZeroConfig: False */
    c->zero_quantized_gradients = false; /* DeepSpeed DeepSpeedZeroConfig: False */
    c->zero_hpz_partition_size = 1;    /* DeepSpeed: Field(1, ge=0) */
    c->mics_shard_size = -1;           /* DeepSpeed: Field(-1) */
    c->mics_hierarchical_params_gather = false;

    ds_offload_config *o = &c->offload_optimizer;
    o->device = DS_OFFLOAD_NONE;
    o->nvme_path[0] = '\0'; /* DeepSpeed's None: required with device "nvme" */
    o->pin_memory = true;   /* DeepSpeed >= 0.19.5 (offload_config.py) */
    o->buffer_count = 4;
    o->buffer_size = 100000000;
    o->max_in_cpu = 1000000000;
    o->ratio = 1.0;
    c->offload_param = *o;
    c->offload_param.buffer_count = 5;
    /* DeepSpeed's AIO_*_DEFAULT (runtime/swap_tensor/constants.py) */
    c->aio.block_size = 1048576;
    c->aio.queue_depth = 8;
    c->aio.thread_count = 1;
    c->aio.single_submit = false;
    c->aio.overlap_events = true;
    /* DeepSpeed's monitor/config.py */
    snprintf(c->tensorboard.job_name, sizeof c->tensorboard.job_name, "DeepSpeedJobName");
    snprintf(c->csv_monitor.job_name, sizeof c->csv_monitor.job_name, "DeepSpeedJobName");
    /* DeepSpeed's profiling/constants.py */
    c->flops_profiler.profile_step = 1;
    c->flops_profiler.module_depth = -1;
    c->flops_profiler.top_modules = 1;
    c->flops_profiler.detailed = true;

    c->number_checkpoints = 0;
    c->checkpoint_tag_validation = 1; /* Warn */

    snprintf(c->backend, sizeof c->backend, "cpu");
    snprintf(c->comm, sizeof c->comm, "auto");
    c->comm_timeout_s = 300.0;
    c->num_threads = 0;
    c->max_consecutive_skips = 3;
    c->gather_rows = true;
    c->save_on_signal = 0;
    /* Slurm's default KillWait and Kubernetes' default grace period */
    c->preempt_deadline_s = 30.0;
    snprintf(c->gemm_input_dtype, sizeof c->gemm_input_dtype, "auto");
    snprintf(c->qgz_scheme, sizeof c->qgz_scheme, "int8");
}

const char *ds_config_comm_auto(const ds_config *c) {
    if (!strcmp(c->backend, "auto")) return "auto";
    return !strcmp(c->backend, "cuda") && c->world_size > 1 ? "nccl" : "mpi";
}

ds_status ds_config_settle_comm(ds_config *c) {
    if (!strcmp(c->comm, "nccl") && !strcmp(c->backend, "cpu"))
        return DS_ERR(DS_ERR_CONFIG, "zero_engine.comm: \"nccl\" needs the cuda backend "
                      "(zero_engine.backend \"cuda\", or \"auto\" on a machine with a GPU); "
                      "the backend is cpu");
    if (!strcmp(c->comm, "auto")) snprintf(c->comm, sizeof c->comm, "%s", ds_config_comm_auto(c));
    return DS_OK;
}

ds_dtype ds_config_gemm_inputs(const ds_config *c) {
    if (!strcmp(c->gemm_input_dtype, "bf16")) return DS_BF16;
    if (!strcmp(c->gemm_input_dtype, "fp32")) return DS_F32;
    return c->bf16_enabled ? DS_BF16 : DS_F32; /* "auto" */
}

static const struct {
    const char *name;
    int signo;
} k_signals[] = {{"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM},
                 {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},   {"SIGXCPU", SIGXCPU},
                 {"SIGPWR", SIGPWR}};

int ds_signal_from_name(const char *name) {
    if (!name) return 0;
    for (size_t i = 0; i < sizeof k_signals / sizeof *k_signals; i++)
        if (!strcmp(name, k_signals[i].name) || !strcmp(name, k_signals[i].name + 3))
            return k_signals[i].signo;
    return 0;
}

const char *ds_signal_name(int signo) {
    for (size_t i = 0; i < sizeof k_signals / sizeof *k_signals; i++)
        if (k_signals[i].signo == signo) return k_signals[i].name;
    static _Thread_local char other[16];
    snprintf(other, sizeof other, "SIG%d", signo);
    return other;
}

const char *ds_optim_type_name(ds_optim_type t) {
    switch (t) {
    case DS_OPTIM_ADAM: return "Adam";
    case DS_OPTIM_ADAMW: return "AdamW";
    case DS_OPTIM_SGD: return "SGD";
    }
    return "?";
}

const char *ds_sched_type_name(ds_sched_type t) {
    switch (t) {
    case DS_SCHED_NONE: return "none";
    case DS_SCHED_WARMUP_LR: return "WarmupLR";
    case DS_SCHED_WARMUP_DECAY_LR: return "WarmupDecayLR";
    case DS_SCHED_WARMUP_COSINE_LR: return "WarmupCosineLR";
    }
    return "?";
}

const char *ds_warmup_type_name(ds_warmup_type t) {
    switch (t) {
    case DS_WARMUP_LOG: return "log";
    case DS_WARMUP_LINEAR: return "linear";
    }
    return "?";
}

const char *ds_offload_device_name(ds_offload_device d) {
    switch (d) {
    case DS_OFFLOAD_NONE: return "none";
    case DS_OFFLOAD_CPU: return "cpu";
    case DS_OFFLOAD_NVME: return "nvme";
    }
    return "?";
}

/* Turn a parsed document into a config; `file` is "" for a string. */
static ds_status parse_root(json_t *root, const char *file, ds_config *out,
                            ds_config_warn_fn warn, void *user) {
    ds_config c;
    ds_config_defaults(&c);
    snprintf(c.path, sizeof c.path, "%s", file);
    cfg_ctx ctx = {.file = file, .warn = warn, .user = user, .cfg = &c};
    if (!json_is_object(root)) {
        char got[96];
        cfg_fmt_value(root, got, sizeof got);
        return CFG_FAIL(&ctx, DS_ERR_CONFIG, "the top level must be a JSON object, got %s", got);
    }
    DS_TRY(cfg_walk(&ctx, root, "", cfg_top_keys, cfg_top_nkeys, &c, cfg_top_unimplemented, 1));
    /* DeepSpeed scales before the reduction with these (fp16's range at
     * many ranks); here the sum is divided once, in the update */
    if (c.prescale_gradients || c.gradient_predivide_factor != 1.0)
        cfg_warn(&ctx, "prescale_gradients / gradient_predivide_factor: without effect here "
                       "(gradients are summed over the ranks and divided once, in the update)");
    *out = c;
    return DS_OK;
}

/* The key path of the object member that ends at text[end) (jansson's
 * position for a duplicate key, just past it): the keys of the objects
 * around it, walked from the start, "zero_optimization.stage". Empty when
 * the text is not what that walk expects. */
static void key_path_at(const char *text, size_t end, char *out, size_t cap) {
    enum { DEPTH = 16 };
    char keys[DEPTH][128]; /* keys[d]: the last key read at depth d */
    int depth = -1;
    char last[128] = "";
    out[0] = '\0';
    for (size_t i = 0; i < end && text[i]; i++) {
        char c = text[i];
        if (c == '"') { /* a string: copied (escapes kept as written) */
            size_t n = 0;
            for (i++; i < end && text[i] && text[i] != '"'; i++) {
                if (text[i] == '\\' && i + 1 < end) {
                    if (n + 1 < sizeof last) last[n++] = text[i];
                    i++;
                }
                if (n + 1 < sizeof last) last[n++] = text[i];
            }
            last[n] = '\0';
            size_t j = i + 1;
            while (j < end && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' ||
                               text[j] == '\r'))
                j++;
            if (depth >= 0 && depth < DEPTH && (j >= end || text[j] == ':'))
                snprintf(keys[depth], sizeof keys[depth], "%s", last);
        } else if (c == '{') {
            depth++;
            if (depth < DEPTH) keys[depth][0] = '\0';
        } else if (c == '}') {
            depth--;
        }
    }
    if (depth < 0 || depth >= DEPTH) return;
    size_t n = 0;
    for (int d = 0; d <= depth && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", d ? "." : "", keys[d]);
}

/* jansson's message, with our "file:line:col:" in front. Duplicate keys are
 * refused by the parser itself (JSON_REJECT_DUPLICATES), at any depth; the
 * message names the key's path (text: what was parsed). */
static ds_status syntax_error(const char *name, const json_error_t *err, const char *text) {
    if (json_error_code(err) == json_error_duplicate_key && err->position > 0) {
        char path[512];
        key_path_at(text, (size_t)err->position, path, sizeof path);
        if (path[0])
            return DS_ERR(DS_ERR_CONFIG, "%s:%d:%d: %s: duplicate key (given twice in its "
                          "object; keep one)", name, err->line, err->column, path);
    }
    return DS_ERR(DS_ERR_CONFIG, "%s:%d:%d: JSON syntax error: %s", name, err->line, err->column,
                  err->text);
}

ds_status ds_config_parse_string(const char *json, ds_config *out, ds_config_warn_fn warn,
                                 void *user) {
    if (!json || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_config_parse_string: NULL argument");
    json_error_t err;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &err);
    if (!root) return syntax_error("<string>", &err, json);
    ds_status st = parse_root(root, "", out, warn, user);
    json_decref(root);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

ds_status ds_config_parse_file(const char *path, ds_config *out, ds_config_warn_fn warn,
                               void *user) {
    if (!path || !out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_config_parse_file: NULL argument");
    /* Read whole by us (a config is small): an unreadable file is DS_ERR_IO
     * with errno's words, not a "syntax error" at line -1, and a duplicate
     * key's path is found in the text (syntax_error). */
    char *text;
    size_t len;
    DS_TRY(ds_read_file(path, 0, &text, &len));
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    ds_status st = root ? DS_OK : syntax_error(path, &err, text);
    free(text);
    if (!root) return st;
    st = parse_root(root, path, out, warn, user);
    json_decref(root);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}
