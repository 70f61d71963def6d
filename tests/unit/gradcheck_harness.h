/* Test harness: runs modules of models/ without the engine, and checks their
 * gradients by central finite differences.
 *
 * A gc_chain is a list of modules run in order, as the engine would: the
 * harness allocates each module's parameters, gradient slots, output,
 * saved and scratch areas from the module's own descriptors and size
 * callbacks, plus 16 guard floats after every buffer whose bit pattern is
 * checked after each call (a module that writes past the size it declared
 * fails). Scratch and saved areas, outputs and input gradients are filled
 * with NaN before each call, so a module that reads scratch it did not write,
 * or leaves part of dx unwritten, produces NaN and fails the check.
 *
 * A module's tied parameters (engine/core/module.h rule 6) are the buffers
 * of the earlier module in the chain that owns them, gradients included.
 *
 * The scalar checked is
 *   loss-terminated chain: L = y_last[0] (the loss module's output);
 *   otherwise:             L = sum_i r_i y_last[i] (double accumulation) with a
 *                          fixed random projection r, which is also the dy
 *                          handed to the last module's backward.
 * On cpu, device memory is host memory, so everything here is plain arrays. */
#ifndef DS_TESTS_GRADCHECK_HARNESS_H
#define DS_TESTS_GRADCHECK_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/core/module.h"

/* ---- deterministic host RNG (independent of the backend's Philox) ---- */
typedef struct gc_rng {
    uint64_t s;
} gc_rng;
uint64_t gc_rng_u64(gc_rng *r);
double gc_rng_uniform(gc_rng *r); /* [0, 1) */
double gc_rng_normal(gc_rng *r);
/* n floats drawn N(0, sd^2), malloc'd with 64 bytes of slack after them (for
 * kernels that read a vector past the end); the caller frees. */
float *gc_randn(gc_rng *r, size_t n, double sd);

/* ---- a host batch ---- */
typedef struct gc_batch {
    ds_batch b;  /* input_ids, attention_mask, labels [, token_type_ids, weights] */
    int32_t *tokens, *type_ids, *labels;
    float *mask, *weights;
} gc_batch;

/* B rows of T tokens; row i has lengths[i] real tokens (ids in [1, vocab),
 * mask 1) then padding (id 0, mask 0). Random labels in [0, n_classes);
 * type ids (0/1, first half 0) when with_types; per-row weights
 * class_weight[label] with class weights in [0.5, 2) when with_weights. */
void gc_batch_make(gc_batch *gb, int B, int T, int vocab, int n_classes, const int *lengths,
                   bool with_types, bool with_weights, uint64_t seed);
void gc_batch_free(gc_batch *gb);

/* ---- one module's buffers ---- */
typedef struct gc_run {
    ds_module *m;    /* borrowed */
    float **params;  /* [n_params] */
    float **grads;   /* [n_params] */
    float **tied, **tied_grads; /* [n_tied]: an earlier run's params / grads */
    size_t *numel;   /* [n_params] */
    float *y, *dy_own, *dx; /* dx: NULL for a module reading the batch */
    size_t ny, nx;
    void *saved, *scratch;
    size_t saved_bytes, scratch_bytes;
    const float *x;  /* input (previous y or the chain's x0) */
    const float *dy; /* output gradient (next dx or the projection) */
} gc_run;

typedef struct gc_chain {
    ds_backend *be;
    const ds_batch *batch;
    int n;
    gc_run *runs;
    bool loss_last;  /* the last module is the loss (scalar output) */
    float *x0;       /* input of module 0 when it does not read the batch */
    size_t nx0;
    float *r;        /* projection [ny of the last module] when !loss_last */
    bool training;
    uint64_t seed;   /* module i runs with seed + i */
    float loss_scale;
} gc_chain;

/* Allocate buffers for modules[0..n) on batch b. first_reads_batch: module 0
 * takes the batch (x NULL, no dx); otherwise the chain owns a random input
 * x0 of nx0 floats (N(0, 1)). Parameters are drawn (see gc_chain_randomize).
 * Returns 0 or prints why and returns -1. */
int gc_chain_init(gc_chain *c, ds_backend *be, ds_module **modules, int n, const ds_batch *b,
                  bool first_reads_batch, size_t nx0, bool loss_last, uint64_t seed);
void gc_chain_free(gc_chain *c);

/* Draw every parameter: weights (DS_INIT_NORMAL / UNIFORM) N(0, wstd), ONES
 * 1 + N(0, vstd), ZEROS N(0, vstd). Values of this size exercise every
 * path (the HF init's std 0.02 would make a layer nearly linear). */
void gc_chain_randomize(gc_chain *c, double wstd, double vstd, uint64_t seed);

/* Forward through the chain; returns 0 and sets *L, or -1 after printing the
 * status or the broken guard. */
int gc_chain_forward(gc_chain *c, double *L);
/* Backward through the chain (after a forward). Gradients accumulate into
 * the gradient slots as the modules do. */
int gc_chain_backward(gc_chain *c);

/* Finite-difference check options. */
typedef struct gc_opts {
    double h;         /* step: theta +- h * max(1, |theta|); the estimate is
                         Richardson's (4 D(h/2) - D(h)) / 3 of central
                         differences D, truncation O(h^4) */
    double rtol;      /* relative part of the tolerance */
    double atol;      /* kappa: L's rounding error in units of eps_f32 * S, with
                         S = sum |r_i y_i| (max(1, |L|) for a loss); the
                         absolute part of the tolerance is 3 kappa eps S / h */
    int max_per_tensor; /* entries checked per tensor (all if numel is smaller) */
    bool kinks;       /* the function has kinks (ReLU): skip an entry whose
                         extrapolations at h and h/2 disagree (a kink lies
                         inside the step), at most 5% of entries */
    bool check_x0;    /* also check d L / d x0 */
} gc_opts;

/* Compares the analytic gradient of every parameter (and x0) with central
 * differences. Prints a line per tensor; returns the number of failures. */
int gc_check(gc_chain *c, const gc_opts *o, const char *label);

#endif /* DS_TESTS_GRADCHECK_HARNESS_H */
