/* ZeRO stage 3: parameters, gradients and optimizer state all sharded.
 *
 * Each rank stores only its partition of the working parameters. A module's
 * parameters are all-gathered into a gather slot just before its forward and
 * again before its backward (all-gather with uneven blocks: a module's span
 * usually falls into one or two partitions), and the slot is released after
 * use. While module m runs, the next module in the direction of travel is
 * prefetched into another slot on the communication thread (overlap_comm),
 * within stage3_prefetch_bucket_size elements. Slots are a small pool whose
 * size follows stage3_max_live_parameters. Slot k holds up to the k-th
 * largest module span, not the largest: a model whose embedding dwarfs its
 * layers (BERT-mini: 5.6M against 0.8M) pays for the embedding once, not
 * once per slot. Only one module runs at a time (fetch, compute, release);
 * it holds its own span and, with ties, its owners' (below), placed largest
 * first, so the i-th of them always finds a free slot among the i largest;
 * the other slots are for prefetching and caching. A released slot keeps its contents
 * as a cache (the last modules of forward are the first of backward), unless
 * the module's next use lies further than stage3_max_reuse_distance
 * parameters away. Modules smaller than stage3_param_persistence_threshold
 * stay whole: they are gathered once per step and kept.
 *
 * A parameter a module ties to (another module owns it: GPT-2's output
 * projection is its token embedding) is read from the owner's gathered
 * span: a module with ties holds, while it runs, a slot with each owner's
 * span as well as its own (zero/ties.h ds_ties_held), found in the pool when
 * still valid and gathered there when not, exactly as the owner's own fetch
 * does. So the table exists once, in one pool slot that the owner and the
 * tie user share; no buffer is set aside for it, and it is released (the
 * slot free for any span) under the reuse rule when neither needs it: after
 * the tie user's forward its next use is that module's backward, after its
 * backward the owner's backward, past the modules between them. The owner's
 * whole span is gathered for a tie (GPT-2: wte with wpe, 2% more than the
 * table), the unit every fetch moves.
 *
 * Gradients go through the same buckets as stage 2. Per rank and step:
 * forward gathers Psi(N-1)/N, backward again Psi(N-1)/N (less what the cache
 * saves), the gradients Psi(N-1)/N: 3 Psi(N-1)/N, plus the owner's span once
 * more (N-1)/N for each tie whose owner was released before the tie user ran
 * (stage3_max_reuse_distance 0; with the default distance a small model's
 * table stays gathered and costs nothing more).
 *
 * With offload_param the partition lives in an offload/param_store.h (host
 * memory, or NVMe past max_in_cpu elements): a gather, prefetches included,
 * reads this rank's piece of the span from it, and the update writes it
 * once per step; the fp32 master is then kept apart from it (zero/shard.h).
 * hpZ's secondary piece stays in device memory under offload_param: it is
 * filled from a module's first gather after an update (which read the
 * pieces from the store) and serves the later ones without the store.
 *
 * zero_quantized_weights (ZeRO++ qwZ): every gather carries each rank's
 * piece as one record of the blockwise int8 codec (engine/comm/codec_q8.h:
 * blocks of 4096 elements from the piece's start, an fp32 scale each,
 * scales first, padded to 4 bytes), one all-gather of bytes per span, and
 * every rank dequantizes all pieces, its own included, into the slot's fp32
 * view. That is what
 * DeepSpeed does (AllGatherCoalescedHandle.wait dequantizes the whole
 * gathered flat tensor): every rank then computes with the same weights, as
 * data parallelism needs; keeping the own piece exact would give each rank
 * a different model. The partition, the fp32 master and the update stay
 * exact: only what the forward and backward see is quantized. A piece of n
 * elements sends 4 ceil(n / 4096) + roundup4(n) bytes instead of
 * n * sizeof(param dtype).
 *
 * zero_quantized_gradients (ZeRO++ qgZ): the gradient buckets go through
 * the same codec's quantized reduce-scatter (zero/grad_buckets.h).
 *
 * sparse_gradients: a row_sparse_grad parameter's rows go as records, as at
 * stage 2 (zero/grad_sparse.h; under qgZ exact while the rest is quantized;
 * under MiCS across the replica groups too, zero/stage3_groups.h).
 *
 * ZeRO++ hpZ and MiCS (zero/groups.h, zero/stage3_groups.h) are choices of
 * the ranks a gather runs over: under MiCS the partition, the gradient
 * buckets and the optimizer state are the shard group's (comm, pflat) and
 * the boundary all-reduces the partition's gradients across the groups;
 * under hpZ a module's first gather after an update comes from the world
 * partition and fills the secondary copy, every later one (the backward's,
 * later micro-batches') runs over the secondary group.
 *
 * hpZ with qwZ, as DeepSpeed (partition_parameters.py: all_gather_coalesced
 * quantizes ds_secondary_tensor when its quantize flag is set, and the
 * coordinator passes zero_quantized_weights for every fetch; the secondary
 * tensor holds the gathered, dequantized parameter in its own dtype): the
 * world gather carries int8 records, the secondary piece is filled from the
 * dequantized span in the working dtype, and the gathers inside the group
 * quantize that piece again (blocks from its own start) and carry int8 too.
 * So the forward computes with Q(w), as qwZ alone, and the backward with
 * Q'(Q(w)), Q' cut at the secondary pieces' starts: within half a step of
 * Q(w)'s blocks again. MiCS with qwZ gathers over the shard group in int8;
 * its hierarchical gather moves the same records in its two levels (each
 * rank's record is encoded once, by its owner, and crosses the link once),
 * so every rank decodes what the flat gather would have brought. */
