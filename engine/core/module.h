/* Models as ordered lists of modules: how to write your own.
 *
 * A model is what the engine trains: its declared inputs, then modules run in
 * order, the last one computing the loss:
 *
 *     batch  ->  module 0  ->  x_1  ->  module 1  -> ... ->  module n-1 (loss)
 *
 * The bundled models (models/models.h: MLP, BERT, GPT-2) are built from this
 * API exactly as yours would be; examples/ holds a model written outside the
 * library against the installed headers only.
 *
 * ---- a model ---------------------------------------------------------------
 *
 *   ds_model *m;
 *   DS_TRY(ds_model_create("my_regressor", &m));
 *   int64_t feat[1] = {16};
 *   DS_TRY(ds_model_add_input(m, "x", DS_F32, 1, feat, 0));          // [B, 16]
 *   DS_TRY(ds_model_add_input(m, "y", DS_F32, 0, NULL, DS_INPUT_TARGET)); // [B]
 *   ds_module *mod;
 *   DS_TRY(my_dense_create("dense.0", 16, 64, &mod));   // your module constructor
 *   DS_TRY(ds_model_add_module(m, mod));
 *   DS_TRY(my_mse_create("loss", &mod));
 *   DS_TRY(ds_model_add_module(m, mod));
 *   m->hidden_size = 64;   // optional: sizes DeepSpeed's "auto" buckets
 *   ... ds_initialize(&desc with .model = m, ...) ...   // the engine owns m
 *
 * Inputs are named, typed tensors with a leading batch dimension. A dimension
 * declared DS_DIM_SEQ is the batch's sequence length T, which may differ from
 * batch to batch up to model->max_seq_len (the engine plans every buffer for
 * that longest T). A dataset (engine/data/dataset.h) holds one column per
 * input under the same name; a batch given to ds_forward holds one tensor per
 * input. Inputs flagged DS_INPUT_TARGET are read only by the loss module:
 * ds_predict leaves them out. DS_INPUT_OPTIONAL inputs may be absent (a
 * module then sees NULL from ds_batch_get). An int32 input whose values
 * index something (a table's rows, classes) declares their range with
 * ds_model_input_range, and the engine refuses a value outside it where it
 * enters, naming the row: the whole training dataset at ds_initialize, each
 * batch before it is copied.
 *
 * ---- a module --------------------------------------------------------------
 *
 * A module declares its parameters (name, shape, init; the engine allocates
 * them, never the module) and computes one step of the chain, forward and
 * backward, through the callbacks of ds_module_ops. For one call the engine
 * hands it, in a ds_module_ctx: its parameters (gathered first under ZeRO
 * stage 3), its gradient slots, the input activation x (the previous module's
 * output) or, for the first module, the batch alone, the output buffer y, a
 * saved area that lives from its forward to its backward, and a scratch area.
 * Because the engine drives the modules in order it can gather a module's
 * parameters just before use, prefetch the next, release them after, reduce
 * a gradient bucket as soon as a module's backward completes, and recompute a
 * module's forward during backward (activation checkpointing): the module
 * code knows nothing of ZeRO, ranks or precision.
 *
 * The rules a module keeps (the engine and the tests rely on them):
 *
 *  1. Sizes depend on (B, T) only, never on the data: out_elems, saved_bytes
 *     and scratch_bytes are called once at start-up with the largest B and T,
 *     and every buffer is allocated then. Lay out saved and scratch areas with
 *     ds_carve (below) in forward, backward and the size callbacks alike, so
 *     they cannot disagree.
 *  2. Parameter gradients are ACCUMULATED (+=) into ctx->grads (and
 *     ctx->tied_grads); the engine zeroes them when it should. The input
 *     gradient ctx->dx is WRITTEN (=), every element of it. The first module
 *     gets dx = NULL.
 *  3. Forward writes y and whatever backward needs into `saved`; `scratch` is
 *     undefined on entry of every call and may be overwritten by the next
 *     module. Forward must not touch gradient slots.
 *  4. Forward is a pure function of (parameters, x, batch, ctx->seed,
 *     ctx->training): with activation checkpointing (DeepSpeed's section) the
 *     engine may call it a second time just before backward, with the same
 *     saved area, and must get the same saved values. Draw random numbers
 *     (dropout) from ctx->seed only: the backend's Philox streams are
 *     counter-based, so a recomputation reproduces them.
 *  5. The loss module is last. Its output is two floats: y[0] the loss of
 *     the micro-batch as a mean over its weight, y[1] that weight (the number
 *     of rows, or of counted tokens, or the sum of sample weights; 0 when
 *     nothing counts, and then y[0] = 0). Its backward ignores dy and starts
 *     the chain with d(y[0]) = ctx->loss_scale. The engine normalises every
 *     micro-batch by the weight of ALL ranks' rows together, so the loss
 *     means the same whatever the world size and however the counted items
 *     fall on the ranks (a language model's padding, a weighted loss).
 *  6. A module may use a parameter another, EARLIER module declares (tied
 *     weights: GPT-2's token embedding is also its output projection):
 *     declare it with ds_module_tie; it arrives in ctx->tied with its
 *     gradient slot in ctx->tied_grads. The engine sums both uses'
 *     gradients and stores it once (checkpoints, safetensors) under the
 *     owner's name. Under stage 3 the using module reads it from its owner's
 *     gathered span: one copy, in a slot of the gather pool that both share,
 *     gathered wherever it is needed and released when neither needs it.
 *  7. Errors are returned, never exit()ed: return a ds_status from DS_ERR
 *     naming the module (m->name) and the offending value.
 *
 * Kernels: a module computes with the backend in ctx->be: GEMM, copies and
 * element-wise slots in engine/backend/backend.h, model kernels (embedding,
 * layer norm, activations, attention softmax, dropout, cross-entropy) in
 * engine/backend/nn.h. Pointers in ctx are device pointers (host memory on
 * the cpu backend), fp32. Under bf16 mixed precision the engine sets the
 * backend's GEMM inputs to bf16 (be->gemm_inputs, backend.h;
 * zero_engine.gemm_input_dtype): every be->ops->gemm of a module, a user's
 * own included, then multiplies bf16-rounded A and B with fp32 accumulation
 * (tensor cores on cuda) without asking; A, B and C stay fp32 arrays.
 * The rounded copies live in the backend's GEMM workspace, which the engine
 * sizes before the first step from what modules declare in plan_gemms.
 *
 * Parameter names are what checkpoints, ds_get_param and safetensors use;
 * the bundled models follow Hugging Face's
 * ("bert.encoder.layer.0.attention.self.query.weight"). */
