/* Communication counters and wall-clock breakdown in --metrics and the
 * end-of-run report (see run_stats.h). */
#include "tools/common/run_stats.h"

#include <stdio.h>

#include "engine/wall_clock.h"

void tr_comm_fields(tr_jline *l, const engine_t *e, ds_comm_stats *prev) {
    ds_comm_stats now, d;
    ds_comm_report(e, &now);
    ds_comm_stats_diff(&now, prev, &d);
    tr_jline_key(l, "comm");
    FILE *f = l->f;
    fputc('{', f);
    int n = 0;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        if (!d.calls[k]) continue;
        fprintf(f,
                "%s\"%s\": {\"calls\": %llu, \"bytes\": %llu, \"inside_host\": %llu, "
                "\"across_hosts\": %llu, \"seconds\": %.6f}",
                n++ ? ", " : "", ds_coll_name((ds_coll)k), (unsigned long long)d.calls[k],
                (unsigned long long)d.bytes_sent[k], (unsigned long long)d.bytes_intra[k],
                (unsigned long long)d.bytes_inter[k], d.seconds[k]);
    }
    if (d.host_calls)
        fprintf(f, "%s\"host\": {\"calls\": %llu, \"bytes\": %llu, \"seconds\": %.6f}",
                n++ ? ", " : "", (unsigned long long)d.host_calls,
                (unsigned long long)d.host_bytes, d.host_seconds);
    fprintf(f, "%s\"wait_s\": %.6f}", n ? ", " : "", d.wait_s);
    *prev = now;
}

void tr_wall_clock_fields(tr_jline *l, const engine_t *e, int64_t step) {
    ds_wall_clock w;
    bool ready = false;
    if (ds_wall_clock_last(e, &w, &ready) != DS_OK || !ready || w.to_step != step) return;
    tr_jline_key(l, "wall_clock");
    FILE *f = l->f;
    fprintf(f,
            "{\"from_step\": %lld, \"to_step\": %lld, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
            "\"allreduce_ms\": %.4f, \"step_ms\": %.4f, \"comm_wait_ms\": %.4f, \"comm\": {",
            (long long)w.from_step, (long long)w.to_step, w.fwd_ms, w.bwd_ms, w.allreduce_ms,
            w.step_ms, w.comm_wait_ms);
    int n = 0;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        if (w.calls[k] <= 0) continue;
        fprintf(f,
                "%s\"%s\": {\"calls\": %.4f, \"bytes\": %.1f, \"inside_host\": %.1f, "
                "\"across_hosts\": %.1f, \"ms\": %.4f, \"busbw_gbps\": %.4f}",
                n++ ? ", " : "", ds_coll_name((ds_coll)k), w.calls[k], w.bytes[k],
                w.bytes_intra[k], w.bytes_inter[k], w.ms[k], w.busbw_gbps[k]);
    }
    fprintf(f, "}, \"host\": {\"calls\": %.4f, \"bytes\": %.1f, \"ms\": %.4f}}", w.host_calls,
            w.host_bytes, w.host_ms);
}

/* per kind: calls, inside, across, seconds (seconds: the largest rank's) */
enum { F_CALLS, F_INTRA, F_INTER, F_SECONDS, F_N };

ds_status tr_comm_report(engine_t *e, const char *prog, const ds_comm_stats *start,
                         int64_t steps) {
    ds_comm_stats now, d;
    ds_comm_report(e, &now);
    ds_comm_stats_diff(&now, start, &d);
    double sum[DS_COLL_COUNT * F_N + 4]; /* then wait_s, host calls, bytes, seconds */
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        sum[k * F_N + F_CALLS] = (double)d.calls[k];
        sum[k * F_N + F_INTRA] = (double)d.bytes_intra[k];
        sum[k * F_N + F_INTER] = (double)d.bytes_inter[k];
        sum[k * F_N + F_SECONDS] = d.seconds[k];
    }
    sum[DS_COLL_COUNT * F_N] = d.wait_s;
    sum[DS_COLL_COUNT * F_N + 1] = (double)d.host_calls;
    sum[DS_COLL_COUNT * F_N + 2] = (double)d.host_bytes;
    sum[DS_COLL_COUNT * F_N + 3] = d.host_seconds;
    /* counts and bytes add over ranks (bytes then: what crossed each kind of
     * link); times are summed too and divided by the ranks below (the mean) */
    DS_TRY(ds_all_reduce_host(e, sum, sizeof sum / sizeof *sum, DS_F64));
    if (ds_rank(e) != 0) return DS_OK;
    int world = ds_world_size(e);
    double per = steps > 0 ? (double)steps : 1.0;
    printf("%s: communication over %lld steps, all %d ranks (bytes sent, inside a host / across "
           "hosts; time the mean of the ranks):",
           prog, (long long)steps, world);
    int n = 0;
    for (int k = 0; k < DS_COLL_COUNT; k++) {
        const double *s = sum + k * F_N;
        if (s[F_CALLS] <= 0) continue;
        char in[32], out[32], inp[32], outp[32];
        ds_format_bytes(in, sizeof in, s[F_INTRA]);
        ds_format_bytes(out, sizeof out, s[F_INTER]);
        ds_format_bytes(inp, sizeof inp, s[F_INTRA] / per);
        ds_format_bytes(outp, sizeof outp, s[F_INTER] / per);
        printf("%s %s %.0f calls, %s / %s, %.3g s (per step %.3g calls, %s / %s, %.3g ms)",
               n++ ? ";" : "", ds_coll_name((ds_coll)k), s[F_CALLS] / world, in, out,
               s[F_SECONDS] / world, s[F_CALLS] / world / per, inp, outp,
               1e3 * s[F_SECONDS] / world / per);
    }
    if (!n) printf(" no collectives");
    const double *h = sum + DS_COLL_COUNT * F_N + 1;
    if (h[0] > 0) {
        char hb[32];
        ds_format_bytes(hb, sizeof hb, h[1] / world);
        printf("; metadata (MPI's own collectives: the step's loss, agreements) %.0f calls, %s, "
               "%.3g s", h[0] / world, hb, h[2] / world);
    }
    printf("; waited for communication %.3g s\n", sum[DS_COLL_COUNT * F_N] / world);
    fflush(stdout);
    return DS_OK;
}