#include <stdlib.h>
#include <string.h>

#include "engine/comm/codec_q8.h"
#include "zero/grad_buckets.h"
#include "zero/grad_sparse.h"
#include "zero/stage3_groups.h"
#include "zero/shard.h"
#include "zero/ties.h"
#include "zero/zero.h"
#include "zero/zero_util.h"

#define MAX_SLOTS 8

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
} stage3;

static stage3 *S(ds_zero *z) { return (stage3 *)z->impl; }

static int64_t span_of(const stage3 *s, int m) {
    return s->flat->modules[m].end - s->flat->modules[m].begin;
}

/* qwZ: the byte counts of the pieces' records (from sl->counts, one per
 * rank of the gather's communicator: the partition's, or hpZ's group). */
static void packed_counts(slot *sl, int world) {
    for (int r = 0; r < world; r++) sl->qcounts[r] = ds_q8_record_bytes(sl->counts[r]);
}

/* qwZ: this rank's piece (its elements at x) encoded into its place. */
static ds_status quantize_mine(stage3 *s, slot *sl, int rank, const void *x) {
    DS_TRY(ds_q8_encode(s->be, x, s->pt, sl->counts[rank],
                        sl->qbuf + ds_zero_block_offset(sl->qcounts, rank)));
    return DS_OK;
}

/* mics_hierarchical_params_gather: the slot's span, on the communication
 * thread (ds_s3_hier_gather). */
static ds_status hier_job(void *arg) {
    slot *sl = arg;
    DS_TRY(ds_s3_hier_gather(&sl->owner->x, sl->job.buf, sl->job.counts, sl->job.t));
    return DS_OK;
}

/* Put this rank's piece of flat range [begin, end), which lies in module
 * `owner`'s span, into the slot and queue the all-gather of the rest: from
 * the secondary copy inside the hpZ group when it holds owner's current
 * values, else from the partition. */
static ds_status start_gather_range(stage3 *s, slot *sl, int64_t begin, int64_t end,
                                    int owner) {
    bool sec = ds_s3_from_secondary(&s->x, owner);
    const ds_flat *f = sec ? &s->x.hflat : s->flat;
    ds_comm *gc = sec ? s->x.g.sec : s->comm;
    sl->job.counts = sl->counts;
    sl->job.comm = gc;
    ds_zero_counts(f, begin, end, sl->job.counts);
    int rank = gc->rank;
    size_t off = ds_zero_block_offset(sl->job.counts, rank);
    size_t mine = sl->job.counts[rank];
    if (s->qwz) packed_counts(sl, gc->world);
    sl->from_sec = sec;
    sl->fill_sec = false;
    sl->begin = begin;
    sl->read_err = DS_OK;
    if (mine > 0 && sec && s->qwz) { /* DeepSpeed quantizes the secondary piece too */
        DS_TRY(quantize_mine(s, sl, rank, ds_s3_secondary_at(&s->x, begin)));
    } else if (mine > 0 && sec) {
        DS_TRY(ds_s3_secondary_piece(&s->x, begin, ds_at(sl->buf, s->pt, (int64_t)off), mine));
    } else if (mine > 0) {
        int64_t src = (begin > s->sh.lo ? begin : s->sh.lo) - s->sh.lo;
        void *dst = ds_at(sl->buf ? sl->buf : (void *)sl->f32, s->pt, (int64_t)off);
        if (s->ps) { /* offload_param: brought in from host memory or NVMe */
            ds_status rs = ds_param_store_read(s->ps, src, src + (int64_t)mine, dst);
            if (rs != DS_OK) { /* the others wait in the gather: it goes, with zeros */
                sl->read_err = rs;
                ds_error_save(&sl->read_why);
                DS_TRY(s->be->ops->memset(s->be, dst, 0, mine * ds_dtype_size(s->pt), NULL));
            }
        } else if (!s->qwz) /* qwZ quantizes straight from the partition */
            DS_TRY(s->be->ops->memcpy(s->be, dst, ds_at(s->params, s->pt, src),
                                      mine * ds_dtype_size(s->pt), DS_COPY_D2D, NULL));
        if (s->qwz)
            DS_TRY(quantize_mine(s, sl, rank, s->ps ? dst : ds_at(s->params, s->pt, src)));
    }
    sl->job.kind = DS_JOB_ALL_GATHERV;
    if (s->x.hbuf && !sec) {
        sl->job.kind = DS_JOB_FN;
        sl->job.fn = hier_job;
        sl->job.arg = sl;
    }
    sl->job.buf = s->qwz ? (void *)sl->qbuf : sl->buf;
    sl->job.t = s->qwz ? DS_U8 : s->pt;
    if (s->qwz) sl->job.counts = sl->qcounts;
    /* named in a timeout ("parameter gather of module 4 of 12 (...)") */
    ds_zero_describe_range(s->flat, begin, end, "parameter gather", sl->job.what,
                           sizeof sl->job.what);
    DS_TRY(ds_comm_job_submit(s->worker, &sl->job));
    sl->len = end - begin;
    sl->valid = true;
    sl->pending = true;
    return DS_OK;
}