#ifndef DS_CORE_MODULE_H
#define DS_CORE_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_backend ds_backend;
typedef struct ds_module ds_module;
typedef struct ds_gemm_plan ds_gemm_plan; /* engine/backend/backend.h */

#define DS_MAX_NAME 128
#define DS_MAX_DIMS 4
#define DS_MAX_INPUTS 8       /* named tensors in a batch / columns of a dataset */
#define DS_MAX_INPUT_NAME 32
#define DS_DIM_SEQ (-1)       /* a dimension that is the batch's sequence length T */
#define DS_IGNORE_INDEX (-100) /* a target the loss skips (PyTorch's default) */

/* ---- inputs and batches ---- */

enum {
    DS_INPUT_OPTIONAL = 1u << 0, /* a batch may leave it out */
    DS_INPUT_TARGET = 1u << 1,   /* read by the loss only; prediction leaves it out */
    DS_INPUT_IGNORE = 1u << 2,   /* with a range: DS_IGNORE_INDEX is accepted too */
};

/* The shape of one named tensor per row: a model input, a dataset column.
 * Row elements = product of dims (DS_DIM_SEQ counting T); ndim 0 is one
 * value per row. */
typedef struct ds_tensor_desc {
    char name[DS_MAX_INPUT_NAME];
    ds_dtype dtype;          /* DS_I32 or DS_F32 */
    int ndim;                /* dimensions after the batch dimension, 0..DS_MAX_DIMS-1 */
    int64_t dims[DS_MAX_DIMS];
    unsigned flags;          /* DS_INPUT_* (model inputs only) */
    int32_t lo, hi;          /* int32 model inputs: the values the model can read are
                                [lo, hi) when hi > lo (ds_model_input_range), besides
                                DS_IGNORE_INDEX with DS_INPUT_IGNORE; 0, 0: any */
} ds_tensor_desc;

/* DS_OK when every value of `rows` rows of `row_elems` int32 values at v
 * is one the model input `d` accepts (its declared range, if any); else
 * DS_ERR_INVALID_ARG naming the first that is not: "<what> input_ids: row
 * 3, element 7 holds 21128, outside [0, 21128), the range the model
 * declares". */
