/* Datasets, the distributed sampler and batching.
 *
 * A ds_dataset is tokenized, fixed-width data in host memory: n samples of up
 * to seq_len token ids each (padded with 0), a length per sample and a label
 * per sample. Text readers and tokenizers (models/text.h, models/tokenizer.h)
 * produce it; the engine only batches it.
 *
 * The sampler follows torch.utils.data.DistributedSampler: each epoch a
 * permutation of [0, n) drawn from (seed, epoch), cut into `world` disjoint
 * strided slices; without drop_last the permutation is padded by wrapping
 * around so every rank gets the same count (training), or not padded at all
 * (evaluation, so that every sample counts exactly once across ranks). */
#ifndef DS_DATA_DATASET_H
#define DS_DATA_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/module.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_dataset {
    size_t n;           /* samples */
    int seq_len;        /* tokens per row (padded) */
    int32_t *tokens;    /* [n, seq_len], 0 = [PAD] */
    int32_t *lengths;   /* [n] real tokens per row, 1..seq_len */
    int32_t *labels;    /* [n] class index in [0, n_classes) */
    int n_classes;
    char **class_names; /* [n_classes], owned */
} ds_dataset;

/* Allocate an empty dataset of n rows (zeroed) with class names copied. */
ds_status ds_dataset_create(size_t n, int seq_len, int n_classes, const char *const *class_names,
                            ds_dataset **out);
void ds_dataset_destroy(ds_dataset *d);

typedef struct ds_sampler {
    size_t n;          /* dataset size */
    int world, rank;
    uint64_t seed;
    bool shuffle;
    bool drop_last;    /* drop the tail so every rank gets floor(n / world) */
    bool pad;          /* without drop_last: wrap around to equal counts */
    int64_t epoch;
    size_t num_samples;   /* this rank's count this epoch */
    size_t *indices;      /* [num_samples], this rank's slice for the epoch */
} ds_sampler;

ds_status ds_sampler_init(ds_sampler *s, size_t n, int world, int rank, uint64_t seed,
                          bool shuffle, bool drop_last, bool pad);
/* Recompute the slice for `epoch` (a pure function of seed and epoch). */
ds_status ds_sampler_set_epoch(ds_sampler *s, int64_t epoch);
void ds_sampler_free(ds_sampler *s);

/* Host staging for one micro-batch; allocated once for the largest B x T. */
typedef struct ds_host_batch {
    int cap_B, T;
    int B;             /* rows filled */
    int32_t *tokens;   /* [cap_B, T] */
    float *mask;       /* [cap_B, T] */
    int32_t *labels;   /* [cap_B] */
} ds_host_batch;

ds_status ds_host_batch_alloc(ds_host_batch *hb, int cap_B, int T);
void ds_host_batch_free(ds_host_batch *hb);
/* Fill hb with rows idx[0..count) of d (count <= cap_B); sets hb->B. */
ds_status ds_host_batch_fill(ds_host_batch *hb, const ds_dataset *d, const size_t *idx,
                             int count);

#ifdef __cplusplus
}
#endif
#endif /* DS_DATA_DATASET_H */
