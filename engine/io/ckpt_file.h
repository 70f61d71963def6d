/* Checkpoint shard files: one per rank, fp32 state of a flat range in
 * zstd-compressed frames with checksums, and an index at the end so a reader
 * decompresses only the frames of the range it wants.
 *
 * Layout (integers little-endian):
 *
 *   header, 64 bytes
 *      0  "DSCKSHD1"       magic
 *      8  u32 version      DS_CKPT_FILE_VERSION
 *     12  u32 64           header size
 *     16  u32 rank, u32 world   the saving rank and world size
 *     24  i64 lo, i64 hi   the flat elements [lo, hi) this file covers
 *     40  u32 frame_elems  raw fp32 elements per frame (the last frame of a
 *                          section may hold fewer)
 *     44  u32 0, u64 0     reserved
 *     56  u64 XXH64 of bytes 0..56
 *   frames                 zstd frames back to back, section after section,
 *                          in the order they were written (weights first, so
 *                          a converter reading only weights reads one
 *                          contiguous byte range per file)
 *   index
 *     u32 n_sections, u32 0
 *     per section, 32 bytes: u32 id, u32 filter, i64 lo, i64 hi, u64 n_frames
 *     per frame, 32 bytes, sections in order:
 *                          u64 file offset, u32 stored bytes, u32 elements,
 *                          i64 first element, u64 XXH64 of the stored bytes
 *   trailer, 32 bytes (the last of the file)
 *     u64 index offset, u64 index bytes, u64 XXH64 of the index, "DSCKEND1"
 *
 * A frame holds the fp32 values of elements [first, first + elements) of one
 * section; with DS_CKPT_FILTER_SHUFFLE the four byte planes of the floats are
 * stored one after the other before compression (exponent bytes then sit
 * together, which zstd compresses far better than interleaved floats). Each
 * zstd frame also carries zstd's own content checksum, so a decompressed
 * frame is checked twice: the stored bytes against the index (XXH64, which
 * --verify checks without decompressing) and the raw bytes by zstd.
 *
 * A file is written once, by one writer, front to back; the index and the
 * trailer come last, so a file cut short anywhere lacks its trailer and is
 * refused as truncated. Crash safety of a whole checkpoint (temporary
 * directory, fsync, rename) is the caller's (engine/engine_ckpt.c).
 *
 *     ds_ckpt_writer *w;
 *     ds_ckpt_header h = {.rank = r, .world = n, .lo = lo, .hi = hi};
 *     DS_TRY(ds_ckpt_writer_open(path, &h, NULL, &w));     // default options
 *     DS_TRY(ds_ckpt_writer_begin(w, DS_CKPT_WEIGHTS, lo, hi));
 *     DS_TRY(ds_ckpt_writer_append(w, chunk, n));           // any piece sizes
 *     DS_TRY(ds_ckpt_writer_end(w));
 *     DS_TRY(ds_ckpt_writer_finish(w, &info));              // index, fsync, close
 *
 *     ds_ckpt_reader *r;
 *     DS_TRY(ds_ckpt_reader_open(path, &r));                // header + index only
 *     DS_TRY(ds_ckpt_read(r, DS_CKPT_WEIGHTS, a, b, dst));   // frames over [a, b)
 *     ds_ckpt_reader_close(r);
 *
 * Errors: DS_ERR_IO for a failing system call (with errno's text and the
 * path), DS_ERR_CORRUPT for anything wrong inside a file, always naming the
 * file (and the section, frame and offset where there is one). */
#ifndef DS_IO_CKPT_FILE_H
#define DS_IO_CKPT_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_CKPT_FILE_VERSION 1
#define DS_CKPT_HEADER_BYTES 64
#define DS_CKPT_TRAILER_BYTES 32
/* Default raw frame size: 4 MiB of fp32. Large enough that zstd and the
 * per-frame overhead (32 index bytes, a pread) are negligible, small enough
 * that an elastic load re-reads at most a few MiB at each partition edge. */
