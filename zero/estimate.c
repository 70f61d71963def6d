/* Memory estimator: the allocations of zero/ and offload/ at start-up,
 * replayed as arithmetic. Each block names the file whose allocations it
 * follows; tests/unit/test_estimate.c compares the result with the
 * accountant of real engines, so a change there that is not made here
 * fails a test. */
#include "zero/estimate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/math.h"
#include "engine/comm/codec_q4.h"
#include "engine/comm/codec_q8.h"
#include "offload/nvme_dir.h"
#include "zero/flat.h"
#include "zero/groups.h"
#include "zero/stage3_groups.h"
#include "zero/optim.h"
#include "zero/ties.h"
#include "zero/grad_sparse.h"
#include "zero/param_rows.h"
#include "zero/zero_util.h"

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* What the estimate needs of the flat layout (zero/flat.c). */
typedef struct layout {
    int64_t used, padded, part;
    int world;
    const int64_t *spans; /* module spans in the flat space (padded tensors) */
    int n_spans;
    const int64_t *tied;  /* elements of each tied parameter */
    int n_tied;
    int held;             /* stage 3: the most spans a module holds at once (ties.h) */
    bool sampled;         /* spans are copies of the largest layer only (from the
                             parameter count): every layer is at most that */
} layout;

typedef struct est {
    const ds_config *c;
    ds_backend_kind be;
    const layout *l;
    ds_mem_report *r;
    uint64_t P, G;  /* bytes per parameter, per gradient element */
    bool mixed;     /* param_t is not fp32: an fp32 master exists */
    int moments;    /* fp32 optimizer moments (zero/optim.c) */
    int64_t max_span;
    bool overflow;  /* a byte count left 64 bits (a config's sizes near INT64_MAX) */
} est;

/* elems x esz bytes more of (p, at), checked: the parameter count is capped
 * (DS_ESTIMATE_MAX_PARAMS) but a config's sizes (buffer_size, bucket
 * sizes) are not, and a wrapped count would read as a small one. */
static void add(est *e, ds_mem_purpose p, ds_mem_place at, int64_t elems, uint64_t esz) {
    uint64_t b;
    if (elems <= 0) return;
    if (__builtin_mul_overflow((uint64_t)elems, esz, &b) ||
        __builtin_add_overflow(e->r->bytes[p][at], b, &e->r->bytes[p][at]))
        e->overflow = true;
}

/* zero/replica.c: the full replica of stages 0-2; lent: the gradient is the
 * stage's own buffer (stage 2 at one rank), counted by the stage. */
static void replica(est *e, bool full_grads, bool lent) {
    int64_t padded = e->l->padded;
    add(e, DS_MEM_PARAMS, DS_PLACE_DEVICE, padded, e->P);
    if (full_grads) add(e, DS_MEM_GRADS, DS_PLACE_DEVICE, padded, e->G);
    if (e->mixed) add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, e->max_span, 4); /* fp32 params */
    if (e->G != 4 || !(full_grads || lent)) /* fp32 gradient staging */
        add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, e->max_span, 4);
    if (e->mixed)
        for (int j = 0; j < e->l->n_tied; j++) add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, e->l->tied[j], 4);
}

/* offload/nvme_swap.c: files for master and moments, and nsets x tensors
 * sub-group buffers in RAM. Returns the tier's piece (elements). */
static int64_t nvme_swap(est *e, int64_t n) {
    const ds_offload_config *o = &e->c->offload_optimizer;
    int64_t align = DS_NVME_ALIGN / (int64_t)sizeof(float);
    int64_t padded = round_up(n, align);
    int64_t sg = round_up(min64(e->c->sub_group_size, padded), align);
    int nsets = 1 + (o->pipeline_read ? 1 : 0) + (o->pipeline_write ? 1 : 0);
    add(e, DS_MEM_MASTER, DS_PLACE_NVME, n, 4);
    add(e, DS_MEM_OPTIM, DS_PLACE_NVME, n, 4u * (uint64_t)e->moments);
    add(e, DS_MEM_BUFFERS, DS_PLACE_HOST, sg, 4u * (uint64_t)nsets * (uint64_t)(1 + e->moments));
    return sg;
}

