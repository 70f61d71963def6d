/* Shard-file writer: header, compressed frames, index, trailer (format in
 * ckpt_file.h). Memory: one raw frame, one shuffled copy and one compressed
 * buffer, whatever the size of the state written. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "engine/io/ckpt_file_internal.h"
#include "engine/io/hash.h"

struct ds_ckpt_writer {
    int fd;
    char *path;
    ds_ckpt_header h;
    ds_ckpt_write_opts o;
    ZSTD_CCtx *cctx;
    unsigned char *raw, *shuf, *comp;
    size_t comp_cap;
    size_t fill;        /* values in raw */
    uint64_t pos;       /* bytes written so far */
    uint64_t raw_total;
    ck_section sec[DS_CKPT_SECTION_COUNT];
    int n_sec;
    bool open_sec;
    int64_t next;       /* next element of the open section */
    ck_frame *frames;   /* every frame, sections in order */
    size_t n_frames, cap_frames;
};

const char *ds_ckpt_section_name(uint32_t id) {
    switch (id) {
    case DS_CKPT_WEIGHTS: return "weights";
    case DS_CKPT_MOMENT0: return "moment0";
    case DS_CKPT_MOMENT1: return "moment1";
    case DS_CKPT_RANK_STATE: return "rank_state";
    default: return "?";
    }
}

void ds_ckpt_write_opts_defaults(ds_ckpt_write_opts *o) {
    o->level = 1;
    o->filter = DS_CKPT_FILTER_SHUFFLE;
    o->frame_elems = DS_CKPT_FRAME_ELEMS_DEFAULT;
}

ds_status ds_ckpt_write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return DS_ERR(DS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return DS_OK;
}

static void writer_free(ds_ckpt_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    ZSTD_freeCCtx(w->cctx);
    free(w->raw);
    free(w->shuf);
    free(w->comp);
    free(w->frames);
    free(w->path);
    free(w);
}

void ds_ckpt_writer_abort(ds_ckpt_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
        unlink(w->path);
    }
    writer_free(w);
}

ds_status ds_ckpt_writer_open(const char *path, const ds_ckpt_header *h,
                              const ds_ckpt_write_opts *opts, ds_ckpt_writer **out) {
    *out = NULL;
    ds_ckpt_write_opts o;
    if (opts) o = *opts;
    else ds_ckpt_write_opts_defaults(&o);
    if (h->lo < 0 || h->lo > h->hi)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: range [%lld, %lld) is not a range", path,
                      (long long)h->lo, (long long)h->hi);
    if (o.frame_elems < DS_CKPT_FRAME_ELEMS_MIN || o.frame_elems > DS_CKPT_FRAME_ELEMS_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: frame of %u elements outside %u..%u", path,
                      o.frame_elems, DS_CKPT_FRAME_ELEMS_MIN, DS_CKPT_FRAME_ELEMS_MAX);
    if (o.level < ZSTD_minCLevel() || o.level > ZSTD_maxCLevel())
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: zstd level %d outside %d..%d", path, o.level,
                      ZSTD_minCLevel(), ZSTD_maxCLevel());
    if (o.filter != DS_CKPT_FILTER_NONE && o.filter != DS_CKPT_FILTER_SHUFFLE)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: unknown filter %d", path, (int)o.filter);
    ds_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return DS_ERR(DS_ERR_OOM, "%s: out of host memory", path);
    w->fd = -1;
    w->h = *h;
    w->h.frame_elems = o.frame_elems;
    w->o = o;
    size_t fb = (size_t)o.frame_elems * 4;
    w->comp_cap = ZSTD_compressBound(fb);
    w->path = strdup(path);
    w->raw = malloc(fb);
    w->shuf = malloc(fb);
    w->comp = malloc(w->comp_cap);
    w->cctx = ZSTD_createCCtx();
    if (!w->path || !w->raw || !w->shuf || !w->comp || !w->cctx) {
        writer_free(w);
        return DS_ERR(DS_ERR_OOM, "%s: out of host memory for the frame buffers", path);
    }
    if (ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, o.level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1))) {
        writer_free(w);
        return DS_ERR(DS_ERR_INTERNAL, "%s: zstd refused its parameters", path);
    }
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        ds_status st = DS_ERR(DS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        writer_free(w);
        return st;
    }
    unsigned char hb[DS_CKPT_HEADER_BYTES] = {0};
    memcpy(hb, CKPT_MAGIC, 8);
    ck_put32(hb + 8, DS_CKPT_FILE_VERSION);
    ck_put32(hb + 12, DS_CKPT_HEADER_BYTES);
    ck_put32(hb + 16, h->rank);
    ck_put32(hb + 20, h->world);
    ck_put64(hb + 24, (uint64_t)h->lo);
    ck_put64(hb + 32, (uint64_t)h->hi);
    ck_put32(hb + 40, o.frame_elems);
    ck_put64(hb + 56, ds_xxh64(hb, 56, 0));
    ds_status st = ds_ckpt_write_all(w->fd, hb, sizeof hb, path);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        ds_ckpt_writer_abort(w);
        return st;
    }
    w->pos = sizeof hb;
    *out = w;
    return DS_OK;
}

