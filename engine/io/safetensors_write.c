/* safetensors: the streaming atomic writer, the shard planner, the sharded
 * writer and its index. */
#include "engine/io/safetensors.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/io/ckpt_dir.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors_write.c writes host bytes as little-endian"
#endif

uint64_t ds_st_decl_bytes(const ds_st_decl *d) {
    if (d->ndim < 0 || d->ndim > DS_ST_MAX_DIMS) return 0;
    uint64_t n = ds_st_dtype_size(d->dtype);
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)d->shape[i], &n)) return 0;
    }
    return n;
}

/* Flush, fsync and close fp (written as tmp), then rename tmp -> path and
 * fsync the folder. Closes fp and removes tmp on failure. */
static ds_status commit_file(FILE *fp, const char *tmp, const char *path) {
    ds_status st = DS_OK;
    if (fflush(fp) != 0) st = DS_ERR(DS_ERR_IO, "%s: write: %s", tmp, strerror(errno));
    else if (fsync(fileno(fp)) != 0) st = DS_ERR(DS_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (fclose(fp) != 0 && st == DS_OK) st = DS_ERR(DS_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (st == DS_OK && rename(tmp, path) != 0)
        st = DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    if (st != DS_OK) {
        unlink(tmp);
        return st;
    }
    DS_TRY(ds_ckpt_fsync_parent(path));
    return DS_OK;
}

/* ------------------------------------------------------------------ writer */

struct ds_st_writer {
    char *path, *tmp;
    FILE *fp;
    int n;
    char **names;
    ds_st_dtype *dtypes;
    uint64_t *bytes;  /* per tensor */
    int cur;          /* tensor the next byte belongs to (n when done) */
    uint64_t cur_off; /* bytes of tensor cur already written */
    uint64_t written; /* bytes of the buffer written */
    bool failed;      /* a write failed: the file is unusable */
};

static void writer_free(ds_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->names[i]);
    free(w->names);
    free(w->dtypes);
    free(w->bytes);
    free(w->path);
    free(w->tmp);
    free(w);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names non-empty, unique, not "__metadata__"; dtypes and shapes valid. */
static ds_status check_decls(const char *path, const ds_st_decl *decl, int n) {
    if (n < 0) return DS_ERR(DS_ERR_INVALID_ARG, "%s: %d tensors", path, n);
    const char **names = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (!names) return DS_ERR(DS_ERR_OOM, "%s: %d names", path, n);
    ds_status st = DS_OK;
    for (int i = 0; i < n && st == DS_OK; i++) {
        const ds_st_decl *d = &decl[i];
        names[i] = d->name;
        if (!d->name || !d->name[0])
            st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor %d has an empty name", path, i);
        else if (strcmp(d->name, "__metadata__") == 0)
            st = DS_ERR(DS_ERR_INVALID_ARG, "%s: '__metadata__' is reserved, not a tensor name", path);
        else if (ds_st_dtype_size(d->dtype) == 0)
            st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': invalid dtype %d", path, d->name,
                        (int)d->dtype);
        else if (d->ndim < 0 || d->ndim > DS_ST_MAX_DIMS)
            st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': ndim %d outside 0..%d", path, d->name,
                        d->ndim, DS_ST_MAX_DIMS);
        else
            for (int k = 0; k < d->ndim && st == DS_OK; k++)
                if (d->shape[k] < 0)
                    st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': shape[%d] = %" PRId64, path,
                                d->name, k, d->shape[k]);
        if (st == DS_OK && d->ndim > 0 && ds_st_decl_bytes(d) == 0) {
            /* zero bytes is fine for an empty tensor; otherwise it overflowed */
            bool empty = false;
            for (int k = 0; k < d->ndim; k++) empty |= d->shape[k] == 0;
            if (!empty)
                st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': size overflows 64 bits", path,
                            d->name);
        }
    }
    if (st == DS_OK) {
        qsort(names, (size_t)n, sizeof(char *), cmp_str);
        for (int i = 1; i < n && st == DS_OK; i++)
            if (strcmp(names[i - 1], names[i]) == 0)
                st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s' declared twice", path, names[i]);
    }
    free(names);
    return st;
}

