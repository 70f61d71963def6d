/* Section "flops_profiler": DeepSpeed's FlopsProfilerConfig
 * (deepspeed/profiling/config.py) with its defaults (config.c): enabled
 * false, recompute_fwd_factor 0, profile_step 1, module_depth -1 (every
 * depth), top_modules 1, detailed true, output_file null (stdout). The
 * profiler itself is engine/flops_profiler.h. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/config_internal.h"

#define FOFF(f) offsetof(ds_flops_profiler_config, f)

/* output_file: a path, or null for stdout (DeepSpeed's None) */
static ds_status read_output_file(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_flops_profiler_config *f = base;
    if (json_is_null(v)) {
        f->output_file[0] = '\0';
        return DS_OK;
    }
    char got[96];
    cfg_fmt_value(v, got, sizeof got);
    if (!json_is_string(v) || cfg_is_auto(v) || json_string_length(v) == 0)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be a file path or null, got %s", path, got);
    size_t n = json_string_length(v);
    if (n >= sizeof f->output_file)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be shorter than %zu characters, got %s",
                        path, sizeof f->output_file, got);
    const char *s = json_string_value(v);
    if (strlen(s) != n)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must not contain a NUL character", path);
    snprintf(f->output_file, sizeof f->output_file, "%s", s);
    return DS_OK;
}

static const cfg_key k_flops[] = {
    {"enabled", CFG_BOOL, FOFF(enabled), 0, 0, 0, CFG_NO_OFF, CFG_NO_OFF, NULL},
    {"recompute_fwd_factor", CFG_REAL, FOFF(recompute_fwd_factor), 0, 0, CFG_NO_HI, CFG_NO_OFF,
     CFG_NO_OFF, NULL},
    {"profile_step", CFG_I64, FOFF(profile_step), 1, 0, CFG_NO_HI, CFG_NO_OFF, CFG_NO_OFF, NULL},
    /* -1: every depth */
    {"module_depth", CFG_I64, FOFF(module_depth), -1, 0, CFG_NO_HI, CFG_NO_OFF, CFG_NO_OFF, NULL},
    {"top_modules", CFG_I64, FOFF(top_modules), 1, 0, CFG_NO_HI, CFG_NO_OFF, CFG_NO_OFF, NULL},
    {"detailed", CFG_BOOL, FOFF(detailed), 0, 0, 0, CFG_NO_OFF, CFG_NO_OFF, NULL},
    {"output_file", CFG_FN, FOFF(output_file), 0, 0, 0, CFG_NO_OFF, CFG_NO_OFF, read_output_file},
};

ds_status cfg_read_flops_profiler(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_flops, sizeof k_flops / sizeof k_flops[0], &c->flops_profiler,
                    NULL, 0);
}