/* offload/host_optim.c: the optimizer partition off the device. */
static void host_optim(est *e, int64_t n) {
    int64_t piece = (int64_t)1 << 22; /* DS_HOST_OPTIM_CHUNK */
    if (e->c->offload_optimizer.device == DS_OFFLOAD_NVME) {
        piece = nvme_swap(e, n);
    } else {
        add(e, DS_MEM_MASTER, DS_PLACE_HOST, n, 4);
        add(e, DS_MEM_OPTIM, DS_PLACE_HOST, n, 4u * (uint64_t)e->moments);
    }
    if (e->be == DS_BACKEND_CPU) { /* gradients read in place, one piece of parameters */
        if (e->P != 4) add(e, DS_MEM_BUFFERS, DS_PLACE_HOST, min64(n, piece), e->P);
    } else {
        add(e, DS_MEM_BUFFERS, DS_PLACE_HOST, n, e->G);
        if (e->P != 4) add(e, DS_MEM_BUFFERS, DS_PLACE_HOST, n, e->P);
    }
}

/* zero/shard.c: master and moments of the rank's partition. */
static void shard(est *e, bool param_off) {
    int64_t part = e->l->part;
    if (e->c->offload_optimizer.device != DS_OFFLOAD_NONE) {
        host_optim(e, part);
        return;
    }
    if (e->mixed || param_off) add(e, DS_MEM_MASTER, DS_PLACE_DEVICE, part, 4);
    if (param_off) add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, min64(part, (int64_t)1 << 22), e->P);
    add(e, DS_MEM_OPTIM, DS_PLACE_DEVICE, part, 4u * (uint64_t)e->moments);
}

/* zero/grad_buckets.c: a bucket holds at most the model, at least a module. */
static int64_t bucket_cap(const est *e) {
    int64_t cap = e->c->reduce_bucket_size;
    if (cap > e->l->used) cap = e->l->used;
    return e->max_span > cap ? e->max_span : cap;
}

/* zero/grad_buckets.c: two buckets. */
static void buckets(est *e) { add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, 2 * bucket_cap(e), e->G); }

/* qgZ (zero/grad_buckets.c ds_grad_buckets_quantize, at stage 3 over more
 * than one rank): the quantized reduce-scatter's scratch, one round's
 * records and two fp32 slices, the same for any model and bucket size. */
static void buckets_q8(est *e) {
    if (!e->c->zero_quantized_gradients || e->l->world < 2) return;
    /* zero_engine.qgz_scheme "int4" (ds_grad_buckets_quantize_int4): its
     * scratch grows with the hosts, which the estimate does not know; one
     * rank per host is the most (on one host it has none: the plain
     * reduce-scatter runs) */
    if (!strcmp(e->c->qgz_scheme, "int4"))
        add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, (int64_t)ds_q4_rs_bytes(e->l->world, 1, 0), 1);
    else
        add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, (int64_t)ds_q8_rs_bytes(e->l->world, 0), 1);
}

/* offload/param_store.c: stage 3's parameter partition off the device. */
static void param_store(est *e, int64_t n) {
    const ds_offload_config *o = &e->c->offload_param;
    int64_t n_host = o->device == DS_OFFLOAD_NVME ? min64(n, o->max_in_cpu) : n;
    add(e, DS_MEM_PARAMS, DS_PLACE_HOST, n_host, e->P);
    if (n_host == n) return;
    /* a buffer holds at most the file: the smaller count first, so that a
     * huge buffer_size is not multiplied (it wrapped) */
    int64_t buf = round_up(min64(o->buffer_size, n - n_host) * (int64_t)e->P, DS_NVME_ALIGN);
    add(e, DS_MEM_PARAMS, DS_PLACE_NVME, n - n_host, e->P);
    add(e, DS_MEM_BUFFERS, DS_PLACE_HOST, buf, (uint64_t)(o->buffer_count < 8 ? o->buffer_count : 8));
}

/* One gather slot of cap elements (stage3.c slot_alloc): low-precision
 * and fp32 views, and with qwZ the packed int8 blocks of every rank's piece. */