/* Module m's span into the slot (a gather from the partition under hpZ
 * also refreshes m's secondary pieces). */
static ds_status start_gather(stage3 *s, slot *sl, int m) {
    const ds_flat_module *fm = &s->flat->modules[m];
    DS_TRY(start_gather_range(s, sl, fm->begin, fm->end, m));
    sl->module = m;
    sl->fill_sec = s->x.sec && !sl->from_sec;
    return DS_OK;
}

static ds_status finish_gather(stage3 *s, slot *sl) {
    if (!sl->pending) return DS_OK;
    sl->pending = false;
    ds_status st = ds_comm_job_wait(s->worker, &sl->job);
    if (st != DS_OK) {
        sl->valid = false;
        DS_TRY(st);
    }
    if (s->qwz) /* every rank's piece, its own included (see the top), straight to fp32 */
        DS_TRY(ds_q8_decode_all(s->be, sl->qbuf, sl->counts, sl->job.comm->world, sl->f32));
    else if (s->pt != DS_F32)
        DS_TRY(s->be->ops->cast(s->be, sl->f32, DS_F32, sl->buf, s->pt, (size_t)sl->len));
    if (sl->fill_sec) { /* under qwZ the dequantized weights, as DeepSpeed keeps them */
        DS_TRY(ds_s3_fill_secondary(&s->x, sl->module, s->qwz ? (void *)sl->f32 : sl->buf,
                                    s->qwz ? DS_F32 : s->pt, sl->begin, sl->len));
        sl->fill_sec = false;
    }
    return DS_OK;
}

static slot *find_slot(stage3 *s, int m) {
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].valid && s->slots[k].module == m) return &s->slots[k];
    return NULL;
}

/* A slot to overwrite with a span of `need` elements: one large enough,
 * invalid first, then the smallest (large slots stay free for large
 * modules), then least recently used; never one in use or one holding
 * `keep`; a slot whose gather is still pending only when `allow_pending`
 * (the caller then waits for it). NULL when none qualifies. */
static slot *pick_slot(stage3 *s, int keep, bool allow_pending, int64_t need) {
    slot *best = NULL;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (sl->cap < need || sl->in_use || (sl->valid && sl->module == keep) ||
            (sl->pending && !allow_pending))
            continue;
        bool better = !best;
        if (best && sl->valid != best->valid) better = !sl->valid;
        else if (best && sl->cap != best->cap) better = sl->cap < best->cap;
        else if (best) better = sl->used_at < best->used_at;
        if (better) best = sl;
    }
    return best;
}

/* The slot to gather `need` elements into, emptied (a pending gather in it is
 * waited for). */
static ds_status victim(stage3 *s, int keep, int64_t need, slot **out) {
    slot *best = pick_slot(s, keep, true, need);
    if (!best)
        return DS_ERR(DS_ERR_INTERNAL, "stage 3: no free gather slot holds %lld elements",
                      (long long)need);
    DS_TRY(finish_gather(s, best));
    best->valid = false;
    *out = best;
    return DS_OK;
}

/* Gather every persistent module once (after init or an update). Collective:
 * every rank reaches it at the same fetch. */
static ds_status refresh_persistent(stage3 *s) {
    slot *sl = NULL; /* victim sets it; -O3 cannot see that */
    DS_TRY(victim(s, -1, s->persist_max, &sl));
    for (int m = 0; m < s->flat->n_modules; m++) {
        if (!s->persistent[m]) continue;
        DS_TRY(start_gather(s, sl, m));
        DS_TRY(finish_gather(s, sl));
        DS_TRY(s->be->ops->memcpy(s->be, s->persist + s->persist_off[m], sl->f32,
                                  (size_t)span_of(s, m) * sizeof(float), DS_COPY_D2D, NULL));
        if (sl->read_err != DS_OK && s->persist_err == DS_OK) {
            s->persist_err = sl->read_err;
            s->persist_why = sl->read_why;
        }
    }
    sl->valid = false;
    s->persist_valid = true;
    return DS_OK;
}

static void point(stage3 *s, int m, float *base) {
    const ds_flat_module *fm = &s->flat->modules[m];
    for (int k = 0; k < fm->n_params; k++)
        s->ptrs[m][k] = base + (s->flat->params[fm->first_param + k].offset - fm->begin);
}