/* The header JSON, padded with spaces so that 8 + length is a multiple of 8. */
static ds_status build_header(const char *path, const ds_st_decl *decl, int n, const ds_st_kv *meta,
                              int n_meta, char **out, size_t *out_len) {
    json_t *root = json_object();
    ds_status st = DS_OK;
    if (!root) return DS_ERR(DS_ERR_OOM, "%s: header", path);
    if (n_meta > 0) {
        json_t *m = json_object();
        json_object_set_new(root, "__metadata__", m);
        for (int i = 0; i < n_meta; i++) {
            json_t *v = json_string(meta[i].value ? meta[i].value : "");
            if (!meta[i].key || !v || json_object_set_new(m, meta[i].key, v) != 0) {
                st = DS_ERR(DS_ERR_INVALID_ARG, "%s: metadata entry %d is not valid UTF-8", path, i);
                goto done;
            }
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        json_object_set_new(e, "dtype", json_string(ds_st_dtype_name(decl[i].dtype)));
        for (int k = 0; k < decl[i].ndim; k++)
            json_array_append_new(shape, json_integer((json_int_t)decl[i].shape[k]));
        json_object_set_new(e, "shape", shape);
        uint64_t b = ds_st_decl_bytes(&decl[i]);
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + b)));
        json_object_set_new(e, "data_offsets", offs);
        off += b;
        if (json_object_set_new(root, decl[i].name, e) != 0) {
            st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor name '%s' is not valid UTF-8", path,
                        decl[i].name);
            goto done;
        }
    }
    char *text = json_dumps(root, JSON_COMPACT);
    if (!text) {
        st = DS_ERR(DS_ERR_OOM, "%s: header", path);
        goto done;
    }
    size_t len = strlen(text);
    size_t padded = len + (8 - (8 + len) % 8) % 8;
    char *buf = malloc(padded);
    if (!buf) {
        free(text);
        st = DS_ERR(DS_ERR_OOM, "%s: header", path);
        goto done;
    }
    memcpy(buf, text, len);
    memset(buf + len, ' ', padded - len);
    free(text);
    *out = buf;
    *out_len = padded;
done:
    json_decref(root);
    return st;
}

ds_status ds_st_writer_open(const char *path, const ds_st_decl *decl, int n, const ds_st_kv *meta,
                            int n_meta, ds_st_writer **out) {
    *out = NULL;
    DS_TRY(check_decls(path, decl, n));
    ds_st_writer *w = calloc(1, sizeof *w);
    if (!w) return DS_ERR(DS_ERR_OOM, "%s: writer", path);
    size_t plen = strlen(path);
    w->path = strdup(path);
    w->tmp = malloc(plen + 5);
    w->names = calloc((size_t)(n ? n : 1), sizeof(char *));
    w->dtypes = calloc((size_t)(n ? n : 1), sizeof(ds_st_dtype));
    w->bytes = calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    if (!w->path || !w->tmp || !w->names || !w->dtypes || !w->bytes) {
        writer_free(w);
        return DS_ERR(DS_ERR_OOM, "%s: writer tables for %d tensors", path, n);
    }
    memcpy(w->tmp, path, plen);
    memcpy(w->tmp + plen, ".tmp", 5);
    for (int i = 0; i < n; i++) {
        w->names[i] = strdup(decl[i].name);
        w->n = i + 1;
        if (!w->names[i]) {
            writer_free(w);
            return DS_ERR(DS_ERR_OOM, "%s: names", path);
        }
        w->dtypes[i] = decl[i].dtype;
        w->bytes[i] = ds_st_decl_bytes(&decl[i]);
    }
    w->n = n;
    char *header = NULL;
    size_t hlen = 0;
    ds_status st = build_header(path, decl, n, meta, n_meta, &header, &hlen);
    if (st != DS_OK) {
        writer_free(w);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) {
        st = DS_ERR(DS_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        free(header);
        writer_free(w);
        return st;
    }
    uint64_t hl = hlen;
    if (fwrite(&hl, 8, 1, w->fp) != 1 || fwrite(header, 1, hlen, w->fp) != hlen) {
        st = DS_ERR(DS_ERR_IO, "%s: writing the header: %s", w->tmp, strerror(errno));
        free(header);
        ds_st_writer_abort(w);
        return st;
    }
    free(header);
    while (w->cur < w->n && w->bytes[w->cur] == 0) w->cur++;
    *out = w;
    return DS_OK;
}

uint64_t ds_st_writer_written(const ds_st_writer *w) { return w->written; }

const char *ds_st_writer_current(const ds_st_writer *w) {
    return w->cur < w->n ? w->names[w->cur] : NULL;
}

ds_status ds_st_writer_write(ds_st_writer *w, const void *bytes, size_t nbytes) {
    if (w->failed) return DS_ERR(DS_ERR_IO, "%s: an earlier write failed", w->tmp);
    const char *p = bytes;
    while (nbytes > 0) {
        if (w->cur >= w->n)
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: %zu bytes more than the declared tensors hold",
                          w->path, nbytes);
        uint64_t left = w->bytes[w->cur] - w->cur_off;
        size_t take = nbytes < left ? nbytes : (size_t)left;
        if (fwrite(p, 1, take, w->fp) != take) {
            w->failed = true;
            return DS_ERR(DS_ERR_IO, "%s: writing tensor '%s': %s", w->tmp, w->names[w->cur],
                          strerror(errno));
        }
        p += take;
        nbytes -= take;
        w->cur_off += take;
        w->written += take;
        if (w->cur_off == w->bytes[w->cur]) {
            w->cur++;
            w->cur_off = 0;
            while (w->cur < w->n && w->bytes[w->cur] == 0) w->cur++;
        }
    }
    return DS_OK;
}