/* The same for rows numbered from first_row (a chunk of a larger set). */
ds_status ds_tensor_desc_check_rows(const ds_tensor_desc *d, const int32_t *v, size_t first_row,
                                    size_t rows, size_t row_elems, const char *what);
ds_status ds_tensor_desc_check_values(const ds_tensor_desc *d, const int32_t *v, size_t rows,
                                      size_t row_elems, const char *what);

/* Elements of one row of `d` at sequence length T. */
size_t ds_tensor_desc_row_elems(const ds_tensor_desc *d, int T);

/* One tensor of a batch: [B, dims...] row-major at `data`. */
typedef struct ds_tensor {
    char name[DS_MAX_INPUT_NAME];
    ds_dtype dtype;
    void *data;
} ds_tensor;

/* One micro-batch: B rows of named tensors. In ds_forward / ds_predict the
 * data are host memory; inside a module (ctx->batch) device memory. */
typedef struct ds_batch {
    int B;                  /* rows */
    int T;                  /* length of DS_DIM_SEQ dimensions in this batch (1 when the
                               model has none; 0 is taken as 1) */
    int n;                  /* tensors */
    ds_tensor t[DS_MAX_INPUTS];
} ds_batch;

/* The data of tensor `name`, or NULL when the batch has none. */
const void *ds_batch_get(const ds_batch *b, const char *name);
/* Typed views: NULL also when the tensor has another dtype. */
const int32_t *ds_batch_i32(const ds_batch *b, const char *name);
const float *ds_batch_f32(const ds_batch *b, const char *name);
/* Add (or replace) a tensor. DS_ERR_INVALID_ARG for a long name or a full
 * batch. */
ds_status ds_batch_set(ds_batch *b, const char *name, ds_dtype dtype, const void *data);

/* ---- parameters ---- */

typedef enum ds_init_kind {
    DS_INIT_ZEROS = 0,
    DS_INIT_ONES,
    DS_INIT_NORMAL,  /* mean a, std b */
    DS_INIT_UNIFORM, /* in [a, b) */
} ds_init_kind;

/* One parameter tensor a module owns. */
typedef struct ds_param_desc {
    char name[DS_MAX_NAME];
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    ds_init_kind init;
    float init_a, init_b;
    bool has_zero_row;     /* row zero_row (first dimension) starts at 0, as
                              nn.Embedding's padding_idx row does */
    int64_t zero_row;
    /* Left out of weight decay where the optimizer has Hugging Face's two
     * parameter groups (the trainer's AdamW: a config without an optimizer
     * section, see ds_param_decays). Set it for what HF's Trainer leaves out
     * by module type, a normalization layer's weight (GPT-2's ln_1.weight);
     * biases and names with "norm" in them are left out by name anyway. */
    bool no_decay;
    /* The gradient is row-sparse: rows (first dimension) that a step's
     * batches do not touch keep an exactly zero gradient, as an embedding
     * table's do (PyTorch's nn.Embedding(sparse=True)). Set it on such a
     * table after declaring it. With the config's "sparse_gradients": true
     * the engine then exchanges, at stages 0-3, only the rows whose
     * gradient is not all +0.0 bits, as (row index, row) pairs, instead of
     * all-reducing the whole table (zero/grad_sparse.h). The engine finds
     * the rows by scanning the accumulated gradient, so a flag on a
     * parameter whose gradient is in fact dense costs a scan and falls back
     * to the dense exchange, never a wrong sum; a parameter that another
     * module ties to (rule 6) is always exchanged dense. */
    bool row_sparse_grad;
    /* The forward reads only the rows (first dimension) that the batch's
     * int32 input of this name holds, as an embedding table's lookup of
     * "input_ids" does; "" (the default) when it may read any row. At
     * stages 1 and 2 (more than one rank, either backend) the engine then
     * brings after each update only the rows the next micro-batch reads
     * from the ranks that own them, instead of all-gathering the whole
     * table before the forward can start (zero/param_rows.h); an
     * evaluation, a checkpoint or ds_get_param first gathers it whole. At
     * stage 3 each gather of the module for a training micro-batch brings
     * of the table only those rows (zero/stage3_rows.c); its backward reads
     * the same copy, so it too may read only those rows. The rows not
     * brought hold NaN on that rank, so a module that reads another row gets
     * a non-finite loss, not a stale value. Ignored for a parameter another
     * module ties to (rule 6). */
    char rows_read_by[DS_MAX_INPUT_NAME];
} ds_param_desc;