/* Prefetch module `next` if it is worth it and a slot is free now (never
 * waiting for another gather to make room). */
static ds_status prefetch(stage3 *s, int current, int next) {
    if (next < 0 || next >= s->flat->n_modules || s->persistent[next]) return DS_OK;
    if (span_of(s, next) == 0 || span_of(s, next) > s->prefetch_limit) return DS_OK;
    if (find_slot(s, next)) return DS_OK;
    slot *sl = pick_slot(s, current, false, span_of(s, next));
    if (!sl) return DS_OK;
    sl->valid = false;
    DS_TRY(start_gather(s, sl, next));
    return DS_OK;
}

/* The parameters module m ties to, pointed into their owners' gathered
 * spans (a slot fetch holds, or the persistent copy). */
static void point_tied(stage3 *s, int m) {
    const ds_flat_module *fm = &s->flat->modules[m];
    for (int k = 0; k < fm->n_ties; k++) {
        const ds_flat_param *p = &s->flat->params[s->flat->ties[fm->first_tie + k].param];
        int o = p->module;
        float *base = s->persistent[o] ? s->persist + s->persist_off[o] : find_slot(s, o)->f32;
        s->tptrs[m][k] = base + (p->offset - s->flat->modules[o].begin);
    }
}

/* Whether module m (or an owner of its ties) reads the persistent copy. */
static bool needs_persist(const stage3 *s, int m) {
    const ds_flat_module *fm = &s->flat->modules[m];
    bool any = s->persistent[m];
    for (int k = 0; k < fm->n_ties && !any; k++)
        any = s->persistent[s->flat->params[s->flat->ties[fm->first_tie + k].param].module];
    return any;
}

static ds_status fetch(ds_zero *z, int m, float ***out, float ***tied) {
    stage3 *s = S(z);
    int dir = m >= s->last_fetch ? 1 : -1; /* forward walks up, backward down */
    if (m == s->last_fetch) dir = -1;      /* the turnaround: backward starts here */
    s->last_fetch = m;
    s->backward = dir < 0;
    *out = s->ptrs[m];
    *tied = s->tptrs ? s->tptrs[m] : NULL;
    if (needs_persist(s, m) && !s->persist_valid) DS_TRY(refresh_persistent(s));
    /* m's span and its ties' owners', largest first: with the slot
     * capacities the largest spans, each then finds a free slot (plan) */
    int held[MAX_SLOTS];
    slot *got[MAX_SLOTS];
    int n = ds_ties_held(s->flat, m, s->persist_threshold, held);
    for (int i = 0; i < n; i++) {
        slot *sl = find_slot(s, held[i]);
        if (!sl) {
            DS_TRY(victim(s, -1, span_of(s, held[i]), &sl));
            DS_TRY(start_gather(s, sl, held[i]));
        }
        sl->in_use = true;
        sl->used_at = ++s->clock;
        got[i] = sl;
    }
    if (n > 0) DS_TRY(prefetch(s, m, m + dir)); /* queued behind m's own gathers */
    for (int i = 0; i < n; i++) DS_TRY(finish_gather(s, got[i]));
    if (s->persistent[m]) point(s, m, s->persist + s->persist_off[m]);
    else if (span_of(s, m) > 0) point(s, m, find_slot(s, m)->f32);
    if (s->flat->modules[m].n_ties > 0) point_tied(s, m);
    /* this rank's piece of what m uses could not be read: every gather went
     * as on the other ranks, but m may not run on it */
    ds_status bad = needs_persist(s, m) ? s->persist_err : DS_OK;
    const ds_error_saved *why = &s->persist_why;
    for (int i = 0; i < n && bad == DS_OK; i++)
        if (got[i]->read_err != DS_OK) {
            bad = got[i]->read_err;
            why = &got[i]->read_why;
        }
    if (bad != DS_OK) ds_error_restore(why);
    return bad;
}

static ds_status release(ds_zero *z, int m) {
    stage3 *s = S(z);
    /* Next use of m: after a forward, in the backward, past every later
     * module twice; after a backward, not before the next step. */
    bool forward = s->last_fetch == m && m < s->flat->n_modules - 1;
    int64_t distance = forward ? 2 * s->suffix[m + 1] : INT64_MAX;
    /* The spans of its ties' owners: next used by m's backward after its
     * forward, by the owner's backward after m's (past the modules between
     * them). Released, the slot holds nothing anyone is using: the table is
     * gathered again where it is needed next. */
    const ds_flat_module *fm = &s->flat->modules[m];
    for (int k = 0; k < fm->n_ties; k++) {
        int o = s->flat->params[s->flat->ties[fm->first_tie + k].param].module;
        slot *t = find_slot(s, o);
        if (!t || !t->in_use) continue; /* persistent, or a second tie to o */
        t->in_use = false;
        int64_t next = s->backward ? s->suffix[o + 1] - s->suffix[m] : 2 * s->suffix[m + 1];
        if (next > s->reuse_limit && !t->pending) t->valid = false;
    }
    slot *sl = find_slot(s, m);
    if (!sl) return DS_OK;
    sl->in_use = false;
    if (distance > s->reuse_limit && !sl->pending) sl->valid = false;
    return DS_OK;
}

