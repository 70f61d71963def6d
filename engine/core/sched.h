/* Learning-rate schedules: DeepSpeed's WarmupLR, WarmupDecayLR and
 * WarmupCosineLR (deepspeed/runtime/lr_schedules.py), as one pure function of
 * the step count, so resuming needs nothing but the step.
 *
 *     double lr = ds_sched_lr(cfg, optimizer_steps_taken);
 *
 * DeepSpeed's engine steps the scheduler after each optimizer step that was
 * applied (an fp16 overflow skips both), and the scheduler sets the lr at
 * construction from last_batch_iteration = -1. So optimizer step number s
 * (0-based, skipped steps not counted) runs with DeepSpeed's get_lr() at
 * last_batch_iteration = (configured last_batch_iteration, default -1) + s:
 *
 *   WarmupLR       it < 0: warmup_min_lr; then min + (max - min) * gamma,
 *                  gamma = log(it + 1) / log(W)   ("log")
 *                          it / W                 ("linear")   for it < W,
 *                          1                                    after,
 *                  with W = max(2, warmup_num_steps). The optimizer lr is
 *                  not used (warmup_max_lr is the peak).
 *   WarmupDecayLR  as WarmupLR during warmup, then
 *                  gamma = max(0, (T - it) / max(1, T - W)), T = total_num_steps,
 *                  so the lr falls linearly back to warmup_min_lr at it = T.
 *   WarmupCosineLR a ratio of the optimizer lr: it < 0: 0; warmup from
 *                  warmup_min_ratio to 1 with the same gamma; then
 *                  cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * p)) / 2
 *                  with p = min(1, (it - W + 1) / max(1, T - W)).
 *   none           the optimizer lr.
 *
 * The trainer's schedule (c->sched_hf: a config without a scheduler section
 * and a hints.lr_scheduler_type) is instead HF's LambdaLR as its Trainer
 * steps it: created before the first step, stepped after each optimizer
 * step, so step s runs at lr * lambda(s), with W = warmup_num_steps (0 is
 * none) and T = total_num_steps:
 *   s < W          s / max(1, W)
 *   then linear    max(0, (T - s) / max(1, T - W))        (WarmupDecayLR's keys)
 *        cosine    max(0, (1 + cos(pi * (s - W) / max(1, T - W))) / 2)
 *        constant_with_warmup  1                           (WarmupLR's keys)
 * One step ahead of DeepSpeed's schedules of the same shape, which start at
 * last_batch_iteration -1.
 * The config must be resolved (ds_config_resolve). */
#ifndef DS_CORE_SCHED_H
#define DS_CORE_SCHED_H

#include <stdint.h>

#include "engine/core/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The lr of optimizer step `step` (0-based count of applied steps so far).
 * Pure: same inputs, same double. */
double ds_sched_lr(const ds_config *c, int64_t step);

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_SCHED_H */
