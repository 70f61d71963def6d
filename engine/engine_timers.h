/* Inside the engine: the wall_clock_breakdown timers (engine/wall_clock.h
 * is what users see). engine_step.c brackets forward, backward and the
 * optimizer step with ds_wc_start / ds_wc_stop, which do nothing but one
 * branch when the key is off. */
#ifndef DS_ENGINE_TIMERS_H
#define DS_ENGINE_TIMERS_H

#include <stdbool.h>
#include <time.h>

#include "engine/comm/comm.h"
#include "engine/wall_clock.h"

typedef enum ds_wc_phase { DS_WC_FWD = 0, DS_WC_BWD, DS_WC_STEP, DS_WC_PHASES } ds_wc_phase;

typedef struct ds_wc_state {
    bool on;                      /* wall_clock_breakdown */
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
static inline double ds_wc_start(const ds_wc_state *w) { return w->on ? ds_wc_now() : 0.0; }
static inline void ds_wc_stop(ds_wc_state *w, ds_wc_phase p, double t0) {
    if (w->on) w->acc[p] += ds_wc_now() - t0;
}

#endif /* DS_ENGINE_TIMERS_H */