static ds_status grad_slots(ds_zero *z, int m, float ***out) {
    stage3 *s = S(z);
    DS_TRY(s->be->ops->memset(s->be, s->gstage, 0, (size_t)span_of(s, m) * sizeof(float), NULL));
    *out = s->gptrs[m];
    return DS_OK;
}

static ds_status grad_done(ds_zero *z, int m, int64_t lo, int64_t hi) {
    stage3 *s = S(z);
    const ds_flat_module *fm = &s->flat->modules[m];
    DS_TRY(ds_grad_buckets_add(s->buckets, lo, hi, s->gstage + (lo - fm->begin), lo == fm->begin));
    return DS_OK;
}

static ds_status reduce_grads(ds_zero *z, double *sumsq, int *overflow) {
    stage3 *s = S(z);
    DS_TRY(ds_grad_buckets_finish(s->buckets));
    /* MiCS: the shard group's sums into the world's */
    DS_TRY(ds_s3_sum_replicas(&s->x, s->worker, s->grads, (size_t)s->sh.part, s->gt));
    DS_TRY(ds_zero_part_sumsq(s->be, s->comm, s->grads, s->gt, (size_t)s->sh.part, sumsq,
                              overflow));
    return DS_OK;
}

static void invalidate(stage3 *s) {
    for (int k = 0; k < s->n_slots; k++) s->slots[k].valid = false;
    s->persist_valid = false;
    s->persist_err = DS_OK;
    ds_s3_invalidate(&s->x);
}

static ds_status drain_slots(stage3 *s) {
    for (int k = 0; k < s->n_slots; k++) DS_TRY(finish_gather(s, &s->slots[k]));
    return DS_OK;
}

static ds_status drop_gathered(ds_zero *z) {
    stage3 *s = S(z);
    DS_TRY(drain_slots(s));
    invalidate(s);
    return DS_OK;
}

static ds_status apply(ds_zero *z, float grad_mult, const ds_optim_step *step) {
    stage3 *s = S(z);
    DS_TRY(drain_slots(s)); /* no gather may read the partition while it changes */
    ds_status st =
        ds_shard_update(&s->sh, step, s->params, s->grads, s->gt, grad_mult, s->params, s->pt);
    invalidate(s);
    DS_TRY(ds_shard_agree(&s->sh, s->world, st));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) {
    stage3 *s = S(z);
    s->x.repl_done = false;
    DS_TRY(s->be->ops->memset(s->be, s->grads, 0, (size_t)s->sh.part * ds_dtype_size(s->gt),
                              NULL));
    return DS_OK;
}

static ds_status get_param(ds_zero *z, int i, float *host) {
    stage3 *s = S(z);
    DS_TRY(drain_slots(s));
    if (ds_shard_offloaded(&s->sh)) { /* the fp32 master lives on the host */
        DS_TRY(ds_shard_get_weights(&s->sh, s->comm, s->flat, i, host));
        return DS_OK;
    }
    const void *src = s->sh.master ? (const void *)s->sh.master : s->params;
    DS_TRY(ds_zero_part_to_host(s->be, s->comm, s->flat, i, src, DS_F32, host));
    return DS_OK;
}

/* This rank's piece of parameter i into the param store, in the working
 * dtype. */
static ds_status set_stored(stage3 *s, int i, const float *host) {
    const ds_flat_param *p = &s->flat->params[i];
    int64_t b, e;
    if (!ds_flat_clip(s->flat, s->comm->rank, p->offset, p->offset + p->numel, &b, &e))
        return DS_OK;
    size_t n = (size_t)(e - b);
    void *tmp = malloc(n * ds_dtype_size(s->pt));
    if (!tmp) return DS_ERR(DS_ERR_OOM, "setting %s: out of host memory", p->desc->name);
    const float *src = host + (b - p->offset);
    for (size_t k = 0; k < n; k++) ds_store_f32(tmp, s->pt, k, src[k]);
    ds_status st = ds_param_store_write(s->ps, b - s->sh.lo, e - s->sh.lo, tmp, true);
    free(tmp);
    DS_TRY(st);
    return DS_OK;
}

static ds_status set_param(ds_zero *z, int i, const float *host) {
    stage3 *s = S(z);
    DS_TRY(drain_slots(s));
    DS_TRY(ds_shard_set_weights(&s->sh, s->flat, s->comm->rank, i, host));
    if (s->ps)
        DS_TRY(set_stored(s, i, host));
    else
        DS_TRY(ds_zero_part_from_host(s->be, s->flat, s->comm->rank, i, s->params, s->pt, host));
    invalidate(s);
    return DS_OK;
}

