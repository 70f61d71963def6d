/* safetensors: dtype table, the validating reader and the index reader.
 * The writer lives in safetensors_write.c. */
#include "engine/io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data in place: a big-endian host needs byte swapping"
#endif

/* ------------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    size_t size;
} k_dtypes[DS_ST_DTYPE_COUNT] = {
    [DS_ST_BOOL] = {"BOOL", 1},     [DS_ST_U8] = {"U8", 1},
    [DS_ST_I8] = {"I8", 1},         [DS_ST_I16] = {"I16", 2},
    [DS_ST_U16] = {"U16", 2},       [DS_ST_F16] = {"F16", 2},
    [DS_ST_BF16] = {"BF16", 2},     [DS_ST_I32] = {"I32", 4},
    [DS_ST_U32] = {"U32", 4},       [DS_ST_F32] = {"F32", 4},
    [DS_ST_F64] = {"F64", 8},       [DS_ST_I64] = {"I64", 8},
    [DS_ST_U64] = {"U64", 8},       [DS_ST_F8_E4M3] = {"F8_E4M3", 1},
    [DS_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *ds_st_dtype_name(ds_st_dtype t) {
    if ((int)t < 0 || t >= DS_ST_DTYPE_COUNT) return "?";
    return k_dtypes[t].name;
}

size_t ds_st_dtype_size(ds_st_dtype t) {
    if ((int)t < 0 || t >= DS_ST_DTYPE_COUNT) return 0;
    return k_dtypes[t].size;
}

bool ds_st_dtype_parse(const char *s, ds_st_dtype *out) {
    for (int i = 0; i < DS_ST_DTYPE_COUNT; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *out = (ds_st_dtype)i;
            return true;
        }
    return false;
}

bool ds_st_dtype_to_ds(ds_st_dtype t, ds_dtype *out) {
    switch (t) {
    case DS_ST_F32: *out = DS_F32; return true;
    case DS_ST_F16: *out = DS_F16; return true;
    case DS_ST_BF16: *out = DS_BF16; return true;
    case DS_ST_F64: *out = DS_F64; return true;
    case DS_ST_I32: *out = DS_I32; return true;
    case DS_ST_I64: *out = DS_I64; return true;
    case DS_ST_U8: *out = DS_U8; return true;
    default: return false;
    }
}

bool ds_st_dtype_is_float(ds_st_dtype t) {
    return t == DS_ST_F32 || t == DS_ST_F16 || t == DS_ST_BF16 || t == DS_ST_F64;
}

/* ------------------------------------------------------------------ reader */

#define DS_MAX_WHAT 200

struct ds_st_file {
    char *path;
    int fd;
    uint64_t file_size;
    uint64_t data_start; /* 8 + N */
    int n;
    ds_st_tensor *tensors; /* header order */
    const ds_st_tensor **sorted; /* by name, for ds_st_find */
    int n_meta;
    char **meta_keys, **meta_values;
};

static void file_free(ds_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    free(f->sorted);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    free(f->path);
    free(f);
}

void ds_st_close(ds_st_file *f) { file_free(f); }

/* pread exactly n bytes at off; a short file is DS_ERR_CORRUPT (the header
 * promised those bytes), a failing read DS_ERR_IO. */
static ds_status pread_full(int fd, const char *path, void *dst, uint64_t n, uint64_t off,
                            const char *what) {
    char *p = dst;
    while (n > 0) {
        size_t want = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t got = pread(fd, p, want, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return DS_ERR(DS_ERR_IO, "%s: reading %s at byte %" PRIu64 ": %s", path, what, off,
                          strerror(errno));
        }
        if (got == 0)
            return DS_ERR(DS_ERR_CORRUPT, "%s: truncated: %s needs %" PRIu64
                          " more bytes at byte %" PRIu64 " but the file ends there",
                          path, what, n, off);
        p += got;
        off += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return DS_OK;
}

static bool json_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* Parse one {"dtype", "shape", "data_offsets"} entry into t. */
static ds_status parse_entry(const char *path, const char *name, json_t *v, ds_st_tensor *t) {
    if (!json_is_object(v))
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': header entry is not an object", path, name);
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    if (!ds_st_dtype_parse(json_string_value(dt), &t->dtype))
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': unknown dtype \"%s\"", path, name,
                      json_string_value(dt));
    if (!json_is_array(sh))
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    if (json_array_size(sh) > DS_ST_MAX_DIMS)
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': %zu dimensions, at most %d supported", path,
                      name, json_array_size(sh), DS_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (!json_uint(json_array_get(sh, (size_t)d), &dim))
            return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                          path, name, d);
        t->shape[d] = (int64_t)dim;
        if (__builtin_mul_overflow(t->numel, dim, &t->numel))
            return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': shape overflows 64 bits", path, name);
    }
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_uint(json_array_get(off, 0), &t->begin) || !json_uint(json_array_get(off, 1), &t->end))
        return DS_ERR(DS_ERR_CORRUPT,
                      "%s: tensor '%s': \"data_offsets\" must be [begin, end] of non-negative integers",
                      path, name);
    if (t->end < t->begin)
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                      "] end before begin", path, name, t->begin, t->end);
    uint64_t need;
    if (__builtin_mul_overflow(t->numel, (uint64_t)ds_st_dtype_size(t->dtype), &need) ||
        need != t->end - t->begin)
        return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                      "] hold %" PRIu64 " bytes but %" PRIu64 " x %s needs %" PRIu64,
                      path, name, t->begin, t->end, t->end - t->begin, t->numel,
                      ds_st_dtype_name(t->dtype), need);
    return DS_OK;
}

