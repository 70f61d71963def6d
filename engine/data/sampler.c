/* The distributed sampler (torch.utils.data.DistributedSampler semantics)
 * and the specified permutation shared with the train/dev split. */
#include "engine/data/dataset.h"

#include <stdlib.h>
#include <string.h>

void ds_permutation(size_t n, uint64_t seed, size_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = i;
    uint64_t state = seed;
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)(ds_splitmix64_next(&state) % (uint64_t)(i + 1));
        size_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

/* This rank's count for the configuration (see dataset.h). */
static size_t rank_count(size_t n, int world, int rank, bool drop_last, bool pad) {
    size_t w = (size_t)world, r = (size_t)rank;
    if (drop_last) return n / w;
    if (pad) return (n + w - 1) / w;
    return r < n ? (n - r + w - 1) / w : 0;
}

ds_status ds_sampler_init(ds_sampler *s, size_t n, int world, int rank, uint64_t seed,
                          bool shuffle, bool drop_last, bool pad) {
    if (!s) return DS_ERR(DS_ERR_INVALID_ARG, "ds_sampler_init: sampler is NULL");
    memset(s, 0, sizeof *s);
    if (world < 1) return DS_ERR(DS_ERR_INVALID_ARG, "ds_sampler_init: world %d < 1", world);
    if (rank < 0 || rank >= world)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_sampler_init: rank %d outside [0, %d)", rank,
                      world);
    s->n = n;
    s->world = world;
    s->rank = rank;
    s->seed = seed;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->pad = pad;
    s->epoch = -1;
    size_t count = rank_count(n, world, rank, drop_last, pad);
    s->perm_ = malloc((n ? n : 1) * sizeof(size_t));
    s->indices = malloc((count ? count : 1) * sizeof(size_t));
    if (!s->perm_ || !s->indices) {
        ds_sampler_free(s);
        return DS_ERR(DS_ERR_OOM, "ds_sampler_init: %zu samples", n);
    }
    s->num_samples = 0; /* nothing to read before the first set_epoch */
    s->ready_ = true;
    return DS_OK;
}

ds_status ds_sampler_set_epoch(ds_sampler *s, int64_t epoch) {
    if (!s || !s->ready_)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_sampler_set_epoch: sampler not initialised");
    if (epoch < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_sampler_set_epoch: epoch %lld < 0",
                      (long long)epoch);
    if (s->shuffle) {
        ds_permutation(s->n, s->seed + (uint64_t)epoch, s->perm_);
    } else {
        for (size_t i = 0; i < s->n; i++) s->perm_[i] = i;
    }
    size_t count = rank_count(s->n, s->world, s->rank, s->drop_last, s->pad);
    /* Entry k of the rank's slice is entry rank + k * world of the extended
     * permutation; extension past n wraps around to its start. */
    for (size_t k = 0; k < count; k++) {
        size_t pos = (size_t)s->rank + k * (size_t)s->world;
        s->indices[k] = s->perm_[pos % s->n];
    }
    s->num_samples = count;
    s->epoch = epoch;
    return DS_OK;
}

void ds_sampler_free(ds_sampler *s) {
    if (!s) return;
    free(s->perm_);
    free(s->indices);
    s->perm_ = NULL;
    s->indices = NULL;
    s->num_samples = 0;
    s->ready_ = false;
}