static ds_status get_grad(ds_zero *z, int i, float *host) {
    stage3 *s = S(z);
    DS_TRY(ds_grad_buckets_finish(s->buckets));
    DS_TRY(ds_zero_part_to_host(s->be, s->comm, s->flat, i, s->grads, s->gt, host));
    /* MiCS before the boundary's all-reduce: summed across the replicas */
    DS_TRY(ds_s3_replica_host_sum(&s->x, host, s->flat->params[i].numel,
                                  s->flat->params[i].desc->name));
    return DS_OK;
}

static ds_status state_io(ds_zero *z, ds_zero_state which, int64_t lo, int64_t hi, float *host,
                          bool write) {
    stage3 *s = S(z);
    if (write) DS_TRY(drain_slots(s)); /* no gather may read the partition while it changes */
    DS_TRY(ds_shard_state_io(&s->sh, (float *)s->params, which, lo, hi, host, write));
    return DS_OK;
}

static ds_status sync_params(ds_zero *z) {
    stage3 *s = S(z);
    DS_TRY(drain_slots(s));
    DS_TRY(ds_shard_sync_working(&s->sh, s->params, s->pt));
    invalidate(s);
    return DS_OK;
}

static void slot_free(stage3 *s, ds_backend *be, slot *sl) {
    ds_mem_host_free(be->mem, DS_MEM_OTHER, sl->counts, (size_t)s->flat->world * sizeof(size_t));
    if (s->qwz) {
        ds_mem_host_free(be->mem, DS_MEM_OTHER, sl->qcounts,
                         (size_t)s->flat->world * sizeof(size_t));
        ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, sl->qbuf, sl->qcap);
    }
    size_t cap = (size_t)sl->cap;
    if (sl->buf) /* NULL under qwZ with fp16/bf16; the fp32 view itself under fp32 */
        ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, sl->buf, cap * ds_dtype_size(s->pt));
    if (s->pt != DS_F32) ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, sl->f32, cap * 4);
}

static void destroy(ds_zero *z) {
    stage3 *s = S(z);
    if (s) {
        ds_backend *be = z->d.be;
        const ds_flat *f = &s->pflat;
        size_t part = (size_t)f->part, span = (size_t)s->max_span;
        ds_comm_worker_destroy(s->worker); /* joins the thread: no job still runs */
        ds_s3_groups_free(&s->x); /* after the worker: its jobs used them */
        ds_grad_buckets_destroy(s->buckets);
        for (int k = 0; k < s->n_slots; k++) slot_free(s, be, &s->slots[k]);
        for (int m = 0; s->tptrs && m < f->n_modules; m++) free(s->tptrs[m]);
        free(s->tptrs);
        ds_backend_free(be, DS_MEM_PARAMS, DS_PLACE_DEVICE, s->params, part * ds_dtype_size(s->pt));
        ds_param_store_destroy(s->ps); /* nvme: its file goes with it */
        ds_backend_free(be, DS_MEM_GRADS, DS_PLACE_DEVICE, s->grads, part * ds_dtype_size(s->gt));
        ds_backend_free(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, s->gstage, span * 4);
        ds_backend_free(be, DS_MEM_PARAMS, DS_PLACE_DEVICE, s->persist,
                        (size_t)s->persist_elems * 4);
        for (int m = 0; s->ptrs && m < f->n_modules; m++) free(s->ptrs[m]);
        for (int m = 0; s->gptrs && m < f->n_modules; m++) free(s->gptrs[m]);
        free(s->ptrs);
        free(s->gptrs);
        free(s->persistent);
        free(s->persist_off);
        free(s->suffix);
        ds_shard_free(&s->sh);
        free(s);
    }
    free(z);
}

static const ds_zero_ops k_stage3_ops = {
    .name = "stage3", .fetch = fetch, .release = release, .grad_slots = grad_slots,
    .grad_done = grad_done, .reduce_grads = reduce_grads, .apply = apply,
    .zero_grad = zero_grad, .get_param = get_param, .set_param = set_param,
    .get_grad = get_grad, .state_io = state_io, .sync_params = sync_params, .destroy = destroy,
    .drop_gathered = drop_gathered,
};

static int cmp_desc_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