#define DS_CKPT_FRAME_ELEMS_DEFAULT (1u << 20)
#define DS_CKPT_FRAME_ELEMS_MIN 16u
#define DS_CKPT_FRAME_ELEMS_MAX (1u << 26)

/* Section ids: the fp32 states a checkpoint stores (same order and values as
 * zero/zero.h's ds_zero_state, which the engine maps onto them). */
typedef enum ds_ckpt_section {
    DS_CKPT_WEIGHTS = 0, /* fp32 master weights / fp32 parameters */
    DS_CKPT_MOMENT0 = 1, /* Adam exp_avg, SGD momentum */
    DS_CKPT_MOMENT1 = 2, /* Adam exp_avg_sq */
    /* A rank's own state, not a part of the flat space (1-bit Adam's error
     * feedback): elements [0, n) whatever the header's range says. */
    DS_CKPT_RANK_STATE = 3,
    DS_CKPT_SECTION_COUNT
} ds_ckpt_section;

/* "weights", "moment0", "moment1", "rank_state", "?" */
const char *ds_ckpt_section_name(uint32_t id);

typedef enum ds_ckpt_filter {
    DS_CKPT_FILTER_NONE = 0,
    DS_CKPT_FILTER_SHUFFLE = 1, /* byte planes of the fp32 values (see above) */
} ds_ckpt_filter;

typedef struct ds_ckpt_header {
    uint32_t rank, world;
    int64_t lo, hi;
    uint32_t frame_elems; /* set by the writer from the options */
} ds_ckpt_header;

typedef struct ds_ckpt_write_opts {
    int level;            /* zstd level; default 1 (see bench/RESULTS.md) */
    ds_ckpt_filter filter;/* default DS_CKPT_FILTER_SHUFFLE */
    uint32_t frame_elems; /* default DS_CKPT_FRAME_ELEMS_DEFAULT */
} ds_ckpt_write_opts;

void ds_ckpt_write_opts_defaults(ds_ckpt_write_opts *o);

/* What a finished file is, for meta.json. */
typedef struct ds_ckpt_file_info {
    uint64_t file_bytes;
    uint64_t index_hash; /* XXH64 of the index, also in the trailer */
    uint64_t raw_bytes;  /* fp32 bytes in all sections */
} ds_ckpt_file_info;

/* ------------------------------------------------------------------ writer */

typedef struct ds_ckpt_writer ds_ckpt_writer;

/* Create `path` (truncating a file there) and write the header. opts may be
 * NULL for the defaults. Errors: DS_ERR_INVALID_ARG for lo > hi or options
 * out of range, DS_ERR_IO when the file cannot be created. On error nothing
 * is left behind. */
ds_status ds_ckpt_writer_open(const char *path, const ds_ckpt_header *h,
                              const ds_ckpt_write_opts *opts, ds_ckpt_writer **out);
/* Start section `id` covering elements [lo, hi) (inside the header's range,
 * or [0, n) for DS_CKPT_RANK_STATE; each id at most once). */
ds_status ds_ckpt_writer_begin(ds_ckpt_writer *w, uint32_t id, int64_t lo, int64_t hi);
/* Append n values of the current section (pieces of any size, in order).
 * Errors: DS_ERR_INVALID_ARG for more values than the section holds. */
ds_status ds_ckpt_writer_append(ds_ckpt_writer *w, const float *v, size_t n);
/* Close the current section; it must have received exactly hi - lo values. */
ds_status ds_ckpt_writer_end(ds_ckpt_writer *w);
/* Write the index and the trailer, fsync and close. Frees w whatever the
 * result; on error the file is removed. info may be NULL. */
ds_status ds_ckpt_writer_finish(ds_ckpt_writer *w, ds_ckpt_file_info *info);
/* Close and remove the file, free w. Safe on NULL. */
void ds_ckpt_writer_abort(ds_ckpt_writer *w);

/* ------------------------------------------------------------------ reader */

typedef struct ds_ckpt_reader ds_ckpt_reader;

