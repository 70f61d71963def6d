/* The distributed sampler: torch DistributedSampler semantics, checked by
 * construction (disjoint / complete / padded / dropped) for world 1..5 and
 * sizes that do and do not divide, per-epoch reshuffling, determinism, and
 * hand-worked cases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/data/dataset.h"
#include "tests/unit/test_util.h"

/* One configuration: every rank's slice against the definition. */
static void check_config(size_t n, int world, bool shuffle, bool drop_last, bool pad,
                         uint64_t seed, int64_t epoch) {
    size_t *hits = calloc(n + 1, sizeof *hits);
    size_t *perm = malloc((n + 1) * sizeof *perm);
    if (shuffle) ds_permutation(n, seed + (uint64_t)epoch, perm);
    else
        for (size_t i = 0; i < n; i++) perm[i] = i;
    size_t total = 0;
    for (int r = 0; r < world; r++) {
        ds_sampler s;
        CHECK(ds_sampler_init(&s, n, world, r, seed, shuffle, drop_last, pad) == DS_OK, "%s",
              ds_last_error());
        CHECK(ds_sampler_set_epoch(&s, epoch) == DS_OK, "%s", ds_last_error());
        size_t want = drop_last ? n / (size_t)world
                      : pad     ? (n + (size_t)world - 1) / (size_t)world
                                : (n > (size_t)r ? (n - (size_t)r + (size_t)world - 1) / (size_t)world : 0);
        CHECK(s.num_samples == want, "n %zu world %d rank %d drop %d pad %d: %zu samples, want %zu",
              n, world, r, drop_last, pad, s.num_samples, want);
        for (size_t k = 0; k < s.num_samples && k < want; k++) {
            size_t pos = (size_t)r + k * (size_t)world; /* rank r takes r, r+w, ... */
            size_t expect = perm[pos % n];              /* padding wraps around */
            CHECK(s.indices[k] == expect, "n %zu world %d rank %d: index %zu is %zu, want %zu", n,
                  world, r, k, s.indices[k], expect);
            if (s.indices[k] < n) hits[s.indices[k]]++;
        }
        total += s.num_samples;
        ds_sampler_free(&s);
    }
    size_t once = 0, more = 0, never = 0;
    for (size_t i = 0; i < n; i++) {
        once += hits[i] == 1;
        more += hits[i] > 1;
        never += hits[i] == 0;
    }
    if (drop_last) {
        /* disjoint; exactly n - n % world samples, none twice */
        CHECK(more == 0 && total == n - n % (size_t)world,
              "drop_last n %zu world %d: %zu repeated, %zu total", n, world, more, total);
    } else if (pad) {
        /* complete; equal counts; repeats only to fill */
        size_t per = (n + (size_t)world - 1) / (size_t)world;
        CHECK(never == 0 && total == per * (size_t)world,
              "pad n %zu world %d: %zu never seen, %zu total", n, world, never, total);
        if (n >= (size_t)world)
            CHECK(total - n == more, "pad n %zu world %d: %zu repeats for %zu padding", n, world,
                  more, total - n);
    } else {
        /* evaluation: every sample exactly once across ranks */
        CHECK(once == n && total == n, "eval n %zu world %d: %zu once of %zu, %zu total", n,
              world, once, n, total);
    }
    free(hits);
    free(perm);
}

