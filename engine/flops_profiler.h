/* flops_profiler: DeepSpeed's FLOPs profiler for the engine's modules.
 *
 *   "flops_profiler": {"enabled": true, "profile_step": 1, "module_depth": -1,
 *                      "top_modules": 1, "detailed": true, "output_file": null}
 *
 * (DeepSpeed's keys and defaults; recompute_fwd_factor is accepted, since the
 * counts here are measured, a recomputed forward included). During the
 * optimizer step after profile_step steps (DeepSpeed's engine starts
 * profiling when its completed steps equal profile_step; all of the step's
 * micro-batches, where DeepSpeed's print comes after the first; a step
 * dropped by a failed micro-batch passes it to the next) the engine counts, per module of
 * the model (engine/core/module.h), the floating-point operations of its
 * forward and of its backward, and their latencies; at the step's end rank 0
 * prints DeepSpeed's three parts, to output_file when given, else to stdout:
 *
 *   - the summary: world size, batch per rank, parameters, forward and
 *     backward FLOPs and latencies, the step (optimizer) and iteration
 *     latency, and the FLOP/s each achieved;
 *   - the aggregated profile: at each depth of the module names (depth 0
 *     "bert", 1 "bert.encoder", 2 "bert.encoder.layer", 3
 *     "bert.encoder.layer.0", ...; module_depth -1 every depth, else up to
 *     that one) the top_modules names by parameters, by FLOPs and by latency;
 *   - with detailed, one row per module: parameters and their share, forward
 *     and backward FLOPs, forward and backward latency, achieved FLOP/s and
 *     the module's share of the iteration, then the totals.
 *
 * Where the FLOPs come from: the backend's GEMM. While the profiled step
 * runs, ctx->be->ops->gemm counts 2*m*n*k per matrix of every call (a
 * multiply and an add per term, as DeepSpeed counts a linear layer) for
 * the module that is running. A module written outside the library gets its
 * FLOPs counted the same way, as long as it multiplies matrices through the
 * backend; element-wise work (activations, norms, softmax, the optimizer) is
 * not counted, which DeepSpeed's profiler counts from PyTorch's functionals:
 * for transformer models that is under 2% of the total.
 *
 * Thread use: the counter is the engine's (its backend's gemm slot is
 * tapped while it profiles, and a backend takes one tap at a time). The
 * numbers are this rank's. */
#ifndef DS_ENGINE_FLOPS_PROFILER_H
#define DS_ENGINE_FLOPS_PROFILER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_flops_module_profile {
    const char *name, *type;  /* borrowed from the model */
    int64_t params;           /* its own parameters (tied uses not counted twice) */
    double fwd_flops, bwd_flops; /* summed over the step's micro-batches; a
                                    recomputed forward counts in backward */
    double fwd_s, bwd_s;
} ds_flops_module_profile;

typedef struct ds_flops_profile {
    int64_t step;              /* the profiled optimizer step */
    int n_modules;
    int64_t params;            /* the model's */
    int64_t batch_per_rank;    /* the profiled step's rows a rank (micro batch x gradient
                                  accumulation, fewer in an epoch's last step) */
    double fwd_flops, bwd_flops;
    double fwd_s, bwd_s, step_s, iter_s; /* ds_forward, ds_backward, the optimizer
                                            step, and all of them */
} ds_flops_profile;

/* The profile once profile_step has run: *ready false before, and
 * DS_ERR_INVALID_ARG when flops_profiler is not enabled. */
ds_status ds_flops_profile_get(const engine_t *e, ds_flops_profile *out, bool *ready);
/* Module i of the profile (0 <= i < n_modules). */
ds_status ds_flops_profile_module(const engine_t *e, int i, ds_flops_module_profile *out);

#ifdef __cplusplus
}
#endif
#endif /* DS_ENGINE_FLOPS_PROFILER_H */
