/* Inside the engine: the wall_clock_breakdown timers (engine/wall_clock.h
 * is what users see) and the flops profiler's state (engine/flops_profiler.h). engine_step.c brackets forward, backward and the
 * optimizer step with ds_wc_start / ds_wc_stop, which do nothing but one
 * branch when the key is off. */
#ifndef DS_ENGINE_TIMERS_H
#define DS_ENGINE_TIMERS_H

#include <stdbool.h>
#include <time.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/wall_clock.h"

typedef enum ds_wc_phase {
    DS_WC_FWD = 0,
    DS_WC_BWD,
    DS_WC_STEP,
    DS_WC_ALLREDUCE, /* the step's gradient reduction and agreement (DeepSpeed's
                        backward_allreduce), before the update */
    DS_WC_PHASES
} ds_wc_phase;

/* A backend whose kernels run after the call returns (cuda): the clock is
 * read after its queue drained, as DeepSpeed's synchronized timers and
 * profiler do, or a phase would measure only its launches. NULL on cpu. */
static inline void ds_timer_sync(ds_backend *async_be) {
    if (async_be) (void)async_be->ops->sync(async_be); /* a failure shows at the next call */
}

typedef struct ds_wc_state {
    bool on;                      /* wall_clock_breakdown */
    ds_backend *async_be;         /* ds_timer_sync's */
    bool profiling;               /* the flops profiler's step: time the phases too */
    double prof_acc[DS_WC_PHASES]; /* ... into these */
    double acc[DS_WC_PHASES];     /* seconds since the interval began */
    int64_t steps;                /* optimizer steps in it so far (a checkpoint
                                   * loaded meanwhile moves global_step, not this) */
    ds_comm_stats comm0;          /* the counters then */
    ds_wall_clock last;           /* the latest finished interval */
    bool have_last;
} ds_wc_state;

static inline double ds_wc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static inline double ds_wc_start(const ds_wc_state *w) {
    if (!w->on && !w->profiling) return 0.0;
    ds_timer_sync(w->async_be);
    return ds_wc_now();
}
static inline void ds_wc_stop(ds_wc_state *w, ds_wc_phase p, double t0) {
    if (!w->on && !w->profiling) return;
    ds_timer_sync(w->async_be);
    double dt = ds_wc_now() - t0;
    if (w->on) w->acc[p] += dt;
    if (w->profiling) w->prof_acc[p] += dt;
}

/* ---- flops_profiler (flops_profiler.c) ---- */

typedef struct ds_prof_module {
    double fwd_flops, bwd_flops, fwd_s, bwd_s;
} ds_prof_module;

typedef struct ds_prof_state {
    bool enabled;                   /* flops_profiler.enabled */
    bool active;                    /* counting: inside the profiled step */
    bool done;                      /* the profile is taken */
    int n;                          /* modules */
    ds_prof_module *mods;           /* [n], allocated at init when enabled */
    int64_t step;
    int64_t retry_after;            /* a dropped window's step: profile the next (0: none) */
    ds_backend *async_be;           /* ds_timer_sync's */
    double t_iter0, iter_s, fwd_s, bwd_s, step_s;
    int64_t samples0, batch_per_rank; /* the profiled step's rows a rank (a short window's too) */
    double gemm_flops;              /* the GEMMs' FLOPs so far, while active (the tap's) */
} ds_prof_state;

/* Around one module's forward or backward: the clock and the GEMM counter
 * before, and the module's share after. One branch when not profiling. */
typedef struct ds_prof_mark {
    double t0, flops0;
} ds_prof_mark;

static inline ds_prof_mark ds_prof_begin(const ds_prof_state *p) {
    ds_prof_mark m = {0, 0};
    if (p->active) {
        ds_timer_sync(p->async_be);
        m = (ds_prof_mark){ds_wc_now(), p->gemm_flops};
    }
    return m;
}
static inline void ds_prof_end(ds_prof_state *p, int module, bool backward, ds_prof_mark m) {
    if (!p->active) return;
    ds_timer_sync(p->async_be);
    double dt = ds_wc_now() - m.t0, fl = p->gemm_flops - m.flops0;
    ds_prof_module *x = &p->mods[module];
    if (backward) {
        x->bwd_s += dt;
        x->bwd_flops += fl;
    } else {
        x->fwd_s += dt;
        x->fwd_flops += fl;
    }
}

#endif /* DS_ENGINE_TIMERS_H */
