/* ds_save_checkpoint / ds_load_checkpoint: the engine's training state to and
 * from a checkpoint folder (formats in engine/io/ckpt_*.h; protocol in
 * engine.h). Memory: one frame of fp32 per rank in either direction. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine_internal.h"
#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_file.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/ckpt_shared.h"
#include "engine/io/fault.h"
#include "zero/optim.h"

#define PATH_CAP 4096

/* ------------------------------------------------------------------ shared */

/* All ranks learn whether any rank failed, and all report the same failure:
 * the lowest rank with the worst status, in its words ("rank 1 failed with
 * DS_ERR_IO: ...", ds_comm_agree_one). A full disk or a damaged file is one
 * cause, so the user reads one line, not one per rank. A failing rank keeps
 * its own status. Collective. */
ds_status ds_engine_ckpt_agree(engine_t *e, ds_status local) {
    ds_status worst;
    DS_TRY(ds_comm_agree_one(e->comm, local, &worst));
    return local != DS_OK ? local : worst;
}

static ds_status agree(engine_t *e, ds_status local) { return ds_engine_ckpt_agree(e, local); }

/* Every rank names the same checkpoint: rank 0's tag crosses to the others,
 * and one that resolved another (a tag built from the rank, a `latest` that
 * differs between hosts' copies of the folder) fails every rank with both
 * named, before anything is written or loaded. */
static ds_status agree_tag(engine_t *e, const char *tag, const char *what) {
    if (e->comm->world == 1) return DS_OK;
    char rank0[DS_CKPT_TAG_MAX + 1];
    snprintf(rank0, sizeof rank0, "%s", tag);
    DS_TRY(ds_comm_host_broadcast(e->comm, rank0, sizeof rank0, 0));
    ds_status mine = DS_OK;
    if (strcmp(rank0, tag) != 0)
        mine = DS_ERR(DS_ERR_INVALID_ARG, "%s: rank %d names checkpoint \"%s\", rank 0 \"%s\" "
                      "(every rank must name the same tag%s)", what, e->comm->rank, tag, rank0,
                      strcmp(what, "ds_load_checkpoint") == 0
                          ? "; without one each reads DIR/latest: its copies differ" : "");
    return agree(e, mine);
}

/* The parts a save writes, one file each: the state's partitions
 * (ds_zero.state_parts: the world's, or under MiCS its shard group's, which
 * the other groups replicate), each written by the rank that holds it in
 * the first group. The checkpoint then reads like one saved by that many
 * ranks, so any world size loads it. */
static int64_t part_elems(const engine_t *e) {
    return e->flat->padded / e->zero->state_parts;
}
static bool writes_part(const engine_t *e) {
    return e->zero->stage == 0 ? true : e->comm->rank < e->zero->state_parts;
}

/* The range of the flat space whose optimizer state this rank holds: its
 * partition, or everything at stage 0 (replicated state). */
static void owned_range(const engine_t *e, int64_t *lo, int64_t *hi) {
    bool all = e->zero->stage == 0;
    *lo = all ? 0 : (int64_t)e->zero->state_part * part_elems(e);
    *hi = all ? e->flat->padded : *lo + part_elems(e);
}

static uint32_t env_u32(const char *name, uint32_t def, uint32_t lo, uint32_t hi, ds_status *st) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || x < lo || x > hi) {
        *st = DS_ERR(DS_ERR_INVALID_ARG, "%s=%s: must be an integer in %u..%u", name, v, lo, hi);
        return def;
    }
    return (uint32_t)x;
}

/* NaN or inf in the state (flat elements [lo, lo + n) of section `section`
 * in buf): an error naming the section, the tensor and the element. A
 * checkpoint holding them could only train non-finite steps: a save refuses
 * to write one (so `latest` keeps naming the last good checkpoint) and a
 * load refuses to restore one. `doing` says which ("saving global_step7"). */
static ds_status check_finite(const engine_t *e, const float *buf, int64_t lo, size_t n,
                              uint32_t section, const char *doing) {
    size_t k = 0;
    while (k < n && isfinite(buf[k])) k++;
    if (k == n) return DS_OK;
    int64_t x = lo + (int64_t)k;
    const ds_flat *f = e->flat;
    const char *name = "(padding between tensors)";
    int64_t at = x, numel = 0;
    for (int i = 0; i < f->n_params; i++)
        if (x >= f->params[i].offset && x < f->params[i].offset + f->params[i].numel) {
            name = f->params[i].desc->name;
            at = x - f->params[i].offset;
            numel = f->params[i].numel;
        }
    return DS_ERR(DS_ERR_NONFINITE, "%s: %s of %s: element %lld of %lld is %s (non-finite values "
                  "refused; a run with them cannot learn)", doing, ds_ckpt_section_name(section),
                  name, (long long)at, (long long)numel, isnan(buf[k]) ? "nan" : "inf");
}

/* ------------------------------------------------------------------ save */

/* This rank's own state (1-bit Adam's error feedback) as the shard's
 * DS_CKPT_RANK_STATE section: at stage 0 every rank writes a shard, so each
 * keeps its own, covered by the file's checksums like the rest. */