static void slot(est *e, int64_t cap) {
    bool qwz = e->c->zero_quantized_weights;
    /* the working-dtype span (fp32: also the fp32 view), and under mixed
     * precision the fp32 view; qwZ under mixed precision keeps only the
     * latter */
    int64_t per = (e->mixed && qwz) ? 4 : e->P + (e->mixed ? 4 : 0);
    add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, cap, per);
    if (qwz)
        add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE,
            (int64_t)ds_q8_records_bytes_max((size_t)cap, e->l->world), 1);
}

/* zero/stage3.c: partitioned parameters, gather slots, persistent modules;
 * with hpZ the secondary piece, under MiCS a partition of the shard group
 * (zero/groups.h). */
static ds_status stage3(est *e) {
    const ds_config *c = e->c;
    DS_TRY(ds_zero_groups_check(c, e->l->world));
    layout ml = *e->l; /* MiCS: the partition is cut over the shard group */
    if (c->mics_shard_size > 0) {
        ml.world = (int)c->mics_shard_size;
        ml.part = ml.padded / ml.world;
    }
    const layout *world_l = e->l;
    e->l = &ml;
    const layout *l = e->l;
    if (c->zero_hpz_partition_size > 1)
        add(e, DS_MEM_PARAMS, DS_PLACE_DEVICE, l->padded / c->zero_hpz_partition_size, e->P);
    if (c->mics_hierarchical_params_gather) /* the packed pieces across hosts */
        add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE,
            (int64_t)ds_s3_hier_buffer_bytes((size_t)e->max_span, (size_t)e->P,
                                             c->zero_quantized_weights, l->world), 1);
    int64_t persist = 0;
    for (int m = 0; m < l->n_spans; m++)
        if (l->spans[m] > 0 && l->spans[m] < c->stage3_param_persistence_threshold)
            persist += l->spans[m];
    /* from the count alone: a largest layer under the threshold makes every
     * layer persistent, their copy the whole model (the few copies listed
     * stand for the slots, not for the layers) */
    if (l->sampled && persist > 0) persist = l->used;
    bool param_off = c->offload_param.device != DS_OFFLOAD_NONE;
    shard(e, param_off);
    if (param_off) param_store(e, l->part);
    else add(e, DS_MEM_PARAMS, DS_PLACE_DEVICE, l->part, e->P);
    add(e, DS_MEM_GRADS, DS_PLACE_DEVICE, l->part, e->G);
    add(e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, e->max_span, 4);
    add(e, DS_MEM_PARAMS, DS_PLACE_DEVICE, persist, 4);
    /* slots (zero_util.h, as stage3_build.c sizes them); a tied parameter
     * has none of its own (it is read from its owner's slot) */
    int n_slots;
    int64_t caps[DS_S3_MAX_SLOTS];
    DS_TRY(ds_s3_slot_caps(l->spans, l->n_spans, c->stage3_param_persistence_threshold,
                           c->stage3_max_live_parameters, l->held, &n_slots, caps));
    for (int k = 0; k < n_slots; k++) slot(e, caps[k]);
    buckets(e);
    buckets_q8(e);
    e->l = world_l;
    return DS_OK;
}

static void totals(ds_mem_report *out) {
    memset(out->total, 0, sizeof out->total);
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        for (int at = 0; at < DS_PLACE_COUNT; at++) {
            out->peak[p][at] = out->bytes[p][at];
            if (__builtin_add_overflow(out->total[at], out->bytes[p][at], &out->total[at]))
                out->total[at] = UINT64_MAX; /* saturated: more than any machine has */
        }
    memcpy(out->total_peak, out->total, sizeof out->total);
}

