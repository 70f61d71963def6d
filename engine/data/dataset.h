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
 * (evaluation, so that every sample counts exactly once across ranks).
 *
 * The random permutation (used by the sampler and by the train/dev split in
 * models/text.h) is specified so that a Python reference reproduces it:
 *
 *     M = 2**64 - 1
 *     def permutation(n, seed):
 *         s, a = seed & M, list(range(n))
 *         for i in range(n - 1, 0, -1):            # Fisher-Yates, from the end
 *             s = (s + 0x9E3779B97F4A7C15) & M     # splitmix64
 *             z = s
 *             z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
 *             z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
 *             z ^= z >> 31
 *             j = z % (i + 1)                      # modulo bias < n / 2**64
 *             a[i], a[j] = a[j], a[i]
 *         return a
 *
 * The sampler draws epoch e's permutation from seed + e (as torch seeds its
 * generator with seed + epoch).
 *
 *     ds_sampler s;
 *     DS_TRY(ds_sampler_init(&s, d->n, world, rank, seed, true, drop_last, true));
 *     for (int64_t ep = 0; ep < epochs; ep++) {
 *         DS_TRY(ds_sampler_set_epoch(&s, ep));         // no allocation
 *         for (size_t i = 0; i < s.num_samples; i += B) {
 *             int cnt = (int)(s.num_samples - i < (size_t)B ? s.num_samples - i : (size_t)B);
 *             DS_TRY(ds_host_batch_fill(&hb, d, s.indices + i, cnt));
 *             ...
 *         }
 *     }
 *     ds_sampler_free(&s); */
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
    int32_t *tokens;    /* [n, seq_len], padded with the tokenizer's [PAD] (0 for
                           the char vocab and for BERT vocabularies) */
    int32_t *lengths;   /* [n] real tokens per row, 1..seq_len */
    int32_t *labels;    /* [n] class index in [0, n_classes) */
    int n_classes;
    char **class_names; /* [n_classes], owned */
} ds_dataset;

/* Allocate an empty dataset of n rows (tokens, lengths and labels zeroed)
 * with the n_classes class names copied (class_names may be NULL: the names
 * become "0", "1", ...). *out is owned by the caller: ds_dataset_destroy.
 * Errors: DS_ERR_INVALID_ARG for seq_len < 1, n_classes < 1 or a NULL name;
 * DS_ERR_OOM naming the size. */
ds_status ds_dataset_create(size_t n, int seq_len, int n_classes, const char *const *class_names,
                            ds_dataset **out);
/* Frees everything; NULL is fine. */
void ds_dataset_destroy(ds_dataset *d);

/* One step of splitmix64: advances *state and returns the next 64 bits. */
static inline uint64_t ds_splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* out[0..n) = the permutation of [0, n) specified above for `seed`. */
void ds_permutation(size_t n, uint64_t seed, size_t *out);

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
    size_t *perm_;        /* [n] scratch for the permutation (internal) */
    bool ready_;          /* initialised (internal) */
} ds_sampler;

/* Per rank and epoch, with total = world * num_samples:
 *   drop_last:          num_samples = n / world (the permutation's tail of
 *                       n % world entries is dropped);
 *   !drop_last && pad:  num_samples = ceil(n / world), the permutation
 *                       extended by repeating it from its start (again and
 *                       again when n < world) to total entries;
 *   !drop_last && !pad: rank r gets the entries r, r + world, ... < n, so
 *                       counts differ by at most one and the ranks together
 *                       see each sample exactly once (evaluation).
 * Rank r takes entries r, r + world, r + 2 world, ... of the (extended)
 * permutation, as torch's DistributedSampler does. Without shuffle the
 * permutation is the identity. num_samples may be 0 (n < world with
 * drop_last, or a rank past the end without pad): callers decide whether that
 * is an error.
 *
 * init allocates everything the sampler will need (no allocation happens in
 * set_epoch, which the engine calls inside a training step) and leaves
 * s->indices unset until the first ds_sampler_set_epoch.
 * Errors: DS_ERR_INVALID_ARG for world < 1 or rank outside [0, world);
 * DS_ERR_OOM. */
ds_status ds_sampler_init(ds_sampler *s, size_t n, int world, int rank, uint64_t seed,
                          bool shuffle, bool drop_last, bool pad);
/* Recompute the slice for `epoch` (a pure function of seed and epoch).
 * Errors: DS_ERR_INVALID_ARG for epoch < 0 or an uninitialised sampler. */
ds_status ds_sampler_set_epoch(ds_sampler *s, int64_t epoch);
/* Frees the buffers; the struct may be initialised again. */
void ds_sampler_free(ds_sampler *s);

/* Host staging for one micro-batch; allocated once for the largest B x T. */
typedef struct ds_host_batch {
    int cap_B, T;
    int B;             /* rows filled */
    int32_t *tokens;   /* [cap_B, T] */
    float *mask;       /* [cap_B, T] */
    int32_t *labels;   /* [cap_B] */
} ds_host_batch;

/* Errors: DS_ERR_INVALID_ARG for cap_B < 1 or T < 1; DS_ERR_OOM. */
ds_status ds_host_batch_alloc(ds_host_batch *hb, int cap_B, int T);
/* Frees the buffers; the struct may be allocated again. */
void ds_host_batch_free(ds_host_batch *hb);
/* Fill hb with rows idx[0..count) of d (count <= cap_B); sets hb->B.
 * Row b: tokens = d's row idx[b] (positions past d->seq_len, when T is
 * larger, are 0 = [PAD]); mask = 1 for the first lengths[idx[b]] positions,
 * 0 after; labels[b] = d's label. Rows count..cap_B are left as they were:
 * only the first hb->B rows are meaningful. No allocation.
 * Errors: DS_ERR_INVALID_ARG for count outside [0, cap_B], d->seq_len > T,
 * or an index >= d->n; DS_ERR_DATA for a stored length outside
 * [1, seq_len] or a label outside [0, n_classes). */
ds_status ds_host_batch_fill(ds_host_batch *hb, const ds_dataset *d, const size_t *idx,
                             int count);

#ifdef __cplusplus
}
#endif
#endif /* DS_DATA_DATASET_H */
