/* The engine's side of the monitors (engine/monitor/monitor.h): open them at
 * ds_initialize, write each optimizer step's scalars on rank 0, as
 * DeepSpeed's engine does (Train/Samples/<name> at the step's global sample
 * count). */
#include <stdio.h>

#include "engine/engine_internal.h"

ds_status ds_engine_monitor_open(engine_t *e) {
    ds_status worst;
    /* only rank 0 opens files; all learn whether it could, so no rank trains
     * alone */
    DS_TRY(ds_comm_agree(e->comm, ds_monitor_open(&e->cfg, e->comm->rank, &e->monitor), &worst));
    if (worst != DS_OK) return worst;
    ds_engine_monitor_rebase(e);
    if (e->monitor && !e->quiet) {
        const char *ev = ds_monitor_event_file(e->monitor), *csv = ds_monitor_csv_dir(e->monitor);
        if (ev[0]) printf("[zero-engine] tensorboard: %s\n", ev);
        if (csv[0]) printf("[zero-engine] csv_monitor: %s/\n", csv);
    }
    return DS_OK;
}

static ds_status write_step(engine_t *e, double sps) {
    ds_monitor *m = e->monitor;
    const ds_step_info *s = &e->last;
    int64_t at = s->samples; /* DeepSpeed's x axis: global samples */
    DS_TRY(ds_monitor_write(m, "Train/Samples/train_loss", s->loss, at));
    DS_TRY(ds_monitor_write(m, "Train/Samples/lr", s->lr, at));
    DS_TRY(ds_monitor_write(m, "Train/Samples/grad_norm", s->grad_norm, at));
    if (e->scaler.enabled) DS_TRY(ds_monitor_write(m, "Train/Samples/loss_scale", s->loss_scale, at));
    DS_TRY(ds_monitor_write(m, "Train/Samples/samples_per_sec", sps, at));
    /* this rank's memory by purpose, every place together (offload moves
     * optimizer state from the device to the host, not out of the sum) */
    ds_mem_report r;
    ds_mem_snapshot(e->mem, &r);
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++) {
        uint64_t b = 0;
        for (int q = 0; q < DS_PLACE_COUNT; q++) b += r.bytes[p][q];
        char tag[64];
        snprintf(tag, sizeof tag, "Train/Samples/memory_%s_MiB",
                 ds_mem_purpose_name((ds_mem_purpose)p));
        DS_TRY(ds_monitor_write(m, tag, (double)b / (1024.0 * 1024.0), at));
    }
    return ds_monitor_flush(m);
}

void ds_engine_monitor_rebase(engine_t *e) {
    e->monitor_t = ds_wc_now();
    e->monitor_samples = e->samples;
}

void ds_engine_monitor_step(engine_t *e) {
    if (!e->monitor) return;
    double t = ds_wc_now();
    double sps = t > e->monitor_t ? (double)(e->last.samples - e->monitor_samples) / (t - e->monitor_t)
                                  : 0.0;
    e->monitor_t = t;
    e->monitor_samples = e->last.samples;
    if (write_step(e, sps) != DS_OK) {
        fprintf(stderr, "[zero-engine] monitor: %s; monitoring stops, training goes on\n",
                ds_last_error());
        ds_monitor_close(e->monitor);
        e->monitor = NULL;
    }
}
