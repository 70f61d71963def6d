/* Pieces the shard-file writer (ckpt_file_write.c) and reader
 * (ckpt_file_read.c) share: byte order, record sizes, the shuffle filter. */
#ifndef DS_IO_CKPT_FILE_INTERNAL_H
#define DS_IO_CKPT_FILE_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "engine/io/ckpt_file.h"

#define CKPT_MAGIC "DSCKSHD1"
#define CKPT_END_MAGIC "DSCKEND1"
#define CKPT_SECTION_REC 32
#define CKPT_FRAME_REC 32
#define CKPT_INDEX_HEAD 8

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are little-endian and this code stores host words as they are"
#endif

static inline void ck_put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void ck_put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t ck_get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t ck_get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* One frame's index record. */
typedef struct ck_frame {
    uint64_t offset;
    uint32_t stored, elems;
    int64_t first;
    uint64_t hash;
} ck_frame;

typedef struct ck_section {
    uint32_t id, filter;
    int64_t lo, hi;
    uint64_t n_frames;
    ck_frame *frames; /* reader: points into the reader's frame array */
} ck_section;

/* The byte planes of n floats: plane b holds byte b of every value. */
static inline void ck_shuffle(const unsigned char *in, unsigned char *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[i] = in[4 * i];
        out[n + i] = in[4 * i + 1];
        out[2 * n + i] = in[4 * i + 2];
        out[3 * n + i] = in[4 * i + 3];
    }
}

static inline void ck_unshuffle(const unsigned char *in, unsigned char *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[4 * i] = in[i];
        out[4 * i + 1] = in[n + i];
        out[4 * i + 2] = in[2 * n + i];
        out[4 * i + 3] = in[3 * n + i];
    }
}

/* Counters (ckpt_file_read.c). */
void ds_ckpt_count_read(uint64_t bytes);

#endif /* DS_IO_CKPT_FILE_INTERNAL_H */
