/* Loss scaling for fp16, with DeepSpeed's DynamicLossScaler semantics.
 *
 * Dynamic (fp16.loss_scale == 0): start at 2^initial_scale_power. On an
 * overflow the step is skipped; the scale is divided by 2 (not below
 * min_loss_scale) once `hysteresis` overflows have been absorbed (each
 * overflow with hysteresis left only decrements it). After loss_scale_window
 * steps without overflow since the last one the scale doubles and, unless
 * consecutive_hysteresis, hysteresis is restored; with consecutive_hysteresis
 * every good step restores it. Static (loss_scale > 0): fixed scale, an
 * overflowing step is still skipped. bf16 and fp32 use scale 1 and never skip. */
#ifndef DS_ZERO_LOSS_SCALER_H
#define DS_ZERO_LOSS_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/config.h"

typedef struct ds_loss_scaler {
    bool enabled;      /* fp16 */
    bool dynamic;
    double scale;
    double min_scale;
    double factor;     /* 2 */
    int64_t window;
    int delayed_shift; /* configured hysteresis */
    int cur_hysteresis;
    bool consecutive_hysteresis;
    int64_t cur_iter;
    int64_t last_overflow_iter;
} ds_loss_scaler;

void ds_loss_scaler_init(ds_loss_scaler *ls, const ds_config *cfg);

/* Record the outcome of one step; returns true when the scale changed. */
bool ds_loss_scaler_update(ds_loss_scaler *ls, bool overflow);

#endif /* DS_ZERO_LOSS_SCALER_H */