ds_status ds_st_writer_write_f32(ds_st_writer *w, const float *values, size_t n) {
    if (n == 0) return DS_OK;
    if (w->cur >= w->n)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: %zu values more than the declared tensors hold",
                      w->path, n);
    ds_st_dtype dt = w->dtypes[w->cur];
    const char *name = w->names[w->cur];
    size_t es = ds_st_dtype_size(dt);
    if (!ds_st_dtype_is_float(dt))
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s' is %s: fp32 values cannot be converted",
                      w->path, name, ds_st_dtype_name(dt));
    if (w->cur_off % es != 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s' has a half-written element", w->path, name);
    if ((uint64_t)n > (w->bytes[w->cur] - w->cur_off) / es)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': %zu values but only %" PRIu64 " remain",
                      w->path, name, n, (w->bytes[w->cur] - w->cur_off) / es);
    if (dt == DS_ST_F32) {
        DS_TRY(ds_st_writer_write(w, values, n * 4));
        return DS_OK;
    }
    enum { CHUNK_BYTES = 32 * 1024 };
    _Alignas(8) unsigned char chunk[CHUNK_BYTES];
    size_t per = CHUNK_BYTES / es;
    for (size_t done = 0; done < n;) {
        size_t m = n - done < per ? n - done : per;
        const float *s = values + done;
        if (dt == DS_ST_F16) {
            uint16_t *o = (uint16_t *)chunk;
            for (size_t i = 0; i < m; i++) o[i] = ds_f32_to_f16(s[i]);
        } else if (dt == DS_ST_BF16) {
            uint16_t *o = (uint16_t *)chunk;
            for (size_t i = 0; i < m; i++) o[i] = ds_f32_to_bf16(s[i]);
        } else { /* F64 */
            double *o = (double *)chunk;
            for (size_t i = 0; i < m; i++) o[i] = (double)s[i];
        }
        DS_TRY(ds_st_writer_write(w, chunk, m * es));
        done += m;
    }
    return DS_OK;
}

void ds_st_writer_abort(ds_st_writer *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    unlink(w->tmp);
    writer_free(w);
}