static ds_status estimate(const layout *l, const ds_config *c, ds_backend_kind be,
                          ds_mem_report *out) {
    memset(out, 0, sizeof *out);
    if (c->zero_stage < 0 || c->zero_stage > 3)
        return DS_ERR(DS_ERR_INVALID_ARG, "memory estimate: ZeRO stage must be 0..3, got %d",
                      c->zero_stage);
    if (l->padded > DS_ESTIMATE_MAX_PARAMS) /* a model's layout: the count is its own */
        return DS_ERR(DS_ERR_INVALID_ARG, "memory estimate: %lld parameters (padded) are more "
                      "than the estimator takes, %lld (2^50)", (long long)l->padded,
                      (long long)DS_ESTIMATE_MAX_PARAMS);
    ds_dtype pt = c->fp16_enabled ? DS_F16 : c->bf16_enabled ? DS_BF16 : DS_F32;
    ds_dtype gt = c->comm_dtype_set ? c->communication_data_type : pt;
    est e = {.c = c, .be = be, .l = l, .r = out, .P = ds_dtype_size(pt), .G = ds_dtype_size(gt),
             .mixed = pt != DS_F32, .moments = ds_optim_state_count(c)};
    for (int m = 0; m < l->n_spans; m++)
        if (l->spans[m] > e.max_span) e.max_span = l->spans[m];
    switch (c->zero_stage) {
    case 0: /* zero/stage0.c: everything everywhere, on the device */
        replica(&e, true, false);
        if (e.mixed) add(&e, DS_MEM_MASTER, DS_PLACE_DEVICE, l->padded, 4);
        add(&e, DS_MEM_OPTIM, DS_PLACE_DEVICE, l->padded, 4u * (uint64_t)e.moments);
        break;
    case 1: /* zero/stage1.c */
        replica(&e, true, false);
        shard(&e, false);
        break;
    case 2: { /* zero/stage2.c: the gradient partition and its buckets; at one rank
               * the partition is the whole gradient, accumulated in place */
        bool one = l->world == 1;
        replica(&e, false, one);
        shard(&e, false);
        add(&e, DS_MEM_GRADS, DS_PLACE_DEVICE, l->part, e.G);
        if (!one) buckets(&e);
        break;
    }
    default:
        DS_TRY(stage3(&e));
    }
    /* zero/ties.c: the gradient accumulators of tied parameters */
    for (int j = 0; j < l->n_tied; j++) add(&e, DS_MEM_BUFFERS, DS_PLACE_DEVICE, l->tied[j], 4);
    if (e.overflow)
        return DS_ERR(DS_ERR_INVALID_ARG, "memory estimate: a byte count of this config is more "
                      "than 64 bits hold (a size key near 2^63: buffer_size, "
                      "reduce_bucket_size, sub_group_size?)");
    totals(out);
    return DS_OK;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* engine/engine_step.c (ds_engine_plan_activations): every module's
 * output, what its backward keeps (checkpointed modules share the largest
 * one), the largest scratch, two activation-gradient buffers, the device
 * copy of a micro-batch, for train_micro_batch_size_per_gpu rows of the
 * model's max_seq_len, and with bf16 GEMM inputs the backend's GEMM
 * workspace for the largest GEMM the modules declare. */
static void plan_activations(const ds_model *m, const ds_config *c, ds_backend_kind be,
                             ds_mem_report *r) {
    int B = (int)c->train_micro_batch_size_per_gpu, T = m->max_seq_len > 0 ? m->max_seq_len : 1;
    if (B <= 0) return; /* the engine refuses it */
    size_t act = 0, saved = 0, ckpt = 0, scratch = 0, grad = 0, in = 0;
    int64_t budget = c->number_checkpoints > 0 ? c->number_checkpoints : INT64_MAX;
    for (int i = 0; i < m->n_modules; i++) {
        const ds_module *mod = m->modules[i];
        size_t out = mod->ops->out_elems(mod, B, T), keep = mod->ops->saved_bytes(mod, B, T);
        act += out * sizeof(float);
        scratch = max_sz(scratch, mod->ops->scratch_bytes(mod, B, T));
        if (i < m->n_modules - 1) grad = max_sz(grad, out);
        if (c->activation_checkpointing && mod->checkpointable && budget > 0) {
            budget--;
            ckpt = max_sz(ckpt, keep);
        } else {
            saved += keep;
        }
    }
    for (int j = 0; j < m->n_inputs; j++)
        in += (size_t)B * ds_tensor_desc_row_elems(&m->inputs[j], T) *
              ds_dtype_size(m->inputs[j].dtype);
    r->bytes[DS_MEM_ACTIVATIONS][DS_PLACE_DEVICE] += act + saved + ckpt + 2 * grad * sizeof(float);
    r->bytes[DS_MEM_BUFFERS][DS_PLACE_DEVICE] += scratch;
    r->bytes[DS_MEM_OTHER][DS_PLACE_DEVICE] += in;
    if (ds_config_gemm_inputs(c) == DS_BF16) {
        ds_gemm_plan gp = {.kind = be};
        ds_model_plan_gemms(m, B, T, &gp);
        r->bytes[DS_MEM_WORKSPACE][DS_PLACE_DEVICE] += gp.bytes;
    }
}

ds_status ds_estimate_model(const ds_model *model, int world, const ds_config *cfg,
                            ds_backend_kind be, ds_mem_report *out) {
    memset(out, 0, sizeof *out);
    ds_flat *f;
    DS_TRY(ds_flat_create(model, world, &f)); /* a table; the parameters are not allocated */
    int64_t *spans = malloc((size_t)f->n_modules * sizeof *spans);
    int64_t *tied = malloc((size_t)(f->n_tied_params > 0 ? f->n_tied_params : 1) * sizeof *tied);
    if (!spans || !tied) {
        free(spans);
        free(tied);
        ds_flat_destroy(f);
        return DS_ERR(DS_ERR_OOM, "memory estimate: out of host memory");
    }
    for (int m = 0; m < f->n_modules; m++) spans[m] = f->modules[m].end - f->modules[m].begin;
    for (int j = 0; j < f->n_tied_params; j++) tied[j] = f->params[f->tied_params[j]].numel;
    layout l = {.used = f->used, .padded = f->padded, .part = f->part, .world = world,
                .spans = spans,
                .n_spans = f->n_modules, .tied = tied, .n_tied = f->n_tied_params,
                .held = ds_ties_max_held(f, cfg->stage3_param_persistence_threshold)};
    ds_status st = estimate(&l, cfg, be, out);
    char why[256]; /* sparse_gradients: records on the device, row lists on the host */
    /* stage 3 under MiCS exchanges the rows inside the shard group, then
     * across the replica groups (zero/stage3_groups.h), each with its own
     * buffers */
    bool mics = cfg->zero_stage >= 3 && cfg->mics_shard_size > 0;
    int sw = mics ? (int)cfg->mics_shard_size : world, rw = mics ? world / sw : 1;
    if (st == DS_OK && ds_grad_sparse_applies(cfg, why, sizeof why)) {
        ds_dtype pt = cfg->fp16_enabled ? DS_F16 : cfg->bf16_enabled ? DS_BF16 : DS_F32;
        ds_dtype gt = cfg->comm_dtype_set ? cfg->communication_data_type : pt;
        for (int g = 0; g < 2; g++) { /* the shard group's exchange, then the replicas' */
            int w = g ? rw : sw;
            if (w < 2) continue;
            out->bytes[DS_MEM_BUFFERS][DS_PLACE_HOST] += ds_grad_sparse_bytes(f, gt, w, true);
            out->bytes[DS_MEM_BUFFERS][DS_PLACE_DEVICE] += ds_grad_sparse_bytes(f, gt, w, false);
        }
    }
    /* stages 1-2, and 3 where stage3_rows.c applies: the packing buffer of
     * each table gathered by rows (param_rows.h) */
    bool s3_rows = cfg->zero_stage == 3 && !cfg->zero_quantized_weights && !mics &&
                   cfg->zero_hpz_partition_size <= 1 &&
                   cfg->offload_param.device == DS_OFFLOAD_NONE;
    if (st == DS_OK && (cfg->zero_stage == 1 || cfg->zero_stage == 2 || s3_rows) &&
        be == DS_BACKEND_CPU && cfg->gather_rows) {
        ds_dtype pt = cfg->fp16_enabled ? DS_F16 : cfg->bf16_enabled ? DS_BF16 : DS_F32;
        out->bytes[DS_MEM_BUFFERS][DS_PLACE_DEVICE] += ds_param_rows_bytes(f, pt, world);
    }
    if (st == DS_OK) {
        plan_activations(model, cfg, be, out);
        totals(out);
    }
    free(spans);
    free(tied);
    ds_flat_destroy(f);
    return st;
}

ds_status ds_estimate_params(int64_t params, int64_t largest_layer, int world,
                             const ds_config *cfg, ds_backend_kind be, ds_mem_report *out) {
    memset(out, 0, sizeof *out);
    if (params < 1 || params > DS_ESTIMATE_MAX_PARAMS || world < 1 || largest_layer < 0 ||
        largest_layer > params)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "memory estimate: need 1 <= params <= %lld (2^50), ranks >= 1 and 0 <= "
                      "largest layer <= params, got %lld, %d, %lld",
                      (long long)DS_ESTIMATE_MAX_PARAMS, (long long)params, world,
                      (long long)largest_layer);
    /* one flat range (zero/flat.c pads it to whole blocks of every rank) */
    int64_t used = round_up(params, DS_FLAT_ALIGN);
    int64_t padded = round_up(used, (int64_t)world * DS_FLAT_ALIGN);
    int64_t span = round_up(largest_layer, DS_FLAT_ALIGN);
    /* the modules: as many spans of the largest layer as the parameters
     * hold, up to the most gather slots stage 3 keeps (ds_s3_slot_caps sizes
     * its slots from the largest spans, so more copies change nothing) */
    int64_t spans[DS_S3_MAX_SLOTS];
    int n_spans = 0;
    for (int64_t left = params; largest_layer > 0 && left > 0 && n_spans < DS_S3_MAX_SLOTS;
         left -= largest_layer)
        spans[n_spans++] = span;
    layout l = {.used = used, .padded = padded, .part = padded / world, .world = world,
                .spans = spans, .n_spans = n_spans, .sampled = true};
    DS_TRY(estimate(&l, cfg, be, out));
    return DS_OK;
}

