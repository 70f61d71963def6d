/* Checkpoint folders without an engine: find the latest tag, verify a
 * checkpoint, read its client state, and rebuild the full fp32 weights as
 * safetensors (DeepSpeed's zero_to_fp32.py, streaming).
 *
 *   ds_z2f_opts o;
 *   ds_z2f_opts_defaults(&o);                   // tag from DIR/latest, fp32
 *   o.max_shard_bytes = 5000000000;             // "5GB", as transformers
 *   DS_TRY(ds_zero_to_fp32("ckpt", "model_dir", &o, NULL));
 *
 * The converter walks the parameters in flat order and copies each one frame
 * by frame from the shard files that hold it into the safetensors writer:
 * memory is two frames (8 MiB by default) plus the reader's buffers, whatever
 * the model size; no tensor is ever held whole. It reads only the weights
 * section of each shard file (the moments are never touched) and checks the
 * checksum of every frame it reads, after the completeness check of
 * ds_checkpoint_verify (files present, sizes, headers, indexes, world size).
 * The values are the fp32 master weights, bit-identical to what
 * ds_get_param returns in the saving run. None of these functions needs MPI. */
#ifndef DS_IO_ZERO_TO_FP32_H
#define DS_IO_ZERO_TO_FP32_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read DIR/latest into tag[cap] (NUL-terminated), verifying its checksum.
 * Errors: DS_ERR_IO when there is no DIR/latest (nothing saved there yet),
 * DS_ERR_CORRUPT when its checksum does not match or it does not hold a
 * valid tag. */
ds_status ds_checkpoint_latest(const char *dir, char *tag, size_t cap);

/* Check DIR/TAG completely (tag NULL: latest): the checksums of `latest` and
 * meta.json (engine/io/ckpt_seal.h, the verifier every reader shares), every
 * shard file present with the recorded size, world size, rank, range, index
 * checksum, no extra file, and the checksum of every frame of every section
 * (stored bytes; nothing is decompressed). Errors name the file: DS_ERR_IO for a
 * missing file, DS_ERR_CORRUPT for everything else. */
ds_status ds_checkpoint_verify(const char *dir, const char *tag);

/* The client_state_json given to ds_save_checkpoint, as compact JSON in a
 * malloc'd string the caller frees (*out = NULL when none was given). */
ds_status ds_checkpoint_client_state(const char *dir, const char *tag, char **out);

typedef struct ds_z2f_opts {
    uint32_t struct_size;     /* set by ds_z2f_opts_defaults */
    const char *tag;          /* NULL: the tag DIR/latest names */
    uint64_t max_shard_bytes; /* folder output: shard budget; 0 = one file.
                                 Default 5e9 ("5GB", transformers' default) */
    ds_dtype dtype;           /* DS_F32 (default), DS_F16 or DS_BF16 (round to
                                 nearest even) */
} ds_z2f_opts;

void ds_z2f_opts_defaults(ds_z2f_opts *o);

typedef struct ds_z2f_report {
    int n_tensors;
    int n_files;              /* safetensors files written */
    int64_t n_elements;
    uint64_t bytes_written;   /* tensor bytes (headers excluded) */
    uint64_t bytes_read;      /* from the shard files */
    char tag[256];
} ds_z2f_report;

/* Convert checkpoint DIR (tag opts->tag or latest) into `out`:
 *   out ending in ".safetensors"  one file, whatever the size;
 *   anything else                 a folder (created) holding model.safetensors,
 *                                 or model-00001-of-0000N.safetensors and
 *                                 model.safetensors.index.json as Hugging Face
 *                                 writes them when the tensors exceed
 *                                 max_shard_bytes.
 * Every output file appears atomically (written as .tmp, fsynced, renamed).
 * Tensors keep the model's Hugging Face names and shapes, in flat order.
 * report may be NULL. Errors: as ds_checkpoint_verify for the checkpoint,
 * DS_ERR_CORRUPT for a frame whose checksum fails while converting,
 * DS_ERR_NONFINITE for a NaN or inf weight (naming the tensor and element),
 * DS_ERR_IO
 * for the output, DS_ERR_INVALID_ARG for options. On error nothing it
 * created is left: the unfinished file, the shards already finished, and the
 * folders it made for OUT are removed (a folder that existed stays). */
ds_status ds_zero_to_fp32(const char *dir, const char *out, const ds_z2f_opts *opts,
                          ds_z2f_report *report);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_ZERO_TO_FP32_H */
