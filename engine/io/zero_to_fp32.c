/* Checkpoint folders without an engine: latest, verify, client state, and the
 * streaming conversion to safetensors (see zero_to_fp32.h). */
#include "engine/io/zero_to_fp32.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_file.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/safetensors.h"

#define PATH_CAP 4096

ds_status ds_checkpoint_latest(const char *dir, char *tag, size_t cap) {
    DS_TRY(ds_ckpt_read_latest(dir, tag, cap));
    return DS_OK;
}

/* dir/tag (tag NULL: latest) into tag_dir. */
static ds_status resolve(const char *dir, const char *tag, char *tag_out, char *tag_dir) {
    if (!dir || !*dir) return DS_ERR(DS_ERR_INVALID_ARG, "no checkpoint folder given");
    if (tag) {
        DS_TRY(ds_ckpt_check_tag(tag));
        snprintf(tag_out, DS_CKPT_TAG_MAX + 1, "%s", tag);
    } else {
        DS_TRY(ds_ckpt_read_latest(dir, tag_out, DS_CKPT_TAG_MAX + 1));
    }
    snprintf(tag_dir, PATH_CAP, "%s/%s", dir, tag_out);
    return DS_OK;
}

ds_status ds_checkpoint_verify(const char *dir, const char *tag) {
    char t[DS_CKPT_TAG_MAX + 1], tag_dir[PATH_CAP];
    DS_TRY(resolve(dir, tag, t, tag_dir));
    ds_ckpt_meta m;
    ds_status st = ds_ckpt_check_dir(tag_dir, true, &m);
    ds_ckpt_meta_free(&m);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_checkpoint_client_state(const char *dir, const char *tag, char **out) {
    *out = NULL;
    char t[DS_CKPT_TAG_MAX + 1], tag_dir[PATH_CAP], path[PATH_CAP + 16];
    DS_TRY(resolve(dir, tag, t, tag_dir));
    snprintf(path, sizeof path, "%s/%s", tag_dir, DS_CKPT_META_FILE);
    ds_ckpt_meta m;
    ds_status st = ds_ckpt_meta_read(path, &m);
    if (st == DS_OK) {
        *out = m.client_state_json;
        m.client_state_json = NULL;
    }
    ds_ckpt_meta_free(&m);
    DS_TRY(st);
    return DS_OK;
}

void ds_z2f_opts_defaults(ds_z2f_opts *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->max_shard_bytes = 5000000000ull;
    o->dtype = DS_F32;
}

/* The output: one file, or a (possibly sharded) folder. */
typedef struct sink {
    ds_st_writer *file;
    ds_st_sharded *shards;
} sink;

static ds_status sink_write(sink *s, const float *v, size_t n) {
    if (s->file) DS_TRY(ds_st_writer_write_f32(s->file, v, n));
    else DS_TRY(ds_st_sharded_write_f32(s->shards, v, n));
    return DS_OK;
}

static void sink_abort(sink *s) {
    ds_st_writer_abort(s->file);
    ds_st_sharded_abort(s->shards);
    s->file = NULL;
    s->shards = NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* created[cap]: the outermost folder this call made for `out` ("" when it
 * existed), for the cleanup after a failure. */
static ds_status open_sink(const char *out, const ds_ckpt_meta *m, const ds_z2f_opts *o,
                           sink *s, int *n_files, char *created, size_t cap) {
    ds_st_dtype dt = o->dtype == DS_F16 ? DS_ST_F16 : o->dtype == DS_BF16 ? DS_ST_BF16 : DS_ST_F32;
    ds_st_decl *decl = calloc(m->n_params ? (size_t)m->n_params : 1, sizeof *decl);
    if (!decl) return DS_ERR(DS_ERR_OOM, "zero_to_fp32: out of memory");
    for (int i = 0; i < m->n_params; i++) {
        decl[i] = (ds_st_decl){.name = m->params[i].name, .dtype = dt, .ndim = m->params[i].ndim};
        memcpy(decl[i].shape, m->params[i].shape, sizeof(int64_t) * (size_t)m->params[i].ndim);
    }
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)m->global_step);
    const ds_st_kv kv[] = {{"format", "pt"},
                           {"writer", "zero-engine zero_to_fp32"},
                           {"checkpoint_tag", m->tag},
                           {"global_step", step}};
    ds_status st;
    if (ends_with(out, ".safetensors")) { /* its folder made first, as a folder output's */
        char parent[PATH_CAP];
        snprintf(parent, sizeof parent, "%s", out);
        char *slash = strrchr(parent, '/');
        st = DS_OK;
        if (slash && slash != parent) {
            *slash = '\0';
            st = ds_ckpt_mkdirs_new(parent, created, cap);
        }
        if (st == DS_OK) st = ds_st_writer_open(out, decl, m->n_params, kv, 4, &s->file);
        *n_files = 1;
    } else {
        st = ds_ckpt_mkdirs_new(out, created, cap);
        if (st == DS_OK)
            st = ds_st_sharded_open(out, "model", decl, m->n_params, o->max_shard_bytes, kv, 4,
                                    &s->shards);
        if (st == DS_OK) *n_files = ds_st_sharded_count(s->shards);
    }
    free(decl);
    DS_TRY(st);
    return DS_OK;
}

