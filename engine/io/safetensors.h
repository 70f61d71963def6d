/* safetensors files: a validating reader and a streaming, atomic writer.
 *
 * The format (https://github.com/huggingface/safetensors):
 *
 *     u64 little-endian N | N bytes of JSON header | byte buffer
 *
 * The header is one JSON object: {"NAME": {"dtype": "F32", "shape": [2, 3],
 * "data_offsets": [BEGIN, END]}, ..., "__metadata__": {"k": "v"}} with
 * offsets relative to the start of the buffer. Hugging Face's writer pads the
 * header with spaces so that 8 + N is a multiple of 8; we do the same.
 *
 * Reading:
 *
 *     ds_st_file *f;
 *     DS_TRY(ds_st_open("model.safetensors", &f));
 *     const ds_st_tensor *t = ds_st_find(f, "bert.pooler.dense.weight");
 *     float *w = malloc(t->numel * sizeof(float));
 *     DS_TRY(ds_st_read_f32(f, t, 0, t->numel, w));   // F16/BF16/F64 converted
 *     ds_st_close(f);
 *
 * ds_st_open checks the whole header before returning: the JSON, every
 * dtype and shape, and that the data offsets lie inside the file, match
 * shape * dtype size, do not overlap and leave no gap (the buffer is exactly
 * the tensors, as the reference implementation requires). Every failure is
 * DS_ERR_CORRUPT with the file name and, where there is one, the tensor name.
 * Tensor data is read on demand with pread, so a reader holds only the header.
 *
 * Writing streams: the caller declares every tensor first (the header is
 * written at once), then hands the bytes in declaration order in pieces of
 * any size, so a converter holds at most one chunk in memory:
 *
 *     ds_st_decl d[2] = {{"a", DS_ST_F32, 2, {3, 4}}, {"b", DS_ST_BF16, 1, {7}}};
 *     ds_st_writer *w;
 *     DS_TRY(ds_st_writer_open("out.safetensors", d, 2, NULL, 0, &w));
 *     DS_TRY(ds_st_writer_write_f32(w, a_values, 12));  // may be split in pieces
 *     DS_TRY(ds_st_writer_write_f32(w, b_values, 7));   // converted to bf16
 *     DS_TRY(ds_st_writer_finish(w));                    // fsync + rename: atomic
 *
 * The bytes go to "PATH.tmp"; finish fsyncs it, renames it to PATH and fsyncs
 * the directory, so PATH is either the old file or the complete new one.
 *
 * Sharding as Hugging Face does it (model-00001-of-00003.safetensors + a
 * model.safetensors.index.json naming each tensor's file): ds_st_plan_shards
 * cuts an ordered tensor list by a byte budget, ds_st_sharded_* streams the
 * tensors through the shard files in order and writes the index last.
 *
 * Byte order: the format is little-endian; this code assumes a little-endian
 * host (x86-64, aarch64) and refuses to build elsewhere. */
#ifndef DS_IO_SAFETENSORS_H
#define DS_IO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_ST_MAX_DIMS 8
/* The reference implementation refuses headers larger than this. */
#define DS_ST_MAX_HEADER (100u * 1024u * 1024u)

/* Every dtype the format defines. */
typedef enum ds_st_dtype {
    DS_ST_BOOL = 0,
    DS_ST_U8,
    DS_ST_I8,
    DS_ST_I16,
    DS_ST_U16,
    DS_ST_F16,
    DS_ST_BF16,
    DS_ST_I32,
    DS_ST_U32,
    DS_ST_F32,
    DS_ST_F64,
    DS_ST_I64,
    DS_ST_U64,
    DS_ST_F8_E4M3,
    DS_ST_F8_E5M2,
    DS_ST_DTYPE_COUNT
} ds_st_dtype;

/* "F32", "BF16", ... as written in headers; "?" for an invalid value. */
const char *ds_st_dtype_name(ds_st_dtype t);
/* Bytes per element; 0 for an invalid value. */
size_t ds_st_dtype_size(ds_st_dtype t);
/* Parse a header dtype string; false when unknown. */
bool ds_st_dtype_parse(const char *s, ds_st_dtype *out);
/* The engine's dtype for F32/F16/BF16/F64/I32/I64/U8; false for the others. */
bool ds_st_dtype_to_ds(ds_st_dtype t, ds_dtype *out);
/* Whether ds_st_read_f32 / ds_st_writer_write_f32 convert this dtype
 * (F32, F16, BF16, F64). */
bool ds_st_dtype_is_float(ds_st_dtype t);

/* ------------------------------------------------------------------ reader */

typedef struct ds_st_tensor {
    const char *name;          /* owned by the file, valid until ds_st_close */
    ds_st_dtype dtype;
    int ndim;                  /* 0 for a scalar */
    int64_t shape[DS_ST_MAX_DIMS];
    uint64_t numel;            /* product of shape (1 for a scalar) */
    uint64_t begin, end;       /* byte offsets relative to the buffer start */
} ds_st_tensor;