static ds_status plan(stage3 *s, const ds_config *cfg) {
    const ds_flat *f = s->flat;
    int n = f->n_modules;
    s->persistent = calloc((size_t)n, sizeof *s->persistent);
    s->persist_off = calloc((size_t)n, sizeof *s->persist_off);
    s->suffix = calloc((size_t)n + 1, sizeof *s->suffix);
    s->ptrs = calloc((size_t)n, sizeof *s->ptrs);
    s->gptrs = calloc((size_t)n, sizeof *s->gptrs);
    if (!s->persistent || !s->persist_off || !s->suffix || !s->ptrs || !s->gptrs)
        return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    if (f->n_ties > 0) {
        s->tptrs = calloc((size_t)n, sizeof *s->tptrs);
        if (!s->tptrs) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
        for (int m = 0; m < n; m++)
            if (f->modules[m].n_ties > 0 &&
                !(s->tptrs[m] = calloc((size_t)f->modules[m].n_ties, sizeof(float *))))
                return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    }
    for (int m = n - 1; m >= 0; m--) {
        int64_t span = span_of(s, m);
        s->suffix[m] = s->suffix[m + 1] + span;
        if (span > s->max_span) s->max_span = span;
        s->persistent[m] = span > 0 && span < cfg->stage3_param_persistence_threshold;
    }
    for (int m = 0; m < n; m++) {
        if (s->persistent[m]) {
            s->persist_off[m] = s->persist_elems;
            s->persist_elems += span_of(s, m);
            if (span_of(s, m) > s->persist_max) s->persist_max = span_of(s, m);
        }
        const ds_flat_module *fm = &f->modules[m];
        int np = fm->n_params > 0 ? fm->n_params : 1;
        s->ptrs[m] = calloc((size_t)np, sizeof(float *));
        s->gptrs[m] = calloc((size_t)np, sizeof(float *));
        if (!s->ptrs[m] || !s->gptrs[m]) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    }
    /* Slots: the module in use plus prefetched ones, as many as
     * stage3_max_live_parameters allows, at least two (current + next). */
    int64_t live = s->max_span > 0 ? cfg->stage3_max_live_parameters / s->max_span : MAX_SLOTS;
    s->n_slots = live < 2 ? 2 : live > 3 ? 3 : (int)live;
    /* A module with ties holds its owners' spans too (fetch): as many slots
     * as the most any module holds at once. */
    s->persist_threshold = cfg->stage3_param_persistence_threshold;
    for (int m = 0; m < n; m++) {
        int held = ds_ties_held(f, m, s->persist_threshold, NULL);
        if (held > MAX_SLOTS)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "stage 3: the module tying %s uses parameters of %d modules at once; "
                          "at most %d", f->ties[f->modules[m].first_tie].desc->name, held,
                          MAX_SLOTS);
        if (held > s->n_slots) s->n_slots = held;
    }
    /* Capacities: the n_slots largest spans, largest first (with fewer
     * modules than slots, the last repeats): any n_slots modules fit at once,
     * placed largest first. */
    int64_t *spans = malloc((size_t)(n > 0 ? n : 1) * sizeof *spans);
    if (!spans) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    for (int m = 0; m < n; m++) spans[m] = span_of(s, m);
    qsort(spans, (size_t)n, sizeof *spans, cmp_desc_i64);
    for (int k = 0; k < s->n_slots; k++) s->slots[k].cap = n > 0 ? spans[k < n ? k : n - 1] : 0;
    free(spans);
    s->prefetch_limit = cfg->stage3_prefetch_bucket_size;
    s->reuse_limit = cfg->stage3_max_reuse_distance;
    s->last_fetch = -1;
    return DS_OK;
}

static ds_status slot_alloc(stage3 *s, ds_backend *be, slot *sl) {
    sl->module = -1;
    sl->owner = s;
    DS_TRY(ds_mem_host_alloc(be->mem, DS_MEM_OTHER, (size_t)s->flat->world * sizeof(size_t),
                             "gather block counts", (void **)&sl->counts));
    size_t cap = (size_t)sl->cap;
    /* qwZ under fp16/bf16 gathers into qbuf and dequantizes into f32: no
     * working-dtype copy of the span (buf stays NULL; f32 is the scratch a
     * piece read from offload_param's store is quantized from) */
    if (s->pt == DS_F32 || !s->qwz)
        DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, cap * ds_dtype_size(s->pt),
                                &sl->buf));
    if (s->pt != DS_F32)
        DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, cap * 4, (void **)&sl->f32));
    else
        sl->f32 = sl->buf;
    if (s->qwz) {
        size_t w = (size_t)s->flat->world;
        sl->qcap = ds_q8_records_bytes_max(cap, (int)w);
        DS_TRY(ds_mem_host_alloc(be->mem, DS_MEM_OTHER, w * sizeof(size_t),
                                 "qwZ gather byte counts", (void **)&sl->qcounts));
        DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, sl->qcap,
                                (void **)&sl->qbuf));
    }
    return DS_OK;
}

/* d_in's flat space and communicator are the world's; under MiCS the
 * partition is cut over the shard group, so everything below sees that
 * group's view (d). */
/* qgZ's scheme (config.h qgz_scheme). "int4" is DeepSpeed's: two levels
 * over the partition's hosts (the communicator's, by host name, the same
 * number of consecutive ranks on each), and on one host the plain
 * reduce-scatter, as DeepSpeed's stage3.py takes its quantized path only
 * when num_nodes > 1. */
