/* Models as ordered lists of modules (the interface; models/ implements it).
 *
 * A module owns parameters (declared by name, shape and init, never
 * allocated by the module) and computes one step of a chain:
 *
 *     x_0 = batch  ->  module 0  ->  x_1  ->  module 1  -> ... ->  loss
 *
 * The engine allocates everything: it hands the module, for one call, the
 * pointers to its parameters (gathered, under ZeRO stage 3), its gradient
 * slots, its input and output activations, a saved-activation area that lives
 * from forward to backward, and a scratch area. Because the engine drives the
 * modules in order, it can gather a module's parameters just before use,
 * prefetch the next, release them after, reduce a gradient bucket as soon as a
 * module's backward completes, and recompute a module's forward during backward
 * (activation checkpointing): the module code knows nothing of ZeRO.
 *
 * The last module of a model is its loss: its input is the logits [B, C] and
 * its output one float, the mean loss of the micro-batch. Its backward ignores
 * dy and starts the chain with d(loss * ctx->loss_scale).
 *
 * Parameter names follow Hugging Face's
 * ("bert.encoder.layer.0.attention.self.query.weight"). */
#ifndef DS_CORE_MODULE_H
#define DS_CORE_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_backend ds_backend;
typedef struct ds_module ds_module;

#define DS_MAX_NAME 128
#define DS_MAX_DIMS 4

typedef enum ds_init_kind {
    DS_INIT_ZEROS = 0,
    DS_INIT_ONES,
    DS_INIT_NORMAL,  /* mean a, std b */
    DS_INIT_UNIFORM, /* in [a, b) */
} ds_init_kind;

/* One parameter tensor of a module. */
typedef struct ds_param_desc {
    char name[DS_MAX_NAME];
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    ds_init_kind init;
    float init_a, init_b;
    bool has_zero_row;     /* row zero_row (first dimension) starts at 0, as
                              nn.Embedding's padding_idx row does */
    int64_t zero_row;
} ds_param_desc;

static inline int64_t ds_param_numel(const ds_param_desc *p) {
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++) n *= p->shape[i];
    return n;
}

/* One micro-batch, on the device. */
typedef struct ds_batch {
    int B, T;                /* rows and padded sequence length */
    const int32_t *tokens;   /* [B, T] */
    const int32_t *type_ids; /* [B, T] or NULL (all zero) */
    const float *mask;       /* [B, T]: 1 for a real token, 0 for padding */
    const int32_t *labels;   /* [B] or NULL when only predicting */
    const float *class_weights; /* [C] or NULL: weighted cross-entropy */
} ds_batch;

/* Everything one forward or backward call of a module sees. */
typedef struct ds_module_ctx {
    ds_backend *be;
    const ds_batch *batch;
    bool training;         /* dropout active */
    uint64_t seed;         /* RNG stream of this (step, micro-step, module): the same in a
                              recomputation, different across ranks and steps */
    float *const *params;  /* the module's parameters, in declared order (fp32) */
    float *const *grads;   /* backward only: gradient slots, ACCUMULATE into them */
    const float *x;        /* input activation; NULL for the first module (it reads batch) */
    float *y;              /* forward: output (out_elems floats) */
    const float *dy;       /* backward: gradient of the output; NULL for the loss module */
    float *dx;             /* backward: gradient of the input; NULL for the first module */
    void *saved;           /* saved_bytes, kept from forward to backward */
    void *scratch;         /* scratch_bytes, undefined on entry */
    float loss_scale;      /* loss module backward: d(loss) = loss_scale */
} ds_module_ctx;

typedef struct ds_module_ops {
    const char *type; /* "embedding", "encoder_layer", "linear", "xent", ... */
    /* Output floats for a batch of B x T; for the loss module, 1. */
    size_t (*out_elems)(const ds_module *m, int B, int T);
    /* Bytes kept from forward to backward; must not depend on the data. */
    size_t (*saved_bytes)(const ds_module *m, int B, int T);
    /* Bytes of temporaries during one call. */
    size_t (*scratch_bytes)(const ds_module *m, int B, int T);
    ds_status (*forward)(ds_module *m, ds_module_ctx *ctx);
    ds_status (*backward)(ds_module *m, ds_module_ctx *ctx);
    void (*destroy)(ds_module *m); /* frees impl and the module itself */
} ds_module_ops;

struct ds_module {
    const ds_module_ops *ops;
    char name[DS_MAX_NAME];   /* "bert.encoder.layer.3" */
    int n_params;
    ds_param_desc *params;    /* owned by the module */
    bool checkpointable;      /* activation checkpointing may recompute it */
    void *impl;
};

/* A model: modules in execution order, the last one being the loss. */
typedef struct ds_model {
    char type[32];        /* "mlp", "bert" */
    int n_modules;
    ds_module **modules;  /* owned */
    int n_classes;
    int vocab_size;
    int max_seq_len;
    int hidden_size;      /* used to resolve "auto" bucket sizes */
} ds_model;

/* Frees the modules and the model. */
void ds_model_destroy(ds_model *m);

/* Total parameter elements (Psi). */
int64_t ds_model_num_params(const ds_model *m);

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_MODULE_H */