ds_status ds_st_writer_finish(ds_st_writer *w) {
    ds_status st = DS_OK;
    if (w->failed) st = DS_ERR(DS_ERR_IO, "%s: an earlier write failed", w->tmp);
    else if (w->cur < w->n)
        st = DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s' got %" PRIu64 " of its %" PRIu64
                    " bytes (and %d tensors after it none)", w->path, w->names[w->cur], w->cur_off,
                    w->bytes[w->cur], w->n - w->cur - 1);
    if (st != DS_OK) {
        ds_st_writer_abort(w);
        return st;
    }
    FILE *fp = w->fp;
    w->fp = NULL;
    st = commit_file(fp, w->tmp, w->path);
    writer_free(w);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

/* ------------------------------------------------------------------ shards */

ds_status ds_st_plan_shards(const uint64_t *bytes, int n, uint64_t max_shard_bytes, int *shard_of,
                            int *n_shards) {
    if (max_shard_bytes == 0) return DS_ERR(DS_ERR_INVALID_ARG, "max shard size must be > 0");
    if (n < 0) return DS_ERR(DS_ERR_INVALID_ARG, "%d tensors", n);
    int shard = 0;
    uint64_t cur = 0;   /* bytes in the open shard */
    bool open = false;  /* the open shard holds at least one tensor */
    for (int i = 0; i < n; i++) {
        if (bytes[i] > max_shard_bytes) {
            /* Too big for any shard: alone in its own, in its place. */
            if (open) shard++;
            shard_of[i] = shard++;
            cur = 0;
            open = false;
            continue;
        }
        if (open && cur + bytes[i] > max_shard_bytes) {
            shard++;
            cur = 0;
        }
        shard_of[i] = shard;
        cur += bytes[i];
        open = true;
    }
    *n_shards = open ? shard + 1 : (shard > 0 ? shard : 1);
    return DS_OK;
}

ds_status ds_st_parse_size(const char *text, uint64_t *out) {
    /* transformers' convert_file_size_to_int: GiB/MiB/KiB binary, GB/MB/KB decimal */
    static const struct {
        const char *unit;
        uint64_t mult;
    } units[] = {{"GIB", 1ull << 30}, {"MIB", 1ull << 20}, {"KIB", 1ull << 10}, {"GB", 1000000000ull},
                 {"MB", 1000000ull},  {"KB", 1000ull},     {"B", 1ull},         {"", 1ull}};
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno != 0 || !(v > 0))
        return DS_ERR(DS_ERR_INVALID_ARG, "size \"%s\": expected a positive number with an optional "
                      "unit (5GB, 500MiB, 1000000)", text);
    while (*end == ' ') end++;
    char unit[8] = {0};
    size_t k = 0;
    for (; end[k] && k < sizeof unit - 1; k++) unit[k] = (char)toupper((unsigned char)end[k]);
    if (end[k] == '\0')
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
            if (strcmp(unit, units[u].unit) == 0) {
                double bytes = v * (double)units[u].mult;
                if (bytes >= 18446744073709551615.0) break;
                *out = (uint64_t)bytes;
                if (*out == 0) break;
                return DS_OK;
            }
    return DS_ERR(DS_ERR_INVALID_ARG, "size \"%s\": unknown unit or out of range (use B, KB, MB, "
                  "GB, KiB, MiB, GiB)", text);
}

void ds_st_shard_name(const char *prefix, int shard, int n_shards, char *buf, size_t cap) {
    if (n_shards <= 1) snprintf(buf, cap, "%s.safetensors", prefix);
    else snprintf(buf, cap, "%s-%05d-of-%05d.safetensors", prefix, shard + 1, n_shards);
}

struct ds_st_sharded {
    char *dir, *prefix;
    ds_st_decl *decls;      /* owned copy of the declarations (names copied) */
    int n;
    int *first;             /* first tensor of each shard; first[n_shards] = n */
    uint64_t *shard_bytes;
    int n_shards;
    ds_st_kv *meta;
    int n_meta;
    int cur;                /* shard being written */
    int done;               /* shards finished (complete as NAME.partial) */
    ds_st_writer *w;        /* writer of shard cur (NULL after a failure) */
};

