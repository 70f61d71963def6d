/* The flat parameter space.
 *
 * All parameters of a model, in module order, laid end to end in one index
 * space of `padded` elements. Each parameter starts at a multiple of
 * DS_FLAT_ALIGN elements (so every tensor is 64-byte aligned for the kernels);
 * the tail is padded so the space cuts into `world` equal partitions of
 * `part` elements. Rank r owns [r*part, (r+1)*part). Tensors may straddle a
 * partition boundary: partitions are exact, not rounded to whole tensors
 * (PyTorch's ZeroRedundancyOptimizer assigns whole tensors and splits
 * BERT-mini 62/38 over two ranks; this splits it 50/50).
 *
 * The table is the same on every rank and depends only on the model and the
 * world size; checkpoints store it so a different world size can re-cut it.
 *
 * Tied parameters (a module using a parameter an earlier module owns,
 * engine/core/module.h rule 6) take no room: the table lists each use as a
 * tie pointing at the owner's parameter, and each distinct target once in
 * `tied_params`, where the engine keeps the users' gradient until the
 * owner's backward adds it in. */
#ifndef DS_ZERO_FLAT_H
#define DS_ZERO_FLAT_H

#include <stdint.h>

#include "engine/core/module.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_FLAT_ALIGN 16 /* elements: 64 bytes of fp32, 32 of fp16 */

typedef struct ds_flat_param {
    const ds_param_desc *desc; /* borrowed from the model's module */
    int module;                /* index of the owning module */
    int64_t numel;
    int64_t offset;            /* first element in the flat space */
} ds_flat_param;

typedef struct ds_flat_module {
    int first_param, n_params;
    int64_t begin, end; /* [begin, end): the module's span, aligned */
    int first_tie, n_ties; /* its uses of other modules' parameters: ties[first_tie ..) */
} ds_flat_module;

/* One use of a parameter owned by an earlier module. */
typedef struct ds_flat_tie {
    const ds_param_tie *desc; /* borrowed from the using module */
    int module;               /* the module using it */
    int param;                /* the owner's parameter (index into params) */
    int target;               /* index into tied_params */
} ds_flat_tie;

typedef struct ds_flat {
    int n_params;
    ds_flat_param *params;
    int n_modules;
    ds_flat_module *modules;
    int64_t numel;  /* Psi: sum of parameter elements */
    int64_t used;   /* end of the last parameter incl. alignment padding */
    int64_t padded; /* used rounded up to a multiple of world (and of DS_FLAT_ALIGN) */
    int64_t part;   /* padded / world */
    int world;
    int n_ties;
    ds_flat_tie *ties;     /* in module order */
    int n_tied_params;
    int *tied_params;      /* the distinct parameters that ties point at */
} ds_flat;

/* Lay out `model` for `world` ranks. *out is owned by the caller. */
ds_status ds_flat_create(const ds_model *model, int world, ds_flat **out);
void ds_flat_destroy(ds_flat *f);

/* Index of the parameter named `name` (or whose tie alias it is), or -1. */
int ds_flat_find(const ds_flat *f, const char *name);

/* Intersection of [begin, end) with rank r's partition, as offsets in the
 * flat space; returns 0 when empty. */
/* The index into f->tied_params of parameter i, or -1 when nothing ties to
 * it. */
int ds_flat_tied_index(const ds_flat *f, int param);

int ds_flat_clip(const ds_flat *f, int rank, int64_t begin, int64_t end, int64_t *out_begin,
                 int64_t *out_end);

#ifdef __cplusplus
}
#endif
#endif /* DS_ZERO_FLAT_H */
