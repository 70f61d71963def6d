/* ds_config_to_json: the resolved config in DeepSpeed's layout, written by
 * hand rather than through jansson so that reals come out in their shortest
 * exact form (0.0005, not 0.00050000000000000001) and keys keep DeepSpeed's
 * documentation order. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config_internal.h"

typedef struct jw {
    char *buf;
    size_t len, cap;
    int depth;
    int first; /* no comma before the next member */
    int oom;
} jw;

static void jw_raw(jw *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void jw_raw(jw *w, const char *fmt, ...) {
    if (w->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(w->buf + w->len, w->cap - w->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            w->oom = 1;
            return;
        }
        if ((size_t)n < w->cap - w->len) {
            w->len += (size_t)n;
            return;
        }
        size_t cap = w->cap * 2 + (size_t)n;
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->oom = 1;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
}

static void jw_key(jw *w, const char *key) {
    jw_raw(w, "%s\n%*s\"%s\": ", w->first ? "" : ",", 2 * w->depth, "", key);
    w->first = 0;
}

static void jw_open(jw *w, const char *key) {
    if (key)
        jw_key(w, key);
    jw_raw(w, "{");
    w->depth++;
    w->first = 1;
}

static void jw_close(jw *w) {
    w->depth--;
    jw_raw(w, "\n%*s}", 2 * w->depth, "");
    w->first = 0;
}

static void jw_int(jw *w, const char *key, int64_t v) {
    jw_key(w, key);
    jw_raw(w, "%lld", (long long)v);
}

static void jw_real(jw *w, const char *key, double v) {
    char b[40];
    cfg_fmt_real(v, b, sizeof b);
    jw_key(w, key);
    jw_raw(w, "%s", b);
}

static void jw_bool(jw *w, const char *key, bool v) {
    jw_key(w, key);
    jw_raw(w, "%s", v ? "true" : "false");
}

static void jw_null(jw *w, const char *key) {
    jw_key(w, key);
    jw_raw(w, "null");
}

static void jw_str(jw *w, const char *key, const char *s) {
    jw_key(w, key);
    jw_raw(w, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            jw_raw(w, "\\%c", *p);
        else if (*p < 0x20)
            jw_raw(w, "\\u%04x", *p);
        else
            jw_raw(w, "%c", *p);
    }
    jw_raw(w, "\"");
}

/* betas, eps and weight_decay: every Adam flavour's first arguments */
static void write_adam_moments(jw *w, const ds_config *c) {
    char b0[40], b1[40];
    cfg_fmt_real(c->betas[0], b0, sizeof b0);
    cfg_fmt_real(c->betas[1], b1, sizeof b1);
    jw_key(w, "betas");
    jw_raw(w, "[%s, %s]", b0, b1);
    jw_real(w, "eps", c->eps);
    jw_real(w, "weight_decay", c->weight_decay);
}

static void write_optimizer(jw *w, const ds_config *c) {
    jw_open(w, "optimizer");
    jw_str(w, "type", c->onebit == DS_ONEBIT_ADAM       ? "OneBitAdam"
                      : c->onebit == DS_ONEBIT_ZERO_ONE ? "ZeroOneAdam"
                                                        : ds_optim_type_name(c->optimizer));
    jw_open(w, "params");
    jw_real(w, "lr", c->lr);
    if (c->onebit != DS_ONEBIT_NONE) { /* their constructors' arguments, no adam_w_mode */
        write_adam_moments(w, c);
        jw_bool(w, "bias_correction", c->bias_correction);
        if (c->onebit == DS_ONEBIT_ADAM) {
            jw_int(w, "freeze_step", c->freeze_step);
        } else {
            jw_int(w, "var_freeze_step", c->var_freeze_step);
            jw_int(w, "var_update_scaler", c->var_update_scaler);
            jw_int(w, "local_step_scaler", c->local_step_scaler);
            jw_int(w, "local_step_clipper", c->local_step_clipper);
        }
        jw_bool(w, "cuda_aware", c->cuda_aware);
        jw_str(w, "comm_backend_name", c->comm_backend_name);
    } else if (c->optimizer == DS_OPTIM_SGD) {
        jw_real(w, "momentum", c->momentum);
        jw_real(w, "dampening", c->dampening);
        jw_real(w, "weight_decay", c->weight_decay);
        jw_bool(w, "nesterov", c->nesterov);
    } else {
        write_adam_moments(w, c);
        jw_bool(w, "adam_w_mode", c->adam_w_mode);
        jw_bool(w, "bias_correction", c->bias_correction);
        if (c->optim_hf) jw_bool(w, "hf_param_groups", true); /* the trainer's AdamW */
    }
    jw_close(w);
    jw_close(w);
}

static void write_scheduler(jw *w, const ds_config *c) {
    jw_open(w, "scheduler");
    jw_str(w, "type", ds_sched_type_name(c->scheduler));
    jw_open(w, "params");
    if (c->scheduler == DS_SCHED_WARMUP_COSINE_LR) {
        jw_int(w, "total_num_steps", c->total_num_steps);
        jw_real(w, "warmup_min_ratio", c->warmup_min_ratio);
        jw_int(w, "warmup_num_steps", c->warmup_num_steps);
        jw_real(w, "cos_min_ratio", c->cos_min_ratio);
    } else {
        jw_real(w, "warmup_min_lr", c->warmup_min_lr);
        jw_real(w, "warmup_max_lr", c->warmup_max_lr);
        jw_int(w, "warmup_num_steps", c->warmup_num_steps);
        if (c->scheduler == DS_SCHED_WARMUP_DECAY_LR)
            jw_int(w, "total_num_steps", c->total_num_steps);
    }
    jw_str(w, "warmup_type", ds_warmup_type_name(c->warmup_type));
    jw_int(w, "last_batch_iteration", c->last_batch_iteration);
    if (c->sched_hf) jw_bool(w, "hf_lambda_lr", true); /* the trainer's, HF's LambdaLR */
    jw_close(w);
    jw_close(w);
}

static void write_offload(jw *w, const char *key, const ds_offload_config *o, bool param) {
    jw_open(w, key);
    jw_str(w, "device", ds_offload_device_name(o->device));
    if (o->nvme_path[0])
        jw_str(w, "nvme_path", o->nvme_path);
    else
        jw_null(w, "nvme_path");
    jw_int(w, "buffer_count", o->buffer_count);
    if (param) {
        jw_int(w, "buffer_size", o->buffer_size);
        jw_int(w, "max_in_cpu", o->max_in_cpu);
    } else {
        jw_real(w, "ratio", o->ratio);
        jw_bool(w, "pipeline_read", o->pipeline_read);
        jw_bool(w, "pipeline_write", o->pipeline_write);
        jw_bool(w, "fast_init", o->fast_init);
    }
    jw_bool(w, "pin_memory", o->pin_memory);
    jw_close(w);
}

static void write_zero(jw *w, const ds_config *c) {
    jw_open(w, "zero_optimization");
    jw_int(w, "stage", c->zero_stage);
    jw_bool(w, "allgather_partitions", c->allgather_partitions);
    jw_int(w, "allgather_bucket_size", c->allgather_bucket_size);
    jw_bool(w, "overlap_comm", c->overlap_comm);
    jw_bool(w, "reduce_scatter", c->reduce_scatter);
    jw_int(w, "reduce_bucket_size", c->reduce_bucket_size);
    jw_bool(w, "contiguous_gradients", c->contiguous_gradients);
    jw_int(w, "stage3_prefetch_bucket_size", c->stage3_prefetch_bucket_size);
    jw_int(w, "stage3_param_persistence_threshold", c->stage3_param_persistence_threshold);
    jw_int(w, "stage3_max_live_parameters", c->stage3_max_live_parameters);
    jw_int(w, "stage3_max_reuse_distance", c->stage3_max_reuse_distance);
    jw_bool(w, "stage3_gather_16bit_weights_on_model_save",
            c->stage3_gather_16bit_weights_on_model_save);
    jw_int(w, "sub_group_size", c->sub_group_size);
    jw_bool(w, "round_robin_gradients", c->round_robin_gradients);
    jw_bool(w, "zero_quantized_weights", c->zero_quantized_weights);
    jw_bool(w, "zero_quantized_gradients", c->zero_quantized_gradients);
    jw_int(w, "zero_hpz_partition_size", c->zero_hpz_partition_size);
    jw_int(w, "mics_shard_size", c->mics_shard_size);
    jw_bool(w, "mics_hierarchical_params_gather", c->mics_hierarchical_params_gather);
    write_offload(w, "offload_optimizer", &c->offload_optimizer, false);
    write_offload(w, "offload_param", &c->offload_param, true);
    jw_close(w);
}

char *ds_config_to_json(const ds_config *c) {
    static const char *const tag_names[] = {"Ignore", "Warn", "Fail"};
    jw w = {.cap = 4096};
    w.buf = malloc(w.cap);
    if (!w.buf) return NULL;
    w.buf[0] = '\0';

    jw_open(&w, NULL);
    jw_int(&w, "train_batch_size", c->train_batch_size);
    jw_int(&w, "train_micro_batch_size_per_gpu", c->train_micro_batch_size_per_gpu);
    jw_int(&w, "gradient_accumulation_steps", c->gradient_accumulation_steps);
    if (c->steps_per_print > 0)
        jw_int(&w, "steps_per_print", c->steps_per_print);
    else
        jw_null(&w, "steps_per_print");
    jw_bool(&w, "wall_clock_breakdown", c->wall_clock_breakdown);
    jw_bool(&w, "dataloader_drop_last", c->dataloader_drop_last);
    jw_bool(&w, "prescale_gradients", c->prescale_gradients);
    jw_bool(&w, "sparse_gradients", c->sparse_gradients);
    jw_real(&w, "gradient_predivide_factor", c->gradient_predivide_factor);
    jw_real(&w, "gradient_clipping", c->gradient_clipping);
    write_optimizer(&w, c); /* the one that runs, also without a section in the file */
    if (c->scheduler != DS_SCHED_NONE) write_scheduler(&w, c);

    jw_open(&w, "fp16");
    jw_bool(&w, "enabled", c->fp16_enabled);
    jw_bool(&w, "auto_cast", c->fp16_auto_cast);
    jw_real(&w, "loss_scale", c->loss_scale);
    jw_int(&w, "initial_scale_power", c->initial_scale_power);
    jw_int(&w, "loss_scale_window", c->loss_scale_window);
    jw_int(&w, "hysteresis", c->hysteresis);
    jw_bool(&w, "consecutive_hysteresis", c->consecutive_hysteresis);
    jw_real(&w, "min_loss_scale", c->min_loss_scale);
    jw_close(&w);
    jw_open(&w, "bf16");
    jw_bool(&w, "enabled", c->bf16_enabled);
    jw_close(&w);
    if (c->comm_dtype_set)
        jw_str(&w, "communication_data_type", ds_dtype_name(c->communication_data_type));
    else
        jw_null(&w, "communication_data_type");

    write_zero(&w, c);

    if (c->activation_checkpointing) { /* the section's presence is what turns it on */
        jw_open(&w, "activation_checkpointing");
        jw_bool(&w, "partition_activations", c->partition_activations);
        jw_bool(&w, "cpu_checkpointing", c->cpu_checkpointing);
        jw_bool(&w, "contiguous_memory_optimization", c->contiguous_memory_optimization);
        jw_int(&w, "number_checkpoints", c->number_checkpoints);
        jw_bool(&w, "synchronize_checkpoint_boundary", c->synchronize_checkpoint_boundary);
        jw_bool(&w, "profile", c->profile_checkpointing);
        jw_close(&w);
    }

    jw_open(&w, "checkpoint");
    int tv = c->checkpoint_tag_validation;
    jw_str(&w, "tag_validation", tag_names[tv >= 0 && tv <= 2 ? tv : 1]);
    jw_close(&w);

    jw_open(&w, "aio");
    jw_int(&w, "block_size", c->aio.block_size);
    jw_int(&w, "queue_depth", c->aio.queue_depth);
    jw_int(&w, "thread_count", c->aio.thread_count);
    jw_bool(&w, "single_submit", c->aio.single_submit);
    jw_bool(&w, "overlap_events", c->aio.overlap_events);
    jw_close(&w);

    const ds_monitor_config *mons[2] = {&c->tensorboard, &c->csv_monitor};
    const char *mon_names[2] = {"tensorboard", "csv_monitor"};
    for (int i = 0; i < 2; i++) {
        jw_open(&w, mon_names[i]);
        jw_bool(&w, "enabled", mons[i]->enabled);
        jw_str(&w, "output_path", mons[i]->output_path);
        jw_str(&w, "job_name", mons[i]->job_name);
        jw_close(&w);
    }

    jw_open(&w, "flops_profiler");
    jw_bool(&w, "enabled", c->flops_profiler.enabled);
    jw_real(&w, "recompute_fwd_factor", c->flops_profiler.recompute_fwd_factor);
    jw_int(&w, "profile_step", c->flops_profiler.profile_step);
    jw_int(&w, "module_depth", c->flops_profiler.module_depth);
    jw_int(&w, "top_modules", c->flops_profiler.top_modules);
    jw_bool(&w, "detailed", c->flops_profiler.detailed);
    if (c->flops_profiler.output_file[0]) jw_str(&w, "output_file", c->flops_profiler.output_file);
    else jw_null(&w, "output_file");
    jw_close(&w);

    jw_open(&w, "zero_engine");
    jw_str(&w, "backend", c->backend);
    jw_str(&w, "comm", c->comm);
    jw_real(&w, "comm_timeout_s", c->comm_timeout_s);
    jw_bool(&w, "check_collectives", c->check_collectives);
    jw_int(&w, "num_threads", c->num_threads);
    jw_int(&w, "max_consecutive_skips", c->max_consecutive_skips);
    if (c->save_on_signal) jw_str(&w, "save_on_signal", ds_signal_name(c->save_on_signal));
    else jw_null(&w, "save_on_signal");
    jw_real(&w, "preempt_deadline_s", c->preempt_deadline_s);
    jw_str(&w, "gemm_input_dtype", c->gemm_input_dtype);
    jw_str(&w, "qgz_scheme", c->qgz_scheme);
    jw_bool(&w, "gather_rows", c->gather_rows);
    jw_close(&w);
    jw_close(&w);
    jw_raw(&w, "\n");

    if (w.oom) {
        free(w.buf);
        return NULL;
    }
    return w.buf;
}