typedef struct ds_st_file ds_st_file;

/* Open and validate `path`. *out is owned by the caller (ds_st_close).
 * Errors: DS_ERR_IO when the file cannot be opened or read; DS_ERR_CORRUPT
 * "<path>: ..." (and the tensor name) for every format problem: a header
 * length past the end of the file or above DS_ST_MAX_HEADER, invalid JSON
 * (with jansson's line and column), an entry without dtype/shape/offsets,
 * an unknown dtype, a negative dimension, offsets outside the buffer, not
 * matching shape * dtype size, overlapping or leaving a gap, a buffer longer
 * than its tensors, a "__metadata__" value that is not a string. */
ds_status ds_st_open(const char *path, ds_st_file **out);
void ds_st_close(ds_st_file *f); /* safe on NULL */

const char *ds_st_path(const ds_st_file *f);
/* Tensors in header order (the order of the JSON object). */
int ds_st_count(const ds_st_file *f);
const ds_st_tensor *ds_st_tensor_at(const ds_st_file *f, int i);
/* NULL when absent (no error recorded). */
const ds_st_tensor *ds_st_find(const ds_st_file *f, const char *name);
/* A "__metadata__" value, NULL when absent. Valid until ds_st_close. */
const char *ds_st_metadata(const ds_st_file *f, const char *key);
/* Byte offset of the buffer inside the file (8 + N). */
uint64_t ds_st_data_start(const ds_st_file *f);

/* Copy bytes [byte_off, byte_off + nbytes) of tensor t, as stored, into dst.
 * Errors: DS_ERR_INVALID_ARG for a range outside the tensor, DS_ERR_CORRUPT
 * when the file is shorter than its header said (truncated since opening),
 * DS_ERR_IO for a failed read. */
ds_status ds_st_read_raw(ds_st_file *f, const ds_st_tensor *t, uint64_t byte_off, uint64_t nbytes,
                         void *dst);

/* Elements [elem_off, elem_off + n) of tensor t as fp32 into dst, converting
 * F16, BF16 and F64 (rounded to nearest). Reads in bounded chunks: no
 * allocation proportional to the tensor. Errors: as ds_st_read_raw, and
 * DS_ERR_UNSUPPORTED for a non-float dtype (naming file, tensor, dtype). */
ds_status ds_st_read_f32(ds_st_file *f, const ds_st_tensor *t, uint64_t elem_off, uint64_t n,
                         float *dst);

/* ------------------------------------------------------------------ writer */

/* One tensor to write: name (copied), dtype and shape. */
typedef struct ds_st_decl {
    const char *name;
    ds_st_dtype dtype;
    int ndim;
    int64_t shape[DS_ST_MAX_DIMS];
} ds_st_decl;

/* One "__metadata__" entry (strings, copied). */
typedef struct ds_st_kv {
    const char *key;
    const char *value;
} ds_st_kv;

/* Bytes of one declared tensor (numel * dtype size); 0 for invalid input. */
uint64_t ds_st_decl_bytes(const ds_st_decl *d);

typedef struct ds_st_writer ds_st_writer;

/* Create "<path>.tmp", write the header for tensors `decl[0..n)` (laid out
 * in that order) and the metadata `meta[0..n_meta)`. Errors:
 * DS_ERR_INVALID_ARG for an empty or duplicate name, the name
 * "__metadata__", an invalid dtype, a negative dimension or ndim outside
 * 0..DS_ST_MAX_DIMS (all named); DS_ERR_IO when the file cannot be created
 * or written. On error nothing is left behind. */
ds_status ds_st_writer_open(const char *path, const ds_st_decl *decl, int n, const ds_st_kv *meta,
                            int n_meta, ds_st_writer **out);

/* Append raw bytes (already in the tensors' dtypes) in declaration order; a
 * piece may end inside a tensor or span several. Errors: DS_ERR_INVALID_ARG
 * when more bytes arrive than were declared; DS_ERR_IO on a write failure. */
ds_status ds_st_writer_write(ds_st_writer *w, const void *bytes, size_t nbytes);

/* Append n fp32 values to the current tensor, converted to its dtype (F32,
 * F16, BF16 round to nearest even, F64 exact). The n values must lie inside
 * one tensor, which must be of a float dtype, and the current tensor must
 * not have a half-written element. Errors: DS_ERR_INVALID_ARG naming the
 * tensor otherwise; DS_ERR_IO on a write failure. */
ds_status ds_st_writer_write_f32(ds_st_writer *w, const float *values, size_t n);

/* Bytes of the buffer written so far. */
uint64_t ds_st_writer_written(const ds_st_writer *w);