/* Stream every parameter, frame-sized piece by piece, from the shard files
 * holding it (rank k holds [k*part, (k+1)*part)) into the sink. Parameters
 * are in flat order, so the files are visited in order and each is opened
 * once; the previous one is closed when the walk moves on. */
static ds_status stream(const char *tag_dir, const ds_ckpt_meta *m, sink *s, ds_dtype out_t,
                        float *buf, size_t cap, uint64_t *bytes_read) {
    ds_ckpt_reader *r = NULL;
    int open_k = -1;
    ds_status st = DS_OK;
    ds_ckpt_io_stats before, after;
    ds_ckpt_io_stats_get(&before);
    for (int i = 0; st == DS_OK && i < m->n_params; i++) {
        const ds_ckpt_param_entry *p = &m->params[i];
        int64_t x = p->offset, end = p->offset + p->numel;
        while (st == DS_OK && x < end) {
            int k = (int)(x / m->part);
            int64_t stop = (int64_t)(k + 1) * m->part;
            if (stop > end) stop = end;
            if (stop - x > (int64_t)cap) stop = x + (int64_t)cap;
            if (k != open_k) {
                ds_ckpt_reader_close(r);
                r = NULL;
                char path[PATH_CAP + 80];
                snprintf(path, sizeof path, "%s/%s", tag_dir, m->shards[k].file);
                st = ds_ckpt_reader_open(path, &r);
                if (st != DS_OK) break;
                open_k = k;
            }
            st = ds_ckpt_read(r, DS_CKPT_WEIGHTS, x, stop, buf);
            for (int64_t k = 0; st == DS_OK && k < stop - x; k++)
                if (!isfinite(buf[k])) /* weights nobody can use: no output */
                    st = DS_ERR(DS_ERR_NONFINITE, "%s: weights of %s: element %lld of %lld is %s "
                                "(non-finite values refused)", tag_dir, p->name,
                                (long long)(x + k - p->offset), (long long)p->numel,
                                isnan(buf[k]) ? "nan" : "inf");
            /* --dtype fp16 (or bf16 at fp32's edge): a weight its rounding
             * makes infinite is refused as a non-finite one is */
            for (int64_t k = 0; st == DS_OK && out_t != DS_F32 && k < stop - x; k++) {
                float back = out_t == DS_F16 ? ds_f16_to_f32(ds_f32_to_f16(buf[k]))
                                             : ds_bf16_to_f32(ds_f32_to_bf16(buf[k]));
                if (!isfinite(back))
                    st = DS_ERR(DS_ERR_NONFINITE, "%s: weights of %s: element %lld of %lld is "
                                "%g, past %s's largest value (%s); convert with --dtype %s",
                                tag_dir, p->name, (long long)(x + k - p->offset),
                                (long long)p->numel, (double)buf[k], ds_dtype_name(out_t),
                                out_t == DS_F16 ? "65504" : "3.39e38",
                                out_t == DS_F16 ? "bf16 or fp32" : "fp32");
            }
            if (st == DS_OK) st = sink_write(s, buf, (size_t)(stop - x));
            x = stop;
        }
    }
    ds_ckpt_reader_close(r);
    ds_ckpt_io_stats_get(&after);
    *bytes_read = after.bytes_read - before.bytes_read;
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_zero_to_fp32(const char *dir, const char *out, const ds_z2f_opts *opts,
                          ds_z2f_report *report) {
    ds_z2f_opts o;
    if (opts) {
        if (opts->struct_size != sizeof *opts)
            return DS_ERR(DS_ERR_INVALID_ARG, "zero_to_fp32: options of another version (call "
                          "ds_z2f_opts_defaults first)");
        o = *opts;
    } else {
        ds_z2f_opts_defaults(&o);
    }
    if (o.dtype != DS_F32 && o.dtype != DS_F16 && o.dtype != DS_BF16)
        return DS_ERR(DS_ERR_INVALID_ARG, "zero_to_fp32: output dtype must be fp32, fp16 or "
                      "bf16, got %s", ds_dtype_name(o.dtype));
    if (!out || !*out) return DS_ERR(DS_ERR_INVALID_ARG, "zero_to_fp32: no output path given");
    char tag[DS_CKPT_TAG_MAX + 1], tag_dir[PATH_CAP];
    DS_TRY(resolve(dir, o.tag, tag, tag_dir));

    ds_ckpt_meta m;
    ds_status st = ds_ckpt_check_dir(tag_dir, false, &m);
    if (st != DS_OK) {
        ds_ckpt_meta_free(&m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    size_t cap = m.frame_elems; /* one frame per piece: decoded once, copied once */
    float *buf = malloc(cap * sizeof(float));
    sink s = {0};
    int n_files = 0;
    char created[PATH_CAP] = "";
    uint64_t bytes_read = 0;
    if (!buf) st = DS_ERR(DS_ERR_OOM, "zero_to_fp32: out of memory for a %zu-element frame", cap);
    if (st == DS_OK) st = open_sink(out, &m, &o, &s, &n_files, created, sizeof created);
    if (st == DS_OK) st = stream(tag_dir, &m, &s, o.dtype, buf, cap, &bytes_read);
    if (st == DS_OK) {
        st = s.file ? ds_st_writer_finish(s.file) : ds_st_sharded_finish(s.shards);
        s.file = NULL;
        s.shards = NULL;
    }
    if (st != DS_OK) { /* nothing of the output stays: files, then the folders made for it */
        /* a full disk (or a file-size limit) says the bytes: free, and needed */
        char need[96];
        snprintf(need, sizeof need, "the output holds %llu bytes",
                 (unsigned long long)m.numel * (unsigned long long)ds_dtype_size(o.dtype));
        ds_ckpt_note_space(out, need);
        sink_abort(&s);
        char made[PATH_CAP]; /* a single file's: its folder */
        snprintf(made, sizeof made, "%s", out);
        char *slash = ends_with(out, ".safetensors") ? strrchr(made, '/') : NULL;
        if (slash && slash != made) *slash = '\0';
        ds_ckpt_rmdirs_upto(made, created);
    }
    if (st == DS_OK && report) {
        memset(report, 0, sizeof *report);
        report->n_tensors = m.n_params;
        report->n_files = n_files;
        report->n_elements = m.numel;
        report->bytes_written = (uint64_t)m.numel * ds_dtype_size(o.dtype);
        report->bytes_read = bytes_read;
        snprintf(report->tag, sizeof report->tag, "%s", tag);
    }
    free(buf);
    ds_ckpt_meta_free(&m);
    DS_TRY(st);
    return DS_OK;
}
