/* Pieces the partitioned stages (1, 2, 3) share. */
#ifndef DS_ZERO_ZERO_UTIL_H
#define DS_ZERO_ZERO_UTIL_H

#include "zero/zero.h"

/* counts[r] = elements of [lo, hi) inside rank r's partition. Because the
 * partitions are contiguous and in rank order, the blocks of [lo, hi) are
 * contiguous too: rank r's starts at sum(counts[0..r)). */
void ds_zero_counts(const ds_flat *f, int64_t lo, int64_t hi, size_t *counts);

/* Offset of rank r's block inside [lo, hi) (elements from lo). */
size_t ds_zero_block_offset(const size_t *counts, int rank);

/* Parameter i's values to host when each rank holds only its partition in
 * `part` (type t, `part` elements starting at flat offset rank*f->part):
 * every rank fills its piece, zeros elsewhere, and a host sum assembles the
 * whole (adding zeros is exact). Collective. */
ds_status ds_zero_part_to_host(ds_backend *be, ds_comm *comm, const ds_flat *f, int i,
                               const void *part, ds_dtype t, float *host);

/* The inverse: every rank copies its piece of host values into `part`
 * (converted to t). Every rank passes the same values. */
ds_status ds_zero_part_from_host(ds_backend *be, const ds_flat *f, int rank, int i, void *part,
                                 ds_dtype t, const float *host);

/* Sum of squares and non-finite flag of a partition, combined over ranks
 * (host sum and max), so every rank sees the same global values. */
ds_status ds_zero_part_sumsq(ds_backend *be, ds_comm *comm, const void *buf, ds_dtype t,
                             size_t n, double *sumsq, int *overflow);

/* Initialise a partition buffer (fp32, `part` elements from flat offset
 * rank*part) from the parameters' declared inits: the values equal those
 * stage 0 draws for the same elements. */
ds_status ds_zero_init_partition(ds_backend *be, const ds_flat *f, int rank, uint64_t seed,
                                 float *part);

/* The same for elements [b, e) of the partition only (dst holds e - b). */
ds_status ds_zero_init_partition_range(ds_backend *be, const ds_flat *f, int rank, uint64_t seed,
                                       int64_t b, int64_t e, float *dst);

/* state_io's copy: `base` holds fp32 flat elements from `base_lo` to
 * `base_hi`; copies [lo, hi) (checked to lie inside) to or from host. A NULL
 * base (a moment the optimizer does not keep) reads as zeros. */
ds_status ds_zero_state_copy(ds_backend *be, float *base, int64_t base_lo, int64_t base_hi,
                             int64_t lo, int64_t hi, float *host, bool write);

/* What a collective over flat range [lo, hi) is for, named in its failure
 * message (ds_comm_job.what): "<what> of module 4 of 12 (<its first
 * parameter>)", or "<what> of modules 3-5 of 12 (<first> .. <last
 * parameter>)". 1-based module numbers. */
/* The small host <-> backend copies of an exchange's counts and row lists
 * (grad_sparse.c, param_rows.c): fetch returns with the host bytes ready to
 * read (it syncs the backend); put is ordered before later work on the
 * backend. */
ds_status ds_zero_fetch(ds_backend *be, void *host, const void *dev, size_t bytes);
ds_status ds_zero_put(ds_backend *be, void *dev, const void *host, size_t bytes);

void ds_zero_describe_range(const ds_flat *f, int64_t lo, int64_t hi, const char *what, char *buf,
                            size_t cap);

static inline void *ds_at(void *base, ds_dtype t, int64_t i) {
    return (char *)base + (size_t)i * ds_dtype_size(t);
}

/* Stage 3's gather slots (stage3.c): at most this many. */
#define DS_S3_MAX_SLOTS 8

/* How many gather slots stage 3 keeps, and their capacities (elements),
 * from the modules' n spans (any order), stage3_param_persistence_threshold,
 * stage3_max_live_parameters and `held`, the most spans one module holds at
 * once (its own and its ties' owners'). Persistent spans (smaller than the
 * threshold) live in their own copy, refreshed one after another through one
 * slot, so they count as one span, their largest. The slots are sized as the
 * largest spans, largest first (the last repeating when there are fewer),
 * so any *n_slots modules fit at once; there are as many as keep
 * their sum within max_live (DeepSpeed's meaning: the parameters resident
 * at once), at least 2 (the module in use and the next) and `held`, at most
 * DS_S3_MAX_SLOTS. With the default 1e9 a small model's spans all stay
 * gathered from the forward to the backward (the backward then starts
 * without waiting for its last modules' gathers). The engine and the memory
 * estimate both size from here. caps holds DS_S3_MAX_SLOTS.
 * DS_ERR_INVALID_ARG when held exceeds DS_S3_MAX_SLOTS. */
ds_status ds_s3_slot_caps(const int64_t *spans, int n, int64_t persist_threshold,
                          int64_t max_live, int held, int *n_slots, int64_t *caps);

#endif /* DS_ZERO_ZERO_UTIL_H */