/* Whether weight decay applies to p under Hugging Face's rule
 * (Trainer.get_decay_parameter_names): not when p->no_decay, nor when its
 * lower-cased name contains "bias", "layernorm" or "rmsnorm", or has a
 * component "norm" or one ending in "_norm" ("encoder.norm.weight",
 * "q_norm.weight"). DeepSpeed's own optimizer sections have one group and
 * decay every parameter: the engine asks this only for the trainer's AdamW. */
bool ds_param_decays(const ds_param_desc *p);

static inline int64_t ds_param_numel(const ds_param_desc *p) {
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++) n *= p->shape[i];
    return n;
}

/* A parameter a module uses but an earlier module owns (rule 6). */
typedef struct ds_param_tie {
    char name[DS_MAX_NAME];   /* this use's own name ("lm_head.weight"): an alias that
                                 ds_get_param and weight loaders accept; never stored */
    char target[DS_MAX_NAME]; /* the owner's parameter ("transformer.wte.weight") */
    int ndim;                 /* the shape this module expects; must be the owner's */
    int64_t shape[DS_MAX_DIMS];
} ds_param_tie;

/* ---- the module interface ---- */

/* Everything one forward or backward call of a module sees. */
typedef struct ds_module_ctx {
    ds_backend *be;
    const ds_batch *batch; /* device tensors of the micro-batch (targets absent in ds_predict) */
    bool training;         /* dropout active */
    uint64_t seed;         /* RNG stream of this (step, micro-step, module, rank): the same in
                              a recomputation, different across ranks and steps */
    float *const *params;  /* the module's own parameters, in declared order (fp32) */
    float *const *grads;   /* backward only: their gradient slots, ACCUMULATE into them */
    float *const *tied;    /* the tied parameters, in ds_module_tie order (fp32) */
    float *const *tied_grads; /* backward only: their gradient slots, ACCUMULATE */
    const float *x;        /* input activation; NULL for the first module (it reads batch) */
    float *y;              /* forward: output (out_elems floats) */
    const float *dy;       /* backward: gradient of the output; NULL for the loss module */
    float *dx;             /* backward: gradient of the input; NULL for the first module */
    void *saved;           /* saved_bytes, kept from forward to backward */
    void *scratch;         /* scratch_bytes, undefined on entry */
    float loss_scale;      /* loss module backward: d(y[0]) = loss_scale */
    /* backward, set by the engine (NULL elsewhere: a gradient check, a
     * direct call): what ds_module_grads_final tells it */
    ds_status (*grads_final)(void *arg, int first);
    void *grads_final_arg;
} ds_module_ctx;

typedef struct ds_module_ops {
    const char *type; /* "embedding", "encoder_layer", "linear", "xent", ... */
    /* Output floats for a batch of B x T; for the loss module, 2. */
    size_t (*out_elems)(const ds_module *m, int B, int T);
    /* Bytes kept from forward to backward; must not depend on the data. */
    size_t (*saved_bytes)(const ds_module *m, int B, int T);
    /* Bytes of temporaries during one call. */
    size_t (*scratch_bytes)(const ds_module *m, int B, int T);
    ds_status (*forward)(ds_module *m, ds_module_ctx *ctx);
    ds_status (*backward)(ds_module *m, ds_module_ctx *ctx);
    void (*destroy)(ds_module *m); /* frees impl and the module itself */
    /* OPTIONAL: the GEMMs (be->ops->gemm) forward and backward make for a
     * batch of B x T, each added with ds_gemm_plan_add (backend.h) with the
     * shape, transposes, strides and batch count of the call (a loop of
     * identical calls once; a batch count that depends on the backend, such
     * as chunks of be->chunk_bytes, at its largest). Like the *_bytes
     * callbacks it depends on (B, T) only. With bf16 GEMM inputs the engine
     * reserves the backend's GEMM workspace from these before the first
     * step; a module without it (NULL) still trains, but its first bf16
     * step grows the workspace (recorded in the accountant; no warning:
     * the warning is for a module whose declared plan falls short). */
    void (*plan_gemms)(const ds_module *m, int B, int T, ds_gemm_plan *plan);
} ds_module_ops;