static void test_definition(void) {
    const size_t sizes[] = {0, 1, 2, 3, 7, 10, 12, 13, 23, 100};
    for (int world = 1; world <= 5; world++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (int mode = 0; mode < 3; mode++)
                for (int shuffle = 0; shuffle < 2; shuffle++)
                    for (int64_t epoch = 0; epoch < 3; epoch++)
                        check_config(sizes[si], world, shuffle, mode == 0, mode == 1, 1234, epoch);
}

/* Worked by hand from torch's DistributedSampler(shuffle=False). */
static void test_hand_cases(void) {
    struct {
        size_t n;
        int world, rank;
        bool drop_last, pad;
        size_t count, idx[4];
    } cases[] = {
        {10, 3, 0, false, true, 4, {0, 3, 6, 9}},
        {10, 3, 1, false, true, 4, {1, 4, 7, 0}},
        {10, 3, 2, false, true, 4, {2, 5, 8, 1}},
        {10, 3, 0, true, false, 3, {0, 3, 6}},
        {10, 3, 2, true, false, 3, {2, 5, 8}},
        {10, 3, 0, false, false, 4, {0, 3, 6, 9}},
        {10, 3, 1, false, false, 3, {1, 4, 7}},
        {2, 5, 4, false, true, 1, {0}}, /* n < world: padding repeats [0 1] */
        {2, 5, 3, false, true, 1, {1}},
        {2, 5, 3, false, false, 0, {0}},
        {2, 5, 1, true, false, 0, {0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ds_sampler s;
        CHECK(ds_sampler_init(&s, cases[c].n, cases[c].world, cases[c].rank, 7, false,
                              cases[c].drop_last, cases[c].pad) == DS_OK,
              "%s", ds_last_error());
        CHECK(ds_sampler_set_epoch(&s, 5) == DS_OK, "%s", ds_last_error());
        CHECK(s.num_samples == cases[c].count, "case %zu: %zu samples, want %zu", c,
              s.num_samples, cases[c].count);
        for (size_t k = 0; k < cases[c].count && k < s.num_samples; k++)
            CHECK(s.indices[k] == cases[c].idx[k], "case %zu: index %zu is %zu, want %zu", c, k,
                  s.indices[k], cases[c].idx[k]);
        ds_sampler_free(&s);
    }
}

static void slice(size_t n, int world, int rank, uint64_t seed, int64_t epoch, size_t *out) {
    ds_sampler s;
    CHECK(ds_sampler_init(&s, n, world, rank, seed, true, false, true) == DS_OK, "%s",
          ds_last_error());
    CHECK(ds_sampler_set_epoch(&s, epoch) == DS_OK, "%s", ds_last_error());
    memcpy(out, s.indices, s.num_samples * sizeof *out);
    ds_sampler_free(&s);
}

static void test_shuffle(void) {
    enum { N = 1000, W = 2, PER = N / W };
    size_t a[PER], b[PER], c[PER], d[PER];
    slice(N, W, 1, 42, 0, a);
    slice(N, W, 1, 42, 0, b);
    slice(N, W, 1, 42, 1, c);
    slice(N, W, 1, 43, 0, d);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed and epoch, different slices");
    CHECK(memcmp(a, c, sizeof a) != 0, "epochs 0 and 1 gave the same slice");
    CHECK(memcmp(a, d, sizeof a) != 0, "seeds 42 and 43 gave the same slice");
    /* a shuffled slice is not the strided identity */
    size_t in_order = 0;
    for (size_t k = 0; k < PER; k++) in_order += a[k] == 1 + 2 * k;
    CHECK(in_order < PER / 10, "shuffled slice kept %zu of %d positions", in_order, PER);
    /* set_epoch on one sampler is a pure function of (seed, epoch) */
    ds_sampler s;
    CHECK(ds_sampler_init(&s, N, W, 1, 42, true, false, true) == DS_OK, "%s", ds_last_error());
    CHECK(ds_sampler_set_epoch(&s, 1) == DS_OK && ds_sampler_set_epoch(&s, 0) == DS_OK, "%s",
          ds_last_error());
    CHECK(memcmp(s.indices, a, sizeof a) == 0, "epoch 0 after epoch 1 differs from a fresh one");
    CHECK(s.epoch == 0, "epoch %lld", (long long)s.epoch);
    ds_sampler_free(&s);

    /* the permutation against the Python reference of dataset.h */
    size_t p[10];
    const size_t e[10] = {4, 2, 8, 1, 9, 3, 0, 6, 7, 5};
    ds_permutation(10, 1, p);
    CHECK(memcmp(p, e, sizeof e) == 0, "permutation(10, 1) differs from the Python reference");
}

static void test_errors(void) {
    ds_sampler s;
    CHECK(ds_sampler_init(&s, 10, 0, 0, 1, true, false, true) == DS_ERR_INVALID_ARG, "world 0");
    CHECK(ds_sampler_init(&s, 10, 2, 2, 1, true, false, true) == DS_ERR_INVALID_ARG, "rank 2 of 2");
    CHECK(ds_sampler_init(&s, 10, 2, -1, 1, true, false, true) == DS_ERR_INVALID_ARG, "rank -1");
    CHECK(ds_sampler_set_epoch(&s, 0) == DS_ERR_INVALID_ARG, "set_epoch before init");
    CHECK(ds_sampler_init(&s, 10, 2, 1, 1, true, false, true) == DS_OK, "%s", ds_last_error());
    CHECK(s.num_samples == 0, "samples before the first set_epoch");
    CHECK(ds_sampler_set_epoch(&s, -1) == DS_ERR_INVALID_ARG, "negative epoch");
    ds_sampler_free(&s);
    CHECK(ds_sampler_set_epoch(&s, 0) == DS_ERR_INVALID_ARG, "set_epoch after free");
}

int main(void) {
    test_definition();
    test_hand_cases();
    test_shuffle();
    test_errors();
    return test_finish("test_sampler");
}
