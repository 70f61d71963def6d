/* wall_clock_breakdown: the interval's means, rank 0's print, and
 * ds_wall_clock_last (engine/wall_clock.h). */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"

void ds_engine_wall_clock_init(engine_t *e) {
    ds_wc_state *w = &e->wc;
    memset(w, 0, sizeof *w);
    w->on = e->cfg.wall_clock_breakdown;
    w->async_be = e->be->kind == DS_BACKEND_CUDA ? e->be : NULL;
    w->comm0 = e->comm->stats;
    ds_engine_prof_init(e);
}

void ds_format_bytes(char *buf, size_t cap, double b) {
    if (b >= 1e9) snprintf(buf, cap, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, cap, "%.2f MB", b / 1e6);
    else if (b >= 1e3) snprintf(buf, cap, "%.2f kB", b / 1e3);
    else snprintf(buf, cap, "%.0f B", b);
}

static void print_interval(const engine_t *e, const ds_wall_clock *w) {
    printf("[zero-engine] time (ms) | fwd: %.2f | bwd: %.2f | allreduce: %.2f | step: %.2f | "
           "comm_wait: %.2f (per step, mean of steps %lld-%lld)\n",
           w->fwd_ms, w->bwd_ms, w->allreduce_ms, w->step_ms, w->comm_wait_ms,
           (long long)w->from_step + 1, (long long)w->to_step);
    printf("[zero-engine] comm per step");
    double intra = 0, inter = 0;
    int listed = 0;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        if (w->calls[k] <= 0) continue;
        char b[32];
        ds_format_bytes(b, sizeof b, w->bytes[k]);
        printf(" | %s: %.4g call%s, %s, %.2f ms, busbw %.2f GB/s", ds_coll_name((ds_coll)k),
               w->calls[k], w->calls[k] == 1.0 ? "" : "s", b, w->ms[k], w->busbw_gbps[k]);
        intra += w->bytes_intra[k];
        inter += w->bytes_inter[k];
        listed++;
    }
    if (!listed) printf(" | no collectives (%d rank%s)", e->comm->world,
                        e->comm->world == 1 ? "" : "s");
    if (w->host_calls > 0) {
        char hb[32];
        ds_format_bytes(hb, sizeof hb, w->host_bytes);
        printf(" | metadata (MPI's own): %.4g call%s, %s, %.2f ms", w->host_calls,
               w->host_calls == 1.0 ? "" : "s", hb, w->host_ms);
    }
    char bi[32], bx[32];
    ds_format_bytes(bi, sizeof bi, intra);
    ds_format_bytes(bx, sizeof bx, inter);
    printf(" | inside host %s, across hosts %s (%d host%s)\n", bi, bx, e->comm->nhosts,
           e->comm->nhosts == 1 ? "" : "s");
    fflush(stdout);
}

void ds_engine_wall_clock_step(engine_t *e) {
    ds_wc_state *w = &e->wc;
    if (!w->on) return;
    w->steps++;
    /* every steps_per_print steps; with DeepSpeed's default null every step,
     * as DeepSpeed logs its timers */
    int64_t every = e->cfg.steps_per_print > 0 ? e->cfg.steps_per_print : 1;
    if (e->global_step % every != 0) return;
    int64_t steps = w->steps;
    double n = (double)steps;
    ds_comm_stats d;
    ds_comm_stats_diff(&e->comm->stats, &w->comm0, &d);
    ds_wall_clock r = {.from_step = e->global_step - steps, .to_step = e->global_step};
    r.fwd_ms = 1e3 * w->acc[DS_WC_FWD] / n;
    r.bwd_ms = 1e3 * w->acc[DS_WC_BWD] / n;
    r.step_ms = 1e3 * w->acc[DS_WC_STEP] / n;
    r.allreduce_ms = 1e3 * w->acc[DS_WC_ALLREDUCE] / n;
    r.comm_wait_ms = 1e3 * d.wait_s / n;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        double s = d.seconds[k];
        r.calls[k] = (double)d.calls[k] / n;
        r.bytes[k] = (double)d.bytes_sent[k] / n;
        r.bytes_intra[k] = (double)d.bytes_intra[k] / n;
        r.bytes_inter[k] = (double)d.bytes_inter[k] / n;
        r.ms[k] = 1e3 * s / n;
        r.busbw_gbps[k] = s > 0 ? (double)d.size_bytes[k] / s *
                                      ds_coll_busbw_factor((ds_coll)k, e->comm->world) / 1e9
                                : 0.0;
    }
    r.host_calls = (double)d.host_calls / n;
    r.host_bytes = (double)d.host_bytes / n;
    r.host_ms = 1e3 * d.host_seconds / n;
    w->last = r;
    w->have_last = true;
    memset(w->acc, 0, sizeof w->acc);
    w->steps = 0;
    w->comm0 = e->comm->stats;
    if (e->comm->rank == 0 && !e->quiet) print_interval(e, &r);
}

ds_status ds_wall_clock_last(const engine_t *e, ds_wall_clock *out, bool *ready) {
    if (!e || !out || !ready) return DS_ERR(DS_ERR_INVALID_ARG, "ds_wall_clock_last: NULL argument");
    *ready = false;
    if (!e->wc.on)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_wall_clock_last: wall_clock_breakdown is off in the config");
    *ready = e->wc.have_last;
    if (*ready) *out = e->wc.last;
    return DS_OK;
}
