/* A 1-D convolutional regressor written outside zero-engine, against its
 * installed headers only: what engine/core/module.h calls "your own model".
 *
 *   signal [B, L, C_in] fp32 -> conv1d (k1, same, ReLU)  -> [B, L, H]
 *                            -> conv1d (k2, same, ReLU)  -> [B, L, H]
 *                            -> conv1d (k2, valid, ReLU,  the SAME weight as
 *                                       the previous conv: a tie, own bias)
 *                                                         -> [B, L - k2 + 1, H]
 *                            -> mean over time            -> [B, H]
 *                            -> dense                     -> [B, 1]
 *                            -> mean squared error against target [B]
 *
 * The sequence length L is fixed when the model is built (the inputs have no
 * DS_DIM_SEQ dimension, so every batch has T = 1 and the modules take L from
 * their own descriptor); a variable-length version would declare the time
 * axis DS_DIM_SEQ and read ctx->batch->T instead.
 *
 * Every constructor returns a ds_status and leaves a message in
 * ds_last_error() on failure; *out is then NULL. Names use the prefix cr_
 * (conv regressor): ds_ is the library's. */
#ifndef CONV_MODEL_H
#define CONV_MODEL_H

#include <stdbool.h>

#include <engine/core/module.h>

/* ---- modules ---- */

typedef enum cr_padding {
    CR_PAD_VALID = 0, /* L_out = L - k + 1: only windows inside the signal */
    CR_PAD_SAME,      /* L_out = L (odd k): zeros (k - 1) / 2 beyond both ends */
} cr_padding;

typedef struct cr_conv1d_desc {
    int seq_len;            /* L of the input */
    int in_channels;        /* C_in */
    int out_channels;       /* C_out */
    int kernel;             /* k, >= 1, <= seq_len; odd for CR_PAD_SAME */
    cr_padding padding;
    const char *input;      /* a batch tensor [B, L, C_in] to read (the first module),
                               or NULL: the previous module's output */
    const char *tie_weight; /* NULL: own weight. Otherwise the name of an earlier conv's
                               weight parameter ("conv.1.weight") of the same shape, used
                               here too (module.h, rule 6) */
} cr_conv1d_desc;

/* "cr_conv1d": y[b, t, o] = relu(bias[o] + sum_j sum_i W[j, o, i] x[b, t + j - pad, i]).
 * Parameters "<name>.weight" [k * C_out, C_in] (tap j's [C_out, C_in] matrix at
 * rows j * C_out, see the note in conv_model.c) unless tied, and
 * "<name>.bias" [C_out]. */
ds_status cr_conv1d_create(const char *name, const cr_conv1d_desc *d, ds_module **out);

/* "cr_mean_pool": [B, L, C] -> [B, C], the mean over time. No parameters. */
ds_status cr_mean_pool_create(const char *name, int seq_len, int channels, ds_module **out);

/* "cr_dense": [B, in] -> [B, out] = x W^T + b; "<name>.weight" [out, in],
 * "<name>.bias" [out]. */
ds_status cr_dense_create(const char *name, int in, int out, ds_module **out_m);

/* "cr_mse": the loss. Input [B] (a [B, 1] prediction), target: the batch
 * tensor `target` [B]. y[0] = mean over the rows of (x - target)^2, y[1] = B
 * (module.h, rule 5). */
ds_status cr_mse_create(const char *name, const char *target, ds_module **out);

/* ---- the model ---- */

typedef struct cr_model_desc {
    int seq_len;     /* L */
    int in_channels; /* C_in */
    int channels;    /* H, the width of every conv */
    int kernel1;     /* the first conv's kernel (odd) */
    int kernel2;     /* the second and third convs' kernel (odd, < seq_len) */
} cr_model_desc;

/* The model above, inputs "signal" fp32 [B, L, C_in] and "target" fp32 [B]
 * (DS_INPUT_TARGET). Owned by the caller until handed to ds_initialize. */
ds_status cr_model_create(const cr_model_desc *d, ds_model **out);

#endif /* CONV_MODEL_H */
