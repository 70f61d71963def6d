/* Datasets, the distributed sampler and batching.
 *
 * A ds_dataset is a table in host memory: n rows of named, typed columns,
 * one per model input (engine/core/module.h), each row of a column a
 * fixed-shape tensor (a dimension DS_DIM_SEQ is the dataset's seq_len). Text
 * readers and tokenizers (text/text.h, text/lm_text.h) produce them for
 * the bundled apps; your program fills its own:
 *
 *     ds_dataset *d;
 *     DS_TRY(ds_dataset_create(n, 0, &d));                  // no sequence dimension
 *     int64_t feat[1] = {16};
 *     float *x, *y;
 *     DS_TRY(ds_dataset_add_column(d, "x", DS_F32, 1, feat, (void **)&x));  // [n, 16]
 *     DS_TRY(ds_dataset_add_column(d, "y", DS_F32, 0, NULL, (void **)&y));  // [n]
 *     for (size_t i = 0; i < n; i++) { ... x[i * 16 + j] = ...; y[i] = ...; }
 *
 * The engine only samples and batches it: the loader copies the columns the
 * model declares as inputs (by name) into the micro-batch.
 *
 * The sampler follows torch.utils.data.DistributedSampler: each epoch a
 * permutation of [0, n) drawn from (seed, epoch), cut into `world` disjoint
 * strided slices; without drop_last the permutation is padded by wrapping
 * around so every rank gets the same count (training), or not padded at all
 * (evaluation, so that every sample counts exactly once across ranks).
 *
 * The random permutation (used by the sampler and by the train/dev split in
 * text/text.h) is specified so that a Python reference reproduces it:
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

/* Rows [row, row + count) of computed column `col` into dst (contiguous
 * rows of the column's row elements), from the row source `src`. */
typedef ds_status (*ds_dataset_rows_fn)(void *src, int col, size_t row, size_t count, void *dst);

typedef struct ds_dataset {
    size_t n;                     /* rows */
    int seq_len;                  /* length of DS_DIM_SEQ dimensions (0: no column has one) */
    int n_columns;
    ds_tensor_desc cols[DS_MAX_INPUTS]; /* per-row shapes (flags unused) */
    void *data[DS_MAX_INPUTS];    /* [n, row elements] each, owned; NULL: computed */
    int n_classes;                /* optional label names of a classification set: */
    char **class_names;           /* [n_classes], owned; 0 / NULL otherwise */
    ds_dataset_rows_fn rows_fn;   /* the row source of computed columns, owned: */
    void *rows_src;
    void (*rows_src_free)(void *src);
} ds_dataset;

/* An empty dataset of n rows whose DS_DIM_SEQ dimensions have length
 * seq_len (0: none will). *out is owned by the caller: ds_dataset_destroy.
 * Errors: DS_ERR_INVALID_ARG for seq_len < 0; DS_ERR_OOM. */
ds_status ds_dataset_create(size_t n, int seq_len, ds_dataset **out);
/* Frees everything; NULL is fine. */
void ds_dataset_destroy(ds_dataset *d);

/* Add a zeroed column `name` of n rows of [dims[0..ndim)] dtype (DS_I32 or
 * DS_F32); *data_out (may be NULL) receives its storage to fill. Errors:
 * DS_ERR_INVALID_ARG (a duplicate or too long name, a bad dtype or dims,
 * DS_DIM_SEQ without a seq_len, more than DS_MAX_INPUTS columns), DS_ERR_OOM
 * naming the size. */
ds_status ds_dataset_add_column(ds_dataset *d, const char *name, ds_dtype dtype, int ndim,
                                const int64_t *dims, void **data_out);
/* A column computed when its rows are read instead of stored: a set much
 * larger than what it derives from (text/lm_pack.c: rows that are windows
 * over one token stream, 16 bytes a token stored, 8 computed). Its data[k]
 * is NULL and ds_dataset_i32 / f32 give NULL; ds_dataset_read_rows reads
 * stored and computed columns alike, and the engine's loader, the check
 * and evaluation read through it. The rows come from the source given to
 * ds_dataset_set_rows_source, which the dataset owns from then on
 * (free_src(src) at destroy, also when the call fails; NULL: nothing to
 * free). Errors as ds_dataset_add_column's; set_rows_source: a source
 * given already. */
ds_status ds_dataset_add_computed_column(ds_dataset *d, const char *name, ds_dtype dtype,
                                         int ndim, const int64_t *dims);
ds_status ds_dataset_set_rows_source(ds_dataset *d, ds_dataset_rows_fn fn, void *src,
                                     void (*free_src)(void *src));
/* Rows [row, row + count) of column col into dst. Errors:
 * DS_ERR_INVALID_ARG (no such column or rows, a computed column without a
 * source), the source's. */
ds_status ds_dataset_read_rows(const ds_dataset *d, int col, size_t row, size_t count, void *dst);
/* Bytes of one row of column col. */
size_t ds_dataset_row_bytes(const ds_dataset *d, int col);

/* The column's index, or -1. */
int ds_dataset_find(const ds_dataset *d, const char *name);
/* The column's storage as int32 / fp32, or NULL (absent, other dtype,
 * computed). */
int32_t *ds_dataset_i32(const ds_dataset *d, const char *name);
float *ds_dataset_f32(const ds_dataset *d, const char *name);

/* Name the classes of a classification set (copied; names NULL: "0", "1",
 * ...). Errors: DS_ERR_INVALID_ARG for n < 1, DS_ERR_OOM. */
ds_status ds_dataset_set_classes(ds_dataset *d, int n, const char *const *names);

/* Check that d can feed `model`: every input the model requires is a column
 * with the same dtype and per-row shape (DS_DIM_SEQ matching DS_DIM_SEQ,
 * seq_len <= the model's max_seq_len), every value of an int32 column in
 * the range the model declares for it (ds_model_input_range). Columns the
 * model does not read are allowed (the loader skips them). Errors:
 * DS_ERR_INVALID_ARG naming the column and both shapes, or the row, element
 * and value outside the range. */
ds_status ds_dataset_check(const ds_dataset *d, const ds_model *model);

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

/* Host staging for one micro-batch: one buffer per column, allocated once
 * for cap_B rows. */
typedef struct ds_host_batch {
    int cap_B, T;
    ds_batch batch;              /* the filled rows: batch.B, batch.T = T, one tensor per
                                    staged column pointing into the buffers below */
    int col[DS_MAX_INPUTS];      /* dataset column of each tensor */
    size_t row_bytes[DS_MAX_INPUTS];
} ds_host_batch;

/* Stage the columns of d that `model` reads (every column when model is
 * NULL) for up to cap_B rows; T = d->seq_len (1 when 0). Errors:
 * DS_ERR_INVALID_ARG for cap_B < 1 or a model input d lacks (as
 * ds_dataset_check), DS_ERR_OOM. */
ds_status ds_host_batch_alloc(ds_host_batch *hb, const ds_dataset *d, const ds_model *model,
                              int cap_B);
/* Frees the buffers; the struct may be allocated again. */
void ds_host_batch_free(ds_host_batch *hb);
/* Fill hb with rows idx[0..count) of d, the dataset it was allocated for
 * (count <= cap_B); sets batch.B = count. No allocation.
 * Errors: DS_ERR_INVALID_ARG for count outside [0, cap_B] or an index
 * >= d->n. */
ds_status ds_host_batch_fill(ds_host_batch *hb, const ds_dataset *d, const size_t *idx,
                             int count);

#ifdef __cplusplus
}
#endif
#endif /* DS_DATA_DATASET_H */
