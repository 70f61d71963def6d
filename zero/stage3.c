/* ZeRO stage 3: parameters, gradients and optimizer state all sharded.
 *
 * Each rank stores only its partition of the working parameters. A module's
 * parameters are all-gathered into a gather slot just before its forward and
 * again before its backward (all-gather with uneven blocks: a module's span
 * usually falls into one or two partitions), and the slot is released after
 * use. While module m runs, the next module in the direction of travel is
 * prefetched into another slot on the communication thread (overlap_comm),
 * within stage3_prefetch_bucket_size elements. Slots are a small pool (up to
 * 8) whose size follows stage3_max_live_parameters: as many of the largest
 * spans as it holds (zero_util.h ds_s3_slot_caps; with the default 1e9 a
 * small model's last modules of forward are all still there for the
 * backward, which then starts without a gather). Slot k holds up to the k-th
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
 * gather_rows: a module whose table the forward reads by rows gathers, for
 * a training micro-batch, the rest of its span whole and of the table only
 * the rows the micro-batch names (zero/stage3_rows.c).
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

#include "engine/comm/codec_q8.h"
#include "zero/param_rows.h"
#include "zero/stage3_impl.h"
#include "zero/ties.h"
#include "zero/zero_util.h"

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
    sl->by_rows = false;
    sl->n_xjobs = 0;
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
    if (ds_s3_rows_applies(s, m)) return ds_s3_rows_start(s, sl, m); /* stage3_rows.c */
    const ds_flat_module *fm = &s->flat->modules[m];
    DS_TRY(start_gather_range(s, sl, fm->begin, fm->end, m));
    sl->module = m;
    sl->fill_sec = s->x.sec && !sl->from_sec;
    return DS_OK;
}

static ds_status finish_gather(stage3 *s, slot *sl) {
    if (!sl->pending) return DS_OK;
    sl->pending = false;
    ds_status st = DS_OK;
    for (int k = 0; k < sl->n_xjobs; k++) { /* gather_rows: the dense ranges first */
        ds_status x = ds_comm_job_wait(s->worker, &sl->xjobs[k]);
        if (st == DS_OK) st = x;
    }
    sl->n_xjobs = 0;
    ds_status js = ds_comm_job_wait(s->worker, &sl->job);
    if (st == DS_OK) st = js;
    if (st == DS_OK && s->qwz) /* every rank's piece, its own included (see the top), to fp32 */
        st = ds_q8_decode_all(s->be, sl->qbuf, sl->counts, sl->job.comm->world, sl->f32);
    else if (st == DS_OK && s->pt != DS_F32)
        st = s->be->ops->cast(s->be, sl->f32, DS_F32, sl->buf, s->pt, (size_t)sl->len);
    if (st == DS_OK && sl->fill_sec) /* under qwZ the dequantized weights, as DeepSpeed */
        st = ds_s3_fill_secondary(&s->x, sl->module, s->qwz ? (void *)sl->f32 : sl->buf,
                                  s->qwz ? DS_F32 : s->pt, sl->begin, sl->len);
    sl->fill_sec = false;
    if (st != DS_OK) { /* its fp32 view may hold anything: never handed out */
        sl->valid = false;
        DS_TRY(st);
    }
    return DS_OK;
}

static slot *find_slot(stage3 *s, int m) {
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].valid && s->slots[k].module == m) return &s->slots[k];
    return NULL;
}

/* The slot a fetch of m's span holds: valid, or still in use after its
 * gather failed (release must free it all the same). */
static slot *held_slot(stage3 *s, int m) {
    slot *v = find_slot(s, m);
    for (int k = 0; k < s->n_slots && !v; k++)
        if (s->slots[k].in_use && s->slots[k].module == m) v = &s->slots[k];
    return v;
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
    z->fetch_local = false;
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
    /* the file lost since (a read failed before): a cached span or hpZ's
     * secondary copy may hold the zeros that went in its place */
    else if (s->ps) bad = ds_param_store_check(s->ps);
    z->fetch_local = bad != DS_OK;
    return bad;
}