ds_status ds_ckpt_writer_begin(ds_ckpt_writer *w, uint32_t id, int64_t lo, int64_t hi) {
    if (w->open_sec)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: section %s begun before %s ended", w->path,
                      ds_ckpt_section_name(id), ds_ckpt_section_name(w->sec[w->n_sec - 1].id));
    if (id >= DS_CKPT_SECTION_COUNT)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: unknown section id %u", w->path, id);
    for (int k = 0; k < w->n_sec; k++)
        if (w->sec[k].id == id)
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: section %s written twice", w->path,
                          ds_ckpt_section_name(id));
    bool own = id == DS_CKPT_RANK_STATE; /* not in the flat space: [0, n) */
    if (own ? lo != 0 || hi < 0 : lo < w->h.lo || hi > w->h.hi || lo > hi)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: section %s [%lld, %lld) outside the file's [%lld, %lld)", w->path, ds_ckpt_section_name(id), (long long)lo, (long long)hi,
                      (long long)w->h.lo, (long long)w->h.hi);
    ck_section *s = &w->sec[w->n_sec++];
    *s = (ck_section){.id = id, .filter = (uint32_t)w->o.filter, .lo = lo, .hi = hi};
    w->open_sec = true;
    w->next = lo;
    w->fill = 0;
    return DS_OK;
}

/* Compress raw[0..fill) into one frame, write it, record it. */
static ds_status flush_frame(ds_ckpt_writer *w) {
    if (w->fill == 0) return DS_OK;
    ck_section *s = &w->sec[w->n_sec - 1];
    size_t nb = w->fill * 4;
    const unsigned char *src = w->raw;
    if (s->filter == DS_CKPT_FILTER_SHUFFLE) {
        ck_shuffle(w->raw, w->shuf, w->fill);
        src = w->shuf;
    }
    size_t k = ZSTD_compress2(w->cctx, w->comp, w->comp_cap, src, nb);
    if (ZSTD_isError(k))
        return DS_ERR(DS_ERR_INTERNAL, "%s: zstd compression failed: %s", w->path,
                      ZSTD_getErrorName(k));
    if (w->n_frames == w->cap_frames) {
        size_t cap = w->cap_frames ? 2 * w->cap_frames : 64;
        ck_frame *f = realloc(w->frames, cap * sizeof *f);
        if (!f) return DS_ERR(DS_ERR_OOM, "%s: out of host memory for the index", w->path);
        w->frames = f;
        w->cap_frames = cap;
    }
    w->frames[w->n_frames++] = (ck_frame){.offset = w->pos, .stored = (uint32_t)k,
                                          .elems = (uint32_t)w->fill,
                                          .first = w->next - (int64_t)w->fill,
                                          .hash = ds_xxh64(w->comp, k, 0)};
    s->n_frames++;
    DS_TRY(ds_ckpt_write_all(w->fd, w->comp, k, w->path));
    w->pos += k;
    w->raw_total += nb;
    w->fill = 0;
    return DS_OK;
}