static int cmp_by_begin(const void *a, const void *b) {
    const ds_st_tensor *x = *(const ds_st_tensor *const *)a;
    const ds_st_tensor *y = *(const ds_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1; /* empty tensors first */
    return 0;
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp((*(const ds_st_tensor *const *)a)->name, (*(const ds_st_tensor *const *)b)->name);
}

/* The buffer must be exactly the tensors, back to back, as the reference
 * implementation requires: in range, no overlap, no gap, nothing after. */
static ds_status check_layout(ds_st_file *f) {
    uint64_t buf = f->file_size - f->data_start;
    for (int i = 0; i < f->n; i++) {
        const ds_st_tensor *t = &f->tensors[i];
        if (t->end > buf)
            return DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] out of range: the buffer has %" PRIu64 " bytes (file truncated?)",
                          f->path, t->name, t->begin, t->end, buf);
    }
    const ds_st_tensor **order = malloc(sizeof *order * (f->n > 0 ? (size_t)f->n : 1u));
    if (!order) return DS_ERR(DS_ERR_OOM, "%s: index of %d tensors", f->path, f->n);
    for (int i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_by_begin);
    uint64_t expect = 0;
    const char *prev = NULL;
    ds_status st = DS_OK;
    for (int k = 0; k < f->n && st == DS_OK; k++) {
        const ds_st_tensor *t = order[k];
        if (t->begin < expect)
            st = DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                        "] overlap tensor '%s' (ends at %" PRIu64 ")",
                        f->path, t->name, t->begin, t->end, prev, expect);
        else if (t->begin > expect)
            st = DS_ERR(DS_ERR_CORRUPT, "%s: tensor '%s': data_offsets begin at %" PRIu64
                        " but the previous tensor ends at %" PRIu64 ": %" PRIu64
                        " bytes belong to no tensor",
                        f->path, t->name, t->begin, expect, t->begin - expect);
        expect = t->end;
        prev = t->name;
    }
    if (st == DS_OK && expect != buf)
        st = DS_ERR(DS_ERR_CORRUPT, "%s: the buffer has %" PRIu64 " bytes but the tensors end at %"
                    PRIu64, f->path, buf, expect);
    if (st == DS_OK) {
        for (int i = 0; i < f->n; i++) f->sorted[i] = &f->tensors[i];
        qsort(f->sorted, (size_t)f->n, sizeof *f->sorted, cmp_by_name);
    }
    free(order);
    return st;
}

static ds_status parse_header(ds_st_file *f, const char *text, size_t len) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return DS_ERR(DS_ERR_CORRUPT, "%s: header JSON line %d column %d: %s", f->path, jerr.line,
                      jerr.column, jerr.text);
    ds_status st = DS_OK;
    if (!json_is_object(root)) {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: header is not a JSON object", f->path);
        goto done;
    }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    f->sorted = calloc(cap ? cap : 1, sizeof *f->sorted);
    if (!f->tensors || !f->sorted) {
        st = DS_ERR(DS_ERR_OOM, "%s: table of %zu tensors", f->path, cap);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                st = DS_ERR(DS_ERR_CORRUPT, "%s: \"__metadata__\" is not an object", f->path);
                goto done;
            }
            size_t m = json_object_size(v);
            f->meta_keys = calloc(m ? m : 1, sizeof(char *));
            f->meta_values = calloc(m ? m : 1, sizeof(char *));
            if (!f->meta_keys || !f->meta_values) {
                st = DS_ERR(DS_ERR_OOM, "%s: %zu metadata entries", f->path, m);
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    st = DS_ERR(DS_ERR_CORRUPT, "%s: __metadata__.%s is not a string", f->path, mk);
                    goto done;
                }
                f->meta_keys[f->n_meta] = strdup(mk);
                f->meta_values[f->n_meta] = strdup(json_string_value(mv));
                f->n_meta++;
                if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1]) {
                    st = DS_ERR(DS_ERR_OOM, "%s: metadata", f->path);
                    goto done;
                }
            }
            continue;
        }
        ds_st_tensor *t = &f->tensors[f->n];
        t->name = strdup(key);
        if (!t->name) {
            st = DS_ERR(DS_ERR_OOM, "%s: tensor name", f->path);
            goto done;
        }
        f->n++;
        st = parse_entry(f->path, key, v, t);
        if (st != DS_OK) goto done;
    }