/* Name of the tensor the next byte belongs to; NULL once all were written. */
const char *ds_st_writer_current(const ds_st_writer *w);

/* Check that every declared byte was written, flush, fsync, rename
 * "<path>.tmp" to path and fsync the directory. Frees w whatever the result;
 * on error the temporary file is removed and path is left as it was.
 * Errors: DS_ERR_INVALID_ARG naming the first tensor short of bytes,
 * DS_ERR_IO from fsync/rename. */
ds_status ds_st_writer_finish(ds_st_writer *w);

/* Give up: remove "<path>.tmp" and free w. Safe on NULL. */
void ds_st_writer_abort(ds_st_writer *w);

/* ------------------------------------------------------------------ shards */

/* Cut tensors of sizes bytes[0..n) (in order) into shards of at most
 * max_shard_bytes each, as Hugging Face's split_torch_state_dict_into_shards
 * does, with one difference: a tensor larger than the budget gets a shard of
 * its own *in its place*, so shards stay in tensor order and can be written
 * one after another. shard_of[i] receives tensor i's shard (0-based);
 * *n_shards the count (1 when everything fits, also for n == 0).
 * Errors: DS_ERR_INVALID_ARG for max_shard_bytes == 0 or n < 0. */
ds_status ds_st_plan_shards(const uint64_t *bytes, int n, uint64_t max_shard_bytes, int *shard_of,
                            int *n_shards);

/* Parse a size as transformers' max_shard_size does: "5GB" = 5e9, "500MB",
 * "10KB" (decimal), "2GiB" = 2^31, "MiB", "KiB" (binary), a plain byte count
 * "1000000". Errors: DS_ERR_INVALID_ARG naming the text. */
ds_status ds_st_parse_size(const char *text, uint64_t *out);

/* "model-00002-of-00005.safetensors" for (prefix "model", 1, 5); with one
 * shard "model.safetensors", the name Hugging Face uses then. */
void ds_st_shard_name(const char *prefix, int shard, int n_shards, char *buf, size_t cap);

typedef struct ds_st_sharded ds_st_sharded;

/* Stream tensors decl[0..n) into dir as HF's sharded layout, shards cut by
 * ds_st_plan_shards(max_shard_bytes); max_shard_bytes == 0 means one file.
 * With more than one shard, "<prefix>.safetensors.index.json" is written
 * (atomically, last, by finish): {"metadata": {"total_size": BYTES},
 * "weight_map": {NAME: FILE}}. Every shard carries `meta`. Each shard is
 * written through ds_st_writer (atomic), several as NAME.partial until all
 * are complete: an earlier conversion's output in dir stays whole until
 * finish puts this one in place (its index removed, the shards renamed,
 * the new index). Errors as ds_st_writer_open. */
ds_status ds_st_sharded_open(const char *dir, const char *prefix, const ds_st_decl *decl, int n,
                             uint64_t max_shard_bytes, const ds_st_kv *meta, int n_meta,
                             ds_st_sharded **out);
/* As ds_st_writer_write / _write_f32, moving to the next shard as needed. */
ds_status ds_st_sharded_write(ds_st_sharded *w, const void *bytes, size_t nbytes);
ds_status ds_st_sharded_write_f32(ds_st_sharded *w, const float *values, size_t n);
int ds_st_sharded_count(const ds_st_sharded *w); /* shards planned */
/* Finish the last shard and write the index, then remove what an earlier
 * conversion into the folder left under the same prefix and this one did
 * not write (shards of another count, PREFIX.safetensors beside shards, an
 * index beside a single file), as transformers' save_pretrained does. Frees
 * w whatever the result; on an error before the cleanup every shard this
 * writer finished is removed too, as by abort; a file the cleanup could not
 * remove fails it with the new output complete and kept. */
ds_status ds_st_sharded_finish(ds_st_sharded *w);
/* Remove the unfinished shard's temporary file and every shard this writer
 * finished (a half set of shards is not an output), and free w. */
void ds_st_sharded_abort(ds_st_sharded *w);

/* ------------------------------------------------------------------ index */

/* A model.safetensors.index.json read back. */
typedef struct ds_st_index {
    int n;             /* entries of weight_map, in file order */
    char **names;      /* tensor names */
    char **files;      /* file name per tensor (relative to the index's folder) */
    int n_files;       /* distinct files, in order of first appearance */
    char **file_list;
    uint64_t total_size; /* metadata.total_size, 0 when absent or not a byte count */
} ds_st_index;

/* Read an index. Errors: DS_ERR_IO when unreadable, DS_ERR_CORRUPT naming
 * the file for invalid JSON, a missing "weight_map", a non-string file name,
 * or a file name with a '/' (an index names files beside itself). */
ds_status ds_st_index_read(const char *path, ds_st_index *out);
void ds_st_index_free(ds_st_index *ix);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_SAFETENSORS_H */