/* Where shard sh is written. Several shards are written as NAME.partial
 * and renamed into place only once every one is complete
 * (ds_st_sharded_finish): a conversion that fails part way (a full disk, a
 * non-finite weight) must leave an earlier conversion's output in the same
 * folder whole, and its finished shards would have replaced that output's
 * of the same names. One file is its own writer's atomic rename. */
static void shard_path(const ds_st_sharded *s, int sh, bool partial, char *path, size_t cap) {
    char name[256];
    ds_st_shard_name(s->prefix, sh, s->n_shards, name, sizeof name);
    snprintf(path, cap, "%s/%s%s", s->dir, name, partial && s->n_shards > 1 ? ".partial" : "");
}

/* After a failure: the shards already finished go too (only this
 * conversion's .partial files, or its one file). */
static void remove_done(const ds_st_sharded *s) {
    char path[4096];
    for (int sh = 0; sh < s->done; sh++) {
        shard_path(s, sh, true, path, sizeof path);
        unlink(path);
    }
}

/* Every shard complete: the old index goes first (a crash among the
 * renames then leaves no index naming a mix of two conversions' shards),
 * the shards into place, then (the caller) the new index. */
static ds_status publish_shards(const ds_st_sharded *s) {
    if (s->n_shards <= 1) return DS_OK;
    char from[4096], to[4096];
    snprintf(to, sizeof to, "%s/%s.safetensors.index.json", s->dir, s->prefix);
    if (unlink(to) != 0 && errno != ENOENT)
        return DS_ERR(DS_ERR_IO, "%s: cannot replace: %s", to, strerror(errno));
    for (int sh = 0; sh < s->n_shards; sh++) {
        shard_path(s, sh, true, from, sizeof from);
        shard_path(s, sh, false, to, sizeof to);
        if (rename(from, to) != 0)
            return DS_ERR(DS_ERR_IO, "rename %s -> %s: %s", from, to, strerror(errno));
    }
    DS_TRY(ds_ckpt_fsync_dir(s->dir));
    return DS_OK;
}

static void sharded_free(ds_st_sharded *s) {
    if (!s) return;
    if (s->decls)
        for (int i = 0; i < s->n; i++) free((char *)s->decls[i].name);
    if (s->meta)
        for (int i = 0; i < s->n_meta; i++) {
            free((char *)s->meta[i].key);
            free((char *)s->meta[i].value);
        }
    free(s->decls);
    free(s->meta);
    free(s->first);
    free(s->shard_bytes);
    free(s->dir);
    free(s->prefix);
    free(s);
}

/* What an earlier conversion under the same prefix left when it was killed
 * before it published its shards: PREFIX-*.safetensors.partial (and their
 * .tmp), never an output; removed as this one starts. */
static void remove_partials(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return;
    size_t np = strlen(prefix);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (strncmp(n, prefix, np) != 0 || n[np] != '-') continue;
        if (!strstr(n, ".safetensors.partial")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        unlink(path);
    }
    closedir(d);
}

static ds_status shard_open(ds_st_sharded *s) {
    char path[4096];
    shard_path(s, s->cur, true, path, sizeof path);
    int a = s->first[s->cur], b = s->first[s->cur + 1];
    DS_TRY(ds_st_writer_open(path, s->decls + a, b - a, s->meta, s->n_meta, &s->w));
    return DS_OK;
}

