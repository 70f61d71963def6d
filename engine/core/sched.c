/* DeepSpeed's warmup schedules as a pure function of the step (see sched.h).
 * The arithmetic follows lr_schedules.py operation by operation, so the
 * doubles match Python's up to libm's log/cos. */
#include "engine/core/sched.h"

#include <math.h>

/* DeepSpeed clamps the warmup length to at least 2: log(1) would divide by 0. */
static double warmup_len(const ds_config *c) {
    return (double)(c->warmup_num_steps > 2 ? c->warmup_num_steps : 2);
}

/* WarmupLR._get_gamma during warmup (it < W). */
static double warmup_gamma(const ds_config *c, int64_t it) {
    double W = warmup_len(c);
    if (c->warmup_type == DS_WARMUP_LINEAR) return (double)it / W;
    return (1.0 / log(W)) * log((double)it + 1.0); /* inverse_log_warm_up * log(it + 1) */
}

static double warmup_lr(const ds_config *c, int64_t it) {
    if (it < 0) return c->warmup_min_lr; /* get_lr() before the first step() */
    double W = warmup_len(c), gamma;
    if ((double)it < W) {
        gamma = warmup_gamma(c, it);
    } else if (c->scheduler == DS_SCHED_WARMUP_DECAY_LR) {
        double T = (double)c->total_num_steps;
        double rest = T - W > 1.0 ? T - W : 1.0;
        gamma = (T - (double)it) / rest;
        if (gamma < 0.0) gamma = 0.0;
    } else {
        gamma = 1.0;
    }
    return c->warmup_min_lr + (c->warmup_max_lr - c->warmup_min_lr) * gamma;
}

static double cosine_ratio(const ds_config *c, int64_t it) {
    if (it < 0) return 0.0; /* WarmupCosineLR.get_lr() before the first step() */
    double W = warmup_len(c);
    if ((double)it < W) {
        double r = warmup_gamma(c, it);
        return c->warmup_min_ratio + r * (1.0 - c->warmup_min_ratio);
    }
    double real_last = (double)it - W + 1.0;
    double T = (double)c->total_num_steps;
    double real_total = T - W > 1.0 ? T - W : 1.0;
    /* Newer DeepSpeed clamps the progress at 1 so the lr stays at the floor
     * after total_num_steps instead of climbing back up the cosine. */
    double p = real_last / real_total;
    if (p > 1.0) p = 1.0;
    double r = (1.0 + cos(M_PI * p)) / 2.0;
    r = c->cos_min_ratio + (1.0 - c->cos_min_ratio) * r;
    return r > 0.0 ? r : 0.0;
}

/* transformers' optimization.py lambdas (_get_linear_schedule_with_warmup_lr_
 * lambda and its cosine and constant-with-warmup siblings, num_cycles 0.5),
 * operation by operation, at current_step s. */
static double hf_lambda(const ds_config *c, int64_t s) {
    double W = (double)c->warmup_num_steps, T = (double)c->total_num_steps, x = (double)s;
    if (x < W) return x / (W > 1.0 ? W : 1.0);
    if (c->scheduler == DS_SCHED_WARMUP_LR) return 1.0;
    double rest = T - W > 1.0 ? T - W : 1.0;
    if (c->scheduler == DS_SCHED_WARMUP_DECAY_LR) {
        double r = (T - x) / rest;
        return r > 0.0 ? r : 0.0;
    }
    double progress = (x - W) / rest;
    double r = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress));
    return r > 0.0 ? r : 0.0;
}

double ds_sched_lr(const ds_config *c, int64_t step) {
    /* HF's Trainer builds its LambdaLR before the first step (lambda(0))
     * and steps it after each optimizer step: step s runs at lambda(s) */
    if (c->sched_hf && c->scheduler != DS_SCHED_NONE) return c->lr * hf_lambda(c, step);
    int64_t it = c->last_batch_iteration + step;
    switch (c->scheduler) {
    case DS_SCHED_NONE: return c->lr;
    case DS_SCHED_WARMUP_LR:
    case DS_SCHED_WARMUP_DECAY_LR: return warmup_lr(c, it);
    case DS_SCHED_WARMUP_COSINE_LR: return c->lr * cosine_ratio(c, it);
    }
    return c->lr;
}
