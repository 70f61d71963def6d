/* Stage 3's state, shared by its two files: zero/stage3.c (the step: the
 * gathers, their cache, the gradients, the update) and zero/stage3_build.c
 * (planning, allocation, start-up and teardown). Private to zero/. */
#ifndef DS_ZERO_STAGE3_IMPL_H
#define DS_ZERO_STAGE3_IMPL_H

#include "zero/grad_buckets.h"
#include "zero/shard.h"
#include "zero/stage3_groups.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

#define MAX_SLOTS DS_S3_MAX_SLOTS
#define S3_XJOBS 2 /* dense ranges around a module's row-gathered tables */

typedef struct slot {
    void *buf;       /* [cap] pt: the gathered span */
    float *f32;      /* [cap] fp32 view (== buf under fp32) */
    int64_t cap;     /* the largest span it can hold */
    int module;      /* whose span it holds, -1 none */
    int64_t begin;   /* first element of the flat space gathered */
    int64_t len;     /* elements gathered */
    bool from_sec;   /* hpZ: gathered from the secondary copy, inside the group */
    bool fill_sec;   /* hpZ: a module's span from the world partition: fill the
                      * secondary copy from it once it has arrived */
    bool valid;      /* contents current (gathered since the last update) */
    bool pending;    /* gather job submitted, not yet waited */
    bool in_use;     /* between fetch and release */
    uint64_t used_at;/* LRU clock */
    /* offload_param: this rank's piece of the last gather could not be
     * read (a failing disk). The gather went on with zeros in its place, so
     * the others were not left waiting in it, and the slot stays as on every
     * other rank (valid, in the same place of the cache), so that the ranks
     * keep gathering alike; but every fetch that would use it fails with
     * this, until it is gathered again or the engine drops the cache
     * (drop_gathered). */
    ds_status read_err;
    ds_error_saved read_why;
    size_t *counts;  /* [world], the gather's blocks */
    ds_comm_job job;
    /* qwZ only: the packed pieces (bytes) and their byte counts */
    uint8_t *qbuf;
    size_t qcap;
    size_t *qcounts; /* [world] */
    struct stage3 *owner; /* for the hierarchical gather's job */
    /* gather_rows (zero/stage3_rows.c): a span holding a table that the
     * forward reads by rows came as the dense ranges around it (xjobs) and
     * the rows the current micro-batch names (job); false: whole */
    bool by_rows;
    int n_xjobs;
    ds_comm_job xjobs[S3_XJOBS];
    size_t *xcounts[S3_XJOBS]; /* [world] each */
} slot;

typedef struct stage3 {
    ds_shard sh;
    ds_backend *be;
    ds_comm *comm;     /* the ranks the partition is cut over: the world, or
                        * MiCS's shard group */
    const ds_flat *flat; /* == &pflat */
    ds_flat pflat;     /* the flat space as partitioned over comm */
    ds_comm *world;    /* the engine's communicator: its thread runs every job */
    ds_status persist_err; /* a persistent module's gather had read_err: as there */
    ds_error_saved persist_why;
    ds_s3_groups x;    /* hpZ / MiCS: groups, secondary copy (zero/stage3_groups.h) */
    ds_dtype pt, gt;
    ds_comm_worker *worker;
    ds_grad_buckets *buckets;
    void *params;      /* [part] pt: this rank's parameter partition (NULL with ps) */
    ds_param_store *ps;/* offload_param: the partition in host memory / NVMe, else NULL */
    void *grads;       /* [part] gt */
    float *gstage;     /* [max_span] fp32 gradient staging */
    int64_t max_span;
    int n_slots;
    slot slots[MAX_SLOTS];
    bool *persistent;  /* [n_modules] */
    float *persist;    /* fp32 whole copies of the persistent modules, packed */
    int64_t *persist_off; /* [n_modules] offset into persist */
    int64_t persist_elems;
    int64_t persist_max;  /* the largest persistent span: the slot refresh needs */
    bool persist_valid;
    float ***ptrs, ***gptrs; /* per module pointer tables (ptrs re-pointed per fetch) */
    float ***tptrs;    /* per module: its tied parameters (NULL without ties) */
    int64_t *suffix;   /* [n_modules + 1]: elements of modules m.. n-1 */
    int last_fetch;    /* module of the previous fetch, for the direction */
    bool backward;     /* the module fetched last runs its backward */
    uint64_t clock;
    int64_t prefetch_limit, reuse_limit, persist_threshold;
    bool qwz;          /* zero_quantized_weights */
    /* gather_rows (zero/stage3_rows.c): the tables gathered by rows, NULL
     * where none qualifies or the config rules it out */
    struct ds_param_rows *rows;
} stage3;

static inline stage3 *S(ds_zero *z) { return (stage3 *)z->impl; }

static inline int64_t span_of(const stage3 *s, int m) {
    return s->flat->modules[m].end - s->flat->modules[m].begin;
}

/* zero/stage3_rows.c: gather_rows at stage 3. create: the tables (s->rows
 * NULL where none qualifies: one rank, qwZ, hpZ, MiCS, offload_param, or
 * gather_rows false); applies: module m's next gather goes by rows; start:
 * queue that gather into sl (this rank's piece in place, the tables NaN
 * outside it, the dense ranges around them, the rows job). */
ds_status ds_s3_rows_create(stage3 *s, const ds_zero_desc *d);
bool ds_s3_rows_applies(const stage3 *s, int m);
ds_status ds_s3_rows_start(stage3 *s, slot *sl, int m);

/* zero/stage3.c: the strategy's operations (destroy is stage3_build.c's). */
extern const ds_zero_ops ds_stage3_ops;
/* zero/stage3_build.c */
void ds_stage3_destroy(ds_zero *z);

#endif /* DS_ZERO_STAGE3_IMPL_H */