done:
    json_decref(root);
    return st;
}

ds_status ds_st_open(const char *path, ds_st_file **out) {
    *out = NULL;
    ds_st_file *f = calloc(1, sizeof *f);
    if (!f) return DS_ERR(DS_ERR_OOM, "%s: reader", path);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) {
        free(f);
        return DS_ERR(DS_ERR_OOM, "%s: reader", path);
    }
    ds_status st = DS_OK;
    char *header = NULL;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        st = DS_ERR(DS_ERR_IO, "%s: stat: %s", path, strerror(errno));
        goto fail;
    }
    f->file_size = (uint64_t)sb.st_size;
    if (f->file_size < 8) {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: %" PRIu64 " bytes, shorter than the 8-byte header length",
                    path, f->file_size);
        goto fail;
    }
    uint64_t n;
    DS_TRY_GOTO(st, pread_full(f->fd, path, &n, 8, 0, "the header length"), fail);
    if (n > f->file_size - 8) {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: header length %" PRIu64 " runs past the end of the file (%"
                    PRIu64 " bytes)", path, n, f->file_size);
        goto fail;
    }
    if (n > DS_ST_MAX_HEADER) {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: header length %" PRIu64 " exceeds the format's limit of %u",
                    path, n, DS_ST_MAX_HEADER);
        goto fail;
    }
    if (n < 2) {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: header length %" PRIu64 " cannot hold a JSON object", path, n);
        goto fail;
    }
    f->data_start = 8 + n;
    header = malloc((size_t)n);
    if (!header) {
        st = DS_ERR(DS_ERR_OOM, "%s: header of %" PRIu64 " bytes", path, n);
        goto fail;
    }
    DS_TRY_GOTO(st, pread_full(f->fd, path, header, n, 8, "the header"), fail);
    if (header[0] != '{') {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: header does not start with '{'", path);
        goto fail;
    }
    DS_TRY_GOTO(st, parse_header(f, header, (size_t)n), fail);
    DS_TRY_GOTO(st, check_layout(f), fail);
    free(header);
    *out = f;
    return DS_OK;
fail:
    free(header);
    file_free(f);
    return st;
}

const char *ds_st_path(const ds_st_file *f) { return f->path; }
int ds_st_count(const ds_st_file *f) { return f->n; }
uint64_t ds_st_data_start(const ds_st_file *f) { return f->data_start; }

const ds_st_tensor *ds_st_tensor_at(const ds_st_file *f, int i) {
    if (i < 0 || i >= f->n) return NULL;
    return &f->tensors[i];
}

