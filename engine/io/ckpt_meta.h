/* A checkpoint's meta.json: everything but the tensors.
 *
 *   DIR/TAG/meta.json                     this file (written last, by rank 0)
 *   DIR/TAG/shard-00000-of-00002.dsck     rank 0's partition (engine/io/ckpt_file.h)
 *   DIR/TAG/shard-00001-of-00002.dsck
 *   DIR/latest                            the newest complete TAG
 *
 * meta.json holds: the format version; the resolved ds_config as JSON; the
 * saving world size, ZeRO stage, precision and optimizer; the flat layout
 * (numel, used, padded, part: offsets do not depend on the world size, only
 * padded and part do, which is what lets M ranks re-cut what N ranks wrote);
 * the parameter table (names, shapes, flat offsets, numel); one entry per
 * shard file (rank, flat range, size in bytes, index checksum, so a
 * missing, extra, truncated or swapped file is named before anything is
 * read); the step counters; the scheduler position; the loss scaler; the RNG
 * seed; the data-loader position (epoch and global samples consumed in it);
 * the last step's report; and the caller's client state (any JSON).
 *
 * 64-bit unsigned values (seed, checksums) are written as hex strings,
 * reals with 17 significant digits (so they read back to the same double),
 * non-finite reals (a diverged loss) as null. The last member, "checksum",
 * is the XXH64 of every byte before it (engine/io/ckpt_seal.h). */
#ifndef DS_IO_CKPT_META_H
#define DS_IO_CKPT_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/module.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: meta.json and `latest` carry a checksum (engine/io/ckpt_seal.h).
 * Version 1 checkpoints are refused: their meta.json cannot be told apart
 * from an edited one. */
#define DS_CKPT_FORMAT_VERSION 2
#define DS_CKPT_META_FILE "meta.json"
#define DS_CKPT_TAG_MAX 200

typedef struct ds_ckpt_param_entry {
    char name[DS_MAX_NAME];
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    int64_t offset, numel; /* flat elements [offset, offset + numel) */
} ds_ckpt_param_entry;

typedef struct ds_ckpt_shard_entry {
    char file[64];         /* name inside the tag directory */
    int rank;
    int64_t lo, hi;        /* flat range of the partition */
    uint64_t bytes;        /* file size */
    uint64_t index_hash;   /* the file's index checksum (its trailer's) */
} ds_ckpt_shard_entry;

typedef struct ds_ckpt_meta {
    int format_version;
    char tag[DS_CKPT_TAG_MAX + 1];
    char engine_version[32];
    char *config_json;     /* owned: the saving run's resolved config */
    int world, stage;
    char precision[8];     /* "fp32" | "fp16" | "bf16" */
    char optimizer[16];    /* "Adam" | "AdamW" | "SGD" */
    int moments;           /* optimizer state sections stored, 0..2 */
    int64_t numel, used, padded, part;
    int align;             /* DS_FLAT_ALIGN of the saving build */
    uint32_t frame_elems;
    int n_params;
    ds_ckpt_param_entry *params; /* owned, [n_params] */
    ds_ckpt_shard_entry *shards; /* owned, [world] */

    /* progress */
    int64_t global_step, applied_steps, skipped_steps, micro_steps, samples;
    int64_t gradient_accumulation_steps, micro_batch;
    char scheduler[32];          /* the type's name, for messages */
    int64_t sched_iteration;     /* DeepSpeed's last_batch_iteration after the last step */
    bool scaler_enabled;
    double loss_scale;
    int cur_hysteresis;
    int64_t scaler_cur_iter, scaler_last_overflow_iter;
    uint64_t seed;
    bool has_loader;             /* the engine sampled its own data */
    int64_t epoch, epoch_samples, dataset_size;
    double last_loss, last_lr, last_grad_norm; /* NAN when not finite */
    bool last_skipped;
    char *client_state_json;     /* owned, NULL when none */
} ds_ckpt_meta;

/* Write m to path atomically, sealed with its checksum: path.tmp, fsync,
 * rename, fsync the folder.
 * config_json and client_state_json must be valid JSON (or NULL).
 * Errors: DS_ERR_INVALID_ARG for invalid embedded JSON (naming which);
 * DS_ERR_IO from the file system. */
ds_status ds_ckpt_meta_write(const char *path, const ds_ckpt_meta *m);

/* Read and check path into *out (zeroed first; free with
 * ds_ckpt_meta_free, also after a failure): its checksum first
 * (ds_ckpt_read_sealed), then the content. Errors: DS_ERR_IO when
 * unreadable; DS_ERR_CORRUPT naming the file: a checksum that does not match
 * (any edit), or the key for invalid JSON,
 * a missing key or a value of the wrong type or range; DS_ERR_UNSUPPORTED
 * for another format version. */
ds_status ds_ckpt_meta_read(const char *path, ds_ckpt_meta *out);

void ds_ckpt_meta_free(ds_ckpt_meta *m);

/* DS_OK when `text` is one valid JSON value; else DS_ERR_INVALID_ARG naming
 * `what`, jansson's message, line and column. */
ds_status ds_ckpt_json_check(const char *text, const char *what);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_CKPT_META_H */
