/* Stage 3's planning, allocation, start-up and teardown (the step is
 * zero/stage3.c's; the design is described at its top). */
#include <stdlib.h>

#include "engine/comm/codec_q8.h"
#include "engine/io/fault.h"
#include "zero/grad_sparse.h"
#include "zero/param_rows.h"
#include "zero/stage3_impl.h"
#include "zero/ties.h"

static void slot_free(stage3 *s, ds_backend *be, slot *sl) {
    ds_mem_host_free(be->mem, DS_MEM_OTHER, sl->counts, (size_t)s->flat->world * sizeof(size_t));
    for (int k = 0; k < S3_XJOBS; k++)
        ds_mem_host_free(be->mem, DS_MEM_OTHER, sl->xcounts[k],
                         (size_t)s->flat->world * sizeof(size_t));
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

void ds_stage3_destroy(ds_zero *z) {
    stage3 *s = S(z);
    if (s) {
        ds_backend *be = z->d.be;
        const ds_flat *f = &s->pflat;
        size_t part = (size_t)f->part, span = (size_t)s->max_span;
        ds_comm_worker_destroy(s->worker); /* joins the thread: no job still runs */
        ds_param_rows_destroy(s->rows);     /* after the worker: its jobs used it */
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
    /* Slots (zero_util.h): as many as stage3_max_live_parameters holds of
     * the largest spans not persistent, at least two (current + next) and
     * as many as the most any module holds at once (a module with ties
     * holds its owners' spans too: fetch), each sized so that any n_slots
     * modules fit at once, placed largest first. */
    s->persist_threshold = cfg->stage3_param_persistence_threshold;
    int held = 0;
    for (int m = 0; m < n; m++) {
        int h = ds_ties_held(f, m, s->persist_threshold, NULL);
        if (h > MAX_SLOTS)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "stage 3: the module tying %s uses parameters of %d modules at once; "
                          "at most %d", f->ties[f->modules[m].first_tie].desc->name, h,
                          MAX_SLOTS);
        if (h > held) held = h;
    }
    int64_t *spans = malloc((size_t)(n > 0 ? n : 1) * sizeof *spans);
    if (!spans) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    for (int m = 0; m < n; m++) spans[m] = span_of(s, m);
    int64_t caps[MAX_SLOTS];
    ds_status st = ds_s3_slot_caps(spans, n, s->persist_threshold,
                                   cfg->stage3_max_live_parameters, held, &s->n_slots, caps);
    free(spans);
    DS_TRY(st);
    for (int k = 0; k < s->n_slots; k++) s->slots[k].cap = caps[k];
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
    for (int k = 0; k < S3_XJOBS; k++)
        DS_TRY(ds_mem_host_alloc(be->mem, DS_MEM_OTHER, (size_t)s->flat->world * sizeof(size_t),
                                 "gather block counts", (void **)&sl->xcounts[k]));
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

/* What build makes on this rank alone: the plan, the shard, the buffers,
 * the slots, the communication thread and the buckets. DS_FAULT_INJECT=
 * error:stage3:alloc[:rank=R] fails it last (engine/io/fault.h), as a
 * device allocation that does not fit. */
static ds_status build_local(stage3 *s, const ds_zero_desc *d) {
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
    DS_TRY(ds_fault_error("stage3:alloc", s->world->rank));
    return DS_OK;
}

/* st: this rank's failure before the build (its groups), DS_OK for none. */
static ds_status build(stage3 *s, const ds_zero_desc *d_in, ds_status st) {
    ds_zero_desc dd = *d_in;
    dd.flat = s->flat;
    dd.comm = s->comm;
    const ds_zero_desc *d = &dd;
    if (st == DS_OK) st = build_local(s, d);
    /* qgZ's "int4" scheme splits the communicator, a collective every rank
     * must reach: a rank whose groups or allocations failed says so first,
     * and every rank fails alike instead of the others waiting in the
     * split. Whether to agree is decided from what every rank sees alike
     * (the world, not a group a failed rank never joined). */
    if (d->cfg->zero_quantized_gradients && s->world->world > 1) {
        ds_status worst = st;
        DS_TRY(ds_comm_agree(s->world, st, &worst));
        st = worst;
    }
    DS_TRY(st);
    if (d->cfg->zero_quantized_gradients && s->comm->world > 1) /* one rank: nothing to send */
        DS_TRY(qgz_setup(s, d->cfg));
    DS_TRY(ds_s3_rows_create(s, d)); /* gather_rows (stage3_rows.c) */
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
    ds_zero *z = NULL;
    ds_status st = ds_zero_alloc(d, &ds_stage3_ops, 3, sizeof(stage3), &z);
    /* the groups' splits and qgZ's agreement below are collectives: a rank
     * whose allocation failed says so first, so that no rank waits in them
     * for one that returned (one host all-reduce, at start-up) */
    if (d->comm->world > 1) {
        ds_status worst = st;
        ds_status as = ds_comm_agree(d->comm, st, &worst);
        st = as != DS_OK ? as : worst;
    }
    if (st != DS_OK) {
        if (z) ds_stage3_destroy(z);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    stage3 *s = S(z);
    s->be = d->be;
    s->world = d->comm;
    s->comm = d->comm;
    s->pflat = *d->flat;
    s->flat = &s->pflat;
    s->pt = d->param_t;
    s->gt = d->grad_t;
    s->qwz = d->cfg->zero_quantized_weights;
    st = ds_s3_groups_create(&s->x, d->cfg, d->comm, d->be, d->param_t);
    /* error:stage3:groups[:rank=R] (engine/io/fault.h): a rank failing here,
     * before its build, must still meet the others in qgZ's agreement */
    if (st == DS_OK) st = ds_fault_error("stage3:groups", d->comm->rank);
    if (st == DS_OK && s->x.g.part) { /* MiCS: the partition is the shard group's */
        s->comm = s->x.g.part;
        s->pflat = ds_flat_view(d->flat, s->x.g.shard);
        z->state_parts = s->x.g.shard;
        z->state_part = s->comm->rank;
    }
    st = build(s, d, st);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        ds_stage3_destroy(z);
        return st;
    }
    *out = z;
    return DS_OK;
}