const ds_st_tensor *ds_st_find(const ds_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const ds_st_tensor *t = f->sorted[mid];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *ds_st_metadata(const ds_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

ds_status ds_st_read_raw(ds_st_file *f, const ds_st_tensor *t, uint64_t byte_off, uint64_t nbytes,
                         void *dst) {
    uint64_t size = t->end - t->begin;
    if (byte_off > size || nbytes > size - byte_off)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': bytes [%" PRIu64 ", +%" PRIu64
                      ") outside its %" PRIu64 " bytes", f->path, t->name, byte_off, nbytes, size);
    char what[DS_MAX_WHAT];
    snprintf(what, sizeof what, "tensor '%s'", t->name);
    DS_TRY(pread_full(f->fd, f->path, dst, nbytes, f->data_start + t->begin + byte_off, what));
    return DS_OK;
}

ds_status ds_st_read_f32(ds_st_file *f, const ds_st_tensor *t, uint64_t elem_off, uint64_t n,
                         float *dst) {
    if (!ds_st_dtype_is_float(t->dtype))
        return DS_ERR(DS_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, not a float dtype", f->path,
                      t->name, ds_st_dtype_name(t->dtype));
    if (elem_off > t->numel || n > t->numel - elem_off)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: tensor '%s': elements [%" PRIu64 ", +%" PRIu64
                      ") outside its %" PRIu64, f->path, t->name, elem_off, n, t->numel);
    size_t es = ds_st_dtype_size(t->dtype);
    if (t->dtype == DS_ST_F32) {
        DS_TRY(ds_st_read_raw(f, t, elem_off * 4, n * 4, dst));
        return DS_OK;
    }
    /* Convert through a bounded stack buffer: no allocation that grows with
     * the tensor. */
    enum { CHUNK_BYTES = 32 * 1024 };
    _Alignas(8) unsigned char chunk[CHUNK_BYTES];
    size_t per = CHUNK_BYTES / es;
    uint64_t done = 0;
    while (done < n) {
        size_t m = (n - done) < per ? (size_t)(n - done) : per;
        DS_TRY(ds_st_read_raw(f, t, (elem_off + done) * es, (uint64_t)m * es, chunk));
        float *o = dst + done;
        if (t->dtype == DS_ST_F16) {
            const uint16_t *s = (const uint16_t *)chunk;
            for (size_t i = 0; i < m; i++) o[i] = ds_f16_to_f32(s[i]);
        } else if (t->dtype == DS_ST_BF16) {
            const uint16_t *s = (const uint16_t *)chunk;
            for (size_t i = 0; i < m; i++) o[i] = ds_bf16_to_f32(s[i]);
        } else { /* F64 */
            const double *s = (const double *)chunk;
            for (size_t i = 0; i < m; i++) o[i] = (float)s[i];
        }
        done += m;
    }
    return DS_OK;
}

/* ------------------------------------------------------------------ index */

void ds_st_index_free(ds_st_index *ix) {
    if (!ix) return;
    for (int i = 0; i < ix->n; i++) {
        free(ix->names[i]);
        free(ix->files[i]);
    }
    for (int i = 0; i < ix->n_files; i++) free(ix->file_list[i]);
    free(ix->names);
    free(ix->files);
    free(ix->file_list);
    memset(ix, 0, sizeof *ix);
}

ds_status ds_st_index_read(const char *path, ds_st_index *out) {
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    json_error_t jerr;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root)
        return DS_ERR(DS_ERR_CORRUPT, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    ds_status st = DS_OK;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        st = DS_ERR(DS_ERR_CORRUPT, "%s: missing or non-object \"weight_map\"", path);
        goto done;
    }
    /* total_size is informational: a value that is not a byte count (a
     * string, a negative, a real of 2^64 or more, whose conversion to
     * uint64_t would be undefined) reads as absent */
    json_t *total = json_object_get(json_object_get(root, "metadata"), "total_size");
    if (json_is_integer(total) && json_integer_value(total) >= 0)
        out->total_size = (uint64_t)json_integer_value(total);
    else if (json_is_real(total) && json_real_value(total) >= 0 &&
             json_real_value(total) < 18446744073709551616.0)
        out->total_size = (uint64_t)json_real_value(total);
    size_t cap = json_object_size(wm);
    out->names = calloc(cap ? cap : 1, sizeof(char *));
    out->files = calloc(cap ? cap : 1, sizeof(char *));
    out->file_list = calloc(cap ? cap : 1, sizeof(char *));
    if (!out->names || !out->files || !out->file_list) {
        st = DS_ERR(DS_ERR_OOM, "%s: %zu entries", path, cap);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            st = DS_ERR(DS_ERR_CORRUPT, "%s: weight_map.%s is not a string", path, key);
            goto done;
        }
        const char *file = json_string_value(v);
        if (file[0] == '\0' || strchr(file, '/') || strcmp(file, "..") == 0) {
            st = DS_ERR(DS_ERR_CORRUPT, "%s: weight_map.%s names \"%s\", not a file beside the index",
                        path, key, file);
            goto done;
        }
        out->names[out->n] = strdup(key);
        out->files[out->n] = strdup(file);
        out->n++;
        if (!out->names[out->n - 1] || !out->files[out->n - 1]) {
            st = DS_ERR(DS_ERR_OOM, "%s: index entry", path);
            goto done;
        }
        bool seen = false;
        for (int i = 0; i < out->n_files && !seen; i++) seen = strcmp(out->file_list[i], file) == 0;
        if (!seen) {
            out->file_list[out->n_files] = strdup(file);
            if (!out->file_list[out->n_files]) {
                st = DS_ERR(DS_ERR_OOM, "%s: index entry", path);
                goto done;
            }
            out->n_files++;
        }
    }
done:
    json_decref(root);
    if (st != DS_OK) ds_st_index_free(out);
    return st;
}