struct ds_module {
    const ds_module_ops *ops;
    char name[DS_MAX_NAME];   /* "bert.encoder.layer.3" */
    int n_params;
    ds_param_desc *params;    /* owned by the module */
    int n_tied;
    ds_param_tie *tied;       /* owned by the module */
    bool checkpointable;      /* activation checkpointing may recompute it */
    void *impl;
};

/* A new module with n_params zeroed parameter descriptors, no ties and a
 * zeroed impl of impl_bytes; `name` is copied. Free with ds_module_free
 * (usable as ops->destroy when impl owns nothing else). Errors:
 * DS_ERR_INVALID_ARG (a name too long), DS_ERR_OOM. */
ds_status ds_module_create(const ds_module_ops *ops, const char *name, int n_params,
                           size_t impl_bytes, ds_module **out);
void ds_module_free(ds_module *m);

/* Declare parameter i of m: name "<prefix>.<suffix>" (prefix NULL: the
 * module's name), shape (d0[, d1]) (d1 <= 0: one dimension), init. */
ds_status ds_module_param(ds_module *m, int i, const char *prefix, const char *suffix, int64_t d0,
                          int64_t d1, ds_init_kind init, float a, float b);

/* The same for any shape: ndim 1..DS_MAX_DIMS dimensions, each > 0. */
ds_status ds_module_param_nd(ds_module *m, int i, const char *prefix, const char *suffix,
                             int ndim, const int64_t *shape, ds_init_kind init, float a, float b);

/* Declare that m also uses parameter `target` of an earlier module, with
 * shape (d0[, d1]), under the alias `alias` (may be NULL: no alias). It is
 * appended to m->tied (ctx->tied[m->n_tied - 1]). The shape must be the
 * owner's (checked when the engine lays the model out). */
ds_status ds_module_tie(ds_module *m, const char *alias, const char *target, int64_t d0,
                        int64_t d1);
/* The same for any shape. */
ds_status ds_module_tie_nd(ds_module *m, const char *alias, const char *target, int ndim,
                           const int64_t *shape);

/* The checks a forward/backward starts with: a backend, a batch with
 * B, T > 0, an input when need_x, parameter pointers when the module has
 * parameters (and tied ones), and the output (forward) or the gradient slots
 * (backward). dy and dx are left to each module: the loss has no dy, the
 * first module no dx. */
ds_status ds_module_check_ctx(const ds_module *m, const ds_module_ctx *ctx, bool need_x,
                              bool backward);

/* In m's backward: the gradients of its parameters first .. n_params - 1
 * are final for this backward (nothing the rest of it computes adds to
 * them), so the engine may start reducing them across the ranks while the
 * backward goes on (overlap_comm), as DeepSpeed does when autograd has
 * finished a parameter's gradient. A backward that computes its last
 * parameters' gradients first (the usual order, the reverse of the
 * forward's) says so after each group, with a smaller `first` each time;
 * what it never says is final when the backward returns. BERT's encoder
 * layer, for one, calls it after its feed-forward part (two thirds of its
 * parameters), so their reduction overlaps its attention's backward.
 * Optional; it changes no value, only when the reduction may start.
 * Ranks may call it differently (a branch on what one rank sees): the
 * gradient buckets are cut at parameter boundaries whatever the parts, so
 * every rank still makes the same collectives.
 * Without an engine behind the context (grads_final NULL) it does
 * nothing. Errors: DS_ERR_INVALID_ARG for first outside [0, n_params). */
ds_status ds_module_grads_final(const ds_module *m, const ds_module_ctx *ctx, int first);

/* Batch tensor `name` of the context's batch as i32 / f32, or an error
 * naming the module and the tensor when it is missing or of another type. */
ds_status ds_module_input_i32(const ds_module *m, const ds_module_ctx *ctx, const char *name,
                              const int32_t **out);
ds_status ds_module_input_f32(const ds_module *m, const ds_module_ctx *ctx, const char *name,
                              const float **out);

/* ---- workspace layout ----
 * A bump pointer over a saved or scratch area. With base == NULL it only
 * counts bytes (the *_bytes callbacks); with the real area it hands out the
 * same offsets. Each piece starts on a 64-byte boundary (a cache line, an
 * AVX-512 vector).
 *
 *   static size_t layout(const my_impl *L, int B, void *base, my_saved *s) {
 *       ds_carve c = ds_carve_begin(base);
 *       s->pre = ds_carve_f32(&c, (size_t)B * L->out);
 *       return c.off;                      // the bytes, for saved_bytes
 *   } */