ds_status ds_st_sharded_open(const char *dir, const char *prefix, const ds_st_decl *decl, int n,
                             uint64_t max_shard_bytes, const ds_st_kv *meta, int n_meta,
                             ds_st_sharded **out) {
    *out = NULL;
    DS_TRY(check_decls(dir, decl, n));
    ds_st_sharded *s = calloc(1, sizeof *s);
    if (!s) return DS_ERR(DS_ERR_OOM, "%s: sharded writer", dir);
    size_t nn = (size_t)(n ? n : 1);
    s->dir = strdup(dir);
    s->prefix = strdup(prefix ? prefix : "model");
    s->decls = calloc(nn, sizeof *s->decls);
    s->first = calloc(nn + 1, sizeof(int));
    s->shard_bytes = calloc(nn, sizeof(uint64_t));
    s->meta = calloc((size_t)(n_meta > 0 ? n_meta : 1), sizeof *s->meta);
    uint64_t *bytes = calloc(nn, sizeof(uint64_t));
    int *shard_of = calloc(nn, sizeof(int));
    ds_status st = DS_OK;
    if (!s->dir || !s->prefix || !s->decls || !s->first || !s->shard_bytes || !s->meta || !bytes ||
        !shard_of) {
        st = DS_ERR(DS_ERR_OOM, "%s: sharded writer tables for %d tensors", dir, n);
        goto fail;
    }
    s->n = n;
    for (int i = 0; i < n; i++) {
        s->decls[i] = decl[i];
        s->decls[i].name = strdup(decl[i].name);
        if (!s->decls[i].name) {
            st = DS_ERR(DS_ERR_OOM, "%s: names", dir);
            goto fail;
        }
        bytes[i] = ds_st_decl_bytes(&decl[i]);
    }
    for (int i = 0; i < n_meta; i++) {
        s->meta[i].key = strdup(meta[i].key ? meta[i].key : "");
        s->meta[i].value = strdup(meta[i].value ? meta[i].value : "");
        s->n_meta = i + 1;
        if (!s->meta[i].key || !s->meta[i].value) {
            st = DS_ERR(DS_ERR_OOM, "%s: metadata", dir);
            goto fail;
        }
    }
    if (max_shard_bytes == 0) {
        s->n_shards = 1;
    } else {
        DS_TRY_GOTO(st, ds_st_plan_shards(bytes, n, max_shard_bytes, shard_of, &s->n_shards), fail);
    }
    /* shards are contiguous runs of tensors: record where each starts */
    int k = 0;
    for (int sh = 0; sh < s->n_shards; sh++) {
        s->first[sh] = k;
        while (k < n && (max_shard_bytes == 0 || shard_of[k] == sh)) s->shard_bytes[sh] += bytes[k++];
    }
    s->first[s->n_shards] = n;
    if (s->n_shards > 1) remove_partials(dir, s->prefix);
    DS_TRY_GOTO(st, shard_open(s), fail);
    free(bytes);
    free(shard_of);
    *out = s;
    return DS_OK;
fail:
    free(bytes);
    free(shard_of);
    sharded_free(s);
    return st;
}

int ds_st_sharded_count(const ds_st_sharded *s) { return s->n_shards; }

/* Close the current shard and open the next one. */
static ds_status shard_next(ds_st_sharded *s) {
    ds_st_writer *w = s->w;
    s->w = NULL;
    DS_TRY(ds_st_writer_finish(w));
    s->done++;
    s->cur++;
    DS_TRY(shard_open(s));
    return DS_OK;
}

ds_status ds_st_sharded_write(ds_st_sharded *s, const void *bytes, size_t nbytes) {
    const char *p = bytes;
    while (nbytes > 0) {
        if (!s->w) return DS_ERR(DS_ERR_IO, "%s: an earlier shard failed", s->dir);
        uint64_t left = s->shard_bytes[s->cur] - ds_st_writer_written(s->w);
        if (left == 0 && s->cur + 1 < s->n_shards) {
            DS_TRY(shard_next(s));
            continue;
        }
        size_t take = (left == 0 || nbytes < left) ? nbytes : (size_t)left;
        DS_TRY(ds_st_writer_write(s->w, p, take)); /* too many bytes: the writer says so */
        p += take;
        nbytes -= take;
    }
    return DS_OK;
}

ds_status ds_st_sharded_write_f32(ds_st_sharded *s, const float *values, size_t n) {
    if (n == 0) return DS_OK;
    if (!s->w) return DS_ERR(DS_ERR_IO, "%s: an earlier shard failed", s->dir);
    /* write_f32 stays inside one tensor, so inside one shard: move on first
     * when the current shard is complete */
    while (s->shard_bytes[s->cur] == ds_st_writer_written(s->w) && s->cur + 1 < s->n_shards)
        DS_TRY(shard_next(s));
    DS_TRY(ds_st_writer_write_f32(s->w, values, n));
    return DS_OK;
}

