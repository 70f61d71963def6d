/* DeepSpeed's DynamicLossScaler, step by step against hand-worked sequences. */
#include <stdio.h>

#include "engine/core/config.h"
#include "zero/loss_scaler.h"

static int fails;

static void expect(const char *what, int step, double got, double want) {
    if (got != want) { /* powers of two: exact */
        printf("FAIL %s step %d: scale %g, expected %g\n", what, step, got, want);
        fails++;
    }
}

int main(void) {
    ds_config c;
    ds_config_defaults(&c);
    c.fp16_enabled = true;
    c.initial_scale_power = 4; /* 16 */
    c.loss_scale_window = 3;
    c.hysteresis = 2;
    c.min_loss_scale = 4;

    /* hysteresis 2: O = overflow, . = good step
     *   O: hysteresis 2 -> 1, scale 16
     *   O: scale 8
     *   .  .  .: three good steps since the last overflow -> 16 (hysteresis back to 2)
     *   O: hysteresis 2 -> 1, 16;  O: 8;  O: 4;  O: min 4 holds */
    const char *seq = "OO...OOOO";
    const double want[] = {16, 8, 8, 8, 16, 16, 8, 4, 4};
    ds_loss_scaler ls;
    ds_loss_scaler_init(&ls, &c);
    expect("initial", 0, ls.scale, 16);
    for (int i = 0; seq[i]; i++) {
        ds_loss_scaler_update(&ls, seq[i] == 'O');
        expect("hysteresis", i + 1, ls.scale, want[i]);
    }

    /* consecutive_hysteresis: a good step restores the hysteresis at once, so
     * isolated overflows never lower the scale. */
    c.consecutive_hysteresis = true;
    ds_loss_scaler_init(&ls, &c);
    const char *seq2 = "O.O.O.";
    for (int i = 0; seq2[i]; i++) ds_loss_scaler_update(&ls, seq2[i] == 'O');
    expect("consecutive", 6, ls.scale, 16);

    /* window without overflow from the start: doubles every 3 steps */
    c.consecutive_hysteresis = false;
    ds_loss_scaler_init(&ls, &c);
    for (int i = 0; i < 6; i++) ds_loss_scaler_update(&ls, false);
    /* (cur_iter - last_overflow_iter) % window == 0 with last = -1: iters 2, 5 */
    expect("growth", 6, ls.scale, 64);

    /* static scale: never changes */
    c.loss_scale = 128;
    ds_loss_scaler_init(&ls, &c);
    ds_loss_scaler_update(&ls, true);
    expect("static", 1, ls.scale, 128);

    /* fp32 / bf16: scale 1, never changes */
    c.fp16_enabled = false;
    ds_loss_scaler_init(&ls, &c);
    ds_loss_scaler_update(&ls, true);
    expect("disabled", 1, ls.scale, 1);

    printf("%s\n", fails ? "test_loss_scaler: FAILED" : "test_loss_scaler: ok");
    return fails != 0;
}
