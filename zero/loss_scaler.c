/* DeepSpeed's dynamic loss scaler (deepspeed/runtime/fp16/loss_scaler.py). */
#include "zero/loss_scaler.h"

#include <math.h>

void ds_loss_scaler_init(ds_loss_scaler *ls, const ds_config *cfg) {
    *ls = (ds_loss_scaler){0};
    ls->enabled = cfg->fp16_enabled;
    ls->factor = 2.0;
    ls->last_overflow_iter = -1;
    if (!ls->enabled) {
        ls->scale = 1.0;
        return;
    }
    ls->dynamic = cfg->loss_scale == 0.0;
    ls->scale = ls->dynamic ? ldexp(1.0, cfg->initial_scale_power) : cfg->loss_scale;
    ls->min_scale = cfg->min_loss_scale;
    ls->window = cfg->loss_scale_window;
    ls->delayed_shift = cfg->hysteresis;
    ls->cur_hysteresis = cfg->hysteresis;
    ls->consecutive_hysteresis = cfg->consecutive_hysteresis;
}

bool ds_loss_scaler_update(ds_loss_scaler *ls, bool overflow) {
    if (!ls->enabled || !ls->dynamic) return false;
    double before = ls->scale;
    if (overflow) {
        if (ls->delayed_shift == 1 || ls->cur_hysteresis == 1) {
            double s = ls->scale / ls->factor;
            ls->scale = s > ls->min_scale ? s : ls->min_scale;
        } else {
            ls->cur_hysteresis -= 1;
        }
        ls->last_overflow_iter = ls->cur_iter;
    } else {
        if (ls->consecutive_hysteresis) ls->cur_hysteresis = ls->delayed_shift;
        if ((ls->cur_iter - ls->last_overflow_iter) % ls->window == 0) {
            if (!ls->consecutive_hysteresis) ls->cur_hysteresis = ls->delayed_shift;
            ls->scale *= ls->factor;
        }
    }
    ls->cur_iter += 1;
    return ls->scale != before;
}