static ds_status write_index(ds_st_sharded *s) {
    char path[4096], name[256];
    snprintf(path, sizeof path, "%s/%s.safetensors.index.json", s->dir, s->prefix);
    json_t *root = json_object(), *md = json_object(), *wm = json_object();
    uint64_t total = 0;
    for (int sh = 0; sh < s->n_shards; sh++) {
        ds_st_shard_name(s->prefix, sh, s->n_shards, name, sizeof name);
        total += s->shard_bytes[sh];
        for (int i = s->first[sh]; i < s->first[sh + 1]; i++)
            json_object_set_new(wm, s->decls[i].name, json_string(name));
    }
    json_object_set_new(md, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", md);
    json_object_set_new(root, "weight_map", wm);
    /* the layout transformers' save_pretrained writes: indent 2, sorted keys */
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text) return DS_ERR(DS_ERR_OOM, "%s: index", path);
    size_t len = strlen(text);
    char *line = realloc(text, len + 1); /* json_dumps's buffer is malloc'd */
    if (!line) {
        free(text);
        return DS_ERR(DS_ERR_OOM, "%s: index", path);
    }
    line[len] = '\n'; /* the terminating NUL's byte; the length says where to stop */
    ds_status st = ds_ckpt_write_file_atomic(path, line, len + 1);
    free(line);
    DS_TRY(st);
    return DS_OK;
}

/* What an earlier conversion into the same folder left that this one did
 * not write (as transformers' save_pretrained cleans up): shards of another
 * count, the single file beside shards, an index beside a single file. A
 * reader would otherwise find two models in the folder. Only names of
 * those forms are touched. */
static ds_status remove_stale(const ds_st_sharded *s) {
    DIR *d = opendir(s->dir);
    if (!d) return DS_ERR(DS_ERR_IO, "%s: cannot open folder: %s", s->dir, strerror(errno));
    size_t np = strlen(s->prefix);
    ds_status st = DS_OK;
    struct dirent *de;
    while (st == DS_OK && (de = readdir(d))) {
        const char *n = de->d_name;
        if (strncmp(n, s->prefix, np) != 0) continue;
        const char *rest = n + np;
        int a, b, used = 0;
        bool stale = false;
        if (!strcmp(rest, ".safetensors")) stale = s->n_shards > 1;
        else if (!strcmp(rest, ".safetensors.index.json")) stale = s->n_shards <= 1;
        else if (sscanf(rest, "-%5d-of-%5d.safetensors%n", &a, &b, &used) == 2 &&
                 rest[used] == '\0' && strlen(rest) == strlen("-00001-of-00001.safetensors"))
            stale = b != s->n_shards || s->n_shards <= 1;
        if (!stale) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", s->dir, n);
        if (unlink(path) != 0)
            st = DS_ERR(DS_ERR_IO, "%s: the conversion is complete, but this file an earlier "
                        "one left could not be removed: %s", path, strerror(errno));
    }
    closedir(d);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_st_sharded_finish(ds_st_sharded *s) {
    ds_status st = DS_OK;
    if (!s->w) st = DS_ERR(DS_ERR_IO, "%s: an earlier shard failed", s->dir);
    /* later shards may hold only empty tensors: open and close them too */
    while (st == DS_OK && s->cur + 1 < s->n_shards &&
           ds_st_writer_written(s->w) == s->shard_bytes[s->cur])
        st = shard_next(s);
    if (st == DS_OK) {
        /* a short shard stops the loop above: finish names its short tensor */
        ds_st_writer *w = s->w;
        s->w = NULL;
        st = ds_st_writer_finish(w);
        if (st == DS_OK) s->done++;
    }
    if (st == DS_OK) st = publish_shards(s);
    if (st == DS_OK && s->n_shards > 1) st = write_index(s);
    if (s->w) ds_st_writer_abort(s->w);
    if (st != DS_OK) remove_done(s);
    else st = remove_stale(s); /* the new output stays complete whatever this gives */
    sharded_free(s);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

void ds_st_sharded_abort(ds_st_sharded *s) {
    if (!s) return;
    ds_st_writer_abort(s->w);
    remove_done(s);
    sharded_free(s);
}
