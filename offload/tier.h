/* Where a partition's fp32 optimizer state lives: a tier.
 *
 * The state is n_tensors fp32 tensors of n elements each (tensor 0 the
 * master weights, 1.. the optimizer moments). offload/host_optim.c runs the
 * update over it piece by piece and never knows where it is:
 *
 *   for (b = 0; b < n; b += piece):
 *       begin(b, e, state)   state[k] -> tensor k's elements [b, e) in host
 *                            memory, valid until end(b, e)
 *       ... update state[0..n_tensors) in place ...
 *       end(b, e, dirty)     the piece is written back where it lives (when
                            dirty: a read-only pass writes nothing)
 *   finish()                 every write-back has landed
 *
 * and moves ranges between the tier and the caller's memory with io()
 * (initialisation, checkpoints, set/get of weights), outside a step.
 *
 * Implementations: host RAM (offload_optimizer device "cpu": the pieces
 * are views into resident arrays, end and finish do nothing) in
 * host_optim.c, and NVMe files (device "nvme": the pieces are swapped
 * through aligned buffers, sub_group_size elements at a time) in
 * nvme_swap.c. Internal to offload/. */
#ifndef DS_OFFLOAD_TIER_H
#define DS_OFFLOAD_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

typedef struct ds_tier ds_tier;
typedef ds_status (*ds_tier_fill_fn)(void *ctx, int64_t b, int64_t e, float *dst);

typedef struct ds_tier_ops {
    const char *name; /* "host", "nvme" */
    ds_status (*begin)(ds_tier *t, int64_t b, int64_t e, float **state);
    ds_status (*end)(ds_tier *t, int64_t b, int64_t e, bool dirty); /* dirty: written to */
    ds_status (*finish)(ds_tier *t);
    /* tensor k's elements [lo, hi) to (write false) or from (write true)
     * host memory `host`. */
    ds_status (*io)(ds_tier *t, int k, int64_t lo, int64_t hi, float *host, bool write);
    /* tensor k, all of it, from fn: called with consecutive ranges [b, e)
     * covering [0, n) and a host buffer to fill with their values. */
    ds_status (*fill)(ds_tier *t, int k, ds_tier_fill_fn fn, void *ctx);
    /* Optional (NULL: the tier cannot be lost). After a failed transfer
     * lost the tier (nvme: its files removed, every call failing), make it
     * anew and empty, so that a checkpoint load, which writes every value
     * of every tensor, restores it in the same engine. DS_OK and nothing
     * done when it was not lost. */
    ds_status (*revive)(ds_tier *t);
    void (*destroy)(ds_tier *t);
} ds_tier_ops;

/* What the swap moved and how long the update loop waited for it (the
 * time not hidden behind the update), summed since creation. */
typedef struct ds_tier_stats {
    uint64_t read_bytes, write_bytes;
    double read_wait_s, write_wait_s;
} ds_tier_stats;

struct ds_tier {
    const ds_tier_ops *ops;
    ds_tier_stats stats;
    int64_t n;      /* elements per tensor */
    int n_tensors;  /* 1 + moments */
    int64_t piece;  /* elements per begin/end (the last piece may be shorter) */
};

#endif /* DS_OFFLOAD_TIER_H */