static ds_status write_rank_state(engine_t *e, ds_ckpt_writer *w) {
    if (!e->zero->ops->rank_state_len) return DS_OK;
    size_t n = e->zero->ops->rank_state_len(e->zero);
    if (!n) return DS_OK;
    float *v = malloc(n * sizeof(float));
    if (!v) return DS_ERR(DS_ERR_OOM, "saving the rank's own optimizer state: out of host memory");
    ds_status st = e->zero->ops->rank_state_io(e->zero, v, false);
    if (st == DS_OK) st = ds_ckpt_writer_begin(w, DS_CKPT_RANK_STATE, 0, (int64_t)n);
    if (st == DS_OK) st = ds_ckpt_writer_append(w, v, n);
    if (st == DS_OK) st = ds_ckpt_writer_end(w);
    free(v);
    return st;
}

static ds_status write_shard(engine_t *e, const char *tmpdir, int moments,
                             const ds_ckpt_write_opts *wo, ds_ckpt_file_info *info) {
    int rank = e->comm->rank, world = e->zero->state_parts;
    char name[64], path[PATH_CAP + 80];
    ds_ckpt_shard_name(rank, world, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    int64_t lo = (int64_t)rank * part_elems(e), hi = lo + part_elems(e);
    ds_ckpt_header h = {.rank = (uint32_t)rank, .world = (uint32_t)world, .lo = lo, .hi = hi};
    DS_TRY(ds_fault_error("ckpt:write_shard", rank));
    float *buf = malloc((size_t)wo->frame_elems * sizeof(float));
    if (!buf) return DS_ERR(DS_ERR_OOM, "saving %s: out of host memory", path);
    ds_ckpt_writer *w = NULL;
    ds_status st = ds_ckpt_writer_open(path, &h, wo, &w);
    for (int k = 0; st == DS_OK && k <= moments; k++) {
        st = ds_ckpt_writer_begin(w, (uint32_t)k, lo, hi);
        for (int64_t c = lo; st == DS_OK && c < hi; c += wo->frame_elems) {
            int64_t end = c + wo->frame_elems < hi ? c + wo->frame_elems : hi;
            st = e->zero->ops->state_io(e->zero, (ds_zero_state)k, c, end, buf, false);
            if (st == DS_OK) st = check_finite(e, buf, c, (size_t)(end - c), (uint32_t)k, path);
            if (st == DS_OK) st = ds_ckpt_writer_append(w, buf, (size_t)(end - c));
        }
        if (st == DS_OK) st = ds_ckpt_writer_end(w);
        /* a file cut short: weights written, moments not */
        if (st == DS_OK && k == 0) ds_fault_point("ckpt:mid_shard_write", rank);
    }
    if (st == DS_OK) st = write_rank_state(e, w);
    free(buf);
    /* a full disk says how full, and how much this file holds */
    char need[96];
    snprintf(need, sizeof need, "the shard holds %llu bytes before compression",
             (unsigned long long)(hi - lo) * sizeof(float) * (unsigned long long)(moments + 1));
    if (st != DS_OK) {
        ds_ckpt_note_space(path, need);
        ds_error_trace(__FILE__, __LINE__);
        ds_ckpt_writer_abort(w);
        return st;
    }
    st = ds_ckpt_writer_finish(w, info); /* the file's bytes: fsynced */
    if (st != DS_OK) {
        ds_ckpt_note_space(path, need);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* Its entry in TAG.tmp: each rank syncs the entry it made (on a shared
     * file system a client's metadata is its own to flush). Rank 0 need
     * not: it syncs TAG.tmp after writing meta.json there, before the rename
     * that publishes the folder (tests/fault/fsync_order.c checks that every
     * fsync of a save is needed and none is missing). */
    if (rank != 0) DS_TRY(ds_ckpt_fsync_dir(tmpdir));
    ds_fault_point("ckpt:after_shard_write", rank);
    return DS_OK;
}

static const char *precision_name(const engine_t *e) {
    return e->cfg.fp16_enabled ? "fp16" : e->cfg.bf16_enabled ? "bf16" : "fp32";
}

/* Everything but the shard entries. */
static ds_status fill_meta(engine_t *e, const char *tag, const char *client, int moments,
                           uint32_t frame_elems, ds_ckpt_meta *m) {
    const ds_flat *f = e->flat;
    memset(m, 0, sizeof *m);
    m->format_version = DS_CKPT_FORMAT_VERSION;
    snprintf(m->tag, sizeof m->tag, "%s", tag);
    snprintf(m->engine_version, sizeof m->engine_version, "%d.%d.%d", DS_VERSION_MAJOR,
             DS_VERSION_MINOR, DS_VERSION_PATCH);
    /* The config as this run resolved it. A load with DS_LOAD_NO_SCHEDULER
     * may have moved the schedule origin below -1 (see restore_progress),
     * which a config file may not hold; the position itself is in
     * "scheduler". */
    ds_config cfg = e->cfg;
    if (cfg.last_batch_iteration < -1) cfg.last_batch_iteration = -1;
    m->config_json = ds_config_to_json(&cfg);
    m->params = calloc((size_t)f->n_params, sizeof *m->params);
    m->shards = calloc((size_t)e->zero->state_parts, sizeof *m->shards);
    if (client) m->client_state_json = strdup(client);
    if (!m->config_json || !m->params || !m->shards || (client && !m->client_state_json))
        return DS_ERR(DS_ERR_OOM, "saving checkpoint %s: out of host memory", tag);
    m->world = e->zero->state_parts; /* the files' layout: MiCS writes fewer */
    m->stage = e->zero->stage;
    snprintf(m->precision, sizeof m->precision, "%s", precision_name(e));
    snprintf(m->optimizer, sizeof m->optimizer, "%s", ds_optim_type_name(e->cfg.optimizer));
    m->moments = moments;
    m->numel = f->numel;
    m->used = f->used;
    m->padded = f->padded;
    m->part = part_elems(e);
    m->align = DS_FLAT_ALIGN;
    m->frame_elems = frame_elems;
    m->n_params = f->n_params;
    for (int i = 0; i < f->n_params; i++) {
        const ds_param_desc *d = f->params[i].desc;
        ds_ckpt_param_entry *p = &m->params[i];
        snprintf(p->name, sizeof p->name, "%s", d->name);
        p->ndim = d->ndim;
        memcpy(p->shape, d->shape, sizeof(int64_t) * (size_t)d->ndim);
        p->offset = f->params[i].offset;
        p->numel = f->params[i].numel;
    }
    m->global_step = e->global_step;
    m->applied_steps = e->applied_steps;
    m->skipped_steps = e->skipped_steps;
    m->micro_steps = e->micro_steps;
    m->samples = e->samples;
    m->gradient_accumulation_steps = e->cfg.gradient_accumulation_steps;
    m->micro_batch = e->cfg.train_micro_batch_size_per_gpu;
    snprintf(m->scheduler, sizeof m->scheduler, "%s", ds_sched_type_name(e->cfg.scheduler));
    m->sched_iteration = e->cfg.last_batch_iteration + e->applied_steps;
    m->scaler_enabled = e->scaler.enabled;
    m->loss_scale = e->scaler.scale;
    m->cur_hysteresis = e->scaler.cur_hysteresis;
    m->scaler_cur_iter = e->scaler.cur_iter;
    m->scaler_last_overflow_iter = e->scaler.last_overflow_iter;
    m->seed = e->seed;
    m->has_loader = e->train != NULL;
    m->epoch = e->epoch;
    m->epoch_samples = (int64_t)e->cursor * e->comm->world;
    m->dataset_size = e->train ? (int64_t)e->train->n : -1;
    m->last_loss = e->last.loss;
    m->last_lr = e->last.lr;
    m->last_grad_norm = e->last.grad_norm;
    m->last_skipped = e->last.skipped;
    return DS_OK;
}

/* Rank 0, once every shard file is durable: meta.json, rename, latest. */
static ds_status commit(engine_t *e, const char *dir, const char *tag, const char *tmpdir,
                        const char *client, int moments, uint32_t frame_elems,
                        const int64_t *table) {
    ds_fault_point("ckpt:before_meta", 0);
    /* every rank has read the marker by now (the shards are written) */
    if (e->comm->world > 1) DS_TRY(ds_ckpt_marker_remove(dir));
    ds_ckpt_meta m;
    ds_status st = fill_meta(e, tag, client, moments, frame_elems, &m);
    for (int r = 0; st == DS_OK && r < m.world; r++) {
        ds_ckpt_shard_entry *s = &m.shards[r];
        ds_ckpt_shard_name(r, m.world, s->file, sizeof s->file);
        s->rank = r;
        s->lo = (int64_t)r * m.part;
        s->hi = s->lo + m.part;
        s->bytes = (uint64_t)table[2 * r];
        s->index_hash = (uint64_t)table[2 * r + 1];
    }
    char path[PATH_CAP + 32];
    snprintf(path, sizeof path, "%s/%s", tmpdir, DS_CKPT_META_FILE);
    if (st == DS_OK) st = ds_fault_error("ckpt:write_meta", 0);
    if (st == DS_OK) st = ds_ckpt_meta_write(path, &m);
    ds_ckpt_meta_free(&m);
    if (st != DS_OK) ds_ckpt_note_space(path, NULL);
    DS_TRY(st);
    ds_fault_point("ckpt:after_meta", 0);
    DS_TRY(ds_ckpt_commit_dir(dir, tag));
    ds_fault_point("ckpt:after_rename", 0);
    /* TAG is complete from here on; a failure to point latest at it leaves
     * latest naming the previous checkpoint */
    st = ds_ckpt_write_latest(dir, tag);
    if (st != DS_OK) ds_ckpt_note_space(dir, NULL);
    DS_TRY(st);
    ds_fault_point("ckpt:after_latest", 0);
    return DS_OK;
}

static ds_status save_args(engine_t *e, const char *dir, const char *tag_in, const char *client,
                           char *tag, ds_ckpt_write_opts *wo) {
    if (!dir || !*dir) return DS_ERR(DS_ERR_INVALID_ARG, "ds_save_checkpoint: no folder given");
    if (strlen(dir) > PATH_CAP - DS_CKPT_TAG_MAX - 80)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_save_checkpoint: folder path too long: %s", dir);
    if (tag_in) {
        DS_TRY(ds_ckpt_check_tag(tag_in));
        snprintf(tag, DS_CKPT_TAG_MAX + 1, "%s", tag_in);
    } else {
        ds_checkpoint_tag(e, tag, DS_CKPT_TAG_MAX + 1);
    }
    if (client) DS_TRY(ds_ckpt_json_check(client, "ds_save_checkpoint: client_state_json"));
    if (e->have_forward || e->have_backward || e->micro_in_step != 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_save_checkpoint: called inside a step (%s, micro-batch %d of %lld "
                      "accumulated); save after the ds_step that completes the step",
                      e->have_forward    ? "a forward awaits its backward"
                      : e->have_backward ? "a backward awaits its ds_step"
                                         : "gradients pending",
                      e->micro_in_step, (long long)ds_engine_window(e));
    ds_status st = DS_OK;
    ds_ckpt_write_opts_defaults(wo);
    wo->frame_elems = env_u32("DS_CKPT_FRAME_ELEMS", wo->frame_elems, DS_CKPT_FRAME_ELEMS_MIN,
                              DS_CKPT_FRAME_ELEMS_MAX, &st);
    wo->level = (int)env_u32("DS_CKPT_ZSTD_LEVEL", (uint32_t)wo->level, 1, 19, &st);
    return st;
}

/* Rank 0 after a failed save: remove TAG.tmp so a full disk gets its space
 * back (nothing when the failure came after the rename: TAG is then
 * complete), and the shared-folder marker. The save's own error stays the
 * one reported. */
static void discard_tmp(const engine_t *e, const char *dir, const char *tmpdir) {
    if (e->comm->rank != 0) return;
    ds_error_saved keep;
    ds_error_save(&keep);
    if (ds_ckpt_remove_flat_dir(tmpdir) != DS_OK)
        fprintf(stderr, "[zero-engine] warning: after the failed save, %s\n", ds_last_error());
    if (e->comm->world > 1 && ds_ckpt_marker_remove(dir) != DS_OK)
        fprintf(stderr, "[zero-engine] warning: after the failed save, %s\n", ds_last_error());
    ds_error_restore(&keep);
}

static ds_status save(engine_t *e, const char *dir, const char *tag_in,
                     const char *client_state_json);

/* A signal during a save is reported as such (ds_preempt_get). */
ds_status ds_save_checkpoint(engine_t *e, const char *dir, const char *tag_in,
                             const char *client_state_json) {
    int gas = (int)e->cfg.gradient_accumulation_steps;
    /* a state that may differ between ranks would become the latest */
    DS_TRY(ds_engine_usable(e, "ds_save_checkpoint"));
    ds_preempt_note(DS_PREEMPT_IN_SAVE, 0, gas);
    ds_status st = save(e, dir, tag_in, client_state_json);
    ds_preempt_note(DS_PREEMPT_BETWEEN_STEPS, 0, gas);
    return st;
}

static ds_status save(engine_t *e, const char *dir, const char *tag_in,
                     const char *client_state_json) {
    int rank = e->comm->rank, world = e->comm->world;
    char tag[DS_CKPT_TAG_MAX + 1], tmpdir[PATH_CAP];
    ds_ckpt_write_opts wo;
    /* Every rank checks its arguments (the environment's frame size, its
     * client state), and all agree before any of them writes. */
    DS_TRY(agree(e, save_args(e, dir, tag_in, client_state_json, tag, &wo)));
    DS_TRY(agree_tag(e, tag, "ds_save_checkpoint"));
    snprintf(tmpdir, sizeof tmpdir, "%s/%s.tmp", dir, tag);
    int moments = ds_optim_state_count(&e->cfg);

    /* 1. rank 0 makes an empty TAG.tmp (a crash may have left one). Its
     * entry in DIR needs no sync: what makes the checkpoint durable is the
     * rename to TAG and the sync of DIR after it. */
    ds_status st = DS_OK;
    ds_ckpt_marker marker = {{0}};
    if (rank == 0) {
        /* one job writes into DIR (held until the process ends) */
        st = ds_ckpt_lock_dir(dir);
        if (st == DS_OK) st = ds_ckpt_remove_flat_dir(tmpdir);
        if (st == DS_OK && mkdir(tmpdir, 0755) != 0) {
            st = DS_ERR(DS_ERR_IO, "%s: cannot create folder: %s", tmpdir, strerror(errno));
            ds_ckpt_note_space(dir, NULL);
        }
        /* what every other rank reads back before it writes (ckpt_shared.h) */
        if (st == DS_OK && world > 1) {
            st = ds_ckpt_marker_write(dir, &marker);
            if (st != DS_OK) {
                ds_ckpt_note_space(dir, NULL);
                discard_tmp(e, dir, tmpdir);
            }
        }
    }
    DS_TRY(agree(e, st));

    /* 2. every rank checks that it sees the folder rank 0 writes (a local
     * disk on each host would fail below with a bare "No such file"), then
     * writes and syncs its shard file. */
    if (world > 1) {
        DS_TRY(ds_comm_host_broadcast(e->comm, &marker, sizeof marker, 0));
        if (rank != 0) st = ds_ckpt_marker_check(dir, &marker, rank);
    }
    ds_ckpt_file_info info = {0};
    if (st == DS_OK && writes_part(e)) st = write_shard(e, tmpdir, moments, &wo, &info);
    /* 3. the barrier: nobody commits before every file is durable. */
    st = agree(e, st);
    if (st != DS_OK) {
        discard_tmp(e, dir, tmpdir);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    int64_t *table = calloc((size_t)world * 2, sizeof *table);
    if (!table) st = DS_ERR(DS_ERR_OOM, "ds_save_checkpoint: out of host memory");
    st = agree(e, st);
    if (st != DS_OK) {
        free(table);
        discard_tmp(e, dir, tmpdir);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* each rank fills its row, a sum assembles the table everywhere */
    table[2 * rank] = (int64_t)info.file_bytes;
    table[2 * rank + 1] = (int64_t)info.index_hash;
    st = ds_comm_host_all_reduce(e->comm, table, (size_t)world * 2, DS_I64, DS_REDUCE_SUM);
    if (st != DS_OK) {
        free(table);
        discard_tmp(e, dir, tmpdir);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* 4. rank 0 commits; everybody returns its outcome. */
    if (rank == 0)
        st = commit(e, dir, tag, tmpdir, client_state_json, moments, wo.frame_elems, table);
    free(table);
    st = agree(e, st);
    if (st != DS_OK) {
        discard_tmp(e, dir, tmpdir);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    if (rank == 0 && !e->quiet)
        fprintf(stderr, "[zero-engine] step %lld: saved checkpoint %s/%s (%d shard files)\n",
                (long long)e->global_step, dir, tag, e->zero->state_parts);
    return DS_OK;
}

/* ------------------------------------------------------------------ load */

/* The old shard files as this rank reads them: opened on demand; only one
 * holds frame buffers at a time (ranges are walked in increasing order). */
typedef struct old_files {
    const ds_ckpt_meta *m;
    const char *tag_dir;
    ds_ckpt_reader **rd;
    int active;
} old_files;

static ds_status old_reader(old_files *o, int k, ds_ckpt_reader **out) {
    if (o->active >= 0 && o->active != k) ds_ckpt_reader_drop_buffers(o->rd[o->active]);
    o->active = k;
    if (!o->rd[k]) {
        char path[PATH_CAP + 80];
        snprintf(path, sizeof path, "%s/%s", o->tag_dir, o->m->shards[k].file);
        DS_TRY(ds_ckpt_reader_open(path, &o->rd[k]));
    }
    *out = o->rd[k];
    return DS_OK;
}

static void old_close(old_files *o) {
    for (int k = 0; o->rd && k < o->m->world; k++) ds_ckpt_reader_close(o->rd[k]);
    free(o->rd);
}

/* Visit the old files' pieces of [lo, hi) of section `id`: verify them
 * (dst NULL) or read them into dst (elements at dst[x - lo]). Elements past
 * the old padded size (a larger world pads more) read as zeros. */
static ds_status old_range(old_files *o, uint32_t id, int64_t lo, int64_t hi, float *dst) {
    const ds_ckpt_meta *m = o->m;
    int64_t stored_end = hi < m->padded ? hi : m->padded;
    for (int64_t x = lo; x < stored_end;) {
        int k = (int)(x / m->part);
        int64_t end = (int64_t)(k + 1) * m->part < stored_end ? (int64_t)(k + 1) * m->part
                                                              : stored_end;
        ds_ckpt_reader *r;
        DS_TRY(old_reader(o, k, &r));
        if (dst) DS_TRY(ds_ckpt_read(r, id, x, end, dst + (x - lo)));
        else DS_TRY(ds_ckpt_verify_range(r, id, x, end));
        x = end;
    }
    if (dst && hi > stored_end) {
        int64_t from = stored_end > lo ? stored_end : lo;
        memset(dst + (from - lo), 0, (size_t)(hi - from) * sizeof(float));
    }
    return DS_OK;
}

/* Which sections this load reads. */
static int load_sections(const engine_t *e, unsigned flags) {
    if (flags & (DS_LOAD_MODULE_ONLY | DS_LOAD_NO_OPTIMIZER)) return 1;
    return 1 + ds_optim_state_count(&e->cfg);
}

/* "[3, 4]" */
static void shape_text(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < ndim && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Checks that need nothing but meta.json and this engine. */
static ds_status compatible(const engine_t *e, const ds_ckpt_meta *m, unsigned flags,
                            const char *tag_dir) {
    const ds_flat *f = e->flat;
    if (m->n_params != f->n_params)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: checkpoint of a model with %d parameter tensors, "
                      "this model has %d", tag_dir, m->n_params, f->n_params);
    for (int i = 0; i < f->n_params; i++) {
        const ds_ckpt_param_entry *p = &m->params[i];
        const ds_param_desc *d = f->params[i].desc;
        bool same_shape = p->ndim == d->ndim;
        for (int k = 0; same_shape && k < d->ndim; k++) same_shape = p->shape[k] == d->shape[k];
        /* the first field that differs, with both values */
        if (strcmp(p->name, d->name) != 0)
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: parameter %d is named %s in the checkpoint, "
                          "%s in this model", tag_dir, i, p->name, d->name);
        if (!same_shape) {
            char a[128], b[128];
            shape_text(p->shape, p->ndim, a, sizeof a);
            shape_text(d->shape, d->ndim, b, sizeof b);
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: parameter %s has shape %s in the checkpoint, "
                          "%s in this model", tag_dir, d->name, a, b);
        }
        if (p->numel != f->params[i].numel || p->offset != f->params[i].offset)
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: parameter %s is %lld elements at flat offset "
                          "%lld in the checkpoint, %lld at %lld in this model", tag_dir, d->name,
                          (long long)p->numel, (long long)p->offset,
                          (long long)f->params[i].numel, (long long)f->params[i].offset);
    }
    if (m->used != f->used)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: flat space of %lld elements, this model's %lld",
                      tag_dir, (long long)m->used, (long long)f->used);
    int want = ds_optim_state_count(&e->cfg);
    if (load_sections(e, flags) > 1 && m->moments != want)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: the checkpoint's %s kept %d optimizer moment(s), "
                      "this engine's %s keeps %d; load with DS_LOAD_NO_OPTIMIZER to start the "
                      "optimizer afresh", tag_dir, m->optimizer, m->moments,
                      ds_optim_type_name(e->cfg.optimizer), want);
    return DS_OK;
}

/* Phase 1 on this rank: everything that can fail, before anything changes. */
static ds_status check_local(engine_t *e, const char *tag_dir, unsigned flags, ds_ckpt_meta *m) {
    int64_t lo, hi;
    owned_range(e, &lo, &hi);
    DS_TRY(ds_ckpt_check_dir_range(tag_dir, lo, hi, m));
    DS_TRY(compatible(e, m, flags, tag_dir));
    old_files o = {.m = m, .tag_dir = tag_dir, .active = -1};
    o.rd = calloc((size_t)m->world, sizeof *o.rd);
    if (!o.rd) return DS_ERR(DS_ERR_OOM, "loading %s: out of host memory", tag_dir);
    ds_status st = DS_OK;
    int n = load_sections(e, flags);
    for (int k = 0; st == DS_OK && k < n; k++) st = old_range(&o, (uint32_t)k, lo, hi, NULL);
    old_close(&o);
    DS_TRY(st);
    return DS_OK;
}

/* Phase 2: the states this rank owns, frame by frame. */
static ds_status load_states(engine_t *e, const char *tag_dir, unsigned flags,
                             const ds_ckpt_meta *m) {
    old_files o = {.m = m, .tag_dir = tag_dir, .active = -1};
    size_t chunk = m->frame_elems;
    o.rd = calloc((size_t)m->world, sizeof *o.rd);
    float *buf = malloc(chunk * sizeof(float));
    ds_status st = DS_OK;
    if (!o.rd || !buf) st = DS_ERR(DS_ERR_OOM, "loading %s: out of host memory", tag_dir);
    int64_t lo, hi;
    owned_range(e, &lo, &hi);
    int n = load_sections(e, flags);
    for (int k = 0; st == DS_OK && k < n; k++) {
        for (int64_t c = lo; st == DS_OK && c < hi; c += (int64_t)chunk) {
            int64_t end = c + (int64_t)chunk < hi ? c + (int64_t)chunk : hi;
            st = old_range(&o, (uint32_t)k, c, end, buf);
            if (st == DS_OK) st = check_finite(e, buf, c, (size_t)(end - c), (uint32_t)k, tag_dir);
            if (st == DS_OK) st = e->zero->ops->state_io(e->zero, (ds_zero_state)k, c, end, buf,
                                                        true);
        }
    }
    free(buf);
    old_close(&o);
    DS_TRY(st);
    return DS_OK;
}

/* This rank's own state, from its own shard: only at the world size that
 * saved it (the error feedback of rank r belongs to rank r's data and to
 * the chunking of that world). Otherwise, or when the checkpoint has none
 * (saved by another optimizer), it starts afresh, as DeepSpeed's always
 * does: *out NULL. Read in phase 1, so that its frames are verified before
 * the load changes anything; applied in phase 2. */
static ds_status read_rank_state(engine_t *e, const char *tag_dir, unsigned flags,
                                 const ds_ckpt_meta *m, float **out) {
    *out = NULL;
    if (!e->zero->ops->rank_state_len || (flags & (DS_LOAD_MODULE_ONLY | DS_LOAD_NO_OPTIMIZER)))
        return DS_OK;
    size_t n = e->zero->ops->rank_state_len(e->zero);
    if (!n) return DS_OK;
    if (m->world != e->comm->world) {
        if (e->comm->rank == 0 && !e->quiet)
            fprintf(stderr, "[zero-engine] %s: saved by %d rank(s), loaded by %d: the 1-bit "
                    "error feedback starts from zero\n", tag_dir, m->world, e->comm->world);
        return DS_OK;
    }
    char path[PATH_CAP + 80];
    snprintf(path, sizeof path, "%s/%s", tag_dir, m->shards[e->comm->rank].file);
    ds_ckpt_reader *r = NULL;
    DS_TRY(ds_ckpt_reader_open(path, &r));
    int64_t lo = 0, hi = 0;
    ds_status st = DS_OK;
    bool have = ds_ckpt_reader_section(r, DS_CKPT_RANK_STATE, &lo, &hi);
    if (have && hi != (int64_t)n && e->comm->rank == 0 && !e->quiet) /* said, not silent */
        fprintf(stderr, "[zero-engine] %s: the per-rank optimizer state holds %lld values, this "
                "engine's %zu (another optimizer, or saved before the 0/1 Adam state kept its "
                "phase): it starts afresh\n", tag_dir, (long long)hi, n);
    if (have && hi == (int64_t)n) {
        float *v = malloc(n * sizeof(float));
        if (!v) st = DS_ERR(DS_ERR_OOM, "loading %s: out of host memory", path);
        if (st == DS_OK) st = ds_ckpt_read(r, DS_CKPT_RANK_STATE, 0, hi, v);
        /* the same answer on every rank: the phase is the same on all */
        if (st == DS_OK && e->zero->ops->rank_state_fits &&
            !e->zero->ops->rank_state_fits(e->zero, v, m->applied_steps)) {
            if (e->comm->rank == 0 && !e->quiet)
                fprintf(stderr, "[zero-engine] %s: saved in the other phase than this config's "
                        "freeze_step / var_freeze_step gives at step %lld (compressed or not): "
                        "the 1-bit error feedback and local steps start afresh\n", tag_dir,
                        (long long)m->applied_steps);
            free(v);
            v = NULL;
        }
        if (st == DS_OK) *out = v;
        else free(v);
    }
    ds_ckpt_reader_close(r);
    DS_TRY(st);
    return DS_OK;
}

/* Data loader: continue at the same global sample of the same epoch. */
static ds_status restore_loader(engine_t *e, const ds_ckpt_meta *m) {
    e->epoch = m->has_loader ? m->epoch : 0;
    e->cursor = 0;
    if (!e->train) return DS_OK;
    int world = e->comm->world;
    if (e->sampler.seed != e->seed) { /* the saved seed drives the shuffling */
        ds_sampler_free(&e->sampler);
        DS_TRY(ds_sampler_init(&e->sampler, e->train->n, world, e->comm->rank, e->seed, true,
                               false, true)); /* as ds_initialize's */
    }
    DS_TRY(ds_sampler_set_epoch(&e->sampler, e->epoch));
    if (!m->has_loader) return DS_OK;
    bool loud = e->comm->rank == 0 && !e->quiet;
    if (m->dataset_size != (int64_t)e->train->n) {
        if (loud)
            fprintf(stderr, "[zero-engine] warning: the checkpoint was trained on %lld rows, this "
                    "engine has %zu: epoch %lld restarts at its first sample\n",
                    (long long)m->dataset_size, e->train->n, (long long)m->epoch);
        return DS_OK;
    }
    /* Rank r's cursor c has consumed entries [0, c * world) of the epoch's
     * (extended) permutation, so the same global position P continues with
     * cursor P / world at any world size. */
    int64_t p = m->epoch_samples;
    if (p >= (int64_t)e->train->n) { /* the epoch was consumed (padding included) */
        e->cursor = ds_engine_epoch_rows(e);
        return DS_OK;
    }
    if (p % world != 0 && loud)
        fprintf(stderr, "[zero-engine] warning: %lld samples into epoch %lld do not split over %d "
                "ranks; continuing at sample %lld (%lld samples seen again)\n", (long long)p,
                (long long)m->epoch, world, (long long)(p / world * world),
                (long long)(p % world));
    size_t c = (size_t)(p / world);
    size_t rows = ds_engine_epoch_rows(e);
    e->cursor = c < rows ? c : rows;
    return DS_OK;
}

/* Counters, schedule, loss scaler, RNG and data position, as flags say. */
static ds_status restore_progress(engine_t *e, const ds_ckpt_meta *m, unsigned flags) {
    /* The lr of the next step is ds_sched_lr at last_batch_iteration +
     * applied_steps (DeepSpeed's scheduler position); keep that sum as the
     * flags say while Adam's step count changes underneath. */
    int64_t position = e->cfg.last_batch_iteration + e->applied_steps;
    if (!(flags & (DS_LOAD_MODULE_ONLY | DS_LOAD_NO_OPTIMIZER))) {
        e->applied_steps = m->applied_steps;
        if (m->scaler_enabled && e->scaler.enabled) {
            e->scaler.scale = m->loss_scale;
            e->scaler.cur_hysteresis = m->cur_hysteresis;
            e->scaler.cur_iter = m->scaler_cur_iter;
            e->scaler.last_overflow_iter = m->scaler_last_overflow_iter;
        }
    }
    if (!(flags & (DS_LOAD_MODULE_ONLY | DS_LOAD_NO_SCHEDULER))) position = m->sched_iteration;
    e->cfg.last_batch_iteration = position - e->applied_steps;
    if (flags & DS_LOAD_MODULE_ONLY) return DS_OK;

    e->global_step = m->global_step;
    e->skipped_steps = m->skipped_steps;
    e->samples = m->samples;
    /* micro_steps keys the dropout stream; with another accumulation count
     * the same optimizer step starts at step * gas. */
    int64_t gas = e->cfg.gradient_accumulation_steps;
    e->micro_steps = gas == m->gradient_accumulation_steps
                         ? m->micro_steps
                         : m->micro_steps / m->gradient_accumulation_steps * gas;
    e->seed = m->seed;
    DS_TRY(restore_loader(e, m));
    e->last = (ds_step_info){.step = e->global_step, .epoch = e->epoch,
                             .micro_steps = e->micro_steps, .loss = m->last_loss,
                             .lr = m->last_lr, .grad_norm = m->last_grad_norm,
                             .loss_scale = e->scaler.scale, .skipped = m->last_skipped,
                             .samples = e->samples};
    return DS_OK;
}

ds_status ds_load_checkpoint(engine_t *e, const char *dir, const char *tag_in, unsigned flags) {
    if (!dir || !*dir) return DS_ERR(DS_ERR_INVALID_ARG, "ds_load_checkpoint: no folder given");
    if (flags & ~(unsigned)(DS_LOAD_NO_OPTIMIZER | DS_LOAD_NO_SCHEDULER | DS_LOAD_MODULE_ONLY))
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_load_checkpoint: unknown flags 0x%x", flags);
    char tag[DS_CKPT_TAG_MAX + 1], tag_dir[PATH_CAP];
    ds_status st = DS_OK;
    if (tag_in) st = ds_ckpt_check_tag(tag_in);
    if (st == DS_OK) {
        if (tag_in) snprintf(tag, sizeof tag, "%s", tag_in);
        else st = ds_ckpt_read_latest(dir, tag, sizeof tag);
    }
    DS_TRY(agree(e, st));
    DS_TRY(agree_tag(e, tag, "ds_load_checkpoint"));
    snprintf(tag_dir, sizeof tag_dir, "%s/%s", dir, tag);

    /* Phase 1: verify, on every rank, then agree. Nothing has changed yet. */
    ds_ckpt_meta m;
    float *rank_state = NULL;
    st = check_local(e, tag_dir, flags, &m);
    if (st == DS_OK) st = read_rank_state(e, tag_dir, flags, &m, &rank_state);
    st = agree(e, st);
    if (st != DS_OK) {
        free(rank_state);
        ds_ckpt_meta_free(&m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* Phase 2: the states (lost offload files made anew), then the working parameters. */
    const bool full = !(flags & (DS_LOAD_NO_OPTIMIZER | DS_LOAD_MODULE_ONLY));
    e->have_forward = e->have_backward = false;
    e->micro_in_step = 0;
    e->window = 0;
    e->loss_accum = 0.0;
    e->window_failed = DS_OK;
    st = e->zero->ops->zero_grad(e->zero);
    if (st == DS_OK && full && e->zero->ops->revive) st = e->zero->ops->revive(e->zero);
    if (st == DS_OK) st = ds_ties_clear(e->ties);
    if (st == DS_OK) st = load_states(e, tag_dir, flags, &m);
    if (st == DS_OK && rank_state) st = e->zero->ops->rank_state_io(e->zero, rank_state, true);
    const bool have_rank_state = st == DS_OK && rank_state;
    free(rank_state);
    st = agree(e, st);
    if (st == DS_OK) st = agree(e, e->zero->ops->sync_params(e->zero));
    if (st == DS_OK) st = agree(e, restore_progress(e, &m, flags));
    if (st == DS_OK && e->zero->ops->rank_state_restart)
        st = agree(e, e->zero->ops->rank_state_restart(e->zero, e->applied_steps,
                                                        have_rank_state));
    if (st == DS_OK && e->comm->rank == 0 && !e->quiet)
        fprintf(stderr, "[zero-engine] loaded checkpoint %s (step %lld; saved by %d rank(s) at "
                "stage %d in %s, now %d rank(s) at stage %d in %s)\n", tag_dir,
                (long long)m.global_step, m.world, m.stage, m.precision, e->comm->world,
                e->zero->stage, precision_name(e));
    ds_ckpt_meta_free(&m);
    if (st != DS_OK) { /* part of the state may be the checkpoint's, part not */
        ds_engine_lose(e, st, "loading %s", tag_dir);
        return st;
    }
    if (full) e->lost = DS_OK; /* the checkpoint's state everywhere */
    ds_engine_monitor_rebase(e);
    return DS_OK;
}