static ds_status release(ds_zero *z, int m) {
    stage3 *s = S(z);
    /* Next use of m (DeepSpeed's reuse distance, in elements gathered in
     * between): after a forward, in the backward, past every later module
     * twice (none for the last); after a backward, in the next micro-batch's
     * forward past every earlier module twice (an update in between drops
     * every slot anyway). */
    int64_t distance = s->backward ? 2 * (s->suffix[0] - s->suffix[m]) : 2 * s->suffix[m + 1];
    /* The spans of its ties' owners: next used by m's backward after its
     * forward, by the owner's backward after m's (past the modules between
     * them). Released, the slot holds nothing anyone is using: the table is
     * gathered again where it is needed next. */
    const ds_flat_module *fm = &s->flat->modules[m];
    for (int k = 0; k < fm->n_ties; k++) {
        int o = s->flat->params[s->flat->ties[fm->first_tie + k].param].module;
        slot *t = held_slot(s, o);
        if (!t || !t->in_use) continue; /* persistent, or a second tie to o */
        t->in_use = false;
        int64_t next = s->backward ? s->suffix[o + 1] - s->suffix[m] : 2 * s->suffix[m + 1];
        if (next > s->reuse_limit && !t->pending) t->valid = false;
    }
    slot *sl = held_slot(s, m);
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
    /* in_use too: a fetch that failed part way kept its slots marked, and
     * nothing uses a slot across this point (a step's update, a drop after
     * an agreed failure) */
    for (int k = 0; k < s->n_slots; k++)
        s->slots[k].valid = false, s->slots[k].by_rows = false, s->slots[k].in_use = false;
    s->persist_valid = false;
    s->persist_err = DS_OK;
    ds_s3_invalidate(&s->x);
}

/* Every slot's gather landed. A failure does not stop the drain: a slot
 * left pending would be forgotten by invalidate() (by_rows cleared) while
 * its job still reads the rows plan the next forward rewrites. */
static ds_status drain_slots(stage3 *s) {
    ds_status first = DS_OK;
    ds_error_saved why;
    for (int k = 0; k < s->n_slots; k++) {
        ds_status st = finish_gather(s, &s->slots[k]);
        if (st != DS_OK && first == DS_OK) {
            first = st;
            ds_error_save(&why);
        }
    }
    if (first != DS_OK) ds_error_restore(&why);
    return first;
}

/* A forward starts: with gather_rows, a span gathered by the last
 * micro-batch's rows is gone, and the new micro-batch's rows are planned
 * (an evaluation's, host NULL: spans whole). */
static ds_status begin_forward(ds_zero *z, const ds_batch *host, const ds_tensor_desc *inputs,
                               int n_inputs) {
    stage3 *s = S(z);
    /* a forward walks up from here: module 0's fetch prefetches module 1
     * (after a backward, which ended at module 0, it read as a backward's
     * turnaround, and module 1 was gathered with nothing to hide behind) */
    s->last_fetch = -1;
    if (!s->rows) return DS_OK;
    for (int k = 0; k < s->n_slots; k++) {
        slot *sl = &s->slots[k];
        if (!sl->by_rows) continue;
        DS_TRY(finish_gather(s, sl));
        sl->valid = false;
        sl->by_rows = false;
    }
    DS_TRY(ds_param_rows_plan(s->rows, host, inputs, n_inputs));
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
    ds_status st = drain_slots(s); /* no gather may read the partition while it changes */
    if (st == DS_OK) /* else agreed below like the update's own failure */
        st = ds_shard_update(&s->sh, step, s->params, s->grads, s->gt, grad_mult, s->params,
                             s->pt);
    invalidate(s);
    DS_TRY(ds_shard_agree(&s->sh, s->world, st));
    return DS_OK;
}

static ds_status zero_grad(ds_zero *z) {
    stage3 *s = S(z);
    s->x.repl_done = false;
    if (s->buckets) DS_TRY(ds_grad_buckets_reset(s->buckets)); /* an open bucket too */
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

static ds_status revive(ds_zero *z) {
    DS_TRY(ds_shard_revive(&S(z)->sh));
    return DS_OK;
}

const ds_zero_ops ds_stage3_ops = {
    .name = "stage3", .fetch = fetch, .release = release, .grad_slots = grad_slots,
    .grad_done = grad_done, .reduce_grads = reduce_grads, .apply = apply,
    .zero_grad = zero_grad, .get_param = get_param, .set_param = set_param,
    .get_grad = get_grad, .state_io = state_io, .sync_params = sync_params, .destroy = ds_stage3_destroy,
    .drop_gathered = drop_gathered, .revive = revive, .begin_forward = begin_forward,
};