ds_status ds_ckpt_writer_append(ds_ckpt_writer *w, const float *v, size_t n) {
    if (!w->open_sec) return DS_ERR(DS_ERR_INVALID_ARG, "%s: append outside a section", w->path);
    ck_section *s = &w->sec[w->n_sec - 1];
    if ((int64_t)n > s->hi - w->next)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: section %s holds %lld values, %lld more given",
                      w->path, ds_ckpt_section_name(s->id), (long long)(s->hi - s->lo),
                      (long long)(w->next - s->lo + (int64_t)n));
    while (n > 0) {
        size_t take = w->h.frame_elems - w->fill;
        if (take > n) take = n;
        memcpy(w->raw + w->fill * 4, v, take * 4);
        w->fill += take;
        w->next += (int64_t)take;
        v += take;
        n -= take;
        if (w->fill == w->h.frame_elems) DS_TRY(flush_frame(w));
    }
    return DS_OK;
}

ds_status ds_ckpt_writer_end(ds_ckpt_writer *w) {
    if (!w->open_sec) return DS_ERR(DS_ERR_INVALID_ARG, "%s: no section to end", w->path);
    ck_section *s = &w->sec[w->n_sec - 1];
    if (w->next != s->hi)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: section %s got %lld of %lld values", w->path,
                      ds_ckpt_section_name(s->id), (long long)(w->next - s->lo),
                      (long long)(s->hi - s->lo));
    DS_TRY(flush_frame(w));
    w->open_sec = false;
    return DS_OK;
}

static ds_status write_index(ds_ckpt_writer *w, ds_ckpt_file_info *info) {
    size_t bytes = CKPT_INDEX_HEAD + (size_t)w->n_sec * CKPT_SECTION_REC +
                   w->n_frames * CKPT_FRAME_REC;
    unsigned char *ix = calloc(1, bytes);
    if (!ix) return DS_ERR(DS_ERR_OOM, "%s: out of host memory for the index", w->path);
    ck_put32(ix, (uint32_t)w->n_sec);
    unsigned char *p = ix + CKPT_INDEX_HEAD;
    for (int k = 0; k < w->n_sec; k++, p += CKPT_SECTION_REC) {
        const ck_section *s = &w->sec[k];
        ck_put32(p, s->id);
        ck_put32(p + 4, s->filter);
        ck_put64(p + 8, (uint64_t)s->lo);
        ck_put64(p + 16, (uint64_t)s->hi);
        ck_put64(p + 24, s->n_frames);
    }
    for (size_t k = 0; k < w->n_frames; k++, p += CKPT_FRAME_REC) {
        const ck_frame *f = &w->frames[k];
        ck_put64(p, f->offset);
        ck_put32(p + 8, f->stored);
        ck_put32(p + 12, f->elems);
        ck_put64(p + 16, (uint64_t)f->first);
        ck_put64(p + 24, f->hash);
    }
    unsigned char tr[DS_CKPT_TRAILER_BYTES];
    uint64_t hash = ds_xxh64(ix, bytes, 0);
    ck_put64(tr, w->pos);
    ck_put64(tr + 8, bytes);
    ck_put64(tr + 16, hash);
    memcpy(tr + 24, CKPT_END_MAGIC, 8);
    ds_status st = ds_ckpt_write_all(w->fd, ix, bytes, w->path);
    free(ix);
    DS_TRY(st);
    DS_TRY(ds_ckpt_write_all(w->fd, tr, sizeof tr, w->path));
    w->pos += bytes + sizeof tr;
    if (info) *info = (ds_ckpt_file_info){.file_bytes = w->pos, .index_hash = hash,
                                          .raw_bytes = w->raw_total};
    return DS_OK;
}

ds_status ds_ckpt_writer_finish(ds_ckpt_writer *w, ds_ckpt_file_info *info) {
    ds_status st = DS_OK;
    if (w->open_sec)
        st = DS_ERR(DS_ERR_INVALID_ARG, "%s: section %s still open at finish", w->path,
                    ds_ckpt_section_name(w->sec[w->n_sec - 1].id));
    if (st == DS_OK) st = write_index(w, info);
    if (st == DS_OK && fsync(w->fd) != 0)
        st = DS_ERR(DS_ERR_IO, "%s: fsync failed: %s", w->path, strerror(errno));
    if (st == DS_OK) {
        int rc = close(w->fd);
        w->fd = -1;
        if (rc != 0) st = DS_ERR(DS_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
        else {
            writer_free(w);
            return DS_OK;
        }
        unlink(w->path);
    }
    ds_error_trace(__FILE__, __LINE__);
    ds_ckpt_writer_abort(w);
    return st;
}