typedef struct ds_carve {
    uintptr_t base;
    size_t off;
} ds_carve;

static inline ds_carve ds_carve_begin(void *base) {
    ds_carve c = {(uintptr_t)base, 0};
    return c;
}

static inline void *ds_carve_bytes(ds_carve *c, size_t bytes) {
    void *p = (void *)(c->base + c->off);
    c->off += (bytes + 63) / 64 * 64;
    return c->base ? p : NULL;
}

static inline float *ds_carve_f32(ds_carve *c, size_t n) {
    return (float *)ds_carve_bytes(c, n * sizeof(float));
}

static inline int32_t *ds_carve_i32(ds_carve *c, size_t n) {
    return (int32_t *)ds_carve_bytes(c, n * sizeof(int32_t));
}

/* ---- models ---- */

/* A model: declared inputs, then modules in execution order, the last one
 * being the loss. */
typedef struct ds_model {
    char type[32];        /* "mlp", "bert", "gpt2", yours */
    int n_modules;
    ds_module **modules;  /* owned */
    int cap_modules;
    int n_inputs;
    ds_tensor_desc inputs[DS_MAX_INPUTS];
    int max_seq_len;      /* the longest T of DS_DIM_SEQ inputs (0: the model has none) */
    int hidden_size;      /* sizes DeepSpeed's "auto" bucket keys; 0: unknown */
    /* Informational, for the bundled apps: */
    int n_classes;        /* classifier outputs (0 for others) */
    int vocab_size;       /* token vocabulary (0 for others) */
} ds_model;

/* An empty model of type `type`. Owned by the caller until handed to
 * ds_initialize. */
ds_status ds_model_create(const char *type, ds_model **out);

/* Append module `m` (the model owns it from here, also when this fails: it
 * is then destroyed). Errors: DS_ERR_INVALID_ARG (m NULL, a module of that
 * name already in the model), DS_ERR_OOM. */
ds_status ds_model_add_module(ds_model *model, ds_module *m);

/* Whether the model is whole: at least one module; every module with its
 * callbacks (plan_gemms is optional) and every parameter slot declared; the
 * last module a loss (two output floats). ds_initialize calls it first.
 * Errors: DS_ERR_INVALID_ARG naming the module and what it lacks. */
ds_status ds_model_check(const ds_model *model);

/* Declare an input: [B, dims[0..ndim)] of dtype (DS_I32 or DS_F32); a dim
 * DS_DIM_SEQ is the sequence length, and then max_seq_len must be set (here
 * or directly) before ds_initialize. flags: DS_INPUT_*. Errors:
 * DS_ERR_INVALID_ARG naming the input. */
ds_status ds_model_add_input(ds_model *model, const char *name, ds_dtype dtype, int ndim,
                             const int64_t *dims, unsigned flags);

/* Declare the values an int32 input may hold: [lo, hi) (a table's rows, a
 * classifier's classes), and DS_IGNORE_INDEX too when ignore_index (targets
 * a loss skips). The engine then refuses a value outside them where it
 * first sees it, naming the row: a dataset's at ds_initialize ("training
 * data: column input_ids, row 1234, element 7 holds 21128, outside [0,
 * 21128) ..."), a batch's in ds_forward / ds_evaluate / ds_predict before
 * anything is copied, instead of a module's failure part way through a
 * forward, hours into a run. Errors: DS_ERR_INVALID_ARG for an unknown or
 * non-int32 input, hi <= lo. */
ds_status ds_model_input_range(ds_model *model, const char *name, int32_t lo, int32_t hi,
                               bool ignore_index);

/* The input named `name`, or NULL. */
const ds_tensor_desc *ds_model_input(const ds_model *m, const char *name);

/* Frees the modules and the model. Safe on NULL. */
void ds_model_destroy(ds_model *m);

/* Total parameter elements (Psi); tied uses count once. */
int64_t ds_model_num_params(const ds_model *m);

/* Every module's plan_gemms at B x T into `plan` (modules without one add
 * nothing); returns how many modules have none. The engine and the memory
 * estimator size the GEMM workspace of bf16 inputs with it. */
int ds_model_plan_gemms(const ds_model *m, int B, int T, ds_gemm_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_MODULE_H */