static ds_status qgz_setup(stage3 *s, const ds_config *cfg) {
    if (strcmp(cfg->qgz_scheme, "int4") != 0) return ds_grad_buckets_quantize(s->buckets, s->comm);
    int hosts = s->comm->nhosts, w = s->comm->world;
    if (hosts <= 1) return DS_OK;
    if (w % hosts != 0)
        return DS_ERR(DS_ERR_CONFIG, "zero_engine.qgz_scheme: \"int4\" needs the same number "
                      "of ranks on every host, got %d ranks on %d hosts", w, hosts);
    return ds_grad_buckets_quantize_int4(s->buckets, s->comm, w / hosts);
}

static ds_status build(stage3 *s, const ds_zero_desc *d_in) {
    ds_zero_desc dd = *d_in;
    dd.flat = s->flat;
    dd.comm = s->comm;
    const ds_zero_desc *d = &dd;
    ds_backend *be = d->be;
    size_t part = (size_t)d->flat->part;
    DS_TRY(plan(s, d->cfg));
    size_t span = (size_t)s->max_span;
    DS_TRY(ds_shard_init(&s->sh, d));
    if (d->cfg->offload_param.device != DS_OFFLOAD_NONE) {
        ds_param_store_desc pd = {.dev = be, .off = &d->cfg->offload_param, .aio = &d->cfg->aio,
                                  .rank = d->comm->rank, .n = (int64_t)part, .t = s->pt};
        DS_TRY(ds_param_store_create(&pd, &s->ps));
        ds_shard_attach_store(&s->sh, s->ps);
    } else {
        DS_TRY(ds_backend_alloc(be, DS_MEM_PARAMS, DS_PLACE_DEVICE, part * ds_dtype_size(s->pt),
                                &s->params));
    }
    DS_TRY(ds_backend_alloc(be, DS_MEM_GRADS, DS_PLACE_DEVICE, part * ds_dtype_size(s->gt),
                            &s->grads));
    DS_TRY(ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, span * 4, (void **)&s->gstage));
    DS_TRY(ds_backend_alloc(be, DS_MEM_PARAMS, DS_PLACE_DEVICE, (size_t)s->persist_elems * 4,
                            (void **)&s->persist));
    DS_TRY(ds_s3_groups_alloc(&s->x, s->flat, s->max_span));
    for (int k = 0; k < s->n_slots; k++) DS_TRY(slot_alloc(s, be, &s->slots[k]));
    for (int m = 0; m < d->flat->n_modules; m++) {
        const ds_flat_module *fm = &d->flat->modules[m];
        for (int k = 0; k < fm->n_params; k++)
            s->gptrs[m][k] = s->gstage + (d->flat->params[fm->first_param + k].offset - fm->begin);
    }
    /* the world's thread runs the groups' collectives too (comm.h) */
    DS_TRY(ds_comm_worker_create(s->world, d->cfg->overlap_comm, &s->worker));
    DS_TRY(ds_grad_buckets_create(be, s->worker, d->flat, d->comm->rank, s->gt, s->grads,
                                  d->cfg->reduce_bucket_size, !d->cfg->contiguous_gradients,
                                  &s->buckets));
    ds_grad_buckets_set_comm(s->buckets, s->comm);
    /* qgZ: with one rank there is nothing to send */
    if (d->cfg->zero_quantized_gradients && s->comm->world > 1)
        DS_TRY(qgz_setup(s, d->cfg));
    /* sparse_gradients over the partition's ranks (MiCS: the shard group;
     * zero/grad_sparse.h); where it does not apply the engine warned */
    char why[256];
    if (ds_grad_sparse_applies(d->cfg, why, sizeof why)) {
        DS_TRY(ds_grad_buckets_sparse(s->buckets, s->comm));
        /* MiCS: across the replica groups too */
        DS_TRY(ds_s3_sparse_replicas(&s->x, s->flat, s->comm->rank, s->gt, s->grads));
    }
    /* Each rank draws only its own partition: the values equal those of the
     * other stages for the same elements (counter-based RNG). */
    DS_TRY(ds_shard_init_working(&s->sh, d, s->params, s->pt));
    return DS_OK;
}

ds_status ds_zero_stage3_create(const ds_zero_desc *d, ds_zero **out) {
    ds_zero *z;
    DS_TRY(ds_zero_alloc(d, &k_stage3_ops, 3, sizeof(stage3), &z));
    stage3 *s = S(z);
    s->be = d->be;
    s->world = d->comm;
    s->comm = d->comm;
    s->pflat = *d->flat;
    s->flat = &s->pflat;
    s->pt = d->param_t;
    s->gt = d->grad_t;
    s->qwz = d->cfg->zero_quantized_weights;
    ds_status st = ds_s3_groups_create(&s->x, d->cfg, d->comm, d->be, d->param_t);
    if (st == DS_OK && s->x.g.part) { /* MiCS: the partition is the shard group's */
        s->comm = s->x.g.part;
        s->pflat = ds_flat_view(d->flat, s->x.g.shard);
        z->state_parts = s->x.g.shard;
        z->state_part = s->comm->rank;
    }
    if (st == DS_OK) st = build(s, d);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        destroy(z);
        return st;
    }
    *out = z;
    return DS_OK;
}