/* Open `path` and check header, trailer and index (hashes, frames inside the
 * file and not overlapping, each section's frames covering its range in
 * order). Reads only the header, the trailer and the index; buffers for
 * frames are allocated on the first read. Errors: DS_ERR_IO (cannot open or
 * read), DS_ERR_CORRUPT naming the file: bad magic or version, a header or
 * index checksum mismatch, a missing trailer (truncated or never finished). */
ds_status ds_ckpt_reader_open(const char *path, ds_ckpt_reader **out);
void ds_ckpt_reader_close(ds_ckpt_reader *r); /* safe on NULL */

const char *ds_ckpt_reader_path(const ds_ckpt_reader *r);
const ds_ckpt_header *ds_ckpt_reader_header(const ds_ckpt_reader *r);
void ds_ckpt_reader_info(const ds_ckpt_reader *r, ds_ckpt_file_info *out);
/* Whether section `id` exists; *lo / *hi (may be NULL) receive its range. */
bool ds_ckpt_reader_section(const ds_ckpt_reader *r, uint32_t id, int64_t *lo, int64_t *hi);

/* Bytes section id occupies in the file (its compressed frames); 0 when
 * absent. With (hi - lo) * 4 raw bytes this gives the section's zstd ratio. */
uint64_t ds_ckpt_reader_section_stored(const ds_ckpt_reader *r, uint32_t id);

/* Values of elements [lo, hi) of section id into dst (hi - lo floats),
 * reading and decompressing only the frames that overlap; the last frame
 * decompressed is kept, so consecutive small reads decompress each frame
 * once. Errors: DS_ERR_INVALID_ARG for a missing section or a range outside
 * it; DS_ERR_CORRUPT naming file, section, frame and offset for a checksum
 * mismatch or a frame that does not decompress to its size; DS_ERR_IO. */
ds_status ds_ckpt_read(ds_ckpt_reader *r, uint32_t id, int64_t lo, int64_t hi, float *dst);

/* Check the stored-bytes checksum of every frame of section id that overlaps
 * [lo, hi), without decompressing. Errors as ds_ckpt_read. */
ds_status ds_ckpt_verify_range(ds_ckpt_reader *r, uint32_t id, int64_t lo, int64_t hi);
/* ds_ckpt_verify_range over every section, whole. */
ds_status ds_ckpt_verify_all(ds_ckpt_reader *r);

/* Free the frame buffers (kept otherwise until close); the next read
 * allocates them again. For a converter walking many files in turn. */
void ds_ckpt_reader_drop_buffers(ds_ckpt_reader *r);

/* Read and check only the header of `path` (magic, version, checksum): what
 * a completeness check reports when a file is not the one expected (a file of
 * another world size renamed into place is refused by size first; its header
 * says why). Errors as ds_ckpt_reader_open. */
ds_status ds_ckpt_read_header(const char *path, ds_ckpt_header *out);

/* ------------------------------------------------------------------ counters */

/* Process-wide totals of what readers did since the last reset, so tests can
 * check that a rank read only the frames it owns. */
typedef struct ds_ckpt_io_stats {
    uint64_t bytes_read;      /* bytes pread from shard files (frames, index, header) */
    uint64_t frames_decoded;  /* frames decompressed */
    uint64_t raw_decoded;     /* fp32 bytes those frames held */
    uint64_t frames_verified; /* frames hashed by verify_range */
} ds_ckpt_io_stats;

void ds_ckpt_io_stats_get(ds_ckpt_io_stats *out);
void ds_ckpt_io_stats_reset(void);

/* ------------------------------------------------------------------ helpers */

/* Write all n bytes at the current position / read exactly n bytes at off,
 * retrying short transfers and EINTR. DS_ERR_IO names `path`; a read past
 * the end is DS_ERR_CORRUPT ("file ends at ..."). */
ds_status ds_ckpt_write_all(int fd, const void *buf, size_t n, const char *path);
ds_status ds_ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* DS_IO_CKPT_FILE_H */