uint64_t ds_estimate_ram(const ds_mem_report *r, ds_backend_kind be) {
    uint64_t sum;
    if (__builtin_add_overflow(r->total[DS_PLACE_HOST],
                               be == DS_BACKEND_CPU ? r->total[DS_PLACE_DEVICE] : 0, &sum))
        return UINT64_MAX;
    return sum;
}

uint64_t ds_estimate_ram_ranks(const ds_mem_report *r, ds_backend_kind be, int ranks) {
    uint64_t b;
    if (__builtin_mul_overflow(ds_estimate_ram(r, be), (uint64_t)(ranks > 0 ? ranks : 0), &b))
        return UINT64_MAX;
    return b;
}

uint64_t ds_estimate_state(const ds_mem_report *r, ds_mem_place place) {
    return r->bytes[DS_MEM_PARAMS][place] + r->bytes[DS_MEM_GRADS][place] +
           r->bytes[DS_MEM_MASTER][place] + r->bytes[DS_MEM_OPTIM][place];
}

const char *ds_estimate_size(uint64_t b, char *buf) {
    double v = (double)b;
    if (v >= 1024.0 * 1024 * 1024) snprintf(buf, 24, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else if (v >= 1024.0 * 1024) snprintf(buf, 24, "%.1f MiB", v / (1024.0 * 1024));
    else if (v >= 1024.0) snprintf(buf, 24, "%.0f KiB", v / 1024.0);
    else snprintf(buf, 24, "%llu bytes", (unsigned long long)b);
    return buf;
}

/* ds_estimate_fix's measure of one candidate config c: *r and the RAM the
 * ranks of one host need under it (*need); false, the error cleared, when
 * the estimate refuses c (then it is not a candidate). */
static bool fix_need(const ds_model *model, int64_t params, int64_t largest_layer, int world,
                     int ranks_per_host, const ds_config *c, ds_backend_kind be,
                     ds_mem_report *r, uint64_t *need) {
    ds_status st = model ? ds_estimate_model(model, world, c, be, r)
                         : ds_estimate_params(params, largest_layer, world, c, be, r);
    if (st != DS_OK) {
        ds_clear_error();
        return false;
    }
    *need = ds_estimate_ram_ranks(r, be, ranks_per_host);
    return true;
}

/* The knobs ds_estimate_fix turns besides the offload places, each where it
 * changes something: smaller NVMe sub-groups (DeepSpeed's default 1e9 keeps
 * up to 12 GB of swap buffers in RAM for Adam, often more than the offload
 * saves), fewer parameters kept in RAM by offload_param nvme (its default
 * max_in_cpu 1e9 keeps the whole partition of most models there), and the
 * two gather slots of stage3_max_live_parameters 0 (nothing moves off the
 * device; the backward gathers again what they do not hold). */
enum { FIX_SG = 1, FIX_MIC = 2, FIX_LIVE = 4, FIX_ALL = 7 };
#define FIX_SMALL_SG 100000000LL
#define FIX_SMALL_MIC 10000000LL

/* Which knobs of `mask` change c (the candidate, offload places set). */
static int fix_knobs(const ds_config *c, int mask) {
    int ok = 0;
    if (c->offload_optimizer.device == DS_OFFLOAD_NVME && c->sub_group_size > FIX_SMALL_SG)
        ok |= FIX_SG;
    if (c->zero_stage == 3 && c->offload_param.device == DS_OFFLOAD_NVME &&
        c->offload_param.max_in_cpu > FIX_SMALL_MIC)
        ok |= FIX_MIC;
    if (c->zero_stage == 3 && c->stage3_max_live_parameters > 0) ok |= FIX_LIVE;
    return (mask & ok) == mask ? mask : -1;
}

/* Appends ", key" or " and key" (the last) to the sentence in buf. */
static void fix_join(char *buf, size_t cap, const char *key, bool first, bool last) {
    size_t n = strlen(buf);
    if (n < cap)
        snprintf(buf + n, cap - n, "%s%s", first ? "" : last ? " and " : ", ", key);
}

bool ds_estimate_fix(const ds_model *model, int64_t params, int64_t largest_layer, int world,
                     int ranks_per_host, const ds_config *cfg, ds_backend_kind be,
                     uint64_t ram_limit, char *buf, size_t cap) {
    static const struct {
        int stage; /* 0: keep the configured stage */
        ds_offload_device opt, param;
        const char *keys;
    } tries[] = {
        {-1, DS_OFFLOAD_NONE, DS_OFFLOAD_NONE, NULL}, /* the config's own places */
        {0, DS_OFFLOAD_CPU, DS_OFFLOAD_NONE, "zero_optimization.offload_optimizer.device \"cpu\""},
        {0, DS_OFFLOAD_NVME, DS_OFFLOAD_NONE,
         "zero_optimization.offload_optimizer.device \"nvme\" (with its nvme_path)"},
        {3, DS_OFFLOAD_CPU, DS_OFFLOAD_CPU,
         "zero_optimization.stage 3 with offload_param.device and offload_optimizer.device "
         "\"cpu\""},
        {3, DS_OFFLOAD_NVME, DS_OFFLOAD_CPU,
         "zero_optimization.stage 3 with offload_param.device \"cpu\" and "
         "offload_optimizer.device \"nvme\""},
        {3, DS_OFFLOAD_NVME, DS_OFFLOAD_NVME,
         "zero_optimization.stage 3 with offload_param.device and offload_optimizer.device "
         "\"nvme\" (with their nvme_path)"},
    };
    /* the knobs from the fewest changes: each alone, then in pairs, then all */
    static const int masks[] = {0, FIX_SG, FIX_MIC, FIX_LIVE, FIX_SG | FIX_MIC,
                                FIX_SG | FIX_LIVE, FIX_MIC | FIX_LIVE, FIX_ALL};
    if (cap) buf[0] = '\0';
    ds_config *c = malloc(sizeof *c);
    if (!c) return false;
    uint64_t least = UINT64_MAX; /* the least any candidate needs, for the refusal */
    bool no_stage3 = false;      /* stage 3 not judged: no largest layer */
    size_t n_tries = sizeof tries / sizeof *tries, n_masks = sizeof masks / sizeof *masks;
    for (size_t k = 0; k < n_tries; k++)
        for (size_t i = 0; i < n_masks; i++) {
            *c = *cfg;
            if (tries[k].stage >= 0) { /* an offload try */
                /* stage 3 from a parameter count needs the largest layer
                 * (its gather slots): without one it would fit on paper */
                if (tries[k].stage == 3 && cfg->zero_stage < 3 && !model && largest_layer <= 0) {
                    no_stage3 = true;
                    goto next;
                }
                if (tries[k].stage) c->zero_stage = tries[k].stage;
                if (c->zero_stage == 0) c->zero_stage = 1; /* offload needs a partitioned optimizer */
                if (c->offload_optimizer.device > tries[k].opt ||
                    (c->zero_stage == 3 && c->offload_param.device > tries[k].param))
                    goto next; /* not more offload than the config already has */
                if (c->zero_stage == cfg->zero_stage &&
                    c->offload_optimizer.device == tries[k].opt &&
                    (c->zero_stage < 3 || c->offload_param.device == tries[k].param))
                    goto next; /* the config's own places: the first try's */
                c->offload_optimizer.device = tries[k].opt;
                c->offload_param.device = tries[k].param;
                if (c->offload_optimizer.ratio < 1.0) c->offload_optimizer.ratio = 1.0;
            } else if (masks[i] == 0) {
                goto next; /* the config itself, which does not fit */
            }
            int knobs = fix_knobs(c, masks[i]);
            if (knobs < 0) goto next;
            if (knobs & FIX_SG) c->sub_group_size = FIX_SMALL_SG;
            if (knobs & FIX_MIC) c->offload_param.max_in_cpu = FIX_SMALL_MIC;
            if (knobs & FIX_LIVE) c->stage3_max_live_parameters = 0;
            ds_mem_report r;
            uint64_t need;
            if (!fix_need(model, params, largest_layer, world, ranks_per_host, c, be, &r, &need))
                goto next;
            if (need < least) least = need;
            if (need > ram_limit) goto next;
            /* one sentence naming every key that changes */
            const char *parts[5];
            int np = 0;
            char stage[96];
            if (tries[k].keys && c->zero_stage != cfg->zero_stage && !tries[k].stage) {
                snprintf(stage, sizeof stage, "zero_optimization.stage 1 with %s", tries[k].keys);
                parts[np++] = stage;
            } else if (tries[k].keys) {
                parts[np++] = tries[k].keys;
            }
            if (knobs & FIX_SG) parts[np++] = "zero_optimization.sub_group_size 1e8";
            if (knobs & FIX_MIC) parts[np++] = "zero_optimization.offload_param.max_in_cpu 1e7";
            if (knobs & FIX_LIVE) { /* alone, it says what it costs */
                const char *live = np == 0 ? "zero_optimization.stage3_max_live_parameters 0 "
                                             "(two gather slots, the fewest; the backward "
                                             "gathers again what they do not hold)"
                                           : "zero_optimization.stage3_max_live_parameters 0";
                parts[np++] = live;
            }
            for (int j = 0; j < np; j++) fix_join(buf, cap, parts[j], j == 0, j == np - 1);
            char n1[24], n2[24];
            size_t len = strlen(buf);
            uint64_t disk = r.total[DS_PLACE_NVME];
            if (len < cap)
                snprintf(buf + len, cap - len, " would fit: %s of RAM for the rank%s on this host%s%s%s",
                         ds_estimate_size(need, n1), ranks_per_host == 1 ? "" : "s",
                         disk ? ", " : "", disk ? ds_estimate_size(disk, n2) : "",
                         disk ? " per rank on disk" : "");
            free(c);
            return true;
        next:;
        }
    char n3[24];
    const char *s3 = no_stage3 ? "; stage 3 is not judged without the largest layer's "
                                 "parameters (zero_estimate --largest-layer)"
                               : "";
    if (least == UINT64_MAX)
        snprintf(buf, cap, "no offload setting makes it fit (none could be estimated): use more "
                 "hosts or a smaller model%s", s3);
    else
        snprintf(buf, cap, "no offload setting makes it fit (the least of them, with the "
                 "fewest buffers, still needs %s of RAM on this host): use more hosts or a "
                 "smaller model%s",
                 ds_estimate_size(least, n3), s3);
    free(c);
    return false;
}
