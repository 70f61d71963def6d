/* Sections "tensorboard" and "csv_monitor": DeepSpeed's TensorBoardConfig
 * and CSVConfig (deepspeed/monitor/config.py), three keys each. wandb and
 * comet need their services and stay in the list of ignored sections. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/config_internal.h"

#define MOFF(f) offsetof(ds_monitor_config, f)

/* A string key of the section into a fixed buffer at base+off. */
static ds_status read_str(const cfg_ctx *ctx, json_t *v, const char *path, char *dst, size_t cap,
                          bool allow_empty) {
    char got[96];
    cfg_fmt_value(v, got, sizeof got);
    if (!json_is_string(v) || cfg_is_auto(v))
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be a string, got %s", path, got);
    size_t n = json_string_length(v);
    if (n >= cap)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must be shorter than %zu characters, got %s",
                        path, cap, got);
    if (!allow_empty && n == 0)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must not be empty (it names a folder)", path);
    const char *s = json_string_value(v);
    if (strlen(s) != n)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must not contain a NUL character", path);
    snprintf(dst, cap, "%s", s);
    return DS_OK;
}

static ds_status read_output_path(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_monitor_config *m = base;
    return read_str(ctx, v, path, m->output_path, sizeof m->output_path, true);
}

static ds_status read_job_name(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_monitor_config *m = base;
    DS_TRY(read_str(ctx, v, path, m->job_name, sizeof m->job_name, false));
    /* a folder name inside output_path, as DeepSpeed joins them */
    if (strcmp(m->job_name, ".") == 0 || strcmp(m->job_name, "..") == 0)
        return CFG_FAIL(ctx, DS_ERR_CONFIG, "%s: must name a folder, got \"%s\"", path,
                        m->job_name);
    return DS_OK;
}

static const cfg_key k_monitor[] = {
    {"enabled", CFG_BOOL, MOFF(enabled), 0, 0, 0, CFG_NO_OFF, CFG_NO_OFF, NULL},
    {"output_path", CFG_FN, MOFF(output_path), 0, 0, 0, CFG_NO_OFF, CFG_NO_OFF, read_output_path},
    {"job_name", CFG_FN, MOFF(job_name), 0, 0, 0, CFG_NO_OFF, CFG_NO_OFF, read_job_name},
};

ds_status cfg_read_monitor(const cfg_ctx *ctx, json_t *v, const char *path, void *base) {
    ds_config *c = base;
    const char *dot = strrchr(path, '.');
    const char *name = dot ? dot + 1 : path;
    ds_monitor_config *m = strcmp(name, "tensorboard") == 0 ? &c->tensorboard : &c->csv_monitor;
    DS_TRY(cfg_need_object(ctx, v, path));
    return cfg_walk(ctx, v, path, k_monitor, sizeof k_monitor / sizeof k_monitor[0], m, NULL, 0);
}
